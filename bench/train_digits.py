"""Training steps per second on the digits CNN: lazygrad vs torch, same model, same batch, same optimizer (Adam).

    python bench/train_digits.py [--steps 50] [--bs 64] [--jit]

Also the first lazygrad step (scheduling, code generation and compiling every kernel; binaries come from the disk
cache when present, CACHELEVEL=0 to measure a cold compile) and the kernels per step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import torch

from lazygrad import GlobalCounters, Tensor, nn
from lazygrad.examples.digits import DigitsCNN, make_step
from lazygrad.nn.datasets import digits
from lazygrad.nn.state import get_parameters


def torch_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 4 * 4, 10),
    )


def timed(fn: Callable[[int], object], steps: int) -> list[float]:
    out = []
    for i in range(steps):
        st = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - st)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--bs", type=int, default=64)
    ap.add_argument("--jit", action="store_true", help="lazygrad step replayed by TinyJit")
    args = ap.parse_args()

    X_train, Y_train, _, _ = digits()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, X_train.shape[0], args.bs) for _ in range(args.steps + 1)]
    xs, ys = X_train.numpy(), Y_train.numpy()
    xb = [np.ascontiguousarray(xs[i]) for i in batches]
    yb = [np.ascontiguousarray(ys[i]) for i in batches]

    Tensor.manual_seed(0)
    model = DigitsCNN()
    opt = nn.optim.Adam(get_parameters(model), lr=1e-3)
    step = make_step(model, opt, args.jit)
    kernels, flops = [0], [0]

    def lg_step(i: int) -> None:
        k0, f0 = GlobalCounters.kernel_count, GlobalCounters.global_ops
        loss, _ = step(Tensor(xb[i]), Tensor(yb[i]))
        loss.item()
        kernels[0], flops[0] = GlobalCounters.kernel_count - k0, GlobalCounters.global_ops - f0

    first = timed(lg_step, 1)[0]
    lg = timed(lambda i: lg_step(i + 1), args.steps)

    torch.manual_seed(0)
    tm = torch_model().train()
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    txb, tyb = [torch.from_numpy(x) for x in xb], [torch.from_numpy(y.astype(np.int64)) for y in yb]

    def torch_step(i: int) -> None:
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(txb[i]), tyb[i])
        loss.backward()
        topt.step()
        loss.item()

    torch_step(0)
    th = timed(lambda i: torch_step(i + 1), args.steps)

    lg_ms, th_ms = statistics.median(lg) * 1e3, statistics.median(th) * 1e3
    name = "lazygrad" + (" (TinyJit)" if args.jit else "")
    print(
        f"digits CNN training step, batch {args.bs}, Adam, median of {args.steps} steps, {torch.get_num_threads()} "
        "torch threads"
    )
    # the FLOPs lazygrad's kernels count for a step, credited to both (the same model does the same work)
    gflop = flops[0] / 1e9
    print(f"{'':24s} {'ms/step':>9s} {'steps/s':>9s} {'GFLOP/s':>9s} {'vs torch':>9s}")
    print(f"{name:24s} {lg_ms:9.2f} {1e3 / lg_ms:9.1f} {gflop / lg_ms * 1e3:9.2f} {th_ms / lg_ms:8.2f}x")
    print(f"{'torch':24s} {th_ms:9.2f} {1e3 / th_ms:9.1f} {gflop / th_ms * 1e3:9.2f} {1.0:8.2f}x")
    print(
        f"lazygrad first step (schedule + codegen + compile): {first * 1e3:.0f} ms; kernels per step: {kernels[0]}; "
        f"{gflop * 1e3:.1f} MFLOP per step"
    )


if __name__ == "__main__":
    main()
