"""Views: how movement ops map the indices of a kernel to addresses in a buffer, without copying.

A `View` is (shape, strides, offset, mask): element i of the view lives at offset + sum(i_k * strides_k) when every
i_k is inside mask_k, and reads as 0 otherwise (that is how pad costs nothing). Reshape, permute, expand, pad,
shrink and flip all produce a new View from an old one. The one case a single View cannot express is a reshape
of something already permuted or masked in an incompatible way; a `ShapeTracker` then stacks a second view whose
flat index feeds the first. Index expressions are built as UOps and the symbolic simplifier folds them back to
plain strides wherever it can.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from lazygrad.dtype import dtypes
from lazygrad.helpers import prod
from lazygrad.uop.ops import Ops, UOp, sadd, smin, smul, ssimplify, ssmax, ssub

Mask = tuple[tuple[int, int], ...]

# Sizes, strides, offsets and masks are ints, or int UOps over variables (symbolic shapes): see sadd / ssub / smul.


def _empty(lo: Any, hi: Any) -> bool:
    """Whether [lo, hi) is surely empty (a symbolic window is empty only if its bounds prove it)."""
    if type(lo) is int and type(hi) is int:
        return lo >= hi
    n = ssimplify(hi - lo)
    return (n if type(n) is int else n.vmax) <= 0


def strides_for_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, 0 for size-1 dims (they never move the index)."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc if s != 1 else 0)
        acc = smul(acc, s)
    return tuple(reversed(out))


def _merge_masks(a: Mask | None, b: Mask | None) -> Mask | None:
    if a is None:
        return b
    if b is None:
        return a
    return tuple((ssmax(x0, y0), smin(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))


@dataclass(frozen=True)
class View:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    mask: Mask | None
    contiguous: bool

    @staticmethod
    @functools.cache
    def create(
        shape: tuple[int, ...], strides: tuple[int, ...] | None = None, offset: int = 0, mask: Mask | None = None
    ) -> View:
        strides = (
            strides_for_shape(shape) if strides is None else tuple(0 if s == 1 else st for s, st in zip(shape, strides))
        )
        if mask is not None:
            if any(_empty(lo, hi) for lo, hi in mask):
                # nothing is valid: every element reads 0, no address is ever touched
                return View(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape), False)
            if all(m == (0, s) for m, s in zip(mask, shape)):
                mask = None
        contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
        return View(shape, strides, offset, mask, contiguous)

    @property
    def size(self) -> int:
        return prod(self.shape)

    def is_empty(self) -> bool:
        return self.mask is not None and any(_empty(lo, hi) for lo, hi in self.mask)

    # *** movement ***

    def permute(self, order: tuple[int, ...]) -> View:
        return View.create(
            tuple(self.shape[i] for i in order),
            tuple(self.strides[i] for i in order),
            self.offset,
            tuple(self.mask[i] for i in order) if self.mask is not None else None,
        )

    def expand(self, new_shape: tuple[int, ...]) -> View:
        if self.size == 0 or 0 in new_shape:
            return View.create(new_shape)
        mask = None
        if self.mask is not None:
            mask = tuple(
                m if s == ns else ((0, ns) if m != (0, 0) else (0, 0))
                for m, s, ns in zip(self.mask, self.shape, new_shape)
            )
        strides = tuple(st if s == ns else 0 for st, s, ns in zip(self.strides, self.shape, new_shape))
        return View.create(new_shape, strides, self.offset, mask)

    def _resize(self, bounds: tuple[tuple[int, int], ...], mask: Mask | None = None) -> View:
        """Window [lo, hi) per dim; lo may be negative and hi past the end when padding (then masked)."""
        offset = self.offset
        for st, (lo, _) in zip(self.strides, bounds):
            offset = sadd(offset, smul(st, lo))
        if self.mask is not None:
            shifted = tuple(
                (ssmax(0, smin(ssub(m0, lo), ssub(hi, lo))), ssmax(0, smin(ssub(m1, lo), ssub(hi, lo))))
                for (m0, m1), (lo, hi) in zip(self.mask, bounds)
            )
            mask = _merge_masks(shifted, mask)
        return View.create(tuple(ssub(hi, lo) for lo, hi in bounds), self.strides, offset, mask)

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> View:
        return self._resize(arg)

    def pad(self, arg: tuple[tuple[int, int], ...]) -> View:
        if all(lo == 0 and hi == 0 for lo, hi in arg):
            return self
        bounds = tuple((ssub(0, lo), sadd(s, hi)) for s, (lo, hi) in zip(self.shape, arg))
        mask = tuple((lo, sadd(s, lo)) for s, (lo, _) in zip(self.shape, arg))
        return self._resize(bounds, mask)

    def flip(self, axes: tuple[bool, ...]) -> View:
        offset = self.offset
        for s, st, f in zip(self.shape, self.strides, axes):
            if f:
                offset = sadd(offset, smul(ssub(s, 1), st))
        strides = tuple(smul(st, -1) if f else st for st, f in zip(self.strides, axes))
        mask = None
        if self.mask is not None:
            mask = tuple(
                (ssub(s, hi), ssub(s, lo)) if f else (lo, hi) for (lo, hi), s, f in zip(self.mask, self.shape, axes)
            )
        return View.create(self.shape, strides, offset, mask)

    def reshape(self, new_shape: tuple[int, ...]) -> View | None:
        """The same elements seen with a new shape, or None when one view cannot express it."""
        if new_shape == self.shape:
            return self
        if self.contiguous or self.size == 0:
            return View.create(new_shape)
        if self.is_empty():
            # a 0-d view has no dimension to carry the empty mask: keep this view under a new one
            return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None
        mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
        old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, mask) if s != 1]
        new_strides = [0] * len(new_shape)
        new_mask = [(0, s) for s in new_shape]
        i = j = 0
        while j < len(new_shape):
            if new_shape[j] == 1:
                j += 1
                continue
            # grow a group of old dims and new dims with equal products
            if i >= len(old):
                return None  # a symbolic size where the old shape has none left (equal only at the bound value)
            gi, gj = i, j
            po, pn = old[i][0], new_shape[j]
            i, j = i + 1, j + 1
            if isinstance(po, UOp) or isinstance(pn, UOp):
                if po is not pn:
                    return None  # a symbolic dim only maps to itself (no product of symbolic sizes is compared)
            while po != pn:
                if (i >= len(old) if po < pn else j >= len(new_shape)) or isinstance(
                    old[i][0] if po < pn else new_shape[j], UOp
                ):
                    return None
                if po < pn:
                    po, i = po * old[i][0], i + 1
                else:
                    pn, j = pn * new_shape[j], j + 1
            group_old, group_new = old[gi:i], [d for d in range(gj, j) if new_shape[d] != 1]
            if any(a[1] != smul(b[1], b[0]) for a, b in zip(group_old, group_old[1:])):
                return None  # old dims in this group are not laid out contiguously relative to each other
            masked = [k for k, (s, _, m) in enumerate(group_old) if m != (0, s)]
            if masked:
                if len(group_old) == 1 and len(group_new) == 1:
                    new_mask[group_new[0]] = group_old[0][2]  # one dim kept as it is (it may be symbolic)
                elif len(group_old) == 1:
                    # one masked dim split into several: the mask must align with the outermost new dim
                    lo, hi = group_old[0][2]
                    inner = prod(new_shape[d] for d in group_new[1:])
                    if lo % inner or hi % inner:
                        return None
                    new_mask[group_new[0]] = (lo // inner, hi // inner)
                elif len(group_new) == 1 and masked == [0]:
                    # several dims merged into one: only the outermost may be masked
                    lo, hi = group_old[0][2]
                    inner = prod(s for s, _, _ in group_old[1:])
                    new_mask[group_new[0]] = (lo * inner, hi * inner)
                else:
                    return None
            st = group_old[-1][1]
            for d in reversed(group_new):
                new_strides[d] = st
                st = smul(st, new_shape[d])
        if i != len(old):
            return None  # a symbolic size left over (the shapes agree only at the bound value)
        any_mask = any(m != (0, s) for m, s in zip(new_mask, new_shape))
        return View.create(new_shape, tuple(new_strides), self.offset, tuple(new_mask) if any_mask else None)

    # *** indexing ***

    def to_index(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
        """(address, validity) of the element at `idxs`, as unsimplified UOps."""
        dt = idxs[0].dtype if idxs else dtypes.int32  # the lowerer's index dtype (int64 for huge buffers)
        # no `0 +`, `* 1` or `True &` terms: the simplifier would only fold them away again (most of a kernel's
        # index math is built here, once per load and expanded lane)
        terms = [i if st == 1 else i * _idx(st, dt) for i, st in zip(idxs, self.strides) if st != 0]
        idx = _idx(self.offset, dt) if self.offset != 0 or not terms else None
        for term in terms:
            idx = term if idx is None else idx + term
        conds = []
        if self.mask is not None:
            for i, (lo, hi), s in zip(idxs, self.mask, self.shape):
                if type(lo) is not int or lo > 0:
                    conds.append(_idx(ssub(lo, 1), dt) < i)
                if hi < s if type(hi) is int and type(s) is int else hi is not s:
                    conds.append(i < _idx(hi, dt))
        valid = conds[0] if conds else UOp.const(dtypes.bool, True)
        for cond in conds[1:]:
            valid = valid & cond
        return idx, valid  # type: ignore[return-value]


def full_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The iteration space of views of one kernel: per axis the size that is not 1 (a view is 1 where it does not
    move along the axis; a symbolic size is a UOp, never compared by value)."""
    out = []
    for dims in zip(*shapes):
        sym = [d for d in dims if isinstance(d, UOp)]
        out.append(sym[0] if sym else max(dims))
    return tuple(out)


def _idx(x: Any, dt: Any) -> UOp:
    """A size or offset as index math of dtype dt (a symbolic one is cast: index math may be int64)."""
    return x.cast(dt) if isinstance(x, UOp) else UOp.const(dt, x)


@dataclass(frozen=True)
class ShapeTracker:
    views: tuple[View, ...]

    @staticmethod
    def from_shape(shape: tuple[int, ...]) -> ShapeTracker:
        return ShapeTracker((View.create(tuple(shape)),))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.views[-1].shape

    @property
    def size(self) -> int:
        return self.views[-1].size

    @property
    def contiguous(self) -> bool:
        return len(self.views) == 1 and self.views[0].contiguous

    @property
    def has_mask(self) -> bool:
        return any(v.mask is not None for v in self.views)

    def _with_last(self, v: View) -> ShapeTracker:
        return ShapeTracker(self.views[:-1] + (v,))

    def reshape(self, new_shape: tuple[int, ...]) -> ShapeTracker:
        if (v := self.views[-1].reshape(tuple(new_shape))) is not None:
            if v.contiguous and len(self.views) > 1 and self.views[-2].shape == v.shape:
                return ShapeTracker(self.views[:-1])  # a reshape back to the inner view's shape: that view alone
            return self._with_last(v)
        return ShapeTracker(self.views + (View.create(tuple(new_shape)),))

    def permute(self, order: tuple[int, ...]) -> ShapeTracker:
        return self._with_last(self.views[-1].permute(order))

    def expand(self, new_shape: tuple[int, ...]) -> ShapeTracker:
        return self._with_last(self.views[-1].expand(tuple(new_shape)))

    def pad(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
        return self._with_last(self.views[-1].pad(arg))

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
        return self._with_last(self.views[-1].shrink(arg))

    def flip(self, axes: tuple[bool, ...]) -> ShapeTracker:
        return self._with_last(self.views[-1].flip(axes))

    def apply(self, op: Ops, arg: Any) -> ShapeTracker:
        """Apply one movement op, given as the op and arg it has in the tensor graph."""
        return _MOVEMENT[op](self, arg)

    def to_index(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
        idx, valid = self.views[-1].to_index(idxs)
        for v in reversed(self.views[:-1]):
            # the flat address of the outer view is an element index into the inner view's shape
            inner_idxs, acc = [], 1
            for k, s in reversed(list(enumerate(v.shape))):
                part = idx // acc if acc != 1 else idx
                inner_idxs.append(part % s if k != 0 else part)
                acc *= s
            idx, inner_valid = v.to_index(list(reversed(inner_idxs)))
            valid = valid & inner_valid
        return idx, valid

    def real_strides(self) -> tuple[int | None, ...]:
        """Per-axis stride where one view says it plainly; None where index math is more than a stride."""
        if len(self.views) == 1:
            v = self.views[0]
            return tuple(
                None if v.mask is not None and v.mask[i] != (0, s) else st
                for i, (s, st) in enumerate(zip(v.shape, v.strides))
            )
        return tuple(None for _ in self.shape)


_MOVEMENT = {
    Ops.RESHAPE: ShapeTracker.reshape,
    Ops.PERMUTE: ShapeTracker.permute,
    Ops.EXPAND: ShapeTracker.expand,
    Ops.PAD: ShapeTracker.pad,
    Ops.SHRINK: ShapeTracker.shrink,
    Ops.FLIP: ShapeTracker.flip,
}
