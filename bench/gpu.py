"""GPU kernels (CL or CUDA): elementwise add bandwidth and matmul throughput, against torch in the same run.

    DEV=CUDA python bench/gpu.py            # on a GPU: 1M and 256M adds, N=4096 fp32 / fp16 matmul
    DEV=CL python bench/gpu.py              # any OpenCL device; on PoCL (the CPU) the sizes are cut down
    SIZES=1000000 MATMUL_N=1024 python bench/gpu.py

Kernel times are the device's own (CL events, CUDA events) for the compiled kernels of one schedule launched on
preallocated buffers: compile time excluded. The add rows are also given as a fraction of PEAK_GBS, the device's
copy bandwidth (default 3000 GB/s, an H100's HBM3; on other devices set it, or read the fraction as relative).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

import numpy as np

from lazygrad import Device, Tensor, dtypes
from lazygrad.dtype import DType
from lazygrad.engine.realize import ExecItem, lower_schedule_item

DEVICE = Device.canonicalize(os.getenv("DEV", "CL"))
ON_CPU = DEVICE.startswith("CL") and "pthread" in Device[DEVICE].describe()  # PoCL: an OpenCL device on the CPU
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


def main() -> None:
    print(f"device {DEVICE}: {Device[DEVICE].describe()}")
    rows = [add_row(n) for n in SIZES]
    rows += [matmul_row(MATMUL_N, dt) for dt in (dtypes.float32, dtypes.float16)]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
