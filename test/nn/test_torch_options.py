"""torch options lazygrad once refused, against torch (values, in-place effects and gradients): Embedding's max_norm
and scale_grad_by_freq, fractional max pooling, AdaptiveLogSoftmaxWithLoss, grid_sample's bicubic and 5-D modes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import lazygrad.nn.functional as F
from lazygrad import Tensor, dtypes, nn
from test.opcheck import randn


def _ints(shape: tuple[int, ...], high: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


def _close(ours: Tensor, ref: torch.Tensor, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=tol, atol=tol)


# *** Embedding(max_norm, norm_type, scale_grad_by_freq) ***


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
@pytest.mark.parametrize("shape, padding_idx", [((9,), None), ((3, 5), 2), ((1,), None)])
def test_embedding_max_norm_renorms_rows_in_place(norm_type, scale_grad_by_freq, shape, padding_idx) -> None:
    w, idx, up = randn(11, 4, seed=1) * 2, _ints(shape, 11), randn(*shape, 4, seed=2)
    kw = {"padding_idx": padding_idx, "max_norm": 1.5, "norm_type": norm_type, "scale_grad_by_freq": scale_grad_by_freq}
    ours, ref = nn.Embedding(11, 4, _weight=Tensor(w), **kw), torch.nn.Embedding(11, 4, _weight=torch.tensor(w), **kw)
    out, tout = ours(Tensor(idx)), ref(torch.tensor(idx))
    _close(out, tout)
    _close(ours.weight, ref.weight)  # the looked-up rows renormalized in place, the others as they were
    (out * Tensor(up)).sum().backward()
    (tout * torch.tensor(up)).sum().backward()
    _close(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_functional_embedding_options(dtype) -> None:
    w, idx, up = (randn(6, 3, seed=4) * 3).astype(dtype), _ints((4, 3), 6, seed=5), randn(4, 3, 3, seed=6)
    ow, tw = Tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = F.embedding(Tensor(idx), ow, max_norm=2.0, scale_grad_by_freq=True)
    with torch.no_grad():  # torch renorms a leaf in place only outside autograd
        TF.embedding(torch.tensor(idx), tw, max_norm=2.0)
    tout = TF.embedding(torch.tensor(idx), tw, scale_grad_by_freq=True)
    assert out.dtype == (dtypes.float32 if dtype == np.float32 else dtypes.float64)
    _close(out, tout)
    _close(ow, tw)
    (out * Tensor(up.astype(dtype))).sum().backward()
    (tout * torch.tensor(up.astype(dtype))).sum().backward()
    _close(ow.grad, tw.grad)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_max_norm_and_scale_grad_by_freq(mode: str) -> None:
    """Values and the renorm in place against torch's EmbeddingBag; the gradient against torch's Embedding with the
    bags reduced by hand: torch 2.13's CPU embedding_bag divides some rows by another row's count (pytorch#190063)."""
    w, idx, offsets = randn(8, 5, seed=7) * 2, _ints((12,), 8, seed=8), [0, 3, 3, 7]
    kw = {"max_norm": 1.0, "scale_grad_by_freq": mode != "max", "mode": mode}
    ours, ref = (
        nn.EmbeddingBag(8, 5, _weight=Tensor(w), **kw),
        torch.nn.EmbeddingBag(8, 5, _weight=torch.tensor(w), **kw),
    )
    out, tout = ours(Tensor(idx), Tensor(np.array(offsets))), ref(torch.tensor(idx), torch.tensor(offsets))
    _close(out, tout)
    _close(ours.weight, ref.weight)
    tw = torch.tensor(w, requires_grad=True)
    with torch.no_grad():
        TF.embedding(torch.tensor(idx), tw, max_norm=1.0)
    rows = TF.embedding(torch.tensor(idx), tw, scale_grad_by_freq=mode != "max")
    reduce = {"sum": lambda r: r.sum(0), "mean": lambda r: r.mean(0), "max": lambda r: r.max(0).values}[mode]
    bags = [reduce(rows[a:b]) if b > a else torch.zeros(5) for a, b in zip(offsets, offsets[1:] + [len(idx)])]
    up = randn(*tout.shape, seed=9)
    (out * Tensor(up)).sum().backward()
    (torch.stack(bags) * torch.tensor(up)).sum().backward()
    _close(ours.weight.grad, tw.grad)


# *** fractional max pooling ***

_FRACTIONAL = [
    ((2, 3, 9, 8), (3, 2), {"output_size": (4, 5)}),
    ((3, 7, 7), 2, {"output_size": (6, 3)}),  # unbatched
    ((1, 2, 10, 9), 3, {"output_ratio": 0.5}),
    ((2, 1, 5, 5), (2, 3), {"output_ratio": (0.7, 0.5)}),
    ((1, 1, 4, 4), 4, {"output_size": 1}),
    ((1, 2, 5, 6, 7), (2, 3, 2), {"output_size": (3, 2, 4)}),
    ((2, 6, 6, 5), 2, {"output_ratio": 0.6}),  # 3-D unbatched
    ((1, 1, 3, 4, 3), 1, {"output_size": 2}),
]


@pytest.mark.parametrize("case", range(len(_FRACTIONAL)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fractional_max_pool_with_torchs_samples(case: int, dtype) -> None:
    shape, kernel, size = _FRACTIONAL[case]
    nd = 3 if case >= 5 else 2
    planes = shape[:2] if len(shape) == nd + 2 else (1, shape[0])
    x, up = randn(*shape, seed=case).astype(dtype), None
    u = np.random.default_rng(case).uniform(size=(*planes, nd)).astype(dtype)
    ours = (nn.FractionalMaxPool2d if nd == 2 else nn.FractionalMaxPool3d)(kernel, **size, return_indices=True)
    ref = (torch.nn.FractionalMaxPool2d if nd == 2 else torch.nn.FractionalMaxPool3d)(
        kernel, **size, return_indices=True
    )
    ours._random_samples, ref._random_samples = Tensor(u), torch.tensor(u)
    ox, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (out, idx), (tout, tidx) = ours(ox), ref(tx)
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    assert idx.dtype == dtypes.default_int  # (torch: int64) as every pooling index
    up = randn(*tout.shape, seed=9).astype(dtype)
    (out * Tensor(up)).sum().backward()
    (tout * torch.tensor(up)).sum().backward()
    _close(ox.grad, tx.grad)
    pool = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    np.testing.assert_array_equal(
        pool(Tensor(x), kernel, **size, _random_samples=Tensor(u)).numpy(), tout.detach().numpy()
    )


def test_fractional_max_pool_draws_its_own_samples() -> None:
    """Without samples: each output is the maximum of a kernel-sized window, windows cover the input in order."""
    x = Tensor(np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8))
    out = F.fractional_max_pool2d(x, 2, output_size=5).numpy()[0, 0]
    assert out.shape == (5, 5) and out[-1, -1] == 63
    assert (np.diff(out, axis=0) > 0).all() and (np.diff(out, axis=1) > 0).all()


def test_fractional_max_pool_errors_as_torch() -> None:
    x = Tensor(randn(2, 3, 7, 7))
    for lib, t in ((F, x), (TF, torch.tensor(x.numpy()))):
        with pytest.raises(RuntimeError, match="pool height 3 too large relative to input height 7"):
            lib.fractional_max_pool2d(t, 3, output_size=6)
        with pytest.raises(ValueError, match="requires specifying either an output_size or an output_ratio"):
            lib.fractional_max_pool2d(t, 3)
        with pytest.raises(RuntimeError, match="no less then input batch size"):
            samples = np.random.default_rng(0).uniform(size=(1, 3, 2)).astype(np.float32)
            lib.fractional_max_pool2d(
                t, 3, output_size=3, _random_samples=(Tensor if lib is F else torch.tensor)(samples)
            )
    with pytest.raises(RuntimeError, match="pool time 2 too large relative to input time 4"):
        F.fractional_max_pool3d(Tensor(randn(2, 3, 4, 4, 4)), 2, output_size=(3, 2, 2))
    for lib in (nn, torch.nn):
        with pytest.raises(ValueError, match="requires specifying either an output size, or a pooling ratio"):
            lib.FractionalMaxPool2d(3)
        with pytest.raises(ValueError, match="only one of output_size and output_ratio may be specified"):
            lib.FractionalMaxPool3d(3, output_size=3, output_ratio=0.5)
        with pytest.raises(ValueError, match=r"output_ratio must be between 0 and 1 \(got 1.5\)"):
            lib.FractionalMaxPool2d(3, output_ratio=1.5)


# *** AdaptiveLogSoftmaxWithLoss ***


@pytest.mark.parametrize(
    "in_features, n_classes, cutoffs, div_value, head_bias, batch",
    [
        (8, 20, [5, 12], 4.0, False, 9),
        (16, 10, [3], 2.0, True, 7),
        (6, 30, [2, 10, 20], 1.5, True, 1),
        (8, 12, [4], 4.0, False, 0),
    ],
)
def test_adaptive_log_softmax_with_loss(in_features, n_classes, cutoffs, div_value, head_bias, batch) -> None:
    torch.manual_seed(0)
    ref = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value, head_bias)
    ours = nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value, head_bias)
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    assert sorted(ours.state_dict()) == sorted(state)
    ours.load_state_dict({k: Tensor(v) for k, v in state.items()})
    x = randn(max(batch, 1), in_features, seed=1)
    target = np.random.default_rng(2).integers(0, n_classes, max(batch, 1)).astype(np.int64)
    target[: min(len(cutoffs) + 1, len(target))] = ([0] + cutoffs)[
        : min(len(cutoffs) + 1, len(target))
    ]  # every cluster
    if batch == 0:  # unbatched: a 1-D input and a 0-D target
        x, target = x[0], target[0]
    ox, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, tout = ours(ox, Tensor(target)), ref(tx, torch.tensor(target))
    assert out.output.shape == tuple(tout.output.shape)
    _close(out.output, tout.output)
    _close(out.loss, tout.loss)
    out.loss.backward()
    tout.loss.backward()
    _close(ox.grad, tx.grad)
    for name, p in ref.named_parameters():
        grad = dict(ours.named_parameters())[name].grad
        if p.grad is None:  # a tail no row used: torch never ran it, ours ran it masked
            assert grad is None or not grad.numpy().any()
        elif p.numel():  # (a tail's hidden size in_features // div_value ** 2 may be 0)
            _close(grad, p.grad)
    if batch:
        _close(ours.log_prob(Tensor(x)), ref.log_prob(torch.tensor(x)))
        pred = ours.predict(Tensor(x))
        assert pred.dtype == dtypes.default_int and pred.tolist() == ref.predict(torch.tensor(x)).tolist()


def test_adaptive_log_softmax_errors_as_torch() -> None:
    for lib in (nn, torch.nn):
        with pytest.raises(ValueError, match="cutoffs should be a sequence of length larger than 0"):
            lib.AdaptiveLogSoftmaxWithLoss(4, 10, [])
        for cutoffs in ([5, 3], [0, 3], [3, 10], [3, 3]):
            with pytest.raises(ValueError, match="cutoffs should be a sequence of unique, positive integers"):
                lib.AdaptiveLogSoftmaxWithLoss(4, 10, cutoffs)
    model = nn.AdaptiveLogSoftmaxWithLoss(4, 10, [3])
    ref = torch.nn.AdaptiveLogSoftmaxWithLoss(4, 10, [3])
    for m, t in ((model, Tensor), (ref, torch.tensor)):
        with pytest.raises(RuntimeError, match="same size in the batch dimension"):
            m(t(randn(3, 4)), t(np.array([1, 2])))
        with pytest.raises(RuntimeError, match="1D target tensor expects 2D input tensors"):
            m(t(randn(2, 2, 4)), t(np.array([1, 2])))
        with pytest.raises(RuntimeError, match="0D target tensor expects 1D input tensors"):
            m(t(randn(2, 4)), t(np.array(1)))
        with pytest.raises(RuntimeError, match="multi-target not supported"):
            m(t(randn(2, 4)), t(np.array([[1], [2]])))


# *** grid_sample: bicubic, and 5-D inputs ***


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "mode, shape, grid_shape",
    [
        ("bicubic", (2, 3, 5, 7), (2, 4, 6, 2)),
        ("bicubic", (1, 1, 1, 3), (1, 2, 3, 2)),
        ("bilinear", (2, 2, 4, 5, 3), (2, 3, 2, 4, 3)),
        ("nearest", (1, 3, 3, 4, 5), (1, 2, 3, 2, 3)),
    ],
)
def test_grid_sample_modes_against_torch(mode, shape, grid_shape, padding_mode, align_corners) -> None:
    """Points inside, on the border and far outside (reflected several times): values, the input's gradient and the
    grid's (not nearest's, which has none)."""
    x0 = randn(*shape)
    grid0 = np.random.default_rng(1).uniform(-2.7, 2.7, grid_shape).astype(np.float32)
    x, grid = Tensor(x0, requires_grad=True), Tensor(grid0, requires_grad=True)
    tx, tgrid = torch.tensor(x0, requires_grad=True), torch.tensor(grid0, requires_grad=True)
    kw = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    out, ref = F.grid_sample(x, grid, **kw), TF.grid_sample(tx, tgrid, **kw)
    _close(out, ref, 1e-5)
    up = randn(*ref.shape, seed=3)
    (out * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    _close(x.grad, tx.grad, 1e-4)
    if mode != "nearest":
        _close(grid.grad, tgrid.grad, 1e-3)


def test_grid_sample_errors_as_torch() -> None:
    cases = [
        ((1, 2, 3, 3, 3), (1, 2, 2, 2, 3), {"mode": "bicubic"}, "bicubic interpolation only supports 4D input"),
        ((1, 2, 3, 3), (1, 2, 2, 3), {}, "expected grid to have size 2 in last dimension"),
        ((1, 2, 3, 3), (2, 2, 2, 2), {}, "expected grid and input to have same batch size"),
        ((1, 2, 3, 3), (1, 2, 2, 2, 2), {}, "expected 4D input and grid with same number of dimensions"),
    ]
    for shape, grid_shape, kw, match in cases:
        for fn, t in ((F.grid_sample, Tensor), (TF.grid_sample, torch.tensor)):
            with pytest.raises(RuntimeError, match=match):
                fn(t(randn(*shape)), t(randn(*grid_shape)), align_corners=False, **kw)


# *** InstanceNorm(track_running_stats=True) ***


@pytest.mark.parametrize(
    "cls, shape", [("InstanceNorm1d", (3, 4, 6)), ("InstanceNorm2d", (2, 3, 4, 5)), ("InstanceNorm3d", (2, 2, 3, 2, 3))]
)
@pytest.mark.parametrize("momentum, affine", [(0.1, False), (0.3, True), (None, True)])
def test_instance_norm_running_stats(cls: str, shape, momentum, affine: bool) -> None:
    """Two training steps move the running statistics as torch's; eval normalizes with them; gradients."""
    c = shape[1]
    ours = getattr(nn, cls)(c, momentum=momentum, affine=affine, track_running_stats=True)
    ref = getattr(torch.nn, cls)(c, momentum=momentum, affine=affine, track_running_stats=True)
    assert sorted(ours.state_dict()) == sorted(ref.state_dict())
    ours.train()  # (a lazygrad module follows Tensor.training until train() or eval() is called)
    for step in range(2):
        x0 = randn(*shape, seed=step) * 2 + 1
        x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        out, tout = ours(x), ref(tx)
        _close(out, tout)
        up = randn(*shape, seed=5)
        (out * Tensor(up)).sum().backward()
        (tout * torch.tensor(up)).sum().backward()
        _close(x.grad, tx.grad, 1e-4)
        _close(ours.running_mean, ref.running_mean)
        _close(ours.running_var, ref.running_var)
    ours.eval(), ref.eval()
    x0 = randn(*shape, seed=7)
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, tout = ours(x), ref(tx)
    _close(out, tout)
    out.sum().backward()
    tout.sum().backward()
    _close(x.grad, tx.grad)
    _close(ours.running_mean, ref.running_mean)


def test_functional_instance_norm_with_running_stats() -> None:
    x0, rm, rv = randn(2, 3, 5), randn(3, seed=1), np.abs(randn(3, seed=2)) + 0.5
    for use_input_stats in (True, False):
        ours_stats, ref_stats = (Tensor(rm), Tensor(rv)), (torch.tensor(rm), torch.tensor(rv))
        out = F.instance_norm(Tensor(x0), *ours_stats, use_input_stats=use_input_stats, momentum=0.2)
        tout = TF.instance_norm(torch.tensor(x0), *ref_stats, use_input_stats=use_input_stats, momentum=0.2)
        _close(out, tout)
        _close(ours_stats[0], ref_stats[0])
        _close(ours_stats[1], ref_stats[1])


# *** interpolate(antialias=True) ***


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(
    "shape, kw",
    [
        ((2, 3, 16, 12), {"size": (5, 4)}),
        ((1, 2, 9, 10), {"scale_factor": 0.3}),
        ((1, 1, 7, 9), {"scale_factor": (0.5, 0.75), "recompute_scale_factor": True}),
        ((1, 2, 5, 6), {"size": (11, 3)}),  # up along one axis, down along the other
        ((1, 2, 12, 10), {"size": (4, 3), "align_corners": True}),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpolate_antialias(mode: str, shape, kw, dtype) -> None:
    """Values and gradients against torch. (No output axis of size 1: there torch 2.13 gives every output row the
    first row's value, and lazygrad each row its own.)"""
    x0 = randn(*shape).astype(dtype)
    x, tx = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out = F.interpolate(x, mode=mode, antialias=True, **kw)
    ref = TF.interpolate(tx, mode=mode, antialias=True, **kw)
    assert out.shape == tuple(ref.shape)
    _close(out, ref)
    up = randn(*ref.shape, seed=2).astype(dtype)
    (out * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    _close(x.grad, tx.grad)


def test_interpolate_antialias_errors_as_torch() -> None:
    for fn, t in ((F.interpolate, Tensor), (TF.interpolate, torch.tensor)):
        for shape, mode in (((1, 2, 8), "linear"), ((1, 2, 8, 8), "nearest")):
            with pytest.raises(ValueError, match="Anti-alias option is restricted to bilinear, bicubic"):
                fn(t(randn(*shape)), size=3, mode=mode, antialias=True)


# *** MultiheadAttention(add_bias_kv, add_zero_attn) ***


@pytest.mark.parametrize("add_zero_attn", [False, True])
def test_attention_bias_kv_gradients_and_init(add_zero_attn: bool) -> None:
    """The learned extra key and value get torch's gradients; their init has torch's scale (std 1/sqrt(E))."""
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=add_zero_attn)
    ours = nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=add_zero_attn)
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    q, kv = randn(3, 2, 8, seed=1), randn(5, 2, 8, seed=2)
    out, tout = ours(Tensor(q), Tensor(kv), Tensor(kv))[0], ref(torch.tensor(q), torch.tensor(kv), torch.tensor(kv))[0]
    _close(out, tout)
    out.square().sum().backward()
    tout.square().sum().backward()
    _close(ours.bias_k.grad, ref.bias_k.grad, 1e-4)
    _close(ours.bias_v.grad, ref.bias_v.grad, 1e-4)
    std = nn.MultiheadAttention(256, 4, add_bias_kv=True).bias_k.numpy().std()
    assert abs(std - 1 / 16) < 0.015
