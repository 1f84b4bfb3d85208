"""lazygrad/helpers.py: the cycle collector's windows (cycles_held_off), and what they save an eager training step,
counted in collections rather than timed."""

import gc
import threading

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.helpers import cycles_held_off
from test.helpers import mlp_adam_step


@pytest.fixture
def collector_on():
    # a kernel build ahead left running by an earlier test (engine/realize.py compile_ahead, on its own thread) holds
    # the collector off in a window of its own, whose end would turn it on under these tests: wait for it first
    from lazygrad.engine import realize as engine

    for pool in engine._ahead_pool:
        pool.submit(lambda: None).result()  # one worker: the builds queued before have ended
    was_on = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was_on else gc.disable)()


@pytest.mark.parametrize("was_on", [True, False])
def test_window_restores_the_collector_as_it_found_it(collector_on, was_on):
    (gc.enable if was_on else gc.disable)()
    with cycles_held_off():
        assert not gc.isenabled()
        with cycles_held_off():  # nested: finds it off, leaves it off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() == was_on
    with pytest.raises(ZeroDivisionError):
        with cycles_held_off():
            1 / 0
    assert gc.isenabled() == was_on


def test_windows_of_two_threads_leave_the_collector_on(collector_on):
    """Windows overlapping in two threads: whichever found the collector on turns it on again, so it is never left
    off, whatever order they end in."""
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with cycles_held_off():
            inside.set()
            leave.wait()

    for other_ends_first in (True, False):
        inside.clear(), leave.clear()
        t = threading.Thread(target=other)
        with cycles_held_off():
            t.start()
            inside.wait()
            if other_ends_first:
                leave.set()
                t.join()
        leave.set()
        t.join()
        assert gc.isenabled()


@pytest.mark.parametrize("was_on", [True, False])
def test_realize_leaves_the_collector_as_it_found_it(collector_on, monkeypatch, was_on):
    from lazygrad import tensor as tensor_module
    from lazygrad.schedule import kernelize

    # no graph of this structure scheduled before: an earlier test's (a * 2) of 6 floats made its realize a cached
    # template's launch, which never reaches _run_noted
    monkeypatch.setattr(kernelize, "_templates", {})
    seen = []
    run_noted = tensor_module._run_noted
    monkeypatch.setattr(tensor_module, "_run_noted", lambda *a: seen.append(gc.isenabled()) or run_noted(*a))
    a = Tensor(np.arange(6, dtype=np.float32))
    (gc.enable if was_on else gc.disable)()
    np.testing.assert_array_equal((a * 2).realize().numpy(), np.arange(6) * 2)
    assert gc.isenabled() == was_on and seen == [False]

    def fails(*a) -> None:
        raise RuntimeError("a kernel failed")

    monkeypatch.setattr(tensor_module, "_run_noted", fails)
    with pytest.raises(RuntimeError, match="a kernel failed"):
        (a - 1).realize()
    assert gc.isenabled() == was_on


def test_eager_mlp_step_rarely_triggers_a_collection(collector_on):
    """An eager MLP Adam step builds ~280 nodes (each with its hash-cons entry and key tuple) and its realize frees the
    last step's: with the default thresholds the allocation counter passed the youngest generation's threshold inside
    nearly every realize (0.91 collections a step, each scanning every young object and promoting survivors toward a
    full collection). With the realize's window the counter is back down by its end: 0.06 a step in a process of its
    own; here, in the test runner's, 41 -> 9 in 40 steps."""
    step = mlp_adam_step()

    young = [0]

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 0:
            young[0] += 1

    thresholds = gc.get_threshold()
    with Tensor.train():
        for _ in range(3):
            step()
        gc.set_threshold(700, 10, 10)  # CPython's defaults (the test runner's may differ)
        gc.collect()
        gc.callbacks.append(count)
        try:
            first = step().item()
            for _ in range(40):
                last = step()
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*thresholds)
    assert gc.isenabled()
    assert young[0] <= 16, f"{young[0]} young collections in 40 steps"
    assert last.item() < first
