"""The end-to-end report: JSON (schema docs/schemas/e2e-report.schema.json), Markdown, and a PNG of
the time share per operation per side. Files are written by the tools' atomic writer
(_C.write_report_atomically: a fsynced temporary file renamed over the target)."""

from __future__ import annotations

import json
import os

SCHEMA = "xllm-kernel/e2e-report/1"
AGGREGATE_SCHEMA = "xllm-kernel/e2e-distributed-report/1"


def write_atomically(path: str, text: str) -> None:
    from xllm_kernel import _C

    writer = getattr(_C, "write_report_atomically", None)
    if writer is not None:
        writer(path, text)
        return
    # A build without the tools library: the same protocol in Python.
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def environment(device: str, revision: str) -> dict:
    from xllm_kernel import _C

    kind, _, index = device.partition(":")
    env = getattr(_C, "report_environment", None)
    if env is not None:
        return json.loads(env(kind, int(index or 0), revision))
    import platform

    import torch

    return {"host": platform.node(), "device": device, "torch": torch.__version__, "revision": revision,
            "load_average": list(os.getloadavg()), "threads": torch.get_num_threads()}


def _fmt(x, digits=3):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e3 else f"{x:.0f}"  # 1848, not 1.85e+03
    return str(x)


def _shares(side: dict) -> dict[str, float]:
    prof = side.get("profile") or {}
    if prof.get("status") != "measured":
        return {}
    out = {r["operation"]: r["share"] for r in prof["operations"]}
    out["(unattributed)"] = prof["unattributed_seconds"] / prof["total_seconds"]
    return out


def _weights_line(w: dict | None) -> str:
    """What the linears ran on, and the bytes behind the table's weight GB/s."""
    if not w:
        return ""
    mb = f"{w['bytes_per_decode_step'] / 1e6:.4g} MB"
    if w.get("scheme") is None:
        return (f"Linears: torch's F.linear on the weights of the dtype; weight GB/s: their {mb} (every linear, "
                f"LM head included) per decode step ÷ time per output token.")
    schemes = w["scheme"] + (f" (LM head {w['lm_head_scheme']})" if w["lm_head_scheme"] != w["scheme"] else "")
    group = f", int4 in groups of {w['group_size']}" if w.get("group_size") else ""
    roles = w.get("roles") or []
    quantized = [r for r in roles if r.get("activations")]
    if not quantized:
        return (f"Linears: the library's linear, weights {schemes}{group}, packed once at load by each side's "
                f"linear_pack; weight GB/s: {mb} (every linear, LM head included: stored weights + float32 scales) per "
                f"decode step ÷ time per output token.")
    acts = ", ".join(dict.fromkeys(f"{r['activations']}" for r in quantized))
    ran = "; ".join(f"{r['role']}: {' → '.join(r['operations'])}" for r in roles)
    sums = sum(r.get("sum_bytes", 0) for r in roles)
    parts = "stored weights + float32 scales" + (f" + int32 weight sums ({sums / 1e6:.4g} MB)" if sums else "")
    return (f"Linears: the library's linear family, weights {schemes}{group}, packed once at load by each side's "
            f"linear_pack, activations quantized per token ({acts}) by the operation that writes them ({ran}); "
            f"weight GB/s: {mb} (every linear, LM head included: {parts}) per decode step ÷ time per output token. "
            f"Validation: the float64 reference quantizes those linears' inputs per token with the same arithmetic; "
            f"logits within 16·u·√(layers + 1)·max(1, max|ref|) with u = max(u_dtype, u_a) (u_a: 2^-7 for int8, "
            f"2^-6 for e4m3 activations: a rounding that crosses a quantization boundary moves a whole step), a "
            f"greedy token other than the reference's argmax a tie when within that of the maximum.")


def _kv_line(kv: dict | None, sides: list[dict]) -> str:
    """The KV cache's storage, its scales, and the bytes behind the KV GB/s."""
    if not kv:
        return ""
    mb = f"{kv['bytes_per_decode_step'] / 1e6:.4g} MB"
    if kv["dtype"] == "auto":
        return (f"KV cache: {kv['storage_dtype']} (auto: the dtype), written by reshape_and_cache, read by "
                f"paged_attention; KV read per decode step: {mb} (K and V rows of every layer and sequence, mean "
                f"over the decode steps).")
    scales = kv["scale_bytes_per_decode_step"]
    calibrated = ""
    fp8 = [s for s in sides if (s.get("kv_cache") or {}).get("k_scales")]
    if fp8:
        k, v = fp8[0]["kv_cache"]["k_scales"], fp8[0]["kv_cache"]["v_scales"]
        calibrated = (f" Calibrated scales ({fp8[0]['name']}), k: {', '.join(_fmt(x) for x in k)}; "
                      f"v: {', '.join(_fmt(x) for x in v)}.")
    return (f"KV cache: {kv['dtype']} ({kv['storage_dtype']}, {kv['element_bytes']} byte per element), written by "
            f"{kv['write']}, read by {kv['attention']}; scales: {kv['scales']}. KV read per decode step: {mb} "
            f"(mean over the decode steps, of which scales {scales / 1e6:.4g} MB).{calibrated}")


def batch_invariance(sides: list[dict], side: str, against: str) -> dict:
    """The report's `batch_invariance`: the check of `side` (moved here from its row: each sequence
    alone against the batch), its tokens/s over `against`'s, and the operations whose
    implementation the property changed."""
    inv = next((s for s in sides if s["name"] == side), {})
    base = next((s for s in sides if s["name"] == against), {})
    check = inv.pop("invariance", None)
    out: dict = {"side": side, "against": against}
    if check is None:
        out.update(status="not_run", reason=inv.get("reason") or "the side ended before the check")
    else:
        out.update(check)
    ti, tb = inv.get("timing") or {}, base.get("timing") or {}
    out["tokens_per_s_ratio"] = {
        k: ti[f"{k}_tokens_per_s"] / tb[f"{k}_tokens_per_s"]
        if ti.get(f"{k}_tokens_per_s") and tb.get(f"{k}_tokens_per_s") else None for k in ("prefill", "decode")}
    mine, theirs = inv.get("implementations") or {}, base.get("implementations") or {}
    out["implementations_changed"] = {op: {against: theirs.get(op), side: name} for op, name in mine.items()
                                      if theirs.get(op) != name}
    return out


def _ratio(x) -> str:
    return "—" if x is None else f"{x:.3g}×"


def _invariance_lines(b: dict) -> list[str]:
    side, against = b["side"], b["against"]
    r = b.get("tokens_per_s_ratio") or {}
    ratio = f"tokens/s {side} / {against}: prefill {_ratio(r.get('prefill'))}, decode {_ratio(r.get('decode'))}."
    changed = b.get("implementations_changed") or {}
    swaps = "; ".join(f"{op} {names[against]} → {names[side]}" for op, names in changed.items())
    lines = ["", f"Batch invariance (side {side}: initialize(batch_invariant=True)). "
             f"Implementations changed: {swaps or 'none'}. {ratio}"]
    if b.get("status") == "not_run":
        reason = (b.get("reason") or "?").splitlines()[0][:200]
        return lines + [f"The check did not run: {reason}"]
    seqs = b.get("sequences") or []
    verdict = "every sequence identical" if b["status"] == "identical" else \
        f"**{len(seqs) - b['identical_sequences']} of {len(seqs)} sequences differ**"
    lines += [f"Each sequence rerun alone (same prompt, seed and cache blocks, greedy) and compared with its run in "
              f"the batch, tokens and logits bit for bit at every step from step {b['first_logit_step']}: "
              f"{verdict} ({b['logits_compared']} logits compared).", "",
              "| sequence | prompt tokens | steps | alone vs batched | first difference (step, position) "
              "| max abs difference (all steps) |", "|---|---|---|---|---|---|"]
    for q in seqs:
        d = q.get("first_difference")
        first = "—" if d is None else f"step {d['step']}, position {d['position']}" + \
            (" (token)" if d.get("kind") == "token" else "")
        worst = "—" if d is None else ("non-finite" if q.get("max_abs_difference") is None else
                                       _fmt(q["max_abs_difference"], 3))
        lines.append(f"| {q['sequence']} | {q['prompt_len']} | {q['steps_compared']} | "
                     f"{'identical' if q['identical'] else 'differs'} | {first} | {worst} |")
    where = (b.get("first_difference") or {}).get("operation") or {}
    if where.get("status") == "found":
        owner = "a library operation" if where["library_operation"] else "torch's, not a library operation"
        lines += ["", f"First difference (sequence {b['first_difference']['sequence']}, step {where['step']}): "
                  f"{where['operation']} ({owner}) {where['tensor']}, {where['where']}: "
                  f"{where['differing_elements']} of {where['elements']} elements differ, max abs difference "
                  f"{_fmt(where['max_abs_difference'], 3)}; every step before it in the forward had the same bits."]
    elif where:
        lines += ["", f"First difference not located: {where.get('reason')}"]
    return lines


def markdown(report: dict) -> str:
    m, w = report["model"], report["workload"]
    env = report.get("environment", {})
    load = env.get("load_average")
    ranks = f" on {report['world_size']} {report['device'].split(':')[0]} ranks (tensor parallel)" \
        if report.get("world_size", 1) > 1 else ""
    lines = [f"# End to end: {m['name']} ({m['architecture']}, {m['num_layers']} layers, {report['dtype']}) on "
             f"{report['device']}{ranks}", "",
             f"Workload: {w['batch']} sequences, prompts {w['prompt_lens'] if len(set(w['prompt_lens'])) > 1 else w['prompt_lens'][0]}"
             f" tokens, {w['output_len']} output tokens each (prefill + {w['output_len'] - 1} decode steps), blocks of "
             f"{w['block_size']} ({w['num_blocks']} in the cache, shuffled), seed {w['seed']}, temperature "
             f"{w['temperature']}. Best of {report['repeats']} timed passes after {report['warmup']} warm-up; the "
             f"per-operation shares come from a separate profiling pass.",
             "Synthetic prefill: the cache holds random K/V at the prompt positions (no prefill forward, no "
             "prefill figures); the decode steps are real." if w.get("synthetic_prefill") else "",
             f"Load average {load} on {env.get('threads', '?')} threads; revision {env.get('revision', '?')}." if load
             else "", _weights_line(report.get("weights")), _kv_line(report.get("kv_cache"), report["sides"]), "",
             "| side | validation | prefill tok/s | decode tok/s | time per output token | weight GB/s | peak memory "
             "| status |",
             "|---|---|---|---|---|---|---|---|"]
    for s in report["sides"]:
        t = s.get("timing") or {}
        v = s.get("validation") or {}
        val = v.get("status", "—")
        if v.get("status") in ("passed", "failed"):
            val += f" (headroom {_fmt(v.get('headroom'), 2)}{', tokens differ' if not v.get('greedy_tokens_equal') else ''})"
        tpot = t.get("time_per_output_token_s")
        mem = s.get("peak_memory_bytes")
        status = s.get("status", "?")
        if s.get("reason"):
            status += ": " + s["reason"].splitlines()[0][:160]
        lines.append(f"| {s['name']} | {val} | {_fmt(t.get('prefill_tokens_per_s'))} | "
                     f"{_fmt(t.get('decode_tokens_per_s'))} | {_fmt(tpot * 1e3) + ' ms' if tpot else '—'} | "
                     f"{_fmt(t.get('decode_weight_gb_per_s'))} | {_fmt(mem / 2**30) + ' GiB' if mem else '—'} | "
                     f"{status} |")
    shares = {s["name"]: _shares(s) for s in report["sides"]}
    measured = [n for n, sh in shares.items() if sh]
    if measured:
        ops = sorted({op for n in measured for op in shares[n]},
                     key=lambda op: (op == "(unattributed)", -max(shares[n].get(op, 0) for n in measured)))
        lines += ["", "Time share per step (profiling pass: " +
                  next(s["profile"]["timer"] for s in report["sides"] if s["name"] in measured) + "):", "",
                  "| step | " + " | ".join(measured) + " |", "|---|" + "---|" * len(measured)]
        for op in ops:
            lines.append(f"| {op} | " + " | ".join(f"{100 * shares[n].get(op, 0):.1f}%" for n in measured) + " |")
        totals = [next(s for s in report["sides"] if s["name"] == n)["profile"]["total_seconds"] for n in measured]
        lines.append("| profiled total | " + " | ".join(f"{t:.4g} s" for t in totals) + " |")
    if report.get("batch_invariance"):
        lines += _invariance_lines(report["batch_invariance"])
    for s in report["sides"]:
        impl = s.get("implementations")
        if impl:
            lines.append("")
            lines.append(f"{s['name']}: " + ", ".join(f"{op}={name}" for op, name in impl.items()))
    if report.get("plot"):
        p = report["plot"]
        lines += ["", f"Plot: {p['path']}" if p.get("path") else f"Plot skipped: {p.get('skipped')}"]
    return "\n".join(lines) + "\n"


def aggregate_markdown(report: dict) -> str:
    head = markdown(report)
    rows = ["", "Per rank (seconds: prefill / decode; tokens digest):", "", "| side | " +
            " | ".join(f"rank {r['rank']}" for r in report["ranks"]) + " | ranks agree |",
            "|---|" + "---|" * (len(report["ranks"]) + 1)]
    for s in report["sides"]:
        cells = []
        for pr in s.get("per_rank", []):
            t = pr.get("timing") or {}
            cells.append(f"{_fmt(t.get('prefill_seconds'))} / {_fmt(t.get('decode_seconds'))}; "
                         f"{pr.get('tokens_digest') or pr.get('status')}")
        rows.append(f"| {s['name']} | " + " | ".join(cells) + f" | {s.get('tokens_agree')} |")
    return head + "\n".join(rows) + "\n"


def plot(report: dict, path: str) -> str | None:
    """A horizontal stacked bar per side of its time share per step; returns why it was skipped."""
    try:
        import matplotlib
    except ImportError as e:
        return f"matplotlib is not installed ({e})"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = {s["name"]: _shares(s) for s in report["sides"]}
    shares = {n: sh for n, sh in shares.items() if sh}
    if not shares:
        return "no side has a measured profile"
    ops = sorted({op for sh in shares.values() for op in sh},
                 key=lambda op: (op == "(unattributed)", -max(sh.get(op, 0) for sh in shares.values())))
    fig, ax = plt.subplots(figsize=(9, max(2.6, 1.2 + 0.6 * len(shares))))
    colors = plt.get_cmap("tab20").colors
    names = list(shares)
    left = [0.0] * len(names)
    for i, op in enumerate(ops):
        widths = [100 * shares[n].get(op, 0) for n in names]
        ax.barh(names, widths, left=left, color=colors[i % len(colors)], label=op)
        left = [a + b for a, b in zip(left, widths)]
    m = report["model"]
    ax.set_xlabel("% of the profiled time")
    ax.set_title(f"{m['name']} ({m['num_layers']} layers, {report['dtype']}) on {report['device']}: time per step",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=1 + len(ops) // 12, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return None
