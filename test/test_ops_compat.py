"""tinygrad/torch API compatibility against torch, forward and backward: inverse trig and hyperbolic functions,
softmin, init helpers, randperm, pooling with indices, fixed-size selection, attention options, rearrange, linear
algebra, dtype tables, reductions over empty dims."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad import Tensor
from test.opcheck import check

# *** inverse trig and hyperbolic functions ***

# (name, low, high): the domain interior, where value and derivative are finite
DOMAINS = [
    ("asin", -0.99, 0.99),
    ("acos", -0.99, 0.99),
    ("atan", -300, 300),
    ("sinh", -80, 80),
    ("cosh", -80, 80),
    ("asinh", -300, 300),
    ("acosh", 1.01, 300),
    ("atanh", -0.99, 0.99),
]


@pytest.mark.parametrize("name,low,high", DOMAINS)
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 13)])
def test_unary_inverse(name: str, low: float, high: float, shape: tuple) -> None:
    x = np.random.default_rng(0).uniform(low, high, shape).astype(np.float32)
    fn = lambda t: getattr(t, name)()  # noqa: E731
    check(fn, fn, [x], atol=1e-6, rtol=1e-5, grad_atol=1e-5)


@pytest.mark.parametrize("name", [d[0] for d in DOMAINS])
def test_unary_inverse_float64_and_small(name: str) -> None:
    # tiny arguments (where e^x - e^-x or log(1 + x) would cancel) and float64 precision
    x = np.array([1e-30, -1e-7, 1e-4, 0.3, -0.45, 0.5, 0.9], dtype=np.float64)
    if name == "acosh":
        x = 1 + np.abs(x)
    fn = lambda t: getattr(t, name)()  # noqa: E731
    check(fn, fn, [x], atol=0, rtol=1e-10, grad_atol=0)
    check(fn, fn, [x.astype(np.float32)], atol=0, rtol=5e-5, grad_atol=0)


@pytest.mark.parametrize("name", [d[0] for d in DOMAINS])
def test_unary_inverse_edges(name: str) -> None:
    """Values at the domain's edges and outside it: infinities, NaN, +-1, huge arguments, as torch."""
    x = np.array([0, 1, -1, np.inf, -np.inf, np.nan, 1e30, -1e30, 2, -2, 1e10, -300, 300], dtype=np.float32)
    out = getattr(Tensor(x), name)().numpy()
    ref = getattr(torch.tensor(x), name)().numpy()
    if name in ("sinh", "cosh"):
        keep = np.abs(x) < 80  # torch overflows float32 e^x before halving it near 89
        out, ref = out[keep], ref[keep]
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0)


def test_inverse_gradients_at_edges() -> None:
    # atan has gradient 0 at +-inf, asinh and sinh 1 at 0
    for name, vals in (("atan", [np.inf, -np.inf, 0.0]), ("asinh", [0.0]), ("sinh", [0.0]), ("cosh", [0.0])):
        t = Tensor(np.array(vals, np.float32), requires_grad=True)
        getattr(t, name)().sum().backward()
        r = torch.tensor(vals, requires_grad=True)
        getattr(r, name)().sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=0)


@pytest.mark.parametrize("shape,axis", [((4, 7), -1), ((3, 5, 2), 1), ((1,), 0), ((3, 0), 1), ((0, 4), 0)])
def test_softmin(shape: tuple, axis: int) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    check(lambda t: t.softmin(axis), lambda t: torch.nn.functional.softmin(t, axis), [x])
