"""Tensor API breadth against torch, forward and backward: shape ops, scans and sorts, activations and elementwise
math, functional extras (interpolate, max_unpool2d, normalize) and numpy interop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lazygrad import Device, Tensor, dtypes
from lazygrad.helpers import GlobalCounters
from test.helpers import NP_DTYPES
from test.opcheck import check, randn


def is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


# *** shape ops ***


def test_split_chunk():
    def fn(x):
        return (*x.split(2, 1), *x.split([1, 0, 4], 1), *x.chunk(3, 0), *x.chunk(4, 1))

    check(fn, fn, [randn(3, 5)])
    with pytest.raises(ValueError, match="sum to 5"):
        Tensor(randn(3, 5)).split([1, 2], 1)


def test_repeat_interleave_roll_unflatten():
    def fn(x):
        return (
            x.repeat_interleave(2, 1),
            x.repeat_interleave(3),
            x.roll(2, 1),
            x.roll((-1, 7), (0, 1)),
            x.roll(3),
            x.unflatten(1, (5, 1)),
            x.repeat_interleave(0, 0),
        )

    check(fn, fn, [randn(3, 5)])

    def per_element(x):
        r = torch.tensor([2, 0, 1]) if is_torch(x) else Tensor([2, 0, 1])
        return x.repeat_interleave(r, 0), x.repeat_interleave(r[:1] + 1, 1), x[0, :3].repeat_interleave(r)

    check(per_element, per_element, [randn(3, 5)])
    np.testing.assert_array_equal(Tensor([1, 2]).repeat_interleave([3, 1]).numpy(), [1, 1, 1, 2])
    with pytest.raises(ValueError, match="one per element"):
        Tensor([1, 2]).repeat_interleave([1, 2, 3])


def test_meshgrid():
    def fn(a, b, c):
        ij = torch.meshgrid(a, b, c, indexing="ij") if is_torch(a) else a.meshgrid(b, c, indexing="ij")
        xy = torch.meshgrid(a, b, c, indexing="xy") if is_torch(a) else a.meshgrid(b, c, indexing="xy")
        return (*ij, *xy)

    check(fn, fn, [randn(2), randn(3, seed=1), randn(1, seed=2)])


@pytest.mark.parametrize("shape", [(4, 6), (3, 3), (2, 3, 4), (1, 5), (0, 2)])
def test_diagonal(shape):
    def fn(x):
        return x.diagonal(), x.diagonal(1), x.diagonal(-1), x.diagonal(2, -1, 0), x.diagonal(-9)

    check(fn, fn, [randn(*shape)])


def test_diag():
    def fn(v, m):
        return v.diag(), v.diag(2), v.diag(-1), m.diag(), m.diag(1), m.diag(-2)

    check(fn, fn, [randn(4), randn(3, 5, seed=1)])
    check(lambda v: v.diag(), lambda v: v.diag(), [randn(1)])


def test_unfold():
    def fn(x):
        return x.unfold(1, 3, 2), x.unfold(0, 1, 1), x.unfold(-1, 7, 7), x.unfold(1, 2, 5)

    check(fn, fn, [randn(2, 7)])
    with pytest.raises(ValueError, match="larger than dimension"):
        Tensor(randn(2, 3)).unfold(1, 4, 1)


def test_as_strided():
    """torch's as_strided over a contiguous tensor: overlapping windows (the gradient adds up), a transpose by strides,
    a stride of 0 (a repeat), an offset, a 0-d result."""

    def fn(x):
        return (
            x.as_strided((3, 3), (1, 2), 1),
            x.as_strided((2, 5), (1, 2)),
            x.as_strided((4, 3), (0, 1), 2),
            x.as_strided((), (), 7),
            x.reshape(2, 5).as_strided((5, 2), (1, 5)),
        )

    check(fn, fn, [randn(10)])
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 40"):
        Tensor(randn(10)).as_strided((3, 3), (1, 5), 3)
    with pytest.raises(RuntimeError, match="mismatch in length"):
        Tensor(randn(10)).as_strided((3, 3), (1,))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes(mode):
    pads = [(1, 2), (2, 0, 1, 3), (0, 3, 3, 0)]

    def fn(x):
        if is_torch(x):
            return tuple(F.pad(x, p, mode=mode) for p in pads)
        return tuple(x.pad(p, mode=mode) for p in pads)

    check(fn, fn, [randn(2, 4, 5)])
    with pytest.raises(ValueError, match="too large"):
        bad_mode = mode if mode in ("reflect", "circular") else "reflect"
        Tensor(randn(2, 3)).pad((3, 3) if mode != "circular" else (4, 0), mode=bad_mode)


def test_pad_mode_errors():
    with pytest.raises(ValueError, match="pad mode must be"):
        Tensor(randn(3)).pad((1, 1), mode="wrap")
    with pytest.raises(NotImplementedError, match="pad mode must be"):  # torch's class
        Tensor(randn(3)).pad((1, 1), mode="wrap")
    x = randn(1, 4)  # negative padding crops, as torch's
    want = torch.nn.functional.pad(torch.tensor(x), (-1, 2), mode="reflect").numpy()
    np.testing.assert_array_equal(Tensor(x).pad((-1, 2), mode="reflect").numpy(), want)


def test_pad_to_shrink_to_view_expand_as():
    x = Tensor(randn(2, 3))
    np.testing.assert_array_equal(x.pad_to(4, None).numpy(), np.pad(x.numpy(), ((0, 2), (0, 0))))
    np.testing.assert_array_equal(x.shrink_to(1, 2).numpy(), x.numpy()[:1, :2])
    assert x.view(3, 2).shape == (3, 2) and x[:1].expand_as(x).shape == (2, 3)
    with pytest.raises(ValueError, match="none smaller"):
        x.pad_to(1, 3)


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(3, 3)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 1)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
]


def test_einsum():
    def fn(*xs):
        outs = []
        k = 0
        for formula, shapes in EINSUMS:
            args = xs[k : k + len(shapes)]
            k += len(shapes)
            outs.append(torch.einsum(formula, *args) if is_torch(xs[0]) else Tensor.einsum(formula, *args))
        return tuple(outs)

    inputs = [randn(*s, seed=i) for i, (_, shapes) in enumerate(EINSUMS) for s in shapes]
    check(fn, fn, inputs, atol=1e-5)
    with pytest.raises(ValueError, match="sizes"):
        Tensor.einsum("ij,jk->ik", Tensor(randn(2, 3)), Tensor(randn(4, 2)))


EDGE_SHAPES = [(0, 3), (1, 1), (2, 1, 3)]


@pytest.mark.parametrize("shape", EDGE_SHAPES)
def test_shape_ops_edge_sizes(shape):
    # 0- and 1-sized dims and negative dims through every shape op, forward and backward
    def fn(x):
        lead = [1] * (x.ndim - 1)
        if is_torch(x):
            cat, stack, ein = torch.cat([x, x], -1), torch.stack([x, x], -1), torch.einsum("...j,...j->...", x, x)
            pad, pad_to = F.pad(x, (1, 2)), F.pad(x, (0, 1, *[0, 0] * (x.ndim - 2), 0, 2))
            shrink_to = x[:1, ..., :1]
        else:
            cat, stack, ein = x.cat(x, dim=-1), x.stack(x, dim=-1), Tensor.einsum("...j,...j->...", x, x)
            pad, pad_to = x.pad((1, 2)), x.pad_to(x.shape[0] + 2, *x.shape[1:-1], x.shape[-1] + 1)
            shrink_to = x.shrink_to(min(1, x.shape[0]), *x.shape[1:-1], 1)
        return (
            cat,
            stack,
            ein,
            pad,
            pad_to,
            shrink_to,
            *x.split(1, -1),
            *x.chunk(2, -1),
            x.repeat(2, *lead),
            x.repeat(0, *lead),
            x.repeat_interleave(2, -1),
            x.roll(-1, -1),
            x.flip((0, -1)),
            x.unflatten(-1, (1, -1)),
            x.diagonal(0, -1, 0),
            x.unfold(-1, 1, 1),
            x[:1].expand_as(x),
            x.view(-1),
            x.masked_fill(x > 0, 1.5),
        )

    check(fn, fn, [randn(*shape)])


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")  # the std of no elements: NaN in both
@pytest.mark.parametrize("shape", EDGE_SHAPES)
def test_reductions_scans_edge_sizes(shape):
    def fn(x):
        k = min(1, x.shape[-1])
        if is_torch(x):
            vn, every = torch.linalg.vector_norm, tuple(range(x.ndim))
            stats = (*torch.std_mean(x, -1, correction=0), *torch.var_mean(x, (0, -1), keepdim=True, correction=0))
            norms, lse = (vn(x, dim=-1), vn(x, 1, dim=0), vn(x, math.inf, dim=-1)), x.logsumexp(every)
        else:
            stats = (*x.std_mean(-1, correction=0), *x.var_mean((0, -1), keepdim=True, correction=0))
            norms, lse = (x.norm(dim=-1), x.norm(1, 0), x.norm(math.inf, -1)), x.logsumexp()  # tinygrad: all axes
        return (
            x.cumsum(-1),
            x.cumprod(0),
            *_int_indices(x.cummax(-1)),
            *_int_indices(x.cummin(0)),
            x.logcumsumexp(-1),
            *_int_indices(x.sort(-1)),
            x.argsort(0, descending=True).int(),
            *_int_indices(x.topk(k, -1)),
            x.logsumexp(-1),
            lse,
            *norms,
            *stats,
        )

    check(fn, fn, [randn(*shape)], atol=1e-5)


# *** scans and sorts ***


def _int_indices(pair):
    """(values, indices) with the indices as int32: torch's are int64, lazygrad's the default int (tinygrad's)."""
    values, indices = pair
    return values, indices.int()


@pytest.mark.parametrize("shape,axis", [((3, 7), 1), ((5, 2), 0), ((1,), 0), ((0, 3), 0), ((2, 131), -1)])
def test_scans(shape, axis):
    def fn(x):
        cm = _int_indices(x.cummax(axis))
        return x.cumsum(axis), x.cumprod(axis), cm[0], cm[1], x.logcumsumexp(axis), *_int_indices(x.cummin(axis))

    x = randn(*shape)
    # cumprod over 131 values near 1 in size: keep the products in range
    check(fn, fn, [x if shape[-1] < 100 else (1 + 0.01 * x).astype(np.float32)], atol=1e-5)


def test_scans_int_and_stable():
    a = np.array([[3, -1, 4, 1], [0, 0, 2, -7]], dtype=np.int32)
    check(lambda x: (x.cumsum(1), x.cumprod(1)), lambda x: (x.cumsum(1), x.cumprod(1)), [a])
    big = np.array([-1000.0, 0.0, -1000.0, 3.0], dtype=np.float32)  # exp(-1000) underflows: logcumsumexp must not
    check(lambda x: x.logcumsumexp(0), lambda x: x.logcumsumexp(0), [big])
    # tied running maxima: the gradient goes to the element the index names, as torch's does
    ties = np.array([[1, 3, 3, 2, 3], [0, 0, 0, 0, 0]], dtype=np.float32)
    scans = lambda x: (*_int_indices(x.cummax(1)), *_int_indices(x.cummin(1)))  # noqa: E731
    check(scans, scans, [ties])


@pytest.mark.parametrize("shape,dim", [((3, 7), -1), ((5, 2), 0), ((1,), 0), ((4, 0), 0), ((2, 3, 4), 1)])
def test_sort_argsort_topk(shape, dim):
    def fn(x):
        s, i = x.sort(dim=dim, stable=True)
        sd, idd = x.sort(dim=dim, descending=True, stable=True)
        k = min(2, x.shape[dim])
        tk = x.topk(k, dim)
        tks = x.topk(k, dim, largest=False)
        # torch's indices are int64, lazygrad's the default int (int32, as tinygrad)
        return s, i.int(), sd, idd.int(), x.argsort(dim).int(), tk[0], tk[1].int(), tks[0], tks[1].int()

    check(fn, fn, [randn(*shape)])


def test_sort_kernel_count():
    x = Tensor(randn(6, 11)).realize()
    GlobalCounters.reset()
    x.sort(1)[0].realize()
    assert GlobalCounters.kernel_count == 2  # the rank of every element (one count), then each value to its place


def test_sort_ties_nan_and_ints():
    a = np.array([2.0, np.nan, 1.0, 2.0, -0.0, 0.0, np.nan, 1.0], dtype=np.float32)

    def fn(x):
        (s, i), (sd, idd) = x.sort(stable=True), x.sort(descending=True, stable=True)
        return s, i.int(), sd, idd.int()  # torch's indices are int64, lazygrad's int32

    check(fn, fn, [a], grad=False)
    for dt in ("int32", "int8", "float16", "uint8"):
        check(fn, fn, [np.array([[5, 1, 5, 3, 1], [0, 7, 7, 2, 9]], dtype=dt)], grad=False)
    with pytest.raises(ValueError, match="out of range"):
        Tensor(randn(3)).topk(4)


@pytest.mark.parametrize("axis,correction", [(None, 1), (1, 0), ((0, 2), 1)])
def test_std_var_mean(axis, correction):
    def fn(x):
        if is_torch(x):
            kw = {"dim": axis, "correction": correction}
            return (*torch.std_mean(x, **kw), *torch.var_mean(x, **kw))
        return (*x.std_mean(axis, correction=correction), *x.var_mean(axis, correction=correction))

    check(fn, fn, [randn(3, 4, 5)])


def test_norm():
    def fn(x):
        if is_torch(x):
            vn = torch.linalg.vector_norm
            return vn(x), vn(x, 1, dim=1), vn(x, 3, dim=(0, 1)), vn(x, math.inf, 0, keepdim=True), vn(x, -math.inf, 1)
        return x.norm(), x.norm(1, 1), x.norm(3, (0, 1)), x.norm(math.inf, 0, keepdim=True), x.norm(-math.inf, 1)

    check(fn, fn, [randn(3, 4)], atol=1e-5)
    np.testing.assert_allclose(Tensor([[0.0, 2.0], [3.0, 0.0]]).norm(0, 1).numpy(), [1, 1])


def test_norm_normalize_of_zero():
    # the root's derivative is infinite at 0: torch's gradient there is 0, not NaN
    def fn(x):
        nrm = F.normalize if is_torch(x) else Tensor.normalize
        vn = torch.linalg.vector_norm if is_torch(x) else Tensor.norm
        return vn(x, 2, 1), vn(x, 1, 1), nrm(x, dim=1), nrm(x, p=1, dim=1)

    check(fn, fn, [np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.0]], dtype=np.float32)])


# *** elementwise ***

ACTIVATIONS = {
    "relu": (lambda x: x.relu(), F.relu),  # gradient 0 at exactly 0, as torch (test_activations_at_kinks...)
    "relu6": (lambda x: x.relu6(), F.relu6),
    "leaky_relu": (lambda x: x.leaky_relu(0.2), lambda x: F.leaky_relu(x, 0.2)),
    "elu": (lambda x: x.elu(0.7), lambda x: F.elu(x, 0.7)),
    "celu": (lambda x: x.celu(1.3), lambda x: F.celu(x, 1.3)),
    "selu": (lambda x: x.selu(), F.selu),
    "gelu": (lambda x: x.gelu("none"), F.gelu),
    "gelu_tanh": (lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh")),  # tinygrad's default: tanh
    "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x)),
    "silu": (lambda x: x.silu(), F.silu),
    "mish": (lambda x: x.mish(), F.mish),
    "hardsigmoid": (lambda x: x.hardsigmoid(), F.hardsigmoid),
    "hardswish": (lambda x: x.hardswish(), F.hardswish),
    "hardtanh": (lambda x: x.hardtanh(-0.5, 2.0), lambda x: F.hardtanh(x, -0.5, 2.0)),
    "softsign": (lambda x: x.softsign(), F.softsign),
    "logsigmoid": (lambda x: x.logsigmoid(), F.logsigmoid),
    "softplus": (lambda x: x.softplus(), F.softplus),
    "erf": (lambda x: x.erf(), torch.erf),
}


ACTIVATIONS_MORE = {
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "clip": (lambda x: x.clip(-0.5, 2.0), lambda x: x.clip(-0.5, 2.0)),
    "hardtanh_wide": (lambda x: x.hardtanh(-3, 6), lambda x: F.hardtanh(x, -3.0, 6.0)),
}


def test_activations():
    x = (np.linspace(-8, 8, 61) + 0.0123).astype(np.float32)
    acts = {**ACTIVATIONS, **ACTIVATIONS_MORE}
    lg_fns, th_fns = [a[0] for a in acts.values()], [a[1] for a in acts.values()]
    check(lambda t: tuple(f(t) for f in lg_fns), lambda t: tuple(f(t) for f in th_fns), [x], atol=2e-6)


def test_activations_at_kinks_and_extremes():
    # exactly at the kinks torch picks one side's derivative (or zero); far out, the branch a where does not take
    # must not overflow into a NaN gradient (0 * inf)
    x = np.array([-1000, -100, -90, -30, -6, -3, -1, -0.5, -0.0, 0, 1, 2, 3, 6, 20, 21, 30, 90, 100, 1000], np.float32)
    acts = {**ACTIVATIONS, **ACTIVATIONS_MORE}
    lg_fns, th_fns = [a[0] for a in acts.values()], [a[1] for a in acts.values()]
    check(lambda t: tuple(f(t) for f in lg_fns), lambda t: tuple(f(t) for f in th_fns), [x], atol=2e-6)


def test_lerp_copysign_logaddexp():
    def fn(a, b, w):
        return a.lerp(b, w), a.lerp(b, 0.3), a.copysign(b), a.logaddexp(b), a.logaddexp(b * 40)

    check(fn, fn, [randn(3, 4), randn(3, 4, seed=1), randn(4, seed=2)], atol=1e-5)
    zeros = np.array([0.0, -0.0, 1.5, -1.5], dtype=np.float32)  # copysign's gradient is 0 where a is 0
    check(lambda a, b: a.copysign(b), lambda a, b: a.copysign(b), [zeros, -zeros[::-1].copy()])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -2.0], dtype=np.float32)
    a, b = np.repeat(special, 6), np.tile(special, 6)
    both = lambda x, y: (x.copysign(y), x.logaddexp(y))  # noqa: E731
    check(both, both, [a, b], grad=False)


def test_isnan_isinf_isfinite_isclose():
    special = np.array([0.0, 1.0, 1.00001, np.inf, -np.inf, np.nan, -1e-9], dtype=np.float32)
    a, b = np.repeat(special, 7), np.tile(special, 7)

    def fn(x, y):
        close = (x.isclose(y), x.isclose(y, equal_nan=True), x.isclose(y, rtol=0, atol=1e-3))
        return x.isnan(), x.isinf(), x.isfinite(), *close

    check(fn, fn, [a, b], grad=False)
    logical = lambda x, y: (x.logical_and(y), x.logical_or(y), x.logical_xor(y), x.logical_not())  # noqa: E731
    check(logical, logical, [a, b], grad=False)
    ints = np.array([1, -2, 3], dtype=np.int32)
    check(lambda x: (x.isnan(), x.isinf(), x.isfinite()), lambda x: (x.isnan(), x.isinf(), x.isfinite()), [ints])
    bools = (np.array([True, False, True]), np.array([True, True, False]))
    check(lambda x, y: (x.isclose(y), x.sign()), lambda x, y: (x.isclose(y), x.sign()), list(bools))
    assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7])) and not Tensor([1.0]).allclose(Tensor([1.1]))


@pytest.mark.parametrize("dtype", ["int32", "int8", "int64"])
def test_integer_div_mod_shift(dtype):
    a = np.array([7, -7, 7, -7, 0, 5, -128 if dtype == "int8" else -100, 3], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, 5, 3, -4], dtype=dtype)
    sh = np.array([0, 1, 2, 3, 1, 2, 1, 0], dtype=dtype)

    def fn(x, y, s):
        return (
            x // y,
            x % y,
            x.fmod(y) if not is_torch(x) else torch.fmod(x, y),
            x / y,
            x.div(y, rounding_mode="trunc"),
            x.div(y, rounding_mode="floor"),
            x << s,
            x >> s,
            x << 1,
            x >> 2,
        )

    check(fn, fn, [a, b, sh])


def test_unsupported_op_dtype_errors():
    # an op a dtype does not have names the op (in the user's terms), the dtype and the device; it is a TypeError
    # too, as numpy's error for the same
    cases = [
        (lambda: Tensor([1.0]) & Tensor([1.0]), r"bitwise_and \(&\) .* float32 tensors on " + Device.DEFAULT),
        (lambda: ~Tensor([1.0], dtype=dtypes.float64), r"bitwise_not \(~\) .* float64 tensors on " + Device.DEFAULT),
        (lambda: Tensor([1.0]).half() << 1, r"lshift \(<<\) .* float16 tensors on " + Device.DEFAULT),
        (lambda: 3 ^ Tensor([1.0]), r"bitwise_xor \(\^\) .* float32 tensors on " + Device.DEFAULT),
        (lambda: Tensor([True]) - Tensor([False]), r"subtraction \(-\) .* bool tensors on " + Device.DEFAULT),
        (lambda: -Tensor([True]), r"negation \(-\) .* bool tensors on " + Device.DEFAULT),
    ]
    for fn, msg in cases:
        with pytest.raises(NotImplementedError, match=msg):
            fn()
        with pytest.raises(TypeError):
            fn()


def test_float_fmod_mod():
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, 3.0], dtype=np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 1.5, 1.5], dtype=np.float32)
    fn = lambda x, y: (x % y, torch.fmod(x, y) if is_torch(x) else x.fmod(y))  # noqa: E731
    check(fn, fn, [a, b])
    check(lambda x, y: x // y, lambda x, y: x // y, [a, b], grad=False)
    # 0-d constants fold through the same float MOD (C fmod) the kernels use
    assert (Tensor(-5.5) % 2.0).item() == 0.5 and Tensor(5.0).fmod(math.inf).item() == 5.0
    assert Tensor(1e30).fmod(7.0).item() == float(np.fmod(np.float32(1e30), np.float32(7)))
    assert (Tensor(1.0) // 0.1).item() == 9
    assert math.isnan(Tensor(math.inf).fmod(2.0).item())


# *** nn functional ***


@pytest.mark.parametrize(
    "mode,align", [("nearest", None), ("nearest-exact", None), ("bilinear", False), ("bilinear", True)]
)
def test_interpolate_2d(mode, align):
    def fn(x):
        f = F.interpolate if is_torch(x) else Tensor.interpolate
        kw = {"mode": mode, "align_corners": align}
        return f(x, size=(5, 3), **kw), f(x, scale_factor=2, **kw), f(x, size=(1, 1), **kw)

    check(fn, fn, [randn(1, 2, 3, 4)], atol=1e-5)


def test_interpolate_linear_trilinear():
    def fn(x, y):
        f = F.interpolate if is_torch(x) else Tensor.interpolate
        lin = (f(x, size=7, mode="linear"), f(x, size=7, mode="linear", align_corners=True), f(x, 2, mode="linear"))
        return (*lin, f(y, size=(3, 2, 5), mode="trilinear"))

    check(fn, fn, [randn(2, 3, 4), randn(1, 1, 2, 3, 4, seed=1)], atol=1e-5)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        Tensor(randn(1, 1, 4)).interpolate()


@pytest.mark.parametrize("shape,size", [((2, 3, 64, 64), (10, 10)), ((1, 2, 7, 9), (13, 5)), ((1, 1, 5, 5), (3, 8))])
@pytest.mark.parametrize("align", [False, True])
def test_interpolate_uint8_bilinear(shape, size, align):
    """uint8 images resample to uint8, bit for bit as torch (fixed-point weights, rounding after each dim)."""
    x = np.random.default_rng(0).integers(0, 256, shape).astype(np.uint8)
    out = Tensor(x).interpolate(size=size, mode="bilinear", align_corners=align)
    ref = F.interpolate(torch.from_numpy(x), size=size, mode="bilinear", align_corners=align)
    assert out.dtype == dtypes.uint8
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    small = (np.arange(np.prod(shape)) % 21).reshape(shape).astype(np.uint8)  # the values tinygrad's test uses
    ref = F.interpolate(torch.from_numpy(small), size=size, mode="nearest")
    np.testing.assert_array_equal(Tensor(small).interpolate(size=size, mode="nearest").numpy(), ref.numpy())


def test_max_unpool2d():
    x = torch.from_numpy(randn(2, 3, 4, 6))
    pooled, idx = F.max_pool2d(x, 2, return_indices=True)

    def fn(p):
        if is_torch(p):
            return F.max_unpool2d(p, idx, 2), F.max_unpool2d(p, idx, 2, output_size=(5, 7))
        i = Tensor(idx.numpy())
        return p.max_unpool2d(i, 2), p.max_unpool2d(i, 2, output_size=(5, 7))

    check(fn, fn, [pooled.numpy()])


@pytest.mark.parametrize(
    "cfg",
    [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": (2, 3), "ceil_mode": True}],
)
def test_max_pool2d_with_indices_roundtrip(cfg):
    def fn(x):
        args = (cfg["kernel_size"], cfg.get("stride"), cfg.get("padding", 0), x.shape[-2:])
        if is_torch(x):
            v, i = F.max_pool2d(x, return_indices=True, **cfg)
            return v, i.int(), F.max_unpool2d(v, i, *args)
        v, i = x.max_pool2d_with_indices(**cfg)
        return v, i, v.max_unpool2d(i, *args)

    check(fn, fn, [randn(2, 2, 5, 7)])  # overlapping windows repeat an index: each copy gets the gradient, as torch


def test_avg_pool2d_modes_and_layernorm_axes_and_normalize():
    def fn(x):
        ap = F.avg_pool2d if is_torch(x) else Tensor.avg_pool2d
        ln = F.layer_norm(x, (4, 5)) if is_torch(x) else x.layernorm((-2, -1))
        nrm = F.normalize if is_torch(x) else Tensor.normalize
        nm = (nrm(x, dim=1), nrm(x, p=1, dim=-1))
        return (
            ap(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
            ap(x, 2, 3, padding=0, ceil_mode=True),
            ln,
            *nm,
        )

    check(fn, fn, [randn(2, 3, 4, 5)], atol=1e-5)


# *** interop and dtypes ***


@pytest.mark.parametrize("name", NP_DTYPES)
def test_numpy_roundtrip_every_dtype(name):
    a = (np.arange(-3, 3) % 2 == 0) if name == "bool" else np.arange(6).astype(name)
    a = a.reshape(2, 3)
    t = Tensor(a)
    assert t.dtype.name == name
    out = np.asarray(t)
    assert out.dtype == a.dtype and out.shape == a.shape
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(np.asarray(t[:, ::2]), a[:, ::2])  # a non-contiguous view
    assert t.element_size() == a.itemsize and t.nbytes == a.nbytes and t.numel() == a.size
    for other in (np.asfortranarray(a), a.astype(a.dtype.newbyteorder(">")), a[1, 2]):  # any layout, byte order, 0-d
        np.testing.assert_array_equal(np.asarray(Tensor(other)), other)
        assert Tensor(other).dtype.name == name


def test_casts():
    a = np.array([1.7, -2.5, 0.0, 300.2], dtype=np.float64)
    t = Tensor(a)
    assert t.dtype == dtypes.float64 and np.asarray(t * 1e-300).dtype == np.float64
    assert Tensor(np.float64(0.1)).dtype == dtypes.float64 and Tensor(np.float64(0.1)).item() == 0.1
    r = torch.from_numpy(a)
    pairs = [
        (t.float(), r.float()),
        (t.half(), r.half()),
        (t.int(), r.int()),
        (t.long(), r.long()),
        (t.bool(), r.bool()),
        (t.double(), r.double()),
        (t.cast("int16"), r.to(torch.int16)),
    ]
    for lg, th in pairs:
        np.testing.assert_array_equal(lg.numpy(), th.numpy())
    f = np.array([1.0, -2.0, np.inf], dtype=np.float32)
    np.testing.assert_array_equal(Tensor(f).bitcast(dtypes.int32).numpy(), f.view(np.int32))
    np.testing.assert_array_equal(Tensor(f).bitcast(dtypes.uint32).bitcast(dtypes.float32).numpy(), f)
    with pytest.raises(RuntimeError, match="divisible by 2"):
        Tensor(f).bitcast(dtypes.int64)
    assert Tensor(f).to("CPU").tolist() == f.tolist()
