"""all-MiniLM-L6-v2 against the torch BERT of torch_reference.py: same tokens in, embedding cosines > 0.9999."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazygrad.models import minilm_dir
from lazygrad.models.minilm import MiniLM

try:
    MODEL_DIR = minilm_dir()
except FileNotFoundError as e:
    pytest.skip(str(e), allow_module_level=True)
pytest.importorskip("safetensors")
from test.models.torch_reference import TorchMiniLM  # noqa: E402

SENTENCES = [
    "A man is playing a guitar.",
    "A woman is slicing an onion with a knife.",
    "hello",
    "Tensors are multi-dimensional arrays; lazygrad compiles them into fused kernels.",
    "Naïve café, 東京!",
]


def test_embeddings_match_torch_bert():
    model = MiniLM.load()
    ours = model.embed(SENTENCES)
    assert ours.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    with torch.no_grad():
        theirs = TorchMiniLM(MODEL_DIR)([model.tokenizer.encode(s) for s in SENTENCES]).numpy()
    cos = (ours * theirs).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() > 0.9999, cos
    # batching (padding) must not change a sentence's embedding
    alone = model.embed(SENTENCES[2:3])
    assert float((alone[0] * ours[2]).sum()) > 0.9999


def test_embed_rejects_a_bare_string():
    with pytest.raises(TypeError, match="list of sentences"):
        MiniLM.load().embed("one sentence")


def test_batch_of_64_runs_17_kernels_a_layer():
    """The weights are in panels from load (no copy of them at each call) and the query, key and value products are
    one matmul: 17 kernels a layer (20 when each call copied four matrices into panels and merged three products into
    one kernel of three register tiles), and the embedding's, the pooling's and the result's copy."""
    from lazygrad.helpers import GlobalCounters

    model = MiniLM.load()
    words = " ".join(SENTENCES).split()
    ids = [model.tokenizer.encode(" ".join(words[i % 5 : i % 5 + 3 + i % 9])) for i in range(64)]
    for _ in range(3):  # the third call replays the second's capture
        GlobalCounters.reset()
        model(ids).realize()
    assert GlobalCounters.kernel_count == 17 * model.n_layers + 3


def test_a_batch_shape_met_again_replays_its_kernels():
    """The third call of a batch shape replays the second's kernels (the layers' graph is not built again), with the
    new call's tokens; the result of a call survives the next call (a copy of the JIT's output)."""
    model = MiniLM.load()
    tok = model.tokenizer
    first = [tok.encode(s) for s in SENTENCES]
    other = [tok.encode(s) for s in SENTENCES[1:] + SENTENCES[:1]]  # the same shape, other tokens
    assert max(map(len, first)) == max(map(len, other))
    built = []
    encode = model._encode
    model._encode = lambda *a: built.append(1) or encode(*a)
    kept = [model(first) for _ in range(3)]
    ours = model(other).numpy()
    assert len(built) == 2
    with torch.no_grad():
        theirs = TorchMiniLM(MODEL_DIR)(other).numpy()
        want = TorchMiniLM(MODEL_DIR)(first).numpy()
    assert ((ours * theirs).sum(1) / np.linalg.norm(theirs, axis=1)).min() > 0.9999
    for t in kept:
        assert ((t.numpy() * want).sum(1) / np.linalg.norm(want, axis=1)).min() > 0.9999


def test_the_model_runs_inside_a_users_tinyjit():
    """A user's TinyJit around the model (whose calls replay under a TinyJit of its own): the nested capture computes
    what torch does, call after call."""
    from lazygrad import Tensor, TinyJit

    model = MiniLM.load()
    ids = [model.tokenizer.encode(s) for s in SENTENCES]
    embed = TinyJit(lambda flag: model(ids) * flag)
    got = [embed(Tensor([1.0])).numpy() for _ in range(3)]
    with torch.no_grad():
        want = TorchMiniLM(MODEL_DIR)(ids).numpy()
    for g in got:
        assert ((g * want).sum(1) / np.linalg.norm(want, axis=1)).min() > 0.9999
    assert embed.captured is not None


def test_softmax_exps_run_on_whole_vectors():
    """A batch whose longest sentence is not a multiple of 8 tokens: the keys are padded (masked) to whole vectors, so
    no kernel computes its exps two lanes at a time (22 keys did: 3x the time of 24 on one core)."""
    from lazygrad.device import Device
    from lazygrad.engine.realize import capture

    if not Device.DEFAULT.startswith("CPU"):
        pytest.skip("the vector types of the C renderer")
    model = MiniLM.load()
    ids = [model.tokenizer.encode(s) for s in SENTENCES] + [model.tokenizer.encode(" ".join(SENTENCES), 22)]
    assert max(map(len, ids)) == 22
    model(ids).realize()
    with capture() as items:
        model(ids).realize()
    exps = [ei.runner.spec.src for ei, _ in items if "exp2" in ei.runner.spec.src]
    assert exps and not any("float32x2" in src for src in exps)
