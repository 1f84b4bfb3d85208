"""Autograd (lazygrad/gradient.py and Tensor.backward/gradient): every derivative rule against torch, and PyTorch's
semantics for requires_grad, accumulation, detach, no_grad, train and the errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from lazygrad import GlobalCounters, Tensor, dtypes
from test.test_nn_functional import check

# name -> (lazygrad fn, torch fn, input shapes, (low, high))
UNARY: dict[str, tuple[Any, Any, tuple[float, float]]] = {
    "neg": (lambda x: -x, lambda x: -x, (-2, 2)),
    "exp": (Tensor.exp, torch.exp, (-2, 2)),
    "exp2": (Tensor.exp2, torch.exp2, (-2, 2)),
    "log": (Tensor.log, torch.log, (0.1, 3)),
    "log2": (Tensor.log2, torch.log2, (0.1, 3)),
    "sqrt": (Tensor.sqrt, torch.sqrt, (0.1, 3)),
    "rsqrt": (Tensor.rsqrt, torch.rsqrt, (0.1, 3)),
    "reciprocal": (Tensor.reciprocal, torch.reciprocal, (0.5, 3)),
    "sin": (Tensor.sin, torch.sin, (-3, 3)),
    "cos": (Tensor.cos, torch.cos, (-3, 3)),
    "tan": (Tensor.tan, torch.tan, (-1, 1)),
    "tanh": (Tensor.tanh, torch.tanh, (-3, 3)),
    "sigmoid": (Tensor.sigmoid, torch.sigmoid, (-4, 4)),
    "relu": (Tensor.relu, torch.relu, (-2, 2)),
    "gelu": (lambda x: x.gelu("none"), torch.nn.functional.gelu, (-3, 3)),
    "silu": (Tensor.silu, torch.nn.functional.silu, (-3, 3)),
    "softplus": (Tensor.softplus, torch.nn.functional.softplus, (-3, 3)),
    "abs": (Tensor.abs, torch.abs, (-2, 2)),
    "square": (Tensor.square, torch.square, (-2, 2)),
    "leaky_relu": (Tensor.leaky_relu, torch.nn.functional.leaky_relu, (-2, 2)),
    "elu": (Tensor.elu, torch.nn.functional.elu, (-2, 2)),
    "pow_const": (lambda x: x**3.0, lambda x: x**3.0, (-2, 2)),
    "clip": (lambda x: x.clip(-0.5, 0.7), lambda x: x.clip(-0.5, 0.7), (-2, 2)),
    "logsigmoid": (Tensor.logsigmoid, torch.nn.functional.logsigmoid, (-5, 5)),
    "cast_double": (lambda x: x.double().square().float(), lambda x: x.double().square().float(), (-2, 2)),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_grad(name: str) -> None:
    lg, ref, (low, high) = UNARY[name]
    check(lg, ref, [(3, 5)], low=low, high=high, atol=1e-5)


BINARY: dict[str, tuple[Any, Any, tuple[float, float]]] = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, (-2, 2)),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, (-2, 2)),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, (-2, 2)),
    "div": (lambda a, b: a / b, lambda a, b: a / b, (0.5, 2)),
    "pow": (lambda a, b: a**b, lambda a, b: a**b, (0.5, 2)),
    "maximum": (Tensor.maximum, torch.maximum, (-2, 2)),
    "minimum": (Tensor.minimum, torch.minimum, (-2, 2)),
    "where": (lambda a, b: (a > b).where(a * 2, b), lambda a, b: torch.where(a > b, a * 2, b), (-2, 2)),
}


BROADCASTS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((1,), ("T", (4, 3)))]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_grad_broadcast(name: str, shapes: tuple) -> None:
    lg, ref, (low, high) = BINARY[name]
    check(lg, ref, list(shapes), low=low, high=high)


def test_maximum_ties_split_evenly() -> None:
    a, b = Tensor([1.0, 2.0, 3.0]).requires_grad_(), Tensor([1.0, 5.0, 0.0]).requires_grad_()
    a.maximum(b).sum().backward()
    assert a.grad.tolist() == [0.5, 0.0, 1.0] and b.grad.tolist() == [0.5, 1.0, 0.0]


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reduce_grads(axis: Any) -> None:
    ax = axis if axis is not None else (0, 1, 2)
    check(lambda x: x.sum(axis), lambda x: x.sum(ax), [(2, 3, 4)])
    check(lambda x: x.mean(axis), lambda x: x.mean(ax), [(2, 3, 4)])
    check(lambda x: x.max(axis), lambda x: x.amax(ax), [(2, 3, 4)])
    check(lambda x: x.min(axis), lambda x: x.amin(ax), [(2, 3, 4)])
    check(lambda x: x.var(axis), lambda x: x.var(ax), [(2, 3, 4)])
    check(lambda x: x.std(axis), lambda x: x.std(ax), [(2, 3, 4)])


@pytest.mark.parametrize(
    "loss",
    [
        lambda t, m: t[m].sum(),
        lambda t, m: (t[m] ** 2).mean(),
        lambda t, m: t[0:0].sum() * 3,
        lambda t, m: t.reshape(2, 3)[:, :0].sum(1).sum(),
        lambda t, m: t[0:0].prod(),
        lambda t, m: t[m].sum() + t[1] * 2,
    ],
)
def test_gradient_through_an_empty_selection_is_zeros(loss) -> None:
    """A loss over no element (a mask that selects none in this batch, an empty slice) still has a gradient, zeros,
    as torch's: the empty reduce's identity used to cut the graph, and backward() raised."""
    xn = np.arange(6, dtype=np.float32)
    t, tt = Tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
    got, want = loss(t, Tensor([False] * 6)), loss(tt, torch.zeros(6, dtype=torch.bool))
    got.backward()
    want.backward()
    np.testing.assert_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_equal(t.grad.numpy(), tt.grad.numpy())


def test_max_ties_share_gradient_like_amax() -> None:
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=np.float32)
    t, r = Tensor(x).requires_grad_(), torch.tensor(x, requires_grad=True)
    t.max(1).sum().backward()
    r.amax(1).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-6)


def test_prod_grad_with_zeros() -> None:
    x = np.array([[1.5, 2.0, -3.0], [0.0, 2.0, 4.0], [0.0, 0.0, 5.0], [2.0, 0.0, 0.5]], dtype=np.float32)
    t, r = Tensor(x).requires_grad_(), torch.tensor(x, requires_grad=True)
    t.prod(1).sum().backward()
    r.prod(1).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-6)
    check(lambda x: x.prod(0), lambda x: x.prod(0), [(3, 4)], low=0.5, high=2)


@pytest.mark.parametrize(
    "lg,ref",
    [
        (lambda x: x.reshape(4, 6), None),
        (lambda x: x.permute(2, 0, 1), None),
        (lambda x: x[:, 1:, ::2], None),
        (lambda x: x[1, ::-1], lambda x: x[1].flip(0)),
        (lambda x: x.flip((0, 2)), None),
        (lambda x: x.pad(((1, 0), None, (2, 1))), lambda x: torch.nn.functional.pad(x, (2, 1, 0, 0, 1, 0))),
        (lambda x: x.pad((1, 2), value=3.0), lambda x: torch.nn.functional.pad(x, (1, 2), value=3.0)),
        (lambda x: x.shrink(((0, 1), (1, 3), None)), lambda x: x[0:1, 1:3]),
        (lambda x: x.unsqueeze(1).expand(2, 5, 3, 4), None),
        (lambda x: x.repeat(2, 1, 2), None),
        (lambda x: x.cat(x * 2, dim=1), lambda x: torch.cat([x, x * 2], 1)),
        (lambda x: x.stack(x, dim=0), lambda x: torch.stack([x, x], 0)),
        (lambda x: x.transpose(0, 2).flatten(), None),
    ],
)
def test_movement_grads(lg: Any, ref: Any) -> None:
    check(lg, ref or lg, [(2, 3, 4)])


# *** semantics ***


def test_requires_grad_rules() -> None:
    a = Tensor([1.0, 2.0])
    assert not a.requires_grad
    w = Tensor([3.0, 4.0], requires_grad=True)
    assert w.requires_grad and (a * w).requires_grad and not (a * 2).requires_grad
    with pytest.raises(TypeError, match="floating point"):
        Tensor([1, 2]).requires_grad_()
    assert w.requires_grad_(False) is w and not w.requires_grad


def test_creation_takes_requires_grad() -> None:
    made = [
        Tensor.randn(2, 3, requires_grad=True),
        Tensor.zeros(2, requires_grad=True),
        Tensor.eye(2, requires_grad=True),
        Tensor.uniform(3, low=-1, high=1, requires_grad=True),
        Tensor.full((2,), 1.5, requires_grad=True),
    ]
    assert all(t.requires_grad for t in made)
    assert not Tensor.ones(2, requires_grad=False).requires_grad
    w = Tensor.rand(4, requires_grad=True)
    (w * 3).sum().backward()
    assert w.grad.tolist() == [3.0] * 4
    with pytest.raises(TypeError, match="floating point"):
        Tensor.arange(3, requires_grad=True)


def test_fan_out_and_broadcast_accumulate() -> None:
    x = Tensor([[1.0], [2.0], [3.0]], requires_grad=True)  # (3, 1), broadcast against (3, 4)
    y = Tensor.ones(1, 4).requires_grad_()
    z = (x * y + x * x) * x  # x used three times
    z.sum().backward()
    xr = torch.tensor([[1.0], [2.0], [3.0]], requires_grad=True)
    yr = torch.ones(1, 4, requires_grad=True)
    ((xr * yr + xr * xr) * xr).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy())
    np.testing.assert_allclose(y.grad.numpy(), yr.grad.numpy())
    assert x.grad.shape == (3, 1) and y.grad.shape == (1, 4)


def test_grad_accumulates_across_backward_calls() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_gradients_are_lazy_and_fuse() -> None:
    x = Tensor.rand(64).requires_grad_().realize()
    (x.exp() * x).relu().sum().backward()
    assert not x.grad.uop.is_realized
    before = GlobalCounters.kernel_count
    x.grad.realize()
    assert GlobalCounters.kernel_count - before == 1  # the whole elementwise backward is one kernel


def test_gradient_of_several_targets() -> None:
    a, b, c = Tensor([2.0]).requires_grad_(), Tensor([3.0]).requires_grad_(), Tensor([5.0]).requires_grad_()
    ga, gb, gc = (a * b).sum().gradient(a, b, c)
    assert ga.tolist() == [3.0] and gb.tolist() == [2.0] and gc.tolist() == [0.0]
    assert a.grad is None  # gradient() does not touch .grad
    (g,) = (a * a).gradient(a, gradient=Tensor([10.0]))
    assert g.tolist() == [40.0]


def test_detach_stops_gradient() -> None:
    x = Tensor([2.0, 3.0], requires_grad=True)
    (x * x.detach()).sum().backward()
    assert x.grad.tolist() == [2.0, 3.0]
    assert not x.detach().requires_grad


def test_no_grad_context_and_decorator() -> None:
    w = Tensor([1.0, 2.0], requires_grad=True)
    with Tensor.no_grad():
        y = w * 2
        assert not y.requires_grad
    with pytest.raises(RuntimeError, match="requires_grad"):
        y.sum().backward()

    @Tensor.no_grad()
    def f(t: Tensor) -> Tensor:
        return t * 3

    z = f(w)
    (z * w).sum().backward()  # only the path outside no_grad carries gradient
    assert w.grad.tolist() == [3.0, 6.0]
    assert (w * 2).requires_grad  # the mode is restored after the block

    @Tensor.no_grad
    def g(t: Tensor) -> Tensor:
        return t * 3

    assert not g(w).requires_grad and (w * 3).requires_grad


def test_train_context_and_decorator() -> None:
    assert not Tensor.training
    with Tensor.train():
        assert Tensor.training
        with Tensor.train(False):
            assert not Tensor.training
        assert Tensor.training

    @Tensor.train()
    def f() -> bool:
        return Tensor.training

    @Tensor.train
    def g() -> bool:
        return Tensor.training

    assert f() and g() and not Tensor.training


def test_backward_errors() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="non-scalar"):
        (x * 2).backward()
    with pytest.raises(ValueError, match="gradient shape"):
        (x * 2).backward(Tensor([1.0]))
    with pytest.raises(TypeError, match="int"):
        (x * 2).cast(dtypes.int32).sum().backward()
    loss = (x * x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    kept = (x * x).sum() * 2
    kept.backward(retain_graph=True)
    kept.backward()
    assert x.grad.tolist() == [2 + 8.0, 4 + 16.0]
    with pytest.raises(RuntimeError, match="requires_grad"):
        Tensor([1.0], requires_grad=False).sum().backward()


def test_second_backward_of_tinygrad_code_accumulates() -> None:
    """Nothing set requires_grad: tinygrad code, whose graph is kept; each backward adds its gradients again."""
    x, w = Tensor([[1.0, -2.0]]), Tensor([[0.5], [3.0]])
    loss = (x @ w).relu().sum() + (w * w).sum()
    loss.backward()
    once = w.grad.numpy()
    loss.backward()
    loss.backward()
    tx, tw = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5], [3.0]], requires_grad=True)
    ((tx @ tw).relu().sum() + (tw * tw).sum()).backward()
    np.testing.assert_allclose(once, tw.grad.numpy())
    np.testing.assert_allclose(w.grad.numpy(), 3 * tw.grad.numpy())


def test_non_scalar_backward_with_gradient() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).backward(Tensor([1.0, 0.0, 2.0]))
    assert x.grad.tolist() == [2.0, 0.0, 12.0]


def test_grad_through_integer_path_is_zero() -> None:
    x = Tensor([1.5, 2.5], requires_grad=True)
    y = x * (x > 2).float() + x.floor() + x.cast(dtypes.int32).float()
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0]


def test_leaf_realized_between_forward_and_backward() -> None:
    # realizing a lazy leaf swaps its node for a buffer; a graph built before still reaches it through the old node
    w = Tensor.arange(3).float().requires_grad_()
    loss = (w * w).sum()
    lazy = w.uop
    w.realize()
    assert w.uop is not lazy and w.tolist() == [0.0, 1.0, 2.0]
    (g,) = loss.gradient(w)
    loss.backward()
    assert g.tolist() == [0.0, 2.0, 4.0] and w.grad.tolist() == [0.0, 2.0, 4.0]


def test_gradient_flows_through_realized_intermediates():
    """Realizing or reading an intermediate between the forward and backward() does not cut its gradient path."""
    x_np, w_np = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)[:, :3]
    x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
    h = (x @ w).tanh().realize()  # realized
    h2 = (h * 2 + x).exp()
    _ = h2.numpy()  # read
    loss = (h2 * h).sum()
    loss.backward()
    tx, tw = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    th = (tx @ tw).tanh()
    ((th * 2 + tx).exp() * th).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert not w.grad.requires_grad, "a gradient is data, as in torch"


def test_unset_tensors_get_grad_only_where_nothing_is_set_true() -> None:
    # tinygrad style: nothing set True, every unset float tensor in the graph gets its gradient
    x, w = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    (x * w).sum().backward()
    assert x.grad.tolist() == [3.0, 4.0] and w.grad.tolist() == [1.0, 2.0]
    # torch style: w set True, the input x gets none (as torch), and stays None over repeated steps
    x, w = Tensor([1.0, 2.0]), Tensor([3.0, 4.0], requires_grad=True)
    for _ in range(3):
        (x * w).sum().backward()
    assert x.grad is None and w.grad.tolist() == [3.0, 6.0]


@pytest.mark.parametrize("op", ["cumsum", "logcumsumexp", "cumprod"])
def test_long_scan_gradients_are_scans(op):
    """A scan past 64 elements nests blocks of 64; the chain rule through them added 64 shifted windows per level,
    fused into one kernel (65536 elements: a kernel of 200k nodes that gcc did not finish in minutes and pocl crashed
    on). The gradients of cumsum and logcumsumexp are suffix scans of their own: every kernel stays small, and the
    values match torch's."""
    n = 65536
    rng = np.random.default_rng(0)
    a = (rng.random((n, 3)) * 0.002 + 0.999 if op == "cumprod" else rng.standard_normal((n, 3))).astype(np.float32)
    g = rng.standard_normal((n, 3)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    (getattr(x, op)(0) * Tensor(g)).sum().backward()
    from lazygrad.engine.realize import run_schedule

    schedule, var_vals = x.grad.schedule_with_vars()
    assert max(len(si.ast.toposort) for si in schedule) < 1000
    run_schedule(schedule, var_vals)
    tx = torch.from_numpy(a).double().requires_grad_()
    (getattr(tx, op)(0) * torch.from_numpy(g).double()).sum().backward()
    ref = tx.grad.numpy()
    np.testing.assert_allclose(x.grad.numpy(), ref, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize("outputs_first", [True, False])
@pytest.mark.parametrize("frozen_leaf", [False, True])
def test_step_realize_keeps_gradient_paths_whatever_its_order(outputs_first: bool, frozen_leaf: bool):
    """A training step realized with its loss, an accuracy count and the optimizer's writes in one call: the loss
    keeps its gradient path (backward reached a parameter), and the logits, which join the schedule as a reader of the
    parameters it overwrites, keep one only through a leaf the step does not write (a frozen scale set
    requires_grad=True), in either order of the realize's tensors; the values are those of torch."""
    from lazygrad.nn import Linear
    from lazygrad.nn.optim import SGD

    rng = np.random.default_rng(3)
    xn, yn = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6).astype(np.int32)
    layer = Linear(5, 3)
    w0, b0 = layer.weight.numpy(), layer.bias.numpy()
    scale = Tensor(np.full((3,), 1.5, np.float32), requires_grad=frozen_leaf)
    opt = SGD([layer.weight, layer.bias], lr=0.1)
    x, y = Tensor(xn), Tensor(yn)
    with Tensor.train():
        opt.zero_grad()
        logits = layer(x) * scale
        loss = logits.sparse_categorical_crossentropy(y).backward()
        correct = (logits.argmax(-1) == y).sum()
        tensors = (loss, correct, *opt.schedule_step())
        Tensor.realize(*(tensors if outputs_first else tensors[::-1]))
    assert loss.requires_grad and not correct.requires_grad
    assert logits.requires_grad == frozen_leaf
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    tlogits = (torch.tensor(xn) @ tw.T + tb) * 1.5
    tloss = torch.nn.functional.cross_entropy(tlogits, torch.tensor(yn).long())
    tloss.backward()
    np.testing.assert_allclose(loss.numpy(), tloss.item(), rtol=1e-6)
    # (an absolute tolerance too: a logit near 0 is a difference of products, and float32 rounding of the kernel the
    # schedule picks, which an earlier test's cached templates can change, moves it by ~2e-8 = 4e-6 of its value)
    np.testing.assert_allclose(logits.numpy(), tlogits.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert correct.item() == int((tlogits.argmax(-1) == torch.tensor(yn).long()).sum())
    np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.1 * tw.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("op", ["tanh", "asin", "acos", "atanh", "erfinv"])
def test_a_composites_own_derivative_holds_through_a_realized_input(op):
    # backward swaps a realized intermediate for the graph that computed it; the composite's stated derivative (tanh's
    # 1 - y^2, asin's 1 / sqrt(1 - x^2)) must come along to the rebuilt nodes: the chain rule through the formulas is
    # NaN where they overflow (tanh's 1 - 2 / (e^2x + 1) from x = 45 on) or at the domain's edge, where torch's is inf
    xs = {"tanh": [0.3, 2.0, 45.0, 60.0, -90.0]}.get(op, [0.3, 1.0, -1.0, -0.5])
    a, ta = Tensor(xs, requires_grad=True), torch.tensor(xs, requires_grad=True)
    v = (a * 1).realize()  # realized: backward rebuilds v's graph under the op
    getattr(v, op)().sum().backward()
    getattr(ta * 1, op)().sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("make", ["sum", "prod"])
def test_retain_grad_of_a_realized_value_read_by_a_realized_one(make):
    # backward resolves w's graph with v's inside it: a retained v that is a reduce's result (its stored value stands
    # for the reduce, not the reshape v holds) was found under no node and kept .grad None
    fns = {"sum": lambda t: t.sum(0), "prod": lambda t: (t.tanh() + 1.5).prod(0)}
    x0 = np.random.default_rng(0).uniform(-1, 1, (3, 2)).astype(np.float32)
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    v, tv = fns[make](x).realize(), fns[make](tx)
    v.retain_grad()
    tv.retain_grad()
    v.tanh().exp().realize().sum().backward()
    tv.tanh().exp().sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_autograd_backward_of_several_outputs_is_torchs() -> None:
    """torch.autograd.backward(tensors, grad_tensors): the weighted gradients of every output accumulated into .grad;
    Variable returns its tensor; detect_anomaly is accepted as a context manager and a decorator."""
    from lazygrad import autograd

    xn = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    gn = np.full((2, 3), 0.5, np.float32)
    x, tx = Tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
    autograd.backward([(x * x).sum(), x.exp()], [None, Tensor(gn)])
    torch.autograd.backward([(tx * tx).sum(), tx.exp()], [None, torch.tensor(gn)])
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        autograd.backward(x * 2)
    assert autograd.Variable(x) is x
    with autograd.detect_anomaly():
        (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy() + 3, rtol=1e-6)


# a reduce over a zero-size dimension inside a loss: torch's gradient is zeros
EMPTY_REDUCTIONS = {
    "sum": lambda x: x[:, 0:0].sum(),
    "sum_dim": lambda x: x[:, 0:0].sum(1) * 3,
    "sum_beside_a_row": lambda x: x[0:0].sum(0) + x[1],
    "prod": lambda x: x[:, 1:1].prod(1),
    "diff_of_one": lambda x: x[:, :1].diff(),
    "matmul_k0": lambda x: x[:, 0:0] @ x[0:0, :].T.T,
    "logsumexp": lambda x: x[0:0].logsumexp(0).clamp(-1, 1),
    "cumsum": lambda x: x[0:0].cumsum(0).sum(),
    "masked_select": lambda x: x[x > 100].sum(),
}


@pytest.mark.parametrize("name", list(EMPTY_REDUCTIONS))
def test_backward_through_an_empty_reduction(name):
    """The empty reduce was a constant: backward found no path to x and raised (torch: zero gradient)."""
    fn = EMPTY_REDUCTIONS[name]
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, tout = fn(x), fn(t)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


NAN = float("nan")
TIES = [[1.0, NAN, 3.0, NAN], [3.0, 1.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0], [1.0, 2.0, 2.0, 5.0], [NAN, NAN, NAN, NAN]]


@pytest.mark.parametrize("row", range(len(TIES)))
@pytest.mark.parametrize("name", ["max", "min", "median", "nanmedian"])
def test_ties_and_nans_share_the_gradient_as_torch(row, name):
    """A whole max / min / median shares its gradient among the elements equal to it, NaNs among the NaNs (a NaN max
    gave every element NaN: no element equals NaN, 0 / 0; a median gave it all to one). With dim, torch's (values,
    indices) give it to the element the index names (a max shared it among ties)."""
    a = np.array(TIES[row] * 3, np.float32).reshape(3, 4) * np.array([[1], [-1], [2]], np.float32)
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        if name in ("median", "nanmedian") and kw:
            continue
        x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        out, tout = getattr(x, name)(**kw), getattr(t, name)(**kw)
        if kw:
            assert out.indices.tolist() == tout.indices.tolist()
            out, tout = out.values, tout.values
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), equal_nan=True)
        w = np.arange(1, out.numel() + 1, dtype=np.float32).reshape(out.shape)
        (out * Tensor(w)).sum().backward()
        (tout * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), err_msg=str(kw))


_AF_CASES = {
    "vjp": lambda F, T, x, y, v: F.vjp(lambda a, b: (b @ a.sin()) * a.sum(), (T(x), T(y)), T(v))[1],
    "jvp": lambda F, T, x, y, v: F.jvp(lambda a, b: (b @ a.sin()) * a.sum(), (T(x), T(y)), (T(x * 2), T(y)))[1],
    "jacobian": lambda F, T, x, y, v: F.jacobian(lambda a, b: (b @ a.sin()) * a.sum(), (T(x), T(y))),
    "jacobian of one": lambda F, T, x, y, v: F.jacobian(lambda a: a.sin() * 2, T(x)),
    "hessian": lambda F, T, x, y, v: F.hessian(lambda a: (a.exp() * a).sum() + a[0] * a[1], T(x)),
    "hvp": lambda F, T, x, y, v: F.hvp(lambda a: (a.exp() * a).sum() + a[0] * a[1], T(x), T(x))[1],
    "vhp": lambda F, T, x, y, v: F.vhp(lambda a: (a.exp() * a).sum(), T(x), T(x * 3))[1],
}


@pytest.mark.parametrize("name", list(_AF_CASES))
def test_autograd_functional_is_torchs(name: str) -> None:
    """torch.autograd.functional's vjp, jvp (a vjp of a vjp), jacobian (one vjp per output element), hessian and
    hvp / vhp (second derivatives through the lazy gradient graph), against torch's."""
    import lazygrad.autograd.functional as LF
    import torch.autograd.functional as TF

    rng = np.random.default_rng(0)
    x, y, v = (rng.standard_normal(s).astype(np.float32) for s in (3, (2, 3), 2))
    ours = _AF_CASES[name](LF, Tensor, x, y, v)
    ref = _AF_CASES[name](TF, torch.tensor, x, y, v)
    ours, ref = (r if isinstance(r, tuple) else (r,) for r in (ours, ref))
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


_LAZY_LEAVES = {
    "zeros": lambda: Tensor.zeros(3, requires_grad=True),
    "ones": lambda: Tensor.ones(3).requires_grad_(),
    "full": lambda: Tensor.full((3,), 0.0, requires_grad=True),
    "scalar": lambda: Tensor(0.0, requires_grad=True),
    "zeros_like": lambda: Tensor.ones(3).zeros_like().requires_grad_(),
}


@pytest.mark.parametrize("make", list(_LAZY_LEAVES), ids=list(_LAZY_LEAVES))
def test_a_constant_leaf_gets_only_its_own_gradient(make: str) -> None:
    """A leaf built from a constant (torch.zeros(n, requires_grad=True): the hand-written bias) is a node of its own:
    the alike constants of the graph (the 0 of relu's where, of a masked select, other zero leaves) pass it nothing."""
    xs = np.array([1.0, 2.0, 3.0], np.float32)

    def loss(lib, x, leaves):  # noqa: ANN001, ANN202
        b0, b1, b2 = leaves
        masked = lib.where(x > 1.5, x + b1, lib.zeros(3) + 0 * b1.detach())
        return (x - 2.5 + b0).relu().sum() + masked.sum() + (b2 * x * 3).sum() + (lib.zeros(3) * 5).sum()

    ours = [_LAZY_LEAVES[make]() for _ in range(3)]
    x = Tensor(xs)
    import lazygrad.torch as lt

    loss(lt, x, ours).backward()
    ref = [torch.zeros(3 if ours[0].ndim else (), requires_grad=True) for _ in range(3)]
    if make == "ones":
        ref = [torch.ones(3, requires_grad=True) for _ in range(3)]
    loss(torch, torch.tensor(xs), ref).backward()
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o.grad.numpy(), r.grad.numpy())


def test_hooks_and_kept_gradients_of_alike_tensors_computed_apart() -> None:
    """x * 2 computed twice is one hash-consed node: a hook on one, or a gradient kept for one, must see only that
    tensor's uses, as torch's (each gets a node of its own when asked)."""
    import lazygrad.torch as lt

    def run(lib):  # noqa: ANN001, ANN202
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h1, h2, k1, k2 = x * 2, x * 2, x.exp(), x.exp()
        h1.register_hook(lambda g: g * 10)
        h2.register_hook(lambda g: g * 100)
        k1.retain_grad()
        k2.retain_grad()
        (h1.sum() + h2.sum() + (k1 * 3).sum() + k2.sum()).backward()
        return x.grad, k1.grad, k2.grad

    for ours, theirs in zip(run(lt), run(torch)):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_kept_gradient_of_a_hooked_tensor_is_the_hooked_one() -> None:
    """torch runs retain_grad's hook after the tensor's own: .grad is what the hooks made, and they run once."""
    import lazygrad.torch as lt

    def run(lib):  # noqa: ANN001, ANN202
        calls: list[int] = []
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x * 2
        h.retain_grad()
        h.register_hook(lambda g: calls.append(1) or g * 10)
        (h * h).sum().backward()
        return h.grad.tolist(), x.grad.tolist(), len(calls)

    assert run(lt) == run(torch)


_CONST_LEAF_OPS = [
    lambda L, a, b: (a + b).relu(),
    lambda L, a, b: L.where(a > 0.5, a, L.zeros(a.shape)),
    lambda L, a, b: L.maximum(a, L.zeros(a.shape)),
    lambda L, a, b: (a * b).clamp(0, 1),
    lambda L, a, b: L.nn.functional.pad(a, (1, 1))[1:-1],
    lambda L, a, b: a.masked_fill(b > 0.5, 0.0),
    lambda L, a, b: a * L.ones(a.shape) + b,
    lambda L, a, b: L.nn.functional.relu(a - 1) + L.full(a.shape, 0.0),
    lambda L, a, b: L.stack([a, L.zeros(a.shape)]).sum(0),
    lambda L, a, b: L.cat([a, L.ones(a.shape)])[: a.shape[0]] * b,
]


@pytest.mark.parametrize("seed", range(24))
def test_hunt_leaves_made_of_constants_against_torch(seed: int) -> None:
    """Random chains of the ops whose graphs hold constants (a relu's 0, a pad, a masked fill) over leaves made of
    constants (zeros, ones, full) and of data: every leaf's gradient as torch's (before leaves got nodes of their
    own, 24 of 60 such chains differed)."""
    import random

    import lazygrad.torch as lt

    r = random.Random(seed)
    n = r.choice([1, 3, 4])
    kinds = [r.choice(["zeros", "ones", "full0", "full1", "data"]) for _ in range(r.randint(2, 4))]
    data = [np.random.default_rng(seed * 10 + i).uniform(-1, 2, n).astype(np.float32) for i in range(len(kinds))]
    plan = [(r.randrange(len(_CONST_LEAF_OPS)), r.randrange(100), r.randrange(100)) for _ in range(r.randint(1, 5))]

    def run(lib):  # noqa: ANN001, ANN202
        made = {
            "zeros": lambda d: lib.zeros(n, requires_grad=True),
            "ones": lambda d: lib.ones(n, requires_grad=True),
            "full0": lambda d: lib.full((n,), 0.0, requires_grad=True),
            "full1": lambda d: lib.full((n,), 1.0, requires_grad=True),
            "data": lambda d: lib.tensor(d, requires_grad=True),
        }
        leaves = [made[k](d) for k, d in zip(kinds, data)]
        vals = list(leaves)
        for op, i, j in plan:
            vals.append(_CONST_LEAF_OPS[op](lib, vals[i % len(vals)], vals[j % len(vals)]))
        (vals[-1] * lib.tensor(np.arange(1, n + 1, dtype=np.float32))).sum().backward()
        return [t.grad.numpy() if t.grad is not None else np.zeros(n, np.float32) for t in leaves]

    for ours, theirs in zip(run(lt), run(torch)):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_views_taken_before_requires_grad_or_retain_grad_follow_the_tensor() -> None:
    """A view of a lazy tensor taken before it became a leaf (tinygrad code: an optimizer sets requires_grad after the
    model made its views) or before retain_grad() reads through the tensor's node of its own: gradients reach it."""
    from lazygrad import nn

    x = Tensor([[1.0, 2.0, 3.0]])
    w = Tensor.zeros(3)
    v = w.reshape(1, 3)
    w.requires_grad_()
    (v * x).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [1.0, 2.0, 3.0]
    w2 = Tensor.ones(3)
    v2 = w2.reshape(1, 3)
    opt = nn.optim.SGD([w2], lr=1.0)
    with Tensor.train():
        (v2 * x).sum().backward()
        opt.step()
    assert w2.tolist() == [0.0, -1.0, -2.0]
    leaf = Tensor([1.0, 2.0], requires_grad=True)
    h = leaf * 2
    row = h[0:1]
    h.retain_grad()
    (row * 3).sum().backward()
    assert h.grad.tolist() == [3.0, 0.0]


def test_optimizer_step_without_gradients_changes_nothing() -> None:
    """torch's step() skips parameters that have no gradient: with none, it is a no-op."""
    from lazygrad import nn

    w = Tensor.ones(3, requires_grad=True)
    for make in (nn.optim.SGD, nn.optim.Adam, nn.optim.AdamW):
        make([w], lr=1.0).step()
    assert w.tolist() == [1.0, 1.0, 1.0]


def test_a_detached_view_made_a_leaf_is_a_leaf_of_its_own() -> None:
    """x.detach().requires_grad_() (torch's way to a leaf sharing x's memory: adversarial inputs, MAML's fast
    weights): what is computed from it requires grad, a realize between the forward and backward keeps its gradient,
    a detached copy of it used elsewhere passes it nothing, and writes into it reach x's memory."""
    a = np.array([1.0, 2.0, 3.0], np.float32)

    def run(lib, realize: bool):  # noqa: ANN001, ANN202
        x = lib.tensor(a)
        leaf = x.detach().requires_grad_(True)
        y = (leaf * 2).exp()
        req = y.requires_grad
        if realize:
            y = y + 0  # (torch: the same graph)
            if lib is not torch:
                y.realize()
        (y.sum() + (leaf.detach() * 5).sum()).backward()
        return req, leaf.grad.tolist()

    import lazygrad.torch as lt

    for realize in (False, True):
        (ours_req, ours), (theirs_req, theirs) = run(lt, realize), run(torch, realize)
        assert ours_req and theirs_req
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    x = Tensor(a)
    leaf = x.detach().requires_grad_(True)
    with Tensor.no_grad():
        leaf.assign(leaf * 3).realize()
    assert x.tolist() == [3.0, 6.0, 9.0]
