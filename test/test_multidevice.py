"""Sharded tensors over several devices of one process (lazygrad/schedule/multi.py), against torch on one device."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import torch

from lazygrad import Context, Device, GlobalCounters, Tensor, TinyJit, nn
from lazygrad.engine.realize import run_schedule
from lazygrad.schedule.multi import lower_multi, split_bounds
from lazygrad.uop.ops import Ops
from test.helpers import device_available

D2 = ("CPU", "CPU:1")
D3 = ("CPU", "CPU:1", "CPU:2")
D4 = ("CPU", "CPU:1", "CPU:2", "CPU:3")


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def check(
    fn: Callable[..., Any],
    torch_fn: Callable[..., Any] | None,
    inputs: list[np.ndarray],
    shards: list[tuple[tuple[str, ...], int | None] | None],
    atol: float = 1e-5,
) -> None:
    """fn on the inputs sharded as given (None: not sharded) equals torch_fn (default fn) on one device, forward and
    the gradients of sum(out * w) of every input (through shard(): the inputs are leaves on one device)."""
    torch_fn = torch_fn or fn
    xs = [Tensor(x, requires_grad=True) for x in inputs]
    out = fn(*[x if s is None else x.shard(*s) for x, s in zip(xs, shards)])
    ts = [torch.tensor(x, requires_grad=True) for x in inputs]
    ref = torch_fn(*ts)
    assert out.shape == tuple(ref.shape)
    items = out.schedule()
    for si in items:  # every kernel runs on one device; only copies cross
        assert si.ast.op is Ops.COPY or len({b.device for b in si.bufs}) == 1
    run_schedule(items)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-5)
    w = _rand(*ref.shape, seed=7)
    (out * Tensor(w, device=out.device)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    for x, t in zip(xs, ts):
        assert x.grad is not None and x.grad.device == "CPU"
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=atol * 10, rtol=1e-4)


# *** the tensor itself ***


@pytest.mark.parametrize("n,k", [(5, 2), (7, 3), (5, 4), (1, 2), (0, 2), (8, 4)])
def test_shard_roundtrip_uneven(n: int, k: int) -> None:
    a = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    devs = D4[:k]
    x = Tensor(a).shard(devs, axis=0)
    assert x.device == devs and x.shape == (n, 3)
    np.testing.assert_equal(x.numpy(), a)
    np.testing.assert_equal(x.to("CPU:1").numpy(), a)
    sizes = [p.shape[0] for p in x.uop.src]
    assert sizes == [hi - lo for lo, hi in split_bounds(n, k)]
    assert all(p.device == d for p, d in zip(x.realize().uop.src, devs))


def test_parts_are_separate_buffers_on_their_devices() -> None:
    x = Tensor(np.arange(6, dtype=np.float32)).shard(D2, axis=0).realize()
    bufs = [p.base.arg for p in x.uop.src]
    assert [b.device for b in bufs] == list(D2) and bufs[0].ptr != bufs[1].ptr
    halves = [np.arange(3, dtype=np.float32).tobytes(), np.arange(3, 6, dtype=np.float32).tobytes()]
    assert [bytes(b.as_bytes()) for b in bufs] == halves


def test_replicate_and_shard_inplace() -> None:
    a = _rand(4, 3)
    t = Tensor(a)
    assert t.shard_(D3) is t and t.device == D3
    np.testing.assert_equal((t + 1).numpy(), a + 1)
    np.testing.assert_equal(Tensor(a).to(D2).numpy(), a)  # .to(tuple) replicates
    np.testing.assert_equal(Tensor([1.0, 2.0], device=D2).numpy(), [1.0, 2.0])  # made on a tuple of devices
    np.testing.assert_equal(Tensor.zeros(2, 3, device=D2).numpy(), np.zeros((2, 3)))
    assert Tensor.empty(2, device=D2).device == D2
    # a sharded tensor resharded: gathered, then split anew
    np.testing.assert_equal(Tensor(a).shard(D2, axis=0).shard(D3, axis=1).numpy(), a)
    s = Tensor(a).shard(D2, axis=1)
    assert s.shard(D2, axis=-1) is s  # the same split: nothing to do


def test_errors() -> None:
    with pytest.raises(RuntimeError, match="tuple of devices"):
        Tensor([1.0]).shard("CPU")
    with pytest.raises(IndexError):
        Tensor([1.0]).shard(D2, axis=2)
    with pytest.raises(IndexError, match="0-d"):
        Tensor(1.0).shard(D2, axis=0)
    with pytest.raises(RuntimeError, match="different devices"):
        Tensor([1.0]).shard(D2) + Tensor([1.0]).shard(D3)
    with pytest.raises(RuntimeError, match="different devices"):
        Tensor([1.0, 2.0]).shard(D2) + Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="unknown device"):
        Tensor([1.0]).shard(("CPU", "NOPE"))


# *** ops: forward and backward against torch ***


@pytest.mark.parametrize("n", [1, 5])
def test_elementwise(n: int) -> None:
    a, b = _rand(n, 3), _rand(n, 3, seed=1)
    check(lambda x, y: (x * y + x.exp()).relu(), None, [a, b], [(D2, 0), (D2, 0)])
    check(lambda x, y: x * y - y.sigmoid(), None, [a, b], [(D3, 0), (D3, None)])  # split with replicated
    check(lambda x, y: x / (y.abs() + 1), None, [a, b], [(D2, 0), (D2, 1)])  # split on different axes
    pick = lambda x, y: (x > 0).where(x, y) if isinstance(x, Tensor) else torch.where(x > 0, x, y)  # noqa: E731
    check(pick, None, [a, b], [(D2, 1), (D2, 0)])


@pytest.mark.parametrize("devs,axis", [(D2, 0), (D3, 1), (D4, 1), (D2, None)])
def test_reduce(devs: tuple[str, ...], axis: int | None) -> None:
    a = _rand(7, 5)
    check(lambda x: x.sum(0), None, [a], [(devs, axis)])
    check(lambda x: x.sum(1, keepdim=True), None, [a], [(devs, axis)])
    check(lambda x: x.sum(), None, [a], [(devs, axis)])
    check(lambda x: x.max(0), lambda x: x.amax(0), [a], [(devs, axis)])
    check(lambda x: x.mean(), None, [a], [(devs, axis)])
    check(lambda x: x.softmax(1), lambda x: x.softmax(1), [a], [(devs, axis)])


def test_reduce_int_and_prod() -> None:
    a = np.arange(1, 11, dtype=np.int32).reshape(5, 2)
    x = Tensor(a).shard(D3, axis=0)
    np.testing.assert_equal(x.sum(0).numpy(), a.sum(0))
    np.testing.assert_equal(x.max().numpy(), a.max())
    np.testing.assert_equal(x.prod(0).numpy(), a.prod(0))
    np.testing.assert_equal((x > 4).any(1).numpy(), (a > 4).any(1))


@pytest.mark.parametrize("m,k,n", [(5, 7, 2), (1, 3, 1)])
def test_matmul(m: int, k: int, n: int) -> None:
    a, w = _rand(m, k), _rand(k, n, seed=1)
    check(lambda x, y: x @ y, None, [a, w], [(D2, 0), (D2, None)])  # batch split, weights replicated: no communication
    check(lambda x, y: x @ y, None, [a, w], [(D2, 1), (D2, 0)])  # contraction split: partial products + all-reduce
    check(lambda x, y: x @ y, None, [a, w], [(D3, None), (D3, 1)])  # output columns split
    check(lambda x, y: x @ y, None, [a, w], [(D3, 1), (D3, None)])  # one side split on the contraction


def test_matmul_batch_split_needs_no_copy() -> None:
    x = Tensor(_rand(8, 4)).shard(D2, axis=0).realize()
    w = Tensor(_rand(4, 3)).shard(D2).realize()
    items = (x @ w).relu().schedule()
    assert not [si for si in items if si.ast.op is Ops.COPY]
    y = Tensor(_rand(8, 4)).shard(D2, axis=1).realize()
    v = Tensor(_rand(4, 3)).shard(D2, axis=0).realize()
    items = (y @ v).schedule()
    assert len([si for si in items if si.ast.op is Ops.COPY]) == 2  # each device reads the other's partial product


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_movement(axis: int) -> None:
    a = _rand(4, 6, 5)
    s = [(D2, axis)]
    check(lambda x: x.reshape(4, 30), None, [a], s)
    check(lambda x: x.reshape(24, 5), None, [a], s)
    check(lambda x: x.reshape(2, 2, 3, 2, 5), None, [a], s)
    check(lambda x: x.permute(2, 0, 1), None, [a], s)
    check(lambda x: x[1:3, 2:5, ::2] if isinstance(x, Tensor) else x[1:3, 2:5, ::2], None, [a], s)
    check(lambda x: x.pad(((1, 0), (0, 2), (1, 1))), lambda x: torch.nn.functional.pad(x, (1, 1, 0, 2, 1, 0)), [a], s)
    check(lambda x: x.flip(axis), lambda x: x.flip(axis), [a], s)
    check(lambda x: x.reshape(4, 6, 1, 5).expand(4, 6, 3, 5), None, [a], s)
    check(lambda x: x.transpose(0, 1).contiguous().reshape(-1), lambda x: x.transpose(0, 1).reshape(-1), [a], s)
    check(lambda x: x.cat(x * 2, dim=axis), lambda x: torch.cat([x, x * 2], dim=axis), [a], s)


def test_shrink_of_split_axis_stays_split() -> None:
    x = Tensor(np.arange(10, dtype=np.float32)).shard(D2, axis=0).realize()
    y = x[3:8]
    (low,), _ = lower_multi([y.uop], {})
    assert low.arg == 0 and [p.shape[0] for p in low.src] == [2, 3]  # rows 3, 4 of part 0 and 5, 6, 7 of part 1
    assert not [si for si in (y * 2).schedule() if si.ast.op is Ops.COPY]
    np.testing.assert_equal((x[3:8] * 2).numpy(), np.arange(3, 8) * 2)
    np.testing.assert_equal(x[6:].numpy(), np.arange(6, 10))


def test_conv_with_batch_split() -> None:
    x, w = _rand(5, 3, 6, 6), _rand(4, 3, 3, 3, seed=1)
    check(
        lambda x, w: x.conv2d(w, padding=1),
        lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
        [x, w],
        [(D2, 0), (D2, None)],
        atol=1e-4,
    )  # 3 + 2 images, the weight gradient all-reduced


def test_composites_over_the_split_axis() -> None:
    a = _rand(7, 5)
    check(lambda x: x.layernorm(), lambda x: torch.nn.functional.layer_norm(x, (5,)), [a], [(D3, 0)])
    check(lambda x: x.cumsum(0), None, [a], [(D2, 0)])
    check(lambda x: x.log_softmax(0), lambda x: x.log_softmax(0), [a], [(D3, 0)])
    x = Tensor(a).shard(D3, axis=0)
    np.testing.assert_equal(x.argmax(0).numpy(), a.argmax(0))
    np.testing.assert_equal(x.argmax(1).numpy(), a.argmax(1))
    idx = np.array([6, 0, 3, 3], dtype=np.int32)
    np.testing.assert_equal(x[Tensor(idx).shard(D3)].numpy(), a[idx])  # rows picked across the parts


def test_random_and_dropout_match_one_device() -> None:
    Tensor.manual_seed(1)
    r = Tensor.rand(6, 4, device=D2).realize()
    parts = [bytes(p.base.arg.as_bytes()) for p in r.uop.src]
    assert parts[0] == parts[1]  # replicas hold the same numbers
    Tensor.manual_seed(1)
    np.testing.assert_equal(r.numpy(), Tensor.rand(6, 4).numpy())
    with Tensor.train():  # each part keeps its own rows of the one mask
        Tensor.manual_seed(2)
        got = Tensor.ones(7, 4).shard(D2, axis=0).dropout(0.5).numpy()
        Tensor.manual_seed(2)
        np.testing.assert_equal(got, Tensor.ones(7, 4).dropout(0.5).numpy())


# *** all-reduce ***


@pytest.mark.parametrize("devs", [D2, D3, D4])
@pytest.mark.parametrize("n", [1, 63, 64, 65])
def test_all_reduce_sizes(devs: tuple[str, ...], n: int) -> None:
    a = _rand(len(devs), n)
    x = Tensor(a).shard(devs, axis=0).realize()
    with Context(ALLREDUCE_RING_BYTES=256):  # 64 float32: n = 63 goes direct, 64 and up go round the ring
        out = x.sum(0)
        items = out.schedule()
        run_schedule(items)
    np.testing.assert_allclose(out.numpy(), a.sum(0), rtol=1e-6, atol=1e-6)
    copies = [si for si in items if si.ast.op is Ops.COPY]
    k = len(devs)
    ring = k >= 3 and n * 4 >= 256 and n >= k
    if k == 1:
        assert not copies
    elif ring:  # reduce-scatter then all-gather: 2(k-1) chunks through each device, one chunk per copy
        assert len(copies) == 2 * k * (k - 1) - sum(2 * (k - 1) for lo, hi in split_bounds(n, k) if hi == lo)
        assert sum(si.bufs[0].nbytes for si in copies) == 2 * (k - 1) * n * 4
    else:  # every device reads every other's partial
        assert len(copies) == k * (k - 1) and all(si.bufs[0].nbytes == n * 4 for si in copies)
    # every replica holds the same bits
    parts = [np.frombuffer(p.base.arg.as_bytes(), np.float32) for p in out.uop.src]
    assert all(np.array_equal(parts[0], p) for p in parts[1:])


def test_all_reduce_max_and_ring_default_threshold() -> None:
    a = _rand(4, 70_000)  # 280 KB: above the default 256 KiB, a ring
    x = Tensor(a).shard(D4, axis=0).realize()
    np.testing.assert_equal(x.max(0).numpy(), a.max(0))
    items = x.sum(0).schedule()
    assert len([si for si in items if si.ast.op is Ops.COPY]) == 2 * 4 * 3


# *** training ***


def _train_mlp(devs: tuple[str, ...] | None, jit: bool, steps: int = 3, rows: int = 12) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal((steps, rows, 6)).astype(np.float32), rng.integers(0, 3, (steps, rows))
    Tensor.manual_seed(3)
    model = [nn.Linear(6, 16), Tensor.relu, nn.Linear(16, 3)]
    params = nn.state.get_parameters(model)
    for p in params:
        p.realize() if devs is None else p.shard_(devs).realize()
    opt = nn.optim.Adam(params, lr=0.05)

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = x.sequential(model).sparse_categorical_crossentropy(y).backward()
        opt.step()
        return loss

    run = TinyJit(step) if jit else step
    with Tensor.train():
        for x, y in zip(xs, ys):
            xt, yt = Tensor(x), Tensor(y)
            if devs is not None:
                xt, yt = xt.shard(devs, axis=0), yt.shard(devs, axis=0)
            run(xt, yt)
    return [p.numpy() for p in params]


def test_data_parallel_training_matches_one_device() -> None:
    ref = _train_mlp(None, jit=False)
    for got in (_train_mlp(D2, jit=False),):  # 12 rows: 6 + 6
        for a, b in zip(ref, got):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_data_parallel_training_uneven_batch() -> None:
    ref = _train_mlp(None, jit=False, steps=2, rows=4)
    got = _train_mlp(D3, jit=False, steps=2, rows=4)  # 2 + 2 + 0 rows: the last device has none
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_tinyjit_over_a_sharded_step() -> None:
    ref = _train_mlp(None, jit=False, steps=4)
    got = _train_mlp(D2, jit=True, steps=4)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def _train_linear(shard: bool, jit: bool, grads: str, steps: int = 5) -> list[list[np.ndarray]]:
    """A Linear trained by SGD on x.square().mean() loss, its weights sharded (and the batch split) over D2 or on one
    device; each step's gradients and weights. grads: "zero" (zero_grad in the step), "none" (p.grad = None before
    it), "accumulate" (neither: torch adds each backward into .grad) or "reset" (accumulate, p.grad = None once
    before a replay)."""
    rng = np.random.default_rng(0)
    lin = nn.Linear(4, 3)
    lin.weight, lin.bias = Tensor(_rand(3, 4, seed=1), requires_grad=True), Tensor(_rand(3, seed=2), requires_grad=True)
    params = [lin.weight, lin.bias]
    for p in params:
        p.shard_(D2).realize() if shard else p.realize()
    opt = nn.optim.SGD(params, lr=0.1)

    def step(x: Tensor) -> Tensor:
        if grads == "zero":
            opt.zero_grad()
        loss = lin(x).square().mean().backward()
        opt.step()
        return loss

    run = TinyJit(step) if jit else step
    out = []
    with Tensor.train():
        for i in range(steps):
            x = Tensor(rng.uniform(-1, 1, (6, 4)).astype(np.float32))
            if grads == "none" or (grads == "reset" and i == 3):
                for p in params:
                    p.grad = None
            run(x.shard(D2, axis=0) if shard else x)
            out.append([p.grad.numpy() for p in params] + [p.numpy() for p in params])
    return out


@pytest.mark.parametrize("grads", ["zero", "none", "accumulate", "reset"])
def test_tinyjit_sharded_linear_grads_each_replay(grads: str) -> None:
    """An accumulating backward under TinyJit read the capture's sharded .grad on every replay (the non-sharded
    .grad was already an input refilled from the parameter's .grad at each call): from the first replay on, the
    gradients and so the weights differed from the steps without JIT."""
    ref = _train_linear(False, False, grads)
    for shard, jit in ((True, False), (True, True), (False, True)):
        got = _train_linear(shard, jit, grads)
        for i, (a, b) in enumerate(zip(ref, got)):
            for name, x, y in zip(("weight.grad", "bias.grad", "weight", "bias"), a, b):
                np.testing.assert_allclose(
                    y, x, atol=1e-5, rtol=1e-5, err_msg=f"step {i} {name} shard={shard} jit={jit}"
                )


def test_tinyjit_sharded_argument_and_counts() -> None:
    w = Tensor.zeros(4).contiguous().shard(D2).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        w.assign(w + x.sum(0))
        return w.sum()

    total = np.zeros(4, np.float32)
    for i in range(4):
        x = Tensor.full((2, 4), float(i + 1)).contiguous().shard(D2, axis=0).realize()
        before = GlobalCounters.kernel_count
        out = f(x)
        total += 2 * (i + 1)
        assert out.item() == total.sum()
        np.testing.assert_equal(w.numpy(), total)
        if i >= 2:  # a replay: the captured kernels and copies only
            assert GlobalCounters.kernel_count - before == f.captured.kernel_count
    with pytest.raises(Exception, match="split otherwise"):
        f(Tensor.full((2, 4), 1.0).contiguous().shard(D2).realize())


def test_devices_with_one_compiler_share_one_compiler_call(monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = type(Device["CPU"].compiler)
    if not hasattr(compiler, "compile_many"):
        pytest.skip("the CPU compiler builds kernels one by one")
    a = _rand(4, 6)
    x = Tensor(a).shard(D2, axis=0).realize()
    calls: list[list[str]] = []
    real = compiler.compile_many
    monkeypatch.setattr(compiler, "compile_many", lambda self, srcs: calls.append(srcs) or real(self, srcs))
    c = 1 + float(np.random.default_rng().integers(1, 1 << 20)) / (1 << 20)  # a constant no compiled kernel holds
    out = (x * c).exp().sum(1).realize()  # one kernel per device
    assert len(calls) == 1 and len(calls[0]) == 1  # both devices' kernel: one compiler call, built once
    np.testing.assert_allclose(out.numpy(), np.exp(a * c).sum(1), rtol=1e-5)


# *** other devices ***


@pytest.mark.skipif(not device_available("CL"), reason="no OpenCL device")
def test_mixed_cpu_cl_python() -> None:
    devs = ("CPU", "CL", "PYTHON")
    check(lambda x, y: (x @ y).relu().sum(0), None, [_rand(5, 4), _rand(4, 3, seed=1)], [(devs, 0), (devs, None)])
    check(lambda x: x.reshape(20).sum(), None, [_rand(5, 4)], [(("CL", "CPU:1"), 1)])


def test_gather_backward_and_mixed_split_assign() -> None:
    a = _rand(5, 3)
    check(lambda x: (x.to("CPU:1") * 2).exp(), lambda x: (x * 2).exp(), [a], [(D3, 0)])
    check(lambda x: x.to("CPU").sum(0), lambda x: x.sum(0), [a], [(D2, 1)])
    t = Tensor.zeros(5, 3).contiguous().shard(D2, axis=0).realize()
    t.assign(Tensor(a).shard(D2, axis=1))  # written part by part in t's own split
    t.realize()
    assert [p.shape for p in t.uop.src] == [(3, 3), (2, 3)]
    np.testing.assert_equal(t.numpy(), a)


def test_tinyjit_lazy_sharded_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    # the parts computed for the call are held by the replay only: with a freed block going back to the system at once
    # (its first bytes overwritten by malloc's lists), a replay that let them go before its kernels ran read garbage
    for d in D2:
        monkeypatch.setattr(Device[d].allocator, "cache_limit", 0)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * 2).sum(1)

    for i in range(4):
        a = _rand(6, 4, seed=i)
        x = Tensor(a).shard(D2, axis=0) + 1  # lazy: computed before the call takes its parts
        np.testing.assert_allclose(f(x).numpy(), ((a + 1) * 2).sum(1), rtol=1e-6)
