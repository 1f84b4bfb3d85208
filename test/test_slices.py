"""Contiguous slices of realized tensors as buffers of their own (Tensor._block_as_buffer, Buffer.view): values as
numpy's, torch's view semantics kept (writes into the tensor and through the slice, gradients), and a loop over
offsets that schedules and compiles nothing after its first offset."""

import contextlib
import gc
import weakref

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor, TinyJit, tensor
from lazygrad.device import Buffer
from lazygrad.engine import realize
from lazygrad.helpers import GlobalCounters
from lazygrad.nn import Linear
from lazygrad.nn.optim import Adam
from lazygrad.nn.state import get_parameters
from lazygrad.schedule import kernelize
from lazygrad.uop.ops import Ops
from test.helpers import counting_calls, device_available


def _cut(t: Tensor) -> Buffer | None:
    """The buffer a slice was cut as (a part of its tensor's memory), or None where it stayed a view."""
    u = t.uop
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.arg if u.op is Ops.BUFFER and u.arg.part else None


# the default device addresses any element offset (CPU): every block is cut. CUDA cuts at 16-byte offsets, OpenCL at
# its base-address alignment (see test_cl_sub_buffers_where_aligned): there the other blocks stay views, and the tests
# of what a cut is check values only
CUTS_ANY_OFFSET = Device.DEFAULT.split(":")[0] == "CPU"
cuts_any_offset = pytest.mark.skipif(not CUTS_ANY_OFFSET, reason="the default device cuts only at aligned offsets")


def _data(shape: tuple[int, ...], dtype) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) % 113 - 50).astype(dtype).reshape(shape)


BLOCKS = [
    ((37, 5), (slice(0, 4),)),
    ((37, 5), (slice(33, 37),)),  # the last rows
    ((37, 5), (slice(36, 37),)),  # one row
    ((37, 5), (36,)),
    ((37, 5), (0,)),
    ((37, 5), (slice(11, 30), slice(None))),
    ((37, 5), (-2,)),
    ((41,), (slice(7, 19),)),
    ((41,), (13,)),  # a 0-d tensor
    ((7, 3, 4), (slice(2, 5),)),  # a row block of a 3-d tensor
    ((7, 3, 4), (3, slice(1, 3))),
    ((7, 3, 4), (6, 2)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.bool_])
@pytest.mark.parametrize("shape,index", BLOCKS)
def test_block_values_as_numpy(shape, index, dtype):
    xn = _data(shape, dtype)
    x = Tensor(xn).realize()
    s = x[index]
    assert _cut(s) is not None or not CUTS_ANY_OFFSET, "one contiguous block of a realized tensor is a buffer"
    np.testing.assert_array_equal(s.numpy(), xn[index])
    if dtype != np.bool_:
        np.testing.assert_array_equal((s * 2 + 1).numpy(), xn[index] * 2 + 1)
    assert s.tolist() == xn[index].tolist()


@pytest.mark.parametrize(
    "index",
    [
        (slice(None, None, 2),),
        (slice(None), 1),
        (slice(1, 5), slice(0, 2)),
        (slice(4, 1, -1),),
        (slice(3, 3),),
        (2, slice(1, 3)),  # part of a row (a record's fields): one kernel argument for all of them
    ],
)
def test_strided_empty_or_partial_row_slices_stay_views(index):
    xn = _data((9, 4), np.float32)
    x = Tensor(xn).realize()
    s = x[index]
    assert _cut(s) is None
    np.testing.assert_array_equal(s.numpy(), xn[index])


def test_many_live_rows_of_one_tensor_stay_within_kernel_argument_limits():
    """Rows unbound or summed in a loop: a cut is a kernel argument of its own, and a device takes a bounded number
    (CPU 32); past MAX_LIVE_CUTS live cuts of one tensor, rows are views (one argument for all of them)."""
    xn = _data((40, 10), np.float32)
    x = Tensor(xn).realize()
    rows = x.unbind()
    assert (0 if CUTS_ANY_OFFSET else -1) < sum(_cut(r) is not None for r in rows) <= tensor.MAX_LIVE_CUTS
    np.testing.assert_array_equal(Tensor.stack(*rows).numpy(), xn)
    total = sum((x[i] * x[i + 1]).sum() for i in range(38))
    np.testing.assert_allclose(total.item(), sum((xn[i] * xn[i + 1]).sum() for i in range(38)), rtol=1e-6)


@cuts_any_offset
def test_reading_a_block_runs_no_kernel():
    xn = _data((64, 16), np.float32)
    x = Tensor(xn).realize()
    before = GlobalCounters.kernel_count
    for j in (0, 5, 63):
        np.testing.assert_array_equal(x[j : j + 1].numpy(), xn[j : j + 1])
        assert x.reshape(-1)[j * 16 + 3].item() == xn[j, 3]
    assert GlobalCounters.kernel_count == before


@cuts_any_offset
@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize(
    "shape,index", [((37, 5), slice(3, 9)), ((37, 5), 36), ((37, 5), -2), ((41,), 13), ((7, 3, 4), slice(-3, None))]
)
def test_a_leading_index_cuts_as_the_general_path_does(monkeypatch, shape, index, grad):
    """x[a:b] and x[i] go straight to the cut (_leading_cut), not through the general index plan; the cut is the one
    the plan makes for the same index as a tuple: the view node it stands for, its view and gradient state."""
    xn = _data(shape, np.float32)
    x = Tensor(xn).realize()
    with Tensor.train(), contextlib.nullcontext() if grad else Tensor.no_grad():
        general = x[(index,)]
        planned = counting_calls(monkeypatch, tensor, "_split_index")
        fast = x[index]
        assert planned[0] == 0, "a leading index went through the general plan"
    assert _cut(fast) is not None and _cut(general) is not None
    block_of = [t.uop.base.__dict__[tensor._BLOCK_OF] for t in (fast, general)]
    assert block_of[0] is block_of[1]  # hash-consed: the same view node
    assert fast._view_of == general._view_of and fast._requires_grad == general._requires_grad
    assert fast.shape == general.shape == xn[index].shape
    np.testing.assert_array_equal(fast.numpy(), xn[index])


@pytest.mark.parametrize("index", [slice(2, 1), slice(0, 9), slice(1, 5, 1), slice(None, 3), 9, -10, True])
def test_leading_index_edges_as_numpy(index):
    """Empty and whole slices, an explicit step of 1, an open start, ints out of range (torch's IndexError), a bool
    (refused, as before): the fast path leaves to the general one what it does not cut."""
    xn = _data((9, 4), np.float32)
    x = Tensor(xn).realize()
    if isinstance(index, bool):
        with pytest.raises(NotImplementedError):
            x[index]
    elif isinstance(index, int) and not -9 <= index < 9:
        with pytest.raises(IndexError):
            x[index]
    else:
        np.testing.assert_array_equal(x[index].numpy(), xn[index])


def test_lazy_and_pending_tensors_are_not_cut():
    xn = _data((8, 4), np.float32)
    lazy = Tensor(xn) + 1
    assert _cut(lazy[2:4]) is None
    np.testing.assert_array_equal(lazy[2:4].numpy(), xn[2:4] + 1)
    x = Tensor(xn).realize()
    x[0] = 7.0  # a write pending into x: a slice taken now reads through it
    s = x[0:2]
    assert _cut(s) is None
    np.testing.assert_array_equal(s.numpy(), np.concatenate([np.full((1, 4), 7.0), xn[1:2]]))


# *** writes: the slice is a view of the tensor's memory, as torch's ***


def _torch_and_ours(xn: np.ndarray, program) -> None:
    t = torch.tensor(xn)
    x = Tensor(xn).realize()
    got, want = program(x), program(t)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def _write_then_read(x):
    s = x[2:5]
    x[3] = -1.0  # pending when the slice is read
    return [s, s * 2]


def _write_realized_then_read(x):
    s = x[2:5]
    y = s * 2  # computed from the contents before the write
    x.add_(1) if isinstance(x, torch.Tensor) else x.assign(x + 1).realize()
    return [s, y, s * 2]


def _write_through(x):
    s = x[4:7]
    s[1] = 9.0
    s += 1
    return [s, x[4:7]]


def _assign_through(x):
    s = x[1]
    if isinstance(x, torch.Tensor):
        s.copy_(torch.full((5,), 3.0))
    else:
        s.assign(Tensor.full((5,), 3.0))
    return [s, x[0:3]]


def _shift_down(x):
    x[1:] = x[:-1].clone() if isinstance(x, torch.Tensor) else x[:-1]  # torch refuses the overlapping copy itself
    return [x[0:4]]


def _shift_up(x):
    x[:-2] = x[2:].clone() if isinstance(x, torch.Tensor) else x[2:]
    return [x[0:4]]


def _block_from_block(x):
    s = x[2:8][1:3]
    s *= 2
    return [s, x[3:5]]


@pytest.mark.parametrize(
    "program",
    [_write_then_read, _write_realized_then_read, _write_through, _assign_through, _shift_down, _shift_up,
     _block_from_block],
)  # fmt: skip
def test_writes_as_torch(program):
    _torch_and_ours(_data((11, 5), np.float32), program)


@cuts_any_offset
def test_slice_outlives_its_tensor():
    xn = _data((50, 8), np.float32)
    s = Tensor(xn).realize()[10:20]
    memory = weakref.ref(_cut(s).memory)
    gc.collect()
    assert memory() is not None  # the tensor's memory lives on in the slice
    np.testing.assert_array_equal((s + 0).numpy(), xn[10:20])
    del s
    gc.collect()
    assert memory() is None


def test_a_loop_of_slices_keeps_no_buffers():
    x = Tensor(_data((200, 8), np.float32)).realize()
    w = Tensor(np.ones((8, 3), np.float32)).realize()

    def live() -> int:
        gc.collect()
        return sum(isinstance(o, Buffer) for o in gc.get_objects())

    (x[0:4] @ w).sum().realize()
    before = live()
    for j in range(100):
        (x[j : j + 4] @ w).sum().realize()
    assert live() <= before + 4


# *** gradients ***


def test_gradients_through_a_block_as_torch():
    xn = _data((9, 4), np.float32) / 10
    wn = np.linspace(-1, 1, 4).astype(np.float32)
    # requires_grad unset everywhere (tinygrad's way): the tensor sliced gets its gradient too
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    s = x[3:6]
    assert _cut(s) is not None or not CUTS_ANY_OFFSET
    ((s * w).relu() * s).sum().backward()
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    ts = tx[3:6]
    ts.retain_grad()
    ((ts * tw).relu() * ts).sum().backward()
    for ours, theirs in ((x, tx), (w, tw), (s, ts)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)
    # Tensor.gradient, the slice and the tensor both used
    x = Tensor(xn).realize()
    (g,) = ((x[1:3] * w).sum() + x[0].sum() * 2 + x[1:5][1:3].sum()).gradient(x)
    tx = torch.tensor(xn, requires_grad=True)
    ((tx[1:3] * tw.detach()).sum() + tx[0].sum() * 2 + tx[1:5][1:3].sum()).backward()
    np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_a_tensor_requiring_grad_is_sliced_as_a_view():
    xn = _data((9, 4), np.float32) / 10
    x = Tensor(xn, requires_grad=True)
    x.realize()
    s = x[2:4]
    assert _cut(s) is None
    (s * s).sum().backward()
    expected = np.zeros_like(xn)
    expected[2:4] = 2 * xn[2:4]
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)
    w = Tensor(xn, requires_grad=True)
    v = w.reshape(36)  # a view of a tensor requiring grad: requires grad too
    assert _cut(v[4:8]) is None


def _mlp_losses(xn, yn, offsets, batch: int, sliced: bool):
    rng = np.random.default_rng(1)
    l1, l2 = Linear(8, 16), Linear(16, 3)
    for layer in (l1, l2):
        layer.weight.assign(Tensor(rng.standard_normal(layer.weight.shape).astype(np.float32) * 0.3)).realize()
        layer.bias.assign(Tensor(rng.standard_normal(layer.bias.shape).astype(np.float32) * 0.1)).realize()
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    x, y = Tensor(xn).realize(), Tensor(yn).realize()
    losses = []
    with Tensor.train():
        for j in offsets:
            if sliced:
                xb, yb = x[j : j + batch], y[j : j + batch]
            else:
                xb, yb = Tensor(xn[j : j + batch]), Tensor(yn[j : j + batch])
            opt.zero_grad()
            loss = l2(l1(xb).relu()).sparse_categorical_crossentropy(yb).backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.numpy() for p in opt.params], x


@cuts_any_offset
def test_a_loop_over_offsets_schedules_and_compiles_nothing_new(monkeypatch):
    """The minibatch loop of PyTorch tutorials, `X[j:j+B]` of a realized dataset: after the first offsets every step
    is a schedule cache hit over the same compiled kernels, and the values are those of batches copied in."""
    rng = np.random.default_rng(0)
    n, batch = 67, 5  # prime sizes: offsets of every alignment
    xn = rng.standard_normal((n, 8)).astype(np.float32)
    yn = rng.integers(0, 3, n).astype(np.int32)
    _mlp_losses(xn, yn, [0, 1], batch, sliced=True)
    scheduled = counting_calls(monkeypatch, kernelize, "_create_schedule")
    compiled = counting_calls(monkeypatch, realize, "get_program")
    offsets = [0, 1, 2, 31, 61, n - batch, 17]
    losses, params, x = _mlp_losses(xn, yn, offsets, batch, sliced=True)
    setup = scheduled[0]  # (the model's construction schedules its own small graphs)
    assert compiled[0] == 0
    _mlp_losses(xn, yn, [7, 3, 13, 61], batch, sliced=True)
    assert scheduled[0] == setup, "a new offset scheduled a new graph"
    assert compiled[0] == 0
    np.testing.assert_array_equal(x.numpy(), xn)  # the dataset is only read
    ref_losses, ref_params, _ = _mlp_losses(xn, yn, offsets, batch, sliced=False)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p, r, rtol=1e-6, atol=1e-7)


# *** TinyJit ***


def test_jit_replays_slices_at_changing_offsets():
    xn = _data((40, 6), np.float32) / 7
    wn = np.linspace(-1, 1, 18).astype(np.float32).reshape(6, 3)
    x, w = Tensor(xn).realize(), Tensor(wn).realize()

    @TinyJit
    def step(xb: Tensor) -> Tensor:
        return (xb @ w).relu().realize()

    for j in [0, 3, 36, 1, 17, 36, 0]:
        np.testing.assert_allclose(step(x[j : j + 4]).numpy(), np.maximum(xn[j : j + 4] @ wn, 0), rtol=1e-6)
    assert step.captured is not None


def test_jit_slices_inside_and_writes_through_an_argument():
    @TinyJit
    def f(a: Tensor) -> Tensor:
        a[1:3] += 1  # a write into the argument, through a slice of it
        return (a[0:2] * 2).realize()

    for k in range(4):
        an = _data((5, 3), np.float32) + k
        a = Tensor(an).realize()
        out = f(a)
        an[1:3] += 1
        np.testing.assert_array_equal(out.numpy(), an[0:2] * 2)
        np.testing.assert_array_equal(a.numpy(), an)

    @TinyJit
    def g(b: Tensor) -> Tensor:
        b += 10
        return b.sum().realize()

    for k in range(4):
        an = _data((6, 3), np.float32) + k
        a = Tensor(an).realize()
        assert g(a[2:4]).item() == (an[2:4] + 10).sum()
        an[2:4] += 10  # the argument is a view of a: the write lands there, as in torch
        np.testing.assert_array_equal(a.numpy(), an)


def test_jit_output_sliced_and_fed_back():
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a * 2).cat(a * 3).realize()

    n = 4096  # (long enough that the kernel writes the first half before it reads the input for the second)
    a = Tensor(np.arange(n, dtype=np.float32) % 7).realize()
    for _ in range(5):
        an = a.numpy()
        out = f(a)
        np.testing.assert_array_equal(out.numpy(), np.concatenate([an * 2, an * 3]))
        a = out[0:n]  # a part of the memory the next replay writes: copied as the input, not read while written


# *** devices ***


@pytest.mark.skipif(not device_available("CL"), reason="no OpenCL device")
def test_cl_sub_buffers_where_aligned():
    align = Device["CL"].allocator.sub_align
    row = align // 4  # float32 rows exactly one alignment long
    xn = _data((6, row), np.float32)
    x = Tensor(xn, device="CL").realize()
    s = x[2:4]
    assert _cut(s) is not None and _cut(s).offset == 2 * align
    np.testing.assert_array_equal((s + 1).numpy(), xn[2:4] + 1)
    s[0] = 5.0
    xn[2] = 5.0
    np.testing.assert_array_equal(x.numpy(), xn)
    odd = x.reshape(-1)[1:5]  # off the alignment: read at an offset in the kernel
    assert _cut(odd) is None
    np.testing.assert_array_equal((odd * 2).numpy(), xn.reshape(-1)[1:5] * 2)


def test_devices_without_offsets_keep_views():
    xn = _data((9, 4), np.float32)
    x = Tensor(xn, device="PYTHON").realize()
    s = x[3:5]
    assert _cut(s) is None
    np.testing.assert_array_equal((s + 1).numpy(), xn[3:5] + 1)
    assert Device["PYTHON"].allocator.offset(1, 16, 16) is None


def test_buffer_view_keeps_its_memory():
    b = Buffer("CPU", 10, Tensor([1.0]).dtype)
    b.copyin(memoryview(np.arange(10, dtype=np.float32).tobytes()))
    v = b.view(3, 4)
    assert v is not None and v.memory is b and v.offset == 12 and v.part
    w = v.view(1, 2)  # a view of a view: of the same memory
    assert w.memory is b and w.offset == 16
    a = w.alias()
    assert a.memory is b and a.offset == 16 and a.part
    del b
    gc.collect()
    np.testing.assert_array_equal(np.frombuffer(a.as_bytes(), np.float32), [4, 5])
