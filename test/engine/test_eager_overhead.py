"""The Python cost of eager (non-JIT) steps, counted rather than timed: a repeated step schedules, compiles and plans
nothing new, builds shared per-step tensors once, and leaves no bookkeeping behind; its values stay those of a step
computed from scratch."""

import gc
import threading

import numpy as np
import pytest

from lazygrad import Device, Tensor, dtypes, gradient
from lazygrad.engine import memory, realize
from lazygrad.helpers import STEP_LAYOUTS
from lazygrad.nn import Linear, optim
from lazygrad.nn.optim import Adam
from lazygrad.nn.state import get_parameters
from lazygrad.schedule import kernelize
from lazygrad.uop.ops import Ops, UOp, UOpMetaClass
from test.helpers import counting_calls, mlp_adam_step


class _Forgetful(dict):
    def __setitem__(self, key, value) -> None:
        pass


def _mlp_steps(n_steps: int, fresh_schedules: bool, seed: int = 0) -> tuple[list[float], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    l1, l2 = Linear(8, 16), Linear(16, 4)
    for layer in (l1, l2):
        layer.weight.assign(Tensor(rng.standard_normal(layer.weight.shape).astype(np.float32) * 0.3))
        layer.bias.assign(Tensor(rng.standard_normal(layer.bias.shape).astype(np.float32) * 0.1))
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    losses = []
    with Tensor.train():
        for _ in range(n_steps):
            if fresh_schedules:
                kernelize._templates.clear()
            x = Tensor(rng.standard_normal((5, 8)).astype(np.float32))
            y = Tensor(rng.integers(0, 4, 5).astype(np.int32))
            opt.zero_grad()
            loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.numpy() for p in opt.params]


def test_repeated_eager_step_schedules_and_compiles_nothing_new(monkeypatch):
    _mlp_steps(3, fresh_schedules=False, seed=1)  # every kernel of this step's structure compiled and cached
    scheduled = counting_calls(monkeypatch, kernelize, "_create_schedule")
    compiled = counting_calls(monkeypatch, realize, "get_program")
    losses, params = _mlp_steps(4, fresh_schedules=False)
    # the model's construction schedules its own small graphs once; the training steps hit the cache
    assert compiled[0] == 0
    constructed = scheduled[0]
    _mlp_steps(4, fresh_schedules=False, seed=2)
    assert scheduled[0] == constructed, "a step of a structure seen before was scheduled again"
    # the cached schedules compute what scheduling every step from scratch computes
    ref_losses, ref_params = _mlp_steps(4, fresh_schedules=True)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p, r, rtol=1e-6, atol=1e-7)


def test_adam_builds_its_bias_corrections_once_per_step(monkeypatch):
    monkeypatch.setattr(optim, "_step_programs", {})  # the update code runs (not a replay of an earlier test's step)
    l1, l2 = Linear(8, 16), Linear(16, 4)
    opt = Adam(get_parameters([l1, l2]), lr=1e-3)
    sqrts = counting_calls(monkeypatch, Tensor, "sqrt")
    with Tensor.train():
        x = Tensor(np.ones((2, 8), np.float32))
        l2(l1(x)).sum().backward()
        opt.schedule_step()
    # one v.sqrt() per parameter, one sqrt(1 - b2^t) for the step (not one per parameter)
    assert sqrts[0] == len(opt.params) + 1


def test_cached_schedule_keeps_random_values_fresh_and_in_place_updates():
    a = Tensor.rand(64).realize().numpy()
    b = Tensor.rand(64).realize().numpy()  # the same structure: a cached schedule, a new counter value
    assert not np.array_equal(a, b)
    acc = Tensor.zeros(4).contiguous().realize()
    for i in range(1, 5):
        acc.assign(acc + i).realize()
        np.testing.assert_array_equal(acc.numpy(), np.full(4, sum(range(1, i + 1)), np.float32))


def test_single_kernel_schedule_skips_the_memory_planner(monkeypatch):
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    planned = counting_calls(monkeypatch, memory, "plan_memory")
    sched = (x + 1).schedule()
    assert memory.memory_planner(sched) is sched and planned[0] == 0
    realize.run_schedule(sched)


def test_optimizer_step_looks_for_readers_of_what_it_overwrites_once(monkeypatch):
    """The writes of an optimizer step are its outputs: the lazy tensors reading the memory they overwrite are looked
    for before scheduling, and not again once the schedule names the same writes."""
    from lazygrad import tensor as tensor_module

    l1, l2 = Linear(8, 16), Linear(16, 4)
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    x, y = Tensor(np.ones((5, 8), np.float32)).realize(), Tensor(np.arange(5, dtype=np.int32) % 4).realize()
    looks = counting_calls(monkeypatch, tensor_module, "_readers")
    with Tensor.train():
        for step in range(4):
            opt.zero_grad()
            ref = l2(l1(x).relu()).numpy()
            logits = l2(l1(x).relu())  # lazy, reads the parameters: it joins the step's schedule, before the writes
            logits.sparse_categorical_crossentropy(y).backward()
            before = looks[0]
            opt.step()
            if step > 0:  # (the first step also lands the parameters' initial writes)
                assert looks[0] - before == 1
            np.testing.assert_array_equal(logits.numpy(), ref)
    # a value read before an update keeps its old contents (the look found it, the schedule computed it first)
    w = l1.bias
    old = w * 2
    expected = w.numpy() * 2
    opt.zero_grad()
    with Tensor.train():
        l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
        opt.step()
    np.testing.assert_array_equal(old.numpy(), expected)
    assert not np.array_equal(w.numpy() * 2, expected)


def test_step_looks_again_only_for_readers_of_the_joined_writes(monkeypatch):
    """An optimizer step over a conv and BatchNorm: the layer's running statistics read the weights the step
    overwrites, so their pending writes join its schedule; the look for readers of what those writes overwrite asks
    of their memories alone, not again of every parameter's and state's (the CIFAR ResNet step's second look 1.09 ->
    0.11 ms). A lazy tensor reading a running statistic before the step still gets the old values."""
    from lazygrad import nn
    from lazygrad import tensor as tensor_module

    conv, bn = nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm(4)
    opt = optim.SGD(get_parameters([conv, bn.weight, bn.bias]), lr=0.1, momentum=0.9)
    x = Tensor(np.random.default_rng(0).standard_normal((3, 2, 5, 5)).astype(np.float32)).realize()
    looked: list[int] = []
    readers = tensor_module._readers

    def counted(mems, written, skip):
        looked.append(len(mems))
        return readers(mems, written, skip)

    with Tensor.train():
        for step in range(4):
            old = bn.running_mean * 2  # lazy: reads the running mean as it is before this step's write
            expected = bn.running_mean.numpy() * 2
            opt.zero_grad()
            bn(conv(x)).square().mean().backward()
            if step == 3:
                monkeypatch.setattr(tensor_module, "_readers", counted)
            opt.step()
            np.testing.assert_array_equal(old.numpy(), expected)
    # the step's writes (conv weight and bias, the layer's weight and bias, their momenta; the count), then the
    # joined running statistics' two
    assert looked == [9, 2]


def test_readers_look_stops_at_the_first_read(monkeypatch):
    """The digits CNN step's lazy logits (and the loss's sum) read the parameters its update overwrites: the look for
    such readers stops at the first node found reading them (the last layer's bias, a few nodes down) instead of
    walking each reader's whole graph (the realized registry asked of 376 nodes in the look before, 63 now)."""
    from lazygrad import nn
    from lazygrad import tensor as tensor_module
    from lazygrad.examples.digits import DigitsCNN, make_step

    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((16, 1, 8, 8)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 16).astype(np.int32)).realize()
    model = DigitsCNN()
    step = make_step(model, nn.optim.Adam(get_parameters(model), lr=3e-3), jit=False)
    for _ in range(2):
        step(x, y)
    asked, looking, found = [0], [False], []
    registry_get = tensor_module.RealizedNodes.get
    readers = tensor_module._readers

    def counted_get(self, node, default=None):
        asked[0] += looking[0]
        return registry_get(self, node, default)

    def counted_readers(mems, written, skip):
        looking[0] = True
        try:
            out = readers(mems, written, skip)
        finally:
            looking[0] = False
        found.append(len(out))
        return out

    monkeypatch.setattr(tensor_module.RealizedNodes, "get", counted_get)
    monkeypatch.setattr(tensor_module, "_readers", counted_readers)
    step(x, y)
    # the lazy tensors of the logits join the step; a reduction's result is no view of the reduce it reshapes, which
    # then no longer lives on as a third reader (Tensor._reduce)
    assert found == [2]
    assert asked[0] <= 80


def test_readers_look_tells_which_reader_binds_a_variable():
    """A lazy reader of overwritten memory whose graph binds a variable is computed in a schedule of its own (its
    bindings may differ from the writer's); one without keeps joining the writer's. Either keeps the old contents."""
    from lazygrad import Variable
    from lazygrad import tensor as tensor_module

    w = Tensor(np.arange(4, dtype=np.float32)).realize()
    v = Variable("k", 0, 10)
    bound = w * Tensor(v.bind(3)).cast(w.dtype) + 1
    plain = (w + 2).exp2()
    found = {id(t): binds for _, t, binds in tensor_module._readers({w.uop.base.arg.memory}, set(), set())}
    assert found == {id(bound): True, id(plain): False}
    w.assign(w * 10).realize()
    np.testing.assert_allclose(bound.numpy(), np.arange(4) * 3 + 1)
    np.testing.assert_allclose(plain.numpy(), np.exp2(np.arange(4) + 2), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), np.arange(4) * 10)


def test_backward_asks_the_realized_registry_of_realized_nodes_only(monkeypatch):
    """backward() matches the graph's nodes to the tensors wanting gradients with one dictionary lookup a node; the
    registry of realized values (a Python call) is asked only of the nodes that hold a value, however large the
    graph."""
    from lazygrad import tensor as tensor_module

    w = Tensor(np.ones((4, 4), np.float32), requires_grad=True)
    h = w * 2 + 1
    inner = h.uop
    h.realize()  # h's node now holds a value: a graph built over it reads h's buffer
    out = Tensor(inner)
    for i in range(30):
        out = (out * 1.01 + i).relu()
    asked = counting_calls(monkeypatch, tensor_module._realized, "get")
    pairs = out._nodes_in_graph([w, h], out.uop)
    assert asked[0] == 1 < len(out.uop.toposort)
    assert {id(t) for t, _ in pairs} == {id(w), id(h)}  # h found through its realized node
    out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full((4, 4), 2 * 1.01**30), rtol=1e-5)


def test_dead_tensors_and_nodes_leave_no_bookkeeping():
    """Dead nodes leave the hash-cons cache at once; dead tensors' entries of the unset-gradient registry stay until it
    has doubled since its last sweep (no death callback per tensor): bounded by twice its live entries (1024 at least),
    never a live entry more."""
    from lazygrad import tensor as tensor_module

    def live() -> int:
        return sum(ref() is not None for ref in tensor_module._unset_grad.copy().values())

    x = Tensor(np.ones(8, np.float32)).realize()
    gc.collect()
    tracked, cached = live(), len(UOpMetaClass.ucache)
    for i in range(2000):  # (8000 float tensors: several sweeps)
        (x * (i + 0.5) + 1.25).exp()
    gc.collect()
    assert live() <= tracked
    assert len(tensor_module._unset_grad) <= max(1024, 2 * tracked + 16)
    assert len(UOpMetaClass.ucache) <= cached


def test_hash_consing_survives_a_dead_node():
    x = Tensor(np.ones(3, np.float32)).realize()
    args = (Ops.MUL, x.dtype, (x.uop, x.uop), None)
    key = (Ops.MUL, x.dtype.key, (x.uop, x.uop), None)  # the cache keys a dtype by its number
    a = UOp(*args)
    assert UOp(*args) is a and UOpMetaClass.ucache[key]() is a
    del a
    gc.collect()
    assert key not in UOpMetaClass.ucache  # the dead node's entry went with it
    b = UOp(*args)  # rebuilt: a fresh entry, found again while b lives
    assert UOp(*args) is b and UOpMetaClass.ucache[key]() is b


def test_broadcast_fast_paths_build_the_general_paths_nodes():
    x = Tensor(np.ones((3, 4), np.float32)).realize()
    y = Tensor(np.ones((3, 4), np.float32)).realize()
    const = Tensor(2.5).reshape(1, 1).expand(3, 4)  # what the general path makes of a scalar
    assert (x * 2.5).uop is x._alu(Ops.MUL, const).uop
    assert (2.5 - x).uop is const._alu(Ops.SUB, x).uop
    assert (x + y).uop is x._alu(Ops.ADD, y).uop
    # a scalar of a higher kind still takes the general path: int tensor * float -> float
    i = Tensor(np.arange(4, dtype=np.int32))
    np.testing.assert_allclose((i * 1.5).numpy(), np.arange(4) * 1.5)


def test_repeated_step_replays_its_gradient_and_update_graphs(monkeypatch):
    """A step of a structure seen before runs no derivative rule and no optimizer tensor op: both graphs are rebuilt
    from programs (node for node what the code builds), and train exactly as running the code every step does."""
    _mlp_steps(2, fresh_schedules=False, seed=3)
    rules = counting_calls(monkeypatch, gradient, "_apply_rules")
    sqrts = counting_calls(monkeypatch, Tensor, "sqrt")
    losses, params = _mlp_steps(4, fresh_schedules=False)
    assert rules[0] == 0 and sqrts[0] == 0
    monkeypatch.setattr(gradient, "_programs", _Forgetful())  # the code runs every step
    monkeypatch.setattr(optim, "_step_programs", _Forgetful())
    ref_losses, ref_params = _mlp_steps(4, fresh_schedules=False)
    assert rules[0] == 4 and sqrts[0] == 4 * (4 + 1)
    np.testing.assert_array_equal(losses, ref_losses)
    for p, r in zip(params, ref_params):
        np.testing.assert_array_equal(p, r)


def test_replayed_graphs_are_the_graphs_the_code_builds(monkeypatch):
    """Replayed gradient and update nodes are the very (hash-consed) nodes the rules and the optimizer's code build
    over the new step's nodes."""
    x = Tensor(np.random.rand(3, 8).astype(np.float32)).realize()
    layers = [Linear(8, 4), Linear(8, 4)]  # one structure, other buffers
    opts = [Adam(get_parameters([lin]), lr=1e-3) for lin in layers]
    with Tensor.train():
        for lin, opt in zip(layers, opts):
            loss = lin(x).relu().sum()
            targets = {lin.weight.uop, lin.bias.uop}
            seed = Tensor.ones(loss.shape)
            got = gradient.compute_gradient(loss.uop, seed, targets)  # the second layer's: a replay
            ruled = gradient._apply_rules(loss.uop, seed, targets)
            assert {t: g.uop for t, g in got.items()} == {t: g.uop for t, g in ruled.items()}
            for p, t in zip(opt.params, (lin.weight.uop, lin.bias.uop)):
                p.grad = got[t]
            tensors = opt._step_tensors()
            before = [t.uop for t in tensors]
            opt._updates()
            replayed = [t.uop for t in tensors]
            for t, u in zip(tensors, before):
                t.uop = u
            with monkeypatch.context() as m:
                m.setattr(optim, "_step_programs", {})
                opt._updates()
            assert [t.uop for t in tensors] == replayed


def test_repeated_composite_replays_its_graph(monkeypatch):
    """A loss or linear layer called again on tensors of the same kind rebuilds its nodes from a program (the tensor
    ops inside run once): the nodes are the ones the code builds, values and gradients match torch."""
    import torch

    rng = np.random.default_rng(5)
    w, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    xs = [rng.standard_normal((3, 6)).astype(np.float32) for _ in range(3)]
    ys = [rng.integers(0, 4, 3).astype(np.int32) for _ in range(3)]
    softmaxes = counting_calls(monkeypatch, Tensor, "log_softmax")
    for i, (xn, yn) in enumerate(zip(xs, ys)):
        wt, bt = Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
        x, y = Tensor(xn), Tensor(yn)
        out = x.linear(wt, bt)
        loss = out.sparse_categorical_crossentropy(y)
        code = Tensor._sparse_categorical_crossentropy.__wrapped__(
            Tensor.linear.__wrapped__(x, wt, bt), y, -1, 0.0, "mean"
        )
        assert loss.uop is code.uop
        loss.backward()
        tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
        tl = torch.nn.functional.cross_entropy(torch.tensor(xn) @ tw.T + tb, torch.tensor(yn).long())
        tl.backward()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5)
        np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(bt.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-6)
    # once by the first loss, once per call of the undecorated code: never by a replay
    assert softmaxes[0] == 1 + 3


def test_composite_replay_keys_on_what_changes_the_graph():
    from lazygrad import tensor as tensor_module

    draws = tensor_module._replayed(lambda self: self + Tensor.rand(*self.shape))
    x = Tensor(np.zeros(8, np.float32))
    assert not np.array_equal(draws(x).numpy(), draws(x).numpy())  # random: never replayed
    view = tensor_module._replayed(lambda self: self.reshape(2, 4))
    assert view(x)._view_of is not None and view(x)._view_of is not None  # a view keeps torch's view semantics
    double = tensor_module._replayed(lambda self, k: self * k)
    assert double(x + 1, 2.0).tolist() == [2.0] * 8 and double(x + 1, 3.0).tolist() == [3.0] * 8
    assert double(x.int() + 1, 2).tolist() == [2] * 8  # another dtype: another program
    w = Tensor(np.ones(8, np.float32), requires_grad=True)
    with Tensor.no_grad():
        assert not double(w, 2.0).requires_grad
    assert double(w, 2.0).requires_grad


def test_conv_gradient_replays_with_its_window_rule(monkeypatch):
    """A conv's window has a derivative rule of its own (a function with fixed sizes: structure, so its gradient is
    replayed and is the rules' graph); a closure rule (asin's) is code, so that graph's rules run every time."""
    from lazygrad.nn import Conv2d

    x = Tensor(np.random.rand(2, 3, 6, 6).astype(np.float32)).realize()
    for conv in (Conv2d(3, 4, 3, padding=1), Conv2d(3, 4, 3, padding=1)):  # one structure, other buffers
        loss = conv(x).relu().sum()
        targets = {conv.weight.uop, conv.bias.uop}
        seed = Tensor.ones(loss.shape)
        got = gradient.compute_gradient(loss.uop, seed, targets)
        ruled = gradient._apply_rules(loss.uop, seed, targets)
        assert {t: g.uop for t, g in got.items()} == {t: g.uop for t, g in ruled.items()}
    rules = counting_calls(monkeypatch, gradient, "_apply_rules")
    for _ in range(2):
        w = Tensor(np.full(4, 0.25, np.float32), requires_grad=True)
        w.asin().sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), 1 / np.sqrt(1 - 0.25**2), rtol=1e-6)
    assert rules[0] == 2


def test_a_composite_full_of_old_kinds_replays_new_ones():
    """A composite keeps programs for COMPOSITE_PROGRAMS kinds of arguments; the oldest makes room for a new kind,
    which is then replayed (it was run as code every call once the composite had met that many kinds)."""
    from lazygrad import tensor as tensor_module

    calls = []

    def body(self):
        calls.append(1)
        return self * 2 + 1

    f = tensor_module._replayed(body)
    for n in range(1, tensor_module.COMPOSITE_PROGRAMS + 9):
        f(Tensor.ones(n))
    calls.clear()
    for _ in range(3):
        out = f(Tensor.ones(101))
    assert len(calls) == 1
    np.testing.assert_array_equal(out.numpy(), np.full(101, 3.0, np.float32))


def test_replayed_conv_gives_its_window_rule_again(monkeypatch):
    """A conv replayed from its program gives the new window node the derivative rule the code gives it: gradients
    match torch's, and a replay builds the nodes the code builds."""
    import torch

    from lazygrad.nn import Conv2d

    pads = counting_calls(monkeypatch, Tensor, "_spatial_pad")
    first = 0
    for seed in range(3):
        rng = np.random.default_rng(seed)
        xn = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
        conv = Conv2d(3, 4, 3, padding=1)
        x = Tensor(xn, requires_grad=True)
        out = conv(x)
        code = Tensor.conv2d.__wrapped__(x, conv.weight, conv.bias, stride=1, padding=1, dilation=1, groups=1)
        assert out.uop is code.uop
        out.max_pool2d(2).relu().sum().backward()
        tx = torch.tensor(xn, requires_grad=True)
        tw = torch.tensor(conv.weight.numpy(), requires_grad=True)
        tb = torch.tensor(conv.bias.numpy(), requires_grad=True)
        torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(tx, tw, tb, padding=1), 2).relu().sum().backward()
        for t, r in ((x, tx), (conv.weight, tw), (conv.bias, tb)):
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-5)
        first = first or pads[0]
    assert pads[0] == first + 2  # after the first step only the undecorated code pads: conv and pool are replays


def _allocations(monkeypatch) -> list[int]:
    from lazygrad.device import Device

    return counting_calls(monkeypatch, Device["CPU"].allocator, "_take")  # (a buffer's allocation)


def test_repeated_realize_launches_from_its_plan(monkeypatch):
    """A realize of a schedule template seen before neither compiles, lowers nor plans memory: its plan launches the
    runners; it still counts its kernels and computes what the general path computes."""
    from lazygrad import GlobalCounters

    an, bn = np.random.rand(16).astype(np.float32), np.random.rand(16).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    for _ in range(2):
        (a + b).realize()
    names = ("compile_schedule", "lower_schedule_item", "get_runner")
    counted = {name: counting_calls(monkeypatch, realize, name) for name in names}
    executed = counting_calls(monkeypatch, realize.ExecItem, "run")
    planned = counting_calls(monkeypatch, memory, "plan_memory")
    kernels = GlobalCounters.kernel_count
    for _ in range(5):
        np.testing.assert_array_equal((a + b).realize().numpy(), an + bn)
    assert {name: c[0] for name, c in counted.items()} == dict.fromkeys(counted, 0)
    assert executed[0] == 0 and planned[0] == 0
    assert GlobalCounters.kernel_count == kernels + 5


def test_launch_plan_calls_cpu_kernels_straight(monkeypatch):
    """A plan calls each CPU kernel's compiled function itself, not through its runner and program (two Python calls
    a launch, and ~50 launches a digits CNN step); the values stay the general path's."""
    from lazygrad import GlobalCounters
    from lazygrad.runtime.ops_cpu import CPUProgram

    an = np.random.rand(4, 16).astype(np.float32)
    a = Tensor(an, device="CPU").realize()

    def two_kernels() -> Tensor:
        return (a.exp().sum(1, keepdim=True) * a).realize()

    for _ in range(2):
        two_kernels()
    runners = counting_calls(monkeypatch, realize.CompiledRunner, "__call__")
    programs = counting_calls(monkeypatch, CPUProgram, "__call__")
    kernels = GlobalCounters.kernel_count
    for _ in range(3):
        np.testing.assert_allclose(two_kernels().numpy(), np.exp(an).sum(1, keepdims=True) * an, rtol=1e-5)
    assert GlobalCounters.kernel_count - kernels == 6
    assert runners[0] == 0 and programs[0] == 0


def test_launch_plan_trains_and_shares_memory_as_the_general_path(monkeypatch):
    """MLP steps launched from plans: bit for bit the general path's values, the same buffers allocated per step
    (the memory plan of the step's internal buffers is reused, not left out), and no memory planning after the first
    plan of a step."""
    _mlp_steps(3, fresh_schedules=False, seed=4)
    allocs = _allocations(monkeypatch)
    planned = counting_calls(monkeypatch, memory, "plan_memory")
    losses, params = _mlp_steps(4, fresh_schedules=False)
    with_plans, plans_made = allocs[0], planned[0]
    monkeypatch.setattr(realize, "_launch_plan", lambda schedule: None)
    allocs[0] = 0
    ref_losses, ref_params = _mlp_steps(4, fresh_schedules=False)
    assert with_plans == allocs[0]
    assert plans_made <= 2  # the model's own small schedules (its construction), not one per step
    np.testing.assert_array_equal(losses, ref_losses)
    for p, r in zip(params, ref_params):
        np.testing.assert_array_equal(p, r)


def test_launch_plan_keeps_the_general_paths_checks():
    """Through a plan too: reading a buffer whose kernels never ran raises; a TinyJit capture still records the
    kernels of a schedule planned eagerly before (its replays compute over other inputs)."""
    import pytest

    from lazygrad import TinyJit

    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    for _ in range(2):
        ((x + 1) * 2).realize()  # the template of "(a realized buffer) * 2" and its plan
    pending = x + 1
    pending.schedule()  # its kernel never runs
    with pytest.raises(RuntimeError, match="never ran"):
        (pending * 2).realize()
    add = TinyJit(lambda u, v: (u * 2 + v).realize())
    for i in range(2):
        (x * 2 + x).realize()
    for i in range(4):
        u, v = Tensor(np.full(8, i, np.float32)).realize(), Tensor(np.ones(8, np.float32)).realize()
        np.testing.assert_array_equal(add(u, v).numpy(), np.full(8, 2 * i + 1, np.float32))
    assert add.captured is not None and add.captured.kernel_count == 1


def test_launch_plan_follows_the_kernel_knobs(capsys):
    """DEBUG lines still print for a planned template (the general path runs), and another NOOPT builds the other
    kernel rather than launching the plan's."""
    from lazygrad import Context

    x = Tensor(np.arange(8, dtype=np.float32)).realize()
    for _ in range(2):
        (x * 3).realize()
    capsys.readouterr()
    with Context(DEBUG=2):
        (x * 3).realize()
    assert "***" in capsys.readouterr().out
    with Context(NOOPT=1):
        for _ in range(2):
            np.testing.assert_array_equal((x * 3).realize().numpy(), np.arange(8) * 3)
    keys = [k for k in realize._runners if k[2] == 1]
    assert keys, "NOOPT=1 launched the plan's kernels"


def _python_calls(fn) -> int:
    """Python function calls fn makes (C calls not counted), through sys.setprofile. Earlier tests' garbage is
    collected first and the collector kept off: finalizers it would run inside fn are not fn's calls."""
    import sys

    calls = [0]

    def count(frame, event, arg) -> None:
        if event == "call":
            calls[0] += 1

    gc.collect()
    gc.disable()
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return calls[0]


def _python_lines(fn) -> int:
    """Lines of Python fn runs (sys.settrace's line events): work a loop does per element shows here, where a C call
    over all of them does not. Garbage collected first and the collector kept off, as in _python_calls."""
    import sys

    lines = [0]

    def trace(frame, event, arg):
        if event == "line":
            lines[0] += 1
        return trace

    gc.collect()
    gc.disable()
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
        gc.enable()
    return lines[0]


def test_repeated_realize_of_a_graph_seen_before_takes_the_cached_path(monkeypatch):
    """`(a + b).realize()` of a structure scheduled before: no pass of schedule_with_vars runs (no readers looked for,
    nothing scheduled), a bounded number of Python calls (118 before the cached path, 82 with it, 45 launched from the
    template's buffers, 29 with the instance made where the root is recognised), and each result is its own new buffer
    holding the sum."""
    from lazygrad import tensor as tensor_module

    # (an earlier test's sharded tensors make every realize ask whether its graph is sharded: more calls)
    monkeypatch.setattr(Device, "multi_seen", False)
    an, bn = np.random.rand(16).astype(np.float32), np.random.rand(16).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    for _ in range(3):
        (a + b).realize()
    assert _python_calls(lambda: (a + b).realize()) <= 36  # (29 in a fresh process)
    looks = counting_calls(monkeypatch, tensor_module, "_readers")
    items = counting_calls(
        monkeypatch, kernelize._Template, "schedule"
    )  # no ScheduleItem made: launched from the buffers
    general = counting_calls(monkeypatch, Tensor, "_schedule_noted")
    scheduled = counting_calls(monkeypatch, kernelize, "_create_schedule")
    outs = [(a + b).realize() for _ in range(4)]
    assert looks[0] == general[0] == scheduled[0] == items[0] == 0
    assert len({id(o.uop.base.arg) for o in outs}) == 4
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), an + bn)


def test_repeated_reductions_and_matmuls_take_the_cached_path(monkeypatch):
    """A reduction's or matmul's result is a reshape of the value computed (a.sum() is the reduce reshaped to ()): a
    structure seen before goes through the schedule cache too, not the general path, and the result owns its buffer
    (no view of a temporary), as torch's does; its values are the general path's."""
    rng = np.random.default_rng(3)
    xn, wn = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    cases = {
        "sum": (lambda: x.sum().realize(), lambda: xn.sum()),
        "sum(1)": (lambda: x.sum(1).realize(), lambda: xn.sum(1)),
        "max(0)": (lambda: x.max(0).realize(), lambda: xn.max(0)),
        "matmul": (lambda: (x @ w).realize(), lambda: xn @ wn),
        "mean of a chain": (lambda: ((x + 1) * x).mean().realize(), lambda: ((xn + 1) * xn).mean()),
    }
    for fn, _ in cases.values():
        for _ in range(2):
            fn()
    general = counting_calls(monkeypatch, Tensor, "_schedule_noted")
    for name, (fn, ref) in cases.items():
        outs = [fn() for _ in range(3)]
        assert general[0] == 0, name
        assert len({id(o.uop.base.arg) for o in outs}) == 3, name
        for o in outs:
            assert o._view_of is None
            np.testing.assert_allclose(o.numpy(), ref(), rtol=1e-5, atol=1e-5, err_msg=name)
    # a reshape of a value another tensor already holds still takes the general path (its copy rule)
    held = x.sum(1)
    same = x.sum(1)
    held.realize()
    before = general[0]
    same.realize()
    assert general[0] == before + 1
    np.testing.assert_allclose(same.numpy(), xn.sum(1), rtol=1e-5)


def test_root_over_stored_buffers_is_known_without_a_walk(monkeypatch):
    """An op over stored tensors realized again (`(a + b).realize()` in a loop) finds its template from the root's
    sources, with no walk of the graph; the results are the general path's, for 1-D and 2-D tensors, a tensor added to
    itself, sources made anew every call, and a source written in place between calls."""
    rng = np.random.default_rng(7)
    an, bn = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    v = Tensor(an[0]).realize()
    for _ in range(3):
        (a * b).realize(), (a * a).realize(), (v - v.exp()).realize(), (v + 1).realize()
    walks = counting_calls(monkeypatch, kernelize._Walk, "__init__")
    for _ in range(3):
        np.testing.assert_array_equal((a * b).realize().numpy(), an * bn)
        np.testing.assert_array_equal((a * a).realize().numpy(), an * an)
        np.testing.assert_array_equal((b * b).realize().numpy(), bn * bn)
    assert walks[0] == 1  # b * b's first time; a * b and a * a were known from their sources
    np.testing.assert_allclose((v - v.exp()).realize().numpy(), an[0] - np.exp(an[0]), rtol=1e-6)
    for i in range(4):  # a new source each call (its id may be a dead one's)
        w = Tensor(np.full(5, i, np.float32)).realize()
        np.testing.assert_array_equal((v * w).realize().numpy(), an[0] * i)
    a.assign(a + 1).realize()
    np.testing.assert_allclose((a * b).realize().numpy(), (an + 1) * bn, rtol=1e-6)
    before = walks[0]
    (v + 1).realize()
    assert walks[0] == before + 1  # a constant source is no stored buffer: walked


def test_reduction_over_stored_buffers_is_known_without_a_walk(monkeypatch):
    """A reduction of a stored tensor realized again (`a.sum()`, `x.max(1)`: the reduce reshaped) finds its template
    from the reduce's sources, as an op over stored buffers does, with no walk; its values are the general path's,
    for a source written in place between calls too."""
    monkeypatch.setattr(Device, "multi_seen", False)  # (see test_repeated_realize_of_a_graph_seen_before_...)
    rng = np.random.default_rng(8)
    xn = rng.standard_normal((6, 5)).astype(np.float32)
    x = Tensor(xn).realize()
    for _ in range(3):
        x.sum().realize(), x.max(1).realize()
    walks = counting_calls(monkeypatch, kernelize._Walk, "__init__")
    for _ in range(3):
        np.testing.assert_allclose(x.sum().realize().numpy(), xn.sum(), rtol=1e-5)
        np.testing.assert_array_equal(x.max(1).realize().numpy(), xn.max(1))
    assert walks[0] == 0
    assert _python_calls(lambda: x.sum().realize()) <= 46  # (44 walked, 39 known, in a fresh process)
    x.assign(x * 2).realize()
    np.testing.assert_allclose(x.sum().realize().numpy(), 2 * xn.sum(), rtol=1e-5)
    np.testing.assert_array_equal(x.max(1).realize().numpy(), 2 * xn.max(1))


def test_lone_realize_registers_only_what_outlives_it(monkeypatch):
    """A lone realize whose lazy node nothing else holds (`(a + b).realize()`, `a.sum().realize()` in a loop) files no
    realized entry for it (the node dies at the return: no lookup could find the entry). Held by another graph, a
    tensor of the same node or a view, it is filed as before: the other graph reads the stored value, not inputs
    written since, and the view follows a write into its base."""
    from lazygrad import tensor as tensor_module

    # (an earlier test's sharded tensors: a realize asking whether a graph is sharded caches its nodes on its root,
    # which then holds them, and files them)
    monkeypatch.setattr(Device, "multi_seen", False)
    an, bn = np.arange(6, dtype=np.float32), np.full(6, 2, np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    for _ in range(3):
        (a + b).realize(), a.sum().realize()
    filed = counting_calls(monkeypatch, tensor_module._realized, "update")
    for _ in range(3):
        np.testing.assert_array_equal((a + b).realize().numpy(), an + bn)
        np.testing.assert_array_equal(a.sum().realize().numpy(), an.sum())
    assert filed[0] == 0
    c = a + b
    d = c * 2  # holds c's node
    c.realize()
    s = a.sum()
    e = s + 1  # holds the reduce's reshape
    s.realize()
    assert filed[0] == 2
    a.assign(a * 10).realize()
    np.testing.assert_array_equal(d.numpy(), (an + bn) * 2)
    np.testing.assert_array_equal(e.numpy(), an.sum() + 1)
    f, g = a + b, a + b  # one hash-consed node
    f.realize()
    g.realize()
    assert f.uop.base.arg is not g.uop.base.arg
    f += 1
    np.testing.assert_array_equal(g.numpy(), an * 10 + bn)
    h = a + b
    v = h.reshape(2, 3)
    h.realize()
    h += 1
    np.testing.assert_array_equal(v.numpy(), (an * 10 + bn + 1).reshape(2, 3))


def test_cached_realize_keeps_the_general_paths_meaning():
    """What the cached path leaves to the general one still behaves as torch: a value another tensor already holds
    gets a copy of its own, a view reads its base, a pending write lands first, random draws differ."""
    x = Tensor(np.arange(6, dtype=np.float32)).realize()
    for _ in range(2):
        (x * 2).realize()
    held = x * 2  # one hash-consed node for both
    same = x * 2
    held.realize()
    same.realize()
    assert held.uop.base.arg is not same.uop.base.arg
    held.assign(held + 1).realize()
    np.testing.assert_array_equal(same.numpy(), np.arange(6) * 2)
    np.testing.assert_array_equal(held.numpy(), np.arange(6) * 2 + 1)
    v = x.reshape(2, 3)
    x.assign(x + 10)
    np.testing.assert_array_equal((v * 2).realize().numpy(), (np.arange(6).reshape(2, 3) + 10) * 2)
    draws = [Tensor.rand(8).realize().numpy() for _ in range(3)]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])


def test_composite_keys_the_default_dtypes_as_their_knobs_hold_them():
    """A composite's key holds the default dtypes as their knobs hold them (a name or a DType, not parsed on every
    call): a program recorded under one default is never replayed under another, whichever way it was set."""
    from lazygrad.helpers import Context

    xn = np.array([[1.0, 3.0, 2.0], [4.0, 0.0, 5.0]], dtype=np.float32)
    x = Tensor(xn)
    for _ in range(2):  # recorded, then replayed
        assert x.argmax(1).dtype == dtypes.int32
    for default in ("int64", "INT64", dtypes.int64):
        with Context(DEFAULT_INT=default):
            for _ in range(2):
                out = x.argmax(1)
                assert out.dtype == dtypes.int64
                np.testing.assert_array_equal(out.numpy(), xn.argmax(1))
    with Context(DEFAULT_INT="float32"):  # not an int dtype: refused where the code reads it
        with pytest.raises(TypeError):
            Tensor.arange(3)
    out = x.argmax(1)
    assert out.dtype == dtypes.int32
    np.testing.assert_array_equal(out.numpy(), xn.argmax(1))


def _calls_in_fresh_process(script: str) -> int:
    """The last number a script run in a fresh Python process prints (its _python_calls count): nothing other tests
    leave alive adds to the counted work. The bounds are the CPU device's launch path, so the process runs on CPU
    whatever DEV says (.ci/gpu runs these tests with DEV=CUDA)."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]), "DEV": "CPU"}
    out = subprocess.run([sys.executable, "-c", script, here], capture_output=True, text=True, env=env, check=True)
    return int(out.stdout.split()[-1])


_MLP_STEP_CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
from test_eager_overhead import _python_calls
import numpy as np
from lazygrad import Tensor
from lazygrad.nn import Linear
from lazygrad.nn.optim import Adam
from lazygrad.nn.state import get_parameters

rng = np.random.default_rng(0)
l1, l2 = Linear(64, 128), Linear(128, 10)
opt = Adam(get_parameters([l1, l2]), lr=1e-3)
x = Tensor(rng.standard_normal((128, 64)).astype(np.float32)).realize()
y = Tensor(rng.integers(0, 10, 128).astype(np.int32)).realize()

def step():
    opt.zero_grad()
    l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
    opt.step()

with Tensor.train():
    for _ in range(4):  # (the step's launch plan makes its graph on its third run: the fourth step)
        step()
    print(_python_calls(step))
"""


def test_mlp_step_python_calls_stay_bounded():
    """An eager MLP training step of a structure seen before: a bounded number of Python calls (4982 before the
    schedule cache's walk, dtype keys and cached realize were reworked, about 2570 after; about 2150 with relu
    replayed, backward's seed kept and the step keys' dtypes as numbers; about 2100 with the replays' scalar broadcasts
    held and not walked; about 1710 with the step's realize laid out by its programs' runs, no walk, and buffer views
    made with their shape and device; about 1470 with backward's graph walked once and its leaves found by position,
    and the optimizer's race check and the readers' look skipping whole buffers; about 1460 -> 1290 with the Adam
    update's nodes left unbuilt; about 1165 -> 1085 with no buffer node for the update's step sizes, the stored
    nodes filed and the written memories found without UOp.base and Buffer.memory calls; about 1092 -> 1015 with the
    gradients left pending, unbuilt, from backward to the step's realize; 1015 -> 850 with the race checks' and
    readers' per-tensor calls inline and a composite's key made from lists; 850 -> 644 with a composite's key reading
    the default dtypes' knobs and its arguments in loops, an unbuilt run's nodes made in its loop, the optimizer's
    writes noted lazy in one call and its in-place writes stored without _stand_for; 644 -> 558 with each in-place
    write's alias recycled from two steps before: no Buffer, node or death of them; 558 -> 446 with its new values no
    tensor asked for (gradients, values only its kernels read) recycled alike; 448 -> 421 with the realize's schedule
    items left unmade: its launch plan runs from the template's flat list; 427 -> 424 with its layout found by a key of
    its runs' positions, and what its gradients read shifted noted through getters). Counted in a fresh process, where
    nothing other tests leave alive adds to the step's work."""
    assert _calls_in_fresh_process(_MLP_STEP_CALLS) <= 435


_CNN_STEP_CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
from test_eager_overhead import _python_calls
import numpy as np
from lazygrad import Tensor, nn
from lazygrad.examples.digits import DigitsCNN, make_step
from lazygrad.nn.state import get_parameters

rng = np.random.default_rng(0)
x = Tensor(rng.standard_normal((64, 1, 8, 8)).astype(np.float32)).realize()
y = Tensor(rng.integers(0, 10, 64).astype(np.int32)).realize()
model = DigitsCNN()
step = make_step(model, nn.optim.Adam(get_parameters(model), lr=3e-3), jit=False)
for _ in range(5):  # (the fifth step makes its launch plan's graph driver: counted after it)
    step(x, y)
print(_python_calls(lambda: step(x, y)))
"""


def test_cnn_step_python_calls_stay_bounded():
    """The digits demo's eager training step (conv, batchnorm, maxpool, linear; Adam) of a structure seen before: a
    bounded number of Python calls (3259). A change that cuts the MLP step's calls must not add to this step's:
    pending gradients cut the MLP's by 7% and raised these to 3748, building the gradients after all (the step keeps
    its logits, whose gradient the step's realize computes first); they are left built here, and the per-tensor calls
    inlined for the MLP cut these to 2898, and the same cuts as the MLP's 850 -> 644 to 2494 (nine composites a step),
    its in-place writes' recycled aliases to 2379, its small new values no tensor asked for recycled to 2183 (1641 on
    the steps after: this one makes its graph driver), its schedule items left unmade to 2132. Counted in a fresh
    process, as the MLP's, on the sixth step: the fifth makes its launch plan's graph driver, whose count hangs on the
    disk cache (2157 with the driver's source cached, 2355 with none: a fresh cache failed this bound); every step
    after it makes 1602 calls either way. 1614 -> 1605 with what its gradients read shifted noted through getters."""
    assert _calls_in_fresh_process(_CNN_STEP_CALLS) <= 1650


_RESNET_STEP_CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
from test_eager_overhead import _python_calls
import numpy as np
import lazygrad.torch as torch
from lazygrad import Tensor

nn, F = torch.nn, torch.nn.functional


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.sc(x))


model = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), Block(8, 16, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
rng = np.random.default_rng(0)
x = torch.tensor(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
y = torch.tensor(rng.integers(0, 10, 4))


def step():
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


with Tensor.train():
    for _ in range(6):  # (the fifth step makes its launch plan's graph driver: counted after it)
        step()
    print(_python_calls(step))
"""


def test_resnet_step_python_calls_stay_bounded():
    """A torch-style ResNet step (lazygrad.torch: a residual block with a 1x1 shortcut, BatchNorm, SGD with momentum
    over model.parameters()) of a structure seen before: a bounded number of Python calls (12583 before, 2917 now).
    Its code ran every step: the two BatchNorm biases summed into the block's output share one gradient node, which
    made the optimizer's program refuse the step (its update code and assign's race walks ran); and the layers'
    counts (num_batches_tracked), which no optimizer of the parameters alone stored, grew a chain of pending writes,
    so each layer's composite saw no buffer to replay over. Counted in a fresh process, as the digits CNN's."""
    assert _calls_in_fresh_process(_RESNET_STEP_CALLS) <= 3100


@pytest.mark.parametrize("layouts", [0, 1])
def test_mlp_step_builds_and_walks_a_bounded_number_of_nodes(monkeypatch, layouts):
    """The nodes an eager MLP step of a structure seen before builds and walks (the graph's Python costs per node:
    building it, the schedule cache's walk, its death, the collector). The replays hold their scalar broadcasts (a
    constant reshaped and expanded) instead of building them again (335 -> 280 UOp constructions), and the walk keys
    each one by its node, not its subtree (289 -> 265 nodes). The step's realize is laid out by its gradient and
    update programs' runs: the walk numbers none of its nodes (STEP_LAYOUTS=0: all)."""
    from lazygrad.uop import program

    monkeypatch.setattr(STEP_LAYOUTS, "value", layouts)
    monkeypatch.setattr(Device, "multi_seen", False)  # (see test_step_leaves_its_update_unbuilt)

    step = mlp_adam_step()
    walked: list[int] = []
    walk_init = kernelize._Walk.__init__

    def counted_walk(self, outs, realized, known=None, at=None) -> None:
        walk_init(self, outs, realized, known, at)
        walked.append(len(self.nodes) - len(known or ()))  # (the nodes it numbered)

    with Tensor.train():
        for _ in range(3):
            step()
        monkeypatch.setattr(kernelize._Walk, "__init__", counted_walk)
        built = counting_calls(monkeypatch, UOpMetaClass, "__call__")
        replayed = counting_calls(monkeypatch, program, "hash_consed")  # (a program's run builds its nodes so)
        step()
    built[0] += replayed[0]
    # (laid out, a step laid out before makes no walk: its layout's key is made from its runs' positions)
    assert walked if not layouts else not walked
    assert max(walked, default=0) <= 270
    # laid out, the step leaves its Adam update's 94 new nodes unbuilt (see test_step_leaves_its_update_unbuilt); the
    # loss without label smoothing builds no smoothing term (186 -> 168); the update's step sizes, stored for the
    # kernels that read them and held by no tensor, get no buffer node (168 -> 164); the backward leaves its 40
    # gradient nodes unbuilt too, the tensors holding pending gradients (164 -> 117)
    assert built[0] <= (120 if layouts else 275)
    held = [n for p in optim._step_programs.values() for n in p.program.fixed if n is not None]
    assert held and all(n.op in program._FIXED for n in held)


def _counting_entry_looks(monkeypatch) -> list[int]:
    """Counts the nodes the step layout asks for a realized entry (schedule/kernelize.py _layout)."""
    looked = [0]
    dict_of = kernelize._DICT_OF

    def counted(node):
        looked[0] += 1
        return dict_of(node)

    monkeypatch.setattr(kernelize, "_DICT_OF", counted)
    return looked


@pytest.mark.parametrize("mid_step", [False, True])
def test_step_layout_reuses_backwards_look_at_realized_entries(monkeypatch, mid_step):
    """A step's realize laid out by its runs asks which of the gradient run's inputs (the forward graph, 87 nodes of an
    MLP step) hold a realized entry only where the realized registry changed since its backward walked them and
    asked the same (164 nodes asked -> 58: the runs' held constants and the update's inputs; the layout's ~42 us ->
    ~26 us of a ~480 us step); nor does it ask the runs' own unbuilt nodes, which never hold one. A value realized
    between backward and the step (`h` here) is an entry added since: the layout asks again, finds it, and the step
    keeps torch's values."""
    import torch

    monkeypatch.setattr(Device, "multi_seen", False)  # (see test_step_leaves_its_update_unbuilt)
    rng = np.random.default_rng(3)
    l1, l2 = Linear(64, 128), Linear(128, 10)
    t1, t2 = torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)
    with torch.no_grad():
        for layer, ref in ((l1, t1), (l2, t2)):
            ref.weight.copy_(torch.from_numpy(layer.weight.numpy()))
            ref.bias.copy_(torch.from_numpy(layer.bias.numpy()))
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    ropt = torch.optim.Adam([*t1.parameters(), *t2.parameters()], lr=1e-2)
    xn = rng.standard_normal((128, 64)).astype(np.float32)
    yn = rng.integers(0, 10, 128).astype(np.int32)
    x, y = Tensor(xn).realize(), Tensor(yn).realize()
    looked: list[int] = []
    with Tensor.train():
        for i in range(5):
            if i == 4:
                looked = _counting_entry_looks(monkeypatch)
            opt.zero_grad()
            if mid_step:
                # (a kept h gets a gradient: backward builds the gradients, and the layout looks at them too)
                h = l1(x).relu()
                l2(h).sparse_categorical_crossentropy(y).backward()
                want = t1(torch.from_numpy(xn)).relu().detach().numpy()
                np.testing.assert_allclose(h.numpy(), want, rtol=1e-4, atol=5e-5)  # (see below)
            else:
                l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
            opt.step()
            ropt.zero_grad()
            torch.nn.functional.cross_entropy(
                t2(t1(torch.from_numpy(xn)).relu()), torch.from_numpy(yn).long()
            ).backward()
            ropt.step()
            # (float32 sums in another order than torch's: after 5 Adam steps at lr 1e-2 the parameters differ by up
            # to ~1e-5, by test order; a wrong buffer would be off by the size of a step)
            for p, r in zip(get_parameters([l1, l2]), [*t1.parameters(), *t2.parameters()]):
                np.testing.assert_allclose(p.numpy(), r.detach().numpy(), rtol=1e-4, atol=5e-5)
    assert looked[0] >= 87 if mid_step else 0 < looked[0] <= 60


def test_step_layout_key_from_runs_positions_is_the_walks(monkeypatch):
    """A step laid out before finds its layout by a key made from its runs' positions alone (kernelize._layout_again:
    an Unbuilt's position, a later run's inputs, backward's numbering of the forward graph), where _layout numbers
    every node of the runs (~270 an MLP Adam step) and walks the outputs: the two keys and the nodes read by position
    are the same on every step it is made, over models of two shapes stepped in turn, SGD's update and Adam's, and a
    step realizing a tensor its runs did not build (no key from positions: _layout's walk)."""
    import torch

    monkeypatch.setattr(Device, "multi_seen", False)  # (see test_step_leaves_its_update_unbuilt)
    made: list[bool] = []
    again = kernelize._layout_again

    def compared(outs, replays, realized):
        fast = again(outs, replays, realized)
        if fast is not None:
            slow = kernelize._layout(outs, replays, realized)
            assert slow is not None and slow is not kernelize._NOT_THEIRS
            assert fast[0] == slow[0]
            assert all(a is b for a, b in zip(fast[1], slow[1].nodes))
        made.append(fast is not None)
        return fast

    monkeypatch.setattr(kernelize, "_layout_again", compared)
    rng = np.random.default_rng(5)
    models = []
    for sizes, opt_class in (((8, 16, 4), Adam), ((64, 128, 10), Adam), ((8, 16, 4), optim.SGD)):
        layers = [Linear(sizes[0], sizes[1]), Linear(sizes[1], sizes[2])]
        refs = [torch.nn.Linear(sizes[0], sizes[1]), torch.nn.Linear(sizes[1], sizes[2])]
        with torch.no_grad():
            for layer, ref in zip(layers, refs):
                ref.weight.copy_(torch.from_numpy(layer.weight.numpy()))
                ref.bias.copy_(torch.from_numpy(layer.bias.numpy()))
        params = get_parameters(layers)
        opt = opt_class(params, lr=1e-2)
        ropt = (torch.optim.Adam if opt_class is Adam else torch.optim.SGD)(
            [p for r in refs for p in r.parameters()], lr=1e-2
        )
        xn = rng.standard_normal((5, sizes[0])).astype(np.float32)
        yn = rng.integers(0, sizes[2], 5).astype(np.int32)
        models.append((layers, refs, params, opt, ropt, xn, yn))
    with Tensor.train():
        for i in range(5):
            for layers, refs, params, opt, ropt, xn, yn in models:
                x, y = Tensor(xn).realize(), Tensor(yn).realize()
                opt.zero_grad()
                logits = layers[1](layers[0](x).relu())
                hits = (logits.argmax(1) == y).sum() if i == 3 else None
                loss = logits.sparse_categorical_crossentropy(y)
                del logits  # (a tensor kept through backward gets a gradient: the runs are built)
                loss.backward()
                ropt.zero_grad()
                out = refs[1](refs[0](torch.from_numpy(xn)).relu())
                torch.nn.functional.cross_entropy(out, torch.from_numpy(yn).long()).backward()
                if hits is not None:  # a tensor the runs did not build, realized with the step
                    opt.step([hits])
                    assert hits.item() == (out.argmax(1).numpy() == yn).sum()
                else:
                    opt.step()
                ropt.step()
                for p, r in zip(params, [p for ref in refs for p in ref.parameters()]):
                    np.testing.assert_allclose(p.numpy(), r.detach().numpy(), atol=1e-5)
    assert sum(made) >= 6


def test_step_leaves_its_update_unbuilt(monkeypatch):
    """A step whose realize is laid out by its runs builds none of its optimizer update's nodes: the tensors it
    assigns hold Unbuilt writes until the realize stores them, the realize reads only their places, and no Unbuilt
    outlives the step (in a tensor, or as a realized node). A step that asks schedule_step() for its tensors gets the
    real nodes (the caller may do anything with them)."""
    from lazygrad.uop import program

    # a sharded tensor made earlier in the process (another test's) turns it off: schedules look for sharded nodes then
    monkeypatch.setattr(Device, "multi_seen", False)
    step = mlp_adam_step()
    with Tensor.train():
        for _ in range(3):
            step()
        runs: list[int] = []
        graph_run = program.GraphProgram.run

        def counted(self, inputs):
            runs.append(len(self.steps))
            return graph_run(self, inputs)

        monkeypatch.setattr(program.GraphProgram, "run", counted)
        unbuilt = counting_calls(monkeypatch, program.GraphProgram, "unbuilt")
        step()
    update = [p for p in optim._step_programs.values()][-1].program
    # (its backward's gradients are left unbuilt too: see test/test_pending_grads.py)
    assert unbuilt[0] == 2 and len(update.steps) not in runs
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is program.Unbuilt and o is not program.FILLER]

    l1 = Linear(4, 3)
    opt = Adam(get_parameters([l1]), lr=1e-2)
    with Tensor.train():
        for _ in range(3):
            opt.zero_grad()
            l1(Tensor.ones(2, 4)).sum().backward()
            opt.step()
        opt.zero_grad()
        l1(Tensor.ones(2, 4)).sum().backward()
        assigned = opt.schedule_step()
        assert all(type(t.uop) is UOp for t in assigned)
        Tensor.realize(*assigned)


@pytest.mark.parametrize("daemon", [True, False])
def test_step_unbuilt_beside_a_daemon_thread_not_beside_a_regular_one(monkeypatch, daemon):
    """A step leaves its update unbuilt beside the library's threads and daemons (tqdm's monitor outlives every
    progress bar), never beside a regular thread of the user's, which may read a parameter while this one steps."""
    from lazygrad.uop import program

    monkeypatch.setattr(Device, "multi_seen", False)  # (see test_step_leaves_its_update_unbuilt)
    step = mlp_adam_step()
    done = threading.Event()
    other = threading.Thread(target=done.wait, daemon=daemon)
    other.start()
    try:
        with Tensor.train():
            for _ in range(3):
                step()
            unbuilt = counting_calls(monkeypatch, program.GraphProgram, "unbuilt")
            step()
    finally:
        done.set()
        other.join()
    assert unbuilt[0] == (2 if daemon else 0)  # (the gradients and the update)


def test_failed_step_realize_leaves_its_update_built(monkeypatch):
    """A laid-out step whose realize raises before any kernel runs (Ctrl-C) leaves the tensors it assigns lazy with
    the real nodes of their update: read, they show the update, as a step whose nodes were built does."""
    from lazygrad import tensor as tensor_module

    monkeypatch.setattr(Device, "multi_seen", False)  # (see test_step_leaves_its_update_unbuilt)

    def steps(interrupt: bool) -> list[np.ndarray]:
        rng = np.random.default_rng(5)
        Tensor.manual_seed(5)
        l1 = Linear(6, 5)
        opt = Adam(get_parameters([l1]), lr=1e-2)
        x = Tensor(rng.standard_normal((3, 6)).astype(np.float32)).realize()
        with Tensor.train():
            for i in range(5):
                opt.zero_grad()
                l1(x).relu().sum().backward()
                if interrupt and i == 3:
                    with monkeypatch.context() as mp:

                        def raising(*args, **kwargs):
                            raise KeyboardInterrupt

                        mp.setattr(tensor_module, "run_schedule", raising)
                        with pytest.raises(KeyboardInterrupt):
                            opt.step()
                    assert all(type(t.uop) is UOp for t in [*opt.params, *opt.m, *opt.v])
                    Tensor.realize(*opt.params, *opt.m, *opt.v, opt.b1_t, opt.b2_t)
                else:
                    opt.step()
        return [t.numpy() for t in [*opt.params, *opt.m, *opt.v]]

    for got, want in zip(steps(True), steps(False)):
        np.testing.assert_array_equal(got, want)


def test_dtype_numbers_key_hash_consing():
    """A dtype's number is shared by equal dtypes, even one unpickled from another process's numbers, so nodes of
    equal dtypes stay one hash-consed node."""
    import pickle

    from lazygrad.dtype import DType, dtypes

    v = dtypes.float32.vec(4)
    assert v.key == dtypes.float32.vec(4).key != dtypes.float32.key
    assert dtypes.float32.ptr().key != dtypes.float32.key and dtypes.float32.ptr(8).key != dtypes.float32.ptr().key
    state = dict(pickle.loads(pickle.dumps(v)).__dict__, key=10**6)  # as if numbered elsewhere
    other = DType.__new__(DType)
    other.__setstate__(state)
    assert other == v and other.key == v.key
    c = UOp.const(dtypes.float32, 1.5)
    assert UOp(c.op, pickle.loads(pickle.dumps(dtypes.float32)), c.src, c.arg) is c


def test_realizing_a_stored_tensor_schedules_nothing(monkeypatch):
    """A tensor already stored whole (`.numpy()` and `.item()` realize it again) computes nothing and takes no pass
    of schedule_with_vars; a view of a pending write still goes through it and reads the write."""
    x = Tensor(np.arange(6, dtype=np.float32)).realize()
    general = counting_calls(monkeypatch, Tensor, "_schedule_noted")
    assert x.realize() is x and x.reshape(2, 3).realize().numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert general[0] == 0
    v = x.reshape(2, 3)
    x.assign(x + 1)
    np.testing.assert_array_equal(v.realize().numpy(), np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    assert general[0] >= 1


def test_repeated_relu_replays_its_graph(monkeypatch):
    """relu is a composite (a compare, an or, a where): called again on a tensor of the same kind it is rebuilt from
    its program, node for node what its code builds, and its gradient matches torch's (0 at 0, as torch's)."""
    import torch

    xn = np.array([-1.5, 0.0, 2.0, -0.0, 3.5], np.float32)
    Tensor(xn).relu()  # the program of this kind
    compares = counting_calls(monkeypatch, Tensor, "__le__")
    for _ in range(3):
        x = Tensor(xn, requires_grad=True)
        out = x.relu()
        assert out.uop is Tensor.relu.__wrapped__(x).uop
        (out * 2).sum().backward()
        tx = torch.tensor(xn, requires_grad=True)
        (tx.relu() * 2).sum().backward()
        np.testing.assert_array_equal(out.numpy(), tx.relu().detach().numpy())
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert compares[0] == 3  # the undecorated code's only: never a replay's


def test_backward_seeds_from_one_node_per_kind(monkeypatch):
    """The seed gradient of a scalar's backward() is the node Tensor.ones builds, built once per shape, dtype and
    device: later backwards make no factory call; under no_grad the factory still runs (its node is detached)."""
    w = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
    (w * 3).sum().backward()
    made = counting_calls(monkeypatch, Tensor, "full")
    for _ in range(3):
        w.grad = None
        loss = (w * w).sum()
        loss.backward()
        np.testing.assert_array_equal(w.grad.numpy(), 2 * np.arange(4, dtype=np.float32))
    assert made[0] == 0
    assert loss._seed_gradient(None).uop is Tensor.ones((), dtype=loss.dtype, device=loss.device).uop


def test_window_rule_keys_are_built_once(monkeypatch):
    """A conv's window derivative rule is keyed (as structure) once per rule object: a replayed conv hands its new
    nodes the rule it recorded, and a backward over them does not key it again."""
    from lazygrad.nn import Conv2d

    x = Tensor(np.random.rand(2, 3, 6, 6).astype(np.float32)).realize()
    conv = Conv2d(3, 4, 3, padding=1)
    for _ in range(2):
        conv(x).relu().sum().backward()
    frozen = counting_calls(monkeypatch, gradient, "_frozen")
    grads = []
    for _ in range(2):
        conv.weight.grad = None
        conv(x).relu().sum().backward()
        grads.append(conv.weight.grad.numpy())
    assert frozen[0] == 0
    np.testing.assert_array_equal(grads[0], grads[1])


def test_backward_looks_at_live_tensors_at_c_speed():
    """backward() considers every live float tensor whose requires_grad is unset (tinygrad's rule: any of them may
    want a gradient); those holding no node of the graph are dropped at C speed, so a backward runs as many lines of
    Python beside 3000 live tensors as beside none (a loop over them cost 6 ms a backward with 10,000 live), and fills
    the same .grad."""
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
    w = Tensor(np.ones((3, 2), np.float32), requires_grad=True)
    h = x @ w  # an unset tensor of the graph: it gets a .grad too
    h.realize()  # (found through its realized node)

    def backward() -> None:
        w.grad = h.grad = None
        (h.relu() * 2).sum().backward()

    for _ in range(2):
        backward()
    lines = _python_lines(backward)
    bystanders = [Tensor(np.full(4, i, np.float32)) for i in range(2000)]
    bystanders += [b * 2 for b in bystanders[:1000]]  # lazy ones too
    assert _python_lines(backward) == lines
    np.testing.assert_array_equal(w.grad.numpy(), np.repeat(x.numpy().sum(0, keepdims=True).T * 2, 2, axis=1))
    np.testing.assert_array_equal(h.grad.numpy(), np.full((2, 2), 2, np.float32))
    assert all(b.grad is None for b in bystanders)


def test_lazy_origins_are_asked_at_c_speed(monkeypatch):
    """A realized tensor kept with the graph that computed it (its gradient path) is found by backward and by the
    requires_grad walk through its node, not by a Python-level registry lookup per node of the graph: a deep graph
    over it asks the registry no more often than a shallow one, and the gradient flows through the kept graph."""
    from lazygrad import tensor as tensor_module

    w = Tensor(np.full((4,), 0.5, np.float32), requires_grad=True)
    h = (w * 3).exp()
    h.realize()  # h stands for its buffer now; its graph is kept as its gradient path
    assert tensor_module._ORIGIN in h.uop.__dict__ and len(tensor_module._lazy_origin) >= 1
    asked = counting_calls(monkeypatch, tensor_module.LazyOrigins, "__contains__")
    out = h
    for i in range(40):
        out = out * 1.01 + i
    assert out.requires_grad
    out.sum().backward()
    assert asked[0] <= 2 < len(out.uop.toposort)
    np.testing.assert_allclose(w.grad.numpy(), np.full(4, 3 * np.exp(1.5) * 1.01**40, np.float32), rtol=1e-5)


def test_shifted_read_look_asks_the_realized_registry_of_realized_nodes_only(monkeypatch):
    """assign's look for reads of its target at other positions (_shifted_bases, under every optimizer update) asks
    the registry of realized values (a Python call) only of the nodes holding one: as often over a deep graph as over
    a shallow one. The write still reads through the realized node's buffer."""
    from lazygrad import tensor as tensor_module

    w = Tensor(np.arange(8, dtype=np.float32)).realize()
    h = w + 1
    inner = h.uop
    h.realize()  # h's node now holds a value: a graph built over it reads h's buffer
    asked = counting_calls(monkeypatch, tensor_module._realized, "get")
    counts = []
    for depth in (5, 40):
        value = Tensor(inner)
        for i in range(depth):
            value = value * 0.5 + i
        before = asked[0]
        tensor_module._shifted_bases(value.flip(0).uop)
        counts.append(asked[0] - before)
    assert max(counts) <= 4  # (the shallow graph's nodes, shared, are known to the deep one's walk)
    w.assign(value.flip(0))
    expected = np.arange(8, dtype=np.float32) + 1
    for i in range(40):
        expected = expected * 0.5 + i
    np.testing.assert_allclose(w.numpy(), expected[::-1], rtol=1e-6)


_MATMUL_CASES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((2, 3, 4), (2, 4, 5)),
    ((1, 4), (4, 1)),
    ((0, 4), (4, 3)),
    ((3, 4), (4, 0)),
    ((3, 0), (0, 2)),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int8", "uint64", "bool"])
def test_matmul_builds_the_composed_paths_nodes(dtype):
    """x @ w built directly (_matmul_node) is the very node the composed tensor ops build (reshapes, a transpose, a
    broadcast product and its sum), for 1-D, batched, broadcast, transposed and empty operands; the shape and device
    it notes on its nodes are the ones the shape rules give."""
    rng = np.random.default_rng(0)
    for xs, ws in _MATMUL_CASES:
        x = Tensor(rng.standard_normal(xs).astype(np.float32)).cast(dtype)
        w = Tensor(rng.standard_normal(ws).astype(np.float32)).cast(dtype)
        assert (x @ w).uop is x._dot_composed(w).uop, (xs, ws)
        if len(ws) >= 2:
            wt = Tensor(rng.standard_normal(ws[:-2] + ws[:-3:-1]).astype(np.float32)).cast(dtype).transpose(-1, -2)
            assert x.matmul(wt).uop is x._dot_composed(wt).uop, (xs, ws)
        for n in (x @ w).uop.toposort:
            known = dict(n.__dict__)
            n.__dict__.pop("shape", None), n.__dict__.pop("device", None)
            assert (n.shape, n.device) == (known.get("shape", n.shape), known.get("device", n.device)), n.op
        with Tensor.no_grad():  # (each tensor of the composed path detaches its node there)
            assert (x @ w).uop is x._dot_composed(w).uop, (xs, ws)
    # a reduction under no_grad keeps the DETACH its reduce's tensor gave before the reshape
    with Tensor.no_grad():
        x = Tensor(rng.standard_normal((3, 4)).astype(np.float32)).cast(dtype)
        if x.dtype == dtypes.float32:
            composed = Tensor(UOp(Ops.REDUCE_AXIS, x.dtype, (x.uop,), (Ops.ADD, (1,)))).reshape(3)
            assert x.sum(1).uop is composed.uop
    # mixed dtypes and other devices take the composed path: the values are torch's
    import torch

    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.integers(-3, 3, (4, 2)).astype(np.int32)
    got = (Tensor(a) @ Tensor(b)).numpy()
    np.testing.assert_allclose(got, (torch.tensor(a) @ torch.tensor(b).float()).numpy(), rtol=1e-6)


def test_matmul_values_and_gradients_match_torch():
    import torch

    rng = np.random.default_rng(1)
    for xs, ws in _MATMUL_CASES[:9]:
        xn, wn = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
        tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
        out, tout = x @ w, tx @ tw
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
        out.sum().backward()
        tout.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    h = Tensor(rng.standard_normal((5, 8)).astype(np.float16))
    hw = Tensor(rng.standard_normal((8, 3)).astype(np.float16))
    ref = torch.tensor(h.numpy()).float() @ torch.tensor(hw.numpy()).float()
    np.testing.assert_allclose((h @ hw).numpy(), ref.half().numpy(), rtol=1e-3)
    v = Tensor(np.arange(12, dtype=np.float32)).reshape(3, 4)  # a view as an operand
    np.testing.assert_allclose((v @ v.T).numpy(), np.arange(12.0).reshape(3, 4) @ np.arange(12.0).reshape(3, 4).T)


def test_op_building_python_calls_stay_bounded():
    """Building a matmul, a sum and a chain of elementwise ops: a bounded number of Python calls (x @ w of 64x64:
    327 through the composed tensor ops, 49 built directly; a.sum(): 58 with its casts and a second tensor for its
    reshape, 19 with one; x.mean() 146 -> 92)."""
    rng = np.random.default_rng(0)
    x, w = (Tensor(rng.standard_normal((64, 64)).astype(np.float32)).realize() for _ in range(2))
    a, b = (Tensor(rng.standard_normal(16).astype(np.float32)).realize() for _ in range(2))
    for _ in range(2):
        x @ w, a.sum(), (a + b) * a - b
    assert _python_calls(lambda: x @ w) <= 60
    assert _python_calls(lambda: a.sum()) <= 25
    assert _python_calls(lambda: x.sum(1)) <= 25
    assert _python_calls(lambda: x.max(1)) <= 30
    assert _python_calls(lambda: x.mean()) <= 100  # (146 before: dtypes asked through sets of DTypes, casts to itself)
    assert _python_calls(lambda: (a + b) * a - b) <= 55


def test_repeated_views_skip_their_checks_not_their_meaning(monkeypatch):
    """A reshape or permute repeated on a tensor of the same shape takes its checked arg from the last time (T of 64x64:
    41 -> 13 Python calls, reshape 25 -> 10): the same nodes as checking again, and arguments the checks refuse (a
    float or numpy size that hashes as an int seen before, a bad order) are still refused."""
    from lazygrad import tensor as tensor_module

    x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()

    def views() -> list:
        return [x.T.uop, x.reshape(24).uop, x.reshape(-1, 3).uop, x.reshape((2, 12)).uop, x.reshape([3, 8]).uop]

    for _ in range(2):
        again = views()
    assert _python_calls(lambda: x.T) <= 16
    assert _python_calls(lambda: x.reshape(24)) <= 12
    with monkeypatch.context() as m:
        m.setattr(tensor_module, "_checked_views", {})
        checked = views()
        assert len(tensor_module._checked_views) == 5  # the checks ran, and noted their args
    assert all(a is b for a, b in zip(checked, again))
    assert x.reshape(4, 6) is x and x.permute(0, 1) is x and x.permute(-2, -1) is x
    np.testing.assert_array_equal(x.reshape(-1, 3).numpy(), np.arange(24).reshape(-1, 3))
    np.testing.assert_array_equal(x.permute(-1, 0).numpy(), np.arange(24).reshape(4, 6).T)
    for bad in [(24.0,), (np.int64(24),), (2, 12.0), ((2.0, 12),), (5, 5)]:
        with pytest.raises(tensor_module.ArgumentError):
            x.reshape(*bad)
    with pytest.raises(tensor_module.ArgumentError):
        x.permute(0, 0)
    with pytest.raises(IndexError):
        x.permute(0, 2)


def _slow_leaves(loss: Tensor, seed: Tensor, monkeypatch) -> list:
    """backward's leaves found as before the structure kept them: _nodes_in_graph and grad_reachable's walk."""
    with monkeypatch.context() as m:
        m.setattr(gradient._Structure, "__init__", _structure_unkeyed)
        return loss._backward_leaves(seed)[1]


def _structure_unkeyed(self, root, seed, no_grad) -> None:
    _STRUCTURE_INIT(self, root, seed, no_grad)
    self.graph = None  # backward then takes its general path (as for a graph with no key)


_STRUCTURE_INIT = gradient._Structure.__init__


def test_repeated_backward_walks_its_graph_once(monkeypatch):
    """A backward of a structure seen before walks the graph once (numbering and keying it, in the toposort's order,
    with no toposort made): which of its nodes live tensors hold is looked up by position and which a gradient
    reaches is the structure's, known since its first backward (MLP step: 185 -> 142 Python calls). The tensors it
    fills are those the general path finds, held intermediates and inputs included, in its order; the gradients are
    the same bits."""
    import lazygrad.tensor as tensor_module
    from lazygrad.uop import ops as ops_module

    # (realized tensors that other tests keep alive with their gradient paths make every backward ask each node of
    # its graph for one, a walk this test would count: it counts the walks of a structure seen before)
    monkeypatch.setattr(tensor_module, "_lazy_origin", tensor_module.LazyOrigins())
    rng = np.random.default_rng(5)
    l1, l2 = Linear(8, 16), Linear(16, 4)
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    x = Tensor(rng.standard_normal((5, 8)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 4, 5).astype(np.int32)).realize()

    def forward(hold: bool) -> tuple[Tensor, list[Tensor]]:
        h = l1(x)
        a = h.relu()
        loss = l2(a).sparse_categorical_crossentropy(y)
        return loss, [h, a] if hold else []

    with Tensor.train():
        for hold in (False, True, False, True):
            opt.zero_grad()
            loss, held = forward(hold)
            seed = loss._seed_gradient(None)
            fast = loss._backward_leaves(seed)[1]
            slow = _slow_leaves(loss, seed, monkeypatch)
            assert [(id(t), n) for t, n in fast] == [(id(t), n) for t, n in slow]
            assert {id(t) for t, _ in fast} >= {id(p) for p in opt.params} | {id(t) for t in held}
            loss.backward()
            opt.step()
        opt.zero_grad()
        loss, _ = forward(False)
        assert _python_calls(loss.backward) <= 160
        opt.step()
        opt.zero_grad()
        loss, _ = forward(False)
        walks = counting_calls(monkeypatch, ops_module.UOp, "_walk_descendants")
        reach = counting_calls(monkeypatch, gradient, "_walk_reachable")
        in_graph = counting_calls(monkeypatch, Tensor, "_nodes_in_graph")
        loss.backward()
        assert (walks[0], reach[0], in_graph[0]) == (0, 0, 0)
        got = [p.grad.numpy() for p in opt.params]
    # the same step with nothing kept (each backward walks for what a gradient reaches and runs the rules)
    monkeypatch.setattr(gradient, "_programs", _Forgetful())
    with Tensor.train():
        for p in opt.params:
            p.grad = None
        loss, _ = forward(False)
        loss.backward()
    assert reach[0] == 1
    for p, g in zip(opt.params, got):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_backward_numbers_replayed_composites_by_their_runs(monkeypatch):
    """A forward of replayed composites (Linear, cross-entropy) carries each run on its output node, and backward
    numbers a run's nodes at once and keys it as its program and its inputs' positions instead of a record per node
    (MLP 64-128-10 forward, 99 nodes: 51 -> 21 us; digits CNN: 87 -> 50 us). The structure still lists every node of
    the graph once, sources first, its key is the same on every step (a recorded run is kept as a replayed one is), and
    the gradients are the rules' bits."""
    rng = np.random.default_rng(7)
    l1, l2 = Linear(7, 13), Linear(13, 3)  # (sizes no other test uses: its first step records the composites)
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    x = Tensor(rng.standard_normal((5, 7)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 3, 5).astype(np.int32)).realize()
    made: list = []

    def structure(self, root, seed, no_grad) -> None:
        _STRUCTURE_INIT(self, root, seed, no_grad)
        made.append(self)

    monkeypatch.setattr(gradient._Structure, "__init__", structure)
    keys = []
    with Tensor.train():
        for _ in range(4):
            opt.zero_grad()
            l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
            shape = made[-1]
            key = next(k for k, g in gradient._programs.items() if g is shape.graph)
            keys.append(key)
            assert len(shape.nodes) == len(set(shape.nodes)) == len(shape.index)
            assert set(shape.nodes) == set(shape.root.toposort) | set(shape.seed.toposort)
            assert all(shape.index[s] < shape.index[n] for n in shape.nodes for s in n.src)
            opt.step()
        assert keys[0] == keys[1] == keys[2] == keys[3] and keys[3].count(gradient._RUN_RECORD) >= 3
        opt.zero_grad()
        l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
        got = [p.grad.numpy() for p in opt.params]
        monkeypatch.setattr(gradient, "_programs", _Forgetful())  # the rules, over the same graph
        opt.zero_grad()
        l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
    for p, g in zip(opt.params, got):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_backward_over_runs_that_share_nodes_or_hold_a_realized_one(monkeypatch):
    """Two composite runs over one input share nodes (the input's, the constants the programs hold), and a run's output
    may be realized mid-forward: the structure numbers each node once, finds the realized one and the tensors the
    general path finds, and the gradients match torch."""
    import torch

    rng = np.random.default_rng(11)
    la, lb = Linear(6, 5), Linear(6, 5)
    xn = rng.standard_normal((3, 6)).astype(np.float32)
    x = Tensor(xn).realize()
    made: list = []

    def structure(self, root, seed, no_grad) -> None:
        _STRUCTURE_INIT(self, root, seed, no_grad)
        made.append(self)

    with Tensor.train():
        for step in range(4):
            for p in (la.weight, la.bias, lb.weight, lb.bias):
                p.requires_grad, p.grad = True, None
            h = la(x)
            if step % 2:
                h.realize()
            loss = (h.relu() + lb(x).relu()).sum()
            seed = loss._seed_gradient(None)
            with monkeypatch.context() as m:
                m.setattr(gradient._Structure, "__init__", structure)
                fast = loss._backward_leaves(seed)[1]
            shape = made[-1]
            assert list(shape.index.values()) == list(range(len(shape.nodes))) and list(shape.index) == shape.nodes
            assert set(shape.nodes) == set(shape.root.toposort) | set(shape.seed.toposort)
            assert all(shape.index[s] < shape.index[n] for n in shape.nodes for s in n.src)
            stored = [i for i, n in enumerate(shape.nodes[: shape.n_root]) if kernelize.REALIZED_ENTRY in n.__dict__]
            assert shape.realized_at == stored and (stored or not step % 2)
            slow = _slow_leaves(loss, seed, monkeypatch)
            assert [(id(t), n) for t, n in fast] == [(id(t), n) for t, n in slow]
            loss.backward()
    ta, tb = torch.nn.Linear(6, 5), torch.nn.Linear(6, 5)
    with torch.no_grad():
        for t, ours in ((ta, la), (tb, lb)):
            t.weight.copy_(torch.from_numpy(ours.weight.numpy()))
            t.bias.copy_(torch.from_numpy(ours.bias.numpy()))
    tx = torch.from_numpy(xn)
    (ta(tx).relu() + tb(tx).relu()).sum().backward()
    for t, ours in ((ta, la), (tb, lb)):
        np.testing.assert_allclose(ours.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.bias.grad.numpy(), t.bias.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_backward_leaves_of_a_view_of_the_root_and_detached_parts(monkeypatch):
    """The structure's positions give the tensors the general path gives, in its order, where the root is a view of
    an unset tensor, a branch is detached, tensors are unset or set True, a tinygrad-style graph sets none, and a
    tensor holds the stored value of a node of the graph (realized after the graph was built)."""
    w = Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    c = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = Tensor(np.full((3, 4), 0.5, np.float32))  # unset: tinygrad's rules where no tensor is set True
    for _ in range(3):
        w.grad = v.grad = None
        d = (w * 2).detach()
        u = d * c
        s = (w * c + u).sum(1)
        h = w * 3 + 1
        inner = h.uop
        h.realize()  # h holds the stored value of a node of the graph below
        held = (Tensor(inner) * c).sum()
        for loss in (s.sum(), (v * c).sum().reshape(1, 1).reshape(()), (v.exp() + d).sum(), held):
            seed = loss._seed_gradient(None)
            fast = loss._backward_leaves(seed)[1]
            assert [(id(t), n) for t, n in fast] == [(id(t), n) for t, n in _slow_leaves(loss, seed, monkeypatch)]
            loss.backward()
        np.testing.assert_array_equal(w.grad.numpy(), c.numpy() * 4)
        np.testing.assert_allclose(v.grad.numpy(), c.numpy() + np.exp(0.5), rtol=1e-6)


def test_optimizer_replay_checks_only_reads_that_may_shift(monkeypatch):
    """A replayed Adam step's race check asks _reads_shifted only of the inputs that are not whole buffers: each
    gradient, for the two moments it updates (MLP: 26 -> 8 looks); the parameters and state are whole buffers."""
    from lazygrad import tensor as tensor_module

    _mlp_steps(2, fresh_schedules=False, seed=4)
    asked = counting_calls(monkeypatch, optim, "_reads_shifted")
    monkeypatch.setattr(tensor_module, "_reads_shifted", optim._reads_shifted)
    rng = np.random.default_rng(6)
    l1, l2 = Linear(8, 16), Linear(16, 4)
    opt = Adam(get_parameters([l1, l2]), lr=1e-2)
    x = Tensor(rng.standard_normal((5, 8)).astype(np.float32)).realize()
    with Tensor.train():
        for _ in range(2):
            opt.zero_grad()
            l2(l1(x).relu()).sum().backward()
            opt.step()
        asked[0] = 0
        opt.zero_grad()
        l2(l1(x).relu()).sum().backward()
        opt.schedule_step()
    assert asked[0] == 2 * len(opt.params)


def test_backward_finds_the_unset_tensors_over_parameters_by_structure(monkeypatch):
    """A backward whose graph has tensors set requires_grad=True gives a .grad to the unset tensors computed from them
    (tinygrad's rule): which positions of a structure hold a parameter is found on the structure (and known after its
    first backward), so no step walks the graph of such a tensor (a digits CNN's logits: ~115 nodes a step). The
    gradients stay torch's."""
    import torch

    rng = np.random.default_rng(3)
    l1, l2 = Linear(6, 11), Linear(11, 3)  # (sizes no other test uses)
    for p in get_parameters([l1, l2]):
        p.requires_grad = True
    xn, yn = rng.standard_normal((4, 6)).astype(np.float32), rng.integers(0, 3, 4)
    walked: list = []
    walk = UOp._walk_descendants

    def counting(self):
        walked.append(self)
        return walk(self)

    monkeypatch.setattr(UOp, "_walk_descendants", counting)
    w1, b1, w2, b2 = (torch.from_numpy(p.numpy()).requires_grad_() for p in (l1.weight, l1.bias, l2.weight, l2.bias))
    for step in range(3):
        h = l1(Tensor(xn)).relu()
        logits = l2(h)
        walked.clear()
        logits.sparse_categorical_crossentropy(Tensor(yn.astype(np.int32))).backward()
        assert logits.uop not in walked and h.uop not in walked
        th = torch.relu(torch.from_numpy(xn) @ w1.T + b1)
        th.retain_grad()
        tlogits = th @ w2.T + b2
        tlogits.retain_grad()
        torch.nn.functional.cross_entropy(tlogits, torch.from_numpy(yn)).backward()
        np.testing.assert_allclose(logits.grad.numpy(), tlogits.grad.numpy(), atol=1e-6)
        np.testing.assert_allclose(h.grad.numpy(), th.grad.numpy(), atol=1e-6)
        np.testing.assert_allclose(l1.weight.grad.numpy(), w1.grad.numpy(), atol=1e-6)
        for p in (l1.weight, l1.bias, l2.weight, l2.bias, w1, b1, w2, b2):
            p.grad = None


_ADD_REALIZE_CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
from test_eager_overhead import _python_calls
import numpy as np
from lazygrad import Tensor

a = Tensor(np.arange(16, dtype=np.float32)).realize()
b = Tensor(np.ones(16, np.float32)).realize()
for _ in range(4):
    (a + b).realize()
print(_python_calls(lambda: (a + b).realize()))
"""


def test_repeated_add_realize_python_calls_stay_bounded():
    """A repeated `(a + b).realize()` of 16 floats, building the graph, launching its one kernel and dropping the last
    result (its buffer freed): a bounded number of Python calls (29; 27 with a buffer's allocation and free taking the
    allocator's lock once, the launch reading its pointers inline and requires_grad's first answers inline; 22 with
    the last result's buffer and node recycled, no Buffer, node, allocation, free or death callback of them; 15 with
    the binary op's node built in one call, _broadcasted and _alu in one, and no death callback of the unset-gradient
    registry; 14 with the template of a root over buffers found in cached_instance itself; 12 with the result tensor and
    its node made with no type call (Tensor._result, ops.hash_consed) and a dying node's _dies_here and _stand_for
    work inline). Counted in a fresh process, as the MLP's step."""
    assert _calls_in_fresh_process(_ADD_REALIZE_CALLS) <= 12


def test_binary_ops_of_tensors_alike_against_torch():
    """add, sub and mul of two tensors of one dtype, shape and device build their node in one call (Tensor._binary):
    the reversed forms, a view whose base was written since it was taken, and bool tensors (sub refused, mul an AND)
    give torch's values."""
    import torch

    rng = np.random.default_rng(5)
    xn, yn = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    x, y = Tensor(xn), Tensor(yn)
    xt, yt = torch.from_numpy(xn), torch.from_numpy(yn)
    np.testing.assert_allclose(x.sub(y, True).numpy(), (yt - xt).numpy())
    np.testing.assert_allclose(x.add(y, True).numpy(), (yt + xt).numpy())
    np.testing.assert_allclose(x.mul(y, True).numpy(), (yt * xt).numpy())
    np.testing.assert_allclose((x - y).numpy(), (xt - yt).numpy())
    base, tb = Tensor(xn.copy()), xt.clone()
    v, tv = base[1], tb[1]
    base += 1
    tb += 1
    w, tw = Tensor(yn[0].copy()), yt[0]
    np.testing.assert_allclose((v * w).numpy(), (tv * tw).numpy())
    np.testing.assert_allclose((w - v).numpy(), (tw - tv).numpy())
    bn = np.array([True, False, True]), np.array([True, True, False])
    a, b = Tensor(bn[0]), Tensor(bn[1])
    np.testing.assert_array_equal((a * b).numpy(), bn[0] & bn[1])
    with pytest.raises(Exception, match="subtraction"):
        a - b


def test_backward_after_unset_registry_sweeps_fills_live_unset_tensors():
    """The unset-gradient registry keeps dead tensors' entries until a sweep: tensors made and dropped in between (ids
    reused), then a backward through a live unset tensor still fills its .grad, and a dead one's entry none."""
    import torch

    from lazygrad import tensor as tensor_module

    rng = np.random.default_rng(6)
    wn = rng.standard_normal((4, 4)).astype(np.float32)
    w = Tensor(wn, requires_grad=True)
    h = w * 2
    for i in range(3000):  # several sweeps, ids of dead tensors reused
        (h + i).exp()
    assert tensor_module._unset_limit[0] >= 1024
    (h * h).sum().backward()
    wt = torch.from_numpy(wn).requires_grad_()
    ht = wt * 2
    ht.retain_grad()
    (ht * ht).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), ht.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-6)
