"""Fuzz: every opt alone and random opt lists, on kernels of many shapes, compute what NOOPT computes.

Shapes are chosen so that sizes are not multiples of the vector width or of the thread count, kernels read
through masks (pad), broadcasts and transposes, and both output and reduce axes get vectorized."""

import random

import numpy as np
import pytest

from lazygrad import Device, Tensor
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps
from lazygrad.device import Buffer
from lazygrad.dtype import dtypes
from lazygrad.engine.realize import CompiledRunner, ExecItem


def realized(*shape: int, seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).realize()


def one_kernel(t: Tensor):
    (si,) = t.schedule()
    return si.ast, list(si.bufs)


def run(ast, bufs, opts: list[Opt] | None) -> np.ndarray:
    out = Buffer("CPU", bufs[0].size, bufs[0].dtype)
    spec = get_program(ast, Device["CPU"].renderer, opts)
    ExecItem(CompiledRunner("CPU", spec), [out, *bufs[1:]]).run()
    return np.frombuffer(out.as_bytes(), dtype=bufs[0].dtype.fmt).copy()


def kernels():
    a, b = realized(24, 40), realized(24, 40, seed=1)
    c = realized(37, 64, seed=2)
    m1, m2 = realized(24, 32, seed=3), realized(32, 48, seed=4)
    i1, i2 = ((realized(24, 40, seed=s) * 3).cast(dtypes.int64).realize() for s in (6, 7))
    return {
        "ew_broadcast_transpose": (a * b + a.T.T.exp2()) - realized(40, seed=5),
        "ew_pad_masked": a.pad(((1, 3), (2, 2))) * 2 + 1,
        "ew_max_where": (a > b).where(a, b.exp2()).maximum(b),
        "reduce_rows": (c * 3).sum(-1),
        "reduce_cols_max": c.max(0),
        "softmax_row": (c - c.max(-1, keepdim=True).realize()).exp2().sum(-1),
        "matmul": (m1.reshape(24, 1, 32) * m2.T.reshape(1, 48, 32)).sum(2),
        "reduce_all": c.sum(),
        "int_cast": (a * 10).cast(dtypes.int32).sum(0) * 3,
        # bools from int64 compares selected lane by lane (an upcast one failed to compile: an 8-byte compare's type)
        "int64_compare_select": (a > 0).where((i1.abs() == i2), i1.flip(0).abs() == i2),
    }


KERNELS = kernels()


def candidate_opts(k: Kernel) -> list[Opt]:
    out = []
    n_glob, n_red = len(k.axes_of(AxisType.GLOBAL)), len(k.axes_of(AxisType.REDUCE))
    for i in range(n_glob):
        out += [Opt(OptOps.UPCAST, i, a) for a in (0, 2, 3, 4, 8, 16)]
        out += [Opt(OptOps.THREAD, i, a) for a in (0, 2, 3)]
        out += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, n_glob)]
        out += [Opt(OptOps.BLOCK, i, a) for a in (0, 2, 3)]
    for i in range(n_red):
        out += [Opt(OptOps.UNROLL, i, a) for a in (0, 2, 4, 8, 16)]
        out += [Opt(OptOps.THREAD, n_glob + i, a) for a in (2, 3, 4)]
    return out


@pytest.mark.parametrize("name", list(KERNELS))
def test_opts_alone_and_combined(name):
    ast, bufs = one_kernel(KERNELS[name])
    ref = run(ast, bufs, [])
    k = Kernel(ast, Device["CPU"].renderer)
    k.merge_axes()
    singles = candidate_opts(k)
    rng = random.Random(name)
    lists = [[o] for o in singles] + [rng.sample(singles, rng.randint(2, min(4, len(singles)))) for _ in range(25)]
    tried = 0
    for opts in lists:
        try:
            out = run(ast, bufs, opts)
        except KernelOptError:
            continue
        tried += 1
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5, err_msg=f"{name}: opts {opts}")
    assert tried >= 5


def test_vector_and_threads_at_odd_sizes():
    # 1001 rows over 2 cores (uneven), 24 columns as 8-wide vectors; a 999-long reduce split in 3 partials
    a, b = realized(1001, 24), realized(1001, 24, seed=1)
    ast, bufs = one_kernel(a * b + 1)
    ref = run(ast, bufs, [])
    out = run(ast, bufs, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.THREAD, 0, 0)])
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    spec = get_program(ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.THREAD, 0, 0)])
    # the THREAD loop: an OpenMP one, or outlined into functions calling libgomp's (ClangRenderer.outline_threads)
    assert "lg_float32x8" in spec.src and ("omp parallel for" in spec.src or "GOMP_parallel_loop" in spec.src)
    ast, bufs = one_kernel(realized(999, seed=2).sum())
    ref = run(ast, bufs, [])
    out = run(ast, bufs, [Opt(OptOps.THREAD, 0, 3), Opt(OptOps.UNROLL, 0, 3)])
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 7, 100, 1000, 4099, 1 << 18])
def test_default_opts_match_numpy(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = np.random.default_rng(n + 1).standard_normal(n).astype(np.float32)
    np.testing.assert_allclose((Tensor(x) + Tensor(y)).numpy(), x + y)
    np.testing.assert_allclose(Tensor(x).sum().numpy(), x.sum(dtype=np.float64), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(Tensor(x).max().numpy(), x.max())


def test_vector_exp2_special_values():
    x = np.array(
        [np.inf, -np.inf, np.nan, 128.0, 127.5, -126.0, -149.0, -151.0, 200.0, -200.0, 0.0, 0.5, -0.5, 1e-8, 3.3, -7.7],
        np.float32,
    )
    ast, bufs = one_kernel(Tensor(x).realize().exp2())
    spec = get_program(ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 0, 16)])
    assert "lg_exp2_" in spec.src
    out = run(ast, bufs, [Opt(OptOps.UPCAST, 0, 16)])
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(out, np.exp2(x.astype(np.float64)).astype(np.float32), rtol=2e-7, atol=0)
