"""Lowering: an optimized kernel AST becomes a graph of loops (RANGE), address math, loads, ALU ops and stores.

Axes become loop variables (GLOBAL, REDUCE) or are expanded in Python (UPCAST, UNROLL: one copy of the
expression per value, which the renderer emits as straight-line code). A reduce becomes an accumulator
(DEFINE_ACC), updated (ASSIGN) inside its loop and read after it (AFTER its ENDRANGE).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, NamedTuple

from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, StageLayout, mul_operands
from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import ceildiv, prod
from lazygrad.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, _exact_bounds
from lazygrad.uop.symbolic import simplify, split_linear
from lazygrad.uop.view import ShapeTracker
from lazygrad.viz import record

# a GPU kernel without workgroup axes gets workgroups of up to PADDED_THREADS along an axis of PADDED_MIN or more
PADDED_THREADS, PADDED_MIN = 128, 32
Combo = tuple[int, ...]  # a value for each expanded axis (upcasts, then unrolls)
# loop kinds: output, reduce, output across CPU threads, reduce split across CPU threads (see linearize.RANGE_ORDER);
# "rb" is the outer loop of a blocked reduce (Lowerer._block_reduce_loops)
RANGE_KIND = {AxisType.GLOBAL: "g", AxisType.THREAD: "t", AxisType.THREAD_REDUCE: "tr"}
# float sums over this many loop iterations or more are summed in blocks, if the kernel has at most BLOCK_MAX_ACCS
# accumulators
BLOCK_MIN_TRIPS, BLOCK_MAX_ACCS = 1024, 4
# accumulators whose multiply-add chains together hide one multiply-add's latency (4 cycles, 2 units: 8 in flight)
FMA_CHAINS = 8


def _add_to(op: Ops, block: UOp, total: UOp) -> UOp:
    """A blocked reduce's update of its total by one block's result."""
    return reduce_combine(op, total, block)


def reduce_identity(op: Ops, dtype) -> UOp:  # noqa: ANN001
    if dtype.count > 1:
        return UOp(Ops.VECTORIZE, dtype, (reduce_identity(op, dtype.scalar),) * dtype.count)
    if op is Ops.ADD:
        return UOp.const(dtype, 0)
    if op is Ops.MUL:
        return UOp.const(dtype, 1)
    if op is Ops.MAX:
        return UOp.const(dtype, dtypes.min(dtype))
    raise NotImplementedError(f"no identity for reduce {op}")


def reduce_combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return UOp(op, a.dtype, (a, b))


def _chain(value: UOp, acc: UOp, op: Ops) -> list[UOp]:
    """The steps from `acc` to `value` where `value` is `acc` combined by `op` with one value after another (first
    step first), else []."""
    steps = []
    while value is not acc and value.op is op and len(value.src) == 2:
        steps.append(value)
        value = value.src[0]
    return steps[::-1] if value is acc else []


def _broadcast_axes(st: ShapeTracker, axes: list[int]) -> frozenset[int]:
    """The axes among `axes` whose index a view's address and validity do not read: stride 0 and unmasked."""
    if len(st.views) != 1:
        return frozenset()  # an inner view re-splits the flat address: every index may matter
    v = st.views[0]
    return frozenset(a for a in axes if v.strides[a] == 0 and (v.mask is None or v.mask[a] == (0, v.shape[a])))


def _split_const(x: UOp) -> tuple[UOp | None, int]:
    """x as (base, constant): `base + c` -> (base, c), a constant -> (None, c), anything else -> (x, 0)."""
    if x.op is Ops.CONST:
        return None, x.arg
    if x.op is Ops.ADD and x.src[1].op is Ops.CONST:
        return x.src[0], x.src[1].arg
    return x, 0


def _is_one(stride: int | UOp) -> bool:
    return type(stride) is int and stride == 1  # a symbolic stride is not known to be 1


def _launch_size(s: int | UOp) -> int:
    return s.vmax if isinstance(s, UOp) else s


class _LaneForm:
    """An index expression (a view's address or validity) simplified with each expanded axis a placeholder, valued
    at constant values of those axes. Only the nodes above a placeholder are rebuilt for a value, and a sum linear in
    the placeholders (a padded view's address, the sums its bounds compare) is its other terms, simplified once, plus
    a constant: rebuilt term by term it was simplified anew for every combo, each constant moved up its chain of
    terms. The value depends only on those constants and the placeholders read elsewhere, so it is built and
    simplified once per distinct value of those: a padded conv's validity compares two sums of two axes each, 40
    values for its 576 combos (test_lowerer)."""

    def __init__(self, root: UOp, lanes: dict[int, UOp]):
        self.root = root
        axis_of = {lane: a for a, lane in lanes.items()}
        above: set[UOp] = set(axis_of)
        order = []
        for u in root.toposort:
            if u not in above and any(s in above for s in u.src):
                above.add(u)
                order.append(u)
        # sum -> (its other terms, [(axis, coefficient)]); the other nodes above a placeholder, sources first
        self.linear: dict[UOp, tuple[UOp, list[tuple[int, int]]]] = {}
        needed, leaves = set(), set(axis_of)
        todo = [root]
        while todo:
            u = todo.pop()
            if u not in above or u in needed or u in self.linear:
                continue
            split = split_linear(u, leaves, above) if u.op in (Ops.ADD, Ops.MUL) else None
            if split is not None:
                self.linear[u] = (split[0], [(axis_of[lane], m) for lane, m in split[1]])
            else:
                needed.add(u)
                todo.extend(u.src)
        self.moving = [u for u in order if u in needed]
        # the placeholders read other than through a linear sum
        self.lanes = [(a, lane) for a, lane in lanes.items() if lane is root or any(lane in u.src for u in self.moving)]
        self.values: dict[tuple[int, ...], UOp] = {}

    def coefficient(self, axis: int) -> int | None:
        """How much the value moves per step of `axis` where that is known without valuing it (a sum linear in the
        placeholders, the axis read nowhere else: its coefficient, 0 where it is not read at all), else None."""
        if any(a == axis for a, _ in self.lanes):
            return None
        if self.root in self.linear:
            return sum(m for a, m in self.linear[self.root][1] if a == axis)
        return None if any(a == axis for _, terms in self.linear.values() for a, _ in terms) else 0

    def at(self, values: dict[int, int], const: Callable[[int], UOp]) -> UOp:
        offsets = [sum([values.get(a, 0) * m for a, m in terms]) for _, terms in self.linear.values()]
        key = (*offsets, *[values.get(a, 0) for a, _ in self.lanes])
        if (hit := self.values.get(key)) is not None:
            return hit
        new = {lane: const(values.get(a, 0)) for a, lane in self.lanes}
        for (u, (rest, _)), offset in zip(self.linear.items(), offsets):
            new[u] = simplify(rest + offset) if offset else rest
        for u in self.moving:
            new[u] = UOp(u.op, u.dtype, tuple([new.get(s, s) for s in u.src]), u.arg)
        hit = self.values[key] = simplify(new.get(self.root, self.root))
        return hit


class Lowerer:
    def __init__(self, k: Kernel, idx_dtype: DType = dtypes.int32):
        self.k = k
        self.idx_dtype = idx_dtype  # of loop counters, thread ids and address math (see `lower`)
        self.ast = k.optimized_ast()
        shape, types = k.full_shape, k.axis_types
        self.base_idxs: list[UOp | None] = []
        self.global_ranges: list[UOp] = []
        self.reduce_ranges: list[UOp] = []
        self.tc = k.tensor_core
        self.tc_axes = k.axes_of(AxisType.TC)
        self.lane: UOp | None = None  # a tensor core's lane within its warp
        for i, (s, t) in enumerate(zip(shape, types)):
            if t.expanded or t is AxisType.TC:
                self.base_idxs.append(None)
            elif s == 1:
                self.base_idxs.append(UOp.const(self.idx_dtype, 0))
            elif (tile := k.tile_steps[i]) is not None:
                # overlapping tiles (Kernel.shift_overlapped): a start every `amount`, the last at size - amount
                amount, size = tile
                end = UOp.const(self.idx_dtype, ceildiv(size, amount))
                r = UOp(Ops.RANGE, self.idx_dtype, (end,), (i, RANGE_KIND.get(t, "r")))
                self.global_ranges.append(r)
                self.base_idxs.append((r * amount).minimum(size - amount))
            else:
                end = s.cast(self.idx_dtype) if isinstance(s, UOp) else UOp.const(self.idx_dtype, s)
                r = UOp(Ops.RANGE, self.idx_dtype, (end,), (i, RANGE_KIND.get(t, "r")))
                (self.reduce_ranges if t.is_reduce else self.global_ranges).append(r)
                self.base_idxs.append(r)
        self.bounds_gate: UOp | None = None  # threads past the end of an axis the launch does not divide
        # GPU-style targets: output and workgroup axes are thread ids, not loops
        self.thread_idxs: list[UOp] = self._thread_ids() if k.renderer.has_local else []
        # each operand's fragment entries as combo tails, computed once (the lane is known now)
        self.tc_tails: dict[str, list[Combo]] = {"c": [()]}
        if self.tc is not None:
            self.tc_tails = {op: [self.tc_tail(op, i) for i in range(n)] for op, n in zip("abc", self.tc.elements)}
        # CPU threads: the THREAD loop is the outermost one, so each core runs a slice of every inner loop; a
        # reduce split across threads (THREAD_REDUCE) runs each slice's partial reduce in its own loop
        self.global_ranges.sort(key=lambda r: r.arg[1] != "t")
        self.split_ranges = [r for r in self.reduce_ranges if r.arg[1] == "tr"]
        self.reduce_ranges = [r for r in self.reduce_ranges if r.arg[1] != "tr"]
        self.memo: dict[tuple[UOp, Combo], UOp] = {}
        self.consts: dict[int, UOp] = {}
        self.index_memo: dict[tuple, tuple[UOp, UOp]] = {}  # (view, loop indices) -> (address, validity)
        self.broadcast_axes: dict[UOp, frozenset[int]] = {}
        # view -> (address, validity) with each expanded axis a placeholder (see `_at_lanes`)
        self.lane_forms: dict[UOp, tuple[_LaneForm, _LaneForm]] = {}
        # one expanded axis may become the lanes of vector values; the others are expanded into straight-line code
        self.vec_axis = self._pick_vector_axis() if self.tc is None else None
        self.width = shape[self.vec_axis] if self.vec_axis is not None else 1
        self.upcast_axes = [a for a in k.axes_of(AxisType.UPCAST) if a != self.vec_axis]
        self.unroll_axes = [a for a in k.axes_of(AxisType.UNROLL) if a != self.vec_axis]
        self.expanded_axes = self.upcast_axes + self.unroll_axes + ([] if self.vec_axis is None else [self.vec_axis])
        # a tensor-core kernel's combos end with the (M, N, K) tile coordinates of one fragment entry (lane UOps)
        self.expanded_axes += self.tc_axes
        self.out_combos = list(itertools.product(*[range(shape[a]) for a in self.upcast_axes]))
        self.unroll_combos = list(itertools.product(*[range(shape[a]) for a in self.unroll_axes]))
        self.reduce_results: dict[tuple[UOp, Combo], UOp] = {}
        # the rule lists, logged for VIZ when it records this kernel (record.translated)
        self.viz_steps: list[tuple] = []
        self.rules = (record.translated(LOWER_OP, self.viz_steps), record.translated(LOWER_VEC_OP, self.viz_steps))
        self.staged: dict[UOp, _Tile] = {}  # a staged load (STAGE) -> its tile in shared memory, set by lower_reduces
        # outer loops of a blocked reduce (see _block_reduce_loops): each iteration sums a block into a fresh
        # accumulator, then adds it to the total
        self.block_ranges: list[UOp] = []
        if not k.renderer.has_local and self.tc is None:
            self._block_reduce_loops()

    def _block_reduce_loops(self) -> None:
        """A float sum rounds every add against the whole running total, so its error grows with the trip count:
        2e-6 relative for a sum of 1e7 floats, where torch's cascade sum gives 1e-7. A reduce loop nest of
        BLOCK_MIN_TRIPS or more iterations is cut into outer loops over blocks of about sqrt(trips) iterations (at
        a loop boundary, or by splitting one loop in two), each block summed into a fresh accumulator and then
        added to the total: about sqrt(trips) roundings on each path instead of trips. Kernels holding many
        accumulators (register tiles of matmuls and convs) are left alone: a second set would not fit in registers.
        So is a single loop of prime length: there is no divisor to cut it at (blocks with a bounds check would
        cost a select per iteration)."""
        sizes = [r.src[0].arg if r.src[0].op is Ops.CONST else 0 for r in self.reduce_ranges]
        trips = prod(sizes)
        if not sizes or 0 in sizes or trips < BLOCK_MIN_TRIPS:
            return
        sums = [r for r in self.ast.toposort if r.op is Ops.REDUCE_AXIS and r.arg[0] is Ops.ADD]
        if not any(dtypes.is_float(r.dtype) for r in sums) or len(sums) * len(self.out_combos) > BLOCK_MAX_ACCS:
            return
        target = math.sqrt(trips)
        # candidates (position, block split or None, inner trips): a cut before loop j, or loop m split into
        # (size / b, b) with b one of its divisors
        cands = [(j, None, prod(sizes[j:])) for j in range(1, len(sizes))]
        for m, n in enumerate(sizes):
            for d in range(2, math.isqrt(n) + 1):
                if n % d == 0:
                    cands += [(m, b, b * prod(sizes[m + 1 :])) for b in {d, n // d} if b < n]
        pos, split, inner = min(cands, key=lambda c: abs(math.log(c[2] / target)), default=(0, None, trips))
        if inner < 16 or trips // inner < 16:
            return
        if split is None:
            self.block_ranges, self.reduce_ranges = self.reduce_ranges[:pos], self.reduce_ranges[pos:]
            return
        r = self.reduce_ranges[pos]
        axis = r.arg[0]
        outer = UOp(Ops.RANGE, self.idx_dtype, (UOp.const(self.idx_dtype, sizes[pos] // split),), (axis, "rb"))
        within = UOp(Ops.RANGE, self.idx_dtype, (UOp.const(self.idx_dtype, split),), (axis, "r"))
        self.base_idxs[axis] = outer * UOp.const(self.idx_dtype, split) + within
        # the placeholder forms the vector-axis choice built (_at_lanes) index the unsplit loop: built again over
        # the split one when asked (kept, the unsplit loop was rendered beside the split one, a wrong kernel)
        self.lane_forms.clear()
        self.block_ranges = self.reduce_ranges[:pos] + [outer]
        self.reduce_ranges = [within] + self.reduce_ranges[pos + 1 :]

    def _thread_ids(self) -> list[UOp]:
        """Replace the GLOBAL loops by workgroup ids and the LOCAL and GROUP axes by thread ids within a workgroup,
        at most 3 of each kind (the launch grid). The innermost axis gets dimension 0, the one whose neighbouring
        threads run together. A grid dimension over the device's limit folds every global axis into dimension 0."""
        specials: list[UOp] = []
        # a symbolic axis launches threads for its largest size (one grid for every bound value, as a JIT replay
        # needs); the threads past the bound value store nothing
        shape = [_launch_size(s) for s in self.k.full_shape]
        if self.tc is not None:  # the warp's lanes are local dimension 0; LOCAL axes (more warps) take the others
            self.lane = UOp(Ops.SPECIAL, self.idx_dtype, (), ("lidx0", self.tc.threads, "l", 0))
            specials.append(self.lane)
        padded = self._padded_axis()
        if padded is not None:
            shape[padded[0]] = ceildiv(shape[padded[0]], padded[1])  # the grid counts workgroups along that axis
        for kind, types in (("g", (AxisType.GLOBAL,)), ("l", (AxisType.LOCAL, AxisType.GROUP))):
            axes = [a for a in self.k.axes_of(*types) if shape[a] != 1]
            first_dim = 1 if kind == "l" and self.lane is not None else 0
            n_dims = 3 - first_dim
            if len(axes) > n_dims:  # the outermost axes share the last dimension
                keep = len(axes) - n_dims + 1
                groups = [axes[:keep]] + [[a] for a in axes[keep:]]
            else:
                groups = [[a] for a in axes]
            limits = (self.k.renderer.global_max if kind == "g" else self.k.renderer.local_max) or (2**31 - 1,) * 3
            if kind == "g" and any(prod(shape[a] for a in g) > lim for g, lim in zip(reversed(groups), limits)):
                groups = [axes]
            for dim, group in enumerate(reversed(groups), start=first_dim):
                sizes = [shape[a] for a in group]
                sid = UOp(
                    Ops.SPECIAL,
                    self.idx_dtype,
                    (),
                    (f"{'gidx' if kind == 'g' else 'lidx'}{dim}", prod(sizes), kind, dim),
                )
                specials.append(sid)
                inner = prod(sizes)
                for a, size in zip(group, sizes):
                    inner //= size
                    idx = sid // inner if inner != 1 else sid
                    self.base_idxs[a] = idx % size if a != group[0] else idx
        if padded is not None:
            axis, threads = padded
            lid = UOp(Ops.SPECIAL, self.idx_dtype, (), ("lidx0", threads, "l", 0))
            specials.append(lid)
            # with one workgroup along the axis there is no grid id for it
            group = self.base_idxs[axis] if shape[axis] != 1 else UOp.const(self.idx_dtype, 0)
            idx, size = group * threads + lid, _launch_size(self.k.full_shape[axis])
            if size % threads:
                # the launch overshoots the axis: the extra threads compute a copy of the last element, unstored
                self.bounds_gate = idx.alu(Ops.CMPLT, UOp.const(self.idx_dtype, size))
                idx = self.bounds_gate.alu(Ops.WHERE, idx, UOp.const(self.idx_dtype, size - 1))
            self.base_idxs[axis] = idx
        for a, s in enumerate(self.k.full_shape):
            if isinstance(s, UOp) and self.base_idxs[a] is not None and self.base_idxs[a].op is not Ops.RANGE:
                # past the bound value: read element 0 (in every buffer, sized for the largest value), store nothing
                idx = self.base_idxs[a]
                gate = simplify(idx.alu(Ops.CMPLT, s.cast(self.idx_dtype)))
                self.bounds_gate = gate if self.bounds_gate is None else self.bounds_gate.alu(Ops.AND, gate)
                self.base_idxs[a] = gate.alu(Ops.WHERE, idx, UOp.const(self.idx_dtype, 0))
        self.global_ranges = [r for r in self.global_ranges if self.base_idxs[r.arg[0]] is r]
        self.reduce_ranges = [r for r in self.reduce_ranges if self.base_idxs[r.arg[0]] is r]
        return specials

    def _padded_axis(self) -> tuple[int, int] | None:
        """A kernel with no workgroup axes would run one thread per workgroup: its innermost output axis is then
        split into workgroups of a power-of-two size, the last one partly out of range (and bounds-checked)."""
        if self.k.axes_of(AxisType.LOCAL, AxisType.GROUP) or self.tc is not None:
            return None
        shape = [_launch_size(s) for s in self.k.full_shape]
        axes = [a for a in self.k.axes_of(AxisType.GLOBAL) if shape[a] != 1]
        if not axes or shape[axes[-1]] < PADDED_MIN:
            return None
        renderer = self.k.renderer
        local_max = renderer.local_max or (PADDED_THREADS,)
        threads = min(PADDED_THREADS, (renderer.max_workgroup or PADDED_THREADS), local_max[0])
        while threads > shape[axes[-1]]:
            threads //= 2
        return axes[-1], threads

    def const(self, v: int) -> UOp:
        """An index constant, made once per kernel: every index of every combo asks for its axes' values."""
        if (c := self.consts.get(v)) is None:
            c = self.consts[v] = UOp.const(self.idx_dtype, v)
        return c

    def idxs(self, combo: Combo) -> list[UOp]:
        out = list(self.base_idxs)
        for axis, v in zip(self.expanded_axes, combo):
            out[axis] = v if isinstance(v, UOp) else self.const(v)
        return out  # type: ignore[return-value]

    # *** tensor cores: each lane computes with the tile entries its fragment holds ***

    def tc_tail(self, operand: str, i: int) -> Combo:
        """(M, N, K) tile coordinates of fragment entry `i` of this lane: A is M x K, B is K x N, C is M x N; the
        coordinate an operand does not have is 0 (the operand does not move along it)."""
        assert self.tc is not None and self.lane is not None
        row, col = (simplify(c) for c in self.tc.coords(operand, self.lane, i))
        zero = UOp.const(self.idx_dtype, 0)
        return {"a": (row, zero, col), "b": (zero, col, row), "c": (row, col, zero)}[operand]  # type: ignore[return-value]

    def _tc_update(self, r: UOp, oc: Combo) -> Callable[[UOp | None], UOp]:
        """acc -> acc after one step of the reduce loop: one WMMA per unrolled K tile."""
        tc = self.tc
        assert tc is not None
        x, y = mul_operands(r, tc.dtype_in)  # type: ignore[misc]
        a, b = (x, y) if self.k.tc_a_first else (y, x)
        zeros = reduce_identity(Ops.ADD, tc.dtype_out.vec(tc.elements[2]))

        def update(acc: UOp | None) -> UOp:
            out = zeros if acc is None else acc
            for uc in self.unroll_combos:
                frags = [
                    UOp(
                        Ops.VECTORIZE,
                        tc.dtype_in.vec(n),
                        _paired_loads([self.ev(node, oc + uc + tail) for tail in self.tc_tails[name]]),
                    )
                    for node, name, n in ((a, "a", tc.elements[0]), (b, "b", tc.elements[1]))
                ]
                out = UOp(Ops.WMMA, out.dtype, (*frags, out), tc.name)
            return out

        return update

    # *** vector lanes (CPU): values of the vector axis are the lanes of one vector-typed UOp ***

    def _pick_vector_axis(self) -> int | None:
        """The expanded axis with a vector width along which the most loads and stores are unit-stride."""
        renderer = self.k.renderer
        widths = renderer.vector_widths
        if not widths:
            return None
        reduce_dtypes = [r.dtype for r in self.ast.toposort if r.op is Ops.REDUCE_AXIS]
        if not all(renderer.vector_dtype_ok(dt) for dt in reduce_dtypes):  # type: ignore[attr-defined]
            return None
        # an access inside a reduce loop runs once per reduce iteration: it weighs more than the epilogue's
        in_reduce = {x for r in self.ast.toposort if r.op is Ops.REDUCE_AXIS for x in r.src[0].toposort}
        mem = [
            (x.src[1], x.src[0].dtype.base, 16 if x in in_reduce else 1)
            for x in self.ast.toposort
            if x.op in (Ops.LOAD, Ops.STORE) and x.src[0].op is Ops.DEFINE_GLOBAL
        ]
        best, best_score = None, 0
        for axis in self.k.axes_of(AxisType.UPCAST, AxisType.UNROLL):
            if self.k.full_shape[axis] not in widths:
                continue
            score = sum(w for view, dt, w in mem if renderer.vector_dtype_ok(dt) and self._unit_stride(view, axis))  # type: ignore[attr-defined]
            if score > best_score:
                best, best_score = axis, score
        return best

    def _unit_stride(self, view: UOp, axis: int) -> bool:
        st = view.arg
        if len(st.views) == 1 and (st.views[0].mask is None or st.views[0].mask[axis] == (0, st.shape[axis])):
            # one view the axis is not masked in: its stride says it, no index math to build and simplify (which was
            # a sixth of the CNN step's codegen)
            return _is_one(st.views[0].strides[axis])
        # from the view's index with the expanded axes as placeholders (built once per view, and used again by
        # _lane_index): only the nodes above them are rebuilt for each axis asked about
        return self._steps_by_one(view, axis, True)

    def _steps_by_one(self, view: UOp, axis: int, same_gate: bool) -> bool:
        """Whether the view's address moves by one element per step of the expanded `axis` (and, with `same_gate`,
        its validity is the same at 0 and 1). A linear address's coefficient other than 1 says no without valuing the
        index at 1 (each answer was a simplify of two addresses' difference, with their divisions and modulos), and
        the difference is read off `base + c` before any simplify (Lowerer._consecutive)."""
        if (form := self.lane_forms.get(view)) is None:
            self._at_lanes(view, {})
            form = self.lane_forms[view]
        if (step := form[0].coefficient(axis)) is not None and step != 1:
            return False
        idx0, valid0 = self._at_lanes(view, {})
        idx1, valid1 = self._at_lanes(view, {axis: 1})
        return (not same_gate or valid0 is valid1) and self._consecutive([idx0, idx1])

    def lanes(self, x: UOp) -> list[UOp]:
        if x.op is Ops.VECTORIZE:
            return list(x.src)
        return [UOp(Ops.GEP, x.dtype.scalar, (x,), i) for i in range(self.width)]

    @staticmethod
    def _consecutive(idxs: list[UOp], lanes: list[int] | None = None) -> bool:
        """Whether each index is the first one plus its lane's distance from the first lane (lanes 0, 1, 2, ... by
        default)."""
        lanes = list(range(len(idxs))) if lanes is None else lanes
        base, offset = _split_const(idxs[0])
        for lane, x in zip(lanes[1:], idxs[1:]):
            i = lane - lanes[0]
            if (split := _split_const(x))[0] is base and split[1] - offset == i:
                continue  # `base + c`, as the simplifier writes a lane's index: no simplify call needed
            if x is not simplify(idxs[0] + i):
                step = simplify(x - idxs[0])
                if step.op is not Ops.CONST or step.arg != i:
                    return False
        return True

    def val(self, u: UOp, combo: Combo) -> UOp:
        """The value of `u` at `combo` (one value per expanded axis but the vector axis): scalar or vector."""
        return self._lowered(u, combo, self.width > 1)

    def _lowered(self, u: UOp, combo: Combo, vec: bool) -> UOp:
        """u lowered at combo by LOWER_VEC_OP (vec) or LOWER_OP, memoized, with the elementwise sources below lowered
        first in a loop: a kernel's expression may be a chain hundreds of ops deep."""

        def key(x: UOp) -> tuple[UOp, Combo]:
            return (x, combo + (-1,)) if vec else (x, combo)

        rules, at = self.rules[vec], At(self, combo, vec)
        stack = [u]
        while stack:
            x = stack[-1]
            if key(x) in self.memo:
                stack.pop()
                continue
            todo = [s for s in x.src if key(s) not in self.memo] if x.op in GroupOp.Elementwise else []
            if todo:
                stack.extend(todo)
                continue
            if (lowered := rules.translate(x, at)) is None:
                raise NotImplementedError(f"cannot lower {x.op}")
            self.memo[key(x)] = lowered
            stack.pop()
        return self.memo[key(u)]

    def index(self, view: UOp, combo: Combo) -> tuple[UOp, UOp]:
        # memoized: a view read at several places of a kernel (a LOAD and its VALID, a shared input of several
        # reduces) asks for the same index again, and so does every value of an expanded axis the view broadcasts
        # along (stride 0, no mask there: the index does not depend on it). Half the calls of a CNN step or LLM prompt.
        # An unmasked view's index is linear in the lane: lane 0's simplified index plus a constant, so each further
        # lane costs one small simplify instead of the whole expression's (the simplifier writes both alike: the
        # sources of the CNN step, the SmolLM2 prompt and an op mix on CPU, CL and NOOPT are unchanged)
        idxs = self.idxs(combo)
        if (broadcast := self.broadcast_axes.get(view)) is None:
            broadcast = self.broadcast_axes[view] = _broadcast_axes(view.arg, self.expanded_axes)
        key = (view, tuple(None if a in broadcast else i for a, i in enumerate(idxs)))
        if (hit := self.index_memo.get(key)) is None:
            st = view.arg
            constant_lane = any(combo) and not any(isinstance(c, UOp) for c in combo)  # tensor-core lanes are UOps
            if len(st.views) == 1 and st.views[0].mask is None and constant_lane:
                base, valid = self.index(view, (0,) * len(combo))
                offset = sum(c * st.views[0].strides[a] for a, c in zip(self.expanded_axes, combo))
                hit = (simplify(base + offset) if offset else base, valid)
            elif combo and not any(isinstance(c, UOp) for c in combo):
                hit = self._lane_index(view, combo)
            else:
                idx, valid = st.to_index(idxs)
                hit = (simplify(idx), simplify(valid))
            self.index_memo[key] = hit
        return hit

    def _lane_index(self, view: UOp, combo: Combo) -> tuple[UOp, UOp]:
        """The index of a masked or multi-view view at constant values of the expanded axes (see _at_lanes)."""
        return self._at_lanes(view, dict(zip(self.expanded_axes, combo)))

    def _at_lanes(self, view: UOp, values: dict[int, int]) -> tuple[UOp, UOp]:
        """The view's (index, validity) at constant values of the expanded axes (those not in `values` at 0): each
        simplified with the expanded axes as placeholders (built once per view, see _LaneForm), then valued. Most of
        the division and modulo of a view of a view (a conv's windows over its padded input) is resolved once instead
        of once per combo: a third of the cold CNN step's lowering, half of the SmolLM2 prompt's. Sound for every
        value in range, and the same nodes as simplifying each combo's index directly on the CNN step's and SmolLM2
        prompt's kernels."""
        if (form := self.lane_forms.get(view)) is None:
            at, lanes = list(self.base_idxs), {}
            for a in (*self.k.axes_of(AxisType.UPCAST, AxisType.UNROLL), *self.tc_axes):
                # a RANGE no loop has (kind "lane"): an opaque value in [0, size) to the simplifier, replaced below
                size = UOp.const(self.idx_dtype, self.k.full_shape[a])
                at[a] = lanes[a] = UOp(Ops.RANGE, self.idx_dtype, (size,), (a, "lane"))
            idx, valid = view.arg.to_index(at)
            form = self.lane_forms[view] = (_LaneForm(simplify(idx), lanes), _LaneForm(simplify(valid), lanes))
        return form[0].at(values, self.const), form[1].at(values, self.const)

    def ev(self, u: UOp, combo: Combo) -> UOp:
        return self._lowered(u, combo, False)

    def lower_reduces(self) -> None:
        """All reduces of a kernel share one loop nest: build every accumulator update, then close the loops once."""
        if self.k.staged:
            self._stage_tiles()
        keys: dict[tuple[UOp, Combo], tuple] = {}
        # what one iteration of the reduce loop does to an accumulator (None: there is no loop); equal reduce inputs
        # share one accumulator
        updates_of: dict[tuple, Callable[[UOp | None], UOp]] = {}
        terms_of: dict[tuple, list[UOp]] = {}  # the unrolled values of each accumulator's update
        for r in (x for x in self.ast.toposort if x.op is Ops.REDUCE_AXIS):
            op = r.arg[0]
            for oc in self.out_combos:
                if self.tc is not None:
                    key = keys[(r, oc)] = (op, self.tc.dtype_out.vec(self.tc.elements[2]), (r, oc))
                    updates_of[key] = self._tc_update(r, oc)
                    continue
                vals = [self.val(r.src[0], oc + uc) for uc in self.unroll_combos]
                key = keys[(r, oc)] = (op, vals[0].dtype, tuple(vals))
                terms_of.setdefault(key, vals)
        # products folded into their accumulator one at a time are one multiply-add each; summed first and the sum
        # added, n products are a multiply, n - 1 multiply-adds and an add (a 4 x 2 register tile unrolled by 4 ran
        # 40 vector ops where 32 do). The chain is as long as the unroll, which the other accumulators' chains hide
        # where there are FMA_CHAINS of them; with fewer (a dot product's one vector) the sum keeps the loop short
        chain = len(terms_of) >= FMA_CHAINS and all(
            key[0] is Ops.ADD and all(v.op is Ops.MUL for v in vals) for key, vals in terms_of.items()
        )
        for key, vals in terms_of.items():
            updates_of[key] = functools.partial(self._combine, key[0], vals, chain)
        if not updates_of:
            return
        if not self.reduce_ranges:  # every reduce axis unrolled: no loop, no accumulator
            results = {key: update(None) for key, update in updates_of.items()}
        else:
            outside = (*self.thread_idxs, *self.global_ranges, *self.split_ranges)
            # a block's accumulator starts afresh in each block; the blocks' results are added to totals outside them
            results = self._accumulate(updates_of, self.reduce_ranges, (*outside, *self.block_ranges))
            if self.block_ranges:
                adds = {key: functools.partial(_add_to, key[0], res) for key, res in results.items()}
                results = self._accumulate(adds, self.block_ranges, outside, first=len(results))
        if self.k.axes_of(AxisType.GROUP):
            results = self._group_reduce(results)
        if self.split_ranges:
            results = self._split_reduce(results)
        if self.vec_axis is not None and self.k.axis_types[self.vec_axis] is AxisType.UNROLL:
            # lanes of an unrolled reduce axis are more inputs of the same reduce: fold them once, after the loop
            results = {key: self._fold_lanes(key[0], res) for key, res in results.items()}
        self.reduce_results = {rk: results[key] for rk, key in keys.items()}

    @staticmethod
    def _accumulate(
        updates: dict[tuple, Callable[[UOp], UOp]], loops: list[UOp], outside: tuple[UOp, ...], first: int = 0
    ) -> dict[tuple, UOp]:
        """An accumulator per key (op, dtype, ...), defined inside the `outside` loops and updated in every iteration
        of `loops` by its function of the accumulator's value; read after those loops close. The loops are sources
        of the update and of the read, so an update whose value is loop-invariant (a reduce over an expanded axis)
        still runs once per iteration instead of being hoisted before the loop."""
        accs = {
            key: UOp(Ops.DEFINE_ACC, key[1], (reduce_identity(key[0], key[1]), *outside), first + i)
            for i, key in enumerate(updates)
        }
        reads = {key: UOp(Ops.AFTER, acc.dtype, (acc, *loops)) for key, acc in accs.items()}
        values = {key: updates[key](read) for key, read in reads.items()}
        assigns = [UOp(Ops.ASSIGN, acc.dtype, (acc, values[key], *loops)) for key, acc in accs.items()]
        # updates that fold values in one at a time are emitted a step at a time across all accumulators (the
        # linearizer follows ENDRANGE's sources in order): a register tile's row of the unrolled reduce then loads
        # its vectors once and they die before the next row's, instead of one accumulator's whole chain loading
        # every row's vectors at once (4 x 2 tile unrolled by 4: 8 + 2 vectors live, not 8 + 8)
        chains = [_chain(values[key], reads[key], key[0]) for key in accs]
        steps = [c[i] for i in range(max(map(len, chains))) for c in chains if i < len(c)]
        hints = steps if any(len(c) > 1 for c in chains) else []
        end = UOp(Ops.ENDRANGE, dtypes.void, (loops[-1], *hints, *assigns))
        for rng in reversed(loops[:-1]):
            end = UOp(Ops.ENDRANGE, dtypes.void, (rng, end))
        return {key: UOp(Ops.AFTER, acc.dtype, (acc, end)) for key, acc in accs.items()}

    def _stage_tiles(self) -> None:
        """STAGE: at the top of each reduce step a barrier (the step before has read its tiles), then every thread
        of the workgroup copies its share of each staged tile to shared memory, then a barrier; the staged loads
        then read shared memory (`_Tile.read`)."""
        assert self.reduce_ranges and self.thread_idxs, "Kernel._stage_refusal lets no such kernel through"
        lids = sorted((u for u in self.thread_idxs if u.arg[2] == "l"), key=lambda u: u.arg[3])
        threads, tid = 1, UOp.const(self.idx_dtype, 0)
        for u in lids:
            tid, threads = tid + u * threads, threads * u.arg[1]
        tiles, copies = {}, []
        for n, i in enumerate(sorted(self.k.staged)):
            load = self.k.optimized_ast(self.k.stage_candidates[i])
            tiles[load] = _Tile(self, load, self.k.stage_layout(i), n)
            copies += [(tiles[load], *c) for c in tiles[load].copy(tid, threads)]
        # the loads of global memory are issued before the first barrier: their latency overlaps the wait there
        top = UOp(Ops.BARRIER, dtypes.void, (*self.reduce_ranges, *(value for _, _, value, _ in copies)))
        stores = [tile.store(pos, value, gate, top) for tile, pos, value, gate in copies]
        copied = UOp(Ops.BARRIER, dtypes.void, tuple(stores))
        for tile in tiles.values():
            tile.copied = copied
        self.staged = tiles

    @staticmethod
    def _combine(op: Ops, vals: list[UOp], chain: bool, acc: UOp | None) -> UOp:
        """An accumulator's update by its unrolled values: each combined into it in turn (`chain`), or combined
        with each other first."""
        if chain and acc is not None:
            for v in vals:
                acc = reduce_combine(op, acc, v)
            return acc
        partial = vals[0]
        for v in vals[1:]:
            partial = reduce_combine(op, partial, v)
        return partial if acc is None else reduce_combine(op, acc, partial)

    def _split_reduce(self, partials: dict[tuple, UOp]) -> dict[tuple, UOp]:
        """CPU threads each reduce a slice into their own slot of a small array; after the parallel loop the slots
        are combined in order (so the result does not depend on which thread finished first)."""
        (rng,) = self.split_ranges
        n = rng.src[0].arg
        slots = {
            key: UOp(Ops.DEFINE_LOCAL, v.dtype.ptr(n, local=True), (), f"part{i}")
            for i, (key, v) in enumerate(partials.items())
        }
        stores = [UOp(Ops.STORE, dtypes.void, (self._slot(slots[key], rng), v)) for key, v in partials.items()]
        end = UOp(Ops.ENDRANGE, dtypes.void, (rng, *stores))
        out = {}
        for key, buf in slots.items():
            done = UOp(Ops.AFTER, buf.dtype, (buf, end))
            vals = [
                UOp(Ops.LOAD, partials[key].dtype, (self._slot(done, UOp.const(self.idx_dtype, j)),)) for j in range(n)
            ]
            total = vals[0]
            for v in vals[1:]:
                total = reduce_combine(key[0], total, v)
            out[key] = total
        return out

    @staticmethod
    def _slot(buf: UOp, i: UOp) -> UOp:
        return UOp(Ops.INDEX, buf.dtype, (buf, i))

    def _fold_lanes(self, op: Ops, vec: UOp) -> UOp:
        """The lanes of `vec` combined pairwise: (l0 op l1) op (l2 op l3), and so on up a tree, broadcast."""
        floats = vec.dtype.scalar in (dtypes.float32, dtypes.float64)
        if self.k.renderer.lane_shuffle and floats and vec.op is not Ops.VECTORIZE:
            # the same tree as whole-vector ops: lane i meets lane i ^ step of a shuffled copy, so lane 0 holds each
            # level's pair sums in the same order, bit for bit. 16 lanes are 4 shuffles and ops instead of 15
            # extracts and scalar ops (the CNN's fc layer with 16 such sums: 79 -> 53 ms of gcc)
            step = 1
            while step < self.width:
                swapped = UOp(Ops.GEP, vec.dtype, (vec,), tuple(i ^ step for i in range(self.width)))
                vec, step = reduce_combine(op, vec, swapped), step * 2
            total = UOp(Ops.GEP, vec.dtype.scalar, (vec,), 0)
        else:
            lanes = self.lanes(vec)
            while len(lanes) > 1:
                lanes = [reduce_combine(op, lanes[i], lanes[i + 1]) for i in range(0, len(lanes), 2)]
            total = lanes[0]
        return UOp(Ops.VECTORIZE, vec.dtype, (total,) * self.width)

    def _local_strides(self) -> dict[int, int]:
        """Row-major strides of the LOCAL and GROUP axes: a thread's position in its workgroup's shared memory."""
        strides, n = {}, 1
        for a in reversed(self.k.axes_of(AxisType.LOCAL, AxisType.GROUP)):
            strides[a], n = n, n * self.k.full_shape[a]
        return strides

    def _group_reduce(self, partials: dict[tuple, UOp]) -> dict[tuple, UOp]:
        """GROUP axes split a reduce across the threads of a workgroup. Each thread writes its partial result to
        shared memory; after a barrier every thread combines the partials of its group in a loop (so all of them
        hold the result, and only the group's first thread stores it, see `store_gate`)."""
        strides = self._local_strides()
        shape = self.k.full_shape
        size = prod(shape[a] for a in strides)
        group_axes = self.k.axes_of(AxisType.GROUP)
        here = sum((self.base_idxs[a] * st for a, st in strides.items()), UOp.const(self.idx_dtype, 0))
        base = sum(
            (self.base_idxs[a] * st for a, st in strides.items() if a not in group_axes), UOp.const(self.idx_dtype, 0)
        )
        n_group = prod(shape[a] for a in group_axes)
        shared_bytes = size * sum(key[1].itemsize for key in partials)
        shared_max = self.k.renderer.shared_max
        if shared_bytes > shared_max:
            raise KernelOptError(
                f"{self.k.name_plain}: GROUP needs {shared_bytes} bytes of shared memory; the device has {shared_max}"
            )
        shared, stores = {}, []
        for i, (key, value) in enumerate(partials.items()):
            shared[key] = UOp(Ops.DEFINE_LOCAL, key[1].ptr(size, local=True), (), f"temp{i}")
            stores.append(
                UOp(
                    Ops.STORE,
                    dtypes.void,
                    (UOp(Ops.INDEX, shared[key].dtype, (shared[key], simplify(here))), value),
                )
            )
        barrier = UOp(Ops.BARRIER, dtypes.void, tuple(stores))
        rng = UOp(Ops.RANGE, self.idx_dtype, (UOp.const(self.idx_dtype, n_group),), (len(shape), "r"))
        pos, inner = base, n_group
        for a in group_axes:
            inner //= shape[a]
            pos = pos + ((rng // inner) % shape[a] if inner != 1 else rng % shape[a]) * strides[a]
        pos = simplify(pos)
        accs, updates = {}, []
        for i, (key, buf) in enumerate(shared.items()):
            op, dt = key[0], key[1]
            accs[key] = acc = UOp(Ops.DEFINE_ACC, dt, (reduce_identity(op, dt), *self.thread_idxs), len(partials) + i)
            val = UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, buf.dtype, (UOp(Ops.AFTER, buf.dtype, (buf, barrier)), pos)),))
            updates.append(UOp(Ops.ASSIGN, dt, (acc, reduce_combine(op, acc, val), rng)))
        end = UOp(Ops.ENDRANGE, dtypes.void, (rng, *updates))
        return {key: UOp(Ops.AFTER, acc.dtype, (acc, end)) for key, acc in accs.items()}

    def store_gate(self) -> UOp | None:
        """Threads past the end of a padded axis store nothing; of a GROUP reduce, only each group's first thread."""
        gate = self.bounds_gate
        for a in self.k.axes_of(AxisType.GROUP):
            first = UOp(Ops.CMPEQ, dtypes.bool, (self.base_idxs[a], UOp.const(self.idx_dtype, 0)))
            gate = first if gate is None else UOp(Ops.AND, dtypes.bool, (gate, first))
        return gate

    def _stores(self, buf: UOp, view: UOp, value: UOp, combo: Combo, gate: tuple[UOp, ...]) -> list[UOp]:
        def store(idx: UOp, v: UOp) -> UOp:
            return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, idx)), v, *gate))

        if self.width == 1:
            return [store(self.index(view, combo)[0], value)]
        st = view.arg
        if (
            len(st.views) == 1
            and st.views[0].mask is None
            and type(lane_step := st.views[0].strides[self.vec_axis]) is int
        ):
            # one unmasked view: its stride along the lanes says where they go, without each lane's index (a fifth of
            # the CNN step's lowering went to building and comparing those)
            if lane_step == 0:
                return [store(self.index(view, combo + (0,))[0], self.lanes(value)[0])]
            if lane_step == 1 and self.k.renderer.vector_dtype_ok(buf.dtype.base):  # type: ignore[attr-defined]
                return [store(self.index(view, combo + (0,))[0], value)]
        idxs = [self.index(view, combo + (lane,))[0] for lane in range(self.width)]
        if len(set(idxs)) == 1:  # the vector axis does not move this output (an unrolled reduce axis)
            return [store(idxs[0], self.lanes(value)[0])]
        if self.k.renderer.vector_dtype_ok(buf.dtype.base) and self._consecutive(idxs):  # type: ignore[attr-defined]
            return [store(idxs[0], value)]
        return [store(i, v) for i, v in zip(idxs, self.lanes(value))]

    def lower(self) -> UOp:
        self.lower_reduces()
        stores: list[UOp] = []
        zeros = (0,) * len(self.unroll_axes)
        gate_uop = self.store_gate()
        gate = () if gate_uop is None else (gate_uop,)
        for st in self.ast.src:
            buf, view, value = st.src
            for oc in self.out_combos:
                for tail in self.tc_tails["c"]:  # the epilogue once per accumulator entry of the lane
                    combo = oc + zeros + tail
                    stores.extend(self._stores(buf, view, self.val(value, combo), combo, gate))
        # every buffer stays a parameter, even one whose loads all folded away, so the launch signature is fixed
        params = tuple(
            sorted(
                (x for x in self.ast.toposort if x.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR)), key=lambda x: str(x.arg)
            )
        )
        if not self.global_ranges:
            return UOp(Ops.SINK, dtypes.void, (*params, *stores))
        end = UOp(Ops.ENDRANGE, dtypes.void, (self.global_ranges[-1], *stores))
        for rng in reversed(self.global_ranges[:-1]):
            end = UOp(Ops.ENDRANGE, dtypes.void, (rng, end))
        return UOp(Ops.SINK, dtypes.void, (*params, end))


class _Tile:
    """One staged input in shared memory (layout: Kernel.stage_layout): the copy into it, the reads from it."""

    def __init__(self, lw: Lowerer, load: UOp, layout: StageLayout, n: int):
        self.lw, self.load, self.layout = lw, load, layout
        self.buf = UOp(Ops.DEFINE_LOCAL, load.dtype.ptr(layout.size, local=True), (), f"stage{n}")
        self.copied: UOp | None = None  # the barrier after every tile's copy

    def copy(self, tid: UOp, threads: int) -> list[tuple[UOp, UOp, UOp | None]]:
        """This thread's share of the tile, (position in the tile, value loaded, gate) for each of its loads: load v
        of the copy is thread v % threads's."""
        lw, st, lay = self.lw, self.load.src[1].arg, self.layout
        total = prod(lay.sizes) // lay.width
        copies: list[tuple[UOp, UOp, UOp | None]] = []
        for j in range(ceildiv(total, threads)):
            v = tid + j * threads
            gate = None
            if (j + 1) * threads > total:  # the last round: threads past the end copy the last vector again, unstored
                gate = v.alu(Ops.CMPLT, UOp.const(lw.idx_dtype, total))
                v = gate.alu(Ops.WHERE, v, UOp.const(lw.idx_dtype, total - 1))
            e, coords, inner = v * lay.width, {}, prod(lay.sizes)
            for a, size in zip(lay.axes, lay.sizes):
                inner //= size
                coords[a] = simplify((e // inner) % size if a != lay.axes[0] else e // inner)
            at = [
                coords.get(a, UOp.const(lw.idx_dtype, 0) if base is None or t is AxisType.LOCAL else base)
                for a, (base, t) in enumerate(zip(lw.base_idxs, lw.k.axis_types))
            ]
            idx, valid = (simplify(x) for x in st.to_index(at))
            dt = self.load.dtype.vec(lay.width) if lay.width > 1 else self.load.dtype
            addr = UOp(Ops.INDEX, self.load.src[0].dtype, (self.load.src[0], idx))
            value = UOp(Ops.LOAD, dt, (addr,) if valid.op is Ops.CONST and valid.arg else (addr, valid))
            copies.append((self._pos(coords), value, gate))
        return copies

    def store(self, pos: UOp, value: UOp, gate: UOp | None, after: UOp) -> UOp:
        target = UOp(Ops.INDEX, self.buf.dtype, (UOp(Ops.AFTER, self.buf.dtype, (self.buf, after)), pos))
        return UOp(Ops.STORE, dtypes.void, (target, value) + (() if gate is None else (gate,)))

    def _pos(self, coords: dict[int, UOp]) -> UOp:
        zero = UOp.const(self.lw.idx_dtype, 0)
        return simplify(sum((coords[a] * p for a, p in zip(self.layout.axes, self.layout.pitch)), zero))

    def read(self, idxs: list[UOp]) -> UOp:
        assert self.copied is not None
        done = UOp(Ops.AFTER, self.buf.dtype, (self.buf, self.copied))
        pos = self._pos({a: idxs[a] for a in self.layout.axes})
        return UOp(Ops.LOAD, self.load.dtype, (UOp(Ops.INDEX, self.buf.dtype, (done, pos)),))


def _paired_loads(vals: list[UOp]) -> tuple[UOp, ...]:
    """Fragment entries (2i, 2i+1) that are loads of neighbouring elements, the first at an even index, become the
    two lanes of one 2-wide load (a tensor core's register holds such a pair)."""
    out = list(vals)
    for i in range(0, len(out) - 1, 2):
        x, y = out[i], out[i + 1]
        if x.op is not Ops.LOAD or y.op is not Ops.LOAD or len(x.src) != 1 or len(y.src) != 1:
            continue
        (ix,), (iy,) = x.src, y.src
        step, parity = simplify(iy.src[1] - ix.src[1]), simplify(ix.src[1] % 2)
        if ix.src[0] is not iy.src[0] or step.op is not Ops.CONST or step.arg != 1:
            continue
        if parity.op is not Ops.CONST or parity.arg != 0:
            continue
        pair = UOp(Ops.LOAD, x.dtype.vec(2), (ix,))
        out[i], out[i + 1] = UOp(Ops.GEP, x.dtype, (pair,), 0), UOp(Ops.GEP, x.dtype, (pair,), 1)
    return tuple(out)


# *** the lowering of each AST op, at one point of the expanded axes ***


class At(NamedTuple):
    """Where an AST node is lowered: the kernel's Lowerer and one value per expanded axis (vector axis left out for
    LOWER_VEC_OP). The rules may assume every elementwise source is lowered already (in the Lowerer's memo)."""

    lw: Lowerer
    combo: Combo
    vec: bool = False

    def src(self, s: UOp) -> UOp:
        """The elementwise source `s` lowered at this combo: read from the memo, where Lowerer._lowered put it."""
        return self.lw.memo[(s, self.combo + (-1,)) if self.vec else (s, self.combo)]


def _masked(valid: UOp, value: UOp) -> UOp:
    """value where the view is valid, 0 where it reads padding."""
    if valid.op is Ops.CONST:
        return value if valid.arg else UOp.const(value.dtype, 0)
    return valid.alu(Ops.WHERE, value, UOp.const(value.dtype, 0))


def _lower_staged(ctx: At, x: UOp) -> UOp | None:
    """A staged load (STAGE) reads its tile in shared memory, copied there by Lowerer._stage_tiles."""
    tile = ctx.lw.staged.get(x)
    return None if tile is None else tile.read(ctx.lw.idxs(ctx.combo))


def _lower_load(ctx: At, x: UOp) -> UOp:
    buf, view = x.src  # LOAD(DEFINE_GLOBAL, VIEW), as uop/spec.py checks
    idx, valid = ctx.lw.index(view, ctx.combo)
    if valid.op is Ops.CONST and not valid.arg:
        return UOp.const(x.dtype, 0)  # reads only padding: no load at all
    addr = UOp(Ops.INDEX, buf.dtype, (buf, idx))
    return UOp(Ops.LOAD, x.dtype, (addr,) if valid.op is Ops.CONST else (addr, valid))


def _lower_const(ctx: At, x: UOp) -> UOp:
    value = UOp.const(x.dtype, x.arg)
    if not x.src or not x.src[0].arg.has_mask:
        return value
    return _masked(ctx.lw.index(x.src[0], ctx.combo)[1], value)


def _lower_iota(ctx: At, x: UOp) -> UOp:
    idx, valid = ctx.lw.index(x.src[0], ctx.combo)
    value = idx.cast(x.dtype)
    return value if valid.op is Ops.CONST and valid.arg else valid.alu(Ops.WHERE, value, UOp.const(x.dtype, 0))


def _lower_reduce(ctx: At, x: UOp) -> UOp:
    lw, combo = ctx.lw, ctx.combo
    res = lw.reduce_results[(x, combo[: len(lw.upcast_axes)])]
    if lw.tc is not None:  # the lane's accumulator entry at these tile coordinates
        return UOp(Ops.GEP, res.dtype.scalar, (res,), lw.tc_tails["c"].index(combo[-3:]))
    return lw.lanes(res)[combo[-1]] if lw.width > 1 else res


# one scalar value per combo: loads become INDEX + LOAD (gated where the view is padded), a view's constants and
# indices are masked by its validity, a reduce reads its accumulator (lowered before, by lower_reduces)
LOWER_OP = PatternMatcher(
    [
        (UPat(Ops.LOAD, name="x"), _lower_staged),
        (UPat(Ops.LOAD, name="x"), _lower_load),
        (UPat(Ops.CONST, name="x"), _lower_const),  # a view's constant carries the view's mask
        (UPat(Ops.IOTA, name="x"), _lower_iota),
        (UPat(Ops.VALID, name="x"), lambda ctx, x: ctx.lw.index(x.src[0], ctx.combo)[1]),
        (UPat(Ops.REDUCE_AXIS, name="x"), _lower_reduce),
        (UPat(Ops.DEFINE_VAR, name="x"), lambda x: x),  # a kernel argument
        (
            UPat(GroupOp.Elementwise, name="x"),
            lambda ctx, x: UOp(x.op, x.dtype, tuple([ctx.src(s) for s in x.src]), x.arg),
        ),
    ]
)


def _vec_alu(ctx: At, x: UOp) -> UOp:
    lw = ctx.lw
    srcs = [ctx.src(s) for s in x.src]
    # a vector op pays off unless every source is one value broadcast (then one scalar op does the work), or bools
    # gathered lane by lane: their mask is built from scalars anyway (a one-hot's `(label == i) & valid` cast to
    # float, 2048 x 1024 on one core: 500 us per lane, 1169 us as a mask of gathered int64 compares)
    real = any(s.op is not Ops.VECTORIZE or (len(set(s.src)) > 1 and s.dtype.scalar != dtypes.bool) for s in srcs)
    # asked with the vector dtype: an op may be one instruction at some widths only (DP4A)
    vec = x.dtype.vec(lw.width)
    if real and lw.k.renderer.vector_op_ok(x.op, vec, [s.dtype.scalar for s in srcs]):  # type: ignore[attr-defined]
        return UOp(x.op, vec, tuple(srcs), x.arg)
    per_lane = zip(*[lw.lanes(s) for s in srcs])
    return UOp(Ops.VECTORIZE, x.dtype.vec(lw.width), tuple(UOp(x.op, x.dtype, ls, x.arg) for ls in per_lane))


def _lane_values(ctx: At, x: UOp) -> list[UOp]:
    return [ctx.lw.ev(x, ctx.combo + (lane,)) for lane in range(ctx.lw.width)]


def _vec_load(ctx: At, x: UOp) -> UOp | None:
    """One vector load where the lanes' scalar loads read consecutive elements under the same gate (not from a staged
    tile: its rows are padded, a vector read from it may not be aligned); under gates of their own, one masked load
    where the renderer has those."""
    if x in ctx.lw.staged or not ctx.lw.k.renderer.vector_load_ok(x.dtype.vec(ctx.lw.width)):  # type: ignore[attr-defined]
        return None
    st, lw = x.src[1].arg, ctx.lw
    view = st.views[0]
    if len(st.views) == 1 and (view.mask is None or view.mask[lw.vec_axis] == (0, st.shape[lw.vec_axis])):
        # one view, not masked along the lanes: its stride there says what the lanes read, found without building
        # every lane's scalar load (half the cold CNN step's lowering went to them)
        stride, lane0 = view.strides[lw.vec_axis], lw.ev(x, ctx.combo + (0,))
        if type(stride) is int and stride == 0:  # every lane reads lane 0's element
            return UOp(Ops.VECTORIZE, x.dtype.vec(lw.width), (lane0,) * lw.width)
        if _is_one(stride) and view.mask is None and lane0.op is Ops.LOAD:
            return UOp(Ops.LOAD, x.dtype.vec(lw.width), lane0.src)
    if (by_form := _load_by_form(ctx, x)) is not None:
        return by_form
    scalars = _lane_values(ctx, x)
    if not all(s.op is Ops.LOAD for s in scalars):
        return _masked_vec_load(ctx, x, scalars)
    if (row := _row_load(ctx, x, scalars)) is not None:
        return row
    return _transposed_load(ctx, x)


def _row_load(ctx: At, x: UOp, scalars: list[UOp]) -> UOp | None:
    """One vector load of `scalars` (a lane each) where they read consecutive elements, under one gate or under a
    mask of lanes (_masked_vec_load); None where they do not."""
    if not all(s.op is Ops.LOAD for s in scalars):
        return _masked_vec_load(ctx, x, scalars)
    idxs = [s.src[0].src[1] for s in scalars]
    same_valid = all(s.src[1:] == scalars[0].src[1:] for s in scalars)
    if same_valid and len(set(idxs)) > 1 and ctx.lw._consecutive(idxs):
        return UOp(Ops.LOAD, x.dtype.vec(ctx.lw.width), scalars[0].src)
    return _masked_vec_load(ctx, x, scalars)


def _transposed_load(ctx: At, x: UOp) -> UOp | None:
    """Lanes a row apart in memory where another upcast axis of as many values runs along the rows (the square tile
    of a copy out of channel blocks, (n, c/8, h, w, 8) -> (n, c, h, w)): the tile is loaded as one vector per lane
    along that axis and transposed in registers (_transpose), and this combo's vector is one of its columns. gcc
    builds a vector of scalar loads as a load and an insert per lane (64 for 8 x 8); the tile is 8 loads and 24
    shuffles. A blocked 32 x 64 x 32^2 back to NCHW with a relu, two cores, A/B in one process: 0.42-0.50 -> 0.40-0.45
    ms best, 0.55-0.61 -> 0.47-0.54 median (the copy is near memory speed either way). Only where the renderer
    writes a vector of two vectors' lanes as one shuffle (Renderer.lane_shuffle)."""
    lw = ctx.lw
    if not lw.k.renderer.lane_shuffle or lw.width < 2 or lw.width & (lw.width - 1):
        return None
    for pos, axis in enumerate(lw.upcast_axes):
        if lw.k.full_shape[axis] != lw.width or not _unit_step(lw, x.src[1], axis):
            continue
        rows = []
        for lane in range(lw.width):
            combos = [ctx.combo[:pos] + (c,) + ctx.combo[pos + 1 :] + (lane,) for c in range(lw.width)]
            if (row := _row_load(ctx, x, [lw.ev(x, c) for c in combos])) is None:
                break
            rows.append(row)
        else:
            return _transpose(rows)[ctx.combo[pos]]
    return None


def _unit_step(lw: Lowerer, view: UOp, axis: int) -> bool:
    """Whether the view's address moves by one element along `axis` (gates aside: padding reads as masked lanes)."""
    st = view.arg
    if len(st.views) == 1:
        return _is_one(st.views[0].strides[axis])
    return lw._steps_by_one(view, axis, False)


def _transpose(rows: list[UOp]) -> list[UOp]:
    """The columns of a square tile given as its rows (vector c of the result is lane c of every row), in log2(n)
    rounds of shuffles of two vectors each, the x86 way: each round pairs vectors e rows apart and interleaves their
    lanes in runs of e, within 16-byte groups (unpcklps/unpckhps, shufps) until runs fill a group, then across
    (vperm2f128). 8 x 8 float32: 24 shuffles."""
    n, dt = len(rows), rows[0].dtype
    group = min(n, max(2, 16 // dt.scalar.itemsize))
    # each vector's lanes as (row, column) of the tile, to find the columns at the end
    labels = [[(i, c) for c in range(n)] for i in range(n)]
    e = 1
    while e < n:
        width = max(2 * e, group)
        new, new_labels = list(rows), list(labels)
        for a in (i for i in range(n) if not i & e):
            for half, at in ((0, a), (1, a + e)):
                picked = []
                for j in range(n):
                    g, w = divmod(j, width)
                    lane = g * width + half * (width // 2) + (w // (2 * e)) * e + w % e
                    picked.append((a if (w // e) % 2 == 0 else a + e, lane))
                new[at] = UOp(Ops.VECTORIZE, dt, tuple(UOp(Ops.GEP, dt.scalar, (rows[v],), ln) for v, ln in picked))
                new_labels[at] = [labels[v][ln] for v, ln in picked]
        rows, labels, e = new, new_labels, 2 * e
    columns = {lab[0][1]: r for r, lab in zip(rows, labels)}
    assert all(lab == [(i, lab[0][1]) for i in range(n)] for lab in labels), "a transpose's lanes out of order"
    return [columns[c] for c in range(n)]


def _load_by_form(ctx: At, x: UOp) -> UOp | None:
    """The load of a view whose address steps by one or not at all along the lanes (known from its form, see
    _LaneForm), without lowering each lane's scalar load. Not at all, its validity neither: lane 0's value in every
    lane. By one: only each lane's validity is valued; one gate for every lane is a gated vector load, gates of their
    own a masked load (_lanes_under_mask). A padded conv's merged rows read 16 lanes under a few gates: each lane's
    address, simplified anew per lane, was a third of the cold CNN step's lowering. None otherwise (the lane by lane
    path decides)."""
    lw, view = ctx.lw, x.src[1]
    if view not in lw.lane_forms:
        lw._at_lanes(view, {})
    form = lw.lane_forms[view]
    step = form[0].coefficient(lw.vec_axis)  # type: ignore[arg-type]
    if step == 0 and form[1].coefficient(lw.vec_axis) == 0:  # type: ignore[arg-type]
        return UOp(Ops.VECTORIZE, x.dtype.vec(lw.width), (lw.ev(x, ctx.combo + (0,)),) * lw.width)
    if step != 1:
        return None
    values = dict(zip(lw.expanded_axes, ctx.combo))
    gates = []
    for lane in range(lw.width):
        values[lw.vec_axis] = lane  # type: ignore[index]
        gates.append(form[1].at(values, lw.const))
    idx, valid0 = lw.index(view, ctx.combo + (0,))
    dt, buf = x.dtype.vec(lw.width), x.src[0]
    if all(g is gates[0] for g in gates) and not (valid0.op is Ops.CONST and not valid0.arg):
        addr = UOp(Ops.INDEX, buf.dtype, (buf, idx))
        return UOp(Ops.LOAD, dt, (addr,) if valid0.op is Ops.CONST else (addr, valid0))
    live = [(i, g) for i, g in enumerate(gates) if not (g.op is Ops.CONST and not g.arg)]
    if len(live) < 2 or not lw.k.renderer.masked_load(dt):
        return None
    return _lanes_under_mask(dt, buf, idx, live)


def _lanes_under_mask(dt: DType, buf: UOp, base: UOp, gates: list[tuple[int, UOp]]) -> UOp:
    """One load of the vector at `base` under a mask of lanes, a bit per lane (lane 0 lowest) set where the lane's
    gate holds. The mask is built per distinct gate (the lanes of a window share a few), not per lane."""
    bits: dict[UOp, int] = {}
    for i, gate in gates:
        bits[gate] = bits.get(gate, 0) | 1 << i
    zero = UOp.const(dtypes.uint32, 0)
    terms = [g.alu(Ops.WHERE, UOp.const(dtypes.uint32, b), zero) for g, b in bits.items()]
    mask = functools.reduce(lambda a, b: a.alu(Ops.OR, b), terms)
    return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, buf.dtype, (buf, base)), mask))


def _masked_vec_load(ctx: At, x: UOp, scalars: list[UOp]) -> UOp | None:
    """Lanes reading consecutive elements, each under its own gate or in the padding altogether (a padded conv's
    shifted window at an edge): one load of the vector under a mask of lanes (_lanes_under_mask)."""
    dt = x.dtype.vec(ctx.lw.width)
    if not ctx.lw.k.renderer.masked_load(dt) or not all(s.op in (Ops.LOAD, Ops.CONST) for s in scalars):
        return None
    loads = [(i, s) for i, s in enumerate(scalars) if s.op is Ops.LOAD]
    if len(loads) < 2 or any(s.op is Ops.CONST and s.arg != 0 for s in scalars):
        return None
    first, load0 = loads[0]
    if any(s.src[0].src[0] is not load0.src[0].src[0] for _, s in loads):
        return None
    # each lane's index `base + c` as the simplifier writes it: the steps read off without a simplify per lane (a
    # sixth of the cold CNN step's lowering went to those)
    if not Lowerer._consecutive([s.src[0].src[1] for _, s in loads], [i for i, _ in loads]):
        return None
    base = simplify(load0.src[0].src[1] - first) if first else load0.src[0].src[1]
    gates = [(i, s.src[1] if len(s.src) > 1 else UOp.const(dtypes.bool, True)) for i, s in loads]
    return _lanes_under_mask(dt, load0.src[0].src[0], base, gates)


# one vector value per combo, its lanes the values of the vector axis: vector ALU ops where the renderer has them,
# else one scalar op per lane; vector loads where contiguous; anything else is its lanes' scalars, gathered
LOWER_VEC_OP = PatternMatcher(
    [
        (UPat(GroupOp.Elementwise, name="x"), _vec_alu),
        (
            UPat(Ops.REDUCE_AXIS, name="x"),
            lambda ctx, x: ctx.lw.reduce_results[(x, ctx.combo[: len(ctx.lw.upcast_axes)])],
        ),
        (UPat(Ops.LOAD, name="x"), _vec_load),
        (UPat(name="x"), lambda ctx, x: UOp(Ops.VECTORIZE, x.dtype.vec(ctx.lw.width), tuple(_lane_values(ctx, x)))),
    ]
)


INT32_MAX = 2**31 - 1


def _index_fits_int32(sink: UOp, every_int: bool = False) -> bool:
    """Whether every buffer size and every step of address math in `sink` (with `every_int`, every integer value)
    stays within int32's range, as the bounds of each node say (a loaded value's range is its data's: the subtree
    of a LOAD inside an address is not judged)."""
    todo = [u.src[1] for u in sink.toposort if u.op is Ops.INDEX]
    if every_int:
        todo += [u for u in sink.toposort if dtypes.is_int(u.dtype) and u.op is not Ops.LOAD]
    if any(u.op is Ops.DEFINE_GLOBAL and u.dtype.size > INT32_MAX for u in sink.toposort):  # type: ignore[attr-defined]
        return False
    seen: set[UOp] = set()
    while todo:
        x = todo.pop()
        if x in seen or x.op is Ops.LOAD:
            continue
        seen.add(x)
        lo, hi = _exact_bounds(x)
        if dtypes.is_int(x.dtype) and not (-INT32_MAX - 1 <= lo and hi <= INT32_MAX):
            return False
        todo.extend(x.src)
    return True


def lower(k: Kernel) -> UOp:
    """Address math in int32 where every extent, buffer size and address fits it, else in int64: a tensor of 2**31
    elements or more needs 64-bit loop counters and addresses (an int counter would wrap and never enter the loop).
    A GPU does 64-bit integer math in two instructions: there a kernel whose iteration space is larger (a 4096^3
    matmul) still gets int32 when every integer it computes is proven to fit; a CPU addresses in 64 bits anyway."""
    extents = [s.vmax if isinstance(s, UOp) else s for s in k.full_shape]
    small = prod(extents) <= INT32_MAX
    lw = Lowerer(k, dtypes.int32 if small or k.renderer.has_local else dtypes.int64)
    sink = lw.lower()
    if lw.idx_dtype == dtypes.int32 and not _index_fits_int32(sink, every_int=not small):
        lw = Lowerer(k, dtypes.int64)
        sink = lw.lower()
    record.translate_pass("lower", lw.ast, sink, lw.viz_steps)  # VIZ
    return sink
