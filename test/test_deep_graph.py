"""Deep and long-running graphs: no recursion limit, bounded kernels, nothing left alive step after step.

Every test runs on Python's default recursion limit (checked): a graph walk that recursed would fail here."""

import gc
import sys

import numpy as np
import pytest

from lazygrad import GlobalCounters, Tensor, TinyJit
from lazygrad.device import Buffer
from lazygrad.helpers import KERNEL_OPS, Context
from lazygrad.nn.optim import Adam
from lazygrad.uop.ops import GroupOp, UOp


@pytest.fixture(autouse=True)
def default_recursion_limit():
    assert sys.getrecursionlimit() <= 1000, "these tests must run on the default recursion limit"


def chain_reference(steps: int, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    for _ in range(steps):
        h = (h * w + 1).astype(np.float32)
    return h


def test_forward_chain_of_100k_ops():
    w, h0 = np.array([0.5, 0.25, -0.5, 0.9], np.float32), np.array([1, 2, 3, 4], np.float32)
    wt, h = Tensor(w), Tensor(h0)
    for _ in range(50_000):  # two ops a step
        h = h * wt + 1
    np.testing.assert_allclose(h.numpy(), chain_reference(50_000, w, h0), rtol=1e-5)


def test_forward_chain_with_reshapes():
    w, h0 = np.arange(1, 7, dtype=np.float32) / 8, np.ones(6, np.float32)
    wt, h, hn = Tensor(w), Tensor(h0), h0
    for i in range(5_000):
        h = h * wt + 1
        hn = hn * w + 1
        if i % 2 == 0:  # movement ops in the chain: a 2x3 view transposed and flattened back
            h = h.reshape(2, 3).permute(1, 0).reshape(6)
            hn = hn.reshape(2, 3).T.reshape(6)
    np.testing.assert_allclose(h.numpy(), hn, rtol=1e-5)


def test_backward_through_10k_chain():
    steps = 10_000
    w0, h0 = np.array([0.5, 0.25, -0.5, 0.9], np.float32), np.array([1, 2, 3, 4], np.float32)
    w = Tensor(w0, requires_grad=True)
    h = Tensor(h0)
    for _ in range(steps):
        h = h * w + 1
    h.sum().backward()
    # d h_k / d w = h_{k-1} + w * d h_{k-1} / d w
    hn, gn = h0.astype(np.float64), np.zeros(4)
    for _ in range(steps):
        hn, gn = hn * w0 + 1, hn + w0 * gn
    np.testing.assert_allclose(w.grad.numpy(), gn, rtol=1e-3)


def test_stack_and_cat_of_1000_tensors():
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal(3).astype(np.float32) for _ in range(1000)]
    ts = [Tensor(a) for a in arrs]
    np.testing.assert_array_equal(Tensor.stack(*ts).numpy(), np.stack(arrs))
    np.testing.assert_array_equal(Tensor.cat(*ts).numpy(), np.concatenate(arrs))


def alu_depth(ast: UOp) -> int:
    depth: dict[UOp, int] = {}
    for u in ast.toposort:
        depth[u] = (u.op in GroupOp.ALU) + max((depth[s] for s in u.src), default=0)
    return depth[ast]


def test_kernels_stay_under_the_cap():
    with Context(KERNEL_OPS=64):
        h = Tensor(np.ones(4, np.float32))
        for _ in range(500):
            h = h * 0.5 + 1
        sched = h.schedule()
    assert len(sched) >= 1000 // 64
    assert max(alu_depth(si.ast) for si in sched) <= 64 + 1  # +1: the store's own op may sit on the last source


def test_unrolled_tanh_rnn_backward_is_bounded_and_matches_torch():
    torch = pytest.importorskip("torch")
    steps, hidden = 200, 8
    rng = np.random.default_rng(0)
    wn = (rng.standard_normal((hidden, hidden)) * 0.3).astype(np.float32)
    xn = rng.standard_normal((steps, 2, hidden)).astype(np.float32)

    W, x = Tensor(wn, requires_grad=True), Tensor(xn)
    h = Tensor.zeros(2, hidden)
    for t in range(steps):
        h = (h @ W + x[t]).tanh()
    h.sum().backward()
    sched = W.grad.schedule()
    assert max(alu_depth(si.ast) for si in sched) <= KERNEL_OPS.value + 1
    from lazygrad.engine.realize import run_schedule

    run_schedule(sched)

    Wt, xt = torch.tensor(wn, requires_grad=True), torch.tensor(xn)
    ht = torch.zeros(2, hidden)
    for t in range(steps):
        ht = torch.tanh(ht @ Wt + xt[t])
    ht.sum().backward()
    np.testing.assert_allclose(W.grad.numpy(), Wt.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_realize_each_step_does_not_walk_the_history():
    w = Tensor(np.full(4, 0.5, np.float32), requires_grad=True)
    h = Tensor(np.ones(4, np.float32))
    walked = []
    original = UOp.toposort

    def counting(self: UOp) -> dict:
        out = original.fget(self)
        walked.append(len(out))
        return out

    for i in range(300):
        if i == 299:
            UOp.toposort = property(counting)  # the last step: what does one realize walk?
        try:
            h = (h * w + 1).realize()
        finally:
            UOp.toposort = original
    assert sum(walked) < 200, f"one realize walked {sum(walked)} nodes: it reaches back into the history"
    h.sum().backward()  # the gradient still flows through every realized step
    np.testing.assert_allclose(w.grad.numpy(), np.full(4, 4.0), rtol=1e-4)


def live_buffers() -> int:
    gc.collect()
    return sum(isinstance(o, Buffer) for o in gc.get_objects())


@pytest.mark.parametrize("jit", [False, True])
def test_adam_steps_leave_no_buffers_behind(jit: bool):
    rng = np.random.default_rng(0)
    W = Tensor(rng.standard_normal((8, 4)).astype(np.float32), requires_grad=True)
    X, Y = (
        Tensor(rng.standard_normal((16, 8)).astype(np.float32)),
        Tensor(rng.standard_normal((16, 4)).astype(np.float32)),
    )
    opt = Adam([W], lr=0.01)

    def step() -> Tensor:
        opt.zero_grad()
        loss = ((X @ W - Y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = TinyJit(step) if jit else step
    for _ in range(5):
        fn()
    before = live_buffers()
    for _ in range(50):
        fn()
    assert live_buffers() == before


@pytest.mark.parametrize("jit", [False, True])
def test_assign_realize_leaves_no_buffers_behind(jit: bool):
    t = Tensor.zeros(4).contiguous().realize()

    def bump(t: Tensor) -> None:
        t.assign(t + 1).realize()

    fn = TinyJit(bump) if jit else bump
    for _ in range(5):
        fn(t)
    before = live_buffers()
    for _ in range(200):
        fn(t)
    assert live_buffers() == before
    np.testing.assert_array_equal(t.numpy(), np.full(4, 205.0))
    GlobalCounters.reset()


def test_kernel_cap_applies_to_a_graph_structure_scheduled_before():
    """The schedule cache knew a graph's structure, not the cap it was cut under: `Context(KERNEL_OPS=)` was ignored
    for a structure realized before the block, and a structure first realized inside it kept the block's cut after."""
    from lazygrad.helpers import GlobalCounters

    def kernels_of_chain() -> int:
        h = Tensor(np.ones(4, np.float32))
        for _ in range(100):
            h = h * 0.5 + 1
        GlobalCounters.kernel_count = 0
        np.testing.assert_allclose(h.numpy(), np.full(4, 2.0), rtol=1e-6)
        return GlobalCounters.kernel_count

    alone = kernels_of_chain()
    with Context(KERNEL_OPS=32):
        capped = kernels_of_chain()
    assert capped >= 200 // 32 > alone
    assert kernels_of_chain() == alone


def test_shifted_recursion_builds_each_step_once(monkeypatch):
    """A recursion that reads the previous step through several shifts (a dynamic program over time: CTC's alpha,
    Viterbi) in one kernel: inlined, step t is rebuilt once per path of shifts to it, 2^t builds (the scheduler
    hung at 30 steps). The planner stores a node read through too many views; the kernel builds stay linear."""
    from lazygrad.schedule import kernelize

    builds = [0]
    build = kernelize._KernelBuilder._build

    def counted(self, *args):
        builds[0] += 1
        return build(self, *args)

    monkeypatch.setattr(kernelize._KernelBuilder, "_build", counted)
    rng = np.random.default_rng(0)
    for steps, limit in ((11, 3000), (60, 20000)):
        a0, e0 = rng.standard_normal((3, 13)).astype(np.float32), rng.standard_normal((steps, 3, 13)).astype(np.float32)
        a, e, ref = Tensor(a0), Tensor(e0), a0
        for t in range(1, steps):
            one, two = a.pad(((0, 0), (1, 0)), value=-np.inf)[:, :13], a.pad(((0, 0), (2, 0)), value=-np.inf)[:, :13]
            a = one.maximum(two).maximum(a) + e[t]
            pad = np.full((3, 2), -np.inf, np.float32)
            shifted = np.concatenate([pad, ref], 1)
            ref = np.maximum(np.maximum(shifted[:, 1:14], shifted[:, :13]), ref) + e0[t]
        builds[0] = 0
        sched = a.schedule()
        assert builds[0] < limit, f"{steps} steps: {builds[0]} kernel-builder steps in {len(sched)} kernels"
        from lazygrad.engine.realize import run_schedule

        run_schedule(sched)
        np.testing.assert_allclose(a.numpy(), ref, rtol=1e-6)
