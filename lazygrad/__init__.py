"""lazygrad: a lazy Tensor, a small IR, a kernel fuser and optimizer, and runtimes that compile and run the kernels."""

from lazygrad.device import Device
from lazygrad.dtype import dtypes
from lazygrad.helpers import Context, GlobalCounters, getenv
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import UOp

__all__ = ["Tensor", "dtypes", "Device", "Context", "GlobalCounters", "getenv", "UOp"]
