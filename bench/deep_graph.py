"""Schedule + realize time of a lazy chain `h = h * w + 1` of 1k, 10k and 100k ops: the time per op should stay flat
(every graph walk is linear and iterative). The scheduler cuts the chain into kernels of KERNEL_OPS ops each; those
segments are the same kernel, compiled once (a fresh constant per run keeps the first compile out of the disk cache)."""

import random
import sys
import time

import numpy as np

from lazygrad import Tensor
from lazygrad.engine.realize import run_schedule


def run(ops: int, salt: float) -> tuple[float, float, float, int]:
    w, h = Tensor(np.full(4, 0.5, np.float32)), Tensor(np.ones(4, np.float32))
    st = time.perf_counter()
    for _ in range(ops // 2):
        h = h * w + salt
    build = time.perf_counter() - st
    st = time.perf_counter()
    sched, var_vals = h.schedule_with_vars()
    schedule = time.perf_counter() - st
    st = time.perf_counter()
    run_schedule(sched, var_vals)
    h.numpy()
    return build, schedule, time.perf_counter() - st, len(sched)


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1_000, 10_000, 100_000]
    print(f"recursion limit {sys.getrecursionlimit()}")
    print(
        f"{'ops':>8} {'kernels':>8} {'build s':>8} {'sched s':>8} {'realize s':>9} {'us/op build':>11} "
        f"{'us/op sched':>11} {'us/op realize':>13}"
    )
    salt = 1 + random.random()
    for n in sizes:
        build, schedule, realize, kernels = run(n, salt)
        print(
            f"{n:8d} {kernels:8d} {build:8.2f} {schedule:8.2f} {realize:9.2f} {build / n * 1e6:11.1f} "
            f"{schedule / n * 1e6:11.1f} {realize / n * 1e6:13.1f}"
        )


if __name__ == "__main__":
    main()
