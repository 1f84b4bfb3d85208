"""torch.func: functional_call, and grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian and vmap, composable
function transforms.

Arguments and results may be trees of tensors (tuples, lists, dicts), as torch's: `grad(loss)(params, x)` with
`params` a dict gives a dict of gradients. The transforms nest (`grad(grad(f))`, `vmap(grad(f))`, `jacrev(jacfwd(f))`):
a gradient is a lazy graph of the inputs (lazygrad.autograd.grad), so a transform differentiates through the ones
inside it. An input that does not require grad is differentiated through a fresh leaf, and the results the transform
returns are then detached, as torch's.

vmap traces the function once, on an input of one slice's shape, and batches the graph it built: every node that
depends on a mapped input gets the batch as a new leading axis (movement ops and reductions shift their axes; an
operand that does not depend on one is broadcast). Gradients inside (vmap(grad(f))) are graphs like any other, so
per-sample gradients are one graph over the whole batch. Where the trace cannot be batched (the function read its
input's values, wrote into it, drew random numbers with randomness="different", or built a node of a kind the batching
does not know), vmap runs the function once per slice and stacks the results instead (torch's fallback for an op
without a batching rule): the same values, a graph per slice.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from lazygrad import autograd
from lazygrad.nn.utils.stateless import functional_call  # noqa: F401  (torch.func's)
from lazygrad.tensor import Tensor, _rng_lock
from lazygrad.uop.ops import GroupOp, Ops, UOp

# *** trees of tensors ***


def _flatten(tree: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The leaves of a tree of tuples/lists/dicts, and the function that builds the same tree from new leaves."""
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields") or isinstance(tree, dict):
        items = list(tree.items()) if isinstance(tree, dict) else list(enumerate(tree))
        parts = [_flatten(v) for _, v in items]
        sizes = [len(leaves) for leaves, _ in parts]

        def build(leaves: list[Any]) -> Any:
            out, at = [], 0
            for (_, make), n in zip(parts, sizes):
                out.append(make(leaves[at : at + n]))
                at += n
            return type(tree)(zip((k for k, _ in items), out)) if isinstance(tree, dict) else type(tree)(out)

        return [x for leaves, _ in parts for x in leaves], build
    if isinstance(tree, tuple):  # a named tuple
        leaves, make = _flatten(tuple(tree))
        return leaves, lambda new: type(tree)(*make(new))
    return [tree], lambda new: new[0]


def _argnums(argnums: int | Sequence[int], n: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    for a in nums:
        if not isinstance(a, int) or not -n <= a < n:
            raise RuntimeError(f"Got argnums={a}, but the function was called with only {n} positional inputs")
    return tuple(a % n for a in nums)


def _differentiable(x: Any) -> tuple[Any, bool]:
    """x itself when it already requires grad (an outer transform's leaf, or a tensor of the user's graph), else a
    fresh leaf; and whether it was made here."""
    if not isinstance(x, Tensor):
        raise RuntimeError(f"the inputs to differentiate must be tensors, got {type(x).__name__}")
    if not x.is_floating_point():
        raise RuntimeError(f"only tensors of floating point dtype can require gradients, got {x.dtype}")
    return (x, False) if x.requires_grad else (x.detach().requires_grad_(True), True)


def _differentiable_args(args: list[Any], nums: Sequence[int]) -> tuple[dict[int, tuple[list[Tensor], Callable]], bool]:
    """The arguments `nums` names (trees of tensors) made differentiable in `args`, in place: per argument its leaves
    and the function that builds its tree again, and whether a leaf was made here (the results are then detached)."""
    trees, fresh = {}, False
    for a in nums:
        leaves, build = _flatten(args[a])
        made = [_differentiable(x) for x in leaves]
        fresh |= any(m for _, m in made)
        trees[a] = ([x for x, _ in made], build)
        args[a] = build(trees[a][0])
    return trees, fresh


def _per_arg(values: list[Any], trees: dict[int, tuple[list[Tensor], Callable]], nums: Sequence[int]) -> list[Any]:
    """`values`, one per leaf of the arguments `nums` names in their order, as each argument's tree."""
    out, at = [], 0
    for a in nums:
        n = len(trees[a][0])
        out.append(trees[a][1](values[at : at + n]))
        at += n
    return out


def _gradients(out: Tensor, ins: list[Tensor], seed: Tensor | None = None) -> list[Tensor]:
    got = autograd.grad([out], ins, None if seed is None else [seed], allow_unused=True)
    return [g if g is not None else x.zeros_like() for g, x in zip(got, ins)]


# *** reverse mode ***


def grad_and_value(func: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """func's gradient with respect to the arguments `argnums` names, and func's value: ((grads), value), or
    ((grads), (value, aux)) with has_aux. func returns one element (a scalar tensor)."""

    def transformed(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        nums = _argnums(argnums, len(args))
        args = list(args)
        trees, fresh = _differentiable_args(args, nums)
        result = func(*args, **kwargs)
        out, aux = result if has_aux else (result, None)
        if has_aux and not (isinstance(result, tuple) and len(result) == 2):
            raise RuntimeError("grad_and_value(f)(*args): output of function f should be a tuple (output, aux)")
        if not isinstance(out, Tensor) or out.numel() != 1:
            shape = out.shape if isinstance(out, Tensor) else type(out).__name__
            raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got {shape}")
        ins = [x for a in nums for x in trees[a][0]]
        grads = _gradients(out.reshape(()), ins)
        if fresh:  # the leaves were made here: nothing outside can differentiate the results further
            grads, out = [g.detach() for g in grads], out.detach()
        per_arg = _per_arg(grads, trees, nums)
        g = per_arg[0] if isinstance(argnums, int) else tuple(per_arg)
        return g, ((out, aux) if has_aux else out)

    return transformed


def grad(func: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of func (which returns a scalar) with respect to its arguments `argnums` names; (grads, aux) with
    has_aux."""
    both = grad_and_value(func, argnums, has_aux)

    def transformed(*args: Any, **kwargs: Any) -> Any:
        g, value = both(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return transformed


def vjp(func: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """(func(*primals), vjp_fn[, aux]): vjp_fn(cotangents) is the tuple of the primals' vector-Jacobian products,
    cotangents shaped as func's output (a tree like it)."""
    args, nums = list(primals), range(len(primals))
    trees, fresh = _differentiable_args(args, nums)
    result = func(*args)
    out, aux = result if has_aux else (result, None)
    outs, build_out = _flatten(out)

    def vjp_fn(cotangents: Any) -> tuple:
        seeds, _ = _flatten(cotangents)
        if len(seeds) != len(outs):
            raise RuntimeError(f"Expected {len(outs)} cotangents to match the function's outputs, got {len(seeds)}")
        for o, s in zip(outs, seeds):
            if tuple(o.shape) != tuple(s.shape):
                raise RuntimeError(f"Mismatch in shape: the cotangent has shape {s.shape}, the output {o.shape}")
        ins = [x for a in nums for x in trees[a][0]]
        total = [x.zeros_like() for x in ins]
        for o, s in zip(outs, seeds):
            total = [t + g for t, g in zip(total, _gradients(o, ins, s))]
        if fresh:
            total = [t.detach() for t in total]
        return tuple(_per_arg(total, trees, nums))

    value = build_out([o.detach() for o in outs]) if fresh else out
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jvp(func: Callable, primals: Sequence[Any], tangents: Sequence[Any], *, has_aux: bool = False) -> tuple:
    """(func(*primals), J tangents): the Jacobian-vector product, as the vjp of a vjp (the vjp J^T u is linear in the
    cotangent u, so the gradient of <J^T u, tangents> with respect to u is J tangents)."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to be tuples")
    if len(primals) != len(tangents):
        raise RuntimeError(f"jvp: got {len(primals)} primals and {len(tangents)} tangents")
    leaves, build = _flatten(list(primals))
    pairs = [_differentiable(x) for x in leaves]
    ins = [x for x, _ in pairs]
    ts, _ = _flatten(list(tangents))
    if len(ts) != len(ins) or any(tuple(t.shape) != tuple(x.shape) for t, x in zip(ts, ins)):
        raise RuntimeError("jvp: Expected the tangents to have the same structure and shapes as the primals")
    result = func(*build(ins))
    out, aux = result if has_aux else (result, None)
    outs, build_out = _flatten(out)
    us = [o.detach().zeros_like().requires_grad_(True) for o in outs]
    got = autograd.grad(outs, ins, us, allow_unused=True)
    dot = [(g * t).sum() for g, t in zip(got, ts) if g is not None]
    forward = _gradients(functools.reduce(Tensor.add, dot), us) if dot else [u.detach() for u in us]
    if any(m for _, m in pairs) and not any(t.requires_grad for t in ts):
        forward, outs = [f.detach() for f in forward], [o.detach() for o in outs]
    value, tangent_out = build_out(outs), build_out(forward)
    return (value, tangent_out, aux) if has_aux else (value, tangent_out)


# *** Jacobians ***


def _jacobian_of(func: Callable, argnums: int | Sequence[int], has_aux: bool, rows: Callable) -> Callable:
    """The Jacobian transform: rows(out, ins) gives d out.flatten()[k] / d ins for every k, as a list per input of
    tensors shaped (out.numel(), *input.shape)."""

    def transformed(*args: Any) -> Any:
        nums = _argnums(argnums, len(args))
        args = list(args)
        made, fresh = _differentiable_args(args, nums)
        result = func(*args)
        out, aux = result if has_aux else (result, None)
        outs, build_out = _flatten(out)
        ins = [x for a in nums for x in made[a][0]]
        per_out = []
        for o in outs:
            jac = rows(o, ins)
            jac = [j.reshape(*o.shape, *x.shape) for j, x in zip(jac, ins)]
            if fresh:
                jac = [j.detach() for j in jac]
            per_arg = _per_arg(jac, made, nums)
            per_out.append(per_arg[0] if isinstance(argnums, int) else tuple(per_arg))
        jacobian = build_out(per_out)
        return (jacobian, aux) if has_aux else jacobian

    return transformed


def _reverse_rows(out: Tensor, ins: list[Tensor]) -> list[Tensor]:
    flat = out.reshape(-1)
    per_in: list[list[Tensor]] = [[] for _ in ins]
    for k in range(flat.shape[0]):
        for i, g in enumerate(_gradients(flat[k], ins)):
            per_in[i].append(g)
    return [Tensor.stack(*gs) if gs else x.reshape(0, *x.shape) for gs, x in zip(per_in, ins)]


def _forward_rows(out: Tensor, ins: list[Tensor]) -> list[Tensor]:
    """Forward mode: one Jacobian-vector product per input element (a column), as the vjp of a vjp."""
    flat = out.reshape(-1)
    u = flat.detach().zeros_like().requires_grad_(True)
    back = _gradients(flat, ins, u)  # J^T u for each input, linear in u
    per_in = []
    for b, x in zip(back, ins):
        cols = [_gradients(b.reshape(-1)[k], [u])[0] for k in range(x.numel())]
        cols_t = Tensor.stack(*cols, dim=1) if cols else flat.reshape(-1, 0)
        per_in.append(cols_t.reshape(flat.shape[0], *x.shape))
    return per_in


def jacrev(func: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False, chunk_size: int | None = None,
           _preallocate_and_copy: bool = False) -> Callable:  # fmt: skip
    """The Jacobian of func with respect to the arguments `argnums` names, one vector-Jacobian product per output
    element: shaped (*output.shape, *input.shape)."""
    return _jacobian_of(func, argnums, has_aux, _reverse_rows)


def jacfwd(func: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
           randomness: str = "error") -> Callable:  # fmt: skip
    """The Jacobian as jacrev's, one Jacobian-vector product per input element (forward mode's columns)."""
    return _jacobian_of(func, argnums, has_aux, _forward_rows)


def hessian(func: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """The Hessian of a scalar func: the forward Jacobian of its reverse Jacobian, as torch's."""
    return jacfwd(jacrev(func, argnums), argnums)


# *** vmap ***


class _Unbatchable(Exception):
    """The traced graph holds something vmap's batching does not handle: run the function slice by slice."""


def _batched_arg(op: Ops, arg: Any, n: int) -> Any:
    """A movement op's or reduce's argument over one more, leading, axis of size n."""
    if op is Ops.RESHAPE or op is Ops.EXPAND:
        return (n, *arg)
    if op is Ops.PERMUTE:
        return (0, *(a + 1 for a in arg))
    if op is Ops.PAD:
        return ((0, 0), *arg)
    if op is Ops.SHRINK:
        return ((0, n), *arg)
    if op is Ops.FLIP:
        return (False, *arg)
    if op is Ops.REDUCE_AXIS:
        return (arg[0], tuple(a + 1 for a in arg[1]))
    raise _Unbatchable(op)


_PASSING = frozenset({Ops.CONTIGUOUS, Ops.DETACH})  # nodes that read as their source, numbered or not


def _batch_graph(roots: list[UOp], inputs: dict[UOp, UOp], n: int) -> list[UOp]:
    """`roots` rebuilt over the batched `inputs` (placeholder node -> the input with the batch as its first axis): a
    node that depends on one gets the batch as a leading axis of size n, one that does not stays as it is."""
    done: dict[UOp, UOp] = dict(inputs)
    sink = UOp(Ops.SINK, src=tuple(roots))  # (one walk over every root's graph)
    for node in sink.toposort:
        if node is sink or node in done:
            continue
        if not any(src in done and done[src] is not src for src in node.src):
            done[node] = node  # depends on no mapped input
            continue
        if any(not isinstance(d, int) for d in node.shape):
            raise _Unbatchable("a symbolic shape")
        srcs = []
        for src in node.src:
            new = done.get(src, src)
            if new is src and src.op is not Ops.DEVICE and (src.shape or not node.shape):
                # an operand that depends on no mapped input: the same for every slice (a scalar beside shaped
                # operands broadcasts as it is)
                if node.op not in GroupOp.Elementwise or src.shape != node.shape:
                    raise _Unbatchable(node.op)
                new = UOp(Ops.EXPAND, src.dtype, (UOp(Ops.RESHAPE, src.dtype, (src,), (1, *src.shape)),),
                          (n, *src.shape))  # fmt: skip
            srcs.append(new)
        if node.op in GroupOp.Elementwise or node.op in _PASSING:
            out = UOp(node.op, node.dtype, tuple(srcs), node.arg)
        elif node.op in GroupOp.Movement or node.op is Ops.REDUCE_AXIS:
            if len(srcs) != 1:
                raise _Unbatchable(node.op)
            out = UOp(node.op, node.dtype, tuple(srcs), _batched_arg(node.op, node.arg, n))
        else:
            raise _Unbatchable(node.op)  # a write, a copy, a device split, a bound variable
        if out.shape != (n, *node.shape):
            raise _Unbatchable(f"{node.op} of shape {out.shape}, not {(n, *node.shape)}")
        done[node] = out
    return [done[r] for r in roots]


def _traced(func: Callable, leaves: list[Any], leaf_dims: list[int | None], build: Callable, kwargs: dict, n: int,
            randomness: str) -> Any:  # fmt: skip
    """vmap by one trace of func on placeholders of a slice's shape, its graph batched (_batch_graph); raises
    _Unbatchable where that cannot be done."""
    holders, batched, args = [], {}, []
    for x, d in zip(leaves, leaf_dims):
        if d is None:
            args.append(x)
            continue
        holder = Tensor.empty(*(s for i, s in enumerate(x.shape) if i != d % x.ndim), dtype=x.dtype, device=x.device)
        holders.append(holder)
        batched[holder.uop] = x.movedim(d, 0).uop if d % x.ndim else x.uop
        args.append(holder)
    start = Tensor._rng_counter

    def read_values() -> bool:  # (a placeholder's memory is made only when a kernel reads it)
        return any(h.uop.base.op is Ops.BUFFER and h.uop.base.arg.is_allocated for h in holders)

    try:
        result = func(*build(args), **kwargs)
    except Exception as e:
        if read_values():  # it read the placeholder's memory, not data: whatever it raised came from that
            raise _Unbatchable("the function read its input's values") from e
        raise
    if Tensor._rng_counter != start and randomness == "different":
        raise _Unbatchable("random numbers drawn per slice")
    if read_values():
        raise _Unbatchable("the function read its input's values")
    outs, build_out = _flatten(result)
    if not all(isinstance(o, Tensor) for o in outs):
        raise _Unbatchable("a result that is not a tensor")
    if any(h.uop.base.op is not Ops.BUFFER or h.uop not in batched for h in holders):
        raise _Unbatchable("the function wrote into its input")
    roots = _batch_graph([o.uop for o in outs], batched, n)
    return [Tensor(r) if r is not o.uop else o.unsqueeze(0).expand(n, *o.shape) for r, o in zip(roots, outs)], build_out


def _slice_by_slice(func: Callable, leaves: list[Any], leaf_dims: list[int | None], build: Callable, kwargs: dict,
                    n: int, randomness: str) -> tuple[list[Tensor], Callable]:  # fmt: skip
    """vmap by calling func once per slice (under _rng_lock): each result's leaves stacked on a new first axis."""
    results = []
    start = reached = Tensor._rng_counter
    for i in range(n):
        if randomness == "same":
            Tensor._rng_counter = start
        sliced = [x if d is None else x.select(d, i) for x, d in zip(leaves, leaf_dims)]
        results.append(func(*build(sliced), **kwargs))
        if randomness == "error" and Tensor._rng_counter != start:
            Tensor._rng_counter = max(Tensor._rng_counter, reached)
            raise RuntimeError(_RANDOM_IN_ERROR_MODE)
        reached = max(reached, Tensor._rng_counter)
    Tensor._rng_counter = reached  # (after "same": later draws are new numbers)
    outs = [_flatten(r)[0] for r in results]
    build_out = _flatten(results[0])[1]
    stacked = []
    for column in zip(*outs):
        if not all(isinstance(c, Tensor) for c in column):
            raise ValueError(f"vmap: `{func}` must only return Tensors, got type {type(column[0]).__name__}")
        stacked.append(Tensor.stack(*column))
    return stacked, build_out


_RANDOM_IN_ERROR_MODE = (
    "vmap: called random operation while in randomness error mode. Please either use the 'same' or 'different' "
    "randomness flags on vmap or perform the randomness operation out of vmap"
)


def vmap(func: Callable, in_dims: Any = 0, out_dims: Any = 0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:  # fmt: skip
    """func mapped over dimension `in_dims` of its inputs (an int for all, or one per argument, None for an argument
    not mapped, a tree matching the argument's), its results stacked at `out_dims`. randomness: "error" (a random
    tensor made inside raises, as torch's), "different" (each slice draws its own numbers) or "same" (every slice
    draws the same numbers)."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")

    def mapped(*args: Any, **kwargs: Any) -> Any:
        dims = in_dims if isinstance(in_dims, (tuple, list)) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(
                f"vmap(f, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible with the structure of inputs: "
                f"{len(dims)} in_dims for {len(args)} positional inputs"
            )
        leaves, build = _flatten(list(args))
        leaf_dims: list[int | None] = []
        for arg, d in zip(args, dims):
            arg_leaves, _ = _flatten(arg)
            d_leaves = _flatten(d)[0] if isinstance(d, (tuple, list, dict)) else [d] * len(arg_leaves)
            if len(d_leaves) != len(arg_leaves):
                raise ValueError(f"vmap: in_dims {d} does not match the structure of its input")
            leaf_dims.extend(d_leaves)
        sizes = set()
        for x, d in zip(leaves, leaf_dims):
            if d is None:
                continue
            if not isinstance(x, Tensor):
                raise ValueError(
                    f"vmap: Got in_dim={d} for an input but the input is of type {type(x).__name__}. We cannot vmap "
                    "over non-Tensor arguments, please use None as the respective in_dim"
                )
            if not -x.ndim <= d < x.ndim:
                raise ValueError(f"vmap: Got in_dim={d} for an input but the input is of dimension {x.ndim}")
            sizes.add(x.shape[d])
        if not sizes:
            raise ValueError("vmap: at least one input must be mapped (in_dims is None for all of them)")
        if len(sizes) > 1:
            raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                             f"{sorted(sizes)} for the mapped dimension")  # fmt: skip
        (n,) = sizes
        if n == 0:
            raise ValueError("vmap: the mapped dimension has size 0, so there is no slice to call the function on")
        stacked = None
        with _rng_lock:  # no other thread draws while the counters are compared or rewound
            start = Tensor._rng_counter
            try:
                stacked, build_out = _traced(func, leaves, leaf_dims, build, kwargs, n, randomness)
            except _Unbatchable:
                pass
            if stacked is not None and randomness == "error" and Tensor._rng_counter != start:
                raise RuntimeError(_RANDOM_IN_ERROR_MODE)
            if stacked is None:
                stacked, build_out = _slice_by_slice(func, leaves, leaf_dims, build, kwargs, n, randomness)
        o_dims = _flatten(out_dims)[0] if isinstance(out_dims, (tuple, list, dict)) else [out_dims] * len(stacked)
        if len(o_dims) != len(stacked):
            raise ValueError(f"vmap: out_dims={out_dims} does not match the structure of the outputs")
        # (an output not mapped, out_dim None: the first slice's)
        return build_out([s[0] if d is None else s.movedim(0, d % s.ndim) for s, d in zip(stacked, o_dims)])

    return mapped
