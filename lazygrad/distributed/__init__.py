"""Data parallelism across processes and machines: `mpirun -n N python train.py`, one rank per process.

Every rank holds the whole model. Each step every rank computes gradients on its own slice of the global batch;
`average_gradients` (or `DistributedOptimizer`) all-reduces them so that every rank applies the same update and the
weights stay identical, as with PyTorch DDP or Horovod. Without mpirun (or without mpi4py) the world is one process
and every collective returns its input, so the same script runs alone.

Collectives work on realized tensors and block until done. On CPU and PYTHON tensors MPI reads and writes the
buffers' own memory (no copy); CL and CUDA tensors go through a host copy, or through NCCL on the GPU when libnccl
is installed (see `nccl.py`). Every collective has a deadline (`DIST_TIMEOUT` seconds, default 60; 0 waits
forever): a rank whose peer died raises `CollectiveTimeout` naming the missing ranks, and an exception that ends a
rank aborts the whole job (MPI_Abort) instead of leaving the others hanging.

Why the result of a collective is a fresh buffer, not the input's memory overwritten: a realized buffer may stand
for a hash-consed graph that later code rebuilds and expects to read unchanged. MPI still writes straight into the
fresh buffer's memory (out-of-place Allreduce), so nothing is copied on the host.
"""

from __future__ import annotations

import os
import random
from typing import Any, Iterable, Sequence

from lazygrad.device import Buffer, DeviceUnavailable
from lazygrad.distributed.backend import Backend, CollectiveTimeout, MPIBackend, install_abort_hook
from lazygrad.dtype import dtypes
from lazygrad.tensor import Tensor, _note_lazy
from lazygrad.uop.ops import UOp

__all__ = [
    "init", "rank", "world_size", "all_reduce", "broadcast", "broadcast_parameters", "average_gradients",
    "DistributedOptimizer", "shard_indices", "CollectiveTimeout", "barrier",
]  # fmt: skip

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_BUCKET_MB = 4.0  # DDP's default is 25 MB; a few MB already amortizes MPI's per-call cost (bench/distributed.py)
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


class _World:
    """This process's place in the job: one per process, made by `init()`."""

    def __init__(self, timeout: float | None):
        self.timeout = float(os.getenv("DIST_TIMEOUT", DEFAULT_TIMEOUT_S)) if timeout is None else timeout
        self.comm: Any = None
        self.rank, self.size = 0, 1
        self.backends: dict[str, Backend] = {}
        try:
            from mpi4py import MPI
        except (ImportError, RuntimeError, OSError) as e:  # mpi4py's wheel loads the MPI library at import
            if any(v in os.environ for v in _LAUNCHER_VARS):
                raise ImportError(
                    f"this process was started by an MPI launcher but mpi4py cannot be used ({e}): pip install "
                    "'lazygrad[distributed]' and an MPI library (e.g. apt-get install openmpi-bin libopenmpi-dev)"
                ) from e
            return  # a single process: collectives are the identity
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        if self.size > 1:
            install_abort_hook(self.comm)

    def backend(self, device: str) -> Backend:
        """NCCL for CUDA tensors when libnccl loads (DIST_BACKEND=mpi forces MPI), MPI for everything else."""
        kind = device.split(":")[0]
        if kind not in self.backends:
            self.backends[kind] = self._make_backend(kind, device)
        return self.backends[kind]

    def _make_backend(self, kind: str, device: str) -> Backend:
        if kind == "CUDA" and os.getenv("DIST_BACKEND", "").lower() != "mpi":
            from lazygrad.distributed.nccl import NCCLBackend

            try:
                return NCCLBackend(self.comm, device)
            except DeviceUnavailable:
                pass  # no libnccl: the host copy through MPI below
        if "mpi" not in self.backends:
            self.backends["mpi"] = MPIBackend(self.comm)
        return self.backends["mpi"]


_world: _World | None = None


def init(timeout: float | None = None) -> None:
    """Join the job (MPI.COMM_WORLD). Idempotent; the other functions call it. `timeout`: seconds a collective may
    wait for its peers (default `DIST_TIMEOUT`, else 60; 0 or less: no deadline)."""
    global _world
    if _world is None:
        _world = _World(timeout)
    elif timeout is not None:
        _world.timeout = timeout


def _get() -> _World:
    init()
    assert _world is not None
    return _world


def rank() -> int:
    return _get().rank


def world_size() -> int:
    return _get().size


def barrier(timeout: float | None = None) -> None:
    """Wait until every rank gets here (an all_reduce of one byte, so it has the same deadline)."""
    all_reduce(Tensor([0], dtype=dtypes.uint8, device="CPU"), "max", timeout=timeout)


def _realize(*tensors: Tensor) -> None:
    if tensors:
        Tensor.realize(*tensors)


def _realized_buffer(t: Tensor) -> Buffer:
    from lazygrad.engine.realize import NEVER_RAN, check_not_capturing

    check_not_capturing("a collective (distributed.all_reduce / broadcast)")
    buf = t._plain_buffer()
    if buf is None or not buf.is_allocated:  # a realized tensor needs no schedule (which costs ~50 us per call)
        buf = t._contiguous_buffer()
    if buf.pending_write:
        raise RuntimeError(NEVER_RAN)
    return buf


def _reduced_dtype(t: Tensor) -> Any:
    # MPI has no 16-bit floats: they travel as float32 (which also adds them without intermediate rounding)
    return dtypes.float32 if t.dtype in (dtypes.float16, dtypes.bfloat16) else t.dtype


def _all_reduce_flat(flats: list[Tensor], op: str, timeout: float | None) -> list[Tensor]:
    """All-reduce realized-or-lazy tensors in one round of collectives (all in flight together); new tensors."""
    world = _get()
    srcs = [_realized_buffer(f) for f in flats]
    dsts = [Buffer(b.device, b.size, b.dtype) for b in srcs]
    if srcs:
        backend = world.backend(srcs[0].device)
        backend.all_reduce(list(zip(srcs, dsts)), op, world.timeout if timeout is None else timeout)
    return [Tensor(UOp.buffer_view(d, f.shape)) for d, f in zip(dsts, flats)]


def all_reduce(t: Tensor, op: str = "sum", timeout: float | None = None) -> Tensor:
    """Every rank's `t` reduced over all ranks ("sum", "mean", "max", "min"); every rank gets the result. `t` now
    holds it too (as torch's in-place all_reduce), and is returned. float16/bfloat16 are reduced in float32."""
    if op not in ("sum", "mean", "max", "min"):
        raise ValueError(f"all_reduce op must be sum, mean, max or min, not {op!r}")
    if op == "mean" and not dtypes.is_float(t.dtype):
        raise ValueError(f"all_reduce mean of {t.dtype}: averaging needs a float tensor (cast it first)")
    world = _get()
    if world.size == 1:
        return t
    work = t.cast(_reduced_dtype(t))
    if op == "mean":  # scale before the sum: exact when the world is a power of two, and cannot overflow
        work = work * (1.0 / world.size)
    (out,) = _all_reduce_flat([work], "sum" if op == "mean" else op, timeout)
    t.uop = out.cast(t.dtype).uop
    _note_lazy(t)
    return t


def broadcast(t: Tensor, root: int = 0, timeout: float | None = None) -> Tensor:
    """Rank `root`'s `t` on every rank: the others' `t` now holds it (their own values need not be realized, only
    the shape and dtype must match). Returns `t`."""
    world = _get()
    if world.size == 1:
        return t
    if world.rank == root:
        buf = _realized_buffer(t)
    else:
        buf = Buffer(t.device, t.numel(), t.dtype)
    world.backend(t.device).broadcast([buf], root, world.timeout if timeout is None else timeout)
    if world.rank != root:
        t.uop = UOp.buffer_view(buf, t.shape)
    return t


def broadcast_parameters(params: Iterable[Tensor] | dict[str, Tensor], root: int = 0) -> None:
    """Give every rank root's values of `params` (a list of tensors or a state dict: pass `get_state_dict(model)`
    to include BatchNorm statistics), so that all ranks start from the same weights. Each tensor keeps its own
    buffer: optimizers update parameters in place."""
    world = _get()
    tensors = list(params.values()) if isinstance(params, dict) else list(params)
    if world.size == 1:
        return
    if world.rank == root:
        bufs = [_realized_buffer(t) for t in tensors]
    else:
        bufs = [Buffer(t.device, t.numel(), t.dtype) for t in tensors]
    by_device: dict[str, list[Buffer]] = {}
    for b in bufs:
        by_device.setdefault(b.device, []).append(b)
    for device, group in by_device.items():
        world.backend(device).broadcast(group, root, world.timeout)
    if world.rank != root:
        for t, b in zip(tensors, bufs):
            t.assign(Tensor(UOp.buffer_view(b, t.shape)))
        _realize(*tensors)


def _buckets(grads: list[tuple[int, Tensor]], bucket_bytes: int) -> list[list[tuple[int, Tensor]]]:
    """Consecutive gradients of one device and reduced dtype, at most bucket_bytes each (a bigger one alone)."""
    out: list[list[tuple[int, Tensor]]] = []
    size = 0
    for i, g in grads:
        nbytes = g.numel() * _reduced_dtype(g).itemsize
        key = (g.device, _reduced_dtype(g))
        if out and size + nbytes <= bucket_bytes and (out[-1][0][1].device, _reduced_dtype(out[-1][0][1])) == key:
            out[-1].append((i, g))
            size += nbytes
        else:
            out.append([(i, g)])
            size = nbytes
    return out


def average_gradients(
    params: Sequence[Tensor], also: Sequence[Tensor] = (), bucket_mb: float | None = None, timeout: float | None = None
) -> None:
    """Replace every parameter's `.grad` by its average over all ranks; call it between `backward()` and the
    optimizer's step. The gradients are flattened into buckets of about `bucket_mb` MB (default `DIST_BUCKET_MB`,
    else 4), one all-reduce per bucket, all buckets in flight together. Realizing the buckets realizes the
    gradients, the loss that backward() ran on and the tensors in `also` (e.g. an accuracy count) in one schedule,
    so the forward pass is not computed twice."""
    from lazygrad.gradient import take_backward_roots

    world = _get()
    with_grad = [(i, p.grad) for i, p in enumerate(params) if p.grad is not None]
    if world.size == 1:
        _realize(*[g for _, g in with_grad], *take_backward_roots(), *also)
        return
    mb = float(os.getenv("DIST_BUCKET_MB", DEFAULT_BUCKET_MB)) if bucket_mb is None else bucket_mb
    buckets = _buckets(with_grad, int(mb * (1 << 20)))
    scale = 1.0 / world.size  # before the sum: exact for a power-of-two world
    flats = [
        Tensor.cat(*[(g.detach().cast(_reduced_dtype(g)) * scale).reshape(-1) for _, g in bucket]) for bucket in buckets
    ]
    _realize(*flats, *take_backward_roots(), *also)
    summed = _all_reduce_flat(flats, "sum", timeout)
    for bucket, flat in zip(buckets, summed):
        offset = 0
        for i, g in bucket:
            n = g.numel()
            params[i].grad = flat[offset : offset + n].reshape(g.shape).cast(g.dtype)
            offset += n


class DistributedOptimizer:
    """Wraps an optimizer: `step()` and `schedule_step()` first average the gradients over all ranks."""

    def __init__(self, optimizer: Any, bucket_mb: float | None = None):
        self.optimizer, self.bucket_mb = optimizer, bucket_mb

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def schedule_step(self, also: Sequence[Tensor] = ()) -> list[Tensor]:
        """Averages the gradients now (communication cannot be lazy), then returns the optimizer's lazy update."""
        average_gradients(self.optimizer.params, also, self.bucket_mb)
        return self.optimizer.schedule_step()

    def step(self, also: Sequence[Tensor] = ()) -> None:
        Tensor.realize(*self.schedule_step(also))


def shard_indices(
    n: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world: int | None = None,
) -> list[int]:
    """This rank's share of the indices 0..n-1, as torch's DistributedSampler: every rank makes the same global
    order (shuffled by seed + epoch), padded by wrapping around (or cut, drop_last) to a multiple of the world size,
    and takes every world-th index from its rank on. All ranks get the same count, so they step together."""
    r = _get().rank if rank is None else rank
    w = _get().size if world is None else world
    if not 0 <= r < w:
        raise ValueError(f"rank {r} is not in a world of {w}")
    order = list(range(n))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    if drop_last:
        order = order[: n - n % w]
    elif n % w and n:
        pad = w - n % w
        order += (order * (pad // n + 1))[:pad]
    return order[r::w]
