"""Pending gradients (gradient.py _GradProgram.run, tensor.py _PendingGrad): a backward that replays a known gradient
program leaves the gradients unbuilt until they are read or an optimizer step realizes them. Every way of reaching
p.grad still gives torch's values, step after step."""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor
from lazygrad import tensor as tensor_module
from lazygrad.nn import optim
from lazygrad.uop import program

STEPS = 5


@pytest.fixture(autouse=True)
def _no_sharded(monkeypatch):
    # a sharded tensor another test made turns pending gradients off (and the unbuilt updates, see test_eager_overhead)
    monkeypatch.setattr(Device, "multi_seen", False)


def _models(seed: int = 0) -> tuple[list[Tensor], torch.nn.Module]:
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    params = [Tensor(p.detach().numpy().copy()).requires_grad_() for p in ref.parameters()]
    return params, ref


def _data(i: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(i)
    return rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)


def _loss(params: list[Tensor], x: np.ndarray, y: np.ndarray) -> Tensor:
    w1, b1, w2, b2 = params
    return Tensor(x).linear(w1, b1).relu().linear(w2, b2).sparse_categorical_crossentropy(Tensor(y.astype(np.int32)))


def _ref_loss(ref: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))


def _close(ours: Tensor, theirs: torch.Tensor) -> None:
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


def _train(between: Callable[[int, list[Tensor], torch.nn.Module], None]) -> None:
    """Adam steps against torch's, `between(step, params, ref)` run after backward and before the step; every
    gradient and parameter checked after each step."""
    params, ref = _models()
    opt, ropt = optim.Adam(params, lr=0.01), torch.optim.Adam(ref.parameters(), lr=0.01)
    for i in range(STEPS):
        x, y = _data(i)
        opt.zero_grad()
        _loss(params, x, y).backward()
        ropt.zero_grad()
        _ref_loss(ref, x, y).backward()
        between(i, params, ref)
        opt.step()
        ropt.step()
        for p, r in zip(params, ref.parameters()):
            _close(p.grad, r.grad)
            _close(p, r)


def test_gradients_are_pending_until_read():
    """After a few steps, backward leaves the gradients pending; reading one builds its run, and every gradient of the
    run is a plain tensor after; the step realizes pending ones without building them."""
    kinds = []

    def between(i: int, params: list[Tensor], ref: torch.nn.Module) -> None:
        kinds.append([type(p.grad) for p in params])
        if i == STEPS - 1:
            _close(params[2].grad, ref[2].weight.grad)
            assert all(type(p.grad) is Tensor for p in params)

    _train(between)
    assert all(k is tensor_module._PendingGrad for k in kinds[-2])
    assert all(k is Tensor for k in kinds[0])


@pytest.mark.parametrize("read", ["numpy", "shape", "expression", "norm", "assign"])
def test_reading_a_pending_gradient_before_the_step(read):
    """A gradient read between backward and the step, in any way: torch's values, and the step's update is torch's."""

    def between(i: int, params: list[Tensor], ref: torch.nn.Module) -> None:
        g = params[0].grad
        if read == "numpy":
            _close(g, ref[0].weight.grad)
        elif read == "shape":
            assert g.shape == tuple(ref[0].weight.grad.shape)
        elif read == "expression":
            _close(g * 2 + params[1].grad.sum(), ref[0].weight.grad * 2 + ref[0].bias.grad.sum())
        elif read == "norm":
            _close(g.square().sum().sqrt(), ref[0].weight.grad.square().sum().sqrt())
        else:  # clipping in place, as clip_grad_norm_ writes
            g.assign(g * 0.5)
            with torch.no_grad():
                ref[0].weight.grad.mul_(0.5)

    _train(between)


def test_accumulated_gradients():
    """Two backward calls without zero_grad add up (the second adds to a pending gradient), as torch's."""
    params, ref = _models(1)
    for i in range(STEPS):
        for p in params:
            p.grad = None
        ref.zero_grad()
        for j in range(2):
            x, y = _data(10 * i + j)
            _loss(params, x, y).backward()
            _ref_loss(ref, x, y).backward()
        for p, r in zip(params, ref.parameters()):
            _close(p.grad, r.grad)


def test_zero_grad_drops_pending_gradients():
    """Gradients dropped unread (zero_grad, set to None) leave the next backward and step as torch's."""

    def between(i: int, params: list[Tensor], ref: torch.nn.Module) -> None:
        for p in params:
            p.grad = None
        ref.zero_grad()
        x, y = _data(100 + i)
        _loss(params, x, y).backward()
        _ref_loss(ref, x, y).backward()

    _train(between)


def test_retain_grad_and_hooks():
    """A computed tensor's retained gradient and a hook on a parameter's gradient: torch's values, every step."""
    params, ref = _models(2)
    hooked = []
    for i in range(STEPS):
        x, y = _data(i)
        for p in params:
            p.grad = None
        ref.zero_grad()
        w1, b1, w2, b2 = params
        h = Tensor(x).linear(w1, b1)
        h.retain_grad()
        h.relu().linear(w2, b2).sparse_categorical_crossentropy(Tensor(y.astype(np.int32))).backward()
        rh = ref[0](torch.from_numpy(x))
        rh.retain_grad()
        torch.nn.functional.cross_entropy(ref[2](ref[1](rh)), torch.from_numpy(y)).backward()
        _close(h.grad, rh.grad)
        for p, r in zip(params, ref.parameters()):
            _close(p.grad, r.grad)
    handle = params[1].register_hook(lambda g: g * 3)
    try:
        for p in params:
            p.grad = None
        x, y = _data(7)
        _loss(params, x, y).backward()
        ref.zero_grad()
        _ref_loss(ref, x, y).backward()
        hooked.append(params[1].grad.numpy())
        np.testing.assert_allclose(hooked[0], ref[0].bias.grad.numpy() * 3, rtol=1e-5, atol=1e-6)
    finally:
        handle.remove()


def test_no_grad_backward():
    """backward inside no_grad (the graph was built outside): torch's gradients."""
    params, ref = _models(3)
    for i in range(STEPS):
        x, y = _data(i)
        for p in params:
            p.grad = None
        ref.zero_grad()
        loss = _loss(params, x, y)
        with Tensor.no_grad():
            loss.backward()
        _ref_loss(ref, x, y).backward()
        for p, r in zip(params, ref.parameters()):
            _close(p.grad, r.grad)


def test_write_into_a_parameter_before_the_step():
    """A parameter written in place between backward and the step: the pending gradients read it as it was (torch
    computed them at backward), and the step updates the written value."""

    def between(i: int, params: list[Tensor], ref: torch.nn.Module) -> None:
        params[2].assign(params[2] * 0.9).realize()
        with torch.no_grad():
            ref[2].weight.mul_(0.9)

    _train(between)


def test_step_after_an_unrealized_write_into_a_parameter():
    """The same write left lazy: the step's realize computes the pending gradients before it lands."""

    def between(i: int, params: list[Tensor], ref: torch.nn.Module) -> None:
        params[0].assign(params[0] + 0.01)
        with torch.no_grad():
            ref[0].weight.add_(0.01)

    _train(between)


def test_pending_gradients_beside_another_training_thread():
    """Two threads training their own models at once (beside a regular thread nothing is left pending): each ends
    with torch's parameters."""
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def train(seed: int) -> None:
        try:
            params, ref = _models(seed)
            opt, ropt = optim.Adam(params, lr=0.01), torch.optim.Adam(ref.parameters(), lr=0.01)
            for i in range(STEPS):
                x, y = _data(i)
                opt.zero_grad()
                _loss(params, x, y).backward()
                opt.step()
                ropt.zero_grad()
                _ref_loss(ref, x, y).backward()
                ropt.step()
            results[seed] = [p.numpy() for p in params] + [r.detach().numpy() for r in ref.parameters()]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=train, args=(s,)) for s in (4, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for out in results.values():
        for ours, theirs in zip(out[:4], out[4:]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_no_unbuilt_node_outlives_a_step():
    """After the step nothing holds an Unbuilt (the gradients hold their stored buffers), and a gradient read after the
    step is a plain tensor of torch's values."""
    import gc

    def between(i: int, params: list[Tensor], ref: torch.nn.Module) -> None:
        pass

    _train(between)
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is program.Unbuilt and o is not program.FILLER]


def test_a_kept_computed_tensor_leaves_the_gradients_built(monkeypatch):
    """A step that keeps a computed tensor alive (the digits CNN's logits, read for the accuracy) gives it a gradient
    no optimizer stores, which reads the weights the step overwrites: the step's realize would compute it first and
    build the pending run, and with it the update's. Backward builds the gradients then, as before pending ones, and
    the update stays unbuilt from the third step on; every value torch's (the kept tensor's gradient as torch's
    retained one)."""
    params, ref = _models(2)
    opt, ropt = optim.Adam(params, lr=0.01), torch.optim.Adam(ref.parameters(), lr=0.01)
    builds = [0]
    build = program.UnbuiltRun.build

    def counting(self: program.UnbuiltRun) -> list:
        builds[0] += self.vals is None
        return build(self)

    monkeypatch.setattr(program.UnbuiltRun, "build", counting)
    for i in range(STEPS):
        x, y = _data(200 + i)
        if i == 2:
            builds[0] = 0  # (the first unbuilt update builds once: its step's layout is made over its nodes)
        opt.zero_grad()
        w1, b1, w2, b2 = params
        logits = Tensor(x).linear(w1, b1).relu().linear(w2, b2)
        logits.sparse_categorical_crossentropy(Tensor(y.astype(np.int32))).backward()
        ropt.zero_grad()
        rlogits = ref(torch.from_numpy(x))
        rlogits.retain_grad()
        torch.nn.functional.cross_entropy(rlogits, torch.from_numpy(y)).backward()
        assert all(type(p.grad) is Tensor for p in params)
        opt.step()
        ropt.step()
        _close(logits.grad, rlogits.grad)
        for p, r in zip(params, ref.parameters()):
            _close(p.grad, r.grad)
            _close(p, r)
    assert builds[0] == 0
