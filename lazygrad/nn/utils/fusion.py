"""torch.nn.utils.fusion: an eval-mode BatchNorm folded into the conv or linear layer before it."""

from __future__ import annotations

import copy
from typing import Any

from lazygrad.nn.module import Module, Parameter
from lazygrad.tensor import Tensor


def fuse_conv_bn_weights(
    conv_w: Tensor,
    conv_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor | None,
    bn_b: Tensor | None,
    transpose: bool = False,
) -> tuple[Tensor, Tensor]:
    """The conv's weight and bias with the normalization folded in: w * gamma / sqrt(var + eps) per output channel
    (dim 1 of a transposed conv's weight), (b - mean) * gamma / sqrt(var + eps) + beta."""
    scale = (bn_rv + bn_eps).rsqrt() * (bn_w if bn_w is not None else 1.0)
    shape = [1, -1] + [1] * (conv_w.ndim - 2) if transpose else [-1, 1] + [1] * (conv_w.ndim - 2)
    w = (conv_w * scale.reshape(shape)).cast(conv_w.dtype)
    b = ((conv_b if conv_b is not None else bn_rm.zeros_like()) - bn_rm) * scale
    b = b + bn_b if bn_b is not None else b
    return Parameter(w.detach().contiguous().realize()), Parameter(b.detach().cast(conv_w.dtype).contiguous().realize())


def fuse_linear_bn_weights(
    linear_w: Tensor, linear_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor, bn_eps: float, bn_w: Tensor, bn_b: Tensor
) -> tuple[Tensor, Tensor]:
    return fuse_conv_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b)


def _fused(layer: Module, bn: Module, fuse: Any, *extra: Any) -> Module:
    if layer.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    out = copy.deepcopy(layer)
    out.weight, out.bias = fuse(
        layer.weight, layer.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias, *extra
    )
    return out


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of the eval-mode conv computing conv then bn."""
    return _fused(conv, bn, fuse_conv_bn_weights, transpose)


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Module:
    """A copy of the eval-mode linear layer computing linear then bn (a BatchNorm1d over its outputs)."""
    if linear.weight.shape[0] != bn.running_mean.shape[0]:
        raise AssertionError("To fuse, linear.out_features must equal bn.num_features")
    return _fused(linear, bn, fuse_linear_bn_weights)
