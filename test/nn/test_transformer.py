"""nn.MultiheadAttention and the Transformer modules against torch.nn's: the same weights (torch's state dict loaded),
dropout 0, outputs and input gradients over layouts (batch_first, unbatched), masks (boolean, float, key padding,
causal) and norm_first; state-dict names equal torch's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import lazygrad.nn as nn
from lazygrad import Tensor
from test.opcheck import randn

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def _pair(name: str, *args: Any, **kwargs: Any) -> tuple[Any, torch.nn.Module]:
    ref = getattr(torch.nn, name)(*args, **kwargs).eval()
    ours = getattr(nn, name)(*args, **kwargs)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    return ours.eval(), ref


def _compare(ours_out: Tensor, ref_out: torch.Tensor, ours_in: list[Tensor], ref_in: list[torch.Tensor]) -> None:
    np.testing.assert_allclose(ours_out.numpy(), ref_out.detach().numpy(), rtol=1e-4, atol=1e-5)
    w = randn(*ref_out.shape, seed=11)
    (ref_out * torch.tensor(w)).sum().backward()
    grads = (ours_out * Tensor(w)).sum().gradient(*ours_in)
    for g, t in zip(grads, ref_in):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-5)


def _inputs(*shapes: tuple[int, ...]) -> tuple[list[Tensor], list[torch.Tensor]]:
    arrays = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    return [Tensor(a, requires_grad=True) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]


@pytest.mark.parametrize(
    "kwargs, call",
    [
        ({}, {}),
        ({"batch_first": True}, {"average_attn_weights": False}),
        ({"kdim": 6, "vdim": 5}, {}),
        ({"bias": False}, {"need_weights": False}),
        ({}, {"attn_mask": "bool"}),
        ({"batch_first": True}, {"attn_mask": "float", "key_padding_mask": True}),
        ({}, {"attn_mask": "causal", "is_causal": True}),
        ({"add_bias_kv": True}, {"attn_mask": "bool", "key_padding_mask": True}),
        ({"add_zero_attn": True, "batch_first": True}, {"attn_mask": "float", "average_attn_weights": False}),
        ({"add_bias_kv": True, "add_zero_attn": True, "kdim": 6, "vdim": 5}, {"key_padding_mask": True}),
        ({"add_bias_kv": True, "add_zero_attn": True}, {"attn_mask": "causal", "is_causal": True}),
    ],
)
def test_multihead_attention_matches_torch(kwargs: dict, call: dict) -> None:
    ours, ref = _pair("MultiheadAttention", 8, 2, **kwargs)
    n, tgt, src = 3, 4, 4 if call.get("is_causal") else 5
    kdim, vdim = kwargs.get("kdim", 8), kwargs.get("vdim", 8)
    shapes = [(tgt, n, 8), (src, n, kdim), (src, n, vdim)]
    if kwargs.get("batch_first"):
        shapes = [(s[1], s[0], s[2]) for s in shapes]
    lg, th = _inputs(*shapes)
    lg_call, th_call = dict(call), dict(call)
    mask = call.get("attn_mask")
    if mask == "bool":
        m = np.random.default_rng(2).random((tgt, src)) < 0.3
        m[:, 0] = False  # every query keeps a key
        lg_call["attn_mask"], th_call["attn_mask"] = Tensor(m), torch.tensor(m)
    elif mask == "float":
        m = randn(n * 2, tgt, src, seed=3)
        lg_call["attn_mask"], th_call["attn_mask"] = Tensor(m), torch.tensor(m)
    elif mask == "causal":
        lg_call["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(tgt)
        th_call["attn_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(tgt)
    if call.get("key_padding_mask"):
        pad = np.zeros((n, src), bool)
        pad[1, -2:] = True
        lg_call["key_padding_mask"], th_call["key_padding_mask"] = Tensor(pad), torch.tensor(pad)
    out, weights = ours(*lg, **lg_call)
    ref_out, ref_weights = ref(*th, **th_call)
    if weights is None:
        assert ref_weights is None
    else:
        np.testing.assert_allclose(weights.numpy(), ref_weights.detach().numpy(), rtol=1e-4, atol=1e-6)
    _compare(out, ref_out, lg, th)


def test_unbatched_attention_matches_torch() -> None:
    ours, ref = _pair("MultiheadAttention", 6, 3)
    lg, th = _inputs((4, 6), (5, 6), (5, 6))
    out, w = ours(*lg)
    ref_out, ref_w = ref(*th)
    np.testing.assert_allclose(w.numpy(), ref_w.detach().numpy(), rtol=1e-4, atol=1e-6)
    _compare(out, ref_out, lg, th)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"norm_first": True, "activation": "gelu"}, {"batch_first": True, "bias": False}],
)
def test_encoder_and_decoder_layers_match_torch(kwargs: dict) -> None:
    enc, ref_enc = _pair("TransformerEncoderLayer", 8, 2, 16, dropout=0.0, **kwargs)
    shape = (3, 5, 8) if kwargs.get("batch_first") else (5, 3, 8)
    lg, th = _inputs(shape)
    pad = np.zeros((3, 5), bool)
    pad[0, -1] = True
    out = enc(lg[0], src_key_padding_mask=Tensor(pad))
    _compare(out, ref_enc(th[0], src_key_padding_mask=torch.tensor(pad)), lg, th)
    dec, ref_dec = _pair("TransformerDecoderLayer", 8, 2, 16, dropout=0.0, **kwargs)
    mem_shape = (3, 6, 8) if kwargs.get("batch_first") else (6, 3, 8)
    lg, th = _inputs(shape, mem_shape)
    causal, ref_causal = (
        nn.Transformer.generate_square_subsequent_mask(5),
        torch.nn.Transformer.generate_square_subsequent_mask(5),
    )
    out = dec(lg[0], lg[1], tgt_mask=causal)
    _compare(out, ref_dec(th[0], th[1], tgt_mask=ref_causal), lg, th)


def test_whole_transformer_matches_torch_and_its_layers_start_equal() -> None:
    model, ref = _pair("Transformer", 8, 2, 2, 2, 16, dropout=0.0)
    lg, th = _inputs((6, 2, 8), (4, 2, 8))
    mask, ref_mask = (
        nn.Transformer.generate_square_subsequent_mask(4),
        torch.nn.Transformer.generate_square_subsequent_mask(4),
    )
    _compare(model(lg[0], lg[1], tgt_mask=mask), ref(th[0], th[1], tgt_mask=ref_mask), lg, th)
    # an encoder copies its layer as torch's deepcopy does: every layer starts with the same weights
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 3)
    w = [layer.linear1.weight.numpy() for layer in stack.layers]
    np.testing.assert_array_equal(w[0], w[2])
    assert stack.layers[0].linear1.weight is not stack.layers[1].linear1.weight
    assert len(list(stack.parameters())) == 3 * len(list(stack.layers[0].parameters()))


def test_attention_errors() -> None:
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(RuntimeError, match="embed_dim"):
        nn.MultiheadAttention(8, 2)(Tensor.ones(3, 2, 6), Tensor.ones(3, 2, 8), Tensor.ones(3, 2, 8))
    with pytest.raises(RuntimeError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
