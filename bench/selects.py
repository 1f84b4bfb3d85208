"""Kernels with compares and selects on the CPU: lazygrad's compiled kernels vs torch, one table per run.

    python bench/selects.py            # every row
    python bench/selects.py maxpool    # only the rows whose name contains "maxpool"

Each lazygrad row times the kernels of one schedule on preallocated buffers (bench/kernels.py's `compiled`), the
torch row beside it the closest aten op. Backward rows schedule the gradient only (the forward is realized first).
"""

from __future__ import annotations

import sys
from typing import Callable

import numpy as np
from kernels import Table, compiled, try_torch
from timing import call_times

from lazygrad import Tensor


def bench(fn: Callable[[], object], reps: int = 40) -> float:
    """The fastest of `reps` calls after a warm-up: on cores shared with other work, the slower calls measure the
    neighbours (these kernels take well under the scheduler's 4 ms slice)."""
    return min(call_times(fn, reps))


def _grad(x: Tensor, fwd: Callable[[Tensor], Tensor], g: Tensor) -> Tensor:
    """The gradient of fwd at x given the upstream gradient g, as a lazy tensor (fwd's result already realized)."""
    out = fwd(x)
    out.realize()
    out.backward(g)
    assert x.grad is not None
    return x.grad


def main(only: str = "") -> None:
    torch = try_torch()
    F = torch.nn.functional if torch is not None else None
    rng = np.random.default_rng(0)
    table = Table()

    def row(name: str, lazy: Tensor, nbytes: int, ref: Callable[[], object] | None) -> None:
        if only not in name:
            return
        t_ref = bench(ref) if ref is not None else None
        t_lg = bench(compiled(lazy))
        if t_ref is not None:
            table.row(f"{name} torch", t_ref, nbytes)
        ratio = f"{t_ref / t_lg:.2f}x torch speed" if t_ref is not None else ""
        table.row(f"{name} lazygrad", t_lg, nbytes, ratio=ratio)

    n = 4 * 1024 * 1024
    an, bn = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    at, bt = (torch.from_numpy(v) for v in (an, bn)) if torch else (None, None)

    def leaf(v: np.ndarray) -> Tensor:
        return Tensor(v, requires_grad=True).realize()

    row(
        "relu backward 4M",
        _grad(leaf(an), Tensor.relu, Tensor(bn).realize()),
        12 * n,
        (lambda: torch.ops.aten.threshold_backward(bt, at, 0.0)) if torch else None,
    )
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    row("where(a<b,a,b) 4M", (a < b).where(a, b), 12 * n, (lambda: torch.where(at < bt, at, bt)) if torch else None)
    row("clip(-0.5,0.5) 4M", a.clip(-0.5, 0.5), 8 * n, (lambda: torch.clamp(at, -0.5, 0.5)) if torch else None)
    row(
        "clip backward 4M",
        _grad(leaf(an), lambda x: x.clip(-0.5, 0.5), Tensor(bn).realize()),
        12 * n,
        (lambda: torch.where((at >= -0.5) & (at <= 0.5), bt, 0.0)) if torch else None,
    )
    row(
        "leaky_relu backward 4M",
        _grad(leaf(an), lambda x: x.leaky_relu(0.01), Tensor(bn).realize()),
        12 * n,
        (lambda: torch.ops.aten.leaky_relu_backward(bt, at, 0.01, False)) if torch else None,
    )

    xn = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
    gn = rng.standard_normal((32, 64, 16, 16)).astype(np.float32)
    xt, gt = (torch.from_numpy(v) for v in (xn, gn)) if torch else (None, None)
    x = Tensor(xn).realize()
    row(
        "maxpool 2x2 32x64x32x32",
        x.max_pool2d(2),
        xn.nbytes + gn.nbytes,
        (lambda: F.max_pool2d(xt, 2)) if torch else None,
    )
    idx = F.max_pool2d(xt, 2, return_indices=True)[1] if torch else None
    row(
        "maxpool 2x2 backward",
        _grad(leaf(xn), lambda v: v.max_pool2d(2), Tensor(gn).realize()),
        2 * xn.nbytes + gn.nbytes,
        (
            (
                lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                    gt, xt, [2, 2], [2, 2], [0, 0], [1, 1], False, idx
                )
            )
            if torch
            else None
        ),
    )

    sn = rng.standard_normal((2048, 1024)).astype(np.float32)
    st = torch.from_numpy(sn) if torch else None
    s = Tensor(sn).realize()
    row("softmax 2048x1024", s.softmax(-1), 2 * sn.nbytes, (lambda: torch.softmax(st, -1)) if torch else None)
    yn = rng.integers(0, 1024, 2048)
    yt = torch.from_numpy(yn) if torch else None
    row(
        "cross_entropy backward 2048x1024",
        _grad(leaf(sn), lambda v: v.sparse_categorical_crossentropy(Tensor(yn)), Tensor(1.0).realize()),
        2 * sn.nbytes,
        (lambda: torch.softmax(st, -1) - F.one_hot(yt, 1024)) if torch else None,
    )


if __name__ == "__main__":
    main(" ".join(sys.argv[1:]))
