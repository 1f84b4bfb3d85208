"""kernelize._Template.buffers: a new value no tensor asked for (a training step's gradients, the intermediates only
its kernels read) is stored in the buffer, under the node, its template position made two instances before, once
nothing holds them (a step makes no Buffer, allocation, free or node per such value), and never in one something can
still read through. Values against torch."""

import numpy as np
import pytest
import torch

from lazygrad import Tensor, TinyJit
from lazygrad.device import Buffer
from lazygrad.helpers import FRAME_REFS_CHECKED
from lazygrad.nn.optim import SGD, Adam
from test.schedule.test_recycled_aliases import _models, _read, _torch_step

pytestmark = pytest.mark.skipif(
    not FRAME_REFS_CHECKED, reason="recycling is taken only where reference counts were checked"
)


def _forward(params: list[Tensor], x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    w1, b1, w2, b2 = params
    h = (x @ w1.T + b1).relu()
    return (h @ w2.T + b2).sparse_categorical_crossentropy(y), h


def _step(params: list[Tensor], opt, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    opt.zero_grad()
    loss, h = _forward(params, x, y)
    loss.backward()
    opt.step()
    return loss, h


def test_a_step_makes_no_buffer_once_warm(monkeypatch):
    """Every value of a warm step of an MLP of nn.Linear layers comes back from two steps before: no Buffer made (16 a
    step before: 12 values only its kernels read and 4 gradients; the aliases of its in-place writes were recycled
    already), and parameters and gradients still read as torch's."""
    layers: list = []
    params, ref, xn, yn = _models(0, layers)
    l1, l2 = layers
    opt, ropt = Adam(params, lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)

    def step() -> None:
        opt.zero_grad()
        l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
        opt.step()

    with Tensor.train():
        for _ in range(6):  # (the layout is known from the third step on, its values recycled from the fifth)
            step()
            _torch_step(ref, ropt, tx, ty)
        made: list[int] = []
        real = Buffer.__init__
        monkeypatch.setattr(Buffer, "__init__", lambda self, *a, **k: made.append(1) or real(self, *a, **k))
        for _ in range(5):
            step()
            _torch_step(ref, ropt, tx, ty)
        monkeypatch.undo()
    assert made == []
    for p, q in zip(params, ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)


def _keep(how: str, g):
    """What a program keeps of a gradient after a step, in either library, read back at the end."""
    if how == "tensor":
        return g
    if how == "detach":
        return g.detach()
    if how == "view":
        return g.reshape(-1)
    if how == "slice":
        return g[1:3]
    if how == "lazy reader":
        return g * 2
    raise AssertionError(how)


@pytest.mark.parametrize("optim", ["sgd", "adam"])
@pytest.mark.parametrize("how", ["tensor", "detach", "view", "slice", "lazy reader"])
def test_kept_gradients_read_as_torchs(how, optim):
    """Every few steps the gradients are kept; the values of the steps between are recycled, and every kept one reads
    the gradient of its step, as torch's."""
    params, ref, xn, yn = _models(1)
    if optim == "sgd":
        opt, ropt = SGD(params, lr=0.1, momentum=0.9), torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    else:
        opt, ropt = Adam(params, lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
    kept = []
    with Tensor.train():
        for k in range(9):
            _step(params, opt, x, y)
            _torch_step(ref, ropt, tx, ty)
            if k % 3 == 1:
                for p, q in zip(params, ref.parameters()):
                    kept.append((k, _keep(how, p.grad), _keep(how, q.grad.clone())))
    for k, ours, theirs in kept:
        np.testing.assert_allclose(_read(ours), _read(theirs), rtol=1e-5, atol=1e-6, err_msg=f"step {k}, {how}")


def test_a_kept_activation_reads_its_steps_value():
    """A step's hidden activation, kept by the program (the realize stores it: the backward reads it), is never
    recycled: it reads the value of its step (computed from the parameters before that step's update)."""
    params, ref, xn, yn = _models(2)
    opt, ropt = Adam(params, lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
    kept = []
    with Tensor.train():
        for k in range(8):
            w1, b1 = (q.detach().clone() for q in list(ref.parameters())[:2])
            _, h = _step(params, opt, x, y)
            _torch_step(ref, ropt, tx, ty)
            if k % 2 == 0:
                kept.append((k, h, torch.relu(tx @ w1.T + b1)))
    for k, ours, theirs in kept:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {k}")


def test_kept_gradients_beside_a_jit_step():
    """A TinyJit capture holds the buffers its items name: eager steps around it recycle none of them, and gradients
    kept from the eager steps read their steps' values."""
    params, ref, xn, yn = _models(5)
    opt, ropt = Adam(params, lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
    jitted = TinyJit(lambda: _step(params, opt, x, y)[0].realize())
    kept = []
    with Tensor.train():
        for k in range(10):
            if k % 2:
                jitted()
            else:
                _step(params, opt, x, y)
            _torch_step(ref, ropt, tx, ty)
            if k % 2 == 0:
                kept.append((k, params[2].grad.detach(), ref[2].weight.grad.clone()))
                kept.append((k, params[1].grad * 1, ref[0].bias.grad.clone()))
    for k, ours, theirs in kept:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
    for p, q in zip(params, ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
