"""torch's namespace over lazygrad: a PyTorch program runs with `torch` replaced by `lazygrad.torch` in its imports.

    import lazygrad.torch as torch            # import torch
    import lazygrad.torch.nn as nn            # import torch.nn as nn
    import lazygrad.torch.nn.functional as F  # import torch.nn.functional as F
    from lazygrad.torch.utils.data import DataLoader

`torch.cat`, `torch.zeros`, `torch.no_grad`, `torch.float32`, `torch.optim`, `torch.max(x, 1)`, `torch.device`: each
function follows torch's signature and semantics, also where lazygrad's Tensor method follows tinygrad's for
positional arguments: `torch.max(x, 1)` is (values, indices) as in torch, while `x.max(1)` stays tinygrad's tensor;
`torch.std(x, 0, True)` takes `True` as `unbiased`, where `x.std(0, True)` takes it as keepdim. (A module of its own,
not the package's top level: `lazygrad.tensor`, `lazygrad.device` and `lazygrad.dtype` are modules there, and
`from lazygrad import *` must not shadow Python's `int`, `max` or `sum`.)

Everything else forwards to the Tensor method of the same name with the input first (`torch.exp(x)` is `x.exp()`),
or to lazygrad.nn.functional where torch's top-level function is the functional one (`torch.conv2d`,
`torch.layer_norm`, ...). A Python number as the input of a binary function (`torch.add(2, x)`, `torch.pow(2, x)`)
is taken as torch takes it, in the other operand's dtype. `out=` writes the result into the given tensor (of the
result's shape: lazygrad does not resize it).

The top-level losses take torch's enum int reduction (0 none, 1 mean, 2 sum) as well as the string. `torch.func`
and `torch.vmap` are lazygrad.func's transforms. The functions of complex numbers answer for real tensors as torch's
(`real` is the tensor, `angle` 0 or pi, `imag` raises).

Not offered (AttributeError, as for any name lazygrad lacks): complex numbers, sparse and quantized tensors, torch's
internal and backend-specific functions (cudnn_*, mkldnn_*, fbgemm_*, sym_*), storages and dlpack.
"""

from __future__ import annotations

import builtins
import collections
import functools
import math
import random
import sys
import types
from typing import Any, Callable, Sequence

from lazygrad import nn
from lazygrad.autograd import enable_grad, inference_mode, no_grad, set_grad_enabled  # noqa: F401 (torch's names)
from lazygrad.device import Device, DeviceName
from lazygrad.dtype import DType, dtypes, least_upper_dtype, to_dtype
from lazygrad.nn import functional as F
from lazygrad.nn import optim
from lazygrad.nn.module import Module
from lazygrad.tensor import Tensor, ValuesIndices

# *** dtypes under torch's names ***

float32 = float = dtypes.float32
float64 = double = dtypes.float64
float16 = half = dtypes.float16
bfloat16 = dtypes.bfloat16
int8, uint8, uint16, uint32, uint64 = dtypes.int8, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64
int16 = short = dtypes.int16
int32 = int = dtypes.int32
int64 = long = dtypes.int64
bool = dtypes.bool
dtype = DType
Size = tuple  # torch.Size is a tuple of ints; lazygrad's shapes are plain tuples


def is_tensor(obj: Any) -> builtins.bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Tensor) -> builtins.bool:
    return dtypes.is_float(input.dtype)


def get_default_dtype() -> DType:
    return dtypes.default_float


def set_default_dtype(d: DType) -> None:
    """torch.set_default_dtype: the dtype of floats made from Python numbers and of rand/zeros/... without dtype."""
    d = to_dtype(d)
    if not dtypes.is_float(d):
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    dtypes.default_float = d


class finfo:
    """torch.finfo: the limits of a float dtype (default: the default float)."""

    def __init__(self, type: DType | None = None):
        self.dtype = d = to_dtype(type) if type is not None else dtypes.default_float
        exp, mant = dtypes.finfo(d)  # (ValueError for a non-float dtype, as torch's TypeError-free refusal)
        self.bits = d.itemsize * 8
        self.eps = 2.0**-mant
        self.max = (2 - 2.0**-mant) * 2.0 ** (2 ** (exp - 1) - 1)
        self.min = -self.max
        self.tiny = self.smallest_normal = 2.0 ** (2 - 2 ** (exp - 1))
        self.resolution = 10.0 ** -builtins.int(math.floor(mant * math.log10(2)))

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, dtype={self.dtype})"
        )


class iinfo:
    """torch.iinfo: the limits of an integer dtype."""

    def __init__(self, type: DType):
        self.dtype = d = to_dtype(type)
        if not dtypes.is_int(d):
            raise TypeError(f"iinfo takes an integer dtype, got {d}")
        self.bits = d.itemsize * 8
        signed = not dtypes.is_unsigned(d)
        self.min = -(2 ** (self.bits - 1)) if signed else 0
        self.max = 2 ** (self.bits - 1) - 1 if signed else 2**self.bits - 1

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


device = DeviceName  # torch.device("cpu"), ("cuda", 1): lazygrad's name for it, with .type and .index


class memory_format:  # noqa: N801 (torch's name)
    """torch's memory formats, taken where torch takes them (x.contiguous(memory_format=...), model.to(...)): lazygrad
    keeps one layout, row-major; the values read the same in each."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


contiguous_format, preserve_format = memory_format("contiguous_format"), memory_format("preserve_format")
channels_last, channels_last_3d = memory_format("channels_last"), memory_format("channels_last_3d")


# *** creation ***


def _scalars_of(data: Any, found: list[DType]) -> Any:
    """Nested lists with one-element tensors among their items (torch.tensor([t.sum() for t in ts])) as Python
    numbers, each tensor's dtype noted in `found`."""
    if isinstance(data, Tensor):
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        found.append(data.dtype)
        return data.item()
    if isinstance(data, (list, tuple)):
        return [_scalars_of(v, found) for v in data]
    return data


def _from_python(data: Any, dtype: Any, device: Any) -> Tensor:
    """A tensor of Python data, whose ints are int64 as torch's (lazygrad's Tensor([1, 2]) is tinygrad's int32);
    a numpy array keeps its dtype; tensors inside lists give their dtype."""
    if isinstance(data, (list, tuple)):
        found: list[DType] = []
        data = _scalars_of(data, found)
        if found and dtype is None:
            dtype = least_upper_dtype(*found)
    out = Tensor(data, dtype=dtype, device=device)
    if dtype is None and out.dtype == dtypes.default_int and not hasattr(data, "dtype"):
        out = out.cast(dtypes.int64)
    return out


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: builtins.bool = False) -> Tensor:
    """torch.tensor: a copy of `data` (a list, a number, a numpy array, a Tensor)."""
    if isinstance(data, Tensor):
        out = Tensor(data.detach(), dtype=dtype, device=device)
        out = out.clone() if dtype is None else out
    else:
        out = _from_python(data, dtype, device)
    return out.requires_grad_(True) if requires_grad else out


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """torch.as_tensor: a Tensor given as it is (cast or moved where asked), else a new one from `data`."""
    if isinstance(data, Tensor):
        data = data if dtype is None else data.cast(to_dtype(dtype))
        return data if device is None else data.to(device)
    return _from_python(data, dtype, device)


asarray = as_tensor


def scalar_tensor(s: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return Tensor(s, dtype=dtype or dtypes.default_float, device=device)


def _with_creation_kwargs(make: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A creation function that also takes torch's `size=`, `requires_grad=`, `generator=` (ignored: one global
    stream), `layout=`/`pin_memory=` (no other layouts; nothing to pin) and `out=`."""

    def create(*args: Any, requires_grad: builtins.bool = False, out: Tensor | None = None, **kwargs: Any) -> Tensor:
        for ignored in ("generator", "layout", "pin_memory", "memory_format"):
            kwargs.pop(ignored, None)
        if "size" in kwargs and make is not Tensor.randint:
            args = (*args, tuple(kwargs.pop("size")))
        result = make(*args, **kwargs)
        if make in _INT64_DEFAULT and "dtype" not in kwargs and result.dtype == dtypes.default_int:
            result = result.cast(dtypes.int64)  # torch.arange(5), torch.full((2,), 3): int64, as torch's
        if requires_grad:
            result.requires_grad_(True)
        return _into(out, result)

    create.__name__ = create.__qualname__ = make.__name__
    create.__doc__ = make.__doc__
    return create


_INT64_DEFAULT = (Tensor.arange, Tensor.full)
zeros, ones, empty, full, rand, randn, randint, randperm, eye, arange, linspace, logspace = map(
    _with_creation_kwargs,
    (
        Tensor.zeros,
        Tensor.ones,
        Tensor.empty,
        Tensor.full,
        Tensor.rand,
        Tensor.randn,
        Tensor.randint,
        Tensor.randperm,
        Tensor.eye,
        Tensor.arange,
        Tensor.linspace,
        Tensor.logspace,
    ),
)
from_numpy = Tensor.from_numpy
manual_seed, seed, initial_seed = Tensor.manual_seed, Tensor.seed, Tensor.initial_seed
get_rng_state, set_rng_state = Tensor.get_rng_state, Tensor.set_rng_state
tril_indices, triu_indices = Tensor.tril_indices, Tensor.triu_indices
unravel_index, broadcast_shapes, einsum = Tensor.unravel_index, Tensor.broadcast_shapes, Tensor.einsum
is_grad_enabled = Tensor.is_grad_enabled


def is_inference_mode_enabled() -> builtins.bool:
    return not Tensor.is_grad_enabled()


class Generator(random.Random):
    """torch.Generator for the data utilities (random_split, samplers, DataLoader's shuffle take it, as a
    random.Random): `torch.Generator().manual_seed(42)` splits alike on every run. Tensor creation (rand, randn, ...)
    takes `generator=` and draws from the one global stream, which torch.manual_seed sets."""

    def __init__(self, device: Any = "cpu"):
        super().__init__(67280421310721)  # torch's default seed of a new generator
        self._initial, self.device = 67280421310721, device

    def manual_seed(self, seed: builtins.int) -> Generator:
        self.seed(builtins.int(seed))
        self._initial = builtins.int(seed)
        return self

    def initial_seed(self) -> builtins.int:
        return self._initial


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None, **kwargs: Any) -> Tensor:
    """torch.normal: tensors of means and/or stds (the result takes their broadcast shape), or floats and a size."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        like = mean if isinstance(mean, Tensor) else std
        shape = Tensor.broadcast_shapes(*(t.shape for t in (mean, std) if isinstance(t, Tensor)))
        return Tensor.randn(*shape, dtype=like.dtype, device=like.device) * std + mean
    if size is None:
        raise TypeError("normal() with float mean and std takes a size")
    return Tensor.normal(*tuple(size), mean=mean, std=std, **kwargs)


# *** functions of tensors: Tensor's methods with the input first ***


def _into(out: Tensor | None, result: Any) -> Any:
    if out is None:
        return result
    if isinstance(out, (tuple, list)):
        for o, r in zip(out, result):
            _into(o, r)
        return out
    if out.shape != result.shape:
        raise RuntimeError(f"out= has shape {out.shape}, the result {result.shape}: lazygrad does not resize out")
    return out.assign(result.cast(out.dtype) if result.dtype != out.dtype else result)


def _method(name: str) -> Callable[..., Any]:
    method = getattr(Tensor, name)

    def call(input: Any, *args: Any, out: Tensor | None = None, **kwargs: Any) -> Any:
        if not isinstance(input, Tensor):
            other = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
            if other is None or not isinstance(input, (builtins.int, builtins.float, builtins.bool)):
                raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
            input = other._broadcasted(input, reverse=True)[0]  # a number as torch takes it: in the tensor's dtype
        return _into(out, method(input, *args, **kwargs))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.{name}(input, ...): input.{name}(...)"
    return call


# torch's top-level functions that are Tensor methods with the same positional meaning
_METHODS = """abs abs_ absolute acos acos_ acosh acosh_ add addbmm addcdiv addcmul addmm addmv addmv_ addr adjoint all
as_strided allclose amax amin aminmax any arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan2
arctan_ arctanh arctanh_ argmax argmin argsort argwhere asin asin_ asinh asinh_ atan atan2 atan_ atanh atanh_ baddbmm
bernoulli bmm cholesky_inverse cholesky_solve matrix_exp bincount bitwise_and bitwise_left_shift bitwise_not bitwise_or
bitwise_right_shift bitwise_xor broadcast_to
bucketize cdist ceil ceil_ cholesky chunk clamp clamp_ clamp_max clamp_max_ clamp_min clamp_min_ clip clip_ clone
combinations conj copysign corrcoef cos cos_ cosh cosh_ count_nonzero cov cross cummax cummin cumprod cumsum
cumulative_trapezoid deg2rad deg2rad_ det detach detach_ diag diag_embed diagflat diagonal diagonal_scatter diff digamma
dist div divide dot dsplit empty_like eq equal erf erf_ erfc erfc_ erfinv exp exp2 exp2_ exp_ expm1 expm1_ fill_ fix
fix_ flatten flip fliplr flipud float_power floor floor_ floor_divide fmax fmin fmod frac frac_ frexp full_like gather
gcd gcd_ ge ger get_device gradient greater greater_equal gt heaviside histc hsplit hypot i0 i0_ index_add index_copy
index_fill index_put index_put_ index_reduce index_select inner inverse is_complex is_inference is_nonzero is_same_size
is_signed isclose isfinite isin isinf isnan isneginf isposinf isreal kron kthvalue lcm lcm_ ldexp ldexp_ le lerp less
less_equal lgamma log log10 log10_ log1p log1p_ log2 log2_ log_ log_softmax logaddexp logaddexp2 logcumsumexp logdet
logical_and logical_not logical_or logical_xor logit logit_ logsumexp lt masked_fill masked_scatter masked_select matmul
matrix_power maximum mean median minimum mm mode moveaxis movedim msort mul multinomial multiply mv mvlgamma nan_to_num
nan_to_num_ nanmean nanmedian nanquantile nansum narrow narrow_copy ne neg neg_ negative negative_ nextafter nonzero
norm not_equal numel ones_like outer permute pinverse polygamma positive pow prod put qr quantile rad2deg rad2deg_
rand_like randn_like ravel reciprocal reciprocal_ relu_ remainder renorm repeat_interleave reshape resize_as_
resolve_conj resolve_neg roll rot90 round round_ rsqrt rsqrt_ rsub scatter scatter_add scatter_reduce searchsorted
select select_scatter sgn sigmoid sigmoid_ sign signbit sin sin_ sinc sinc_ sinh sinh_ slice_scatter slogdet softmax
sort split split_with_sizes sqrt sqrt_ square square_ squeeze sub subtract sum svd swapaxes swapdims t take
take_along_dim tan tan_ tanh tanh_ tensor_split tensordot tile topk trace transpose trapezoid trapz tril triu
true_divide trunc trunc_ unbind unflatten unique unique_consecutive unsqueeze vander vdot vsplit where xlogy xlogy_
zero_ zeros_like""".split()

# torch's top-level functions that are nn.functional's (same positional arguments)
_FUNCTIONAL = """conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d max_pool1d max_pool2d
max_pool3d avg_pool1d adaptive_avg_pool1d pixel_shuffle pixel_unshuffle cosine_similarity pairwise_distance pdist
layer_norm group_norm rms_norm prelu relu selu celu rrelu hardshrink threshold dropout alpha_dropout
feature_alpha_dropout channel_shuffle bilinear""".split()

for _name in _METHODS:
    if hasattr(Tensor, _name):
        globals()[_name] = _method(_name)
for _name in _FUNCTIONAL:
    globals()[_name] = getattr(F, _name)
del _name


def _tensors(tensors: Any) -> list[Tensor]:
    return list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)


def cat(tensors: Any, dim: builtins.int = 0, *, axis: builtins.int | None = None, out: Tensor | None = None) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    return _into(out, Tensor.cat(tensors, dim=dim if axis is None else axis))


concat = concatenate = cat


def stack(tensors: Any, dim: builtins.int = 0, *, out: Tensor | None = None) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    return _into(out, Tensor.stack(tensors, dim=dim))


def _sequence_first(name: str) -> Callable[..., Any]:
    method = getattr(Tensor, name)

    def call(tensors: Any, *, out: Tensor | None = None) -> Tensor:
        first, *rest = list(tensors)
        return _into(out, method(first, *rest))

    call.__name__ = call.__qualname__ = name
    return call


def _variadic(name: str) -> Callable[..., Any]:
    method = getattr(Tensor, name)

    def call(*tensors: Any, **kwargs: Any) -> Any:
        first, *rest = _tensors(tensors)
        return method(first, *rest, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


hstack, vstack, dstack, column_stack, row_stack = map(
    _sequence_first, ("hstack", "vstack", "dstack", "column_stack", "row_stack")
)
block_diag, broadcast_tensors, cartesian_prod, meshgrid, atleast_1d, atleast_2d, atleast_3d = map(
    _variadic,
    ("block_diag", "broadcast_tensors", "cartesian_prod", "meshgrid", "atleast_1d", "atleast_2d", "atleast_3d"),
)


def _extreme(name: str, elementwise: str) -> Callable[..., Any]:
    def call(input: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        if args and isinstance(args[0], Tensor):  # torch.max(a, b): the elementwise maximum
            return _into(out, getattr(input, elementwise)(args[0]))
        if "other" in kwargs:
            return _into(out, getattr(input, elementwise)(kwargs["other"]))
        dim = args[0] if args else kwargs.pop("dim", None)
        keepdim = args[1] if len(args) > 1 else kwargs.pop("keepdim", False)
        method = getattr(Tensor, name)
        if dim is None:
            return _into(out, method(input))
        return _into(out, method(input, dim=dim, keepdim=keepdim))  # (values, indices), as torch's

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.{name}: of all elements, over `dim` as (values, indices), or elementwise with a tensor"
    return call


max, min = _extreme("max", "maximum"), _extreme("min", "minimum")


def _spread(name: str) -> Callable[..., Any]:
    """torch.std/var(_mean)(input, dim, unbiased, keepdim) and (input, unbiased): a bool after the input is
    `unbiased`, where the Tensor method's positional arguments are tinygrad's (axis, keepdim, correction)."""
    method = getattr(Tensor, name)

    def call(input: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        args_ = list(args)
        if args_ and isinstance(args_[0], builtins.bool):
            kwargs["unbiased"] = args_.pop(0)
        elif args_:
            kwargs["dim"] = args_.pop(0)
            if args_:
                kwargs["unbiased"] = args_.pop(0)
            if args_:
                kwargs["keepdim"] = args_.pop(0)
        if "unbiased" in kwargs:
            kwargs["correction"] = builtins.int(kwargs.pop("unbiased"))
        if "dim" in kwargs:
            kwargs["axis"] = kwargs.pop("dim")
        return _into(out, method(input, **kwargs))

    call.__name__ = call.__qualname__ = name
    return call


std, var, std_mean, var_mean = map(_spread, ("std", "var", "std_mean", "var_mean"))


def embedding(weight: Tensor, indices: Tensor, padding_idx: builtins.int = -1, *args: Any) -> Tensor:
    """torch.embedding(weight, indices): its arguments the other way round from F.embedding's."""
    return F.embedding(indices, weight, padding_idx=None if padding_idx == -1 else padding_idx)


def batch_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: builtins.bool,
    momentum: builtins.float,
    eps: builtins.float,
    cudnn_enabled: builtins.bool = True,
) -> Tensor:
    """torch.batch_norm: F.batch_norm with torch's top-level argument order."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def numel(input: Tensor) -> builtins.int:
    return input.numel()


# *** torch's top-level forms of nn.functional's ops with other arguments ***

_REDUCTIONS = ("none", "mean", "sum")  # torch's int reduction codes (at::Reduction)


def _reduction(r: Any) -> str:
    return _REDUCTIONS[r] if isinstance(r, builtins.int) else r


def kl_div(input: Tensor, target: Tensor, reduction: Any = 1, *, log_target: builtins.bool = False) -> Tensor:
    return F.kl_div(input, target, reduction=_reduction(reduction), log_target=log_target)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     pos_weight: Tensor | None = None, reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.binary_cross_entropy_with_logits(input, target, weight, reduction=_reduction(reduction),
                                              pos_weight=pos_weight)  # fmt: skip


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: builtins.float = 0.0,
                        reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: builtins.float = 1.0, reduction: Any = 1) -> Tensor:
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: builtins.float = 0.0,
                          reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.cosine_embedding_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: builtins.float = 1.0,
                        p: builtins.float = 2.0, eps: builtins.float = 1e-6, swap: builtins.bool = False,
                        reduction: Any = 1) -> Tensor:  # fmt: skip
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction=_reduction(reduction))


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: builtins.bool, full: builtins.bool,
                     eps: builtins.float, reduction: Any) -> Tensor:  # fmt: skip
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_reduction(reduction))


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any, blank: builtins.int = 0,
             reduction: Any = 1, zero_infinity: builtins.bool = False) -> Tensor:  # fmt: skip
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, _reduction(reduction), zero_infinity)


def instance_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                  running_var: Tensor | None, use_input_stats: builtins.bool, momentum: builtins.float,
                  eps: builtins.float, cudnn_enabled: builtins.bool = True) -> Tensor:  # fmt: skip
    """torch.instance_norm: F.instance_norm with torch's top-level argument order."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def constant_pad_nd(input: Tensor, pad: Sequence[builtins.int], value: Any = 0) -> Tensor:
    return F.pad(input, pad, value=value)


def _in_place(make: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def call(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return input.assign(make(input, *args, **kwargs))

    call.__name__ = call.__qualname__ = make.__name__ + "_"
    return call


dropout_, alpha_dropout_, feature_alpha_dropout_, rrelu_ = map(
    _in_place, (F.dropout, F.alpha_dropout, F.feature_alpha_dropout, F.rrelu)
)
celu_, selu_, threshold_, max_pool1d_with_indices = F.celu_, F.selu_, F.threshold_, F.max_pool1d_with_indices
native_channel_shuffle = F.channel_shuffle

# *** copies of views, and the "unsafe" splits (torch's names for the same values: lazygrad never aliases here) ***


def _copy_of(name: str) -> Callable[..., Any]:
    view = getattr(Tensor, name)

    def call(input: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        got = view(input, *args, **kwargs)
        return _into(out, tuple(t.clone() for t in got) if isinstance(got, (tuple, list)) else got.clone())

    call.__name__ = call.__qualname__ = name + "_copy"
    return call


def _slice(input: Tensor, dim: builtins.int = 0, start: Any = None, end: Any = None, step: builtins.int = 1) -> Tensor:
    index = [builtins.slice(None)] * input.ndim
    index[dim] = builtins.slice(start, end, step)
    return input[tuple(index)]


for _name in """as_strided detach diagonal expand permute select split split_with_sizes squeeze t transpose unbind
unfold unsqueeze view""".split():
    globals()[_name + "_copy"] = _copy_of(_name)
del _name
alias_copy = lambda input: input.clone()  # noqa: E731
slice_copy = lambda input, *args, **kwargs: _slice(input, *args, **kwargs).clone()  # noqa: E731
unsafe_split, unsafe_chunk, unsafe_split_with_sizes = _method("split"), _method("chunk"), _method("split_with_sizes")

# *** real numbers as torch's complex-aware functions see them ***


def real(input: Tensor) -> Tensor:
    """The real part: a real tensor itself."""
    return input


def imag(input: Tensor) -> Tensor:
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


def angle(input: Tensor, *, out: Tensor | None = None) -> Tensor:
    """0 for x >= 0, pi for x < 0, NaN at NaN; float for integer input (torch.angle of a real tensor)."""
    x = input if input.is_floating_point() else input.float()
    return _into(out, (x < 0).where(math.pi, 0.0).cast(x.dtype).where(~x.isnan(), x).detach())


is_conj = is_neg = lambda input: False  # noqa: E731
conj_physical = _method("conj")


# *** dtypes: promotion and casting as torch's ***


def _category(d: DType) -> builtins.int:
    return 0 if d == dtypes.bool else 2 if dtypes.is_float(d) else 1


def promote_types(type1: Any, type2: Any) -> DType:
    return least_upper_dtype(to_dtype(type1), to_dtype(type2))


def result_type(tensor1: Any, tensor2: Any) -> DType:
    """The dtype torch computes tensor1 op tensor2 in: tensors with dimensions decide, then 0-d tensors, then Python
    numbers, each only where its kind (bool < integer < floating) is higher than those before."""
    groups: list[list[DType]] = [[], [], []]
    for x in (tensor1, tensor2):
        if isinstance(x, Tensor):
            groups[0 if x.ndim else 1].append(x.dtype)
        elif isinstance(x, builtins.bool):
            groups[2].append(dtypes.bool)
        elif isinstance(x, builtins.int):
            groups[2].append(dtypes.int64)
        elif isinstance(x, builtins.float):
            groups[2].append(dtypes.default_float)
        else:
            raise TypeError(f"result_type(): expected a Tensor or a number, got {type(x).__name__}")
    result: DType | None = None
    for g in groups:
        if not g:
            continue
        here = functools.reduce(least_upper_dtype, g)
        if result is None or _category(here) > _category(result):
            result = (
                here
                if result is None or g is not groups[2]
                else (dtypes.int64 if _category(here) == 1 else dtypes.default_float)
            )
    assert result is not None
    return result


def can_cast(from_: Any, to: Any) -> builtins.bool:
    """Whether a value of dtype from_ may be cast to `to` by a promoting op: not to a lower kind (float to integer,
    integer or float to bool)."""
    return _category(to_dtype(from_)) <= _category(to_dtype(to))


_LEGACY_NAMES = {dtypes.float32: "FloatTensor", dtypes.float64: "DoubleTensor", dtypes.float16: "HalfTensor",
                 dtypes.bfloat16: "BFloat16Tensor", dtypes.int64: "LongTensor", dtypes.int32: "IntTensor",
                 dtypes.int16: "ShortTensor", dtypes.int8: "CharTensor", dtypes.uint8: "ByteTensor",
                 dtypes.bool: "BoolTensor"}  # fmt: skip


def typename(obj: Any) -> str:
    if isinstance(obj, Tensor):
        return f"torch.{_LEGACY_NAMES.get(obj.dtype, 'Tensor')}"
    module = type(obj).__module__
    return type(obj).__qualname__ if module == "builtins" else f"{module}.{type(obj).__qualname__}"


# *** process-wide settings ***


def get_default_device() -> DeviceName:
    return DeviceName(Device.DEFAULT)


def set_default_device(device: Any) -> None:
    """The device new tensors go to (None: the CPU); lazygrad's Device.DEFAULT."""
    Device.DEFAULT = Device.canonicalize(str(device) if device is not None else "CPU")


def set_default_tensor_type(t: Any) -> None:
    """torch.set_default_tensor_type(torch.DoubleTensor) (or its name): the default floating dtype."""
    name = t if isinstance(t, str) else getattr(t, "__name__", "")
    found = [d for d, n in _LEGACY_NAMES.items() if name.endswith(n) and dtypes.is_float(d)]
    if not found:
        raise TypeError(f"invalid type: {t!r}; expected a floating point tensor type")
    set_default_dtype(found[0])


_warn_always = [False]


def set_warn_always(b: builtins.bool) -> None:
    _warn_always[0] = builtins.bool(b)


def is_warn_always_enabled() -> builtins.bool:
    return _warn_always[0]


def cond(pred: Any, true_fn: Callable, false_fn: Callable, operands: Any = ()) -> Any:
    """torch.cond: true_fn(*operands) if pred else false_fn(*operands), pred read once."""
    return (
        true_fn(*operands) if builtins.bool(pred.item() if isinstance(pred, Tensor) else pred) else false_fn(*operands)
    )


def while_loop(cond_fn: Callable, body_fn: Callable, carried_inputs: Any) -> Any:
    """torch.while_loop: body_fn applied to the carried values while cond_fn of them is true."""
    carried = tuple(carried_inputs)
    while builtins.bool(c.item() if isinstance(c := cond_fn(*carried), Tensor) else c):
        out = body_fn(*carried)
        carried = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return carried


# *** windows (torch.hann_window and friends): periodic by default, as torch's ***


def _window(
    length: builtins.int, periodic: builtins.bool, dtype: Any, device: Any, requires_grad: builtins.bool, of: Callable
) -> Tensor:
    """of(k, n) over k = 0 .. length - 1, n the period (length, or length - 1 for a symmetric window)."""
    d = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if length == 1:
        out = Tensor.ones(1, dtype=d, device=device)
    else:
        out = of(Tensor.arange(length, dtype=d, device=device), length if periodic else length - 1)
    return out.requires_grad_(True) if requires_grad else out


def hann_window(window_length: builtins.int, periodic: builtins.bool = True, *, dtype: Any = None, device: Any = None,
                requires_grad: builtins.bool = False) -> Tensor:  # fmt: skip
    return hamming_window(window_length, periodic, 0.5, 0.5, dtype=dtype, device=device, requires_grad=requires_grad)


def hamming_window(window_length: builtins.int, periodic: builtins.bool = True, alpha: builtins.float = 0.54,
                   beta: builtins.float = 0.46, *, dtype: Any = None, device: Any = None,
                   requires_grad: builtins.bool = False) -> Tensor:  # fmt: skip
    return _window(window_length, periodic, dtype, device, requires_grad,
                   lambda k, n: alpha - beta * (k * (2 * math.pi / n)).cos())  # fmt: skip


def blackman_window(window_length: builtins.int, periodic: builtins.bool = True, *, dtype: Any = None,
                    device: Any = None, requires_grad: builtins.bool = False) -> Tensor:  # fmt: skip
    def blackman(k: Tensor, n: builtins.int) -> Tensor:
        return 0.42 - 0.5 * (k * (2 * math.pi / n)).cos() + 0.08 * (k * (4 * math.pi / n)).cos()

    return _window(window_length, periodic, dtype, device, requires_grad, blackman)


def bartlett_window(window_length: builtins.int, periodic: builtins.bool = True, *, dtype: Any = None,
                    device: Any = None, requires_grad: builtins.bool = False) -> Tensor:  # fmt: skip
    return _window(window_length, periodic, dtype, device, requires_grad, lambda k, n: 1 - (k * (2 / n) - 1).abs())


def kaiser_window(window_length: builtins.int, periodic: builtins.bool = True, beta: builtins.float = 12.0, *,
                  dtype: Any = None, device: Any = None, requires_grad: builtins.bool = False) -> Tensor:  # fmt: skip
    def kaiser(k: Tensor, n: builtins.int) -> Tensor:
        return (beta * (1 - ((k - n / 2) / (n / 2)).square()).clamp(0).sqrt()).i0() / Tensor(beta).i0().item()

    return _window(window_length, periodic, dtype, device, requires_grad, kaiser)


# *** more creation forms ***


def fill(input: Tensor, value: Any) -> Tensor:
    """A tensor like input, every element `value` (a number or a one-element tensor)."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise RuntimeError(
                f"fill only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions."
            )
        return value.reshape(()).cast(input.dtype).expand(input.shape).contiguous()
    return input.full_like(value)


def randint_like(input: Tensor, low: builtins.int = 0, high: builtins.int | None = None, *, dtype: Any = None,
                 device: Any = None, requires_grad: builtins.bool = False, **kwargs: Any) -> Tensor:  # fmt: skip
    """torch.randint_like(input, high) or (input, low, high): input's shape, its dtype unless dtype= says (a float
    dtype holds the integers drawn)."""
    if high is None:
        low, high = 0, low
    d = to_dtype(dtype) if dtype is not None else input.dtype
    drawn = Tensor.randint(*input.shape, low=low, high=high, dtype=dtypes.int64, device=device or input.device)
    return drawn.cast(d) if d != dtypes.int64 else drawn


def empty_strided(size: Sequence[builtins.int], stride: Sequence[builtins.int], *, dtype: Any = None,
                  device: Any = None, requires_grad: builtins.bool = False, **kwargs: Any) -> Tensor:  # fmt: skip
    """An uninitialized tensor of `size` (lazygrad's tensors are laid out contiguously: `stride` is not kept)."""
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape: {len(stride)} strides for {len(size)} dims")
    return empty(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def frombuffer(buffer: Any, *, dtype: Any, count: builtins.int = -1, offset: builtins.int = 0,
               requires_grad: builtins.bool = False) -> Tensor:  # fmt: skip
    """A 1-D tensor of the buffer's bytes read as `dtype`: a copy (torch shares the buffer's memory)."""
    d = to_dtype(dtype)
    data = memoryview(buffer).cast("B")[offset:]
    n = len(data) // d.itemsize if count < 0 else count
    if n * d.itemsize > len(data) or (count < 0 and len(data) % d.itemsize):
        raise ValueError(f"buffer length ({len(data)} bytes after offset {offset}) is not a multiple of, or too short "
                         f"for, {n if count >= 0 else 'whole'} elements of {d.itemsize} bytes")  # fmt: skip
    out = Tensor(bytes(data[: n * d.itemsize]), dtype=dtypes.uint8).bitcast(d) if n else Tensor.empty(0, dtype=d)
    return out.requires_grad_(True) if requires_grad else out


def histogram(input: Tensor, bins: Any = 100, *, range: Any = None, weight: Tensor | None = None,
              density: builtins.bool = False) -> Any:  # fmt: skip
    """(hist, bin_edges): counts (or weights' sums) of input's elements in each bin, [e_i, e_i+1) and the last bin
    closed; `bins` a count of equal bins over `range` (the data's min to max by default) or the edges."""
    if not input.is_floating_point():
        raise RuntimeError(f"torch.histogram: input tensor and bins tensors should have the same dtype, but got input "
                           f"{input.dtype}")  # fmt: skip
    x = input.reshape(-1)
    w = weight.reshape(-1).cast(x.dtype) if weight is not None else None
    if isinstance(bins, Tensor):
        edges = bins.cast(x.dtype)
        xs, count = x.unsqueeze(1), edges.shape[0] - 1
        last = (Tensor.arange(count) == count - 1) & (xs == edges[-1:])  # the last bin is closed
        inside = (xs >= edges[:-1]) & (xs < edges[1:]) | last
    else:
        if range is not None:
            lo, hi = (
                Tensor([builtins.float(range[0])], dtype=x.dtype),
                Tensor([builtins.float(range[1])], dtype=x.dtype),
            )
        elif x.numel():
            lo, hi = x.min().reshape(1), x.max().reshape(1)
        else:
            lo, hi = Tensor([0.0], dtype=x.dtype), Tensor([0.0], dtype=x.dtype)
        lo, hi = (lo == hi).where(lo - 0.5, lo), (lo == hi).where(hi + 0.5, hi)  # one value: a bin around it
        edges = lo + (hi - lo) * (Tensor.arange(bins + 1, dtype=x.dtype) / bins)
        at = ((x - lo) * bins / (hi - lo)).floor().clamp(-1, bins)
        at = (x == hi).where(bins - 1, at)  # the last edge falls in the last bin
        inside = at.unsqueeze(1) == Tensor.arange(bins, dtype=x.dtype)
    counts = inside.where(1.0 if w is None else w.unsqueeze(1), 0.0).cast(x.dtype).sum(0)
    if density:
        counts = counts / (counts.sum() * (edges[1:] - edges[:-1]))
    return return_types.histogram(counts, edges)


# *** the process: threads, saving, compiling, determinism ***


def get_num_threads() -> builtins.int:
    from lazygrad.device import Device

    return Device["CPU"].threads  # type: ignore[attr-defined]


def set_num_threads(n: builtins.int) -> None:
    """torch.set_num_threads: every later CPU kernel runs on at most `n` threads (THREADS fixes the count compiled in;
    this caps the team each launch gets)."""
    from lazygrad.runtime.threads_cpu import set_fixed_team

    if n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n}")
    set_fixed_team(n if n < get_num_threads() else 0)


def save(obj: Any, f: Any, **kwargs: Any) -> None:
    """torch.save of a state dict (or any nest of tensors and plain data) in torch's zip format, to a path or a file
    object open for writing."""
    nn.state.torch_save(obj, f)


def load(f: Any, map_location: Any = None, weights_only: Any = None, **kwargs: Any) -> Any:
    """torch.load of a torch.save file (a path or a file object open for reading): plain data and tensors, as torch's
    weights_only=True."""
    if not hasattr(f, "read"):
        return nn.state.torch_load(f)
    import os
    import tempfile

    # the loader maps a file: a file object's bytes go through one (tensors read later stay mapped after the unlink)
    with tempfile.NamedTemporaryFile(suffix=".pt", delete=False) as tmp:
        tmp.write(f.read())
    try:
        return nn.state.torch_load(tmp.name)
    finally:
        os.unlink(tmp.name)


def compile(model: Any = None, **kwargs: Any) -> Any:
    """torch.compile: the model or function as it is. lazygrad compiles every realize (fused kernels, cached); wrap a
    step function in TinyJit to replay it without Python."""
    return model if model is not None else (lambda m: m)


def _as_is(fn: Any = None, *args: Any, **kwargs: Any) -> Any:
    """A decorator or call that returns its function or module as it is (also used as @x(...) with options)."""
    return fn if fn is not None and (callable(fn) or isinstance(fn, Module)) else (lambda f: f)


# torch.jit: TorchScript's script / trace compile what they are given into a program that computes the same; here the
# function or module itself is that program (lazygrad compiles its kernels on every realize; TinyJit replays them)
jit = types.SimpleNamespace(
    script=_as_is, trace=_as_is, ignore=_as_is, unused=_as_is, export=_as_is, is_scripting=lambda: False,
    is_tracing=lambda: False, Final=Any,
)  # fmt: skip
compiler = types.SimpleNamespace(disable=_as_is, is_compiling=lambda: False, is_dynamo_compiling=lambda: False)


def use_deterministic_algorithms(mode: builtins.bool, *, warn_only: builtins.bool = False) -> None:
    """Accepted: lazygrad's kernels are deterministic (no atomics; a reduction's order is fixed by its kernel)."""


def are_deterministic_algorithms_enabled() -> builtins.bool:
    return True


def set_float32_matmul_precision(precision: str) -> None:
    """Accepted: float32 matmuls accumulate in float32 (no TF32 on the CPU)."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision: {precision!r}")


def get_float32_matmul_precision() -> str:
    return "highest"


def set_printoptions(**kwargs: Any) -> None:
    """Accepted: a tensor prints its graph while lazy and its values through .numpy()/.tolist()."""


# *** submodules under torch's names ***

cuda = types.ModuleType("lazygrad.cuda", "torch.cuda's questions, answered for lazygrad's CUDA device")


def _cuda_available() -> builtins.bool:
    from lazygrad.device import Device

    try:
        Device["CUDA"]
        return True
    except Exception:
        return False


cuda.is_available = _cuda_available  # type: ignore[attr-defined]
cuda.device_count = lambda: builtins.int(_cuda_available())  # type: ignore[attr-defined]
cuda.manual_seed = cuda.manual_seed_all = Tensor.manual_seed  # type: ignore[attr-defined]
cuda.synchronize = lambda device=None: None  # type: ignore[attr-defined]
cuda.empty_cache = lambda: None  # type: ignore[attr-defined]

accelerator = types.SimpleNamespace(
    is_available=_cuda_available,
    current_accelerator=lambda: DeviceName("cuda") if _cuda_available() else None,
    device_count=cuda.device_count,  # type: ignore[attr-defined]
)
backends = types.SimpleNamespace(
    cudnn=types.SimpleNamespace(benchmark=False, deterministic=False, enabled=True, allow_tf32=False),
    cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)),
    mps=types.SimpleNamespace(is_available=lambda: False),
)


class return_types:  # noqa: N801  (torch's name)
    max = min = sort = topk = kthvalue = median = mode = cummax = cummin = ValuesIndices
    triangular_solve = collections.namedtuple("triangular_solve", ["solution", "cloned_coefficient"])
    histogram = collections.namedtuple("histogram", ["hist", "bin_edges"])


class _LegacyType(str):
    """torch.FloatTensor, torch.LongTensor, ...: called, the old constructors (data, or a shape of zeros); as a name
    (a str: "torch.FloatTensor"), the type that x.type(torch.FloatTensor) casts to."""

    dtype: DType

    def __new__(cls, name: str, d: DType) -> _LegacyType:
        out = super().__new__(cls, f"torch.{name}")
        out.dtype = d
        return out

    def __call__(self, *args: Any) -> Tensor:
        if args and builtins.all(isinstance(a, builtins.int) for a in args):
            return Tensor.zeros(*args, dtype=self.dtype)
        return Tensor(args[0] if args else [], dtype=self.dtype)


FloatTensor, DoubleTensor = _LegacyType("FloatTensor", dtypes.float32), _LegacyType("DoubleTensor", dtypes.float64)
HalfTensor, LongTensor = _LegacyType("HalfTensor", dtypes.float16), _LegacyType("LongTensor", dtypes.int64)
IntTensor, ShortTensor = _LegacyType("IntTensor", dtypes.int32), _LegacyType("ShortTensor", dtypes.int16)
ByteTensor, CharTensor = _LegacyType("ByteTensor", dtypes.uint8), _LegacyType("CharTensor", dtypes.int8)
BoolTensor = _LegacyType("BoolTensor", dtypes.bool)

# the submodules as torch's: `torch.optim.Adam`, `import lazygrad.torch.nn.functional as F`, `from
# lazygrad.torch.utils.data import DataLoader` (the import statement finds each dotted name in sys.modules)
from lazygrad import amp, autograd, distributions, func, linalg, utils  # noqa: E402
from lazygrad.nn import init as _init  # noqa: E402
from lazygrad.utils import checkpoint as _checkpoint  # noqa: E402
from lazygrad.utils import data as _data  # noqa: E402

autocast = amp.autocast  # torch.autocast(device_type, dtype=...)


def _autocast_on(device_type: str) -> Callable[..., Any]:
    """torch.cuda.amp.autocast / torch.cpu.amp.autocast: autocast with the device type given by the module."""

    def make(enabled: builtins.bool = True, dtype: Any = None, cache_enabled: builtins.bool = True) -> amp.autocast:
        return amp.autocast(device_type, dtype=dtype, enabled=enabled)

    return make


cuda.amp = types.SimpleNamespace(autocast=_autocast_on("cuda"), GradScaler=amp.GradScaler)  # type: ignore[attr-defined]
cpu = types.SimpleNamespace(amp=types.SimpleNamespace(autocast=_autocast_on("cpu"), GradScaler=amp.GradScaler))
vmap = func.vmap
GradScaler = amp.GradScaler
is_anomaly_enabled = is_anomaly_check_nan_enabled = lambda: False  # noqa: E731  (see autograd.detect_anomaly)
set_anomaly_enabled = autograd.set_detect_anomaly


def chain_matmul(*matrices: Tensor, out: Tensor | None = None) -> Tensor:
    return _into(out, linalg.multi_dot(_tensors(matrices)))


def frobenius_norm(input: Tensor, dim: Any = (-2, -1), keepdim: builtins.bool = False) -> Tensor:
    return input.square().sum(tuple(dim) if isinstance(dim, (tuple, list)) else dim, keepdim=keepdim).sqrt()


def nuclear_norm(input: Tensor, dim: Any = (-2, -1), keepdim: Any = False) -> Tensor:
    if isinstance(dim, builtins.bool):  # nuclear_norm(input, keepdim)
        dim, keepdim = (-2, -1), dim
    return linalg.matrix_norm(input, "nuc", tuple(dim), keepdim)


def lu_solve(b: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:  # noqa: N803 (torch's names)
    return linalg.lu_solve(LU_data, LU_pivots, b)


def triangular_solve(b: Tensor, A: Tensor, upper: builtins.bool = True, transpose: builtins.bool = False,  # noqa: N803
                     unitriangular: builtins.bool = False) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(the solution X of A X = b, or of A^T X = b with transpose; a copy of A), as torch's deprecated form."""
    a = A.transpose(-2, -1) if transpose else A
    solution = linalg.solve_triangular(a, b, upper=upper != transpose, unitriangular=unitriangular)
    return return_types.triangular_solve(solution, A.clone())


for _alias, _module in {
    "nn": nn,
    "nn.functional": F,
    "nn.init": _init,
    "nn.utils": nn.utils,
    "nn.utils.rnn": nn.utils.rnn,
    "nn.utils.parametrize": nn.utils.parametrize,
    "nn.utils.stateless": nn.utils.stateless,
    "func": func,
    "nn.utils.parametrizations": nn.utils.parametrizations,
    "optim": optim,
    "optim.lr_scheduler": optim.lr_scheduler,
    "utils": utils,
    "utils.data": _data,
    "utils.checkpoint": _checkpoint,
    "autograd": autograd,
    "autograd.functional": autograd.functional,
    "amp": amp,
    "distributions": distributions,
    "linalg": linalg,
    "cuda": cuda,
}.items():
    sys.modules[f"{__name__}.{_alias}"] = _module
del _alias, _module
