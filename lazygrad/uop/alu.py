"""What every ALU op means: one table that constant folding and the PYTHON device both evaluate.

Each op is a Python expression over its operands `a`, `b`, `c`, per kind of dtype (float, int, bool; comparisons and
WHERE for any). The constant folder compiles an expression into a function of one set of operands, the PYTHON device
into a list comprehension over a batch of threads, so both compute the same thing. The C-style renderers spell the
same rules in C (see renderer/cstyle.py), and test/uop/test_alu_semantics.py holds all of them to torch.

The rules, where C, Python and IEEE leave a choice:
- Every result is of its dtype: an integer result wraps modulo 2**bits (two's complement), a float result is rounded
  to its dtype's precision after every op (float16 and bfloat16 included, as torch does); a float overflows to +-inf.
- IDIV truncates toward zero, MOD takes the dividend's sign (C's `/` and `%`; fmod on floats). Floor division and
  Python's `%` are built from them in Tensor. An integer division or remainder by 0 is 0 (the renderers guard it;
  torch raises), INT_MIN // -1 wraps to INT_MIN and INT_MIN % -1 is 0 (x86 traps on both).
- SHL / SHR by an amount outside [0, bits) give 0, and -1 for SHR of a negative (torch's rule, not C's undefined
  behaviour nor x86's masking of the amount); SHR is arithmetic on signed dtypes.
- Integer POW is repeated wrapping multiplication; a negative exponent gives 0 except for bases 1 and -1 (torch).
- Float math gives IEEE's inf and NaN where Python raises: EXP2 overflows to inf, LOG2 of 0 is -inf and of a negative
  NaN, SQRT of a negative NaN, RECIP of +-0 is +-inf, SIN and COS of +-inf NaN, POW as C's pow. MAX propagates NaN.
- Bool arithmetic is logical: ADD and MAX are OR, MUL is AND, NEG is NOT.
- Undefined by design (no test pins them, the device may give anything): a float -> int cast whose truncated value
  does not fit the integer dtype (NaN and inf included), and the sign of a zero that MAX returns for (-0.0, 0.0).
"""

from __future__ import annotations

import functools
import math
import struct
from array import array
from typing import Any, Callable, Sequence

from lazygrad.dtype import DType, dtypes, truncate_float
from lazygrad.uop.ops import Ops, c_idiv


def _fdiv(a: float, b: float) -> float:
    """IEEE division where Python raises for a zero divisor."""
    if b == 0:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _fmod(a: float, b: float) -> float:
    """C fmod: exact, with the dividend's sign; NaN for an infinite dividend or a zero divisor."""
    try:
        return math.fmod(a, b)
    except ValueError:
        return math.nan


def _pow(a: float, b: float) -> float:
    """C's pow: IEEE special cases (NaN and infinite exponents, 0 to a negative power) instead of Python's errors."""
    odd = math.isfinite(b) and b == int(b) and int(b) % 2 == 1
    try:
        return math.pow(a, b)
    except ValueError:  # 0 to a negative power, or a negative base to a fractional one
        return (math.copysign(math.inf, a) if odd else math.inf) if a == 0 else math.nan
    except OverflowError:
        return -math.inf if a < 0 and odd else math.inf


def _ipow(a: int, b: int, bits: int) -> int:
    """Integer power modulo 2**bits (the caller wraps it to the dtype); torch's rule for negative exponents."""
    if b < 0:
        return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
    return pow(a, b, 1 << bits)


FLOAT_ALU = {
    Ops.EXP2: "inf if a >= 1024.0 else 2.0 ** a",
    Ops.LOG2: "log2(a) if a > 0.0 else -inf if a == 0.0 else nan",
    Ops.SIN: "sin(a) if -inf < a < inf else nan",
    Ops.COS: "cos(a) if -inf < a < inf else nan",
    Ops.SQRT: "sqrt(a) if a >= 0.0 else nan",
    Ops.RECIP: "1.0 / a if a else fdiv(1.0, a)",
    Ops.NEG: "-a",
    Ops.TRUNC: "copysign(float(trunc(a)), a) if -inf < a < inf else a",  # trunc(-0.5) is -0.0
    Ops.ADD: "a + b",
    Ops.SUB: "a - b",
    Ops.MUL: "a * b",
    Ops.FDIV: "a / b if b else fdiv(a, b)",
    Ops.MOD: "fmod(a, b)",
    Ops.MAX: "a if a != a or a > b else b",
    Ops.POW: "powf(a, b)",
    Ops.MULACC: "a * b + c",
}
# a's bytes unsigned, b's signed (x ^ 128) - 128
_DP4A = "c + " + " + ".join(f"(a >> {8 * k} & 255) * (((b >> {8 * k} & 255) ^ 128) - 128)" for k in range(4))
# before wrapping to the dtype (`bits` is the dtype's width)
INT_ALU = {
    Ops.NEG: "-a",
    Ops.TRUNC: "a",
    Ops.ADD: "a + b",
    Ops.SUB: "a - b",
    Ops.MUL: "a * b",
    Ops.IDIV: "idiv(a, b)",
    Ops.FDIV: "idiv(a, b)",
    Ops.MOD: "(a - idiv(a, b) * b) if b else 0",
    Ops.MAX: "a if a > b else b",
    Ops.AND: "a & b",
    Ops.OR: "a | b",
    Ops.XOR: "a ^ b",
    Ops.SHL: "a << b if 0 <= b < {bits} else 0",
    Ops.SHR: "a >> b if 0 <= b < {bits} else -(a < 0)",
    Ops.POW: "ipow(a, b, {bits})",
    Ops.MULACC: "a * b + c",
    Ops.DP4A: _DP4A,
}
BOOL_ALU = {
    Ops.NEG: "not a",
    Ops.ADD: "a or b",
    Ops.MUL: "a and b",
    Ops.MAX: "a or b",
    Ops.AND: "a and b",
    Ops.OR: "a or b",
    Ops.XOR: "a != b",
}
ANY_ALU = {Ops.CMPLT: "a < b", Ops.CMPNE: "a != b", Ops.CMPEQ: "a == b", Ops.WHERE: "b if a else c"}
# float ops whose result is exactly one of their operands' values: no rounding pass
EXACT_FLOAT_OPS = frozenset({Ops.NEG, Ops.TRUNC, Ops.MAX, Ops.WHERE})
# integer ops whose result is always in their dtype's range: no wrapping pass
IN_RANGE_INT_OPS = frozenset({Ops.TRUNC, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.SHR, Ops.WHERE})

NAMESPACE: dict[str, Any] = {
    "inf": math.inf,
    "nan": math.nan,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "sqrt": math.sqrt,
    "trunc": math.trunc,
    "copysign": math.copysign,
    "fdiv": _fdiv,
    "fmod": _fmod,
    "powf": _pow,
    "idiv": c_idiv,
    "ipow": _ipow,
    "__builtins__": {"float": float, "int": int, "zip": zip},
}


def wrap_expr(expr: str, dt: DType) -> str:
    """`expr` (an integer) wrapped to `dt`'s range, two's complement."""
    bits = 8 * dt.itemsize
    if dtypes.is_unsigned(dt):
        return f"({expr}) & {(1 << bits) - 1}"
    return f"(({expr}) + {1 << (bits - 1)} & {(1 << bits) - 1}) - {1 << (bits - 1)}"


def alu_expr(op: Ops, dt: DType) -> str:
    """One result of `op` producing `dt` (its operands' dtype, bool for a comparison) as an expression over a, b, c:
    wrapped for integers, not yet rounded for floats (see `round_to`)."""
    if op in ANY_ALU:
        return ANY_ALU[op]
    table = FLOAT_ALU if dtypes.is_float(dt) else BOOL_ALU if dtypes.is_bool(dt) else INT_ALU
    if op not in table:
        raise NotImplementedError(f"{op} is not defined on {dt.scalar}")
    expr = table[op].format(bits=8 * dt.itemsize)
    return wrap_expr(expr, dt) if dtypes.is_int(dt) and op not in IN_RANGE_INT_OPS else expr


# *** rounding floats to their dtype, a list at a time ***


def _round_f32(xs: list[float]) -> list[float]:
    return array("f", xs).tolist()  # one C pass; out-of-range values become inf as a C cast makes them


def _round_half(xs: list[float]) -> list[float]:
    try:
        return list(struct.unpack(f"{len(xs)}e", struct.pack(f"{len(xs)}e", *xs)))
    except OverflowError:  # struct refuses what a cast makes inf
        return [truncate_float(x, dtypes.float16) for x in xs]


def _round_bf16(xs: list[float]) -> list[float]:
    return [truncate_float(x, dtypes.bfloat16) for x in xs]


def round_to(dt: DType) -> Callable[[list], list] | None:
    """The rounding of a list of Python floats to `dt` (None: a Python value of that dtype is already exact)."""
    return {dtypes.float32: _round_f32, dtypes.float16: _round_half, dtypes.bfloat16: _round_bf16}.get(dt.scalar)


def result_rounding(op: Ops, dt: DType) -> Callable[[list], list] | None:
    """The rounding an ALU result of dtype `dt` gets (None where the expression's value is already exact)."""
    return None if op in EXACT_FLOAT_OPS else round_to(dt)


# *** constant evaluation ***


@functools.cache
def _scalar_fn(op: Ops, dt: DType, n_srcs: int) -> Callable[..., Any]:
    names = "abc"[:n_srcs]
    fn = eval(f"lambda {', '.join(names)}: {alu_expr(op, dt)}", dict(NAMESPACE))  # expressions of the tables only
    rounding = result_rounding(op, dt) if dtypes.is_float(dt) else None
    if rounding is None:
        return fn
    return lambda *xs: rounding([fn(*xs)])[0]


def exec_alu(op: Ops, dtype: DType, operands: Sequence[Any]) -> Any:
    """The value of `op` on constant operands (Python values of their dtypes), of dtype `dtype` (the result's: bool
    for a comparison), exactly as the devices compute it."""
    kind = dtype if op not in ANY_ALU or op is Ops.WHERE else dtypes.bool
    return _scalar_fn(op, kind.scalar, len(operands))(*operands)
