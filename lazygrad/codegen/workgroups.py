"""The default opts of a kernel (no BEAM): the generic heuristic, and for GPU-style targets (`has_local`) the
workgroup shape around it: when a reduce is split across a workgroup (GROUP, decided first) and which output axes
become LOCAL threads (decided last, on what the generic heuristic left)."""

from __future__ import annotations

from lazygrad.codegen.heuristic import hand_coded_optimizations
from lazygrad.codegen.kernel import AxisType, Kernel, Opt, OptOps
from lazygrad.dtype import dtypes
from lazygrad.helpers import getenv, prod

THREADS_PER_GROUP = 128  # a few warps: enough to hide latency, small enough to leave registers per thread
GROUP_THREADS = 256  # a split reduce has one accumulator per thread: it can afford a larger workgroup
# up to this many outputs, one thread per output cannot fill a GPU (an H100 holds 270k threads at once, 2k per SM):
# a long reduce is split too. A conv's weight gradient (32 x 16 x 3 x 3 = 4608 outputs, each summing 64 x 8 x 8
# products, in the digits CNN) ran on 9 SMs of 132 for 360 us
FEW_OUTPUTS = 16384
GROUP_MIN_REDUCE = 256  # a reduce this long is worth splitting: each thread still sums a run of its own
TC = getenv("TC", 1)  # 0: no tensor cores in the default opts (BEAM still tries them)
TC_STAGE = getenv("TC_STAGE", 1)  # 0: a tensor-core kernel reads its fragments from global memory, not shared


def _workgroup_size(k: Kernel) -> int:
    return prod(s for s, t in zip(k.full_shape, k.axis_types) if t in (AxisType.LOCAL, AxisType.GROUP))


def _budget(k: Kernel, threads: int = THREADS_PER_GROUP) -> int:
    """How many times larger the workgroup may still grow."""
    return min(threads, (k.renderer.max_workgroup or threads)) // _workgroup_size(k)


def default_optimizations(k: Kernel) -> Kernel:
    """The opts a kernel gets without BEAM: the generic heuristic, and on GPU targets workgroup shapes around it."""
    gpu = k.renderer.has_local
    if gpu and TC and tensor_core(k):
        return k
    if gpu and staged_matmul(k):
        return k
    if gpu:
        group_reduce(k)  # first: the generic heuristic unrolls what is left of the reduce
        if not k.axes_of(AxisType.REDUCE, AxisType.GROUP) and not k.renderer.vector_widths:
            # elementwise, and no vector loads (CUDA): neighbouring threads take neighbouring elements (one
            # coalesced transaction per warp), so the threads are placed first; then 4 elements per thread (loads in
            # flight), the next factor of the innermost axis
            local_axes(k)
            globals_ = k.axes_of(AxisType.GLOBAL)
            if globals_ and k.full_shape[globals_[-1]] % 4 == 0 and k.full_shape[globals_[-1]] >= 1024:
                k.try_opt(Opt(OptOps.UPCAST, len(globals_) - 1, 4))
    hand_coded_optimizations(k)
    if gpu:
        local_axes(k)
    return k


def group_reduce(k: Kernel) -> Kernel:
    """A long reduce with few outputs: neighbouring threads of a workgroup take neighbouring elements (coalesced
    reads) and combine their partial results through shared memory."""
    reduce_axes = k.axes_of(AxisType.REDUCE)
    if not reduce_axes or prod(k.full_shape[a] for a in k.axes_of(AxisType.GLOBAL)) > FEW_OUTPUTS:
        return k
    if prod(k.full_shape[a] for a in reduce_axes) < GROUP_MIN_REDUCE:
        return k
    itemsize = max((r.dtype.itemsize for r in k.reduceops), default=4)
    shared_max = k.renderer.shared_max
    for amount in (256, 128, 64, 32, 16):
        fits = amount <= _budget(k, GROUP_THREADS) and amount * itemsize * len(k.reduceops) <= shared_max
        # the innermost reduce axis first (neighbouring threads read neighbouring elements), then the outer ones (a
        # conv's batch axis: its spatial axes are too short to split)
        for i in reversed(range(len(reduce_axes))):
            size = k.full_shape[reduce_axes[i]]
            if fits and size % amount == 0 and size >= 2 * amount and k.try_opt(Opt(OptOps.GROUP, i, amount)):
                return k
    return k


def local_axes(k: Kernel) -> Kernel:
    """Threads of a workgroup over the innermost output axes (dimension 0 runs together: coalesced loads)."""
    local_max = k.renderer.local_max or (THREADS_PER_GROUP,) * 3
    for axis_no in reversed(range(len(k.axes_of(AxisType.GLOBAL)))):
        budget = _budget(k)
        if budget < 2:
            break
        size = k.full_shape[k.axes_of(AxisType.GLOBAL)[axis_no]]
        # elementwise: a workgroup of one warp leaves half a GPU's thread slots empty (an SM holds at most 32
        # workgroups); a reduce keeps 32 threads per axis, its register tile is shaped around them
        widest = THREADS_PER_GROUP if not k.axes_of(AxisType.REDUCE, AxisType.GROUP) else 32
        for amount in (a for a in (128, 64, 32, 16, 8, 4, 2) if a <= widest):
            if amount <= min(budget, local_max[0]) and size % amount == 0:
                if k.try_opt(Opt(OptOps.LOCAL, axis_no, amount)):
                    break
    return k


# a staged float matmul's tile: threads along N and M, outputs per thread along N and M, K per reduce step
MATMUL_TILE = (16, 8, 8, 8, 8)
MATMUL_MIN_GROUPS = 256  # fewer workgroups of that tile than this: unmeasured (a GPU of 132 SMs left half idle)


def staged_matmul(k: Kernel) -> bool:
    """A float matmul on a GPU whose loads move 16 bytes: a 64 x 128 output tile per workgroup of 8 x 16 threads,
    8 x 8 outputs per thread, both inputs staged in shared memory 8 steps of the reduce at a time. The threads take
    the innermost output positions (neighbouring threads, neighbouring columns: coalesced stores, and reads of the
    staged B tile without bank conflicts), the register tile the next ones. Measured on an H200 (4096^3 float32,
    bench/gpu.py SWEEP=1): 30.5 TFLOPS, against 15.8 for the generic heuristic's unstaged 32 x 4 threads of 8 x 4
    outputs; 29.9 for 32 x 4 threads, 28.3 with 4 reduce steps per stage, and about half without staging."""
    found = k.product_axes() if k.renderer.wide_load_bytes and not k.applied_opts else None
    if found is None or not dtypes.is_float(k.reduceops[0].dtype):
        return False
    x, y, m, n, r = found
    if m > n:  # the factor along the innermost output axis is "y" here: its axis takes the threads
        x, y, m, n = y, x, n, m
    ln, lm, un, um, unroll = MATMUL_TILE
    shape = k.full_shape
    outputs = prod(shape[a] for a in k.axes_of(AxisType.GLOBAL))
    fits = shape[n] % (ln * un) == 0 and shape[m] % (lm * um) == 0 and shape[r] % (2 * unroll) == 0
    if not fits or outputs < MATMUL_MIN_GROUPS * ln * un * lm * um:
        return False
    # the axis numbers of M and N change as they are split: look them up again for each opt
    for opt, (mine, other), amount in (
        (OptOps.LOCAL, (y, x), ln),
        (OptOps.LOCAL, (x, y), lm),
        (OptOps.UPCAST, (y, x), un),
        (OptOps.UPCAST, (x, y), um),
    ):
        axis = k.outer_axis(mine, other)
        k.apply_opt(Opt(opt, k.axes_of(AxisType.GLOBAL).index(axis), amount))  # type: ignore[arg-type]
    r = k.product_axes()[4]  # type: ignore[index]
    k.apply_opt(Opt(OptOps.UNROLL, k.axes_of(AxisType.REDUCE).index(r), unroll))
    for i in range(len(k.stage_candidates)):
        k.try_opt(Opt(OptOps.STAGE, i, 0))
    return True


def tensor_core(k: Kernel) -> bool:
    """A matmul-like reduce of 16-bit floats on a tensor core. Each warp computes a block of instruction tiles: 4 of
    A's row tiles by 8 of B's column tiles (32 MMAs per 4 + 8 fragment loads), 4 warps per workgroup, the reduce
    unrolled by 4 with both inputs staged in shared memory each step (STAGE). Measured on an H200 (4096^3 half,
    bench/gpu.py SWEEP=1): 251 TFLOPS, against 232 for 4 x 1 warps, 193 for the reduce unrolled by 2 and 110
    without staging (fragments loaded from global memory; before fragments were loaded two halves at a time and
    addressed in int32 that was 76, against 57 for 2 x 8 tiles and 8 warps and 23 for 2 x 2 tiles). Smaller
    matrices take the largest factors that divide them."""
    if not k.tc_choices():
        return False
    k.apply_opt(Opt(OptOps.TC, 0, 0))
    for opt, operand, amounts in (
        (OptOps.UPCAST, "a", (4, 2)),
        (OptOps.UPCAST, "b", (8, 4, 2)),
        (OptOps.LOCAL, "a", (2,)),
        (OptOps.LOCAL, "b", (2,)),
    ):
        axis = k.tc_outer_axis(operand)
        if axis is None:
            continue
        for amount in amounts:
            if k.full_shape[axis] % amount == 0 and k.try_opt(Opt(opt, k.axes_of(AxisType.GLOBAL).index(axis), amount)):
                break
    reduce_axes = k.axes_of(AxisType.REDUCE)
    # by 4 only where it leaves a loop to stage (each pair of barriers is then paid for by 128 MMAs per warp)
    size = k.full_shape[reduce_axes[0]] if reduce_axes else 1
    for amount in (4, 2) if TC_STAGE else (2,):
        if size % amount == 0 and (amount == 2 or size // amount >= 2) and k.try_opt(Opt(OptOps.UNROLL, 0, amount)):
            break
    if TC_STAGE and k.axes_of(AxisType.REDUCE):
        for i in range(len(k.stage_candidates)):
            k.try_opt(Opt(OptOps.STAGE, i, 0))
    return True
