"""End-to-end: elementwise ops (with broadcasting and type promotion) and reductions, forward only, against torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lazygrad import Device, Tensor
from test.helpers import TRANS_TOL, assert_close, compare, rand_np

FLOATS = ["float32", "float16", "float64"]
INTS = ["int32", "int8", "uint8"]

# (shape_a, shape_b): the arithmetic ops run every case in float32; the rest run the first two (compiling a
# kernel per case is what costs time here)
BROADCAST_SHAPES = [
    ((2, 1, 4), (3, 1)),
    ((13, 17), (13, 17)),
    ((), (7,)),
    ((), ()),
    ((1,), (1,)),
    ((0,), (0,)),
    ((7,), (7,)),
    ((3, 5), (3, 5)),
    ((13, 17), ()),
    ((1,), (3, 5)),
    ((4, 0, 3), (1, 3)),
]


FULL_SHAPE_OPS = ("add", "sub", "mul", "div", "maximum", "lt")


def shapes_for(name: str, dtype: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return BROADCAST_SHAPES if dtype == "float32" and name in FULL_SHAPE_OPS else BROADCAST_SHAPES[:2]


def divisor(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Nonzero values (ints avoid division by zero; floats avoid values near zero)."""
    x = rand_np(shape, dtype, seed, 1, 5)
    if dtype.startswith("uint"):
        return x
    sign = np.where(rand_np(shape, "bool", seed + 1), 1, -1).astype(dtype)
    return (x * sign).astype(dtype)


# *** binary elementwise, tensor with tensor ***

# name -> (lazygrad fn, torch fn, dtypes it is defined for, needs a nonzero second operand)
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, FLOATS + INTS + ["bool"], False),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, FLOATS + INTS, False),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, FLOATS + INTS + ["bool"], False),
    "div": (lambda a, b: a / b, lambda a, b: a / b, FLOATS + INTS + ["bool"], True),
    "floordiv": (lambda a, b: a // b, torch.floor_divide, FLOATS + INTS, True),
    "mod": (lambda a, b: a % b, torch.remainder, FLOATS + INTS, True),
    "maximum": (Tensor.maximum, torch.maximum, FLOATS + INTS + ["bool"], False),
    "minimum": (Tensor.minimum, torch.minimum, FLOATS + INTS + ["bool"], False),
    "lt": (lambda a, b: a < b, lambda a, b: a < b, FLOATS + INTS + ["bool"], False),
    "le": (lambda a, b: a <= b, lambda a, b: a <= b, FLOATS + INTS + ["bool"], False),
    "gt": (lambda a, b: a > b, lambda a, b: a > b, FLOATS + INTS + ["bool"], False),
    "ge": (lambda a, b: a >= b, lambda a, b: a >= b, FLOATS + INTS + ["bool"], False),
    "eq": (lambda a, b: a == b, lambda a, b: a == b, FLOATS + INTS + ["bool"], False),
    "ne": (lambda a, b: a != b, lambda a, b: a != b, FLOATS + INTS + ["bool"], False),
}

BINARY_CASES = [
    pytest.param(name, dt, sa, sb, id=f"{name}-{dt}-{sa}-{sb}")
    for name, (_, _, dts, _) in BINARY.items()
    for dt in dts
    for sa, sb in shapes_for(name, dt)
]


@pytest.mark.parametrize("name,dtype,shape_a,shape_b", BINARY_CASES)
def test_binary(name, dtype, shape_a, shape_b):
    lg_fn, torch_fn, _, nonzero = BINARY[name]
    a = rand_np(shape_a, dtype, 1, -5, 5)
    # small ints so products stay in range; equal values appear often, which exercises == and <=
    b = divisor(shape_b, dtype, 2) if nonzero and dtype != "bool" else rand_np(shape_b, dtype, 2, -5, 5)
    if nonzero and dtype == "bool":
        b = np.ones(shape_b, dtype=bool)
    compare(lg_fn, torch_fn, [a, b])


def test_binary_exact_ties():
    """Comparisons and min/max on values that are exactly equal, and floordiv/mod on exact multiples."""
    a = np.array([-6, -4, -3, 0, 3, 4, 6, 7], dtype=np.int32)
    b = np.array([3, -2, 3, 5, -3, 4, -4, 7], dtype=np.int32)
    for fn in (torch.floor_divide, torch.remainder, torch.maximum, torch.minimum):
        name = {"floor_divide": "floordiv", "remainder": "mod"}.get(fn.__name__, fn.__name__)
        compare(BINARY[name][0], fn, [a, b])
    compare(lambda x, y: x <= y, lambda x, y: x <= y, [a.astype(np.float32), b.astype(np.float32)])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floordiv_mod_signs(dtype):
    a = np.array([5.5, -5.5, 5.5, -5.5, 3.0, -3.0, 0.0, 7.25], dtype=dtype)
    b = np.array([2.0, 2.0, -2.0, -2.0, 1.5, 1.5, 3.0, -0.5], dtype=dtype)
    compare(lambda x, y: x // y, torch.floor_divide, [a, b])
    compare(lambda x, y: x % y, torch.remainder, [a, b])
    compare(lambda x, y: x.div(y, rounding_mode="trunc"), lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a, b])


def test_float_floordiv_mod_consistent():
    """Where a / b rounds up to an integer, floor(a / b) is one too big; torch goes through the remainder."""
    a = np.array([1.0, -1.0, 0.7, 7.0, 2.0, 1.0, -3.5], dtype=np.float32)
    b = np.array([0.1, 0.1, 0.1, 0.7, 0.2, -0.1, 0.7], dtype=np.float32)
    compare(lambda x, y: x // y, torch.floor_divide, [a, b])
    compare(lambda x, y: x % y, torch.remainder, [a, b])


def test_float_floordiv_mod_special():
    a = np.repeat(SPECIAL, len(SPECIAL))
    b = np.tile(SPECIAL, len(SPECIAL))
    compare(lambda x, y: x // y, torch.floor_divide, [a, b])
    compare(lambda x, y: x % y, torch.remainder, [a, b])


# exact only through the float MOD (C fmod) primitive: floor(a/b) cannot give these remainders
@pytest.mark.parametrize("a,b", [(1e30, 7.0), (5.0, math.inf), (-5.0, math.inf)])
def test_float_mod_exact(a, b):
    x, y = np.array([a], dtype=np.float32), np.array([b], dtype=np.float32)
    compare(lambda p, q: p % q, torch.remainder, [x, y])
    compare(lambda p, q: p // q, torch.floor_divide, [x, y])


@pytest.mark.parametrize("dtype", ["int32", "int8"])
def test_int_div_rounding_modes(dtype):
    a = rand_np((5, 7), dtype, 3, -20, 20)
    b = divisor((5, 7), dtype, 4)
    compare(lambda x, y: x.div(y, rounding_mode="trunc"), lambda x, y: torch.div(x, y, rounding_mode="trunc"), [a, b])
    compare(lambda x, y: x.div(y, rounding_mode="floor"), lambda x, y: torch.div(x, y, rounding_mode="floor"), [a, b])


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_float(dtype):
    base = rand_np((3, 5), dtype, 5, 0.5, 3)
    exp = rand_np((3, 5), dtype, 6, -2, 2)
    compare(lambda a, b: a**b, torch.pow, [base, exp], *TRANS_TOL[dtype])
    # integer exponents of negative bases are defined
    neg = -base
    ints = np.round(exp).astype(dtype)
    compare(lambda a, b: a**b, torch.pow, [neg, ints], *TRANS_TOL[dtype])


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_pow_int(dtype):
    base = rand_np((4, 6), dtype, 7, -3, 3)
    exp = rand_np((4, 6), dtype, 8, 0, 4)
    compare(lambda a, b: a**b, torch.pow, [base, exp])


@pytest.mark.parametrize("scalar", [0, 1, 2, 3, 0.5, -1, -2, 2.5])
def test_pow_scalar_exponent(scalar):
    x = rand_np((9,), "float32", 9, 0.25, 3)
    compare(lambda a: a**scalar, lambda a: a**scalar, [x], *TRANS_TOL["float32"])


def test_rpow():
    x = rand_np((9,), "float32", 10, -2, 2)
    compare(lambda a: 2**a, lambda a: 2**a, [x], *TRANS_TOL["float32"])
    compare(lambda a: 0.5**a, lambda a: 0.5**a, [x], *TRANS_TOL["float32"])


@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
def test_where(dtype):
    cond = rand_np((2, 1, 4), "bool", 11)
    a = rand_np((3, 1), dtype, 12, -5, 5)
    b = rand_np((4,), dtype, 13, -5, 5)
    compare(Tensor.where, torch.where, [cond, a, b])


def test_where_scalars_and_promotion():
    cond = rand_np((3, 4), "bool", 14)
    x = rand_np((3, 4), "float32", 15)
    i = rand_np((3, 4), "int32", 16)
    compare(lambda c, a: c.where(a, 0.5), lambda c, a: torch.where(c, a, 0.5), [cond, x])
    compare(lambda c, a: c.where(2, a), lambda c, a: torch.where(c, 2, a), [cond, i])
    compare(lambda c, a, b: c.where(a, b), torch.where, [cond, i, x])
    compare(lambda c: c.where(1.5, -2.5), lambda c: torch.where(c, 1.5, -2.5), [cond])


# *** tensor with Python scalar: values and result dtype ***

SCALAR_OPS = {
    "add": (lambda a, s: a + s, lambda a, s: a + s),
    "sub": (lambda a, s: a - s, lambda a, s: a - s),
    "rsub": (lambda a, s: s - a, lambda a, s: s - a),
    "mul": (lambda a, s: a * s, lambda a, s: a * s),
    "rmul": (lambda a, s: s * a, lambda a, s: s * a),
    "div": (lambda a, s: a / s, lambda a, s: a / s),
    "floordiv": (lambda a, s: a // s, lambda a, s: a // s),
    "mod": (lambda a, s: a % s, lambda a, s: a % s),
    "maximum": (
        lambda a, s: a.maximum(s),
        lambda a, s: torch.clamp(a, min=s) if not isinstance(s, bool) else a.maximum(torch.tensor(s)),
    ),
    "lt": (lambda a, s: a < s, lambda a, s: a < s),
    "ge": (lambda a, s: a >= s, lambda a, s: a >= s),
    "eq": (lambda a, s: a == s, lambda a, s: a == s),
}

SCALAR_CASES = [
    pytest.param(op, dt, s, id=f"{op}-{dt}-{s!r}")
    for op in SCALAR_OPS
    for dt in ["float32", "float16", "int32", "int8", "uint8", "bool"]
    for s in [3, 2.5, -2]
    if not (op in ("sub", "rsub") and dt == "bool")
    if s != -2 or dt in ("float32", "int32", "int8")
    if not (op == "maximum" and dt == "bool")
]


@pytest.mark.parametrize("op,dtype,scalar", SCALAR_CASES)
def test_scalar_binary(op, dtype, scalar):
    lg_fn, torch_fn = SCALAR_OPS[op]
    x = rand_np((3, 4), dtype, 17, 0 if dtype == "uint8" else -5, 5)
    out = lg_fn(Tensor(x), scalar)
    ref = torch_fn(torch.from_numpy(x), scalar)
    # torch gives int64 where a Python int meets a bool tensor; lazygrad's default int is int32
    if ref.dtype == torch.int64:
        ref = ref.to(torch.int32)
    assert_close(out, ref)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "bool"])
def test_bool_scalar_keeps_dtype(dtype):
    x = rand_np((5,), dtype, 18, -3, 3)
    compare(lambda a: a * True, lambda a: a * True, [x])
    compare(lambda a: a == False, lambda a: a == False, [x])  # noqa: E712


# *** unary math ***

# name -> (lazygrad fn, torch fn, (low, high) of inputs, transcendental)
UNARY = {
    "neg": (Tensor.neg, torch.neg, (-3, 3), False),
    "abs": (Tensor.abs, torch.abs, (-3, 3), False),
    "sign": (Tensor.sign, torch.sign, (-3, 3), False),
    "reciprocal": (Tensor.reciprocal, torch.reciprocal, (0.2, 4), False),
    "exp": (Tensor.exp, torch.exp, (-5, 5), True),
    "exp2": (Tensor.exp2, torch.exp2, (-5, 5), True),
    "log": (Tensor.log, torch.log, (0.01, 10), True),
    "log2": (Tensor.log2, torch.log2, (0.01, 10), True),
    "sqrt": (Tensor.sqrt, torch.sqrt, (0, 10), True),
    "rsqrt": (Tensor.rsqrt, torch.rsqrt, (0.1, 10), True),
    "sin": (Tensor.sin, torch.sin, (-6, 6), True),
    "cos": (Tensor.cos, torch.cos, (-6, 6), True),
    "tan": (Tensor.tan, torch.tan, (-1.2, 1.2), True),
    "floor": (Tensor.floor, torch.floor, (-4, 4), False),
    "ceil": (Tensor.ceil, torch.ceil, (-4, 4), False),
    "trunc": (Tensor.trunc, torch.trunc, (-4, 4), False),
    "round": (Tensor.round, torch.round, (-4, 4), False),
    "relu": (Tensor.relu, torch.relu, (-3, 3), False),
    "sigmoid": (Tensor.sigmoid, torch.sigmoid, (-8, 8), True),
    "tanh": (Tensor.tanh, torch.tanh, (-5, 5), True),
    "erf": (Tensor.erf, torch.erf, (-3, 3), True),
    "gelu": (lambda x: x.gelu(approximate="none"), F.gelu, (-4, 4), True),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), (-4, 4), True),
    "silu": (Tensor.silu, F.silu, (-6, 6), True),
    "softplus": (Tensor.softplus, F.softplus, (-25, 25), True),
    "leaky_relu": (Tensor.leaky_relu, F.leaky_relu, (-3, 3), False),
    "leaky_relu_0.2": (lambda x: x.leaky_relu(0.2), lambda x: F.leaky_relu(x, 0.2), (-3, 3), False),
    "elu": (Tensor.elu, F.elu, (-4, 4), True),
    "elu_0.5": (lambda x: x.elu(0.5), lambda x: F.elu(x, 0.5), (-4, 4), True),
    "relu6": (Tensor.relu6, F.relu6, (-3, 9), False),
    "clip": (lambda x: x.clip(-1, 1.5), lambda x: x.clip(-1, 1.5), (-3, 3), False),
    "clip_min": (lambda x: x.clip(-0.5), lambda x: x.clip(-0.5), (-3, 3), False),
    "square": (Tensor.square, torch.square, (-3, 3), False),
}

UNARY_CASES = [
    pytest.param(name, dt, shape, id=f"{name}-{dt}-{shape}")
    for name in UNARY
    for dt in FLOATS
    for shape in ([(13, 17), ()] if dt == "float32" else [(13, 17)])
]


@pytest.mark.parametrize("name,dtype,shape", UNARY_CASES)
def test_unary_float(name, dtype, shape):
    lg_fn, torch_fn, (lo, hi), transcendental = UNARY[name]
    x = rand_np(shape, dtype, 20, lo, hi)
    if name == "round" and x.size:
        x = (np.round(x * 2) / 2).astype(dtype)  # exact halves test round-half-to-even
    if transcendental:
        atol, rtol = TRANS_TOL[dtype]
        if name in ("erf", "gelu") and dtype == "float64":
            atol = 2e-7 if name == "erf" else 1e-6  # erf is Abramowitz & Stegun 7.1.26: 1.5e-7 in every dtype
    else:
        atol = rtol = None
    compare(lg_fn, torch_fn, [x], atol, rtol)


# ops an integer tensor keeps its dtype for, and ops it promotes to float for (like torch)
INT_UNARY = ["neg", "abs", "sign", "relu", "clip", "square", "floor", "ceil", "round", "trunc"]
INT_TO_FLOAT_UNARY = ["exp", "log", "sqrt", "sin", "sigmoid", "tanh", "reciprocal"]


@pytest.mark.parametrize("name", INT_UNARY + INT_TO_FLOAT_UNARY)
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_unary_int(name, dtype):
    if dtype == "uint8" and name in ("neg", "sign", "clip"):
        pytest.skip("torch does not define these for uint8 the same way")
    lg_fn, torch_fn, _, _ = UNARY[name]
    x = rand_np((5, 7), dtype, 21, 1 if name in ("log", "reciprocal") else -9, 9)
    compare(lg_fn, torch_fn, [x], *TRANS_TOL["float32"])


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (2, 1, 4)])
def test_unary_odd_shapes(shape):
    x = rand_np(shape, "float32", 19)
    for name in ("neg", "exp", "sigmoid", "round", "relu"):
        lg_fn, torch_fn, _, _ = UNARY[name]
        compare(lg_fn, torch_fn, [x], *TRANS_TOL["float32"])


def test_unary_bool():
    x = rand_np((3, 5), "bool", 22)
    assert_close(Tensor(x).abs(), x)
    compare(Tensor.sqrt, torch.sqrt, [x])
    compare(Tensor.exp, torch.exp, [x], *TRANS_TOL["float32"])
    compare(Tensor.logical_not, torch.logical_not, [x])


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "silu", "softplus", "exp", "erf", "gelu", "elu"])
def test_unary_extreme_inputs(name):
    """Saturating ops stay finite and exact at the far ends (no inf/inf or overflow to NaN)."""
    lg_fn, torch_fn, _, _ = UNARY[name]
    x = np.array([-1000.0, -100.0, -88.0, -30.0, -1e-8, 0.0, 1e-8, 30.0, 88.0, 100.0, 1000.0], dtype=np.float32)
    compare(lg_fn, torch_fn, [x], *TRANS_TOL["float32"])


# *** NaN and inf, where torch defines the answer ***

SPECIAL = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 2.5], dtype=np.float32)

SPECIAL_UNARY = [
    "neg",
    "abs",
    "relu",
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "floor",
    "ceil",
    "trunc",
    "round",
    "sigmoid",
    "tanh",
    "reciprocal",
    "relu6",
    "leaky_relu",
    "square",
    "clip",
]


@pytest.mark.parametrize("name", SPECIAL_UNARY)
def test_unary_nan_inf(name):
    lg_fn, torch_fn, _, _ = UNARY[name]
    compare(lg_fn, torch_fn, [SPECIAL], *TRANS_TOL["float32"])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum", "lt", "eq", "ne", "ge"])
def test_binary_nan_inf(name):
    lg_fn, torch_fn, _, _ = BINARY[name]
    a = np.repeat(SPECIAL, len(SPECIAL))
    b = np.tile(SPECIAL, len(SPECIAL))
    compare(lg_fn, torch_fn, [a, b])


def test_sign_nan_inf():
    # torch.sign(nan) is 0 (numpy's is NaN)
    assert_close(Tensor(SPECIAL).sign(), torch.sign(torch.tensor(SPECIAL)).numpy())


def test_documented_special_values():
    x = Tensor([math.nan, math.inf, 0.0, -1.0])
    assert np.isnan(x.relu().numpy()[0])
    assert x[1:2].exp().item() == math.inf
    assert x[2:3].log().item() == -math.inf
    assert np.isnan(x[3:4].sqrt().item())
    assert np.isnan(x.maximum(1.0).numpy()[0]) and np.isnan(Tensor(1.0).maximum(x).numpy()[0])
    assert np.isnan(x.minimum(1.0).numpy()[0]) and np.isnan(Tensor(1.0).minimum(x).numpy()[0])


# *** bitwise ***

BITWISE = {
    "and": (lambda a, b: a & b, lambda a, b: a & b),
    "or": (lambda a, b: a | b, lambda a, b: a | b),
    "xor": (lambda a, b: a ^ b, lambda a, b: a ^ b),
}


@pytest.mark.parametrize("name", BITWISE)
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "int64", "bool"])
def test_bitwise(name, dtype):
    lg_fn, torch_fn = BITWISE[name]
    a = rand_np((2, 1, 4), dtype, 23, -100, 100)
    b = rand_np((3, 1), dtype, 24, -100, 100)
    compare(lg_fn, torch_fn, [a, b])
    compare(
        lambda x: lg_fn(x, 6 if dtype != "bool" else True), lambda x: torch_fn(x, 6 if dtype != "bool" else True), [a]
    )


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "int64", "bool"])
def test_bitwise_not(dtype):
    compare(lambda x: ~x, lambda x: ~x, [rand_np((13,), dtype, 25, -100, 100)])


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "int64"])
def test_shifts(dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = rand_np((4, 5), dtype, 26, -50, 50)
    for s in (0, 1, 3, bits - 2):
        compare(lambda a: a << s, lambda a: a << s, [x])
        compare(lambda a: a >> s, lambda a: a >> s, [x])


def test_bitwise_float_is_not_implemented():
    # an unsupported op / dtype / device combination names all three
    with pytest.raises(NotImplementedError, match=r"bitwise_and \(&\) .* float32 tensors on " + Device.DEFAULT):
        Tensor([1.0, 2.0]) & Tensor([1.0, 2.0])
    with pytest.raises(NotImplementedError, match=r"bitwise_not \(~\) .* float16 tensors on " + Device.DEFAULT):
        ~Tensor([1.0]).half()


# *** reductions ***

REDUCE = {
    "sum": (
        Tensor.sum,
        lambda x, dim, keepdim: torch.sum(x, dim, keepdim) if dim is not None else _full(torch.sum, x, keepdim),
    ),
    "max": (Tensor.max, lambda x, dim, keepdim: torch.amax(x, dim if dim is not None else (), keepdim)),
    "min": (Tensor.min, lambda x, dim, keepdim: torch.amin(x, dim if dim is not None else (), keepdim)),
    "mean": (
        Tensor.mean,
        lambda x, dim, keepdim: torch.mean(x, dim, keepdim) if dim is not None else _full(torch.mean, x, keepdim),
    ),
    "prod": (Tensor.prod, lambda x, dim, keepdim: _prod(x, dim, keepdim)),
    "any": (
        Tensor.any,
        lambda x, dim, keepdim: torch.any(x, dim, keepdim) if dim is not None else _full(torch.any, x, keepdim),
    ),
    "all": (
        Tensor.all,
        lambda x, dim, keepdim: torch.all(x, dim, keepdim) if dim is not None else _full(torch.all, x, keepdim),
    ),
    "var": (Tensor.var, lambda x, dim, keepdim: torch.var(x, dim, keepdim=keepdim)),
    "std": (Tensor.std, lambda x, dim, keepdim: torch.std(x, dim, keepdim=keepdim)),
}


def _full(fn, x: torch.Tensor, keepdim: bool) -> torch.Tensor:
    out = fn(x)
    return out.reshape((1,) * x.ndim) if keepdim else out


def _prod(x: torch.Tensor, dim, keepdim: bool) -> torch.Tensor:
    if dim is None:
        return _full(torch.prod, x, keepdim)
    for d in sorted((dim,) if isinstance(dim, int) else dim, key=lambda d: d % x.ndim, reverse=True):
        x = torch.prod(x, d % x.ndim, keepdim=True)
    dims = {d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim)}
    return x if keepdim else x.reshape([s for i, s in enumerate(x.shape) if i not in dims])


REDUCE_AXES = [
    ((4, 5, 6), None),
    ((4, 5, 6), 1),
    ((4, 5, 6), -1),
    ((4, 5, 6), (0, 2)),
    ((4, 1, 6), 1),
    ((1, 7), 0),
    ((33,), 0),
    ((), None),
]
REDUCE_CASES = [
    pytest.param(name, shape, axis, keepdim, id=f"{name}-{shape}-{axis}-{keepdim}")
    for name in REDUCE
    for shape, axis in REDUCE_AXES
    for keepdim in (False, True)
    if not (name in ("var", "std") and shape == ())
]


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("name,shape,axis,keepdim", REDUCE_CASES)
def test_reduce(name, shape, axis, keepdim):
    lg_fn, torch_fn = REDUCE[name]
    dtype = "bool" if name in ("any", "all") else "float32"
    x = rand_np(shape, dtype, 30, 0.5 if name == "prod" else -3, 1.5 if name == "prod" else 3)
    compare(lambda t: lg_fn(t, axis, keepdim), lambda t: torch_fn(t, axis, keepdim), [x], 1e-5, 1e-5)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod", "mean", "any", "all"])
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "bool", "float16", "float64", "int64"])
def test_reduce_dtypes(name, dtype):
    """Result dtypes follow torch: sum/prod of small ints and bools widen to int64, mean of ints is an error there."""
    lg_fn, torch_fn = REDUCE[name]
    x = rand_np((3, 9), dtype, 31, -2 if name == "prod" else -100, 2 if name == "prod" else 100)
    if name == "mean" and dtype not in FLOATS:
        # torch refuses mean of integer tensors; lazygrad gives the float mean
        out = lg_fn(Tensor(x), 1, False)
        assert out.dtype.name == "float32"
        np.testing.assert_allclose(out.numpy(), x.astype(np.float64).mean(1), rtol=1e-6)
        return
    atol, rtol = (2e-2, 1e-3) if dtype == "float16" else (None, None)
    if name in ("any", "all") and dtype == "uint8":
        # torch.any/all of uint8 return uint8; lazygrad (like numpy) returns bool
        assert_close(lg_fn(Tensor(x), 1, False), getattr(np, name)(x, 1))
        return
    compare(lambda t: lg_fn(t, 1, False), lambda t: torch_fn(t, 1, False), [x], atol, rtol)
    compare(lambda t: lg_fn(t, None, False), lambda t: torch_fn(t, None, False), [x], atol, rtol)


@pytest.mark.parametrize("name", ["sum", "prod", "any", "all", "mean"])
@pytest.mark.parametrize("axis", [None, 1, 0])
def test_reduce_zero_size(name, axis):
    lg_fn, torch_fn = REDUCE[name]
    x = rand_np((3, 0, 2), "bool" if name in ("any", "all") else "float32", 32)
    compare(lambda t: lg_fn(t, axis, False), lambda t: torch_fn(t, axis, False), [x])
    compare(lambda t: lg_fn(t, axis, True), lambda t: torch_fn(t, axis, True), [x])


def test_reduce_max_zero_size_raises():
    with pytest.raises(ValueError, match=r"\(3, 0\)"):
        Tensor.zeros(3, 0).max(1)


# non-contiguous inputs: each view feeds the reduce directly
VIEWS = {
    "transposed": (lambda t: t.permute(2, 0, 1), lambda t: t.permute(2, 0, 1)),
    "sliced": (lambda t: t[1:, ::2, 1:5], lambda t: t[1:, ::2, 1:5]),
    "flipped": (lambda t: t.flip((0, 2)), lambda t: t.flip((0, 2))),
    "expanded": (lambda t: t[:, :1].expand(4, 3, 6), lambda t: t[:, :1].expand(4, 3, 6)),
    "neg_step": (lambda t: t[::-1, ::-2], lambda t: t.flip((0, 1))[:, ::2]),
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod", "var"])
@pytest.mark.parametrize("axis", [1, (0, 2)])
def test_reduce_non_contiguous(view, name, axis):
    lg_view, torch_view = VIEWS[view]
    lg_fn, torch_fn = REDUCE[name]
    x = rand_np((4, 5, 6), "float32", 33, 0.5 if name == "prod" else -3, 1.5 if name == "prod" else 3)
    compare(lambda t: lg_fn(lg_view(t), axis, False), lambda t: torch_fn(torch_view(t), axis, False), [x], 1e-5, 1e-5)


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("axis", [None, 0, (0, 1)])
def test_var_std_correction(correction, axis):
    x = rand_np((5, 4, 3), "float32", 34)
    compare(
        lambda t: t.var(axis, correction=correction),
        lambda t: torch.var(t, axis, correction=correction),
        [x],
        1e-5,
        1e-5,
    )
    compare(
        lambda t: t.std(axis, keepdim=True, correction=correction),
        lambda t: torch.std(t, axis, correction=correction, keepdim=True),
        [x],
        1e-5,
        1e-5,
    )


def test_var_of_ints_is_float():
    x = rand_np((6, 5), "int32", 35, -10, 10)
    out = Tensor(x).var(0)
    assert out.dtype.name == "float32"
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64).var(0, ddof=1), rtol=1e-5)


ARG_CASES = [((4, 5, 6), None), ((4, 5, 6), 0), ((4, 5, 6), 1), ((4, 5, 6), -1), ((1, 7), 0), ((7,), 0), ((), None)]


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,axis", ARG_CASES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(name, shape, axis, keepdim):
    # few distinct values, so ties are common: torch returns the first extreme index
    x = rand_np(shape, "int32", 36, -2, 2).astype(np.float32)
    out = getattr(Tensor(x), name)(axis, keepdim=keepdim)
    ref = getattr(torch.from_numpy(x), name)(axis, keepdim=keepdim)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "float16"])
def test_argmax_dtypes(dtype):
    x = rand_np((6, 5), dtype, 37, -50, 50)
    ref_in = torch.from_numpy(x).to(torch.float32)
    np.testing.assert_array_equal(Tensor(x).argmax(1).numpy(), ref_in.argmax(1).numpy())
    np.testing.assert_array_equal(Tensor(x).argmin(0).numpy(), ref_in.argmin(0).numpy())


def test_argmax_non_contiguous():
    x = rand_np((5, 8), "float32", 38)
    np.testing.assert_array_equal(Tensor(x).T[::-1].argmax(1).numpy(), torch.from_numpy(x).T.flip(0).argmax(1).numpy())


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_nan(name):
    # torch treats NaN as the extreme value: the index of the first NaN
    x = np.array([[1.0, math.nan, 3.0, math.nan], [2.0, 0.0, 5.0, -1.0], [math.nan, 1.0, 1.0, 0.0]], dtype=np.float32)
    for axis in (None, 0, 1):
        np.testing.assert_array_equal(
            getattr(Tensor(x), name)(axis).numpy(), getattr(torch.from_numpy(x), name)(axis).numpy()
        )


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_max_min_nan(axis):
    x = np.array([[1.0, math.nan, 3.0], [4.0, 5.0, -math.inf]], dtype=np.float32)
    compare(lambda t: t.max(axis), lambda t: torch.amax(t, axis if axis is not None else ()), [x])
    compare(lambda t: t.min(axis), lambda t: torch.amin(t, axis if axis is not None else ()), [x])


def test_int_extremes_max_min():
    for dt in ("int8", "uint8", "int32", "int64"):
        info = np.iinfo(dt)
        x = np.array([info.min, 0, info.max, 1], dtype=dt)
        assert Tensor(x).max().item() == info.max
        assert Tensor(x).min().item() == info.min


@pytest.mark.parametrize("shape", [(64, 129), (256, 300)])
def test_sum_large_and_multi_axis_fused(shape):
    x = rand_np(shape, "float32", 39)
    compare(lambda t: (t * 2 + 1).sum(1) / 8, lambda t: (t * 2 + 1).sum(1) / 8, [x], 1e-4, 1e-5)
    compare(lambda t: t.sum(0) - t.mean(0), lambda t: t.sum(0) - t.mean(0), [x], 1e-4, 1e-5)
    compare(lambda t: t.T.max(0) + t.sum(), lambda t: t.T.amax(0) + t.sum(), [x], 1e-3, 1e-5)
