"""lazygrad.nn.functional against torch.nn.functional: the same call (torch's names, argument order and defaults) on
the same inputs, values and gradients, over batched and unbatched inputs, edge sizes and each function's options."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import lazygrad.nn.functional as F
from lazygrad import Tensor, nn
from test.opcheck import check, randn


def _ints(shape: tuple[int, ...], high: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


def _uniform(*shape: int, low: float = 0.02, high: float = 0.98, seed: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def _both(name: str, *args: Any, **kwargs: Any) -> tuple[Callable, Callable]:
    """F.name and torch's F.name called as torch's signature reads: the first tensor, `args`, the other tensors, then
    `kwargs` (numpy arrays there become tensors that need no gradient: torch has none for a loss's target)."""

    def call(mod: Any, tensor: Callable) -> Callable:
        kw = {k: tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        return lambda first, *ts: getattr(mod, name)(first, *args, *ts, **kw)

    return call(F, Tensor), call(TF, torch.tensor)


# (function, extra positional args, keyword args, inputs)
CASES: list[tuple[str, tuple, dict, list[np.ndarray]]] = [
    ("relu", (), {}, [randn(3, 5)]),
    ("relu6", (), {}, [randn(3, 5) * 4]),
    ("leaky_relu", (0.2,), {}, [randn(4, 3)]),
    ("elu", (), {"alpha": 0.7}, [randn(4, 3)]),
    ("celu", (), {"alpha": 1.3}, [randn(4, 3)]),
    ("selu", (), {}, [randn(4, 3)]),
    ("gelu", (), {}, [randn(4, 7)]),
    ("gelu", (), {"approximate": "tanh"}, [randn(4, 7)]),
    ("silu", (), {}, [randn(9)]),
    ("mish", (), {}, [randn(9)]),
    ("hardtanh", (-0.5, 0.7), {}, [randn(9)]),
    ("hardswish", (), {}, [randn(9) * 4]),
    ("hardsigmoid", (), {}, [randn(9) * 4]),
    ("hardshrink", (), {"lambd": 0.3}, [randn(9)]),
    ("softshrink", (), {"lambd": 0.3}, [randn(9)]),
    ("tanhshrink", (), {}, [randn(9)]),
    ("threshold", (0.1, -2.0), {}, [randn(9)]),
    ("logsigmoid", (), {}, [randn(9) * 10]),
    ("softsign", (), {}, [randn(9)]),
    ("softplus", (), {"beta": 2.0, "threshold": 3.0}, [randn(9) * 4]),
    ("glu", (), {"dim": 1}, [randn(3, 6, 2)]),
    ("softmax", (), {"dim": 1}, [randn(3, 6, 2)]),
    ("log_softmax", (), {"dim": -1}, [randn(3, 6)]),
    ("softmin", (), {"dim": 0}, [randn(3, 6)]),
    ("normalize", (), {"dim": -1}, [randn(3, 6)]),
    ("linear", (), {}, [randn(5, 4), randn(3, 4), randn(3)]),
    ("bilinear", (), {}, [randn(5, 4), randn(5, 3), randn(2, 4, 3), randn(2)]),
    ("conv1d", (), {"stride": 2, "padding": 1}, [randn(2, 4, 11), randn(6, 4, 3), randn(6)]),
    ("conv1d", (), {"padding": "same", "dilation": 2}, [randn(4, 10), randn(3, 4, 3)]),  # unbatched
    ("conv2d", (), {"stride": (1, 2), "padding": 1, "groups": 2}, [randn(2, 4, 7, 6), randn(6, 2, 3, 3), randn(6)]),
    ("conv3d", (), {"padding": 1}, [randn(1, 2, 4, 5, 3), randn(3, 2, 3, 3, 3)]),
    ("conv_transpose1d", (), {"stride": 2, "output_padding": 1}, [randn(2, 3, 5), randn(3, 4, 3), randn(4)]),
    ("conv_transpose2d", (), {"stride": 2, "padding": 1}, [randn(1, 3, 4, 5), randn(3, 2, 3, 3)]),
    ("max_pool1d", (3,), {"stride": 2, "padding": 1}, [randn(2, 3, 10)]),
    ("max_pool2d", (2,), {}, [randn(2, 3, 6, 7)]),
    ("max_pool2d", ((3, 2),), {"stride": 1, "ceil_mode": True}, [randn(3, 5, 7)]),  # unbatched
    ("max_pool3d", (2,), {}, [randn(1, 2, 4, 4, 5)]),
    ("avg_pool1d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, [randn(2, 3, 10)]),
    ("avg_pool2d", (3,), {"stride": 2, "ceil_mode": True}, [randn(2, 3, 7, 8)]),
    ("avg_pool2d", (2,), {"divisor_override": 3}, [randn(1, 2, 4, 6)]),
    ("avg_pool3d", (2,), {}, [randn(1, 2, 4, 4, 6)]),
    ("adaptive_avg_pool1d", (4,), {}, [randn(2, 3, 10)]),
    ("adaptive_avg_pool2d", ((3, 5),), {}, [randn(2, 3, 7, 10)]),
    ("adaptive_avg_pool2d", (1,), {}, [randn(2, 3, 5, 5)]),
    ("adaptive_avg_pool2d", ((None, 2),), {}, [randn(3, 5, 6)]),
    ("adaptive_avg_pool3d", (2,), {}, [randn(1, 2, 5, 4, 3)]),
    ("adaptive_max_pool1d", (3,), {}, [randn(2, 3, 10)]),
    ("adaptive_max_pool2d", ((2, 3),), {}, [randn(2, 3, 7, 7)]),
    ("pad", ((1, 2, 0, 3),), {"value": 0.5}, [randn(2, 3, 4)]),
    ("pad", ((2, 1),), {"mode": "reflect"}, [randn(2, 3, 5)]),
    ("interpolate", (), {"scale_factor": 2, "mode": "nearest"}, [randn(1, 2, 3, 4)]),
    ("interpolate", (), {"size": (5, 7), "mode": "bilinear", "align_corners": False}, [randn(1, 2, 3, 4)]),
    ("pixel_shuffle", (2,), {}, [randn(2, 8, 3, 4)]),
    ("pixel_unshuffle", (2,), {}, [randn(2, 2, 4, 6)]),
    ("dropout", (), {"p": 0.3, "training": False}, [randn(4, 5)]),
    ("layer_norm", ((5,),), {}, [randn(3, 4, 5), randn(5), randn(5)]),
    ("layer_norm", ((4, 5),), {"eps": 1e-3}, [randn(3, 4, 5)]),
    ("rms_norm", ((5,),), {}, [randn(3, 4, 5), randn(5)]),
    ("group_norm", (2,), {}, [randn(3, 4, 5), randn(4), randn(4)]),
    ("instance_norm", (), {}, [randn(2, 3, 4, 5)]),
    ("local_response_norm", (3,), {}, [randn(2, 5, 4, 4)]),
    ("cosine_similarity", (), {"dim": -1}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("pairwise_distance", (), {}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("pairwise_distance", (), {"p": 1.0, "keepdim": True}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("mse_loss", (), {}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("l1_loss", (), {"reduction": "sum"}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("smooth_l1_loss", (), {"beta": 0.5}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("huber_loss", (), {"delta": 0.7, "reduction": "none"}, [randn(4, 6), randn(4, 6, seed=1)]),
    ("binary_cross_entropy", (), {}, [_uniform(4, 6), _uniform(4, 6, seed=5)]),
    (
        "binary_cross_entropy",
        (),
        {"reduction": "sum", "weight": _uniform(4, 6)},
        [_uniform(4, 6), _uniform(4, 6, seed=5)],
    ),
    ("binary_cross_entropy_with_logits", (), {}, [randn(4, 6), _uniform(4, 6, seed=5)]),
    ("kl_div", (), {"reduction": "batchmean"}, [randn(4, 6), _uniform(4, 6, seed=5)]),
    ("kl_div", (), {"log_target": True}, [randn(4, 6), randn(4, 6, seed=5)]),
    ("poisson_nll_loss", (), {}, [randn(4, 6), _uniform(4, 6, high=4.0, seed=5)]),
    ("poisson_nll_loss", (), {"log_input": False, "full": True}, [_uniform(4, 6), _uniform(4, 6, high=4, seed=5)]),
    ("gaussian_nll_loss", (), {}, [randn(4, 6), randn(4, 6, seed=1), _uniform(4, 6)]),
    ("soft_margin_loss", (), {"target": np.sign(randn(4, 6, seed=2))}, [randn(4, 6)]),
    ("multilabel_soft_margin_loss", (), {}, [randn(4, 6), (randn(4, 6, seed=2) > 0).astype(np.float32)]),
    ("margin_ranking_loss", (), {"margin": 0.2}, [randn(6), randn(6, seed=1), np.sign(randn(6, seed=2))]),
    ("hinge_embedding_loss", (), {}, [randn(6), np.sign(randn(6, seed=2))]),
    ("cosine_embedding_loss", (), {"margin": 0.1}, [randn(5, 4), randn(5, 4, seed=1), np.sign(randn(5, seed=2))]),
    ("triplet_margin_loss", (), {"swap": True}, [randn(5, 4), randn(5, 4, seed=1), randn(5, 4, seed=2)]),
    ("unfold", (3,), {"padding": 1, "stride": 2}, [randn(2, 3, 7, 6)]),
    ("unfold", ((2, 3),), {"dilation": 2}, [randn(3, 8, 9)]),  # unbatched
    ("fold", ((7, 6), 3), {"padding": 1, "stride": 2}, [randn(2, 27, 12)]),
    ("fold", ((5, 6), (2, 3)), {"dilation": (1, 2)}, [randn(1, 12, 8)]),
    (
        "scaled_dot_product_attention",
        (),
        {"is_causal": True},
        [randn(2, 3, 5, 4), randn(2, 3, 5, 4), randn(2, 3, 5, 4)],
    ),
]


@pytest.mark.parametrize("name, args, kwargs, inputs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_functional_matches_torch(name: str, args: tuple, kwargs: dict, inputs: list[np.ndarray]) -> None:
    check(*_both(name, *args, **kwargs), inputs, atol=1e-5, grad_atol=1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"reduction": "sum"},
        {"reduction": "none"},
        {"ignore_index": 2},
        {"label_smoothing": 0.1},
        {"label_smoothing": 0.2, "ignore_index": 1, "reduction": "sum"},
        {"weight": "w"},
        {"weight": "w", "label_smoothing": 0.3},
        {"weight": "w", "label_smoothing": 0.1, "ignore_index": 0},
    ],
)
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4), (5,)])
def test_cross_entropy_with_class_indices(kwargs: dict, shape: tuple[int, ...]) -> None:
    classes = shape[0] if len(shape) == 1 else shape[1]
    target = _ints(() if len(shape) == 1 else (shape[0], *shape[2:]), classes)
    w = np.linspace(0.5, 2.0, classes).astype(np.float32)

    def call(mod: Any, tensor: Callable) -> Callable:
        kw = {k: (tensor(w) if v == "w" else v) for k, v in kwargs.items()}
        return lambda x: mod.cross_entropy(x, tensor(target), **kw)

    check(call(F, Tensor), call(TF, torch.tensor), [randn(*shape)], atol=1e-5, grad_atol=1e-5)


@pytest.mark.parametrize("kwargs", [{}, {"label_smoothing": 0.2}, {"reduction": "sum"}])
def test_cross_entropy_with_class_probabilities(kwargs: dict) -> None:
    probs = torch.tensor(randn(4, 5, 3, seed=7)).softmax(1).numpy()
    check(
        lambda x, p: F.cross_entropy(x, p, **kwargs),
        lambda x, p: TF.cross_entropy(x, p, **kwargs),
        [randn(4, 5, 3), probs],
        atol=1e-5,
    )


def test_nll_loss_and_embedding_match_torch() -> None:
    logp, target = torch.tensor(randn(6, 4)).log_softmax(1).numpy(), _ints((6,), 4)
    check(lambda x: F.nll_loss(x, Tensor(target)), lambda x: TF.nll_loss(x, torch.tensor(target)), [logp])
    idx = _ints((3, 5), 7)
    for padding_idx in (None, 2):
        check(
            lambda w: F.embedding(Tensor(idx), w, padding_idx=padding_idx),
            lambda w: TF.embedding(torch.tensor(idx), w, padding_idx=padding_idx),
            [randn(7, 4)],
        )


def test_one_hot_and_batch_norm_eval_match_torch() -> None:
    idx = _ints((2, 5), 6)
    np.testing.assert_array_equal(F.one_hot(Tensor(idx), 6).numpy(), TF.one_hot(torch.tensor(idx), 6).numpy())
    mean, var = randn(3, seed=2), _uniform(3, low=0.5, high=2)
    check(
        lambda x, w, b: F.batch_norm(x, Tensor(mean), Tensor(var), w, b),
        lambda x, w, b: TF.batch_norm(x, torch.tensor(mean), torch.tensor(var), w, b),
        [randn(4, 3, 5), randn(3, seed=3), randn(3, seed=4)],
    )


def test_batch_norm_training_moves_the_running_statistics_as_torch() -> None:
    x = randn(8, 3, 5)
    lg_mean, lg_var = Tensor.zeros(3).contiguous().realize(), Tensor.ones(3).contiguous().realize()
    th_mean, th_var = torch.zeros(3), torch.ones(3)
    for step in range(3):
        out = F.batch_norm(Tensor(x * (step + 1)), lg_mean, lg_var, training=True, momentum=0.2).numpy()
        ref = TF.batch_norm(torch.tensor(x * (step + 1)), th_mean, th_var, training=True, momentum=0.2)
        np.testing.assert_allclose(out, ref.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(lg_mean.numpy(), th_mean.numpy(), atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(lg_var.numpy(), th_var.numpy(), atol=1e-6, rtol=1e-5)


def test_dropout_in_training_zeroes_and_scales() -> None:
    x = Tensor.ones(200, 50)
    out = F.dropout(x, p=0.25).numpy()
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.2 < (out == 0).mean() < 0.3
    # whole channels: every value of a (sample, channel) plane is kept or dropped together
    planes = F.dropout2d(Tensor.ones(40, 30, 3, 4), p=0.5).numpy().reshape(40, 30, 12)
    assert (planes.min(-1) == planes.max(-1)).all() and 0.3 < (planes[..., 0] == 0).mean() < 0.7
    np.testing.assert_array_equal(F.dropout(x, 0.5, training=False).numpy(), x.numpy())


def test_gumbel_softmax_hard_is_one_hot_with_soft_gradient() -> None:
    logits = Tensor(randn(6, 5), requires_grad=True)
    y = F.gumbel_softmax(logits, tau=0.5, hard=True)
    values = y.numpy()
    np.testing.assert_array_equal(values.sum(-1), np.ones(6))
    assert set(np.unique(values)) <= {0.0, 1.0}
    (y * Tensor(randn(6, 5, seed=2))).sum().backward()
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: F.conv2d(Tensor.ones(3, 4), Tensor.ones(2, 3, 1, 1)), RuntimeError, "3D or 4D input"),
        (lambda: F.max_pool2d(Tensor.ones(5), 2), RuntimeError, "3D or 4D input"),
        (lambda: F.mse_loss(Tensor.ones(3, 2), Tensor.ones(3)), RuntimeError, "target shape"),
        (lambda: F.cross_entropy(Tensor.ones(3, 2), Tensor([0, 1, 0]), reduction="avg"), ValueError, "reduction"),
        (lambda: F.layer_norm(Tensor.ones(3, 4), (3,)), RuntimeError, "normalized_shape"),
        (lambda: F.glu(Tensor.ones(3, 5)), RuntimeError, "even"),
        (lambda: F.dropout(Tensor.ones(3), 1.5), ValueError, "between 0 and 1"),
        (lambda: F.pixel_shuffle(Tensor.ones(1, 3, 2, 2), 2), RuntimeError, "divisible"),
        (lambda: F.gelu(Tensor.ones(3), approximate="erf"), RuntimeError, "approximate"),
    ],
)
def test_bad_arguments_raise_torchs_class(call: Callable, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


# (input, offsets, options): 2-D bags, 1-D bags cut at offsets (empty bags, a last offset), padding and weights
_BAGS: list[tuple[np.ndarray, np.ndarray | None, dict]] = [
    (_ints((4, 5), 11), None, {}),
    (_ints((1, 1), 11), None, {}),
    (_ints((3, 7), 11, seed=5), None, {"padding_idx": 2}),
    (_ints((13,), 11), np.array([0, 3, 3, 9]), {}),
    (_ints((13,), 11, seed=6), np.array([0, 5, 13]), {"include_last_offset": True}),
    (_ints((13,), 11, seed=7), np.array([0, 4, 4, 13]), {"include_last_offset": True}),
    (_ints((17,), 11, seed=8), np.array([0, 1, 2, 16]), {"padding_idx": 3}),
    (_ints((17,), 11, seed=8), np.array([0, 6]), {"padding_idx": -1}),
]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("case", range(len(_BAGS)))
def test_embedding_bag(mode: str, case: int) -> None:
    """Values and the weight's gradient against torch, also with per-sample weights (sum) and their gradient."""
    idx, offsets, options = _BAGS[case]
    weight = randn(11, 6, seed=case)
    ours = nn.EmbeddingBag(11, 6, mode=mode, _weight=Tensor(weight), **options)
    ref = torch.nn.EmbeddingBag(11, 6, mode=mode, _weight=torch.tensor(weight), **options)
    per_sample = randn(*idx.shape, seed=9) if mode == "sum" else None
    args = [Tensor(idx), None if offsets is None else Tensor(offsets)]
    targs = [torch.tensor(idx), None if offsets is None else torch.tensor(offsets)]
    psw = None if per_sample is None else Tensor(per_sample, requires_grad=True)
    tpsw = None if per_sample is None else torch.tensor(per_sample, requires_grad=True)
    out, tout = ours(*args, per_sample_weights=psw), ref(*targs, per_sample_weights=tpsw)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    up = randn(*tout.shape, seed=10)
    (out * Tensor(up)).sum().backward()
    (tout * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    if psw is not None:
        np.testing.assert_allclose(psw.grad.numpy(), tpsw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_bag_errors_as_torch() -> None:
    w, flat = Tensor(randn(10, 3)), Tensor(np.array([1, 2, 3]))
    with pytest.raises(NotImplementedError, match="per_sample_weights"):
        F.embedding_bag(flat, w, Tensor(np.array([0, 2])), mode="mean", per_sample_weights=Tensor.ones(3))
    with pytest.raises(ValueError, match="offsets has to be None"):
        F.embedding_bag(flat.reshape(1, 3), w, Tensor(np.array([0, 2])))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor"):
        F.embedding_bag(flat, w)
    with pytest.raises(ValueError, match="mode has to be one of"):
        F.embedding_bag(flat, w, Tensor(np.array([0])), mode="prod")
    with pytest.raises(TypeError, match="integer indices"):
        F.embedding_bag(Tensor([1.0, 2.0]), w, Tensor(np.array([0])))
    bag = nn.EmbeddingBag.from_pretrained(Tensor(randn(10, 3)), mode="sum")
    assert not bag.weight.requires_grad and repr(bag) == "EmbeddingBag(10, 3, mode='sum')"


@pytest.mark.parametrize("mode", ["max", "sum", "mean"])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_of_no_entries(mode: str, include_last_offset: bool) -> None:
    """No entries at all: zeros and a zero weight gradient, as torch (max raised: a max over zero entries). Found by an
    EmbeddingBag hunt (seed 81014)."""
    w = randn(4, 3)
    x, tx = Tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    kw = {"mode": mode, "include_last_offset": include_last_offset}
    out = F.embedding_bag(Tensor(np.zeros(0, np.int64)), x, Tensor(np.array([0, 0, 0])), **kw)
    ref = TF.embedding_bag(torch.zeros(0, dtype=torch.int64), tx, torch.tensor([0, 0, 0]), **kw)
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def _ctc_case(steps: int, batch: int, classes: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((steps, batch, classes)).astype(np.float32)
    targets = rng.integers(1, classes, (batch, width)).astype(np.int64)
    targets[0, 1:3] = targets[0, 0]  # repeated labels: the path must pass a blank between them
    return logits, targets


# (T, N, C, S, input lengths, target lengths, options)
_CTC: list[tuple] = [
    (12, 3, 5, 4, [12, 9, 7], [4, 2, 0], {}),
    (12, 3, 5, 4, [12, 9, 7], [4, 2, 0], {"reduction": "sum"}),
    (10, 2, 6, 3, [10, 10], [3, 3], {"reduction": "none", "blank": 5}),
    (9, 2, 4, 5, [9, 4], [5, 4], {"reduction": "none", "zero_infinity": True}),  # row 1 cannot be aligned: 0
    (7, 1, 3, 1, [7], [1], {}),
]


@pytest.mark.parametrize("case", range(len(_CTC)))
@pytest.mark.parametrize("layout", ["padded", "concatenated", "tensor lengths"])
def test_ctc_loss(case: int, layout: str) -> None:
    """Values and the logits' gradient (through log_softmax, as CTC is used) against torch."""
    steps, batch, classes, width, in_len, tg_len, options = _CTC[case]
    logits, targets = _ctc_case(steps, batch, classes, width, case)
    if options.get("blank", 0) != 0:
        targets = np.where(targets == options["blank"], 0, targets)
    if layout == "concatenated":
        targets = np.concatenate([row[:n] for row, n in zip(targets, tg_len)])
    lengths = (lambda v, mod: mod(v)) if layout == "tensor lengths" else (lambda v, mod: v)
    x, tx = Tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    loss = F.ctc_loss(x.log_softmax(2), Tensor(targets), lengths(in_len, Tensor), lengths(tg_len, Tensor), **options)
    tlengths = lengths(in_len, torch.tensor), lengths(tg_len, torch.tensor)
    ref = TF.ctc_loss(tx.log_softmax(2), torch.tensor(targets), *tlengths, **options)
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    up = randn(*ref.shape, seed=2)
    (loss * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_ctc_loss_that_cannot_align_keeps_the_other_gradients() -> None:
    """Row 1's 4 labels in 3 steps cannot be aligned: its loss is inf, as torch's, and its gradient 0 (torch: NaN at
    its steps); row 0's values and gradient are torch's (CTC hunt, seeds 80000-80059)."""
    logits, targets = _ctc_case(6, 2, 4, 4, 3)
    x, tx = Tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    loss = F.ctc_loss(x.log_softmax(2), Tensor(targets), [6, 3], [3, 4], reduction="none")
    ref = TF.ctc_loss(tx.log_softmax(2), torch.tensor(targets), (6, 3), (3, 4), reduction="none")
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-5)
    loss.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x.grad.numpy()[:, 0], tx.grad.numpy()[:, 0], rtol=1e-4, atol=1e-5)
    assert np.isnan(tx.grad.numpy()[:3, 1]).all() and (x.grad.numpy()[:, 1] == 0).all()


def test_ctc_loss_unbatched_module_and_errors() -> None:
    logits, targets = _ctc_case(8, 1, 4, 3, 0)
    x, tx = Tensor(logits[:, 0], requires_grad=True), torch.tensor(logits[:, 0], requires_grad=True)
    loss = nn.CTCLoss(reduction="sum")(x.log_softmax(1), Tensor(targets[0]), 8, 3)
    ref = torch.nn.CTCLoss(reduction="sum")(tx.log_softmax(1), torch.tensor(targets[0]), (8,), (3,))
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-5)
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="blank"):
        F.ctc_loss(x.log_softmax(1), Tensor(targets[0]), 8, 3, blank=4)
    with pytest.raises(ValueError, match="reduction"):
        F.ctc_loss(x.log_softmax(1), Tensor(targets[0]), 8, 3, reduction="avg")
    with pytest.raises(RuntimeError, match="input_lengths"):
        F.ctc_loss(Tensor(logits), Tensor(targets), [8, 8], [3])


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(mode: str, padding_mode: str, align_corners: bool) -> None:
    """Sample points inside, on the border and far outside (reflected several times), against torch; the input's
    gradient, and the grid's for bilinear (away from pixel edges, where torch's one-sided choice is arbitrary)."""
    x0 = randn(2, 3, 5, 7)
    grid0 = np.random.default_rng(1).uniform(-2.7, 2.7, (2, 4, 6, 2)).astype(np.float32)
    x, grid = Tensor(x0, requires_grad=True), Tensor(grid0, requires_grad=True)
    tx, tgrid = torch.tensor(x0, requires_grad=True), torch.tensor(grid0, requires_grad=True)
    out = F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    ref = TF.grid_sample(tx, tgrid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    up = randn(*ref.shape, seed=3)
    (out * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    if mode == "bilinear":
        np.testing.assert_allclose(grid.grad.numpy(), tgrid.grad.numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 1, 3], [2, 1, 3, 2, 4]])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid(size: list[int], align_corners: bool) -> None:
    dims = len(size) - 2
    theta0 = randn(size[0], dims, dims + 1)
    theta, ttheta = Tensor(theta0, requires_grad=True), torch.tensor(theta0, requires_grad=True)
    out = F.affine_grid(theta, size, align_corners=align_corners)
    ref = TF.affine_grid(ttheta, size, align_corners=align_corners)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    up = randn(*ref.shape, seed=4)
    (out * Tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(theta.grad.numpy(), ttheta.grad.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="affine matrices"):
        F.affine_grid(Tensor(randn(1, 2, 3)), [1, 1, 2, 2, 2])


def test_in_place_activations_write_their_input() -> None:
    for name, args in (
        ("relu_", ()),
        ("elu_", (0.5,)),
        ("leaky_relu_", (0.2,)),
        ("hardtanh_", (-0.5, 0.5)),
        ("selu_", ()),
        ("celu_", (1.5,)),
        ("threshold_", (0.1, -2.0)),
    ):
        x0 = randn(3, 4)
        ours, ref = Tensor(x0), torch.tensor(x0)
        out = getattr(F, name)(ours, *args)
        getattr(TF, name)(ref, *args)
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6, err_msg=name)


# (function, extra positional args, keyword args, inputs): values and gradients against torch
_MORE: list[tuple[str, tuple, dict, list[np.ndarray]]] = [
    ("lp_pool1d", (2.0, 3), {}, [_uniform(2, 3, 10)]),
    ("lp_pool2d", (3.0, 2), {"stride": 1}, [_uniform(2, 3, 5, 6)]),
    ("channel_shuffle", (3,), {}, [randn(2, 6, 4)]),
    ("pdist", (), {}, [randn(5, 3)]),
    ("pdist", (), {"p": 1.0}, [randn(4, 2)]),
    ("multi_margin_loss", (), {"target": _ints((4,), 5)}, [randn(4, 5)]),
    ("multi_margin_loss", (), {"target": _ints((4,), 5), "p": 2, "margin": 0.5, "reduction": "none"}, [randn(4, 5)]),
    ("multilabel_margin_loss", (), {"target": np.array([[3, 0, -1, 1], [1, 2, 3, -1]])}, [randn(2, 4)]),
    ("upsample_bilinear", (), {"scale_factor": 2}, [randn(1, 2, 3, 4)]),
    ("upsample", (), {"size": (5, 7), "mode": "nearest"}, [randn(1, 2, 3, 4)]),
    ("adaptive_max_pool3d", ((2, 1, 3),), {}, [randn(1, 2, 4, 3, 6)]),
]


@pytest.mark.parametrize("case", range(len(_MORE)), ids=[f"{c[0]}-{i}" for i, c in enumerate(_MORE)])
def test_more_functions_match_torch(case: int) -> None:
    name, args, kwargs, inputs = _MORE[case]
    check(*_both(name, *args, **kwargs), inputs, atol=1e-5, rtol=1e-4)


def test_max_unpool_inverts_max_pool_as_torch() -> None:
    x0 = randn(2, 3, 6, 8)
    for dims, shape in ((1, (2, 3, 9)), (2, (2, 3, 6, 8))):
        x0 = randn(*shape)
        pool, unpool = getattr(TF, f"max_pool{dims}d"), getattr(TF, f"max_unpool{dims}d")
        tout, tidx = pool(torch.tensor(x0), 2, return_indices=True)
        out, idx = getattr(F, f"max_pool{dims}d_with_indices")(Tensor(x0), 2)
        assert idx.tolist() == tidx.tolist()
        got = getattr(F, f"max_unpool{dims}d")(out, idx, 2, output_size=shape[2:])
        np.testing.assert_array_equal(got.numpy(), unpool(tout, tidx, 2, output_size=shape[2:]).numpy())


def test_random_layers_keep_their_statistics() -> None:
    """alpha_dropout keeps mean 0 and variance 1 of a standard normal input (torch's affine correction); rrelu's
    slopes lie in [lower, upper] in training and are their mean in eval."""
    x = Tensor.randn(200_000)
    y = F.alpha_dropout(x, 0.3, training=True).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02
    assert F.alpha_dropout(x, 0.3, training=False) is x
    neg = -Tensor.rand(1000) - 0.1
    slope = (F.rrelu(neg, 0.1, 0.3, training=True) / neg).numpy()
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6 and slope.std() > 0.03
    np.testing.assert_allclose((F.rrelu(neg, 0.1, 0.3) / neg).numpy(), 0.2, rtol=1e-5)
