"""PanelMatrix: a float weight packed into panels once, multiplied like x.linear(weight), against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.device import Device
from lazygrad.helpers import GlobalCounters
from lazygrad.nn.packed import PanelMatrix, panel_width


@pytest.mark.parametrize("rows", [(1,), (3,), (2, 5), (40,), (35,), (3, 7)])
@pytest.mark.parametrize("n,k", [(64, 48), (48, 576), (7, 33), (1, 1)])
def test_panel_linear_matches_numpy(rows, n, k):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((*rows, k)).astype(np.float32)
    pm = PanelMatrix.pack(Tensor(w))
    out = pm.linear(Tensor(x)).numpy()
    assert out.shape == (*rows, n)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_panel_layout_where_the_device_has_panels():
    w = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    panel = panel_width(Tensor(w))
    pm = PanelMatrix.pack(Tensor(w))
    assert pm.panel == panel
    if panel:  # (n / panel, k, panel): column j of panel i is row i * panel + j of the weight
        expected = w.reshape(32 // panel, panel, 8).transpose(0, 2, 1)
    else:
        expected = w
    np.testing.assert_array_equal(pm.packed.numpy(), expected)


def test_panel_width_is_zero_for_what_it_does_not_pack():
    assert panel_width(Tensor.ones(4)) == 0
    assert panel_width(Tensor.ones(32, 8, dtype="float16")) == 0
    if Device[Device.DEFAULT].renderer.vector_bytes >= 16:
        assert panel_width(Tensor.ones(7, 8)) == 0  # rows not whole panels


def test_panel_linear_shape_error():
    pm = PanelMatrix.pack(Tensor.ones(32, 8))
    with pytest.raises(ValueError, match=r"input shape \(2, 9\) does not match weight shape \(32, 8\)"):
        pm.linear(Tensor.ones(2, 9))


def test_panel_linear_bias_and_activation_are_its_epilogue():
    """The product's output is row-major in the graph: a bias and an activation after it are the matmul kernel's
    epilogue, not a copy kernel of their own (the panels outermost in the graph left the output permuted)."""
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    x = rng.standard_normal((300, 48)).astype(np.float32)
    pm, tb, tx = PanelMatrix.pack(Tensor(w)), Tensor(b).realize(), Tensor(x).realize()
    pm.packed.realize()
    GlobalCounters.reset()
    out = (pm.linear(tx) + tb).relu().realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(out.numpy(), np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-4)
