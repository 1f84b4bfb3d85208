"""print(tensor) against torch's str: widths from a float's nonzero finite values only, bool widths, empty tensors'
size and dtype, suffixes wrapped onto a line of their own (lazygrad names its dtypes `dtypes.x`, torch `torch.x`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lazygrad.torch as lt

CASES = [
    ([True, True], "bool"),
    (True, "bool"),
    ([[True], [False]], "bool"),
    ([-0.0, 0.0], "float16"),
    ([-np.inf, np.inf, np.inf], "float16"),
    ([1.0, -np.inf], "float32"),
    ([0.5, np.nan, -np.inf, 1e-5], "float32"),
    ([[1e9, np.nan], [0.0, 2.0]], "float64"),
    ([12, -7, 100], "int8"),
    (np.zeros((2, 0)), "float32"),
    (np.zeros((0, 3, 1)), "int64"),
    (np.zeros((0,)), "bool"),
    (np.zeros((0,)), "int16"),
    (np.zeros((3, 0)), "float64"),
    ([0.1 * i for i in range(5)], "float64"),  # the dtype fits on the line
    ([[1.25, -2.5, 1e-3, 3.0, 4.0]], "float64"),  # the suffixes pass 80 characters: a line of their own
    (np.linspace(-1, 1, 2000), "bfloat16"),
]


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("data,dtype", CASES)
def test_str_as_torch(data, dtype: str, grad: bool) -> None:
    want = torch.tensor(np.asarray(data, dtype=np.float64)).to(getattr(torch, dtype))
    got = lt.tensor(np.asarray(data, dtype=np.float64)).to(getattr(lt, dtype))
    if grad and dtype.startswith("float"):
        want.requires_grad_(True)
        got.requires_grad_(True)
    # (one character longer names: no case here sits at the line's end, where that would move a suffix)
    assert str(got).replace("dtypes.", "torch.") == str(want)
