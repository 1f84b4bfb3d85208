"""torch.Tensor methods that torch programs call, against torch: structure and linear algebra, reductions and
statistics, indexing, in-place and random fills, construction and conversions, gradient hooks, and their errors
(the exception class torch raises)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lazygrad import Tensor, dtypes
from test.helpers import assert_close
from test.opcheck import check, randn

# torch's own deprecation and beta notices for the reference calls
pytestmark = [
    pytest.mark.filterwarnings("ignore:Using torch.cross without specifying the dim"),
    pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated"),
    pytest.mark.filterwarnings("ignore:To copy construct from a tensor"),
    pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta"),
]


def is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


def like(x, data, **kw):
    """`data` as a tensor of x's library."""
    return torch.tensor(data, **kw) if is_torch(x) else Tensor(data)


def both(fn, *inputs: np.ndarray) -> tuple:
    """fn applied to lazygrad and torch tensors made from the same inputs."""
    return fn(*[Tensor(x) for x in inputs]), fn(*[torch.tensor(x) for x in inputs])


def assert_same(out, ref, atol: float = 1e-5, check_dtype: bool = True) -> None:
    if isinstance(ref, (tuple, list)):
        assert len(out) == len(ref)
        for a, b in zip(out, ref):
            assert_same(a, b, atol, check_dtype)
    elif is_torch(ref):
        assert_close(out, ref, atol, 1e-4, check_dtype=check_dtype)
    else:
        assert out == ref


def raises_like_torch(fn, *inputs: np.ndarray) -> None:
    """fn raises on torch tensors and on lazygrad tensors, an instance of the class torch raises."""
    with pytest.raises(Exception) as ref:
        fn(*[torch.tensor(x) for x in inputs])
    with pytest.raises(type(ref.value)):
        out = fn(*[Tensor(x) for x in inputs])
        for t in out if isinstance(out, tuple) else (out,):
            if isinstance(t, Tensor):
                t.realize()


# *** structure ***


@pytest.mark.parametrize("shape", [(3, 4), (1, 5), (0, 3), (4,), ()])
def test_t_dim_nelement(shape):
    x = randn(*shape)
    check(lambda t: t.t(), lambda t: t.t(), [x])
    lt, tt = Tensor(x), torch.tensor(x)
    assert (lt.dim(), lt.ndimension(), lt.nelement()) == (tt.dim(), tt.ndimension(), tt.nelement())


def test_stride_offset_contiguous():
    views = [
        lambda x: x,
        lambda x: x.t(),
        lambda x: x[1:, ::2],
        lambda x: x.narrow(1, 1, 2),
        lambda x: x.permute(1, 0),
        lambda x: x[2],
        lambda x: x[:, 1],
        lambda x: x.unsqueeze(1).expand(3, 2, 4),
        lambda x: x.reshape(2, 6),
    ]
    for view in views:
        out, ref = both(view, randn(3, 4))
        assert out.stride() == ref.stride()
        assert out.stride(-1) == ref.stride(-1)
        assert out.storage_offset() == ref.storage_offset()
        assert out.is_contiguous() == ref.is_contiguous()
    # computed tensors own contiguous memory
    out, ref = both(lambda x: (x + 1).t().contiguous(), randn(3, 4))
    assert out.stride() == ref.stride() and out.is_contiguous()


@pytest.mark.parametrize("start,length", [(0, 2), (-3, 3), (4, 0), (1, 3)])
def test_narrow(start, length):
    check(lambda x: x.narrow(1, start, length), lambda x: x.narrow(1, start, length), [randn(2, 4)])
    check(lambda x: x.narrow(-2, 0, 1), lambda x: x.narrow(-2, 0, 1), [randn(2, 4)])


def test_unbind_movedim_swap():
    def fn(x):
        return (
            *x.unbind(1),
            *x.unbind(-3),
            x.movedim(0, -1),
            x.movedim((0, 1), (2, 0)),
            x.moveaxis(-1, 0),
            x.swapaxes(0, 2),
            x.swapdims(-1, 1),
        )

    check(fn, fn, [randn(2, 3, 4)])
    check(lambda x: x.unbind(0), lambda x: x.unbind(0), [randn(0, 3)])
    check(lambda x: x.movedim(0, 0), lambda x: x.movedim(0, 0), [randn()])


@pytest.mark.parametrize("dims", [(2,), (2, 3), (1, 2, 1), (0, 2), ()])
def test_tile(dims):
    check(lambda x: x.tile(dims), lambda x: x.tile(dims), [randn(2, 3)])


@pytest.mark.parametrize("spec", [1, 2, 3, 5, 7, [1, 3], [0, 0, 2], [-1], [2, 1], [9]])
@pytest.mark.parametrize("dim", [0, -1])
def test_tensor_split(spec, dim):
    check(lambda x: x.tensor_split(spec, dim), lambda x: x.tensor_split(spec, dim), [randn(5, 5)])


def test_tensor_split_index_tensor_and_hvdsplit():
    def fn(x):
        return (*x.tensor_split(like(x, [1, 2]), 1), *x.hsplit(2), *x.vsplit([1]), *x.dsplit(3), *x.hsplit([1, 3]))

    check(fn, fn, [randn(2, 4, 3)])
    check(lambda x: x.hsplit(2), lambda x: x.hsplit(2), [randn(6)])


@pytest.mark.parametrize("k", [-3, -1, 0, 1, 2, 3, 5])
def test_rot90_flips(k):
    def fn(x):
        return x.rot90(k), x.rot90(k, (2, 0)), x.fliplr(), x.flipud()

    check(fn, fn, [randn(2, 3, 4)])


@pytest.mark.parametrize(
    "fn,shape",
    [
        (lambda x: x.t(), (2, 2, 2)),
        (lambda x: x.narrow(1, 5, 1), (2, 4)),
        (lambda x: x.narrow(1, 2, 3), (2, 4)),
        (lambda x: x.narrow(2, 0, 1), (2, 4)),
        (lambda x: x.movedim((0, 0), (1, 0)), (2, 4)),
        (lambda x: x.movedim(0, (1, 0)), (2, 4)),
        (lambda x: x.tensor_split(0), (4,)),
        (lambda x: x.tensor_split(2), ()),
        (lambda x: x.hsplit(3), (2, 4)),
        (lambda x: x.vsplit(2), (4,)),
        (lambda x: x.rot90(1, (0, 0)), (2, 4)),
        (lambda x: x.rot90(1, (0,)), (2, 4)),
        (lambda x: x.rot90(), (4,)),
        (lambda x: x.fliplr(), (4,)),
        (lambda x: x.unbind(2), (2, 4)),
    ],
)
def test_structure_errors(fn, shape):
    raises_like_torch(fn, randn(*shape))


# *** linear algebra ***


def test_products():
    def fn(a, b, v, bat):
        return (
            a.mm(b),
            a.mv(v),
            bat.bmm(bat.transpose(1, 2)),
            a.inner(b.t()),
            a.inner(a[0, 0]),
            v.outer(a[0]),
            v.ger(v),
            a.kron(v),
            bat.kron(a),
            a.mm(b).trace(),
            v.vdot(v * 2),
        )

    check(fn, fn, [randn(3, 4), randn(4, 3, seed=1), randn(4, seed=2), randn(2, 3, 4, seed=3)])
    check(lambda a, b: (a.mm(b), a.inner(b.t())), lambda a, b: (a.mm(b), a.inner(b.t())), [randn(0, 3), randn(3, 2)])


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2), (0, 1.5)])
def test_scaled_products(beta, alpha):
    def fn(s, m, n, v, b1, b2):
        return (
            s.addmm(m, n, beta=beta, alpha=alpha),
            s[0].addmm(m, n, beta=beta, alpha=alpha),
            s[:, 0].addmv(m, v, beta=beta, alpha=alpha),
            s.addr(s[:, 0], v[:3], beta=beta, alpha=alpha),
            s.baddbmm(b1, b2, beta=beta, alpha=alpha),
            s.addbmm(b1, b2, beta=beta, alpha=alpha),
        )

    inputs = [randn(3, 3), randn(3, 4, seed=1), randn(4, 3, seed=2), randn(4, seed=3), randn(2, 3, 4, seed=4)]
    check(fn, fn, [*inputs, randn(2, 4, 3, seed=5)])
    # beta=0 ignores self, NaN included
    out, ref = both(lambda s, m: (s * math.nan).addmm(m, m.t(), beta=0), randn(3, 3), randn(3, 4))
    assert_same(out, ref)


def test_addcmul_addcdiv():
    def fn(s, a, b):
        return s.addcmul(a, b), s.addcmul(a, b, value=-0.5), s.addcdiv(a, b + 5), s.addcdiv(a, b + 5, value=2)

    check(fn, fn, [randn(3, 4), randn(3, 4, seed=1), randn(4, seed=2)])
    raises_like_torch(lambda s: s.addcdiv(s, s), np.array([1, 2], dtype=np.int64))


@pytest.mark.parametrize("shape,dim", [((3,), None), ((4, 3), 1), ((3, 5), 0), ((2, 3, 3), -1), ((2, 3, 3), None)])
def test_cross(shape, dim):
    check(lambda a, b: a.cross(b, dim), lambda a, b: torch.cross(a, b, dim=dim), [randn(*shape), randn(*shape, seed=1)])


@pytest.mark.parametrize("n,dim", [(1, -1), (2, 0), (3, 1), (0, 1), (5, 1)])
def test_diff(n, dim):
    check(lambda x: x.diff(n, dim), lambda x: x.diff(n, dim), [randn(3, 4)])
    check(
        lambda x, p: x.diff(n, dim, prepend=p, append=p),
        lambda x, p: x.diff(n, dim, prepend=p, append=p),
        [randn(3, 4), randn(3, 4, seed=1)],
    )
    out, ref = both(lambda x: (x.diff(n, 1), (x > 0).diff(n, 1)), randn(2, 5))
    assert_same(out, ref)


@pytest.mark.parametrize("offset,dim1,dim2", [(0, -2, -1), (1, 0, 2), (-2, 2, 0), (3, -1, 1)])
def test_diag_embed(offset, dim1, dim2):
    fn = lambda x: x.diag_embed(offset, dim1, dim2)  # noqa: E731
    check(fn, fn, [randn(2, 3)])
    check(lambda x: x.diag_embed(offset), lambda x: x.diag_embed(offset), [randn(0)])


@pytest.mark.parametrize("p", [2, 1, 3, math.inf, -math.inf, 0])
def test_dist(p):
    check(lambda a, b: a.dist(b, p), lambda a, b: a.dist(b, p), [randn(3, 4), randn(4, seed=1)], grad=p != 0)


@pytest.mark.parametrize("p,dim,maxnorm", [(2, 0, 1.0), (1, 1, 0.5), (3, -1, 10.0), (2, 1, 0.0)])
def test_renorm(p, dim, maxnorm):
    fn = lambda x: x.renorm(p, dim, maxnorm)  # noqa: E731
    check(fn, fn, [randn(3, 4)], grad=maxnorm > 0)
    check(lambda x: x.renorm(p, dim, 100.0), lambda x: x.renorm(p, dim, 100.0), [randn(3, 4)])


def square(n: int, batch: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    return (randn(*batch, n, n, seed=seed) + 2 * n * np.eye(n, dtype=np.float32)).astype(np.float32)


@pytest.mark.parametrize("n,batch", [(1, ()), (3, ()), (4, (2,)), (5, (2, 1)), (0, ())])
def test_inverse_logdet(n, batch):
    def fn(x):
        sign, logabs = x.slogdet()
        return x.inverse(), sign, logabs, x.logdet()

    check(fn, fn, [square(n, batch)], atol=1e-4, grad_atol=1e-3)


def test_slogdet_signs_and_singular():
    m = np.array([[[0.0, 1.0], [1.0, 0.0]], [[2.0, 0.0], [4.0, 0.0]], [[-3.0, 0.0], [0.0, -2.0]]], dtype=np.float32)
    out, ref = both(lambda x: (*x.slogdet(), x.logdet()), m)
    assert_same(out, ref, atol=1e-4)


@pytest.mark.parametrize("k", [0, 1, 2, 3, 6, -1, -2])
def test_matrix_power(k):
    check(lambda x: x.matrix_power(k), lambda x: x.matrix_power(k), [square(3, (2,)) / 6], atol=1e-4, grad_atol=1e-3)


@pytest.mark.parametrize(
    "fn,inputs",
    [
        (lambda a: a.mm(a), [(2, 3)]),
        (lambda a: a.mm(a[0]), [(2, 3)]),
        (lambda a: a.bmm(a), [(2, 3)]),
        (lambda a: a.mv(a), [(2, 3)]),
        (lambda a: a.outer(a), [(2, 3)]),
        (lambda a, b: a.inner(b), [(2, 3), (3, 2)]),
        (lambda a: a.trace(), [(3,)]),
        (lambda a: a.vdot(a[:2]), [(3,)]),
        (lambda a: a.cross(a), [(2, 4)]),
        (lambda a: a.cross(a, 0), [(2, 3)]),
        (lambda a: a.diff(), [()]),
        (lambda a: a.diff(-1), [(3,)]),
        (lambda a: a.diag_embed(0, 1, -1), [(3,)]),
        (lambda a: a.renorm(0, 0, 1.0), [(3, 3)]),
        (lambda a: a.renorm(2, 0, -1.0), [(3, 3)]),
        (lambda a: a.inverse(), [(2, 3)]),
        (lambda a: a.logdet(), [(3,)]),
        (lambda a: a.matrix_power(2), [(2, 3)]),
        (lambda a: a[:2].addmm(a, a.t()), [(3, 3)]),
    ],
)
def test_linalg_errors(fn, inputs):
    raises_like_torch(fn, *[randn(*s) for s in inputs])


# *** reductions and statistics ***


@pytest.mark.parametrize("shape", [(3, 4), (1, 1), (5,), ()])
def test_amax_amin_aminmax(shape):
    def fn(x):
        out = [x.amax(), x.amin(), *x.aminmax()]
        if x.ndim:
            out += [x.amax(-1), x.amin(0, True), x.amax(tuple(range(x.ndim))), *x.aminmax(dim=-1, keepdim=True)]
        return tuple(out)

    check(fn, fn, [randn(*shape)])
    # ties share the gradient evenly, as torch's amax
    check(lambda x: x.amax(1), lambda x: x.amax(1), [np.array([[1, 3, 3], [2, 2, 0]], dtype=np.float32)])
    raises_like_torch(lambda x: x.amax(1), randn(3, 0))


def test_count_nonzero_nansum_nanmean():
    x = randn(3, 4)
    x[x < -0.5] = 0
    x[0, 1] = x[2, 3] = np.nan

    def fn(t):
        return (
            t.count_nonzero(),
            t.count_nonzero(1),
            t.count_nonzero((0, 1)),
            t.nansum(),
            t.nansum(0, keepdim=True),
            t.nanmean(-1),
            t.nanmean(),
        )

    check(fn, fn, [x])
    out, ref = both(
        lambda t: (t.count_nonzero(0), t.nansum(1), t.nansum(dtype=torch.float32 if is_torch(t) else dtypes.float32)),
        np.array([[0, 1, 2], [3, 0, 0]], dtype=np.int32),
    )
    assert_same(out, ref)
    raises_like_torch(lambda t: t.nanmean(), np.array([1, 2], dtype=np.int64))


@pytest.mark.parametrize("empty", [(), []])
def test_an_empty_dim_keyword_reduces_every_dim_as_torch(empty):
    """torch's `dim=()` reduces every dim (sum, mean, var, std, norm, amax, ...); tinygrad's positional / `axis=()`
    reduces none, and stays so. Before, the keyword kept tinygrad's meaning: var(dim=()) gave a NaN per element."""
    x = randn(2, 3)

    def fn(t, dim):
        lib = torch if is_torch(t) else Tensor  # torch has var_mean / std_mean as functions only
        out = [getattr(t, m)(dim=dim) for m in ("sum", "mean", "var", "std", "amax", "amin", "norm")]
        out += [t.sum(dim=dim, keepdim=True), t.var(dim=dim, correction=0)]
        return (*out, *lib.var_mean(t, dim=dim), *lib.std_mean(t, dim=dim))

    # the torch side reduces every dim by naming them: torch's own var / std backward of dim=() divides by n = 1
    check(lambda t: fn(t, empty), lambda t: fn(t, (0, 1)), [x])
    assert_same(fn(Tensor(x), empty), fn(torch.tensor(x), empty))
    x[1, 2] = np.nan
    out, ref = both(lambda t: (t.nansum(dim=empty), t.nanmean(dim=empty), t.count_nonzero(dim=empty)), x)
    assert_same(out, ref)
    # any / all keep every dim in torch too
    out, ref = both(lambda t: (t.any(dim=empty), t.all(dim=empty)), np.array([[0, 1, 2], [3, 0, 0]], dtype=np.int32))
    assert_same(out, ref)
    assert Tensor(x).sum(axis=empty).shape == Tensor(x).sum(empty).shape == (2, 3)


@pytest.mark.parametrize("shape", [(6,), (5,), (3, 4), (2, 5), (1, 1)])
def test_median(shape):
    x = np.random.default_rng(0).permutation(np.prod(shape)).reshape(shape).astype(np.float32)

    def fn(t):
        out = [t.median(), t.nanmedian()]
        for d in range(-t.ndim, t.ndim):
            out += [*t.median(d), *t.median(d, keepdim=True), *t.nanmedian(d)]
        return tuple(out)

    check(fn, fn, [x], check_dtype=False)


def test_median_nan_and_ties():
    x = np.array([[1.0, np.nan, 3.0, 2.0], [4.0, 4.0, 1.0, 1.0], [np.nan, np.nan, np.nan, np.nan]], dtype=np.float32)
    out, ref = both(lambda t: (t.median(1)[0], t.nanmedian(1)[0], t.median(), t.nanmedian(), t[1].median()), x)
    assert_same(out, ref)
    out, ref = both(lambda t: (t.median(), *t.median(0)), np.array([3, 1, 4, 1, 5, 9], dtype=np.int32))
    assert_same(out, ref, check_dtype=False)
    out, ref = both(lambda t: (t.median(), t.nanmedian()), randn(0))
    assert_same(out, ref)
    raises_like_torch(lambda t: t.median(1), randn(2, 0))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (0, False), (-1, True)])
def test_quantile(interpolation, dim, keepdim):
    x = randn(4, 7)
    x_nan = x.copy()
    x_nan[1, 2] = x_nan[3, :] = np.nan

    def fn(t, q):
        return (
            t.quantile(q, dim, keepdim, interpolation=interpolation),
            t.quantile(0.25, dim, keepdim, interpolation=interpolation),
            t.nanquantile(q, dim, keepdim, interpolation=interpolation),
        )

    q = np.array([0.0, 0.1, 0.5, 0.75, 1.0], dtype=np.float32)
    check(fn, fn, [x, q], grad=False)
    check(lambda t: t.quantile(0.3, dim, keepdim), lambda t: t.quantile(0.3, dim, keepdim), [x])
    out, ref = both(fn, x_nan, q)
    assert_same(out, ref)


def test_quantile_edges_and_errors():
    raises_like_torch(lambda t: t.quantile(0.5), randn(0))
    raises_like_torch(lambda t: t.nanquantile(0.5, 1), randn(2, 0))
    out, ref = both(lambda t: t.quantile(0.5, 0), randn(1, 3))
    assert_same(out, ref)
    raises_like_torch(lambda t: t.quantile(1.5), randn(3))
    raises_like_torch(lambda t: t.quantile(0.5, interpolation="cubic"), randn(3))
    raises_like_torch(lambda t: t.quantile(0.5), np.array([1, 2], dtype=np.int64))
    raises_like_torch(lambda t: t.quantile(like(t, [[0.5]])), randn(3))


def test_mode():
    x = np.array([[2.0, 1, 2, 1, 3, 3], [5, 5, 4, 4, 4, 5], [7, 6, 5, 4, 3, 2]], dtype=np.float32)

    def fn(t):
        return (*t.mode(), *t.mode(1, keepdim=True), *t.mode(0), *t[0].mode())

    check(fn, fn, [x], check_dtype=False)
    out, ref = both(lambda t: (*t.mode(0), *t.mode()), np.array([[3, -1, 3], [-1, 3, 3]], dtype=np.int64))
    assert_same(out, ref, check_dtype=False)
    out, ref = both(lambda t: t.mode(), np.array(4.0, dtype=np.float32))
    assert_same(out, ref, check_dtype=False)
    raises_like_torch(lambda t: t.mode(), randn(2, 0))


def test_msort():
    check(lambda t: t.msort(), lambda t: t.msort(), [randn(4, 3)])


@pytest.mark.parametrize(
    "data",
    [
        [3, 1, 2, 3, 1, 1],
        [[1, 2], [1, 2], [0, 5]],
        [5],
        [],
        [[0, 0, 1], [0, 0, 1], [1, 0, 0], [0, 0, 1]],
    ],
)
def test_unique(data):
    x = np.array(data, dtype=np.float32)

    def fn(t):
        out = [
            t.unique(),
            *t.unique(return_inverse=True, return_counts=True),
            t.unique_consecutive(),
            *t.unique_consecutive(return_inverse=True, return_counts=True),
        ]
        if t.ndim:
            out += [*t.unique(dim=0, return_inverse=True, return_counts=True)]
            out += [*t.unique_consecutive(dim=0, return_inverse=True, return_counts=True)]
        if t.ndim > 1:
            out += [*t.unique(dim=1, return_inverse=True, return_counts=True)]
        return tuple(out)

    out, ref = both(fn, x)
    assert_same(out, ref)


def test_unique_dtypes():
    out, ref = both(lambda t: t.unique(return_counts=True), np.array([True, False, True]))
    assert_same(out, ref)
    out, ref = both(lambda t: t.unique(sorted=False), np.array([-4, 9, -4, 0], dtype=np.int32))
    assert_same(out, ref)


def test_bincount():
    x = np.array([1, 1, 4, 0, 4, 4], dtype=np.int64)
    w = randn(6)
    out, ref = both(
        lambda t, w: (t.bincount(), t.bincount(w), t.bincount(minlength=9), t[:0].bincount(minlength=2)), x, w
    )
    assert_same(out, ref)
    out, ref = both(lambda t, w: t.bincount(w), x, x.astype(np.int32))
    assert_same(out, ref)
    raises_like_torch(lambda t: t.bincount(), np.array([1, -1], dtype=np.int64))
    raises_like_torch(lambda t: t.bincount(), randn(3))
    raises_like_torch(lambda t: t.bincount(minlength=-1), x)


def test_histc():
    x = randn(50)

    def fn(t):
        return t.histc(), t.histc(7), t.histc(4, -1, 1), t.histc(3, 0.5, 0.5), t[:1].histc(3), t[:0].histc(5)

    out, ref = both(fn, x)
    assert_same(out, ref)
    raises_like_torch(lambda t: t.histc(0), x)
    raises_like_torch(lambda t: t.histc(3, 2, 1), x)


def test_cov_corrcoef():
    def fn(x, f, a):
        return (
            x.cov(),
            x.cov(correction=0),
            x.cov(fweights=f),
            x.cov(aweights=a),
            x.cov(fweights=f, aweights=a, correction=2),
            x[0].cov(),
            x.corrcoef(),
            x[0].corrcoef(),
        )

    f = np.array([1, 2, 1, 3, 1], dtype=np.int64)
    a = np.array([0.5, 1.0, 2.0, 0.1, 1.0], dtype=np.float32)
    check(fn, fn, [randn(3, 5), f, a], atol=1e-5, grad_atol=1e-3)
    raises_like_torch(lambda x: x.cov(), randn(2, 2, 2))
    raises_like_torch(lambda x: x.cov(fweights=x[0]), randn(2, 3))


# *** indexing ***


def test_take_take_along_dim():
    def fn(x):
        return (
            x.take(like(x, [[0, -1], [5, 2]])),
            x.take(like(x, [], dtype=torch.int64) if is_torch(x) else Tensor([], dtype=dtypes.int64)),
            x.take_along_dim(like(x, [[0, 2, 1]]), 1),
            x.take_along_dim(like(x, [[1], [0], [3]]), -1),
            x.take_along_dim(x.argsort(0), 0),
            x.take_along_dim(like(x, [3, 0])),
        )

    check(fn, fn, [randn(3, 4)])
    raises_like_torch(lambda x: x.take(like(x, [0.5])), randn(3))


def test_index_ops():
    def fn(x, s2, s3):
        i2, i3 = like(x, [2, 0]), like(x, [1, 3, 1])
        return (
            x.index_add(1, i3, s3),
            x.index_add(0, i2, s2, alpha=-2),
            x.index_copy(0, i2, s2),
            x.index_fill(1, i3, -1.5),
            x.index_fill(-2, i2, like(x, 7.0)),
            x.index_put((i2,), s2[0]),
            x.index_put((i2, like(x, [3, 0])), like(x, [5.0, 6.0])),
            x.index_put((like(x, [1, 2, 1]), like(x, [-1, 0, -1])), s3[0], accumulate=True),
            x.index_put((like(x, [1, 1, 0]),), s2[:1], accumulate=True),
            x.masked_scatter(x > 0, s3 * 10),
            x.masked_scatter(like(x, [True, False, True, False]), s3),
        )

    check(fn, fn, [randn(3, 4), randn(2, 4, seed=1), randn(3, 3, seed=2)])
    out, ref = both(
        lambda x: (x.index_add(0, like(x, [0, 0]), x[:2]), x.index_fill(0, like(x, [1]), 9)),
        np.arange(6, dtype=np.int32).reshape(3, 2),
    )
    assert_same(out, ref)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.index_add(0, like(x, [[0]]), x[:1]),
        lambda x: x.index_add(0, like(x, [0]), x),
        lambda x: x.index_add(0, like(x, [0.0]), x[:1]),
        lambda x: x.index_add(0, like(x, [0]), x[:1].double()),
        lambda x: x.index_copy(1, like(x, [0, 1]), x),
        lambda x: x.index_fill(0, like(x, [0]), x[0]),
        lambda x: x.index_put((like(x, [0]),), x[0].double()),
        lambda x: x.masked_scatter(x, x),
        lambda x: x.masked_scatter(x > 0, x.double()),
        lambda x: x.take_along_dim(like(x, [0]), 0),
    ],
)
def test_indexing_errors(fn):
    raises_like_torch(fn, randn(3, 4))


# *** in place, through the assign path ***


def test_inplace_fills_and_twins():
    def fn(x):
        x = x * 1  # a computed tensor: a leaf that requires grad takes no in-place write
        a = x.clone().fill_(2.5)
        b = x.clone().zero_()
        c = x.clone().clamp_(-0.5, 0.5)
        d = x.clone().clamp_min_(0.1)
        e = x.clone().clamp_max_(0.1)
        f = x.clone().add_(x, alpha=2)
        g = x.clone().sub_(1.5)
        h = x.clone().addcmul_(x, x, value=0.5)
        i = x.clone().index_fill_(1, like(x, [0, 2]), -7.0)
        j = x.clone().mul_(3).neg_().exp_()
        k = x.clone().copy_(x.flip(0))
        m = x.clone().fill_(like(x, 4.0)).masked_fill_(x > 0, 1.0)
        n = x.clone().copy_(x[0])
        return a, b, c, d, e, f, g, h, i, j, k, m, n

    check(fn, fn, [randn(3, 4)])


def test_inplace_on_views_writes_through():
    def fn(x):
        x = x.clone()
        x[0].fill_(1.0)
        x[:, 1].zero_()
        x.t()[2].add_(10.0)
        return x

    check(fn, fn, [randn(3, 4)])

    def order(x):
        x = x.clone() if is_torch(x) else x.clone().realize()  # a view of a lazy clone misses later writes
        row = x[1]
        x.fill_(3.0)  # the view reads the write made after it was taken
        y = row * 2
        x.clamp_(max=1.0)
        return y, x

    check(order, order, [randn(2, 3)])


def test_inplace_errors():
    raises_like_torch(lambda x: x.clamp_(0.5), np.array([1, 2], dtype=np.int64).astype(np.float32).astype(np.int64))
    x = Tensor(randn(3), requires_grad=True)
    with pytest.raises(RuntimeError):
        x.fill_(1.0)
    raises_like_torch(lambda x: x.exp_(), np.array([1, 2], dtype=np.int64))
    raises_like_torch(lambda x: x.fill_(x), randn(3))


# *** random fills ***


def _fresh(shape=(4000,), dtype=dtypes.float32) -> Tensor:
    return Tensor.zeros(*shape, dtype=dtype).contiguous().realize()


def test_random_fills_statistics():
    Tensor.manual_seed(3)
    n = 4000

    def stats(t):
        v = t.numpy().astype(np.float64)
        return v.mean(), v.std(), v.min(), v.max()

    mean, std, lo, hi = stats(_fresh().uniform_(-2, 3))
    assert -2 <= lo and hi < 3 and abs(mean - 0.5) < 0.15 and abs(std - 5 / math.sqrt(12)) < 0.1
    mean, _, lo, hi = stats(_fresh().uniform_(**{"from": 1.0, "to": 2.0}))
    assert 1 <= lo and hi < 2 and abs(mean - 1.5) < 0.05
    mean, std, _, _ = stats(_fresh().normal_(2.0, 0.5))
    assert abs(mean - 2.0) < 0.05 and abs(std - 0.5) < 0.05
    mean, _, lo, _ = stats(_fresh().exponential_(4.0))
    assert lo >= 0 and abs(mean - 0.25) < 0.03
    med = np.median(_fresh().cauchy_(1.0, 2.0).numpy())
    assert abs(med - 1.0) < 0.3
    v = _fresh().geometric_(0.25).numpy()
    assert v.min() >= 1 and np.all(v == np.round(v)) and abs(v.mean() - 4) < 0.3
    v = np.log(_fresh().log_normal_(0.5, 0.25).numpy())
    assert abs(v.mean() - 0.5) < 0.05 and abs(v.std() - 0.25) < 0.03
    v = _fresh().bernoulli_(0.3).numpy()
    assert set(np.unique(v)) <= {0.0, 1.0} and abs(v.mean() - 0.3) < 0.05
    v = Tensor.full((n,), 0.8).bernoulli().numpy()
    assert abs(v.mean() - 0.8) < 0.05
    v = _fresh(dtype=dtypes.int64).random_(-3, 4).numpy()
    assert v.min() == -3 and v.max() == 3
    v = _fresh(dtype=dtypes.int32).random_(5).numpy()
    assert v.min() == 0 and v.max() == 4
    v = _fresh(dtype=dtypes.uint8).random_().numpy()
    assert v.min() == 0 and v.max() == 255
    v = _fresh().random_().numpy()
    assert v.min() >= 0 and v.max() <= 2**24 and np.all(v == np.round(v))


def test_random_fills_never_repeat():
    x = _fresh((64,))
    a = x.uniform_().numpy().copy()
    b = x.uniform_().numpy().copy()
    c = _fresh((64,)).normal_().numpy()
    d = _fresh((64,)).normal_().numpy()
    assert not np.array_equal(a, b) and not np.array_equal(c, d)
    v = Tensor.zeros(3, 4).contiguous()
    v[1].uniform_(5, 6)  # through a view: only that row
    out = v.numpy()
    assert np.all(out[[0, 2]] == 0) and np.all((out[1] >= 5) & (out[1] < 6))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.uniform_(2, 1),
        lambda x: x.normal_(0, -1),
        lambda x: x.exponential_(-1),
        lambda x: x.geometric_(1.5),
        lambda x: x.random_(3, 3),
    ],
)
def test_random_fill_errors(fn):
    raises_like_torch(fn, randn(4))


def test_random_fill_dtype_errors():
    raises_like_torch(lambda x: x.uniform_(), np.array([1, 2], dtype=np.int64))
    raises_like_torch(lambda x: x.normal_(), np.array([1, 2], dtype=np.int64))


# *** construction, conversion ***


def test_new_and_conversions():
    def fn(x):
        i = x.long() if is_torch(x) else x.long()
        return (
            x.new_zeros(2, 3),
            x.new_ones((0, 2)),
            x.new_full((2,), 7.5),
            x.new_full([1, 2], 3, dtype=torch.int32 if is_torch(x) else dtypes.int32),
            x.new_tensor([[1, 2], [3, 4]]),
            i.new_tensor([1.5, 2.5]),
            x.new_tensor(i[0].detach()),
            x.new_empty(3, 2).zero_(),
            i.type_as(x),
            x.type_as(i),
            x.view_as(x.reshape(4, 3)),
            x.reshape_as(x[:, :, None]),
            x.cpu(),
            (x * 40).byte(),
            (x * 40).char(),
            (x * 400).short(),
            x.bfloat16().float(),
        )

    out, ref = both(fn, randn(3, 4))
    assert_same(out, ref)
    out = Tensor(randn(2)).new_zeros(2, requires_grad=True)
    assert out.requires_grad and out.is_leaf and out.dtype == dtypes.float32
    raises_like_torch(lambda x: x.view_as(x[0]), randn(3, 4))


# *** autograd: retain_grad, register_hook ***


def test_retain_grad():
    for lib in (torch, None):
        x = (torch.tensor if lib else Tensor)(randn(3), requires_grad=True)
        y = x * 2
        y.retain_grad()
        z = (y * y).sum()
        z.backward()
        if lib:
            ref = y.grad.numpy()
        else:
            assert y.retains_grad and not y.is_leaf and x.is_leaf
            np.testing.assert_allclose(y.grad.numpy(), ref, rtol=1e-6)
    with pytest.raises(RuntimeError):
        Tensor(randn(3)).retain_grad()


def test_register_hook():
    grads = {}
    for lib in ("torch", "lazygrad"):
        make = torch.tensor if lib == "torch" else Tensor
        x = make(randn(3), requires_grad=True)
        seen = []
        x.register_hook(lambda g: g * 10)
        y = x * x
        h = y.register_hook(lambda g: seen.append(g) or g + 1)
        y.register_hook(lambda g: g * 2)
        (y * 3).sum().backward()
        grads[lib] = (x.grad.numpy(), seen[0].numpy())
        h.remove()
    np.testing.assert_allclose(grads["lazygrad"][0], grads["torch"][0], rtol=1e-6)
    np.testing.assert_allclose(grads["lazygrad"][1], grads["torch"][1], rtol=1e-6)
    with pytest.raises(RuntimeError):
        Tensor(randn(3)).register_hook(lambda g: g)
    x = Tensor(randn(3), requires_grad=True)
    x.register_hook(lambda g: g * 10).remove()
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 2, 2])


# *** elementwise ***


def test_inf_checks_nan_to_num_heaviside():
    x = np.array([1.0, -np.inf, np.inf, np.nan, 0.0, -2.0], dtype=np.float32)

    def fn(t):
        return (
            t.isposinf(),
            t.isneginf(),
            t.isreal(),
            t.nan_to_num(),
            t.nan_to_num(1.0, 2.0, -3.0),
            t.nan_to_num(posinf=9.0),
            t.heaviside(like(t, [0.5] * 6)),
            t.heaviside(like(t, 0.25)),
        )

    out, ref = both(fn, x)
    assert_same(out, ref)
    check(lambda t: t.nan_to_num(), lambda t: t.nan_to_num(), [randn(3, 4)])
    out, ref = both(lambda t: (t.isposinf(), t.nan_to_num(), t.heaviside(t)), np.array([0, -3, 4], dtype=np.int32))
    assert_same(out, ref)
    out, ref = both(lambda t: t.nan_to_num(), x.astype(np.float16))
    assert_same(out, ref)
    raises_like_torch(lambda t: t.heaviside(t.double()), x)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(-(2**31) + 1, 2**31 - 1), min_size=1, max_size=8),
    st.lists(st.integers(-(2**31) + 1, 2**31 - 1), min_size=1, max_size=8),
)
def test_gcd_lcm_int32(a, b):
    n = min(len(a), len(b))
    x, y = np.array(a[:n], dtype=np.int32), np.array(b[:n], dtype=np.int32)
    out, ref = both(lambda s, t: s.gcd(t), x, y)
    assert_same(out, ref)
    small_x, small_y = x % 5000, y % 5000  # lcm of large values overflows (torch wraps)
    out, ref = both(lambda s, t: s.lcm(t), small_x, small_y)
    assert_same(out, ref)


def test_gcd_dtypes_and_errors():
    out, ref = both(
        lambda s, t: (s.gcd(t), s.lcm(t)),
        np.array([0, 12, -18, 2**40, 7], dtype=np.int64),
        np.array([0, 0, 24, 2**35 * 3, -49], dtype=np.int64),
    )
    assert_same(out, ref)
    out, ref = both(
        lambda s, t: s.gcd(t), np.array([12, 255, 0], dtype=np.uint8), np.array([18, 85, 9], dtype=np.uint8)
    )
    assert_same(out, ref)
    raises_like_torch(lambda s: s.gcd(s), randn(3))
    assert Tensor([12, -18]).gcd(8).tolist() == [4, 2]


def test_inplace_twins_exist():
    for name in (
        "clamp_",
        "clip_",
        "index_add_",
        "index_copy_",
        "index_fill_",
        "index_put_",
        "masked_scatter_",
        "nan_to_num_",
        "addcmul_",
        "addcdiv_",
        "addmm_",
        "baddbmm_",
        "renorm_",
        "heaviside_",
        "gcd_",
        "lcm_",
        "masked_fill_",
        "scatter_",
        "exp_",
        "mul_",
        "div_",
    ):
        assert hasattr(Tensor, name), name
    x = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError):
        x.div_(2)  # a float result does not go into an int tensor, as torch


_SPELLING_TWINS = [  # (op, values of the other operand, input domain): torch's other names and special functions
    ("absolute", (), "any"),
    ("arccos", (), "unit"),
    ("arccosh", (), "above1"),
    ("arcsin", (), "unit"),
    ("arcsinh", (), "any"),
    ("arctan", (), "any"),
    ("arctanh", (), "unit"),
    ("deg2rad", (), "any"),
    ("rad2deg", (), "any"),
    ("digamma", (), "positive"),
    ("lgamma", (), "positive"),
    ("erfc", (), "any"),
    ("erfinv", (), "unit"),
    ("expm1", (), "any"),
    ("log1p", (), "positive"),
    ("fix", (), "any"),
    ("frac", (), "any"),
    ("logit", (), "prob"),
    ("sinc", (), "any"),
    ("negative", (), "any"),
    ("sgn", (), "any"),
    ("arctan2", (0.5,), "any"),
    ("atan2", (-0.5,), "any"),
    ("divide", (3.0,), "any"),
    ("true_divide", (-2.0,), "any"),
    ("multiply", (1.5,), "any"),
    ("subtract", (0.25,), "any"),
    ("floor_divide", (0.75,), "any"),
    ("remainder", (0.75,), "any"),
    ("hypot", (0.5,), "any"),
    ("xlogy", (2.0,), "any"),
    ("greater", (0.1,), "any"),
    ("greater_equal", (0.1,), "any"),
    ("less", (0.1,), "any"),
    ("less_equal", (0.1,), "any"),
    ("not_equal", (0.0,), "any"),
]
_DOMAINS = {
    "any": lambda x: x * 3,
    "unit": lambda x: np.tanh(x) * 0.9,
    "above1": lambda x: np.abs(x) + 1.1,
    "positive": lambda x: np.abs(x) + 0.2,
    "prob": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("name,args,domain", _SPELLING_TWINS, ids=[t[0] for t in _SPELLING_TWINS])
def test_inplace_twins_of_other_spellings(name, args, domain):
    """x.op_(...) writes op's value into x (and through a view into its base), as torch's, for the twins of torch's
    other spellings and special functions."""
    x = _DOMAINS[domain](randn(3, 5, seed=4)).astype(np.float32)

    def fn(t):
        t = t.clone()
        other = [like(t, [a] * 5) for a in args]  # a row broadcast over t
        ret = getattr(t, f"{name}_")(*other)
        assert ret is t
        base = t.clone()
        getattr(base[1:], f"{name}_")(*other)  # through a view: the base's rows change
        return t, base

    check(fn, fn, [x], grad=False, atol=1e-5)


def test_inplace_twins_ints_and_errors():
    out, ref = both(
        lambda t: (t.clone().bitwise_left_shift_(2), t.clone().bitwise_right_shift_(1)), np.array([1, 5, -8])
    )
    assert_same(out, ref)
    out, ref = both(lambda t: (t.clone().remainder_(3), t.clone().floor_divide_(-2)), np.array([7, -7, 0, 5]))
    assert_same(out, ref)
    raises_like_torch(lambda t: t.divide_(2.0), np.array([1, 2, 3]))  # a float result into an int tensor


def test_fix_positive_detach_():
    out, ref = both(lambda t: (t.fix(), t.positive(), +t), np.array([-1.5, 0.5, 2.7], dtype=np.float32))
    assert_same(out, ref)
    raises_like_torch(lambda t: +t, np.array([True, False]))
    raises_like_torch(lambda t: t.positive(), np.array([True, False]))

    def grads(lib_tensor):
        w = lib_tensor([1.0, 2.0, 3.0], requires_grad=True)
        y, z = w * 2, w * 3
        z.detach_()  # z leaves the graph: its product with w is a constant times w
        assert not z.requires_grad
        (y.sum() + (z * w).sum()).backward()
        leaf = lib_tensor([1.0], requires_grad=True)
        leaf.detach_()
        assert not leaf.requires_grad
        return w.grad

    assert_same(grads(Tensor), grads(torch.tensor))
    raises_like_torch(lambda t: t[1:].detach_(), randn(4))


# *** matrix views, predicates, k-th values, scatters into slices, Cholesky ***


def test_matrix_views_and_predicates():
    def fn(x):
        return (
            x.mT,
            x.mH,
            x[0].H,
            x.adjoint(),
            x.conj(),
            x.ravel(),
            x[0].broadcast_to(2, 3, 4),
            x.broadcast_to(-1, 3, 4),
        )

    check(fn, fn, [randn(2, 3, 4)])
    for data in (randn(3), np.array([1, 2], dtype=np.uint8), np.array([1, -2], dtype=np.int16), np.array([True])):
        lt, tt = Tensor(data), torch.tensor(data)
        assert (lt.is_floating_point(), lt.is_signed(), lt.is_complex(), lt.itemsize, lt.is_cpu) == (
            tt.is_floating_point(),
            tt.is_signed(),
            tt.is_complex(),
            tt.itemsize,
            tt.is_cpu,
        )
    a, b = randn(2, 3), randn(2, 3, seed=1)
    assert Tensor(a).equal(Tensor(a)) and not Tensor(a).equal(Tensor(b)) and not Tensor(a).equal(Tensor(a[0]))
    assert Tensor(a).is_same_size(Tensor(b)) and not Tensor(a).is_same_size(Tensor(a.T))
    assert Tensor([2.0]).is_nonzero() and not Tensor(0).is_nonzero()
    raises_like_torch(lambda x: x.is_nonzero(), randn(2))
    raises_like_torch(lambda x: x.mT, randn(3))
    raises_like_torch(lambda x: x.H, randn(2, 2, 2))
    out, ref = both(lambda x: x.argwhere(), np.array([[0, 1, 0], [2, 0, 3]], dtype=np.int32))
    assert_same(out, ref, check_dtype=False)


@pytest.mark.parametrize("dim,index", [(0, 1), (-1, -2), (1, 0)])
def test_select_and_scatters(dim, index):
    def fn(x, s):
        return (
            x.select(dim, index),
            x.select_scatter(s.select(dim, 0), dim, index),
            x.slice_scatter(s.narrow(dim, 0, 1), dim, index % x.shape[dim], index % x.shape[dim] + 1),
            x.slice_scatter(s.narrow(1, 0, 2), 1, 0, None, 2),
            x.diagonal_scatter(s[:, :3].diagonal()),
            x.diagonal_scatter(s.diagonal(1), 1),
            x.diagonal_scatter(s.diagonal(-1, 1, 0), -1, 1, 0),
        )

    check(fn, fn, [randn(3, 4), randn(3, 4, seed=1)])
    raises_like_torch(lambda x: x.select(0, 3), randn(3, 4))
    raises_like_torch(lambda x: x.select_scatter(x, 0, 0), randn(3, 4))
    raises_like_torch(lambda x: x.diagonal_scatter(x[0]), randn(3, 4))


def test_split_sum_to_size_narrow_copy_diagflat():
    def fn(x):
        return (
            *x.split_with_sizes([1, 3], 1),
            x.sum_to_size(1, 4),
            x.sum_to_size(3, 1),
            x.sum_to_size(4),
            x.sum_to_size((3, 4)),
            x.narrow_copy(0, 1, 2),
            x[0].diagflat(),
            x.diagflat(-1),
        )

    check(fn, fn, [randn(3, 4)])
    raises_like_torch(lambda x: x.sum_to_size(2, 4), randn(3, 4))


@pytest.mark.parametrize("k,dim,keepdim", [(1, -1, False), (3, 1, True), (2, 0, False), (4, -1, False)])
def test_kthvalue(k, dim, keepdim):
    x = np.random.default_rng(0).permutation(20).reshape(4, 5).astype(np.float32)
    check(lambda t: t.kthvalue(k, dim, keepdim), lambda t: t.kthvalue(k, dim, keepdim), [x], check_dtype=False)
    raises_like_torch(lambda t: t.kthvalue(6), x)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    def fn(x, s):
        idx = like(x, [0, 2, 0])
        return x.index_reduce(1, idx, s, reduce, include_self=include_self)

    check(fn, fn, [randn(2, 4), randn(2, 3, seed=1)])


@pytest.mark.parametrize(
    "shape,wrap", [((3, 3), False), ((5, 3), False), ((7, 3), True), ((3, 5), True), ((2, 2, 2), False)]
)
def test_fill_diagonal(shape, wrap):
    out, ref = both(lambda x: x.clone().fill_diagonal_(-1.5, wrap), randn(*shape))
    assert_same(out, ref)
    raises_like_torch(lambda x: x.fill_diagonal_(0), randn(2, 3, 4))


@pytest.mark.parametrize("n,batch", [(1, ()), (4, ()), (3, (2,)), (0, ())])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(n, batch, upper):
    a = randn(*batch, n, n)
    spd = (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=np.float32)).astype(np.float32)
    # the input's gradient through a symmetric matrix: compare through its lower triangle, as torch reads only that
    check(
        lambda x: (x.tril() + x.tril(-1).mT).cholesky(upper),
        lambda x: (x.tril() + x.tril(-1).mT).cholesky(upper),
        [spd],
        atol=1e-4,
        grad_atol=1e-3,
    )
    check(lambda x: x.pinverse(), lambda x: x.pinverse(), [randn(3, 2)], atol=1e-4, grad=False)


# *** kernels: what fuses ***


@pytest.mark.parametrize(
    "name,fn",
    [
        ("fill_", lambda x, i, s: x.fill_(2.0)),
        ("uniform_", lambda x, i, s: x.uniform_()),
        ("index_add", lambda x, i, s: x.index_add(1, i, s)),
        ("nan_to_num", lambda x, i, s: x.log().nan_to_num()),
        ("cross", lambda x, i, s: x[:, :3].cross(x[:, 3:6], 1)),
        ("diag_embed", lambda x, i, s: x.diag_embed()),
        ("addcmul", lambda x, i, s: x.addcmul(x, x, value=0.5)),
    ],
)
def test_one_kernel(name, fn):
    from lazygrad.helpers import GlobalCounters

    x, i, s = Tensor(randn(16, 8)).realize(), Tensor([3, 5, 3]).realize(), Tensor(randn(16, 3)).realize()
    GlobalCounters.reset()
    fn(x, i, s).realize()
    assert GlobalCounters.kernel_count == 1, name


# *** statistics of integer data with repeats, against torch ***


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(-3, 5), min_size=1, max_size=12))
def test_statistics_of_repeats(values):
    x = np.array(values, dtype=np.int64)

    def fn(t):
        f = t.float()
        return (
            *t.unique(return_inverse=True, return_counts=True),
            *t.unique_consecutive(return_inverse=True, return_counts=True),
            t.mode()[0],
            t.median(),
            f.quantile(0.3),
            f.quantile(0.5, interpolation="nearest"),
            (t + 3).bincount(),
            t.count_nonzero(),
            f.histc(4),
            t.msort(),
        )

    out, ref = both(fn, x)
    assert_same(out, ref)


# torch names the reduced axis `dim`: x.sum(dim=1) in a torch program runs unchanged (tinygrad's `axis` stays)
DIM_KEYWORD = [
    "sum", "mean", "prod", "std", "var", "any", "all", "argmax", "argmin", "logsumexp", "softmax", "log_softmax",
    "cumsum", "cumprod", "logcumsumexp",
]  # fmt: skip


@pytest.mark.parametrize("name", DIM_KEYWORD)
@pytest.mark.parametrize("dim", [0, -1])
def test_reductions_take_torch_dim_keyword(name, dim):
    a = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], dtype=np.float32)
    kw = {"keepdim": True} if name not in ("softmax", "log_softmax") and not name.startswith("cum") else {}
    kw = {} if name == "logcumsumexp" else kw
    got = getattr(Tensor(a), name)(dim=dim, **kw)
    want = getattr(torch.from_numpy(a), name)(dim=dim, **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got.numpy(), getattr(Tensor(a), name)(dim, **kw).numpy(), rtol=1e-6)  # as positional


@pytest.mark.parametrize("name", ["max", "min", "cummax", "cummin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_with_dim_keyword_give_torch_values_and_indices(name, keepdim):
    # torch's x.max(dim=1) is (values, indices); lazygrad's x.max(1) stays tinygrad's tensor of values
    a = np.array([[1.0, 5.0, 3.0], [6.0, 2.0, 6.0]], dtype=np.float32)
    kw = {"keepdim": keepdim} if name in ("max", "min") else {}
    got = getattr(Tensor(a), name)(dim=1, **kw)
    want = getattr(torch.from_numpy(a), name)(dim=1, **kw)
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    if name == "max":
        np.testing.assert_array_equal(Tensor(a).max(1).numpy(), a.max(1))


def test_flip_takes_torch_dims_keyword():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Tensor(a).flip(dims=(0, 1)).numpy(), torch.from_numpy(a).flip(dims=(0, 1)).numpy())
    with pytest.raises(TypeError):
        Tensor(a).flip()


# *** torch's spellings of arguments tinygrad names otherwise ***


def test_add_sub_alpha_forward_backward():
    a, b = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    for op in ("add", "sub", "subtract"):
        x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
        tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        out, ref = getattr(x, op)(y, alpha=2.5), getattr(tx, op)(ty, alpha=2.5)
        out.square().sum().backward()
        ref.square().sum().backward()
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(Tensor([1, 2]).add(Tensor([3, 4]), alpha=3).numpy(), [10, 14])  # ints stay exact


def test_var_std_unbiased_keyword():
    a = np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32)
    for name in ("var", "std"):
        for unbiased in (True, False):
            for dim in (None, 1, (0, 1)):
                ref = getattr(torch.tensor(a), name)(dim=dim, unbiased=unbiased, keepdim=True)
                out = getattr(Tensor(a), name)(dim=dim, unbiased=unbiased, keepdim=True)
                np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_flip_takes_the_dims_one_by_one():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for dims in ((0,), (0, 2), (2, 1, 0), (-1, 0)):
        ref = torch.tensor(a).flip(*dims).numpy()
        np.testing.assert_array_equal(Tensor(a).flip(*dims).numpy(), ref)
        np.testing.assert_array_equal(Tensor(a).flip(dims).numpy(), ref)


def test_where_in_torchs_method_order():
    """torch's `x.where(cond, y)` (x not bool, cond a bool tensor) picks x where cond holds; before, tinygrad's
    reading took x as the condition and gave cond's values: silently wrong for a torch program."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, ref = x.where(x > 0, y), tx.where(tx > 0, ty)
    (out * 3).sum().backward()
    (ref * 3).sum().backward()
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())
    np.testing.assert_array_equal(
        Tensor(a).where(Tensor(a) < 0, 0.0).numpy(), torch.tensor(a).where(torch.tensor(a) < 0, 0.0)
    )
    # tinygrad's order is unchanged: a bool self is the condition, a number self means "not zero"
    np.testing.assert_array_equal((Tensor(a) > 0).where(Tensor(a), 0.0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_array_equal(Tensor([0.0, 2.0]).where(1, 5).numpy(), [5, 1])
    cond = Tensor([True, False])
    np.testing.assert_array_equal(cond.where(Tensor([False, False]), True).numpy(), [False, True])


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_dtype_casts_first(name):
    a = np.random.default_rng(6).standard_normal((3, 5)).astype(np.float16)
    ref = getattr(torch.tensor(a), name)(1, dtype=torch.float32)
    out = getattr(Tensor(a), name)(1, dtype=dtypes.float32)
    assert out.dtype == dtypes.float32
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
    out = getattr(Tensor(a), name)(dim=-1, dtype="float64")
    assert out.dtype == dtypes.float64
    np.testing.assert_allclose(out.numpy(), ref.double().numpy(), rtol=1e-6, atol=1e-6)


def test_deg2rad_rad2deg():
    for a in (np.array([0, 90, -180, 360], np.int32), np.array([0.5, -1.25, 3.0], np.float32)):
        np.testing.assert_allclose(Tensor(a).deg2rad().numpy(), torch.tensor(a).deg2rad().numpy(), rtol=1e-6)
        np.testing.assert_allclose(Tensor(a).rad2deg().numpy(), torch.tensor(a).rad2deg().numpy(), rtol=1e-6)


# *** special functions, float bits, activations and questions torch programs ask of a tensor ***


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_i0_forward_backward_across_both_series(dtype):
    # 30 is where the power series hands over to the asymptotic one: both sides, far out, and overflow
    x = np.array([0, 1e-3, 0.5, -2.3, 7.1, 15, 29.9, 30, 30.1, 45, -80, 85], dtype=dtype)
    check(lambda t: t.i0(), lambda t: t.i0(), [x], rtol=1e-12 if dtype == "float64" else 2e-6, grad_atol=1e-5)
    # far out in float64: I0(711) ~ 9.1e306 is finite; torch's overflows to inf from ~709 (it forms e^x first), so
    # mpmath is the reference there
    mpmath = pytest.importorskip("mpmath")
    big = np.array([700.0, 711.0, -712.0, 714.0], dtype="float64")
    want = np.array([float(mpmath.besseli(0, v)) if abs(v) < 714 else np.inf for v in big])
    np.testing.assert_allclose(Tensor(big).i0().numpy(), want, rtol=1e-12)
    assert Tensor(np.arange(3)).i0().dtype == dtypes.float32  # integers give the default float, as torch


@pytest.mark.parametrize("p", [1, 2, 3])
def test_mvlgamma(p):
    x = np.array([1.7, 2.0, 3.3, 9.0], dtype=np.float32)
    check(lambda t: t.mvlgamma(p), lambda t: t.mvlgamma(p), [x], rtol=1e-5)
    t = Tensor(x)
    t.mvlgamma_(p=p)
    assert_close(t, torch.tensor(x).mvlgamma(p), rtol=1e-5)
    with pytest.raises(RuntimeError):
        Tensor(x).mvlgamma(0)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_frexp_is_exact_for_every_kind_of_float(dtype):
    info = np.finfo(dtype)
    x = np.array(
        [8, 0.3, -0.0, 0.0, np.inf, -np.inf, np.nan, -5.5, info.max, info.tiny, info.tiny / 3]
        + [-info.smallest_subnormal],
        dtype=dtype,
    )
    m, e = Tensor(x).frexp()
    tm, te = torch.tensor(x).frexp()
    assert m.dtype == Tensor(x).dtype and e.dtype == dtypes.int32
    np.testing.assert_array_equal(m.numpy(), tm.numpy())
    np.testing.assert_array_equal(e.numpy(), te.numpy())
    assert Tensor(x).frexp().mantissa is not None  # torch's field names
    with pytest.raises(RuntimeError, match="floating-point"):
        Tensor([1, 2]).frexp()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nextafter_steps_one_float_towards_the_other(dtype):
    tiny = np.finfo(dtype).smallest_subnormal
    a = np.array([1, 0, -0.0, 1, np.nan, 3, -tiny, np.finfo(dtype).max, -2, tiny, 5], dtype=dtype)
    b = np.array([2, -1, 1, 1, 0, np.nan, 0, np.inf, -3, 0, -np.inf], dtype=dtype)
    out = Tensor(a).nextafter(Tensor(b))
    want = torch.tensor(a).nextafter(torch.tensor(b)).numpy()
    np.testing.assert_array_equal(out.numpy(), want)
    t = Tensor(a)
    t.nextafter_(Tensor(b))
    np.testing.assert_array_equal(t.numpy(), want)
    with pytest.raises(NotImplementedError):
        Tensor([1, 2]).nextafter(Tensor([3, 4]))


def test_hardshrink_and_prelu_forward_backward():
    x = randn(2, 3, 5)
    x[0, 0, :3] = [0.5, -0.5, 0.6]  # at and past the threshold
    check(lambda t: t.hardshrink(), lambda t: t.hardshrink(), [x])
    check(lambda t: t.hardshrink(0.9), lambda t: t.hardshrink(0.9), [x])
    for w in (np.array([0.25], np.float32), np.array([0.1, -0.2, 0.3], np.float32)):
        check(lambda t, v: t.prelu(v), lambda t, v: t.prelu(v), [x, w])
    check(lambda t, v: t.prelu(v), lambda t, v: t.prelu(v), [randn(7), np.array([0.3], np.float32)])
    with pytest.raises(RuntimeError, match="per channel"):
        Tensor(x).prelu(Tensor([0.1, 0.2]))
    with pytest.raises(NotImplementedError):
        Tensor([1, 2]).hardshrink()


def test_float_power_in_place_needs_a_float64_tensor():
    t = Tensor(np.array([1.5, 2.0, 3.0]))
    t.float_power_(2)
    np.testing.assert_array_equal(t.numpy(), [2.25, 4.0, 9.0])
    with pytest.raises(RuntimeError, match="float64"):
        Tensor([1.0, 2.0]).float_power_(2)


def test_post_accumulate_grad_hook_sees_the_accumulated_grad():
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
    (w * 2).sum().backward()
    (w * w).sum().backward()
    np.testing.assert_array_equal(seen[0], [2, 2, 2])
    np.testing.assert_array_equal(seen[1], [4, 6, 8])  # after accumulating into the first
    handle.remove()
    (w * 2).sum().backward()
    assert len(seen) == 2
    with pytest.raises(RuntimeError, match="leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError):
        Tensor([1.0]).register_post_accumulate_grad_hook(lambda p: None)


def test_an_optimizer_step_in_a_post_accumulate_hook():
    # torch's pattern for fusing the step into backward: each parameter is updated as soon as its gradient is in
    rng = np.random.default_rng(3)
    w0, x0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    results = []
    for lib in (Tensor, torch.tensor):
        w = lib(w0.copy(), requires_grad=True)
        x = lib(x0)

        def step(p):
            with torch.no_grad() if lib is torch.tensor else Tensor.no_grad():
                p.sub_(0.1 * p.grad)
            p.grad = None

        w.register_post_accumulate_grad_hook(step)
        for _ in range(3):
            (x @ w).tanh().sum().backward()
        results.append(w.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)


def test_type_names_and_casts_as_torch():
    for dt in ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]:
        x = np.zeros(2, dtype=dt)
        assert Tensor(x).type() == torch.tensor(x).type()
    assert Tensor([1, 2]).type("torch.DoubleTensor").dtype == dtypes.float64
    assert Tensor([1, 2]).type(dtypes.float16).dtype == dtypes.float16
    assert Tensor([1.5, 2]).type("int32").tolist() == [1, 2]
    with pytest.raises(RuntimeError, match="unknown"):
        Tensor([1]).type("torch.NoSuchTensor")


def test_grad_fn_names_the_op_and_is_none_for_leaves():
    y = Tensor([1.0, 2.0], requires_grad=True)
    ty = torch.tensor([1.0, 2.0], requires_grad=True)
    assert y.grad_fn is None and Tensor([1.0]).grad_fn is None and (Tensor([1.0]) * 2).grad_fn is None
    for fn in (lambda t: t * 2, lambda t: t + 1, lambda t: t.sum()):
        assert fn(y).grad_fn.name() == fn(ty).grad_fn.name()
    with Tensor.no_grad():
        assert (y * 2).grad_fn is None


def test_device_and_layout_questions():
    t = Tensor([1.0, 2.0])
    assert (t.is_cuda, t.get_device(), t.is_sparse, t.is_quantized, t.is_meta, t.is_nested) == (
        False,
        -1,
        False,
        False,
        False,
        False,
    )
    assert not t.is_inference() and not t.is_pinned() and t.pin_memory() is t


@pytest.mark.parametrize("n", [0, 1, 2, 3, 6])
def test_polygamma_against_mpmath_and_torch(n):
    mpmath = pytest.importorskip("mpmath")
    x = np.array([-7.3, -1.5, -0.3, 3e-3, 0.2, 0.5, 1.0, 7.5, 100.0], dtype=np.float64)
    want = np.array([float(mpmath.polygamma(n, v)) for v in x])
    np.testing.assert_allclose(Tensor(x).polygamma(n).numpy(), want, rtol=1e-11)
    far = np.array([-9.7, -20.25, -33.3])  # the reflection's side (at a half-integer it cancels to ~1e-11 absolute)
    want_far = np.array([float(mpmath.polygamma(n, v)) for v in far])
    np.testing.assert_allclose(Tensor(far).polygamma(n).numpy(), want_far, rtol=1e-9)
    # float32 against torch's, with its gradient (polygamma of n + 1)
    check(lambda t: t.polygamma(n), lambda t: t.polygamma(n), [x[1:-1].astype(np.float32)], rtol=1e-5, grad_atol=1e-3)
    poles = Tensor([-2.0, -1.0, 0.0]).polygamma(n).numpy()
    if n:  # the poles' sign is torch's: (-1)^(n+1) inf (n = 0 is digamma's NaN / -inf)
        np.testing.assert_array_equal(poles, [(-1) ** (n + 1) * np.inf] * 3)
    t = Tensor(x)
    t.polygamma_(n)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-11)
    with pytest.raises(RuntimeError):
        Tensor(x).polygamma(-1)


_SIGNED_ZERO_OPS = {
    "relu": (lambda t: t.relu(), torch.relu),
    "relu6": (lambda t: t.relu6(), torch.nn.functional.relu6),
    "hardtanh": (lambda t: t.hardtanh(), torch.nn.functional.hardtanh),
    "hardtanh(0, 6)": (lambda t: t.hardtanh(0.0, 6.0), lambda t: torch.nn.functional.hardtanh(t, 0.0, 6.0)),
    "hardtanh(-6, 0)": (lambda t: t.hardtanh(-6.0, 0.0), lambda t: torch.nn.functional.hardtanh(t, -6.0, 0.0)),
    "leaky_relu": (lambda t: t.leaky_relu(0.01), lambda t: torch.nn.functional.leaky_relu(t, 0.01)),
    "clamp(0, 1)": (lambda t: t.clamp(0, 1), lambda t: t.clamp(0, 1)),
    "clamp(-1, 0)": (lambda t: t.clamp(-1, 0), lambda t: t.clamp(-1, 0)),
    "elu": (lambda t: t.elu(), torch.nn.functional.elu),
    "celu": (lambda t: t.celu(), torch.nn.functional.celu),
    "selu": (lambda t: t.selu(), torch.nn.functional.selu),
    "hardswish": (lambda t: t.hardswish(), torch.nn.functional.hardswish),
    "softplus": (lambda t: t.softplus(), torch.nn.functional.softplus),
}


@pytest.mark.parametrize("name", list(_SIGNED_ZERO_OPS))
def test_activations_keep_torchs_sign_of_zero_and_gradient_at_the_edges(name):
    """Each value's sign as torch's (relu(-0.0) is -0.0: torch's relu is x < 0 ? 0 : x), NaN kept, and the gradient at
    0, -0.0, the bounds and NaN as torch's (relu's and hardtanh's is zero at 0 and at the bounds)."""
    ours_fn, torch_fn = _SIGNED_ZERO_OPS[name]
    xs = [-0.0, 0.0, -1.0, 1.0, -6.0, 6.0, -7.0, 7.0, 0.5, -0.5, float("nan")]
    x, tx = Tensor(xs, requires_grad=True), torch.tensor(xs, requires_grad=True)
    out, tout = ours_fn(x), torch_fn(tx)
    got, want = out.tolist(), tout.tolist()
    for v, w, at in zip(got, want, xs):
        assert (math.isnan(v), math.copysign(1, v)) == (math.isnan(w), math.copysign(1, w)), f"{name}({at}): {v} {w}"
        assert math.isnan(w) or v == pytest.approx(w, rel=1e-6, abs=1e-7), f"{name}({at}): {v}, torch {w}"
    (out * Tensor([float(i + 1) for i in range(len(xs))])).sum().backward()
    (tout * torch.arange(1.0, len(xs) + 1)).sum().backward()
    # (at NaN torch's gradient is what each backward kernel's masks happen to pass: compared where it is relu's)
    n = len(xs) if name in _GRAD_AT_NAN else len(xs) - 1
    np.testing.assert_allclose(x.grad.numpy()[:n], tx.grad.numpy()[:n], rtol=1e-6, atol=1e-7, err_msg=name)


# (hardtanh's and relu6's: 1 from torch's scalar loop, which takes these 11 elements, 0 from its vector kernel, which
# lazygrad follows: test_numerics_edges.test_nan_gradients_of_activations)
_GRAD_AT_NAN = {"relu", "leaky_relu", "softplus"}
