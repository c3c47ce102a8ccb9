"""`python -m xllm_kernel.e2e`: the end-to-end measurement, side by side.

    python -m xllm_kernel.e2e --preset llama-3-8b --layers 2 --batch 16 --prompt-len 2048 --output-len 8 \
        --output e2e.json --markdown e2e.md --plot e2e.png
    torchrun --nproc-per-node 2 -m xllm_kernel.e2e --distributed --preset tiny --output e2e.json
    python -m xllm_kernel.e2e --preset tiny --batch 4 --prompt-len 5,9,13,17 --batch-invariant --sides selected
    python -m xllm_kernel.e2e --preset tiny --kv-cache-dtype int8 --output e2e.json
    python -m xllm_kernel.e2e --preset tiny --weights w8a8-int8 --output e2e.json

Each side runs in a process of its own (initialize() selects once per process): `selected` (what
initialize picks), `torch` (every operation overridden to the torch solution), `compile`
(torch.compile of the torch-solution model), and any `NAME=op:target+op:target` (e.g.
`attn-torch=paged_attention:torch`). GEMMs are torch's F.linear unless --weights SCHEME: then every
linear (qkv, o_proj, gate_up, down, LM head) is the library's `linear` on weights quantized from the
random ones and packed once at load by the side's own `linear_pack` (the torch and compile sides:
the torch solution's). The activation-quantized schemes (--weights w8a8-int8|w8a8-fp8|w4a8)
quantize each linear's input per token in the operation that writes it (rms_norm_per_token_quant,
fused_add_rms_norm_per_token_quant, silu_and_mul_per_token_quant) and multiply with scaled_mm;
o_proj and the LM head use linear_dynamic_quant (the float64 reference quantizes its inputs the
same way). --kv-cache-dtype fp8|int8 stores the paged KV cache in one byte per element with float32
scales: reshape_and_cache_quant writes it and paged_attention_quant reads it in place of
reshape_and_cache and paged_attention (the float64 reference quantizes its K/V the same way).
--batch-invariant adds the side `invariant` after `selected`:
initialize(batch_invariant=True), timed like the others (the report gives its tokens/s over
selected's), then every sequence of the workload rerun alone (greedy) and compared bit for bit with
its run in the batch, tokens and the logits of every step. Exit codes: 0 every side validated and
timed (a side whose torch.compile failed is reported with the error and does not fail the run), 1 a
side failed validation, differed alone from the batch, or raised, 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

from xllm_kernel.e2e import report as rep
from xllm_kernel.e2e.config import (ACTIVATION_SCHEMES, DTYPES, KV_CACHE_DTYPES, KV_CACHE_SCALES,
                                    PACKED_OPERATIONS, PRESETS, QUANTIZED_PRODUCERS, WEIGHT_SCHEMES, UsageError,
                                    WeightSpec, Workload, check, check_kv_cache_dtype, check_weights,
                                    kv_cache_operations, kv_cache_report, model_config, normalize_kv_cache_dtype,
                                    weight_operations, weight_report, weight_spec)

PROG = "python -m xllm_kernel.e2e"
OPERATIONS = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "reshape_and_cache", "paged_attention",
              "silu_and_mul", "sample")  # model.OPERATIONS, without importing torch for --help
LINEAR_OPERATIONS = ("linear_pack", "linear")  # model.LINEAR_OPERATIONS: with --weights
TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
INVARIANT = "invariant"  # --batch-invariant's side
BATCH_INVARIANT_VARIABLE = "XLLM_KERNEL_BATCH_INVARIANT"  # not passed to the sides: --batch-invariant asks


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with the message, as argparse does, but through UsageError
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    g = p.add_argument_group("model")
    g.add_argument("--preset", help=f"one of {', '.join(PRESETS)} (random weights, real shapes)")
    g.add_argument("--config", help="a Hugging Face config.json (model_type llama, mistral or qwen2)")
    g.add_argument("--layers", type=int, help="decoder layers (default: the model's)")
    g.add_argument("--dtype", default="bfloat16", help=f"{', '.join(DTYPES)} (default bfloat16)")
    g.add_argument("--device", default="cpu", help="cpu, cuda or npu (a rank of --distributed: cuda/npu:LOCAL_RANK)")
    g.add_argument("--weights", metavar="SCHEME",
                   help=f"one of {', '.join(WEIGHT_SCHEMES)}: every linear through the library's linear family on "
                        "weights in that scheme, packed once at load (int8 per channel, fp8 128x128 blocks, int4 "
                        "symmetric groups: linear; w8a8-int8 per channel, w8a8-fp8 per channel, w4a8 int4 groups: "
                        "activations quantized per token by the norm / activation before the GEMM, scaled_mm, and "
                        "linear_dynamic_quant for o_proj and the LM head); default: torch's F.linear on the --dtype "
                        "weights")
    g.add_argument("--lm-head-weights", metavar="SCHEME", help="the LM head's scheme (default: --weights')")
    g.add_argument("--group-size", type=int, default=128,
                   help="the group along K of int4 and w4a8 (w4a8: a multiple of 8; default 128)")
    g.add_argument("--kv-cache-dtype", default="auto", metavar="DTYPE",
                   help=f"one of {', '.join(KV_CACHE_DTYPES)}: the paged KV cache's storage. auto: the --dtype "
                        "(reshape_and_cache, paged_attention; also spelled bf16, f16 or f32, the --dtype's name); fp8 (float8_e4m3fn) and int8: one byte per element, "
                        "written by reshape_and_cache_quant and read by paged_attention_quant. fp8 scales: "
                        f"{KV_CACHE_SCALES['fp8']}. int8 scales: {KV_CACHE_SCALES['int8']} (default auto)")
    w = p.add_argument_group("workload")
    w.add_argument("--batch", type=int, default=2, help="sequences (default 2)")
    w.add_argument("--prompt-len", default="16", help="prompt tokens, one value or a comma list cycled over the batch")
    w.add_argument("--output-len", type=int, default=8, help="generated tokens per sequence (prefill samples the first)")
    w.add_argument("--block-size", type=int, default=16, help="tokens per cache block (default 16)")
    w.add_argument("--num-blocks", type=int, default=0, help="cache blocks (default: what the batch needs + 1 per sequence)")
    w.add_argument("--temperature", type=float, default=0.0, help="sampling temperature of the timed run (0: greedy)")
    w.add_argument("--seed", type=int, default=0, help="weights, prompts, block shuffle and sampling seeds")
    w.add_argument("--synthetic-prefill", action="store_true",
                   help="decode only: random K/V at the prompt positions instead of a prefill forward (no prefill "
                        "figures; validation still runs a real prefill)")
    v = p.add_argument_group("validation (greedy, against the float64 reference, before timing)")
    v.add_argument("--validate-batch", type=int, default=2)
    v.add_argument("--validate-prompt-len", default="24,13")
    v.add_argument("--validate-output-len", type=int, default=4)
    r = p.add_argument_group("run and reports")
    r.add_argument("--sides", default="selected,torch,compile",
                   help="comma list: selected, torch, compile, NAME=op:target+op:target (default all three)")
    r.add_argument("--warmup", type=int, default=1, help="untimed passes of the workload first (compiles)")
    r.add_argument("--repeats", type=int, default=1, help="timed passes (the best is reported)")
    r.add_argument("--threads", type=int, default=0, help="torch intra-op threads in each side (0: torch's default)")
    r.add_argument("--fullgraph", action="store_true", help="torch.compile(fullgraph=True) for the compile side")
    r.add_argument("--output", help="JSON report")
    r.add_argument("--markdown", help="Markdown report (also printed)")
    r.add_argument("--plot", help="PNG of the time share per step per side (needs matplotlib)")
    r.add_argument("--revision", default="", help="recorded in the report's environment")
    r.add_argument("--batch-invariant", action="store_true",
                   help=f"add the side {INVARIANT!r} (initialize(batch_invariant=True)) after 'selected', and check "
                        "that every sequence gets the same greedy tokens and logits bit for bit alone as in the "
                        "batch (a difference exits 1)")
    r.add_argument("--distributed", action="store_true", help="tensor parallel over the ranks of a torchrun launch")
    r.add_argument("--distributed-timeout", type=float, default=600, help="seconds any collective waits")
    return p


def _lens(text: str, batch: int, flag: str) -> tuple[int, ...]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected integers separated by commas, got {text!r}") from None
    if not values:
        raise UsageError(f"{flag}: give at least one length")
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, got {batch}")
    return tuple(values[i % len(values)] for i in range(batch))


# The operations only some --weights call, and what makes a run call them (a custom side naming
# one the run does not call is a usage error saying so).
_WEIGHT_ONLY = ", ".join(s for s in WEIGHT_SCHEMES if s not in ACTIVATION_SCHEMES)
_ACTIVATION = ", ".join(ACTIVATION_SCHEMES)
_NEEDS = {"linear_pack": "--weights", "linear": f"--weights (or --lm-head-weights) {_WEIGHT_ONLY}",
          "scaled_mm": f"--weights {_ACTIVATION}",
          "linear_dynamic_quant": f"--weights (or --lm-head-weights) {_ACTIVATION}",
          "fused_add_rms_norm_per_token_quant": f"--weights {_ACTIVATION}",
          **{q: f"--weights {_ACTIVATION}" for q in QUANTIZED_PRODUCERS.values()},
          **{p: f"no --weights or --weights {_WEIGHT_ONLY}" for p in QUANTIZED_PRODUCERS}}


def sides(text: str, linear: bool = False, kv_cache_dtype: str = "auto",
          weights: WeightSpec | None = None) -> list[dict]:
    """The --sides list; with `linear` (--weights) the torch and compile sides also override
    linear_pack and linear (with `weights`, every operation its forward calls:
    config.weight_operations, scaled_mm, linear_dynamic_quant and the quantizing producers for the
    activation-quantized schemes), and a custom side may name any of the operations on packed
    weights (the others follow: a packed weight is only accepted by the operations of the
    implementation that packed it). With a quantized `kv_cache_dtype` the cache's operations are
    reshape_and_cache_quant and paged_attention_quant."""
    ops = kv_cache_operations(OPERATIONS, kv_cache_dtype)
    ops = weight_operations(ops, weights) if weights is not None else ops + (LINEAR_OPERATIONS if linear else ())
    other_cache = set(kv_cache_operations(OPERATIONS, "int8" if kv_cache_dtype == "auto" else "auto")) - set(ops)
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        if item == "selected":
            out.append({"name": "selected", "kind": "selected", "overrides": {}})
        elif item in ("torch", "compile"):
            out.append({"name": item, "kind": item, "overrides": {op: "torch" for op in ops}})
        elif "=" in item:
            name, _, spec = item.partition("=")
            overrides = {}
            for pair in filter(None, spec.split("+")):
                op, _, target = pair.partition(":")
                if op in _NEEDS and op not in ops:
                    this = f" (this run: --weights {weights.scheme}, LM head {weights.lm_head_scheme})" if weights \
                        else ""
                    raise UsageError(f"--sides: {pair!r} in {item!r} overrides {op}, which runs only with "
                                     f"{_NEEDS[op]}{this}")
                if op in other_cache:
                    runs = "--kv-cache-dtype fp8 or int8" if op.endswith("_quant") else "--kv-cache-dtype auto"
                    raise UsageError(f"--sides: {pair!r} in {item!r} overrides {op}, which runs only with {runs} "
                                     f"(this run's cache: --kv-cache-dtype {kv_cache_dtype})")
                if op not in ops or not target:
                    raise UsageError(f"--sides: {pair!r} in {item!r} must be OPERATION:TARGET with OPERATION one of "
                                     f"{', '.join(ops)}")
                overrides[op] = target
            given = [op for op in PACKED_OPERATIONS if op in overrides]
            if given:  # the first named (linear_pack first) sets the others' target
                for b in PACKED_OPERATIONS:
                    if b in ops and b not in overrides:
                        overrides[b] = _paired_target(overrides[given[0]], given[0], b)
            out.append({"name": name, "kind": "custom", "overrides": overrides})
        else:
            raise UsageError(f"--sides: expected selected, torch, compile or NAME=op:target, got {item!r}")
    names = [s["name"] for s in out]
    if not out or len(set(names)) != len(names):
        raise UsageError(f"--sides: give at least one side, each name once, got {names}")
    return out


def with_invariant_side(side_list: list[dict], work: Workload, distributed: bool) -> list[dict]:
    """--batch-invariant: the side `invariant` right after `selected` (its tokens/s are reported
    over selected's), or a usage error naming what cannot be combined with it."""
    names = [s["name"] for s in side_list]
    if "selected" not in names:
        raise UsageError(f"--batch-invariant compares the side {INVARIANT!r} with 'selected': include selected in "
                         f"--sides (got {','.join(names)})")
    if INVARIANT in names:
        raise UsageError(f"--batch-invariant adds the side {INVARIANT!r}: give another name to the side of --sides "
                         f"called {INVARIANT!r}")
    if distributed:
        raise UsageError("--batch-invariant runs on one rank: under --distributed the all-reduces are "
                         "torch.distributed's, whose summation order is the backend's (it may change with the "
                         "message size, that is with the batch), outside what the library's selection guarantees")
    if work.synthetic_prefill and work.output_len < 2:
        raise UsageError("--batch-invariant with --synthetic-prefill compares the decode steps (the first token is "
                         "drawn, not computed): give --output-len 2 or more")
    i = names.index("selected") + 1
    return side_list[:i] + [{"name": INVARIANT, "kind": "selected", "overrides": {}, "batch_invariant": True}] \
        + side_list[i:]


def _paired_target(target: str, op: str, other: str) -> str:
    """linear_pack's override for linear's (or the reverse, or scaled_mm's, linear_dynamic_quant's):
    a solution names both; a full name (cpu.native.linear) the same implementation of the other
    operation."""
    prefix, dot, leaf = target.rpartition(".")
    return f"{prefix}.{other}" if dot and leaf == op else target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _run_side(spec: dict, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="xllm-e2e-") as tmp:
        spec_path, result_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        # Each side is what --sides and --batch-invariant say: no override, and no batch invariance,
        # from the environment (the invariant side passes batch_invariant=True to initialize).
        env = {k: v for k, v in os.environ.items() if not k.startswith("XLLM_KERNEL_OVERRIDE_")
               and k not in ("TORCHELASTIC_USE_AGENT_STORE", BATCH_INVARIANT_VARIABLE)}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        proc = subprocess.Popen([sys.executable, "-m", "xllm_kernel.e2e.worker", spec_path, result_path], env=env)
        try:
            code = proc.wait()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the side's process ends with the run
            proc.terminate()
            proc.wait()
            raise
        try:
            with open(result_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"name": spec["side"]["name"], "kind": spec["side"]["kind"], "status": "error",
                    "reason": f"the side's process exited {code} without a result"}


def _side_exit(side: dict) -> int:
    return 0 if side.get("status") in ("timed", "compile_failed") else 1


def _output_path(path: str | None, rank: int | None) -> str | None:
    if path is None or rank is None:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def _publish(report: dict, args, render, rank: int | None, print_it: bool) -> None:
    out, md, png = (_output_path(p, rank) for p in (args.output, args.markdown, args.plot))
    if png:
        skipped = rep.plot(report, png)
        report["plot"] = {"path": None, "skipped": skipped} if skipped else {"path": png}
        if skipped:
            print(f"{PROG}: plot skipped: {skipped}", file=sys.stderr)
    text = render(report)
    if out:
        rep.write_atomically(out, json.dumps(report, indent=1) + "\n")
    if md:
        rep.write_atomically(md, text)
    if print_it:
        print(text, end="", flush=True)


def _aggregate(reports: list[dict], paths: list[str | None]) -> dict:
    first = reports[0]
    agg = {k: first[k] for k in ("tool", "model", "workload", "validation_workload", "dtype", "device", "repeats",
                                 "warmup", "world_size", "environment")}
    # Every rank reads its shards and the replicated LM head: the aggregate counts all ranks' bytes.
    all_bytes = sum(rp["weights"]["bytes_per_decode_step"] for rp in reports)
    agg["weights"] = {k: v for k, v in first["weights"].items() if k != "roles"}
    agg["weights"].update(bytes_per_decode_step=all_bytes, bytes_counted=f"the sum over the {len(reports)} ranks of "
                          f"each rank's bytes: {first['weights']['bytes_counted']}")
    # Every rank reads its KV heads' share of the cache: the aggregate counts all ranks' bytes too.
    if "kv_cache" in first:
        kv_ranks = [rp["kv_cache"] for rp in reports]
        agg["kv_cache"] = dict(first["kv_cache"])
        for key in ("bytes_per_decode_step", "scale_bytes_per_decode_step"):
            agg["kv_cache"][key] = sum(kv[key] for kv in kv_ranks)
        agg["kv_cache"]["bytes_counted"] = (f"the sum over the {len(reports)} ranks of each rank's bytes: "
                                            f"{first['kv_cache']['bytes_counted']}")
    agg["schema"] = rep.AGGREGATE_SCHEMA
    agg["ranks"] = [{"rank": r, "report": paths[r], "device": rp["rank_device"], "host": rp["environment"].get("host"),
                     "summary": rp["summary"]} for r, rp in enumerate(reports)]
    agg["sides"] = []
    for i, s0 in enumerate(first["sides"]):
        per = [rp["sides"][i] for rp in reports]
        statuses = [p.get("status") for p in per]
        digests = [p.get("tokens_digest") for p in per]
        side = {k: s0.get(k) for k in ("name", "kind", "overrides", "implementations")}
        side["statuses"] = statuses
        side["status"] = statuses[0] if len(set(statuses)) == 1 else "disagreed"
        side["tokens_agree"] = len(set(digests)) == 1 and digests[0] is not None
        side["tokens_digest"] = digests[0] if side["tokens_agree"] else None
        if side["status"] == "timed" and not side["tokens_agree"]:
            side["status"] = "disagreed"
            side["reason"] = "the ranks sampled different tokens"
        reasons = [p.get("reason") for p in per if p.get("reason")]
        if reasons and "reason" not in side:
            side["reason"] = reasons[0]
        side["validation"] = {"status": "passed" if all((p.get("validation") or {}).get("status") == "passed"
                                                        for p in per) else "failed",
                              "headroom": max((p.get("validation") or {}).get("headroom", 0) or 0 for p in per),
                              "max_abs_logit_error": max((p.get("validation") or {}).get("max_abs_logit_error", 0) or 0
                                                         for p in per),
                              "logit_atol": max((p.get("validation") or {}).get("logit_atol", 0) or 0 for p in per)
                              or 1.0,
                              "greedy_tokens_equal": all((p.get("validation") or {}).get("greedy_tokens_equal")
                                                         for p in per)}
        if all(p.get("timing") for p in per):
            t = dict(per[0]["timing"])
            # A step bound by the all-reduces waits for the slowest rank.
            if t["prefill_seconds"] is not None:
                t["prefill_seconds"] = max(p["timing"]["prefill_seconds"] for p in per)
                t["prefill_tokens_per_s"] = t["prefill_tokens"] / t["prefill_seconds"]
            t["decode_seconds"] = max(p["timing"]["decode_seconds"] for p in per)
            if t["decode_steps"]:
                t["decode_tokens_per_s"] = t["decode_tokens"] / t["decode_seconds"]
                t["time_per_output_token_s"] = t["decode_seconds"] / t["decode_steps"]
                t["decode_weight_gb_per_s"] = all_bytes * t["decode_steps"] / t["decode_seconds"] / 1e9 \
                    if t["decode_seconds"] else None
                if "kv_cache" in agg and "decode_kv_gb_per_s" in t:
                    t["decode_kv_gb_per_s"] = agg["kv_cache"]["bytes_per_decode_step"] * t["decode_steps"] \
                        / t["decode_seconds"] / 1e9 if t["decode_seconds"] else None
            t.pop("prefill_samples", None)
            t.pop("decode_samples", None)
            side["timing"] = t
            side["peak_memory_bytes"] = max(p.get("peak_memory_bytes", 0) for p in per)
            side["peak_memory_kind"] = "maximum over ranks of: " + str(per[0].get("peak_memory_kind"))
        profiles = [p.get("profile") for p in per]
        if all(pr and pr.get("status") == "measured" for pr in profiles):
            ops: dict[str, float] = {}
            calls: dict[str, int] = {}
            for pr in profiles:
                for row in pr["operations"]:
                    ops[row["operation"]] = max(ops.get(row["operation"], 0.0), row["seconds"])
                    calls[row["operation"]] = row["calls"]
            total = max(pr["total_seconds"] for pr in profiles)
            attributed = min(sum(ops.values()), total)
            side["profile"] = {"status": "measured", "timer": profiles[0]["timer"] + "; per step the slowest rank",
                               "total_seconds": total, "attributed_seconds": attributed,
                               "unattributed_seconds": total - attributed, "attributed_share": attributed / total,
                               "operations": [{"operation": k, "calls": calls[k], "seconds": v, "share": v / total}
                                              for k, v in sorted(ops.items(), key=lambda kv: -kv[1])]}
        elif profiles[0]:
            side["profile"] = profiles[0]
        side["per_rank"] = [{"rank": r, "status": p.get("status"), "tokens_digest": p.get("tokens_digest"),
                             "timing": p.get("timing"), "peak_memory_bytes": p.get("peak_memory_bytes")}
                            for r, p in enumerate(per)]
        agg["sides"].append(side)
    codes = [_side_exit(s) if s["status"] != "disagreed" else 1 for s in agg["sides"]]
    agg["summary"] = {"sides": len(codes), "timed": sum(s["status"] == "timed" for s in agg["sides"]),
                      "failed": sum(c != 0 for c in codes), "exit_code": max(codes, default=0)}
    return agg


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        preset = args.preset if args.preset or args.config else None
        if preset is None and args.config is None:
            raise UsageError("give --preset NAME or --config FILE")
        model = model_config(preset, config_file=args.config, layers=args.layers)
        work = Workload(prompt_lens=_lens(args.prompt_len, args.batch, "--prompt-len"), output_len=args.output_len,
                        block_size=args.block_size, num_blocks=args.num_blocks, seed=args.seed,
                        temperature=args.temperature, synthetic_prefill=args.synthetic_prefill)
        vwork = Workload(prompt_lens=_lens(args.validate_prompt_len, args.validate_batch, "--validate-prompt-len"),
                         output_len=args.validate_output_len, block_size=args.block_size, seed=args.seed)
        wspec = weight_spec(args.weights, args.lm_head_weights, args.group_size)
        args.kv_cache_dtype = normalize_kv_cache_dtype(args.kv_cache_dtype, args.dtype)
        check_kv_cache_dtype(args.kv_cache_dtype)
        side_list = sides(args.sides, linear=wspec is not None, kv_cache_dtype=args.kv_cache_dtype, weights=wspec)
        if args.batch_invariant:
            side_list = with_invariant_side(side_list, work, args.distributed)
        if args.warmup < 0 or args.repeats < 1:
            raise UsageError(f"--warmup must be >= 0 and --repeats >= 1, got {args.warmup} and {args.repeats}")
        world, rank, local = 1, None, 0
        if args.distributed:
            missing = [k for k in TORCHRUN if k not in os.environ]
            if missing:
                raise UsageError(f"--distributed needs torchrun's environment; missing {', '.join(missing)}")
            world, rank, local = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
            if world < 2:
                raise UsageError(f"--distributed needs at least 2 ranks, got WORLD_SIZE={world}")
        check(model, work, world, args.dtype)
        check(model, vwork, world, args.dtype)
        check_weights(model, wspec, world)
        kind = args.device.split(":")[0]
        if kind not in ("cpu", "cuda", "npu"):
            raise UsageError(f"--device: expected cpu, cuda or npu, got {args.device!r}")
        if args.distributed and ":" in args.device:
            raise UsageError("--device: with --distributed give the device type only; rank r uses LOCAL_RANK's device")
        device = args.device if kind == "cpu" or not args.distributed else f"{kind}:{local}"
        if kind != "cpu" and ":" not in device:
            device += ":0"
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    if os.environ.get(BATCH_INVARIANT_VARIABLE):
        print(f"{PROG}: {BATCH_INVARIANT_VARIABLE} is not passed to the sides (each side is what --sides says); "
              "--batch-invariant adds a side that asks for it", file=sys.stderr)

    import torch  # noqa: F401 - after the usage checks, so that --help and bad flags stay fast

    # SIGTERM unwinds like Ctrl-C, so that the side's process ends and the weights file is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    group = None
    if args.distributed:
        import datetime

        import torch.distributed as td

        td.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.distributed_timeout))
        group = td
    base = {"model": model.to_json(), "dtype": args.dtype, "device": device, "seed": args.seed,
            "workload": dataclasses.asdict(work), "validation_workload": dataclasses.asdict(vwork),
            "warmup": args.warmup, "repeats": args.repeats, "fullgraph": args.fullgraph,
            "weights": wspec.to_json() if wspec else None, "kv_cache_dtype": args.kv_cache_dtype}
    # The sides share one copy of the random weights: the first saves them, the others map the file.
    weights_dir = tempfile.mkdtemp(prefix="xllm-e2e-weights-")
    base["weights_file"] = os.path.join(weights_dir, "weights.pt")
    try:
        results = _run_sides(side_list, base, args, group, rank, world, kind)
    finally:
        shutil.rmtree(weights_dir, ignore_errors=True)
    return _finish(results, args, model, work, vwork, device, world, rank, local, group,
                   weight_report(model, wspec, args.dtype, world),
                   kv_cache_report(model, work, args.dtype, args.kv_cache_dtype, world))


def _run_sides(side_list, base, args, group, rank, world, kind) -> list[dict]:
    results = []
    for side in side_list:
        spec = dict(base, side=side)
        if group is not None:
            port = [_free_port() if rank == 0 else None]
            group.broadcast_object_list(port, src=0)
            backend = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}[kind]
            spec["distributed"] = {"backend": backend, "addr": os.environ["MASTER_ADDR"], "port": port[0],
                                   "rank": rank, "world_size": world}
            group.barrier()
        print(f"[e2e] side {side['name']}" + (f" (rank {rank})" if group else ""), file=sys.stderr, flush=True)
        results.append(_run_side(spec, args.threads))
    return results


def _finish(results, args, model, work, vwork, device, world, rank, local, group, weights, kv_cache) -> int:
    report = {"schema": rep.SCHEMA, "tool": "e2e", "model": model.to_json(), "dtype": args.dtype, "device": device,
              "weights": weights, "kv_cache": kv_cache, "workload": work.to_json(),
              "validation_workload": vwork.to_json(), "repeats": args.repeats, "warmup": args.warmup,
              "world_size": world,
              "environment": rep.environment(device, args.revision), "sides": results}
    if args.batch_invariant:
        report["batch_invariance"] = rep.batch_invariance(results, INVARIANT, "selected")
    codes = [_side_exit(s) for s in results]
    report["summary"] = {"sides": len(results), "timed": sum(s.get("status") == "timed" for s in results),
                         "failed": sum(codes), "exit_code": max(codes, default=0)}
    if group is None:
        _publish(report, args, rep.markdown, None, True)
        return report["summary"]["exit_code"]
    report["distributed"] = {"rank": rank, "world_size": world, "local_rank": local}
    report["rank_device"] = device
    _publish(report, args, rep.markdown, rank, False)
    gathered = [None] * world
    group.all_gather_object(gathered, report)
    code = 0
    if rank == 0:
        paths = [_output_path(args.output, r) for r in range(world)]
        agg = _aggregate(gathered, paths)
        _publish(agg, args, rep.aggregate_markdown, None, True)
        code = agg["summary"]["exit_code"]
    codes_box = [code]
    group.broadcast_object_list(codes_box, src=0)
    group.destroy_process_group()
    return int(codes_box[0])
