"""all-MiniLM-L6-v2 sentence embeddings: a 6-layer BERT encoder (post-LayerNorm, exact GELU, padding mask), mean
pooling over the real tokens, L2 normalization. Weights from the safetensors file, vocabulary from vocab.txt.

    from lazygrad.models.minilm import MiniLM
    MiniLM.load().embed(["a sentence", "another one"])  # (2, 384), unit rows
"""

from __future__ import annotations

import json
import mmap
import os
from typing import Any

from lazygrad.dtype import dtypes
from lazygrad.engine.jit import TinyJit
from lazygrad.models import minilm_dir, take_rows
from lazygrad.models.tokenizer import WordPieceTokenizer
from lazygrad.nn.packed import PanelMatrix
from lazygrad.nn.state import safe_load, safe_load_metadata
from lazygrad.tensor import Tensor

JIT_SHAPES = 4  # batch shapes whose kernels a model keeps captured


def _layer_norm(x: Tensor, w: Tensor, b: Tensor, eps: float) -> Tensor:
    return x.layernorm(eps=eps) * w + b


class MiniLM:
    def __init__(
        self,
        weights: dict[str, Tensor],
        config: dict[str, Any],
        tokenizer: WordPieceTokenizer,
        word_rows: Any,
        max_length: int = 256,
    ):
        self.w, self.tokenizer, self.word_rows, self.max_length = weights, tokenizer, word_rows, max_length
        self.n_layers, self.n_heads = config["num_hidden_layers"], config["num_attention_heads"]
        self.dim, self.eps = config["hidden_size"], config["layer_norm_eps"]
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {config['hidden_act']!r} (only exact gelu)")
        # each layer's matrices copied once into the panels the device multiplies fastest (a product over the weight
        # as it is copies it into panels at every call), the query, key and value ones stacked into one matrix: one
        # matmul kernel that reads x once, where three products would each read it
        self._jits: dict[tuple, TinyJit] = {}  # the latest batch shapes' captures, oldest first
        self.layers = []
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            qkv = [f"{p}attention.self.{n}" for n in ("query", "key", "value")]
            layer = {
                "qkv": PanelMatrix.pack(Tensor.cat(*[weights[n + ".weight"] for n in qkv]).contiguous()),
                "qkv_bias": Tensor.cat(*[weights[n + ".bias"] for n in qkv]).contiguous(),
                **{
                    name: PanelMatrix.pack(weights[p + key + ".weight"])
                    for name, key in (
                        ("o", "attention.output.dense"),
                        ("up", "intermediate.dense"),
                        ("down", "output.dense"),
                    )
                },
            }
            # one realize per layer: the same-shaped matrices of every layer would merge into one kernel per shape
            Tensor.realize(layer["qkv_bias"], *[m.packed for m in layer.values() if isinstance(m, PanelMatrix)])
            self.layers.append(layer)

    @staticmethod
    def load(path: str | os.PathLike | None = None, max_length: int = 256) -> MiniLM:
        """From a directory holding model.safetensors, config.json and vocab.txt (default: the installed package's)."""
        path = os.fspath(path) if path is not None else minilm_dir()
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        st = os.path.join(path, "model.safetensors")
        weights = {k: v for k, v in safe_load(st).items() if k != "embeddings.position_ids"}
        header, start = safe_load_metadata(st)
        word = header["embeddings.word_embeddings.weight"]
        if word["dtype"] != "F32":
            raise ValueError(f"{st}: word embeddings are {word['dtype']}, expected F32")
        with open(st, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n_rows, dim = word["shape"]

        def word_rows(ids: list[int]) -> Tensor:
            raw = take_rows(mm, start + word["data_offsets"][0], dim * 4, n_rows, ids)
            return Tensor(raw, dtype=dtypes.float32).reshape(len(ids), dim)

        return MiniLM(
            weights, config, WordPieceTokenizer.from_vocab_file(os.path.join(path, "vocab.txt")), word_rows, max_length
        )

    def __call__(self, ids: list[list[int]]) -> Tensor:
        """Token ids (each row [CLS] ... [SEP], ragged) -> normalized mean-pooled embeddings (B, dim)."""
        b, length = len(ids), max(len(r) for r in ids)
        flat = [i for r in ids for i in r + [self.tokenizer.pad_id] * (length - len(r))]
        keep = Tensor([[1.0] * len(r) + [0.0] * (length - len(r)) for r in ids])  # (B, L): real tokens
        rows = self.word_rows(flat).reshape(b, length, self.dim)
        # a batch shape met before replays its kernels (TinyJit): building the graph of the 6 layers cost ~20 ms of
        # Python a call (batch of 64 x 22 tokens), a tenth of the call on two cores. The few latest shapes keep their
        # captures (each holds its activations' buffers); the copy of the result survives the next replay
        key = (b, length, Tensor.training, Tensor.is_grad_enabled())
        jit = self._jits.pop(key, None) or TinyJit(self._encode)
        self._jits[key] = jit
        if len(self._jits) > JIT_SHAPES:
            del self._jits[next(iter(self._jits))]
        return jit(rows, keep).clone().realize()

    def _encode(self, rows: Tensor, keep: Tensor) -> Tensor:
        """Word embeddings (B, L, dim) and the real tokens' mask (B, L) -> normalized mean-pooled embeddings."""
        (b, length), w = keep.shape, self.w
        x = rows + w["embeddings.position_embeddings.weight"][:length] + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        # the keys padded to whole vectors of 8 (masked out): the softmax over a row of 22 keys got vectors of 2 lanes
        # or gathers (codegen has no PADTO), its two exp kernels 4.2 ms a layer on one core, over 24 keys 1.4 ms
        keys = -(-length // 8) * 8
        mask = (keep.pad(((0, 0), (0, keys - length))) > 0.5).reshape(b, 1, 1, keys)
        pad_keys = ((0, 0), (0, 0), (0, keys - length), (0, 0))
        hd = self.dim // self.n_heads
        for i, layer in enumerate(self.layers):
            p = f"encoder.layer.{i}."

            def dense(t: Tensor, name: str, bias: str) -> Tensor:
                return layer[name].linear(t) + w[p + bias + ".bias"]  # noqa: B023 (used inside the loop)

            qkv = (layer["qkv"].linear(x) + layer["qkv_bias"]).reshape(b, length, 3, self.n_heads, hd)
            q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))
            k, v = k.pad(pad_keys), v.pad(pad_keys)
            a = q.scaled_dot_product_attention(k, v, attn_mask=mask).transpose(1, 2).reshape(b, length, self.dim)
            x = _layer_norm(
                dense(a, "o", "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            h = dense(dense(x, "up", "intermediate.dense").gelu("none"), "down", "output.dense")
            x = _layer_norm(h + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
            x = x.realize()
        pooled = (x * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
        return pooled / (pooled.square().sum(-1, keepdim=True).sqrt().maximum(1e-12))

    def embed(self, sentences: list[str], batch_size: int = 64) -> Any:
        """Unit-length embeddings, a numpy array (len(sentences), dim), computed batch_size sentences at a time."""
        import numpy as np

        if isinstance(sentences, str):
            raise TypeError("embed takes a list of sentences; wrap a single one in a list")
        out = []
        for s in range(0, len(sentences), batch_size):
            ids = [self.tokenizer.encode(t, self.max_length) for t in sentences[s : s + batch_size]]
            out.append(self(ids).numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), dtype=np.float32)
