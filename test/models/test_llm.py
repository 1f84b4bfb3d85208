"""Sampling and the command line of `python -m lazygrad.llm` (the model itself is tested in test_llama.py)."""

from __future__ import annotations

import collections

import pytest

from lazygrad import Tensor
from lazygrad.llm import Sampler
from lazygrad.llm.__main__ import main

LOGITS = Tensor([0.0, 3.0, 2.9, -1.0, 1.0])


def test_greedy_is_argmax():
    assert Sampler(temperature=0)(LOGITS) == 1


def test_top_k_and_top_p_restrict_the_draw():
    sampler = Sampler(1.0, top_k=2, seed=0)
    top2 = collections.Counter(sampler(LOGITS) for _ in range(200))
    assert set(top2) == {1, 2} and min(top2.values()) > 50  # the two nearly equal logits share the draws
    assert {Sampler(1.0, top_p=0.3, seed=s)(LOGITS) for s in range(20)} == {1}  # the top token alone holds > 30%
    hot = Sampler(5.0, seed=0)
    assert len({hot(LOGITS) for _ in range(200)}) == 5  # hot and unrestricted: everything appears


def test_seed_makes_sampling_reproducible():
    s1, s2 = Sampler(1.5, seed=3), Sampler(1.5, seed=3)
    assert [s1(LOGITS) for _ in range(30)] == [s2(LOGITS) for _ in range(30)]


def test_bad_sampling_arguments():
    with pytest.raises(ValueError, match="top_p"):
        Sampler(1.0, top_p=0.0)


def test_cli_names_a_missing_model_file(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"missing\.gguf"):
        main(["--model", str(tmp_path / "missing.gguf"), "--prompt", "hi"])


def test_cli_names_a_corrupt_model_file(tmp_path):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"not a gguf file at all, just some bytes")
    with pytest.raises(SystemExit, match=r"corrupt\.gguf.*not a GGUF file"):
        main(["--model", str(bad), "--prompt", "hi"])


def test_argmax_token_replays_with_each_calls_logits():
    import numpy as np

    from lazygrad.models.llama import argmax_token

    rng = np.random.default_rng(0)
    for _ in range(5):  # the capture on the second call, replays after it: each reads the logits it is given
        logits = rng.standard_normal(1000).astype(np.float32)
        assert argmax_token(Tensor(logits)) == int(logits.argmax())
    batch = rng.standard_normal((3, 1000)).astype(np.float32)
    assert argmax_token(Tensor(batch)[1]) == int(batch[1].argmax())  # a view of a bigger buffer
    assert argmax_token(Tensor(batch[:, :7])) == int(batch[:, :7].argmax())  # another shape: its own capture
