"""TinyJit: run a function once, capture the kernels of its second call, then replay them with new inputs.

What a replay does and does not do (the pitfalls, each tested in test/engine/test_jit.py):
  * Only kernels replay. Python code in the function runs on the first two calls only: its branches, Python
    numbers and anything it reads from globals are frozen at the capture (the second call).
  * Tensor arguments are inputs: replays read the buffers of the tensors passed in that call. Their shape, dtype
    and device must match the capture, else JitError. Every other argument must equal (==) its captured value,
    else JitError; pass a changing integer as a bound Variable (`Variable("pos", 0, 100).bind(n)`) and the
    kernels take it as an argument, so every value replays the same capture. A Variable may also be a size
    (`cache[:, :, 0:pos+1]`, a Tensor argument sliced to it): sizes are compared without their values, the
    kernels loop to the bound value, and returned tensors of a symbolic shape get each call's value.
  * Output buffers are owned by the JIT and reused: a replay returns new Tensor objects over the same memory, so
    the tensors returned by the previous call change when the function is called again. Keep a copy
    (`.numpy()`, `.clone().realize()`) of what must survive the next call.
  * Reading data (`.numpy()`, `.item()`, `.tolist()`, `bool(t)`) inside the function raises JitError at capture.
  * `Tensor.training` and `no_grad` at the call must be what they were at the capture, else JitError.
  * Random numbers (`Tensor.rand`, `randint`, dropout) are drawn anew on every replay, as tinygrad's: each random
    call's kernels read its counter from a buffer, and a replay writes the next counters of the stream there, so
    a replay draws what the same call would without the JIT. The seed is the capture's: `manual_seed` with another
    seed between replays restarts the counters, not the seed (a warning at capture if the function reseeds).
  * Gradients reach the parameters the function uses, not its Tensor arguments (return those gradients). A backward
    adding into an existing .grad (no zero_grad in the function) adds into the .grad each replay finds, as torch's
    accumulation does (none after `p.grad = None`): the capture's own .grad is not kept.
  * A sharded Tensor argument is one input per part; a replay checks that it is split as at the capture.
  * Each thread calling a TinyJit has a capture of its own (its own first two calls run the function): a replay
    writes the capture's buffers, and threads sharing one capture read each other's inputs and outputs.
On the CPU a replay is one call of a compiled driver that calls every kernel (see runtime/graph_cpu.py); with
DEBUG>=2 (or inside another JIT's capture) the kernels run one by one and print their lines marked "jit replay".
"""

from __future__ import annotations

import functools
import struct
import threading
import warnings
import weakref
from typing import Any, Callable, Generic, Sequence, TypeVar

from lazygrad.device import Buffer, Device
from lazygrad.engine.memory import plan_memory
from lazygrad.engine.realize import CompiledRunner, ExecItem, JitError, capture, is_capturing
from lazygrad.helpers import DEBUG, JIT, count_launched
from lazygrad.tensor import (
    Tensor,
    forget_values_read_from,
    grad_bindings,
    pending_writes_since,
    random_counter_buffers,
    realize_readers_of,
    realized_values_hidden,
    take_random_counters,
    tensors_made,
)
from lazygrad.uop.ops import Ops, UOp, bound_in, rebind, sym_unbind
from lazygrad.viz import profile

__all__ = ["TinyJit", "JitError"]

R = TypeVar("R")


def _realize_writes(args: list[Any], began: int) -> None:
    """Run the writes the function made and left lazy (t[i] = v, t.assign(v), p -= lr * g): into its Tensor arguments
    and into any other live tensor (a module's parameters, a global), so the capture records them and every call,
    replays included, makes them, whether or not the function realized them."""
    pending = [a for a in args if isinstance(a, Tensor) and a.uop.base.op is Ops.ASSIGN]
    pending += [t for t in pending_writes_since(began) if all(t is not a for a in pending)]
    if pending:
        Tensor.realize(*pending)


def _new_grads(before: dict[int, tuple[Tensor, Tensor | None]]) -> list[tuple[Tensor, Tensor | None]]:
    """The tensors (requires_grad=True) whose .grad the function set, each with its new gradient, computed now if
    lazy (so the capture records its kernels and every replay computes it): a replay runs no Python, and a parameter's
    .grad would otherwise keep what the last call that ran the function left there (an eager step's gradient)."""
    changed = [(t, t.grad) for key, (t, g) in grad_bindings().items() if key not in before or before[key][1] is not g]
    if lazy := [g for _, g in changed if g is not None and g.uop.base.op is not Ops.BUFFER]:
        Tensor.realize(*lazy)
    return changed


def _grads_as_inputs(
    before: dict[int, tuple[Tensor, Tensor | None]],
) -> list[tuple[Tensor, Tensor, Tensor, list[Buffer]]]:
    """Every existing .grad swapped for a fresh alias of its memory (of each part's, sharded) for the capture:
    a backward accumulating into it (torch's p.grad += g) then reads inputs, which every replay refills from the
    tensor's .grad at that call, where the kernels read the capture's .grad forever (a stale gradient added to each
    replay's, even after p.grad = None). (tensor, its .grad, the alias's tensor, the alias buffers) each."""
    out = []
    for t, g in before.values():
        if g is None:
            continue
        if isinstance(g.device, tuple):
            t.grad, aliases = _sharded_alias(_sharded_stored(g))
        else:
            aliases = [(g._plain_buffer() or g._contiguous_buffer()).alias()]
            t.grad = Tensor.from_uop(UOp.buffer_view(aliases[0], g.shape))
        out.append((t, g, t.grad, aliases))
    return out


def _substitute(t: Tensor, arg: Tensor, position: int, subs: dict[int, int]) -> Tensor:
    """An argument's stand-in for the capture: a parameter passed as an argument stays one (a backward inside the
    function reaches it and accumulates into its .grad), and its .grad is bound to the argument of each call."""
    t._requires_grad = arg._requires_grad
    if arg._requires_grad:
        t.requires_grad = True  # (the setter: registered as a leaf that requires grad)
        t.grad = arg.grad
        subs[id(t)] = position
    return t


def _grad_owner(t: Tensor, subs: dict[int, int]) -> weakref.ref | int:
    """Whose .grad a binding sets: an argument's stand-in's is the argument's at each call (its position), any other
    tensor's its own."""
    return subs[id(t)] if id(t) in subs else weakref.ref(t)


def _owner(ref: weakref.ref | int, args: Sequence[Any]) -> Tensor | None:
    return args[ref] if type(ref) is int else ref()  # type: ignore[operator]


def _tensors_in(ret: Any) -> list[Tensor]:
    if isinstance(ret, Tensor):
        return [ret]
    if isinstance(ret, (list, tuple)):
        return [t for x in ret for t in _tensors_in(x)]
    if isinstance(ret, dict):
        return [t for x in ret.values() for t in _tensors_in(x)]
    return []


def _rebuild(ret: Any, make: Callable[[Tensor], Tensor]) -> Any:
    """The structure of `ret` with each Tensor replaced by make(tensor)."""
    if isinstance(ret, Tensor):
        return make(ret)
    if isinstance(ret, (list, tuple)):
        out = [_rebuild(x, make) for x in ret]
        return type(ret)(*out) if hasattr(ret, "_fields") else type(ret)(out)
    if isinstance(ret, dict):
        return {k: _rebuild(v, make) for k, v in ret.items()}
    return ret


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False  # == without a truth value (arrays): only the very same object is the same argument


def _hide_bound_results() -> Any:
    """A value computed before the capture from a bound variable is stale on the next replay (other value), so the
    scheduler must not reuse it during the capture. (Values computed from the inputs need no hiding: the capture
    reads its inputs through fresh buffer aliases.)"""
    # a bound variable in sources or in symbolic sizes; a write done in place (ASSIGN) before the capture is state,
    # not a value to compute again (a KV cache written at an earlier position)
    return realized_values_hidden(lambda node: node.op is not Ops.ASSIGN and bool(bound_in(node)))


_TENSOR, _VAR, _CONST = "tensor", "var", "const"


def _copy_of(buf: Buffer) -> Buffer:
    copy = Buffer(buf.device, buf.size, buf.dtype, shape=buf.shape)
    copy.copyin(buf.as_bytes())
    return copy


def _sharded_stored(a: Tensor) -> UOp:
    """Sharded `a` as a MULTI whose parts are each a whole buffer in memory (a lazy or strided one computed first)."""
    return (a if a._is_stored() else a.contiguous().realize()).uop


def _split(m: Tensor) -> tuple:
    """How sharded `m` is split: its axis and part shapes."""
    u = _sharded_stored(m)
    return u.arg, tuple(p.shape for p in u.src)


def _stored_parts(g: Tensor) -> list[Buffer]:
    """The buffers holding g: one, or one per part of a sharded g."""
    if isinstance(g.device, tuple):
        return [p.base.arg for p in _sharded_stored(g).src]
    return [g._plain_buffer() or g._contiguous_buffer()]


def _sharded_alias(m: UOp) -> tuple[Tensor, list[Buffer]]:
    """A tensor over a fresh alias of each part of the stored sharded `m`, and those aliases."""
    aliases = [p.base.arg.alias() for p in m.src]
    parts = tuple(p.rebase(UOp.buffer_view(b, (b.size,))) for p, b in zip(m.src, aliases))
    return Tensor.from_uop(m.replace(src=parts)), aliases


class _Arg:
    """What the capture saw in one argument position, and how a replay checks and uses that position."""

    __slots__ = ("kind", "slot", "shape", "dtype", "device", "value", "last", "shape_vars", "writes")

    def __init__(
        self, kind: str, slot: int = -1, shape: Any = None, dtype: Any = None, device: Any = None, value: Any = None
    ):
        self.kind, self.slot, self.shape, self.dtype, self.device, self.value = kind, slot, shape, dtype, device, value
        self.last: UOp | None = None  # the input UOp whose buffer pointer the graph holds (holds that buffer alive)
        # a Tensor of a symbolic shape: its shape without values, and the variable slot each of its variables fills
        self.shape_vars: tuple[tuple[UOp, int], ...] = ()
        self.writes = False  # the captured kernels write into this argument (an in-place op on it)


def _write_back(copies: list[tuple[Tensor, Buffer]], replaced: frozenset) -> None:
    """An argument the function writes into in place, given to the kernels as a copy (a view of another tensor, a
    lazy value), takes the copy's new contents: as in torch, a write into a view lands in the tensor it views (a
    pending write, as every in-place op; before, the view's tensor never saw it). Not where the argument is over
    memory the call itself rewrote (`replaced`: an earlier output fed back, which a replay overwrites with its new
    output): the pending write would land on that new output."""
    for a, buf in copies:
        memories = {x.arg.memory for x in a.uop.toposort if x.op is Ops.BUFFER}
        if buf.memory not in memories and not memories & replaced:
            a.assign(Tensor.from_uop(UOp.buffer_view(buf, a.shape)))


class CapturedJit:
    """The kernels of one capture over a table of buffers; input slots are refilled on every replay."""

    def __init__(
        self,
        recorded: list[tuple[ExecItem, dict[UOp, int]]],
        args: list[_Arg],
        kw_names: tuple[str, ...],
        inputs: list[Buffer],
        ret: Any,
        mode: tuple[bool, bool],
        draws: tuple[int, int] = (0, 0),
        grads: list[tuple[weakref.ref, Tensor | None]] | None = None,
        grad_inputs: list[tuple[weakref.ref, Tensor]] | None = None,
    ):
        self.args, self.kw_names, self.n_args = args, kw_names, len(args)
        # (parameter, the .grad the capture left it): set again after every replay, whose kernels rewrite that grad
        self.grads = grads or []
        # (parameter, its .grad at the capture): the .grads the kernels read (accumulate into), the inputs after the
        # arguments' (see _grads_as_inputs)
        self.grad_inputs = grad_inputs or []
        self.training, self.no_grad = mode  # Tensor.training and no_grad shape the graph: frozen like the rest
        # the returned structure over the JIT's own Tensor objects: the caller may reassign the ones it got
        self.ret = _rebuild(ret, lambda t: Tensor.from_uop(t.uop))
        out_uops = [t.uop for t in _tensors_in(self.ret)]
        out_bufs = {b for u in out_uops for b in (x.arg for x in u.toposort if x.op is Ops.BUFFER)}
        # share memory between intermediates; inputs and outputs are the user's and never share
        items = [(ei.bufs, ei.runner.spec.outs) for ei, _ in recorded]
        mapping = plan_memory(items, keep=set(inputs) | out_bufs, label="JIT ")
        del items
        table: list[Buffer] = list(inputs)
        slot_of: dict[Buffer, int] = {b: i for i, b in enumerate(inputs)}
        var_slot: dict[UOp, int] = {a.value: a.slot for a in args if a.kind is _VAR}
        var_slot.update((v, slot) for a in args for v, slot in a.shape_vars)
        self.var_vals: list[int] = [0] * (max(var_slot.values(), default=-1) + 1)
        self.items: list[tuple[CompiledRunner, tuple[int, ...], tuple[int, ...]]] = []
        for ei, vals in recorded:
            bslots = []
            for b in ei.bufs:
                b = mapping.get(b, b)
                if b not in slot_of:
                    slot_of[b] = len(table)
                    table.append(b)
                bslots.append(slot_of[b])
            vslots = []
            for v in ei.runner.spec.vars:
                if v not in var_slot:  # bound inside the function: its captured value is frozen
                    var_slot[v] = len(self.var_vals)
                    self.var_vals.append(vals[v])
                vslots.append(var_slot[v])
            self.items.append((ei.runner, tuple(bslots), tuple(vslots)))
        # the capture's inputs are dropped here (every replay brings its own); the rest is the JIT's to keep
        self.n_inputs, self.buffers = len(inputs), table[len(inputs) :]
        # random calls of the capture (counter before it, calls): the buffers of their counters, each with its offset
        # from the first counter the capture took (a random tensor drawn before the capture is a constant of it)
        first, self.n_draws = draws[0] + 1, draws[1]
        counters = random_counter_buffers(self.buffers) if self.n_draws else {}
        self.counter_slots = [(b, c - first) for b, c in counters.items() if 0 <= c - first < self.n_draws]
        for b in self.buffers:
            b.ensure_allocated()
        # what a replay writes: an input in one of these (an output fed back) could change while a kernel reads it
        self.written = {table[bslots[j]] for r, bslots, _ in self.items for j in r.spec.outs} - set(inputs)
        # the arguments an in-place op writes into: a call given a copy of one (a view, a lazy value) writes it back
        written_slots = {bslots[j] for r, bslots, _ in self.items for j in r.spec.outs}
        for a in args:
            a.writes = a.kind is _TENSOR and a.value is None and a.slot in written_slots
        self.written_memory = frozenset(b.memory for b in self.written)
        self.kernel_count = len(self.items)
        self.ops = sum(r.spec.ops for r, _, _ in self.items)
        self.mem = sum(r.spec.mem for r, _, _ in self.items)
        self.counts = (self.kernel_count, self.ops, self.mem, 0.0)  # what a replay adds to GlobalCounters
        # outputs: the same UOp every replay unless it reads an input (the function returned an input or a view of one)
        self.input_nodes: dict[UOp, int] = {}
        for u in out_uops:
            for x in u.toposort:
                if x.op is Ops.BUFFER and slot_of.get(x.arg, len(inputs)) < len(inputs):
                    self.input_nodes[x] = slot_of[x.arg]
        # outputs of a symbolic shape: each replay rebinds their sizes to its own values of the argument variables
        arg_vars = dict(var_slot)
        self.out_binds = {b: arg_vars[b.src[0]] for u in out_uops for b in bound_in(u) if b.src[0] in arg_vars}
        plain = not self.input_nodes and not self.out_binds
        self.single_out = out_uops[0] if isinstance(ret, Tensor) and plain else None
        self.graph = self._make_graph()
        if DEBUG >= 1:
            how = "one CPU graph call" if self.graph is not None else "kernel by kernel"
            n_vars = len(self.var_vals)
            print(f"JIT captured {len(self.items)} kernels, {len(inputs)} inputs, {n_vars} variables, {how} per replay")

    def _make_graph(self) -> Any:
        """The device's graph over the captured kernels (one call per replay), or None: kernel by kernel."""
        kinds = {r.device.split(":")[0] for r, _, _ in self.items}  # CPU and CPU:1 kernels are C functions alike
        if len(kinds) != 1 or (graph_class := Device[kinds.pop()].graph) is None:
            return None
        programs = [getattr(r, "prg", None) for r, _, _ in self.items]  # copies between devices have no program
        if not graph_class.accepts(programs):
            return None
        calls = [(b, v) for _, b, v in self.items]
        graph = graph_class(programs, calls, self.n_inputs + len(self.buffers), len(self.var_vals))
        for i, b in enumerate(self.buffers):
            graph.bufs[self.n_inputs + i] = b.ptr
        for i, v in enumerate(self.var_vals):
            graph.vars[i] = v
        return graph

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        if kwargs or self.kw_names:
            args = self._merge_kwargs(args, kwargs)
        if len(args) != self.n_args:
            raise JitError(f"called with {len(args)} arguments, captured with {self.n_args}")
        if Tensor.training is not self.training or Tensor.is_grad_enabled() is self.no_grad:
            now = f"Tensor.training={Tensor.training} and no_grad={not Tensor.is_grad_enabled()}"
            raise JitError(
                f"captured with Tensor.training={self.training} and no_grad={self.no_grad}, called with {now}: "
                "the captured kernels follow the capture's mode"
            )
        if self.n_draws:
            self._next_random_counters()
        graph = self.graph
        if graph is None or self.input_nodes or is_capturing() or DEBUG.value >= 2 or profile.enabled():
            return self._replay_kernels(args)
        # the hot path: write the changed slots of the graph's arrays, one ctypes call, wrap the outputs
        copies: list[tuple[Tensor, Buffer]] = []
        # every buffer whose address goes into the table, held to the call: the table holds bare addresses, and a copy
        # made for this call (a view, a lazy value) was freed as soon as the loop moved on, so the kernels read memory
        # that the allocator had taken back (an earlier slice input read freed memory: garbage where the allocator's
        # cache was off, another buffer's values where it handed the block on)
        held: list[Buffer] = []
        for spec, a in zip(self.args, args):
            kind = spec.kind
            if kind is _TENSOR:
                if type(a) is Tensor and a.uop is spec.last:
                    continue  # the same input as last call: its buffer pointer is already in place
                if spec.value is not None:  # sharded: one slot per part
                    for j, buf in enumerate(self._sharded_input(spec, a)):
                        graph.bufs[spec.slot + j] = buf.ptr
                        held.append(buf)
                    continue
                buf, own = self._input(spec, a)
                graph.bufs[spec.slot] = buf._ptr or buf.ptr
                held.append(buf)
                spec.last = a.uop if own else None  # never cache a copy: it goes stale
                if spec.writes and not own:
                    copies.append((a, buf))
                for slot, val in self._shape_values(spec, a):
                    graph.vars[slot] = self.var_vals[slot] = val
            elif kind is _VAR:
                graph.vars[spec.slot] = self.var_vals[spec.slot] = self._var_value(spec, a)
            elif a is not spec.value and not _same(a, spec.value):
                self._const_mismatch(spec, a)
        grad_bufs = self._grad_buffers(args)
        for slot, buf in enumerate(grad_bufs, self.n_inputs - len(grad_bufs)):
            graph.bufs[slot] = buf._ptr or buf.ptr
            held.append(buf)
        realize_readers_of(self.written_memory)  # lazy values computed from what this replay overwrites, computed first
        graph.call()
        forget_values_read_from(
            self.written_memory
        )  # values computed earlier from what this replay overwrote are stale
        count_launched(self.counts)
        if copies:
            _write_back(copies, self.written_memory)
        if self.grads:
            self._set_grads(args)
        if self.single_out is not None:
            return Tensor.from_uop(self.single_out)
        return self._outputs({})

    def _grad_buffers(self, args: Sequence[Any]) -> list[Buffer]:
        """The buffers of the .grads the kernels accumulate into (each part's, sharded), as they are at this call:
        zeros for a .grad set to None since (torch's next backward gives the new gradient alone)."""
        out = []
        for ref, was in self.grad_inputs:
            g = t.grad if (t := _owner(ref, args)) is not None else None
            if g is None:
                for part in _stored_parts(was):
                    buf = Buffer(part.device, part.size, part.dtype)
                    buf.copyin(memoryview(bytearray(buf.nbytes)))
                    out.append(buf)
                continue
            if g.shape != was.shape or g.dtype != was.dtype or g.device != was.device:
                raise JitError(
                    f"a .grad the captured backward accumulates into was {was.shape} {was.dtype} on {was.device} at "
                    f"capture, now {g.shape} {g.dtype} on {g.device}"
                )
            if isinstance(g.device, tuple) and _split(g) != _split(was):
                raise JitError(
                    "a sharded .grad the captured backward accumulates into is split otherwise than at the capture"
                )
            # this capture's own gradient (a replay rewrites it) as a copy
            out += [_copy_of(b) if b.memory in self.written_memory else b for b in _stored_parts(g)]
        return out

    def _set_grads(self, args: Sequence[Any]) -> None:
        for ref, g in self.grads:
            if (t := _owner(ref, args)) is not None:
                t.grad = g

    def _next_random_counters(self) -> None:
        """Take as many counters of the random stream as the capture's random calls did, and write them where those
        calls' kernels read theirs: every replay draws new numbers."""
        first = take_random_counters(self.n_draws)
        for buf, offset in self.counter_slots:
            buf.copyin(memoryview(struct.pack("<I", (first + offset) & 0xFFFFFFFF)))

    def _replay_kernels(self, args: tuple) -> Any:
        """Kernel by kernel: for DEBUG>=2 lines, inside another capture (which records them), on devices without a
        graph, and when an output is an input (rebuilt around this call's input)."""
        inputs: list[Buffer] = []
        copies: list[tuple[Tensor, Buffer]] = []
        for spec, a in zip(self.args, args):
            if spec.kind is _TENSOR and spec.value is not None:
                inputs.extend(self._sharded_input(spec, a))
            elif spec.kind is _TENSOR:
                buf, own = self._input(spec, a)
                inputs.append(buf)
                if spec.writes and not own:
                    copies.append((a, buf))
                for slot, val in self._shape_values(spec, a):
                    self.var_vals[slot] = val
            elif spec.kind is _VAR:
                self.var_vals[spec.slot] = self._var_value(spec, a)
            elif a is not spec.value and not _same(a, spec.value):
                self._const_mismatch(spec, a)
        inputs += self._grad_buffers(args)
        table = inputs + self.buffers
        realize_readers_of(self.written_memory)
        for runner, bslots, vslots in self.items:
            var_vals = {v: self.var_vals[s] for v, s in zip(runner.spec.vars, vslots)}
            ExecItem(runner, [table[s] for s in bslots]).run(var_vals, jit=True)
        forget_values_read_from(self.written_memory)
        if copies:
            _write_back(copies, self.written_memory)
        if self.grads:
            self._set_grads(args)
        swap = {node: UOp.buffer_view(inputs[i], (inputs[i].size,)) for node, i in self.input_nodes.items()}
        return self._outputs(swap)

    def _outputs(self, swap: dict[UOp, UOp]) -> Any:
        """The returned structure, its outputs rebuilt around this call's inputs (`swap`) and bound values."""
        for b, slot in self.out_binds.items():
            swap[b] = b.replace(src=(b.src[0], b.src[1].const_like(self.var_vals[slot]), *b.src[2:]))
        return _rebuild(self.ret, lambda t: Tensor.from_uop(rebind(t.uop, swap) if swap else t.uop))

    def _merge_kwargs(self, args: tuple, kwargs: dict[str, Any]) -> tuple:
        if tuple(sorted(kwargs)) != self.kw_names:
            raise JitError(f"keyword arguments {sorted(kwargs)} differ from the captured {list(self.kw_names)}")
        return (*args, *(kwargs[k] for k in self.kw_names))

    def _input(self, spec: _Arg, a: Any) -> tuple[Buffer, bool]:
        """The buffer this call's tensor argument gives the kernels, after checking it against the capture, and
        whether it is the tensor's own buffer (not a copy)."""
        self._input_check(spec, a)
        if (buf := a._plain_buffer()) is None:
            return a._contiguous_buffer(), False  # a lazy input is computed, a view (slice, transpose) copied
        if buf.memory in self.written_memory:
            # the previous call's output fed back in (or a slice of it): a kernel may overwrite it while another
            # still reads it
            return _copy_of(buf), False
        return buf, True

    def _input_check(self, spec: _Arg, a: Any) -> None:
        if not isinstance(a, Tensor):
            raise JitError(f"argument {self._name(spec)} was a Tensor at capture, now {type(a).__name__}")
        u = a.uop
        shape = sym_unbind(u.shape)[0] if spec.shape_vars else u.shape
        if shape != spec.shape or (u.dtype is not spec.dtype and u.dtype != spec.dtype) or u.device != spec.device:
            raise JitError(
                f"argument {self._name(spec)}: captured with shape {spec.shape} {spec.dtype} on {spec.device}, "
                f"called with shape {u.shape} {u.dtype} on {u.device}"
            )

    def _sharded_input(self, spec: _Arg, a: Any) -> list[Buffer]:
        """The buffers of a sharded tensor argument's parts (spec.value: the captured split axis and part shapes)."""
        self._input_check(spec, a)
        m = _sharded_stored(a)
        if (m.arg, tuple(p.shape for p in m.src)) != spec.value:
            raise JitError(f"argument {self._name(spec)}: split otherwise than at capture")
        bufs = [p.base.arg for p in m.src]
        return [_copy_of(b) if b.memory in self.written_memory else b for b in bufs]

    @staticmethod
    def _shape_values(spec: _Arg, a: Tensor) -> list[tuple[int, int]]:
        """(variable slot, value) for the variables of a symbolic-shaped Tensor argument, at this call's values."""
        if not spec.shape_vars:
            return []
        vals = sym_unbind(a.shape)[1]
        return [(slot, vals[v]) for v, slot in spec.shape_vars]

    def _var_value(self, spec: _Arg, a: Any) -> int:
        if not (isinstance(a, UOp) and a.op is Ops.BIND and a.src[0] is spec.value):
            name = spec.value.arg[0]
            raise JitError(f"argument {self._name(spec)} was the bound variable {name} at capture, now {a!r}")
        return a.src[1].arg

    def _const_mismatch(self, spec: _Arg, a: Any) -> None:
        raise JitError(
            f"argument {self._name(spec)} was {spec.value!r} at capture, now {a!r}: non-Tensor arguments are "
            "frozen into the captured kernels (pass a changing int as a bound Variable)"
        )

    def _name(self, spec: _Arg) -> str:
        i, n_pos = self.args.index(spec), self.n_args - len(self.kw_names)
        return str(i) if i < n_pos else repr(self.kw_names[i - n_pos])


class _PerThread(threading.local):
    """A TinyJit's calls so far and its capture, in one thread. A capture's buffers (its outputs, its internal
    buffers, the CPU graph's table of input pointers) are written by every replay: one TinyJit called from 4 threads
    returned another thread's results for ~1 call in 12, and one thread's capture could record while another
    replayed."""

    cnt = 0
    captured: CapturedJit | None = None


class TinyJit(Generic[R]):
    """`@TinyJit` on a function of Tensors: the 1st call runs it, the 2nd captures its kernels, later calls replay them.
    `JIT=0` turns it off (every call just runs the function). See the module docstring for what replay freezes."""

    def __init__(self, fxn: Callable[..., R]):
        self.fxn = fxn
        self._mine = _PerThread()
        functools.update_wrapper(self, fxn)

    @property
    def cnt(self) -> int:
        """Calls in this thread so far (up to the capture)."""
        return self._mine.cnt

    @property
    def captured(self) -> CapturedJit | None:
        """This thread's capture (None before its second call)."""
        return self._mine.captured

    def reset(self) -> None:
        """Forget the captures (every thread's): the next call runs normally again and the one after captures anew."""
        self._mine = _PerThread()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # a decorated method: bind the instance, which then is an argument checked like any other
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        mine = self._mine
        if (captured := mine.captured) is not None and JIT:
            if profile.enabled():
                with profile.span("jit replay", "jit", function=self.fxn.__qualname__):
                    return captured(args, kwargs)
            return captured(args, kwargs)
        if not JIT or is_capturing():
            # inside another JIT's capture this one just runs: the outer capture records its kernels on the real
            # buffers, where a capture of its own would hide them behind input aliases
            return self.fxn(*args, **kwargs)
        mine.cnt += 1
        if mine.cnt == 1:
            began = tensors_made()
            ret = self.fxn(*args, **kwargs)
            _realize_writes([*args, *kwargs.values()], began)
            return ret
        with profile.span("jit capture", "jit", function=self.fxn.__qualname__):
            return self._capture(mine, args, kwargs)

    def _capture(self, mine: _PerThread, args: tuple, kwargs: dict[str, Any]) -> R:
        kw_names = tuple(sorted(kwargs))
        values = (*args, *(kwargs[k] for k in kw_names))
        specs: list[_Arg] = []
        inputs: list[Buffer] = []
        call_values: list[Any] = []
        subs: dict[int, int] = {}  # id of an argument's stand-in that requires grad -> the argument's position
        n_vars = 0
        for i, a in enumerate(values):
            if isinstance(a, Tensor) and isinstance(a.device, tuple):
                # sharded: each part is an input of its own, aliased as below
                m = _sharded_stored(a)
                t, aliases = _sharded_alias(m)
                t = _substitute(t, a, i, subs)
                value = (m.arg, tuple(p.shape for p in m.src))
                specs.append(_Arg(_TENSOR, len(inputs), a.shape, a.dtype, a.device, value=value))
                inputs.extend(aliases)
                call_values.append(t)
            elif isinstance(a, Tensor):
                # each input gets a fresh alias of its memory: every node built on it is new to the scheduler, so no
                # value computed from this call's input before the capture can be reused (and be stale on replay)
                alias = (a._plain_buffer() or a._contiguous_buffer()).alias()
                t = _substitute(Tensor.from_uop(UOp.buffer_view(alias, a.shape)), a, i, subs)
                shape, vals = sym_unbind(a.shape)
                specs.append(_Arg(_TENSOR, len(inputs), shape, a.dtype, a.device))
                specs[-1].shape_vars = tuple((v, -1) for v in vals)  # slots numbered after the Variable arguments
                inputs.append(alias)
                call_values.append(t)
            elif isinstance(a, UOp) and a.op is Ops.BIND:
                specs.append(_Arg(_VAR, n_vars, value=a.src[0]))
                n_vars += 1
                call_values.append(a)
            elif isinstance(a, UOp) and a.op is Ops.DEFINE_VAR:
                raise JitError(f"variable {a.arg[0]} is passed unbound: pass {a.arg[0]}.bind(value)")
            elif _tensors_in(a):
                kind = type(a).__name__
                raise JitError(f"argument {i} holds Tensors inside a {kind}: pass each Tensor as its own argument")
            else:
                specs.append(_Arg(_CONST, value=a))
                call_values.append(a)
        # a variable of a symbolic input shape fills the slot of the same Variable passed as an argument, or its own
        slot_of = {spec.value: spec.slot for spec in specs if spec.kind is _VAR}
        for spec in specs:
            for v, _ in spec.shape_vars:
                if v not in slot_of:
                    slot_of[v], n_vars = n_vars, n_vars + 1
            spec.shape_vars = tuple((v, slot_of[v]) for v, _ in spec.shape_vars)
        n_pos = len(args)
        rng, mode = Tensor.rng_state(), (Tensor.training, not Tensor.is_grad_enabled())
        grads_before = grad_bindings()
        held = _grads_as_inputs(grads_before)
        began = tensors_made()
        with capture(began) as recorded, _hide_bound_results():
            ret = self.fxn(*call_values[:n_pos], **dict(zip(kw_names, call_values[n_pos:])))
            if outs := _tensors_in(ret):
                Tensor.realize(*outs)
            _realize_writes(call_values, began)
            for t, g, alias, _ in held:  # a .grad the function left as it was keeps its own tensor
                if t.grad is alias:
                    t.grad = g
            grads = _new_grads(grads_before)
        del outs, call_values
        read = {b for ei, _ in recorded for b in ei.bufs}
        held = [h for h in held if any(b in read for b in h[3])]
        grad_inputs = [(_grad_owner(t, subs), g) for t, g, _, _ in held]
        inputs += [b for _, _, _, aliases in held for b in aliases]
        del held, read
        seed, counter = Tensor.rng_state()
        if seed != rng[0]:
            warnings.warn(
                "a TinyJit function that calls manual_seed draws with the capture's seed on every replay",
                stacklevel=3,
            )
        bound = [(_grad_owner(t, subs), g) for t, g in grads]
        for t, g in grads:  # this call's arguments get the gradients their stand-ins got, as an eager call's would
            if id(t) in subs:
                values[subs[id(t)]].grad = g
        draws = (rng[1], counter - rng[1])
        mine.captured = CapturedJit(recorded, specs, kw_names, inputs, ret, mode, draws, bound, grad_inputs)
        del grads
        copied = [(a, inputs[spec.slot]) for a, spec in zip(values, specs) if spec.writes]
        _write_back(copied, mine.captured.written_memory)
        return ret
