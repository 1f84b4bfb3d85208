"""Matmul panels: a tensor-graph pass, run before the store decisions, that has a matmul read its right-hand side
from a copy in panels where the device says reading it as it is would be slow (Renderer.matmul_panel: on the CPU any
right-hand side of a product with 256 rows or more, whose columns a kernel would walk down at the row stride, and a
linear layer's (out, in) weight, which has no vector along the output).

A matmul reaches the scheduler as REDUCE_AXIS(ADD, last axis) of MUL(x side, w side), of shape (*batch, n, k): the x
side is a row of k broadcast along n, the w side a whole 2-d buffer broadcast along the batch, read row-major as
(k, n), or as its transpose (n, k) (`x @ w.T`). For a 16-bit float each side is widened (a CAST) before the product.
The pass replaces such a reduce by the same product over `w` copied into (n/p, k, p) panels (a CONTIGUOUS node,
which decision 1 stores), summed over k into (*batch, n/p, 1, p) and reshaped back: the graph Tensor.dot built when
the frontend made this decision, so the kernels are those it gave.

Gradients are left alone: autograd runs on the plain product, whose gradients sum over n or over the batch, never
over the last axis of a product with a whole buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lazygrad.device import Device
from lazygrad.dtype import dtypes
from lazygrad.helpers import prod
from lazygrad.uop.ops import GroupOp, Ops, UOp
from lazygrad.uop.view import ShapeTracker


@dataclass(frozen=True)
class Plan:
    """How one matmul reads its right-hand side from panels."""

    wi: int  # which source of the product is the w side
    leaf: UOp  # the stored node w is read from
    cast: Any  # the dtype both sides are widened to, or None
    transposed: bool  # w is read as (n, k): x @ w.T
    panel: int


def panel_plans(order: list[UOp], realized: dict[UOp, UOp]) -> dict[UOp, Plan]:
    """The matmuls among `order` (the nodes a schedule computes) whose right-hand side goes into panels."""
    plans: dict[UOp, Plan] = {}
    for r in order:
        if r.op is Ops.REDUCE_AXIS and r not in realized and (plan := _plan(r, realized)) is not None:
            plans[r] = plan
    return plans


def _buffer_view(u: UOp, realized: dict[UOp, UOp]) -> tuple[UOp, Any, Any, ShapeTracker] | None:
    """For u a chain of movement ops, with at most one float widening (a CAST) in it, over a stored leaf (a BUFFER,
    or a node realized earlier): the leaf, its Buffer, the widened dtype (or None) and the view of the buffer u
    reads. None for anything else."""
    chain: list[UOp] = []
    cast = None
    while u not in realized and (u.op in GroupOp.Movement or u.op is Ops.CAST and cast is None):
        if u.op is Ops.CAST:
            if not (dtypes.is_float(u.src[0].dtype) and u.dtype.itemsize > u.src[0].dtype.itemsize):
                return None
            cast = u.dtype
        else:
            chain.append(u)
        u = u.src[0]
    leaf, under = u, realized.get(u, u)
    while under.op in GroupOp.Movement:  # a realized node is read through its buffer's view (reshapes of a BUFFER)
        chain.append(under)
        under = under.src[0]
    if under.op is not Ops.BUFFER or not isinstance(under.arg.size, int):
        return None
    st = ShapeTracker.from_shape((under.arg.size,))
    for m in reversed(chain):
        st = st.apply(m.op, m.arg)
    return leaf, under.arg, cast, st


def _plan(r: UOp, realized: dict[UOp, UOp]) -> Plan | None:
    """For a reduce r that is a matmul whose right-hand side the device wants in panels, how to read it."""
    if len(r.shape) < 3 or r.arg[0] is not Ops.ADD or r.arg[1] != (len(r.shape) - 1,) or r.src[0].op is not Ops.MUL:
        return None
    mul = r.src[0]
    *batch, n, k = mul.shape
    if not batch or not dtypes.is_float(mul.dtype) or not all(isinstance(s, int) for s in mul.shape):
        return None
    for wi in (1, 0):  # the frontend's order, x * w, first
        xs, ws = mul.src[1 - wi], mul.src[wi]
        # the x side: a row (..., 1, k) broadcast along n, widened below the broadcast if the product is
        if xs.op is not Ops.EXPAND or xs.src[0].shape[-2:] != (1, k):
            continue
        row = xs.src[0].src[0] if xs.src[0].op is Ops.CAST else xs.src[0]
        if (found := _buffer_view(ws, realized)) is None:
            continue
        leaf, buf, cast, st = found
        if (cast is not None) != (xs.src[0].op is Ops.CAST) or row.dtype != buf.dtype or buf.size != k * n:
            continue
        v = st.views[-1]
        if len(st.views) != 1 or v.offset != 0 or v.mask is not None or any(v.strides[:-2]):
            continue
        if v.strides[-2:] not in ((1, n), (k, 1)):
            continue
        transposed = v.strides[-2:] == (k, 1)
        panel = Device[buf.device].renderer.matmul_panel(prod(batch), n, k, buf.dtype.itemsize, transposed)
        if panel > 0:
            return Plan(wi, leaf, cast, transposed, panel)
    return None


def over_panels(r: UOp, plan: Plan) -> UOp:
    """The matmul r (its sources maybe rebuilt since its plan was made) over w copied into panels, the graph Tensor.dot
    built for it: w as (n/p, k, p), each row of x as (..., 1, k, 1), their product (*batch, n/p, k, p) summed over k."""
    mul = r.src[0]
    *batch, n, k = mul.shape
    leaf, cast, panel, transposed = plan.leaf, plan.cast, plan.panel, plan.transposed
    xs = mul.src[1 - plan.wi]
    row = xs.src[0].src[0] if cast is not None else xs.src[0]
    dt, rows = leaf.dtype, (n, k) if transposed else (k, n)
    w = leaf if leaf.shape == rows else UOp(Ops.RESHAPE, dt, (leaf,), rows)
    if transposed:
        w = UOp(Ops.PERMUTE, dt, (w,), (1, 0))
    split = UOp(Ops.RESHAPE, dt, (w,), (k, n // panel, panel))
    packed = UOp(Ops.CONTIGUOUS, dt, (UOp(Ops.PERMUTE, dt, (split,), (1, 0, 2)),))
    full = (*batch, n // panel, k, panel)
    x = UOp(Ops.RESHAPE, row.dtype, (row,), (*row.shape[:-2], 1, k, 1))
    if cast is not None:
        packed, x = UOp(Ops.CAST, cast, (packed,)), UOp(Ops.CAST, cast, (x,))
    w_side = UOp(Ops.RESHAPE, packed.dtype, (packed,), (1,) * len(batch) + packed.shape)
    w_side, x_side = UOp(Ops.EXPAND, w_side.dtype, (w_side,), full), UOp(Ops.EXPAND, x.dtype, (x,), full)
    srcs = (x_side, w_side) if plan.wi == 1 else (w_side, x_side)
    red = UOp(Ops.REDUCE_AXIS, r.dtype, (UOp(Ops.MUL, mul.dtype, srcs),), (Ops.ADD, (len(batch) + 1,)))
    return UOp(Ops.RESHAPE, r.dtype, (red,), r.shape)
