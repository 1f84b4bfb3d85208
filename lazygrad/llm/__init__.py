"""Text generation with a Llama-family GGUF model: sampling and a token stream (the CLI is `python -m lazygrad.llm`)."""

from __future__ import annotations

import heapq
import random
from typing import Iterator

from lazygrad.models.llama import Llama, argmax_token
from lazygrad.models.tokenizer import BPETokenizer
from lazygrad.tensor import Tensor


class Sampler:
    """Greedy at temperature 0; otherwise softmax(logits / temperature) restricted to the top_k most likely tokens (0:
    all) and then to the smallest set whose probability reaches top_p, drawn with a seeded generator."""

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None):
        if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
            raise ValueError(
                f"sampling needs temperature >= 0, top_k >= 0, 0 < top_p <= 1; got {temperature}, {top_k}, {top_p}"
            )
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.rng = random.Random(seed)

    def __call__(self, logits: Tensor) -> int:
        if self.temperature == 0:
            return argmax_token(logits)  # (whose kernels a prompt builds ahead, Llama._build_tail_ahead)
        probs = (logits / self.temperature).softmax().tolist()
        k = self.top_k if self.top_k else len(probs)
        best = heapq.nlargest(k, range(len(probs)), key=probs.__getitem__)
        kept, total = [], 0.0
        for i in best:
            kept.append(i)
            total += probs[i]
            if total >= self.top_p:
                break
        return self.rng.choices(kept, weights=[probs[i] for i in kept])[0]


def stop_ids(tok: BPETokenizer) -> set[int]:
    """The end-of-sequence token and the chat end-of-turn markers the vocabulary has."""
    ids = {tok.ids[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>") if t in tok.ids}
    return ids | ({tok.eos_id} if tok.eos_id is not None else set())


def generate(
    model: Llama, prompt: list[int], max_tokens: int, sampler: Sampler, stop: set[int] = frozenset()
) -> Iterator[int]:
    """Token ids after the prompt, one per step, until a stop token (not yielded) or max_tokens."""
    if not prompt:
        raise ValueError("generate needs a prompt of at least one token")
    token = sampler(model(prompt, 0))
    for pos in range(len(prompt), len(prompt) + max_tokens):
        if token in stop:
            return
        yield token
        if pos + 1 >= min(len(prompt) + max_tokens, model.max_context):
            return
        token = sampler(model([token], pos))
