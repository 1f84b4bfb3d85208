"""Fusion decisions, checked by counting kernels and bytes, and results checked against numpy."""

import gc

import numpy as np
import pytest
import torch

import lazygrad.tensor as tensor_module
from lazygrad import GlobalCounters, Tensor
from lazygrad.uop.ops import Ops, UOp


def kernels_for(*ts: Tensor) -> int:
    GlobalCounters.reset()
    Tensor.realize(*ts)
    return GlobalCounters.kernel_count


def realized(*shape: int, seed: int = 0) -> tuple[Tensor, np.ndarray]:
    arr = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return Tensor(arr).realize(), arr


def test_elementwise_chain_is_one_kernel():
    (x, xn), (y, yn) = realized(64, 64), realized(64, 64, seed=1)
    out = ((x + y) * 2 - x).exp().relu() / (y.abs() + 1)
    assert kernels_for(out) == 1
    np.testing.assert_allclose(out.numpy(), np.maximum(np.exp((xn + yn) * 2 - xn), 0) / (np.abs(yn) + 1), rtol=1e-5)


def test_broadcast_matmul_is_one_kernel():
    (a, an), (b, bn) = realized(16, 32), realized(32, 8, seed=1)
    out = (a.reshape(16, 1, 32) * b.T.reshape(1, 8, 32)).sum(2)
    assert kernels_for(out) == 1
    np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-4, atol=1e-5)


def test_sub_max_is_at_most_two_kernels():
    x, xn = realized(8, 33)
    out = x - x.max(1, keepdim=True)
    assert kernels_for(out) <= 2
    np.testing.assert_allclose(out.numpy(), xn - xn.max(1, keepdims=True))


def test_multi_output_shares_one_kernel():
    a, b, c, d = [realized(100, seed=i)[0] for i in range(4)]
    out1, out2 = a + b + c, a + b + d
    assert kernels_for(out1, out2) == 1
    np.testing.assert_allclose(out1.numpy(), a.numpy() + b.numpy() + c.numpy())
    np.testing.assert_allclose(out2.numpy(), a.numpy() + b.numpy() + d.numpy())


def test_reduce_epilogue_fuses():
    x, xn = realized(16, 40)
    out = (x * 3).sum(1).abs().sqrt().exp()
    assert kernels_for(out) == 1
    np.testing.assert_allclose(out.numpy(), np.exp(np.sqrt(np.abs((xn * 3).sum(1)))), rtol=1e-4)


def test_two_reduces_same_axes_merge():
    x, xn = realized(12, 20)
    s, m = x.sum(1), x.max(1)
    assert kernels_for(s, m) == 1
    np.testing.assert_allclose(s.numpy(), xn.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.numpy(), xn.max(1))


def test_products_of_one_input_are_not_merged_into_one_register_tiled_kernel():
    """q, k and v of one input (three linears realized together) stay three kernels: merged, each product got its own
    register tile in one kernel and their accumulators outnumbered the registers (83 GFLOPS against 175 apart, 1408 x
    384 x 384 on two AVX2 cores). Matrix-vector products (one output axis of 8 or more) and plain reduces still
    merge."""
    (x, xn), (v, vn) = realized(64, 48), realized(48)
    ws = [realized(48, 32, seed=i) for i in range(1, 4)]
    outs = [x @ w for w, _ in ws]
    assert kernels_for(*outs) == 3
    for out, (_, wn) in zip(outs, ws):
        np.testing.assert_allclose(out.numpy(), xn @ wn, rtol=1e-4, atol=1e-4)
    mats = [realized(32, 48, seed=i) for i in range(4, 7)]
    mvs = [m @ v for m, _ in mats]
    assert kernels_for(*mvs) == 1  # matrix-vector products: one output axis
    for out, (_, mn) in zip(mvs, mats):
        np.testing.assert_allclose(out.numpy(), mn @ vn, rtol=1e-4, atol=1e-4)


def test_dependent_kernels_do_not_merge():
    x, xn = realized(10, 10)
    y = x.sum(1, keepdim=True)
    z = (x / y).sum(1)
    assert kernels_for(z) == 2
    np.testing.assert_allclose(z.numpy(), (xn / xn.sum(1, keepdims=True)).sum(1), rtol=1e-4)


def test_shared_intermediate_recomputed_when_cheaper():
    # a + b read by two kernels of different shapes: storing it would cost more bytes than reading a and b twice
    (a, an), (b, bn) = realized(64), realized(64, seed=1)
    t = a + b
    out1 = t.sum()
    out2 = t * 2
    GlobalCounters.reset()
    Tensor.realize(out1, out2)
    assert GlobalCounters.kernel_count == 2
    np.testing.assert_allclose(out1.numpy(), (an + bn).sum(), rtol=1e-5)
    np.testing.assert_allclose(out2.numpy(), (an + bn) * 2)


def test_shared_intermediate_stored_when_cheaper():
    # an expensive-to-read intermediate (4 inputs) used by 3 kernels is stored once instead of re-read 3 times
    xs = [realized(32, 32, seed=i)[0] for i in range(4)]
    t = xs[0] + xs[1] + xs[2] + xs[3]
    outs = [t.sum(0), t.sum(1), t.max(0)]
    sched = Tensor.schedule(*outs)
    stored_t = [si for si in sched if len(si.bufs) == 5]
    assert len(stored_t) == 1, "the 4-input sum is stored by one kernel"


def test_movement_ops_make_no_kernels():
    x, xn = realized(4, 6)
    y = x.T.reshape(2, 12).flip(1)[:, 1::3].pad(((1, 1), (0, 2)))
    assert len(y.schedule()) == 0  # a view of a realized buffer stays a view
    out = y + 0
    assert kernels_for(out) == 1
    np.testing.assert_allclose(out.numpy(), np.pad(xn.T.reshape(2, 12)[:, ::-1][:, 1::3], ((1, 1), (0, 2))))


def test_pad_of_unsafe_op_is_masked():
    x, xn = realized(5)
    out = x.exp().pad(((2, 3),)) + 1
    np.testing.assert_allclose(out.numpy(), np.pad(np.exp(xn), (2, 3)) + 1, rtol=1e-6)


# every elementwise op a Tensor method reaches, as (lazygrad, torch) pairs over float inputs a, b > 0 and ints i, j > 0
PADDED_OPS = {
    "cos": (lambda a, b, i, j: a.cos(), None),
    "sin": (lambda a, b, i, j: a.sin(), None),
    "exp": (lambda a, b, i, j: a.exp(), None),
    "log": (lambda a, b, i, j: a.log(), None),
    "sqrt": (lambda a, b, i, j: a.sqrt(), None),
    "rsqrt": (lambda a, b, i, j: a.rsqrt(), None),
    "reciprocal": (lambda a, b, i, j: a.reciprocal(), None),
    "neg": (lambda a, b, i, j: -a, None),
    "trunc": (lambda a, b, i, j: a.trunc(), None),
    "sigmoid": (lambda a, b, i, j: a.sigmoid(), None),
    "a*-2": (lambda a, b, i, j: a * -2, None),
    "a-b": (lambda a, b, i, j: a - b, None),
    "a/b": (lambda a, b, i, j: a / b, None),
    "fmod": (lambda a, b, i, j: a.fmod(b), None),
    "a%b": (lambda a, b, i, j: a % b, None),
    "a**b": (lambda a, b, i, j: a**b, None),
    "maximum": (lambda a, b, i, j: a.maximum(b), None),
    "a==b": (lambda a, b, i, j: a == b, None),
    "a<b": (lambda a, b, i, j: a < b, None),
    "a!=b": (lambda a, b, i, j: a != b, None),
    "where": (lambda a, b, i, j: (a < b).where(a, b), lambda a, b, i, j: torch.where(a < b, a, b)),
    "i//j": (lambda a, b, i, j: i // j, None),
    "i%j": (lambda a, b, i, j: i % j, None),
    "-i": (lambda a, b, i, j: -i, None),
    "i^j": (lambda a, b, i, j: i ^ j, None),
    "~i": (lambda a, b, i, j: ~i, None),
    "i<<2": (lambda a, b, i, j: i << 2, None),
    "cast": (lambda a, b, i, j: a.int(), None),
}


@pytest.mark.parametrize("name", list(PADDED_OPS))
def test_every_elementwise_op_under_a_pad_shows_plus_zero_there(name):
    # a pad's zeros are +0: an op whose value at 0 inputs is not +0 (cos 1, fmod NaN, -0 from a negation) must be
    # masked as a whole, not only at its loads
    fn, tfn = PADDED_OPS[name]
    rng = np.random.default_rng(0)
    an, bn = rng.uniform(0.5, 2, 5).astype(np.float32), rng.uniform(0.5, 2, 5).astype(np.float32)
    inn, jn = rng.integers(1, 9, 5).astype(np.int32), rng.integers(1, 9, 5).astype(np.int32)
    ours = fn(*(Tensor(x) for x in (an, bn, inn, jn))).pad(((2, 1),))
    theirs = torch.nn.functional.pad((tfn or fn)(*(torch.tensor(x) for x in (an, bn, inn, jn))), (2, 1))
    got, want = ours.numpy(), theirs.numpy()
    np.testing.assert_array_equal(got[[0, 1, -1]], want[[0, 1, -1]])  # the pad: exactly torch's zeros
    np.testing.assert_allclose(got, want, rtol=1e-6)  # (transcendentals may differ in the last bit)
    if got.dtype.kind == "f":  # and the zeros' signs (1/x would show them as +-inf)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_array_equal(ours.reciprocal().numpy()[[0, 1, -1]], 1 / want[[0, 1, -1]])


def test_realized_intermediate_is_reused():
    x, xn = realized(8, 8)
    y = (x * 2).realize()
    GlobalCounters.reset()
    z = (y + 1).realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(z.numpy(), xn * 2 + 1)


def test_schedule_item_buffers_outputs_first():
    (a, _), (b, _) = realized(10), realized(10, seed=1)
    sched = (a + b).schedule()
    assert len(sched) == 1
    si = sched[0]
    assert len(si.outputs) == 1 and si.outputs[0].size == 10
    assert {id(x) for x in si.inputs} == {id(a.uop.base.arg), id(b.uop.base.arg)}
    assert si.ast.op is Ops.SINK


def test_empty_output_launches_nothing():
    x = Tensor.zeros(0, 4)
    assert kernels_for((x + 1).contiguous()) == 0
    assert (x + 1).numpy().shape == (0, 4)


@pytest.mark.parametrize("shape,axis", [((3, 0), 1), ((0, 5), 0)])
def test_sum_over_empty_axis_is_zero(shape, axis):
    x = Tensor.zeros(*shape)
    np.testing.assert_array_equal(x.sum(axis).numpy(), np.zeros(shape).sum(axis))


def test_bound_variable_is_a_kernel_argument():
    from lazygrad.engine.realize import get_runner

    x, xn = realized(16)
    v = UOp.variable("step", 0, 100)
    srcs = []
    for val in (3, 42):
        out = x * Tensor(v.bind(val)).cast(x.dtype)
        sched, var_vals = out.schedule_with_vars()
        assert var_vals == {v: val}
        srcs.append(get_runner("CPU", sched[0].ast).spec.src)
        from lazygrad.engine.realize import run_schedule

        run_schedule(sched, var_vals)
        np.testing.assert_allclose(out.numpy(), xn * val, rtol=1e-6)
    assert srcs[0] == srcs[1] and "const int step" in srcs[0]


@pytest.mark.parametrize("limit", [3, 6, 31])
def test_kernels_fit_the_devices_buffer_limit(monkeypatch, limit):
    from lazygrad import Device

    monkeypatch.setattr(Device["CPU"].renderer, "max_buffers", limit)
    parts = [realized(7, 3, seed=i) for i in range(40)]
    cat = Tensor.cat(*[t for t, _ in parts])
    chain = parts[0][0]
    for t, _ in parts[1:]:
        chain = chain * 0.5 + t.sum(1, keepdim=True)  # the reduces stay inside the kernels that read them
    sched = cat.schedule(chain)
    assert all(len(si.bufs) <= limit for si in sched), [len(si.bufs) for si in sched]
    from lazygrad.engine.realize import run_schedule

    run_schedule(sched)
    np.testing.assert_array_equal(cat.numpy(), np.concatenate([a for _, a in parts]))
    want = parts[0][1]
    for _, a in parts[1:]:
        want = want * 0.5 + a.sum(1, keepdims=True)
    np.testing.assert_allclose(chain.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("device, n", [("CPU", 1100), ("PYTHON", 600)])
def test_more_inputs_than_a_kernel_takes(device, n):
    # CPU kernels are called through ctypes (at most 1024 arguments), PYTHON models CUDA's 4 KB of parameters: a
    # stack and a pairwise sum of more tensors than that are split into kernels within the device's declared limit
    from lazygrad import Device

    arrs = [np.random.default_rng(i).standard_normal(3).astype(np.float32) for i in range(n)]
    ts = [Tensor(a, device=device).realize() for a in arrs]
    stacked = Tensor.stack(*ts)
    pairs = ts
    while len(pairs) > 1:
        pairs = [pairs[i] + pairs[i + 1] if i + 1 < len(pairs) else pairs[i] for i in range(0, len(pairs), 2)]
    total, col = stacked.sum(), stacked.sum(0)
    sched = total.schedule(col, pairs[0])
    limit = Device[device].renderer.max_buffers
    assert limit is not None and all(len(si.bufs) <= limit for si in sched)
    from lazygrad.engine.realize import run_schedule

    run_schedule(sched)
    np.testing.assert_allclose(total.numpy(), np.stack(arrs).sum(), rtol=1e-4)
    np.testing.assert_allclose(col.numpy(), np.stack(arrs).sum(0), rtol=1e-4)
    np.testing.assert_allclose(pairs[0].numpy(), np.stack(arrs).sum(0), rtol=1e-4)


def test_epilogue_reading_a_reshaped_reduce_of_another_loop():
    # a SwiGLU's gradient: one epilogue reads two matmuls whose reduces run over different loops, one of them
    # through a reshape; they cannot share a kernel
    import torch

    (x, xn), (w1, w1n), (w3, w3n), (w2, w2n) = (
        realized(4, 8),
        realized(8, 16, seed=1),
        realized(8, 16, seed=2),
        realized(16, 8, seed=3),
    )
    w1.requires_grad = True
    (g,) = (((x @ w1).silu() * (x @ w3)) @ w2).sum().gradient(w1)
    tw1 = torch.tensor(w1n, requires_grad=True)
    tx = torch.tensor(xn)
    ((torch.nn.functional.silu(tx @ tw1) * (tx @ torch.tensor(w3n))) @ torch.tensor(w2n)).sum().backward()
    np.testing.assert_allclose(g.numpy(), tw1.grad.numpy(), rtol=1e-4, atol=1e-4)


# *** the schedule cache ***


def _scheduled_fresh(*ts: Tensor) -> tuple[list, bool]:
    from lazygrad.schedule import kernelize

    before = len(kernelize._templates), set(kernelize._templates)
    sched = ts[0].schedule(*ts[1:])
    return sched, set(kernelize._templates) == before[1]


def test_same_graph_over_new_buffers_reuses_the_schedule():
    from lazygrad.engine.realize import run_schedule

    outs = []
    for seed in range(3):
        (x, xn), (y, yn) = realized(5, 7, seed=seed), realized(7, seed=seed + 10)
        out = ((x + y).relu() * 2).sum(1)
        sched, hit = _scheduled_fresh(out)
        assert hit == (seed > 0)
        run_schedule(sched)
        np.testing.assert_allclose(out.numpy(), (np.maximum(xn + yn, 0) * 2).sum(1), rtol=1e-5)
        outs.append(sched)
    assert outs[1][0].ast is outs[2][0].ast  # the same kernel, so the same compiled program
    assert outs[1][0].bufs[0] is not outs[2][0].bufs[0]  # each call computes into its own buffer


def test_cached_schedule_is_not_shared_across_different_constants_or_aliasing():
    (x, xn), (y, yn) = realized(4, 4, seed=20), realized(4, 4, seed=21)
    a = (x * 3 + y).numpy()
    _, hit = _scheduled_fresh(x * 4 + y)
    assert not hit
    np.testing.assert_allclose((x * 4 + y).numpy(), xn * 4 + yn, rtol=1e-6)
    np.testing.assert_allclose((x * 3 + x).numpy(), xn * 4, rtol=1e-6)  # the same buffer twice is another graph
    np.testing.assert_allclose(a, xn * 3 + yn, rtol=1e-6)


def test_cached_schedule_binds_each_calls_variable_values():
    from lazygrad import Variable

    x, xn = realized(10, seed=30)
    v = Variable("k", 0, 10)
    hits = []
    from lazygrad.engine.realize import run_schedule
    from lazygrad.schedule import kernelize

    for k in (3, 7, 5):
        out = x * Tensor(v.bind(k)).cast(x.dtype)
        before = set(kernelize._templates)
        sched, var_vals = out.schedule_with_vars()
        hits.append(set(kernelize._templates) == before)
        assert var_vals == {v: k}
        run_schedule(sched, var_vals)
        np.testing.assert_allclose(out.numpy(), xn * k, rtol=1e-6)
    assert hits[1:] == [True, True]  # one schedule (and kernel) for every value


def test_cached_schedule_with_in_place_updates():
    # an optimizer-like step repeated: each call writes into the same buffers through fresh aliases
    w, wn = realized(6, seed=40)
    wn = wn.copy()  # w is a view of wn's memory: the writes below change it too
    m = Tensor.zeros(6).contiguous().realize()
    mn = np.zeros(6, np.float32)
    for step in range(4):
        g = Tensor(np.full(6, step + 1, np.float32))
        m.assign(m * 0.9 + g)
        w.assign(w - m * 0.1)
        Tensor.realize(m, w)
        mn = mn * 0.9 + (step + 1)
        wn = wn - mn * 0.1
        np.testing.assert_allclose(w.numpy(), wn, rtol=1e-5)
        np.testing.assert_allclose(m.numpy(), mn, rtol=1e-5)


def test_in_place_writes_ask_each_stored_leaf_its_memory_once(monkeypatch):
    # decision 1b (old reads stored before a write) walks, per written memory, only what reads or writes it: an
    # optimizer step writes a memory per parameter and moment, and a walk of the whole graph per memory (each leaf
    # asked its memory once per written memory: 304 asks here) was most of the schedule's time in a cold Adam step
    import lazygrad.schedule.kernelize as kernelize

    asks = []
    leaf_memory = kernelize._leaf_memory
    monkeypatch.setattr(kernelize, "_leaf_memory", lambda *a: asks.append(a) or leaf_memory(*a))
    bufs = [Tensor(np.full(4, i, np.float32)).contiguous().realize() for i in range(16)]
    old = bufs[0] * 2  # read before the write into its memory: stored first
    for b in bufs:
        b.assign(b * 0.5 + 1)
    Tensor.realize(old, *bufs)
    assert len(asks) <= 2 * len(bufs)
    np.testing.assert_equal(old.numpy(), np.zeros(4, np.float32))
    for i, b in enumerate(bufs):
        np.testing.assert_equal(b.numpy(), np.full(4, i * 0.5 + 1, np.float32))


def test_reduces_of_different_loops_behind_an_epilogue_are_not_fused_together():
    # the gradient of realized outputs sums reduces of several shapes, each behind its own multiply: two of them were
    # fused into one kernel (an assertion in the kernel builder); each reduce must keep its own loop
    xn = np.random.default_rng(0).standard_normal((1, 1)).astype(np.float32)
    x, xt = Tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
    outs = [x.stack(x, dim=-1), x.repeat(2, 1), x.repeat_interleave(2, -1), x.masked_fill(x > 0, 1.5)]
    touts = [torch.stack([xt, xt], -1), xt.repeat(2, 1), xt.repeat_interleave(2, -1), xt.masked_fill(xt > 0, 1.5)]
    for o in outs:
        o.realize()
    rng = np.random.default_rng(0)
    loss, tloss = None, None
    for o, t in zip(outs, touts):
        w = rng.uniform(-1, 1, size=o.shape).astype(np.float32)
        lo, lt = (o * Tensor(w)).sum(), (t * torch.from_numpy(w)).sum()
        loss, tloss = (lo, lt) if loss is None else (loss + lo, tloss + lt)
    (g,) = loss.gradient(x)
    g.realize()  # the gradient itself as the kernel's root (.numpy() alone would add a copy as the root)
    tloss.backward()
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_long_expression_under_a_pad_is_masked_once_not_each_constant():
    # threefry under the pad that joins its two halves: every shift amount and key word was masked by the pad, which
    # made gcc spend 0.4 s on one kernel; the expression is now masked once (its loads keep their own masks)
    (si,) = Tensor.rand(9, 16).schedule()[-1:]
    consts = [u for u in si.ast.toposort if u.op is Ops.CONST and u.src and u.src[0].arg.has_mask]
    assert len(consts) < 4, f"{len(consts)} masked constants"
    Tensor.manual_seed(3)
    a = Tensor.rand(9, 16).numpy()
    Tensor.manual_seed(3)
    b = Tensor.rand(9, 16).contiguous().numpy()
    np.testing.assert_array_equal(a, b)
    assert 0 <= a.min() and a.max() < 1 and 0.4 < a.mean() < 0.6


def test_reduce_with_epilogue_ending_in_contiguous_is_one_kernel():
    (a, an), (b, bn) = realized(8, 16), realized(16, 4, seed=1)
    assert kernels_for((a @ b).contiguous()) == 1
    out = (a @ b).relu().contiguous()
    assert kernels_for(out) == 1
    np.testing.assert_allclose(out.numpy(), np.maximum(an @ bn, 0), rtol=1e-5, atol=1e-5)
    total = (a @ b).relu().contiguous().sum()  # the contiguous is still stored: the sum is a kernel of its own
    assert kernels_for(total) == 2
    np.testing.assert_allclose(total.numpy(), np.maximum(an @ bn, 0).sum(), rtol=1e-4)


def test_a_reduce_asked_for_beside_its_contiguous_copy_is_stored_too():
    # Tensor.realize(b, b.contiguous()): the reduce fuses into its copy's kernel, yet b is an output and holds a buffer
    (a, an), (b, bn) = realized(8, 16), realized(16, 4, seed=1)
    m = a @ b
    c = m.contiguous()
    Tensor.realize(m, c)
    assert m.uop.base.op is Ops.BUFFER and c.uop.base.op is Ops.BUFFER
    np.testing.assert_allclose(m.numpy(), an @ bn, rtol=1e-5, atol=1e-5)


def test_function_of_indices_under_an_expand_is_inlined_into_a_reduce():
    # a per-index shift read by a reduce through an expand: computed from the loop index, not stored and loaded
    x = Tensor(np.arange(16 * 3, dtype=np.int32).reshape(3, 16)).realize()
    shift = Tensor.arange(2).reshape(2, 1, 1) * 4
    out = ((x.unsqueeze(0) >> shift) & 15).sum(-1)
    assert kernels_for(out) == 1
    xn = np.arange(16 * 3).reshape(3, 16)
    np.testing.assert_array_equal(out.numpy(), np.stack([(xn >> s) & 15 for s in (0, 4)]).sum(-1))


def test_expanded_input_of_a_second_reduce_behind_a_stored_node_is_not_stored_again():
    # the block sums of a matrix-vector product scaled by x's per-block terms, stored, then summed per row: the
    # per-block term (an ALU op on x's sums) belongs to the first kernel, not to a kernel of its own
    (w, wn), (x, xn) = realized(6, 4, 8), realized(4, 8, seed=1)
    xs = x.sum(-1)
    blocks = ((w * x).sum(-1) - xs * 3).contiguous()
    out = blocks.sum(-1)
    assert kernels_for(out) == 3  # x's sums, the blocks, the rows
    np.testing.assert_allclose(out.numpy(), ((wn * xn).sum(-1) - xn.sum(-1) * 3).sum(-1), rtol=1e-5, atol=1e-5)


def test_input_minus_a_broadcast_statistic_is_recomputed_in_each_reader():
    """(x - mean) * scale read by several kernels (a batch norm's forward and backward): inlined, each reads x (the
    statistics are a few bytes, read once per kernel); storing it would write and re-read a copy of x. A broadcast
    input costs its own bytes in the decision, not those of the shape it is broadcast to."""
    (x, xn), (m, mn), (s, sn) = realized(64, 16, 8, 8), realized(1, 16, 1, 1, seed=1), realized(1, 16, 1, 1, seed=2)
    c = (x - m) * s
    outs = [c.square().sum((0, 2, 3)), (c * 3).relu(), c.max((0, 2, 3))]
    GlobalCounters.reset()
    Tensor.realize(*outs)
    size = 64 * 16 * 8 * 8 * 4
    assert GlobalCounters.global_mem < 4.1 * size  # x read by the 3 readers, the relu written
    cn = (xn - mn) * sn
    np.testing.assert_allclose(outs[0].numpy(), (cn**2).sum((0, 2, 3)), rtol=1e-4)
    np.testing.assert_allclose(outs[1].numpy(), np.maximum(cn * 3, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[2].numpy(), cn.max((0, 2, 3)), rtol=1e-5, atol=1e-6)


def test_sgd_update_writes_the_weight_in_place():
    """Decision 1c: an SGD step's update of a weight the forward read transposed is computed straight into the
    weight (the frontend made the value contiguous, not knowing the transposed read is another kernel's)."""
    from lazygrad import nn

    rng = np.random.default_rng(0)
    xn, wn, bn = rng.standard_normal((16, 96), np.float32), rng.standard_normal((64, 96), np.float32), np.zeros(64)
    layer = nn.Linear(96, 64)
    layer.weight.assign(Tensor(wn)).realize()
    layer.bias.assign(Tensor(bn.astype(np.float32))).realize()
    opt = nn.optim.SGD(nn.state.get_parameters(layer), lr=0.1)
    with Tensor.train():
        opt.zero_grad()
        layer(Tensor(xn)).relu().sum().backward()
        sched = Tensor.schedule(*opt.schedule_step())
    # forward, weight gradient, bias gradient, the two updates: no copy kernel
    assert len(sched) == 5
    assert not [si for si in sched if si.ast.op is Ops.SINK and all(st.src[2].op is Ops.LOAD for st in si.ast.src)]
    from lazygrad.engine.realize import run_schedule

    run_schedule(sched)
    tx, tw = torch.tensor(xn), torch.tensor(wn, requires_grad=True)
    tb = torch.zeros(64, requires_grad=True)
    torch.nn.functional.linear(tx, tw, tb).relu().sum().backward()
    np.testing.assert_allclose(layer.weight.numpy(), (tw - 0.1 * tw.grad).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.bias.numpy(), (tb - 0.1 * tb.grad).detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "update",
    [
        lambda w: w.T + 1,  # read transposed inline: the write would race with the read
        lambda w: w.flip(0) * 2,
        lambda w: w - w.sum(0, keepdim=True),  # a fused reduce over the written memory
    ],
)
def test_assign_reading_its_memory_elsewhere_keeps_its_copy(update):
    wn = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    w = Tensor(wn).realize()
    ref = update(torch.tensor(wn)).numpy()
    w.assign(update(w)).realize()
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_digits_cnn_training_step_bytes():
    """Bytes the kernels of one digits-CNN training step move (batch 64, Adam; each buffer counted once per
    kernel): 13.15 MB when a broadcast statistic counted at full size made x - mean and its products stored."""
    from lazygrad import nn
    from lazygrad.examples.digits import DigitsCNN, make_step

    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((64, 1, 8, 8)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 64).astype(np.int32)).realize()
    model = DigitsCNN()
    step = make_step(model, nn.optim.Adam(nn.state.get_parameters(model), lr=3e-3), jit=False)
    step(x, y)[0].item()
    GlobalCounters.reset()
    step(x, y)[0].item()
    assert GlobalCounters.global_mem <= 10.6e6, GlobalCounters.global_mem
    assert GlobalCounters.kernel_count <= 50


def test_second_write_reading_the_first_shifted_keeps_its_copy():
    """x += 1, then x[1:] = x[:2]: the second value reads the first write's result at other positions."""
    x, rx = Tensor([0.5, 1.5, 2.5]).contiguous().realize(), torch.tensor([0.5, 1.5, 2.5])
    x.assign(x + 1)
    x[1:] = x[:2] + 0
    rx += 1
    rx[1:] = rx[:2].clone()
    np.testing.assert_allclose(x.numpy(), rx.numpy())


def test_a_realized_value_held_weakly_stays_a_leaf_while_a_schedule_is_made(monkeypatch):
    """t = x * 2 realized keeps its graph as its gradient path, and the scheduler's entry for x * 2 holds t's memory
    weakly. A schedule reading x * 2 while t died in the middle of it (a collection freeing t) lost the leaf between
    deciding the kernels and sizing them: a KeyError from cap_kernel_size. The planner holds the values it met."""
    from lazygrad.schedule import kernelize

    x = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
    held = [x * 2]
    held[0].realize()
    cap = kernelize._Planner.cap_kernel_size

    node = (x * 2).uop  # the hash-consed node of t's graph, realized: the scheduler's entry for it
    assert tensor_module._realized.get(node) is not None

    def dies_meanwhile(self, n):
        died.append(bool(held))
        held.clear()  # the last holder of t's memory goes mid-schedule
        gc.collect()
        still.append(tensor_module._realized.get(node) is not None)  # the planner holds the value it met
        return cap(self, n)

    died: list[bool] = []
    still: list[bool] = []
    monkeypatch.setattr(kernelize._Planner, "cap_kernel_size", dies_meanwhile)
    np.testing.assert_allclose((x * 2 + 1).exp2().numpy(), np.exp2(np.arange(4) * 2 + 1), rtol=1e-6)
    assert died == [True] and still == [True]


def _written_part(memory: Tensor, part: tuple, value: Tensor) -> Tensor:
    """An in-place write into the part of `memory` a shrink selects (as llama's decode step writes its cache rows)."""
    return Tensor(UOp(Ops.ASSIGN, memory.dtype, (memory.shrink(part).uop, value.uop)))


def _run_counting_stores(t: Tensor) -> list[int]:
    """Runs t's schedule; the elements each of its STOREs writes (the size of the store's view)."""
    from lazygrad.engine.realize import run_schedule
    from lazygrad.helpers import prod

    sched, var_vals = t.schedule_with_vars()
    run_schedule(sched, var_vals)
    return [prod(u.src[1].arg.shape) for si in sched for u in si.ast.toposort if u.op is Ops.STORE]


def test_write_into_a_shrunk_view_stores_that_part_only():
    # a KV cache's new row at a bound position: one kernel stores the row (the rest of the memory is neither read
    # nor written), at every position of the same compiled kernel
    cache, cn = realized(1, 3, 16, 8)
    pos = UOp.variable("pos", 0, 15)
    for p in (0, 5, 15):
        row, rn = realized(1, 3, 1, 8, seed=p + 1)
        at = pos.bind(p)
        write = _written_part(cache, (None, None, (at, at + 1), None), row * 2)
        assert _run_counting_stores(write) == [3 * 8]
        cn[:, :, p : p + 1] = rn * 2
        np.testing.assert_array_equal(cache.numpy(), cn)


def test_write_into_a_shrunk_view_replays_at_new_positions():
    from lazygrad.engine.jit import TinyJit

    cache, cn = realized(2, 16, 4)
    pos = UOp.variable("pos", 0, 14)

    @TinyJit
    def step(at: UOp, x: Tensor) -> Tensor:
        Tensor.realize(_written_part(cache, (None, (at, at + 2), None), x + 1))
        return (cache * 1).sum(1).realize()

    for p in (3, 0, 7, 14, 1):
        x, xn = realized(2, 2, 4, seed=p)
        got = step(pos.bind(p), x)
        cn[:, p : p + 2] = xn + 1
        np.testing.assert_allclose(got.numpy(), cn.sum(1), rtol=1e-6)
        np.testing.assert_array_equal(cache.numpy(), cn)
    assert step.captured is not None


@pytest.mark.parametrize("form", ["box", "other_buffer", "computed_mask", "whole"])
def test_a_write_of_where_into_its_own_memory_stores_the_box_only_when_the_rest_is_unchanged(form):
    # where(padded True, new, target) leaves the target as it is outside the box: only the box is stored. Another
    # else-branch, or a mask that is not one box of True, needs every element written
    t, tn = realized(8, 16)
    other, on = realized(8, 16, seed=2)
    new, nn = realized(2, 16, seed=3)
    box = Tensor.full((2, 16), True).pad(((3, 3), (0, 0)))
    boxn = np.zeros((8, 16), bool)
    boxn[3:5] = True
    if form == "computed_mask":
        box, boxn = (Tensor.arange(8).reshape(8, 1) < 2).expand(8, 16), np.arange(8)[:, None] < 2
    if form == "whole":
        box, boxn = Tensor.full((8, 16), True), np.ones((8, 16), bool)
    rest, restn = (other, on) if form == "other_buffer" else (t, tn)
    t.assign(box.where(new.pad(((3, 3), (0, 0))), rest))
    want = np.where(boxn, np.pad(nn, ((3, 3), (0, 0))), restn)
    assert _run_counting_stores(t) == [2 * 16 if form == "box" else 8 * 16]
    np.testing.assert_array_equal(t.numpy(), want)


def test_relu_and_hardtanh_kernels_hold_torchs_value_alone():
    """relu and hardtanh build an outer where for their gradient's mask and an inner one over a detached x for the value
    (a zero keeps its sign); their kernel computes only the inner: relu one compare and one select (x < 0 ? 0 : x, where
    x <= 0 was two compares, an or and a select), hardtanh two of each."""
    from lazygrad import Context, Device
    from lazygrad.codegen import get_program
    from lazygrad.uop.ops import GroupOp

    x = Tensor(np.linspace(-2, 2, 16, dtype=np.float32), requires_grad=True).realize()

    def alu_ops(t: Tensor) -> list[str]:
        (si,) = t.schedule()
        body = si.ast.toposort
        return sorted(u.op.name for u in body if u.op in GroupOp.ALU)

    assert alu_ops(x.relu()) == ["CMPLT", "WHERE"]
    assert alu_ops(x.relu6()) == ["CMPLT", "CMPLT", "WHERE", "WHERE"]
    assert alu_ops(x.hardtanh(-0.5, 0.5)) == ["CMPLT", "CMPLT", "WHERE", "WHERE"]
    with Context(NOOPT=1):  # (one lane: an upcast writes the select once per lane)
        kernel = get_program(x.relu().schedule()[0].ast, Device["CPU"].renderer).src.rsplit("#endif", 1)[1]
    assert kernel.count("?") == 1 and kernel.count("<") == 2 and "==" not in kernel  # (a "<" is the loop's)
    # the gradient is torch's: zero at 0 and -0.0 (relu) and at the bounds (hardtanh)
    xs = [-1.0, -0.0, 0.0, 0.5, 1.0]
    for fn, want in ((Tensor.relu, [0, 0, 0, 1, 1]), (lambda t: t.hardtanh(-1.0, 0.5), [0, 1, 1, 0, 0])):
        t = Tensor(xs, requires_grad=True)
        fn(t).sum().backward()
        assert t.grad.tolist() == want
