"""Independent torch implementations of the bundled models, the references of test/models and bench/llm.py.

Llama: weights dequantized by the `gguf` package (numpy), Q/K rows un-permuted back to Hugging Face's layout and
rotated with rotate_half, as transformers does; a KV cache for decoding. MiniLM: a BERT written from the safetensors
weights (loaded with the `safetensors` package)."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import torch.nn.functional as F


class TorchLlama:
    def __init__(self, path: str):
        import gguf

        reader = gguf.GGUFReader(path)
        meta = {k: f.contents() for k, f in reader.fields.items()}
        self.n_layers, self.dim = meta["llama.block_count"], meta["llama.embedding_length"]
        self.n_heads, self.n_kv = meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]
        self.eps, self.theta = meta["llama.attention.layer_norm_rms_epsilon"], meta["llama.rope.freq_base"]
        self.hd = self.dim // self.n_heads
        self.w = {}
        for t in reader.tensors:
            shape = [int(s) for s in reversed(t.shape)]
            w = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)))
            heads = (
                self.n_heads
                if t.name.endswith("attn_q.weight")
                else self.n_kv
                if t.name.endswith("attn_k.weight")
                else 0
            )
            if heads:  # llama.cpp's converter interleaves each head's two rotary halves: undo it
                w = w.reshape(heads, self.hd // 2, 2, -1).transpose(1, 2).reshape(shape)
            self.w[t.name] = w.float().contiguous()
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def new_cache(self, max_context: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [
            (torch.zeros(self.n_kv, max_context, self.hd), torch.zeros(self.n_kv, max_context, self.hd))
            for _ in range(self.n_layers)
        ]

    @torch.no_grad()
    def forward(
        self, ids: list[int], start_pos: int, cache: list[tuple[torch.Tensor, torch.Tensor]], all_logits: bool = True
    ) -> torch.Tensor:
        t, end = len(ids), start_pos + len(ids)
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        ang = torch.outer(torch.arange(start_pos, end, dtype=torch.float32), inv)
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

        def rope(x: torch.Tensor) -> torch.Tensor:
            x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2 :]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        causal = torch.arange(end)[None, :] <= torch.arange(start_pos, end)[:, None]
        x = self.w["token_embd.weight"][torch.tensor(ids)]
        for i in range(self.n_layers):
            p = f"blk.{i}."
            h = self.rms(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).view(t, self.n_heads, self.hd).transpose(0, 1)
            k = (h @ self.w[p + "attn_k.weight"].T).view(t, self.n_kv, self.hd).transpose(0, 1)
            v = (h @ self.w[p + "attn_v.weight"].T).view(t, self.n_kv, self.hd).transpose(0, 1)
            q, k = rope(q), rope(k)
            ck, cv = cache[i]
            ck[:, start_pos:end], cv[:, start_pos:end] = k, v
            k = ck[:, :end].repeat_interleave(self.n_heads // self.n_kv, 0)
            v = cv[:, :end].repeat_interleave(self.n_heads // self.n_kv, 0)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
            x = x + a.transpose(0, 1).reshape(t, self.dim) @ self.w[p + "attn_output.weight"].T
            h = self.rms(x, self.w[p + "ffn_norm.weight"])
            gate, up = h @ self.w[p + "ffn_gate.weight"].T, h @ self.w[p + "ffn_up.weight"].T
            x = x + (F.silu(gate) * up) @ self.w[p + "ffn_down.weight"].T
        x = x if all_logits else x[-1:]
        return self.rms(x, self.w["output_norm.weight"]) @ self.out.T

    def logits(self, ids: list[int]) -> torch.Tensor:
        return self.forward(ids, 0, self.new_cache(len(ids)))


class TorchMiniLM:
    def __init__(self, model_dir: str):
        from safetensors.torch import load_file

        self.w = load_file(os.path.join(model_dir, "model.safetensors"))
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.heads, self.eps, self.n_layers = (
            cfg["num_attention_heads"],
            cfg["layer_norm_eps"],
            cfg["num_hidden_layers"],
        )

    @torch.no_grad()
    def __call__(self, ids: list[list[int]]) -> torch.Tensor:
        w, eps = self.w, self.eps
        b, length = len(ids), max(len(r) for r in ids)
        tok = torch.tensor([r + [0] * (length - len(r)) for r in ids])
        keep = torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in ids], dtype=torch.float32)
        x = w["embeddings.word_embeddings.weight"][tok] + w["embeddings.position_embeddings.weight"][:length]
        x = x + w["embeddings.token_type_embeddings.weight"][0]
        dim = x.shape[-1]
        x = F.layer_norm(x, (dim,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        bias = (1.0 - keep)[:, None, None, :] * torch.finfo(torch.float32).min
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."

            def lin(t: torch.Tensor, n: str) -> torch.Tensor:
                return F.linear(t, w[p + n + ".weight"], w[p + n + ".bias"])  # noqa: B023

            q, k, v = (
                lin(x, f"attention.self.{n}").view(b, length, self.heads, -1).transpose(1, 2)
                for n in ("query", "key", "value")
            )
            att = torch.softmax(q @ k.transpose(-1, -2) / (dim // self.heads) ** 0.5 + bias, -1) @ v
            x = F.layer_norm(
                lin(att.transpose(1, 2).reshape(b, length, dim), "attention.output.dense") + x,
                (dim,),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                eps,
            )
            h = lin(F.gelu(lin(x, "intermediate.dense")), "output.dense")
            x = F.layer_norm(h + x, (dim,), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        pooled = (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return F.normalize(pooled, dim=-1)
