"""Reverse-mode autodiff on the tensor graph: gradients are lazy graphs too, and fuse like everything else.

Derivative rules are data: one entry per op, mapping (incoming gradient, the node, its sources, its output) to
one gradient per source (None where the source gets no gradient). Rules are written with Tensor methods so
broadcasting, dtypes and shapes stay right without repeating that logic here.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import operator
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

from lazygrad.dtype import dtypes
from lazygrad.helpers import argsort, library_lock
from lazygrad.uop.ops import GroupOp, Ops, UOp
from lazygrad.uop.program import FORWARD_RUN, GraphProgram, note_replay

if TYPE_CHECKING:
    from lazygrad.tensor import Tensor

Grads = tuple["Tensor | None", ...]


def _reduce_grad(g: Tensor, node: UOp, x: Tensor, out: Tensor) -> Grads:
    op, axes = node.arg
    if op is Ops.ADD:
        return (g.expand(x.shape),)
    if op is Ops.MAX:
        # ties share the gradient equally, like torch.amax; a NaN maximum is shared by the NaNs, as torch.max's (no
        # element equals it: every gradient was 0 / 0)
        top = out.expand(x.shape)
        hit = ((x == top) | ((x != x) & (top != top)) if dtypes.is_float(x.dtype) else x == top).cast(g.dtype)
        return (hit * (g / hit.sum(axes, keepdim=True)).expand(x.shape),)
    if op is Ops.MUL:
        # d/dx_i prod(x) is the product of the others: out / x_i without zeros; with one zero in the window only
        # that position gets a gradient (the product of the nonzero rest); with two or more, none does
        zero = x == 0
        zeros = zero.cast(dtypes.int32).sum(axes, keepdim=True).expand(x.shape)
        others = zero.where(1.0, x).prod(axes, keepdim=True).expand(x.shape)
        g = g.expand(x.shape)
        return ((zeros == 0).where(g * out.expand(x.shape) / x, ((zeros == 1) & zero).where(g * others, 0.0)),)
    raise NotImplementedError(f"no derivative for reduce {op}")


def _expand_grad(g: Tensor, node: UOp, x: Tensor) -> Grads:
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, node.shape)) if a != b)
    return (g.sum(axes, keepdim=True, dtype=g.dtype),)


def _max_grad(g: Tensor, node: UOp, a: Tensor, b: Tensor) -> Grads:
    # torch.maximum splits the gradient evenly where a == b; where either is NaN (the result), both get all of it
    half = (a == b).where(g * 0.5, g)
    ga = (a < b).where(0.0, half)
    gb = (a > b).where(0.0, half)
    return (ga, gb)


def _pow_grad(g: Tensor, node: UOp, a: Tensor, b: Tensor, out: Tensor) -> Grads:
    # torch's conventions at the edges: no gradient to a where b == 0 (so 0**0 and x**0 give 0, not NaN), and
    # d/db a**b = a**b * log(a) taken as 0 where a == 0 and b >= 0 (-inf where b < 0)
    ga = (b == 0).where(0.0, g * b * a.pow(b - 1))
    gb = ((a == 0) & (b >= 0)).where(0.0, g * out * a.log())
    return (ga, gb)


LN2 = math.log(2)

# op -> rule(g, node, *sources as Tensors[, output as Tensor])
grad_rules: dict[Ops, Callable[..., Grads]] = {
    Ops.ADD: lambda g, n, a, b: (g, g),
    Ops.SUB: lambda g, n, a, b: (g, -g),
    Ops.MUL: lambda g, n, a, b: (g * b, g * a),
    # -g (a / b) / b, as torch: b * b underflows (b = 1e-30 in float32: -inf for a = 1e-30, NaN for a = 0)
    Ops.FDIV: lambda g, n, a, b: (g / b, -g * (a / b) / b),
    Ops.NEG: lambda g, n, a: (-g,),
    Ops.RECIP: lambda g, n, a, out: (-g * out * out,),
    Ops.SQRT: lambda g, n, a, out: (g / (out * 2),),
    Ops.EXP2: lambda g, n, a, out: (g * out * LN2,),
    Ops.LOG2: lambda g, n, a: (g / (a * LN2),),
    Ops.SIN: lambda g, n, a: (g * a.cos(),),
    Ops.COS: lambda g, n, a: (-(g * a.sin()),),
    Ops.TRUNC: lambda g, n, a: (g.zeros_like(),),
    Ops.MOD: lambda g, n, a, b: (g, -g * a.div(b, rounding_mode="trunc")),  # float fmod; integer MOD never carries grad
    Ops.MAX: _max_grad,
    Ops.POW: _pow_grad,
    Ops.WHERE: lambda g, n, c, a, b: (None, c.where(g, 0.0), c.where(0.0, g)),
    Ops.CAST: lambda g, n, a: (g.cast(a.dtype),),
    Ops.RESHAPE: lambda g, n, a: (g.reshape(a.shape),),
    Ops.PERMUTE: lambda g, n, a: (g.permute(argsort(n.arg)),),
    Ops.EXPAND: _expand_grad,
    Ops.PAD: lambda g, n, a: (g.shrink(tuple((lo, lo + s) for s, (lo, _) in zip(a.shape, n.arg))),),
    Ops.SHRINK: lambda g, n, a: (g.pad(tuple((lo, s - hi) for s, (lo, hi) in zip(a.shape, n.arg))),),
    Ops.FLIP: lambda g, n, a: (g.flip(tuple(i for i, f in enumerate(n.arg) if f)),),
    Ops.REDUCE_AXIS: _reduce_grad,
    Ops.CONTIGUOUS: lambda g, n, a: (g,),
    Ops.ASSIGN: lambda g, n, target, value: (None, g),  # the tensor's value is what was assigned
    Ops.COPY: lambda g, n, a: (g.to(a.device),),
    Ops.MULTI: lambda g, n, *parts: _multi_grad(g, n),
}


def _multi_grad(g: Tensor, node: UOp) -> Grads:
    """Each part of a sharded tensor gets its slice of the gradient, on its own device."""
    from lazygrad.schedule.multi import part_bounds

    if node.arg is None:  # replicas of one value: the gradient goes back once, through the first
        return (g.to(node.src[0].device), *(None for _ in node.src[1:]))
    ax = node.arg
    return tuple(
        g.to(p.device).shrink(tuple((lo, hi) if i == ax else None for i in range(g.ndim)))
        for p, (lo, hi) in zip(node.src, part_bounds(node))
    )


_USES_OUTPUT = {Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.POW, Ops.REDUCE_AXIS}
# ops whose result is piecewise constant or not a number: no gradient flows through them
_NO_GRAD = GroupOp.Comparison | {Ops.IDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.BITCAST, Ops.DETACH}


# tensors that backward() was called on, until an optimizer step realizes them with the update: a loss read after
# opt.step() must show the value it had before the parameters changed, as in torch (weak: dropped ones vanish). Per
# thread: a step takes the roots of its own thread's backward calls. Shared, a thread training beside another took
# the other's loss into its step whenever its step fell between the other's backward and step, and both steps' kernels
# fused otherwise than in a run alone (the weights then differed by an ulp now and then)
class _Roots(threading.local):
    def __init__(self) -> None:
        self.pending: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


_roots = _Roots()


def note_backward_root(t: Tensor) -> None:
    _roots.pending[id(t)] = t


def take_backward_roots() -> list[Tensor]:
    """The tensors this thread called backward() on since its last call, that are not in memory yet."""
    pending = _roots.pending
    out = [t for t in pending.values() if not t.uop.is_realized]
    pending.clear()
    return out


def _blocks(n: UOp) -> bool:
    # a cast to an integer or bool is piecewise constant too, as in torch
    return n.op in _NO_GRAD or (n.op is Ops.CAST and not dtypes.is_float(n.dtype))


# the ops of the nodes _blocks may answer True for: the walks over every node of a step's graph (grad_reachable, the
# requires_grad walk) call it only for these, a set lookup at C speed for the rest
MAY_BLOCK = _NO_GRAD | {Ops.CAST}


def _reaching(root: UOp, targets: set[UOp]) -> tuple[list[UOp], dict[UOp, bool]]:
    """root's graph in topological order, and for each node whether a target is reachable from it through
    differentiable ops (never through detach, comparisons or integer arithmetic)."""
    topo = list(root.toposort)
    reaches: dict[UOp, bool] = {}
    for n in topo:
        reaches[n] = n in targets or (not _blocks(n) and any(reaches[s] for s in n.src))
    return topo, reaches


def grad_reachable(root: UOp, targets: set[UOp]) -> set[UOp]:
    """The targets that root depends on differentiably."""
    return _walk_reachable(root) & targets if targets else set()


def _walk_reachable(root: UOp) -> set[UOp]:
    """root and every node below it on a path that no op blocking gradients cuts (never through detach, comparisons
    or integer arithmetic)."""
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op not in MAY_BLOCK or not _blocks(n):
            stack.extend(n.src)
    return seen


# in the __dict__ of a node whose derivative the composite op that built it states directly, instead of the
# derivatives of the movement ops it is made of: (the source it is a function of, incoming gradient -> that source's).
# On the hash-consed node, so a window built twice shares its rule and a dropped one forgets it; asked of every node
# a backward keys (_Structure) at C speed, where a weak-keyed dictionary made a weak reference per node
_SHORTCUT = "grad_shortcut"


def define_gradient(node: UOp, source: UOp, rule: Callable[[Tensor], Tensor]) -> None:
    """Differentiate `node` with respect to `source` by `rule`. For a sliding window (conv, pooling) the chain
    rule through its repeat/reshape/shrink ops gives a reduce over every repeated copy with div/mod index math; the
    rule gives the same sum as a few shifted pads of the window gradient."""
    node.__dict__[_SHORTCUT] = (source, rule)
    for made in getattr(_recorders, "stack", ()):
        made.append((node, source, rule))


class BorrowedRule:
    """The derivative rule of another node (`old`), for a node rebuilt from it over new sources (backward swapping a
    realized buffer for the graph that computed it): old's rule while old lives, None after (the chain rule then
    applies). Held weakly: a rule is a closure over old's nodes, and a cached rebuilt graph holding it would keep
    every realized buffer it read alive (a loop reading its state each step)."""

    __slots__ = ("old",)

    def __init__(self, old: UOp):
        self.old = weakref.ref(old)

    def __call__(self, g: Tensor) -> Tensor | None:
        old = self.old()
        shortcut = old.__dict__.get(_SHORTCUT) if old is not None else None
        return shortcut[1](g) if shortcut is not None else None


_recorders = threading.local()  # this thread's open recording_definitions blocks


@contextlib.contextmanager
def recording_definitions() -> Iterator[list[tuple[UOp, UOp, Callable[[Tensor], Tensor]]]]:
    """Every define_gradient call this thread makes inside the block (a composite replayed from a program makes
    them again over its new nodes)."""
    if not hasattr(_recorders, "stack"):
        _recorders.stack = []
    made: list[tuple[UOp, UOp, Callable[[Tensor], Tensor]]] = []
    _recorders.stack.append(made)
    try:
        yield made
    finally:
        _recorders.stack.pop()


def recording() -> bool:
    """Whether this thread is inside a recording_definitions block (a composite being recorded as a program)."""
    return bool(getattr(_recorders, "stack", None))


def compute_gradient(
    root: UOp, root_grad: Tensor, targets: set[UOp], shape: _Structure | None = None, pending: bool = False
) -> dict[UOp, Tensor]:
    """d(root)/d(target) for each target reachable from root, as lazy Tensors (weighted by root_grad). A graph of the
    structure of one differentiated before (a training step's, over new buffers) replays that one's gradient program
    instead of running the rules again. `shape`: root's _Structure with root_grad as its seed, where the caller made it
    (backward, which finds its leaves with it). `pending`: a replayed program's gradients may be left unbuilt
    (_GradProgram.run)."""
    from lazygrad.tensor import Tensor

    if shape is None:
        shape = _Structure(root, root_grad.uop, not Tensor.is_grad_enabled())
    graph = shape.graph
    key = shape.program_key(targets) if graph is not None else None
    if key is not None and (program := graph.programs.get(key)) is not None:  # type: ignore[union-attr]
        seen = shape.entries_seen
        return program.run(shape.nodes, pending, None if seen is None else (shape.index, shape.entries_at, seen))
    grads = _apply_rules(root, root_grad, targets)
    if key is not None and (program := _GradProgram.record(shape.nodes, grads)) is not None:
        with _programs_lock:
            if len(graph.programs) >= GRAD_PROGRAMS:  # type: ignore[union-attr]
                del graph.programs[next(iter(graph.programs))]  # type: ignore[union-attr]
            graph.programs[key] = program  # type: ignore[union-attr]
    return grads


def _apply_rules(root: UOp, root_grad: Tensor, targets: set[UOp]) -> dict[UOp, Tensor]:
    from lazygrad.tensor import Tensor

    # only nodes on a path to a target carry gradient
    topo, reaches = _reaching(root, targets)
    grads: dict[UOp, Tensor] = {root: root_grad}
    for node in reversed(topo):
        g = grads.get(node)
        # a target whose sources reach no other target (a leaf) passes nothing on
        if g is None or _blocks(node) or not any(reaches[s] for s in node.src):
            continue
        if (
            (shortcut := node.__dict__.get(_SHORTCUT)) is not None
            and reaches[shortcut[0]]
            and (sg := shortcut[1](g)) is not None  # (a BorrowedRule whose node died: the chain rule)
        ):
            src = shortcut[0]
            if sg.shape != src.shape:
                raise AssertionError(f"gradient shortcut of {node.op} has shape {sg.shape}, expected {src.shape}")
            grads[src] = grads[src] + sg if src in grads else sg
            continue
        rule = grad_rules.get(node.op)
        if rule is None:
            if node.op in (Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.DEVICE, Ops.BIND):
                continue
            raise NotImplementedError(f"no derivative rule for {node.op}")
        srcs = [Tensor(s) for s in node.src]
        extra = (Tensor(node),) if node.op in _USES_OUTPUT else ()
        for s, sg in zip(node.src, rule(g, node, *srcs, *extra)):
            if sg is None or not reaches[s]:
                continue
            if sg.shape != s.shape:
                raise AssertionError(f"gradient of {node.op} has shape {sg.shape}, expected {s.shape}")
            grads[s] = grads[s] + sg if s in grads else sg
    # as a replayed program's gradients (_GradProgram.run): tensors of their own, not views of the rules' temporaries
    # (a new tensor, not the view itself: it may be the seed gradient the caller passed). A view keeps its base alive,
    # a lazy tensor reading the weights, which then joined the optimizer step as an output: the first step of a
    # process (by the rules) fused otherwise than every later one (replayed)
    out = {t: grads[t] for t in targets if t in grads}
    out = {t: Tensor(g.uop) if g._view_of is not None else g for t, g in out.items()}
    # two targets of one gradient node (two biases added to one output: a residual block's BatchNorms) hold memories
    # of their own: the later one a copy, as realizing both would make it (tensor.py _own_memory), made here so that a
    # replayed program builds it too and an optimizer step reads distinct nodes, left unbuilt
    owner: dict[UOp, UOp] = {}
    for t, g in out.items():
        if owner.setdefault(g.uop, t) is not t:
            out[t] = g.contiguous()
    return out


# *** gradient programs: a training step differentiates a graph of one structure on every call, over new buffers ***


class _Structure:
    """The graph of root and its seed gradient in a canonical order (children first: the toposort's, with a replayed
    composite's nodes in its run's order) and as a hashable key that leaves out which buffers it reads: graphs with
    equal keys have equal gradients, node for node. A node with a derivative of its own (define_gradient) is keyed with
    its rule where the rule is structure (see rule_key); where it is a closure, there is no key (the rules run every
    time).

    The key finds the graph's _Graph: what a backward asks of every step's graph that is structure alone (which nodes
    a gradient reaches, the programs by target set) is known there after the first step, where each backward walked
    the graph for it again. `n_root`: root's nodes come first (then the seed's other nodes); `realized_at`: the
    positions of root's nodes that hold a realized entry (backward finds tensors by their stored values too)."""

    def __init__(self, root: UOp, seed: UOp, no_grad: bool):
        from lazygrad.schedule.kernelize import REALIZED_ENTRY

        # the realized registry's count of changes (RealizedNodes.changes) before the walk, where the caller noted it:
        # what the walk finds of realized entries holds while the count is the same
        self.entries_seen: int | None = None

        # one walk numbers the nodes (in the order of root.toposort but for composites' runs, then the seed's other
        # nodes) and keys them, where a toposort and then a pass over it cost a digits CNN backward ~25% more.
        # The key is flat, as the schedule cache's walk keys a graph: per node (op, dtype, arg, number of sources)
        # and their positions, per composite's run ("R", program, number of inputs) and its inputs' positions, then per
        # node with a rule of its own ("S", it, its source, the rule); each record's length is known from its start,
        # so equal keys are equal graphs (a tuple per node was two objects per node a backward kept to its end).
        # a node's position is its place in `index` (numbered in insertion order; the node list is made from it at the
        # end), and which nodes hold a realized entry or a rule of their own is found at the end in C-level passes
        index: dict[UOp, int] = {}
        parts: list[Any] = []
        record = parts.extend
        at = index.__getitem__  # mapped over a node's sources at C speed (a comprehension is a call per node)
        for start in (root, seed):
            stack: list[Any] = [start]
            while stack:
                n = stack.pop()
                if n is _RUN:
                    # a replayed composite's output, its inputs numbered: its run's nodes are numbered in the run's
                    # order at C speed, keyed as the program and its inputs' positions (the program builds the same
                    # nodes over the same inputs). Nodes numbered before (a constant two runs share, or one a run
                    # built twice) keep their place, the filter asking the index as it grows: which those are follows
                    # from the key's earlier records, so equal keys still mean equal graphs
                    n = stack.pop()
                    program, vals, n_in = n.__dict__[FORWARD_RUN]
                    record((_RUN_RECORD, program, n_in))
                    record(map(at, vals[:n_in]))
                    index.update(
                        zip(itertools.filterfalse(index.__contains__, vals[n_in:]), itertools.count(len(index)))
                    )
                    index[n] = len(index)
                elif n is _DONE:
                    n = stack.pop()
                    arg = n.arg
                    if n.op is _BUFFER:
                        arg = (arg.size, arg.device)  # which buffer it is: a position in the walk, not part of the key
                    elif type(arg) is float:
                        arg = repr(arg)  # -0.0 == 0.0, but a gradient through it is another graph than through 0.0
                    record((n.op, n.dtype.key, arg, len(n.src)))  # (a dtype by its number: C-level hash)
                    record(map(at, n.src))
                    index[n] = len(index)
                elif n not in index:
                    run = n.__dict__.get(FORWARD_RUN)
                    stack.append(n)
                    if run is None:
                        stack.append(_DONE)
                        stack.extend(reversed(n.src))
                    else:
                        stack.append(_RUN)
                        stack.extend(reversed(run[1][: run[2]]))
            if start is root:
                self.n_root = len(index)
        nodes = list(index)
        memos = list(map(_DICT_OF, nodes))
        has = operator.contains
        # every node's, the seed's too: a step's realize reuses it for the gradient run's inputs (Replay.inputs_at)
        entries = list(itertools.compress(itertools.count(), map(has, memos, itertools.repeat(REALIZED_ENTRY))))
        self.entries_at = entries
        realized_at = entries if not entries or entries[-1] < self.n_root else [p for p in entries if p < self.n_root]
        ruled = itertools.compress(itertools.count(), map(has, memos, itertools.repeat(_SHORTCUT)))
        self.root, self.no_grad = root, no_grad
        self.nodes, self.index, self.seed = nodes, index, seed
        self.realized_at = realized_at
        self.graph: _Graph | None = None
        if len(nodes) > GRAD_PROGRAM_NODES:
            return
        for i in ruled:
            source, rule = nodes[i].__dict__[_SHORTCUT]
            if (keyed := rule_key(rule)) is None or source not in index:
                return
            record(("S", i, index[source], keyed))
        key = tuple(parts)
        if (graph := _programs.get(key)) is None:
            graph = _Graph()
            with _programs_lock:
                if len(_programs) >= GRAD_PROGRAMS:
                    del _programs[next(iter(_programs))]
                _programs[key] = graph
        self.graph = graph

    def program_key(self, targets: set[UOp]) -> tuple:
        """What picks a program among the graph's: the seed's place, the targets' places, how many are elsewhere."""
        index = self.index
        where = sorted([index[t] for t in targets if t in index])  # (a list: a generator is a call per target)
        return (index[self.seed], tuple(where), len(targets) - len(where), self.no_grad)

    def reached(self) -> frozenset[int]:
        """The positions of the nodes grad_reachable's walk from root meets (those a gradient can reach): the
        graph's, known after the first backward of its structure."""
        graph = self.graph
        assert graph is not None, "a graph with no key has no positions to remember"
        if graph.reached is None:
            graph.reached = frozenset(map(self.index.__getitem__, _walk_reachable(self.root)))
        return graph.reached

    def holding(self, targets: set[UOp]) -> frozenset[int]:
        """The positions of root's nodes whose graph holds one of `targets` (nodes of root's graph): the graph's, known
        after the first backward of its structure asking it of targets at the same positions, where backward walked
        the graph of every tensor computed from a parameter (a model's logits) again on every step."""
        graph = self.graph
        assert graph is not None, "a graph with no key has no positions to remember"
        at = frozenset(map(self.index.__getitem__, targets))
        found = graph.holding.get(at)
        if found is None:
            # children first: a node's sources are numbered before it
            index, hit = self.index, [False] * self.n_root
            for i, n in enumerate(self.nodes[: self.n_root]):
                hit[i] = i in at or any(hit[index[s]] for s in n.src)
            found = frozenset(itertools.compress(range(self.n_root), hit))
            with _programs_lock:
                if len(graph.holding) >= GRAD_PROGRAMS:
                    graph.holding.clear()
                graph.holding[at] = found
        return found


class _Graph:
    """What is structure alone in a graph backward differentiates: the positions a gradient reaches, the positions
    holding given ones (_Structure.holding), and the gradient programs recorded over graphs of this structure, by
    program_key."""

    __slots__ = ("reached", "holding", "programs")

    def __init__(self) -> None:
        self.reached: frozenset[int] | None = None
        self.holding: dict[frozenset[int], frozenset[int]] = {}
        self.programs: dict[tuple, _GradProgram] = {}


def rule_key(rule: Callable) -> tuple | None:
    """A derivative rule as structure: a module function with fixed arguments (a sliding window's sizes) is one;
    a closure is code that may hold anything, so None."""
    if type(rule) is not functools.partial:
        return None
    # kept on the rule: a replayed composite gives its new nodes the rule objects it recorded, so every backward
    # over them asks again (a digits CNN step rebuilt the keys of its window rules on every backward)
    cached = rule.__dict__.get(_RULE_KEY, _UNKEYED)
    if cached is not _UNKEYED:
        return cached
    keywords = tuple((k, _frozen(v)) for k, v in sorted(rule.keywords.items()))
    key: tuple | None = (rule.func, _frozen(rule.args), keywords)
    try:
        hash(key)
    except TypeError:
        key = None
    rule.__dict__[_RULE_KEY] = key
    return key


_RULE_KEY = "lazygrad_rule_key"  # in a derivative rule's (a functools.partial's) __dict__: its rule_key
_UNKEYED = object()


def _frozen(x: Any) -> Any:
    return tuple(_frozen(v) for v in x) if isinstance(x, (list, tuple)) else x


class _GradProgram:
    """The gradient graph of a structure as a GraphProgram over its walk, with what each gradient reads through a
    shifted view (assign's race check asks it of every optimizer update): known here, it is noted on the replayed
    nodes instead of walking the gradient graph again on every step."""

    def __init__(self, program: GraphProgram, targets: list[int], shifted: list[tuple[int, ...] | None]):
        self.program, self.targets, self.shifted = program, targets, shifted
        # the gradients may be left pending (unbuilt) where what an optimizer's race check asks of them is known: what
        # each reads shifted. Of that, an unbuilt run notes the nodes it holds (inputs, held nodes): the others are
        # nodes the program builds, never a buffer (record returns None) nor the memory an optimizer writes (that
        # check asks a pending gradient of buffer targets only, see nn/optim.py _StepProgram.replay)
        self.pends = None not in shifted
        # per gradient, a C-level getter of the nodes it reads shifted, of a built run's nodes and of an unbuilt one's
        # (FILLER at every place but its inputs, held nodes, outputs and the movement ops below them: those left out);
        # made on first use (a comprehension per gradient per step: ~220 opcodes each)
        self._picks: dict[bool, list[Callable[[list[Any]], Any] | None]] = {}

    @staticmethod
    def record(nodes: list[UOp], grads: dict[UOp, Tensor]) -> _GradProgram | None:
        from lazygrad.tensor import lazy_shifted_bases

        recorded = GraphProgram.record(nodes, [g.uop for g in grads.values()])
        if recorded is None:
            return None
        program, at = recorded
        shifted = [lazy_shifted_bases(g.uop, nodes) for g in grads.values()]
        refs = [None if s is None or any(x not in at for x in s) else tuple(at[x] for x in s) for s in shifted]
        return _GradProgram(program, [at[t] for t in grads], refs)

    def run(self, nodes: list[UOp], pending: bool = False, inputs_at: tuple | None = None) -> dict[UOp, Tensor]:
        """The gradients over the graph `nodes`. `pending`: left unbuilt where the program allows (pends), as tensors
        that build them when first read (tensor.py pending_tensor): an optimizer step over them next reads only their
        places (an MLP Adam step built 40 gradient nodes and dropped them at its end, ~40 us of its ~1000).
        `inputs_at`: what the graph's _Structure knows of `nodes`, noted with the run (see Replay.inputs_at)."""
        from lazygrad.tensor import _result, pending_tensor

        if not (pending and self.pends):
            vals = self.program.run(nodes)
            # (its inputs: the graph in the order of the program's key)
            note_replay(self, vals, len(nodes), True, None, inputs_at)
            self._note_shifted(vals)
            return {vals[t]: _result(vals[g]) for t, g in zip(self.targets, self.program.outs)}
        tensors: list[weakref.ref] = []
        vals, run = self.program.unbuilt(nodes, functools.partial(self._built, tensors), noted=True)
        note_replay(self, vals, len(nodes), True, run, inputs_at)
        self._note_shifted(vals, len(nodes))
        out = {}
        for t, g in zip(self.targets, self.program.outs):
            grad = pending_tensor(vals[g])
            tensors.append(weakref.ref(grad))
            out[vals[t]] = grad
        return out

    def _note_shifted(self, vals: list[Any], unbuilt_over: int | None = None) -> None:
        """Note what each gradient reads shifted on its node; `unbuilt_over`: the run is unbuilt, over that many
        inputs (its FILLER places are left out)."""
        from lazygrad.tensor import note_shifted_bases

        unbuilt = unbuilt_over is not None
        picks = self._picks.get(unbuilt)
        if picks is None:
            placed = set(self.program.placed(unbuilt_over)[0]) if unbuilt_over is not None else None
            picks = self._picks[unbuilt] = [
                None if shifted is None else _picker([i for i in shifted if placed is None or i in placed])
                for shifted in self.shifted
            ]
        for g, pick in zip(self.program.outs, picks):
            if pick is not None:
                note_shifted_bases(vals[g], pick(vals))

    def _built(self, tensors: list[weakref.ref], vals: list[UOp]) -> None:
        """The pending gradients were built (one was read, or a schedule walks them): each tensor still holding its
        unbuilt node holds the node."""
        from lazygrad.tensor import settle_pending

        self._note_shifted(vals)
        for ref, g in zip(tensors, self.program.outs):
            if (t := ref()) is not None:
                settle_pending(t, vals[g])


def _picker(positions: list[int]) -> Callable[[list[Any]], Any]:
    """A C-level getter of the nodes at `positions` of a run's list, as a sequence (of one position, a pair of the
    node twice: itemgetter of one gives the node alone; of none, an empty slice)."""
    if not positions:
        return operator.itemgetter(slice(0, 0))
    return operator.itemgetter(*positions) if len(positions) > 1 else operator.itemgetter(positions[0], positions[0])


_DONE = object()  # _Structure's walk: below it on the stack, a node whose sources are numbered
_RUN = object()  # _Structure's walk: below it on the stack, a replayed composite's output whose inputs are numbered
_RUN_RECORD = "R"  # a run's record in _Structure's key (a node's record starts with its op)
_DICT_OF = operator.attrgetter("__dict__")
_BUFFER = Ops.BUFFER  # (an Enum member read is ~50 ns on Python 3.11: read once, not once per node)
_programs: dict[tuple, _Graph] = {}  # _Structure's key -> its graph
GRAD_PROGRAMS = 64  # graphs kept, and programs per graph (shapes that change every call would otherwise grow them)
# larger graphs are differentiated by the rules every time: a key and a program are as large as the graph, and a
# graph that deep is rarely one step of a loop (100,000 chained ops: a key of 100,000 parts kept per program)
GRAD_PROGRAM_NODES = 20_000
_programs_lock = library_lock()
