"""Multi-device tensors in one process: a tensor split along an axis over several devices, or replicated on them.

A sharded tensor's UOp is MULTI(part on device 0, part on device 1, ...) with arg = the split axis (None: every part
is a full replica). Ops on it build the ordinary tensor graph with global shapes and a tuple of devices, so the
frontend and autograd's rules apply unchanged; `lower_multi` rewrites that graph, just before scheduling, into one
ordinary graph per device joined by COPY nodes. Its decisions, op by op:
  * elementwise ops (and CONTIGUOUS, DETACH, casts, ASSIGN) run per part; an operand split otherwise than the first
    split operand (the ASSIGN target for an assign) is brought to that split: a replica is shrunk to each device's
    slice, another split is gathered first;
  * a reduce over the split axis reduces each part, then all-reduces the partials: a ring (reduce-scatter then
    all-gather, 2(n-1)/n of the buffer through each device) for buffers of ALLREDUCE_RING_BYTES and more on 3+
    devices, else every device reads every other's partial (n-1 copies, no chunking overhead); partials are combined
    in device order everywhere, so replicas stay bitwise equal. A reduce over other axes runs per part;
  * movement ops run per part with the split axis moved along (a shrink of it gives uneven parts, no copy); where it
    cannot stay split (a pad, flip or expand of it, a reshape that mixes it with the dims before it) every device
    gathers the whole tensor and goes on with a replica;
  * a COPY to one device gathers the parts there.
Parts of uneven size come from splitting n rows over k devices as ceil(n/k) per device, the last ones shorter (or
empty), as tinygrad does; an empty part computes nothing.
"""

from __future__ import annotations

from typing import Mapping

from lazygrad.dtype import dtypes
from lazygrad.helpers import ContextVar, ceildiv, prod
from lazygrad.uop.ops import GroupOp, Ops, UOp

# at and above this many bytes an all-reduce over 3+ devices runs as a ring (a knob, so tests can cross it cheaply)
ALLREDUCE_RING_BYTES = ContextVar("ALLREDUCE_RING_BYTES", 256 << 10)


def split_bounds(size: int, n: int) -> list[tuple[int, int]]:
    """[start, end) of each of n parts of `size` rows: ceil(size / n) each, the last ones shorter or empty."""
    step = ceildiv(size, n)
    return [(min(i * step, size), min((i + 1) * step, size)) for i in range(n)]


def part_bounds(m: UOp) -> list[tuple[int, int]]:
    """[start, end) of each part of MULTI `m` along its split axis."""
    out, start = [], 0
    for p in m.src:
        out.append((start, start + p.shape[m.arg]))
        start = out[-1][1]
    return out


def multi(parts: list[UOp], axis: int | None) -> UOp:
    # a part with no elements becomes a constant: no kernel or copy ever runs over zero elements
    parts = [_empty_like(p) if prod(p.shape) == 0 and p.base.op not in (Ops.BUFFER, Ops.ASSIGN) else p for p in parts]
    return UOp(Ops.MULTI, parts[0].dtype, tuple(parts), axis)


def _device_const(value: object, dtype: object, device: str, shape: tuple[int, ...]) -> UOp:
    c = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(value, dtype))  # type: ignore[arg-type]
    if not shape:
        return c
    c = UOp(Ops.RESHAPE, c.dtype, (c,), (1,) * len(shape))
    return UOp(Ops.EXPAND, c.dtype, (c,), shape)


def _empty_like(p: UOp) -> UOp:
    return _device_const(0, p.dtype, p.device, p.shape)


# *** building blocks: copy, cat, shrink, gather, all-reduce ***


def whole_buffer(u: UOp) -> bool:
    """Whether u is a whole buffer in memory (maybe seen through a reshape)."""
    return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)


# nodes the scheduler always stores (a reduce read by a COPY is never fused into a consumer): a COPY reads them as is
_STORED = (Ops.BUFFER, Ops.CONTIGUOUS, Ops.COPY, Ops.REDUCE_AXIS, Ops.ASSIGN)


def copy_to(u: UOp, device: str) -> UOp:
    """u on `device`. The scheduler copies whole stored buffers only: a reshape of a stored node is copied as that node
    and reshaped on the other side (saves a kernel per copy); anything else is made contiguous first."""
    if u.device == device:
        return u
    base = u
    while base.op is Ops.RESHAPE:
        base = base.src[0]
    if base.op in _STORED:
        return u.rebase(UOp(Ops.COPY, u.dtype, (base,), device))
    return UOp(Ops.COPY, u.dtype, (UOp(Ops.CONTIGUOUS, u.dtype, (u,)),), device)


def _cat(pieces: list[UOp], axis: int) -> UOp:
    """Pieces (on one device) joined along axis: each padded to the whole and summed, fused into one kernel."""
    total = sum(p.shape[axis] for p in pieces)
    out, start = None, 0
    for p in pieces:
        pads = tuple((start, total - start - s) if i == axis else (0, 0) for i, s in enumerate(p.shape))
        start += p.shape[axis]
        padded = p if total == p.shape[axis] else UOp(Ops.PAD, p.dtype, (p,), pads)
        out = padded if out is None else out.alu(Ops.OR if p.dtype == dtypes.bool else Ops.ADD, padded)
    assert out is not None
    return out


def _shrink(p: UOp, axis: int, lo: int, hi: int) -> UOp:
    if (lo, hi) == (0, p.shape[axis]):
        return p
    arg = tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(p.shape))
    return UOp(Ops.SHRINK, p.dtype, (p,), arg)


def gather(m: UOp, device: str) -> UOp:
    """The whole of sharded `m` on `device`: its replica there, or the parts copied there and joined."""
    if m.arg is None:
        return next((p for p in m.src if p.device == device), None) or copy_to(m.src[0], device)
    pieces = [copy_to(p, device) for p in m.src if p.shape[m.arg] > 0]
    return _cat(pieces, m.arg) if pieces else _device_const(0, m.dtype, device, m.shape)


def replicate(m: UOp) -> UOp:
    return m if m.arg is None else multi([gather(m, p.device) for p in m.src], None)


def reshard(m: UOp, axis: int | None, bounds: list[tuple[int, int]] | None) -> UOp:
    """`m` split along `axis` at `bounds` (or replicated for axis None)."""
    if m.arg == axis and (axis is None or part_bounds(m) == bounds):
        return m
    full = replicate(m)
    if axis is None or bounds is None:
        return full
    return multi([_shrink(p, axis, lo, hi) for p, (lo, hi) in zip(full.src, bounds)], axis)


def _fold(op: Ops, xs: list[UOp]) -> UOp:
    out = xs[0]
    for x in xs[1:]:
        out = out.alu(op, x)
    return out


def all_reduce(op: Ops, parts: list[UOp]) -> list[UOp]:
    """Each device's partial combined with op (ADD, MUL, MAX) into the same full result on every device."""
    n, shape = len(parts), parts[0].shape
    size = prod(shape)
    devices = [p.device for p in parts]
    if n < 3 or size < n or size * parts[0].dtype.itemsize < ALLREDUCE_RING_BYTES.value:
        return [_fold(op, [copy_to(p, d) for p in parts]) for d in devices]
    # ring: chunk k is summed on its way from device k around to device k-1 (reduce-scatter), and the finished chunk
    # then travels on around the ring to every device (all-gather); each step moves one chunk per device
    flat = [p if shape == (size,) else UOp(Ops.RESHAPE, p.dtype, (p,), (size,)) for p in parts]
    chunks = [(lo, hi) for lo, hi in split_bounds(size, n) if hi > lo]
    have: list[dict[int, UOp]] = []
    for k, (lo, hi) in enumerate(chunks):
        acc = _shrink(flat[k], 0, lo, hi)
        for step in range(1, n):
            d = (k + step) % n
            acc = copy_to(acc, devices[d]).alu(op, _shrink(flat[d], 0, lo, hi))
        owner = (k + n - 1) % n
        on = {owner: acc}
        for step in range(1, n):
            d = (owner + step) % n
            on[d] = copy_to(on[(d - 1) % n], devices[d])
        have.append(on)
    out = []
    for i in range(n):
        whole = _cat([have[k][i] for k in range(len(chunks))], 0)
        out.append(whole if shape == (size,) else UOp(Ops.RESHAPE, whole.dtype, (whole,), shape))
    return out


# *** lowering: the global graph -> one graph per device ***


def _reduce_identity(op: Ops, dtype: object) -> object:
    return {Ops.ADD: 0, Ops.MUL: 1}.get(op, dtypes.min(dtype))  # type: ignore[arg-type]


def _lower_reduce(n: UOp, m: UOp) -> UOp:
    op, axes = n.arg
    parts = []
    for p in m.src:
        if prod(p.shape) == 0:
            shape = tuple(1 if i in axes else s for i, s in enumerate(p.shape))
            parts.append(_device_const(_reduce_identity(op, n.dtype), n.dtype, p.device, shape))
        else:
            parts.append(UOp(Ops.REDUCE_AXIS, n.dtype, (p,), n.arg))
    if m.arg is None or m.arg not in axes:
        return multi(parts, m.arg)
    return multi(all_reduce(op, parts), None)


def _reshape_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int, sizes: list[int]) -> int | None:
    """The axis of `new` that the split axis of `old` becomes, if every part stays one block of rows along it."""
    before, after = prod(old[:axis]), prod(old[axis + 1 :])
    for b in range(len(new)):
        if prod(new[:b]) == before and new[b] > 0 and all(s * after % prod(new[b + 1 :]) == 0 for s in sizes):
            if new[b] > 1 or old[axis] <= 1:
                return b
    return None


def _lower_movement(n: UOp, m: UOp) -> UOp:
    op, arg, axis = n.op, n.arg, m.arg
    if axis is None:
        return multi([UOp(op, n.dtype, (p,), _part_arg(n, p, None)) for p in m.src], None)
    if op is Ops.PERMUTE:
        return multi([UOp(op, n.dtype, (p,), arg) for p in m.src], arg.index(axis))
    if op is Ops.SHRINK:
        lo, hi = arg[axis]
        parts = []
        for p, (b, e) in zip(m.src, part_bounds(m)):
            local_lo, local_hi = min(max(lo, b), e) - b, max(min(hi, e), b) - b
            parts.append(
                UOp(op, n.dtype, (p,), tuple((local_lo, local_hi) if i == axis else r for i, r in enumerate(arg)))
            )
        return multi(parts, axis)
    if op is Ops.RESHAPE:
        sizes = [p.shape[axis] for p in m.src]
        b = _reshape_axis(m.shape, arg, axis, sizes)
        if b is not None:
            after, tail = prod(m.shape[axis + 1 :]), prod(arg[b + 1 :])
            parts = [
                UOp(op, n.dtype, (p,), arg[:b] + (s * after // tail,) + arg[b + 1 :]) for p, s in zip(m.src, sizes)
            ]
            return multi(parts, b)
    elif op is Ops.EXPAND and arg[axis] == m.shape[axis]:
        return multi([UOp(op, n.dtype, (p,), _part_arg(n, p, axis)) for p in m.src], axis)
    elif op is Ops.PAD and arg[axis] == (0, 0):
        return multi([UOp(op, n.dtype, (p,), arg) for p in m.src], axis)
    elif op is Ops.FLIP and not arg[axis]:
        return multi([UOp(op, n.dtype, (p,), arg) for p in m.src], axis)
    # the split axis cannot stay split: every device goes on with the whole tensor
    return _lower_movement(n, replicate(m))


def _part_arg(n: UOp, p: UOp, axis: int | None) -> object:
    """A movement op's arg for one part: shapes (EXPAND, RESHAPE) take the part's own size along the split axis."""
    if n.op is Ops.EXPAND and axis is not None:
        return tuple(p.shape[axis] if i == axis else s for i, s in enumerate(n.arg))
    return n.arg


def _lower_elementwise(n: UOp, srcs: tuple[UOp, ...]) -> UOp:
    multis = [s for s in srcs if s.op is Ops.MULTI]
    n_dev = len(multis[0].src)
    for s in srcs:
        if s.op is not Ops.MULTI and s.device is not None:
            raise RuntimeError(f"{n.op.name.lower()} mixes a tensor on {s.device} with one on {multis[0].device}")
        if s.op is Ops.MULTI and len(s.src) != n_dev:
            raise RuntimeError(f"{n.op.name.lower()} mixes tensors sharded over {n_dev} and {len(s.src)} devices")
    lead = srcs[0] if n.op is Ops.ASSIGN else next((s for s in multis if s.arg is not None), multis[0])
    axis = lead.arg
    bounds = part_bounds(lead) if axis is not None else None
    aligned = [reshard(s, axis, bounds) if s.op is Ops.MULTI else s for s in srcs]
    parts = [n.replace(src=tuple(s.src[i] if s.op is Ops.MULTI else s for s in aligned)) for i in range(n_dev)]
    return UOp(Ops.MULTI, n.dtype, tuple(parts), axis) if n.op is Ops.ASSIGN else multi(parts, axis)


_ELEMENTWISE = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.DETACH, Ops.ASSIGN}


def _lower(n: UOp, srcs: tuple[UOp, ...]) -> UOp:
    tuple_dev = next((s.arg for s in srcs if s.op is Ops.DEVICE and isinstance(s.arg, tuple)), None)
    if tuple_dev is not None:  # CONST, IOTA or BIND made on a tuple of devices: the same on each
        per_dev = [
            n.replace(src=tuple(UOp(Ops.DEVICE, arg=d) if s.op is Ops.DEVICE else s for s in srcs)) for d in tuple_dev
        ]
        return multi(per_dev, None)
    if not any(s.op is Ops.MULTI for s in srcs):
        return n if srcs == n.src else n.replace(src=srcs)
    if n.op is Ops.COPY:
        return gather(srcs[0], n.arg)
    if n.op is Ops.REDUCE_AXIS:
        return _lower_reduce(n, srcs[0])
    if n.op in GroupOp.Movement:
        return _lower_movement(n, srcs[0])
    if n.op in _ELEMENTWISE:
        return _lower_elementwise(n, srcs)
    raise NotImplementedError(f"{n.op.name} of a sharded tensor is not supported")


def lower_multi(roots: list[UOp], realized: Mapping[UOp, UOp]) -> tuple[list[UOp], dict[UOp, UOp]]:
    """Each root with its graph rewritten per device: a MULTI of ordinary single-device graphs where the root is
    sharded, an ordinary graph (with gathers below it) where it is on one device; and what every node of the graphs
    became. A sharded node realized before (`realized` maps it to the MULTI of its parts' buffers) is read, not
    recomputed."""
    memo: dict[UOp, UOp] = {}
    # one walk over all roots, children first, that stops at lowered and realized nodes: the roots of an optimizer
    # step share most of their graph, and a root's own toposort would walk it again for each
    stack: list[tuple[UOp, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        n, expanded = stack.pop()
        if n in memo:
            continue
        if expanded:
            memo[n] = _lower(n, tuple(memo[s] for s in n.src))
        elif (done := realized.get(n)) is not None and done.op is Ops.MULTI:
            memo[n] = done
        else:
            stack.append((n, True))
            stack.extend((s, False) for s in reversed(n.src) if s not in memo)
    return [memo[r] for r in roots], memo


def stored_multis(lowered: dict[UOp, UOp], becomes: Mapping[UOp, UOp]) -> dict[UOp, UOp]:
    """Sharded nodes of the global graph whose every part a schedule stored -> the MULTI of those buffers. Recorded as
    realized, so a later graph over the same node (an ASSIGN read again) reads them instead of lowering it anew:
    the per-device nodes it would lower to are not held by anything and are forgotten."""
    out = {}
    for n, m in lowered.items():
        if m.op is Ops.MULTI and n is not m and all(p.base in becomes for p in m.src):
            out[n] = m.replace(src=tuple(p.rebase(becomes[p.base]) for p in m.src))
    return out


def has_multi(u: UOp) -> bool:
    return any(x.op is Ops.MULTI or (x.op is Ops.DEVICE and isinstance(x.arg, tuple)) for x in u.toposort)
