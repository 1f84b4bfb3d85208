"""Dtypes and gradients at the edges, against torch: index dtypes, pow at 0 and with zero exponents, sigmoid at large
magnitudes, var/std of one element, comparisons in a backward graph, cumprod (exact through zeros and negatives, and
a bounded kernel), integer overflow and integer negative powers, signed zeros and NaN inputs of activations and clamp
(values and gradients), logit's and sinc's gradients at the edges."""

import math

import numpy as np
import pytest
import torch

from lazygrad import Tensor, dtypes
from lazygrad.nn import functional as F

SHAPES = [(1,), (2,), (7,), (3, 5)]


def _pair(a):
    return Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _grads(fn, *arrays):
    lg, th = zip(*[_pair(np.asarray(a, np.float32)) for a in arrays])
    out_l, out_t = fn(*lg), fn(*th)
    np.testing.assert_allclose(out_l.numpy(), out_t.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    out_l.sum().backward()
    out_t.sum().backward()
    for a, b in zip(lg, th):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES)
def test_index_ops_share_argmax_dtype(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t = Tensor(x)
    want = dtypes.default_int  # tinygrad's int32 (torch says int64): every index-returning op gives the same dtype
    found = {
        "argmax": t.argmax(),
        "argmin": t.argmin(-1),
        "argsort": t.argsort(),
        "sort": t.sort()[1],
        "topk": t.topk(1)[1],
        "cummax": t.cummax(0)[1],
        "cummin": t.cummin(0)[1],
        "nonzero": t.nonzero(),
    }
    assert {k: v.dtype for k, v in found.items()} == {k: want for k in found}
    r = torch.from_numpy(x)
    np.testing.assert_array_equal(found["argmax"].numpy(), r.argmax().numpy())
    np.testing.assert_array_equal(found["cummin"].numpy(), r.cummin(0)[1].numpy())


def test_pow_gradients_at_the_edges():
    base = [0.0, 2.0, -1.5, 0.0, -2.0, 3.0]
    _grads(lambda x: x**0, base)
    _grads(lambda x: x**0.0, base)
    _grads(lambda x: x**2, base)
    _grads(lambda x: x**3, base)  # negative base with an integer exponent
    _grads(lambda x: x**-2, [1.5, -2.0, 0.5])
    _grads(lambda x, y: x**y, base, [0.0, 0.0, 2.0, 1.0, 3.0, -1.0])  # 0**0, 0**1, (-2)**3, ...
    _grads(lambda y: torch.zeros(3) ** y if isinstance(y, torch.Tensor) else Tensor.zeros(3) ** y, [0.0, 2.0, -1.0])


def test_sigmoid_large_magnitudes():
    _grads(lambda x: x.sigmoid(), [-1000.0, -100.0, -20.0, 0.0, 20.0, 100.0, 1000.0])


@pytest.mark.parametrize("fn", ["var", "std"])
def test_var_std_single_element(fn):
    with pytest.warns(UserWarning, match="degrees of freedom"):
        _grads(lambda x: getattr(x, fn)(), [3.0])
    _grads(lambda x: getattr(x, fn)(correction=0), [3.0])
    with pytest.warns(UserWarning, match="degrees of freedom"):
        _grads(lambda x: getattr(x, fn)(0), [[1.0, 2.0]])


def test_comparisons_in_backward_graph():
    _grads(lambda x: (x > 0).float() * x + (x == x).float() * 2 + x * (x <= 1).float(), [1.0, -1.0, 0.0, 2.0])


@pytest.mark.parametrize("n", [1, 2, 7, 64, 65, 512])
def test_cumprod_exact_through_zeros_and_negatives(n):
    x = np.random.default_rng(n).uniform(0.7, 1.3, n).astype(np.float32)
    x[::5] *= -1
    if n > 3:
        x[n // 3] = 0.0
        x[n // 2 + 1] = 0.0
    _grads(lambda t: t.cumprod(0), x)
    _grads(lambda t: t.cumprod(1), np.stack([x, x[::-1]]))


def test_cumprod_kernels_bounded():
    t = Tensor(np.ones(512, np.float32), requires_grad=True)
    y = t.cumprod(0)
    y.sum().backward()
    sched = t.grad.schedule()
    assert len(sched) <= 32  # a few scans of log64(n) levels each
    # the window-of-prods gradient made a 22420-node kernel (minutes to compile); the scans' largest is ~3700
    # (cumsum's own backward: ~1600)
    assert max(len(si.ast.toposort) for si in sched) < 5000


def test_integer_edges_follow_torch():
    a = np.array([1, 2, 127, -128], np.int8)
    np.testing.assert_array_equal((Tensor(a) + 300).numpy(), (torch.from_numpy(a) + 300).numpy())  # wraps
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        Tensor([1, 2]) ** -1
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.tensor([1, 2]) ** -1
    np.testing.assert_array_equal((Tensor([1, 2, -1]) ** Tensor(-1)).numpy(), [1, 0, -1])  # a tensor exponent: ok
    np.testing.assert_array_equal((Tensor([1, 2, -1]) ** 3).numpy(), [1, 8, -1])


HALF_REDUCTIONS = {
    "sum": lambda t: t.sum(1),
    "mean": lambda t: t.mean(1),
    "var": lambda t: t.var(1),
    "std": lambda t: t.std(1),
    "prod": lambda t: (t[:, :40] + 0.5).prod(1),
    "cumsum": lambda t: t.cumsum(1),
    "softmax": lambda t: t.softmax(1),
    "log_softmax": lambda t: t.log_softmax(1),
    "logsumexp": lambda t: t.logsumexp(1),
}


@pytest.mark.parametrize("name", HALF_REDUCTIONS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_reductions_round_once(name, dtype):
    """Reductions of float16/bfloat16 accumulate in float32 and round once, as torch's: a mean whose sum was rounded
    to half before the division, or a cumsum whose running totals were half, was an ulp or more off in many places.
    Compared with the exact result (float64 from the same half inputs) rounded to the dtype."""
    fn = HALF_REDUCTIONS[name]
    tdt = getattr(torch, dtype)
    x = torch.from_numpy(np.random.default_rng(0).random((4, 3000)) * 2 - 0.3).to(tdt)
    if name == "prod":
        exact = (x[:, :40] + 0.5).double().prod(1).to(tdt)  # the + 0.5 rounds to half on both sides
    else:
        exact = fn(x.double()).to(tdt)
    got = torch.from_numpy(fn(Tensor(x.float().numpy()).cast(getattr(dtypes, dtype))).float().numpy())
    off = (got != exact.float()).float().mean().item()
    assert off <= 0.005, f"{off:.1%} of {name} outputs differ from the correctly rounded result"


@pytest.mark.parametrize("op", ["floor", "ceil", "trunc", "round", "frac"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_rounding_keeps_the_sign_of_zero(op, dtype):
    """torch gives -0.0 for a negative value rounded to zero (1 / round(-0.4) is -inf); round gave +0.0."""
    vals = [-0.0, 0.0, -0.4, -0.5, -1.0, -2.5, 0.4, 0.5, 2.5, -1e-30, 3.5, float("inf"), -float("inf"), float("nan")]
    ref = getattr(torch, op)(torch.tensor(vals, dtype=getattr(torch, dtype))).numpy()
    got = getattr(Tensor(np.array(vals, dtype=dtype)), op)().numpy()
    np.testing.assert_array_equal(got, ref)
    # a NaN's sign is the hardware's choice (x86 makes inf - inf a negative NaN, CUDA a positive one): not compared
    number = ~np.isnan(ref)
    np.testing.assert_array_equal(np.signbit(got)[number], np.signbit(ref)[number])


def _same(got, ref, what):
    """Equal to torch's, NaN where torch's is NaN, and a zero with torch's sign."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-30, equal_nan=True, err_msg=what)
    zero = ref == 0
    np.testing.assert_array_equal(np.signbit(got)[zero], np.signbit(ref)[zero], err_msg=f"{what}: sign of zero")


def _against_torch(lfn, tfn, vals, dtype, what):
    x = Tensor(np.array(vals, dtype=dtype), requires_grad=True)
    t = torch.tensor(vals, dtype=getattr(torch, dtype), requires_grad=True)
    y, yt = lfn(x), tfn(t)
    y.sum().backward()
    yt.sum().backward()
    _same(y.numpy(), yt.detach().numpy(), f"{what} value")
    return x.grad.numpy(), t.grad.numpy()


ODD = {
    "tanh": (Tensor.tanh, torch.tanh),
    "sinh": (Tensor.sinh, torch.sinh),
    "asinh": (Tensor.asinh, torch.asinh),
    "atanh": (Tensor.atanh, torch.atanh),
    "erf": (Tensor.erf, torch.erf),
    "sin": (Tensor.sin, torch.sin),
    "tan": (Tensor.tan, torch.tan),
    "atan": (Tensor.atan, torch.atan),
    "asin": (Tensor.asin, torch.asin),
    "softsign": (Tensor.softsign, torch.nn.functional.softsign),
    "tanhshrink": (lambda x: x - x.tanh(), torch.nn.functional.tanhshrink),
    "gelu": (lambda x: x.gelu(approximate="none"), torch.nn.functional.gelu),
    "silu": (Tensor.silu, torch.nn.functional.silu),
    "mish": (Tensor.mish, torch.nn.functional.mish),
    "elu": (Tensor.elu, torch.nn.functional.elu),
    "selu": (Tensor.selu, torch.nn.functional.selu),
    "leaky_relu": (Tensor.leaky_relu, torch.nn.functional.leaky_relu),
    "relu": (Tensor.relu, torch.relu),
    "relu6": (Tensor.relu6, torch.nn.functional.relu6),
    "hardtanh": (Tensor.hardtanh, torch.nn.functional.hardtanh),
}


@pytest.mark.parametrize("name", list(ODD))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_signed_zeros_follow_torch(name, dtype):
    """tanh, asinh, atan and asin gave +0.0 at -0.0 (torch -0.0): their odd extension picked the branch by x < 0."""
    vals = [-0.0, 0.0, -1e-30, 1e-30, -0.5, 0.5]
    got, ref = _against_torch(*ODD[name], vals, dtype, name)
    np.testing.assert_allclose(got, ref, rtol=1e-5, err_msg=f"{name} gradient")


NAN = [float("nan"), -float("nan"), -4.0, -3.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, 4.0, 6.0, float("inf")]
# torch's forward and backward at NaN inputs. Where its scalar and vectorized kernels disagree (the gradients of
# hardtanh, relu6, hardshrink, softshrink: 1 from the scalar loop, 0 from the vector one) lazygrad follows the vector
# kernel, which takes every element of a tensor of 32 and more; NAN * 3 puts its NaNs at 0, 1, 13, 14, 26 and 27
NAN_CASES = {
    "clamp": (lambda x: x.clamp(0, 1), lambda x: x.clamp(0, 1)),
    "clamp_min": (lambda x: x.clamp(min=-1), lambda x: x.clamp(min=-1)),
    "clamp_max": (lambda x: x.clamp(max=3), lambda x: x.clamp(max=3)),
    "clamp_reversed": (lambda x: x.clamp(1, 0), lambda x: x.clamp(1, 0)),
    "clamp_nan_min": (lambda x: x.clamp(min=float("nan")), lambda x: x.clamp(min=float("nan"))),
    "clamp_nan_max": (lambda x: x.clamp(-1, float("nan")), lambda x: x.clamp(-1, float("nan"))),
    "hardsigmoid": (Tensor.hardsigmoid, torch.nn.functional.hardsigmoid),
    "maximum": (lambda x: x.maximum(0.5), lambda x: torch.maximum(x, torch.tensor(0.5, dtype=x.dtype))),
    "minimum": (lambda x: x.minimum(0.5), lambda x: torch.minimum(x, torch.tensor(0.5, dtype=x.dtype))),
    "logsigmoid": (Tensor.logsigmoid, torch.nn.functional.logsigmoid),
    "relu": (Tensor.relu, torch.relu),
    "threshold": (lambda x: F.threshold(x, 0.5, -2.0), lambda x: torch.nn.functional.threshold(x, 0.5, -2.0)),
    "hardshrink": (Tensor.hardshrink, torch.nn.functional.hardshrink),
    "softshrink": (F.softshrink, torch.nn.functional.softshrink),
    "leaky_relu": (Tensor.leaky_relu, torch.nn.functional.leaky_relu),
    "sign": (Tensor.sign, torch.sign),
    "hardtanh": (Tensor.hardtanh, torch.nn.functional.hardtanh),
    "relu6": (Tensor.relu6, torch.nn.functional.relu6),
}


@pytest.mark.parametrize("name", list(NAN_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_inputs_follow_torch(name, dtype):
    """clamp gave NaN its gradient (torch: 0) and ignored a NaN bound; maximum / minimum gave a NaN side no gradient
    (torch: all of it); hardsigmoid gave a NaN 1/6; hardshrink / softshrink / threshold made NaN a number; sign had
    gradient 1 at NaN. sign(NaN) was NaN (numpy's; torch: 0); hardtanh, relu6, hardshrink and softshrink gave NaN
    gradient 1 (torch: 0)."""
    lfn, tfn = NAN_CASES[name]
    vals = NAN * 3  # a few of each, inside torch's vectorized part
    got, ref = _against_torch(lfn, tfn, vals, dtype, name)
    np.testing.assert_allclose(got, ref, rtol=1e-6, equal_nan=True, err_msg=f"{name} gradient")


# the brief's activations at NaN: torch's gradient in a tensor of 64 (its vector kernel); for 1 element its scalar
# loop gives 1 to elu, selu, celu and hardswish (vector: NaN) and to hardtanh, relu6 (vector: 0)
NAN_ACTIVATIONS = {
    "elu": (lambda x: x.elu(), torch.nn.functional.elu),
    "elu_alpha": (lambda x: x.elu(0.5), lambda x: torch.nn.functional.elu(x, 0.5)),
    "selu": (Tensor.selu, torch.nn.functional.selu),
    "celu": (lambda x: x.celu(2.0), lambda x: torch.nn.functional.celu(x, 2.0)),
    "hardswish": (Tensor.hardswish, torch.nn.functional.hardswish),
    "hardtanh": (lambda x: x.hardtanh(-2, 3), lambda x: torch.nn.functional.hardtanh(x, -2, 3)),
    "relu6": (Tensor.relu6, torch.nn.functional.relu6),
    "leaky_relu": (lambda x: x.leaky_relu(0.2), lambda x: torch.nn.functional.leaky_relu(x, 0.2)),
    "gelu": (lambda x: x.gelu(approximate="none"), torch.nn.functional.gelu),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"), lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    "silu": (Tensor.silu, torch.nn.functional.silu),
    "mish": (Tensor.mish, torch.nn.functional.mish),
    "softplus": (Tensor.softplus, torch.nn.functional.softplus),
    "softplus_beta": (lambda x: x.softplus(2.0, 3.0), lambda x: torch.nn.functional.softplus(x, 2.0, 3.0)),
    "logsigmoid": (Tensor.logsigmoid, torch.nn.functional.logsigmoid),
    "hardshrink": (Tensor.hardshrink, torch.nn.functional.hardshrink),
    "softshrink": (lambda x: F.softshrink(x, 0.25), lambda x: torch.nn.functional.softshrink(x, 0.25)),
}


@pytest.mark.parametrize("name", list(NAN_ACTIVATIONS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_gradients_of_activations(name, dtype):
    """NaN inputs beside numbers, in a tensor of 64 (torch's vector kernel) and alone: lazygrad's answer does not
    depend on the length."""
    lfn, tfn = NAN_ACTIVATIONS[name]
    vals = [float("nan"), -2.5, -0.5, 0.0, 0.5, 2.5, 3.5, 7.0] * 8
    got, ref = _against_torch(lfn, tfn, vals, dtype, name)
    np.testing.assert_allclose(got, ref, rtol=1e-5, equal_nan=True, err_msg=f"{name} gradient")
    one = Tensor(np.array([float("nan")], dtype), requires_grad=True)
    lfn(one).sum().backward()
    np.testing.assert_array_equal(one.grad.numpy(), got[:1], err_msg=f"{name}: one NaN alone")


@pytest.mark.parametrize("n", [1, 4, 64])
def test_pow_by_a_tensor_half_is_c_pow_at_any_length(n):
    """gcc vectorized powf(x, 0.5f) as a vector sqrt (NaN at -inf, -0.0 at -0.0): a tensor exponent of 0.5 gave C's
    +inf and +0.0 alone and sqrt's in a tensor of 4 or more, and with it the gradient of x ** 1.5 at -inf."""
    vals = np.array([-np.inf, -0.0, 4.0, 0.25] * n, np.float32)
    got = Tensor(vals).pow(Tensor(0.5)).numpy()
    ref = np.array([math.pow(v, 0.5) for v in vals], np.float32)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))
    x = Tensor(vals, requires_grad=True)
    (x**1.5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[:1], [np.inf])  # 1.5 pow(-inf, 0.5) (torch: NaN through its sqrt)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("exponent", [0.5, -0.5, 1.5, -1.5, 3.0])
def test_scalar_powers_at_the_edges_follow_torch(dtype, exponent):
    """x ** -0.5 was C's pow, 0 at -inf and +inf at -0.0 (torch: rsqrt's NaN and -inf; its gradient stays
    -0.5 x ** -1.5, -0.0 at -inf). x ** 1.5's gradient at -inf is C's pow (inf): torch's NaN is its sqrt special
    case inside the backward, not compared."""
    vals = [-np.inf, -4.0, -0.0, 0.0, 1e-30, 0.25, 4.0, np.inf, np.nan] * 4
    got, ref = _against_torch(lambda x: x**exponent, lambda x: x**exponent, vals, dtype, f"x ** {exponent}")
    if exponent == 1.5:
        finite = np.array(vals) != -np.inf
        got, ref = got[finite], ref[finite]
    np.testing.assert_allclose(got, ref, rtol=1e-5, equal_nan=True)


def test_clamp_tensor_bounds_with_nan():
    nan = float("nan")
    x = np.array([nan, -2.0, 0.0, 0.5, 1.0, 3.0], np.float32)
    lo, hi = np.array([0.0, 0.0, nan, 0.0, 0.5, 0.0], np.float32), np.array([1.0, 1.0, 1.0, nan, 1.0, 2.0], np.float32)
    args = [Tensor(a, requires_grad=True) for a in (x, lo, hi)]
    targs = [torch.tensor(a, requires_grad=True) for a in (x, lo, hi)]
    out, tout = args[0].clamp(args[1], args[2]), targs[0].clamp(targs[1], targs[2])
    _same(out.numpy(), tout.detach().numpy(), "clamp value")
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_allclose(args[0].grad.numpy(), targs[0].grad.numpy(), equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("eps", [None, 1e-3])
def test_logit_gradient_follows_torch(dtype, eps):
    """The gradient was finite outside [0, 1] (where the value is NaN; torch: NaN), NaN at 0 and 1 (torch: inf) and,
    with eps, 0 at NaN (torch: NaN)."""
    vals = [-0.5, -0.0, 0.0, 1e-4, 0.25, 0.5, 0.999, 1.0, 1.5, float("nan")]
    got, ref = _against_torch(lambda x: x.logit(eps), lambda x: x.logit(eps), vals, dtype, "logit")
    np.testing.assert_allclose(got, ref, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sinc_gradient_near_zero(dtype):
    """The gradient through sin(pi x) / (pi x) was inf once x * x underflows and lost every digit near 0; compared
    with the float64 closed form away from 0 and its series (-pi^2 x / 3) near it."""
    x = np.array([0.0, 1e-30, -1e-20, 1e-8, 1e-4, -1e-3, 0.01, 0.2, 0.249, 0.251, -0.5, 1.0, 1.5, -3.3], dtype)
    t = Tensor(x, requires_grad=True)
    t.sinc().sum().backward()
    a = np.pi * x.astype(np.float64)
    with np.errstate(all="ignore"):
        series = -(np.pi**2) * x / 3 + np.pi**4 * x**3 / 30 - np.pi**6 * x**5 / 840
        ref = np.where(np.abs(x) <= 1e-3, series, (a * np.cos(a) - np.sin(a)) / (a * x))
    np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-5 if dtype == "float32" else 1e-11, atol=1e-30)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_division_gradient_with_a_tiny_divisor(dtype):
    """d(a / b)/db was -g a / (b * b): b * b underflows (b = 1e-30 in float32), giving -inf for a = 1e-30 (torch
    -1e30) and NaN for a = 0 (torch -0.0); now -g (a / b) / b, as torch."""
    tiny = 1e-30 if dtype == "float32" else 1e-300
    a, b = [0.0, -0.0, tiny, -2 * tiny, 1.0, 3.0], [tiny, tiny, tiny, tiny, 2.0, -tiny]
    x, y = Tensor(np.array(a, dtype), requires_grad=True), Tensor(np.array(b, dtype), requires_grad=True)
    tx, ty = (torch.tensor(v, dtype=getattr(torch, dtype), requires_grad=True) for v in (a, b))
    out, tout = x / y, tx / ty
    _same(out.numpy(), tout.detach().numpy(), "a / b")
    out.sum().backward()
    tout.sum().backward()
    _same(x.grad.numpy(), tx.grad.numpy(), "d/da")
    _same(y.grad.numpy(), ty.grad.numpy(), "d/db")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floor_division_keeps_the_sign_of_zero(dtype):
    """A zero quotient takes a / b's sign, as torch's: -0.0 // 1 and 0.5 // -2 were +0.0 and -0.0 // -1 was -0.0."""
    s = [-0.0, 0.0, 0.5, -0.5, 1.0, -1.0, 3.0, float("inf"), -float("inf")]
    a, b = (np.array(v, dtype) for v in zip(*[(p, q) for p in s for q in s if q != 0]))
    _same((Tensor(a) // Tensor(b)).numpy(), (torch.from_numpy(a) // torch.from_numpy(b)).numpy(), "a // b")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_xlogy_gradient_where_x_is_zero(dtype):
    """d xlogy(x, y)/dx is log(y) also at x = 0 (it was 0 there: the value's where cut the gradient)."""
    a, b = [0.0, -0.0, 0.0, 0.0, 0.0, 1.0, -2.0, 0.0], [0.5, 2.0, 0.0, -1.0, 1e-30, 0.5, 3.0, float("nan")]
    x, y = Tensor(np.array(a, dtype), requires_grad=True), Tensor(np.array(b, dtype), requires_grad=True)
    tx, ty = (torch.tensor(v, dtype=getattr(torch, dtype), requires_grad=True) for v in (a, b))
    out, tout = x.xlogy(y), torch.xlogy(tx, ty)
    _same(out.numpy(), tout.detach().numpy(), "xlogy")
    out.sum().backward()
    tout.sum().backward()
    _same(x.grad.numpy(), tx.grad.numpy(), "d/dx")
    # d/dy at x = 0 is 0 here where torch's x / y gives NaN at y = 0: compared elsewhere
    number = np.array(b) != 0
    np.testing.assert_allclose(y.grad.numpy()[number], ty.grad.numpy()[number], rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_atan2_gradient_at_nan_and_zero(dtype):
    """atan2 with a NaN gave each side gradient 1 (its value went through y + x); torch's y / (x^2 + y^2) and
    -x / (x^2 + y^2) are NaN. At y = 0 or x = 0 the gradient was 0 (|y| by abs(), whose gradient is 0 at 0): d/dy
    atan2(0, 1) is 1. (At infinities torch's are NaN, where lazygrad keeps the limit 0, and torch's x^2 + y^2
    underflows for tiny x and y: not compared.)"""
    s = [float("nan"), 0.0, -0.0, 1.0, -2.5, 0.5]
    a, b = (list(v) for v in zip(*[(p, q) for p in s for q in s]))
    x, y = Tensor(np.array(a, dtype), requires_grad=True), Tensor(np.array(b, dtype), requires_grad=True)
    tx, ty = (torch.tensor(v, dtype=getattr(torch, dtype), requires_grad=True) for v in (a, b))
    out, tout = x.atan2(y), torch.atan2(tx, ty)
    _same(out.numpy(), tout.detach().numpy(), "atan2")
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, equal_nan=True)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-5, equal_nan=True)
