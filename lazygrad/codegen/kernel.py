"""A kernel's iteration space and the optimizations applied to it.

Every VIEW in a kernel AST has the kernel's full shape (reduce axes are 1 after the reduce). An optimization
reshapes and permutes all views at once and gives the new axis a kind; lowering then turns each kind into loops,
thread ids, or unrolled registers. The list of applied `Opt`s is the kernel's printable, cacheable recipe.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from lazygrad.helpers import DEBUG, colored, prod, to_function_name
from lazygrad.uop.ops import Ops, UOp, substitute
from lazygrad.uop.view import ShapeTracker


class AxisType(enum.Enum):
    GLOBAL = "blue"  # a loop (CPU) or grid index (GPU) over outputs
    THREAD = "BLUE"  # split across CPU cores
    THREAD_REDUCE = "RED"  # a reduce split across CPU cores, partial results combined after
    LOCAL = "cyan"  # workgroup index (GPU)
    GROUP = "green"  # reduce split across a workgroup through shared memory
    REDUCE = "red"  # a reduce loop
    UNROLL = "magenta"  # a reduce axis unrolled into registers
    UPCAST = "yellow"  # an output axis computed per thread in registers

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


@dataclass(frozen=True, order=True)
class Opt:
    op: OptOps
    axis: int
    amount: int

    def __repr__(self) -> str:
        return f"Opt(op=OptOps.{self.op.name}, axis={self.axis}, amount={self.amount})"


MAX_EXPANDED = 512


class KernelOptError(Exception):
    """An Opt that does not apply to this kernel (wrong axis kind, size not divisible, over a device limit)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise KernelOptError(msg)


class Kernel:
    def __init__(self, ast: UOp, renderer: object):
        assert ast.op is Ops.SINK, f"a kernel AST is a SINK, not {ast.op}"
        self.ast, self.renderer = ast, renderer
        self.views: list[UOp] = [x for x in ast.toposort if x.op is Ops.VIEW]
        self.sts: list[ShapeTracker] = [v.arg for v in self.views]
        shapes = [st.shape for st in self.sts]
        self.full_shape: tuple[int, ...] = tuple(max(dims) for dims in zip(*shapes)) if shapes else ()
        reduce_axes = {a for x in ast.toposort if x.op is Ops.REDUCE_AXIS for a in x.arg[1]}
        self.axis_types: list[AxisType] = [
            AxisType.REDUCE if i in reduce_axes else AxisType.GLOBAL for i in range(len(self.full_shape))
        ]
        self.applied_opts: list[Opt] = []
        self.reduceops = [x for x in ast.toposort if x.op is Ops.REDUCE_AXIS]
        self._drop_ones()

    # *** shape bookkeeping ***

    def _reshape_all(self, new_shape_of: list[tuple[int, ...]], types: list[AxisType]) -> None:
        self.sts = [st.reshape(ns) for st, ns in zip(self.sts, new_shape_of)]
        self.axis_types = types
        self.full_shape = tuple(max(dims) for dims in zip(*[st.shape for st in self.sts])) if self.sts else ()

    def _permute_all(self, order: list[int]) -> None:
        self.sts = [st.permute(tuple(order)) for st in self.sts]
        self.axis_types = [self.axis_types[i] for i in order]
        self.full_shape = tuple(self.full_shape[i] for i in order)

    def _drop_ones(self) -> None:
        """Size-1 axes never index anything; dropping them keeps loops and names short."""
        keep = [i for i, s in enumerate(self.full_shape) if s != 1]
        if len(keep) == len(self.full_shape):
            return
        self._reshape_all([tuple(st.shape[i] for i in keep) for st in self.sts], [self.axis_types[i] for i in keep])

    def merge_axes(self) -> None:
        """Merge neighbouring axes of the same kind that every view can merge: (64, 64, 64) contiguous is one loop."""
        i = 0
        while i + 1 < len(self.full_shape):
            if self.axis_types[i] == self.axis_types[i + 1] and all(self._mergeable(st, i) for st in self.sts):
                new_shapes = [st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2 :] for st in self.sts]
                self._reshape_all(new_shapes, self.axis_types[: i + 1] + self.axis_types[i + 2 :])
            else:
                i += 1

    @staticmethod
    def _mergeable(st: ShapeTracker, i: int) -> bool:
        # only when the last view can merge them itself; stacking another view would make indexing costlier
        v = st.views[-1]
        return v.reshape(v.shape[:i] + (v.shape[i] * v.shape[i + 1],) + v.shape[i + 2 :]) is not None

    def shift_to(self, axis: int, amount: int, new_type: AxisType, top: bool = False) -> None:
        """Split `axis` into (size/amount, amount) and move the `amount` part to the end with kind `new_type`."""
        size = self.full_shape[axis]
        check(amount > 1 and size % amount == 0, f"cannot split axis {axis} of size {size} by {amount}")
        inner = (amount, size // amount) if top else (size // amount, amount)
        new_shapes = []
        for st in self.sts:
            s = st.shape[axis]
            split = inner if s != 1 else (1, 1)
            new_shapes.append(st.shape[:axis] + split + st.shape[axis + 1 :])
        old_type = self.axis_types[axis]
        self._reshape_all(new_shapes, self.axis_types[:axis] + [old_type, old_type] + self.axis_types[axis + 1 :])
        moved = axis if top else axis + 1
        order = [i for i in range(len(self.full_shape)) if i != moved] + [moved]
        self._permute_all(order)
        self.axis_types[-1] = new_type
        self._drop_ones()

    # *** applying opts ***

    def axes_of(self, *types: AxisType) -> list[int]:
        return [i for i, t in enumerate(self.axis_types) if t in types]

    def apply_opt(self, opt: Opt) -> None:
        """Apply one Opt. `axis` counts GLOBAL axes for output opts and REDUCE axes for reduce opts; THREAD counts
        GLOBAL then REDUCE axes; SWAP exchanges GLOBAL axes `axis` and `amount`."""
        if opt.op is OptOps.SWAP:
            self._swap(opt)
            self.applied_opts.append(opt)
            return
        if opt.op in (OptOps.UPCAST, OptOps.LOCAL):
            candidates = self.axes_of(AxisType.GLOBAL)
        elif opt.op is OptOps.THREAD:  # GLOBAL axes, then REDUCE axes (a reduce split into per-thread partials)
            candidates = self.axes_of(AxisType.GLOBAL) + self.axes_of(AxisType.REDUCE)
        elif opt.op in (OptOps.UNROLL, OptOps.GROUP, OptOps.GROUPTOP):
            candidates = self.axes_of(AxisType.REDUCE)
        else:
            raise KernelOptError(f"{opt.op} is not supported by this kernel yet")
        check(0 <= opt.axis < len(candidates), f"{opt}: no such axis (kernel {self.name_plain})")
        axis = candidates[opt.axis]
        amount = opt.amount if opt.amount != 0 else self.full_shape[axis]
        limit = {OptOps.UPCAST: 16, OptOps.UNROLL: 32}.get(opt.op)
        check(limit is None or amount <= limit, f"{opt}: amount over the limit of {limit}")
        if opt.op in (OptOps.UPCAST, OptOps.UNROLL):
            # every expanded combination is a copy of the loop body: past this the compiler takes seconds
            check(self.upcast_size * amount <= MAX_EXPANDED, f"{opt}: more than {MAX_EXPANDED} expanded values")
        if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):  # refused here rather than by the GPU driver
            threads = amount * prod(
                s for s, t in zip(self.full_shape, self.axis_types) if t in (AxisType.LOCAL, AxisType.GROUP)
            )
            max_threads = getattr(self.renderer, "max_workgroup", threads)
            check(
                threads <= max_threads,
                f"{opt}: {threads} threads per workgroup, over the device's limit of {max_threads}",
            )
        if opt.op is OptOps.UPCAST:
            self.shift_to(axis, amount, AxisType.UPCAST)
        elif opt.op is OptOps.UNROLL:
            self.shift_to(axis, amount, AxisType.UNROLL)
        elif opt.op is OptOps.THREAD:
            # amount 0 shares the whole axis out among the cores, whatever its size; otherwise `amount` chunks
            check(getattr(self.renderer, "has_threads", False), "renderer has no CPU threads")
            check(not self.axes_of(AxisType.THREAD, AxisType.THREAD_REDUCE), "only one THREAD axis per kernel")
            if self.axis_types[axis] is AxisType.REDUCE:
                check(opt.amount != 0 and amount <= 256, f"{opt}: a split reduce needs an explicit count of partials")
                # the parallel region opens inside the output loops: worth it only for a few outputs
                outputs = prod(self.full_shape[a] for a in self.axes_of(AxisType.GLOBAL))
                check(outputs <= 32, f"{opt}: {outputs} outputs are too many to split the reduce")
                self.shift_to(axis, amount, AxisType.THREAD_REDUCE, top=True)
            else:
                self.shift_to(axis, amount, AxisType.THREAD, top=True)
        elif opt.op is OptOps.LOCAL:
            check(getattr(self.renderer, "has_local", False), "renderer has no local (workgroup) axes")
            self.shift_to(axis, amount, AxisType.LOCAL)
        else:
            check(getattr(self.renderer, "has_shared", False), "renderer has no shared memory")
            self.shift_to(axis, amount, AxisType.GROUP, top=opt.op is OptOps.GROUPTOP)
        self.applied_opts.append(opt)

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
        parts = [colored(str(s), t.value) if color else str(s) for s, t in zip(self.full_shape, self.axis_types)]
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

    def optimized_ast(self) -> UOp:
        """The AST with every VIEW replaced by its optimized ShapeTracker."""
        mapping = {v: UOp(Ops.VIEW, arg=st) for v, st in zip(self.views, self.sts)}
        return substitute(self.ast, mapping)

    def print_opts(self) -> None:
        if DEBUG >= 3:
            print(f"{self.name}: opts {self.applied_opts}")
