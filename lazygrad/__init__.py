"""lazygrad: a lazy Tensor, a small IR, a kernel fuser and optimizer, and runtimes that compile and run the kernels."""

from lazygrad import amp, autograd, distributions, linalg, nn
from lazygrad.device import Device
from lazygrad.dtype import dtypes
from lazygrad.engine.jit import JitError, TinyJit
from lazygrad.function import function
from lazygrad.helpers import Context, GlobalCounters, fetch, getenv
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import UOp

Variable = UOp.variable  # Variable("pos", 0, 100).bind(n): a symbolic int, passed to kernels as an argument

__all__ = [
    "Tensor",
    "TinyJit",
    "function",
    "JitError",
    "Variable",
    "dtypes",
    "Device",
    "Context",
    "GlobalCounters",
    "getenv",
    "fetch",
    "UOp",
    "nn",
    "autograd",
    "amp",
    "distributions",
    "linalg",
]
