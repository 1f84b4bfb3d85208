"""Saving and loading optimizer and scheduler state dicts in a loop keeps no device memory alive: each clone of a
value (deepcopy, a state dict loaded) was scheduled as a new graph, whose cached schedule kept its spare buffers."""

from __future__ import annotations

import copy
import gc
from typing import Callable

import numpy as np
import pytest
import torch

from lazygrad import Tensor
from lazygrad.device import Buffer
from lazygrad.nn import optim
from lazygrad.nn.optim import lr_scheduler
from lazygrad.schedule import kernelize


def live_buffers() -> int:
    gc.collect()
    return sum(type(o) is Buffer for o in gc.get_objects())


OPTIMIZERS: dict[str, Callable] = {
    "adam": lambda ps, m: m.Adam(ps, lr=0.01),
    "adamw_amsgrad": lambda ps, m: m.AdamW(ps, lr=0.01, amsgrad=True),
    "sgd_momentum": lambda ps, m: m.SGD(ps, lr=0.1, momentum=0.9),
    "sgd": lambda ps, m: m.SGD(ps, lr=0.1),
}


def _trained(make: Callable, m: object, w: object, steps: int = 2) -> object:
    opt = make([w], m)
    for _ in range(steps):
        opt.zero_grad()
        (w * w * w).sum().backward()
        opt.step()
    return opt


@pytest.mark.parametrize("deep", [True, False])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_state_dict_round_trips_keep_no_buffers(name: str, deep: bool) -> None:
    w = Tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), requires_grad=True)
    opt = _trained(OPTIMIZERS[name], optim, w)
    sched = lr_scheduler.StepLR(opt, step_size=3)
    for _ in range(5):
        opt.load_state_dict(copy.deepcopy(opt.state_dict()) if deep else opt.state_dict())
        sched.load_state_dict(copy.deepcopy(sched.state_dict()))
    before = live_buffers()
    for _ in range(200):
        opt.load_state_dict(copy.deepcopy(opt.state_dict()) if deep else opt.state_dict())
        sched.load_state_dict(copy.deepcopy(sched.state_dict()))
    assert live_buffers() == before
    # and the run goes on as torch's, the loads having changed nothing
    tw = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), requires_grad=True)
    topt = _trained(OPTIMIZERS[name], torch.optim, tw)
    for o, x in ((opt, w), (topt, tw)):
        o.zero_grad()
        (x * x * x).sum().backward()
        o.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_clones_share_one_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone's number keeps two clones of one value two tensors; the schedule cache keys them by position, so a
    loop of clones schedules once (each was a new cached schedule, 256 of them kept with their buffers)."""
    monkeypatch.setattr(kernelize, "_templates", {})  # (a full cache evicts as it inserts: its size says nothing)
    x = Tensor.arange(6).float().realize()
    for _ in range(3):
        x.clone().realize()
    before = len(kernelize._templates)
    copies = [x.clone().realize() for _ in range(50)]
    assert len(kernelize._templates) == before
    a, b = x.clone(), x.clone()
    Tensor.realize(a, b)  # two clones of one value in one schedule: two buffers
    a.assign(a + 1).realize()
    np.testing.assert_array_equal(b.numpy(), np.arange(6))
    np.testing.assert_array_equal(a.numpy(), np.arange(6) + 1)
    np.testing.assert_array_equal(copies[-1].numpy(), np.arange(6))
