"""Graph programs: the nodes some code added on top of a graph, recorded once and rebuilt over other inputs.

A training step runs the same frontend code (the gradient rules, an optimizer's update) over a graph of the same
structure on every call, only over new buffers. The code's Python (tensor ops, broadcasting, dtype rules) costs far
more than the nodes it builds; a program rebuilds just the nodes, hash-consed as the code would have built them.
"""

from __future__ import annotations

import threading
from operator import itemgetter
from typing import Any, Callable, NamedTuple

from lazygrad.uop.ops import GroupOp, Ops, UOp, hash_consed

# a scalar broadcast (a constant on its device, reshaped and expanded to a tensor's shape): a step that reads no input
# and holds no buffer builds the same node on every replay. The ops such a node and its sources have
_FIXED = frozenset({Ops.CONST, Ops.DEVICE, Ops.RESHAPE, Ops.EXPAND})
SCALAR_BROADCAST = "scalar_broadcast"  # in a node's __dict__: scalar_broadcast's answer (a node never changes)
# in a replayed composite's output node's __dict__: (program, the run's other nodes, number of inputs)
FORWARD_RUN = "lazygrad_forward_run"


def scalar_broadcast(node: UOp) -> bool:
    """Whether node is a constant (on its device) reshaped and expanded to int sizes: no buffer, bound value or
    symbolic size below it. (A realized entry on a node inside makes no difference: it holds the constant's value.)
    The nodes a GraphProgram holds, and those the schedule cache's walk keys whole (schedule/kernelize.py)."""
    known = node.__dict__.get(SCALAR_BROADCAST)
    if known is None:
        n = node
        while (n.op is Ops.RESHAPE or n.op is Ops.EXPAND) and type(sum(n.arg)) is int:
            n = n.src[0]
        known = n.op is Ops.CONST and type(n.arg) in (int, float, bool) and all(s.op is Ops.DEVICE for s in n.src)
        node.__dict__[SCALAR_BROADCAST] = known
    return known


class GraphProgram:
    """(op, dtype, source positions, arg) per added node, over positions: the inputs first, then each added node in
    the order it was built. Holds no node of the recorded graph that reads an input, so no buffer stays alive through
    it; the scalar broadcasts, which read none, it holds (`fixed`): rebuilt on every replay they were about a sixth
    of an MLP training step's new nodes, each hash-consed, dropped with the step's graph and seen by the collector."""

    __slots__ = ("steps", "outs", "known", "picks", "fixed", "filled", "_placed", "_chains")

    def __init__(self, steps: list[tuple], outs: list[int], known: list[dict], fixed: list[UOp | None]):
        self.steps, self.outs, self.fixed = steps, outs, fixed
        # per step of two sources or more, a C-level getter of their tuple (a comprehension per node built cost
        # about as much again as the node's hash-consing)
        self.picks = [itemgetter(*src) if len(src) > 1 else None for _, _, src, _ in steps]
        # each output's shape and device: the same over inputs of the same shapes and devices, so a replay notes them
        # (as the code's tensor ops computed them) instead of leaving them to a walk over every node it built
        self.known = known
        # what unbuilt() puts at the added positions before the outputs: the held nodes, FILLER elsewhere
        self.filled = [FILLER if node is None else node for node in fixed]
        self._placed: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None  # (n_in, placed(n_in)'s two)
        self._chains: tuple[int, list[list[int]]] | None = None  # (n_in, each output's chain(), base first)

    def placed(self, n_in: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The positions of an unbuilt run over `n_in` inputs (unbuilt()) that hold a node of their own, in order: the
        inputs, the held nodes, the outputs and the movement ops below them; FILLER is at every other one. And the
        held nodes' positions: of the added ones, the only ones holding a node that may be older than the run (the
        others hold Unbuilts)."""
        if self._placed is None or self._placed[0] != n_in:
            held = tuple(n_in + i for i, node in enumerate(self.fixed) if node is not None)
            chains = (q for chain in self.chains(n_in) for q in chain)
            self._placed = (n_in, tuple(sorted({*range(n_in), *held, *chains})), held)
        return self._placed[1:]  # type: ignore[return-value]

    def chains(self, n_in: int) -> list[list[int]]:
        """Each output's chain() over `n_in` inputs, base first."""
        if self._chains is None or self._chains[0] != n_in:
            self._chains = (n_in, [self.chain(q, n_in)[::-1] for q in self.outs])
        return self._chains[1]

    def chain(self, q: int, n_in: int) -> list[int]:
        """Position q and the added positions below it through movement ops, down to its base (a gradient is mostly
        a reshape or permute of what its kernel stores: the schedule stores that base, the tensor views it)."""
        out = [q]
        while q >= n_in:
            op, _, src, _ = self.steps[q - n_in]
            if op not in GroupOp.Movement or len(src) != 1 or src[0] < n_in:
                break
            q = src[0]
            out.append(q)
        return out

    @staticmethod
    def record(
        inputs: list[UOp], outputs: list[UOp], repeats: bool = False
    ) -> tuple[GraphProgram, dict[UOp, int]] | None:
        """The program that builds `outputs` from `inputs`, and the position of every node it names; None where an
        output reaches a buffer other than through the inputs (a replay would share that buffer, not make a new one).
        A repeated input: None, as a position would not name one node, unless `repeats` (the caller's key holds which
        inputs repeat): then its first position names it."""
        at: dict[UOp, int] = {}
        for i, n in enumerate(inputs):
            at.setdefault(n, i)
        n_in = len(inputs)
        if len(at) != n_in and not repeats:
            return None
        steps: list[tuple] = []
        fixed: list[UOp | None] = []
        for root in outputs:
            stack = [root]
            while stack:
                n = stack[-1]
                if n in at:
                    stack.pop()
                    continue
                todo = [s for s in n.src if s not in at]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                if n.op is Ops.BUFFER:
                    return None
                src = tuple([at[s] for s in n.src])
                # (its sources held steps too, never an input: a replay's inputs differ)
                held = (
                    n.op in _FIXED
                    and all(s >= n_in and fixed[s - n_in] is not None for s in src)
                    and (n.op is Ops.DEVICE or scalar_broadcast(n))
                )
                at[n] = n_in + len(steps)
                steps.append((n.op, n.dtype, src, n.arg))
                fixed.append(n if held else None)
        known = [{"shape": o.shape, "device": o.device} for o in outputs]
        return GraphProgram(steps, [at[o] for o in outputs], known, fixed), at

    def run(self, inputs: list[UOp]) -> list[UOp]:
        """Every node of the program over `inputs`, by position (the outputs are at `self.outs`)."""
        vals = list(inputs)
        append = vals.append
        # (hash_consed called, not UOp: the metaclass's call slot costs ~530 instructions more a node, ~80 nodes of an
        # MLP step's forward)
        new = hash_consed
        for (op, dtype, src, arg), pick, node in zip(self.steps, self.picks, self.fixed):
            if node is not None:
                append(node)
            elif pick is not None:
                append(new(UOp, op, dtype, pick(vals), arg))
            else:
                append(new(UOp, op, dtype, (vals[src[0]],) if src else (), arg))
        for out, known in zip(self.outs, self.known):
            cache = vals[out].__dict__
            for name, value in known.items():
                cache.setdefault(name, value)
        return vals

    def unbuilt(
        self, inputs: list[Any], on_build: Callable[[list[UOp]], None], noted: bool = False
    ) -> tuple[list[Any], UnbuiltRun]:
        """run()'s positions with the added nodes left unbuilt (see Unbuilt): each output an Unbuilt (a movement op's
        with Unbuilts of the movement ops below it), each held node itself, FILLER elsewhere; and the run that builds
        them when asked (then calls `on_build` with the nodes). `noted`: each output notes its shape and device, as
        run() notes them on the built ones (a gradient's, read by an optimizer's step key)."""
        run = UnbuiltRun(self, inputs, on_build)
        vals = [*inputs, *self.filled]
        n_in = len(inputs)
        steps, new = self.steps, Unbuilt.__new__
        chains = self._chains[1] if self._chains is not None and self._chains[0] == n_in else self.chains(n_in)
        for q, chain, known in zip(self.outs, chains, self.known):
            # each output with the movement ops below it, base first: a movement op's Unbuilt holds its source's
            for p in chain:
                if vals[p] is FILLER:  # (not yet placed by another output's chain)
                    # (UnbuiltRun.node inline: a call per output and movement op below one, on every step)
                    op, dtype, src, arg = steps[p - n_in]
                    u = new(Unbuilt)
                    u.op, u.dtype, u.arg, u.run, u.at, u.held = op, dtype, arg, run, p, True
                    u.src = (vals[src[0]],) if src else ()
                    vals[p] = u
            if noted:
                vals[q].__dict__.update(known)
        return vals, run


class UnbuiltRun:
    """A program's run over `inputs` whose nodes are not built yet (GraphProgram.unbuilt); build() builds them once."""

    __slots__ = ("program", "inputs", "on_build", "vals")

    def __init__(self, program: GraphProgram, inputs: list[UOp], on_build: Callable[[list[UOp]], None]):
        self.program, self.inputs, self.on_build = program, inputs, on_build
        self.vals: list[UOp] | None = None

    def build(self) -> list[UOp]:
        if self.vals is None:
            # (an input may be another run's unbuilt output: an optimizer's update over pending gradients)
            inputs = [u.built() if type(u) is Unbuilt else u for u in self.inputs]
            self.vals = self.program.run(inputs)
            self.on_build(self.vals)
        return self.vals

    def node(self, q: int, target: Any = None, held: bool = True) -> Unbuilt:
        """An Unbuilt for position q; an output's holds its first source (an in-place write's target, the one source
        the scheduler and the frontend read of it; a movement op's source). `held`: a tensor may hold it (or a view
        of it), so a schedule storing it says what it became."""
        op, dtype, _, arg = self.program.steps[q - len(self.inputs)]
        u = Unbuilt.__new__(Unbuilt)
        u.op, u.dtype, u.arg, u.run, u.at, u.held = op, dtype, arg, self, q, held
        u.src = (target,) if target is not None else ()
        return u


class Unbuilt:
    """A node of a replayed program that was not built. A training step's realize whose layout is known (the template
    its runs lay out, schedule/kernelize.py) reads of an optimizer update's new nodes only their positions, of the
    stored ones their op and dtype, and of an output (an in-place write) its target: an MLP's Adam update built 94
    nodes a step and dropped them at its end (~50 us of a ~720 us step, 188 of its ~1520 Python calls). An Unbuilt
    stands for one of them there; the tensor an update assigns holds it until the realize stores it (never longer:
    the optimizer holds the realize lock meanwhile). Anything else asks for the real node (built())."""

    __slots__ = ("op", "dtype", "src", "arg", "run", "at", "held", "__dict__", "__weakref__")

    op: Any
    dtype: Any
    src: tuple
    arg: Any
    run: UnbuiltRun | None
    at: int
    held: bool

    # UOp's own, as they read only op, dtype, src and arg, which an unbuilt node has as a node does: base (a
    # gradient's view of what its kernel stores, down to a built node maybe) and rebase (its movement ops, built over
    # another base: the view of the buffer it was stored in)
    base = UOp.base
    rebase = UOp.rebase

    def built(self) -> UOp:
        assert self.run is not None, "FILLER stands for no node"
        return self.run.build()[self.at]


# every added position of an unbuilt run that is no output and no held node: one object, since nothing reads more than
# its place there (a stored one is given an Unbuilt of its own, see schedule/kernelize.py _Laid.fill)
FILLER = Unbuilt.__new__(Unbuilt)
FILLER.op, FILLER.dtype, FILLER.src, FILLER.arg, FILLER.run, FILLER.at = None, None, (), None, None, -1
FILLER.held = False


# *** the runs a schedule may meet: a training step's realize computes what its programs just built ***


class Replay(NamedTuple):
    """One run of a program (a gradient or optimizer program, replayed): its nodes, the first `n_in` of them its
    inputs. `structured`: the program was picked by a key holding the structure of its inputs' graph, in the order
    they are listed (a gradient program's walk of the forward graph); otherwise its key says only what kind of node
    each input is, and a schedule knows the structure of an input only where it is a buffer node or another run's."""

    program: Any  # the replayed program: equal programs over inputs of one structure build one structure
    vals: list[Any]  # (Unbuilt ones where `unbuilt` is the run that builds them)
    n_in: int
    structured: bool
    unbuilt: UnbuiltRun | None = None
    # a gradient run's inputs as its graph's _Structure found them (gradient.py): each one's position, the positions
    # of those holding a realized entry, and the realized registry's count of changes when they were looked at (a
    # schedule whose registry counts otherwise looks again)
    inputs_at: tuple[dict[Any, int], list[int], int] | None = None


_replays = threading.local()  # this thread's runs since its last schedule (a step's backward, then its update)
REPLAYS_KEPT = 8  # a thread replaying without realizing keeps its last few runs, not every one


def note_replay(
    program: Any,
    vals: list[Any],
    n_in: int,
    structured: bool,
    unbuilt: UnbuiltRun | None = None,
    inputs_at: tuple[dict[Any, int], list[int], int] | None = None,
) -> None:
    """A run this thread's next schedule may find its graph in (schedule/kernelize.py: the step's layout)."""
    log = _replays.__dict__.setdefault("log", [])
    if len(log) >= REPLAYS_KEPT:
        del log[0]
    log.append(Replay(program, vals, n_in, structured, unbuilt, inputs_at))


def built(runs: list[Replay]) -> list[Replay]:
    """The runs with their nodes built (an unbuilt run's, for a schedule that walks them)."""
    return [r if r.unbuilt is None else r._replace(vals=r.unbuilt.build(), unbuilt=None) for r in runs]


def take_replays() -> list[Replay]:
    """This thread's runs since its last schedule that took them, forgotten here (a schedule computing their nodes
    takes them: a run is the graph of the next such realize or of none)."""
    log = _replays.__dict__.get("log")
    if not log:
        return []
    _replays.log = []
    return log


def keep_replays(runs: list[Replay]) -> None:
    """Give back runs taken by a schedule that computes none of their nodes (a tensor read mid-step)."""
    log = _replays.__dict__.setdefault("log", [])
    log[:0] = runs
    del log[: max(0, len(log) - REPLAYS_KEPT)]
