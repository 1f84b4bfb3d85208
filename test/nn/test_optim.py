"""Optimizers against torch.optim over several steps, and the kernel count of one step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from lazygrad import Device, GlobalCounters, Tensor, nn
from lazygrad.nn import optim

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, betas=(0.5, 0.99), weight_decay=0.3)),
]


def _ours(name: str, params: list[Tensor], kw: dict) -> optim.Optimizer:
    kw = dict(kw)
    if "betas" in kw:
        kw["b1"], kw["b2"] = kw.pop("betas")
    return getattr(optim, name)(params, **kw)


def _model() -> tuple[list[Tensor], torch.nn.Module]:
    # seeded: Adam turns a gradient component near 0 into a full +-lr step by its sign, so for a few of torch's
    # random initialisations one float rounding apart in that component moves a weight by 2 * lr (1 seed in 240)
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    params = [Tensor(p.detach().numpy().copy()).requires_grad_() for p in ref.parameters()]
    return params, ref


def _forward(params: list[Tensor], x: Tensor) -> Tensor:
    w1, b1, w2, b2 = params
    return x.linear(w1, b1).tanh().linear(w2, b2)


@pytest.mark.parametrize("name,kw", CASES, ids=lambda c: str(c))
def test_matches_torch_over_steps(name: str, kw: dict) -> None:
    params, ref = _model()
    opt, ropt = _ours(name, params, kw), getattr(torch.optim, name)(ref.parameters(), **kw)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        opt.zero_grad()
        loss = _forward(params, Tensor(x)).sparse_categorical_crossentropy(Tensor(y.astype(np.int32))).backward()
        opt.step()
        ropt.zero_grad()
        rloss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
        rloss.backward()
        ropt.step()
        np.testing.assert_allclose(loss.item(), rloss.item(), rtol=1e-5, atol=1e-6)
    # a GPU fuses multiply-adds (one rounding instead of two): after 5 steps one weight in 35 is off by 3e-5
    rtol = 1e-5 if Device.DEFAULT == "CPU" else 5e-5
    for p, r in zip(params, ref.parameters()):
        np.testing.assert_allclose(p.numpy(), r.detach().numpy(), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize(
    "name,kw,per_param",
    [("SGD", dict(lr=0.1), 1), ("SGD", dict(lr=0.1, momentum=0.9), 2), ("Adam", {}, 2), ("AdamW", {}, 2)],
)
def test_step_is_few_kernels(name: str, kw: dict, per_param: int) -> None:
    params, _ = _model()
    opt = getattr(optim, name)(params, **kw)
    loss = _forward(params, Tensor.rand(4, 5)).sum()
    loss.backward()
    Tensor.realize(loss, *[p.grad for p in params])
    before = GlobalCounters.kernel_count
    opt.step()
    # parameters of different shapes cannot share a kernel; each gets at most `per_param`, plus two for the
    # step-dependent scalars shared by all of them
    assert GlobalCounters.kernel_count - before <= per_param * len(params) + 2


def test_parameter_without_grad_is_left_alone() -> None:
    a, b = Tensor([1.0, 2.0]).requires_grad_(), Tensor([3.0]).requires_grad_()
    opt = optim.Adam([a, b], lr=0.1)
    (a * a).sum().backward()
    opt.step()
    assert b.tolist() == [3.0] and a.tolist() != [1.0, 2.0]


def test_buffers_are_realized_not_updated() -> None:
    bn = nn.BatchNorm(2)
    opt = optim.SGD(nn.state.get_parameters(bn), lr=0.1)
    assert {id(t) for t in opt.params} == {id(bn.weight), id(bn.bias)}
    with Tensor.train():
        bn(Tensor([[1.0, 2.0], [3.0, 6.0]])).sum().backward()
    opt.step()  # lands the pending running-statistics update too
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.2, 0.4], rtol=1e-6)


def test_optimizer_errors() -> None:
    with pytest.raises(ValueError, match="no parameters"):
        optim.SGD([Tensor([1, 2])])
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([Tensor([1.0]).requires_grad_()], nesterov=True)


def test_lr_change_needs_no_recompile() -> None:
    # the learning rate is a device scalar: changing it reuses the compiled kernels
    p = Tensor([1.0, 2.0]).requires_grad_()
    opt: Any = optim.SGD([p], lr=0.5)
    for lr in (0.5, 0.25):
        opt.lr.assign(Tensor(lr, dtype=opt.lr.dtype)).realize()
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    np.testing.assert_allclose(p.numpy(), [0.0, 0.0], atol=1e-7)


def test_loss_and_grads_keep_their_values_after_step() -> None:
    p = Tensor([1.0, 2.0]).requires_grad_()
    opt = optim.SGD([p], lr=0.5)
    loss = (p * p).sum().backward()
    opt.step()
    assert p.tolist() == [0.0, 0.0]
    assert loss.item() == 5.0 and p.grad.tolist() == [2.0, 4.0]  # as computed before the update


def test_muon_matches_torch() -> None:
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((6, 4)).astype(np.float32)
    w, tw = Tensor(w0.copy()).requires_grad_(), torch.tensor(w0.copy(), requires_grad=True)
    opt, topt = optim.Muon([w], lr=0.02, weight_decay=0.1), torch.optim.Muon([tw], lr=0.02, weight_decay=0.1)
    for _ in range(3):
        x = rng.standard_normal((5, 6)).astype(np.float32)
        opt.zero_grad()
        (Tensor(x) @ w).tanh().sum().backward()
        opt.step()
        topt.zero_grad()
        (torch.tensor(x) @ tw).tanh().sum().backward()
        topt.step()
        # torch runs the Newton-Schulz steps in bfloat16 (lazygrad in float32): an update off by ~1% of lr
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), atol=1e-3)
    assert np.abs(w.numpy() - w0).max() > 2e-2  # it moved, by far more than the tolerance
    with pytest.raises(ValueError, match="2-D"):
        optim.Muon([Tensor.ones(3).requires_grad_()])


@pytest.mark.parametrize("adam", [False, True])
def test_lamb_matches_reference(adam: bool) -> None:
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((3, 4)).astype(np.float64)
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-6, 0.1
    w = Tensor(w0.astype(np.float32)).requires_grad_()
    opt = optim.LAMB([w], lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=wd, adam=adam)
    ref, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t in range(1, 4):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        opt.zero_grad()
        (Tensor(x) @ w).square().sum().backward()
        opt.step()
        g = 2 * x.astype(np.float64).T @ (x.astype(np.float64) @ ref)  # d/dw sum((x w)^2)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        up = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * ref
        r1, r2 = np.linalg.norm(ref), np.linalg.norm(up)
        ref = ref - lr * (1.0 if adam or r1 == 0 or r2 == 0 else r1 / r2) * up
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-5)


def _quadratic_steps(opt: optim.Optimizer, w: Tensor, xs: list[np.ndarray], lrs: list[float] | None = None) -> None:
    for i, x in enumerate(xs):
        if lrs is not None:
            opt.lr.assign(Tensor(lrs[i], dtype=opt.lr.dtype)).realize()
        opt.zero_grad()
        (Tensor(x) @ w).square().sum().backward()
        opt.step()


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_classic_momentum_matches_reference(nesterov: bool) -> None:
    """tinygrad's SGD(classic=True): the buffer accumulates lr * g. With a learning rate that changes between steps
    it differs from torch's rule (which the same test without classic follows)."""
    rng = np.random.default_rng(8)
    w0 = rng.standard_normal((3, 4))
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    lrs, mom, wd = [0.05, 0.02, 0.1, 0.03], 0.9, 0.01
    for classic in (True, False):
        w = Tensor(w0.astype(np.float32)).requires_grad_()
        opt = optim.SGD([w], lr=lrs[0], momentum=mom, weight_decay=wd, nesterov=nesterov, classic=classic)
        _quadratic_steps(opt, w, xs, lrs)
        ref, b = w0.copy(), np.zeros_like(w0)
        for x, lr in zip(xs, lrs):
            x = x.astype(np.float64)
            g = 2 * x.T @ (x @ ref) + wd * ref
            g = g * lr if classic else g
            b = mom * b + g
            step = g + mom * b if nesterov else b
            ref = ref - (step if classic else lr * step)
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(classic=False, nesterov=True),
        dict(pre_wd=False, weight_decay=0.1, momentum=0.5),
        dict(tcoef=0.0, momentum=0.0),
        dict(ns_steps=3, ns_coefficients=(3.4445, -4.775, 2.0315), classic=False, pre_wd=False),
    ],
    ids=str,
)
def test_lars_matches_reference(kw: dict) -> None:
    rng = np.random.default_rng(9)
    w0 = rng.standard_normal((4, 3))
    xs = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(3)]
    lr = 0.05
    w = Tensor(w0.astype(np.float32)).requires_grad_()
    opt = optim.LARS([w], lr=lr, **kw)
    _quadratic_steps(opt, w, xs)
    s = dict(momentum=0.9, weight_decay=1e-4, ns_steps=0, ns_coefficients=None, nesterov=False, classic=True)
    s.update(pre_wd=True, tcoef=0.001)
    s.update(kw)
    ref, b = w0.copy(), np.zeros_like(w0)
    for x in xs:
        x = x.astype(np.float64)
        g = 2 * x.T @ (x @ ref)
        r1, r2 = np.linalg.norm(ref), np.linalg.norm(g)
        r = s["tcoef"] * r1 / (r2 + s["weight_decay"] * r1) if s["tcoef"] and r1 > 0 and r2 > 0 else 1.0
        if s["pre_wd"]:
            g = g + s["weight_decay"] * ref
        if s["classic"]:
            g = g * r * lr
        if s["momentum"]:
            b = s["momentum"] * b + g
            g = g + s["momentum"] * b if s["nesterov"] else b
        if s["ns_coefficients"]:
            a_, b_, c_ = s["ns_coefficients"]
            X = g / (np.linalg.norm(g) + 1e-7)
            tr = X.shape[0] > X.shape[1]
            X = X.T if tr else X
            for _ in range(s["ns_steps"]):
                A = X @ X.T
                X = a_ * X + (b_ * A + c_ * A @ A) @ X
            g = X.T if tr else X
        if not s["classic"]:
            g = g * r * lr
        if not s["pre_wd"] and s["weight_decay"]:
            g = g + s["weight_decay"] * lr * ref
        ref = ref - g
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-5)
    assert np.abs(w.numpy() - w0).max() > 1e-5  # it moved


def test_optimizer_group_steps_each_part_in_one_schedule() -> None:
    """tinygrad's OptimizerGroup: Muon for a matrix and AdamW for a vector, stepped together, equal to torch's two
    optimizers stepped one after the other."""
    rng = np.random.default_rng(10)
    w0, b0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    w, b = Tensor(w0.copy()).requires_grad_(), Tensor(b0.copy()).requires_grad_()
    tw, tb = torch.tensor(w0.copy(), requires_grad=True), torch.tensor(b0.copy(), requires_grad=True)
    group = optim.OptimizerGroup(optim.SGD([w], lr=0.1, momentum=0.9), optim.AdamW([b], lr=0.01))
    topts = [torch.optim.SGD([tw], lr=0.1, momentum=0.9), torch.optim.AdamW([tb], lr=0.01)]
    assert group[1].params[0] is b and group.params == [w, b]
    for _ in range(3):
        x = rng.standard_normal((2, 4)).astype(np.float32)
        group.zero_grad()
        loss = (Tensor(x) @ w + b).tanh().sum().backward()
        group.step()
        for o in topts:
            o.zero_grad()
        tloss = (torch.tensor(x) @ tw + tb).tanh().sum()
        tloss.backward()
        for o in topts:
            o.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
    # schedule_step gives every part's assigned tensors, realized by the caller
    group.zero_grad()
    (Tensor(x) @ w + b).sum().backward()
    assert len(group.schedule_step()) >= 4
    with pytest.raises(ValueError, match="at least one"):
        optim.OptimizerGroup()


def test_tinygrads_device_and_fused_arguments() -> None:
    p = Tensor([1.0, 2.0]).requires_grad_()
    for cls in (optim.SGD, optim.Adam, optim.AdamW, optim.LAMB, optim.LARS):
        cls([p], lr=0.1, device=p.device, fused=True)  # the parameters' own device: taken
    with pytest.raises(ValueError, match="device"):
        optim.Adam([p], device="DISK:/dev/null")
