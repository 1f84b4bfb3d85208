"""End-to-end: making tensors (constants, ranges, random numbers), errors on bad input, and printing."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from lazygrad import Device, GlobalCounters, Tensor, dtypes
from test.helpers import assert_close

# *** from Python values ***


@pytest.mark.parametrize(
    "value,dtype",
    [(3, "int32"), (-7, "int32"), (2.5, "float32"), (True, "bool"), (False, "bool"), (0.0, "float32")],
)
def test_scalar(value, dtype):
    t = Tensor(value)
    assert t.shape == () and t.ndim == 0 and t.dtype.name == dtype and t.numel() == 1
    assert t.item() == value and type(t.item()) is type(value)
    assert t.tolist() == value
    assert t.numpy().dtype.name == dtype and t.numpy().shape == ()


@pytest.mark.parametrize(
    "data",
    [
        [1, 2, 3],
        [[1.5, -2.0], [3.25, 4.0], [0.0, -0.5]],
        [[[True], [False]], [[False], [True]]],
        [[1, 2.5], [3, 4]],
        [True, 2, 3],
        [[], []],
        [[[1, 2, 3]]],
    ],
    ids=repr,
)
def test_nested_list(data):
    t = Tensor(data)
    ref = torch.tensor(data)
    expected_dtype = {torch.int64: "int32"}.get(ref.dtype, str(ref.dtype).removeprefix("torch."))
    assert t.shape == tuple(ref.shape) and t.dtype.name == expected_dtype
    assert t.tolist() == ref.tolist()
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_python_ints_beyond_int32():
    # torch makes every Python int an int64; lazygrad's default int is int32, widened when a value needs it
    assert Tensor(2**40).dtype == dtypes.int64 and Tensor(2**40).item() == 2**40
    assert Tensor([1, -(2**35)]).dtype == dtypes.int64 and Tensor([1, -(2**35)]).tolist() == [1, -(2**35)]
    assert Tensor.full((2,), 2**33).tolist() == [2**33, 2**33]
    assert Tensor.arange(2**33, 2**33 + 3).tolist() == [2**33, 2**33 + 1, 2**33 + 2]
    assert Tensor([2**31 - 1, -(2**31)]).dtype == dtypes.int32
    with raises_eagerly(ValueError, str(2**70), "int64"):
        Tensor([2**70])


def test_list_roundtrip_through_kernel():
    data = [[1, -2, 3], [4, 5, -6]]
    assert (Tensor(data) * 2).tolist() == [[2, -4, 6], [8, 10, -12]]
    assert (Tensor(data) * 2)[1, 2].item() == -12
    assert Tensor([[1.5]]).item() == 1.5


def test_bytes():
    t = Tensor(b"\x01\x02\xff")
    assert t.dtype == dtypes.uint8 and t.tolist() == [1, 2, 255]
    assert Tensor(np.array([1, 2], np.int32).tobytes(), dtype=dtypes.int32).tolist() == [1, 2]


def test_tensor_of_tensor_shares_value():
    a = Tensor([1.0, 2.0])
    assert Tensor(a).tolist() == [1.0, 2.0]
    assert Tensor([1, 2], dtype=dtypes.float32).tolist() == [1.0, 2.0]
    assert Tensor(1, dtype="float16").dtype == dtypes.float16


# *** constant and range creation ***


def test_empty():
    t = Tensor.empty(2, 3)
    assert t.shape == (2, 3) and t.dtype == dtypes.float32
    assert Tensor.empty((4,), dtype=dtypes.int8).numpy().shape == (4,)
    assert Tensor.empty(0, 3).numpy().shape == (0, 3)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_allocation_failure_names_size_dtype_shape_and_device(device):
    host = r"cannot allocate 4\.0 TB for a float32 tensor of shape \(1000000000000,\) in host memory"
    with pytest.raises(MemoryError, match=rf"{host} to read it from {device}"):
        Tensor.empty(10**12, device=device).numpy()
    dev = rf"cannot allocate 2\.0 TB for a int16 tensor of shape \(1000000, 1000000\) on {device}"
    with pytest.raises(MemoryError, match=dev):
        (Tensor.ones(10**6, 10**6, dtype=dtypes.int16, device=device) + 1).realize()


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_allocation_over_memory_and_swap_is_refused_before_any_page_is_touched(monkeypatch, device):
    """Where the kernel overcommits without limit, a 4 TB allocation succeeded and zeroing it (bytearray) or a kernel's
    first store had the process killed by the OOM killer (seen on a 128 GB machine): a host allocation larger than
    memory and swap together is refused up front, as a kernel that does not overcommit refuses it. (The machine's
    size is stood in for by 1 MB here.)"""
    import lazygrad.helpers

    monkeypatch.setattr(lazygrad.helpers, "host_memory_bytes", lambda: 1 << 20)
    small = (Tensor.ones(1000, device=device) + 1).realize()  # under the limit: allocated as always
    assert small.tolist()[:2] == [2.0, 2.0]
    with pytest.raises(
        MemoryError,
        match=rf"cannot allocate 4\.2 MB for a float32 tensor of shape \(1048576,\) on {device}: .*memory and swap",
    ):
        (Tensor.ones(1 << 20, device=device) + 1).realize()
    if device == "PYTHON":  # (reading a tensor back allocates host memory for it; CPU tensors are read in place)
        big = Tensor.empty(1 << 20, device=device)
        with pytest.raises(MemoryError, match=r"in host memory to read it from PYTHON.*memory and swap"):
            big.numpy()


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (2, 1, 4)])
def test_zeros_ones_full(shape):
    assert_close(Tensor.zeros(*shape), torch.zeros(shape))
    assert_close(Tensor.ones(shape), torch.ones(shape))
    assert_close(Tensor.full(shape, 2.5), torch.full(shape, 2.5))
    assert_close(Tensor.full(shape, 7), torch.full(shape, 7, dtype=torch.int32))
    assert_close(Tensor.full(shape, True), torch.full(shape, True))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "float16", "float64", "bool"])
def test_creation_dtypes(dtype):
    tdt = getattr(torch, dtype)
    assert_close(Tensor.zeros(2, 3, dtype=dtype), torch.zeros(2, 3, dtype=tdt))
    assert_close(Tensor.ones(3, dtype=dtype), torch.ones(3, dtype=tdt))
    assert_close(Tensor.full((2, 2), 1, dtype=dtype), torch.full((2, 2), 1, dtype=tdt))


def test_like():
    x = Tensor.ones(2, 3, dtype=dtypes.int8)
    assert_close(x.zeros_like(), torch.zeros(2, 3, dtype=torch.int8))
    assert_close(x.ones_like(), torch.ones(2, 3, dtype=torch.int8))
    assert_close(x.full_like(-4), torch.full((2, 3), -4, dtype=torch.int8))
    assert_close(x.full_like(2.5, dtype=dtypes.float32), torch.full((2, 3), 2.5))
    assert_close(x.zeros_like(dtype="float16"), torch.zeros(2, 3, dtype=torch.float16))
    assert x.empty_like().shape == (2, 3) and x.empty_like().dtype == dtypes.int8


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((5,), {}),
        ((0,), {}),
        ((2, 9), {}),
        ((2, 9, 3), {}),
        ((10, 0, -3), {}),
        ((-4, 4), {}),
        ((0.0, 1.0, 0.25), {}),
        ((1.5, -2.0, -0.5), {}),
        ((0, 10, 3), {"dtype": "float32"}),
        ((0, 5), {"dtype": "int64"}),
        ((3.0,), {}),
        ((0, 1, 0.1), {}),
    ],
)
def test_arange(args, kwargs):
    tkw = {"dtype": getattr(torch, kwargs["dtype"])} if "dtype" in kwargs else {}
    ref = torch.arange(*args, **tkw)
    if ref.dtype == torch.int64 and "dtype" not in kwargs:
        ref = ref.to(torch.int32)
    assert_close(Tensor.arange(*args, **kwargs), ref)


def test_arange_empty_and_zero_step():
    assert Tensor.arange(5, 2).tolist() == [] and Tensor.arange(5, 2).shape == (0,)  # numpy's answer; torch refuses
    with pytest.raises(ValueError, match="step"):
        Tensor.arange(0, 5, 0)


@pytest.mark.parametrize(
    "start,stop,steps", [(0, 1, 5), (-2.5, 3.0, 12), (1, 1, 3), (5, -5, 2), (0, 1, 1), (0, 1, 0), (0, 100, 1001)]
)
def test_linspace(start, stop, steps):
    assert_close(Tensor.linspace(start, stop, steps), torch.linspace(start, stop, steps), atol=1e-5, rtol=1e-6)


def test_linspace_dtypes():
    assert_close(Tensor.linspace(0, 1, 7, dtype=dtypes.float64), torch.linspace(0, 1, 7, dtype=torch.float64))
    assert_close(Tensor.linspace(0, 10, 6, dtype=dtypes.int32), torch.linspace(0, 10, 6).to(torch.int32))


@pytest.mark.parametrize("n,m", [(3, None), (1, None), (0, None), (2, 4), (4, 2)])
def test_eye(n, m):
    ref = torch.eye(n, m) if m is not None else torch.eye(n)
    assert_close(Tensor.eye(n, m), ref)
    assert_close(Tensor.eye(n, m, dtype=dtypes.int8), ref.to(torch.int8))


# *** random numbers ***


def test_rand_same_seed_same_values():
    Tensor.manual_seed(1234)
    a, b = Tensor.rand(5, 7).numpy(), Tensor.randn(3).numpy()
    Tensor.manual_seed(1234)
    np.testing.assert_array_equal(Tensor.rand(5, 7).numpy(), a)
    np.testing.assert_array_equal(Tensor.randn(3).numpy(), b)
    Tensor.manual_seed(1235)
    assert not np.array_equal(Tensor.rand(5, 7).numpy(), a)


def test_rand_calls_differ():
    Tensor.manual_seed(0)
    a, b = Tensor.rand(64), Tensor.rand(64)
    x, y = a.numpy(), b.numpy()
    assert not np.any(x == y)
    assert len(np.unique(x)) == 64
    # the same draw repeated in one graph is the same value; two draws are not
    assert not np.array_equal(Tensor.rand(64).numpy(), Tensor.rand(64).numpy())


def test_rand_independent_of_realize_order():
    Tensor.manual_seed(42)
    a, b = Tensor.rand(33), Tensor.randn(2, 5)
    b_first, a_second = b.numpy(), a.numpy()
    Tensor.manual_seed(42)
    a, b = Tensor.rand(33), Tensor.randn(2, 5)
    a_first, b_second = a.numpy(), b.numpy()
    np.testing.assert_array_equal(a_first, a_second)
    np.testing.assert_array_equal(b_first, b_second)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (0,), (3, 5), (2, 3, 4)])
def test_rand_shapes(shape):
    x = Tensor.rand(*shape)
    out = x.numpy()
    assert x.shape == shape and out.shape == shape and x.dtype == dtypes.float32
    assert np.all((out >= 0) & (out < 1))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_rand_dtypes(dtype):
    out = Tensor.rand(1000, dtype=dtype).numpy()
    assert out.dtype.name == dtype
    assert np.all((out >= 0) & (out < 1))
    assert Tensor.randn(10, dtype=dtype).numpy().dtype.name == dtype


def test_rand_statistics():
    Tensor.manual_seed(7)
    u = Tensor.rand(10000).numpy().astype(np.float64)
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - math.sqrt(1 / 12)) < 0.01
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 850  # every tenth of [0, 1) is hit about 1000 times
    n = Tensor.randn(10000).numpy().astype(np.float64)
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    assert 0.62 < np.mean(np.abs(n) < 1) < 0.74  # about 68% within one sigma
    g = Tensor.normal(100, 100, mean=3.0, std=0.5).numpy().astype(np.float64)
    assert abs(g.mean() - 3.0) < 0.03 and abs(g.std() - 0.5) < 0.03
    v = Tensor.uniform(10000, low=-2.0, high=6.0).numpy()
    assert v.min() >= -2.0 and v.max() < 6.0 and abs(v.mean() - 2.0) < 0.15


@pytest.mark.parametrize("low,high", [(0, 10), (-5, 5), (3, 4), (-1000, 100000)])
def test_randint(low, high):
    x = Tensor.randint(5000, low=low, high=high)
    out = x.numpy()
    assert x.dtype == dtypes.int32 and out.shape == (5000,)
    assert out.min() >= low and out.max() < high
    if high - low <= 10:
        assert set(np.unique(out).tolist()) == set(range(low, high))
    assert Tensor.randint(2, 3, low=low, high=high, dtype=dtypes.int64).numpy().dtype == np.int64


def test_randint_bad_range():
    with pytest.raises(ValueError, match=r"high \(3\).*low \(3\)"):
        Tensor.randint(4, low=3, high=3)


def test_rand_like():
    x = Tensor.zeros(3, 4, dtype=dtypes.float16)
    assert x.rand_like().shape == (3, 4) and x.rand_like().dtype == dtypes.float16
    assert x.randn_like(dtype=dtypes.float32).dtype == dtypes.float32


# *** bad input raises at the call, naming what is wrong ***


@contextlib.contextmanager
def raises_eagerly(exc: type[Exception], *substrings: str):
    """Raises `exc` with every substring in its message, without running a kernel first."""
    GlobalCounters.reset()
    with pytest.raises(exc) as info:
        yield
    msg = str(info.value)
    for s in substrings:
        assert s in msg, f"{s!r} not in {msg!r}"
    assert GlobalCounters.kernel_count == 0


def test_broadcast_mismatch():
    with raises_eagerly(ValueError, "(2, 3)", "(4,)"):
        Tensor.ones(2, 3) + Tensor.ones(4)
    with raises_eagerly(ValueError, "(2, 3)", "(3, 2)"):
        Tensor.ones(2, 3).maximum(Tensor.ones(3, 2))
    with raises_eagerly(ValueError, "(5,)"):
        (Tensor.ones(2, 3) > 0).where(Tensor.ones(5), 0.0)


def test_bad_reshape():
    with raises_eagerly(ValueError, "(2, 3)", "(4, 2)"):
        Tensor.ones(2, 3).reshape(4, 2)
    with raises_eagerly(ValueError, "(2, 3)", "(4, -1)"):
        Tensor.ones(2, 3).reshape(4, -1)
    with raises_eagerly(ValueError, "-1"):
        Tensor.ones(2, 3).reshape(-1, -1)
    with raises_eagerly(ValueError, "-2"):
        Tensor.ones(2, 3).reshape(-2, -3)


def test_bad_permute():
    with raises_eagerly(ValueError, "(0, 0, 1)", "(2, 3, 4)"):
        Tensor.ones(2, 3, 4).permute(0, 0, 1)
    with raises_eagerly(ValueError, "(0, 1)", "(2, 3, 4)"):
        Tensor.ones(2, 3, 4).permute(0, 1)
    with raises_eagerly(IndexError, "(0, 3, 1)"):
        Tensor.ones(2, 3, 4).permute(0, 3, 1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.sum(2),
        lambda t: t.max(-3),
        lambda t: t.mean((0, 5)),
        lambda t: t.flip(2),
        lambda t: t.transpose(0, 2),
        lambda t: t.unsqueeze(4),
        lambda t: t.squeeze(2),
        lambda t: t.argmax(2),
        lambda t: t.cat(t, dim=2),
        lambda t: t.flatten(3),
    ],
)
def test_axis_out_of_range(fn):
    with raises_eagerly(IndexError, "out of range", "2 dimensions"):
        fn(Tensor.ones(2, 3))


def test_repeated_axis():
    with raises_eagerly(ValueError, "(1, -1)"):
        Tensor.ones(2, 3).sum((1, -1))


def test_ragged_list():
    with raises_eagerly(ValueError, "ragged", "(2,)", "(1,)"):
        Tensor([[1, 2], [3]])
    with raises_eagerly(ValueError, "ragged"):
        Tensor([1, [2]])


def test_bad_list_contents():
    with raises_eagerly(TypeError, "str"):
        Tensor([1, "a"])
    with raises_eagerly(TypeError, "dict"):
        Tensor({"a": 1})


def test_bad_expand():
    with raises_eagerly(ValueError, "(2, 3)", "(4, 3)"):
        Tensor.ones(2, 3).expand(4, 3)
    with raises_eagerly(ValueError, "(2, 3)", "(3,)"):
        Tensor.ones(2, 3).expand(3)


def test_bad_bitcast():
    """A bitcast to a wider dtype needs a last dim the ratio divides, and a dim to scale (torch: RuntimeError)."""
    with raises_eagerly(RuntimeError, "float16", "float32", "divisible by 2"):
        Tensor.ones(3, dtype=dtypes.float16).bitcast("float32")
    with raises_eagerly(RuntimeError, "0-d"):
        Tensor(1.0).bitcast(dtypes.int8)
    with raises_eagerly(TypeError, "bool"):
        Tensor.ones(2).bitcast(dtypes.bool)


def test_index_out_of_range():
    t = Tensor.ones(3, 4)
    with raises_eagerly(IndexError, "index 3", "size 3"):
        t[3]
    with raises_eagerly(IndexError, "index -5", "size 4"):
        t[0, -5]
    with raises_eagerly(IndexError, "too many indices", "2"):
        t[0, 0, 0]
    with raises_eagerly(IndexError, "ellipsis"):
        t[..., 0, ...]
    with raises_eagerly(TypeError, "1.5"):
        t[1.5]


def test_bad_shrink_pad_cat_matmul():
    t = Tensor.ones(3, 4)
    with raises_eagerly(ValueError, "(3, 4)"):
        t.shrink(((0, 4), (0, 4)))
    with raises_eagerly(ValueError, "(3, 4)"):
        t.pad(((1, 1),))
    with raises_eagerly(ValueError, "(3, 4)", "(3, 5)"):
        t.cat(Tensor.ones(3, 5), dim=0)
    with raises_eagerly(ValueError, "(3, 4)", "(3, 4)"):
        t @ t
    with raises_eagerly(ValueError, "negative", "(2, -1)"):
        Tensor.zeros(2, -1)


def test_bad_dtype_ops():
    with raises_eagerly(TypeError, "bool"):
        Tensor([True]) - Tensor([False])
    with raises_eagerly(TypeError, "bool"):
        -Tensor([True])
    with raises_eagerly(TypeError, "list"):
        Tensor([1.0]) + [1.0]
    with raises_eagerly(ValueError, "ambiguous", "3"):
        bool(Tensor([1, 2, 3]))
    with raises_eagerly(ValueError, "(2,)"):
        Tensor([1, 2]).item()


# *** printing ***


def test_repr_of_lazy_tensor_runs_nothing_and_print_shows_values(capsys):
    """repr is the graph (tinygrad's view, for debugging: nothing runs); print and str show the values as torch's
    print does, which runs the kernels that compute them (a torch program's `print(model(x))`)."""
    x = Tensor([1.0, 2.0, 3.0]).realize()
    y = (x + 1).reshape(3, 1).expand(3, 2) * 2
    GlobalCounters.reset()
    text = repr(y)
    assert GlobalCounters.kernel_count == 0
    assert "(3, 2)" in text and "float32" in text and Device.DEFAULT in text and "lazy" in text
    assert y.uop.op is not y.uop.base.op or not y.uop.is_realized
    print(y)
    assert capsys.readouterr().out == "tensor([[4., 4.],\n        [6., 6.],\n        [8., 8.]])\n"
    assert GlobalCounters.kernel_count == 1


def test_repr_of_realized_tensor():
    y = Tensor.arange(6, dtype=dtypes.int8).reshape(2, 3).contiguous().realize()
    text = repr(y)
    assert "(2, 3)" in text and "int8" in text and Device.DEFAULT in text and "realized" in text
    assert y.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_properties():
    t = Tensor.ones(2, 3, 4, dtype=dtypes.int16)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and len(t) == 2
    assert t.size() == (2, 3, 4) and t.size(-1) == 4 and t.element_size() == 2 and t.nbytes == 48
    assert t.device == Device.DEFAULT
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0))


def test_reading_a_scheduled_tensor_whose_kernels_never_ran_raises():
    from lazygrad.engine.realize import run_schedule

    a = Tensor([1.0, 2.0, 3.0])
    b = a * 2
    sched = b.schedule()
    with pytest.raises(RuntimeError, match="never ran"):
        b.numpy()
    with pytest.raises(RuntimeError, match="never ran"):  # through a copy kernel that would read it
        b.flip(0).numpy()
    run_schedule(sched)
    assert b.tolist() == [2.0, 4.0, 6.0] and b.flip(0).tolist() == [6.0, 4.0, 2.0]


@pytest.mark.usefixtures("default_device_cpu")
def test_matmul_with_a_4kb_row_stride_reads_the_weight_in_panels():
    """On the CPU a right-hand side whose rows are a multiple of 4 KB apart is copied into panels first (one extra
    kernel); the product and its gradients are unchanged."""
    from lazygrad import Device
    from lazygrad.engine.realize import run_schedule

    rng = np.random.default_rng(0)
    a_np, w_np = rng.standard_normal((256, 512), dtype=np.float32), rng.standard_normal((512, 1024), dtype=np.float32)
    panel = Device["CPU"].renderer.matmul_panel(256, 1024, 512, 4)
    a, w = Tensor(a_np, requires_grad=True), Tensor(w_np, requires_grad=True).realize()
    out = a @ w
    sched = (a @ w).schedule()
    assert len(sched) == (2 if panel else 1)
    run_schedule(sched)
    ta, tw = torch.tensor(a_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    ref = ta @ tw
    (out * out).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-3)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-2)


@pytest.mark.usefixtures("default_device_cpu")
@pytest.mark.parametrize("m,k,n", [(512, 512, 512), (512, 512, 384), (1024, 256, 1024), (256, 1024, 640)])
def test_matmul_with_any_row_stride_reads_the_weight_in_panels(m: int, k: int, n: int):
    """Not only a 4 KB row stride: walking down the columns of a right-hand side with 2 KB (512 floats), 1.5 KB or
    4 KB rows but few of them (k = 256) missed in L1 as well (512^3 101 GFLOPS as it is, 164 from panels on two AVX2
    cores), so any product with 256 rows or more reads it from panels (one extra kernel), with the same values."""
    from lazygrad import Device

    assert Device["CPU"].renderer.matmul_panel(m, n, k, 4) > 0
    rng = np.random.default_rng(1)
    a_np, w_np = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    a, w = Tensor(a_np).realize(), Tensor(w_np).realize()
    assert len((a @ w).schedule()) == 2
    np.testing.assert_allclose((a @ w).numpy(), a_np.astype(np.float64) @ w_np, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("default_device_cpu")
@pytest.mark.parametrize("m,n", [(256, 64), (300, 48), (255, 64), (256, 40)])
def test_linear_reads_its_transposed_weight_in_panels(m: int, n: int):
    """On the CPU `x @ weight.T` with enough rows copies the (out, in) weight into panels first (one extra kernel);
    too few rows, or an output size no panel divides, read it as it is. The product and its gradients are unchanged
    either way."""
    from lazygrad import Device

    rng = np.random.default_rng(0)
    k = 96
    x_np, w_np, b_np = (rng.standard_normal(s, dtype=np.float32) for s in ((m, k), (n, k), (n,)))
    panel, lanes = Device["CPU"].renderer.matmul_panel(m, n, k, 4, True), Device["CPU"].renderer.vector_bytes // 4
    assert (panel > 0) == (m >= 256 and n % lanes == 0)
    x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True).realize()
    b = Tensor(b_np, requires_grad=True).realize()
    assert len(x.linear(w, b).schedule()) == (2 if panel else 1)
    out = x.linear(w, b)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    ref = torch.nn.functional.linear(tx, tw, tb)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-3)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    for got, want in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-2)


def test_tensor_from_numpy_copies_and_from_numpy_shares():
    a = np.ones(4, np.float32)
    t = Tensor(a)
    a[0] = 5  # a batch array refilled after the tensor was made
    np.testing.assert_array_equal(t.numpy(), np.ones(4))
    t += 1
    t.realize()
    np.testing.assert_array_equal(a, [5, 1, 1, 1])  # an in-place op on the copy leaves the array alone
    b = np.ones(4, np.float32)
    shared = Tensor.from_numpy(b)
    b[0] = 5
    np.testing.assert_array_equal(shared.numpy(), [5, 1, 1, 1])
    shared += 1
    shared.realize()
    np.testing.assert_array_equal(b, [6, 2, 2, 2])  # as torch.from_numpy: one memory


def test_from_numpy_copies_a_read_only_array(tmp_path):
    """A read-only array is copied: an in-place op wrote into the bytes object under np.frombuffer (an immutable
    object changed) and into a read-only file mapping (a segfault)."""
    raw = np.arange(4, dtype=np.float32).tobytes()
    t = Tensor.from_numpy(np.frombuffer(raw, np.float32))
    t += 1
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3, 4])
    assert raw == np.arange(4, dtype=np.float32).tobytes()
    path = tmp_path / "w.npy"
    np.save(path, np.ones(8, np.float32))
    mapped = np.load(path, mmap_mode="r")
    m = Tensor.from_numpy(mapped)
    m[2:4] = 7
    np.testing.assert_array_equal(m.numpy(), [1, 1, 7, 7, 1, 1, 1, 1])
    np.testing.assert_array_equal(mapped, np.ones(8))
    writable = np.ones(2, np.float32)
    Tensor.from_numpy(writable).add_(1).realize()
    np.testing.assert_array_equal(writable, [2, 2])  # a writable array is still shared


@pytest.mark.parametrize("make", ["transposed", "strided", "fortran", "big_endian", "big_endian_strided"])
@pytest.mark.parametrize("shared", [False, True])
def test_tensor_from_a_strided_or_swapped_array_is_its_own_memory(make, shared):
    """An array that is not C-contiguous in the machine's byte order is made so once, and that new array is taken as
    the tensor's memory (no second copy); the caller's array and the tensor stay independent either way."""
    base = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    arr = {
        "transposed": base.transpose(2, 0, 1),
        "strided": base[:, ::2, 1:],
        "fortran": np.asfortranarray(base),
        "big_endian": base.astype(">f4"),
        "big_endian_strided": base.astype(">f4")[..., ::-1],
    }[make]
    want = np.array(arr, dtype=np.float32)
    t = Tensor.from_numpy(arr) if shared else Tensor(arr)
    assert t.shape == arr.shape and t.dtype == dtypes.float32
    np.testing.assert_array_equal(t.numpy(), want)
    arr[...] = -1  # the caller's array changed after: the tensor keeps its values
    np.testing.assert_array_equal(t.numpy(), want)
    t += 1
    t.realize()
    np.testing.assert_array_equal(t.numpy(), want + 1)
    assert (arr == -1).all()


def test_from_blob_reads_and_writes_the_callers_memory():
    a = np.arange(12, dtype=np.float32)
    t = Tensor.from_blob(a.ctypes.data, (3, 4), dtype="float32")
    np.testing.assert_array_equal((t * 2).numpy(), a.reshape(3, 4) * 2)
    t[1] = 0  # writes land in the caller's memory, which stays the caller's (never freed by the tensor)
    t.realize()
    assert a[4:8].tolist() == [0, 0, 0, 0]
    del t
    assert a[0] == 0 and a[11] == 11
    with pytest.raises(ValueError, match="memory address"):
        Tensor.from_blob(0, (2,))


def test_numpy_of_a_lazy_result_runs_no_copy_kernel():
    a = np.arange(88, dtype=np.float32).reshape(8, 11)
    GlobalCounters.reset()
    out = (Tensor(a) * 2).sum(1).numpy()  # one kernel: the sum is stored whole and read as it is
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(out, (a * 2).sum(1))
    col = ((Tensor(a) + 1) @ Tensor(a).T)[:, -1].numpy()  # a view of a result still reads through contiguous()
    np.testing.assert_allclose(col, ((a + 1) @ a.T)[:, -1], rtol=1e-6)


def test_frontend_state_api():
    assert Tensor.is_grad_enabled()
    with Tensor.no_grad():
        assert not Tensor.is_grad_enabled()
    assert Tensor.is_grad_enabled()
    Tensor.manual_seed(5)
    before = Tensor.rng_state()
    Tensor.rand(3)
    assert Tensor.rng_state() != before and Tensor.rng_state()[0] == 5


_EXIT_SCRIPT = """
import gc
from lazygrad import Tensor
t = Tensor.rand(3).requires_grad_()
keep = [t * 2 + 1, t, (t * 3).sum()]
keep[2].backward()
everything = gc.get_objects()  # holds module dicts and nodes alike: the nodes die while modules are torn down
gc.freeze()
"""


def test_interpreter_exit_is_quiet_when_nodes_outlive_the_library_modules():
    """Nodes and tensors that die at interpreter exit after lazygrad's module globals were cleared (held from a
    frozen heap or a structure torn down late) drop their cache entries without the globals: before, each printed an
    ignored AttributeError/TypeError from the weak-reference callbacks."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, env=env, check=True)
    assert "Exception ignored" not in out.stderr, out.stderr[-2000:]
