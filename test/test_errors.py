"""A mistake raises the class torch raises for it (lazygrad's message, torch's class): shapes and sizes that do not
fit are RuntimeError (and ValueError, as before), dims out of range IndexError, wrong dtypes TypeError or
NotImplementedError, ints that do not fit a new tensor's dtype RuntimeError (and OverflowError, as numpy)."""

from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lazygrad import Tensor, dtypes, nn


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
    # found by test_probe_api.py: these returned a tensor before (negative counts, a dim out of
    # range of a 0-d tensor, a float count of steps, an output size of 0, a broadcast loss target, a float that
    # does not fit, an integer division by zero, one value per channel in training)
    "repeat_negative": (lambda: L().repeat(-1, 1), lambda: T().repeat(-1, 1)),
    "tile_negative": (lambda: L().tile(-1, 1), lambda: T().tile(-1, 1)),
    "flatten_0d_dim": (lambda: L().flatten(0, 1), lambda: T().flatten(0, 1)),
    "movedim_0d_dim": (lambda: L().movedim(0, 1), lambda: T().movedim(0, 1)),
    "linspace_float_steps": (lambda: Tensor.linspace(0, 1, 2.5), lambda: torch.linspace(0, 1, 2.5)),  # type: ignore
    "interpolate_size_0": (lambda: L(1, 1, 4, 4).interpolate(size=0), lambda: F.interpolate(T(1, 1, 4, 4), size=0)),
    "interpolate_negative_scale": (
        lambda: L(1, 1, 4, 4).interpolate(scale_factor=-1),
        lambda: F.interpolate(T(1, 1, 4, 4), scale_factor=-1),
    ),
    "bce_target_shape": (
        lambda: L(2, 3).sigmoid().binary_crossentropy(L(3)),
        lambda: F.binary_cross_entropy(T(2, 3).sigmoid(), T(3)),
    ),
    "bce_logits_target_shape": (
        lambda: L(2, 3).binary_crossentropy_logits(L(3)),
        lambda: F.binary_cross_entropy_with_logits(T(2, 3), T(3)),
    ),
    "uint8_negative_float": (
        lambda: Tensor([1.7, -2.3], dtype=dtypes.uint8),
        lambda: torch.tensor([1.7, -2.3], dtype=torch.uint8),
    ),
    "full_float_overflow": (
        lambda: Tensor.full((2,), 255.9, dtype=dtypes.uint8),
        lambda: torch.full((2,), 255.9, dtype=torch.uint8),
    ),
    "int_floordiv_zero": (lambda: Tensor([5, -3]) // 0, lambda: torch.tensor([5, -3]) // 0),
    "int_remainder_zero": (lambda: Tensor([5, -3]) % 0, lambda: torch.tensor([5, -3]) % 0),
    "int_fmod_zero": (lambda: Tensor([5, -3]).fmod(0), lambda: torch.tensor([5, -3]).fmod(0)),
    "int_div_trunc_zero": (
        lambda: Tensor([5, -3]).div(0, rounding_mode="trunc"),
        lambda: torch.tensor([5, -3]).div(0, rounding_mode="trunc"),
    ),
    "batchnorm_one_value_per_channel": (
        lambda: _training(lambda: nn.BatchNorm(3)(L(1, 3, 1, 1))),
        lambda: torch.nn.BatchNorm2d(3)(T(1, 3, 1, 1)),
    ),
    "batchnorm_eps_zero": (
        lambda: _training(lambda: nn.BatchNorm(3, eps=0.0)(L(2, 3, 2, 2))),
        lambda: torch.nn.BatchNorm2d(3, eps=0.0)(T(2, 3, 2, 2)),
    ),
    "rshift_bool": (lambda: Tensor([True]) >> Tensor([True]), lambda: torch.tensor([True]) >> torch.tensor([True])),
    "sort_0d_dim": (lambda: L().sort(1), lambda: T().sort(1)),
    "topk_0d_dim": (lambda: L().topk(1, -3), lambda: T().topk(1, -3)),
    "kthvalue_0d_dim": (lambda: L().kthvalue(1, 1), lambda: T().kthvalue(1, 1)),
    "mode_0d_dim": (lambda: L().mode(2), lambda: T().mode(2)),
    # these raised an internal error or another class before
    "kthvalue_empty": (lambda: L(0).kthvalue(1), lambda: T(0).kthvalue(1)),
    "split_0d": (lambda: L().split(1), lambda: T().split(1)),
    "chunk_0d": (lambda: L().chunk(2), lambda: T().chunk(2)),
    "cat_0d": (lambda: L().cat(L()), lambda: torch.cat([T(), T()])),
    "stack_shapes_dim": (lambda: L(2, 3).stack(L(3), dim=2), lambda: torch.stack([T(2, 3), T(3)], 2)),
    "index_select_2d": (
        lambda: L(2, 3).index_select(0, Tensor([[0]])),
        lambda: T(2, 3).index_select(0, torch.tensor([[0]])),
    ),
    "index_select_float": (lambda: L(2, 3).index_select(1, L(2)), lambda: T(2, 3).index_select(1, T(2))),
    "one_hot_float": (lambda: L(3).one_hot(3), lambda: F.one_hot(T(3), 3)),  # type: ignore
    "interpolate_mode": (
        lambda: L(1, 1, 4, 4).interpolate(size=(8, 8), mode="bogus"),
        lambda: F.interpolate(T(1, 1, 4, 4), size=(8, 8), mode="bogus"),
    ),
    "conv_kernel_0": (lambda: L(1, 2, 5, 5).conv2d(L(4, 2, 0, 3)), lambda: F.conv2d(T(1, 2, 5, 5), T(4, 2, 0, 3))),
    "conv_module_kernel_0": (
        lambda: nn.Conv2d(2, 4, 0)(L(1, 2, 5, 5)),
        lambda: torch.nn.Conv2d(2, 4, 0)(T(1, 2, 5, 5)),
    ),
    "layernorm_shape": (lambda: nn.LayerNorm(4)(L(2, 3)), lambda: torch.nn.LayerNorm(4)(T(2, 3))),
    "linear_negative_features": (lambda: nn.Linear(-1, 4), lambda: torch.nn.Linear(-1, 4)),
    "to_unknown_device": (lambda: L(2).to("bogus"), lambda: T(2).to("bogus")),
}


def _training(fn: Callable[[], Any]) -> Any:
    with Tensor.train():
        return fn()


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


# *** CHECK_INDEX=1: index tensors' values are read and range-checked, as torch's CPU kernels check them ***

# name: (lazygrad with an out-of-range index value, the same in torch, lazygrad with in-range values, torch's twin)
BAD_INDEX_VALUES: dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any], Callable[[], Any]]] = {
    "getitem": (
        lambda: L(3)[Tensor([1, 3])],
        lambda: T(3)[torch.tensor([1, 3])],
        lambda: Tensor([1.0, 2.0, 3.0])[Tensor([-3, 2])],
        lambda: torch.tensor([1.0, 2.0, 3.0])[torch.tensor([-3, 2])],
    ),
    "getitem_negative": (
        lambda: L(2, 3)[:, Tensor([-4])],
        lambda: T(2, 3)[:, torch.tensor([-4])],
        lambda: Tensor([[1.0, 2.0, 3.0]])[:, Tensor([-1, 0])],
        lambda: torch.tensor([[1.0, 2.0, 3.0]])[:, torch.tensor([-1, 0])],
    ),
    "gather": (
        lambda: L(2, 3).gather(1, Tensor([[0], [3]])),
        lambda: T(2, 3).gather(1, torch.tensor([[0], [3]])),
        lambda: Tensor([[1.0, 2.0, 3.0]]).gather(1, Tensor([[2, 0]])),
        lambda: torch.tensor([[1.0, 2.0, 3.0]]).gather(1, torch.tensor([[2, 0]])),
    ),
    "scatter": (
        lambda: L(3).scatter(0, Tensor([-1]), 5.0),
        lambda: T(3).scatter(0, torch.tensor([-1]), 5.0),
        lambda: L(3).scatter(0, Tensor([2]), 5.0),
        lambda: T(3).scatter(0, torch.tensor([2]), 5.0),
    ),
    "one_hot": (
        lambda: Tensor([0, 3]).one_hot(3),
        lambda: F.one_hot(torch.tensor([0, 3]), 3),
        lambda: Tensor([0, 2]).one_hot(3).cast(dtypes.int64),
        lambda: F.one_hot(torch.tensor([0, 2]), 3),
    ),
    "embedding": (
        lambda: _embedding(Tensor([1, 4])),
        lambda: torch.nn.functional.embedding(torch.tensor([1, 4]), torch.ones(4, 2)),
        lambda: _embedding(Tensor([3, 0])),
        lambda: torch.nn.functional.embedding(torch.tensor([3, 0]), torch.ones(4, 2)),
    ),
    "cross_entropy": (
        lambda: L(2, 3).cross_entropy(Tensor([0, 3])),
        lambda: F.cross_entropy(T(2, 3), torch.tensor([0, 3])),
        lambda: Tensor([[1.0, 2.0, 3.0]]).cross_entropy(Tensor([2])),
        lambda: F.cross_entropy(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([2])),
    ),
    "nll_loss": (
        lambda: L(2, 3).nll_loss(Tensor([-1, 0])),
        lambda: F.nll_loss(T(2, 3), torch.tensor([-1, 0])),
        lambda: Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).nll_loss(Tensor([-100, 1])),
        lambda: F.nll_loss(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), torch.tensor([-100, 1])),
    ),
    "sparse_categorical_crossentropy": (
        lambda: L(2, 3).sparse_categorical_crossentropy(Tensor([0, 7])),
        lambda: F.cross_entropy(T(2, 3), torch.tensor([0, 7]), ignore_index=-1),
        lambda: Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).sparse_categorical_crossentropy(Tensor([-1, 1])),
        lambda: F.cross_entropy(
            torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), torch.tensor([-1, 1]), ignore_index=-1
        ),
    ),
}


def _embedding(idx: Tensor) -> Tensor:
    from lazygrad import nn

    e = nn.Embedding(4, 2)
    e.weight = Tensor.ones(4, 2)
    return e(idx)


@pytest.mark.parametrize("name", BAD_INDEX_VALUES)
def test_out_of_range_index_values_raise_with_check_index(name: str) -> None:
    from lazygrad.helpers import Context
    from lazygrad.tensor import IndexRangeError

    bad, torch_bad, good, torch_good = BAD_INDEX_VALUES[name]
    with pytest.raises((IndexError, RuntimeError)):
        torch_bad()
    with Context(CHECK_INDEX=1):
        with pytest.raises(IndexRangeError, match="out of range") as info:
            bad()
        assert isinstance(info.value, IndexError) and isinstance(info.value, RuntimeError)
        np.testing.assert_allclose(good().numpy(), torch_good().numpy(), rtol=1e-6)


def test_index_values_are_not_read_by_default() -> None:
    """Off (as tinygrad): building the graph runs no kernel, and an out-of-range value selects nothing."""
    from lazygrad.helpers import GlobalCounters

    idx = (Tensor([1, 2]) + 1).realize() + 0  # lazy: reading it would run a kernel
    before = GlobalCounters.kernel_count
    out = L(3)[idx]
    assert GlobalCounters.kernel_count == before
    np.testing.assert_equal(out.numpy(), [1.0, 0.0])


def test_check_index_is_skipped_inside_a_capture_and_a_trace() -> None:
    """A TinyJit capture and a @function trace cannot read values (they would be the capture's or a placeholder's):
    the check does not run there, and no read error is raised."""
    from lazygrad import TinyJit
    from lazygrad.function import function
    from lazygrad.helpers import Context

    @TinyJit
    def pick(x: Tensor, i: Tensor) -> Tensor:
        return x.gather(0, i).realize()

    @function
    def pick_traced(x: Tensor, i: Tensor) -> Tensor:
        return x.gather(0, i)

    x = Tensor([1.0, 2.0, 3.0]).realize()
    with Context(CHECK_INDEX=1):
        for _ in range(3):
            np.testing.assert_equal(pick(x, Tensor([2, 0]).realize()).numpy(), [3.0, 1.0])
        np.testing.assert_equal(pick_traced(x, Tensor([1, 2]).realize()).numpy(), [2.0, 3.0])
