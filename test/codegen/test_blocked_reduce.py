"""Long float sums are summed in blocks (Lowerer._block_reduce_loops): a sum of 10^6 floats accumulated in one running
total per lane was off by 1.6e-7 relative, 10^7 by 2.2e-6 and a variance of 16M values by 6e-6 (torch's cascade sum:
~1e-7). Blocks of about sqrt(trips) iterations, each summed afresh and then added to the total, bring them to torch's
level. Kernels with many accumulators (matmul and conv register tiles) and short loops keep one loop, and so do
loops of a prime length (no divisor to cut them at)."""

from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Device, Tensor
from lazygrad.codegen import get_program


def _source(t: Tensor) -> str:
    (si,) = t.schedule()
    return get_program(si.ast, Device["CPU"].renderer).src


@pytest.mark.parametrize("n", [2_000_000, 2**21, 3 * 5**8])
def test_long_sum_matches_float64(n):
    x = (np.random.default_rng(n).random(n, dtype=np.float32) + np.float32(0.1)).astype(np.float32)
    ref = x.astype(np.float64).sum()
    assert abs(Tensor(x).sum().item() - ref) / ref < 2.5e-7
    assert abs(Tensor(x).mean().item() - ref / n) / (ref / n) < 2.5e-7


def test_variance_of_many_values():
    x = np.random.default_rng(3).standard_normal((2048, 2048)).astype(np.float32) + np.float32(3)
    want = x.astype(np.float64).var(ddof=1)
    assert abs(Tensor(x).var().item() - want) / want < 5e-7


def test_long_sum_is_blocked():
    src = _source(Tensor.empty(2**20).sum())
    assert "rblk" in src  # the outer loop over blocks
    assert src.count("for (") >= 2


def test_column_sum_of_many_rows_is_blocked_and_right():
    x = np.random.default_rng(4).random((20000, 3), dtype=np.float32)
    assert "rblk" in _source(Tensor.empty(20000, 3).sum(0))
    np.testing.assert_allclose(Tensor(x).sum(0).numpy(), x.astype(np.float64).sum(0), rtol=2.5e-7)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor.empty(300).sum(),  # a short loop
        lambda: Tensor.empty(2**20, dtype="int32").sum(),  # integer sums are exact
        lambda: Tensor.empty(2**20).max(),  # so is max
        lambda: Tensor.empty(64, 4096) @ Tensor.empty(4096, 64),  # a register tile of accumulators
    ],
)
def test_exact_or_short_or_tiled_reduces_keep_one_loop(make):
    assert "rblk" not in _source(make())


def test_blocked_sum_beside_max():
    x = np.random.default_rng(5).random((3, 2**20), dtype=np.float32)
    t = Tensor(x)
    got = (t.sum(1) + t.max(1)).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64).sum(1) + x.max(1), rtol=2.5e-7)


def test_prime_length_stays_one_loop_and_right():
    # no divisor to cut a prime-length loop at: it keeps one running total (a known limit: error ~ trips * eps)
    n = 1_000_003
    assert "rblk" not in _source(Tensor.empty(n).sum())
    x = np.random.default_rng(6).random(n, dtype=np.float32)
    assert abs(Tensor(x).sum().item() - x.astype(np.float64).sum()) / x.sum() < 2e-6


def test_blocked_window_sum_with_vector_lanes_is_right():
    """The weight gradient of a conv whose window loads take a vector axis (their index forms are built while the
    vector axis is chosen, before the long reduce is cut into blocks): the forms were kept over the unsplit loop, so
    the kernel rendered the unsplit loop beside the split one and gcc refused it (tinygrad's
    test_large_input_conv2d)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 16, 64, 64)).astype(np.float32)
    w = rng.standard_normal((6, 16, 5, 2)).astype(np.float32)
    lx, lw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    lx.conv2d(lw).sum().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(tx, tw).sum().backward()
    np.testing.assert_allclose(lw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_block_loops_nest_as_they_close():
    """Sum over (5, 225) whose 225-loop is cut (blocks of 45): the 5-loop is a block loop outside the cut loop's outer
    part. Ranked by loop kind, the outer part opened first and each closed in the other's place; the values came out
    right (both closed at one point), but the kernel broke the IR rules (lazygrad/uop/spec.py, on in the tests)."""
    src = _source(Tensor.empty(5, 16, 225).sum((0, 2)))
    assert "rblk" in src
    opened = [line.split("int ")[1].split(" ")[0] for line in src.splitlines() if line.strip().startswith("for (")]
    assert opened.index("ridx0") < opened.index(next(n for n in opened if n.startswith("rblk")))
    x = np.random.default_rng(6).random((5, 16, 225), dtype=np.float32)
    np.testing.assert_allclose(Tensor(x).sum((0, 2)).numpy(), x.astype(np.float64).sum((0, 2)), rtol=2.5e-7)
