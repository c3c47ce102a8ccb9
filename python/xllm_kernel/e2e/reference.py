"""The independent float64 model the runner is validated against: plain torch, one whole sequence at
a time (no cache, no paging, no catalog operation), rotary angles computed here from the position,
attention as an explicit masked softmax. It takes the runner's tokens (teacher forcing) and returns
the logits of every generated position, so each step is compared on the same context.

    logits = reference_logits(model, weights, prompt, generated)   # [len(generated), vocab] float64
    logits = reference_logits(model, weights, prompt, generated, kv_cache=runner.kv_cache_spec())
    logits = reference_logits(model, weights, prompt, generated, activations=runner.activation_spec())

With a quantized KV cache (kv_cache: {"dtype": "int8"} or {"dtype": "fp8", "k_scales": [...],
"v_scales": [...]}, one scale per layer) every layer's K (after rotary) and V go through the cache's
quantization and back, with the contract's float32 arithmetic (reshape_and_cache_quant,
paged_attention_quant), before the attention: validation then compares like with like, and
measures the kernels rather than the quantization error.

With activation-quantized linears (activations: Runner.activation_spec(), --weights w8a8-int8,
w8a8-fp8, w4a8) every such linear's input is rounded to the run's dtype (as the runner's producer
rounds it) and quantized per token with the quantization family's float32 arithmetic
(quantize_activations: int8 scale = amax / 127, q = int8(x * (127 / amax)); fp8 scale =
max(amax / 448, 1 / (448 * 512)), q = e4m3(x / scale)); the linear then multiplies q * scale_a in
float64 by the dequantized weight, which is scaled_mm's sum sum_k q_a q_w times scale_a s_w up to
the float32 epilogue's roundings.
"""

from __future__ import annotations

import torch

from xllm_kernel.e2e.config import ModelConfig
from xllm_kernel.e2e.model import lm_head

_CHUNK = 1 << 22  # elements of a float64 weight slice held at once (the LM head is 128k x 4096)
_FP8_MAX = 448.0  # float8_e4m3fn's largest value: the write saturates there


def _linear64(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, in] float64 times weight [out, in] (any dtype), converted to float64 a slice at a time."""
    rows = max(1, _CHUNK // weight.shape[1])
    parts = [x @ weight[r:r + rows].to(torch.float64).T for r in range(0, weight.shape[0], rows)]
    out = torch.cat(parts, dim=1)
    return out if bias is None else out + bias.to(torch.float64)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.to(torch.float64)


def _rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """NeoX rotary (halves) of x [T, heads, d] in float64."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[:, None] * inv[None, :]  # [T, d/2]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _int8_multiplier(amax: torch.Tensor) -> torch.Tensor:
    """127 / amax as one correctly rounded float32 division (the contract's m). Python's `127 / t`
    is t.reciprocal() * 127 in torch: two roundings, which put x * m on the other side of a .5 tie
    now and then."""
    return torch.full_like(amax, 127.0).div(amax)


def kv_round_trip(x: torch.Tensor, kv_cache: dict | None, which: str, layer: int) -> torch.Tensor:
    """x [T, kv_heads, head_dim] (float64) as the cache stores and attention reads it, in float64:
    the value rounded to float32, quantized as reshape_and_cache_quant quantizes it and dequantized
    as paged_attention_quant does (float(q) * scale in float32). `which`: "k" or "v"."""
    if not kv_cache:
        return x
    x32 = x.to(torch.float32)
    if kv_cache["dtype"] == "fp8":  # q = e4m3(x / scale): a true division, saturating at +-448
        scale = torch.tensor(kv_cache[f"{which}_scales"][layer], dtype=torch.float32)
        q = (x32 / scale).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
        return (q.to(torch.float32) * scale).to(torch.float64)
    if kv_cache["dtype"] == "int8":  # per (token, head) row: scale = amax / 127, q = int8(x * (127 / amax))
        amax = x32.abs().amax(-1, keepdim=True)
        q = torch.where(amax > 0, (x32 * _int8_multiplier(amax)).round().clamp(-128, 127), torch.zeros_like(x32))
        return (q * (amax / 127)).to(torch.float64)
    raise ValueError(f"reference_logits: kv_cache dtype must be fp8 or int8, got {kv_cache['dtype']!r}")


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def quantize_activations(x: torch.Tensor, activations: dict | None, role: str, shards: int = 1) -> torch.Tensor:
    """x [T, K] (float64) as an activation-quantized linear of `role` reads it, in float64: rounded
    to the run's dtype, quantized per token as per_token_quant (and the fused producers) quantize
    it, in float32, and dequantized as q * scale. `shards`: the row of each of that many equal
    column slices is quantized on its own (a row-parallel linear's input on each rank). The
    identity where `role` is not activation-quantized ("layers" covers qkv, o_proj, gate_up, down)."""
    kind = (activations or {}).get("lm_head" if role == "lm_head" else "layers")
    if kind is None:
        return x
    x32 = x.to(_DTYPES[activations["dtype"]]).to(torch.float32)
    parts = []
    for p in x32.chunk(shards, dim=-1) if shards > 1 else (x32,):
        amax = p.abs().amax(-1, keepdim=True)
        if kind == "int8":  # scale = amax / 127, q = int8(x * (127 / amax)) (0 where amax is 0)
            scale = amax / 127
            q = (p * torch.where(amax > 0, _int8_multiplier(amax), torch.zeros_like(amax))).round().clamp(-128, 127)
        elif kind == "fp8":  # scale = max(amax / 448, 1 / (448 * 512)), q = e4m3(x / scale), saturating
            scale = torch.maximum(amax / _FP8_MAX, torch.tensor(1 / (_FP8_MAX * 512), dtype=torch.float32))
            q = (p / scale).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32)
        else:
            raise ValueError(f"reference_logits: activations must be int8 or fp8, got {kind!r}")
        parts.append(q.to(torch.float64) * scale.to(torch.float64))
    return torch.cat(parts, dim=-1)


def reference_logits(m: ModelConfig, weights: dict[str, torch.Tensor], prompt: torch.Tensor,
                     generated: torch.Tensor, kv_cache: dict | None = None,
                     activations: dict | None = None) -> torch.Tensor:
    """Logits [len(generated), vocab] in float64 at the positions that predicted each generated
    token: the prompt's last position, then each generated token's but the last. `kv_cache`: the
    runner's quantized cache (Runner.kv_cache_spec()), None for a plain one. `activations`: how the
    runner's linears quantize their inputs (Runner.activation_spec()), None where none does."""
    tokens = torch.cat([prompt, generated[:-1]]).to(torch.int64)
    n, hd = tokens.numel(), m.head_dim
    h = weights["model.embed_tokens.weight"].index_select(0, tokens).to(torch.float64)
    positions = torch.arange(n)
    causal = positions[None, :] <= positions[:, None]
    if m.sliding_window > 0:
        causal &= positions[None, :] > positions[:, None] - m.sliding_window
    group = m.num_heads // m.num_kv_heads
    shards = (activations or {}).get("shards", 1)
    act = lambda x, role, shards=1: quantize_activations(x, activations, role, shards)  # noqa: E731
    for i in range(m.num_layers):
        w = lambda name: weights.get(f"model.layers.{i}.{name}")  # noqa: E731
        x = act(_rms_norm(h, w("input_layernorm.weight"), m.rms_norm_eps), "qkv")
        q = _linear64(x, w("self_attn.q_proj.weight"), w("self_attn.q_proj.bias")).view(n, m.num_heads, hd)
        k = _linear64(x, w("self_attn.k_proj.weight"), w("self_attn.k_proj.bias")).view(n, m.num_kv_heads, hd)
        v = _linear64(x, w("self_attn.v_proj.weight"), w("self_attn.v_proj.bias")).view(n, m.num_kv_heads, hd)
        q, k = _rotate(q, positions, m.rope_theta), _rotate(k, positions, m.rope_theta)
        k, v = kv_round_trip(k, kv_cache, "k", i), kv_round_trip(v, kv_cache, "v", i)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5
        scores = scores.masked_fill(~causal[None], float("-inf"))
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, m.num_heads * hd)
        h = h + _linear64(act(attn, "o_proj", shards), w("self_attn.o_proj.weight"))
        x = act(_rms_norm(h, w("post_attention_layernorm.weight"), m.rms_norm_eps), "gate_up")
        gate, up = _linear64(x, w("mlp.gate_proj.weight")), _linear64(x, w("mlp.up_proj.weight"))
        h = h + _linear64(act(torch.nn.functional.silu(gate) * up, "down", shards), w("mlp.down_proj.weight"))
    h = _rms_norm(h, weights["model.norm.weight"], m.rms_norm_eps)
    rows = act(h[prompt.numel() - 1:], "lm_head")
    return _linear64(rows, lm_head(m, weights))
