"""Every ALU op on every dtype, on special values (0, -0.0, +-1, min, max, +-inf, NaN, shifts past the width...):
constant folding, each device (CPU, CL, PYTHON) and torch must give the same result (uop/alu.py states the rules).

One test per (op, dtype): the op runs once over every pair (triple) of the dtype's special values, inputs realized in
buffers so no device folds them. Exact ops must agree bit for bit (NaN with NaN, -0.0 with -0.0); transcendental
ones (EXP2, LOG2, SIN, POW on floats) to two units in the last place, since each libm rounds its own way.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from lazygrad import Tensor, dtypes
from lazygrad.dtype import FLOATS, INTS, DType, truncate_float
from lazygrad.uop.alu import exec_alu
from lazygrad.uop.ops import Ops, UOp
from test.helpers import device_available

DEVICES = [d for d in ("CPU", "CL", "PYTHON") if device_available(d)]

FLOAT_OPS = [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC]
FLOAT_OPS += [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MOD, Ops.MAX, Ops.POW, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
FLOAT_OPS += [Ops.WHERE, Ops.MULACC]
INT_OPS = [Ops.NEG, Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
INT_OPS += [Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW, Ops.WHERE, Ops.MULACC]
BOOL_OPS = [Ops.NEG, Ops.ADD, Ops.MUL, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE]
TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
UNARY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC})
FLOAT_MAX = {dtypes.float16: 65504.0, dtypes.bfloat16: 3.3895313892515355e38, dtypes.float32: 3.4028234663852886e38}

CASES = [(op, dt) for dt in sorted(FLOATS) for op in FLOAT_OPS]
CASES += [(op, dt) for dt in sorted(INTS) for op in INT_OPS] + [(op, dtypes.bool) for op in BOOL_OPS]


def special_values(dt: DType) -> list:
    if dt == dtypes.bool:
        return [False, True]
    if dtypes.is_float(dt):
        big = FLOAT_MAX.get(dt, 1.7976931348623157e308)
        vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.75, 1024.0, -1024.0, 1e-3, big, -big, math.inf, -math.inf]
        return [truncate_float(v, dt) for v in vals] + [math.nan]
    lo, hi, bits = dtypes.min(dt), dtypes.max(dt), 8 * dt.itemsize
    vals = [0, 1, -1, 2, 3, -7, 100, lo, hi, lo + 1, hi - 1, bits - 1, bits, bits + 1, 33, 40, 64, -64]
    return sorted({exec_alu(Ops.ADD, dt, [v, 0]) for v in vals})  # wrapped to dt


def operands(op: Ops, dt: DType) -> list[list]:
    """Lists of operand values, one entry per element: every combination of the special values."""
    vals = special_values(dt)
    if op in UNARY:
        return [vals]
    if op is Ops.WHERE:
        combos = list(itertools.product([False, True], vals, vals[::3] or vals))
    elif op is Ops.MULACC:
        combos = list(itertools.product(vals, vals, vals[::3] or vals))
    else:
        combos = list(itertools.product(vals, vals))
    return [list(c) for c in zip(*combos)]


def out_dtype(op: Ops, dt: DType) -> DType:
    return dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt


def src_dtypes(op: Ops, dt: DType, n: int) -> list[DType]:
    return [dtypes.bool, dt, dt] if op is Ops.WHERE else [dt] * n


# *** the four ways to compute one op ***


def by_folding(op: Ops, dt: DType, ops_: list[list]) -> list:
    out = []
    for args in zip(*ops_):
        srcs = tuple(UOp.const(sdt, v) for sdt, v in zip(src_dtypes(op, dt, len(args)), args))
        folded = UOp(op, out_dtype(op, dt), srcs).simplify()
        assert folded.op is Ops.CONST, f"{op} of constants {args} did not fold: {folded}"
        out.append(folded.arg)
    return out


def _tensor(vals: list, dt: DType, device: str) -> Tensor:
    if dt == dtypes.bfloat16:  # no numpy bfloat16: exact through float32
        return Tensor(np.array(vals, np.float32), device=device).cast(dt).realize()
    np_dt = np.bool_ if dt == dtypes.bool else np.dtype(dt.fmt)
    return Tensor(np.array(vals, dtype=np_dt), device=device).realize()


def on_device(op: Ops, dt: DType, ops_: list[list], device: str) -> list:
    ins = [_tensor(v, sdt, device) for v, sdt in zip(ops_, src_dtypes(op, dt, len(ops_)))]
    out = Tensor(UOp(op, out_dtype(op, dt), tuple(t.uop for t in ins)))
    return out.numpy().tolist()


def _torch_fn(op: Ops, dt: DType):
    if dt == dtypes.bool and op in (Ops.NEG, Ops.MAX):
        return torch.logical_not if op is Ops.NEG else torch.logical_or
    return {
        Ops.EXP2: torch.exp2,
        Ops.LOG2: torch.log2,
        Ops.SIN: torch.sin,
        Ops.SQRT: torch.sqrt,
        Ops.RECIP: torch.reciprocal,
        Ops.NEG: torch.neg,
        Ops.TRUNC: torch.trunc,
        Ops.ADD: torch.add,
        Ops.SUB: torch.sub,
        Ops.MUL: torch.mul,
        Ops.FDIV: torch.div,
        Ops.IDIV: lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        Ops.MOD: torch.fmod,
        Ops.MAX: torch.maximum,
        Ops.POW: torch.pow,
        Ops.CMPLT: torch.lt,
        Ops.CMPNE: torch.ne,
        Ops.CMPEQ: torch.eq,
        Ops.AND: torch.bitwise_and,
        Ops.OR: torch.bitwise_or,
        Ops.XOR: torch.bitwise_xor,
        Ops.SHL: torch.bitwise_left_shift,
        Ops.SHR: torch.bitwise_right_shift,
        Ops.WHERE: torch.where,
        Ops.MULACC: lambda a, b, c: a * b + c,
    }[op]


def _div(a: float, b: float) -> float:
    return a / b if math.isfinite(a / b) else math.inf


def by_torch(op: Ops, dt: DType, ops_: list[list]) -> list | None:
    """torch's results, None where torch has no such op for the dtype. Integer division and remainder by 0 (torch
    raises) and of INT_MIN by -1 (torch traps) are the IR's own definitions: those elements are None."""
    skip = [False] * len(ops_[0])
    if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dt):
        skip = [b == 0 or (a == dtypes.min(dt) and b == -1) for a, b in zip(*ops_)]
    if op is Ops.MOD and dtypes.is_float(dt):
        # torch's vectorized fmod is a - trunc(a / b) * b: NaN where a / b overflows, where C's fmod is exact
        skip = [b != 0 and math.isinf(truncate_float(_div(a, b), dt)) and math.isfinite(a) for a, b in zip(*ops_)]
    tdt = {dtypes.bool: torch.bool}.get(dt, getattr(torch, dt.name))
    ins = [
        torch.tensor([v if not s else 1 for v, s in zip(vals, skip)], dtype=torch.bool if sdt == dtypes.bool else tdt)
        for vals, sdt in zip(ops_, src_dtypes(op, dt, len(ops_)))
    ]
    try:
        out = _torch_fn(op, dt)(*ins)
    except (RuntimeError, NotImplementedError):
        return None  # e.g. most ops on uint16/32/64, shifts of bools
    out = out.float() if out.dtype == torch.bfloat16 else out
    return [None if s else v for v, s in zip(out.tolist(), skip)]


# *** comparing ***


def _ulp_tol(dt: DType) -> float:
    return {dtypes.float16: 2.0**-9, dtypes.bfloat16: 2.0**-6, dtypes.float32: 2.0**-22}.get(dt, 2.0**-51)


def same(x, y, op: Ops, dt: DType) -> bool:
    if x is None or y is None:
        return True
    if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, float) and not isinstance(y, float):
        return x == y
    x, y = float(x), float(y)
    if x != x or y != y:
        return x != x and y != y
    if x == 0 and y == 0 and op is Ops.MAX:
        return True  # max(-0.0, 0.0): the sign of the zero is undefined by design
    if x == y:
        return math.copysign(1.0, x) == math.copysign(1.0, y)
    if not (math.isfinite(x) and math.isfinite(y)) or x == 0 or y == 0:
        return False
    inexact = op in TRANSCENDENTAL or op is Ops.MULACC  # MULACC: the CPU fuses it into one rounding (an FMA)
    return inexact and abs(x - y) <= _ulp_tol(dt) * max(abs(x), abs(y))


def check(ref: list, got: list | None, what: str, op: Ops, dt: DType, ops_: list[list]) -> None:
    if got is None:
        return
    assert len(ref) == len(got)
    bad = [i for i, (r, g) in enumerate(zip(ref, got)) if not same(r, g, op, dt)]
    if bad:
        rows = [f"{tuple(o[i] for o in ops_)}: folding {ref[i]!r}, {what} {got[i]!r}" for i in bad[:8]]
        pytest.fail(f"{op} on {dt}: {len(bad)} of {len(ref)} differ\n" + "\n".join(rows))


@pytest.mark.parametrize("op, dt", CASES, ids=[f"{op.name}-{dt.name}" for op, dt in CASES])
def test_alu_semantics(op: Ops, dt: DType) -> None:
    ops_ = operands(op, dt)
    ref = by_folding(op, dt, ops_)
    for device in DEVICES:
        check(ref, on_device(op, dt, ops_, device), device, op, dt, ops_)
    check(ref, by_torch(op, dt, ops_), "torch", op, dt, ops_)


def test_float_to_int_cast_in_range() -> None:
    """A float -> int cast truncates toward zero; out of the int's range (NaN, inf included) it is undefined by
    design, so only in-range values are compared."""
    vals = [0.0, -0.0, 0.5, -0.5, 1.9, -1.9, 100.7, -100.7, 127.0, -128.0]
    for dt in (dtypes.int8, dtypes.int32, dtypes.int64):
        ref = [UOp(Ops.CAST, dt, (UOp.const(dtypes.float32, v),)).simplify().arg for v in vals]
        assert ref == torch.tensor(vals).to(getattr(torch, dt.name)).tolist()
        for device in DEVICES:
            assert Tensor(np.array(vals, np.float32), device=device).realize().cast(dt).numpy().tolist() == ref


def _dp4a_reference(a: list[int], b: list[int], c: list[int]) -> list[int]:
    """torch: a's bytes unsigned, b's signed, the products summed into c, wrapped to int32."""
    bytes_of = lambda v, dt: torch.tensor(v, dtype=torch.int32).view(torch.uint8).view(dt).reshape(-1, 4).long()
    dot = (bytes_of(a, torch.uint8) * bytes_of(b, torch.int8)).sum(-1)
    return ((dot + torch.tensor(c).long() + 2**31) % 2**32 - 2**31).tolist()


@pytest.mark.parametrize("n", [1, 7, 64])
def test_dp4a_semantics(n: int) -> None:
    # DP4A on int32 only: c + the dot product of a's four bytes (unsigned) and b's (signed); n elements, so that
    # the CPU computes whole vectors (vpdpbusd where the CPU has VNNI) and a scalar tail
    lo, hi = dtypes.min(dtypes.int32), dtypes.max(dtypes.int32)
    special = [0, 1, -1, lo, hi, 0x7F7F7F7F, -0x7F7F7F80, 0x01FF80FF, 0x0F0F0F0F, -0x0F0F0F10]
    rng = np.random.default_rng(n)
    a, b, c = ([int(v) for v in rng.choice(special + list(rng.integers(lo, hi, 8)), n)] for _ in range(3))
    c[0] = hi  # the sum wraps
    want = _dp4a_reference(a, b, c)
    assert by_folding(Ops.DP4A, dtypes.int32, [a, b, c]) == want
    for device in DEVICES:
        assert on_device(Ops.DP4A, dtypes.int32, [a, b, c], device) == want, device
