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


def test_pack_and_pad_as_torch() -> None:
    from torch.nn.utils import rnn as trnn

    from lazygrad.nn.utils import rnn

    x = randn(5, 4, 3)
    for lengths, first, enforce in (
        ([5, 3, 3, 1], False, True),
        ([2, 5, 1, 4], True, False),
        ([3, 3, 3, 3], False, False),
    ):
        src = x.transpose(1, 0, 2) if first else x
        ours = rnn.pack_padded_sequence(Tensor(src), lengths, batch_first=first, enforce_sorted=enforce)
        ref = trnn.pack_padded_sequence(
            torch.tensor(src), torch.tensor(lengths), batch_first=first, enforce_sorted=enforce
        )
        np.testing.assert_array_equal(ours.data.numpy(), ref.data.numpy())
        assert ours.batch_sizes.tolist() == ref.batch_sizes.tolist()
        for a, b in ((ours.sorted_indices, ref.sorted_indices), (ours.unsorted_indices, ref.unsorted_indices)):
            assert (a is None and b is None) or a.tolist() == b.tolist()
        for total in (None, 7):
            padded, lens = rnn.pad_packed_sequence(ours, batch_first=first, padding_value=-1.0, total_length=total)
            tpadded, tlens = trnn.pad_packed_sequence(ref, batch_first=first, padding_value=-1.0, total_length=total)
            np.testing.assert_array_equal(padded.numpy(), tpadded.numpy())
            assert lens.tolist() == tlens.tolist() and lens.dtype == Tensor([1]).cast("int64").dtype
    seqs = [randn(n, 2, seed=n) for n in (4, 2, 1)]
    packed = rnn.pack_sequence([Tensor(s) for s in seqs])
    np.testing.assert_array_equal(packed.data.numpy(), trnn.pack_sequence([torch.tensor(s) for s in seqs]).data.numpy())
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        rnn.pack_padded_sequence(Tensor(x), [1, 5, 3, 3])
    with pytest.raises(RuntimeError, match="greater than 0"):
        rnn.pack_padded_sequence(Tensor(x), [5, 3, 0, 0])
    with pytest.raises(ValueError, match="total_length"):
        rnn.pad_packed_sequence(rnn.pack_padded_sequence(Tensor(x), [5, 3, 3, 1]), total_length=4)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize(
    "kwargs, with_state",
    [({}, False), ({"num_layers": 2, "bidirectional": True}, True), ({"batch_first": True}, False)],
)
def test_recurrent_layers_take_packed_sequences(name: str, kwargs: dict, with_state: bool) -> None:
    """A packed batch of unsorted lengths: packed output, last states (each sequence's own, in the caller's order) and
    the input's and weights' gradients as torch's."""
    from torch.nn.utils import rnn as trnn

    from lazygrad.nn.utils import rnn

    ours, ref = _pair(name, 3, 5, **kwargs)
    lengths, first = [3, 6, 1, 4], kwargs.get("batch_first", False)
    x0 = randn(4, 6, 3) if first else randn(6, 4, 3)
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    layers = 2 * kwargs.get("num_layers", 1) if kwargs.get("bidirectional") else kwargs.get("num_layers", 1)
    h0 = randn(layers, 4, 5, seed=7)
    state = None
    tstate = None
    if with_state:
        state = (Tensor(h0), Tensor(h0 * 0.5)) if name == "LSTM" else Tensor(h0)
        tstate = (torch.tensor(h0), torch.tensor(h0 * 0.5)) if name == "LSTM" else torch.tensor(h0)
    out, last = ours(rnn.pack_padded_sequence(x, lengths, batch_first=first, enforce_sorted=False), state)
    tout, tlast = ref(trnn.pack_padded_sequence(tx, lengths, batch_first=first, enforce_sorted=False), tstate)
    assert isinstance(out, rnn.PackedSequence)
    np.testing.assert_allclose(out.data.numpy(), tout.data.detach().numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(_flat(last), _flat(tlast)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    padded, _ = rnn.pad_packed_sequence(out, batch_first=first)
    tpadded, _ = trnn.pad_packed_sequence(tout, batch_first=first)
    up = randn(*tpadded.shape, seed=8)
    loss = (padded * Tensor(up)).sum() + sum(t.sum() for t in _flat(last))
    tloss = (tpadded * torch.tensor(up)).sum() + sum(t.sum() for t in _flat(tlast))
    loss.backward()
    tloss.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (key, p), tp in zip(ours.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=key)
