"""nn.init and nn.utils against torch: the deterministic fills exactly (gains, eye, dirac, constants), the random
ones by their bounds and moments over large draws (and orthogonality), gradient clipping and parameter vectors by
value, pad_sequence by value, and clipping inside training steps against torch's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lazygrad.nn as nn
from lazygrad import Tensor
from lazygrad.nn import optim
from test.opcheck import randn


def test_gains_and_deterministic_fills_match_torch() -> None:
    for name, param in [
        ("linear", None),
        ("conv2d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("selu", None),
    ]:
        assert nn.init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))
    with pytest.raises(ValueError, match="Unsupported"):
        nn.init.calculate_gain("softmax")
    for shape, groups in [((4, 4, 3, 3), 1), ((6, 2, 3), 2), ((2, 3, 3, 1, 3), 1)]:
        ours = nn.init.dirac_(Tensor.empty(*shape), groups)
        ref = torch.nn.init.dirac_(torch.empty(shape), groups)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    np.testing.assert_array_equal(nn.init.eye_(Tensor.empty(3, 5)).numpy(), torch.eye(3, 5).numpy())
    np.testing.assert_array_equal(nn.init.constant_(Tensor.empty(2, 3), 0.3).numpy(), np.full((2, 3), 0.3, np.float32))
    w = Tensor.ones(3, requires_grad=True)
    nn.init.zeros_(w)
    assert w.requires_grad and w.tolist() == [0, 0, 0]


def test_random_fills_have_torchs_bounds_and_moments() -> None:
    w = Tensor.empty(256, 512)
    bound = math.sqrt(6 / (256 + 512))
    values = nn.init.xavier_uniform_(w).numpy()
    assert np.abs(values).max() <= bound and abs(values.std() - bound / math.sqrt(3)) < 0.02 * bound
    values = nn.init.kaiming_normal_(Tensor.empty(512, 256), mode="fan_out", nonlinearity="relu").numpy()
    assert abs(values.std() - math.sqrt(2 / 512)) < 0.02 * math.sqrt(2 / 512)
    values = nn.init.kaiming_uniform_(Tensor.empty(300, 40, 3), a=math.sqrt(5)).numpy()
    ref = torch.nn.init.kaiming_uniform_(torch.empty(300, 40, 3), a=math.sqrt(5)).numpy()
    assert abs(np.abs(values).max() - np.abs(ref).max()) < 0.01 * np.abs(ref).max()
    values = nn.init.trunc_normal_(Tensor.empty(200_000), mean=0.5, std=2.0, a=-1.0, b=3.0).numpy()
    ref = torch.nn.init.trunc_normal_(torch.empty(200_000), mean=0.5, std=2.0, a=-1.0, b=3.0).numpy()
    assert values.min() >= -1 and values.max() <= 3
    assert abs(values.mean() - ref.mean()) < 0.02 and abs(values.std() - ref.std()) < 0.02
    for shape in [(5, 8), (8, 5), (6, 2, 2)]:
        q = nn.init.orthogonal_(Tensor.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, 4 * np.eye(small.shape[0]), atol=1e-4)
    sparse = nn.init.sparse_(Tensor.empty(10, 30), sparsity=0.3).numpy()
    assert ((sparse == 0).sum(0) == 3).all()


@pytest.mark.parametrize("norm_type, max_norm", [(2.0, 0.5), (1.0, 0.3), (float("inf"), 0.1), (2.0, 1e6)])
def test_clip_grad_norm_matches_torch(norm_type: float, max_norm: float) -> None:
    grads = [randn(3, 4), randn(5, seed=1), randn(2, 2, 2, seed=2)]
    ours = [Tensor.zeros(*g.shape, requires_grad=True) for g in grads]
    refs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, r, g in zip(ours, refs, grads):
        p.grad, r.grad = Tensor(g), torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type)
    ref_total = torch.nn.utils.clip_grad_norm_(refs, max_norm, norm_type)
    np.testing.assert_allclose(total.numpy(), ref_total.numpy(), rtol=1e-5)
    for p, r in zip(ours, refs):
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-7)
    nan = Tensor.zeros(2, requires_grad=True)
    nan.grad = Tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([nan], 1.0, error_if_nonfinite=True)


def test_clipping_inside_training_steps_matches_torch() -> None:
    w0, x = randn(4, 3), randn(8, 4, seed=1) * 5
    lw, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    l_opt, t_opt = optim.Adam([lw], lr=0.1), torch.optim.Adam([tw], lr=0.1)
    for _ in range(3):
        l_opt.zero_grad(), t_opt.zero_grad()
        ((Tensor(x) @ lw) ** 2).mean().backward()
        ((torch.tensor(x) @ tw) ** 2).mean().backward()
        nn.utils.clip_grad_norm_([lw], 0.5)
        torch.nn.utils.clip_grad_norm_([tw], 0.5)
        nn.utils.clip_grad_value_([lw], 0.2)
        torch.nn.utils.clip_grad_value_([tw], 0.2)
        l_opt.step(), t_opt.step()
    np.testing.assert_allclose(lw.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_parameter_vectors_and_pad_sequence_match_torch() -> None:
    arrays = [randn(2, 3), randn(4, seed=1)]
    vec = nn.utils.parameters_to_vector([Tensor(a) for a in arrays])
    np.testing.assert_array_equal(vec.numpy(), torch.nn.utils.parameters_to_vector([torch.tensor(a) for a in arrays]))
    targets = [Tensor.zeros(2, 3).contiguous().realize(), Tensor.zeros(4).contiguous().realize()]
    nn.utils.vector_to_parameters(vec * 2, targets)
    np.testing.assert_array_equal(targets[0].numpy(), arrays[0] * 2)
    seqs = [randn(3, 2), randn(5, 2, seed=1), randn(1, 2, seed=2)]
    for kwargs in [{}, {"batch_first": True, "padding_value": -1.0}, {"batch_first": True, "padding_side": "left"}]:
        ours = nn.utils.rnn.pad_sequence([Tensor(s) for s in seqs], **kwargs)
        ref = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], **kwargs)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    back = nn.utils.rnn.unpad_sequence(nn.utils.rnn.pad_sequence([Tensor(s) for s in seqs]), [3, 5, 1])
    for a, s in zip(back, seqs):
        np.testing.assert_array_equal(a.numpy(), s)


# *** weight_norm and spectral_norm (the hook forms) ***

_REPARAM_LAYERS = [
    ("Linear", (5, 4), (3, 5)),
    ("Conv2d", (3, 4, 3), (2, 3, 6, 6)),
    ("Conv1d", (3, 4, 3), (2, 3, 7)),
    ("ConvTranspose2d", (3, 4, 3), (2, 3, 5, 5)),
]


def _reparam_pair(layer: str, args: tuple, wrap: str, **kw):
    torch.manual_seed(0)
    ref = getattr(torch.nn.utils, wrap)(getattr(torch.nn, layer)(*args), **kw)
    ours = getattr(nn.utils, wrap)(getattr(nn, layer)(*args), **kw)
    assert sorted(ours.state_dict()) == sorted(ref.state_dict())
    assert sorted(n for n, _ in ours.named_parameters()) == sorted(n for n, _ in ref.named_parameters())
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return ref, ours


def _train_both(ref, ours, xs: tuple, steps: int = 3) -> None:
    x = randn(*xs, seed=7)
    opts = torch.optim.SGD(ref.parameters(), lr=0.1), optim.SGD(list(ours.parameters()), lr=0.1)
    for _ in range(steps):
        for model, opt, inp in ((ref, opts[0], torch.tensor(x)), (ours, opts[1], Tensor(x))):
            opt.zero_grad()
            model(inp).square().sum().backward()
            opt.step()
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k].numpy(), v.detach().numpy(), rtol=2e-4, atol=1e-5, err_msg=k)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("layer,args,xs", _REPARAM_LAYERS)
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_trains_as_torchs(layer, args, xs, dim) -> None:
    """weight_g and weight_v in place of weight (torch's names), the weight recomputed before every forward: 3 SGD
    steps from torch's values give torch's; remove_weight_norm leaves torch's weight as a parameter."""
    ref, ours = _reparam_pair(layer, args, "weight_norm", dim=dim)
    _train_both(ref, ours, xs)
    np.testing.assert_allclose(ours.weight.numpy(), ref.weight.detach().numpy(), rtol=2e-4, atol=1e-5)
    torch.nn.utils.remove_weight_norm(ref)
    nn.utils.remove_weight_norm(ours)
    assert sorted(ours.state_dict()) == sorted(ref.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(ours.weight.numpy(), ref.weight.detach().numpy(), rtol=2e-4, atol=1e-5)
    with pytest.raises(ValueError, match="weight_norm"):
        nn.utils.remove_weight_norm(ours)


@pytest.mark.parametrize("layer,args,xs", _REPARAM_LAYERS)
def test_spectral_norm_trains_as_torchs(layer, args, xs) -> None:
    """weight_orig over its largest singular value by power iteration on weight_u / weight_v (two a training forward,
    none in eval; dim 1 for a transposed conv): from torch's state, 3 SGD steps and the eval output are torch's."""
    ref, ours = _reparam_pair(layer, args, "spectral_norm", n_power_iterations=2)
    _train_both(ref, ours, xs)
    ref.eval(), ours.eval()
    x = randn(*xs, seed=8)
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=2e-4, atol=1e-4)
    torch.nn.utils.remove_spectral_norm(ref)
    nn.utils.remove_spectral_norm(ours)
    np.testing.assert_allclose(ours.weight.numpy(), ref.weight.detach().numpy(), rtol=2e-4, atol=1e-5)
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
        nn.utils.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)
    with pytest.raises(RuntimeError, match="two"):
        nn.utils.weight_norm(nn.utils.weight_norm(nn.Linear(2, 2)))


# *** parametrize and parametrizations (torch's current forms) ***


@pytest.mark.parametrize("layer,args,xs", _REPARAM_LAYERS)
@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm"])
def test_parametrizations_train_as_torchs(layer, args, xs, kind) -> None:
    """torch.nn.utils.parametrizations.weight_norm / spectral_norm: torch's class name (ParametrizedLinear), state dict
    and parameter names; from torch's state, 3 SGD steps and the eval output are torch's; remove_parametrizations
    leaves torch's weight as a plain parameter and the layer's own class."""
    from torch.nn.utils import parametrizations as tp
    from torch.nn.utils import parametrize as tz

    from lazygrad.nn.utils import parametrizations as lp
    from lazygrad.nn.utils import parametrize as lz

    torch.manual_seed(0)
    ref, ours = getattr(tp, kind)(getattr(torch.nn, layer)(*args)), getattr(lp, kind)(getattr(nn, layer)(*args))
    assert type(ours).__name__ == type(ref).__name__ == f"Parametrized{layer}"
    assert sorted(ours.state_dict()) == sorted(ref.state_dict())
    assert sorted(n for n, _ in ours.named_parameters()) == sorted(n for n, _ in ref.named_parameters())
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    assert lz.is_parametrized(ours) and lz.is_parametrized(ours, "weight") and not lz.is_parametrized(ours, "bias")
    _train_both(ref, ours, xs)
    ref.eval(), ours.eval()
    x = randn(*xs, seed=8)
    want = ref(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    tz.remove_parametrizations(ref, "weight")
    lz.remove_parametrizations(ours, "weight")
    assert type(ours) is getattr(nn, layer) and sorted(ours.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(ours.weight.numpy(), ref.weight.detach().numpy(), rtol=2e-4, atol=1e-5)


def test_register_parametrization_of_a_custom_module() -> None:
    """A user's parametrization (a symmetric matrix from its upper triangle) with right_inverse: reads, assignment
    through the property, a second parametrization chained on, gradients through the chain, and torch's errors."""
    from lazygrad.nn.utils import parametrize as lz

    class Symmetric(nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(-1, -2)

        def right_inverse(self, a):
            return a.triu()

    class Scaled(nn.Module):
        def forward(self, x):
            return x * 2

        def right_inverse(self, a):
            return a / 2

    layer = nn.Linear(3, 3)
    w0 = layer.weight.numpy()
    lz.register_parametrization(layer, "weight", Symmetric())
    np.testing.assert_allclose(layer.weight.numpy(), np.triu(w0) + np.triu(w0, 1).T, rtol=1e-6)
    np.testing.assert_allclose(layer.parametrizations.weight.original.numpy(), np.triu(w0), rtol=1e-6)
    sym = np.array([[1, 2, 3], [2, 4, 5], [3, 5, 6]], np.float32)
    layer.weight = Tensor(sym)  # stored as right_inverse(sym)
    np.testing.assert_allclose(layer.weight.numpy(), sym)
    lz.register_parametrization(layer, "weight", Scaled())
    np.testing.assert_allclose(layer.weight.numpy(), sym * 2)
    layer.weight = Tensor(sym)
    np.testing.assert_allclose(layer.weight.numpy(), sym, rtol=1e-6)
    x = Tensor(randn(2, 3), requires_grad=True)
    layer(x).sum().backward()
    g = layer.parametrizations.weight.original.grad.numpy()  # d/dU of sum(x @ (2 (U + triu1(U)^T))^T)
    up = 2 * np.tile(x.numpy().sum(0), (3, 1))
    np.testing.assert_allclose(g, np.triu(up + up.T) - np.diag(np.diag(up)), rtol=1e-5, atol=1e-5)

    class Transposed(nn.Module):
        def forward(self, x):
            return x.T

    with pytest.raises(ValueError, match="may not change the shape"):
        lz.register_parametrization(nn.Linear(3, 2), "weight", Transposed())
    assert lz.register_parametrization(nn.Linear(3, 2), "weight", Transposed(), unsafe=True).weight.shape == (3, 2)
    with pytest.raises(ValueError, match="does not have a parametrization"):
        lz.remove_parametrizations(nn.Linear(2, 2), "weight")


# *** fusion, functional_call ***


@pytest.mark.parametrize(
    "conv,bn,xs,transpose",
    [
        ("Conv2d(3, 4, 3)", "BatchNorm2d(4)", (2, 3, 6, 6), False),
        ("Conv2d(3, 4, 3, bias=False)", "BatchNorm2d(4)", (2, 3, 6, 6), False),
        ("Conv1d(3, 5, 2)", "BatchNorm1d(5, affine=False)", (2, 3, 7), False),
        ("ConvTranspose2d(3, 4, 3)", "BatchNorm2d(4)", (2, 3, 5, 5), True),
        ("Linear(6, 4)", "BatchNorm1d(4)", (5, 6), False),
    ],
)
def test_fused_conv_bn_computes_conv_then_bn(conv, bn, xs, transpose) -> None:
    """fuse_conv_bn_eval / fuse_linear_bn_eval: torch's fused layer from torch's state (random running statistics
    and affine values) gives the eval-mode conv then bn, and torch's fused weights."""
    torch.manual_seed(0)
    tconv, tbn = eval(f"torch.nn.{conv}"), eval(f"torch.nn.{bn}")
    tbn.running_mean.uniform_(-1, 1), tbn.running_var.uniform_(0.5, 2)
    if tbn.affine:
        tbn.weight.data.uniform_(0.5, 1.5), tbn.bias.data.uniform_(-1, 1)
    lconv, lbn = eval(f"nn.{conv}"), eval(f"nn.{bn}")
    for ours, ref in ((lconv, tconv), (lbn, tbn)):
        ours.load_state_dict({k: Tensor(v.numpy()) for k, v in ref.state_dict().items()})
        ours.eval(), ref.eval()
    linear = conv.startswith("Linear")
    fuse_t = torch.nn.utils.fuse_linear_bn_eval if linear else torch.nn.utils.fuse_conv_bn_eval
    fuse_l = nn.utils.fuse_linear_bn_eval if linear else nn.utils.fuse_conv_bn_eval
    tf, lf = (
        (fuse_t(tconv, tbn), fuse_l(lconv, lbn))
        if linear
        else (fuse_t(tconv, tbn, transpose), fuse_l(lconv, lbn, transpose))
    )
    x = randn(*xs, seed=4)
    want = tbn(tconv(torch.tensor(x))).detach().numpy()
    np.testing.assert_allclose(lf(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lf.weight.numpy(), tf.weight.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lf.bias.numpy(), tf.bias.detach().numpy(), rtol=1e-6, atol=1e-6)
    lconv.train()
    with pytest.raises(AssertionError, match="eval"):
        fuse_l(lconv, lbn)


def test_functional_call_swaps_tensors_for_one_call() -> None:
    """torch.func.functional_call: the module run with the given parameters and buffers (dotted names), gradients to
    the given tensors, its own put back after the call, and after a call that raised."""
    from lazygrad.nn.utils.stateless import functional_call

    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in tmodel.state_dict().items()})
    own = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    given = {k: randn(*v.shape, seed=i) for i, (k, v) in enumerate(own.items()) if k.startswith("2.")}
    x = randn(5, 3, seed=9)
    ours = {k: Tensor(v, requires_grad=True) for k, v in given.items()}
    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in given.items()}
    out = functional_call(model, ours, (Tensor(x),))
    ref = torch.func.functional_call(tmodel, theirs, (torch.tensor(x),))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    ref.square().sum().backward()
    for k in given:
        np.testing.assert_allclose(ours[k].grad.numpy(), theirs[k].grad.numpy(), rtol=1e-5, atol=1e-6)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), own[k])
    with pytest.raises(RuntimeError, match="Unexpected key"):
        functional_call(model, {"9.weight": Tensor.ones(1)}, (Tensor(x),))
    with pytest.raises(TypeError):
        functional_call(model, {"0.weight": Tensor.ones(4, 3)}, (Tensor(x),), {"bad": 1})
    np.testing.assert_array_equal(model.state_dict()["0.weight"].numpy(), own["0.weight"])
