"""A tinygrad 0.14 training program, unchanged but for its import: a small CNN on the bundled 8x8 digits.

    python3 examples/tinygrad_digits.py [--steps 300] [--bs 128]

It uses what tinygrad programs use: `Context(TRAINING=1)` as a decorator, tensors made without requires_grad,
`loss.realize(*opt.schedule_step())`, a model whose forward is a `@function`, a step captured by `TinyJit`, batches
drawn on the device with `Tensor.randint` and `Tensor.sequential` over a list of layers and Tensor methods.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from lazygrad import Context, GlobalCounters, Tensor, TinyJit, function, nn
from lazygrad.nn.datasets import digits


class Model:
    def __init__(self) -> None:
        self.layers: list[Callable[[Tensor], Tensor]] = [
            nn.Conv2d(1, 16, 3, padding=1), Tensor.relu, nn.BatchNorm(16),
            nn.Conv2d(16, 32, 3, padding=1), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(32 * 4 * 4, 10),
        ]  # fmt: skip

    @function
    def __call__(self, x: Tensor) -> Tensor:
        return x.sequential(self.layers)


def train(steps: int, bs: int, lr: float = 3e-3, seed: int = 0, log: bool = True) -> float:
    """Train for `steps` steps of `bs` images; the test accuracy in percent."""
    Tensor.manual_seed(seed)
    X_train, Y_train, X_test, Y_test = digits()
    model = Model()
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=lr)

    @TinyJit
    @Context(TRAINING=1)
    def train_step() -> Tensor:
        opt.zero_grad()
        samples = Tensor.randint(bs, high=X_train.shape[0])
        loss = model(X_train[samples]).sparse_categorical_crossentropy(Y_train[samples]).backward()
        return loss.realize(*opt.schedule_step())

    @TinyJit
    def test_accuracy() -> Tensor:
        return ((model(X_test).argmax(axis=1) == Y_test).mean() * 100).realize()

    start, acc = time.perf_counter(), float("nan")
    for i in range(steps):
        GlobalCounters.reset()
        loss = train_step()
        if i % 50 == 49 or i == steps - 1:
            acc = test_accuracy().item()
            if log:
                ms = (time.perf_counter() - start) * 1e3 / (i + 1)
                print(f"step {i + 1:4d}  loss {loss.item():6.3f}  test accuracy {acc:6.2f}%  {ms:5.1f} ms/step")
    return acc


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--bs", type=int, default=128)
    args = ap.parse_args()
    acc = train(args.steps, args.bs)
    if acc < 97:
        raise SystemExit(f"test accuracy {acc:.2f}% is below the 97% target")
