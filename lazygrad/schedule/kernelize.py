"""The scheduler: which nodes of a tensor graph are written to memory, and the kernel AST that computes each.

Everything that is not stored is inlined into the kernels that use it. First [matmul panels] (schedule/panels.py)
rewrites each matmul whose right-hand side the device wants read in panels into a product over a copy in panels.
The decisions, in order (the named pass that makes each in brackets; SCHEDULE_PASSES runs them, uop/passes.py
checks their declared order):
  1-4 [store decisions], 5 [cap kernel depth], 6 [fit buffer limits], 7 [merge kernels]:
  1. outputs the user asked for, CONTIGUOUS and COPY nodes are stored; beside an in-place write (ASSIGN), a value
     computed from the memory's old contents that a kernel after the write reads is stored before it, and old
     contents read as they are (a node realized into that memory) are copied before it (1b); a
     CONTIGUOUS value only an in-place write reads is computed straight into the written memory when that kernel
     reads the memory at no other position (1c);
  2. a reduce is stored unless its only use is an elementwise chain of the same shape ending in a stored node
     (then it is that kernel's reduce, and the chain its epilogue);
  3. a node used by several kernels is stored only if that moves fewer bytes than recomputing it in each;
  4. an ALU subtree read through an expand by a kernel that reduces is stored (recomputing it per reduce step
     multiplies its arithmetic by the expand factor);
  5. a kernel whose longest chain of ALU ops would pass KERNEL_OPS has its deepest inlined inputs stored;
  6. a kernel reading more buffers than its device takes as arguments has inlined subtrees stored until it fits;
  7. kernels with no dependency between them and the same iteration space merge into one multi-output kernel,
     except register-tiled products (matmuls, convs: `_register_tiled`), whose merged tiles overran the registers.
Between the decisions and the merge, [allocate buffers] gives each stored node its buffer and [build kernels] its
kernel AST, one KERNEL_OP rule per op (an in-place write of where(padded True, new, the memory itself), a slice's
write, stores the box only: _KernelBuilder._written_box). Movement ops never make kernels: they compose into the
ShapeTracker of each load.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import weakref
from dataclasses import dataclass, field
from sys import getrefcount as _getrefcount
from typing import Any, Callable, Iterable, Iterator, NamedTuple
from weakref import getweakrefcount as _getweakrefcount

from lazygrad.device import Buffer, Device, buffers_made
from lazygrad.dtype import dtypes
from lazygrad.helpers import DEBUG, FRAME_REFS_CHECKED, KERNEL_OPS, STEP_LAYOUTS, library_lock, prod
from lazygrad.schedule.panels import over_panels, panel_plans
from lazygrad.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, arg_uops, ssimplify, substitute, sym_unbind
from lazygrad.uop.passes import PassRun, step
from lazygrad.uop.program import (
    FILLER,
    SCALAR_BROADCAST,
    Replay,
    Unbuilt,
    built,
    keep_replays,
    scalar_broadcast,
    take_replays,
)
from lazygrad.uop.spec import verify_kernel
from lazygrad.uop.view import ShapeTracker, View, full_shape
from lazygrad.viz import profile, record

Chain = tuple[tuple[Ops, Any], ...]  # movement ops applied to a node's shape, innermost first
# in a chain: the pads outside it are already applied as a WHERE by a node above (see _KernelBuilder._guards)
GUARD: tuple[Any, Any] = (None, None)


def _unguarded_pad(chain: Chain) -> bool:
    """Whether a pad in the chain still has to be applied below (no node above guards it)."""
    for op, _ in chain:
        if op is None:
            return False
        if op is Ops.PAD:
            return True
    return False


def _symbolic(x: Any) -> bool:
    """Whether a size, a shape or a movement op's arg mentions a symbolic int (a UOp)."""
    if isinstance(x, tuple):
        return any(_symbolic(y) for y in x)
    return isinstance(x, UOp)


def alloc_size(shape: tuple[Any, ...]) -> int:
    """Elements to allocate for a shape: a symbolic one gets its largest size over its variables' ranges (one buffer
    serves every bound value; the elements at the bound value come first)."""
    n = ssimplify(prod(shape))
    return n.vmax if isinstance(n, UOp) else n


_SOURCES = (Ops.DEVICE, Ops.CONST, Ops.IOTA, Ops.BIND)  # computed from nothing: never stored, always inlined
# buffers one kernel reads, whatever its device takes: gcc's time grows as the cube of the guarded loads in one loop
# (a cat of 150 tensors as one kernel: 0.55 s to compile, of 400: 13 s, of 1000: 350 s)
MAX_BUFFERS = 32
# a node read through more movement chains than this in its kernel, whose expression is built that many times to more
# than VIEW_BUILDS nodes, is stored (see _Planner._read_views); a cheap one (a cast of loaded bytes, read at 40
# offsets by a K-quant's scales) stays inlined
VIEWS_PER_NODE, VIEW_BUILDS = 16, 512


# not frozen (never changed once made all the same): a frozen dataclass sets each field through object.__setattr__, and
# a cached realize makes one item per kernel (0.69 -> 0.23 us an item)
@dataclass(eq=False, slots=True)
class ScheduleItem:
    ast: UOp  # SINK of STOREs (a kernel) or COPY
    bufs: tuple[Buffer, ...]  # outputs first, then inputs, in DEFINE_GLOBAL order
    metadata: tuple[str, ...] = ()

    # computed, not cached: the memory planner reads from reference counts that the kernel list is all that holds an
    # intermediate buffer (so no tuple of buffers may be cached), and functools.cached_property takes a lock on every
    # first access (Python 3.11), once per item of every realize
    @property
    def n_outputs(self) -> int:
        return len(self.ast.src) if self.ast.op is Ops.SINK else 1

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.bufs[: self.n_outputs]

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.bufs[self.n_outputs :]


class Schedule(list):
    """ScheduleItems in execution order. One instantiated from a cached template names that template: every instance
    of it runs the same kernels over buffers in the same places, which the engine works out once per template."""

    template: _Template | None = None  # (a class default: a copy made without __init__ names none)
    # an instance's buffers in the template's reference order (each item's are picked from it): the engine launches
    # from this list and counts who holds its buffers here, not item by item
    bufs: list[Buffer] | None = None
    # an instance whose items are not made yet (fill()): a realize's, which the engine's launch plan runs from the
    # template and the flat list alone (an MLP Adam step: 24 items made and dropped unread). Iterating, indexing or
    # len() see the items (made by the first two); a schedule handed to the caller (Tensor.schedule) is filled
    unfilled: bool = False

    def __init__(self, items: list[ScheduleItem], template: _Template | None = None):
        super().__init__(items)
        self.template = template

    def fill(self) -> Schedule:
        """The schedule with its items made (an unfilled instance's, picked from its flat list)."""
        if self.unfilled:
            self.unfilled = False
            self.extend(self.template.schedule_items(self.bufs))  # type: ignore[union-attr, arg-type]
        return self

    @property
    def kernels(self) -> int:
        """How many items the schedule has, made or not."""
        return len(self)

    def __len__(self) -> int:
        return len(self.template.pickers) if self.unfilled else list.__len__(self)  # type: ignore[union-attr]

    def __iter__(self) -> Iterator[ScheduleItem]:
        return list.__iter__(self.fill())

    def __getitem__(self, i: Any) -> Any:
        return list.__getitem__(self.fill(), i)


class BindingConflict(ValueError, RuntimeError):
    """One schedule met a variable bound to two values (a ValueError, and the RuntimeError tinygrad raises)."""


def _is_stored_leaf(u: UOp, realized: dict[UOp, UOp]) -> bool:
    return u.op is Ops.BUFFER or u in realized


_write_serials = itertools.count()
_WRITE_ORDER = "write_order"  # kept in an ASSIGN node's __dict__: when Tensor.assign made it


def ordered_write(node: UOp) -> UOp:
    """An ASSIGN the frontend just made, numbered: two pending writes into one memory land in the order made."""
    node.__dict__.setdefault(_WRITE_ORDER, next(_write_serials))
    return node


def write_order(node: UOp) -> int:
    """When an ASSIGN was made (ordered_write); -1 where unknown (one a graph replay rebuilt counts as oldest)."""
    return node.__dict__.get(_WRITE_ORDER, -1)


def _written_memory(assign: UOp) -> Buffer:
    """The memory an ASSIGN writes (its target buffer's owner: every alias of a buffer is the same memory)."""
    return assign.src[0].base.arg.memory


def written_part(assign: UOp) -> Chain | None:
    """The movement ops from an ASSIGN's buffer to the part of it the write covers (innermost first), or None where
    it covers the whole buffer: a write into a shrunk view (a KV cache's new row at a symbolic position) stores that
    part only."""
    ops, u = [], assign.src[0]
    while u.op in GroupOp.Movement:
        ops.append((u.op, u.arg))
        u = u.src[0]
    if all(op is Ops.RESHAPE for op, _ in ops):
        return None
    return tuple(reversed(ops))


def _written_view(assign: UOp, buf: Buffer) -> UOp:
    """What an ASSIGN node becomes once run: its target read from a fresh alias of the written memory (later graphs
    see the new value)."""
    if written_part(assign) is None:
        return UOp.buffer_view(buf.alias(), assign.shape)
    return assign.src[0].rebase(UOp.buffer_view(buf.alias(), (buf.size,)))


def _leaf_buffer(u: UOp, realized: dict[UOp, UOp]) -> Buffer | None:
    """The buffer a stored leaf (a buffer, or a node realized earlier) is read from; None for other sources."""
    if u.op is not Ops.BUFFER:
        u = realized[u].base if u in realized else u
    return u.arg if u.op is Ops.BUFFER else None


def _leaf_memory(u: UOp, realized: dict[UOp, UOp]) -> Buffer | None:
    """The memory a stored leaf (a buffer, or a node realized earlier) is read from; None for other sources."""
    buf = _leaf_buffer(u, realized)
    return None if buf is None else buf.memory


def _consumers(nodes: list[UOp]) -> dict[UOp, list[UOp]]:
    out: dict[UOp, list[UOp]] = {n: [] for n in nodes}
    for n in nodes:
        for s in n.src:
            if s in out:
                out[s].append(n)
    return out


class _Planner:
    def __init__(self, outs: list[UOp], realized: dict[UOp, UOp]):
        self.realized = realized
        self.outs = outs
        # the part of the graph that still needs computing: stop at buffers and already-realized nodes
        order: dict[UOp, None] = {}
        # the values of the realized nodes met, held while the schedule is made: an entry held weakly (a tensor's
        # gradient path, RealizedNodes.hold_weakly) whose tensor died mid-schedule (a collection freeing it) took the
        # node from the leaves, and a kernel then looked for sources the walk never reached (a KeyError)
        self.pinned: list[UOp] = []
        stack: list[tuple[UOp, bool]] = [(o, False) for o in reversed(outs)]
        while stack:
            node, expanded = stack.pop()
            if node in order:
                continue
            if not expanded and node.op is not Ops.BUFFER and (view := realized.get(node)) is not None:
                self.pinned.append(view)
                order[node] = None
                continue
            if expanded or node.op is Ops.BUFFER or node.op in _SOURCES:
                order[node] = None
                continue
            stack.append((node, True))
            stack.extend((s, False) for s in reversed(node.src) if s not in order)
        self.order = list(order)
        self.position = {n: i for i, n in enumerate(self.order)}
        self.consumers = _consumers(self.order)
        self.stored: set[UOp] = set()
        self.copy_first: set[UOp] = set()  # stored leaves read both before and after a write into their memory
        self.values_first = False  # every in-place write's CONTIGUOUS value stays stored (no decision 1c)

    def leaf(self, u: UOp) -> bool:
        return _is_stored_leaf(u, self.realized) or u.op in _SOURCES

    def decide(self) -> None:
        outputs = {o.base for o in self.outs}  # stored whatever fuses around them: a tensor asked for holds its value
        for o in self.outs:
            if not self.leaf(o.base):
                self.stored.add(o.base)
        for n in self.order:
            if n.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.REDUCE_AXIS, Ops.ASSIGN) and not self.leaf(n):
                self.stored.add(n)
        expanded_by_reduce = self._expanded_by_reduce()
        # reverse topological order: every consumer's kernel membership is final before its sources are decided
        roots: dict[UOp, set[UOp]] = {}
        views: dict[UOp, set[tuple]] = {}
        for n in reversed(self.order):
            if self.leaf(n) or n.op in GroupOp.Movement:
                continue
            reach: set[UOp] = set()
            for c in self._base_consumers(n):
                reach |= {c} if c in self.stored else roots.get(c, set())
            roots[n] = reach
            if n.op is Ops.REDUCE_AXIS and n not in outputs and self._fusable_reduce(n):
                self.stored.discard(n)
                roots[n] = reach
            if n in self.stored:
                continue
            views[n] = self._read_views(n, views)
            if len(reach) > 1 and self._store_is_cheaper(n, reach) or n in expanded_by_reduce:
                self.stored.add(n)
            elif len(views[n]) > VIEWS_PER_NODE and len(views[n]) * self._inlined_ops(n) > VIEW_BUILDS:
                self.stored.add(n)  # read through many views: inlined, its expression would be built for each
        if any(n.op is Ops.ASSIGN for n in self.stored):
            self.write_in_place(outputs)
            self.store_old_reads()

    def _read_views(self, n: UOp, views: dict[UOp, set[tuple]]) -> set[tuple]:
        """The movement chains through which n's kernel builds n (the builder's memo keys: one copy of n's expression
        per chain), up to VIEWS_PER_NODE + 1 of them. A node read shifted by several consumers that are themselves
        read shifted (a recursion over time steps: alpha[t] from alpha[t-1] and its shifts) is built once per path,
        which grows exponentially with the depth of the recursion unless some node on it is stored."""
        out: set[tuple] = set()
        stack: list[tuple[UOp, tuple]] = [(c, ()) for c in self.consumers[n]]
        while stack and len(out) <= VIEWS_PER_NODE:
            c, path = stack.pop()
            if c.op in GroupOp.Movement:
                path = path + ((c.op, c.arg),)
                stack.extend((m, path) for m in self.consumers[c])
                continue
            # a stored consumer is a kernel's root, a fused reduce builds its input afresh: both under no chain
            above = views.get(c) if c not in self.stored and c.op is not Ops.REDUCE_AXIS else None
            out.update(path + chain for chain in above or ((),))
        return out

    def _inlined_ops(self, n: UOp) -> int:
        """The nodes n's kernel computes for it (its inlined expression, without the loads)."""
        return sum(1 for x in self._inlined(n) if x is n or not (self.leaf(x) or x in self.stored))

    def write_in_place(self, outputs: set[UOp]) -> None:
        """Decision 1c: an in-place write of a CONTIGUOUS value that nothing else reads computes the value straight
        into the written memory, unless that kernel would read the memory at other positions than the one it writes
        (through a movement op other than a reshape, or inside a fused reduce). The frontend makes the value
        contiguous wherever the graph of an assign reads the memory at other positions (an SGD step's gradient reads
        the weight transposed), not knowing that the kernel that reads it is another (the forward product): an
        extra buffer, its write and a copy per update."""
        if self.values_first:
            return
        for n in self.order:
            if n.op is not Ops.ASSIGN or n not in self.stored or (c := n.src[1]).op is not Ops.CONTIGUOUS:
                continue
            if c not in self.stored or c in outputs or self.consumers[c] != [n]:
                continue
            if not self._reads_shifted(c.src[0], _written_memory(n)):
                self.stored.discard(c)

    def _reads_shifted(self, root: UOp, mem: Buffer) -> bool:
        """Whether the kernel expression `root` (inlined up to stored nodes) reads `mem` at other positions than the
        one it computes."""
        stack, seen = [(root, False)], set()
        while stack:
            x, shifted = stack.pop()
            if (x, shifted) in seen:
                continue
            seen.add((x, shifted))
            if self.leaf(x) or x in self.stored:
                # a pending write into the same memory (an earlier ASSIGN) is read from that memory too; a buffer
                # showing part of the memory (a block cut from a tensor, Buffer.view) reads it at other positions
                if x.op is Ops.ASSIGN:
                    at, part = _written_memory(x), False
                else:
                    buf = _leaf_buffer(x, self.realized)
                    at, part = (buf.memory, buf.part) if buf is not None else (None, False)
                if (shifted or part) and at is mem:
                    return True
                continue
            moved = x.op in GroupOp.Movement and x.op is not Ops.RESHAPE or x.op is Ops.REDUCE_AXIS
            stack.extend((s, shifted or moved) for s in x.src)
        return False

    def store_old_reads(self) -> None:
        """Decision 1b: a kernel that runs after an in-place write (it reads the ASSIGN's result) never reads an
        older version of the written memory inline: its contents before the write (`y = x * 2`, taken before
        `x.assign(x + 1)` and used in `y + x`), or the result of an earlier write that this one overwrites. The value
        computed from the older version is stored by a kernel of its own, which runs before the write."""
        writes = [n for n in self.order if n.op is Ops.ASSIGN and not self.leaf(n)]
        # per node, the same for every written memory: (the memory a stored leaf is read from, None) for a leaf, (None,
        # the sources a kernel inlining it reads) for the rest; and the stored leaves of each memory
        info: dict[UOp, tuple[Any, tuple[UOp, ...] | None]] = {}
        leaves_of: dict[Any, list[UOp]] = {}
        for n in self.order if writes else ():
            if self.leaf(n):
                info[n] = (memory := _leaf_memory(n, self.realized), None)
                leaves_of.setdefault(memory, []).append(n)
            else:  # an ASSIGN's target is where it writes
                info[n] = (None, n.src[1:] if n.op is Ops.ASSIGN else n.src)
        for mem in {_written_memory(n) for n in writes}:
            # versions of mem: 0 before this schedule's writes, then one per write into it, in the order made
            mine = sorted((n for n in writes if _written_memory(n) is mem), key=write_order)
            version = {n: i + 1 for i, n in enumerate(mine)}
            # only a node downstream of a read or a write of mem depends on a version of it: the others keep the
            # defaults below (after 0, reads None) and have nothing to store. The digits CNN's Adam step writes 24
            # memories, 16 of them (its moments) read by a few nodes of ~1300: a walk of every node per memory was
            # 40-80 ms of its cold step
            relevant: set[UOp] = set()
            stack = [*leaves_of.get(mem, ()), *mine]
            while stack:
                if (n := stack.pop()) not in relevant:
                    relevant.add(n)
                    stack.extend(self.consumers[n])
            after: dict[UOp, int] = {}  # the latest version the node's value depends on
            reads: dict[UOp, int | None] = {}  # the oldest version a kernel inlining the node reads (None: none)
            for n in sorted(relevant, key=self.position.__getitem__):
                leaf_memory, srcs = info[n]
                if srcs is None:
                    after[n], reads[n] = 0, 0 if leaf_memory is mem else None
                    continue
                latest = max([after.get(s, 0) for s in srcs])
                for s in srcs if latest else ():  # (no version to be older than: nothing to store)
                    if (v := reads.get(s)) is not None and v < latest and after.get(s, 0) < latest:
                        # a stored leaf holds the old contents themselves: they are copied before the write
                        # ([store decisions] rebuilds the graph over the copy and decides again)
                        (self.copy_first if self.leaf(s.base) else self.stored).add(s.base)
                        reads[s] = reads[s.base] = None
                own = version.get(n, 0)
                after[n] = max(latest, own)
                if own:  # what reads this write's result reads mem at its version
                    reads[n] = own
                elif n in self.stored:
                    reads[n] = None
                else:
                    inner = [v for s in srcs if (v := reads.get(s)) is not None]
                    reads[n] = min(inner) if inner else None

    def cap_kernel_size(self, cap: int) -> None:
        """Keep the longest chain of ALU ops inside any kernel under `cap`: sources first, a node that would go over
        has its deepest inlined input stored instead. Without a cap a 20k-op chain becomes one C expression nested 20k
        deep, which crashes the C compiler. Depth, not a count of ops, is what is capped: a count of the expression as
        a tree grows with every path a shared value is read through (a gradient sums N terms that each read the same
        forward chain: N^2 as a tree, N distinct ops), and counting distinct ops per kernel costs a walk per node."""
        depth: dict[UOp, int] = {}  # longest ALU chain ending at a node, inlined into every kernel that reads it

        def inlined_depth(x: UOp) -> int:
            b = x.base  # a view is read where it is used: its source's ops come along
            return 0 if self.leaf(x) or self.leaf(b) or b in self.stored else depth[b]

        for n in self.order:
            if self.leaf(n) or n.op in GroupOp.Movement:
                continue
            own = int(n.op in GroupOp.ALU)
            while own + max((inlined_depth(s) for s in n.src), default=0) > cap:
                self.stored.add(max(n.src, key=inlined_depth).base)
            depth[n] = own + max((inlined_depth(s) for s in n.src), default=0)

    def fit_buffer_limits(self, limit_of: Callable[[str], int | None]) -> None:
        """Store inlined subtrees of any kernel that would read more buffers than its device accepts (a cat of 40
        tensors on Metal, whose kernels take 31): the subtree reading the most buffers that still fits goes first."""
        pending = [n for n in self.order if n in self.stored]
        while pending:
            n = pending.pop()
            limit = limit_of(n.device)
            if limit is None:
                continue
            while len(reads := self._reads(n)) + 1 > limit:  # +1: the kernel's output
                inner = [x for x in self._inlined(n) if x is not n and x not in reads and x.op in GroupOp.Elementwise]
                reads_of, has_reduce = self._subtrees(n)
                # a subtree that inlines an unstored reduce stays whole: the reduce belongs to n's kernel
                fits = [(len(reads_of[x]), x) for x in inner if len(reads_of[x]) < limit and not has_reduce[x]]
                if not fits:
                    raise RuntimeError(
                        f"a kernel on {n.device} reads {len(reads)} buffers, over the device's limit "
                        f"of {limit}, and cannot be split"
                    )
                _, best = max(fits, key=lambda f: f[0])
                self.stored.add(best)
                pending.append(best)

    def _reads(self, n: UOp, inlined: list[UOp] | None = None) -> set[UOp]:
        """The stored leaves n's kernel loads (`inlined`: self._inlined(n), when the caller has it)."""
        inner = self._inlined(n) if inlined is None else inlined
        return {x for x in inner if x is not n and (x.op is Ops.BUFFER or x in self.realized or x in self.stored)}

    def _subtrees(self, n: UOp) -> tuple[dict[UOp, set[UOp]], dict[UOp, bool]]:
        """For every node x inlined into n's kernel: the stored leaves x's subtree reads, and whether it inlines an
        unstored reduce. Sources first in one pass: a walk per node is quadratic (a cat of 1000 tensors)."""
        reads: dict[UOp, set[UOp]] = {}
        has_reduce: dict[UOp, bool] = {}
        for x in sorted(self._inlined(n), key=self.position.__getitem__):
            if x is not n and (self.leaf(x) or x in self.stored):
                reads[x] = {x} if x.op is Ops.BUFFER or x in self.realized or x in self.stored else set()
                has_reduce[x] = False
                continue
            reads[x] = set().union(*(reads[s] for s in x.src if s in reads))
            has_reduce[x] = any(
                has_reduce.get(s, False) or s.op is Ops.REDUCE_AXIS and s in reads and not reads[s] >= {s}
                for s in x.src
            )
        return {x: r - {x} for x, r in reads.items()}, has_reduce

    def _expanded_by_reduce(self) -> set[UOp]:
        """ALU nodes a reduce reads through an expand: inlined, they would be recomputed once per expanded element."""
        out: set[UOp] = set()
        for r in self.order:
            if r.op is not Ops.REDUCE_AXIS:
                continue
            stack, seen = [(r.src[0], False)], set()
            while stack:
                x, through_expand = stack.pop()
                # a stored node is a load of this kernel (a reduce may still be fused: its inputs are its own)
                if (x, through_expand) in seen or self.leaf(x) or x.op is Ops.REDUCE_AXIS or x in self.stored:
                    continue
                seen.add((x, through_expand))
                if through_expand and x.op in GroupOp.ALU:
                    if not self._from_indices(x):  # (a function of the loop indices alone costs no more inlined)
                        out.add(x)
                    continue
                stack.extend((s, through_expand or x.op is Ops.EXPAND) for s in x.src)
        return out

    def _from_indices(self, x: UOp) -> bool:
        """Whether x is computed from constants and index ranges (IOTA) alone, reading no buffer."""
        stack, seen = [x], set()
        while stack:
            y = stack.pop()
            if y in seen or y.op in _SOURCES:
                continue
            seen.add(y)
            if self.leaf(y) or y.op is Ops.REDUCE_AXIS:
                return False
            stack.extend(y.src)
        return True

    def _base_consumers(self, n: UOp) -> list[UOp]:
        """Consumers of n seen through movement ops (a reshape of n is used where the reshape is used)."""
        out, stack = [], list(self.consumers[n])
        while stack:
            c = stack.pop()
            if c.op in GroupOp.Movement:
                stack.extend(self.consumers[c])
            else:
                out.append(c)
        return out

    def _fusable_reduce(self, r: UOp) -> bool:
        """True when every use of r is an elementwise epilogue (of r's size) that ends in one stored node."""
        roots: set[UOp] = set()
        stack, seen = list(self.consumers[r]), set()
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            # the epilogue may reshape (e.g. drop the kept size-1 axis); the kernel then runs in the reduce's shape.
            # It may end in a CONTIGUOUS, a stored copy of itself: `(a @ b).contiguous()` is one kernel, not two; a
            # DETACH is the value itself (relu's inner where reads its input detached)
            ok = c.op in GroupOp.Elementwise or c.op is Ops.RESHAPE or c.op is Ops.DETACH
            ok = ok or c.op is Ops.CONTIGUOUS and c in self.stored
            if not ok or c.size != r.size:
                return False
            # another reduce the epilogue reads, directly or through a reshape, must share this one's loop; so must one
            # fused deeper in an inlined source (a gradient sums several reduces, each behind its own multiply)
            if any(
                s.base.op is Ops.REDUCE_AXIS
                and (s.base.arg, s.base.src[0].shape) != (r.arg, r.src[0].shape)
                or self._inlined_reduce_differs(s, r)
                for s in c.src
            ):
                return False
            if c in self.stored:
                roots.add(c)
            else:
                stack.extend(self.consumers[c])
        return len(roots) == 1

    def _inlined_reduce_differs(self, x: UOp, r: UOp) -> bool:
        """Whether the expression x, inlined up to stored nodes and leaves, holds a reduce whose loop is not r's."""
        stack, seen = [x], set()
        while stack:
            y = stack.pop()
            if y in seen or y is r or self.leaf(y) or y in self.stored:
                continue  # a stored node is a load in this kernel (a reduce not decided yet counts as stored: when
                # it is decided, this one is seen from its side)
            seen.add(y)
            if y.op is Ops.REDUCE_AXIS:
                if (y.arg, y.src[0].shape) != (r.arg, r.src[0].shape):
                    return True
                continue  # a reduce of the same loop: its own inputs are its business
            stack.extend(y.src)
        return False

    def _store_is_cheaper(self, n: UOp, reach: set[UOp]) -> bool:
        """Storing n costs reading its inputs once, writing it, and reading it in each kernel that uses it; inlining
        costs each of those kernels reading n's inputs, except the ones it reads anyway (a relu's mask is
        recomputed for free where the relu's own input is loaded)."""
        inner = self._inlined(n)
        leaves = self._reads(n, inner)
        size = alloc_size(n.shape)  # a symbolic size costs as its largest
        # a leaf costs its own bytes, at most n's: a small input broadcast over n (a normalization's statistics, a
        # bias) is read once per kernel and then hits the cache. Counted at n's size, a batch norm's x - mean and
        # its products looked cheaper stored than recomputed in each reader (digits CNN step, batch 64: 13.15 MB
        # in 58 kernels that way, 10.52 MB in 50 this way)
        cost = {x: min(size, alloc_size(x.shape)) * x.dtype.itemsize for x in leaves}
        in_bytes = sum(cost.values())
        out_bytes = size * n.dtype.itemsize
        store = in_bytes + (len(reach) + 1) * out_bytes
        if len(inner) > 64:  # finding what a consumer reads anyway costs a walk of its kernel: only for small n
            return store < len(reach) * in_bytes
        inline = 0
        for root in reach:
            other = self._loads_avoiding(root, n)
            inline += sum(cost[x] for x in leaves if x not in other)
        return store < inline

    def _loads_avoiding(self, root: UOp, n: UOp) -> set[UOp]:
        """The stored leaves root's kernel loads on paths that do not go through n."""
        out: set[UOp] = set()
        seen: set[UOp] = set()
        stack = [root]
        while stack:
            x = stack.pop()
            if x in seen or x is n:
                continue
            seen.add(x)
            if x is not root and (self.leaf(x) or x in self.stored):
                out.add(x)
                continue
            stack.extend(x.src)
        return out

    def _inlined(self, n: UOp) -> list[UOp]:
        """Nodes computed inside n's kernel body, plus the stored leaves it reads."""
        seen: dict[UOp, None] = {}
        stack = [n]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen[x] = None
            if x is not n and (self.leaf(x) or x in self.stored):
                continue
            stack.extend(x.src)
        return list(seen)


class _KernelBuilder:
    """Builds the AST of one stored node: its inlined expression with every read as a LOAD through a view."""

    def __init__(
        self,
        root: UOp,
        stored: set[UOp],
        realized: dict[UOp, UOp],
        out_bufs: dict[UOp, Buffer],
        var_vals: dict[UOp, int],
    ):
        self.root, self.stored, self.realized, self.out_bufs = root, stored, realized, out_bufs
        self.var_vals = var_vals
        self.reads: set[UOp] = set()  # stored nodes and buffers this kernel loads (which value of a buffer it needs)
        self.bufs: list[Buffer] = [out_bufs[root]]
        self.memo: dict[tuple[UOp, Chain], UOp] = {}
        self.unsafe: dict[UOp, bool] = {}  # per node: whether a pad above it is applied as a WHERE (_guards)
        self.viz_steps: list[tuple] = []
        self.rules = record.translated(KERNEL_OP, self.viz_steps, in_codegen=False)  # logged for VIZ when it is on

    def global_for(self, buf: Buffer, ptr_dtype: Any) -> UOp:
        for i, b in enumerate(self.bufs):
            if b is buf:
                return UOp(Ops.DEFINE_GLOBAL, ptr_dtype, arg=i)
        self.bufs.append(buf)
        return UOp(Ops.DEFINE_GLOBAL, ptr_dtype, arg=len(self.bufs) - 1)

    def build(self, u: UOp, chain: Chain) -> UOp:
        """The kernel expression of u read through `chain`, built sources first (a loop, not recursion: a kernel may
        inline a long chain)."""
        stack = [(u, chain)]
        while stack:
            key = stack[-1]
            if key in self.memo:
                stack.pop()
                continue
            todo = [k for k in self._inputs(*key) if k not in self.memo]
            if todo:
                stack.extend(todo)
                continue
            self.memo[key] = self._build(*key)
            stack.pop()
        return self.memo[(u, chain)]

    def _inputs(self, u: UOp, chain: Chain) -> list[tuple[UOp, Chain]]:
        """The (node, chain) expressions _build(u, chain) is made of."""
        if u in self.realized:
            return [(self.realized[u], chain)]
        if u.op in GroupOp.Movement:
            return [(u.src[0], ((u.op, u.arg),) + chain)]
        if u.op is Ops.BUFFER or (u is not self.root and u in self.stored) or u.op in _SOURCES:
            return []
        if u.op is Ops.REDUCE_AXIS:
            return [(u.src[0], ())]
        if u.op in (Ops.CONTIGUOUS, Ops.DETACH):
            return [(u.src[0], chain)]
        if u.op in GroupOp.Elementwise and self._guards(u, chain):
            return [(s, (GUARD,) + chain) for s in u.src]
        return [(s, chain) for s in u.src]

    def _guards(self, u: UOp, chain: Chain) -> bool:
        """Whether u's value is masked by a WHERE for the pads in its chain (then nothing below needs masking for
        them but its loads, which must not read outside their buffer: a constant under a pad stays a constant)."""
        if not _unguarded_pad(chain) or not self._view(u.shape, chain).has_mask:
            return False
        if (guard := self.unsafe.get(u)) is None:
            # an op that is not 0 for 0 inputs must be masked; an expression with many constants is cheaper masked
            # once than with each constant masked (threefry's shift amounts: gcc took 0.4 s on one such kernel)
            body = _kernel_body(u, self.stored, self.realized)
            unsafe = any(x.op in GroupOp.UnsafePad for x in body)
            guard = self.unsafe[u] = unsafe or sum(x.op is Ops.CONST for x in body) >= MASKED_CONSTS
        return guard

    def _view(self, shape: tuple[int, ...], chain: Chain) -> ShapeTracker:
        st = ShapeTracker.from_shape(self._unbind(shape))
        for op, arg in chain:
            if op is not None:  # a GUARD
                st = st.apply(op, self._unbind(arg))
        return st

    def _unbind(self, x: Any) -> Any:
        """A symbolic size's bound variables become the kernel's variables (arguments), their values recorded."""
        if not _symbolic(x):
            return x
        x, vals = sym_unbind(x)
        for u in arg_uops(x):
            for var in u.vars():
                if var not in vals and var not in self.var_vals:
                    raise ValueError(
                        f"variable {var.arg[0]} has no value: a size that uses it needs it bound, e.g. "
                        f"Variable(...).bind(n)"
                    )
        for var, val in vals.items():
            if self.var_vals.setdefault(var, val) != val:
                raise BindingConflict(
                    f"variable {var.arg[0]} is bound to both {self.var_vals[var]} and {val} in one schedule"
                )
        return x

    def load(self, u: UOp, buf: Buffer, chain: Chain) -> UOp:
        """u read from its buffer through `chain`."""
        self.reads.add(u)
        st = self._view(u.shape, chain)
        g = self.global_for(buf, u.dtype.ptr(buf.size))
        return UOp(Ops.LOAD, u.dtype, (g, UOp(Ops.VIEW, arg=st)))

    def _build(self, u: UOp, chain: Chain) -> UOp:
        """u's expression from its inputs' (already in the memo): a node computed by an earlier kernel is a load,
        any other node is built by the KERNEL_OP rule of its op."""
        built = [self.memo[k] for k in self._inputs(u, chain)]
        if u in self.realized:
            return built[0]  # its buffer, read through the chain
        if u is not self.root and u in self.stored:
            return self.load(u, self.out_bufs[u], chain)
        if (out := self.rules.translate(u, _Here(self, chain, built))) is None:
            raise NotImplementedError(f"scheduler cannot build a kernel for {u.op}")
        return out

    def masked(self, value: UOp, u: UOp, chain: Chain) -> UOp:
        """Padding a computed value: outside the pad's mask the result is 0, whatever the op gives for 0 inputs."""
        if not self._guards(u, chain):
            return value
        st = self._view(u.shape, chain)
        valid = UOp(Ops.VALID, dtypes.bool, (UOp(Ops.VIEW, arg=st),))
        return valid.alu(Ops.WHERE, value, UOp.const(value.dtype, 0))

    def kernel(self) -> UOp:
        root = self.root
        # a kernel with a fused reduce iterates in the reduce's (keepdim) shape, whatever shape its output has
        space = self._fused_reduce_shape()
        chain: Chain = ((Ops.RESHAPE, space),) if space is not None and space != root.shape else ()
        box = self._written_box() if space is None else None
        if box is not None:  # only the box changes: its new values are stored through the target's view of it
            value = self.build(root.src[1].src[1], ((Ops.SHRINK, box),))
        else:
            src = root.src[0] if root.op in (Ops.CONTIGUOUS, Ops.DETACH) else root
            value = self.build(root.src[1] if root.op is Ops.ASSIGN else src, chain)
        n = prod(root.shape)
        part = written_part(root) if root.op is Ops.ASSIGN else None
        if part is not None:  # the store goes through the target's view of its buffer
            g = UOp(Ops.DEFINE_GLOBAL, root.dtype.ptr(self.out_bufs[root].size), arg=0)
            st = self._view((self.out_bufs[root].size,), part + chain)
        else:
            g = UOp(Ops.DEFINE_GLOBAL, root.dtype.ptr(n if type(n) is int else self.out_bufs[root].size), arg=0)
            st = self._view(root.shape, ((Ops.SHRINK, box),) if box is not None else chain)
        ast = UOp(Ops.SINK, src=(UOp(Ops.STORE, dtypes.void, (g, UOp(Ops.VIEW, arg=st), value)),))
        record.translate_pass("build kernel", root, ast, self.viz_steps)  # VIZ
        return ast

    def _written_box(self) -> tuple[tuple[Any, Any], ...] | None:
        """The part of its memory a whole-buffer ASSIGN changes, where that is one box: the value is where(mask, new,
        old), old the memory itself read at the positions written (the target, or an earlier pending write of the
        same target), mask a padded True (what `t[a:b] = v` and `t[i].assign(v)` make). Outside the box the kernel
        would copy each element onto itself: a one-row write into a 256 x 64 cache read and wrote 16384 elements
        for 64. None where the write is not of that form."""
        root = self.root
        if root.op is not Ops.ASSIGN or written_part(root) is not None:
            return None
        value, target = root.src[1], root.src[0]
        if value.op is not Ops.WHERE or value in self.stored or value in self.realized:
            return None
        mask, _, old = value.src
        if old is not target and not (old.op is Ops.ASSIGN and old.src[0] is target):
            return None
        chain: Chain = ()
        while mask.op in GroupOp.Movement and mask not in self.realized:
            chain = ((mask.op, mask.arg),) + chain
            mask = mask.src[0]
        if mask.op is not Ops.CONST or mask.dtype != dtypes.bool or not mask.arg:
            return None
        st = self._view(mask.shape, chain)
        if len(st.views) != 1 or st.views[0].mask is None or st.views[0].is_empty():
            return None
        # the old value is not read, but the write keeps the order it had when it was (_levels): after the earlier
        # write it reads, and before later writes into the memory
        self.reads.add(old if old.op is Ops.ASSIGN and old not in self.realized else self.realized.get(old, old).base)
        return st.views[0].mask

    def _fused_reduce_shape(self) -> tuple[int, ...] | None:
        stack, seen = [self.root], set()
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if x is not self.root and (x in self.stored or x in self.realized or x.op is Ops.BUFFER):
                continue
            if x.op is Ops.REDUCE_AXIS:
                return x.shape
            stack.extend(x.src)
        return None


# *** how each tensor-graph op becomes kernel AST, read through a chain of movement ops ***


class _Here(NamedTuple):
    """Where a tensor-graph node is built into a kernel: the builder, the movement ops it is read through, and the
    kernel expressions of its inputs (_KernelBuilder._inputs, built already)."""

    kb: _KernelBuilder
    chain: Chain
    built: list[UOp]


def _build_source(ctx: _Here, u: UOp) -> UOp:
    # consts carry their view: it gives the kernel its shape and masks the const where padded, unless a node above
    # masks the whole value (a masked const in a long chain, like threefry's shift amounts, kept gcc busy for seconds
    # and the kernel from vectorizing)
    st = ctx.kb._view(u.shape, ctx.chain)
    if u.op is Ops.CONST and st.has_mask and not _unguarded_pad(ctx.chain):
        st = ShapeTracker(tuple(View.create(v.shape, v.strides, v.offset, None) for v in st.views))
    return UOp(u.op, u.dtype, (UOp(Ops.VIEW, arg=st),), u.arg)


def _build_bind(ctx: _Here, u: UOp) -> UOp:
    # the kernel takes the variable as an argument: one compiled kernel serves every value
    var, val = u.unbind()
    if ctx.kb.var_vals.setdefault(var, val) != val:
        raise BindingConflict(
            f"variable {var.arg[0]} is bound to both {ctx.kb.var_vals[var]} and {val} in one schedule"
        )
    return var


def _build_reduce(ctx: _Here, u: UOp) -> UOp:
    st = ctx.kb._view(u.shape, ctx.chain)
    assert st.contiguous and st.shape == ctx.kb._unbind(u.shape), "a fused reduce is only read at its own shape"
    return UOp(Ops.REDUCE_AXIS, u.dtype, tuple(ctx.built), u.arg)


def _build_where(ctx: _Here, u: UOp) -> UOp:
    cond, a, b = ctx.built
    # (d | e) ? (d ? z : b) : b is d ? z : b: relu and hardtanh (tensor.py) give the outer where their gradient mask and
    # the inner one, over a detached x, their value (x < 0 ? 0 : x keeps -0.0, as torch's)
    if cond.op is Ops.OR and a.op is Ops.WHERE and a.src[2] is b and a.src[0] in cond.src:
        return ctx.kb.masked(a, u, ctx.chain)
    return ctx.kb.masked(UOp(u.op, u.dtype, (cond, a, b), u.arg), u, ctx.chain)


KERNEL_OP = PatternMatcher(
    [
        # a movement op only adds itself to the chain its source is read through; CONTIGUOUS and DETACH are no-ops
        (UPat(GroupOp.Movement | {Ops.CONTIGUOUS, Ops.DETACH}), lambda ctx: ctx.built[0]),
        (UPat(Ops.BUFFER, name="u"), lambda ctx, u: ctx.kb.load(u, u.arg, ctx.chain)),
        (UPat((Ops.CONST, Ops.IOTA), name="u"), _build_source),
        (UPat(Ops.BIND, name="u"), _build_bind),
        (UPat(Ops.REDUCE_AXIS, name="u"), _build_reduce),
        (UPat(Ops.WHERE, name="u"), _build_where),
        (
            UPat(GroupOp.Elementwise, name="u"),
            lambda ctx, u: ctx.kb.masked(UOp(u.op, u.dtype, tuple(ctx.built), u.arg), u, ctx.chain),
        ),
    ]
)


MASKED_CONSTS = 4  # from this many constants under a pad, the expression is masked once instead of each constant


def _kernel_body(u: UOp, stored: set[UOp], realized: dict[UOp, UOp]) -> list[UOp]:
    """u and what its kernel expression inlines, with the stored nodes and buffers it stops at."""
    stack, seen = [u], {}
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen[x] = None
        if x is not u and (x in stored or x in realized or x.op is Ops.BUFFER):
            continue
        stack.extend(x.src)
    return list(seen)


def _copy_source(u: UOp, realized: dict[UOp, UOp], out_bufs: dict[UOp, Buffer]) -> tuple[UOp, Buffer]:
    """The node a COPY reads (for ordering) and its buffer. Tensor.to makes the source contiguous, so it is a whole
    buffer: stored by this schedule, realized earlier, or a BUFFER seen through a reshape."""
    if u in out_bufs:
        return u, out_bufs[u]
    base = realized.get(u, u)
    base = base.src[0] if base.op is Ops.RESHAPE else base
    assert base.op is Ops.BUFFER, f"a copy reads a whole buffer, not {base.op}"
    return base, base.arg


def _signature(ast: UOp) -> tuple:
    """Kernels with equal signatures share an iteration space (full shape, reduce axes) and may be merged."""
    shapes = [x.arg.shape for x in ast.toposort if x.op is Ops.VIEW]
    full = full_shape(shapes)
    return (full, tuple(sorted({x.arg[1] for x in ast.toposort if x.op is Ops.REDUCE_AXIS})))


def _register_tiled(ast: UOp) -> bool:
    """Whether the kernel is a product over a reduce (a matmul or conv: a sum of products of two loads) with at least
    two output axes of 8 or more, which the optimizer gives a register tile. Such kernels are not merged: each of the
    merged products got a tile of its own in one kernel, whose accumulators outnumbered the registers (three 1408 x
    384 x 384 linears of one input: 83 GFLOPS as one kernel, 175 as three on two AVX2 cores)."""
    reduces = [x for x in ast.toposort if x.op is Ops.REDUCE_AXIS and x.arg[0] is Ops.ADD]
    if not any(r.src[0].op is Ops.MUL and all(_loads(s) for s in r.src[0].src) for r in reduces):
        return False
    full = full_shape([x.arg.shape for x in ast.toposort if x.op is Ops.VIEW])
    reduced = {a for r in reduces for a in r.arg[1]}
    return sum(1 for i, d in enumerate(full) if i not in reduced and isinstance(d, int) and d >= 8) >= 2


def _loads(u: UOp) -> bool:
    """Whether `u` is a load, seen through casts (a 16-bit float widened before the product)."""
    while u.op is Ops.CAST:
        u = u.src[0]
    return u.op is Ops.LOAD


def _merge(items: list[tuple[UOp, list[Buffer]]]) -> tuple[UOp, list[Buffer]]:
    """One kernel from several independent ones: renumber their buffers and join their STOREs."""
    bufs: list[Buffer] = []
    stores: list[UOp] = []
    outs = [b[0] for _, b in items]
    order = outs + [b for _, bs in items for b in bs[1:]]
    for b in order:
        if not any(b is x for x in bufs):
            bufs.append(b)
    for ast, bs in items:
        remap = {}
        for x in ast.toposort:
            if x.op is Ops.DEFINE_GLOBAL:
                idx = next(i for i, b in enumerate(bufs) if b is bs[x.arg])
                remap[x] = x.replace(arg=idx)
        stores.extend(substitute(s, remap) for s in ast.src)
    return UOp(Ops.SINK, src=tuple(stores)), bufs


def _within_limit(items: list[tuple[UOp, list[Buffer]]], limit: int | None) -> list[list[tuple[UOp, list[Buffer]]]]:
    """Kernels to merge, in runs whose buffers together stay within the device's limit."""
    if limit is None:
        return [items]
    runs: list[list[tuple[UOp, list[Buffer]]]] = []
    seen: set[int] = set()
    for item in items:
        ids = {id(b) for b in item[1]}
        if runs and len(seen | ids) <= limit:
            runs[-1].append(item)
            seen |= ids
        else:
            runs.append([item])
            seen = ids
    return runs


class _WriteCycle(RuntimeError):
    """Two in-place writes of one schedule each read the other's memory as it was before (p0 -= lr * f(p1) and
    p1 -= lr * g(p0), fused into the writes' kernels): no order of the two kernels is right."""


def _levels(stored: list[UOp], reads: list[set[UOp]]) -> list[int]:
    """A kernel runs after the kernels whose outputs it reads, and an in-place write (ASSIGN) runs after every
    kernel that reads the old contents of its buffer. Kernels on the same level are independent of each other."""
    kernel_of = {n: i for i, n in enumerate(stored)}
    deps: list[set[int]] = [{kernel_of[x] for x in r if x in kernel_of} for r in reads]
    writes = [i for i, n in enumerate(stored) if n.op is Ops.ASSIGN]
    if writes:
        users: list[list[int]] = [[] for _ in stored]
        for j, d in enumerate(deps):
            for i in d:
                users[i].append(j)
    for i in writes:
        # the kernels reading the memory as it is before this write: through any alias of it, or through the result
        # of another write to it, except the kernels that run after this write anyway (they read its result)
        after, stack = {i}, [i]
        while stack:
            for j in users[stack.pop()]:
                if j not in after:
                    after.add(j)
                    stack.append(j)
        mem, order = _written_memory(stored[i]), write_order(stored[i])
        deps[i] |= {
            j
            for j, r in enumerate(reads)
            if j not in after
            and any(
                x.arg.memory is mem
                if x.op is Ops.BUFFER
                else x.op is Ops.ASSIGN and _written_memory(x) is mem and write_order(x) <= order
                for x in r
            )
        }
        # an older write into the same memory lands first (two writes of one schedule that do not read each other)
        deps[i] |= {
            j for j in writes if j not in after and _written_memory(stored[j]) is mem and write_order(stored[j]) < order
        }
    level: dict[int, int] = {}
    on_path: set[int] = set()  # kernels whose level waits on their dependencies' (a cycle revisits one)
    for start in range(len(stored)):
        stack = [start]
        while stack:
            i = stack[-1]
            if i in level:
                stack.pop()
                continue
            todo = [j for j in deps[i] if j not in level]
            if not todo:
                level[i] = 1 + max((level[j] for j in deps[i]), default=-1)
                on_path.discard(i)
                stack.pop()
                continue
            if i in on_path or any(j in on_path for j in todo):
                raise _WriteCycle(
                    "an assign and a read of the same buffer depend on each other (a cycle); realize one first"
                )
            on_path.add(i)
            stack.extend(todo)
    return [level[i] for i in range(len(stored))]


# *** the schedule cache: a training or decode step builds the same graph over new buffers on every call ***


class _Walk:
    """The part of a graph a schedule computes, in a canonical order, as a hashable key with its buffers and bound
    values left out: equal keys schedule alike, whatever buffers and values they hold."""

    def __init__(
        self,
        outs: list[UOp],
        realized: dict[UOp, UOp],
        known: list[UOp] | None = None,
        at: dict[UOp, int] | None = None,
    ):
        """`known`: nodes numbered before the walk (a step's program runs, see _layout; `at`: the number of each),
        which it does not walk: a node's sources among them are keyed by their number. A realized node's view then
        names its buffer node too, numbered if not known (the known nodes' buffers have no slot)."""
        self.nodes: list[UOp] = list(known) if known else []
        self.slots: list[Buffer] = []  # the buffers read (or written in place), numbered by identity
        self.binds: list[UOp] = []
        self.symbolic = False  # an arg was keyed by its variables (_unbind)
        pos: dict[UOp, int] = at if at is not None else {}
        slot_of: dict[int, int] = {}
        # the key, flat: per node its record (an op's: op, dtype, arg, number of sources, their positions; a leaf's: a
        # tag and fixed fields), each record's length known from its start, so equal keys are equal graphs. Flat, not
        # a tuple per node: a step's walk made two tuples per node that lived to its end, about one collection of the
        # garbage collector's youngest generation per step
        key: list[Any] = []
        record = key.extend
        # post-order, depth first: a node is pushed, then a marker, then its sources, so it is numbered when the
        # marker comes back up (its sources are numbered by then). Leaves (realized nodes, buffers, bound variables)
        # are numbered when first met. The realized lookup (a Python call) is asked only of nodes holding an entry, and
        # dtypes are keyed by their numbers (a C-level hash; this walk runs on every realize, over every node a step
        # computes)
        get, entry, nodes, special = realized.get, REALIZED_ENTRY, self.nodes, _KEYED_APART
        contiguous, detach = Ops.CONTIGUOUS, Ops.DETACH
        reduce_axis, reshape, expand, buffer, bind = Ops.REDUCE_AXIS, Ops.RESHAPE, Ops.EXPAND, Ops.BUFFER, Ops.BIND
        at = pos.__getitem__  # mapped over a node's sources at C speed (a comprehension is a call per node)
        done, broadcast_ops, const, scalar_key = _DONE, _BROADCAST_OPS, Ops.CONST, SCALAR_BROADCAST
        stack: list[Any] = list(reversed(outs))
        while stack:
            node = stack.pop()
            if node is done:
                node = stack.pop()
                arg, op = node.arg, node.op
                if op in special:
                    if op is contiguous or op is detach:
                        # a clone's or a leaf's number only keeps two alike nodes two (the key's positions say that):
                        # keyed by it, every clone (deepcopy, a state dict loaded) or fresh leaf was a new template
                        arg = None
                    # (a reshape's or expand's sizes summed inline: _sized_symbolic's test without its call)
                    elif type(sum(arg)) is not int if op is reshape or op is expand else _sized_symbolic(op, arg):
                        arg = self._unbind(arg)
                record((op, node.dtype.key, arg, len(node.src)))
                record(map(at, node.src))
                pos[node] = len(nodes)
                nodes.append(node)
                continue
            elif node in pos:
                continue
            elif entry in node.__dict__ and (view := get(node)) is not None:
                # the planner still reads a realized node's own op, arg and source shapes (a reduce's loop)
                shapes = tuple(x.shape for x in node.src) if node.op is reduce_axis else ()
                buf = view.base.arg
                if (k := slot_of.get(id(buf))) is None:
                    k = slot_of[id(buf)] = len(self.slots)
                    self.slots.append(buf)
                # (a view that is a buffer node keyed as a buffer: by its Buffer, no value read mid-step was ever met
                # again; the slot says which buffer it is)
                varg = (view.dtype.key, buf.size, buf.device) if view.op is buffer else view.arg
                part: tuple = ("R", node.op, node.dtype.key, node.arg, node.shape, shapes, view.op, varg, k)
                if known:
                    base = view.base
                    if (base_at := pos.get(base)) is None:
                        base_at = pos[base] = len(nodes)
                        nodes.append(base)
                        part += (buf.dtype.key, buf.size, buf.device)
                    part += (base_at,)
                if _sized_symbolic(reshape, node.shape) or view.op is reshape and _sized_symbolic(reshape, view.arg):
                    part = self._unbind(part)
            elif node.op is buffer:
                buf = node.arg
                if (k := slot_of.get(id(buf))) is None:
                    k = slot_of[id(buf)] = len(self.slots)
                    self.slots.append(buf)
                part = ("B", node.dtype.key, buf.size, buf.device, k)
            elif node.op is bind:
                var, _ = node.unbind()
                self.binds.append(node)
                part = ("V", var, node.dtype.key, tuple((x.op, x.arg) for x in node.src[2:]))
            elif node.op in broadcast_ops and (
                (answer := node.__dict__.get(scalar_key)) is True  # (a held node's answer, or a view of a value's
                or answer is None  # source: both without a call)
                and (node.op is const or node.src[0].op in broadcast_ops)
                and scalar_broadcast(node)
            ):
                # keyed by the node itself (hash-consed: the same node is the same structure), its subtree unwalked.
                # The graph programs hold these nodes (uop/program.py), so a step meets the same ones again
                part = ("K", node)
            else:
                stack.append(node)
                stack.append(done)
                stack.extend(reversed(node.src))
                continue
            record(part)
            pos[node] = len(nodes)
            nodes.append(node)
        # which nodes are outputs: realize(a, b) with b inside a's graph stores b, a.realize() alone may inline it;
        # and the kernel size cap the graph is cut under (a Context(KERNEL_OPS=) block schedules otherwise)
        record((len(outs), KERNEL_OPS.value))
        record(map(at, outs))
        self.key = tuple(key)
        self.pos = pos

    def var_vals(self) -> dict[UOp, int]:
        return _bound_values(self.binds) if self.binds else {}

    def _unbind(self, arg: Any) -> Any:
        """A symbolic arg keyed by its variables, not their values; its bound variables join the walk's binds."""
        if not _symbolic(arg):
            return arg
        self.symbolic = True
        self.binds.extend(b for x in arg_uops(arg) for b in x.toposort if b.op is Ops.BIND)
        return sym_unbind(arg)[0]


_DONE = object()  # _Walk's stack marker: the node below it has its sources numbered
# where the frontend keeps a realized node's value, in the node's __dict__ (tensor.RealizedNodes): the walk tests for it
# before asking the mapping, a C-level test on every node
REALIZED_ENTRY = "realized_as"
_SIZED = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.SHRINK, Ops.PAD, Ops.IOTA})  # args holding sizes (maybe symbolic)
_KEYED_APART = _SIZED | {Ops.CONTIGUOUS, Ops.DETACH}  # ops whose arg _Walk keys otherwise than as it is


_BROADCAST_OPS = frozenset({Ops.CONST, Ops.RESHAPE, Ops.EXPAND})


def _sized_symbolic(op: Ops, arg: Any) -> bool:
    """_symbolic for the arg of a _SIZED op, at C speed (this runs for every movement node of every realize): a sum
    of ints is an int, a UOp anywhere makes the sum a UOp."""
    if op is Ops.IOTA:
        return isinstance(arg, UOp)
    if op is Ops.SHRINK or op is Ops.PAD:
        return UOp in set(map(type, itertools.chain.from_iterable(arg)))
    return type(sum(arg)) is not int


@dataclass(eq=False)  # by identity: the engine keys its launch plans on the template
class _Template:
    """A schedule with its buffers as references into `outs + slots`: below len(stored), the i-th stored node's
    buffer; from there on, the walk's slots (buffers read, or written in place). Stored nodes are walk positions; an
    in-place write (ASSIGN) stores into a slot."""

    # (position, shape, elements to allocate, device, target slot of an ASSIGN or None); the shape and size are None
    # where symbolic (the node's own at this walk's bound values). The device is kept, not asked of the node: a node
    # rebuilt from a program (gradient.py, optimizers) has not computed it, and that is a walk down its graph
    stored: list[tuple[int, tuple[int, ...] | None, int | None, str, int | None]]
    items: list[tuple[UOp, tuple[int, ...]]]
    # after the slots: buffers of nodes no tensor asked for (device, size, dtype, shape; never symbolic)
    internal: list[tuple[str, int, Any, tuple[int, ...]]] = field(default_factory=list)
    asked: frozenset[int] = frozenset()  # the positions of the stored nodes asked for (the realize's tensors)

    def __post_init__(self) -> None:
        self.writes_in_place = any(target is not None for *_, target in self.stored)
        # a template of one new value and nothing else allocated (a lone realize's kernel): its (shape, size, device),
        # and the stored nodes of instances made before, kept for the next (output), the oldest first
        self.lone: tuple[tuple[int, ...], int, str] | None = None
        self.spares: list[UOp] = []
        # per in-place write of a fixed shape, small enough to keep (SPARE_BYTES): the nodes of the last two
        # instances' new values, each over an alias of the written memory, recycled once nothing holds them (buffers)
        self.aliases: dict[int, list[UOp]] | None = None
        if FRAME_REFS_CHECKED and self.writes_in_place:
            self.aliases = {p: [] for p, _, size, _, target in self.stored if target is not None and size is not None}
        if len(self.stored) == 1 and not self.internal:
            _, shape, size, device, target = self.stored[0]
            if target is None and size is not None:
                self.lone = (shape, size, device)  # type: ignore[assignment]
        # per new value of a fixed shape of a template of several that no tensor asked for (a training step's
        # gradients and the intermediates only its kernels read), as the aliases: the stored nodes of the last two
        # instances, over their buffers, recycled once nothing holds them (buffers). Not an asked one (a step's loss):
        # its tensor is the caller's, kept or noted (a gradient path's graph, which a kept node would keep alive). A
        # lone template keeps its own (output, keep)
        self.news: dict[int, list[UOp]] | None = None
        if FRAME_REFS_CHECKED and self.lone is None and len(self.stored) > 1:
            self.news = {
                p: []
                for p, _, size, _, target in self.stored
                if target is None and size is not None and p not in self.asked
            }
        # the references the items write (each once): an instance's new outputs are among them
        written = (refs[: len(ast.src) if ast.op is Ops.SINK else 1] for ast, refs in self.items)
        self.written = sorted(set(itertools.chain.from_iterable(written)))
        # per item, a C-level getter of its buffers' tuple from an instance's flat list (a tuple of a map per item
        # cost ~0.3 us more, 28 items an MLP Adam step); None for a kernel of one buffer (the getter gives no tuple)
        self.pickers = [(ast, operator.itemgetter(*refs) if len(refs) > 1 else None, refs) for ast, refs in self.items]

    def buffers(self, walk: _Walk) -> tuple[list[Buffer], dict[UOp, UOp]]:
        """The buffers the items name by reference (new ones for the stored nodes and internal buffers, the walk's
        slots), and what each stored node becomes."""
        bufs: list[Buffer] = []
        becomes: dict[UOp, UOp] = {}
        nodes, slots, aliases, news = walk.nodes, walk.slots, self.aliases, self.news
        for p, shape, size, device, target in self.stored:
            n = nodes[p]
            if shape is None:
                shape = n.shape
                size = alloc_size(shape)
            if target is not None:
                buf = slots[target]
                # the written memory's new value under a node of its own (later graphs see the new value): an alias
                # this position made two instances ago where nothing holds it any more (an optimizer step's every
                # parameter and state: a Buffer, one or two nodes and their deaths per write), else a new one
                spares = None
                if aliases is not None and not buf.part and buf.size * buf.dtype.itemsize <= SPARE_BYTES:
                    spares = aliases.get(p)
                    # (Buffer.memory inline; an external array's Buffer aliased is no alias's _external: none taken)
                    memory = buf._external if buf._external is not None else buf
                if spares is not None and (found := _free_spare(spares, n.dtype, memory)) is not None:
                    view = found[1]
                    pop = view.__dict__.pop
                    # (its owner's note: the tensor now holding the memory's last value. Popped by name, the spare
                    # holding value notes alone: a set of its keys minus the structure's cost ~500 instructions more)
                    for name in _FRONTEND_NOTES:
                        pop(name, None)
                else:
                    view = UOp.buffer_view(buf.alias(), shape)
                if spares is not None:
                    if len(spares) >= 2:
                        del spares[0]
                    spares.append(view)
                becomes[n] = view
            else:
                # a new value: the buffer and node this position made two instances ago where nothing holds them any
                # more (a Buffer, its allocation, its free and one or two nodes and their deaths a value), else new
                spares = None
                if news is not None and size * n.dtype.itemsize <= SPARE_BYTES:  # type: ignore[operator]
                    spares = news.get(p)
                if spares is not None and (found := _free_spare(spares, n.dtype)) is not None:
                    buf, view = found
                    buf.pending_write = True  # (its kernel has not run: what it holds is an older value)
                    pop = view.__dict__.pop
                    for name in _FRONTEND_NOTES:
                        pop(name, None)  # (its owner's note: the tensor that held the value before)
                else:
                    buf = Buffer(device, size, n.dtype, shape=shape)
                    view = UOp.buffer_view(buf, shape)
                if spares is not None:
                    if len(spares) >= 2:
                        del spares[0]
                    spares.append(view)
                # a node of an unbuilt run that no tensor holds (_Laid.fill's: an optimizer's step size) is never
                # looked up, nor kept in the realized registry (its node is only the spare's)
                if type(n) is not Unbuilt or n.held:
                    becomes[n] = view
            bufs.append(buf)
        bufs.extend(slots)
        if self.internal:
            bufs.extend(Buffer(device, size, dtype, shape=shape) for device, size, dtype, shape in self.internal)
        return bufs, becomes

    def output(self, dtype: Any) -> tuple[Buffer, UOp]:
        """A lone template's (`lone`) new value's buffer and stored node (UOp.buffer_view of it), new ones, kept as a
        spare where they are small (keep); the caller first asks _free_spare for a spare's."""
        shape, size, device = self.lone  # type: ignore[misc]
        buf = Buffer(device, size, dtype, shape=shape)
        # (UOp.buffer_view inline: whether it reshapes is known)
        node = UOp(_BUFFER, dtype, (), buf)
        if shape != (size,):
            node = UOp(_RESHAPE, dtype, (node,), shape)
        return buf, node

    def keep(self, node: UOp) -> None:
        """Keep the stored node an instance's output() gave as a spare for the instances after, where the realize
        noted nothing on it but its owner and it is small. Two: a loop that holds its last result while it computes
        the next (`x = f(x)`) recycles the one before; kept, a spare keeps alive what later notes on it hold (a
        gradient path's graph) until an instance lets it go."""
        if FRAME_REFS_CHECKED and self.lone is not None and self.lone[1] * node.dtype.itemsize <= SPARE_BYTES:
            spares = self.spares
            if len(spares) >= 2:
                del spares[0]
            spares.append(node)

    def schedule_items(self, bufs: list[Buffer]) -> list[ScheduleItem]:
        return [
            ScheduleItem(ast, pick(bufs) if pick is not None else (bufs[refs[0]],)) for ast, pick, refs in self.pickers
        ]

    def schedule(self, bufs: list[Buffer], filled: bool = True) -> Schedule:
        """An instance over `bufs`; `filled=False`: its items left unmade (Schedule.unfilled)."""
        schedule = Schedule(self.schedule_items(bufs) if filled else [], self)
        schedule.bufs = bufs
        schedule.unfilled = not filled and len(self.pickers) > 0
        return schedule

    def instantiate(self, walk: _Walk, filled: bool = True) -> tuple[Schedule, dict[UOp, UOp], dict[UOp, int]]:
        bufs, becomes = self.buffers(walk)
        return self.schedule(bufs, filled), becomes, walk.var_vals()


def _bound_values(binds: list[UOp]) -> dict[UOp, int]:
    var_vals: dict[UOp, int] = {}
    for b in binds:
        var, val = b.unbind()
        if var_vals.setdefault(var, val) != val:
            raise BindingConflict(f"variable {var.arg[0]} is bound to both {var_vals[var]} and {val} in one schedule")
    return var_vals


def _template(
    walk: _Walk, items: list[ScheduleItem], becomes: dict[UOp, UOp], internal: list[Buffer], outs: list[UOp]
) -> _Template | None:
    """The schedule as a template of `walk`, or None when it holds a buffer the walk cannot name. `internal`: the
    buffers of nodes a pass made (the copy of a matmul's weight in panels), named by their place in that list.
    `outs`: the nodes asked for (their tensors hold their values as long as the caller keeps them)."""
    slot_of = {id(b): len(becomes) + j for j, b in enumerate(walk.slots)}
    slot_of.update((id(b), len(becomes) + len(walk.slots) + j) for j, b in enumerate(internal))
    stored: list[tuple[int, tuple[int, ...] | None, int | None, str, int | None]] = []
    ref_of: dict[int, int] = {}
    for n, view in becomes.items():
        if n not in walk.pos:
            return None
        target = n.src[0].base.arg if n.op is Ops.ASSIGN else None
        # (a write into part of its buffer becomes a view the template does not keep)
        if target is not None and (id(target) not in slot_of or written_part(n) is not None):
            return None
        target_slot = slot_of[id(target)] - len(becomes) if target is not None else None
        shape = tuple(view.shape)
        size = None if _symbolic(shape) else alloc_size(shape)
        stored.append((walk.pos[n], None if size is None else shape, size, view.base.arg.device, target_slot))
        if target is None:
            ref_of[id(view.base.arg)] = len(stored) - 1
    refs_items = []
    for si in items:
        refs = []
        for b in si.bufs:
            ref = ref_of.get(id(b), slot_of.get(id(b)))
            if ref is None:
                return None
            refs.append(ref)
        refs_items.append((si.ast, tuple(refs)))
    asked = frozenset(p for p in map(walk.pos.get, outs) if p is not None)
    return _Template(stored, refs_items, [(b.device, b.size, b.dtype, b.shape) for b in internal], asked)


# the largest value a template keeps for its next instances (_Template.output): what a kernel of it costs dwarfs what
# recycling saves above this, and a kept spare is memory the allocator's cache cannot hand to others
SPARE_BYTES = 1 << 16
# the notes a kept value's nodes may carry to be recycled: caches of their structure, which stays the same, and the
# frontend's notes that die with the tensor holding the value (note_value_notes)
_STRUCTURE_NOTES = frozenset({"shape", "device", "_descendants"})
_VALUE_NOTES = set(_STRUCTURE_NOTES)
_FRONTEND_NOTES: list[str] = []  # _VALUE_NOTES but the structure's: what a recycled node drops
# whether a node's __dict__ holds value notes alone (the set's own method over the dict's keys: `keys() <= set` makes a
# view and compares through it, ~400 instructions more a check; the set is only ever updated in place)
_only_value_notes = _VALUE_NOTES.issuperset
# the attributes of a Buffer as made: a buffer with more in its __dict__ carries notes (a memory's readers, what was
# stored in it) and is not recycled
_PLAIN_BUFFER = len(Buffer("CPU", 1, dtypes.uint8).__dict__)


def _free_spare(spares: list[UOp], dtype: Any, memory: Buffer | None = None) -> tuple[Buffer, UOp] | None:
    """The first of a template's kept stored nodes (a lone template's spares, an in-place write's aliases) that
    nothing holds any more, with its buffer, taken off `spares`: the stored node of an instance made before, where
    nothing but the template holds it or its buffer (the tensor of `(a + b).realize()` in a loop died with its
    statement; `x = f(x).realize()` drops the result before last; an optimizer step's parameter two steps back). A
    recycled pair costs no Buffer, node, allocation, free or death callbacks. Nothing can read a buffer nobody holds: a
    tensor, a view, a lazy graph or schedule reading it, a JIT capture, a gradient's origin all hold its node or the
    buffer, and registries that hold either weakly count as holders too. A spare noted since with more than its
    structure and owner (a write order, a gradient path, a memory's readers: _VALUE_NOTES) is dropped, with what its
    notes hold. `memory`: an in-place write's, which the spare's buffer must alias (a model of the same structure
    writes other memory); None: the spare's buffer must own its memory. Under the realize lock (the callers'): no
    thread can take a reference in between, having none to copy."""
    i = 0
    while i < len(spares):  # (no enumerate: its reused tuple holds the element, a count more)
        spare = spares[i]
        node = spare.src[0] if spare.op is _RESHAPE else spare
        buf = node.arg
        if (
            spare.dtype is not dtype
            or not _only_value_notes(spare.__dict__)
            or node is not spare
            and not _only_value_notes(node.__dict__)
            or len(buf.__dict__) != _PLAIN_BUFFER
            and not _dead_notes(buf)
            or buf._external is not memory
        ):
            del spares[i]
            continue
        # the counts: the list's reference, the locals and getrefcount's argument; a reshape's node is also its
        # sources' (its key's too); a buffer also the hash-cons key's of its node (the cache holds the node itself
        # weakly: one weak reference, its entry)
        if spare is node:
            free = _getrefcount(spare) == 4 and _getweakrefcount(spare) == 1
        else:
            free = _getrefcount(spare) == 3 and _getweakrefcount(spare) == 1
            free = free and _getrefcount(node) == 3 and _getweakrefcount(node) == 1
        if free and _getrefcount(buf) == 4 and not _getweakrefcount(buf) and not buf.pending_write:
            del spares[i]  # (keep takes it back as the newest)
            buf.serial = buffers_made()  # made anew for a trace that tells the buffers it made (TinyJit)
            return buf, spare
        i += 1
    return None


def _dead_notes(buf: Buffer) -> bool:
    """Whether every note on `buf` beyond a Buffer's own attributes holds only dead weak references (what the frontend
    noted of a value stored there, a tensor made to own it, all gone since), and if so, drops them."""
    notes = buf.__dict__
    extra = [name for name in notes if name not in _BUFFER_ATTRIBUTES]
    for name in extra:
        value = notes[name]
        refs = value if type(value) is list else (value,)
        if not all(type(r) is weakref.ref and r() is None for r in refs):
            return False
    for name in extra:
        del notes[name]
    return True


_BUFFER_ATTRIBUTES = frozenset(Buffer("CPU", 1, dtypes.uint8).__dict__)


def note_value_notes(*names: str) -> None:
    """Name notes the frontend files in a stored node's __dict__ that a recycled node may carry (_Template.output):
    notes about the tensor that held it, answered again for the next one (the owner's weak reference, dead)."""
    _VALUE_NOTES.update(names)
    _FRONTEND_NOTES[:] = sorted(_VALUE_NOTES - _STRUCTURE_NOTES)


_templates: dict[tuple, _Template] = {}
SCHEDULE_CACHE_SIZE = 256  # templates kept (a graph whose shapes change every call would otherwise grow it forever)
_templates_lock = library_lock()  # threads scheduling at once: an eviction must not meet another's insert


def create_schedule(
    outs: list[UOp], realized: dict[UOp, UOp]
) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, int]]:
    """Kernels that compute `outs` in execution order, what each computed node becomes (a buffer view),
    and the values of the variables the kernels take as arguments. A graph of the same structure as one scheduled
    before (over other buffers and bound values) reuses that schedule, its items left unmade until read (see
    Schedule.unfilled: a realize's launch plan needs none)."""
    if not profile.enabled():  # the span's context manager alone costs a few microseconds, on every realize
        return _cached_schedule(outs, realized, {})
    with profile.span("schedule", "schedule") as args:
        return _cached_schedule(outs, realized, args)


def cached_instance(
    root: UOp, realized: dict[UOp, UOp]
) -> tuple[_Template, list[Buffer], dict[UOp, UOp], dict[UOp, int]] | None:
    """For a lone root whose graph's structure was scheduled before and that writes no memory in place: the template
    with an instance's buffers (in the template's reference order), what the root becomes and the bound values; None
    for any other graph (the frontend then takes the general path). A root over stored buffers alone is known from the
    root (_OverBuffers), with no walk."""
    # a root over stored buffers, or one reshape of one (a reduction's result: the reduce reshaped), is known by the
    # node it stores and a key of that node's op, dtype, arg and sources (and the reshape's arg), kept on its first
    # source (_OverBuffers); inline: this runs on every lone realize
    inner, key = root, None
    if root.op is _RESHAPE:
        inner = root.src[0]
    if (
        (src := inner.src)
        and REALIZED_ENTRY not in inner.__dict__
        and (inner is root or REALIZED_ENTRY not in root.__dict__)
    ):
        # (two sources' ids spelled out, most roots: a star over map(id, src) makes a list first, ~1700 instructions)
        if len(src) == 2:
            key = (inner.op, inner.dtype.key, inner.arg, id(src[0]), id(src[1]))
        else:
            key = (inner.op, inner.dtype.key, inner.arg, *map(id, src))
        if inner is not root:
            key = (_RESHAPE, root.arg, *key)
        # _Template.buffers for a known one, with no walk: the one stored buffer, then the slots
        # (plain loops and appends: over two or three sources, zip, map and star-unpacking each cost more than the
        # opcodes, ~2000 instructions for zip over a slice)
        if (memo := src[0].__dict__.get(_ROOTS_OVER)) is not None and (known := memo.get(key)) is not None:
            i = 1
            for ref in known.others:
                if ref() is not src[i]:
                    break  # another node under a dead one's id
                i += 1
            else:
                for s in src:
                    if REALIZED_ENTRY in s.__dict__ or s.op is _RESHAPE and REALIZED_ENTRY in s.src[0].__dict__:
                        break  # realized since: it reads another value (the walk finds it)
                else:
                    buf, node = _free_spare(known.tpl.spares, inner.dtype) or known.tpl.output(inner.dtype)
                    bufs = [buf]
                    for ref in known.slots:
                        bufs.append(ref())
                    return known.tpl, bufs, {inner: node}, {}
    walk = _Walk([root], realized)
    tpl = _templates.get(walk.key)
    if tpl is None or tpl.writes_in_place:
        return None
    if key is not None:
        _remember_over_buffers(inner, key, walk, tpl)
    if tpl.lone is not None and type(n := walk.nodes[tpl.stored[0][0]]) is not Unbuilt:
        buf, node = _free_spare(tpl.spares, n.dtype) or tpl.output(n.dtype)
        return tpl, [buf, *walk.slots], {n: node}, walk.var_vals()
    bufs, becomes = tpl.buffers(walk)
    return tpl, bufs, becomes, walk.var_vals()


# *** a root whose sources are all stored buffers: its walk from the root alone ***

# in a node's __dict__: the walks of the roots whose first source it is (or of reshapes of them), by the root's op,
# dtype, arg and sources (and the reshape's arg)
_ROOTS_OVER = "roots_over"
_BUFFER, _RESHAPE = Ops.BUFFER, Ops.RESHAPE  # (an Enum member read is ~50 ns on Python 3.11: read once here)


@dataclass(eq=False)
class _OverBuffers:
    """What the walk of a root over stored buffers gives, where each source is a BUFFER node or one reshape of one,
    neither realized: a function of the root's op, dtype, arg and source nodes alone (a buffer node's record never
    changes). `(a + b).realize()` in a loop builds such a root again and again; kept on its first source (dying with
    it), it finds its template and slots at the cost of a dictionary lookup. Weak references to the other sources
    tell one that died and left its id to another node."""

    others: tuple[weakref.ref, ...]
    tpl: _Template
    slots: tuple[weakref.ref, ...]  # the walk's slots: the sources' buffers, alive while the sources are the same


def _buffer_source(s: UOp) -> Buffer | None:
    """The buffer a source reads when it is a BUFFER node or one reshape of one, with no realized entry on either."""
    if REALIZED_ENTRY in s.__dict__:
        return None
    if s.op is Ops.RESHAPE:
        s = s.src[0]
        if REALIZED_ENTRY in s.__dict__:
            return None
    return s.arg if s.op is Ops.BUFFER else None


def _remember_over_buffers(inner: UOp, key: tuple, walk: _Walk, tpl: _Template) -> None:
    stored = tpl.stored
    # (a lone template: its one stored value is new, never symbolic here)
    if walk.binds or tpl.lone is None or walk.pos.get(inner) != stored[0][0]:
        return
    src = inner.src
    bufs = list(map(_buffer_source, src))
    if None in bufs:
        return
    firsts = tuple(i for i, b in enumerate(bufs) if not any(b is c for c in bufs[:i]))
    if len(firsts) != len(walk.slots) or any(bufs[i] is not b for i, b in zip(firsts, walk.slots)):
        return  # (the walk numbers the sources' buffers in this order: never met)
    memo = src[0].__dict__.setdefault(_ROOTS_OVER, {})
    if len(memo) >= 8:  # roots met over one buffer (a few ops on a tensor, each in a loop), not every one ever built
        memo.clear()
    memo[key] = _OverBuffers(tuple(weakref.ref(s) for s in src[1:]), tpl, tuple(weakref.ref(b) for b in walk.slots))


def _cached_schedule(
    outs: list[UOp], realized: dict[UOp, UOp], args: dict[str, Any]
) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, int]]:
    replays = take_replays()
    laid = None
    for r in replays:  # (a loop, not any() over a generator: calls less on every step's realize)
        if r.unbuilt is not None and r.unbuilt.vals is not None:
            # a run left unbuilt was built since (a pending gradient read, see gradient.py): its nodes are the graph's
            replays = built(replays)
            outs = [u.built() if type(u) is Unbuilt and u.run.vals is not None else u for u in outs]
            break
    known = None
    if (
        replays
        and STEP_LAYOUTS.value
        and replays[0].inputs_at is not None  # (_layout_again's first conditions inline: a call less where they fail)
        and replays[0].unbuilt is not None
        and replays[0].structured
        and (again := _layout_again(outs, replays, realized)) is not None
        and (known := _layouts.get(again[0])) is not None
    ):
        nodes = again[1]  # (a layout not kept yet: _layout's walk numbers what _lay_out keeps)
    elif replays:
        # (whether the runs are this graph's is asked either way: which schedule takes them is the same with the
        # layouts off, and so are the nodes they keep alive)
        laid = _layout(outs, replays, realized) if STEP_LAYOUTS.value else _theirs(outs, replays)
        if laid is _NOT_THEIRS:
            keep_replays(replays)  # (a tensor read between the backward and the step: the step's realize takes them)
            laid, replays = None, []
        elif laid is not None and (known := _layouts.get(laid[0])) is not None:
            nodes = laid[1].nodes
    if known is not None:
        tpl, walk = known.walk(nodes)
        if FILLER in walk.nodes.values():
            known.fill(walk, replays)
    else:
        if any(r.unbuilt is not None for r in replays) or any(type(u) is Unbuilt for u in outs):
            # a walk reads every node: the unbuilt ones are built (and the layout made again over them, to be kept)
            outs = [u.built() if type(u) is Unbuilt else u for u in outs]
            replays = built(replays)
            laid = _layout(outs, replays, realized) if laid is not None else None
            if laid is _NOT_THEIRS:
                laid = None
        walk = _Walk(outs, realized)
        tpl = _templates.get(walk.key)
        if tpl is not None and laid is not None:
            _lay_out(laid, walk, tpl, realized)
    if tpl is not None:
        items, becomes, var_vals = tpl.instantiate(walk, filled=False)
        args["kernels"], args["cached"] = len(tpl.pickers), True
        if DEBUG >= 1 and tpl.pickers:
            print(f"scheduled {len(tpl.pickers)} kernels for {len(becomes)} stored nodes (cached)")
        return items, becomes, var_vals
    s = _create_schedule(outs, realized)
    items, becomes, var_vals = s.items, s.becomes, s.var_vals
    args["kernels"], args["cached"] = len(items), False
    if (tpl := _template(walk, items, becomes, s.internal, outs)) is not None:
        with _templates_lock:
            if len(_templates) >= SCHEDULE_CACHE_SIZE:
                del _templates[next(iter(_templates))]
            _templates[walk.key] = tpl
        if laid is not None:
            _lay_out(laid, walk, tpl, realized)
    return items, becomes, var_vals


# *** a training step's realize: its graph is what the gradient and optimizer programs just replayed ***
#
# A step's realize (loss, gradients, updates) computes the nodes its backward's gradient program and its optimizer's
# update program built, over the forward graph whose structure the gradient program's key holds. Its graph is then
# known from the runs alone: which programs ran, how their inputs relate (the same node, or a buffer of which size),
# where the outputs sit among the runs' nodes. Equal layouts are graphs the walk keys alike, so the template of the
# first walk serves, and the stored nodes and buffers are read off the runs' nodes by position: no walk of the
# 250-node graph (an MLP Adam step's ~200 us of its ~1100). Anything the programs did not build or name (a tensor op
# between backward and the step, a gradient summed into an old one, a realized node inside: a tensor read mid-step)
# makes no layout, and the walk runs.

_DICT_OF = operator.attrgetter("__dict__")
_NOT_THEIRS: Any = ()  # _layout of a graph with no output among the runs' nodes (they wait for the next schedule)


def _theirs(outs: list[UOp], replays: list[Replay]) -> Any:
    """_NOT_THEIRS where no output is a node of the runs, else None (no layout)."""
    made = set(itertools.chain.from_iterable(r.vals for r in replays))
    return None if any(map(made.__contains__, outs)) else _NOT_THEIRS


def _layout(outs: list[UOp], replays: list[Replay], realized: dict[UOp, UOp]) -> tuple[tuple, _Walk] | None:
    """The key of the graph of `outs` as positions in the runs' nodes, and the walk of what the runs did not build,
    whose nodes (the runs' first) number every node of the graph; None where the runs do not give the walk's key (an
    input of unknown structure, a bound variable); _NOT_THEIRS where no output is a node of theirs."""
    nodes: list[UOp] = []
    known: dict[UOp, int] = {}  # each node's position (of a node met twice, the later one)
    relations: list[tuple] = []
    below: list[UOp] = []  # the buffer nodes below inputs that are a reshape of one (after the runs' nodes)
    below_at: dict[UOp, int] = {}  # (each one's place in `below`: a list's scans compared ~300 nodes a step)
    # per run, then for the buffer nodes below: where its nodes start, the positions that may hold a realized entry
    # (None: all), its nodes
    scanned: list[tuple[int, Iterable[int] | None, list[UOp]]] = []
    has = operator.contains
    # positions known to hold a realized entry (a gradient run's inputs, as backward's walk found them)
    realized_at: list[int] = []
    changes = getattr(realized, "changes", None)
    for r in replays:
        inputs = r.vals[: r.n_in]
        # each input: the position of the same node in an earlier run (its structure is that run's), or none
        earlier = known.get if nodes else None
        found = tuple(map(earlier, inputs)) if earlier is not None else (None,) * r.n_in
        if r.structured:
            relations.append(found)
        else:
            leaves = _input_leaves(inputs, found, earlier, below, below_at)
            if leaves is None:
                return None
            relations.append((found, leaves))
        start, n_in = len(nodes), r.n_in
        # a first run whose inputs backward's walk numbered and looked at with no realized entry added or dropped
        # since (a training step's gradient run): its inputs' positions and entries are the walk's (an MLP Adam step's
        # 87 inputs of its 164 placed nodes)
        reuse = start == 0 and r.inputs_at is not None and changes is not None and r.inputs_at[2] == changes
        if reuse:
            known = dict(r.inputs_at[0])  # type: ignore[index]
            realized_at += r.inputs_at[1]  # type: ignore[index]
        scan: Iterable[int] | None = None
        if r.unbuilt is None:
            if reuse:
                known.update(zip(r.vals[n_in:], range(n_in, len(r.vals))))
                scan = range(n_in, len(r.vals))
            else:
                known.update(zip(r.vals, range(start, start + len(r.vals))))
        else:
            # an unbuilt run holds FILLER at every position but its inputs', held nodes' and outputs' (uop/program.py),
            # which nothing of the graph meets and which holds no entry: those positions are neither numbered nor
            # looked at (~125 of an MLP Adam step's ~270). Of the rest, its own Unbuilts hold no entry either (the
            # realized registry keeps none): only the inputs and held nodes are looked at
            program = r.unbuilt.program
            placed, held = program.placed(n_in)
            if reuse:
                added = placed[n_in:]
                known.update(zip(map(r.vals.__getitem__, added), added))
                scan = held
            else:
                known.update(zip(map(r.vals.__getitem__, placed), map(start.__add__, placed)))
                scan = itertools.chain(range(n_in), held)
        scanned.append((start, scan, r.vals))
        nodes += r.vals
    if below:
        scanned.append((len(nodes), None, below))
        known.update(zip(below, range(len(nodes), len(nodes) + len(below))))
        nodes += below
    if not any(map(known.__contains__, outs)):
        return _NOT_THEIRS
    # the walk stops at a realized node and keys it by the view its value is stored in (a value computed once from
    # what a loop never writes, a node read mid-step): where each sits, its view, and which buffer node the view reads
    entry = itertools.repeat(REALIZED_ENTRY)
    for start, scan, vals in scanned:
        if scan is None:
            realized_at += itertools.compress(range(start, start + len(vals)), map(has, map(_DICT_OF, vals), entry))
        else:
            scan = tuple(scan)
            holds = map(has, map(_DICT_OF, map(vals.__getitem__, scan)), entry)
            realized_at += itertools.compress(map(start.__add__, scan), holds)
    views: list[tuple] = []
    if realized_at:
        bases: list[UOp] = []
        for p in realized_at:
            view = realized.get(nodes[p])
            if view is None or view.op is Ops.MULTI:
                return None
            base = view.base
            at = known.get(base)
            if at is None:
                if base not in bases:
                    bases.append(base)
                at = (-1 - bases.index(base), base.dtype.key, base.arg.size, base.arg.device)
            views.append(
                (p, view.op, (base.dtype.key, base.arg.size, base.arg.device) if view is base else view.arg, at)
            )
        # (positioned: the walk's slot of a view's buffer is read off its buffer node)
        known.update(zip(bases, range(len(nodes), len(nodes) + len(bases))))
        nodes += bases
    # what the runs did not build (the step's accuracy count, a norm layer's running statistics): walked, the runs'
    # nodes numbered as they are; the walk's key then holds the outputs' places too
    rest = _Walk(outs, realized, nodes, known)
    if rest.binds or rest.symbolic:
        return None
    return (tuple([r.program for r in replays]), tuple(relations), tuple(views), rest.key), rest


def _input_leaves(
    inputs: list[UOp], found: tuple, earlier: Callable[[UOp], int | None] | None, below: list[UOp], below_at: dict
) -> tuple | None:
    """An unstructured run's inputs that no earlier run placed (`found` None), keyed as the walk keys them: a stored
    tensor's node, a buffer node or a reshape of one; the buffer nodes below reshapes that no earlier run placed
    (`earlier`) join `below`. None where an input is anything else."""
    every = set(inputs)
    first_at: dict[UOp, int] = {}
    leaves: list[tuple] = []
    for i, (n, p) in enumerate(zip(inputs, found)):
        if p is not None:
            continue
        # (an input repeated, as its program's key allowed: keyed as the earlier one's place)
        if (first := first_at.setdefault(n, i)) != i:
            leaves.append(("same", first))
            continue
        if n.op is Ops.RESHAPE:
            leaves.append((n.dtype.key, n.arg))
            n = n.src[0]
            if n.op is not Ops.BUFFER or n in every:
                return None  # (a buffer node that is an input of its own: keyed apart, rare)
            # the buffer node may be another run's input or another reshape's: the walk numbers it once
            at = earlier(n) if earlier is not None else None
            if at is None:
                if (b := below_at.get(n)) is None:
                    b = below_at[n] = len(below)
                    below.append(n)
                at = -1 - b
            leaves.append(at)
        elif n.op is not Ops.BUFFER:
            return None
        leaves.append((n.dtype.key, n.arg.size, n.arg.device))
    return tuple(leaves)


def _layout_again(outs: list[UOp], replays: list[Replay], realized: dict[UOp, UOp]) -> tuple[tuple, list[UOp]] | None:
    """_layout's key of the graph of `outs` and the runs' nodes (which a kept layout reads by position), for a step
    whose first run is a gradient run whose inputs backward's walk numbered (Replay.inputs_at, with no realized entry
    among them and none added or dropped since) and whose runs are all unbuilt. _layout numbers every node of the
    runs in one dict, backward's numbering of the first run's inputs copied into it (~270 nodes an MLP Adam step),
    then walks the outputs; here the first run's inputs are looked up in backward's numbering itself, and only the
    nodes the key places (the later runs' inputs, the outputs) are looked up at all: the same positions (each node's
    last place), so the same key. None where any of that does not hold, a node the key places is not found, or a node
    looked at holds a realized entry: _layout then lays the graph out. (The caller has checked that the first run is
    an unbuilt, structured one with inputs_at.)"""
    first = replays[0]
    index0, entries, seen = first.inputs_at  # type: ignore[misc]
    if entries or seen != getattr(realized, "changes", None):
        return None
    n_in, vals = first.n_in, first.vals
    placed, held = first.unbuilt.program.placed(n_in)  # type: ignore[union-attr]
    entry = itertools.repeat(REALIZED_ENTRY)
    if any(map(operator.contains, map(_DICT_OF, map(vals.__getitem__, held)), entry)):
        return None
    # the first run's own nodes the walk meets (its held nodes and Unbuilts; after its inputs: numbered later)
    added = placed[n_in:]
    first_added = dict(zip(map(vals.__getitem__, added), added))
    later: dict[UOp, int] = {}  # the later runs' nodes the walk meets, then the buffer nodes below (their last place)
    relations: list[tuple] = [(None,) * n_in]
    below: list[UOp] = []
    below_at: dict[UOp, int] = {}
    nodes = list(vals)
    for r in replays[1:]:
        if r.unbuilt is None:
            return None
        inputs = r.vals[: r.n_in]
        # (with the inputs, the buffer nodes below reshaped ones, which _input_leaves may look for: one call)
        asked = list(inputs)
        for n in inputs:
            if n.op is _RESHAPE and n.src:
                asked.append(n.src[0])
        places = _found(asked, later, first_added, index0)
        found = tuple(places[: r.n_in])
        if r.structured:
            relations.append(found)
        else:
            earlier = dict(zip(asked[r.n_in :], places[r.n_in :])).get
            leaves = _input_leaves(inputs, found, earlier, below, below_at)
            if leaves is None:
                return None
            relations.append((found, leaves))
        start = len(nodes)
        placed, held = r.unbuilt.program.placed(r.n_in)
        looked = itertools.chain(inputs, map(r.vals.__getitem__, held))
        if any(map(operator.contains, map(_DICT_OF, looked), entry)):
            return None
        later.update(zip(map(r.vals.__getitem__, placed), map(start.__add__, placed)))
        nodes += r.vals
    if below:
        if any(map(operator.contains, map(_DICT_OF, below), entry)):
            return None
        later.update(zip(below, itertools.count(len(nodes))))
        nodes += below
    at = _found(outs, later, first_added, index0)
    if None in at:
        return None
    # (_Walk's key of outputs that are all numbered: their count, the kernel size cap, their positions)
    rest = (len(outs), KERNEL_OPS.value, *at)
    return (tuple([r.program for r in replays]), tuple(relations), (), rest), nodes


def _found(ns: list[UOp], later: dict, first_added: dict, index0: dict) -> list[int | None]:
    """_layout_again's place of each node: in a later run, else among the first run's own nodes, else among its
    inputs (backward's numbering); None where no run has it."""
    out = list(map(later.get, ns))
    if None in out:
        for i, n in enumerate(ns):
            if out[i] is None:
                p = first_added.get(n)
                out[i] = index0.get(n) if p is None else p
    return out


@dataclass(eq=False)
class _Laid:
    """A template with its walk's stored nodes and slots as positions in the runs' nodes."""

    tpl: _Template
    stored: tuple[int, ...]  # per template stored node (its walk position), the node's position in the runs
    slots: tuple[int, ...]  # per walk slot, the position of the buffer node that reads it

    def __post_init__(self) -> None:
        self.walk_at = [p for p, *_ in self.tpl.stored]  # per template stored node, its walk position
        # per stored node a run left FILLER (the same ones on every step of the layout: its programs' places): its walk
        # position, its run's index and its position in the run; made by the first fill
        self.fillers: list[tuple[int, int, int]] | None = None

    def walk(self, nodes: list[UOp]) -> tuple[_Template, _Replayed]:
        # (at C speed: a comprehension unpacking each stored node's record cost ~0.3 us a node, 34 an MLP Adam step)
        at = dict(zip(self.walk_at, map(nodes.__getitem__, self.stored)))
        return self.tpl, _Replayed(at, [nodes[q].arg for q in self.slots])

    def fill(self, walk: _Replayed, replays: list[Replay]) -> None:
        """A stored node of an unbuilt run that no tensor holds (an optimizer's step size, see uop/program.py
        FILLER) gets an Unbuilt of its own: its dtype types the buffer (_Template.buffers makes no node over it)."""
        if self.fillers is None:
            starts = list(itertools.accumulate([len(r.vals) for r in replays], initial=0))
            fillers = []
            for p, q in zip(self.walk_at, self.stored):
                if walk.nodes[p] is FILLER:
                    i = bisect.bisect_right(starts, q) - 1
                    fillers.append((p, i, q - starts[i]))
            self.fillers = fillers
        nodes = walk.nodes
        for p, i, q in self.fillers:
            if nodes[p] is FILLER:  # (a layout's runs leave the same places FILLER: a check, not a condition)
                nodes[p] = replays[i].unbuilt.node(q, held=False)  # type: ignore[union-attr]


class _Replayed(NamedTuple):
    """What _Template.buffers and instantiate read of a walk, for a step laid out by its runs (no bound values)."""

    nodes: dict[int, UOp]
    slots: list[Buffer]

    def var_vals(self) -> dict[UOp, int]:
        return {}


def _lay_out(laid: tuple[tuple, _Walk], walk: _Walk, tpl: _Template, realized: dict[UOp, UOp]) -> None:
    """Keep the template for the layout, with the positions of the walk's stored nodes and slots in the runs' nodes
    (none kept for a graph binding variables: its values are read off the walk)."""
    key, pos = laid[0], laid[1].pos
    if walk.binds or walk.symbolic:
        return
    stored = tuple(pos.get(walk.nodes[p], -1) for p, *_ in tpl.stored)
    reading: dict[int, UOp] = {}
    for n in walk.nodes:
        if n.op is Ops.BUFFER:
            reading.setdefault(id(n.arg), n)
        elif REALIZED_ENTRY in n.__dict__ and (view := realized.get(n)) is not None:
            reading.setdefault(id(view.base.arg), view.base)
    slots = tuple(pos.get(reading.get(id(b)), -1) for b in walk.slots)  # type: ignore[arg-type]
    if -1 in stored or -1 in slots:
        return
    with _templates_lock:
        if len(_layouts) >= SCHEDULE_CACHE_SIZE:
            del _layouts[next(iter(_layouts))]
        _layouts[key] = _Laid(tpl, stored, slots)


_layouts: dict[tuple, _Laid] = {}


# *** the scheduler's passes, in order (uop/passes.py checks the order and runs the verifier after each) ***


@dataclass
class _Schedule:
    """What the scheduler's passes read and fill in: the planner's decisions, then buffers, then kernels."""

    planner: _Planner
    realized: dict[UOp, UOp]
    # a node of a graph a pass rewrote -> the node of the graph asked for whose value it holds (in that node's shape)
    stands_for: dict[UOp, UOp] = field(default_factory=dict)
    asked: set[UOp] | None = None  # once a pass rewrote the graph: the nodes of the graph asked for
    stored: list[UOp] = field(default_factory=list)  # in graph order (sources first)
    internal: list[Buffer] = field(default_factory=list)  # buffers of stored nodes no node asked for stands for
    out_bufs: dict[UOp, Buffer] = field(default_factory=dict)
    becomes: dict[UOp, UOp] = field(default_factory=dict)
    var_vals: dict[UOp, int] = field(default_factory=dict)
    kernels: list[tuple[UOp, list[Buffer]]] = field(default_factory=list)
    reads: list[set[UOp]] = field(default_factory=list)  # per kernel: the stored nodes and buffers it loads
    items: list[ScheduleItem] = field(default_factory=list)
    values_first: bool = False  # store each in-place write's value before the writes (see _WriteCycle)


def _device_max_buffers(device: str) -> int:
    return min(Device[device].renderer.max_buffers or MAX_BUFFERS, MAX_BUFFERS)


@step("matmul panels", category="schedule pass")
def _matmul_panels(s: _Schedule, ctx: None) -> _Schedule:
    """A matmul whose right-hand side the device wants read from panels reads it from a copy in panels
    (schedule/panels.py). Before the store decisions: the copy is a CONTIGUOUS node, stored by decision 1."""
    if not (plans := panel_plans(s.planner.order, s.realized)):
        return s
    _rebuild(s, lambda n, x: (over_panels(x, plans[n]), True) if n in plans else (x, False))
    return s


def _rebuild(s: _Schedule, stand_in: Callable[[UOp, UOp], tuple[UOp, bool]]) -> None:
    """Make the graph to compute again, sources first: `stand_in(node, node over rebuilt sources)` gives each node's
    replacement and whether it is a view of the node that holds the value. Each new node remembers the node asked for
    that it stands for, and the planner starts over on the new outputs. A leaf (a realized node among them) keeps its
    own sources, and an in-place write its target: the memory written is the same."""
    new: dict[UOp, UOp] = {}
    for n in s.planner.order:
        src = tuple(x if n.op is Ops.ASSIGN and i == 0 else new.get(x, x) for i, x in enumerate(n.src))
        x = n if src == n.src or s.planner.leaf(n) else UOp(n.op, n.dtype, src, n.arg)
        if x is not n and n.op is Ops.ASSIGN and (made := write_order(n)) >= 0:
            x.__dict__.setdefault(_WRITE_ORDER, made)
        new[n], viewed = stand_in(n, x)
        if new[n] is not n:
            s.stands_for[new[n].base if viewed else new[n]] = s.stands_for.get(n, n)
    if s.asked is None:
        s.asked = set(s.planner.order)
    # an output that is a leaf keeps its memory (a copy of it is for the kernels that read it)
    s.planner = _Planner([o if s.planner.leaf(o) else new[o] for o in s.planner.outs], s.realized)
    s.planner.values_first = s.values_first


def _value_first(x: UOp) -> UOp:
    """An in-place write whose value is stored by a kernel of its own first: the write only copies it."""
    y = x.replace(src=(x.src[0], UOp(Ops.CONTIGUOUS, x.src[1].dtype, (x.src[1],)), *x.src[2:]))
    if (made := write_order(x)) >= 0:
        y.__dict__.setdefault(_WRITE_ORDER, made)
    return y


@step("store decisions", after=("matmul panels",), category="schedule pass")
def _store_decisions(s: _Schedule, ctx: None) -> _Schedule:
    if s.values_first:
        # a retry after a cycle of writes (_WriteCycle): every written value is computed (from the old contents)
        # before any write lands, as torch's eager ops would have
        _rebuild(s, lambda n, x: (_value_first(x), False) if n.op is Ops.ASSIGN else (x, False))
    s.planner.decide()  # decisions 1 to 4 of the module docstring
    if copies := s.planner.copy_first:
        # decision 1b for a stored leaf: a kernel after a write reads the memory's old contents as they are (a node
        # realized into it, t1 = x * 4 with t3 = x * 4 realized and then written). The old contents are copied by a
        # kernel of their own, which runs before the write, and the graph reads the copy.
        _rebuild(s, lambda n, x: (UOp(Ops.CONTIGUOUS, n.dtype, (n,)), False) if n in copies else (x, False))
        s.planner.decide()
        if s.planner.copy_first:  # the copies are stored: nothing should be left to copy
            raise RuntimeError(
                "a kernel reads both the old and the new contents of a buffer written in place: "
                "realize the old value (.contiguous().realize()) before the write"
            )
    return s


@step("cap kernel depth", after=("store decisions",), category="schedule pass")
def _cap_kernel_depth(s: _Schedule, ctx: None) -> _Schedule:
    s.planner.cap_kernel_size(KERNEL_OPS.value)  # decision 5
    return s


# last of the decisions: a store added by an earlier pass is a buffer this one counts
@step("fit buffer limits", after=("cap kernel depth",), category="schedule pass")
def _fit_buffer_limits(s: _Schedule, ctx: None) -> _Schedule:
    s.planner.fit_buffer_limits(_device_max_buffers)  # decision 6
    return s


@step("allocate buffers", after=("fit buffer limits",), category="schedule pass")
def _allocate_buffers(s: _Schedule, ctx: None) -> _Schedule:
    s.stored = [n for n in s.planner.order if n in s.planner.stored]
    for n in s.stored:
        asked = s.stands_for.get(n, n)
        if n.op is Ops.ASSIGN:
            # written in place; later graphs see the new value through a fresh alias of the same memory
            target = n.src[0].base.arg
            s.out_bufs[n] = target
            s.becomes[asked] = _written_view(n, target)
            continue
        s.out_bufs[n] = Buffer(n.device, alloc_size(n.shape), n.dtype, shape=n.shape)
        if s.asked is not None and asked not in s.asked:
            s.internal.append(s.out_bufs[n])  # made by a pass (matmul panels): no tensor reads it
        else:
            s.becomes[asked] = UOp.buffer_view(s.out_bufs[n], asked.shape)
    return s


def _verify_built(s: _Schedule, where: str) -> None:
    for ast, _ in s.kernels:
        verify_kernel(ast, where)


@step("build kernels", after=("allocate buffers",), verify=_verify_built, category="schedule pass")
def _build_kernels(s: _Schedule, ctx: None) -> _Schedule:
    for n in s.stored:
        if n.op is Ops.COPY:
            src, src_buf = _copy_source(n.src[0], s.realized, s.out_bufs)
            s.kernels.append((UOp(Ops.COPY, n.dtype, (), n.device), [s.out_bufs[n], src_buf]))
            s.reads.append({src})
            continue
        kb = _KernelBuilder(n, s.planner.stored, s.realized, s.out_bufs, s.var_vals)
        s.kernels.append((kb.kernel(), kb.bufs))
        s.reads.append(kb.reads)
    return s


def _verify_merged(s: _Schedule, where: str) -> None:
    for si in s.items:
        verify_kernel(si.ast, where)


@step("merge kernels", after=("build kernels",), verify=_verify_merged, category="schedule pass")
def _merge_kernels(s: _Schedule, ctx: None) -> _Schedule:
    """Decision 7: independent kernels of one iteration space, on one dependency level, become one."""
    level = _levels(s.stored, s.reads)
    groups: dict[tuple, list[int]] = {}
    for i, (ast, bufs) in enumerate(s.kernels):
        # kernels merge only on one device (the parts of a sharded tensor have the same shapes on every device)
        alone = ast.op is Ops.COPY or _register_tiled(ast)
        groups.setdefault((level[i], bufs[0].device, ("alone", i) if alone else _signature(ast)), []).append(i)
    schedule: list[tuple[int, ScheduleItem]] = []
    for (lvl, _, _), members in groups.items():
        limit = _device_max_buffers(s.kernels[members[0]][1][0].device)
        for part in _within_limit([s.kernels[i] for i in members], limit):
            ast, bufs = _merge(part) if len(part) > 1 else part[0]
            schedule.append((lvl, ScheduleItem(ast, tuple(bufs))))
    schedule.sort(key=lambda x: x[0])
    s.items = [si for _, si in schedule]
    return s


SCHEDULE_PASSES = (
    _matmul_panels,
    _store_decisions,
    _cap_kernel_depth,
    _fit_buffer_limits,
    _allocate_buffers,
    _build_kernels,
    _merge_kernels,
)


def _create_schedule(outs: list[UOp], realized: dict[UOp, UOp]) -> _Schedule:
    try:
        s = _run_schedule_passes(outs, realized, values_first=False)
    except _WriteCycle:
        s = _run_schedule_passes(outs, realized, values_first=True)
    if DEBUG >= 1 and s.items:
        print(f"scheduled {len(s.items)} kernels for {len(s.stored)} stored nodes")
    return s


def _run_schedule_passes(outs: list[UOp], realized: dict[UOp, UOp], values_first: bool) -> _Schedule:
    s, run = _Schedule(_Planner(outs, realized), realized, values_first=values_first), PassRun()
    for p in SCHEDULE_PASSES:
        s = run(p, s)
    return s
