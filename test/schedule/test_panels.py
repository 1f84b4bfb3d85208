"""The matmul-panel pass (schedule/panels.py): which right-hand sides the scheduler copies into panels, the kernels it
takes, results against torch, and the schedule cache over graphs the pass rewrote."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor, dtypes
from lazygrad.engine.realize import run_schedule
from lazygrad.schedule import kernelize
from lazygrad.uop.ops import Ops

LANES = Device["CPU"].renderer.vector_bytes // 4  # float32 columns per panel on the CPU


def _np(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _packed(sched: list) -> list[int]:
    """The sizes of the buffers that kernels of the schedule only copy into (the weights copied into panels)."""
    copies = [si for si in sched if si.ast.op is Ops.SINK and all(st.src[2].op is Ops.LOAD for st in si.ast.src)]
    return sorted(si.outputs[0].size for si in copies)


def test_dot_builds_the_plain_product():
    """Tensor.dot decides nothing about layout: its graph is the plain sum of products, whatever the sizes."""
    x, w = Tensor.empty(512, 96), Tensor.empty(64, 96)
    out = (x @ w.T).uop.base
    assert out.op is Ops.REDUCE_AXIS and out.src[0].op is Ops.MUL
    assert not any(u.op is Ops.CONTIGUOUS for u in out.toposort)


@pytest.mark.parametrize("m,n", [(256, 64), (300, 48), (255, 64), (256, 40), (2 * 128, 32)])
def test_linear_weight_packed_when_the_device_asks(m: int, n: int):
    k = 96
    want = Device["CPU"].renderer.matmul_panel(m, n, k, 4, True)
    assert (want > 0) == (m >= 256 and n % LANES == 0)
    x_np, w_np = _np(m, k), _np(n, k, seed=1)
    w = Tensor(w_np).realize()
    sched = (Tensor(x_np) @ w.T).schedule()
    assert len(sched) == (2 if want else 1)
    assert _packed(sched) == ([n * k] if want else [])
    np.testing.assert_allclose((Tensor(x_np) @ w.T).numpy(), x_np @ w_np.T, rtol=1e-4, atol=1e-4)


def test_batched_input_counts_every_row():
    """x (2, 128, k) @ w.T: 256 rows in all, so the weight is packed."""
    x_np, w_np = _np(2, 128, 96), _np(32, 96, seed=1)
    w = Tensor(w_np).realize()
    sched = (Tensor(x_np) @ w.T).relu().schedule()
    assert len(sched) == 2 and _packed(sched) == [32 * 96]
    np.testing.assert_allclose((Tensor(x_np) @ w.T).relu().numpy(), np.maximum(x_np @ w_np.T, 0), rtol=1e-4, atol=1e-4)


def test_row_major_weight_with_a_4kb_row_stride():
    a_np, w_np = _np(256, 512), _np(512, 1024, seed=1)
    w = Tensor(w_np).realize()
    sched = (Tensor(a_np) @ w).schedule()
    packs = Device["CPU"].renderer.matmul_panel(256, 1024, 512, 4) > 0
    assert _packed(sched) == ([512 * 1024] if packs else [])
    np.testing.assert_allclose((Tensor(a_np) @ w).numpy(), a_np @ w_np, rtol=1e-4, atol=2e-3)


def test_lazy_weight_is_not_packed():
    """A right-hand side computed in the same schedule is read as the product computes it (no extra copy)."""
    x_np, w_np = _np(256, 96), _np(64, 96, seed=1)
    w = Tensor(w_np).realize() * 2
    sched = (Tensor(x_np) @ w.T).schedule()
    assert _packed(sched) == []


def test_chained_linears_both_packed_and_their_gradients_match_torch():
    """Two packed products, the second reading the first (the pass rebuilds the graph above a replaced product), and
    the gradients of the plain product (autograd never sees panels)."""
    x_np, w1_np, w2_np = _np(256, 48), _np(64, 48, seed=1), _np(32, 64, seed=2)
    w1, w2 = Tensor(w1_np, requires_grad=True).realize(), Tensor(w2_np, requires_grad=True).realize()
    x = Tensor(x_np, requires_grad=True)
    out = (x @ w1.T).relu() @ w2.T
    sched = out.schedule()
    assert _packed(sched) == [32 * 64, 64 * 48] and len(sched) == 4
    run_schedule(sched)
    tx, t1, t2 = (torch.tensor(a, requires_grad=True) for a in (x_np, w1_np, w2_np))
    ref = (tx @ t1.T).relu() @ t2.T
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    for got, want in ((x, tx), (w1, t1), (w2, t2)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-2)


def test_half_weight_packed():
    x_np, w_np = _np(256, 64).astype(np.float16), _np(32, 64, seed=1).astype(np.float16)
    w = Tensor(w_np).realize()
    sched = (Tensor(x_np) @ w.T).schedule()
    assert _packed(sched) == [32 * 64]
    got = (Tensor(x_np) @ w.T).numpy()
    assert got.dtype == np.float16
    ref = (torch.tensor(x_np).float() @ torch.tensor(w_np).float().T).half().numpy()
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)


def test_only_a_stored_matrix_of_the_product_dtype_is_packed():
    x, w = Tensor.empty(256, 64, dtype=dtypes.half), Tensor.empty(32, 64).realize()
    assert _packed((x.float() @ w.T).schedule()) == [32 * 64]  # x widened before the product: w is float32 as stored
    assert _packed((x @ w.T.half()).schedule()) == []  # w narrowed in the graph: no stored matrix to copy


def test_packed_schedule_is_cached_and_reused():
    """A second product of the same structure over new inputs hits the schedule cache: the copy into panels gets a
    fresh buffer per instance, and the results are each input's own."""
    w_np = _np(64, 96, seed=1)
    w = Tensor(w_np).realize()
    xs = [_np(256, 96, seed=s) for s in (3, 4, 5)]
    calls = []
    real = kernelize._create_schedule

    def counting(*args):
        calls.append(1)
        return real(*args)

    kernelize._create_schedule, before = counting, len(kernelize._templates)
    try:
        outs = [(Tensor(x) @ w.T).numpy() for x in xs]
    finally:
        kernelize._create_schedule = real
    assert len(calls) <= 1 and len(kernelize._templates) <= before + 1
    for x, got in zip(xs, outs):
        np.testing.assert_allclose(got, x @ w_np.T, rtol=1e-4, atol=1e-4)


def test_write_after_a_packed_read_lands_after_the_copy():
    """y reads w (through its panels) before `w` is overwritten in the same schedule: y sees the old values."""
    x_np, w_np = _np(256, 96), _np(64, 96, seed=1)
    w = Tensor(w_np).realize()
    y = Tensor(x_np) @ w.T
    w.assign(w * 2)
    Tensor.realize(y, w)
    np.testing.assert_allclose(y.numpy(), x_np @ w_np.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.numpy(), w_np * 2)


def test_sums_of_products_without_a_batch_are_left_alone():
    a, b = Tensor.empty(300), Tensor.empty(300)
    assert len((a * b).sum().schedule()) == 1
    x, y = Tensor.empty(300, 64), Tensor.empty(300, 64)
    assert len((x * y).sum(1).schedule()) == 1
