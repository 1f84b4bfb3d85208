"""Random training programs against torch: optimizers (SGD with and without momentum, Adam, AdamW) over steps whose
batch size changes, taken as `step()`, `step(also=)` or `schedule_step()`, with reads of losses, gradients and
parameters between steps, parameters halved in place, zero_grad skipped (gradients accumulate) and losses kept to be
read at the end. The repeated step replays a recorded program with its update's nodes left unbuilt (optim.py,
_StepProgram); every read and write here must see torch's values.

OPTIM_PROGRAM_EXAMPLES=N runs N programs (default 12)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lazygrad import Device, Tensor
from lazygrad.nn.optim import SGD, Adam, AdamW
from test.helpers import counting_calls

EXAMPLES = int(os.environ.get("OPTIM_PROGRAM_EXAMPLES", "12"))
IN, HIDDEN, OUT = 5, 7, 3

OPTIMIZERS = [
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.05, "momentum": 0.9}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("adam", {"lr": 0.01}),
    ("adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("adamw", {"lr": 0.01, "weight_decay": 0.1}),
]
OURS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}
THEIRS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}

step_actions = st.fixed_dictionaries(
    {
        "batch": st.sampled_from([1, 3, 8]),
        "loss": st.sampled_from(["ce", "mse"]),
        "how": st.sampled_from(["step", "also", "schedule"]),
        "zero_grad": st.booleans(),
        "read": st.sampled_from(["none", "loss", "grad", "param"]),
        "halve": st.booleans(),
        "keep_loss": st.booleans(),
    }
)


def _models(name: str, kw: dict, rng: np.random.Generator) -> tuple:
    """The MLP's parameters (same values) and the named optimizer over them, ours and torch's."""
    init = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in [(IN, HIDDEN), (HIDDEN,), (HIDDEN, OUT), (OUT,)]]
    ours = [Tensor(v.copy(), requires_grad=True) for v in init]
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in init]
    return ours, theirs, OURS[name](ours, **kw), THEIRS[name](theirs, **kw)


def _forward(params, x, y, kind, lib):
    w1, b1, w2, b2 = params
    if lib == "ours":
        h = (x @ w1 + b1).relu()
        out = h @ w2 + b2
        return out.cross_entropy(y) if kind == "ce" else ((out - y.one_hot(OUT).float()) ** 2).mean()
    h = torch.relu(x @ w1 + b1)
    out = h @ w2 + b2
    if kind == "ce":
        return torch.nn.functional.cross_entropy(out, y)
    return ((out - torch.nn.functional.one_hot(y, OUT).float()) ** 2).mean()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opt=st.sampled_from(range(len(OPTIMIZERS))), steps=st.lists(step_actions, min_size=1, max_size=6),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_random_training_programs_match_torch(opt: int, steps: list[dict], seed: int) -> None:
    name, kw = OPTIMIZERS[opt]
    rng = np.random.default_rng(seed)
    ours, theirs, our_opt, their_opt = _models(name, kw, rng)
    kept: list[tuple[Tensor, torch.Tensor]] = []
    for i, a in enumerate(steps):
        x = rng.standard_normal((a["batch"], IN)).astype(np.float32)
        y = rng.integers(0, OUT, a["batch"])
        if a["zero_grad"]:
            our_opt.zero_grad()
            their_opt.zero_grad()
        loss = _forward(ours, Tensor(x), Tensor(y.astype(np.int32)), a["loss"], "ours")
        their_loss = _forward(theirs, torch.from_numpy(x), torch.from_numpy(y), a["loss"], "torch")
        loss.backward()
        their_loss.backward()
        if a["how"] == "step":
            our_opt.step()
        elif a["how"] == "also":
            our_opt.step(also=[loss])
        else:
            Tensor.realize(loss, *our_opt.schedule_step())
        their_opt.step()
        what = f"step {i} of {steps} ({name} {kw})"
        if a["read"] == "loss":
            np.testing.assert_allclose(loss.item(), their_loss.item(), rtol=1e-4, atol=1e-5, err_msg=what)
        elif a["read"] == "grad":
            np.testing.assert_allclose(ours[0].grad.numpy(), theirs[0].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=what)
        elif a["read"] == "param":
            np.testing.assert_allclose(ours[2].numpy(), theirs[2].detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=what)
        if a["keep_loss"]:
            kept.append((loss, their_loss))
        if a["halve"]:
            ours[0].assign(ours[0].detach() * 0.5)
            with torch.no_grad():
                theirs[0].mul_(0.5)
    for j, (p, q) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=f"param {j}: {steps}")
    for loss, their_loss in kept:
        np.testing.assert_allclose(loss.item(), their_loss.item(), rtol=1e-4, atol=1e-5, err_msg=str(steps))


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_a_halved_parameter_between_replayed_steps(name: str) -> None:
    """The same step replayed (its update unbuilt) after an in-place write into a parameter reads the new values."""
    kw = dict(OPTIMIZERS[1 if name == "sgd" else 3][1])
    rng = np.random.default_rng(1)
    ours, theirs, our_opt, their_opt = _models(name, kw, rng)
    for i in range(5):
        x = rng.standard_normal((4, IN)).astype(np.float32)
        y = rng.integers(0, OUT, 4)
        our_opt.zero_grad()
        their_opt.zero_grad()
        _forward(ours, Tensor(x), Tensor(y.astype(np.int32)), "ce", "ours").backward()
        _forward(theirs, torch.from_numpy(x), torch.from_numpy(y), "ce", "torch").backward()
        our_opt.step()
        their_opt.step()
        if i % 2:
            ours[1].assign(ours[1].detach() * 0.5)
            with torch.no_grad():
                theirs[1].mul_(0.5)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, kw", [OPTIMIZERS[1], OPTIMIZERS[3], OPTIMIZERS[4]])
@pytest.mark.parametrize("read", ["none", "grad"])
def test_replayed_step_with_one_gradient_node_for_two_parameters(monkeypatch, name: str, kw: dict, read: str) -> None:
    """Two biases added to one output have one gradient node (a residual block's two BatchNorm biases): the later
    bias's gradient is a copy (each .grad a memory of its own), made by the gradient program, so the later steps
    replay the update (no update code runs) and leave both programs' nodes unbuilt; parameters, state and both .grad
    stay torch's."""
    from lazygrad.nn import optim
    from lazygrad.uop import program

    rng = np.random.default_rng(2)
    init = [rng.standard_normal(s).astype(np.float32) * 0.5 for s in [(IN, OUT), (OUT,), (OUT,)]]
    ours = [Tensor(v.copy(), requires_grad=True) for v in init]
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in init]
    our_opt, their_opt = OURS[name](ours, **kw), THEIRS[name](theirs, **kw)
    updates = [0]
    update = type(our_opt)._update

    def counted(self, *args):
        updates[0] += 1
        return update(self, *args)

    monkeypatch.setattr(type(our_opt), "_update", counted)
    monkeypatch.setattr(optim, "_step_programs", {})
    # (a sharded tensor seen by an earlier test in this process turns pending gradients off: backward builds them)
    monkeypatch.setattr(Device, "multi_seen", False)
    builds = counting_calls(monkeypatch, program.UnbuiltRun, "build")
    for i in range(5):
        x = rng.standard_normal((4, IN)).astype(np.float32)
        y = rng.integers(0, OUT, 4)
        our_opt.zero_grad()
        their_opt.zero_grad()
        w, b1, b2 = ours
        (Tensor(x) @ w + b1 + b2).cross_entropy(Tensor(y.astype(np.int32))).backward()
        tw, tb1, tb2 = theirs
        torch.nn.functional.cross_entropy(torch.from_numpy(x) @ tw + tb1 + tb2, torch.from_numpy(y)).backward()
        if read == "grad" and i % 2:
            np.testing.assert_allclose(b2.grad.numpy(), tb2.grad.numpy(), rtol=1e-5, atol=1e-6)
        built = builds[0]
        our_opt.step()
        their_opt.step()
        if read == "none" and i >= 2:
            assert builds[0] == built
        for p, q in zip(ours, theirs):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
        b1.grad.assign(b1.grad * 0)  # its own memory: the other gradient keeps its value
        np.testing.assert_allclose(b2.grad.numpy(), tb2.grad.numpy(), rtol=1e-5, atol=1e-6)
    # the first step's code only (and the first step's reading a gradient first: its key is another)
    assert updates[0] == 3 * (1 + (read == "grad"))
