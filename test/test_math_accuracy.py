"""Accuracy of the transcendental ops against torch, in ulps, over their whole range.

Inputs are logarithmically spaced from 1e-30 to 1e38 of both signs: the edges are where composite formulas lose
every digit (tanh(1e-8) computed as (1 - e^-2x) / (1 + e^-2x) is 0, cos(x) as sin(pi/2 - x) is wrong by 0.4 at
x = 1e6, softplus(-20) as log(1 + e^x) is 0). The bounds are what the implementations reach (the exp2-based exp is
the largest: up to ~40 ulps where |x| > 40), so a regression of a few bits fails here.
"""

import math

import numpy as np
import pytest
import torch

from lazygrad import Tensor

_POS = np.logspace(-30, 38, 3000).astype(np.float32)
X32 = np.concatenate([_POS, -_POS, np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])]).astype(np.float32)


def _ulps(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """ulps between float32 arrays, 0 where both are NaN or equal, huge where only one is NaN or infinite; results
    below the normal range (torch flushes some of them) are not compared."""
    both = np.isfinite(ours) & np.isfinite(ref)
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - ref.view(np.int32).astype(np.int64))
    ulps = np.where(both, ulps, np.where((ours == ref) | (np.isnan(ours) & np.isnan(ref)), 0, 1 << 40))
    return np.where(np.abs(ref) < np.finfo(np.float32).tiny, 0, ulps)


F = torch.nn.functional
CASES = {
    # name: (ours, torch, domain filter, max ulps)
    "sin": (Tensor.sin, torch.sin, None, 1),
    "cos": (Tensor.cos, torch.cos, None, 1),
    "tan": (Tensor.tan, torch.tan, None, 3),
    "tanh": (Tensor.tanh, torch.tanh, None, 2),
    "erf": (Tensor.erf, torch.erf, None, 4),
    "expm1": (Tensor.expm1, torch.expm1, None, 48),
    "log1p": (Tensor.log1p, torch.log1p, None, 2),
    "softplus": (Tensor.softplus, F.softplus, None, 48),
    "logsigmoid": (Tensor.logsigmoid, F.logsigmoid, None, 48),
    "elu": (Tensor.elu, F.elu, None, 3),
    "selu": (Tensor.selu, F.selu, None, 4),
    "celu": (Tensor.celu, F.celu, None, 3),
    "mish": (Tensor.mish, F.mish, None, 64),
    "sinh": (Tensor.sinh, torch.sinh, lambda x: np.abs(x) < 89, 48),  # torch's sinh overflows early at 89.3
    "asinh": (Tensor.asinh, torch.asinh, None, 3),
    "atanh": (Tensor.atanh, torch.atanh, None, 12),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_ulps(name):
    ours, ref, keep, bound = CASES[name]
    x = X32 if keep is None else X32[keep(X32)]
    got = ours(Tensor(x)).numpy()
    want = ref(torch.tensor(x)).numpy()
    ulps = _ulps(got, want)
    worst = int(ulps.argmax())
    assert ulps.max() <= bound, f"{name}({x[worst]!r}) = {got[worst]!r}, torch {want[worst]!r}: {ulps.max()} ulps"


@pytest.mark.parametrize("x", [1e-30, 1e-8, 3e-5, -1e-8])
def test_tiny_inputs_keep_their_digits(x):
    t = Tensor(np.float32([x]))
    x = float(np.float32(x))
    for name in ("tanh", "erf", "expm1", "log1p", "sin"):
        assert getattr(t, name)().item() == pytest.approx(getattr(math, name)(x), rel=3e-7), name


def test_tanh_rounds_as_torch_near_one():
    # the fuzz case: tanh(9.0) is 0.99999994 in float32 (1 - 3.05e-8 rounds down), cast to int8 it is 0, not 1
    x = np.arange(5, 12, dtype=np.float32)
    np.testing.assert_array_equal(Tensor(x).tanh().numpy(), torch.tanh(torch.tensor(x)).numpy())
    np.testing.assert_array_equal(Tensor(x).tanh().cast("int8").numpy(), torch.tanh(torch.tensor(x)).to(torch.int8))


def test_cos_of_positional_encoding_arguments():
    # sinusoidal position encodings take cos of position * frequency, up to thousands
    pos = np.arange(0, 100000, 37, dtype=np.float32)
    np.testing.assert_allclose(Tensor(pos).cos().numpy(), np.cos(pos.astype(np.float64)), rtol=0, atol=1.2e-7)


@pytest.mark.parametrize("name", ["erf", "tanh", "expm1", "log1p", "cos", "tan", "sin"])
def test_float64_relative_error(name):
    x = np.concatenate([np.logspace(-12, 2.5, 1500), -np.logspace(-12, 2.5, 1500)])
    if name == "log1p":
        x = np.abs(x) - 0.999999
    got = getattr(Tensor(x), name)().numpy()
    want = getattr(torch, name)(torch.tensor(x)).numpy()
    ok = np.isfinite(want) & (want != 0)
    assert np.max(np.abs(got[ok] - want[ok]) / np.abs(want[ok])) < 1e-13


@pytest.mark.parametrize(
    "name", ["tanh", "erf", "expm1", "log1p", "cos", "tan", "softplus", "logsigmoid", "elu", "mish"]
)
def test_gradients(name):
    x = np.float32([-30.0, -3.0, -0.7, -1e-6, 0.0, 1e-6, 0.3, 0.7, 2.5, 9.0, 30.0])
    if name == "log1p":
        x = x[x > -1]
    if name == "tan":
        x = x[np.abs(x) < 1.5]
    a, b = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    fn = getattr(F, name, None) if name in ("softplus", "logsigmoid", "elu", "mish") else getattr(torch, name)
    getattr(a, name)().sum().backward()
    fn(b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=2e-6, atol=1e-12)  # expm1'(-30): torch 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["tanh", "erf", "expm1", "log1p", "cos", "sin"])
def test_half_types_round_once(name, dtype):
    x = np.linspace(-8, 8, 2001).astype(np.float32)
    if name == "log1p":
        x = x[x > -1]
    got = getattr(Tensor(x).cast(dtype), name)().float().numpy()
    want = getattr(torch.tensor(x).to(getattr(torch, dtype)), name)().float().numpy()
    np.testing.assert_array_equal(got, want)


_EDGES = np.float32(
    [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, 1e-30, -1e-30, 1e30, -1e30, 7.5, -7.5, np.inf, -np.inf, np.nan]
)
_A, _B = (np.array(v, np.float32) for v in zip(*[(p, q) for p in _EDGES for q in _EDGES]))


@pytest.mark.parametrize(
    "name",
    ["logaddexp", "logaddexp2", "atan2", "hypot", "xlogy", "fmax", "fmin", "ldexp", "float_power", "floor_divide"],
)
def test_binary_edges(name):
    # signed zeros, infinities and NaN in every pairing; results within 4e-7 relative (NaN where torch's is)
    got = getattr(Tensor(_A), name)(Tensor(_B)).numpy().astype(np.float64)
    want = getattr(torch, name)(torch.tensor(_A), torch.tensor(_B)).numpy().astype(np.float64)
    with np.errstate(invalid="ignore"):
        # (torch's vector kernel gives logaddexp2(-1, -1) = -1.06e-8, its scalar one and lazygrad the exact 0)
        close = np.abs(got - want) <= 4e-7 * np.abs(want) + (2e-8 if name == "logaddexp2" else 0)
        same = (got == want) | (np.isnan(got) & np.isnan(want)) | close
    bad = np.nonzero(~same)[0]
    assert not len(bad), [(_A[i], _B[i], got[i], want[i]) for i in bad[:5]]
    if name in ("atan2", "fmax", "fmin", "ldexp"):  # signs of zero results too
        np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[got == 0]))


def test_logaddexp_keeps_the_small_term():
    # log(1 + e^-7.5) rounded through 1 + e^-7.5 lost 4 digits (8e-5 relative); what is left is exp's own error
    a, b = np.float32([0.0, 0.0, 5.0]), np.float32([-7.5, -15.0, 5.0])
    got = Tensor(a).logaddexp(Tensor(b)).numpy()
    np.testing.assert_allclose(got, np.logaddexp(a.astype(np.float64), b), rtol=1.5e-6)


@pytest.mark.parametrize("n", [1, 7, 64])
def test_logaddexp2_of_equal_inputs_is_exact(n):
    # a + log2(1 + 2^0) = a + 1 exactly, as torch: through log1p's ln and a * (1 / ln 2) the vector kernel's fused
    # multiply-add gave -1.06e-8 for logaddexp2(-1, -1)
    a = np.float32([-1.0, 0.0, 3.0, -40.0, 1e6, -0.5, 2.0])[np.arange(n) % 7]
    np.testing.assert_array_equal(Tensor(a).logaddexp2(Tensor(a)).numpy(), a + 1)
    want = torch.logaddexp2(torch.tensor(a), torch.tensor(a + 0.25)).numpy()
    np.testing.assert_allclose(Tensor(a).logaddexp2(Tensor(a + 0.25)).numpy(), want, rtol=4e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2", "atan2", "hypot", "xlogy", "fmax", "fmin"])
def test_binary_gradients(name):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 40)).astype(np.float32)
    a[:4] = b[:4]  # ties: torch's split (logaddexp half each, fmax all to self)
    if name == "xlogy":
        b = np.abs(b) + 0.1
    la, lb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    getattr(la, name)(lb).sum().backward()
    getattr(torch, name)(ta, tb).sum().backward()
    np.testing.assert_allclose(la.grad.numpy(), ta.grad.numpy(), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(lb.grad.numpy(), tb.grad.numpy(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["erfc", "sinc", "logit", "frac", "signbit"])
def test_unary_additions(name):
    x = np.concatenate([np.linspace(-12, 12, 961), _EDGES]).astype(np.float32)
    got = getattr(Tensor(x), name)().numpy()
    want = getattr(torch, name)(torch.tensor(x)).numpy()
    if name == "erfc":  # relative accuracy also where erfc is tiny (1 - erf would be 0 or noise there)
        np.testing.assert_array_less(_ulps(got, want), 3)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, equal_nan=True)


def test_erfc_float64():
    x = np.linspace(-27, 27, 2001)
    got, want = Tensor(x).erfc().numpy(), torch.erfc(torch.tensor(x)).numpy()
    ok = want > 0
    assert np.max(np.abs(got[ok] - want[ok]) / want[ok]) < 3e-13


def test_torch_names():
    x, y = Tensor([1.5, -2.0]), Tensor([0.5, 3.0])
    tx, ty = torch.tensor([1.5, -2.0]), torch.tensor([0.5, 3.0])
    for name in (
        "remainder",
        "true_divide",
        "divide",
        "multiply",
        "subtract",
        "arctan2",
        "greater",
        "less_equal",
        "not_equal",
    ):
        np.testing.assert_allclose(getattr(x, name)(y).numpy(), getattr(tx, name)(ty).numpy(), rtol=1e-6, err_msg=name)
    for name in ("negative", "absolute", "arctan", "arcsinh", "sgn"):
        np.testing.assert_allclose(getattr(x, name)().numpy(), getattr(tx, name)().numpy(), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv"])
def test_special_functions(name):
    if name == "erfinv":
        x = np.concatenate([np.linspace(-1, 1, 2001), [0.99999994, -0.99999994, 1e-30, -0.0, 1.5, -1.5, np.nan]])
    else:  # poles at 0 and the negative integers, a root of digamma near 1.4616, large arguments
        x = np.concatenate([np.linspace(-20.25, 40, 2001), [0.0, -0.0, -1.0, -7.0, 1e-8, 1.4616, 1e6, np.inf, np.nan]])
    x = x.astype(np.float32)
    got = getattr(Tensor(x), name)().numpy()
    want = getattr(torch, name)(torch.tensor(x)).numpy()
    # relative, absolute below 1 (near digamma's root torch's float32 value is off by 4e-7, ours by 3e-8)
    finite = np.isfinite(got) & np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    assert np.max(np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), 1.0)) < 3e-6
    x64 = x[np.isfinite(x)].astype(np.float64)
    got64, want64 = getattr(Tensor(x64), name)().numpy(), getattr(torch, name)(torch.tensor(x64)).numpy()
    ok = np.isfinite(want64)
    assert np.max(np.abs(got64[ok] - want64[ok]) / np.maximum(np.abs(want64[ok]), 1e-3)) < 1e-10


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv"])
def test_special_function_gradients(name):
    x = np.float32([0.1, -0.5, 0.9, 0.3]) if name == "erfinv" else np.float32([0.3, 2.5, -1.5, 7.0, 1e-3, 100.0])
    a, b = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    getattr(a, name)().sum().backward()
    getattr(torch, name)(b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=2e-6)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_shifts_by_tensors_as_torch(dtype):
    bits = np.dtype(dtype).itemsize * 8
    a = np.array([1, -8, 5, 7, 100, -1], dtype=np.int64).astype(dtype)
    s = np.array([0, 1, 3, bits - 1, bits, bits + 3], dtype=np.int64).astype(dtype)
    for name in ("bitwise_left_shift", "bitwise_right_shift"):
        got = getattr(Tensor(a), name)(Tensor(s)).numpy()
        want = getattr(torch, name)(torch.tensor(a), torch.tensor(s)).numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32"])
def test_lcm_wraps_as_torch(dtype):
    # |a| / gcd * |b| past the dtype's range wraps as torch's (lcm(-100, 9) in int8 is -124)
    a = np.array([-100, 9, 6, -4, 0, 7, 100, 127], dtype=np.int64).astype(dtype)
    b = np.array([9, -100, 4, 6, 5, 0, 3, 3], dtype=np.int64).astype(dtype)
    got = Tensor(a).lcm(Tensor(b)).numpy()
    np.testing.assert_array_equal(got, torch.lcm(torch.tensor(a), torch.tensor(b)).numpy())


def test_float64_exp_to_the_last_digits():
    # exp2(x * log2(e)) was 2e-14 relative near 700 (40 ulps typical); Cody-Waite reduction gives ~1 ulp
    x = np.concatenate([np.linspace(-740, 709.7, 4001), [0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79, -745.2]])
    got, want = Tensor(x).exp().numpy(), torch.exp(torch.tensor(x)).numpy()
    ok = np.isfinite(want) & (want > np.finfo(np.float64).tiny)
    assert np.max(np.abs(got[ok] - want[ok]) / want[ok]) < 5e-16
    special = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special])
    assert np.all(np.isfinite(Tensor(np.array([1e30, -1e30, 1e300, -1e300])).exp().numpy()[[1, 3]]))
    t = Tensor(np.array([0.5, -2.0, 3.0]), requires_grad=True)
    t.exp().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.exp([0.5, -2.0, 3.0]), rtol=1e-15)


@pytest.mark.parametrize("name", ["exp", "exp2", "tanh", "sigmoid", "softplus", "gelu"])
def test_an_expression_computes_to_the_same_bits_in_any_kernel(name):
    # one elementwise value computed by a vectorized kernel (contiguous rows) and by a scalar one (read across rows):
    # a max's gradient compares the input, recomputed by the backward's kernel, with the max the forward's kernel
    # found; a last-bit difference made that compare false everywhere and the gradient 0 / 0
    x = np.random.default_rng(1).uniform(-90, 90, (256, 257)).astype(np.float32)
    fn = getattr(Tensor, name)
    along = fn(Tensor(x)).numpy()
    across = fn(Tensor(x.T.copy())).T.contiguous().numpy()
    np.testing.assert_array_equal(along.view(np.int32), across.view(np.int32))
