"""GPU kernels (CL or CUDA): elementwise add bandwidth and matmul throughput, against torch in the same run.

    DEV=CUDA python bench/gpu.py            # on a GPU: 1M and 256M adds, N=4096 fp32 / fp16 matmul
    DEV=CL python bench/gpu.py              # any OpenCL device; on PoCL (the CPU) the sizes are cut down
    SIZES=1000000 MATMUL_N=1024 python bench/gpu.py

Kernel times are the device's own (CL events, CUDA events) for the compiled kernels of one schedule launched on
preallocated buffers: compile time excluded. The add rows are also given as a fraction of PEAK_GBS, the device's
copy bandwidth (default 3000 GB/s, an H100's HBM3; on other devices set it, or read the fraction as relative).
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from typing import Callable

import numpy as np

from lazygrad import Device, Tensor, dtypes
from lazygrad.dtype import DType
from lazygrad.engine.realize import ExecItem, lower_schedule_item

DEVICE = Device.canonicalize(os.getenv("DEV", "CL"))
# PoCL, an OpenCL device on the CPU: older PoCL names its device pthread-..., newer ones cpu-<arch>-<model>
_POCL_NAMES = ("pthread", "Portable Computing Language")
ON_CPU = DEVICE.startswith("CL") and any(s in Device[DEVICE].describe() for s in _POCL_NAMES)
SIZES = [int(s) for s in os.getenv("SIZES", "1000000,4000000" if ON_CPU else "1000000,256000000").split(",")]
MATMUL_N = int(os.getenv("MATMUL_N", "512" if ON_CPU else "4096"))
PEAK_GBS = float(os.getenv("PEAK_GBS", "3000"))


def kernels_of(t: Tensor) -> list[ExecItem]:
    """The compiled kernels that compute `t` (its inputs realized already), ready to launch again and again."""
    items = [lower_schedule_item(si) for si in t.schedule()]
    return [ei for ei in items if ei is not None]


def kernel_time(items: list[ExecItem], reps: int = 20) -> float:
    """Median device seconds of one run of `items`, after a warm-up run."""
    for ei in items:
        ei.run()
    times = []
    for _ in range(reps):
        times.append(sum(ei.runner(ei.bufs, {}, wait=True) or 0.0 for ei in items))
    return statistics.median(times)


def wall_time(fn: Callable[[], object], sync: Callable[[], object], reps: int = 20) -> float:
    fn()
    sync()
    times = []
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - st)
    return statistics.median(times)


def torch_device() -> tuple[object, str] | None:
    try:
        import torch
    except ImportError:
        return None
    if DEVICE.startswith("CUDA") and torch.cuda.is_available():
        return torch, "cuda"
    return torch, "cpu"


def add_row(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    a, b = Tensor(an, device=DEVICE).realize(), Tensor(bn, device=DEVICE).realize()
    out = a + b
    items = kernels_of(out)
    t = kernel_time(items)
    got = np.frombuffer(items[-1].bufs[0].as_bytes(), dtype=np.float32)
    np.testing.assert_allclose(got[:1000], (an + bn)[:1000])
    gbs = 3 * 4 * n / t / 1e9
    peer = "-"
    if (tp := torch_device()) is not None:
        torch, dev = tp
        at, bt = torch.from_numpy(an).to(dev), torch.from_numpy(bn).to(dev)  # type: ignore[attr-defined]
        ct = torch.empty_like(at)  # type: ignore[attr-defined]
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)  # type: ignore[attr-defined]
        tt = wall_time(lambda: torch.add(at, bt, out=ct), sync)  # type: ignore[attr-defined]
        peer = f"{3 * 4 * n / tt / 1e9:8.1f} GB/s (torch {dev})"
    fraction = f"{gbs / PEAK_GBS:6.1%} of {PEAK_GBS:.0f}"
    return [f"add {n:,} float32", f"{t * 1e6:10.1f} us", f"{gbs:8.1f} GB/s", fraction, peer]


def matmul_row(n: int, dt: DType) -> list[str]:
    rng = np.random.default_rng(1)
    an, bn = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a = Tensor(an, device=DEVICE).cast(dt).realize()
    b = Tensor(bn, device=DEVICE).cast(dt).realize()
    items = kernels_of(a @ b)
    t = kernel_time(items, reps=5)
    flops = 2 * n**3 / t / 1e12
    peer = "-"
    if (tp := torch_device()) is not None:
        torch, dev = tp
        tdt = torch.float16 if dt == dtypes.float16 else torch.float32  # type: ignore[attr-defined]
        if dev == "cuda" or dt == dtypes.float32:
            at, bt = (torch.from_numpy(x).to(dev, tdt) for x in (an, bn))  # type: ignore[attr-defined]
            sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)  # type: ignore[attr-defined]
            tt = wall_time(lambda: at @ bt, sync, reps=5)
            peer = f"{2 * n**3 / tt / 1e12:8.2f} TFLOPS (torch {dev}), ratio {tt / t:5.2f}"
    return [f"matmul {n}x{n} {dt.name}", f"{t * 1e6:10.1f} us", f"{flops:8.2f} TFLOPS", "", peer]


def tc_opts(
    ast: object, renderer: object, up: tuple[int, int], local: tuple[int, int], unroll: int, stage: int | None = 0
) -> list | None:
    """The opts of a tensor-core matmul kernel: TC, then per operand ("a", "b") an upcast and a local factor of its
    outer axis, then an unroll of the reduce, then both inputs staged in shared memory with STAGE amount `stage`
    (None: not staged); None where one does not fit."""
    from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps

    k = Kernel(ast, renderer)  # type: ignore[arg-type]
    k.merge_axes()
    try:
        k.apply_opt(Opt(OptOps.TC, 0, 0))
        for op, amounts in ((OptOps.UPCAST, up), (OptOps.LOCAL, local)):
            for operand, amount in zip(("a", "b"), amounts):
                if amount > 1:
                    axis = k.tc_outer_axis(operand)
                    if axis is None:
                        return None
                    k.apply_opt(Opt(op, k.axes_of(AxisType.GLOBAL).index(axis), amount))
        if unroll > 1:
            k.apply_opt(Opt(OptOps.UNROLL, 0, unroll))
        for i in range(len(k.stage_candidates) if stage is not None else 0):
            k.apply_opt(Opt(OptOps.STAGE, i, stage))
    except KernelOptError:
        return None
    return list(k.applied_opts)


STAGE_MODES = {None: "", 0: " staged"}


def _sweep(n: int, dt: DType, candidates: list[tuple[str, Callable[[object, object], list | None]]], budget_s: float):
    """Time the matmul kernel under each candidate's opts (a function of the AST and renderer), fastest first."""
    from lazygrad.codegen import get_program
    from lazygrad.engine.realize import CompiledRunner

    rng = np.random.default_rng(1)
    a = Tensor(rng.standard_normal((n, n), dtype=np.float32), device=DEVICE).cast(dt).realize()
    b = Tensor(rng.standard_normal((n, n), dtype=np.float32), device=DEVICE).cast(dt).realize()
    si = [s for s in (a @ b).schedule() if s.ast.op.name == "SINK"][-1]  # the matmul (the last kernel)
    ref = (a.float().numpy()[:64] @ b.float().numpy()).astype(np.float32)
    renderer, results, t0 = Device[DEVICE].renderer, [], time.perf_counter()
    for name, make in candidates:
        if time.perf_counter() - t0 > budget_s:
            print(f"{dt.name} sweep: budget spent")
            break
        opts = make(si.ast, renderer)
        if opts is None:
            continue
        try:
            spec = get_program(si.ast, renderer, opts)
            ei = ExecItem(CompiledRunner(DEVICE, spec), list(si.bufs))
            t = kernel_time([ei], reps=3)
        except Exception as e:  # noqa: BLE001 -- a shape the device refuses (registers, shared memory): skip it
            print(f"{name}: {type(e).__name__}: {str(e)[:80]}")
            continue
        raw = np.frombuffer(si.bufs[0].as_bytes(), dtype={2: np.uint16, 4: np.float32}[dt.itemsize])[: 64 * n]
        if dt == dtypes.float16:
            got = raw.view(np.float16).astype(np.float32)
        elif dt == dtypes.bfloat16:
            got = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            got = raw
        ok = np.allclose(got.reshape(64, n), ref, atol=0.5, rtol=0.05)
        results.append((t, name, ok))
    for t, name, ok in sorted(results)[:16]:
        print(f"{dt.name} {name}: {2 * n**3 / t / 1e12:7.2f} TFLOPS {'' if ok else 'WRONG'}")


def tc_sweep(n: int, dt: DType, budget_s: float = 90.0) -> None:
    """SWEEP=1: the fp16/bf16 tensor-core matmul under workgroup shapes around the default, staged in shared memory
    or not, fastest first."""
    import itertools

    shapes = [((4, 8), (2, 2), 4), ((4, 8), (4, 1), 4), ((8, 4), (2, 2), 4), ((4, 8), (2, 4), 4)]
    shapes += [((2, 16), (4, 1), 4), ((4, 8), (2, 2), 2), ((4, 4), (2, 4), 4)]
    candidates = []
    for (up, local, unroll), stage in itertools.product(shapes, (0, None)):
        name = f"up {up} local {local} unroll {unroll}{STAGE_MODES[stage]}"
        candidates.append((name, functools.partial(tc_opts, up=up, local=local, unroll=unroll, stage=stage)))
    _sweep(n, dt, candidates, budget_s)


def float_sweep(n: int, budget_s: float = 60.0) -> None:
    """SWEEP=1: the float32 matmul under the default opts and register tiles around them, staged in shared memory
    or not, fastest first."""
    import itertools

    from lazygrad.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
    from lazygrad.codegen.workgroups import default_optimizations

    def make(ast: object, renderer: object, opts: list, stage: int | None) -> list | None:
        k = Kernel(ast, renderer)  # type: ignore[arg-type]
        k.merge_axes()
        try:
            k.apply_opts([o for o in opts if o.op is not OptOps.STAGE])
            for i in range(len(k.stage_candidates) if stage is not None else 0):
                k.apply_opt(Opt(OptOps.STAGE, i, stage))
        except KernelOptError:
            return None
        return list(k.applied_opts)

    rng = np.random.default_rng(1)
    a = Tensor(rng.standard_normal((n, n), dtype=np.float32), device=DEVICE)
    k = Kernel([s for s in (a @ a).schedule() if s.ast.op.name == "SINK"][-1].ast, Device[DEVICE].renderer)
    k.merge_axes()
    U, L, R = OptOps.UPCAST, OptOps.LOCAL, OptOps.UNROLL
    shapes: list[tuple[str, list]] = [("default", list(default_optimizations(k).applied_opts))]
    for (un, um), (ln, lm), r in [
        ((8, 8), (16, 8), 8),
        ((8, 8), (32, 4), 8),
        ((8, 8), (16, 8), 16),
        ((4, 8), (32, 4), 8),
    ]:
        # locals first: neighbouring threads take neighbouring columns (coalesced, no bank conflicts)
        opts = [Opt(L, 1, ln), Opt(L, 0, lm), Opt(U, 1, un), Opt(U, 0, um), Opt(R, 0, r)]
        shapes.append((f"local ({ln}, {lm}) up ({un}, {um}) unroll {r}", opts))
    candidates = []
    for (name, opts), stage in itertools.product(shapes, (0, None)):
        candidates.append((name + STAGE_MODES[stage], functools.partial(make, opts=opts, stage=stage)))
    _sweep(n, dtypes.float32, candidates, budget_s)


def main() -> None:
    if os.getenv("SWEEP"):
        tc_sweep(MATMUL_N, dtypes.float16, 60.0)
        float_sweep(MATMUL_N, 45.0)
        return
    print(f"device {DEVICE}: {Device[DEVICE].describe()}")
    rows = [add_row(n) for n in SIZES]
    rows += [matmul_row(MATMUL_N, dt) for dt in (dtypes.float32, dtypes.float16)]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
