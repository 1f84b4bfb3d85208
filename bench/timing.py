"""The timing loop the smaller benchmarks share (no side effects on import: bench/kernels.py unsets OpenBLAS's
environment when imported, which the LLM benchmark must not inherit)."""

from __future__ import annotations

import time
from typing import Callable


def call_times(fn: Callable[[], object], reps: int, warmup: int = 1) -> list[float]:
    """Seconds of each of `reps` calls of fn, after `warmup` calls (compiles and first touches excluded)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return times
