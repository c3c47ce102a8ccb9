"""The public ops through torch.ops.xllm_kernel.* and the prepared functions: opcheck (schema,
fake, aliasing, AOT dispatch) on sample inputs, and results against a float64 reference."""

from __future__ import annotations

import pytest
import torch

from xllm_kernel.ops import fused_add_rms_norm, layer_norm, rms_norm

ops = torch.ops.xllm_kernel
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def tol(dtype):
    # One rounding to the output dtype on top of fp32 accumulation: a few ulps of that dtype.
    return {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]


def reference_rms_norm(x, w, eps):
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def reference_layer_norm(x, w, b, eps):
    centered = x.double() - x.double().mean(-1, keepdim=True)
    y = centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    return y if b is None else y + b.double()


def inputs(shape, dtype, layout):
    """`layout`: contiguous, or rows with a stride that cannot be merged (every other row of a 3-D
    tensor), or zero rows."""
    g = torch.Generator().manual_seed(0)
    if layout == "empty":
        return torch.empty((0, shape[-1]), dtype=dtype)
    if layout == "strided":
        big = torch.randn((shape[0], 2 * shape[1] + 1, shape[2]), generator=g).to(dtype)
        return big[:, ::2, :][:, : shape[1], :]
    return torch.randn(shape, generator=g).to(dtype)


CASES = [
    pytest.param(torch.float32, "same", "contiguous", (3, 64), id="f32"),
    pytest.param(torch.bfloat16, "float32", "strided", (2, 3, 100), id="bf16-f32weight-strided"),
    pytest.param(torch.float16, "same", "contiguous", (2, 5, 33), id="f16-3d-tail"),
    pytest.param(torch.bfloat16, "same", "empty", (0, 16), id="bf16-zero-rows"),
]


def weight_for(x, weight_dtype, hidden):
    g = torch.Generator().manual_seed(1)
    dtype = x.dtype if weight_dtype == "same" else torch.float32
    return (torch.rand(hidden, generator=g) + 0.5).to(dtype)


@pytest.mark.parametrize("dtype,weight_dtype,layout,shape", CASES)
def test_rms_norm(cpu, dtype, weight_dtype, layout, shape):
    x = inputs(shape, dtype, layout)
    w = weight_for(x, weight_dtype, shape[-1])
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6))
    y = rms_norm(x, w, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y.double(), reference_rms_norm(x, w, 1e-6), atol=tol(dtype), rtol=tol(dtype))
    assert torch.equal(cpu["rms_norm"].function(x, w, 1e-6), y)


@pytest.mark.parametrize("dtype,weight_dtype,layout,shape", CASES)
def test_fused_add_rms_norm(cpu, dtype, weight_dtype, layout, shape):
    # Fresh tensors for each call (clone() would make the strided layout contiguous).
    def fresh():
        return inputs(shape, dtype, layout), inputs(shape, dtype, "contiguous" if layout != "empty" else layout).flip(-1)

    x, residual = fresh()
    w = weight_for(x, weight_dtype, shape[-1])
    torch.library.opcheck(ops.fused_add_rms_norm.default, (*fresh(), w, 1e-6))

    expected_residual = (x.float() + residual.float()).to(dtype)
    expected = reference_rms_norm(expected_residual, w, 1e-6)
    assert fused_add_rms_norm(x, residual, w, 1e-6) is None
    assert torch.equal(residual, expected_residual)
    torch.testing.assert_close(x.double(), expected, atol=tol(dtype), rtol=tol(dtype))

    # The prepared function writes the caller's tensors in place, as the op does.
    x2, residual2 = fresh()
    assert cpu["fused_add_rms_norm"].function(x2, residual2, w, 1e-6) is None
    assert torch.equal(x2, x) and torch.equal(residual2, residual)


@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dtype,weight_dtype,layout,shape", CASES)
def test_layer_norm(cpu, dtype, weight_dtype, layout, shape, with_bias):
    x = inputs(shape, dtype, layout)
    w = weight_for(x, weight_dtype, shape[-1])
    b = torch.randn(shape[-1], generator=torch.Generator().manual_seed(2)).to(w.dtype) if with_bias else None
    torch.library.opcheck(ops.layer_norm.default, (x, w, b, 1e-5))
    y = layer_norm(x, w, b, 1e-5)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.double(), reference_layer_norm(x, w, b, 1e-5), atol=tol(dtype) * 2, rtol=tol(dtype))
    assert torch.equal(cpu["layer_norm"].function(x, w, b, 1e-5), y)


def test_prepared_function_takes_arguments_like_torch_ops(cpu):
    x, w = torch.randn(2, 8), torch.rand(8)
    f = cpu["layer_norm"].function
    assert torch.equal(f(x, w, None, 1e-5), f(input=x, weight=w, bias=None, eps=1e-5))
    with pytest.raises(RuntimeError, match="missing value for argument 'eps'"):
        f(x, w, None)
    with pytest.raises(RuntimeError, match="expected at most 4 argument"):
        f(x, w, None, 1e-5, 1)


def test_bad_arguments_get_the_bridge_error(cpu):
    x = torch.randn(2, 8)
    for call in (lambda: rms_norm(x, torch.ones(7), 1e-6), lambda: cpu["rms_norm"].function(x, torch.ones(7), 1e-6)):
        with pytest.raises(RuntimeError, match="rms_norm: weight must have 8 elements"):
            call()
