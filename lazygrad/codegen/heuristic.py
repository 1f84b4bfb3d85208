"""Hand-written default optimizations: cheap rules that are right for most kernels (BEAM searches the rest)."""

from __future__ import annotations

from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps
from lazygrad.helpers import prod


def hand_coded_optimizations(k: Kernel) -> Kernel:
    # tiny kernels: loop overhead is nothing, unrolling only grows the code
    if prod(k.full_shape) < 64:
        return k
    # unroll a short inner stretch of the reduce: independent partial sums the compiler can pipeline
    reduce_axes = k.axes_of(AxisType.REDUCE)
    if reduce_axes:
        last = len(reduce_axes) - 1
        size = k.full_shape[reduce_axes[last]]
        for amount in (4, 2):
            if size % amount == 0 and size > amount:
                _try(k, Opt(OptOps.UNROLL, last, amount))
                break
    # several outputs per iteration along the last output axis
    global_axes = k.axes_of(AxisType.GLOBAL)
    if global_axes:
        last = len(global_axes) - 1
        size = k.full_shape[global_axes[last]]
        for amount in (4, 2):
            if size % amount == 0 and size > amount:
                _try(k, Opt(OptOps.UPCAST, last, amount))
                break
    return k


def _try(k: Kernel, opt: Opt) -> bool:
    try:
        k.apply_opt(opt)
        return True
    except KernelOptError:
        return False
