"""The public operator API, one module per group (xllm_kernel.ops.<group>).

    import xllm_kernel
    from xllm_kernel.ops import rms_norm

    xllm_kernel.initialize(device="cpu")
    y = rms_norm(x, weight, 1e-6)
"""

from xllm_kernel.ops.normalization import fused_add_rms_norm, layer_norm, rms_norm

__all__ = ["rms_norm", "fused_add_rms_norm", "layer_norm"]
