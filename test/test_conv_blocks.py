"""conv2d over copies in channel blocks (Renderer.conv_blocks, Tensor._conv_block): the input padded into
(n, cin/8, h, w, 8), the weight packed into (cout/8, cin/8, kh, kw, 8, 8), the output channels as vector lanes.
Against torch, with the block size of a CPU of 16 registers of 32 bytes (AVX2) whatever this one has."""

import numpy as np
import pytest
import torch

from lazygrad import GlobalCounters, Tensor
from lazygrad.codegen import heuristic
from lazygrad.codegen.heuristic import hand_coded_optimizations
from lazygrad.codegen.kernel import AxisType, Kernel
from lazygrad.renderer.cstyle import ClangRenderer

AVX2 = ClangRenderer(threads=1, vector_bytes=32, vector_registers=16)


@pytest.fixture(autouse=True)
def _avx2_blocks(monkeypatch):
    # on the class: an attribute set on the device's renderer would stay in its vars() (its programs' cache key)
    plain = ClangRenderer.conv_blocks
    monkeypatch.setattr(ClangRenderer, "conv_blocks", lambda self, *args: plain(AVX2, *args))


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _conv(xn: np.ndarray, wn: np.ndarray, bn: np.ndarray | None, **kw) -> tuple[np.ndarray, int]:
    """lazygrad's conv2d and the number of kernels it ran."""
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    b = None if bn is None else Tensor(bn).realize()
    GlobalCounters.reset()
    out = x.conv2d(w, b, **kw).realize()
    return out.numpy(), GlobalCounters.kernel_count


def _torch(xn: np.ndarray, wn: np.ndarray, bn: np.ndarray | None, **kw) -> np.ndarray:
    b = None if bn is None else torch.from_numpy(bn)
    return torch.nn.functional.conv2d(torch.from_numpy(xn), torch.from_numpy(wn), b, **kw).numpy()


# (n, cin, cout, h, w, kernel, conv2d keywords)
BLOCKED = [
    (2, 16, 24, 9, 17, (3, 3), dict(padding=1)),
    (3, 8, 8, 16, 16, (1, 1), dict()),
    (2, 16, 16, 15, 19, (3, 3), dict(stride=2, padding=1)),
    (2, 8, 16, 17, 17, (3, 3), dict(padding=2, dilation=2)),
    (2, 16, 8, 7, 20, (3, 5), dict(stride=(1, 2), padding=(1, 2))),
    (2, 24, 16, 12, 20, (2, 2), dict(padding="same")),
    (3, 8, 8, 10, 18, (3, 3), dict(padding=0)),
]


@pytest.mark.parametrize("n,cin,cout,h,w,kernel,kw", BLOCKED)
@pytest.mark.parametrize("bias", [False, True])
def test_blocked_conv_computes_what_torch_does(n, cin, cout, h, w, kernel, kw, bias):
    """Channels a multiple of 8: the input's and the weight's copies, then the conv (its bias in the same kernel)."""
    xn, wn = _rand(n, cin, h, w), _rand(cout, cin, *kernel, seed=1)
    bn = _rand(cout, seed=2) if bias else None
    got, kernels = _conv(xn, wn, bn, **kw)
    assert kernels == 3
    np.testing.assert_allclose(got, _torch(xn, wn, bn, **kw), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spatial,kernel", [((160,), (3,)), ((6, 7, 16), (3, 2, 3))])
def test_blocked_conv_over_one_and_three_spatial_dims(spatial, kernel):
    xn, wn = _rand(2, 8, *spatial), _rand(16, 8, *kernel, seed=1)
    got, kernels = _conv(xn, wn, None, padding=1)
    assert kernels == 3
    conv = torch.nn.functional.conv1d if len(spatial) == 1 else torch.nn.functional.conv3d
    ref = conv(torch.from_numpy(xn), torch.from_numpy(wn), padding=1).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


# channels that do not split into blocks of 8 (primes), groups, too few pixels and rows of fewer than 16 (the digits
# CNN's second conv) stay one kernel over NCHW
PLAIN = [
    (2, 7, 13, 16, 16, (3, 3), dict(padding=1)),
    (2, 16, 13, 16, 16, (3, 3), dict(padding=1)),
    (2, 16, 16, 16, 16, (3, 3), dict(padding=1, groups=2)),
    (1, 8, 8, 6, 16, (3, 3), dict(padding=1)),
    (64, 16, 32, 8, 8, (3, 3), dict(padding=1)),
]


@pytest.mark.parametrize("n,cin,cout,h,w,kernel,kw", PLAIN)
def test_other_convs_stay_one_kernel(n, cin, cout, h, w, kernel, kw):
    groups = kw.get("groups", 1)
    xn, wn = _rand(n, cin, h, w), _rand(cout, cin // groups, *kernel, seed=1)
    got, kernels = _conv(xn, wn, None, **kw)
    assert kernels == 1
    np.testing.assert_allclose(got, _torch(xn, wn, None, **kw), rtol=1e-4, atol=1e-4)


def test_convs_with_gradients_stay_as_they_are():
    """A training step's conv keeps its graph (and its gradients' kernels); the gradients match torch's."""
    xn, wn = _rand(2, 16, 12, 12), _rand(16, 16, 3, 3, seed=1)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    GlobalCounters.reset()
    y = x.conv2d(w, padding=1).realize()
    assert GlobalCounters.kernel_count == 1
    (y * y).sum().backward()
    xt, wt = torch.from_numpy(xn).requires_grad_(), torch.from_numpy(wn).requires_grad_()
    yt = torch.nn.functional.conv2d(xt, wt, padding=1)
    (yt * yt).sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-3)  # type: ignore[union-attr]
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-3, atol=1e-3)  # type: ignore[union-attr]


def test_blocked_conv_tile_is_output_pixels_by_output_channel_vectors():
    """The conv kernel's register tile on AVX2: the output channels of a block as the 8 lanes, 4 neighbouring output
    pixels of a row (their windows share input pixels) by 2 vectors of output channels."""
    x, w = Tensor.empty(4, 64, 32, 32), Tensor.empty(64, 64, 3, 3)
    *_, si = x.conv2d(w, padding=1).schedule()
    k = Kernel(si.ast, AVX2)
    k.merge_axes()
    hand_coded_optimizations(k)
    _, (store,) = heuristic._accesses(k)
    # each upcast's size: its step in the output (NCHW)
    upcasts = [a for a, t in enumerate(k.axis_types) if t is AxisType.UPCAST]
    tile = {k.full_shape[a]: heuristic._step(k, store, a) for a in upcasts}
    assert tile == {8: 32 * 32, 4: 1, 2: 8 * 32 * 32}
