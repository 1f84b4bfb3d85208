"""Lowering: an optimized kernel AST becomes a graph of loops (RANGE), address math, loads, ALU ops and stores.

Axes become loop variables (GLOBAL, REDUCE) or are expanded in Python (UPCAST, UNROLL: one copy of the
expression per value, which the renderer emits as straight-line code). A reduce becomes an accumulator
(DEFINE_ACC), updated (ASSIGN) inside its loop and read after it (AFTER its ENDRANGE).
"""

from __future__ import annotations

import itertools

from lazygrad.codegen.kernel import AxisType, Kernel
from lazygrad.dtype import dtypes
from lazygrad.helpers import prod
from lazygrad.uop.ops import GroupOp, Ops, UOp, graph_rewrite
from lazygrad.uop.symbolic import symbolic

Combo = tuple[int, ...]  # a value for each expanded axis (upcasts, then unrolls)


def reduce_identity(op: Ops, dtype) -> UOp:  # noqa: ANN001
    if op is Ops.ADD:
        return UOp.const(dtype, 0)
    if op is Ops.MUL:
        return UOp.const(dtype, 1)
    if op is Ops.MAX:
        return UOp.const(dtype, dtypes.min(dtype))
    raise NotImplementedError(f"no identity for reduce {op}")


def reduce_combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return UOp(op, a.dtype, (a, b))


class Lowerer:
    def __init__(self, k: Kernel):
        self.k = k
        self.ast = k.optimized_ast()
        shape, types = k.full_shape, k.axis_types
        self.base_idxs: list[UOp | None] = []
        self.global_ranges: list[UOp] = []
        self.reduce_ranges: list[UOp] = []
        for i, (s, t) in enumerate(zip(shape, types)):
            if t.expanded:
                self.base_idxs.append(None)
            elif s == 1:
                self.base_idxs.append(UOp.const(dtypes.int32, 0))
            else:
                r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, s),), (i, "r" if t.is_reduce else "g"))
                (self.reduce_ranges if t.is_reduce else self.global_ranges).append(r)
                self.base_idxs.append(r)
        # GPU-style targets: output and workgroup axes are thread ids, not loops
        self.thread_idxs: list[UOp] = self._thread_ids() if getattr(k.renderer, "has_local", False) else []
        self.upcast_axes = k.axes_of(AxisType.UPCAST)
        self.unroll_axes = k.axes_of(AxisType.UNROLL)
        self.out_combos = list(itertools.product(*[range(shape[a]) for a in self.upcast_axes]))
        self.unroll_combos = list(itertools.product(*[range(shape[a]) for a in self.unroll_axes]))
        self.memo: dict[tuple[UOp, Combo], UOp] = {}
        self.reduce_results: dict[tuple[UOp, Combo], UOp] = {}

    def _thread_ids(self) -> list[UOp]:
        """Replace the GLOBAL and LOCAL loops by SPECIAL thread ids, at most 3 of each kind (the launch grid).

        The innermost axis gets dimension 0, the one whose neighbouring threads run together."""
        specials: list[UOp] = []
        for kind, axis_type in (("g", AxisType.GLOBAL), ("l", AxisType.LOCAL)):
            axes = [a for a in self.k.axes_of(axis_type) if self.k.full_shape[a] != 1]
            groups = [axes[: len(axes) - 2]] + [[a] for a in axes[len(axes) - 2 :]] if len(axes) > 3 else [[a] for a in axes]
            for dim, group in enumerate(reversed(groups)):
                sizes = [self.k.full_shape[a] for a in group]
                sid = UOp(Ops.SPECIAL, dtypes.int32, (), (f"{'gidx' if kind == 'g' else 'lidx'}{dim}", prod(sizes), kind, dim))
                specials.append(sid)
                inner = prod(sizes)
                for a, size in zip(group, sizes):
                    inner //= size
                    idx = sid // inner if inner != 1 else sid
                    self.base_idxs[a] = idx % size if a != group[0] else idx
        self.global_ranges = [r for r in self.global_ranges if not isinstance(self.base_idxs[r.arg[0]], UOp) or self.base_idxs[r.arg[0]] is r]
        return specials

    def idxs(self, combo: Combo) -> list[UOp]:
        out = list(self.base_idxs)
        for axis, v in zip(self.upcast_axes + self.unroll_axes, combo):
            out[axis] = UOp.const(dtypes.int32, v)
        return out  # type: ignore[return-value]

    def index(self, view: UOp, combo: Combo) -> tuple[UOp, UOp]:
        idx, valid = view.arg.to_index(self.idxs(combo))
        return graph_rewrite(idx, symbolic), graph_rewrite(valid, symbolic)

    def ev(self, u: UOp, combo: Combo) -> UOp:
        key = (u, combo)
        if (ret := self.memo.get(key)) is None:
            ret = self.memo[key] = self._ev(u, combo)
        return ret

    def _ev(self, u: UOp, combo: Combo) -> UOp:
        if u.op is Ops.LOAD:
            buf, view = u.src
            idx, valid = self.index(view, combo)
            if valid.op is Ops.CONST and not valid.arg:
                return UOp.const(u.dtype, 0)
            addr = UOp(Ops.INDEX, buf.dtype, (buf, idx))
            return UOp(Ops.LOAD, u.dtype, (addr,) if valid.op is Ops.CONST else (addr, valid))
        if u.op is Ops.CONST:
            value = UOp.const(u.dtype, u.arg)
            if not u.src or not u.src[0].arg.has_mask:
                return value
            _, valid = self.index(u.src[0], combo)
            return valid.alu(Ops.WHERE, value, UOp.const(u.dtype, 0)) if valid.op is not Ops.CONST else (value if valid.arg else UOp.const(u.dtype, 0))
        if u.op is Ops.IOTA:
            idx, valid = self.index(u.src[0], combo)
            value = idx.cast(u.dtype)
            return value if valid.op is Ops.CONST and valid.arg else valid.alu(Ops.WHERE, value, UOp.const(u.dtype, 0))
        if u.op is Ops.VALID:
            return self.index(u.src[0], combo)[1]
        if u.op is Ops.REDUCE_AXIS:
            return self.reduce_results[(u, combo[: len(self.upcast_axes)])]
        if u.op is Ops.DEFINE_VAR:
            return u
        if u.op in GroupOp.Elementwise:
            return UOp(u.op, u.dtype, tuple(self.ev(s, combo) for s in u.src), u.arg)
        raise NotImplementedError(f"cannot lower {u.op}")

    def lower_reduces(self) -> None:
        """All reduces of a kernel share one loop nest: build every accumulator update, then close the loops once."""
        keys: dict[tuple[UOp, Combo], tuple] = {}
        partials: dict[tuple, UOp] = {}  # equal reduce inputs share one accumulator
        for r in (x for x in self.ast.toposort if x.op is Ops.REDUCE_AXIS):
            op = r.arg[0]
            for oc in self.out_combos:
                vals = [self.ev(r.src[0], oc + uc) for uc in self.unroll_combos]
                key = keys[(r, oc)] = (op, r.dtype, tuple(vals))
                if key not in partials:
                    partial = vals[0]
                    for v in vals[1:]:
                        partial = reduce_combine(op, partial, v)
                    partials[key] = partial
        if not partials:
            return
        if not self.reduce_ranges:  # every reduce axis unrolled: no loop, no accumulator
            results = partials
        else:
            accs = {key: UOp(Ops.DEFINE_ACC, key[1], (reduce_identity(key[0], key[1]), *self.thread_idxs, *self.global_ranges), i) for i, key in enumerate(partials)}
            # the reduce ranges are sources so an update whose value is loop-invariant (a reduce over an expanded
            # axis) still runs once per iteration instead of being hoisted before the loop
            updates = [
                UOp(Ops.ASSIGN, acc.dtype, (acc, reduce_combine(key[0], acc, partials[key]), *self.reduce_ranges)) for key, acc in accs.items()
            ]
            end = UOp(Ops.ENDRANGE, dtypes.void, (self.reduce_ranges[-1], *updates))
            for rng in reversed(self.reduce_ranges[:-1]):
                end = UOp(Ops.ENDRANGE, dtypes.void, (rng, end))
            results = {key: UOp(Ops.AFTER, acc.dtype, (acc, end)) for key, acc in accs.items()}
        self.reduce_results = {rk: results[key] for rk, key in keys.items()}

    def lower(self) -> UOp:
        self.lower_reduces()
        stores: list[UOp] = []
        zeros = (0,) * len(self.unroll_axes)
        for st in self.ast.src:
            buf, view, value = st.src
            for oc in self.out_combos:
                idx, _ = self.index(view, oc + zeros)
                stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, idx)), self.ev(value, oc + zeros))))
        # every buffer stays a parameter, even one whose loads all folded away, so the launch signature is fixed
        params = tuple(sorted((x for x in self.ast.toposort if x.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR)), key=lambda x: str(x.arg)))
        if not self.global_ranges:
            return UOp(Ops.SINK, dtypes.void, (*params, *stores))
        end = UOp(Ops.ENDRANGE, dtypes.void, (self.global_ranges[-1], *stores))
        for rng in reversed(self.global_ranges[:-1]):
            end = UOp(Ops.ENDRANGE, dtypes.void, (rng, end))
        return UOp(Ops.SINK, dtypes.void, (*params, end))


def lower(k: Kernel) -> UOp:
    return Lowerer(k).lower()
