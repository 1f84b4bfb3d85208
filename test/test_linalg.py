"""lazygrad.linalg against torch.linalg: the same code run with either module (values, named-tuple fields,
gradients), over sizes 1, 2 and primes, batches and broadcasts, float32 / float64, ill-conditioned inputs, and
torch's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lazygrad.linalg
from lazygrad import Tensor, linalg
from test.opcheck import check, randn

SIZES = [1, 2, 5, 7]


def both(fn, inputs, **kw) -> None:
    """fn(L, *tensors) with L lazygrad.linalg and with torch.linalg: values and gradients equal."""
    check(lambda *t: fn(linalg, *t), lambda *t: fn(torch.linalg, *t), inputs, **kw)


def tols(dtype: str) -> dict:
    return (
        {"atol": 1e-4, "rtol": 1e-3, "grad_atol": 1e-3}
        if dtype == "float32"
        else {"atol": 1e-9, "rtol": 1e-7, "grad_atol": 1e-8}
    )


def well_conditioned(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    """A random square matrix plus n on its diagonal (condition numbers of a few): pivoting still permutes rows."""
    n = shape[-1]
    return (
        randn(*shape, seed=seed, dtype="float64") + n * np.eye(n) * np.sign(randn(n, seed=seed + 7, dtype="float64"))
    ).astype(dtype)


def spd(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    a = randn(*shape, seed=seed, dtype="float64")
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def test_imports() -> None:
    assert lazygrad.linalg is linalg
    assert issubclass(linalg.LinAlgError, RuntimeError)
    missing = [n for n in linalg.__all__ if not hasattr(torch.linalg, n)]
    assert not missing, f"not torch.linalg names: {missing}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", SIZES)
def test_solve_inv(n: int, dtype: str) -> None:
    a, b = randn(n, n, dtype=dtype) + 0.5 * np.eye(n, dtype=dtype), randn(n, 3, seed=1, dtype=dtype)
    t = {"atol": 1e-3, "rtol": 1e-3, "grad_atol": 1e-2} if dtype == "float32" else tols(dtype)
    both(lambda L, a, b: L.solve(a, b), [a, b], **t)
    both(lambda L, a, b: L.solve(a, b[:, 0]), [a, b], **t)
    both(lambda L, a, b: L.solve(a, b.T, left=False), [a, b], **t)
    both(lambda L, a: L.inv(a), [a], **t)
    both(lambda L, a: L.inv_ex(a), [a], **t)
    both(lambda L, a, b: L.solve_ex(a, b), [a, b], **t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((3, 4, 4), (3, 4, 2)), ((3, 4, 4), (4, 2)), ((4, 4), (2, 4, 3)), ((2, 1, 5, 5), (3, 5, 1)), ((3, 4, 4), (3, 4))],
)
def test_solve_batched_broadcast(a_shape: tuple, b_shape: tuple, dtype: str) -> None:
    both(
        lambda L, a, b: L.solve(a, b),
        [well_conditioned(*a_shape, dtype=dtype), randn(*b_shape, seed=1, dtype=dtype)],
        **tols(dtype),
    )


def test_solve_ill_conditioned() -> None:
    # Hilbert 6x6, condition number 1.5e7: torch's LAPACK and our elimination (same pivots) agree to about
    # cond * eps ~ 3e-9 relative in float64, and both solve A x = b to rounding (the residual is what is stable)
    n = 6
    h = 1 / (np.arange(n)[:, None] + np.arange(n)[None, :] + 1)
    b = randn(n, 2, dtype="float64")
    x = linalg.solve(Tensor(h), Tensor(b)).numpy()
    np.testing.assert_allclose(x, torch.linalg.solve(torch.tensor(h), torch.tensor(b)).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h @ x, b, atol=1e-12)
    inv = linalg.inv(Tensor(h)).numpy()
    np.testing.assert_allclose(inv, torch.linalg.inv(torch.tensor(h)).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_singular_info_and_errors(dtype: str) -> None:
    sing = np.array([[[1, 2], [2, 4]], [[1, 0], [0, 1]], [[0, 0], [0, 0]]], dtype=dtype)
    for fn in (lambda L, a: L.inv_ex(a).info, lambda L, a: L.lu_factor_ex(a).info, lambda L, a: L.solve_ex(a, a).info):
        np.testing.assert_array_equal(fn(linalg, Tensor(sing)).numpy(), fn(torch.linalg, torch.tensor(sing)).numpy())
    assert np.isinf(linalg.inv_ex(Tensor(sing[0])).inverse.numpy()).any()  # _ex: no read, no raise
    for fn in (lambda L, a: L.inv_ex(a, check_errors=True), lambda L, a: L.solve_ex(a, a, check_errors=True)):
        with pytest.raises(torch.linalg.LinAlgError):
            fn(torch.linalg, torch.tensor(sing))
        with pytest.raises(linalg.LinAlgError, match="Batch element 0"):
            fn(linalg, Tensor(sing))
    with pytest.raises(RuntimeError, match=r"\(Batch element 0\): U\[2,2\] is zero") as err:
        linalg.lu_factor_ex(Tensor(sing), check_errors=True)
    assert not isinstance(err.value, linalg.LinAlgError)  # torch's lu_factor_ex raises a plain RuntimeError
    with pytest.raises(linalg.LinAlgError, match=r"diagonal element 2 is zero"):
        linalg.inv_ex(Tensor(sing[0]), check_errors=True)


# (torch's call, lazygrad's call): each raises on a singular / not positive definite matrix, the same class and message
RAISING = [
    (lambda L, a: L.inv(a), None),
    (lambda L, a: torch.inverse(a) if L is torch.linalg else a.inverse(), None),
    (lambda L, a: L.solve(a, a[..., :1]), None),
    (lambda L, a: L.solve(a, a[..., :1].mT, left=False), None),
    (lambda L, a: L.matrix_power(a, -2), None),
    (lambda L, a: L.lu_factor(a), RuntimeError),
    (lambda L, a: L.cholesky(a), None),
    (lambda L, a: L.cholesky(a, upper=True), None),
    (lambda L, a: torch.cholesky(a) if L is torch.linalg else a.cholesky(), None),
]


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("i", range(len(RAISING)))
@pytest.mark.parametrize("batch", [(), (3,)])
def test_singular_raises_as_torch(i: int, batch: tuple, dtype: str) -> None:
    """inv / solve / matrix_power(n < 0) / lu_factor / cholesky raise as torch's where the matrix is singular (not
    positive definite): LinAlgError (lu_factor: RuntimeError), torch's message, the batch element named."""
    fn, cls = RAISING[i]
    chol = i >= 6
    sing = np.zeros((*batch, 3, 3), dtype)
    # exact zero pivots of A and A^T, and a zero leading minor of order 2 of either triangle's symmetric matrix
    sing[...] = np.array([[4, 2, 2], [2, 1, 1], [1, 1, 2]], dtype)
    good = spd(*batch, 3, 3, dtype=dtype) if chol else well_conditioned(*batch, 3, 3, dtype=dtype)
    if batch:
        sing[0] = good[0]  # the error names the first bad element, the second
    with pytest.raises(cls or torch.linalg.LinAlgError) as want:
        fn(torch.linalg, torch.tensor(sing))
    with pytest.raises(cls or linalg.LinAlgError) as got:
        fn(linalg, Tensor(sing))
    assert isinstance(got.value, RuntimeError)
    if cls is None:
        assert isinstance(got.value, linalg.LinAlgError) and issubclass(linalg.LinAlgError, RuntimeError)
    else:
        assert not isinstance(got.value, linalg.LinAlgError)
    assert str(got.value) == str(want.value)
    # the same calls on a good matrix: torch's values and gradients
    check(lambda a: fn(linalg, a), lambda a: fn(torch.linalg, a), [good], atol=1e-4, rtol=1e-3, grad_atol=1e-3)


def test_singular_check_reads_once_and_not_in_a_capture() -> None:
    """The check is one schedule (result and info) and one read; the result is not computed again when used. In a
    TinyJit capture there is no read (a replay cannot raise): inf / NaN there, and _ex's info says so."""
    from lazygrad.engine.jit import TinyJit
    from lazygrad.helpers import GlobalCounters

    a = Tensor(well_conditioned(4, 4)).realize()
    GlobalCounters.reset()
    x = linalg.inv(a)
    kernels = GlobalCounters.kernel_count
    assert kernels > 0  # the check realized the inverse with its info
    np.testing.assert_allclose(x.numpy(), np.linalg.inv(well_conditioned(4, 4)), rtol=1e-4, atol=1e-5)
    assert GlobalCounters.kernel_count == kernels  # no second computation

    @TinyJit
    def f(m: Tensor) -> tuple[Tensor, Tensor]:
        return linalg.inv(m).realize(), linalg.inv_ex(m).info.realize()

    sing = Tensor(np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)).realize()
    f(Tensor.eye(2).contiguous().realize())  # (the first call runs the function as it is: it checks)
    for _ in range(2):  # the capture, then a replay
        out, info = f(sing)
        assert not np.isfinite(out.numpy()).all() and info.item() == 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (5, 5), (2, 4, 4), (3, 5), (5, 3)])
def test_lu_without_pivoting(shape: tuple, dtype: str) -> None:
    """pivot=False (torch's on CUDA; its CPU raises): L U = A with no row exchange, P empty, pivots 1..k. On a
    diagonally dominant matrix partial pivoting exchanges nothing, so torch's pivoted LU is the reference there,
    values and gradients."""
    a = randn(*shape, dtype=dtype)
    k = min(shape[-2:])
    a[..., :k, :k] += 4 * k * np.eye(k, dtype=dtype)
    t = tols(dtype)
    check(lambda x: linalg.lu(x, pivot=False)[1:], lambda x: torch.linalg.lu(x)[1:], [a], **t)
    check(lambda x: linalg.lu_factor(x, pivot=False), lambda x: torch.linalg.lu_factor(x), [a], **t)
    p, low, up = linalg.lu(Tensor(a), pivot=False)
    assert p.shape == (0,)
    np.testing.assert_array_equal(
        linalg.lu_factor_ex(Tensor(a), pivot=False).pivots.numpy(),
        np.broadcast_to(np.arange(1, k + 1, dtype=np.int32), (*shape[:-2], k)),
    )
    # a matrix partial pivoting would permute: still A = L U (torch's CPU has no reference)
    b = randn(*shape, seed=5, dtype=dtype)
    b[..., :k, :k] += 0.5 * np.eye(k, dtype=dtype)
    _, low, up = linalg.lu(Tensor(b), pivot=False)
    np.testing.assert_allclose(
        (low @ up).numpy(), b, rtol=1e-3 if dtype == "float32" else 1e-9, atol=1e-3 if dtype == "float32" else 1e-9
    )
    if shape[-1] == shape[-2]:
        rhs = randn(*shape[:-1], 2, seed=2, dtype=dtype)
        sol = linalg.lu_solve(*linalg.lu_factor(Tensor(a), pivot=False), Tensor(rhs)).numpy()
        np.testing.assert_allclose(sol, np.linalg.solve(a, rhs), rtol=1e-3, atol=1e-4)


def test_cond_of_a_singular_matrix_is_inf() -> None:
    sing = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    for p in ("fro", 1, -1, math.inf):
        assert linalg.cond(Tensor(sing), p).item() == torch.linalg.cond(torch.tensor(sing), p).item() == math.inf


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (7, 7), (3, 4, 4), (4, 6), (6, 4)])
def test_lu(shape: tuple, dtype: str) -> None:
    a = randn(*shape, dtype=dtype)
    both(lambda L, a: L.lu_factor(a), [a], **tols(dtype))
    both(lambda L, a: L.lu(a), [a], **tols(dtype))
    if shape[-1] == shape[-2]:
        b = randn(*shape[:-1], 2, seed=1, dtype=dtype)
        t = {"atol": 1e-3, "rtol": 1e-3, "grad_atol": 1e-2} if dtype == "float32" else tols(dtype)
        for kw in ({}, {"adjoint": True}):
            both(lambda L, a, b: L.lu_solve(*L.lu_factor(a), b, **kw), [a, b], **t)
        both(lambda L, a, b: L.lu_solve(*L.lu_factor(a), b.swapaxes(-1, -2), left=False), [a, b], **t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(
    "upper,unit,left", [(True, False, True), (False, False, True), (False, True, True), (True, True, False)]
)
def test_solve_triangular(n: int, upper: bool, unit: bool, left: bool, dtype: str) -> None:
    # the other triangle holds garbage that must not be read; the diagonal kept away from zero
    a = randn(2, n, n, dtype=dtype) + 3 * np.eye(n, dtype=dtype)
    b = randn(2, n, 3, seed=1, dtype=dtype) if left else randn(2, 3, n, seed=1, dtype=dtype)
    both(lambda L, a, b: L.solve_triangular(a, b, upper=upper, unitriangular=unit, left=left), [a, b], **tols(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (7, 7), (3, 4, 4)])
def test_det_slogdet_matrix_power(shape: tuple, dtype: str) -> None:
    a = randn(*shape, dtype=dtype)
    both(lambda L, a: L.det(a), [a], **tols(dtype))
    both(lambda L, a: L.slogdet(a), [a], **tols(dtype))
    t = {"atol": 1e-3, "rtol": 1e-3, "grad_atol": 1e-2} if dtype == "float32" else tols(dtype)
    for k in (0, 1, 3, -2):
        both(lambda L, a: L.matrix_power(a, k), [well_conditioned(*shape, dtype=dtype)], **t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (7, 7), (3, 4, 4)])
def test_cholesky(shape: tuple, dtype: str) -> None:
    # garbage in the other triangle: torch reads the lower one only (the upper with upper), and its gradient is
    # symmetric
    for upper in (False, True):
        garbage = randn(*shape, seed=3, dtype=dtype)
        a = spd(*shape, dtype=dtype) + (np.tril(garbage, -1) if upper else np.triu(garbage, 1))
        both(lambda L, a: L.cholesky(a, upper=upper), [a], **tols(dtype))
        both(lambda L, a: L.cholesky_ex(a, upper=upper), [a], **tols(dtype))
    bad = np.stack([np.eye(3), -np.eye(3), np.diag([1.0, 0.0, 1.0])]).astype(dtype)
    np.testing.assert_array_equal(linalg.cholesky_ex(Tensor(bad)).info.numpy(), [0, 1, 2])
    with pytest.raises(linalg.LinAlgError, match=r"\(Batch element 1\).*minor of order 1 is not positive-definite"):
        linalg.cholesky_ex(Tensor(bad), check_errors=True)


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
def test_cholesky_tensor_methods() -> None:
    a, b = spd(3, 4, 4), randn(3, 4, 2, seed=1)
    for upper in (False, True):
        check(
            lambda a, b: b.cholesky_solve(a.cholesky(upper), upper),
            lambda a, b: b.cholesky_solve(a.cholesky(upper), upper),
            [a, b],
            atol=1e-5,
            grad_atol=1e-4,
        )
        check(
            lambda a: a.cholesky(upper).cholesky_inverse(upper),
            lambda a: a.cholesky(upper).cholesky_inverse(upper),
            [a],
            atol=1e-5,
            grad_atol=1e-4,
        )
    check(lambda a: a.inverse(), lambda a: a.inverse(), [well_conditioned(3, 4, 4)], atol=1e-5, grad_atol=1e-4)
    check(lambda a: a.matrix_exp(), lambda a: a.matrix_exp(), [randn(2, 3, 3)], atol=1e-5, grad_atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
# (Jacobi sweeps unroll into large graphs: 7 x 7 with gradients takes minutes to compile here, so 5 x 5 is the
# largest prime size for eigh and the svd family)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (3, 4, 4)])
def test_eigh(shape: tuple, dtype: str) -> None:
    a = (
        spd(*shape, dtype=dtype)
        - shape[-1] * np.eye(shape[-1], dtype=dtype)
        + np.triu(randn(*shape, seed=3, dtype=dtype), 1)
    )
    t = tols(dtype)
    both(lambda L, a: L.eigvalsh(a), [a], **t)
    both(lambda L, a: L.eigh(a, UPLO="U")[0], [a.swapaxes(-1, -2).copy()], **t)
    # eigenvector signs are arbitrary: |V| and V diag(w) V^T (gauge-invariant) match, values and gradients
    both(lambda L, a: L.eigh(a).eigenvectors.abs(), [a], grad=False, **t)
    both(lambda L, a: (lambda w, v: (v * w.unsqueeze(-2)) @ v.mT)(*L.eigh(a)), [a], **t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (3, 4, 4), (4, 6), (6, 4)])
def test_svd_family(shape: tuple, dtype: str) -> None:
    a = randn(*shape, dtype=dtype)
    t = tols(dtype)
    both(lambda L, a: L.svdvals(a), [a], **t)
    both(lambda L, a: L.svd(a, full_matrices=False).S, [a], **t)
    loose = (
        {"atol": 1e-3, "rtol": 1e-3, "grad_atol": 1e-2}
        if dtype == "float32"
        else {"atol": 1e-8, "rtol": 1e-6, "grad_atol": 1e-6}
    )
    both(lambda L, a: L.pinv(a), [a], **loose)
    both(lambda L, a: L.matrix_rank(a), [a], grad=False)
    if shape[-1] == shape[-2]:
        both(lambda L, a: L.cond(a), [a], **loose)
        both(lambda L, a: L.cond(a, -2), [a], **loose)
        # torch's backward of cond "fro" fails (its inv_ex output is modified in place): values only
        both(lambda L, a: L.cond(a, "fro"), [well_conditioned(*shape, dtype=dtype)], grad=False, **loose)


def test_rank_deficient() -> None:
    a = randn(6, 4, dtype="float64")
    a[:, 3] = a[:, 0] - 2 * a[:, 1]
    both(lambda L, a: L.matrix_rank(a), [a], grad=False)
    both(lambda L, a: L.matrix_rank(a, atol=1.0, rtol=0.0), [a], grad=False)
    both(lambda L, a: L.pinv(a), [a], atol=1e-9, grad=False)
    both(lambda L, a, b: L.lstsq(a, b).solution, [a, randn(6, 2, seed=1, dtype="float64")], atol=1e-9, grad=False)


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize(
    "a_shape,b_shape", [((6, 4), (6, 2)), ((4, 6), (4, 2)), ((2, 6, 3), (2, 6, 1)), ((5, 3), (5,))]
)
def test_lstsq(a_shape: tuple, b_shape: tuple, driver: str | None) -> None:
    a, b = randn(*a_shape, dtype="float64"), randn(*b_shape, seed=1, dtype="float64")
    if driver == "gels" and a_shape[-2] < a_shape[-1]:
        return  # torch's gels finds the minimum-norm solution only through QR of A^T; same values, skip the field check
    both(lambda L, a, b: L.lstsq(a, b, driver=driver), [a, b], atol=1e-9, rtol=1e-7, grad_atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_qr(dtype: str) -> None:
    for shape in [(1, 1), (5, 5), (3, 4, 4), (6, 4), (4, 6)]:
        a = randn(*shape, dtype=dtype)
        for mode in ("reduced", "complete"):
            # torch cannot differentiate a complete QR of a tall matrix
            grad = mode == "reduced" or shape[-2] <= shape[-1]
            both(lambda L, a: L.qr(a, mode), [a], grad=grad, **tols(dtype))
        both(lambda L, a: L.qr(a, "r").R, [a], grad=False, **tols(dtype))  # torch cannot differentiate mode "r"
        assert linalg.qr(Tensor(a), "r").Q.shape == (0,)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_norms(dtype: str) -> None:
    x, a = randn(3, 4, 5, dtype=dtype), randn(3, 4, 5, seed=1, dtype=dtype)
    t = tols(dtype)
    for ord in (2, 1, 3.5, math.inf, -math.inf, 0):
        grad = ord != 0
        both(lambda L, x: L.vector_norm(x, ord), [x], grad=grad, **t)
        both(lambda L, x: L.vector_norm(x, ord, dim=(0, 2), keepdim=True), [x], grad=grad, **t)
    for ord in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
        both(lambda L, a: L.matrix_norm(a, ord, dim=(2, 0), keepdim=True), [a], **t)
        if ord not in ("nuc", 2, -2):  # (the SVD's Jacobi graphs are slow to compile: once per ord is enough)
            both(lambda L, a: L.matrix_norm(a, ord), [a], **t)
            both(lambda L, a: L.norm(a[0], ord), [a], **t)
    both(lambda L, a: L.norm(a), [a], **t)
    both(lambda L, a: L.norm(a, 3, dim=1), [a], **t)
    both(lambda L, a: L.norm(a, dim=(0, 1)), [a], **t)
    both(lambda L, a: L.norm(a[0, 0], -1), [a], **t)
    both(lambda L, a: L.vector_norm(a, dtype=torch.float64 if L is torch.linalg else "float64"), [a], **t)


def test_matrix_exp() -> None:
    for a in (randn(1, 1), randn(5, 5) * 0.1, randn(3, 4, 4), np.zeros((3, 3), np.float32)):
        both(lambda L, a: L.matrix_exp(a), [a], atol=1e-5, grad_atol=1e-4)
    # a batch of norms 0.5 and 40: each matrix takes its own number of squarings
    a = np.stack([np.eye(3) * 0.5, randn(3, 3, dtype="float64") * 15])
    both(lambda L, a: L.matrix_exp(a), [a], atol=1e-9, rtol=1e-9, grad_atol=1e-6)


def test_products_and_views() -> None:
    a, b = randn(2, 4, 3), randn(1, 4, 3, seed=1)
    both(lambda L, a, b: L.cross(a, b), [a, b])
    both(lambda L, a, b: L.cross(a.mT, b.mT, dim=-2), [a, b])
    both(lambda L, a, b: L.vecdot(a, b), [a, b])
    both(lambda L, a, b: L.vecdot(a, b, dim=1), [a, b])
    both(lambda L, a: L.diagonal(a, offset=1), [a])
    both(lambda L, a: L.diagonal(a, dim1=0, dim2=2), [a])
    chain = [randn(3, seed=0), randn(3, 10, seed=1), randn(10, 2, seed=2), randn(2, 8, seed=3), randn(8, seed=4)]
    both(lambda L, *ts: L.multi_dot(list(ts)), chain, atol=1e-5)
    both(lambda L, *ts: L.multi_dot(list(ts)), chain[1:4], atol=1e-5)
    both(lambda L, x: L.vander(x), [randn(2, 4)])
    both(lambda L, x: L.vander(x, N=6), [randn(5)])
    both(lambda L, x: L.vander(x), [np.arange(4).astype(np.int64)], grad=False)


def test_householder_product() -> None:
    a = torch.tensor(randn(2, 5, 3, dtype="float64"))
    h, tau = torch.geqrf(a)
    both(lambda L, h, tau: L.householder_product(h, tau), [h.numpy(), tau.numpy()], atol=1e-12, grad_atol=1e-10)
    both(
        lambda L, h, tau: L.householder_product(h, tau[..., :2]), [h.numpy(), tau.numpy()], atol=1e-12, grad_atol=1e-10
    )


@pytest.mark.parametrize(
    "fn,inputs",
    [
        (lambda L, a: L.inv(a), [(2, 3)]),
        (lambda L, a: L.inv(a), [(3,)]),
        (lambda L, a: L.det(a), [(2, 3)]),
        (lambda L, a: L.cholesky(a), [(4, 2, 3)]),
        (lambda L, a: L.eigh(a), [(2, 3)]),
        (lambda L, a: L.eigh(a, UPLO="X"), [(3, 3)]),
        (lambda L, a, b: L.solve(a, b), [(3, 3), (2,)]),
        (lambda L, a, b: L.solve(a, b), [(3, 3), (2, 2)]),
        (lambda L, a, b: L.solve(a, b), [(2, 3, 3), (4, 3, 1)]),
        (lambda L, a, b: L.solve_triangular(a, b, upper=True), [(3, 3), (3,)]),
        (lambda L, a: L.matrix_norm(a), [(3,)]),
        (lambda L, a: L.matrix_norm(a, 3), [(3, 3)]),
        (lambda L, a: L.vector_norm(a, "fro"), [(3,)]),
        (lambda L, a: L.norm(a, 2), [(2, 3, 3)]),
        (lambda L, a: L.lu_factor(a), [(3,)]),
        (lambda L, a: L.qr(a, "full"), [(3, 3)]),
        (lambda L, a, b: L.lstsq(a, b), [(3, 2), (4, 1)]),
        (lambda L, a, b: L.householder_product(a, b), [(2, 3), (2,)]),
        (lambda L, *ts: L.multi_dot(list(ts)), [(2, 3), (4, 2)]),
        (lambda L, *ts: L.multi_dot(list(ts)), [(2, 3)]),
        (lambda L, a: L.matrix_exp(a), [(2, 3)]),
        (lambda L, a, b: L.cross(a, b), [(2, 3), (3,)]),
    ],
)
def test_errors_like_torch(fn, inputs) -> None:
    arrays = [randn(*s, seed=i) for i, s in enumerate(inputs)]
    with pytest.raises(Exception) as ref:
        fn(torch.linalg, *[torch.tensor(x) for x in arrays])
    with pytest.raises(type(ref.value)):
        fn(linalg, *[Tensor(x) for x in arrays])


@pytest.mark.parametrize("dtype", ["int64", "int32", "float16"])
def test_dtype_errors(dtype: str) -> None:
    a = np.eye(3).astype(dtype)
    for name in ("inv", "det", "cholesky", "eigvalsh", "svdvals", "pinv", "lu_factor"):
        with pytest.raises(RuntimeError) as ref:
            getattr(torch.linalg, name)(torch.tensor(a))
        with pytest.raises(RuntimeError) as ours:
            getattr(linalg, name)(Tensor(a))
        kind = "Low precision" if dtype == "float16" else "Expected a floating point"
        if kind in str(ref.value):
            assert kind in str(ours.value)
    with pytest.raises(RuntimeError, match="linalg.inv: A must be batches of square matrices, but they are 2 by 3"):
        linalg.inv(Tensor(randn(2, 3)))


def test_program_ports_unchanged() -> None:
    """A small torch program (a least-squares fit with a whitening step and a log-det penalty), run once with torch
    and once with `torch` replaced by lazygrad names: same loss and gradients."""

    def program(L, T, x, y, w):
        cov = x.mT @ x / x.shape[0] + 0.1 * T.eye(x.shape[1], dtype=x.dtype)
        chol = L.cholesky(cov)
        white = L.solve_triangular(chol, x.mT, upper=False).mT
        fit = L.lstsq(white, y).solution
        resid = L.vector_norm(white @ fit - y, dim=0)
        logdet = 2 * chol.diagonal(0, -2, -1).log().sum()
        return (resid.sum() + L.matrix_norm(w, "fro") + logdet + L.solve(cov, w).sum() + L.det(L.inv(cov))).reshape(1)

    x, y, w = randn(8, 3, dtype="float64"), randn(8, 2, seed=1, dtype="float64"), randn(3, 3, seed=2, dtype="float64")
    check(
        lambda *t: program(linalg, Tensor, *t),
        lambda *t: program(torch.linalg, torch, *t),
        [x, y, w],
        atol=1e-9,
        grad_atol=1e-8,
    )
