"""lazygrad.torch's top-level functions whose form differs from the Tensor method or nn.functional function they
compute (int reductions, argument orders, tuples), the view copies, dtype promotion questions, histogram, windows and
the process settings: each against torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lazygrad.torch as lt  # noqa: E402


def _pair(*shape: int, seed: int = 0, positive: bool = False):  # noqa: ANN202
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    a = np.abs(a) + 0.1 if positive else a
    return lt.tensor(a), torch.tensor(a)


def _close(ours, theirs, tol: float = 1e-5) -> None:  # noqa: ANN001
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _close(o, t, tol)
        return
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_losses_with_int_reduction(reduction: int) -> None:
    (a, ta), (b, tb), (c, tc) = _pair(6, 4), _pair(6, 4, seed=1), _pair(6, 4, seed=2)
    (p, tp), (q, tq) = _pair(6, 4, seed=3, positive=True), _pair(6, 4, seed=4, positive=True)
    sign = lt.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
    tsign = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
    cases = [
        ("kl_div", (a.log_softmax(1), q), (ta.log_softmax(1), tq), {}),
        ("binary_cross_entropy_with_logits", (a, q.sigmoid()), (ta, tq.sigmoid()), {}),
        ("margin_ranking_loss", (a[:, 0], b[:, 0], sign, 0.2), (ta[:, 0], tb[:, 0], tsign, 0.2), {}),
        ("hinge_embedding_loss", (p, sign.unsqueeze(1).expand(6, 4)), (tp, tsign.unsqueeze(1).expand(6, 4)), {}),
        ("cosine_embedding_loss", (a, b, sign, 0.1), (ta, tb, tsign, 0.1), {}),
        ("triplet_margin_loss", (a, b, c), (ta, tb, tc), {}),
        ("poisson_nll_loss", (a, q, True, False, 1e-8), (ta, tq, True, False, 1e-8), {}),
    ]
    for name, ours, theirs, kw in cases:
        if name == "poisson_nll_loss":
            _close(getattr(lt, name)(*ours, reduction), getattr(torch, name)(*theirs, reduction), 1e-4)
        else:
            _close(getattr(lt, name)(*ours, reduction=reduction, **kw),
                   getattr(torch, name)(*theirs, reduction=reduction, **kw), 1e-4)  # fmt: skip


def test_torch_argument_orders_and_tuples() -> None:
    (x, tx), (w, tw), (m, tm) = _pair(2, 3, 5), _pair(3, seed=1), _pair(3, seed=2)
    v = lt.tensor(np.abs(m.numpy()) + 0.5)
    tv = torch.tensor(v.numpy())
    _close(lt.instance_norm(x, w, m, None, None, True, 0.1, 1e-5, False),
           torch.instance_norm(tx, tw, tm, None, None, True, 0.1, 1e-5, False), 1e-4)  # fmt: skip
    _close(
        lt.batch_norm(x, w, m, m, v, False, 0.1, 1e-5), torch.batch_norm(tx, tw, tm, tm, tv, False, 0.1, 1e-5, False)
    )
    out, idx = lt.max_pool1d_with_indices(x, 2)
    tout, tidx = torch.max_pool1d_with_indices(tx, 2)
    _close(out, tout)
    assert idx.tolist() == tidx.tolist()
    _close(lt.constant_pad_nd(x, (1, 2), 0.5), torch.constant_pad_nd(tx, (1, 2), 0.5))
    (a, ta), (b, tb) = _pair(4, 2, 3), _pair(4, 3, 5, seed=1)
    _close(lt.bmm(a, b), torch.bmm(ta, tb), 1e-5)
    _close(lt.chain_matmul(a[0], b[0], b[1].T), torch.chain_matmul(ta[0], tb[0], tb[1].T), 1e-5)
    _close(lt.frobenius_norm(a, (1, 2)), torch.frobenius_norm(ta, (1, 2)), 1e-5)


def test_in_place_forms() -> None:
    x, tx = _pair(3, 4)
    for name, args in [("celu_", ()), ("selu_", ()), ("threshold_", (0.1, -1.0)), ("dropout_", (0.0, True))]:
        a, ta = x.clone(), tx.clone()
        got = getattr(lt, name)(a, *args)
        getattr(torch, name)(ta, *args)
        _close(a, ta)
        assert got is a


@pytest.mark.parametrize(
    "name,args",
    [
        ("view_copy", ((4, 3),)),
        ("permute_copy", ((1, 0),)),
        ("transpose_copy", (0, 1)),
        ("t_copy", ()),
        ("expand_copy", ((2, 3, 4),)),
        ("unsqueeze_copy", (1,)),
        ("squeeze_copy", ()),
        ("diagonal_copy", ()),
        ("select_copy", (1, 2)),
        ("slice_copy", (1, 1, 3)),
        ("detach_copy", ()),
        ("alias_copy", ()),
        ("split_copy", (2,)),
        ("unbind_copy", (1,)),
        ("unsafe_split", (2, 1)),
        ("unsafe_chunk", (2, 1)),
        ("unfold_copy", (1, 2, 1)),
        ("as_strided_copy", ((2, 2), (1, 2))),
    ],
)
def test_view_copies(name: str, args: tuple) -> None:
    x, tx = _pair(3, 4)
    _close(getattr(lt, name)(x, *args), getattr(torch, name)(tx, *args))


def test_dtype_promotion_questions() -> None:
    kinds = [lt.bool, lt.uint8, lt.int8, lt.int16, lt.int32, lt.int64, lt.float16, lt.bfloat16, lt.float32, lt.float64]
    tkinds = [getattr(torch, str(k).split(".")[-1]) for k in kinds]
    for a, ta in zip(kinds, tkinds):
        for b, tb in zip(kinds, tkinds):
            assert str(lt.promote_types(a, b)).split(".")[-1] == str(torch.promote_types(ta, tb)).split(".")[-1]
            assert lt.can_cast(a, b) == torch.can_cast(ta, tb), (a, b)
    operands = [
        (lt.tensor([1, 2]), 1.5),
        (lt.tensor([1.0]), lt.tensor(1, dtype=lt.float64)),
        (lt.tensor([1]), lt.tensor(1.0, dtype=lt.float64)),
        (lt.tensor([True]), 2),
        (lt.tensor(1, dtype=lt.int8), lt.tensor([1], dtype=lt.uint8)),
        (lt.tensor(1, dtype=lt.int8), lt.tensor(1, dtype=lt.int64)),
        (3, lt.tensor([1], dtype=lt.int16)),
        (lt.tensor([1], dtype=lt.float16), 2.5),
    ]
    for a, b in operands:
        ta = torch.tensor(a.numpy()) if isinstance(a, lt.Tensor) else a
        tb = torch.tensor(b.numpy()) if isinstance(b, lt.Tensor) else b
        assert str(lt.result_type(a, b)).split(".")[-1] == str(torch.result_type(ta, tb)).split(".")[-1], (a, b)
    assert lt.typename(lt.ones(2)) == torch.typename(torch.ones(2)) == "torch.FloatTensor"
    assert lt.typename(lt.ones(2, dtype=lt.int64)) == torch.typename(torch.ones(2, dtype=torch.int64))


@pytest.mark.parametrize("kw", [{"bins": 10}, {"bins": 7, "range": (-1.0, 1.0)}, {"bins": 5, "density": True}])
def test_histogram(kw: dict) -> None:
    x, tx = _pair(1000)
    w, tw = _pair(1000, seed=1, positive=True)
    _close(lt.histogram(x, **kw), torch.histogram(tx, **kw), 1e-4)
    _close(lt.histogram(x, weight=w, **kw), torch.histogram(tx, weight=tw, **kw), 1e-3)
    edges = [-2.0, -0.5, 0.0, 0.3, 3.0]
    _close(lt.histogram(x, lt.tensor(edges)), torch.histogram(tx, torch.tensor(edges)))
    _close(lt.histogram(lt.tensor([2.0, 2.0]), bins=3), torch.histogram(torch.tensor([2.0, 2.0]), bins=3))


def test_real_numbers_complex_functions_and_creation_forms() -> None:
    x, tx = _pair(7)
    x = lt.cat([x, lt.tensor([0.0, float("nan")])])
    tx = torch.cat([tx, torch.tensor([0.0, float("nan")])])
    _close(lt.angle(x), torch.angle(tx))
    _close(lt.real(x), torch.real(tx))
    with pytest.raises(RuntimeError, match="imag"):
        lt.imag(x)
    assert lt.is_conj(x) is False and lt.is_neg(x) is False
    for n, periodic, beta in [(10, True, 12.0), (9, False, 5.0), (1, True, 12.0)]:
        _close(lt.kaiser_window(n, periodic, beta), torch.kaiser_window(n, periodic, beta), 1e-5)
    _close(lt.fill(lt.ones(2, 3), 2.5), torch.fill(torch.ones(2, 3), 2.5))
    _close(lt.fill(lt.ones(2, 3), lt.tensor(4.0)), torch.fill(torch.ones(2, 3), torch.tensor(4.0)))
    data = bytearray(np.arange(6, dtype=np.int32).tobytes())
    _close(lt.frombuffer(data, dtype=lt.int32, count=3, offset=4), torch.frombuffer(data, dtype=torch.int32, count=3,
                                                                                    offset=4))  # fmt: skip
    r = lt.randint_like(lt.ones(1000, dtype=lt.int64), 3, 7)
    assert r.dtype == lt.int64 and set(r.tolist()) == {3, 4, 5, 6}
    assert lt.empty_strided((2, 3), (3, 1)).shape == (2, 3)
    with pytest.raises(RuntimeError):
        lt.empty_strided((2, 3), (1,))


def test_triangular_and_lu_solve() -> None:
    a = np.tril(np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)) + 3 * np.eye(3, dtype=np.float32)
    b, tb = _pair(3, 2)
    for upper, transpose, mat in [(False, False, a), (True, False, a.T.copy()), (False, True, a)]:
        got = lt.triangular_solve(b, lt.tensor(mat), upper, transpose)
        want = torch.triangular_solve(tb, torch.tensor(mat), upper, transpose)
        _close(got.solution, want.solution, 1e-4)
        _close(got.cloned_coefficient, want.cloned_coefficient)
    full = a @ a.T
    LU, piv = lt.linalg.lu_factor(lt.tensor(full))
    tLU, tpiv = torch.linalg.lu_factor(torch.tensor(full))
    _close(lt.lu_solve(b, LU, piv), torch.lu_solve(tb, tLU, tpiv), 1e-4)


def test_control_flow_and_settings() -> None:
    x = lt.tensor([1.0, 2.0])
    assert lt.cond(x.sum() > 2, lambda v: v * 2, lambda v: v * 3, (x,)).tolist() == [2.0, 4.0]
    (i, acc) = lt.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, a * 2), (lt.tensor(0), x))
    assert i.item() == 4 and acc.tolist() == [16.0, 32.0]
    assert lt.get_default_device().type == torch.get_default_device().type == "cpu"
    lt.set_warn_always(True)
    assert lt.is_warn_always_enabled()
    lt.set_warn_always(False)
    before = lt.get_default_dtype()
    try:
        lt.set_default_tensor_type(lt.DoubleTensor)
        assert lt.tensor([1.5]).dtype == lt.float64
        with pytest.raises(TypeError):
            lt.set_default_tensor_type(lt.LongTensor)
    finally:
        lt.set_default_dtype(before)
    assert lt.GradScaler is lt.amp.GradScaler and not lt.is_anomaly_enabled()
