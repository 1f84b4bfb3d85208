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


def test_reader_metadata_and_config(setup):
    meta, infos, _ = gguf_read_header(MODEL)
    reader = gguf.GGUFReader(MODEL)
    assert len(infos) == len(reader.tensors)
    for key in ("general.architecture", "llama.block_count", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert meta[key] == reader.fields[key].contents()
    model = setup[0]
    assert (model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_kv_heads, model.cfg.dim) == (30, 9, 3, 576)


def test_quantized_weights_decode_like_torch(setup):
    # quantized=True keeps the blocks packed and decodes them inside each matmul: the same values summed in another
    # order, so the logits agree to float rounding and the greedy tokens are the same
    _, tok, prompt, ref = setup
    model, _ = load_llama(MODEL, max_context=128, quantized=True)
    logits = model(prompt, 0, all_logits=True).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(logits, ref.logits(prompt).numpy(), atol=2e-3, rtol=0)
    ours = [argmax_token(model(prompt, 0))]
    for _ in range(15):
        ours.append(argmax_token(model([ours[-1]], len(prompt) + len(ours) - 1)))
    with torch.no_grad():
        theirs = ref.logits(prompt + ours[:-1])[len(prompt) - 1 :].argmax(-1).tolist()
    assert ours == theirs, f"lazygrad: {tok.decode(ours)!r}\ntorch:    {tok.decode(theirs)!r}"
