"""Random differentiable op chains against torch: values AND gradients, built lazily vs realized after every step.

test_fuzz.py checks forward values over every dtype; this checks autograd. Each case starts from a float32 input x
and applies 3-8 ops: unary math (kinks included: relu, abs, clip, maximum), binary ops with a parameter of a
broadcastable shape (its gradient is summed over the broadcast dims), ops that read their input twice (the gradient
accumulates: softmax, v - v.mean(), v * v.flip()), reductions (sum, mean, amax with ties, prod with zeros, logsumexp,
var, cumsum), movement (reshape, permute, expand, pad, strided slices, flip, cat, gather, setitem), a matmul with a
parameter, and the layers' composites (layer norm, conv1d, pooling, attention, cross entropy, roll, repeat,
masked_fill, indexing by an integer tensor). The loss is sum(out * r) for a fixed random r. Gradients of x and every
parameter must match torch's (float64, so the reference itself does not round); once with the whole chain lazy (the
scheduler fuses forward and backward as it can), once realized after every forward step.

    python test/test_fuzz_grad.py --cases 2000 --seed 7 [--device CL]
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor
from test.helpers import device_available, fuzz_failures

SIZES = [1, 1, 2, 3, 4, 5, 7, 8, 13]


@dataclass
class Case:
    x0: np.ndarray
    steps: list[tuple[str, Callable[[Any, list[Any]], Any]]] = field(default_factory=list)
    params: list[np.ndarray] = field(default_factory=list)  # each step's parameters, in order (all get gradients)


def _is_torch(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


def _const(v: Any, a: np.ndarray) -> Any:
    """a (no gradient) as a tensor of v's library and float type."""
    return torch.tensor(a, dtype=v.dtype) if _is_torch(v) else Tensor(a, device=v.device)


def _idx(v: Any, a: np.ndarray) -> Any:
    return torch.tensor(a, dtype=torch.int64) if _is_torch(v) else Tensor(a.astype(np.int32), device=v.device)


UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": lambda v: -v,
    "tanh": lambda v: v.tanh(),
    "sigmoid": lambda v: v.sigmoid(),
    "sin": lambda v: v.sin(),
    "cos": lambda v: v.cos(),
    "exp(tanh)": lambda v: v.tanh().exp(),
    "log1p(v^2)": lambda v: (v * v).log1p(),
    "sqrt(v^2+1)": lambda v: (v * v + 1).sqrt(),
    "relu": lambda v: v.relu(),
    "leaky_relu": lambda v: torch.nn.functional.leaky_relu(v, 0.1) if _is_torch(v) else v.leaky_relu(0.1),
    "silu": lambda v: torch.nn.functional.silu(v) if _is_torch(v) else v.silu(),
    "gelu": lambda v: torch.nn.functional.gelu(v, approximate="tanh") if _is_torch(v) else v.gelu(),
    "softplus": lambda v: torch.nn.functional.softplus(v) if _is_torch(v) else v.softplus(),
    "elu": lambda v: torch.nn.functional.elu(v) if _is_torch(v) else v.elu(),
    "abs": lambda v: v.abs(),
    "square": lambda v: v * v,
    "1/(1+v^2)": lambda v: (1 + v * v).reciprocal(),
    "erf": lambda v: v.erf(),
    "atan": lambda v: v.atan(),
    "clip": lambda v: v.clip(-0.7, 0.9),
    "rsqrt(v^2+.5)": lambda v: (v * v + 0.5).rsqrt(),
}

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda v, p: v + p,
    "-": lambda v, p: p - v,
    "*": lambda v, p: v * p,
    "/": lambda v, p: v / (1 + p * p),
    "maximum": lambda v, p: v.maximum(p),
    "minimum": lambda v, p: v.minimum(p),
    "where(v>p)": lambda v, p: (v > p).where(v, p) if not _is_torch(v) else torch.where(v > p, v, p),
    "lerp": lambda v, p: v.lerp(p, 0.3),
    "pow": lambda v, p: (v.abs() + 0.5) ** (p.tanh()),
}


def _axis(rng: random.Random, shape: tuple[int, ...]) -> int:
    return rng.randrange(len(shape)) - (len(shape) if rng.random() < 0.3 else 0)


def _softmax(v: Any, ax: int, log: bool) -> Any:
    if _is_torch(v):
        return v.log_softmax(ax) if log else v.softmax(ax)
    return v.log_softmax(ax) if log else v.softmax(ax)


def gen_step(rng: random.Random, shape: tuple[int, ...], case: Case) -> tuple[str, Callable, tuple[int, ...]] | None:
    """A random op for a value of this shape: (name, fn(v, params), shape after); its parameters go to case.params."""
    nd = len(shape)
    kind = rng.choice(
        ["unary", "unary", "binary", "binary", "twice", "reduce", "move", "move", "matmul", "setitem", "nn", "nn"]
    )
    if kind == "nn":
        return _nn_step(rng, shape, case)
    if kind == "unary":
        name = rng.choice(list(UNARY))
        return name, lambda v, ps, f=UNARY[name]: f(v), shape
    if kind == "binary":
        name = rng.choice(list(BINARY))
        pshape = tuple(1 if rng.random() < 0.3 else s for s in shape)
        if rng.random() < 0.2 and nd:
            pshape = pshape[rng.randrange(nd) :]  # fewer dims: broadcast from the left
        k = len(case.params)
        case.params.append(np.random.default_rng(rng.randrange(2**32)).uniform(-1.5, 1.5, pshape).astype(np.float32))
        return f"{name} p{k}{pshape}", lambda v, ps, f=BINARY[name], k=k: f(v, ps[k]), shape
    if kind == "twice":
        if not nd:
            return None
        ax = _axis(rng, shape)
        which = rng.choice(["softmax", "log_softmax", "center", "flipmul", "sumadd", "norm", "sigmul"])
        if which in ("softmax", "log_softmax"):
            return f"{which}({ax})", lambda v, ps, ax=ax, lg=which == "log_softmax": _softmax(v, ax, lg), shape
        if which == "center":
            return f"v - v.mean({ax})", lambda v, ps, ax=ax: v - v.mean(ax, keepdim=True), shape
        if which == "flipmul":
            return f"v * v.flip({ax})", lambda v, ps, ax=ax: v * v.flip(ax), shape
        if which == "sumadd":
            return f"v + v.sum({ax})", lambda v, ps, ax=ax: v + v.sum(ax, keepdim=True), shape
        if which == "norm":
            return f"v / |v|({ax})", lambda v, ps, ax=ax: v / ((v * v).sum(ax, keepdim=True) + 1).sqrt(), shape
        return "v * sigmoid(v)", lambda v, ps: v * v.sigmoid(), shape
    if kind == "reduce":
        if not nd:
            return None
        ax = _axis(rng, shape)
        keep = rng.random() < 0.4
        out = (
            tuple(1 if i == ax % nd else s for i, s in enumerate(shape))
            if keep
            else shape[: ax % nd] + shape[ax % nd + 1 :]
        )
        which = rng.choice(["sum", "mean", "amax", "amax_ties", "prod", "prod_zero", "logsumexp", "var", "cumsum"])
        if which == "var" and shape[ax % nd] < 2:
            which = "sum"
        if which == "cumsum":
            return f"cumsum({ax})", lambda v, ps, ax=ax: v.cumsum(ax), shape
        if which == "amax_ties":  # values rounded to halves: ties in the max, the gradient split among them as torch
            return (
                f"amax(round(v*2)/2 + v*0, {ax})",
                lambda v, ps, ax=ax, k=keep: ((v * 2).round().detach() / 2 + v * 0).amax(ax, keepdim=k),
                out,
            )
        if which == "prod_zero":  # a zero in the product: torch's gradient there is the product of the others
            return f"prod(relu(v), {ax})", lambda v, ps, ax=ax, k=keep: v.relu().prod(ax, keepdim=k), out
        if which == "prod":
            return f"prod(tanh(v)+1.5, {ax})", lambda v, ps, ax=ax, k=keep: (v.tanh() + 1.5).prod(ax, keepdim=k), out
        if which == "var":
            return f"var({ax})", lambda v, ps, ax=ax, k=keep: v.var(ax, keepdim=k), out
        return f"{which}({ax}, keepdim={keep})", lambda v, ps, ax=ax, k=keep, w=which: getattr(v, w)(ax, keepdim=k), out
    if kind == "move":
        which = rng.choice(["reshape", "permute", "expand", "pad", "slice", "flip", "cat", "gather", "transpose"])
        if which == "reshape" or not nd:
            n = int(np.prod(shape))
            divs = [d for d in range(1, n + 1) if n % d == 0]
            d = rng.choice(divs)
            new = (d, n // d) if rng.random() < 0.6 else (n,)
            return f"reshape{new}", lambda v, ps, new=new: v.reshape(new), new
        if which == "permute":
            order = list(range(nd))
            rng.shuffle(order)
            return f"permute{tuple(order)}", lambda v, ps, o=tuple(order): v.permute(o), tuple(shape[i] for i in order)
        if which == "transpose" and nd >= 2:
            return "transpose(0,-1)", lambda v, ps: v.transpose(0, -1), (shape[-1], *shape[1:-1], shape[0])
        if which == "expand" and nd < 4:
            k = rng.choice([2, 3])
            return f"unsqueeze(0).expand({k})", lambda v, ps, k=k: v.unsqueeze(0).expand(k, *v.shape), (k, *shape)
        if which == "pad":
            pads = [(rng.randrange(3), rng.randrange(3)) for _ in shape]
            flat = [p for lohi in reversed(pads) for p in lohi]

            def pad(v: Any, ps: list, flat: list = flat) -> Any:
                return torch.nn.functional.pad(v, flat) if _is_torch(v) else v.pad(tuple(flat))

            return f"pad{pads}", pad, tuple(s + lo + hi for s, (lo, hi) in zip(shape, pads))
        if which == "slice":
            ax = rng.randrange(nd)
            start, step = rng.randrange(max(1, shape[ax])), rng.choice([1, 2, 3])
            n = len(range(start, shape[ax], step))
            sl = tuple([slice(None)] * ax + [slice(start, None, step)])
            return f"[{ax}: {start}::{step}]", lambda v, ps, sl=sl: v[sl], shape[:ax] + (n,) + shape[ax + 1 :]
        if which == "flip":
            ax = rng.randrange(nd)
            return f"flip({ax})", lambda v, ps, ax=ax: v.flip(ax), shape
        if which == "cat":
            ax = rng.randrange(nd)
            k = len(case.params)
            pshape = shape[:ax] + (rng.choice([1, 2, 3]),) + shape[ax + 1 :]
            case.params.append(np.random.default_rng(rng.randrange(2**32)).uniform(-1, 1, pshape).astype(np.float32))

            def cat(v: Any, ps: list, ax: int = ax, k: int = k) -> Any:
                return torch.cat([v, ps[k], v * 2], ax) if _is_torch(v) else v.cat(ps[k], v * 2, dim=ax)

            out = shape[:ax] + (2 * shape[ax] + pshape[ax],) + shape[ax + 1 :]
            return f"cat(v, p{k}{pshape}, 2v; {ax})", cat, out
        if which == "gather":
            ax = rng.randrange(nd)
            if shape[ax] == 0:
                return None
            m = rng.choice([1, 2, 5])
            ishape = shape[:ax] + (m,) + shape[ax + 1 :]
            index = np.random.default_rng(rng.randrange(2**32)).integers(0, shape[ax], ishape)
            return f"gather({ax}, {ishape})", lambda v, ps, ax=ax, i=index: v.gather(ax, _idx(v, i)), ishape
        return None
    if kind == "matmul":
        if not nd:
            return None
        m = rng.choice([1, 3, 8])
        k = _param(rng, case, (shape[-1], m))
        return f"@ p{k}({shape[-1]},{m})", lambda v, ps, k=k: v @ ps[k], (*shape[:-1], m)
    # setitem: a copy of v with a strided slice overwritten by f(a parameter): gradients to both around the hole
    if not nd or shape[0] == 0:
        return None
    start = rng.randrange(shape[0])
    n = len(range(start, shape[0], 2))
    k = len(case.params)
    pshape = (n, *shape[1:])
    case.params.append(np.random.default_rng(rng.randrange(2**32)).uniform(-1, 1, pshape).astype(np.float32))

    def setitem(v: Any, ps: list, start: int = start, k: int = k) -> Any:
        out = v.clone() if _is_torch(v) else v.contiguous()
        out = out * 1  # a value of its own, not a view of v
        out[start::2] = ps[k].tanh() * 3
        return out

    return f"[{start}::2] = tanh(p{k}) * 3", setitem, shape


def _param(rng: random.Random, case: Case, shape: tuple[int, ...], scale: float = 1.0) -> int:
    case.params.append(np.random.default_rng(rng.randrange(2**32)).uniform(-scale, scale, shape).astype(np.float32))
    return len(case.params) - 1


def _nn_step(rng: random.Random, shape: tuple[int, ...], case: Case) -> tuple[str, Callable, tuple[int, ...]] | None:
    """The layers' composites: layer norm, conv1d, pooling, attention, cross entropy, roll, repeat, masked_fill and
    indexing by an integer tensor."""
    F, nd = torch.nn.functional, len(shape)
    which = rng.choice(["layernorm", "conv1d", "pool", "attention", "cross_entropy", "roll", "repeat", "masked_fill"])
    which = rng.choice([which, "index"])
    if not nd:
        return None
    if which == "layernorm":
        w, b = _param(rng, case, shape[-1:]), _param(rng, case, shape[-1:])

        def ln(v: Any, ps: list, w: int = w, b: int = b) -> Any:
            if _is_torch(v):
                return F.layer_norm(v, v.shape[-1:], ps[w], ps[b], 1e-5)
            return v.layernorm(eps=1e-5) * ps[w] + ps[b]

        return f"layernorm(p{w}, p{b})", ln, shape
    if which == "conv1d" and nd == 3 and shape[2] >= 1:
        cout, k = rng.choice([1, 2, 5]), rng.choice([1, 2, 3])
        pad, stride = rng.choice([0, 1]), rng.choice([1, 2])
        if shape[2] + 2 * pad < k:
            return None
        w = _param(rng, case, (cout, shape[1], k))
        out = (shape[0], cout, (shape[2] + 2 * pad - k) // stride + 1)

        def conv(v: Any, ps: list, w: int = w, pad: int = pad, stride: int = stride) -> Any:
            return (
                F.conv1d(v, ps[w], padding=pad, stride=stride)
                if _is_torch(v)
                else v.conv2d(ps[w], padding=pad, stride=stride)
            )

        return f"conv1d(p{w}, pad={pad}, stride={stride})", conv, out
    if which == "pool" and nd == 3 and shape[2] >= 2:
        mx = rng.random() < 0.5
        out = (*shape[:2], shape[2] // 2)

        def pool(v: Any, ps: list, mx: bool = mx) -> Any:
            if _is_torch(v):
                return F.max_pool1d(v, 2) if mx else F.avg_pool1d(v, 2)
            return v.max_pool2d((2,)) if mx else v.avg_pool2d((2,))

        return ("max" if mx else "avg") + "_pool1d(2)", pool, out
    if which == "attention" and nd == 3:
        causal = rng.random() < 0.5

        def attn(v: Any, ps: list, causal: bool = causal) -> Any:
            q, k = v * 0.5, v.flip(1)
            if _is_torch(v):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return q.scaled_dot_product_attention(k, v, is_causal=causal)

        return f"attention(v/2, v.flip(1), v, causal={causal})", attn, shape
    if which == "cross_entropy" and nd == 2 and shape[0] and shape[1]:
        target = np.random.default_rng(rng.randrange(2**32)).integers(0, shape[1], shape[0])
        smooth = rng.choice([0.0, 0.1])

        def ce(v: Any, ps: list, t: np.ndarray = target, smooth: float = smooth) -> Any:
            if _is_torch(v):
                return F.cross_entropy(v, torch.tensor(t), label_smoothing=smooth)
            return v.cross_entropy(_idx(v, t), label_smoothing=smooth)

        return f"cross_entropy(label_smoothing={smooth})", ce, ()
    if which == "roll":
        ax, k = rng.randrange(nd), rng.choice([-2, 1, 3])
        return f"roll({k}, {ax})", lambda v, ps, ax=ax, k=k: v.roll(k, ax), shape
    if which == "repeat" and nd <= 3:
        reps = tuple(rng.choice([1, 2]) for _ in shape)
        return f"repeat{reps}", lambda v, ps, r=reps: v.repeat(*r), tuple(s * r for s, r in zip(shape, reps))
    if which == "masked_fill":
        return "masked_fill(v > 0.5, 0.3)", lambda v, ps: v.masked_fill(v > 0.5, 0.3), shape
    if which == "index" and shape[0]:
        index = np.random.default_rng(rng.randrange(2**32)).integers(0, shape[0], rng.choice([1, 4, 7]))
        return f"v[{index.tolist()}]", lambda v, ps, i=index: v[_idx(v, i)], (len(index), *shape[1:])
    return None


def gen_case(seed: int) -> Case:
    rng = random.Random(seed)
    shape = tuple(rng.choice(SIZES) for _ in range(rng.choice([1, 2, 2, 3])))
    case = Case(np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32))
    want, tries = rng.randrange(3, 9), 0
    while len(case.steps) < want and tries < 50:
        tries += 1
        made = gen_step(rng, shape, case)
        if made is None or int(np.prod(made[2])) > 20_000 or len(made[2]) > 4:
            continue
        name, fn, shape = made
        case.steps.append((name, fn))
    return case


def _run(case: Case, lib: str, device: str, eager: bool) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The chain's output and the gradients of sum(out * r) for x and every parameter, in one library."""
    if lib == "torch":
        leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (case.x0, *case.params)]
    else:
        leaves = [Tensor(a, device=device, requires_grad=True) for a in (case.x0, *case.params)]
    v, ps = leaves[0], leaves[1:]
    for _, fn in case.steps:
        v = fn(v, ps)
        if eager and lib != "torch":
            v = v.realize()
    r = np.random.default_rng(len(case.steps)).uniform(-1, 1, tuple(v.shape)).astype(np.float32)
    (v * _const(v, r)).sum().backward()
    out = v.detach().numpy()
    return out, [None if t.grad is None else t.grad.numpy() for t in leaves]


def _differ(name: str, got: np.ndarray, ref: np.ndarray) -> str | None:
    if got.shape != ref.shape:
        return f"{name}: shape {got.shape}, torch {ref.shape}"
    scale = 1 + (float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 0)
    bad = ~np.isclose(got, ref, rtol=2e-3, atol=2e-3 * scale, equal_nan=True)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"{name}: {int(bad.sum())} of {bad.size} differ, at {at} got {got[at]!r}, torch {ref[at]!r}"
    return None


def run_case(case: Case, device: str) -> str | None:
    ref_out, ref_grads = _run(case, "torch", device, False)
    for eager in (False, True):
        mode = "realized per step" if eager else "lazy"
        out, grads = _run(case, "lazygrad", device, eager)
        if (err := _differ(f"{mode} forward", out, ref_out)) is not None:
            return err
        for i, (g, rg) in enumerate(zip(grads, ref_grads)):
            name = f"{mode} grad of " + ("x" if i == 0 else f"p{i - 1}")
            if rg is None:
                if g is not None and np.any(g != 0):
                    return f"{name}: torch has none, got nonzero"
                continue
            if g is None:
                return f"{name}: none, torch has one"
            if (err := _differ(name, g, rg)) is not None:
                return err
    return None


def describe(seed: int, case: Case) -> str:
    return f"seed {seed}: x0 {case.x0.shape} -> " + " -> ".join(n for n, _ in case.steps)


def check(seed: int, device: str) -> tuple[str, str | None]:
    case = gen_case(seed)
    return describe(seed, case), run_case(case, device)


# CPU cases per CI chunk; CL compiles each kernel through PoCL's LLVM (~10 s a chain here): a few cases only
CI_CASES = {"CPU": 40, "CL": 4}


@pytest.mark.parametrize("device,chunk", [("CPU", 0), ("CPU", 1), ("CPU", 2), ("CL", 0)])
def test_fuzz_gradient_chains(device: str, chunk: int) -> None:
    if not device_available(device):
        pytest.skip(f"{device} is not available here")
    per = CI_CASES[device]
    seeds = range(chunk * per, (chunk + 1) * per)
    failures = fuzz_failures(seeds, lambda seed: check(seed, device))
    assert not failures, f"{len(failures)} of {per} gradient chains disagree with torch:\n" + "\n".join(failures[:10])


# seeds that once failed in a hunt, run in CI as they are: (device, what broke)
FOUND_IN_HUNTS = {
    9130: ("CL", "tanh's own derivative lost when its input was realized (1 - 2 / (e^2x + 1) differentiated: NaN)"),
}


@pytest.mark.parametrize("seed", list(FOUND_IN_HUNTS))
def test_fuzz_grad_cases_found_in_hunts(seed: int) -> None:
    device, why = FOUND_IN_HUNTS[seed]
    if not device_available(device):
        pytest.skip(f"{device} is not available here")
    what, failure = check(seed, device)
    assert failure is None, f"{what}: {failure} ({why})"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=10_000)
    ap.add_argument("--device", default=Device.DEFAULT, help="the device under test (default: DEV's, else CPU)")
    args = ap.parse_args()
    fuzz_failures(range(args.seed, args.seed + args.cases), lambda seed: check(seed, args.device), hunt=True)
