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


# ---- --weights: the linears through the library's linear family ---------------------------------------

# linear_pack's schemes, in --weights' spelling.
WEIGHT_SCHEMES = ("bf16", "f16", "f32", "int8", "fp8", "int4")
LINEAR_ROLES = ("qkv", "o_proj", "gate_up", "down", "lm_head")
FP8_BLOCK = 128  # fp8 weights get one scale per 128 x 128 block
_BITS = {"f32": 32, "bf16": 16, "f16": 16, "int8": 8, "fp8": 8, "int4": 4}
_DTYPE_BITS = {"float32": 32, "bfloat16": 16, "float16": 16}

# How the random weights become each scheme's canonical form (the report quotes it).
QUANTIZATION = {
    "f32": "cast to float32", "bf16": "cast to bfloat16", "f16": "cast to float16",
    "int8": "symmetric per output channel: s = absmax / 127, q = round(w / s) in [-127, 127]",
    "fp8": "float8_e4m3fn with a scale per 128 x 128 block: s = absmax / 448, q = e4m3fn(w / s) (nearest even)",
    "int4": "symmetric in groups of group_size along K: s = absmax / 8, q = clamp(round(w / s), -8, 7) "
            "(GGUF Q4_0's scale; a group's largest positive value clips to 7 s)",
}


@dataclasses.dataclass(frozen=True)
class WeightSpec:
    """--weights: the scheme of qkv, o_proj, gate_up and down, the LM head's, and int4's group.
    Every linear then runs through the library's linear on weights packed once at load."""

    scheme: str
    lm_head_scheme: str
    group_size: int = 128

    def scheme_for(self, role: str) -> str:
        return self.lm_head_scheme if role == "lm_head" else self.scheme

    def pack_group(self, role: str) -> int:
        """linear_pack's group_size argument: the group for int4, 0 otherwise."""
        return self.group_size if self.scheme_for(role) == "int4" else 0

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
    return WeightSpec(weights, lm_head or weights, group_size)


def linear_shapes(m: ModelConfig, world_size: int = 1) -> list[dict[str, Any]]:
    """A rank's linears as the runner multiplies them: role, N (output features), K (input
    features) and how many (one per layer; one LM head, replicated on every rank)."""
    q, kv = m.num_heads // world_size * m.head_dim, m.num_kv_heads // world_size * m.head_dim
    inter = m.intermediate_size // world_size
    h, n = m.hidden_size, m.num_layers
    return [{"role": "qkv", "n": q + 2 * kv, "k": h, "count": n}, {"role": "o_proj", "n": h, "k": q, "count": n},
            {"role": "gate_up", "n": 2 * inter, "k": h, "count": n}, {"role": "down", "n": h, "k": inter, "count": n},
            {"role": "lm_head", "n": m.vocab_size, "k": h, "count": 1}]


def linear_bytes(scheme: str, n: int, k: int, group_size: int = 128) -> int:
    """The bytes linear reads for one [N, K] weight: the stored weights (N K bits / 8) and, for the
    quantized schemes, linear_pack's float32 scales: one per output channel and K group (int8: one
    group; fp8: ceil(K / 128) groups, the block scales expanded per channel; int4: K / group_size).
    The packed tensor's header and its padding of N to panels of 32 rows are not counted."""
    payload = n * math.ceil(k * _BITS[scheme] / 8)
    groups = {"int8": 1, "fp8": math.ceil(k / FP8_BLOCK), "int4": k // group_size if group_size else 0}.get(scheme, 0)
    return payload + 4 * n * groups


def weight_report(m: ModelConfig, spec: WeightSpec | None, dtype: str, world_size: int = 1) -> dict[str, Any]:
    """The report's `weights`: the schemes, how they were made, and the bytes of all linears one
    decode step reads (on one rank)."""
    roles = []
    for s in linear_shapes(m, world_size):
        if spec is None:
            scheme, per = dtype, s["n"] * s["k"] * _DTYPE_BITS[dtype] // 8
        else:
            scheme = spec.scheme_for(s["role"])
            per = linear_bytes(scheme, s["n"], s["k"], spec.group_size)
        roles.append(dict(s, scheme=scheme, bytes=per * s["count"]))
    used = [] if spec is None else list(dict.fromkeys(spec.scheme_for(r) for r in LINEAR_ROLES))
    return {
        "scheme": spec.scheme if spec else None,
        "lm_head_scheme": spec.lm_head_scheme if spec else None,
        "group_size": spec.group_size if spec and "int4" in used else None,
        "linear": "xllm_kernel linear (weights packed once at load by the side's linear_pack)" if spec
        else "torch F.linear on the --dtype weights",
        "quantization": {s: QUANTIZATION[s] for s in used},
        "bytes_per_decode_step": sum(r["bytes"] for r in roles),
        "bytes_counted": ("per decode step, every linear's weight once (qkv, o_proj, gate_up, down of each layer and "
                          "the LM head" + (", this rank's shards" if world_size > 1 else "") + "): the stored "
                          "weights (N K bits / 8) plus linear_pack's float32 scales (one per output channel and K "
                          "group); packed headers, panel padding and biases not counted") if spec else
                         ("per decode step, every linear's weight once (qkv, o_proj, gate_up, down of each layer and "
                          "the LM head" + (", this rank's shards" if world_size > 1 else "") + "): N K elements "
                          "of the --dtype; biases not counted"),
        "roles": roles,
    }


def check_weights(model: ModelConfig, spec: WeightSpec | None, world_size: int = 1) -> None:
    """int4's group must divide K of every int4 linear (on each rank)."""
    if spec is None:
        return
    for s in linear_shapes(model, world_size):
        if spec.scheme_for(s["role"]) == "int4" and s["k"] % spec.group_size:
            where = f" on each of {world_size} ranks" if world_size > 1 else ""
            raise UsageError(f"--group-size {spec.group_size} must divide K of every int4 linear: {s['role']} has "
                             f"K = {s['k']}{where}")


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
