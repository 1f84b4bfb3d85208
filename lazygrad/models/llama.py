"""Llama-architecture decoder (SmolLM2, Llama, TinyLlama, ...) from a GGUF file.

RMSNorm, rotary embeddings on adjacent pairs (GGUF stores Q/K rows permuted for that layout), grouped-query attention
with a fixed-size KV cache updated in place, SwiGLU MLP, tied embeddings when the file has no `output.weight`.

The position of a step may be an int or a 0-d tensor of a bound Variable: the causal mask and the rotary angles are
comparisons against `arange(max_context)`, and a decode step writes its cache row as a slice at the bound position
(one row stored, not the whole cache rewritten), so one set of compiled kernels serves every decode position.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lazygrad.device import Device
from lazygrad.dtype import dtypes
from lazygrad.engine.jit import TinyJit
from lazygrad.engine.realize import compile_ahead, run_together
from lazygrad.models import take_rows
from lazygrad.nn.gguf import GGUFTensorInfo, QuantizedMatrix, gguf_quantized, gguf_read_header, gguf_tensor
from lazygrad.nn.packed import PanelMatrix
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import UOp


@dataclass(frozen=True)
class LlamaConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    vocab_size: int
    norm_eps: float
    rope_theta: float
    context_length: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @staticmethod
    def from_gguf_metadata(meta: dict[str, Any], path: str = "") -> LlamaConfig:
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise ValueError(f"{path}: architecture {arch!r} is not supported (only 'llama')")

        def get(key: str, default: Any = None) -> Any:
            if f"{arch}.{key}" not in meta and default is None:
                raise ValueError(f"{path}: GGUF metadata lacks {arch}.{key}")
            return meta.get(f"{arch}.{key}", default)

        n_heads = get("attention.head_count")
        return LlamaConfig(
            dim=get("embedding_length"),
            n_layers=get("block_count"),
            n_heads=n_heads,
            n_kv_heads=get("attention.head_count_kv", n_heads),
            hidden_dim=get("feed_forward_length"),
            vocab_size=get("vocab_size", len(meta.get("tokenizer.ggml.tokens", []))),
            norm_eps=get("attention.layer_norm_rms_epsilon"),
            rope_theta=get("rope.freq_base", 10000.0),
            context_length=get("context_length"),
        )


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * weight


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding on adjacent pairs (x[2i], x[2i+1]); x (B, T, H, D), cos/sin (T, D/2)."""
    b, t, h, d = x.shape
    pairs = x.reshape(b, t, h, d // 2, 2)
    # shrink, not pairs[..., 0]: the same nodes, without the indexing's parsing (a third of a layer's graph building)
    x0 = pairs.shrink((None, None, None, None, (0, 1))).reshape(b, t, h, d // 2)
    x1 = pairs.shrink((None, None, None, None, (1, 2))).reshape(b, t, h, d // 2)
    cos, sin = cos.reshape(1, t, 1, d // 2), sin.reshape(1, t, 1, d // 2)
    return (x0 * cos - x1 * sin).stack(x0 * sin + x1 * cos, dim=-1).reshape(b, t, h, d)


def _columns(x: Tensor, start: int, end: int) -> Tensor:
    """x[..., start:end] as a shrink: the same nodes, without the indexing's parsing."""
    return x.shrink((*[None] * (x.ndim - 1), (start, end)))


# float32 (in panels where the device multiplies those faster), or packed blocks (quantized=True)
Weight = PanelMatrix | QuantizedMatrix


def _plain(w: Tensor | QuantizedMatrix) -> Weight:
    """A float32 weight in a buffer of its own, in panels where the device has them (neither dequantized nor copied
    into panels again by each step); a quantized one as it is."""
    return w if isinstance(w, QuantizedMatrix) else PanelMatrix.pack(w)


def linear(x: Tensor, w: Weight) -> Tensor:
    return w.linear(x)


def _stacked(ws: list[Tensor | QuantizedMatrix]) -> Weight:
    """Weights that read the same input stacked into one matrix: one matmul kernel instead of several. Quantized ones
    of one type stay packed (their blocks copied into one buffer); others become one float32 matrix (PanelMatrix)."""
    quantized = [w for w in ws if isinstance(w, QuantizedMatrix)]
    if len(quantized) == len(ws) and all(w.gt == quantized[0].gt for w in quantized):  # (a K-quant file mixes types)
        return QuantizedMatrix.stack(quantized)
    # dequantized into buffers of their own first: a kernel that dequantizes three tensors behind a cat's padding has
    # index math that is slow to generate, and the copy after it is cheap
    ts = [(w.dequantize() if isinstance(w, QuantizedMatrix) else w).contiguous() for w in ws]
    return PanelMatrix.pack(ts[0].cat(*ts[1:]).contiguous())


class Attention:
    def __init__(self, cfg: LlamaConfig, w: dict[str, Any], max_context: int):
        self.cfg, self.wo = cfg, _plain(w["attn_output"])
        self.wqkv = _stacked([w["attn_q"], w["attn_k"], w["attn_v"]])
        shape = (1, cfg.n_kv_heads, max_context, cfg.head_dim)
        self.cache_k = Tensor.zeros(*shape).contiguous().realize()
        self.cache_v = Tensor.zeros(*shape).contiguous().realize()

    def __call__(
        self, x: Tensor, onehot: Tensor | int | UOp, written: Tensor | None, mask: Tensor, cos: Tensor, sin: Tensor
    ) -> Tensor:
        """onehot: (T, slots) with a 1 at each new row's slot (`written`: the slots it marks), or the first new row's
        slot where it is known (a prompt's int position), or a decode step's bound position (then `written` is
        unused)."""
        cfg = self.cfg
        b, t, _ = x.shape
        qkv = linear(x, self.wqkv)
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        q = _columns(qkv, 0, cfg.dim).reshape(b, t, cfg.n_heads, cfg.head_dim)
        k = _columns(qkv, cfg.dim, cfg.dim + kv_dim).reshape(b, t, cfg.n_kv_heads, cfg.head_dim)
        v = _columns(qkv, cfg.dim + kv_dim, qkv.shape[-1]).reshape(b, t, cfg.n_kv_heads, cfg.head_dim)
        q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
        # the cache write: row j of the cache takes new row i where onehot[i, j]; one new row is a broadcast, rows at
        # a known slot are a slice's write (the same values, no arithmetic), others a tiny matmul over the t new rows
        # (in SmolLM2's cold prompt those matmuls were 2 kernels of each layer's 22, ~40 ms of gcc's ~300)
        new_k, new_v = k.transpose(1, 2), v.transpose(1, 2)
        if isinstance(onehot, UOp):
            # a decode step stores its one row at the bound position (a slice's write stores the slice only), in a
            # schedule of its own before the attention reads the cache: a where over the whole cache read and rewrote
            # it all (k and v: 2 x 192 KB a layer at 256 slots, ~45 us of a layer's ~300). q is stored with it (its
            # matmul is the rows' too)
            q = q.contiguous()
            self.cache_k[:, :, onehot : onehot + 1] = new_k
            self.cache_v[:, :, onehot : onehot + 1] = new_v
            Tensor.realize(q, self.cache_k, self.cache_v)
            keys, values = self.cache_k, self.cache_v
        elif isinstance(onehot, int):
            # rows at a known slot: a slice's write, which stores those rows only (a where over the whole cache
            # stored every slot of it: at 1024 slots a 128-token prompt's write stored 8 times its rows)
            self.cache_k[:, :, onehot : onehot + t] = new_k
            self.cache_v[:, :, onehot : onehot + t] = new_v
            keys, values = self.cache_k, self.cache_v
        else:
            assert written is not None
            if t > 1:
                scatter = onehot.T.reshape(1, 1, -1, t)
                new_k, new_v = scatter @ new_k, scatter @ new_v
            keys = self.cache_k.assign(written.where(new_k, self.cache_k))
            values = self.cache_v.assign(written.where(new_v, self.cache_v))
        # grouped-query attention: query head h reads kv head h // (n_heads / n_kv_heads)
        group = cfg.n_heads // cfg.n_kv_heads
        ctx = mask.shape[-1]  # the slots the mask covers: those up to the last new position, or the whole cache
        if ctx < keys.shape[2]:
            covered = (None, None, (0, ctx), None)
            keys, values = keys.shrink(covered), values.shrink(covered)
        keys = keys.reshape(1, cfg.n_kv_heads, 1, ctx, cfg.head_dim).expand(1, cfg.n_kv_heads, group, ctx, cfg.head_dim)
        values = values.reshape(1, cfg.n_kv_heads, 1, ctx, cfg.head_dim).expand(
            1, cfg.n_kv_heads, group, ctx, cfg.head_dim
        )
        keys = keys.reshape(1, cfg.n_heads, ctx, cfg.head_dim)
        values = values.reshape(1, cfg.n_heads, ctx, cfg.head_dim)
        out = q.transpose(1, 2).scaled_dot_product_attention(keys, values, attn_mask=mask)
        return linear(out.transpose(1, 2).reshape(b, t, cfg.dim), self.wo)


class Block:
    def __init__(self, cfg: LlamaConfig, w: dict[str, Any], max_context: int):
        self.cfg, self.attention = cfg, Attention(cfg, w, max_context)
        self.attn_norm, self.ffn_norm = w["attn_norm"], w["ffn_norm"]
        self.gate_up = _stacked([w["ffn_gate"], w["ffn_up"]])
        self.down = _plain(w["ffn_down"])

    def __call__(
        self, x: Tensor, onehot: Tensor | int | UOp, written: Tensor | None, mask: Tensor, cos: Tensor, sin: Tensor
    ) -> Tensor:
        h = x + self.attention(rms_norm(x, self.attn_norm, self.cfg.norm_eps), onehot, written, mask, cos, sin)
        n = rms_norm(h, self.ffn_norm, self.cfg.norm_eps)
        gate_up = linear(n, self.gate_up)
        hidden = self.cfg.hidden_dim
        return h + linear(_columns(gate_up, 0, hidden).silu() * _columns(gate_up, hidden, 2 * hidden), self.down)


class Llama:
    """`model(tokens, start_pos)` -> logits (vocab,) of the last token, or (T, vocab) with all_logits=True."""

    def __init__(self, cfg: LlamaConfig, weights: dict[str, Any], embed_rows: Any, max_context: int):
        """weights by GGUF name: float32 tensors (lazy; realized here) or QuantizedMatrix (kept packed)."""
        if not 0 < max_context <= cfg.context_length:
            raise ValueError(f"max_context {max_context} must be in 1..{cfg.context_length}")
        self.cfg, self.max_context, self.embed_rows = cfg, max_context, embed_rows
        self.layers = [
            Block(
                cfg,
                {k.split(".")[2]: v for k, v in weights.items() if k.startswith(f"blk.{i}.")},
                max_context,
            )
            for i in range(cfg.n_layers)
        ]
        self.norm = weights["output_norm.weight"]
        self.output = _plain(weights.get("output.weight", weights["token_embd.weight"]))
        # one realize per layer: in one realize, the same-shaped weights of all layers would become one multi-output
        # kernel per shape, slow to generate
        for ws in [[self.output]] + [[b.attention.wqkv, b.attention.wo, b.gate_up, b.down] for b in self.layers]:
            floats = [w.packed for w in ws if isinstance(w, PanelMatrix)]
            if floats:
                Tensor.realize(*floats)
        # the rotation angles as llama.cpp computes them: position * scale^i by one float32 product per pair i, each
        # rounded (the same cos/sin of the same angles, so greedy decoding picks llama.cpp's tokens where its two
        # best logits are close)
        scale = Tensor(cfg.rope_theta, dtype=dtypes.float32).pow(-2 / cfg.head_dim)
        cols = [Tensor.arange(max_context).float()]
        for _ in range(1, cfg.head_dim // 2):
            cols.append(cols[-1] * scale)
        angles = Tensor.stack(*cols, dim=1)
        if "rope_freqs.weight" in weights:  # Llama 3.1+ long-context scaling: per-frequency divisors, as llama.cpp
            angles = angles / weights["rope_freqs.weight"].reshape(1, -1)
        self.cos, self.sin = angles.cos().contiguous().realize(), angles.sin().contiguous().realize()
        self.pos_var = UOp.variable("start_pos", 0, max_context - 1)
        self.token_var = UOp.variable("token", 0, embed_rows.n_rows - 1)
        self.decode_step = TinyJit(self._decode)
        self._tails_built: set[int] = set()  # prompt lengths whose logits' kernels were built ahead

    def __call__(self, tokens: list[int], start_pos: int, all_logits: bool = False) -> Tensor:
        t = len(tokens)
        if not tokens or start_pos < 0 or start_pos + t > self.max_context:
            raise ValueError(f"positions {start_pos}..{start_pos + t - 1} must lie in 0..{self.max_context - 1}")
        if t == 1 and not all_logits:
            # the token and the position are bound variables: every decode step replays the same captured kernels
            self.embed_rows.check(tokens)
            return self.decode_step(self.token_var.bind(tokens[0]), self.pos_var.bind(start_pos))
        x = self.embed_rows(tokens).reshape(1, t, self.cfg.dim)
        return self.forward(x, start_pos, all_logits)

    def _decode(self, token: UOp, pos: UOp) -> Tensor:
        return self.forward(self.embed_rows.row(token).reshape(1, 1, self.cfg.dim), Tensor(pos), at=pos)

    def forward(self, x: Tensor, start_pos: int | Tensor, all_logits: bool = False, at: UOp | None = None) -> Tensor:
        """at: a decode step's bound position (start_pos is it as a 0-d tensor): the cache rows are written there."""
        t = x.shape[1]
        prompt = isinstance(start_pos, int)
        positions = (Tensor.arange(t) + start_pos).reshape(t, 1)
        slots = Tensor.arange(self.max_context).reshape(1, -1)
        # a prompt at a known position attends to the slots up to its last position only (a 128-token prompt into a
        # cache of 1024: an eighth of the scores); a decode step at a Variable's position to the whole cache, masked
        end = start_pos + t if isinstance(start_pos, int) else self.max_context
        mask = slots[:, :end] <= positions
        onehot: Tensor | int | UOp
        if isinstance(start_pos, int):
            # rows at a known position: the rotation tables' rows sliced, the new cache rows written as a slice (see
            # Attention), the mask left lazy (comparisons of indices inside each layer's kernels). One-hot products and
            # stored masks were 8 of the cold prompt's 26 kernels, each slow to compile
            onehot, cos, sin = start_pos, self.cos[start_pos:end], self.sin[start_pos:end]
            written: Tensor | None = None
            shared: tuple[Tensor, ...] = ()
        else:
            onehot = (positions == slots).float()
            cos, sin = onehot @ self.cos, onehot @ self.sin
            written = onehot.sum(0).reshape(1, 1, -1, 1) > 0
            # shared by every layer: computed once here rather than again inside each layer's kernels
            shared = (onehot, written, mask, cos, sin) if at is None else (mask, cos, sin)
            if at is not None:
                onehot = at
        if prompt:
            # a prompt's embedded rows too: fused into the first layer's kernels they made that layer's kernels differ
            # from every other layer's (SmolLM2's cold prompt: 5 more kernels, in a schedule of their own). Scheduled
            # now and run with the first layer, whose kernels compile with theirs (run_together)
            first = Tensor.schedule_with_vars(*shared, x)
        else:
            Tensor.realize(*shared)
        for i, layer in enumerate(self.layers):
            # one schedule per layer bounds the graph the scheduler walks; realizing the caches with it makes them
            # plain buffers again (no graph of this step's position left behind for the next step)
            x = layer(x, onehot, written, mask, cos, sin)
            if i == 0 and prompt:
                run_together(first, x.schedule_with_vars(layer.attention.cache_k, layer.attention.cache_v))
                if not all_logits and len(self.layers) > 1 and t not in self._tails_built:
                    self._build_tail_ahead(x)
                    self._tails_built.add(t)
            else:
                Tensor.realize(x, layer.attention.cache_k, layer.attention.cache_v)
        return self._logits(x, all_logits)

    def _logits(self, x: Tensor, all_logits: bool) -> Tensor:
        x = x[0] if all_logits else x[0, -1:]
        logits = linear(rms_norm(x, self.norm, self.cfg.norm_eps), self.output)
        return logits if all_logits else logits[0]

    def _build_tail_ahead(self, x: Tensor) -> None:
        """The kernels of what follows the layers, the logits and their greedy pick (argmax_token), compiled while
        the other layers run (their kernels are the first layer's, and they keep one core busy): each had waited for
        its compiler after the layers (SmolLM2's cold prompt: two schedules of 4 and 2 kernels). Built over the first
        layer's output (a placeholder would not be sliced into rows as a stored tensor is; the logits are computed
        from another layer's, so none of these lazy nodes is met again) and a placeholder of the logits; neither
        schedule runs. Once per prompt length: the kernels depend on it."""
        logits = self._logits(x, False)
        pick = Tensor.empty(*logits.shape, dtype=logits.dtype, device=logits.device).argmax()
        compile_ahead(logits.contiguous().schedule() + pick.schedule())


class GGUFEmbedding:
    """Rows of a GGUF embedding table by token id: the rows' raw (quantized) bytes are copied in from the file's memory
    map and dequantized by the same kernel as any tensor of that type. `row(token)` reads one row in place, at an
    offset given by a bound Variable: a decode step's lookup inside its TinyJit (scheduled outside it, a lookup cost
    ~165 us of Python a token, 3% of a SmolLM2 decode step here)."""

    def __init__(self, mm: Any, info: GGUFTensorInfo, packed: QuantizedMatrix | None = None):
        """packed: the table's blocks where the model loaded them already (a tied output projection); else they are
        read as the file stores them (a lookup dequantizes rows: no layout for products, no copy of the file's)."""
        self.mm, self.info = mm, info
        self.n_rows = info.shape[0]
        if packed is None and info.ggml_type.dtype is None:
            packed = QuantizedMatrix(info.ggml_type, mm, info.offset, info.shape, Device.canonicalize(None))
        self.table = packed if packed is not None else gguf_tensor(mm, info)

    def check(self, ids: list[int]) -> None:
        for i in ids:
            if not 0 <= i < self.n_rows:
                raise IndexError(f"token id {i} is outside the vocabulary of {self.n_rows}")

    def __call__(self, ids: list[int]) -> Tensor:
        raw = take_rows(self.mm, self.info.offset, self.info.nbytes // self.n_rows, self.n_rows, ids)
        return gguf_tensor(
            raw, GGUFTensorInfo(self.info.name, (len(ids), self.info.shape[1]), self.info.ggml_type, 0, len(raw))
        )

    def row(self, token: UOp) -> Tensor:
        if isinstance(self.table, QuantizedMatrix):
            return self.table.dequantize((token, 1))
        return self.table.shrink(((token, token + 1), None))


def load_llama(
    path: str | os.PathLike, max_context: int = 1024, quantized: bool = False
) -> tuple[Llama, dict[str, Any]]:
    """The model and the file's metadata. Weights are dequantized once into float32 buffers, or with quantized=True
    left packed (QuantizedMatrix, over the memory-mapped file) and decoded inside each matmul's loop."""
    meta, infos, mm = gguf_read_header(path)
    cfg = LlamaConfig.from_gguf_metadata(meta, os.fspath(path))
    by_name = {i.name: i for i in infos}
    needed = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{i}.{n}.weight"
        for i in range(cfg.n_layers)
        for n in (
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        )
    ]
    missing = [n for n in needed if n not in by_name]
    if missing:
        raise ValueError(
            f"{os.fspath(path)}: not a complete llama model, missing tensors {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}"
        )
    weights: dict[str, Any] = {}
    for info in infos:
        packed = gguf_quantized(mm, info) if quantized and len(info.shape) == 2 else None
        weights[info.name] = packed if packed is not None else gguf_tensor(mm, info)
    table = weights["token_embd.weight"]
    embed = GGUFEmbedding(mm, by_name["token_embd.weight"], table if isinstance(table, QuantizedMatrix) else None)
    model = Llama(cfg, weights, embed, min(max_context, cfg.context_length))
    return model, meta


# one capture per shape of logits: replayed, the argmax's two kernels run without being scheduled again each step
_ARGMAX_JITS: dict[tuple[Any, ...], TinyJit] = {}


def _argmax(logits: Tensor) -> Tensor:
    return logits.argmax().realize()


def argmax_token(logits: Tensor) -> int:
    """The index of the largest logit (a greedy decode's next token). Through a TinyJit: scheduled eagerly at every
    step it cost ~280 us of Python a token, 5% of a decode step of SmolLM2-135M here."""
    logits = logits.contiguous().realize()
    jit = _ARGMAX_JITS.setdefault((logits.shape, logits.dtype, logits.device), TinyJit(_argmax))
    return int(jit(logits).item())
