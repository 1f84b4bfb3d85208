"""torch.nn's attention and Transformer modules, with torch's constructor arguments, parameter names (state dicts map
one to one: `self_attn.in_proj_weight`, `linear1.weight`, `norm1.bias`, ...), initialization, masks and layouts
(`batch_first`, `norm_first`). Computed through Tensor ops like every layer.

Masks follow torch: a boolean `attn_mask` / `key_padding_mask` is True where attention is NOT allowed; a float mask is
added to the scores. `is_causal=True` without a mask means the causal mask. A query whose keys are all masked gives
NaN, as torch's."""

from __future__ import annotations

import math
from typing import Any, Callable

from lazygrad.dtype import dtypes
from lazygrad.nn import LayerNorm, Linear, _own_buffer
from lazygrad.nn import functional as F
from lazygrad.nn.module import Dropout, Module, ModuleList
from lazygrad.tensor import ArgumentError, Tensor


def _xavier_uniform(*shape: int) -> Tensor:
    # torch's xavier_uniform_: U(-a, a), a = sqrt(6 / (fan_in + fan_out)), fans of the 2-d weight
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return _own_buffer(Tensor.uniform(*shape, low=-bound, high=bound), requires_grad=True)


def _as_additive(mask: Tensor | None, dtype: Any) -> Tensor | None:
    """A boolean mask (True: not allowed) as -inf / 0 to add to scores; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == dtypes.bool:
        return mask.where(-math.inf, 0.0).cast(dtype)
    return mask.cast(dtype)


class MultiheadAttention(Module):
    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
    ):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads} (both positive)")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _xavier_uniform(3 * embed_dim, embed_dim)
        else:
            self.q_proj_weight = _xavier_uniform(embed_dim, embed_dim)
            self.k_proj_weight = _xavier_uniform(embed_dim, self.kdim)
            self.v_proj_weight = _xavier_uniform(embed_dim, self.vdim)
        self.in_proj_bias = _own_buffer(Tensor.zeros(3 * embed_dim), requires_grad=True) if bias else None
        # add_bias_kv: one more key and value, learned (torch's init: xavier_normal_ of (1, 1, E), std 1/sqrt(E)); made
        # before out_proj, as torch's state dict lists them
        self.bias_k = self.bias_v = None
        if add_bias_kv:
            self.bias_k = _own_buffer(Tensor.randn(1, 1, embed_dim) * (1 / math.sqrt(embed_dim)), requires_grad=True)
            self.bias_v = _own_buffer(Tensor.randn(1, 1, embed_dim) * (1 / math.sqrt(embed_dim)), requires_grad=True)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if bias:
            self.out_proj.bias.assign(Tensor.zeros(embed_dim))
        self.add_zero_attn = add_zero_attn  # one more key and value of zeros

    def _projections(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e : 2 * e], b[2 * e :])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:e], w[e : 2 * e], w[2 * e :]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return query.linear(wq, bq), key.linear(wk, bk), value.linear(wv, bv)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        batched = query.ndim == 3
        if not batched:  # (L, E): one sequence
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif self.batch_first:  # (N, L, E) -> torch's inner layout (L, N, E)
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if query.shape[-1] != self.embed_dim:
            raise ArgumentError(
                f"MultiheadAttention: query's last dim {query.shape[-1]} is not embed_dim {self.embed_dim}"
            )
        tgt, n, _ = query.shape
        src = key.shape[0]
        h, d = self.num_heads, self.head_dim
        q, k, v = self._projections(query, key, value)
        # (L, N, E) -> (N, H, L, D)
        q, k, v = (t.reshape(t.shape[0], n, h, d).permute(1, 2, 0, 3) for t in (q, k, v))
        if self.bias_k is not None and self.bias_v is not None:
            k = k.cat(self.bias_k.reshape(1, h, 1, d).expand(n, h, 1, d), dim=2)
            v = v.cat(self.bias_v.reshape(1, h, 1, d).expand(n, h, 1, d), dim=2)
        if self.add_zero_attn:
            k, v = k.pad((0, 0, 0, 1)), v.pad((0, 0, 0, 1))
        extra = k.shape[2] - src  # keys appended, which every mask allows
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if attn_mask is None and is_causal:
            attn_mask = Tensor.ones(tgt, src, dtype=dtypes.bool, device=query.device).triu(1)
        mask = _as_additive(attn_mask, scores.dtype)
        if mask is not None:
            mask = mask.pad((0, extra)) if extra else mask
            scores = scores + (mask.reshape(n, h, tgt, src + extra) if mask.ndim == 3 else mask)
        pad = _as_additive(key_padding_mask, scores.dtype)
        if pad is not None:
            pad = pad.pad((0, extra)) if extra else pad
            scores = scores + pad.reshape(n, 1, 1, src + extra)
        weights = scores.softmax(-1)
        attn = F.dropout(weights, self.dropout, self._training()) if self.dropout else weights
        out = (attn @ v).permute(2, 0, 1, 3).reshape(tgt, n, self.embed_dim)  # (L, N, E)
        out = self.out_proj(out)
        if not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        w = weights.mean(1) if average_attn_weights else weights
        return out, (w.squeeze(0) if not batched else w)


def _activation(activation: str | Callable) -> Callable:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: torch's arguments, and their submodules in torch's order (which is
    the state dict's): self_attn, [multihead_attn], linear1, dropout, linear2, norm1.., dropout1.."""

    cross = False  # the decoder's attention over the encoder's output (multihead_attn, a third norm and dropout)

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        self._config = dict(
            d_model=d_model,
            nhead=nhead,
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
        )
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        if self.cross:
            self.multihead_attn = MultiheadAttention(
                d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first
            )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        blocks = 3 if self.cross else 2
        for i in range(1, blocks + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for i in range(1, blocks + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self._act = _activation(activation)

    def _sa(self, x: Tensor, mask: Tensor | None, padding: Tensor | None, is_causal: bool) -> Tensor:
        out = self.self_attn(
            x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False, is_causal=is_causal
        )[0]
        return self.dropout1(out)

    def _ff(self, x: Tensor) -> Tensor:
        last = self.dropout3 if self.cross else self.dropout2
        return last(self.linear2(self.dropout(self._act(self.linear1(x)))))


class TransformerEncoderLayer(_TransformerLayer):
    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff(x))


class TransformerDecoderLayer(_TransformerLayer):
    cross = True

    def _mha(self, x: Tensor, mem: Tensor, mask: Tensor | None, padding: Tensor | None, is_causal: bool) -> Tensor:
        out = self.multihead_attn(
            x, mem, mem, attn_mask=mask, key_padding_mask=padding, need_weights=False, is_causal=is_causal
        )[0]
        return self.dropout2(out)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff(self.norm3(x))
        x = self.norm1(x + self._sa(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff(x))


def _clones(layer: Module, n: int) -> ModuleList:
    """n copies of layer with its weights, as torch's deepcopy gives: made anew from its configuration, then loaded."""
    copies = [layer]
    for _ in range(n - 1):
        copy = type(layer)(**layer._config)
        copy.load_state_dict(layer.state_dict())
        copies.append(copy)
    return ModuleList(copies)


class TransformerEncoder(Module):
    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                bool(tgt_is_causal),
                memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable = "relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        options = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
        )
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **options),
            num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **options),
            num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask,
            memory_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """torch's: -inf above the diagonal, 0 elsewhere (a float mask to add to attention scores)."""
        upper = Tensor.ones(sz, sz, dtype=dtypes.bool, device=device).triu(1)
        return upper.where(-math.inf, 0.0).cast(dtype or dtypes.float32)


__all__ = [
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerDecoder",
    "Transformer",
]
