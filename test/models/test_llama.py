"""SmolLM2-135M from its GGUF against the independent torch implementation in torch_reference.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad.models import smollm2_path
from lazygrad.models.llama import argmax_token, load_llama
from lazygrad.models.tokenizer import BPETokenizer
from lazygrad.nn.gguf import gguf_read_header

try:
    MODEL = smollm2_path()
except FileNotFoundError as e:
    pytest.skip(str(e), allow_module_level=True)
gguf = pytest.importorskip("gguf", reason="the gguf package is the test's independent reference reader")
from test.models.torch_reference import TorchLlama  # noqa: E402 (needs gguf)


@pytest.fixture(scope="module")
def setup():
    model, meta = load_llama(MODEL, max_context=128)
    tok = BPETokenizer.from_gguf_metadata(meta)
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is a tensor?"}]))
    with torch.no_grad():
        yield model, tok, prompt, TorchLlama(MODEL)


def test_prompt_logits_match_torch(setup):
    model, _, prompt, ref = setup
    ours = model(prompt, 0, all_logits=True).numpy()
    with torch.no_grad():
        theirs = ref.logits(prompt).numpy()
    assert ours.shape == theirs.shape == (len(prompt), model.cfg.vocab_size)
    np.testing.assert_allclose(ours, theirs, atol=2e-3, rtol=0)  # logits reach ~40; measured max diff ~1e-4


def test_greedy_decode_32_tokens_matches_torch(setup):
    model, tok, prompt, ref = setup
    ours = [argmax_token(model(prompt, 0))]
    for _ in range(31):
        ours.append(argmax_token(model([ours[-1]], len(prompt) + len(ours) - 1)))
    # torch's greedy choice after every prefix of our sequence, in one pass: all equal means the same greedy decode
    with torch.no_grad():
        theirs = ref.logits(prompt + ours[:-1])[len(prompt) - 1 :].argmax(-1).tolist()
    assert ours == theirs, f"lazygrad: {tok.decode(ours)!r}\ntorch:    {tok.decode(theirs)!r}"


def test_prompt_in_two_parts_matches_torch(setup):
    """A prompt's second part at a later position writes its rows into the cache at that position (a slice's write)
    and attends to the first part's: its logits are those of the whole prompt in one pass."""
    model, _, prompt, ref = setup
    model(prompt[:7], 0)
    ours = model(prompt[7:], 7, all_logits=True).numpy()
    with torch.no_grad():
        theirs = ref.logits(prompt)[7:].numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-3, rtol=0)


def test_reader_metadata_and_config(setup):
    meta, infos, _ = gguf_read_header(MODEL)
    reader = gguf.GGUFReader(MODEL)
    assert len(infos) == len(reader.tensors)
    for key in ("general.architecture", "llama.block_count", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert meta[key] == reader.fields[key].contents()
    model = setup[0]
    assert (model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_kv_heads, model.cfg.dim) == (30, 9, 3, 576)


def _quantized_greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    tokens, logits = [argmax_token(model(prompt, 0))], []
    for _ in range(n - 1):
        logits.append(model([tokens[-1]], len(prompt) + len(tokens) - 1).numpy().reshape(-1))
        tokens.append(int(logits[-1].argmax()))
    return tokens, logits


def test_quantized_weights_decode_like_torch(setup):
    # quantized=True keeps the blocks packed. A prompt's matmuls decode them in float32: the same values summed in
    # another order, so its logits agree to float rounding. A decode step quantizes x to int8 per block as llama.cpp
    # does (test_gguf checks that arithmetic against numpy): its logits move by up to ~2 (of ~40; llama.cpp's by
    # ~1.4 here), so a greedy choice may differ from torch's where torch's two best logits are that close
    _, tok, prompt, ref = setup
    model, _ = load_llama(MODEL, max_context=128, quantized=True)
    logits = model(prompt, 0, all_logits=True).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(logits, ref.logits(prompt).numpy(), atol=2e-3, rtol=0)
    ours, steps = _quantized_greedy(model, prompt, 16)
    with torch.no_grad():
        theirs = ref.logits(prompt + ours[:-1])[len(prompt) - 1 :].numpy()
    assert ours[0] == int(theirs[0].argmax())
    for i, (got, want) in enumerate(zip(steps, theirs[1:]), 1):
        np.testing.assert_allclose(got, want, atol=3.0, rtol=0)
        assert want.max() - want[ours[i]] < 0.5, f"step {i}: {tok.decode(ours)!r}"
    # where torch's two best lie within 0.5, which one wins turns on the summation order too: AVX-512's kernels agreed
    # with torch at 15 of these 16 steps, AVX2's (8-lane sums) at 14 (steps 5 and 11: torch's best two 0.15 and 0.21
    # apart); the check above already holds each step to torch's best within 0.5
    assert sum(o == int(t.argmax()) for o, t in zip(ours, theirs)) >= 14


def test_quantized_decode_is_llama_cpps(setup):
    # the same file, the same decode arithmetic (x quantized to int8 per block in each step): llama.cpp's greedy
    # tokens. Each step runs on llama.cpp's tokens so far. Where llama.cpp's two best logits lie within 0.25 of each
    # other, a choice between them turns on roundings the two programs do differently (llama.cpp keeps its KV cache in
    # float16 and quantizes x in the prompt too; step 4 here is one: 0.05 apart in llama.cpp's AVX2 build), and our
    # logit of its token need only be within 1.0 of our best (the two programs' logits differ by up to ~2). x quantized
    # to int8 per block turns a last-bit change anywhere before into other codes: when the scalar exp2 became the
    # vector one's polynomial (same accuracy, other last bits), step 4's gap went 0.34 -> 0.65 while steps 5 and 12
    # came to agree with llama.cpp. The logits are those of llama.cpp's own decode steps, which picked its tokens: the
    # same tokens evaluated again as one batch take its prompt's products and differ (step 4: 0.29 apart there, the
    # other token best)
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama.cpp (pip install llama-cpp-python) is the reference")
    _, tok, prompt, _ = setup
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=128, n_threads=2, verbose=False, logits_all=True)
    gen = llm.generate(prompt, temp=0.0, top_k=1, reset=True)
    theirs = [next(gen) for _ in range(16)]
    their_logits = np.array(llm.scores[len(prompt) - 1 : len(prompt) + 15])
    assert [int(w.argmax()) for w in their_logits] == theirs
    model, _ = load_llama(MODEL, max_context=128, quantized=True)
    ours = [model(prompt, 0).numpy()] + [model([t], len(prompt) + i).numpy() for i, t in enumerate(theirs[:-1])]
    for i, (got, want, token) in enumerate(zip(ours, their_logits, theirs)):
        best = np.sort(want)[-2:]
        if best[1] - best[0] >= 0.25:
            assert int(got.argmax()) == token, f"step {i}: {tok.decode(theirs[: i + 1])!r}"
        else:
            assert got.max() - got[token] < 1.0, f"step {i}: {tok.decode(theirs[: i + 1])!r}"
    assert sum(int(got.argmax()) == token for got, token in zip(ours, theirs)) >= 13  # of 16 (13 and 15 seen)


def test_cold_prompt_builds_its_kernels_in_two_builds(setup, monkeypatch: pytest.MonkeyPatch):
    """A prompt of a length not run before, with no disk cache: its shared inputs' and first layer's kernels are
    built as one (the other layers run those), the logits' and greedy pick's on a background thread while the other
    layers run; nothing is compiled after the layers. The picked token is the one of the logits computed apart."""
    import threading

    from lazygrad import Context
    from lazygrad.engine import realize

    model, _, prompt, _ = setup
    ids = (prompt * 3)[:37]  # a length no other test runs
    builds: list[tuple[bool, int]] = []
    real = realize._compile_todo

    def compile_todo(todo, ahead):  # noqa: ANN001, ANN202
        builds.append((threading.current_thread() is threading.main_thread(), len(todo)))
        return real(todo, ahead)

    monkeypatch.setattr(realize, "_compile_todo", compile_todo)
    # no kernel built before, as in a fresh process (the logits' and the argmax's do not depend on the prompt length)
    monkeypatch.setattr(realize, "_runners", {})
    monkeypatch.setattr(realize, "_plans", {})
    with Context(CACHELEVEL=0):
        token = argmax_token(model(ids, 0))
    assert [on_main for on_main, _ in builds] == [True, False]
    # the embedded rows' kernel and the first layer's 16: at the prompt's known position the rotation rows are sliced
    # and the cache rows written as slices, the mask is comparisons inside the layer's kernels
    assert builds[0][1] == 17
    assert builds[1][1] == 5  # the logits' 3 kernels and the argmax's 2 (the product from panels is row-major)
    monkeypatch.setattr(realize, "_compile_todo", real)
    assert token == int(np.argmax(model(ids, 0).numpy()))


def _count_cache_stores(model, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the elements each store into a layer's k or v cache writes, in a list."""
    import lazygrad.tensor as tensor_module
    from lazygrad.helpers import prod
    from lazygrad.uop.ops import Ops

    caches = {c.uop.base.arg.memory for a in (x.attention for x in model.layers) for c in (a.cache_k, a.cache_v)}
    stored: list[int] = []
    real = tensor_module.create_schedule

    def counting(outs, realized):
        sched, becomes, var_vals = real(outs, realized)
        for si in sched:
            for u in si.ast.toposort:
                if u.op is Ops.STORE and si.bufs[u.src[0].arg].memory in caches:
                    stored.append(prod(u.src[1].arg.shape))
        return sched, becomes, var_vals

    monkeypatch.setattr(tensor_module, "create_schedule", counting)
    return stored


def test_decode_step_writes_one_cache_row(setup, monkeypatch: pytest.MonkeyPatch):
    """A decode step (its position a bound Variable) stores one new row into each layer's k and v caches, whatever
    the cache's size: a where over the whole cache read and rewrote every slot. Its logits are still torch's."""
    from lazygrad import Context

    model, _, prompt, ref = setup
    token = argmax_token(model(prompt, 0))
    stored = _count_cache_stores(model, monkeypatch)
    with Context(JIT=0):  # every step schedules anew (a replay schedules nothing)
        logits = model([token], len(prompt)).numpy()
    cfg = model.cfg
    assert stored == [cfg.n_kv_heads * cfg.head_dim] * (2 * cfg.n_layers)
    with torch.no_grad():
        want = ref.logits(prompt + [token])[-1].numpy()
    np.testing.assert_allclose(logits, want, atol=2e-3, rtol=0)


def test_prompt_part_writes_only_its_cache_rows(setup, monkeypatch: pytest.MonkeyPatch):
    """A prompt's rows at a known position are a slice's write: each layer's k and v caches store those rows, not
    all 128 slots (a where over the whole cache). Its logits are those of the whole prompt in one pass."""
    model, _, prompt, ref = setup
    model(prompt[:7], 0)
    stored = _count_cache_stores(model, monkeypatch)
    ours = model(prompt[7:], 7, all_logits=True).numpy()
    cfg = model.cfg
    assert stored == [len(prompt[7:]) * cfg.n_kv_heads * cfg.head_dim] * (2 * cfg.n_layers)
    with torch.no_grad():
        theirs = ref.logits(prompt)[7:].numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-3, rtol=0)
