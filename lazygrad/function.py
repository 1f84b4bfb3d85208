"""`@function`: trace a Tensor function once per input structure and reuse the traced graph (tinygrad 0.14's name).

A call collects the Tensors in its arguments (nested in lists, tuples, dicts and objects' attributes, as
`nn.state.get_state_dict` walks them) and keys the call by their names, shapes, dtypes and devices, the other
arguments, and the training / no_grad modes. The first call of a key runs the function on placeholder inputs (fresh,
never allocated buffers) and keeps the lazy graph it returns; every call of the key, the first included, gets that
graph with the placeholders replaced by the actual inputs' graphs. Nothing is realized: the results are ordinary lazy
Tensors (gradients flow through them), and since the graph has the same structure each call, the scheduler's
schedule cache serves every call after the first.

What a trace freezes, and how it is kept safe:
  * Python control flow and non-Tensor values seen through objects' attributes are those of the first call (as in
    TinyJit); plain non-Tensor arguments (ints, strings, ...) are part of the key, others count by identity.
  * a function that draws random numbers, or writes into (assigns) one of its inputs, is traced on every call, since
    a frozen graph would repeat the same random numbers or drop the write;
  * a Tensor read from outside the arguments (a global, a closure) whose memory exists before the call is an
    implicit input: an error, as in tinygrad, unless `allow_implicit=True`, which traces on every call (such a tensor
    may be rebound or written between calls, and the trace would not see it). Tensors the function makes (constants)
    are part of the graph.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Generic, TypeVar

from lazygrad.device import Buffer, buffers_made
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import Ops, UOp, substitute

R = TypeVar("R")

__all__ = ["function"]


_tracing = threading.local()  # per thread: how many @function traces are running (their inputs are placeholders)


def tracing() -> bool:
    """Whether this thread is inside a @function trace: tensors read there hold placeholder values."""
    return getattr(_tracing, "depth", 0) > 0


def _skeleton(x: Any) -> Any:
    """A hashable stand-in for the arguments' non-Tensor part (Tensors are keyed by the state dict)."""
    if isinstance(x, Tensor):
        return Tensor
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *(_skeleton(v) for v in x))
    if isinstance(x, dict):
        return ("dict", *((k, _skeleton(v)) for k, v in x.items()))
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return (type(x).__name__, x)
    return ("id", id(x))


class _Trace:
    """The graph one call traced: output nodes over placeholder BUFFERs, one per distinct input Tensor."""

    def __init__(self, placeholders: list[UOp], outputs: tuple[UOp, ...], as_tuple: bool):
        self.placeholders, self.outputs, self.as_tuple = placeholders, outputs, as_tuple
        self.sink = UOp(Ops.SINK, outputs[0].dtype, outputs)

    def instantiate(self, inputs: list[Tensor]) -> Any:
        # a placeholder is a bare BUFFER; its readers see it flat, so the input goes in flattened
        mapping = {p: t.reshape(p.arg.size).uop for p, t in zip(self.placeholders, inputs)}
        outs = [Tensor(u) for u in substitute(self.sink, mapping).src]
        return tuple(outs) if self.as_tuple else outs[0]


def _outputs(ret: Any, name: str) -> tuple[Tensor, ...]:
    if isinstance(ret, Tensor):
        return (ret,)
    if isinstance(ret, (tuple, list)) and ret and all(isinstance(x, Tensor) for x in ret):
        return tuple(ret)
    raise RuntimeError(f"function {name} must return a Tensor or a tuple of Tensors, not {type(ret).__name__}")


class _Function(Generic[R]):
    def __init__(self, fxn: Callable[..., R], allow_implicit: bool):
        self.fxn, self.allow_implicit = fxn, allow_implicit
        self.name = getattr(fxn, "__qualname__", repr(fxn))
        self.traces: dict[Any, _Trace | None] = {}  # None: this key is traced on every call
        functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return functools.partial(self.__call__, obj) if obj is not None else self

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        from lazygrad.nn.state import get_state_dict

        named = list(get_state_dict((args, kwargs)).items())
        inputs = list({id(t): t for _, t in named}.values())
        position = {id(t): i for i, t in enumerate(inputs)}
        key = (
            tuple((name, t.shape, t.dtype, t.device, position[id(t)]) for name, t in named),
            _skeleton((args, kwargs)),
            Tensor.training,
            not Tensor.is_grad_enabled(),
        )
        if key not in self.traces:
            self.traces[key] = None if self.allow_implicit else self._trace(inputs, args, kwargs)
        if (trace := self.traces[key]) is None:
            ret = self.fxn(*args, **kwargs)
            _outputs(ret, self.name)
            return ret
        return trace.instantiate(inputs)

    def _trace(self, inputs: list[Tensor], args: tuple, kwargs: dict) -> _Trace | None:
        """Run the function on placeholders; None if what it did cannot be replayed (see the module docstring)."""
        real = [t.uop for t in inputs]
        placeholders = [UOp(Ops.BUFFER, t.dtype, (), Buffer(t.device, t.numel(), t.dtype)) for t in inputs]
        first_new_buffer, rng = buffers_made(), Tensor.rng_state()
        try:
            for t, p in zip(inputs, placeholders):
                t.uop = p if t.ndim == 1 else UOp(Ops.RESHAPE, t.dtype, (p,), t.shape)
            traced = [t.uop for t in inputs]
            _tracing.depth = getattr(_tracing, "depth", 0) + 1
            try:
                ret = self.fxn(*args, **kwargs)
            finally:
                _tracing.depth -= 1
            outs = _outputs(ret, self.name)
            wrote_input = any(t.uop is not u for t, u in zip(inputs, traced))
        finally:
            for t, u in zip(inputs, real):
                t.uop = u
        if wrote_input or rng != Tensor.rng_state():
            return None
        trace = _Trace(placeholders, tuple(t.uop for t in outs), as_tuple=not isinstance(ret, Tensor))
        known = set(placeholders)
        implicit = [
            u.arg
            for u in trace.sink.toposort
            if u.op is Ops.BUFFER and u not in known and u.arg.serial < first_new_buffer
        ]
        if implicit:
            listed = ", ".join(f"{b.dtype.name}[{b.size}] on {b.device}" for b in implicit)
            raise RuntimeError(
                f"function {self.name} reads {len(implicit)} tensor(s) that are not among its arguments ({listed}); "
                "pass them as arguments, or decorate with @function(allow_implicit=True) to trace every call"
            )
        return trace


def function(
    fxn: Callable[..., R] | None = None,
    *,
    allow_implicit: bool = False,
    precompile: bool = False,
    precompile_backward: bool = False,
    grad_fxn: Callable | None = None,
) -> Any:
    """`@function` or `@function(allow_implicit=True)`. tinygrad's `precompile` and `precompile_backward` are accepted
    and change nothing (kernels compile at the first realize); lazygrad differentiates the traced graph itself, so a
    custom `grad_fxn` is refused."""
    if grad_fxn is not None:
        raise NotImplementedError("function(grad_fxn=...): lazygrad differentiates the traced graph; no custom rule")
    if fxn is None:
        return lambda f: _Function(f, allow_implicit)
    return _Function(fxn, allow_implicit)
