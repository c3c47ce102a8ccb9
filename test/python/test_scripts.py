"""The check scripts CI depends on: the compile guard (scripts/compile_guard.py) and the GPU check's
verdict and phases (scripts/gpu_check_verdict.py, scripts/gpu-check.sh), on small made-up inputs."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check_verdict  # noqa: E402

GUARD = os.path.join(ROOT, "scripts", "compile_guard.py")


def clang_major():
    if shutil.which("clang++") is None:
        return None
    out = subprocess.run(["clang++", "--version"], stdout=subprocess.PIPE, text=True).stdout
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if m else None


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def tree(tmp_path):
    """A build's compile_commands.json over made-up sources, a 'new' torch (whose ATen.h brings in a
    guard header, as torch 2.14 does) and an 'old' one (whose ATen.h does not, as 2.11)."""
    new = tmp_path / "site" / "torch" / "include"
    write(str(new / "ATen" / "ATen.h"), "#pragma once\n#include <c10/Guard.h>\nnamespace at { struct Tensor {}; }\n")
    write(str(new / "c10" / "Guard.h"), "#pragma once\nnamespace c10 { struct StreamGuard {}; }\n")
    old = tmp_path / "old"
    write(str(old / "include" / "ATen" / "ATen.h"), "#pragma once\nnamespace at { struct Tensor {}; }\n")
    write(str(old / "include" / "c10" / "Guard.h"), "#pragma once\nnamespace c10 { struct StreamGuard {}; }\n")
    write(str(old / "VERSION"), "2.11.0\n")
    src = tmp_path / "src"
    write(str(src / "good.cpp"), "#include <ATen/ATen.h>\nat::Tensor t;\n")
    # Uses c10::StreamGuard without including its header: compiles only against the new torch.
    write(str(src / "transitive.cpp"), "#include <ATen/ATen.h>\nc10::StreamGuard g;\n")
    # A lambda capturing a structured binding: g++ 12 accepts it, clang before 16 does not.
    write(str(src / "binding.cpp"),
          "#include <utility>\nint f() { std::pair<int, int> p{1, 2}; auto [a, b] = p;\n"
          "  return [&] { return a + b; }(); }\n")
    write(str(src / "kernel.cu"), "this is not C++ and must not be compiled\n")
    npu = tmp_path / "npu" / "torch_npu" / "include"
    write(str(npu / "npu.h"), "#pragma once\n#include <c10/Guard.h>\n")
    write(str(src / "npu_bridge.cpp"), "#include <npu.h>\nc10::StreamGuard g;\n")
    build = tmp_path / "build"
    build.mkdir()

    def entry(name, extra=()):
        path = str(src / name)
        cmd = ["/usr/bin/c++", "-DX=1", *extra, "-isystem", str(new), "-std=c++20", "-o", name + ".o", "-c", path]
        return {"directory": str(build), "command": " ".join(cmd), "file": path}

    entries = [entry("good.cpp"), entry("transitive.cpp"), entry("binding.cpp"), entry("kernel.cu"),
               entry("npu_bridge.cpp", ["-isystem", str(npu)])]
    write(str(build / "compile_commands.json"), json.dumps(entries))
    return {"build": str(build), "old": str(old), "new": str(new.parent)}


def guard(tree, *args, headers=None):
    return subprocess.run([sys.executable, GUARD, "--build-dir", tree["build"],
                           "--torch-headers", headers or tree["old"], "--jobs", "2", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def failed_files(stdout):
    return sorted(re.findall(r"^FAILED (\S+)", stdout, re.M))


@pytest.mark.skipif(clang_major() is None, reason="clang++ is not installed (scripts/install-clang.sh)")
def test_compile_guard_catches_both_slips(tree):
    r = guard(tree)
    assert r.returncode == 1, r.stdout + r.stderr
    expected = ["transitive.cpp"] + (["binding.cpp"] if clang_major() < 16 else [])
    assert failed_files(r.stdout) == sorted(expected)
    # The first error of each, on its FAILED line; the .cu is left to nvcc; the npu bridge keeps the
    # build's torch (its header includes c10/Guard.h from there) and passes.
    assert re.search(r"^FAILED transitive\.cpp \(torch 2\.11\.0.*: error: .*c10", r.stdout, re.M)
    assert "of 4 translation units compile" in r.stdout and "1 .cu left to nvcc" in r.stdout
    assert "npu_bridge.cpp" not in r.stdout
    # good.cpp and transitive.cpp begin with ATen.h: checked with the guard's precompiled one (of
    # the old headers), with the same verdicts as without it.
    assert "[compile-guard] 2 with a precompiled <ATen/ATen.h>" in r.stdout
    plain = guard(tree, "--no-pch")
    assert plain.returncode == 1 and failed_files(plain.stdout) == failed_files(r.stdout)
    assert "[compile-guard] 0 with a precompiled <ATen/ATen.h>" in plain.stdout


@pytest.mark.skipif(clang_major() is None, reason="clang++ is not installed (scripts/install-clang.sh)")
def test_compile_guard_drops_the_builds_precompiled_header(tree):
    # The build's precompiled header (CMake's cmake_pch.hxx, here one that brings in the new torch's
    # c10/Guard.h) would hide transitive.cpp's missing include: the guard replays the command without it.
    pch = os.path.join(tree["build"], "CMakeFiles", "t.dir", "cmake_pch.hxx")
    write(pch, "#include <c10/Guard.h>\n")
    database = os.path.join(tree["build"], "compile_commands.json")
    entries = json.load(open(database))
    for e in entries:
        e["command"] = e["command"].replace("-DX=1", "-DX=1 -Winvalid-pch -include " + pch)
    write(database, json.dumps(entries))
    r = guard(tree)
    expected = ["transitive.cpp"] + (["binding.cpp"] if clang_major() < 16 else [])
    assert r.returncode == 1 and failed_files(r.stdout) == sorted(expected), r.stdout + r.stderr


@pytest.mark.skipif(clang_major() is None, reason="clang++ is not installed (scripts/install-clang.sh)")
def test_compile_guard_isolates_compiler_and_headers(tree):
    # Against the new torch's headers only the compiler can fail a file.
    r = guard(tree, headers=tree["new"])
    assert failed_files(r.stdout) == (["binding.cpp"] if clang_major() < 16 else [])
    # With g++ against the old headers only the missing include fails.
    r = guard(tree, "--compiler", "g++")
    assert r.returncode == 1 and failed_files(r.stdout) == ["transitive.cpp"]
    # Everything right: exit 0.
    r = guard(tree, "--compiler", "g++", headers=tree["new"])
    assert r.returncode == 0 and failed_files(r.stdout) == [], r.stdout + r.stderr
    r = guard(tree, "--only", "good")
    assert r.returncode == 0 and "1 of 1 translation units compile" in r.stdout


@pytest.mark.skipif(clang_major() is None, reason="clang++ is not installed (scripts/install-clang.sh)")
def test_compile_guard_cache_skips_only_unchanged_passes(tree, tmp_path):
    # The guard keys paths relative to its checkout (the folder above scripts/): here tmp_path.
    root = tmp_path
    os.makedirs(str(root / "scripts"))
    for name in ("compile_guard.py", "gpu_check_verdict.py"):
        shutil.copy(os.path.join(ROOT, "scripts", name), str(root / "scripts" / name))
    cache = str(tmp_path.parent / (tmp_path.name + "-guard-cache"))

    def run(top):
        r = subprocess.run([sys.executable, str(top / "scripts" / "compile_guard.py"), "--build-dir", str(top / "build"),
                            "--torch-headers", str(top / "site" / "torch"), "--jobs", "2", "--cache", cache],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        m = re.search(r"(\d+) of (\d+) translation units compile \((\d+) of them unchanged", r.stdout)
        assert m, r.stdout + r.stderr
        return failed_files(r.stdout), int(m.group(1)), int(m.group(3))

    broken = ["binding.cpp"] if clang_major() < 16 else []
    passing = 4 - len(broken)
    assert run(root) == (broken, passing, 0)
    # Nothing changed: every pass comes from the cache; a failure is compiled (and fails) again.
    assert run(root) == (broken, passing, passing)
    # Another checkout of the same files (every path differs) hits the same entries.
    clone = tmp_path.parent / (tmp_path.name + "-clone")
    shutil.copytree(str(root), str(clone))
    database = clone / "build" / "compile_commands.json"
    database.write_text(database.read_text().replace(str(root), str(clone)))
    assert run(clone) == (broken, passing, passing)
    # A header two of them include changes: those two are compiled again, npu_bridge.cpp is not.
    with open(str(root / "site" / "torch" / "include" / "ATen" / "ATen.h"), "a") as f:
        f.write("// touched\n")
    assert run(root) == (broken, passing, passing - 2)
    # A header that now fails fails every file that reads it, though each passed before.
    with open(str(root / "site" / "torch" / "include" / "c10" / "Guard.h"), "a") as f:
        f.write("this does not compile\n")
    assert run(root) == (sorted(["good.cpp", "transitive.cpp", "npu_bridge.cpp"] + broken), 4 - 3 - len(broken), 0)


def test_compile_guard_rejects_bad_arguments(tree, tmp_path):
    r = subprocess.run([sys.executable, GUARD, "--build-dir", str(tmp_path / "none"), "--torch-headers", tree["old"]],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "--build-dir: expected a configured build with compile_commands.json" in r.stderr
    r = subprocess.run([sys.executable, GUARD, "--build-dir", tree["build"], "--torch-headers", str(tmp_path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "--torch-headers: expected a folder with include/ATen/ATen.h" in r.stderr
    r = guard(tree, "--only", "nothing-matches")
    assert r.returncode == 1 and "no C++ translation unit" in r.stderr


@pytest.mark.parametrize("log, line", [
    ("[1/9] Building CXX object a.o\nFAILED: a.o\n/usr/bin/c++ -c a.cpp\n"
     "test/cuda/kv.cpp:42:22: error: 'CUDAStreamGuard' in namespace 'c10::cuda' does not name a type\n"
     "b.cpp:1:1: error: second\n",
     "test/cuda/kv.cpp:42:22: error: 'CUDAStreamGuard' in namespace 'c10::cuda' does not name a type"),
    ("warning: x\ncsrc/cuda/k.cu(12): error: identifier \"foo\" is undefined\n",
     "csrc/cuda/k.cu(12): error: identifier \"foo\" is undefined"),
    ("a.cpp:3:10: fatal error: c10/cuda/CUDAGuard.h: No such file or directory\n",
     "a.cpp:3:10: fatal error: c10/cuda/CUDAGuard.h: No such file or directory"),
    ("/usr/bin/ld: x.o: in function `f':\nx.cpp:(.text+0x1): undefined reference to `g()'\n",
     "x.cpp:(.text+0x1): undefined reference to `g()'"),
    ("CMake Error at CMakeLists.txt:3 (find_package):\n", "CMake Error at CMakeLists.txt:3 (find_package):"),
    ("[3/9] x\nFAILED: libx.so\nkilled\n", "FAILED: libx.so"),
    ("all good\n", ""),
])
def test_first_error_line(log, line):
    assert gpu_check_verdict.first_error(log) == line


def phases_file(reports, lines):
    with open(os.path.join(reports, "phases.tsv"), "w") as f:
        f.write("".join("%s\t%d\t%s\n" % line for line in lines))


def test_verdict_shows_the_failed_build_error(tmp_path):
    reports = str(tmp_path)
    error = "a.cpp:1:2: error: 'x' | was not declared"
    phases_file(reports, [("environment", 1, "ok: torch 2.11.0, 1 GPU(s)"), ("configure", 5, "ok"),
                          ("build", 60, "failed: build failed: %s (build.log)" % error)])
    code = gpu_check_verdict.verdict(reports, 70, 1, 0, "CUDA tests")
    assert code == 1
    table = open(os.path.join(reports, "verdict.md")).read()
    assert "| phase build" in table and "a.cpp:1:2: error: 'x' \\| was not declared" in table
    assert "FAILED: build" in table
    summary = json.load(open(os.path.join(reports, "summary.json")))
    assert summary["exit_code"] == 1 and summary["phase_seconds"]["build"] == 60


def test_verdict_over_phases_run_in_several_commands(tmp_path):
    reports = str(tmp_path)
    phases_file(reports, [("environment", 1, "ok"), ("configure", 5, "ok"), ("build", 300, "ok")])
    assert gpu_check_verdict.verdict(reports, 306, 0, 3, "CUDA tests") == 0
    assert "passed so far; not run yet: tests, numerics, benchmark" in open(os.path.join(reports, "verdict.md")).read()
    # A second command: the environment again, then the rest; its lines replace the earlier ones.
    with open(os.path.join(reports, "phases.tsv"), "a") as f:
        f.write("environment\t2\tok\ntests\t40\tok\nnumerics\t0\tskipped: no GPU\nbenchmark\t0\tskipped: no GPU\n")
    assert gpu_check_verdict.verdict(reports, 42, 0, 3, "CUDA tests") == 3
    summary = json.load(open(os.path.join(reports, "summary.json")))
    assert list(summary["phases"]) == ["configure", "build", "environment", "tests", "numerics", "benchmark"]
    assert summary["phase_seconds"]["environment"] == 2
    assert summary["rows"][-1]["result"] == "passed without a GPU (the GPU phases did not run)"


def test_verdict_names_unsupported_modes_apart_from_passes(tmp_path):
    reports = str(tmp_path)
    phases_file(reports, [("environment", 1, "ok"), ("numerics", 20, "ok")])

    def report(mode, impls):
        with open(os.path.join(reports, "numerics-op-%s.json" % mode), "w") as f:
            json.dump({"mode": mode, "implementations": [
                {"implementation": {"name": n}, "coverage": dict(zip(("cases", "passed", "failed", "unsupported"), c))}
                for n, c in impls]}, f)

    report("eager", [("cuda.torch.op", (10, 10, 0, 0)), ("cuda.native.op", (10, 8, 0, 2))])
    report("graph", [("cuda.torch.op", (10, 0, 0, 10)), ("cuda.native.op", (10, 9, 1, 0))])
    gpu_check_verdict.verdict(reports, 21, 0, 0, "CUDA tests")
    table = open(os.path.join(reports, "verdict.md")).read()
    assert "| numerics cuda.torch.op " in table and "eager 10/10, graph unsupported |" in table
    assert "eager 8/10 (2 unsupported), graph 9/10 (1 FAILED) |" in table


def fake_cmake(bin_dir, build_error):
    path = os.path.join(bin_dir, "cmake")
    write(path, """#!/bin/sh
case "$1" in
  --version) echo "cmake version 3.25.1"; exit 0 ;;
  --build) echo "[1/3] Building CXX object a.o"; echo "FAILED: a.o"; echo "%s"; exit 1 ;;
esac
while [ $# -gt 0 ]; do [ "$1" = -B ] && mkdir -p "$2" && : >"$2/CMakeCache.txt"; shift; done
echo "-- xllm_kernel: configured (fake)"
""" % build_error)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def test_gpu_check_build_failure_and_phases(tmp_path):
    """gpu-check.sh end to end with a stand-in cmake whose build fails: the verdict names the first
    compiler error; a later --phase tests on the same reports says the build is missing."""
    bin_dir = str(tmp_path / "bin")
    error = "test/cuda/kv_cache/kv_cache_cuda_test.cpp:42:22: error: 'CUDAStreamGuard' does not name a type"
    fake_cmake(bin_dir, error)
    bundle = tmp_path / "bundle"
    write(str(bundle / "MANIFEST"), "fake\n")
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], PYTHON=sys.executable,
               XLLM_KERNEL_BUNDLE=str(bundle), BUILD_DIR=str(tmp_path / "build"),
               REPORTS_DIR=str(tmp_path / "reports"), OUT=str(tmp_path / "out"), ALLOW_NO_GPU="1")
    script = os.path.join(ROOT, "scripts", "gpu-check.sh")

    r = subprocess.run(["bash", script, "--phase", "build"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 1, r.stdout
    verdict = open(str(tmp_path / "out" / "verdict.md")).read()
    assert "| phase build" in verdict and error in verdict, verdict
    assert os.path.exists(str(tmp_path / "out" / "gpu-check-reports.tar.gz"))

    r = subprocess.run(["bash", script, "--phase", "tests"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 1
    summary = json.load(open(str(tmp_path / "reports" / "summary.json")))
    assert summary["phases"]["tests"].startswith("failed: no build in")
    assert "build" in summary["phases"], "a later phase keeps the earlier phases' lines"

    r = subprocess.run(["bash", script, "--phase", "bogus"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 2 and "--phase: expected build, tests, numerics, benchmark or all" in r.stdout


FAKE_BENCHMARK = r"""#!/bin/bash
# A stand-in benchmark tool: --help lists the grid flags its operation takes; a run sleeps
# FAKE_UNIT seconds per half of its tokens x dtypes cases and writes its arguments as the report.
op="" out="" tokens=1 dtypes=1 help=0 argv="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --operation) op="$2"; shift ;;
    --output) out="$2"; shift ;;
    --tokens) tokens=$(echo "$2" | tr ',' '\n' | wc -l); shift ;;
    --dtype) dtypes=$(echo "$2" | tr ',' '\n' | wc -l); shift ;;
    --help) help=1 ;;
  esac
  shift
done
if [ "$help" = 1 ]; then
  [ "$op" = plain ] || printf '  --tokens TEXT\n  --hidden INT\n  --dtype TEXT\n'
  exit 0
fi
sleep "$(awk -v u="$FAKE_UNIT" -v n=$((tokens * dtypes)) 'BEGIN { print u * n / 2 }')"
printf '{"operation": "%s", "arguments": "%s"}\n' "$op" "$argv" >"$out"
"""


def fake_built_tree(build_dir):
    write(os.path.join(build_dir, "xllm-kernel-info"), "#!/bin/sh\nprintf 'norm\\nplain\\nrope\\n'\n")
    write(os.path.join(build_dir, "xllm-kernel-benchmark"), FAKE_BENCHMARK)
    for name in ("xllm-kernel-info", "xllm-kernel-benchmark"):
        path = os.path.join(build_dir, name)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def test_gpu_check_budget_mode_widens_what_fits(tmp_path):
    """--budget: the benchmark's headline grid for every operation first, then the full grid of each
    operation whose estimate (its headline time scaled by the grids' case counts) fits what is left;
    the phase estimates come from the bundle's dry-run times, scaled to the jobs."""
    bundle = tmp_path / "bundle"
    write(str(bundle / "MANIFEST"), "fake\n")
    write(str(bundle / "phase-times.tsv"),
          "# the dry run of abc1234 on 2026-12-03, Made-up CPU, 2 cores\nconfigure\t14\t2\nbuild\t2641\t2\n"
          "tests\t1087\t2\n")
    fake_built_tree(str(tmp_path / "build"))
    env = dict(os.environ, PYTHON=sys.executable, XLLM_KERNEL_BUNDLE=str(bundle), BUILD_DIR=str(tmp_path / "build"),
               REPORTS_DIR=str(tmp_path / "reports"), ALLOW_NO_GPU="1", CHECK_DEVICE="cpu", JOBS="16", FAKE_UNIT="0.1")
    env.pop("OUT", None)
    script = os.path.join(ROOT, "scripts", "gpu-check.sh")
    reports = tmp_path / "reports"

    def run(*args, **extra):
        return subprocess.run(["bash", script, "--phase", "benchmark", *args], env=dict(env, **extra),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)

    # A budget that holds everything: every operation with grid flags ends at its full grid.
    r = run("--budget", "600")
    assert r.returncode == 0, r.stdout
    assert "estimates for 16 jobs, from the dry run of abc1234 on 2026-12-03, Made-up CPU, 2 cores: configure 2 s, " \
           "build 331 s, tests 136 s" in r.stdout, r.stdout
    for op in ("norm", "rope"):
        for mode in ("eager", "graph"):
            args = json.load(open(str(reports / ("benchmark-%s-%s.json" % (op, mode)))))["arguments"]
            assert "--tokens 1,128,8192" in args and "--dtype bfloat16,float16,float32" in args, args
    plain = json.load(open(str(reports / "benchmark-plain-eager.json")))["arguments"]
    assert "--tokens" not in plain and "full grid" not in r.stdout.split("plain eager")[-1].split("\n")[0]
    summary = json.load(open(str(reports / "summary.json")))
    assert summary["phases"]["benchmark"] == "ok"

    # A budget that holds the headline pass but no widening: every report keeps its headline grid,
    # and the verdict names the operations left there (not a failure).
    # (Headline runs of 2 s for norm and rope, 1 s for plain: each widening's estimate is at least 13 s,
    # and 35 - 15 (kept for the verdict) - 10 s of headline runs leaves at most 10 s; the last headline
    # run still starts with at least 12 s left, less the environment's second or two.)
    r = run("--budget", "35", FAKE_UNIT="2")
    assert r.returncode == 0, r.stdout
    for op in ("norm", "rope"):
        args = json.load(open(str(reports / ("benchmark-%s-eager.json" % op))))["arguments"]
        assert "--tokens 1,8192" in args and "--dtype bfloat16 " in args + " ", args
    summary = json.load(open(str(reports / "summary.json")))
    assert summary["phases"]["benchmark"] == \
        "ok: headline grid only (budget): norm eager, norm graph, rope eager, rope graph", r.stdout
    assert {"check": "benchmark grid", "result": "headline grid only (budget): norm eager, norm graph, rope eager, "
            "rope graph"} in summary["rows"]

    r = run("--budget", "soon")
    assert r.returncode == 2 and "--budget: expected a whole number of seconds, given 'soon'" in r.stdout

    # OPERATIONS narrows the phase to those operations; a name the catalog lacks fails the phase. The
    # rerun of the phase replaces the reports of the runs before (no norm or plain reports stay).
    r = run("--budget", "600", OPERATIONS="rope")
    assert r.returncode == 0, r.stdout
    assert sorted(n for n in os.listdir(str(reports)) if n.endswith(".json") and n.startswith("benchmark-")) == \
        ["benchmark-rope-eager.json", "benchmark-rope-graph.json"], r.stdout
    r = run("--budget", "600", OPERATIONS="rope,nope")
    assert r.returncode == 1 and "OPERATIONS: no operation 'nope' in the catalog" in r.stdout, r.stdout
    assert json.load(open(str(reports / "summary.json")))["phases"]["benchmark"] == "failed: bad OPERATIONS"


def test_verdict_prints_the_estimates_beside_the_times(tmp_path):
    reports = str(tmp_path)
    with open(os.path.join(reports, "phases.tsv"), "w") as f:
        f.write("environment\t1\tok\t\nconfigure\t3\tok\t2\nbuild\t290\tok\t331\n")
    assert gpu_check_verdict.verdict(reports, 294, 0, 0, "CUDA tests") == 0
    summary = json.load(open(os.path.join(reports, "summary.json")))
    assert summary["phase_estimates"] == {"configure": 2, "build": 331}
    assert {"check": "phases", "result": "environment 1 s, configure 3 s (estimate 2 s), build 290 s (estimate 331 s)"} \
        in summary["rows"]


def test_verdict_benchmark_rows_give_the_roofline_and_the_devices_torch(tmp_path):
    reports = str(tmp_path)
    phases_file(reports, [("environment", 1, "ok"), ("benchmark", 9, "ok")])
    row = {"implementation": "cpu.native.silu_and_mul", "status": "timed", "speedup_vs_torch": 48.04,
           "parameters": {"tokens": 8192, "hidden": 4096, "dtype": "bfloat16"}, "percent_of_copy": 79.2,
           "percent_of_roofline": 60.1, "roofline": {"bound": "copy"}, "implementation_detail": {"solution": "native"}}
    torch_row = dict(row, implementation="cpu.torch.silu_and_mul", implementation_detail={"solution": "torch"})
    with open(os.path.join(reports, "benchmark-silu_and_mul-eager.json"), "w") as f:
        json.dump({"operation": "silu_and_mul", "device": "cpu", "mode": "eager", "results": [row, torch_row]}, f)
    gpu_check_verdict.verdict(reports, 10, 0, 0, "CUDA tests")
    rows = json.load(open(os.path.join(reports, "summary.json")))["rows"]
    assert {"check": "cpu.native.silu_and_mul 8192x4096",
            "result": "bf16 60% copy, 48.04x (% of roofline and its bound, x cpu.torch)"} in rows, rows
    assert not any(r["check"].startswith("cpu.torch") for r in rows)
