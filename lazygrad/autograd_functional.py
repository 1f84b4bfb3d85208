"""torch.autograd.functional: vjp, jvp, vhp, hvp, jacobian and hessian of a function of tensors.

Built on autograd.grad, whose gradients are lazy graphs that can be differentiated again: jvp is the vjp of a vjp
(J v = d/du <J^T u, v>, any u), a Jacobian one vjp per output element (reverse mode, torch's default strategy), a
Hessian the Jacobian of the gradient. The inputs are made leaves that require grad (copies: the caller's tensors keep
their requires_grad), and each result is a tensor of the function's graph, realized when read.
"""

from __future__ import annotations

from typing import Any, Callable

from lazygrad.autograd import grad
from lazygrad.tensor import Tensor


def _as_tuple(x: Any) -> tuple[tuple[Tensor, ...], bool]:
    return (tuple(x), True) if isinstance(x, (tuple, list)) else ((x,), False)


def _leaves(inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return tuple(t.detach().requires_grad_(True) for t in inputs)


def _grads(outs: Tensor | tuple[Tensor, ...], ins: tuple[Tensor, ...], seeds: Any) -> tuple[Tensor, ...]:
    got = grad(outs, ins, seeds, allow_unused=True)
    return tuple(g if g is not None else t.zeros_like() for g, t in zip(got, ins))


def vjp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), v^T J): v shaped as the output (None for a one-element output)."""
    ins, many = _as_tuple(inputs)
    leaves = _leaves(ins)
    outs, many_out = _as_tuple(func(*leaves))
    seeds = [None] * len(outs) if v is None else list(_as_tuple(v)[0])
    back = _grads(outs, leaves, seeds)
    out = tuple(o.detach() for o in outs)
    return (out if many_out else out[0]), (back if many else back[0])


def jvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), J v): v shaped as the inputs (None for a one-element input), as the vjp of a vjp."""
    ins, many = _as_tuple(inputs)
    leaves = _leaves(ins)
    outs, many_out = _as_tuple(func(*leaves))
    us = tuple(o.zeros_like().requires_grad_(True) for o in outs)
    back = _grads(outs, leaves, list(us))  # J^T u, linear in u
    vs = [t.ones_like() for t in ins] if v is None else list(_as_tuple(v)[0])
    forward = _grads(back, us, vs)
    out = tuple(o.detach() for o in outs)
    return (out if many_out else out[0]), (forward if many_out else forward[0])


def jacobian(
    func: Callable,
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """d func / d inputs, shaped (*output.shape, *input.shape); nested tuples for several outputs or inputs, as
    torch's. One vjp per output element."""
    ins, many = _as_tuple(inputs)
    leaves = _leaves(ins)
    outs, many_out = _as_tuple(func(*leaves))
    rows = []
    for out in outs:
        flat = out.reshape(-1)
        per_input: list[list[Tensor]] = [[] for _ in leaves]
        for k in range(flat.shape[0]):
            for i, g in enumerate(_grads((flat[k],), leaves, [None])):
                per_input[i].append(g)
        rows.append(
            tuple(
                (Tensor.stack(*gs) if gs else leaves[i].reshape(0, *leaves[i].shape)).reshape(
                    *out.shape, *leaves[i].shape
                )
                for i, gs in enumerate(per_input)
            )
        )
    if many_out:
        return tuple(r if many else r[0] for r in rows)
    return rows[0] if many else rows[0][0]


def hessian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode") -> Any:  # fmt: skip
    """The Jacobian of the gradient of a scalar func, shaped (*input.shape, *input.shape)."""
    ins, many = _as_tuple(inputs)

    def gradient(*xs: Tensor) -> Any:
        out = func(*xs)
        if out.numel() != 1:
            raise RuntimeError("The function given to hessian should return a single Tensor with a single element")
        g = _grads((out.reshape(()),), xs, [None])
        return g if many else g[0]

    return jacobian(gradient, ins if many else ins[0])


def vhp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False) -> tuple:
    """(func(inputs), v^T H) of a scalar func."""
    ins, many = _as_tuple(inputs)
    leaves = _leaves(ins)
    out = func(*leaves)
    first = _grads((out.reshape(()),), leaves, [None])
    vs = list(_as_tuple(v)[0]) if v is not None else [t.ones_like() for t in leaves]
    second = _grads(first, leaves, vs)
    return out.detach(), (second if many else second[0])


hvp = vhp  # (H is symmetric for a twice differentiable func: H v = v^T H)
