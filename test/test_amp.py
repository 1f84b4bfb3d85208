"""lazygrad.amp against torch.amp: autocast's dtypes per op and device kind, values to bfloat16 precision, gradients
of float32 parameters, the block's end; GradScaler's scale over steps with overflowing ones skipped, its weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad import Tensor, amp, dtypes
from lazygrad.nn.optim import SGD
from test.opcheck import randn


def test_autocast_runs_products_in_bfloat16_and_losses_in_float32_as_torch() -> None:
    x0, w0, k0 = randn(4, 8), randn(3, 8, seed=1), randn(2, 1, 3, 3, seed=2)
    x, w = Tensor(x0), Tensor(w0, requires_grad=True)
    tx, tw = torch.tensor(x0), torch.tensor(w0, requires_grad=True)
    target = np.array([0, 1, 2, 0])
    with amp.autocast("cpu"):
        y = x.linear(w)
        conv = Tensor(x0.reshape(2, 1, 4, 4)).conv2d(Tensor(k0))
        loss = y.cross_entropy(Tensor(target))
        soft = y.softmax(-1)
    with torch.autocast("cpu"):
        ty = torch.nn.functional.linear(tx, tw)
        tconv = torch.nn.functional.conv2d(torch.tensor(x0.reshape(2, 1, 4, 4)), torch.tensor(k0))
        tloss = torch.nn.functional.cross_entropy(ty, torch.tensor(target))
        tsoft = ty.softmax(-1)
    for ours, ref in ((y, ty), (conv, tconv), (loss, tloss), (soft, tsoft)):
        assert str(ours.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1], (ours.dtype, ref.dtype)
        np.testing.assert_allclose(ours.float().numpy(), ref.float().detach().numpy(), rtol=2e-2, atol=2e-2)
    loss.backward()
    tloss.backward()
    assert w.grad.dtype == dtypes.float32
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=5e-2, atol=2e-2)
    assert x.linear(w).dtype == dtypes.float32  # the block is over (a composite replayed inside it is keyed apart)


def test_autocast_forms() -> None:
    x, w = Tensor(randn(2, 3)), Tensor(randn(3, 3, seed=1))

    @amp.autocast("cpu", dtype="float16")
    def product() -> Tensor:
        with amp.autocast("cpu", enabled=False):
            inner = x @ w
        return x @ w, inner

    half, full = product()
    assert half.dtype == dtypes.float16 and full.dtype == dtypes.float32
    with amp.autocast("cuda"):  # another kind of device: CPU tensors are left alone, as torch's
        assert (x @ w).dtype == dtypes.float32
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        amp.autocast("cpu", dtype=dtypes.float64)


def test_grad_scaler_matches_torch() -> None:
    """Scale grows every 2 good steps, backs off and skips the step where the loss overflows to inf."""
    w0, x0 = randn(3, 2), randn(4, 3, seed=1)
    w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt, topt = SGD([w], lr=0.1), torch.optim.SGD([tw], lr=0.1)
    options = dict(init_scale=2.0**10, growth_interval=2)
    scaler, tscaler = amp.GradScaler("cpu", **options), torch.amp.GradScaler("cpu", **options)
    for step in range(7):
        big = 1e38 if step in (2, 5) else 1.0  # the scaled loss overflows float32
        for s, o, loss in (
            (scaler, opt, (Tensor(x0) @ w).square().sum() * big),
            (tscaler, topt, (torch.tensor(x0) @ tw).square().sum() * big),
        ):
            o.zero_grad()
            s.scale(loss).backward()
            s.unscale_(o)
            s.step(o)
            s.update()
        assert scaler.get_scale() == tscaler.get_scale(), step
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert scaler.state_dict()["scale"] == tscaler.state_dict()["scale"]
    with pytest.warns(UserWarning, match="not available"):
        off = amp.GradScaler("metal")
    assert not off.is_enabled() and off.scale(Tensor([1.0])).item() == 1.0
