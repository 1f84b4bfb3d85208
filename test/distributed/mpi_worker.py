"""The program test_distributed.py starts under `mpirun -n 2` (or alone, for the single-process reference).

python mpi_worker.py collectives OUT     each rank saves its results to OUT/rank<r>.npz
python mpi_worker.py train OUT STEPS [--reference]
python mpi_worker.py dead_peer OUT exit|hang|crash
"""

from __future__ import annotations

import os
import random
import sys
import time

import numpy as np

from lazygrad import Tensor, dtypes, nn
from lazygrad.device import Device

SIZES = (0, 1, 2, 7, 31, 1009, 65537)  # empty, one, primes (no vector-width multiple), and one of 256 KB
DTYPES = {"float32": dtypes.float32, "float16": dtypes.float16, "int32": dtypes.int32}


def make_input(rank: int, size: int, dtype: str) -> np.ndarray:
    """Rank-dependent values that float16 holds exactly, and whose sums it holds exactly too."""
    i = np.arange(size, dtype=np.int64)
    if dtype == "int32":
        return ((i * 7919 + rank * 104729) % 100003 - 50000).astype(np.int32)
    return (((i * 7 + rank * 13) % 23 - 11) * 0.5).astype(dtype)


def devices() -> list[str]:
    out = ["CPU", "PYTHON"]
    try:
        Device["CL"]
        out.append("CL")  # a device whose memory the host cannot address: the host-copy path
    except Exception:
        pass
    return out


def collectives(out: str) -> None:
    from lazygrad import distributed as dist

    r = dist.rank()
    results: dict[str, np.ndarray] = {}
    for dev in devices():
        for name, dt in DTYPES.items():
            for size in SIZES if dev == "CPU" else SIZES[:-1]:  # the PYTHON device interprets kernels: small only
                ops = ("sum", "max", "min") + (("mean",) if name != "int32" else ())
                for op in ops:
                    t = Tensor(make_input(r, size, name), device=dev, dtype=dt)
                    results[f"{dev}/{name}/{size}/all_reduce_{op}"] = dist.all_reduce(t, op).numpy()
                for root in (0, 1):
                    t = Tensor(make_input(r, size, name), device=dev, dtype=dt)
                    results[f"{dev}/{name}/{size}/broadcast_{root}"] = dist.broadcast(t, root).numpy()
    # the bucketed gradient average, on tensors of several sizes and a 1 KB bucket (so several buckets)
    params = [Tensor(make_input(r, n, "float32"), requires_grad=True) for n in (3, 300, 1, 257)]
    for p in params:
        p.grad = p * (r + 1.0)
    dist.average_gradients(params, bucket_mb=1 / 1024)
    for k, p in enumerate(params):
        results[f"grad/{k}"] = p.grad.numpy()
    dist.barrier()
    np.savez(os.path.join(out, f"rank{r}.npz"), **{k.replace("/", "|"): v for k, v in results.items()})


class SmallCNN:
    """No BatchNorm: its batch statistics would differ between a rank's half batch and the global batch, so the
    ranks' averaged gradient would not be the global batch's (there is no SyncBatchNorm)."""

    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.conv2(self.conv1(x).relu()).relu().max_pool2d(2)
        return self.fc(x.flatten(1))


def train(out: str, steps: int, reference: bool, global_batch: int = 64) -> None:
    from lazygrad.nn.datasets import digits
    from lazygrad.nn.state import get_parameters, get_state_dict

    X_train, Y_train, X_test, Y_test = digits()
    Tensor.manual_seed(0)
    model = SmallCNN()
    opt = nn.optim.Adam(get_parameters(model), lr=3e-3)
    rank, world = 0, 1
    if not reference:
        from lazygrad import distributed as dist

        rank, world = dist.rank(), dist.world_size()
        dist.broadcast_parameters(get_state_dict(model))
        opt = dist.DistributedOptimizer(opt)
    per_rank = global_batch // world
    xs, ys = X_train.numpy(), Y_train.numpy()
    rng = random.Random(0)  # the same global batches on every rank and in the reference
    for _ in range(steps):
        idx = rng.sample(range(len(ys)), global_batch)[rank * per_rank : (rank + 1) * per_rank]
        x, y = Tensor(np.ascontiguousarray(xs[idx])), Tensor(np.ascontiguousarray(ys[idx]))
        opt.zero_grad()
        with Tensor.train():
            model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
    with Tensor.no_grad():
        acc = (model(X_test).argmax(-1) == Y_test).float().mean().item()
    if rank == 0:
        weights = {k: v.numpy() for k, v in get_state_dict(model).items()}
        np.savez(os.path.join(out, "reference.npz" if reference else "distributed.npz"), acc=np.array(acc), **weights)


def dead_peer(mode: str) -> None:
    from lazygrad import distributed as dist

    dist.init(timeout=5.0)
    t = Tensor.ones(1000).contiguous().realize()
    dist.all_reduce(t)  # everyone is here once
    if dist.rank() == 1:
        if mode == "crash":
            os._exit(3)
        if mode == "hang":
            time.sleep(30)
        return  # "exit": leaves early (mpi4py finalizes MPI at exit)
    dist.all_reduce(t)
    print("rank 0 finished an all_reduce without its peer", flush=True)


if __name__ == "__main__":
    cmd, out = sys.argv[1], sys.argv[2]
    if cmd == "collectives":
        collectives(out)
    elif cmd == "train":
        train(out, int(sys.argv[3]), "--reference" in sys.argv)
    elif cmd == "dead_peer":
        dead_peer(sys.argv[3])
