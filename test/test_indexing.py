"""Indexing against torch, forward and backward: basic and advanced __getitem__, __setitem__, gather / scatter,
masks, nonzero, tril / triu."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lazygrad import Tensor, dtypes
from lazygrad.helpers import GlobalCounters
from test.opcheck import check, randn

X = randn(4, 5, 6)


def index(x, ix):
    """x[ix] on both sides; torch has no negative slice steps, so there the positions come from numpy."""
    if not isinstance(x, torch.Tensor):
        return x[ix]
    ix = ix if isinstance(ix, tuple) else (ix,)
    if not any(isinstance(i, slice) and (i.step or 1) < 0 for i in ix):
        return x[tuple(torch.tensor(i) if isinstance(i, list) else i for i in ix)]
    positions = np.arange(x.numel()).reshape(tuple(x.shape))[ix]
    return x.flatten()[torch.from_numpy(positions.copy())]


BASIC = [
    (1,),
    (-1, 2),
    (slice(None, None, 2),),
    (slice(None, None, -1),),
    (slice(-2, None), slice(None, 1, -2)),
    (Ellipsis, 3),
    (None, 0, Ellipsis, None),
    (slice(1, 1),),
    (0, slice(4, 0, -3), slice(None, None, 5)),
]


def test_getitem_basic():
    def fn(x):
        return tuple(index(x, i) for i in BASIC)

    check(fn, fn, [X])


ADVANCED = [
    ([0, 2, 2],),  # repeated rows
    (slice(None), [4, -1, 0]),  # negative tensor index
    ([[0], [3]], slice(None), [1, 5]),  # broadcast index tensors around a slice: broadcast dims go first
    (slice(None), [[0, 1]], [[2], [3]]),  # adjacent: broadcast dims replace them in place
    (1, slice(None), [0, 1]),  # an int is applied first (torch's rule)
    ([0, 1], None, [1, 2]),  # None splits them: in front
    (Ellipsis, [5, 0]),
    (slice(1, None, 2), [[1, 2], [3, 4]], slice(None, None, -2)),
]


def test_getitem_advanced():
    def fn(x):
        return tuple(index(x, ix) for ix in ADVANCED)

    check(fn, fn, [X])


def test_getitem_index_tensor_forms():
    x = Tensor(X)
    idx_np = np.array([[3, 0], [1, 1]])
    ref = torch.from_numpy(X)[torch.from_numpy(idx_np)]
    for index in (idx_np, Tensor(idx_np), Tensor(idx_np.astype(np.int8))):
        np.testing.assert_array_equal(x[index].numpy(), ref.numpy())
    # a list of lists is a tuple of index lists, as tinygrad reads it (and torch before 2.9; numpy: one array)
    np.testing.assert_array_equal(x[idx_np.tolist()].numpy(), X[tuple(idx_np.tolist())])
    np.testing.assert_array_equal(x[[slice(None), [1, 3]]].numpy(), X[:, [1, 3]])
    np.testing.assert_array_equal(x[[Tensor([0, 2]), 1]].numpy(), X[[0, 2], 1])
    with pytest.raises(IndexError):  # torch's class for a float index (TypeError too, as before)
        x[0.0]
    with pytest.raises(TypeError, match="deleting"):
        del x[0]
    assert x[np.int64(2), np.int32(1)].shape == (6,)
    np.testing.assert_array_equal(x[range(1, 4, 2)].numpy(), X[1:4:2])
    assert x[[]].shape == (0, 5, 6)
    assert x[Tensor.zeros(0, 3, dtype=dtypes.int32)].shape == (0, 3, 5, 6)


def test_getitem_bool_mask():
    m = X[..., 0] > 0
    mi = X[:, :2, 0] > 0

    def fn(x):
        is_t = isinstance(x, torch.Tensor)
        mask, mask2 = (torch.from_numpy(m), torch.from_numpy(mi)) if is_t else (Tensor(m), Tensor(mi))
        row_mask = torch.tensor([True, False] * 3) if is_t else [True, False] * 3
        return x[mask], x[x > 0.5], x[1, :, row_mask], x[:, :2][mask2]

    check(fn, fn, [X])


def test_getitem_one_kernel_for_tensor_index():
    x = Tensor(randn(64)).realize()
    idx = Tensor([[1, 7], [0, -3]]).realize()
    GlobalCounters.reset()
    (x[idx] * 2).realize()
    assert GlobalCounters.kernel_count == 1  # compare, select and sum in one kernel: no index-dependent loop
    y = Tensor(randn(4, 9)).realize()
    GlobalCounters.reset()
    y.gather(1, Tensor([[0, -1], [8, 2], [1, 1], [3, 4]])).realize()
    assert GlobalCounters.kernel_count == 1


def test_getitem_errors():
    x = Tensor(X)
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        x[4]
    with pytest.raises(IndexError, match="index -7 is out of bounds for dimension 1 with size 5"):
        x[0, -7]
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 1 with size 5"):
        x[:, [0, 9]]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(IndexError, match="integer or bool"):
        x[Tensor([0.5])]
    with pytest.raises(IndexError, match="cannot be broadcast"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="mask of shape"):
        x[Tensor([True, False])]
    with pytest.raises(TypeError, match="invalid index"):
        x["a"]


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.data())
def test_getitem_random_basic(data):
    shape = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    index = []
    for s in shape:
        if s and data.draw(st.booleans()):
            index.append(data.draw(st.integers(-s, s - 1)))
        else:
            index.append(
                slice(
                    data.draw(st.none() | st.integers(-6, 6)),
                    data.draw(st.none() | st.integers(-6, 6)),
                    data.draw(st.sampled_from([None, 1, 2, 3, -1, -2])),
                )
            )
    np.testing.assert_array_equal(Tensor(x)[tuple(index)].numpy(), x[tuple(index)])


# *** __setitem__ ***

SETS = [
    ((1,), 7.0),
    ((slice(None), slice(None, None, 2)), "v"),
    ((slice(None, None, -2), 1, slice(1, 5, 3)), "v"),
    ((None, Ellipsis, -1), "v"),
    (([0, 3], slice(None), [5, 1]), "v"),
    (([[1], [2]], [0, 4]), "v"),
    ((slice(None), [0, 2]), 0.5),
]


@pytest.mark.parametrize("index,value", SETS)
def test_setitem(index, value):
    # numpy is the reference here: torch has no negative slice steps, and for these forms the two agree
    ref = X.copy()
    v = value if value != "v" else randn(*ref[index].shape, seed=3)
    ref[index] = v
    t = Tensor(X.copy()).realize()
    t[index] = v if value != "v" else Tensor(v)
    np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_mask_and_broadcast_and_dtype():
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    t, ref = Tensor(base.copy()), torch.from_numpy(base.copy())
    t[t > 6] = -1
    ref[ref > 6] = -1
    t[0] = Tensor([9, 8, 7, 6])  # int into an int row
    ref[0] = torch.tensor([9, 8, 7, 6])
    t[1:, [0, 3]] = Tensor([[5.7]])  # a float value is cast to the tensor's dtype; size-1 dims broadcast
    ref[1:, [0, 3]] = torch.tensor([[5.7]]).to(torch.int32)
    t[Tensor([False, True, True])] = Tensor([1, 2, 3, 4])
    ref[torch.tensor([False, True, True])] = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    np.testing.assert_array_equal(t.numpy(), ref.numpy())
    assert t.dtype == dtypes.int32


def test_setitem_in_place_on_buffer_and_lazy():
    a = Tensor(np.zeros((3, 3), np.float32)).realize()
    b = a.reshape(9)  # a view made before the writes sees them: they go into a's memory
    a[1, 1:] = 2.0
    a[:, 0] = Tensor([1.0, 2.0, 3.0])
    GlobalCounters.reset()
    a.realize()
    assert GlobalCounters.kernel_count == 2  # one in-place kernel per write, nothing else
    np.testing.assert_array_equal(b.numpy(), [1, 0, 0, 2, 2, 2, 3, 0, 0])
    c = Tensor(np.ones(4, np.float32)) * 2  # lazy: the write becomes part of its graph
    c[::2] = 0.0
    np.testing.assert_array_equal(c.numpy(), [0, 2, 0, 2])


def test_setitem_reads_itself_shifted():
    x = np.arange(6, dtype=np.float32)
    t = Tensor(x.copy()).realize()
    t[1:] = t[:-1]
    x[1:] = x[:-1].copy()
    np.testing.assert_array_equal(t.numpy(), x)


def test_setitem_augmented():
    t, ref = Tensor(np.arange(5, dtype=np.float32)).realize(), torch.arange(5, dtype=torch.float32)
    for r in (t, ref):
        r[1:] += 1
        r[[0, 2]] += 10
        r[r > 12] = 0
    np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_setitem_grad():
    def fn(x, v):
        y = x * 1 if isinstance(x, torch.Tensor) else x.clone()
        y = y * 1 if isinstance(x, torch.Tensor) else y
        y[1:, [0, 2]] = v
        return y * y

    check(fn, fn, [randn(3, 4), randn(2, 2, seed=2)])


def test_setitem_and_scatter_repeated_index_grad():
    def fn(x, v, src):
        i = torch.tensor([2, 0, 2]) if isinstance(x, torch.Tensor) else Tensor([2, 0, 2])
        y = x * 1
        y[i] = v
        return (y * 3).sum() + (x * 1).scatter(1, i.reshape(1, 3).expand(3, 3), src).sum()

    # the value landing at a repeated index is unspecified in torch; every write gets the gradient in both
    inputs = [randn(3, 4), randn(3, 4, seed=1), randn(3, 3, seed=2)]
    t_in = [torch.tensor(a, requires_grad=True) for a in inputs]
    fn(*t_in).backward()
    leaves = [Tensor(a, requires_grad=True) for a in inputs]
    for g, t in zip(fn(*leaves).gradient(*leaves), t_in):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), atol=1e-6)


def test_setitem_errors():
    t = Tensor(np.zeros((3, 4), np.float32)).realize()
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        t[0] = Tensor([1.0, 2.0])
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        t[5] = 1.0
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        t[[0, 1], [-5, 0]] = 1.0
    with pytest.raises(IndexError, match="integer or bool"):
        t[Tensor([0.0])] = 1.0
    with pytest.raises(RuntimeError, match="more than one element"):
        t[0].expand(2, 4)[...] = 1.0  # a whole expanded view cannot be written (torch refuses too)
    # a write into a view lands in the memory it shows, as in torch
    t[1:][0] = 1.0
    t.T[0] = 3.0
    t.reshape(12)[-1] = 4.0
    t.detach()[0, 1] = 5.0
    np.testing.assert_array_equal(t.numpy(), [[3, 5, 0, 0], [3, 1, 1, 1], [3, 0, 0, 4]])


def test_setitem_empty_and_0d():
    t, ref = Tensor(X.copy()).realize(), torch.from_numpy(X.copy())
    for r in (t, ref):
        r[r[0, 0, :0].long() if isinstance(r, torch.Tensor) else Tensor.zeros(0, dtype=dtypes.int64)] = 1.0
        r[2:2] = 5.0
        r[1, 2, 3] = -1.0
    np.testing.assert_array_equal(t.numpy(), ref.numpy())
    s = Tensor(np.array(3.0, np.float32)).realize()
    s[...] = 5.0
    assert s.item() == 5.0


# *** gather, scatter, masks ***


def test_gather():
    idx = np.array([[0, 4, 4], [2, 1, -1]])
    idx0 = np.array([[1, 0, 2, 2, 0]])

    def fn(x):
        if isinstance(x, torch.Tensor):
            return x.gather(1, torch.from_numpy(idx % 5)), x.gather(0, torch.from_numpy(idx0))
        return x.gather(1, Tensor(idx)), x.gather(0, Tensor(idx0))

    check(fn, fn, [randn(3, 5)])


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    idx = np.array([[0, 1, 0, 3], [2, 2, 2, 0]])

    def fn(x, src):
        i = torch.from_numpy(idx) if isinstance(x, torch.Tensor) else Tensor(idx)
        return x.scatter_reduce(1, i, src, reduce, include_self=include_self)

    check(fn, fn, [randn(3, 5), randn(2, 4, seed=4)])


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_ties_grad(reduce):
    # tied maxima (self included) share the gradient evenly, as torch's. Without self, torch still counts a self
    # equal to the result among the ties (and then drops its share): self stays apart from the ties there
    idx = np.array([[0, 1, 1], [2, 2, 0]])

    def fn(x, src):
        i = torch.from_numpy(idx) if isinstance(x, torch.Tensor) else Tensor(idx)
        apart = x - 5 if reduce == "amax" else x + 5
        return x.scatter_reduce(1, i, src, reduce), apart.scatter_reduce(1, i, src, reduce, include_self=False)

    check(fn, fn, [np.ones((2, 3), np.float32), np.array([[1, 1, 1], [1, 1, 0]], np.float32)])


@pytest.mark.filterwarnings("ignore:The reduce argument")
def test_scatter():
    idx = np.array([[0, 1, 4], [2, 3, 1]])

    def fn(x, src):
        i = torch.from_numpy(idx) if isinstance(x, torch.Tensor) else Tensor(idx)
        return x.scatter(1, i, src), x.scatter(0, i[:, :2] % 2, 2.5), x.scatter_add(1, i, src)

    def legacy(x, src):
        i = torch.from_numpy(idx) if isinstance(x, torch.Tensor) else Tensor(idx)
        return x.scatter(1, i, src, reduce="add"), x.scatter(1, i, src, reduce="multiply")

    check(fn, fn, [randn(2, 5), randn(2, 3, seed=5)])
    check(legacy, legacy, [randn(2, 5), randn(2, 3, seed=5)], grad=False)


def test_gather_scatter_errors():
    x = Tensor(randn(3, 4))
    with pytest.raises(TypeError, match="integer tensor"):
        x.gather(0, Tensor([[0.0]]))
    with pytest.raises(ValueError, match="as many dims"):
        x.gather(0, Tensor([0]))
    with pytest.raises(ValueError, match="reduce must be"):
        x.scatter_reduce(0, Tensor([[0]]), 1.0, "median")


def test_masked_fill_select_nonzero():
    m = X > 0.3

    def fn(x):
        mask = torch.from_numpy(m) if isinstance(x, torch.Tensor) else Tensor(m)
        return x.masked_fill(mask, -2.0), x.masked_select(mask), x[:, 0].masked_select(mask[0, 0])

    check(fn, fn, [X])
    for a in (np.array([[0, 3, 0], [1, 0, 7]]), np.zeros((2, 0)), np.array(5), np.array([0.0, -0.0, np.nan, 1e-30])):
        t, r = Tensor(a), torch.from_numpy(a)
        np.testing.assert_array_equal(t.nonzero().numpy(), r.nonzero().numpy())
        assert t.nonzero().dtype == dtypes.default_int
    rows, cols = Tensor([[0, 1], [1, 0]]).nonzero(as_tuple=True)
    assert rows.tolist() == [0, 1] and cols.tolist() == [1, 0]


@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 3), (1, 1), (0, 3)])
def test_tril_triu(shape):
    def fn(x):
        return x.tril(), x.triu(), x.tril(-1), x.triu(2), x.tril(10)

    check(fn, fn, [randn(*shape)])
    b = np.ones((3, 3), bool)
    np.testing.assert_array_equal(Tensor(b).triu(1).numpy(), np.triu(b, 1))


def test_index_select():
    def fn(x):
        i = torch.tensor([2, 0, 2]) if isinstance(x, torch.Tensor) else Tensor([2, 0, 2])
        return x.index_select(1, i), x.index_select(0, i[:1])

    check(fn, fn, [randn(3, 4)])


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.data())
def test_getitem_random_advanced(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    index, tindex = [], []
    ishape = data.draw(st.sampled_from([(2,), (1, 3), (2, 1)]))  # one shape per example: they must broadcast
    for s in shape:
        kind = data.draw(st.sampled_from(["slice", "array", "none"]))
        if kind == "array":
            n = int(np.prod(ishape))
            arr = np.array(data.draw(st.lists(st.integers(-s, s - 1), min_size=n, max_size=n))).reshape(ishape)
            index.append(arr)
            tindex.append(torch.from_numpy(arr))
        elif kind == "none":
            index.extend([None, slice(None)])
            tindex.extend([None, slice(None)])
        else:
            sl = slice(data.draw(st.none() | st.integers(0, s)), None, data.draw(st.sampled_from([None, 2])))
            index.append(sl)
            tindex.append(sl)
    ref = torch.from_numpy(x)[tuple(tindex)]
    np.testing.assert_array_equal(Tensor(x)[tuple(index)].numpy(), ref.numpy())


def test_getitem_edge_sizes():
    def fn(x):
        i0 = torch.tensor([], dtype=torch.int64) if isinstance(x, torch.Tensor) else Tensor([], dtype=dtypes.int64)
        i1 = torch.tensor([6]) if isinstance(x, torch.Tensor) else Tensor([6])
        return x[i0], x[:, i1], x[2:2, [0, 1]], x[-1:, [-7]]

    check(fn, fn, [randn(3, 7)])
    empty = Tensor(np.zeros((0, 4), np.float32))
    assert empty[:, [1, 2]].shape == (0, 2) and empty[empty > 0].shape == (0,)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.data())
def test_setitem_random_basic(data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    index = []
    for s in shape:
        if data.draw(st.booleans()):
            index.append(data.draw(st.integers(-s, s - 1)))
        else:
            index.append(
                slice(
                    data.draw(st.none() | st.integers(-6, 6)),
                    data.draw(st.none() | st.integers(-6, 6)),
                    data.draw(st.sampled_from([None, 2, 3, -1, -2])),
                )
            )
    ref = x.copy()
    value = -np.arange(ref[tuple(index)].size, dtype=np.int32).reshape(ref[tuple(index)].shape) - 1
    ref[tuple(index)] = value
    t = Tensor(x.copy()).realize()
    t[tuple(index)] = Tensor(value) if value.size else 0
    np.testing.assert_array_equal(t.numpy(), ref)


@pytest.mark.parametrize("dtype", ["float16", "int8", "int64", "bool", "uint8"])
def test_indexing_dtypes(dtype):
    x = (np.arange(24).reshape(4, 6) % 5).astype(dtype)
    idx = np.array([[3, 0], [1, 1]], dtype=np.uint8)

    def fn(t):
        i = torch.from_numpy(idx.astype(np.int64)) if isinstance(t, torch.Tensor) else Tensor(idx)
        nonzero = t != 0
        return t[i], t[:, i[0]], t.gather(1, i), t[nonzero], t.tril(1), t.masked_select(nonzero)

    check(fn, fn, [x], grad=False)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.data())
def test_gather_scatter_random(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dim = data.draw(st.integers(0, len(shape) - 1))
    ishape = tuple(data.draw(st.integers(1, s if d != dim else 5)) for d, s in enumerate(shape))
    rng = np.random.default_rng(len(shape) * 10 + dim)
    x = rng.standard_normal(shape).astype(np.float32)
    idx = rng.integers(0, shape[dim], size=ishape)
    tx, ti = torch.from_numpy(x), torch.from_numpy(idx)
    np.testing.assert_array_equal(Tensor(x).gather(dim, Tensor(idx)).numpy(), tx.gather(dim, ti).numpy())
    src = rng.standard_normal(ishape).astype(np.float32)
    ref = tx.scatter_reduce(dim, ti, torch.from_numpy(src), "sum")
    out = Tensor(x).scatter_reduce(dim, Tensor(idx), Tensor(src), "sum")
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-6)


def test_out_of_range_list_index_beside_an_empty_slice_reads_nothing_as_torch():
    a = np.arange(2, dtype=np.float32).reshape(1, 2, 1)
    want = torch.from_numpy(a)[None, [1], 0:0]
    got = Tensor(a)[None, [1], 0:0]
    assert got.shape == tuple(want.shape) and got.numpy().size == 0
    with pytest.raises(IndexError, match="out of bounds"):
        Tensor(a)[None, [1], 0:1]
