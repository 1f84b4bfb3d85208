"""A mistake raises the class torch raises for it (lazygrad's message, torch's class): shapes and sizes that do not
fit are RuntimeError (and ValueError, as before), dims out of range IndexError, wrong dtypes TypeError or
NotImplementedError, ints that do not fit a new tensor's dtype RuntimeError (and OverflowError, as numpy)."""

from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lazygrad import Tensor, dtypes


def L(*shape: int) -> Tensor:
    return Tensor(np.ones(shape, dtype=np.float32))


def T(*shape: int) -> torch.Tensor:
    return torch.ones(shape)


# name: (the mistake in lazygrad, the same mistake in torch)
MISTAKES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "matmul": (lambda: L(2, 3) @ L(4, 5), lambda: T(2, 3) @ T(4, 5)),
    "matmul_0d": (lambda: Tensor(1.0) @ L(3), lambda: torch.tensor(1.0) @ T(3)),
    "reshape": (lambda: L(2, 3).reshape(4, 2), lambda: T(2, 3).reshape(4, 2)),
    "reshape_two_minus1": (lambda: L(2, 3).reshape(-1, -1), lambda: T(2, 3).reshape(-1, -1)),
    "view": (lambda: L(2, 3).view(5), lambda: T(2, 3).view(5)),
    "cat": (lambda: L(2, 3).cat(L(2, 4), dim=0), lambda: torch.cat([T(2, 3), T(2, 4)], 0)),
    "cat_ndim": (lambda: L(2, 3).cat(L(2), dim=0), lambda: torch.cat([T(2, 3), T(2)], 0)),
    "stack": (lambda: L(2, 3).stack(L(3, 2)), lambda: torch.stack([T(2, 3), T(3, 2)])),
    "expand": (lambda: L(2, 3).expand(4, 3), lambda: T(2, 3).expand(4, 3)),
    "expand_fewer": (lambda: L(2, 3).expand(3), lambda: T(2, 3).expand(3)),
    "broadcast_add": (lambda: L(2, 3) + L(4, 3), lambda: T(2, 3) + T(4, 3)),
    "permute_len": (lambda: L(2, 3).permute(0), lambda: T(2, 3).permute(0)),
    "permute_repeat": (lambda: L(2, 3).permute(0, 0), lambda: T(2, 3).permute(0, 0)),
    "permute_range": (lambda: L(2, 3).permute(0, 2), lambda: T(2, 3).permute(0, 2)),
    "sum_dim": (lambda: L(2, 3).sum(5), lambda: T(2, 3).sum(5)),
    "max_dim": (lambda: L(2, 3).max(-3), lambda: T(2, 3).max(-3)),
    "transpose": (lambda: L(2, 3).transpose(0, 2), lambda: T(2, 3).transpose(0, 2)),
    "squeeze": (lambda: L(2, 3).squeeze(3), lambda: T(2, 3).squeeze(3)),
    "unsqueeze": (lambda: L(2, 3).unsqueeze(4), lambda: T(2, 3).unsqueeze(4)),
    "flatten": (lambda: L(2, 3).flatten(3), lambda: T(2, 3).flatten(3)),
    "softmax_dim": (lambda: L(2, 3).softmax(2), lambda: T(2, 3).softmax(2)),
    "gather_dims": (lambda: L(2, 3).gather(0, Tensor([1, 0])), lambda: T(2, 3).gather(0, torch.tensor([1, 0]))),
    "gather_dim": (lambda: L(2, 3).gather(3, Tensor([[1]])), lambda: T(2, 3).gather(3, torch.tensor([[1]]))),
    "gather_float_index": (lambda: L(3, 3).gather(1, L(3, 3)), lambda: T(3, 3).gather(1, T(3, 3))),
    "scatter_float_index": (
        lambda: L(3, 3).scatter(1, L(3, 3), L(3, 3)),
        lambda: T(3, 3).scatter(1, T(3, 3), T(3, 3)),
    ),
    "bitwise_float": (lambda: L(2) & L(2), lambda: T(2) & T(2)),
    "bitwise_not_float": (lambda: ~L(2), lambda: ~T(2)),
    "xor_float": (lambda: L(2) ^ L(2), lambda: T(2) ^ T(2)),
    "uint8_overflow": (lambda: Tensor([256], dtype=dtypes.uint8), lambda: torch.tensor([256], dtype=torch.uint8)),
    "int8_overflow": (lambda: Tensor([-129], dtype=dtypes.int8), lambda: torch.tensor([-129], dtype=torch.int8)),
    "full_overflow": (
        lambda: Tensor.full((2,), 300, dtype=dtypes.uint8),
        lambda: torch.full((2,), 300, dtype=torch.uint8),
    ),
    "neg_dim": (lambda: Tensor.zeros(-1, 2), lambda: torch.zeros(-1, 2)),
    "index_oob": (lambda: L(2, 3)[5], lambda: T(2, 3)[5]),
    "too_many_idx": (lambda: L(2, 3)[0, 0, 0], lambda: T(2, 3)[0, 0, 0]),
    "split_dim": (lambda: L(2, 3).split(1, dim=2), lambda: T(2, 3).split(1, dim=2)),
    "chunk_zero": (lambda: L(2, 3).chunk(0), lambda: T(2, 3).chunk(0)),
    "where_shape": (lambda: L(2, 3).where(L(4), L(2, 3)), lambda: torch.where(T(2, 3) > 0, T(4), T(2, 3))),
    "conv_channels": (lambda: L(1, 3, 5, 5).conv2d(L(4, 2, 3, 3)), lambda: F.conv2d(T(1, 3, 5, 5), T(4, 2, 3, 3))),
    "linear_shape": (lambda: L(2, 3).linear(L(4, 5)), lambda: F.linear(T(2, 3), T(5, 4))),
    "dot_1d": (lambda: L(3).dot(L(4)), lambda: T(3).dot(T(4))),
    "item_many": (lambda: L(3).item(), lambda: T(3).item()),
    "float_index": (lambda: L(3)[L(2)], lambda: T(3)[T(2)]),
    "pad_too_long": (lambda: L(3).pad((1, 1, 1, 1)), lambda: F.pad(T(3), (1, 1, 1, 1))),
    "repeat_fewer": (lambda: L(2, 3).repeat(2), lambda: T(2, 3).repeat(2)),
    "topk_k": (lambda: L(3).topk(5), lambda: T(3).topk(5)),
    "unflatten": (lambda: L(6).unflatten(0, (4, 2)), lambda: T(6).unflatten(0, (4, 2))),
    # start after end: made shape (2, 1, 3) before, silently
    # a negative size made an empty (0, 0) tensor; a negative std flipped the samples
    "eye_negative": (lambda: Tensor.eye(-1), lambda: torch.eye(-1)),
    "eye_negative_columns": (lambda: Tensor.eye(2, -3), lambda: torch.eye(2, -3)),
    "normal_negative_std": (lambda: Tensor.normal(3, std=-1.0), lambda: torch.normal(0.0, -1.0, (3,))),
    "flatten_start_after_end": (lambda: L(2, 3).flatten(1, 0), lambda: T(2, 3).flatten(1, 0)),
    "requires_grad_int": (lambda: Tensor([1, 2], requires_grad=True), lambda: torch.tensor([1, 2], requires_grad=True)),
    "backward_nonscalar": (
        lambda: (L(3).requires_grad_() * 2).backward(),
        lambda: (T(3).requires_grad_() * 2).backward(),
    ),
    "len_0d": (lambda: len(Tensor(1.0)), lambda: len(torch.tensor(1.0))),
    "bool_many": (lambda: bool(L(3)), lambda: bool(T(3))),
    "list_ragged": (lambda: Tensor([[1, 2], [3]]), lambda: torch.tensor([[1, 2], [3]])),
    "lshift_float": (lambda: L(2) << 1, lambda: T(2) << 1),
    "masked_fill_shape": (
        lambda: L(2, 3).masked_fill(Tensor([True, False]), 0),
        lambda: T(2, 3).masked_fill(torch.tensor([True, False]), 0),
    ),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_same_exception_class_as_torch(name: str) -> None:
    ours, theirs = MISTAKES[name]
    with pytest.raises(Exception) as torch_err:
        theirs()
    with pytest.raises(type(torch_err.value)) as err:
        ours()
    assert str(err.value)  # a message for the user, whatever the class


def test_old_except_clauses_still_catch() -> None:
    with pytest.raises(ValueError):
        L(2, 3).reshape(4, 2)
    with pytest.raises(TypeError):
        Tensor([1, 2], requires_grad=True)
    with pytest.raises(OverflowError):
        Tensor([256], dtype=dtypes.uint8)


def test_values_that_fit_still_make_tensors() -> None:
    assert Tensor([0, 255], dtype=dtypes.uint8).tolist() == [0, 255]
    assert Tensor.full((2,), -128, dtype=dtypes.int8).tolist() == [-128, -128]
    assert Tensor([True, 2.5], dtype=dtypes.int32).tolist() == [1, 2]
