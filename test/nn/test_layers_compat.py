"""tinygrad's layers and constructor arguments against torch.nn with copied weights, forward and backward:
InstanceNorm, LayerNorm2d, LSTMCell, ConvTranspose1d, BatchNorm's argument order, Conv2d(padding="same")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad import Tensor, nn
from lazygrad.nn.state import get_state_dict
from test.nn.test_layers import compare_layer, copy_from_torch


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 3, 1, 2), (2, 3, 4), (2, 3, 2, 3, 5)])
@pytest.mark.parametrize("affine", [True, False])
def test_instancenorm(shape: tuple, affine: bool) -> None:
    ref_cls = {3: torch.nn.InstanceNorm1d, 4: torch.nn.InstanceNorm2d, 5: torch.nn.InstanceNorm3d}[len(shape)]
    ref = ref_cls(3, affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
    compare_layer(nn.InstanceNorm(3, affine=affine), ref, shape, atol=1e-4)


def test_instancenorm_defaults_and_errors() -> None:
    layer = nn.InstanceNorm(4)  # tinygrad's default: affine
    assert sorted(get_state_dict(layer)) == ["bias", "weight"]
    with pytest.raises(ValueError, match="InstanceNorm"):
        layer(Tensor.ones(2, 3, 5))


@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (1, 1, 1, 1), (3, 7, 2, 1)])
def test_layernorm2d(shape: tuple) -> None:
    C = shape[1]

    class Ref(torch.nn.LayerNorm):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    ref = Ref(C)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    compare_layer(nn.LayerNorm2d(C), ref, shape, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [(3,), (), (1,)])
def test_lstm_cell(bias: bool, batch: tuple) -> None:
    layer, ref = nn.LSTMCell(5, 7, bias=bias), torch.nn.LSTMCell(5, 7, bias=bias)
    copy_from_torch(layer, ref)
    if not bias:
        assert layer.bias_ih is None and layer.bias_hh is None
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((*batch, 5)).astype(np.float32)
    hn, cn = rng.standard_normal((2, *batch, 7)).astype(np.float32)
    x, h, c = (Tensor(a, requires_grad=True) for a in (xn, hn, cn))
    xr, hr, cr = (torch.tensor(a, requires_grad=True) for a in (xn, hn, cn))
    h1, c1 = layer(x)
    h1r, c1r = ref(xr)
    np.testing.assert_allclose(h1.numpy(), h1r.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(c1.numpy(), c1r.detach().numpy(), atol=1e-6)
    # a second step from a given state, and the gradients of both steps' outputs
    h2, c2 = layer(x, (h, c))
    h2r, c2r = ref(xr, (hr, cr))
    (h2 * 2 + c2 + h1).sum().backward()
    (h2r * 2 + c2r + h1r).sum().backward()
    np.testing.assert_allclose(h2.numpy(), h2r.detach().numpy(), atol=1e-6)
    for ours, theirs in ((x, xr), (h, hr), (c, cr)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-5)
    params = get_state_dict(layer)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(params[name].grad.numpy(), p.grad.numpy(), atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "args,kw,shape",
    [
        ((3, 4, 3), {}, (2, 3, 7)),
        ((2, 6, 5), dict(stride=2, padding=1, output_padding=1), (1, 2, 11)),
        ((4, 2, 3), dict(groups=2, dilation=2, bias=False), (3, 4, 5)),
        ((1, 1, 1), {}, (1, 1, 1)),
    ],
)
def test_conv_transpose1d(args: tuple, kw: dict, shape: tuple) -> None:
    compare_layer(nn.ConvTranspose1d(*args, **kw), torch.nn.ConvTranspose1d(*args, **kw), shape, atol=1e-5)


def test_batchnorm_tinygrad_arguments() -> None:
    bn = nn.BatchNorm(3, 1e-3, False, True, 0.2)  # (sz, eps, affine, track_running_stats, momentum)
    assert bn.eps == 1e-3 and bn.weight is None and bn.momentum == 0.2 and bn.track_running_stats
    bn = nn.BatchNorm(sz=2, track_running_stats=False)
    assert sorted(get_state_dict(bn)) == ["bias", "weight"]
    assert nn.BatchNorm2d(num_features=4).weight.shape == (4,)
    assert nn.BatchNorm3d is nn.BatchNorm
    with pytest.raises(TypeError):
        nn.BatchNorm2d(16, 1e-5, 0.1)  # torch's positional momentum lands on affine
    with pytest.raises(TypeError):
        nn.BatchNorm()
    # eval in 3d against torch, running statistics copied in
    ref = torch.nn.BatchNorm3d(3).eval()
    with torch.no_grad():
        ref.running_mean.uniform_(-1, 1)
        ref.running_var.uniform_(0.5, 2)
        ref.weight.uniform_(0.5, 1.5)
    compare_layer(nn.BatchNorm3d(3), ref, (2, 3, 2, 3, 4), atol=1e-5)


def test_conv2d_same_padding() -> None:
    compare_layer(
        nn.Conv2d(2, 3, (3, 4), padding="same", dilation=(1, 2)),
        torch.nn.Conv2d(2, 3, (3, 4), padding="same", dilation=(1, 2)),
        (1, 2, 6, 7),
    )
    compare_layer(nn.Conv1d(2, 3, 4, padding="same"), torch.nn.Conv1d(2, 3, 4, padding="same"), (2, 2, 5))
    with pytest.raises(ValueError, match="stride"):
        nn.Conv2d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="stride"):
        Tensor.ones(1, 1, 5, 5).conv2d(Tensor.ones(1, 1, 3, 3), stride=(1, 2), padding="same")
    with pytest.raises(ValueError):
        nn.Conv2d(1, 1, 3, padding="full")
    with pytest.raises(ValueError):
        torch.nn.Conv2d(1, 1, 3, stride=2, padding="same")


def test_tinygrads_keyword_names_for_embedding_and_rmsnorm() -> None:
    emb = nn.Embedding(vocab_size=7, embed_size=3)
    assert emb.weight.shape == (7, 3) and nn.Embedding(num_embeddings=7, embedding_dim=3).weight.shape == (7, 3)
    idx = Tensor([[0, 6], [3, 3]])
    np.testing.assert_array_equal(emb(idx).numpy(), emb.weight.numpy()[idx.numpy()])
    norm, ref = nn.RMSNorm(dim=5, eps=1e-6), torch.nn.RMSNorm(5, eps=1e-6)
    compare_layer(norm, ref, (2, 3, 5), atol=1e-5)
    with pytest.raises(TypeError):
        nn.Embedding(vocab_size=7)
    with pytest.raises(TypeError):
        nn.RMSNorm()
    with pytest.raises(TypeError):
        get_state_dict(emb, tensor_type=dict)
    assert list(get_state_dict(emb, tensor_type=Tensor)) == ["weight"]
