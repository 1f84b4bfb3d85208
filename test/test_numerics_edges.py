"""Dtypes and gradients at the edges, against torch: index dtypes, pow at 0 and with zero exponents, sigmoid at large
magnitudes, var/std of one element, comparisons in a backward graph, cumprod (exact through zeros and negatives, and
a bounded kernel), integer overflow and integer negative powers."""

import numpy as np
import pytest
import torch

from lazygrad import Tensor, dtypes

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
