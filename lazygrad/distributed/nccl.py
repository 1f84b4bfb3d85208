"""NCCL for CUDA buffers: GPU memory reduced in place on the GPU, no host copy. libnccl is loaded with ctypes from the
`nvidia-nccl-cu12` wheel (or the system's libnccl.so.2); MPI still starts the job and hands out NCCL's unique id.

Status: written against NCCL's C API (nccl.h, 2.x); the collectives have not run yet (no GPU where this was made).
What runs without a GPU is checked in test/distributed: with the wheel installed, libnccl loads with these argument
types, reports its version (2.32.3 here) and makes the job's unique id. Without libnccl, or without a GPU, CUDA
buffers go through the MPI backend with a host copy (correct, slower).

Deadlines: NCCL kernels run on the device's stream. The wait polls `cuStreamQuery` and `ncclCommGetAsyncError`
against the deadline, and on timeout aborts the communicator (ncclCommAbort) before raising, as NCCL's docs ask.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from typing import Any

from lazygrad.device import Buffer, Device, DeviceUnavailable
from lazygrad.distributed.backend import Backend, CollectiveTimeout
from lazygrad.dtype import DType, dtypes

# ncclDataType_t and ncclRedOp_t values from nccl.h
NCCL_DTYPES = {
    dtypes.int8: 0, dtypes.uint8: 1, dtypes.int32: 2, dtypes.uint32: 3, dtypes.int64: 4, dtypes.uint64: 5,
    dtypes.float16: 6, dtypes.float32: 7, dtypes.float64: 8, dtypes.bfloat16: 9,
}  # fmt: skip
NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
NCCL_UNIQUE_ID_BYTES = 128
CUDA_ERROR_NOT_READY = 600  # cuStreamQuery: work still running


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]


def _nccl_candidates() -> list[str]:
    out = []
    try:
        import nvidia.nccl  # the nvidia-nccl-cu12 wheel

        for root in nvidia.nccl.__path__:
            out.append(os.path.join(root, "lib", "libnccl.so.2"))
    except ImportError:
        pass
    if found := ctypes.util.find_library("nccl"):
        out.append(found)
    return out + ["libnccl.so.2"]


def load_nccl() -> ctypes.CDLL:
    """libnccl with the argument types of the calls used here; DeviceUnavailable saying why when it is missing."""
    errors = []
    for path in _nccl_candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise DeviceUnavailable("NCCL: libnccl not found (pip install nvidia-nccl-cu12); tried " + "; ".join(errors))
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    signatures = {
        "ncclGetVersion": [ctypes.POINTER(i)],
        "ncclGetUniqueId": [ctypes.POINTER(NcclUniqueId)],
        "ncclCommInitRank": [ctypes.POINTER(vp), i, NcclUniqueId, i],
        "ncclAllReduce": [vp, vp, sz, i, i, vp, vp],
        "ncclBroadcast": [vp, vp, sz, i, i, vp, vp],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
        "ncclCommGetAsyncError": [vp, ctypes.POINTER(i)],
        "ncclCommAbort": [vp],
        "ncclGetErrorString": [i],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    return lib


def nccl_version() -> int:
    v = ctypes.c_int()
    load_nccl().ncclGetVersion(ctypes.byref(v))
    return v.value


class NCCLBackend(Backend):
    """Collectives between the CUDA devices of all ranks (one GPU per rank: CUDA:<local rank>)."""

    name = "NCCL"

    def __init__(self, mpi_comm: Any, device: str):
        self.lib = load_nccl()
        self.dev = Device[device]  # opens the CUDA context NCCL will use
        rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        uid = NcclUniqueId()
        if rank == 0:
            self._check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "making the unique id")
        raw = mpi_comm.bcast(bytes(uid.internal) if rank == 0 else None, root=0)
        ctypes.memmove(ctypes.byref(uid), raw, NCCL_UNIQUE_ID_BYTES)
        self.comm = ctypes.c_void_p()
        self._check(self.lib.ncclCommInitRank(ctypes.byref(self.comm), size, uid, rank), "joining the communicator")
        self.stream = None  # the legacy default stream: ordered after every kernel lazygrad launched

    def _check(self, status: int, doing: str) -> None:
        if status != 0:
            raise RuntimeError(f"NCCL error {status} {doing}: {self.lib.ncclGetErrorString(status).decode()}")

    @staticmethod
    def _nccl_dtype(dtype: DType) -> int:
        if dtype not in NCCL_DTYPES:
            raise ValueError(f"NCCL has no {dtype}")
        return NCCL_DTYPES[dtype]

    def all_reduce(self, pairs: list[tuple[Buffer, Buffer]], op: str, timeout: float) -> None:
        self._check(self.lib.ncclGroupStart(), "starting a group")
        for src, dst in pairs:
            if src.size:
                status = self.lib.ncclAllReduce(
                    src.ptr, dst.ptr, src.size, self._nccl_dtype(src.dtype), NCCL_OPS[op], self.comm, self.stream
                )
                self._check(status, "queuing all_reduce")
        self._check(self.lib.ncclGroupEnd(), "ending a group")
        self._wait("all_reduce", timeout)

    def broadcast(self, bufs: list[Buffer], root: int, timeout: float) -> None:
        self._check(self.lib.ncclGroupStart(), "starting a group")
        for buf in bufs:
            if buf.size:
                status = self.lib.ncclBroadcast(buf.ptr, buf.ptr, buf.nbytes, NCCL_DTYPES[dtypes.uint8], root,
                                                self.comm, self.stream)  # fmt: skip
                self._check(status, "queuing broadcast")
        self._check(self.lib.ncclGroupEnd(), "ending a group")
        self._wait("broadcast", timeout)

    def _wait(self, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
        while (status := self.dev.cu.cuStreamQuery(self.stream)) == CUDA_ERROR_NOT_READY:
            err = ctypes.c_int()
            self._check(self.lib.ncclCommGetAsyncError(self.comm, ctypes.byref(err)), "querying errors")
            self._check(err.value, f"in {what}")
            if time.monotonic() > deadline:
                self.lib.ncclCommAbort(self.comm)
                raise CollectiveTimeout(
                    f"{what} (NCCL) did not complete within {timeout:g} s; a peer process may have died"
                )
            time.sleep(0.0001)
        if status != 0:
            raise RuntimeError(f"CUDA error {status} waiting for NCCL {what}")
