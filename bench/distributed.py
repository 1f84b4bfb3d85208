"""Data parallelism across processes: training steps/s of 1 rank x 2 threads vs 2 ranks x 1 thread (and 1 x 1, and one
process with the batch sharded over 2 CPU devices: Tensor.shard, all-reduce by copies between the devices; the devices
compute at once on a thread each, against DEVICE_THREADS=0, one after another, and against THREADS=1 per device), and
all-reduce bandwidth of lazygrad.distributed vs mpi4py's own Allreduce on numpy arrays (the MPI library's figure).

    python bench/distributed.py [--steps 30] [--ranks 2]

Starts its jobs with mpirun (Open MPI: as root, set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).
On one machine the ranks talk through shared memory; across machines the same code runs over the network.
Scaling efficiency is throughput with R ranks / (R x throughput of one rank with one thread).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def mlp():
    from lazygrad import nn

    class MLP:
        def __init__(self) -> None:
            self.l1, self.l2, self.l3 = nn.Linear(64, 512), nn.Linear(512, 512), nn.Linear(512, 10)

        def __call__(self, x):
            return self.l3(self.l2(self.l1(x.flatten(1)).relu()).relu())

    return MLP()


def worker_train(model_name: str, steps: int, global_batch: int, devices: int = 1) -> None:
    import numpy as np

    from lazygrad import Tensor, nn
    from lazygrad import distributed as dist
    from lazygrad.examples.digits import DigitsCNN
    from lazygrad.nn.datasets import digits
    from lazygrad.nn.state import get_parameters, get_state_dict

    X, Y, _, _ = digits()
    xs, ys = X.numpy(), Y.numpy()
    Tensor.manual_seed(0)
    model = DigitsCNN() if model_name == "cnn" else mlp()
    devs = tuple(f"CPU:{i}" for i in range(devices))
    if devices > 1:  # one process, a replica of the model on each CPU device, the batch split between them
        for p in get_state_dict(model).values():
            p.shard_(devs).realize()
    opt = dist.DistributedOptimizer(nn.optim.Adam(get_parameters(model), lr=1e-3))
    dist.broadcast_parameters(get_state_dict(model))
    rank, world = dist.rank(), dist.world_size()
    per_rank = global_batch // world
    rng = np.random.default_rng(0)
    times = []
    for i in range(steps + 3):
        idx = rng.integers(0, len(ys), global_batch)[rank * per_rank : (rank + 1) * per_rank]
        x, y = Tensor(np.ascontiguousarray(xs[idx])), Tensor(np.ascontiguousarray(ys[idx]))
        if devices > 1:
            x, y = x.shard(devs, axis=0), y.shard(devs, axis=0)
        dist.barrier()  # every rank starts the step together: the time is the slowest rank's
        st = time.perf_counter()
        opt.zero_grad()
        with Tensor.train():
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
        loss.item()
        if i >= 3:  # the first steps compile
            times.append(time.perf_counter() - st)
    if rank == 0:
        print(json.dumps({"step_s": statistics.median(times)}))


def worker_allreduce(reps: int) -> None:
    import numpy as np
    from mpi4py import MPI

    from lazygrad import Tensor
    from lazygrad import distributed as dist

    comm, out = MPI.COMM_WORLD, {}
    for size in SIZES:
        n = size // 4
        t = Tensor(np.ones(n, dtype=np.float32)).contiguous().realize()
        a, b = np.ones(n, dtype=np.float32), np.empty(n, dtype=np.float32)
        lg, lg_blocking, raw = [], [], []
        for _ in range(reps):
            comm.Barrier()
            st = time.perf_counter()
            dist.all_reduce(t)
            lg.append(time.perf_counter() - st)
            comm.Barrier()
            st = time.perf_counter()
            dist.all_reduce(t, timeout=0)
            lg_blocking.append(time.perf_counter() - st)
            comm.Barrier()
            st = time.perf_counter()
            comm.Allreduce(a, b, MPI.SUM)
            raw.append(time.perf_counter() - st)
        out[size] = (min(lg), min(lg_blocking), min(raw))
    if dist.rank() == 0:
        print(json.dumps(out))


def launch(ranks: int, threads: int, *args: str, device_threads: int = 1) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, THREADS=str(threads), DEVICE_THREADS=str(device_threads), PYTHONPATH=root)
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("mpirun not found: apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe", "--bind-to", "none"] if "Open MPI" in version else []
    cmd = [mpirun, "-n", str(ranks), *extra, sys.executable, __file__, "--worker", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10, help="all-reduce repetitions per size (the best is reported)")
    ap.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        if args.worker[0] == "train":
            worker_train(args.worker[1], args.steps, int(args.worker[2]), int(args.worker[3]))
        else:
            worker_allreduce(args.reps)
        return

    R = args.ranks
    print(f"training: global batch split over the ranks; median step time of {args.steps} steps (Adam)")
    print(f"{'model':<12}{'batch':>6}{'1r x 1t':>11}{'1r x ' + str(R) + 't':>11}{str(R) + 'r x 1t':>11}"
          f"{'ranks/threads':>15}{'efficiency':>12}{str(R) + 'dev in order':>15}{str(R) + 'dev x ' + str(R) + 't':>12}"
          f"{str(R) + 'dev x 1t':>12}{'dev/in order':>14}{'dev/threads':>13}")  # fmt: skip
    # (ranks, THREADS, devices, DEVICE_THREADS)
    configs = ((1, 1, 1, 1), (1, R, 1, 1), (R, 1, 1, 1), (1, R, R, 0), (1, R, R, 1), (1, 1, R, 1))
    for name, batch in (("digits CNN", 128), ("MLP 512", 512)):
        key = "cnn" if name.startswith("digits") else "mlp"
        rate = {}
        for cfg in configs:
            argv = ("train", key, str(batch), str(cfg[2]), "--steps", str(args.steps))
            rate[cfg] = batch / launch(cfg[0], cfg[1], *argv, device_threads=cfg[3])["step_s"]
        one, threads, ranks = rate[(1, 1, 1, 1)], rate[(1, R, 1, 1)], rate[(R, 1, 1, 1)]
        in_order, devs, devs_1t = rate[(1, R, R, 0)], rate[(1, R, R, 1)], rate[(1, 1, R, 1)]
        print(f"{name:<12}{batch:>6}{one:>9.0f}/s{threads:>9.0f}/s{ranks:>9.0f}/s"
              f"{ranks / threads:>14.2f}x{ranks / (R * one):>11.0%}"
              f"{in_order:>13.0f}/s{devs:>10.0f}/s{devs_1t:>10.0f}/s"
              f"{devs / in_order:>13.2f}x{devs / threads:>12.2f}x")  # fmt: skip
    print("(samples/s; efficiency = R ranks' throughput / (R x one rank with one thread); Rdev: one process, the batch")
    print(" sharded over R CPU devices that compute at once, one thread each, each kernel on THREADS cores; in order:")
    print(" DEVICE_THREADS=0, the devices one after another, THREADS=R; dev/in order, dev/threads: of Rdev x Rt)\n")

    res = launch(R, 1, "allreduce", "--reps", str(args.reps))
    print(f"all_reduce (sum, float32) over {R} ranks: best of {args.reps}; bus bandwidth = 2(R-1)/R x size / time")
    print(f"{'size':>8}{'lazygrad':>11}{'no deadline':>12}{'mpi4py raw':>11}{'lazygrad':>12}{'raw':>12}{'ratio':>7}")
    for size in SIZES:
        lg, lg_blocking, raw = res[str(size)]
        bus = 2 * (R - 1) / R * size
        label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
        print(f"{label:>8}{lg * 1e6:>9.0f}us{lg_blocking * 1e6:>10.0f}us{raw * 1e6:>9.0f}us"
              f"{bus / lg / 1e9:>8.2f}GB/s{bus / raw / 1e9:>8.2f}GB/s{raw / lg:>7.2f}")  # fmt: skip
    print("(lazygrad: nonblocking collective polled against DIST_TIMEOUT; no deadline: timeout=0, MPI's blocking call)")


if __name__ == "__main__":
    main()
