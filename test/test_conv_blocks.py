"""conv2d over copies in channel blocks (Renderer.conv_blocks, Tensor._conv_block): the input padded into
(n, cin/8, h, w, 8), the weight packed into (cout/8, cin/8, kh, kw, 8, 8), the output channels as vector lanes.
Against torch, with the block size of a CPU of 16 registers of 32 bytes (AVX2) whatever this one has."""

import math

import numpy as np
import pytest
import torch

from lazygrad import GlobalCounters, Tensor
from lazygrad.codegen import get_program, heuristic
from lazygrad.codegen.heuristic import hand_coded_optimizations
from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps
from lazygrad.device import Device
from lazygrad.engine.realize import CompiledRunner, ExecItem, run_schedule
from lazygrad.nn.optim import SGD
from lazygrad.renderer.cstyle import ClangRenderer
from lazygrad.tensor import forget_replayed_composites
from lazygrad.uop.ops import Ops

AVX2 = ClangRenderer(threads=1, vector_bytes=32, vector_registers=16)


@pytest.fixture(autouse=True)
def _avx2_blocks(monkeypatch):
    # on the class: an attribute set on the device's renderer would stay in its vars() (its programs' cache key).
    # conv2d's recorded graphs (a _replayed composite) are keyed without the renderer's answer: forgotten on both
    # sides, or a conv of another test's shapes replays the graph built under the other answer
    plain = ClangRenderer.conv_blocks
    monkeypatch.setattr(ClangRenderer, "conv_blocks", lambda self, *args: plain(AVX2, *args))
    forget_replayed_composites()
    yield
    forget_replayed_composites()


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def _conv(xn: np.ndarray, wn: np.ndarray, bn: np.ndarray | None, **kw) -> tuple[np.ndarray, int]:
    """lazygrad's conv2d and the number of kernels it ran."""
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    b = None if bn is None else Tensor(bn).realize()
    GlobalCounters.reset()
    out = x.conv2d(w, b, **kw).realize()
    kernels = GlobalCounters.kernel_count  # a blocked conv's output is a view of its blocks: numpy() copies them
    return out.numpy(), kernels


def _torch(xn: np.ndarray, wn: np.ndarray, bn: np.ndarray | None, **kw) -> np.ndarray:
    b = None if bn is None else torch.from_numpy(bn)
    return torch.nn.functional.conv2d(torch.from_numpy(xn), torch.from_numpy(wn), b, **kw).numpy()


# (n, cin, cout, h, w, kernel, conv2d keywords)
BLOCKED = [
    (2, 16, 24, 9, 17, (3, 3), dict(padding=1)),
    (3, 8, 8, 16, 16, (1, 1), dict()),
    (2, 8, 16, 17, 17, (3, 3), dict(padding=2, dilation=2)),
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


@pytest.mark.parametrize(
    "n,cin,cout,h,w,kernel,kw",
    [
        (2, 16, 16, 15, 19, (3, 3), dict(stride=2, padding=1)),
        (2, 16, 8, 7, 20, (3, 5), dict(stride=(1, 2), padding=(1, 2))),
        (2, 8, 16, 16, 16, (1, 1), dict(stride=2)),
    ],
)
def test_strided_convs_run_over_the_input_phases(n, cin, cout, h, w, kernel, kw):
    """Where the device computes in channel blocks a strided conv is a stride-1 conv over the input's phases
    (Tensor._phase_conv), blocked or not: the phase copy, then the conv's own kernels. Through the blocked path's
    strided windows a 64 -> 128 3x3 s=2 conv on 32^2 batch 32 took 201 ms on one core, over the phases 28 (19 on
    an AVX-512 core, where the columns each tap reads, Tensor._column_conv, took 24-26 in blocks)."""
    xn, wn = _rand(n, cin, h, w), _rand(cout, cin, *kernel, seed=1)
    got, kernels = _conv(xn, wn, None, **kw)
    assert kernels in (2, 4)  # the phases' copy, then the conv (or its blocked copies and the conv)
    np.testing.assert_allclose(got, _torch(xn, wn, None, **kw), rtol=1e-4, atol=1e-4)
    out = Tensor(xn).conv2d(Tensor(wn), **kw)
    strides = (kw["stride"],) * 2 if isinstance(kw["stride"], int) else kw["stride"]
    taps = [-(-k // s) * min(s, k) for k, s in zip(kernel, strides)]  # each phase a kernel of ceil(k/s) taps
    (reduced,) = [u for u in out.uop.toposort if u.op is Ops.REDUCE_AXIS]
    assert math.prod(reduced.src[0].shape) == math.prod(out.shape) * cin * math.prod(taps)


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
    pixels of a row (their windows share input pixels) by 2 vectors of output channels, stored as whole vectors into
    the output's blocks (n, cout/8, h, w, 8)."""
    x, w = Tensor.empty(4, 64, 32, 32), Tensor.empty(64, 64, 3, 3)
    *_, si = x.conv2d(w, padding=1).schedule()
    k = Kernel(si.ast, AVX2)
    k.merge_axes()
    hand_coded_optimizations(k)
    _, (store,) = heuristic._accesses(k)
    # each upcast's size: its step in the output's blocks
    upcasts = [a for a, t in enumerate(k.axis_types) if t is AxisType.UPCAST]
    tile = {k.full_shape[a]: heuristic._step(k, store, a) for a in upcasts}
    assert tile == {8: 1, 4: 8, 2: 32 * 32 * 8}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("width", [32, 31])
def test_blocked_conv_runs_its_images_outermost(threads, width):
    """A blocked conv's packed weights (147 KB for 64 -> 64 3x3) fit in a core's L2 beside its images: the images
    are the outer loop, shared out among the cores (not the output channel blocks: each image was then read from
    further out once per block pair), and the kernel computes what torch does with those opts."""
    xn, wn = _rand(2, 64, 12, width), _rand(64, 64, 3, 3, seed=1)
    *copies, si = Tensor(xn).realize().conv2d(Tensor(wn).realize(), padding=1).schedule()
    run_schedule(copies)
    k = Kernel(si.ast, ClangRenderer(threads=threads, vector_bytes=32, vector_registers=16))
    k.merge_axes()
    hand_coded_optimizations(k)
    outer = k.axes_of(AxisType.THREAD) if threads > 1 else k.axes_of(AxisType.GLOBAL)[:1]
    assert [k.full_shape[a] for a in outer] == [2]
    assert not any(o.op is OptOps.SWAP for o in k.applied_opts)
    spec = get_program(si.ast, Device["CPU"].renderer, list(k.applied_opts))
    ExecItem(CompiledRunner("CPU", spec), list(si.bufs)).run()
    got = np.frombuffer(si.bufs[0].as_bytes(), np.float32)
    ref = _torch(xn, wn, None, padding=1)
    if width % 8 == 0:  # stored in blocks (n, cout/8, h, w, 8)
        ref = ref.reshape(2, 8, 8, 12, width).transpose(0, 1, 3, 4, 2)
    np.testing.assert_allclose(got, ref.reshape(-1), rtol=1e-4, atol=1e-4)


def test_blocked_output_read_through_its_view():
    """The output stays in its channel blocks, an NCHW view of them: a following elementwise op and a second conv
    read through the view (the second conv's blocked copy reads the blocks), in-place ops and numpy() see NCHW."""
    xn, wn, w2n, bn = _rand(2, 16, 18, 20), _rand(16, 16, 3, 3, seed=1), _rand(8, 16, 3, 3, seed=2), _rand(16, seed=3)
    x, w, w2, b = (Tensor(a).realize() for a in (xn, wn, w2n, bn))
    GlobalCounters.reset()
    y = x.conv2d(w, b, padding=1).realize()
    assert GlobalCounters.kernel_count == 3 and y.uop.buffer.size == y.numel()
    xt, wt, w2t, bt = (torch.from_numpy(a) for a in (xn, wn, w2n, bn))
    yt = torch.nn.functional.conv2d(xt, wt, bt, padding=1)
    np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-4, atol=1e-4)
    z = y.relu().conv2d(w2, padding=(0, 1), stride=(2, 1))
    zt = torch.nn.functional.conv2d(yt.relu(), w2t, padding=(0, 1), stride=(2, 1))
    np.testing.assert_allclose(z.numpy(), zt.numpy(), rtol=1e-4, atol=1e-4)
    y += 1
    y[:, 3, 2] = 0.0
    yt += 1
    yt[:, 3, 2] = 0.0
    np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h,w,blocks", [(18, 20, True), (16, 16, True), (13, 13, False), (9, 17, False)])
def test_output_in_blocks_where_an_image_is_whole_vectors(h, w, blocks):
    """The output goes to channel blocks where an output image is whole vectors of pixels (its copy back runs on
    vectors); otherwise the kernel stores NCHW as it is (the copy back of a 31^2 image cost more than it saved)."""
    xn, wn = _rand(2, 16, h, w), _rand(16, 16, 3, 3, seed=1)
    y = Tensor(xn).conv2d(Tensor(wn), padding=1).realize()
    stored = np.frombuffer(y.uop.buffer.as_bytes(), np.float32)
    got = y.numpy()
    np.testing.assert_allclose(got, _torch(xn, wn, None, padding=1), rtol=1e-4, atol=1e-4)
    in_blocks = got.reshape(2, 2, 8, h, w).transpose(0, 1, 3, 4, 2).ravel()
    assert np.array_equal(stored, in_blocks if blocks else got.ravel())


def test_no_grad_evaluation_between_optimizer_steps():
    """A parameter (requires_grad) evaluated under no_grad takes the blocked path, between the steps of an
    optimizer: each evaluation sees the weight after the last step, as torch's."""
    xn, wn = _rand(2, 8, 10, 18), _rand(16, 8, 3, 3, seed=1)
    x, w = Tensor(xn).realize(), Tensor(wn, requires_grad=True).realize()
    xt, wt = torch.from_numpy(xn), torch.from_numpy(wn.copy()).requires_grad_()
    opt, opt_t = SGD([w], lr=0.1), torch.optim.SGD([wt], lr=0.1)
    for _ in range(3):
        with torch.no_grad():
            ref = torch.nn.functional.conv2d(xt, wt, padding=1).numpy()
        with Tensor.no_grad():
            for _ in range(2):
                assert x._conv_block(w, 1, ((1, 1), (1, 1)), 1, 1) > 0  # blocked, requires_grad notwithstanding
                got = x.conv2d(w, padding=1).numpy()
                np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        assert x._conv_block(w, 1, ((1, 1), (1, 1)), 1, 1) == 0  # with gradients: the graph they were tuned on
        with Tensor.train():
            opt.zero_grad()
            x.conv2d(w, padding=1).square().mean().backward()
            opt.step()
        opt_t.zero_grad()
        torch.nn.functional.conv2d(xt, wt, padding=1).square().mean().backward()
        opt_t.step()


@pytest.mark.parametrize("width", [1, 3, 5, 7, 13, 17, 31, 32, 33])
def test_tile_rows_over_any_output_width(width):
    """Output rows of any width: the tile's 4 rows of pixels where 4 divides the width, overlapping tiles where it
    does not (OVERLAP: the last tile ends at the row's end), the whole row where it is shorter; against torch."""
    xn, wn = _rand(4, 16, 40, width), _rand(16, 16, 3, 3, seed=1)
    got, kernels = _conv(xn, wn, None, padding=1)
    assert kernels == 3  # blocked: an output row that is not whole vectors has no vector axis as NCHW
    np.testing.assert_allclose(got, _torch(xn, wn, None, padding=1), rtol=1e-4, atol=1e-4)
    *_, si = Tensor.empty(4, 16, 40, width).conv2d(Tensor.empty(16, 16, 3, 3), padding=1).schedule()
    k = Kernel(si.ast, AVX2)
    k.merge_axes()
    hand_coded_optimizations(k)
    tiled = [(o.op, o.amount) for o in k.applied_opts]
    if width % 4 == 0:
        assert (OptOps.UPCAST, 4) in tiled
    elif width > 4:
        assert (OptOps.OVERLAP, 4) in tiled
    elif width > 1:
        assert (OptOps.UPCAST, width) in tiled


@pytest.mark.parametrize("width,amount", [(6, 4), (9, 4), (17, 5), (31, 3), (10, 7)])
def test_overlapping_tiles_compute_every_output_once_more_at_most(width, amount):
    """OVERLAP by an amount that does not divide the output row, in explicit opts (on one core and on several): the
    values of the plain conv, nothing stored past the row's end."""
    xn, wn = _rand(2, 8, 6, width), _rand(16, 8, 3, 3, seed=1)
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    # the output's memory as the usual kernel leaves it (NCHW or a blocked conv's channel blocks), checked with torch
    usual = x.conv2d(w, padding=1).realize()
    np.testing.assert_allclose(usual.numpy(), _torch(xn, wn, None, padding=1), rtol=1e-4, atol=1e-4)
    want = np.frombuffer(usual.uop.buffer.as_bytes(), np.float32).copy()
    *first, si = x.conv2d(w, padding=1).schedule()
    run_schedule(first)
    out = si.bufs[0]
    out.copyin(memoryview(np.full(out.size, 7.0, np.float32)))
    k = Kernel(si.ast, AVX2)
    k.merge_axes()
    pixels = next(a for a in k.axes_of(AxisType.GLOBAL) if k.full_shape[a] == width)
    opts = [Opt(OptOps.OVERLAP, k.axes_of(AxisType.GLOBAL).index(pixels), amount)]
    for renderer in (AVX2, Device["CPU"].renderer):
        spec = get_program(si.ast, renderer, opts)
        ExecItem(CompiledRunner("CPU", spec), list(si.bufs)).run()
        got = np.frombuffer(out.as_bytes(), np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_overlapping_tiles_are_not_split_again():
    """The axis of overlapping tiles is neither split nor shared out among cores (two would store the same outputs)."""
    *_, si = Tensor.empty(2, 8, 6, 13).conv2d(Tensor.empty(16, 8, 3, 3), padding=1).schedule()
    k = Kernel(si.ast, Device["CPU"].renderer)
    k.merge_axes()
    glob = k.axes_of(AxisType.GLOBAL)
    pixels = next(a for a in glob if k.full_shape[a] == 13)
    k.apply_opt(Opt(OptOps.OVERLAP, glob.index(pixels), 4))
    starts = k.axes_of(AxisType.GLOBAL).index(next(a for a, t in enumerate(k.tile_steps) if t is not None))
    for opt in (Opt(OptOps.UPCAST, starts, 2), Opt(OptOps.OVERLAP, starts, 3), Opt(OptOps.THREAD, starts, 0)):
        with pytest.raises(KernelOptError):
            k.apply_opt(opt)


@pytest.mark.parametrize("kw", [{"stride": 0}, {"dilation": 0}, {"stride": (1, 1, 1)}])
def test_bad_window_arguments_raise_as_torch(kw):
    """A shape the blocked path takes, with a stride or dilation that makes no window: the error torch raises (a
    RuntimeError), in the user's terms, not a ZeroDivisionError from working out the blocked output's size."""
    x, w, (name,) = Tensor.empty(2, 8, 20, 20), Tensor.empty(8, 8, 3, 3), kw
    with pytest.raises(RuntimeError, match=name):
        torch.nn.functional.conv2d(torch.empty(2, 8, 20, 20), torch.empty(8, 8, 3, 3), **kw)
    with pytest.raises(RuntimeError, match=name):
        x.conv2d(w, **kw)


def _copy_back_tile(t: Tensor) -> list[int]:
    """The upcast sizes of the one kernel computing t (an elementwise read of a blocked conv's output) on AVX2."""
    (si,) = t.schedule()
    k = Kernel(si.ast, AVX2)
    k.merge_axes()
    hand_coded_optimizations(k)
    return [s for s, a in zip(k.full_shape, k.axis_types) if a is AxisType.UPCAST]


@pytest.mark.parametrize("width", [1, 3, 5, 7, 13, 17, 31, 32, 33])
@pytest.mark.parametrize("n", [1, 2])
def test_copy_back_from_blocks_is_a_square_tile(width, n):
    """A blocked output read back as NCHW by an elementwise op (bias in the conv, relu after it) or by numpy() is
    copied in square tiles of 8 pixels x 8 channels: each reads one contiguous run of its blocks (was one pixel of 8
    blocks per vector). Values against
    torch, then a second conv over the relu's result (conv > relu > conv)."""
    xn, wn, bn, w2n = _rand(n, 8, 96, width), _rand(16, 8, 3, 3, seed=1), _rand(16, seed=2), _rand(8, 16, 3, 3, seed=3)
    x, w, b, w2 = (Tensor(a).realize() for a in (xn, wn, bn, w2n))
    y = x.conv2d(w, b, padding=1).realize()
    assert y.uop.buffer.size == y.numel() and y.uop.base is not y.uop  # stored in blocks, an NCHW view of them
    assert _copy_back_tile(y.relu()) == [8, 8]
    xt, wt, bt, w2t = (torch.from_numpy(a) for a in (xn, wn, bn, w2n))
    yt = torch.nn.functional.conv2d(xt, wt, bt, padding=1)
    np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y.relu().numpy(), yt.relu().numpy(), rtol=1e-4, atol=1e-4)
    z = x.conv2d(w, b, padding=1).relu().conv2d(w2, padding=1)
    zt = torch.nn.functional.conv2d(yt.relu(), w2t, padding=1)
    np.testing.assert_allclose(z.numpy(), zt.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cin,cout", [(12, 16), (16, 12), (5, 7)])
def test_channels_not_in_whole_blocks(cin, cout):
    """Channels that are not whole blocks of 8 keep the NCHW conv: values against torch, with bias and relu."""
    xn, wn, bn = _rand(1, cin, 8, 17), _rand(cout, cin, 3, 3, seed=1), _rand(cout, seed=2)
    got = Tensor(xn).conv2d(Tensor(wn), Tensor(bn), padding=1).relu().numpy()
    np.testing.assert_allclose(got, np.maximum(_torch(xn, wn, bn, padding=1), 0), rtol=1e-4, atol=1e-4)


def _gradient_kernel(x: Tensor, w: Tensor, gn: np.ndarray, of: Tensor) -> tuple[list, Kernel]:
    """The schedule of `of`'s gradient of sum(conv2d(x, w, padding=1) * gn), and its last kernel as the heuristic
    optimizes it for an AVX2 CPU with masked loads."""
    (x.conv2d(w, padding=1) * Tensor(gn)).sum().backward()
    sched = of.grad.schedule()
    renderer = ClangRenderer(threads=1, vector_bytes=32, vector_registers=16)
    renderer.masked_load_lanes, renderer.masked_load_lane_mask = (8, 4), True
    k = Kernel(sched[-1].ast, renderer)
    k.merge_axes()
    hand_coded_optimizations(k)
    return sched, k


def test_input_gradient_tile_rows_share_the_window_taps():
    """A conv's input gradient sums its window's taps one by one; with AVX's masked loads its tile's third axis is the
    next output row (whose taps are shifted copies of this row's), not another image. Values against torch."""
    xn, wn, gn = _rand(64, 16, 8, 8), _rand(32, 16, 3, 3, seed=1), _rand(64, 32, 8, 8, seed=2)
    x, w = Tensor(xn, requires_grad=True).realize(), Tensor(wn).realize()
    sched, k = _gradient_kernel(x, w, gn, x)
    steps = {k.full_shape[a]: heuristic._step(k, 0, a) for a in k.axes_of(AxisType.UPCAST)}
    assert steps == {8: 1, 4: 64, 2: 8}  # lanes along the row, 4 channels, 2 rows (was 2 images: 1024)
    run_schedule(sched)
    xt = torch.from_numpy(xn).requires_grad_()
    (torch.nn.functional.conv2d(xt, torch.from_numpy(wn), padding=1) * torch.from_numpy(gn)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_following_conv_copies_the_blocks_as_they_are():
    """conv > relu > conv: the second conv's blocked copy of its input reads the first's blocks through one view (a
    vector of 8 channels a load), not through the NCHW view's flat index cut apart again. Values against torch."""
    xn, wn, w2n = _rand(2, 8, 16, 16), _rand(16, 8, 3, 3, seed=1), _rand(8, 16, 3, 3, seed=2)
    x, w, w2 = (Tensor(a).realize() for a in (xn, wn, w2n))
    y = x.conv2d(w, padding=1).realize()
    z = y.relu().conv2d(w2, padding=1)
    sched = z.schedule()
    loads = [u for u in sched[0].ast.toposort if u.op is Ops.LOAD]
    assert [len(u.src[1].arg.views) for u in loads] == [1]
    run_schedule(sched)
    xt, wt, w2t = (torch.from_numpy(a) for a in (xn, wn, w2n))
    zt = torch.nn.functional.conv2d(torch.nn.functional.conv2d(xt, wt, padding=1).relu(), w2t, padding=1)
    np.testing.assert_allclose(z.numpy(), zt.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width,n", [(24, 1), (32, 2), (16, 3)])
def test_copy_back_from_blocks_transposes_in_registers(width, n, monkeypatch):
    """The copy back from blocks (relu after a blocked conv) loads each 8 x 8 tile as 8 vectors of one pixel's 8
    channels and transposes them with shuffles, where the renderer writes those (lane_shuffle): no scalar load (was
    64 a tile, gathered into vectors a lane at a time). Values against torch, with and without the shuffles."""
    import re

    xn, wn, bn = _rand(n, 8, 8, width), _rand(16, 8, 3, 3, seed=1), _rand(16, seed=2)
    y = Tensor(xn).conv2d(Tensor(wn), Tensor(bn), padding=1).realize()
    (si,) = y.relu().schedule()
    ref = np.maximum(_torch(xn, wn, bn, padding=1), 0)
    for shuffle in (True, False):
        renderer = ClangRenderer(threads=1, vector_bytes=32, vector_registers=16)
        renderer.lane_shuffle = shuffle
        spec = get_program(si.ast, renderer)
        vector_loads = re.findall(r"lg_float32x8 val\d+ = \*", spec.src)
        assert (len(re.findall(r"float val\d+ = ", spec.src)), len(vector_loads)) == ((0, 8) if shuffle else (64, 0))
        out = Tensor.empty(*ref.shape).realize()
        ExecItem(CompiledRunner("CPU", spec), [out.uop.buffer, *si.bufs[1:]]).run()
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_weight_gradient_tile_is_output_channels_by_row_taps():
    """A conv's weight gradient (lanes along the input row, summed at the end) takes its window's row taps whole as
    its tile's second axis and unrolls the input rows whole, so each (row, tap) pair's padding is known when the
    kernel is built: 4 output channels x 3 row taps, rows 8 x lanes 8 (was 4 output channels x 2 input channels, a
    masked load under a mask built in the loop). Values against torch."""
    xn, wn, gn = _rand(64, 16, 8, 8), _rand(32, 16, 3, 3, seed=1), _rand(64, 32, 8, 8, seed=2)
    x, w = Tensor(xn).realize(), Tensor(wn, requires_grad=True).realize()
    sched, k = _gradient_kernel(x, w, gn, w)
    expanded = {
        t: [s for s, a in zip(k.full_shape, k.axis_types) if a is t] for t in (AxisType.UPCAST, AxisType.UNROLL)
    }
    assert expanded == {AxisType.UPCAST: [4, 3], AxisType.UNROLL: [8, 8]}
    assert [
        (s, heuristic._step(k, 2, a)) for a, s in enumerate(k.full_shape) if k.axis_types[a] is AxisType.UPCAST
    ] == [
        (4, 0),
        (3, 8),
    ]  # the input's rows move with the taps
    run_schedule(sched)
    wt = torch.from_numpy(wn).requires_grad_()
    (torch.nn.functional.conv2d(torch.from_numpy(xn), wt, padding=1) * torch.from_numpy(gn)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)


SMALL_GRADIENTS = [
    (1, 3, 5, 8, 8), (2, 8, 16, 5, 7), (3, 16, 8, 4, 13), (1, 1, 16, 8, 1),
    (2, 12, 8, 8, 17), (4, 8, 8, 3, 31), (1, 16, 16, 6, 32), (2, 8, 8, 7, 33),
]  # fmt: skip


@pytest.mark.parametrize("n,cin,cout,h,w", SMALL_GRADIENTS)
@pytest.mark.parametrize("bias", [False, True])
def test_small_conv_gradients_against_torch(n, cin, cout, h, w, bias):
    """Weight, bias and input gradients of a padded 3x3 conv with relu after it on images of at most 8 rows (whose
    weight gradient unrolls its rows and row taps), of odd and even widths and channel counts, against torch."""
    xn, wn, bn, gn = _rand(n, cin, h, w), _rand(cout, cin, 3, 3, seed=1), _rand(cout, seed=2), _rand(n, cout, h, w)
    x, wt = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    b = Tensor(bn, requires_grad=True) if bias else None
    (x.conv2d(wt, b, padding=1).relu() * Tensor(gn)).sum().backward()
    xt, wtt = torch.from_numpy(xn).requires_grad_(), torch.from_numpy(wn).requires_grad_()
    bt = torch.from_numpy(bn).requires_grad_() if bias else None
    (torch.nn.functional.conv2d(xt, wtt, bt, padding=1).relu() * torch.from_numpy(gn)).sum().backward()
    np.testing.assert_allclose(wt.grad.numpy(), wtt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)
    if bias:
        np.testing.assert_allclose(b.grad.numpy(), bt.grad.numpy(), rtol=1e-4, atol=1e-3)
