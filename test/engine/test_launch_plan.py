"""engine/realize.py's launch plans: an instance of a cached schedule template runs from its plan, which asks whether
the kernels of what it reads ran, allocates its outputs and launches, with the general path's results and errors."""

import gc

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.engine import realize
from lazygrad.engine.realize import run_schedule
from lazygrad.helpers import FRAME_REFS_CHECKED, GlobalCounters
from test.helpers import mlp_adam_step


def _sum_plus(a: Tensor, b: Tensor) -> Tensor:
    return a.sum() + b  # two kernels: the sum of a, then the add reading it and b


@pytest.mark.usefixtures("default_device_cpu")  # (launches counted as the CPU's bare calls or graph calls)
@pytest.mark.parametrize("graph", [False, True])
def test_plan_refuses_an_input_whose_kernel_never_ran_before_launching_anything(monkeypatch, graph):
    # (launches counted kernel by kernel, or as the graph's calls)
    warm_runs = 1 + realize.GRAPH_AFTER
    if not graph:
        monkeypatch.setattr(realize, "GRAPH_AFTER", 10**9)
    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    # the structure's template over stored buffers, then its plan's runs up to the one that makes its graph: the
    # counted graph wraps a graph made before the counted run (with 3 runs here, the test passed only where an earlier
    # test in the process had met the structure)
    for _ in range(warm_runs):
        _sum_plus(x, (x * 2).realize()).realize()
    launched: list[int] = []
    real_run = realize._LaunchPlan.run

    def run(plan, *args) -> None:
        bare, made = plan.bare, plan.graph
        plan.bare = [f if f is None else lambda *p, f=f: launched.append(1) or f(*p) for f in bare]
        if made is not None:
            plan.graph = _CountedGraph(made, plan.kernels, launched)
        try:
            real_run(plan, *args)
        finally:
            plan.bare, plan.graph = bare, made

    monkeypatch.setattr(realize._LaunchPlan, "run", run)
    b = x * 2
    b_schedule = b.schedule()  # b's kernel not run: its buffer is pending
    c = _sum_plus(x, b)
    c_schedule = c.schedule()
    with pytest.raises(RuntimeError, match="never ran"):
        run_schedule(c_schedule)
    assert launched == []  # the sum, which reads no pending buffer, did not run before the add refused
    run_schedule(b_schedule)
    run_schedule(c_schedule)
    assert len(launched) == 3  # the plan ran b's kernel and c's two
    ref = np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(c.numpy(), ref.sum() + ref * 2)


class _CountedGraph:
    """A plan's graph whose call notes the kernels it launches."""

    def __init__(self, graph, kernels: int, launched: list[int]):
        self.bufs, self.graph, self.kernels, self.launched = graph.bufs, graph, kernels, launched

    def call(self) -> None:
        self.launched.extend([1] * self.kernels)
        self.graph.call()


def test_plan_allocates_each_new_output_once_and_frees_it_with_the_result():
    x = Tensor(np.arange(6, dtype=np.float32)).realize()
    for _ in range(3):
        _sum_plus(x, x + 1).realize()
    gc.collect()  # (earlier tests' garbage freed now, not inside the count)
    used = GlobalCounters.mem_used
    outs = [_sum_plus(x, x + float(k)).realize() for k in range(4)]
    for k, o in enumerate(outs):
        ref = np.arange(6, dtype=np.float32)
        np.testing.assert_allclose(o.numpy(), ref.sum() + ref + k)
    assert len({o.uop.base.arg.ptr for o in outs}) == 4  # each result its own memory
    del outs, o
    assert GlobalCounters.mem_used == used


def test_replayed_mlp_step_makes_a_buffer_per_stored_value(monkeypatch):
    """A replayed eager MLP Adam step's instance of its template makes one Buffer per new stored value and one alias
    per in-place write (parameters, Adam's moments and step count): 36, no more; none where the template recycles
    both (kernelize._Template.buffers: all small), but for its loss (asked for: the caller's)."""
    from lazygrad.device import Buffer

    step = mlp_adam_step()

    with Tensor.train():
        for _ in range(5):  # (the first steps record the programs and layouts the later ones replay)
            step()
        made = [0]
        init = Buffer.__init__
        monkeypatch.setattr(
            Buffer, "__init__", lambda self, *a, **k: made.__setitem__(0, made[0] + 1) or init(self, *a, **k)
        )
        step()
        monkeypatch.undo()
    assert made[0] <= (1 if FRAME_REFS_CHECKED else 36), made[0]


def _held_elsewhere(b, mine: list) -> bool:
    """Whether anything but the lists and tuples in `mine` (and frames) refers to b."""
    return any(
        not any(r is m for m in mine) and type(r).__name__ != "frame" for r in gc.get_referrers(b)
    )  # fmt: skip


@pytest.mark.parametrize("spares", [True, False])
def test_plan_finds_the_buffers_only_its_schedule_holds(monkeypatch, spares):
    """A replayed MLP Adam step's plan counts which buffers only the schedule holds on its flat buffer list
    (memory.held_at): the same buffers a look at every referrer finds, where the flat list holds an in-place write's
    target twice (at its slot and at the write's stored position). None where the template keeps its values and
    aliases to recycle them two steps on (all are small); with nothing kept (SPARE_BYTES 0), the forward's and
    backward's values no tensor keeps and the old aliases."""
    from lazygrad.schedule import kernelize

    if not spares:
        monkeypatch.setattr(kernelize, "SPARE_BYTES", 0)
    step = mlp_adam_step()
    found: list[tuple[set[int], set[int]]] = []
    real = realize._LaunchPlan._buffers

    def buffers(plan, schedule):
        if schedule.kernels > 1:
            assert schedule.unfilled  # (a realize's: no items made, the flat list alone holds the buffers)
            flat = schedule.bufs
            counted = set(realize.held_at(flat, plan.expected_unfilled))
            mine = [flat]
            named = {k for refs in plan.refs for k in refs}  # (an in-place write's stored position: named at its slot)
            referred = set()
            for k in sorted(named):  # (no enumerate: its tuple would refer to the buffer too)
                if not _held_elsewhere(flat[k], mine):
                    referred.add(k)
            del mine
            found.append((counted, referred))
        return real(plan, schedule)

    for _ in range(3):
        step()
    monkeypatch.setattr(realize._LaunchPlan, "_buffers", buffers)
    for _ in range(2):
        step()
    assert len(found) == 2
    for counted, referred in found:
        assert counted == referred, (counted, referred)
        assert not counted if spares and FRAME_REFS_CHECKED else counted


def test_a_template_instance_marks_what_its_items_write_pending():
    """Scheduled, not run: an instance of a template marks its new outputs pending off the template's written places
    (the flat list), as the general path marks each item's outputs; what it reads stays as it was."""
    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    for _ in range(3):
        _sum_plus(x, x * 3).realize()
    c = _sum_plus(x, x * 3)
    schedule = c.schedule()
    assert schedule.bufs is not None and len(schedule) >= 2
    outs = {id(b) for si in schedule for b in si.outputs}
    for si in schedule:
        assert all(b.pending_write for b in si.outputs)
        assert not any(b.pending_write for b in si.inputs if id(b) not in outs)
    run_schedule(schedule)
    assert not any(b.pending_write for si in schedule for b in si.bufs)
    ref = np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(c.numpy(), ref.sum() + ref * 3)


def test_repeated_plan_launches_its_kernels_as_one_graph_call(monkeypatch):
    """A plan run again and again launches its CPU kernels through one graph call (made on its GRAPH_AFTER-th run),
    not a ctypes call per kernel, with the values and counters of the per-kernel launches."""
    rng = np.random.default_rng(0)
    an = rng.standard_normal((4, 16)).astype(np.float32)
    a = Tensor(an, device="CPU").realize()

    def two_kernels() -> Tensor:
        return (a.exp().sum(1, keepdim=True) * a).realize()

    for _ in range(realize.GRAPH_AFTER + 1):  # (the first realize makes the template, the second its plan)
        two_kernels()
    plans = [p for p in realize._plans.values() if p is not None and p.graph is not None and p.kernels == 2]
    assert plans
    launched: list[int] = []
    for plan in plans:
        plan.bare = [None if f is None else lambda *p: pytest.fail("launched kernel by kernel") for f in plan.bare]
        monkeypatch.setattr(plan, "graph", _CountedGraph(plan.graph, plan.kernels, launched))
    kernels = GlobalCounters.kernel_count
    for _ in range(3):
        np.testing.assert_allclose(two_kernels().numpy(), np.exp(an).sum(1, keepdims=True) * an, rtol=1e-5)
    assert GlobalCounters.kernel_count - kernels == 6 and len(launched) == 6


def test_plan_graph_runs_from_two_threads_at_once():
    """Schedules of one template run from two threads at once (run_schedule outside the realize lock): each gets its
    own values, though the plan's graph has one table of pointers."""
    import threading

    rng = np.random.default_rng(1)
    # (kernels long enough that a launch releases the interpreter to the other thread mid-graph: a table shared
    # without the plan's lock had the other thread's pointers by then)
    xs = [rng.standard_normal(1 << 16).astype(np.float32) / 64 for _ in range(32)]
    ts = [Tensor(x).realize() for x in xs]

    def graph(t: Tensor) -> Tensor:
        return t.exp().sum() * t + 1  # two kernels

    for _ in range(realize.GRAPH_AFTER + 2):
        graph(ts[0]).realize()
    outs = [graph(t) for t in ts]
    schedules = [o.schedule_with_vars() for o in outs]
    errors: list[BaseException] = []

    def run(part: list) -> None:
        try:
            for schedule, var_vals in part:  # (once each: a run into another's buffers is not written over)
                run_schedule(schedule, var_vals)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(schedules[i::2],)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for x, o in zip(xs, outs):
        np.testing.assert_allclose(o.numpy(), np.exp(x).sum() * x + 1, rtol=1e-4, atol=1e-5)


def test_a_realize_of_a_template_makes_no_schedule_items(monkeypatch):
    """A replayed eager MLP Adam step's realize instantiates its template with no ScheduleItem made: the launch plan
    runs from the template's references into the flat list (28 items a step before, made and dropped unread)."""
    from lazygrad.schedule import kernelize

    step = mlp_adam_step()
    with Tensor.train():
        for _ in range(2 + realize.GRAPH_AFTER):
            step()
        made = [0]
        init = kernelize.ScheduleItem.__init__

        def counted(self, *a, **k) -> None:
            made[0] += 1
            init(self, *a, **k)

        monkeypatch.setattr(kernelize.ScheduleItem, "__init__", counted)
        step()
    assert made[0] == 0


@pytest.mark.usefixtures("default_device_cpu")
@pytest.mark.parametrize("graph", [False, True])
def test_unfilled_instances_compute_what_filled_ones_do(monkeypatch, graph):
    """A template met again: its realizes leave the items unmade (Schedule.unfilled) and count who holds the buffers
    on the flat list alone (the same buffers a look at every referrer finds); a schedule handed to the caller
    (Tensor.schedule) has its items and runs through the same plan; both compute numpy's values, kernel by kernel or
    through the graph."""
    from lazygrad.schedule.kernelize import Schedule

    if not graph:
        monkeypatch.setattr(realize, "GRAPH_AFTER", 10**9)

    def chain(x: Tensor) -> Tensor:
        y = (x * 0.5).exp().sum(1, keepdim=True)
        return ((x - y).relu() * 2).max(0) + (x + y).sum(0)

    def ref(xn: np.ndarray) -> np.ndarray:
        y = np.exp(xn * 0.5).sum(1, keepdims=True)
        return (np.maximum(xn - y, 0) * 2).max(0) + (xn + y).sum(0)

    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((16, 8)).astype(np.float32) / 4 for _ in range(9)]
    seen: list[tuple[bool, int, set[int], set[int]]] = []
    real_buffers = realize._LaunchPlan._buffers

    def buffers(plan, schedule):
        flat, unfilled = schedule.bufs, schedule.unfilled
        counted = set(realize.held_at(flat, plan.expected_unfilled if unfilled else plan.expected))
        # (an unfilled one's items not iterated: that would make them)
        mine = [flat] if unfilled else [flat, *(si.bufs for si in schedule)]
        referred = set()
        for k in sorted({k for refs in plan.refs for k in refs}):
            if not _held_elsewhere(flat[k], mine):
                referred.add(k)
        del mine
        seen.append((unfilled, list.__len__(schedule), counted, referred))  # (the items made: none if unfilled)
        return real_buffers(plan, schedule)

    for xn in inputs[:4]:  # (the template, then its plan)
        np.testing.assert_allclose(chain(Tensor(xn)).numpy(), ref(xn), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(realize._LaunchPlan, "_buffers", buffers)
    for xn in inputs[4:8]:
        np.testing.assert_allclose(chain(Tensor(xn)).realize().numpy(), ref(xn), rtol=1e-5, atol=1e-5)
    out = chain(Tensor(inputs[8]).realize())
    schedule = out.schedule()
    assert type(schedule) is Schedule and not schedule.unfilled and len(schedule) == schedule.kernels > 1
    run_schedule(schedule)
    np.testing.assert_allclose(out.numpy(), ref(inputs[8]), rtol=1e-5, atol=1e-5)
    assert len(seen) == 5 and all(unfilled and n == 0 for unfilled, n, *_ in seen[:-1]), seen
    assert seen[-1][:2] == (False, schedule.kernels)
    for *_, counted, referred in seen:
        assert counted == referred, seen
