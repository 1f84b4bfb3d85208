"""lazygrad.autograd against torch.autograd: custom Functions (saved tensors, non-tensor arguments, several inputs and
outputs, setup_context, None gradients, broadcast gradients summed back) and autograd.grad (grad_outputs, higher
order, unused inputs): values and gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import lazygrad.autograd as autograd
from lazygrad import Tensor, TinyJit
from test.opcheck import randn


def _functions(base: Any) -> dict[str, Any]:
    class ScaledExp(base.Function):
        @staticmethod
        def forward(ctx, x, scale):
            y = (x * scale).exp()
            ctx.save_for_backward(y)
            ctx.scale = scale
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y * ctx.scale, None

    class RoundSum(base.Function):  # two inputs (one broadcast), two outputs, a straight-through backward
        @staticmethod
        def forward(ctx, x, w):
            return (x * w).round(), x + w

        @staticmethod
        def backward(ctx, g_round, g_sum):
            return g_round + g_sum, g_round * 2 + g_sum  # the second is (3, 4) for a (4,) input: summed back

    class Clamp(base.Function):  # forward and setup_context apart; the second argument gets no gradient
        @staticmethod
        def forward(x, low):
            return x.clamp(min=low)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.low = inputs[1]

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * (x > ctx.low), None

    return {"ScaledExp": ScaledExp, "RoundSum": RoundSum, "Clamp": Clamp}


def _run(base: Any, tensor: Any) -> tuple[Any, ...]:
    fns = _functions(base)
    x, w = tensor(randn(3, 4), requires_grad=True), tensor(randn(4, seed=1), requires_grad=True)
    y = fns["ScaledExp"].apply(x, 0.5)
    a, b = fns["RoundSum"].apply(y, w)
    again = fns["ScaledExp"].apply(x, -2.0)  # the same input with other constants: a rule of its own
    c = fns["Clamp"].apply(b, 0.3)
    loss = (a * 2).sum() + (c * 3).sum() + (again * 5).sum()
    loss.backward()
    return loss, a, c, x.grad, w.grad


def test_custom_functions_match_torch() -> None:
    ours, ref = _run(autograd, Tensor), _run(torch.autograd, torch.tensor)
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o.numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_custom_function_in_a_jitted_step_matches_eager() -> None:
    scaled_exp = _functions(autograd)["ScaledExp"]
    w0 = randn(5, seed=2) * 0.1

    def step(w: Tensor, x: Tensor) -> Tensor:
        w.grad = None
        loss = scaled_exp.apply(w * x, 0.5).sum()
        loss.backward()
        w.assign(w.detach() - w.grad * 0.1)
        return loss.realize()

    eager, jitted = Tensor(w0, requires_grad=True), Tensor(w0, requires_grad=True)
    jit = TinyJit(step)
    for i in range(4):
        x = Tensor(randn(5, seed=10 + i))
        np.testing.assert_allclose(jit(jitted, x).numpy(), step(eager, x).numpy(), rtol=1e-6)
        np.testing.assert_allclose(jitted.numpy(), eager.numpy(), rtol=1e-6)


def test_function_details_match_torch() -> None:
    class Pair(autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_non_differentiable(y)
            assert ctx.needs_input_grad == (True, False)
            return x * 2, y

        @staticmethod
        def backward(ctx, g, g_y):
            assert g_y is None or float(g_y.abs().sum().item()) == 0
            return g * 2, None

    x = Tensor(randn(3), requires_grad=True)
    doubled, same = Pair.apply(x, Tensor([1, 2, 3]))
    doubled.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0))
    assert same.tolist() == [1, 2, 3]

    class Wrong(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g.sum(0)

    with pytest.raises(RuntimeError, match="invalid gradient"):
        Wrong.apply(Tensor(randn(3, 4), requires_grad=True)).sum().backward()


def test_grad_matches_torch() -> None:
    x0, v0 = randn(4), randn(4, seed=1)
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    unused, tunused = Tensor(randn(2), requires_grad=True), torch.tensor(randn(2), requires_grad=True)
    (g,) = autograd.grad((x**3).sum(), [x], create_graph=True)
    (tg,) = torch.autograd.grad((tx**3).sum(), [tx], create_graph=True)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-5)
    (gg,) = autograd.grad(g, x, grad_outputs=Tensor(v0))  # a Hessian-vector product
    (tgg,) = torch.autograd.grad(tg, tx, grad_outputs=torch.tensor(v0))
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-5)
    assert x.grad is None  # grad leaves .grad alone
    with pytest.raises(RuntimeError, match="not have been used"):
        autograd.grad((x * 2).sum(), [x, unused])
    got = autograd.grad((x * 2).sum(), [x, unused], allow_unused=True)
    want = torch.autograd.grad((tx * 2).sum(), [tx, tunused], allow_unused=True)
    assert got[1] is None and want[1] is None
    with pytest.raises(RuntimeError, match="scalar outputs"):
        autograd.grad(x * 2, [x])
