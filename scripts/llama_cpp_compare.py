#!/usr/bin/env python3
"""Reference CPU throughput of llama.cpp for Llama-3-8B shapes cut to 2 decoder layers.

The numbers are a baseline for the xllm-kernel CPU operators on the same machine.
The script writes a GGUF model with random weights (hidden 4096, 32 query heads,
8 KV heads, head dim 128, FFN 14336, vocab 128256, 2 layers) in F16 and BF16,
makes Q8_0 and Q4_0 copies with llama-quantize, and measures with 2 threads:

  prefill   llama-bench -p 512 -n 0                 (tokens/s)
  decode    llama-bench -p 0 -n 32 -d 2048          (tokens/s, batch 1, 2048 tokens in context)
  batched   llama-batched-bench -npp 2048 -ntg 16 -npl 16 -pps -no-kvu  (S_TG tokens/s)

The results go to a JSON file and a Markdown table, together with the llama.cpp
version, the CPU model and every command that was run.

llama.cpp is not part of this project. Build it once (no GPU needed):

  mkdir -p /tmp/llamacpp && cd /tmp/llamacpp
  tar xzf llama_cpp_python-0.3.36.tar.gz        # PyPI sdist, vendors llama.cpp 0c1e57098
  cd llama_cpp_python-0.3.36
  cmake -S vendor/llama.cpp -B /tmp/llamacpp/build -DCMAKE_BUILD_TYPE=Release \\
      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \\
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \\
      -DGGML_CCACHE=OFF -DLLAMA_BUILD_COMMIT=0c1e57098
  cmake --build /tmp/llamacpp/build -j2 --target llama-bench llama-batched-bench llama-quantize
  python3 -m venv /tmp/llamacpp/venv
  /tmp/llamacpp/venv/bin/pip install vendor/llama.cpp/gguf-py

Run (takes the whole machine; run it when nothing else is running):

  /tmp/llamacpp/venv/bin/python scripts/llama_cpp_compare.py            # full sizes
  /tmp/llamacpp/venv/bin/python scripts/llama_cpp_compare.py --quick    # check that it works

The GGUF files are kept in <work-dir>/models and reused by later runs.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

DEFAULT_WORK_DIR = "/tmp/llamacpp"
ALL_FORMATS = ("f16", "bf16", "q8_0", "q4_0")
QUANTIZED = {"q8_0": "Q8_0", "q4_0": "Q4_0"}

# Llama-3-8B, except for the number of decoder layers.
MODEL = {
    "architecture": "llama",
    "hidden": 4096,
    "n_head": 32,
    "n_head_kv": 8,
    "head_dim": 128,
    "ffn": 14336,
    "vocab": 128256,
    "n_layer": 2,
    "context_length": 8192,
    "rope_freq_base": 500000.0,
    "rms_eps": 1e-5,
}

FULL_SIZES = {"prefill": 512, "decode_gen": 32, "decode_depth": 2048,
              "batched_pp": 2048, "batched_tg": 16, "batched_pl": 16}
QUICK_SIZES = {"prefill": 64, "decode_gen": 4, "decode_depth": 128,
               "batched_pp": 128, "batched_tg": 4, "batched_pl": 2}


def log(msg: str) -> None:
    print(f"[llama_cpp_compare] {msg}", file=sys.stderr, flush=True)


def import_gguf(work_dir: str):
    """Import the gguf package, falling back to the gguf-py copy vendored in the sdist."""
    try:
        import gguf  # noqa: F401
        return gguf
    except ImportError:
        pass
    for path in sorted(glob.glob(os.path.join(work_dir, "*", "vendor", "llama.cpp", "gguf-py"))):
        sys.path.insert(0, path)
        try:
            import gguf  # noqa: F401
            return gguf
        except ImportError:
            sys.path.pop(0)
    sys.exit("cannot import gguf: install it into a venv (pip install <sdist>/vendor/llama.cpp/gguf-py) "
             "and run this script with that venv's python")


# --------------------------------------------------------------------------- GGUF writing

def tensor_plan() -> list[tuple[str, tuple[int, ...]]]:
    """Tensor names and numpy shapes (rows, cols) in the order they are written."""
    h, f, v = MODEL["hidden"], MODEL["ffn"], MODEL["vocab"]
    kv = MODEL["n_head_kv"] * MODEL["head_dim"]
    q = MODEL["n_head"] * MODEL["head_dim"]
    plan = [("token_embd.weight", (v, h))]
    for i in range(MODEL["n_layer"]):
        p = f"blk.{i}."
        plan += [
            (p + "attn_norm.weight", (h,)),
            (p + "attn_q.weight", (q, h)),
            (p + "attn_k.weight", (kv, h)),
            (p + "attn_v.weight", (kv, h)),
            (p + "attn_output.weight", (h, q)),
            (p + "ffn_norm.weight", (h,)),
            (p + "ffn_gate.weight", (f, h)),
            (p + "ffn_up.weight", (f, h)),
            (p + "ffn_down.weight", (h, f)),
        ]
    plan += [("output_norm.weight", (h,)), ("output.weight", (v, h))]
    return plan


def vocabulary(gguf) -> tuple[list[str], list[float], list[int]]:
    """Made-up SentencePiece-style vocabulary: <unk>, <s>, </s>, 256 byte tokens, then t<i>."""
    tt = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"]
    types = [tt.UNKNOWN, tt.CONTROL, tt.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [tt.BYTE] * 256
    n_rest = MODEL["vocab"] - len(tokens)
    tokens += [f"t{i}" for i in range(n_rest)]
    types += [tt.NORMAL] * n_rest
    scores = [0.0] * 259 + [-float(i) for i in range(n_rest)]
    return tokens, scores, [int(t) for t in types]


def to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even (inputs are finite)."""
    import numpy as np
    bits = x.view(np.uint32)
    rounding = (bits >> np.uint32(16)) & np.uint32(1)
    rounding += np.uint32(0x7FFF)
    bits = bits + rounding
    bits >>= np.uint32(16)
    return bits.astype(np.uint16)


def write_ggufs(gguf, paths: dict[str, str], seed: int, std: float) -> None:
    """Write the random-weight model once per float format in `paths` ("f16", "bf16")."""
    import numpy as np

    tokens, scores, types = vocabulary(gguf)
    plan = tensor_plan()
    ftypes = {"f16": gguf.LlamaFileType.MOSTLY_F16, "bf16": gguf.LlamaFileType.MOSTLY_BF16}
    writers = {}
    tmp_paths = {}
    for fmt, path in paths.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp_paths[fmt] = path + ".tmp"
        w = gguf.GGUFWriter(tmp_paths[fmt], MODEL["architecture"])
        w.add_name(f"llama3-8b-shapes-{MODEL['n_layer']}layer-random-seed{seed}")
        w.add_context_length(MODEL["context_length"])
        w.add_embedding_length(MODEL["hidden"])
        w.add_block_count(MODEL["n_layer"])
        w.add_feed_forward_length(MODEL["ffn"])
        w.add_head_count(MODEL["n_head"])
        w.add_head_count_kv(MODEL["n_head_kv"])
        w.add_rope_dimension_count(MODEL["head_dim"])
        w.add_rope_freq_base(MODEL["rope_freq_base"])
        w.add_layer_norm_rms_eps(MODEL["rms_eps"])
        w.add_vocab_size(MODEL["vocab"])
        w.add_file_type(int(ftypes[fmt]))
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        for name, shape in plan:
            n = int(np.prod(shape))
            if len(shape) == 1:
                w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
            elif fmt == "f16":
                w.add_tensor_info(name, shape, np.dtype(np.float16), n * 2)
            else:
                w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2,
                                  raw_dtype=gguf.GGMLQuantizationType.BF16)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        writers[fmt] = w

    for index, (name, shape) in enumerate(plan):
        if len(shape) == 1:
            norm = np.ones(shape, dtype=np.float32)
            for w in writers.values():
                w.write_tensor_data(norm)
            continue
        rng = np.random.default_rng([seed, index])
        rows, cols = shape
        out = {fmt: np.empty(shape, dtype=np.float16 if fmt == "f16" else np.uint16) for fmt in writers}
        step = max(1, (1 << 24) // cols)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            chunk = rng.standard_normal((r1 - r0, cols), dtype=np.float32)
            chunk *= np.float32(std)
            if "f16" in out:
                out["f16"][r0:r1] = chunk
            if "bf16" in out:
                out["bf16"][r0:r1] = to_bf16_bits(chunk)
        for fmt, w in writers.items():
            w.write_tensor_data(out[fmt])
        del out

    for fmt, w in writers.items():
        w.close()
        os.replace(tmp_paths[fmt], paths[fmt])
        log(f"wrote {paths[fmt]} ({os.path.getsize(paths[fmt]) / 2**30:.2f} GiB)")


# --------------------------------------------------------------------------- running tools

class Runner:
    """Runs the llama.cpp tools, keeps their output in log_dir and records every command."""

    def __init__(self, timeout: float | None, log_dir: str):
        self.timeout = timeout
        self.log_dir = log_dir
        self.commands: list[dict] = []

    def run(self, argv: list[str], purpose: str) -> subprocess.CompletedProcess:
        cmd = shlex.join(argv)
        log(f"{purpose}: {cmd}")
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired as exc:
            proc = subprocess.CompletedProcess(argv, -1, exc.stdout or "", exc.stderr or "")
            if isinstance(proc.stdout, bytes):
                proc.stdout = proc.stdout.decode(errors="replace")
            if isinstance(proc.stderr, bytes):
                proc.stderr = proc.stderr.decode(errors="replace")
            rc = "timeout"
        seconds = round(time.monotonic() - t0, 2)
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, re.sub(r"[^A-Za-z0-9_.-]+", "_", purpose) + ".log")
        with open(log_path, "w") as fh:
            fh.write(f"$ {cmd}\n# returncode {rc}, {seconds} s\n\n--- stdout\n{proc.stdout or ''}"
                     f"\n--- stderr\n{proc.stderr or ''}")
        self.commands.append({"purpose": purpose, "command": cmd, "returncode": rc, "seconds": seconds,
                              "log": log_path})
        if rc != 0:
            tail = "\n".join((proc.stderr or "").splitlines()[-15:])
            raise RuntimeError(f"{purpose} failed ({rc}): {cmd}\n{tail}")
        return proc


def quantize(runner: Runner, bin_dir: str, src: str, dst: str, qtype: str, pure: bool, threads: int) -> None:
    argv = [os.path.join(bin_dir, "llama-quantize")]
    if pure:
        argv.append("--pure")
    tmp = dst + ".tmp"
    argv += [src, tmp, qtype, str(threads)]
    runner.run(argv, f"quantize {qtype}")
    os.replace(tmp, dst)


def summarize(samples: list[float]) -> dict:
    mean = sum(samples) / len(samples)
    var = sum((s - mean) ** 2 for s in samples) / (len(samples) - 1) if len(samples) > 1 else 0.0
    return {"tokens_per_s_best": round(max(samples), 3), "tokens_per_s_mean": round(mean, 3),
            "tokens_per_s_stddev": round(var ** 0.5, 3), "samples": [round(s, 3) for s in samples]}


def llama_bench(runner: Runner, bin_dir: str, model: str, threads: int, reps: int,
                n_prompt: int, n_gen: int, depth: int, purpose: str) -> tuple[dict, dict]:
    argv = [os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads), "-r", str(reps),
            "-p", str(n_prompt), "-n", str(n_gen)]
    if depth:
        argv += ["-d", str(depth)]
    argv += ["-o", "json"]
    proc = runner.run(argv, purpose)
    rows = json.loads(proc.stdout)
    if len(rows) != 1:
        raise RuntimeError(f"{purpose}: expected one llama-bench result, got {len(rows)}")
    row = rows[0]
    result = summarize([float(s) for s in row["samples_ts"]])
    result.update({"n_prompt": row["n_prompt"], "n_gen": row["n_gen"], "n_depth": row.get("n_depth", 0),
                   "n_threads": row["n_threads"], "n_batch": row.get("n_batch"),
                   "n_ubatch": row.get("n_ubatch"), "flash_attn": row.get("flash_attn"),
                   "type_k": row.get("type_k"), "type_v": row.get("type_v")})
    return result, row


def batched_bench(runner: Runner, bin_dir: str, model: str, threads: int, reps: int,
                  pp: int, tg: int, pl: int, shared_prompt: bool, purpose: str) -> dict:
    # -no-kvu: one KV stream per sequence, n_ctx is split evenly between them.
    per_seq = -(-(pp + tg + 1) // 256) * 256
    n_ctx = pl * per_seq
    # -npl repeated `reps` times: the tool clears the KV cache and measures each entry again.
    argv = [os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-t", str(threads),
            "-c", str(n_ctx), "-npp", str(pp), "-ntg", str(tg), "-npl", ",".join([str(pl)] * reps)]
    if shared_prompt:
        argv.append("-pps")
    argv.append("-no-kvu")
    argv += ["--output-format", "jsonl"]
    proc = runner.run(argv, purpose)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(rows) != reps:
        raise RuntimeError(f"{purpose}: expected {reps} rows, got {len(rows)} (context too small?)")
    result = summarize([float(r["speed_tg"]) for r in rows])
    result.update({"npp": pp, "ntg": tg, "npl": pl, "n_ctx": n_ctx, "prompt_shared": shared_prompt,
                   "kv_unified": False, "flash_attn": rows[0].get("flash_attn"),
                   "n_threads": rows[0].get("n_threads"),
                   "prefill_tokens_per_s": [round(float(r["speed_pp"]), 3) for r in rows]})
    return result


# --------------------------------------------------------------------------- environment

def cpu_description() -> dict:
    info: dict = {}
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
        for key in ("model name", "cpu family", "model", "stepping"):
            m = re.search(rf"^{key}\s*:\s*(.*)$", text, re.M)
            if m:
                info[key.replace(" ", "_")] = m.group(1).strip()
        m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
        if m:
            flags = set(m.group(1).split())
            info["simd"] = sorted(f for f in flags if f in {
                "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile"})
        info["logical_cpus"] = text.count("\nprocessor") + text.startswith("processor")
    except OSError:
        pass
    return info


def llama_cpp_version(bin_dir: str, work_dir: str) -> dict:
    out: dict = {}
    try:
        proc = subprocess.run([os.path.join(bin_dir, "llama-bench"), "--version"],
                              capture_output=True, text=True, timeout=60)
        text = (proc.stdout + proc.stderr).strip()
        out["reported"] = " ".join(text.split())
        m = re.search(r"commit ([0-9a-fA-F]+)", text)
        if m:
            out["commit"] = m.group(1)
    except (OSError, subprocess.SubprocessError) as exc:
        out["error"] = str(exc)
    for pkg in sorted(glob.glob(os.path.join(work_dir, "llama_cpp_python-*", "PKG-INFO"))):
        src = os.path.dirname(pkg)
        out["source"] = src
        with open(pkg) as fh:
            m = re.search(r"^Version:\s*(\S+)", fh.read(), re.M)
        if m:
            out["llama_cpp_python_sdist"] = m.group(1)
        changelog = os.path.join(src, "CHANGELOG.md")
        if os.path.exists(changelog):
            with open(changelog) as fh:
                m = re.search(r"ggml-org/llama\.cpp@([0-9a-f]+)", fh.read())
            if m:
                out["vendored_commit"] = m.group(1)
    return out


# --------------------------------------------------------------------------- reports

def atomic_write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fmt_rate(entry: dict | None) -> str:
    if not entry:
        return "-"
    if "error" in entry:
        return "failed"
    return f"{entry['tokens_per_s_best']:.2f} / {entry['tokens_per_s_mean']:.2f}"


def markdown(report: dict) -> str:
    s = report["sizes"]
    v = report["llama_cpp"]
    lines = [
        "# llama.cpp CPU baseline, Llama-3-8B shapes, 2 layers, random weights",
        "",
        f"- generated: {report['generated_at']}" + ("  (QUICK sizes, numbers not meaningful)" if report["quick"] else ""),
        f"- llama.cpp: {v.get('reported', '?')}"
        + (f"; from llama-cpp-python {v['llama_cpp_python_sdist']} sdist, vendored "
           f"ggml-org/llama.cpp@{v.get('vendored_commit', '?')}" if "llama_cpp_python_sdist" in v else ""),
        f"- CPU: {report['cpu'].get('model_name', '?')} (family {report['cpu'].get('cpu_family', '?')}, "
        f"model {report['cpu'].get('model', '?')}), {report['cpu'].get('logical_cpus', '?')} logical CPUs; "
        f"threads used: {report['threads']}",
        f"- quantization: llama-quantize {'--pure' if report['quantize_pure'] else '(default mixture)'} from F16",
        f"- repetitions: {report['repetitions']}; cells are tokens/s, best / mean",
        "- llama.cpp defaults otherwise: flash attention auto (-1), KV cache F16, -b 2048 -ub 512, "
        "CPU weight repacking on; batched: -pps -no-kvu (prompt prefilled once, KV copied to each "
        "sequence's own stream)",
        "",
        f"| format | file GiB | prefill {s['prefill']} | decode b=1 @ctx {s['decode_depth']} "
        f"| batched S_TG ({s['batched_pl']} seq @ctx {s['batched_pp']}) |",
        "|---|---|---|---|---|",
    ]
    for fmt, res in report["results"].items():
        size = f"{res['file_bytes'] / 2**30:.2f}" if res.get("file_bytes") else "-"
        lines.append(f"| {fmt.upper()} | {size} | {fmt_rate(res.get('prefill'))} | "
                     f"{fmt_rate(res.get('decode'))} | {fmt_rate(res.get('batched'))} |")
    lines += ["", "Commands:", ""]
    lines += [f"    {c['command']}" for c in report["commands"]]
    errors = [(f, k, r[k]["error"]) for f, r in report["results"].items()
              for k in ("prefill", "decode", "batched") if isinstance(r.get(k), dict) and "error" in r[k]]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {f} {k}: {e.splitlines()[0]}" for f, k, e in errors]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", default=DEFAULT_WORK_DIR,
                    help="holds the llama.cpp build and the GGUF files (default: %(default)s)")
    ap.add_argument("--llama-bin-dir", default=None,
                    help="directory with llama-bench, llama-batched-bench, llama-quantize "
                         "(default: <work-dir>/build/bin)")
    ap.add_argument("--formats", default=",".join(ALL_FORMATS),
                    help="comma-separated subset of %s (default: all)" % ",".join(ALL_FORMATS))
    ap.add_argument("--repetitions", type=int, default=3,
                    help="llama-bench -r, and number of llama-batched-bench measurements (default: 3)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every tool (default: 2)")
    ap.add_argument("--output", default=None,
                    help="JSON report (default: <work-dir>/llama_cpp_compare[_quick].json)")
    ap.add_argument("--markdown", default=None,
                    help="Markdown report (default: the --output path with .md)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny benchmark sizes to check that everything runs (model size unchanged)")
    ap.add_argument("--seed", type=int, default=0, help="weight seed (default: 0)")
    ap.add_argument("--std", type=float, default=0.02, help="weight standard deviation (default: 0.02)")
    ap.add_argument("--no-pure", action="store_true",
                    help="let llama-quantize pick its default per-tensor mixture (Q4_0 then stores "
                         "output.weight as Q6_K) instead of --pure")
    ap.add_argument("--regenerate", action="store_true", help="rewrite GGUF files that already exist")
    ap.add_argument("--batched-full-prefill", action="store_true",
                    help="prefill every sequence separately instead of -pps (same S_TG, ~npl times slower)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds allowed per tool run")
    args = ap.parse_args()

    formats = [f.strip().lower() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in ALL_FORMATS]
    if unknown:
        ap.error(f"unknown format(s): {', '.join(unknown)}")
    if args.repetitions < 1:
        ap.error("--repetitions must be >= 1")
    work_dir = os.path.abspath(args.work_dir)
    bin_dir = os.path.abspath(args.llama_bin_dir or os.path.join(work_dir, "build", "bin"))
    for tool in ("llama-bench", "llama-batched-bench", "llama-quantize"):
        if not os.access(os.path.join(bin_dir, tool), os.X_OK):
            sys.exit(f"{tool} not found in {bin_dir}; build llama.cpp first (see the top of this file)")
    output = args.output or os.path.join(work_dir, "llama_cpp_compare%s.json" % ("_quick" if args.quick else ""))
    md_path = args.markdown or os.path.splitext(output)[0] + ".md"
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    pure = not args.no_pure

    model_dir = os.path.join(work_dir, "models")
    stem = f"llama3-8b-{MODEL['n_layer']}layer-seed{args.seed}"
    if args.std != 0.02:
        stem += f"-std{args.std:g}"
    files = {f: os.path.join(model_dir, f"{stem}-{f}{'' if pure or f not in QUANTIZED else '-mix'}.gguf")
             for f in ALL_FORMATS}

    runner = Runner(args.timeout, os.path.splitext(output)[0] + "_logs")
    floats_needed = {f for f in formats if f == "bf16"} | ({"f16"} if set(formats) - {"bf16"} else set())
    to_write = {f: files[f] for f in sorted(floats_needed) if args.regenerate or not os.path.exists(files[f])}
    if to_write:
        gguf = import_gguf(work_dir)
        log(f"writing {', '.join(to_write)} GGUF (seed {args.seed}, std {args.std})")
        t0 = time.monotonic()
        write_ggufs(gguf, to_write, args.seed, args.std)
        log(f"GGUF written in {time.monotonic() - t0:.0f} s")
    for fmt in formats:
        if fmt in QUANTIZED and (args.regenerate or "f16" in to_write or not os.path.exists(files[fmt])):
            quantize(runner, bin_dir, files["f16"], files[fmt], QUANTIZED[fmt], pure, args.threads)

    report = {
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "llama_cpp": llama_cpp_version(bin_dir, work_dir),
        "cpu": cpu_description(),
        "host": platform.node(),
        "threads": args.threads,
        "repetitions": args.repetitions,
        "model": dict(MODEL, weights=f"random normal, seed {args.seed}, std {args.std}; norms 1.0",
                      tokenizer="made-up SPM vocabulary (tokenizer.ggml.model=llama)"),
        "quantize_pure": pure,
        "sizes": sizes,
        "results": {},
        "commands": runner.commands,
    }
    failed = False
    for fmt in formats:
        res: dict = {"file": files[fmt], "file_bytes": os.path.getsize(files[fmt])}
        report["results"][fmt] = res
        tests = [
            ("prefill", lambda: llama_bench(runner, bin_dir, files[fmt], args.threads, args.repetitions,
                                            sizes["prefill"], 0, 0, f"{fmt} prefill")),
            ("decode", lambda: llama_bench(runner, bin_dir, files[fmt], args.threads, args.repetitions,
                                           0, sizes["decode_gen"], sizes["decode_depth"], f"{fmt} decode")),
            ("batched", lambda: batched_bench(runner, bin_dir, files[fmt], args.threads, args.repetitions,
                                              sizes["batched_pp"], sizes["batched_tg"], sizes["batched_pl"],
                                              not args.batched_full_prefill, f"{fmt} batched")),
        ]
        for name, fn in tests:
            try:
                out = fn()
                if name == "batched":
                    res[name] = out
                else:
                    res[name], raw = out
                    res.setdefault("llama_bench_model", {k: raw.get(k) for k in (
                        "model_type", "model_size", "model_n_params", "cpu_info", "build_commit",
                        "build_number", "backends")})
            except (RuntimeError, ValueError, KeyError) as exc:
                failed = True
                res[name] = {"error": str(exc)}
                log(str(exc))
            atomic_write(output, json.dumps(report, indent=2) + "\n")
            atomic_write(md_path, markdown(report))

    atomic_write(output, json.dumps(report, indent=2) + "\n")
    atomic_write(md_path, markdown(report))
    log(f"wrote {output} and {md_path}")
    print(markdown(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
