"""One side of an end-to-end run, in a process of its own: initialize() selects once per process, so
the selected implementations, the torch solution (every operation overridden to `torch`) and
torch.compile each get a fresh interpreter. The parent (xllm_kernel.e2e.cli) starts

    python -m xllm_kernel.e2e.worker SPEC.json RESULT.json

and reads the result. Order: initialize, random weights (with --weights: quantized and packed once
by the side's linear_pack), validation against the float64 reference (a short greedy workload),
warm-up, the timed pass (uninstrumented), then a separate profiling pass (each call timed).
Progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback

import torch

from xllm_kernel.e2e.config import ModelConfig, WeightSpec, Workload, weight_report
from xllm_kernel.e2e.model import LINEAR_OPERATIONS, OPERATIONS, Profiler, Runner, library_ops, load, make_weights
from xllm_kernel.e2e.quantize import quantize_shards, reference_weights
from xllm_kernel.e2e.reference import reference_logits

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Logit tolerance against the float64 reference, in units of the dtype's unit roundoff times the
# logits' scale (max(1, max |reference|)): the runner rounds every activation to the dtype (about
# 4 roundings per layer on the residual stream and the GEMM inputs), so its error grows like
# sqrt(layers); 16 u sqrt(layers + 1) leaves room over the errors seen (see the report's headroom).
_UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def logit_tolerance(dtype: str, layers: int, scale: float) -> float:
    return 16 * _UNIT_ROUNDOFF[dtype] * (layers + 1) ** 0.5 * max(1.0, scale)


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
    worst_err, worst_headroom, atol_used, ties, mismatched = 0.0, 0.0, 0.0, 0, []
    for s, prompt in enumerate(prompts):
        ref = reference_logits(m, weights, prompt, gen.tokens[s])  # [steps, vocab]
        got = torch.stack([step[s] for step in gen.logits]).to(torch.float64)
        atol = logit_tolerance(dtype, m.num_layers, ref.abs().max().item())
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
            "tokens": gen.tokens.tolist()}


def run(spec: dict) -> dict:
    side = spec["side"]
    name, kind = side["name"], side["kind"]
    dist = spec.get("distributed")
    rank, world = (dist["rank"], dist["world_size"]) if dist else (0, 1)
    log = lambda msg: _log(name, rank, world, msg)  # noqa: E731
    result: dict = {"name": name, "kind": kind, "overrides": side.get("overrides", {}), "rank": rank}
    device = torch.device(spec["device"])
    if dist:
        import torch.distributed as td

        td.init_process_group(dist["backend"], init_method=f"tcp://{dist['addr']}:{dist['port']}", rank=rank,
                              world_size=world)
        if device.type == "cuda":
            torch.cuda.set_device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)

    import xllm_kernel

    wspec = WeightSpec(**spec["weights"]) if spec.get("weights") else None
    operations = OPERATIONS + (LINEAR_OPERATIONS if wspec else ())
    bindings = xllm_kernel.initialize(device=device.type, operations=operations, overrides=side.get("overrides") or {})
    result["implementations"] = {op: bindings[op].spec.name for op in operations}
    result["threads"] = torch.get_num_threads()
    log("selected " + ", ".join(f"{op}={bindings[op].spec.name}" for op in operations))
    all_reduce = None
    if dist:
        import torch.distributed as td

        all_reduce = td.all_reduce
    ops = library_ops(bindings, dispatcher=kind == "compile", all_reduce=all_reduce, linear=wspec is not None)
    m = ModelConfig(**{k: v for k, v in spec["model"].items() if k != "parameters"})
    dtype_name = spec["dtype"]
    dtype = _DTYPES[dtype_name]
    t0 = time.perf_counter()
    weights = _weights(m, dtype, spec["seed"], spec.get("weights_file"))
    log(f"weights ready in {time.perf_counter() - t0:.1f} s")
    ref_model, ref_weights, shards = m, weights, None
    if wspec is not None:
        # Every rank's shards, so that each rank's reference is the whole model of the same W.
        t0 = time.perf_counter()
        shards = [quantize_shards(m, weights, wspec, r, world) for r in range(world)]
        ref_model, ref_weights = reference_weights(m, weights, shards)
        log(f"weights quantized ({wspec.scheme}, LM head {wspec.lm_head_scheme}) in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    loaded = load(m, weights, device=device, dtype=dtype, rank=rank, world_size=world,
                  linears=shards[rank] if shards else None,
                  pack=bindings["linear_pack"].function if wspec else None)
    if wspec is not None:
        packed = sum(t.nbytes for t in loaded.linear_tensors())
        log(f"linears packed by {bindings['linear_pack'].spec.name} in {time.perf_counter() - t0:.1f} s "
            f"({packed / 1e9:.3g} GB)")
    else:
        packed = None
    wrep = weight_report(m, wspec, dtype_name, world)
    result["weights"] = {"bytes_per_decode_step": wrep["bytes_per_decode_step"], "packed_bytes": packed}

    def runner_for(work: Workload) -> Runner:
        r = Runner(m, loaded, work, ops=ops, device=device, dtype=dtype, rank=rank, world_size=world)
        if kind == "compile":
            r.forward_fn = torch.compile(r.forward, dynamic=False, fullgraph=spec.get("fullgraph", False))
        return r

    # Validation first, on the short greedy workload; a side that fails is not timed.
    compile_error = None
    vwork = Workload(**spec["validation_workload"])
    try:
        vrunner = runner_for(vwork)
        result["validation"] = validate(ref_model, ref_weights, vrunner, dtype_name)
        del vrunner
    except Exception as e:  # noqa: BLE001 - reported in the side's row
        if kind != "compile":
            raise
        compile_error = f"{type(e).__name__}: {e}".strip()
        result["validation"] = {"status": "not_run", "reason": "torch.compile failed"}
    if compile_error is not None:
        result.update(status="compile_failed", reason=compile_error[:4000])
        log(f"torch.compile failed: {compile_error.splitlines()[0][:300]}")
        return result
    v = result["validation"]
    log(f"validation {v['status']}: max |logit error| {v['max_abs_logit_error']:.3g} "
        f"(atol {v['logit_atol']:.3g}, headroom {v['headroom']:.3g}), greedy tokens equal: {v['greedy_tokens_equal']}")
    if v["status"] != "passed":
        result.update(status="failed", reason="validation against the float64 reference failed")
        return result

    work = Workload(**spec["workload"])
    synthetic = work.synthetic_prefill
    runner = runner_for(work)
    weights.clear()  # the runner holds its own (fused, sharded or packed) copies
    del ref_weights, shards
    for i in range(spec["warmup"]):
        # A prefill and two decode steps: every shape the timed pass runs (torch.compile compiles here).
        log(f"warm-up {i + 1}/{spec['warmup']}")
        try:
            first = runner.fill_cache() if synthetic else runner.prefill()[0]
            runner.decode(first, steps=min(2, work.output_len - 1))
        except Exception as e:  # noqa: BLE001
            if kind != "compile":
                raise
            result.update(status="compile_failed", reason=f"{type(e).__name__}: {e}"[:4000])
            return result
    reset = _peak_reset(device)
    prefill, decode = [], []
    if synthetic:
        first = runner.fill_cache()
    for i in range(0 if synthetic else spec["repeats"]):
        log(f"timed prefill {i + 1}/{spec['repeats']}")
        first, _, seconds = runner.prefill()
        prefill.append(seconds)
    for i in range(spec["repeats"]):
        log(f"timed decode {i + 1}/{spec['repeats']}")
        rest, _, seconds = runner.decode(first, progress=log)
        decode.append(seconds)
    tokens = torch.stack([first.cpu(), *rest], dim=1)
    peak, peak_kind = _peak_bytes(device, reset)
    s, steps = len(work.prompt_lens), work.output_len
    p, d = min(prefill, default=None), min(decode)
    result["timing"] = {
        "repeats": spec["repeats"], "warmup": spec["warmup"],
        "prefill_seconds": p, "prefill_samples": prefill, "prefill_tokens": sum(work.prompt_lens),
        "prefill_tokens_per_s": sum(work.prompt_lens) / p if p else None,
        "decode_steps": steps - 1, "decode_seconds": d, "decode_samples": decode,
        "decode_tokens": s * (steps - 1),
        "decode_tokens_per_s": s * (steps - 1) / d if steps > 1 else None,
        "time_per_output_token_s": d / (steps - 1) if steps > 1 else None,
        # Every linear's weight is read once per decode step (config.weight_report says what is counted).
        "decode_weight_gb_per_s": wrep["bytes_per_decode_step"] * (steps - 1) / d / 1e9 if steps > 1 and d else None,
    }
    result["peak_memory_bytes"], result["peak_memory_kind"] = peak, peak_kind
    result["tokens_digest"] = hash_tokens(tokens)
    result["tokens"] = tokens.tolist() if tokens.numel() <= 4096 else None

    if kind == "compile":
        result["profile"] = {"status": "unavailable",
                             "reason": "the compiled forward is one Inductor graph; timing its steps apart would "
                                       "break it into pieces (see the torch side for the same operations eager)"}
    else:
        log("profiling pass")
        prof = Profiler(device)
        timed_ops = prof.ops(ops)
        gen = runner.generate(timed_ops, after_step=prof.collect)
        prof.collect()
        total = gen.prefill_seconds + gen.decode_seconds
        rows = [{"operation": k, "calls": prof.calls[k], "seconds": v, "share": v / total}
                for k, v in sorted(prof.seconds.items(), key=lambda kv: -kv[1])]
        attributed = sum(r["seconds"] for r in rows)
        result["profile"] = {"status": "measured", "timer": "cuda events" if device.type == "cuda" else
                             "host perf_counter around each call (CPU calls are synchronous)",
                             "total_seconds": total, "attributed_seconds": attributed,
                             "unattributed_seconds": total - attributed, "attributed_share": attributed / total,
                             "operations": rows, "tokens_equal_timed_pass": hash_tokens(gen.tokens) == result["tokens_digest"]}
    result["status"] = "timed"
    if dist:
        import torch.distributed as td

        td.barrier()
        td.destroy_process_group()
    return result


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
