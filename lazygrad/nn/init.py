"""torch.nn.init: fill a tensor in place (returning it) with torch's initialization schemes and gains. Each fill is a
lazy in-place write of values drawn on the device, recorded by no gradient, as torch's run under no_grad."""

from __future__ import annotations

import math
from typing import Any

from lazygrad.dtype import dtypes
from lazygrad.helpers import prod
from lazygrad.tensor import ArgumentError, Tensor


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"negative_slope {slope} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _write(tensor: Tensor, value: Tensor) -> Tensor:
    with Tensor.no_grad():
        return tensor.assign(value.cast(tensor.dtype))


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    return _write(tensor, Tensor.uniform(*tensor.shape, low=a, high=b, device=tensor.device))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    return _write(tensor, Tensor.randn(*tensor.shape, device=tensor.device) * std + mean)


def trunc_normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, generator: Any = None
) -> Tensor:
    """N(mean, std) cut to [a, b], by the inverse CDF of a uniform between the bounds' CDFs (torch's method)."""

    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    u = Tensor.uniform(*tensor.shape, low=2 * lo - 1, high=2 * hi - 1, device=tensor.device, dtype=dtypes.float32)
    x = u.erfinv() * (std * math.sqrt(2.0)) + mean
    return _write(tensor, x.clip(a, b))


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _write(tensor, Tensor.full(tensor.shape, val, device=tensor.device))


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, Tensor.eye(*tensor.shape, device=tensor.device))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """The identity of a convolution: weight (out, in, *k) with 1 at the kernel's centre where out == in (per
    group)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per = tensor.shape[0] // groups
    if tensor.shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    n = min(out_per, tensor.shape[1])
    rows = Tensor.arange(tensor.shape[0], device=tensor.device) % out_per
    eye = (rows.unsqueeze(1) == Tensor.arange(tensor.shape[1], device=tensor.device).unsqueeze(0)) & (
        rows.unsqueeze(1) < n
    )
    centre = [(k - 1) // 2 for k in tensor.shape[2:]]
    kernel = [
        (Tensor.arange(k, device=tensor.device) == c).reshape([k if j == i else 1 for j in range(len(centre))])
        for i, (k, c) in enumerate(zip(tensor.shape[2:], centre))
    ]
    hit = eye.reshape(*eye.shape, *([1] * len(centre)))
    for k in kernel:
        hit = hit & k
    return _write(tensor, hit)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def kaiming_uniform_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator: Any = None
) -> Tensor:
    if 0 in tensor.shape:
        return tensor
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator: Any = None
) -> Tensor:
    if 0 in tensor.shape:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)))


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """A (semi-)orthogonal matrix from the QR of a Gaussian one, signs fixed by R's diagonal (torch's method)."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows, cols = tensor.shape[0], tensor.numel() // tensor.shape[0]
    flat = Tensor.randn(rows, cols, device=tensor.device, dtype=dtypes.float32)
    if rows < cols:
        flat = flat.T
    q, r = flat.qr(mode="reduced")
    q = q * r.diagonal().sign().unsqueeze(0)
    if rows < cols:
        q = q.T
    return _write(tensor, (q * gain).reshape(tensor.shape))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: Any = None) -> Tensor:
    """N(0, std) with a fraction `sparsity` of each column's entries zero (the same count per column, as torch)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    zeros = int(math.ceil(sparsity * rows))
    if not 0 <= zeros <= rows:
        raise ArgumentError(f"sparse_: sparsity {sparsity} out of [0, 1]")
    # per column, the rows of the `zeros` smallest of a uniform draw are zeroed: a random subset of that size
    keys = Tensor.rand(rows, cols, device=tensor.device)
    rank = (keys.unsqueeze(0) < keys.unsqueeze(1)).sum(1)  # each entry's rank in its column
    values = Tensor.randn(rows, cols, device=tensor.device) * std
    return _write(tensor, (rank >= zeros).where(values, 0.0))


__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
]
