"""PROFILE=1: a trace of a run in the Chrome trace-event format (open it in ui.perfetto.dev or chrome://tracing).

What is recorded, each as a span with its real duration:
- `schedule`: turning a tensor graph into kernels (args: kernels, whether the schedule cache answered);
- `codegen`, split into `optimize`, `lower`, `linearize` and `render`, once per new kernel;
- `compile`: the C/OpenCL/CUDA compiler, one span per compiler call (several kernels when batched);
- every kernel launch and copy, on one track per device, with its device time (the launch waits for the kernel
  while profiling, as DEBUG>=2 does) and GlobalCounters-style args: FLOPs, bytes, GFLOPS, GB/s;
- `jit capture` / `jit replay` spans of TinyJit;
- a `memory` counter track: bytes allocated on all devices after each kernel.

The trace is written when the process exits (or by `write()`), to $PROFILE_PATH or `lazygrad_profile.json` in the
current directory, and its path is printed. `python -m lazygrad.viz trace.json` shows a saved trace in the VIZ page;
`--summary` prints time per category and the slowest kernels. VIZ records this timeline too (without writing this
file), and its kernel spans then carry `viz_kernel`, the index of the kernel's record (record.py).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Iterator

from lazygrad.helpers import PROFILE, VIZ, GlobalCounters, getenv, library_lock
from lazygrad.viz.record import kernel_index as viz_kernel_index

_T0 = time.perf_counter()
_events: list[dict[str, Any]] = []
_tracks: dict[str, int] = {}  # device name -> its track id (kernels run on the device, not on a Python thread)
_lock = library_lock()


def enabled() -> bool:
    return PROFILE.value >= 1 or VIZ.value != 0  # the VIZ page shows the timeline too


def _us(t: float) -> float:
    return round((t - _T0) * 1e6, 3)


def _track(device: str) -> int:
    with _lock:
        if device not in _tracks:
            _tracks[device] = 1_000_000 + len(_tracks)  # far from Python thread ids' small-int aliases
        return _tracks[device]


def record(
    name: str, cat: str, start: float, dur: float, args: dict[str, Any] | None = None, device: str | None = None
) -> None:
    """One finished span: `start` from time.perf_counter(), `dur` in seconds; on a device track if `device`."""
    ev = {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": _us(start),
        "dur": round(dur * 1e6, 3),
        "pid": os.getpid(),
        "tid": _track(device) if device else threading.get_ident(),
    }
    if args:
        ev["args"] = args
    with _lock:
        _events.append(ev)


@contextlib.contextmanager
def span(name: str, cat: str, **args: Any) -> Iterator[dict[str, Any]]:
    """Time the block as one span (a no-op without PROFILE). The yielded dict takes args known only at the end."""
    if not enabled():
        yield args
        return
    st = time.perf_counter()
    try:
        yield args
    finally:
        record(name, cat, st, time.perf_counter() - st, args)


def kernel(name: str, device: str, start: float, dur: float, ops: int, mem: int, jit: bool, src: str = "") -> None:
    """A kernel or copy that ran on `device` for `dur` seconds, and the memory in use after it. Under VIZ a kernel's
    `src` links the span to the kernel's page."""
    args: dict[str, Any] = {"device": device, "ops": ops, "bytes": mem, "jit": jit}
    if src and VIZ.value != 0 and (index := viz_kernel_index(name, src)) is not None:
        args["viz_kernel"] = index
    if dur > 0:
        args["GFLOPS"], args["GB/s"] = round(ops / dur / 1e9, 3), round(mem / dur / 1e9, 3)
    record(name, "copy" if name.startswith("copy") else "kernel", start, dur, args, device)
    counter("memory", {"bytes": GlobalCounters.mem_used}, start + dur)


def counter(name: str, values: dict[str, float], at: float | None = None) -> None:
    ev = {
        "name": name,
        "ph": "C",
        "ts": _us(time.perf_counter() if at is None else at),
        "pid": os.getpid(),
        "args": values,
    }
    with _lock:
        _events.append(ev)


def events() -> list[dict[str, Any]]:
    """The trace so far: the recorded events and the names of the device tracks."""
    with _lock:
        meta = [
            {"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": tid, "args": {"name": f"{dev} kernels"}}
            for dev, tid in _tracks.items()
        ]
        return meta + list(_events)


def clear() -> None:
    with _lock:
        _events.clear()


def write(path: str | None = None) -> str:
    """Write the trace as JSON; returns the path."""
    path = path or getenv("PROFILE_PATH", "") or "lazygrad_profile.json"
    with open(path, "w") as f:
        json.dump({"traceEvents": events(), "displayTimeUnit": "ms"}, f)
    return path


@atexit.register
def _write_at_exit() -> None:
    if PROFILE.value >= 1 and _events:
        path = write()
        print(f"PROFILE: wrote {len(_events)} events to {path} (open it in ui.perfetto.dev)", file=sys.stderr)


def summary(trace: dict[str, Any], top: int = 10) -> str:
    """Time per category and the `top` slowest kernels of a trace, as text."""
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    per_cat: dict[str, tuple[int, float]] = {}
    for e in spans:
        n, t = per_cat.get(e["cat"], (0, 0.0))
        per_cat[e["cat"]] = (n + 1, t + e["dur"])
    lines = [f"{cat:12s} {n:6d} spans {t / 1e3:10.3f} ms" for cat, (n, t) in sorted(per_cat.items())]
    kernels = sorted((e for e in spans if e["cat"] == "kernel"), key=lambda e: -e["dur"])[:top]
    lines += [f"  {e['dur']:10.1f} us  {e['name']}" for e in kernels]
    return "\n".join(lines)
