"""Differentiable composite ops (matmul, conv, pools, softmax family, norms, dropout, losses, attention): forward
and gradient against torch, over edge sizes, broadcasting and non-contiguous inputs."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lazygrad import GlobalCounters, Tensor, dtypes
from lazygrad.engine.realize import run_schedule
from lazygrad.uop.ops import Ops

# inputs per test: a shape, or ("T", shape) for a non-contiguous input (the transpose of a contiguous array),
# or ("int", shape, high) for integer targets (no gradient)
Spec = Any


Made = tuple[Tensor, torch.Tensor, "Tensor | None", "torch.Tensor | None"]


def _make(spec: Spec, rng: np.random.Generator, low: float, high: float) -> Made:
    """(lazygrad input, torch input, lazygrad leaf, torch leaf); the leaves are None for integer inputs and are the
    contiguous storage under the permute for transposed ones."""
    if isinstance(spec, tuple) and spec and spec[0] == "int":
        arr = rng.integers(0, spec[2], size=spec[1]).astype(np.int64)
        return Tensor(arr.astype(np.int32)), torch.from_numpy(arr), None, None
    transposed = isinstance(spec, tuple) and spec and spec[0] == "T"
    shape = spec[1] if transposed else spec
    store = rng.uniform(low, high, size=shape[::-1] if transposed else shape).astype(np.float32)
    lg, ref = Tensor(store).requires_grad_(), torch.tensor(store, requires_grad=True)
    if transposed:
        order = tuple(range(len(shape) - 1, -1, -1))
        return lg.permute(order), ref.permute(order), lg, ref
    return lg, ref, lg, ref


def check(
    lg_fn: Callable[..., Tensor],
    torch_fn: Callable[..., torch.Tensor],
    specs: list[Spec],
    atol: float = 1e-5,
    rtol: float = 1e-4,
    low: float = -2.0,
    high: float = 2.0,
    grad: bool = True,
    seed: int = 0,
) -> None:
    """Forward values, then the gradient of every float input under a random upstream gradient, against torch."""
    rng = np.random.default_rng(seed)
    made = [_make(s, rng, low, high) for s in specs]
    out = lg_fn(*[m[0] for m in made])
    ref = torch_fn(*[m[1] for m in made])
    assert out.shape == tuple(ref.shape), f"shape {out.shape} != torch {tuple(ref.shape)}"
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=rtol, err_msg="forward")
    if not grad:
        return
    upstream = rng.standard_normal(size=tuple(ref.shape)).astype(np.float32)
    (ref * torch.from_numpy(upstream)).sum().backward()
    leaves = [(m[2], m[3]) for m in made if m[2] is not None]
    lg_grads = (out * Tensor(upstream)).sum().gradient(*[lg for lg, _ in leaves])
    for i, (g, (_, th)) in enumerate(zip(lg_grads, leaves)):
        assert th is not None and th.grad is not None
        np.testing.assert_allclose(g.numpy(), th.grad.numpy(), atol=atol * 10, rtol=rtol * 10, err_msg=f"grad {i}")


# *** matmul / linear ***


@pytest.mark.parametrize(
    "a,b",
    [
        ((3, 4), (4, 5)),
        ((1, 1), (1, 1)),
        ((7, 11), (11, 13)),
        ((5,), (5, 3)),
        ((3, 5), (5,)),
        ((6,), (6,)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (3, 4, 2)),
        (("T", (4, 3)), (3, 5)),
        ((4, 3), ("T", (3, 6))),
    ],
)
def test_matmul(a: Spec, b: Spec) -> None:
    check(lambda x, y: x @ y, lambda x, y: x @ y, [a, b])


def test_matmul_empty() -> None:
    check(lambda x, y: x.matmul(y), torch.matmul, [(3, 0), (0, 4)])
    check(lambda x, y: x.dot(y), torch.matmul, [(0, 5), (5, 2)])


def test_matmul_shape_error_names_both() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        Tensor.ones(2, 3) @ Tensor.ones(4, 5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x", [(4, 6), (2, 3, 6), (1, 6), ("T", (5, 6))])
def test_linear(x: Spec, bias: bool) -> None:
    specs = [x, (7, 6)] + ([(7,)] if bias else [])
    check(lambda *a: a[0].linear(*a[1:]), lambda *a: F.linear(*a), specs)


def test_linear_error() -> None:
    with pytest.raises(ValueError, match="linear"):
        Tensor.ones(2, 3).linear(Tensor.ones(4, 5))


# *** convolution ***

CONV2D = [
    dict(x=(2, 3, 7, 7), w=(4, 3, 3, 3)),
    dict(x=(1, 1, 5, 5), w=(1, 1, 1, 1)),
    dict(x=(2, 3, 8, 9), w=(5, 3, 3, 2), stride=2),
    dict(x=(2, 3, 7, 6), w=(4, 3, 3, 3), padding=1),
    dict(x=(1, 2, 9, 9), w=(3, 2, 3, 3), padding=(2, 1), stride=(2, 3)),
    dict(x=(1, 2, 11, 10), w=(2, 2, 3, 3), dilation=2),
    dict(x=(2, 3, 12, 11), w=(4, 3, 3, 2), padding=(2, 1), stride=2, dilation=2),
    dict(x=(2, 4, 7, 7), w=(6, 2, 3, 3), groups=2, padding=1),
    dict(x=(1, 6, 5, 5), w=(6, 1, 3, 3), groups=6, stride=2, padding=1),
    dict(x=(1, 3, 6, 6), w=(2, 3, 3, 3), padding="same"),
    dict(x=(1, 3, 6, 6), w=(2, 3, 4, 4), padding="same", dilation=2),
    dict(x=(1, 3, 6, 6), w=(2, 3, 3, 3), padding="valid"),
]


@pytest.mark.parametrize("cfg", CONV2D, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(cfg: dict, bias: bool) -> None:
    kw = {k: v for k, v in cfg.items() if k not in ("x", "w")}
    specs = [cfg["x"], cfg["w"]] + ([(cfg["w"][0],)] if bias else [])
    check(lambda *a: a[0].conv2d(*a[1:], **kw), lambda *a: F.conv2d(*a, **kw), specs, atol=1e-4)


STRIDED = [
    dict(x=(2, 3, 9, 9), w=(4, 3, 3, 3), stride=2, padding=1),
    dict(x=(2, 4, 8, 8), w=(6, 4, 1, 1), stride=2),  # a ResNet shortcut: phase 0 only
    dict(x=(1, 2, 11, 7), w=(3, 2, 4, 5), stride=3, padding=2),
    dict(x=(2, 4, 10, 10), w=(4, 1, 3, 3), stride=2, padding=1, groups=4),  # depthwise
    dict(x=(1, 2, 9, 9), w=(3, 2, 3, 3), stride=4),  # the last rows reached by no window: cut
    dict(x=(2, 3, 8, 8), w=(5, 3, 2, 2), stride=(2, 1), padding=(0, 1)),
    dict(x=(1, 3, 12), w=(2, 3, 5), stride=2, padding=2),
    dict(x=(1, 2, 5, 6, 7), w=(2, 2, 3, 3, 3), stride=2, padding=1),
    dict(x=(2, 3, 15, 19), w=(4, 3, 3, 3), stride=3, padding=(2, 1)),
    dict(x=(2, 4, 9, 8), w=(6, 2, 3, 2), stride=(1, 2), padding=(1, 0), groups=2),
    dict(x=(1, 2, 9, 9), w=(3, 2, 7, 7), stride=2, padding=3),  # the taps past the stride: overlapping columns
    dict(x=(3, 2, 7, 33), w=(2, 2, 3, 3), stride=(3, 2)),
]


@pytest.mark.parametrize("cfg", STRIDED, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_strided_conv_in_training_is_a_conv_over_phases(cfg: dict) -> None:
    """A strided conv whose gradients are taken runs over the columns each tap reads and the rows' phases, copied
    (_column_conv, _phase_conv): values and every gradient as torch's, over 1-3 spatial dims, groups, strides past
    the kernel and cut inputs."""
    kw = {k: v for k, v in cfg.items() if k not in ("x", "w")}
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(cfg["x"])]
    specs = [cfg["x"], cfg["w"], (cfg["w"][0],)]
    check(lambda *a: a[0].conv2d(*a[1:], **kw), lambda *a: conv(*a, **kw), specs, atol=1e-4)
    x = Tensor.ones(*cfg["x"], requires_grad=True)
    phases = x.conv2d(Tensor.ones(*cfg["w"]), **kw).uop.toposort  # the phase copy: a CONTIGUOUS node
    assert any(u.op is Ops.CONTIGUOUS for u in phases)


@pytest.mark.parametrize("cfg", STRIDED, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_strided_conv_without_gradients_copies_columns_by_tap(cfg: dict) -> None:
    """Without gradients a strided conv copies the columns each tap of the last dim reads (_column_conv), then runs
    one conv whose other dims take their strides as they are: the multiplies of the strided conv itself (the phases
    regrouped a 3x3 kernel into 2x2 taps of 4 phases, 16/9 of them), in two kernels; a stride of 1 along the last dim
    needs no copy."""
    kw = {k: v for k, v in cfg.items() if k not in ("x", "w")}
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(cfg["x"])]
    rng = np.random.default_rng(0)
    xn, wn = (rng.standard_normal(cfg[k]).astype(np.float32) for k in ("x", "w"))
    bn = rng.standard_normal(cfg["w"][0]).astype(np.float32)
    out = Tensor(xn).conv2d(Tensor(wn), Tensor(bn), **kw)
    ref = conv(*(torch.from_numpy(a) for a in (xn, wn, bn)), **kw)
    (reduced,) = [u for u in out.uop.toposort if u.op is Ops.REDUCE_AXIS]
    assert math.prod(reduced.src[0].shape) == ref.numel() * math.prod(cfg["w"][1:])
    GlobalCounters.reset()
    out.realize()
    last = (kw["stride"] if isinstance(kw["stride"], int) else kw["stride"][-1]) > 1
    assert GlobalCounters.kernel_count == (2 if last else 1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_strided_conv_input_gradient_gathers_its_column_taps_per_phase() -> None:
    """In training the input's gradient from the column planes (Tensor._column_grad) sums, per output column phase,
    the taps of that phase shifted, over the output's columns as (column, phase) pairs: a phase's taps are whole
    planes there (taps 0 and 2 in phase 0, tap 1 in phase 1 for 3x3 s=2). The window gradient interleaved zeros into
    every tap first and read the flat columns lane by lane (2.1 -> 0.9 ms for 16 -> 32 channels on 32^2, batch 32, one
    core). Values as torch's."""
    rng = np.random.default_rng(0)
    xn, wn, gn = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 12, 12), (4, 3, 3, 3), (2, 4, 6, 6)))
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    (dx,) = x.conv2d(w, stride=2, padding=1).gradient(x, gradient=Tensor(gn))
    sched = dx.schedule()
    scatter = [si.ast for si in sched if not any(u.op is Ops.REDUCE_AXIS for u in si.ast.toposort)]
    assert [ast.src[0].src[1].arg.shape[-2:] for ast in scatter] == [(7, 2)]  # 14 padded columns
    run_schedule(sched)
    xt, wt = torch.from_numpy(xn).requires_grad_(), torch.from_numpy(wn)
    F.conv2d(xt, wt, stride=2, padding=1).backward(torch.from_numpy(gn))
    np.testing.assert_allclose(dx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_strided_conv_replays_the_graph_of_its_gradient_mode() -> None:
    """conv2d's graph is recorded and replayed per kind of arguments (_replayed): whether gradients flow is part of
    that kind, so the same shapes with gradients after a call without them get the training graph (over phases)."""

    def reduced(x: Tensor, w: Tensor) -> int:
        (r,) = [u for u in x.conv2d(w, stride=2, padding=1).uop.toposort if u.op is Ops.REDUCE_AXIS]
        return math.prod(r.src[0].shape)

    shapes = ((2, 3, 9, 9), (4, 3, 3, 3))
    plain = reduced(*(Tensor.ones(*s) for s in shapes))
    trained = reduced(*(Tensor.ones(*s).requires_grad_() for s in shapes))
    assert plain == 2 * 4 * 5 * 5 * 3 * 9 and trained == 2 * 4 * 5 * 5 * 3 * 12  # 3x3 taps; 3 x (2 row phases of 2)


@pytest.mark.parametrize("padding", [1, 2, (1, 0)])
def test_conv2d_gradient_of_a_sum(padding) -> None:
    # a sum's backward is a broadcast constant: then both factors of the window gradient (output gradient and weight)
    # are the same at every window position, and the input's edges still get fewer taps
    check(
        lambda x, w: x.conv2d(w, padding=padding).sum(),
        lambda x, w: F.conv2d(x, w, padding=padding).sum(),
        [(2, 3, 6, 7), (4, 3, 3, 3)],
        atol=1e-4,
    )


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_negative_padding_crops(stride: int) -> None:
    # torch takes no negative padding: compared with a conv of the cropped input
    check(
        lambda x, w: x.conv2d(w, padding=(-1, 0, -1, 0), stride=stride),
        lambda x, w: F.conv2d(x[:, :, 1:, 1:], w, padding=(0, 0), stride=stride),
        [(1, 2, 8, 9), (3, 2, 3, 3)],
        atol=1e-4,
    )


def test_zero_size_batches() -> None:
    check(lambda x, w: x.conv2d(w), lambda x, w: F.conv2d(x, w), [(0, 3, 5, 5), (4, 3, 3, 3)])
    check(lambda x, w, b: x.linear(w, b), F.linear, [(0, 5), (3, 5), (3,)])
    check(lambda x: x.softmax(-1), lambda x: x.softmax(-1), [(0, 5)])
    check(lambda x: x.max_pool2d(2), lambda x: F.max_pool2d(x, 2), [(0, 2, 4, 4)])


def test_conv2d_input_gradient_is_one_reduce_over_the_shifted_taps() -> None:
    # the window's gradient is stated directly (gradient.define_gradient): col2im's 9 shifted taps are summed inside
    # the sum over output channels, one reduce kernel of 9 shifted loads of the output gradient and 9 of the weight
    # (the other kernel is the forward conv, which square's derivative reads); no window gradient 9 times the
    # input's size is stored, nor a reduce over the repeated input's copies
    from lazygrad.uop.ops import Ops

    x = Tensor(np.random.default_rng(0).standard_normal((4, 3, 9, 9)).astype(np.float32), requires_grad=True)
    w = Tensor(np.random.default_rng(1).standard_normal((5, 3, 3, 3)).astype(np.float32))
    x.conv2d(w, padding=1).square().sum().backward()
    sched = [si for si in x.grad.schedule() if si.ast.op is Ops.SINK]
    assert len(sched) == 2 and all(sum(u.op is Ops.REDUCE_AXIS for u in si.ast.toposort) == 1 for si in sched)
    assert max(b.size for si in sched for b in si.bufs) == 4 * 5 * 9 * 9  # the forward conv's output
    assert sum(u.op is Ops.LOAD for u in sched[-1].ast.toposort) == 18


def test_conv2d_prime_sizes() -> None:
    check(
        lambda x, w: x.conv2d(w, padding=2),
        lambda x, w: F.conv2d(x, w, padding=2),
        [(1, 2, 13, 11), (5, 2, 7, 5)],
        atol=1e-4,
    )


def test_conv2d_non_contiguous_input() -> None:
    # channels-last storage viewed as NCHW
    check(
        lambda x, w: x.permute(0, 3, 1, 2).conv2d(w, padding=1),
        lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w, padding=1),
        [(2, 5, 5, 3), (4, 3, 3, 3)],
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "cfg",
    [
        dict(x=(2, 3, 10), w=(4, 3, 3)),
        dict(x=(1, 2, 13), w=(3, 2, 5), stride=3, padding=2),
        dict(x=(2, 4, 9), w=(4, 2, 2), groups=2, dilation=3),
    ],
    ids=str,
)
def test_conv1d(cfg: dict) -> None:
    kw = {k: v for k, v in cfg.items() if k not in ("x", "w")}
    check(lambda x, w: x.conv2d(w, **kw), lambda x, w: F.conv1d(x, w, **kw), [cfg["x"], cfg["w"]], atol=1e-4)


def test_conv_errors() -> None:
    with pytest.raises(ValueError, match=r"\(1, 3, 5, 5\).*\(2, 4, 3, 3\)"):
        Tensor.ones(1, 3, 5, 5).conv2d(Tensor.ones(2, 4, 3, 3))
    with pytest.raises(ValueError, match="groups"):
        Tensor.ones(1, 4, 5, 5).conv2d(Tensor.ones(3, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="larger than"):
        Tensor.ones(1, 1, 2, 2).conv2d(Tensor.ones(1, 1, 3, 3))


@pytest.mark.parametrize(
    "cfg",
    [
        dict(x=(2, 3, 5, 5), w=(3, 4, 3, 3)),
        dict(x=(1, 2, 4, 5), w=(2, 3, 3, 2), stride=2),
        dict(x=(1, 2, 5, 5), w=(2, 2, 3, 3), stride=2, padding=1, output_padding=1),
        dict(x=(1, 4, 3, 4), w=(4, 1, 3, 3), groups=2, stride=(1, 2)),
        dict(x=(1, 2, 4, 4), w=(2, 3, 2, 3), dilation=2, padding=1),
        dict(x=(1, 1, 1, 1), w=(1, 1, 1, 1)),
        dict(x=(2, 4, 5, 5), w=(4, 3, 4, 4), stride=2, padding=1),  # a DCGAN / U-Net upsampling layer
        dict(x=(1, 4, 5, 5), w=(4, 2, 3, 3), stride=2, groups=2),
        dict(x=(2, 3, 5, 6), w=(3, 2, 2, 3), stride=(2, 3), padding=(0, 1), output_padding=(1, 2)),
        dict(x=(1, 1, 3, 3), w=(1, 1, 1, 1), stride=2, output_padding=1),  # rows past every tap: zeros
        dict(x=(1, 2, 4, 4), w=(2, 2, 3, 3), stride=2, padding=2, output_padding=1),
    ],
    ids=str,
)
def test_conv_transpose2d(cfg: dict) -> None:
    kw = {k: v for k, v in cfg.items() if k not in ("x", "w")}
    cout = cfg["w"][1] * kw.get("groups", 1)
    check(
        lambda x, w, b: x.conv_transpose2d(w, b, **kw),
        lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
        [cfg["x"], cfg["w"], (cout,)],
        atol=1e-4,
    )


@pytest.mark.parametrize(
    "cfg",
    [
        dict(x=(2, 4, 5, 5), w=(4, 3, 4, 4), stride=2, padding=1),
        dict(x=(1, 4, 5, 5), w=(4, 2, 3, 3), stride=2, groups=2),
        dict(x=(2, 3, 5, 6), w=(3, 2, 2, 3), stride=(2, 3), padding=(0, 1), output_padding=(1, 2)),
        dict(x=(1, 1, 3, 3), w=(1, 1, 1, 1), stride=2, output_padding=1),
        dict(x=(1, 2, 4, 4), w=(2, 2, 3, 3), stride=2, padding=2, output_padding=1),
        dict(x=(3, 5, 7, 9), w=(5, 2, 5, 5), stride=2, padding=2, output_padding=1),
        dict(x=(2, 3, 16, 16), w=(3, 4, 4, 4), stride=2, padding=1),
    ],
    ids=str,
)
def test_strided_conv_transpose_without_gradients_runs_over_flat_pixels(cfg: dict) -> None:
    """Without gradients the phases' full conv runs over its pixels as one flat axis of whole vectors (each input row
    padded with zeros to the output's width: a tap left of a row wraps into those zeros), not over rows of L + T - 1
    pixels (17 for a 16^2 input, 2 taps: no whole vectors). Values as torch's."""
    kw = {k: v for k, v in cfg.items() if k not in ("x", "w")}
    rng = np.random.default_rng(0)
    xn, wn = (rng.standard_normal(cfg[k]).astype(np.float32) for k in ("x", "w"))
    bn = rng.standard_normal(cfg["w"][1] * kw.get("groups", 1)).astype(np.float32)
    out = Tensor(xn).conv_transpose2d(Tensor(wn), Tensor(bn), **kw)
    s_ = kw["stride"] if isinstance(kw["stride"], tuple) else (kw["stride"],) * 2
    full = [n + -(-k // s) - 1 for n, k, s in zip(cfg["x"][2:], cfg["w"][2:], s_)]
    (reduced,) = [u for u in out.uop.toposort if u.op is Ops.REDUCE_AXIS]
    assert -(-full[0] * full[1] // 16) * 16 in reduced.src[0].shape
    ref = F.conv_transpose2d(*(torch.from_numpy(a) for a in (xn, wn, bn)), **kw)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_strided_conv_transpose_gradients_read_the_output_gradient_as_stored_phases() -> None:
    """In training both gradients of a strided transposed conv read the output's gradient as the phases' channels
    (_space_to_depth): stored once, not loaded lane by lane s pixels apart by each (64 -> 32 channels, 4x4, s=2,
    16^2 -> 32^2, batch 16, one core: the input gradient 5.8 -> 2.1 ms). Values as torch's."""
    rng = np.random.default_rng(0)
    xn, wn, gn = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 5), (4, 3, 4, 4), (2, 3, 10, 10)))
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    dx, dw = x.conv_transpose2d(w, stride=2, padding=1).gradient(x, w, gradient=Tensor(gn))
    copies = {u.shape for t in (dx, dw) for u in t.uop.toposort if u.op is Ops.CONTIGUOUS}
    assert (2, 3 * 4, 6, 6) in copies  # (N, Cout * phases, L + T - 1 per dim)
    xt, wt = torch.from_numpy(xn).requires_grad_(), torch.from_numpy(wn).requires_grad_()
    F.conv_transpose2d(xt, wt, stride=2, padding=1).backward(torch.from_numpy(gn))
    np.testing.assert_allclose(dx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "cfg", [dict(x=(1, 2, 4), w=(2, 3, 5), s=3, p=2), dict(x=(1, 2, 3, 4, 3), w=(2, 2, 3, 3, 3), s=2, p=1)]
)
def test_strided_conv_transpose_1d_3d(cfg: dict) -> None:
    ref = {3: F.conv_transpose1d, 5: F.conv_transpose3d}[len(cfg["x"])]
    kw = dict(stride=cfg["s"], padding=cfg["p"], output_padding=1)
    check(lambda x, w: x.conv_transpose2d(w, **kw), lambda x, w: ref(x, w, **kw), [cfg["x"], cfg["w"]], atol=1e-4)


def test_strided_conv_transpose_multiplies_no_stuffed_zeros() -> None:
    """A stride-2 transposed conv computes its output phases as channels of one stride-1 conv (_phase_conv_transpose):
    about the multiplies of the transposed conv itself, where convolving the zero-stuffed input did 4x as many."""
    import math

    out = Tensor.ones(2, 16, 8, 8).conv_transpose2d(Tensor.ones(16, 8, 4, 4), stride=2, padding=1)
    reduced = [math.prod(u.src[0].shape) for u in out.uop.toposort if u.op is Ops.REDUCE_AXIS]
    macs = 2 * 16 * 8 * 8 * 8 * 4 * 4  # each input pixel meets each output channel through every tap once
    assert len(reduced) == 1 and macs <= reduced[0] <= macs * 1.5  # (the stuffed input: 4x)


# *** pooling ***

POOLS = [
    dict(x=(2, 3, 8, 8), kernel_size=2),
    dict(x=(1, 2, 7, 7), kernel_size=3, stride=2),
    dict(x=(1, 2, 7, 5), kernel_size=(3, 2), stride=(2, 1), padding=1),
    dict(x=(1, 1, 7, 7), kernel_size=3, stride=2, ceil_mode=True),
    dict(x=(1, 1, 8, 8), kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(x=(2, 1, 1), kernel_size=1),
    dict(x=(1, 1, 5, 5), kernel_size=5),
]


@pytest.mark.parametrize("cfg", POOLS, ids=str)
def test_max_pool2d(cfg: dict) -> None:
    kw = {k: v for k, v in cfg.items() if k != "x"}
    check(lambda x: x.max_pool2d(**kw), lambda x: F.max_pool2d(x, **kw), [cfg["x"]])


def test_max_pool2d_dilation() -> None:
    check(lambda x: x.max_pool2d(3, 1, dilation=2), lambda x: F.max_pool2d(x, 3, 1, dilation=2), [(1, 2, 9, 8)])


@pytest.mark.parametrize("cfg", POOLS, ids=str)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(cfg: dict, count_include_pad: bool) -> None:
    kw = {k: v for k, v in cfg.items() if k != "x"}
    check(
        lambda x: x.avg_pool2d(**kw, count_include_pad=count_include_pad),
        lambda x: F.avg_pool2d(x, **kw, count_include_pad=count_include_pad),
        [cfg["x"]],
    )


def test_pool_non_contiguous() -> None:
    check(lambda x: x.max_pool2d(2), lambda x: F.max_pool2d(x, 2), [("T", (4, 6, 3, 2))])
    check(lambda x: x.avg_pool2d(2), lambda x: F.avg_pool2d(x, 2), [("T", (4, 6, 3, 2))])


# *** softmax family ***


SOFTMAX_CASES = [((5,), 0), ((3, 7), -1), ((3, 7), 0), ((2, 3, 5), 1), ((1, 1), -1), (("T", (4, 6)), 1)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES)
def test_softmax_family(shape: Spec, axis: int) -> None:
    check(lambda x: x.softmax(axis), lambda x: x.softmax(axis), [shape], low=-5, high=5)
    check(lambda x: x.log_softmax(axis), lambda x: x.log_softmax(axis), [shape], low=-5, high=5)
    check(lambda x: x.logsumexp(axis), lambda x: x.logsumexp(axis), [shape], low=-5, high=5)
    check(lambda x: x.logsumexp(axis, keepdim=True), lambda x: x.logsumexp(axis, keepdim=True), [shape], low=-5, high=5)


def test_softmax_large_values_stay_finite() -> None:
    x = Tensor([[1000.0, 1000.0, -1000.0]])
    np.testing.assert_allclose(x.softmax().numpy(), [[0.5, 0.5, 0.0]], atol=1e-6)
    np.testing.assert_allclose(x.log_softmax().numpy()[0, :2], [np.log(0.5)] * 2, atol=1e-5)
    assert Tensor([-np.inf, -np.inf]).logsumexp().item() == -np.inf


# *** normalization ***


@pytest.mark.parametrize("shape,axis", [((4, 10), -1), ((2, 3, 5), (1, 2)), ((3, 1), -1), (("T", (6, 4)), -1)])
def test_layernorm(shape: Spec, axis: Any) -> None:
    n = 1 if isinstance(axis, int) else len(axis)
    full = shape[1] if shape[0] == "T" else shape
    check(lambda x: x.layernorm(axis, eps=1e-5), lambda x: F.layer_norm(x, full[-n:], eps=1e-5), [shape], atol=1e-4)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5, 5), (1, 3, 7)])
def test_batchnorm_functional(shape: tuple[int, ...]) -> None:
    eps = 1e-5

    def lg(x: Tensor, w: Tensor, b: Tensor, m: Tensor, v: Tensor) -> Tensor:
        return x.batchnorm(w, b, m.detach(), (v.detach().abs() + eps).rsqrt())

    def ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, m.detach(), v.detach().abs(), w, b, training=False, eps=eps)

    c = shape[1]
    rng = np.random.default_rng(1)
    made = [rng.uniform(-2, 2, s).astype(np.float32) for s in (shape, (c,), (c,), (c,), (c,))]
    lt = [Tensor(a).requires_grad_() for a in made[:3]] + [Tensor(a) for a in made[3:]]
    tt = [torch.tensor(a, requires_grad=i < 3) for i, a in enumerate(made)]
    out, r = lg(*lt), ref(*tt)
    np.testing.assert_allclose(out.numpy(), r.detach().numpy(), atol=1e-4, rtol=1e-4)
    up = rng.standard_normal(tuple(r.shape)).astype(np.float32)
    (r * torch.from_numpy(up)).sum().backward()
    grads = (out * Tensor(up)).sum().gradient(*lt[:3])
    for g, t in zip(grads, tt[:3]):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_batchnorm_training_statistics_grad() -> None:
    # the batch-statistics path differentiates through the mean and variance
    def lg(x: Tensor) -> Tensor:
        mean = x.mean((0, 2), keepdim=True)
        var = ((x - mean) ** 2).mean((0, 2))
        return x.batchnorm(None, None, mean.reshape(-1), (var + 1e-5).rsqrt())

    check(lg, lambda x: F.batch_norm(x, None, None, training=True), [(4, 3, 5)], atol=1e-4)


# *** dropout ***


def test_dropout_statistics_and_modes() -> None:
    Tensor.manual_seed(3)
    x = Tensor.ones(200, 200).requires_grad_()
    assert x.dropout(0.3) is x  # not training: identity
    with Tensor.train():
        y = x.dropout(0.3)
        vals = y.numpy()
    kept = vals != 0
    assert abs(1 - kept.mean() - 0.3) < 0.01, kept.mean()
    np.testing.assert_allclose(vals[kept], 1 / 0.7, rtol=1e-6)
    (g,) = y.sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), vals, rtol=1e-6)  # the gradient is the same mask and scale
    with Tensor.train():
        assert (x.dropout(1.0).numpy() == 0).all()
        assert x.dropout(0.0) is x
        other = x.dropout(0.3).numpy()
    assert (other != vals).any()  # a new mask per call
    with pytest.raises(ValueError, match="probability"):
        x.dropout(1.5)


def test_dropout_reuses_its_kernels() -> None:
    from lazygrad.engine.realize import _runners

    x = Tensor.ones(16, 8).realize()
    with Tensor.train():
        x.dropout(0.5).realize()
        before = len(_runners)
        masks = [x.dropout(0.5).numpy() for _ in range(3)]
    assert len(_runners) == before  # a new mask per call, from the same compiled kernels
    assert not (masks[0] == masks[1]).all()


# *** losses ***


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_indices(reduction: str, smoothing: float) -> None:
    check(
        lambda x, y: x.cross_entropy(y, reduction=reduction, label_smoothing=smoothing),
        lambda x, y: F.cross_entropy(x, y, reduction=reduction, label_smoothing=smoothing),
        [(6, 5), ("int", (6,), 5)],
    )


def test_cross_entropy_shapes() -> None:
    # (N, C, d) with indices (N, d), unbatched (C,), probabilities as targets
    check(lambda x, y: x.cross_entropy(y), F.cross_entropy, [(2, 4, 3), ("int", (2, 3), 4)])
    check(lambda x, y: x.cross_entropy(y), F.cross_entropy, [(7,), ("int", (), 7)])
    check(lambda x, p: x.cross_entropy(p.softmax(1)), lambda x, p: F.cross_entropy(x, p.softmax(1)), [(3, 4), (3, 4)])
    check(lambda x, y: x.cross_entropy(y), F.cross_entropy, [("T", (3, 5)), ("int", (3,), 5)])
    with pytest.raises(ValueError, match="target shape"):
        Tensor.ones(3, 4).cross_entropy(Tensor([1, 2]))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_sparse_categorical_crossentropy(smoothing: float, reduction: str) -> None:
    rng = np.random.default_rng(2)
    logits = rng.uniform(-3, 3, (8, 5)).astype(np.float32)
    y = np.array([0, 4, -1, 2, 3, -1, 1, 1])
    x = Tensor(logits).requires_grad_()
    out = x.sparse_categorical_crossentropy(Tensor(y.astype(np.int32)), label_smoothing=smoothing, reduction=reduction)
    xt = torch.tensor(logits, requires_grad=True)
    ref = F.cross_entropy(xt, torch.from_numpy(y), ignore_index=-1, label_smoothing=smoothing, reduction=reduction)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-5, rtol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=1e-5, rtol=1e-5)


def test_loss_target_errors() -> None:
    with pytest.raises(TypeError, match="integer"):
        Tensor.ones(3, 4).sparse_categorical_crossentropy(Tensor([1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="target shape"):
        Tensor.ones(3, 4).sparse_categorical_crossentropy(Tensor([1, 2]))
    with pytest.raises(TypeError, match="integer"):
        Tensor.ones(3, 4).nll_loss(Tensor([1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="reduction"):
        Tensor.ones(3, 4).cross_entropy(Tensor([1, 2, 0]), reduction="avg")


def test_sparse_categorical_crossentropy_batched() -> None:
    check(
        lambda x, y: x.sparse_categorical_crossentropy(y),
        lambda x, y: F.cross_entropy(x.permute(0, 2, 1), y),
        [(2, 3, 4), ("int", (2, 3), 4)],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy(reduction: str) -> None:
    check(
        lambda p, y: p.sigmoid().binary_crossentropy(y.sigmoid(), reduction=reduction),
        lambda p, y: F.binary_cross_entropy(p.sigmoid(), y.sigmoid(), reduction=reduction),
        [(4, 5), (4, 5)],
    )
    check(
        lambda x, y: x.binary_crossentropy_logits(y.sigmoid(), reduction=reduction),
        lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), reduction=reduction),
        [(4, 5), ("T", (4, 5))],
        low=-30,
        high=30,
    )


def test_binary_crossentropy_logits_pos_weight_and_extremes() -> None:
    w = np.array([0.5, 1.0, 2.0, 3.0], dtype=np.float32)
    check(
        lambda x, y: x.binary_crossentropy_logits(y.sigmoid(), pos_weight=Tensor(w)),
        lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid(), pos_weight=torch.from_numpy(w)),
        [(3, 4), (3, 4)],
    )
    # probabilities of exactly 0 and 1 give torch's clamped, finite loss
    p, y = Tensor([0.0, 1.0, 0.5]), Tensor([1.0, 0.0, 1.0])
    ref = F.binary_cross_entropy(torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(p.binary_crossentropy(y).item(), ref.item(), rtol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction: str) -> None:
    check(
        lambda x, y: x.log_softmax(1).nll_loss(y, reduction=reduction),
        lambda x, y: F.nll_loss(x.log_softmax(1), y, reduction=reduction),
        [(6, 4), ("int", (6,), 4)],
    )
    w = np.array([0.5, 2.0, 1.5], dtype=np.float32)
    check(
        lambda x, y: x.nll_loss(y, weight=Tensor(w), reduction=reduction),
        lambda x, y: F.nll_loss(x, y, weight=torch.from_numpy(w), reduction=reduction),
        [(2, 3, 5), ("int", (2, 5), 3)],
    )


def test_nll_loss_ignore_index() -> None:
    x, y = np.random.default_rng(0).uniform(-1, 0, (5, 3)).astype(np.float32), np.array([0, -100, 2, 1, -100])
    out = Tensor(x).nll_loss(Tensor(y.astype(np.int32)))
    np.testing.assert_allclose(out.item(), F.nll_loss(torch.from_numpy(x), torch.from_numpy(y)).item(), rtol=1e-6)


def test_one_hot() -> None:
    y = np.array([[0, 3], [2, 1], [4, 4]])
    out = Tensor(y.astype(np.int32)).one_hot(6)
    np.testing.assert_array_equal(out.numpy(), F.one_hot(torch.from_numpy(y), 6).numpy())
    assert Tensor([0, 2]).one_hot().shape == (2, 3)
    assert Tensor.ones(0, dtype=dtypes.int32).one_hot(4).shape == (0, 4)
    with pytest.raises(TypeError, match="integer"):
        Tensor([0.5]).one_hot(2)


# *** attention ***


@pytest.mark.parametrize(
    "q,k,mask",
    [
        ((2, 3, 5, 8), (2, 3, 5, 8), "causal"),
        ((2, 4, 8), (2, 6, 8), None),
        ((1, 2, 7, 4), (1, 2, 7, 4), "causal"),
        ((2, 4, 8), (2, 6, 8), "bool"),
        ((2, 4, 8), (2, 6, 8), "float"),
        ((1, 1, 1), (1, 1, 1), None),
    ],
    ids=str,
)
def test_scaled_dot_product_attention(q: tuple, k: tuple, mask: str | None) -> None:
    v = k[:-1] + (5,)
    bool_mask = np.random.default_rng(5).random((q[-2], k[-2])) < 0.7
    bool_mask[:, 0] = True  # every row attends somewhere

    def run(qq: Any, kk: Any, vv: Any, *m: Any, lib: Any) -> Any:
        if mask == "causal":
            return lib(qq, kk, vv, is_causal=True)
        return lib(qq, kk, vv, attn_mask=m[0] if m else None)

    specs: list[Spec] = [q, k, v] + ([(q[-2], k[-2])] if mask == "float" else [])
    if mask == "bool":
        check(
            lambda a, b, c: a.scaled_dot_product_attention(b, c, attn_mask=Tensor(bool_mask)),
            lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=torch.from_numpy(bool_mask)),
            specs,
            atol=1e-5,
        )
        return
    check(
        lambda *a: run(*a, lib=Tensor.scaled_dot_product_attention),
        lambda *a: run(*a, lib=F.scaled_dot_product_attention),
        specs,
        atol=1e-5,
    )


def test_attention_errors() -> None:
    with pytest.raises(ValueError, match="attention"):
        Tensor.ones(2, 4, 8).scaled_dot_product_attention(Tensor.ones(2, 4, 7), Tensor.ones(2, 4, 7))
    with pytest.raises(ValueError, match="not both"):
        q = Tensor.ones(2, 4, 8)
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(4, 4), is_causal=True)


def test_binary_cross_entropy_gradient_at_0_and_1() -> None:
    """A saturated probability (sigmoid(-100) is 0.0 in float32) gave a NaN gradient through the clamped logs;
    torch's is (x - y) / max(x (1 - x), 1e-12): 0 where x == y, +-1e12 where x is wrong and saturated. And
    -log(1 - 1e-7) was 1.19e-7 (log of a rounded 1 - x; torch's log1p gives 1.0e-7)."""
    from lazygrad.nn import functional as LF

    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5, 1e-7, 0.3], np.float32)
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.25], np.float32)
    for reduction in ("mean", "sum", "none"):
        t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out = LF.binary_cross_entropy(t, Tensor(y), reduction=reduction)
        ref = F.binary_cross_entropy(tt, torch.tensor(y), reduction=reduction)
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5)
        out.sum().backward()
        ref.sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-5)


def test_cosine_similarity_of_a_zero_vector() -> None:
    """The norm through sqrt had an infinite gradient at a zero vector: NaN gradients (torch's are finite, the
    norm clamped at eps)."""
    from lazygrad.nn import functional as LF

    a = np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0], [1.0, -2.0, 0.5]], np.float32)
    b = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5]], np.float32)
    x1, x2 = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    t1, t2 = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, ref = LF.cosine_similarity(x1, x2, dim=1), F.cosine_similarity(t1, t2, dim=1)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-7)
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x1.grad.numpy(), t1.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(x2.grad.numpy(), t2.grad.numpy(), rtol=1e-5)
