"""tinygrad 0.14 programs run unchanged: TRAINING as a Context knob, gradients without requires_grad, is_param,
schedule_step and `function`; torch-style code keeps torch's answers. Every numeric check is against torch."""

import numpy as np
import pytest
import torch

from lazygrad import Context, GlobalCounters, Tensor, TinyJit, function, nn  # noqa: F401  (the import is the test)
from lazygrad.helpers import TRAINING


def test_training_is_one_switch() -> None:
    assert not Tensor.training
    with Context(TRAINING=1):
        assert Tensor.training and TRAINING
    with Tensor.train():
        assert TRAINING.value == 1
    Tensor.training = True
    assert TRAINING
    Tensor.training = False

    @Context(TRAINING=1)
    def step() -> bool:
        return Tensor.training

    assert step() and not Tensor.training


def test_dropout_follows_context_training() -> None:
    x = Tensor.ones(1000)
    assert x.dropout(0.5).tolist() == x.tolist()
    with Context(TRAINING=1):
        kept = (x.dropout(0.5).numpy() != 0).mean()
    assert 0.4 < kept < 0.6


def test_context_takes_tinygrad_knobs() -> None:
    with Context(DEBUG=0, BEAM=0, NOOPT=0, TRAINING=0, JIT=1, IMAGE=0, VIZ=0, SPLIT_REDUCEOP=1):
        pass
    with pytest.raises(KeyError):  # as tinygrad: a knob nobody defines is a mistake
        with Context(NOT_A_KNOB=1):
            pass
    # knobs tinygrad 0.14 programs and tests set around a block; lazygrad accepts them and they change nothing
    with Context(CHECK_OOB=0, TRACK_MATCH_STATS=0, DEVECTORIZE=0, TC=0, NOLOCALS=1, PCONTIG=0):
        assert (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]


def test_renderer_supported_dtypes() -> None:
    """tinygrad's `Device[d].renderer.supported_dtypes()`: the dtypes `is_dtype_supported` says yes to."""
    from lazygrad import Device, dtypes
    from lazygrad.device import is_dtype_supported

    supported = Device[Device.DEFAULT].renderer.supported_dtypes()
    assert dtypes.float32 in supported and dtypes.int32 in supported and dtypes.bool in supported
    assert all(is_dtype_supported(dt) for dt in supported)


def _torch_grads(xs: list[np.ndarray], fn) -> list[np.ndarray]:
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    fn(*ts).backward()
    return [t.grad.numpy() for t in ts]


def test_backward_without_requires_grad() -> None:
    x, w = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)[0], np.eye(3, dtype=np.float32)
    tx, tw = Tensor(x), Tensor(w)
    h = (tx @ tw).tanh()
    (h * h).sum().backward()
    gx, gw = _torch_grads([x, w], lambda a, b: ((a @ b).tanh() ** 2).sum())
    np.testing.assert_allclose(tx.grad.numpy(), gx, atol=1e-5)
    np.testing.assert_allclose(tw.grad.numpy(), gw, atol=1e-5)
    assert h.grad is not None  # tinygrad fills intermediates too


def test_requires_grad_false_and_no_grad_get_no_grad() -> None:
    a, b = Tensor([1.0, 2.0], requires_grad=False), Tensor([3.0, 4.0])
    (a * b).sum().backward()
    assert a.grad is None and b.grad.tolist() == [1.0, 2.0]
    with Tensor.no_grad():
        c = b * 2
    assert not c.requires_grad
    with pytest.raises(RuntimeError, match="requires_grad"):
        c.sum().backward()
    d = b.detach()
    (d * b).sum().backward()  # the gradient stops at d: only b's direct use reaches b
    assert b.grad.tolist() == [1.0 + 3.0, 2.0 + 4.0]


def test_torch_style_code_keeps_torch_answers() -> None:
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = (x.relu() * x).sum()
    assert y.requires_grad
    y.backward()
    tx = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (tx.relu() * tx).sum().backward()
    assert x.grad.tolist() == tx.grad.tolist()


def test_is_param() -> None:
    bn = nn.BatchNorm2d(3)
    assert bn.weight.is_param and not bn.running_mean.is_param
    t = Tensor.zeros(2).is_param_(False)
    assert not t.is_param and t.requires_grad is False
    w = Tensor.ones(2)
    opt = nn.optim.SGD([w, t], lr=0.1)
    assert opt.params == [w] and opt.buffers == [t]


def _mlp_data() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((32, 4)).astype(np.float32)
    Y = (X[:, :1] * 2 - X[:, 1:2]).astype(np.float32)
    weights = [
        (rng.standard_normal((4, 8)) * 0.5).astype(np.float32),
        (rng.standard_normal((8, 1)) * 0.5).astype(np.float32),
    ]
    return X, Y, weights


def _torch_losses(X: np.ndarray, Y: np.ndarray, weights: list[np.ndarray], steps: int) -> list[float]:
    w1, w2 = (torch.tensor(w, requires_grad=True) for w in weights)
    opt = torch.optim.SGD([w1, w2], lr=0.05, momentum=0.9)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (((torch.tensor(X) @ w1).relu() @ w2 - torch.tensor(Y)) ** 2).mean()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def test_training_loop_tinygrad_style() -> None:
    """No requires_grad anywhere, Context(TRAINING=1), loss.realize(*opt.schedule_step()): tinygrad 0.14's loop."""
    X, Y, weights = _mlp_data()
    w1, w2 = Tensor(weights[0].copy()), Tensor(weights[1].copy())
    opt = nn.optim.SGD([w1, w2], lr=0.05, momentum=0.9)
    losses = []
    with Context(TRAINING=1):
        for _ in range(8):
            opt.zero_grad()
            loss = ((Tensor(X) @ w1).relu() @ w2 - Tensor(Y)).square().mean().backward()
            loss.realize(*opt.schedule_step())
            losses.append(loss.item())
    np.testing.assert_allclose(losses, _torch_losses(X, Y, weights, 8), rtol=1e-4, atol=1e-6)
    assert losses[-1] < losses[0] / 2


def test_training_loop_with_function() -> None:
    X, Y, weights = _mlp_data()
    w1, w2 = Tensor(weights[0].copy()), Tensor(weights[1].copy())
    opt = nn.optim.SGD([w1, w2], lr=0.05, momentum=0.9)
    traced = []

    @function
    def forward(x: Tensor, a: Tensor, b: Tensor) -> Tensor:
        traced.append(1)
        return (x @ a).relu() @ b

    losses = []
    with Context(TRAINING=1):
        for _ in range(8):
            opt.zero_grad()
            loss = (forward(Tensor(X), w1, w2) - Tensor(Y)).square().mean().backward()
            loss.realize(*opt.schedule_step())
            losses.append(loss.item())
    assert len(traced) == 1
    np.testing.assert_allclose(losses, _torch_losses(X, Y, weights, 8), rtol=1e-4, atol=1e-6)


def test_function_matches_a_direct_call() -> None:
    calls = []

    @function
    def f(a: Tensor, b: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        calls.append(scale)
        return (a @ b).relu().sum(1) * scale, a.exp()

    rng = np.random.default_rng(2)
    for scale in (1.0, 1.0, 2.0, 2.0):
        a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
        s, e = f(Tensor(a), Tensor(b), scale)
        ta, tb = torch.tensor(a), torch.tensor(b)
        np.testing.assert_allclose(s.numpy(), (ta @ tb).relu().sum(1).numpy() * scale, atol=1e-5)
        np.testing.assert_allclose(e.numpy(), ta.exp().numpy(), rtol=1e-5)
    assert calls == [1.0, 2.0]  # one trace per (shapes, dtypes, devices, other arguments)
    f(Tensor.ones(2, 3), Tensor.ones(3, 1), 1.0)
    assert len(calls) == 3


def test_function_gradients_and_methods() -> None:
    class Model:
        def __init__(self) -> None:
            self.l1 = nn.Linear(3, 2)

        @function
        def __call__(self, x: Tensor) -> Tensor:
            return self.l1(x).tanh().sum()

    m, x = Model(), np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    for _ in range(2):
        m.l1.weight.grad = None
        m(Tensor(x)).backward()
    tl = torch.nn.Linear(3, 2)
    tl.weight.data, tl.bias.data = torch.tensor(m.l1.weight.numpy()), torch.tensor(m.l1.bias.numpy())
    tl(torch.tensor(x)).tanh().sum().backward()
    np.testing.assert_allclose(m.l1.weight.grad.numpy(), tl.weight.grad.numpy(), atol=1e-6)


def test_function_implicit_inputs_and_randomness() -> None:
    w = Tensor([1.0, 2.0]).realize()

    @function
    def f(x: Tensor) -> Tensor:
        return x * w

    with pytest.raises(RuntimeError, match="not among its arguments"):
        f(Tensor([1.0, 1.0]))

    @function(allow_implicit=True)
    def g(x: Tensor) -> Tensor:
        return x * w

    assert g(Tensor([1.0, 1.0])).tolist() == [1.0, 2.0]
    w.assign(Tensor([3.0, 4.0])).realize()
    assert g(Tensor([1.0, 1.0])).tolist() == [3.0, 4.0]

    @function
    def noisy(x: Tensor) -> Tensor:
        return x + Tensor.rand(*x.shape)

    a, b = noisy(Tensor.zeros(8)).numpy(), noisy(Tensor.zeros(8)).numpy()
    assert not np.array_equal(a, b)  # a function that draws random numbers is traced on every call


def test_function_rejects_other_returns() -> None:
    @function
    def f(x: Tensor) -> int:
        return 3

    with pytest.raises(RuntimeError, match="must return a Tensor"):
        f(Tensor([1.0]))


def test_clone_is_a_tensor_of_its_own() -> None:
    """Two clones of one value are two leaves (torch: each gets its own gradient), clone carries .grad (tinygrad) and
    takes a device; writes into a clone leave the source alone."""
    w1, w2 = Tensor(3.5).clone(), Tensor(3.5).clone()
    (w1 * 2 + w2).backward()
    t1, t2 = torch.tensor(3.5, requires_grad=True), torch.tensor(3.5, requires_grad=True)
    (t1 * 2 + t2).backward()
    assert (w1.grad.item(), w2.grad.item()) == (t1.grad.item(), t2.grad.item()) == (2.0, 1.0)
    a = Tensor([[1.0, 2.0], [3.0, 4.0]])
    (a * a).sum().backward()
    b = a.clone(device="CPU")
    assert b.device == "CPU" and b.grad is not None and b.grad.tolist() == a.grad.tolist() == [[2.0, 4.0], [6.0, 8.0]]
    x = Tensor([1.0, 2.0, 3.0]).realize()
    y, z = x.clone(), x.clone()
    y.assign(Tensor([9.0, 9.0, 9.0]))
    assert (x.tolist(), y.tolist(), z.tolist()) == ([1.0, 2.0, 3.0], [9.0, 9.0, 9.0], [1.0, 2.0, 3.0])


def test_tinygrad_helpers_temp_and_mv_address() -> None:
    import array
    import os
    import tempfile

    from lazygrad import dtypes
    from lazygrad.helpers import mv_address, temp

    assert temp("x") == os.path.join(tempfile.gettempdir(), "x") and temp("x", append_user=True) != temp("x")
    mem = memoryview(bytearray(16)).cast("I")
    t = Tensor.from_blob(mv_address(mem), (4,), dtype=dtypes.uint32, device="CPU")
    mem[:] = array.array("I", [5, 6, 7, 8])
    assert (t + 1).tolist() == [6, 7, 8, 9]


def test_assign_broadcasts_and_refuses_a_dtype_change() -> None:
    """tinygrad's assign: a value of fewer or size-1 dims fills every row; a value of another dtype is an error (a
    RuntimeError, as torch's errors) rather than a silent cast."""
    a = Tensor.zeros(3, 5).contiguous().realize()
    a.assign(Tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    np.testing.assert_array_equal(a.numpy(), np.broadcast_to(np.arange(1, 6, dtype=np.float32), (3, 5)))
    a.assign(Tensor([[9.0], [8.0], [7.0]]))
    np.testing.assert_array_equal(a.numpy()[:, 0], [9.0, 8.0, 7.0])
    with pytest.raises(RuntimeError, match="assign dtype mismatch"):
        a.assign(Tensor([1, 2, 3, 4, 5]))
    with pytest.raises(RuntimeError, match="same shape"):
        a.assign(Tensor.ones(2, 5))
    c = Tensor.ones(2, 3, dtype="int8").const_like(7)
    assert c.dtype.name == "int8" and c.tolist() == [[7] * 3] * 2


def test_a_read_keeps_the_gradient_path() -> None:
    """tinygrad reads a tensor through a copy and keeps its graph: `out.numpy()` between the forward and backward()
    does not cut the gradient off (tinygrad's jacobian and gradcheck read the output first)."""
    rng = np.random.default_rng(3)
    x, w = rng.random((1, 10)).astype(np.float32), rng.random((10, 5)).astype(np.float32)
    mask = np.zeros((1, 5), np.float32)
    mask[0, 2] = 1.0
    tx, tw = Tensor(x), Tensor(w)
    out = (tx @ tw).relu().log_softmax()
    out.numpy()
    (Tensor(mask) * out).sum().backward()
    gx, gw = _torch_grads([x, w], lambda a, b: (torch.tensor(mask) * (a @ b).relu().log_softmax(1)).sum())
    np.testing.assert_allclose(tx.grad.numpy(), gx, atol=1e-6)
    np.testing.assert_allclose(tw.grad.numpy(), gw, atol=1e-6)


def test_reads_every_step_keep_nodes_not_buffers() -> None:
    """A loop that reads its state every step can still differentiate through every step, and holds no buffer per
    step (the graphs of earlier reads are kept resolved: nodes, not each step's memory)."""
    import gc

    w0 = np.full((64, 64), 0.05, np.float32)
    x, w = Tensor.ones(64, 64).contiguous().realize(), Tensor(w0).realize()
    before = GlobalCounters.mem_used
    for _ in range(12):
        x = (x * 0.9 + w).tanh()
        x.numpy()
    gc.collect()
    assert GlobalCounters.mem_used - before <= 64 * 64 * 4  # the last step's buffer only
    x.sum().backward()
    tx, tw = torch.ones(64, 64), torch.tensor(w0, requires_grad=True)
    for _ in range(12):
        tx = (tx * 0.9 + tw).tanh()
    tx.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5)


def test_a_read_does_not_make_results_require_grad() -> None:
    """torch-style code (a leaf set True somewhere): a tensor computed from a read one requires no grad, as torch's."""
    p = Tensor([1.0, 2.0], requires_grad=True)
    y = Tensor([3.0, 4.0]) * 2
    y.numpy()
    z = y + 1
    assert p.requires_grad and not y.requires_grad and not z.requires_grad
    (z * p).sum().backward()
    assert p.grad.tolist() == [7.0, 9.0]


def test_tinygrad_digits_example_reaches_its_accuracy() -> None:
    """examples/tinygrad_digits.py, a tinygrad program but for its import (Context(TRAINING=1), @function, TinyJit
    with Tensor.randint batches drawn inside it, schedule_step), trains to its accuracy on the digits."""
    import runpy
    from pathlib import Path

    pytest.importorskip("sklearn")
    example = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "tinygrad_digits.py"))
    assert example["train"](steps=150, bs=128, log=False) >= 95.0


def test_leaves_above_a_read_tensor_keep_their_gradients() -> None:
    """Tensors whose graph holds a read (kept) tensor are still found by backward: a detached copy set
    requires_grad (torch's leaf), a leaf computed from a read tensor, and an intermediate (tinygrad fills it)."""
    x = Tensor([[1.0, 2.0], [3.0, 4.0]]) * 1.5
    x.numpy()
    d = x.detach()
    d.requires_grad = True
    d[[0, 1], [1, 0]].sum().backward()
    assert d.grad.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    y = (x * 2).requires_grad_()
    (y * y).sum().backward()
    ty = torch.tensor([[1.0, 2.0], [3.0, 4.0]]) * 3.0
    assert y.grad.tolist() == (2 * ty).tolist()
    a = Tensor([0.5, -1.0])
    h = a.exp()
    h.numpy()
    g = h * 3
    (g * g).sum().backward()
    ta = torch.tensor([0.5, -1.0], requires_grad=True)
    tg = ta.exp() * 3
    tg.retain_grad()
    (tg * tg).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(g.grad.numpy(), tg.grad.numpy(), rtol=1e-6)


def test_matmul_reverse_and_dtype_and_nbytes_call() -> None:
    """tinygrad's matmul(x, reverse, dtype) / dot(w, dtype) and its nbytes() method (torch's nbytes is a property:
    both spellings give the byte count)."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 4)).astype(np.float16), rng.standard_normal((5, 3)).astype(np.float16)
    out = Tensor(a).matmul(Tensor(b), reverse=True, dtype="float32")
    assert out.dtype.name == "float32" and out.shape == (5, 4)
    ref = torch.tensor(b).float() @ torch.tensor(a).float()
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
    i8 = Tensor(np.full((2, 64), 127, np.int8))
    acc = i8.dot(i8.T, dtype="int32")  # 64 * 127^2 overflows int8 and int16, not int32
    assert acc.tolist() == [[64 * 127 * 127] * 2] * 2
    t = Tensor.zeros(3, 5, dtype="float16")
    assert t.nbytes == t.nbytes() == 30 and isinstance(t.nbytes() + 1, int)


def test_conv_and_pool_positional_arguments_in_tinygrads_order() -> None:
    """Tensor.conv2d / conv_transpose2d / max_pool2d / avg_pool2d are tinygrad's methods (torch has them only as F
    functions, in another order): positional arguments follow tinygrad, as its nn.Conv2d passes them."""
    F = torch.nn.functional
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), 2, 2, 1, 1)  # groups, stride, dilation, padding
    ref = F.conv2d(tx, tw, tb, stride=2, padding=1, dilation=1, groups=2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    out = Tensor(x).conv2d(Tensor(w), None, 2, 1, 2, 2, "float64")  # dtype: computed in float64
    assert out.dtype.name == "float64"
    np.testing.assert_allclose(out.numpy(), F.conv2d(tx.double(), tw.double(), None, 1, 2, 2, 2).numpy(), rtol=1e-9)
    wt = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    out = Tensor(x).conv_transpose2d(Tensor(wt), None, 2, 2, 1, 1, 1)  # groups, stride, dilation, padding, out pad
    ref = F.conv_transpose2d(tx, torch.tensor(wt), None, stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    out = Tensor(x).max_pool2d((3, 2), 2, 2, 1)  # kernel, stride, dilation, padding
    np.testing.assert_array_equal(out.numpy(), F.max_pool2d(tx, (3, 2), 2, padding=1, dilation=2).numpy())
    out = Tensor(x).avg_pool2d((2, 2), 1, 1, 1, False, False)  # kernel, stride, dilation, padding, ceil, count_pad
    ref = F.avg_pool2d(tx, (2, 2), 1, padding=1, ceil_mode=False, count_include_pad=False)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    # by name, the same as torch's F functions
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=2, padding=1, groups=2)
    np.testing.assert_allclose(
        out.numpy(), F.conv2d(tx, tw, tb, stride=2, padding=1, groups=2).numpy(), rtol=1e-4, atol=1e-4
    )


def test_tinygrads_extra_arguments() -> None:
    rng = np.random.default_rng(12)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t, ta = Tensor(a), torch.tensor(a)
    np.testing.assert_allclose(t.hardsigmoid().numpy(), torch.nn.functional.hardsigmoid(ta).numpy(), atol=1e-6)
    np.testing.assert_allclose(t.hardsigmoid(0.2, 0.4).numpy(), np.clip(0.2 * a + 0.4, 0, 1), atol=1e-6)
    np.testing.assert_allclose(t.selu().numpy(), torch.selu(ta).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(t.selu(1.0, 2.0).numpy(), 2 * torch.nn.functional.elu(ta).numpy(), rtol=1e-6)
    np.testing.assert_allclose((a.T.tolist() @ t).numpy(), a.T @ a, rtol=1e-5, atol=1e-5)  # __rmatmul__
    n = Tensor([1, 2, 3])
    assert (2 << n).tolist() == [4, 8, 16] and (64 >> n).tolist() == [32, 16, 8]
    assert n.lshift(1, reverse=True).tolist() == [2, 4, 8] and n.bitwise_and(6, reverse=True).tolist() == [0, 2, 2]
    assert t.zeros_like(device="CPU").device == "CPU" and t.full_like(2, device="CPU").tolist() == [[2.0] * 4] * 3
    values, indices = t.topk(2, sorted_=True)
    tv, ti = ta.topk(2)
    np.testing.assert_array_equal(values.numpy(), tv.numpy())
    np.testing.assert_array_equal(indices.numpy(), ti.numpy())
    half = Tensor(a.astype(np.float16))
    out = Tensor.einsum("ij,kj->ik", half, half, dtype="float32")
    assert out.dtype.name == "float32"
    h = a.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(out.numpy(), h @ h.T, rtol=1e-5, atol=1e-5)
    out = half.linear(half, dtype="float32")
    np.testing.assert_allclose(out.numpy(), h @ h.T, rtol=1e-5, atol=1e-5)
    assert t.realize(do_update_stats=False) is t and Tensor.rand(3, contiguous=False).shape == (3,)


def test_shard_like_and_contiguous_backward() -> None:
    devs = ("CPU:0", "CPU:1")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for axis in (0, 1, None):
        y = Tensor.ones(4, 6).shard(devs, axis=axis) * 2  # lazy: its axis is known once lowered
        s = Tensor(x).shard_like(y)
        assert s.device == y.device and (s + y).tolist() == (x + 2).tolist()
        assert s.uop.arg == axis
    one = Tensor(x).shard_like(Tensor.ones(2, device="CPU:1"))
    assert one.device == "CPU:1" and one.tolist() == x.tolist()

    w, tw = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (w.contiguous_backward().permute(1, 0) * w.T).sum().backward()
    (tw.permute(1, 0) * tw.T).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
