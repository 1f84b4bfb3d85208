"""A schedule spanning several devices runs one thread per device (lazygrad/engine/streams.py): same results as the
sequential path (DEVICE_THREADS=0), items of two devices on two threads, errors surface, one device stays on the
caller's thread."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from lazygrad import Context, Device, GlobalCounters, Tensor
from lazygrad.device import Buffer
from lazygrad.dtype import dtypes
from lazygrad.engine import realize
from lazygrad.engine.streams import StreamItem, dependencies, memory_of
from test.helpers import device_available
from test.test_multidevice import D2, D4, _rand, _train_mlp

pytestmark = pytest.mark.usefixtures("default_device_cpu")  # (the devices named are CPU, CL and PYTHON)


def _threads_per_device(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    """device -> the threads its items ran on, from now on."""
    seen: dict[str, set[int]] = {}
    # the launches themselves: a schedule of a template seen before runs its runners without ExecItems
    for cls in (realize.CompiledRunner, realize.BufferCopy):

        def launch(self: Any, *args: Any, real: Callable = cls.__call__, **kwargs: Any) -> Any:
            seen.setdefault(self.device, set()).add(threading.get_ident())
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__call__", launch)
    # and the compiled functions a launch plan calls straight: plans made from now on hold them wrapped
    direct = realize._direct

    def watched(runner: Any) -> Callable | None:
        if (fn := direct(runner)) is None:
            return None

        def call(*ptrs: int) -> None:
            seen.setdefault(runner.device, set()).add(threading.get_ident())
            fn(*ptrs)

        return call

    monkeypatch.setattr(realize, "_direct", watched)
    monkeypatch.setattr(realize, "_plans", {})
    return seen


def _both_ways(fn: Callable[[], list[np.ndarray]]) -> None:
    """fn's arrays and kernel count on streams equal the sequential path's, bit for bit (the same kernels run)."""
    out = {}
    for threads in (0, 1):
        with Context(DEVICE_THREADS=threads):
            before = GlobalCounters.kernel_count
            out[threads] = (fn(), GlobalCounters.kernel_count - before)
    (seq, n_seq), (par, n_par) = out[0], out[1]
    assert n_seq == n_par
    for a, b in zip(seq, par, strict=True):
        np.testing.assert_array_equal(a, b)


def test_sharded_matmul_equals_sequential() -> None:
    a, b = _rand(64, 48), _rand(48, 32, seed=1)

    def fn() -> list[np.ndarray]:
        x, w = Tensor(a).shard(D2, axis=0), Tensor(b).shard(D2)
        y = Tensor(a).shard(D2, axis=1) @ Tensor(b).shard(D2, axis=0)  # split over k: an all-reduce
        return [(x @ w).numpy(), y.numpy()]

    _both_ways(fn)
    np.testing.assert_allclose(fn()[1], a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ring", [0, 1])
def test_all_reduce_equals_sequential(ring: int) -> None:
    a = _rand(4, 1000)

    def fn() -> list[np.ndarray]:
        x = Tensor(a).shard(D4, axis=0).realize()
        with Context(ALLREDUCE_RING_BYTES=256 if ring else 1 << 30):
            out = x.sum(0).realize()
        return [np.frombuffer(p.base.arg.as_bytes(), np.float32) for p in out.uop.src]  # every replica

    _both_ways(fn)
    np.testing.assert_allclose(fn()[0], a.sum(0), rtol=1e-5, atol=1e-5)


def test_data_parallel_training_equals_sequential() -> None:
    _both_ways(lambda: _train_mlp(D2, jit=False))
    _both_ways(lambda: _train_mlp(D4, jit=True, steps=4, rows=16))  # a capture runs in order, then replays


@pytest.mark.skipif(not device_available("CL"), reason="no OpenCL device")
def test_mixed_cpu_cl_python_equals_sequential(monkeypatch: pytest.MonkeyPatch) -> None:
    devs = ("CPU", "CL", "PYTHON")
    a, b = _rand(6, 4), _rand(4, 3, seed=1)
    _both_ways(lambda: [(Tensor(a).shard(devs, axis=0) @ Tensor(b).shard(devs)).relu().sum(0).numpy()])
    seen = _threads_per_device(monkeypatch)
    out = (Tensor(a).shard(devs, axis=0) @ Tensor(b).shard(devs)).relu().sum(0).numpy()
    np.testing.assert_allclose(out, np.maximum(a @ b, 0).sum(0), rtol=1e-5, atol=1e-5)
    assert len({t for ts in seen.values() for t in ts}) == 3


def test_two_devices_run_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    a = _rand(32, 16)
    x = Tensor(a).shard(D2, axis=0).realize()
    seen = _threads_per_device(monkeypatch)
    out = (x.exp() * 2).sum(1).realize()  # one schedule
    assert set(seen) == set(D2)
    assert all(len(ts) == 1 for ts in seen.values())  # a device's items run in order on its one thread
    assert seen["CPU"] != seen["CPU:1"]
    assert threading.get_ident() in seen["CPU"] | seen["CPU:1"]  # the caller serves one device itself
    np.testing.assert_allclose(out.numpy(), (np.exp(a) * 2).sum(1), rtol=1e-5)
    started = threading.active_count()
    (x.exp() * 4).sum(1).realize()
    assert threading.active_count() == started  # the device threads are kept for the next schedule
    seen.clear()
    with Context(DEVICE_THREADS=0):
        (x.exp() * 3).sum(1).realize()
    assert {t for ts in seen.values() for t in ts} == {threading.get_ident()}


def test_single_device_schedule_creates_no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    x = Tensor(_rand(8, 8)).realize()
    (x.exp() + 1).sum().realize()  # compiled: compile_schedule's pool would start threads of its own

    def no_streams(items: Any) -> None:
        raise AssertionError("a one-device schedule went to the streams")

    monkeypatch.setattr(realize, "run_streams", no_streams)
    seen = _threads_per_device(monkeypatch)
    started = threading.active_count()
    assert (x.exp() + 1).sum().item() == pytest.approx(float((np.exp(x.numpy()) + 1).sum()), rel=1e-5)
    assert {t for ts in seen.values() for t in ts} == {threading.get_ident()}
    assert threading.active_count() == started


class KernelFailed(Exception):
    pass


def test_error_on_one_device_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    a = _rand(16, 8)
    x = Tensor(a).shard(D2, axis=0).realize()
    (x * 5).sum(1).realize()  # compiled
    error = KernelFailed("CPU:1 failed")
    real = realize.CompiledRunner.__call__

    def call(self: realize.CompiledRunner, *args: Any, **kwargs: Any) -> Any:
        if self.device == "CPU:1":
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(realize.CompiledRunner, "__call__", call)
    started = threading.active_count()
    with pytest.raises(KernelFailed) as info:
        (x * 5).sum(1).realize()
    assert info.value is error  # the original exception, not a wrapper
    assert threading.active_count() == started  # every stream has stopped
    monkeypatch.undo()  # the devices work on after it
    np.testing.assert_allclose((x * 7).sum(1).numpy(), (a * 7).sum(1), rtol=1e-5)


def test_counters_add_up_across_threads() -> None:
    x = Tensor(_rand(64, 64)).shard(D4, axis=0).realize()
    counts = {}
    for threads in (0, 1):
        with Context(DEVICE_THREADS=threads):
            GlobalCounters.reset()
            for _ in range(5):
                (x * 2 + 1).exp().sum(1).realize()
            counts[threads] = (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem)
    assert counts[0] == counts[1] and counts[0][0] > 0


# *** the dependency rules ***


def _buf(device: str = "CPU") -> Buffer:
    return Buffer(device, 4, dtypes.float32)


def test_memory_of_aliases_and_views() -> None:
    b = _buf()
    alias = b.alias()
    view = Buffer("CPU", 2, dtypes.float32, external=alias, external_ptr=alias.ptr + 8)
    assert memory_of(alias) is b and memory_of(view) is b and memory_of(b) is b
    assert memory_of(_buf()) is not b


def test_dependencies_follow_buffers_across_streams() -> None:
    a, b, c = _buf(), _buf("CPU:1"), _buf("CPU:1")
    items = [
        StreamItem("CPU", lambda: None, [], [a]),  # 0: writes a
        StreamItem("CPU:1", lambda: None, [a], [b]),  # 1: a copy reads a: waits for 0
        StreamItem("CPU:1", lambda: None, [b], [c]),  # 2: same stream: waits for nothing
        StreamItem("CPU", lambda: None, [], [a.alias()]),  # 3: overwrites a (through an alias): waits for reader 1
        StreamItem("CPU:1", lambda: None, [], [c]),  # 4: rewrites c, read by no one since 2 on its own stream
    ]
    assert dependencies(items) == [{}, {"CPU": 0}, {}, {"CPU:1": 1}, {}]


def test_devices_from_one_thread_only_stay_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(Device["CPU:1"]), "any_thread", False)
    x = Tensor(_rand(8, 4)).shard(D2, axis=0).realize()
    seen = _threads_per_device(monkeypatch)
    x.exp().sum().realize()
    assert {t for ts in seen.values() for t in ts} == {threading.get_ident()}


def test_debug_lines_and_profile_spans_from_every_stream(capsys: pytest.CaptureFixture[str]) -> None:
    from lazygrad.viz import profile

    x = Tensor(_rand(16, 16)).shard(D2, axis=0).realize()
    (x * 3).exp().sum().realize()  # compiled
    capsys.readouterr()
    profile.clear()
    with Context(DEBUG=2, PROFILE=1):
        before = GlobalCounters.kernel_count
        (x * 3).exp().sum().realize()
        ran = GlobalCounters.kernel_count - before
    lines = [line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith(("***", "\x1b"))]
    spans = [e for e in profile.events() if e.get("ph") == "X" and e["cat"] in ("kernel", "copy")]
    profile.clear()
    assert len(lines) == len(spans) == ran > 0
    numbers = sorted(int(line.split()[2]) for line in lines)  # "*** CPU:1   12 E_4 ...": one number per launch
    assert numbers == list(range(numbers[0], numbers[0] + ran))
    assert {e["args"]["device"] for e in spans} == set(D2)


def test_forked_child_starts_its_own_device_threads() -> None:
    import os

    x = Tensor(_rand(8, 4)).shard(D2, axis=0).realize()
    (x + 1).sum(1).realize()  # the parent's device threads exist now
    pid = os.fork()
    if pid == 0:  # the child: its schedules must not wait on threads it does not have
        ok = False
        try:  # (an exception must not return into the test runner: the child would run on as a second worker)
            ok = np.allclose((x * 3).sum(1).numpy(), x.numpy().sum(1) * 3, rtol=1e-5)
        finally:
            os._exit(0 if ok else 1)
    for _ in range(600):  # 60 s: a child waiting on its parent's threads never ends
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung on its parent's device threads")
    assert os.WEXITSTATUS(status) == 0
