"""tinygrad/torch API compatibility against torch, forward and backward: inverse trig and hyperbolic functions,
softmin, init helpers, randperm, pooling with indices, fixed-size selection, attention options, rearrange, linear
algebra, dtype tables, reductions over empty dims."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad import Tensor
from test.opcheck import check

# *** inverse trig and hyperbolic functions ***

# (name, low, high): the domain interior, where value and derivative are finite
DOMAINS = [
    ("asin", -0.99, 0.99),
    ("acos", -0.99, 0.99),
    ("atan", -300, 300),
    ("sinh", -80, 80),
    ("cosh", -80, 80),
    ("asinh", -300, 300),
    ("acosh", 1.01, 300),
    ("atanh", -0.99, 0.99),
]


@pytest.mark.parametrize("name,low,high", DOMAINS)
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 13)])
def test_unary_inverse(name: str, low: float, high: float, shape: tuple) -> None:
    x = np.random.default_rng(0).uniform(low, high, shape).astype(np.float32)
    fn = lambda t: getattr(t, name)()  # noqa: E731
    check(fn, fn, [x], atol=1e-6, rtol=1e-5, grad_atol=1e-5)


@pytest.mark.parametrize("name", [d[0] for d in DOMAINS])
def test_unary_inverse_float64_and_small(name: str) -> None:
    # tiny arguments (where e^x - e^-x or log(1 + x) would cancel) and float64 precision
    x = np.array([1e-30, -1e-7, 1e-4, 0.3, -0.45, 0.5, 0.9], dtype=np.float64)
    if name == "acosh":
        x = 1 + np.abs(x)
    fn = lambda t: getattr(t, name)()  # noqa: E731
    check(fn, fn, [x], atol=0, rtol=1e-10, grad_atol=0)
    check(fn, fn, [x.astype(np.float32)], atol=0, rtol=5e-5, grad_atol=0)


@pytest.mark.parametrize("name", [d[0] for d in DOMAINS])
def test_unary_inverse_edges(name: str) -> None:
    """Values at the domain's edges and outside it: infinities, NaN, +-1, huge arguments, as torch."""
    x = np.array([0, 1, -1, np.inf, -np.inf, np.nan, 1e30, -1e30, 2, -2, 1e10, -300, 300], dtype=np.float32)
    out = getattr(Tensor(x), name)().numpy()
    ref = getattr(torch.tensor(x), name)().numpy()
    if name in ("sinh", "cosh"):
        keep = np.abs(x) < 80  # torch overflows float32 e^x before halving it near 89
        out, ref = out[keep], ref[keep]
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0)


def test_inverse_gradients_at_edges() -> None:
    # atan has gradient 0 at +-inf, asinh and sinh 1 at 0
    for name, vals in (("atan", [np.inf, -np.inf, 0.0]), ("asinh", [0.0]), ("sinh", [0.0]), ("cosh", [0.0])):
        t = Tensor(np.array(vals, np.float32), requires_grad=True)
        getattr(t, name)().sum().backward()
        r = torch.tensor(vals, requires_grad=True)
        getattr(r, name)().sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=0)


@pytest.mark.parametrize("shape,axis", [((4, 7), -1), ((3, 5, 2), 1), ((1,), 0), ((3, 0), 1), ((0, 4), 0)])
def test_softmin(shape: tuple, axis: int) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    check(lambda t: t.softmin(axis), lambda t: torch.nn.functional.softmin(t, axis), [x])


# *** init helpers and randperm ***


@pytest.mark.parametrize(
    "name,shape,bound",
    [
        ("scaled_uniform", (8, 5), 1 / np.sqrt(40)),
        ("glorot_uniform", (8, 5, 3), np.sqrt(6 / (8 + 15))),
        ("kaiming_uniform", (16, 4, 3), np.sqrt(3) * np.sqrt(2 / (1 + 0.01**2)) / np.sqrt(12)),
    ],
)
def test_uniform_inits(name: str, shape: tuple, bound: float) -> None:
    Tensor.manual_seed(3)
    w = getattr(Tensor, name)(*shape).numpy()
    assert w.shape == shape and w.dtype == np.float32
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    # the variance of U(-b, b) is b^2 / 3
    np.testing.assert_allclose(w.var(), bound**2 / 3, rtol=0.35)
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(getattr(Tensor, name)(*shape).numpy(), w)


def test_kaiming_normal_and_errors() -> None:
    w = Tensor.kaiming_normal(64, 8, 2, 2, a=0.0).numpy()
    np.testing.assert_allclose(w.std(), np.sqrt(2 / 32), rtol=0.1)
    assert Tensor.kaiming_uniform(3, 4, requires_grad=True).requires_grad
    for fn in (Tensor.kaiming_uniform, Tensor.kaiming_normal, Tensor.scaled_uniform, Tensor.glorot_uniform):
        with pytest.raises(ValueError):
            fn(-3, 3)
    assert Tensor.glorot_uniform(0, 4).shape == (0, 4)


@pytest.mark.parametrize("n", [0, 1, 2, 13, 200])
def test_randperm(n: int) -> None:
    p = Tensor.randperm(n).numpy()
    assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(n))
    assert Tensor.randperm(n).dtype.name == "int32"  # tinygrad's default (torch's is int64)
    assert Tensor.randperm(n, dtype="int64").dtype.name == "int64"
    if n >= 13:
        assert p.tolist() != list(range(n))


# *** options: return_indices, isinf detect_*, pad_to value, fixed-size selection ***


@pytest.mark.parametrize(
    "shape,kw",
    [
        ((2, 3, 8, 8), dict(kernel_size=2)),
        ((1, 2, 7, 11), dict(kernel_size=(3, 2), dilation=(2, 1))),
        ((1, 1, 5, 5), dict(kernel_size=3, padding=1, stride=1)),
        ((2, 1, 7, 7), dict(kernel_size=2, stride=2, ceil_mode=True)),
        ((1, 1, 13, 13), dict(kernel_size=(12, 13))),
    ],
)
def test_max_pool2d_return_indices_and_unpool(shape: tuple, kw: dict) -> None:
    def lg(x):
        v, i = x.max_pool2d(return_indices=True, **kw)
        if "dilation" in kw:  # torch's max_unpool2d has no dilation
            return v, i
        size = kw.get("kernel_size")
        out = Tensor.max_unpool2d(
            v, i, kernel_size=size, stride=kw.get("stride"), padding=kw.get("padding", 0), output_size=x.shape[-2:]
        )
        return v, i, out

    def th(x):
        v, i = torch.nn.functional.max_pool2d(x, return_indices=True, **kw)
        if "dilation" in kw:
            return v, i.int()  # torch's indices are int64, lazygrad's the default int32
        size = kw.get("kernel_size")
        out = torch.nn.functional.max_unpool2d(
            v, i, kernel_size=size, stride=kw.get("stride"), padding=kw.get("padding", 0), output_size=x.shape[-2:]
        )
        return v, i.int(), out

    x = np.random.default_rng(2).permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
    check(lg, th, [x])


def test_isinf_detect() -> None:
    x = np.array([-np.inf, 2.0, np.inf, np.nan, 0.0], np.float32)
    t = Tensor(x)
    np.testing.assert_array_equal(t.isinf().numpy(), np.isinf(x))
    np.testing.assert_array_equal(t.isinf(detect_positive=True, detect_negative=False).numpy(), np.isposinf(x))
    np.testing.assert_array_equal(t.isinf(detect_positive=False, detect_negative=True).numpy(), np.isneginf(x))
    np.testing.assert_array_equal(t.isinf(detect_positive=False, detect_negative=False).numpy(), [False] * 5)


def test_pad_to_value() -> None:
    np.testing.assert_array_equal(Tensor([1, 2]).pad_to(4, value=7).numpy(), [1, 2, 7, 7])
    np.testing.assert_array_equal(Tensor([[1.0, 2.0]]).pad_to(None, 3, value=-1.5).numpy(), [[1, 2, -1.5]])
    with pytest.raises(ValueError):
        Tensor([1, 2]).pad_to(2, 3)


@pytest.mark.parametrize("size", [0, 1, 3, 6, 9])
def test_masked_select_nonzero_size(size: int) -> None:
    x = np.array([[1.0, 0, 3], [0, 5, 6]], np.float32)
    t = Tensor(x)
    sel = x[x > 0]
    want = np.concatenate([sel, np.full(max(0, size - len(sel)), -1.0, np.float32)])[:size]
    np.testing.assert_array_equal(t.masked_select(t > 0, size=size, fill_value=-1).numpy(), want)
    nz = np.argwhere(x)
    want_nz = np.concatenate([nz, np.full((max(0, size - len(nz)), 2), -1)])[:size]
    np.testing.assert_array_equal(t.nonzero(size=size, fill_value=-1).numpy(), want_nz)
    # torch's fixed-size form
    np.testing.assert_array_equal(
        t.nonzero(size=size, fill_value=-1).numpy(),
        torch.nonzero_static(torch.tensor(x), size=size, fill_value=-1).numpy(),
    )
    rows, cols = t.nonzero(size, 0, as_tuple=True)
    assert rows.shape == cols.shape == (size,)


def test_nonzero_size_needs_no_device_read() -> None:
    # a fixed size keeps the graph lazy: the count is compared on the device
    t = Tensor([0.0, 2.0, 0.0, 4.0]) + 0
    out = t.nonzero(size=3)
    assert not out.uop.is_realized if hasattr(out.uop, "is_realized") else True
    np.testing.assert_array_equal(out.numpy(), [[1], [3], [0]])


# *** attention ***


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1), (3, 3)])
def test_attention_gqa(heads: int, kv_heads: int) -> None:
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, heads, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, kv_heads, 7, 8)).astype(np.float32)
    v = rng.standard_normal((2, kv_heads, 7, 3)).astype(np.float32)
    f = torch.nn.functional.scaled_dot_product_attention
    check(
        lambda a, b, c: a.scaled_dot_product_attention(b, c, enable_gqa=True),
        lambda a, b, c: f(a, b, c, enable_gqa=True),
        [q, k, v],
        atol=1e-5,
    )
    check(
        lambda a, b, c: a.scaled_dot_product_attention(b, c, enable_gqa=True, is_causal=True, scale=0.3),
        lambda a, b, c: f(a, b, c, enable_gqa=True, is_causal=True, scale=0.3),
        [q, k, v],
        atol=1e-5,
    )


def test_attention_argument_errors() -> None:
    q = Tensor.ones(1, 3, 4, 8)
    with pytest.raises(ValueError, match="divide"):
        q.scaled_dot_product_attention(Tensor.ones(1, 2, 4, 8), Tensor.ones(1, 2, 4, 8), enable_gqa=True)
    # attn_mask with is_causal: torch raises RuntimeError
    with pytest.raises(RuntimeError, match="not both"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(4, 4), is_causal=True)


# *** dtype tables ***


def test_dtype_tables() -> None:
    from lazygrad.dtype import DTYPES_DICT, INVERSE_DTYPES_DICT, can_lossless_cast, dtypes

    assert dtypes.int8.min == -128 and dtypes.int8.max == 127 and dtypes.uint32.max == 2**32 - 1
    assert dtypes.float16.min == -float("inf") and dtypes.bool.max is True and dtypes.bool.min is False
    assert DTYPES_DICT["float32"] is dtypes.float32 and DTYPES_DICT["half"] is dtypes.float16
    assert dtypes.fields() == DTYPES_DICT
    assert all(INVERSE_DTYPES_DICT[dt.name] == dt.name for dt in dtypes.all)
    assert set(dtypes.ints) == set(dtypes.uints) | set(dtypes.sints) and dtypes.float64 in dtypes.floats
    assert dtypes.finfo(dtypes.bfloat16) == (8, 7) and dtypes.finfo(dtypes.float32) == (8, 23)
    with pytest.raises(ValueError):
        dtypes.finfo(dtypes.int32)
    # numpy's casting="safe" for every pair numpy has, except that 64-bit ints do not fit float64's mantissa
    # (numpy calls that safe; tinygrad and this are exact)
    for a in dtypes.all:
        for b in dtypes.all:
            if "bfloat16" in (a.name, b.name) or (a in (dtypes.int64, dtypes.uint64) and b == dtypes.float64):
                assert "bfloat16" in (a.name, b.name) or not can_lossless_cast(a, b)
                continue
            assert can_lossless_cast(a, b) == np.can_cast(np.dtype(a.name), np.dtype(b.name), "safe"), (a, b)


# *** rearrange (einops syntax) ***


@pytest.mark.parametrize(
    "shape,formula,sizes,ref",
    [
        ((2, 3, 12), "b c (h w) -> b (c h) w", dict(h=4), lambda t: t.reshape(2, 3, 4, 3).reshape(2, 12, 3)),
        ((2, 3, 12), "b c (h w) -> b w c h", dict(w=3), lambda t: t.reshape(2, 3, 4, 3).permute(0, 3, 1, 2)),
        ((2, 3, 12), "... (h w) -> ... h w", dict(w=2), lambda t: t.reshape(2, 3, 6, 2)),
        ((2, 3, 5), "b ... -> (...) b", {}, lambda t: t.permute(1, 2, 0).reshape(15, 2)),
        ((2, 3, 5), "a b c -> c () (a b) 1", {}, lambda t: t.permute(2, 0, 1).reshape(5, 1, 6, 1)),
        ((2, 3, 5), "a ... c -> c a ...", {}, lambda t: t.permute(2, 0, 1)),
        ((7,), "(a b) -> b a", dict(a=7, b=1), lambda t: t.reshape(7, 1).permute(1, 0)),
        ((2, 0, 3), "a b c -> (a c) b", {}, lambda t: t.permute(0, 2, 1).reshape(6, 0)),
        ((4, 1), "x () -> x", {}, lambda t: t.reshape(4)),
    ],
)
def test_rearrange(shape: tuple, formula: str, sizes: dict, ref) -> None:
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    check(lambda t: t.rearrange(formula, **sizes), ref, [x])


@pytest.mark.parametrize(
    "formula,sizes,match",
    [
        ("a b -> a", {}, "same axes"),
        ("a b c -> a b c", {}, "left side has 3 dims"),
        ("(a b) c -> a b c", {}, "all but one"),
        ("(a b) c -> a b c", dict(a=4), "do not make"),
        ("a a -> a a", {}, "named twice"),
        ("a b", {}, "'->'"),
        ("(a (b)) c -> a b c", {}, "nested"),
        ("a b -> a b", dict(z=3), "not on the left"),
        ("a-b c -> c", {}, "not an axis name"),
    ],
)
def test_rearrange_errors(formula: str, sizes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Tensor.ones(6, 5).rearrange(formula, **sizes)


# *** linear algebra ***

LA_SHAPES = [(3, 3), (5, 3), (3, 5), (2, 4, 4), (1, 1), (6, 1), (2, 1, 3, 2)]


def _orthonormal(q: np.ndarray, atol: float = 1e-5) -> None:
    eye = np.broadcast_to(np.eye(q.shape[-2]), q.shape[:-1] + (q.shape[-2],))
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), eye, atol=atol)


@pytest.mark.parametrize("shape", LA_SHAPES)
def test_qr(shape: tuple) -> None:
    a = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    q, r = Tensor(a).qr(mode="reduced")
    qt, rt = torch.linalg.qr(torch.tensor(a))
    # Householder with LAPACK's sign choice: the same factors, not only up to signs
    np.testing.assert_allclose(q.numpy(), qt.numpy(), atol=1e-5)
    np.testing.assert_allclose(r.numpy(), rt.numpy(), atol=1e-5)
    q, r = Tensor(a).qr()  # tinygrad's default: complete
    assert q.shape[-2:] == (shape[-2], shape[-2]) and r.shape == shape
    _orthonormal(q.numpy())
    np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=1e-5)
    np.testing.assert_array_equal(np.tril(r.numpy(), -1), 0)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1), (5, 5)])
def test_det(shape: tuple) -> None:
    a = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    check(lambda t: t.det(), torch.linalg.det, [a], atol=1e-5, grad_atol=1e-4)
    singular = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    assert abs(Tensor(singular).det().item()) < 1e-6
    with pytest.raises(ValueError):
        Tensor.ones(2, 3).det()


@pytest.mark.parametrize("shape", LA_SHAPES)
@pytest.mark.parametrize("full", [True, False])
def test_svd(shape: tuple, full: bool) -> None:
    a = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    u, s, vh = (x.numpy() for x in Tensor(a).svd(full_matrices=full))
    ut, st, vt = torch.linalg.svd(torch.tensor(a), full_matrices=full)
    assert u.shape == tuple(ut.shape) and s.shape == tuple(st.shape) and vh.shape == tuple(vt.shape)
    np.testing.assert_allclose(s, st.numpy(), atol=1e-5)
    k = min(shape[-2:])
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-5)
    # singular vectors equal torch's up to one sign per pair (distinct singular values)
    sign = np.sign(np.sum(u[..., :k] * ut.numpy()[..., :k], axis=-2, keepdims=True))
    np.testing.assert_allclose(u[..., :k] * sign, ut.numpy()[..., :k], atol=1e-4)
    if full:
        _orthonormal(u)
        _orthonormal(vh)


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (2, 3, 4)])
def test_pinv(shape: tuple) -> None:
    a = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(Tensor(a).pinv().numpy(), torch.linalg.pinv(torch.tensor(a)).numpy(), atol=1e-4)
    rank1 = np.outer([1.0, 2.0, 3.0], [1.0, -1.0]).astype(np.float32)
    np.testing.assert_allclose(Tensor(rank1).pinv().numpy(), np.linalg.pinv(rank1), atol=1e-5)


# *** reductions over zero-size dims, as torch ***


@pytest.mark.parametrize("shape,axis", [((2, 0, 3), 1), ((0,), 0), ((0, 4), 0), ((3, 0), None)])
def test_empty_reductions(shape: tuple, axis) -> None:
    x = np.zeros(shape, np.float32)
    t, r = Tensor(x), torch.tensor(x)
    kw = {} if axis is None else {"dim": axis}
    for name in ("sum", "prod", "mean"):
        ours = getattr(t, name)(axis) if axis is not None else getattr(t, name)()
        np.testing.assert_array_equal(ours.numpy(), getattr(r, name)(**kw).numpy())
    if axis is not None:
        for fn in (lambda a: a.softmax(axis), lambda a: a.log_softmax(axis)):
            assert fn(t).shape == tuple(fn(r).shape)
        for name in ("max", "min", "argmax", "argmin"):
            with pytest.raises(IndexError):
                getattr(r, name)(axis)
            with pytest.raises(IndexError):  # also a ValueError
                getattr(t, name)(axis)
    dims = axis if axis is not None else tuple(range(len(shape)))
    assert t.logsumexp(axis).shape == tuple(torch.logsumexp(r, dim=dims).shape)
