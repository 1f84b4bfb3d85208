"""torch.linalg over lazygrad Tensors: the same names, signatures, named-tuple results, batching over leading dims and
broadcasting, built from Tensor ops (so lazy, fused and differentiable like any other graph).

Cost: the factorizations are unrolled in Python, so a graph grows with the matrix size: LU (solve, inv, lu_factor,
lu_solve) takes min(m, n) elimination steps plus n substitution steps, each a few full-matrix elementwise ops and
one small reduce; cholesky n steps; eigh and svd (svdvals, pinv, lstsq, matrix_rank, cond, norms 2 / nuc)
`sweeps` Jacobi sweeps of n - 1 rounds of disjoint rotations each. Meant for small matrices (n up to a few dozen),
where torch programs use them in losses, geometry and initialization.

Errors: a bad shape or dtype raises at once, with torch's message and class. A singular matrix (inv, solve,
matrix_power with n < 0, lu_factor) or one that is not positive definite (cholesky) raises as torch's (LinAlgError, a
RuntimeError; lu_factor a plain RuntimeError): torch programs catch it to fall back (a jitter added, a pseudo-inverse),
and inf / NaN flowing on instead is a wrong answer found far from its cause. Finding it reads the device, as torch's
own check does (torch documents these as synchronizing on CUDA): the result and its `info` are realized in one
schedule and info (one int per matrix) is read, so the check costs that read and the result's fusion into what
follows, not a second computation. The `_ex` variants are the read-free path, as in torch: they return `info` as a
lazy int32 tensor (0: fine; k: the k-th pivot is zero / the k-th leading minor is not positive definite) and read it
only with `check_errors=True`. Inside a TinyJit capture the plain functions do not check (a replay runs kernels
only, and a read there is an error): they give inf / NaN there, and a jitted function that must know asks `_ex`'s
info.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

from lazygrad.dtype import DType, dtypes
from lazygrad.engine.realize import is_capturing
from lazygrad.tensor import ArgumentError, DTypeError, Tensor, _broadcast_shape, _round_robin, _torch_dims


class LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: a matrix the factorization cannot handle (singular, not positive definite)."""


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class LstsqResult(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


class LUFactorResult(NamedTuple):
    LU: Tensor
    pivots: Tensor


class LUFactorExResult(NamedTuple):
    LU: Tensor
    pivots: Tensor
    info: Tensor


class LUResult(NamedTuple):
    P: Tensor
    L: Tensor
    U: Tensor


class InvExResult(NamedTuple):
    inverse: Tensor
    info: Tensor


class CholeskyExResult(NamedTuple):
    L: Tensor
    info: Tensor


class SolveExResult(NamedTuple):
    result: Tensor
    info: Tensor


# torch's names of dtypes in its messages
_TORCH_DTYPE_NAMES = {
    dtypes.bool: "Bool",
    dtypes.int8: "Char",
    dtypes.uint8: "Byte",
    dtypes.int16: "Short",
    dtypes.int32: "Int",
    dtypes.int64: "Long",
    dtypes.float16: "Half",
    dtypes.bfloat16: "BFloat16",
}


def _check(A: Any, name: str, square: bool = True, arg: str = "A") -> None:
    """torch's checks of a matrix argument: a float32 / float64 tensor of at least 2 dims, square when asked."""
    if not isinstance(A, Tensor):
        raise TypeError(f"{name}(): argument '{arg}' must be Tensor, not {type(A).__name__}")
    if A.ndim < 2:
        raise ArgumentError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")
    if square and A.shape[-1] != A.shape[-2]:
        m, n = A.shape[-2:]
        raise ArgumentError(f"{name}: {arg} must be batches of square matrices, but they are {m} by {n} matrices")
    _check_float(A, name)


def _check_float(A: Tensor, name: str) -> None:
    tname = _TORCH_DTYPE_NAMES.get(A.dtype, A.dtype.name)
    if not dtypes.is_float(A.dtype):
        raise DTypeError(f"{name}: Expected a floating point or complex tensor as input. Got {tname}")
    if A.dtype not in (dtypes.float32, dtypes.float64):
        raise DTypeError(f"{name}: Low precision dtypes not supported. Got {tname}")


def _eps(dt: DType) -> float:
    return 2.0**-52 if dt == dtypes.float64 else 2.0**-23


def _from_lower(A: Tensor, UPLO: str, name: str) -> Tensor:  # noqa: N803 (torch's name)
    """The symmetric matrix that one triangle of A holds (UPLO "L": the lower, as torch)."""
    if UPLO not in ("L", "U"):
        raise ArgumentError(f"{name}: Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    tri = A.tril() if UPLO == "L" else A.triu()
    strict = A.tril(-1) if UPLO == "L" else A.triu(1)
    return tri + strict.transpose(-2, -1)


def _raise_info(
    info: Tensor, out: Sequence[Tensor], name: str, message: str, error: type[RuntimeError] = LinAlgError
) -> None:
    """torch's error (LinAlgError, or a RuntimeError where torch raises that) for the first nonzero info: a device
    read, after the results `out` and info are realized in one schedule (the factorization computed once)."""
    Tensor.realize(*out, info)
    flat = info.flatten().tolist()
    for b, k in enumerate(flat):
        if k:
            where = f"(Batch element {b}): " if info.ndim else ""
            raise error(f"{name}: {where}{message.format(k=k)}")


def _checks() -> bool:
    """Whether inv / solve / cholesky / lu_factor check their info (see the module docstring): not in a capture."""
    return not is_capturing()


def _first_index(bad: Tensor) -> Tensor:
    """1 + the index of the first True along the last dim, 0 where none is: LAPACK's info."""
    n = bad.shape[-1]
    if n == 0:
        return Tensor.zeros(*bad.shape[:-1], dtype=dtypes.int32, device=bad.device)  # (no minor: min of nothing)
    pos = Tensor.arange(1, n + 1, device=bad.device, dtype=dtypes.int32)
    first = bad.where(pos, n + 1).min(-1)
    return (first == n + 1).where(0, first).cast(dtypes.int32)


# *** LU with partial pivoting ***


def _swap_rows(x: Tensor, k: int, hit: Tensor) -> Tensor:
    """x with row k and the row where `hit` (one-hot over rows, batched) is true swapped; hit at k changes nothing."""
    rows = Tensor.arange(x.shape[-2], device=x.device)
    at_k = (rows == k).unsqueeze(-1)
    at_p = hit.unsqueeze(-1)
    row_p = at_p.where(x, 0).sum(-2, keepdim=True)
    row_k = x[..., k : k + 1, :]
    return at_k.where(row_p, at_p.where(row_k, x))


def _lu(A: Tensor, pivot: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # noqa: N803
    """LAPACK's getrf by Gaussian elimination with partial pivoting, one column per step: the packed LU (unit L
    below the diagonal, U on and above it), the row permutation as indices (row i of P^T A is row perm[i] of A),
    the 1-based int32 pivots and info. A zero pivot column is left as it is (info says where), as LAPACK. Without
    pivot, no row exchanges (pivots 1..k) and a zero pivot divides as it is (inf / NaN below it, as torch's)."""
    m, n = A.shape[-2:]
    rows = Tensor.arange(m, device=A.device)
    cols = Tensor.arange(n, device=A.device)
    batch = A.shape[:-2]
    a = A
    perm = rows.expand(*batch, m).unsqueeze(-1)
    pivots: list[Tensor] = []
    info = Tensor.zeros(*batch, dtype=dtypes.int32, device=A.device)
    for k in range(min(m, n)):
        if pivot:
            p = (rows >= k).where(a[..., :, k].abs(), -1).argmax(-1)  # the first largest, as LAPACK's idamax
            hit = rows == p.unsqueeze(-1)
            a, perm = _swap_rows(a, k, hit), _swap_rows(perm, k, hit)
            pivots.append(p.cast(dtypes.int32) + 1)
        else:
            pivots.append(Tensor.full(batch, k + 1, dtype=dtypes.int32, device=A.device))
        piv = a[..., k, k]
        zero = piv == 0
        info = ((info == 0) & zero).where(k + 1, info)
        mult = (rows > k).where(a[..., :, k] / (zero.where(1, piv) if pivot else piv).unsqueeze(-1), 0)
        urow = (cols > k).where(a[..., k, :], 0)
        a = a - mult.unsqueeze(-1) * urow.unsqueeze(-2)
        a = ((cols == k).unsqueeze(-2) & (rows > k).unsqueeze(-1)).where(mult.unsqueeze(-1), a)
    piv_t = Tensor.stack(*pivots, dim=-1) if pivots else Tensor.zeros(*batch, 0, dtype=dtypes.int32, device=A.device)
    return a, perm.squeeze(-1), piv_t, info


def _perm_from_pivots(pivots: Tensor, m: int) -> Tensor:
    """LAPACK's pivots (row k swapped with row pivots[k] - 1, in order) as a permutation of row indices."""
    rows = Tensor.arange(m, device=pivots.device)
    perm = rows.expand(*pivots.shape[:-1], m).unsqueeze(-1)
    for k in range(pivots.shape[-1]):
        perm = _swap_rows(perm, k, rows == (pivots[..., k : k + 1] - 1))
    return perm.squeeze(-1)


def _perm_matrix(perm: Tensor, dt: DType) -> Tensor:
    """The matrix P^T with (P^T A)[i] = A[perm[i]]."""
    cols = Tensor.arange(perm.shape[-1], device=perm.device)
    return (perm.unsqueeze(-1) == cols).cast(dt)


def _tri_solve(T: Tensor, B: Tensor, upper: bool, unit: bool) -> Tensor:  # noqa: N803
    """X with T X = B for triangular T (..., n, n) and B (..., n, k), batch dims broadcast, by substitution one
    row at a time; T's other triangle is not read (nor is its diagonal when unit)."""
    n = T.shape[-1]
    batch = _broadcast_shape(T.shape[:-2], B.shape[:-2])
    T, B = T.expand(*batch, n, n), B.expand(*batch, n, B.shape[-1])
    tri = T.triu(1 if unit else 0) if upper else T.tril(-1 if unit else 0)
    rows = Tensor.arange(n, device=T.device).unsqueeze(-1)
    x = B.zeros_like()
    for i in reversed(range(n)) if upper else range(n):
        # x's rows not solved yet are zero, so the whole row of T times x is the sum over the solved ones
        xi = B[..., i : i + 1, :] - tri[..., i : i + 1, :] @ x
        if not unit:
            xi = xi / T[..., i : i + 1, i : i + 1]
        x = (rows == i).where(xi, x)
    return x


def _lu_solve(LU: Tensor, perm: Tensor, B: Tensor, adjoint: bool) -> Tensor:  # noqa: N803
    """X with A X = B (A^T X = B when adjoint) from A's packed LU and row permutation."""
    if adjoint:  # A^T = U^T L^T P^T
        y = _tri_solve(LU.transpose(-2, -1), B, upper=False, unit=False)
        y = _tri_solve(LU.transpose(-2, -1), y, upper=True, unit=True)
        return _perm_matrix(perm, LU.dtype).transpose(-2, -1) @ y
    y = _tri_solve(LU, _perm_matrix(perm, LU.dtype) @ B, upper=False, unit=True)
    return _tri_solve(LU, y, upper=True, unit=False)


def lu_factor_ex(
    A: Tensor,  # noqa: N803
    *,
    pivot: bool = True,
    check_errors: bool = False,
    _name: str = "torch.linalg.lu_factor_ex",
) -> LUFactorExResult:
    """Packed LU, 1-based int32 pivots and info. pivot=False (torch's on CUDA; its CPU raises): no row exchanges,
    pivots 1..k (lu_solve reads them as no permutation), inf / NaN from a zero pivot on, as torch's."""
    _check(A, _name, square=False)
    lu_, _, piv, info = _lu(A, pivot)
    if check_errors:
        _raise_info(
            info,
            (lu_, piv),
            _name,
            "U[{k},{k}] is zero and using it on lu_solve would result in a division by zero. If you still want to "
            "perform the factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)",
            RuntimeError,
        )
    return LUFactorExResult(lu_, piv, info)


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactorResult:  # noqa: N803
    """Packed LU and 1-based int32 pivots of (batches of) m x n matrices; a zero pivot raises RuntimeError as torch's
    (see the module docstring)."""
    lu_, piv, _ = lu_factor_ex(A, pivot=pivot, check_errors=_checks(), _name="torch.linalg.lu_factor")
    return LUFactorResult(lu_, piv)


def lu(A: Tensor, *, pivot: bool = True) -> LUResult:  # noqa: N803
    """P, L, U with A = P @ L @ U: L (m, k) unit lower, U (k, n) upper, k = min(m, n); no raise (torch's neither).
    pivot=False: A = L @ U, P empty (shape (0,)), as torch's on CUDA."""
    _check(A, "linalg.lu", square=False)
    m, n = A.shape[-2:]
    k = min(m, n)
    lu_, perm, _, _ = _lu(A, pivot)
    low = lu_[..., :, :k].tril(-1) + Tensor.eye(m, k, dtype=A.dtype, device=A.device)
    P = _perm_matrix(perm, A.dtype).transpose(-2, -1) if pivot else Tensor.empty(0, dtype=A.dtype, device=A.device)  # noqa: N806
    return LUResult(P, low, lu_[..., :k, :].triu())


def _as_matrix_rhs(A: Tensor, B: Tensor, name: str) -> tuple[Tensor, bool]:  # noqa: N803
    """B as (..., n, k), and whether it was torch's vector case (B (n,) or B with A's batch dims and n)."""
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.ndim < 2 or Bm.shape[-2] != A.shape[-1]:
        b = f"{Bm.shape[-2]}x{Bm.shape[-1]}" if Bm.ndim >= 2 else f"{B.shape[-1]}x1"
        n = A.shape[-1]
        raise ArgumentError(f"{name}: Incompatible shapes of A and B for the equation AX = B ({n}x{n} and {b})")
    _broadcast_shape(A.shape[:-2], Bm.shape[:-2])
    return Bm, vector


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False) -> Tensor:  # noqa: N803
    """X with A X = B (X A = B when not left; A^H in place of A when adjoint) from lu_factor's LU and pivots."""
    _check(LU, "linalg.lu_solve", arg="LU")
    _check(B, "linalg.lu_solve", square=False, arg="B")
    if pivots.shape != LU.shape[:-1]:
        raise ArgumentError(f"linalg.lu_solve: pivots of shape {pivots.shape} must have shape {LU.shape[:-1]}")
    perm = _perm_from_pivots(pivots, LU.shape[-1])
    if left:
        _as_matrix_rhs(LU, B, "linalg.lu_solve")
        return _lu_solve(LU, perm, B, adjoint)
    return _lu_solve(LU, perm, B.transpose(-2, -1), not adjoint).transpose(-2, -1)


def solve_ex(
    A: Tensor,  # noqa: N803
    B: Tensor,  # noqa: N803
    *,
    left: bool = True,
    check_errors: bool = False,
    _name: str = "torch.linalg.solve_ex",
) -> SolveExResult:
    _check(A, "linalg.solve")
    _check_float(B, "linalg.solve")
    if not left:
        res = solve_ex(A.transpose(-2, -1), B.transpose(-2, -1), check_errors=check_errors, _name=_name)
        return SolveExResult(res.result.transpose(-2, -1), res.info)
    Bm, vector = _as_matrix_rhs(A, B, "linalg.solve")
    lu_, perm, _, info = _lu(A)
    x = _lu_solve(lu_, perm, Bm, adjoint=False)
    x = x.squeeze(-1) if vector else x
    if check_errors:
        _raise_info(info, (x,), _name, "The solver failed because the input matrix is singular.")
    return SolveExResult(x, info)


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:  # noqa: N803
    """X with A X = B (X A = B when not left), batched and broadcast as torch, by LU with partial pivoting. A
    singular A raises LinAlgError (see the module docstring)."""
    return solve_ex(A, B, left=left, check_errors=_checks(), _name="torch.linalg.solve").result


def solve_triangular(
    A: Tensor,  # noqa: N803
    B: Tensor,  # noqa: N803
    *,
    upper: bool,
    left: bool = True,
    unitriangular: bool = False,
) -> Tensor:
    """X with A X = B (X A = B when not left) for triangular A, by substitution; only A's triangle is read."""
    _check(A, "linalg.solve_triangular")
    _check(B, "linalg.solve_triangular", square=False, arg="B")
    if not left:
        At, Bt = A.transpose(-2, -1), B.transpose(-2, -1)
        return solve_triangular(At, Bt, upper=not upper, unitriangular=unitriangular).transpose(-2, -1)
    _as_matrix_rhs(A, B, "linalg.solve_triangular")
    return _tri_solve(A, B, upper, unitriangular)


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvExResult:  # noqa: N803
    _check(A, "linalg.inv")
    eye = Tensor.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    lu_, perm, _, info = _lu(A)
    out = _lu_solve(lu_, perm, eye, adjoint=False)
    if check_errors:
        _raise_info(
            info,
            (out,),
            "linalg.inv",
            "The diagonal element {k} is zero, the inversion could not be completed because the input matrix is "
            "singular.",
        )
    return InvExResult(out, info)


def inv(A: Tensor) -> Tensor:  # noqa: N803
    """The inverse of (batches of) square matrices by LU with partial pivoting: n elimination steps and 2n
    substitution steps. A singular matrix raises LinAlgError (see the module docstring)."""
    return inv_ex(A, check_errors=_checks()).inverse


def det(A: Tensor) -> Tensor:  # noqa: N803
    _check(A, "linalg.det")
    return A.det()


def slogdet(A: Tensor) -> SlogdetResult:  # noqa: N803
    _check(A, "linalg.slogdet")
    return SlogdetResult(*A.slogdet())


def cholesky_ex(
    A: Tensor,  # noqa: N803
    *,
    upper: bool = False,
    check_errors: bool = False,
    _name: str = "linalg.cholesky",
) -> CholeskyExResult:
    """L and info (the first leading minor that is not positive definite, 1-based; 0 when A is positive definite).
    L is NaN from that column on, where LAPACK leaves the rest of A."""
    _check(A, _name)
    low = A._cholesky(upper)
    info = _first_index(~(low.diagonal(0, -2, -1) > 0))
    if check_errors:
        _raise_info(
            info,
            (low,),
            _name,
            "The factorization could not be completed because the input is not positive-definite (the leading "
            "minor of order {k} is not positive-definite).",
        )
    return CholeskyExResult(low, info)


def cholesky(A: Tensor, *, upper: bool = False, _name: str = "linalg.cholesky") -> Tensor:  # noqa: N803
    """L with A = L L^T from A's lower triangle (U with A = U^T U from the upper one when upper); a matrix that is
    not positive definite raises LinAlgError (see the module docstring)."""
    return cholesky_ex(A, upper=upper, check_errors=_checks(), _name=_name).L


def qr(A: Tensor, mode: str = "reduced") -> QRResult:  # noqa: N803
    """Q, R by Householder reflections; mode "reduced" (default), "complete" or "r" (Q empty, as torch)."""
    _check(A, "linalg.qr", square=False)
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentError(
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or 'complete'"
        )
    q, r = A.qr("complete" if mode == "complete" else "reduced")
    if mode == "r":
        q = Tensor.empty(0, dtype=A.dtype, device=A.device)
    return QRResult(q, r)


def svd(A: Tensor, full_matrices: bool = True, *, driver: str | None = None) -> SVDResult:  # noqa: N803
    """U, S, Vh by one-sided Jacobi sweeps (driver is ignored)."""
    _check(A, "linalg.svd", square=False)
    return SVDResult(*A.svd(full_matrices))


def svdvals(A: Tensor, *, driver: str | None = None) -> Tensor:  # noqa: N803
    _check(A, "linalg.svdvals", square=False)
    return A.svd(full_matrices=False)[1]


def _jacobi_eigh(a: Tensor, sweeps: int) -> tuple[Tensor, Tensor]:
    """Eigenvalues (unsorted) and eigenvectors of symmetric matrices by cyclic two-sided Jacobi rotations, all
    disjoint pairs of a round at once (round-robin order, as svd)."""
    n = a.shape[-1]
    batch = a.shape[:-2]
    n2 = n + n % 2  # the padded index is a decoupled zero: it never rotates
    a = a.pad([None] * (a.ndim - 2) + [(0, n2 - n), (0, n2 - n)])
    eye = Tensor.eye(n2, dtype=a.dtype, device=a.device)
    v = eye.expand(*batch, n2, n2)
    for _ in range(sweeps):
        for p_idx, q_idx in _round_robin(n2):
            place_p, place_q = eye[list(p_idx)], eye[list(q_idx)]  # (n2/2, n2) one-hot rows
            diag = a.diagonal(0, -2, -1)
            app, aqq = diag @ place_p.T, diag @ place_q.T
            apq = ((place_p @ a) * place_q).sum(-1)
            # an off-diagonal below rounding of the diagonal is left alone: rotating it changes nothing, and its
            # angle's derivative (1 / apq^2) overflows to NaN gradients
            rot = apq.abs() > _eps(a.dtype) * (app.abs() + aqq.abs())
            theta = (aqq - app) / (2 * rot.where(apq, 1.0))
            t = (theta >= 0).where(1.0, -1.0) / (theta.abs() + (theta * theta + 1).sqrt())
            c = rot.where((1 + t * t).rsqrt(), 1.0).unsqueeze(-2)
            s = rot.where(c.squeeze(-2) * t, 0.0).unsqueeze(-2)
            # J = P^T diag(c) P + Q^T diag(c) Q + P^T diag(s) Q - Q^T diag(s) P
            j = (place_p.T * c) @ place_p + (place_q.T * c) @ place_q + (place_p.T * s) @ place_q
            j = j - (place_q.T * s) @ place_p
            a = j.transpose(-2, -1) @ a @ j
            v = v @ j
    return a.diagonal(0, -2, -1)[..., :n], v[..., :n, :n]


def eigh(A: Tensor, UPLO: str = "L", *, sweeps: int = 10) -> EighResult:  # noqa: N803
    """Eigenvalues (ascending) and orthonormal eigenvectors of symmetric matrices from one triangle (UPLO), by
    Jacobi sweeps: each sweep n - 1 rounds of disjoint rotations, quadratic convergence (10 sweeps reach float64
    rounding for the sizes this is meant for). Eigenvector signs are arbitrary, as LAPACK's."""
    _check(A, "linalg.eigh")
    w, v = _jacobi_eigh(_from_lower(A._symmetric_grad(), UPLO, "linalg.eigh"), sweeps)
    order = w.argsort(-1)
    w = w.gather(-1, order)
    v = v.gather(-1, order.unsqueeze(-2).expand(*v.shape))
    return EighResult(w, v)


def eigvalsh(A: Tensor, UPLO: str = "L", *, sweeps: int = 10) -> Tensor:  # noqa: N803
    _check(A, "linalg.eigvalsh")
    return eigh(A, UPLO, sweeps=sweeps).eigenvalues


def _tolerance(s: Tensor, shape: tuple[int, ...], atol: Any, rtol: Any) -> Tensor:
    """torch's cut-off for singular values: max(atol, rtol * max(S)); rtol is eps * max(m, n) when neither is given
    and 0 when only atol is."""
    if rtol is None:
        rtol = _eps(s.dtype) * max(shape[-2:]) if atol is None or (not isinstance(atol, Tensor) and atol <= 0) else 0.0
    tol = rtol * s.max(-1, keepdim=True) if s.shape[-1] else s.sum(-1, keepdim=True)
    return tol if atol is None else tol.maximum(atol if not isinstance(atol, Tensor) else atol.unsqueeze(-1))


def pinv(A: Tensor, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Tensor:  # noqa: N803
    """The pseudo-inverse through the SVD; singular values at or below the tolerance count as zero."""
    _check(A, "linalg.pinv", square=hermitian)
    u, s, vh = A.svd(full_matrices=False)
    tol = _tolerance(s, A.shape, atol, rtol)
    keep = s > tol
    inv_s = keep.where(1 / keep.where(s, 1.0), 0.0)
    return (vh.transpose(-2, -1) * inv_s.unsqueeze(-2)) @ u.transpose(-2, -1)


def matrix_rank(A: Tensor, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Tensor:  # noqa: N803
    _check(A, "linalg.matrix_rank", square=hermitian)
    s = svdvals(A)
    return (s > _tolerance(s, A.shape, atol, rtol)).cast(dtypes.int64).sum(-1)


def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None) -> LstsqResult:  # noqa: N803
    """The least-squares solution through the pseudo-inverse (any rank), with the fields torch's driver fills
    (default "gelsy": solution and rank): residuals (m > n; "gels", "gelsd", "gelss") are computed without
    checking that A has full rank, which torch checks (a device read) to return an empty tensor instead."""
    _check(A, "torch.linalg.lstsq", square=False)
    _check_float(B, "torch.linalg.lstsq")
    if driver not in (None, "gels", "gelsy", "gelsd", "gelss"):
        raise ArgumentError(
            f"torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), got {driver}"
        )
    m, n = A.shape[-2:]
    vector = B.ndim == A.ndim - 1
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.shape[-2] != m:
        raise ArgumentError(
            f"torch.linalg.lstsq: input.size(-2) should match other.size(-2), got {m} and {Bm.shape[-2]}"
        )
    u, s, vh = A.svd(full_matrices=False)
    tol = _tolerance(s, A.shape, None, rcond)
    keep = s > tol
    inv_s = keep.where(1 / keep.where(s, 1.0), 0.0)
    x = (vh.transpose(-2, -1) * inv_s.unsqueeze(-2)) @ (u.transpose(-2, -1) @ Bm)
    empty = Tensor.empty(0, dtype=A.dtype, device=A.device)
    driver = driver or "gelsy"
    residuals = empty
    if driver != "gelsy" and m > n:
        residuals = ((A @ x - Bm) ** 2).sum(-2)
    rank = keep.cast(dtypes.int64).sum(-1) if driver != "gels" else empty.cast(dtypes.int64)
    svals = s.detach() if driver in ("gelsd", "gelss") else empty  # torch does not differentiate them
    return LstsqResult(x.squeeze(-1) if vector else x, residuals, rank, svals)


def matrix_power(A: Tensor, n: int) -> Tensor:  # noqa: N803
    _check(A, "linalg.matrix_power")
    return inv(A).matrix_power(-n) if n < 0 else A.matrix_power(n)


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002 (torch's name)
    if input.ndim != other.ndim:
        raise ArgumentError("linalg.cross: inputs must have the same number of dimensions.")
    return input.cross(other, dim)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    shape = _broadcast_shape(x.shape, y.shape)
    return (x._broadcast_to(shape) * y._broadcast_to(shape)).sum(dim)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: N803
    return A.diagonal(offset, dim1, dim2)


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """The product of a chain of matrices (the first may be a row vector, the last a column vector) in the order
    that takes fewest multiplications (the textbook O(k^3) dynamic program over the chain's sizes)."""
    if len(tensors) < 2:
        raise ArgumentError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    for i, t in enumerate(tensors):
        if t.ndim != 2 and not (t.ndim == 1 and i in (0, len(tensors) - 1)):
            raise ArgumentError(
                f"multi_dot(): tensor {i} must be 2D"
                + (" or 1D" if i in (0, len(tensors) - 1) else "")
                + f" but got {t.ndim}D"
            )
    first_vec, last_vec = tensors[0].ndim == 1, tensors[-1].ndim == 1
    mats = [t.unsqueeze(0) if i == 0 and first_vec else t for i, t in enumerate(tensors)]
    if last_vec:
        mats[-1] = mats[-1].unsqueeze(-1)
    for i in range(len(mats) - 1):
        if mats[i].shape[1] != mats[i + 1].shape[0]:
            a, b = mats[i].shape, mats[i + 1].shape
            raise ArgumentError(
                f"multi_dot(): tensors {i} and {i + 1} with shapes {tuple(a)} and {tuple(b)} cannot be multiplied"
            )
    dims = [mats[0].shape[0]] + [m.shape[1] for m in mats]
    k = len(mats)
    cost = [[0] * k for _ in range(k)]
    split = [[0] * k for _ in range(k)]
    for length in range(1, k):
        for i in range(k - length):
            j = i + length
            cost[i][j] = math.inf
            for s in range(i, j):
                c = cost[i][s] + cost[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, s

    def chain(i: int, j: int) -> Tensor:
        return mats[i] if i == j else chain(i, split[i][j]) @ chain(split[i][j] + 1, j)

    out = chain(0, k - 1)
    if last_vec:
        out = out.squeeze(-1)
    return out.squeeze(0) if first_vec else out


def vector_norm(
    x: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
) -> Tensor:  # noqa: A002
    if isinstance(ord, str):
        raise TypeError("linalg_vector_norm(): argument 'ord' must be Number, not str")
    if not dtypes.is_float(x.dtype):
        tname = _TORCH_DTYPE_NAMES.get(x.dtype, x.dtype.name)
        raise DTypeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {tname}")
    if dtype is not None:
        x = x.cast(dtype)
    return x.norm(ord, _torch_dims(dim), keepdim)


def _keep_dims(out: Tensor, dims: tuple[int, int], keepdim: bool) -> Tensor:
    for d in sorted(dims) if keepdim else ():
        out = out.unsqueeze(d)
    return out


def matrix_norm(
    A: Tensor,  # noqa: N803
    ord: float | str = "fro",  # noqa: A002
    dim: tuple[int, int] = (-2, -1),
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> Tensor:
    """Frobenius, nuclear, max-column-sum (1), max-row-sum (inf), largest / smallest singular value (2 / -2)."""
    if A.ndim < 2:
        raise ArgumentError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    _check_float(A, "linalg.matrix_norm")
    if len(dim) != 2:
        raise ArgumentError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {', '.join(map(str, dim))}")
    d = (dim[0] % A.ndim, dim[1] % A.ndim)
    if d[0] == d[1]:
        raise ArgumentError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    if ord not in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
        raise ArgumentError(f"linalg.matrix_norm: Order {ord} not supported.")
    x = A.cast(dtype) if dtype is not None else A
    if ord == "fro":
        return x.norm("fro", d, keepdim)
    x = x.movedim(d, (-2, -1))
    if ord in ("nuc", 2, -2):
        s = x.svd(full_matrices=False)[1]
        out = s.sum(-1) if ord == "nuc" else s.max(-1) if ord == 2 else s.min(-1)
    elif ord in (1, -1):
        sums = x.abs().sum(-2)
        out = sums.max(-1) if ord == 1 else sums.min(-1)
    else:
        sums = x.abs().sum(-1)
        out = sums.max(-1) if ord == math.inf else sums.min(-1)
    return _keep_dims(out, d, keepdim)


def norm(
    A: Tensor,  # noqa: N803
    ord: float | str | None = None,  # noqa: A002
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> Tensor:
    """A vector norm (dim an int, or A 1-d, or ord None over all of A) or a matrix norm (dim a pair, or A 2-d)."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, tuple(dim or (-2, -1)), keepdim, dtype=dtype)
    if dim is None and ord is not None and A.ndim != 1:
        raise ArgumentError(
            f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {A.ndim}D."
        )
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def cond(A: Tensor, p: Any = None) -> Tensor:  # noqa: N803
    """The condition number in norm p (None: 2, the ratio of the extreme singular values)."""
    _check(A, "linalg.cond", square=p not in (None, 2, -2))
    if p in (None, 2, -2):
        s = svdvals(A)
        big, small = s.max(-1), s.min(-1)
        return big / small if p != -2 else small / big
    # torch's: inf for a singular matrix, no raise
    inverse, info = inv_ex(A)
    return (info == 0).where(matrix_norm(A, p) * matrix_norm(inverse, p), math.inf)


# Taylor terms after scaling to norm <= 1/2: 0.5^17 / 17! < 1e-20 (float64 rounding); and the most squarings,
# which bounds the 1-norm this is accurate for (0.5 * 2^40), as the count of squarings is a device value here
_EXP_TERMS, _EXP_SQUARINGS = 16, 40


def matrix_exp(A: Tensor) -> Tensor:  # noqa: N803
    """exp(A) by scaling and squaring: A / 2^s has 1-norm <= 1/2, its Taylor series, then s squarings. s depends on
    A's values, so all _EXP_SQUARINGS squarings are in the graph and each is kept only while it is < s (per matrix
    of a batch): that costs _EXP_SQUARINGS + _EXP_TERMS matmuls, no device read."""
    _check(A, "linalg.matrix_exp")
    norm1 = A.detach().abs().sum(-2).max(-1)
    steps = (norm1 * 2).log2().ceil().maximum(0).minimum(_EXP_SQUARINGS).unsqueeze(-1).unsqueeze(-1)
    x = A * (2.0**-steps)
    eye = Tensor.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    out, term = eye + x, x
    for i in range(2, _EXP_TERMS + 1):
        term = term @ x / i
        out = out + term
    for i in range(_EXP_SQUARINGS):
        out = (steps > i).where(out @ out, out)
    return out


def householder_product(A: Tensor, tau: Tensor) -> Tensor:  # noqa: N803
    """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T, v_i the i-th column of A below the
    diagonal with a 1 on it (LAPACK's orgqr)."""
    name = "torch.linalg.householder_product"
    _check(A, name, square=False, arg="input")
    m, n = A.shape[-2:]
    if m < n:
        raise ArgumentError(f"{name}: input.shape[-2] must be greater than or equal to input.shape[-1]")
    if tau.shape[-1] > n:
        raise ArgumentError(f"{name}: input.shape[-1] must be greater than or equal to tau.shape[-1]")
    if tau.shape[:-1] != A.shape[:-2]:
        raise ArgumentError(f"{name}: Expected batch dimensions of tau to be equal to input.shape[:-2]")
    rows = Tensor.arange(m, device=A.device)
    q = Tensor.eye(m, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], m, m)
    for i in range(tau.shape[-1]):
        v = (rows == i).where(1.0, (rows > i).where(A[..., :, i], 0.0)).cast(A.dtype)
        q = q - tau[..., i : i + 1].unsqueeze(-1) * (q @ v.unsqueeze(-1)) * v.unsqueeze(-2)
    return q[..., :, :n]


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803
    """x^0, x^1, ..., x^(N-1) along a new last dim, batched over x's leading dims."""
    if x.ndim < 1:
        raise ArgumentError("linalg.vander: x must have at least 1 dimension")
    if N is not None and N <= 1:
        raise ArgumentError("N must be greater than 1.")
    n = x.shape[-1] if N is None else N
    return x.reshape(-1).vander(n, increasing=True).reshape(*x.shape, n)


__all__ = [
    "LinAlgError",
    "norm",
    "vector_norm",
    "matrix_norm",
    "inv",
    "inv_ex",
    "det",
    "slogdet",
    "solve",
    "solve_ex",
    "solve_triangular",
    "cholesky",
    "cholesky_ex",
    "qr",
    "svd",
    "svdvals",
    "eigh",
    "eigvalsh",
    "pinv",
    "lstsq",
    "matrix_rank",
    "matrix_power",
    "cross",
    "vecdot",
    "multi_dot",
    "diagonal",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "lu",
    "cond",
    "matrix_exp",
    "householder_product",
    "vander",
]
