"""lazygrad.distributed across processes: 2 ranks started by `mpirun -n 2` on this machine (loopback, shared memory),
checked against numpy and against a single-process run. Skips when mpirun or mpi4py is missing."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lazygrad.device import DeviceUnavailable
from lazygrad.distributed import _buckets, shard_indices
from lazygrad.tensor import Tensor

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = str(HERE / "mpi_worker.py")
sys.path.insert(0, str(HERE))
from mpi_worker import SIZES, make_input  # noqa: E402

MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(
    MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs an MPI launcher and mpi4py: apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py",
)
HANG_GUARD_S = 300  # a broken collective must fail the test, not hang CI (not a timing assertion)


def mpirun(*args: str, ranks: int = 2) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1")
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"  # CI containers run as root; Open MPI refuses that unless told
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True).stdout
    # more ranks than cores is the point of this machine's simulation; Open MPI refuses it by default
    extra = ["--oversubscribe"] if "Open MPI" in version else []
    cmd = [MPIRUN, "-n", str(ranks), *extra, sys.executable, WORKER, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"rc={proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )


@needs_mpi
def test_collectives_match_numpy(tmp_path: Path) -> None:
    check_ok(mpirun("collectives", str(tmp_path)))
    inputs = {dt: [make_input(r, n, dt) for r in (0, 1)] for dt in ("float32", "float16", "int32") for n in SIZES}
    assert inputs
    checked = 0
    for r in (0, 1):
        results = np.load(tmp_path / f"rank{r}.npz")
        for key in results.files:
            got = results[key]
            parts = key.split("|")
            if parts[0] == "grad":
                n = (3, 300, 1, 257)[int(parts[1])]
                want = (make_input(0, n, "float32") * 1.0 + make_input(1, n, "float32") * 2.0) / 2
            else:
                dev, dt, size, what = parts
                x = [make_input(q, int(size), dt) for q in (0, 1)]
                if what.startswith("broadcast_"):
                    want = x[int(what[-1])]
                else:
                    wide = [a.astype(np.float32) if dt == "float16" else a for a in x]  # reduced in float32
                    op = what.removeprefix("all_reduce_")
                    fn = {"sum": np.add, "max": np.maximum, "min": np.minimum, "mean": lambda a, b: (a + b) / 2}[op]
                    want = fn(*wide).astype(dt)
            assert got.dtype == want.dtype and got.shape == want.shape, key
            np.testing.assert_array_equal(got, want, err_msg=f"rank {r}: {key}")
            checked += 1
    assert checked > 600  # every device x dtype x size x op, on both ranks


@needs_mpi
def test_two_ranks_train_like_one_process(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    steps = "30"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # the reference runs alongside the job: both spend most of their time compiling the same kernels
    reference = subprocess.Popen(
        [sys.executable, WORKER, "train", str(tmp_path), steps, "--reference"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    check_ok(mpirun("train", str(tmp_path), steps))
    out, err = reference.communicate(timeout=HANG_GUARD_S)
    assert reference.returncode == 0, err[-3000:]
    single, dist = np.load(tmp_path / "reference.npz"), np.load(tmp_path / "distributed.npz")
    assert sorted(single.files) == sorted(dist.files)
    for k in single.files:
        np.testing.assert_allclose(dist[k], single[k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert float(dist["acc"]) >= float(single["acc"]) - 0.005  # one test image in 360
    assert float(single["acc"]) > 0.7  # and the run did learn


@needs_mpi
@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_missing_peer_fails_with_clear_error(tmp_path: Path, mode: str) -> None:
    # rank 1 leaves (or stalls) before an all_reduce; rank 0's 5 s deadline names it and aborts the job
    proc = mpirun("dead_peer", str(tmp_path), mode)
    assert proc.returncode != 0
    assert "rank 1 did not join all_reduce within 5 s; a peer process may have died" in proc.stderr, proc.stderr
    assert "without its peer" not in proc.stdout


@needs_mpi
def test_crashed_peer_ends_the_job(tmp_path: Path) -> None:
    # a rank that dies hard: the launcher ends the job (and the exit code says so) instead of leaving rank 0 waiting
    proc = mpirun("dead_peer", str(tmp_path), "crash")
    assert proc.returncode != 0
    assert "without its peer" not in proc.stdout


# *** pieces that need no second process ***


@pytest.mark.parametrize("n", [0, 1, 7, 10, 11])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shard_indices_split_one_global_order(n: int, world: int, drop_last: bool) -> None:
    shards = [shard_indices(n, seed=3, epoch=1, drop_last=drop_last, rank=r, world=world) for r in range(world)]
    assert len({len(s) for s in shards}) == 1  # the ranks step together
    order = list(range(n))
    random.Random(3 + 1).shuffle(order)
    interleaved = [shards[k % world][k // world] for k in range(len(shards[0]) * world)]
    if drop_last:
        assert interleaved == order[: n - n % world]
    else:  # padded by wrapping around to the next multiple of the world size
        assert interleaved[:n] == order and len(interleaved) == -(-n // world) * world
        assert set(interleaved[n:]) <= set(order)


def test_shard_indices_rejects_a_rank_outside_the_world() -> None:
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        shard_indices(10, rank=2, world=2)


def test_buckets_group_consecutive_gradients_up_to_the_limit() -> None:
    grads = [(i, Tensor.zeros(n)) for i, n in enumerate([100, 100, 50, 200, 10, 1000, 5])]
    groups = [[i for i, _ in b] for b in _buckets(grads, bucket_bytes=4 * 256)]
    assert groups == [[0, 1, 2], [3, 4], [5], [6]]  # 1000 floats exceed the limit: a bucket of their own


def test_nccl_backend_is_checked_on_import_and_says_what_is_missing() -> None:
    from lazygrad.distributed.nccl import NCCL_DTYPES, NCCL_OPS, NcclUniqueId, load_nccl, nccl_version

    assert NCCL_OPS["sum"] == 0 and len(NCCL_DTYPES) == 10
    try:
        lib = load_nccl()
    except DeviceUnavailable as e:
        assert "nvidia-nccl-cu12" in str(e)
        return
    # the wheel's library loads and answers; making the job's unique id needs no GPU
    assert nccl_version() >= 20000
    uid = NcclUniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0 and any(uid.internal)


def test_a_collective_given_up_on_keeps_its_memory() -> None:
    """MPI may still write into an all_reduce's memory after this rank gave up on it (a late peer; collectives cannot
    be cancelled): the timed-out collective's Buffers and host views stay held, so none goes back to the allocator.
    A stand-in for mpi4py whose requests never complete (no second process needed)."""
    import gc
    import weakref
    from types import SimpleNamespace

    from lazygrad.distributed.backend import CollectiveTimeout, MPIBackend

    class FakeMPI:  # datatypes and ops by name; requests that never complete
        Request = SimpleNamespace(Testall=lambda requests: False)

        def __getattr__(self, name: str) -> str:
            return name

    fake_mpi = FakeMPI()
    backend = MPIBackend.__new__(MPIBackend)
    backend.MPI, backend.rank, backend.size, backend.seq, backend.waiting_in, backend.abandoned = (
        fake_mpi, 0, 2, 0, "", []
    )  # fmt: skip
    backend.comm = SimpleNamespace(Iallreduce=lambda send, recv, op: object(), Allreduce=None)
    backend._answer_peers = lambda: None

    def gives_up(what, timeout, requests):
        raise CollectiveTimeout(f"{what} gave up")

    backend._timed_out = gives_up
    src, dst = Tensor.ones(64).contiguous().realize(), Tensor.empty(64).realize()
    buffers = [weakref.ref(t.uop.buffer) for t in (src, dst)]
    with pytest.raises(CollectiveTimeout, match="all_reduce gave up"):
        backend.all_reduce([(src.uop.buffer, dst.uop.buffer)], "sum", timeout=1e-3)
    del src, dst
    gc.collect()
    assert all(ref() is not None for ref in buffers)  # freed before: MPI's late write would land in reused memory
    assert len(backend.abandoned) == 1
