"""Layers: plain classes holding Tensors under PyTorch's parameter names, so state dicts map onto torch's one to one.

Every parameter and running statistic lives in its own buffer (see `_own_buffer`), initialized lazily like torch's
defaults; nothing runs until the first realize (an optimizer's constructor, a forward pass, `safe_save`).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import namedtuple
from typing import Any, Sequence

from lazygrad.dtype import dtypes
from lazygrad.helpers import make_tuple, prod
from lazygrad.nn.module import _PARAMETERS, Module, ModuleList, Sequential
from lazygrad.tensor import ArgumentError, Tensor, _check_index_values, _replayed
from lazygrad.uop.ops import Ops


def _own_buffer(init: Tensor, requires_grad: bool = False) -> Tensor:
    """A tensor backed by a buffer nobody else shares, holding `init` once realized.

    Equal lazy expressions are one hash-consed UOp: two BatchNorms' `ones(C)` weights, or two `zeros(C)` counters
    bumped by the same `+ 1`, would be realized into one buffer and then updated in place twice. A fresh buffer per
    tensor makes every in-place update (`assign`) private to its tensor.
    """
    t = Tensor.empty(init.shape, dtype=init.dtype, device=init.device).assign(init)
    if requires_grad:
        _PARAMETERS[id(t)] = t
    # set either way: an optimizer takes a float tensor whose requires_grad was never set for a parameter
    return t.requires_grad_(requires_grad)


def _kaiming_uniform(shape: tuple[int, ...], fan_in: int) -> Tensor:
    # torch's default for Linear/Conv weights: kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    return _uniform(shape, _fan_in_bound(fan_in))


def _fan_in_bound(fan_in: int) -> float:
    # no inputs (Linear(0, n)): torch's bias bound is 0 there, and the weight has no elements
    return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    return _own_buffer(Tensor.uniform(*shape, low=-bound, high=bound), requires_grad=True)


def _conv_repr(conv: Any) -> str:
    """torch's repr of a (transposed) convolution: sizes per spatial dim, the options that differ from defaults."""
    n = len(conv.kernel_size)
    out = (
        f"{conv.in_channels}, {conv.out_channels}, kernel_size={conv.kernel_size}, stride={make_tuple(conv.stride, n)}"
    )
    padding = conv.padding if isinstance(conv.padding, str) else make_tuple(conv.padding, n)
    for name, value, default in (
        ("padding", padding, (0,) * n),
        ("dilation", make_tuple(conv.dilation, n), (1,) * n),
        ("output_padding", make_tuple(getattr(conv, "output_padding", 0), n), (0,) * n),
        ("groups", conv.groups, 1),
        ("bias", conv.bias is not None, True),
        ("padding_mode", getattr(conv, "padding_mode", "zeros"), "zeros"),
    ):
        if value != default:
            out += f", {name}={value}"
    return out


def _norm_repr(norm: Any, *head: Any) -> str:
    """torch's repr of a normalization layer: its sizes, eps, momentum where it has one, whether it has a scale and
    a shift, and whether it tracks running statistics where it can."""
    out = ", ".join(map(str, head)) + f", eps={norm.eps}"
    if hasattr(norm, "momentum"):
        out += f", momentum={norm.momentum}"
    out += f", {'elementwise_affine' if hasattr(norm, 'elementwise_affine') else 'affine'}={norm.weight is not None}"
    out += f", bias={norm.bias is not None}"
    return out + (f", track_running_stats={norm.track_running_stats}" if hasattr(norm, "track_running_stats") else "")


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        self.in_features, self.out_features = in_features, out_features
        self.weight = _kaiming_uniform((out_features, in_features), in_features)
        self.bias = _uniform((out_features,), _fan_in_bound(in_features)) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight, self.bias)

    def extra_repr(self) -> str:
        out_features, in_features = self.weight.shape
        return f"in_features={in_features}, out_features={out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """Convolution over len(kernel_size) spatial dims (2 for an int); weight (out, in/groups, *kernel) as in torch."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
    ):
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(
                f"padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', not {padding_mode!r}"
            )
        self.padding_mode = padding_mode
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = make_tuple(kernel_size, 2)
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', not {padding!r}")
        if padding == "same" and any(s != 1 for s in make_tuple(stride, len(self.kernel_size))):
            # as torch, at construction: 'same' output size is only defined for stride 1
            raise ValueError(f"padding='same' needs stride 1, got stride {stride}")
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * prod(self.kernel_size)
        self.weight = _kaiming_uniform((out_channels, in_channels // groups, *self.kernel_size), fan_in)
        self.bias = _uniform((out_channels,), _fan_in_bound(fan_in)) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        padding = self.padding
        if self.padding_mode != "zeros" and padding != "valid":
            x, padding = x.pad(self._pads(), self.padding_mode), 0  # the border padded first, as torch
        return x.conv2d(
            self.weight, self.bias, stride=self.stride, padding=padding, dilation=self.dilation, groups=self.groups
        )

    def extra_repr(self) -> str:
        return _conv_repr(self)

    def _pads(self) -> list[int]:
        """The padding as Tensor.pad's flat list (last dim first), 'same' resolved as torch does (the odd one
        after)."""
        dims = len(self.kernel_size)
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(make_tuple(self.dilation, dims), self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in totals]
        else:
            pairs = [(p, p) for p in make_tuple(self.padding, dims)]
        return [v for pair in reversed(pairs) for v in pair]


class ConvTranspose2d(Module):
    """Weight (in, out/groups, *kernel) as in torch."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
    ):
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = make_tuple(kernel_size, 2)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation, self.groups = dilation, groups
        # torch computes fan_in from weight.size(1), which for a transposed conv is out_channels // groups
        fan_in = out_channels // groups * prod(self.kernel_size)
        self.weight = _kaiming_uniform((in_channels, out_channels // groups, *self.kernel_size), fan_in)
        self.bias = _uniform((out_channels,), _fan_in_bound(fan_in)) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(
            self.weight,
            self.bias,
            stride=self.stride,
            padding=self.padding,
            output_padding=self.output_padding,
            dilation=self.dilation,
            groups=self.groups,
        )

    def extra_repr(self) -> str:
        return _conv_repr(self)


def _with_dims(base: type, dims: int) -> type:
    """base (a convolution over len(kernel_size) spatial dims) whose int kernel_size means `dims` dims: Conv1d is
    Conv2d with kernel_size (k,), Conv3d with (k, k, k); the other arguments are base's."""

    def __init__(
        self: Any, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], *args: Any, **kwargs: Any
    ) -> None:
        base.__init__(self, in_channels, out_channels, make_tuple(kernel_size, dims), *args, **kwargs)

    name = base.__name__.replace("2d", f"{dims}d")
    return type(name, (base,), {"__init__": __init__, "__qualname__": name, "__doc__": base.__doc__})


Conv1d, Conv3d = _with_dims(Conv2d, 1), _with_dims(Conv2d, 3)
ConvTranspose1d, ConvTranspose3d = _with_dims(ConvTranspose2d, 1), _with_dims(ConvTranspose2d, 3)


# this thread's BatchNorm counts (num_batches_tracked) written since its last optimizer step: id -> weak reference
_pending_counts = threading.local()


def take_pending_counts() -> list[Tensor]:
    """The BatchNorm counts this thread wrote since the last call that are still pending writes: an optimizer step
    realizes them with its update (a torch loop's optimizer holds the parameters alone; it realizes the running
    statistics, which read the weights it overwrites, and not the count, which reads nothing it writes)."""
    counts = _pending_counts.__dict__.pop("counts", None)
    if not counts:
        return []
    return [t for ref in counts.values() if (t := ref()) is not None and not _stored(t)]


def _stored(t: Tensor) -> bool:
    """Whether t is a stored buffer (seen through reshapes): Tensor._plain_buffer inline, two calls less."""
    u = t.uop
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.op is Ops.BUFFER


class BatchNorm(Module):
    """Batch normalization over dim 1 of (N, C, *spatial). While training (the module's mode where `train()`/`eval()`
    or a torch-style parent module set it, else `Tensor.training`: see nn/module.py) it normalizes with the batch's
    statistics and moves the running ones toward them (lazily: the update is realized with the next optimizer step);
    otherwise it uses the running statistics. momentum=None is torch's cumulative average.

    Arguments in tinygrad's order, `BatchNorm(sz, eps, affine, track_running_stats, momentum)`; torch's third
    positional argument is momentum, so pass it by name. `num_features=` (torch's name) is taken too."""

    def __init__(
        self,
        sz: int | None = None,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float | None = 0.1,
        *,
        num_features: int | None = None,
    ):
        if (sz is None) == (num_features is None):
            raise TypeError("BatchNorm needs the number of channels, as sz (tinygrad) or num_features (torch)")
        num_features = sz if sz is not None else num_features
        assert num_features is not None
        if not isinstance(affine, bool) or (momentum is not None and not isinstance(momentum, (int, float))):
            raise TypeError(f"BatchNorm(sz, eps, affine, track_running_stats, momentum): got affine={affine!r}")
        self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
        self.num_features, self.affine = num_features, affine
        self.weight = _own_buffer(Tensor.ones(num_features), requires_grad=True) if affine else None
        self.bias = _own_buffer(Tensor.zeros(num_features), requires_grad=True) if affine else None
        if track_running_stats:
            self.running_mean = _own_buffer(Tensor.zeros(num_features))
            self.running_var = _own_buffer(Tensor.ones(num_features))
            self.num_batches_tracked = _own_buffer(Tensor.zeros((), dtype=dtypes.int64))

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ValueError(f"BatchNorm needs an input of shape (N, C, ...), got {x.shape}")
        axes = (0, *range(2, x.ndim))
        training = self._training()  # the module's mode where train()/eval() or a parent set it, else Tensor's
        n = prod(x.shape[a] for a in axes)  # values per channel
        if training and n == 1:
            raise ValueError(f"BatchNorm: expected more than 1 value per channel when training, got input {x.shape}")
        if training and self.eps <= 0:
            raise ValueError(f"BatchNorm: eps must be positive when training, got {self.eps}")
        if training and self.track_running_stats:
            # the last call's count is still a pending write where no optimizer step realized it (take_pending_counts):
            # stored now, each call's count adds to a stored buffer (and the composite replays) instead of to a chain
            # of writes two nodes longer every call
            counter = self.num_batches_tracked
            if not _stored(counter):
                counter.realize()
            stats = (self.running_mean, self.running_var, counter)
            out = _batch_norm(x, self.weight, self.bias, *stats, eps=self.eps, momentum=self.momentum)
            # (weakly held: a layer dropped before the next step takes its count with it; a plain dict of
            # references, where a WeakValueDictionary's set and values are Python calls)
            _pending_counts.__dict__.setdefault("counts", {})[id(counter)] = weakref.ref(counter)
            return out
        if training or not self.track_running_stats:
            return _batch_norm(x, self.weight, self.bias, eps=self.eps)
        return x.batchnorm(self.weight, self.bias, self.running_mean, (self.running_var + self.eps).rsqrt())

    def extra_repr(self) -> str:
        return _norm_repr(self, self.num_features)


@_replayed
def _batch_norm(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    counter: Tensor | None = None,
    eps: float = 1e-5,
    momentum: float | None = 0.1,
) -> Tensor:
    """x normalized with its batch's statistics over every dim but 1; where running statistics are given, they move
    toward the batch's (lazy in-place writes). A composite: a training step replays its nodes and writes from a
    program instead of running the ops one by one (43 of a digits CNN forward's 174 nodes)."""
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axes)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    var = (x - mean.reshape(shape)).square().mean(axes)  # biased: what torch normalizes with
    if running_mean is not None and running_var is not None:
        # the counter (the layer's num_batches_tracked) moves with every step; momentum=None needs it (the average)
        if counter is not None:
            counter.assign(counter + 1)
        if momentum is None and counter is None:
            raise ValueError("batch_norm: momentum=None (a cumulative average) needs the count of batches")
        factor: Tensor | float = 1.0 / counter.cast(dtypes.float32) if momentum is None else momentum  # type: ignore[union-attr]
        # the running variance is the unbiased estimate, as in torch
        n = prod(x.shape[a] for a in axes)
        unbiased = var.detach() * (n / max(n - 1, 1))
        running_mean.assign((1 - factor) * running_mean + factor * mean.detach())
        running_var.assign((1 - factor) * running_var + factor * unbiased)
    return x.batchnorm(weight, bias, mean, (var + eps).rsqrt())


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class InstanceNorm(Module):
    """Normalizes each (sample, channel) plane of (N, C, *spatial) over its spatial dims; affine per channel. tinygrad's
    layer: affine defaults to True (torch's InstanceNorm2d defaults to False) and no running statistics are kept."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
        self.num_features, self.eps, self.affine = num_features, eps, affine
        self.weight = _own_buffer(Tensor.ones(num_features), True) if affine else None
        self.bias = _own_buffer(Tensor.zeros(num_features), True) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 3 or x.shape[1] != self.num_features:
            c = self.num_features
            raise ValueError(f"InstanceNorm({c}) needs an input (N, {c}, ...), got {x.shape}")
        x = x.reshape(x.shape[0], x.shape[1], -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None:
            return x
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return x * self.weight.reshape(shape) + self.bias.reshape(shape)  # type: ignore[union-attr]

    def extra_repr(self) -> str:
        return _norm_repr(self, self.num_features)


class LayerNorm(Module):
    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ):
        self.normalized_shape = make_tuple(normalized_shape, 1)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = _own_buffer(Tensor.ones(self.normalized_shape), True) if elementwise_affine else None
        self.bias = _own_buffer(Tensor.zeros(self.normalized_shape), True) if elementwise_affine and bias else None

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if n == 0 or x.shape[-n:] != self.normalized_shape:
            raise ArgumentError(f"LayerNorm over {self.normalized_shape} got an input of shape {x.shape}")
        x = x.layernorm(axis=tuple(range(-n, 0)), eps=self.eps)
        if self.weight is not None:
            x = x * self.weight
        return x if self.bias is None else x + self.bias

    def extra_repr(self) -> str:
        return _norm_repr(self, self.normalized_shape)


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channel dim of (N, C, H, W): torch's LayerNorm(C) applied to the channels-last view."""

    def __init__(self, channels: int, eps: float = 1e-5, elementwise_affine: bool = True):
        super().__init__(channels, eps, elementwise_affine)

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        if num_channels % num_groups:
            raise ValueError(f"num_groups={num_groups} must divide num_channels={num_channels}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = _own_buffer(Tensor.ones(num_channels), True) if affine else None
        self.bias = _own_buffer(Tensor.zeros(num_channels), True) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        x_ = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None:
            return x_
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return x_ * self.weight.reshape(shape) + self.bias.reshape(shape)  # type: ignore[union-attr]

    def extra_repr(self) -> str:
        return _norm_repr(self, self.num_groups, self.num_channels)


# machine epsilon per float dtype: torch's RMSNorm default eps (torch.finfo(dtype).eps)
_EPS = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23, dtypes.float64: 2.0**-52}


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape` dims; eps=None is the dtype's epsilon."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int] | None = None,
        eps: float | None = None,
        elementwise_affine: bool = True,
        *,
        dim: int | None = None,
    ):
        """torch's normalized_shape, or tinygrad's dim as a keyword."""
        normalized_shape = dim if normalized_shape is None else normalized_shape
        if normalized_shape is None:
            raise TypeError("RMSNorm needs normalized_shape (tinygrad: dim)")
        self.normalized_shape = make_tuple(normalized_shape, 1)
        self.eps = eps
        self.weight = _own_buffer(Tensor.ones(self.normalized_shape), True) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        axes = tuple(range(-len(self.normalized_shape), 0))
        eps = self.eps if self.eps is not None else _EPS[x.dtype]
        x = x * (x.square().mean(axes, keepdim=True) + eps).rsqrt()
        return x if self.weight is None else x * self.weight


class LSTMCell(Module):
    """One LSTM step, torch's parameter names and gate order (input, forget, cell, output)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((4 * hidden_size, input_size), bound)
        self.weight_hh = _uniform((4 * hidden_size, hidden_size), bound)
        self.bias_ih = _uniform((4 * hidden_size,), bound) if bias else None
        self.bias_hh = _uniform((4 * hidden_size,), bound) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            h = c = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)
        else:
            h, c = hc
        gates = x.linear(self.weight_ih, self.bias_ih) + h.linear(self.weight_hh, self.bias_hh)
        i, f, g, o = gates.chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


def _embedding_table(
    num: int, dim: int, padding_idx: int | None, weight: Tensor | None, freeze: bool, name: str
) -> tuple[int | None, Tensor]:
    """Embedding's and EmbeddingBag's padding_idx (checked, made non-negative) and table: `weight` as given, else
    N(0, 1) with the padding row zero. `name`: how torch's message for each spells padding_idx."""
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise AssertionError(f"{name} must be within num_embeddings")
        padding_idx %= num
    init = Tensor.randn(num, dim) if weight is None else weight
    if padding_idx is not None and weight is None:
        init = (Tensor.arange(num) == padding_idx).unsqueeze(1).where(0.0, init)
    return padding_idx, _own_buffer(init, requires_grad=not freeze)


class Embedding(Module):
    def __init__(
        self,
        num_embeddings: int | None = None,
        embedding_dim: int | None = None,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Tensor | None = None,
        _freeze: bool = False,
        *,
        vocab_size: int | None = None,
        embed_size: int | None = None,
    ):
        """torch's arguments (padding_idx: that row starts at zero and gets no gradient; max_norm renormalizes the
        looked-up rows of the weight in place; scale_grad_by_freq), or tinygrad's (vocab_size, embed_size) as
        keywords."""
        num_embeddings = vocab_size if num_embeddings is None else num_embeddings
        embedding_dim = embed_size if embedding_dim is None else embedding_dim
        if num_embeddings is None or embedding_dim is None:
            raise TypeError("Embedding needs num_embeddings and embedding_dim (tinygrad: vocab_size and embed_size)")
        padding_idx, self.weight = _embedding_table(
            num_embeddings, embedding_dim, padding_idx, _weight, _freeze, "Padding_idx"
        )
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq

    @classmethod
    def from_pretrained(
        cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None, **kwargs: Any
    ) -> Embedding:
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def __call__(self, idx: Tensor) -> Tensor:
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding needs integer indices, got {idx.dtype}")
        _check_index_values(idx, 0, self.num_embeddings, "Embedding of {} rows", self.num_embeddings)
        return functional.embedding(
            idx, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq
        )

    def extra_repr(self) -> str:
        out = f"{self.num_embeddings}, {self.embedding_dim}"
        for name, default in (
            ("padding_idx", None),
            ("max_norm", None),
            ("norm_type", 2.0),
            ("scale_grad_by_freq", False),
        ):
            if getattr(self, name) != default:
                out += f", {name}={getattr(self, name)}"
        return out


class EmbeddingBag(Module):
    """torch's EmbeddingBag: the sums, means or maxima of bags of embeddings (functional.embedding_bag), without
    the (num_bags, bag_size, dim) tensor of their rows where the bags are given by offsets."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        _freeze: bool = False,
    ):
        if mode not in ("sum", "mean", "max"):
            raise ValueError("mode has to be one of sum, mean or max")
        padding_idx, self.weight = _embedding_table(
            num_embeddings, embedding_dim, padding_idx, _weight, _freeze, "padding_idx"
        )
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, **kwargs: Any) -> EmbeddingBag:
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        return cls(*embeddings.shape, _weight=embeddings, _freeze=freeze, **kwargs)

    def __call__(
        self, input: Tensor, offsets: Tensor | None = None, per_sample_weights: Tensor | None = None
    ) -> Tensor:
        _check_index_values(input, 0, self.num_embeddings, "EmbeddingBag of {} rows", self.num_embeddings)
        return functional.embedding_bag(
            input,
            self.weight,
            offsets,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            padding_idx=self.padding_idx,
        )

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'"


class SyncBatchNorm(BatchNorm):
    """torch's SyncBatchNorm, on one process a BatchNorm (torch's argument order: num_features, eps, momentum, affine,
    track_running_stats). Data parallel training over processes (lazygrad.distributed) averages the gradients, not
    the batch statistics."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
    ):
        super().__init__(num_features, eps, affine, track_running_stats, momentum)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        return module


def _lazy(base: type, torch_order: Sequence[str] = ()) -> type:
    """torch's Lazy<base>: made without its input size, which the first call reads (the last dim for a Linear, dim 1
    otherwise) to make the parameters; the module is then a `base`. As in torch, make the optimizer after that call.
    `torch_order`: the names of torch's positional arguments where base's order differs (BatchNorm's)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if torch_order:
            kwargs.update(zip(torch_order, args))
            args = ()
        self.__dict__["_lazy_arguments"] = (args, kwargs)

    def __call__(self: Any, x: Tensor, *rest: Any, **more: Any) -> Any:
        args, kwargs = self.__dict__.pop("_lazy_arguments")
        size = x.shape[-1] if issubclass(base, Linear) else x.shape[1]
        self.__class__ = base
        if torch_order:
            base.__init__(self, num_features=size, **kwargs)
        else:
            base.__init__(self, size, *args, **kwargs)
        return self(x, *rest, **more)

    name = f"Lazy{base.__name__}"
    return type(name, (base,), {"__init__": __init__, "__call__": __call__, "__qualname__": name})


LazyLinear = _lazy(Linear)
LazyConv1d, LazyConv2d, LazyConv3d = _lazy(Conv1d), _lazy(Conv2d), _lazy(Conv3d)
LazyConvTranspose1d, LazyConvTranspose2d = _lazy(ConvTranspose1d), _lazy(ConvTranspose2d)
LazyConvTranspose3d = _lazy(ConvTranspose3d)
LazyBatchNorm1d = LazyBatchNorm2d = LazyBatchNorm3d = _lazy(
    BatchNorm, ("eps", "momentum", "affine", "track_running_stats")
)


# torch's InstanceNorm1d/2d/3d default to affine=False (tinygrad's InstanceNorm to True)
class InstanceNorm2d(InstanceNorm):
    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
    ):
        super().__init__(num_features, eps, affine)
        self.momentum, self.track_running_stats = momentum, track_running_stats
        if track_running_stats:
            self.running_mean = _own_buffer(Tensor.zeros(num_features))
            self.running_var = _own_buffer(Tensor.ones(num_features))
            self.num_batches_tracked = _own_buffer(Tensor.zeros((), dtype=dtypes.int64))  # in torch's too, never moved

    def __call__(self, x: Tensor) -> Tensor:
        if not self.track_running_stats:
            return super().__call__(x)
        if x.ndim < 3 or x.shape[1] != self.num_features:
            c = self.num_features
            raise ValueError(f"InstanceNorm({c}) needs an input (N, {c}, ...), got {x.shape}")
        training = self._training()
        momentum = 0.0 if self.momentum is None else self.momentum  # torch's: no cumulative average here
        stats = (self.running_mean, self.running_var)
        return functional.instance_norm(x, *stats, self.weight, self.bias, training, momentum, self.eps)


InstanceNorm1d = InstanceNorm3d = InstanceNorm2d


class _FractionalMaxPool(Module):
    """torch's FractionalMaxPool2d/3d (functional.fractional_max_pool2d/3d): a fresh sample per call unless
    _random_samples is given."""

    nd = 2

    def __init__(
        self,
        kernel_size: Any,
        output_size: Any = None,
        output_ratio: Any = None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ):
        name = type(self).__name__
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        ratios = output_ratio if isinstance(output_ratio, (tuple, list)) else (output_ratio,) * self.nd
        if output_ratio is not None and not all(0 < r < 1 for r in ratios):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")
        self.kernel_size, self.output_size, self.output_ratio = kernel_size, output_size, output_ratio
        self.return_indices, self._random_samples = return_indices, _random_samples

    def __call__(self, x: Tensor) -> Any:
        pool = functional.fractional_max_pool2d if self.nd == 2 else functional.fractional_max_pool3d
        return pool(x, self.kernel_size, self.output_size, self.output_ratio, self.return_indices, self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPool):
    nd = 2


class FractionalMaxPool3d(_FractionalMaxPool):
    nd = 3


_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """torch's (Grave et al.): a head over the shortlist (classes below cutoffs[0]) and one column per cluster, and a
    two-layer tail per cluster of classes (hidden size in_features // div_value ** (i + 1)). Every tail runs on the
    whole batch, and rows outside a cluster are masked out of its value and gradient: which rows fall in which
    cluster is never read on the host. Target values out of [0, n_classes) are checked with CHECK_INDEX=1, as every
    index is."""

    def __init__(
        self, in_features: int, n_classes: int, cutoffs: Sequence[int], div_value: float = 4.0, head_bias: bool = False
    ):
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (
            cutoffs != sorted(cutoffs)
            or min(cutoffs) <= 0
            or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs)
            or any(int(c) != c for c in cutoffs)
        ):
            raise ValueError(
                "cutoffs should be a sequence of unique, positive integers sorted in an increasing order, where each "
                "value is between 1 and n_classes-1"
            )
        self.in_features, self.n_classes, self.div_value, self.head_bias = in_features, n_classes, div_value, head_bias
        self.cutoffs = cutoffs + [n_classes]
        self.shortlist_size, self.n_clusters = cutoffs[0], len(cutoffs)
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias)
        self.tail = ModuleList(
            Sequential(
                Linear(in_features, int(in_features // div_value ** (i + 1)), bias=False),
                Linear(int(in_features // div_value ** (i + 1)), self.cutoffs[i + 1] - self.cutoffs[i], bias=False),
            )
            for i in range(self.n_clusters)
        )

    def __call__(self, input: Tensor, target: Tensor) -> Any:
        if target.ndim == 1:
            if input.shape[0] != target.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch dimension.")
            if input.ndim != 2:
                raise RuntimeError(
                    f"1D target tensor expects 2D input tensors, but found inputs with size {input.shape}"
                )
        elif target.ndim == 0:
            if input.ndim != 1:
                raise RuntimeError(
                    f"0D target tensor expects 1D input tensors, but found inputs with size {input.shape}"
                )
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        _check_index_values(target, 0, self.n_classes, "AdaptiveLogSoftmaxWithLoss of {} classes", self.n_classes)
        x, t = (input, target) if target.ndim == 1 else (input.unsqueeze(0), target.unsqueeze(0))
        head = self.head(x).log_softmax(1)
        # the head's column of each row: its class in the shortlist, its cluster's column otherwise
        cluster = sum((t >= c).cast(t.dtype) for c in self.cutoffs[1:-1])
        column = (t < self.shortlist_size).where(t, self.shortlist_size + cluster)
        output = head.gather(1, column.unsqueeze(1)).squeeze(1)
        for i, tail in enumerate(self.tail):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            member = (t >= low) & (t < high)
            local = tail(x).log_softmax(1).gather(1, member.where(t - low, 0).unsqueeze(1)).squeeze(1)
            output = output + member.where(local, 0.0)
        loss = (-output).mean()
        return _ASMoutput(output if target.ndim == 1 else output.squeeze(0), loss)

    def log_prob(self, input: Tensor) -> Tensor:
        """The log-probabilities of all n_classes classes, (N, n_classes)."""
        head = self.head(input).log_softmax(1)
        parts = [head[:, : self.shortlist_size]]
        for i, tail in enumerate(self.tail):
            parts.append(tail(input).log_softmax(1) + head[:, self.shortlist_size + i].unsqueeze(1))
        return parts[0].cat(*parts[1:], dim=1)

    def predict(self, input: Tensor) -> Tensor:
        """The most likely class of each row (torch's shortcut through the head gives the same classes), in the
        default int as every index-returning op."""
        return self.log_prob(input).argmax(1)


# submodules, so that `from lazygrad import nn` gives nn.optim and nn.state as in the examples (they import this file)
from lazygrad.nn import datasets, functional, init, optim, state, utils  # noqa: E402
from lazygrad.nn.module import *  # noqa: E402, F403
from lazygrad.nn.module import __all__ as _module_names  # noqa: E402
from lazygrad.nn.recurrent import *  # noqa: E402, F403
from lazygrad.nn.recurrent import __all__ as _recurrent_names  # noqa: E402
from lazygrad.nn.transformer import *  # noqa: E402, F403
from lazygrad.nn.transformer import __all__ as _transformer_names  # noqa: E402

__all__ = [
    "Linear",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "InstanceNorm",
    "LayerNorm2d",
    "LSTMCell",
    "LayerNorm",
    "GroupNorm",
    "RMSNorm",
    "Embedding",
    "EmbeddingBag",
    "SyncBatchNorm",
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "Conv3d",
    "ConvTranspose3d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "AdaptiveLogSoftmaxWithLoss",
    "Module",
    "functional",
    "init",
    "utils",
    "optim",
    "state",
    "datasets",
    *_module_names,
    *_transformer_names,
    *_recurrent_names,
]
