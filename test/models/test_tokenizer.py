"""Byte-level BPE (from the SmolLM2 GGUF) and BERT WordPiece (MiniLM's vocab.txt): round trips, known ids, and
agreement with Hugging Face `tokenizers` built from the same vocabulary when that package is installed."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazygrad.models import minilm_dir, smollm2_path
from lazygrad.models.tokenizer import BPETokenizer, WordPieceTokenizer, gpt2_split, llama3_split
from lazygrad.nn.gguf import gguf_read_header

TEXTS = [
    "What is a tensor?",
    "Hello, world! It's 2024-11-22 and I'm   testing   spaces\n\n  newlines\t\ttabs  ",
    "naïve café — 東京 🚀 ünïcödé",
    "x's !'s don't WE'LL 3.14159 1,000,000",
    "<|im_start|>user\nhi<|im_end|>\n",
    "    def f(x):\n        return x**2  # comment\n",
    "  \n a",
    "²³ Ⅻ ½",
]


def _path_or_skip(fn):
    try:
        return fn()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.from_gguf_metadata(gguf_read_header(_path_or_skip(smollm2_path))[0])


@pytest.fixture(scope="module")
def wordpiece() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab_file(os.path.join(_path_or_skip(minilm_dir), "vocab.txt"))


def test_gpt2_split():
    assert gpt2_split("Hello world's  end!!") == ["Hello", " world", "'s", " ", " end", "!!"]
    assert gpt2_split("a  \n b") == ["a", "  \n", " b"]
    assert gpt2_split("x   ") == ["x", "   "]


def test_gpt2_split_matches_the_regex():
    regex = pytest.importorskip("regex")
    pattern = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    rng = random.Random(0)
    alphabet = "ab Z9٣½ \t\n\r'sdmltrev!?.,-_é東🚀\u00a0\u2003"
    for text in TEXTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(2000)]:
        assert gpt2_split(text) == pattern.findall(text), repr(text)


@pytest.mark.parametrize("digits", [3, 1])
def test_llama3_split_matches_the_regex(digits):
    regex = pytest.importorskip("regex")
    pattern = regex.compile(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,%d}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+" % digits
    )
    rng = random.Random(1)
    alphabet = "ab Z9٣½ \t\n\r'sdmltrevSDMLTREV!?.,-_é東🚀\u00a0\u2003"
    for text in TEXTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(2000)]:
        assert llama3_split(text, digits) == pattern.findall(text), repr(text)


@pytest.mark.parametrize("text", TEXTS)
def test_bpe_round_trip(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text


def test_bpe_known_ids(bpe):
    assert bpe.encode("<|im_start|>") == [1] and bpe.encode("<|im_end|>") == [2]
    ids = bpe.encode("Hello world")
    assert [bpe.tokens[i] for i in ids] == ["Hello", "Ġworld"]
    assert bpe.encode("123") == [bpe.ids["1"], bpe.ids["2"], bpe.ids["3"]]  # SmolLM splits digits one by one
    assert bpe.decode_bytes(bpe.encode("é")) == "é".encode()


def test_bpe_chat_template(bpe):
    text = bpe.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("text", TEXTS)
def test_bpe_matches_hf_tokenizers(bpe, text):
    tk = pytest.importorskip("tokenizers")
    ref = tk.Tokenizer(tk.models.BPE(bpe.ids, [tuple(m) for m in bpe.ranks]))
    ref.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Digits(individual_digits=True),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    ref.add_special_tokens(bpe.special)
    assert bpe.encode(text) == ref.encode(text).ids


WP_TEXTS = [
    "A man is playing a guitar.",
    "Naïve CAFÉ résumé: 東京タワー!!",
    "don't $100 a^b `x` unbelievably-hyphenated_words",
    "x" * 150,
    "tab\tnew\nline\x00ctrl",
]


@pytest.mark.parametrize("text", WP_TEXTS)
def test_wordpiece_matches_hf_tokenizers(wordpiece, text):
    tk = pytest.importorskip("tokenizers")
    ref = tk.Tokenizer.from_file(os.path.join(minilm_dir(), "tokenizer.json"))
    ref.no_truncation()
    ref.no_padding()
    assert wordpiece.encode(text) == ref.encode(text).ids


def test_wordpiece_known_ids_and_decode(wordpiece):
    ids = wordpiece.encode("Hello, World!")
    assert ids[0] == 101 and ids[-1] == 102
    assert wordpiece.decode(ids) == "hello , world !"
    assert wordpiece.decode(wordpiece.encode("unbelievably")) == "unbelievably"
    assert len(wordpiece.encode("word " * 1000, max_length=256)) == 256


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_wordpiece_ascii_fast_path_splits_as_the_unicode_path(wordpiece, text):
    """ASCII text takes a regex split: the words must be those of the per-character Unicode path (controls dropped,
    punctuation alone, lowercase), and the ids the same on a second call (the word memo)."""
    words = wordpiece._words(text)
    assert words == WordPieceTokenizer._unicode_words(text)
    ids = [wordpiece.cls_id, *[i for w in words for i in wordpiece._split_word(w)], wordpiece.sep_id]
    assert wordpiece.encode(text) == wordpiece.encode(text) == ids
