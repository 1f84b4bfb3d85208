"""A model and optimizer copied (copy.deepcopy, pickle) train on their own: each side as a torch twin, values and
gradients, whatever made the parameters leaves (a module's init, or an optimizer given plain tensors)."""

from __future__ import annotations

import copy
import pickle
from typing import Callable

import numpy as np
import pytest
import torch

from lazygrad import Tensor, nn
from lazygrad.nn import optim

COPIES: dict[str, Callable] = {"deepcopy": copy.deepcopy, "pickle": lambda x: pickle.loads(pickle.dumps(x))}


def _step(layers: list, opt: object, x: np.ndarray, y: np.ndarray, m: object) -> None:
    opt.zero_grad()
    out = (torch.tensor if m is torch else Tensor)(x)
    for layer in layers:
        out = layer(out)
    ((out - (torch.tensor if m is torch else Tensor)(y)) ** 2).mean().backward()
    opt.step()


@pytest.mark.parametrize("plain", [True, False])
@pytest.mark.parametrize("how", list(COPIES))
def test_copied_model_and_optimizer_train_apart(how: str, plain: bool) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    ours, theirs = [nn.Linear(4, 6), nn.Linear(6, 2)], [torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)]
    for a, b in zip(ours, theirs):
        w, bias = (rng.standard_normal(tuple(t.shape)).astype(np.float32) * 0.3 for t in (b.weight, b.bias))
        b.weight.data, b.bias.data = torch.tensor(w), torch.tensor(bias)
        if plain:  # (requires_grad unset: the optimizer makes them leaves)
            a.weight, a.bias = Tensor(w.copy()), Tensor(bias.copy())
        else:
            a.weight.assign(Tensor(w)), a.bias.assign(Tensor(bias))
    params = [p for layer in ours for p in (layer.weight, layer.bias)]
    opt, topt = optim.Adam(params, lr=0.01), torch.optim.Adam([p for t in theirs for p in t.parameters()], lr=0.01)
    _step(ours, opt, x, y, Tensor), _step(theirs, topt, x, y, torch)
    ours2, opt2 = COPIES[how]((ours, opt))
    theirs2 = copy.deepcopy(theirs)
    topt2 = torch.optim.Adam([p for t in theirs2 for p in t.parameters()], lr=0.01)
    topt2.load_state_dict(copy.deepcopy(topt.state_dict()))
    for _ in range(3):
        _step(ours, opt, x, y, Tensor), _step(theirs, topt, x, y, torch)
    for _ in range(2):
        _step(ours2, opt2, x, y, Tensor), _step(theirs2, topt2, x, y, torch)
    for a_side, b_side in ((ours, theirs), (ours2, theirs2)):
        for a, b in zip(a_side, b_side):
            np.testing.assert_allclose(a.weight.numpy(), b.weight.detach().numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(a.weight.grad.numpy(), b.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
