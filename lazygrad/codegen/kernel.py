"""A kernel's iteration space and the optimizations applied to it.

Every VIEW in a kernel AST has the kernel's full shape (reduce axes are 1 after the reduce). An optimization
reshapes and permutes all views at once and gives the new axis a kind; lowering then turns each kind into loops,
thread ids, or unrolled registers. The list of applied `Opt`s is the kernel's printable, cacheable recipe.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from lazygrad.dtype import dtypes
from lazygrad.helpers import colored, prod, to_function_name
from lazygrad.renderer import Renderer
from lazygrad.renderer.tensor_cores import TensorCore
from lazygrad.uop.ops import Ops, UOp, smul, substitute
from lazygrad.uop.symbolic import simplify
from lazygrad.uop.view import ShapeTracker, View, full_shape, strides_for_shape


class AxisType(enum.Enum):
    GLOBAL = "blue"  # a loop (CPU) or grid index (GPU) over outputs
    THREAD = "BLUE"  # split across CPU cores
    THREAD_REDUCE = "RED"  # a reduce split across CPU cores, partial results combined after
    LOCAL = "cyan"  # workgroup index (GPU)
    GROUP = "green"  # reduce split across a workgroup through shared memory
    REDUCE = "red"  # a reduce loop
    UNROLL = "magenta"  # a reduce axis unrolled into registers
    UPCAST = "yellow"  # an output axis computed per thread in registers
    TC = "white"  # one dimension (M, N or K, in that order) of a tensor core's tile, spread over a warp's lanes

    @property
    def expanded(self) -> bool:
        return self in (AxisType.UNROLL, AxisType.UPCAST)

    @property
    def is_reduce(self) -> bool:
        return self in (AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP, AxisType.THREAD_REDUCE)


class OptOps(enum.Enum):
    UPCAST = enum.auto()
    UNROLL = enum.auto()
    LOCAL = enum.auto()
    GROUP = enum.auto()
    GROUPTOP = enum.auto()
    THREAD = enum.auto()
    PADTO = enum.auto()
    SWAP = enum.auto()
    TC = enum.auto()
    STAGE = enum.auto()
    BLOCK = enum.auto()
    OVERLAP = enum.auto()  # UPCAST by an amount that need not divide the axis: tiles that overlap at its end
    MERGE = enum.auto()  # an axis and the next one (of the same kind) become one, its views indexed through // and %


@dataclass(frozen=True, order=True)
class Opt:
    op: OptOps
    axis: int
    amount: int

    def __repr__(self) -> str:
        return f"Opt(op=OptOps.{self.op.name}, axis={self.axis}, amount={self.amount})"


# every expanded value is a copy of the loop body (a vector's lanes count each): past this gcc takes seconds (a conv's
# 16 x 16 x 3 tile, 768 values as 48 AVX-512 vectors, lowers and compiles in 0.2 s)
MAX_EXPANDED = 1024


@dataclass(frozen=True)
class StageLayout:
    """A staged tile in shared memory (see Kernel.stage_layout): its axes, outermost first, their sizes and element
    strides there, the elements each load of the copy moves, and the tile's elements with padding."""

    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    pitch: tuple[int, ...]
    width: int
    size: int


def _is_zero(x: UOp) -> bool:
    return x.op is Ops.CONST and x.arg == 0


class KernelOptError(Exception):
    """An Opt that does not apply to this kernel (wrong axis kind, size not divisible, over a device limit)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise KernelOptError(msg)


def mul_operands(reduce: UOp, dtype_in: object) -> tuple[UOp, UOp] | None:
    """The two factors of a sum of products whose factors have dtype `dtype_in`: `sum(cast(x * y))` (a matmul of
    halves: the products are exact in a tensor core) or `sum(cast(x) * cast(y))`; None for any other reduce."""
    if reduce.op is not Ops.REDUCE_AXIS or reduce.arg[0] is not Ops.ADD:
        return None
    src = reduce.src[0]
    if src.op is Ops.CAST and src.src[0].op is Ops.MUL and src.src[0].dtype == dtype_in:
        return src.src[0].src[0], src.src[0].src[1]
    if src.op is Ops.MUL and all(x.op is Ops.CAST and x.src[0].dtype == dtype_in for x in src.src):
        return src.src[0].src[0], src.src[1].src[0]
    return None


def product_factors(reduce: UOp) -> tuple[UOp, UOp] | None:
    """The two factors of a sum of products, `sum(x * y)`, a cast around the product or around each factor
    looked through; None for any other reduce."""
    if reduce.op is not Ops.REDUCE_AXIS or reduce.arg[0] is not Ops.ADD:
        return None
    src = reduce.src[0].src[0] if reduce.src[0].op is Ops.CAST else reduce.src[0]
    if src.op is not Ops.MUL:
        return None
    x, y = (f.src[0] if f.op is Ops.CAST else f for f in src.src)
    return x, y


def _splits(shape: tuple[int, ...], finer: tuple[int, ...]) -> bool:
    """Whether `finer` is `shape` with some axes split into several (the sizes of each group multiply to one axis)."""
    if not all(isinstance(s, int) for s in finer) or len(finer) <= len(shape):
        return False
    i = 0
    for size in shape:
        acc = 1
        while i < len(finer) and (acc < size or finer[i] == 1):
            acc, i = acc * finer[i], i + 1
        if acc != size:
            return False
    return i == len(finer)


def _permuted_whole(v: View) -> bool:
    """Whether view v reads every element of a contiguous buffer once, in some order of its axes (a permute)."""
    if v.mask is not None or v.offset != 0 or not all(isinstance(x, int) for x in (*v.shape, *v.strides)):
        return False
    dims = sorted((st, s) for s, st in zip(v.shape, v.strides) if s != 1)
    acc = 1
    for st, s in dims:
        if st != acc:
            return False
        acc *= s
    return True


class Kernel:
    def __init__(self, ast: UOp, renderer: Renderer):
        assert ast.op is Ops.SINK, f"a kernel AST is a SINK, not {ast.op}"
        self.ast, self.renderer = ast, renderer
        self.views: list[UOp] = [x for x in ast.toposort if x.op is Ops.VIEW]
        self.sts: list[ShapeTracker] = [v.arg for v in self.views]
        shapes = [st.shape for st in self.sts]
        self.full_shape: tuple[int, ...] = full_shape(shapes)
        reduce_axes = {a for x in ast.toposort if x.op is Ops.REDUCE_AXIS for a in x.arg[1]}
        self.axis_types: list[AxisType] = [
            AxisType.REDUCE if i in reduce_axes else AxisType.GLOBAL for i in range(len(self.full_shape))
        ]
        self.applied_opts: list[Opt] = []
        self.reduceops = [x for x in ast.toposort if x.op is Ops.REDUCE_AXIS]
        # set by the TC opt: the instruction, and whether the reduce's first factor is its A (M x K) operand
        self.tensor_core: TensorCore | None = None
        self.tc_a_first = True
        # STAGE: the inputs of the reduce (indices into `stage_candidates`) whose tile is copied to shared memory
        self.staged: list[int] = []
        # per axis: (amount, size) where OVERLAP tiled it (its loop starts a tile every `amount` of `size` outputs, the
        # last one at size - amount), else None
        self.tile_steps: list[tuple[int, int] | None] = [None] * len(self.full_shape)
        self._split_to_inner_view()
        self._drop_ones()

    # *** shape bookkeeping ***

    def _reshape_all(
        self,
        new_shape_of: list[tuple[int, ...]],
        types: list[AxisType],
        steps: list[tuple[int, int] | None] | None = None,
    ) -> None:
        assert steps is not None or not any(self.tile_steps), "a reshape must say where the overlapping tiles go"
        self.sts = [st.reshape(ns) for st, ns in zip(self.sts, new_shape_of)]
        self.axis_types = types
        self.full_shape = full_shape([st.shape for st in self.sts])
        self.tile_steps = steps if steps is not None else [None] * len(types)

    def _permute_all(self, order: list[int]) -> None:
        self.sts = [st.permute(tuple(order)) for st in self.sts]
        self.axis_types = [self.axis_types[i] for i in order]
        self.full_shape = tuple(self.full_shape[i] for i in order)
        self.tile_steps = [self.tile_steps[i] for i in order]

    def _split_to_inner_view(self) -> None:
        """A copy that reads a reshape of a permuted buffer (a blocked conv's output (n, c/8, h, w, 8) read as NCHW)
        indexes it through two views, its flat index cut apart again with // and %, and its axes merge into one loop
        where no tile can see the transpose. Where the inner view's shape splits the kernel's axes, every view is
        reshaped to it: the read becomes one view of plain strides, and the axis along which it is unit-stride
        appears (the heuristic's 8 x 8 transpose tile). Copies only: a reduce keeps the axes it was tuned on."""
        if self.reduceops or not all(isinstance(s, int) for s in self.full_shape):
            return
        for st in self.sts:
            inner = st.views[0].shape
            if len(st.views) != 2 or not st.views[-1].contiguous or not _permuted_whole(st.views[0]):
                continue
            if not _splits(self.full_shape, inner):
                continue
            new = [
                ShapeTracker(o.views[:1])
                if o.views[-1].contiguous and o.views[0].shape == inner and len(o.views) == 2
                else o.reshape(inner)
                for o in self.sts
            ]
            if any(len(o.views) > len(old.views) for o, old in zip(new, self.sts)):
                continue  # another view cannot take the split: no gain
            self.sts = new
            self.full_shape = full_shape([o.shape for o in new])
            self.axis_types = [AxisType.GLOBAL] * len(self.full_shape)
            self.tile_steps = [None] * len(self.full_shape)
            return

    def _drop_ones(self) -> None:
        """Size-1 axes never index anything; dropping them keeps loops and names short."""
        keep = [i for i, s in enumerate(self.full_shape) if s != 1]
        if len(keep) == len(self.full_shape):
            return
        self._reshape_all(
            [tuple(st.shape[i] for i in keep) for st in self.sts],
            [self.axis_types[i] for i in keep],
            [self.tile_steps[i] for i in keep],
        )

    def merge_axes(self) -> None:
        """Merge neighbouring axes of the same kind that every view can merge: (64, 64, 64) contiguous is one loop."""
        i = 0
        while i + 1 < len(self.full_shape):
            if self.axis_types[i] == self.axis_types[i + 1] and all(self._mergeable(st, i) for st in self.sts):
                new_shapes = [
                    st.shape[:i] + (smul(st.shape[i], st.shape[i + 1]),) + st.shape[i + 2 :] for st in self.sts
                ]
                self._reshape_all(new_shapes, self.axis_types[: i + 1] + self.axis_types[i + 2 :])
            else:
                i += 1

    @staticmethod
    def _mergeable(st: ShapeTracker, i: int) -> bool:
        # only when the last view can merge them itself; stacking another view would make indexing costlier
        v = st.views[-1]
        return v.reshape(v.shape[:i] + (smul(v.shape[i], v.shape[i + 1]),) + v.shape[i + 2 :]) is not None

    def shift_to(self, axis: int, amount: int, new_type: AxisType, top: bool = False) -> None:
        """Split `axis` into (size/amount, amount) and move the `amount` part to the end with kind `new_type`."""
        size = self.full_shape[axis]
        check(amount > 1 and size % amount == 0, f"cannot split axis {axis} of size {size} by {amount}")
        check(self.tile_steps[axis] is None, f"axis {axis} runs over overlapping tiles: it is not split again")
        inner = (amount, size // amount) if top else (size // amount, amount)
        new_shapes = []
        for st in self.sts:
            s = st.shape[axis]
            split = inner if s != 1 else (1, 1)
            new_shapes.append(st.shape[:axis] + split + st.shape[axis + 1 :])
        old_type = self.axis_types[axis]
        steps = self.tile_steps[:axis] + [None, None] + self.tile_steps[axis + 1 :]
        self._reshape_all(
            new_shapes, self.axis_types[:axis] + [old_type, old_type] + self.axis_types[axis + 1 :], steps
        )
        self._to_end(axis, top, new_type)

    def _to_end(self, axis: int, top: bool, new_type: AxisType) -> None:
        """After `axis` was split in two: move its inner part (outer with `top`) last, of kind `new_type`."""
        moved = axis if top else axis + 1
        order = [i for i in range(len(self.full_shape)) if i != moved] + [moved]
        self._permute_all(order)
        self.axis_types[-1] = new_type
        self._drop_ones()

    def shift_overlapped(self, axis: int, amount: int) -> None:
        """OVERLAP: a register tile of `amount` outputs along `axis` (moved last, UPCAST) where `amount` does not divide
        the axis: a tile starts every `amount` outputs and the last one at size - amount, overlapping the one before.
        The outputs in both are computed twice, the same way, and stored twice with the same value, by the one thread
        that runs both tiles; no load or store needs a bounds check. Each view's last view indexes the axis as tile
        start + lane: (size - amount + 1, amount), both with the axis's stride; the lowerer runs the starts in steps of
        `amount`."""
        size = self.full_shape[axis]
        check(isinstance(size, int) and 1 < amount < size, f"cannot tile axis {axis} of size {size} by {amount}")
        check(not self.renderer.has_local, "overlapping tiles are for CPU threads, each owning its tiles")
        check(self.tile_steps[axis] is None, f"axis {axis} runs over overlapping tiles already")
        starts = size - amount + 1
        sts = []
        for st in self.sts:
            if st.shape[axis] == 1:
                sts.append(st.reshape(st.shape[:axis] + (1, 1) + st.shape[axis + 1 :]))
                continue
            v = st.views[-1]  # the view the loop indices index (a window's views below it take its index as it is)
            if v.mask is not None and v.mask[axis] != (0, size):
                # a mask along the axis cannot be cut into (start, lane): a view on top indexes it at start + lane
                strides = strides_for_shape(v.shape)
                on_top = View.create(
                    v.shape[:axis] + (starts, amount) + v.shape[axis + 1 :],
                    strides[:axis] + (strides[axis], strides[axis]) + strides[axis + 1 :],
                )
                sts.append(ShapeTracker(st.views + (on_top,)))
                continue
            check(isinstance(v.strides[axis], int), f"axis {axis}: a symbolic stride")
            mask = None if v.mask is None else v.mask[:axis] + ((0, starts), (0, amount)) + v.mask[axis + 1 :]
            view = View.create(
                v.shape[:axis] + (starts, amount) + v.shape[axis + 1 :],
                v.strides[:axis] + (v.strides[axis], v.strides[axis]) + v.strides[axis + 1 :],
                v.offset,
                mask,
            )
            sts.append(ShapeTracker(st.views[:-1] + (view,)))
        old_type = self.axis_types[axis]
        self.sts = sts
        self.axis_types = self.axis_types[:axis] + [old_type, old_type] + self.axis_types[axis + 1 :]
        self.full_shape = full_shape([st.shape for st in self.sts])
        self.tile_steps = self.tile_steps[:axis] + [(amount, size), None] + self.tile_steps[axis + 1 :]
        self._to_end(axis, False, AxisType.UPCAST)

    # *** applying opts ***

    def axes_of(self, *types: AxisType) -> list[int]:
        return [i for i, t in enumerate(self.axis_types) if t in types]

    def apply_opt(self, opt: Opt) -> None:
        """Apply one Opt. `axis` counts GLOBAL axes for output opts and REDUCE axes for reduce opts; THREAD counts
        GLOBAL then REDUCE axes; SWAP exchanges GLOBAL axes `axis` and `amount`; BLOCK cuts GLOBAL axis `axis` into
        `amount` blocks, the block number becoming the outermost output loop. An opt that leaves the staged tiles
        (STAGE) too large for shared memory is refused, and the kernel left as it was."""
        before = (self.sts, self.axis_types, self.full_shape, list(self.applied_opts), list(self.staged))
        self._apply_opt(opt)
        if self.staged and (why := self._stage_refusal()) is not None:
            self.sts, self.axis_types, self.full_shape, self.applied_opts, self.staged = before
            raise KernelOptError(f"{opt}: {why}")

    def _stage_refusal(self) -> str | None:
        """Why the staged tiles cannot be lowered as the kernel is now, or None."""
        if not self.axes_of(AxisType.REDUCE):
            return "a staged input needs a reduce loop to step through"
        if not self.axes_of(AxisType.LOCAL) and self.tensor_core is None:
            return "a staged input needs a workgroup to copy it"
        if (nbytes := self.stage_bytes()) > self.renderer.shared_max:
            return f"the staged tiles need {nbytes} bytes of shared memory; the device has {self.renderer.shared_max}"
        return None

    def _apply_opt(self, opt: Opt) -> None:
        if opt.op is OptOps.SWAP:
            self._swap(opt)
            self.applied_opts.append(opt)
            return
        if opt.op is OptOps.TC:
            self._tensor_core(opt)
            self.applied_opts.append(opt)
            return
        if opt.op is OptOps.STAGE:
            self._stage(opt)
            self.applied_opts.append(opt)
            return
        if opt.op is OptOps.MERGE:
            self._merge(opt)
            self.applied_opts.append(opt)
            return
        if opt.op in (OptOps.UPCAST, OptOps.OVERLAP, OptOps.LOCAL, OptOps.BLOCK):
            candidates = self.axes_of(AxisType.GLOBAL)
        elif opt.op is OptOps.THREAD:  # GLOBAL axes, then REDUCE axes (a reduce split into per-thread partials)
            candidates = self.axes_of(AxisType.GLOBAL) + self.axes_of(AxisType.REDUCE)
        elif opt.op in (OptOps.UNROLL, OptOps.GROUP, OptOps.GROUPTOP):
            candidates = self.axes_of(AxisType.REDUCE)
        else:
            raise KernelOptError(f"{opt.op} is not supported by this kernel yet")
        check(0 <= opt.axis < len(candidates), f"{opt}: no such axis (kernel {self.name_plain})")
        split = opt.op in (OptOps.GROUP, OptOps.GROUPTOP, OptOps.THREAD)
        check(not (self.staged and split), f"{opt}: a staged reduce is not split")
        axis = candidates[opt.axis]
        amount = opt.amount if opt.amount != 0 else self.full_shape[axis]
        limit = {OptOps.UPCAST: 16, OptOps.OVERLAP: 16, OptOps.UNROLL: 32}.get(opt.op)
        check(limit is None or amount <= limit, f"{opt}: amount over the limit of {limit}")
        if opt.op in (OptOps.UPCAST, OptOps.OVERLAP, OptOps.UNROLL):
            # every expanded combination is a copy of the loop body: past this the compiler takes seconds
            check(self.upcast_size * amount <= MAX_EXPANDED, f"{opt}: more than {MAX_EXPANDED} expanded values")
        if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):  # refused here rather than by the GPU driver
            check(self.tensor_core is None or opt.op is OptOps.LOCAL, f"{opt}: a tensor-core reduce is not split")
            threads = amount * self.workgroup_threads
            max_threads = self.renderer.max_workgroup or threads
            check(
                threads <= max_threads,
                f"{opt}: {threads} threads per workgroup, over the device's limit of {max_threads}",
            )
        if opt.op is OptOps.UPCAST:
            self.shift_to(axis, amount, AxisType.UPCAST)
        elif opt.op is OptOps.OVERLAP:
            self.shift_overlapped(axis, amount)
        elif opt.op is OptOps.UNROLL:
            self.shift_to(axis, amount, AxisType.UNROLL)
        elif opt.op is OptOps.THREAD:
            # amount 0 shares the whole axis out among the cores, whatever its size; otherwise `amount` chunks
            check(self.renderer.has_threads, "renderer has no CPU threads")
            check(not self.axes_of(AxisType.THREAD, AxisType.THREAD_REDUCE), "only one THREAD axis per kernel")
            if self.axis_types[axis] is AxisType.REDUCE:
                check(opt.amount != 0 and amount <= 256, f"{opt}: a split reduce needs an explicit count of partials")
                # the parallel region opens inside the output loops: worth it only for a few outputs
                outputs = prod(self.full_shape[a] for a in self.axes_of(AxisType.GLOBAL))
                check(outputs <= 32, f"{opt}: {outputs} outputs are too many to split the reduce")
                self.shift_to(axis, amount, AxisType.THREAD_REDUCE, top=True)
            else:
                self.shift_to(axis, amount, AxisType.THREAD, top=True)
        elif opt.op is OptOps.BLOCK:
            self.shift_to(axis, amount, AxisType.GLOBAL, top=True)
            last = len(self.full_shape) - 1
            self._permute_all([last, *range(last)])
        elif opt.op is OptOps.LOCAL:
            check(self.renderer.has_local, "renderer has no local (workgroup) axes")
            self.shift_to(axis, amount, AxisType.LOCAL)
        else:
            check(self.renderer.has_shared, "renderer has no shared memory")
            self.shift_to(axis, amount, AxisType.GROUP, top=opt.op is OptOps.GROUPTOP)
        self.applied_opts.append(opt)

    @property
    def workgroup_threads(self) -> int:
        """Threads of one workgroup: LOCAL and GROUP axes, times the warp of a tensor core."""
        threads = prod(s for s, t in zip(self.full_shape, self.axis_types) if t in (AxisType.LOCAL, AxisType.GROUP))
        return threads * (self.tensor_core.threads if self.tensor_core is not None else 1)

    def _depends(self, x: UOp, axis: int) -> bool:
        """Whether the value of `x` (a subtree of the AST) changes along `axis`: some view under it moves its address
        or its mask with the axis."""
        for v in (n for n in x.toposort if n.op is Ops.VIEW):
            st = self.sts[self.views.index(v)]
            if st.shape[axis] == 1:
                continue
            at = [UOp.const(dtypes.int32, 0)] * len(st.shape)
            at[axis] = probe = UOp.variable("tc_probe", 0, st.shape[axis] - 1)
            idx, valid = st.to_index(at)
            if probe in simplify(idx).toposort or probe in simplify(valid).toposort:
                return True
        return False

    def tc_choices(self) -> list[tuple[TensorCore, bool, int, int, int]]:
        """Ways to run this kernel's reduce on a tensor core of the renderer: (instruction, first factor is A,
        M axis, N axis, K axis). M is an output axis only A moves along, N one only B moves along, K a reduce axis
        both move along; each a multiple of the instruction's tile."""
        if len(self.reduceops) != 1 or self.applied_opts:
            return []
        (r,) = self.reduceops
        out = []
        for tc in self.renderer.tensor_cores:
            factors = mul_operands(r, tc.dtype_in)
            if r.dtype != tc.dtype_out or factors is None:
                continue
            x, y = factors
            glob, red = self.axes_of(AxisType.GLOBAL), self.axes_of(AxisType.REDUCE)
            dep = {a: (self._depends(x, a), self._depends(y, a)) for a in glob + red}
            (tm, tn, tk) = tc.dims
            for a_first in (True, False):
                only_a, only_b = ((True, False), (False, True)) if a_first else ((False, True), (True, False))
                for m in (a for a in glob if dep[a] == only_a and self.full_shape[a] % tm == 0):
                    for n in (a for a in glob if dep[a] == only_b and self.full_shape[a] % tn == 0):
                        for k in (a for a in red if dep[a] == (True, True) and self.full_shape[a] % tk == 0):
                            out.append((tc, a_first, m, n, k))
        return out

    def tc_outer_axis(self, operand: str) -> int | None:
        """After TC: the last output axis only the `operand` ("a" or "b") factor moves along (the rest of M or N)."""
        assert self.tensor_core is not None
        x, y = mul_operands(self.reduceops[0], self.tensor_core.dtype_in)  # type: ignore[misc]
        return self.outer_axis(*((x, y) if (operand == "a") == self.tc_a_first else (y, x)))

    def outer_axis(self, mine: UOp, other: UOp) -> int | None:
        """The last output axis factor `mine` of a product moves along and factor `other` does not."""
        axes = [a for a in self.axes_of(AxisType.GLOBAL) if self._depends(mine, a) and not self._depends(other, a)]
        return axes[-1] if axes else None

    def product_axes(self) -> tuple[UOp, UOp, int, int, int] | None:
        """A matmul-like kernel, one sum of products x*y: (x, y, M, N, K) with M the last output axis only x moves
        along, N the last only y moves along, K a reduce axis both move along; None for any other kernel."""
        if len(self.reduceops) != 1 or (factors := product_factors(self.reduceops[0])) is None:
            return None
        x, y = factors
        m, n = self.outer_axis(x, y), self.outer_axis(y, x)
        ks = [a for a in self.axes_of(AxisType.REDUCE) if self._depends(x, a) and self._depends(y, a)]
        return None if m is None or n is None or not ks else (x, y, m, n, ks[-1])

    def _tensor_core(self, opt: Opt) -> None:
        """TC: split the M, N and K axes by the instruction's tile; the three tile axes (kind TC) are lowered to one
        WMMA per warp instead of loops. Must be the first opt: the tile axes are the last three, in M, N, K order."""
        choices = self.tc_choices()
        check(0 <= opt.axis < len(choices), f"{opt}: no tensor core fits this kernel ({len(choices)} choices)")
        check(opt.amount == 0, f"{opt}: amount must be 0")
        tc, a_first, m, n, k = choices[opt.axis]
        max_threads = self.renderer.max_workgroup or tc.threads
        check(tc.threads <= max_threads, f"{opt}: a warp of {tc.threads} is over the workgroup limit")
        # split from the last axis down, so a size-1 remainder dropped by shift_to does not renumber the others
        for axis, size in sorted(zip((m, n, k), tc.dims), reverse=True):
            self.shift_to(axis, size, AxisType.TC)
        tile_axes = list(range(len(self.full_shape) - 3, len(self.full_shape)))
        # the tile axes are in descending order of the original axes; put them back in M, N, K order
        order_of = sorted(range(3), key=lambda i: (m, n, k)[i], reverse=True)
        moved = [tile_axes[order_of.index(i)] for i in range(3)]
        self._permute_all([i for i in range(len(self.full_shape)) if i not in moved] + moved)
        self.tensor_core, self.tc_a_first = tc, a_first

    @functools.cached_property
    def stage_candidates(self) -> list[UOp]:
        """The loads of global memory inside the reduce, in AST order: what STAGE can copy to shared memory."""
        if len(self.reduceops) != 1:
            return []
        return [x for x in self.reduceops[0].src[0].toposort if x.op is Ops.LOAD and x.src[0].op is Ops.DEFINE_GLOBAL]

    def _stage(self, opt: Opt) -> None:
        """STAGE: each step of the reduce loop, the workgroup copies the tile of input `axis` it reads (every
        LOCAL, UPCAST, UNROLL and TC position) from global to shared memory together, in wide coalesced loads, and
        each thread then reads its values from there. (Loading the next step's tile into registers during this
        step, the copy at the next step's top only storing them, measured no gain on an H200 at 4096^3: 244 against
        250 TFLOPS in half, 29.9 against 30.6 in float32; it is not done.)"""
        check(self.renderer.has_shared and self.renderer.has_local, "renderer has no shared memory")
        check(0 <= opt.axis < len(self.stage_candidates), f"{opt}: no such input of the reduce")
        check(opt.amount == 0, f"{opt}: amount must be 0")
        check(opt.axis not in self.staged, f"{opt}: input already staged")
        check(not self.axes_of(AxisType.GROUP, AxisType.THREAD_REDUCE), f"{opt}: the reduce is split already")
        self.staged.append(opt.axis)

    def stage_layout(self, i: int) -> StageLayout:
        """Where each element of staged input `i`'s tile lives in shared memory. The tile is every position of the
        LOCAL, UPCAST, UNROLL and TC axes the input moves along; its axes are laid out by falling stride in global
        memory, so the copy's neighbouring threads read neighbouring addresses. The contiguous run at the end is
        copied `width` elements per load (when the renderer has such loads and the run's start is aligned), and
        each row after it is padded by `width` elements, so that the lanes of a warp reading down a column of the
        tile (a tensor core's fragment) hit different banks."""
        load = self.stage_candidates[i]
        st = self.sts[self.views.index(load.src[1])]
        tile_types = (AxisType.LOCAL, AxisType.UPCAST, AxisType.UNROLL, AxisType.TC)
        axes = [a for a in self.axes_of(*tile_types) if self._depends(load, a)]
        # other axes are unknowns within their range: whatever a thread's workgroup and reduce step are
        at = [
            UOp.const(dtypes.int32, 0) if t in tile_types or t.expanded else UOp.variable(f"stage_{a}", 0, s - 1)
            for a, (s, t) in enumerate(zip(self.full_shape, self.axis_types))
        ]
        idx0, valid0 = (simplify(x) for x in st.to_index(at))
        strides: dict[int, int | None] = {}  # None: the address is not affine in the axis
        for a in axes:
            step = simplify(st.to_index(at[:a] + [UOp.const(dtypes.int32, 1)] + at[a + 1 :])[0] - idx0)
            strides[a] = step.arg if step.op is Ops.CONST else None
        order = tuple(sorted(axes, key=lambda a: -(strides[a] or 2**62)))  # stable: equal strides keep kernel order
        run, n_run = 1, 0
        for a in reversed(order):
            if strides[a] != run:
                break
            run, n_run = run * self.full_shape[a], n_run + 1
        affine = valid0.op is Ops.CONST and all(strides[a] is not None for a in order)
        width = self.renderer.wide_load(load.dtype) if affine and n_run else 1

        def aligned(w: int) -> bool:  # every wide load starts at a multiple of w: the run, each step along the rest
            outer = [strides[a] for a in order[: len(order) - n_run]]
            return run % w == 0 and all(s % w == 0 for s in outer) and _is_zero(simplify(idx0 % w))  # type: ignore[operator]

        while width > 1 and not aligned(width):
            width //= 2
        pitch, size = {}, 1
        for j, a in enumerate(reversed(order)):
            pitch[a], size = size, size * self.full_shape[a]
            if j == n_run - 1 and n_run < len(order):
                size += width
        return StageLayout(order, tuple(self.full_shape[a] for a in order), tuple(pitch[a] for a in order), width, size)

    def stage_bytes(self) -> int:
        """Shared memory of every staged tile."""
        return sum(self.stage_layout(i).size * self.stage_candidates[i].dtype.itemsize for i in self.staged)

    def _merge(self, opt: Opt) -> None:
        """One axis of both sizes from `opt.axis` and the axis after it, where merge_axes would not merge them (a view
        masked or strided apart along them gets a view on top that splits the merged index again): a vector axis
        longer than either (a padded conv's 8 x 8 output pixels as vectors of 16, two rows each)."""
        axes = self.axes_of(AxisType.GLOBAL) + self.axes_of(AxisType.REDUCE)
        check(0 <= opt.axis < len(axes), f"{opt}: no such axis (kernel {self.name_plain})")
        a = axes[opt.axis]
        check(a + 1 < len(self.full_shape), f"{opt}: axis {a} is the last one")
        check(self.axis_types[a] is self.axis_types[a + 1], f"{opt}: axes {a} and {a + 1} are of different kinds")
        check(self.tile_steps[a] is None and self.tile_steps[a + 1] is None, f"{opt}: an axis is overlapping tiles")
        check(all(isinstance(self.full_shape[i], int) for i in (a, a + 1)), f"{opt}: a symbolic axis is not merged")
        new_shapes = [st.shape[:a] + (smul(st.shape[a], st.shape[a + 1]),) + st.shape[a + 2 :] for st in self.sts]
        keep = [i for i in range(len(self.full_shape)) if i != a + 1]
        self._reshape_all(new_shapes, [self.axis_types[i] for i in keep], [self.tile_steps[i] for i in keep])

    def _swap(self, opt: Opt) -> None:
        """SWAP exchanges two output loops (`axis` and `amount` count GLOBAL axes): the loop order, not the result."""
        glob = self.axes_of(AxisType.GLOBAL)
        check(0 <= opt.axis < opt.amount < len(glob), f"{opt}: needs two GLOBAL axes, first < second")
        order = list(range(len(self.full_shape)))
        order[glob[opt.axis]], order[glob[opt.amount]] = glob[opt.amount], glob[opt.axis]
        self._permute_all(order)

    def try_opt(self, opt: Opt) -> bool:
        """Apply `opt` if it fits this kernel; False (and the kernel unchanged) if it does not."""
        try:
            self.apply_opt(opt)
            return True
        except KernelOptError:
            return False

    def apply_opts(self, opts: list[Opt]) -> Kernel:
        for opt in opts:
            self.apply_opt(opt)
        return self

    # *** outputs ***

    @property
    def upcast_size(self) -> int:
        return prod(s for s, t in zip(self.full_shape, self.axis_types) if t.expanded)

    @functools.cached_property
    def _kind(self) -> str:
        return "r" if self.reduceops else "E"

    def _name(self, color: bool) -> str:
        # a symbolic size shows as its expression: `r_4_start_pos`
        sizes = [s.render() if isinstance(s, UOp) else str(s) for s in self.full_shape]
        parts = [colored(s, t.value) if color else s for s, t in zip(sizes, self.axis_types)]
        return f"{self._kind}_" + "_".join(parts) if parts else f"{self._kind}_1"

    @property
    def name(self) -> str:
        """`E_4_4` / `r_16_4`, each size coloured by its axis kind."""
        return self._name(True)

    @property
    def name_plain(self) -> str:
        return self._name(False)

    @property
    def function_name(self) -> str:
        return to_function_name(self.name_plain)

    def optimized_ast(self, x: UOp | None = None) -> UOp:
        """The AST (or its subtree `x`) with every VIEW replaced by its optimized ShapeTracker."""
        mapping = {v: UOp(Ops.VIEW, arg=st) for v, st in zip(self.views, self.sts)}
        return substitute(self.ast if x is None else x, mapping)
