"""optim.LBFGS against torch.optim.LBFGS: the same iterates, losses and closure calls from the same start."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lazygrad.torch as lt


def _run(mod, w0: np.ndarray, a: np.ndarray, steps: int, **options):
    w = mod.tensor(w0, requires_grad=True)
    b = mod.tensor(np.arange(w0.shape[0], dtype=w0.dtype), requires_grad=True)
    opt = mod.optim.LBFGS([w, b], **options)
    calls, losses = [0], []

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = ((mod.tensor(a) @ w - 1.0) ** 2).sum() + (b * b).sum() * 0.5 + (w**4).sum() * 0.1
        loss.backward()
        return loss

    for _ in range(steps):
        losses.append(opt.step(closure).item())
    return w.detach().numpy(), b.detach().numpy(), losses, calls[0]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"lr": 0.5, "max_iter": 4},
        {"history_size": 2, "max_iter": 6},
        {"max_iter": 10, "max_eval": 5},
        {"tolerance_change": 1e-2},
        {"tolerance_grad": 10.0},
        {"line_search_fn": "strong_wolfe"},
        {"line_search_fn": "strong_wolfe", "lr": 0.3, "max_iter": 5, "history_size": 3},
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lbfgs_matches_torch(options, dtype):
    rng = np.random.default_rng(0)
    w0, a = rng.standard_normal(3).astype(dtype), rng.standard_normal((4, 3)).astype(dtype)
    want = _run(torch, w0, a, 2, **options)
    got = _run(lt, w0, a, 2, **options)
    tol = {"rtol": 1e-9, "atol": 1e-12} if dtype == np.float64 else {"rtol": 1e-4, "atol": 1e-6}
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, **tol)
    assert got[3] == want[3]  # closure calls


def test_lbfgs_refuses_what_it_lacks():
    w = lt.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="only 'strong_wolfe'"):
        lt.optim.LBFGS([w], line_search_fn="armijo")
    with pytest.raises(TypeError, match="closure"):
        lt.optim.LBFGS([w]).step()


@pytest.mark.parametrize("line_search_fn, max_iter", [(None, 8), ("strong_wolfe", 25)])
def test_lbfgs_rosenbrock_matches_torch(line_search_fn, max_iter):
    """Rosenbrock's valley: the line search brackets and zooms (more closure calls than iterations). (Without it 75
    iterations of lr=1 wander, and the last digit's rounding grows to 5e-5.)"""
    got = []
    for mod in (torch, lt):
        xy = mod.tensor([-1.5, 2.0], dtype=mod.float64, requires_grad=True)
        opt = mod.optim.LBFGS([xy], lr=1, max_iter=max_iter, line_search_fn=line_search_fn)
        calls = [0]

        def closure():
            calls[0] += 1
            opt.zero_grad()
            loss = (1 - xy[0]) ** 2 + 100 * (xy[1] - xy[0] ** 2) ** 2
            loss.backward()
            return loss

        losses = [opt.step(closure).item() for _ in range(3)]
        got.append((xy.detach().numpy(), losses, calls[0]))
    (want_xy, want_losses, want_calls), (got_xy, got_losses, got_calls) = got
    np.testing.assert_allclose(got_xy, want_xy, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-7, atol=1e-12)
    assert got_calls == want_calls


def test_lbfgs_takes_one_parameter_group_only():
    rng = np.random.default_rng(1)
    w0, a = rng.standard_normal(3), rng.standard_normal((4, 3))
    got = []
    for mod in (torch, lt):
        w = mod.tensor(w0, requires_grad=True)
        opt = mod.optim.LBFGS([{"params": [w], "lr": 0.5}], max_iter=3)

        def closure():
            opt.zero_grad()
            loss = ((mod.tensor(a) @ w - 1.0) ** 2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        got.append(w.detach().numpy())
        with pytest.raises(ValueError, match="parameter groups"):
            mod.optim.LBFGS([{"params": [w]}, {"params": [mod.zeros(2, requires_grad=True)]}])
    np.testing.assert_allclose(got[1], got[0], rtol=1e-9)
