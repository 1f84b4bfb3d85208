"""Tokenizers for the bundled models: byte-level BPE (GPT-2 style, read from GGUF metadata) and BERT WordPiece.

Both are plain Python with no dependencies. The pre-tokenizer split of GPT-2 (a regex with Unicode classes that
Python's `re` lacks) is a hand-written scanner over Unicode categories.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from typing import Any, Callable, Iterable

# *** byte-level BPE ***


@functools.cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters: printable Latin-1 bytes map to themselves, the rest
    (control bytes, space, ...) to code points from 256 up, so every token is a printable string."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _char_class(c: str) -> str:
    """'L' letter, 'N' number, 'S' whitespace, 'O' anything else (the classes of GPT-2's split regex)."""
    if c.isspace():
        return "S"
    cat = unicodedata.category(c)[0]
    return cat if cat in ("L", "N") else "O"


_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


def gpt2_split(text: str) -> list[str]:
    """The pieces GPT-2's pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`
    finds: the alternatives are tried in order at each position, each run is greedy."""
    pieces, i, n = [], 0, len(text)
    classes = [_char_class(c) for c in text]
    while i < n:
        contraction = next((c for c in _CONTRACTIONS if text.startswith(c, i)), None)
        if contraction is not None:
            pieces.append(contraction)
            i += len(contraction)
            continue
        start = i
        if text[i] == " " and i + 1 < n and classes[i + 1] != "S":
            i += 1  # the optional leading space of a letter / number / other run
        cls = classes[i]
        if cls != "S":
            while i < n and classes[i] == cls:
                i += 1
            pieces.append(text[start:i])
            continue
        while i < n and classes[i] == "S":
            i += 1
        if i < n and i - start > 1:
            i -= 1  # \s+(?!\S): the last whitespace before a non-space starts the next piece
        pieces.append(text[start:i])
    return pieces


def _split_digits(text: str) -> list[str]:
    """Every number character on its own, the text between kept whole (the "individual digits" pre-split)."""
    out, cur = [], []
    for c in text:
        if unicodedata.category(c)[0] == "N":
            if cur:
                out.append("".join(cur))
                cur = []
            out.append(c)
        else:
            cur.append(c)
    if cur:
        out.append("".join(cur))
    return out


def _digits_then_gpt2(text: str) -> list[str]:
    return [p for segment in _split_digits(text) for p in gpt2_split(segment)]


def llama3_split(text: str, max_digits: int = 3) -> list[str]:
    r"""The pieces Llama 3's pattern finds: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` (Qwen2's is the same with single digits)."""
    pieces, i, n = [], 0, len(text)
    classes = [_char_class(c) for c in text]
    while i < n:
        low = text[i : i + 3].lower()
        contraction = next((c for c in _CONTRACTIONS if low.startswith(c)), None)
        start, cls = i, classes[i]
        if contraction is not None:
            i += len(contraction)
        elif cls == "L" or (text[i] not in "\r\n" and cls != "N" and i + 1 < n and classes[i + 1] == "L"):
            i += 1  # a letter run, or one leading non-letter, non-number, non-newline character and a letter run
            while i < n and classes[i] == "L":
                i += 1
        elif cls == "N":
            while i < n and classes[i] == "N" and i - start < max_digits:
                i += 1
        elif cls == "O" or (text[i] == " " and i + 1 < n and classes[i + 1] == "O"):
            i += 1
            while i < n and classes[i] == "O":
                i += 1
            while i < n and text[i] in "\r\n":
                i += 1
        else:
            while i < n and classes[i] == "S":
                i += 1
            newlines = [j for j in range(start, i) if text[j] in "\r\n"]
            if newlines:
                i = newlines[-1] + 1  # \s*[\r\n]+: up to the run's last newline
            elif i < n and i - start > 1:
                i -= 1  # \s+(?!\S)
        pieces.append(text[start:i])
    return pieces


# pre-tokenizer names in GGUF metadata (tokenizer.ggml.pre) -> the split into pieces that BPE merges never cross
_PRE_TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "gpt2": gpt2_split,
    "default": gpt2_split,
    "smollm": _digits_then_gpt2,
    "starcoder": _digits_then_gpt2,
    "refact": _digits_then_gpt2,
    "llama-bpe": llama3_split,
    "llama3": llama3_split,
    "qwen2": functools.partial(llama3_split, max_digits=1),
}


class BPETokenizer:
    """Byte-level BPE: text -> special tokens split out -> pre-tokenizer pieces -> bytes as characters -> merges."""

    def __init__(
        self,
        tokens: list[str],
        merges: list[str],
        special: Iterable[str] = (),
        pre: str = "gpt2",
        bos_id: int | None = None,
        eos_id: int | None = None,
        chat_template: str | None = None,
        add_bos: bool = False,
    ):
        if pre not in _PRE_TOKENIZERS:
            raise ValueError(f"unsupported BPE pre-tokenizer {pre!r} (supported: {', '.join(_PRE_TOKENIZERS)})")
        self.tokens, self.pre_split = tokens, _PRE_TOKENIZERS[pre]
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.special = sorted(special, key=len, reverse=True)  # longest first: no special token hides a longer one
        self.special_starts = {s[0] for s in self.special if s}
        self.bos_id, self.eos_id, self.chat_template = bos_id, eos_id, chat_template
        self.add_bos = add_bos and bos_id is not None  # the model expects BOS first (Llama 3 does, SmolLM2 does not)
        self.b2u = _byte_to_unicode()
        self.u2b = {u: b for b, u in self.b2u.items()}

    @staticmethod
    def from_gguf_metadata(meta: dict[str, Any]) -> BPETokenizer:
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"tokenizer model {model!r} is not supported (only byte-level BPE, 'gpt2')")
        tokens, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type", [])
        special = [t for t, ty in zip(tokens, types) if ty in (3, 4)]  # CONTROL and USER_DEFINED are matched verbatim
        return BPETokenizer(
            tokens,
            meta["tokenizer.ggml.merges"],
            special,
            meta.get("tokenizer.ggml.pre", "gpt2"),
            meta.get("tokenizer.ggml.bos_token_id"),
            meta.get("tokenizer.ggml.eos_token_id"),
            meta.get("tokenizer.chat_template"),
            bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        )

    def _bpe(self, piece: str) -> list[int]:
        return [self.ids[s] for s in self._merge(piece)]

    @functools.lru_cache(maxsize=65536)
    def _merge(self, piece: str) -> tuple[str, ...]:
        parts = list(piece)
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b), -1), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            ranked = [(r, i) for r, i in ranked if r >= 0]
            if not ranked:
                break
            best = min(ranked)[0]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and self.ranks.get((parts[i], parts[i + 1])) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return tuple(parts)

    def _split_special(self, text: str) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        i = start = 0
        while i < len(text):
            hit = (
                next((s for s in self.special if text.startswith(s, i)), None)
                if text[i] in self.special_starts
                else None
            )
            if hit is None:
                i += 1
                continue
            if i > start:
                out.append((text[start:i], False))
            out.append((hit, True))
            i = start = i + len(hit)
        if start < len(text):
            out.append((text[start:], False))
        return out

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids; a BOS token first when add_bos (default: when the model's metadata asks for one)."""
        ids = [self.bos_id] if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None else []
        for chunk, is_special in self._split_special(text):
            if is_special:
                ids.append(self.ids[chunk])
                continue
            for piece in self.pre_split(chunk):
                ids.extend(self._bpe("".join(self.b2u[b] for b in piece.encode("utf-8"))))
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The raw bytes of the tokens (a token may end inside a UTF-8 sequence: stream these, decode when whole)."""
        out = bytearray()
        for i in ids:
            tok = self.tokens[i]
            if tok in self.u2b or all(c in self.u2b for c in tok):
                out += bytes(self.u2b[c] for c in tok)
            else:
                out += tok.encode("utf-8")  # a special token is its text
        return bytes(out)

    def decode(self, ids: Iterable[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The model's chat template (Jinja, rendered with jinja2 when installed); without jinja2, ChatML."""
        if self.chat_template is not None:
            try:
                import jinja2
            except ImportError:
                jinja2 = None
            if jinja2 is not None:
                env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
                return env.from_string(self.chat_template).render(
                    messages=messages, add_generation_prompt=add_generation_prompt, bos_token="", eos_token=""
                )
            if "<|im_start|>" not in self.chat_template:
                raise ValueError("this chat template needs jinja2 (pip install jinja2)")
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


# *** BERT WordPiece ***


def _is_punctuation(c: str) -> bool:
    o = ord(c)
    # BERT treats every non-alphanumeric ASCII character as punctuation ($, ^, `, ... are not Unicode P*)
    return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or unicodedata.category(c).startswith("P")


# ASCII text: control characters other than tab and newlines are dropped (category Cc); a word is a run of letters
# and digits, and every other printable character (BERT's ASCII punctuation) is a word of its own
_ASCII_CONTROLS = {o: None for o in [*range(32), 127] if chr(o) not in "\t\n\r"}
_ASCII_WORD = re.compile(r"[^\s!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")


def _is_cjk(c: str) -> bool:
    o = ord(c)
    return (
        0x4E00 <= o <= 0x9FFF
        or 0x3400 <= o <= 0x4DBF
        or 0x20000 <= o <= 0x2A6DF
        or 0x2A700 <= o <= 0x2B73F
        or 0x2B740 <= o <= 0x2B81F
        or 0x2B820 <= o <= 0x2CEAF
        or 0xF900 <= o <= 0xFAFF
        or 0x2F800 <= o <= 0x2FA1F
    )


class WordPieceTokenizer:
    """BERT's uncased tokenizer: clean, split CJK and punctuation, lowercase and strip accents, greedy WordPiece."""

    def __init__(self, vocab: list[str], max_word_chars: int = 100):
        self.vocab, self.ids, self.max_word_chars = vocab, {t: i for i, t in enumerate(vocab)}, max_word_chars
        self.cls_id, self.sep_id, self.pad_id, self.unk_id = (self.ids[t] for t in ("[CLS]", "[SEP]", "[PAD]", "[UNK]"))
        self._memo: dict[str, list[int]] = {}

    @staticmethod
    def from_vocab_file(path: str | os.PathLike) -> WordPieceTokenizer:
        with open(path, encoding="utf-8") as f:
            return WordPieceTokenizer([line.rstrip("\n") for line in f])

    def _words(self, text: str) -> list[str]:
        if text.isascii():  # the common case, without a Unicode lookup per character
            return _ASCII_WORD.findall(text.translate(_ASCII_CONTROLS).lower())
        return self._unicode_words(text)

    @staticmethod
    def _unicode_words(text: str) -> list[str]:
        chars = []
        for c in text:
            cat = unicodedata.category(c)
            if ord(c) == 0 or ord(c) == 0xFFFD or (cat.startswith("C") and c not in "\t\n\r"):
                continue
            chars.append(f" {c} " if _is_cjk(c) else " " if c.isspace() else c)
        words = []
        for word in "".join(chars).lower().split():
            word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
            cur = ""
            for c in word:
                if _is_punctuation(c):
                    words.extend([cur, c] if cur else [c])
                    cur = ""
                else:
                    cur += c
            if cur:
                words.append(cur)
        return words

    def _wordpiece(self, word: str) -> list[int]:
        if (hit := self._memo.get(word)) is not None:
            return hit
        out = self._split_word(word)
        if len(self._memo) < 1 << 16:  # a bounded memo: text repeats its words
            self._memo[word] = out
        return out

    def _split_word(self, word: str) -> list[int]:
        if len(word) > self.max_word_chars:
            return [self.unk_id]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.ids:
                    out.append(self.ids[sub])
                    break
                end -= 1
            if end == start:
                return [self.unk_id]
            start = end
        return out

    def encode(self, text: str, max_length: int | None = None) -> list[int]:
        """[CLS] wordpieces [SEP], truncated to max_length tokens in all."""
        ids = [i for w in self._words(text) for i in self._wordpiece(w)]
        if max_length is not None:
            ids = ids[: max_length - 2]
        return [self.cls_id, *ids, self.sep_id]

    def decode(self, ids: Iterable[int]) -> str:
        text = " ".join(self.vocab[i] for i in ids if i not in (self.cls_id, self.sep_id, self.pad_id))
        return text.replace(" ##", "")
