"""torch's functions of several tensors and of structure as Tensor methods (torch.hstack -> Tensor.hstack, ...):
values and gradients against torch, the tensors given as one sequence or as arguments, edge sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad import Tensor, dtypes
from test.opcheck import check, randn


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack", "column_stack", "row_stack"])
@pytest.mark.parametrize("shapes", [[(3,), (4,)], [(2, 3), (2, 3)], [(), ()], [(2, 3, 1), (2, 3, 2)]])
def test_stacks_match_torch(name: str, shapes: list[tuple[int, ...]]) -> None:
    arrays = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    try:
        want = getattr(torch, name)([torch.tensor(a) for a in arrays])
    except RuntimeError:
        with pytest.raises(RuntimeError):
            getattr(Tensor, name)([Tensor(a) for a in arrays])
        return
    check(lambda *ts: getattr(Tensor, name)(list(ts)), lambda *ts: getattr(torch, name)(list(ts)), arrays)
    np.testing.assert_allclose(getattr(Tensor(arrays[0]), name)(*[Tensor(a) for a in arrays[1:]]).numpy(), want)


def test_atleast_and_broadcasting_match_torch() -> None:
    for shape in [(), (3,), (2, 3), (2, 3, 4)]:
        x = randn(*shape)
        for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
            assert getattr(Tensor(x), name)().shape == tuple(getattr(torch, name)(torch.tensor(x)).shape)
    shapes = [(3, 1), (1, 4), (4,)]
    arrays = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    ours = Tensor.broadcast_tensors([Tensor(a) for a in arrays])
    for a, b in zip(ours, torch.broadcast_tensors(*[torch.tensor(a) for a in arrays])):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert Tensor.broadcast_shapes((2, 1), (3,), 1) == tuple(torch.broadcast_shapes((2, 1), (3,), 1))
    with pytest.raises(RuntimeError, match="broadcast"):
        Tensor.broadcast_shapes((2,), (3,))


def test_block_diag_cartesian_prod_combinations_match_torch() -> None:
    arrays = [randn(2, 3), randn(3, seed=1), randn(1, 1, seed=2)]
    check(lambda *ts: Tensor.block_diag(*ts), lambda *ts: torch.block_diag(*ts), arrays)
    vecs = [randn(3), randn(2, seed=1), randn(2, seed=2)]
    check(lambda *ts: Tensor.cartesian_prod(list(ts)), lambda *ts: torch.cartesian_prod(*ts), vecs)
    for r, repl in [(2, False), (3, False), (2, True), (5, False)]:
        check(
            lambda t: t.combinations(r, with_replacement=repl),
            lambda t: torch.combinations(t, r, with_replacement=repl),
            [randn(4)],
        )


@pytest.mark.parametrize(
    "a, b, dims",
    [((3, 4, 5), (4, 5, 2), 2), ((3, 4), (4, 2), 1), ((2, 3, 4), (4, 3, 5), ([1, 2], [1, 0])), ((3,), (2,), 0)],
)
def test_tensordot_matches_torch(a: tuple, b: tuple, dims) -> None:
    check(lambda x, y: x.tensordot(y, dims), lambda x, y: torch.tensordot(x, y, dims), [randn(*a), randn(*b, seed=1)])


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.0, float("inf")])
def test_cdist_matches_torch_with_zero_distances(p: float) -> None:
    x1, x2 = randn(2, 4, 3), randn(2, 5, 3, seed=1)
    x2[:, 1] = x1[:, 2]  # a zero distance: the gradient there is 0, as torch's
    check(
        lambda a, b: a.cdist(b, p),
        lambda a, b: torch.cdist(a, b, p, compute_mode="donot_use_mm_for_euclid_dist"),
        [x1, x2],
        grad=p != 0,
        atol=1e-5,
    )


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_and_bucketize_match_torch(right: bool) -> None:
    seq = np.sort(np.random.default_rng(0).integers(0, 10, 12)).astype(np.float32)
    values = np.arange(-1, 12, 0.5, dtype=np.float32).reshape(2, -1)
    want = torch.searchsorted(torch.tensor(seq), torch.tensor(values), right=right)
    got = Tensor(seq).searchsorted(Tensor(values), right=right)
    assert got.dtype == dtypes.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    rows = np.sort(randn(3, 6), axis=-1)
    vals = randn(3, 4, seed=1)
    side = "right" if right else "left"
    np.testing.assert_array_equal(
        Tensor(rows).searchsorted(Tensor(vals), side=side, out_int32=True).numpy(),
        torch.searchsorted(torch.tensor(rows), torch.tensor(vals), side=side, out_int32=True).numpy(),
    )
    np.testing.assert_array_equal(
        Tensor(values).bucketize(Tensor(seq), right=right).numpy(),
        torch.bucketize(torch.tensor(values), torch.tensor(seq), right=right).numpy(),
    )


def test_isin_indices_unravel_logspace_vander_match_torch() -> None:
    x = np.random.default_rng(0).integers(0, 8, (3, 5))
    for invert in (False, True):
        np.testing.assert_array_equal(
            Tensor(x).isin([1, 4, 7], invert=invert).numpy(),
            torch.isin(torch.tensor(x), torch.tensor([1, 4, 7]), invert=invert).numpy(),
        )
    for args in [(4, 5), (4, 5, 1), (3, 3, -1), (5, 2, 2), (0, 3)]:
        np.testing.assert_array_equal(Tensor.tril_indices(*args).numpy(), torch.tril_indices(*args).numpy())
        np.testing.assert_array_equal(Tensor.triu_indices(*args).numpy(), torch.triu_indices(*args).numpy())
    idx = np.array([0, 5, 23, -1, 17])
    for a, b in zip(Tensor.unravel_index(Tensor(idx), (2, 3, 4)), torch.unravel_index(torch.tensor(idx), (2, 3, 4))):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(Tensor.logspace(-2, 3, 11).numpy(), torch.logspace(-2, 3, 11).numpy(), rtol=1e-6)
    np.testing.assert_allclose(
        Tensor.logspace(0, 4, 5, base=2.0, dtype=dtypes.float64).numpy(), torch.logspace(0, 4, 5, base=2.0)
    )
    check(lambda t: t.vander(), lambda t: torch.vander(t), [randn(4)], grad=False)
    check(lambda t: t.vander(3, increasing=True), lambda t: torch.vander(t, 3, increasing=True), [randn(5)], grad=False)
    # (torch's own vander has no gradient: an in-place write breaks its backward) the gradient of the same powers
    check(lambda t: t.vander(3), lambda t: t.unsqueeze(1) ** torch.tensor([2.0, 1.0, 0.0]), [randn(5)])


def test_trapezoid_and_rsub_match_torch() -> None:
    y, x = randn(3, 6), np.sort(randn(6, seed=1))
    check(lambda t: t.trapezoid(), lambda t: torch.trapezoid(t), [y])
    check(lambda t: t.trapezoid(dx=0.5, dim=0), lambda t: torch.trapezoid(t, dx=0.5, dim=0), [y])
    check(lambda t, s: t.trapezoid(s), lambda t, s: torch.trapezoid(t, s), [y, x])
    check(lambda t: t.cumulative_trapezoid(), lambda t: torch.cumulative_trapezoid(t), [y])
    check(lambda t, s: t.cumulative_trapezoid(s), lambda t, s: torch.cumulative_trapezoid(t, s), [y, x])
    check(lambda t, s: t.rsub(s, alpha=2), lambda t, s: torch.rsub(t, s, alpha=2), [y, randn(3, 6, seed=4)])


def test_grad_mode_switches_nest_as_torchs() -> None:
    w = Tensor.ones(2, requires_grad=True)
    with Tensor.no_grad():
        with Tensor.enable_grad():
            inner = (w * 2).sum()
            assert Tensor.is_grad_enabled()
        outer = (w * 2).sum()
        assert not Tensor.is_grad_enabled()
    assert inner.requires_grad and not outer.requires_grad and Tensor.is_grad_enabled()
    inner.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2, 2])
    with Tensor.set_grad_enabled(False):
        assert not Tensor.is_grad_enabled()
    assert Tensor.is_grad_enabled()
    Tensor.set_grad_enabled(False)  # a call alone switches this thread's mode
    try:
        assert not Tensor.is_grad_enabled()
    finally:
        Tensor.set_grad_enabled(True)
    with Tensor.inference_mode():
        assert not (w * 3).requires_grad

    @Tensor.enable_grad
    def grads_on() -> bool:
        return Tensor.is_grad_enabled()

    with Tensor.no_grad():
        assert grads_on()


@pytest.fixture
def rng_kept():
    """The random state as it was before the test (other tests of the worker draw on)."""
    state = Tensor.get_rng_state()
    yield
    Tensor.set_rng_state(state)


def test_rng_state_round_trip_and_64_bit_seeds(rng_kept) -> None:
    Tensor.manual_seed(2**40 + 5)
    high = Tensor.rand(8).numpy()
    Tensor.manual_seed(5)
    low = Tensor.rand(8).numpy()
    assert not np.array_equal(high, low)  # seeds equal in their low 32 bits draw different numbers
    Tensor.manual_seed(2**64 - 1)
    state = Tensor.get_rng_state()
    first = Tensor.rand(5).numpy()
    Tensor.set_rng_state(state)
    np.testing.assert_array_equal(Tensor.rand(5).numpy(), first)
    assert Tensor.initial_seed() == 2**64 - 1
    with pytest.raises(RuntimeError, match="64-bit"):
        Tensor.manual_seed(2**64)
    fresh = Tensor.seed()
    assert Tensor.initial_seed() == fresh


def test_data_is_torchs_alias_and_tinygrads_bytes() -> None:
    w = Tensor.ones(2, 3, requires_grad=True)
    w.data.mul_(3)  # writes w's memory, records nothing
    np.testing.assert_array_equal(w.numpy(), np.full((2, 3), 3, np.float32))
    w.data.copy_(Tensor.arange(6).reshape(2, 3))
    assert w.tolist() == [[0, 1, 2], [3, 4, 5]] and w.requires_grad and not w.data.requires_grad
    w.data = Tensor.full((2, 3), 7.0)
    assert w.tolist() == [[7] * 3] * 2
    (w * 2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 2, np.float32))
    assert bytes(Tensor([1.0, 2.0]).data()) == np.array([1.0, 2.0], np.float32).tobytes()  # tinygrad's call
    with pytest.raises(RuntimeError, match="shape and dtype"):
        w.data = Tensor.ones(3)


def test_to_takes_torchs_forms() -> None:
    x = Tensor([1, 2])
    assert x.to(dtypes.float32).dtype == dtypes.float32 and x.to("float16").dtype == dtypes.float16
    assert x.to("CPU", dtypes.float64).dtype == dtypes.float64 and x.to(dtype=dtypes.int8).dtype == dtypes.int8
    other = Tensor([0.5])
    assert x.to(other).dtype == other.dtype and x.to(other).tolist() == [1.0, 2.0]
    assert x.to("cpu", non_blocking=True) is x and x.to(dtypes.int32) is x
    copied = x.to("CPU", copy=True)
    assert copied is not x and copied.tolist() == [1, 2]
    with pytest.raises(TypeError, match="device name, a dtype or a tensor"):
        x.to(3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        x.to(dtype=dtypes.float32, layout=None)


def test_cat_randint_and_named_results_take_torchs_forms() -> None:
    a, b = Tensor(randn(2, 3)), Tensor(randn(2, 1, seed=1))
    want = np.concatenate([a.numpy(), b.numpy()], axis=1)
    for got in (Tensor.cat([a, b], dim=1), Tensor.cat((a, b), 1), a.cat(b, dim=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(RuntimeError, match="sequence"):
        Tensor.cat([a, b], b)
    low_high = Tensor.randint(5, 9, (200,))
    assert low_high.dtype == dtypes.int64 and set(low_high.tolist()) == {5, 6, 7, 8}
    assert Tensor.randint(4, (2, 3)).shape == (2, 3) and Tensor.randint(0, 3, size=(5,)).shape == (5,)
    assert Tensor.randint(2, 3, high=4).dtype == dtypes.int32  # tinygrad's form: a shape
    x = Tensor(randn(3, 5))
    tx = torch.tensor(x.numpy())
    for ours, ref in [
        (x.sort(dim=1), torch.sort(tx, dim=1)),
        (x.topk(2, dim=-1), torch.topk(tx, 2, dim=-1)),
        (x.median(dim=1), torch.median(tx, dim=1)),
        (x.kthvalue(2, dim=1), torch.kthvalue(tx, 2, dim=1)),
        (x.cummax(dim=1), torch.cummax(tx, dim=1)),
        (x.mode(dim=1), torch.mode(tx, dim=1)),
    ]:
        np.testing.assert_array_equal(ours.values.numpy(), ref.values.numpy())
        np.testing.assert_array_equal(ours.indices.numpy(), ref.indices.numpy())
        values, indices = ours
        assert values is ours.values and indices is ours.indices


_SHAPE_OPS = [
    ("squeeze_", (2, 1, 3), ()),
    ("squeeze_", (2, 1, 3), (1,)),
    ("unsqueeze_", (2, 3), (-1,)),
    ("t_", (2, 3), ()),
    ("t_", (4,), ()),
    ("transpose_", (2, 3, 4), (0, 2)),
    ("swapaxes_", (2, 3, 4), (1, 2)),
    ("resize_", (2, 3), ((3, 2),)),
    ("resize_", (2, 3), ((4,),)),
]


@pytest.mark.parametrize("name, shape, args", _SHAPE_OPS)
def test_in_place_shape_ops_match_torch(name: str, shape: tuple, args: tuple) -> None:
    """The tensor itself takes the new shape and keeps its memory: a write through it after the change lands where
    torch's does, and a view taken after the change shares it."""
    a = randn(*shape)
    ours, ref = Tensor(a).realize(), torch.tensor(a)
    assert getattr(ours, name)(*args) is ours
    getattr(ref, name)(*args)
    assert ours.shape == tuple(ref.shape)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    view, tview = ours[0], ref[0]
    ours += 1
    ref += 1
    np.testing.assert_array_equal(view.numpy(), tview.numpy())
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_view_taken_before_an_in_place_shape_change_is_refused() -> None:
    """torch's view would show the old layout of the memory; here it cannot follow, and says so instead of reading the
    memory in the new layout (which it did: a silently wrong row)."""
    x = Tensor(randn(3, 3)).realize()
    row = x[0]
    x.t_()
    with pytest.raises(ValueError, match="in-place shape change"):
        row.numpy()
    with pytest.raises(ValueError, match="in-place shape change"):
        row += 1
    with pytest.raises(RuntimeError, match="require grad"):
        Tensor(randn(3), requires_grad=True).resize_(2)


@pytest.mark.parametrize("leaf", [True, False])
@pytest.mark.parametrize("writes", [1, 2])
@pytest.mark.parametrize("change", ["unsqueeze_", "t_", "squeeze_"])
def test_view_taken_before_a_write_and_a_shape_change_is_refused(leaf: bool, writes: int, change: str) -> None:
    """A write between the view and the change hid the view's age: it read the values before the write (a realized
    base) or the write applied twice (a computed one), silently. In-place shape hunt, seeds 82000-82149."""
    x = Tensor(randn(1, 3)).realize() if leaf else Tensor(randn(1, 3)) * 1.0
    row = x[0]
    for _ in range(writes):
        x.mul_(1.5)
    getattr(x, change)(*((0,) if change == "unsqueeze_" else ()))
    with pytest.raises(ValueError, match="in-place shape change"):
        row.numpy()
    after = x[0]  # a view taken after the change follows the next write
    x.mul_(2)
    np.testing.assert_allclose(after.numpy(), x.numpy()[0], rtol=1e-6)


def test_one_argument_where_put_and_clone_options_match_torch() -> None:
    a = randn(3, 4)
    for ours, ref in zip(Tensor.where(Tensor(a) > 0), torch.where(torch.tensor(a) > 0)):
        assert ours.tolist() == ref.tolist()
    index, source = np.array([0, 5, -1, 5]), randn(4, seed=2)
    for accumulate in (False, True):
        want = torch.tensor(a).put(torch.tensor(index[:3]), torch.tensor(source[:3]), accumulate)
        got = Tensor(a).put(Tensor(index[:3]), Tensor(source[:3]), accumulate)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    want = torch.tensor(a).put_(torch.tensor(index), torch.tensor(source), accumulate=True)
    got = Tensor(a).put_(Tensor(index), Tensor(source), accumulate=True)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(Tensor(a).clone(memory_format=None).numpy(), a)
