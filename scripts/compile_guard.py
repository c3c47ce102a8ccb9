#!/usr/bin/env python3
"""Compiles every C++ translation unit of a build once more, syntax only, the way the machines that
CI does not have would: with another compiler (clang++ instead of the build's g++) and against the
headers of the oldest supported torch (the GPU test machines' 2.11) instead of the build's own.

The commands come from the build's compile_commands.json, so every translation unit the build has
(library, CUDA plugin bridges, NPU bridges, tools, Python extension, every test, GPU tests included)
is checked with exactly its own flags; only the compiler, the torch include folders and the output
change. Not checked here:
  - the .cu kernels: torch-free by construction (cmake/cuda.cmake), nvcc compiles them in the build;
  - translation units that include the torch-npu wheel: its headers are those of one torch (2.14) and
    keep the build's torch; they still go through clang.

Prints one line per failing translation unit with its first error, then a summary; exit 1 when any
failed, 2 on bad arguments.

A translation unit whose first directive is `#include <ATen/ATen.h>` is checked with a precompiled
<ATen/ATen.h> of the old headers, made once per distinct command (under BUILD_DIR/compile-guard-pch):
the same text in the same place, so the same result, in a fraction of the time (parsing ATen's
headers is most of a syntax-only run). --no-pch turns it off.

With --cache DIR, a translation unit that passed is not compiled again while its command, the
compiler and the content of every file it read (the dependency list clang wrote when it passed) are
unchanged, the way ccache keys an object. Paths under the checkout and the build folder are keyed
relative to them, so another clone of the same tree hits the same entries. A failure is never cached.

  python3 scripts/compile_guard.py --build-dir build --torch-headers DIR [--compiler clang++] [--jobs N]
                                   [--cache DIR]
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check_verdict  # noqa: E402  (beside this file)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", required=True, help="a configured build with compile_commands.json")
    p.add_argument("--torch-headers", required=True,
                   help="a torch include folder's parent (scripts/torch-headers.sh): DIR/include/ATen/ATen.h")
    p.add_argument("--compiler", default="clang++")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--only", default="", help="a regular expression: check only the files it matches")
    p.add_argument("--cache", default="", help="a folder for the passes of unchanged translation units (empty: none)")
    p.add_argument("--no-pch", action="store_true",
                   help="no precompiled <ATen/ATen.h> for the translation units that begin with it")
    return p.parse_args()


class PassCache:
    """Which translation units passed, keyed by command and compiler, each with the content hashes
    of the files it read then (the manifest). A hit needs every one of those files unchanged."""

    def __init__(self, folder, compiler_version, roots):
        self.folder = folder
        self.compiler_version = compiler_version
        # (absolute prefix, placeholder), the longest first: a build folder inside the checkout.
        self.roots = sorted(((os.path.abspath(r), "<%s>" % name) for name, r in roots.items()),
                            key=lambda r: -len(r[0]))
        self.hashes = {}
        os.makedirs(folder, exist_ok=True)

    def relative(self, text):
        for prefix, name in self.roots:
            text = text.replace(prefix, name)
        return text

    def absolute(self, text):
        for prefix, name in self.roots:
            text = text.replace(name, prefix)
        return text

    def digest(self, path):
        if path not in self.hashes:  # dict writes are atomic; a race only hashes a file twice
            try:
                with open(path, "rb") as f:
                    self.hashes[path] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                self.hashes[path] = None
        return self.hashes[path]

    def manifest_path(self, directory, cmd):
        key = "\0".join([self.compiler_version, self.relative(directory)] + [self.relative(a) for a in cmd])
        return os.path.join(self.folder, hashlib.sha256(key.encode()).hexdigest() + ".json")

    def hit(self, directory, cmd):
        try:
            with open(self.manifest_path(directory, cmd)) as f:
                deps = json.load(f)["deps"]
        except (OSError, ValueError, KeyError):
            return False
        return bool(deps) and all(self.digest(self.absolute(p)) == h for p, h in deps)

    def store(self, directory, cmd, depfile):
        with open(depfile) as f:
            text = f.read().replace("\\\n", " ")
        _, _, listed = text.partition(": ")
        paths = [t.replace("\\ ", " ") for t in re.split(r"(?<!\\)\s+", listed) if t]
        deps = []
        for p in paths:
            full = os.path.normpath(os.path.join(directory, p))
            if os.path.basename(os.path.dirname(full)) == "compile-guard-pch":
                continue  # this run's precompiled ATen.h: the same text as the headers it was made of
            h = self.digest(full)
            if h is None:
                return
            deps.append([self.relative(full), h])
        target = self.manifest_path(directory, cmd)
        tmp = "%s.%d.tmp" % (target, os.getpid())
        with open(tmp, "w") as f:
            json.dump({"deps": deps}, f)
        os.replace(tmp, target)


def first_error(output):
    """The compiler's first error line (the GPU check's reading of a build log), else its first line."""
    found = gpu_check_verdict.first_error(output)
    if found:
        return found
    lines = [l for l in output.splitlines() if l.strip()]
    return lines[0].strip() if lines else "(no output)"


def command_of(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    # Drop a compiler launcher (ccache) and the compiler itself.
    while args and os.path.basename(args[0]) in ("ccache", "sccache"):
        args = args[1:]
    return args[1:]


def rewrite(args, torch_include, headers_include):
    """The flags without output, dependency files, -c or the build's precompiled header; torch's
    include folders moved to the headers'. The precompiled header (CMake's cmake_pch.hxx, see
    XLLM_KERNEL_TORCH_PCH) goes: it would put ATen's headers in front of every translation unit,
    and a translation unit must compile with what it includes itself."""
    out, skip = [], 0
    for i, a in enumerate(args):
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = 1
            continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch"):
            continue
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a == "-include" and os.path.basename(nxt).startswith("cmake_pch"):
            skip = 1
            continue
        if a == "-Xclang" and nxt in ("-include-pch", "-include") and i + 3 < len(args) \
                and os.path.basename(args[i + 3]).startswith("cmake_pch"):
            skip = 3
            continue
        if torch_include and (a == torch_include or a.startswith(torch_include + "/")):
            a = headers_include + a[len(torch_include):]
        elif torch_include and a.startswith("-I" + torch_include):
            a = "-I" + headers_include + a[len("-I") + len(torch_include):]
        out.append(a)
    return out


ATEN_FIRST = re.compile(r"\s*#\s*include\s*<ATen/ATen\.h>")


def begins_with_aten(path):
    """Whether the first preprocessor directive of the file is #include <ATen/ATen.h> (comments and
    blank lines before it allowed): a precompiled ATen.h in front of it changes nothing."""
    try:
        text = open(path, errors="replace").read(20000)
    except OSError:
        return False
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    for line in text.splitlines():
        stripped = line.split("//", 1)[0].strip()
        if not stripped:
            continue
        return bool(ATEN_FIRST.match(stripped))
    return False


class AtenPch:
    """One precompiled <ATen/ATen.h> per distinct set of flags, made on first use (thread-safe); None
    where clang cannot make it (the translation unit is then checked without)."""

    def __init__(self, folder, compiler):
        self.folder, self.compiler = folder, compiler
        self.made, self.locks, self.lock = {}, {}, threading.Lock()

    def get(self, directory, flags):
        key = hashlib.sha256(("\0".join([directory] + flags)).encode()).hexdigest()[:24]
        with self.lock:
            lock = self.locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.made:
                os.makedirs(self.folder, exist_ok=True)
                header = os.path.join(self.folder, "aten.h")
                if not os.path.exists(header):
                    with open(header + ".tmp%d" % os.getpid(), "w") as f:
                        f.write("#include <ATen/ATen.h>\n")
                    os.replace(header + ".tmp%d" % os.getpid(), header)
                pch = os.path.join(self.folder, key + ".pch")
                proc = subprocess.run([self.compiler] + flags + ["-x", "c++-header", header, "-o", pch + ".tmp"],
                                      cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if proc.returncode == 0:
                    os.replace(pch + ".tmp", pch)
                self.made[key] = pch if proc.returncode == 0 else None
            return self.made[key]


def main():
    opts = parse_args()
    database = os.path.join(opts.build_dir, "compile_commands.json")
    headers_include = os.path.join(os.path.abspath(opts.torch_headers), "include")
    if not os.path.isfile(database):
        print("compile_guard: --build-dir: expected a configured build with compile_commands.json, "
              "given %s (no %s)" % (opts.build_dir, database), file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(headers_include, "ATen", "ATen.h")):
        print("compile_guard: --torch-headers: expected a folder with include/ATen/ATen.h, given %s"
              % opts.torch_headers, file=sys.stderr)
        return 2
    version = opts.torch_headers
    for name, pattern in (("VERSION", r"(\S+)"), ("version.py", r"__version__\s*=\s*['\"]([^'\"]+)")):
        path = os.path.join(opts.torch_headers, name)  # scripts/torch-headers.sh's, or a torch package's
        m = re.search(pattern, open(path).read()) if os.path.exists(path) else None
        if m:
            version = m.group(1)
            break
    entries = json.load(open(database))
    only = re.compile(opts.only) if opts.only else None

    jobs = []
    skipped_cu = 0
    for e in entries:
        path = e["file"]
        if only and not only.search(path):
            continue
        if path.endswith(".cu"):
            skipped_cu += 1
            continue
        if os.path.basename(path).startswith("cmake_pch"):
            continue  # CMake's source that makes a precompiled header: ATen.h alone, nothing of ours
        args = command_of(e)
        torch_include = next((a[len("-I"):] if a.startswith("-I") else a for a in args
                              if re.search(r"/torch/include$", a) and "torch_npu" not in a), None)
        npu = any("torch_npu" in a or "torch-npu" in a for a in args)
        flags = rewrite(args, None if npu else torch_include, headers_include)
        # The source file stays last; -fsyntax-only replaces the object.
        flags = [f for f in flags if f != path]
        pch_flags = flags if (torch_include and not npu and not opts.no_pch and "clang" in os.path.basename(opts.compiler)
                              and begins_with_aten(path)) else None
        flags = flags + ["-fsyntax-only", path]
        against = "torch %s" % ("(the build's: torch-npu)" if npu else version) if torch_include else "no torch"
        jobs.append((path, e.get("directory", "."), [opts.compiler] + flags, against, pch_flags))

    if not jobs:
        print("compile_guard: no C++ translation unit in %s%s" % (database, " matching --only" if only else ""),
              file=sys.stderr)
        return 1

    compiler = subprocess.run([opts.compiler, "--version"], stdout=subprocess.PIPE, text=True).stdout.splitlines()
    cache = None
    if opts.cache:
        source_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cache = PassCache(opts.cache, "\n".join(compiler),
                          {"build": os.path.abspath(opts.build_dir), "source": source_root})
    cached = []
    pchs = AtenPch(os.path.join(os.path.abspath(opts.build_dir), "compile-guard-pch"), opts.compiler)
    used_pch = []

    def run(job):
        path, directory, cmd, against, pch_flags = job
        started = time.time()
        if cache is not None and cache.hit(directory, cmd):
            cached.append(path)
            return path, against, 0, "", 0.0
        depfile = None
        full = cmd
        pch = pchs.get(directory, pch_flags) if pch_flags is not None else None
        if pch is not None:
            used_pch.append(path)
            full = cmd[:-2] + ["-include-pch", pch] + cmd[-2:]
        if cache is not None:
            fd, depfile = tempfile.mkstemp(dir=cache.folder, suffix=".d")
            os.close(fd)
            full = cmd + ["-MD", "-MF", depfile]
        proc = subprocess.run(full, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if depfile is not None:
            if proc.returncode == 0 and os.path.exists(depfile):
                cache.store(directory, cmd, depfile)
            if os.path.exists(depfile):
                os.remove(depfile)
        return path, against, proc.returncode, proc.stdout, time.time() - started

    print("[compile-guard] %d translation units, syntax only, with %s against torch %s headers (%d jobs)"
          % (len(jobs), opts.compiler, version, max(1, opts.jobs)), flush=True)
    start = time.time()
    failed = []
    root = os.path.commonpath([j[0] for j in jobs])
    times = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        for path, against, rc, output, seconds in pool.map(run, jobs):
            times.append((seconds, os.path.relpath(path, root)))
            if rc != 0:
                failed.append((path, against, output))
                print("FAILED %s (%s, %.0f s): %s" % (os.path.relpath(path, root), against, seconds,
                                                      first_error(output)), flush=True)
    print("[compile-guard] %s, torch %s headers: %d of %d translation units compile (%d of them unchanged since "
          "they passed, from the cache), %d do not (%d .cu left to nvcc) in %.0f s"
          % (compiler[0] if compiler else opts.compiler, version, len(jobs) - len(failed), len(jobs), len(cached),
             len(failed), skipped_cu, time.time() - start))
    slowest = [(t, p) for t, p in sorted(times, reverse=True)[:5] if t >= 1.0]
    print("[compile-guard] %d with a precompiled <ATen/ATen.h>%s" % (
        len(used_pch), "; slowest: " + ", ".join("%s %.0f s" % (p, t) for t, p in slowest) if slowest else ""))
    for path, against, output in failed:
        print("\n---- %s (%s)\n%s" % (os.path.relpath(path, root), against, "\n".join(output.splitlines()[:40])),
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
