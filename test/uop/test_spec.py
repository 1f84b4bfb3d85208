"""The IR verifier (uop/spec.py) accepts what the passes produce and rejects each kind of malformed IR."""

from __future__ import annotations

import pytest

import lazygrad.codegen as codegen
from lazygrad import Tensor, dtypes
from lazygrad.device import Device
from lazygrad.helpers import Context
from lazygrad.uop.ops import Ops, UOp
from lazygrad.uop.spec import SpecError, verify_kernel, verify_program
from lazygrad.uop.view import ShapeTracker

F32, I32 = dtypes.float32, dtypes.int32


def c(v, dt=I32) -> UOp:
    return UOp(Ops.CONST, dt, arg=v)


def glob(i: int = 0, dt=F32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(16), arg=i)


def loop() -> tuple[list[UOp], UOp, UOp, UOp]:
    """A well-formed program: out[i] = in[i] + 1 for i < 16."""
    out, inp, n = glob(0), glob(1), c(16)
    rng = UOp(Ops.RANGE, I32, (n,), (0, "g"))
    val = UOp(Ops.ADD, F32, (UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, inp.dtype, (inp, rng)),)), c(1.0, F32)))
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, rng)), val))
    end = UOp(Ops.ENDRANGE, dtypes.void, (rng, st))
    return [out, inp, n, c(1.0, F32), rng, *val.src[0].src[0:1], val.src[0], val, st.src[0], st, end], rng, val, st


def test_good_program_passes() -> None:
    verify_program(loop()[0])


def test_source_after_user() -> None:
    uops = loop()[0]
    uops[0], uops[-2] = uops[-2], uops[0]
    with pytest.raises(SpecError, match="comes after its user"):
        verify_program(uops, "my pass")


def test_unclosed_and_misnested_ranges() -> None:
    uops, rng, _, st = loop()
    with pytest.raises(SpecError, match="never closed"):
        verify_program(uops[:-1])
    inner = UOp(Ops.RANGE, I32, (c(4),), (1, "r"))
    bad = [*uops[:-1], c(4), inner, UOp(Ops.ENDRANGE, dtypes.void, (rng, st)), UOp(Ops.ENDRANGE, dtypes.void, (inner,))]
    with pytest.raises(SpecError, match="innermost"):
        verify_program(bad)


def test_loop_variable_used_after_its_loop() -> None:
    uops, rng, _, _ = loop()
    with pytest.raises(SpecError, match="after its loop ended"):
        verify_program([*uops, UOp(Ops.ADD, I32, (rng, c(16)))])


@pytest.mark.parametrize(
    "node, why",
    [
        (UOp(Ops.ADD, F32, (c(1.0, F32), c(1))), "differ from the result"),
        (UOp(Ops.CMPLT, F32, (c(1), c(2))), "must give bool"),
        (UOp(Ops.CMPLT, dtypes.bool, (c(1), c(2.0, F32))), "compares"),
        (UOp(Ops.WHERE, F32, (c(1), c(1.0, F32), c(2.0, F32))), "condition"),
        (UOp(Ops.BITCAST, dtypes.int16, (c(1.0, F32),)), "sizes differ"),
        (UOp(Ops.VECTORIZE, F32.vec(4), (c(1.0, F32),) * 3), "builds"),
        (UOp(Ops.GEP, F32, (UOp(Ops.VECTORIZE, F32.vec(2), (c(1.0, F32),) * 2),), 2), "lanes"),
        (c(1.5, I32), "constant holds a float"),
        (UOp(Ops.LOAD, I32, (UOp(Ops.INDEX, F32.ptr(16), (glob(), c(0))),)), "through a"),
        (UOp(Ops.INDEX, F32.ptr(16), (glob(), c(0.0, F32))), "offsets a pointer by an integer"),
    ],
)
def test_malformed_nodes(node: UOp, why: str) -> None:
    prog = [u for u in node.toposort]
    with pytest.raises(SpecError, match=why):
        verify_program(prog, "test")


def test_kernel_ast_rules() -> None:
    st = UOp(Ops.VIEW, arg=ShapeTracker.from_shape((16,)))
    load = UOp(Ops.LOAD, F32, (glob(1), st))
    good = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (glob(0), st, load)),))
    verify_kernel(good)
    wrong_dtype = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (glob(0, I32), st, load)),))
    with pytest.raises(SpecError, match="stores dtypes.float32 into"):
        verify_kernel(wrong_dtype)
    leftover = UOp(Ops.RESHAPE, F32, (load,), (4, 4))
    with pytest.raises(SpecError, match="tensor-level op"):
        verify_kernel(UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (glob(0), st, leftover)),)))
    with pytest.raises(SpecError, match="SINK of STOREs"):
        verify_kernel(load)


def test_real_kernels_pass_and_a_broken_pass_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    a = Tensor.rand(9, 5)
    (si,) = [s for s in ((a @ a.T).relu().sum(1) + 0.75).schedule() if s.ast.op is Ops.SINK][-1:]
    renderer = Device["CPU"].renderer
    with Context(SPEC=1):
        verify_kernel(si.ast)
        codegen._build_program(si.ast, renderer, None)  # every pass's output is well formed
        real = codegen.linearize
        monkeypatch.setattr(codegen, "linearize", lambda sink: list(reversed(real(sink))))  # a broken linearizer
        with pytest.raises(SpecError, match="after linearize: "):
            codegen._build_program(si.ast, renderer, None)
