"""The well-formedness rules of the two IR levels a kernel passes through, checked between passes.

- a **kernel AST** (what the scheduler hands codegen): a SINK of STOREs, each STORE(DEFINE_GLOBAL, VIEW, value)
  writing a value of the buffer's dtype; loads are LOAD(DEFINE_GLOBAL, VIEW); no tensor-level ops (movement,
  BUFFER, COPY, CONTIGUOUS, ASSIGN) are left; ALU sources have the dtypes their op needs.
- a **linear program** (what the renderer prints): every source comes before its user, RANGE/ENDRANGE and IF/ENDIF
  nest and close, a RANGE is used only inside its loop, loads and stores go through INDEX of a pointer of their
  element type, vectors are built and taken apart with matching widths, and the same ALU dtype rules.

`SPEC=1` runs both in codegen on every kernel it builds (the test suite runs with it); a broken rule raises
SpecError naming the pass that produced the IR, the offending node, and the rule.
"""

from __future__ import annotations

from lazygrad.dtype import DType, PtrDType, dtypes
from lazygrad.uop.ops import GroupOp, Ops, UOp


class SpecError(RuntimeError):
    """IR that breaks a rule of its level: a bug in the pass named in the message, not in the user's program."""


def _fail(where: str, u: UOp, why: str, at: int | None = None) -> SpecError:
    pos = f" (uop {at})" if at is not None else ""
    return SpecError(f"after {where}: {u.op.name} {u.dtype}{pos} with arg {u.arg!r}: {why}")


SHIFTS = frozenset({Ops.SHL, Ops.SHR})
_TENSOR_LEVEL = GroupOp.Movement | {Ops.BUFFER, Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN, Ops.DETACH, Ops.DEVICE}


def _alu_problem(u: UOp) -> str | None:
    """Why an ALU/CAST node's dtypes are inconsistent with its op, or None."""
    srcs = [s.dtype for s in u.src]
    if u.op in GroupOp.Comparison:
        if srcs[0] != srcs[1]:
            return f"compares {srcs[0]} with {srcs[1]}"
        if u.dtype.scalar != dtypes.bool or u.dtype.count != srcs[0].count:
            return f"a comparison of {srcs[0]} must give bool of the same width"
        return None
    if u.op is Ops.WHERE:
        if srcs[0].scalar != dtypes.bool:
            return f"condition is {srcs[0]}, not bool"
        if srcs[1] != u.dtype or srcs[2] != u.dtype:
            return f"branches {srcs[1]} and {srcs[2]} differ from the result"
        return None
    if u.op in SHIFTS:
        if srcs[0] != u.dtype or not dtypes.is_int(srcs[1]):
            return f"shifts {srcs[0]} by {srcs[1]}"
        return None
    if u.op in (Ops.CAST, Ops.BITCAST):
        if srcs[0].count != u.dtype.count:
            return f"{u.op.name.lower()}s a {srcs[0].count}-wide value to a {u.dtype.count}-wide one"
        if u.op is Ops.BITCAST and srcs[0].scalar.itemsize != u.dtype.scalar.itemsize:
            return f"bitcasts {srcs[0]} to {u.dtype}: sizes differ"
        return None
    if u.op is Ops.POW and len(srcs) == 2:
        return None if srcs[0] == u.dtype else f"raises {srcs[0]} to give {u.dtype}"
    bad = [d for d in srcs if d != u.dtype]
    return f"sources {srcs} differ from the result" if bad else None


def _check_alu(where: str, u: UOp, at: int | None = None) -> None:
    if u.op in GroupOp.Elementwise and (why := _alu_problem(u)) is not None:
        raise _fail(where, u, why, at)


def verify_kernel(ast: UOp, where: str = "schedule") -> None:
    """The rules of a kernel AST (the scheduler's output, codegen's input)."""
    if ast.op is Ops.COPY:
        return
    if ast.op is not Ops.SINK or not ast.src:
        raise _fail(where, ast, "a kernel is a SINK of STOREs")
    for st in ast.src:
        if st.op is not Ops.STORE or len(st.src) != 3:
            raise _fail(where, st, "a kernel's outputs are STORE(DEFINE_GLOBAL, VIEW, value)")
        g, view, value = st.src
        if g.op is not Ops.DEFINE_GLOBAL or not isinstance(g.dtype, PtrDType) or view.op is not Ops.VIEW:
            raise _fail(where, st, "a STORE writes through a DEFINE_GLOBAL pointer and a VIEW")
        if value.dtype.scalar != g.dtype.base.scalar:
            raise _fail(where, st, f"stores {value.dtype} into a {g.dtype.base} buffer")
    for u in ast.toposort:
        if u.op in _TENSOR_LEVEL:
            raise _fail(where, u, "a tensor-level op left in a kernel")
        if u.op is Ops.LOAD and (u.src[0].op is not Ops.DEFINE_GLOBAL or u.src[0].dtype.base.scalar != u.dtype.scalar):  # type: ignore[attr-defined]
            raise _fail(where, u, "a LOAD reads a DEFINE_GLOBAL of its own element type")
        _check_alu(where, u)


def _pointee(d: DType) -> DType:
    return d.base if isinstance(d, PtrDType) else d


def verify_program(uops: list[UOp], where: str = "linearize") -> None:
    """The rules of a linear program (the linearizer's output, the renderer's input)."""
    seen: dict[UOp, int] = {}
    open_blocks: list[UOp] = []  # RANGE and IF nodes whose END has not come yet
    closed: set[UOp] = set()
    for i, u in enumerate(uops):
        for s in u.src:
            if s not in seen:
                raise _fail(where, u, f"source {s.op.name} {s.dtype} comes after its user", i)
            if s.op is Ops.RANGE and s in closed and u.op is not Ops.AFTER:
                raise _fail(where, u, f"uses loop variable {s.arg} after its loop ended", i)
        op = u.op
        if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL) and not isinstance(u.dtype, PtrDType):
            raise _fail(where, u, "a buffer definition has a pointer dtype", i)
        elif op is Ops.RANGE:
            if not u.src or not dtypes.is_int(u.src[0].dtype) or not dtypes.is_int(u.dtype):
                raise _fail(where, u, "a RANGE counts over an integer extent", i)
            open_blocks.append(u)
        elif op in (Ops.ENDRANGE, Ops.ENDIF):
            opener = Ops.RANGE if op is Ops.ENDRANGE else Ops.IF
            if not u.src or u.src[0].op is not opener:
                raise _fail(where, u, f"an {op.name} closes a {opener.name}", i)
            if not open_blocks or open_blocks[-1] is not u.src[0]:
                inner = open_blocks[-1].op.name if open_blocks else "nothing"
                raise _fail(where, u, f"closes {u.src[0].op.name} {u.src[0].arg} while {inner} is innermost", i)
            closed.add(open_blocks.pop())
        elif op is Ops.IF:
            if u.src[0].dtype.scalar != dtypes.bool:
                raise _fail(where, u, "an IF tests a bool", i)
            open_blocks.append(u)
        elif op is Ops.INDEX:
            if not isinstance(u.src[0].dtype, PtrDType) or not dtypes.is_int(u.src[1].dtype):
                raise _fail(where, u, "an INDEX offsets a pointer by an integer", i)
        elif op in (Ops.LOAD, Ops.STORE):
            ptr = u.src[0]
            if not isinstance(ptr.dtype, PtrDType):
                raise _fail(where, u, f"{op.name.lower()}s through {ptr.op.name} {ptr.dtype}, not a pointer", i)
            elem = u.dtype if op is Ops.LOAD else u.src[1].dtype
            if elem.scalar != _pointee(ptr.dtype).scalar:
                raise _fail(where, u, f"{op.name.lower()}s {elem} through a {ptr.dtype} pointer", i)
        elif op is Ops.VECTORIZE:
            if len(u.src) != u.dtype.count or any(s.dtype != u.dtype.scalar for s in u.src):
                raise _fail(where, u, f"builds {u.dtype} from {[str(s.dtype) for s in u.src]}", i)
        elif op is Ops.GEP:
            idx = u.arg if isinstance(u.arg, tuple) else (u.arg,)
            if u.src[0].dtype.scalar != u.dtype.scalar or any(not 0 <= j < u.src[0].dtype.count for j in idx):
                raise _fail(where, u, f"takes lanes {idx} of {u.src[0].dtype}", i)
        elif op is Ops.CONST and u.dtype.count == 1:
            kind = bool if u.dtype == dtypes.bool else int if dtypes.is_int(u.dtype) else float
            if not isinstance(u.arg, kind) or (kind is int and isinstance(u.arg, bool)):
                raise _fail(where, u, f"a {u.dtype} constant holds a {type(u.arg).__name__}", i)
        else:
            _check_alu(where, u, i)
        seen[u] = i
    if open_blocks:
        raise _fail(where, open_blocks[-1], "never closed")
