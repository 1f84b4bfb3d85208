"""The C renderer's vector spelling, checked against torch where gcc's vectorizer has been seen to go wrong."""

import numpy as np
import pytest
import torch

from lazygrad import Tensor


@pytest.mark.parametrize("shape", [(1, 8, 16, 16), (1, 32, 8, 8), (1, 4, 32, 32), (5, 13, 24, 16, 2)])
def test_select_under_a_broadcast_condition(shape: tuple[int, ...]) -> None:
    """Lanes selecting under one per-row condition (pow's gradient guards a zero exponent so): gcc 12.2 with AVX-512
    compiled the lane-wise spelling of that vector wrongly (every lane but the first came out 0)."""
    rng = np.random.default_rng(0)
    small = (*shape[:-2], 1, 1)
    a = rng.uniform(0.5, 3, shape).astype(np.float32)
    b = rng.uniform(0, 3, small).astype(np.float32)
    b.flat[0] = 0.0  # one row takes the other branch
    x, y = Tensor(a), Tensor(b)
    gx, gy = (x**y).sum().gradient(x, y)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (tx**ty).sum().backward()
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gy.numpy(), ty.grad.numpy(), rtol=1e-3, atol=1e-3)
    sel = (y == 0).where(0.0, x * y)
    np.testing.assert_allclose(sel.numpy(), np.where(b == 0, 0.0, a * b), rtol=1e-6)
