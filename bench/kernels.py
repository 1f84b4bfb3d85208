"""Kernel speed on the CPU: lazygrad vs numpy vs torch (vs tinygrad when importable), one table per run.

    python bench/kernels.py            # everything
    python bench/kernels.py matmul     # only the rows whose name contains "matmul"

lazygrad rows time the compiled kernels of one schedule, launched on preallocated buffers (what a training step
replays); compile time is excluded. The memory-bound rows are also given as a fraction of a STREAM-style triad
(a[i] = b[i] + s * c[i]) written in C, compiled here at -O3 for this machine and run on all cores.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

# the environment caps OpenBLAS at its AVX2 (Haswell) kernels and a small L2: numpy is compared at its best here, so
# both are unset before numpy loads OpenBLAS (in this process only; the tests keep the environment's settings)
for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import numpy as np  # noqa: E402

os.environ.setdefault("DEV", "CPU")  # tinygrad's CPU backend (C via clang), the one the issue compares with

from lazygrad import Tensor  # noqa: E402
from lazygrad.device import Device  # noqa: E402
from lazygrad.engine.realize import ExecItem, lower_schedule_item  # noqa: E402
from lazygrad.runtime.ops_cpu import find_c_compiler  # noqa: E402

TRIAD_SRC = """
#include <omp.h>
void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, long n) {
  #pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
"""


def bench(fn: Callable[[], object], min_time: float = 0.3, max_reps: int = 200) -> float:
    """Median seconds per call, after a warm-up call."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 5 or time.perf_counter() - start < min_time):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return statistics.median(times)


def compiled(*tensors: Tensor) -> Callable[[], None]:
    """The kernels that compute `tensors`, as one call that runs them in order on fixed buffers."""
    items = [ei for si in Tensor.schedule(*tensors) if (ei := lower_schedule_item(si)) is not None]

    def run(items: list[ExecItem] = items) -> None:
        for ei in items:
            ei.run()

    return run


def triad_fn(n: int) -> Callable[[], None]:
    cc = find_c_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "triad.so")
        subprocess.run(
            [cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-x", "c", "-", "-o", so],
            input=TRIAD_SRC,
            text=True,
            check=True,
        )
        lib = ctypes.CDLL(so)
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    ptr = [x.ctypes.data_as(ctypes.c_void_p) for x in (a, b, c)]
    return lambda: lib.triad(*ptr, ctypes.c_float(3.0), ctypes.c_long(n))


class Table:
    def __init__(self) -> None:
        print(f"{'benchmark':40s} {'time':>10s} {'GB/s':>7s} {'GFLOPS':>8s}  {'ratio':>24s}")

    def row(self, name: str, t: float, nbytes: float = 0, flops: float = 0, ratio: str = "") -> None:
        gbs = f"{nbytes / t / 1e9:7.2f}" if nbytes else " " * 7
        gflops = f"{flops / t / 1e9:8.2f}" if flops else " " * 8
        print(f"{name:40s} {t * 1e3:8.3f}ms {gbs} {gflops}  {ratio:>24s}", flush=True)


def try_torch():  # noqa: ANN201
    try:
        import torch

        return torch
    except ImportError:
        return None


def try_tinygrad():  # noqa: ANN201
    try:
        import tinygrad
    except ImportError:
        return None
    try:  # its CPU device compiles with clang: without it the peer rows are left out, not the bench
        (tinygrad.Tensor([1.0]) + 1).realize()
    except Exception as e:  # noqa: BLE001
        print(f"tinygrad: cannot run here ({type(e).__name__}: {str(e)[:80]}), no peer rows")
        return None
    return tinygrad


def blas_kernel() -> str:
    """Which OpenBLAS build and kernel numpy runs (threadpoolctl), so the matmul peer is named."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (pip install threadpoolctl)"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in blas) or "none"


def main(only: str = "") -> None:
    print(f"numpy BLAS: {blas_kernel()}")
    torch, tinygrad = try_torch(), try_tinygrad()
    rng = np.random.default_rng(0)
    table = Table()

    def want(name: str) -> bool:
        return only in name

    if want("add"):
        n = 1_000_000
        Device["CPU"]  # loads libgomp with lazygrad's cap on its idle spin: the triad peer runs on the same copy
        triad_small, triad_big = bench(triad_fn(n)), bench(triad_fn(16 * n))
        table.row("STREAM triad 1M (C -O3, all cores)", triad_small, 12 * n)
        table.row("STREAM triad 16M (C -O3, all cores)", triad_big, 12 * 16 * n)
        an, bn = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        cn = np.empty_like(an)
        t_np = bench(lambda: np.add(an, bn, out=cn))
        a, b = Tensor(an).realize(), Tensor(bn).realize()
        t_lg = bench(compiled(a + b))
        t_e2e = bench(lambda: (Tensor(an) + Tensor(bn)).realize())
        t_shared = bench(lambda: (Tensor.from_numpy(an) + Tensor.from_numpy(bn)).realize())
        ref = t_np
        torch_e2e: dict[str, float] = {}  # torch's peers, where torch is here
        if torch is not None:
            at, bt, ct = torch.from_numpy(an), torch.from_numpy(bn), torch.empty(n)
            ref = bench(lambda: torch.add(at, bt, out=ct))
            torch_e2e[""] = bench(lambda: torch.tensor(an) + torch.tensor(bn))
            torch_e2e[", from_numpy"] = bench(lambda: torch.from_numpy(an) + torch.from_numpy(bn))
            table.row("add 1M torch add(out=)", ref, 12 * n)
        table.row("add 1M numpy add(out=)", t_np, 12 * n, ratio=f"{t_np / ref:.2f}x torch time")
        table.row(
            "add 1M lazygrad kernel", t_lg, 12 * n, ratio=f"{t_lg / ref:.2f}x torch, {triad_small / t_lg:.0%} triad"
        )
        # end to end from numpy arrays: Tensor(x) copies x in (4 MB each: most of the time), Tensor.from_numpy
        # shares its memory; torch's peers do the same (torch.tensor copies, torch.from_numpy shares)
        for name, t in (("", t_e2e), (", from_numpy", t_shared)):
            if name in torch_e2e:
                table.row(f"add 1M torch end-to-end{name}", torch_e2e[name], 12 * n)
            ratio = f"{t / torch_e2e[name]:.2f}x torch e2e" if name in torch_e2e else ""
            table.row(f"add 1M lazygrad end-to-end{name}", t, 12 * n, ratio=ratio)

    if want("sum"):
        n = 16 * 1024 * 1024
        xn = rng.standard_normal(n).astype(np.float32)
        ref = t_np = bench(lambda: xn.sum())
        if torch is not None:
            xt = torch.from_numpy(xn)
            ref = bench(lambda: xt.sum())
            table.row("sum 16M torch", ref, 4 * n)
        table.row("sum 16M numpy", t_np, 4 * n)
        x = Tensor(xn).realize()
        t_lg = bench(compiled(x.sum()))
        table.row("sum 16M lazygrad", t_lg, 4 * n, ratio=f"{ref / t_lg:.2f}x torch GB/s")

    if want("softmax"):
        xn = rng.standard_normal((4096, 4096)).astype(np.float32)
        nbytes = 2 * xn.nbytes
        t_np = bench(
            lambda: (
                np.exp(xn - xn.max(-1, keepdims=True)) / np.exp(xn - xn.max(-1, keepdims=True)).sum(-1, keepdims=True)
            ),
            max_reps=5,
        )
        ref = t_np
        if torch is not None:
            xt = torch.from_numpy(xn)
            ref = bench(lambda: torch.softmax(xt, -1))
            table.row("softmax 4096x4096 torch", ref, nbytes)
        table.row("softmax 4096x4096 numpy", t_np, nbytes)
        x = Tensor(xn).realize()
        t_lg = bench(compiled(x.softmax(-1)))
        table.row("softmax 4096x4096 lazygrad", t_lg, nbytes, ratio=f"{ref / t_lg:.2f}x torch speed")
        if tinygrad is not None:
            table.row(
                "softmax 4096x4096 tinygrad", _tinygrad_time(lambda T: T(xn).realize(), lambda a: a.softmax(-1)), nbytes
            )

    for n in (256, 512, 1024, 2048):
        if not want(f"matmul {n}"):
            continue
        an, bn = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        flops = 2 * n**3
        t_np = bench(lambda: an @ bn)
        table.row(f"matmul {n} numpy", t_np, flops=flops)
        if torch is not None:
            at, bt = torch.from_numpy(an), torch.from_numpy(bn)
            table.row(f"matmul {n} torch", bench(lambda: at @ bt), flops=flops)
        a, b = Tensor(an).realize(), Tensor(bn).realize()
        t_lg = bench(compiled(a @ b))
        table.row(f"matmul {n} lazygrad", t_lg, flops=flops, ratio=f"{t_np / t_lg:.0%} of numpy GFLOPS")
        if n >= 1024:  # a linear layer's x @ w.T: the weight read along its rows
            t_npt = bench(lambda: an @ bn.T)
            table.row(f"matmul {n} x@w.T numpy", t_npt, flops=flops)
            t_lgt = bench(compiled(a @ b.T))
            table.row(f"matmul {n} x@w.T lazygrad", t_lgt, flops=flops, ratio=f"{t_npt / t_lgt:.0%} of numpy GFLOPS")
        if tinygrad is not None and n <= 1024:
            table.row(
                f"matmul {n} tinygrad",
                _tinygrad_time(lambda T: (T(an).realize(), T(bn).realize()), lambda ab: ab[0] @ ab[1]),
                flops=flops,
            )

    if want("conv2d"):
        xn = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
        wn = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
        flops = 2 * 32 * 64 * 64 * 9 * 32 * 32
        ref = None
        if torch is not None:
            xt, wt = torch.from_numpy(xn), torch.from_numpy(wn)
            ref = bench(lambda: torch.nn.functional.conv2d(xt, wt, padding=1))
            table.row("conv2d 32x64x32x32 3x3 torch", ref, flops=flops)
        x, w = Tensor(xn).realize(), Tensor(wn).realize()
        t_lg = bench(compiled(x.conv2d(w, padding=1)))
        table.row(
            "conv2d 32x64x32x32 3x3 lazygrad", t_lg, flops=flops, ratio=f"{ref / t_lg:.2f}x torch speed" if ref else ""
        )
        # as a layer uses it: the output read by the next op (a blocked conv's output is a view its reader copies)
        bn = rng.standard_normal(64).astype(np.float32)
        if torch is not None:
            bt = torch.from_numpy(bn)
            ref = bench(lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=1).relu())
            table.row("conv2d + bias + relu torch", ref, flops=flops)
        t_lg = bench(compiled(x.conv2d(w, Tensor(bn).realize(), padding=1).relu()))
        table.row(
            "conv2d + bias + relu lazygrad", t_lg, flops=flops, ratio=f"{ref / t_lg:.2f}x torch speed" if ref else ""
        )

        # a ResNet stage's stride-2 conv and a DCGAN / U-Net upsampling layer (both computed over phases)
        ws2 = rng.standard_normal((128, 64, 3, 3)).astype(np.float32)
        wt2 = rng.standard_normal((64, 32, 4, 4)).astype(np.float32)
        xt2 = rng.standard_normal((16, 64, 16, 16)).astype(np.float32)
        for name, flops, peer, ours in (
            (
                "conv2d s=2 32x64x32x32->128",
                2 * 32 * 128 * 64 * 9 * 16 * 16,
                lambda T: (lambda x, w: lambda: T.nn.functional.conv2d(x, w, stride=2, padding=1))(
                    T.from_numpy(xn), T.from_numpy(ws2)
                ),
                lambda: compiled(x.conv2d(Tensor(ws2).realize(), stride=2, padding=1)),
            ),
            (
                "convT2d s=2 16x64x16x16->32",
                2 * 16 * 64 * 16 * 16 * 32 * 16,
                lambda T: (lambda x, w: lambda: T.nn.functional.conv_transpose2d(x, w, stride=2, padding=1))(
                    T.from_numpy(xt2), T.from_numpy(wt2)
                ),
                lambda: compiled(Tensor(xt2).realize().conv_transpose2d(Tensor(wt2).realize(), stride=2, padding=1)),
            ),
        ):
            ref = None
            if torch is not None:
                ref = bench(peer(torch))
                table.row(f"{name} torch", ref, flops=flops)
            t_lg = bench(ours())
            table.row(f"{name} lazygrad", t_lg, flops=flops, ratio=f"{ref / t_lg:.2f}x torch speed" if ref else "")

    if want("digits"):
        for name, cin, cout in (("conv1", 1, 16), ("conv2", 16, 32)):
            _conv_grads(table, torch, rng, f"digits {name}", 64, cin, cout, 8, 1)
    if want("strided"):  # a CIFAR ResNet's stride-2 stages (bench/dispatch.py resnet_step), in training
        for cin, cout, size in ((16, 32, 32), (32, 64, 16)):
            _conv_grads(table, torch, rng, f"strided {size}^2", 32, cin, cout, size, 2)


def _conv_grads(  # noqa: ANN001
    table: Table, torch, rng: np.random.Generator, label: str, n: int, cin: int, cout: int, size: int, stride: int
) -> None:
    """A 3x3 pad 1 conv with bias of n images of size^2 whose gradients are taken (the digits CNN's: batch 64 on 8^2,
    lazygrad/examples/digits.py), forward and both gradients, each against torch's (oneDNN) with the upstream
    gradient given."""
    out_size = (size - 1) // stride + 1
    xn, wn = rng.standard_normal((n, cin, size, size), np.float32), rng.standard_normal((cout, cin, 3, 3), np.float32)
    bn, gn = rng.standard_normal(cout, np.float32), rng.standard_normal((n, cout, out_size, out_size), np.float32)
    x, w, b = (Tensor(a, requires_grad=True).realize() for a in (xn, wn, bn))
    out = x.conv2d(w, b, stride=stride, padding=1)
    dx, dw = out.gradient(x, w, gradient=Tensor(gn).realize())
    flops = 2 * n * cout * cin * 9 * out_size**2
    peers: dict[str, Callable[[], object]] = {}
    if torch is not None:
        xt, wt, bt, gt = (torch.from_numpy(a) for a in (xn, wn, bn, gn))
        conv_args = ([stride] * 2, [1, 1], [1, 1], False, [0, 0], 1)
        backward = torch.ops.aten.convolution_backward
        peers = {
            "forward": lambda: torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=1),
            "input grad": lambda: backward(gt, xt, wt, None, *conv_args, [True, False, False]),
            "weight grad": lambda: backward(gt, xt, wt, None, *conv_args, [False, True, False]),
        }
    for part, t in (("forward", out), ("input grad", dx), ("weight grad", dw)):
        name = f"{label} {cin}->{cout} {part}"
        ref = bench(peers[part]) if part in peers else None
        if ref is not None:
            table.row(f"{name} torch", ref, flops=flops)
        t_lg = bench(compiled(t))
        table.row(f"{name} lazygrad", t_lg, flops=flops, ratio=f"{ref / t_lg:.2f}x torch speed" if ref else "")


def _tinygrad_time(make: Callable, op: Callable) -> float:
    """tinygrad's kernels replayed by its TinyJit (a plain re-realize of the same graph would hit its cache)."""
    from tinygrad import Tensor as TT
    from tinygrad import TinyJit

    inputs = make(TT)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    step = TinyJit(lambda *xs: op(xs if len(xs) > 1 else xs[0]).realize())
    return bench(lambda: step(*inputs))


if __name__ == "__main__":
    main(" ".join(sys.argv[1:]))
