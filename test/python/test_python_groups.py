"""Operations, backend modules and groups declared in Python (the guide's section 3): they join the
one C++ catalog, registry and runtime, become torch.ops.xllm_kernel.<op> with their fake, and their
implementation modules are imported by initialize(), lazily. Each test is a process of its own
(the catalog only grows, and initialize() selects once)."""

from __future__ import annotations

import os
import pathlib

from conftest import python_env, run_python

EXTENSIONS = pathlib.Path(__file__).resolve().parent / "extensions"


def env(**extra: str) -> dict[str, str]:
    base = python_env()["PYTHONPATH"]
    return {"PYTHONPATH": os.pathsep.join([str(EXTENSIONS), base]), **extra}


def test_python_group_prepares_selects_and_dispatches_like_a_native_one():
    run_python(
        """
        import sys, torch, xllm_kernel
        from xllm_kernel import catalog

        # Discovery loads definitions only: no implementation module yet.
        catalog.load()
        assert "demo_group" in sys.modules and "demo_group.cpu_python" not in sys.modules
        group = catalog.group("demo_group")
        assert [c.operation for c in group.operations] == ["demo_scale", "demo_add_"]
        assert [m.name for m in group.modules] == ["demo_group.cpu_python", "demo_group.cpu_reference", "demo_group.cpu_fast"]
        assert all(m.language == "python" for m in group.modules)
        assert str(torch.ops.xllm_kernel.demo_add_.default._schema) == "xllm_kernel::demo_add_(Tensor(a0!) input, Tensor other) -> ()"

        bindings = xllm_kernel.initialize("cpu", operations=("demo_scale", "demo_add_"))
        # Preparation imported the modules of the requested operations, once.
        import demo_group, demo_group.cpu_python as impl
        assert impl.IMPORTS == ["demo_group.cpu_python"]
        assert "demo_group.cpu_fast" not in sys.modules
        plan = bindings["demo_scale"]
        assert plan.spec.name == "cpu.python.demo_scale" and plan.spec.solution == "python" and plan.spec.priority == 20
        assert demo_group.DEMO_SCALE.get_prepared() is plan
        assert bindings["demo_add_"].spec.name == "cpu.python.demo_add_"

        ex = xllm_kernel.explain("cpu", "demo_scale")
        verdicts = {c.name: (c.verdict, c.rejection, c.reason) for c in ex.candidates}
        assert verdicts["cpu.python.demo_scale"][0] == "selected"
        assert verdicts["cpu.reference.demo_scale"][0] == "lower priority"
        assert verdicts["cpu.fast.demo_scale"][:2] == ("excluded", "missing_dependency"), verdicts
        assert "python module demo_absent_dependency cannot be imported" in verdicts["cpu.fast.demo_scale"][2]

        x = torch.randn(4, 8)
        # The binding, the public API, torch.ops and torch.compile all reach the same kernel.
        assert torch.equal(plan.function(x, 3.0), x * 3.0)
        assert torch.equal(demo_group.demo_scale(x, 3.0), x * 3.0)
        assert torch.equal(torch.ops.xllm_kernel.demo_scale(x, 3.0), x * 3.0)
        compiled = torch.compile(lambda t: torch.ops.xllm_kernel.demo_scale(t, 2.0) + 1, backend="aot_eager",
                                 fullgraph=True)
        assert torch.equal(compiled(x), x * 2.0 + 1)
        torch.library.opcheck(torch.ops.xllm_kernel.demo_scale.default, (x, 2.0))
        a, b = torch.randn(3, 5), torch.randn(3, 5)
        expected = a + b
        demo_group.demo_add_(a, b)
        assert torch.equal(a, expected)
        bindings["demo_add_"].function(a, b)
        assert torch.equal(a, expected + b)
        torch.library.opcheck(torch.ops.xllm_kernel.demo_add_.default, (a.clone(), b))

        # The same rules as C++ operations: the registry is frozen for the device now.
        from xllm_kernel import register_kernel
        try:
            register_kernel(name="cpu.late.demo_scale", contract=demo_group.DEMO_SCALE_CONTRACT, device="cpu",
                            solution="late")(
                lambda input, alpha: input)
        except Exception as e:
            assert "frozen" in str(e), e
        else:
            raise AssertionError("registration after initialize() must fail")
        # The same configuration reuses the bindings; another one is refused.
        assert xllm_kernel.initialize("cpu", operations=("demo_add_", "demo_scale")) is bindings
        try:
            xllm_kernel.initialize("cpu", operations=("demo_scale",))
        except Exception as e:
            assert "different configuration" in str(e)
        else:
            raise AssertionError("another configuration must be refused")
        """,
        env=env(XLLM_KERNEL_EXTENSIONS="demo_group"),
    )


def test_overrides_and_the_environment_select_python_implementations():
    run_python(
        """
        import xllm_kernel
        b = xllm_kernel.initialize("cpu", operations=("demo_scale",), overrides={"demo_scale": "cpu.fast.demo_scale"})
        """,
        env=env(XLLM_KERNEL_EXTENSIONS="demo_group", XLLM_KERNEL_OVERRIDE_DEMO_SCALE="reference"),
    )
    result = run_python(
        """
        import torch, xllm_kernel
        b = xllm_kernel.initialize("cpu", operations=("demo_scale",), overrides={"demo_scale": "python"})
        print(b["demo_scale"].spec.name)
        ex = xllm_kernel.explain("cpu", "demo_scale")
        print(ex.override_source)
        """,
        env=env(XLLM_KERNEL_EXTENSIONS="demo_group", XLLM_KERNEL_OVERRIDE_DEMO_SCALE="reference"),
    )
    assert result.stdout.split() == ["cpu.reference.demo_scale", "environment", "XLLM_KERNEL_OVERRIDE_DEMO_SCALE"]
    failed = run_python(
        """
        import xllm_kernel
        xllm_kernel.initialize("cpu", operations=("demo_scale",), overrides={"demo_scale": "cpu.fast.demo_scale"})
        """,
        env=env(XLLM_KERNEL_EXTENSIONS="demo_group"),
        check=False,
    )
    assert failed.returncode != 0
    assert "names an excluded implementation: missing dependency: python module demo_absent_dependency" in failed.stderr


def test_an_error_importing_an_installed_module_propagates_and_nothing_is_published():
    result = run_python(
        """
        import xllm_kernel
        try:
            xllm_kernel.initialize("cpu", operations=("demo_broken", "demo_scale"))
        except RuntimeError as e:
            print("ERROR", e)
        assert xllm_kernel.bindings("cpu") is None
        """,
        env=env(XLLM_KERNEL_EXTENSIONS="demo_group,demo_broken"),
    )
    assert "ERROR" in result.stdout
    assert "module demo_broken.cpu_python" in result.stdout
    assert "a bug in an installed implementation module" in result.stdout


def test_entry_points_name_extensions(tmp_path):
    dist = tmp_path / "demo_extension-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-extension\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[xllm_kernel.extensions]\ndemo = demo_group\n")
    result = run_python(
        """
        import xllm_kernel, torch
        from xllm_kernel import _extensions
        assert _extensions.extension_modules() == ("demo_group",), _extensions.extension_modules()
        b = xllm_kernel.initialize("cpu", operations=("demo_scale",))
        print(b["demo_scale"].spec.name)
        """,
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), env()["PYTHONPATH"]])},
    )
    assert result.stdout.split() == ["cpu.python.demo_scale"]


def test_a_missing_extension_module_is_an_error_naming_where_it_came_from():
    result = run_python(
        "import xllm_kernel; xllm_kernel.initialize('cpu')",
        env=env(XLLM_KERNEL_EXTENSIONS="demo_group, demo_not_there"),
        check=False,
    )
    assert result.returncode != 0
    assert "extension module 'demo_not_there'" in result.stderr and "XLLM_KERNEL_EXTENSIONS" in result.stderr


def test_declarations_are_checked_when_they_join():
    run_python(
        """
        import types, torch, xllm_kernel
        from xllm_kernel import catalog
        from xllm_kernel.registry import OpContract, Operation

        def join(name, operations, modules=()):
            module = types.ModuleType(name)
            module.OPERATIONS, module.MODULES = operations, modules
            import sys
            sys.modules[name] = module
            return catalog.load_module(name)

        def expect(fragment, fn):
            try:
                fn()
            except (ValueError, TypeError) as e:
                assert fragment in str(e), (fragment, str(e))
            else:
                raise AssertionError("expected an error containing " + fragment)

        fake = lambda input: torch.empty_like(input)
        expect("mutates [] disagrees with the schema, which writes [input]", lambda: join("bad_mutates", (
            Operation(OpContract("bad_mutates", 1, "bad_mutates(Tensor(a!) input) -> ()")),)))
        expect("the schema must be named 'bad_name'", lambda: join("bad_name", (
            Operation(OpContract("bad_name", 1, "other(Tensor input) -> Tensor"), fake=fake),)))
        expect("does not parse", lambda: join("bad_schema", (
            Operation(OpContract("bad_schema", 1, "bad_schema(Tensr input) -> Tensor"), fake=fake),)))
        expect("declares no fake", lambda: join("no_fake", (
            Operation(OpContract("no_fake", 1, "no_fake(Tensor input) -> Tensor")),)))
        expect("the catalog has version 1", lambda: join("redeclared", (
            Operation(OpContract("rms_norm", 2, "rms_norm(Tensor input, Tensor weight, float eps) -> Tensor"), fake=fake),)))
        expect("must be lower_snake_case", lambda: join("bad_case", (
            Operation(OpContract("BadCase", 1, "BadCase(Tensor input) -> Tensor"), fake=fake),)))
        expect("OPERATIONS must be a tuple of Operation objects", lambda: join("not_ops", ("rms_norm",)))
        expect("the catalog already has a group of that name", lambda: xllm_kernel._C.add_group("activation", [], []))
        expect("the catalog already has a backend module 'activation.native_cpu'", lambda: xllm_kernel._C.add_group(
            "dup_module", [], [{"name": "activation.native_cpu", "device": "cpu", "solution": "x", "binding": "x",
                                "execution_modes": ["eager"], "implementations": [], "probe": None}]))
        expect("rms_norm already exists", lambda: __import__("xllm_kernel.custom_ops").custom_ops.register_custom_op(
            "rms_norm", lambda input: input, mutates_args=(), dispatch_key="CPU", schema="(Tensor input) -> Tensor"))
        # A failed join leaves nothing behind: the operation can be declared correctly afterwards.
        assert join("fine", (Operation(OpContract("bad_mutates", 1, "bad_mutates(Tensor(a!) input) -> ()",
                                                  mutates=("input",))),)) == "fine"
        assert catalog.load_module("fine") == "fine"  # idempotent
        assert xllm_kernel.registry.contract("bad_mutates").mutates == ("input",)
        """,
        env=env(),
    )


FRONT_DOOR = """
import sys, xllm_kernel
import xllm_kernel.ops.normalization as family
family.__path__.append({folder!r})  # a front door of the C++ module normalization.torch_cpu, found there
try:
    xllm_kernel.initialize("cpu", operations=("rms_norm",))
    print("INITIALIZED", xllm_kernel.bindings("cpu")["rms_norm"].spec.name)
    # Recorded as the module's missing dependency (explain() shows it where the module's own probe
    # fails, as normalization.torch_npu's does without torch_npu), and not left half-imported.
    print("IMPORTED", "xllm_kernel.ops.normalization.torch_cpu" in sys.modules)
except ImportError as e:
    print("RAISED", type(e).__name__, e)
"""


def front_door(tmp_path, body: str, **extra_files: str) -> str:
    folder = tmp_path / "front_door"
    folder.mkdir()
    (folder / "torch_cpu.py").write_text(body)
    deps = tmp_path / "deps"
    deps.mkdir()
    for name, text in extra_files.items():
        (deps / f"{name}.py").write_text(text)
    result = run_python(FRONT_DOOR.format(folder=str(folder)),
                        env={"PYTHONPATH": os.pathsep.join([str(deps), env()["PYTHONPATH"]])})
    return result.stdout


def test_a_front_door_whose_dependency_is_missing_excludes_its_module(tmp_path):
    out = front_door(tmp_path, "import a_dependency_that_is_not_installed\n")
    assert "INITIALIZED cpu.native.rms_norm" in out and "IMPORTED False" in out, out
    assert "RAISED" not in out


def test_a_front_door_whose_dependency_fails_inside_excludes_its_module(tmp_path):
    # As torch_npu without the CANN runtime: the dependency is there, and its own import raises.
    out = front_door(tmp_path, "import vendor_runtime\n",
                     vendor_runtime="raise ImportError('libvendor.so: cannot open shared object file')\n")
    assert "INITIALIZED cpu.native.rms_norm" in out and "IMPORTED False" in out, out
    assert "RAISED" not in out


def test_an_import_error_of_the_package_own_code_propagates(tmp_path):
    # A typo in the front door (a name xllm_kernel does not have) is a broken installation, not a
    # missing dependency: initialize() raises it instead of quietly excluding the module.
    out = front_door(tmp_path, "from xllm_kernel.ops.normalization import RMS_NORM_CONTRACTT\n")
    assert "RAISED ImportError cannot import name 'RMS_NORM_CONTRACTT'" in out, out
    assert "INITIALIZED" not in out
    (tmp_path / "raised").mkdir()
    out = front_door(tmp_path / "raised", "raise ImportError('the front door itself')\n")
    assert "RAISED ImportError the front door itself" in out, out


def test_an_extension_module_that_declares_nothing_is_an_error(tmp_path):
    (tmp_path / "declares_nothing.py").write_text("VALUE = 1\n")
    (tmp_path / "suite_only.py").write_text("SUITE = object()\n")
    result = run_python(
        "import xllm_kernel; xllm_kernel.initialize('cpu', operations=('rms_norm',))",
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), env()["PYTHONPATH"]]),
             "XLLM_KERNEL_EXTENSIONS": "suite_only,declares_nothing"},
        check=False,
    )
    assert result.returncode != 0
    assert "extension module 'declares_nothing'" in result.stderr, result.stderr
    assert "exports neither OPERATIONS (an operator group) nor SUITE (a numerics suite)" in result.stderr
    assert "suite_only" not in result.stderr  # a suite alone is a valid extension of the numerics catalog
