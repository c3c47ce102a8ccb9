"""Kernels written in Python go into the one C++ registry: selected by priority like native ones,
reached through torch.ops.xllm_kernel.*, the public API and the prepared function alike. Each test
is a process of its own (registration must precede initialize)."""

from __future__ import annotations

from conftest import run_python


def test_higher_priority_python_kernels_are_selected_and_called_everywhere():
    run_python(
        """
        import torch, xllm_kernel
        from xllm_kernel import PlatformEnum, register_kernel
        from xllm_kernel.ops import fused_add_rms_norm, layer_norm, rms_norm
        from xllm_kernel.ops.normalization import (FUSED_ADD_RMS_NORM_CONTRACT, LAYER_NORM_CONTRACT,
                                                   RMS_NORM_CONTRACT)
        seen = []

        def doubled(input, weight, eps):
            seen.append(eps)
            return input * 2  # recognisable, not the real semantics

        registered = register_kernel(name="cpu.python.rms_norm", contract=RMS_NORM_CONTRACT,
                                     platform=PlatformEnum.CPU, input_domain="any", priority=50)(doubled)
        assert registered is doubled  # returned unchanged, no wrapper

        @register_kernel(name="cpu.python.fused_add_rms_norm", contract=FUSED_ADD_RMS_NORM_CONTRACT,
                         device="cpu", priority=50)
        def fused(input, residual, weight, eps):
            residual.add_(input)
            input.fill_(7)

        @register_kernel(name="cpu.python.layer_norm.bias_only", variant="bias_only", contract=LAYER_NORM_CONTRACT,
                         device="cpu", execution_modes=("eager", "aclgraph"), binding="python", priority=50)
        def bias_only(input, weight, bias, eps):
            return input.clone() if bias is None else input + bias

        # Lower priority than native: registered, never selected.
        @register_kernel(name="cpu.python.rms_norm.slow", variant="slow", contract=RMS_NORM_CONTRACT,
                         device="cpu", priority=1)
        def slow(input, weight, eps):
            raise AssertionError("not selected, never called")

        b = xllm_kernel.initialize("cpu")
        assert b["rms_norm"].spec.name == "cpu.python.rms_norm" and b["rms_norm"].spec.solution == "python"
        assert b["layer_norm"].spec.execution_modes == ("eager", "graph")
        ex = xllm_kernel.explain("cpu", "rms_norm")
        assert [c.name for c in ex.candidates] == [
            "cpu.python.rms_norm", "cpu.native.rms_norm", "cpu.torch.rms_norm", "cpu.python.rms_norm.slow"], ex
        assert ex.candidates[1].reason == "priority 20 < 50"

        x, w = torch.arange(6.0).reshape(2, 3), torch.ones(3)
        for call in (lambda: torch.ops.xllm_kernel.rms_norm(x, w, 1e-6), lambda: rms_norm(x, w, 1e-6),
                     lambda: b["rms_norm"].function(x, w, 1e-6)):
            assert torch.equal(call(), x * 2)
        assert seen == [1e-6] * 3

        input_, residual = x.clone(), torch.ones(2, 3)
        torch.ops.xllm_kernel.fused_add_rms_norm(input_, residual, w, 1e-6)
        assert torch.equal(residual, x + 1) and torch.equal(input_, torch.full((2, 3), 7.0))

        assert torch.equal(layer_norm(x, w, None, 1e-5), x)
        assert torch.equal(b["layer_norm"].function(x, w, torch.ones(3), 1e-5), x + 1)
        """
    )


def test_registration_errors():
    run_python(
        """
        import dataclasses, torch, xllm_kernel
        from xllm_kernel import register_kernel
        from xllm_kernel.ops.normalization import RMS_NORM_CONTRACT

        def expect(error, text, fn):
            try:
                fn()
            except error as e:
                assert text in str(e), e
            else:
                raise AssertionError(f"no {error.__name__}: {text}")

        def identity(input, weight, eps):
            return input

        # Names must agree with the fields; names are unique.
        expect(ValueError, "name must be 'cpu.python.rms_norm'", lambda: register_kernel(
            name="cpu.fast.rms_norm", contract=RMS_NORM_CONTRACT, device="cpu")(identity))
        expect(ValueError, "already registered", lambda: register_kernel(
            name="cpu.native.rms_norm", contract=RMS_NORM_CONTRACT, device="cpu", solution="native")(identity))
        expect(ValueError, "unknown operation 'rms_nrom'", lambda: register_kernel(
            name="cpu.python.rms_nrom", contract=dataclasses.replace(RMS_NORM_CONTRACT, operation="rms_nrom"),
            device="cpu")(identity))
        expect(TypeError, "exactly one of device= and platform=", lambda: register_kernel(
            name="cpu.python.rms_norm", contract=RMS_NORM_CONTRACT))
        expect(ValueError, "execution mode", lambda: register_kernel(
            name="cpu.python.rms_norm", contract=RMS_NORM_CONTRACT, device="cpu", execution_modes=("turbo",)))

        # A kernel that declares another contract version is registered, and excluded with its reason.
        register_kernel(name="cpu.python.rms_norm.v2", variant="v2", device="cpu", priority=99,
                        contract=dataclasses.replace(RMS_NORM_CONTRACT, version=2))(identity)

        # A kernel that returns the wrong type fails with an error naming it, at call time.
        @register_kernel(name="cpu.python.layer_norm", contract=xllm_kernel.registry.contract("layer_norm"),
                         device="cpu", priority=99)
        def wrong(input, weight, bias, eps):
            return 3

        # Python exceptions cross the C++ core with their type.
        @register_kernel(name="cpu.python.fused_add_rms_norm",
                         contract=xllm_kernel.registry.contract("fused_add_rms_norm"), device="cpu", priority=99)
        def raising(input, residual, weight, eps):
            raise KeyError("from the kernel")

        b = xllm_kernel.initialize("cpu")
        ex = xllm_kernel.explain("cpu", "rms_norm")
        v2 = next(c for c in ex.candidates if c.name == "cpu.python.rms_norm.v2")
        assert v2.verdict == "excluded" and "contract mismatch" in v2.reason, ex
        assert b["rms_norm"].spec.name == "cpu.native.rms_norm"

        x, w = torch.ones(2, 4), torch.ones(4)
        expect(RuntimeError, "cpu.python.layer_norm: the kernel returned int where the schema declares Tensor",
               lambda: torch.ops.xllm_kernel.layer_norm(x, w, None, 1e-5))
        expect(KeyError, "from the kernel", lambda: torch.ops.xllm_kernel.fused_add_rms_norm(x, x.clone(), w, 1e-6))
        expect(KeyError, "from the kernel", lambda: b["fused_add_rms_norm"].function(x, x.clone(), w, 1e-6))

        # After initialize the device's registry is frozen: the C++ error, nothing registered.
        before = len(xllm_kernel.kernels())
        expect(RuntimeError, "the registry is frozen for device cpu (initialize() already ran)",
               lambda: register_kernel(name="cpu.python.rms_norm.late", variant="late",
                                       contract=RMS_NORM_CONTRACT, device="cpu")(identity))
        assert len(xllm_kernel.kernels()) == before

        # Other devices are still open (freezing is per device).
        register_kernel(name="npu.torch.rms_norm", contract=RMS_NORM_CONTRACT, device="npu", solution="torch",
                        binding="torch_npu", execution_modes=("eager", "aclgraph"), priority=20)(identity)
        spec = next(s for s in xllm_kernel.kernels("npu") if s.name == "npu.torch.rms_norm")
        assert (spec.device, spec.execution_modes, spec.binding) == ("npu", ("eager", "graph"), "torch_npu")
        """
    )
