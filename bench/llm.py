"""Pretrained models on this CPU: lazygrad vs the torch reference implementations (test/models/torch_reference.py).

    python bench/llm.py

SmolLM2-135M (GGUF, weights dequantized to float32 in both): greedy decode tokens/s with a KV cache, 128-token prompt
tokens/s; all-MiniLM-L6-v2: sentences/s for a batch of 64; first-token latency of a fresh process (model load and
kernel compiles included) with the kernel disk cache off (cold) and filled (warm).

Then decode from the same GGUF file with its weights kept quantized (Q4_1, the tied embedding Q8_0): lazygrad with
float32 weights, lazygrad with quantized=True (a decode step quantizes x to int8 per block and sums integer dot
products, as llama.cpp does) and llama.cpp (when `llama_cpp` imports: pip install llama-cpp-python,
the `bench-llamacpp` extra), each as tokens/s and as a fraction of the memory-bandwidth limit: a decode step reads
every weight once, so the limit is the bandwidth a lazygrad sum over a 256 MB buffer reaches divided by the packed
bytes of the weights.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PROMPT_TOKENS, DECODE_TOKENS = 128, 32
TEXT = (
    "Tensors are the central data structure of deep learning frameworks. A tensor is a multi-dimensional array of "
    "numbers with a shape and a data type, and every layer of a neural network reads tensors and writes tensors. "
)


def first_token_child() -> None:
    """Load the model, run a short chat prompt, print seconds from process start to the first generated token."""
    from lazygrad.models import smollm2_path
    from lazygrad.models.llama import argmax_token, load_llama
    from lazygrad.models.tokenizer import BPETokenizer

    model, meta = load_llama(smollm2_path(), max_context=64)
    tok = BPETokenizer.from_gguf_metadata(meta)
    argmax_token(model(tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is a tensor?"}])), 0))
    print(time.perf_counter() - START)


def first_token_latency(cold: bool) -> float:
    env = dict(os.environ, CACHELEVEL="0") if cold else dict(os.environ)
    cmd = [sys.executable, __file__, "--first-token"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def timed(fn, reps: int = 3) -> float:
    """Median seconds of fn() after one warm-up call (compiles excluded)."""
    fn()
    times = []
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return statistics.median(times)


def greedy_decode_tok_s(model, prompt: list[int]) -> float:
    """Tokens/s of the median of DECODE_TOKENS - 3 greedy steps after the prompt and three steps that capture the JIT
    (the median: on a CPU shared with other processes a step now and then waits a scheduler time slice)."""
    from lazygrad.models.llama import argmax_token

    token = argmax_token(model(prompt, 0))
    for i in range(3):
        token = argmax_token(model([token], PROMPT_TOKENS + i))
    steps = []
    for i in range(3, DECODE_TOKENS):
        st = time.perf_counter()
        token = argmax_token(model([token], PROMPT_TOKENS + i))
        steps.append(time.perf_counter() - st)
    return 1 / statistics.median(steps)


def llama_cpp_decode_tok_s(path: str, prompt: list[int], ctx: int) -> float | None:
    """llama.cpp's greedy decode tokens/s on the same file and threads, or None where llama_cpp does not import."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=path, n_ctx=ctx, n_batch=PROMPT_TOKENS, n_threads=os.cpu_count() or 1, verbose=False)
    gen = llm.generate(prompt, temp=0.0, top_k=1, reset=True)
    for _ in range(3):
        next(gen)
    steps = []
    for _ in range(3, DECODE_TOKENS):
        st = time.perf_counter()
        next(gen)
        steps.append(time.perf_counter() - st)
    return 1 / statistics.median(steps)


def read_bandwidth_gb_s() -> float:
    """GB/s of a lazygrad float32 sum over a 256 MB buffer (every core): the memory-bandwidth limit of a decode step."""
    from lazygrad.engine.jit import TinyJit
    from lazygrad.tensor import Tensor

    big = Tensor.ones(64 << 20).contiguous().realize()
    total = TinyJit(lambda t: t.sum().realize())
    for _ in range(3):
        total(big)
    best = min(timed_once(lambda: total(big)) for _ in range(5))
    return big.nbytes / best / 1e9


def timed_once(fn) -> float:
    st = time.perf_counter()
    fn()
    return time.perf_counter() - st


def quantized_decode_table(path: str, prompt: list[int], ctx: int, f32_tok_s: float) -> None:
    from lazygrad.models.llama import load_llama
    from lazygrad.nn.gguf import gguf_read_header

    _, infos, _ = gguf_read_header(path)
    bytes_per_token = sum(i.nbytes for i in infos)  # every weight once (the tied embedding as the output projection)
    limit = read_bandwidth_gb_s() * 1e9 / bytes_per_token
    quantized, _ = load_llama(path, max_context=ctx, quantized=True)
    rows = [
        ("lazygrad, float32 weights", f32_tok_s),
        ("lazygrad, quantized=True", greedy_decode_tok_s(quantized, prompt)),
    ]
    cpp = llama_cpp_decode_tok_s(path, prompt, ctx)
    print(
        f"\nSmolLM2 greedy decode from the GGUF file ({bytes_per_token / 1e6:.0f} MB of packed weights per token, "
        f"bandwidth limit {limit:.0f} tok/s)"
    )
    print(f"{'decoder':44s} {'tok/s':>10s} {'of limit':>10s} {'/llama.cpp':>11s}")
    for name, tok_s in rows + ([("llama.cpp (llama-cpp-python)", cpp)] if cpp else []):
        vs = f"{tok_s / cpp:11.2f}" if cpp else f"{'':11s}"
        print(f"{name:44s} {tok_s:10.1f} {tok_s / limit:10.2f} {vs}")
    if cpp is None:
        print("llama.cpp column absent: llama_cpp does not import (pip install llama-cpp-python)")


def main() -> None:
    import torch

    from lazygrad.models import minilm_dir, smollm2_path
    from lazygrad.models.llama import load_llama
    from lazygrad.models.minilm import MiniLM
    from lazygrad.models.tokenizer import BPETokenizer
    from test.models.torch_reference import TorchLlama, TorchMiniLM

    torch.set_num_threads(os.cpu_count() or 1)
    path = smollm2_path()
    ctx = PROMPT_TOKENS + DECODE_TOKENS + 8
    model, meta = load_llama(path, max_context=ctx)
    tok = BPETokenizer.from_gguf_metadata(meta)
    prompt = (tok.encode(TEXT) * (PROMPT_TOKENS // len(tok.encode(TEXT)) + 1))[:PROMPT_TOKENS]
    ref = TorchLlama(path)
    rows = []

    lg_prompt = timed(lambda: model(prompt, 0).realize())
    th_cache = ref.new_cache(ctx)
    th_prompt = timed(lambda: ref.forward(prompt, 0, th_cache, all_logits=False))
    rows.append(("SmolLM2 prompt, 128 tokens (tok/s)", PROMPT_TOKENS / lg_prompt, PROMPT_TOKENS / th_prompt))

    def th_decode() -> float:
        cache = ref.new_cache(ctx)
        token = int(ref.forward(prompt, 0, cache, all_logits=False)[-1].argmax())
        st = time.perf_counter()
        for i in range(DECODE_TOKENS - 3):
            token = int(ref.forward([token], PROMPT_TOKENS + i, cache, all_logits=False)[-1].argmax())
        return (DECODE_TOKENS - 3) / (time.perf_counter() - st)

    lg_decode = greedy_decode_tok_s(model, prompt)
    rows.append(("SmolLM2 greedy decode (tok/s)", lg_decode, th_decode()))

    minilm, th_minilm = MiniLM.load(), TorchMiniLM(minilm_dir())
    words = TEXT.split()
    sentences = [" ".join(words[i % 7 : i % 7 + 4 + i % 13]) for i in range(64)]
    ids = [minilm.tokenizer.encode(s) for s in sentences]
    lg_embed = timed(lambda: minilm(ids).realize())
    th_embed = timed(lambda: th_minilm(ids))
    rows.append(("MiniLM embed, batch of 64 (sentences/s)", 64 / lg_embed, 64 / th_embed))

    print(f"{'measured':44s} {'lazygrad':>10s} {'torch':>10s} {'lazygrad/torch':>15s}")
    for name, lg, th in rows:
        print(f"{name:44s} {lg:10.1f} {th:10.1f} {lg / th:15.2f}")
    cold, warm = first_token_latency(cold=True), first_token_latency(cold=False)
    print(
        f"first-token latency of a fresh process (load + compile + prompt): cold cache {cold:.2f} s, warm {warm:.2f} s"
    )
    quantized_decode_table(path, prompt, ctx, lg_decode)


if __name__ == "__main__":
    START = time.perf_counter()
    if "--first-token" in sys.argv:
        first_token_child()
    else:
        main()
