"""Train a small CNN on scikit-learn's 8x8 handwritten digits, on the CPU, with lazygrad end to end.

    python -m lazygrad.examples.digits [--steps 400] [--bs 64] [--lr 3e-3] [--jit] [--out PATH]

Every step is lazy until the optimizer realizes it: forward, loss, backward and the Adam update of all parameters
are scheduled together into a few dozen fused kernels, compiled once (cached on disk) and reused every step.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from lazygrad import GlobalCounters, Tensor, nn
from lazygrad.nn.datasets import digits
from lazygrad.nn.state import get_parameters, get_state_dict, safe_save


class DigitsCNN:
    """(N, 1, 8, 8) -> conv 3x3 (16) -> BN -> relu -> conv 3x3 (32) -> relu -> maxpool 2 -> linear -> 10 logits."""

    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn1(self.conv1(x)).relu()
        x = self.conv2(x).relu().max_pool2d(2)
        return self.fc(x.flatten(1))


def progress(steps: Iterable[int], total: int) -> Any:
    """tqdm when it is installed, else a one-line bar of our own; both take .set_postfix_str()."""
    try:
        from tqdm import tqdm

        return tqdm(steps, total=total, ncols=100, file=sys.stdout)
    except ImportError:
        return _Bar(steps, total)


class _Bar:
    def __init__(self, steps: Iterable[int], total: int, width: int = 30):
        self.steps, self.total, self.width, self.postfix = steps, total, width, ""
        self.start = time.perf_counter()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def __iter__(self) -> Iterator[int]:
        for i, x in enumerate(self.steps):
            yield x
            self._draw(i + 1)
        sys.stdout.write("\n")

    def _draw(self, done: int) -> None:
        filled = self.width * done // self.total
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        bar = "#" * filled + "." * (self.width - filled)
        sys.stdout.write(f"\r{done:4d}/{self.total} [{bar}] {rate:6.1f} it/s {self.postfix}")
        sys.stdout.flush()


StepFn = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


def make_step(model: DigitsCNN, opt: nn.optim.Optimizer, jit: bool) -> StepFn:
    @Tensor.train()
    def step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        opt.zero_grad()
        logits = model(x)
        loss = logits.sparse_categorical_crossentropy(y).backward()
        correct = (logits.argmax(-1) == y).sum()
        opt.step(also=(loss, correct))  # (one schedule: the forward pass is computed once)
        return loss, correct

    if not jit:
        return step
    from lazygrad.engine.jit import TinyJit

    return TinyJit(step)


@Tensor.no_grad()
def accuracy(model: DigitsCNN, X: Tensor, Y: Tensor) -> float:
    return (model(X).argmax(-1) == Y).float().mean().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--bs", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jit", action="store_true", help="replay the captured step with TinyJit")
    default_out = Path(os.getenv("XDG_CACHE_HOME", Path.home() / ".cache")) / "lazygrad" / "digits_cnn.safetensors"
    ap.add_argument("--out", type=Path, default=default_out, help="where to save the trained weights")
    args = ap.parse_args()

    import numpy as np

    X_train, Y_train, X_test, Y_test = digits()
    print(f"digits: {X_train.shape[0]} train / {X_test.shape[0]} test images of 8x8")
    Tensor.manual_seed(args.seed)
    model = DigitsCNN()
    opt = nn.optim.Adam(get_parameters(model), lr=args.lr)
    step = make_step(model, opt, args.jit)

    # the batches are picked on the host: data in, as numpy arrays the tensors borrow without copying
    rng = np.random.default_rng(args.seed)
    xs, ys = X_train.numpy(), Y_train.numpy()
    times, kernels = [], []
    bar = progress(range(args.steps), args.steps)
    for i in bar:
        idx = rng.integers(0, len(ys), args.bs)
        x, y = Tensor(np.ascontiguousarray(xs[idx])), Tensor(np.ascontiguousarray(ys[idx]))
        k0, t0 = GlobalCounters.kernel_count, time.perf_counter()
        loss, correct = step(x, y)
        times.append(time.perf_counter() - t0)
        kernels.append(GlobalCounters.kernel_count - k0)
        if i % 10 == 0 or i == args.steps - 1:
            bar.set_postfix_str(f"loss {loss.item():.3f} acc {correct.item() / args.bs:.2f}")

    test_acc = accuracy(model, X_test, Y_test)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    safe_save(get_state_dict(model), args.out)
    steady = times[1:] or times
    print(f"test accuracy: {test_acc * 100:.2f}%")
    print(
        f"first step (compile): {times[0] * 1e3:.0f} ms; then {sum(steady) / len(steady) * 1e3:.1f} ms/step "
        f"(median {sorted(steady)[len(steady) // 2] * 1e3:.1f} ms)"
    )
    print(f"kernels per step: {kernels[-1]}" + (" (replayed by TinyJit)" if args.jit else ""))
    print(f"weights saved to {args.out}")
    if not math.isfinite(test_acc) or test_acc < 0.97:
        print("warning: test accuracy is below the 97% target", file=sys.stderr)


if __name__ == "__main__":
    main()
