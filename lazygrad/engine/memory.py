"""Memory planning: intermediate buffers whose lifetimes do not overlap share one block of memory.

A buffer may be planned only when nothing but the kernel list can ever reach it (no Tensor, no UOp, no alias)
and it owns its memory. Then its value is unobservable outside the list, and its memory is free between its first
write and its last read. Reachability is read from CPython reference counts (see `held_only_by`): the scheduler's
`becomes` map, `_realized` and user tensors all reach a buffer through its BUFFER node, which holds it strongly,
so a buffer no live node refers to has exactly one reference per place it appears in the kernel list. The test
errs only on the safe side: any other strong reference (even from garbage not yet collected) keeps a buffer out
of the plan, and nothing reaches a Buffer through a weak reference alone. The scheduler alone could not decide
this: every node it stores stays readable through `_realized` for as long as some lazy graph holding it lives.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import sys
from typing import AbstractSet, Any, Sequence

from lazygrad.device import Buffer
from lazygrad.helpers import DEBUG


def _uses(buf_lists: Sequence[Sequence[Buffer]]) -> dict[Any, int]:
    # the first key, a probe the dict alone holds: its count measures what the counting itself adds. One per count: a
    # module-wide probe was held by the dict of every count running at once (threads: a TinyJit's capture plans
    # without the realize lock), each read one reference too many, and a buffer held once more passed for internal
    uses: dict[Any, int] = {object(): 0}
    for bufs in buf_lists:
        for b in bufs:
            uses[b] = uses.get(b, 0) + 1
    return uses


def held_only_by(buf_lists: Sequence[Sequence[Buffer]]) -> set[Buffer]:
    """The buffers whose every reference is an entry of one of `buf_lists` (no Tensor/UOp/alias can reach them)."""
    uses = _uses(buf_lists)  # counted in another frame: its loop variable must not add a reference
    extra = {b: sys.getrefcount(b) - n for b, n in uses.items()}
    probe = next(iter(uses))  # (named after the counts: the name is a reference)
    return {b for b, e in extra.items() if e == extra[probe] and b is not probe}


# what sys.getrefcount mapped over a list reads beyond an object's references: the iterator's own
_MAPPED_EXTRA = next(map(sys.getrefcount, [object()])) - 1


def counted(holders: Sequence[int]) -> tuple[int, ...]:
    """What held_at compares with, for buffers that `holders[k]` references each may have."""
    return tuple(h + _MAPPED_EXTRA for h in holders)


def held_at(flat: list[Buffer], expected: tuple[int, ...]) -> tuple[int, ...]:
    """The positions k of `flat` whose buffer has no reference but those counted in `expected[k]` (counted()): for a
    schedule of known layout, the flat list's one and each item's. held_only_by where the count each buffer may have
    is known, with no dict built per call (a comparison per buffer at C speed)."""
    counts = map(sys.getrefcount, flat)  # (first, before anything below holds a buffer)
    return tuple(itertools.compress(range(len(flat)), map(operator.eq, counts, expected)))


KernelBufs = tuple[Sequence[Buffer], Sequence[int]]  # a kernel's buffers, and the indices of those it writes
Plan = dict[Buffer, Buffer]  # a planned buffer -> the buffer whose memory it uses


def plan_memory(
    items: Sequence[KernelBufs],
    keep: AbstractSet[Buffer] = frozenset(),
    label: str = "",
    internal: AbstractSet[Buffer] | None = None,
) -> Plan:
    """items: (buffers, indices of the written ones) per kernel, in run order. Returns buffer -> the buffer whose
    memory it uses instead, for the buffers nothing outside `items` references, that are written before they are
    read, and that are not in `keep` (`internal`: those nothing outside references, where the caller counted them).
    A freed block serves a later buffer of the same device needing between half and all of its bytes (best fit); a
    block freed by a kernel is free from the next kernel on, since one kernel may read its inputs at other positions
    than it writes."""
    if internal is None:
        internal = held_only_by([bufs for bufs, _ in items])  # first: the maps below hold references too
    first: dict[Buffer, int] = {}
    last: dict[Buffer, int] = {}
    written_first: set[Buffer] = set()
    for i, (bufs, outs) in enumerate(items):
        for j, b in enumerate(bufs):
            if b not in first:
                first[b] = i
                if j in outs:
                    written_first.add(b)
            last[b] = i
    # a buffer over memory it does not own (an alias, a numpy array) must never lend that memory to another buffer
    plannable = {b for b in internal & written_first if b._external is None} - keep
    if not plannable:
        return {}
    free: list[Buffer] = []  # blocks (buffers that own their memory) no live buffer uses now
    block_of: dict[Buffer, Buffer] = {}
    release: dict[int, list[Buffer]] = {}
    for i, (bufs, _) in enumerate(items):
        for b in bufs:
            if b in plannable and first[b] == i and b not in block_of:
                fits = [x for x in free if x.device == b.device and b.nbytes <= x.nbytes <= 2 * b.nbytes]
                block = min(fits, key=lambda x: x.nbytes) if fits else b
                if fits:
                    free.remove(block)
                block_of[b] = block
                release.setdefault(last[b], []).append(block)
        free.extend(release.pop(i, []))
    before = sum(b.nbytes for b in plannable)
    after = sum(b.nbytes for b in set(block_of.values()))
    if DEBUG >= 1 and before != after:
        n_blocks = len(set(block_of.values()))
        print(f"{label}memory planner: {_mb(before)} -> {_mb(after)} ({len(plannable)} buffers in {n_blocks} blocks)")
    return {b: blk for b, blk in block_of.items() if blk is not b}


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.3f} MB" if nbytes < 1e7 else f"{nbytes / 1e6:.1f} MB"


def memory_planner(schedule: list[Any]) -> list[Any]:
    """The schedule with intermediate buffers sharing memory where their lifetimes allow (see plan_memory)."""
    if len(schedule) < 2:  # a block is reused only by a later kernel than the one that last read it
        return schedule
    items = [(si.bufs, range(len(si.outputs))) for si in schedule]
    mapping = plan_memory(items)
    del items
    if not mapping:
        return schedule
    # only the items that use a planned buffer are copied (dataclasses.replace costs microseconds an item)
    out = []
    for si in schedule:
        if any(b in mapping for b in si.bufs):
            si = dataclasses.replace(si, bufs=tuple(mapping.get(b, b) for b in si.bufs))
        out.append(si)
    return out
