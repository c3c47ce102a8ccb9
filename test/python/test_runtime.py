"""Selection configurations that need a process of their own: overrides (the environment beats
the argument), bad overrides, calls before initialize."""

from __future__ import annotations

from conftest import run_python


def test_environment_override_beats_the_argument():
    run_python(
        """
        import torch, xllm_kernel
        from xllm_kernel.ops import rms_norm
        b = xllm_kernel.initialize(device="cpu", operations=("rms_norm",), overrides={"rms_norm": "native"})
        assert b["rms_norm"].spec.name == "cpu.torch.rms_norm", b
        ex = xllm_kernel.explain("cpu", "rms_norm")
        assert (ex.override_target, ex.override_source) == ("torch", "environment XLLM_KERNEL_OVERRIDE_RMS_NORM"), ex
        assert ex.candidates[1].verdict == "overridden", ex
        x, w = torch.randn(2, 8), torch.rand(8)
        torch.testing.assert_close(rms_norm(x, w, 1e-6), b["rms_norm"].function(x, w, 1e-6))
        """,
        env={"XLLM_KERNEL_OVERRIDE_RMS_NORM": "torch"},
    )


def test_override_argument_by_implementation_name():
    run_python(
        """
        import xllm_kernel
        b = xllm_kernel.initialize("cpu", overrides={"layer_norm": "cpu.torch.layer_norm"})
        assert b["layer_norm"].spec.name == "cpu.torch.layer_norm"
        assert b["rms_norm"].spec.name == "cpu.native.rms_norm"
        assert xllm_kernel.explain("cpu", "layer_norm").override_source == "argument"
        """
    )


def test_unknown_override_fails_with_the_closest_names_and_publishes_nothing():
    run_python(
        """
        import torch, xllm_kernel
        from xllm_kernel.ops import rms_norm
        try:
            xllm_kernel.initialize("cpu", overrides={"rms_norm": "natve"})
        except RuntimeError as e:
            assert "neither an implementation nor a solution" in str(e) and "closest: native" in str(e), e
        else:
            raise AssertionError("no error")
        assert xllm_kernel.bindings("cpu") is None
        try:
            rms_norm(torch.ones(1, 4), torch.ones(4), 1e-6)
        except RuntimeError as e:
            assert "device cpu is not initialized" in str(e), e
        else:
            raise AssertionError("published after a failed initialize")
        """
    )


def test_calls_before_initialize_fail_saying_so():
    run_python(
        """
        import torch
        from xllm_kernel.ops import layer_norm
        from xllm_kernel.ops.normalization import LAYER_NORM
        for call in (lambda: layer_norm(torch.ones(1, 4), torch.ones(4), None, 1e-5),
                     lambda: LAYER_NORM.get_prepared("cpu")):
            try:
                call()
            except RuntimeError as e:
                assert "layer_norm: device cpu is not initialized" in str(e), e
            else:
                raise AssertionError("no error")
        """
    )


def test_batch_invariant_initialize_binds_only_implementations_that_declare_it():
    run_python(
        """
        import os
        import pytest
        import xllm_kernel
        from xllm_kernel import runtime

        b = xllm_kernel.initialize("cpu", batch_invariant=True)
        assert b["paged_attention"].spec.name == "cpu.native.paged_attention.batch_invariant"
        assert len(b) == len(xllm_kernel.catalog.operations()) and all(b[op].spec.batch_invariant for op in b)
        ex = runtime.explain("cpu", "paged_attention")
        assert ex.batch_invariant and ex.selected.batch_invariant
        default = next(c for c in ex.candidates if c.name == "cpu.native.paged_attention")
        assert default.rejection == "not_batch_invariant" and "not batch-invariant" in default.reason
        assert "batch-invariant" in str(ex)
        # Another setting in the same process is another configuration.
        with pytest.raises(RuntimeError, match="batch_invariant true then false"):
            xllm_kernel.initialize("cpu")
        """
    )


def test_batch_invariant_from_the_environment_and_its_bad_value():
    run_python(
        """
        import xllm_kernel
        b = xllm_kernel.initialize("cpu", operations=["paged_attention"])
        assert b["paged_attention"].spec.name == "cpu.native.paged_attention.batch_invariant"
        """,
        env={"XLLM_KERNEL_BATCH_INVARIANT": "1"},
    )
    r = run_python(
        """
        import xllm_kernel
        xllm_kernel.initialize("cpu", operations=["rms_norm"])
        """,
        env={"XLLM_KERNEL_BATCH_INVARIANT": "sometimes"},
        check=False,
    )
    assert r.returncode != 0
    assert "XLLM_KERNEL_BATCH_INVARIANT must be 1, true, yes, on, 0, false, no or off, got 'sometimes'" in r.stderr
