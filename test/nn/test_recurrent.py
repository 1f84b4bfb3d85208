"""nn.RNN / LSTM / GRU and their cells against torch.nn's: parameter names, and with torch's weights loaded the
outputs, final states and input gradients over num_layers, bidirectional, batch_first, LSTM's proj_size, given
initial states and unbatched inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import lazygrad.nn as nn
from lazygrad import Tensor
from test.opcheck import randn


def _pair(name: str, *args: Any, **kwargs: Any) -> tuple[Any, torch.nn.Module]:
    ref = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(nn, name)(*args, **kwargs)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return ours, ref


def _flat(out: Any) -> list:
    return [x for o in out for x in (_flat(o) if isinstance(o, tuple) else [o])] if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize(
    "kwargs, shape, with_state",
    [
        ({}, (5, 3, 4), False),
        ({"num_layers": 2, "bidirectional": True}, (4, 2, 4), True),
        ({"batch_first": True, "bias": False}, (2, 6, 4), False),
        ({"num_layers": 3}, (3, 4), True),  # unbatched
    ],
)
def test_recurrent_layers_match_torch(name: str, kwargs: dict, shape: tuple, with_state: bool) -> None:
    ours, ref = _pair(name, 4, 6, **kwargs)
    x = randn(*shape)
    lx, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    lg_args, th_args = [lx], [tx]
    if with_state:
        layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
        batch = () if len(shape) == 2 else (shape[0 if kwargs.get("batch_first") else 1],)
        h, c = randn(layers, *batch, 6, seed=1), randn(layers, *batch, 6, seed=2)
        lg_args.append((Tensor(h), Tensor(c)) if name == "LSTM" else Tensor(h))
        th_args.append((torch.tensor(h), torch.tensor(c)) if name == "LSTM" else torch.tensor(h))
    outs, refs = _flat(ours(*lg_args)), _flat(ref(*th_args))
    assert len(outs) == len(refs)
    loss_l, loss_t = 0, 0
    for i, (a, b) in enumerate(zip(outs, refs)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)
        w = randn(*b.shape, seed=10 + i)
        loss_l, loss_t = loss_l + (a * Tensor(w)).sum(), loss_t + (b * torch.tensor(w)).sum()
    loss_t.backward()
    (g,) = loss_l.gradient(lx)
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-5)


def test_lstm_projection_and_relu_rnn_match_torch() -> None:
    for ours, ref in (_pair("LSTM", 3, 5, proj_size=2, num_layers=2), _pair("RNN", 3, 5, 2, "relu")):
        x = randn(4, 2, 3)
        for a, b in zip(_flat(ours(Tensor(x))), _flat(ref(torch.tensor(x)))):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["RNNCell", "GRUCell", "LSTMCell"])
def test_cells_match_torch(name: str) -> None:
    ours, ref = _pair(name, 4, 3)
    x, h = randn(2, 4), randn(2, 3, seed=1)
    state = (Tensor(h), Tensor(h * 0.5)) if name == "LSTMCell" else Tensor(h)
    ref_state = (torch.tensor(h), torch.tensor(h * 0.5)) if name == "LSTMCell" else torch.tensor(h)
    for a, b in zip(_flat(ours(Tensor(x), state)), _flat(ref(torch.tensor(x), ref_state))):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_recurrent_errors() -> None:
    with pytest.raises(ValueError, match="proj_size"):
        nn.GRU(3, 4, proj_size=2)
    with pytest.raises(RuntimeError, match="input_size"):
        nn.LSTM(3, 4)(Tensor.ones(2, 1, 5))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
