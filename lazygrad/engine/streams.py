"""Device streams: the items of a schedule that spans several devices run on one thread per device, so CPU:0 and
CPU:1 (or CPU and CL) compute at the same time. A CPU kernel is a C function called through ctypes, which releases
the GIL: two devices' kernels really run in parallel.

Each item goes to the stream of the device it writes (a copy to the destination's). A stream runs its items in
schedule order; an item of one stream waits only for items of other streams that it must follow:
  * the last writer of every buffer it reads (read after write),
  * the last writer and every reader since of every buffer it writes (write after write, write after read).
Buffers that share memory order as one: an alias or a view orders with the buffer that owns the memory, and the
memory planner has already replaced each planned buffer by the block it uses. An item waits for the launch of the
item it follows, not its completion: a device with asynchronous launches (CL) is synchronized by the copy that reads
its result (BufferCopy waits for its source), and a device's own kernels are ordered by its queue.

The first error of any stream stops every stream (each checks before its next item) and is raised in the caller.
The threads are kept, one per device, for the next schedule.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from lazygrad.device import Buffer
from lazygrad.helpers import LIBRARY_THREAD, library_lock


@dataclass
class StreamItem:
    device: str  # the stream it runs on
    run: Callable[[], None]
    reads: Sequence[Buffer]
    writes: Sequence[Buffer]


def memory_of(b: Buffer) -> object:
    """What identifies the memory a buffer uses: the owning Buffer of an alias or view, the borrowed object (numpy
    array, mmap, raw address) of a buffer over memory lazygrad does not own, else the buffer itself."""
    while isinstance(b._external, Buffer):
        b = b._external
    if b._external is None:
        return b
    return b._external if isinstance(b._external, int) else id(b._external)


def dependencies(items: Sequence[StreamItem]) -> list[dict[str, int]]:
    """Per item: stream -> the latest item of that other stream it must wait for (a stream runs in order, so waiting
    for its latest such item covers the earlier ones)."""
    last_write: dict[object, int] = {}
    readers: dict[object, list[int]] = {}  # memory -> items that read it since its last write
    out: list[dict[str, int]] = []
    for i, item in enumerate(items):
        need: list[int] = []
        for b in item.reads:
            if (w := last_write.get(memory_of(b))) is not None:
                need.append(w)
        for b in item.writes:
            key = memory_of(b)
            if (w := last_write.get(key)) is not None:
                need.append(w)
            need.extend(readers.get(key, ()))
        waits: dict[str, int] = {}
        for j in need:
            dev = items[j].device
            if dev != item.device and j > waits.get(dev, -1):
                waits[dev] = j
        out.append(waits)
        for b in item.reads:
            readers.setdefault(memory_of(b), []).append(i)
        for b in item.writes:
            key = memory_of(b)
            last_write[key], readers[key] = i, []
    return out


class _Worker:
    """A device's thread, kept between schedules: a thread started per schedule would pay a thread start, and a new
    OpenMP team for its kernels (libgomp keeps one per calling thread), at every realize. Handing a schedule of two
    tiny kernels to the workers costs about 33 us over running it in order (47 vs 14 us)."""

    def __init__(self, device: str):
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=f"{LIBRARY_THREAD} {device}", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self.jobs.get()()


_workers: dict[str, _Worker] = {}
# one schedule on the workers at a time: two interleaved on two workers could each wait for the other's next item
_run_lock = library_lock()


def _forget_workers() -> None:
    _workers.clear()  # a forked child has none of its parent's threads: it starts its own


os.register_at_fork(after_in_child=_forget_workers)


def run_streams(items: Sequence[StreamItem]) -> None:
    """Run the items, one thread per device (the caller's thread serves the first device); returns when every stream
    has finished, and raises the first error any stream raised."""
    waits = dependencies(items)
    done = [threading.Event() for _ in items]
    errors: list[BaseException] = []
    streams: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        streams.setdefault(item.device, []).append(i)
    finished = threading.Semaphore(0)

    def stream(order: list[int]) -> None:
        try:
            for i in order:
                for j in waits[i].values():
                    done[j].wait()
                if errors:
                    return
                items[i].run()
                done[i].set()
        except BaseException as e:  # noqa: BLE001 (handed to the caller, who raises it)
            errors.append(e)
            for ev in done:  # wakes every stream waiting on an item that will never run
                ev.set()

    def job(order: list[int]) -> None:
        try:
            stream(order)
        finally:
            finished.release()

    (_, first), *rest = streams.items()
    with _run_lock:
        for dev, order in rest:
            if (worker := _workers.get(dev)) is None:
                worker = _workers[dev] = _Worker(dev)
            worker.jobs.put(functools.partial(job, order))
        stream(first)
        for _ in rest:
            finished.acquire()
    if errors:
        raise errors[0]
