"""--weights: the runner's linear weights in linear_pack's canonical form, made deterministically
from the random weights, and the dequantized views of them the float64 reference reads.

    shards = [quantize_shards(model, weights, spec, r, world) for r in range(world)]
    loaded = load(model, weights, ..., linears=shards[rank], pack=bindings["linear_pack"].function)
    ref_model, ref_weights = reference_weights(model, weights, shards)   # W = (q - z) * s, float32

What is quantized is what the runner multiplies: the fused qkv and gate_up and the o_proj and down
of each rank (their shards under tensor parallel) and the LM head, so an fp8 block or an int4
group never straddles a fusion or a shard boundary. The reference gets the same W, formed in
float32 as linear's contract forms it, so validation measures the kernels, not the quantization.
For the activation-quantized schemes (w8a8-int8, w8a8-fp8, w4a8: scaled_mm) the weights are made
as int8's, per channel in e4m3 and as int4's, and the reference also quantizes each linear's input
per token as the runner does (reference.quantize_activations). How each scheme is made:
config.QUANTIZATION.
"""

from __future__ import annotations

import dataclasses

import torch

from xllm_kernel.e2e.config import FP8_BLOCK, ModelConfig, WeightSpec

_FLOAT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
_CHUNK = 1 << 22  # elements converted to float32 at once (the LM head is 128k x 4096)


@dataclasses.dataclass
class Quantized:
    """One [N, K] weight in linear_pack's canonical form: `weight` is the scheme's dtype (int8 for
    int8, int4, w8a8-int8 and w4a8, float8_e4m3fn for fp8 and w8a8-fp8), `scales` float32 ([N] int8,
    w8a8-int8 and w8a8-fp8, [ceil(N/128), ceil(K/128)] fp8, [N, K / group_size] int4 and w4a8; None
    for the float schemes), no zeros (symmetric)."""

    scheme: str
    weight: torch.Tensor
    scales: torch.Tensor | None
    group_size: int  # linear_pack's: the int4 (w4a8) group, 0 otherwise

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    def dequantize(self, r0: int, r1: int) -> torch.Tensor:
        """Rows [r0, r1) of W = q * s as float32 [r1 - r0, K]: the product rounded once, as linear forms it."""
        q = self.weight[r0:r1].to(torch.float32)
        if self.scales is None:
            return q
        if self.scheme in ("int8", "w8a8-int8", "w8a8-fp8"):  # one scale per channel
            return q * self.scales[r0:r1, None]
        k = q.shape[1]
        if self.scheme in ("int4", "w4a8"):
            return (q.view(q.shape[0], -1, self.group_size) * self.scales[r0:r1, :, None]).view(q.shape[0], k)
        block_rows = self.scales[torch.arange(r0, r1) // FP8_BLOCK]  # fp8: [rows, ceil(K / 128)]
        return q * block_rows.repeat_interleave(FP8_BLOCK, dim=1)[:, :k]

    def pack(self, pack, device: torch.device) -> torch.Tensor:
        """The packed tensor on `device`, by `pack` (the side's linear_pack)."""
        scales = None if self.scales is None else self.scales.to(device)
        return pack(self.weight.to(device), scales, None, self.scheme, self.group_size)


def _rows(n: int, k: int, multiple: int = 1) -> int:
    return max(multiple, _CHUNK // max(1, k) // multiple * multiple)


def quantize(w: torch.Tensor, scheme: str, group_size: int = 128) -> Quantized:
    """`w` [N, K] (any float dtype) in `scheme`'s canonical form (config.QUANTIZATION), a slice of
    rows at a time. Deterministic: the same weights give the same bits on every side and rank."""
    n, k = w.shape
    if scheme in _FLOAT:
        return Quantized(scheme, w.to(_FLOAT[scheme]).contiguous(), None, 0)
    if scheme in ("w8a8-int8", "w4a8"):  # the weights of int8 and int4; scaled_mm takes them
        same = quantize(w, {"w8a8-int8": "int8", "w4a8": "int4"}[scheme], group_size)
        return dataclasses.replace(same, scheme=scheme)
    if scheme == "w8a8-fp8":  # e4m3fn with a scale per output channel
        q, s = torch.empty((n, k), dtype=torch.float8_e4m3fn), torch.empty(n, dtype=torch.float32)
        step = _rows(n, k)
        for r in range(0, n, step):
            x = w[r:r + step].to(torch.float32)
            amax = x.abs().amax(dim=1)
            scale = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
            q[r:r + step] = (x / scale[:, None]).clamp_(-448, 448).to(torch.float8_e4m3fn)
            s[r:r + step] = scale
        return Quantized("w8a8-fp8", q, s, 0)
    if scheme == "int8":
        q, s = torch.empty((n, k), dtype=torch.int8), torch.empty(n, dtype=torch.float32)
        step = _rows(n, k)
        for r in range(0, n, step):
            x = w[r:r + step].to(torch.float32)
            amax = x.abs().amax(dim=1)
            scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
            q[r:r + step] = (x / scale[:, None]).round_().clamp_(-127, 127).to(torch.int8)
            s[r:r + step] = scale
        return Quantized("int8", q, s, 0)
    if scheme == "int4":
        g = group_size
        if k % g:
            raise ValueError(f"int4, w4a8: group_size {g} must divide K = {k}")
        q, s = torch.empty((n, k), dtype=torch.int8), torch.empty((n, k // g), dtype=torch.float32)
        step = _rows(n, k)
        for r in range(0, n, step):
            x = w[r:r + step].to(torch.float32)
            x = x.view(x.shape[0], k // g, g)
            amax = x.abs().amax(dim=2)
            scale = torch.where(amax > 0, amax / 8, torch.ones_like(amax))
            q[r:r + step] = (x / scale[..., None]).round_().clamp_(-8, 7).to(torch.int8).view(-1, k)
            s[r:r + step] = scale
        return Quantized("int4", q, s, g)
    if scheme == "fp8":
        b = FP8_BLOCK
        kb = -(-k // b)
        q, s = torch.empty((n, k), dtype=torch.float8_e4m3fn), torch.empty((-(-n // b), kb), dtype=torch.float32)
        step = _rows(n, k, b)
        for r in range(0, n, step):
            x = w[r:r + step].to(torch.float32)
            rows = x.shape[0]
            padded = torch.nn.functional.pad(x.abs(), (0, kb * b - k, 0, -(-rows // b) * b - rows))
            amax = padded.view(-(-rows // b), b, kb, b).amax(dim=(1, 3))  # [row blocks, K blocks]
            scale = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
            full = scale.repeat_interleave(b, dim=0)[:rows].repeat_interleave(b, dim=1)[:, :k]
            q[r:r + step] = (x / full).clamp_(-448, 448).to(torch.float8_e4m3fn)
            s[r // b:r // b + scale.shape[0]] = scale
        return Quantized("fp8", q, s, 0)
    raise ValueError(f"unknown weight scheme {scheme!r}")


def quantize_shards(m: ModelConfig, weights: dict[str, torch.Tensor], spec: WeightSpec, rank: int = 0,
                    world_size: int = 1) -> dict:
    """Rank `rank`'s linears (model.fused_linears) quantized: {"layers": [{role: Quantized}],
    "lm_head": Quantized}."""
    from xllm_kernel.e2e.model import fused_linears

    layers, head = fused_linears(m, weights, rank, world_size)
    out = {"layers": [{role: quantize(w, spec.scheme_for(role), spec.group_size) for role, w in layer.items()}
                      for layer in layers],
           "lm_head": quantize(head, spec.scheme_for("lm_head"), spec.group_size)}
    return out


class Dequantized:
    """A float32 [rows, cols] weight W assembled from pieces of quantized tensors (a rank's fused
    shard holds part of a Hugging Face tensor), dequantized a slice of rows at a time: what
    reference._linear64 reads (`shape`, `w[r0:r1]`)."""

    def __init__(self, shape: tuple[int, int]):
        self.shape = torch.Size(shape)
        self._pieces: list[tuple[Quantized, int, int, int, int]] = []

    def place(self, src: Quantized, src_row: int, rows: int, row: int, col: int) -> None:
        """Rows [src_row, src_row + rows) of src go to rows [row, row + rows) from column col."""
        self._pieces.append((src, src_row, rows, row, col))

    def __getitem__(self, index: slice) -> torch.Tensor:
        r0, r1, step = index.indices(self.shape[0])
        if step != 1:
            raise IndexError("Dequantized: only contiguous row slices")
        out = torch.zeros((max(0, r1 - r0), self.shape[1]), dtype=torch.float32)
        for src, src_row, rows, row, col in self._pieces:
            a, b = max(r0, row), min(r1, row + rows)
            if a < b:
                part = src.dequantize(src_row + a - row, src_row + b - row)
                out[a - r0:b - r0, col:col + part.shape[1]] = part
        return out


def reference_weights(m: ModelConfig, weights: dict[str, torch.Tensor],
                      shards: list[dict]) -> tuple[ModelConfig, dict]:
    """The model and weights the float64 reference runs: `weights` with every linear replaced by
    the W of every rank's quantized shards (the LM head from rank 0's; the ranks' are equal), in
    the Hugging Face names. A tied LM head gets its own entry (the embedding stays unquantized)."""
    world = len(shards)
    hd = m.head_dim
    q, kv, inter, h = m.num_heads // world * hd, m.num_kv_heads // world * hd, m.intermediate_size // world, \
        m.hidden_size
    out = dict(weights)
    for i in range(m.num_layers):
        p = f"model.layers.{i}."
        views = {"self_attn.q_proj.weight": Dequantized((q * world, h)),
                 "self_attn.k_proj.weight": Dequantized((kv * world, h)),
                 "self_attn.v_proj.weight": Dequantized((kv * world, h)),
                 "self_attn.o_proj.weight": Dequantized((h, q * world)),
                 "mlp.gate_proj.weight": Dequantized((inter * world, h)),
                 "mlp.up_proj.weight": Dequantized((inter * world, h)),
                 "mlp.down_proj.weight": Dequantized((h, inter * world))}
        for r, shard in enumerate(shards):
            layer = shard["layers"][i]
            views["self_attn.q_proj.weight"].place(layer["qkv"], 0, q, r * q, 0)
            views["self_attn.k_proj.weight"].place(layer["qkv"], q, kv, r * kv, 0)
            views["self_attn.v_proj.weight"].place(layer["qkv"], q + kv, kv, r * kv, 0)
            views["self_attn.o_proj.weight"].place(layer["o_proj"], 0, h, 0, r * q)
            views["mlp.gate_proj.weight"].place(layer["gate_up"], 0, inter, r * inter, 0)
            views["mlp.up_proj.weight"].place(layer["gate_up"], inter, inter, r * inter, 0)
            views["mlp.down_proj.weight"].place(layer["down"], 0, h, 0, r * inter)
        out.update({p + k: v for k, v in views.items()})
    head = Dequantized(tuple(shards[0]["lm_head"].shape))
    head.place(shards[0]["lm_head"], 0, head.shape[0], 0, 0)
    out["lm_head.weight"] = head
    return dataclasses.replace(m, tie_word_embeddings=False), out
