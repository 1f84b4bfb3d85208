"""The engine: schedule items become compiled programs, which run on their buffers and report what they did."""

from __future__ import annotations

import contextlib
import operator
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from lazygrad.codegen import get_program
from lazygrad.device import Buffer, Compiler, Device
from lazygrad.engine.memory import counted, held_at, memory_planner, plan_memory
from lazygrad.engine.streams import StreamItem, run_streams
from lazygrad.helpers import (
    BEAM,
    COMPILE_BATCH,
    DEBUG,
    DEVICE_THREADS,
    LAUNCHED_UNADDED,
    LIBRARY_THREAD,
    NOOPT,
    GlobalCounters,
    ansilen,
    colored,
    count_launched,
    cpu_cores,
    cycles_held_off,
    library_lock,
)
from lazygrad.renderer import ProgramSpec
from lazygrad.schedule.kernelize import Schedule, ScheduleItem
from lazygrad.uop.ops import Ops, UOp
from lazygrad.viz import profile


class CompiledRunner:
    """A compiled kernel, ready to launch: compile once per (device, kernel AST), then call many times."""

    def __init__(self, device: str, spec: ProgramSpec, lib: bytes | None = None):
        self.device, self.spec = device, spec
        dev = Device[device]
        st = time.perf_counter()
        if lib is None:  # else compiled together with the other kernels of its schedule, see compile_schedule
            with profile.span("compile", "compile", kernels=[spec.name], device=device):
                lib = dev.compiler.compile_cached(spec.src)
        self.compile_time = time.perf_counter() - st
        self.prg = dev.runtime(spec.name, lib, spec.n_bufs, len(spec.vars))

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        # once per kernel of every eager realize: one list, and no spec lookups for a kernel without variables
        args = [b.ptr for b in bufs]
        spec = self.spec
        if spec.vars:
            args += [var_vals[v] for v in spec.vars]
        if spec.global_size is not None:  # GPU-style kernels launch as a grid of workgroups
            return self.prg(*args, global_size=spec.global_size, local_size=spec.local_size, wait=wait)
        return self.prg(*args, wait=wait)


class BufferCopy:
    """A copy between devices, run like a kernel (so DEBUG lines, the JIT and the memory planner see it too)."""

    def __init__(self, nbytes: int, dst_device: str, src_device: str):
        self.device, self.nbytes = dst_device, nbytes
        name = f"copy {nbytes:8d}, {dst_device[:7]:>7s} <- {src_device[:7]:7s}"
        self.spec = ProgramSpec(name="copy", display_name=name, src="", n_bufs=2, outs=(0,), mem=2 * nbytes)

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        dst, src = bufs
        st = time.perf_counter()
        Device[src.device].synchronize()  # the source's last kernel may still be running
        # nbytes, not the buffers' sizes: the memory planner may have given either a larger block
        if (to := dst.host_view()) is not None and (frm := src.host_view()) is not None:
            to[: self.nbytes] = frm[: self.nbytes]  # host memory on both sides (CPU:0 -> CPU:1): one memcpy
        else:
            data = memoryview(bytearray(self.nbytes))
            src.allocator.copyout(data, src.ptr)
            dst.allocator.copyin(dst.ptr, data)
        return time.perf_counter() - st if wait else None


_runners: dict[tuple, CompiledRunner] = {}


def _runner_key(device: str, ast: UOp) -> tuple:
    return (device, ast, NOOPT.value, BEAM.value)  # the knobs that change which kernel is built


# runner key -> the build of a compile_ahead making it (until its runner is in _runners)
_ahead: dict[tuple, Future[None]] = {}
_ahead_pool: list[ThreadPoolExecutor] = []  # made at the first compile_ahead


def compile_ahead(schedule: list[ScheduleItem]) -> None:
    """Build the kernels of a schedule that will run later, on a background thread, and return at once: a realize
    meeting them waits for that build instead of starting its own. For a caller that knows what comes after a stretch
    of already compiled work (SmolLM2's prompt: the logits' and the greedy pick's kernels, built while the layers run
    on one core); the schedule itself is not run. Not under BEAM, whose timings a compiler running beside skews."""
    if BEAM:
        return
    keys = {_runner_key(si.outputs[0].device, si.ast) for si in schedule if _compiled_item(si)}
    keys = {key for key in keys if key not in _runners and key not in _ahead}
    if not keys:
        return
    if not _ahead_pool:
        _ahead_pool.append(ThreadPoolExecutor(1, thread_name_prefix=f"{LIBRARY_THREAD} compile_ahead"))
    future = _ahead_pool[0].submit(_build_ahead, schedule, keys)
    for key in keys:
        _ahead.setdefault(key, future)


def _forget_builds_ahead() -> None:
    # a forked child has no thread building them: its realizes build their kernels themselves
    _ahead.clear()
    _ahead_pool.clear()


os.register_at_fork(after_in_child=_forget_builds_ahead)


def _build_ahead(schedule: list[ScheduleItem], keys: set[tuple]) -> None:
    try:
        compile_schedule(schedule, ahead=True)
    finally:
        for key in keys:  # after their runners are in _runners: a realize that finds no build finds the runner
            _ahead.pop(key, None)


def _compiled_item(si: ScheduleItem) -> bool:
    return si.ast.op is not Ops.COPY and si.outputs[0].size != 0


def compile_schedule(schedule: list[ScheduleItem], ahead: bool = False) -> None:
    """Every kernel of a schedule not compiled yet. A compiler that builds several kernels into one binary (CPU's C
    compiler, NVRTC, OpenCL) gets them COMPILE_BATCH at a time: one compiler start per batch instead of one per
    kernel, and each full batch compiles on a worker thread while the next batch's code is generated (a compiler
    process or a ctypes call releases the GIL), on every core. Devices with the same compiler and renderer (CPU,
    CPU:1, ... of a sharded tensor) share the batches, and a kernel they all run is built once. Kernels a
    compile_ahead is building are waited for (ahead: this is that build)."""
    todo: dict[tuple, tuple] = {}  # runner key -> (compiler, renderer, kernel): what devices can share
    waits: list[Future[None]] = []
    for si in schedule:
        if not _compiled_item(si):
            continue
        key = _runner_key(si.outputs[0].device, si.ast)
        if not ahead and (future := _ahead.get(key)) is not None:  # (before _runners: its build adds it, then pops)
            waits.append(future)
        elif key not in _runners and key not in todo:
            dev = Device[key[0]]
            todo[key] = (dev.compiler.cachekey or key[0], type(dev.renderer), _renderer_settings(dev.renderer), key[1:])
    if todo:
        _compile_todo(todo, ahead)
    for future in waits:
        future.result()


def _compile_todo(todo: dict[tuple, tuple], ahead: bool) -> None:
    # a build ahead runs beside other work (a model's later layers keep a core busy): one compiler call for all its
    # kernels, on one core, the least CPU (each call's start costs ~12 ms of it)
    cores = 1 if ahead else cpu_cores()
    # auto: two batches per core, so compiling starts early beside code generation and the batch left to compile
    # when it ends is small (the CNN step on 2 cores: 0.79-0.86 s; one batch per core 0.87-0.94 s); 4 kernels at
    # least, as each compiler start costs about what compiling 2 small kernels does; the first batch is a quarter of
    # that and the last one is split among the workers (_Batches)
    batch_size = COMPILE_BATCH.value if COMPILE_BATCH.value > 0 else max(4, -(-len(todo) // (2 * cores)))
    batch_size = len(todo) if ahead else batch_size
    batches = _Batches(min(cores, len(todo)), batch_size, len(set(todo.values())) if COMPILE_BATCH.value <= 0 else 0)
    # kernels with a reduce first: their code (register tiles, unrolled reduce loops) keeps the compiler busiest, so
    # it compiles beside the code generation of the rest, and the batches left at the end are the quick ones
    order = sorted(todo.items(), key=lambda kv: not any(u.op is Ops.REDUCE_AXIS for u in kv[0][1].toposort))
    try:
        # (the collector held off: codegen's nodes live until their kernel is rendered, see cycles_held_off)
        with cycles_held_off():
            for key, shared in order:
                batches.add(key, shared)
            batches.flush()
            batches.finish()
    finally:
        batches.pool.shutdown(wait=True, cancel_futures=True)


def _renderer_settings(renderer: object) -> str:
    """What makes a renderer write other code than another of its class: its attributes that differ from the class's
    (an attribute set to the class's own value, as a test's monkeypatch leaves behind, changes nothing)."""
    cls, missing = type(renderer), object()
    return repr(sorted((k, repr(v)) for k, v in vars(renderer).items() if getattr(cls, k, missing) != v))


# a C compiler call's cost, measured for gcc on this project's kernels (bench/compile.py --kernels llm: 22 kernels,
# CPU ms ~ 2.7 us per byte of C, r = 0.91) and its start and setup (17 ms of CPU, what 6.5 KB of C cost): the seconds
# a byte takes until this schedule's first call has measured them at the machine's load
CC_SECONDS_PER_BYTE, SETUP_BYTES = 2.7e-6, 6500


class _Batches:
    """The programs of one schedule, grouped per compiler into batches compiled on a thread pool."""

    def __init__(self, workers: int, batch_size: int, auto: int = 0):
        # auto (the number of programs to come; 0: fixed batches): the first of several batches is smaller, so a core
        # starts compiling while the first full batch would still be generated, and the batch holding the last
        # program is left to flush, which splits it among the workers
        self.batch_size, self.auto = batch_size, auto
        self.bytes_done = 0  # of the programs generated so far
        self.workers, self.pool = workers, ThreadPoolExecutor(workers, thread_name_prefix=f"{LIBRARY_THREAD} compile")
        self.programs: dict[tuple, ProgramSpec] = {}  # shared key -> its program (renamed to be unique in a binary)
        self.keys_of: dict[tuple, list[tuple]] = {}  # shared key -> the runner keys (devices) that run it
        self.names: dict[str, dict[str, int]] = {}  # compiler -> kernel name -> programs of that name so far
        self.open: dict[str, list[tuple]] = {}  # compiler -> shared keys of the batch being filled
        self.full: list[tuple[str, str, list[tuple]]] = []  # (compiler, a device, shared keys): batches to submit
        self.submitted: list[tuple[list[tuple], Future[bytes]]] = []  # (shared keys, its binary) in schedule order
        self.spans: list[list[float]] = []  # per submitted call: [cost in bytes, start, end] as the worker ran it
        self.cached: dict[tuple, bytes] = {}  # shared key -> the binary on disk holding it (no compiler call)
        self.st = time.perf_counter()

    def add(self, key: tuple, shared: tuple) -> None:
        if shared not in self.programs:
            dev = Device[key[0]]
            cachekey = shared[0]
            if not self.open.get(cachekey) and not BEAM and hasattr(dev.compiler, "prestart"):
                # a batch opens: compiler processes start now, beside the generation of its code, one per worker
                # (the batch left at the end is split among them): saves each call's start (~12 ms) where the
                # schedule waits for the compiler (SmolLM2's small schedules, the CNN step's last batches)
                dev.compiler.prestart(self.workers)
            spec = get_program(key[1], dev.renderer)
            seen, name = self.names.setdefault(cachekey, {}), spec.name
            if (n := seen.get(name, 0)) > 0:  # kernels of the same shape share a name: a binary needs distinct ones
                spec = spec.renamed(f"{name}n{n}")
            seen[name] = n + 1
            self.programs[shared] = spec
            self.bytes_done += len(spec.src)
            # a kernel an earlier process compiled, in whatever batch (which kernels share one depends on timing)
            if hasattr(dev.compiler, "cached_kernel") and (lib := dev.compiler.cached_kernel(spec.src)) is not None:
                self.cached[shared] = lib
                self.keys_of.setdefault(shared, []).append(key)
                return
            batch = self.open.setdefault(cachekey, [])
            batch.append(shared)
            first = not (self.submitted or self.full) and self.auto > self.batch_size
            size = max(2, self.batch_size // 4) if first else self.batch_size
            last = len(self.programs) == self.auto
            # auto: a full batch waits for a free worker (every kernel generated by then goes, see _worker_free)
            # rather than queueing behind the busy ones: what is left when code generation ends is split among the
            # workers (flush), where a batch queued before had one compiler build it while the other cores waited
            # (SmolLM2's prompt: 7 kernels, ~100 ms alone on one core). A compiler of one kernel a call gets each at
            # once
            many = hasattr(dev.compiler, "compile_many")
            size = size if many else 1
            waits = self.auto and many and not self._worker_free()
            if len(batch) >= size and not last and not waits:
                # auto: the kernels generated while the compiler was busy go in one call (a wave), not `size` a call
                # with the rest left for processes of their own; as many as end with the other cores (_wave)
                take = self._wave(batch, time.perf_counter()) if self.auto else size
                self.full.append((cachekey, key[0], batch[:take]))
                self.open[cachekey] = batch[take:]
                if not BEAM:  # BEAM times kernels inside get_program: a compiler running beside would skew its timings
                    self._submit_full()
        self.keys_of.setdefault(shared, []).append(key)

    def _worker_free(self) -> bool:
        # while code is generated its thread holds a core: one compiler fewer than workers keeps every core busy, and
        # the kernels generated while it runs go to the next call instead of a process of their own
        return sum(not future.done() for _, future in self.submitted) < max(1, self.workers - 1)

    def _wave(self, batch: list[tuple], now: float) -> int:
        """How many of the kernels generated while the compilers were busy go to the worker free now: no more than
        it can compile while code generation ends (its thread holds a core) and the other cores build what is left,
        so that every core ends together. SmolLM2's prompt: a wave of the 12 kernels made meanwhile (54 KB of C) kept
        one core busy 180 ms, 100 ms after the other core had built the last 3."""
        rate = self._rate()
        sizes = [len(self.programs[shared].src) for shared in batch]
        # what is still to come, at this schedule's bytes of C and generation time per kernel so far (its AST's nodes
        # told less: SmolLM2's kernels of 12 nodes are 3.1-9.2 KB of C, of 24-31 nodes 1.9-2.7 KB)
        done, left = len(self.programs), self.auto - len(self.programs)
        ahead = self.bytes_done / done * left
        codegen = (now - self.st) / done * left / rate
        busy = self._busy(now, rate)
        starts = [0.0] * max(0, self.workers - 1 - len(busy)) + busy + [codegen]
        end = _level(starts, sum(sizes) + ahead + SETUP_BYTES * self.workers)
        take, total = 1, SETUP_BYTES + sizes[0]
        while take < len(sizes) and total + sizes[take] <= end:
            total += sizes[take]
            take += 1
        return take

    def flush(self) -> None:
        for cachekey, batch in self.open.items():
            # auto: the batch left when code generation ends is split among the workers to end together (_parts), so
            # no core waits while a single compiler builds the whole rest
            for part in self._parts(batch, time.perf_counter()) if self.auto else [batch] if batch else []:
                self.full.append((cachekey, self.keys_of[part[0]][0][0], part))
        self.open.clear()
        self._submit_full()

    def _parts(self, batch: list[tuple], now: float) -> list[list[tuple]]:
        """The kernels left when code generation ends in one call per worker at most, each kernel, biggest first, to
        the worker that would be done with it first (counting the calls still running and a call's start). A call
        of its own only where the build then ends sooner by a whole start at least, what the start costs in CPU
        (softmax's 3 kernels, 6.7 KB of C: one call). Parts in the order their workers get free."""
        rate = self._rate()
        busy = self._busy(now, rate)
        free = sorted(busy + [0.0] * max(0, self.workers - len(busy)))[: self.workers]
        loads, parts = list(free), [[] for _ in free]
        for shared in sorted(batch, key=lambda shared: -len(self.programs[shared].src)):
            ends = [
                load + len(self.programs[shared].src) + (0 if part else SETUP_BYTES) for load, part in zip(loads, parts)
            ]
            i = min(range(len(ends)), key=lambda i: ends[i] + (0 if parts[i] else SETUP_BYTES))
            loads[i] = ends[i]
            parts[i].append(shared)
        order = {shared: i for i, shared in enumerate(batch)}  # (each part in the order its kernels were made)
        return [sorted(part, key=order.__getitem__) for part in parts if part]

    def _rate(self) -> float:
        """Seconds a compiler call takes per byte of C (and SETUP_BYTES a call), from this schedule's calls so far:
        they run as slowly as the machine's load makes them. Before the first is done, the quiet machine's figure
        times the load per core (at a load of 16 on 2 cores SmolLM2's first call built 5.5x slower)."""
        done = [(cost, st, et) for cost, st, et in self.spans if et]
        if not done:
            return CC_SECONDS_PER_BYTE * max(1.0, os.getloadavg()[0] / cpu_cores())
        return max(1e-9, sum(et - st for _, st, et in done) / sum(cost for cost, _, _ in done))

    def _busy(self, now: float, rate: float) -> list[float]:
        """The bytes each running or queued call still has to compile, estimated from its size and time run."""
        return [max(0.0, cost - (now - st) / rate) if st else cost for cost, st, et in self.spans if not et]

    def _submit_full(self) -> None:
        for _, device, batch in self.full:
            srcs = [self.programs[shared].src for shared in batch]
            names = [self.programs[shared].name for shared in batch]
            span = [SETUP_BYTES + sum(map(len, srcs)), 0.0, 0.0]
            self.spans.append(span)
            future = self.pool.submit(_timed, span, Device[device].compiler, srcs, names, device)
            self.submitted.append((batch, future))
        self.full.clear()

    def finish(self) -> None:
        """The runners of every batch, in order; the first batch that failed raises its compiler's error."""
        for shared, lib in self.cached.items():
            for key in self.keys_of[shared]:
                _runners[key] = CompiledRunner(key[0], self.programs[shared], lib)
        for batch, future in self.submitted:
            lib = future.result()
            for shared in batch:
                for key in self.keys_of[shared]:
                    _runners[key] = CompiledRunner(key[0], self.programs[shared], lib)
        if DEBUG >= 1:
            devices = sorted({key[0] for keys in self.keys_of.values() for key in keys})
            elapsed = (time.perf_counter() - self.st) * 1e3
            print(
                f"built {len(self.programs)} kernels for {', '.join(devices)} in {len(self.submitted)} compiler calls "
                f"on {self.workers} threads: {elapsed:.1f} ms"
            )


def _level(starts: list[float], work: float) -> float:
    """When workers free at `starts` end `work` together: the end E at which the sum of max(0, E - start) is work."""
    starts, i = sorted(starts), 1
    while i < len(starts) and (work + sum(starts[:i])) / i > starts[i]:
        i += 1
    return (work + sum(starts[:i])) / i


def _timed(span: list[float], compiler: Compiler, srcs: list[str], names: list[str], device: str) -> bytes:
    span[1] = time.perf_counter()
    try:
        return _compile(compiler, srcs, names, device)
    finally:
        span[2] = time.perf_counter()


def _compile(compiler: Compiler, srcs: list[str], names: list[str], device: str) -> bytes:
    with profile.span("compile", "compile", kernels=names, device=device):
        if hasattr(compiler, "compile_many"):
            return compiler.compile_many(srcs)
        assert len(srcs) == 1, "a compiler without compile_many builds one kernel a call"
        return compiler.compile_cached(srcs[0])


def get_runner(device: str, ast: UOp) -> CompiledRunner:
    key = _runner_key(device, ast)
    if (future := _ahead.get(key)) is not None:
        future.result()
    if (runner := _runners.get(key)) is None:
        runner = _runners[key] = CompiledRunner(device, get_program(ast, Device[device].renderer))
    return runner


@dataclass
class ExecItem:
    runner: CompiledRunner
    bufs: list[Buffer]

    def run(self, var_vals: dict[UOp, int] | None = None, jit: bool = False) -> float | None:
        var_vals = var_vals or {}
        for recording in _captures():
            recording.append((self, {v: var_vals[v] for v in self.runner.spec.vars}))
        for b in self.bufs:
            b.ensure_allocated()
        timing = DEBUG >= 2 or profile.enabled()  # a kernel's time is known once it is waited for
        st = time.perf_counter()
        et = self.runner(self.bufs, var_vals, wait=timing)
        spec = self.runner.spec
        if profile.enabled():
            name = spec.display_name if spec.name == "copy" else spec.name
            profile.kernel(name, self.runner.device, st, et or 0.0, spec.ops, spec.mem, jit, spec.src)
        count_launched((1, spec.ops, spec.mem, et or 0.0))
        if DEBUG >= 2:
            with _counters_lock:  # the devices of one schedule run on threads of their own (engine/streams.py)
                _print_kernel_line(self.runner.device, spec, et or 0.0, len(self.bufs), jit)
        return et


_counters_lock = library_lock()


class JitError(RuntimeError):
    """A TinyJit capture or replay that would compute something other than what the function says."""


# every active capture (TinyJit's second call) records every item that runs, with its variable values; an outer
# capture must see the kernels of an inner JIT's capture too, or its replay would skip them. Kept per thread: a
# capture records the kernels its own function runs, not those another thread runs meanwhile
_capturing = threading.local()
# captures open in all threads: while any is, a tensor's note carries the thread that made it (a tensor another thread
# makes during a capture is not the captured function's, see capture_began)
CAPTURES_OPEN = [0]
_captures_open_lock = library_lock()


def _captures() -> list[list[tuple[ExecItem, dict[UOp, int]]]]:
    if not hasattr(_capturing, "stack"):
        _capturing.stack = []
    return _capturing.stack


@contextlib.contextmanager
def capture(began: int = 0) -> Iterator[list[tuple[ExecItem, dict[UOp, int]]]]:
    """Record every ExecItem run inside the block (into every active capture, nested ones included). `began`: the
    serial number of the first tensor made inside (tensors made before are the caller's, see capture_began)."""
    items: list[tuple[ExecItem, dict[UOp, int]]] = []
    _captures().append(items)
    if not hasattr(_capturing, "began"):
        _capturing.began = []
    _capturing.began.append(began)
    with _captures_open_lock:
        CAPTURES_OPEN[0] += 1
    try:
        yield items
    finally:
        _captures().pop()
        _capturing.began.pop()
        with _captures_open_lock:
            CAPTURES_OPEN[0] -= 1


def capture_began() -> int | None:
    """The serial number of the first tensor made inside this thread's outermost active capture; None when none is
    active. Made inside means a serial number from this one up and made by this thread (tensor.py's _made_inside)."""
    began = getattr(_capturing, "began", None)
    return began[0] if began and _captures() else None


@contextlib.contextmanager
def capture_paused() -> Iterator[None]:
    """Inside, nothing is recorded by the active captures: work a replay must not repeat (values of tensors made
    before the capture began, computed once because the captured code overwrites what they read)."""
    stack, _capturing.stack = _captures(), []
    try:
        yield
    finally:
        _capturing.stack = stack


def is_capturing() -> bool:
    return bool(getattr(_capturing, "stack", None))  # (asked on every realize: no call to _captures)


def check_not_capturing(what: str) -> None:
    """Reading data into Python during a capture would freeze that value into every replay."""
    if _captures():
        raise JitError(
            f"{what} inside a TinyJit function: the value read at capture would be frozen into every replay; "
            "return the tensor from the function and read it outside"
        )


def _print_kernel_line(device: str, spec: ProgramSpec, et: float, n_bufs: int, jit: bool) -> None:
    name = spec.display_name + " " * max(0, 24 - ansilen(spec.display_name))
    tag = colored("*** ", "magenta" if jit else "green")
    gflops = spec.ops / et / 1e9 if et > 0 else 0.0
    gbs = spec.mem / et / 1e9 if et > 0 else 0.0
    mem_gb = GlobalCounters.mem_used / 1e9
    print(
        f"{tag}{device:7s} {GlobalCounters.kernel_count:4d} {name} arg {n_bufs:2d} mem {mem_gb:6.2f} GB "
        f"tm {et * 1e6:9.2f}us/{GlobalCounters.time_sum_s * 1e3:9.2f}ms ({gflops:8.2f} GFLOPS {gbs:7.2f} GB/s)"
        + (colored(" jit replay", "magenta") if jit else "")
    )


def lower_schedule_item(si: ScheduleItem) -> ExecItem | None:
    """None for kernels with nothing to compute (an empty output)."""
    if si.outputs[0].size == 0:
        return None
    if si.ast.op is Ops.COPY:
        dst, src = si.bufs
        return ExecItem(BufferCopy(min(dst.nbytes, src.nbytes), dst.device, src.device), list(si.bufs))  # type: ignore[arg-type]
    return ExecItem(get_runner(si.outputs[0].device, si.ast), list(si.bufs))


NEVER_RAN = (
    "a tensor was scheduled with Tensor.schedule() but its kernels never ran: pass that schedule to "
    "lazygrad.engine.realize.run_schedule, or call .realize() instead of .schedule()"
)


def run_schedule(
    schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None = None, built: Callable[[], None] | None = None
) -> None:
    """Build the schedule's kernels, call `built` (before any kernel runs: what raised before it ran no kernel), and
    run them."""
    unfilled = type(schedule) is Schedule and schedule.unfilled
    if not unfilled and not schedule:  # reading a realized tensor realizes it again: nothing to run
        return
    if (plan := _launch_plan(schedule)) is None:
        if unfilled:
            schedule = schedule.fill()  # type: ignore[attr-defined]
        compile_schedule(schedule)
    if built is not None:
        built()
    if plan is not None:
        plan.run(schedule, var_vals or {})
        return
    st, n = time.perf_counter(), 0
    if _on_streams(schedule):
        n = _run_on_streams(schedule, var_vals)
    else:
        n = _run_in_order(schedule, var_vals)
    if DEBUG >= 1 and n:
        print(f"ran {n} kernels in {(time.perf_counter() - st) * 1e3:.2f} ms")


def run_together(*scheduled: tuple[list[ScheduleItem], dict[UOp, int]]) -> None:
    """Schedules (with their variables' values) made one after the other before any of them ran, each maybe reading
    what the ones before it write, run in order; their kernels are built first, all together: one set of compiler
    batches on every core instead of a wait for the compilers per schedule (SmolLM2's prompt: its shared inputs' and
    first layer's kernels, 5 and 21)."""
    compile_schedule([si for schedule, _ in scheduled for si in schedule])
    for schedule, var_vals in scheduled:
        run_schedule(schedule, var_vals)


# *** launch plans: what run_schedule works out about a schedule, once per schedule template ***


class _LaunchPlan:
    """Every instance of a cached schedule template (kernelize.Schedule) runs the same kernels over buffers in the
    same places. A plan holds what the general path works out again on every call: each item's compiled runner, the
    counters' sums, and the memory plan for each set of internal buffers met so far (which buffers are internal
    depends on what the caller still holds, so it is checked every run; the plan of a set is not)."""

    MEMORY_PLANS = 8  # sets of internal buffers remembered per template (a training loop meets one)

    def __init__(self, schedule: list[ScheduleItem]):
        self.knobs = (NOOPT.value, BEAM.value)
        compile_schedule(schedule)
        lowered = [lower_schedule_item(si) for si in schedule]
        self.runners = [ei.runner if ei is not None else None for ei in lowered]
        self.bare = [_direct(r) for r in self.runners]
        self.n_outs = [si.n_outputs for si in schedule]
        specs = [r.spec for r in self.runners if r is not None]
        self.kernels, self.ops, self.mem = len(specs), sum(s.ops for s in specs), sum(s.mem for s in specs)
        self.counts = (self.kernels, self.ops, self.mem, 0.0)  # what a run adds to GlobalCounters
        # each item's buffers as positions in the instance's flat list (Schedule.bufs), the same in every instance
        refs = [r for _, r in schedule.template.items]
        self.refs = refs
        self.outs = [r[:n] for r, n in zip(refs, self.n_outs)]
        n_flat = len(schedule.bufs)
        # the position of each buffer an item reads before any earlier item wrote it: whether its kernel ran is asked
        # there, once, before anything launches (a buffer an earlier item writes is computed by then)
        self.first_reads: list[int] = []
        answered: set[int] = set()  # buffers an earlier item writes, or asked about already
        # references a buffer held by the schedule alone has: the flat list's (`lists`), and each item's where the
        # schedule's items are made (an unfilled instance has none, see kernelize.Schedule.unfilled)
        lists = [1] * n_flat
        # an in-place write's stored position holds its target's buffer, which the items name at the target's slot
        # (a buffer the flat list holds twice: counted at the slot, never planned at the write)
        written_in_place = []
        stored = schedule.template.stored
        for p, (*_, target) in enumerate(stored):
            if target is not None:
                lists[len(stored) + target] += 1
                written_in_place.append(p)
        holders = list(lists)
        for r, n in zip(refs, self.n_outs):
            for j, k in enumerate(r):
                holders[k] += 1
                if j >= n and k not in answered:
                    answered.add(k)
                    self.first_reads.append(k)
            answered.update(r[:n])
        for p in written_in_place:
            holders[p] = -1
        # a position no item names is never planned, nor allocated (only named ones are, as the items list them)
        self.expected = counted(h if h > 1 else -1 for h in holders)
        self.expected_unfilled = counted(n if h > 1 else -1 for n, h in zip(lists, holders))
        self.unnamed = [k for k, h in enumerate(holders) if h == 1]
        self.named = sorted({k for r in refs for k in r})
        # positions of the internal buffers -> (position of a planned buffer, position of the buffer lending it memory)
        self.memory: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        # one kernel (no memory to share between items): launched straight from the template's buffer list
        # (launch_template), as (runner, references into that list, those of its inputs, the program where it takes
        # the buffers' pointers alone: no variables, no grid)
        self.lone: tuple[CompiledRunner | BufferCopy, tuple[int, ...], tuple[int, ...], Callable | None] | None = None
        if len(schedule) == 1 and (runner := self.runners[0]) is not None:
            self.lone = (runner, refs[0], refs[0][self.n_outs[0] :], self.bare[0])
        # a plan run again and again (a training loop's step) launches its kernels through the device's graph: one
        # call of a compiled driver over a table of the flat list's pointers, where each launch was a ctypes call
        # converting its pointers (an eager MLP Adam step: 28 launches). Made on the plan's GRAPH_AFTER-th run, so that
        # a realize met once or twice never compiles a driver; None where not every item is a bare kernel of a device
        # with a graph
        self.runs = 0
        self.graph: Any = None
        self.graph_lock = library_lock()  # (the driver's tables are one per graph: two threads running this plan)
        self.written = [k for outs in self.outs for k in outs]
        self.n_flat = n_flat

    def _make_graph(self) -> Any:
        if len(self.runners) < 2 or any(b is None for b in self.bare):
            return None
        kinds = {r.device.split(":")[0] for r in self.runners if r is not None}
        if len(kinds) != 1 or (graph_class := Device[kinds.pop()].graph) is None:
            return None
        programs = [r.prg for r in self.runners if isinstance(r, CompiledRunner)]
        if len(programs) != len(self.runners) or not graph_class.accepts(programs):
            return None
        try:
            return graph_class(programs, [(r, ()) for r in self.refs], self.n_flat, 0)
        except Exception:  # noqa: BLE001  (the driver is a shortcut: where it cannot be built, kernel by kernel)
            return None

    def _buffers(self, schedule: Schedule) -> list[Buffer] | None:
        """The flat list with planned memory swapped in (None where no buffer is planned). Which buffers only the
        schedule holds is counted on its flat list (memory.held_at), whose places never change, not on a dict of
        every item's buffers."""
        if len(self.refs) < 2:  # a block is reused only by a later kernel than the one that last read it
            return None
        flat = schedule.bufs
        key = held_at(flat, self.expected_unfilled if schedule.unfilled else self.expected)
        if not key:
            return None
        if (pairs := self.memory.get(key)) is None:
            internal = {flat[k] for k in key}
            at = flat.__getitem__
            items = [(tuple(map(at, r)), range(n)) for r, n in zip(self.refs, self.n_outs)]
            mapping = plan_memory(items, internal=internal)
            where = {id(b): k for k, b in enumerate(flat)}
            pairs = [(where[id(b)], where[id(blk)]) for b, blk in mapping.items()]
            del mapping, internal, items
            with _plans_lock:  # (as _plans': schedules of one template run from two threads, each evicting)
                if len(self.memory) >= self.MEMORY_PLANS:
                    del self.memory[next(iter(self.memory))]
                self.memory[key] = pairs
        if not pairs:
            return None
        swapped = list(flat)
        for a, b in pairs:
            swapped[a] = flat[b]
        return swapped

    def run(self, schedule: Schedule, var_vals: dict[UOp, int]) -> None:
        flat = schedule.bufs
        for k in self.first_reads:
            if flat[k].pending_write:
                raise RuntimeError(NEVER_RAN)
        swapped = self._buffers(schedule)
        launched = flat if swapped is None else swapped
        # (a position no item names is never allocated, and never read: only named ones are)
        allocated = launched if not self.unnamed else list(map(launched.__getitem__, self.named))
        # every buffer's memory first (the new outputs'), so that each launch reads the addresses at C speed; the peak
        # is that of allocating at each kernel, as the schedule holds all its buffers to its end. (Asked at C speed
        # first: a step's recycled buffers are all allocated)
        if None in map(_PTR, allocated):
            for b in allocated:
                if b._ptr is None:
                    b.ensure_allocated()
        if self.runs < GRAPH_AFTER:
            self.runs += 1
            if self.runs == GRAPH_AFTER:
                self.graph = self._make_graph()
        if (graph := self.graph) is not None:
            # (a position no item names may hold an unallocated buffer: None, never read)
            pointers = list(map(_PTR, launched))
            with self.graph_lock:
                graph.bufs[: self.n_flat] = pointers
                graph.call()
            for k in self.written:
                flat[k].pending_write = False
            self._count()
            return
        at = launched.__getitem__
        for i, r in enumerate(self.refs):
            if (bare := self.bare[i]) is not None:
                # the compiled function called straight, not through the runner and the program (two Python calls
                # a launch): 20 launches of a 16-element kernel 55 -> 43 us
                bare(*map(_PTR, map(at, r)))
            elif (runner := self.runners[i]) is not None:
                runner(list(map(at, r)), var_vals)
            for k in self.outs[i]:
                flat[k].pending_write = False
        self._count()

    def _count(self) -> None:
        # (count_launched inline, as in launch_template: a call less on every plan's run)
        _launched.append(self.counts)
        if len(_launched) > LAUNCHED_UNADDED:
            GlobalCounters.add_launched()


def _direct(runner: CompiledRunner | BufferCopy | None) -> Callable | None:
    """The compiled function of a kernel that takes its buffers' pointers alone (no variables, no grid), where its
    runtime has one to call (`bare`); else None."""
    if not isinstance(runner, CompiledRunner) or runner.spec.vars or runner.spec.global_size is not None:
        return None
    return runner.prg.bare


_PTR = operator.attrgetter("_ptr")  # an allocated buffer's address


def _pointers(bufs: Iterable[Buffer]) -> list[int]:
    """The buffers' addresses, allocating those not allocated yet (Buffer.ptr inline: a property is a Python call per
    argument; only new outputs allocate)."""
    ptrs = []
    for b in bufs:
        ptrs.append(b._ptr if b._ptr is not None else b.ensure_allocated()._ptr)
    return ptrs


GRAPH_AFTER = 3  # the run of a plan that makes its graph (_LaunchPlan)

# template -> its plan (None: a template the general path runs); a plain dict, looked up on every realize, bounded
# as the scheduler's own cache of templates is
_plans: dict[object, _LaunchPlan | None] = {}
LAUNCH_PLANS = 256
_plans_lock = library_lock()  # threads running schedules at once: an eviction must not meet another's insert


def _launch_plan(schedule: list[ScheduleItem]) -> _LaunchPlan | None:
    """The plan of a schedule instantiated from a template, where nothing needs the general path's per-kernel
    work: no capture recording items, no DEBUG lines or profile spans, one device (no streams)."""
    if type(schedule) is not Schedule or schedule.template is None:
        return None
    if DEBUG.value or profile.enabled() or is_capturing():
        return None
    plan = _plans.get(schedule.template, False)
    if plan is False or plan is not None and plan.knobs != (NOOPT.value, BEAM.value):
        # first met, or the knobs that pick each item's kernel changed since its plan was made
        one_device = len({si.outputs[0].device for si in schedule.fill()}) == 1
        plan = _LaunchPlan(schedule) if one_device else None
        with _plans_lock:
            if len(_plans) >= LAUNCH_PLANS:
                del _plans[next(iter(_plans))]
            _plans[schedule.template] = plan
    return plan


def launch_template(template: object, bufs: list[Buffer], var_vals: dict[UOp, int]) -> bool:
    """Run an instance of a one-kernel schedule template (kernelize._Template) from its buffers in the template's
    reference order, with no ScheduleItem made: a lone realize of a graph seen before. False where run_schedule must
    run it instead: no plan made for the template yet (the general path makes it), other knobs, a capture, or an
    input whose kernel never ran (the general path raises). The caller takes the general path for DEBUG lines and
    profile spans (as _launch_plan does)."""
    plan = _plans.get(template)
    if plan is None or (lone := plan.lone) is None or plan.knobs != (NOOPT.value, BEAM.value):
        return False
    # (is_capturing inline, asked of the thread only while some thread captures: a thread-local read costs ~600
    # instructions, and a capture is counted open before its thread runs anything under it)
    if CAPTURES_OPEN[0] and getattr(_capturing, "stack", None):
        return False
    runner, refs, ins, direct = lone
    for i in ins:
        if bufs[i].pending_write:
            return False
    if direct is not None:
        # (_pointers inline: a call less on every lone realize; only the new output allocates)
        ptrs = []
        for i in refs:
            b = bufs[i]
            ptrs.append(b._ptr if b._ptr is not None else b.ensure_allocated()._ptr)
        direct(*ptrs)
    else:
        runner(list(map(bufs.__getitem__, refs)), var_vals)
    # (count_launched inline: a call less on every lone realize)
    _launched.append(plan.counts)
    if len(_launched) > LAUNCHED_UNADDED:
        GlobalCounters.add_launched()
    return True


_launched = GlobalCounters.launched


def _on_streams(schedule: list[ScheduleItem]) -> bool:
    """Whether the schedule runs one thread per device: it writes on 2+ devices, each launchable from any thread, and
    no TinyJit capture is recording (a capture records the items its own thread runs)."""
    if not DEVICE_THREADS or is_capturing():
        return False
    streams = {si.outputs[0].device for si in schedule}
    if len(streams) < 2:
        return False
    return all(Device[b.device].any_thread for si in schedule for b in si.bufs)


def _run_in_order(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None) -> int:
    n = 0
    for original, si in zip(schedule, memory_planner(schedule)):
        if any(buf.pending_write for buf in original.inputs):
            raise RuntimeError(NEVER_RAN)
        if (ei := lower_schedule_item(si)) is not None:
            ei.run(var_vals)
            n += 1
        for buf in original.outputs:
            buf.pending_write = False
    return n


def _run_on_streams(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None) -> int:
    """The schedule on one thread per device (see engine/streams.py). Everything that is not a launch happens here,
    before any stream starts: the check that inputs were computed, lowering, and allocation (GlobalCounters.mem_used
    stays a single thread's)."""
    items: list[StreamItem] = []
    written: set[Buffer] = set()
    n = 0
    for original, si in zip(schedule, memory_planner(schedule)):
        if any(buf.pending_write and buf not in written for buf in original.inputs):
            raise RuntimeError(NEVER_RAN)
        written.update(original.outputs)
        ei = lower_schedule_item(si)
        if ei is not None:
            n += 1
            for b in ei.bufs:
                b.ensure_allocated()
        items.append(StreamItem(si.outputs[0].device, _launcher(ei, original, var_vals), si.inputs, si.outputs))
    run_streams(items)
    return n


def _launcher(ei: ExecItem | None, original: ScheduleItem, var_vals: dict[UOp, int] | None) -> Callable[[], None]:
    def launch() -> None:
        if ei is not None:
            ei.run(var_vals)
        for buf in original.outputs:
            buf.pending_write = False

    return launch
