"""End-to-end: movement ops and basic indexing against numpy, and that views never launch kernels by themselves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazygrad import GlobalCounters, Tensor
from test.helpers import assert_close


def arange(*shape: int, dtype: str = "float32") -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def check(lg_fn, np_fn, shape: tuple[int, ...] = (2, 3, 4), dtype: str = "float32") -> None:
    """The view computed by lazygrad (then +1, so a kernel reads it) equals numpy's."""
    x = arange(*shape, dtype=dtype)
    assert_close(lg_fn(Tensor(x)) + 1, np_fn(x) + np.array(1, dtype=dtype))


# *** reshape and friends ***


@pytest.mark.parametrize(
    "shape,new",
    [
        ((2, 3, 4), (6, 4)),
        ((2, 3, 4), (24,)),
        ((2, 3, 4), (4, -1)),
        ((2, 3, 4), (-1,)),
        ((2, 3, 4), (1, 2, 1, 12, 1)),
        ((), (1, 1)),
        ((1,), ()),
        ((0, 3), (3, 0, 1)),
        ((0, 3), (-1, 3)),
    ],
)
def test_reshape(shape, new):
    check(lambda t: t.reshape(new), lambda x: x.reshape(new), shape)


def test_reshape_varargs_and_view():
    check(lambda t: t.reshape(4, 6), lambda x: x.reshape(4, 6))
    check(lambda t: t.view(3, -1), lambda x: x.reshape(3, -1))


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (-1, 0, 1)])
def test_permute(order):
    check(lambda t: t.permute(order), lambda x: x.transpose(order))


def test_transpose_and_T():
    check(lambda t: t.transpose(0, 2), lambda x: x.swapaxes(0, 2))
    check(lambda t: t.transpose(-1, -2), lambda x: x.swapaxes(-1, -2))
    check(lambda t: t.T, lambda x: x.T)
    check(lambda t: t.T, lambda x: x.T, (5,))
    check(lambda t: t.T, lambda x: x.T, ())


@pytest.mark.parametrize(
    "shape,new",
    [((1,), (5,)), ((3, 1), (3, 4)), ((3, 1), (2, 3, 4)), ((1, 4), (-1, 3, 4)), ((), (2, 2)), ((2, 1, 3), (2, 0, 3))],
)
def test_expand(shape, new):
    target = tuple(s if n == -1 else n for s, n in zip((1,) * (len(new) - len(shape)) + shape, new))
    check(lambda t: t.expand(new), lambda x: np.broadcast_to(x, target), shape)


def test_expand_as():
    y = Tensor.zeros(4, 3, 5)
    check(lambda t: t.expand_as(y), lambda x: np.broadcast_to(x, (4, 3, 5)), (3, 1))


@pytest.mark.parametrize(
    "pad",
    [
        ((1, 2), (0, 0), (3, 1)),
        ((0, 0), None, (1, 0)),
        (1, 2),  # torch style: last dim first
        (1, 2, 0, 3),
        (1, 1, 1, 1, 1, 1),
        ((-1, 1), (0, -2), (2, -1)),  # negative pads crop
        (-1, -1),
    ],
)
@pytest.mark.parametrize("value", [0.0, -2.5])
def test_pad(pad, value):
    x = arange(2, 3, 4)
    if all(isinstance(p, int) for p in pad):
        pairs = [(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)][::-1]
        per_dim = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    else:
        per_dim = [(0, 0) if p is None else p for p in pad]
    crop = tuple(slice(-min(lo, 0), x.shape[d] + min(hi, 0)) for d, (lo, hi) in enumerate(per_dim))
    ref = np.pad(x[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in per_dim], constant_values=value)
    assert_close(Tensor(x).pad(pad, value=value) + 1, ref + 1)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "float16"])
def test_pad_dtypes(dtype):
    x = (arange(3, 4) % 5).astype(dtype)
    value = True if dtype == "bool" else 7
    assert_close(Tensor(x).pad(((1, 0), (2, 1)), value=value), np.pad(x, ((1, 0), (2, 1)), constant_values=value))


@pytest.mark.parametrize(
    "arg", [((0, 2), (1, 3), (0, 4)), ((1, 2), None, (3, 4)), ((0, 0), None, None), ((0, 2), (0, 3), (2, 2))]
)
def test_shrink(arg):
    sl = tuple(slice(None) if a is None else slice(*a) for a in arg)
    check(lambda t: t.shrink(arg), lambda x: x[sl])


@pytest.mark.parametrize("axis", [0, -1, (0, 2), (0, 1, 2), (1,)])
def test_flip(axis):
    check(lambda t: t.flip(axis), lambda x: np.flip(x, axis))


def test_flatten_unflatten():
    check(lambda t: t.flatten(), lambda x: x.reshape(-1))
    check(lambda t: t.flatten(1), lambda x: x.reshape(2, 12))
    check(lambda t: t.flatten(0, 1), lambda x: x.reshape(6, 4))
    check(lambda t: t.flatten(), lambda x: x.reshape(1), ())
    check(lambda t: t.unflatten(2, (2, 2)), lambda x: x.reshape(2, 3, 2, 2))
    check(lambda t: t.unflatten(-2, (3, 1)), lambda x: x.reshape(2, 3, 1, 4))


def test_squeeze_unsqueeze():
    shape = (1, 3, 1, 4)
    check(lambda t: t.squeeze(), lambda x: x.squeeze(), shape)
    check(lambda t: t.squeeze(0), lambda x: x.squeeze(0), shape)
    check(lambda t: t.squeeze(-2), lambda x: x.squeeze(-2), shape)
    check(lambda t: t.squeeze(1), lambda x: x, shape)  # squeezing a non-1 dim is a no-op, as in torch
    check(lambda t: t.squeeze((0, 2)), lambda x: x.squeeze((0, 2)), shape)
    check(lambda t: t.unsqueeze(0), lambda x: np.expand_dims(x, 0), shape)
    check(lambda t: t.unsqueeze(-1), lambda x: np.expand_dims(x, -1), shape)
    check(lambda t: t.unsqueeze(2), lambda x: np.expand_dims(x, 2), shape)
    check(lambda t: t.unsqueeze(0), lambda x: np.expand_dims(x, 0), ())


@pytest.mark.parametrize("reps", [(2, 1, 1), (1, 3, 2), (2, 2, 2, 2), (1, 0, 1)])
def test_repeat(reps):
    check(lambda t: t.repeat(reps), lambda x: np.tile(x, reps), (2, 3, 1))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack(dim):
    a, b, c = arange(2, 3, 4), arange(2, 3, 4) * 2, arange(2, 3, 4) - 5
    assert_close(Tensor(a).cat(Tensor(b), Tensor(c), dim=dim), np.concatenate([a, b, c], dim))
    assert_close(Tensor(a).stack(Tensor(b), Tensor(c), dim=dim), np.stack([a, b, c], dim))


def test_cat_uneven_and_empty():
    a, b, e = arange(2, 3), arange(2, 5) + 100, arange(2, 0)
    assert_close(Tensor(a).cat(Tensor(e), Tensor(b), dim=1), np.concatenate([a, e, b], 1))
    assert_close(Tensor(a).cat(Tensor(a).T.T, dim=0), np.concatenate([a, a], 0))


def test_cat_ints_and_bools():
    a, b = arange(2, 3, dtype="int32"), -arange(1, 3, dtype="int32")
    assert_close(Tensor(a).cat(Tensor(b)), np.concatenate([a, b]))
    p, q = a % 2 == 0, b % 3 == 0
    assert_close(Tensor(p).cat(Tensor(q)), np.concatenate([p, q]))


# *** indexing ***

INDICES = [
    1,
    -1,
    (1, 2),
    (-2, -1, -4),
    slice(None),
    slice(1, None),
    (slice(None), slice(0, 2)),
    (slice(None, None, 2),),
    (slice(None), slice(None, None, -1)),
    (slice(None, None, -2), slice(2, 0, -1), slice(None, None, 3)),
    (slice(-3, -1), slice(None), slice(-1, -5, -2)),
    (slice(5, 10),),  # past the end: empty
    (slice(1, 1),),
    (slice(3, 0, 1),),
    (None,),
    (None, 1, None, slice(None, None, -1)),
    (Ellipsis, 0),
    (0, Ellipsis),
    (Ellipsis, None, slice(1, 3)),
    (slice(None), Ellipsis, None),
    (1, Ellipsis, 2, None),
    (slice(None, None, 5), slice(None, None, 4), slice(None, None, 7)),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_getitem(index):
    check(lambda t: t[index], lambda x: x[index], (3, 4, 5))


@pytest.mark.parametrize("index", [0, -1, slice(None, None, -1), (None, Ellipsis)], ids=repr)
def test_getitem_1d_and_0d(index):
    check(lambda t: t[index], lambda x: x[index], (6,))
    if index == (None, Ellipsis):
        check(lambda t: t[index], lambda x: x[index], ())


def test_getitem_chained():
    check(lambda t: t[1:][::-1][:, 1:3][..., ::2], lambda x: x[1:][::-1][:, 1:3][..., ::2], (4, 5, 6))


# *** random chains of movement ops, against numpy ***


@st.composite
def movement_chain(draw):
    """A start shape and a list of (op, arg), each valid for the shape it sees."""
    start = shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip", "slice"]))
        if kind == "reshape":
            n = int(np.prod(shape))
            factors = [d for d in range(1, n + 1) if n % d == 0]
            first = draw(st.sampled_from(factors))
            rest = n // first
            second = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
            new = tuple(s for s in (first, second, rest // second) if draw(st.booleans()) or s != 1) or (1,)
            ops.append(("reshape", new))
            shape = new
        elif kind == "permute":
            order = tuple(draw(st.permutations(range(len(shape)))))
            ops.append(("permute", order))
            shape = tuple(shape[i] for i in order)
        elif kind == "expand":
            ones = [i for i, s in enumerate(shape) if s == 1]
            if not ones:
                continue
            d = draw(st.sampled_from(ones))
            new = tuple(draw(st.integers(2, 3)) if i == d else s for i, s in enumerate(shape))
            ops.append(("expand", new))
            shape = new
        elif kind == "pad":
            pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
            ops.append(("pad", pads))
            shape = tuple(s + lo + hi for s, (lo, hi) in zip(shape, pads))
        elif kind == "shrink":
            bounds = []
            for s in shape:
                lo = draw(st.integers(0, s - 1))
                bounds.append((lo, draw(st.integers(lo + 1, s))))
            ops.append(("shrink", tuple(bounds)))
            shape = tuple(hi - lo for lo, hi in bounds)
        elif kind == "flip":
            axes = tuple(i for i in range(len(shape)) if draw(st.booleans()))
            if not axes:
                continue
            ops.append(("flip", axes))
        else:
            d = draw(st.integers(0, len(shape) - 1))
            step = draw(st.sampled_from([2, 3, -1, -2]))
            begin = draw(st.integers(-shape[d], shape[d] - 1))
            ops.append(("slice", (d, begin, step)))
            shape = np.empty(shape)[(slice(None),) * d + (slice(begin, None, step),)].shape
        if int(np.prod(shape)) > 4096:
            break
    return start, ops


def apply_chain(x, ops, is_tensor: bool):
    for op, arg in ops:
        if op == "reshape":
            x = x.reshape(arg)
        elif op == "permute":
            x = x.permute(arg) if is_tensor else x.transpose(arg)
        elif op == "expand":
            x = x.expand(arg) if is_tensor else np.broadcast_to(x, arg)
        elif op == "pad":
            x = x.pad(arg, value=-1.0) if is_tensor else np.pad(x, arg, constant_values=-1.0)
        elif op == "shrink":
            x = x.shrink(arg) if is_tensor else x[tuple(slice(lo, hi) for lo, hi in arg)]
        elif op == "flip":
            x = x.flip(arg) if is_tensor else np.flip(x, arg)
        else:
            d, begin, step = arg
            x = x[(slice(None),) * d + (slice(begin, None, step),)]
    return x


@settings(max_examples=100, deadline=None)
@given(chain=movement_chain())
def test_random_movement_chain(chain):
    start, ops = chain
    x = arange(*start)
    assert_close(apply_chain(Tensor(x), ops, True) + 1, apply_chain(x, ops, False) + 1)


# *** views are free: no kernel until something computes ***


def test_movement_launches_no_kernel():
    x = Tensor(arange(4, 6)).realize()
    GlobalCounters.reset()
    y = x.T.reshape(2, 12)[1:].pad(((1, 1), (0, 0))).flip(1).expand(2, 3, 12)[:, ::2].permute(2, 0, 1)
    assert GlobalCounters.kernel_count == 0
    (y + 1).realize()
    assert GlobalCounters.kernel_count == 1
    GlobalCounters.reset()
    (x.T.reshape(3, 8)[1:] + 1).realize()
    assert GlobalCounters.kernel_count == 1


def test_realized_view_reads_without_copy_kernel():
    x = Tensor(arange(4, 6)).realize()
    GlobalCounters.reset()
    np.testing.assert_array_equal(x[1:3, ::2].numpy(), arange(4, 6)[1:3, ::2])
    assert GlobalCounters.kernel_count <= 1
