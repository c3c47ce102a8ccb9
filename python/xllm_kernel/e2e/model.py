"""The runner's decoder: a Llama-family model (Llama, Mistral's sliding window, Qwen2's qkv bias)
over a paged KV cache, every non-GEMM step a catalog operation, GEMMs torch's (F.linear) or, with
--weights, the library's linear on weights packed once at load.

    import xllm_kernel
    bindings = xllm_kernel.initialize("cpu")
    weights = make_weights(model_config("tiny"), torch.bfloat16, seed=0)
    runner = Runner(model, weights, work, ops=library_ops(bindings), device=torch.device("cpu"))
    result = runner.generate(prompts)          # tokens [batch, output_len], logits per step

    shards = quantize.quantize_shards(model, weights, spec)              # --weights int8
    loaded = load(model, weights, device=..., dtype=..., linears=shards, pack=bindings["linear_pack"].function)
    runner = Runner(model, loaded, work, ops=library_ops(bindings, linear=True), ...)

    # --weights w8a8-int8 (w8a8-fp8, w4a8): activations quantized per token, scaled_mm
    spec = weight_spec("w8a8-int8", None, 128)
    shards = quantize.quantize_shards(model, weights, spec)
    loaded = load(model, weights, ..., linears=shards, pack=bindings["linear_pack"].function)
    runner = Runner(model, loaded, work, ops=library_ops(bindings, weights=spec), ...)

    # --kv-cache-dtype int8 (or fp8): one-byte caches with float32 scales
    runner = Runner(model, weights, work, ops=library_ops(bindings, kv_cache_dtype="int8"), ..., kv_cache_dtype="int8")

Per layer: rms_norm (first layer) or fused_add_rms_norm (residual add + norm), the fused qkv GEMM
(+ bias for Qwen2), rotary_embedding on the q and k slices of it in place, reshape_and_cache into
the paged cache, paged_attention over it, o_proj, fused_add_rms_norm, gate_up GEMM, silu_and_mul,
down GEMM; then the final norm, the LM head on each sequence's last row, and `sample`. With a
quantized KV cache (kv_cache_dtype fp8 or int8) reshape_and_cache_quant and paged_attention_quant
take the place of reshape_and_cache and paged_attention: fp8 caches with a k_scale and v_scale per
layer, calibrated on the runner's first prefill unless given (kv_scales); int8 caches with a scale
per (slot, KV head) that the write stores.

Activation-quantized linears (--weights w8a8-int8, w8a8-fp8, w4a8; the LM head by its own scheme):
the norm before qkv is rms_norm_per_token_quant (first layer: no residual yet) or
fused_add_rms_norm_per_token_quant (residual += h in place, as fused_add_rms_norm, then the norm
quantized per token: int8, or e4m3 for w8a8-fp8), whose (q, scale) feed scaled_mm for qkv; the one
before gate_up likewise; silu_and_mul_per_token_quant feeds scaled_mm for down; o_proj (on the
attention's output) and the LM head (on the final norm's) are linear_dynamic_quant. scaled_mm's
out_dtype is the run's dtype. The residual stream and the normalized rows are those of the plain
path bit for bit: the fused producers round them as the unfused operations do before quantizing.

Tensor parallel (world > 1): qkv and gate_up are column-parallel (each rank its heads and its
slice of the intermediate size), o_proj and down row-parallel followed by an all-reduce; the
embedding and the LM head are replicated, so every rank samples the same tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from xllm_kernel.e2e.config import (ACTIVATION_SCHEMES, ModelConfig, WeightSpec, Workload, check_kv_cache_dtype,
                                    kv_cache_operations, weight_operations)

# The catalog operations the runner calls, in layer order (kv_cache_operations(OPERATIONS, kv_cache_dtype):
# those of a quantized KV cache).
OPERATIONS = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "reshape_and_cache", "paged_attention",
              "silu_and_mul", "sample")
# With --weights, also these: linear_pack at load, linear for every GEMM (a weight-only scheme; an
# activation-quantized one: config.weight_operations).
LINEAR_OPERATIONS = ("linear_pack", "linear")
# The GEMM steps, called with role= (qkv, o_proj, gate_up, down, lm_head): the profile names each
# call <step>.<role>.
ROLE_OPERATIONS = ("linear", "scaled_mm", "linear_dynamic_quant")
_ACTIVATION_DTYPES = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
_KV_STORAGE = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
_FP8_MAX = 448.0  # the largest float8_e4m3fn value: an fp8 scale maps the calibrated amax onto it


def _seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def _randn(name: str, shape: tuple[int, ...], seed: int, std: float, dtype: torch.dtype, mean: float = 0.0):
    """Deterministic normal weights: a generator per tensor (seeded by name), filled in chunks of
    rows so that a 128k x 4096 embedding needs no float32 copy of itself."""
    g = torch.Generator().manual_seed(_seed(seed, name))
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(shape[0], -1) if len(shape) > 1 else out.view(1, -1)
    rows = max(1, (1 << 23) // max(1, flat.shape[1]))
    for r in range(0, flat.shape[0], rows):
        chunk = torch.randn(flat[r:r + rows].shape, generator=g, dtype=torch.float32)
        flat[r:r + rows].copy_(chunk.mul_(std).add_(mean))
    return out


def make_weights(m: ModelConfig, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """Random weights under Hugging Face names (q_proj, k_proj, ... separate), so that the same
    tensors load into transformers' model. Linear weights N(0, 0.02), as transformers initializes
    them; norm weights 1 + N(0, 0.1) so that a wrong weight shows."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    w = {"model.embed_tokens.weight": _randn("embed", (m.vocab_size, m.hidden_size), seed, 1.0, dtype),
         "model.norm.weight": _randn("norm", (m.hidden_size,), seed, 0.1, dtype, 1.0)}
    if not m.tie_word_embeddings:
        w["lm_head.weight"] = _randn("lm_head", (m.vocab_size, m.hidden_size), seed, 0.02, dtype)
    for i in range(m.num_layers):
        p = f"model.layers.{i}."
        shapes = {"self_attn.q_proj.weight": (q, m.hidden_size), "self_attn.k_proj.weight": (kv, m.hidden_size),
                  "self_attn.v_proj.weight": (kv, m.hidden_size), "self_attn.o_proj.weight": (m.hidden_size, q),
                  "mlp.gate_proj.weight": (m.intermediate_size, m.hidden_size),
                  "mlp.up_proj.weight": (m.intermediate_size, m.hidden_size),
                  "mlp.down_proj.weight": (m.hidden_size, m.intermediate_size)}
        if m.qkv_bias:
            shapes.update({"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,),
                           "self_attn.v_proj.bias": (kv,)})
        for name, shape in shapes.items():
            w[p + name] = _randn(p + name, shape, seed, 0.02, dtype)
        for name in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            w[p + name] = _randn(p + name, (m.hidden_size,), seed, 0.1, dtype, 1.0)
    return w


def lm_head(m: ModelConfig, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    return weights["model.embed_tokens.weight" if m.tie_word_embeddings else "lm_head.weight"]


def fused_linears(m: ModelConfig, weights: dict[str, torch.Tensor], rank: int = 0,
                  world_size: int = 1) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
    """A rank's linear weights as the runner multiplies them, in the weights' dtype on their
    device: per layer {qkv, o_proj, gate_up, down} (qkv and gate_up fused and this rank's rows:
    its heads, its slice of the intermediate size; o_proj and down this rank's columns), and the
    LM head (replicated)."""
    hd = m.head_dim
    q_heads, kv_heads, inter = m.num_heads // world_size, m.num_kv_heads // world_size, \
        m.intermediate_size // world_size

    def rows(t: torch.Tensor, per: int) -> torch.Tensor:  # this rank's slice of output features
        return t[rank * per:(rank + 1) * per]

    layers = []
    for i in range(m.num_layers):
        g = lambda n: weights[f"model.layers.{i}.{n}"]  # noqa: E731
        layers.append({
            "qkv": torch.cat([rows(g("self_attn.q_proj.weight"), q_heads * hd),
                              rows(g("self_attn.k_proj.weight"), kv_heads * hd),
                              rows(g("self_attn.v_proj.weight"), kv_heads * hd)]),
            "o_proj": g("self_attn.o_proj.weight")[:, rank * q_heads * hd:(rank + 1) * q_heads * hd].contiguous(),
            "gate_up": torch.cat([rows(g("mlp.gate_proj.weight"), inter), rows(g("mlp.up_proj.weight"), inter)]),
            "down": g("mlp.down_proj.weight")[:, rank * inter:(rank + 1) * inter].contiguous()})
    return layers, lm_head(m, weights)


@dataclasses.dataclass
class Loaded:
    """The weights one rank's runner holds, on its device: the embedding, the norms, the qkv bias
    and the linears (tensors of the run's dtype for F.linear, or packed tensors for linear)."""

    embed: torch.Tensor
    final_norm: torch.Tensor
    head: torch.Tensor
    layers: list[dict]
    packed: bool = False
    # The dtype the linears' inputs are quantized to per token (int8, float8_e4m3fn: scaled_mm and
    # linear_dynamic_quant), None for weight-only linears: the layers' and the LM head's.
    layer_activations: torch.dtype | None = None
    head_activations: torch.dtype | None = None

    def linear_tensors(self) -> list[torch.Tensor]:
        return [layer[k] for layer in self.layers for k in ("qkv", "o", "gate_up", "down")] + [self.head]


def load(m: ModelConfig, weights: dict[str, torch.Tensor], *, device: torch.device, dtype: torch.dtype, rank: int = 0,
         world_size: int = 1, linears: dict | None = None, pack: Callable | None = None) -> Loaded:
    """The runner's weights for `rank`. With `linears` (quantize.quantize_shards of this rank),
    each linear is packed once here by `pack` (the side's linear_pack) on `device`."""
    to = dict(device=device, dtype=dtype)
    hd = m.head_dim
    q_heads, kv_heads = m.num_heads // world_size, m.num_kv_heads // world_size
    if linears is None:
        fused, head = fused_linears(m, weights, rank, world_size)
        fused = [{k: w.to(**to) for k, w in layer.items()} for layer in fused]
        head = head.to(**to)
    else:
        fused = [{k: q.pack(pack, device) for k, q in layer.items()} for layer in linears["layers"]]
        head = linears["lm_head"].pack(pack, device)
    layers = []
    for i, f in enumerate(fused):
        g = lambda n: weights[f"model.layers.{i}.{n}"]  # noqa: E731
        bias = None
        if m.qkv_bias:
            bias = torch.cat([g(f"self_attn.{x}_proj.bias")[rank * n:(rank + 1) * n]
                              for x, n in (("q", q_heads * hd), ("k", kv_heads * hd), ("v", kv_heads * hd))]).to(**to)
        layers.append({"input_norm": g("input_layernorm.weight").to(**to), "qkv": f["qkv"], "qkv_bias": bias,
                       "o": f["o_proj"], "post_norm": g("post_attention_layernorm.weight").to(**to),
                       "gate_up": f["gate_up"], "down": f["down"]})
    acts = {}
    if linears is not None:
        acts = {"layer_activations": _activations(linears["layers"][0]["qkv"].scheme) if linears["layers"] else None,
                "head_activations": _activations(linears["lm_head"].scheme)}
    return Loaded(embed=weights["model.embed_tokens.weight"].to(**to), final_norm=weights["model.norm.weight"].to(**to),
                  head=head, layers=layers, packed=linears is not None, **acts)


def _activations(scheme: str) -> torch.dtype | None:
    a = ACTIVATION_SCHEMES.get(scheme)
    return None if a is None else _ACTIVATION_DTYPES[a]


def rope_cache(m: ModelConfig, positions: int) -> torch.Tensor:
    """[positions, head_dim] float32: cos then sin of position * theta^(-2i/d) (vLLM's layout)."""
    inv = 1.0 / (m.rope_theta ** (torch.arange(0, m.head_dim, 2, dtype=torch.float64) / m.head_dim))
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=1).to(torch.float32)


# ---- the operations the model calls --------------------------------------------------------------

def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, role: str = "") -> torch.Tensor:
    """torch's GEMM (F.linear); `role` names it for the profile (qkv, o_proj, gate_up, down, lm_head)."""
    return F.linear(x, weight, bias)


def packed_linear(fn: Callable) -> Callable:
    """The library's linear `fn` (a binding or torch.ops.xllm_kernel.linear) with linear's signature
    above: `weight` is then the packed tensor."""
    def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None, role: str = "") -> torch.Tensor:
        return fn(x, packed, bias)
    return linear


@dataclasses.dataclass(frozen=True)
class Ops:
    """What one forward calls: the catalog operations and the torch parts (GEMM, embedding,
    all-reduce). A field per step, so that the profiling pass wraps each with a timer and the timed
    pass calls them bare."""

    fused_add_rms_norm: Callable
    rotary_embedding: Callable
    sample: Callable
    # Weight-only linears (or torch's): the plain norm and activation; activation-quantized ones
    # (--weights w8a8-*, w4a8): the producers that quantize per token as they write.
    rms_norm: Callable | None = None
    silu_and_mul: Callable | None = None
    rms_norm_per_token_quant: Callable | None = None
    fused_add_rms_norm_per_token_quant: Callable | None = None
    silu_and_mul_per_token_quant: Callable | None = None
    # The cache's write and attention: the plain pair, or (a quantized KV cache) the quantized one.
    reshape_and_cache: Callable | None = None
    paged_attention: Callable | None = None
    reshape_and_cache_quant: Callable | None = None
    paged_attention_quant: Callable | None = None
    linear: Callable = linear
    # GEMMs on quantized activations (role= as linear's): scaled_mm(a, packed, scale_a, azp, bias,
    # out_dtype) and linear_dynamic_quant(input, packed, bias).
    scaled_mm: Callable | None = None
    linear_dynamic_quant: Callable | None = None
    embedding: Callable = F.embedding
    all_reduce: Callable | None = None
    linear_step: str = "gemm"  # the profile's name of the GEMMs: gemm.<role> (torch's), linear.<role> (the library's)


def with_role(fn: Callable) -> Callable:
    """`fn` (a binding or a torch.ops.xllm_kernel operation) taking role= for the profile, as linear does."""
    def call(*args, role: str = ""):
        return fn(*args)
    return call


def library_ops(bindings, *, dispatcher: bool = False, all_reduce: Callable | None = None,
                linear: bool = False, kv_cache_dtype: str = "auto", weights: WeightSpec | None = None) -> Ops:
    """The published bindings (the prepared functions, one indirect call each); with dispatcher,
    torch.ops.xllm_kernel.* (what torch.compile traces through the fakes), the same bindings.
    With linear, the GEMMs are the library's linear (on packed weights: load(linears=...)); with
    `weights` (--weights), the operations its forward calls (config.weight_operations: linear,
    or for activation-quantized schemes the quantizing producers, scaled_mm and
    linear_dynamic_quant). With kv_cache_dtype fp8 or int8, the quantized cache's write and attention."""
    ops = kv_cache_operations(OPERATIONS, kv_cache_dtype)
    if weights is not None:
        ops = tuple(op for op in weight_operations(ops, weights) if op != "linear_pack")
    elif linear:
        ops += ("linear",)
    if dispatcher:
        ns = torch.ops.xllm_kernel
        fns = {op: getattr(ns, op).default for op in ops}
    else:
        fns = {op: bindings[op].function for op in ops}
    if "linear" in fns:
        fns["linear"] = packed_linear(fns["linear"])
    for op in ("scaled_mm", "linear_dynamic_quant"):
        if op in fns:
            fns[op] = with_role(fns[op])
    if weights is not None or linear:
        fns["linear_step"] = "linear"
    return Ops(**fns, all_reduce=all_reduce)


class Profiler:
    """Per-step times of one pass: each call timed on the host (perf_counter around the call; CPU
    calls are synchronous) or, on a GPU, by a pair of CUDA events read after the pass."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._events: list[tuple[str, object, object]] = []

    def wrap(self, name: str, fn: Callable) -> Callable:
        if self.cuda:
            def timed(*args, **kwargs):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = fn(*args, **kwargs)
                end.record()
                self._events.append((name, start, end))
                return out
        else:
            def timed(*args, **kwargs):
                t0 = time.perf_counter()
                out = fn(*args, **kwargs)
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
                self.calls[name] = self.calls.get(name, 0) + 1
                return out
        return timed

    def collect(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            for name, start, end in self._events:
                self.seconds[name] = self.seconds.get(name, 0.0) + start.elapsed_time(end) / 1000.0
                self.calls[name] = self.calls.get(name, 0) + 1
            self._events.clear()

    def ops(self, ops: Ops) -> Ops:
        """`ops` with every step timed; GEMMs by their role (the `name` the model passes):
        <linear_step>.<role> for linear (gemm: torch's, linear: the library's), scaled_mm.<role> and
        linear_dynamic_quant.<role>."""
        fields = {f.name: getattr(ops, f.name) for f in dataclasses.fields(ops)}
        wrapped = {k: (self.wrap(k, v) if callable(v) and k not in ROLE_OPERATIONS else v) for k, v in fields.items()}
        wrappers: dict[str, Callable] = {}

        def by_role(step: str, fn: Callable) -> Callable:
            def timed(*args, role: str = "gemm"):
                name = f"{step}.{role}"
                timed_fn = wrappers.get(name)
                if timed_fn is None:
                    timed_fn = wrappers[name] = self.wrap(name, lambda *a: fn(*a, role=role))
                return timed_fn(*args)
            return timed

        linear = ops.linear
        wrapped["linear"] = by_role(ops.linear_step, lambda x, w, b=None, role="gemm": linear(x, w, b, role=role))
        for op in ("scaled_mm", "linear_dynamic_quant"):
            if fields[op] is not None:
                wrapped[op] = by_role(op, fields[op])
        return Ops(**wrapped)


# ---- the runner -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Batch:
    """One forward's metadata: flattened tokens of every sequence and the paged-cache view."""

    tokens: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    slot_mapping: torch.Tensor  # int64 [T]
    query_start_loc: torch.Tensor  # int32 [S + 1]
    seq_lens: torch.Tensor  # int32 [S]
    last_rows: torch.Tensor  # int64 [S]: each sequence's last row (the one whose logits are sampled)


@dataclasses.dataclass
class Generation:
    tokens: torch.Tensor  # int64 [S, output_len]
    logits: list[torch.Tensor]  # output_len tensors [S, vocab] float32 (when recorded)
    prefill_seconds: float
    decode_seconds: float


def _rows(rows: Sequence[int] | None, batch: int) -> tuple[int, ...]:
    if rows is None:
        return tuple(range(batch))
    out = tuple(int(i) for i in rows)
    if not out or len(set(out)) != len(out) or not all(0 <= i < batch for i in out):
        raise ValueError(f"Runner: rows must be distinct sequences of the batch of {batch}, got {list(rows)}")
    return out


def calibrating(write: Callable, all_ranks: bool = False) -> Callable:
    """reshape_and_cache_quant that first sets an fp8 cache's per-tensor scales from the rows it
    writes: scale = amax / 448 in float32 (1 where the amax is 0), for K and V apart. all_ranks
    (tensor parallel): the amax over every rank's KV heads, so that a layer has one scale, as the
    float64 reference (the whole model) assumes."""
    def calibrate_and_write(key, value, key_cache, value_cache, slot_mapping, key_scale, value_scale):
        for rows, scale in ((key, key_scale), (value, value_scale)):
            amax = rows.abs().amax().to(torch.float32).reshape(1)
            if all_ranks:
                import torch.distributed as td

                td.all_reduce(amax, op=td.ReduceOp.MAX)
            scale.copy_(torch.where(amax > 0, amax / _FP8_MAX, torch.ones_like(amax)).reshape(scale.shape))
        return write(key, value, key_cache, value_cache, slot_mapping, key_scale, value_scale)
    return calibrate_and_write


class Runner:
    """Prefill then decode steps of a static batch into a paged cache with shuffled blocks."""

    def __init__(self, m: ModelConfig, weights: dict[str, torch.Tensor] | Loaded, work: Workload, *, ops: Ops,
                 device: torch.device, dtype: torch.dtype, rank: int = 0, world_size: int = 1,
                 rows: Sequence[int] | None = None, kv_cache_dtype: str = "auto",
                 kv_scales: tuple[Sequence[float], Sequence[float]] | None = None):
        """`weights`: the Hugging Face tensors (loaded here for F.linear), or what load() made
        (shared by runners of several workloads; packed linears need it). `rows`: run only these
        sequences of `work` (the batch invariance check runs each alone): their prompts, sampling
        seeds and cache blocks are the ones they get in the whole batch (the cache keeps the whole
        batch's size, so that a sequence reads and writes the same block ids), and the batch's
        sequence i is this runner's row i. `kv_cache_dtype`: auto (caches of `dtype`), fp8 or int8
        (`ops` must then hold the quantized write and attention: library_ops(kv_cache_dtype=...)).
        `kv_scales`: fp8's (k_scales, v_scales), one float per layer; without them the first
        prefill (or fill_cache) calibrates them (kv_cache_scales() gives them to the next runner)."""
        self.rows = _rows(rows, len(work.prompt_lens))
        self.whole = work
        if rows is not None:
            work = dataclasses.replace(work, prompt_lens=tuple(work.prompt_lens[i] for i in self.rows),
                                       num_blocks=work.cache_blocks())
        self.m, self.work, self.ops, self.device, self.dtype = m, work, ops, device, dtype
        self.rank, self.world = rank, world_size
        self.q_heads = m.num_heads // world_size
        self.kv_heads = m.num_kv_heads // world_size
        self.inter = m.intermediate_size // world_size
        hd = m.head_dim
        if not isinstance(weights, Loaded):
            weights = load(m, weights, device=device, dtype=dtype, rank=rank, world_size=world_size)
        self.embed, self.head, self.final_norm = weights.embed, weights.head, weights.final_norm
        self.layers = weights.layers
        self.layer_activations, self.head_activations = weights.layer_activations, weights.head_activations
        longest = max(work.prompt_lens) + work.output_len
        self.cos_sin = rope_cache(m, longest).to(device)
        self.scale = hd ** -0.5
        # The paged cache: blocks handed to the sequences from a free list shuffled with the seed.
        num_blocks = work.cache_blocks()
        shape = (num_blocks, work.block_size, self.kv_heads, hd)
        check_kv_cache_dtype(kv_cache_dtype)
        self.kv_cache_dtype = kv_cache_dtype
        storage = dict(device=device, dtype=_KV_STORAGE.get(kv_cache_dtype, dtype))
        self.key_caches = [torch.zeros(shape, **storage) for _ in range(m.num_layers)]
        self.value_caches = [torch.zeros(shape, **storage) for _ in range(m.num_layers)]
        # The scales: fp8 one float32 per layer for K and V; int8 one per (slot, KV head), written with the rows.
        self.key_scales = self.value_scales = None
        self.calibrated = kv_cache_dtype != "fp8" or kv_scales is not None
        if kv_cache_dtype == "fp8":
            given = kv_scales or ([1.0] * m.num_layers, [1.0] * m.num_layers)
            if any(len(g) != m.num_layers for g in given):
                raise ValueError(f"Runner: kv_scales must give {m.num_layers} key and value scales, got {given}")
            self.key_scales, self.value_scales = ([torch.tensor([float(x)], dtype=torch.float32, device=device)
                                                   for x in g] for g in given)
        elif kv_cache_dtype == "int8":
            self.key_scales, self.value_scales = ([torch.zeros(shape[:3], dtype=torch.float32, device=device)
                                                   for _ in range(m.num_layers)] for _ in range(2))
        free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(_seed(work.seed, "blocks")))
        width = -(-longest // work.block_size)
        owned, taken = [], 0  # every sequence of the whole batch takes its blocks in turn
        for p in self.whole.prompt_lens:
            n = -(-(p + work.output_len) // work.block_size)
            owned.append(free[taken:taken + n].tolist())
            taken += n
        tables = [owned[i] + [0] * (width - len(owned[i])) for i in self.rows]
        self.block_tables = torch.tensor(tables, dtype=torch.int32)
        self._tables_dev = self.block_tables.to(device)
        s = len(work.prompt_lens)
        self.sampling = {
            "temperature": torch.full((s,), work.temperature, dtype=torch.float32, device=device),
            "top_k": torch.zeros(s, dtype=torch.int32, device=device),
            "top_p": torch.ones(s, dtype=torch.float32, device=device),
            "min_p": torch.zeros(s, dtype=torch.float32, device=device),
            "seeds": torch.tensor(self.rows, dtype=torch.int64, device=device) + work.seed,
        }
        self.forward_fn: Callable = self.forward

    # -- metadata ---------------------------------------------------------------------------------

    def _slots(self, seq: int, positions: torch.Tensor) -> torch.Tensor:
        bs = self.work.block_size
        return self.block_tables[seq, positions // bs].to(torch.int64) * bs + positions % bs

    def batch(self, new_tokens: list[torch.Tensor], context_lens: list[int]) -> Batch:
        """new_tokens[s]: the tokens sequence s adds; context_lens[s]: its length after them."""
        positions, slots, starts = [], [], [0]
        for s, (t, n) in enumerate(zip(new_tokens, context_lens)):
            pos = torch.arange(n - t.numel(), n, dtype=torch.int64)
            positions.append(pos)
            slots.append(self._slots(s, pos))
            starts.append(starts[-1] + t.numel())
        d = self.device
        return Batch(tokens=torch.cat(new_tokens).to(d), positions=torch.cat(positions).to(d),
                     slot_mapping=torch.cat(slots).to(d),
                     query_start_loc=torch.tensor(starts, dtype=torch.int32, device=d),
                     seq_lens=torch.tensor(context_lens, dtype=torch.int32, device=d),
                     last_rows=torch.tensor(starts[1:], dtype=torch.int64, device=d) - 1)

    # -- the model --------------------------------------------------------------------------------

    def forward(self, ops: Ops, tokens, positions, slot_mapping, query_start_loc, seq_lens, last_rows,
                block_tables, key_caches, value_caches, key_scales=None, value_scales=None):
        """Logits [S, vocab] of each sequence's last row; the caches gain the new tokens' K/V
        (quantized with key_scales and value_scales, per layer, when given)."""
        m, hd = self.m, self.m.head_dim
        nq, nkv = self.q_heads * hd, self.kv_heads * hd
        eps, qa = m.rms_norm_eps, self.layer_activations  # qa: the dtype of scaled_mm's activations, or None
        h = ops.embedding(tokens, self.embed)  # [T, hidden]
        residual = None
        for i, layer in enumerate(self.layers):
            if qa is not None:  # the norm quantizes per token as it writes: (a, scale_a) [T, hidden], [T, 1]
                if residual is None:
                    residual = h
                    a, scale_a = ops.rms_norm_per_token_quant(h, layer["input_norm"], eps, qa, None)
                else:  # residual += h (in place); h is not written
                    a, scale_a = ops.fused_add_rms_norm_per_token_quant(h, residual, layer["input_norm"], eps, qa, None)
                qkv = ops.scaled_mm(a, layer["qkv"], scale_a, None, layer["qkv_bias"], self.dtype, role="qkv")
            else:
                if residual is None:
                    residual = h
                    x = ops.rms_norm(h, layer["input_norm"], eps)
                else:
                    ops.fused_add_rms_norm(h, residual, layer["input_norm"], eps)  # residual += h; h = norm
                    x = h
                qkv = ops.linear(x, layer["qkv"], layer["qkv_bias"], role="qkv")  # [T, (q + 2 kv) heads * hd]
            t = qkv.shape[0]
            q, k, v = qkv[:, :nq], qkv[:, nq:nq + nkv], qkv[:, nq + nkv:]
            ops.rotary_embedding(positions, q, k, hd, self.cos_sin, True)
            k3, v3 = k.view(t, self.kv_heads, hd), v.view(t, self.kv_heads, hd)
            if key_scales is None:
                ops.reshape_and_cache(k3, v3, key_caches[i], value_caches[i], slot_mapping)
                attn = ops.paged_attention(q.view(t, self.q_heads, hd), key_caches[i], value_caches[i], block_tables,
                                           query_start_loc, seq_lens, self.scale, 0.0, m.sliding_window)
            else:
                ops.reshape_and_cache_quant(k3, v3, key_caches[i], value_caches[i], slot_mapping, key_scales[i],
                                            value_scales[i])
                attn = ops.paged_attention_quant(q.view(t, self.q_heads, hd), key_caches[i], value_caches[i],
                                                 key_scales[i], value_scales[i], block_tables, query_start_loc,
                                                 seq_lens, self.scale, 0.0, m.sliding_window)
            if qa is not None:
                h = ops.linear_dynamic_quant(attn.view(t, nq), layer["o"], None, role="o_proj")
            else:
                h = ops.linear(attn.view(t, nq), layer["o"], None, role="o_proj")
            if ops.all_reduce is not None:
                ops.all_reduce(h)
            if qa is not None:
                a, scale_a = ops.fused_add_rms_norm_per_token_quant(h, residual, layer["post_norm"], eps, qa, None)
                gate_up = ops.scaled_mm(a, layer["gate_up"], scale_a, None, None, self.dtype, role="gate_up")
                a, scale_a = ops.silu_and_mul_per_token_quant(gate_up, qa, None)  # [T, inter], [T, 1]
                h = ops.scaled_mm(a, layer["down"], scale_a, None, None, self.dtype, role="down")
            else:
                ops.fused_add_rms_norm(h, residual, layer["post_norm"], eps)
                gate_up = ops.linear(h, layer["gate_up"], None, role="gate_up")
                a = ops.silu_and_mul(gate_up)
                h = ops.linear(a, layer["down"], None, role="down")
            if ops.all_reduce is not None:
                ops.all_reduce(h)
        ops.fused_add_rms_norm(h, residual, self.final_norm, eps)
        last = h.index_select(0, last_rows)
        if self.head_activations is not None:
            return ops.linear_dynamic_quant(last, self.head, None, role="lm_head")  # [S, vocab]
        return ops.linear(last, self.head, None, role="lm_head")  # [S, vocab]

    def step(self, ops: Ops, b: Batch, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.calibrated:
            logits = self.forward_fn(ops, b.tokens, b.positions, b.slot_mapping, b.query_start_loc, b.seq_lens,
                                     b.last_rows, self._tables_dev, self.key_caches, self.value_caches,
                                     self.key_scales, self.value_scales)
        else:  # fp8's first forward, eager: each layer's scales set from the rows it writes, then fixed
            calibrate = dataclasses.replace(ops, reshape_and_cache_quant=calibrating(ops.reshape_and_cache_quant,
                                                                                     all_ranks=self.world > 1))
            logits = self.forward(calibrate, b.tokens, b.positions, b.slot_mapping, b.query_start_loc, b.seq_lens,
                                  b.last_rows, self._tables_dev, self.key_caches, self.value_caches,
                                  self.key_scales, self.value_scales)
            self.calibrated = True
        sp = self.sampling
        offsets = torch.full_like(sp["seeds"], offset)
        tokens = ops.sample(logits, sp["temperature"], sp["top_k"], sp["top_p"], sp["min_p"], sp["seeds"], offsets)
        return tokens, logits

    def kv_cache_scales(self) -> tuple[list[float], list[float]] | None:
        """fp8: the (k_scales, v_scales) of every layer, as floats (calibrated or given); else None."""
        if self.kv_cache_dtype != "fp8":
            return None
        return [s.item() for s in self.key_scales], [s.item() for s in self.value_scales]

    def kv_cache_spec(self) -> dict | None:
        """How the cache quantizes, for the float64 reference (reference_logits' kv_cache): None for
        a plain cache; {"dtype": "int8"}; {"dtype": "fp8", "k_scales": [...], "v_scales": [...]}."""
        if self.kv_cache_dtype == "auto":
            return None
        spec = {"dtype": self.kv_cache_dtype}
        if self.kv_cache_dtype == "fp8":
            spec["k_scales"], spec["v_scales"] = self.kv_cache_scales()
        return spec

    def activation_spec(self) -> dict | None:
        """How the linears quantize their inputs, for the float64 reference (reference_logits'
        activations): None when none does; else {"dtype": the run's dtype name, "layers": "int8",
        "fp8" or None, "lm_head": likewise, "shards": the tensor-parallel degree (a row-parallel
        linear's input, o_proj's and down's, is quantized per token over each rank's columns)}."""
        if self.layer_activations is None and self.head_activations is None:
            return None
        name = {torch.int8: "int8", torch.float8_e4m3fn: "fp8", None: None}
        return {"dtype": str(self.dtype).removeprefix("torch."), "layers": name[self.layer_activations],
                "lm_head": name[self.head_activations], "shards": self.world}

    def prompts(self) -> list[torch.Tensor]:
        """The prompts of this runner's rows: those of the whole batch, drawn in turn from one generator."""
        g = torch.Generator().manual_seed(_seed(self.work.seed, "prompts"))
        every = [torch.randint(0, self.m.vocab_size, (p,), generator=g, dtype=torch.int64)
                 for p in self.whole.prompt_lens]
        return [every[i] for i in self.rows]

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _synthetic_rows(self, g: torch.Generator):
        """fill_cache's random rows in their draw order: (sequence of the whole batch, cache index
        (the key caches by layer, then the value caches), rows [prompt_len, kv_heads, head_dim] in
        the runner's dtype on its device)."""
        for seq, p in enumerate(self.whole.prompt_lens):
            for c in range(2 * self.m.num_layers):
                rows = torch.randn((p, self.kv_heads, self.m.head_dim), generator=g)
                yield seq, c, rows.to(device=self.device, dtype=self.dtype)

    def fill_cache(self) -> torch.Tensor:
        """In place of a prefill (Workload.synthetic_prefill): random K/V rows (seeded) at every
        prompt position of every layer's cache, and random first tokens [S]. A quantized cache gets
        them through its write (reshape_and_cache_quant); uncalibrated fp8 scales are calibrated on
        the whole batch's rows first, so that a sequence alone gets the scales it has in the batch."""
        seed = _seed(self.work.seed, "synthetic-cache")
        layers = self.m.num_layers
        if not self.calibrated:  # fp8: amax / 448 of each cache's rows, over the whole batch
            amax = [torch.zeros((), dtype=torch.float32, device=self.device) for _ in range(2 * layers)]
            for _, c, rows in self._synthetic_rows(torch.Generator().manual_seed(seed)):
                amax[c] = torch.maximum(amax[c], rows.abs().amax().to(torch.float32))
            for scale, a in zip((*self.key_scales, *self.value_scales), amax):
                scale.copy_(torch.where(a > 0, a / _FP8_MAX, torch.ones_like(a)).reshape(scale.shape))
            self.calibrated = True
        g = torch.Generator().manual_seed(seed)
        row = {seq: i for i, seq in enumerate(self.rows)}
        pending: dict[int, torch.Tensor] = {}
        for seq, c, rows in self._synthetic_rows(g):  # drawn for the whole batch, written for the rows
            if seq not in row:
                continue
            slots = self._slots(row[seq], torch.arange(rows.shape[0], dtype=torch.int64)).to(self.device)
            if self.key_scales is None:
                cache = (*self.key_caches, *self.value_caches)[c]
                cache.view(-1, self.kv_heads, self.m.head_dim).index_copy_(0, slots, rows)
            elif c < layers:
                pending[c] = rows
            else:  # a layer's key and value rows, quantized by the cache's own write
                i = c - layers
                self.ops.reshape_and_cache_quant(pending.pop(i), rows, self.key_caches[i], self.value_caches[i],
                                                 slots, self.key_scales[i], self.value_scales[i])
        first = torch.randint(0, self.m.vocab_size, (len(self.whole.prompt_lens),), generator=g)
        return first[list(self.rows)].to(self.device)

    def prefill(self, ops: Ops | None = None) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Every prompt in one forward (its K/V into the cache) and the first output token:
        (tokens [S], logits [S, vocab], seconds, ended by a device synchronization)."""
        ops = ops or self.ops
        b = self.batch(self.prompts(), list(self.work.prompt_lens))
        self._sync()
        t0 = time.perf_counter()
        tokens, logits = self.step(ops, b, 0)
        self._sync()
        return tokens, logits, time.perf_counter() - t0

    def decode(self, first: torch.Tensor, ops: Ops | None = None, *, steps: int | None = None,
               record_logits: bool = False, progress: Callable[[str], None] | None = None,
               after_step: Callable[[], None] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor], float]:
        """Decode steps after a prefill whose sampled tokens are `first` (default output_len - 1
        steps): each appends one token per sequence at its next position. Running it again after
        the same prefill rewrites the same cache slots, so repeats need no new prefill. Returns the
        tokens of each step, their logits when recorded, and the seconds of the steps (the batch
        metadata is built outside the timed interval; each step ends with a synchronization)."""
        ops = ops or self.ops
        steps = self.work.output_len - 1 if steps is None else steps
        lens = list(self.work.prompt_lens)
        tokens, out, logits_out, seconds = first, [], [], 0.0
        for i in range(steps):
            if progress is not None and i and i % max(1, steps // 4) == 0:
                progress(f"decode step {i}/{steps}")
            lens = [n + 1 for n in lens]
            b = self.batch([t.view(1) for t in tokens.cpu()], lens)
            t0 = time.perf_counter()
            tokens, logits = self.step(ops, b, i + 1)
            self._sync()
            seconds += time.perf_counter() - t0
            out.append(tokens.cpu())
            if record_logits:
                logits_out.append(logits.float().cpu())
            if after_step is not None:
                after_step()
        return out, logits_out, seconds

    def generate(self, ops: Ops | None = None, *, record_logits: bool = False,
                 progress: Callable[[str], None] | None = None,
                 after_step: Callable[[], None] | None = None) -> Generation:
        """Prefill, then output_len - 1 decode steps (the prefill samples the first output token).
        after_step runs after each forward, outside the timed intervals. With a synthetic prefill
        the cache is filled instead (prefill_seconds 0, no logits of the first token)."""
        if self.work.synthetic_prefill:
            if record_logits:
                raise ValueError("generate: a synthetic prefill has no logits to record")
            first, logits, prefill = self.fill_cache(), None, 0.0
        else:
            first, logits, prefill = self.prefill(ops)
        if after_step is not None:
            after_step()
        rest, rest_logits, decode = self.decode(first, ops, record_logits=record_logits, progress=progress,
                                                after_step=after_step)
        tokens = torch.stack([first.cpu(), *rest], dim=1)
        all_logits = [logits.float().cpu(), *rest_logits] if record_logits else []
        return Generation(tokens, all_logits, prefill, decode)
