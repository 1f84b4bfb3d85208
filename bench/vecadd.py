"""1,000,000-element float32 add: per-call time and GB/s for lazygrad, numpy and torch, in one run.

    python bench/vecadd.py

lazygrad is measured two ways: the compiled kernel alone (launched through ctypes on preallocated buffers) and the
whole lazy path per call (build the graph, schedule, look up the compiled kernel, run).
"""

from __future__ import annotations

import statistics
from typing import Callable

import numpy as np
from timing import call_times

from lazygrad import Tensor
from lazygrad.engine.realize import lower_schedule_item

N = 1_000_000
BYTES = 3 * 4 * N  # two reads and one write of float32


def bench(fn: Callable[[], object], reps: int = 200, warmup: int = 10) -> float:
    """Median seconds per call."""
    return statistics.median(call_times(fn, reps, warmup))


def main() -> None:
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    cn = np.empty_like(an)
    results: dict[str, float] = {}

    a, b = Tensor(an).realize(), Tensor(bn).realize()
    (item,) = (a + b).schedule()
    ei = lower_schedule_item(item)
    assert ei is not None
    ei.run()
    np.testing.assert_allclose(np.frombuffer(ei.bufs[0].as_bytes(), dtype=np.float32), an + bn)
    results["lazygrad kernel"] = bench(ei.run)

    def lazy_call() -> None:
        # fresh input tensors (zero-copy views of the numpy arrays): a new graph each call, the same compiled kernel
        (Tensor(an) + Tensor(bn)).realize()

    results["lazygrad end-to-end"] = bench(lazy_call, reps=100)
    results["numpy add(out=)"] = bench(lambda: np.add(an, bn, out=cn))
    try:
        import torch

        at, bt, ct = torch.from_numpy(an), torch.from_numpy(bn), torch.empty(N)
        results["torch add(out=)"] = bench(lambda: torch.add(at, bt, out=ct))
        results["torch add(out=) 1 thread"] = _single_thread_torch(at, bt, ct)
    except ImportError:
        print("torch not installed: skipping")

    base = results.get("torch add(out=)", results["numpy add(out=)"])
    print(f"{'1M float32 add':28s} {'us/call':>10s} {'GB/s':>8s} {'vs torch':>9s}")
    for name, t in results.items():
        print(f"{name:28s} {t * 1e6:10.1f} {BYTES / t / 1e9:8.2f} {t / base:8.2f}x")


def _single_thread_torch(at, bt, ct) -> float:  # noqa: ANN001
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return bench(lambda: torch.add(at, bt, out=ct))
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
