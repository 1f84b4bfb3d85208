"""compile_schedule: a schedule's kernels are built once each and compiled COMPILE_BATCH to a compiler call, the
batches side by side on worker threads, with the same programs, results and errors as one call for all."""

import dataclasses
import math
from typing import Callable

import numpy as np
import pytest

from lazygrad import Context, Device, Tensor
from lazygrad.device import CompileError
from lazygrad.engine import realize
from lazygrad.engine.realize import run_schedule
from lazygrad.renderer import ProgramSpec
from lazygrad.uop.ops import Ops, UOp

COMPILER = type(Device["CPU"].compiler)
pytestmark = [
    pytest.mark.skipif(not hasattr(COMPILER, "compile_many"), reason="the CPU compiler builds one by one"),
    pytest.mark.usefixtures("default_device_cpu"),
]


def fresh_schedule(n: int) -> tuple[list, list[Tensor], list[np.ndarray]]:
    """n reduce kernels of distinct shapes, with a constant no kernel compiled so far holds (so none is cached)."""
    c = 1 + float(np.random.default_rng().integers(1, 1 << 20)) / (1 << 20)
    arrays = [np.random.default_rng(i).random(8 + i, dtype=np.float32) for i in range(n)]
    inputs = [Tensor(a).realize() for a in arrays]
    outs = [(x * c).exp().sum() for x in inputs]
    return Tensor.schedule(*outs), outs, [np.exp(a * np.float32(c)).sum() for a in arrays]


def count_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = COMPILER.compile_many
    monkeypatch.setattr(COMPILER, "compile_many", lambda self, srcs: calls.append(srcs) or real(self, srcs))
    return calls


@pytest.mark.parametrize("batch", [1, 3, 4, 100])
def test_n_kernels_take_ceil_n_over_batch_compiler_calls(monkeypatch: pytest.MonkeyPatch, batch: int) -> None:
    schedule, outs, refs = fresh_schedule(10)
    calls = count_calls(monkeypatch)
    with Context(COMPILE_BATCH=batch, CACHELEVEL=0):
        run_schedule(schedule)
    n = len(schedule)
    assert n == 10
    assert len(calls) == math.ceil(n / batch)
    assert sorted(len(srcs) for srcs in calls)[-1] == min(batch, n)
    assert sum(len(srcs) for srcs in calls) == n  # every kernel compiled once
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def _gated_compiler(monkeypatch: pytest.MonkeyPatch, release_after: int) -> tuple[list[int], list[int]]:
    """The first compiler call blocks until `release_after` kernels have been generated, and each kernel generated
    after that waits until that call has returned: what code generation meets is fixed, not left to the machine's
    timing. Returns (kernels per compiler call, compiler calls running as each kernel was generated)."""
    import threading
    import time

    sizes: list[int] = []
    running: list[int] = []
    busy = [0]
    generated, first_done = threading.Event(), threading.Event()
    real_compile, real_program = COMPILER.compile_many, realize.get_program
    built = [0]

    def compile_many(self, srcs):  # noqa: ANN001, ANN202
        first = not sizes
        sizes.append(len(srcs))
        busy[0] += 1
        try:
            if first:
                generated.wait(30)
            return real_compile(self, srcs)
        finally:
            busy[0] -= 1
            if first:
                first_done.set()

    def get_program(ast, renderer):  # noqa: ANN001, ANN202
        if built[0] >= release_after:
            first_done.wait(30)
            time.sleep(0.05)  # (its future is done just after the call returns)
        running.append(busy[0])
        built[0] += 1
        if built[0] == release_after:
            generated.set()
        return real_program(ast, renderer)

    monkeypatch.setattr(COMPILER, "compile_many", compile_many)
    monkeypatch.setattr(realize, "get_program", get_program)
    return sizes, running


def test_default_batches_start_small_and_the_last_is_split_among_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    # two batches per core, 4 kernels at least; the first is a quarter of that (2 at least), so a core starts
    # compiling early, and the batch left when code generation ends compiles in one part per core at most, split by
    # the bytes each core is estimated to have left (_Batches._parts): 10 kernels on 2 cores, the first call busy
    # until the end, are 2, then the 8 generated meanwhile in one or two calls
    monkeypatch.setattr(realize, "cpu_cores", lambda: 2)
    schedule, outs, refs = fresh_schedule(10)
    sizes, _ = _gated_compiler(monkeypatch, release_after=10)
    with Context(COMPILE_BATCH=0, CACHELEVEL=0):
        run_schedule(schedule)
    assert sizes[0] == 2 and len(sizes) <= 3 and sum(sizes) == 10
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def test_while_code_is_generated_one_compiler_runs_and_takes_the_kernels_generated_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the thread generating code holds one of the 2 cores, so one compiler runs beside it (never two), and the
    # kernels generated while it ran go to one call when it is done (a wave), not 4 a call with processes of their
    # own: 12 kernels (batches of 4, the first of 2), the first call done after the 8th is generated, are 2, then
    # at least half of the 7 generated by the time the 9th is (a wave ends with the other core: _Batches._wave)
    monkeypatch.setattr(realize, "cpu_cores", lambda: 2)
    schedule, outs, refs = fresh_schedule(12)
    sizes, running = _gated_compiler(monkeypatch, release_after=8)
    with Context(COMPILE_BATCH=0, CACHELEVEL=0):
        run_schedule(schedule)
    assert max(running) == 1
    assert sizes[0] == 2 and sizes[1] >= 4 and sum(sizes) == 12
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def _planned(
    sizes: list[int], workers: int = 2, running: tuple = (), left: int = 0
) -> tuple[realize._Batches, list[tuple]]:
    """A _Batches of programs with `sizes` bytes of C, made by now (time 100) at a rate the compiler builds them,
    `left` more to make; no call done so far (the default seconds a byte), and `running` holds (bytes, started
    seconds ago) of calls not done."""
    batches = realize._Batches(workers, 4, auto=len(sizes) + left)
    batches.pool.shutdown()
    batch = [(i,) for i in range(len(sizes))]
    for shared, n in zip(batch, sizes):
        batches.programs[shared] = ProgramSpec(f"k{shared[0]}", f"k{shared[0]}", "x" * n, 1, (0,))
    batches.bytes_done = sum(sizes)
    batches.st = 100.0 - sum(sizes) * realize.CC_SECONDS_PER_BYTE
    for n, ago in running:
        batches.spans.append([realize.SETUP_BYTES + n, 100.0 - ago, 0.0])
    return batches, batch


def test_a_wave_as_code_generation_ends_takes_what_ends_with_the_other_core() -> None:
    # SmolLM2's prompt: 12 kernels (54 KB of C) generated while the first call ran; codegen then ended and the other
    # core got the last 3, sat idle 100 ms while one call built the 12. Now the free worker takes half of the work
    setup = realize.SETUP_BYTES
    batches, batch = _planned([4500] * 12)
    take = batches._wave(batch, 100.0)
    assert take == 6 and setup + 4500 * take == (12 * 4500 + 2 * setup) / 2
    batches, batch = _planned([4500] * 12, left=100)  # most code still to come: the wave takes every kernel
    assert batches._wave(batch, 100.0) == 12


def test_kernels_left_at_the_end_split_to_end_together() -> None:
    # both workers free: two calls of equal bytes; the biggest kernel first, each part in the order made
    batches, batch = _planned([3000, 9000, 3000, 3000])
    assert batches._parts(batch, 100.0) == [[(1,)], [(0,), (2,), (3,)]]
    # one worker busy for long (80 KB of C just started): the rest in one call on the free one, not half of it queued
    # behind the busy worker while the free one ends early
    batches, batch = _planned([3000] * 6, running=((80000, 0.01),))
    assert batches._parts(batch, 100.0) == [batch]
    # tiny kernels: one call, a second start would cost more CPU than its core saves
    batches, batch = _planned([200] * 4)
    assert batches._parts(batch, 100.0) == [batch]


@pytest.mark.parametrize(
    "starts, work, end", [([0, 0], 10, 5), ([0, 4], 10, 7), ([0, 20], 10, 10), ([3, 0, 0], 9, 4), ([5], 1, 6)]
)
def test_level_is_when_workers_end_work_together(starts: list[float], work: float, end: float) -> None:
    assert realize._level(starts, work) == end
    assert sum(max(0, end - s) for s in starts) == work


def test_kernels_with_a_reduce_are_built_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # their code keeps the compiler busiest: compiled beside the code generation of the rest, not left for the end
    c = 1 + float(np.random.default_rng().integers(1, 1 << 20)) / (1 << 20)
    xs = [Tensor(np.random.default_rng(i).random(9 + i, dtype=np.float32)).realize() for i in range(4)]
    outs = [(x * c).exp() if i % 2 else (x * c).sum() for i, x in enumerate(xs)]
    schedule = Tensor.schedule(*outs)
    built: list[bool] = []
    real = realize.get_program
    monkeypatch.setattr(
        realize,
        "get_program",
        lambda ast, r: built.append(any(u.op is Ops.REDUCE_AXIS for u in ast.toposort)) or real(ast, r),
    )
    with Context(CACHELEVEL=0):
        run_schedule(schedule)
    assert built == [True, True, False, False]
    for i, (x, out) in enumerate(zip(xs, outs)):
        ref = np.exp(x.numpy() * np.float32(c))
        np.testing.assert_allclose(out.numpy(), ref if i % 2 else (x.numpy() * np.float32(c)).sum(), rtol=1e-5)


def test_batches_build_the_programs_and_results_of_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule, outs, _ = fresh_schedule(7)
    calls = count_calls(monkeypatch)
    sources, results = [], []
    for batch in (100, 2):
        for si in schedule:
            realize._runners.pop(realize._runner_key(si.outputs[0].device, si.ast), None)
        calls.clear()
        with Context(COMPILE_BATCH=batch, CACHELEVEL=0):
            run_schedule(schedule)
        sources.append(sorted(src for srcs in calls for src in srcs))
        results.append([o.numpy() for o in outs])
    assert len(calls) == 4 and sources[0] == sources[1]
    np.testing.assert_equal(results[0], results[1])


def test_each_kernel_is_built_once_without_a_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    real = realize.get_program
    monkeypatch.setattr(realize, "get_program", lambda ast, renderer: built.append(ast) or real(ast, renderer))
    for n in (1, 5):  # one kernel alone was built twice: once to compile the schedule, once more to run it
        schedule, outs, refs = fresh_schedule(n)
        built.clear()
        with Context(CACHELEVEL=0):
            run_schedule(schedule)
        assert len(built) == len(set(built)) == n
        np.testing.assert_allclose(outs[-1].numpy(), refs[-1], rtol=1e-5)


def _break_kernel(monkeypatch: pytest.MonkeyPatch, broken: UOp) -> Callable:
    """The kernel of `broken` gets C source its compiler refuses (an #error naming "broken"); returns the real
    get_program, to put back."""
    real = realize.get_program

    def get_program(ast, renderer):  # noqa: ANN001, ANN202
        spec = real(ast, renderer)
        return spec if ast is not broken else dataclasses.replace(spec, src=spec.src + "#error broken kernel\n")

    monkeypatch.setattr(realize, "get_program", get_program)
    return real


def test_a_compile_error_in_one_batch_is_the_compilers_error(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule, outs, refs = fresh_schedule(6)
    real = _break_kernel(monkeypatch, schedule[4].ast)
    with Context(COMPILE_BATCH=2, CACHELEVEL=0), pytest.raises(CompileError, match="(?s)failed to compile.*broken"):
        run_schedule(schedule)
    monkeypatch.setattr(realize, "get_program", real)
    with Context(COMPILE_BATCH=2, CACHELEVEL=0):
        run_schedule(schedule)  # nothing of the failed batch was kept: compiled again, now correct
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def test_under_beam_no_compiler_runs_while_kernels_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """BEAM times candidate kernels inside get_program: a batch compiling beside them would skew the timings."""
    schedule, _, _ = fresh_schedule(6)
    events: list[str] = []
    real_program, real_compile = realize.get_program, realize._compile

    def get_program(ast, renderer):  # noqa: ANN001, ANN202
        events.append("build")
        with Context(BEAM=0):  # the order of events is what is tested, not the search itself
            return real_program(ast, renderer)

    monkeypatch.setattr(realize, "get_program", get_program)
    monkeypatch.setattr(realize, "_compile", lambda *args: events.append("compile") or real_compile(*args))
    with Context(BEAM=1):
        beam_keys = [realize._runner_key(si.outputs[0].device, si.ast) for si in schedule]
    with Context(COMPILE_BATCH=2, CACHELEVEL=0, BEAM=1):
        realize.compile_schedule(schedule)
    assert events == ["build"] * 6 + ["compile"] * 3
    assert all(key in realize._runners for key in beam_keys)


@pytest.mark.parametrize("was_enabled", [True, False])
@pytest.mark.parametrize("fails", [False, True])
def test_cycle_collector_is_held_off_while_building_and_restored(
    monkeypatch: pytest.MonkeyPatch, was_enabled: bool, fails: bool
) -> None:
    """Kernels are generated with Python's cycle collector off; afterwards it is as the program left it, also when a
    kernel fails to compile."""
    import gc

    schedule, outs, refs = fresh_schedule(3)
    seen: list[bool] = []
    real_program = realize.get_program
    monkeypatch.setattr(realize, "get_program", lambda *a: seen.append(gc.isenabled()) or real_program(*a))
    if fails:
        monkeypatch.setattr(COMPILER, "compile_many", lambda self, srcs: (_ for _ in ()).throw(CompileError("no")))
    (gc.enable if was_enabled else gc.disable)()
    try:
        with Context(CACHELEVEL=0):
            if fails:
                with pytest.raises(CompileError):
                    realize.compile_schedule(schedule)
            else:
                run_schedule(schedule)
        assert gc.isenabled() == was_enabled
    finally:
        gc.enable()
    assert seen == [False] * 3
    if not fails:
        np.testing.assert_allclose([o.item() for o in outs], refs, rtol=1e-5)


def test_compile_ahead_builds_kernels_a_later_run_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """compile_ahead builds a schedule's kernels on a background thread and returns at once; the schedule run while
    that build is still compiling waits for it, and no kernel is compiled twice."""
    import threading

    schedule, outs, refs = fresh_schedule(5)
    calls: list[list[str]] = []
    threads: list[threading.Thread] = []
    ended: list[bool] = []
    release = threading.Event()  # the compiler calls wait for it: still compiling when the run below starts
    real = COMPILER.compile_many

    def held(self, srcs):  # noqa: ANN001, ANN202
        threads.append(threading.current_thread())
        release.wait(timeout=60)
        out = real(self, srcs)
        ended.append(True)
        return out

    monkeypatch.setattr(COMPILER, "compile_many", lambda self, srcs: calls.append(srcs) or held(self, srcs))
    with Context(CACHELEVEL=0):
        realize.compile_ahead(schedule)
        assert not ended  # returned before any compiler call ended
        threading.Timer(0.05, release.set).start()  # (an order, not a time measured: the run waits either way)
        run_schedule(schedule)
    assert sum(len(srcs) for srcs in calls) == 5
    assert threading.main_thread() not in threads
    assert not realize._ahead
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def test_compile_ahead_error_is_raised_by_the_run_that_needs_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule, outs, refs = fresh_schedule(3)
    real = _break_kernel(monkeypatch, schedule[1].ast)
    with Context(CACHELEVEL=0):
        realize.compile_ahead(schedule)
        with pytest.raises(CompileError, match="(?s)failed to compile.*broken"):
            run_schedule(schedule)
    monkeypatch.setattr(realize, "get_program", real)
    with Context(CACHELEVEL=0):
        run_schedule(schedule)  # the failed build left nothing behind: compiled again, now correct
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def test_run_together_builds_every_schedule_before_running_them_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second schedule made before the first ran, reading what the first writes: their kernels compile in one set
    of batches (no compiler call while a kernel runs), then each schedule runs in order."""
    c = 1 + float(np.random.default_rng().integers(1, 1 << 20)) / (1 << 20)
    a = np.random.default_rng(0).random((6, 10), dtype=np.float32)
    x = Tensor(a).realize()
    y = (x * c).exp()
    first = y.schedule_with_vars()
    z = (y + 1).sum(1)
    second = z.schedule_with_vars()
    events: list[str] = []
    real_compile, real_run = realize._compile, realize.ExecItem.run
    monkeypatch.setattr(realize, "_compile", lambda *args: events.append("compile") or real_compile(*args))
    monkeypatch.setattr(realize.ExecItem, "run", lambda self, *a, **k: events.append("run") or real_run(self, *a, **k))
    with Context(CACHELEVEL=0):
        realize.run_together(first, second)
    assert events.index("run") > max(i for i, e in enumerate(events) if e == "compile")
    ya = np.exp(a * np.float32(c))
    np.testing.assert_allclose(y.numpy(), ya, rtol=1e-5)
    np.testing.assert_allclose(z.numpy(), (ya + 1).sum(1), rtol=1e-5)


def test_a_forked_child_builds_what_its_parent_was_building_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing
    import time

    schedule, outs, refs = fresh_schedule(2)
    real = COMPILER.compile_many
    monkeypatch.setattr(COMPILER, "compile_many", lambda self, srcs: time.sleep(0.5) or real(self, srcs))
    with Context(CACHELEVEL=0):
        realize.compile_ahead(schedule)
        ctx = multiprocessing.get_context("fork")
        _FORKED[:] = [schedule, outs]  # (tensors do not pickle: the child reads its copy of this list)
        with ctx.Pool(1) as pool:  # the child's realize must not wait for a build only its parent runs
            got = pool.apply_async(_realize_forked_outs).get(timeout=60)
        _FORKED.clear()
        run_schedule(schedule)
    np.testing.assert_allclose(got, refs, rtol=1e-5)
    np.testing.assert_allclose([o.item() for o in outs], refs, rtol=1e-5)


_FORKED: list = []  # [schedule, its tensors]


def _realize_forked_outs() -> list[float]:
    schedule, outs = _FORKED
    run_schedule(schedule)
    return [o.item() for o in outs]
