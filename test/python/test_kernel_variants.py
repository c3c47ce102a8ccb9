"""scripts/kernel_variants.py: which kernel variants the last CTest run ran and skipped, from its log."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import kernel_variants as kv  # noqa: E402


def _test(n, name, binary, body):
    return (f"{n}/9 Testing: {name}\n{n}/9 Test: {name}\n"
            f'Command: "/b/test/{binary}" "--gtest_filter={name}"\nDirectory: /b\nOutput:\n'
            f"----------------------------------------------------------\n[ RUN      ] {name}\n{body}"
            f"<end of output>\nTest time =   0.01 sec\n")


def _log():
    k = "xllm_kernel_cpu_kernels_test"
    return "".join([
        _test(1, "Cpu/CpuScaledMmClass.Int8/avx2", k, "[       OK ] Cpu/CpuScaledMmClass.Int8/avx2 (3 ms)\n"),
        _test(2, "Cpu/CpuScaledMmClass.Int8/amx", k,
              "x.cpp:9: Skipped\nCPU class amx: this CPU lacks amx_bf16 amx_int8 (it has: avx2_fma)\n"
              "[  SKIPPED ] Cpu/CpuScaledMmClass.Int8/amx (0 ms)\n[  SKIPPED ] 1 test, listed below:\n"
              "[  SKIPPED ] Cpu/CpuScaledMmClass.Int8/amx\n"),
        _test(3, "Cpu/CpuScaledMmClass.Nan/avx2", k, "[  FAILED  ] Cpu/CpuScaledMmClass.Nan/avx2 (1 ms)\n"),
        _test(4, "CpuAttentionKernel.Amx", k, "a.cpp:1: Skipped\nno AMX-BF16 on this CPU\n"
              "[  SKIPPED ] CpuAttentionKernel.Amx (0 ms)\n"),
        _test(5, "Cuda.Something", "xllm_kernel_cuda_test", "c.cpp:2: Skipped\nno GPU\n[  SKIPPED ] Cuda.Something (0 ms)\n"),
    ])


def test_parse_reads_status_and_reason_of_every_test():
    tests = {t["name"]: t for t in kv.parse(_log())}
    assert tests["Cpu/CpuScaledMmClass.Int8/avx2"]["status"] == "ran"
    amx = tests["Cpu/CpuScaledMmClass.Int8/amx"]
    assert amx["status"] == "skipped" and amx["binary"] == "xllm_kernel_cpu_kernels_test"
    assert amx["reason"] == "CPU class amx: this CPU lacks amx_bf16 amx_int8 (it has: avx2_fma)"
    assert tests["Cpu/CpuScaledMmClass.Nan/avx2"]["status"] == "failed"
    assert tests["Cuda.Something"]["reason"] == "no GPU"


def test_render_tables_the_classes_and_lists_the_other_skips():
    text, code = kv.render(kv.parse(_log()))
    assert code == 1  # a parametrized kernel test failed
    assert "| `Cpu/CpuScaledMmClass.Int8` | ran | skipped |" in text
    assert "| `Cpu/CpuScaledMmClass.Nan` | **FAILED** | — |" in text
    assert "`amx` (this CPU lacks amx_bf16 amx_int8)" in text
    assert "- `CpuAttentionKernel.Amx`: no AMX-BF16 on this CPU" in text
    assert "- 1 × no GPU" in text
    assert kv.render([])[1] == 2


def test_main_says_when_there_is_no_log(tmp_path, capsys):
    assert kv.main([str(tmp_path)]) == 2
    (tmp_path / "Testing" / "Temporary").mkdir(parents=True)
    (tmp_path / "Testing" / "Temporary" / "LastTest.log").write_text(_log())
    assert kv.main([str(tmp_path), "--output", str(tmp_path / "v.md")]) == 1
    assert capsys.readouterr().out == (tmp_path / "v.md").read_text()
