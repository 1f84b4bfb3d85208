"""The CPU thread team (lazygrad/runtime/threads_cpu.py): the policy on made-up clocks, and what kernels launch."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.device import Device
from lazygrad.engine.realize import lower_schedule_item
from lazygrad.runtime.ops_cpu import _libraries_needed, _undefined_symbols
from lazygrad.runtime.threads_cpu import GOMP_SPINCOUNT, TeamState, set_fixed_team, team_launches

MS = 1_000_000  # ns


@pytest.fixture
def team():
    dev = Device["CPU"]
    if not dev.renderer.has_threads:
        pytest.skip("no OpenMP in this C compiler, or one core")
    from lazygrad.runtime import threads_cpu

    yield threads_cpu._team
    set_fixed_team(0)


def _steps(lib, state: TeamState, windows: list[tuple], threads: int = 2) -> list[int]:
    """The load mode (the team of a small kernel) after each window of (ms of wall time, ms of them the launching
    thread waited for a core[, times it got a core: 10 unless given][, ms it ran: all it did not wait unless given])."""
    if not state.wall:  # a first check: every thread
        lib.lg_team_step(ctypes.byref(state), 1000 * MS, 0, 0, 0, threads)
    now, ran, delay, slices, out = state.wall, state.ran, state.delay, state.slices, []
    for wall, waited, *more in windows:
        got, run = (more + [10, wall - waited][len(more) :])[:2]
        now, ran, delay, slices = now + int(wall * MS), ran + int(run * MS), delay + int(waited * MS), slices + got
        lib.lg_team_step(ctypes.byref(state), now, ran, delay, slices, threads)
        out.append(state.team)
    return out


def _pick(lib, state: TeamState, ops: int, nbytes: int = 0, threads: int = 2) -> int:
    return lib.lg_team_pick(ctypes.byref(state), threads, ops, nbytes)


def test_idle_machine_keeps_every_thread(team):
    state = TeamState()
    assert _steps(team, state, [(10, 0), (10, 0.2), (10, 0.4)]) == [2, 2, 2]
    assert state.hold == 0 and state.next == state.wall + 10 * MS
    assert _pick(team, state, 1) == _pick(team, state, 1 << 40) == 2  # every kernel, however small


def test_waiting_for_a_core_gives_one_thread_for_a_hold_that_doubles(team):
    state = TeamState()
    # threads wait (1 ms of 10): one thread for 20 ms; alone it did not wait, so threads again (a try), which wait
    assert _steps(team, state, [(10, 1), (20, 0), (10, 2)]) == [1, 2, 1]
    assert state.hold == 40 * MS and state.next == state.wall + 40 * MS
    # a lone thread that waits too (two neighbours or more) stays alone, the hold as it was
    assert _steps(team, state, [(40, 20)])[-1] == 1 and state.hold == 40 * MS
    # a try that does not wait keeps the threads and forgets the hold
    state = TeamState()
    assert _steps(team, state, [(10, 3), (20, 0), (10, 0), (10, 0)]) == [1, 2, 2, 2] and state.hold == 0


def test_hold_stops_at_one_second(team):
    state = TeamState()
    _steps(team, state, [(10, 5)] + [(2000, 0), (10, 5)] * 8)  # each try after the hold waits again
    assert state.hold == 1000 * MS


def test_unknown_run_delay_keeps_every_thread(team):
    state = TeamState()
    team.lg_team_step(ctypes.byref(state), 1000 * MS, 0, -1, 0, 2)
    team.lg_team_step(ctypes.byref(state), 1010 * MS, 0, -1, 0, 2)
    assert state.team == 2 and _pick(team, state, 1) == 2


WORK_PER_NS = 128  # ops + bytes one core gets through per ns (threads_cpu.py); threads for 4 waits' work


@pytest.mark.parametrize(
    "waited, got, ran, kernel_us, want",
    [
        (2, 20, 8, 300, 1),  # 0.1 ms a wait at 0.8 of a core: a kernel of 0.3 ms (a conv of the digits CNN) on one
        (2, 20, 8, 500, 2),  # one of 0.5 ms keeps its threads
        (2, 20, 2, 300, 2),  # the same waits at 0.2 of a core (the thread sleeps too): 0.3 ms is 1.5 ms of wall time
        (8, 4, 2, 1000, 1),  # 2 ms a wait at 0.2 of a core (heavy load): 1 ms on one
        (8, 1, 2, 16000, 2),  # 8 ms a wait: a 1024^2 matmul (16 ms) keeps its threads
    ],
)
def test_under_load_a_kernel_keeps_threads_when_it_outlasts_the_waits(team, waited, got, ran, kernel_us, want):
    state = TeamState()
    assert _steps(team, state, [(10, waited, got, ran)]) == [1]
    assert state.wait == waited * MS // got * ran // 10
    work = kernel_us * 1000 * WORK_PER_NS
    assert _pick(team, state, work // 2, work - work // 2) == want  # ops and bytes count alike


def test_calm_again_gives_small_kernels_their_threads_back(team):
    state = TeamState()
    assert _steps(team, state, [(10, 2, 20)]) == [1] and _pick(team, state, 1000) == 1
    assert _steps(team, state, [(20, 0, 30)]) == [2] and state.wait == 0 and _pick(team, state, 1000) == 2


def test_run_delay_is_read_from_the_kernel(team):
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("no /proc/thread-self/schedstat")

    def python_sched() -> list[int]:
        with open("/proc/thread-self/schedstat") as f:
            return [int(v) for v in f.read().split()[:3]]

    first = python_sched()
    got = [ctypes.c_longlong() for _ in range(3)]
    assert team.lg_team_sched(*(ctypes.byref(v) for v in got)) == 0
    last = python_sched()
    assert all(a <= v.value <= b for a, v, b in zip(first, got, last))


def _threaded_kernel():
    x = Tensor(np.arange(600 * 1000, dtype=np.float32).reshape(600, 1000)).realize()
    (item,) = (x * 2 + 1).schedule()
    ei = lower_schedule_item(item)
    assert ei is not None and "LG_TEAM" in ei.runner.spec.src
    return ei, np.arange(600 * 1000, dtype=np.float32).reshape(600, 1000) * 2 + 1


def test_each_launch_tells_the_team_its_work(team):
    ei, _ = _threaded_kernel()
    spec = ei.runner.spec
    assert spec.ops == 2 * 600 * 1000 and spec.mem == 2 * 4 * 600 * 1000
    assert f"LG_TEAM({Device['CPU'].threads}, {spec.ops}LL, {spec.mem}LL)" in spec.src


def _threaded_items(*tensors: Tensor) -> list:
    items = [ei for si in Tensor.schedule(*tensors) if (ei := lower_schedule_item(si)) is not None]
    assert any("LG_TEAM" in ei.runner.spec.src for ei in items)
    return items


@pytest.mark.parametrize("case", ["sum", "matmul", "conv"])
def test_results_are_bit_identical_whatever_the_team(team, case):
    # a reduce split across threads (THREAD_REDUCE) is split into as many partials as the kernel was compiled for and
    # combined in a fixed order: the team that runs them does not change one bit
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((1 << 20,)).astype(np.float32)).realize()
    a = Tensor(rng.standard_normal((256, 512)).astype(np.float32)).realize()
    b = Tensor(rng.standard_normal((512, 192)).astype(np.float32)).realize()
    img = Tensor(rng.standard_normal((16, 8, 32, 32)).astype(np.float32)).realize()
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32)).realize()
    make = {"sum": lambda: x.sum(), "matmul": lambda: a @ b, "conv": lambda: img.conv2d(w, padding=1)}[case]
    out = make()
    items = _threaded_items(out)
    got = []
    for fixed in (1, 2, 3):
        set_fixed_team(fixed)
        for ei in items:
            ei.run()
        got.append(bytes(items[-1].bufs[0].host_view()))
    assert got[0] == got[1] == got[2]
    torch = pytest.importorskip("torch")
    want = {
        "sum": lambda: torch.from_numpy(x.numpy()).sum(),
        "matmul": lambda: torch.from_numpy(a.numpy()) @ torch.from_numpy(b.numpy()),
        "conv": lambda: torch.nn.functional.conv2d(
            torch.from_numpy(img.numpy()), torch.from_numpy(w.numpy()), padding=1
        ),
    }[case]()
    # the same result realized as usual, read through the tensor: it may be a view of the kernel's buffer (a blocked
    # conv's output channels); the kernel's bytes are that buffer's
    again = make().realize()
    assert bytes(again.uop.buffer.host_view()) == got[0]
    np.testing.assert_allclose(again.numpy(), want.numpy(), rtol=1e-4, atol=1e-3)


def _out(ei) -> np.ndarray:
    return np.frombuffer(ei.bufs[0].host_view(), np.float32)[: 600 * 1000].reshape(600, 1000)


@pytest.mark.parametrize("fixed", [1, 2])
def test_a_fixed_team_is_what_each_launch_gets(team, fixed):
    ei, want = _threaded_kernel()
    set_fixed_team(fixed)
    before = team_launches()
    for _ in range(3):
        ei.run()
    single, several = (n - m for n, m in zip(team_launches(), before))
    assert (single, several) == ((3, 0) if fixed == 1 else (0, 3))
    np.testing.assert_array_equal(_out(ei), want)


def test_adaptive_launches_are_counted_and_right(team):
    ei, want = _threaded_kernel()
    before = team_launches()
    for _ in range(4):
        ei.run()
    assert sum(team_launches()) - sum(before) == 4  # one thread or two, as the load says
    np.testing.assert_array_equal(_out(ei), want)


def test_small_kernels_have_no_parallel_loop(team):
    before = team_launches()
    np.testing.assert_allclose((Tensor([1.0, 2.0, 3.0]) * 2 + 1).numpy(), [3.0, 5.0, 7.0])
    assert team_launches() == before


def test_jit_replay_counts_its_threaded_kernels(team):
    from lazygrad import TinyJit

    w = Tensor(np.eye(256, dtype=np.float32)).realize()
    step = TinyJit(lambda x: (x @ w).relu().realize())
    xn = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    for _ in range(3):
        step(Tensor(xn))
    set_fixed_team(1)
    before = team_launches()
    np.testing.assert_allclose(step(Tensor(xn)).numpy(), np.maximum(xn, 0), rtol=1e-6)
    single, several = (n - m for n, m in zip(team_launches(), before))
    assert single >= 1 and several == 0


def test_threaded_kernel_links_only_libgomp(team, tmp_path):
    # lg_team comes from the process (the team library), not from a library the kernel is linked with
    compiler = Device["CPU"].compiler
    if not compiler.link:
        pytest.skip("this compiler links through its driver")
    ei, _ = _threaded_kernel()
    obj = tmp_path / "k.o"
    flags = [f for f in compiler.flags if f != "-shared"]
    subprocess.run([compiler.cc, *flags, "-c", "-x", "c", "-", "-o", str(obj)], input=ei.runner.spec.src, text=True,
                   check=True)  # fmt: skip
    libs = compiler.link[1:]
    gomp = [lib for lib in libs if "libgomp" in os.path.basename(lib)]
    assert _libraries_needed(obj.read_bytes(), libs) == gomp, _undefined_symbols(obj.read_bytes())


@pytest.mark.parametrize("user", [{}, {"GOMP_SPINCOUNT": "77"}, {"OMP_WAIT_POLICY": "passive"}])
def test_openmp_loads_with_its_idle_spin_capped_unless_the_user_set_it(user):
    # libgomp reads GOMP_SPINCOUNT once, when it loads: the CPU device loads it under the cap, then leaves the
    # environment as it found it
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc/self/maps to tell whether libgomp is loaded")
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")} | user
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    code = (
        "import os\nfrom lazygrad.device import Device\nfrom lazygrad.runtime import threads_cpu\n"
        "assert 'libgomp' not in open('/proc/self/maps').read()\n"
        "seen = []\nload = threads_cpu.ctypes.CDLL\n"
        "def spy(name, *a):\n"
        "    if 'libgomp' in str(name):\n"
        "        seen.append(os.environ.get('GOMP_SPINCOUNT'))\n"
        "    return load(name, *a)\n"
        "threads_cpu.ctypes.CDLL = spy\n"
        "dev = Device['CPU']\n"
        "print(dev.renderer.has_threads, seen, 'libgomp' in open('/proc/self/maps').read(), "
        "os.environ.get('GOMP_SPINCOUNT'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    if not out.stdout.startswith("True"):
        pytest.skip("no threaded kernels here: libgomp is not loaded")
    spin = user.get("GOMP_SPINCOUNT", None if user else str(GOMP_SPINCOUNT))
    assert out.stdout.split(maxsplit=1)[1].strip() == f"[{spin!r}] True {user.get('GOMP_SPINCOUNT')}"


_FORK_SCRIPT = """
import multiprocessing as mp
import sys
from lazygrad import Tensor
from lazygrad.runtime.threads_cpu import set_fixed_team, team_launches

set_fixed_team(2)  # the parent's loops on two threads, whatever the machine's load
a = Tensor.rand(512, 512).realize()
(a @ a).realize()
assert team_launches()[1] > 0


def child(q):
    b = Tensor.rand(512, 512).realize()
    r = float((b @ b).sum().item())  # the parent's kernels, on the pool the fork left
    r += float(((b * 3 + 1).exp().sum(0) / 7).max().item())  # new kernels, compiled in the child
    q.put((r, team_launches()))


ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
p.join(60)
if p.is_alive():
    p.kill()
    sys.exit("the forked child hung")
r, (one, several) = q.get(timeout=10)
assert p.exitcode == 0 and r == r, (p.exitcode, r)
print(one, several)
"""


def test_a_child_forked_after_a_threaded_kernel_runs_its_kernels(team):
    """A child forked after the parent ran a parallel loop on several threads inherits libgomp's pool without its
    threads: its first threaded kernel waited for them forever. It runs its kernels on one thread."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[0]) > 0  # the child's loops ran on one thread
