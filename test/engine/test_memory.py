"""The memory planner: intermediates with disjoint lifetimes share memory; nothing a Tensor can reach is ever shared."""

import gc
import re

import numpy as np

from lazygrad import Context, GlobalCounters, Tensor
from lazygrad.device import Buffer
from lazygrad.dtype import dtypes
from lazygrad.engine import memory as memory_module
from lazygrad.engine.memory import held_only_by, plan_memory


def bufs(n: int, size: int = 256) -> list[Buffer]:
    return [Buffer("CPU", size, dtypes.float32) for _ in range(n)]


def test_disjoint_lifetimes_share_a_block():
    x, a, b, c, out = bufs(5)
    # a = f(x); b = g(a); c = h(b); out = k(c): a dies when b is made, so c can use a's memory
    items = [([a, x], (0,)), ([b, a], (0,)), ([c, b], (0,)), ([out, c], (0,))]
    del a, b, c
    mapping = plan_memory(items, keep={x, out})
    assert len(mapping) == 1
    ((planned, block),) = mapping.items()
    assert planned is items[2][0][0] and block is items[0][0][0]


def test_overlapping_lifetimes_do_not_share():
    x, a, b, out = bufs(4)
    items = [([a, x], (0,)), ([b, x], (0,)), ([out, a, b], (0,))]  # a and b are both live at the last kernel
    del a, b
    assert plan_memory(items, keep={x, out}) == {}


def test_buffers_reachable_from_outside_are_never_planned():
    x, a, b, c, out = bufs(5)
    items = [([a, x], (0,)), ([b, a], (0,)), ([c, b], (0,)), ([out, c], (0,))]
    held = [items[0][0][0], items[2][0][0]]  # something outside the list (a Tensor, a dict) holds a and c
    del a, b, c
    internal = held_only_by([bs for bs, _ in items])
    assert not any(h in internal for h in held) and items[1][0][0] in internal
    assert plan_memory(items, keep={x, out}) == {}
    del held


def test_a_count_beside_another_threads_count():
    """held_only_by in two threads at once (a TinyJit capture plans its memory without the realize lock, beside
    another thread's capture or schedule): each count's dict held one module-wide probe, whose count then read a
    reference too many, and a buffer one Tensor still held passed for internal (its memory lent to another buffer).
    The other thread's count is held open here."""
    listed = bufs(2)
    held = listed[0]  # something outside the list holds it
    other = memory_module._uses([bufs(1)])  # another thread's count, between its dict and its reads
    assert held_only_by([listed]) == {listed[1]}
    del held, other


def test_read_before_written_and_borrowed_memory_are_not_planned():
    x, a, c, out = bufs(4)
    view = Buffer("CPU", 256, dtypes.float32, external=x, external_ptr=x.ptr)  # memory it does not own
    # a is read before anything writes it: its contents come from outside the list
    items = [([view, x], (0,)), ([out, a, view], (0,)), ([c, out], (0,))]
    del a, view
    assert plan_memory(items, keep={x, out}) == {}


def test_block_size_best_fit():
    x, small, big, later, out = bufs(1, 64) + bufs(1, 64) + bufs(1, 512) + bufs(1, 60) + bufs(1, 64)
    items = [([small, x], (0,)), ([big, small], (0,)), ([later, big], (0,)), ([out, later], (0,))]
    del small, big, later
    mapping = plan_memory(items, keep={x, out})
    assert mapping == {items[2][0][0]: items[0][0][0]}  # 60 floats fit the 64-float block, not the 512 one


def chain(x: Tensor, steps: int) -> Tensor:
    for _ in range(steps):
        # each step stores a reduce and an elementwise result (contiguous: recomputing the elementwise chain in its
        # two readers moves fewer bytes, so the scheduler would not store it on its own)
        x = (x.sin().sum(1, keepdim=True) * 0.01 + x).relu().contiguous()
    return x


def chain_np(x: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        x = np.maximum(np.sin(x).sum(1, keepdims=True) * 0.01 + x, 0)
    return x


def test_schedule_shares_intermediates_and_lowers_the_peak(capsys):
    xn = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    x = Tensor(xn).realize()
    out_bytes = xn.nbytes
    # other tests' garbage freed by a collection inside the measurement would show as memory this one gave back
    gc.collect()
    gc.disable()
    try:
        with Context(DEBUG=1):
            GlobalCounters.reset()
            base = GlobalCounters.mem_used
            out = chain(x, 6).realize()
            peak = GlobalCounters.mem_peak - base
            used = GlobalCounters.mem_used - base
    finally:
        gc.enable()
    found = re.search(r"memory planner: ([\d.]+) MB -> ([\d.]+) MB", capsys.readouterr().out)
    before, after = float(found[1]), float(found[2])
    assert after < before
    np.testing.assert_allclose(out.numpy(), chain_np(xn, 6), rtol=1e-4)
    # the full-size intermediates ping-pong between two blocks; the small column sums may each keep their own
    assert peak <= 2 * xn.nbytes + 6 * 128 * 4 + out_bytes
    assert peak < before * 1e6 + out_bytes
    assert used >= out_bytes  # the output stays allocated


def test_intermediate_held_by_a_tensor_keeps_its_memory():
    xn = np.random.default_rng(1).random((64, 64), dtype=np.float32)
    x = Tensor(xn).realize()
    kept = (x.sin().sum(1, keepdim=True) + x).relu()  # an intermediate of `out` that the user holds
    out = chain(kept, 4)
    out.realize()
    later = chain(x * 2, 4).realize()  # more planned schedules run after; none may reuse kept's memory
    expect_kept = np.maximum(np.sin(xn).sum(1, keepdims=True) + xn, 0)
    np.testing.assert_allclose(kept.numpy(), expect_kept, rtol=1e-5)
    np.testing.assert_allclose(out.numpy(), chain_np(expect_kept, 4), rtol=1e-4)
    np.testing.assert_allclose(later.numpy(), chain_np(xn * 2, 4), rtol=1e-4)


def test_mem_used_and_peak():
    GlobalCounters.reset()
    base = GlobalCounters.mem_used
    assert GlobalCounters.mem_peak == base
    b = Buffer("CPU", 1000, dtypes.float32).ensure_allocated()
    assert GlobalCounters.mem_used == base + 4000 and GlobalCounters.mem_peak == base + 4000
    del b
    assert GlobalCounters.mem_used == base and GlobalCounters.mem_peak == base + 4000


def test_realized_tensors_with_a_gradient_path_are_freed():
    # each realized tensor that kept its graph for backward (and each .numpy() copy of one) used to stay cached
    # forever: the cache's value and the gradient-path map's key held each other
    import gc

    from lazygrad.tensor import _lazy_origin, _realized

    w = Tensor(np.ones((4, 4), np.float32), requires_grad=True).realize()
    gc.collect()
    before = (len(_realized), len(_lazy_origin))
    for i in range(20):
        out = (Tensor(np.full((2, 4), i, np.float32)) @ w).relu().contiguous().realize()
        np.testing.assert_allclose(out.numpy(), np.full((2, 4), 4.0 * i))
        del out
    gc.collect()
    assert (len(_realized), len(_lazy_origin)) == before
    # a realized intermediate still carries the gradient to the weight
    h = (Tensor(np.ones((2, 4), np.float32)) @ w).contiguous().realize()
    h.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full((4, 4), 2.0))
