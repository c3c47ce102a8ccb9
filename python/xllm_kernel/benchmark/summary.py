"""`python -m xllm_kernel.benchmark.summary REPORT_DIR [--output docs/performance.md]`: the performance page,
generated from the benchmark and end-to-end JSON reports in REPORT_DIR (its `*.json`, not its subfolders).

    python -m xllm_kernel.benchmark.summary reports/ --output docs/performance.md

Per operation and case: each timed implementation's median, % of roofline and its bound (`percent_of_roofline`,
`roofline.bound`: docs/reports.md, "Roofline"), the speed-up over the device's `torch` solution
(`speedup_vs_torch`), and over torch.compile where the report timed an implementation of the `compile` solution.
Then the rows of the library's own implementations below 70% of their roofline, with the bound and the time each
ceiling allows; the machine (CPU model, SIMD target, torch, threads, pages), the ceilings each report measured, the
revision and the date, from the reports' environment sections; and, where an end-to-end report is present, its
tokens/s per side. The page depends on the reports alone (no clock, no host lookup), so the same reports give the
same bytes; it is written atomically, like the reports.

Reports of other kinds the tools write beside these (numerics, comparisons, A/B, distributed aggregates of the
operator tools) are skipped and listed. A JSON file that is no report, a report that does not validate, or a folder
without a benchmark or end-to-end report is an error naming the file (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any, Optional

from xllm_kernel.numerics import report as reports

E2E = "xllm-kernel/e2e-report/1"
E2E_AGGREGATE = "xllm-kernel/e2e-distributed-report/1"
# Reports the tools write beside the benchmark's that carry no figure for this page.
SKIPPED = ("xllm-kernel/numerics-report/1", "xllm-kernel/numerics-distributed-report/1",
           "xllm-kernel/benchmark-comparison/1", "xllm-kernel/benchmark-ab/1",
           "xllm-kernel/benchmark-distributed-report/1")
# A row of the library's own kernels below this share of its roofline is listed apart (issue 42).
THRESHOLD = 70.0
# Solutions that are the baselines of the comparison, not the library's kernels.
BASELINES = ("torch", "compile")
E2E_REQUIRED = {E2E: ("schema", "tool", "model", "dtype", "device", "workload", "environment", "sides", "summary"),
                E2E_AGGREGATE: ("schema", "tool", "model", "dtype", "device", "workload", "ranks", "sides", "summary")}


class SummaryError(ValueError):
    """Input the summary cannot use: names the file or folder and what is wrong."""


# ---- reading -------------------------------------------------------------------------------------

def _validate_e2e(data: dict, where: str) -> None:
    identifier = data["schema"]
    missing = [f for f in E2E_REQUIRED[identifier] if f not in data]
    if missing:
        raise SummaryError(f"{where}: a {identifier} without {', '.join(missing)}")
    try:
        import jsonschema
    except ImportError:
        return
    folder = reports.schema_directory()
    if folder is None or not (folder / "e2e-report.schema.json").exists():
        return
    try:
        jsonschema.validate(data, json.loads((folder / "e2e-report.schema.json").read_text()))
    except jsonschema.ValidationError as e:
        field = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise SummaryError(f"{where}: not a valid {identifier}: at {field}: {e.message}") from None


def load_directory(directory: str) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]], list[tuple[str, str]]]:
    """(benchmark reports, e2e reports, skipped files with their schema), each as (file name, data), by name."""
    folder = pathlib.Path(directory)
    if not folder.is_dir():
        raise SummaryError(f"{directory}: not a folder of reports")
    benchmarks, e2e, skipped = [], [], []
    files = sorted(p for p in folder.iterdir() if p.suffix == ".json" and p.is_file())
    for path in files:
        where = str(path)
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise SummaryError(f"{where}: cannot be read ({e.strerror or e})") from None
        except json.JSONDecodeError as e:
            raise SummaryError(f"{where}: not JSON ({e})") from None
        identifier = data.get("schema") if isinstance(data, dict) else None
        if identifier == reports.BENCHMARK:
            try:
                reports.from_dict(data, path=where)  # the schema when jsonschema is here, the structure always
            except reports.ReportError as e:
                raise SummaryError(str(e)) from None
            benchmarks.append((path.name, data))
        elif identifier in (E2E, E2E_AGGREGATE):
            _validate_e2e(data, where)
            e2e.append((path.name, data))
        elif identifier in SKIPPED:
            skipped.append((path.name, identifier))
        else:
            got = f"schema {identifier!r}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            raise SummaryError(f"{where}: not a report of the benchmark or e2e tools ({got}; expected "
                               f"{reports.BENCHMARK} or {E2E}, or one of the reports skipped: {', '.join(SKIPPED)})")
    if not benchmarks and not e2e:
        what = (f"{len(files)} JSON file(s), none of them a benchmark or e2e report" if files else
                "no JSON file in it, so no benchmark or e2e report")
        raise SummaryError(f"{directory}: {what} ({reports.BENCHMARK}, {E2E})")
    return benchmarks, e2e, skipped


# ---- formatting ----------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _seconds(s: Optional[float]) -> str:
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def _ratio(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.3g}×"


def _percent(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.1f}%"


def _number(x: Optional[float]) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _solution(row: dict) -> str:
    detail = row.get("implementation_detail") or {}
    if detail.get("solution"):
        return str(detail["solution"])
    parts = row["implementation"].split(".")
    return parts[1] if len(parts) > 2 else ""


def _parameter_text(parameters: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}={parameters[k]}" for k in keys if k in parameters) or "(one case)"


def _shared_parameters(rows: list[dict]) -> tuple[dict, list[str]]:
    """The parameters every case of a report shares (said once above its table), and the keys that vary."""
    keys = sorted({k for r in rows for k in r["parameters"]})
    shared, varying = {}, []
    for k in keys:
        values = {json.dumps(r["parameters"].get(k), sort_keys=True) for r in rows}
        if len(values) == 1 and all(k in r["parameters"] for r in rows):
            shared[k] = rows[0]["parameters"][k]
        else:
            varying.append(k)
    return shared, varying


def _median(row: dict) -> Optional[float]:
    device = row.get("device") or {}
    return device.get("median")


def _compile_ratio(row: dict, same_case: list[dict]) -> Optional[float]:
    """torch.compile's median over this row's, where the case timed an implementation of the compile solution."""
    medians = [_median(r) for r in same_case if r.get("status") == "timed" and _solution(r) == "compile"]
    medians = [m for m in medians if m]
    mine = _median(row)
    if not medians or not mine:
        return None
    return min(medians) / mine


def _marks(row: dict) -> str:
    marks = []
    rotation = row.get("rotation") or {}
    if rotation.get("enabled"):
        exceeds = rotation.get("exceeds_cache")
        marks.append("cold" if exceeds else ("cold?" if exceeds is None else "cold, fits the cache"))
    else:
        marks.append("no --cold-cache")
    if row.get("warm_cache"):
        marks.append("warm cache")
    if row.get("unsteady"):
        reasons = (row.get("steadiness") or {}).get("reasons") or []
        marks.append("unsteady" + (f" ({', '.join(reasons)})" if reasons else ""))
    return ", ".join(marks) or "—"


def _limits(roofline: dict) -> str:
    """Each ceiling's time for the case: what the bound was chosen from."""
    parts = [f"read {_seconds(roofline.get('read_seconds'))}", f"copy {_seconds(roofline.get('copy_seconds'))}"]
    if roofline.get("compute_class") is not None and roofline.get("compute_seconds") is not None:
        parts.append(f"{roofline['compute_class']} {_seconds(roofline['compute_seconds'])}")
    return ", ".join(parts)


# ---- sections ------------------------------------------------------------------------------------

def _environment_value(env: dict, key: str) -> str:
    value = env.get(key)
    if key == "cpu_pages" and isinstance(value, dict):
        kb = value.get("huge_page_kb_of_8_mib_tensor")
        pages = ("unknown" if kb is None or kb < 0 else
                 f"{kb} kB of huge pages under an 8 MiB tensor")
        return (f"{pages} (THP_MEM_ALLOC_ENABLE={value.get('thp_mem_alloc_enable')}, "
                f"system THP {value.get('system_thp')})")
    if value is None:
        return "—"
    return str(value)


MACHINE_FIELDS = (("host", "host"), ("cpu_model", "CPU model"), ("cpu_simd_target", "SIMD target (Highway)"),
                  ("threads", "intra-op threads"), ("cpu_pages", "CPU tensor pages"),
                  ("cpu_stream_policy", "non-temporal stores"), ("device_description", "device"),
                  ("torch", "torch"), ("compiler", "compiler"), ("build_type", "build type"),
                  ("revision", "revision"))


def _machine(sources: list[tuple[str, dict]]) -> list[str]:
    """One row per environment field; where the reports differ, each value with the files that gave it."""
    rows = []
    for key, label in MACHINE_FIELDS:
        values: dict[str, list[str]] = {}
        for name, data in sources:
            values.setdefault(_environment_value(data.get("environment") or {}, key), []).append(name)
        if set(values) == {"—"}:
            continue
        if len(values) == 1:
            rows.append([label, next(iter(values))])
        else:
            rows.append([label, "; ".join(f"{v} ({', '.join(files)})" for v, files in sorted(values.items()))])
    stamps = sorted(str((data.get("environment") or {}).get("timestamp")) for _, data in sources
                    if (data.get("environment") or {}).get("timestamp"))
    if stamps:
        rows.append(["date", stamps[0] if stamps[0] == stamps[-1] else f"{stamps[0]} to {stamps[-1]}"])
    return _table(["field", "value"], rows)


def _ceilings(benchmarks: list[tuple[str, dict]]) -> list[str]:
    """The ceilings each benchmark report measured at its start (one column per report)."""
    names: list[tuple[str, str]] = []  # (kind, class)
    methods: dict[tuple[str, str], set[str]] = {}
    absent: dict[str, set[str]] = {}
    for _, data in benchmarks:
        ceilings = data["environment"].get("ceilings") or {}
        for kind in ("read", "copy"):
            if kind in ceilings:
                key = (kind, "")
                if key not in names:
                    names.append(key)
                methods.setdefault(key, set()).add(str(ceilings[kind].get("method")))
        for cls, value in sorted((ceilings.get("compute") or {}).items()):
            key = ("compute", cls)
            if key not in names:
                names.append(key)
            methods.setdefault(key, set()).add(str(value.get("method")))
        for cls, reason in sorted((ceilings.get("compute_absent") or {}).items()):
            absent.setdefault(cls, set()).add(str(reason))
    order = {"read": 0, "copy": 1, "compute": 2}
    names.sort(key=lambda k: (order[k[0]], k[1]))
    header = ["ceiling", "method"] + [f"`{data['operation']}`" for _, data in benchmarks]
    rows = []
    for kind, cls in names:
        label = f"{kind} GB/s" if kind != "compute" else f"{cls} Gop/s"
        cells = [label, "; ".join(sorted(methods[(kind, cls)]))]
        for _, data in benchmarks:
            ceilings = data["environment"].get("ceilings") or {}
            value = (ceilings.get(kind) or {}).get("gbps") if kind != "compute" else \
                ((ceilings.get("compute") or {}).get(cls) or {}).get("gops")
            cells.append(_number(value))
        rows.append(cells)
    lines = _table(header, rows)
    if absent:
        lines += ["", "Absent here: " + "; ".join(f"`{cls}` ({', '.join(sorted(r))})"
                                                  for cls, r in sorted(absent.items())) + "."]
    return lines


def _occupancy(sources: list[tuple[str, dict]]) -> list[str]:
    lines = []
    for name, data in sources:
        occupancy = data.get("occupancy")
        if not occupancy:
            continue
        host = occupancy.get("host") or {}
        before = host.get("load_average_before")
        load = f"load average {before[0]:.2f} before" if isinstance(before, list) and before else "load unknown"
        others = host.get("other_processes_cpu_cores")
        busy = f", other processes {others:.2f} cores" if isinstance(others, (int, float)) else ""
        state = "idle" if occupancy.get("idle") else "**not idle**"
        lines.append(f"- `{name}`: {state} ({load}{busy})")
    return lines


def _operation_section(name: str, data: dict) -> tuple[list[str], list[list[str]]]:
    """The table of one benchmark report, and its rows below the threshold."""
    results = data["results"]
    device = data["device"].split(":")[0]
    timed = [r for r in results if r.get("status") == "timed"]
    shared, varying = _shared_parameters(results) if results else ({}, [])
    lines = [f"### `{data['operation']}` ({data['device']}, {data['mode']})", ""]
    lines.append(f"From `{name}`" + (": every case has " + ", ".join(f"{k}={v}" for k, v in shared.items())
                                     if shared else "") + ".")
    lines.append("")
    by_case: dict[str, list[dict]] = {}
    for r in results:
        by_case.setdefault(r["case_id"], []).append(r)
    rows, below = [], []
    for r in timed:
        roofline = r.get("roofline") or {}
        percent = r.get("percent_of_roofline")
        case = _parameter_text(r["parameters"], varying)
        rows.append([case, f"`{r['implementation']}`", _seconds(_median(r)), _percent(percent),
                     roofline.get("bound", "—"), _ratio(r.get("speedup_vs_torch")),
                     _ratio(_compile_ratio(r, by_case[r["case_id"]])), _marks(r)])
        if percent is not None and percent < THRESHOLD and _solution(r) not in BASELINES:
            below.append([f"`{data['operation']}`", _parameter_text(r["parameters"], sorted(r["parameters"])),
                          f"`{r['implementation']}`", _percent(percent), roofline.get("bound", "—"),
                          _seconds(roofline.get("ideal_seconds")), _seconds(_median(r)), _limits(roofline)])
    if rows:
        lines += _table(["case", "implementation", "median", "% of roofline", "bound", f"× {device}.torch",
                         "× torch.compile", "notes"], rows)
    else:
        lines.append("No case was timed.")
    untimed = [r for r in results if r.get("status") != "timed"]
    if untimed:
        lines += ["", "Not timed: " + "; ".join(
            f"`{r['implementation']}` {_parameter_text(r['parameters'], varying)}: {r['status']}"
            + (f" ({r['reason']})" if r.get("reason") else "") for r in untimed) + "."]
    lines.append("")
    return lines, below


def _e2e_section(name: str, data: dict) -> list[str]:
    model, workload = data["model"], data["workload"]
    weights = data.get("weights") or {}
    scheme = weights.get("scheme") or data["dtype"]
    prompt = ",".join(str(p) for p in workload.get("prompt_lens", []))
    synthetic = ", synthetic prefill" if workload.get("synthetic_prefill") else ""
    lines = [f"### `{model['name']}` ({model['num_layers']} layers), {data['dtype']}, weights {scheme}, "
             f"on {data['device']}", ""]
    ranks = f", {data['world_size']} ranks" if data.get("world_size", 1) > 1 else ""
    lines.append(f"From `{name}`: batch {workload['batch']} × prompt {prompt}, {workload['output_len']} output "
                 f"tokens{synthetic}{ranks}.")
    lines.append("")
    sides = data["sides"]

    def decode(kind: str) -> Optional[float]:
        for s in sides:
            if s.get("kind") == kind and s.get("status") == "timed":
                return (s.get("timing") or {}).get("decode_tokens_per_s")
        return None

    torch_decode, compile_decode = decode("torch"), decode("compile")
    rows = []
    for s in sides:
        timing = s.get("timing") or {}
        validation = s.get("validation") or {}
        mine = timing.get("decode_tokens_per_s")
        over_torch = mine / torch_decode if mine and torch_decode else None
        over_compile = mine / compile_decode if mine and compile_decode else None
        memory = s.get("peak_memory_bytes")
        status = s["status"] + (f" ({s['reason']})" if s.get("reason") and s["status"] != "timed" else "")
        rows.append([f"`{s['name']}`", status, _number(validation.get("headroom")),
                     _number(timing.get("prefill_tokens_per_s")), _number(mine),
                     _seconds(timing.get("time_per_output_token_s")), _ratio(over_torch), _ratio(over_compile),
                     "—" if memory is None else f"{memory / 2 ** 30:.3g} GiB"])
    lines += _table(["side", "status", "validation headroom", "prefill tokens/s", "decode tokens/s",
                     "time per output token", "decode × torch", "decode × compile", "peak memory"], rows)
    lines.append("")
    return lines


def render(benchmarks: list[tuple[str, dict]], e2e: list[tuple[str, dict]], skipped: list[tuple[str, str]], *,
           directory: str, output: str) -> str:
    command = f"python -m xllm_kernel.benchmark.summary {directory} --output {output}"
    lines = ["# Performance", "",
             "<!-- Generated from JSON reports by xllm_kernel.benchmark.summary; do not edit by hand: rerun the "
             "command below. -->", "",
             "```bash", command, "```", "",
             "Generated from the benchmark and end-to-end reports listed under [Sources](#sources), by the command "
             "above. How the figures were taken, what limits the rows below 70% and the dated measurements "
             "written by hand: [performance-notes.md](performance-notes.md). The roofline: "
             "[reports.md](reports.md#roofline).", ""]
    sources = benchmarks + [(n, d) for n, d in e2e if "environment" in d]
    lines += ["## Machine", ""] + _machine(sources) + [""]
    occupancy = _occupancy(benchmarks + e2e)
    if occupancy:
        busy = any(not (d.get("occupancy") or {}).get("idle", True) for _, d in benchmarks + e2e)
        lines += ["Occupancy during each run" + (" (figures from a machine that was not idle are indicative: "
                                                 "neighbours share its cores and memory bandwidth)" if busy else "")
                  + ":", ""] + occupancy + [""]
    if benchmarks:
        lines += ["### Ceilings", "",
                  "Measured at the start of each run (every case's read and copy ceilings are timed again just "
                  "before it).", ""] + _ceilings(benchmarks) + [""]
    below: list[list[str]] = []
    if benchmarks:
        lines += ["## Operations", "",
                  f"Median device time per call; % of roofline = the ideal time over the median, with its bound; "
                  f"× torch = the `torch` solution's median over this one's (`speedup_vs_torch`); × torch.compile "
                  f"where the report timed a `compile` implementation. Notes: cold (`--cold-cache`: inputs rotated "
                  f"past the last-level cache; `cold?` where its size is unknown), no --cold-cache (the inputs may "
                  f"sit in the cache), warm cache (above 100% of copy), unsteady samples (with the tests that "
                  f"failed).", ""]
        for name, data in sorted(benchmarks, key=lambda nd: (nd[1]["operation"], nd[0])):
            section, rows = _operation_section(name, data)
            lines += section
            below += rows
        lines += [f"## Below {THRESHOLD:.0f}% of roofline", ""]
        if below:
            lines += [f"The library's own implementations (not the `torch` or `compile` baselines) under "
                      f"{THRESHOLD:.0f}% of their roofline, with the bound and each ceiling's time for the case. "
                      f"What limits each: [performance-notes.md](performance-notes.md#below-70-of-roofline).", ""]
            lines += _table(["operation", "case", "implementation", "% of roofline", "bound", "ideal", "median",
                             "ceilings' times"], below)
        else:
            lines.append(f"None: every timed row of the library's implementations reached {THRESHOLD:.0f}%.")
        lines.append("")
    if e2e:
        lines += ["## End to end", "",
                  "`python -m xllm_kernel.e2e` ([e2e.md](e2e.md)): tokens/s of each side, the best of the timed "
                  "passes; × torch and × compile are decode tokens/s over those sides'.", ""]
        for name, data in e2e:
            lines += _e2e_section(name, data)
    lines += ["## Sources", ""]
    rows = []
    for name, data in benchmarks + e2e:
        env = data.get("environment") or {}
        what = data.get("operation") or (data.get("model") or {}).get("name", "")
        rows.append([f"`{name}`", data["schema"], f"`{what}`", str(env.get("revision", "—")),
                     str(env.get("timestamp", "—"))])
    rows.sort(key=lambda r: r[0])
    lines += _table(["file", "schema", "of", "revision", "timestamp"], rows)
    if skipped:
        lines += ["", "Skipped (no figure for this page): " + ", ".join(f"`{n}` ({s})" for n, s in skipped) + "."]
    return "\n".join(lines).rstrip() + "\n"


def write_atomically(path: str, text: str) -> None:
    """The tools' atomic writer (a fsynced temporary file renamed over the target)."""
    from xllm_kernel.e2e.report import write_atomically as write

    write(path, text)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m xllm_kernel.benchmark.summary",
        description="Write the performance page (Markdown) from the benchmark and e2e JSON reports in a folder. "
                    "Exit codes: 0 written, 2 bad input (a folder without such reports, a file that is no report "
                    "or does not validate; the message names it).")
    parser.add_argument("report_dir", metavar="REPORT_DIR", help="folder of JSON reports (its *.json files)")
    parser.add_argument("--output", default=os.path.join("docs", "performance.md"),
                        help="the page to write (default: docs/performance.md)")
    args = parser.parse_args(argv)
    try:
        benchmarks, e2e, skipped = load_directory(args.report_dir)
    except SummaryError as e:
        print(f"summary: {e}", file=sys.stderr)
        return 2
    text = render(benchmarks, e2e, skipped, directory=args.report_dir, output=args.output)
    write_atomically(args.output, text)
    print(f"summary: wrote {args.output} from {len(benchmarks)} benchmark and {len(e2e)} e2e report(s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
