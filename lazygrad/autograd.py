"""torch.autograd's user-facing pieces: `grad` (gradients of outputs with respect to inputs, as lazy tensors) and
`Function` (a custom forward with its own backward). A Function's output is its forward value, detached, plus one zero
per input that needs a gradient; each zero is a node of its own whose derivative with respect to its input is the
user's backward (gradient.define_gradient), so the backward pass calls it like any other derivative rule."""

from __future__ import annotations

import itertools
import sys
from typing import Any, Sequence

from lazygrad.dtype import dtypes
from lazygrad.gradient import define_gradient
from lazygrad.tensor import Tensor, _broadcasts_to
from lazygrad.uop.ops import Ops, UOp

_ZERO_IDS = itertools.count(1)  # each zero's node number: two applications never share a node (nor its rule)


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...]:
    """torch.autograd.grad: the sum over outputs of d(output)/d(input) weighted by grad_outputs (ones for a scalar
    output), per input. The gradients are lazy tensors of the graph, so they can be differentiated again whatever
    create_graph says; .grad of the inputs is left alone. An input no output depends on is an error unless
    allow_unused (then None, or zeros with materialize_grads)."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if is_grads_batched:
        raise NotImplementedError("grad: is_grads_batched is not supported")
    seeds = [grad_outputs] if isinstance(grad_outputs, Tensor) or grad_outputs is None else list(grad_outputs)
    if grad_outputs is None:
        seeds = [None] * len(outs)
    if len(seeds) != len(outs):
        raise RuntimeError(f"grad: got {len(seeds)} grad_outputs for {len(outs)} outputs")
    total: list[Tensor | None] = [None] * len(ins)
    for out, seed in zip(outs, seeds):
        if seed is None and out.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        for i, g in enumerate(out._gradients(ins, seed)):
            if g is not None:
                total[i] = g if total[i] is None else total[i] + g
    for i, t in enumerate(total):
        if t is None:
            if not (allow_unused or materialize_grads):
                raise RuntimeError(
                    f"One of the differentiated Tensors (input {i}) appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior."
                )
            if materialize_grads:
                total[i] = ins[i].zeros_like()
    return tuple(total)


class FunctionCtx:
    """The `ctx` of a Function: what forward saves for backward."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors: tuple[Tensor, ...] = ()
        self.materialize_grads = True
        self._non_differentiable: set[int] = set()

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        self.saved_tensors = tensors  # type: ignore[assignment]

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        self._non_differentiable |= {id(t) for t in tensors}

    def mark_dirty(self, *tensors: Tensor) -> None:
        """Accepted: an in-place forward's writes are ordinary lazy writes here."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


class Function:
    """torch.autograd.Function: subclass it with static `forward(ctx, *args)` (or `forward(*args)` and
    `setup_context(ctx, inputs, output)`) and `backward(ctx, *grad_outputs)` returning one gradient (or None) per
    argument of forward; call `YourFunction.apply(*args)`. forward runs without gradient tracking, as torch's.
    With several outputs, backward is called once per output that receives a gradient, with zeros (or None, after
    ctx.set_materialize_grads(False)) for the others, and the results are summed: backward is linear in its
    gradients, as a vector-Jacobian product is."""

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Function subclass must define forward")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Tensor) -> Any:
        raise NotImplementedError("a Function subclass must define backward")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any) -> Any:
        needs = tuple(isinstance(a, Tensor) and bool(a.requires_grad) and dtypes.is_float(a.dtype) for a in args)
        ctx = FunctionCtx(needs)
        separate = cls.setup_context is not Function.setup_context
        with Tensor.no_grad():
            result = cls.forward(*args) if separate else cls.forward(ctx, *args)
            if separate:
                cls.setup_context(ctx, args, result)
        outs = list(result) if isinstance(result, tuple) else [result]
        if not any(needs) or not Tensor.is_grad_enabled():
            return result
        wired = []
        for j, out in enumerate(outs):
            if not isinstance(out, Tensor) or id(out) in ctx._non_differentiable or not dtypes.is_float(out.dtype):
                wired.append(out)
                continue
            value = out.detach()
            for i, a in enumerate(args):
                if needs[i]:
                    value = value + _zero_with_rule(a, out, _Backward(cls, ctx, outs, j, i))
            wired.append(value)
        return tuple(wired) if isinstance(result, tuple) else wired[0]


class _Backward:
    """The derivative of output j with respect to argument i: backward's i-th result for output j's gradient."""

    def __init__(self, fn: type[Function], ctx: FunctionCtx, outs: list[Any], j: int, i: int):
        self.fn, self.ctx, self.outs, self.j, self.i = fn, ctx, outs, j, i

    def __call__(self, g: Tensor) -> Tensor | None:
        memo = self.ctx.__dict__.setdefault("_memo", {})
        key = (self.j, g.uop)
        if key not in memo:
            grads = [
                g if k == self.j else (o.zeros_like() if self.ctx.materialize_grads and isinstance(o, Tensor) else None)
                for k, o in enumerate(self.outs)
            ]
            got = self.fn.backward(self.ctx, *grads)
            memo.clear()  # (one gradient at a time is asked: keep the last)
            memo[key] = got if isinstance(got, tuple) else (got,)
        got = memo[key]
        if self.i >= len(got):
            raise RuntimeError(f"{self.fn.__name__}.backward returned {len(got)} gradients, forward took more")
        r = got[self.i]
        return None if r is None else r.cast(g.dtype) if r.dtype != g.dtype else r


def _zero_with_rule(arg: Tensor, out: Tensor, rule: _Backward) -> Tensor:
    """Zeros shaped as out whose node reads arg (one element: no pass over it), numbered apart from every other,
    differentiated with respect to arg by `rule`."""
    first = arg.flatten()[:1] if arg.numel() else arg.flatten().pad(((0, 1),))
    # 0 whatever the element is (nan and inf included), and a path the gradient walk takes back to arg
    scalar = (first.isfinite().where(first, 0).cast(out.dtype) * 0).sum()
    own = Tensor(UOp(Ops.CONTIGUOUS, scalar.dtype, (scalar.uop,), ("autograd.Function", next(_ZERO_IDS))))
    zero = own.reshape((1,) * out.ndim).expand(out.shape) if out.ndim else own

    def checked(g: Tensor) -> Tensor | None:
        r = rule(g)
        if r is None or r.shape == arg.shape:
            return r
        # as torch: a gradient of a shape the input broadcasts to is summed back to the input's shape
        if not _broadcasts_to(arg.shape, r.shape):
            raise RuntimeError(
                f"Function {rule.fn.__name__}Backward returned an invalid gradient at index {rule.i} - got "
                f"{list(r.shape)} but expected shape compatible with {list(arg.shape)}"
            )
        return r.sum_to_size(arg.shape)

    define_gradient(zero.uop, arg.uop, checked)
    return zero


def backward(
    tensors: Tensor | Sequence[Tensor],
    grad_tensors: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
) -> None:
    """torch.autograd.backward: the gradients of every tensor (weighted by its grad_tensors entry; a scalar's is 1)
    accumulated into .grad, as one backward pass of the sum of their weighted sums."""
    outs = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    seeds = [grad_tensors] if isinstance(grad_tensors, Tensor) or grad_tensors is None else list(grad_tensors)
    if grad_tensors is None:
        seeds = [None] * len(outs)
    if len(seeds) != len(outs):
        raise RuntimeError(f"grad_tensors has {len(seeds)} entries, tensors {len(outs)}")
    total = None
    for t, g in zip(outs, seeds):
        if g is None and t.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        term = t.sum() if g is None else (t * g.detach()).sum()
        total = term if total is None else total + term
    if total is not None:
        total.backward(retain_graph=bool(retain_graph))


no_grad, enable_grad, set_grad_enabled, inference_mode = (
    Tensor.no_grad,
    Tensor.enable_grad,
    Tensor.set_grad_enabled,
    Tensor.inference_mode,
)


def Variable(data: Tensor, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802 (torch's)
    """torch.autograd.Variable (deprecated in torch, where it returns the tensor): the tensor itself."""
    return data.requires_grad_(True) if requires_grad else data


class detect_anomaly:  # noqa: N801 (torch's)
    """Accepted as torch's context manager and decorator, and checks nothing: a backward here is a lazy graph, and the
    forward op that made a NaN is not known when the gradient that reads it is computed. Use
    Tensor.isnan().any() on the gradients, or DEBUG=2 to see each kernel run."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, fn: Any) -> Any:
        return fn


def set_detect_anomaly(mode: bool, check_nan: bool = True) -> detect_anomaly:
    """See detect_anomaly: accepted, checks nothing."""
    return detect_anomaly(check_nan)


# torch.autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp), importable as lazygrad.autograd.functional
from lazygrad import autograd_functional as functional  # noqa: E402

sys.modules[f"{__name__}.functional"] = functional
