"""Pretrained models on this CPU: lazygrad vs the torch reference implementations (test/models/torch_reference.py).

    python bench/llm.py

SmolLM2-135M (GGUF, weights dequantized to float32 in both): greedy decode tokens/s with a KV cache, 128-token prompt
tokens/s; all-MiniLM-L6-v2: sentences/s for a batch of 64 (and, with sentence-transformers installed: the `bench-st`
extra, its encode of the same sentences, tokenizers included on both sides); first-token latency of a fresh process
(model load and kernel compiles included) with the kernel disk cache off (cold) and filled (warm).

Then the same GGUF file with its weights kept quantized (Q4_1, the tied embedding Q8_0): lazygrad with float32
weights, lazygrad with quantized=True (a decode step quantizes x to int8 per block and sums integer dot products, as
llama.cpp does) and llama.cpp (when `llama_cpp` imports: pip install llama-cpp-python, the `bench-llamacpp` extra),
measured in alternating rounds (the best round of each): the 128-token prompt in tokens/s, and greedy decode in
tokens/s and as a fraction of the memory-bandwidth limit: a decode step reads every weight once, so the limit is the
bandwidth a lazygrad sum over a 256 MB buffer reaches divided by the packed bytes of the weights. Last, each
quantized matrix-vector product of a decode step alone (x's int8 quantization included): time, GB/s of its blocks as
the file stores them (the copy a device reads may be larger: padded, or rows in groups with float32 scales) and the
fraction of that bandwidth (replayed alone, a weight that fits the last-level cache is read from there:
the fraction may pass 1; in a decode step every weight comes from memory); and the same product for each quantized
type (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K) on synthetic weights of one shape larger than the last-level cache; and
with llama.cpp, greedy decode of the model requantized by llama.cpp into Q8_0 and Q6_K (its 576-wide matrices in Q8_0,
the MLP down projections in Q6_K), lazygrad quantized=True against llama.cpp on each file.

    python bench/llm.py --quantized    # the quantized tables only
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from timing import call_times  # noqa: E402  (bench/timing.py, beside this file)

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
    return statistics.median(call_times(fn, reps))


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


def llama_cpp_model(path: str, ctx: int):
    """llama.cpp on the same file and threads, or None where llama_cpp does not import."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    return Llama(model_path=path, n_ctx=ctx, n_batch=PROMPT_TOKENS, n_threads=os.cpu_count() or 1, verbose=False)


def llama_cpp_decode_tok_s(llm, prompt: list[int]) -> float:
    """llama.cpp's greedy decode tokens/s, measured as greedy_decode_tok_s measures lazygrad's."""
    gen = llm.generate(prompt, temp=0.0, top_k=1, reset=True)
    for _ in range(3):
        next(gen)
    steps = []
    for _ in range(3, DECODE_TOKENS):
        st = time.perf_counter()
        next(gen)
        steps.append(time.perf_counter() - st)
    return 1 / statistics.median(steps)


def llama_cpp_prompt_tok_s(llm, prompt: list[int]) -> float:
    def run() -> None:
        llm.reset()
        llm.eval(prompt)

    return PROMPT_TOKENS / timed(run)


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


ROUNDS = 3


def quantized_tables(path: str, prompt: list[int], ctx: int, f32_model) -> None:
    from lazygrad.models.llama import load_llama
    from lazygrad.nn.gguf import gguf_read_header

    _, infos, _ = gguf_read_header(path)
    bytes_per_token = sum(i.nbytes for i in infos)  # every weight once (the tied embedding as the output projection)
    bandwidth = read_bandwidth_gb_s()
    limit = bandwidth * 1e9 / bytes_per_token
    quantized, _ = load_llama(path, max_context=ctx, quantized=True)
    llm = llama_cpp_model(path, ctx)
    runs = {
        "lazygrad, float32 weights": (
            lambda: PROMPT_TOKENS / timed(lambda: f32_model(prompt, 0).realize()),
            lambda: greedy_decode_tok_s(f32_model, prompt),
        ),
        "lazygrad, quantized=True": (
            lambda: PROMPT_TOKENS / timed(lambda: quantized(prompt, 0).realize()),
            lambda: greedy_decode_tok_s(quantized, prompt),
        ),
    }
    if llm is not None:
        runs["llama.cpp (llama-cpp-python)"] = (
            lambda: llama_cpp_prompt_tok_s(llm, prompt),
            lambda: llama_cpp_decode_tok_s(llm, prompt),
        )
    # alternating rounds, the best of each: the machine is shared, and a round that waited is slow for one side only
    best = {name: [0.0, 0.0] for name in runs}
    for _ in range(ROUNDS):
        for name, fns in runs.items():
            best[name] = [max(b, fn()) for b, fn in zip(best[name], fns)]
    cpp = best.get("llama.cpp (llama-cpp-python)")
    print(
        f"\nSmolLM2 from the GGUF file, best of {ROUNDS} alternating rounds ({bytes_per_token / 1e6:.0f} MB of packed "
        f"weights per token, {bandwidth:.1f} GB/s: decode limit {limit:.0f} tok/s)"
    )
    print(
        f"{'':32s} {'prompt tok/s':>12s} {'/llama.cpp':>11s} {'decode tok/s':>13s} {'of limit':>9s} {'/llama.cpp':>11s}"
    )
    for name, (prompt_tok_s, decode_tok_s) in best.items():
        vs_p = f"{prompt_tok_s / cpp[0]:11.2f}" if cpp else f"{'':11s}"
        vs_d = f"{decode_tok_s / cpp[1]:11.2f}" if cpp else f"{'':11s}"
        print(f"{name:32s} {prompt_tok_s:12.1f} {vs_p} {decode_tok_s:13.1f} {decode_tok_s / limit:9.2f} {vs_d}")
    if llm is None:
        print("llama.cpp column absent: llama_cpp does not import (pip install llama-cpp-python)")
    matvec_table(quantized, bandwidth)
    format_table(bandwidth)
    requantized_table(path, prompt, ctx, bandwidth)


def matvec_table(model, bandwidth: float) -> None:
    """Each quantized matrix-vector product of a decode step alone, replayed through a TinyJit (best of 50)."""
    from lazygrad.engine.jit import TinyJit
    from lazygrad.models.llama import linear
    from lazygrad.nn.gguf import QuantizedMatrix
    from lazygrad.tensor import Tensor

    layer = model.layers[0]
    weights = [
        ("attention q, k, v", layer.attention.wqkv),
        ("attention output", layer.attention.wo),
        ("mlp gate, up", layer.gate_up),
        ("mlp down", layer.down),
        ("output (tied embedding)", model.output),
    ]
    print(
        f"\n{'decode matvec (x quantization included)':40s} {'type':>5s} {'shape':>12s} {'us':>8s} {'GB/s':>7s}"
        f" {'of bw':>6s}"
    )
    for name, w in weights:
        if not isinstance(w, QuantizedMatrix):
            continue
        x = Tensor.randn(1, 1, w.shape[1]).realize()
        step = TinyJit(lambda x, w=w: linear(x, w).realize())
        for _ in range(3):
            step(x)
        t = min(timed_once(lambda: step(x)) for _ in range(50))
        gb_s = file_nbytes(w) / t / 1e9
        shape = f"{w.shape[0]}x{w.shape[1]}"
        print(f"{name:40s} {w.gt.name:>5s} {shape:>12s} {t * 1e6:8.1f} {gb_s:7.1f} {gb_s / bandwidth:6.2f}")


def file_nbytes(w) -> int:
    """Bytes of a QuantizedMatrix's blocks as a GGUF file stores them."""
    from lazygrad.helpers import prod
    from lazygrad.nn.gguf import GGML_TYPES

    stored = next(t for t in GGML_TYPES.values() if t.name == w.gt.name)
    return prod(w.shape) // stored.block_elems * stored.block_bytes


FORMAT_SHAPE = (16384, 4096)  # 38-71 MB of packed blocks: more than the last-level cache, read from memory


def synthetic_matrix(name: str, shape: tuple[int, int]):
    """A QuantizedMatrix of random blocks of a ggml type (name), its float16 scales small and finite."""
    import numpy as np

    from lazygrad.nn.gguf import GGML_TYPES, QuantizedMatrix

    gt = next(t for t in GGML_TYPES.values() if t.name == name)
    n = shape[0] * shape[1] // gt.block_elems
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (n, gt.block_bytes), dtype=np.uint8)
    scales = slice(208, 210) if name == "Q6_K" else slice(0, 4 if name in ("Q4_1", "Q4_K", "Q5_K") else 2)
    halves = (scales.stop - scales.start) // 2
    blocks[:, scales] = (rng.standard_normal((n, halves)) * 0.01).astype(np.float16).view(np.uint8)
    return QuantizedMatrix.load(gt, blocks.tobytes(), 0, shape, "CPU")


def format_table(bandwidth: float) -> None:
    """A decode step's matrix-vector product (x's int8 quantization included) for each quantized type, synthetic weights
    of one shape, replayed through a TinyJit (best of 20): GB/s of the file's blocks and the fraction of bandwidth."""
    from lazygrad.engine.jit import TinyJit
    from lazygrad.tensor import Tensor

    rows, cols = FORMAT_SHAPE
    head = f"{'type':>5s} {'shape':>12s} {'MB':>6s} {'us':>8s} {'GB/s':>7s} {'of bw':>6s}"
    print(f"\n{'decode matvec per type, synthetic weights':40s} {head}")
    for name in ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"):
        w = synthetic_matrix(name, FORMAT_SHAPE)
        x = Tensor.randn(1, cols).realize()
        step = TinyJit(lambda x, w=w: w.linear(x).realize())
        for _ in range(3):
            step(x)
        t = min(timed_once(lambda: step(x)) for _ in range(20))
        gb_s = file_nbytes(w) / t / 1e9
        print(
            f"{'':40s} {name:>5s} {f'{rows}x{cols}':>12s} {file_nbytes(w) / 1e6:6.1f} {t * 1e6:8.1f} {gb_s:7.1f}"
            f" {gb_s / bandwidth:6.2f}"
        )


# types llama.cpp requantizes SmolLM2 into that lazygrad reads: its 576-wide matrices are no whole super-blocks, and
# llama.cpp stores them in a K-quant's fallback type (Q6_K: Q8_0; Q4_K, Q5_K: Q5_0, Q5_1, which lazygrad does not read)
REQUANTIZED = ("Q8_0", "Q6_K")
_QUANTIZE = """
import ctypes, sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.allow_requantize, p.pure = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3]), True, True
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))
"""


def requantized_table(path: str, prompt: list[int], ctx: int, bandwidth: float) -> None:
    """The same model requantized by llama.cpp into each of REQUANTIZED (every matrix of that type or its fallback,
    from the Q4_1 file's values): greedy decode tokens/s of lazygrad quantized=True and llama.cpp, best of ROUNDS
    alternating rounds, and the fraction of the bandwidth limit."""
    import tempfile
    from collections import Counter

    from lazygrad.models.llama import load_llama
    from lazygrad.nn.gguf import gguf_read_header

    if llama_cpp_model(path, ctx) is None:
        return
    print(
        f"\n{'SmolLM2 requantized by llama.cpp':40s} {'types':>28s} {'MB':>6s} {'lazygrad':>9s} {'llama.cpp':>10s}"
        f" {'ratio':>6s} {'of limit':>9s}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in REQUANTIZED:
            out = os.path.join(tmp, f"{name}.gguf")
            # a process of its own: llama.cpp logs every tensor it converts
            if subprocess.run([sys.executable, "-c", _QUANTIZE, path, out, name], capture_output=True).returncode:
                print(f"{name}: llama.cpp's quantize failed")
                continue
            _, infos, _ = gguf_read_header(out)
            mix = Counter(i.ggml_type.name for i in infos if len(i.shape) == 2)
            nbytes = sum(i.nbytes for i in infos)
            model, _ = load_llama(out, max_context=ctx, quantized=True)
            llm = llama_cpp_model(out, ctx)
            best = [0.0, 0.0]
            for _ in range(ROUNDS):
                best = [
                    max(best[0], greedy_decode_tok_s(model, prompt)),
                    max(best[1], llama_cpp_decode_tok_s(llm, prompt)),
                ]
            types = " ".join(f"{n} {c}" for n, c in mix.most_common())
            limit = bandwidth * 1e9 / nbytes
            print(
                f"{'':40s} {types:>28s} {nbytes / 1e6:6.1f} {best[0]:9.1f} {best[1]:10.1f} {best[0] / best[1]:6.2f}"
                f" {best[0] / limit:9.2f}"
            )
            del model, llm


def bench_prompt(tok) -> list[int]:
    """PROMPT_TOKENS tokens of TEXT repeated."""
    ids = tok.encode(TEXT)
    return (ids * (PROMPT_TOKENS // len(ids) + 1))[:PROMPT_TOKENS]


def quantized_only() -> None:
    from lazygrad.models import smollm2_path
    from lazygrad.models.llama import load_llama
    from lazygrad.models.tokenizer import BPETokenizer

    path = smollm2_path()
    ctx = PROMPT_TOKENS + DECODE_TOKENS + 8
    model, meta = load_llama(path, max_context=ctx)
    quantized_tables(path, bench_prompt(BPETokenizer.from_gguf_metadata(meta)), ctx, model)


def sentence_transformers_row(minilm, sentences: list[str]) -> str | None:
    """What a user would pick instead: sentence-transformers' encode of the same 64 sentences with the same model
    directory, tokenization included on both sides (None where sentence-transformers is not installed: the
    `bench-st` extra)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    from lazygrad.models import minilm_dir

    st_model = SentenceTransformer(str(minilm_dir()), device="cpu")
    lg = timed(lambda: minilm([minilm.tokenizer.encode(s) for s in sentences]).realize())
    st = timed(lambda: st_model.encode(sentences, batch_size=len(sentences)))
    name = "MiniLM encode incl. tokenizer (sentences/s)"
    n = len(sentences)
    return f"{name:44s} {n / lg:10.1f} {n / st:10.1f} {st / lg:15.2f}   (peer: sentence-transformers)"


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
    prompt = bench_prompt(BPETokenizer.from_gguf_metadata(meta))
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
    st_row = sentence_transformers_row(minilm, sentences)
    if st_row:
        print(st_row)
    print(
        f"first-token latency of a fresh process (load + compile + prompt): cold cache {cold:.2f} s, warm {warm:.2f} s"
    )
    quantized_tables(path, prompt, ctx, model)


if __name__ == "__main__":
    START = time.perf_counter()
    if "--first-token" in sys.argv:
        first_token_child()
    elif "--quantized" in sys.argv:
        quantized_only()
    else:
        main()
