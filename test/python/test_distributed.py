"""--distributed under torchrun: two CPU ranks coordinated through torchrun's c10d store. Each rank
writes its report (.rankN), rank 0 the aggregate; a disagreeing rank is named in the consensus; a
failing or hanging rank ends the run with an error on every rank instead of a hang; without
torchrun's environment --distributed is a usage error. XLLM_KERNEL_TEST_FAULT is the tools' test
hook (docs/distributed.md)."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from conftest import PACKAGE_PARENT, ROOT, TORCHRUN_VARIABLES, missing_torchrun, python_env

# The build tree the package comes from (<build>/python), else $BUILD_DIR as in scripts/test.sh.
BUILD = next(
    (d for d in (PACKAGE_PARENT.parent, ROOT / os.environ.get("BUILD_DIR", "build")) if (d / "xllm-kernel-numerics").exists()),
    None,
)
pytestmark = [pytest.mark.skipif(BUILD is None, reason="the xllm-kernel-numerics/-benchmark tools are not built"),
              pytest.mark.skipif(missing_torchrun() is not None, reason=str(missing_torchrun()))]

TIMEOUT = 120  # seconds; a run that hangs fails the test instead of the suite
SMALL = ["--operation", "rms_norm", "--tokens", "4", "--hidden", "64"]
BENCH = [*SMALL, "--iterations", "3", "--copy-bytes", "4194304"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in python_env().items() if k not in TORCHRUN_VARIABLES}
    env["OMP_NUM_THREADS"] = "1"  # what torchrun would set anyway, without its banner
    env.update(extra)
    return env


def torchrun(*args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    """torchrun (as `python -m torch.distributed.run`: the venv's torchrun script may name an old
    interpreter path) with two ranks on a free port of its own (--standalone)."""
    env = clean_env(**({"XLLM_KERNEL_TEST_FAULT": fault} if fault else {}))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def tool(name: str) -> str:
    return str(BUILD / f"xllm-kernel-{name}")


def load(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def explain(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"


def test_numerics_two_ranks_write_their_reports_and_the_consensus(tmp_path):
    out, md = tmp_path / "n.json", tmp_path / "n.md"
    result = torchrun("--no-python", tool("numerics"), "--distributed", *SMALL, "--output", str(out),
                      "--markdown", str(md))
    assert result.returncode == 0, explain(result)
    for path in (out, md, tmp_path / "n.rank0.json", tmp_path / "n.rank1.json", tmp_path / "n.rank0.md",
                 tmp_path / "n.rank1.md"):
        assert path.exists(), path
    aggregate = load(out)
    ranks = [load(tmp_path / f"n.rank{r}.json") for r in (0, 1)]
    assert aggregate["schema"] == "xllm-kernel/numerics-distributed-report/1"
    assert aggregate["world_size"] == 2 and [r["rank"] for r in aggregate["ranks"]] == [0, 1]
    assert aggregate["ranks"][1]["report"] == str(tmp_path / "n.rank1.json")
    assert aggregate["summary"]["status"] == "passed" and aggregate["summary"]["disagreed"] == 0
    for r, report in enumerate(ranks):
        assert report["distributed"]["rank"] == r and report["distributed"]["world_size"] == 2
        assert report["summary"]["exit_code"] == 0
    # The same cases on every rank and in the aggregate, each agreed.
    case_ids = [[c["case_id"] for c in rep["implementations"][0]["results"]] for rep in (aggregate, *ranks)]
    assert case_ids[0] == case_ids[1] == case_ids[2] and len(case_ids[0]) > 0
    for c in aggregate["implementations"][0]["results"]:
        assert c["consensus"] == "agreed" and c["statuses"] == ["passed", "passed"]
    assert "on 2 cpu ranks" in result.stdout and "on 2 cpu ranks" in md.read_text()


def test_benchmark_aggregate_is_the_slowest_rank_per_sample(tmp_path):
    out = tmp_path / "b.json"
    result = torchrun("--no-python", tool("benchmark"), "--distributed", *BENCH, "--output", str(out))
    assert result.returncode == 0, explain(result)
    aggregate = load(out)
    ranks = [load(tmp_path / f"b.rank{r}.json") for r in (0, 1)]
    assert aggregate["schema"] == "xllm-kernel/benchmark-distributed-report/1"
    assert aggregate["summary"]["timed"] > 0 and aggregate["summary"]["exit_code"] == 0
    assert aggregate["copy_bandwidth_gbps"] == min(r["copy_bandwidth_gbps"] for r in ranks)
    assert [(r["case_id"], r["implementation"]) for r in aggregate["results"]] == \
        [(r["case_id"], r["implementation"]) for r in ranks[0]["results"]] == \
        [(r["case_id"], r["implementation"]) for r in ranks[1]["results"]]
    for i, row in enumerate(aggregate["results"]):
        assert row["status"] == "timed" and row["statuses"] == ["timed", "timed"]
        for timer in ("device", "wall", "host_enqueue"):
            worst = row["samples"][timer]
            per_rank = [rep["results"][i]["samples"][timer] for rep in ranks]
            assert len(worst) == 3 == len(per_rank[0]) == len(per_rank[1])
            assert all(w == max(a, b) for w, a, b in zip(worst, *per_rank))
            assert row[timer]["max"] == max(worst)
        skew = row["skew"]["per_rank"]
        assert [s["rank"] for s in skew] == [0, 1]
        assert all(s["median_excess"] >= 0 for s in skew)
        assert abs(sum(s["slowest_fraction"] for s in skew) - 1) < 1e-9
        assert row["skew"]["spread"]["count"] == 3
    # The aggregate keeps the per-rank rows' shape, so `compare` takes it.
    compared = subprocess.run([tool("benchmark"), "compare", str(out), str(out), str(out)], env=clean_env(),
                              capture_output=True, text=True, timeout=TIMEOUT)
    assert compared.returncode == 0, explain(compared)


def test_a_disagreeing_rank_is_named_in_the_consensus(tmp_path):
    out = tmp_path / "n.json"
    result = torchrun("--no-python", tool("numerics"), "--distributed", *SMALL, "--output", str(out),
                      fault="disagree:1")
    assert result.returncode != 0, explain(result)
    aggregate = load(out)
    assert aggregate["summary"]["disagreed"] == 1 and aggregate["summary"]["exit_code"] == 1
    disagreed = [c for c in aggregate["implementations"][0]["results"] if c["status"] == "disagreed"]
    assert len(disagreed) == 1
    assert disagreed[0]["statuses"] == ["passed", "failed"] and disagreed[0]["majority_status"] == "passed"
    (dissent,) = disagreed[0]["dissent"]
    assert dissent["rank"] == 1 and dissent["status"] == "failed"
    assert "XLLM_KERNEL_TEST_FAULT=disagree:1" in dissent["failures"][0]
    assert "headroom" in dissent and "max_abs_error" in dissent
    assert load(tmp_path / "n.rank1.json")["summary"]["failed"] == 1
    assert "rank 1 failed" in result.stdout  # the aggregate's table says who


def test_benchmark_times_a_case_only_where_every_rank_validated_it(tmp_path):
    out = tmp_path / "b.json"
    result = torchrun("--no-python", tool("benchmark"), "--distributed", *BENCH, "--output", str(out),
                      fault="disagree:1")
    assert result.returncode != 0, explain(result)
    aggregate = load(out)
    first, *rest = aggregate["results"]
    assert first["status"] == "disagreed" and first["statuses"] == ["not_timed", "failed"]
    assert first["dissent"][0]["rank"] == 1
    assert rest and all(r["status"] == "timed" for r in rest)  # the samples stayed aligned after it
    rank0 = load(tmp_path / "b.rank0.json")["results"][0]
    assert rank0["status"] == "not_timed" and "rank 1: validation failed" in rank0["reason"]


@pytest.mark.parametrize("name", ["numerics", "benchmark"])
def test_a_failing_rank_ends_the_run_with_its_error(tmp_path, name):
    args = BENCH if name == "benchmark" else SMALL
    result = torchrun("--no-python", tool(name), "--distributed", *args, "--output", str(tmp_path / "r.json"),
                      fault="fail:1")
    assert result.returncode != 0, explain(result)
    output = result.stdout + result.stderr
    assert f"xllm-kernel-{name}: rank 1: error: XLLM_KERNEL_TEST_FAULT=fail:1: injected failure on rank 1" in output
    assert f"xllm-kernel-{name}: rank 0: error: rank 1 failed: XLLM_KERNEL_TEST_FAULT=fail:1" in output
    assert not (tmp_path / "r.json").exists()  # no aggregate from a failed run


def test_a_hanging_rank_times_out_instead_of_hanging(tmp_path):
    result = torchrun("--no-python", tool("numerics"), "--distributed", "--distributed-timeout", "3", *SMALL,
                      fault="hang:1")
    assert result.returncode != 0, explain(result)
    assert "rank 0: error: rank 0 timed out after 3 s waiting for gather 'reports' (not arrived: rank 1)" in \
        result.stderr, explain(result)


def test_ranks_with_different_case_lists_refuse_to_run():
    result = torchrun("--no-python", tool("numerics"), "--distributed", *SMALL, fault="mismatch:1")
    assert result.returncode != 0, explain(result)
    assert "every rank must run the same configuration: rank 1 has cases" in result.stderr, explain(result)


@pytest.mark.parametrize("name", ["numerics", "benchmark"])
def test_distributed_without_torchrun_is_a_usage_error(name):
    result = subprocess.run([tool(name), "--distributed", *SMALL], env=clean_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 2, explain(result)
    assert "--distributed runs under torchrun" in result.stderr and "not set here: RANK" in result.stderr
    one = clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="localhost", MASTER_PORT="29500")
    result = subprocess.run([tool(name), "--distributed", *SMALL], env=one, capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 2, explain(result)
    assert "--distributed needs at least 2 ranks, but WORLD_SIZE is 1" in result.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rank_zero_hosts_the_store_without_torchruns_agent(tmp_path):
    # A launcher that only sets the five variables: rank 0 hosts a TCPStore at MASTER_PORT.
    port = str(free_port())
    ranks = [
        subprocess.Popen([tool("numerics"), "--distributed", *SMALL, "--output", str(tmp_path / "n.json")],
                         env=clean_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=port),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    try:
        outputs = [p.communicate(timeout=TIMEOUT) for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    assert [p.returncode for p in ranks] == [0, 0], outputs
    assert outputs[1][0] == ""  # only rank 0 prints the aggregate
    assert load(tmp_path / "n.json")["summary"]["status"] == "passed"
    assert (tmp_path / "n.rank1.json").exists()


def test_python_module_under_torchrun(tmp_path):
    from xllm_kernel import _C

    if not hasattr(_C, "numerics_main"):
        pytest.skip("this build of xllm_kernel has no numerics tool (python -m xllm_kernel.numerics)")
    out = tmp_path / "n.json"
    result = torchrun("-m", "xllm_kernel.numerics", "--distributed", *SMALL, "--output", str(out))
    assert result.returncode == 0, explain(result)
    assert load(out)["summary"]["status"] == "passed"
    assert load(tmp_path / "n.rank1.json")["distributed"]["rank"] == 1
