"""The pass registry (uop/passes.py): declared order is checked, the verifier names the pass, PROFILE sees each pass."""

from __future__ import annotations

import pytest

import lazygrad.codegen as codegen
from lazygrad import Tensor, dtypes
from lazygrad.device import Device
from lazygrad.helpers import Context
from lazygrad.uop.ops import Ops, UOp
from lazygrad.uop.passes import PASSES, Pass, PassOrderError, PassRun, register
from lazygrad.uop.spec import SpecError, verify_program
from lazygrad.viz import profile


@pytest.fixture
def scratch_registry():
    """Passes registered by a test are dropped after it."""
    before = dict(PASSES)
    yield
    PASSES.clear()
    PASSES.update(before)


def _kernel_ast() -> UOp:
    (si,) = [s for s in (Tensor.rand(8, 4).realize() + 1).schedule() if s.ast.op is Ops.SINK]
    return si.ast


def test_codegen_passes_are_registered_in_order() -> None:
    assert PASSES["lower"].after == ("optimize",)
    assert PASSES["linearize"].after == ("lower",)
    assert PASSES["render"].after == ("linearize",)


def test_a_pass_run_before_its_predecessor_raises() -> None:
    ast = _kernel_ast()
    with pytest.raises(PassOrderError, match="'linearize' needs lower to run first \\(ran: nothing\\)"):
        PassRun()(codegen.LINEARIZE, ast)
    run = PassRun()
    k = run(codegen.OPTIMIZE, codegen.Kernel(ast, Device["CPU"].renderer), codegen.Build(ast, Device["CPU"].renderer))
    with pytest.raises(PassOrderError, match="'render' needs linearize to run first \\(ran: optimize\\)"):
        run(codegen.RENDER, [], (Device["CPU"].renderer, k.function_name))


def test_schedule_passes_must_run_in_order() -> None:
    import lazygrad.schedule.kernelize  # noqa: F401 -- registers the scheduler's passes

    assert [PASSES[n].after for n in ("cap kernel depth", "fit buffer limits", "build kernels")] == [
        ("store decisions",),
        ("cap kernel depth",),
        ("allocate buffers",),
    ]
    with pytest.raises(PassOrderError, match="'build kernels' needs allocate buffers to run first"):
        PassRun()(PASSES["build kernels"], None)


def test_registration_checks_names(scratch_registry) -> None:
    with pytest.raises(ValueError, match="not registered"):
        register(Pass("needs a typo", lambda x, ctx: x, after=("lowr",)))
    register(Pass("first", lambda x, ctx: x))
    with pytest.raises(ValueError, match="registered twice"):
        register(Pass("first", lambda x, ctx: x))


def test_verifier_names_the_pass_and_node(scratch_registry) -> None:
    one = UOp(Ops.CONST, dtypes.int32, arg=1)
    # a pass whose output breaks a rule of its IR: the error names the pass and the node
    breaks = register(
        Pass("bad cast", lambda x, ctx: [one, UOp(Ops.ADD, dtypes.float32, (one, one))], verify=verify_program)
    )
    with Context(SPEC=1), pytest.raises(SpecError, match="after bad cast: ADD dtypes.float32 \\(uop 1\\)"):
        PassRun()(breaks, None)
    with Context(SPEC=0):
        PassRun()(breaks, None)  # the verifier runs only with SPEC


def test_each_codegen_pass_is_a_profile_span() -> None:
    ast = _kernel_ast()
    with Context(PROFILE=1):
        profile.clear()
        codegen._build_program(ast, Device["CPU"].renderer, None)
        names = [e["name"] for e in profile.events() if e.get("cat") == "codegen"]
    assert names[:4] == ["optimize", "lower", "linearize", "render"], names


def test_rules_testing_the_op_alone_are_called_directly_with_the_same_results() -> None:
    from lazygrad.uop.ops import PatternMatcher, UPat

    seen = []
    pm = PatternMatcher(
        [
            (UPat(Ops.CONST, name="x"), lambda ctx, x: seen.append(("ctx, x", ctx, x)) or None),
            (UPat(Ops.CONST, name="x"), lambda x: seen.append(("x", x)) or None),
            (UPat(Ops.CONST), lambda ctx: seen.append(("ctx", ctx)) or None),
            (UPat(Ops.CONST, arg=7, name="x"), lambda x, ctx: seen.append(("matched", x)) or None),  # keywords
            (UPat(Ops.CONST), lambda: "last"),
        ]
    )
    seven = UOp.const(dtypes.int32, 7)
    assert pm.translate(seven, "c") == "last"
    assert seen[:4] == [("ctx, x", "c", seven), ("x", seven), ("ctx", "c"), ("matched", seven)]
