"""Data types, PyTorch-like type promotion, and conversions of Python values."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import struct
from dataclasses import dataclass
from typing import Any, Final

from lazygrad.helpers import DEFAULT_FLOAT, DEFAULT_INT, ContextVar

_dtype_keys: dict[tuple, int] = {}  # a dtype's class and fields -> its number (DType.key)
_dtype_numbers = itertools.count()  # (next() is atomic: two threads making dtypes never share a number)


@dataclass(frozen=True, eq=True)
class DType:
    """A scalar (count == 1) or short vector of scalars (count > 1, used only inside kernels)."""

    priority: int  # orders dtypes of the same kind when printing; promotion uses the lattice below
    itemsize: int
    name: str
    fmt: str | None  # struct / memoryview format char, None where Python has none (bfloat16)
    count: int = 1
    _scalar: DType | None = None

    def __post_init__(self) -> None:
        # ints only: the same value in every process, so a pickled dtype keeps a valid one
        object.__setattr__(self, "_hash", hash((self.priority, self.itemsize, self.count)))
        # a number per distinct dtype (equal dtypes share it), for keys hashed at C speed: every hash-cons key of a
        # UOp holds its dtype's, where the dtype itself is a Python __hash__ call per lookup (three per node made)
        fields = (type(self), *(getattr(self, f.name) for f in dataclasses.fields(self)))
        object.__setattr__(self, "key", _dtype_keys.setdefault(fields, next(_dtype_numbers)))

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpickled (another process's numbers): the fields, then this process's number for them
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self.__post_init__()

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        # dtypes are nearly always the same objects (dtypes.float32): identity first, the numbers only otherwise
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.key == other.key  # type: ignore[attr-defined]  (equal numbers: equal class and fields)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name) < (other.priority, other.itemsize, other.name)

    # torch.dtype's flags: torch programs branch on `x.dtype.is_floating_point` (it raised AttributeError here)
    @property
    def is_floating_point(self) -> bool:
        return dtypes.is_float(self)

    @property
    def is_signed(self) -> bool:
        return not dtypes.is_unsigned(self) and self.scalar != dtypes.bool

    is_complex = False

    @property
    def base(self) -> DType:
        return self

    @property
    def scalar(self) -> DType:
        return self._scalar if self._scalar is not None else self

    def vec(self, count: int) -> DType:
        if count == 1 or self.count != 1:
            return self if count == 1 else _bad_vec(self, count)
        # one object per vector dtype: codegen asks for them by the thousand, and equal objects compare by identity
        if (vec := _vecs.get((self.key, count))) is None:  # type: ignore[attr-defined]
            vec = _vecs.setdefault(
                (self.key, count), DType(self.priority, self.itemsize * count, self.name, None, count, self)
            )  # type: ignore[attr-defined]
        return vec

    def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar, self, size, local)

    @property
    def min(self) -> Any:
        """The smallest value of the dtype: -inf for floats, False for bool (as tinygrad's DType.min)."""
        return dtypes.min(self.scalar)

    @property
    def max(self) -> Any:
        return dtypes.max(self.scalar)


_vecs: dict[tuple[int, int], DType] = {}  # (scalar dtype's number, count) -> its vector dtype (DType.vec)


def _bad_vec(dt: DType, count: int) -> DType:
    raise ValueError(f"cannot make a vector of {count} from vector dtype {dt}")


@dataclass(frozen=True, eq=True)
class PtrDType(DType):
    """Pointer to `_base` elements: the dtype of DEFINE_GLOBAL / DEFINE_LOCAL in kernels."""

    _base: DType | None = None
    size: int = -1
    local: bool = False

    @property
    def base(self) -> DType:
        assert self._base is not None
        return self._base

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size}{', local=True' if self.local else ''})"


def _default_dtype(v: DType | str, knob: ContextVar, kind: str) -> DType:
    dt = v if isinstance(v, DType) else to_dtype(v.lower())
    if (dtypes.is_float(dt) if kind == "float" else dtypes.is_int(dt)) and dt.count == 1:
        return dt
    raise TypeError(f"{knob.key}={v!r}: the default {kind} dtype must be a {kind} dtype")


class _DTypesMeta(type):
    """`dtypes.default_float` / `dtypes.default_int` are the DEFAULT_FLOAT / DEFAULT_INT knobs, so that
    `Context(DEFAULT_FLOAT=dtypes.half)` changes them for a block; assigning one (`dtypes.default_float = dtypes.half`)
    sets its knob."""

    @property
    def default_float(cls) -> DType:
        return _default_dtype(DEFAULT_FLOAT.value, DEFAULT_FLOAT, "float")

    @default_float.setter
    def default_float(cls, dt: DType | str) -> None:
        DEFAULT_FLOAT.value = _default_dtype(dt, DEFAULT_FLOAT, "float")

    @property
    def default_int(cls) -> DType:
        return _default_dtype(DEFAULT_INT.value, DEFAULT_INT, "int")

    @default_int.setter
    def default_int(cls, dt: DType | str) -> None:
        DEFAULT_INT.value = _default_dtype(dt, DEFAULT_INT, "int")


class dtypes(metaclass=_DTypesMeta):
    bool: Final[DType] = DType(0, 1, "bool", "?")
    int8: Final[DType] = DType(1, 1, "int8", "b")
    uint8: Final[DType] = DType(2, 1, "uint8", "B")
    int16: Final[DType] = DType(3, 2, "int16", "h")
    uint16: Final[DType] = DType(4, 2, "uint16", "H")
    int32: Final[DType] = DType(5, 4, "int32", "i")
    uint32: Final[DType] = DType(6, 4, "uint32", "I")
    int64: Final[DType] = DType(7, 8, "int64", "q")
    uint64: Final[DType] = DType(8, 8, "uint64", "Q")
    float16: Final[DType] = DType(9, 2, "float16", "e")
    bfloat16: Final[DType] = DType(10, 2, "bfloat16", None)
    float32: Final[DType] = DType(11, 4, "float32", "f")
    float64: Final[DType] = DType(12, 8, "float64", "d")
    void: Final[DType] = DType(-1, 0, "void", None)

    # aliases users know from numpy / torch
    half = float16
    float = float32
    double = float64
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16
    int = int32
    uint = uint32
    long = int64
    ulong = uint64

    # groupings tinygrad code reads
    floats = (float16, bfloat16, float32, float64)
    uints = (uint8, uint16, uint32, uint64)
    sints = (int8, int16, int32, int64)
    ints = uints + sints
    all = floats + ints + (bool,)  # noqa: A003

    # by the scalar's number (DType.key): a set of DTypes hashes and compares them in Python, three calls besides the
    # scalar property's on every ask, and tensor ops ask on every op they build
    @staticmethod
    def is_float(x: DType) -> bool:
        return (x if x._scalar is None else x._scalar).key in _FLOAT_KEYS

    @staticmethod
    def is_int(x: DType) -> bool:
        return (x if x._scalar is None else x._scalar).key in _INT_KEYS

    @staticmethod
    def is_unsigned(x: DType) -> bool:
        return (x if x._scalar is None else x._scalar).key in _UINT_KEYS

    @staticmethod
    def is_bool(x: DType) -> bool:
        return x.scalar == dtypes.bool

    @staticmethod
    def from_py(x: Any) -> DType:
        """The dtype a Python value (or nested list of them) becomes."""
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, float):
            return dtypes.default_float
        if isinstance(x, int):
            # an int the default int cannot hold widens (as torch makes every Python int an int64) instead of wrapping
            if dtypes.min(dtypes.default_int) <= x <= dtypes.max(dtypes.default_int):
                return dtypes.default_int
            if dtypes.min(dtypes.int64) <= x <= dtypes.max(dtypes.int64):
                return dtypes.int64
            raise ValueError(f"integer {x} does not fit in int64")
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
        raise TypeError(f"cannot infer a dtype from {type(x).__name__} value {x!r}")

    @staticmethod
    def as_const(val: Any, dtype: DType) -> Any:
        """A Python value converted the way a cast to `dtype` converts it (wrapping ints, rounding floats)."""
        if isinstance(val, tuple):
            return tuple(dtypes.as_const(v, dtype) for v in val)
        if dtypes.is_float(dtype):
            return float(val) if dtype.scalar == dtypes.float64 else truncate_float(float(val), dtype.scalar)
        if dtypes.is_bool(dtype):
            return bool(val)
        if not isinstance(val, (int, float, bool)):
            return val  # symbolic
        if isinstance(val, float):
            if math.isnan(val) or math.isinf(val):
                return 0
            val = int(val)
        return wrap_int(int(val), dtype.scalar)

    @staticmethod
    def min(dt: DType) -> Any:
        if dtypes.is_int(dt):
            return 0 if dtypes.is_unsigned(dt) else -(2 ** (8 * dt.itemsize - 1))
        return False if dtypes.is_bool(dt) else -math.inf

    @staticmethod
    def max(dt: DType) -> Any:
        if dtypes.is_int(dt):
            bits = 8 * dt.itemsize
            return 2**bits - 1 if dtypes.is_unsigned(dt) else 2 ** (bits - 1) - 1
        return True if dtypes.is_bool(dt) else math.inf

    @staticmethod
    def fields() -> dict[str, DType]:
        return DTYPES_BY_NAME

    @staticmethod
    def finfo(dt: DType) -> tuple[int, int]:
        """(exponent bits, mantissa bits) of a float dtype."""
        if not dtypes.is_float(dt):
            raise ValueError(f"{dt} is not a floating point type")
        return {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}[dt.scalar.name]


FLOATS = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
UINTS = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
SINTS = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64})
INTS = UINTS | SINTS
_FLOAT_KEYS, _INT_KEYS, _UINT_KEYS = (frozenset(d.key for d in group) for group in (FLOATS, INTS, UINTS))
ALL_DTYPES = (dtypes.bool, *sorted(INTS), *sorted(FLOATS))
DTYPES_BY_NAME: dict[str, DType] = {
    k: v
    for k, v in dtypes.__dict__.items()
    if isinstance(v, DType) and not k.startswith(("_", "default")) and k != "void"
}


# tinygrad's names for the same tables: short name -> dtype, and a dtype's name -> its short name
DTYPES_DICT = DTYPES_BY_NAME
INVERSE_DTYPES_DICT: dict[str, str] = {**{v.name: k for k, v in DTYPES_BY_NAME.items() if k == v.name}, "void": "void"}


@functools.cache
def can_lossless_cast(src: DType, dst: DType) -> bool:
    """Whether every value of src is exactly a value of dst (numpy's casting='safe')."""
    if src == dst or src == dtypes.bool:
        return True
    if dtypes.is_float(dst):
        if dtypes.is_float(src):
            e0, m0 = dtypes.finfo(src)
            e1, m1 = dtypes.finfo(dst)
            return e0 <= e1 and m0 <= m1
        # an integer fits when all its bits fit in the mantissa (plus the implicit leading one)
        return dtypes.is_int(src) and 8 * src.itemsize - (not dtypes.is_unsigned(src)) <= dtypes.finfo(dst)[1] + 1
    if dtypes.is_int(dst) and dtypes.is_int(src):
        if dtypes.is_unsigned(src):
            return dst.itemsize > src.itemsize or (dtypes.is_unsigned(dst) and dst.itemsize >= src.itemsize)
        return not dtypes.is_unsigned(dst) and dst.itemsize >= src.itemsize
    return False


def wrap_int(x: int, dt: DType) -> int:
    bits = 8 * dt.itemsize
    x &= (1 << bits) - 1
    return x - (1 << bits) if not dtypes.is_unsigned(dt) and x >= 1 << (bits - 1) else x


def truncate_float(x: float, dt: DType) -> float:
    """Round a Python float to the precision of `dt` (what a cast does on the device)."""
    if math.isnan(x) or math.isinf(x) or dt == dtypes.float64:
        return x
    if dt == dtypes.float32:
        try:
            return struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    if dt == dtypes.float16:
        try:
            return struct.unpack("e", struct.pack("e", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    if dt == dtypes.bfloat16:
        return bf16_to_float(float_to_bf16(x))
    raise ValueError(f"{dt} is not a float dtype")


def float_to_bf16(x: float) -> int:
    """Round-to-nearest-even float32 -> bfloat16 bit pattern."""
    try:
        bits = struct.unpack("I", struct.pack("f", x))[0]
    except OverflowError:
        bits = 0x7F800000 | (0x80000000 if x < 0 else 0)
    if math.isnan(x):
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_to_float(b: int) -> float:
    return struct.unpack("f", struct.pack("I", b << 16))[0]


# Type promotion follows PyTorch: the least upper bound in this lattice, so uint8 + int8 -> int16,
# int32 + uint32 -> int64, float16 + bfloat16 -> float32, any int + any float -> that float.
_PROMO_LATTICE: dict[DType, list[DType]] = {
    dtypes.bool: [dtypes.int8, dtypes.uint8],
    dtypes.int8: [dtypes.int16],
    dtypes.int16: [dtypes.int32],
    dtypes.int32: [dtypes.int64],
    dtypes.int64: [dtypes.float16, dtypes.bfloat16],
    dtypes.uint8: [dtypes.int16, dtypes.uint16],
    dtypes.uint16: [dtypes.int32, dtypes.uint32],
    dtypes.uint32: [dtypes.int64, dtypes.uint64],
    dtypes.uint64: [dtypes.float16, dtypes.bfloat16],
    dtypes.float16: [dtypes.float32],
    dtypes.bfloat16: [dtypes.float32],
    dtypes.float32: [dtypes.float64],
    dtypes.float64: [],
}


@functools.cache
def _upper_set(dt: DType) -> frozenset[DType]:
    return frozenset([dt]).union(*[_upper_set(u) for u in _PROMO_LATTICE[dt]])


@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
    common = frozenset.intersection(*[_upper_set(d.scalar) for d in ds])
    if not common:
        raise TypeError(f"no common dtype for {', '.join(map(repr, ds))}")
    # minimal elements of the common upper set; int64 + uint64 has two (float16, bfloat16): take their join
    minimal = [d for d in common if not any(o != d and d in _upper_set(o) for o in common)]
    return minimal[0] if len(minimal) == 1 else least_upper_dtype(*minimal)


def least_upper_float(dt: DType) -> DType:
    return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


class UnknownDTypeError(TypeError, AttributeError):
    """A dtype name that names none: a TypeError as torch's, an AttributeError as tinygrad's (getattr on dtypes)."""


def to_dtype(x: DType | str) -> DType:
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES_BY_NAME:
        return DTYPES_BY_NAME[x]
    raise UnknownDTypeError(f"unknown dtype {x!r}; expected a lazygrad DType or one of {sorted(DTYPES_BY_NAME)}")


def _to_np_dtype(dt: DType) -> Any:
    """The numpy dtype holding `dt`'s values (None for bfloat16, which numpy lacks)."""
    import numpy as np

    return None if dt.fmt is None else np.dtype(np.bool_ if dt == dtypes.bool else dt.fmt)


def sum_acc_dtype(dt: DType) -> DType:
    """What sum/prod of `dt` returns: integers and bools widen to int64 (uint64 stays), like torch."""
    if dtypes.is_float(dt):
        return dt
    return dtypes.uint64 if dt == dtypes.uint64 else dtypes.int64
