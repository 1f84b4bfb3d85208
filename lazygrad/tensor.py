"""The Tensor: a lazy, PyTorch-style array. Each Tensor holds one UOp; nothing computes until it is realized."""

from __future__ import annotations

import contextlib
import functools
import math
import struct
import weakref
from typing import Any, Callable, Sequence

from lazygrad.device import Buffer, Device
from lazygrad.dtype import (
    DType,
    dtypes,
    float_to_bf16,
    bf16_to_float,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
)
from lazygrad.helpers import argfix, ceildiv, flatten, make_tuple, prod
from lazygrad.uop.ops import GroupOp, Ops, UOp, pretty_print

# computed nodes that have been realized -> the buffer view that holds their value; consulted by the scheduler
_realized: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def _flatten_list(data: Any) -> tuple[list[Any], tuple[int, ...]]:
    """Values and shape of a nested list; ragged nesting is an error naming the lengths."""
    if not isinstance(data, (list, tuple)):
        return [data], ()
    if len(data) == 0:
        return [], (0,)
    parts = [_flatten_list(x) for x in data]
    shapes = {p[1] for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"ragged nested list: elements have shapes {sorted(shapes, key=len)}; every element must have the same shape")
    inner = shapes.pop()
    return [v for p in parts for v in p[0]], (len(data), *inner)


def _pack(values: list[Any], dtype: DType) -> bytes:
    if dtype == dtypes.bfloat16:
        return struct.pack(f"{len(values)}H", *[float_to_bf16(float(v)) for v in values])
    converted = [dtypes.as_const(v, dtype) for v in values]
    return struct.pack(f"{len(values)}{dtype.fmt}", *converted)


def _np_to_dtype(np_dtype: Any) -> DType:
    try:
        return to_dtype(np_dtype.name)
    except TypeError:
        raise TypeError(f"numpy dtype {np_dtype} has no lazygrad equivalent") from None


def _axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"axis {axis} repeats a dimension")
    return tuple(sorted(out)) if ndim else ()


class Tensor:
    """A lazy n-dimensional array on a device, with PyTorch/tinygrad names."""

    training: bool = False
    _grad_disabled: int = 0  # depth of nested no_grad blocks
    _seed: int = 0
    _rng_counter: int = 0
    _graph_freed: weakref.WeakSet = weakref.WeakSet()

    __slots__ = ("uop", "_requires_grad", "grad", "__weakref__")

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ):
        dtype = to_dtype(dtype) if dtype is not None else None
        device = Device.canonicalize(device)
        self.grad: Tensor | None = None
        self._requires_grad: bool | None = None
        if isinstance(data, UOp):
            # a bound variable becomes a 0-d tensor on a device: its value is passed to kernels at launch
            self.uop = data if data.op is not Ops.BIND or data.device else data.replace(src=(*data.src, UOp(Ops.DEVICE, arg=device)))
        elif isinstance(data, Tensor):
            self.uop = data.uop
        elif isinstance(data, (bool, int, float)):
            dt = dtype or dtypes.from_py(data)
            self.uop = Tensor._const_uop(data, dt, device)
        elif isinstance(data, (list, tuple)):
            values, shape = _flatten_list(data)
            for v in values:
                if not isinstance(v, (bool, int, float)):
                    raise TypeError(f"cannot make a Tensor from a list containing {type(v).__name__} ({v!r})")
            dt = dtype or (dtypes.from_py(values) if values else dtypes.default_float)
            buf = Buffer(device, len(values), dt)
            buf.copyin(memoryview(_pack(values, dt)))
            self.uop = UOp.buffer_view(buf, shape)
        elif isinstance(data, (bytes, bytearray, memoryview)):
            dt = dtype or dtypes.uint8
            raw = memoryview(bytes(data))
            if raw.nbytes % dt.itemsize:
                raise ValueError(f"{raw.nbytes} bytes do not divide into {dt} elements of {dt.itemsize} bytes")
            buf = Buffer(device, raw.nbytes // dt.itemsize, dt)
            buf.copyin(raw)
            self.uop = UOp.buffer_view(buf, (buf.size,))
        elif type(data).__module__ == "numpy" and hasattr(data, "dtype"):
            self.uop = Tensor._from_numpy(data, device, dtype)
            return
        else:
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
        if dtype is not None and self.dtype != dtype:
            self.uop = self.cast(dtype).uop
        if requires_grad is not None:
            self.requires_grad = requires_grad
        elif Tensor._grad_disabled and isinstance(data, UOp) and data.op not in (Ops.BUFFER, Ops.DETACH) and _grad_leaves:
            # made under no_grad: no gradient may flow back through it later
            self.uop = UOp(Ops.DETACH, self.uop.dtype, (self.uop,))

    # *** autograd ***

    @property
    def requires_grad(self) -> bool:
        """As in torch: set on leaves (parameters); a computed tensor requires grad if a leaf it depends on does."""
        if self._requires_grad is not None:
            return self._requires_grad
        if Tensor._grad_disabled or not _grad_leaves:
            return False
        graph = self.uop.toposort
        return any(t.uop in graph for t in _grad_leaves if t is not self)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not dtypes.is_float(self.dtype):
            raise TypeError(f"only floating point tensors can require gradients, not {self.dtype}")
        self._requires_grad = value
        if value:
            _grad_leaves.add(self)
        else:
            _grad_leaves.discard(self)

    def requires_grad_(self, value: bool = True) -> Tensor:
        self.requires_grad = value
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, as lazy tensors (zeros where self does not depend on a target)."""
        from lazygrad.gradient import compute_gradient

        seed = self._seed_gradient(gradient)
        grads = compute_gradient(self.uop, seed, {t.uop for t in targets})
        return [grads[t.uop] if t.uop in grads else t.zeros_like() for t in targets]

    def _seed_gradient(self, gradient: Tensor | None) -> Tensor:
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"cannot differentiate a {self.dtype} tensor; only floating point results have gradients")
        if gradient is None:
            if self.numel() != 1:
                raise ValueError(f"backward of a non-scalar (shape {self.shape}) needs an explicit gradient of that shape")
            return Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(f"gradient shape {gradient.shape} does not match the tensor's shape {self.shape}")
        return gradient

    def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
        """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad and that self depends on."""
        from lazygrad.gradient import compute_gradient

        if self in Tensor._graph_freed:
            raise RuntimeError("backward through this graph a second time: its gradients were already taken; "
                               "pass retain_graph=True to the first backward() to allow it")
        seed = self._seed_gradient(gradient)
        graph = self.uop.toposort
        leaves = [t for t in list(_grad_leaves) if t.uop in graph]
        if not leaves:
            raise RuntimeError("backward: the tensor does not depend on any tensor with requires_grad=True")
        grads = compute_gradient(self.uop, seed, {t.uop for t in leaves})
        for t in leaves:
            if (g := grads.get(t.uop)) is not None:
                t.grad = g if t.grad is None else t.grad + g
        if not retain_graph:
            Tensor._graph_freed.add(self)
        return self

    @staticmethod
    def no_grad() -> _GradMode:
        """Context manager and decorator: tensors made inside never pass gradients back."""
        return _GradMode()

    @staticmethod
    def train(mode: bool = True) -> _TrainMode:
        """Context manager and decorator setting `Tensor.training` (dropout, batchnorm statistics)."""
        return _TrainMode(mode)

    def assign(self, x: Any) -> Tensor:
        """Write x into this tensor's memory (in place, lazily: it happens at the next realize)."""
        x = x if isinstance(x, Tensor) else Tensor.full(self.shape, x, dtype=self.dtype, device=self.device)
        if x.shape != self.shape or x.dtype != self.dtype or x.device != self.device:
            raise ValueError(f"assign needs the same shape, dtype and device: target {self.shape} {self.dtype} {self.device}, "
                             f"value {x.shape} {x.dtype} {x.device}")
        if self._plain_buffer() is None:
            if self.uop.is_realized:
                raise NotImplementedError("assign into a view of a buffer (a slice, transpose, ...) is not supported yet")
            self.uop = x.uop  # nothing stored yet: the tensor simply becomes x
        else:
            if _reads_shifted(x.uop, self.uop.base):
                x = x.contiguous()  # the value reads this memory at other positions: compute it elsewhere first
            self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop))
        return self

    @staticmethod
    def _from_numpy(arr: Any, device: str, dtype: DType | None) -> UOp:
        import numpy as np

        arr = np.asarray(arr)
        dt = _np_to_dtype(arr.dtype)
        shape = tuple(int(s) for s in arr.shape)
        if device == "CPU" and arr.flags.c_contiguous and arr.size > 0 and arr.ctypes.data % dt.itemsize == 0:
            # zero-copy: the buffer points into the array (kept alive by the buffer)
            buf = Buffer(device, int(arr.size), dt, external=arr, external_ptr=arr.ctypes.data)
        else:
            buf = Buffer(device, int(arr.size), dt)
            buf.copyin(memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)))
        uop = UOp.buffer_view(buf, shape)
        return uop if dtype is None or dtype == dt else UOp(Ops.CAST, dtype, (uop,))

    @staticmethod
    def _const_uop(value: Any, dtype: DType, device: str) -> UOp:
        return UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(value, dtype))

    # *** properties ***

    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def device(self) -> str:
        return self.uop.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def size(self, dim: int | None = None) -> int | tuple[int, ...]:
        return self.shape if dim is None else self.shape[_axes(dim, self.ndim)[0]]

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "realized" if self.uop.is_realized else "lazy"
        graph = pretty_print(self.uop, max_lines=12).replace("\n", "\n  ")
        return f"<Tensor shape={self.shape} dtype={self.dtype} device={self.device} {state}\n  {graph}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    # *** realizing ***

    def schedule_with_vars(self, *lst: Tensor) -> tuple[list, dict[UOp, int]]:
        """The kernels that compute this tensor (and `lst`), and the variable values they run with."""
        from lazygrad.schedule.kernelize import create_schedule

        tensors = (self, *lst)
        schedule, becomes, var_vals = create_schedule([t.uop for t in tensors], _realized)
        for node, view in becomes.items():
            _realized[node] = view
        for t in tensors:
            # a node realized by an earlier schedule (the same graph built twice is the same UOp) is not in `becomes`
            view = becomes.get(t.uop.base, _realized.get(t.uop.base))
            if view is not None:
                t.uop = t.uop.substitute({t.uop.base: view})
        return schedule, var_vals

    def schedule(self, *lst: Tensor) -> list:
        return self.schedule_with_vars(*lst)[0]

    def realize(self, *lst: Tensor) -> Tensor:
        """Compute this tensor (and those in `lst`, in the same schedule) into memory. `Tensor.realize(a, b)` works too."""
        from lazygrad.engine.realize import run_schedule

        run_schedule(*self.schedule_with_vars(*lst))
        return self

    def _contiguous_buffer(self) -> Buffer:
        t = self if self._plain_buffer() is not None else self.contiguous()
        t.realize()
        buf = t._plain_buffer()
        assert buf is not None, "a realized contiguous tensor is backed by a whole buffer"
        return buf

    def _plain_buffer(self) -> Buffer | None:
        u = self.uop
        if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER:
            u = u.src[0]
        return u.arg if u.op is Ops.BUFFER else None

    def data(self) -> memoryview:
        """The raw bytes of the tensor in row-major order."""
        return self._contiguous_buffer().as_bytes()

    def _python_values(self) -> list[Any]:
        t = self.cast(dtypes.float32) if self.dtype == dtypes.bfloat16 else self
        raw = t.data()
        if t.numel() == 0:
            return []
        # struct, not memoryview.cast: cast has no float16 ("e") format
        return list(struct.unpack(f"{t.numel()}{t.dtype.fmt}", raw))

    def tolist(self) -> Any:
        values = self._python_values()
        if self.dtype == dtypes.bfloat16:
            values = [bf16_to_float(float_to_bf16(v)) for v in values]

        def nest(vals: list[Any], shape: tuple[int, ...]) -> Any:
            if not shape:
                return vals[0]
            if len(shape) == 1:
                return vals
            step = prod(shape[1:])
            return [nest(vals[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]

        return nest(values, self.shape)

    def item(self) -> Any:
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self._python_values()[0]

    def numpy(self) -> Any:
        import numpy as np

        if self.dtype == dtypes.bfloat16:
            return self.float().numpy()
        np_dtype = np.dtype(self.dtype.fmt if self.dtype != dtypes.bool else np.bool_)
        if self.numel() == 0:
            return np.zeros(self.shape, dtype=np_dtype)
        return np.frombuffer(self.data(), dtype=np_dtype).reshape(self.shape).copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    # *** creation ***

    @staticmethod
    def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
        out = argfix(*shape)
        for s in out:
            if not isinstance(s, int) or isinstance(s, bool):
                raise TypeError(f"shape entries must be ints, got {out}")
            if s < 0:
                raise ValueError(f"negative dimension in shape {out}")
        return out

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        shape_ = Tensor._shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return Tensor(UOp.buffer_view(Buffer(Device.canonicalize(device), prod(shape_), dt), shape_))

    @staticmethod
    def full(shape: Any, fill_value: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        shape_ = Tensor._shape_arg((shape,) if isinstance(shape, int) else tuple(shape))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        c = Tensor(Tensor._const_uop(fill_value, dt, Device.canonicalize(device)))
        return c.reshape((1,) * len(shape_)).expand(shape_)

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(argfix(*shape), 0.0, dtype=dtype or dtypes.default_float, device=device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(argfix(*shape), 1.0, dtype=dtype or dtypes.default_float, device=device)

    def full_like(self, fill_value: Any, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=self.device)

    def zeros_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(1, dtype)

    def empty_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.empty(self.shape, dtype=dtype or self.dtype, device=self.device)

    @staticmethod
    def _iota(n: int, device: str | None = None) -> Tensor:
        return Tensor(UOp(Ops.IOTA, dtypes.int32, (UOp(Ops.DEVICE, arg=Device.canonicalize(device)),), n))

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        n = max(0, math.ceil((stop - start) / step))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        idx = Tensor._iota(n, device)
        if start == 0 and step == 1:
            return idx.cast(dt)
        compute = dt if dtypes.is_float(dt) else dtypes.int64 if dt == dtypes.int64 else dtypes.int32
        return (idx.cast(compute) * step + start).cast(dt)

    @staticmethod
    def linspace(start: float, stop: float, steps: int, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        if steps < 0:
            raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if steps == 1:
            return Tensor.full((1,), start, dtype=dt, device=device)
        step = (stop - start) / (steps - 1)
        return (Tensor.arange(steps, device=device).cast(dtypes.float32 if dt != dtypes.float64 else dt) * step + start).cast(dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        m = n if m is None else m
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)

    # *** random numbers: Threefry-2x32 on the device, keyed by (seed, per-call counter) ***

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        Tensor._seed, Tensor._rng_counter = seed, 0

    @staticmethod
    def _random_bits(n: int, device: str | None) -> Tensor:
        """n uniformly random uint32s. Each call takes the next counter, so results never depend on realize order."""
        Tensor._rng_counter += 1
        half = (n + 1) // 2
        counter = Tensor._iota(half, device).cast(dtypes.uint32)
        k0 = dtypes.as_const(Tensor._seed, dtypes.uint32)
        k1 = dtypes.as_const(Tensor._rng_counter, dtypes.uint32)
        y0, y1 = _threefry2x32(counter, counter.full_like(0), k0, k1)
        return y0.cat(y1)[:n]

    @staticmethod
    def rand(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Uniform in [0, 1)."""
        shape_ = Tensor._shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):
            raise TypeError(f"rand needs a float dtype, got {dt}")
        bits = Tensor._random_bits(prod(shape_), device)
        # 24 random bits make every float32 in [0, 1) with spacing 2**-24
        unit = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
        return unit.cast(dt).reshape(shape_)

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.rand(*shape, dtype=dtype, device=device) * (high - low) + low

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Standard normal, by the Box-Muller transform of two uniforms."""
        shape_ = Tensor._shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        u = Tensor.rand(2, *shape_, dtype=dtypes.float32, device=device)
        u1, u2 = u[0], u[1]
        r = (1 - u1).log().mul(-2).sqrt()
        return (r * (u2 * (2 * math.pi)).cos()).cast(dt)

    @staticmethod
    def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.randn(*shape, dtype=dtype, device=device) * std + mean

    @staticmethod
    def randint(*shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32, device: str | None = None) -> Tensor:
        if high <= low:
            raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
        shape_ = Tensor._shape_arg(shape)
        bits = Tensor._random_bits(prod(shape_), device).cast(dtypes.uint64)
        return ((bits * (high - low)) >> 32).cast(dtypes.int64).add(low).cast(to_dtype(dtype)).reshape(shape_)

    def rand_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.rand(self.shape, dtype=dtype or self.dtype, device=self.device)

    def randn_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.randn(self.shape, dtype=dtype or self.dtype, device=self.device)

    # *** movement: views, never copies ***

    def _movement(self, op: Ops, arg: Any) -> Tensor:
        return Tensor(UOp(op, self.dtype, (self.uop,), arg))

    def reshape(self, *shape: Any) -> Tensor:
        new = list(argfix(*shape))
        if new.count(-1) > 1:
            raise ValueError(f"reshape {tuple(new)}: only one dimension can be -1")
        for s in new:
            if not isinstance(s, int) or s < -1:
                raise ValueError(f"reshape {tuple(new)}: dimensions must be non-negative ints or one -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise ValueError(f"cannot reshape tensor of shape {self.shape} to {tuple(new)}")
            new[new.index(-1)] = self.numel() // known
        shape_ = tuple(new)
        if prod(shape_) != self.numel():
            raise ValueError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to {shape_} ({prod(shape_)} elements)")
        return self if shape_ == self.shape else self._movement(Ops.RESHAPE, shape_)

    def view(self, *shape: Any) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *order: Any) -> Tensor:
        order_ = argfix(*order)
        if len(order_) != self.ndim:
            raise ValueError(f"permute {order_} must name all {self.ndim} dimensions of shape {self.shape}")
        norm = tuple(o % self.ndim if self.ndim and -self.ndim <= o < self.ndim else None for o in order_)
        if None in norm or sorted(norm) != list(range(self.ndim)):  # type: ignore[type-var]
            raise ValueError(f"permute {order_} is not a permutation of the dimensions of shape {self.shape}")
        return self if norm == tuple(range(self.ndim)) else self._movement(Ops.PERMUTE, norm)

    def expand(self, *shape: Any) -> Tensor:
        new = argfix(*shape)
        if len(new) < self.ndim:
            raise ValueError(f"cannot expand shape {self.shape} to {new}: fewer dimensions")
        old = (1,) * (len(new) - self.ndim) + self.shape
        target = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, target):
            if o != n and o != 1:
                raise ValueError(f"cannot expand shape {self.shape} to {new}: only size-1 dimensions can grow")
        x = self.reshape(old) if old != self.shape else self
        return x if target == x.shape else x._movement(Ops.EXPAND, target)

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        if len(arg) != self.ndim:
            raise ValueError(f"shrink needs one (start, end) per dimension of shape {self.shape}, got {arg}")
        bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
        for (lo, hi), s in zip(bounds, self.shape):
            if not 0 <= lo <= hi <= s:
                raise ValueError(f"shrink {bounds} is out of bounds for shape {self.shape}")
        return self if all(b == (0, s) for b, s in zip(bounds, self.shape)) else self._movement(Ops.SHRINK, bounds)

    def pad(self, padding: Sequence[Any], value: float = 0.0) -> Tensor:
        """Per-dimension ((before, after), ...) or None, or torch style flat (last_lo, last_hi, prev_lo, ...)."""
        if all(isinstance(p, int) for p in padding):
            flat = list(padding)
            if len(flat) % 2 or len(flat) // 2 > self.ndim:
                raise ValueError(f"flat padding {tuple(flat)} needs an even number of entries, at most 2*{self.ndim}")
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
            per_dim = [(0, 0)] * (self.ndim - len(pairs)) + pairs
        else:
            if len(padding) != self.ndim:
                raise ValueError(f"padding {tuple(padding)} needs one entry per dimension of shape {self.shape}")
            per_dim = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
        # negative padding crops
        x = self
        if any(lo < 0 or hi < 0 for lo, hi in per_dim):
            x = x.shrink([(-min(lo, 0), s + min(hi, 0)) for (lo, hi), s in zip(per_dim, self.shape)])
            per_dim = [(max(lo, 0), max(hi, 0)) for lo, hi in per_dim]
        if all(p == (0, 0) for p in per_dim):
            return x
        padded = x._movement(Ops.PAD, tuple(per_dim))
        if value == 0:
            return padded
        inside = Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device)._movement(Ops.PAD, tuple(per_dim))
        return inside.where(padded, value)

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        axes = _axes(axis, self.ndim)
        return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else self

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        a, b = _axes(dim0, self.ndim)[0], _axes(dim1, self.ndim)[0]
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(range(self.ndim))[::-1])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _axes(start_dim, self.ndim)[0], _axes(end_dim, self.ndim)[0]
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        d = _axes(dim, self.ndim)[0]
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1 :])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        axes = _axes(dim, self.ndim) if dim is not None else tuple(i for i, s in enumerate(self.shape) if s == 1)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in axes and s == 1)))

    def unsqueeze(self, dim: int) -> Tensor:
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(f"unsqueeze dim {dim} is out of range [{-self.ndim - 1}, {self.ndim}] for a tensor with {self.ndim} dimensions")
        d = _axes(dim, self.ndim + 1)[0]
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def repeat(self, *repeats: Any) -> Tensor:
        reps = argfix(*repeats)
        if len(reps) < self.ndim:
            raise ValueError(f"repeat {reps} needs at least one count per dimension of shape {self.shape}")
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter = [d for s in x.shape for d in (1, s)]
        expanded = [d for r, s in zip(reps, x.shape) for d in (r, s)]
        return x.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(reps, x.shape)))

    def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
        tensors = [self, *others]
        d = _axes(dim, self.ndim)[0]
        for t in tensors:
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
                raise ValueError(f"cat along dim {d}: shapes {[x.shape for x in tensors]} differ outside that dim")
        total = sum(t.shape[d] for t in tensors)
        out, start = None, 0
        for t in tensors:
            pads = [(0, 0)] * self.ndim
            pads[d] = (start, total - start - t.shape[d])
            start += t.shape[d]
            part = t.pad(pads)
            out = part if out is None else out + part
        assert out is not None
        return out

    def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
        d = _axes(dim, self.ndim + 1)[0]
        return self.unsqueeze(d).cat(*[t.unsqueeze(d) for t in others], dim=d)

    def contiguous(self) -> Tensor:
        if self._plain_buffer() is not None:
            return self
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def detach(self) -> Tensor:
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)) if self.uop.op is not Ops.DETACH else self.uop)

    def __getitem__(self, index: Any) -> Tensor:
        return _getitem(self, index)

    # *** elementwise ***

    def _alu(self, op: Ops, *others: Tensor, dtype: DType | None = None) -> Tensor:
        srcs = (self.uop, *(o.uop for o in others))
        out = dtype or (dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype)
        return Tensor(UOp(op, out, srcs))

    def _to_tensor(self, x: Any, dtype: DType | None = None) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if not isinstance(x, (bool, int, float)):
            raise TypeError(f"cannot combine a Tensor with {type(x).__name__} ({x!r})")
        dt = dtype or _scalar_dtype(self.dtype, x)
        return Tensor(Tensor._const_uop(x, dt, self.device))

    def _broadcasted(self, y: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands in their common dtype and broadcast shape; `reverse` swaps them (for y - x)."""
        yt = self._to_tensor(y)
        if self.device != yt.device:
            raise ValueError(f"tensors are on different devices: {self.device} and {yt.device}")
        # a Python scalar already got the result dtype in _to_tensor (it never widens the tensor within a kind)
        dt = least_upper_dtype(self.dtype, yt.dtype) if isinstance(y, Tensor) else yt.dtype
        x, yt = self.cast(dt), yt.cast(dt)
        shape = _broadcast_shape(x.shape, yt.shape)
        x, yt = x._broadcast_to(shape), yt._broadcast_to(shape)
        return (yt, x) if reverse else (x, yt)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
        return x.expand(shape)

    def add(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return a._alu(Ops.ADD, b)

    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype == dtypes.bool:
            raise TypeError("subtraction of bool tensors is not supported; use logical_xor or ^")
        return a._alu(Ops.SUB, b)

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return a._alu(Ops.MUL, b) if a.dtype != dtypes.bool else a._alu(Ops.AND, b)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if rounding_mode == "trunc":
            return a._alu(Ops.IDIV, b) if dtypes.is_int(a.dtype) else a.div(b).trunc()
        if rounding_mode == "floor":
            return a._floordiv(b)
        if rounding_mode is not None:
            raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
        fdt = least_upper_float(a.dtype)
        return a.cast(fdt)._alu(Ops.FDIV, b.cast(fdt))

    def _floordiv(self, b: Tensor) -> Tensor:
        if dtypes.is_float(self.dtype):
            # through the remainder, as torch does, so that a == (a // b) * b + a % b as closely as floats allow:
            # floor(a / b) alone gives 10 for 1.0 // 0.1, where the remainder says 9
            d = (self - self._mod(b))._alu(Ops.FDIV, b)
            q = d.floor()
            q = (d - q > 0.5).where(q + 1, q)
            return (b == 0).where(self._alu(Ops.FDIV, b), q)
        q = self._alu(Ops.IDIV, b)
        # C truncates toward zero; floor needs one less when the signs differ and the division is inexact
        if dtypes.is_unsigned(self.dtype):
            return q
        r = self._alu(Ops.MOD, b)
        fix = r._alu(Ops.CMPNE, r.zeros_like()) & (self < 0)._alu(Ops.CMPNE, (b < 0))
        return fix.where(q - 1, q)

    def floordiv(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        return a._floordiv(b)

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor, like torch.remainder and Python's %."""
        a, b = self._broadcasted(x, reverse)
        return a._mod(b)

    def _mod(self, b: Tensor) -> Tensor:
        if dtypes.is_unsigned(self.dtype):
            return self._alu(Ops.MOD, b)
        # C's % keeps the dividend's sign, and so can the float formula when a/b rounds up to an integer
        r = self - self._alu(Ops.FDIV, b).floor() * b if dtypes.is_float(self.dtype) else self._alu(Ops.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(r + b, r)

    def fmod(self, x: Any) -> Tensor:
        """Remainder with the sign of the dividend (C fmod)."""
        a, b = self._broadcasted(x)
        if dtypes.is_float(a.dtype):
            return a - a._alu(Ops.FDIV, b).trunc() * b
        return a._alu(Ops.MOD, b)

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if x == 2:
                return self * self
            if x == 1:
                return self
            if x == 0.5 and dtypes.is_float(self.dtype):
                return self.sqrt()
            if x == -1 and dtypes.is_float(self.dtype):
                return self.reciprocal()
        a, b = self._broadcasted(x, reverse)
        return a._alu(Ops.POW, b)

    def maximum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        return a._alu(Ops.MAX, b)

    def minimum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        return (a < b).where(a, b) if not dtypes.is_float(a.dtype) else -((-a).maximum(-b))

    def where(self, x: Any, y: Any) -> Tensor:
        cond = self if self.dtype == dtypes.bool else self.cast(dtypes.bool)
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            xb, yb = x._broadcasted(y)
        elif isinstance(x, Tensor):
            xb, yb = x._broadcasted(y)
        elif isinstance(y, Tensor):
            yb, xb = y._broadcasted(x)
        else:
            dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
            xb = Tensor(Tensor._const_uop(x, dt, self.device))
            yb = Tensor(Tensor._const_uop(y, dt, self.device))
        shape = _broadcast_shape(cond.shape, _broadcast_shape(xb.shape, yb.shape))
        c, a, b = cond._broadcast_to(shape), xb._broadcast_to(shape), yb._broadcast_to(shape)
        return Tensor(UOp(Ops.WHERE, a.dtype, (c.uop, a.uop, b.uop)))

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        return mask.where(value, self)

    # comparisons
    def __lt__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return a._alu(Ops.CMPLT, b)

    def __gt__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x, reverse=True)
        return a._alu(Ops.CMPLT, b)

    # not(a < b) would be one op, but every comparison with NaN is false, so floats need (a > b) | (a == b)
    def __ge__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return (b < a) | (a == b) if dtypes.is_float(a.dtype) else (a < b).logical_not()

    def __le__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return (a < b) | (a == b) if dtypes.is_float(a.dtype) else (b < a).logical_not()

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return a._alu(Ops.CMPEQ, b)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return a._alu(Ops.CMPNE, b)

    def eq(self, x: Any) -> Tensor:
        return self == x

    def ne(self, x: Any) -> Tensor:
        return self != x

    def lt(self, x: Any) -> Tensor:
        return self < x

    def gt(self, x: Any) -> Tensor:
        return self > x

    def le(self, x: Any) -> Tensor:
        return self <= x

    def ge(self, x: Any) -> Tensor:
        return self >= x

    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor.full(self.shape, True, device=self.device))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            raise TypeError(f"bitwise {op.name.lower()} needs integer or bool tensors, got {a.dtype}")
        return a._alu(op, b)

    def bitwise_and(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x)

    def bitwise_or(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x)

    def bitwise_xor(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x)

    def bitwise_not(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self._bitwise(Ops.XOR, -1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

    def lshift(self, x: int) -> Tensor:
        return self._bitwise(Ops.SHL, x)

    def rshift(self, x: int) -> Tensor:
        return self._bitwise(Ops.SHR, x)

    def __and__(self, x: Any) -> Tensor:
        return self.bitwise_and(x)

    def __or__(self, x: Any) -> Tensor:
        return self.bitwise_or(x)

    def __xor__(self, x: Any) -> Tensor:
        return self.bitwise_xor(x)

    def __rand__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x, True)

    def __ror__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x, True)

    def __rxor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x, True)

    def __invert__(self) -> Tensor:
        return self.bitwise_not()

    def __lshift__(self, x: int) -> Tensor:
        return self.lshift(x)

    def __rshift__(self, x: int) -> Tensor:
        return self.rshift(x)

    # arithmetic operators
    def __add__(self, x: Any) -> Tensor:
        return self.add(x)

    def __radd__(self, x: Any) -> Tensor:
        return self.add(x, True)

    def __sub__(self, x: Any) -> Tensor:
        return self.sub(x)

    def __rsub__(self, x: Any) -> Tensor:
        return self.sub(x, True)

    def __mul__(self, x: Any) -> Tensor:
        return self.mul(x)

    def __rmul__(self, x: Any) -> Tensor:
        return self.mul(x, True)

    def __truediv__(self, x: Any) -> Tensor:
        return self.div(x)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __floordiv__(self, x: Any) -> Tensor:
        return self.floordiv(x)

    def __rfloordiv__(self, x: Any) -> Tensor:
        return self.floordiv(x, True)

    def __mod__(self, x: Any) -> Tensor:
        return self.mod(x)

    def __rmod__(self, x: Any) -> Tensor:
        return self.mod(x, True)

    def __pow__(self, x: Any) -> Tensor:
        return self.pow(x)

    def __rpow__(self, x: Any) -> Tensor:
        return self.pow(x, True)

    def __neg__(self) -> Tensor:
        return self.neg()

    def __abs__(self) -> Tensor:
        return self.abs()

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    # unary math
    def _float_unary(self, op: Ops) -> Tensor:
        x = self.cast(least_upper_float(self.dtype))
        return x._alu(op)

    def _in_float32(self, fn: Any) -> Tensor:
        """Composite math on float16/bfloat16 runs in float32 and rounds once, as torch does; each rounding to half
        inside a composite (x * log2(e) before exp2, pi/2 - x before sin) would cost several ulps of the result."""
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return fn(self.float()).cast(self.dtype)
        return fn(self.cast(least_upper_float(self.dtype)))

    def neg(self) -> Tensor:
        if self.dtype == dtypes.bool:
            raise TypeError("negation of a bool tensor is not supported; use logical_not or ~")
        return self._alu(Ops.NEG)

    def reciprocal(self) -> Tensor:
        return self._float_unary(Ops.RECIP)

    def sqrt(self) -> Tensor:
        return self._float_unary(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        return self.sqrt().reciprocal()

    def exp2(self) -> Tensor:
        return self._float_unary(Ops.EXP2)

    def log2(self) -> Tensor:
        return self._float_unary(Ops.LOG2)

    def exp(self) -> Tensor:
        return self._in_float32(lambda x: x.mul(1 / math.log(2)).exp2())

    def log(self) -> Tensor:
        return self._in_float32(lambda x: x.log2().mul(math.log(2)))

    def log10(self) -> Tensor:
        return self._in_float32(lambda x: x.log2().mul(math.log10(2)))

    def sin(self) -> Tensor:
        return self._float_unary(Ops.SIN)

    def cos(self) -> Tensor:
        return self._in_float32(lambda x: (math.pi / 2 - x).sin())

    def tan(self) -> Tensor:
        return self._in_float32(lambda x: x.sin() / x.cos())

    def square(self) -> Tensor:
        return self * self

    def trunc(self) -> Tensor:
        return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

    def floor(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def round(self) -> Tensor:
        """Round half to even, like torch.round and numpy.round."""
        if not dtypes.is_float(self.dtype):
            return self
        f = self.floor()
        diff = self - f
        even = (f * 0.5).trunc() * 2 == f
        return (diff > 0.5).where(f + 1, (diff < 0.5).where(f, even.where(f, f + 1)))

    def abs(self) -> Tensor:
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
            return self
        return self.maximum(-self) if dtypes.is_float(self.dtype) else (self < 0).where(-self, self)

    def sign(self) -> Tensor:
        one, zero = self.ones_like(), self.zeros_like()
        s = (self > 0).where(one, (self < 0).where(-one if not dtypes.is_unsigned(self.dtype) else zero, zero))
        return self.isnan().where(self, s) if dtypes.is_float(self.dtype) else s  # NaN stays NaN, like numpy

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        if min_ is None and max_ is None:
            raise ValueError("clip needs at least one of min and max")
        x = self
        if min_ is not None:
            x = x.maximum(min_)
        if max_ is not None:
            x = x.minimum(max_)
        return x

    clamp = clip

    def relu(self) -> Tensor:
        return self.maximum(0)

    def sigmoid(self) -> Tensor:
        return self._in_float32(lambda x: (1 + (-x).exp()).reciprocal())

    def tanh(self) -> Tensor:
        return self._in_float32(_tanh)

    def erf(self) -> Tensor:
        return self._in_float32(_erf)

    def gelu(self, approximate: str = "none") -> Tensor:
        if approximate == "tanh":
            return self._in_float32(lambda x: 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh()))
        if approximate != "none":
            raise ValueError(f"gelu approximate must be 'none' or 'tanh', not {approximate!r}")
        return self._in_float32(lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()))

    def silu(self) -> Tensor:
        return self * self.sigmoid()

    swish = silu

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        def fn(x: Tensor) -> Tensor:
            bx = x * beta
            return (bx > threshold).where(x, (1 + bx.exp()).log() * (1 / beta))

        return self._in_float32(fn)

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        return (self < 0).where(self * neg_slope, self)

    def elu(self, alpha: float = 1.0) -> Tensor:
        return (self > 0).where(self, alpha * (self.exp() - 1))

    def relu6(self) -> Tensor:
        return self.relu().minimum(6)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        return self.clip(min_val, max_val)

    def isnan(self) -> Tensor:
        return self != self

    def isinf(self) -> Tensor:
        return (self == math.inf) | (self == -math.inf)

    # dtype conversion
    def cast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        return self if dt == self.dtype else Tensor(UOp(Ops.CAST, dt, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast from {self.dtype} ({self.dtype.itemsize} bytes) to {dt} ({dt.itemsize} bytes): sizes differ")
        return self if dt == self.dtype else Tensor(UOp(Ops.BITCAST, dt, (self.uop,)))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    # *** reductions ***

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = _axes(axis, self.ndim)
        if op is Ops.MAX and any(self.shape[a] == 0 for a in axes):
            raise ValueError(f"max/min over a zero-size dimension of shape {self.shape} has no identity")
        if not axes:
            return self
        if any(self.shape[a] == 0 for a in axes):
            # an empty reduce is its identity; codegen never sees a loop over zero elements
            return Tensor.full(_reduced_shape(self.shape, axes, keepdim), 0 if op is Ops.ADD else 1, dtype=self.dtype, device=self.device)
        out = Tensor(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)))
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
        out_dt = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        # half precision accumulates in float32, like torch
        acc_dt = dtypes.float32 if out_dt in (dtypes.float16, dtypes.bfloat16) else out_dt
        return self.cast(acc_dt)._reduce(Ops.ADD, axis, keepdim).cast(out_dt)

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
        out_dt = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        return self.cast(out_dt)._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        if dtypes.is_float(self.dtype):
            return -((-self).max(axis, keepdim))
        if self.dtype == dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        # ~x reverses the order of every integer type without overflow
        return ~((~self).max(axis, keepdim))

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        axes = _axes(axis, self.ndim)
        n = prod(self.shape[a] for a in axes)
        fdt = least_upper_float(self.dtype)
        total = self.cast(fdt).sum(axis, keepdim)
        return total / n if n else total * math.nan

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        axes = _axes(axis, self.ndim)
        n = prod(self.shape[a] for a in axes)
        x = self.cast(least_upper_float(self.dtype))
        sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        return sq / max(0, n - correction) if n - correction > 0 else sq * math.nan

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def _arg_extreme(self, axis: int | None, keepdim: bool, largest: bool) -> Tensor:
        x = self if largest else (-self if dtypes.is_float(self.dtype) else ~self if self.dtype != dtypes.bool else self.logical_not())
        if axis is None:
            return x.flatten()._arg_extreme(0, False, True).reshape(() if not keepdim else (1,) * self.ndim)
        d = _axes(axis, self.ndim)[0]
        n = self.shape[d]
        if n == 0:
            raise ValueError(f"argmax/argmin over a zero-size dimension of shape {self.shape}")
        is_max = x == x.max(d, keepdim=True)
        if dtypes.is_float(x.dtype):
            is_max = is_max | x.isnan()  # max is NaN where one is: like torch, the first NaN wins
        # the first maximal index wins: score n - i for maxima, 0 elsewhere
        rev = (Tensor.arange(n, 0, -1, device=self.device)).reshape((n,) + (1,) * (self.ndim - d - 1))
        score = is_max.where(rev, 0).max(d, keepdim=keepdim)
        return (n - score).cast(dtypes.int32)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg_extreme(axis, keepdim, True)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg_extreme(axis, keepdim, False)

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.bool()._reduce(Ops.MAX, axis, keepdim) if self.numel() else Tensor.full(_reduced_shape(self.shape, axis, keepdim), False, device=self.device)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self.logical_not().any(axis, keepdim).logical_not()

    # *** composites built on the primitives above ***

    def dot(self, w: Tensor) -> Tensor:
        if self.ndim == 0 or w.ndim == 0:
            raise ValueError(f"matmul needs at least 1-d tensors, got shapes {self.shape} and {w.shape}")
        k = self.shape[-1]
        kw = w.shape[-2] if w.ndim > 1 else w.shape[0]
        if k != kw:
            raise ValueError(f"matmul shape mismatch: {self.shape} @ {w.shape} ({k} != {kw})")
        x = self.reshape(*self.shape[:-1], *(1,) * min(w.ndim - 1, 1), k)
        wt = w.reshape(*w.shape[:-2], *(1,) * min(self.ndim - 1, 1), *w.shape[-min(w.ndim, 2) :]).transpose(-1, -min(w.ndim, 2))
        return (x * wt).sum(-1, dtype=least_upper_dtype(self.dtype, w.dtype) if not dtypes.is_float(self.dtype) else None)

    def matmul(self, w: Tensor) -> Tensor:
        return self.dot(w)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """x @ weight.T + bias, with weight (out_features, in_features) as in torch."""
        if weight.ndim not in (1, 2) or self.ndim == 0 or self.shape[-1] != weight.shape[-1]:
            raise ValueError(f"linear: input shape {self.shape} does not match weight shape {weight.shape} "
                             "(weight must be (out_features, in_features) or (in_features,))")
        out = self.dot(weight.T)
        return out if bias is None else out + bias

    def sequential(self, layers: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
        return functools.reduce(lambda x, f: f(x), layers, self)

    # *** convolution and pooling: a sliding-window view made of movement ops, then one reduce ***

    def _pool(self, kernel: tuple[int, ...], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1) -> Tensor:
        """View (..., *spatial) as (..., *out, *kernel): every window, without copying."""
        nk = len(kernel)
        s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
        if len(s_) != nk or len(d_) != nk:
            raise ValueError(f"kernel {kernel}, stride {s_} and dilation {d_} need one entry per spatial dimension")
        if any(k < 1 for k in kernel) or any(s < 1 for s in s_) or any(d < 1 for d in d_):
            raise ValueError(f"kernel {kernel}, stride {s_} and dilation {d_} must be positive")
        batch, i_ = self.shape[:-nk], self.shape[-nk:]
        if any(d * (k - 1) + 1 > i for k, d, i in zip(kernel, d_, i_)):
            raise ValueError(f"kernel {kernel} with dilation {d_} is larger than the (padded) input {i_}")
        o_ = [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(i_, d_, kernel, s_)]
        nb = len(batch)
        keep: list[tuple[int, int] | None] = [None] * nb
        # repeat each spatial dim k times with period i*f+d: window j of copy t starts at j + t*d after the reshape
        f_ = [1 + int(o * s > i - d * (k - 1)) for o, s, i, d, k in zip(o_, s_, i_, d_, kernel)]
        x = self.repeat([1] * nb + [ceildiv(k * (i * f + d), i) for k, i, d, f in zip(kernel, i_, d_, f_)])
        x = x.shrink(keep + [(0, k * (i * f + d)) for k, i, d, f in zip(kernel, i_, d_, f_)])
        x = x.reshape(*batch, *flatten((k, i * f + d) for k, i, d, f in zip(kernel, i_, d_, f_)))
        # stride: keep the first of every s positions
        x = x.shrink(keep + flatten(((0, k), (0, o * s)) for k, o, s in zip(kernel, o_, s_)))
        x = x.reshape(*batch, *flatten((k, o, s) for k, o, s in zip(kernel, o_, s_)))
        x = x.shrink(keep + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(kernel, o_)))
        x = x.reshape(*batch, *flatten((k, o) for k, o in zip(kernel, o_)))
        return x.permute(*range(nb), *[nb + 2 * i + 1 for i in range(nk)], *[nb + 2 * i for i in range(nk)])

    def _pool_pads(self, padding: int | Sequence[int], dims: int) -> list[tuple[int, int]]:
        """(before, after) per spatial dim from an int, one int per dim, or torch's flat (last_lo, last_hi, ...)."""
        if isinstance(padding, int):
            return [(padding, padding)] * dims
        pads = tuple(padding)
        if len(pads) == dims:
            return [(p, p) for p in pads]
        if len(pads) == 2 * dims:
            return [(pads[i], pads[i + 1]) for i in range(0, 2 * dims, 2)][::-1]
        raise ValueError(f"padding {padding} needs an int, {dims} ints or {2 * dims} ints for input shape {self.shape}")

    def _spatial_pad(self, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
        return self.pad([None] * (self.ndim - len(pads)) + list(pads), value=value)

    def conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
    ) -> Tensor:
        """Convolution over any number of spatial dims: input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel)."""
        if self.ndim < 3 or weight.ndim != self.ndim:
            raise ValueError(f"conv: input shape {self.shape} and weight shape {weight.shape} must both be "
                             "(N, C, *spatial) and (Cout, Cin/groups, *kernel) with the same number of dims")
        (bs, cin_), (cout, cin), kernel = self.shape[:2], weight.shape[:2], weight.shape[2:]
        if groups < 1 or cin_ % groups or cout % groups:
            raise ValueError(f"conv: groups={groups} must divide the input channels ({cin_}) and output channels ({cout}); "
                             f"input shape {self.shape}, weight shape {weight.shape}")
        if cin * groups != cin_:
            raise ValueError(f"conv: input shape {self.shape} has {cin_} channels, weight shape {weight.shape} expects "
                             f"{cin} * groups={groups} = {cin * groups}")
        if bias is not None and bias.shape != (cout,):
            raise ValueError(f"conv: bias shape {bias.shape} must be ({cout},) for weight shape {weight.shape}")
        nk = len(kernel)
        if isinstance(padding, str):
            if padding == "valid":
                pads = [(0, 0)] * nk
            elif padding == "same":
                if any(s != 1 for s in make_tuple(stride, nk)):
                    raise ValueError(f"conv: padding='same' needs stride 1, got stride {stride}")
                # torch puts the odd element of an even total on the right
                totals = [d * (k - 1) for d, k in zip(make_tuple(dilation, nk), kernel)]
                pads = [(t // 2, t - t // 2) for t in totals]
            else:
                raise ValueError(f"conv: padding must be an int, a tuple, 'same' or 'valid', not {padding!r}")
        else:
            pads = self._pool_pads(padding, nk)
        x = self._spatial_pad(pads)._pool(kernel, stride, dilation)  # (bs, cin_, *out, *kernel)
        out = x.shape[2 : 2 + nk]
        rcout = cout // groups
        # broadcast to (bs, groups, rcout, *out, cin, *kernel) and reduce the last 1 + nk dims
        x = x.reshape(bs, groups, cin, 1, *out, *kernel).expand(bs, groups, cin, rcout, *out, *kernel)
        x = x.permute(0, 1, 3, *[4 + i for i in range(nk)], 2, *[4 + nk + i for i in range(nk)])
        w = weight.reshape(1, groups, rcout, *[1] * nk, cin, *kernel)
        ret = (x * w).sum([-1 - i for i in range(1 + nk)]).reshape(bs, cout, *out)
        return ret if bias is None else ret + bias.reshape(1, cout, *[1] * nk)

    def conv_transpose2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
    ) -> Tensor:
        """Transposed convolution, weight (Cin, Cout/groups, *kernel): a stride-1 conv of the zero-stuffed input."""
        if self.ndim < 3 or weight.ndim != self.ndim:
            raise ValueError(f"conv_transpose: input shape {self.shape} and weight shape {weight.shape} must both be "
                             "(N, C, *spatial) and (Cin, Cout/groups, *kernel) with the same number of dims")
        if groups < 1 or weight.shape[0] % groups or self.shape[1] != weight.shape[0]:
            raise ValueError(f"conv_transpose: input shape {self.shape} and weight shape {weight.shape} need equal input "
                             f"channels divisible by groups={groups}")
        kernel = weight.shape[2:]
        nk = len(kernel)
        s_, d_, p_, op_ = (make_tuple(v, nk) for v in (stride, dilation, padding, output_padding))
        if any(op >= max(s, d) for op, s, d in zip(op_, s_, d_)):
            raise ValueError(f"conv_transpose: output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
        # (Cin, Cout/g, *k) -> (Cout, Cin/g, *k) with the kernel mirrored
        w = weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(tuple(range(3, weight.ndim + 1))).flatten(0, 1)
        x = self
        if any(s > 1 for s in s_):
            # (n) -> (n, 1) -> pad (n, s) -> (n*s) -> drop the trailing s-1 zeros
            lead = x.shape[:2]
            x = x.reshape(*lead, *flatten((n, 1) for n in x.shape[2:]))
            x = x.pad([None, None, *flatten((None, (0, s - 1)) for s in s_)])
            x = x.reshape(*lead, *[n * s for n, s in zip(x.shape[2::2], s_)])
            x = x.shrink([None, None, *[(0, n - (s - 1)) for n, s in zip(x.shape[2:], s_)]])
        pads = [((k - 1) * d - p, (k - 1) * d - p + op) for k, d, p, op in zip(kernel, d_, p_, op_)]
        # negative pads crop, which conv2d's int padding cannot say
        return x._spatial_pad(pads).conv2d(w, bias, dilation=dilation, groups=groups)

    def _ceil_pads(self, pads: list[tuple[int, int]], kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> list[tuple[int, int]]:
        """Extra right padding so the last partial window counts (ceil_mode), unless it would start in the padding."""
        out = []
        for (lo, hi), i, k, s, d in zip(pads, self.shape[-len(kernel) :], kernel, stride, dilation):
            o = ceildiv(i + lo + hi - (d * (k - 1) + 1), s) + 1
            # a window may not start past the input's end (torch drops it)
            if s * (o - 1) >= i + lo:
                o -= 1
            out.append((lo, hi + max(0, s * (o - 1) + d * (k - 1) + 1 - (i + lo + hi))))
        return out

    def _pool_setup(self, kernel_size: int | Sequence[int], stride: Any, padding: Any, dilation: Any, ceil_mode: bool) -> tuple:
        k_ = make_tuple(kernel_size, 2)
        nk = len(k_)
        if self.ndim < nk + 1:
            raise ValueError(f"pooling with kernel {k_} needs an input with at least {nk + 1} dims, got shape {self.shape}")
        s_ = make_tuple(stride if stride is not None else k_, nk)
        d_ = make_tuple(dilation, nk)
        pads = self._pool_pads(padding, nk)
        if any(2 * max(lo, hi) > k for (lo, hi), k in zip(pads, k_)):
            raise ValueError(f"pad should be at most half of the effective kernel size: padding {padding}, kernel {k_}")
        reg = pads
        if ceil_mode:
            pads = self._ceil_pads(pads, k_, s_, d_)
        return k_, s_, d_, reg, pads

    def max_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
    ) -> Tensor:
        k_, s_, d_, _, pads = self._pool_setup(kernel_size, stride, padding, dilation, ceil_mode)
        fill = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        windows = self._spatial_pad(pads, value=fill)._pool(k_, s_, d_)
        return windows.max(tuple(range(-len(k_), 0)))

    def avg_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        k_, s_, d_, reg, pads = self._pool_setup(kernel_size, stride, padding, 1, ceil_mode)
        axes = tuple(range(-len(k_), 0))
        total = self._spatial_pad(pads)._pool(k_, s_, d_).sum(axes)
        # the divisor counts the input, plus the regular padding if count_include_pad (never ceil_mode's extra)
        ones = Tensor.ones(self.shape[-len(k_) :], dtype=total.dtype, device=self.device)
        if count_include_pad:
            ones = ones._spatial_pad(reg)
            extra = [(0, hi - rhi) for (_, hi), (_, rhi) in zip(pads, reg)]
        else:
            extra = pads
        return total / ones._spatial_pad(extra)._pool(k_, s_, d_).sum(axes)

    # *** normalization, activation-like composites ***

    def softmax(self, axis: int = -1) -> Tensor:
        # the max only shifts for range: it cancels in value and in gradient, so no gradient flows through it
        m = self - self.max(axis, keepdim=True).detach()
        e = m.exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1) -> Tensor:
        m = self - self.max(axis, keepdim=True).detach()
        return m - m.exp().sum(axis, keepdim=True).log()

    def logsumexp(self, axis: int = -1, keepdim: bool = False) -> Tensor:
        m = self.max(axis, keepdim=True).detach()
        # an infinite max would give inf - inf = nan; shifting by 0 instead keeps -inf rows at -inf and +inf at +inf
        m = m.isinf().where(0.0, m)
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze(axis)

    def logsigmoid(self) -> Tensor:
        # log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), finite for every finite x
        return self.minimum(0) - (1 + (-self.abs()).exp()).log()

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        y = self - self.mean(axis, keepdim=True)
        return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

    def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis: int | Sequence[int] = 1) -> Tensor:
        """(x - mean) * weight * invstd + bias, the statistics given per channel along `axis`."""
        axes = _axes(axis, self.ndim)
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return x if bias is None else x + bias.reshape(shape)

    def dropout(self, p: float = 0.5) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p), only while Tensor.training."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        if not Tensor.training or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        keep = Tensor.rand(self.shape, device=self.device) >= p
        return keep.where(self, 0.0) * (1.0 / (1.0 - p))

    def one_hot(self, num_classes: int = -1) -> Tensor:
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot needs an integer tensor, got {self.dtype}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1
        return self.unsqueeze(-1)._one_hot_along(num_classes, -1).cast(dtypes.default_int)

    def _one_hot_along(self, num_classes: int, dim: int) -> Tensor:
        """self has a size-1 dim at `dim`: a bool tensor true where the index along `dim` equals the value."""
        d = _axes(dim, self.ndim)[0]
        classes = Tensor.arange(num_classes, device=self.device).reshape((num_classes,) + (1,) * (self.ndim - d - 1))
        return self == classes

    def scaled_dot_product_attention(
        self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False
    ) -> Tensor:
        """softmax(q @ k^T / sqrt(d) + mask) @ v; a bool mask keeps where True, a float mask is added."""
        if self.ndim < 2 or key.ndim < 2 or value.ndim < 2 or self.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
            raise ValueError(f"attention: query {self.shape}, key {key.shape} and value {value.shape} need matching "
                             "head dims (q[-1] == k[-1]) and sequence lengths (k[-2] == v[-2])")
        qk = self.matmul(key.transpose(-2, -1)) * (1 / math.sqrt(self.shape[-1]))
        if is_causal:
            if attn_mask is not None:
                raise ValueError("attention: pass either attn_mask or is_causal=True, not both")
            rows = Tensor.arange(qk.shape[-2], device=self.device).reshape(-1, 1)
            attn_mask = Tensor.arange(qk.shape[-1], device=self.device).reshape(1, -1) <= rows
        if attn_mask is not None:
            qk = qk + (attn_mask.where(0.0, -math.inf) if attn_mask.dtype == dtypes.bool else attn_mask)
        return qk.softmax(-1).dropout(dropout_p) @ value

    # *** losses ***

    def _reduction(self, reduction: str) -> Tensor:
        if reduction == "mean":
            return self.mean()
        if reduction == "sum":
            return self.sum()
        if reduction == "none":
            return self
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")

    def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
        # logs are clamped at -100 as in torch, so a probability of exactly 0 or 1 gives a finite loss
        return -(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100))._reduction(reduction)

    def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
        pos = Y * self.logsigmoid() if pos_weight is None else pos_weight * Y * self.logsigmoid()
        return -(pos + (1 - Y) * (-self).logsigmoid())._reduction(reduction)

    def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """Logits (N, C, ...) or (C,); Y class indices (N, ...) or probabilities shaped like the logits, as in torch."""
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        cdim = 0 if self.ndim == 1 else 1
        if Y.shape != self.shape:
            if dtypes.is_float(Y.dtype) or Y.shape != self.shape[:cdim] + self.shape[cdim + 1 :]:
                raise ValueError(f"cross_entropy: target shape {Y.shape} must be the logits shape {self.shape} (probabilities) "
                                 "or that shape without the class dim (integer class indices)")
            Y = Y.unsqueeze(cdim)._one_hot_along(self.shape[cdim], cdim).cast(self.dtype)
        Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[cdim]
        return -(self.log_softmax(cdim) * Y).sum(cdim)._reduction(reduction)

    def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
        """Logits (..., C) and integer targets (...), classes on the last dim (tinygrad's); `mean` skips ignored targets."""
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        if Y.shape != self.shape[:-1]:
            raise ValueError(f"sparse_categorical_crossentropy: target shape {Y.shape} must be the logits shape {self.shape} without its last dim")
        log_probs = self.log_softmax()
        keep = Y != ignore_index
        y = Y.unsqueeze(-1)._one_hot_along(self.shape[-1], -1) & keep.unsqueeze(-1)
        smoothing = label_smoothing * log_probs.mean(-1) * keep
        loss = -((1 - label_smoothing) * (log_probs * y).sum(-1) + smoothing)
        return loss.sum() / keep.sum() if reduction == "mean" else loss._reduction(reduction)

    def nll_loss(self, Y: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
        """Log-probabilities (N, C, ...) or (C,) and integer targets; `mean` divides by the summed target weights, as torch."""
        cdim = 0 if self.ndim == 1 else 1
        if Y.shape != self.shape[:cdim] + self.shape[cdim + 1 :]:
            raise ValueError(f"nll_loss: target shape {Y.shape} must be the input shape {self.shape} without the class dim")
        hit = Y.unsqueeze(cdim)._one_hot_along(self.shape[cdim], cdim) & (Y != ignore_index).unsqueeze(cdim)
        # select with where, not a multiply: an unpicked -inf log-probability must not turn into nan
        picked, w = hit.where(self, 0.0), hit.cast(self.dtype)
        if weight is not None:
            scale = weight.reshape((-1,) + (1,) * (self.ndim - cdim - 1))
            picked, w = picked * scale, w * scale
        loss = -picked.sum(cdim)
        return loss.sum() / w.sum() if reduction == "mean" else loss._reduction(reduction)

_grad_leaves: weakref.WeakSet[Tensor] = weakref.WeakSet()


def _reads_shifted(value: UOp, buffer: UOp) -> bool:
    """True if `value` reads `buffer` through a view other than a reshape (then an in-place write would race).
    Reads behind an ASSIGN or CONTIGUOUS do not count: the scheduler always stores those in kernels of their own,
    which run before the in-place write (an optimizer's update reads its state, whose gradients read the weights)."""
    seen: set[UOp] = set()
    stack = [value]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x.op not in (Ops.ASSIGN, Ops.CONTIGUOUS):
            stack.extend(x.src)
        if x.op in GroupOp.Movement and x.base is buffer:
            node = x
            while node is not buffer:
                if node.op is not Ops.RESHAPE:
                    return True
                node = node.src[0]
    return False


class _GradMode(contextlib.ContextDecorator):
    def __enter__(self) -> None:
        Tensor._grad_disabled += 1

    def __exit__(self, *exc: Any) -> None:
        Tensor._grad_disabled -= 1


class _TrainMode(contextlib.ContextDecorator):
    def __init__(self, mode: bool):
        self.mode = mode

    def __enter__(self) -> None:
        self.prev, Tensor.training = Tensor.training, self.mode

    def __exit__(self, *exc: Any) -> None:
        Tensor.training = self.prev


def _tanh(x: Tensor) -> Tensor:
    t = (x.abs() * -2).exp()
    r = (1 - t) / (1 + t)
    return (x < 0).where(-r, r)


def _erf(x: Tensor) -> Tensor:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, also in float64), odd-extended."""
    a = x.abs()
    t = 1 / (1 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1 - poly * (-a * a).exp()
    return (x < 0).where(-y, y)


def _reduced_shape(shape: tuple[int, ...], axis: Any, keepdim: bool) -> tuple[int, ...]:
    axes = _axes(axis, len(shape))
    return tuple(1 if i in axes else s for i, s in enumerate(shape)) if keepdim else tuple(s for i, s in enumerate(shape) if i not in axes)


def _scalar_dtype(tensor_dtype: DType, x: Any) -> DType:
    """The dtype of a Python scalar next to a tensor: the tensor's, unless the scalar's kind is higher (torch rules)."""
    if isinstance(x, bool):
        return tensor_dtype
    if isinstance(x, int):
        return tensor_dtype if tensor_dtype != dtypes.bool else dtypes.default_int
    return tensor_dtype if dtypes.is_float(tensor_dtype) else dtypes.default_float


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"cannot broadcast shapes {a} and {b}")
        out.append(y if x == 1 else x)
    return tuple(out)


def _threefry2x32(x0: Tensor, x1: Tensor, k0: int, k1: int) -> tuple[Tensor, Tensor]:
    """Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3")."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (k0, k1, (k0 ^ k1 ^ 0x1BD11BDA) & 0xFFFFFFFF)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ((ks[(i + 2) % 3] + i + 1) & 0xFFFFFFFF)
    return x0, x1


def _getitem(t: Tensor, index: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis, all as views."""
    idx = index if isinstance(index, tuple) else (index,)
    for i in idx:
        if isinstance(i, (Tensor, list)) or type(i).__module__ == "numpy":
            raise NotImplementedError("indexing with tensors or lists (advanced indexing) is not supported yet")
        if not (i is None or i is Ellipsis or isinstance(i, (int, slice))) or isinstance(i, bool):
            raise TypeError(f"invalid index {i!r} of type {type(i).__name__}")
    if sum(i is Ellipsis for i in idx) > 1:
        raise IndexError("an index can only have a single ellipsis (...)")
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > t.ndim:
        raise IndexError(f"too many indices for tensor of dimension {t.ndim}: {index!r}")
    if Ellipsis in idx:
        e = idx.index(Ellipsis)
        idx = idx[:e] + (slice(None),) * (t.ndim - n_real) + idx[e + 1 :]
    else:
        idx = idx + (slice(None),) * (t.ndim - n_real)
    bounds, flips, strides, out_shape = [], [], [], []
    dim = 0
    for i in idx:
        if i is None:
            out_shape.append(("new", 1))
            continue
        size = t.shape[dim]
        if isinstance(i, int):
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            j = i % size
            bounds.append((j, j + 1))
            flips.append(False)
            strides.append(1)
        else:
            start, stop, step = i.indices(size)
            if step > 0:
                n = max(0, -(-(stop - start) // step))
                bounds.append((start, start + max(0, (n - 1) * step + 1)) if n else (0, 0))
                flips.append(False)
            else:
                n = max(0, -(-(start - stop) // -step))
                lo = start - (n - 1) * (-step) if n else 0
                bounds.append((lo, start + 1) if n else (0, 0))
                flips.append(True)
            strides.append(abs(step))
            out_shape.append(("dim", n))
        dim += 1
    x = t.shrink(bounds)
    if any(flips):
        x = x.flip([d for d, f in enumerate(flips) if f])
    if any(s != 1 for s in strides):
        # take every step-th element: pad to a multiple of the step, split, keep the first of each group
        pads = [(0, (-x.shape[d]) % s if x.shape[d] else 0) for d, s in enumerate(strides)]
        x = x.pad(pads)
        split = [v for d, s in enumerate(strides) for v in ((x.shape[d] // s, s) if s != 1 else (x.shape[d],))]
        x = x.reshape(split)
        keep: list[tuple[int, int] | None] = []
        for s in strides:
            keep.extend([None, (0, 1)] if s != 1 else [None])
        x = x.shrink(keep)
        x = x.reshape([v for v, _ in zip(_take_firsts(x.shape, strides), range(len(strides)))])
    return x.reshape(tuple(n for _, n in out_shape))


def _take_firsts(shape: tuple[int, ...], strides: list[int]) -> list[int]:
    out, k = [], 0
    for s in strides:
        out.append(shape[k])
        k += 2 if s != 1 else 1
    return out
