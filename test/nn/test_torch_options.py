"""torch options lazygrad once refused, against torch (values, in-place effects and gradients): Embedding's max_norm
and scale_grad_by_freq, fractional max pooling, AdaptiveLogSoftmaxWithLoss, grid_sample's bicubic and 5-D modes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import lazygrad.nn.functional as F
from lazygrad import Tensor, dtypes, nn
from test.opcheck import randn


def _ints(shape: tuple[int, ...], high: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


def _close(ours: Tensor, ref: torch.Tensor, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=tol, atol=tol)


# *** Embedding(max_norm, norm_type, scale_grad_by_freq) ***


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
@pytest.mark.parametrize("shape, padding_idx", [((9,), None), ((3, 5), 2), ((1,), None)])
def test_embedding_max_norm_renorms_rows_in_place(norm_type, scale_grad_by_freq, shape, padding_idx) -> None:
    w, idx, up = randn(11, 4, seed=1) * 2, _ints(shape, 11), randn(*shape, 4, seed=2)
    kw = {"padding_idx": padding_idx, "max_norm": 1.5, "norm_type": norm_type, "scale_grad_by_freq": scale_grad_by_freq}
    ours, ref = nn.Embedding(11, 4, _weight=Tensor(w), **kw), torch.nn.Embedding(11, 4, _weight=torch.tensor(w), **kw)
    out, tout = ours(Tensor(idx)), ref(torch.tensor(idx))
    _close(out, tout)
    _close(ours.weight, ref.weight)  # the looked-up rows renormalized in place, the others as they were
    (out * Tensor(up)).sum().backward()
    (tout * torch.tensor(up)).sum().backward()
    _close(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_functional_embedding_options(dtype) -> None:
    w, idx, up = (randn(6, 3, seed=4) * 3).astype(dtype), _ints((4, 3), 6, seed=5), randn(4, 3, 3, seed=6)
    ow, tw = Tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = F.embedding(Tensor(idx), ow, max_norm=2.0, scale_grad_by_freq=True)
    with torch.no_grad():  # torch renorms a leaf in place only outside autograd
        TF.embedding(torch.tensor(idx), tw, max_norm=2.0)
    tout = TF.embedding(torch.tensor(idx), tw, scale_grad_by_freq=True)
    assert out.dtype == (dtypes.float32 if dtype == np.float32 else dtypes.float64)
    _close(out, tout)
    _close(ow, tw)
    (out * Tensor(up.astype(dtype))).sum().backward()
    (tout * torch.tensor(up.astype(dtype))).sum().backward()
    _close(ow.grad, tw.grad)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_max_norm_and_scale_grad_by_freq(mode: str) -> None:
    """Values and the renorm in place against torch's EmbeddingBag; the gradient against torch's Embedding with the
    bags reduced by hand: torch 2.13's CPU embedding_bag divides some rows by another row's count (pytorch#190063)."""
    w, idx, offsets = randn(8, 5, seed=7) * 2, _ints((12,), 8, seed=8), [0, 3, 3, 7]
    kw = {"max_norm": 1.0, "scale_grad_by_freq": mode != "max", "mode": mode}
    ours, ref = (
        nn.EmbeddingBag(8, 5, _weight=Tensor(w), **kw),
        torch.nn.EmbeddingBag(8, 5, _weight=torch.tensor(w), **kw),
    )
    out, tout = ours(Tensor(idx), Tensor(np.array(offsets))), ref(torch.tensor(idx), torch.tensor(offsets))
    _close(out, tout)
    _close(ours.weight, ref.weight)
    tw = torch.tensor(w, requires_grad=True)
    with torch.no_grad():
        TF.embedding(torch.tensor(idx), tw, max_norm=1.0)
    rows = TF.embedding(torch.tensor(idx), tw, scale_grad_by_freq=mode != "max")
    reduce = {"sum": lambda r: r.sum(0), "mean": lambda r: r.mean(0), "max": lambda r: r.max(0).values}[mode]
    bags = [reduce(rows[a:b]) if b > a else torch.zeros(5) for a, b in zip(offsets, offsets[1:] + [len(idx)])]
    up = randn(*tout.shape, seed=9)
    (out * Tensor(up)).sum().backward()
    (torch.stack(bags) * torch.tensor(up)).sum().backward()
    _close(ours.weight.grad, tw.grad)
