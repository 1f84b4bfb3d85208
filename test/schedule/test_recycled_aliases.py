"""kernelize._Template.buffers: an in-place write's new value is read through an alias of the written memory, recycled
from the instance two before once nothing holds it (an optimizer step writes every parameter and state: no Buffer,
node or death per write), and never one that something can still read through. Values against torch."""

import numpy as np
import pytest
import torch

from lazygrad import Tensor, TinyJit
from lazygrad.device import Buffer
from lazygrad.helpers import FRAME_REFS_CHECKED
from lazygrad.nn import Linear
from lazygrad.nn.optim import SGD, Adam
from lazygrad.nn.state import get_parameters

pytestmark = pytest.mark.skipif(
    not FRAME_REFS_CHECKED, reason="recycling is taken only where reference counts were checked"
)


def _aliases(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the aliases Buffers make."""
    made: list[int] = []
    real = Buffer.alias

    def counting(self):
        made.append(1)
        return real(self)

    monkeypatch.setattr(Buffer, "alias", counting)
    return made


def _models(seed: int = 0, layers: list | None = None) -> tuple[list[Tensor], torch.nn.Module, np.ndarray, np.ndarray]:
    """Our 6-8-3 MLP and torch's with the same weights, and a batch; `layers` receives our two Linear layers."""
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    l1, l2 = Linear(6, 8), Linear(8, 3)
    for ours, theirs in ((l1, ref[0]), (l2, ref[2])):
        ours.weight.assign(Tensor(theirs.weight.detach().numpy().copy())).realize()
        ours.bias.assign(Tensor(theirs.bias.detach().numpy().copy())).realize()
    if layers is not None:
        layers += [l1, l2]
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5).astype(np.int64)
    return get_parameters([l1, l2]), ref, x, y


def _step(params: list[Tensor], opt, x: Tensor, y: Tensor) -> Tensor:
    w1, b1, w2, b2 = params
    opt.zero_grad()
    loss = ((x @ w1.T + b1).relu() @ w2.T + b2).sparse_categorical_crossentropy(y).backward()
    opt.step()
    return loss


def _torch_step(ref: torch.nn.Module, opt, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    opt.step()


def test_a_step_makes_no_alias_once_warm(monkeypatch):
    """Each write's alias comes back from two steps before: none made (14 a step before, one per parameter, moment and
    Adam's beta powers)."""
    params, _, xn, yn = _models()
    opt = Adam(params, lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    with Tensor.train():
        for _ in range(4):
            _step(params, opt, x, y)
        made = _aliases(monkeypatch)
        for _ in range(5):
            _step(params, opt, x, y)
    assert made == []


def _keep(how: str, p):
    """What a program keeps of parameter p after a step, in either library, and how it reads it back at the end
    (torch's semantics: a detached tensor or view shares the memory the optimizer writes, a computed one does not)."""
    if how == "detach":
        return p.detach()
    if how == "view":
        return p.detach().reshape(-1)
    if how == "slice":
        return p.detach()[1:3]
    if how == "lazy reader":  # lazygrad: computed before the next write into p (torch computed it at once)
        return p.detach() * 2
    if how == "clone":
        return p.detach().clone()
    raise AssertionError(how)


def _read(t) -> np.ndarray:
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


@pytest.mark.parametrize("how", ["detach", "view", "slice", "lazy reader", "clone"])
def test_kept_parameters_read_as_torchs(how):
    """Every few steps a parameter (and a moment) is kept; the aliases of the steps between are recycled, and every
    kept one reads what torch's reads: the memory's latest values where it shares the memory, else the value kept."""
    params, ref, xn, yn = _models(1)
    opt, ropt = Adam(params, lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
    kept = []
    with Tensor.train():
        for k in range(9):
            _step(params, opt, x, y)
            _torch_step(ref, ropt, tx, ty)
            if k % 3 == 1:
                kept.append((k, _keep(how, params[0]), _keep(how, list(ref.parameters())[0])))
                kept.append((k, _keep(how, opt.m[2]), _keep(how, ropt.state[ref[2].weight]["exp_avg"])))
    for k, ours, theirs in kept:
        np.testing.assert_allclose(_read(ours), _read(theirs), rtol=1e-5, atol=1e-6, err_msg=f"step {k}, {how}")
    for p, q in zip(params, ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_kept_old_node_is_never_recycled():
    """A parameter's node kept from before a step (its value then, read through the node: the memory's latest) and a
    lazy graph over it built before the step: neither changes what recycled aliases show."""
    params, ref, xn, yn = _models(2)
    opt, ropt = SGD(params, lr=0.1, momentum=0.9), torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
    nodes, lazy, want = [], [], []
    with Tensor.train():
        for k in range(8):
            if k % 2 == 0:
                nodes.append(params[2].uop)
                lazy.append(params[2] + 1)  # realized after the loop: computed before the write, as torch's
                want.append(list(ref.parameters())[2].detach().numpy() + 1)
            _step(params, opt, x, y)
            _torch_step(ref, ropt, tx, ty)
    latest = list(ref.parameters())[2].detach().numpy()
    for node in nodes:
        np.testing.assert_allclose(Tensor(node).numpy(), latest, rtol=1e-5, atol=1e-6)
    for got, w in zip(lazy, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-6)


def test_two_models_of_one_structure_stepped_in_turn():
    """One template, two models' memories: a spare aliasing the other model's memory is never taken."""
    runs = [_models(s) for s in (3, 4)]
    opts = [(Adam(p, lr=1e-2), torch.optim.Adam(r.parameters(), lr=1e-2)) for p, r, _, _ in runs]
    with Tensor.train():
        for _ in range(6):
            for (params, ref, xn, yn), (opt, ropt) in zip(runs, opts):
                _step(params, opt, Tensor(xn), Tensor(yn.astype(np.int32)))
                _torch_step(ref, ropt, torch.from_numpy(xn), torch.from_numpy(yn))
    for params, ref, _, _ in runs:
        for p, q in zip(params, ref.parameters()):
            np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_jit_step_beside_eager_steps():
    """A TinyJit capture holds the buffers its items name: eager steps around it recycle none of them."""
    params, ref, xn, yn = _models(5)
    opt, ropt = Adam(params, lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn.astype(np.int32)).realize()
    tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
    jitted = TinyJit(lambda: _step(params, opt, x, y).realize())
    with Tensor.train():
        for k in range(8):
            if k % 2:
                jitted()
            else:
                _step(params, opt, x, y)
            _torch_step(ref, ropt, tx, ty)
    for p, q in zip(params, ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
