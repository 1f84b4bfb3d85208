"""torch.nn.utils: gradient clipping and flattening parameters, weight and spectral norm (`rnn`: padding and packed
sequences)."""

from __future__ import annotations

import math
from typing import Iterable

from lazygrad.nn.utils import parametrizations, parametrize, rnn, stateless
from lazygrad.nn.utils.fusion import (
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
from lazygrad.nn.utils.reparametrize import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm
from lazygrad.tensor import Tensor


def _tensors(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def get_total_norm(
    tensors: Tensor | Iterable[Tensor],
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The norm of all the tensors together (as of one vector of all their elements)."""
    ts = _tensors(tensors)
    if not ts:
        return Tensor(0.0)
    norm_type = float(norm_type)
    if norm_type == math.inf:
        total = Tensor.stack([t.detach().abs().max().cast(ts[0].dtype) for t in ts]).max()
    else:
        total = Tensor.stack([t.detach().cast(ts[0].dtype).norm(norm_type) for t in ts]).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`"
        )
    return total


def clip_grads_with_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, total_norm: Tensor, foreach: bool | None = None
) -> None:
    """Scale every gradient by max_norm / (total_norm + 1e-6) where that is below 1, as torch."""
    coef = (float(max_norm) / (total_norm + 1e-6)).minimum(1.0)
    for p in _tensors(parameters):
        if p.grad is not None:
            p.grad = p.grad * coef.cast(p.grad.dtype)


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """torch's: the gradients' total norm (returned, before clipping) and every gradient scaled so that it is at most
    max_norm. Lazy: the norm and the scaled gradients fuse into the optimizer's step."""
    params = [p for p in _tensors(parameters) if p.grad is not None]
    total = get_total_norm([p.grad for p in params], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None) -> None:
    for p in _tensors(parameters):
        if p.grad is not None:
            p.grad = p.grad.clip(-float(clip_value), float(clip_value))


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    ts = [p.flatten() for p in parameters]
    return ts[0].cat(*ts[1:]) if ts else Tensor.empty(0)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    if vec.ndim != 1:
        raise TypeError(f"expected a 1-d vector, got shape {vec.shape}")
    start = 0
    for p in parameters:
        n = p.numel()
        p.assign(vec[start : start + n].reshape(p.shape).cast(p.dtype))
        start += n


__all__ = [
    "parametrize",
    "parametrizations",
    "stateless",
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
    "weight_norm",
    "remove_weight_norm",
    "spectral_norm",
    "remove_spectral_norm",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "get_total_norm",
    "parameters_to_vector",
    "vector_to_parameters",
    "rnn",
]
