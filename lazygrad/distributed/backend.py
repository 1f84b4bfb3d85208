"""Collectives over Buffers between processes: the MPI backend (every device; host memory in place, GPU memory
through a host copy), with a deadline on every collective so that a dead peer turns into an error, not a hang.

Why nonblocking collectives polled against a clock: a blocking MPI_Allreduce whose peer died (or finalized early, or
is stuck elsewhere) never returns, and MPI has no per-call timeout. `Iallreduce` + `Test` lets the caller give up.
Why a side conversation when it gives up: a collective cannot say which rank is missing. On timeout a rank asks every
peer, over a duplicate communicator (its own tag space), which collective it is in; peers answer from their own wait
loops. The ones that do not answer, or answer with another collective, are named in the error.
Why the job is then aborted (see `install_abort_hook`): a rank that leaves with a collective in flight would hang in
MPI_Finalize; MPI_Abort ends every rank of the job, which is what the launcher (mpirun) reports.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

from lazygrad.device import Buffer
from lazygrad.dtype import DType, dtypes

_ASK, _REPLY = 7001, 7002  # tags of the side conversation (on the duplicate communicator only)
# A nonblocking collective progresses only while its ranks are inside MPI calls (Test): a rank that sleeps stalls its
# peers too. So poll without pause, as MPI's blocking calls do (on a dedicated node that core has nothing better to
# do), and only start sleeping once the wait is long enough that a peer is probably gone. On the shared 2-core CI
# machine, spinning, yielding the core between polls and napping from the start measured the same within its noise.
SPIN_S = 1.0
MAX_NAP_S = 0.01
ANSWER_EVERY_S = 0.05  # how often a waiting rank looks for a peer's question
ASK_WINDOW_S = 2.0  # how long a rank that timed out waits for the peers' answers


class CollectiveTimeout(RuntimeError):
    """A collective did not complete within its deadline: a peer process died, hangs, or left early."""


class Backend:
    """Moves Buffers between ranks. `op` is "sum", "max" or "min"; each call blocks until done or raises."""

    name = "?"

    def all_reduce(self, pairs: list[tuple[Buffer, Buffer]], op: str, timeout: float) -> None:
        """For every (src, dst) pair: dst = op over all ranks of src. The pairs are in flight together."""
        raise NotImplementedError

    def broadcast(self, bufs: list[Buffer], root: int, timeout: float) -> None:
        """Every buffer gets root's contents."""
        raise NotImplementedError


def _mpi_datatype(MPI: Any, dtype: DType) -> Any:
    table = {
        "f": MPI.FLOAT, "d": MPI.DOUBLE, "b": MPI.SIGNED_CHAR, "B": MPI.UNSIGNED_CHAR, "h": MPI.SHORT,
        "H": MPI.UNSIGNED_SHORT, "i": MPI.INT, "I": MPI.UNSIGNED, "q": MPI.LONG_LONG, "Q": MPI.UNSIGNED_LONG_LONG,
        "?": MPI.C_BOOL,
    }  # fmt: skip
    if dtype.fmt not in table:
        raise ValueError(f"MPI has no reduction for {dtype}: reduce it as float32 (the tensor-level API does this)")
    return table[dtype.fmt]


def _mpi_op(MPI: Any, op: str, dtype: DType) -> Any:
    if dtype == dtypes.bool:  # MPI defines only logical reductions on C_BOOL
        return MPI.LAND if op == "min" else MPI.LOR
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]


class MPIBackend(Backend):
    name = "MPI"

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self.MPI, self.comm = MPI, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.side = comm.Dup()  # the side conversation never matches the user's own messages
        self.seq = 0  # collectives entered so far: identical on every rank of a correct program
        self.waiting_in = ""
        # collectives given up on: MPI may still read and write their memory (a late peer, no cancel for collectives),
        # so their requests, host views and Buffers are kept for the life of the process instead of being freed
        self.abandoned: list[tuple[Any, ...]] = []

    # *** host memory: the buffer's own (CPU, PYTHON), else a copy ***

    @staticmethod
    def _host(buf: Buffer, fill: bool) -> tuple[memoryview, bool]:
        """Host memory for buf, and whether it is a copy (to write back after the collective)."""
        view = buf.host_view()
        if view is not None:
            return view, False
        return (buf.as_bytes() if fill else memoryview(bytearray(buf.nbytes))), True

    def all_reduce(self, pairs: list[tuple[Buffer, Buffer]], op: str, timeout: float) -> None:
        MPI = self.MPI
        pending, copies = [], []
        for src, dst in pairs:
            if src.size == 0:
                continue
            send, _ = self._host(src, fill=True)
            recv, copied = self._host(dst, fill=False)
            dt = _mpi_datatype(MPI, src.dtype)
            spec = ([send, dt], [recv, dt], _mpi_op(MPI, op, src.dtype))
            pending.append((spec, send, recv))  # the views must outlive the requests
            if copied:
                copies.append((dst, recv))
        specs = [spec for spec, _, _ in pending]
        self._run("all_reduce", self.comm.Iallreduce, self.comm.Allreduce, specs, timeout, (pairs, pending))
        for dst, host in copies:
            dst.copyin(host)

    def broadcast(self, bufs: list[Buffer], root: int, timeout: float) -> None:
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast root {root} is not a rank (world size {self.size})")
        pending, copies = [], []
        for buf in bufs:
            if buf.size == 0:
                continue
            view, copied = self._host(buf, fill=self.rank == root)
            spec = ([view, self.MPI.BYTE], root)
            pending.append(spec)
            if copied and self.rank != root:
                copies.append((buf, view))
        self._run("broadcast", self.comm.Ibcast, self.comm.Bcast, pending, timeout, (bufs,))
        for buf, host in copies:
            buf.copyin(host)

    # *** deadlines ***

    def _run(
        self, what: str, start: Any, blocking: Any, specs: list[tuple], timeout: float, memory: tuple = ()
    ) -> None:
        """Start the nonblocking collective `start(*spec)` for every spec and wait for all; timeout <= 0: no
        deadline, the `blocking` calls (no polling). `memory`: what must outlive the requests (Buffers, views)."""
        self.seq += 1
        if timeout <= 0:
            for spec in specs:
                blocking(*spec)
            return
        self.waiting_in = what
        requests = [start(*spec) for spec in specs]
        start = time.monotonic()
        deadline, spin_until, next_answer, nap = start + timeout, start + SPIN_S, start + ANSWER_EVERY_S, 0.0
        while not self.MPI.Request.Testall(requests):
            now = time.monotonic()
            if now >= next_answer:
                self._answer_peers()
                next_answer = now + ANSWER_EVERY_S
            if now >= deadline:
                try:
                    self._timed_out(what, timeout, requests)
                except CollectiveTimeout:
                    self.abandoned.append((requests, specs, memory))
                    raise
            if now >= spin_until:
                nap = min(max(nap * 2, 1e-4), MAX_NAP_S)
                time.sleep(nap)
        self.waiting_in = ""

    def _answer_peers(self) -> None:
        """Tell every peer that asked which collective this rank is in (the asker compares with its own)."""
        status = self.MPI.Status()
        while self.side.iprobe(source=self.MPI.ANY_SOURCE, tag=_ASK, status=status):
            peer = status.Get_source()
            self.side.recv(source=peer, tag=_ASK)
            self.side.send((self.seq, self.waiting_in), dest=peer, tag=_REPLY)

    def _timed_out(self, what: str, timeout: float, requests: list[Any]) -> None:
        peers = [r for r in range(self.size) if r != self.rank]
        for r in peers:
            self.side.isend(self.seq, dest=r, tag=_ASK)
        answers: dict[int, tuple[int, str]] = {}
        end = time.monotonic() + min(ASK_WINDOW_S, timeout)
        while time.monotonic() < end and len(answers) < len(peers):
            if self.MPI.Request.Testall(requests):
                return  # it was only slow: the collective completed while we asked
            for r in peers:
                if r not in answers and self.side.iprobe(source=r, tag=_REPLY):
                    answers[r] = self.side.recv(source=r, tag=_REPLY)
            self._answer_peers()
            time.sleep(0.001)
        missing = [r for r in peers if answers.get(r, (None,))[0] != self.seq]
        if not missing:  # everyone is here and yet it did not complete: the transport itself is stuck
            raise CollectiveTimeout(
                f"{what} did not complete within {timeout:g} s although every rank joined it; the network or a "
                f"peer's MPI library may be stuck"
            )
        late = [f"rank {r} is in {answers[r][1] or 'no collective'} #{answers[r][0]}" for r in missing if r in answers]
        who = ", ".join(str(r) for r in missing)
        raise CollectiveTimeout(
            f"rank{'s' if len(missing) > 1 else ''} {who} did not join {what} within {timeout:g} s; a peer process "
            f"may have died (this is rank {self.rank}, in collective #{self.seq}"
            + (f"; {'; '.join(late)}" if late else "")
            + "). Set DIST_TIMEOUT (seconds) or timeout= to wait longer"
        )


def install_abort_hook(comm: Any) -> None:
    """An exception that ends a rank of a multi-process job prints its traceback, then aborts the whole job: leaving
    normally would hang in MPI_Finalize (its peers still wait in collectives, or it has one in flight)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
            return
        rank = comm.Get_rank()
        sys.stderr.write(f"[rank {rank}] " + "".join(traceback.format_exception(kind, value, tb)))
        sys.stderr.write(f"[rank {rank}] aborting the MPI job ({comm.Get_size()} ranks)\n")
        sys.stderr.flush()
        sys.stdout.flush()
        comm.Abort(1)

    sys.excepthook = hook
