"""The Tensor: a lazy, PyTorch-style array. Each Tensor holds one UOp; nothing computes until it is realized."""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import itertools
import math
import operator
import os
import re
import struct
import threading
import warnings
import weakref
from _weakref import _remove_dead_weakref
from sys import getrefcount
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from lazygrad import gradient as _autograd  # (a module: an import inside a function cost ~1-3 us per call)
from lazygrad.device import Buffer, Device, _device_names, device_name
from lazygrad.dtype import (  # noqa: F401  (_to_np_dtype: tinygrad programs import it from here)
    DType,
    _to_np_dtype,
    bf16_to_float,
    dtypes,
    float_to_bf16,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
)
from lazygrad.engine.realize import (
    CAPTURES_OPEN,
    capture_began,
    capture_paused,
    is_capturing,
    launch_template,
    run_schedule,
)
from lazygrad.helpers import (
    CHECK_INDEX,
    DEBUG,
    DEFAULT_FLOAT,
    DEFAULT_INT,
    FRAME_REFS_CHECKED,
    PROFILE,
    STEP_LAYOUTS,
    TRAINING,
    VIZ,
    alone_with_library_threads,
    argfix,
    argsort,
    ceildiv,
    check_host_allocation,
    cycles_held_off,
    flatten,
    format_bytes,
    library_lock,
    make_tuple,
    prod,
)
from lazygrad.schedule.kernelize import (
    REALIZED_ENTRY,
    Schedule,
    cached_instance,
    create_schedule,
    note_value_notes,
    ordered_write,
    write_order,
)
from lazygrad.schedule.multi import has_multi, lower_multi, multi, split_bounds, stored_multis, whole_buffer
from lazygrad.uop.ops import (
    GroupOp,
    Ops,
    UOp,
    hash_consed,
    pretty_print,
    ssimplify,
    ssmax,
    substitute,
    sym_known,
    sym_value,
)
from lazygrad.uop.program import FORWARD_RUN, GraphProgram, Unbuilt
from lazygrad.uop.view import ShapeTracker, strides_for_shape

if TYPE_CHECKING:
    from lazygrad.gradient import _Structure

# reductions and composites of these accumulate in float32 and round once at the end, as torch's do (a sum rounded
# to half before the division of a mean, or each running total of a cumsum, costs an ulp or more)
HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)
_HALF_KEYS = frozenset(dt.key for dt in HALF_FLOATS)

# the ops the paths run on every op and realize test for, read once: an Enum member read costs ~50 ns on Python 3.11
# (its EnumType has a __getattr__ hook, which keeps attribute reads off the fast path)
_BUFFER, _RESHAPE, _ASSIGN, _BIND = Ops.BUFFER, Ops.RESHAPE, Ops.ASSIGN, Ops.BIND
_ADD, _SUB, _MUL = Ops.ADD, Ops.SUB, Ops.MUL
_BOOL_KEY = dtypes.bool.key
_MOVEMENT = GroupOp.Movement


class _CallableInt(int):
    """An int that also answers a call with itself: a value torch reads as a property and tinygrad calls."""

    def __call__(self) -> int:
        return int(self)


def _rounds_once(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A reduction or scan that runs on float16/bfloat16 in float32 and rounds its result to the dtype once."""

    @functools.wraps(fn)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if self.uop.dtype.key in _HALF_KEYS:  # (a DType in a tuple compares in Python, on every reduction)
            return fn(self.float(), *args, **kwargs).cast(self.dtype)
        return fn(self, *args, **kwargs)

    return wrapper


_STORED_HERE = "_nodes_stored_here"  # in a Buffer's __dict__: weak references to the realized nodes stored in it


def _view_memories(view: UOp) -> list[Buffer]:
    """The memories (Buffer.memory) a realized node's buffer view holds its value in (one per shard)."""
    parts = [q.base for q in view.src] if view.op is Ops.MULTI else [view.base]
    return [p.arg.memory for p in parts if p.op is Ops.BUFFER]


class RealizedNodes:
    """Computed nodes that have been realized -> the buffer view that holds their value; consulted by the scheduler.

    An entry is kept on its node (in the node's __dict__), so it lives exactly as long as the node, and finding it
    is one dictionary lookup on every node a graph walk meets (a weak-keyed dictionary made a weak reference per
    lookup). The view is held strongly, except for graphs kept as a tensor's gradient path (`hold_weakly`):
    `_lazy_origin` maps that tensor's buffer view back to the graph, so a strong value here would be the key of an
    entry whose value is this entry's key, a cycle no weak reference breaks (every realized tensor with a gradient
    path leaked its graph and buffer). Such a value lives as long as the tensor's own node, which holds it."""

    _ENTRY = REALIZED_ENTRY

    def __init__(self) -> None:
        # a weak reference per key, to list and count the entries, dropped by its own callback when the key dies (a
        # WeakSet's add is a Python call, on every node a realize stores)
        self._refs: set[weakref.ref] = set()
        self._drop = self._refs.discard
        # the references stored since the last look by memory (stored_in), filed on their memories at the next one
        self._unfiled: list[weakref.ref] = []
        # counts the entries added and dropped: a scan of which nodes hold one is still right while it is the same
        # (a step's realize reuses backward's scan of the forward graph, see schedule/kernelize.py _layout)
        self.changes = 0

    def get(self, node: UOp, default: UOp | None = None) -> UOp | None:
        view = node.__dict__.get(RealizedNodes._ENTRY)
        if view is None:
            return default
        if type(view) is weakref.ref:
            view = view()
            return default if view is None else view
        return view

    def __contains__(self, node: UOp) -> bool:
        return self.get(node) is not None

    def __getitem__(self, node: UOp) -> UOp:
        if (view := self.get(node)) is None:
            raise KeyError(node)
        return view

    def __setitem__(self, node: UOp, view: UOp) -> None:
        self.update({node: view})

    def __delitem__(self, node: UOp) -> None:
        if node.__dict__.pop(RealizedNodes._ENTRY, None) is None:
            raise KeyError(node)
        self.changes += 1
        self._refs.discard(weakref.ref(node))  # a live node's references are equal: this finds the one held

    def __len__(self) -> int:
        return len(self._refs)

    def hold_weakly(self, node: UOp) -> None:
        view = node.__dict__.get(RealizedNodes._ENTRY)
        if view is not None and type(view) is not weakref.ref:
            node.__dict__[RealizedNodes._ENTRY] = weakref.ref(view)

    def items(self) -> list[tuple[UOp, UOp]]:
        return [(k, v) for r in self._refs.copy() if (k := r()) is not None and (v := self.get(k)) is not None]

    def update(self, other: dict[UOp, UOp]) -> None:
        # (a key already held: the new reference equals the one in the set, which keeps its place)
        entry, refs, drop, ref, unfiled = RealizedNodes._ENTRY, self._refs, self._drop, weakref.ref, self._unfiled
        self.changes += 1
        for node, view in other.items():
            if type(node) is Unbuilt:
                continue  # (an optimizer update's unbuilt write: nothing holds it once its tensor is stored)
            node.__dict__[entry] = view
            r = ref(node, drop)
            refs.add(r)
            unfiled.append(r)
        if len(unfiled) > 4096:  # nothing looked by memory for a while: file them (dead ones go), the list stays short
            self._file()

    def _file(self) -> None:
        unfiled, self._unfiled = self._unfiled, []
        entry = RealizedNodes._ENTRY
        for r in unfiled:
            if (node := r()) is None or (view := node.__dict__.get(entry)) is None:
                continue
            if type(view) is weakref.ref and (view := view()) is None:
                continue
            # (a view over one buffer, what every stored node of a realize but a sharded one is, read inline: get,
            # _view_memories, UOp.base and Buffer.memory were five Python calls per node an MLP step stores)
            base = view
            while base.op in _MOVEMENT:
                base = base.src[0]
            if base.op is _BUFFER:
                buf = base.arg
                memory = buf._external if isinstance(buf._external, Buffer) else buf
                memory.__dict__.setdefault(_STORED_HERE, []).append(r)
                continue
            for memory in _view_memories(view):
                memory.__dict__.setdefault(_STORED_HERE, []).append(r)

    def stored_in(self, memory: Buffer) -> list[UOp]:
        """The live nodes whose value is stored in `memory` (a Buffer.memory). Each memory lists the nodes stored in
        it (weakly, on the Buffer itself, dying with it), so this costs the nodes stored there, not every realized
        node: a training loop that keeps each step's loss keeps every loss's node here."""
        self._file()
        refs = memory.__dict__.get(_STORED_HERE)
        if not refs:
            return []
        out, kept = [], []
        for r in refs:
            if (node := r()) is not None and (view := self.get(node)) is not None and memory in _view_memories(view):
                out.append(node)
                kept.append(r)
        memory.__dict__[_STORED_HERE] = kept
        return out

    def stored_in_each(self, memories: Iterable[Buffer]) -> Iterator[tuple[Buffer, UOp]]:
        """(memory, node) for the live nodes stored_in each of `memories`: filed once, and a memory with none stored
        passed at C speed (an optimizer step asks it of every parameter's and state's memory)."""
        self._file()
        for memory in memories:
            if memory.__dict__.get(_STORED_HERE):
                for node in self.stored_in(memory):
                    yield memory, node

    def setdefault(self, node: UOp, view: UOp) -> UOp:
        if (old := self.get(node)) is not None:
            return old
        self[node] = view
        return view

    def reading(self, memories: frozenset[Any]) -> dict[UOp, UOp]:
        """The entries whose graph reads one of `memories` (Buffer.memory objects, any alias of them counts)."""
        return {k: v for k, v in self.items() if not _memories_below(k).isdisjoint(memories)}

    def forget_reads_of(self, memories: frozenset[Any]) -> None:
        """Drop the entries whose graph reads one of `memories`: a graph built later over the same nodes (one
        hash-consed node) must compute anew once something other than the scheduler wrote that memory (a TinyJit
        replay)."""
        self.changes += 1
        for node in self.reading(memories):
            node.__dict__.pop(RealizedNodes._ENTRY, None)
            self._refs.discard(weakref.ref(node))


_realized = RealizedNodes()

# Every Tensor made is queued here (weakly; deque.append is atomic, so threads making tensors need no lock). A look
# for lazy tensors (an in-place write looks for those that read the memory it overwrites) moves the queue's live lazy
# tensors into _lazy_seen, each with a serial number: a TinyJit capture tells the tensors made inside it by those. A
# tensor that becomes lazy again (assign, replace) enters _lazy_seen directly (_note_lazy), and the queue again.
# Each lazy tensor taken off the queue is filed under the memories its graph reads (_LAZY_HERE), so that a write looks
# at the tensors filed under the memory it overwrites, not at every live lazy tensor (2000 live lazy tensors beside an
# MLP step took it from 1.0 to 5.4 ms).
_new_tensors: collections.deque[weakref.ref] = collections.deque()
_lazy_seen: dict[int, tuple[int, weakref.ref]] = {}  # id -> (serial number, tensor)
_lazy_serials = itertools.count()
_lazy_limit = [256]  # _lazy_seen's size at which its dead and stored entries are dropped next (twice the live ones)
# in a memory's (Buffer.memory's) __dict__: weak references to the lazy tensors whose graph read it when filed (a
# graph read later through a node stored in the memory is the `hidden` case of _readers, which looks at every tensor)
_LAZY_HERE = "_lazy_tensors_here"


class _MadeRef(weakref.ref):
    """The queue's reference to a tensor made (or made lazy) while a TinyJit capture is open in some thread: it names
    the thread, because only the capturing thread's tensors are the captured function's (_made_inside)."""

    __slots__ = ("thread",)

    def __init__(self, t: Tensor) -> None:
        super().__init__(t)
        self.thread = threading.get_ident()


def _made_inside(serial: int, t: Tensor, began: int | None) -> bool:
    """Whether a lazy tensor with this serial number belongs to this thread's open capture (see capture_began): made
    after it began by this thread. None: no capture is open here."""
    if began is None:
        return True
    if serial < began:
        return False
    known = _lazy_seen.get(id(t))
    return known is not None and getattr(known[1], "thread", None) == threading.get_ident()


def _note_new(t: Tensor) -> None:
    _new_tensors.append(weakref.ref(t) if not CAPTURES_OPEN[0] else _MadeRef(t))
    if len(_new_tensors) > 1024:
        _trim_new()


def _trim_new() -> None:
    # nothing looked for a while: most are dead, and the queue must not grow without end. Only under the realize lock
    # (a look running in another thread must not miss one this thread took off the queue); if it is busy, its holder
    # looks anyway
    if _realize_lock.acquire(blocking=False):
        try:
            _take_new()
        finally:
            _realize_lock.release()


def _note_lazy(*tensors: Tensor) -> None:
    """Each tensor got a lazy node again (a pending write, a replaced value): the next look for lazy tensors sees it,
    with a new serial number (for a TinyJit capture it is made lazy when this happens), filed under what its node
    reads. (Several at once: an optimizer step's writes, one call for all of them.)"""
    made = weakref.ref if not CAPTURES_OPEN[0] else _MadeRef
    for t in tensors:
        ref = made(t)
        _lazy_seen[id(t)] = (next(_lazy_serials), ref)
        _new_tensors.append(ref)


def tensors_made() -> int:
    """A serial number above every tensor made so far (and below those made from now on)."""
    with _realize_lock:
        _take_new()
        return next(_lazy_serials)


def grad_bindings() -> dict[int, tuple[Tensor, Tensor | None]]:
    """id -> (tensor, its .grad) for every live tensor set requires_grad=True: what a TinyJit capture compares
    before and after its function ran, to give the same .grad bindings back on every replay."""
    with _grad_leaves_lock:
        leaves = list(_grad_leaves.values())
    return {id(t): (t, t.grad) for t in leaves}


def pending_writes_since(began: int) -> list[Tensor]:
    """The live tensors given a write (assign, setitem, an in-place op) since serial number `began` (tensors_made) by
    this thread and not yet run: what a TinyJit function wrote into tensors it did not take as arguments (a module's
    parameters) and left lazy."""
    from lazygrad.engine.realize import capture_began

    in_capture = capture_began()
    with _realize_lock:
        return [
            t
            for serial, t in _lazy_tensors()
            if serial >= began and _made_inside(serial, t, in_capture) and t.uop.base.op is Ops.ASSIGN
        ]


_VIEW_OPS = frozenset((*GroupOp.Movement, Ops.DETACH, Ops.BITCAST))  # what a view of a tensor is made of


def _view_source(u: UOp) -> UOp:
    while u.op in _VIEW_OPS:
        u = u.src[0]
    return u


def _is_lazy(t: Tensor) -> bool:
    """Whether t may compute something when realized: not a stored buffer or a view of one. (Inline in the loops
    over every tensor filed or queued: a call each there.)"""
    return _view_source(t.uop).op not in (Ops.BUFFER, Ops.MULTI)


def _take_new(defer: set[int] | frozenset[int] = frozenset()) -> None:
    """Take the queue's tensors (_take_queue); _lazy_seen drops its dead and stored entries once it doubled since the
    last time."""
    _take_queue(defer)
    if len(_lazy_seen) > _lazy_limit[0]:
        _lazy_tensors()


def _take_queue(defer: set[int] | frozenset[int] = frozenset()) -> None:
    """Move the queue's live lazy tensors into _lazy_seen (a serial number each, unless already there) and file them
    under the memories they read. Those whose ids are in `defer` wait unfiled in _deferred: the outputs of the
    schedule looking, which it stores (filing an optimizer step's updates walked every node of the step's graph)."""
    views = _VIEW_OPS
    waiting = list(_deferred.items())
    _deferred.clear()
    for key, ref in waiting:
        t = ref()
        if t is None or key in defer:
            if t is not None:
                _deferred[key] = ref
            elif (known := _lazy_seen.get(key)) is not None and known[1]() is None:
                del _lazy_seen[key]
            continue
        u = t.uop
        while u.op in views:  # (_is_lazy inline)
            u = u.src[0]
        if u.op is not Ops.BUFFER and u.op is not Ops.MULTI:
            _file_lazy(t, ref)
        elif (known := _lazy_seen.get(key)) is not None and known[1]() is t:
            del _lazy_seen[key]  # stored by the schedule that deferred it
    while _new_tensors:
        try:
            ref = _new_tensors.popleft()
        except IndexError:  # another thread took the last one
            break
        t = ref()
        if t is None:
            continue
        u = t.uop
        while u.op in views:  # (_is_lazy inline)
            u = u.src[0]
        if u.op is not Ops.BUFFER and u.op is not Ops.MULTI:
            known = _lazy_seen.get(id(t))
            if known is None or known[1]() is not t:  # (an entry under this id may be a dead tensor's)
                _lazy_seen[id(t)] = (next(_lazy_serials), ref)
            if id(t) in defer:
                _deferred[id(t)] = ref
            else:
                _file_lazy(t, ref)


_deferred: dict[int, weakref.ref] = {}  # id -> tensor taken off the queue but not filed yet (see _take_queue)


def _file_lazy(t: Tensor, ref: weakref.ref) -> None:
    if (memories := t.uop.__dict__.get(_MEMORIES)) is None:
        memories = _memories_below(t.uop)
    for memory in memories:
        if memory is _BINDS:
            continue
        filed = memory.__dict__.get(_LAZY_HERE)
        if filed is None:
            filed = memory.__dict__[_LAZY_HERE] = _Filed()
        filed.append((id(t), ref))
        if len(filed) >= filed.prune_at:
            filed.prune()


class _Filed(list):
    """(id, weak reference) of the tensors filed under one memory. Dead, stored and repeated tensors go once it doubled
    since the last time (a memory read by every step, never written, would otherwise list every tensor ever made from
    it), and at every look into it."""

    prune_at = 64

    def prune(self) -> list[Tensor]:
        """Keep the live lazy tensors, once each, and return them; the others leave _lazy_seen too (so a look costs
        the tensors filed since the last one, not a pass over every tensor _lazy_seen ever held)."""
        seen: set[int] = set()
        kept, live = [], []
        views = _VIEW_OPS
        for key, ref in self:
            t = ref()
            if t is None:
                if (known := _lazy_seen.get(key)) is not None and known[1]() is None:
                    del _lazy_seen[key]
                continue
            if key in seen:
                continue
            u = t.uop
            while u.op in views:  # (_is_lazy inline)
                u = u.src[0]
            if u.op is not Ops.BUFFER and u.op is not Ops.MULTI:
                seen.add(key)
                kept.append((key, ref))
                live.append(t)
            elif (known := _lazy_seen.get(key)) is not None and known[1]() is t:
                del _lazy_seen[key]
        self[:] = kept
        self.prune_at = max(64, 2 * len(kept))
        return live


def _lazy_tensors() -> list[tuple[int, Tensor]]:
    """Every live tensor that may compute something when realized, with its serial number. (One realized as part of
    another's schedule stays here: its stored value can be forgotten.)"""
    _take_queue()
    out = []
    for key, (serial, ref) in list(_lazy_seen.items()):
        t = ref()
        if t is None or not _is_lazy(t):
            _lazy_seen.pop(key, None)
        else:
            out.append((serial, t))
    _lazy_limit[0] = max(256, 2 * len(_lazy_seen))
    return out


def _lazy_reading(mems: set[Buffer] | frozenset[Buffer], skip: set[int]) -> list[tuple[int, Tensor]]:
    """The live lazy tensors filed under any of `mems` (and perhaps reading it no more), with their serial numbers,
    in serial order: what _lazy_tensors lists, less those that read none of `mems` and those in `skip` not filed yet,
    at the cost of the ones that do."""
    _take_new(skip)
    found: dict[int, tuple[int, Tensor]] = {}
    for memory in mems:
        filed = memory.__dict__.get(_LAZY_HERE)
        if filed:
            for t in filed.prune():
                known = _lazy_seen.get(id(t))
                if known is not None and known[1]() is t:
                    found[id(t)] = (known[0], t)
    return sorted(found.values(), key=_first)


_first = operator.itemgetter(0)


def _readers(
    mems: set[Buffer] | frozenset[Buffer], written: set[UOp], skip: set[int]
) -> list[tuple[int, Tensor, bool]]:
    """The live lazy tensors (ids not in `skip`) whose value reads memory in `mems` (Buffer.memory objects) as it is
    now, through anything but the write nodes `written`, each with its serial number and whether its graph binds a
    variable. A view of the memory is not one (it shows the memory as it is, as torch's views do); a
    tensor computed from it is, and so is one reading another pending write into it (run later, that write would land
    after these). A tensor whose node is a pending write is one when the value it writes reads the memory."""
    overwritten: dict[UOp, bool] = {}  # each write -> whether a later one of them overwrites what it wrote
    per_memory: dict[Buffer, list[UOp]] = {}
    for n in written:
        target = n.src[0]
        while target.op in _MOVEMENT:  # (UOp.base and Buffer.memory inline, as in _note_stored)
            target = target.src[0]
        if target.op is _BUFFER:
            buf = target.arg
            per_memory.setdefault(buf._external if isinstance(buf._external, Buffer) else buf, []).append(n)
    latest: dict[Buffer, int] = {}  # the newest write into each written more than once
    for mem, ns in per_memory.items():
        if len(ns) == 1:  # (one write a memory, an optimizer step's: nothing of it overwritten by another)
            overwritten[ns[0]] = False
            continue
        latest[mem] = max(map(write_order, ns))
        for n in ns:
            # the result of a write that a later one into the same memory overwrites is read before that one: what
            # reads it is a reader too
            overwritten[n] = any(m is not n and _written_after(m, n) for m in ns)

    def leaf(n: UOp) -> bool | None:
        """Whether a node the walks stop at reads the memory as it is now; None for a node they look through."""
        if (hit := overwritten.get(n)) is not None:
            return hit
        if n.op is Ops.BUFFER:
            return n.arg.memory in mems
        if REALIZED_ENTRY in n.__dict__ and (view := _realized.get(n)) is not None:
            return any(m in mems for m in _view_memories(view))
        return None

    def reads(root: UOp) -> bool:
        # stops at the first node found reading the memory (a model's logits find the last layer's bias a few nodes
        # down, where a full walk met all of their 100-200 nodes every step); graphs found not to read it are
        # remembered whole, for the next root sharing them
        stack, seen = [root], set()
        while stack:
            n = stack.pop()
            if n in seen or n in clean:
                continue
            seen.add(n)
            if (stop := leaf(n)) is not None:
                if stop:
                    return True
            elif n.op is Ops.ASSIGN and n.src[0].base.op is Ops.BUFFER and n.src[0].base.arg.memory in mems:
                # another write into the memory, not run yet: older than these writes, it must land before them
                # (what reads it is computed first); newer, it lands after them, and what it writes is read then
                # (the newest of one write asked here only: a call per written memory on every step otherwise)
                mem = n.src[0].base.arg.memory
                ns = per_memory.get(mem)
                newest = latest[mem] if mem in latest else write_order(ns[0]) if ns else -1
                if write_order(n) <= newest:
                    return True
                stack.extend(n.src[1:])
            else:
                stack.extend(n.src)
        clean.update(seen)
        return False

    def binds(root: UOp) -> bool:
        # a variable bound in the graph, other than below the nodes the walks stop at (a structural mark rules out
        # most graphs without a walk)
        if _BINDS not in _memories_below(root):
            return False
        stack, seen = [root], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op is Ops.BIND:
                return True
            if leaf(n) is None:
                stack.extend(n.src)
        return False

    clean: set[UOp] = set()  # nodes whose graph was found not to read the memory

    # A graph reads the memory through a buffer of it below, or through a node stored in it. A stored write (an
    # ASSIGN, the common case: an optimizer's step counter) is stored in the buffer below it; only a node stored in
    # memory its own graph does not reach hides the memory from the graph's buffers. Where none does, the buffers of
    # a graph (cached on its nodes) rule out most tensors without a walk.
    hidden = any(memory not in _memories_below(node) for memory, node in _realized.stored_in_each(mems))
    out, seen = [], set(skip)
    for serial, t in _lazy_tensors() if hidden else _lazy_reading(mems, skip):
        if id(t) in seen:
            continue
        seen.add(id(t))
        u = _view_source(t.uop)
        if u in written:
            continue
        stored = _realized.get(u)
        if stored is None and t._view_of is None and u is not t.uop:
            stored = _realized.get(t.uop)  # (a value made under no_grad: a DETACH of its graph is what was stored)
        if stored is not None:
            # its value is in memory another tensor owns, being overwritten (a view: its base tensor's value)
            if _held_by_another(stored, t if t._view_of is None else t._view_of[0], mems):
                out.append((serial, t, False))
            continue  # its value is stored
        if u.op is Ops.ASSIGN:
            if u.src[0].base.op is Ops.BUFFER and u.src[0].base.arg.memory in mems:
                continue  # a pending write into the memory: not a value computed from it
            root = u.src[1]
        elif u is t.uop or t._view_of is None:
            # (the second: a tensor owning its value whose node reshapes a computed one, a reduction's result)
            root = u
        else:
            continue  # a view of something stored or lazy: it reads through (its base is looked at on its own)
        if not hidden and _memories_below(root).isdisjoint(mems):
            continue
        if reads(root):
            out.append((serial, t, binds(root)))
    return out


def _held_by_another(stored: UOp, t: Tensor, mems: set[Buffer] | frozenset[Buffer]) -> bool:
    """Whether lazy t's node has its value `stored` in memory of `mems` that another tensor owns (one hash-consed
    node: `a, b = x * 4, x * 4; b.realize(); b += 1`): a would read b's write, it is computed (copied) before it. A
    realized graph kept as a gradient path held its entry weakly, so it was mostly forgotten in time; under no_grad
    or for ints it was not."""
    owner = stored.__dict__.get(_OWNER)
    holder = owner() if owner is not None else None
    return holder is not None and holder is not t and any(m in mems for m in _view_memories(stored))


_MEMORIES = "memories_below"
# in the memories of a graph that binds a variable (_memories_below): not a memory, never filed under
_BINDS = "binds a variable"


def _memories_below(root: UOp) -> frozenset:
    """The memories (Buffer.memory) of every buffer in root's graph, and _BINDS where it binds a variable, cached on
    each node it walks (a graph never changes). A node with one source shares its source's set, so a chain of
    elementwise ops holds one."""
    stack = [root]
    while stack:
        n = stack[-1]
        if _MEMORIES in n.__dict__:
            stack.pop()
            continue
        pushed = False
        for x in n.src:  # (a loop: a comprehension is a call per node)
            if _MEMORIES not in x.__dict__:
                stack.append(x)
                pushed = True
        if pushed:
            continue
        stack.pop()
        if n.op is Ops.BUFFER:
            n.__dict__[_MEMORIES] = frozenset((n.arg.memory,))
        elif n.op is Ops.BIND:
            n.__dict__[_MEMORIES] = _BINDS_BELOW
        elif len(n.src) == 1:
            n.__dict__[_MEMORIES] = n.src[0].__dict__[_MEMORIES]
        else:
            # the sources' sets joined, one of them where it holds the others (shared, as a chain's); a loop, where a
            # generator was a call per node
            acc = _NO_MEMORIES
            for x in n.src:
                m = x.__dict__[_MEMORIES]
                if not m <= acc:
                    acc = m if acc <= m else acc | m
            n.__dict__[_MEMORIES] = acc
    return root.__dict__[_MEMORIES]


_NO_MEMORIES: frozenset = frozenset()
_BINDS_BELOW = frozenset((_BINDS,))


def _written_after(m: UOp, n: UOp) -> bool:
    """Whether write m into a memory lands after write n into it: made later, or (order unknown) reading n's result."""
    om, on = write_order(m), write_order(n)
    return om > on if om >= 0 and on >= 0 else n in m.toposort


def realize_readers_of(memories: frozenset[Buffer]) -> None:
    """Something other than a schedule is about to write these memories (Buffer.memory) in place (a TinyJit
    replay): lazy tensors computed from their contents get their values first. A lazy tensor whose graph holds a
    node realized from them keeps that node's stored value (forget_values_read_from drops the entry after the write:
    the node is swapped for its buffer in the tensor's graph)."""
    if not _lazy_seen and not _new_tensors:
        return  # nothing lazy, nothing made since the last look
    with _realize_lock:
        # (in a function of its own: the live tensors it lists are let go before the lock is, see backward)
        _realize_readers_locked(memories)


def _realize_readers_locked(memories: frozenset[Buffer]) -> None:
    lazy = _lazy_tensors()
    if not lazy:
        return
    if len(_realized) and (stored := _realized.reading(memories)):
        for _, t in lazy:
            if t.uop in stored or any(n in stored for n in t.uop.toposort):
                t.uop = substitute(t.uop, stored)
                _file_lazy(t, weakref.ref(t))  # it reads the stored nodes' memories from now on
    found = _readers(memories, set(), set())
    if found:
        _realize_readers([(serial, t) for serial, t, _ in found])


def _realize_readers(readers: list[tuple[int, Tensor]]) -> None:
    """Compute lazy tensors before a write overwrites what they read. Inside a TinyJit capture, those made before it
    began or by another thread are computed once, unrecorded: a replay must not recompute them from the memory the
    capture overwrites."""
    began = capture_began()
    before: list[Tensor] = []
    inside: list[Tensor] = []
    for serial, t in readers:
        (inside if _made_inside(serial, t, began) else before).append(t)
    if before:
        with capture_paused():
            run_schedule(*Tensor.schedule_with_vars(*before))
    if inside:
        run_schedule(*Tensor.schedule_with_vars(*inside))


def _own_memory(tensors: tuple[Tensor, ...], firsts: dict[UOp, Tensor]) -> tuple[Tensor, ...]:
    """Prepare tensors to be realized: a view reads through a pending write to its base, and a tensor whose graph
    another tensor built too (one hash-consed node), or whose value another tensor already holds, gets a copy of its
    own: torch's tensors never share memory unless one is a view of the other, so a write into one leaves the other
    alone. A view through a detach or bitcast has nothing to compute: its base tensor is realized in its place."""
    out = []
    for t in tensors:
        if t._view_of is not None:
            _follow_base(t)
            _own_base(t, firsts)
            if _shows_through_cast(t):
                t = t._view_of[0]
        out.append(t)
        u = t.uop
        base = u
        while base.op in _MOVEMENT:  # (UOp.base inline: a call per tensor of every realize)
            base = base.src[0]
        if base.op is Ops.BUFFER or base is not u and t._view_of is not None:
            continue  # stored, or a view (it shares its base tensor's memory)
        # (a tensor that is not a view but reshapes a computed value, a reduction's result, owns that value; a value
        # never realized has no holder: asked inline, two calls less per tensor of every realize)
        holder = _holder(base) if REALIZED_ENTRY in base.__dict__ else None
        if firsts.setdefault(base, t) is not t or (holder is not None and holder is not t):
            # (an optimizer step's unbuilt gradient, held by two tensors: its copy is a node over the built one)
            t.uop = _copy_of_own(t, u.built() if type(u) is Unbuilt else u, firsts)
    return tuple(out)


def _writes_looked(writes: list[UOp], looked: set[Any]) -> bool:
    """Whether a schedule's writes are the outputs whose readers were looked for before it. An optimizer's unbuilt
    write that the schedule built (its layout was not known, uop/program.py Unbuilt) is the write it stands for."""
    if len(writes) != len(looked):
        return False
    if looked.issuperset(writes):
        return True
    return {n.run.vals[n.at] if type(n) is Unbuilt and n.run.vals is not None else n for n in looked}.issuperset(writes)


def _unlooked(writes: list[UOp], looked: set[Any]) -> list[UOp] | None:
    """The writes whose readers were not looked for (those of tensors that joined the schedule as readers: a
    BatchNorm's running statistics in an optimizer step), where none writes a memory a looked-for write writes (the
    look orders several writes into one memory among themselves); None otherwise (every write is looked for again)."""
    done = {n.run.vals[n.at] if type(n) is Unbuilt and n.run.vals is not None else n for n in looked}
    new = [n for n in writes if n not in done]
    if not new or len(new) == len(writes):
        return None
    mems: tuple[set[Any], set[Any]] = (set(), set())  # (the looked-for writes' memories, the new ones')
    for n in writes:  # (UOp.base and Buffer.memory inline: a call per write of every optimizer step otherwise)
        target = n.src[0]
        while target.op in _MOVEMENT:
            target = target.src[0]
        buf = target.arg if target.op is Ops.BUFFER else None  # (None: one more of either, looked for whole)
        mems[n not in done].add(buf._external if buf is not None and isinstance(buf._external, Buffer) else buf)
    return None if mems[0] & mems[1] else new


def _new_value(t: Tensor) -> Tensor:
    """t's value as a tensor of its own, for an op that computes nothing new (x ** 1, a 0-d tensor's sum, floor of
    ints): torch returns new memory there, and returning t itself made a write into either show in the other. A
    computed value keeps its node (_own_memory gives a tensor realized after another of one node a copy); memory,
    or a view of it, is copied."""
    u = t.uop
    # (a pending write is memory too: its node stands for the written memory, which the next write changes)
    return Tensor(UOp(Ops.CONTIGUOUS, u.dtype, (u,)) if u.base.op in (Ops.BUFFER, Ops.ASSIGN) else u)


def _shows_through_cast(t: Tensor) -> bool:
    """Whether view t reaches its base tensor's node through a DETACH or BITCAST: scheduled, such a node is stored as
    a copy, and the view (`d = x.detach(); d.realize()`) would stand for the copy, no longer sharing x's memory."""
    at, x = t._view_of[1], t.uop  # type: ignore[index]
    while x is not at and x.op in _VIEW_OPS:
        if x.op is Ops.DETACH or x.op is Ops.BITCAST:
            return True
        x = x.src[0]
    return False


def _holder(node: UOp) -> Tensor | None:
    """The live tensor owning the stored value of `node` (_stand_for's _OWNER mark), if any."""
    view = _realized.get(node)
    owner = view.__dict__.get(_OWNER) if view is not None else None
    return owner() if owner is not None else None


def _copy_of_own(t: Tensor, u: UOp, firsts: dict[UOp, Tensor]) -> UOp:
    """The node of t's copy of the value u: CONTIGUOUS(u), numbered as a clone where that node is another tensor's
    already (in this schedule or stored and held), since a third tensor of one graph would share the second's copy."""
    copy = UOp(Ops.CONTIGUOUS, u.dtype, (u,))
    holder = _holder(copy)
    if firsts.setdefault(copy, t) is not t or (holder is not None and holder is not t):
        copy = UOp(Ops.CONTIGUOUS, u.dtype, (u,), next(_CLONE_IDS))
        firsts[copy] = t
    return copy


def _own_base(t: Tensor, firsts: dict[UOp, Tensor]) -> None:
    """A view of a lazy tensor whose value another tensor computes too (`k = x * 4; m = (x * 4).reshape(6)`, one
    hash-consed graph): the base tensor gets a copy of its own and the view shows it, so that realizing the view
    leaves the other tensor's memory apart (as _own_memory does for tensors that are not views)."""
    bt, at = t._view_of  # type: ignore[misc]
    value = at.base
    if bt.uop is not at or value.op is Ops.BUFFER:
        return
    chain, x = [], t.uop  # the view's movement ops (and detaches, bitcasts) above its base tensor's node
    while x is not at:
        if x.op not in _VIEW_OPS:
            return
        chain.append(x)
        x = x.src[0]
    holder = _holder(value)
    if firsts.setdefault(value, bt) is not bt or (holder is not None and holder is not bt):
        own = node = _copy_of_own(bt, at, firsts)
        for m in reversed(chain):
            node = UOp(m.op, m.dtype, (node, *m.src[1:]), m.arg)
        bt.uop, t.uop, t._view_of = own, node, (bt, own)
        # the base tensor's node was replaced, as by a lazy write: its other views, taken over `at`, follow it from now
        # on (they would miss a write into the copy made before it is stored: B += 10 with d = B.detach())
        _lazy_overwritten.add(at)


def _readers_of_overwritten(
    writes: list[UOp], outputs: tuple[Tensor, ...], becomes: dict[UOp, UOp], lowered: dict[UOp, UOp] | None
) -> tuple[list[tuple[int, Tensor]], list[Tensor]]:
    """The lazy tensors reading memory the in-place writes `writes` (ASSIGN nodes a schedule stores) overwrite
    (_readers), other than `outputs`, in two lists: those computed first, in a schedule of their own (with their
    serial numbers), and those that join this schedule (which stores them and orders their reads of the old contents
    before the writes). Computed first: inside a TinyJit capture a tensor made before it or by another thread (a replay
    would compute it again from the new contents), and a tensor whose graph binds variables (its bindings may differ
    from these outputs')."""
    if not writes:
        return [], []
    # (UOp.base and Buffer.memory inline: an optimizer step writes every parameter and state)
    mems = set()
    for n in writes:
        target = n.src[0]
        while target.op in _MOVEMENT:
            target = target.src[0]
        buf = target.arg
        mems.add(buf._external if isinstance(buf._external, Buffer) else buf)
    written = set(writes)
    if lowered is not None:  # sharded: the tensors' graphs hold the writes as they were before lowering per device
        written |= {
            n
            for n, m in lowered.items()
            if n.op is Ops.ASSIGN and (m in becomes or m.op is Ops.MULTI and all(p.base in becomes for p in m.src))
        }
    first: list[tuple[int, Tensor]] = []
    joining: list[Tensor] = []
    began = capture_began()
    for serial, t, binds in _readers(mems, written, {id(t) for t in outputs}):
        if _view_source(t.uop) in becomes:
            continue  # this schedule stores its value anyway, before the writes that overwrite what it reads
        if binds or not _made_inside(serial, t, began):
            first.append((serial, t))
        else:
            joining.append(t)
    return first, joining


# *** what the engine (TinyJit, @function) asks of the frontend's state, instead of reading its registries ***


def forget_values_read_from(memories: frozenset[Any]) -> None:
    """Something other than a schedule wrote these memories (Buffer.memory; a TinyJit replay): a graph built from
    now on over nodes realized from them computes anew."""
    if len(_realized):
        with _realize_lock:  # not while another thread schedules: its planner and kernels must see one set of entries
            _realized.forget_reads_of(memories)


# the buffer holding the counter of each random call (its key, see Tensor._random_bits) -> that counter
_rng_counter_buffers: weakref.WeakKeyDictionary[Buffer, int] = weakref.WeakKeyDictionary()


def random_counter_buffers(buffers: Iterable[Buffer]) -> dict[Buffer, int]:
    """Of `buffers`, those that hold the counter of a random call, with that counter: a TinyJit whose capture drew
    random numbers writes fresh counters into them before each replay, so that every call draws new numbers."""
    return {b: c for b in buffers if (c := _rng_counter_buffers.get(b)) is not None}


# held while the seed and a counter are read together (Tensor._random_bits) and while manual_seed changes both
_rng_lock = library_lock(reentrant=True)


def take_random_counters(n: int) -> int:
    """Advance the random stream by n calls, as n calls of Tensor.rand would; the first counter taken. Under a lock:
    two threads drawing at once must never take the same counter (they would get the same numbers)."""
    with _rng_lock:
        first = Tensor._rng_counter + 1
        Tensor._rng_counter += n
    return first


@contextlib.contextmanager
def realized_values_hidden(drop: Callable[[UOp], bool]) -> Iterator[None]:
    """Inside: the scheduler does not reuse the realized values of the graphs `drop` picks (they are recomputed)."""
    with _realize_lock:  # no other thread's schedule may add entries while the cache is listed
        hidden = {k: v for k, v in _realized.items() if drop(k)}
        for k in hidden:
            del _realized[k]
    try:
        yield
    finally:
        with _realize_lock:
            for k, v in hidden.items():
                _realized.setdefault(k, v)


_ORIGIN = "lazy_origin"  # in a realized tensor's buffer node's __dict__: the graph that computed it (LazyOrigins)


class LazyOrigins:
    """Realized tensor's buffer node -> the graph that computed it, for tensors that needed a gradient path (see
    backward). The graph is kept on its node (in the node's __dict__, living as long as the node, as a weak-keyed
    dictionary's entry did), so the walks asking every node of a step's graph whether it has one (backward's
    _with_lazy_origins, _reaches_grad) ask `_ORIGIN in n.__dict__` at C speed, where the weak-keyed dictionary's
    membership test was a Python call making a weak reference per node (a digits CNN step asked it of ~260 nodes).
    A weak reference per key counts them."""

    def __init__(self) -> None:
        self._refs: set[weakref.ref] = set()
        self._drop = self._refs.discard

    def __setitem__(self, node: UOp, graph: UOp) -> None:
        node.__dict__[_ORIGIN] = graph
        self._refs.add(weakref.ref(node, self._drop))

    def __getitem__(self, node: UOp) -> UOp:
        return node.__dict__[_ORIGIN]

    def __contains__(self, node: UOp) -> bool:
        return _ORIGIN in node.__dict__

    def __len__(self) -> int:
        return len(self._refs)


_lazy_origin = LazyOrigins()
_CLONE_IDS = itertools.count(1)  # Tensor.clone's node numbers
# a realized buffer node's entry (in its __dict__, living as long as the node; a weak-keyed dictionary cost two Python
# calls on every realize): a weak reference to the tensor that holds it as its own memory (see schedule_with_vars)
_OWNER = "buffer_owner"
note_value_notes(_OWNER)  # (dead with the tensor when a template recycles the node: answered again for the next)
# in a memory's (Buffer.memory's) __dict__: the lazy node whose value its owner stored there (weakly), so that views
# taken of the owner before it was realized follow it (_follow_base), through later writes into the memory too
_STORED_FROM = "stored_from"
# beside it, where that node was a copy given to the owner (CONTIGUOUS(x), _own_memory): x, weakly. The copy's node
# dies with the realize; x lives on in the views taken before (their base tensor's node then)
_COPIED_FROM = "copied_from"
# one schedule is made and run at a time: a thread realizing a graph another thread has scheduled but not run yet
# would find its nodes in `_realized` and read buffers their kernels have not written. Building graphs stays parallel.
_realize_lock = library_lock(reentrant=True)


def _with_lazy_origins(root: UOp, renamed: dict[UOp, UOp] | None = None) -> UOp:
    """`root` with the buffer of each realized tensor that had a gradient path swapped back for the graph that computed
    it: `h.realize()` (or reading `h`) between the forward and `backward()` does not cut the gradient off. The kernels
    of the backward pass still read the stored buffer (the scheduler knows the graph was realized). `renamed`
    receives the new graph's nodes that stand for other nodes of root's (see substitute)."""
    if not _lazy_origin:
        return root
    mapping = {n: _resolved_origin(n) for n in root.toposort if _ORIGIN in n.__dict__}
    if not mapping:
        return root
    if renamed is not None:
        # the realized tensors inside those graphs stand for their resolved graphs too (a retained v = x.sum(0)
        # realized, read by a w realized in turn: v's node is inside w's resolved graph, under no name backward knew)
        stack, seen = list(mapping), set()
        while stack:
            if (m := stack.pop()) in seen:
                continue
            seen.add(m)
            if (resolved := _resolved.get(m)) is not None and resolved is not m:
                renamed.setdefault(resolved, m)
            stack.extend(k for k in _lazy_origin[m].toposort if _ORIGIN in k.__dict__)
    return _substitute_origins(root, mapping, renamed)


def _substitute_origins(root: UOp, mapping: dict[UOp, UOp], renamed: dict[UOp, UOp] | None = None) -> UOp:
    """substitute() for swapping realized buffers for the graphs that computed them: a node whose derivative its
    composite stated (define_gradient: tanh's 1 - y^2, a conv window's) keeps that rule over its new sources. The
    chain rule through the composite's formula instead gave NaN where the formula overflows (tanh of 45 and above,
    its input realized before backward). A rule that is structure (a window's partial) is copied; a closure, which
    holds the old nodes and the buffers they read, is borrowed weakly (gradient.BorrowedRule)."""
    made: dict[UOp, UOp] = {}
    out = substitute(root, mapping, made)
    if renamed is not None:
        renamed.update(made)
    shortcut = _autograd._SHORTCUT
    if rules := [(new, old) for new, old in made.items() if shortcut in old.__dict__]:
        new_of = {old: new for new, old in made.items()}
        for new, old in rules:
            if shortcut not in new.__dict__:
                src, rule = old.__dict__[shortcut]
                kept = rule if _autograd.rule_key(rule) is not None else _autograd.BorrowedRule(old)
                new.__dict__[shortcut] = (new_of.get(src, mapping.get(src, src)), kept)
    return out


# the entries of _lazy_origin that a read made (see _keep_read_grad_path): they give backward a path, but do not make
# what is computed from them require grad, as the tensors they stand for did not
_read_kept: weakref.WeakSet[UOp] = weakref.WeakSet()


def _keep_read_grad_path(t: Tensor, lazy: UOp) -> None:
    """A read (numpy, tolist, item) that realized `t` from graph `lazy` keeps that graph as t's gradient path, where t
    is a float tensor with requires_grad unset: tinygrad reads a tensor through a copy and leaves its graph alone, so
    `out.numpy()` between the forward and `backward()` does not cut the gradient off (its gradcheck does that). The
    graph is kept with the graphs of earlier such reads inside it resolved, so that a loop reading its state every
    step keeps nodes, not the buffer of every step."""
    if t.uop is lazy or t._requires_grad is not None or _modes.grad_disabled or not dtypes.is_float(t.dtype):
        return
    if lazy.base.op is Ops.ASSIGN or t.uop in _lazy_origin:
        return
    inner = {m: _resolved_origin(m) for m in lazy.toposort if _ORIGIN in m.__dict__} if _lazy_origin else {}
    _lazy_origin[t.uop] = _substitute_origins(lazy, inner) if inner else lazy
    _read_kept.add(t.uop)
    _realized.hold_weakly(lazy.base)


# a realized buffer node with a lazy origin -> that origin with its own realized inputs resolved in turn (an origin
# never changes, so neither does this: a loop realizing its state each step resolves one new step per realize, not all)
_resolved: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def _resolved_origin(node: UOp) -> UOp:
    """The graph that computed `node`, down to tensors that were never realized (innermost first, in a loop: a chain
    of realized steps can be thousands long)."""
    stack = [node]
    while stack:
        n = stack[-1]
        if n in _resolved:
            stack.pop()
            continue
        inner = [m for m in _lazy_origin[n].toposort if _ORIGIN in m.__dict__]
        todo = [m for m in inner if m not in _resolved]
        if todo:
            stack.extend(todo)
            continue
        origin = _lazy_origin[n]
        _resolved[n] = _substitute_origins(origin, {m: _resolved[m] for m in inner}) if inner else origin
        stack.pop()
    return _resolved[node]


_REACHES_GRAD = "reaches_grad"  # in a node's __dict__: a backward() from it reached a leaf set requires_grad=True


def _reaches_grad(root: UOp) -> bool:
    """Whether root depends differentiably on a leaf that requires grad, or on a realized tensor kept for its gradient
    path (which did, when it was realized). The walk stops at realized buffers: it costs the unrealized part of the
    graph only, not the history behind every realize."""
    if _REACHES_GRAD in root.__dict__:
        return True
    from lazygrad.gradient import MAY_BLOCK, _blocks

    leaves = set(map(_UOP_OF, _live_in(_grad_leaves)))
    entry = RealizedNodes._ENTRY
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        # (the realized lookup only where the node holds an entry: this runs for every output of a training step)
        if n in leaves or entry in n.__dict__ and _realized.get(n) in leaves:
            return True  # (a leaf first: x.detach() made a leaf is a detach, which passes no gradient below it)
        if n.op in MAY_BLOCK and _blocks(n):
            continue
        # a realized tensor's node kept with the graph that computed it (LazyOrigins)
        if _ORIGIN in n.__dict__:
            if n not in _read_kept:
                return True
            continue
        seen.add(n)
        stack.extend(n.src)
    return False


def _flatten_list(data: Any) -> tuple[list[Any], tuple[int, ...]]:
    """Values and shape of a nested list; ragged nesting is an error naming the lengths."""
    if not isinstance(data, (list, tuple)):
        return [data], ()
    if len(data) == 0:
        return [], (0,)
    parts = [_flatten_list(x) for x in data]
    shapes = {p[1] for p in parts}
    if len(shapes) != 1:
        raise ArgumentError(
            f"ragged nested list: elements have shapes {sorted(shapes, key=len)}; "
            "every element must have the same shape"
        )
    inner = shapes.pop()
    return [v for p in parts for v in p[0]], (len(data), *inner)


def _pack(values: list[Any], dtype: DType) -> bytes:
    if dtype == dtypes.bfloat16:
        return struct.pack(f"{len(values)}H", *[float_to_bf16(float(v)) for v in values])
    converted = [dtypes.as_const(v, dtype) for v in values]
    return struct.pack(f"{len(values)}{dtype.fmt}", *converted)


def _np_to_dtype(np_dtype: Any) -> DType:
    try:
        return to_dtype(np_dtype.name)
    except TypeError:
        raise TypeError(f"numpy dtype {np_dtype} has no lazygrad equivalent") from None


def _under_reshapes(u: UOp) -> UOp:
    """The node `u` reshapes (`u` itself if it is no reshape): reshapes keep the row-major order."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u


def _torch_dims(dim: Any) -> Any:
    """torch's `dim=` as an axis: an empty dim list reduces every dim in torch's sum/mean/var/std/norm/amax, where
    tinygrad's `axis=()` reduces none. Only the torch spelling (the `dim` keyword, or a torch-only method) gets this."""
    return None if isinstance(dim, (tuple, list)) and not dim else dim


def _axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ArgumentError(f"axis {axis} repeats a dimension")
    return tuple(sorted(out)) if ndim else ()


def _dim(dim: int, ndim: int) -> int:
    """One dim in range for `ndim` dims, as an index (a 0-d tensor takes -1 and 0, as torch's ops do, and gets 0)."""
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(
            f"dim {dim} is out of range [{-max(ndim, 1)}, {max(ndim, 1) - 1}] for a tensor with {ndim} dimensions"
        )
    return dim % ndim if ndim else 0


class _ThreadModes(threading.local):
    """no_grad() is per thread, as torch's grad mode: a thread serving inference under no_grad() must not turn off
    the gradients of a thread that trains. A new thread starts with gradients on."""

    grad_disabled: int = 0  # depth of this thread's nested no_grad blocks
    # lazygrad.amp.autocast: (device kind, e.g. "CPU" or "CUDA"; the dtype products and convolutions run in), or None
    autocast: tuple[str, DType] | None = None


def _autocast_dtype(*tensors: Tensor) -> DType | None:
    """Under amp.autocast, the lower precision dtype a product or convolution of these float tensors runs in (None
    where they have it already, or autocast is off or for another device)."""
    if (mode := _modes.autocast) is None:
        return None
    kind, dtype = mode
    devices = [t.device for t in tensors]
    if any(isinstance(d, tuple) or d.split(":")[0] != kind for d in devices):
        return None
    if not all(dtypes.is_float(t.dtype) for t in tensors) or all(t.dtype == dtype for t in tensors):
        return None
    return dtype


def _autocast_float32(t: Tensor, dtype: DType | str | None, op: str) -> DType | str | None:
    """Under amp.autocast, float32 for a lower precision input of an op torch's autocast runs in float32 on that kind
    of device (the losses everywhere; on a GPU softmax, log_softmax and layer norm too)."""
    if dtype is None and _modes.autocast is not None and t.dtype in (dtypes.float16, dtypes.bfloat16):
        kind = _modes.autocast[0]
        if not isinstance(t.device, tuple) and t.device.split(":")[0] == kind:
            if op == "loss" or kind != "CPU":
                return dtypes.float32
    return dtype


_modes = _ThreadModes()
# how many threads are inside no_grad now: while none is, no thread reads its own depth (a thread-local read). A thread
# counts itself before its depth leaves 0 and after it is back at 0, so a thread inside no_grad always reads its depth
_NO_GRAD_THREADS = [0]
_no_grad_threads_lock = library_lock()


class _TensorType(type):
    @property
    def training(cls) -> bool:
        """tinygrad's TRAINING knob (dropout, batchnorm statistics): `Context(TRAINING=1)`, `Tensor.train()` and
        assigning `Tensor.training` are one switch, which a `with Tensor.train(mode)` block sets for its own thread."""
        return bool(TRAINING.value)

    @training.setter
    def training(cls, mode: bool) -> None:
        TRAINING.value = int(mode)


# kinds of arguments a composite keeps programs for (a model whose shapes change every call would otherwise grow them
# forever); the oldest kind makes room for a new one, so that a process that met many shapes once (a notebook, a test
# run) still replays the ones it meets now
COMPOSITE_PROGRAMS = 32


_replay_caches: list[dict] = []  # every _replayed composite's programs


def forget_replayed_composites() -> None:
    """Drop every recorded composite graph: for code that changes what a composite builds without changing its key
    (a test replacing a renderer's method, as Renderer.conv_blocks)."""
    for programs in _replay_caches:
        programs.clear()


def _replayed(fn: Callable[..., Tensor] | None = None, *, branch: Callable[..., Any] | None = None) -> Any:
    """A composite op (a loss, a linear layer, a conv) built once per kind of arguments and replayed from a
    GraphProgram after: its graph is a function of its tensors' nodes, known by their op, dtype, shape, device and
    whether they are a plain buffer (what composites branch on), and of its other arguments and the modes that change
    graphs (no_grad, training, default dtypes and device). The derivative rules it gives nodes (define_gradient: a
    conv's window) are given again to the replayed nodes. A call that draws random numbers, gives a node a rule that
    is a closure (code, not structure) or returns a view of an argument (torch's view semantics: a write into it
    writes into the argument) is not replayed: its code runs every time. (A view of a tensor the composite made
    itself is replayed as a tensor of its own: nothing else can see that tensor's memory.)

    A composite may assign into tensor arguments that are stored buffers (BatchNorm's running statistics): each such
    write is replayed as the ASSIGN node assign made, numbered (ordered_write) in the order assign made them, after
    assign's own race check on the replayed value (_reads_shifted: a value reading its target shifted is copied first,
    which the code does). A write assign made otherwise (a copy first, a pending write, a view's write through) is
    not recorded: the code runs every time.

    `branch(self, *args, **kwargs)`: what else the composite branches on, in the key too (a conv: whether gradients
    flow, which picks its graph)."""
    if fn is None:
        return functools.partial(_replayed, branch=branch)
    # key -> (program, derivative rules as (node, source, rule) positions, in-place writes)
    programs: dict[tuple, tuple[GraphProgram, list[tuple[int, int, Callable]], list[_Write]]] = {}
    _replay_caches.append(programs)

    @functools.wraps(fn)
    def composite(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        # (loops, not comprehensions or generators: each is a call, and every layer of every step is a composite)
        tensors = [self]
        for a in args:
            if isinstance(a, Tensor):
                tensors.append(a)
        for a in kwargs.values():
            if isinstance(a, Tensor):
                tensors.append(a)
        kinds = []
        for t in tensors:
            if t._view_of is not None:
                _follow_base(t)
            kinds.append(_replay_kind(t.uop))
        plain = []
        for a in args:  # (_replay_arg inline)
            plain.append(None if isinstance(a, Tensor) else (float, repr(a)) if type(a) is float else a)
        # the default dtypes as their knobs hold them (a DType by its number, or a name): dtypes.default_float parses
        # and checks a name on every read, four calls per default per composite (two names of one dtype only key it
        # apart, the cost of one more recording)
        default_float, default_int = DEFAULT_FLOAT.value, DEFAULT_INT.value
        key = (
            tuple(kinds),
            tuple(plain),
            tuple([(k, _replay_arg(a)) for k, a in kwargs.items()]) if kwargs else (),
            _modes.grad_disabled > 0,
            TRAINING.value,
            default_float if type(default_float) is str else default_float.key,
            default_int if type(default_int) is str else default_int.key,
            Device.DEFAULT,
            _modes.autocast,
            None if branch is None else branch(self, *args, **kwargs),
        )
        try:
            found = programs.get(key)
        except TypeError:  # an argument that is not hashable (a list): no key
            return fn(self, *args, **kwargs)
        if found is not None:
            program, rules, writes = found
            vals = program.run([t.uop for t in tensors])
            if not writes or _writes_replayable(tensors, vals, writes):
                for node, source, rule in rules:
                    _autograd.define_gradient(vals[node], vals[source], rule)
                for w in writes:
                    tensors[w.arg].uop = ordered_write(vals[w.at])
                    _note_lazy(tensors[w.arg])
                _note_run(program, vals, len(tensors))
                out = vals[program.outs[-1]]
                return _result(out) if out.op is not _BIND else Tensor(out)
            found = None  # (assign would copy a value first: the code runs, and its graph is not recorded)
        before = [t.uop for t in tensors]
        rng = Tensor._rng_counter
        with _autograd.recording_definitions() as made:
            out = fn(self, *args, **kwargs)
        writes = _plain_writes(tensors, before)
        if (
            not isinstance(out, Tensor)
            or (out._view_of is not None and any(out._view_of[0] is t for t in tensors))
            or Tensor._rng_counter != rng
            or any(_autograd.rule_key(rule) is None for _, _, rule in made)
            or writes is None
            or writes
            and any(out is t for t in tensors)
            # (the writes first: the output is then the run's last node, where _note_run finds it)
            or (recorded := GraphProgram.record(before, [*(tensors[j].uop for j in writes), out.uop])) is None
        ):
            return out
        program, at = recorded
        if all(node in at and source in at for node, source, _ in made):
            ruled = [(at[node], at[source], rule) for node, source, rule in made]
            recorded_writes = _recorded_writes(program, len(tensors), [(j, at[tensors[j].uop]) for j in writes])
            while len(programs) >= COMPOSITE_PROGRAMS:
                with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # (another thread's change)
                    del programs[next(iter(programs))]
            programs[key] = (program, ruled, recorded_writes)
        _note_run(program, list(at), len(tensors))  # (`at` numbers the nodes as a replay's run lists them)
        return out

    return composite


def _plain_writes(tensors: list[Tensor], before: list[UOp]) -> list[int] | None:
    """The arguments a composite's code assigned into (their nodes were `before`), in the order assign made the
    writes; None unless each is a plain write a replay can make again: an ASSIGN over the stored buffer the argument
    was, of a value not copied first."""
    writes = []
    for j, t in enumerate(tensors):
        u = t.uop
        if u is before[j]:
            continue
        if u.op is not Ops.ASSIGN or u.src[0] is not before[j] or u.src[1].op is Ops.CONTIGUOUS:
            return None
        if t._view_of is not None or _under_reshapes(before[j]).op is not Ops.BUFFER:
            return None
        writes.append(j)
    return sorted(writes, key=lambda j: write_order(tensors[j].uop))


class _Write(NamedTuple):
    """A composite's recorded in-place write: into argument `arg`, the ASSIGN at position `at`; the other inputs its
    value reaches (not through an ASSIGN or CONTIGUOUS, where assign's race check stops), and whether the program
    moves (a view other than a reshape) anything reading the target argument itself."""

    arg: int
    at: int
    reads: tuple[int, ...]
    moves_target: bool


def _recorded_writes(program: GraphProgram, n_in: int, writes: list[tuple[int, int]]) -> list[_Write]:
    # per position: the inputs reached, and those reached from below a movement op that is no reshape (what
    # _shifted_bases calls read shifted: such a view reads every buffer below it at moved positions)
    reached: list[frozenset[int]] = [frozenset((k,)) for k in range(n_in)]
    moved: list[frozenset[int]] = [frozenset()] * n_in
    for op, _, src, _ in program.steps:
        if op is Ops.ASSIGN or op is Ops.CONTIGUOUS:
            reached.append(frozenset())
            moved.append(frozenset())
            continue
        r, m = frozenset().union(*(reached[i] for i in src)), frozenset().union(*(moved[i] for i in src))
        reached.append(r)
        moved.append(m | r if op in GroupOp.Movement and op is not Ops.RESHAPE else m)
    out = []
    for j, q in writes:
        v = program.steps[q - n_in][2][1]
        out.append(_Write(j, q, tuple(sorted((reached[v] | moved[v]) - {j})), j in moved[v]))
    return out


def _writes_replayable(tensors: list[Tensor], vals: list[UOp], writes: list[_Write]) -> bool:
    """Whether assign would write each replayed value as recorded: into a stored buffer that is no view, the value
    not reading it shifted (the key says the argument is a buffer, not whether another input reads its memory).
    assign's own check (_reads_shifted) walks the value's graph, new on every step; here it runs only where an input
    other than the target may read the target's memory, or the program moves the target, or a node the program built
    is stored there (a running statistic's update reads a BatchNorm's input, a convolution's graph). The nodes stored
    in a memory are listed under the realize lock (a schedule files them): where another thread holds it, assign's
    own check runs instead of waiting."""
    if any(tensors[w.arg]._view_of is not None for w in writes):
        return False
    listed = _realize_lock.acquire(blocking=False)
    try:
        for w in writes:
            node = vals[w.at]
            target = node.src[0].base
            memory = target.arg.memory
            # (a block cut from a tensor reads its memory at other positions: assign copies a value reading it)
            exact = not listed or w.moves_target or target.arg.part
            exact = exact or any(_may_read_memory(vals[k], memory) for k in w.reads)
            if not exact and (stored := [n for _, n in _realized.stored_in_each((memory,))]):
                built = set(vals[len(tensors) :])
                exact = any(n in built for n in stored)
            if exact and _reads_shifted(node.src[1], target):
                return False
        return True
    finally:
        if listed:
            _realize_lock.release()


def _note_run(program: GraphProgram, vals: list[UOp], n_in: int) -> None:
    """A composite's run, kept on its output node for a backward to number and key the forward graph by (gradient.py
    _Structure). The output is left out of its own list: a node holding itself is a reference cycle. Only an output the
    run built (not an input returned as it is, whose own graph is not the run's)."""
    if n_in <= program.outs[-1] == len(vals) - 1:
        vals[-1].__dict__.setdefault(FORWARD_RUN, (program, vals[:-1], n_in))


def _replay_kind(u: UOp) -> tuple:
    # a dtype by its number: a DType hashes and compares in Python, on every lookup of every composite call; whether
    # it is a plain buffer (Tensor._plain_buffer) asked inline, two calls less per argument; shape and device read off
    # the node's cache where it holds them (UOp.shape and UOp.device are calls)
    b = u
    while b.op is _RESHAPE:
        b = b.src[0]
    memo = u.__dict__
    shape = memo["shape"] if "shape" in memo else u.shape
    device = memo["device"] if "device" in memo else u.device
    return (u.op, u.dtype.key, shape, device, u.arg if u.op is Ops.CONST else None, b.op is _BUFFER)


def _replay_arg(a: Any) -> Any:
    # -0.0 == 0.0, but they are other constants; a tensor argument is in the key by its kind
    return None if isinstance(a, Tensor) else (float, repr(a)) if type(a) is float else a


def _suffix_scan_rule(kind: str, d: int, node: weakref.ref[UOp], src: UOp) -> Callable[[Tensor], Tensor]:
    """The gradient of a prefix sum or log-sum-exp along d (node, of src) as suffix scans of the same kind."""

    def suffix(t: Tensor) -> Tensor:
        return t.flip(d)._cumulative(d, kind).flip(d)

    if kind == "sum":
        return suffix

    def rule(g: Tensor) -> Tensor:
        # d out_i / d x_k = exp(x_k - out_i) for k <= i: the gradient is exp(x_k) times a suffix sum of g_i exp(-out_i),
        # summed in log space apart for g's positive and negative parts (as torch's)
        x, lg = Tensor(src), g.abs().log() - _from_node(node, g.dtype)
        pos = suffix((g > 0).where(lg, -math.inf))
        neg = suffix((g < 0).where(lg, -math.inf))
        return (x + pos).exp() - (x + neg).exp()

    return rule


def _scan_levels(n: Any, block: int = 64) -> int:
    """How many levels of blocks _scan_last nests for a length n (1 up to `block`; 0 for a Variable length)."""
    if not isinstance(n, int):
        return 0
    levels = 1
    while n > block:
        n, levels = ceildiv(n, block), levels + 1
    return levels


def _result(u: UOp, t: Tensor | None = None) -> Tensor:
    """Tensor(u) for an op's result node u (not a bound variable): the hot ops (Tensor._binary, _alu) call this with
    no `t`, making the tensor with no type call and no __init__ frame (about 1300 instructions less per op, of a
    repeated `(a + b).realize()`'s 68k); Tensor.__init__ passes itself. _note_new and the common case of
    _init_grad_state and _note_unset inline: three calls less on every op."""
    if t is None:
        t = _new_object(Tensor)
    t.uop, t.grad, t._requires_grad, t._view_of = u, None, None, None
    ref = weakref.ref(t)  # (the queue's and the unset registry's: one object, no death callback)
    _new_tensors.append(ref if not CAPTURES_OPEN[0] else _MadeRef(t))
    if len(_new_tensors) > 1024:
        _trim_new()
    # (the thread-local no_grad depth read only while some thread is inside no_grad: ~650 instructions a read)
    if _NO_GRAD_THREADS[0] and _modes.grad_disabled or (is_float := _FLOAT_KEYS.get(u.dtype.key)) is None:
        t._init_grad_state()
    elif is_float:
        _unset_grad[id(t)] = ref
        if len(_unset_grad) > _unset_limit[0]:
            _sweep_unset()
    return t


_new_object = object.__new__


class Tensor(metaclass=_TensorType):
    """A lazy n-dimensional array on a device, with PyTorch/tinygrad names.

    Gradients serve torch and tinygrad programs alike. `requires_grad` is True, False, or unset (None, the default):
    backward() fills `.grad` of every tensor in its graph that is set True (torch's leaves) and of every floating
    point tensor in it that is unset (tinygrad has no requires_grad: everything gets a gradient), never of one set
    False. A computed tensor's `requires_grad` reads as torch's (whether it depends on a tensor set True)."""

    _seed: int = 0
    _rng_counter: int = 0
    # id -> tensor whose graph a backward() has consumed (weak values: ids of dead tensors drop out)
    _graph_freed: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()

    # _view_of: for a view (what torch calls one: a reshape, permute, slice, detach, ... of another tensor), the tensor
    # whose memory it shows and that tensor's node when the view was taken; a write into the view writes there
    __slots__ = ("uop", "_requires_grad", "grad", "_view_of", "__weakref__")

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ):
        if type(data) is UOp and device is None and dtype is None and requires_grad is None and data.op is not _BIND:
            _result(data, self)  # an op's result, the tensor made most often by far: no conversion below applies
            return
        self.grad: Tensor | None = None
        self._requires_grad: bool | None = None
        self._view_of: tuple[Tensor, UOp] | None = None
        dtype = to_dtype(dtype) if dtype is not None else None
        device = Device.canonicalize(device)
        if isinstance(data, UOp):
            # a bound variable becomes a 0-d tensor on a device: its value is passed to kernels at launch
            self.uop = (
                data
                if data.op is not Ops.BIND or data.device
                else data.replace(src=(*data.src, UOp(Ops.DEVICE, arg=Device.canonicalize(device))))
            )
        elif isinstance(data, Tensor):
            self.uop = data.uop
        elif isinstance(device, tuple) and not isinstance(data, (bool, int, float)):
            # multi-device (lazygrad/schedule/multi.py): made on the first device, replicated on the others
            self.uop = Tensor(data, device[0], dtype).shard(device).uop
        elif type(data).__module__ == "numpy" and hasattr(data, "dtype"):
            # before the Python scalars: numpy's float64 is a float subclass, and it stays float64
            self.uop = Tensor._from_numpy(data, device, dtype)
        elif isinstance(data, (bool, int, float)):
            dt = dtype or dtypes.from_py(data)
            self.uop = Tensor._const_uop(data, dt, device)
        elif isinstance(data, (list, tuple)) and any(type(x).__module__ == "numpy" for x in data):
            import numpy as np  # a list of numpy arrays: numpy joins them (data in, no compute)

            self.uop = Tensor._from_numpy(np.array(data), device, dtype)
        elif data is None or isinstance(data, (list, tuple)):
            values, shape = _flatten_list([] if data is None else data)  # None: an empty tensor, as tinygrad's
            for v in values:
                if not isinstance(v, (bool, int, float)):
                    raise TypeError(f"cannot make a Tensor from a list containing {type(v).__name__} ({v!r})")
            dt = dtype or (dtypes.from_py(values) if values else dtypes.default_float)
            _check_fits(values, dt, "making a tensor")
            buf = Buffer(device, len(values), dt, shape=shape)
            buf.copyin(memoryview(_pack(values, dt)))
            self.uop = UOp.buffer_view(buf, shape)
        elif isinstance(data, os.PathLike):
            # a file as a tensor on the DISK device (memory-mapped; copy it to a compute device to use it)
            dt = dtype or dtypes.uint8
            path = os.path.abspath(os.fspath(data))
            buf = Buffer(f"DISK:{path}", os.path.getsize(path) // dt.itemsize, dt)
            self.uop = UOp.buffer_view(buf, (buf.size,))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            dt = dtype or dtypes.uint8
            raw = memoryview(bytes(data))
            if raw.nbytes % dt.itemsize:
                raise ArgumentError(f"{raw.nbytes} bytes do not divide into {dt} elements of {dt.itemsize} bytes")
            buf = Buffer(device, raw.nbytes // dt.itemsize, dt)
            buf.copyin(raw)
            self.uop = UOp.buffer_view(buf, (buf.size,))
        else:
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
        if dtype is not None and self.dtype != dtype:
            self.uop = self.cast(dtype).uop
        if not isinstance(data, UOp):  # made by an op: its dtype met the device where the graph began
            _check_dtype("making a tensor", self.dtype, self.device)
        _note_new(self)
        if requires_grad is not None:
            self.requires_grad = requires_grad
        elif isinstance(data, UOp):
            self._init_grad_state()
        elif dtypes.is_float(self.dtype):
            _note_unset(self)

    def _init_grad_state(self) -> None:
        """The gradient state of a tensor made from a node, with requires_grad not given."""
        if _modes.grad_disabled and self.uop.op is not Ops.BUFFER and self.uop.op is not Ops.DETACH:
            # computed under no_grad: as in torch, no gradient flows back through it and it gets none itself
            self.uop = UOp(Ops.DETACH, self.uop.dtype, (self.uop,))
            self._requires_grad = False
        else:
            # whether the dtype is a float, by its number: dtypes.is_float is three Python calls (a DType hashes in
            # Python), on every tensor an op makes
            dt = self.uop.dtype
            if (is_float := _FLOAT_KEYS.get(dt.key)) is None:
                is_float = _FLOAT_KEYS[dt.key] = dtypes.is_float(dt)
            if is_float:
                _note_unset(self)

    # *** autograd ***

    @property
    def requires_grad(self) -> bool:
        """As in torch: set on leaves (parameters); a computed tensor requires grad if a leaf it depends on does."""
        if self._requires_grad is not None:
            return self._requires_grad
        if _modes.grad_disabled or not _grad_leaves.data:  # (its dict: len() of the WeakValueDictionary is a call)
            return False
        return _reaches_grad(self.uop)

    def _grad_leaves_of(self) -> list[tuple[Tensor, UOp]]:
        """The leaves requiring grad that this tensor depends on through a differentiable path (not via detach), each
        with the node of this graph that stands for it."""
        from lazygrad.gradient import grad_reachable

        renamed: dict[UOp, UOp] = {}
        root = _with_lazy_origins(self.uop, renamed)
        leaves = _live_in(_grad_leaves)
        pairs = self._nodes_in_graph(leaves, root, renamed)
        reached = grad_reachable(root, {n for _, n in pairs})
        return [(t, n) for t, n in pairs if n in reached]

    def _nodes_in_graph(
        self, tensors: Sequence[Tensor], root: UOp, renamed: dict[UOp, UOp] | None = None
    ) -> list[tuple[Tensor, UOp]]:
        """(tensor, node) for every node of `root` that stands for one of `tensors`: the tensor's node, the lazy node
        it was before a realize swapped in its buffer (a graph built before the realize still holds that one), or
        the node `renamed` says it became when realized tensors' graphs were swapped back in below it."""
        renamed = renamed or {}
        entry = RealizedNodes._ENTRY
        topo = root.toposort
        # the nodes a tensor standing for a node of the graph holds, besides the graph's own: the buffer views its
        # realized nodes were stored into, and the nodes renamed ones stood for
        stored_as: dict[UOp, UOp] = {}
        for n in topo:
            if entry in n.__dict__ and (was := _realized.get(n)) is not None:
                stored_as[n] = was
        held = set(stored_as.values())
        if renamed:
            held.update(old for n in topo if (old := renamed.get(n)) is not None)
        # backward() asks this of every live tensor that may want a gradient: those holding none of these nodes are
        # dropped at C speed (map, compress), where a dictionary entry per tensor cost 0.6 us each (10,000 live
        # float tensors: 6 ms a backward)
        tensors = list(tensors)
        uops = list(map(_UOP_OF, tensors))
        wanted = list(itertools.compress(tensors, map(topo.__contains__, uops)))
        held.difference_update(topo)  # (a tensor holding a node of the graph is in `wanted` once)
        if held:
            wanted += itertools.compress(tensors, map(held.__contains__, uops))
        by_uop: dict[UOp, list[Tensor]] = {}
        for t in wanted:
            by_uop.setdefault(t.uop, []).append(t)
        pairs = []
        # every node of a step's graph passes here: the realized lookup is asked only of nodes that hold an entry
        for n in topo:
            if (ts := by_uop.get(n)) is not None:
                pairs.extend((t, n) for t in ts)
            was = stored_as.get(n)
            if was is not None and (ts := by_uop.get(was)) is not None:
                pairs.extend((t, n) for t in ts)
            # a swapped-in graph's root was realized into the buffer it stands for: one key, not two
            if renamed and (old := renamed.get(n)) is not None and old is not was and (ts := by_uop.get(old)):
                pairs.extend((t, n) for t in ts)
        return pairs

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not dtypes.is_float(self.dtype):
            raise DTypeError(f"only floating point tensors can require gradients, not {self.dtype}")
        self._requires_grad = value
        _unset_grad.pop(id(self), None)
        if value:
            _no_grad_leaves.pop(id(self), None)
        else:
            _note_no_grad(self)
            if id(self) not in _grad_leaves.data:
                return  # (backward sets every gradient it makes False: no lock, no Python-level pop for those)
        with _grad_leaves_lock:
            if value:
                if id(self) not in _grad_leaves.data:
                    self._own_leaf_node()
                _grad_leaves[id(self)] = self
            else:
                _grad_leaves.pop(id(self), None)

    def _own_leaf_node(self) -> None:
        """A leaf not stored yet (zeros(3), Tensor(3.5), a lazy init, x.detach()) is a hash-consed node that alike
        constants or expressions share: the 0 of a relu's where, another zeros(3) leaf, x.detach() used as a
        constant elsewhere. It gets a node of its own (numbered: two leaves never share it), so that it gets only its
        own gradient, as torch's. A detached view of memory (p.detach(), torch's way to a leaf sharing p's memory)
        stays a detach of that memory, numbered; any other a copy (the detach: the gradient reaching this node stops
        here, not at the shared one below)."""
        number = ("leaf", next(_leaf_ids))
        if self.uop.op is Ops.DETACH and self.uop.arg is None:
            self.uop = UOp(Ops.DETACH, self.dtype, self.uop.src, number)
        elif self.uop.base.op is not Ops.BUFFER and self._view_of is None:
            _lazy_overwritten.add(self.uop)  # (views taken before follow it to the new node)
            self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (UOp(Ops.DETACH, self.dtype, (self.uop,)),), number)

    def requires_grad_(self, value: bool = True) -> Tensor:
        self.requires_grad = value
        return self

    @property
    def is_param(self) -> bool:
        """tinygrad's flag: whether an optimizer given this tensor updates it (False: a buffer such as a running
        statistic, realized with each step). The same as requires_grad not set False."""
        return self._requires_grad is not False

    @is_param.setter
    def is_param(self, value: bool) -> None:
        if not value:
            self.requires_grad = False
        elif self._requires_grad is False:
            self._requires_grad = None
            if dtypes.is_float(self.dtype):
                _note_unset(self)

    def is_param_(self, value: bool = True) -> Tensor:
        self.is_param = value
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, as lazy tensors (zeros where self does not depend on a target)."""
        return [t.zeros_like() if g is None else g for t, g in zip(targets, self._gradients(targets, gradient))]

    def _gradients(self, targets: Sequence[Tensor], gradient: Tensor | None) -> list[Tensor | None]:
        """gradient()'s, None for a target whose node self's graph does not hold (autograd.grad's unused inputs)."""
        from lazygrad.gradient import compute_gradient

        seed = self._seed_gradient(gradient)
        renamed: dict[UOp, UOp] = {}
        root = _through_blocks(_with_lazy_origins(self.uop, renamed), targets, renamed)
        pairs = self._nodes_in_graph(targets, root, renamed)
        grads = compute_gradient(root, seed, {n for _, n in pairs})
        out: dict[int, Tensor] = {}
        for t, n in pairs:
            if (g := grads.get(n)) is not None:
                out[id(t)] = out[id(t)] + g if id(t) in out else g
            elif id(t) not in out:
                out[id(t)] = t.zeros_like()  # in the graph, but no path a gradient takes (through a comparison)
        return [out.get(id(t)) for t in targets]

    def _seed_gradient(self, gradient: Tensor | None) -> Tensor:
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"cannot differentiate a {self.dtype} tensor; only floating point results have gradients")
        if gradient is None:
            if self.numel() != 1:
                raise ArgumentError(
                    f"backward of a non-scalar (shape {self.shape}) needs an explicit gradient of that shape"
                )
            if _modes.grad_disabled:
                return Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
            # the node Tensor.ones builds, kept per kind of root: every backward of a step seeds alike (an MLP step's
            # backward made 64 of its 361 Python calls building these three nodes)
            key = (self.shape, self.dtype, self.device)
            if (seed := _SEEDS.get(key)) is None:
                if len(_SEEDS) >= 64:
                    _SEEDS.clear()
                seed = _SEEDS[key] = Tensor.ones(self.shape, dtype=self.dtype, device=self.device).uop
            return _result(seed)
        if gradient.shape != self.shape:
            raise ArgumentError(f"gradient shape {gradient.shape} does not match the tensor's shape {self.shape}")
        return gradient

    def _backward_leaves(self, seed: Tensor) -> tuple[UOp, list[tuple[Tensor, UOp]], set[int], bool, _Structure | None]:
        """backward's graph (realized tensors' graphs swapped back in), the tensors it fills with the node standing for
        each, the ids of those whose .grad it replaces rather than adds to, whether a tensor set requires_grad=True
        is among them (torch's rules, else tinygrad's), and the graph's _Structure with `seed` where it is the graph
        returned."""
        # (the unset tensors are listed at C speed: a backward meets every live one, see _nodes_in_graph)
        candidates = [*_live_in(_grad_leaves), *_live(_unset_grad.copy().values())]
        # the root itself gets no .grad (torch leaves a non-leaf's empty; it would only be ones), nor do the unset
        # tensors it is a view of (the (1,) sum that sum() reshapes to (), kept alive by the view)
        viewed: set[int] = set()
        v = self
        while v._view_of is not None:
            v = v._view_of[0]
            viewed.add(id(v))

        def leaves_in(root: UOp, renamed: dict[UOp, UOp]) -> list[tuple[Tensor, UOp]]:
            if shape is not None and shape.root is root and shape.graph is not None and not renamed:
                # its tensors are those holding one of its nodes or the stored value of one (as _nodes_in_graph lists
                # them: by position, sources first, and a node's own holders before its value's), found by the
                # structure's positions with the live tensors looked at C speed; which of them a gradient reaches is
                # the structure's, known after its first backward (no walk)
                index, n_root, nodes = shape.index, shape.n_root, shape.nodes
                uops = list(map(_UOP_OF, candidates))
                holding = list(itertools.compress(candidates, map(index.__contains__, uops)))
                found = list(zip(map(index.__getitem__, map(_UOP_OF, holding)), holding))
                stored_at: dict[UOp, list[int]] = {}
                for p in shape.realized_at:
                    if (was := _realized.get(nodes[p])) is not None:
                        stored_at.setdefault(was, []).append(p)
                if stored_at:
                    for t in itertools.compress(candidates, map(stored_at.__contains__, uops)):
                        found += [(p, t) for p in stored_at[t.uop]]
                found.sort(key=_first)
                reached = shape.reached()
                return [
                    (t, nodes[p])
                    for p, t in found
                    if p in reached and p < n_root - 1 and not (t._requires_grad is None and id(t) in viewed)
                ]
            pairs = self._nodes_in_graph(candidates, root, renamed)
            reached = _autograd.grad_reachable(root, {n for _, n in pairs})
            return [
                (t, n)
                for t, n in pairs
                if n in reached and n is not root and not (t._requires_grad is None and id(t) in viewed)
            ]

        renamed: dict[UOp, UOp] = {}
        root = _with_lazy_origins(self.uop, renamed)
        changes = _realized.changes  # (before the walk: see _Structure.entries_seen)
        shape: _Structure | None = _autograd._Structure(root, seed.uop, _modes.grad_disabled > 0)
        shape.entries_seen = changes
        leaves = leaves_in(root, renamed)
        replace: set[int] = set()
        torch_style = False
        for t, _ in leaves:  # (a loop, not any() over a generator: a call per leaf less)
            if t._requires_grad:
                torch_style = True
                break
        if not torch_style and (cut := _through_blocks(root, candidates, renamed)) is not root:
            # an unset tensor a slice was cut from as a buffer of its own gets its gradient through the slice (with a
            # tensor set True in the graph it would get none: a block is only cut from a tensor needing no gradient)
            root, shape = cut, None
            leaves = leaves_in(root, renamed)
        if torch_style:
            # the root reaches a leaf set True: noted on its node, so that realizing it (the loss, with the step)
            # does not walk its graph again to find that out (_reaches_grad); as in torch, it stays so
            self.uop.__dict__[_REACHES_GRAD] = True
            # where the graph has a tensor set True (torch code; or an optimizer's parameters, which it sets True),
            # requires_grad flows as in tinygrad: an unset tensor computed from one set True gets a .grad, an unset
            # one that is not (an input) gets none, else a persistent input's .grad would grow by one lazy add per
            # step that nothing ever realizes. For the same reason an unset tensor's .grad is replaced, not summed.
            wanted = {n for t, n in leaves if t._requires_grad}
            if shape is not None and shape.graph is not None and shape.root is root and not renamed:
                # (by the structure's positions: the leaves are nodes of it)
                holding, index = shape.holding(wanted), shape.index
                leaves = [(t, n) for t, n in leaves if t._requires_grad or index[n] in holding]
            else:
                leaves = [(t, n) for t, n in leaves if t._requires_grad or any(x in wanted for x in n.toposort)]
            replace = {id(t) for t, _ in leaves if not t._requires_grad}
        else:
            leaves = _drop_unset_over_no_grad_inputs(root, leaves)
        return root, leaves, replace, torch_style, shape

    def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
        """Accumulate d(self)/d(t) into `.grad` of every tensor t in self's graph with requires_grad True or unset (see
        the class docstring)."""
        if id(self) in Tensor._graph_freed:
            raise RuntimeError(
                "backward through this graph a second time: its gradients were already taken; "
                "pass retain_graph=True to the first backward() to allow it"
            )
        seed = self._seed_gradient(gradient)
        # listing the tensors that may get a .grad holds every live float tensor of every thread for a moment. Under
        # the realize lock, and let go before it is released: a schedule looking for live lazy tensors (another
        # thread's optimizer step, whose writes they would read) must not find those its thread has dropped and this
        # scan still holds (they joined that step as outputs, and its kernels fused otherwise than in a run alone)
        with _realize_lock:
            root, leaves, replace, torch_style, shape = self._backward_leaves(seed)
        if not leaves:
            raise RuntimeError(
                "backward: the tensor depends on no floating point tensor whose requires_grad is True or unset "
                "(or only through detach() / no_grad())"
            )
        # a replayed program's gradients are left pending (built when first read) where nothing in backward reads
        # them (no hook runs, none is added to an earlier gradient, no capture records them) and an optimizer step
        # could realize them unbuilt (nn/optim.py _StepProgram.replay: beside no thread of the user's). Only where
        # every tensor getting one is set requires_grad (a parameter): a computed tensor the caller keeps (the digits
        # CNN's logits) gets a gradient no optimizer stores, which reads the weights the step overwrites, so the
        # step's realize computes it first and builds the whole run, and the update's run with it (calls per CNN
        # step 2717 -> 3206, nodes 461 -> 637)
        pending = (
            not _grad_hooks
            and not _post_accumulate_hooks
            and not _modes.grad_disabled
            and not CAPTURES_OPEN[0]
            and not Device.multi_seen
        )
        for t, _ in leaves:  # (a loop, not a generator: a call per leaf less on every step)
            if t.grad is not None or not t._requires_grad:
                pending = False
                break
        pending = pending and STEP_LAYOUTS.value and alone_with_library_threads()
        grads = _autograd.compute_gradient(root, seed, {n for _, n in leaves}, shape, pending)
        for t, n in leaves:
            if (g := grads.get(n)) is not None:
                if t._requires_grad and (hooks := _grad_hooks.get(id(t))):  # a computed tensor's run in the graph
                    g = _run_hooks(hooks, g)
                elif _hooked and (ran := _hooked.pop(id(t), None)) is not None and ran[0] is g:
                    g = ran[1]
                t.grad = g if t.grad is None or id(t) in replace else t.grad + g
                t.grad.requires_grad = False  # as in torch: a gradient is data, it keeps no graph when realized
                if _post_accumulate_hooks and (post := _post_accumulate_hooks.get(id(t))) and t.is_leaf:
                    for hook in list(post):
                        hook(t)
        if not retain_graph and torch_style:
            # torch frees the graph (a second backward is an error); tinygrad keeps it (gradients accumulate), and
            # code that sets no requires_grad is tinygrad code
            Tensor._graph_freed[id(self)] = self
        _autograd.note_backward_root(self)
        return self

    @staticmethod
    def is_grad_enabled() -> bool:
        """False inside Tensor.no_grad() (torch.is_grad_enabled)."""
        return _modes.grad_disabled == 0

    @staticmethod
    def rng_state() -> tuple[int, int]:
        """(seed, random tensors made since it was set): changes whenever a random tensor is made."""
        with _rng_lock:
            return Tensor._seed, Tensor._rng_counter

    @staticmethod
    def no_grad(fn: Callable | None = None) -> Any:
        """Context manager and decorator (`@Tensor.no_grad()` or `@Tensor.no_grad`): tensors made inside never pass
        gradients back."""
        return _GradMode()(fn) if fn is not None else _GradMode()

    @staticmethod
    def enable_grad(fn: Callable | None = None) -> Any:
        """Context manager and decorator: gradients recorded again inside a no_grad block (torch.enable_grad)."""
        return _SetGradMode(True)(fn) if fn is not None else _SetGradMode(True)

    @staticmethod
    def set_grad_enabled(mode: bool) -> Any:
        """torch.set_grad_enabled: takes effect at once (a call alone switches gradients off or on for this thread);
        as a context manager, the previous mode comes back at its end."""
        ctx = _SetGradMode(bool(mode))
        ctx.apply()
        return ctx

    @staticmethod
    def inference_mode(mode: bool | Callable = True) -> Any:
        """torch.inference_mode: no_grad here (there are no separate inference tensors)."""
        if callable(mode):
            return _GradMode()(mode)
        return _GradMode() if mode else _SetGradMode(True)

    @staticmethod
    def train(mode: bool | Callable = True) -> Any:
        """Context manager and decorator (`@Tensor.train()` or `@Tensor.train`) setting `Tensor.training` (dropout,
        batchnorm statistics)."""
        return _TrainMode(True)(mode) if callable(mode) else _TrainMode(mode)

    @staticmethod
    def from_uop(uop: UOp) -> Tensor:
        """A tensor over a node, made without __init__'s argument parsing and not queued as a new lazy value: for the
        JIT's replay path, whose outputs are stored buffers."""
        t = Tensor.__new__(Tensor)
        t.uop, t.grad, t._requires_grad, t._view_of = uop, None, None, None
        return t

    def replace(self, x: Tensor) -> Tensor:
        """Make this tensor stand for x's value (tinygrad's): no copy and no write into memory, unlike assign."""
        if x.shape != self.shape:
            raise ArgumentError(f"replace needs the same shape: tensor {self.shape}, value {x.shape}")
        self.uop = x.uop
        _note_lazy(self)
        return self

    def assign(self, x: Any) -> Tensor:
        """Write x into this tensor's memory (in place, lazily: it happens at the next realize)."""
        if self._on_disk:
            return self._disk_write(x)
        if not isinstance(x, Tensor):  # a number fills; a list or numpy array is data of this tensor's dtype
            scalar = isinstance(x, (bool, int, float)) or (type(x).__module__ == "numpy" and getattr(x, "ndim", 1) == 0)
            x = (
                Tensor.full(self.shape, x, dtype=self.dtype, device=self.device)
                if scalar
                else Tensor(x, dtype=self.dtype, device=self.device)
            )
        if x.dtype != self.dtype:  # no silent cast: it could lose precision (tinygrad's rule; RuntimeError as torch's)
            raise ArgumentError(f"assign dtype mismatch: target {self.dtype}, value {x.dtype}; cast the value first")
        if x.shape != self.shape and x.device == self.device and _broadcasts_to(x.shape, self.shape):
            x = x.expand(self.shape)  # a value of fewer or size-1 dims fills every row, as tinygrad's assign
        if x.shape != self.shape or x.device != self.device:
            raise ArgumentError(
                f"assign needs the same shape and device: target {self.shape} {self.device}, value {x.shape} {x.device}"
            )
        if self._view_of is not None:
            return self._write_through(None, x)
        if self.uop.op is Ops.ASSIGN:
            # a write is already pending: this one goes into the same memory after it (a[0] = 1; a[1] = 2)
            if _reads_shifted(x.uop, self.uop) or _reads_shifted(x.uop, self.uop.base.src[0].base):
                x = x.contiguous()
            self.uop = ordered_write(UOp(Ops.ASSIGN, self.dtype, (self.uop.src[0], x.uop)))
        elif not self._is_stored():
            # nothing stored yet, or a copy not made yet (flip, pad, expand of another tensor): the tensor becomes x;
            # views taken of it before follow (_follow_base), as torch's views show a write into their base
            _lazy_overwritten.add(self.uop)
            self.uop = x.uop
        else:
            if _reads_shifted(x.uop, self.uop.base):
                x = x.contiguous()  # the value reads this memory at other positions: compute it elsewhere first
            self.uop = ordered_write(UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop)))
        _note_lazy(self)
        return self

    @staticmethod
    def from_numpy(arr: Any) -> Tensor:
        """A CPU tensor over the array's own memory, as torch.from_numpy: no copy, so a write into either shows in
        the other. `Tensor(arr)` copies (as torch.tensor does): a batch array refilled in a loop then leaves the
        tensors made from it alone. Falls back to a copy where the array is not C-contiguous and aligned, or not
        writable: torch shares a read-only array too (with a warning), and an in-place op then writes into memory
        nobody may write (a read-only file mapping: a segfault; the bytes object under `np.frombuffer`: a changed
        immutable object)."""
        return Tensor(Tensor._from_numpy(arr, "CPU", None, share=True))

    @staticmethod
    def from_url(url: str, gunzip: bool = False, **kwargs: Any) -> Tensor:
        """The file at `url` (downloaded once into the cache by helpers.fetch, gunzipped if asked) as a uint8 DISK
        tensor, as tinygrad's: `.to(device)` or a bitcast reads it."""
        from lazygrad.helpers import fetch

        return Tensor(fetch(url, gunzip=gunzip), **kwargs)

    @staticmethod
    def from_blob(
        ptr: int, shape: tuple[int, ...], dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        """A tensor over memory the caller owns at address `ptr` (tinygrad's from_blob): no copy, and the memory must
        outlive the tensor. `device` is where the address is valid (the CPU by default, or a GPU for a device
        pointer)."""
        shape = tuple(int(s) for s in shape)
        if not isinstance(ptr, int) or ptr <= 0:
            raise ArgumentError(f"from_blob needs a memory address (a positive int), got {ptr!r}")
        if any(s < 0 for s in shape):
            raise ArgumentError(f"from_blob: negative size in shape {shape}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device or "CPU")
        buf = Buffer(dev, prod(shape), dt, external=ptr, external_ptr=ptr, shape=shape)  # external: never freed here
        return Tensor(UOp.buffer_view(buf, shape))

    @staticmethod
    def _from_numpy(arr: Any, device: str, dtype: DType | None, share: bool = False) -> UOp:
        import numpy as np

        arr = given = np.asarray(arr)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))  # buffers hold the machine's byte order
        arr = np.ascontiguousarray(arr)
        # an array made here (byte order, a strided view made contiguous) is no one else's: its memory is taken
        # as it is instead of copied a second time
        private = arr is not given and arr.base is None
        dt = _np_to_dtype(arr.dtype)
        shape = tuple(int(s) for s in given.shape)
        aligned = arr.size > 0 and arr.ctypes.data % dt.itemsize == 0
        if device == "CPU" and aligned and (private or share and arr.flags.writeable):
            # zero-copy: the buffer points into the array (kept alive by the buffer)
            buf = Buffer(device, int(arr.size), dt, external=arr, external_ptr=arr.ctypes.data, shape=shape)
        else:
            buf = Buffer(device, int(arr.size), dt, shape=shape)
            buf.copyin(memoryview(arr.reshape(-1).view(np.uint8)))
        uop = UOp.buffer_view(buf, shape)
        return uop if dtype is None or dtype == dt else UOp(Ops.CAST, dtype, (uop,))

    @staticmethod
    def _const_uop(value: Any, dtype: DType, device: str) -> UOp:
        return UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(value, dtype))

    # *** properties ***

    @property
    def shape(self) -> tuple[int, ...]:
        # (the node's cached shape read here: UOp.shape is a call more, and composites ask shapes dozens of times)
        cache = self.uop.__dict__
        return cache["shape"] if "shape" in cache else self.uop.shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def device(self) -> str:
        # (a str with torch.device's .type and .index; the name itself where the device is a tuple: sharded)
        name = self.uop.device
        return _device_names.get(name) or device_name(name)  # type: ignore[call-overload]

    @property
    def ndim(self) -> int:
        return len(self.uop.shape)

    def numel(self) -> int:
        return ssimplify(prod(self.shape))

    def size(self, dim: int | None = None) -> int | tuple[int, ...]:
        return self.shape if dim is None else self.shape[_axes(dim, self.ndim)[0]]

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """torch's property and tinygrad's method both: `t.nbytes` and `t.nbytes()` are the byte count."""
        return _CallableInt(self.numel() * self.dtype.itemsize)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "realized" if self.uop.is_realized else "lazy"
        graph = pretty_print(self.uop, max_lines=12).replace("\n", "\n  ")
        shape = tuple(_SymRepr(s) if isinstance(s, UOp) else s for s in self.shape)
        return f"<Tensor shape={shape} dtype={self.dtype} device={self.device} {state}\n  {graph}>"

    def __str__(self) -> str:
        """print(x): torch's `tensor([...])` of its values (reading them realizes x); inside a TinyJit capture, for a
        sharded tensor, or where the values cannot be read, the graph as repr shows it."""
        from lazygrad.printing import format_values, tensor_str

        if isinstance(self.device, tuple) or _values_frozen():
            return repr(self)
        values = self.tolist()
        dt, shape = self.dtype, self._bound_shape()
        suffixes = [] if self.device == "CPU" else [f"device='{self.device}'"]
        if prod(shape) == 0:
            # (torch's: the size unless (0,), and the dtype unless the default float's: no value shows it)
            suffixes += [f"size={shape}"] if len(shape) != 1 else []
            suffixes += [f"dtype={dt}"] if dt != dtypes.default_float else []
        elif dt not in (dtypes.default_float, dtypes.default_int, dtypes.int64, dtypes.bool):
            suffixes.append(f"dtype={dt}")  # (not for the defaults: the float's, tinygrad's int32 and torch's int64)
        suffixes += ["requires_grad=True"] if self.requires_grad else []
        return tensor_str(format_values(values, self.ndim, dtypes.is_float(dt), prod(shape)), suffixes)

    def __format__(self, spec: str) -> str:
        """f"{loss:.4f}": a 0-d tensor formats as its value (torch's), any other as print shows it."""
        if self.ndim == 0 and (spec or not _values_frozen()):
            return format(self.item(), spec)
        return format(str(self), spec)

    def __reduce__(self) -> tuple:
        """pickle: the values (realized), dtype, device, requires_grad and parameter standing; a lazy graph is not
        pickled (its buffers' later writes would be lost), nor .grad (torch's pickle drops it too)."""
        from lazygrad.nn.module import _PARAMETERS

        if isinstance(self.device, tuple):
            raise TypeError(f"cannot pickle a tensor sharded over {self.device}: gather it with .to(device) first")
        param = _PARAMETERS.get(id(self)) is self
        data = (
            bytes(self._raw_data()) if self.dtype != dtypes.bfloat16 else bytes(self.bitcast(dtypes.uint16)._raw_data())
        )
        return _unpickled_tensor, (data, self._bound_shape(), self.dtype, str(self.device), self._requires_grad, param)

    def __deepcopy__(self, memo: dict) -> Tensor:
        """copy.deepcopy (a model's EMA twin, a best-model snapshot): a tensor of its own memory holding this one's
        values, with its requires_grad, parameter standing and a copy of its .grad, as torch's."""
        from lazygrad.nn.module import _PARAMETERS

        with Tensor.no_grad():
            out = self.detach().clone().realize()
        _copy_requires_grad(out, self._requires_grad)
        if _PARAMETERS.get(id(self)) is self:
            _PARAMETERS[id(out)] = out
        memo[id(self)] = out
        if self.grad is not None:
            out.grad = copy.deepcopy(self.grad, memo)
        return out

    # by identity (__eq__ is elementwise): object's own, a C call, where a Python one costs on every weak set insert
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ArgumentError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        if self.numel() != 1:
            raise ArgumentError(f"only one element tensors can be converted to Python scalars, got shape {self.shape}")
        return float(self.item())

    def __int__(self) -> int:
        if self.numel() != 1:
            raise ArgumentError(f"only one element tensors can be converted to Python scalars, got shape {self.shape}")
        return int(self.item())

    def __index__(self) -> int:
        """An integer tensor of one element as an index (a slice bound, range(), a list subscript), as torch's."""
        if self.numel() != 1 or not (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool):
            raise TypeError(f"only integer tensors of a single element can be converted to an index, got {self.dtype} "
                            f"of shape {self.shape}")  # fmt: skip
        return int(self.item())

    # *** realizing ***

    def schedule_with_vars(self, *lst: Tensor) -> tuple[list, dict[UOp, int]]:
        """The kernels that compute this tensor (and `lst`), and the variable values they run with."""
        (schedule, var_vals), _ = self._schedule_noted(*lst)
        if type(schedule) is Schedule:
            schedule.fill()  # (the caller's: a list whatever it does with it, `+` and slices too)
        return schedule, var_vals

    def _schedule_noted(self, *lst: Tensor) -> tuple[tuple[list, dict[UOp, int]], list]:
        """schedule_with_vars, and what it noted as stored (for _run_noted to take back if no kernel runs): [each
        tensor it made stand for a buffer, with the node it had; the nodes noted as stored]. A schedule instantiated
        from a template leaves its items unmade (run_schedule's launch plan needs none: Schedule.unfilled)."""
        tensors: tuple[Tensor, ...] = (self, *lst)
        firsts: dict[UOp, Tensor] = {}
        with _realize_lock:  # (_own_memory's look for another holder too: a realize between would share its memory)
            tensors = _own_memory(tensors, firsts)
            scanned = False
            # the writes looked for before scheduling, where every reader found then joined this schedule (as its
            # outputs now, they are not found again): a schedule writing just these needs no second look
            looked: set[UOp] | None = None
            while True:
                outs = [t.uop for t in tensors]
                lowered = None
                if Device.multi_seen and any(has_multi(u) for u in outs):
                    # sharded tensors (lazygrad/schedule/multi.py): scheduled as one graph per device
                    lowered, memo = lower_multi(outs, _realized)
                    outs = [p for u in lowered for p in (u.src if u.op is Ops.MULTI else (u,))]
                # the schedule writes memory in place: a lazy tensor computed from that memory's old contents joins
                # it as an output (the planner computes it before the write, as torch computed it when it was made),
                # or gets its value first in a schedule of its own. Writes that are outputs are known before
                # scheduling; one met inside the graph is known after, and then the schedule (not run) is made again
                first, joining = [], []
                if not scanned and (roots := {u for u in outs if u.op is Ops.ASSIGN}):
                    scanned = True
                    first, joining = _readers_of_overwritten(list(roots), tensors, {}, None)
                    looked = roots if not first and lowered is None else None
                if not first and not joining:
                    schedule, becomes, var_vals = create_schedule(outs, _realized)
                    writes = [n for n in becomes if n.op is Ops.ASSIGN]
                    if not writes:
                        break  # nothing overwritten: no reader to look for
                    unlooked = None
                    if lowered is None and looked is not None:
                        if _writes_looked(writes, looked):
                            break  # the writes are the outputs looked for above (an optimizer step): nothing new
                        unlooked = _unlooked(writes, looked)
                    first, joining = _readers_of_overwritten(
                        writes if unlooked is None else unlooked, tensors, becomes, None if lowered is None else memo
                    )
                    if not first and not joining:
                        break
                    looked = looked | set(unlooked) if unlooked is not None and not first else None
                if first:
                    _realize_readers(first)
                tensors = (*tensors, *_own_memory(tuple(joining), firsts))
            if lowered is not None:
                becomes = {**becomes, **stored_multis(memo, becomes)}
            _mark_pending(schedule)
            replaced = _note_stored(tensors, becomes, lowered)
            return (schedule, var_vals), [replaced, [*becomes]]

    def schedule(self, *lst: Tensor) -> list:
        return self.schedule_with_vars(*lst)[0]

    def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
        """Compute this tensor (and those in `lst`, in the same schedule) into memory.
        `Tensor.realize(a, b)` works too. (do_update_stats: tinygrad's; GlobalCounters always count.)"""
        # (acquire and release called, not a with block: the with statement's __enter__/__exit__ lookups and calls
        # cost about 1000 instructions, 1.5% of a repeated `(a + b).realize()`)
        _realize_lock.acquire()
        try:
            if lst or not _realize_cached(self):
                # (the collector held off: a step's realize frees the last step's graph, see cycles_held_off)
                with cycles_held_off():
                    scheduled, noted = self._schedule_noted(*lst)
                    _run_noted(*scheduled, noted)
        finally:
            _realize_lock.release()
        return self

    def _contiguous_buffer(self) -> Buffer:
        if self._view_of is not None:
            _follow_base(self)
        if isinstance(self.device, tuple):
            # sharded: every part computed (pending writes too), then read on the first device
            self.realize()
            return Tensor(self.uop.src[0] if self.uop.arg is None else self.to(self.device[0]).uop)._contiguous_buffer()
        u = self._under_reshapes()
        if u.op not in GroupOp.Movement and u.op is not Ops.BUFFER and u.op is not Ops.MULTI:
            # a computed result (not a view of one): stored whole it is readable as it is, with no copy kernel after
            # it; a view (x[:, -1]) still goes through contiguous(), which computes only what the view shows
            self.realize()
        t = self if self._plain_buffer() is not None else self.contiguous()
        t.realize()
        buf = t._plain_buffer()
        assert buf is not None, "a realized contiguous tensor is backed by a whole buffer"
        return buf

    def _is_stored(self) -> bool:
        """Whether the tensor is whole buffers in memory: one, or one per device for a sharded tensor."""
        if self.uop.op is Ops.MULTI:
            return all(whole_buffer(p) for p in self.uop.src)
        return self._plain_buffer() is not None

    @property
    def _on_disk(self) -> bool:
        return isinstance(self.device, str) and self.device.startswith("DISK")  # a sharded tensor's device is a tuple

    def _under_reshapes(self) -> UOp:
        """The node this tensor reshapes (itself if it is no reshape): reshapes keep the row-major order."""
        return _under_reshapes(self.uop)

    def _plain_buffer(self) -> Buffer | None:
        u = self._under_reshapes()
        return u.arg if u.op is Ops.BUFFER else None

    @property
    def data(self) -> _Data:
        """torch's `t.data`: t's memory as a tensor that records no gradient (writes into it change t:
        `w.data.normal_(0, 0.02)`, `p.data.copy_(x)`); and tinygrad's `t.data()`: called, t's raw bytes in row-major
        order (a memoryview)."""
        out = self.detach()
        out.__class__ = _Data
        return out  # type: ignore[return-value]

    @data.setter
    def data(self, value: Any) -> None:
        # torch rebinds t to value's memory; here value is written into t's (the same values; an optimizer holding
        # t keeps its buffer). In-place changes of shape or dtype are not offered (see docs/ops.md)
        if not isinstance(value, Tensor):
            raise TypeError(f"t.data = ... needs a Tensor, got {type(value).__name__}")
        if value.shape != self.shape or value.dtype != self.dtype:
            raise ArgumentError(
                f"t.data = ... keeps the tensor's shape and dtype here: tensor {self.shape} {self.dtype}, value "
                f"{value.shape} {value.dtype}"
            )
        with Tensor.no_grad():
            self.assign(value.detach())

    def _raw_data(self, into: memoryview | None = None) -> memoryview:
        """The raw bytes of the tensor in row-major order: in new memory, or copied into `into` (its size)."""
        from lazygrad.engine.realize import NEVER_RAN, check_not_capturing

        check_not_capturing("reading a tensor's data (.numpy(), .item(), .tolist(), .data(), bool())")
        if self._on_disk:
            return self.to(Device.DEFAULT)._raw_data()
        # (under the lock from the realize to the copy: another thread's optimizer step, which holds it, would make a
        # parameter read here lazy again in between, and write its memory while it is copied)
        with _realize_lock:
            lazy = self.uop
            buf = self._contiguous_buffer()
            if buf.pending_write:
                raise RuntimeError(NEVER_RAN)
            _keep_read_grad_path(self, lazy)
            if into is None:
                return buf.as_bytes()
            if into.nbytes == buf.nbytes:
                return buf.copyout(into)
            into[:] = buf.as_bytes()[: into.nbytes]  # (a symbolic shape's buffer, sized for the maximum)
            return into

    def _python_values(self) -> list[Any]:
        t = self.cast(dtypes.float32) if self.dtype == dtypes.bfloat16 else self
        n = prod(t._bound_shape())
        raw = t._raw_data()
        if n == 0:
            return []
        # struct, not memoryview.cast: cast has no float16 ("e") format
        return list(struct.unpack(f"{n}{t.dtype.fmt}", raw[: n * t.dtype.itemsize]))

    def _bound_shape(self) -> tuple[int, ...]:
        """The shape with every variable at its bound value: a symbolic result's buffer holds that many elements
        first (it is sized for the variables' maximum)."""
        return tuple(sym_value(s) for s in self.shape)

    def tolist(self) -> Any:
        values = self._python_values()
        if self.dtype == dtypes.bfloat16:
            values = [bf16_to_float(float_to_bf16(v)) for v in values]

        def nest(vals: list[Any], shape: tuple[int, ...]) -> Any:
            if not shape:
                return vals[0]
            if len(shape) == 1:
                return vals
            step = prod(shape[1:])
            return [nest(vals[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]

        return nest(values, self._bound_shape())

    def item(self) -> Any:
        if prod(self._bound_shape()) != 1:
            raise ArgumentError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self._python_values()[0]

    def numpy(self) -> Any:
        import numpy as np

        if self.dtype == dtypes.bfloat16:
            return self.float().numpy()
        np_dtype = _to_np_dtype(self.dtype)
        shape = self._bound_shape()
        try:
            check_host_allocation(nbytes := prod(shape) * self.dtype.itemsize)
            out = np.empty(shape, dtype=np_dtype)
        except MemoryError as e:
            raise MemoryError(
                f"cannot allocate {format_bytes(nbytes)} for a {self.dtype.name} tensor of shape {shape} in host "
                f"memory to read it from {self.device}: {e}"
            ) from e
        if out.size:
            # copied once, straight into the array: a buffer sized for a symbolic shape's maximum holds the bound
            # values first
            self._raw_data(memoryview(out.reshape(-1).view(np.uint8)))
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    # *** creation ***

    @staticmethod
    def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
        out = argfix(*shape)
        for s in out:
            if isinstance(s, UOp) and dtypes.is_int(s.dtype):
                continue  # a symbolic size (an expression of bound Variables)
            if not isinstance(s, int) or isinstance(s, bool):
                raise TypeError(f"shape entries must be ints, got {out}")
            if s < 0:
                raise ArgumentError(f"negative dimension in shape {out}")
        return out

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        shape_ = Tensor._shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        device = Device.canonicalize(device)
        if isinstance(device, tuple):  # multi-device: a replica per device
            return Tensor(multi([Tensor.empty(shape_, dtype=dt, device=d).uop for d in device], None))
        return Tensor(UOp.buffer_view(Buffer(device, prod(shape_), dt, shape=shape_), shape_))

    @staticmethod
    def full(shape: Any, fill_value: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        shape_ = Tensor._shape_arg((shape,) if isinstance(shape, (int, UOp)) else tuple(shape))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        _check_fits([fill_value], dt, "full")
        c = Tensor(Tensor._const_uop(fill_value, dt, Device.canonicalize(device)))
        return c.reshape((1,) * len(shape_)).expand(shape_)._fresh()

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(argfix(*shape), 0.0, dtype=dtype or dtypes.default_float, device=device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(argfix(*shape), 1.0, dtype=dtype or dtypes.default_float, device=device)

    def const_like(self, value: Any) -> Tensor:
        """`value` in this tensor's shape, dtype and device (tinygrad's name; full_like without a dtype to pick)."""
        return self.full_like(value)

    def full_like(self, fill_value: Any, dtype: DType | str | None = None, *, device: str | None = None) -> Tensor:
        return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device)

    def zeros_like(self, dtype: DType | str | None = None, *, device: str | None = None) -> Tensor:
        return self.full_like(0, dtype, device=device)

    def ones_like(self, dtype: DType | str | None = None, *, device: str | None = None) -> Tensor:
        return self.full_like(1, dtype, device=device)

    def empty_like(self, dtype: DType | str | None = None, *, device: str | None = None) -> Tensor:
        return Tensor.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    @staticmethod
    def _iota(n: int, device: str | None = None) -> Tensor:
        return _result(UOp(Ops.IOTA, dtypes.int32, (UOp(Ops.DEVICE, arg=Device.canonicalize(device)),), n))

    @staticmethod
    def arange(
        start: int | float,
        stop: int | float | None = None,
        step: int | float = 1,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if isinstance(start, UOp) or isinstance(stop, UOp) or isinstance(step, UOp):
            return Tensor._symbolic_arange(start, stop, step, dtype, device)
        if step == 0:
            raise ArgumentError("arange: step must not be zero")
        n = max(0, math.ceil((stop - start) / step))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        idx = Tensor._iota(n, device)
        if start == 0 and step == 1:
            return idx.cast(dt)
        compute = dt if dtypes.is_float(dt) else dtypes.int64 if dt == dtypes.int64 else dtypes.int32
        return (idx.cast(compute) * step + start).cast(dt)

    @staticmethod
    def _symbolic_arange(start: Any, stop: Any, step: Any, dtype: DType | str | None, device: str | None) -> Tensor:
        """arange with a bound Variable in start or stop: a symbolic length; integers and a constant step only."""
        if not all(isinstance(x, (int, UOp)) for x in (start, stop)) or type(step) is not int or step == 0:
            raise NotImplementedError("arange with a Variable takes integer start and stop and a nonzero int step")
        span = ssimplify(stop - start) if step > 0 else ssimplify(start - stop)
        n = ssimplify((span + abs(step) - 1) // abs(step)) if abs(step) != 1 else span
        if (known := sym_known(span)) is not None and known < 0:
            raise ArgumentError(f"arange: the range from {start!r} to {stop!r} by {step} is empty or reversed")
        idx = Tensor._iota(n, device)
        out = idx if step == 1 else idx * step
        out = out if isinstance(start, int) and start == 0 else out + start
        return out.cast(to_dtype(dtype) if dtype is not None else dtypes.default_int)

    @staticmethod
    def linspace(
        start: float, stop: float, steps: int, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        if isinstance(steps, bool) or not hasattr(steps, "__index__"):
            raise TypeError(f"linspace: steps must be an int, got {steps!r}")
        steps = steps.__index__()
        if steps < 0:
            raise ArgumentError(f"linspace: number of steps must be non-negative, got {steps}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt == dtypes.bool:
            raise ArgumentError("linspace cannot make a bool tensor")
        if steps == 1:
            return Tensor.full((1,), start, dtype=dt, device=device)
        step = (stop - start) / (steps - 1)
        return (
            Tensor.arange(steps, device=device).cast(dtypes.float32 if dt != dtypes.float64 else dt) * step + start
        ).cast(dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        m = n if m is None else m
        if (isinstance(n, int) and n < 0) or (isinstance(m, int) and m < 0):
            raise ArgumentError(f"eye: n and m must be non-negative, got n={n}, m={m}")
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)

    # *** random numbers: Threefry-2x32 on the device, keyed by (seed, per-call counter) ***

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Any int as torch takes (-2**63 .. 2**64 - 1): its 64 bits key the generator, so seeds that differ only above
        bit 31 draw different numbers."""
        if not -(2**63) <= int(seed) < 2**64:
            raise RuntimeError(f"Overflow when unpacking long: seed {seed} is out of the 64-bit range")
        with _rng_lock:
            Tensor._seed, Tensor._rng_counter = int(seed) & (2**64 - 1), 0

    @staticmethod
    def initial_seed() -> int:
        return Tensor._seed

    @staticmethod
    def seed() -> int:
        """A fresh seed from the operating system, set and returned (torch.seed)."""
        seed = int.from_bytes(os.urandom(8), "little") >> 1
        Tensor.manual_seed(seed)
        return seed

    @staticmethod
    def get_rng_state() -> Tensor:
        """The random state (seed, tensors drawn since) as an int64 tensor, for set_rng_state."""
        seed, counter = Tensor.rng_state()
        return Tensor([seed - 2**64 if seed >= 2**63 else seed, counter], dtype=dtypes.int64, device="CPU")

    @staticmethod
    def set_rng_state(state: Tensor) -> None:
        seed, counter = (int(v) for v in state.tolist())
        with _rng_lock:
            Tensor._seed, Tensor._rng_counter = seed & (2**64 - 1), counter

    @staticmethod
    def _random_bits(n: int, device: str | None) -> Tensor:
        """n uniformly random uint32s. Each call takes the next counter, so results never depend on realize order."""
        # the seed and the counter taken together: a manual_seed in another thread between the two paired the old
        # seed with a counter from 1 again, the numbers of a call made before
        with _rng_lock:
            seed, call = Tensor._seed, take_random_counters(1)
        half = (n + 1) // 2
        counter = Tensor._iota(half, device).cast(dtypes.uint32)
        k0 = dtypes.as_const(seed, dtypes.uint32)
        # the counter is read from a buffer of its own, not baked into the source: every call reuses the kernels,
        # and a TinyJit replay writes its own counter there (see random_counter_buffers)
        k1 = Tensor([call], dtype=dtypes.uint32, device=device)
        for u in k1.uop.toposort:  # one buffer; on several devices, the first one's, copied to the others
            if u.op is Ops.BUFFER:
                _rng_counter_buffers[u.arg] = call
        k1 = k1.reshape(())
        # the seed's high 32 bits as the second counter word (0 for seeds below 2**32: their streams are unchanged)
        y0, y1 = _threefry2x32(counter, counter.full_like(dtypes.as_const(seed >> 32, dtypes.uint32)), k0, k1)
        return y0.cat(y1)[:n]

    @staticmethod
    def rand(
        *shape: Any, dtype: DType | str | None = None, device: str | None = None, contiguous: bool = True
    ) -> Tensor:
        """Uniform in [0, 1). (contiguous: tinygrad's; the values are the same either way.)"""
        shape_ = Tensor._shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):
            raise TypeError(f"rand needs a float dtype, got {dt}")
        bits = Tensor._random_bits(prod(shape_), device)
        # 24 random bits make every float32 in [0, 1) with spacing 2**-24; a half gets as many bits as its significand
        # holds (11, bfloat16 8), so that the cast is exact and never rounds up to 1
        n = {dtypes.float16: 11, dtypes.bfloat16: 8}.get(dt, 24)
        unit = (bits >> (32 - n)).cast(dtypes.float32) * (1.0 / (1 << n))
        return unit.cast(dt).reshape(shape_)._fresh()

    @staticmethod
    def uniform(
        *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):  # integers uniform in [low, high), as tinygrad's
            return (Tensor.rand(*shape, device=device) * (high - low) + low).floor().cast(dt)
        return Tensor.rand(*shape, dtype=dt, device=device) * (high - low) + low

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Standard normal, by the Box-Muller transform of two uniforms."""
        shape_ = Tensor._shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        u = Tensor.rand(2, *shape_, dtype=dtypes.float32, device=device)
        u1, u2 = u[0], u[1]
        r = (1 - u1).log().mul(-2).sqrt()
        return (r * (u2 * (2 * math.pi)).cos()).cast(dt)

    @staticmethod
    def normal(
        *shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        if isinstance(std, (int, float)) and not std >= 0:
            raise ArgumentError(f"normal: std must be >= 0, got {std}")
        return Tensor.randn(*shape, dtype=dtype, device=device) * std + mean

    @staticmethod
    def randint(
        *shape: Any,
        low: int = 0,
        high: int = 10,
        dtype: DType | str | None = None,
        device: str | None = None,
        size: Any = None,
    ) -> Tensor:
        """tinygrad's randint(*shape, low=, high=) (int32), and torch's randint(high, size) / randint(low, high, size)
        (int64 unless dtype says)."""
        if size is not None or (shape and isinstance(shape[-1], (tuple, list)) and 2 <= len(shape) <= 3):
            bounds, size = (shape, size) if size is not None else (shape[:-1], shape[-1])
            if len(bounds) not in (1, 2) or not all(isinstance(b, int) for b in bounds):
                raise TypeError(f"randint(low, high, size): got {shape} and size={size}")
            low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
            shape, dtype = tuple(size), dtypes.int64 if dtype is None else dtype
        dtype = dtypes.int32 if dtype is None else dtype
        if not isinstance(low, int) or not isinstance(high, int):
            raise TypeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
        if not dtypes.is_int(to_dtype(dtype)):
            raise TypeError(f"randint makes integers, not {to_dtype(dtype)}")
        if high <= low:
            raise ArgumentError(f"randint: high ({high}) must be greater than low ({low})")
        shape_ = Tensor._shape_arg(shape)
        bits = Tensor._random_bits(prod(shape_), device).cast(dtypes.uint64)
        return ((bits * (high - low)) >> 32).cast(dtypes.int64).add(low).cast(to_dtype(dtype)).reshape(shape_)._fresh()

    @staticmethod
    def scaled_uniform(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """U(-1, 1) / sqrt(numel) (tinygrad's)."""
        shape_ = Tensor._shape_arg(shape)
        return Tensor.uniform(*shape_, low=-1.0, high=1.0, dtype=dtype, device=device) * prod(shape_) ** -0.5

    @staticmethod
    def glorot_uniform(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))): Glorot & Bengio's, as tinygrad lays out fans."""
        shape_ = Tensor._shape_arg(shape)
        bound = math.sqrt(6 / max(1, shape_[0] + prod(shape_[1:]))) if shape_ else 1.0
        return Tensor.uniform(*shape_, low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def _kaiming_std(shape: tuple[int, ...], a: float) -> float:
        # fan_in is everything after the output dim, as torch's default mode="fan_in" for (out, in, *kernel)
        return math.sqrt(2.0 / (1 + a * a)) / math.sqrt(max(1, prod(shape[1:])))

    @staticmethod
    def kaiming_uniform(
        *shape: Any, a: float = 0.01, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        shape_ = Tensor._shape_arg(shape)
        bound = math.sqrt(3.0) * Tensor._kaiming_std(shape_, a)
        return Tensor.uniform(*shape_, low=-bound, high=bound, dtype=dtype, device=device)

    @staticmethod
    def kaiming_normal(
        *shape: Any, a: float = 0.01, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        shape_ = Tensor._shape_arg(shape)
        return Tensor.normal(*shape_, mean=0.0, std=Tensor._kaiming_std(shape_, a), dtype=dtype, device=device)

    @staticmethod
    def randperm(n: int, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """A random permutation of 0..n-1: the stable argsort of n uniforms (O(n^2) compares, as sort)."""
        if n < 0:
            raise ValueError(f"randperm: n must be non-negative, got {n}")
        perm = Tensor.rand(n, device=device).argsort()
        return perm if dtype is None else perm.cast(to_dtype(dtype))

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """Indices drawn from the categories of the last dim with probability proportional to self's weights, as
        torch.multinomial (in the default int, as every index-returning op). With replacement: the inverse of the
        cumulative distribution at uniforms; without: the top num_samples of log(weight) + Gumbel noise, which draws
        one after another without putting back."""
        if self.ndim not in (1, 2):
            raise ArgumentError(f"multinomial needs a 1-D or 2-D tensor of weights, got shape {self.shape}")
        if num_samples <= 0:
            raise ArgumentError(f"multinomial: cannot draw {num_samples} samples")
        if not replacement and num_samples > self.shape[-1]:
            raise ArgumentError(
                f"multinomial: cannot draw {num_samples} samples from {self.shape[-1]} categories without replacement"
            )
        w = self.float() if self.ndim == 2 else self.float().unsqueeze(0)
        rows, n = w.shape
        if replacement:
            cdf = w.cumsum(1) / w.sum(1, keepdim=True)
            u = Tensor.rand(rows, num_samples, 1, device=self.device)
            # a uniform past the last rounded cdf value would count n: clamp to the last category
            idx = (u >= cdf.unsqueeze(1)).sum(-1).minimum(n - 1)
        else:
            gumbel = -(-(Tensor.rand(rows, n, device=self.device).clamp(min_=1e-12)).log()).log()
            keys = (w > 0).where(w.log() + gumbel, -math.inf)
            idx = keys.topk(num_samples, dim=1)[1]
        idx = idx.cast(dtypes.default_int)
        return idx if self.ndim == 2 else idx.squeeze(0)

    def rand_like(self, dtype: DType | str | None = None, *, device: str | None = None) -> Tensor:
        return Tensor.rand(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    def randn_like(self, dtype: DType | str | None = None, *, device: str | None = None) -> Tensor:
        return Tensor.randn(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    # *** movement: views, never copies ***

    def _fresh(self) -> Tensor:
        """This tensor as one that owns its (lazy) values: what a factory returns is no view of its temporaries."""
        self._view_of = None
        return self

    def _movement(self, op: Ops, arg: Any) -> Tensor:
        if self._view_of is not None:
            _follow_base(self)
        out = _result(UOp(op, self.uop.dtype, (self.uop,), arg))
        if op not in (Ops.PAD, Ops.FLIP):
            # torch's flip and pad copy: their results own their (lazy) values
            out._view_of = self._view_of or (self, self.uop)
        return out

    def reshape(self, *shape: Any) -> Tensor:
        size = self.uop.shape
        key = _view_key(_RESHAPE, size, shape)
        if key is not None and (checked := _checked_views.get(key)) is not None:
            return self if checked == size else self._movement(_RESHAPE, checked)
        new = list(argfix(*shape))
        # None keeps that dim's size, as tinygrad's reshape
        new = [self.shape[i] if s is None and i < self.ndim else s for i, s in enumerate(new)]
        if new.count(-1) > 1:
            raise ArgumentError(f"reshape {tuple(new)}: only one dimension can be -1")
        for s in new:
            if not (isinstance(s, UOp) and dtypes.is_int(s.dtype)) and (not isinstance(s, int) or s < -1):
                raise ArgumentError(f"reshape {tuple(new)}: dimensions must be non-negative ints or one -1")
        if any(isinstance(s, UOp) for s in (*new, *self.shape)):
            return self._symbolic_reshape(new)
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise ArgumentError(f"cannot reshape tensor of shape {self.shape} to {tuple(new)}")
            new[new.index(-1)] = self.numel() // known
        shape_ = tuple(new)
        if prod(shape_) != self.numel():
            raise ArgumentError(
                f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) "
                f"to {shape_} ({prod(shape_)} elements)"
            )
        if key is not None:
            _check_once(key, shape_)
        return self if shape_ == self.shape else self._movement(Ops.RESHAPE, shape_)

    def _symbolic_reshape(self, new: list[Any]) -> Tensor:
        """reshape where a size is symbolic: a -1 is what is left of the old sizes once the sizes the new shape
        names are taken out of them (the same symbolic size cancels), and the sizes must agree at the bound values."""
        if any(type(s) is int and s == -1 for s in new):
            rest = [s for s in self.shape]
            named = []
            for s in new:
                if type(s) is int and s == -1:
                    continue
                if any(r is s for r in rest):
                    rest.pop(next(i for i, r in enumerate(rest) if r is s))
                else:
                    named.append(s)
            left, right = ssimplify(prod(rest)), ssimplify(prod(named))
            if type(left) is int and type(right) is int:
                if right == 0 or left % right:
                    raise ArgumentError(f"cannot reshape tensor of shape {self.shape} to {tuple(new)}")
                fill = left // right
            else:
                fill = ssimplify(left // right)
            new[next(i for i, s in enumerate(new) if type(s) is int and s == -1)] = fill
        shape_ = tuple(new)
        before, after = sym_known(prod(self.shape)), sym_known(prod(shape_))
        if before is not None and after is not None and before != after:
            raise ArgumentError(
                f"cannot reshape tensor of shape {self.shape} ({before} elements) to {shape_} ({after} elements)"
            )
        return self if shape_ == self.shape else self._movement(Ops.RESHAPE, shape_)

    def view(self, *shape: Any) -> Tensor:
        return self.reshape(*shape)

    def permute(self, *order: Any) -> Tensor:
        ndim = len(self.uop.shape)
        key = _view_key(Ops.PERMUTE, ndim, order)
        if key is not None and (checked := _checked_views.get(key)) is not None:
            return self if checked == tuple(range(ndim)) else self._movement(Ops.PERMUTE, checked)
        order_ = argfix(*order)
        if len(order_) != self.ndim:
            raise ArgumentError(f"permute {order_} must name all {self.ndim} dimensions of shape {self.shape}")
        if any(not -self.ndim <= o < max(self.ndim, 1) for o in order_):
            raise IndexError(f"permute {order_}: a dimension is out of range for shape {self.shape}")
        norm = tuple(o % self.ndim if self.ndim else 0 for o in order_)
        if sorted(norm) != list(range(self.ndim)):
            raise ArgumentError(f"permute {order_} is not a permutation of the dimensions of shape {self.shape}")
        if key is not None:
            _check_once(key, norm)
        return self if norm == tuple(range(self.ndim)) else self._movement(Ops.PERMUTE, norm)

    def expand(self, *shape: Any) -> Tensor:
        new = argfix(*shape)
        if len(new) < self.ndim:
            raise ArgumentError(f"cannot expand shape {self.shape} to {new}: fewer dimensions")
        old = (1,) * (len(new) - self.ndim) + self.shape
        target = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, target):
            if o != n and o != 1:
                raise ArgumentError(f"cannot expand shape {self.shape} to {new}: only size-1 dimensions can grow")
        x = self.reshape(old) if old != self.shape else self
        return x if target == x.shape else x._movement(Ops.EXPAND, target)

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        if len(arg) != self.ndim:
            raise ArgumentError(f"shrink needs one (start, end) per dimension of shape {self.shape}, got {arg}")
        bounds = tuple((0, s) if a is None else (_size_arg(a[0]), _size_arg(a[1])) for a, s in zip(arg, self.shape))
        for (lo, hi), s in zip(bounds, self.shape):
            if any(isinstance(x, UOp) for x in (lo, hi, s)):
                # symbolic: checked at the bound values (an unbound variable is only known by its range)
                lo, hi, s = sym_known(lo), sym_known(hi), sym_known(s)
                if None in (lo, hi, s):
                    continue
            if not 0 <= lo <= hi <= s:
                raise ArgumentError(f"shrink {bounds} is out of bounds for shape {self.shape}")
        return self if all(b == (0, s) for b, s in zip(bounds, self.shape)) else self._movement(Ops.SHRINK, bounds)

    def pad(self, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Tensor:
        """Per-dimension ((before, after), ...) or None, or torch style flat (last_lo, last_hi, prev_lo, ...).
        mode: 'constant' (value), 'reflect', 'replicate' or 'circular', as torch's F.pad."""
        per_dim = _pad_pairs(self, padding)
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise _UnknownModeError(f"pad mode must be 'constant', 'reflect', 'replicate' or 'circular', not {mode!r}")
        if any(isinstance(p, UOp) for pair in per_dim for p in pair):
            return self._symbolic_pad(per_dim, mode, value)
        if mode == "circular" and any(lo < 0 or hi < 0 for lo, hi in per_dim):
            # torch's result there reads memory outside the tensor: no answer to match
            raise NotImplementedError(f"pad mode 'circular' does not take negative padding, got {padding}")
        if mode != "constant":
            # torch's out[i] = in[f(i - lo)]: pad by the positive parts, then crop by the negative ones
            out = self._pad_mode([(max(lo, 0), max(hi, 0)) for lo, hi in per_dim], mode)
            if any(lo < 0 or hi < 0 for lo, hi in per_dim):
                out = out.shrink([(-min(lo, 0), s + min(hi, 0)) for (lo, hi), s in zip(per_dim, out.shape)])
            return out
        # negative padding crops
        x = self
        if any(lo < 0 or hi < 0 for lo, hi in per_dim):
            x = x.shrink([(-min(lo, 0), s + min(hi, 0)) for (lo, hi), s in zip(per_dim, self.shape)])
            per_dim = [(max(lo, 0), max(hi, 0)) for lo, hi in per_dim]
        if all(p == (0, 0) for p in per_dim):
            return x
        padded = x._movement(Ops.PAD, tuple(per_dim))
        if value == 0:
            return padded
        inside = Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device)._movement(Ops.PAD, tuple(per_dim))
        return inside.where(padded, value)

    def _symbolic_pad(self, per_dim: list[tuple[Any, Any]], mode: str, value: float) -> Tensor:
        """Constant padding by symbolic amounts (bound Variables), which must not be negative."""
        if mode != "constant":
            raise NotImplementedError(f"pad mode {mode!r} takes int amounts; a Variable pads in 'constant' mode")
        if any((k := sym_known(p)) is not None and k < 0 for pair in per_dim for p in pair):
            raise ArgumentError(f"symbolic padding {per_dim} must not be negative")
        padded = self._movement(Ops.PAD, tuple(per_dim))
        if value == 0:
            return padded
        inside = Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device)._movement(Ops.PAD, tuple(per_dim))
        return inside.where(padded, value)

    def flip(self, axis: int | Sequence[int] | None = None, *more: int, dims: Any = None) -> Tensor:
        if dims is not None:  # torch's name
            axis = dims
        if more:  # x.flip(0, 1), as tinygrad and torch take the axes one by one too
            axis = (axis, *more)
        if axis is None:
            raise TypeError("flip() missing the axes to flip (axis, or torch's dims=)")
        axes = _axes(axis, self.ndim)
        return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else _new_value(self)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        a, b = _dim(dim0, self.ndim), _dim(dim1, self.ndim)
        if self.ndim == 0:
            return self
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(range(self.ndim))[::-1])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        s, e = _dim(start_dim, self.ndim), _dim(end_dim, self.ndim)
        if self.ndim == 0:
            return self.reshape(1)
        if s > e:
            raise ArgumentError(
                f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for a tensor of shape {self.shape}"
            )
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        d = _axes(dim, self.ndim)[0]
        sizes = list(sizes)
        if sizes.count(-1) == 1:
            # -1 is inferred within the dim (also when another dim makes the tensor empty)
            known = prod(s for s in sizes if s != -1)
            if known == 0 or self.shape[d] % known:
                raise ArgumentError(f"unflatten: sizes {tuple(sizes)} do not divide dim {d} of size {self.shape[d]}")
            sizes[sizes.index(-1)] = self.shape[d] // known
        if prod(sizes) != self.shape[d]:
            raise ArgumentError(
                f"unflatten: sizes {tuple(sizes)} do not multiply to {self.shape[d]}, the size of dim {d}"
            )
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1 :])

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        axes = _axes(dim, self.ndim) if dim is not None else tuple(i for i, s in enumerate(self.shape) if s == 1)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in axes and s == 1)))

    def unsqueeze(self, dim: int) -> Tensor:
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(
                f"unsqueeze dim {dim} is out of range [{-self.ndim - 1}, {self.ndim}] "
                f"for a tensor with {self.ndim} dimensions"
            )
        d = _axes(dim, self.ndim + 1)[0]
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def repeat(self, *repeats: Any) -> Tensor:
        reps = argfix(*repeats)
        if len(reps) < self.ndim:
            raise ArgumentError(f"repeat {reps} needs at least one count per dimension of shape {self.shape}")
        if any(type(r) is int and r < 0 for r in reps):
            raise ArgumentError(f"repeat {reps}: counts must not be negative")
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter = [d for s in x.shape for d in (1, s)]
        expanded = [d for r, s in zip(reps, x.shape) for d in (r, s)]
        out = x.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(reps, x.shape)))
        return self.clone() if out is self else out._fresh()  # a copy, as torch's: no view of self

    def cat(self: Tensor | Sequence[Tensor], *others: Any, dim: int = 0) -> Tensor:
        if not isinstance(self, Tensor):  # Tensor.cat([a, b], dim) or Tensor.cat((a, b), 1), as torch.cat
            if len(others) > 1 or (others and not isinstance(others[0], int)):
                raise ArgumentError("cat takes the tensors as one sequence (and a dim) or as separate arguments")
            dim = others[0] if others else dim
            seq = list(self)
            if not seq:
                raise ArgumentError("cat expects a non-empty sequence of tensors")
            self, others = seq[0], tuple(seq[1:])
        tensors = [self, *others]
        if any(t.ndim == 0 for t in tensors):
            raise _NoDimError(f"cat: a 0-d tensor cannot be concatenated (shapes {[x.shape for x in tensors]})")
        d = _axes(dim, self.ndim)[0]
        for t in tensors:
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
                raise ArgumentError(f"cat along dim {d}: shapes {[x.shape for x in tensors]} differ outside that dim")
        total = sum(t.shape[d] for t in tensors)
        parts, start = [], 0
        for t in tensors:
            pads = [(0, 0)] * self.ndim
            pads[d] = (start, total - start - t.shape[d])
            start += t.shape[d]
            parts.append(t.pad(pads))
        # summed pairwise: a graph log2(n) deep, not n (a cat of thousands of tensors), with subtrees of neighbouring
        # parts that the scheduler can store when one kernel would read more buffers than its device takes
        while len(parts) > 1:
            parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
        return parts[0]

    def stack(self: Tensor | Sequence[Tensor], *others: Tensor, dim: int = 0) -> Tensor:
        if not isinstance(self, Tensor):  # Tensor.stack((a, b, c), dim=...), as torch.stack
            if others:
                raise ArgumentError("stack takes the tensors as one sequence or as separate arguments, not both")
            if not self:
                raise ArgumentError("stack needs at least one tensor")
            self, others = self[0], tuple(self[1:])
        if any(t.shape != self.shape for t in others):
            raise ArgumentError(f"stack needs tensors of one shape, got {[self.shape, *[t.shape for t in others]]}")
        d = _axes(dim, self.ndim + 1)[0]
        return self.unsqueeze(d).cat(*[t.unsqueeze(d) for t in others], dim=d)

    def contiguous(self, memory_format: Any = None) -> Tensor:
        """(torch's memory_format is taken: lazygrad has one layout, row-major; a value reads the same in every one)"""
        if self._view_of is not None:
            _follow_base(self)
        if self._is_stored():
            return self
        return _result(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def to(self, device: Any = None, *args: Any, **kwargs: Any) -> Tensor:
        """This tensor on `device` (a copy between devices, made when realized; the same tensor if already there).
        torch's other forms too: `to(dtype)`, `to(device, dtype)`, `to(other_tensor)` (its device and dtype),
        `to(device=..., dtype=..., non_blocking=..., copy=...)`."""
        if args or kwargs or not (device is None or isinstance(device, (str, tuple))) or _is_dtype_name(device):
            return self._to_torch_form(device, *args, **kwargs)
        return self._to_device(device)

    def _to_torch_form(self, *args: Any, **kwargs: Any) -> Tensor:
        device, dtype, copy = to_arguments(*args, **kwargs)
        out = self if dtype is None else self.cast(dtype)
        out = out if device is None else out._to_device(device)
        return out.clone() if copy and out is self else out

    def _to_device(self, device: str | tuple | None) -> Tensor:
        device = Device.canonicalize(device)
        if device == self.device:
            return self
        if isinstance(device, tuple):
            return self.shard(device)
        _check_dtype("to", self.dtype, device)
        if self._on_disk:
            return self._disk_copy_to(device)
        src = self.contiguous()  # a copy moves whole buffers: a view is made contiguous on its own device first
        return _result(UOp(Ops.COPY, self.dtype, (src.uop,), device))

    # *** multi-device: the lowering to one graph per device is lazygrad/schedule/multi.py ***

    def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor over several devices: split along `axis` (ceil(n / len(devices)) rows per device, the last
        parts shorter or empty), or a full replica on each for axis None. Ops on it run on every device; `.device`
        is the tuple of devices; `.to(device)` gathers it."""
        if isinstance(devices, str) or not devices:
            raise ArgumentError(f"shard takes a tuple of devices, not {devices!r}")
        devs = Device.canonicalize(tuple(devices))
        if axis is not None and self.ndim == 0:
            raise IndexError(f"cannot split a 0-d tensor along axis {axis}; shard it with axis=None")
        d = None if axis is None else _axes(axis, self.ndim)[0]
        if isinstance(self.device, tuple):  # already sharded: as it is, or gathered and split anew
            same = self.uop.op is Ops.MULTI and (self.device, self.uop.arg) == (devs, d)
            return self if same else self.to(self.device[0]).shard(devs, axis)
        _check_dtype("shard", self.dtype, devs)
        bounds = split_bounds(self.shape[d], len(devs)) if d is not None else [None] * len(devs)
        parts = []
        for dev, b in zip(devs, bounds):
            part = self if b is None else self.shrink(tuple(b if i == d else None for i in range(self.ndim)))
            parts.append((part.contiguous() if dev == self.device else part.to(dev)).uop)
        return Tensor(multi(parts, d))

    def shard_like(self, y: Tensor) -> Tensor:
        """This tensor placed as `y` is: on y's device, or sharded over y's devices along y's axis."""
        if isinstance(y.device, str):
            return self.to(y.device)
        m = y.uop if y.uop.op is Ops.MULTI else lower_multi([y.uop], _realized)[0][0]  # a lazy y: its lowered axis
        return self.shard(y.device, m.arg if m.op is Ops.MULTI else None)

    def contiguous_backward(self) -> Tensor:
        """tinygrad's hint that the gradient flowing back through here be made contiguous. Values and gradients are
        this tensor's; the scheduler here places gradient stores itself, so the hint changes nothing."""
        return self

    def shard_(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """shard in place: this tensor object becomes the sharded one (parameters keep their identity)."""
        self.uop = self.shard(devices, axis).uop
        _note_lazy(self)
        return self

    def to_(self, device: str | None) -> Tensor:
        """Move this tensor to `device` in place (tinygrad's): it becomes its copy there."""
        self.uop = self.to(device).uop
        _note_lazy(self)
        return self

    # *** DISK tensors (runtime/ops_disk.py): copies in and out, no compute ***

    def _disk_range(self) -> tuple[Tensor, Buffer | None]:
        """This DISK tensor's realized base, and a buffer of exactly this tensor's elements where the tensor is one
        contiguous range of the base (a slice along the first dims, a reshape), else None."""
        base = Tensor(self.uop.base).realize()
        buf = base._plain_buffer()
        assert buf is not None, "a realized DISK tensor is a whole buffer"
        chain = []
        u = self.uop
        while u.op in GroupOp.Movement:
            chain.append(u)
            u = u.src[0]
        st = ShapeTracker.from_shape(base.shape)
        for m in reversed(chain):
            st = st.apply(m.op, m.arg)
        v = st.views[-1]
        if len(st.views) != 1 or v.mask is not None or v.strides != strides_for_shape(v.shape):
            return base, None
        if v.offset == 0 and self.numel() == buf.size:
            return base, buf
        ptr = buf.ptr + v.offset * buf.dtype.itemsize
        return base, Buffer(buf.device, self.numel(), buf.dtype, external=buf, external_ptr=ptr, shape=self.shape)

    def _disk_copy_to(self, device: str) -> Tensor:
        base, rng = self._disk_range()
        if rng is not None:
            return _result(UOp(Ops.COPY, self.dtype, (UOp.buffer_view(rng, self.shape),), device))
        # a strided view (a permute, a step): copy the whole file's buffer and take the view on the compute device
        return Tensor(self.uop.rebase(_result(UOp(Ops.COPY, self.dtype, (base.uop,), device)).uop))

    def _disk_write(self, x: Any) -> Tensor:
        """assign into a DISK tensor: the value is computed and written into the file now, as tinygrad does."""
        x = x if isinstance(x, Tensor) else Tensor.full(self.shape, x, dtype=self.dtype)
        if x.shape != self.shape or x.dtype != self.dtype:
            raise ArgumentError(
                f"assign needs the same shape and dtype: target {self.shape} {self.dtype}, value {x.shape} {x.dtype}"
            )
        _, rng = self._disk_range()
        if rng is None:
            raise ArgumentError(
                f"a write into a DISK tensor needs one contiguous range of its file, not a view {self.uop.op}"
            )
        if rng.size:
            rng.copyin(x._raw_data())
        return self

    def detach(self) -> Tensor:
        # (a numbered detach is a leaf's own node: a detached copy of it is a node of another tensor)
        same = self.uop.op is Ops.DETACH and self.uop.arg is None
        out = _result(self.uop if same else UOp(Ops.DETACH, self.dtype, (self.uop,)))
        out._view_of = self._view_of or (self, self.uop)  # shares the memory, as torch's detach does
        return out

    def detach_(self) -> Tensor:
        """detach in place (torch's): this tensor leaves the autograd graph and stops requiring a gradient; its
        memory and value are the same. A view raises, as torch's: detach() it instead."""
        if self._view_of is not None:
            raise RuntimeError("detach_ cannot detach a view in place: use detach() instead")
        if self.uop.op not in (Ops.BUFFER, Ops.DETACH):  # (a leaf's buffer: only the flag changes)
            self.uop = UOp(Ops.DETACH, self.dtype, (self.uop,))
            _note_lazy(self)
        self.requires_grad = False
        return self

    def __getitem__(self, index: Any) -> Tensor:
        return _getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        """Write value at self[index] in place (lazily: at the next realize), for every index form __getitem__ takes."""
        _check_inplace_allowed(self)
        if self._on_disk:
            self[index].assign(value)
            return
        v = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype, device=self.device)
        if v._view_of is not None:
            _follow_base(v)
        v = _apart_from(v.cast(self.dtype), self if self._view_of is None else self._view_of[0])
        hit, vals = _setitem_parts(self, index, v)
        if self._view_of is not None:
            self._write_through(hit, vals)
        else:
            self.assign(hit.where(vals, self) if hit is not None else vals)

    def __delitem__(self, index: Any) -> None:
        raise TypeError("Tensor does not support deleting items")  # torch's error (without this: an AttributeError)

    def _write_through(self, hit: Tensor | None, vals: Tensor) -> Tensor:
        """Write vals where hit (None: everywhere) into the memory this view shows, as torch does: the tensor it is a
        view of gets the write (in place if realized, else in its lazy graph), and this view reads the result."""
        base, at = self._view_of  # type: ignore[misc]
        vals = _apart_from(vals, base)
        chain = _view_chain(self.uop, at)
        if any(u.op is Ops.EXPAND and u.shape != u.src[0].shape for u in chain):
            _refuse_overlapping_write(
                hit if hit is not None else Tensor.full(self.shape, True, device=self.device), chain
            )
            if hit is not None:
                vals = hit.where(vals, 0)  # an expand is undone by a sum over its copies: only the written one counts
        for u in reversed(chain):
            hit, vals = _unview(u, hit), _unview(u, vals)
        assert hit is None or hit.shape == base.shape, "a view's chain leads back to its base's shape"
        base.assign(vals if hit is None else hit.where(vals, base))
        node = base.uop
        for u in chain:
            node = UOp(u.op, u.dtype, (node,), u.arg)
        self.uop, self._view_of = node, (base, base.uop)
        return self

    # *** indexing by tensors: one-hot compares with an arange, reduced; they fuse into one kernel per op ***

    def _hits(self, d: int, index: Tensor) -> Tensor:
        """Bool index.shape with self.shape[d] inserted at d + 1: true where index (negative counts from the end) is
        that position. The index is expanded before any arithmetic, so the compare fuses into the kernel using it."""
        n = self.shape[d]
        idx = index.unsqueeze(d + 1)
        idx = idx.expand(*idx.shape[: d + 1], n, *idx.shape[d + 2 :])
        if not dtypes.is_unsigned(idx.dtype):
            idx = (idx < 0).where(idx + n, idx)
        return idx == Tensor.arange(n, device=self.device).reshape((n,) + (1,) * (self.ndim - d - 1))

    def _dim_index(self, dim: int, index: Tensor, name: str) -> tuple[int, Tensor]:
        d = _dim(dim, self.ndim)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            got = getattr(index, "dtype", type(index).__name__)
            raise DTypeError(f"{name}: index must be an integer tensor, got {got}")
        if index.ndim != self.ndim:
            raise ArgumentError(
                f"{name}: index shape {index.shape} needs as many dims as the tensor's shape {self.shape}"
            )
        if any(i != d and si > sx for i, (si, sx) in enumerate(zip(index.shape, self.shape))):
            raise ArgumentError(f"{name}: index shape {index.shape} is larger than shape {self.shape} outside dim {d}")
        if self.ndim:
            _check_index_values(index, 0, self.shape[d], "{} along dim {} of shape {}", name, d, self.shape)
        return d, index

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[..., j, ...] = self[..., index[..., j, ...], ...] along dim (torch.gather)."""
        d, index = self._dim_index(dim, index, "gather")
        x = self.shrink([None if i == d else (0, s) for i, s in enumerate(index.shape)])
        return _pick(x.unsqueeze(d), self._hits(d, index), (d + 1,))

    def _scatter_hits(self, dim: int, index: Tensor, src: Any, name: str) -> tuple[int, Tensor, Tensor]:
        """(dim, hit, src): hit[..., j, p, ...] is true where index[..., j, ...] == p; src gets a dim at d + 1."""
        d, index = self._dim_index(dim, index, name)
        if any(i > s for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d):
            raise ArgumentError(f"{name}: index shape {index.shape} exceeds self's shape {self.shape} outside dim {d}")
        if isinstance(src, Tensor):
            if src.dtype != self.dtype:
                raise ArgumentError(f"{name}: self's dtype {self.dtype} and src's dtype {src.dtype} differ")
            if src.ndim != index.ndim or any(a < b for a, b in zip(src.shape, index.shape)):
                raise ArgumentError(f"{name}: src shape {src.shape} must be at least the index shape {index.shape}")
            src = src.cast(self.dtype).shrink([(0, s) for s in index.shape])
        else:
            src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
        return d, self._hits(d, index), src.unsqueeze(d + 1)

    def _pad_to_self(self, x: Tensor, value: Any = 0) -> Tensor:
        return x.pad([(0, s - xs) for s, xs in zip(self.shape, x.shape)], value=value)

    def scatter(self, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
        """self with src[..., j, ...] written at index[..., j, ...] along dim; a repeated index: the last write wins.
        reduce='add' / 'multiply' combine with the old value instead (torch's legacy form of scatter_reduce)."""
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', not {reduce!r}")
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
        d, hit, src = self._scatter_hits(dim, index, src, "scatter")
        if index.numel() == 0:
            return self.clone()  # nothing written
        j = Tensor.arange(hit.shape[d], device=self.device).reshape((-1,) + (1,) * (hit.ndim - d - 1))
        last = hit.where(j, -1).max(d, keepdim=True)
        vals = _last_write(_pick(src, hit & (j == last), (d,)), src, hit, (d,))
        return self._pad_to_self(last.squeeze(d) >= 0).where(self._pad_to_self(vals), self)

    def scatter_reduce(self, dim: int, index: Tensor, src: Any, reduce: str, include_self: bool = True) -> Tensor:
        """Combine src into self at index along dim with reduce in {'sum', 'prod', 'mean', 'amax', 'amin'}."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ArgumentError(
                f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', not {reduce!r}"
            )
        d, hit, src = self._scatter_hits(dim, index, src, "scatter_reduce")
        count = self._pad_to_self(hit.sum(d, dtype=dtypes.int32))
        if reduce in ("sum", "mean"):
            part = self._pad_to_self(_pick(src, hit, (d,)))
            total = self + part if include_self else part
            if reduce == "sum":
                out = total
            else:
                n = count + 1 if include_self else count
                out = total / n.maximum(1) if dtypes.is_float(self.dtype) else total.floordiv(n.maximum(1))
        elif reduce == "prod":
            part = self._pad_to_self(hit.where(src, 1).prod(d, dtype=self.dtype), 1)
            out = self * part if include_self else part
        else:
            lowest = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
            s = src if reduce == "amax" else -src if dtypes.is_float(self.dtype) else ~src
            x = self if reduce == "amax" else -self if dtypes.is_float(self.dtype) else ~self
            # self joins the candidates of one max, so that tied maxima share the gradient evenly, as in torch
            cand = hit.where(s, lowest)
            target = self.shape[:d] + (cand.shape[d],) + self.shape[d:]
            cand = cand.pad([(0, t - c) for t, c in zip(target, cand.shape)], value=lowest)
            out = (cand.cat(x.unsqueeze(d), dim=d) if include_self else cand).max(d)
            out = out if reduce == "amax" else -out if dtypes.is_float(self.dtype) else ~out
        return (count > 0).where(out, self)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return self.scatter_reduce(dim, index, src, "sum")

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        d = _axes(dim, self.ndim)[0]
        if index.ndim > 1:
            raise IndexShapeError(f"index_select: index must be 0-d or 1-d, got shape {index.shape}")
        if not dtypes.is_int(index.dtype):
            raise DTypeError(f"index_select: index must be an integer tensor, got {index.dtype}")
        if index.ndim == 0:
            return self[(slice(None),) * d + (index.reshape(1),)]
        return self[(slice(None),) * d + (index,)]

    def masked_select(self, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
        """The elements where mask is true, flattened. The count is read from the device (as torch does) unless
        `size` fixes the length (tinygrad's): the first `size` selected, then `fill_value`; no device read."""
        if mask.dtype != dtypes.bool:
            raise TypeError(f"masked_select: mask must be a bool tensor, got {mask.dtype}")
        shape = _broadcast_shape(self.shape, mask.shape)
        flat, keep = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
        picked = _pick(flat.reshape(1, -1), keep._select_rows(size), (1,))
        return picked if size is None else keep._fill_beyond_count(picked, fill_value)

    def _select_rows(self, n: int | None = None) -> Tensor:
        """For a 1-d bool tensor: bool (n, len), row j true at the position of the j-th true. n defaults to the count
        of trues (read from the device); rows past the count are all false."""
        if n is None:
            n = int(self.sum().item())
        elif n < 0:
            raise ValueError(f"size must be non-negative, got {n}")
        rank = self.cast(dtypes.int32).cumsum() - 1
        return self.reshape(1, -1) & (rank.reshape(1, -1) == Tensor.arange(n, device=self.device).reshape(-1, 1))

    def _fill_beyond_count(self, picked: Tensor, fill_value: Any) -> Tensor:
        """picked (size, ...) with the rows at and past the count of trues in self (1-d bool) set to fill_value."""
        n = picked.shape[0]
        valid = Tensor.arange(n, device=self.device) < self.cast(dtypes.int32).sum()
        return valid.reshape((n,) + (1,) * (picked.ndim - 1)).where(picked, fill_value).cast(picked.dtype)

    def nonzero(
        self, size: int | None = None, fill_value: Any = 0, *, as_tuple: bool = False
    ) -> Tensor | tuple[Tensor, ...]:
        """Coordinates of the nonzero elements, (count, ndim) default ints in row-major order, or one tensor per dim.
        With `size`, (size, ndim): the first `size` nonzeros, then rows of `fill_value` (no device read; tinygrad's)."""
        flat = (self != 0).flatten()
        pos = Tensor.arange(flat.numel(), device=self.device).reshape(1, -1)
        where = _pick(pos, flat._select_rows(size), (1,))
        # with a zero-size dim there is no coordinate to compute: 1 stands in for 0 (an integer division by 0 raises)
        strides = [max(prod(self.shape[d + 1 :]), 1) for d in range(self.ndim)]
        coords = [(where // st % max(s, 1)).cast(dtypes.default_int) for st, s in zip(strides, self.shape)]
        if size is not None:
            coords = [flat._fill_beyond_count(c, fill_value) for c in coords]
        if as_tuple:
            return tuple(coords)
        if not coords:
            return Tensor.zeros(where.shape[0], 0, dtype=dtypes.default_int, device=self.device)
        return Tensor.stack(*coords, dim=1)

    def _triangle(self, diagonal: int, upper: bool) -> Tensor:
        if self.ndim < 2:
            raise ArgumentError(f"tril/triu need at least 2 dims, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = Tensor.arange(r, device=self.device).reshape(r, 1) + diagonal
        cols = Tensor.arange(c, device=self.device).reshape(1, c)
        keep = rows <= cols if upper else rows >= cols
        return keep.where(self, self.zeros_like())

    def tril(self, diagonal: int = 0) -> Tensor:
        return self._triangle(diagonal, False)

    def triu(self, diagonal: int = 0) -> Tensor:
        return self._triangle(diagonal, True)

    def clone(self, device: str | tuple[str, ...] | None = None, *, memory_format: Any = None) -> Tensor:
        """A copy in memory of its own (on `device` if given), with `.grad` cloned along, as tinygrad's clone. Each
        clone is a node of its own (numbered in the arg), so two clones of one value are two tensors with a gradient
        each, as torch's (the hash-consed graph would otherwise make them one)."""
        if self._view_of is not None:
            _follow_base(self)  # a view copies its base as it is now, a pending write into it included
        src = self if device is None else self.to(device)
        out = _result(UOp(Ops.CONTIGUOUS, src.dtype, (src.uop,), next(_CLONE_IDS)))
        if self.grad is not None:
            out.grad = self.grad.clone(device)
        return out

    # *** shape ops built from views ***

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        if self.ndim == 0:
            raise _NoDimError("split expects at least a 1-d tensor, got a 0-d one")
        d = _axes(dim, self.ndim)[0]
        n = self.shape[d]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ArgumentError(f"split size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ArgumentError(f"split sizes {list(sizes)} must be non-negative and sum to {n}, the size of dim {d}")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(
            self.shrink([(st, st + s) if i == d else None for i in range(self.ndim)]) for st, s in zip(starts, sizes)
        )

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        if chunks <= 0:
            raise ArgumentError(f"chunk needs a positive number of chunks, got {chunks}")
        if self.ndim == 0:
            raise _NoDimError("chunk expects at least a 1-d tensor, got a 0-d one")
        d = _axes(dim, self.ndim)[0]
        return self.split(max(1, ceildiv(self.shape[d], chunks)), d)

    def repeat_interleave(self, repeats: int | Sequence[int] | Tensor, dim: int | None = None) -> Tensor:
        """Each element repeated `repeats` times along dim (flattened if None); per-element counts as a list or an
        integer tensor (their total is read from the device, as torch does)."""
        x, d = (self.flatten(), 0) if dim is None else (self, _axes(dim, self.ndim)[0])
        if isinstance(repeats, bool) or not isinstance(repeats, (int, list, tuple, Tensor)):
            raise TypeError(
                f"repeat_interleave: repeats must be an int, a list of ints or an integer tensor, not {repeats!r}"
            )
        if not isinstance(repeats, int):
            r = repeats if isinstance(repeats, Tensor) else Tensor(list(repeats), self.device, dtypes.int32)
            if not dtypes.is_int(r.dtype) or r.ndim > 1 or r.numel() not in (1, x.shape[d]):
                raise ArgumentError(
                    f"repeat_interleave: repeats of shape {r.shape} and dtype {r.dtype} must be integers, "
                    f"one per element along dim {d} (size {x.shape[d]}) or a single count"
                )
            if r.numel() == 1 and x.shape[d] != 1:
                return self.repeat_interleave(int(r.reshape(()).item()), dim)
            if not isinstance(repeats, Tensor) and any(v < 0 for v in repeats):
                raise ArgumentError(f"repeat_interleave: repeats must be non-negative, got {list(repeats)}")
            # output j comes from the element whose running total of counts first exceeds j
            total = int(r.sum().item())
            ends = r.reshape(-1).cumsum(0).reshape(1, -1)
            src = (ends <= Tensor.arange(total, device=self.device).reshape(-1, 1)).sum(1, dtype=dtypes.int32)
            return x.index_select(d, src)
        if repeats < 0:
            raise ArgumentError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        x = x.unsqueeze(d + 1)
        return x.expand(*x.shape[: d + 1], repeats, *x.shape[d + 2 :]).flatten(d, d + 1)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts_, dims_ = make_tuple(shifts, 1), make_tuple(dims, 1)
        if len(shifts_) != len(dims_):
            raise ArgumentError(f"roll: shifts {shifts_} and dims {dims_} need the same length")
        x = self
        for s, dim in zip(shifts_, dims_):
            d = _axes(dim, self.ndim)[0]
            n = x.shape[d]
            if n == 0 or s % n == 0:
                continue
            # two copies side by side; the rolled tensor is the window starting n - shift into them
            s %= n
            x = x.repeat([2 if i == d else 1 for i in range(x.ndim)])
            x = x.shrink([(n - s, 2 * n - s) if i == d else None for i in range(x.ndim)])
        return x

    def meshgrid(self, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', not {indexing!r}")
        ts = [t.flatten() for t in (self, *others)]
        shape = tuple(t.shape[0] for t in ts)
        grids = [t.reshape((1,) * i + (-1,) + (1,) * (len(ts) - i - 1)).expand(shape) for i, t in enumerate(ts)]
        # 'xy' (cartesian) is 'ij' with the first two dims swapped
        return tuple(g.transpose(0, 1) for g in grids) if indexing == "xy" and len(ts) > 1 else tuple(grids)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of dims (dim1, dim2) as the last dim, as a view: flatten, pad one, and take a column."""
        a, b = _axes(dim1, self.ndim)[0], _axes(dim2, self.ndim)[0]
        if a == b:
            raise ArgumentError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
        x = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
        r, c = x.shape[-2:]
        lead = [None] * (x.ndim - 2)
        r0, c0 = max(0, -offset), max(0, offset)
        m = max(0, min(r - r0, c - c0))
        x = x.shrink(lead + [(min(r0, r), min(r0, r) + m), (min(c0, c), min(c0, c) + m)])
        x = x.flatten(-2).pad(lead + [(0, m)]).reshape(*x.shape[:-2], m, m + 1)
        return x.shrink(lead + [None, (0, 1)]).reshape(*x.shape[:-2], m)

    def diag(self, diagonal: int = 0) -> Tensor:
        """1-d: the square matrix with self on a diagonal; 2-d: that diagonal."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ArgumentError(f"diag needs a 1-d or 2-d tensor, got shape {self.shape}")
        n, k = self.shape[0], abs(diagonal)
        x = self.reshape(n, 1).pad([None, (0, n)]).flatten().shrink([(0, n * n)]).reshape(n, n)
        return x.pad([(0, k), (k, 0)] if diagonal >= 0 else [(k, 0), (0, k)])

    def as_strided(self, size: Sequence[int], stride: Sequence[int], storage_offset: int = 0) -> Tensor:
        """torch's as_strided over the tensor's elements in row-major order (a contiguous tensor's storage, as torch
        reads it): element i of the result is flat[storage_offset + sum(i_d * stride_d)], a gather (its gradient adds
        back into every element read, overlapping windows too). A new tensor, not a view: writes do not reach self."""
        size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
        if len(size) != len(stride):
            raise ArgumentError(f"mismatch in length of strides and shape: {len(size)} sizes, {len(stride)} strides")
        if any(s < 0 for s in size) or any(s < 0 for s in stride) or storage_offset < 0:
            raise ArgumentError(f"as_strided: negative size, stride or offset in {size}, {stride}, {storage_offset}")
        n = self.numel()
        if prod(size) and (need := storage_offset + sum((z - 1) * s for z, s in zip(size, stride)) + 1) > n:
            item = self.dtype.itemsize
            raise ArgumentError(
                f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {storage_offset}, and "
                f"itemsize {item} requiring a storage size of {need * item} are out of bounds for storage of size "
                f"{n * item}"
            )
        if not size:
            return self.reshape(-1)[storage_offset]
        idx = Tensor.full(size, storage_offset, dtype=dtypes.int32, device=self.device)
        for d, (z, s) in enumerate(zip(size, stride)):
            idx = idx + (Tensor.arange(z, dtype=dtypes.int32, device=self.device) * s).reshape(
                *[1] * d, z, *[1] * (len(size) - d - 1)
            )
        return self.reshape(-1)[idx]

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """Every window of `size` along `dimension`, `step` apart: that dim counts windows, a new last dim holds one."""
        d = _dim(dimension, self.ndim)
        if size < 0 or step <= 0:
            raise ArgumentError(f"unfold: size must be non-negative and step positive, got size {size}, step {step}")
        x = self.reshape(1) if self.ndim == 0 else self
        if size > x.shape[d]:
            raise ArgumentError(f"unfold: size {size} is larger than dimension {d} of shape {self.shape}")
        others = [i for i in range(x.ndim) if i != d]
        if size == 0:
            w = x.permute(*others, d).shrink([None] * len(others) + [(0, 0)])
            w = w.reshape(*[x.shape[i] for i in others], 0, 0)
            w = w.pad([None] * len(others) + [(0, x.shape[d] // step + 1), None])
        else:
            w = x.permute(*others, d)._pool((size,), step)
        w = w.permute(*range(d), x.ndim - 1, *range(d, x.ndim - 1), x.ndim)
        return w.reshape(w.shape[1:]) if self.ndim == 0 else w

    def pad_to(self, *shape: Any, value: float = 0.0) -> Tensor:
        """Pad with `value` at the end of each dim up to shape (None keeps a dim)."""
        new = argfix(*shape)
        if len(new) != self.ndim or any(n is not None and n < s for n, s in zip(new, self.shape)):
            raise ArgumentError(f"pad_to {new}: needs one size per dim of shape {self.shape}, none smaller")
        return self.pad([None if n is None else (0, n - s) for n, s in zip(new, self.shape)], value=value)

    def shrink_to(self, *shape: Any) -> Tensor:
        """Keep the first entries of each dim, down to shape (None keeps a dim)."""
        new = argfix(*shape)
        if len(new) != self.ndim or any(n is not None and not 0 <= n <= s for n, s in zip(new, self.shape)):
            raise ArgumentError(f"shrink_to {new}: needs one size per dim of shape {self.shape}, none larger")
        return self.shrink([None if n is None else (0, n) for n in new])

    def _pad_mode(self, per_dim: list[tuple[int, int]], mode: str) -> Tensor:
        """'reflect' mirrors without the edge, 'replicate' repeats the edge, 'circular' wraps around: cat of views."""
        x = self
        for d, (lo, hi) in enumerate(per_dim):
            if lo == 0 and hi == 0:
                continue
            n = x.shape[d]
            least = n if isinstance(n, int) else n.vmin  # a Variable size: the padding must fit its every value
            widest = max(lo, hi)
            if (mode == "reflect" and widest >= least) or (mode == "circular" and widest > least) or not least:
                size = f"{n} in shape {self.shape}" if isinstance(n, int) else f"a Variable as small as {least}"
                raise ArgumentError(f"pad mode {mode!r}: padding {(lo, hi)} is too large for dim {d} of size {size}")

            def part(a: int, b: int, rev: bool = False) -> Tensor:
                p = x.shrink([(a, b) if i == d else None for i in range(x.ndim)])
                return p.flip(d) if rev else p

            if mode == "reflect":
                left, right = part(1, lo + 1, True), part(n - 1 - hi, n - 1, True)
            elif mode == "replicate":
                left = part(0, 1).expand(*[lo if i == d else s for i, s in enumerate(x.shape)])
                right = part(n - 1, n).expand(*[hi if i == d else s for i, s in enumerate(x.shape)])
            else:
                left, right = part(n - lo, n), part(0, hi)
            x = left.cat(x, right, dim=d)
        return x

    def rearrange(self, formula: str, **sizes: int) -> Tensor:
        """einops' rearrange: `"b c (h w) -> b (c h) w"`, with `...` for the dims not named, `()` or `1` for a unit
        dim, and the sizes of split groups as keyword arguments (one per group may be left to infer). A reshape, a
        permute and a reshape: a view."""
        if formula.count("->") != 1:
            raise ValueError(f"rearrange: the formula needs one '->', got {formula!r}")
        lhs, rhs = (_parse_axes(side, formula) for side in formula.split("->"))
        lhs_names = [n for g in lhs for n in g]
        rhs_names = [n.strip("()") for g in rhs for n in g]
        if sorted(lhs_names) != sorted(rhs_names):
            raise ValueError(f"rearrange {formula!r}: both sides must name the same axes")
        if any(("..." in g and len(g) > 1) or "(...)" in g for g in lhs):
            raise ValueError(f"rearrange {formula!r}: '...' cannot be grouped on the left side")
        n_ell = self.ndim - (len(lhs) - ("..." in lhs_names))
        if n_ell < 0 or ("..." not in lhs_names and n_ell != 0):
            raise ValueError(f"rearrange {formula!r}: the left side has {len(lhs)} dims, the tensor {self.shape}")
        ell = [f"...{i}" for i in range(n_ell)]
        # a bare ellipsis is its dims one by one; in parentheses (right side only) they merge into one dim
        lhs = [part for g in lhs for part in ([[n] for n in ell] if g == ["..."] else [g])]
        rhs = [part for g in rhs for part in ([[n] for n in ell] if g == ["..."] else [g])]
        rhs = [[m for n in g for m in (ell if n in ("...", "(...)") else [n])] for g in rhs]
        known: dict[str, int] = {}
        for name, size in sizes.items():
            if name not in lhs_names:
                raise ValueError(f"rearrange {formula!r}: size given for {name!r}, which is not on the left side")
            known[name] = size
        dims: dict[str, int] = {}
        for group, size in zip(lhs, self.shape):
            unknown = [n for n in group if n not in known]
            if len(unknown) > 1:
                raise ValueError(f"rearrange {formula!r}: give the sizes of all but one of {group}")
            rest = prod(known[n] for n in group if n in known)
            for n in group:
                dims[n] = known[n] if n in known else (size // rest if rest else 0)
            if prod(dims[n] for n in group) != size:
                raise ValueError(
                    f"rearrange {formula!r}: axes {group} of sizes {[dims[n] for n in group]} "
                    f"do not make the dim of size {size}"
                )
        flat = [n for g in lhs for n in g]
        order = [flat.index(n) for g in rhs for n in g]
        x = self.reshape([dims[n] for n in flat]).permute(order)
        return x.reshape([prod(dims[n] for n in g) for g in rhs])

    @staticmethod
    def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | str | None = None) -> Tensor:
        """Einstein summation: 'ij,jk->ik', implicit output (letters used once, sorted), '...' and repeated letters.
        dtype (tinygrad's): computed in that dtype (the operands are cast to it)."""
        ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
        if dtype is not None:
            ops = [t.cast(dtype) for t in ops]
        formula = formula.replace(" ", "")
        lhs, arrow, rhs = formula.partition("->")
        specs = lhs.split(",")
        if len(specs) != len(ops):
            raise ArgumentError(f"einsum: {formula!r} names {len(specs)} operands, got {len(ops)}")
        # '...' becomes fresh upper-case letters, right-aligned across operands like broadcasting
        n_ell = max((t.ndim - len(s.replace("...", "")) for s, t in zip(specs, ops) if "..." in s), default=0)
        ell = "".join(chr(ord("A") + i) for i in range(n_ell))
        specs = [
            s.replace("...", ell[n_ell - (t.ndim - len(s.replace("...", ""))) :]) if "..." in s else s
            for s, t in zip(specs, ops)
        ]
        if not arrow:
            once = sorted(c for c in set("".join(specs)) if "".join(specs).count(c) == 1 and c not in ell)
            rhs = ell + "".join(once)
        rhs = rhs.replace("...", ell)
        sizes: dict[str, int] = {}
        aligned = []
        for s, t in zip(specs, ops):
            if len(s) != t.ndim or (s and not s.isalpha()):  # '' is a 0-d operand
                raise ArgumentError(f"einsum: operand spec {s!r} does not fit shape {t.shape}")
            while len(set(s)) != len(s):  # a repeated letter takes a diagonal
                c = next(c for c in s if s.count(c) > 1)
                i, j = s.index(c), s.index(c, s.index(c) + 1)
                t = t.diagonal(0, i, j)
                s = "".join(ch for k, ch in enumerate(s) if k not in (i, j)) + c
            for c, n in zip(s, t.shape):
                # size-1 dims broadcast, as in torch
                if c in sizes and n not in (1, sizes[c]) and sizes[c] != 1:
                    raise ArgumentError(f"einsum: letter {c!r} has sizes {sizes[c]} and {n}")
                sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
            aligned.append((s, t))
        letters = sorted(sizes)
        if any(c not in sizes for c in rhs) or len(set(rhs)) != len(rhs):
            raise ArgumentError(f"einsum: output {rhs!r} must name distinct letters of the inputs")
        prod_t = None
        for s, t in aligned:
            order = sorted(range(len(s)), key=lambda k: letters.index(s[k]))
            t = t.permute(order) if order else t
            s = "".join(s[k] for k in order)
            t = t.reshape([t.shape[s.index(c)] if c in s else 1 for c in letters])
            prod_t = t if prod_t is None else prod_t * t
        assert prod_t is not None
        prod_t = prod_t._broadcast_to(tuple(sizes[c] for c in letters))
        summed = [i for i, c in enumerate(letters) if c not in rhs]
        out = prod_t.sum(summed) if summed else prod_t
        if not dtypes.is_float(prod_t.dtype):
            out = out.cast(prod_t.dtype)
        kept = [c for c in letters if c in rhs]
        return out.permute([kept.index(c) for c in rhs]) if rhs else out

    # *** scans and sorts: windowed reduces (a view of every prefix) and comparison counts, no data-dependent loops ***

    def _prefix_windows(self, identity: Any) -> Tensor:
        """(..., n) -> (..., n, n): row i is the prefix x[:i+1] padded in front with identity."""
        n = self.shape[-1]
        return self.pad([None] * (self.ndim - 1) + [(n - 1, 0)], value=identity)._pool((n,))

    def _cumulative(self, axis: int, kind: str) -> Tensor:
        d = _axes(axis, self.ndim)[0] if self.ndim else (_axes(axis, 0), 0)[1]
        x = self.reshape(1) if self.ndim == 0 else self
        out = x.transpose(d, -1)._scan_last(kind).transpose(d, -1)
        if (
            kind in ("sum", "logsumexp")
            and self.ndim
            and dtypes.is_float(self.dtype)
            and _scan_levels(self.shape[d]) > 1
        ):
            # The chain rule through the blocked scan adds 64 shifted windows per level, fused into one kernel:
            # 64^levels terms (65536 elements: a kernel gcc did not finish in minutes, pocl crashed). The gradient
            # of a prefix scan is a suffix scan of its own.
            from lazygrad.gradient import define_gradient

            define_gradient(out.uop, self.uop, _suffix_scan_rule(kind, d, weakref.ref(out.uop), self.uop))
        return out.reshape(()) if self.ndim == 0 else out

    def _scan_last(self, kind: str) -> Tensor:
        """Inclusive scan along the last dim with kind in {'sum', 'prod', 'max', 'logsumexp'}. Up to 64 elements,
        one reduce over a view of every prefix; beyond, prefixes inside blocks of 64 combined with the scan of the
        block totals (recursively): O(64 n) work, log64(n) levels."""
        n, block = self.shape[-1], 64
        lowest = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        identity = {"sum": 0, "prod": 1, "max": lowest, "logsumexp": -math.inf}[kind]
        if not isinstance(n, int):
            # a Variable length: the scan of the longest one, the identity past the end (no prefix reaches it), cut
            # back to the length; one set of kernels serves every value
            lead = [None] * (self.ndim - 1)
            longest = self.pad(lead + [(0, n.vmax - n)], value=identity)
            return longest._scan_last(kind).shrink(lead + [(0, n)])
        if n <= block:
            if n == 0:
                return self
            w = self._prefix_windows(identity)
            if kind == "sum":
                return w.sum(-1, dtype=self.dtype)
            return w.prod(-1, dtype=self.dtype) if kind == "prod" else w.max(-1) if kind == "max" else w.logsumexp(-1)
        a, lead = ceildiv(n, block), [None] * (self.ndim - 1)
        blocks = self.pad(lead + [(0, a * block - n)], value=identity).reshape(*self.shape[:-1], a, block)
        inner = blocks._scan_last(kind)
        totals = inner.shrink(lead + [None, (block - 1, block)]).squeeze(-1)
        before = totals._scan_last(kind).pad(lead + [(1, 0)], value=identity).shrink(lead + [(0, a)]).unsqueeze(-1)
        combine = {"sum": Tensor.add, "prod": Tensor.mul, "max": Tensor.maximum, "logsumexp": Tensor.logaddexp}[kind]
        return combine(inner, before).reshape(*self.shape[:-1], a * block).shrink(lead + [(0, n)])

    @_rounds_once
    def cumsum(self, axis: int = 0, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        return self.cast(sum_acc_dtype(self.dtype))._cumulative(axis, "sum")

    @_rounds_once
    def cumprod(self, axis: int = 0, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        x = self.cast(sum_acc_dtype(self.dtype))
        out = x._cumulative(axis, "prod")
        if not x.requires_grad:
            return out
        # The gradient of the windowed prods is a prod-of-the-others per window: 512 elements took minutes to compile.
        # Instead, a surrogate with the same derivative built from scans: dy_i/dx_k = y_i / x_k for a nonzero x_k
        # (0 past a zero), and for the first zero z, dy_i/dx_z = the running product with x_z taken as 1 (i >= z).
        xd, y = x.detach(), out.detach()
        zero = xd == 0
        first = zero & (zero.cast(dtypes.int32)._cumulative(axis, "sum") == 1)
        y_wo_first = first.where(1.0, xd)._cumulative(axis, "prod")
        coef = zero.where(0.0, xd.reciprocal())
        surr = y * (coef * x)._cumulative(axis, "sum") + y_wo_first * first.where(x, 0.0)._cumulative(axis, "sum")
        moved = surr - surr.detach()  # zero, or NaN where surr is not finite: then no gradient flows there
        return y + moved.isnan().where(0.0, moved)

    def cummax(self, axis: int = 0, *, dim: Any = None) -> tuple[Tensor, Tensor]:
        """Running maximum and, as torch, the index of its last occurrence so far."""
        if dim is not None:  # torch's name for the axis
            axis = dim
        values = self._cumulative(axis, "max")
        d = _dim(axis, self.ndim)
        n = self.shape[d] if self.ndim else 1
        # the running max is reached anew (or tied) exactly where x == max so far: the index is a running max too
        hit = (self == values) | self.isnan() if dtypes.is_float(self.dtype) else self == values
        pos = Tensor.arange(n, device=self.device).reshape((n,) + (1,) * (self.ndim - d - 1)) if self.ndim else 0
        indices = hit.where(pos, -1)._cumulative(axis, "max").cast(dtypes.default_int)
        if self.ndim and self.requires_grad:
            # torch's gradient goes to the element the index names, not shared among ties as a max's would be
            values = self.gather(d, indices)
        return ValuesIndices(values, indices)

    def cummin(self, axis: int = 0, *, dim: Any = None) -> tuple[Tensor, Tensor]:
        if dim is not None:  # torch's name for the axis
            axis = dim
        neg = -self if dtypes.is_float(self.dtype) else ~self
        values, idx = neg.cummax(axis)
        return ValuesIndices(-values if dtypes.is_float(self.dtype) else ~values, idx)

    def logcumsumexp(self, axis: int = 0, *, dim: Any = None) -> Tensor:
        # a logsumexp per prefix window, so stable for any spread of values
        if dim is not None:  # torch's name for the axis
            axis = dim
        return self.cast(least_upper_float(self.dtype))._cumulative(axis, "logsumexp")

    def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = True) -> tuple[Tensor, Tensor]:
        """Sorted values and their indices (default int). Each element's place is the count of elements that go
        before it (ties in index order: always stable); NaN sorts as the largest value, as in torch."""
        d = _dim(dim, self.ndim)
        x = (self.reshape(1) if self.ndim == 0 else self).transpose(d, -1)
        n = x.shape[-1]
        # element i on dim -2, j on dim -1; expanded before any arithmetic so the compares fuse into the count
        pair = (*x.shape, n)
        a, b = x.unsqueeze(-1).expand(pair), x.unsqueeze(-2).expand(pair)
        i = Tensor.arange(n, device=self.device)
        first = _sorts_before(a, b) if descending else _sorts_before(b, a)
        earlier = i.reshape(1, n).expand(pair) < i.reshape(n, 1).expand(pair)
        rank = (first | (_sorts_equal(a, b) & earlier)).sum(-1, dtype=dtypes.int32)
        place = rank.unsqueeze(-1) == i  # (..., i, r)
        values = _pick(x.unsqueeze(-1), place, (-2,))
        indices = _pick(i.reshape(n, 1), place, (-2,)).cast(dtypes.default_int)
        values, indices = values.transpose(d, -1), indices.transpose(d, -1)
        return (
            ValuesIndices(values.reshape(()), indices.reshape(())) if self.ndim == 0 else ValuesIndices(values, indices)
        )

    def argsort(self, dim: int = -1, descending: bool = False, *, stable: bool = True) -> Tensor:
        return self.sort(dim, descending)[1]

    def topk(
        self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, sorted_: bool | None = None
    ) -> tuple[Tensor, Tensor]:
        """(values, indices) of the k largest (smallest) along dim; always sorted (`sorted_` is tinygrad's name)."""
        d = _dim(dim, self.ndim)
        n = self.shape[d] if self.ndim else 1
        if not 0 <= k <= n:
            raise ArgumentError(f"topk: k={k} is out of range for dimension {d} of size {n}")
        values, indices = self.sort(d, descending=largest)
        keep = [(0, k) if i == d else None for i in range(self.ndim)]
        return ValuesIndices(values.shrink(keep), indices.shrink(keep)) if self.ndim else ValuesIndices(values, indices)

    def var_mean(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1, *, dim: Any = None
    ) -> tuple[Tensor, Tensor]:
        if dim is not None:  # torch's name for the axis
            axis = _torch_dims(dim)
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1, *, dim: Any = None
    ) -> tuple[Tensor, Tensor]:
        if dim is not None:  # torch's name for the axis
            axis = _torch_dims(dim)
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def norm(self, p: float | str = "fro", dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Vector p-norm over dim (all dims by default); 'fro' is the 2-norm, inf / -inf the largest / smallest |x|."""
        dim = _torch_dims(dim)
        x = self.cast(least_upper_float(self.dtype)).abs()
        if p == math.inf:
            return x.max(dim, keepdim)
        if p == -math.inf:
            return x.min(dim, keepdim)
        if p == 0:
            return (x != 0).cast(x.dtype).sum(dim, keepdim)
        if isinstance(p, str) and p != "fro":
            raise ArgumentError(f"norm: p must be a number or 'fro', not {p!r}")
        if p in ("fro", 2, 2.0):
            return _root(x.square().sum(dim, keepdim), 2)
        return _root(x.pow(p).sum(dim, keepdim), p)

    # *** more elementwise: activations and math built on the primitives ***

    def celu(self, alpha: float = 1.0) -> Tensor:
        return (self / alpha).elu() * alpha

    def selu(self, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
        return gamma * self.elu(alpha)

    def quick_gelu(self) -> Tensor:
        return self * (self * 1.702).sigmoid()

    def mish(self) -> Tensor:
        return self * self.softplus().tanh()

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """clip(alpha * x + beta, 0, 1); tinygrad's alpha and beta, torch's (1/6, 1/2) by default."""
        if alpha == 1 / 6 and beta == 0.5:
            # torch's gradient is 1/6 only where -3 < x < 3: 0 at a NaN x, which relu6's where passes through
            inside = (self > -3) & (self < 3)
            return inside.where((self + 3) / 6, (self.detach() + 3).relu6() / 6)
        y = alpha * self + beta
        return y.relu() - (y - 1).relu()

    def hardswish(self) -> Tensor:
        return self * (self + 3).relu6() / 6

    def softsign(self) -> Tensor:
        return self / (1 + self.abs())

    def lerp(self, end: Any, weight: Any) -> Tensor:
        return self + (end - self) * weight

    def _signbit(self) -> Tensor:
        """True where the sign bit is set: also for -0.0 and negative NaNs, which comparisons cannot see."""
        if not dtypes.is_float(self.dtype):
            return self < 0
        bits = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
        return self.bitcast(bits) < 0

    def copysign(self, other: Any) -> Tensor:
        a, b = self._broadcasted(other)
        fdt = least_upper_float(a.dtype)
        a, b = a.cast(fdt), b.cast(fdt)
        a = (a == 0).where(a.detach(), a)  # torch's gradient is 0 at a == 0, where the sign flip is undefined
        mag = a._signbit().where(-a, a)
        return b._signbit().where(-mag, mag)

    def _float_pair(self, other: Any) -> tuple[Tensor, Tensor]:
        a, b = self._broadcasted(other)
        fdt = least_upper_float(a.dtype)
        return a.cast(fdt), b.cast(fdt)

    def logaddexp(self, other: Any) -> Tensor:
        """log(e^a + e^b) as max + log1p(e^-|a - b|): log(1 + tiny) would round the smaller term away. Equal inputs
        (infinite ones too) take the difference as 0: max + log(2), half the gradient to each, as torch."""
        a, b = self._float_pair(other)
        d = (a == b).where(0.0, a - b)
        return a.maximum(b) + (-d.abs()).exp().log1p()

    def logaddexp2(self, other: Any) -> Tensor:
        a, b = self._float_pair(other)
        d = (a == b).where(0.0, a - b)
        u = (-d.abs()).exp2()
        log2_1p = u._in_float32(lambda x: _log1p(x, base2=True))
        return a.maximum(b) + u._with_derivative(log2_1p, lambda x: ((1 + x) * math.log(2)).reciprocal())

    def atan2(self, other: Any) -> Tensor:
        """The angle of the point (other, self) in [-pi, pi], as C's atan2 (and torch.atan2): signed zeros pick the
        half plane, infinities the diagonals. atan of the smaller over the larger magnitude (at most 1, no overflow),
        then reflected into the octant."""
        y, x = self._float_pair(other)
        if y.dtype in (dtypes.float16, dtypes.bfloat16):
            return y.float().atan2(x.float()).cast(y.dtype)
        # |y| and |x| by the sign bit, not abs(), whose gradient is 0 at 0: d/dy atan2(0, 1) was 0 (torch: 1)
        ay, ax = y._signbit().where(-y, y), x._signbit().where(-x, x)
        steep = ay > ax
        num, den = steep.where(ax, ay), steep.where(ay, ax)
        both_inf, zero = num == math.inf, den == 0
        r = both_inf.where(1.0, zero.where(0.0, num / (both_inf | zero).where(1.0, den)))
        t = _atan(r)
        t = steep.where(math.pi / 2 - t, t)
        t = x._signbit().where(math.pi - t, t)
        t = y._signbit().where(-t, t)
        # NaN where either is, squared: its gradient to both is NaN too, as torch's y / (x^2 + y^2) and co (0 apart
        # from there: the unused branch's gradient would be 0 * inf elsewhere)
        nan = x.isnan() | y.isnan()
        s = nan.where(x + y, 0.0)
        return nan.where(s * s, t)

    def hypot(self, other: Any) -> Tensor:
        """sqrt(a^2 + b^2) without overflow or underflow of the squares (scaled by the larger magnitude); infinite
        where either is, even beside a NaN, as C's hypot."""
        a, b = self._float_pair(other)
        a, b = a.abs(), b.abs()
        m, n = a.maximum(b), a.minimum(b)
        plain = (m == 0) | (m == math.inf)
        r = n / plain.where(1.0, m)
        out = plain.where(m, m * (1 + r * r).sqrt())
        return ((a == math.inf) | (b == math.inf)).where(math.inf, out)

    def xlogy(self, other: Any) -> Tensor:
        """self * log(other), 0 where self is 0 (unless other is NaN), as torch.xlogy. Its gradient to self is
        log(other) also where self is 0 (0 there where other <= 0 or inf): that zero is t - t.detach() with
        t = self * log(other), self taken only where it is 0 (0 * inf in the gradient of an unused t would be NaN)."""
        x, y = self._float_pair(other)
        zero = (x == 0) & (y == y)
        t = zero.where(x, 0.0) * ((y > 0) & (y < math.inf)).where(y, 1.0).log()
        return zero.where(t - t.detach(), x * zero.where(1.0, y).log())

    def fmax(self, other: Any) -> Tensor:
        """Elementwise maximum that ignores NaN (NaN only where both are), as torch.fmax; a tie's gradient goes to
        self, as torch's."""
        a, b = self._broadcasted(other)
        return ((a >= b) | b.isnan()).where(a, b)

    def fmin(self, other: Any) -> Tensor:
        a, b = self._broadcasted(other)
        return ((a <= b) | b.isnan()).where(a, b)

    def float_power(self, exponent: Any) -> Tensor:
        """pow in float64, as torch.float_power."""
        e = exponent.cast(dtypes.float64) if isinstance(exponent, Tensor) else exponent
        return self.cast(dtypes.float64).pow(e)

    def float_power_(self, exponent: Any) -> Tensor:
        """float_power in place: self must be float64 already, as torch's."""
        if self.dtype != dtypes.float64:
            raise RuntimeError(
                f"float_power_: the base has dtype {self.dtype.name}, but the result is float64: use float_power"
            )
        return self._inplace(self.float_power(exponent))

    def ldexp(self, other: Any) -> Tensor:
        """self * 2^other."""
        a, b = self._float_pair(other)
        return a * b.exp2()

    def sinc(self) -> Tensor:
        """sin(pi x) / (pi x), 1 at 0 (torch.sinc)."""

        def fn(x: Tensor) -> Tensor:
            zero = x == 0
            return zero.where(1.0, _sin_pi(x) / (zero.where(1.0, x) * math.pi))

        def deriv(x: Tensor) -> Tensor:
            # (cos(pi x) - sinc(x)) / x cancels for small x (and is inf / inf once x * x underflows): there the series
            # sum_n (-1)^n 2n pi^2n x^(2n-1) / (2n+1)!, Horner in z = (pi x)^2, to 1e-17 below |x| = 0.25
            small = x.abs() < 0.25
            s = small.where(x, 0.0)
            z, series = (s * math.pi).square(), s.zeros_like()
            for n in reversed(range(1, 9)):
                series = series * z + (-1) ** n * 2 * n / math.factorial(2 * n + 1)
            b = small.where(1.0, x)
            return small.where(series * s * math.pi**2, ((b * math.pi).cos() - b.sinc()) / b)

        return self._with_derivative(self._in_float32(fn), deriv)

    def logit(self, eps: float | None = None) -> Tensor:
        """log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given (torch.logit)."""
        x = self.cast(least_upper_float(self.dtype))
        lo, hi = (0.0, 1.0) if eps is None else (eps, 1 - eps)
        v = x if eps is None else x.clamp(lo, hi)
        # torch's derivative: 1 / (x (1 - x)) (+inf at 0 and 1, NaN at NaN), outside [lo, hi] 0 with eps and NaN without
        outside = math.nan if eps is None else 0.0
        return x._with_derivative(
            (v / (1 - v)).log(), lambda u: ((u < lo) | (u > hi)).where(outside, (u * (1 - u)).abs().reciprocal())
        )

    def frac(self) -> Tensor:
        """x - trunc(x), with x's sign (torch.frac)."""
        return self - self.trunc()

    def deg2rad(self) -> Tensor:
        """Degrees to radians (torch.deg2rad); integers give the default float."""
        return self.cast(least_upper_float(self.dtype)) * (math.pi / 180)

    def rad2deg(self) -> Tensor:
        """Radians to degrees (torch.rad2deg); integers give the default float."""
        return self.cast(least_upper_float(self.dtype)) * (180 / math.pi)

    def signbit(self) -> Tensor:
        """True where the sign bit is set, -0.0 included (torch.signbit)."""
        return self._signbit()

    def erfc(self) -> Tensor:
        """1 - erf(x) without the cancellation: exact to float32's last digits also where erfc is tiny (erfc(9) is
        4e-37). 1 - erf below 1.8 and a continued fraction above (_erfc_pos), in float64 where the device has it."""

        def fn(x: Tensor) -> Tensor:
            neg = x < 0
            pos = _erfc_pos(neg.where(-x, x))
            return neg.where(2 - pos, pos)

        return self._with_derivative(self._in_float64(fn), lambda v: (-v * v).exp() * (-2 / math.sqrt(math.pi)))

    def _in_float64(self, fn: Callable[[Tensor], Tensor]) -> Tensor:
        """fn computed in float64 where the device has it (special functions whose float32 forms would need tables
        of coefficients), rounded once to self's float dtype."""
        from lazygrad.device import Device

        fdt = least_upper_float(self.dtype)
        if fdt != dtypes.float64 and Device[self.device].renderer.dtype_unsupported(dtypes.float64) is not None:
            return fn(self.cast(fdt))
        return fn(self.cast(dtypes.float64)).cast(fdt)

    def lgamma(self) -> Tensor:
        """log|Gamma(x)|: Lanczos' series (g = 7, 9 terms, ~1e-15) from 1/2, the reflection
        log(pi / |sin(pi x)|) - lgamma(1 - x) below; +inf at 0 and the negative integers, as torch."""
        return self._with_derivative(self._in_float64(_lgamma), lambda x: x.digamma())

    def digamma(self) -> Tensor:
        """Gamma'(x) / Gamma(x): 8 steps of psi(x) = psi(x + 1) - 1/x, then the asymptotic series; reflection
        psi(1 - x) - pi / tan(pi x) below 1/2. -inf at 0 (+inf at -0), NaN at the negative integers, as torch."""
        return self._with_derivative(self._in_float64(_digamma), lambda x: x._in_float64(_trigamma))

    def erfinv(self) -> Tensor:
        """The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside): Winitzki's closed form, then Halley steps
        on erf(x) = y, measured as erfc(x) = 1 - y from 1/2 on (exact near 1, where erf(x) - y would cancel)."""
        out = self._in_float64(_erfinv)
        node = weakref.ref(out.uop)
        return self._with_derivative(out, lambda y: _from_node(node, y.dtype).square().exp() * (math.sqrt(math.pi) / 2))

    def i0(self) -> Tensor:
        """The modified Bessel function of the first kind, order 0 (torch.i0): its power series up to |x| = 30, the
        asymptotic series above; the gradient is I1, as torch's. Integers give the default float."""
        return self._with_derivative(self._in_float64(lambda x: _bessel_i(x, 0)), lambda x: x._in_float64(_bessel_i1))

    def polygamma(self, n: int) -> Tensor:
        """The n-th derivative of digamma (torch.polygamma; torch's method takes n first too: x.polygamma(n)).
        n >= 1: n + 16 steps of the series (-1)^(n+1) n! sum 1/(x + k)^(n+1), then its asymptotic tail; below -8
        the reflection through the n-th derivative of pi cot(pi x). +-inf at 0 and the negative integers."""
        if not isinstance(n, int) or n < 0:
            raise ArgumentError(f"polygamma: n must be an int >= 0, got {n!r}")
        if n == 0:
            return self.digamma()
        return self._with_derivative(self._in_float64(lambda x: _polygamma(n, x)), lambda x: x.polygamma(n + 1))

    def mvlgamma(self, p: int) -> Tensor:
        """The multivariate log-gamma of dimension p (torch.mvlgamma): sum of lgamma(x - j/2), j < p, plus
        p(p-1)/4 log(pi)."""
        if not isinstance(p, int) or p < 1:
            raise ArgumentError(f"mvlgamma: p has to be an int >= 1, got {p!r}")
        x = self.cast(least_upper_float(self.dtype))
        out = x.lgamma()
        for j in range(1, p):
            out = out + (x - j / 2).lgamma()
        return out + p * (p - 1) / 4 * math.log(math.pi)

    def frexp(self) -> FrexpResult:
        """(mantissa, exponent) with self = mantissa * 2^exponent, |mantissa| in [0.5, 1) and an int32 exponent, as
        torch.frexp; 0, inf and NaN give (self, 0). Read from the float's bits, so exact (subnormals too)."""
        if not dtypes.is_float(self.dtype):
            raise RuntimeError(f"frexp only supports floating-point dtypes, not {self.dtype.name}")
        wide = self.dtype == dtypes.float64
        x = self if wide else self.cast(dtypes.float32)  # float16/bfloat16 values are float32 values, exactly
        ibits, mbits, bias, lo = (dtypes.int64, 52, 1022, -1022) if wide else (dtypes.int32, 23, 126, -126)
        emask = (1 << (11 if wide else 8)) - 1
        sub = (x.abs() < 2.0**lo) & (x != 0)
        bits = sub.where(x * 2.0**64, x).bitcast(ibits)  # a subnormal scaled into the normal range, exactly
        exp = ((bits >> mbits) & emask) - bias - sub.where(64, 0)
        mant = (bits & ~(emask << mbits) | (bias << mbits)).bitcast(x.dtype)
        plain = (x == 0) | x.isinf() | x.isnan()
        return FrexpResult(plain.where(x, mant).cast(self.dtype), plain.where(0, exp).cast(dtypes.int32))

    def nextafter(self, other: Any) -> Tensor:
        """The next float after self towards other, as torch.nextafter (C's nextafter): one step of the float's bits;
        other when the two are equal, NaN when either is."""
        a, b = self._broadcasted(other)
        if not dtypes.is_float(a.dtype):
            raise _unsupported("nextafter", a, "it steps floats")
        ibits = {8: dtypes.int64, 4: dtypes.int32, 2: dtypes.int16}[a.dtype.itemsize]
        bits = a.bitcast(ibits)
        step = bits + ((a < b) == (a > 0)).where(1, -1).cast(ibits)  # towards b: up in magnitude or down
        tiny = Tensor.full(a.shape, 1, dtype=ibits, device=a.device).bitcast(a.dtype)  # the smallest subnormal
        out = (a == 0).where(b._signbit().where(-tiny, tiny), step.bitcast(a.dtype))
        return (a.isnan() | b.isnan()).where(a + b, (a == b).where(b, out))

    def hardshrink(self, lambd: float = 0.5) -> Tensor:
        """x where |x| > lambd, else 0 (torch.nn.functional.hardshrink)."""
        if not dtypes.is_float(self.dtype):
            raise _unsupported("hardshrink", self, "it takes float tensors")
        return (self.abs() > lambd).where(self, _zero_or_nan(self))

    def prelu(self, weight: Tensor) -> Tensor:
        """max(0, x) + weight * min(0, x), with one weight or one per channel (dim 1), as torch.prelu."""
        if not dtypes.is_float(self.dtype):
            raise _unsupported("prelu", self, "it takes float tensors")
        channels = self.shape[1] if self.ndim >= 2 else 1
        if weight.numel() != 1 and weight.numel() != channels:
            raise ArgumentError(
                f"prelu: weight has {weight.numel()} values; it needs 1 or one per channel ({channels}) of input "
                f"shape {tuple(self.shape)}"
            )
        w = weight.reshape(()) if weight.numel() == 1 else weight.reshape(channels, *[1] * (self.ndim - 2))
        return (self > 0).where(self, w * self)

    # torch's other names with other arguments (the plain aliases are at the end of the class)
    def divide(self, other: Any, rounding_mode: str | None = None) -> Tensor:
        return self.div(other, rounding_mode=rounding_mode)

    def subtract(self, other: Any, alpha: Any = 1) -> Tensor:
        return self.sub(other, alpha=alpha)

    def _logical(self, op: Ops, x: Any) -> Tensor:
        other = x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x)
        return self.cast(dtypes.bool)._bitwise(op, other)

    def logical_and(self, x: Any) -> Tensor:
        return self._logical(Ops.AND, x)

    def logical_or(self, x: Any) -> Tensor:
        return self._logical(Ops.OR, x)

    def logical_xor(self, x: Any) -> Tensor:
        return self._logical(Ops.XOR, x)

    def isfinite(self) -> Tensor:
        return (self.isinf() | self.isnan()).logical_not()

    def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
        a, b = self._broadcasted(other)
        if a.dtype == dtypes.bool:
            return a == b
        close = (a == b) | ((a - b).abs() <= atol + rtol * b.abs()) & a.isfinite() & b.isfinite()
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def allclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    # *** nn functional extras ***

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        return self / self.norm(p, dim, keepdim=True).maximum(eps)

    def interpolate(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
    ) -> Tensor:
        """Resize the spatial dims of (N, C, *spatial): 'nearest', 'nearest-exact', or 'linear' / 'bilinear' /
        'trilinear' (each dim interpolated in turn)."""
        linear = ("linear", "bilinear", "trilinear")
        if mode not in ("nearest", "nearest-exact", *linear):
            raise _UnknownModeError(
                f"interpolate: mode must be nearest, nearest-exact, linear, bilinear or trilinear, not {mode!r}"
            )
        if align_corners is not None and mode not in linear:
            raise ArgumentError("interpolate: align_corners only applies to the linear modes")
        nsp = self.ndim - 2
        if nsp < 1:
            raise ArgumentError(f"interpolate needs (N, C, *spatial) input, got shape {self.shape}")
        if (size is None) == (scale_factor is None):
            raise ArgumentError("interpolate: give exactly one of size and scale_factor")
        ins = self.shape[2:]
        if size is not None:
            outs, scales = make_tuple(size, nsp), [i / o if o else 0.0 for i, o in zip(ins, make_tuple(size, nsp))]
        else:
            sf = scale_factor if isinstance(scale_factor, (list, tuple)) else [scale_factor] * nsp
            outs, scales = tuple(int(math.floor(i * s)) for i, s in zip(ins, sf)), [1 / s for s in sf]
        if len(outs) != nsp:
            raise ArgumentError(f"interpolate: size {size} needs {nsp} entries for input shape {self.shape}")
        if any(o <= 0 for o in outs) or any(i <= 0 for i in ins):
            raise ArgumentError(f"interpolate: input sizes {ins} and output sizes {outs} must be greater than 0")
        x = self.cast(least_upper_float(self.dtype)) if mode in linear else self
        # an integer image blends one dim at a time from the last, in fixed point, rounding after each (torch's uint8
        # resampling, bit for bit)
        rounded = mode in linear and not dtypes.is_float(self.dtype)
        for k, (i, o, s) in reversed(list(enumerate(zip(ins, outs, scales)))):
            dim = 2 + k
            dst = Tensor.arange(o, device=self.device).cast(dtypes.float32)
            pre, shape = (slice(None),) * dim, (o,) + (1,) * (x.ndim - dim - 1)
            if rounded:
                lo_, hi_, w0, w1, p = _fixed_point_taps(i, o, s, align_corners)
                lo, hi = (Tensor(v, dtype=dtypes.int32, device=self.device) for v in (lo_, hi_))
                w0t, w1t = (Tensor(v, dtype=x.dtype, device=self.device).reshape(shape) for v in (w0, w1))
                x = ((x[pre + (lo,)] * w0t + x[pre + (hi,)] * w1t + (1 << p >> 1)) / (1 << p)).floor()
                x = x.clip(dtypes.min(self.dtype), dtypes.max(self.dtype))
            elif mode in linear:
                if align_corners:
                    src = dst * ((i - 1) / (o - 1) if o > 1 else 0.0)
                else:
                    src = ((dst + 0.5) * s - 0.5).maximum(0.0)
                lo = src.floor().cast(dtypes.int32).minimum(i - 1)
                hi = (lo + 1).minimum(i - 1)
                w = (src - lo.cast(dtypes.float32)).cast(x.dtype).reshape(shape)
                x = x[pre + (lo,)] * (1 - w) + x[pre + (hi,)] * w
            else:
                src = (dst + 0.5) * s if mode == "nearest-exact" else dst * s
                idx = src.floor().cast(dtypes.int32).minimum(i - 1)
                x = x[(slice(None),) * dim + (idx,)]
        return x if x.dtype == self.dtype else x.cast(self.dtype)

    def max_pool2d_with_indices(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """max_pool2d and, as torch, the flat index (default int, within each input plane) of each window's first
        maximum."""
        k_, s_, d_, _, pads = self._pool_setup(kernel_size, stride, padding, dilation, ceil_mode)
        nk, kn = len(k_), prod(k_)
        values = self.max_pool2d(kernel_size, stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
        fill = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        windows = self._spatial_pad(pads, value=fill)._pool(k_, s_, d_).flatten(-nk)
        plane = self.shape[-nk:]
        pos = Tensor.arange(prod(plane), device=self.device).reshape(plane)._spatial_pad(pads, value=-1)
        pos = pos._pool(k_, s_, d_).flatten(-nk)
        # the first maximal position in each window: score kn - j for maxima, then one-hot of the winner
        hit = windows == values.unsqueeze(-1)
        first = kn - hit.where(Tensor.arange(kn, 0, -1, device=self.device), 0).max(-1, keepdim=True)
        picked = _pick(pos._broadcast_to(windows.shape), Tensor.arange(kn, device=self.device) == first, (-1,))
        return values, picked.cast(dtypes.default_int)

    def max_unpool2d(
        self,
        indices: Tensor,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """Inverse of max_pool2d: each value goes to its flat index in the output plane, the rest is zero."""
        if indices.shape != self.shape:
            raise ArgumentError(f"max_unpool2d: indices shape {indices.shape} must equal the input shape {self.shape}")
        k_ = make_tuple(kernel_size, 2)
        nk = len(k_)
        s_ = make_tuple(stride if stride is not None else k_, nk)
        p_ = make_tuple(padding, nk)
        if output_size is None:
            outs = tuple((i - 1) * s - 2 * p + k for i, s, p, k in zip(self.shape[-nk:], s_, p_, k_))
        else:
            outs = tuple(output_size)[-nk:]
        lead = self.shape[:-nk]
        flat_out = prod(outs)
        x, idx = self.reshape(*lead, -1), indices.reshape(*lead, -1)
        out = Tensor.zeros(*lead, flat_out, dtype=self.dtype, device=self.device)
        return out.scatter(-1, idx, x).reshape(*lead, *outs)

    # *** elementwise ***

    def _alu(self, op: Ops, *others: Tensor, dtype: DType | None = None) -> Tensor:
        for t in (self, *others):
            if t._view_of is not None:
                _follow_base(t)
        # (a binary op's sources without a generator: two Python calls less on most ops a model builds)
        srcs = (self.uop, others[0].uop) if len(others) == 1 else (self.uop, *[o.uop for o in others])
        out = dtype or (dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype)
        return _result(UOp(op, out, srcs))

    def _binary(self, op: Ops, y: Any, reverse: bool) -> Tensor | None:
        """op of self and y as they are, where y is a tensor of the same dtype (not bool: sub refuses it, mul makes it
        an AND), shape and device (most binary ops a model or an optimizer builds); None where _broadcasted's work is
        needed. _broadcasted and _alu in one, with the nodes' cached shapes and devices read inline: a lone
        `(a + b).realize()` made 7 Python calls to build its node, now 3."""
        if type(y) is not Tensor:
            return None
        if self._view_of is not None:
            _follow_base(self)
        if y._view_of is not None:
            _follow_base(y)
        su, yu = self.uop, y.uop
        dt = su.dtype
        if yu.dtype is not dt or dt.key == _BOOL_KEY:
            return None
        sd, yd = su.__dict__, yu.__dict__
        if "shape" in sd and "shape" in yd and "device" in sd and "device" in yd:
            same = sd["shape"] == yd["shape"] and sd["device"] == yd["device"]
        else:
            same = su.shape == yu.shape and su.device == yu.device
        if not same:
            return None
        return _result(hash_consed(UOp, op, dt, (yu, su) if reverse else (su, yu)))

    def _to_tensor(self, x: Any, dtype: DType | None = None) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if isinstance(x, UOp) and dtypes.is_int(x.dtype) and not isinstance(self.device, tuple):
            # a symbolic int (a size of a symbolic shape): its value is computed in the kernel from the variables
            return Tensor(_sym_uop(x, self.device)).cast(dtype or _scalar_dtype(self.dtype, 1))
        if not isinstance(x, (bool, int, float)):
            raise TypeError(f"cannot combine a Tensor with {type(x).__name__} ({x!r})")
        dt = dtype or _scalar_dtype(self.dtype, x)
        return Tensor(Tensor._const_uop(x, dt, self.device))

    def _broadcasted(self, y: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        """Both operands in their common dtype and broadcast shape; `reverse` swaps them (for y - x)."""
        # the two common cases (most ops of a model or an optimizer) without the general path's temporary tensors:
        # a tensor of the same dtype, shape and device is used as it is; a Python scalar of the tensor's dtype is a
        # constant node reshaped and expanded to the tensor's shape, the same nodes the general path builds
        if self._view_of is not None:
            _follow_base(self)
        su = self.uop
        if isinstance(y, Tensor):
            if y._view_of is not None:
                _follow_base(y)
            yu = y.uop
            if (yu.dtype is su.dtype or yu.dtype == su.dtype) and yu.shape == su.shape and yu.device == su.device:
                return (y, self) if reverse else (self, y)
        elif (
            type(y) in (int, float, bool)
            and _scalar_dtype(su.dtype, y) == su.dtype
            and not isinstance(su.device, tuple)
        ):
            c = Tensor._const_uop(y, su.dtype, su.device)
            if shape := su.shape:
                ones = (1,) * len(shape)
                c = UOp(Ops.RESHAPE, su.dtype, (c,), ones)
                if shape != ones:
                    c = UOp(Ops.EXPAND, su.dtype, (c,), shape)
            return (Tensor(c), self) if reverse else (self, Tensor(c))
        yt = self._to_tensor(y)
        if self.device != yt.device:
            raise ArgumentError(f"tensors are on different devices: {self.device} and {yt.device}")
        # a Python scalar already got the result dtype in _to_tensor (it never widens the tensor within a kind)
        dt = least_upper_dtype(self.dtype, yt.dtype) if isinstance(y, Tensor) else yt.dtype
        x, yt = self.cast(dt), yt.cast(dt)
        shape = _broadcast_shape(x.shape, yt.shape)
        x, yt = x._broadcast_to(shape), yt._broadcast_to(shape)
        return (yt, x) if reverse else (x, yt)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
        return x.expand(shape)

    def add(self, x: Any, reverse: bool = False, *, alpha: Any = 1) -> Tensor:
        if alpha != 1:  # torch's x.add(y, alpha=a) is x + a * y
            x = x * alpha
        if (out := self._binary(_ADD, x, reverse)) is not None:
            return out
        a, b = self._broadcasted(x, reverse)
        return a._alu(Ops.ADD, b)

    def sub(self, x: Any, reverse: bool = False, *, alpha: Any = 1) -> Tensor:
        if alpha != 1:  # torch's x.sub(y, alpha=a) is x - a * y
            x = x * alpha
        if (out := self._binary(_SUB, x, reverse)) is not None:
            return out
        a, b = self._broadcasted(x, reverse)
        if a.dtype == dtypes.bool:
            raise _unsupported("subtraction (-)", a, "use logical_xor or ^")
        return a._alu(Ops.SUB, b)

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        if (out := self._binary(_MUL, x, reverse)) is not None:
            return out
        a, b = self._broadcasted(x, reverse)
        return a._alu(Ops.MUL, b) if a.dtype != dtypes.bool else a._alu(Ops.AND, b)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        if rounding_mode is None and not isinstance(x, Tensor) and not dtypes.is_float(self.dtype):
            # true division of an integer tensor by a Python number: the number must not wrap into the tensor's
            # integer dtype first (uint8 / -3 is -2.0, not 6 / 253), so the tensor goes to float before they meet
            return self.cast(least_upper_float(self.dtype)).div(x, reverse)
        a, b = self._broadcasted(x, reverse)
        if rounding_mode is not None:
            _check_int_divisor(a, x, reverse, f"div(rounding_mode={rounding_mode!r})")
        if rounding_mode == "trunc":
            return a._alu(Ops.IDIV, b) if dtypes.is_int(a.dtype) else a.div(b).trunc()
        if rounding_mode == "floor":
            return a._floordiv(b)
        if rounding_mode is not None:
            raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
        fdt = least_upper_float(a.dtype)
        return a.cast(fdt)._alu(Ops.FDIV, b.cast(fdt))

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Integer division rounding toward zero (tinygrad's; torch's div(rounding_mode='trunc'))."""
        return self.div(x, reverse, rounding_mode="trunc")

    def _floordiv(self, b: Tensor) -> Tensor:
        if dtypes.is_float(self.dtype):
            # through the exact remainder, as torch does, so that a == (a // b) * b + a % b as closely as floats
            # allow: floor(a / b) alone gives 10 for 1.0 // 0.1, where the remainder says 9
            r = self._alu(Ops.MOD, b)
            d = (self - r)._alu(Ops.FDIV, b)
            d = ((r != 0) & ((r < 0) != (b < 0))).where(d - 1, d)
            q = d.floor()
            q = (d - q > 0.5).where(q + 1, q)
            q = (d == 0).where(self._alu(Ops.FDIV, b) * 0, q)  # a zero with a / b's sign: -0.0 // 1 is -0.0
            return (b == 0).where(self._alu(Ops.FDIV, b), q)
        q = self._alu(Ops.IDIV, b)
        # C truncates toward zero; floor needs one less when the signs differ and the division is inexact
        if dtypes.is_unsigned(self.dtype):
            return q
        r = self._alu(Ops.MOD, b)
        fix = r._alu(Ops.CMPNE, r.zeros_like()) & (self < 0)._alu(Ops.CMPNE, (b < 0))
        return fix.where(q - 1, q)

    def floordiv(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        _check_int_divisor(a, x, reverse, "floor division")
        return a._floordiv(b)

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor, like torch.remainder and Python's %."""
        a, b = self._broadcasted(x, reverse)
        _check_int_divisor(a, x, reverse, "remainder")
        return a._mod(b)

    def _mod(self, b: Tensor) -> Tensor:
        if dtypes.is_unsigned(self.dtype):
            return self._alu(Ops.MOD, b)
        # C's % and fmod keep the dividend's sign; torch's remainder takes the divisor's
        r = self._alu(Ops.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(r + b, r)

    def fmod(self, x: Any) -> Tensor:
        """Remainder with the sign of the dividend (C fmod)."""
        a, b = self._broadcasted(x)
        _check_int_divisor(a, x, False, "fmod")
        return a._alu(Ops.MOD, b)

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        if not reverse and isinstance(x, int) and x < 0 and not dtypes.is_float(self.dtype):
            raise RuntimeError("Integers to negative integer powers are not allowed.")  # torch's error, word for word
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if x == 2:
                return self * self
            if x == 1:
                return _new_value(self)
            # torch's special cases: x ** 0.5 and x ** -0.5 are sqrt and rsqrt (NaN at -inf, where C's pow gives +inf
            # and 0); the gradient stays -0.5 x ** -1.5 (-0.0 at -inf, where rsqrt's chain rule gives NaN)
            if x == 0.5 and dtypes.is_float(self.dtype):
                return self.sqrt()
            if x == -0.5 and dtypes.is_float(self.dtype):
                return self._with_derivative(self.rsqrt(), lambda v: v.pow(-1.5) * -0.5)
            if x == -1 and dtypes.is_float(self.dtype):
                return self.reciprocal()
        a, b = self._broadcasted(x, reverse)
        return a._alu(Ops.POW, b)

    def maximum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        return a._alu(Ops.MAX, b)

    def minimum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        return (a < b).where(a, b) if not dtypes.is_float(a.dtype) else -((-a).maximum(-b))

    def where(self, x: Any = None, y: Any = None) -> Tensor | tuple[Tensor, ...]:
        """tinygrad's `cond.where(x, y)`. torch's method order, `x.where(cond, y)`, is taken where it is the only
        reading: self is not bool and the first argument is a bool tensor (as a condition, a number tensor means
        "not zero"; torch requires a bool condition). A bool self is always the condition. `torch.where(cond)` alone
        is cond.nonzero(as_tuple=True)."""
        if x is None and y is None:
            return self.nonzero(as_tuple=True)
        is_bool = self.dtype == dtypes.bool
        if not is_bool and isinstance(x, Tensor) and x.dtype == dtypes.bool:
            return x.where(self, y)
        cond = self if is_bool else self.cast(dtypes.bool)
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            xb, yb = x._broadcasted(y)
        elif isinstance(x, Tensor):
            xb, yb = x._broadcasted(y)
        elif isinstance(y, Tensor):
            yb, xb = y._broadcasted(x)
        else:
            dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
            xb = Tensor(Tensor._const_uop(x, dt, self.device))
            yb = Tensor(Tensor._const_uop(y, dt, self.device))
        shape = _broadcast_shape(cond.shape, _broadcast_shape(xb.shape, yb.shape))
        c, a, b = cond._broadcast_to(shape), xb._broadcast_to(shape), yb._broadcast_to(shape)
        return _result(UOp(Ops.WHERE, a.dtype, (c.uop, a.uop, b.uop)))

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        return mask.where(value, self)

    # comparisons
    def __lt__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return a._alu(Ops.CMPLT, b)

    def __gt__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x, reverse=True)
        return a._alu(Ops.CMPLT, b)

    # not(a < b) would be one op, but every comparison with NaN is false, so floats need (a > b) | (a == b)
    def __ge__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return (b < a) | (a == b) if dtypes.is_float(a.dtype) else (a < b).logical_not()

    def __le__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return (a < b) | (a == b) if dtypes.is_float(a.dtype) else (b < a).logical_not()

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return a._alu(Ops.CMPEQ, b)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        a, b = self._broadcasted(x)
        return a._alu(Ops.CMPNE, b)

    def eq(self, x: Any) -> Tensor:
        return self == x

    def ne(self, x: Any) -> Tensor:
        return self != x

    def lt(self, x: Any) -> Tensor:
        return self < x

    def gt(self, x: Any) -> Tensor:
        return self > x

    def le(self, x: Any) -> Tensor:
        return self <= x

    def ge(self, x: Any) -> Tensor:
        return self >= x

    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor.full(self.shape, True, device=self.device))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False, name: str | None = None) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        # a shift of bools has no bits to move (torch has no kernel for it; the IR verifier refuses SHL / SHR of bool)
        if dtypes.is_float(a.dtype) or (a.dtype == dtypes.bool and op in (Ops.SHL, Ops.SHR)):
            names = {
                Ops.AND: "bitwise_and (&)",
                Ops.OR: "bitwise_or (|)",
                Ops.XOR: "bitwise_xor (^)",
                Ops.SHL: "lshift (<<)",
                Ops.SHR: "rshift (>>)",
            }
            hint = (
                "shifts take integer tensors"
                if op in (Ops.SHL, Ops.SHR)
                else "bitwise ops take integer or bool tensors"
            )
            raise _unsupported(name or names[op], a, hint)
        return a._alu(op, b)

    def bitwise_and(self, x: Any, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.AND, x, reverse)

    def bitwise_or(self, x: Any, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.OR, x, reverse)

    def bitwise_xor(self, x: Any, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.XOR, x, reverse)

    def bitwise_not(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        ones = -1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype)
        return self._bitwise(Ops.XOR, ones, name="bitwise_not (~)")

    def lshift(self, x: int, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.SHL, x, reverse)

    def rshift(self, x: int, reverse: bool = False) -> Tensor:
        return self._bitwise(Ops.SHR, x, reverse)

    def bitwise_left_shift(self, other: Any) -> Tensor:
        """torch's name for <<: shifts of the dtype's width or more give 0, as torch's."""
        return self._bitwise(Ops.SHL, other)

    def bitwise_right_shift(self, other: Any) -> Tensor:
        """torch's name for >>: shifts of the dtype's width or more give 0, or -1 for a negative value."""
        return self._bitwise(Ops.SHR, other)

    def __and__(self, x: Any) -> Tensor:
        return self.bitwise_and(x)

    def __or__(self, x: Any) -> Tensor:
        return self.bitwise_or(x)

    def __xor__(self, x: Any) -> Tensor:
        return self.bitwise_xor(x)

    def __rand__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x, True)

    def __ror__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x, True)

    def __rxor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x, True)

    def __invert__(self) -> Tensor:
        return self.bitwise_not()

    def __lshift__(self, x: int) -> Tensor:
        return self.lshift(x)

    def __rshift__(self, x: int) -> Tensor:
        return self.rshift(x)

    def __rlshift__(self, x: int) -> Tensor:
        return self._bitwise(Ops.SHL, x, True)

    def __rrshift__(self, x: int) -> Tensor:
        return self._bitwise(Ops.SHR, x, True)

    # arithmetic operators; the three most used are their methods themselves (a Python frame less on every one)
    __add__ = add

    def __radd__(self, x: Any) -> Tensor:
        return self.add(x, True)

    __sub__ = sub

    def __rsub__(self, x: Any) -> Tensor:
        return self.sub(x, True)

    __mul__ = mul

    def __rmul__(self, x: Any) -> Tensor:
        return self.mul(x, True)

    def __truediv__(self, x: Any) -> Tensor:
        return self.div(x)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __floordiv__(self, x: Any) -> Tensor:
        return self.floordiv(x)

    def __rfloordiv__(self, x: Any) -> Tensor:
        return self.floordiv(x, True)

    def __mod__(self, x: Any) -> Tensor:
        return self.mod(x)

    def __rmod__(self, x: Any) -> Tensor:
        return self.mod(x, True)

    def __pow__(self, x: Any) -> Tensor:
        return self.pow(x)

    def __rpow__(self, x: Any) -> Tensor:
        return self.pow(x, True)

    def __neg__(self) -> Tensor:
        return self.neg()

    def __abs__(self) -> Tensor:
        return self.abs()

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __rmatmul__(self, x: Any) -> Tensor:
        return Tensor(x, device=self.device).matmul(self)

    # in place, as torch and tinygrad: `x += y` writes into x's memory (through a view into what it shows)
    def _inplace(self, result: Tensor) -> Tensor:
        _check_inplace_allowed(self)
        if result.shape != self.shape:
            raise ArgumentError(f"an in-place op cannot change the shape {self.shape} to {result.shape}")
        if dtypes.is_float(result.dtype) and not dtypes.is_float(self.dtype):
            raise ArgumentError(
                f"result type {result.dtype.name} can't be cast to the {self.dtype.name} tensor it goes in"
            )
        return self.assign(result.cast(self.dtype))

    def __iadd__(self, x: Any) -> Tensor:
        return self._inplace(self + x)

    def __isub__(self, x: Any) -> Tensor:
        return self._inplace(self - x)

    def __imul__(self, x: Any) -> Tensor:
        return self._inplace(self * x)

    def __itruediv__(self, x: Any) -> Tensor:
        return self._inplace(self / x)

    def __ifloordiv__(self, x: Any) -> Tensor:
        return self._inplace(self // x)

    def __imod__(self, x: Any) -> Tensor:
        return self._inplace(self % x)

    def __ipow__(self, x: Any) -> Tensor:
        return self._inplace(self**x)

    def __imatmul__(self, x: Tensor) -> Tensor:
        return self._inplace(self @ x)

    def __iand__(self, x: Any) -> Tensor:
        return self._inplace(self & x)

    def __ior__(self, x: Any) -> Tensor:
        return self._inplace(self | x)

    def __ixor__(self, x: Any) -> Tensor:
        return self._inplace(self ^ x)

    def __ilshift__(self, x: int) -> Tensor:
        return self._inplace(self << x)

    def __irshift__(self, x: int) -> Tensor:
        return self._inplace(self >> x)

    # unary math
    def _float_unary(self, op: Ops) -> Tensor:
        x = self.cast(least_upper_float(self.dtype))
        return x._alu(op)

    def _in_float32(self, fn: Any) -> Tensor:
        """Composite math on float16/bfloat16 runs in float32 and rounds once, as torch does; each rounding to half
        inside a composite (x * log2(e) before exp2, pi/2 - x before sin) would cost several ulps of the result."""
        if self.dtype in HALF_FLOATS:
            return fn(self.float()).cast(self.dtype)
        return fn(self.cast(least_upper_float(self.dtype)))

    def _with_derivative(self, out: Tensor, deriv: Callable[[Tensor], Tensor]) -> Tensor:
        """out = f(self), differentiated by f' as torch states it rather than by the chain rule through f's composite
        formula, which gives NaN at the edges of the domain where torch's f' gives +-inf (asin at +-1)."""
        if dtypes.is_float(self.dtype):
            from lazygrad.gradient import define_gradient

            src = self.uop
            define_gradient(out.uop, src, lambda g: g * deriv(Tensor(src)))
        return out

    def neg(self) -> Tensor:
        if self.dtype == dtypes.bool:
            raise _unsupported("negation (-)", self, "use logical_not or ~")
        return self._alu(Ops.NEG)

    def reciprocal(self) -> Tensor:
        return self._float_unary(Ops.RECIP)

    def sqrt(self) -> Tensor:
        return self._float_unary(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        return self.sqrt().reciprocal()

    def exp2(self) -> Tensor:
        return self._float_unary(Ops.EXP2)

    def log2(self) -> Tensor:
        return self._float_unary(Ops.LOG2)

    def exp(self) -> Tensor:
        if self.dtype == dtypes.float64:
            return self._with_derivative(_exp_float64(self), lambda x: x.exp())
        return self._in_float32(lambda x: x.mul(1 / math.log(2)).exp2())

    def expm1(self) -> Tensor:
        """exp(x) - 1, exact to the last digits for small x, where exp(x) - 1 would cancel to 0 (torch.expm1)."""
        return self._with_derivative(self._in_float32(_expm1), lambda x: x.exp())

    def log1p(self) -> Tensor:
        """log(1 + x), exact to the last digits for small x, where 1 + x would round to 1 (torch.log1p)."""
        return self._with_derivative(self._in_float32(_log1p), lambda x: (1 + x).reciprocal())

    def log(self) -> Tensor:
        return self._in_float32(lambda x: x.log2().mul(math.log(2)))

    def log10(self) -> Tensor:
        return self._in_float32(lambda x: x.log2().mul(math.log10(2)))

    def sin(self) -> Tensor:
        return self._float_unary(Ops.SIN)

    def cos(self) -> Tensor:
        return self._float_unary(Ops.COS)

    def tan(self) -> Tensor:
        return self._in_float32(lambda x: x.sin() / x.cos())

    def square(self) -> Tensor:
        return self * self

    def asin(self) -> Tensor:
        # x / sqrt((1-x)(1+x)) is +-inf at +-1, where atan gives +-pi/2; the product keeps precision near 1
        out = self._in_float32(lambda x: _atan(x / ((1 - x) * (1 + x)).sqrt()))
        return self._with_derivative(out, lambda x: (1 - x * x).rsqrt())

    def acos(self) -> Tensor:
        # 2 atan(sqrt((1-x)/(1+x))): no cancellation near x = 1, where pi/2 - asin(x) would lose every digit
        out = self._in_float32(lambda x: 2 * _atan(((1 - x) / (1 + x)).sqrt()))
        return self._with_derivative(out, lambda x: -(1 - x * x).rsqrt())

    def atan(self) -> Tensor:
        return self._in_float32(_atan)

    def sinh(self) -> Tensor:
        return self._in_float32(lambda x: _odd(x, lambda a: _sinh_cosh_pos(a, odd=True)))

    def cosh(self) -> Tensor:
        def fn(x: Tensor) -> Tensor:
            a = (x < 0).where(-x, x)
            return _sinh_cosh_pos(a, odd=False)

        return self._in_float32(fn)

    def asinh(self) -> Tensor:
        def positive(a: Tensor) -> Tensor:
            # log1p(a + a^2 / (1 + sqrt(1 + a^2))) = log(a + sqrt(a^2 + 1)), without cancellation for small a;
            # above 2^26 a^2 + 1 == a^2 (and overflows near 1.8e19): log(2a)
            huge = a > 2.0**26
            small = huge.where(1.0, a)
            moderate = _log1p(small + small * small / (1 + (small * small + 1).sqrt()))
            return huge.where(huge.where(a, 1.0).log() + math.log(2), moderate)

        return self._in_float32(lambda x: _odd(x, positive))

    def acosh(self) -> Tensor:
        def fn(x: Tensor) -> Tensor:
            huge = x > 2.0**26
            t = huge.where(1.0, x) - 1
            # log1p(t + sqrt(t) sqrt(t + 2)) with t = x - 1 keeps the digits near x = 1, is NaN below 1 as torch
            # (sqrt of a negative t) and never overflows
            return huge.where(huge.where(x, 1.0).log() + math.log(2), _log1p(t + t.sqrt() * (t + 2).sqrt()))

        return self._with_derivative(self._in_float32(fn), lambda x: (x * x - 1).rsqrt())

    def atanh(self) -> Tensor:
        out = self._in_float32(lambda x: 0.5 * _log1p(2 * x / (1 - x)))
        return self._with_derivative(out, lambda x: (1 - x * x).reciprocal())

    def trunc(self) -> Tensor:
        return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else _new_value(self)

    def floor(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return _new_value(self)
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return _new_value(self)
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def round(self) -> Tensor:
        """Round half to even, like torch.round and numpy.round."""
        if not dtypes.is_float(self.dtype):
            return _new_value(self)
        f = self.floor()
        diff = self - f
        even = (f * 0.5).trunc() * 2 == f
        out = (diff > 0.5).where(f + 1, (diff < 0.5).where(f, even.where(f, f + 1)))
        return (out == 0).where(self * 0, out)  # a zero keeps x's sign: round(-0.4) is -0.0, as torch's

    def abs(self) -> Tensor:
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
            return _new_value(self)
        if dtypes.is_float(self.dtype):
            # max(0.0, -0.0) may pick either zero; |x| is +0.0 there (1 / |x| = inf), with gradient 0 as in torch
            return (self == 0).where(self.zeros_like(), self.maximum(-self))
        return (self < 0).where(-self, self)

    def sign(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return _new_value(self)
        one, zero = self.ones_like(), self.zeros_like()
        if dtypes.is_float(self.dtype):
            # sign(NaN) is 0, as torch's (numpy: NaN). |x| where x is +-0 is +0.0 and ties the result to x, with
            # torch's gradient 0 everywhere (a where over comparisons alone would leave x no gradient at all)
            zero = (self == 0).where(self.abs(), zero)
        return (self > 0).where(one, (self < 0).where(-one if not dtypes.is_unsigned(self.dtype) else zero, zero))

    def clip(self, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        """torch.clamp: min(max(x, min), max), NaN where x or a bound is NaN. The gradient is torch's mask
        min <= x <= max: 0 at a NaN x, and a value equal to a bound keeps its gradient (wheres, not maximum / minimum,
        which would split it with the bound). Bounds by tinygrad's names (min_, max_) or torch's."""
        min_, max_ = min if min_ is None else min_, max if max_ is None else max_
        if min_ is None and max_ is None:
            raise ArgumentError("clip needs at least one of min and max")
        if not dtypes.is_float(self.dtype):
            x = self if min_ is None else (self < min_).where(min_, self)
            return x if max_ is None else (x > max_).where(max_, x)
        # as relu: the value from a detached x, the gradient mask in the outer where
        x, keep = self.detach(), None
        if min_ is not None:
            x = (_nan_or(x < min_, min_)).where(min_, x)
            keep = self >= min_
        if max_ is not None:
            x = (_nan_or(x > max_, max_)).where(max_, x)
            keep = self <= max_ if keep is None else keep & (self <= max_)
        return keep.where(self, x)

    clamp = clip

    @_replayed
    def relu(self) -> Tensor:
        # wheres, not maximum(0): torch's gradient is g where not x <= 0 (0 at 0, NaN's passed; maximum would split it
        # at 0). torch's value is x < 0 ? 0 : x (relu(-0.0) is -0.0): the outer where carries the gradient, its value
        # where x <= 0 comes from a detached x, and the kernel is x < 0 ? 0 : x alone (kernelize._build_where). The
        # mask is recomputed inside the backward kernel, which loads the relu's input anyway (no extra kernel)
        x = self.detach()
        return (self <= 0).where((x < 0).where(0, x), self)

    def sigmoid(self) -> Tensor:
        return self._in_float32(_sigmoid)

    def tanh(self) -> Tensor:
        out = self._in_float32(_tanh)
        node = weakref.ref(out.uop)
        return self._with_derivative(out, lambda x: 1 - _from_node(node, x.dtype).square())

    def erf(self) -> Tensor:
        return self._with_derivative(self._in_float32(_erf), lambda x: (-x * x).exp() * (2 / math.sqrt(math.pi)))

    def gelu(self, approximate: str = "tanh") -> Tensor:
        """GELU. The tanh approximation by default, as tinygrad's Tensor.gelu; approximate="none" is the exact
        x * Phi(x) (torch.nn.functional.gelu's default)."""
        if approximate == "tanh":
            return self._in_float32(
                lambda x: 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
            )
        if approximate != "none":
            raise ArgumentError(f"gelu approximate must be 'none' or 'tanh', not {approximate!r}")
        return self._in_float32(lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()))

    def silu(self) -> Tensor:
        return self * self.sigmoid()

    swish = silu

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        def fn(x: Tensor) -> Tensor:
            bx = x * beta
            linear = bx > threshold
            # exp only below the threshold: exp(1000) = inf in the unused branch would make its gradient 0 * inf
            return linear.where(x, linear.where(0, bx).exp().log1p() * (1 / beta))

        return self._in_float32(fn)

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        return (self > 0).where(self, self * neg_slope)

    def elu(self, alpha: float = 1.0) -> Tensor:
        pos = self > 0
        # exp only of the non-positive part: exp of a large x would overflow, and 0 * inf is a NaN gradient
        return pos.where(self, alpha * pos.where(0, self).expm1())

    def relu6(self) -> Tensor:
        return self.hardtanh(0, 6)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        # torch's value: a bound where x passes it, else x (a zero keeps its sign: relu6(-0.0) is -0.0); its gradient is
        # zero at the bounds themselves and at NaN (torch's vector kernel; its scalar tail gives 1). As relu: the outer
        # wheres carry the gradient, the inner ones over a detached x the value, and the kernel keeps
        # x < min ? min : (max < x ? max : x) (kernelize._build_where finds x < min among the mask's own terms)
        x = self.detach()
        clipped = (x < min_val).where(min_val, (x > max_val).where(max_val, x))
        upper = (self >= max_val).where((x > max_val).where(max_val, x), self)
        return ((self < min_val) | ((self == min_val) | self.isnan())).where(clipped, upper)

    def isnan(self) -> Tensor:
        return self != self

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        pos = (self == math.inf) if detect_positive else self.zeros_like(dtypes.bool)
        return (pos | (self == -math.inf)) if detect_negative else pos

    # dtype conversion
    def cast(self, dtype: DType | str) -> Tensor:
        if dtype is self.uop.dtype:  # (the no-op cast dtype rules ask for, without to_dtype's and __eq__'s calls)
            return self
        dt = to_dtype(dtype)
        if dt == self.dtype:
            return self
        _check_dtype("cast", dt, self.device)
        if self._view_of is not None:
            _follow_base(self)
        return _result(UOp(Ops.CAST, dt, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bytes read as `dtype` (torch's view(dtype)). To a dtype of another size the last dim scales by the
        ratio of the sizes: float32 (..., n) -> float16 (..., 2n), uint8 (..., 4n) -> float32 (..., n)."""
        dt = to_dtype(dtype)
        if dt == self.dtype:
            return self
        _check_dtype("bitcast", dt, self.device)
        if dt.itemsize != self.dtype.itemsize:
            out = self._bitcast_resized(dt)
        else:
            out = _result(UOp(Ops.BITCAST, dt, (self.uop,)))
        # the same memory read as other bits (torch's view(dtype)); a write into a resized one is refused (its
        # node is no chain of views back to this memory)
        out._view_of = self._view_of or (self, self.uop)
        return out

    def _bitcast_resized(self, dt: DType) -> Tensor:
        """A bitcast between sizes as integer ops on unsigned words (little-endian, as every lazygrad device): the
        wide word's low bytes are the first narrow one. One fused kernel; no copy of the bytes beforehand."""
        src, ratio = self.dtype, max(dt.itemsize, self.dtype.itemsize) // min(dt.itemsize, self.dtype.itemsize)
        what = f"bitcast from {src} ({src.itemsize} bytes) to {dt} ({dt.itemsize} bytes)"
        if dtypes.bool in (src, dt):
            raise TypeError(f"{what}: bool takes a bitcast from or to a 1-byte dtype only")
        if self.ndim == 0:
            raise ArgumentError(f"{what}: a 0-d tensor cannot change its element size")
        if dt.itemsize > src.itemsize and self.shape[-1] % ratio != 0:
            raise ArgumentError(f"{what}: the last dim ({self.shape[-1]}) must be divisible by {ratio}")
        uint = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
        narrow, wide = uint[min(src.itemsize, dt.itemsize)], uint[max(src.itemsize, dt.itemsize)]
        shifts = Tensor.arange(ratio, device=self.device).cast(wide) * (8 * narrow.itemsize)
        if dt.itemsize < src.itemsize:
            words = self.bitcast(wide).unsqueeze(-1)
            parts = (words >> shifts).cast(narrow)  # the cast keeps the low bits
            return parts.flatten(-2).bitcast(dt)
        parts = self.bitcast(narrow).reshape(*self.shape[:-1], self.shape[-1] // ratio, ratio).cast(wide)
        # the shifted parts cover disjoint bits: their sum is their bitwise or
        return (parts << shifts).sum(-1, dtype=wide).bitcast(dt)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    # *** reductions ***

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        if self._view_of is not None:
            _follow_base(self)
        axes = _axes(axis, self.ndim)
        if op is Ops.MAX and any(self.shape[a] == 0 for a in axes):
            raise _EmptyReductionError(f"max/min over a zero-size dimension of shape {self.shape} has no identity")
        if not axes:
            # nothing to reduce (a 0-d tensor's sum): a new tensor as torch's, not self (a write into one showed in the
            # other)
            return _new_value(self)
        if any(self.shape[a] == 0 for a in axes) and dtypes.is_float(self.dtype):
            # the reduce of one identity padded on: the result keeps x in its graph, and backward gives x torch's zero
            # gradient (a constant result left x none, and backward raised)
            identity = 0.0 if op is Ops.ADD else 1.0
            widths = tuple((0, 1) if i in axes and n == 0 else (0, 0) for i, n in enumerate(self.shape))
            return self.pad(widths, value=identity)._reduce(op, axes, keepdim)
        if any(self.shape[a] == 0 for a in axes):
            # an empty reduce is its identity; codegen never sees a loop over zero elements
            return Tensor.full(
                _reduced_shape(self.shape, axes, keepdim),
                0 if op is Ops.ADD else 1,
                dtype=self.dtype,
                device=self.device,
            )
        out = UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))
        if keepdim:
            return Tensor(out)
        # the reshape dropping the reduced axes built as its node, not by Tensor.reshape (its checks, a second tensor):
        # one tensor per reduction, which owns its values as torch's result does (no view of a temporary: a view is
        # realized by the general path, and would keep that temporary alive). Under no_grad every tensor detaches its
        # node: the reduce's tensor is made, so the graph keeps its DETACH as before
        kept = tuple([s for i, s in enumerate(self.shape) if i not in axes])
        if _modes.grad_disabled:
            out = _result(out).uop
        return _result(UOp(_RESHAPE, out.dtype, (out,), kept))

    def sum(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | str | None = None,
        *,
        dim: Any = None,
    ) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = _torch_dims(dim)
        if dtype is None and _FLOAT_KEYS.get(self.uop.dtype.key) and self.uop.dtype.key not in _HALF_KEYS:
            return self._reduce(Ops.ADD, axis, keepdim)  # a float sum in its own dtype: no casts to ask for
        out_dt = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        acc_dt = dtypes.float32 if out_dt in HALF_FLOATS else out_dt
        return self.cast(acc_dt)._reduce(Ops.ADD, axis, keepdim).cast(out_dt)

    def prod(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | str | None = None,
        *,
        dim: Any = None,
    ) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        out_dt = to_dtype(dtype) if dtype is not None else sum_acc_dtype(self.dtype)
        acc_dt = dtypes.float32 if out_dt in HALF_FLOATS else out_dt
        return self.cast(acc_dt)._reduce(Ops.MUL, axis, keepdim).cast(out_dt)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: Any = None) -> Any:
        """The maximum over `axis` (tinygrad's: a tensor). Given torch's `dim=`, torch's (values, indices)."""
        if dim is not None:
            idx = self.argmax(dim, keepdim)
            return ValuesIndices(self._at_index(idx, dim, keepdim, lambda: self._reduce(Ops.MAX, dim, keepdim)), idx)
        return self._reduce(Ops.MAX, axis, keepdim)

    def _at_index(self, idx: Tensor, dim: int, keepdim: bool, plain: Callable[[], Tensor]) -> Tensor:
        """The values of torch's (values, indices) of a max / min along dim: with a gradient, gathered at idx, so that
        it goes to the element the index names, as torch's (not shared among ties and NaNs as a max's); else plain()."""
        if not self.requires_grad or self.ndim == 0:
            return plain()
        d = _dim(dim, self.ndim)
        v = self.gather(d, idx if keepdim else idx.unsqueeze(d))
        return v if keepdim else v.squeeze(d)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: Any = None) -> Any:
        """The minimum over `axis` (tinygrad's: a tensor). Given torch's `dim=`, torch's (values, indices)."""
        if dim is not None:
            idx = self.argmin(dim, keepdim)
            return ValuesIndices(self._at_index(idx, dim, keepdim, lambda: self.min(dim, keepdim)), idx)
        if dtypes.is_float(self.dtype):
            return -((-self).max(axis, keepdim))
        if self.dtype == dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        # ~x reverses the order of every integer type without overflow
        return ~((~self).max(axis, keepdim))

    @_rounds_once
    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = _torch_dims(dim)
        axes = _axes(axis, self.ndim)
        n = prod(self.shape[a] for a in axes)
        fdt = least_upper_float(self.dtype)
        total = self.cast(fdt).sum(axis, keepdim)
        return total / n if n else total * math.nan

    @_rounds_once
    def var(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        correction: int = 1,
        *,
        dim: Any = None,
        unbiased: bool | None = None,
    ) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = _torch_dims(dim)
        if unbiased is not None:  # torch's older spelling of correction=1 / correction=0
            correction = int(unbiased)
        axes = _axes(axis, self.ndim)
        n = prod(self.shape[a] for a in axes)
        x = self.cast(least_upper_float(self.dtype))
        sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        dof = ssimplify(n - correction)  # symbolic where a reduced size is a Variable
        if (known := sym_known(dof)) is not None and known <= 0:
            warnings.warn(
                f"var(): degrees of freedom is <= 0 ({n} elements, correction {correction}): the result is inf or NaN",
                stacklevel=2,
            )
        return sq / ssmax(0, dof)

    @_rounds_once
    def std(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        correction: int = 1,
        *,
        dim: Any = None,
        unbiased: bool | None = None,
    ) -> Tensor:
        """The square root of var (its arguments, torch's spellings too)."""
        return _root(self.var(axis, keepdim, correction, dim=dim, unbiased=unbiased), 2)

    @_replayed
    def _arg_extreme(self, axis: int | None, keepdim: bool, largest: bool) -> Tensor:
        x = (
            self
            if largest
            else (-self if dtypes.is_float(self.dtype) else ~self if self.dtype != dtypes.bool else self.logical_not())
        )
        if axis is None:
            return x.flatten()._arg_extreme(0, False, True).reshape(() if not keepdim else (1,) * self.ndim)
        d = _dim(axis, self.ndim)
        if self.ndim == 0:
            return Tensor.zeros((), dtype=dtypes.default_int, device=self.device)
        n = self.shape[d]
        if n == 0:
            raise _EmptyReductionError(f"argmax/argmin over a zero-size dimension of shape {self.shape}")
        is_max = x == x.max(d, keepdim=True)
        if dtypes.is_float(x.dtype):
            is_max = is_max | x.isnan()  # max is NaN where one is: like torch, the first NaN wins
        # the first maximal index wins: score n - i for maxima, 0 elsewhere
        rev = (Tensor.arange(n, 0, -1, device=self.device)).reshape((n,) + (1,) * (self.ndim - d - 1))
        score = is_max.where(rev, 0).max(d, keepdim=keepdim)
        # every index-returning op gives the default int (int32), as tinygrad; torch gives int64
        return (n - score).cast(dtypes.default_int)

    def argmax(self, axis: int | None = None, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        return self._arg_extreme(axis, keepdim, True)

    def argmin(self, axis: int | None = None, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        return self._arg_extreme(axis, keepdim, False)

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        return (
            self.bool()._reduce(Ops.MAX, axis, keepdim)
            if self.numel()
            else Tensor.full(_reduced_shape(self.shape, axis, keepdim), False, device=self.device)
        )

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        return self.logical_not().any(axis, keepdim).logical_not()

    # *** composites built on the primitives above ***

    def dot(self, w: Tensor, dtype: DType | str | None = None) -> Tensor:
        """dtype (tinygrad's): the product's accumulation and result dtype; the inputs are cast to it, which is
        the same sum (a product of two halves, or of two int8s, is exact in float32 / int32)."""
        if dtype is None and _modes.autocast is not None:
            dtype = _autocast_dtype(self, w)
        if dtype is not None:
            return self.cast(dtype).dot(w.cast(dtype))
        if self.ndim == 0 or w.ndim == 0:
            raise ArgumentError(f"matmul needs at least 1-d tensors, got shapes {self.shape} and {w.shape}")
        k = self.shape[-1]
        kw = w.shape[-2] if w.ndim > 1 else w.shape[0]
        if k != kw:
            raise ArgumentError(f"matmul shape mismatch: {self.shape} @ {w.shape} ({k} != {kw})")
        node = _matmul_node(self, w)
        return Tensor(node) if node is not None else self._dot_composed(w)

    def _dot_composed(self, w: Tensor) -> Tensor:
        """matmul from tensor ops: x as (..., m, 1, k), w as (..., 1, n, k), their product summed over k. What
        _matmul_node builds directly where it can; the rest (mixed dtypes, symbolic sizes, k = 0, several devices)."""
        k = self.shape[-1]
        x = self.reshape(*self.shape[:-1], *(1,) * min(w.ndim - 1, 1), k)
        wt = w.reshape(*w.shape[:-2], *(1,) * min(self.ndim - 1, 1), *w.shape[-min(w.ndim, 2) :]).transpose(
            -1, -min(w.ndim, 2)
        )
        if dtypes.is_float(self.dtype):
            return _product_sum(x, wt, -1)
        return (x * wt).sum(-1, dtype=least_upper_dtype(self.dtype, w.dtype))

    def matmul(self, w: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
        return w.dot(self, dtype) if reverse else self.dot(w, dtype)

    @_replayed
    def linear(self, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
        """x @ weight.T + bias, with weight (out_features, in_features) as in torch. dtype (tinygrad's): computed
        in that dtype (the inputs are cast to it)."""
        if dtype is None and _modes.autocast is not None:  # (the bias too: torch's autocast linear gives the low dtype)
            dtype = _autocast_dtype(self, weight, *([] if bias is None else [bias]))
        if dtype is not None:
            return self.cast(dtype).linear(weight.cast(dtype), None if bias is None else bias.cast(dtype))
        if weight.ndim not in (1, 2) or self.ndim == 0 or self.shape[-1] != weight.shape[-1]:
            raise ArgumentError(
                f"linear: input shape {self.shape} does not match weight shape {weight.shape} "
                "(weight must be (out_features, in_features) or (in_features,))"
            )
        out = self.dot(weight.T)
        return out if bias is None else out + bias

    def sequential(self, layers: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
        return functools.reduce(lambda x, f: f(x), layers, self)

    # *** convolution and pooling: a sliding-window view made of movement ops, then one reduce ***

    def _pool(
        self,
        kernel: tuple[int, ...],
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        pads: Sequence[tuple[int, int]] | None = None,
    ) -> Tensor:
        """View (..., *spatial) as (..., *out, *kernel): every window, without copying; with `pads`, of the spatial
        dims zero-padded (before, after) first, whose gradient then only computes the unpadded positions."""
        if pads is not None and any(p != (0, 0) for p in pads):
            windows = self._spatial_pad(pads)._pool(kernel, stride, dilation)
            if any(lo < 0 or hi < 0 for lo, hi in pads):  # a negative pad crops: the padded input's gradient pads
                return windows
            if prod(kernel) <= _WINDOW_GRAD_TERMS:
                from lazygrad.gradient import define_gradient

                i_, nk = self.shape[-len(kernel) :], len(kernel)
                o_ = windows.shape[-2 * nk : -nk]
                padded = [i + lo + hi for i, (lo, hi) in zip(i_, pads)]
                s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
                rule = functools.partial(_window_grad, i_=padded, o_=o_, k_=kernel, s_=s_, d_=d_, crop=pads)
                define_gradient(windows.uop, self.uop, rule)
            return windows
        nk = len(kernel)
        batch, i_ = self.shape[:-nk], self.shape[-nk:]
        s_, d_, o_ = _windows(i_, kernel, stride, dilation)
        nb = len(batch)
        keep: list[tuple[int, int] | None] = [None] * nb
        if all(d == 1 and s >= k for d, s, k in zip(d_, s_, kernel)):
            # windows that do not overlap (max_pool2d(2)) are a reshape: its gradient is a reshape too, where the
            # general path's gradient has to sum over every copy of the repeated input
            x = self.pad(keep + [(0, max(0, o * s - i)) for o, s, i in zip(o_, s_, i_)])
            x = x.shrink(keep + [(0, o * s) for o, s in zip(o_, s_)])
            x = x.reshape(*batch, *flatten((o, s) for o, s in zip(o_, s_)))
            x = x.shrink(keep + flatten(((0, o), (0, k)) for o, k in zip(o_, kernel)))
            return x.permute(*range(nb), *[nb + 2 * i for i in range(nk)], *[nb + 2 * i + 1 for i in range(nk)])
        # repeat each spatial dim k times with period i*f+d: window j of copy t starts at j + t*d after the reshape
        f_ = [1 + int(o * s > i - d * (k - 1)) for o, s, i, d, k in zip(o_, s_, i_, d_, kernel)]
        x = self.repeat([1] * nb + [ceildiv(k * (i * f + d), i) for k, i, d, f in zip(kernel, i_, d_, f_)])
        x = x.shrink(keep + [(0, k * (i * f + d)) for k, i, d, f in zip(kernel, i_, d_, f_)])
        x = x.reshape(*batch, *flatten((k, i * f + d) for k, i, d, f in zip(kernel, i_, d_, f_)))
        # stride: keep the first of every s positions
        x = x.shrink(keep + flatten(((0, k), (0, o * s)) for k, o, s in zip(kernel, o_, s_)))
        x = x.reshape(*batch, *flatten((k, o, s) for k, o, s in zip(kernel, o_, s_)))
        x = x.shrink(keep + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(kernel, o_)))
        x = x.reshape(*batch, *flatten((k, o) for k, o in zip(kernel, o_)))
        x = x.permute(*range(nb), *[nb + 2 * i + 1 for i in range(nk)], *[nb + 2 * i for i in range(nk)])
        if prod(kernel) <= _WINDOW_GRAD_TERMS:
            from lazygrad.gradient import define_gradient

            define_gradient(x.uop, self.uop, functools.partial(_window_grad, i_=i_, o_=o_, k_=kernel, s_=s_, d_=d_))
        return x

    def _pool_pads(self, padding: int | Sequence[int], dims: int) -> list[tuple[int, int]]:
        """(before, after) per spatial dim from an int, one int per dim, or torch's flat (last_lo, last_hi, ...)."""
        if isinstance(padding, int):
            return [(padding, padding)] * dims
        pads = tuple(padding)
        if len(pads) == dims:
            return [(p, p) for p in pads]
        if len(pads) == 2 * dims:
            return [(pads[i], pads[i + 1]) for i in range(0, 2 * dims, 2)][::-1]
        raise ArgumentError(
            f"padding {padding} needs an int, {dims} ints or {2 * dims} ints for input shape {self.shape}"
        )

    def _spatial_pad(self, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
        return self.pad([None] * (self.ndim - len(pads)) + list(pads), value=value)

    @_replayed(branch=lambda x, weight, *_, **__: x._grad_flows(weight))
    def conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """Convolution over any number of spatial dims: input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel).
        Positional arguments in tinygrad's order (groups, stride, dilation, padding: tinygrad's nn.Conv2d passes them
        so; torch has no Tensor.conv2d, and F.conv2d's order is stride, padding, dilation, groups): by name they are
        the same. dtype (tinygrad's): computed in that dtype (the inputs are cast to it)."""
        if dtype is None and _modes.autocast is not None:
            dtype = _autocast_dtype(self, weight, *([] if bias is None else [bias]))
        if dtype is not None:
            b = None if bias is None else bias.cast(dtype)
            return self.cast(dtype).conv2d(weight.cast(dtype), b, groups, stride, dilation, padding)
        if self.ndim < 3 or weight.ndim != self.ndim:
            raise ArgumentError(
                f"conv: input shape {self.shape} and weight shape {weight.shape} must both be "
                "(N, C, *spatial) and (Cout, Cin/groups, *kernel) with the same number of dims"
            )
        cin_, (cout, cin), kernel = self.shape[1], weight.shape[:2], weight.shape[2:]
        if groups < 1 or cin_ % groups or cout % groups:
            raise ArgumentError(
                f"conv: groups={groups} must divide the input channels ({cin_}) and output channels ({cout}); "
                f"input shape {self.shape}, weight shape {weight.shape}"
            )
        if cin * groups != cin_:
            raise ArgumentError(
                f"conv: input shape {self.shape} has {cin_} channels, weight shape {weight.shape} expects "
                f"{cin} * groups={groups} = {cin * groups}"
            )
        if bias is not None and bias.shape != (cout,):
            raise ArgumentError(f"conv: bias shape {bias.shape} must be ({cout},) for weight shape {weight.shape}")
        if any(k == 0 for k in kernel):
            raise ArgumentError(f"conv: kernel sizes must be greater than 0, got weight shape {weight.shape}")
        nk = len(kernel)
        if isinstance(padding, str):
            if padding == "valid":
                pads = [(0, 0)] * nk
            elif padding == "same":
                if any(s != 1 for s in make_tuple(stride, nk)):
                    raise ArgumentError(f"conv: padding='same' needs stride 1, got stride {stride}")
                # torch puts the odd element of an even total on the right
                totals = [d * (k - 1) for d, k in zip(make_tuple(dilation, nk), kernel)]
                pads = [(t // 2, t - t // 2) for t in totals]
            else:
                raise ArgumentError(f"conv: padding must be an int, a tuple, 'same' or 'valid', not {padding!r}")
        else:
            pads = self._pool_pads(padding, nk)
        if self._strided(weight, stride, dilation, nk):
            if self._conv_block(weight, groups, pads, stride, dilation) > 0:
                # lanes along the output channels: the phases' stride-1 conv in blocks, 19 ms where the columns' row
                # strided one took 24-26 (64 -> 128 3x3 s=2 on 32^2, batch 32, one core, AVX2's blocks)
                return _phase_conv(self, weight, bias, groups, make_tuple(stride, nk), pads)
            return _column_conv(self, weight, bias, groups, make_tuple(stride, nk), pads, self._grad_flows(weight))
        return self._direct_conv(weight, bias, groups, stride, dilation, pads)

    def _grad_flows(self, weight: Tensor) -> bool:
        # a parameter answers at once; the input may walk its graph. Under no_grad nothing flows back either way
        return not _modes.grad_disabled and (weight.requires_grad or self.requires_grad)

    def _direct_conv(
        self,
        weight: Tensor,
        bias: Tensor | None,
        groups: int,
        stride: int | Sequence[int],
        dilation: int | Sequence[int],
        pads: Sequence[tuple[int, int]],
    ) -> Tensor:
        """conv2d over the input's windows as they are: in channel blocks where the device prefers them."""
        if (block := self._conv_block(weight, groups, pads, stride, dilation)) > 0:
            return _blocked_conv(self, weight, bias, stride, dilation, pads, block)
        return self._window_conv(weight, bias, groups, stride, dilation, pads)

    def _window_conv(
        self,
        weight: Tensor,
        bias: Tensor | None,
        groups: int,
        stride: int | Sequence[int],
        dilation: int | Sequence[int],
        pads: Sequence[tuple[int, int]],
    ) -> Tensor:
        """conv2d as a product of the input's windows and the weight, summed over (cin, *kernel)."""
        (bs, _), (cout, cin), kernel = self.shape[:2], weight.shape[:2], weight.shape[2:]
        nk = len(kernel)
        x = self._pool(kernel, stride, dilation, pads)  # (bs, cin_, *out, *kernel)
        out = x.shape[2 : 2 + nk]
        rcout = cout // groups
        # broadcast to (bs, groups, rcout, *out, cin, *kernel) and reduce the last 1 + nk dims
        x = x.reshape(bs, groups, cin, 1, *out, *kernel).expand(bs, groups, cin, rcout, *out, *kernel)
        x = x.permute(0, 1, 3, *[4 + i for i in range(nk)], 2, *[4 + nk + i for i in range(nk)])
        w = weight.reshape(1, groups, rcout, *[1] * nk, cin, *kernel)
        ret = _product_sum(x, w, [-1 - i for i in range(1 + nk)]).reshape(bs, cout, *out)
        return ret if bias is None else ret + bias.reshape(1, cout, *[1] * nk)

    def _strided(self, weight: Tensor, stride: Any, dilation: Any, nk: int) -> bool:
        """Whether this is a strided convolution without dilation, of known sizes (see _phase_conv); bad strides are
        left to the windows' check, which raises torch's error."""
        s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
        if len(s_) != nk or len(d_) != nk or any(s < 1 for s in s_) or all(s == 1 for s in s_):
            return False
        return all(d == 1 for d in d_) and all(isinstance(v, int) for v in (*self.shape, *weight.shape))

    def _conv_block(
        self,
        weight: Tensor,
        groups: int,
        pads: Sequence[tuple[int, int]],
        stride: int | Sequence[int],
        dilation: int | Sequence[int],
    ) -> int:
        """Channels per block where the device computes this convolution faster over copies in channel blocks
        (Renderer.conv_blocks), else 0. Only where no gradient flows: a training step's convolutions keep the graph
        their gradients were tuned on."""
        if groups != 1 or {self.dtype, weight.dtype} != {dtypes.float32} or self.device != weight.device:
            return 0
        if not all(isinstance(s, int) for s in (*self.shape, *weight.shape)):
            return 0
        if any(lo < 0 or hi < 0 for lo, hi in pads):
            return 0
        if self._grad_flows(weight):
            return 0
        padded = tuple(i + lo + hi for i, (lo, hi) in zip(self.shape[2:], pads))
        *_, out = _windows(padded, weight.shape[2:], stride, dilation)
        cin, cout, itemsize = self.shape[1], weight.shape[0], dtypes.float32.itemsize
        return Device[self.device].renderer.conv_blocks(self.shape[0], padded, tuple(out), cin, cout, itemsize)

    def conv_transpose2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
    ) -> Tensor:
        """Transposed convolution, weight (Cin, Cout/groups, *kernel): a stride-1 conv of the zero-stuffed input.
        Positional arguments in tinygrad's order, as conv2d's."""
        if _modes.autocast is not None and (low := _autocast_dtype(self, weight)) is not None:
            x, w, b = self.cast(low), weight.cast(low), None if bias is None else bias.cast(low)
            return x.conv_transpose2d(w, b, groups, stride, dilation, padding, output_padding)
        if self.ndim < 3 or weight.ndim != self.ndim:
            raise ArgumentError(
                f"conv_transpose: input shape {self.shape} and weight shape {weight.shape} must both be "
                "(N, C, *spatial) and (Cin, Cout/groups, *kernel) with the same number of dims"
            )
        if groups < 1 or weight.shape[0] % groups or self.shape[1] != weight.shape[0]:
            raise ArgumentError(
                f"conv_transpose: input shape {self.shape} and weight shape {weight.shape} need equal input "
                f"channels divisible by groups={groups}"
            )
        kernel = weight.shape[2:]
        nk = len(kernel)
        s_, d_, p_, op_ = (make_tuple(v, nk) for v in (stride, dilation, padding, output_padding))
        if any(op >= max(s, d) for op, s, d in zip(op_, s_, d_)):
            raise ArgumentError(
                f"conv_transpose: output_padding {op_} must be smaller than stride {s_} or dilation {d_}"
            )
        if any(s > 1 for s in s_) and all(d == 1 for d in d_) and all(isinstance(v, int) for v in self.shape):
            return _phase_conv_transpose(self, weight, bias, groups, s_, p_, op_)
        # (Cin, Cout/g, *k) -> (Cout, Cin/g, *k) with the kernel mirrored
        w = weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(tuple(range(3, weight.ndim + 1))).flatten(0, 1)
        x = self
        if any(s > 1 for s in s_):
            # (n) -> (n, 1) -> pad (n, s) -> (n*s) -> drop the trailing s-1 zeros
            lead = x.shape[:2]
            x = x.reshape(*lead, *flatten((n, 1) for n in x.shape[2:]))
            x = x.pad([None, None, *flatten((None, (0, s - 1)) for s in s_)])
            x = x.reshape(*lead, *[n * s for n, s in zip(x.shape[2::2], s_)])
            x = x.shrink([None, None, *[(0, n - (s - 1)) for n, s in zip(x.shape[2:], s_)]])
        pads = [((k - 1) * d - p, (k - 1) * d - p + op) for k, d, p, op in zip(kernel, d_, p_, op_)]
        # negative pads crop, which conv2d's int padding cannot say
        return x._spatial_pad(pads).conv2d(w, bias, dilation=dilation, groups=groups)

    def _ceil_pads(
        self, pads: list[tuple[int, int]], kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
    ) -> list[tuple[int, int]]:
        """Extra right padding so the last partial window counts (ceil_mode), unless it would start in the padding."""
        out = []
        for (lo, hi), i, k, s, d in zip(pads, self.shape[-len(kernel) :], kernel, stride, dilation):
            o = ceildiv(i + lo + hi - (d * (k - 1) + 1), s) + 1
            # a window may not start past the input's end (torch drops it)
            if s * (o - 1) >= i + lo:
                o -= 1
            out.append((lo, hi + max(0, s * (o - 1) + d * (k - 1) + 1 - (i + lo + hi))))
        return out

    def _pool_setup(
        self, kernel_size: int | Sequence[int], stride: Any, padding: Any, dilation: Any, ceil_mode: bool
    ) -> tuple:
        k_ = make_tuple(kernel_size, 2)
        nk = len(k_)
        if self.ndim < nk + 1:
            raise ArgumentError(
                f"pooling with kernel {k_} needs an input with at least {nk + 1} dims, got shape {self.shape}"
            )
        s_ = make_tuple(stride if stride is not None else k_, nk)
        d_ = make_tuple(dilation, nk)
        pads = self._pool_pads(padding, nk)
        if any(2 * max(lo, hi) > k for (lo, hi), k in zip(pads, k_)):
            raise ArgumentError(
                f"pad should be at most half of the effective kernel size: padding {padding}, kernel {k_}"
            )
        reg = pads
        if ceil_mode:
            pads = self._ceil_pads(pads, k_, s_, d_)
        return k_, s_, d_, reg, pads

    @_replayed
    def max_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """With return_indices, also the flat index (default int) of each maximum within its input plane.
        Positional arguments in tinygrad's order (dilation before padding; torch's F.max_pool2d has them the other
        way round, and no Tensor method): by name they are the same."""
        if return_indices:
            return self.max_pool2d_with_indices(kernel_size, stride, padding, dilation, ceil_mode)
        k_, s_, d_, _, pads = self._pool_setup(kernel_size, stride, padding, dilation, ceil_mode)
        fill = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        windows = self._spatial_pad(pads, value=fill)._pool(k_, s_, d_)
        return windows.max(tuple(range(-len(k_), 0)))

    @_replayed
    def avg_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Positional arguments in tinygrad's order (dilation, which torch's F.avg_pool2d lacks, before padding)."""
        k_, s_, d_, reg, pads = self._pool_setup(kernel_size, stride, padding, dilation, ceil_mode)
        axes = tuple(range(-len(k_), 0))
        total = self._spatial_pad(pads)._pool(k_, s_, d_).sum(axes)
        # the divisor counts the input, plus the regular padding if count_include_pad (never ceil_mode's extra)
        ones = Tensor.ones(self.shape[-len(k_) :], dtype=total.dtype, device=self.device)
        if count_include_pad:
            # the regular padding counts as ones: the window is the kernel, clipped only by ceil_mode's extra
            ones = Tensor.ones(
                [i + lo + hi for i, (lo, hi) in zip(ones.shape, reg)], dtype=total.dtype, device=self.device
            )
            extra = [(0, hi - rhi) for (_, hi), (_, rhi) in zip(pads, reg)]
        else:
            extra = pads
        return total / ones._spatial_pad(extra)._pool(k_, s_, d_).sum(axes)

    # *** normalization, activation-like composites ***

    def softmax(self, axis: int = -1, dtype: DType | str | None = None, *, dim: Any = None) -> Tensor:
        """dtype (tinygrad's and torch's): the input is cast to it first, and the result has it."""
        if dim is not None:  # torch's name for the axis
            axis = dim
        if _modes.autocast is not None:
            dtype = _autocast_float32(self, dtype, "softmax")
        return (self if dtype is None else self.cast(dtype))._softmax(axis)

    @_replayed
    @_rounds_once
    def _softmax(self, axis: int) -> Tensor:
        if self.ndim == 0:
            _axes(axis, 0)
            return self.reshape(1)._softmax(0).reshape(())
        if self.shape[_axes(axis, self.ndim)[0]] == 0:
            return self  # empty along the axis: nothing to normalize (and no max to shift by), as torch
        # the max only shifts for range: it cancels in value and in gradient, so no gradient flows through it
        m = self - self.max(axis, keepdim=True).detach()
        e = m.exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1, dtype: DType | str | None = None, *, dim: Any = None) -> Tensor:
        """dtype (tinygrad's and torch's): the input is cast to it first, and the result has it."""
        if dim is not None:  # torch's name for the axis
            axis = dim
        if _modes.autocast is not None:
            dtype = _autocast_float32(self, dtype, "softmax")
        return (self if dtype is None else self.cast(dtype))._log_softmax(axis)

    @_replayed
    @_rounds_once
    def _log_softmax(self, axis: int) -> Tensor:
        if self.ndim == 0:
            _axes(axis, 0)
            return self.reshape(1)._log_softmax(0).reshape(())
        if self.shape[_axes(axis, self.ndim)[0]] == 0:
            return self
        m = self - self.max(axis, keepdim=True).detach()
        return m - m.exp().sum(axis, keepdim=True).log()

    def softmin(self, axis: int = -1, dtype: DType | str | None = None, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        return (-self).softmax(axis, dtype)

    @_rounds_once
    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        if dim is not None:  # torch's name for the axis
            axis = dim
        if any(self.shape[a] == 0 for a in _axes(axis, self.ndim)):
            # an empty sum: log(0) = -inf, as torch; there is no max to shift by
            m = self.zeros_like().sum(axis, keepdim=True)
        else:
            m = self.max(axis, keepdim=True).detach()
            # an infinite max would give inf - inf = nan; shifting by 0 keeps -inf rows at -inf and +inf at +inf
            m = m.isinf().where(0.0, m)
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze(axis)

    def logsigmoid(self) -> Tensor:
        # log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), finite for every finite x
        return self.minimum(0) - (-self.abs()).exp().log1p()

    @_replayed
    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        if _modes.autocast is not None and (up := _autocast_float32(self, None, "norm")) is not None:
            return self.cast(up).layernorm(axis, eps)
        y = self - self.mean(axis, keepdim=True)
        return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

    def batchnorm(
        self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis: int | Sequence[int] = 1
    ) -> Tensor:
        """(x - mean) * weight * invstd + bias, the statistics given per channel along `axis`."""
        axes = _axes(axis, self.ndim)
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return x if bias is None else x + bias.reshape(shape)

    def dropout(self, p: float = 0.5) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p), only while Tensor.training."""
        if not 0 <= p <= 1:
            raise ArgumentError(f"dropout probability must be in [0, 1], got {p}")
        if not Tensor.training or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        keep = Tensor.rand(self.shape, device=self.device) >= p
        return keep.where(self, 0.0) * (1.0 / (1.0 - p))

    def one_hot(self, num_classes: int = -1) -> Tensor:
        if not dtypes.is_int(self.dtype):
            raise DTypeError(f"one_hot needs an integer tensor, got {self.dtype}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1
        _check_index_values(self, 0, num_classes, "one_hot with {} classes", num_classes)
        return self.unsqueeze(-1)._one_hot_along(num_classes, -1).cast(dtypes.default_int)

    def _one_hot_along(self, num_classes: int, dim: int) -> Tensor:
        """self has a size-1 dim at `dim`: a bool tensor true where the index along `dim` equals the value."""
        d = _axes(dim, self.ndim)[0]
        classes = Tensor.arange(num_classes, device=self.device).reshape((num_classes,) + (1,) * (self.ndim - d - 1))
        return self == classes

    @_replayed
    def scaled_dot_product_attention(
        self,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        enable_gqa: bool = False,
        scale: float | None = None,
    ) -> Tensor:
        """softmax(q @ k^T * scale + mask) @ v, scale 1/sqrt(d) by default; a bool mask keeps where True, a float mask
        is added. enable_gqa: key and value have fewer heads (dim -3), each shared by a group of query heads."""
        if (
            self.ndim < 2
            or key.ndim < 2
            or value.ndim < 2
            or self.shape[-1] != key.shape[-1]
            or key.shape[-2] != value.shape[-2]
        ):
            raise ArgumentError(
                f"attention: query {self.shape}, key {key.shape} and value {value.shape} need matching "
                "head dims (q[-1] == k[-1]) and sequence lengths (k[-2] == v[-2])"
            )
        if is_causal and attn_mask is not None:
            raise ArgumentError("attention: pass either attn_mask or is_causal=True, not both")
        if enable_gqa and self.ndim >= 3 and key.ndim >= 3 and self.shape[-3] != key.shape[-3]:
            heads, kv_heads = self.shape[-3], key.shape[-3]
            if kv_heads == 0 or heads % kv_heads or value.shape[-3] != kv_heads:
                raise ValueError(
                    f"attention: enable_gqa needs the key/value heads ({kv_heads}, {value.shape[-3]}) to be equal and "
                    f"to divide the query heads ({heads})"
                )
            key = key.repeat_interleave(heads // kv_heads, dim=-3)
            value = value.repeat_interleave(heads // kv_heads, dim=-3)
        qk = self.matmul(key.transpose(-2, -1)) * (1 / math.sqrt(self.shape[-1]) if scale is None else scale)
        if is_causal:
            rows = Tensor.arange(qk.shape[-2], device=self.device).reshape(-1, 1)
            attn_mask = Tensor.arange(qk.shape[-1], device=self.device).reshape(1, -1) <= rows
        if attn_mask is not None:
            qk = qk + (attn_mask.where(0.0, -math.inf) if attn_mask.dtype == dtypes.bool else attn_mask)
        return qk.softmax(-1).dropout(dropout_p) @ value

    # *** linear algebra: built from Tensor ops, batched over leading dims, lazy ***

    def _householder(self) -> tuple[Tensor, Tensor, Tensor]:
        """Q (m, m), R (m, n) with Q @ R == self, and det(Q) (+-1), by min(m - 1, n) Householder reflections. R's
        diagonal is -sign(x0) |x| per step, as LAPACK's, so Q and R match torch's up to rounding."""
        m, n = self.shape[-2], self.shape[-1]
        batch = self.shape[:-2]
        r = self.cast(least_upper_float(self.dtype))
        q = Tensor.eye(m, dtype=r.dtype, device=self.device).expand(*batch, m, m)
        det = Tensor.ones(*batch, dtype=r.dtype, device=self.device)
        for k in range(min(m - 1, n)):
            x = r[..., k:, k]
            x0 = x[..., 0]
            alpha = -(x0 < 0).where(-1.0, 1.0) * (x * x).sum(-1).sqrt()
            e1 = Tensor.arange(m - k, device=self.device) == 0
            v = (x - alpha.unsqueeze(-1) * e1).pad([None] * (x.ndim - 1) + [(k, 0)])
            vv = (v * v).sum(-1)
            # a zero column below the diagonal needs no reflection (and has no direction to reflect along)
            beta = (vv > 0).where(2 / (vv > 0).where(vv, 1.0), 0.0).unsqueeze(-1).unsqueeze(-1)
            r = r - beta * v.unsqueeze(-1) * (v.unsqueeze(-2) @ r)
            q = q - beta * (q @ v.unsqueeze(-1)) * v.unsqueeze(-2)
            det = det * (vv > 0).where(-1.0, 1.0)
        return q, r, det

    def qr(self, mode: str = "complete") -> tuple[Tensor, Tensor]:
        """Q, R with Q orthogonal and R upper triangular, Q @ R == self, over the last two dims. mode "complete"
        (tinygrad's default): Q (m, m), R (m, n); "reduced" (torch.linalg.qr's default): Q (m, k), R (k, n)."""
        if self.ndim < 2:
            raise ValueError(f"qr needs a matrix (or a batch of them), got shape {self.shape}")
        if mode not in ("complete", "reduced"):
            raise ValueError(f"qr mode must be 'complete' or 'reduced', not {mode!r}")
        q, r, _ = self._householder()
        if mode == "reduced":
            k = min(self.shape[-2], self.shape[-1])
            q, r = q[..., :, :k], r[..., :k, :]
        # exactly zero below the diagonal (rounding leaves tiny values there)
        return q, r.triu()

    def det(self) -> Tensor:
        """Determinant of square matrices over the last two dims: det(Q) * prod(diag(R))."""
        if self.ndim < 2 or self.shape[-1] != self.shape[-2]:
            raise ValueError(f"det needs square matrices, got shape {self.shape}")
        _, r, sign = self._householder()
        return sign * r.diagonal(0, -2, -1).prod(-1)

    def newton_schulz(self, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Tensor:
        """The Newton-Schulz iteration over the last two dims (Muon's orthogonalization): X is scaled to Frobenius
        norm <= 1, then each step maps X to sum_i params[i] * (X X^T)^i X, an odd polynomial applied to X's singular
        values. Coefficients that map (0, 1] to 1, such as (1.5, -0.5), drive X towards U @ Vh of its SVD."""
        if self.ndim < 2:
            raise ValueError(f"newton_schulz needs a matrix (or a batch of them), got shape {self.shape}")
        if not params:
            raise ValueError("newton_schulz needs at least one coefficient")
        if self.shape[-2] > self.shape[-1]:  # X X^T is the smaller Gram matrix when X is wide
            return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        x = self.cast(least_upper_float(self.dtype))
        x = x / ((x * x).sum((-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram, term = x @ x.transpose(-2, -1), x
            out = params[0] * x
            for c in params[1:]:
                term = gram @ term
                out = out + c * term
            x = out
        return x

    def svd(self, full_matrices: bool = True, sweeps: int = 12) -> tuple[Tensor, Tensor, Tensor]:
        """U, S, Vh with self == U @ diag(S) @ Vh (S descending), over the last two dims, as torch.linalg.svd:
        one-sided Jacobi rotations on column pairs, all disjoint pairs of a round at once (round-robin order)."""
        if self.ndim < 2:
            raise ValueError(f"svd needs a matrix (or a batch of them), got shape {self.shape}")
        m, n = self.shape[-2], self.shape[-1]
        if m < n:
            u, s, vh = self.transpose(-2, -1).svd(full_matrices, sweeps)
            return vh.transpose(-2, -1), s, u.transpose(-2, -1)
        a = self.cast(least_upper_float(self.dtype))
        batch = a.shape[:-2]
        n2 = n + n % 2  # an even count of columns: a zero column pairs with the odd one out
        w = a.pad([None] * (a.ndim - 1) + [(0, n2 - n)])
        v = Tensor.eye(n2, dtype=a.dtype, device=self.device).expand(*batch, n2, n2)
        for _ in range(sweeps):
            for p_idx, q_idx in _round_robin(n2):
                place_p = Tensor.eye(n2, dtype=a.dtype, device=self.device)[list(p_idx)]  # (n2/2, n2) one-hot rows
                place_q = Tensor.eye(n2, dtype=a.dtype, device=self.device)[list(q_idx)]
                wp, wq = w @ place_p.T, w @ place_q.T
                alpha, beta, gamma = (wp * wp).sum(-2), (wq * wq).sum(-2), (wp * wq).sum(-2)
                rot = gamma.abs() > 0
                zeta = (beta - alpha) / (2 * rot.where(gamma, 1.0))
                t = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta * zeta).sqrt())
                c = rot.where((1 + t * t).rsqrt(), 1.0).unsqueeze(-2)
                sn = rot.where(c.squeeze(-2) * t, 0.0).unsqueeze(-2)
                w = (c * wp - sn * wq) @ place_p + (sn * wp + c * wq) @ place_q
                vp, vq = v @ place_p.T, v @ place_q.T
                v = (c * vp - sn * vq) @ place_p + (sn * vp + c * vq) @ place_q
        w, v = w[..., :n], v[..., :n, :n]
        s = (w * w).sum(-2).sqrt()
        order = s.argsort(-1, descending=True)
        s = s.gather(-1, order)
        pick = order.unsqueeze(-2).expand(*batch, m, n)
        u = w.gather(-1, pick) / (s == 0).where(1.0, s).unsqueeze(-2)
        v = v.gather(-1, order.unsqueeze(-2).expand(*batch, n, n))
        if full_matrices and m > n:
            # complete U's columns to an orthonormal basis: the last m - n columns of a complete QR of U
            q, _r, _ = u._householder()
            u = u.cat(q[..., :, n:], dim=-1)
        return u, s, v.transpose(-2, -1)

    def pinv(self, rtol: float | None = None) -> Tensor:
        """Moore-Penrose pseudo-inverse through the SVD (torch.linalg.pinv)."""
        from lazygrad import linalg

        return linalg.pinv(self, rtol=rtol)

    # *** losses ***

    def _reduction(self, reduction: str) -> Tensor:
        if reduction == "mean":
            return self.mean()
        if reduction == "sum":
            return self.sum()
        if reduction == "none":
            return self
        raise ArgumentError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")

    def _check_target_shape(self, Y: Any, what: str) -> None:
        """torch's binary losses take a target of the input's shape only (a broadcast one would mean another loss)."""
        if isinstance(Y, Tensor) and Y.shape != self.shape:
            raise ArgumentError(f"{what}: target shape {Y.shape} must be the input shape {self.shape}")

    def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
        self._check_target_shape(Y, "binary_crossentropy")
        # logs are clamped at -100 as in torch, so a probability of exactly 0 or 1 gives a finite loss
        return -(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100))._reduction(reduction)

    def binary_crossentropy_logits(
        self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        self._check_target_shape(Y, "binary_crossentropy_logits")
        pos = Y * self.logsigmoid() if pos_weight is None else pos_weight * Y * self.logsigmoid()
        return -(pos + (1 - Y) * (-self).logsigmoid())._reduction(reduction)

    def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """Logits (N, C, ...) or (C,); Y class indices (N, ...) or probabilities shaped like the logits, as in torch."""
        if Y.shape != self.shape and dtypes.is_int(Y.dtype):
            _check_index_values(Y, 0, self.shape[0 if self.ndim == 1 else 1], "cross_entropy target")
        if _modes.autocast is not None and (up := _autocast_float32(self, None, "loss")) is not None:
            return self.cast(up).cross_entropy(Y, reduction, label_smoothing)
        return self._cross_entropy(Y, reduction, label_smoothing)

    @_replayed
    def _cross_entropy(self, Y: Tensor, reduction: str, label_smoothing: float) -> Tensor:
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        cdim = 0 if self.ndim == 1 else 1
        if Y.shape != self.shape:
            if dtypes.is_float(Y.dtype) or Y.shape != self.shape[:cdim] + self.shape[cdim + 1 :]:
                raise ArgumentError(
                    f"cross_entropy: target shape {Y.shape} must be the logits shape {self.shape} (probabilities) "
                    "or that shape without the class dim (integer class indices)"
                )
            Y = Y.unsqueeze(cdim)._one_hot_along(self.shape[cdim], cdim).cast(self.dtype)
        if label_smoothing:
            Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[cdim]
        return -(self.log_softmax(cdim) * Y).sum(cdim)._reduction(reduction)

    def sparse_categorical_crossentropy(
        self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """Logits (..., C) and integer targets (...), classes on the last dim (tinygrad's);
        `mean` skips ignored targets."""
        if self.ndim and dtypes.is_int(Y.dtype):
            _check_index_values(Y, 0, self.shape[-1], "sparse_categorical_crossentropy target", ignore=ignore_index)
        return self._sparse_categorical_crossentropy(Y, ignore_index, label_smoothing, reduction)

    @_replayed
    def _sparse_categorical_crossentropy(
        self, Y: Tensor, ignore_index: int, label_smoothing: float, reduction: str
    ) -> Tensor:
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        if Y.shape != self.shape[:-1]:
            raise ArgumentError(
                f"sparse_categorical_crossentropy: target shape {Y.shape} "
                f"must be the logits shape {self.shape} without its last dim"
            )
        if not dtypes.is_int(Y.dtype):
            raise TypeError(f"sparse_categorical_crossentropy: targets must be integer class indices, got {Y.dtype}")
        log_probs = self.log_softmax()
        keep = Y != ignore_index
        y = Y.unsqueeze(-1)._one_hot_along(self.shape[-1], -1) & keep.unsqueeze(-1)
        picked = (log_probs * y).sum(-1)
        # without smoothing, no term of it: 0 * mean(log_probs) was a reduce over the classes in the step's kernels and
        # ~20 nodes of its forward and backward graphs (an MLP step's loss), for a sum that adds zero
        if label_smoothing:
            picked = (1 - label_smoothing) * picked + label_smoothing * log_probs.mean(-1) * keep
        loss = -picked
        return loss.sum() / keep.sum() if reduction == "mean" else loss._reduction(reduction)

    def nll_loss(
        self, Y: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"
    ) -> Tensor:
        """Log-probabilities (N, C, ...) or (C,) and integer targets;
        `mean` divides by the summed target weights, as torch."""
        cdim = 0 if self.ndim == 1 else 1
        if Y.shape != self.shape[:cdim] + self.shape[cdim + 1 :]:
            raise ArgumentError(
                f"nll_loss: target shape {Y.shape} must be the input shape {self.shape} without the class dim"
            )
        if not dtypes.is_int(Y.dtype):
            raise TypeError(f"nll_loss: targets must be integer class indices, got {Y.dtype}")
        _check_index_values(Y, 0, self.shape[cdim], "nll_loss target", ignore=ignore_index)
        hit = Y.unsqueeze(cdim)._one_hot_along(self.shape[cdim], cdim) & (Y != ignore_index).unsqueeze(cdim)
        # select with where, not a multiply: an unpicked -inf log-probability must not turn into nan
        picked, w = hit.where(self, 0.0), hit.cast(self.dtype)
        if weight is not None:
            scale = weight.reshape((-1,) + (1,) * (self.ndim - cdim - 1))
            picked, w = picked * scale, w * scale
        loss = -picked.sum(cdim)
        return loss.sum() / w.sum() if reduction == "mean" else loss._reduction(reduction)

    # *** torch.Tensor methods: structure, linear algebra, statistics, indexing, in-place and random fills. Each one
    # is composed of the ops above (nothing runs here); their in-place twins (op_) are made after the class ***

    def dim(self) -> int:
        return self.ndim

    ndimension = dim

    def nelement(self) -> int:
        return self.numel()

    def _strided_view(self) -> tuple[tuple[int, ...], int] | None:
        """(strides, offset) that show this tensor in the memory it is a view of, or None where it owns its memory or
        no one stride per dim shows it (a flip, a reshape of a transpose: torch copies those). Read off the addresses
        of the origin and of one step along each dim, and checked at the far corner."""
        if self._view_of is None or self.numel() == 0 or not all(isinstance(s, int) for s in self.shape):
            return None
        base, at = self._view_of
        try:
            chain = _view_chain(self.uop, at)
        except NotImplementedError:
            return None
        st = ShapeTracker.from_shape(base.shape)
        for u in chain:
            if u.op in GroupOp.Movement:
                st = st.apply(u.op, u.arg)
        if any(not isinstance(x, int) for v in st.views for x in (*v.strides, v.offset)):
            return None
        origin = _address(st, (0,) * self.ndim)
        steps = [
            _address(st, tuple(int(k == d) for k in range(self.ndim))) - origin if s > 1 else 0
            for d, s in enumerate(self.shape)
        ]
        corner = tuple(s - 1 for s in self.shape)
        if any(x < 0 for x in steps) or _address(st, corner) != origin + sum(c * x for c, x in zip(corner, steps)):
            return None
        return tuple(steps), origin

    def stride(self, dim: int | None = None) -> int | tuple[int, ...]:
        """Elements to step in memory per index of each dim, as torch's (a size-1 dim gets its contiguous stride)."""
        plain = _contiguous_strides(self.shape)
        v = self._strided_view()
        strides = plain if v is None else tuple(p if s == 1 else st for p, s, st in zip(plain, self.shape, v[0]))
        return strides if dim is None else strides[_axes(dim, self.ndim)[0]]

    def storage_offset(self) -> int:
        v = self._strided_view()
        return 0 if v is None else v[1]

    def is_contiguous(self, memory_format: Any = None) -> bool:
        strides = self.stride()
        return all(s == 1 or st == p for s, st, p in zip(self.shape, strides, _contiguous_strides(self.shape)))

    def t(self) -> Tensor:
        if self.ndim > 2:
            raise ArgumentError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}-d")
        return self.transpose(0, 1) if self.ndim == 2 else self

    # torch's in-place shape ops: the tensor becomes a view of its own memory in the new shape (nothing is written)
    def _reshape_in_place(self, result: Tensor) -> Tensor:
        # a tensor of its own memory stays one (result is a view of it: its base would be itself); a view stays a
        # view of its base, through the new shape. Views taken of a tensor of its own memory before the change can
        # not follow it (their chains start from the old shape): _follow_base refuses them from now on
        if result.uop is self.uop:
            return self
        if self._view_of is None:
            key = id(self)
            ref, stale = _reshaped_in_place.get(key) or (None, set())
            if ref is None or ref() is not self:
                ref, stale = weakref.ref(self, lambda _, k=key: _reshaped_in_place.pop(k, None)), set()
            stale.add(self.uop)
            _reshaped_in_place[key] = (ref, stale)
        self.uop, self._view_of = result.uop, self._view_of and result._view_of
        return self

    def squeeze_(self, dim: int | Sequence[int] | None = None) -> Tensor:
        return self._reshape_in_place(self.squeeze(dim))

    def unsqueeze_(self, dim: int) -> Tensor:
        return self._reshape_in_place(self.unsqueeze(dim))

    def t_(self) -> Tensor:
        return self._reshape_in_place(self.t())

    def transpose_(self, dim0: int, dim1: int) -> Tensor:
        return self._reshape_in_place(self.transpose(dim0, dim1))

    def swapaxes_(self, axis0: int, axis1: int) -> Tensor:
        return self._reshape_in_place(self.swapaxes(axis0, axis1))

    def resize_(self, *shape: Any) -> Tensor:
        """torch's resize_: the first elements of the row-major values in the new shape; a larger size is padded with
        zeros (torch leaves the new elements uninitialized)."""
        if self._requires_grad and not _modes.grad_disabled:
            raise InPlaceOnLeafError("cannot resize variables that require grad")
        size = argfix(*shape)
        n = prod(size)
        flat = self.flatten()
        flat = flat[:n] if n <= flat.shape[0] else flat.pad(((0, n - flat.shape[0]),))
        return self._reshape_in_place(flat.reshape(size))

    def resize_as_(self, other: Tensor) -> Tensor:
        return self.resize_(other.shape)

    def put(self, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
        """torch's put: source's values written at the flat (row-major) positions `index` (negative counts from the
        end; accumulate sums repeated positions)."""
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise DTypeError(f"put: index must be an integer tensor, got {getattr(index, 'dtype', type(index))}")
        if index.numel() != source.numel():
            raise ArgumentError(f"put: {index.numel()} indices for a source of {source.numel()} elements")
        flat = self.flatten()
        return flat.index_put((index.flatten(),), source.flatten().cast(self.dtype), accumulate).reshape(self.shape)

    def put_(self, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
        return self._inplace(self.put(index, source, accumulate))

    def narrow(self, dim: int, start: int | Tensor, length: int) -> Tensor:
        d = _axes(dim, self.ndim)[0]
        n = self.shape[d]
        start = int(start.item()) if isinstance(start, Tensor) else start
        if not -n <= start <= n:
            raise IndexError(f"narrow: start ({start}) is out of range for dimension {d} of size {n}")
        start = start % n if start < 0 else start
        if length < 0 or start + length > n:
            raise ArgumentError(f"narrow: start ({start}) + length ({length}) exceeds dimension {d} of size {n}")
        return self.shrink([(start, start + length) if i == d else None for i in range(self.ndim)])

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        d = _axes(dim, self.ndim)[0]
        if self.ndim == 0:
            raise IndexError("unbind: a 0-d tensor has no dimension to unbind")
        return tuple(self[(slice(None),) * d + (i,)] for i in range(self.shape[d]))

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
        if isinstance(source, int) != isinstance(destination, int):
            raise TypeError(f"movedim takes two ints or two sequences of ints, got {source!r} and {destination!r}")
        src = [source] if isinstance(source, int) else list(source)
        dst = [destination] if isinstance(destination, int) else list(destination)
        if len(src) != len(dst):
            raise ArgumentError(f"movedim: source {source} and destination {destination} name different counts of dims")
        src = [_dim(a, self.ndim) for a in src]
        dst = [_dim(a, self.ndim) for a in dst]
        if len(set(src)) != len(src) or len(set(dst)) != len(dst):
            raise ArgumentError(f"movedim: repeated dim in source {source} or destination {destination}")
        if self.ndim == 0:
            return self
        order: list[int | None] = [None] * self.ndim
        for s, d in zip(src, dst):
            order[d] = s
        rest = iter(i for i in range(self.ndim) if i not in src)
        return self.permute([o if o is not None else next(rest) for o in order])

    moveaxis = movedim

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        return self.transpose(axis0, axis1)

    def swapdims(self, dim0: int, dim1: int) -> Tensor:
        return self.transpose(dim0, dim1)

    def tile(self, dims: int | Sequence[int], *more: int) -> Tensor:
        reps = argfix(dims, *more)
        if any(type(r) is int and r < 0 for r in reps):
            raise ArgumentError(f"tile {reps}: counts must not be negative")
        return self.repeat((1,) * (self.ndim - len(reps)) + tuple(reps))

    def tensor_split(self, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0) -> tuple[Tensor, ...]:
        """Sections of near-equal size (the first n % sections one longer), or the pieces between split indices."""
        if self.ndim == 0:
            raise ArgumentError("tensor_split expects at least a 1-d tensor")
        d = _axes(dim, self.ndim)[0]
        spec = indices_or_sections
        if isinstance(spec, Tensor):
            if not dtypes.is_int(spec.dtype) or spec.ndim > 1:
                raise TypeError(f"tensor_split: a tensor of indices must be a 0-d or 1-d integer tensor, got {spec}")
            spec = spec.tolist()
        if isinstance(spec, int):
            if spec <= 0:
                raise ArgumentError(f"tensor_split: the number of sections must be larger than 0, got {spec}")
            n = self.shape[d]
            sizes = [n // spec + (1 if i < n % spec else 0) for i in range(spec)]
            bounds = list(itertools.accumulate(sizes, initial=0))
            pairs = list(zip(bounds[:-1], bounds[1:]))
        else:
            cuts = [0, *spec]
            pairs = [(a, b) for a, b in zip(cuts, [*spec, None])]
        return tuple(self[(slice(None),) * d + (slice(a, b),)] for a, b in pairs)

    def _split_even(self, sections: int | Sequence[int], dim: int, name: str, min_ndim: int) -> tuple[Tensor, ...]:
        if self.ndim < min_ndim:
            raise ArgumentError(f"{name} needs a tensor with at least {min_ndim} dims, got shape {self.shape}")
        if isinstance(sections, int) and (sections == 0 or self.shape[dim] % sections):
            raise ArgumentError(
                f"{name}: dimension {dim} of size {self.shape[dim]} does not divide into {sections} equal parts"
            )
        return self.tensor_split(sections, dim)

    def hsplit(self, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        return self._split_even(sections, 1 if self.ndim > 1 else 0, "hsplit", 1)

    def vsplit(self, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        return self._split_even(sections, 0, "vsplit", 2)

    def dsplit(self, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        return self._split_even(sections, 2, "dsplit", 3)

    def fliplr(self) -> Tensor:
        if self.ndim < 2:
            raise ArgumentError(f"fliplr needs a tensor with at least 2 dims, got shape {self.shape}")
        return self.flip(1)

    def flipud(self) -> Tensor:
        if self.ndim < 1:
            raise ArgumentError("flipud needs a tensor with at least 1 dim, got a 0-d tensor")
        return self.flip(0)

    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
        if len(dims) != 2:
            raise ArgumentError(f"rot90 rotates in the plane of 2 dims, got dims={tuple(dims)}")
        if self.ndim < 2:
            raise ArgumentError(f"rot90 needs a tensor with at least 2 dims, got shape {self.shape}")
        d0, d1 = _axes(dims[0], self.ndim)[0], _axes(dims[1], self.ndim)[0]
        if d0 == d1:
            raise ArgumentError(f"rot90: the rotation dims must differ, got dims={tuple(dims)}")
        k %= 4
        if k == 1:
            return self.flip(d1).transpose(d0, d1)
        if k == 2:
            return self.flip((d0, d1))
        return self.flip(d0).transpose(d0, d1) if k == 3 else self

    def mm(self, mat2: Tensor) -> Tensor:
        if self.ndim != 2 or mat2.ndim != 2:
            raise ArgumentError(f"mm needs two matrices, got shapes {self.shape} and {mat2.shape}")
        return self.matmul(mat2)

    def bmm(self, mat2: Tensor) -> Tensor:
        if self.ndim != 3 or mat2.ndim != 3:
            raise ArgumentError(f"bmm needs two 3-d tensors, got shapes {self.shape} and {mat2.shape}")
        if self.shape[0] != mat2.shape[0]:
            raise ArgumentError(f"bmm: batch sizes differ: {self.shape} and {mat2.shape}")
        return self.matmul(mat2)

    def mv(self, vec: Tensor) -> Tensor:
        if self.ndim != 2 or vec.ndim != 1:
            raise ArgumentError(f"mv needs a matrix and a vector, got shapes {self.shape} and {vec.shape}")
        return self.matmul(vec)

    def inner(self, other: Tensor) -> Tensor:
        """Sum of products over the last dim of both: shape self.shape[:-1] + other.shape[:-1]."""
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        k = self.shape[-1]
        if other.shape[-1] != k:
            raise ArgumentError(f"inner: the last dims differ: {self.shape} and {other.shape}")
        flat = self.reshape(-1, k).matmul(other.reshape(-1, k).transpose(0, 1))
        return flat.reshape(self.shape[:-1] + other.shape[:-1])

    def outer(self, vec2: Tensor) -> Tensor:
        if self.ndim != 1 or vec2.ndim != 1:
            raise ArgumentError(f"outer needs two 1-d tensors, got shapes {self.shape} and {vec2.shape}")
        return self.unsqueeze(1) * vec2.unsqueeze(0)

    ger = outer

    def kron(self, other: Tensor) -> Tensor:
        nd = max(self.ndim, other.ndim)
        a = self.reshape((1,) * (nd - self.ndim) + self.shape)
        b = other.reshape((1,) * (nd - other.ndim) + other.shape)
        pa = a.reshape(tuple(x for s in a.shape for x in (s, 1)))
        pb = b.reshape(tuple(x for s in b.shape for x in (1, s)))
        return (pa * pb).reshape(tuple(x * y for x, y in zip(a.shape, b.shape)))

    # *** torch's functions of several tensors and of structure (torch.hstack, torch.cdist, ...), as Tensor methods
    # that also take the tensors as one sequence: Tensor.hstack([a, b]) or a.hstack(b) ***

    def atleast_1d(self) -> Tensor:
        return self.reshape(1) if self.ndim == 0 else self

    def atleast_2d(self) -> Tensor:
        return self.reshape(1, -1) if self.ndim < 2 else self

    def atleast_3d(self) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1, 1, 1)
        if self.ndim == 1:
            return self.reshape(1, -1, 1)
        return self.unsqueeze(-1) if self.ndim == 2 else self

    def hstack(self: Tensor | Sequence[Tensor], *others: Tensor) -> Tensor:
        ts = [t.atleast_1d() for t in _tensor_list("hstack", self, others)]
        return ts[0].cat(*ts[1:], dim=0 if ts[0].ndim == 1 else 1)

    def vstack(self: Tensor | Sequence[Tensor], *others: Tensor) -> Tensor:
        ts = [t.atleast_2d() for t in _tensor_list("vstack", self, others)]
        return ts[0].cat(*ts[1:], dim=0)

    row_stack = vstack

    def dstack(self: Tensor | Sequence[Tensor], *others: Tensor) -> Tensor:
        ts = [t.atleast_3d() for t in _tensor_list("dstack", self, others)]
        return ts[0].cat(*ts[1:], dim=2)

    def column_stack(self: Tensor | Sequence[Tensor], *others: Tensor) -> Tensor:
        ts = [t.reshape(-1, 1) if t.ndim < 2 else t for t in _tensor_list("column_stack", self, others)]
        return ts[0].cat(*ts[1:], dim=1)

    def broadcast_tensors(self: Tensor | Sequence[Tensor], *others: Tensor) -> tuple[Tensor, ...]:
        ts = _tensor_list("broadcast_tensors", self, others)
        shape = Tensor.broadcast_shapes(*[t.shape for t in ts])
        return tuple(t.expand(shape) for t in ts)

    @staticmethod
    def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
        out: tuple[int, ...] = ()
        for s in shapes:
            out = _broadcast_shape(out, (s,) if isinstance(s, int) else tuple(s))
        return out

    def block_diag(self: Tensor | Sequence[Tensor], *others: Tensor) -> Tensor:
        ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensor_list("block_diag", self, others)]
        if any(t.ndim != 2 for t in ts):
            raise ArgumentError(f"block_diag takes tensors of at most 2 dims, got shapes {[t.shape for t in ts]}")
        cols = sum(t.shape[1] for t in ts)
        rows, left = [], 0
        for t in ts:
            rows.append(t.pad(((0, 0), (left, cols - left - t.shape[1]))))
            left += t.shape[1]
        return rows[0].cat(*rows[1:], dim=0)

    def cartesian_prod(self: Tensor | Sequence[Tensor], *others: Tensor) -> Tensor:
        ts = _tensor_list("cartesian_prod", self, others)
        if any(t.ndim != 1 for t in ts):
            raise ArgumentError(f"cartesian_prod takes 1-d tensors, got shapes {[t.shape for t in ts]}")
        if len(ts) == 1:
            return ts[0]
        return Tensor.stack([g.flatten() for g in ts[0].meshgrid(*ts[1:], indexing="ij")], dim=1)

    def combinations(self, r: int = 2, with_replacement: bool = False) -> Tensor:
        """Every r-subset of a 1-d tensor's elements, in torch's order (rows of the result)."""
        if self.ndim != 1:
            raise ArgumentError(f"combinations takes a 1-d tensor, got shape {self.shape}")
        pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
        rows = list(pick(range(self.shape[0]), r))
        if not rows:
            return self[:0].reshape(0, r) if r > 0 else self[:0]
        index = Tensor(rows, dtype=dtypes.int64, device=self.device)
        return self[index.flatten()].reshape(len(rows), r)

    def tensordot(self, other: Tensor, dims: int | Sequence[Any] = 2) -> Tensor:
        if isinstance(dims, int):
            if dims < 0 or dims > min(self.ndim, other.ndim):
                raise ArgumentError(f"tensordot: dims {dims} out of range for shapes {self.shape} and {other.shape}")
            da, db = list(range(self.ndim - dims, self.ndim)), list(range(dims))
        else:
            da, db = ([dims[0]], [dims[1]]) if isinstance(dims[0], int) else (list(dims[0]), list(dims[1]))
            da, db = [_dim(d, self.ndim) for d in da], [_dim(d, other.ndim) for d in db]
        if len(da) != len(db) or any(self.shape[i] != other.shape[j] for i, j in zip(da, db)):
            raise ArgumentError(f"tensordot: contracted dims {da} of {self.shape} and {db} of {other.shape} differ")
        free_a, free_b = [i for i in range(self.ndim) if i not in da], [j for j in range(other.ndim) if j not in db]
        k = prod(self.shape[i] for i in da)
        a = self.permute(*free_a, *da).reshape(-1, k)
        b = other.permute(*db, *free_b).reshape(k, -1)
        return (a @ b).reshape(*[self.shape[i] for i in free_a], *[other.shape[j] for j in free_b])

    def cdist(self, x2: Tensor, p: float = 2.0, compute_mode: str | None = None) -> Tensor:
        """Distances between the rows of self (..., P, M) and x2 (..., R, M): (..., P, R). The gradient at a zero
        distance is 0, as torch's (the norm's own is 0/0 there)."""
        if self.ndim < 2 or x2.ndim < 2 or self.shape[-1] != x2.shape[-1]:
            raise ArgumentError(f"cdist: shapes {self.shape} and {x2.shape} need 2+ dims and the same last dim")
        if p < 0:
            raise ArgumentError(f"cdist only supports non-negative p values, got {p}")
        diff = (self.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
        if p == 0:
            return (diff != 0).cast(self.dtype).sum(-1)
        if p == math.inf:
            return diff.max(-1)
        total = (diff.square() if p == 2 else diff.pow(p)).sum(-1)
        return _root(total, p)

    def isin(self, test_elements: Any, assume_unique: bool = False, invert: bool = False) -> Tensor:
        test = test_elements if isinstance(test_elements, Tensor) else Tensor(test_elements, device=self.device)
        hit = (self.unsqueeze(-1) == test.flatten()).any(-1)
        return hit.logical_not() if invert else hit

    def searchsorted(
        self,
        values: Any,
        out_int32: bool = False,
        right: bool = False,
        side: str | None = None,
        sorter: Tensor | None = None,
    ) -> Tensor:
        """torch.searchsorted(self, values): for each value, the index where it would go in self's (last dim,
        sorted) rows: the count of entries < value (right=False / side="left") or <= value."""
        if side is not None:
            if side not in ("left", "right") or (right and side == "left"):
                raise ArgumentError(
                    f"searchsorted: side must be 'left' or 'right' (and agree with right), got {side!r}"
                )
            right = side == "right"
        seq = self if sorter is None else self.gather(-1, sorter)
        scalar = not isinstance(values, Tensor)
        v = Tensor(values, dtype=self.dtype, device=self.device) if scalar else values
        if seq.ndim > 1 and seq.shape[:-1] != v.shape[:-1]:
            raise ArgumentError(f"searchsorted: leading dims of {seq.shape} and values {v.shape} differ")
        rows = seq.unsqueeze(-2) if seq.ndim > 1 else seq
        below = rows <= v.unsqueeze(-1) if right else rows < v.unsqueeze(-1)
        return below.sum(-1, dtype=dtypes.int32 if out_int32 else dtypes.int64)

    def bucketize(self, boundaries: Tensor, out_int32: bool = False, right: bool = False) -> Tensor:
        if boundaries.ndim != 1:
            raise ArgumentError(f"bucketize: boundaries must be 1-d, got shape {boundaries.shape}")
        return boundaries.searchsorted(self, out_int32=out_int32, right=right)

    @staticmethod
    def tril_indices(
        row: int, col: int, offset: int = 0, dtype: DType | str = dtypes.int64, device: str | None = None
    ) -> Tensor:
        pairs = [(i, j) for i in range(row) for j in range(col) if j - i <= offset]
        return Tensor([[i for i, _ in pairs], [j for _, j in pairs]], dtype=dtype, device=device).reshape(2, len(pairs))

    @staticmethod
    def triu_indices(
        row: int, col: int, offset: int = 0, dtype: DType | str = dtypes.int64, device: str | None = None
    ) -> Tensor:
        pairs = [(i, j) for i in range(row) for j in range(col) if j - i >= offset]
        return Tensor([[i for i, _ in pairs], [j for _, j in pairs]], dtype=dtype, device=device).reshape(2, len(pairs))

    @staticmethod
    def unravel_index(indices: Tensor, shape: Sequence[int]) -> tuple[Tensor, ...]:
        if dtypes.is_float(indices.dtype):
            raise TypeError(f"unravel_index: expected an integer tensor, got {indices.dtype}")
        total = prod(shape)
        if total == 0:
            raise ArgumentError("unravel_index: the shape must have no zero-size dims")
        flat = indices % total  # negative indices count from the end, as torch's
        out, stride = [], total
        for size in shape:
            stride //= size
            out.append((flat // stride) % size)
        return tuple(out)

    @staticmethod
    def logspace(
        start: float,
        end: float,
        steps: int,
        base: float = 10.0,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        exps = Tensor.linspace(start, end, steps, dtype=dtypes.float64 if dt == dtypes.float64 else None, device=device)
        return (Tensor.full_like(exps, float(base)) ** exps).cast(dt)

    def vander(self, N: int | None = None, increasing: bool = False) -> Tensor:  # noqa: N803 (torch's name)
        if self.ndim != 1:
            raise ArgumentError(f"vander takes a 1-d tensor, got shape {self.shape}")
        n = self.shape[0] if N is None else N
        powers = Tensor.arange(n, device=self.device)
        powers = powers if increasing else (n - 1) - powers
        x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.int64)
        return x.unsqueeze(1) ** powers.cast(x.dtype).unsqueeze(0)

    def trapezoid(self, x: Tensor | None = None, dx: float | None = None, dim: int = -1) -> Tensor:
        d = _dim(dim, self.ndim)
        n = self.shape[d]
        if n == 0:
            return self.sum(d)
        lo, hi = self.narrow(d, 0, n - 1), self.narrow(d, 1, n - 1)
        if x is None:
            return (lo + hi).sum(d) * ((1.0 if dx is None else dx) / 2)
        xs = x if x.ndim == 1 else x
        widths = xs.diff(dim=-1 if xs.ndim == 1 else d)
        if xs.ndim == 1:
            widths = widths.reshape([n - 1 if i == d else 1 for i in range(self.ndim)])
        return ((lo + hi) * widths).sum(d) / 2

    trapz = trapezoid

    def cumulative_trapezoid(self, x: Tensor | None = None, dx: float | None = None, dim: int = -1) -> Tensor:
        d = _dim(dim, self.ndim)
        n = self.shape[d]
        lo, hi = self.narrow(d, 0, max(n - 1, 0)), self.narrow(d, min(1, n), max(n - 1, 0))
        if x is None:
            return ((lo + hi) * ((1.0 if dx is None else dx) / 2)).cumsum(d)
        widths = x.diff(dim=-1 if x.ndim == 1 else d)
        if x.ndim == 1:
            widths = widths.reshape([n - 1 if i == d else 1 for i in range(self.ndim)])
        return ((lo + hi) * widths / 2).cumsum(d)

    def rsub(self, other: Any, alpha: float = 1) -> Tensor:
        return other - self * alpha if alpha != 1 else other - self

    def trace(self) -> Tensor:
        if self.ndim != 2:
            raise ArgumentError(f"trace needs a matrix, got shape {self.shape}")
        return self.diagonal().sum()

    def vdot(self, other: Tensor) -> Tensor:
        if self.ndim != 1 or other.ndim != 1:
            raise ArgumentError(f"vdot needs two 1-d tensors, got shapes {self.shape} and {other.shape}")
        if self.shape != other.shape:
            raise ArgumentError(f"vdot: the vectors differ in size: {self.shape[0]} and {other.shape[0]}")
        if self.dtype != other.dtype:
            raise ArgumentError(f"vdot needs both vectors of one dtype, got {self.dtype} and {other.dtype}")
        return self.matmul(other)

    def _scaled_add(self, product: Tensor, beta: Any, alpha: Any, name: str) -> Tensor:
        """beta * self + alpha * product; beta == 0 ignores self entirely (its NaNs too), as torch."""
        if not _broadcasts_to(self.shape, product.shape):
            raise ArgumentError(f"{name}: self of shape {self.shape} does not broadcast to {product.shape}")
        out = product if alpha == 1 else product * alpha
        if beta == 0:
            return out
        return (self if beta == 1 else self * beta) + out

    def addmm(self, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return self._scaled_add(mat1.mm(mat2), beta, alpha, "addmm")

    def addmv(self, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return self._scaled_add(mat.mv(vec), beta, alpha, "addmv")

    def addr(self, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return self._scaled_add(vec1.outer(vec2), beta, alpha, "addr")

    def baddbmm(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return self._scaled_add(batch1.bmm(batch2), beta, alpha, "baddbmm")

    def addbmm(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return self._scaled_add(batch1.bmm(batch2).sum(0), beta, alpha, "addbmm")

    def addcmul(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        return self + value * (tensor1 * tensor2)

    def addcdiv(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        if not any(dtypes.is_float(t.dtype) for t in (tensor1, tensor2) if isinstance(t, Tensor)):
            raise DTypeError("addcdiv: integer division is not supported; use addcmul with a reciprocal or cast")
        return self + value * (tensor1 / tensor2)

    def cross(self, other: Tensor, dim: int | None = None) -> Tensor:
        """The cross product of 3-vectors along dim (the first dim of size 3 when None, as torch.cross)."""
        shape = _broadcast_shape(self.shape, other.shape)
        a, b = self._broadcast_to(shape), other._broadcast_to(shape)
        if dim is None:
            if 3 not in shape:
                raise ArgumentError(f"cross: no dimension of size 3 in shape {shape}")
            d = shape.index(3)
        else:
            d = _axes(dim, len(shape))[0]
            if shape[d] != 3:
                raise ArgumentError(f"cross: dimension {d} must have size 3, got shape {shape}")
        return a.roll(-1, d) * b.roll(-2, d) - a.roll(-2, d) * b.roll(-1, d)

    def diff(self, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
        """The n-th forward difference along dim (bool: whether neighbours differ)."""
        if self.ndim == 0:
            raise ArgumentError("diff expects a tensor with at least 1 dim, got a 0-d tensor")
        if n < 0:
            raise ArgumentError(f"diff: order n must be non-negative, got {n}")
        d = _axes(dim, self.ndim)[0]
        if n == 0:
            return self
        parts = []
        for extra in (prepend, self, append):
            if extra is None:
                continue
            e = extra if isinstance(extra, Tensor) else Tensor(extra, dtype=self.dtype, device=self.device)
            if e.ndim == 0:
                e = e.reshape((1,) * self.ndim).expand(*self.shape[:d], 1, *self.shape[d + 1 :])
            parts.append(e)
        x = parts[0].cat(*parts[1:], dim=d) if len(parts) > 1 else self
        for _ in range(n):
            m = x.shape[d]
            hi = x.shrink([(min(1, m), m) if i == d else None for i in range(x.ndim)])
            lo = x.shrink([(0, max(m - 1, 0)) if i == d else None for i in range(x.ndim)])
            x = hi != lo if x.dtype == dtypes.bool else hi - lo
        return x

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
        """Matrices (in dims dim1, dim2 of the result) whose offset diagonal holds the last dim of self."""
        nd = self.ndim + 1
        d1, d2 = _axes(dim1, nd)[0], _axes(dim2, nd)[0]
        if d1 == d2:
            raise ArgumentError(f"diag_embed: dim1 and dim2 must differ, both are {d1}")
        m = self.shape[-1] if self.ndim else 1
        x = self.reshape(1) if self.ndim == 0 else self
        n = m + abs(offset)
        vals = x.pad([None] * (x.ndim - 1) + [(0, n - m)])
        rows = Tensor.arange(n, device=self.device).reshape(n, 1)
        cols = Tensor.arange(n, device=self.device).reshape(1, n)
        on = cols - rows == offset
        out = on.where(vals.unsqueeze(-1) if offset >= 0 else vals.unsqueeze(-2), 0).cast(self.dtype)
        return out.movedim((nd - 2, nd - 1), (d1, d2)) if (d1, d2) != (nd - 2, nd - 1) else out

    def dist(self, other: Tensor, p: float = 2) -> Tensor:
        return (self - other).norm(p)

    def renorm(self, p: float, dim: int, maxnorm: float) -> Tensor:
        """Each slice along dim with a p-norm above maxnorm scaled down to norm maxnorm."""
        if p <= 0:
            raise ArgumentError(f"renorm: p must be positive, got {p}")
        if maxnorm < 0:
            raise ArgumentError(f"renorm: maxnorm must be non-negative, got {maxnorm}")
        d = _dim(dim, self.ndim)
        norms = self.norm(p, tuple(i for i in range(self.ndim) if i != d), keepdim=True)
        # torch's 1e-7 keeps the scaled norm just under maxnorm
        return self * (norms > maxnorm).where(maxnorm / (norms + 1e-7), 1.0).cast(self.dtype)

    def _check_square(self, name: str) -> None:
        if self.ndim < 2 or self.shape[-1] != self.shape[-2]:
            raise ArgumentError(f"{name} needs square matrices (or a batch of them), got shape {self.shape}")

    def inverse(self) -> Tensor:
        """torch.linalg.inv: LU with partial pivoting (a singular matrix raises LinAlgError, see lazygrad.linalg)."""
        from lazygrad import linalg

        return linalg.inv(self)

    def matrix_exp(self) -> Tensor:
        from lazygrad import linalg

        return linalg.matrix_exp(self)

    def cholesky_solve(self, input2: Tensor, upper: bool = False) -> Tensor:
        """X with A X = self for A = L L^T, L = input2 (L^T L, input2 upper, when upper), by two substitutions."""
        from lazygrad import linalg

        low = input2.transpose(-2, -1) if upper else input2
        y = linalg.solve_triangular(low, self, upper=False)
        return linalg.solve_triangular(low.transpose(-2, -1), y, upper=True)

    def cholesky_inverse(self, upper: bool = False) -> Tensor:
        """(L L^T)^-1 for L = self (L^T L when upper)."""
        eye = Tensor.eye(self.shape[-1], dtype=self.dtype, device=self.device)
        return eye.expand(self.shape).cholesky_solve(self, upper)

    def _symmetric_grad(self) -> Tensor:
        """self, with the gradient of (self + self^T) / 2: torch's eigh and cholesky read one triangle, and give
        the symmetric gradient of a function of a symmetric matrix."""
        sym = (self + self.transpose(-2, -1)) / 2
        return sym + (self - sym).detach()

    def slogdet(self) -> tuple[Tensor, Tensor]:
        """(sign, log|det|) of square matrices over the last two dims, from the diagonal of a Householder R."""
        self._check_square("slogdet")
        _, r, sign = self._householder()
        diag = r.diagonal(0, -2, -1)
        return sign * diag.sign().prod(-1), diag.abs().log().sum(-1)

    def logdet(self) -> Tensor:
        sign, logabs = self.slogdet()
        return (sign < 0).where(math.nan, logabs)

    def matrix_power(self, n: int) -> Tensor:
        self._check_square("matrix_power")
        if n < 0:
            return self.inverse().matrix_power(-n)
        out: Tensor | None = None
        sq = self
        while n:
            if n & 1:
                out = sq if out is None else out @ sq
            n >>= 1
            if n:
                sq = sq @ sq
        if out is None:
            eye = Tensor.eye(self.shape[-1], dtype=self.dtype, device=self.device)
            return eye.expand(self.shape).contiguous()
        return out

    # reductions and statistics (indices in the default int, as argmax and sort; counts in int64, as torch)

    def amax(self, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
        return self.max(_torch_dims(dim), keepdim)

    def amin(self, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
        return self.min(_torch_dims(dim), keepdim)

    def aminmax(self, *, dim: int | None = None, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        return self.min(dim, keepdim), self.max(dim, keepdim)

    def count_nonzero(self, dim: int | Sequence[int] | None = None) -> Tensor:
        return (self != 0).sum(_torch_dims(dim), dtype=dtypes.int64)

    def nansum(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: DType | str | None = None
    ) -> Tensor:
        x = self.isnan().where(0, self) if dtypes.is_float(self.dtype) else self
        return x.sum(_torch_dims(dim), keepdim, dtype=dtype)

    def nanmean(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: DType | str | None = None
    ) -> Tensor:
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"nanmean needs a floating point tensor, got {self.dtype}")
        x = self if dtype is None else self.cast(dtype)
        kept, dim = x.isnan().logical_not(), _torch_dims(dim)
        return x.nansum(dim, keepdim) / kept.sum(dim, keepdim).cast(x.dtype)

    def _sorted_along(self, dim: int | None, name: str) -> tuple[Tensor, Tensor, int]:
        """(sorted values, their indices, dim) of self (flattened when dim is None) along one non-empty dim."""
        x = self.flatten() if dim is None else self.reshape(1) if self.ndim == 0 else self
        d = 0 if dim is None else _dim(dim, self.ndim)
        if x.shape[d] == 0:
            raise _EmptyReductionError(f"{name}: reduction dim {d} of shape {self.shape} has size 0")
        values, idx = x.sort(d)
        return values, idx, d

    def _kept(self, d: int) -> Tensor:
        """How many values along d are not NaN (keepdim, int32)."""
        if not dtypes.is_float(self.dtype):
            return Tensor.full(_reduced_shape(self.shape, d, True), self.shape[d], dtype=dtypes.int32)
        return self.isnan().logical_not().sum(d, keepdim=True, dtype=dtypes.int32)

    def _median(self, dim: int | None, keepdim: bool, ignore_nan: bool, name: str) -> Any:
        if dim is None and self.numel() == 0:
            return Tensor.full((), math.nan, dtype=self.dtype, device=self.device)
        values, idx, d = self._sorted_along(dim, name)
        n, kept = values.shape[d], values._kept(d)
        if ignore_nan:
            pos = ((kept - 1) // 2).maximum(0)
        else:  # a NaN anywhere is the median: NaNs sort last, so the first one is at position kept
            pos = (kept < n).where(kept, (n - 1) // 2)
        out_v, out_i = values.gather(d, pos), idx.gather(d, pos)
        if dim is None:
            # torch's gradient of a whole median is shared by every element equal to it (NaN: by the NaNs), as a max's
            v = out_v.reshape(())
            top = v.detach()

            def share(x: Tensor) -> Tensor:
                hit = ((x == top) | (x.isnan() & top.isnan())).cast(x.dtype)
                return hit / hit.sum()

            return self._with_derivative(v, share)
        shape = _reduced_shape(self.shape, dim, keepdim)
        return ValuesIndices(out_v.reshape(shape), out_i.reshape(shape))

    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The lower median (of an even count the smaller middle value); a NaN makes it NaN. With dim: (values,
        indices)."""
        return self._median(dim, keepdim, False, "median")

    def nanmedian(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """median of the values that are not NaN (NaN where all are)."""
        return self._median(dim, keepdim, True, "nanmedian")

    def _quantile(
        self, q: Any, dim: int | None, keepdim: bool, interpolation: str, ignore_nan: bool, name: str
    ) -> Tensor:
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"{name} needs a floating point tensor, got {self.dtype}")
        if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
            raise ArgumentError(
                f"{name}: interpolation must be linear, lower, higher, midpoint or nearest, not {interpolation!r}"
            )
        if isinstance(q, Tensor):  # its values are not checked: that would read them from the device
            if q.ndim > 1:
                raise ArgumentError(f"{name}: q must be a scalar or a 1-d tensor, got shape {q.shape}")
            if q.dtype != self.dtype:
                raise ArgumentError(f"{name}: q's dtype {q.dtype} differs from the input's {self.dtype}")
            qs = q
        else:
            if any(not 0 <= v <= 1 for v in (q if isinstance(q, (list, tuple)) else [q])):
                raise ArgumentError(f"{name}: q must be in the range [0, 1], got {q}")
            qs = Tensor(q, dtype=self.dtype, device=self.device)
        out_shape = qs.shape + _reduced_shape(self.shape, dim, keepdim)
        if self.numel() == 0:
            raise ArgumentError(f"{name}: the input tensor must be non-empty")
        values, _, d = self._sorted_along(dim, name)
        n, kept = values.shape[d], values._kept(d)
        qb = qs.reshape(qs.shape + (1,) * values.ndim)
        if ignore_nan:
            ranks = (qb * (kept - 1).cast(self.dtype)).maximum(0)
        else:  # a row with a NaN reads its last value: a NaN
            ranks = (kept < n).where(n - 1, qb * (n - 1)).cast(self.dtype)
        if interpolation in ("lower", "higher", "nearest"):
            ranks = {"lower": ranks.floor, "higher": ranks.ceil, "nearest": ranks.round}[interpolation]()
        vb = values.expand(*qs.shape, *values.shape) if qs.ndim else values
        dd = d + qs.ndim
        lo = vb.gather(dd, ranks.floor().cast(dtypes.int32))
        if interpolation in ("lower", "higher", "nearest"):
            out = lo
        else:
            hi = vb.gather(dd, ranks.ceil().cast(dtypes.int32))
            w = ranks - ranks.floor() if interpolation == "linear" else ranks.full_like(0.5)
            # torch's lerp: from the nearer end, so that w == 1 gives hi exactly
            out = (w < 0.5).where(lo + w * (hi - lo), hi - (hi - lo) * (1 - w))
        return out.reshape(out_shape)

    def quantile(
        self, q: Any, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"
    ) -> Tensor:
        """The q-th quantiles along dim (all values when None); q a number or a 1-d tensor (its dim goes first)."""
        return self._quantile(q, dim, keepdim, interpolation, False, "quantile")

    def nanquantile(
        self, q: Any, dim: int | None = None, keepdim: bool = False, *, interpolation: str = "linear"
    ) -> Tensor:
        return self._quantile(q, dim, keepdim, interpolation, True, "nanquantile")

    def mode(self, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        """The most frequent value along dim (the smallest of those equally frequent) and the index of its last
        occurrence, as torch. Each value's count is a compare with every other (n^2, as sort)."""
        x = self.reshape(1) if self.ndim == 0 else self
        d = _dim(dim, self.ndim)
        n = x.shape[d]
        if n == 0:
            raise _EmptyReductionError(f"mode: reduction dim {d} of shape {self.shape} has size 0")
        xl = x.transpose(d, -1)
        pair = (*xl.shape, n)
        counts = _sorts_equal(xl.unsqueeze(-1).expand(pair), xl.unsqueeze(-2).expand(pair)).sum(-1, dtype=dtypes.int32)
        frequent = counts == counts.max(-1, keepdim=True)
        value = frequent.where(xl, math.inf if dtypes.is_float(xl.dtype) else dtypes.max(xl.dtype)).min(-1, True)
        i = Tensor.arange(n, device=self.device)
        idx = (_sorts_equal(xl, value) & frequent).where(i, -1).max(-1, keepdim=True)
        vals = xl.gather(-1, idx).transpose(d, -1)
        idx = idx.transpose(d, -1).cast(dtypes.default_int)
        shape = _reduced_shape(self.shape, dim if self.ndim else None, keepdim)
        return ValuesIndices(vals.reshape(shape), idx.reshape(shape))

    def msort(self) -> Tensor:
        return self.sort(0)[0]

    def _unique_rows(
        self, dim: int | None, consecutive: bool, return_inverse: bool, return_counts: bool
    ) -> Tensor | tuple[Tensor, ...]:
        """unique / unique_consecutive: rows are the elements (dim None) or the slices along dim, compared whole.
        Sorting them is a lexicographic rank (each row against every other, n^2 as sort); how many distinct rows
        there are is read from the device, as torch does."""
        x = self.flatten().unsqueeze(-1) if dim is None else self.movedim(dim, 0)
        d = None if dim is None else _axes(dim, self.ndim)[0]
        n = x.shape[0]
        rows = x.reshape(n, -1) if n else x.reshape(0, max(1, prod(x.shape[1:])))
        i = Tensor.arange(n, device=self.device)
        if consecutive:
            perm, srt = i, rows
        else:
            pair = (n, n, rows.shape[1])
            a, b = rows.unsqueeze(1).expand(pair), rows.unsqueeze(0).expand(pair)  # row i, row j
            same = _sorts_equal(a, b)
            # all earlier columns equal: an exclusive running product of `same` along the columns
            prefix = same.cast(dtypes.int32).pad([None, None, (1, 0)], value=1)[..., :-1].cumprod(-1) > 0
            before = (_sorts_before(b, a) & prefix).any(-1) | (same.all(-1) & (i.reshape(1, n) < i.reshape(n, 1)))
            place = before.sum(-1, dtype=dtypes.int32).unsqueeze(-1) == i  # (row, its place)
            srt = _pick(rows.unsqueeze(1), place.unsqueeze(-1), (0,))
            perm = _pick(i.reshape(n, 1), place, (0,))
        differs = (srt[1:] != srt[:-1]).any(-1)
        first = Tensor.ones(min(n, 1), dtype=dtypes.bool, device=self.device).cat(differs)
        u = int(first.sum().item()) if n else 0
        out = _pick(srt.unsqueeze(0), first._select_rows(u).unsqueeze(-1), (1,)) if n else srt[:0]
        out = out.reshape(u, *x.shape[1:])
        out = out.reshape(-1) if dim is None else out.movedim(0, d)
        group = first.cast(dtypes.int32).cumsum() - 1  # each sorted row's group
        extra: list[Tensor] = []
        if return_inverse:
            inv = group if consecutive else _pick(group.reshape(n, 1), perm.reshape(n, 1) == i, (0,))
            extra.append(inv.cast(dtypes.int64).reshape(self.shape if dim is None else (n,)))
        if return_counts:
            extra.append(
                (group.reshape(1, n) == Tensor.arange(u, device=self.device).reshape(u, 1)).sum(1, dtype=dtypes.int64)
            )
        return (out, *extra) if extra else out

    def unique(
        self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Tensor | tuple[Tensor, ...]:
        """The distinct values (or slices along dim), always sorted (torch allows that for sorted=False)."""
        return self._unique_rows(dim, False, return_inverse, return_counts)

    def unique_consecutive(
        self, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Tensor | tuple[Tensor, ...]:
        return self._unique_rows(dim, True, return_inverse, return_counts)

    def bincount(self, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
        """Occurrences of each value 0..max (or the summed weights there). The length depends on the largest value,
        read from the device, as torch does."""
        if not dtypes.is_int(self.dtype):
            raise _unsupported("bincount", self, "it counts integers")
        if self.ndim != 1:
            raise ArgumentError(f"bincount needs a 1-d tensor of non-negative ints, got shape {self.shape}")
        if minlength < 0:
            raise ArgumentError(f"bincount: minlength must be non-negative, got {minlength}")
        if weights is not None and weights.shape != self.shape:
            raise ArgumentError(f"bincount: weights of shape {weights.shape} must match the input's {self.shape}")
        size = minlength
        if self.numel():
            lo, hi = Tensor.stack(self.min(), self.max()).tolist()
            if lo < 0:
                raise ArgumentError(f"bincount needs non-negative values, got {lo}")
            size = max(size, hi + 1)
        hits = self.unsqueeze(1) == Tensor.arange(size, device=self.device)
        if weights is None:
            return hits.sum(0, dtype=dtypes.int64)
        w = weights if dtypes.is_float(weights.dtype) else weights.cast(dtypes.float64)
        return _pick(w.unsqueeze(1), hits, (0,))

    def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002 (torch's names)
        """Counts of the values in `bins` equal-width bins over [min, max] (over the data's range when both are
        equal); values outside are not counted."""
        if not dtypes.is_float(self.dtype):
            raise _unsupported("histc", self, "cast to a floating point dtype first")
        if bins <= 0:
            raise ArgumentError(f"histc: bins must be positive, got {bins}")
        if min > max:
            raise ArgumentError(f"histc: max ({max}) must be larger than min ({min})")
        x = self.flatten()
        if x.numel() == 0:
            return Tensor.zeros(bins, dtype=self.dtype, device=self.device)
        lo: Any = min
        hi: Any = max
        if min == max:
            lo, hi = x.min(), x.max()
            same = lo == hi
            lo, hi = same.where(lo - 1, lo), same.where(hi + 1, hi)
        pos = ((x - lo) / (hi - lo) * bins).floor().cast(dtypes.int32)
        pos = (x == hi).where(bins - 1, pos)
        inside = (x >= lo) & (x <= hi)
        hits = inside.unsqueeze(1) & (pos.unsqueeze(1) == Tensor.arange(bins, device=self.device))
        return hits.sum(0).cast(self.dtype)

    def cov(self, *, correction: int = 1, fweights: Tensor | None = None, aweights: Tensor | None = None) -> Tensor:
        """The covariance of the variables in the rows (observations in the columns), as torch.cov."""
        if self.ndim > 2:
            raise ArgumentError(f"cov expects a tensor with at most 2 dims, got shape {self.shape}")
        x = (self if self.ndim == 2 else self.reshape(1, -1)).cast(least_upper_float(self.dtype))
        n = x.shape[1]
        w: Tensor | None = None
        if fweights is not None:
            if not dtypes.is_int(fweights.dtype):
                raise DTypeError(f"cov: fweights must be integers, got {fweights.dtype}")
            w = fweights
        if aweights is not None:
            if not dtypes.is_float(aweights.dtype):
                raise DTypeError(f"cov: aweights must be floating point, got {aweights.dtype}")
            w = aweights if w is None else w * aweights
        for name, t in (("fweights", fweights), ("aweights", aweights)):
            if t is not None and t.shape != (n,):
                raise ArgumentError(f"cov: {name} must be 1-d with one weight per observation ({n}), got {t.shape}")
        if w is None:
            avg, fact = x.mean(1, keepdim=True), Tensor(float(n - correction), dtype=x.dtype, device=self.device)
            xw = x - avg
        else:
            w = w.cast(x.dtype)
            wsum = w.sum()
            avg = (x * w).sum(1, keepdim=True) / wsum
            fact = wsum - correction if aweights is None else wsum - correction * (w * aweights).sum() / wsum
            xw = (x - avg) * w
        c = (xw @ (x - avg).transpose(0, 1)) / fact.maximum(0)
        return c.reshape(()) if self.ndim < 2 else c

    def corrcoef(self) -> Tensor:
        c = self.cov()
        if c.ndim == 0:
            return c / c
        sd = c.diagonal().sqrt()
        return (c / sd.reshape(-1, 1) / sd.reshape(1, -1)).clip(-1, 1)

    # indexing

    def take(self, index: Tensor) -> Tensor:
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise DTypeError(f"take: index must be an integer tensor, got {getattr(index, 'dtype', type(index))}")
        return self.flatten()[index]

    def take_along_dim(self, indices: Tensor, dim: int | None = None) -> Tensor:
        if dim is None:
            return self.flatten().gather(0, indices.flatten())
        d = _axes(dim, self.ndim)[0]
        if indices.ndim != self.ndim:
            raise ArgumentError(f"take_along_dim: indices of shape {indices.shape} need {self.ndim} dims")

        def at_d(shape: tuple[int, ...], n: int) -> tuple[int, ...]:
            return shape[:d] + (n,) + shape[d + 1 :]

        shape = _broadcast_shape(at_d(self.shape, 1), at_d(indices.shape, 1))  # broadcast everywhere but along d
        return self._broadcast_to(at_d(shape, self.shape[d])).gather(
            d, indices._broadcast_to(at_d(shape, indices.shape[d]))
        )

    def _index_along(
        self, dim: int, index: Tensor, source_shape: tuple[int, ...] | None, name: str
    ) -> tuple[int, Tensor]:
        """(dim, index) of the index_* ops: a 1-d index, expanded to the source's shape along dim when given."""
        d = _dim(dim, self.ndim)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise DTypeError(f"{name}: index must be an integer tensor, got {getattr(index, 'dtype', type(index))}")
        if index.ndim > 1:
            raise IndexShapeError(f"{name}: index must be a 0-d or 1-d tensor, got shape {index.shape}")
        idx = index.reshape(-1)
        if source_shape is not None:
            want = self.shape[:d] + (idx.shape[0],) + self.shape[d + 1 :] if self.ndim else (idx.shape[0],)
            if source_shape != want and not (self.ndim == 0 and source_shape == ()):
                raise IndexShapeError(f"{name}: source of shape {source_shape} must have shape {want}")
        return d, idx

    def _spread(self, d: int, idx: Tensor) -> Tensor:
        """The 1-d index idx spread over self's shape with len(idx) at dim d (the index tensor of scatter)."""
        x = self.reshape(1) if self.ndim == 0 else self
        shape = x.shape[:d] + (idx.shape[0],) + x.shape[d + 1 :]
        return idx.reshape((1,) * d + (-1,) + (1,) * (x.ndim - d - 1)).expand(shape)

    def index_add(self, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        d, idx = self._index_along(dim, index, source.shape, "index_add")
        src = source if alpha == 1 else source * alpha
        x = self.reshape(1) if self.ndim == 0 else self
        return x.scatter_add(d, self._spread(d, idx), src.reshape(self._spread(d, idx).shape)).reshape(self.shape)

    def index_copy(self, dim: int, index: Tensor, source: Tensor) -> Tensor:
        d, idx = self._index_along(dim, index, source.shape, "index_copy")
        x = self.reshape(1) if self.ndim == 0 else self
        return x.scatter(d, self._spread(d, idx), source.reshape(self._spread(d, idx).shape)).reshape(self.shape)

    def index_fill(self, dim: int, index: Tensor, value: Any) -> Tensor:
        d, idx = self._index_along(dim, index, None, "index_fill")
        if isinstance(value, Tensor) and value.ndim != 0:
            raise ArgumentError(f"index_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
        x = self.reshape(1) if self.ndim == 0 else self
        hit = x._hits(d, idx.reshape((1,) * d + (-1,) + (1,) * (x.ndim - d - 1))).any(d)
        return hit.where(value, x).cast(self.dtype).reshape(self.shape)

    def index_put(self, indices: Sequence[Tensor | None], values: Any, accumulate: bool = False) -> Tensor:
        """self with values put at self[indices]; accumulate sums repeated positions instead of keeping one."""
        indices = tuple(indices)
        v = values if isinstance(values, Tensor) else Tensor(values, dtype=self.dtype, device=self.device)
        if v.dtype != self.dtype:
            raise ArgumentError(f"index_put: values of dtype {v.dtype} must match the tensor's {self.dtype}")
        if not accumulate:
            hit, vals = _setitem_parts(self, indices, v)
            return vals if hit is None else hit.where(vals, self)
        if any(i is None or not isinstance(i, Tensor) for i in indices):
            raise TypeError("index_put with accumulate=True takes a sequence of index tensors")
        if len(indices) == 1 and indices[0].dtype == dtypes.bool:
            indices = indices[0].nonzero(as_tuple=True)  # type: ignore[assignment]
        k = len(indices)
        if k > self.ndim:
            raise IndexError(f"index_put: {k} index tensors for a tensor of {self.ndim} dims")
        lead, rest = self.shape[:k], self.shape[k:]
        shape = functools.reduce(_broadcast_shape, (i.shape for i in indices), ())
        lin: Tensor | int = 0
        for i, (t, s) in enumerate(zip(indices, lead)):
            t = t.cast(dtypes.int64)
            lin = lin + (t < 0).where(t + s, t)._broadcast_to(shape) * prod(lead[i + 1 :])
        flat_idx = (lin if isinstance(lin, Tensor) else Tensor(lin)).reshape(-1)
        src = v._broadcast_to(shape + rest).reshape(flat_idx.shape[0], *rest)
        return self.reshape(prod(lead), *rest).index_add(0, flat_idx, src).reshape(self.shape)

    def masked_scatter(self, mask: Tensor, source: Tensor) -> Tensor:
        """self with the true positions of mask filled by source's elements in order."""
        if mask.dtype != dtypes.bool:
            raise DTypeError(f"masked_scatter: mask must be a bool tensor, got {mask.dtype}")
        if source.dtype != self.dtype:
            raise ArgumentError(f"masked_scatter: source dtype {source.dtype} must match the tensor's {self.dtype}")
        if not _broadcasts_to(mask.shape, self.shape):
            raise ArgumentError(f"masked_scatter: mask of shape {mask.shape} does not broadcast to {self.shape}")
        m = mask._broadcast_to(self.shape).flatten()
        src = source.flatten()
        if src.numel() == 0:
            return self
        rank = (m.cast(dtypes.int32).cumsum() - 1).maximum(0).minimum(src.numel() - 1)
        return m.where(src[rank], self.flatten()).reshape(self.shape)

    # in place (through assign: the write order of the assign path holds) and construction

    def fill_(self, value: Any) -> Tensor:
        if isinstance(value, Tensor) and value.ndim != 0:
            raise ArgumentError(f"fill_ takes a number or a 0-d tensor, got shape {value.shape}")
        v = value.cast(self.dtype).to(self.device) if isinstance(value, Tensor) else value
        _check_inplace_allowed(self)
        return self.assign(
            v._broadcast_to(self.shape)
            if isinstance(v, Tensor)
            else Tensor.full(self.shape, v, dtype=self.dtype, device=self.device)
        )

    def zero_(self) -> Tensor:
        return self.fill_(0)

    def copy_(self, src: Any, non_blocking: bool = False) -> Tensor:
        s = src if isinstance(src, Tensor) else Tensor(src, device=self.device)
        if not _broadcasts_to(s.shape, self.shape):
            raise ArgumentError(f"copy_: source of shape {s.shape} does not broadcast to {self.shape}")
        _check_inplace_allowed(self)
        return self.assign(s.to(self.device).cast(self.dtype)._broadcast_to(self.shape))

    def add_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return self._inplace(self + (other if alpha == 1 else other * alpha))

    def sub_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return self._inplace(self - (other if alpha == 1 else other * alpha))

    def _random_fill(self, values: Tensor, name: str, ints_too: bool = False) -> Tensor:
        if not ints_too and not dtypes.is_float(self.dtype):
            raise _unsupported(name, self, "it fills floating point tensors")
        _check_inplace_allowed(self)
        return self.assign(values.cast(self.dtype))

    def _unit(self) -> Tensor:
        """Fresh uniforms in [0, 1) of self's shape (the next RNG counter: no two calls share values)."""
        return Tensor.rand(*self.shape, dtype=dtypes.float32, device=self.device)

    def uniform_(self, a: float = 0.0, b: float = 1.0, **bounds: float) -> Tensor:
        """Uniform in [from, to) (torch's keywords `from` and `to`; positionally a and b)."""
        lo, hi = bounds.pop("from", a), bounds.pop("to", b)
        if bounds:
            raise TypeError(f"uniform_ got unexpected keywords {sorted(bounds)}")
        if lo > hi:
            raise ArgumentError(f"uniform_ expects from <= to, got from={lo} to={hi}")
        return self._random_fill(self._unit() * (hi - lo) + lo, "uniform_")

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> Tensor:
        if std < 0:
            raise ArgumentError(f"normal_ expects std >= 0, got {std}")
        return self._random_fill(Tensor.randn(*self.shape, device=self.device) * std + mean, "normal_")

    def log_normal_(self, mean: float = 1.0, std: float = 2.0) -> Tensor:
        if std <= 0:
            raise ArgumentError(f"log_normal_ expects std > 0, got {std}")
        return self._random_fill((Tensor.randn(*self.shape, device=self.device) * std + mean).exp(), "log_normal_")

    def exponential_(self, lambd: float = 1.0) -> Tensor:
        if lambd <= 0:
            raise ArgumentError(f"exponential_ expects lambd > 0, got {lambd}")
        return self._random_fill(-(1 - self._unit()).log() / lambd, "exponential_")

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0) -> Tensor:
        if sigma <= 0:
            raise ArgumentError(f"cauchy_ expects sigma > 0, got {sigma}")
        return self._random_fill(median + sigma * ((self._unit() - 0.5) * math.pi).tan(), "cauchy_")

    def geometric_(self, p: float) -> Tensor:
        """The count of Bernoulli(p) trials up to the first success (1, 2, ...)."""
        if not 0 < p < 1:
            raise ArgumentError(f"geometric_ expects p in (0, 1), got {p}")
        trials = ((1 - self._unit()).log() / math.log1p(-p)).ceil().maximum(1)
        return self._random_fill(trials, "geometric_", ints_too=True)

    def random_(self, a: int | None = None, b: int | None = None, **bounds: int | None) -> Tensor:
        """Integers uniform in [from, to - 1]; random_(to) is [0, to); random_() is [0, 2**mantissa] for floats and
        [0, max] for ints (torch's keywords `from` and `to`)."""
        lo, hi = bounds.pop("from", None), bounds.pop("to", None)
        if bounds:
            raise TypeError(f"random_ got unexpected keywords {sorted(bounds)}")
        if a is not None and b is None and lo is None:
            lo, hi = 0, a  # random_(to)
        elif a is not None:
            lo, hi = a, b
        lo = lo or 0
        if hi is None:
            if self.dtype == dtypes.bool:
                hi = 2
            else:
                hi = (
                    (2 ** dtypes.finfo(self.dtype)[1] + 1)
                    if dtypes.is_float(self.dtype)
                    else dtypes.max(self.dtype) + 1
                )
        if lo >= hi:
            raise ArgumentError(f"random_ expects from < to, got from={lo} to={hi}")
        bits = Tensor._random_bits(2 * self.numel(), self.device).cast(dtypes.uint64)
        words = (bits[: self.numel()] << 32) | bits[self.numel() :]
        values = (words % (hi - lo)).cast(dtypes.int64) + lo
        return self._random_fill(values.reshape(self.shape), "random_", ints_too=True)

    def bernoulli(self, p: Any = None) -> Tensor:
        """0 / 1 in self's dtype, 1 with probability p (by default: self's values, as torch.bernoulli(input))."""
        prob = self if p is None else p
        return (self._unit() < prob).cast(self.dtype)

    def bernoulli_(self, p: Any = 0.5) -> Tensor:
        return self._random_fill(self.bernoulli(p), "bernoulli_", ints_too=True)

    def new_full(
        self,
        size: Any,
        fill_value: Any,
        *,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool = False,
    ) -> Tensor:
        out = Tensor.full(argfix(size), fill_value, dtype=dtype or self.dtype, device=device or self.device)
        return out.requires_grad_(True) if requires_grad else out

    def new_zeros(
        self, *size: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool = False
    ) -> Tensor:
        return self.new_full(argfix(*size), 0, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_ones(
        self, *size: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool = False
    ) -> Tensor:
        return self.new_full(argfix(*size), 1, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_empty(
        self, *size: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool = False
    ) -> Tensor:
        out = Tensor.empty(argfix(*size), dtype=dtype or self.dtype, device=device or self.device)
        return out.requires_grad_(True) if requires_grad else out

    def new_tensor(
        self, data: Any, *, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool = False
    ) -> Tensor:
        """A new leaf holding a copy of data (a tensor's values are copied, its graph is not)."""
        dt = to_dtype(dtype) if dtype is not None else self.dtype
        if isinstance(data, Tensor):
            out = data.detach().to(device or self.device).cast(dt).clone()
        else:
            out = Tensor(data, dtype=dt, device=device or self.device)
        return out.requires_grad_(True) if requires_grad else out

    def type_as(self, other: Tensor) -> Tensor:
        return self.cast(other.dtype)

    def view_as(self, other: Tensor) -> Tensor:
        return self.view(other.shape)

    def reshape_as(self, other: Tensor) -> Tensor:
        return self.reshape(other.shape)

    def cpu(self) -> Tensor:
        return self.to("CPU")

    def cuda(self, device: int | str | None = None, non_blocking: bool = False) -> Tensor:
        """torch's: a copy on CUDA device `device` (an index), on the first where None."""
        if isinstance(device, str):
            return self.to(device)
        return self.to("CUDA" if device is None else f"CUDA:{device}")

    def share_memory_(self) -> Tensor:
        """torch's (memory for worker processes): accepted, nothing to do; a forked child sees the parent's memory."""
        return self

    def is_shared(self) -> bool:
        return False

    def data_ptr(self) -> int:
        """The address of the first element (the tensor is realized, and copied to memory of its own where it is a
        view that cannot be read in place)."""
        buf = self._contiguous_buffer()
        return buf.ptr

    def new(self, *args: Any) -> Tensor:
        """torch's legacy constructor of this dtype and device: new(sizes...) uninitialized (zeros here), new(data)."""
        if len(args) == 1 and not isinstance(args[0], int):
            return Tensor(args[0], dtype=self.dtype, device=self.device)
        return Tensor.zeros(*args, dtype=self.dtype, device=self.device)

    def swapdims_(self, dim0: int, dim1: int) -> Tensor:
        return self._reshape_in_place(self.swapdims(dim0, dim1))

    def byte(self) -> Tensor:
        return self.cast(dtypes.uint8)

    def char(self) -> Tensor:
        return self.cast(dtypes.int8)

    def short(self) -> Tensor:
        return self.cast(dtypes.int16)

    def bfloat16(self) -> Tensor:
        return self.cast(dtypes.bfloat16)

    def clamp_min(self, min: Any) -> Tensor:  # noqa: A002
        return self.clip(min, None)

    def clamp_max(self, max: Any) -> Tensor:  # noqa: A002
        return self.clip(None, max)

    # autograd

    @property
    def is_leaf(self) -> bool:
        """As torch: a tensor not computed from one that requires grad (or a leaf set to require it)."""
        return bool(self._requires_grad) or not self.requires_grad

    def retain_grad(self) -> None:
        """backward() fills .grad of a computed tensor too (see the class docstring): this makes sure it is one
        backward looks for."""
        if not self.requires_grad:
            raise ArgumentError("retain_grad() on a tensor that does not require grad")
        if self._requires_grad is None:
            _note_unset(self)
        if (not self.is_leaf and self.uop.base.op is not Ops.BUFFER and id(self) not in _retaining
                and id(self) not in _grad_hooks):  # fmt: skip
            self._own_node("retain_grad")  # (a realized value is a buffer of its own already)
        _retaining[id(self)] = self

    def _own_node(self, why: str) -> UOp:
        """Give this computed tensor a node of its own that reads as its value (numbered: never hash-consed with
        another): an alike tensor computed apart (x * 2 twice) is one node, and a gradient kept for this tensor or a
        hook on it must see only the uses of this one, as torch's (those computed from it after this call)."""
        _lazy_overwritten.add(self.uop)  # (views taken before follow it to the new node)
        self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), (why, next(_leaf_ids)))
        return self.uop

    @property
    def retains_grad(self) -> bool:
        return id(self) in _retaining and not self.is_leaf

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> _HookHandle:
        """hook(grad) runs on the gradient with respect to this tensor when one is computed; what it returns (if not
        None) replaces that gradient. On a leaf it changes what .grad receives; on a computed tensor the gradient
        flowing back through it (from tensors computed from it after this call). Returns a remover, as torch's
        handle.remove."""
        hooks = self._hook_list(_grad_hooks, hook)
        if not self.is_leaf and len(hooks) == 1:  # the first hook: later ones join the same list
            from lazygrad.gradient import define_gradient

            # a node of its own that reads as self, with the hooks as its derivative rule
            src, key = self.uop, id(self)

            def rule(g: Tensor) -> Tensor:
                out = _run_hooks(hooks, g)
                _hooked[key] = (g, out)  # a kept .grad is the hooked gradient, as torch's (hooks run once)
                return out

            self.uop = self._own_node("hook")
            define_gradient(self.uop, src, rule)
            weakref.finalize(self, _hooked.pop, key, None)
        return _HookHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> _HookHandle:
        """hook(self) runs after backward() has accumulated into this leaf's .grad (torch's; an optimizer step
        inside backward reads p.grad there). Returns a remover, as register_hook's."""
        if self.requires_grad and not self.is_leaf:
            raise ArgumentError("post accumulate grad hooks can only be registered on leaf tensors")
        hooks = self._hook_list(_post_accumulate_hooks, hook)
        return _HookHandle(hooks, hook)  # type: ignore[arg-type]

    def _hook_list(self, registry: dict[int, list], hook: Callable) -> list:
        """hook appended to this tensor's list in registry (made on the first hook, dropped when the tensor dies)."""
        if not self.requires_grad:
            raise ArgumentError("cannot register a hook on a tensor that does not require grad")
        if id(self) not in registry:
            registry[id(self)] = []
            weakref.finalize(self, registry.pop, id(self), None)
        hooks = registry[id(self)]
        hooks.append(hook)
        return hooks

    # elementwise

    def isposinf(self) -> Tensor:
        return self == math.inf if dtypes.is_float(self.dtype) else self.zeros_like(dtypes.bool)

    def isneginf(self) -> Tensor:
        return self == -math.inf if dtypes.is_float(self.dtype) else self.zeros_like(dtypes.bool)

    def isreal(self) -> Tensor:
        return self.ones_like(dtypes.bool)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
        """NaN, +inf and -inf replaced (the infinities by the dtype's largest / lowest finite value by default)."""
        if any(isinstance(v, Tensor) for v in (nan, posinf, neginf)):
            raise TypeError("nan_to_num: nan, posinf and neginf must be numbers, not tensors")
        if not dtypes.is_float(self.dtype):
            return self
        e, m = dtypes.finfo(self.dtype)
        big = (2 - 2.0**-m) * 2.0 ** (2 ** (e - 1) - 1)
        hi, lo = big if posinf is None else posinf, -big if neginf is None else neginf
        x = self.isnan().where(nan, self)
        return (self == math.inf).where(hi, (self == -math.inf).where(lo, x)).cast(self.dtype)

    def heaviside(self, values: Tensor) -> Tensor:
        if isinstance(values, Tensor) and values.dtype != self.dtype:
            raise ArgumentError(f"heaviside: values of dtype {values.dtype} must match the input's {self.dtype}")
        step = (self > 0).cast(self.dtype)
        return (self == 0).where(values, step).cast(self.dtype)

    def gcd(self, other: Any) -> Tensor:
        """Greatest common divisor (non-negative) by Euclid's steps, as many as the dtype's worst case needs (two
        consecutive Fibonacci numbers), all in one fused kernel."""
        a, b = self._broadcasted(other)
        if not dtypes.is_int(a.dtype):
            raise _unsupported("gcd", a, "it takes integer tensors")
        a, b = a.abs(), b.abs()
        # Euclid on values below 2**bits takes fewer than bits * log(2) / log(golden ratio) + 2 steps
        for _ in range(int(8 * a.dtype.itemsize * 1.4405) + 2):
            nz = b != 0
            a, b = nz.where(b, a), nz.where(a.mod(nz.where(b, 1)), 0)
        return a

    def lcm(self, other: Any) -> Tensor:
        a, b = self._broadcasted(other)
        g = a.gcd(b)
        # |a| / g * |b|, wrapping as torch's where the product overflows the dtype
        return (g == 0).where(0, a.abs().idiv((g == 0).where(1, g)) * b.abs())

    # more of torch's: matrix views and predicates, k-th values, scatters into slices, Cholesky

    @property
    def mT(self) -> Tensor:  # noqa: N802 (torch's name)
        if self.ndim < 2:
            raise ArgumentError(f"mT needs a tensor with at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    mH = mT  # real dtypes only: the conjugate is the tensor itself

    @property
    def H(self) -> Tensor:  # noqa: N802
        if self.ndim not in (0, 2):
            raise ArgumentError(f"H is only supported on matrices (2-d tensors), got shape {self.shape}")
        return self.transpose(0, 1) if self.ndim == 2 else self

    def adjoint(self) -> Tensor:
        return self.mT

    def conj(self) -> Tensor:
        return self

    resolve_conj = resolve_neg = conj

    def is_floating_point(self) -> bool:
        return dtypes.is_float(self.dtype)

    def is_signed(self) -> bool:
        return dtypes.is_float(self.dtype) or (dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype))

    def is_complex(self) -> bool:
        return False

    def is_nonzero(self) -> bool:
        if self.numel() != 1:
            raise ArgumentError(f"is_nonzero: a tensor of {self.numel()} values has no single truth value")
        return bool(self.item())

    def is_same_size(self, other: Tensor) -> bool:
        return self.shape == other.shape

    @property
    def is_cpu(self) -> bool:
        return isinstance(self.device, str) and self.device.split(":")[0] == "CPU"

    @property
    def is_cuda(self) -> bool:
        return isinstance(self.device, str) and self.device.split(":")[0] in ("CUDA", "NV")

    def get_device(self) -> int:
        """torch's: -1 for a CPU tensor, else the device's index (`CUDA:1` -> 1, `CUDA` -> 0)."""
        if self.is_cpu:
            return -1
        dev = self.device if isinstance(self.device, str) else self.device[0]
        return int(dev.split(":")[1]) if ":" in dev and dev.split(":")[1].isdigit() else 0

    # torch's layout and mode questions, whose answer is always the same here: strided dense tensors, no meta device,
    # no inference mode, no page-locked host memory (pin_memory returns the tensor: copies to a device need no pinning)
    is_sparse = is_quantized = is_meta = is_nested = is_mkldnn = property(lambda self: False)

    def is_inference(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False

    def pin_memory(self) -> Tensor:
        return self

    def type(self, dtype: DType | str | None = None, non_blocking: bool = False) -> str | Tensor:
        """torch's: without a dtype, the type's name (`torch.FloatTensor`); with one (a dtype, its name, or a torch
        type name as `torch.LongTensor`) the tensor cast to it."""
        if dtype is None:
            name = _TORCH_TYPE_NAMES.get(self.dtype.name, f"{self.dtype.name.capitalize()}Tensor")
            return f"torch.cuda.{name}" if self.is_cuda else f"torch.{name}"
        if isinstance(dtype, str) and dtype.startswith("torch."):
            by_name = {v: k for k, v in _TORCH_TYPE_NAMES.items()}
            if (dt := by_name.get(dtype.rsplit(".", 1)[-1])) is None:
                raise ArgumentError(f"type: unknown tensor type {dtype!r}")
            dtype = dt
        return self.cast(dtype)

    @property
    def grad_fn(self) -> _GradFn | None:
        """torch's: None for a leaf or a tensor that needs no gradient; else a record naming the op that made it
        (`grad_fn.name()`, as `MulBackward0`). Gradients here come from the graph itself, so it has no
        next_functions to walk."""
        if self.is_leaf:
            return None
        u = self.uop
        # (a reduction's result is its reduce reshaped to drop the reduced dims)
        while u.src and (u.op in (Ops.CONTIGUOUS, Ops.DETACH) or u.op is _RESHAPE and u.src[0].op is Ops.REDUCE_AXIS):
            u = u.src[0]
        if u.op is Ops.REDUCE_AXIS:
            name = {Ops.ADD: "Sum", Ops.MUL: "Prod", Ops.MAX: "Max"}.get(u.arg[0], "Reduce")
        else:
            name = "".join(w.capitalize() for w in u.op.name.split("_"))
        return _GradFn(f"{name}Backward0")

    @property
    def itemsize(self) -> int:
        return self.element_size()

    def equal(self, other: Tensor) -> bool:
        """Same shape and the same values everywhere (read from the device); NaN equals nothing."""
        return self.shape == other.shape and bool((self == other).all().item())

    def ravel(self) -> Tensor:
        return self.flatten()

    def broadcast_to(self, *size: Any) -> Tensor:
        return self.expand(*size)

    def argwhere(self) -> Tensor:
        return self.nonzero()  # type: ignore[return-value]

    def select(self, dim: int, index: int) -> Tensor:
        if self.ndim == 0:
            raise IndexError("select() cannot be applied to a 0-d tensor")
        d = _axes(dim, self.ndim)[0]
        if not -self.shape[d] <= index < self.shape[d]:
            raise IndexError(f"select: index {index} is out of range for dimension {d} of size {self.shape[d]}")
        return self[(slice(None),) * d + (index,)]

    def narrow_copy(self, dim: int, start: int, length: int) -> Tensor:
        return self.narrow(dim, start, length).clone()

    def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        return self.split(list(split_sizes), dim)

    def sum_to_size(self, *size: Any) -> Tensor:
        """The sum over the dims that `size` broadcasts along to self's shape."""
        shape = argfix(*size)
        if not _broadcasts_to(shape, self.shape):
            raise ArgumentError(f"sum_to_size: size {shape} does not broadcast to the tensor's shape {self.shape}")
        lead = self.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and self.shape[lead + i] != 1)
        return self.sum(axes, keepdim=True).reshape(shape) if axes else self

    def diagflat(self, offset: int = 0) -> Tensor:
        return self.flatten().diag_embed(offset)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        """The k-th smallest value along dim (k from 1) and its index."""
        d = _dim(dim, self.ndim)
        n = self.shape[d] if self.ndim else 1
        if n == 0:
            raise _EmptyReductionError(f"kthvalue over a zero-size dimension of shape {self.shape}")
        if not 1 <= k <= n:
            raise ArgumentError(f"kthvalue: k ({k}) is out of range for dimension {d} of size {n}")
        values, idx, d = self._sorted_along(dim, "kthvalue")
        at = [(k - 1, k) if i == d else None for i in range(values.ndim)]
        shape = _reduced_shape(self.shape, dim if self.ndim else None, keepdim)
        return ValuesIndices(values.shrink(at).reshape(shape), idx.shrink(at).reshape(shape))

    def _scatter_view(self, index: Any, src: Tensor, name: str) -> Tensor:
        """self with src written where self[index] reads (index: ints and slices), as a new tensor."""
        want = self[index].shape
        if src.shape != want:
            raise ArgumentError(f"{name}: src of shape {src.shape} must have the shape {want} of the slice it fills")
        hit, vals = _setitem_parts(self, index, src.cast(self.dtype))
        return vals if hit is None else hit.where(vals, self)

    def select_scatter(self, src: Tensor, dim: int, index: int) -> Tensor:
        self.select(dim, index)  # its errors
        return self._scatter_view((slice(None),) * _axes(dim, self.ndim)[0] + (index,), src, "select_scatter")

    def slice_scatter(
        self, src: Tensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1
    ) -> Tensor:
        d = _axes(dim, self.ndim)[0]
        return self._scatter_view((slice(None),) * d + (slice(start, end, step),), src, "slice_scatter")

    def diagonal_scatter(self, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        want = self.diagonal(offset, dim1, dim2).shape
        if src.shape != want:
            raise ArgumentError(f"diagonal_scatter: src of shape {src.shape} must have the diagonal's shape {want}")
        d1, d2 = _axes(dim1, self.ndim)[0], _axes(dim2, self.ndim)[0]
        x = self.movedim((d1, d2), (-2, -1))
        m, n = x.shape[-2:]
        rows = Tensor.arange(m, device=self.device).reshape(m, 1)
        cols = Tensor.arange(n, device=self.device).reshape(1, n)
        size = m if offset >= 0 else n
        vals = src.cast(self.dtype).pad([None] * (src.ndim - 1) + [(0, size - src.shape[-1])])
        out = (cols - rows == offset).where(vals.unsqueeze(-1) if offset >= 0 else vals.unsqueeze(-2), x)
        return out.movedim((-2, -1), (d1, d2))

    def index_reduce(
        self, dim: int, index: Tensor, source: Tensor, reduce: str, *, include_self: bool = True
    ) -> Tensor:
        if reduce not in ("prod", "mean", "amax", "amin"):
            raise ArgumentError(f"index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', not {reduce!r}")
        d, idx = self._index_along(dim, index, source.shape, "index_reduce")
        x = self.reshape(1) if self.ndim == 0 else self
        spread = self._spread(d, idx)
        out = x.scatter_reduce(d, spread, source.reshape(spread.shape), reduce, include_self=include_self)
        return out.reshape(self.shape)

    def fill_diagonal_(self, fill_value: Any, wrap: bool = False) -> Tensor:
        """Write fill_value on the main diagonal (every dim equal past 2-d); wrap: a tall matrix's diagonal starts
        again every (columns + 1) rows, as torch."""
        if self.ndim < 2 or (self.ndim > 2 and len(set(self.shape)) != 1):
            raise ArgumentError(f"fill_diagonal_ needs a matrix or a tensor with all dims equal, got {self.shape}")
        step = sum(_contiguous_strides(self.shape))
        pos = Tensor.arange(self.numel(), device=self.device)
        on = pos % step == 0
        if not (wrap and self.ndim == 2):
            on = on & (pos < min(self.shape) * step)
        return self._inplace(on.reshape(self.shape).where(fill_value, self))

    def cholesky(self, upper: bool = False) -> Tensor:
        """torch.cholesky: linalg.cholesky, which raises LinAlgError for a matrix that is not positive definite."""
        from lazygrad import linalg

        return linalg.cholesky(self, upper=upper, _name="cholesky")

    def _cholesky(self, upper: bool) -> Tensor:
        """L (lower triangular) with L @ L^T == self for symmetric positive definite matrices over the last two
        dims, one column per step (Cholesky-Banachiewicz); upper gives L^T. A matrix that is not positive definite
        gives NaN. Only the lower triangle is read (the upper with upper)."""
        self._check_square("cholesky")
        n = self.shape[-1]
        a = (self.transpose(-2, -1) if upper else self).cast(least_upper_float(self.dtype))._symmetric_grad()
        rows = Tensor.arange(n, device=self.device)
        cols: list[Tensor] = []  # columns of L, (..., n) each
        for j in range(n):
            col = a[..., :, j]
            if cols:
                done = Tensor.stack(*cols, dim=-1)  # (..., n, j)
                col = col - (done @ done[..., j, :].unsqueeze(-1)).squeeze(-1)
            pivot = col[..., j : j + 1].sqrt()
            cols.append((rows >= j).where(col / pivot, 0.0))
        low = Tensor.stack(*cols, dim=-1) if cols else a
        return low.transpose(-2, -1) if upper else low

    def pinverse(self, rcond: float = 1e-15) -> Tensor:
        return self.pinv(rcond)

    # torch's other names of the same ops
    arctan2, arcsin, arccos, arctan, arcsinh, arccosh, arctanh = atan2, asin, acos, atan, asinh, acosh, atanh
    remainder, floor_divide, true_divide, multiply, negative, absolute = mod, floordiv, div, mul, neg, abs
    greater, greater_equal, less, less_equal, not_equal, sgn, fix = gt, ge, lt, le, ne, sign, trunc

    def positive(self) -> Tensor:
        """torch's unary plus: this tensor (a bool tensor raises, as torch's)."""
        if self.dtype == dtypes.bool:
            raise RuntimeError("positive (the unary + operator) is not supported for bool tensors")
        return self

    __pos__ = positive


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """torch's strides of a contiguous tensor (a size-1 dim strides by what follows it)."""
    return tuple(prod(shape[i + 1 :]) for i in range(len(shape)))


def _address(st: ShapeTracker, point: tuple[int, ...]) -> int:
    """The element of memory that index `point` of st reads (masks aside): each view's flat index is an element
    index into the view below it."""
    v = st.views[-1]
    idx = v.offset + sum(i * s for i, s in zip(point, v.strides))
    for v in reversed(st.views[:-1]):
        coords = []
        for s in reversed(v.shape):
            idx, c = divmod(idx, s)
            coords.append(c)
        idx = v.offset + sum(c * s for c, s in zip(reversed(coords), v.strides))
    return idx


# id -> computed tensor whose .grad a backward fills (retain_grad); id -> hooks on a tensor's gradient (register_hook)
_retaining: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_grad_hooks: dict[int, list[Callable[[Tensor], Tensor | None]]] = {}
# a hooked computed tensor's id -> (the gradient its hooks last ran on, what they made of it)
_hooked: dict[int, tuple[Tensor, Tensor]] = {}
# id -> hooks run with the leaf after backward accumulated into its .grad (register_post_accumulate_grad_hook)
_post_accumulate_hooks: dict[int, list[Callable[[Tensor], None]]] = {}

# *** pending gradients: a replayed gradient program's results, built when first read (gradient.py _GradProgram) ***

node_of = Tensor.__dict__["uop"].__get__  # a tensor's node as held, a pending gradient's unbuilt one too
_set_node = Tensor.__dict__["uop"].__set__


class _Data(Tensor):
    """What `t.data` gives: a detached tensor over t's memory that is also callable, `t.data()`, for tinygrad's raw
    bytes."""

    __slots__ = ()

    def __call__(self) -> memoryview:
        return self._raw_data()


class _PendingGrad(Tensor):
    """A gradient backward left unbuilt: it holds an Unbuilt node (uop/program.py), and the first read of `uop` (any
    use of the tensor) builds its run's nodes and makes every tensor of the run a plain Tensor over them
    (settle_pending). An optimizer step reads the held node instead (node_of) and realizes it at once, unbuilt
    (nn/optim.py _StepProgram.replay): between backward and the step nothing builds the gradient graph."""

    __slots__ = ()

    @property  # type: ignore[override]
    def uop(self) -> UOp:
        u = node_of(self)
        if type(u) is not Unbuilt:
            return u
        node = u.built()
        settle_pending(self, node)
        return node

    @uop.setter
    def uop(self, value: UOp) -> None:
        _set_node(self, value)
        self.__class__ = Tensor


def pending_tensor(u: Unbuilt) -> Tensor:
    """A pending gradient over unbuilt node u, noted as Tensor(node) notes a new lazy tensor: a write into memory its
    value reads finds it (and builds it) before the write lands."""
    t = _PendingGrad.__new__(_PendingGrad)
    t.grad, t._requires_grad, t._view_of = None, None, None
    _set_node(t, u)
    _new_tensors.append(weakref.ref(t) if not CAPTURES_OPEN[0] else _MadeRef(t))
    if len(_new_tensors) > 1024:
        _trim_new()
    if _modes.grad_disabled or not _FLOAT_KEYS.get(u.dtype.key):
        t._init_grad_state()  # (reads the node: built)
    else:
        _note_unset(t)
    return t


def settle_pending(t: Tensor, node: UOp) -> None:
    """t's unbuilt node was built as `node`: t holds it, a plain Tensor (one that a realize stored holds its buffer
    already, and keeps it)."""
    if type(node_of(t)) is Unbuilt:
        _set_node(t, node)
    if type(t) is _PendingGrad:
        t.__class__ = Tensor


def adopt_pending(tensors: list[Tensor]) -> None:
    """The pending gradients among `tensors` become plain Tensors holding their unbuilt nodes: an optimizer step's
    realize, which follows at once under the realize lock, stores them (or builds them, see schedule/kernelize.py)."""
    for t in tensors:
        if type(t) is _PendingGrad:
            t.__class__ = Tensor


class _HookHandle:
    """What register_hook returns: remove() takes the hook off, as torch's handle."""

    def __init__(self, hooks: list[Callable[[Tensor], Tensor | None]], hook: Callable[[Tensor], Tensor | None]):
        self.hooks, self.hook = hooks, hook

    def remove(self) -> None:
        if self.hook in self.hooks:
            self.hooks.remove(self.hook)


def _run_hooks(hooks: list[Callable[[Tensor], Tensor | None]], g: Tensor) -> Tensor:
    for hook in list(hooks):
        if (out := hook(g)) is not None:
            g = out
    return g


def _inplace_twin(name: str) -> Callable[..., Tensor]:
    def op_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self._inplace(getattr(self, name)(*args, **kwargs))

    op_.__name__ = op_.__qualname__ = f"{name}_"
    op_.__doc__ = f"{name}, written into this tensor's memory (torch's in-place {name}_)."
    return op_


# torch's in-place twins (op_) of the ops whose result has self's shape, through _inplace (assign: writes land in
# the order made)
for _name in (
    "abs acos acosh addbmm addcdiv addcmul addmm addmv addr asin asinh atan atanh baddbmm bitwise_and bitwise_not "
    "bitwise_or bitwise_xor ceil clamp clamp_max clamp_min clip copysign cos cosh cumprod cumsum div elu eq erf exp "
    "exp2 floor fmod gcd ge gt hardtanh heaviside index_add index_copy index_fill index_put index_reduce lcm le "
    "leaky_relu lerp log "
    "log10 log2 logical_and logical_not logical_or logical_xor lt masked_fill masked_scatter mul nan_to_num ne neg pow "
    "reciprocal relu renorm round rsqrt scatter scatter_add scatter_reduce sigmoid sign sin sinh sqrt square tan tanh "
    "tril triu trunc "
    # torch's other spellings and the special functions
    "absolute arccos arccosh arcsin arcsinh arctan arctan2 arctanh atan2 bitwise_left_shift bitwise_right_shift "
    "deg2rad digamma divide erfc erfinv expm1 fix floor_divide frac greater greater_equal hypot ldexp less less_equal "
    "i0 lgamma log1p logit multiply mvlgamma negative nextafter not_equal polygamma rad2deg remainder sgn sinc "
    "subtract "
    "true_divide xlogy"
).split():
    if not hasattr(Tensor, f"{_name}_"):
        setattr(Tensor, f"{_name}_", _inplace_twin(_name))


# id -> tensor with requires_grad=True; keyed by id because Tensor.__eq__ is elementwise, not identity
_grad_leaves: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_leaf_ids = itertools.count(1)  # the number of each lazy leaf's node of its own (Tensor.requires_grad's setter)
_grad_leaves_lock = library_lock()
# id -> weak reference to a floating point tensor whose requires_grad was never set: a backward through it fills its
# .grad (tinygrad's rule). Every float tensor an op makes is entered here: a plain dict, not a WeakValueDictionary,
# whose insert is several Python calls. Keyed by id, so no lookup ever compares tensors (Tensor.__eq__ is
# elementwise). Iterate a copy(): copying runs no Python code, so no removal can change the dict midway. A dead
# tensor's entry stays (a death callback was a Python call on every op's result) until the dict has doubled since the
# last sweep (_sweep_unset) or a tensor made under its id replaces it; readers skip dead references (_live)
_unset_grad: dict[int, weakref.ref] = {}
_unset_limit = [1024]  # _unset_grad's size at which its dead entries are dropped next
_FLOAT_KEYS: dict[int, bool] = {}  # DType.key -> dtypes.is_float of that dtype
_DEREF = weakref.ref.__call__  # C-level helpers for backward's look at every live tensor (map over them)
_UOP_OF = operator.attrgetter("uop")


def _live(refs: Iterable[weakref.ref]) -> list[Tensor]:
    """The live tensors of `refs` (a copy of a registry's weak references), listed at C speed. Never iterate a registry
    another thread adds to: a WeakValueDictionary's own iteration raises "dictionary changed size during iteration"
    when a thread makes a parameter meanwhile."""
    alive = list(map(_DEREF, refs))
    return list(itertools.compress(alive, map(operator.is_not, alive, itertools.repeat(None))))


def _live_in(registry: weakref.WeakValueDictionary) -> list[Tensor]:
    """_live over a copy of a WeakValueDictionary's weak references."""
    return _live(registry.data.copy().values())


# (shape, dtype, device) of a scalar backward() was called on -> the node of its seed gradient (ones)
_SEEDS: dict[tuple, UOp] = {}


class _UnsetRef(weakref.ref):
    """A weak reference to a tensor with requires_grad set False (_no_grad_leaves), carrying its id for the callback
    that drops its entry: one object per tensor, where a reference with a partial of the id as its callback was two."""

    __slots__ = ("key",)


def _note_unset(t: Tensor) -> None:
    _unset_grad[id(t)] = weakref.ref(t)
    if len(_unset_grad) > _unset_limit[0]:
        _sweep_unset()


def _sweep_unset() -> None:
    """Drop _unset_grad's dead entries, at C speed; the next sweep once it has doubled (amortized, a few C calls per
    tensor made). Each only if still dead: another thread may have entered a new tensor under the id meanwhile."""
    entries = _unset_grad.copy()  # (one C call: keys and references that match while other threads add)
    dead = itertools.compress(entries, map(operator.is_, map(_DEREF, entries.values()), itertools.repeat(None)))
    collections.deque(map(functools.partial(_remove_dead_weakref, _unset_grad), dead), maxlen=0)
    _unset_limit[0] = max(1024, 2 * len(_unset_grad))


# id -> weak reference to a tensor whose requires_grad was set False (as _unset_grad: a plain dict, where a
# WeakValueDictionary's insert was Python calls for every gradient every backward makes)
_no_grad_leaves: dict[int, weakref.ref] = {}


def _note_no_grad(t: Tensor) -> None:
    ref = _UnsetRef(t, _drop_no_grad)
    ref.key = id(t)
    _no_grad_leaves[ref.key] = ref


def _drop_no_grad(ref: _UnsetRef) -> None:
    _remove_dead_weakref(_no_grad_leaves, ref.key)  # (only if still dead: the id may already name a newer tensor)


def _drop_unset_over_no_grad_inputs(root: UOp, leaves: list[tuple[Tensor, UOp]]) -> list[tuple[Tensor, UOp]]:
    """Of the tensors a backward fills, drop those with requires_grad unset that are computed from tensors set to
    requires_grad=False alone (x * m with both False): they lie on no path to anything that wants a gradient, and
    torch and tinygrad leave their .grad None. An unset tensor built from no such input (a leaf, Tensor.rand) stays."""
    from lazygrad.gradient import _blocks

    if not any(t._requires_grad is None for t, _ in leaves):
        return leaves
    targets = {n for _, n in leaves}
    no_grad = set(map(_UOP_OF, _live(_no_grad_leaves.copy().values())))
    below_target: dict[UOp, bool] = {}
    over_no_grad: dict[UOp, bool] = {}
    for n in root.toposort:  # sources before their users
        srcs = () if _blocks(n) else n.src
        below_target[n] = any(s in targets or below_target[s] for s in srcs)
        over_no_grad[n] = n in no_grad or any(over_no_grad[s] for s in n.src)
    return [(t, n) for t, n in leaves if t._requires_grad is not None or below_target[n] or not over_no_grad[n]]


def _creation_with_requires_grad(fn: Callable[..., Tensor]) -> Any:
    """A static creation method that also takes `requires_grad=`, as torch's and tinygrad's do."""

    @functools.wraps(fn)
    def make(*args: Any, requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
        t = fn(*args, **kwargs)
        return t if requires_grad is None else t.requires_grad_(requires_grad)

    return staticmethod(make)


for _name in (
    "empty", "full", "zeros", "ones", "arange", "linspace", "eye", "rand", "uniform", "randn", "normal",
    "scaled_uniform", "glorot_uniform", "kaiming_uniform", "kaiming_normal", "randperm",
):  # fmt: skip
    setattr(Tensor, _name, _creation_with_requires_grad(getattr(Tensor, _name)))


# a window's gradient as one shifted pad per kernel position: one load each in the kernel that sums them
_WINDOW_GRAD_TERMS = 64


def _window_grad(
    g: Tensor,
    i_: Sequence[int],
    o_: Sequence[int],
    k_: Sequence[int],
    s_: Sequence[int],
    d_: Sequence[int],
    crop: Sequence[tuple[int, int]] | None = None,
) -> Tensor:
    """The gradient of x._pool(k_, s_, d_) from the window gradient g (..., *o_, *k_): input position o*s + k*d
    collects g[..., o, k] for every (o, k) that reads it (col2im); with `crop`, only the positions within it (the
    input before it was padded)."""
    factors = _summed_products(g)
    nk = len(k_)
    if factors is not None:
        # the product is masked by the shifted factor's zeros: one factor at least is shifted (both are the same at
        # every window position where the output gradient is a broadcast constant, as of a sum's backward)
        moves = [_moves(f, nk) for f in factors]
        moving = list(zip(factors, (moves[0] or not moves[1], moves[1])))
    total: Tensor | None = None
    for ks in itertools.product(*[range(k) for k in k_]):
        if factors is None:
            t = _tap(g, ks, i_, o_, s_, d_, crop)
        else:
            # g sums products (a conv's window gradient, over the output channels): each tap shifts the two factors
            # (zero outside, so their product is; a factor the same at every window position, the weight, is not
            # shifted), and the taps are summed inside that one reduce: one kernel, not g stored at k_ times the
            # input's size and shifted copies of it summed (digits CNN training step, batch 64: 18.6 -> 13.1 MB
            # moved, 56 -> 52 kernels, their time as before; a shifted product was masked lane by lane, 2x slower)
            x, y = (_tap(f, ks, i_, o_, s_, d_, crop) if m else _tap_broadcast(f, ks, i_, crop) for f, m in moving)
            t = x * y
        total = t if total is None else total + t
    assert total is not None
    return total if factors is None else total.sum(0)


def _moves(g: Tensor, nk: int) -> bool:
    """Whether g (..., *o_, *k_) may differ between window positions: not a broadcast along them (a conv's weight)."""
    if not all(isinstance(s, int) for s in g.shape):
        return True  # a symbolic size: shifting is right either way
    chain, u = [], g.uop
    while u.op in GroupOp.Movement:
        chain.append(u)
        u = u.src[0]
    st = ShapeTracker.from_shape(u.shape)
    for m in reversed(chain):
        st = st.apply(m.op, m.arg)
    strides = st.real_strides()
    return any(strides[a] != 0 for a in range(g.ndim - 2 * nk, g.ndim - nk) if g.shape[a] != 1)


def _tap_broadcast(g: Tensor, ks: Sequence[int], i_: Sequence[int], crop: Sequence[tuple[int, int]] | None) -> Tensor:
    """Tap `ks` of a factor that is the same at every window position (a conv's weight), at every input position:
    unmasked, the other factor's zeros mask the product."""
    nk = len(ks)
    nb = g.ndim - 2 * nk
    sizes = [i - lo - hi for i, (lo, hi) in zip(i_, crop)] if crop is not None else list(i_)
    t = g.shrink([None] * nb + [(0, 1)] * nk + [(k, k + 1) for k in ks])
    return t.reshape(*g.shape[:nb], *[1] * nk).expand(*g.shape[:nb], *sizes)


def _tap(
    g: Tensor,
    ks: Sequence[int],
    i_: Sequence[int],
    o_: Sequence[int],
    s_: Sequence[int],
    d_: Sequence[int],
    crop: Sequence[tuple[int, int]] | None,
) -> Tensor:
    """The window gradient's tap `ks` at the input positions it was read from, zero elsewhere."""
    nk = len(ks)
    nb = g.ndim - 2 * nk
    t = g.shrink([None] * (nb + nk) + [(k, k + 1) for k in ks]).reshape(*g.shape[:nb], *o_)
    for j, (o, s, k, d, i) in enumerate(zip(o_, s_, ks, d_, i_)):
        axis = nb + j
        if s > 1:  # o values s apart: interleave s - 1 zeros
            t = t.reshape(*t.shape[: axis + 1], 1, *t.shape[axis + 1 :])
            t = t.pad(_on_axis(t.ndim, axis + 1, (0, s - 1)))
            t = t.reshape(*t.shape[:axis], o * s, *t.shape[axis + 2 :])
        used = min(o * s, i - k * d)  # the interleaved zeros after the last window may pass the input's end
        t = t.shrink(_on_axis(t.ndim, axis, (0, used))).pad(_on_axis(t.ndim, axis, (k * d, i - k * d - used)))
        if crop is not None:
            t = t.shrink(_on_axis(t.ndim, axis, (crop[j][0], i - crop[j][1])))
    return t


def _summed_products(g: Tensor) -> tuple[Tensor, Tensor] | None:
    """For g a sum of products x * y over some axes (left out of its shape, movement ops between the product and the
    sum): x and y as the products are summed, those axes as one in front."""
    r = g.uop.src[0] if g.uop.op is Ops.RESHAPE else g.uop
    # (an empty g: the reshape's -1 below would have no size to stand for)
    if r.op is not Ops.REDUCE_AXIS or r.arg[0] is not Ops.ADD or 0 in g.shape:
        return None
    moves: list[UOp] = []
    base = r.src[0]
    while base.op in GroupOp.Movement:
        moves.append(base)
        base = base.src[0]
    if base.op is not Ops.MUL:
        return None
    # g reshapes the reduce's output, keeping its order: so do the kept axes of the products, the reduced in front
    axes = r.arg[1]
    keep = [a for a in range(len(r.shape)) if a not in axes]
    out = []
    for f in base.src:
        for m in reversed(moves):
            f = UOp(m.op, f.dtype, (f,), m.arg)
        out.append(Tensor(f).permute(*axes, *keep).reshape(-1, *g.shape))
    return out[0], out[1]


def _on_axis(ndim: int, axis: int, arg: tuple[int, int]) -> list[tuple[int, int] | None]:
    """A pad/shrink argument that touches one axis."""
    return [arg if a == axis else None for a in range(ndim)]


class _GradFn:
    """What Tensor.grad_fn gives for a computed tensor: the name of the op that made it, as torch's."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"<{self._name} object>"


# lazygrad dtype name -> torch's tensor type name (Tensor.type)
_TORCH_TYPE_NAMES = {
    "float32": "FloatTensor",
    "float64": "DoubleTensor",
    "float16": "HalfTensor",
    "bfloat16": "BFloat16Tensor",
    "int8": "CharTensor",
    "uint8": "ByteTensor",
    "int16": "ShortTensor",
    "int32": "IntTensor",
    "int64": "LongTensor",
    "bool": "BoolTensor",
    "uint16": "UInt16Tensor",
    "uint32": "UInt32Tensor",
    "uint64": "UInt64Tensor",
}


class FrexpResult(NamedTuple):
    """torch's (mantissa, exponent) of Tensor.frexp."""

    mantissa: Tensor
    exponent: Tensor


class ValuesIndices(NamedTuple):
    """torch's (values, indices) of a reduction along a dim given as `dim=` (x.max(dim=1).values, x.min(dim=0)[1])."""

    values: Tensor
    indices: Tensor


class ArgumentError(ValueError, RuntimeError):
    """An op given arguments it cannot take: shapes that do not fit, sizes or counts out of range. torch raises a
    RuntimeError for these, and lazygrad raised ValueError before: it is both."""


class IndexTypeError(IndexError, TypeError):
    """An index of a type that cannot index (a float, a string): torch raises IndexError, lazygrad raised TypeError
    before: it is both."""


class DTypeError(TypeError, RuntimeError):
    """A dtype an op cannot take (gradients of integers): TypeError, and RuntimeError as torch raises."""


class IndexShapeError(ArgumentError, IndexError):
    """An index tensor of the wrong shape for an index_* op (torch raises IndexError for some, RuntimeError for
    others: it is both)."""


class IndexRangeError(IndexError, RuntimeError):
    """An index tensor holding a value out of range, found with CHECK_INDEX=1 (torch raises IndexError for tensor
    indexing, Embedding and class targets, RuntimeError for gather, scatter and one_hot: it is both)."""


def _check_index_values(index: Tensor, low: int, high: int, what: str, *args: Any, ignore: int | None = None) -> None:
    """With CHECK_INDEX=1, the values of an index tensor must lie in [low, high) (`ignore`, a loss's ignore_index,
    passes too). Reading them realizes the index (a device sync), so it is off by default: like tinygrad, lazygrad
    builds graphs without reading index values. Skipped inside a TinyJit capture and a @function trace, where the
    values are the capture's or a placeholder's."""
    if not CHECK_INDEX.value or index.numel() == 0:
        return
    if _values_frozen():
        return
    with Tensor.no_grad():
        vals = index.cast(dtypes.int64)
        if ignore is not None:
            vals = (vals == ignore).where(low, vals)
        lo, hi = Tensor.stack(vals.min(), vals.max()).tolist()
    if lo < low or hi >= high:
        # (`what` is formatted with `args` only here: the call sites run on every indexing op, the check rarely)
        raise IndexRangeError(f"{what.format(*args)}: index {lo if lo < low else hi} is out of range [{low}, {high})")


class _UnknownModeError(ArgumentError, NotImplementedError):
    """torch raises NotImplementedError for a pad or interpolate mode it lacks; an ArgumentError (ValueError) as
    lazygrad's others."""


class InPlaceOnLeafError(NotImplementedError):
    """An in-place write (`x += y`, `x[i] = v`) into a leaf that requires grad, outside no_grad: torch raises a
    RuntimeError, tinygrad a NotImplementedError (which is one)."""


def _check_inplace_allowed(t: Tensor) -> None:
    if t._requires_grad and not _modes.grad_disabled:
        raise InPlaceOnLeafError(
            "a leaf tensor that requires grad is used in an in-place operation; wrap it in Tensor.no_grad()"
        )


class IntOverflowError(OverflowError, RuntimeError):
    """An integer that does not fit the dtype of the tensor being made (torch: RuntimeError, numpy: OverflowError)."""


def _check_fits(values: Sequence[Any], dtype: DType, what: str) -> None:
    """Making an integer tensor from Python numbers refuses those outside the dtype's range, as torch and numpy do (a
    cast of a tensor wraps instead). A float must lie in the range itself (torch: -0.5 is no uint8, 255.9 none)."""
    if not dtypes.is_int(dtype):
        return
    lo, hi = dtypes.min(dtype), dtypes.max(dtype)
    # torch takes a negative int down to -max for an unsigned dtype, and wraps it (-1 is 255 in uint8)
    int_lo = -hi if dtypes.is_unsigned(dtype) else lo
    for v in values:
        if isinstance(v, bool):
            continue
        if (isinstance(v, int) and not int_lo <= v <= hi) or (isinstance(v, float) and not lo <= v <= hi):
            raise IntOverflowError(f"{what}: {v} does not fit {dtype.name} (range {lo} to {hi})")


class IntZeroDivisionError(ZeroDivisionError, RuntimeError):
    """An integer tensor divided by a Python 0 (//, %, fmod): torch raises a RuntimeError, Python a ZeroDivisionError.
    A tensor divisor's values are not read: an integer division by a zero element gives 0."""


def _check_int_divisor(a: Tensor, x: Any, reverse: bool, what: str) -> None:
    if not reverse and dtypes.is_int(a.dtype) and isinstance(x, int) and x == 0:
        raise IntZeroDivisionError(f"{what}: integer division by zero")


class _NoDimError(ArgumentError, IndexError):
    """cat / split / chunk of a 0-d tensor: torch raises RuntimeError, tinygrad IndexError (its dim is out of range)."""


class _EmptyReductionError(ArgumentError, IndexError):
    """max/min/argmax over a zero-size dim: torch raises IndexError; an ArgumentError as the rest of this API."""


class UnsupportedOpError(NotImplementedError, TypeError):
    """An op a dtype does not have on a device. A NotImplementedError naming the op, the dtype and the device, and a
    TypeError too, as numpy raises for the same (bool - bool, float & float)."""


def _unsupported(op: str, t: Tensor, hint: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{op} is not supported for {t.dtype.name} tensors on {t.device}; {hint}")


def _mark_pending(schedule: list) -> None:
    """A schedule's new buffers are pending until their kernels run (an in-place target still holds its old value)."""
    if (flat := getattr(schedule, "bufs", None)) is not None:
        # an instance of a template: what its items write, read off its flat list (no item's outputs asked for)
        for k in schedule.template.written:  # type: ignore[attr-defined]
            if (buf := flat[k])._ptr is None:
                buf.pending_write = True
        return
    for si in schedule:
        for buf in si.bufs[: si.n_outputs]:
            if not buf.is_allocated:
                buf.pending_write = True


def _note_stored(
    tensors: tuple[Tensor, ...], becomes: dict[UOp, UOp], lowered: list[UOp] | None
) -> list[tuple[Tensor, UOp]]:
    """After scheduling `tensors`: the stored nodes are noted as realized, and each tensor stands for its stored
    buffer (`lowered`: the sharded tensors' graphs per device). Returns each tensor given a buffer, with its node."""
    # the memory a write overwrites no longer holds the values stored there before: a graph built later over those
    # nodes (alive in another graph, one hash-consed node) computes them anew (values computed from the memory itself,
    # earlier writes into it, stay: computed anew they would read the new contents)
    # (UOp.base and Buffer.memory inline: an optimizer step writes every parameter and state)
    written: dict[Buffer, None] = {}
    for n in becomes:
        if n.op is _ASSIGN:
            b = n.src[0]
            while b.op in _MOVEMENT:
                b = b.src[0]
            if b.op is _BUFFER:
                buf = b.arg
                written[buf._external if isinstance(buf._external, Buffer) else buf] = None
    for memory, old in _realized.stored_in_each(written):
        if old not in becomes and old.op is not _ASSIGN and memory not in _memories_below(old):
            del _realized[old]
    _realized.update(becomes)
    replaced: list[tuple[Tensor, UOp]] = []
    for i, t in enumerate(tensors):
        lazy = t.uop
        if lowered is None and lazy.op is not Ops.MULTI and lazy.op not in GroupOp.Movement:
            # its own base (what a realize mostly stores): what it became, with no views to apply again
            new, base = becomes.get(lazy), lazy
            if new is None:
                new = _realized.get(lazy)
        else:
            new, base = _stored_as(lazy if lowered is None else lowered[i], becomes), lazy.base
        if new is None:
            continue
        if lazy.op is _ASSIGN and new is becomes.get(lazy) and _OWNER not in new.__dict__:
            # an in-place write stored (an optimizer step's every parameter and state): _stand_for's work for it,
            # inline (it keeps no gradient path and notes no lazy node on its memory), a call less per written tensor
            t.uop = new
            new.__dict__[_OWNER] = weakref.ref(t)
        else:
            _stand_for(t, new, base, becomes)
        replaced.append((t, lazy))
        if (view_of := t._view_of) is not None and (bt := view_of[0]).uop is view_of[1] and base.op is not _ASSIGN:
            # a view whose realize stored its lazy base tensor's whole value (a view of a matmul's result read): the
            # base tensor stands for it too, as realized itself, and owns it; the view shows its memory. Left lazy, an
            # equal graph realized after took that memory as its own (its writes showed in the view: A = x @ x.T;
            # v = (x @ x.T).view(-1); v.numpy(); A.realize(); A += 10), and a write into the base recomputed it
            # from inputs written since
            at = bt.uop
            if at.base is base and (stored := _stored_as(at, becomes)) is not None:
                _stand_for(bt, stored, base, becomes)
                replaced.append((bt, at))
                t._view_of = (bt, bt.uop)
    return replaced


def _stand_for(t: Tensor, new: UOp, base: UOp, becomes: dict[UOp, UOp], lazy_dies: bool = False) -> None:
    """t, whose lazy node's base `base` was stored, stands for `new` (that node over the buffer) from now on.
    `lazy_dies`: nothing but the caller holds t's lazy node and t keeps no gradient path (_dies_here): its memory
    notes no node for views to follow."""
    lazy = t.uop
    # a computed tensor on a path to a parameter keeps its graph, so gradients still flow through it
    # (not an in-place update: optimizer state and parameters are written, not differentiated)
    keep = not lazy_dies and t._requires_grad is None and base.op is not _ASSIGN and t.requires_grad
    t.uop = new
    # the first tensor stored as a whole buffer owns it (an equal graph realized later gets a copy)
    owner = new.__dict__.get(_OWNER)
    if owner is None or owner() is None:
        if (stored := becomes.get(base)) is None:
            stored = _realized.get(base)
        owned = None
        if new is stored:
            owned = new if base.op is not _ASSIGN else None
            new.__dict__[_OWNER] = weakref.ref(t)
        elif t._view_of is None and stored is not None and new.op is _RESHAPE:
            # not a view but reshapes of the stored value (a reduction's result): it owns that value as well
            x = new
            while x is not stored and x.op is _RESHAPE:
                x = x.src[0]
            if x is stored and ((o := stored.__dict__.get(_OWNER)) is None or o() is None):
                owned = stored
                stored.__dict__[_OWNER] = weakref.ref(t)
        if owned is not None and not lazy_dies:
            # its memory notes the lazy node stored there, which views taken before follow (_stored_from)
            # (UOp.base and Buffer.memory inline: a realize's Python calls are counted, test_eager_overhead)
            while owned.op in GroupOp.Movement:
                owned = owned.src[0]
            if owned.op is _BUFFER:
                buf = owned.arg
                memory = buf._external if isinstance(buf._external, Buffer) else buf
                memory.__dict__[_STORED_FROM] = weakref.ref(lazy)
                if lazy.op is Ops.CONTIGUOUS:  # (a copy _own_memory gave, numbered or not, or a clone)
                    memory.__dict__[_COPIED_FROM] = weakref.ref(lazy.src[0])
                else:
                    memory.__dict__.pop(_COPIED_FROM, None)
    if keep and new is not lazy:
        _lazy_origin[new] = lazy
        _realized.hold_weakly(base)


def _run_noted(schedule: list, var_vals: dict[UOp, int], noted: list) -> None:
    """run_schedule; where it raises before any kernel ran (a compile error, Ctrl-C during a long first compile),
    what scheduling noted is taken back: the tensors are lazy again, as before the realize, and the next realize
    (or .numpy()) computes them, where they would otherwise stand for buffers that never got their values. `noted`
    is emptied once the kernels are built: its nodes (whose entries name the stored buffers) must not be held while
    the memory planner counts who holds the schedule's buffers."""
    try:
        run_schedule(schedule, var_vals, built=noted.clear)
    except BaseException:
        if noted:
            replaced, stored = noted
            for node in stored:
                if _realized.get(node) is not None:
                    del _realized[node]
            for t, lazy in replaced:
                if t.uop is not lazy:
                    # (an optimizer's unbuilt update: lazy again as its real node, which anything may read)
                    t.uop = lazy.built() if type(lazy) is Unbuilt else lazy
                    _note_lazy(t)
        raise


def _realize_cached(t: Tensor) -> bool:
    """Realize t alone through the schedule cache where nothing of schedule_with_vars' general work applies, and say
    whether it did: t computes a value, or reshapes one (a reduction's result: not a view, a buffer, a write, or a
    sharded graph), no other tensor holds that value (it is not realized yet), and its graph's structure was
    scheduled before with no in-place write (no readers of overwritten memory to look for). A repeated
    `(a + b).realize()` costs the walk, the buffers and the launch (16 floats: 22 -> 19 us); a template of one kernel
    whose plan is made launches from the template's buffer list with no ScheduleItem made (59 -> 45 Python calls,
    17.5 -> 13.3 us), and an op over stored buffers is known from its sources with no walk (kernelize.cached_instance:
    43 calls, 11.6 us), its instance made there and stored with _note_stored's work for one node (39 -> 33 calls of
    which 16 build the tensor and drop the dead; 11.5 -> 10.5 us of CPU, a shared machine; 29 calls, 8 us with the
    instance made where the root is recognised and the Enum members read once). DEBUG lines and profile spans come
    from the general path. A tensor stored whole (a buffer, or reshapes of one) has nothing to compute: done at once
    (`.numpy()` and `.item()` realize it again; the general path scheduled nothing in 9 us)."""
    if t._view_of is not None:
        _follow_base(t)  # (as _own_memory: a view reads through a write into its base)
    u = t.uop
    base = u if u.op is not _RESHAPE else _under_reshapes(u)
    if base.op is _BUFFER:
        return True
    if t._view_of is not None or base.op is _ASSIGN or base.op in _MOVEMENT:
        return False
    # reshapes of a computed value (a.sum() is the reduce reshaped to ()) go as the value does, their chain applied to
    # its buffer after (the general path's _stored_as), where none of them holds a value of its own
    x = u
    while x is not base:
        if REALIZED_ENTRY in x.__dict__:
            return False
        x = x.src[0]
    # (profile.enabled() inline: asked on every realize)
    if (
        REALIZED_ENTRY in base.__dict__
        or DEBUG.value
        or PROFILE.value >= 1
        or VIZ.value
        or Device.multi_seen
        and has_multi(u)
    ):
        return False
    found = cached_instance(u, _realized)
    if found is None:
        return False
    tpl, bufs, becomes, var_vals = found
    if launch_template(tpl, bufs, var_vals):  # one kernel, launched already: its output holds the value
        if len(becomes) == 1 and (new := becomes.get(base)) is not None:
            # (Tensor.requires_grad's first answers inline: no call where no tensor requires grad; that none does asked
            # first, as the thread-local no_grad depth costs ~650 instructions to read)
            grads = t._requires_grad is None and _grad_leaves.data and not _modes.grad_disabled and t.requires_grad
            # (_dies_here's count inline where t's node is the stored one, the common case: t.uop, u, base, x, becomes'
            # key and getrefcount's argument)
            if base is u and not grads and FRAME_REFS_CHECKED and getrefcount(u) <= 6:
                # _stand_for's work for a node that dies here (nothing to note for views or gradients), inline
                notes = new.__dict__
                if (owner := notes.get(_OWNER)) is None or owner() is None:
                    notes[_OWNER] = weakref.ref(t)
                t.uop = new
                tpl.keep(new)  # (noted with its owner alone: the next instance may recycle it once t died)
                return True
            stood = new if base is u else u.rebase(new)
            dies = not grads and _dies_here(u, base)
            if not dies:
                _realized.update(becomes)  # (_note_stored's work where the kernel stores t's value alone)
            _stand_for(t, stood, base, becomes, dies)
            if dies:
                tpl.keep(new)  # (noted with its owner alone: the next instance may recycle it once t died)
        else:
            _note_stored((t,), becomes, None)
        return True
    schedule = tpl.schedule(bufs, filled=False)  # (run_schedule's alone: its plan needs no items)
    _mark_pending(schedule)
    # (the collector held off as in realize's general path; not for the one kernel above, whose graph is small, and
    # where the window's 0.35 us is 4% of the realize)
    with cycles_held_off():
        _run_noted(schedule, var_vals, [_note_stored((t,), becomes, None), [*becomes]])
    return True


def _dies_here(u: UOp, base: UOp) -> bool:
    """Whether a lone realize's lazy root u (base, or one reshape of base: a reduction's result) is held by nothing but
    its tensor and _realize_cached's frame: it dies when the realize returns, and an entry in the realized registry or
    a note on its memory for views to follow (_stored_from) could never be looked up. A node built again later is
    another object, as it would be had this one died unrealized. Counted with sys.getrefcount: one reference more
    (another graph's node, a tensor, a view, a registry) keeps the entry; a count here above the truth would drop an
    entry that is needed, one below it only loses the shortcut (test_eager_overhead counts it taken). Only on the
    interpreters whose counts were checked (FRAME_REFS_CHECKED): another one may hold fewer references in a frame."""
    if not FRAME_REFS_CHECKED:
        return False
    if base is u:
        # t.uop, the caller's u, base, x (its loop over the reshapes stops at base) and becomes' key; the parameters
        # u and base; getrefcount's argument
        return getrefcount(u) <= 8
    # u: t.uop, the caller's u, the parameter, the argument; base: u's source, the caller's base and x, becomes' key,
    # the parameter, the argument
    return u.src[0] is base and getrefcount(u) <= 4 and getrefcount(base) <= 6


def _stored_as(u: UOp, becomes: dict[UOp, UOp]) -> UOp | None:
    """u over the buffer its base was stored in (by this schedule or an earlier one), part by part for a sharded u;
    None where nothing was stored."""
    if u.op is Ops.MULTI:
        parts = [_stored_as(p, becomes) or p for p in u.src]
        return u.replace(src=parts)
    base = u.base
    view = becomes.get(base)
    if view is None:
        view = _realized.get(base)
    return None if view is None else u.rebase(view)


def _check_dtype(op: str, dtype: DType, device: str | tuple[str, ...]) -> None:
    """Refuse a dtype where the device cannot compute with it, here rather than as a compiler error later."""
    if isinstance(device, tuple):
        for d in device:
            _check_dtype(op, dtype, d)
        return
    if (why := Device[device].renderer.dtype_unsupported(dtype)) is not None:
        raise UnsupportedOpError(f"{op} is not supported for {dtype.name} tensors on {device}: {why}")


def _values_frozen() -> bool:
    """Whether reading a tensor's values would freeze them into a TinyJit capture or a @function trace (print shows
    the graph there instead)."""
    from lazygrad.engine.realize import _captures
    from lazygrad.function import tracing

    return bool(_captures()) or tracing()


def _copy_requires_grad(out: Tensor, requires_grad: bool | None) -> None:
    """A copy's (deepcopy, pickle) requires_grad, set through the setter: a leaf it registers is what makes results
    computed from the copy require grad (set on the field alone, a copy of a tensor that an optimizer had made a leaf
    read True and its model's loss had no gradient)."""
    if requires_grad is not None:
        out.requires_grad = requires_grad


def _unpickled_tensor(
    data: bytes, shape: tuple[int, ...], dtype: DType, device: str, requires_grad: bool | None, param: bool
) -> Tensor:
    buf = Buffer(Device.canonicalize(device), prod(shape), dtype, shape=shape)
    if buf.size:
        buf.copyin(memoryview(data))
    out = Tensor(UOp.buffer_view(buf, tuple(shape)))
    _copy_requires_grad(out, requires_grad)
    if param:
        from lazygrad.nn.module import _PARAMETERS

        _PARAMETERS[id(out)] = out
    return out


def _reads_shifted(value: UOp, buffer: UOp) -> bool:
    """True if `value` reads `buffer` through a view other than a reshape (then an in-place write would race), or
    reads its memory through a block cut from it (_block_as_buffer: X[1:] is X's memory one row on).
    Reads behind an ASSIGN or CONTIGUOUS do not count: the scheduler always stores those in kernels of their own,
    which run before the in-place write (an optimizer's update reads its state, whose gradients read the weights)."""
    # (the node's kept answer read inline: asked for every gradient an optimizer update reads, on every step)
    shifted = value.__dict__.get(_SHIFTED)
    if shifted is None:
        shifted = _shifted_bases(value)
    if buffer in shifted:
        return True
    if buffer.op is not _BUFFER:
        return False
    # (a loop: this runs for every parameter of every optimizer step, over the ~15 nodes each gradient of an MLP reads
    # shifted. A Python loop, not a C-level scan: attrgetter, map and compress over the set took 3x as long, 1.7 against
    # 0.55 us for 15 nodes. The target's memory is asked only of a block, which is rare: Buffer.memory is a call)
    for b in shifted:
        if b.op is _BUFFER and b.arg.part and b.arg.memory is buffer.arg.memory:
            return True
    return False


def _may_read_memory(root: UOp, memory: Buffer) -> bool:
    """Whether root's value may read `memory` (a Buffer.memory): its graph holds a buffer of it, or may hold a live node
    whose value is stored there (the walks of _shifted_bases read such a node's stored value, not its graph). A node
    whose graph reads a memory root's graph does not read is no node of root's graph (an in-place write's node reads
    its target). False costs _memories_below, cached per node and walked anyway when a realize files the lazy tensors
    reading the graph, where _shifted_bases walks all of a graph new on every step. Under the realize lock (the
    stored nodes' listing)."""
    below = _memories_below(root)
    if memory in below:
        return True
    for _, node in _realized.stored_in_each((memory,)):
        if _memories_below(node) <= below:
            return True
    return False


# node -> the nodes it reads through a view other than a reshape, kept in the node's own __dict__ (as its shape): a
# graph never changes below a node, so this is computed once per node, and each optimizer state's update walks only
# what is new since the last (the backward graph is shared). A node realized after its entry was made keeps the larger,
# older set: an extra copy, never a race.
_SHIFTED = "shifted_bases"
_EMPTY: frozenset[UOp] = frozenset()


def _shifted_bases(root: UOp) -> frozenset[UOp]:
    if (known := root.__dict__.get(_SHIFTED)) is not None:
        return known
    # a buffer seen through reshapes (a parameter or optimizer state, new nodes after every step's write) reads
    # nothing shifted: answered without the walk's bookkeeping
    x = root
    while x.op is Ops.RESHAPE and REALIZED_ENTRY not in x.__dict__:
        x = x.src[0]
    if x.op is Ops.BUFFER:
        # (a buffer showing part of its memory, a block cut from a tensor, reads that memory at other positions)
        known = frozenset((x,)) if x.arg.part else _EMPTY
        root.__dict__[_SHIFTED] = known
        return known
    # (a node's `below` is kept from its first visit to its second: another thread realizing it in between gives it
    # another one, whose entries the walk never made)
    stack: list[tuple[UOp, tuple | None, Any]] = [(root, None, None)]
    while stack:
        x, below, done = stack.pop()
        memo = x.__dict__
        if _SHIFTED in memo:
            continue
        if below is None:
            # computed earlier: what it reads now is its buffer, not its graph (the registry, a Python call, asked
            # only of a node holding an entry: every optimizer update walks its new nodes here)
            done = _realized.get(x) if REALIZED_ENTRY in memo else None
            below = (done,) if done is not None else x.src if x.op not in (Ops.ASSIGN, Ops.CONTIGUOUS) else ()
            stack.append((x, below, done))
            stack.extend((s, None, None) for s in below if _SHIFTED not in s.__dict__)
            continue
        if x.op is Ops.BUFFER:
            memo[_SHIFTED] = frozenset((x,)) if x.arg.part else _EMPTY  # (as above)
            continue
        own = False
        if done is None and x.op in GroupOp.Movement:
            node = x
            while node.op in GroupOp.Movement:
                if node.op is not Ops.RESHAPE:
                    own = True
                    break
                node = node.src[0]
        sets = [s.__dict__[_SHIFTED] for s in below]
        if not own and len(sets) == 1:
            memo[_SHIFTED] = sets[0]
        elif not own and all(not t for t in sets):
            memo[_SHIFTED] = _EMPTY
        else:
            # a view that moves elements reads every buffer its source computes from at moved positions too: the
            # flip of (x + 1) reads x out of place as much as the flip of x does
            moved = _buffers_read(x.base) | {x.base} if own else _EMPTY
            memo[_SHIFTED] = moved.union(*sets)
    return root.__dict__[_SHIFTED]


_READS = "buffers_read"


def _buffers_read(root: UOp) -> frozenset[UOp]:
    """The buffer nodes root's value is computed from, through anything but ASSIGN, CONTIGUOUS and realized nodes
    (the scheduler stores those first). Kept in each node's __dict__, as _SHIFTED."""
    if (known := root.__dict__.get(_READS)) is not None:
        return known
    stack: list[tuple[UOp, tuple | None]] = [(root, None)]
    while stack:
        x, below = stack.pop()
        if _READS in x.__dict__:
            continue
        if below is None:  # (as in _shifted_bases, kept to the second visit)
            done = _realized.get(x) if REALIZED_ENTRY in x.__dict__ else None
            below = (done,) if done is not None else x.src if x.op not in (Ops.ASSIGN, Ops.CONTIGUOUS) else ()
            stack.append((x, below))
            stack.extend((s, None) for s in below if _READS not in s.__dict__)
            continue
        sets = [s.__dict__[_READS] for s in below]
        if x.op is Ops.BUFFER:
            x.__dict__[_READS] = frozenset((x,))
        elif len(sets) == 1:
            x.__dict__[_READS] = sets[0]
        else:
            x.__dict__[_READS] = _EMPTY.union(*sets)
    return root.__dict__[_READS]


def lazy_shifted_bases(root: UOp, inputs: list[UOp]) -> frozenset[UOp] | None:
    """_shifted_bases(root) for a root built over `inputs`, where none of them is realized: then the set depends on
    the structure alone, and a graph of the same structure has the same set; else None."""
    if any(_realized.get(n) is not None for n in inputs):
        return None
    return _shifted_bases(root)


def note_shifted_bases(node: UOp, bases: list[UOp]) -> None:
    """Set what _shifted_bases(node) finds, known from a graph of the same structure (see gradient.py)."""
    node.__dict__.setdefault(_SHIFTED, frozenset(bases) if bases else _EMPTY)


class _GradMode(contextlib.ContextDecorator):
    def __enter__(self) -> None:
        if not _modes.grad_disabled:
            with _no_grad_threads_lock:
                _NO_GRAD_THREADS[0] += 1
        _modes.grad_disabled += 1

    def __exit__(self, *exc: Any) -> None:
        _modes.grad_disabled -= 1
        if not _modes.grad_disabled:
            with _no_grad_threads_lock:
                _NO_GRAD_THREADS[0] -= 1


class _SetGradMode(contextlib.ContextDecorator):
    """Gradients on or off in this thread until exit, whatever the enclosing mode (enable_grad inside no_grad)."""

    def __init__(self, enabled: bool):
        self.enabled, self.saved = enabled, None

    def apply(self) -> None:
        self.saved = _modes.grad_disabled
        _set_grad_disabled(0 if self.enabled else self.saved + 1)

    def __enter__(self) -> None:
        if self.saved is None:  # set_grad_enabled applied it when called
            self.apply()

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            _set_grad_disabled(self.saved)
            self.saved = None


def _set_grad_disabled(count: int) -> None:
    # the count of threads with gradients off moves only when this thread's mode flips
    was, now = bool(_modes.grad_disabled), bool(count)
    if was != now:
        with _no_grad_threads_lock:
            _NO_GRAD_THREADS[0] += 1 if now else -1
    _modes.grad_disabled = count


class _TrainMode(contextlib.ContextDecorator):
    def __init__(self, mode: bool):
        self.mode = mode

    def __enter__(self) -> None:
        TRAINING.enter_scope(int(self.mode))

    def __exit__(self, *exc: Any) -> None:
        TRAINING.exit_scope()


def _root(s: Tensor, p: float) -> Tensor:
    """s ** (1/p) for s >= 0, with gradient 0 where s == 0 (torch's choice for norms and std): the root's own
    derivative is infinite there, and 0 * inf would be a NaN gradient."""
    zero = s == 0
    safe = zero.where(1, s)
    return zero.where(0, safe.sqrt() if p == 2 else safe.pow(1 / p))


def _zero_or_nan(x: Tensor) -> Tensor:
    """0 where x is a number, x's NaN where it is not, with no gradient: the value a shrink gives inside its band,
    where torch's gradient is 0 at NaN too (its vectorized kernel's; the scalar tail passes NaN's gradient)."""
    x = x.detach()
    return x.isnan().where(x, 0)


def _nan_or(cond: Tensor, bound: Any) -> Tensor:
    """cond, or true everywhere the bound is NaN (a NaN bound makes torch's clamp NaN)."""
    if isinstance(bound, Tensor):
        return cond | (bound != bound) if dtypes.is_float(bound.dtype) else cond
    return cond | True if bound != bound else cond


def _odd(x: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
    """An odd function from its values f(|x|) for x >= 0. |x| is a where, not abs(): abs has gradient 0 at 0, which
    would make the derivative of f at 0 vanish (tanh'(0) = 1, erf'(0) = 2/sqrt(pi)). The sign bit, not x < 0, picks
    the branch: f(-0.0) is -0.0, as torch's."""
    neg = x._signbit()
    y = f(neg.where(-x, x))
    return neg.where(-y, y)


def _tanh(x: Tensor) -> Tensor:
    """Below 0.625 a series: (1 - e^-2a) / (1 + e^-2a) would cancel to 0 for tiny a. In float32 the odd minimax
    polynomial of Cephes' tanhf, in float64 -expm1(-2a) / (2 + expm1(-2a)). Above, 1 - 2 / (e^2a + 1), which rounds
    as the true value does where it is within an ulp of 1 (tanh(9) is 0.99999994, not 1)."""

    def positive(a: Tensor) -> Tensor:
        small = a < 0.625
        s = small.where(a, 0.0)
        if a.dtype == dtypes.float64:
            e = _expm1(s * -2)
            series = -e / (2 + e)
        else:
            z = s * s
            poly = (((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z
            series = (poly - 3.33332819422e-1) * z * s + s
        return small.where(series, 1 - 2 / ((small.where(1.0, a) * 2).exp() + 1))

    return _odd(x, positive)


def _exp_float64(x: Tensor) -> Tensor:
    """exp in float64 to ~2 ulps: exp2(x log2 e) rounds the product, whose error grows with |x| (2e-14 relative near
    700, 40 ulps typical). Cody-Waite: x = k ln2 + r with k an integer and r exact from a two-part ln2 (k * LN2_HI is
    exact: LN2_HI has 32 bits, |k| < 2^11); then exp2(r log2 e + 1) * 2^(k - 1), the halves so 2^k never overflows
    before the product does. (float32 keeps one exp2: a second would cost softmax; its error is ~5 ulps at |x| ~ 10.)"""
    ln2_hi, ln2_lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
    special = (x.abs() == math.inf) | (x != x)
    xs = special.where(0.0, x).clip(-750.0, 710.0)  # past these exp is 0 or inf anyway; k stays small and exact
    k = (xs * (1 / math.log(2))).round()
    r = (xs - k * ln2_hi) - k * ln2_lo
    out = (r * (1 / math.log(2)) + 1).exp2() * (k - 1).exp2()
    return special.where((x == -math.inf).where(0.0, x), out)


def _expm1(x: Tensor) -> Tensor:
    """exp(x) - 1 to full precision for small x (Kahan): (u - 1) * x / log(u) with u = exp(x) rounded cancels u's
    rounding error; x where u rounds to 1, u - 1 where that is -1 or inf (u tiny or overflowed)."""
    u = x.exp()
    one, edge = u == 1, (u - 1 == -1) | (u == math.inf)
    us = (one | edge).where(2.0, u)
    return one.where(x, edge.where(u - 1, (us - 1) * (x / us.log())))


def _round_robin(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """n - 1 rounds of n / 2 disjoint pairs (p, q), together every pair of 0..n-1 once (the circle method)."""
    others = list(range(1, n))
    rounds = []
    for _ in range(n - 1):
        ring = [0, *others]
        rounds.append((tuple(ring[: n // 2]), tuple(reversed(ring[n // 2 :]))))
        others = others[-1:] + others[:-1]
    return rounds


def _parse_axes(side: str, formula: str) -> list[list[str]]:
    """One side of an einops formula as its dims, each a list of axis names: `a (b c) ... (...) ()` ->
    [[a], [b, c], [...], [(...)], []]. A `1` is a unit dim like `()`; `(...)` is the ellipsis merged into one dim."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for tok in re.findall(r"\.\.\.|[()]|[^\s()]+", side):
        if tok == "(":
            if current is not None:
                raise ValueError(f"rearrange {formula!r}: nested parentheses")
            current = []
        elif tok == ")":
            if current is None:
                raise ValueError(f"rearrange {formula!r}: unbalanced parentheses")
            groups.append(["(...)"] if current == ["..."] else current)
            current = None
        elif tok != "..." and not tok.isidentifier() and tok != "1":
            raise ValueError(f"rearrange {formula!r}: {tok!r} is not an axis name")
        else:
            names = [] if tok == "1" else [tok]
            if current is not None:
                current.extend(names)
            else:
                groups.append(names)
    if current is not None:
        raise ValueError(f"rearrange {formula!r}: unbalanced parentheses")
    names = [n for g in groups for n in g]
    if len(set(names)) != len(names):
        raise ValueError(f"rearrange {formula!r}: an axis is named twice on one side")
    return groups


def _atan(x: Tensor) -> Tensor:
    """atan of |x| reduced to |r| <= tan(pi/8) (r = -1/a above tan(3pi/8), (a-1)/(a+1) between), then Cephes' odd
    polynomial (float32 accuracy); float64 takes one Newton step on tan(y) = r, which squares the error."""

    def positive(a: Tensor) -> Tensor:
        big, mid = a > 2.414213562373095, a > 0.41421356237309503
        # each branch gets inputs it is finite on: 0 * inf in the gradient of an unused branch would be NaN
        between = mid & big.logical_not()
        r = big.where(-1 / big.where(a, 1.0), mid.where((between.where(a, 0.0) - 1) / (between.where(a, 0.0) + 1), a))
        z = r * r
        y = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * r + r
        if x.dtype == dtypes.float64:
            c = y.cos()
            y = y - c * (y.sin() - r * c)
        # constants as tensors of a's dtype: a where of two Python floats would round pi/2 to float32
        return big.where(a.full_like(math.pi / 2), mid.where(a.full_like(math.pi / 4), 0.0)) + y

    return _odd(x, positive)


def _log1p(u: Tensor, base2: bool = False) -> Tensor:
    """log(1 + u) (log2 with `base2`) to full precision for small u: log(w) * u / (w - 1) with w = 1 + u rounded
    cancels w's rounding error (Goldberg); exact u (u / ln 2) where w rounds to 1, and u where it is infinite. Base 2
    takes log2 itself rather than log's log2 * ln 2 then / ln 2: log2(1 + 1) is exactly 1 (logaddexp2(a, a) = a + 1)."""
    w = 1 + u
    plain = (w == 1) | (w == math.inf)
    ws = plain.where(2.0, w)
    log = ws.log2() if base2 else ws.log()
    return plain.where(u * (1 / math.log(2)) if base2 else u, log * (plain.where(1.0, u) / (ws - 1)))


def _sinh_cosh_pos(a: Tensor, odd: bool) -> Tensor:
    """sinh (odd) or cosh for a >= 0: the Taylor series below 1/2, where e^a - e^-a would cancel (in sinh, and in
    cosh's derivative); else t -+ 1/(4t) with t = e^a / 2, which overflows only where the result does."""
    small = a < 0.5
    s = small.where(a, 0.0)
    s2 = s * s
    term = s if odd else s.ones_like()
    series = term
    for k in range(1, 10):
        n = 2 * k + 1 if odd else 2 * k
        term = term * s2 * (1 / (n * (n - 1)))
        series = series + term
    t = (small.where(1.0, a) - math.log(2)).exp()
    return small.where(series, t - 0.25 / t if odd else t + 0.25 / t)


_LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)


def _from_node(node: weakref.ref[UOp], dtype: DType) -> Tensor:
    """A derivative's use of the forward result, a tensor over its node made when the backward runs (the node is alive
    then: it is what is differentiated). The rule holds it weakly: the rule is stored under that very node, which a
    strong reference would keep alive with every buffer it reads; and a closure over the result Tensor would keep
    that alive as a lazy reader of its inputs (an optimizer's write into them then computes it first)."""
    u = node()
    assert u is not None, "a derivative rule runs while its node is differentiated"
    return Tensor(u).cast(dtype)


def _sin_pi(x: Tensor) -> Tensor:
    """sin(pi x) from x - round(x) in [-1/2, 1/2] (exact), with the sign of round(x)'s parity: pi x itself would
    round away the fraction of a large x."""
    n = x.round()
    s = ((x - n) * math.pi).sin()
    return (n - (n * 0.5).floor() * 2 == 1).where(-s, s)


def _lgamma(x: Tensor) -> Tensor:
    reflect = x < 0.5
    z = reflect.where(1 - x, x) - 1  # lgamma of z + 1, z >= -1/2
    a = x.full_like(_LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], start=1):
        a = a + c / (z + i)
    t = z + 7.5
    series = 0.5 * math.log(2 * math.pi) + (z + 0.5) * t.log() - t + a.log()
    pole = reflect & (x == x.floor())
    out = reflect.where(math.log(math.pi) - _sin_pi(x).abs().log() - series, series)
    return pole.where(math.inf, (x.abs() == math.inf).where(math.inf, out))


def _digamma(x: Tensor) -> Tensor:
    reflect = x < 0.5
    y = reflect.where(1 - x, x)
    shift = y.zeros_like()
    for k in range(8):
        shift = shift + 1 / (y + k)
    w = y + 8
    w2 = 1 / (w * w)
    tail = w2 * (1 / 12 - w2 * (1 / 120 - w2 * (1 / 252 - w2 * (1 / 240 - w2 * (1 / 132)))))
    psi = w.log() - 0.5 / w - tail - shift
    r = x - x.round()  # pi / tan(pi x) from the reduced argument
    out = reflect.where(psi - math.pi / (r * math.pi).tan(), psi)
    # -inf at +0 and +inf at -0 (the limits from each side), NaN at the negative integers, as torch
    out = (x == 0).where(x._signbit().where(math.inf, -math.inf), (reflect & (x == x.floor())).where(math.nan, out))
    return (x == math.inf).where(math.inf, out)


def _trigamma(x: Tensor) -> Tensor:
    """psi'(x): the sum of 1 / (x + k)^2 over 8 steps, then the asymptotic series; pi^2 / sin^2(pi x) - psi'(1 - x)
    below 1/2 (digamma's derivative)."""
    reflect = x < 0.5
    y = reflect.where(1 - x, x)
    shift = y.zeros_like()
    for k in range(8):
        shift = shift + 1 / ((y + k) * (y + k))
    w = y + 8
    iw, w2 = 1 / w, 1 / (w * w)
    tail = iw + w2 / 2 + iw * w2 * (1 / 6 - w2 * (1 / 30 - w2 * (1 / 42 - w2 * (1 / 30))))
    r = x - x.round()
    s = (r * math.pi).sin()
    return reflect.where(math.pi**2 / (s * s) - (shift + tail), shift + tail)


_BERNOULLI_2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330)


def _polygamma(n: int, x: Tensor) -> Tensor:
    """psi^(n)(x) for n >= 1 (Tensor.polygamma)."""
    sign, fact = (-1) ** (n + 1), math.factorial(n)
    # the series' steps carry x from -8 on to where the asymptotic tail is exact (its terms fall faster the further
    # out it starts, and n slows them); further left the reflection, which cancels more (pi^(n+1) Q_n is large)
    reflect = x < -8
    y = reflect.where(1 - x, x)
    steps = 16 + n
    total = y.zeros_like()
    for k in range(steps):
        total = total + (y + k).pow(-(n + 1))
    w = y + steps
    iw = 1 / w
    # (n-1)!/w^n + n!/(2 w^(n+1)) + sum_k B_2k (2k+n-1)! / ((2k)! w^(2k+n)), by Horner in 1/w^2
    tail = w.zeros_like()
    for k in range(len(_BERNOULLI_2K), 0, -1):
        tail = tail * iw * iw + _BERNOULLI_2K[k - 1] * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
    tail = tail * iw * iw + fact / 2 * iw + math.factorial(n - 1)
    right = sign * (fact * total + tail * iw.pow(n))
    # psi^(n)(x) = (-1)^(n+1) psi^(n)(1 - x) ... through d^n/dx^n pi cot(pi x) = pi^(n+1) Q_n(cot(pi x)), with
    # Q_0(c) = c and Q_{k+1}(c) = -(1 + c^2) Q_k'(c) (coefficients by power of c, made here in Python)
    q = [0.0, 1.0]
    for _ in range(n):
        d = [i * q[i] for i in range(1, len(q))] + [0.0, 0.0]
        q = [-(d[i] + (d[i - 2] if i >= 2 else 0.0)) for i in range(len(d))]
    r = x - x.round()
    c = (r * math.pi).cos() / (r * math.pi).sin()
    poly = c.zeros_like()
    for coef in reversed(q):
        poly = poly * c + coef
    left = sign * ((-1) ** n * math.pi ** (n + 1) * poly - right)
    pole = (x <= 0) & (x == x.round())
    return pole.where(math.inf * sign, reflect.where(left, right))


def _bessel_i(x: Tensor, order: int) -> Tensor:
    """I_order(|x|) for order 0 or 1: the power series (x/2)^order sum (x^2/4)^k / (k! (k + order)!), 50 terms by
    Horner, up to 30 (there the 50th term is ~1e-17 of the sum); above, e^x / sqrt(2 pi x) times the asymptotic series
    sum (-1)^k prod_j (4 order^2 - (2j - 1)^2) / (k! (8 x)^k), 20 terms (its terms still fall at 30), computed as
    exp(x - log(2 pi x) / 2) so it overflows only where the result does."""
    a = x.abs()
    s = a.minimum(30.0)
    q = s * s / 4
    r = q.ones_like()
    for k in range(50, 0, -1):
        r = 1 + r * q / (k * (k + order))
    series = r * (s / 2) if order else r
    big = a.maximum(30.0)
    coef, c, mu = [1.0], 1.0, 4 * order * order
    for k in range(1, 21):
        c *= -(mu - (2 * k - 1) ** 2) / (k * 8)
        coef.append(c)
    t, inv = big.zeros_like(), 1 / big
    for c in reversed(coef):
        t = t * inv + c
    asym = (big - (big * (2 * math.pi)).log() / 2).exp() * t
    return (a <= 30).where(series, asym)


def _bessel_i1(x: Tensor) -> Tensor:
    """I1(x), odd: i0's derivative."""
    return x._signbit().where(-_bessel_i(x, 1), _bessel_i(x, 1))


def _erfinv(y: Tensor) -> Tensor:
    a = y.abs()
    inside = a < 1
    s = inside.where(a, 0.5)
    l = (1 - s * s).log()  # Winitzki: erfinv(s) ~ sqrt(sqrt(b^2 - l / 0.147) - b), b = 2 / (0.147 pi) + l / 2
    b = 2 / (0.147 * math.pi) + l / 2
    x = ((b * b - l / 0.147).sqrt() - b).sqrt()
    near_one = s >= 0.5
    for _ in range(3):
        # erf(x) - s, as (1 - s) - erfc(x) near 1 (1 - s is exact there, and erf(x) - s would cancel)
        f = near_one.where((1 - s) - _erfc_pos(x), _erf(x) - s)
        step = f / ((-x * x).exp() * (2 / math.sqrt(math.pi)))
        x = x - step / (1 + x * step)  # Halley: erf'' / erf' = -2x
    out = inside.where(x, (a == 1).where(math.inf, math.nan))
    return y._signbit().where(-out, out)


def _erfc_fraction(b: Tensor) -> Tensor:
    """erfc(b) for b >= 1.8: exp(-b^2) / sqrt(pi) / (b + (1/2) / (b + 1 / (b + (3/2) / ...))), 60 levels (1e-15
    relative from 1.8)."""
    d = b
    for k in range(60, 0, -1):
        d = b + (k / 2) / d
    return (-b * b).exp() * (1 / math.sqrt(math.pi)) / d


def _erfc_pos(a: Tensor) -> Tensor:
    """erfc(a) for a >= 0: 1 - erf below 1.8 (erfc > 0.01 there, so in float64 erf's 1e-16 stays ~1e-14 relative),
    the continued fraction above."""
    small = a < 1.8
    return small.where(1 - _erf(small.where(a, 0.0)), _erfc_fraction(small.where(1.8, a)))


def _erf(x: Tensor) -> Tensor:
    """Odd-extended from a >= 0. Below a threshold the Maclaurin series 2/sqrt(pi) sum (-1)^n a^(2n+1) / (n! (2n+1))
    at full precision (an absolute approximation would round erf(1e-7) to 0). Above it, in float32 Abramowitz &
    Stegun 7.1.26 from 1 (|error| < 1.5e-7, under 3 ulps); in float64 the series up to 1.8 (50 terms, 1e-15) and
    1 - erfc's continued fraction beyond."""
    f64 = x.dtype == dtypes.float64
    edge, terms = (1.8, 50) if f64 else (1.0, 11)

    def positive(a: Tensor) -> Tensor:
        small = a < edge
        s = small.where(a, 0.0)
        z, series = s * s, s.zeros_like()
        for n in reversed(range(terms)):  # Horner in z = s^2 over the coefficients (-1)^n / (n! (2n+1))
            series = series * z + (-1) ** n / (math.factorial(n) * (2 * n + 1))
        series = series * s
        b = small.where(edge, a)
        if f64:
            large = 1 - _erfc_fraction(b)
        else:
            t = 1 / (1 + 0.3275911 * b)
            poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
            large = 1 - poly * (-b * b).exp()
        return small.where(series * (2 / math.sqrt(math.pi)), large)

    return _odd(x, positive)


def _sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below: exp never overflows, so neither the value nor
    the gradient of the branch a where does not take becomes inf (0 * inf would be a NaN gradient)."""
    neg = x < 0
    e = neg.where(x, -x).exp()
    return neg.where(e, 1) / (1 + e)


def _reduced_shape(shape: tuple[int, ...], axis: Any, keepdim: bool) -> tuple[int, ...]:
    axes = _axes(axis, len(shape))
    return (
        tuple(1 if i in axes else s for i, s in enumerate(shape))
        if keepdim
        else tuple(s for i, s in enumerate(shape) if i not in axes)
    )


def _scalar_dtype(tensor_dtype: DType, x: Any) -> DType:
    """The dtype of a Python scalar next to a tensor: the tensor's, unless the scalar's kind is higher (torch rules)."""
    if isinstance(x, bool):
        return tensor_dtype
    if isinstance(x, int):
        # next to a bool tensor the int's own dtype: int64 where the default int cannot hold it (wrapped, True + 2**31
        # was -2**31 and False == 1 - 2**63 was True)
        return tensor_dtype if tensor_dtype != dtypes.bool else dtypes.from_py(x)
    return tensor_dtype if dtypes.is_float(tensor_dtype) else dtypes.default_float


def to_arguments(*args: Any, **kwargs: Any) -> tuple[Any, DType | None, bool]:
    """(device, dtype, copy) of torch's `.to(...)` forms: a device, a dtype, both, or a tensor (its device and dtype),
    and device= / dtype= / copy= / non_blocking= / memory_format= (Tensor.to and Module.to)."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None), kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    positional = [a for a in args if a is not None]
    if len(positional) > 2:
        raise TypeError(f"to() takes a device, a dtype or a tensor (and copy / non_blocking), got {positional}")
    for a in positional:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, DType) or _is_dtype_name(a):
            dtype = a
        elif isinstance(a, bool):  # torch's positional non_blocking after the dtype
            continue
        elif isinstance(a, (str, tuple)):
            device = a
        else:
            raise TypeError(f"to() takes a device name, a dtype or a tensor, got {type(a).__name__} {a!r}")
    return device, None if dtype is None else to_dtype(dtype), copy


def _is_dtype_name(x: Any) -> bool:
    """A string naming a dtype ("float32", "int8"): Tensor.to's argument is then a dtype, not a device."""
    return isinstance(x, str) and isinstance(getattr(dtypes, x, None), DType)


def _tensor_list(name: str, first: Tensor | Sequence[Tensor], others: tuple[Tensor, ...]) -> list[Tensor]:
    """The tensors of a torch function that takes them as one sequence (torch.hstack([a, b])) or here also as
    separate arguments (a.hstack(b))."""
    if isinstance(first, Tensor):
        return [first, *others]
    if others:
        raise ArgumentError(f"{name} takes the tensors as one sequence or as separate arguments, not both")
    if not first:
        raise ArgumentError(f"{name} expects a non-empty sequence of tensors")
    return list(first)


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ArgumentError(f"cannot broadcast shapes {a} and {b}")
        out.append(y if x == 1 else x)
    return tuple(out)


def _threefry2x32(x0: Tensor, x1: Tensor, k0: int, k1: int | Tensor) -> tuple[Tensor, Tensor]:
    """Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3")."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (k0, k1, (k0 ^ k1 ^ 0x1BD11BDA) & 0xFFFFFFFF)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ((ks[(i + 2) % 3] + i + 1) & 0xFFFFFFFF)
    return x0, x1


def _pad_pairs(t: Tensor, padding: Sequence[Any]) -> list[tuple[int, int]]:
    """(before, after) per dim from ((lo, hi) or None, ...) or torch's flat (last_lo, last_hi, prev_lo, ...)."""
    if all(isinstance(p, (int, UOp)) for p in padding):
        flat = list(padding)
        if len(flat) % 2 or len(flat) // 2 > t.ndim:
            raise ArgumentError(f"flat padding {tuple(flat)} needs an even number of entries, at most 2*{t.ndim}")
        pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
        return [(0, 0)] * (t.ndim - len(pairs)) + pairs
    if len(padding) != t.ndim:
        raise ArgumentError(f"padding {tuple(padding)} needs one entry per dimension of shape {t.shape}")
    return [(0, 0) if p is None else (_size_arg(p[0]), _size_arg(p[1])) for p in padding]


class _SymRepr:
    """A symbolic size in a Tensor's repr: its expression and, where bound, its value (`start_pos+1=6`)."""

    def __init__(self, s: UOp):
        self.s = s

    def __repr__(self) -> str:
        known = sym_known(self.s)
        return self.s.render() + ("" if known is None else f"={known}")


def _size_arg(x: Any) -> Any:
    """An int argument of a movement op, or a symbolic one (an int UOp of bound Variables) kept as it is."""
    return x if isinstance(x, UOp) and dtypes.is_int(x.dtype) else int(x)


def _sym_uop(x: UOp, device: str) -> UOp:
    """A symbolic int as a 0-d tensor-graph node on `device`: its variables and constants placed there."""
    dev = UOp(Ops.DEVICE, arg=device)
    mapping = {}
    for n in x.toposort:
        if n.op is Ops.BIND and len(n.src) == 2:
            mapping[n] = n.replace(src=(*n.src, dev))
        elif n.op is Ops.CONST and not n.src:
            mapping[n] = UOp(Ops.CONST, n.dtype, (dev,), n.arg)
    return substitute(x, mapping)


def _sorts_before(a: Tensor, b: Tensor) -> Tensor:
    """a < b in sort order: NaN after every number."""
    if not dtypes.is_float(a.dtype):
        return a < b
    return (a < b) | (b.isnan() & a.isnan().logical_not())


def _sorts_equal(a: Tensor, b: Tensor) -> Tensor:
    return (a == b) | (a.isnan() & b.isnan()) if dtypes.is_float(a.dtype) else a == b


# *** indexing: ints, slices, None and ... are views; integer tensors select by comparing with an arange and
# summing, which fuses into one kernel (no data-dependent loop); bool masks become integer tensors via nonzero ***


def _index_tensor(t: Tensor, i: Any) -> Tensor:
    """A list / tuple / numpy array / tensor used as an index: an integer or bool tensor on t's device."""
    if isinstance(i, Tensor):
        x = i
    elif isinstance(i, (list, tuple)):
        values, _ = _flatten_list(list(i))
        if any(isinstance(v, float) for v in values):
            raise IndexError(f"indices must be integers or bools, got the list {i!r}")
        x = Tensor(list(i), device=t.device, dtype=None if values else dtypes.int32)
    else:
        x = Tensor(i, device=t.device)
    if x.dtype != dtypes.bool and not dtypes.is_int(x.dtype):
        raise IndexError(f"tensors used as indices must be integer or bool, got {x.dtype}")
    return x.to(t.device)


def _check_host_index(i: Any, x: Tensor, size: int, dim: int) -> None:
    """Index values given as host data (a list or numpy array) are checked for range; tensor indices are read only
    with CHECK_INDEX=1."""
    if x.dtype == dtypes.bool or x.numel() == 0:
        return
    if isinstance(i, Tensor):
        _check_index_values(i, -size, size, "indexing dimension {} with size {}", dim, size)
        return
    values, _ = _flatten_list(i.tolist() if hasattr(i, "tolist") else list(i))
    for v in values:
        if not -size <= v < size:
            raise IndexError(f"index {v} is out of bounds for dimension {dim} with size {size}")


def _dims_consumed(item: Any) -> int:
    """Dims of the tensor an index item uses: a bool mask one per mask dim, anything else one."""
    return item[1].ndim if isinstance(item, tuple) and item[1].dtype == dtypes.bool else 1


def _split_index(t: Tensor, index: Any) -> tuple[list[Any], list[tuple[int, Tensor]]]:
    """The basic part of an index (ints, slices, None; a full slice where a tensor indexes) and the advanced part:
    (dim of the basic view, integer index tensor) per indexed dim, a bool mask counting as one per masked dim."""
    if isinstance(index, list) and not all(isinstance(e, int) for e in index):
        # tinygrad's rule (and torch's before 2.9): a list of anything but ints is the tuple of its parts, so
        # x[[rows, cols]] is x[rows, cols] and x[[slice(None), [1, 3]]] x[:, [1, 3]] (numpy reads an index array)
        index = tuple(index)
    raw = list(index) if isinstance(index, tuple) else [index]
    items: list[Any] = []
    for i in raw:
        if isinstance(i, bool):
            raise NotImplementedError(f"indexing with a Python bool ({i}) is not supported; use None or a bool tensor")
        if i is None or i is Ellipsis or isinstance(i, (int, slice)) or _is_sym_int(i):
            items.append(i)
        elif type(i).__module__ == "numpy" and getattr(i, "ndim", 1) == 0 and "int" in type(i).__name__:
            items.append(int(i))  # a numpy integer scalar
        elif isinstance(i, (Tensor, list, tuple, range)) or type(i).__module__ == "numpy":
            i = list(i) if isinstance(i, range) else i
            x = _index_tensor(t, i)
            items.append((i, x))
        else:
            raise IndexTypeError(
                f"invalid index {i!r} of type {type(i).__name__}: use ints, slices, None, ... or tensors"
            )
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError("an index can only have a single ellipsis (...)")
    consumed = [0 if i is None or i is Ellipsis else _dims_consumed(i) for i in items]
    if sum(consumed) > t.ndim:
        raise IndexError(f"too many indices for tensor of dimension {t.ndim}: {index!r}")
    if Ellipsis in items:
        e = items.index(Ellipsis)
        items[e : e + 1] = [slice(None)] * (t.ndim - sum(consumed))
    else:
        items += [slice(None)] * (t.ndim - sum(consumed))
    basic: list[Any] = []
    adv: list[tuple[int, Tensor]] = []
    checks: list[tuple[Any, Tensor, int, int]] = []
    tdim = rdim = 0
    for i in items:
        if i is None or isinstance(i, slice):
            basic.append(i)
            rdim += 1
            tdim += 0 if i is None else 1
        elif isinstance(i, int) or _is_sym_int(i):
            basic.append(i)
            tdim += 1
        elif i[1].dtype == dtypes.bool:
            mask = i[1]
            if mask.shape != t.shape[tdim : tdim + mask.ndim]:
                raise IndexError(
                    f"the mask of shape {mask.shape} does not match the indexed dims "
                    f"{t.shape[tdim : tdim + mask.ndim]} of shape {t.shape} (starting at dim {tdim})"
                )
            if mask.ndim == 0:
                raise NotImplementedError("indexing with a 0-d bool tensor is not supported; use None")
            coords = mask.nonzero()
            for j in range(mask.ndim):
                basic.append(slice(None))
                adv.append((rdim, coords[:, j]))
                rdim, tdim = rdim + 1, tdim + 1
        else:
            checks.append((i[0], i[1], t.shape[tdim], tdim))
            basic.append(slice(None))
            adv.append((rdim, i[1]))
            rdim, tdim = rdim + 1, tdim + 1
    # as torch: an index whose result is empty (a slice of length 0 beside it) reads nothing, so it is not range-checked
    if not _empty_slice(t, basic):
        for check in checks:
            _check_host_index(*check)
    return basic, adv


def _empty_slice(t: Tensor, basic: list[Any]) -> bool:
    """Whether a concrete slice among the basic index items selects no element of its dim."""
    dim = 0
    for i in basic:
        if i is None:
            continue
        if (
            isinstance(i, slice)
            and isinstance(t.shape[dim], int)
            and not any(_is_sym_int(x) for x in (i.start, i.stop))
        ):
            if len(range(*i.indices(t.shape[dim]))) == 0:
                return True
        dim += 1
    return False


def _basic_plan(t: Tensor, basic: list[Any]) -> tuple[list[tuple[int, int, bool, int, int]], tuple[int, ...]]:
    """Per dim of t: (lo, hi, flipped, step, count) of the view, and the view's shape (ints dropped, None added)."""
    plan, out_shape = [], []
    dim = 0
    for i in basic:
        if i is None:
            out_shape.append(1)
            continue
        size = t.shape[dim]
        if _is_sym_int(i) or isinstance(i, slice) and any(_is_sym_int(x) for x in (i.start, i.stop, i.step, size)):
            lo, hi = _symbolic_window(i, size, dim)
            step = 1 if _is_sym_int(i) or i.step is None else i.step
            count = 1 if _is_sym_int(i) else ssimplify((hi - lo + step - 1) // step)
            plan.append((lo, hi, False, step, count))
            if not _is_sym_int(i):
                out_shape.append(plan[-1][4])
        elif isinstance(i, int):
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            plan.append((i % size, i % size + 1, False, 1, 1))
        else:
            start, stop, step = i.indices(size)
            if step > 0:
                n = max(0, ceildiv(stop - start, step))
                plan.append((start, start + (n - 1) * step + 1, False, step, n) if n else (0, 0, False, step, 0))
            else:
                n = max(0, ceildiv(start - stop, -step))
                plan.append((start - (n - 1) * -step, start + 1, True, -step, n) if n else (0, 0, True, -step, 0))
            out_shape.append(n)
        dim += 1
    return plan, tuple(out_shape)


def _is_sym_int(x: Any) -> bool:
    return isinstance(x, UOp) and dtypes.is_int(x.dtype)


def _symbolic_window(i: Any, size: Any, dim: int) -> tuple[Any, Any]:
    """[lo, hi) of an index or a slice where the index, a bound or the size is symbolic. Checked, not clamped,
    at the bound values: a symbolic bound past the end is an error rather than a size that changes meaning."""
    if _is_sym_int(i):
        lo, hi = i, ssimplify(i + 1)
    else:
        if i.step is not None and (_is_sym_int(i.step) or i.step < 1):
            raise NotImplementedError(f"a slice with a Variable takes a positive int step, not {i.step}")
        lo = 0 if i.start is None else i.start
        hi = size if i.stop is None else i.stop
        # a negative int counts from the end, as in any slice
        lo = ssimplify(size + lo) if type(lo) is int and lo < 0 else lo
        hi = ssimplify(size + hi) if type(hi) is int and hi < 0 else hi
        if type(hi) is int and type(size) is int:
            hi = min(hi, size)
    a, b, n = sym_known(lo), sym_known(hi), sym_known(size)
    if None not in (a, b, n) and not 0 <= a <= b <= n:
        raise IndexError(f"index {i!r} is out of bounds for dimension {dim} with size {n} (at the bound values)")
    return lo, hi


def _basic_getitem(t: Tensor, basic: list[Any]) -> Tensor:
    plan, out_shape = _basic_plan(t, basic)
    x = t.shrink([(lo, hi) for lo, hi, _, _, _ in plan])
    if any(p[2] for p in plan):
        x = x.flip([d for d, p in enumerate(plan) if p[2]])
    if any(p[3] != 1 for p in plan):
        # take every step-th element: pad to a multiple of the step, split (n, step), keep index 0 of each step
        x = x.pad([(0, n * s - (hi - lo)) for lo, hi, _, s, n in plan])
        x = x.reshape(flatten((n, s) for _, _, _, s, n in plan))
        x = x.shrink(flatten(((0, n), (0, 1)) for _, _, _, _, n in plan))
    x = x.reshape(out_shape)
    if x is not t:
        x._view_of = t._view_of or (t, t.uop)  # a view even through its flips and pads (numpy's negative steps)
    return x


def _basic_scatter(t: Tensor, basic: list[Any], v: Tensor) -> Tensor:
    """The inverse view of _basic_getitem: v (shaped like t[basic]) placed where t[basic] reads, zeros elsewhere."""
    plan, _ = _basic_plan(t, basic)
    x = v.reshape([n for _, _, _, _, n in plan])
    if any(p[3] != 1 for p in plan):
        x = x.reshape(flatten((n, 1) for _, _, _, _, n in plan))
        x = x.pad(flatten((None, (0, s - 1)) for _, _, _, s, _ in plan))
        x = x.reshape([n * s for _, _, _, s, n in plan]).shrink([(0, hi - lo) for lo, hi, _, _, _ in plan])
    if any(p[2] for p in plan):
        x = x.flip([d for d, p in enumerate(plan) if p[2]])
    return x.pad([(lo, size - hi) for (lo, hi, _, _, _), size in zip(plan, t.shape)])


def _index_mask(
    adv: list[tuple[int, Tensor]], sizes: list[int], bshape: tuple[int, ...], trailing: tuple[int, ...]
) -> Tensor:
    """Bool (*bshape, *sizes, *trailing): true where every index tensor points at that position."""
    nb, k, full = len(bshape), len(sizes), bshape + tuple(sizes) + trailing
    mask = None
    for j, ((_, idx), s) in enumerate(zip(adv, sizes)):
        # expanded before any arithmetic, so the compare fuses into the kernel that reads it instead of being stored
        idx = idx._broadcast_to(bshape).reshape(bshape + (1,) * (k + len(trailing))).expand(full)
        if not dtypes.is_unsigned(idx.dtype):
            idx = (idx < 0).where(idx + s, idx)
        ar = Tensor.arange(s, device=idx.device).reshape((1,) * (nb + j) + (s,) + (1,) * (k - j - 1 + len(trailing)))
        m = idx == ar
        mask = m if mask is None else mask & m
    assert mask is not None
    return mask


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` expands to `target` by numpy's rules (align on the right; a dim of 1 stretches)."""
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _fixed_point_taps(
    i: int, o: int, s: float, align_corners: bool
) -> tuple[list[int], list[int], list[int], list[int], int]:
    """Linear resampling of a dim of size i to o as torch resamples uint8 images: each output's two input taps (lo,
    hi) and their weights as integers scaled by 2**p, p the finest precision at which the largest weight still fits
    an int16. Sizes alone decide them, so they are computed here and enter the graph as constants."""
    taps = []
    for j in range(o):
        src = j * ((i - 1) / (o - 1) if o > 1 else 0.0) if align_corners else max((j + 0.5) * s - 0.5, 0.0)
        lo = min(int(math.floor(src)), i - 1)
        hi = min(lo + 1, i - 1)
        taps.append((lo, hi, 1.0 - (src - lo), src - lo) if hi != lo else (lo, lo, 1.0, 0.0))
    biggest, p = max(max(t[2], t[3]) for t in taps), 0
    while p < 15 and int(0.5 + biggest * (1 << (p + 1))) < (1 << 15):
        p += 1
    lo_, hi_, w0, w1 = zip(*taps)
    return list(lo_), list(hi_), [int(w * (1 << p) + 0.5) for w in w0], [int(w * (1 << p) + 0.5) for w in w1], p


def _pick(x: Tensor, mask: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Sum of x where mask over axes, in x's dtype: with one true entry per output it selects that entry."""
    if x.dtype == dtypes.bool:
        return (x & mask).any(axes)
    return mask.where(x, 0).sum(axes, dtype=x.dtype)


def _last_write(last: Tensor, src: Tensor, hit: Tensor, axes: tuple[int, ...]) -> Tensor:
    """The value of the last write to each position, with the gradient torch gives repeated indices: every write
    gets the output's gradient (as a gather of it), not only the one that landed."""
    if not src.requires_grad:
        return last
    every = _pick(src, hit, axes)
    moved = every - every.detach()  # zero (NaN where the sum is not finite: then no gradient flows there)
    return last.detach() + moved.isnan().where(0.0, moved)


def _adv_layout(view_ndim: int, adv: list[tuple[int, Tensor]]) -> tuple[list[int], list[int], tuple[int, ...], int]:
    """Indexed dims, the other dims, the broadcast index shape, and where that shape goes in the result: at the first
    indexed dim if the indexed dims are adjacent, else in front (torch's and numpy's rule)."""
    dims = [d for d, _ in adv]
    rest = [d for d in range(view_ndim) if d not in dims]
    bshape: tuple[int, ...] = ()
    for _, idx in adv:
        try:
            bshape = _broadcast_shape(bshape, idx.shape)
        except ValueError:
            shapes = [i.shape for _, i in adv]
            raise IndexError(f"shape mismatch: index tensors of shapes {shapes} cannot be broadcast together") from None
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    return dims, rest, bshape, dims[0] if adjacent else 0


def _advanced_getitem(x: Tensor, adv: list[tuple[int, Tensor]]) -> Tensor:
    dims, rest, bshape, at = _adv_layout(x.ndim, adv)
    nb, k = len(bshape), len(dims)
    y = x.permute(dims + rest)
    mask = _index_mask(adv, [x.shape[d] for d in dims], bshape, tuple(x.shape[d] for d in rest))
    out = _pick(y.reshape((1,) * nb + y.shape), mask, tuple(range(nb, nb + k)))
    return out.permute(*range(nb, nb + at), *range(nb), *range(nb + at, out.ndim)) if at else out


def _advanced_scatter(shape: tuple[int, ...], adv: list[tuple[int, Tensor]], v: Tensor) -> tuple[Tensor, Tensor]:
    """v (shaped like the advanced result) placed at the indexed positions of `shape`, and where it was placed.
    Where an index repeats, the last write wins, as in torch's index_put on the CPU."""
    dims, rest, bshape, at = _adv_layout(len(shape), adv)
    nb, k, nr = len(bshape), len(dims), len(rest)
    sizes, rest_shape = [shape[d] for d in dims], tuple(shape[d] for d in rest)
    inverse = argsort(dims + rest)
    if prod(bshape) == 0:
        return Tensor.zeros(*shape, dtype=v.dtype, device=v.device), Tensor.full(shape, False, device=v.device)
    v = v.permute(*range(at, at + nb), *range(at), *range(at + nb, v.ndim)) if at else v
    mask = _index_mask(adv, sizes, bshape, (1,) * nr)
    gid = Tensor.arange(prod(bshape), device=v.device).reshape(bshape + (1,) * (k + nr))
    last = mask.where(gid, -1).max(tuple(range(nb)), keepdim=True)
    v = v.reshape(bshape + (1,) * k + rest_shape)
    vals = _last_write(_pick(v, mask & (gid == last), tuple(range(nb))), v, mask, tuple(range(nb)))
    hit = (last >= 0).reshape(tuple(sizes) + (1,) * nr).expand(tuple(sizes) + rest_shape)
    return vals.permute(inverse), hit.permute(inverse)


def _getitem(t: Tensor, index: Any) -> Tensor:
    if type(index) is slice or type(index) is int:
        cut = _leading_cut(t, index)
        if cut is not None:
            return cut
    basic, adv = _split_index(t, index)
    x = _block_as_buffer(t, _basic_getitem(t, basic))
    return _advanced_getitem(x, adv) if adv else x


# in the BUFFER node of a block cut as a buffer of its own (_block_as_buffer): the view of the tensor it stands for
_BLOCK_OF = "block_of"
# in a memory's Buffer: the buffers cut from it that are alive. A kernel takes each as an argument of its own (views of
# one tensor are one argument), and a device takes a bounded number (CPU 32): a graph reading more rows of one tensor
# at once (its rows unbound, or summed in a loop) reads the rest as views. A minibatch loop holds one or two.
_CUTS = "live_cuts"
MAX_LIVE_CUTS = 4


def _block_as_buffer(t: Tensor, x: Tensor) -> Tensor:
    """x, the view basic indexing took of t, as a buffer of its own where it shows whole rows of realized t that lie
    in one contiguous block of memory (X[j:j+32], X[j], X[j:k, :], a row block of a 3-d tensor): a Buffer over t's
    memory at the block's offset (Buffer.view, torch's storage offset). The graph then holds an ordinary realized
    input of x's shape, the same for every offset: a loop over minibatches X[j:j+32] schedules one graph structure (a
    schedule cache hit) and runs the same compiled kernels for every j, where the offset in the graph (a shrink) made
    each j a new schedule, new gradient and composite programs and about 4 new kernels (an MLP Adam step: 60 ms, the
    same step on a fixed batch 1.2 ms).

    What a view promises stays: x._view_of still names t, so a write through the slice lands in t, and a write into t
    pending when the slice is used is read through (_view_chain steps from the buffer to the view it stands for);
    Buffer.memory is t's memory, so the write-order bookkeeping counts every read of the slice as a read of t's memory
    and an in-place write reading it as a shifted read (_shifted_bases). The buffer keeps t's memory alive. A gradient
    reaches t through the slice where a backward wants one for it (_through_blocks).

    x stays a view: inside a TinyJit capture (a replay swaps the capture's input buffers under its kernels; a buffer
    cut from one would keep pointing into the capture's); inside a composite being recorded (_replayed: its program
    replays the nodes it built over new inputs, and a buffer cut from this call's input is none of them); where t
    needs a gradient path (it requires grad, or keeps a graph for one); where the device cannot address the offset
    (Allocator.offset: DISK, PYTHON, an OpenCL sub-buffer off its alignment); for part of a row (a record's fields, a
    GGUF block's scales and codes, which one kernel reads apart: each cut is an argument of its own, where views of one
    tensor are one); and past MAX_LIVE_CUTS live cuts of one memory."""
    if x is t or (base := _cuttable_base(t)) is None:
        return x
    chain = []
    u = x.uop
    while u is not base:
        if u.op in GroupOp.Movement:
            chain.append(u)
        elif u.op is not Ops.DETACH:  # (no_grad detaches each view)
            return x
        u = u.src[0]
    st = ShapeTracker.from_shape((base.arg.size,))
    for m in reversed(chain):
        st = st.apply(m.op, m.arg)
    if len(st.views) != 1:
        return x
    v = st.views[0]
    if v.mask is not None or type(v.offset) is not int or not all(type(s) is int for s in v.shape):
        return x
    size, row = prod(v.shape), t.shape[-1] if t.ndim > 1 else 1
    if size == 0 or size == base.arg.size or v.strides != strides_for_shape(v.shape):
        return x  # nothing, all of t (x reshapes it), or not one block in row-major order
    if v.offset % row or size % row:
        return x  # part of a row
    out = _cut(base.arg, v.offset, size, x.shape, x.uop, x._requires_grad, x._view_of)
    return x if out is None else out


def _cuttable_base(t: Tensor) -> UOp | None:
    """The BUFFER node under t's reshapes where a view of t may be cut as a buffer of its own (_block_as_buffer says
    when not), else None."""
    from lazygrad.gradient import recording

    if not isinstance(t.device, str) or t._on_disk:
        return None
    base = _under_reshapes(t.uop)
    # (an unallocated buffer holds no value yet: @function's placeholders, an empty tensor)
    if base.op is not Ops.BUFFER or base.arg.pending_write or not base.arg.is_allocated:
        return None
    if is_capturing() or recording():
        return None
    if t._requires_grad or _grad_leaves and t.requires_grad:
        return None
    if _lazy_origin and (t.uop in _lazy_origin or base in _lazy_origin):
        return None
    return base


def _cut(
    buf: Buffer,
    offset: int,
    size: int,
    shape: tuple[int, ...],
    view: UOp,
    requires_grad: bool | None,
    view_of: tuple[Tensor, UOp] | None,
) -> Tensor | None:
    """The tensor of `shape` over `size` elements of buf from `offset` on, standing for `view` (the view node of buf's
    tensor that shows them, its requires_grad and _view_of); None past MAX_LIVE_CUTS or where the device cannot cut
    there."""
    held = buf.memory.__dict__
    if (cuts := held.get(_CUTS)) is None:
        cuts = held.setdefault(_CUTS, weakref.WeakSet())
    if len(cuts) >= MAX_LIVE_CUTS:
        return None
    block = buf.view(offset, size, shape)
    if block is None:
        return None
    cuts.add(block)
    node = UOp.buffer_view(block, shape)
    node.base.__dict__[_BLOCK_OF] = view
    out = Tensor.from_uop(node)  # (no DETACH under no_grad: a buffer has no graph to cut)
    out._requires_grad, out._view_of = requires_grad, view_of
    if requires_grad is None and dtypes.is_float(out.dtype):
        _note_unset(out)
    return out


def _leading_cut(t: Tensor, index: int | slice) -> Tensor | None:
    """t[index] for an int or a step-1 slice of ints on the first dim of a realized tensor, cut as a buffer of its
    own straight from the index (the minibatch loop's X[j:j+32], X[i]): the general plan (_split_index,
    _basic_getitem, a shape tracker in _block_as_buffer) cost about 35 us of Python per slice. The view node it
    stands for is built as _basic_getitem builds it. None where the general path decides (its errors included)."""
    if t._view_of is not None or not t.uop.shape:
        return None
    shape = t.shape
    n = shape[0]
    if type(index) is int:
        if not -n <= index < n:
            return None
        start, count = index % n, 1
    else:
        if index.step not in (None, 1) or not {type(index.start), type(index.stop)} <= _INT_OR_NONE:
            return None
        start, stop, _ = index.indices(n)
        count = stop - start
    if count <= 0 or count == n or any(type(s) is not int for s in shape) or (base := _cuttable_base(t)) is None:
        return None
    grad_off = _modes.grad_disabled
    view = UOp(Ops.SHRINK, t.dtype, (t.uop,), ((start, start + count), *((0, s) for s in shape[1:])))
    if grad_off:
        view = UOp(Ops.DETACH, t.dtype, (view,))
    if type(index) is int:  # the int's dim dropped, by a reshape (detached again under no_grad, as any new view)
        view = UOp(Ops.RESHAPE, t.dtype, (view,), shape[1:])
        if grad_off:
            view = UOp(Ops.DETACH, t.dtype, (view,))
    row = prod(shape[1:])
    out_shape = shape[1:] if type(index) is int else (count, *shape[1:])
    return _cut(base.arg, start * row, count * row, out_shape, view, False if grad_off else None, (t, t.uop))


_INT_OR_NONE = frozenset({int, type(None)})


def _block_origin(u: UOp) -> UOp | None:
    """For the BUFFER node of a block cut as a buffer of its own: the view it stands for, in the buffer's shape."""
    view = u.__dict__.get(_BLOCK_OF)
    if view is None or view.shape == u.shape:
        return view
    return UOp(Ops.RESHAPE, view.dtype, (view,), u.shape)


def _through_blocks(root: UOp, tensors: Sequence[Tensor], renamed: dict[UOp, UOp]) -> UOp:
    """root with each block cut as a buffer of its own swapped back for the view it stands for, where that view's
    graph (through blocks cut from blocks too) holds the node of one of `tensors`: a gradient reaches them through
    the slice. `renamed` as substitute's, kept pointing at the nodes of the graph it was made for."""
    wanted: set[UOp] = set()
    reaches: dict[UOp, bool] = {}

    def reaches_wanted(origin: UOp) -> bool:
        if origin not in reaches:
            reaches[origin] = any(
                n in wanted or (o := _block_origin(n)) is not None and reaches_wanted(o) for n in origin.toposort
            )
        return reaches[origin]

    while True:
        blocks = {n: o for n in root.toposort if n.op is Ops.BUFFER and (o := _block_origin(n)) is not None}
        if not blocks:
            return root
        wanted = wanted or {t.uop for t in tensors}
        mapping = {n: o for n, o in blocks.items() if reaches_wanted(o)}
        if not mapping:
            return root
        now: dict[UOp, UOp] = {}
        root = substitute(root, mapping, now)
        for new, old in now.items():
            renamed[new] = renamed.get(old, old)


# (op, what the arg was checked against, the arguments as given) -> the arg they make: a movement op repeated on a
# tensor of the same shape (a model's reshapes and transposes, every step) skips argfix and the checks. Bounded, as a
# model whose shapes change every call would otherwise grow it forever
_checked_views: dict[tuple, tuple[int, ...]] = {}
CHECKED_VIEWS = 4096


def _view_key(op: Ops, against: Any, args: tuple) -> tuple | None:
    """The key of a movement op's arguments (given flat, or as one tuple or list) in _checked_views; None unless they
    are Python ints: a float or a numpy int hashes as the int it equals and must meet the checks, and a symbolic size
    is another node every step."""
    flat = args[0] if len(args) == 1 and type(args[0]) in (tuple, list) else args
    try:
        return (op, against, tuple(flat)) if type(sum(flat)) is int else None
    except TypeError:  # a None (a size kept) among them
        return None


def _check_once(key: tuple, arg: tuple[int, ...]) -> None:
    if len(_checked_views) >= CHECKED_VIEWS:
        _checked_views.clear()
    _checked_views[key] = arg


def _shaped(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any, shape: tuple[int, ...], device: str) -> UOp:
    """UOp(op, dtype, src, arg) with the shape and device its builder already knows noted on it (no rule's call when
    they are asked): for builders that checked their arguments once for several nodes."""
    u = UOp(op, dtype, src, arg)
    known = u.__dict__
    known.setdefault("shape", shape)
    known.setdefault("device", device)
    return u


def _broadcast_node(u: UOp, shape: tuple[int, ...], to: tuple[int, ...], device: str) -> UOp:
    """u (of `shape`) broadcast to `to` as Tensor._broadcast_to does it: ones in front, then an expand."""
    if shape == to:
        return u
    if len(shape) < len(to):
        shape = (1,) * (len(to) - len(shape)) + shape
        u = _shaped(Ops.RESHAPE, u.dtype, (u,), shape, shape, device)
    return u if shape == to else _shaped(Ops.EXPAND, u.dtype, (u,), to, to, device)


def _matmul_node(x: Tensor, w: Tensor) -> UOp | None:
    """x @ w's node built directly from the operands' nodes: the very (hash-consed) nodes Tensor._dot_composed builds
    with tensor ops (a reshape of each operand, w's transpose, the 16-bit floats' casts to float32, the broadcasts, the
    product, its sum over k and the reshape dropping k), without its eight tensors and their argument checks (x @ w of
    64x64 built in 327 Python calls, 49 here). None under no_grad, where the operands differ in dtype or device or are
    bools (a bool product is an AND), a size is symbolic, the device is several or k is 0: the composed path's
    detaches, promotions and special cases apply there. (The shapes are checked by Tensor.dot.)"""
    if _modes.grad_disabled:
        return None  # (under no_grad each of the composed path's tensors detaches its node: a DETACH per step)
    if x._view_of is not None:
        _follow_base(x)
    if w._view_of is not None:
        _follow_base(w)
    xu, wu = x.uop, w.uop
    dt = xu.dtype
    xs, ws = xu.shape, wu.shape
    dev = xu.device
    if (
        (wu.dtype is not dt and wu.dtype != dt)
        or dt.key == dtypes.bool.key
        or type(dev) is not str
        or wu.device != dev
        or type(sum(xs)) is not int
        or type(sum(ws)) is not int
        or xs[-1] == 0
    ):
        return None
    two_d_w = len(ws) > 1
    a_shape = xs[:-1] + (1,) + xs[-1:] if two_d_w else xs
    a = _shaped(_RESHAPE, dt, (xu,), a_shape, a_shape, dev) if a_shape != xs else xu
    b_shape = ws[:-2] + ((1,) if len(xs) > 1 else ()) + ws[-2:]
    b = _shaped(_RESHAPE, dt, (wu,), b_shape, b_shape, dev) if b_shape != ws else wu
    if two_d_w:  # w's last two dimensions swapped
        n = len(b_shape)
        b_shape = b_shape[:-2] + (b_shape[-1], b_shape[-2])
        b = _shaped(Ops.PERMUTE, dt, (b,), (*range(n - 2), n - 1, n - 2), b_shape, dev)
    half = dt in HALF_FLOATS
    acc = dtypes.float32 if half else dt
    if half:  # (as _product_sum: the products exact in float32, accumulated there)
        a = _shaped(Ops.CAST, acc, (a,), None, a_shape, dev)
        b = _shaped(Ops.CAST, acc, (b,), None, b_shape, dev)
    shape = _broadcast_shape(a_shape, b_shape)
    a, b = _broadcast_node(a, a_shape, shape, dev), _broadcast_node(b, b_shape, shape, dev)
    out = _shaped(Ops.MUL, acc, (a, b), None, shape, dev)
    out = _shaped(Ops.REDUCE_AXIS, acc, (out,), (Ops.ADD, (len(shape) - 1,)), shape[:-1] + (1,), dev)
    out = _shaped(_RESHAPE, acc, (out,), shape[:-1], shape[:-1], dev)
    return _shaped(Ops.CAST, dt, (out,), None, shape[:-1], dev) if half else out


def _windows(
    spatial: Sequence[int], kernel: tuple[int, ...], stride: int | Sequence[int], dilation: int | Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], list[int]]:
    """(strides, dilations, windows per dim) of a window of `kernel` sliding over `spatial` (padded) pixels; an
    ArgumentError, in the user's terms, for strides, dilations or a kernel that make no window."""
    nk = len(kernel)
    s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
    if len(s_) != nk or len(d_) != nk:
        raise ArgumentError(f"kernel {kernel}, stride {s_} and dilation {d_} need one entry per spatial dimension")
    if any(k < 1 for k in kernel) or any(s < 1 for s in s_) or any(d < 1 for d in d_):
        raise ArgumentError(f"kernel {kernel}, stride {s_} and dilation {d_} must be positive")
    if any(d * (k - 1) + 1 > i for k, d, i in zip(kernel, d_, spatial)):
        raise ArgumentError(f"kernel {kernel} with dilation {d_} is larger than the (padded) input {tuple(spatial)}")
    return s_, d_, [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(spatial, d_, kernel, s_)]


def _phase_conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    groups: int,
    stride: tuple[int, ...],
    pads: Sequence[tuple[int, int]],
) -> Tensor:
    """A strided convolution as a stride-1 one over the input's phases (space to depth): with stride s, output o
    reads x[s*o + k] for taps k = s*j + r, which is phase r of x (x[s*m + r]) at m = o + j. The phases become channels
    (C*s^d of them, each a (H/s, W/s) image) and the kernel's taps are regrouped alike (zero where s*j + r passes the
    kernel's end). Its input gradient is then a stride-1 transposed conv and its weight gradient a dense one: taken
    through the strided windows, the input gradient spread the output's gradient over a zero-stuffed image read
    through masks, and the weight gradient read the input at a stride of s pixels (an s=2 ResNet stage on 32^2 CIFAR
    images, one core: those kernels were ~70% of a training step, at 1-5 GFLOPS). Without gradients too: the strided
    windows' loads were single lanes (one core, 7x7 s=2 stem on 224^2 batch 8: 187 -> 15 ms; 3x3 s=2 16 -> 32 on
    32^2 batch 32: 5.7 -> 1.8), and the stride-1 conv over the phases takes the blocked path where it has one. The
    price: 3x3 taps at s=2 become 4 phases of 2x2, 16/9 the multiplies, all of them on whole vectors."""
    (bs, cin_), (cout, cin), kernel = x.shape[:2], weight.shape[:2], weight.shape[2:]
    nk, taps = len(kernel), [ceildiv(k, s) for k, s in zip(kernel, stride)]
    used = [min(s, k) for s, k in zip(stride, kernel)]  # phases r >= k meet no tap (a 1x1 kernel reads phase 0 only)
    phases = prod(used)
    padded = [i + lo + hi for i, (lo, hi) in zip(x.shape[2:], pads)]
    *_, out = _windows(padded, kernel, stride, 1)
    # the input rows the windows reach, as whole phases: s*(out + taps - 1) per dim (cut or zero-filled at the end)
    need = [s * (o + t - 1) for s, o, t in zip(stride, out, taps)]
    xp = x._spatial_pad([(lo, n - i - lo) for i, (lo, _), n in zip(x.shape[2:], pads, need)])
    phases_first = (0, 1, *[3 + 2 * i for i in range(nk)], *[2 + 2 * i for i in range(nk)])  # (.., r, .., m, ..)
    xp = _by_phase(xp, [n // s for n, s in zip(need, stride)], stride).permute(phases_first)
    # stored: read through the phase view, the conv's loads were single lanes behind masks (the padding and the
    # phases' index arithmetic); a copy of the input is one pass over it, each pass of the conv reads it 9x or more.
    # Copied with the phases as axes of their own, then merged into the channels: merged first, the copy's kernel was
    # one flat axis with a division per lane (32x16x32^2, s=2: 1070 -> 300 us)
    used_phases = (None, None, *[(0, u) for u in used], *[None] * nk)
    xp = xp.shrink(used_phases).contiguous()
    xp = xp.reshape(bs, cin_ * phases, *[n // s for n, s in zip(need, stride)])
    wp = _kernel_by_phase(weight, taps, stride).permute(phases_first)
    wp = wp.shrink(used_phases)
    return xp.conv2d(wp.reshape(cout, cin * phases, *taps), bias, groups)


def _column_conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    groups: int,
    stride: tuple[int, ...],
    pads: Sequence[tuple[int, int]],
    training: bool,
) -> Tensor:
    """A strided convolution whose vectors run along output columns: the columns each tap kx of the last dim reads
    (s*o + kx) are copied as planes of their own (im2col of that dim only), (N, C, kx, *rows, o), so every load of the
    conv is contiguous; the other dims' strides only move a row's start, which costs a vector nothing. In training
    the rows are split into phases in that same copy (_phase_conv): through strided rows, the input's gradient
    spread the output's over every other row, 100x slower than over the phases."""
    (bs, cin_), (cout, cin), kernel = x.shape[:2], weight.shape[:2], weight.shape[2:]
    nk, k, s = len(kernel), kernel[-1], stride[-1]
    rows = training and any(r > 1 for r in stride[:-1])
    if s > 1:
        cols = x._spatial_pad(pads)._pool((k,), s)  # (N, C, *rows, o, kx)
        # (windows that do not overlap are a reshape, whose gradient is one too; a negative pad crops)
        if training and k > s and all(lo >= 0 and hi >= 0 for lo, hi in pads):
            rule = functools.partial(_column_grad, stride=s, width=x.shape[-1], pads=tuple(pads))
            _autograd.define_gradient(cols.uop, x.uop, rule)
        x = cols.permute(0, 1, nk + 2, *range(2, nk + 1), nk + 1)
        x = (x if rows else x.contiguous()).reshape(bs, cin_ * k, *x.shape[3:])
        weight = weight.permute(0, 1, nk + 1, *range(2, nk + 1)).reshape(cout, cin * k, *kernel[:-1], 1)
        pads = [(0, 0)] * nk
    if rows:
        return _phase_conv(x, weight, bias, groups, (*stride[:-1], 1), pads)
    return x._direct_conv(weight, bias, groups, (*stride[:-1], 1), 1, pads)


def _column_grad(g: Tensor, stride: int, width: int, pads: tuple[tuple[int, int], ...]) -> Tensor:
    """The input's gradient from that of its column planes g (N, C, *rows, o, kx) (padded by `pads`): column s*m + r
    collects tap r + s*j of plane column m - j, summed per phase r over shifted planes (whole vectors along m), then
    the phases interleaved; the window gradient's taps each interleaved zeros first, lane by lane."""
    o, k = g.shape[-2:]
    padded = width + sum(pads[-1])
    m = ceildiv(padded, stride)
    phases = []
    for r in range(stride):
        terms = [g[..., r + stride * j]._spatial_pad([(j, m - o - j)]) for j in range(ceildiv(k - r, stride))]
        phases.append(functools.reduce(operator.add, terms))
    dx = Tensor.stack(*phases, dim=-1).flatten(-2)[..., pads[-1][0] : pads[-1][0] + width]
    rows = [(lo, n - hi) for (lo, hi), n in zip(pads[:-1], g.shape[2:-2])]
    return dx.shrink([None, None, *rows, None])


def _by_phase(t: Tensor, counts: Sequence[int], stride: Sequence[int]) -> Tensor:
    """t's spatial dims (each count * s long, after two leading dims) split into (count, s) pairs: element s*m + r of
    a dim at (m, r)."""
    return t.reshape(*t.shape[:2], *[v for c, s in zip(counts, stride) for v in (c, s)])


def _kernel_by_phase(weight: Tensor, taps: Sequence[int], stride: Sequence[int]) -> Tensor:
    """A conv weight's taps k = s*j + r at (j, r), zero where s*j + r passes the kernel's end."""
    kernel = weight.shape[2:]
    return _by_phase(weight._spatial_pad([(0, s * t - k) for k, s, t in zip(kernel, stride, taps)]), taps, stride)


def _phase_conv_transpose(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    groups: int,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> Tensor:
    """A strided transposed convolution as one stride-1 conv that computes every output phase as channels, then
    depth to space: output i (+ padding) = s*q + r takes the taps k = r + s*j of input q - j, so phase r is a full
    convolution of x with the kernel's taps r, r+s, ... The zero-stuffed input spent s^d - 1 of every s^d multiplies
    on zeros and read them through masks (64 -> 32 channels, 4x4, s=2, 16^2 -> 32^2, batch 16, one core: 18.7 ms,
    torch 2.5)."""
    cin, kernel = x.shape[1], weight.shape[2:]
    nk, cout_g = len(kernel), weight.shape[1]
    taps = [ceildiv(k, s) for k, s in zip(kernel, stride)]
    phases = prod(stride)
    # weight (Cin, Cout/g, *k) -> (g, Cout/g, *phases, Cin/g, *taps), taps mirrored: [.., r, .., t] = w[r + s*(T-1-t)]
    w = _kernel_by_phase(weight, taps, stride).unflatten(0, (groups, cin // groups))
    w = w.flip(tuple(3 + 2 * i for i in range(nk)))
    w = w.permute(0, 2, *[4 + 2 * i for i in range(nk)], 1, *[3 + 2 * i for i in range(nk)])
    w = w.reshape(groups * cout_g * phases, cin // groups, *taps)
    full = [n + t - 1 for n, t in zip(x.shape[2:], taps)]
    if nk == 2 and not x._grad_flows(weight):
        z = _flat_full_conv(x, w, groups, taps)
    else:
        z = x.conv2d(w, None, groups, padding=[t - 1 for t in taps])  # (N, Cout*phases, *(L + T - 1))
    # depth to space: (N, g, Cout/g, *r, *q) -> (N, Cout, *(q, r)) -> output rows [p, p + out)
    out = [(n - 1) * s - 2 * p + k + op for n, s, p, k, op in zip(x.shape[2:], stride, padding, kernel, output_padding)]
    crop = tuple((p, q * s - o - p) for p, o, q, s in zip(padding, out, full, stride))
    y = _depth_to_space(z, stride, crop)
    if x._grad_flows(weight):
        # the output's gradient read as phases by both gradients' kernels was a load per lane (stride s apart): copied
        _autograd.define_gradient(y.uop, z.uop, functools.partial(_space_to_depth, stride=stride, crop=crop))
    return y if bias is None else y + bias.reshape(1, -1, *[1] * nk)


def _depth_to_space(z: Tensor, stride: Sequence[int], crop: Sequence[tuple[int, int]]) -> Tensor:
    """(N, C*phases, *q) as (N, C, *(q, r)), then `crop` (before, after) cut off each spatial dim."""
    (bs, c), full, nk = z.shape[:2], z.shape[2:], len(stride)
    z = z.reshape(bs, c // prod(stride), *stride, *full)
    z = z.permute(0, 1, *[v for i in range(nk) for v in (2 + nk + i, 2 + i)])
    z = z.reshape(bs, c // prod(stride), *[q * s for q, s in zip(full, stride)])
    return z._spatial_pad([(-lo, -hi) for lo, hi in crop])


def _space_to_depth(g: Tensor, stride: Sequence[int], crop: Sequence[tuple[int, int]]) -> Tensor:
    """_depth_to_space's gradient: g's phases as channels, stored (the cropped rows zero)."""
    (bs, c), nk = g.shape[:2], len(stride)
    g = g._spatial_pad(crop)
    g = g.reshape(bs, c, *[v for n, s in zip(g.shape[2:], stride) for v in (n // s, s)])
    g = g.permute(0, 1, *[3 + 2 * i for i in range(nk)], *[2 + 2 * i for i in range(nk)])
    return g.reshape(bs, c * prod(stride), *g.shape[2 + nk :]).contiguous()


def _flat_full_conv(x: Tensor, w: Tensor, groups: int, taps: Sequence[int]) -> Tensor:
    """The full 2D convolution (padding T-1, (N, Cout, *(L + T - 1))) of x with w (taps mirrored) over its pixels as
    one flat axis: each row of x padded with Tx-1 zeros to the output's width Wf, so the window of flat output p is
    xflat[p + Wf*a + b] (a tap left of the row's start wraps into the row above's zeros). The flat axis is rounded up to
    whole vectors; a full conv's rows of L + T - 1 (17 for 16 and 2 taps) had none: its vectors ran along the output
    channels, its pixels in overlapping tiles of 8 (24 computed for 17)."""
    bs, (cout, cin_g), (h, wd) = x.shape[0], w.shape[:2], x.shape[2:]
    (ty, tx), hf, wf = taps, h + taps[0] - 1, wd + taps[1] - 1
    flat = ceildiv(hf * wf, 16) * 16
    # rows: ty zero rows above (the first tap row of output row 0 and the wrap left of it), then enough below
    below = ceildiv(flat + wf * ty + tx, wf) - h - ty
    xf = x.pad([None, None, (ty, below), (0, tx - 1)]).contiguous().flatten(2)[:, :, wf - (tx - 1) :]
    win = xf._pool((ty,), 1, wf).permute(0, 1, 3, 2)._pool((tx,), 1, 1)[:, :, :, :flat]  # (N, C, ty, flat, tx)
    rcout = cout // groups
    win = win.reshape(bs, groups, cin_g, 1, ty, flat, tx).expand(bs, groups, cin_g, rcout, ty, flat, tx)
    win = win.permute(0, 1, 3, 5, 2, 4, 6)
    z = _product_sum(win, w.reshape(1, groups, rcout, 1, cin_g, ty, tx), [-1, -2, -3])
    return z.reshape(bs, cout, flat)[:, :, : hf * wf].reshape(bs, cout, hf, wf)


def _blocked_conv(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: int | Sequence[int],
    dilation: int | Sequence[int],
    pads: Sequence[tuple[int, int]],
    block: int,
) -> Tensor:
    """conv over copies in channel blocks of `block` (Renderer.conv_blocks): the zero-padded input as
    (n, cin/b, *spatial, b), the weight as (cout/b, cin/b, *kernel, b_in, b_out); each output is the sum over
    (cin/b, *kernel, b_in) of an input pixel's channel times a vector of b output channels.
    Where an output image is whole vectors of pixels the output is stored in blocks too, (n, cout/b, *out, b), and
    returned as an NCHW view of them: stored as NCHW, a register tile's lanes went to output rows whole images apart
    (a 32^2 image: 4 KB, one L1 set), each tile's stores missing L1. A consumer reads through the view (an elementwise
    op copies it back on vectors; a following conv's blocked copy reads the blocks in order). One core, 64 -> 64 3x3,
    NCHW -> blocks, ms: 32^2 batch 32 31.2 -> 27.4 (the conv kernel alone 76-79 -> 86-90 GFLOPS), with bias and relu
    after it 33.4 -> 29.7; 16^2 batch 32 7.1-7.5 -> 6.9-7.1, relu 7.3-7.6 both; 32 -> 64 on 28^2 batch 8 2.6 ->
    2.4-2.5, relu 2.5-2.6 both. Images of other sizes stay NCHW: their copy back has no vector (relu after 64 -> 64
    on 31^2 28.2 -> 31.7, 13^2 0.66 -> 0.70, 7^2 0.19 -> 0.21)."""
    (bs, cin), cout, kernel = x.shape[:2], weight.shape[0], weight.shape[2:]
    nk, cb, ob = len(kernel), cin // block, cout // block
    spatial = list(range(2, 2 + nk))
    xb = x.reshape(bs, cb, block, *x.shape[2:]).permute(0, 1, *[a + 1 for a in spatial], 2)
    if any(p != (0, 0) for p in pads):
        xb = xb.pad([None, None, *pads, None])
    xb = xb.contiguous()
    windows = xb.permute(0, 1, 2 + nk, *spatial)._pool(kernel, stride, dilation)  # (bs, cb, b_in, *out, *kernel)
    out = windows.shape[3 : 3 + nk]
    xs = windows.reshape(bs, 1, 1, cb, block, *out, *kernel)
    xs = xs.permute(0, 1, 2, *[5 + i for i in range(nk)], 3, *[5 + nk + i for i in range(nk)], 4)
    wp = weight.reshape(ob, block, cb, block, *kernel).permute(0, 2, *[4 + i for i in range(nk)], 3, 1).contiguous()
    ws = wp.permute(0, 3 + nk, 1, *[2 + i for i in range(nk)], 2 + nk)  # (cout/b, b_out, cb, *kernel, b_in)
    ws = ws.reshape(1, ob, block, *[1] * nk, cb, *kernel, block)
    reduced = [-1 - i for i in range(2 + nk)]
    if math.prod(out) % block:
        ret = _product_sum(xs, ws, reduced).reshape(bs, cout, *out)
        return ret if bias is None else ret + bias.reshape(1, cout, *[1] * nk)
    # (bs, cout/b, *out, b_out, ...): the sum's output in blocks
    blocked = [0, 1, *[3 + i for i in range(nk)], 2, *[3 + nk + i for i in range(2 + nk)]]
    ret = _product_sum(xs.permute(*blocked), ws.permute(*blocked), reduced)
    if bias is not None:
        ret = ret + bias.reshape(1, ob, *[1] * nk, block)
    return ret.contiguous().permute(0, 1, 2 + nk, *spatial).reshape(bs, cout, *out)


def _product_sum(a: Tensor, b: Tensor, axis: int | list[int]) -> Tensor:
    """sum(a * b) over `axis` for matmul and conv: 16-bit floats multiply in float32 (the products are exact) and
    accumulate there, as torch's matmul and convolution do and as a tensor core does (an elementwise a * b in
    float16 rounds each product to float16 first, as torch's does)."""
    if a.dtype in (dtypes.float16, dtypes.bfloat16) and b.dtype == a.dtype:
        return (a.cast(dtypes.float32) * b.cast(dtypes.float32)).sum(axis).cast(a.dtype)
    return (a * b).sum(axis)


# id -> (weak reference, its nodes before each change) of the tensors of their own memory that an in-place shape op
# changed: a view taken at one of those nodes cannot follow the tensor (see _reshape_in_place)
_reshaped_in_place: dict[int, tuple[weakref.ref, set[UOp]]] = {}


def _follow_base(t: Tensor) -> Tensor:
    """A view whose base got a write since the view was taken (a pending assign: `tmp = t[0]; t[0] = t[1]`, or a
    lazy base replaced by the value written: `x = t.clone(); row = x[1]; x += 1`) reads through that write from now
    on, as torch's views share memory: its node is rebuilt over the base's new node. A tensor computed from the view
    before the write keeps the old values (torch computed it then). A base since stored (_stored_from) or given a copy
    of its own (_own_memory) is followed too: the old node may read memory another tensor owns and writes.
    Tensor.replace is no write: views keep the old value, as tinygrad's."""
    base, at = t._view_of  # type: ignore[misc]
    if base.uop is at:
        return t
    # the view was taken before a shape change when its node is one the change replaced or is below one (a write
    # between the two: `v = x[0]; x.mul_(2); x.unsqueeze_(0)` read stale or twice-scaled values)
    if (
        (entry := _reshaped_in_place.get(id(base))) is not None
        and entry[0]() is base
        and (at in entry[1] or any(at in old.toposort for old in entry[1]))
    ):
        raise ArgumentError(
            f"this view was taken of a tensor of shape {at.shape} before an in-place shape change (squeeze_, t_, "
            f"resize_, ...) made it {base.shape}: take the view again"
        )
    now = base.uop
    if (
        now.op is not Ops.ASSIGN
        and not _rewritten(now, at)
        and at not in _lazy_overwritten
        and not _stored_from(now, at)
        and not (now.op is Ops.CONTIGUOUS and now.src[0] is at)  # given its own copy
        and not _stood_for_then_overwritten(at)
    ):
        return t
    try:
        chain = _view_chain(t.uop, at)
    except NotImplementedError:
        return t
    node = base.uop
    for u in chain:
        node = UOp(u.op, u.dtype, (node,), u.arg)
    t.uop, t._view_of = node, (base, base.uop)
    return t


# the nodes lazy tensors had before an assign replaced them (nothing was stored yet). Hash-consing may share such a node
# with another tensor; a view of that one then follows its base too once the base's node changes, which reads the
# same values (a realize) or a write, as it should.
_lazy_overwritten: weakref.WeakSet[UOp] = weakref.WeakSet()


def _stood_for_then_overwritten(at: UOp) -> bool:
    """Whether the base was realized since the view was taken (it stood for `at`'s stored node) and was then replaced
    lazily by a write it could not do in place (its node a permuted view of its memory: `v = A.T; v += 10;
    A.realize(); A += 10` left v showing A before the second write)."""
    stored = _stored_as(at, {})
    return stored is not None and stored in _lazy_overwritten


def _rewritten(now: UOp, at: UOp) -> bool:
    """Whether a base whose node was `at` when a view was taken, a write pending into its memory, now is that memory
    after the write ran (the view must read it, not run the old pending write)."""
    # (or `at` was the memory itself, since written: a node over the old buffer node may have a value stored that
    # held the old contents, `L.realize(); row = L[1:]; row.numpy(); L += 1`)
    old = at.src[0].base if at.op is Ops.ASSIGN else at.base
    return now.base.op is Ops.BUFFER and old.op is Ops.BUFFER and now.base.arg.memory is old.arg.memory


def _stored_from(now: UOp, at: UOp) -> bool:
    """Whether a base whose node was the lazy `at` when a view was taken was realized since into the memory it now
    shows (its own copy if another tensor held that value: CONTIGUOUS(at)). The view follows: reading through `at`
    it read that memory only until a write into it (the stored value is then forgotten and `at` computed anew)."""
    b = now.base
    if b.op is not Ops.BUFFER:
        return False
    notes = b.arg.memory.__dict__
    if (ref := notes.get(_STORED_FROM)) is not None and (f := ref()) is not None:
        if f is at or (f.op is Ops.CONTIGUOUS and f.src[0] is at):
            return True
    return (ref := notes.get(_COPIED_FROM)) is not None and ref() is at


def _apart_from(v: Tensor, t: Tensor) -> Tensor:
    """v computed into memory of its own first where it reads t's memory at other positions (`t[1:] = t[:-1]` reads
    the old values, as torch's): the copy is of the written part only, where assign would copy the whole value it
    writes (the part scattered into the base), and the write then stores the part only (kernelize: _written_box)."""
    u = t.uop
    if u.op is not Ops.ASSIGN and not t._is_stored():
        return v  # a lazy tensor becomes the value written (assign): no memory is written in place
    shifted = _reads_shifted(v.uop, u) or _reads_shifted(v.uop, u.base)
    if shifted or u.op is Ops.ASSIGN and _reads_shifted(v.uop, u.src[0].base):
        # (a copy even of a block cut as a buffer of its own, t[:-1]: contiguous() would return that block)
        return _result(UOp(Ops.CONTIGUOUS, v.dtype, (v.uop,)))
    return v


def _view_chain(u: UOp, at: UOp) -> list[UOp]:
    """The movement ops (and detaches, bitcasts) that make view node u from its base's node `at`, base first."""
    chain, done, start = [], _realized.get(at), u
    while u is not at and u is not done:
        if u.op is Ops.BUFFER and (origin := _block_origin(u)) is not None:
            u = origin  # a block cut as a buffer of its own (_block_as_buffer): the view it stands for leads on
            continue
        if u.op not in GroupOp.Movement and u.op not in (Ops.DETACH, Ops.BITCAST):
            if done is None and at.op in GroupOp.Movement and (done := _stored_as(at, {})) is not None:
                # `at` reshapes a computed value (a matmul's result) stored since: the view was rebuilt over it
                chain, u = [], start
                continue
            if done is None and u.op is Ops.BUFFER and _stored_from(u, at):
                # the view was stored over the memory `at` was stored in, and `at` is no longer known as that
                # memory's value (a write into it forgot it): the view leads to `at` through that memory, seen in
                # at's shape (`v = L.view(-1); v.realize(); L += 10; L.realize(); v += 1`)
                # (any reshapes of the whole buffer to at's shape are that value: the view's own, or a new one)
                done = u if u.shape == at.shape else UOp(Ops.RESHAPE, u.dtype, (u,), at.shape)
                for n in reversed(chain):
                    if n.op is not Ops.RESHAPE:
                        break
                    if n.shape == at.shape:
                        done = n
                        break
                chain, u = [], start
                continue
            raise NotImplementedError("this view no longer leads to the memory of the tensor it was taken from")
        chain.append(u)
        u = u.src[0]
    return chain[::-1]


def _refuse_overlapping_write(hit: Tensor, chain: list[UOp]) -> None:
    """torch's error for a write of several elements of an expanded view into one memory location (c = t.expand(2, 2);
    c[0] = ...): the written positions are counted per element of the base (a small kernel, only for expanded views).
    Summed, the copies would land as their total."""
    if any(u.op is Ops.BITCAST for u in chain):
        return
    counts: Tensor | None = hit.cast(dtypes.int32)
    for u in reversed(chain):
        counts = _unview(u, counts)
    if counts is not None and counts.max().item() > 1:
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a single memory location "
            "(an expanded view); clone() it before writing"
        )


def _unview(u: UOp, t: Tensor | None) -> Tensor | None:
    """Undo view u on t (shaped like u): t's values placed where u reads them from u's source; what u does not read
    is 0 / False. None (everywhere) stays None where u reads all of its source exactly once."""
    src = u.src[0].shape
    if u.op is Ops.DETACH:
        return t if t is None or t.dtype == dtypes.bool else t.detach()
    if u.op is Ops.BITCAST:  # values written in the view's dtype are the source's bits; a bool mask stays as it is
        return t if t is None or t.dtype != u.dtype else t.bitcast(u.src[0].dtype)
    if u.op is Ops.EXPAND and u.shape != src:
        if t is None:
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a single memory "
                "location (an expanded view); clone() it before writing"
            )
        # t is zero / False where nothing is written; two writes to one element are undefined (torch refuses them)
        axes = tuple(i for i, (a, b) in enumerate(zip(src, u.shape)) if a != b)
        return t.any(axes, keepdim=True) if t.dtype == dtypes.bool else t.sum(axes, keepdim=True, dtype=t.dtype)
    if u.op in (Ops.RESHAPE, Ops.EXPAND):
        return None if t is None else t.reshape(src)
    if u.op is Ops.PERMUTE:
        return None if t is None else t.permute(argsort(list(u.arg)))
    if u.op is Ops.FLIP:
        return None if t is None else t.flip([i for i, f in enumerate(u.arg) if f])
    if t is None:
        t = Tensor.full(u.shape, True, device=u.device)
    if u.op is Ops.SHRINK:
        return t.pad([(lo, s - hi) for (lo, hi), s in zip(u.arg, src)])
    assert u.op is Ops.PAD, f"a view is made of movement ops, not {u.op}"
    return t.shrink([(lo, lo + s) for (lo, _), s in zip(u.arg, src)])


def _setitem_parts(t: Tensor, index: Any, v: Tensor) -> tuple[Tensor | None, Tensor]:
    """Where t[index] = v writes (a bool tensor shaped like t; None: everywhere) and the values it writes there."""
    if (
        isinstance(index, Tensor)
        and index.dtype == dtypes.bool
        and v.numel() == 1
        and index.ndim <= t.ndim
        and index.shape == t.shape[: index.ndim]
    ):
        # x[mask] = scalar needs no nonzero: a where over the whole tensor
        return index.reshape(index.shape + (1,) * (t.ndim - index.ndim)), v.reshape(())._broadcast_to(t.shape)
    basic, adv = _split_index(t, index)
    view = _basic_getitem(t, basic)
    target = _advanced_getitem(view, adv).shape if adv else view.shape
    while v.ndim > len(target) and v.shape[0] == 1:
        v = v.reshape(v.shape[1:])  # torch drops leading size-1 dims of the value
    try:
        v = v._broadcast_to(target)
    except ValueError:
        raise ArgumentError(
            f"cannot assign a value of shape {v.shape} to an indexed region of shape {target}"
        ) from None
    if adv:
        vals, hit = _advanced_scatter(view.shape, adv, v)
    else:
        if view.uop is t.uop:
            return None, v  # the whole tensor
        vals, hit = v, Tensor.full(view.shape, True, device=t.device)
    return _basic_scatter(t, basic, hit), _basic_scatter(t, basic, vals)
