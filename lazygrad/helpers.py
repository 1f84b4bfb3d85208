"""Small utilities shared by every layer: environment knobs, counters, caches, formatting."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import gc
import hashlib
import math
import os
import pathlib
import pickle
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")


# *** environment knobs ***


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read an environment variable, typed like its default."""
    return type(default)(os.getenv(key, default))


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or taskset narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def host_memory_bytes() -> int:
    """Physical memory plus swap: the most host memory that can ever back an allocation. A larger request is
    refused up front (`check_host_allocation`): where the kernel overcommits memory without limit it would succeed,
    and the first write over its pages (zeroing a bytearray, a kernel's store) then has the process killed by the OOM
    killer instead of raising MemoryError; where it does not overcommit, this is the limit the kernel applies."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: nothing refused here
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    total += int(line.split()[1]) * 1024
    return total


def check_host_allocation(nbytes: int) -> None:
    """MemoryError for a host allocation larger than the machine's memory and swap together (see host_memory_bytes)."""
    if nbytes > host_memory_bytes():
        raise MemoryError(f"more than this machine's memory and swap ({format_bytes(host_memory_bytes())})")


class ContextVar:
    """A knob read from the environment once, overridable in-process with `Context(...)`."""

    _registry: dict[str, ContextVar] = {}

    def __init__(self, key: str, default: Any):
        self.key, self.value = key, getenv(key, default)
        ContextVar._registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, x: int) -> bool:
        return self.value >= x

    def __gt__(self, x: int) -> bool:
        return self.value > x

    def __lt__(self, x: int) -> bool:
        return self.value < x

    def __le__(self, x: int) -> bool:
        return self.value <= x

    def __eq__(self, x: object) -> bool:
        return self.value == x

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"{self.key}={self.value}"


class Context(contextlib.ContextDecorator):
    """`with Context(DEBUG=2, NOOPT=1): ...` sets knobs for the duration of the block."""

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs

    def __enter__(self) -> None:
        self.old = {}
        for k, v in self.kwargs.items():
            if k not in ContextVar._registry:
                raise KeyError(f"unknown context variable {k!r}; known: {sorted(ContextVar._registry)}")
            self.old[k] = ContextVar._registry[k].value
            ContextVar._registry[k].value = v

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.old.items():
            ContextVar._registry[k].value = v


DEBUG, NOOPT, BEAM, CACHELEVEL = (
    ContextVar("DEBUG", 0),
    ContextVar("NOOPT", 0),
    ContextVar("BEAM", 0),
    ContextVar("CACHELEVEL", 2),
)
JIT, PROFILE = ContextVar("JIT", 1), ContextVar("PROFILE", 0)
# 1: record kernels, rewrite passes and the timeline, then serve them as a web page at exit; -1: only write the file
VIZ = ContextVar("VIZ", 0)
SPEC = ContextVar("SPEC", 0)  # check every kernel against the IR rules of uop/spec.py (the test suite sets it)
# the longest chain of ALU ops one fused kernel computes (see _Planner.cap_kernel_size)
KERNEL_OPS = ContextVar("KERNEL_OPS", 256)
# 1: a realize of what gradient and optimizer programs just built takes its schedule from the programs' positions,
# without the schedule cache's walk of its graph (schedule/kernelize.py, _layout); 0: always the walk
STEP_LAYOUTS = ContextVar("STEP_LAYOUTS", 1)
# 1: the values of index tensors (gather, scatter, tensor indexing, one_hot, Embedding, class targets of the losses)
# are read and range-checked as torch checks them, an IndexError naming the bad value; each check is a device sync.
# 0 (default, as tinygrad): never read; an out-of-range index selects nothing (reads 0, an empty one-hot row)
CHECK_INDEX = ContextVar("CHECK_INDEX", 0)


class ThreadScopedVar(ContextVar):
    """A knob a `with` block may set for its own thread only (enter_scope / exit_scope). Outside such blocks every
    thread reads and writes the process-wide value; inside one, reads and writes (Context(...) included) go to the
    block's value."""

    def __init__(self, key: str, default: Any):
        self._local = threading.local()
        super().__init__(key, default)

    @property  # type: ignore[override]
    def value(self) -> Any:
        scoped = getattr(self._local, "value", None)
        return self._process_value if scoped is None else scoped

    @value.setter
    def value(self, v: Any) -> None:
        if getattr(self._local, "value", None) is None:
            self._process_value = v
        else:
            self._local.value = v

    def enter_scope(self, v: Any) -> None:
        """Set this thread's value until the matching exit_scope (a stack per thread: blocks nest, and one decorator
        object may be entered by several threads at once)."""
        self._local.__dict__.setdefault("outer", []).append(getattr(self._local, "value", None))
        self._local.value = v

    def exit_scope(self) -> None:
        self._local.value = self._local.outer.pop()


# 1 while training (dropout active, batchnorm updates its statistics, optimizers may step): what `Tensor.training`
# reads. `Tensor.train()` sets it for its thread only, as torch's grad mode is per thread: a thread serving inference
# in eval mode must not turn off the dropout of a thread that trains, nor the other way round.
TRAINING = ThreadScopedVar("TRAINING", 0)
# the dtype a Python float (and a float tensor made without a dtype) gets, and a Python int's: a dtype or its name,
# read through `dtypes.default_float` / `dtypes.default_int` (tinygrad's `Context(DEFAULT_FLOAT=dtypes.half)`)
DEFAULT_FLOAT, DEFAULT_INT = ContextVar("DEFAULT_FLOAT", "float32"), ContextVar("DEFAULT_INT", "int32")
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)  # 1: BEAM searches again instead of reading its disk cache
# programs per compiler call when a schedule's kernels are compiled: one call per batch, the batches on worker threads
# beside the code generation of the next ones; 0: two batches per core (see engine/realize.compile_schedule)
COMPILE_BATCH = ContextVar("COMPILE_BATCH", 0)
# 1: a schedule spanning several devices runs one thread per device, so they compute at once (engine/streams.py)
DEVICE_THREADS = ContextVar("DEVICE_THREADS", 1)
# tinygrad knobs that lazygrad has no use for: `Context(...)` accepts them (a tinygrad program sets them) and they
# change nothing; a name that is neither this nor a knob above is a KeyError, as in tinygrad
_TINYGRAD_ONLY_KNOBS = {
    "IMAGE": 0,
    "FLOAT16": 0,
    "WINO": 0,
    "TRANSCENDENTAL": 1,
    "SPLIT_REDUCEOP": 1,
    "NO_MEMORY_PLANNER": 0,
    "FUSE_OPTIM": 0,
    "TRACEMETA": 1,
    "CAPTURING": 1,
    "ALLOW_DEVICE_USAGE": 1,
    "LRU": 1,
    "RING": 1,
    "IGNORE_OOB": 0,  # tinygrad's switch off of its index bounds prover; lazygrad has none to switch off
    "CHECK_OOB": 0,
    "TRACK_MATCH_STATS": 0,
    "DEVECTORIZE": 1,
    "OPENPILOT_HACKS": 0,
    "JIT_BATCH_SIZE": 32,
    "NO_COLOR": 0,
    "TC": 1,
    "TC_SELECT": -1,
    "TC_OPT": 0,
    "NOLOCALS": 0,
    "ALL2ALL": 0,
    "ALLREDUCE_CAST": 1,
    "VALIDATE_WITH_CPU": 0,
    "DISABLE_FAST_IDIV": 1,
    "MAX_BUFFER_SIZE": 0,
    "MAX_KERNEL_BUFFERS": 0,
    "EMULATED_DTYPES": "",
    "CAPTURE_PROCESS_REPLAY": 0,
    "NULL_ALLOW_COPYOUT": 0,
    "PCONTIG": 0,
    "DEBUG_RANGEIFY": 0,
    "TUPLE_ORDER": 1,
    "CCACHE": 1,
    "ALLOW_TF32": 0,
    "SCACHE": 1,
    "USE_ATOMICS": 0,
    "DISALLOW_BROADCAST": 0,
}
for _name, _default in _TINYGRAD_ONLY_KNOBS.items():
    ContextVar(_name, _default)
CI = bool(os.getenv("CI"))  # running under continuous integration (tests skip what is slow or needs hardware there)
OSX, WIN = sys.platform == "darwin", sys.platform == "win32"


# *** fork ***
# A process forked while another thread is inside the library gets a copy of every lock as it was, held by a thread
# the child does not have, and the child's first realize, compile or cache read waited on it forever (a forked pool
# worker hung on the compiler's lock a build ahead in its parent held). Two measures: the library's locks are made by
# library_lock and made free again in the child; and a few sections whose copy in the child would be broken for good
# or would keep the parent waiting (a compiler process being started, a disk cache call inside sqlite) are fork
# sections, which a fork waits to see none of before it copies the process.

_fork_locks: weakref.WeakSet[Any] = weakref.WeakSet()


def library_lock(reentrant: bool = False) -> Any:
    """A threading.Lock (RLock if reentrant) that a forked child finds free."""
    lock = threading.RLock() if reentrant else threading.Lock()
    _fork_locks.add(lock)
    return lock


class _ForkSections:
    """Sections a fork waits for (see above): entered by any number of threads at once, none entered during a fork."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.inside = 0

    @contextlib.contextmanager
    def section(self) -> Iterator[None]:
        with self.cond:
            self.inside += 1
        try:
            yield
        finally:
            with self.cond:
                self.inside -= 1
                if not self.inside:
                    self.cond.notify_all()

    def before_fork(self) -> None:
        # held until the fork is done: no section starts in between (a section never waits on the forking thread)
        self.cond.acquire()
        while self.inside:
            self.cond.wait()

    def after_fork_in_parent(self) -> None:
        self.cond.release()

    def after_fork_in_child(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.inside = 0


_fork_sections = _ForkSections()
fork_section = _fork_sections.section
# the write ends of pipes into processes the library started (a compiler reading its source until end of file): a
# forked child's copy is pointed at /dev/null, else the process never saw the end of its input while the child lived
_parent_pipes: weakref.WeakSet[Any] = weakref.WeakSet()


def spawn(cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen in a fork section: a fork in the middle left the child holding the pipe through which Popen
    learns that the program started, and the parent's Popen waited until that child exited."""
    with fork_section():
        proc = subprocess.Popen(cmd, **kwargs)
        if proc.stdin is not None:
            _parent_pipes.add(proc.stdin)
    return proc


def run_process(cmd: Sequence[str], input: str | None = None, timeout: float | None = None, **kwargs: Any) -> Any:
    """subprocess.run(cmd, capture_output=True, text=True, input=..., timeout=...) started with spawn."""
    pipe = subprocess.PIPE
    with spawn(cmd, stdin=pipe if input is not None else None, stdout=pipe, stderr=pipe, text=True, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _after_fork_in_child() -> None:
    _fork_sections.after_fork_in_child()
    for lock in list(_fork_locks):
        lock._at_fork_reinit()  # (CPython's own way, as threading and logging reset theirs)
    pipes = [f for f in list(_parent_pipes) if not f.closed]
    _parent_pipes.clear()
    if pipes:
        null = os.open(os.devnull, os.O_WRONLY)
        for f in pipes:
            os.dup2(null, f.fileno())  # (the file object keeps its descriptor: a later close closes /dev/null)
        os.close(null)
    _forget_db_connections()


os.register_at_fork(
    before=_fork_sections.before_fork,
    after_in_parent=_fork_sections.after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


class _Launched:
    """A count of _GlobalCounters kept in attribute `name`, with the launches noted so far added before it is read
    or set."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, counters: _GlobalCounters | None, owner: type | None = None) -> Any:
        if counters is None:
            return self
        counters.add_launched()
        return getattr(counters, self.name)

    def __set__(self, counters: _GlobalCounters, value: Any) -> None:
        counters.add_launched()
        setattr(counters, self.name, value)


class _GlobalCounters:
    """Process-wide counters that tests and benchmarks read: kernels run, FLOPs, bytes, time, memory.

    Launches note what they ran with count_launched, with no lock: each appends its (kernels, FLOPs, bytes, seconds)
    to `launched` (deque.append is one atomic C call), and a read of a count adds what was appended first, under a
    lock of its own. A lock taken per launch around three sums was ~1500 instructions of a repeated
    `(a + b).realize()` (2%); a launch from any thread (a TinyJit replay, a device stream, a user's thread running an
    ExecItem) is counted once, whichever thread reads."""

    def __init__(self) -> None:
        self._kernels, self._ops, self._mem, self._time = 0, 0, 0, 0.0
        self.mem_used = 0  # bytes currently allocated on all devices
        self.mem_peak = 0  # the most mem_used has been since the last reset
        self.launched: collections.deque[tuple[int, int, int, float]] = collections.deque()
        self._adding = library_lock()

    def add_launched(self) -> None:
        """Add the launches noted so far into the counts."""
        with self._adding:
            launched = self.launched
            while launched:
                kernels, ops, mem, seconds = launched.popleft()  # (only this lock's holder takes them off)
                self._kernels += kernels
                self._ops += ops
                self._mem += mem
                self._time += seconds

    # the counts, each read or set after the launches noted so far are added in
    kernel_count = _Launched("_kernels")
    global_ops = _Launched("_ops")
    global_mem = _Launched("_mem")
    time_sum_s = _Launched("_time")

    def reset(self) -> None:
        self.add_launched()
        self._kernels, self._ops, self._mem, self._time = 0, 0, 0, 0.0
        self.mem_peak = self.mem_used


# the one instance, read as tinygrad's class is (GlobalCounters.kernel_count, GlobalCounters.reset()): every launch and
# every allocation updates it, and an update of a class attribute invalidated the class's attribute caches each time
# (171 ns an update and compare, 54 on an instance)
GlobalCounters = _GlobalCounters()
LAUNCHED_UNADDED = 4096  # launches noted before a launch adds them in itself (nothing reading the counts for a while)


def count_launched(counts: tuple[int, int, int, float]) -> None:
    """Note a launch's (kernels, FLOPs, bytes, seconds) in GlobalCounters (see _GlobalCounters)."""
    launched = GlobalCounters.launched
    launched.append(counts)
    if len(launched) > LAUNCHED_UNADDED:
        GlobalCounters.add_launched()


# *** threads ***

LIBRARY_THREAD = "lazygrad"  # the prefix of the names of the library's own threads (compilers, device streams, viz)

# CPython 3.11 keeps a new instance's attributes in inline values and makes its __dict__ from them on first use, with a
# dict allocation in between that may run the collector, whose callbacks give another thread its turn (3.12 runs the
# collector at the next bytecode boundary instead). Two threads using a shared object's __dict__ for the first time at
# once made two dicts over one values array; when one outgrew the class's shared keys it freed the values, and the
# object's dict went on reading and writing freed memory (a rare segfault of threads building the same graph). Objects
# that threads share and cache in through __dict__ (hash-consed nodes, buffers) make theirs where they are made.
DICT_ON_FIRST_USE_RACES = sys.version_info < (3, 12)

# the CPython versions on which the reference counts read with sys.getrefcount where a frame holds an object were
# checked (3.10 counts more; a later version may borrow references its frames held, so a count would read low and say
# nobody else holds an object somebody does): code deciding by such a count takes its shortcut only on these
FRAME_REFS_CHECKED = sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13)


def alone_with_library_threads() -> bool:
    """Whether every live thread but this one is the library's own (named LIBRARY_THREAD...) or a daemon, which are
    taken not to read a user's tensors. While it holds, no other thread can start one that does: only this thread
    could. Daemons are service threads (tqdm's monitor, which outlives every progress bar; a test runner's receiver):
    counting them would make every eager step of a program that ever showed a bar slower for good (one idle extra
    thread: ~10% per Adam MLP step, measured). A thread that reads tensors while another trains must be a regular
    (non-daemon) thread."""
    if threading.active_count() == 1:
        return True
    me = threading.current_thread()
    return all(t is me or t.daemon or t.name.startswith(LIBRARY_THREAD) for t in threading.enumerate())


# *** the cycle collector ***


class cycles_held_off:
    """`with cycles_held_off():` Python's cycle collector held off for a call of the library's own whose objects die by
    reference count, where the collections their allocations trigger would scan every young object (and promote the
    survivors toward the full collections, each a scan of every object the process holds).

    An eager training step builds its graph (~280 nodes for an MLP, each with its hash-cons entry, key and source
    tuples) and a realize frees the last step's, so the collector's counter of allocations rose past its threshold
    inside nearly every realize: 0.91 young collections a step (~65 us each), one of the middle generation every 12
    steps and a full one every ~150 (~18 ms with the caches cold). Held off over the realize the counter comes back down
    before the window ends (the old graph's frees count against it): 0.06 a step, and the collector's time per step
    ~217 -> 10 us (the digits CNN's, whose backward alone passes the threshold: 2.75 -> 0.92 young collections a
    step, ~1090 -> 230 us; a shared machine, each collection's time inflated alike). Codegen builds tens of thousands of
    nodes that live until the kernel is rendered (the cold CNN step: 40 ms of collections, a 30 ms full one among
    them; its main thread 357 -> 332 ms of CPU).

    Not `gc.freeze()`: that moves every object the process holds, the user's too, out of the collector's reach for good
    (a cycle among them is never freed; tried after an MLP's steps, the frozen nodes outlived the modules at exit and
    their hash-cons callbacks failed noisily), and is the application's call, not a library's. Nor other thresholds:
    those are the user's. A window cannot leak: what cycles it makes wait for the next collection after it, and the
    collector is on again when the window that found it on ends (nested windows, and windows of other threads meanwhile,
    find it off and leave it so; a collector the program turned off stays off, unless it turned it off while a window of
    another thread was open: that window's end turns it on, as it found it). Held off process-wide, as the collector
    is one per interpreter: another thread's cycles made meanwhile wait for the window's end too."""

    __slots__ = ("was_on",)

    def __enter__(self) -> None:
        self.was_on = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_on:
            gc.enable()


# *** sequences ***


def prod(xs: Iterable[Any], start: Any = 1) -> Any:
    return functools.reduce(lambda a, b: a * b, xs, start)


def all_same(xs: Sequence[Any]) -> bool:
    return all(x == xs[0] for x in xs)


def all_int(xs: Iterable[Any]) -> bool:
    return all(isinstance(x, int) for x in xs)


def dedup(xs: Iterable[T]) -> list[T]:
    return list(dict.fromkeys(xs))


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    return [x for xs in xss for x in xs]


def argsort(xs: Sequence[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)


def argfix(*x: Any) -> tuple[Any, ...]:
    """Accept both f(1, 2, 3) and f((1, 2, 3))."""
    if x and isinstance(x[0], (tuple, list)):
        if len(x) != 1:
            raise ValueError(f"bad arguments {x}: pass either one sequence or several ints")
        return tuple(x[0])
    return tuple(x)


def make_tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (x,) * n if isinstance(x, int) else tuple(x)


def round_up(n: int, amount: int) -> int:
    return -(-n // amount) * amount


def ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def partition(xs: Iterable[T], pred: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    yes: list[T] = []
    no: list[T] = []
    for x in xs:
        (yes if pred(x) else no).append(x)
    return yes, no


def unwrap(x: T | None) -> T:
    assert x is not None
    return x


def merge_dicts(ds: Iterable[dict]) -> dict:
    out: dict = {}
    for d in ds:
        for k, v in d.items():
            if k in out and out[k] != v:
                raise ValueError(f"conflicting values for {k}: {out[k]} and {v}")
            out[k] = v
    return out


def polyN(x: Any, coeffs: Sequence[float]) -> Any:
    """Horner evaluation: coeffs from highest degree to constant."""
    return functools.reduce(lambda acc, c: acc * x + c, coeffs, 0.0)


def is_float_nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


# *** text ***

_COLORS = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}


def colored(s: str, color: str | None, background: bool = False) -> str:
    if color is None or not sys.stdout.isatty() and not getenv("FORCE_COLOR"):
        return s
    bright = color.isupper()
    code = _COLORS[color.lower()] + (60 if bright else 0) + (10 if background else 0)
    return f"\u001b[{code}m{s}\u001b[0m"


def ansistrip(s: str) -> str:
    import re

    return re.sub(r"\x1b\[(K|.*?m)", "", s)


def ansilen(s: str) -> int:
    return len(ansistrip(s))


def format_bytes(n: int) -> str:
    """Decimal units, as drive sizes are given: 4000000000000 -> '4.0 TB'."""
    if n < 1000:
        return f"{n} B"
    size = float(n)
    for unit in ("KB", "MB", "GB", "TB", "PB"):
        size /= 1000
        if size < 1000:
            break
    return f"{size:.1f} {unit}"


def to_function_name(s: str) -> str:
    """A printable kernel name made safe for C identifiers."""
    return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in ansistrip(s))


# *** disk cache (compiled binaries, BEAM winners) ***

_cache_dir = pathlib.Path(os.getenv("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "lazygrad"
CACHEDB = getenv("CACHEDB", str(_cache_dir / "cache.db"))
_db_local = threading.local()  # a sqlite connection may only be used by the thread that opened it: one per thread
_db_inherited: list[sqlite3.Connection] = []  # a forked child's copies of its parent's connections, never used


def _forget_db_connections() -> None:
    """A forked child opens connections of its own (sqlite: a connection must not cross a fork). The inherited one is
    kept, not closed: closing it could roll back a transaction its parent has open."""
    global _db_local
    if (conn := getattr(_db_local, "conn", None)) is not None:
        _db_inherited.append(conn)
    _db_local = threading.local()


def _db() -> sqlite3.Connection | None:
    if getattr(_db_local, "conn", None) is None:
        try:
            pathlib.Path(CACHEDB).parent.mkdir(parents=True, exist_ok=True)
            with fork_section():
                conn = sqlite3.connect(CACHEDB, timeout=30, isolation_level=None)
        except (sqlite3.Error, OSError):
            return None  # an unwritable cache location only costs speed
        try:
            with fork_section():
                conn.execute("PRAGMA journal_mode=WAL")  # lasting: the first connection to set it sets it for all
        except sqlite3.OperationalError:
            pass  # locked by another thread's first connection switching it at the same moment
        _db_local.conn = conn
    return _db_local.conn


# sqlite calls run in fork sections: a fork while another thread is inside sqlite copied its mutexes held (the memory
# allocator's is taken by most calls), and the child's first cache read waited on them


def diskcache_get(table: str, key: Any) -> Any:
    if CACHELEVEL < 1 or (conn := _db()) is None:
        return None
    try:
        with fork_section():
            row = conn.execute(f"SELECT val FROM {table}_v1 WHERE key=?", (_cache_key(key),)).fetchone()
    except sqlite3.OperationalError:
        return None  # table not made yet
    return pickle.loads(row[0]) if row else None


def diskcache_put(table: str, key: Any, val: Any) -> Any:
    diskcache_put_many(table, [(key, val)])
    return val


def diskcache_put_many(table: str, items: list[tuple[Any, Any]]) -> None:
    """(key, value) pairs written in one transaction: each commit waits for the disk (~10 ms a put on a busy one)."""
    if CACHELEVEL < 1 or (conn := _db()) is None:
        return
    rows = [(_cache_key(key), pickle.dumps(val)) for key, val in items]
    try:
        with fork_section():
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table}_v1 (key TEXT PRIMARY KEY, val BLOB)")
            conn.execute("BEGIN")
            try:
                conn.executemany(f"REPLACE INTO {table}_v1 (key, val) VALUES (?, ?)", rows)
                conn.execute("COMMIT")
            except sqlite3.Error:
                conn.execute("ROLLBACK")
                raise
    except sqlite3.Error:
        pass


def _cache_key(key: Any) -> str:
    return key if isinstance(key, str) else hashlib.sha256(repr(key).encode()).hexdigest()


def temp(name: str, append_user: bool = False) -> str:
    """A path named `name` in the system's temporary directory (tinygrad's helper; append_user keeps users apart)."""
    return os.path.join(tempfile.gettempdir(), f"{name}.{os.getuid()}" if append_user else name)


def mv_address(mv: memoryview) -> int:
    """The address of a writable memoryview's first byte (for Tensor.from_blob), as tinygrad's helper."""
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


@contextlib.contextmanager
def timed(label: str) -> Iterator[None]:
    st = time.perf_counter()
    yield
    if DEBUG >= 1:
        print(f"{label}: {(time.perf_counter() - st) * 1e3:.2f} ms")


# *** tinygrad's helpers that its programs import (from tinygrad.helpers import Timing, trange, fetch, ...) ***


class Timing(contextlib.ContextDecorator):
    """Prints how long the block took: `with Timing("step "): ...` -> "step   12.34 ms" (plus on_exit(ns)'s text)."""

    def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True) -> None:
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled

    def __enter__(self) -> Timing:
        self.st = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.et = time.perf_counter_ns() - self.st
        if self.enabled:
            print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))


class Profiling(contextlib.ContextDecorator):
    """cProfile over the block; prints the top `frac` of the functions sorted by `sort` (or writes the stats to fn)."""

    def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None) -> None:
        self.enabled, self.sort, self.frac, self.fn = enabled, sort, frac, fn

    def __enter__(self) -> Profiling:
        import cProfile

        self.pr = cProfile.Profile()
        if self.enabled:
            self.pr.enable()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.enabled:
            return
        import pstats

        self.pr.disable()
        if self.fn:
            self.pr.dump_stats(self.fn)
        pstats.Stats(self.pr).strip_dirs().sort_stats(self.sort).print_stats(self.frac)


class tqdm:  # noqa: N801  (tinygrad's and tqdm's name)
    """A progress bar on stderr for an iterable or a count (`update(n)`), with rate and time left: tinygrad's tqdm,
    so that programs written for it run without the tqdm package."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        desc: str = "",
        disable: bool = False,
        unit: str = "it",
        unit_scale: bool = False,
        total: int | None = None,
        rate: int = 100,
    ) -> None:
        self.iterable, self.disable, self.unit, self.unit_scale, self.rate = iterable, disable, unit, unit_scale, rate
        if total is None and iterable is not None:
            total = len(iterable) if hasattr(iterable, "__len__") else None  # type: ignore[arg-type]
        self.total, self.desc, self.n, self.st = total, desc, 0, time.perf_counter()
        self.last_print, self.skip = 0.0, 1
        self.set_description(desc)

    def set_description(self, desc: str) -> None:
        self.desc = f"{desc}: " if desc else ""
        self._print(force=False)

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("tqdm without an iterable is updated by update(n), not iterated")
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> tqdm:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, n: int = 1, close: bool = False) -> None:
        self.n += n
        self._print(force=close)

    def close(self) -> None:
        self._print(force=True)
        if not self.disable:
            print(file=sys.stderr)

    def _print(self, force: bool) -> None:
        now = time.perf_counter()
        if self.disable or (not force and now - self.last_print < 1 / self.rate):
            return
        self.last_print, elapsed = now, now - self.st
        speed = self.n / elapsed if elapsed > 0 else 0.0

        def scaled(x: float) -> str:
            if not self.unit_scale:
                return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"
            for prefix in ("", "k", "M", "G", "T"):
                if abs(x) < 1000:
                    return f"{x:.0f}" if not prefix else f"{x:.2f}".rstrip("0").rstrip(".") + prefix
                x /= 1000
            return f"{x:.2f}P"

        if self.total:
            frac = min(self.n / self.total, 1.0)
            left = max(self.total - self.n, 0) / speed if speed > 0 else 0.0
            bar = "█" * int(frac * 20) + " " * (20 - int(frac * 20))
            text = f"\r{self.desc}{frac * 100:3.0f}%|{bar}| {scaled(self.n)}/{scaled(self.total)} "
            text += f"[{time_to_str(elapsed, 0)}<{time_to_str(left, 0)}, {scaled(speed)}{self.unit}/s]"
        else:
            text = f"\r{self.desc}{scaled(self.n)}{self.unit} [{time_to_str(elapsed, 0)}, {scaled(speed)}{self.unit}/s]"
        print(text, end="", file=sys.stderr, flush=True)


def trange(n: int, **kwargs: Any) -> tqdm:
    """tqdm(range(n))."""
    return tqdm(range(n), total=n, **kwargs)


def time_to_str(t: float, w: int = 8) -> str:
    """Seconds in the unit that reads best (s above 10 s, ms above 10 ms, else us), right-aligned in w characters."""
    for scale, unit in ((1, "s"), (1e3, "ms")):
        if t * scale > 10:
            return f"{t * scale:{w}.2f}{unit}"
    return f"{t * 1e6:{w}.2f}us"


def fetch(
    url: str,
    name: str | pathlib.Path | None = None,
    subdir: str | None = None,
    gunzip: bool = False,
    allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"),
) -> pathlib.Path:
    """The file at `url` downloaded once into the cache directory (`$XDG_CACHE_HOME/lazygrad/downloads`, named
    `name` or the URL's hash, in `subdir`), gunzipped if asked; its path. A local path is returned as it is."""
    import gzip
    import shutil
    import urllib.request

    if url.startswith(("/", ".")):
        return pathlib.Path(url)
    if name is not None and (isinstance(name, pathlib.Path) or "/" in str(name)):
        fp = pathlib.Path(name)
    else:
        digest = hashlib.md5((url + " gunzip" * gunzip).encode()).hexdigest()  # the gunzipped file apart
        fp = _cache_dir / "downloads" / (subdir or "") / (name or digest)
    if fp.is_file() and allow_caching:
        return fp
    fp.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=30) as r:
        if getattr(r, "status", None) not in (None, 200):  # (a file:// response has no status)
            raise OSError(f"fetch {url}: status {r.status}")
        tmp = fp.with_name(fp.name + f".{os.getpid()}.{threading.get_ident()}.part")
        with open(tmp, "wb") as f:
            shutil.copyfileobj(gzip.GzipFile(fileobj=r) if gunzip else r, f)
    os.replace(tmp, fp)  # whole or not at all: another process may be reading the cache
    return fp


def fully_flatten(xs: Any) -> list:
    """Nested lists and tuples (and anything with a tolist) as one flat list."""
    if hasattr(xs, "tolist") and not isinstance(xs, (list, tuple)):
        xs = xs.tolist()
    if not isinstance(xs, (list, tuple)):
        return [xs]
    return [y for x in xs for y in fully_flatten(x)]


def get_child(obj: Any, key: str) -> Any:
    """obj's member at a dotted path: "layers.0.weight" (numbers index, dicts by key, the rest by attribute)."""
    for k in key.split("."):
        obj = obj[int(k)] if k.isnumeric() else obj[k] if isinstance(obj, dict) else getattr(obj, k)
    return obj


def pluralize(word: str, count: int) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def strip_parens(s: str) -> str:
    """s without one pair of parentheses around all of it."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth = 0
    for i, c in enumerate(s):
        depth += (c == "(") - (c == ")")
        if depth == 0 and i != len(s) - 1:
            return s  # the first "(" closes before the end: "(a)+(b)"
    return s[1:-1]


def word_wrap(x: str, wrap: int = 80) -> str:
    """Each line cut into pieces of at most `wrap` visible characters (color codes do not count)."""
    lines = x.splitlines()
    if len(lines) > 1:
        return "\n".join(word_wrap(line, wrap) for line in lines)
    out, i = "", 0
    while ansilen(x) > wrap:
        # the cut point: `wrap` visible characters in
        i, seen = 0, 0
        while seen < wrap and i < len(x):
            if x[i] == "\x1b" and (end := x.find("m", i)) != -1:
                i = end + 1
                continue
            i, seen = i + 1, seen + 1
        out, x = out + x[:i] + "\n", x[i:]
    return out + x


def to_mv(ptr: int, size: int) -> memoryview:
    """`size` bytes at address `ptr` as a writable memoryview."""
    return memoryview((ctypes.c_uint8 * size).from_address(ptr)).cast("B")


def from_mv(mv: memoryview, to_type: Any = ctypes.c_char) -> Any:
    """A ctypes array of to_type over a writable memoryview's bytes."""
    return ctypes.cast(ctypes.addressof(to_type.from_buffer(mv)), ctypes.POINTER(to_type * len(mv))).contents


def i2u(bits: int, value: int) -> int:
    """A signed value as the unsigned integer of `bits` bits with the same bits."""
    return value if value >= 0 else (1 << bits) + value


def getbits(value: int, start: int, end: int) -> int:
    """Bits start..end (inclusive) of value."""
    return (value >> start) & ((1 << (end - start + 1)) - 1)


def lo32(x: int) -> int:
    return x & 0xFFFFFFFF


def hi32(x: int) -> int:
    return x >> 32


def data64(x: int) -> tuple[int, int]:
    """A 64-bit value as (high, low) 32-bit halves."""
    return (hi32(x), lo32(x))


def data64_le(x: int) -> tuple[int, int]:
    """A 64-bit value as (low, high) 32-bit halves."""
    return (lo32(x), hi32(x))


def cdiv(x: int, y: int) -> int:
    """C's integer division (towards zero); 0 when y is 0."""
    return abs(x) // abs(y) * (1, -1)[x * y < 0] if y != 0 else 0


def cmod(x: int, y: int) -> int:
    """C's remainder (the dividend's sign)."""
    return x - cdiv(x, y) * y


def diskcache(func: Callable[..., T]) -> Callable[..., T]:
    """func's results kept in the disk cache (CACHELEVEL), keyed by its name and arguments."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        key = (func.__module__, func.__qualname__, args, tuple(sorted(kwargs.items())))
        if (hit := diskcache_get("diskcache", key)) is not None:
            return hit
        return diskcache_put("diskcache", key, func(*args, **kwargs))

    return wrapper
