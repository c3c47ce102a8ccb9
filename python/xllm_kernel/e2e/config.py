"""Model configurations (presets of real shapes, or a Hugging Face style config.json) and the
workload, with the checks that turn a bad configuration into a usage error (exit code 2).

    model = model_config("llama-3-8b", layers=2)
    work = Workload(prompt_lens=(512, 512), output_len=16, block_size=16, seed=0)
    check(model, work, world_size=1)          # UsageError naming what is wrong
    weights = weight_spec("int8", None, 128)  # --weights, --lm-head-weights, --group-size
    check_weights(model, weights, world_size=1)
    kv = kv_cache_report(model, work, "bfloat16", "int8")  # --kv-cache-dtype: the bytes a decode step reads

Torch-free, so that --help and usage errors stay fast.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any


class UsageError(ValueError):
    """A bad configuration or flag: the CLI prints it and exits 2."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str
    architecture: str  # "llama" | "mistral" | "qwen2"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position: int
    qkv_bias: bool = False  # Qwen2
    sliding_window: int = 0  # Mistral; 0: off
    tie_word_embeddings: bool = False

    def parameters(self) -> int:
        """Weights the runner holds (embedding and LM head counted apart unless tied)."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        layer = h * (q + 2 * kv) + q * h + 3 * h * self.intermediate_size + 2 * h
        if self.qkv_bias:
            layer += q + 2 * kv
        heads = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + heads + h

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["parameters"] = self.parameters()
        return d


# Real shapes (the models' published config.json), random weights. `tiny*` serve the tests.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig("tiny", "llama", 512, 128, 256, 2, 4, 2, 32, 1e-5, 10000.0, 2048),
    "tiny-qwen2": ModelConfig("tiny-qwen2", "qwen2", 512, 128, 256, 2, 4, 2, 32, 1e-6, 1e6, 2048, qkv_bias=True),
    "tiny-mistral": ModelConfig("tiny-mistral", "mistral", 512, 128, 256, 2, 4, 2, 32, 1e-5, 10000.0, 2048,
                                sliding_window=16),
    "llama-3-8b": ModelConfig("llama-3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 1e-5, 500000.0, 8192),
    "qwen2.5-7b": ModelConfig("qwen2.5-7b", "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, 1e-6, 1e6, 32768,
                              qkv_bias=True),
    "mistral-7b": ModelConfig("mistral-7b", "mistral", 32000, 4096, 14336, 32, 32, 8, 128, 1e-5, 10000.0, 32768,
                              sliding_window=4096),
}

_ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "LlamaForCausalLM": "llama",
                  "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2"}


def _from_hf(path: str) -> ModelConfig:
    """A Hugging Face config.json (model_type llama / mistral / qwen2)."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"--config: cannot read {path}: {e}") from None
    if not isinstance(d, dict):
        raise UsageError(f"--config: {path} must hold a JSON object, got {type(d).__name__}")
    kind = d.get("model_type") or next(iter(d.get("architectures") or []), None)
    arch = _ARCHITECTURES.get(kind)
    if arch is None:
        raise UsageError(f"--config: model_type must be one of llama, mistral, qwen2, got {kind!r}")
    try:
        heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        if d.get("rope_scaling"):
            raise UsageError(f"--config: rope_scaling {d['rope_scaling']!r} is not supported (plain RoPE only)")
        return ModelConfig(
            name=str(d.get("_name_or_path") or path), architecture=arch, vocab_size=int(d["vocab_size"]),
            hidden_size=hidden, intermediate_size=int(d["intermediate_size"]),
            num_layers=int(d["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or (hidden // heads if heads else 0)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)), rope_theta=float(d.get("rope_theta", 10000.0)),
            max_position=int(d.get("max_position_embeddings", 4096)),
            qkv_bias=arch == "qwen2" or bool(d.get("attention_bias", False)),
            sliding_window=int(d.get("sliding_window") or 0) if arch == "mistral" or d.get("use_sliding_window") else 0,
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)))
    except KeyError as e:
        raise UsageError(f"--config: {path} lacks {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"--config: {path}: {e}") from None


def model_config(preset: str | None = None, *, config_file: str | None = None, layers: int | None = None) -> ModelConfig:
    if (preset is None) == (config_file is None):
        raise UsageError("give exactly one of --preset and --config")
    if config_file is not None:
        model = _from_hf(config_file)
    else:
        if preset not in PRESETS:
            raise UsageError(f"--preset: expected one of {', '.join(PRESETS)}, got {preset!r}")
        model = PRESETS[preset]
    if layers is not None:
        if layers < 1:
            raise UsageError(f"--layers must be at least 1, got {layers}")
        model = dataclasses.replace(model, num_layers=layers)
    return model


@dataclasses.dataclass(frozen=True)
class Workload:
    """A static batch: request i has prompt_lens[i] prompt tokens and output_len generated ones;
    prompts are random token ids from `seed`; the cache's blocks are handed out from a free list
    shuffled with `seed`."""

    prompt_lens: tuple[int, ...]
    output_len: int
    block_size: int = 16
    num_blocks: int = 0  # 0: what the batch needs plus one spare block per sequence
    seed: int = 0
    temperature: float = 0.0  # 0: greedy
    # Decode-only measurement: the cache gets random K/V at every prompt position (seeded) instead
    # of a prefill forward, so decode at a long context costs no long prefill; no prefill figures.
    synthetic_prefill: bool = False

    def blocks_needed(self) -> int:
        return sum(math.ceil((p + self.output_len) / self.block_size) for p in self.prompt_lens)

    def cache_blocks(self) -> int:
        return self.num_blocks or self.blocks_needed() + len(self.prompt_lens)

    def to_json(self) -> dict[str, Any]:
        return {"batch": len(self.prompt_lens), "prompt_lens": list(self.prompt_lens), "output_len": self.output_len,
                "block_size": self.block_size, "num_blocks": self.cache_blocks(), "seed": self.seed,
                "temperature": self.temperature, "synthetic_prefill": self.synthetic_prefill,
                "prompt_tokens": sum(self.prompt_lens),
                "max_context": max(self.prompt_lens) + self.output_len}


DTYPES = ("float32", "bfloat16", "float16")


def check(model: ModelConfig, work: Workload, world_size: int = 1, dtype: str = "bfloat16") -> None:
    """Raises UsageError naming the first inconsistency of the model, the workload and the tensor
    parallel degree."""
    m = model
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                  "head_dim", "max_position"):
        if getattr(m, field) < 1:
            raise UsageError(f"model {m.name}: {field} must be at least 1, got {getattr(m, field)}")
    if m.num_heads % m.num_kv_heads:
        raise UsageError(f"model {m.name}: num_heads ({m.num_heads}) must be a multiple of num_kv_heads "
                         f"({m.num_kv_heads})")
    if m.head_dim % 2 or m.head_dim > 512:
        raise UsageError(f"model {m.name}: head_dim must be even and at most 512 (rotary, paged_attention), "
                         f"got {m.head_dim}")
    if m.sliding_window < 0:
        raise UsageError(f"model {m.name}: sliding_window must be >= 0 (0: off), got {m.sliding_window}")
    if dtype not in DTYPES:
        raise UsageError(f"--dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    if world_size < 1:
        raise UsageError(f"world size must be at least 1, got {world_size}")
    for field in ("num_heads", "num_kv_heads", "intermediate_size"):
        if getattr(m, field) % world_size:
            raise UsageError(f"tensor parallel over {world_size} ranks: {field} ({getattr(m, field)}) must be a "
                             f"multiple of the world size")
    w = work
    if not w.prompt_lens:
        raise UsageError("the batch must hold at least one request (--batch >= 1)")
    if min(w.prompt_lens) < 1:
        raise UsageError(f"--prompt-len must be at least 1, got {min(w.prompt_lens)}")
    if w.output_len < 1:
        raise UsageError(f"--output-len must be at least 1, got {w.output_len}")
    if w.block_size < 1:
        raise UsageError(f"--block-size must be at least 1, got {w.block_size}")
    if w.temperature < 0 or not math.isfinite(w.temperature):
        raise UsageError(f"--temperature must be finite and >= 0 (0: greedy), got {w.temperature}")
    longest = max(w.prompt_lens) + w.output_len
    if longest > m.max_position:
        raise UsageError(f"a context of {longest} tokens (prompt {max(w.prompt_lens)} + output {w.output_len}) "
                         f"is past the model's max_position {m.max_position}")
    if w.num_blocks < 0:
        raise UsageError(f"--num-blocks must be >= 0 (0: what the batch needs), got {w.num_blocks}")
    if w.num_blocks and w.blocks_needed() > w.num_blocks:
        raise UsageError(f"the batch needs {w.blocks_needed()} cache blocks of {w.block_size} tokens "
                         f"(contexts up to {longest}), past the cache's --num-blocks {w.num_blocks}")


# ---- --weights: the linears through the library's linear family -------------------------------------

# linear_pack's schemes, in --weights' spelling: weight-only (linear) and activation-quantized
# (scaled_mm, linear_dynamic_quant).
WEIGHT_SCHEMES = ("bf16", "f16", "f32", "int8", "fp8", "int4", "w8a8-int8", "w8a8-fp8", "w4a8")
# The schemes whose linears take activations quantized per token, and the activations' dtype.
ACTIVATION_SCHEMES = {"w8a8-int8": "int8", "w8a8-fp8": "fp8", "w4a8": "int8"}
GROUPED_SCHEMES = ("int4", "w4a8")  # --group-size applies to these
LINEAR_ROLES = ("qkv", "o_proj", "gate_up", "down", "lm_head")
FP8_BLOCK = 128  # fp8 weights get one scale per 128 x 128 block
SCALED_MM_MAX_K = 65535  # scaled_mm's int32 sums are exact up to this K (the contract checks it)
_BITS = {"f32": 32, "bf16": 16, "f16": 16, "int8": 8, "fp8": 8, "int4": 4, "w8a8-int8": 8, "w8a8-fp8": 8,
         "w4a8": 4}
_DTYPE_BITS = {"float32": 32, "bfloat16": 16, "float16": 16}

# How the random weights become each scheme's canonical form (the report quotes it).
QUANTIZATION = {
    "f32": "cast to float32", "bf16": "cast to bfloat16", "f16": "cast to float16",
    "int8": "symmetric per output channel: s = absmax / 127, q = round(w / s) in [-127, 127]",
    "fp8": "float8_e4m3fn with a scale per 128 x 128 block: s = absmax / 448, q = e4m3fn(w / s) (nearest even)",
    "int4": "symmetric in groups of group_size along K: s = absmax / 8, q = clamp(round(w / s), -8, 7) "
            "(GGUF Q4_0's scale; a group's largest positive value clips to 7 s)",
    "w8a8-int8": "weights as int8 (symmetric per output channel: s = absmax / 127, q = round(w / s) in [-127, 127]); "
                 "activations int8 per token (scale = amax / 127), int32 sums, scaled_mm",
    "w8a8-fp8": "weights float8_e4m3fn with a scale per output channel: s = absmax / 448, q = e4m3fn(w / s) (nearest "
                "even; per channel as vLLM's w8a8-fp8 checkpoints are, linear_pack also takes per-tensor and 128 x 128 "
                "block scales); activations e4m3 per token (scale = max(amax / 448, 1 / (448 * 512))), float32 sums, "
                "scaled_mm",
    "w4a8": "weights as int4 (symmetric in groups of group_size along K, a multiple of 8: s = absmax / 8, "
            "q = clamp(round(w / s), -8, 7)); activations int8 per token (scale = amax / 127), int32 sums per group, "
            "scaled_mm",
}

# The activation-quantized forward (ACTIVATION_SCHEMES): the producers of qkv's, gate_up's and
# down's inputs quantize per token as they write (the first layer's input norm, which has no
# residual yet, is rms_norm_per_token_quant; the others fused_add_rms_norm_per_token_quant), those
# GEMMs are scaled_mm, o_proj (fed by the attention) and the LM head (by the final norm)
# linear_dynamic_quant.
QUANTIZED_PRODUCERS = {"rms_norm": "rms_norm_per_token_quant", "silu_and_mul": "silu_and_mul_per_token_quant"}
# The operations on packed weights: a packed tensor is accepted only by the implementation (device
# and solution) whose linear_pack made it, so a side overrides them together.
PACKED_OPERATIONS = ("linear_pack", "linear", "scaled_mm", "linear_dynamic_quant")


@dataclasses.dataclass(frozen=True)
class WeightSpec:
    """--weights: the scheme of qkv, o_proj, gate_up and down, the LM head's, and the group of int4
    and w4a8. Every linear then runs through the library's linear family on weights packed once at
    load: linear for the weight-only schemes, scaled_mm / linear_dynamic_quant for the
    activation-quantized ones."""

    scheme: str
    lm_head_scheme: str
    group_size: int = 128

    def scheme_for(self, role: str) -> str:
        return self.lm_head_scheme if role == "lm_head" else self.scheme

    def activations(self, role: str) -> str | None:
        """The dtype the role's input is quantized to ("int8", "fp8"), None for a weight-only scheme."""
        return ACTIVATION_SCHEMES.get(self.scheme_for(role))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def weight_spec(weights: str | None, lm_head: str | None, group_size: int) -> WeightSpec | None:
    """The flags as a WeightSpec (None without --weights: torch's F.linear on the --dtype weights)."""
    for flag, value in (("--weights", weights), ("--lm-head-weights", lm_head)):
        if value is not None and value not in WEIGHT_SCHEMES:
            raise UsageError(f"{flag}: expected one of {', '.join(WEIGHT_SCHEMES)}, got {value!r}")
    if weights is None:
        if lm_head is not None:
            raise UsageError(f"--lm-head-weights {lm_head} needs --weights (without it every GEMM is torch's)")
        return None
    if group_size < 1:
        raise UsageError(f"--group-size must be at least 1, got {group_size}")
    spec = WeightSpec(weights, lm_head or weights, group_size)
    w4a8 = [flag for flag, s in (("--weights", spec.scheme), ("--lm-head-weights", spec.lm_head_scheme))
            if s == "w4a8"]
    if w4a8 and group_size % 8:
        raise UsageError(f"--group-size {group_size} must be a multiple of 8 for {w4a8[0]} w4a8 (scaled_mm's int4 "
                         f"weights are packed 8 K values at a time)")
    return spec


def weight_operations(operations: tuple[str, ...], spec: WeightSpec | None) -> tuple[str, ...]:
    """`operations` (model.OPERATIONS, after kv_cache_operations) as the forward of `spec` calls
    them, plus the operations on packed weights: linear_pack, linear (for a weight-only scheme),
    scaled_mm and linear_dynamic_quant (for an activation-quantized one), and for activation-quantized
    layers the quantizing producers in place of rms_norm and silu_and_mul, and
    fused_add_rms_norm_per_token_quant beside fused_add_rms_norm (which the final norm keeps)."""
    if spec is None:
        return operations
    layers, head = spec.activations("qkv") is not None, spec.activations("lm_head") is not None
    out: list[str] = []
    for op in operations:
        out.append(QUANTIZED_PRODUCERS.get(op, op) if layers else op)
        if layers and op == "fused_add_rms_norm":
            out.append("fused_add_rms_norm_per_token_quant")
    out.append("linear_pack")
    if not (layers and head):
        out.append("linear")
    if layers:
        out.append("scaled_mm")
    if layers or head:
        out.append("linear_dynamic_quant")
    return tuple(out)


def linear_shapes(m: ModelConfig, world_size: int = 1) -> list[dict[str, Any]]:
    """A rank's linears as the runner multiplies them: role, N (output features), K (input
    features) and how many (one per layer; one LM head, replicated on every rank)."""
    q, kv = m.num_heads // world_size * m.head_dim, m.num_kv_heads // world_size * m.head_dim
    inter = m.intermediate_size // world_size
    h, n = m.hidden_size, m.num_layers
    return [{"role": "qkv", "n": q + 2 * kv, "k": h, "count": n}, {"role": "o_proj", "n": h, "k": q, "count": n},
            {"role": "gate_up", "n": 2 * inter, "k": h, "count": n}, {"role": "down", "n": h, "k": inter, "count": n},
            {"role": "lm_head", "n": m.vocab_size, "k": h, "count": 1}]


def _groups(scheme: str, k: int, group_size: int) -> int:
    """linear_pack's K groups: one scale (and int32 sum) per output channel and group."""
    if scheme in ("int8", "w8a8-int8", "w8a8-fp8"):
        return 1
    if scheme == "fp8":
        return math.ceil(k / FP8_BLOCK)
    if scheme in GROUPED_SCHEMES:
        return k // group_size if group_size else 0
    return 0


def linear_bytes(scheme: str, n: int, k: int, group_size: int = 128) -> int:
    """The bytes linear (or scaled_mm) reads for one [N, K] weight: the stored weights (N K bits / 8)
    and, for the quantized schemes, linear_pack's float32 scales: one per output channel and K group
    (int8, w8a8-int8 and w8a8-fp8 (per channel): one group; fp8: ceil(K / 128) groups, the block
    scales expanded per channel; int4, w4a8: K / group_size), and for w8a8-int8 and w4a8 the int32
    sums of each channel's weights over each group (what an activation zero point, or a kernel's
    unsigned shift, subtracts): 4 bytes per channel and group. The packed tensor's header and its
    padding of N to panels of 32 rows (and of K to 4 for w8a8) are not counted."""
    payload = n * math.ceil(k * _BITS[scheme] / 8)
    groups = _groups(scheme, k, group_size)
    sums = 4 * n * groups if scheme in ("w8a8-int8", "w4a8") else 0
    return payload + 4 * n * groups + sums


def weight_report(m: ModelConfig, spec: WeightSpec | None, dtype: str, world_size: int = 1) -> dict[str, Any]:
    """The report's `weights`: the schemes, how they were made, the operations each linear ran, and
    the bytes of all linears one decode step reads (on one rank)."""
    roles = []
    for s in linear_shapes(m, world_size):
        if spec is None:
            scheme, per = dtype, s["n"] * s["k"] * _DTYPE_BITS[dtype] // 8
            ops = ["F.linear"]
        else:
            scheme = spec.scheme_for(s["role"])
            per = linear_bytes(scheme, s["n"], s["k"], spec.group_size)
            ops = linear_role_operations(spec, s["role"])
        row = dict(s, scheme=scheme, bytes=per * s["count"], operations=ops)
        if spec is not None and scheme in ACTIVATION_SCHEMES:
            payload = s["n"] * math.ceil(s["k"] * _BITS[scheme] / 8)
            groups = _groups(scheme, s["k"], spec.group_size)
            row.update(weight_bytes=payload * s["count"], scale_bytes=4 * s["n"] * groups * s["count"],
                       sum_bytes=(per - payload - 4 * s["n"] * groups) * s["count"],
                       activations=ACTIVATION_SCHEMES[scheme])
        roles.append(row)
    used = [] if spec is None else list(dict.fromkeys(spec.scheme_for(r) for r in LINEAR_ROLES))
    quantized_activations = any(s in ACTIVATION_SCHEMES for s in used)
    if spec is None:
        linear = "torch F.linear on the --dtype weights"
    elif quantized_activations:
        linear = ("xllm_kernel linear family (weights packed once at load by the side's linear_pack; activations "
                  "quantized per token: scaled_mm after the quantizing norm / activation, linear_dynamic_quant "
                  "for o_proj and the LM head" + (", linear for the weight-only schemes" if
                                                     any(s not in ACTIVATION_SCHEMES for s in used) else "") + ")")
    else:
        linear = "xllm_kernel linear (weights packed once at load by the side's linear_pack)"
    return {
        "scheme": spec.scheme if spec else None,
        "lm_head_scheme": spec.lm_head_scheme if spec else None,
        "group_size": spec.group_size if spec and any(s in GROUPED_SCHEMES for s in used) else None,
        "linear": linear,
        "quantization": {s: QUANTIZATION[s] for s in used},
        "bytes_per_decode_step": sum(r["bytes"] for r in roles),
        "bytes_counted": ("per decode step, every linear's weight once (qkv, o_proj, gate_up, down of each layer and "
                          "the LM head" + (", this rank's shards" if world_size > 1 else "") + "): the stored "
                          "weights (N K bits / 8) plus linear_pack's float32 scales (one per output channel and K "
                          "group)" + (" and, for w8a8-int8 and w4a8, its int32 weight sums (one per output channel "
                                      "and K group)" if any(s in ("w8a8-int8", "w4a8") for s in used) else "") +
                          "; packed headers, panel padding and biases not counted"
                          + ("; the activations' per-token scales not counted" if quantized_activations else ""))
        if spec else
                         ("per decode step, every linear's weight once (qkv, o_proj, gate_up, down of each layer and "
                          "the LM head" + (", this rank's shards" if world_size > 1 else "") + "): N K elements "
                          "of the --dtype; biases not counted"),
        "roles": roles,
    }


def linear_role_operations(spec: WeightSpec, role: str) -> list[str]:
    """The operations that make a role's output from its input (the report's roles[].operations)."""
    if spec.activations(role) is None:
        return ["linear"]
    return {"qkv": ["rms_norm_per_token_quant (first layer) / fused_add_rms_norm_per_token_quant", "scaled_mm"],
            "gate_up": ["fused_add_rms_norm_per_token_quant", "scaled_mm"],
            "down": ["silu_and_mul_per_token_quant", "scaled_mm"]}.get(role, ["linear_dynamic_quant"])


def check_weights(model: ModelConfig, spec: WeightSpec | None, world_size: int = 1) -> None:
    """The group of int4 and w4a8 must divide K of every such linear (on each rank); scaled_mm's
    K is at most SCALED_MM_MAX_K."""
    if spec is None:
        return
    where = f" on each of {world_size} ranks" if world_size > 1 else ""
    for s in linear_shapes(model, world_size):
        scheme = spec.scheme_for(s["role"])
        if scheme in GROUPED_SCHEMES and s["k"] % spec.group_size:
            raise UsageError(f"--group-size {spec.group_size} must divide K of every {scheme} linear: {s['role']} has "
                             f"K = {s['k']}{where}")
        if scheme in ACTIVATION_SCHEMES and s["k"] > SCALED_MM_MAX_K:
            raise UsageError(f"--weights {scheme}: scaled_mm's int32 sums are exact for K up to {SCALED_MM_MAX_K}, "
                             f"and {s['role']} has K = {s['k']}{where}")


# ---- --kv-cache-dtype: the paged KV cache's storage ------------------------------------------------

# auto: the --dtype (reshape_and_cache, paged_attention); fp8 and int8: one byte per element
# (reshape_and_cache_quant, paged_attention_quant) with float32 scales.
KV_CACHE_DTYPES = ("auto", "fp8", "int8")
KV_CACHE_STORAGE = {"fp8": "float8_e4m3fn", "int8": "int8"}
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# How each quantized cache gets its scales (the report and --help quote it).
KV_CACHE_SCALES = {
    "auto": "none: the cache holds the --dtype values",
    "fp8": "one float32 k_scale and v_scale per layer, calibrated on the first prefill forward a side runs (the "
           "validation workload's): amax of that prefill's K (V) of the layer (over every rank's KV heads) / 448 (1 "
           "where the amax is 0), then "
           "fixed for every later run of the side (timed, profiling, batch invariance); q = e4m3(x / scale)",
    "int8": "a float32 scale per (slot, KV head) row, written with the row: scale = amax / 127, "
            "q = int8(x * (127 / amax)) (per_token_quant of the row)",
}


def kv_cache_operations(operations: tuple[str, ...], kv_cache_dtype: str) -> tuple[str, ...]:
    """`operations` with the cache's write and attention of `kv_cache_dtype` (the quantized pair
    in place of reshape_and_cache and paged_attention for fp8 and int8)."""
    if kv_cache_dtype == "auto":
        return operations
    return tuple(f"{op}_quant" if op in ("reshape_and_cache", "paged_attention") else op for op in operations)


# Spellings of the plain cache by its dtype: each is auto where the --dtype is that dtype.
KV_CACHE_PLAIN = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def check_kv_cache_dtype(kv_cache_dtype: str) -> None:
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise UsageError(f"--kv-cache-dtype: expected one of {', '.join(KV_CACHE_DTYPES)} (or "
                         f"{', '.join(KV_CACHE_PLAIN)}: auto spelled as the --dtype), got {kv_cache_dtype!r}")


def normalize_kv_cache_dtype(kv_cache_dtype: str, dtype: str) -> str:
    """auto for a plain cache named by its dtype (bf16, f16, f32: the plain cache holds the --dtype
    values, so the name must be the --dtype's); the value itself otherwise."""
    if kv_cache_dtype not in KV_CACHE_PLAIN:
        return kv_cache_dtype
    if KV_CACHE_PLAIN[kv_cache_dtype] != dtype:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype}: the plain cache holds the --dtype values, and --dtype is "
                         f"{dtype}: use auto, fp8 or int8 (or --dtype {KV_CACHE_PLAIN[kv_cache_dtype]})")
    return "auto"


def kv_cache_report(m: ModelConfig, work: Workload, dtype: str, kv_cache_dtype: str,
                    world_size: int = 1) -> dict[str, Any]:
    """The report's `kv_cache`: the storage, how the scales are made, and the KV bytes one decode
    step of `work` reads on one rank: over the layers and sequences, context x kv_heads x head_dim
    x element bytes x 2 (K and V), plus the scales (fp8: 2 float32 per layer; int8: 2 float32 per
    context position and KV head per layer), averaged over the decode steps (step i, from 1,
    attends to prompt + i positions; one step at prompt + 1 when output_len is 1)."""
    check_kv_cache_dtype(kv_cache_dtype)
    quantized = kv_cache_dtype != "auto"
    element = 1 if quantized else _DTYPE_BYTES[dtype]
    kv_heads = m.num_kv_heads // world_size
    steps = max(1, work.output_len - 1)
    # Sum over the steps of every sequence's context, then the mean: an exact integer per step sum.
    contexts = sum(p * steps + steps * (steps + 1) // 2 for p in work.prompt_lens)
    payload = m.num_layers * contexts * kv_heads * m.head_dim * element * 2
    if kv_cache_dtype == "int8":
        scales = m.num_layers * contexts * kv_heads * 4 * 2
    elif kv_cache_dtype == "fp8":
        scales = m.num_layers * 2 * 4 * steps
    else:
        scales = 0
    return {
        "dtype": kv_cache_dtype,
        "storage_dtype": KV_CACHE_STORAGE.get(kv_cache_dtype, dtype),
        "element_bytes": element,
        "write": "reshape_and_cache_quant" if quantized else "reshape_and_cache",
        "attention": "paged_attention_quant" if quantized else "paged_attention",
        "scales": KV_CACHE_SCALES[kv_cache_dtype],
        "bytes_per_decode_step": (payload + scales) / steps,
        "scale_bytes_per_decode_step": scales / steps,
        "bytes_counted": ("per decode step, averaged over the workload's decode steps: over the layers and the "
                          "sequences" + (" (this rank's KV heads)" if world_size > 1 else "") + ", context x "
                          "kv_heads x head_dim x element bytes x 2 (K and V)" +
                          (", plus the float32 scales read (fp8: k_scale and v_scale of each layer; int8: one per "
                           "context position, KV head, K and V)" if quantized else "") +
                          "; block padding, block tables and the new token's write not counted"),
    }
