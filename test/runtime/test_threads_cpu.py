"""The CPU thread team (lazygrad/runtime/threads_cpu.py): the policy on made-up clocks, and what kernels launch."""

import ctypes
import os
import subprocess

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.device import Device
from lazygrad.engine.realize import lower_schedule_item
from lazygrad.runtime.ops_cpu import _libraries_needed, _undefined_symbols
from lazygrad.runtime.threads_cpu import TeamState, set_fixed_team, team_launches

MS = 1_000_000  # ns


@pytest.fixture
def team():
    dev = Device["CPU"]
    if not dev.renderer.has_threads:
        pytest.skip("no OpenMP in this C compiler, or one core")
    from lazygrad.runtime import threads_cpu

    yield threads_cpu._team
    set_fixed_team(0)


def _steps(lib, state: TeamState, windows: list[tuple[float, float]], threads: int = 2) -> list[int]:
    """The team after each window of (ms of wall time, ms of them the launching thread waited for a core)."""
    now, delay, out = state.wall, state.delay, []
    if not state.wall:  # a first check: every thread
        now, delay = 1000 * MS, 0
        lib.lg_team_step(ctypes.byref(state), now, delay, threads)
    for wall, waited in windows:
        now, delay = now + int(wall * MS), delay + int(waited * MS)
        out.append(lib.lg_team_step(ctypes.byref(state), now, delay, threads))
    return out


def test_idle_machine_keeps_every_thread(team):
    state = TeamState()
    assert _steps(team, state, [(10, 0), (10, 0.2), (10, 0.4)]) == [2, 2, 2]
    assert state.hold == 0 and state.next == state.wall + 10 * MS


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
    team.lg_team_step(ctypes.byref(state), 1000 * MS, -1, 2)
    assert team.lg_team_step(ctypes.byref(state), 1010 * MS, -1, 2) == 2


def test_run_delay_is_read_from_the_kernel(team):
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("no /proc/thread-self/schedstat")

    def python_delay() -> int:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])

    first = python_delay()
    got = team.lg_team_run_delay()
    assert first <= got <= python_delay()


def _threaded_kernel():
    x = Tensor(np.arange(600 * 1000, dtype=np.float32).reshape(600, 1000)).realize()
    (item,) = (x * 2 + 1).schedule()
    ei = lower_schedule_item(item)
    assert ei is not None and "LG_TEAM" in ei.runner.spec.src
    return ei, np.arange(600 * 1000, dtype=np.float32).reshape(600, 1000) * 2 + 1


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
