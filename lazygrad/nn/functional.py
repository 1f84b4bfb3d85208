"""torch.nn.functional's names and signatures over Tensor ops: `import lazygrad.nn.functional as F` in a PyTorch
program. Each function takes torch's arguments in torch's order and defaults (where a Tensor method of the same name
follows tinygrad, e.g. `gelu`'s default approximation or `conv2d`'s positional order, the function here is torch's),
and computes through the Tensor ops: no function here has kernels of its own.

`inplace=True` is accepted and ignored: the result is a new lazy tensor either way (writing it back would cost a copy
and lazygrad's in-place ops are writes the scheduler orders, not faster kernels)."""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

from lazygrad.dtype import dtypes
from lazygrad.helpers import make_tuple, prod
from lazygrad.tensor import ArgumentError, Tensor, _zero_or_nan

# *** activations ***


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu6()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return input.leaky_relu(negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return input.elu(alpha)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return input.celu(alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.selu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return input.gelu(approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.silu()


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return input.mish()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    return input.hardtanh(min_val, max_val)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return input.hardswish()


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return input.hardsigmoid()


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return input.hardshrink(lambd)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise ArgumentError(f"softshrink: lambd must be >= 0, got {lambd}")
    return (input.abs() > lambd).where(input - input.sign() * lambd, _zero_or_nan(input))


def tanhshrink(input: Tensor) -> Tensor:
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return (input <= threshold).where(value, input)  # NaN passes, as torch's


def logsigmoid(input: Tensor) -> Tensor:
    return input.logsigmoid()


def softsign(input: Tensor) -> Tensor:
    return input.softsign()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return input.softplus(beta, threshold)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    return input.prelu(weight)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    if input.shape[dim] % 2:
        raise ArgumentError(f"glu: halving dimension {dim} must be even, got size {input.shape[dim]}")
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return input.softmax(_implicit_dim(input) if dim is None else dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return input.log_softmax(_implicit_dim(input) if dim is None else dim, dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return (-input).softmax(_implicit_dim(input) if dim is None else dim, dtype)


def _implicit_dim(x: Tensor) -> int:
    # torch's choice where dim is not given (with a deprecation warning there)
    return 0 if x.ndim in (0, 1, 3) else 1


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    gumbels = -(-Tensor.rand(*logits.shape, device=logits.device).clip(1e-20, 1.0).log()).log()
    y = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y
    # straight through: the one-hot of the argmax forward, the soft sample's gradient backward
    hot = y.argmax(dim, keepdim=True) == Tensor.arange(y.shape[dim], device=y.device).reshape(
        [-1 if i == (dim % y.ndim) else 1 for i in range(y.ndim)]
    )
    return hot.cast(y.dtype) - y.detach() + y


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None) -> Tensor:
    return input.normalize(p, dim, eps)


# *** linear, convolution, pooling ***


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return input.linear(weight, bias)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    # y_k = x1 W_k x2 + b_k, weight (out, in1, in2)
    out = (input1.unsqueeze(-2).unsqueeze(-2) @ weight @ input2.unsqueeze(-2).unsqueeze(-1)).squeeze(-1).squeeze(-1)
    return out if bias is None else out + bias


def _conv(
    input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any, dilation: Any, groups: int, dims: int
) -> Tensor:
    if input.ndim not in (dims + 1, dims + 2):
        raise ArgumentError(f"conv{dims}d: expected a {dims + 1}D or {dims + 2}D input, got shape {input.shape}")
    batched = input.ndim == dims + 2
    x = input if batched else input.unsqueeze(0)
    out = x.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)
    return out if batched else out.squeeze(0)


def _conv_nd(dims: int) -> Callable[..., Tensor]:
    def conv(
        input: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
    ) -> Tensor:
        return _conv(input, weight, bias, stride, padding, dilation, groups, dims)

    conv.__name__ = conv.__qualname__ = f"conv{dims}d"
    return conv


conv1d, conv2d, conv3d = _conv_nd(1), _conv_nd(2), _conv_nd(3)


def _conv_transpose(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: int,
    dilation: Any,
    dims: int,
) -> Tensor:
    batched = input.ndim == dims + 2
    x = input if batched else input.unsqueeze(0)
    out = x.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)
    return out if batched else out.squeeze(0)


def _conv_transpose_nd(dims: int) -> Callable[..., Tensor]:
    def conv_transpose(
        input: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        groups: int = 1,
        dilation: Any = 1,
    ) -> Tensor:
        return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, dims)

    conv_transpose.__name__ = conv_transpose.__qualname__ = f"conv_transpose{dims}d"
    return conv_transpose


conv_transpose1d, conv_transpose2d, conv_transpose3d = (
    _conv_transpose_nd(1),
    _conv_transpose_nd(2),
    _conv_transpose_nd(3),
)


def _pool_input(input: Tensor, dims: int, name: str) -> tuple[Tensor, bool]:
    if input.ndim not in (dims + 1, dims + 2):
        raise ArgumentError(f"{name}: expected a {dims + 1}D or {dims + 2}D input, got shape {input.shape}")
    return (input, True) if input.ndim == dims + 2 else (input.unsqueeze(0), False)


def _max_pool(
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    return_indices: bool,
    dims: int,
) -> Any:
    x, batched = _pool_input(input, dims, f"max_pool{dims}d")
    k = make_tuple(kernel_size, dims)
    s = k if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else make_tuple(stride, dims)
    out = x.max_pool2d(k, s, dilation, padding, ceil_mode, return_indices)
    if batched:
        return out
    return (out[0].squeeze(0), out[1].squeeze(0)) if return_indices else out.squeeze(0)


def _max_pool_nd(dims: int) -> Callable[..., Any]:
    def max_pool(
        input: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, dims)

    max_pool.__name__ = max_pool.__qualname__ = f"max_pool{dims}d"
    return max_pool


max_pool1d, max_pool2d, max_pool3d = _max_pool_nd(1), _max_pool_nd(2), _max_pool_nd(3)


def _avg_pool(
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    dims: int,
) -> Tensor:
    x, batched = _pool_input(input, dims, f"avg_pool{dims}d")
    k = make_tuple(kernel_size, dims)
    s = k if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else make_tuple(stride, dims)
    if divisor_override is not None:
        if divisor_override == 0:
            raise ArgumentError("avg_pool: divisor must be not zero")
        out = x.avg_pool2d(k, s, 1, padding, ceil_mode, count_include_pad=True) * (math.prod(k) / divisor_override)
        if ceil_mode or any(make_tuple(padding, dims)):
            raise NotImplementedError("avg_pool with divisor_override and padding or ceil_mode is not supported")
    else:
        out = x.avg_pool2d(k, s, 1, padding, ceil_mode, count_include_pad)
    return out if batched else out.squeeze(0)


def avg_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def avg_pool2d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


def avg_pool3d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


def _bins(size: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows: output i reads [floor(i * size / out), ceil((i + 1) * size / out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _adaptive(input: Tensor, output_size: Any, dims: int, name: str, reduce: str) -> Tensor:
    x, batched = _pool_input(input, dims, name)
    spatial = x.shape[2:]
    sizes = tuple(s if o is None else o for s, o in zip(spatial, make_tuple(output_size, dims)))
    if any(o <= 0 for o in sizes) or (reduce == "max" and any(s == 0 for s in spatial)):
        raise ArgumentError(f"{name}: output size {sizes} does not fit an input of spatial shape {spatial}")
    for axis, (size, out) in enumerate(zip(spatial, sizes)):
        dim = 2 + axis
        if size % out == 0:  # equal windows: one reshape and a reduce
            k = size // out
            shaped = x.reshape(*x.shape[:dim], out, k, *x.shape[dim + 1 :])
            x = shaped.mean(dim + 1) if reduce == "avg" else shaped.max(dim + 1)
        elif reduce == "avg":  # windows of two lengths: a product with the averaging matrix along this dim
            weights = [[1.0 / (hi - lo) if lo <= j < hi else 0.0 for j in range(size)] for lo, hi in _bins(size, out)]
            w = Tensor(weights, dtype=x.dtype if dtypes.is_float(x.dtype) else dtypes.float32, device=x.device)
            x = (x.transpose(dim, -1) @ w.T).transpose(dim, -1)
        else:
            lead = (slice(None),) * dim
            parts = [x[(*lead, slice(lo, hi))].max(dim, keepdim=True) for lo, hi in _bins(size, out)]
            x = parts[0].cat(*parts[1:], dim=dim)
    return x if batched else x.squeeze(0)


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    return _adaptive(input, output_size, 1, "adaptive_avg_pool1d", "avg")


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    return _adaptive(input, output_size, 2, "adaptive_avg_pool2d", "avg")


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    return _adaptive(input, output_size, 3, "adaptive_avg_pool3d", "avg")


def adaptive_max_pool1d(input: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    _no_indices(return_indices, "adaptive_max_pool1d")
    return _adaptive(input, output_size, 1, "adaptive_max_pool1d", "max")


def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    _no_indices(return_indices, "adaptive_max_pool2d")
    return _adaptive(input, output_size, 2, "adaptive_max_pool2d", "max")


def _fractional_max_pool(
    nd: int,
    input: Tensor,
    kernel_size: Any,
    output_size: Any,
    output_ratio: Any,
    return_indices: bool,
    _random_samples: Tensor | None,
) -> Any:
    """torch's fractional max pooling (Graham): along each spatial axis, window i of a plane starts at
    int((i + u) * alpha) - int(u * alpha) with alpha = (in - k) / (out - 1), the last at in - k, for a sample u in
    [0, 1) per (batch, plane, axis). The windows are gathered axis by axis; the value is the first maximum of each
    window, picked by argmax so its gradient goes to that element alone, as torch's."""
    name = f"fractional_max_pool{nd}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if input.ndim not in (nd + 1, nd + 2):
        raise IndexError(f"{name}(): expected a {nd + 1}-D or {nd + 2}-D input, got {input.ndim}-D {input.shape}")
    x = input if input.ndim == nd + 2 else input.unsqueeze(0)
    n, c, size = x.shape[0], x.shape[1], x.shape[2:]
    kernel = make_tuple(kernel_size, nd)
    if output_size is not None:
        out = make_tuple(output_size, nd)
    else:
        ratios = output_ratio if isinstance(output_ratio, (tuple, list)) else (output_ratio,) * nd
        out = tuple(int(s * r) for s, r in zip(size, ratios))
    for axis, s, k, o in zip(("time", "height", "width")[3 - nd :], size, kernel, out):
        # torch's 3-D check is strict: its last window may not reach the input's end
        if o + k - 1 > s - (nd == 3):
            where = "fractional_max_pool3d_out()" if nd == 3 else f"{name}()"
            raise RuntimeError(f"{where}: pool {axis} {k} too large relative to input {axis} {s}")
    if _random_samples is None:
        samples = Tensor.rand(n, c, nd, dtype=x.dtype, device=x.device)
    else:
        if _random_samples.ndim != 3 or _random_samples.shape[2] != nd or _random_samples.shape[1] != c:
            raise RuntimeError(
                f"{name}(): expected _random_samples of shape [N, {c}, {nd}], got {_random_samples.shape}"
            )
        if _random_samples.shape[0] < n:
            raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
        samples = _random_samples[:n].cast(x.dtype)
    flat = Tensor.zeros(1, 1, *(1,) * (2 * nd), dtype=dtypes.int32, device=x.device)  # each window element's index
    stride = 1
    for d in reversed(range(nd)):
        s, k, o = size[d], kernel[d], out[d]
        # torch's sample columns: (w, h) in 2-D, (t, h, w) in 3-D
        u = samples[:, :, 1 - d if nd == 2 else d].unsqueeze(-1)
        last = Tensor.full((n, c, 1), s - k, dtype=dtypes.int32, device=x.device)
        if o > 1:
            i = Tensor.arange(o - 1, device=x.device).cast(x.dtype)
            alpha = (s - k) / (o - 1)
            first = ((i + u) * alpha).cast(dtypes.int32) - (u * alpha).cast(dtypes.int32)
            last = first.cat(last, dim=-1)
        pos = last.unsqueeze(-1) + Tensor.arange(k, device=x.device, dtype=dtypes.int32)  # (n, c, o, k)
        index = pos.reshape(n, c, *(1,) * d, o * k, *(1,) * (nd - d - 1))
        x = x.gather(2 + d, index.expand(*x.shape[: 2 + d], o * k, *x.shape[3 + d :]))
        place = [n, c] + [1] * (2 * nd)
        place[2 + 2 * d], place[3 + 2 * d] = o, k
        flat = flat + pos.reshape(place) * stride
        stride *= s
    # (n, c, o0, k0, o1, k1, ...) -> (n, c, o0, o1, ..., k0 * k1 * ...)
    order = (0, 1, *range(2, 2 + 2 * nd, 2), *range(3, 3 + 2 * nd, 2))
    windows = x.reshape(n, c, *(v for pair in zip(out, kernel) for v in pair)).permute(order).flatten(2 + nd)
    first_max = windows.argmax(-1).unsqueeze(-1)
    value = windows.gather(-1, first_max).squeeze(-1)
    if input.ndim == nd + 1:
        value = value.squeeze(0)
    if not return_indices:
        return value
    flat = flat.expand(n, c, *flat.shape[2:]).permute(order).flatten(2 + nd)
    indices = flat.gather(-1, first_max).squeeze(-1).cast(dtypes.default_int)  # as every pooling index
    return value, indices if input.ndim == nd + 2 else indices.squeeze(0)


def _fractional_max_pool_nd(nd: int) -> Callable[..., Any]:
    def fractional_max_pool(
        input: Tensor,
        kernel_size: Any,
        output_size: Any = None,
        output_ratio: Any = None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ) -> Any:
        return _fractional_max_pool(nd, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)

    fractional_max_pool.__name__ = fractional_max_pool.__qualname__ = f"fractional_max_pool{nd}d"
    return fractional_max_pool


fractional_max_pool2d, fractional_max_pool3d = _fractional_max_pool_nd(2), _fractional_max_pool_nd(3)


def _no_indices(return_indices: bool, name: str) -> None:
    if return_indices:
        raise NotImplementedError(f"{name}(return_indices=True) is not supported; max_pool2d gives indices")


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    return input.pad(pad, mode, 0.0 if value is None else value)


def _grid_coords(n: int, align_corners: bool, device: str) -> Tensor:
    """The normalized [-1, 1] coordinates of n pixel centers (align_corners: of the corner pixels' centers at -1, 1)."""
    i = Tensor.arange(n, device=device, dtype=dtypes.float32)
    if align_corners:
        return i * (2 / (n - 1)) - 1 if n > 1 else i * 0
    return (i * 2 + 1) / n - 1


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """torch's: the sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps theta (N, 2, 3) (or N x 3 x 4)
    applied to the output's normalized pixel coordinates (x first)."""
    align = bool(align_corners)
    spatial = list(size[2:])
    dims = len(spatial)
    if dims not in (2, 3):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, got size {list(size)}")
    if theta.ndim != 3 or theta.shape[1:] != (dims, dims + 1) or theta.shape[0] != size[0]:
        raise ValueError(
            f"Expected a batch of {dims}D affine matrices of shape Nx{dims}x{dims + 1} for size {list(size)}. "
            f"Got {theta.shape}."
        )
    # homogeneous coordinates, x varying fastest: (*spatial, dims + 1)
    axes = [_grid_coords(n, align, theta.device) for n in reversed(spatial)]  # x, y(, z)
    parts = []
    for k, c in enumerate(axes):
        shape = [1] * dims
        shape[dims - 1 - k] = c.shape[0]
        parts.append(c.reshape(shape).expand(spatial))
    base = Tensor.stack(*parts, Tensor.ones(*spatial, device=theta.device), dim=-1).cast(theta.dtype)
    flat = base.reshape(1, -1, dims + 1)
    return (flat @ theta.transpose(1, 2)).reshape(size[0], *spatial, dims)


def _unnormalize(coord: Tensor, n: int, align_corners: bool) -> Tensor:
    return (coord + 1) / 2 * (n - 1) if align_corners else ((coord + 1) * n - 1) / 2


def _reflect(x: Tensor, low: float, high: float) -> Tensor:
    """x reflected into [low, high] (as often as it takes)."""
    span = high - low
    if span <= 0:
        return x * 0
    d = (x - low).abs()
    flips = (d / span).floor()
    extra = d - flips * span
    return (flips % 2 == 0).where(extra + low, high - extra)


def _pad_coord(x: Tensor, n: int, padding_mode: str, align_corners: bool) -> Tensor:
    """A pixel coordinate moved in by the padding mode (border: clipped; reflection: reflected, then clipped)."""
    if padding_mode == "reflection":
        x = _reflect(x, 0, n - 1) if align_corners else _reflect(x, -0.5, n - 0.5)
    if padding_mode in ("border", "reflection"):
        x = x.clip(0, n - 1)
    return x


def _cubic_near(x: Any, a: float) -> Any:
    """The cubic convolution kernel (Keys; a number or a Tensor) at distance |x| <= 1."""
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic_far(x: Any, a: float) -> Any:
    """The cubic convolution kernel at distance 1 < |x| < 2."""
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """The four taps' weights of cubic convolution (a = -0.75, as torch's) at fraction t past the second tap."""
    return [_cubic_far(t + 1, -0.75), _cubic_near(t, -0.75), _cubic_near(1 - t, -0.75), _cubic_far(2 - t, -0.75)]


def grid_sample(
    input: Tensor,
    grid: Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool | None = None,
) -> Tensor:
    """torch's grid_sample: input (N, C, H, W) sampled at grid (N, Ho, Wo, 2) (x, y in [-1, 1]), or (N, C, D, H, W)
    at (N, Do, Ho, Wo, 3) (x, y, z); bilinear (trilinear in 5-D), nearest, or bicubic (4-D); padded with zeros, the
    border or by reflection. Gradients reach the input and the grid (except nearest's). Each tap's values are one
    gather over the flattened pixels. Bicubic, as torch's, pads the 16 taps' coordinates, not the sample point."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(
            f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '{mode}'"
        )
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or 'reflection', "
            f"but got: '{padding_mode}'"
        )
    sizes = f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise RuntimeError(
            f"grid_sampler(): expected {input.ndim}D input and grid with same number of dimensions, but got {sizes}"
        )
    nd = input.ndim - 2
    if grid.shape[-1] != nd:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {nd} in last dimension, but got grid with sizes "
            f"{list(grid.shape)}"
        )
    if grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got {sizes}")
    if mode == "bicubic" and nd == 3:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    align = bool(align_corners)
    n, c = input.shape[:2]
    extent = input.shape[:1:-1]  # (w, h(, d)): the axes in the grid's (x, y(, z)) order
    out_shape = grid.shape[1:-1]
    m = prod(out_shape)
    grid = grid.cast(input.dtype)
    flat = input.reshape(n, c, -1)

    def tap(coords: list[Tensor]) -> Tensor:
        """The input at whole pixel coordinates (x, y(, z)), each (n, m); zero outside."""
        inside, index, stride = None, None, 1
        for k, size in zip(coords, extent):
            ok = (k >= 0) & (k <= size - 1)
            inside = ok if inside is None else inside & ok
            term = k.clip(0, size - 1) * stride
            index = term if index is None else index + term
            stride *= size
        taken = flat.gather(2, index.cast(dtypes.int32).unsqueeze(1).expand(n, c, m))
        return inside.unsqueeze(1).where(taken, 0)

    points = [_unnormalize(grid[..., i].reshape(n, m), size, align) for i, size in enumerate(extent)]
    if mode == "bicubic":
        x, y = points
        x0, y0 = x.floor().detach(), y.floor().detach()
        wx, wy = _cubic_weights((x - x0).unsqueeze(1)), _cubic_weights((y - y0).unsqueeze(1))
        xs = [_pad_coord(x0 + i - 1, extent[0], padding_mode, align) for i in range(4)]
        rows = []
        for j in range(4):
            yj = _pad_coord(y0 + j - 1, extent[1], padding_mode, align)
            rows.append(sum(tap([xs[i], yj]) * wx[i] for i in range(4)))
        out = sum(rows[j] * wy[j] for j in range(4))
    else:
        points = [_pad_coord(p, size, padding_mode, align) for p, size in zip(points, extent)]
        if mode == "nearest":
            out = tap([p.round().detach() for p in points])
        else:
            lows = [p.floor().detach() for p in points]
            fracs = [(p - low).unsqueeze(1) for p, low in zip(points, lows)]
            out = None
            for bits in itertools.product((0, 1), repeat=nd):  # torch's corner order: x fastest
                corner = bits[::-1]
                weight = math.prod(f if b else 1 - f for f, b in zip(fracs, corner))
                term = tap([low + b for low, b in zip(lows, corner)]) * weight
                out = term if out is None else out + term
    return out.reshape(n, c, *out_shape)


def interpolate(
    input: Tensor,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    if antialias:
        return _interpolate_antialiased(input, size, scale_factor, mode, align_corners, recompute_scale_factor)
    return input.interpolate(size, scale_factor, mode, align_corners)


def _interpolate_antialiased(
    input: Tensor, size: Any, scale_factor: Any, mode: str, align_corners: bool | None, recompute: bool | None
) -> Tensor:
    """torch's antialiased resize (PIL's): along each spatial axis, output pixel i is a normalized weighted sum of the
    input pixels within support of its center scale * (i + 0.5), the filter (triangle, or cubic with a = -0.5)
    stretched by the scale when downsampling. The weights are constants of the sizes: one matmul per axis."""
    if mode not in ("bilinear", "bicubic") or input.ndim != 4:
        raise ValueError(
            "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D tensor as input"
        )
    if not dtypes.is_float(input.dtype):
        raise NotImplementedError(f"interpolate(antialias=True) of {input.dtype} (torch's fixed point): cast to float")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    ins = input.shape[2:]
    if size is not None:
        outs = make_tuple(size, 2)
        scales = [None, None]
    else:
        factors = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * 2
        outs = tuple(int(math.floor(i * f)) for i, f in zip(ins, factors))
        scales = [None if recompute else 1 / f for f in factors]
    x = input
    for axis in (3, 2):  # width, then height
        n_in, n_out = ins[axis - 2], outs[axis - 2]
        if align_corners:
            scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            scale = scales[axis - 2] or n_in / n_out
        weights = Tensor(_antialias_weights(n_in, n_out, scale, mode == "bicubic"), dtype=x.dtype, device=x.device)
        x = x @ weights.T if axis == 3 else weights @ x
    return x


def _antialias_weights(n_in: int, n_out: int, scale: float, cubic: bool) -> list[list[float]]:
    """(n_out, n_in): each output pixel's normalized filter weights over the input pixels."""

    def triangle(t: float) -> float:
        return max(0.0, 1 - abs(t))

    def keys(t: float) -> float:  # cubic convolution, a = -0.5 (PIL's, torch's antialiased bicubic)
        t = abs(t)
        return _cubic_near(t, -0.5) if t < 1 else _cubic_far(t, -0.5) if t < 2 else 0.0

    kernel, half = (keys, 2.0) if cubic else (triangle, 1.0)
    support = half * scale if scale >= 1 else half
    stretch = 1 / scale if scale >= 1 else 1.0
    rows = []
    for i in range(n_out):
        center = scale * (i + 0.5)
        low, high = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        taps = [kernel((j - center + 0.5) * stretch) for j in range(low, high)]
        total = sum(taps) or 1.0
        rows.append([0.0] * low + [t / total for t in taps] + [0.0] * (n_in - high))
    return rows


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise ArgumentError(f"pixel_shuffle: channels {c} must be divisible by upscale_factor squared ({r * r})")
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise ArgumentError(f"pixel_unshuffle: height {h} and width {w} must be divisible by downscale_factor {r}")
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """torch's: max_norm renormalizes the looked-up rows of weight in place first (no gradient through that), to norm
    max_norm where their norm_type-norm is larger; scale_grad_by_freq divides each row's gradient by its count in
    input."""
    if not dtypes.is_int(input.dtype):
        raise TypeError(f"embedding: expected integer indices, got {input.dtype}")
    # a one-hot matmul: a gather the scheduler fuses, with the scatter-add gradient for free
    hit = input.unsqueeze(-1) == Tensor.arange(weight.shape[0], device=input.device)
    if max_norm is not None:
        _embedding_renorm(weight, hit, max_norm, norm_type)
    if scale_grad_by_freq:
        # the same values (w + 0), and the gradient of each row divided by how often it was looked up
        count = hit.reshape(-1, weight.shape[0]).sum(0).maximum(1).unsqueeze(1).cast(weight.dtype)
        weight = weight.detach() + (weight - weight.detach()) / count
    if padding_idx is not None:  # the padding row gets no gradient
        row = padding_idx % weight.shape[0]
        keep = (Tensor.arange(weight.shape[0], device=weight.device) != row).unsqueeze(-1)
        weight = keep.where(weight, weight.detach())
    return hit.cast(weight.dtype) @ weight


def _embedding_renorm(weight: Tensor, hit: Tensor, max_norm: float, norm_type: float) -> None:
    """torch's embedding_renorm_: each looked-up row whose norm is over max_norm scaled by max_norm / (norm + 1e-7)."""
    w = weight.detach()
    looked_up = hit.reshape(-1, weight.shape[0]).any(0)
    if norm_type == math.inf:
        norm = w.abs().max(1)
    elif norm_type == 0:
        norm = (w != 0).sum(1).cast(w.dtype)
    else:
        norm = w.abs().pow(norm_type).sum(1).pow(1 / norm_type)
    scale = (looked_up & (norm > max_norm)).where(max_norm / (norm + 1e-7), 1.0)
    weight.assign((w * scale.unsqueeze(1).cast(w.dtype)).cast(weight.dtype))


def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """torch's: the rows of a 2-D input are the bags, or a 1-D input is cut into bags at `offsets`. Each bag's
    embeddings are summed (weighted by per_sample_weights), averaged or maxed; an empty bag gives zeros, padding_idx
    entries count for nothing. The bags are a membership mask (bags x entries) built from the offsets on the device,
    so the offsets' values are never read on the host; the sum is one matmul of that mask with the embeddings."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            f"embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
            f"(got mode='{mode}')"
        )
    if not dtypes.is_int(input.dtype):
        raise TypeError(f"embedding_bag: expected integer indices, got {input.dtype}")
    if per_sample_weights is not None and per_sample_weights.shape != input.shape:
        raise ValueError(
            f"embedding_bag: per_sample_weights of shape {per_sample_weights.shape} must have the input's shape "
            f"{input.shape}"
        )
    rows = embedding(input.flatten(), weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)  # (entries, dim)
    keep = None if padding_idx is None else input != padding_idx % weight.shape[0]
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed length "
                f"sequences. However, found offsets of type {type(offsets).__name__}"
            )
        bags, per_bag = input.shape
        # entry j of bag b is entry b * per_bag + j of the flat input: the membership mask is block-diagonal
        member = Tensor.ones(bags, per_bag, dtype=dtypes.bool, device=input.device) if keep is None else keep
        rows = rows.reshape(bags, per_bag, -1)
        weights = per_sample_weights
    elif input.ndim == 1:
        if offsets is None or offsets.ndim != 1:
            raise ValueError(f"offsets has to be a 1D Tensor but got {None if offsets is None else offsets.shape}")
        starts = offsets[:-1] if include_last_offset else offsets
        position = Tensor.arange(input.shape[0], device=input.device)
        # the bag of entry i: the number of starts at or before i, less one; bag b holds the entries whose bag is b
        bag = (position.unsqueeze(1) >= starts.unsqueeze(0)).sum(1) - 1
        member = bag.unsqueeze(0) == Tensor.arange(starts.shape[0], device=input.device).unsqueeze(1)
        if include_last_offset:  # entries from the last offset on belong to no bag
            member = member & (position < offsets[-1]).unsqueeze(0)
        if keep is not None:
            member = member & keep.unsqueeze(0)
        weights = None if per_sample_weights is None else per_sample_weights.unsqueeze(0)
        rows = rows.unsqueeze(0)
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if mode == "max":
        if member.shape[1] == 0:  # no entries at all: one that is in no bag (a max over none raised)
            member, rows = member.pad(((0, 0), (0, 1))), rows.pad(((0, 0), (0, 1), (0, 0)))
        taken = member.unsqueeze(-1).where(rows, float("-inf")).max(1)
        return (member.sum(1) > 0).unsqueeze(-1).where(taken, 0)
    scale = member.cast(weight.dtype) if weights is None else member.where(weights.cast(weight.dtype), 0)
    if input.ndim == 2:
        total = (rows * scale.unsqueeze(-1)).sum(1)
    else:
        total = scale @ rows.squeeze(0)
    if mode == "sum":
        return total
    return total / member.sum(1).maximum(1).cast(weight.dtype).unsqueeze(-1)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    return tensor.one_hot(num_classes)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    with Tensor.train():
        return input.dropout(p)


def _channel_dropout(input: Tensor, p: float, training: bool, lead: int) -> Tensor:
    """Whole channels dropped: one keep draw per (batch, channel), broadcast over the spatial dims."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0
    shape = input.shape[:lead] + (1,) * (input.ndim - lead)
    keep = Tensor.rand(*shape, device=input.device) >= p
    return input * keep.cast(input.dtype) * (1 / (1 - p))


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _channel_dropout(input, p, training, input.ndim - 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _channel_dropout(input, p, training, input.ndim - 2)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _channel_dropout(input, p, training, input.ndim - 3)


# *** normalization ***


def layer_norm(
    input: Tensor,
    normalized_shape: Sequence[int] | int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    shape = tuple(make_tuple(normalized_shape, 1))
    if tuple(input.shape[input.ndim - len(shape) :]) != shape:
        raise ArgumentError(f"layer_norm: normalized_shape {list(shape)} does not end input shape {input.shape}")
    out = input.layernorm(tuple(range(-len(shape), 0)), eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def rms_norm(
    input: Tensor, normalized_shape: Sequence[int] | int, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    shape = tuple(make_tuple(normalized_shape, 1))
    if tuple(input.shape[input.ndim - len(shape) :]) != shape:
        raise ArgumentError(f"rms_norm: normalized_shape {list(shape)} does not end input shape {input.shape}")
    eps = 2.0 ** -dtypes.finfo(input.dtype)[1] if eps is None else eps  # torch.finfo(dtype).eps
    axes = tuple(range(-len(shape), 0))
    out = input * (input.square().mean(axes, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight


def group_norm(
    input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise ArgumentError(f"group_norm: {c} channels are not divisible into {num_groups} groups")
    out = input.reshape(n, num_groups, -1).layernorm(-1, eps).reshape(input.shape)
    shape = (1, -1) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    return out if bias is None else out + bias.reshape(shape)


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """torch's: each (sample, channel) plane normalized with its own statistics, and running statistics (when given)
    moved in place toward their means over the batch (the variance unbiased per plane); use_input_stats=False
    normalizes with the running statistics instead."""
    shape = (1, -1) + (1,) * (input.ndim - 2)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when use_input_stats is false")
        out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    else:
        planes = input.reshape(*input.shape[:2], -1)
        out = planes.layernorm(-1, eps).reshape(input.shape)
        n = planes.shape[-1]
        if n == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
        if running_mean is not None:
            mean = planes.detach().mean(-1).mean(0)
            running_mean.assign((1 - momentum) * running_mean + momentum * mean)
        if running_var is not None:
            var = planes.detach().var(-1, correction=1).mean(0)
            running_var.assign((1 - momentum) * running_var + momentum * var)
    if weight is not None:
        out = out * weight.reshape(shape)
    return out if bias is None else out + bias.reshape(shape)


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """torch's: with training=True the batch's statistics, and the running ones (when given) moved toward them in
    place; otherwise the running statistics."""
    from lazygrad.nn import _batch_norm

    if input.ndim < 2:
        raise ValueError(f"batch_norm needs an input of shape (N, C, ...), got {input.shape}")
    if training:
        if running_mean is not None and running_var is not None:
            return _batch_norm(input, weight, bias, running_mean, running_var, eps=eps, momentum=momentum)
        return _batch_norm(input, weight, bias, eps=eps)
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm: running_mean and running_var must be given when not training")
    return input.batchnorm(weight, bias, running_mean, (running_var + eps).rsqrt())


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    # the mean of squares over `size` neighbouring channels, zero padded as torch's (size // 2 before, the rest after)
    sq = input.square().unsqueeze(1)
    pads = [0, 0] * (input.ndim - 2) + [size // 2, (size - 1) // 2]
    window = sq.pad(pads)
    div = window.avg_pool2d((size,) + (1,) * (input.ndim - 2), 1).squeeze(1)
    return input / (div * alpha + k).pow(beta)


# *** distances ***


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    # torch clamps each norm at eps (since 1.12): x1.x2 / (max(|x1|, eps) * max(|x2|, eps))
    # norm's gradient is 0 at 0 (sqrt's would be inf there, and a zero vector's gradient NaN)
    n1 = x1.norm(dim=dim).maximum(eps)
    n2 = x2.norm(dim=dim).maximum(eps)
    return (x1 * x2).sum(dim) / (n1 * n2)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    d = (x1 - x2 + eps).abs()
    if p == math.inf:
        return d.max(-1, keepdim=keepdim)
    return d.pow(p).sum(-1, keepdim=keepdim).pow(1 / p)


# *** losses ***


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _same_shape(input: Tensor, target: Tensor, name: str) -> tuple[Tensor, Tensor]:
    if input.shape != target.shape:
        # torch broadcasts with a warning; a mismatch is nearly always a bug, so it is an error here
        raise ArgumentError(f"{name}: target shape {target.shape} differs from input shape {input.shape}")
    return input, target


def mse_loss(
    input: Tensor,
    target: Tensor,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    input, target = _same_shape(input, target, "mse_loss")
    loss = (input - target).square()
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(
    input: Tensor,
    target: Tensor,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    input, target = _same_shape(input, target, "l1_loss")
    loss = (input - target).abs()
    return _reduce(loss if weight is None else loss * weight, reduction)


def smooth_l1_loss(
    input: Tensor,
    target: Tensor,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    input, target = _same_shape(input, target, "smooth_l1_loss")
    d = (input - target).abs()
    loss = d if beta == 0 else (d < beta).where(0.5 * d.square() / beta, d - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(
    input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0, weight: Tensor | None = None
) -> Tensor:
    input, target = _same_shape(input, target, "huber_loss")
    d = (input - target).abs()
    loss = (d < delta).where(0.5 * d.square(), delta * (d - 0.5 * delta))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    input, target = _same_shape(input, target, "binary_cross_entropy")
    # torch clamps each log at -100, so that 0 and 1 give a finite loss; log1p(-x), not log(1 - x), which loses
    # the digits of a small x (x = 1e-7 gave 1.19e-7 in float32, not 1.0e-7)
    loss = -(target * input.log().maximum(-100.0) + (1 - target) * (-input).log1p().maximum(-100.0))
    if not target.requires_grad:
        # and its gradient is (x - y) / max(x (1 - x), 1e-12): through the clamped logs it was 0 * inf = NaN at 0, 1
        loss = input._with_derivative(loss, lambda x: (x - target) / (x * (1 - x)).maximum(1e-12))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    input, target = _same_shape(input, target, "binary_cross_entropy_with_logits")
    loss = input.binary_crossentropy_logits(target, "none", pos_weight)
    return _reduce(loss if weight is None else loss * weight, reduction)


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    return input.nll_loss(target, weight, ignore_index, reduction)


def _log_add(*terms: Tensor) -> Tensor:
    """log(sum(exp(terms))) elementwise, -inf where every term is -inf, with gradient 0 there (logsumexp's would be
    0 * inf = nan, and a CTC path that cannot be taken must not poison the gradients of those that can)."""
    top = terms[0]
    for t in terms[1:]:
        top = top.maximum(t)
    top = top.detach()
    dead = top == float("-inf")
    shift = dead.where(0.0, top)
    total = sum(((t - shift).exp() for t in terms[1:]), (terms[0] - shift).exp())
    return dead.where(float("-inf"), dead.where(1.0, total).log() + shift)


def _lengths(lengths: Any, batch: int, name: str, device: str) -> Tensor:
    out = lengths if isinstance(lengths, Tensor) else Tensor(list(lengths), device=device)
    if out.shape != (batch,):
        raise RuntimeError(f"ctc_loss: {name} must have one length per batch entry ({batch}), got shape {out.shape}")
    return out.cast(dtypes.int32)


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """torch's CTC loss (Graves et al. 2006): log_probs (T, N, C) or (T, C), targets padded (N, S) or concatenated
    (sum of target_lengths,). The forward variables alpha over the blank-interleaved targets are one recursion step
    per time step, in log space, batched over N; the gradient is autograd's through it. The lengths stay on the device
    (as masks), except a concatenated target's, which are read to cut the targets into rows. reduction "mean" divides
    each loss by its target length first, as torch. A target that cannot be aligned (inf loss) gives its sequence
    gradient 0 without zero_infinity too (a decision: torch gives NaN at each of its steps, which a sum or mean then
    spreads to every weight)."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    unbatched = log_probs.ndim == 2
    if unbatched:  # one sequence: targets (S,), each length a number or a 0-d tensor
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
        input_lengths, target_lengths = (
            n.reshape(1) if isinstance(n, Tensor) else [n] for n in (input_lengths, target_lengths)
        )
    if log_probs.ndim != 3:
        raise ValueError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got shape {log_probs.shape}")
    steps, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise RuntimeError(f"blank must be in label range [0, {classes}), got {blank}")
    if not dtypes.is_int(targets.dtype):
        raise RuntimeError(f"ctc_loss: targets must be integers, got {targets.dtype}")
    device = log_probs.device
    in_len = _lengths(input_lengths, batch, "input_lengths", device)
    tg_len = _lengths(target_lengths, batch, "target_lengths", device)
    if targets.ndim == 1:  # concatenated: cut into padded rows at the lengths' running sums
        sizes = [int(n) for n in (target_lengths.tolist() if isinstance(target_lengths, Tensor) else target_lengths)]
        width = max(sizes, default=0)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        index = Tensor(
            [[min(s + j, max(targets.shape[0] - 1, 0)) for j in range(width)] for s in starts], device=device
        )
        targets = targets[index] if width and targets.shape[0] else Tensor.zeros(batch, width, dtype=targets.dtype)
    if targets.ndim != 2 or targets.shape[0] != batch:
        raise RuntimeError(f"ctc_loss: targets must be (N, S) or concatenated, got shape {targets.shape} for N={batch}")
    width = targets.shape[1]
    states = 2 * width + 1  # blank, target 1, blank, target 2, ..., blank
    label = (
        Tensor.stack(targets.full_like(blank), targets, dim=2)
        .reshape(batch, 2 * width)
        .pad(((0, 0), (0, 1)), value=blank)
    )
    label = label.cast(dtypes.int32)
    # a state may skip the blank before it when it is a target unlike the target two states back
    two_back = label.pad(((0, 0), (2, 0)), value=blank)[:, :states]
    skip = (label != blank) & (label != two_back)
    # each state's log probability at every time step: (T, N, states)
    emit = log_probs.gather(2, label.unsqueeze(0).expand(steps, batch, states))
    position = Tensor.arange(states, device=device).unsqueeze(0)
    neg = float("-inf")
    alpha = (position < 2).where(emit[0], neg)
    for t in range(1, steps):
        one = alpha.pad(((0, 0), (1, 0)), value=neg)[:, :states]
        two = skip.where(alpha.pad(((0, 0), (2, 0)), value=neg)[:, :states], neg)
        alpha = (in_len > t).unsqueeze(1).where(_log_add(alpha, one, two) + emit[t], alpha)
    last = (2 * tg_len).unsqueeze(1)
    end = (position == last) | (position == last - 1)
    loss = -_masked_logsumexp(end.where(alpha, neg))
    if zero_infinity:
        loss = (loss == float("inf")).where(0.0, loss)
    if reduction == "mean":
        return (loss / tg_len.maximum(1).cast(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss


def _masked_logsumexp(x: Tensor) -> Tensor:
    """logsumexp over the last axis, -inf with gradient 0 for a row of only -inf (see _log_add)."""
    top = x.max(-1, keepdim=True).detach()
    dead = top == float("-inf")
    shift = dead.where(0.0, top)
    total = (x - shift).exp().sum(-1, keepdim=True)
    return dead.where(float("-inf"), dead.where(1.0, total).log() + shift).squeeze(-1)


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """torch's cross entropy over dim 1 (or dim 0 of an unbatched input): class indices or class probabilities as
    target, with weight, ignore_index (indices) and label smoothing."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    dim = 1 if input.ndim >= 2 else 0
    logp = input.log_softmax(dim)
    classes = input.shape[dim]
    wshape = [classes if i == dim else 1 for i in range(input.ndim)]
    if dtypes.is_float(target.dtype):  # class probabilities, same shape as the input
        input, target = _same_shape(input, target, "cross_entropy")
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        terms = logp * target if weight is None else logp * target * weight.reshape(wshape)
        loss = -terms.sum(dim)
        if reduction == "mean":
            return loss.sum() / (input.numel() // classes if input.numel() else 1)
        return _reduce(loss, reduction)
    nll = logp.nll_loss(target, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    # torch: (1 - eps) * nll + eps * the mean over classes of -w_c log p_c, ignored targets masked, and with
    # reduction mean divided by the same sum of target weights as the nll term
    valid = (target != ignore_index).cast(logp.dtype)
    w = Tensor.ones(classes, dtype=logp.dtype, device=logp.device) if weight is None else weight
    smooth = -(logp * w.reshape(wshape)).sum(dim) * valid / classes
    if reduction == "none":
        smooth_r = smooth
    elif reduction == "sum":
        smooth_r = smooth.sum()
    else:
        hit = target.clip(0, classes - 1).one_hot(classes).cast(logp.dtype)
        if target.ndim > 1:  # (N, d1.., C) -> (N, C, d1..)
            hit = hit.permute(0, target.ndim, *range(1, target.ndim))
        denom = (hit * w.reshape(wshape)).sum(dim) * valid if weight is not None else valid
        smooth_r = smooth.sum() / denom.sum()
    return (1 - label_smoothing) * nll + label_smoothing * smooth_r


def kl_div(
    input: Tensor,
    target: Tensor,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    if log_target:
        loss = target.exp() * (target - input)
    else:  # target * (log target - input), 0 where target is 0 (torch's xlogy)
        loss = (target > 0).where(target * (target.maximum(1e-38).log() - input), -target * input * 0)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def poisson_nll_loss(
    input: Tensor,
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average: Any = None,
    eps: float = 1e-8,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:  # Stirling's term where target > 1
        stirling = target * target.maximum(1).log() - target + 0.5 * (2 * math.pi * target.maximum(1)).log()
        loss = loss + (target > 1).where(stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(
    input: Tensor, target: Tensor, var: Tensor, full: bool = False, eps: float = 1e-6, reduction: str = "mean"
) -> Tensor:
    if var.ndim == input.ndim - 1 or (var.ndim == input.ndim and var.shape[-1] == 1 and input.shape[-1] != 1):
        var = var.unsqueeze(-1) if var.ndim == input.ndim - 1 else var
    v = var.maximum(eps)
    loss = 0.5 * (v.log() + (input - target).square() / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    return _reduce((-target * (input1 - input2) + margin).relu(), reduction)


def hinge_embedding_loss(
    input: Tensor,
    target: Tensor,
    margin: float = 1.0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    loss = (target == 1).where(input, 0.0) + (target == -1).where((margin - input).relu(), 0.0)
    return _reduce(loss, reduction)


def soft_margin_loss(
    input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean"
) -> Tensor:
    return _reduce((-target * input).softplus(), reduction)


def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    # torch's own form: the norms' squares plus an epsilon of 1e-12 under one square root
    dot = (input1 * input2).sum(-1)
    cos = dot / ((input1.square().sum(-1) + 1e-12) * (input2.square().sum(-1) + 1e-12)).sqrt()
    loss = (target == 1).where(1 - cos, 0.0) + (target == -1).where((cos - margin).relu(), 0.0)
    return _reduce(loss, reduction)


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((d_pos - d_neg + margin).relu(), reduction)


def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    loss = -(target * input.logsigmoid() + (1 - target) * (-input).logsigmoid())
    loss = (loss if weight is None else loss * weight).mean(-1)
    return _reduce(loss, reduction)


# *** attention ***


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    return query.scaled_dot_product_attention(key, value, attn_mask, dropout_p, is_causal, enable_gqa, scale)


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
    """im2col: (N, C, H, W) -> (N, C * kh * kw, L), the blocks' values in torch's order (channel, then kernel row,
    then kernel column)."""
    if input.ndim not in (3, 4):
        raise ArgumentError(f"unfold: expected a 3D or 4D input, got shape {input.shape}")
    x = input if input.ndim == 4 else input.unsqueeze(0)
    n, c = x.shape[:2]
    k, d, p, s = (make_tuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    x = x.pad((p[1], p[1], p[0], p[0]))
    oh = (x.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (x.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    if oh <= 0 or ow <= 0:
        raise ArgumentError(f"unfold: kernel {k} with dilation {d} does not fit padded input {x.shape[2:]}")
    cols = [
        x[:, :, i * d[0] : i * d[0] + s[0] * (oh - 1) + 1 : s[0], j * d[1] : j * d[1] + s[1] * (ow - 1) + 1 : s[1]]
        for i in range(k[0])
        for j in range(k[1])
    ]
    out = Tensor.stack(*cols, dim=2).reshape(n, c * k[0] * k[1], oh * ow)
    return out if input.ndim == 4 else out.squeeze(0)


def fold(
    input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
) -> Tensor:
    """col2im, unfold's adjoint: each block's values added back at their positions (overlaps summed)."""
    x = input if input.ndim == 3 else input.unsqueeze(0)
    k, d, p, s, size = (make_tuple(v, 2) for v in (kernel_size, dilation, padding, stride, output_size))
    n, ckk, length = x.shape
    c = ckk // (k[0] * k[1])
    hp, wp = size[0] + 2 * p[0], size[1] + 2 * p[1]
    oh = (hp - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (wp - d[1] * (k[1] - 1) - 1) // s[1] + 1
    if ckk % (k[0] * k[1]) or oh * ow != length:
        raise ArgumentError(f"fold: input {input.shape} does not fit kernel {k} over output {size}")
    blocks = x.reshape(n, c, k[0], k[1], oh, ow)
    out = Tensor.zeros(n, c, hp, wp, dtype=x.dtype, device=x.device)
    for i in range(k[0]):
        for j in range(k[1]):
            # block (i, j)'s values at rows i*d0 + s0*r, columns j*d1 + s1*q: strided, so placed by padding a
            # stride-spaced grid (each value followed by s-1 zeros)
            v = blocks[:, :, i, j]
            v = v.unsqueeze(-1).pad((0, s[1] - 1)).reshape(n, c, oh, ow * s[1])[..., : (ow - 1) * s[1] + 1]
            v = v.unsqueeze(-2).pad((0, 0, 0, s[0] - 1)).reshape(n, c, oh * s[0], -1)[:, :, : (oh - 1) * s[0] + 1]
            top, left = i * d[0], j * d[1]
            out = out + v.pad((left, wp - left - v.shape[3], top, hp - top - v.shape[2]))
    out = out[:, :, p[0] : p[0] + size[0], p[1] : p[1] + size[1]]
    return out if input.ndim == 3 else out.squeeze(0)


# *** torch's in-place spellings, deprecated aliases and less common layers ***


def _in_place(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def op_(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return input._inplace(fn(input, *args, **kwargs))

    op_.__name__ = op_.__qualname__ = f"{fn.__name__}_"
    op_.__doc__ = f"{fn.__name__}, written into the input's memory (torch's F.{fn.__name__}_)."
    return op_


relu_, elu_, celu_, selu_ = _in_place(relu), _in_place(elu), _in_place(celu), _in_place(selu)
leaky_relu_, hardtanh_, threshold_ = _in_place(leaky_relu), _in_place(hardtanh), _in_place(threshold)


def upsample(
    input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: bool | None = None
) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def _with_indices(pool: Callable[..., Any]) -> Callable[..., Any]:
    """torch's max_poolNd_with_indices: the pool with return_indices=True."""

    def with_indices(
        input: Tensor,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        ceil_mode: bool = False,
        return_indices: bool = True,
    ) -> Any:
        return pool(input, kernel_size, stride, padding, dilation, ceil_mode, True)

    with_indices.__name__ = with_indices.__qualname__ = f"{pool.__name__}_with_indices"
    return with_indices


max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices = (
    _with_indices(max_pool1d),
    _with_indices(max_pool2d),
    _with_indices(max_pool3d),
)


def adaptive_max_pool3d(input: Tensor, output_size: Any, return_indices: bool = False) -> Tensor:
    _no_indices(return_indices, "adaptive_max_pool3d")
    return _adaptive(input, output_size, 3, "adaptive_max_pool3d", "max")


def _unpool(dims: int) -> Callable[..., Tensor]:
    def max_unpool(
        input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, output_size: Any = None
    ) -> Tensor:
        return _max_unpool(input, indices, kernel_size, stride, padding, output_size, dims)

    max_unpool.__name__ = max_unpool.__qualname__ = f"max_unpool{dims}d"
    return max_unpool


max_unpool1d, max_unpool2d, max_unpool3d = _unpool(1), _unpool(2), _unpool(3)


def _max_unpool(
    input: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any, output_size: Any, dims: int
) -> Tensor:
    """max_pool's inverse: each value put at its flat index (max_pool's return_indices) of a zero output."""
    x, batched = _pool_input(input, dims, f"max_unpool{dims}d")
    idx = indices if batched else indices.unsqueeze(0)
    k, p = make_tuple(kernel_size, dims), make_tuple(padding, dims)
    s = k if stride is None else make_tuple(stride, dims)
    if output_size is None:
        spatial = tuple((n - 1) * st - 2 * pd + kk for n, st, pd, kk in zip(x.shape[2:], s, p, k))
    else:
        spatial = tuple(output_size)[-dims:]
    n, c = x.shape[:2]
    total = math.prod(spatial)
    flat = x.reshape(n, c, -1)
    out = Tensor.zeros(n, c, total, dtype=x.dtype, device=x.device).scatter(2, idx.reshape(n, c, -1), flat)
    out = out.reshape(n, c, *spatial)
    return out if batched else out.squeeze(0)


def _lp_pool(input: Tensor, norm_type: float, kernel_size: Any, stride: Any, ceil_mode: bool, dims: int) -> Tensor:
    """(sum over the window of x ** p) ** (1 / p), torch's way: the average pool of x ** p times the window size."""
    k = make_tuple(kernel_size, dims)
    pools = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}
    out = pools[dims](input.pow(norm_type), k, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu()).mul(math.prod(k)).pow(1.0 / norm_type)


def _lp_pool_nd(dims: int) -> Callable[..., Tensor]:
    def lp_pool(
        input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False
    ) -> Tensor:
        return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, dims)

    lp_pool.__name__ = lp_pool.__qualname__ = f"lp_pool{dims}d"
    return lp_pool


lp_pool1d, lp_pool2d, lp_pool3d = _lp_pool_nd(1), _lp_pool_nd(2), _lp_pool_nd(3)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _alpha_dropout(input: Tensor, p: float, training: bool, keep_shape: tuple[int, ...]) -> Tensor:
    """Dropped values set to SELU's negative saturation, then an affine map that keeps mean 0 and variance 1."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0
    low = -_SELU_ALPHA * _SELU_SCALE
    a = ((1 - p) * (1 + p * low * low)) ** -0.5
    b = -a * low * p
    keep = Tensor.rand(*keep_shape, device=input.device) >= p
    return keep.where(input, low) * a + b


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    return _alpha_dropout(input, p, training, input.shape)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Whole channels (dim 1) dropped, as alpha_dropout's values."""
    return _alpha_dropout(input, p, training, input.shape[:2] + (1,) * (input.ndim - 2))


def rrelu(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False
) -> Tensor:
    """Randomized leaky ReLU: in training each negative value's slope is drawn from U(lower, upper), else the slope is
    their mean."""
    if not training:
        return input.leaky_relu((lower + upper) / 2)
    slope = Tensor.rand(*input.shape, device=input.device, dtype=input.dtype) * (upper - lower) + lower
    return (input >= 0).where(input, input * slope)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    n, c = input.shape[:2]
    if groups <= 0 or c % groups:
        raise ValueError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    rest = input.shape[2:]
    return input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(n, c, *rest)


native_channel_shuffle = channel_shuffle


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """The distances between the rows of an (N, M) input, pairs i < j in row-major order: N(N-1)/2 of them."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    n = input.shape[0]
    rows, cols = zip(*[(i, j) for i in range(n) for j in range(i + 1, n)]) if n > 1 else ((), ())
    if not rows:
        return Tensor.zeros(0, dtype=input.dtype, device=input.device)
    a = input[Tensor(list(rows), device=input.device)]
    b = input[Tensor(list(cols), device=input.device)]
    return pairwise_distance(a, b, p, eps=0.0)


def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """sum over classes j != y of max(0, margin - x[y] + x[j]) ** p (times weight[y]), over the class count."""
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    x = input if input.ndim == 2 else input.unsqueeze(0)
    y = target.reshape(-1)
    classes = x.shape[1]
    hit = y.unsqueeze(1) == Tensor.arange(classes, device=x.device).unsqueeze(0)
    picked = hit.where(x, 0).sum(1, keepdim=True)
    gap = (margin - picked + x).relu()
    gap = gap if p == 1 else gap * gap
    if weight is not None:
        gap = gap * weight[y].unsqueeze(1)
    loss = hit.where(0, gap).sum(1) / classes
    return _reduce(loss if input.ndim == 2 else loss.squeeze(0), reduction)


def multilabel_margin_loss(
    input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean"
) -> Tensor:
    """Targets are class indices, each row's list ending at its first -1: sum over target classes j and non-target
    classes i of max(0, 1 - (x[j] - x[i])), over the class count."""
    x = input if input.ndim == 2 else input.unsqueeze(0)
    t = target if target.ndim == 2 else target.unsqueeze(0)
    classes = x.shape[1]
    valid = (t < 0).cast(dtypes.int32).cumsum(1) == 0  # the entries before the first -1
    member = ((t.unsqueeze(2) == Tensor.arange(classes, device=x.device)) & valid.unsqueeze(2)).sum(1) > 0
    gap = (1 - (x.unsqueeze(2) - x.unsqueeze(1))).relu()  # [j, i]: 1 - (x[j] - x[i])
    pair = member.unsqueeze(2) & member.logical_not().unsqueeze(1)
    loss = pair.where(gap, 0).sum((1, 2)) / classes
    return _reduce(loss if input.ndim == 2 else loss.squeeze(0), reduction)


def triplet_margin_with_distance_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: expected margin to be greater than 0, got {margin}")
    dist = distance_function or pairwise_distance
    pos, neg = dist(anchor, positive), dist(anchor, negative)
    if swap:
        neg = neg.minimum(dist(positive, negative))
    return _reduce((margin + pos - neg).relu(), reduction)
