"""One side of an end-to-end run, in a process of its own: initialize() selects once per process, so
the selected implementations, the torch solution (every operation overridden to `torch`) and
torch.compile each get a fresh interpreter. The parent (xllm_kernel.e2e.cli) starts

    python -m xllm_kernel.e2e.worker SPEC.json RESULT.json

and reads the result. Order: initialize, random weights (with --weights: quantized and packed once
by the side's linear_pack), validation against the float64 reference (a short greedy workload),
warm-up, the timed pass (uninstrumented), then a separate profiling pass (each call timed), and
for a side that asks for batch invariance (--batch-invariant's `invariant`) the check that every
sequence gets the same bits alone as in the batch (e2e.invariance). Progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from dataclasses import dataclass, field, replace

import torch

from xllm_kernel.e2e import invariance
from xllm_kernel.e2e.config import (ModelConfig, WeightSpec, Workload, kv_cache_operations, kv_cache_report,
                                    weight_operations, weight_report)
from xllm_kernel.e2e.model import OPERATIONS, Profiler, Runner, library_ops, load, make_weights
from xllm_kernel.e2e.quantize import quantize_shards, reference_weights
from xllm_kernel.e2e.reference import reference_logits

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Logit tolerance against the float64 reference, in units of the dtype's unit roundoff times the
# logits' scale (max(1, max |reference|)): the runner rounds every activation to the dtype (about
# 4 roundings per layer on the residual stream and the GEMM inputs), so its error grows like
# sqrt(layers); 16 u sqrt(layers + 1) leaves room over the errors seen (see the report's headroom).
_UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


# Activation-quantized linears (--weights w8a8-*, w4a8): the reference quantizes their inputs as
# the runner does, but the runner's dtype value of an element differs from the reference's by about
# a rounding, and where a quantization boundary lies between them the two land a whole step apart.
# In bfloat16 that happens in a share of the elements from the first layer on; in float32 rarely,
# but one crossing moves later rows (attention spreads it) by a step's worth, far more than a
# rounding, and the crossings cascade (Llama-3-8B shapes, one layer, float32: 1 crossing among the
# 98304 elements of layer 0's qkv input, then 97 in o_proj's, 816 in gate_up's, 5006 in down's). The
# difference is then a share of the activation quantization's own error whatever the dtype, so the
# unit has a floor: u = max(u_dtype, u_a), u_a = 2^-7 for int8 activations (steps of amax / 127 of
# the row) and 2^-6 for e4m3 (3 mantissa bits, relative steps 2^-4 to 2^-3). Calibrated like the
# 16 above: on Llama-3-8B shapes (2 layers) they leave headroom about 0.25 in bfloat16 (its own unit
# left 0.46 for w8a8-int8 and 0.92 for w8a8-fp8) and 0.1 to 0.2 in float32 (its own: 25 to 48).
_ACTIVATION_UNIT = {"int8": 2.0 ** -7, "fp8": 2.0 ** -6}


def logit_tolerance(dtype: str, layers: int, scale: float, activations: dict | None = None) -> float:
    return 16 * tolerance_unit(dtype, activations) * (layers + 1) ** 0.5 * max(1.0, scale)


def tolerance_unit(dtype: str, activations: dict | None = None) -> float:
    """u: the dtype's unit roundoff, or with quantized activations (Runner.activation_spec())
    max(u, u_a) for the coarsest quantization the linears use."""
    u = _UNIT_ROUNDOFF[dtype]
    kinds = [activations[k] for k in ("layers", "lm_head") if activations and activations.get(k)]
    return max([u] + [_ACTIVATION_UNIT[k] for k in kinds])


TOLERANCE = ("|logit - reference| <= 16 u sqrt(layers + 1) max(1, max |reference|) per sequence (u: the dtype's unit "
             "roundoff); a greedy token other than the reference's argmax passes as a tie when its reference logit is "
             "within that tolerance of the maximum")
TOLERANCE_ACTIVATIONS = ("; activations quantized per token: the reference quantizes each such linear's input with "
                         "the quantization family's float32 arithmetic (after rounding it to the dtype), and u is "
                         "max(u_dtype, u_a), u_a = 2^-7 for int8 and 2^-6 for e4m3 activations (an element whose "
                         "dtype value crosses a quantization boundary the reference's does not moves a whole step, "
                         "and later rows with it)")


def _log(side: str, rank: int, world: int, message: str) -> None:
    who = side if world == 1 else f"{side} rank {rank}"
    print(f"[e2e {who}] {message}", file=sys.stderr, flush=True)


def _peak_reset(device: torch.device) -> bool:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:  # Linux: "5" resets the process's peak resident set (VmHWM)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes(device: torch.device, reset: bool) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "device memory allocated by torch (max_memory_allocated)"
    if reset:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "peak resident set of the process during the timed pass (VmHWM)"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak resident set of the process (ru_maxrss)"


def _weights(m: ModelConfig, dtype: torch.dtype, seed: int, path: str | None) -> dict:
    """The random weights; with `path`, the first side of a run saves them there and the others map
    the file (generating 8B parameters' worth takes minutes on a small machine)."""
    if path and os.path.exists(path):
        return torch.load(path, mmap=True, weights_only=True)
    weights = make_weights(m, dtype, seed)
    if path:
        tmp = f"{path}.tmp.{os.getpid()}"
        torch.save(weights, tmp)
        os.replace(tmp, path)
    return weights


def validate(m: ModelConfig, weights, runner: Runner, dtype: str) -> dict:
    """Greedy tokens and logits of `runner` against the float64 reference on the same tokens
    (`m` and `weights` are the reference's: with --weights, quantize.reference_weights)."""
    gen = runner.generate(record_logits=True)
    prompts = runner.prompts()
    kv_cache = runner.kv_cache_spec()  # a quantized cache: the reference quantizes its K/V the same way
    activations = runner.activation_spec()  # quantized activations: the reference quantizes its inputs too
    worst_err, worst_headroom, atol_used, ties, mismatched = 0.0, 0.0, 0.0, 0, []
    for s, prompt in enumerate(prompts):
        ref = reference_logits(m, weights, prompt, gen.tokens[s], kv_cache=kv_cache,
                               activations=activations)  # [steps, vocab]
        got = torch.stack([step[s] for step in gen.logits]).to(torch.float64)
        atol = logit_tolerance(dtype, m.num_layers, ref.abs().max().item(), activations)
        err = (got - ref).abs().max().item()
        worst_err, atol_used = max(worst_err, err), max(atol_used, atol)
        worst_headroom = max(worst_headroom, err / atol)
        best = ref.argmax(-1)
        for j, token in enumerate(gen.tokens[s].tolist()):
            if token == best[j].item():
                continue
            if ref[j, token] >= ref[j, best[j]] - atol:  # within the tolerance of the maximum: either may win
                ties += 1
            else:
                mismatched.append({"sequence": s, "step": j, "token": token, "reference": best[j].item(),
                                   "logit_gap": (ref[j, best[j]] - ref[j, token]).item()})
    passed = worst_headroom <= 1.0 and not mismatched
    return {"status": "passed" if passed else "failed", "against": "float64 reference (plain torch, no cache)",
            "sequences": len(prompts), "steps": runner.work.output_len,
            "prompt_lens": list(runner.work.prompt_lens), "greedy_tokens_equal": not mismatched,
            "ties_within_tolerance": ties, "mismatches": mismatched[:10], "max_abs_logit_error": worst_err,
            "logit_atol": atol_used, "headroom": worst_headroom,
            "tolerance": TOLERANCE + (TOLERANCE_ACTIVATIONS if activations else ""),
            **({"activations": activations} if activations else {}),
            "tokens": gen.tokens.tolist()}


@dataclass
class _Side:
    """One side's run: its spec, where it runs, and what the steps of `run` hand to each other."""

    spec: dict
    name: str
    kind: str
    dist: dict | None
    rank: int
    world: int
    device: torch.device
    result: dict
    dtype_name: str = ""
    dtype: torch.dtype | None = None
    m: ModelConfig | None = None
    wspec: WeightSpec | None = None
    bindings: dict | None = None
    ops: object = None
    loaded: object = None
    wrep: dict = field(default_factory=dict)
    kv_cache_dtype: str = "auto"
    kv_scales: tuple | None = None  # fp8: the (k_scales, v_scales) the validation runner calibrated

    def log(self, message: str) -> None:
        _log(self.name, self.rank, self.world, message)

    def runner_for(self, work: Workload, rows: tuple[int, ...] | None = None) -> Runner:
        r = Runner(self.m, self.loaded, work, ops=self.ops, device=self.device, dtype=self.dtype, rank=self.rank,
                   world_size=self.world, rows=rows, kv_cache_dtype=self.kv_cache_dtype, kv_scales=self.kv_scales)
        if self.kind == "compile":
            r.forward_fn = torch.compile(r.forward, dynamic=False, fullgraph=self.spec.get("fullgraph", False))
        return r


def _start(spec: dict) -> _Side:
    """The side's identity and device; joins the process group of a distributed run."""
    side = spec["side"]
    dist = spec.get("distributed")
    rank, world = (dist["rank"], dist["world_size"]) if dist else (0, 1)
    result: dict = {"name": side["name"], "kind": side["kind"], "overrides": side.get("overrides", {}), "rank": rank}
    w = _Side(spec=spec, name=side["name"], kind=side["kind"], dist=dist, rank=rank, world=world,
              device=torch.device(spec["device"]), result=result)
    if dist:
        import torch.distributed as td

        td.init_process_group(dist["backend"], init_method=f"tcp://{dist['addr']}:{dist['port']}", rank=rank,
                              world_size=world)
        if w.device.type == "cuda":
            torch.cuda.set_device(w.device)
    if w.device.type == "cuda":
        torch.cuda.set_device(w.device)
    return w


def _select(w: _Side) -> None:
    """initialize() with the side's overrides, and the operations the model calls through it."""
    import xllm_kernel

    spec = w.spec
    w.wspec = WeightSpec(**spec["weights"]) if spec.get("weights") else None
    w.kv_cache_dtype = spec.get("kv_cache_dtype", "auto")
    operations = weight_operations(kv_cache_operations(OPERATIONS, w.kv_cache_dtype), w.wspec)
    options = {"batch_invariant": True} if spec["side"].get("batch_invariant") else {}
    w.bindings = xllm_kernel.initialize(device=w.device.type, operations=operations,
                                        overrides=spec["side"].get("overrides") or {}, **options)
    w.result["implementations"] = {op: w.bindings[op].spec.name for op in operations}
    if options:
        w.result["batch_invariant"] = True
    # What each selected implementation declares (absent from a library without the property).
    declared = {op: getattr(w.bindings[op].spec, "batch_invariant", None) for op in operations}
    if any(v is not None for v in declared.values()):
        w.result["implementations_batch_invariant"] = declared
    w.result["threads"] = torch.get_num_threads()
    w.log("selected " + ", ".join(f"{op}={w.bindings[op].spec.name}" for op in operations))
    all_reduce = None
    if w.dist:
        import torch.distributed as td

        all_reduce = td.all_reduce
    w.ops = library_ops(w.bindings, dispatcher=w.kind == "compile", all_reduce=all_reduce, weights=w.wspec,
                        kv_cache_dtype=w.kv_cache_dtype)


def _load_model(w: _Side) -> tuple[dict, ModelConfig, dict, list | None]:
    """The random weights, quantized (with --weights) and loaded onto the device; returns the
    weights, the reference's model and weights, and every rank's shards (None without --weights)."""
    spec, wspec, m = w.spec, w.wspec, w.m
    t0 = time.perf_counter()
    weights = _weights(m, w.dtype, spec["seed"], spec.get("weights_file"))
    w.log(f"weights ready in {time.perf_counter() - t0:.1f} s")
    ref_model, ref_weights, shards = m, weights, None
    if wspec is not None:
        # Every rank's shards, so that each rank's reference is the whole model of the same W.
        t0 = time.perf_counter()
        shards = [quantize_shards(m, weights, wspec, r, w.world) for r in range(w.world)]
        ref_model, ref_weights = reference_weights(m, weights, shards)
        w.log(f"weights quantized ({wspec.scheme}, LM head {wspec.lm_head_scheme}) in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    w.loaded = load(m, weights, device=w.device, dtype=w.dtype, rank=w.rank, world_size=w.world,
                    linears=shards[w.rank] if shards else None,
                    pack=w.bindings["linear_pack"].function if wspec else None)
    if wspec is not None:
        packed = sum(t.nbytes for t in w.loaded.linear_tensors())
        w.log(f"linears packed by {w.bindings['linear_pack'].spec.name} in {time.perf_counter() - t0:.1f} s "
              f"({packed / 1e9:.3g} GB)")
    else:
        packed = None
    w.wrep = weight_report(m, wspec, w.dtype_name, w.world)
    w.result["weights"] = {"bytes_per_decode_step": w.wrep["bytes_per_decode_step"], "packed_bytes": packed}
    return weights, ref_model, ref_weights, shards


def _validate_side(w: _Side, ref_model: ModelConfig, ref_weights) -> bool:
    """Validation on the short greedy workload; False (the result says why) when the side is not
    to be timed: torch.compile failed, or the validation did."""
    compile_error = None
    try:
        vrunner = w.runner_for(Workload(**w.spec["validation_workload"]))
        w.result["validation"] = validate(ref_model, ref_weights, vrunner, w.dtype_name)
        # fp8: the scales its first prefill calibrated stay those of every later runner of the side.
        w.kv_scales = vrunner.kv_cache_scales()
        if w.kv_scales is not None:
            w.result["kv_cache"] = {"dtype": w.kv_cache_dtype, "k_scales": w.kv_scales[0],
                                    "v_scales": w.kv_scales[1],
                                    "calibrated_on": "the validation workload's prefill"}
        del vrunner
    except Exception as e:  # noqa: BLE001 - reported in the side's row
        if w.kind != "compile":
            raise
        compile_error = f"{type(e).__name__}: {e}".strip()
        w.result["validation"] = {"status": "not_run", "reason": "torch.compile failed"}
    if compile_error is not None:
        w.result.update(status="compile_failed", reason=compile_error[:4000])
        w.log(f"torch.compile failed: {compile_error.splitlines()[0][:300]}")
        return False
    v = w.result["validation"]
    w.log(f"validation {v['status']}: max |logit error| {v['max_abs_logit_error']:.3g} "
          f"(atol {v['logit_atol']:.3g}, headroom {v['headroom']:.3g}), greedy tokens equal: {v['greedy_tokens_equal']}")
    if v["status"] != "passed":
        w.result.update(status="failed", reason="validation against the float64 reference failed")
        return False
    return True


def _warm_up(w: _Side, runner: Runner, work: Workload) -> bool:
    """A prefill and two decode steps per warm-up round: every shape the timed pass runs
    (torch.compile compiles here). False (the result says why) when torch.compile failed."""
    for i in range(w.spec["warmup"]):
        w.log(f"warm-up {i + 1}/{w.spec['warmup']}")
        try:
            first = runner.fill_cache() if work.synthetic_prefill else runner.prefill()[0]
            runner.decode(first, steps=min(2, work.output_len - 1))
        except Exception as e:  # noqa: BLE001
            if w.kind != "compile":
                raise
            w.result.update(status="compile_failed", reason=f"{type(e).__name__}: {e}"[:4000])
            return False
    return True


def _timed_pass(w: _Side, runner: Runner, work: Workload) -> None:
    """The uninstrumented repeats of prefill and decode, the peak memory, and the tokens."""
    spec, synthetic = w.spec, work.synthetic_prefill
    reset = _peak_reset(w.device)
    prefill, decode = [], []
    if synthetic:
        first = runner.fill_cache()
    for i in range(0 if synthetic else spec["repeats"]):
        w.log(f"timed prefill {i + 1}/{spec['repeats']}")
        first, _, seconds = runner.prefill()
        prefill.append(seconds)
    for i in range(spec["repeats"]):
        w.log(f"timed decode {i + 1}/{spec['repeats']}")
        rest, _, seconds = runner.decode(first, progress=w.log)
        decode.append(seconds)
    tokens = torch.stack([first.cpu(), *rest], dim=1)
    peak, peak_kind = _peak_bytes(w.device, reset)
    s, steps = len(work.prompt_lens), work.output_len
    p, d = min(prefill, default=None), min(decode)
    kv_bytes = kv_cache_report(w.m, work, w.dtype_name, w.kv_cache_dtype, w.world)["bytes_per_decode_step"]
    w.result["timing"] = {
        "repeats": spec["repeats"], "warmup": spec["warmup"],
        "prefill_seconds": p, "prefill_samples": prefill, "prefill_tokens": sum(work.prompt_lens),
        "prefill_tokens_per_s": sum(work.prompt_lens) / p if p else None,
        "decode_steps": steps - 1, "decode_seconds": d, "decode_samples": decode,
        "decode_tokens": s * (steps - 1),
        "decode_tokens_per_s": s * (steps - 1) / d if steps > 1 else None,
        "time_per_output_token_s": d / (steps - 1) if steps > 1 else None,
        # Every linear's weight is read once per decode step (config.weight_report says what is counted).
        "decode_weight_gb_per_s": w.wrep["bytes_per_decode_step"] * (steps - 1) / d / 1e9 if steps > 1 and d else None,
        # The KV cache's rows (and scales) every decode step reads (config.kv_cache_report says what is counted).
        "decode_kv_gb_per_s": kv_bytes * (steps - 1) / d / 1e9 if steps > 1 and d else None,
    }
    w.result["peak_memory_bytes"], w.result["peak_memory_kind"] = peak, peak_kind
    w.result["tokens_digest"] = hash_tokens(tokens)
    w.result["tokens"] = tokens.tolist() if tokens.numel() <= 4096 else None


def _profile(w: _Side, runner: Runner) -> dict:
    """A separate pass with each call timed (not for torch.compile: one Inductor graph)."""
    if w.kind == "compile":
        return {"status": "unavailable",
                "reason": "the compiled forward is one Inductor graph; timing its steps apart would "
                          "break it into pieces (see the torch side for the same operations eager)"}
    w.log("profiling pass")
    prof = Profiler(w.device)
    timed_ops = prof.ops(w.ops)
    gen = runner.generate(timed_ops, after_step=prof.collect)
    prof.collect()
    total = gen.prefill_seconds + gen.decode_seconds
    rows = [{"operation": k, "calls": prof.calls[k], "seconds": v, "share": v / total}
            for k, v in sorted(prof.seconds.items(), key=lambda kv: -kv[1])]
    attributed = sum(r["seconds"] for r in rows)
    return {"status": "measured", "timer": "cuda events" if w.device.type == "cuda" else
            "host perf_counter around each call (CPU calls are synchronous)",
            "total_seconds": total, "attributed_seconds": attributed,
            "unattributed_seconds": total - attributed, "attributed_share": attributed / total,
            "operations": rows, "tokens_equal_timed_pass": hash_tokens(gen.tokens) == w.result["tokens_digest"]}


def run(spec: dict) -> dict:
    w = _start(spec)
    _select(w)
    w.m = ModelConfig(**{k: v for k, v in spec["model"].items() if k != "parameters"})
    w.dtype_name = spec["dtype"]
    w.dtype = _DTYPES[w.dtype_name]
    weights, ref_model, ref_weights, shards = _load_model(w)
    # Validation first, on the short greedy workload; a side that fails is not timed.
    if not _validate_side(w, ref_model, ref_weights):
        return w.result
    work = Workload(**spec["workload"])
    runner = w.runner_for(work)
    weights.clear()  # the runner holds its own (fused, sharded or packed) copies
    del ref_weights, shards
    if not _warm_up(w, runner, work):
        return w.result
    _timed_pass(w, runner, work)
    w.result["profile"] = _profile(w, runner)
    w.result["status"] = "timed"
    if spec["side"].get("batch_invariant"):
        del runner  # the check's runners hold caches of their own
        _check_invariance(w, work)
    if w.dist:
        import torch.distributed as td

        td.barrier()
        td.destroy_process_group()
    return w.result


def _check_invariance(w: _Side, work: Workload) -> None:
    """Every sequence of the workload alone against the batch, greedy, bit for bit (after the
    timed and profiling passes, so that a side that differs still reports its figures); a
    difference fails the side."""
    greedy = replace(work, temperature=0.0)
    t0 = time.perf_counter()
    result = invariance.check(lambda rows: w.runner_for(greedy, rows), greedy, log=w.log)
    result["seconds"] = time.perf_counter() - t0
    result["temperature"] = 0.0
    w.result["invariance"] = result
    w.log(f"batch invariance {result['status']}: {invariance.describe(result)}")
    if result["status"] != "identical":
        w.result.update(status="failed", reason="batch invariance: " + invariance.describe(result))


def hash_tokens(tokens: torch.Tensor) -> str:
    import hashlib

    return hashlib.sha256(tokens.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()[:16]


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        result = run(spec)
    except Exception as e:  # noqa: BLE001 - the parent reports it as the side's error
        traceback.print_exc()
        result = {"name": spec["side"]["name"], "kind": spec["side"]["kind"], "status": "error",
                  "reason": f"{type(e).__name__}: {e}"[:4000]}
    result["pid"] = os.getpid()
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
