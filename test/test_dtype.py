"""End-to-end: every dtype in and out of numpy, casts, bitcasts, and PyTorch's type promotion."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from lazygrad import Tensor, dtypes
from lazygrad.dtype import to_dtype
from test.helpers import NP_DTYPES, assert_close, lg_dtype, rand_np

INT_DTYPES = [d for d in NP_DTYPES if d[0] in "iu"]
FLOAT_DTYPES = ["float16", "float32", "float64"]


def extremes(dtype: str) -> np.ndarray:
    """The edges of a dtype's range and a few ordinary values."""
    if dtype == "bool":
        return np.array([True, False, True], dtype=bool)
    if dtype in INT_DTYPES:
        info = np.iinfo(dtype)
        return np.array([info.min, info.min + 1, 0, 1, 7, info.max - 1, info.max], dtype=dtype)
    info = np.finfo(dtype)
    return np.array(
        [info.min, -1.5, -0.0, 0.0, info.tiny, 0.1, 3.25, info.max, math.inf, -math.inf, math.nan], dtype=dtype
    )


# *** numpy in, numpy / Python out ***


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_numpy_roundtrip(dtype):
    x = extremes(dtype)
    t = Tensor(x)
    assert t.dtype == lg_dtype(dtype) and t.shape == x.shape
    out = t.numpy()
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, x)
    assert _same(t.tolist(), x.tolist())
    assert _same(t[2].item(), x[2].item()) and type(t[2].item()) is type(x[2].item())


def _same(a, b) -> bool:
    """Equality that treats NaN as equal to NaN, for nested lists."""
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_numpy_computed_roundtrip(dtype):
    """A value computed by a kernel (not just copied in) comes back with the right dtype and bytes."""
    x = rand_np((3, 5), dtype, 1, 0, 100)
    t = Tensor(x)[::-1].contiguous()
    out = t.numpy()
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, x[::-1])
    assert t.tolist() == x[::-1].tolist()


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool"])
@pytest.mark.parametrize("view", ["transposed", "strided", "negative", "0d", "empty"])
def test_numpy_non_contiguous_input(dtype, view):
    base = rand_np((4, 6), dtype, 2, -50, 50)
    x = {
        "transposed": base.T,
        "strided": base[::2, 1::3],
        "negative": base[::-1, ::-2],
        "0d": base[1, 2],
        "empty": base[:0],
    }[view]
    t = Tensor(x)
    assert t.shape == np.shape(x)
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal((t == t).numpy(), np.ones(np.shape(x), bool))


def test_numpy_input_is_not_aliased_after_mutation():
    """The tensor holds the value the array had when the tensor was made, or at least a consistent one."""
    x = np.arange(6, dtype=np.float32)
    t = Tensor(x)
    y = (t + 1).numpy()
    np.testing.assert_array_equal(y, np.arange(6, dtype=np.float32) + 1)


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_list_with_dtype(dtype):
    values = [0, 1, 2, 3] if dtype != "bool" else [True, False, True, True]
    t = Tensor(values, dtype=dtype)
    assert t.dtype == lg_dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), np.array(values, dtype=dtype))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint8", "int32", "int64"])
def test_numpy_with_dtype_casts(dtype):
    x = np.array([0.0, 1.0, 2.75, 100.0], dtype=np.float64)
    t = Tensor(x, dtype=dtype)
    assert t.dtype == lg_dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), x.astype(dtype))


def test_bfloat16_roundtrip():
    x = np.array([1.0, -2.5, 3.140625, 1e30, 0.0], dtype=np.float32)
    t = Tensor(x).cast(dtypes.bfloat16)
    assert t.dtype == dtypes.bfloat16
    ref = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(t.numpy(), ref)
    np.testing.assert_array_equal(np.array(t.tolist(), dtype=np.float32), ref)
    np.testing.assert_array_equal((t + t).float().numpy(), (torch.from_numpy(x).to(torch.bfloat16) * 2).float().numpy())


# *** casts ***


def cast_source(src: str, dst: str) -> np.ndarray:
    """Values of `src` whose cast to `dst` is defined: float->int only in range, the rest everything."""
    if src == "bool":
        return np.array([True, False, True], dtype=bool)
    if src in INT_DTYPES:
        info = np.iinfo(src)
        vals = [info.min, -1, 0, 1, 5, 127, 128, 255, 256, info.max]
        return np.array([v for v in vals if info.min <= v <= info.max], dtype=src)
    if dst in INT_DTYPES:
        info = np.iinfo(dst)
        lo, hi = max(float(info.min), -60000.0), min(float(info.max), 60000.0)
        vals = [lo, -2.75, -1.5, -0.5, 0.0, 0.5, 1.0, 2.75, 100.25, hi]
        return np.array([v for v in vals if lo <= v <= hi], dtype=src)
    vals = [
        -70000.0,
        -2.75,
        -1e-8,
        -0.0,
        0.0,
        1e-5,
        0.1,
        1.0,
        3.140625,
        65504.0,
        70000.0,
        math.inf,
        -math.inf,
        math.nan,
    ]
    return np.array(vals, dtype=src)


@pytest.mark.parametrize("dst", NP_DTYPES)
@pytest.mark.parametrize("src", NP_DTYPES)
def test_cast(src, dst):
    x = cast_source(src, dst)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(dst)
    assert_close(Tensor(x).cast(dst), ref, atol=0, rtol=0)


def test_cast_by_name_and_shortcuts():
    t = Tensor([1.5, -2.5])
    assert t.cast("int8").dtype == dtypes.int8
    assert t.float().dtype == dtypes.float32 and t.half().dtype == dtypes.float16 and t.double().dtype == dtypes.float64
    assert t.int().dtype == dtypes.int32 and t.long().dtype == dtypes.int64 and t.bool().dtype == dtypes.bool
    assert t.int().tolist() == [1, -2]
    with pytest.raises(TypeError, match="complex64"):
        t.cast("complex64")


# *** bitcast ***

BITCASTS = [
    ("float32", "int32"),
    ("int32", "float32"),
    ("float16", "int16"),
    ("int16", "float16"),
    ("float32", "uint32"),
    ("float64", "int64"),
    ("uint8", "int8"),
    ("uint16", "float16"),
]


@pytest.mark.parametrize("src,dst", BITCASTS)
def test_bitcast(src, dst):
    x = extremes(src) if src in FLOAT_DTYPES else rand_np((11,), src, 3, -1000, 1000)
    ref = x.view(dst)
    out = Tensor(x).bitcast(dst)
    assert out.dtype == lg_dtype(dst)
    np.testing.assert_array_equal(out.numpy().view(np.uint8), ref.view(np.uint8))


def test_bitcast_of_computed_and_strided_values():
    x = rand_np((4, 6), "float32", 4)
    out = (Tensor(x)[::-1, ::2] * 2).bitcast("int32") + 1
    np.testing.assert_array_equal(out.numpy(), (x[::-1, ::2] * 2).view(np.int32) + 1)
    back = Tensor((x * 3).view(np.int32)).bitcast(dtypes.float32)
    np.testing.assert_array_equal(back.numpy(), x * 3)


RESIZED_BITCASTS = [
    ("float32", "float16"),
    ("float32", "uint8"),
    ("float64", "int16"),
    ("int64", "float32"),
    ("uint8", "float32"),
    ("int8", "int64"),
    ("float16", "float64"),
    ("uint16", "int32"),
    ("bfloat16", "uint8"),
]


@pytest.mark.parametrize("src,dst", RESIZED_BITCASTS)
def test_bitcast_to_another_size(src, dst):
    """torch's view(dtype) between sizes: the last dim scales by the ratio, bytes in memory order."""
    raw = rand_np((3, 32), "uint8", 5, 0, 255)  # any bits, NaN patterns included: compared as bytes
    r = torch.from_numpy(raw).view(getattr(torch, src))
    x = Tensor(raw).bitcast(src)
    out, ref = x.bitcast(dst), r.view(getattr(torch, dst))
    assert out.dtype == lg_dtype(dst) and out.shape == tuple(ref.shape)
    np.testing.assert_array_equal(out.bitcast("uint8").numpy(), ref.view(torch.uint8).numpy())


def test_bitcast_to_another_size_of_computed_views_is_one_kernel():
    from lazygrad import GlobalCounters

    x = rand_np((3, 4), "float32", 6)
    t = Tensor(x).realize()
    GlobalCounters.reset()
    out = (t * 2)[:, ::-1].bitcast(dtypes.float16).realize()
    assert GlobalCounters.kernel_count == 1
    ref = torch.from_numpy(np.ascontiguousarray((x * 2)[:, ::-1])).view(torch.float16)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    back = Tensor(ref.view(torch.uint8).numpy()).bitcast(dtypes.float32)
    np.testing.assert_array_equal(back.numpy(), ref.view(torch.float32).numpy())


# *** type promotion (no kernels: only the result dtype) ***

TORCH_PROMO = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("b", TORCH_PROMO)
@pytest.mark.parametrize("a", TORCH_PROMO)
def test_promotion_tensor_tensor(a, b):
    ta, tb = Tensor.ones(2, dtype=a), Tensor.ones(2, dtype=b)
    expected = str(torch.promote_types(getattr(torch, a), getattr(torch, b))).removeprefix("torch.")
    assert (ta + tb).dtype.name == expected
    assert (ta * tb).dtype.name == expected
    assert ta.maximum(tb).dtype.name == expected
    assert (ta < tb).dtype == dtypes.bool
    assert Tensor.ones(2, dtype=dtypes.bool).where(ta, tb).dtype.name == expected
    if "bool" not in (a, b):
        assert (ta - tb).dtype.name == expected
    ref_div = (torch.ones(2, dtype=getattr(torch, a)) / torch.ones(2, dtype=getattr(torch, b))).dtype
    assert (ta / tb).dtype.name == str(ref_div).removeprefix("torch.")


@pytest.mark.parametrize("scalar", [True, 3, -2, 2.5])
@pytest.mark.parametrize("a", TORCH_PROMO)
def test_promotion_tensor_scalar(a, scalar):
    ta, ref = Tensor.ones(2, dtype=a), torch.ones(2, dtype=getattr(torch, a))
    for lg_out, torch_out in [
        (ta + scalar, ref + scalar),
        (scalar * ta, scalar * ref),
        (ta / scalar, ref / scalar),
        (ta.maximum(scalar), torch.maximum(ref, torch.tensor(scalar))),
    ]:
        expected = str(torch_out.dtype).removeprefix("torch.")
        # a Python int is int64 to torch but the default int (int32) to lazygrad
        if expected == "int64" and a != "int64":
            expected = "int32"
        assert lg_out.dtype.name == expected, (a, scalar)


def test_python_value_dtypes():
    assert Tensor(3).dtype == dtypes.int32 and Tensor(2.5).dtype == dtypes.float32 and Tensor(True).dtype == dtypes.bool
    assert Tensor([1, 2]).dtype == dtypes.int32 and Tensor([1, 2.5]).dtype == dtypes.float32
    assert Tensor([True, False]).dtype == dtypes.bool and Tensor([True, 2]).dtype == dtypes.int32
    assert Tensor([]).dtype == dtypes.float32 and Tensor([]).shape == (0,)
    assert Tensor([[1.0], [2.0]]).dtype == dtypes.float32


@pytest.mark.parametrize("name", ["float16", "float64"])
def test_default_float_follows_the_knob(name):
    """Context(DEFAULT_FLOAT=...) (tinygrad) and assigning dtypes.default_float set what torch.set_default_dtype
    sets: the dtype of Python floats and of float tensors made without one."""
    from lazygrad import Context

    old = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, name))
    try:
        refs = [torch.tensor([1.5]), torch.ones(2), torch.rand(2), torch.tensor([1, 2]) * 0.5, torch.arange(3) / 2]
    finally:
        torch.set_default_dtype(old)
    for setting in ("context", "assign"):
        with Context(DEFAULT_FLOAT=lg_dtype(name)) if setting == "context" else contextlib.nullcontext():
            if setting == "assign":
                dtypes.default_float = name
            try:
                outs = [Tensor([1.5]), Tensor.ones(2), Tensor.rand(2), Tensor([1, 2]) * 0.5, Tensor.arange(3) / 2]
                np.testing.assert_array_equal(outs[3].numpy(), refs[3].numpy())
            finally:
                dtypes.default_float = dtypes.float32
        assert [t.dtype.name for t in outs] == [str(r.dtype).removeprefix("torch.") for r in refs]
    assert Tensor([1.5]).dtype == dtypes.float32
    with pytest.raises(TypeError, match="default float"):
        dtypes.default_float = dtypes.int8
    with Context(DEFAULT_INT="int64"):
        assert Tensor([1, 2]).dtype == Tensor.arange(2).dtype == dtypes.int64
    assert dtypes.default_float == dtypes.float32 and dtypes.default_int == dtypes.int32


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"])
def test_reduce_result_dtypes(dtype):
    t, ref = Tensor.ones(3, dtype=dtype), torch.ones(3, dtype=getattr(torch, dtype))
    assert t.sum().dtype.name == str(ref.sum().dtype).removeprefix("torch.")
    assert t.prod().dtype.name == str(ref.prod().dtype).removeprefix("torch.")
    assert t.max().dtype.name == str(ref.max().dtype).removeprefix("torch.")
    assert t.argmax().dtype in (dtypes.int32, dtypes.int64)
    if dtype in FLOAT_DTYPES:
        assert t.mean().dtype.name == dtype and t.var().dtype.name == dtype
    else:
        assert t.mean().dtype == dtypes.float32


def test_to_dtype():
    assert to_dtype("float32") is dtypes.float32 and to_dtype(dtypes.int8) is dtypes.int8
    assert to_dtype("half") is dtypes.float16 and to_dtype("long") is dtypes.int64
    with pytest.raises(TypeError, match="'float8'"):
        to_dtype("float8")


def test_unsupported_numpy_dtype():
    with pytest.raises(TypeError, match="complex"):
        Tensor(np.zeros(3, dtype=np.complex64))


def test_float16_ops_round_every_result_as_torch():
    # gcc computes _Float16 arithmetic in float and kept the excess precision through a cast to float: (h / 3).float()
    # was not a float16 value. Matmul and conv multiply 16-bit floats in float32 and accumulate there, as torch's do
    import torch

    rng = np.random.default_rng(0)
    h = rng.standard_normal(37).astype(np.float16)
    g = rng.standard_normal(37).astype(np.float16)
    for f in (lambda a, b: (a / 3.0).float(), lambda a, b: (a * b).float(), lambda a, b: (a * b + a).float()):
        got = f(Tensor(h), Tensor(g)).numpy()
        ref = f(torch.tensor(h), torch.tensor(g)).numpy()
        np.testing.assert_array_equal(got, ref)
    a, b = rng.standard_normal((16, 300)).astype(np.float16), rng.standard_normal((300, 8)).astype(np.float16)
    got = (Tensor(a) @ Tensor(b)).numpy().astype(np.float64)
    ref = (torch.tensor(a) @ torch.tensor(b)).numpy().astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)  # one float16 rounding of the float32 sum apart


@pytest.mark.parametrize(
    "name", ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int64", "bool"]
)
def test_torch_dtype_flags(name: str) -> None:
    """torch programs branch on `x.dtype.is_floating_point` / `is_signed` / `is_complex` (an AttributeError here)."""
    import torch

    import lazygrad.torch as lt

    ours, theirs = getattr(lt, name), getattr(torch, name)
    assert (ours.is_floating_point, ours.is_signed, ours.is_complex) == (
        theirs.is_floating_point,
        theirs.is_signed,
        theirs.is_complex,
    )
    assert lt.ones(2, dtype=ours).dtype.is_floating_point == theirs.is_floating_point
