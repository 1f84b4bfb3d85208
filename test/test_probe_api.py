"""A differential probe of the Tensor API against torch, with valid and invalid arguments.

Each case calls the same thing on lazygrad and on torch, over inputs made from one numpy array: reductions and scans
over every kind of dim (negative, out of range, given twice, tuples, keepdim), movement ops, elementwise ops over
bool / int / half / float and mismatched shapes, Python scalars, indexing, tensor creation, and the nn functional
entry points with out-of-range sizes, probabilities and epsilons. Where torch returns, lazygrad must return the same
shape, dtype and values; where torch raises, lazygrad must raise an instance of torch's exception class, with a
message in the user's terms (never an internal AssertionError / KeyError or an IR dump).

The suite runs a fixed-seed sample; the whole table is a script:

    python test/test_probe_api.py [--all] [--grep NAME] [-v]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

if __name__ == "__main__":  # run as a script: this checkout's lazygrad, not an installed one
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch
import torch.nn.functional as F

from lazygrad import Tensor, dtypes, nn

# exception classes that mean lazygrad crashed inside instead of refusing the arguments
INTERNAL = (AssertionError, KeyError, AttributeError, ZeroDivisionError, NameError, RecursionError, UnboundLocalError)
INTERNAL_NAMES = ("CompileError", "SpecError")  # a C compiler's error, the IR verifier's (SPEC=1, as in the suite)

# the default int is int32 (tinygrad's): arange, full, index results and bool + Python int give int32 where torch's
# default int64 shows; the values are compared all the same
DEFAULT_INT = ("int64", "int32")


@dataclass
class Case:
    name: str
    ours: Callable[[], Any]
    theirs: Callable[[], Any]
    tol: float = 1e-4


def arr(shape: tuple[int, ...], dt: str = "float32", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 7 * len(shape))
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt.startswith("int") or dt.startswith("uint"):
        return rng.integers(0 if dt.startswith("u") else -5, 6, size=shape).astype(dt)
    return rng.uniform(-2, 2, size=shape).astype(dt)


def same(name: str, fn: Callable[..., Any], *arrays: np.ndarray, **kw: Any) -> Case:
    """One function over lazygrad tensors and over torch tensors made from the same arrays."""
    return Case(
        name,
        lambda: fn(*[Tensor(a.copy()) for a in arrays]),
        lambda: fn(*[torch.from_numpy(a.copy()) for a in arrays]),
        **kw,
    )


def pair(name: str, ours: Callable[..., Any], theirs: Callable[..., Any], *arrays: np.ndarray, **kw: Any) -> Case:
    return Case(
        name,
        lambda: ours(*[Tensor(a.copy()) for a in arrays]),
        lambda: theirs(*[torch.from_numpy(a.copy()) for a in arrays]),
        **kw,
    )


def fmt(v: Any) -> str:
    return repr(v).replace(" ", "")


# *** the table ***

SHAPES = [(), (0,), (1,), (3,), (2, 3), (2, 0, 3), (1, 3, 1)]
DIMS: list[Any] = [0, -1, 1, 2, -3, (0, 1), (0, 0), (), (1, -1), [0]]
DTYPES = ["bool", "int32", "float16", "float32"]


def reductions() -> list[Case]:
    out = []
    with_keepdim = ["sum", "mean", "prod", "max", "min", "std", "var", "logsumexp", "any", "all"]
    single_dim = ["argmax", "argmin"]
    for m, shape in itertools.product(with_keepdim + single_dim + ["amax", "amin"], SHAPES):
        a = arr(shape)
        out.append(same(f"{m}{shape}", lambda x, m=m: getattr(x, m)(), a))
        for d in DIMS:
            if m in single_dim and not isinstance(d, int):
                continue
            for k in (False, True):
                out.append(
                    same(
                        f"{m}{shape}dim={fmt(d)},keepdim={k}",
                        lambda x, m=m, d=d, k=k: getattr(x, m)(d, keepdim=k),
                        a,
                    )
                )
    for m, dt in itertools.product(with_keepdim + single_dim + ["amax", "amin", "cumsum", "cumprod"], DTYPES):
        a = arr((2, 3), dt)
        if m in ("cumsum", "cumprod"):
            out.append(same(f"{m}[{dt}]", lambda x, m=m: getattr(x, m)(1), a))
        else:
            out.append(same(f"{m}[{dt}]", lambda x, m=m: getattr(x, m)(), a, tol=1e-2))
            out.append(same(f"{m}[{dt}]dim=1", lambda x, m=m: getattr(x, m)(1), a))
    for dt, t in itertools.product(["int32", "float16", "float32", "bool"], ["int32", "int64", "float32", "float16"]):
        a = arr((2, 3), dt)
        out.append(
            pair(
                f"sum[{dt}]dtype={t}",
                lambda x, t=t: x.sum(1, dtype=getattr(dtypes, t)),
                lambda x, t=t: x.sum(1, dtype=getattr(torch, t)),
                a,
                tol=1e-2,
            )
        )
        out.append(
            pair(
                f"prod[{dt}]dtype={t}",
                lambda x, t=t: x.prod(1, dtype=getattr(dtypes, t)),
                lambda x, t=t: x.prod(1, dtype=getattr(torch, t)),
                a,
                tol=1e-2,
            )
        )
    for shape, c in itertools.product([(1,), (2, 3), (0,)], [0, 1, 2, 5]):
        for m in ("std", "var"):
            out.append(
                pair(
                    f"{m}{shape}correction={c}",
                    lambda x, m=m, c=c: getattr(x, m)(correction=c),
                    lambda x, m=m, c=c: getattr(x, m)(correction=c),
                    arr(shape),
                )
            )
    for shape, d in itertools.product([(), (0,), (3,), (2, 3)], [None, 0, -1, 1, -2, 2]):
        for m in ("median", "nansum", "nanmean", "count_nonzero"):
            call = (lambda x, m=m: getattr(x, m)()) if d is None else (lambda x, m=m, d=d: getattr(x, m)(d))
            out.append(same(f"{m}{shape}dim={d}", call, arr(shape)))
        for m in ("cummax", "cummin", "logcumsumexp", "cumsum", "cumprod", "softmax", "log_softmax"):
            if d is None:
                continue
            out.append(same(f"{m}{shape}dim={d}", lambda x, m=m, d=d: getattr(x, m)(d), arr(shape)))
    for p, d in itertools.product([1, 2, 3, float("inf"), 0, -1, "fro", "nuc"], [None, 0, 1, (0, 1), 2]):
        call = (lambda x, p=p: x.norm(p)) if d is None else (lambda x, p=p, d=d: x.norm(p, d))
        out.append(same(f"norm(2,3)p={p},dim={d}", call, arr((2, 3))))
    return out


def movement() -> list[Case]:
    out = []
    a23, a234, a0, a1, s = arr((2, 3)), arr((2, 3, 4)), arr((0, 3)), arr((1, 3, 1)), arr(())
    calls: list[tuple[str, Callable[[Any], Any], list[np.ndarray]]] = []
    for d in [0, -1, 2, -4, 3, 1]:
        calls.append((f"unsqueeze({d})", lambda x, d=d: x.unsqueeze(d), [s, a23, a1]))
        calls.append((f"squeeze({d})", lambda x, d=d: x.squeeze(d), [s, a23, a1]))
        calls.append((f"flip({d})", lambda x, d=d: x.flip(d), [s, a23]))
        calls.append((f"roll(1,{d})", lambda x, d=d: x.roll(1, d), [s, a23]))
        calls.append((f"cumsum({d})", lambda x, d=d: x.cumsum(d), [s]))
        calls.append((f"narrow({d},1,1)", lambda x, d=d: x.narrow(d, 1, 1), [a23, a234]))
        calls.append((f"split(1,{d})", lambda x, d=d: x.split(1, d), [a23, s]))
        calls.append((f"chunk(2,{d})", lambda x, d=d: x.chunk(2, d), [a23, s]))
        calls.append((f"movedim(0,{d})", lambda x, d=d: x.movedim(0, d), [a23, s]))
        calls.append((f"select({d},0)", lambda x, d=d: x.select(d, 0), [a23, s]))
        calls.append((f"unbind({d})", lambda x, d=d: x.unbind(d), [a23, s]))
        calls.append((f"diagonal(0,0,{d})", lambda x, d=d: x.diagonal(0, 0, d), [a23, a234]))
        calls.append((f"tril({d})", lambda x, d=d: x.tril(d), [a23, a234, s, arr((3,))]))
        calls.append((f"triu({d})", lambda x, d=d: x.triu(d), [a23, a234, s, arr((3,))]))
    for a, b in [(0, 1), (1, 0), (0, 2), (-1, -2), (0, 0), (-3, 0), (2, 2)]:
        calls.append((f"flatten({a},{b})", lambda x, a=a, b=b: x.flatten(a, b), [s, a23, a234]))
        calls.append((f"transpose({a},{b})", lambda x, a=a, b=b: x.transpose(a, b), [s, a23, a234]))
        calls.append((f"swapaxes({a},{b})", lambda x, a=a, b=b: x.swapaxes(a, b), [s, a23]))
    for shape in [(3, 2), (-1,), (6, -1), (-1, -1), (0, -1), (7,), (), (1, 6, 1), (2, -2), (0,)]:
        calls.append((f"reshape{shape}", lambda x, shape=shape: x.reshape(shape), [a23, a0, s]))
    for shape in [(2, 3), (1, 2, 3), (2, 1), (3, 3), (-1, 3), (2, -1), (4, -1, 3), (0, 3), (3,), ()]:
        calls.append((f"expand{shape}", lambda x, shape=shape: x.expand(shape), [a23, arr((1, 3)), s, a0]))
    for rep in [(2,), (2, 1), (1, 2, 2), (0, 1), (-1, 1), ()]:
        calls.append((f"repeat{rep}", lambda x, rep=rep: x.repeat(rep), [a23, s]))
        calls.append((f"tile{rep}", lambda x, rep=rep: x.tile(rep), [a23, s]))
    for p in [(1, 0), (0, 1), (0,), (0, 0), (2, 0), (-1, 0), (1, 0, 2), ()]:
        calls.append((f"permute{p}", lambda x, p=p: x.permute(p), [a23, s]))
    for d, sz in [(0, (2,)), (1, (3, 1)), (1, (-1, 3)), (-1, (1, 3)), (2, (3,)), (1, (2, 2)), (0, ()), (1, (0, -1))]:
        calls.append((f"unflatten({d},{sz})", lambda x, d=d, sz=sz: x.unflatten(d, sz), [a23]))
    for sizes in [(1, 2), (2, 2), (3,), (0, 3), (-1, 4), [1, 1, 1]]:
        calls.append((f"split({sizes},1)", lambda x, sizes=sizes: x.split(list(sizes), 1), [a23]))
    for n in [1, 3, 4, 0, -1]:
        calls.append((f"chunk({n},1)", lambda x, n=n: x.chunk(n, 1), [a23, a0]))
    for st, ln in [(0, 0), (2, 2), (-1, 1), (3, 0), (4, 0), (-4, 1), (0, -1)]:
        calls.append((f"narrow(1,{st},{ln})", lambda x, st=st, ln=ln: x.narrow(1, st, ln), [a23]))
    for sh, dm in [((1, 2), (0, 1)), ((1,), (0, 1)), ((1, 2), (0,)), ((1,), (0, 0)), (5, None), (-7, 1)]:
        calls.append((f"roll({sh},{dm})", lambda x, sh=sh, dm=dm: x.roll(sh, dm), [a23]))
    for src, dst in [((0, 1), (1, 0)), ((0, 0), (1, 0)), ((0,), (1, 0)), (-1, 0), (0, 2)]:
        calls.append((f"movedim({src},{dst})", lambda x, src=src, dst=dst: x.movedim(src, dst), [a23, a234]))
    for dims in [(0, 1), (0, 0), (), (2,), (-1, -2)]:
        calls.append((f"flip{dims}", lambda x, dims=dims: x.flip(dims), [a23]))
    for name, fn, arrays in calls:
        for a in arrays:
            out.append(same(f"{name}{a.shape}", fn, a))
    for shape in [(2, 3), (2, 4), (3,), (1, 3), (0, 3), ()]:
        for d in [0, 1, -1, 2, -3]:
            b = arr(shape)
            out.append(
                pair(
                    f"cat(2,3)+{shape}dim={d}",
                    lambda x, y, d=d: x.cat(y, dim=d),
                    lambda x, y, d=d: torch.cat([x, y], d),
                    a23,
                    b,
                )
            )
            out.append(
                pair(
                    f"stack(2,3)+{shape}dim={d}",
                    lambda x, y, d=d: x.stack(y, dim=d),
                    lambda x, y, d=d: torch.stack([x, y], d),
                    a23,
                    b,
                )
            )
    for dt in DTYPES:
        out.append(
            pair(f"cat[float32,{dt}]", lambda x, y: x.cat(y), lambda x, y: torch.cat([x, y]), a23, arr((2, 3), dt))
        )
    out.append(pair("cat()0d", lambda x, y: x.cat(y), lambda x, y: torch.cat([x, y]), s, s))
    out.append(pair("stack()0d", lambda x, y: x.stack(y), lambda x, y: torch.stack([x, y]), s, s))
    return out


UNARY = [
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "reciprocal",
    "logical_not",
    "isnan",
    "isinf",
    "isfinite",
    "square",
    "exp2",
    "log2",
    "erf",
    "frac",
    "sgn",
    "signbit",
    "bitwise_not",
    "positive",
    "expm1",
    "log1p",
    "atan",
    "sinh",
    "nan_to_num",
    "deg2rad",
    "clone",
    "contiguous",
    "float",
    "half",
    "int",
    "long",
    "bool",
    "byte",
]
BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "fmod",
    "remainder",
    "floor_divide",
    "atan2",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "logical_and",
    "logical_or",
    "logical_xor",
    "copysign",
    "hypot",
    "fmax",
    "fmin",
    "xlogy",
    "lerp_half",
    "true_divide",
    "float_power",
    "ldexp",
    "heaviside",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "gcd",
    "lcm",
]


def _binary(m: str) -> Callable[[Any, Any], Any]:
    if m == "lerp_half":
        return lambda x, y: x.lerp(y, 0.5)
    return lambda x, y: getattr(x, m)(y)


def elementwise() -> list[Case]:
    out = []
    for m, dt in itertools.product(UNARY, DTYPES):
        if not hasattr(Tensor, m):
            continue
        out.append(same(f"{m}[{dt}]", lambda x, m=m: getattr(x, m)(), arr((2, 3), dt), tol=1e-2))
    for m in UNARY:
        if hasattr(Tensor, m):
            out.append(same(f"{m}(0d)", lambda x, m=m: getattr(x, m)(), arr(())))
            out.append(same(f"{m}(0,)", lambda x, m=m: getattr(x, m)(), arr((0,))))
    for m, d1, d2 in itertools.product(BINARY, DTYPES, DTYPES):
        if m == "lerp_half" or hasattr(Tensor, m):
            out.append(same(f"{m}[{d1},{d2}]", _binary(m), arr((2, 3), d1), arr((2, 3), d2, seed=1), tol=1e-2))
    scalars: list[Any] = [2, -1, 0.5, True, 0]
    for m, dt, sc in itertools.product(BINARY, DTYPES, scalars):
        if m == "lerp_half" or not hasattr(Tensor, m):
            continue
        out.append(same(f"{m}[{dt}]scalar={sc}", lambda x, m=m, sc=sc: getattr(x, m)(sc), arr((2, 3), dt), tol=1e-2))
    for sa, sb in [
        ((2, 3), (3,)),
        ((2, 3), (2,)),
        ((), (2, 3)),
        ((0,), (1,)),
        ((0,), (2,)),
        ((2, 1), (1, 3)),
        ((3, 1, 2), (2, 2)),
        ((1, 0), (3, 1)),
    ]:
        for m in ["add", "mul", "maximum", "eq", "where_", "lerp_half", "atan2"]:
            if m == "where_":
                out.append(
                    pair(
                        f"where{sa},{sb}",
                        lambda x, y: (x > 0).where(x, y),
                        lambda x, y: torch.where(x > 0, x, y),
                        arr(sa),
                        arr(sb),
                    )
                )
            else:
                out.append(same(f"{m}{sa},{sb}", _binary(m), arr(sa), arr(sb)))
    for sc, dt in itertools.product([2, 2.5, -1, True], DTYPES):
        a = arr((2, 3), dt)
        out.append(same(f"rsub[{dt}]{sc}", lambda x, sc=sc: sc - x, a, tol=1e-2))
        out.append(same(f"rdiv[{dt}]{sc}", lambda x, sc=sc: sc / x, a, tol=1e-2))
        out.append(same(f"rpow[{dt}]{sc}", lambda x, sc=sc: sc**x, a, tol=1e-2))
        out.append(same(f"rfloordiv[{dt}]{sc}", lambda x, sc=sc: sc // x, a, tol=1e-2))
        out.append(same(f"rmod[{dt}]{sc}", lambda x, sc=sc: sc % x, a, tol=1e-2))
        out.append(same(f"clamp[{dt}]({sc},None)", lambda x, sc=sc: x.clamp(sc), a, tol=1e-2))
        out.append(same(f"clamp[{dt}](None,{sc})", lambda x, sc=sc: x.clamp(None, sc), a, tol=1e-2))
        out.append(same(f"masked_fill[{dt}]{sc}", lambda x, sc=sc: x.masked_fill(x > 0, sc), a, tol=1e-2))
        out.append(
            pair(
                f"where[{dt}]scalars,{sc}",
                lambda x, sc=sc: (x > 0).where(sc, 0.5),
                lambda x, sc=sc: torch.where(x > 0, sc, 0.5),
                a,
            )
        )
    out.append(same("clamp(lo>hi)", lambda x: x.clamp(1.0, -1.0), arr((2, 3))))
    out.append(same("clamp()", lambda x: x.clamp(), arr((2, 3))))
    out.append(same("clamp(tensor)", lambda x, y: x.clamp(y, y + 1), arr((2, 3)), arr((3,))))
    return out


def indexing() -> list[Case]:
    out = []
    a = arr((2, 3))
    idxs: list[Any] = [
        0,
        -1,
        2,
        -3,
        5,
        (0, 0),
        (0, 5),
        (0, 0, 0),
        (slice(None), 2),
        (slice(None), -4),
        (Ellipsis, 0),
        (Ellipsis, Ellipsis),
        (None, 0),
        (slice(0, 0),),
        (slice(5, 10),),
        (slice(None, None, 0),),
        (slice(None, None, 2),),
        True,
        False,
        (None, None),
        (),
        ([0, 1], [1, 2]),
        ([0, 1, 0],),
        ([[0], [1]], [0, 2]),
        ([0, 1], slice(None), None),
        1.0,
        ([],),
        ([True, False],),
        ([True, False, True],),
    ]
    for i in idxs:
        out.append(same(f"getitem{fmt(i)}", lambda x, i=i: x[i], a))
    out.append(same("getitem0d[0]", lambda x: x[0], arr(())))
    out.append(same("getitem0d[...]", lambda x: x[...], arr(())))
    out.append(same("getitem0d[None]", lambda x: x[None], arr(())))
    out.append(same("getitem(0,)[0]", lambda x: x[0], arr((0,))))
    out.append(same("getitem mask", lambda x: x[x > 0], a))
    out.append(
        pair(
            "getitem mask shape",
            lambda x: x[Tensor([True, False])],
            lambda x: x[torch.tensor([True, False])],
            arr((3,)),
        )
    )
    for dim, ishape in [(0, (2, 3)), (1, (2, 2)), (1, (3, 3)), (1, (2,)), (2, (2, 3)), (-1, (1, 1)), (0, (0, 3))]:
        idx = np.zeros(ishape, dtype=np.int64)
        out.append(same(f"gather({dim},{ishape})", lambda x, i, dim=dim: x.gather(dim, i), a, idx))
        out.append(same(f"scatter({dim},{ishape})", lambda x, i, dim=dim: x.scatter(dim, i, 1.0), a, idx))
    for dim, idx in [(0, [1, 0]), (1, [2]), (2, [0]), (-1, []), (0, [[0]])]:
        i = np.array(idx, dtype=np.int64)
        out.append(same(f"index_select({dim},{idx})", lambda x, i, dim=dim: x.index_select(dim, i), a, i))
    for dt in ["float32", "int32", "bool"]:
        idx = np.abs(arr((2, 3), dt)).astype(dt) % 2 if dt != "bool" else arr((2, 3), dt)
        out.append(same(f"gather index[{dt}]", lambda x, i: x.gather(1, i), a, idx))
        out.append(same(f"index_select index[{dt}]", lambda x, i: x.index_select(1, i), a, idx[0]))
        out.append(same(f"take[{dt}]", lambda x, i: x.take(i), a, idx))
    out.append(same("masked_select", lambda x: x.masked_select(x > 0), a))
    out.append(same("masked_select bcast", lambda x, m: x.masked_select(m), a, arr((3,), "bool")))
    out.append(same("masked_fill float mask", lambda x, m: x.masked_fill(m, 0.0), a, arr((2, 3))))
    out.append(same("masked_fill int mask", lambda x, m: x.masked_fill(m, 0.0), a, arr((2, 3), "int32")))
    out.append(
        same(
            "where int cond",
            lambda c, x: c.where(x, 0.0) if isinstance(c, Tensor) else torch.where(c, x, 0.0),
            arr((2, 3), "bool"),
            a,
        )
    )
    return out


def _setitem(i: Any, v: Any) -> Callable[[Any], Any]:
    def fn(x: Any) -> Any:
        y = x.clone() if isinstance(x, torch.Tensor) else x.contiguous()
        y[i] = v
        return y

    return fn


def setitem() -> list[Case]:
    out = []
    a = arr((2, 3))
    for i, v in [
        (0, 1.0),
        (5, 1.0),
        ((0, 0, 0), 1.0),
        (slice(None), np.ones((3,), np.float32)),
        (slice(None), np.ones((4,), np.float32)),
        (0, np.ones((2, 3), np.float32)),
        ((0, 1), 7),
    ]:
        vv = v
        out.append(
            pair(
                f"setitem[{fmt(i)}]={type(v).__name__}",
                _setitem(i, Tensor(vv) if isinstance(vv, np.ndarray) else vv),
                _setitem(i, torch.from_numpy(vv) if isinstance(vv, np.ndarray) else vv),
                a,
            )
        )
    return out


def creation() -> list[Case]:
    out: list[Case] = []

    def c(name: str, ours: Callable[[], Any], theirs: Callable[[], Any], **kw: Any) -> None:
        out.append(Case(name, ours, theirs, **kw))

    for args in [
        (5,),
        (0,),
        (-2,),
        (1, 5),
        (5, 1),
        (0, 5, 2),
        (0, 5, 0),
        (0, 1, 0.25),
        (5, 0, -1),
        (2.5,),
        (0, 5, -1),
        (1, 1),
        (-3, 3, 2),
    ]:
        c(f"arange{args}", lambda args=args: Tensor.arange(*args), lambda args=args: torch.arange(*args))
    for args in [(0, 1, 5), (0, 1, 1), (0, 1, 0), (0, 1, -1), (1, 0, 3), (0, 1, 2.5)]:
        c(f"linspace{args}", lambda args=args: Tensor.linspace(*args), lambda args=args: torch.linspace(*args))
    for shape in [(2, 3), (0,), (), (-1,), (2, -3), (1.5,)]:
        for m in ["zeros", "ones", "empty", "rand", "randn"]:
            exact = m in ("zeros", "ones")
            c(
                f"{m}{shape}",
                lambda m=m, shape=shape: _shape_only(getattr(Tensor, m)(*shape), exact),
                lambda m=m, shape=shape: _shape_only(getattr(torch, m)(*shape), exact),
            )
        c(f"full{shape}", lambda shape=shape: Tensor.full(shape, 2.0), lambda shape=shape: torch.full(shape, 2.0))
    for v, dt in itertools.product([2, 2.5, True, -1, 300], ["float32", "int32", "uint8", "bool", "float16", None]):
        c(
            f"full({v},dtype={dt})",
            lambda v=v, dt=dt: Tensor.full((2,), v, dtype=dt and getattr(dtypes, dt)),
            lambda v=v, dt=dt: torch.full((2,), v, dtype=dt and getattr(torch, dt)),
        )
    for n, m in [(3, None), (0, None), (2, 3), (3, 0), (-1, None), (2, -1)]:
        c(f"eye({n},{m})", lambda n=n, m=m: Tensor.eye(n, m), lambda n=n, m=m: torch.eye(n, m if m is not None else n))
    for data in [
        [1, 2],
        [1.5, 2],
        [True, False],
        [[1], [2]],
        [],
        [[]],
        [[1, 2], [3]],
        3,
        2.5,
        True,
        [1, 2.5, True],
        [[1, 2], [3, 4.0]],
        [[[]]],
        ["a"],
    ]:
        c(f"Tensor({fmt(data)})", lambda data=data: Tensor(data), lambda data=data: torch.tensor(data))
    for data, dt in itertools.product(
        [[1, 2], [1.7, -2.3], [True, False]], ["int8", "uint8", "float16", "bool", "int64"]
    ):
        c(
            f"Tensor({data},dtype={dt})",
            lambda data=data, dt=dt: Tensor(data, dtype=getattr(dtypes, dt)),
            lambda data=data, dt=dt: torch.tensor(data, dtype=getattr(torch, dt)),
        )
    for like in ["zeros_like", "ones_like", "full_like"]:
        for dt in [None, "int32", "bool"]:
            extra = (3,) if like == "full_like" else ()
            c(
                f"{like}(dtype={dt})",
                lambda like=like, dt=dt, extra=extra: getattr(Tensor, like)(
                    Tensor(arr((2, 3))), *extra, dtype=dt and getattr(dtypes, dt)
                ),
                lambda like=like, dt=dt, extra=extra: getattr(torch, like)(
                    torch.from_numpy(arr((2, 3))), *extra, dtype=dt and getattr(torch, dt)
                ),
            )
    return out


def _shape_only(t: Any, exact: bool) -> Any:
    """Random and uninitialised tensors: compare shape and dtype only (values through a multiply by zero)."""
    return t if exact else t * 0


def functional() -> list[Case]:
    out: list[Case] = []
    x4, w, b = arr((1, 2, 5, 5)), arr((4, 2, 3, 3), seed=1), arr((4,), seed=2)
    for kw in [
        dict(),
        dict(stride=2),
        dict(stride=0),
        dict(padding=1),
        dict(padding=-1),
        dict(dilation=2),
        dict(dilation=0),
        dict(groups=2),
        dict(groups=3),
        dict(padding="same"),
        dict(padding="valid"),
        dict(padding="same", stride=2),
        dict(padding="bogus"),
        dict(stride=(1, 2)),
        dict(stride=(1, 2, 3)),
    ]:
        wt = arr((4, 1, 3, 3), seed=1) if kw.get("groups") == 2 else w
        out.append(
            pair(
                f"conv2d{fmt(kw)}",
                lambda x, w, b, kw=kw: x.conv2d(w, b, **kw),
                lambda x, w, b, kw=kw: F.conv2d(x, w, b, **kw),
                x4,
                wt,
                b,
            )
        )
    for xs, ws in [
        ((2, 5, 5), (4, 2, 3, 3)),
        ((1, 2, 2, 2), (4, 2, 3, 3)),
        ((1, 2, 5, 5), (4, 2, 3)),
        ((1, 2, 5, 5), (4, 2, 3, 3)),
    ]:
        out.append(pair(f"conv2d x{xs} w{ws}", lambda x, w: x.conv2d(w), lambda x, w: F.conv2d(x, w), arr(xs), arr(ws)))
    out.append(
        pair("conv2d bias shape", lambda x, w, b: x.conv2d(w, b), lambda x, w, b: F.conv2d(x, w, b), x4, w, arr((3,)))
    )
    for xs, ws, bs in [
        ((2, 3), (4, 3), (4,)),
        ((2, 3), (4, 2), None),
        ((3,), (4, 3), None),
        ((2, 3), (3,), None),
        ((2, 3), (4, 3), (5,)),
        ((0, 3), (4, 3), (4,)),
    ]:
        arrays = [arr(xs), arr(ws)] + ([arr(bs)] if bs else [])
        out.append(
            pair(
                f"linear x{xs} w{ws} b{bs}",
                lambda x, w, *b: x.linear(w, *b),
                lambda x, w, *b: F.linear(x, w, *b),
                *arrays,
            )
        )
    for p in [0.0, 0.5, 1.0, -0.1, 1.5]:
        out.append(
            pair(
                f"dropout(p={p}) eval", lambda x, p=p: x.dropout(p), lambda x, p=p: F.dropout(x, p, False), arr((2, 3))
            )
        )
        out.append(
            pair(
                f"dropout(p={p}) train",
                lambda x, p=p: _train(lambda: x.dropout(p) * 0),
                lambda x, p=p: F.dropout(x, p, True) * 0,
                arr((2, 3)),
            )
        )
    for ls in [0.0, 0.1, -0.1, 1.5]:
        out.append(
            pair(
                f"cross_entropy(label_smoothing={ls})",
                lambda x, y, ls=ls: x.cross_entropy(y, label_smoothing=ls),
                lambda x, y, ls=ls: F.cross_entropy(x, y.long(), label_smoothing=ls),
                arr((2, 3)),
                np.array([0, 2], np.int32),
            )
        )
    for red in ["mean", "sum", "none", "bogus"]:
        for loss in ("cross_entropy", "nll_loss"):  # class targets: the same arguments in both libraries
            out.append(
                pair(
                    f"{loss}(reduction={red})",
                    lambda x, y, red=red, loss=loss: getattr(x, loss)(y, reduction=red),
                    lambda x, y, red=red, loss=loss: getattr(F, loss)(x, y.long(), reduction=red),
                    arr((2, 3)),
                    np.array([0, 2], np.int32),
                )
            )
        out.append(
            pair(
                f"bce(reduction={red})",
                lambda x, y, red=red: x.sigmoid().binary_crossentropy(y, reduction=red),
                lambda x, y, red=red: F.binary_cross_entropy(x.sigmoid(), y, reduction=red),
                arr((2, 3)),
                arr((2, 3), seed=3).__abs__() / 2,
            )
        )
    for xs, ys in [
        ((2, 3), (3,)),
        ((2, 3), (2, 1)),
        ((3,), ()),
        ((2, 3, 4), (2, 4)),
        ((2, 3, 4), (2, 3)),
        ((0, 3), (0,)),
    ]:
        y = np.zeros(ys, np.int32)
        out.append(
            pair(
                f"cross_entropy x{xs} y{ys}",
                lambda x, y: x.cross_entropy(y),
                lambda x, y: F.cross_entropy(x, y.long()),
                arr(xs),
                y,
            )
        )
        out.append(
            pair(f"nll_loss x{xs} y{ys}", lambda x, y: x.nll_loss(y), lambda x, y: F.nll_loss(x, y.long()), arr(xs), y)
        )
    out.append(
        pair(
            "cross_entropy float target",
            lambda x, y: x.cross_entropy(y),
            lambda x, y: F.cross_entropy(x, y),
            arr((2, 3)),
            np.abs(arr((2, 3), seed=4)),
        )
    )
    out.append(
        pair(
            "bce shape",
            lambda x, y: x.sigmoid().binary_crossentropy(y),
            lambda x, y: F.binary_cross_entropy(x.sigmoid(), y),
            arr((2, 3)),
            np.abs(arr((3, 2))) / 2,
        )
    )
    out.append(
        pair(
            "bce_logits shape",
            lambda x, y: x.binary_crossentropy_logits(y),
            lambda x, y: F.binary_cross_entropy_with_logits(x, y),
            arr((2, 3)),
            np.abs(arr((3,))) / 2,
        )
    )
    x44 = arr((1, 1, 4, 4))
    for kw in [
        dict(kernel_size=2),
        dict(kernel_size=5),
        dict(kernel_size=0),
        dict(kernel_size=2, stride=0),
        dict(kernel_size=2, padding=1),
        dict(kernel_size=2, padding=2),
        dict(kernel_size=3, padding=-1),
        dict(kernel_size=3, stride=2, ceil_mode=True),
        dict(kernel_size=(2, 3)),
        dict(kernel_size=(2, 3, 4)),
        dict(kernel_size=2, dilation=2),
        dict(kernel_size=2, dilation=0),
        dict(kernel_size=4, dilation=2),
    ]:
        out.append(
            pair(
                f"max_pool2d{fmt(kw)}", lambda x, kw=kw: x.max_pool2d(**kw), lambda x, kw=kw: F.max_pool2d(x, **kw), x44
            )
        )
        kwa = {k: v for k, v in kw.items() if k != "dilation"}
        out.append(
            pair(
                f"avg_pool2d{fmt(kwa)}",
                lambda x, kw=kwa: x.avg_pool2d(**kw),
                lambda x, kw=kwa: F.avg_pool2d(x, **kw),
                x44,
            )
        )
    for xs in [(4, 4), (1, 4, 4), (1, 1, 1, 4, 4), (1, 1, 0, 4)]:
        out.append(pair(f"max_pool2d x{xs}", lambda x: x.max_pool2d(2), lambda x: F.max_pool2d(x, 2), arr(xs)))
        out.append(pair(f"avg_pool2d x{xs}", lambda x: x.avg_pool2d(2), lambda x: F.avg_pool2d(x, 2), arr(xs)))
    for kw in [
        dict(size=(8, 8)),
        dict(scale_factor=2),
        dict(scale_factor=0.5),
        dict(size=0),
        dict(size=(0, 4)),
        dict(),
        dict(size=(4, 4), scale_factor=2),
        dict(scale_factor=-1),
        dict(size=(8, 8), mode="bilinear"),
        dict(size=(8, 8), mode="bogus"),
        dict(size=(8, 8, 8)),
        dict(size=(8, 8), mode="bilinear", align_corners=True),
        dict(size=(8, 8), mode="nearest", align_corners=True),
    ]:
        out.append(
            pair(
                f"interpolate{fmt(kw)}",
                lambda x, kw=kw: x.interpolate(**kw),
                lambda x, kw=kw: F.interpolate(x, **kw),
                x44,
            )
        )
    for n in [3, 5, 0, -1, 1]:
        out.append(
            pair(
                f"one_hot({n})",
                lambda x, n=n: x.one_hot(n),
                lambda x, n=n: F.one_hot(x.long(), n),
                np.array([0, 2, 1], np.int32),
            )
        )
    out.append(pair("one_hot float", lambda x: x.one_hot(3), lambda x: F.one_hot(x, 3), arr((3,))))
    for kw in [dict(p=2.0, dim=1), dict(p=1.0, dim=0), dict(dim=2), dict(dim=-3), dict(p=0.0), dict(eps=-1.0)]:
        out.append(
            pair(
                f"normalize{fmt(kw)}",
                lambda x, kw=kw: x.normalize(**kw),
                lambda x, kw=kw: F.normalize(x, **kw),
                arr((2, 3)),
            )
        )
    for pad in [(1, 1), (1, 1, 1, 1), (1,), (1, 1, 1), (-1, 0), (-3, 0), (0, 0, 0, 0, 0, 0), (-2, -2), ()]:
        for mode in ["constant", "reflect", "replicate", "circular"]:
            out.append(
                pair(
                    f"pad{pad},{mode}",
                    lambda x, pad=pad, mode=mode: x.pad(pad, mode=mode),
                    lambda x, pad=pad, mode=mode: F.pad(x, pad, mode=mode),
                    arr((1, 2, 3)),
                )
            )
    for ax, shape in [(-1, (3,)), ((-2, -1), (2, 3)), ((0, 1, 2), (1, 2, 3)), (3, None)]:
        out.append(
            pair(
                f"layer_norm axis={ax}",
                lambda x, ax=ax: x.layernorm(ax),
                lambda x, shape=shape: F.layer_norm(x, shape) if shape else torch.ones(1)[5],
                arr((1, 2, 3)),
            )
        )
    for eps in [1e-5, 0.0, -1.0]:
        out.append(
            pair(
                f"layernorm eps={eps}",
                lambda x, eps=eps: x.layernorm(eps=eps),
                lambda x, eps=eps: F.layer_norm(x, (3,), eps=eps),
                arr((2, 3)),
            )
        )
    for qs, ks, vs in [
        ((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)),
        ((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8)),
        ((1, 2, 4, 8), (1, 2, 4, 7), (1, 2, 4, 8)),
        ((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 4, 8)),
        ((4, 8), (4, 8), (4, 8)),
        ((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 3)),
    ]:
        out.append(
            pair(
                f"sdpa q{qs} k{ks} v{vs}",
                lambda q, k, v: q.scaled_dot_product_attention(k, v),
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                arr(qs),
                arr(ks),
                arr(vs),
            )
        )
        out.append(
            pair(
                f"sdpa causal q{qs} k{ks} v{vs}",
                lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                arr(qs),
                arr(ks),
                arr(vs),
            )
        )
    for f_ in [
        "relu",
        "sigmoid",
        "tanh",
        "gelu",
        "silu",
        "elu",
        "selu",
        "softplus",
        "mish",
        "hardswish",
        "hardsigmoid",
        "relu6",
        "logsigmoid",
        "softsign",
        "leaky_relu",
        "celu",
        "hardtanh",
    ]:
        for dt in ["float16", "int32", "bool"]:
            tf = getattr(F, f_, None) or getattr(torch, f_)
            out.append(
                pair(
                    f"{f_}[{dt}]", lambda x, f_=f_: getattr(x, f_)(), lambda x, tf=tf: tf(x), arr((2, 3), dt), tol=1e-2
                )
            )
    for xs, ws in [((2, 3), (3,)), ((3,), (3,)), ((2, 3), (4,)), ((0, 3), (3,)), ((), ())]:
        out.append(pair(f"dot/matmul {xs}@{ws}", lambda x, w: x @ w, lambda x, w: x @ w, arr(xs), arr(ws)))
    for d1, d2 in itertools.product(DTYPES, DTYPES):
        out.append(same(f"matmul[{d1},{d2}]", lambda x, y: x @ y, arr((2, 3), d1), arr((3, 2), d2), tol=1e-2))
    return out


def _train(fn: Callable[[], Any]) -> Any:
    with Tensor.train():
        return fn()


def modules() -> list[Case]:
    out: list[Case] = []
    for mom, eps in [
        (0.1, 1e-5),
        (0.0, 1e-5),
        (1.0, 1e-5),
        (-0.5, 1e-5),
        (1.5, 1e-5),
        (0.1, 0.0),
        (0.1, -1.0),
        (None, 1e-5),
    ]:
        out.append(
            Case(
                f"BatchNorm2d(momentum={mom},eps={eps})",
                lambda mom=mom, eps=eps: _bn(nn.BatchNorm(3, eps=eps, momentum=mom), Tensor, True),
                lambda mom=mom, eps=eps: _bn(torch.nn.BatchNorm2d(3, eps=eps, momentum=mom), torch.from_numpy, False),
            )
        )
    for n, shp in [(3, (2, 3, 4, 4)), (4, (2, 3, 4, 4)), (3, (2, 3)), (3, (3, 4, 4)), (3, (1, 3, 1, 1)), (0, (2, 0))]:
        out.append(
            Case(
                f"BatchNorm({n}) x{shp}",
                lambda n=n, shp=shp: _bn(nn.BatchNorm(n), Tensor, True, shp),
                lambda n=n, shp=shp: _bn(
                    torch.nn.BatchNorm2d(n) if len(shp) == 4 else torch.nn.BatchNorm1d(n), torch.from_numpy, False, shp
                ),
            )
        )
    for g, c in [(2, 4), (3, 4), (0, 4), (4, 4), (-1, 4)]:
        out.append(
            Case(
                f"GroupNorm({g},{c})",
                lambda g=g, c=c: nn.GroupNorm(g, c)(Tensor(arr((2, c, 3)))),
                lambda g=g, c=c: torch.nn.GroupNorm(g, c)(torch.from_numpy(arr((2, c, 3)))).detach(),
            )
        )
    for shp, xs in [((3,), (2, 3)), ((4,), (2, 3)), ((2, 3), (2, 3)), (3, (2, 3)), ((), (2, 3)), ((0,), (2, 0))]:
        out.append(
            Case(
                f"LayerNorm({shp}) x{xs}",
                lambda shp=shp, xs=xs: nn.LayerNorm(shp)(Tensor(arr(xs))),
                lambda shp=shp, xs=xs: torch.nn.LayerNorm(shp)(torch.from_numpy(arr(xs))).detach(),
            )
        )
    for fi, fo, xs in [(3, 4, (2, 3)), (0, 4, (2, 0)), (3, 0, (2, 3)), (3, 4, (2, 5)), (-1, 4, (2, 3))]:
        out.append(
            Case(
                f"Linear({fi},{fo}) x{xs}",
                lambda fi=fi, fo=fo, xs=xs: nn.Linear(fi, fo)(Tensor(arr(xs))) * 0,
                lambda fi=fi, fo=fo, xs=xs: torch.nn.Linear(fi, fo)(torch.from_numpy(arr(xs))).detach() * 0,
            )
        )
    for n, d, idx in [(4, 2, [0, 3]), (4, 0, [1]), (0, 2, []), (-1, 2, [0]), (4, 2, [[0, 1]])]:
        out.append(
            Case(
                f"Embedding({n},{d})[{idx}]",
                lambda n=n, d=d, idx=idx: nn.Embedding(n, d)(Tensor(np.array(idx, np.int32))) * 0,
                lambda n=n, d=d, idx=idx: torch.nn.Embedding(n, d)(torch.tensor(idx, dtype=torch.long)).detach() * 0,
            )
        )
    for kw in [
        dict(),
        dict(stride=0),
        dict(padding=-1),
        dict(groups=2),
        dict(groups=3),
        dict(kernel_size=0),
        dict(padding="same"),
        dict(bias=False),
    ]:
        args = {"kernel_size": 3, **kw}
        out.append(
            Case(
                f"Conv2d(2,4,{fmt(args)})",
                lambda args=args: nn.Conv2d(2, 4, **args)(Tensor(arr((1, 2, 5, 5)))) * 0,
                lambda args=args: torch.nn.Conv2d(2, 4, **args)(torch.from_numpy(arr((1, 2, 5, 5)))).detach() * 0,
            )
        )
    return out


def _bn(mod: Any, mk: Callable[[np.ndarray], Any], ours: bool, shape: tuple[int, ...] = (2, 3, 4, 4)) -> Any:
    """Two training steps then one eval step: the running statistics (momentum) show in the eval output."""
    x = arr(shape)
    outs = []
    if ours:
        with Tensor.train():
            outs += [mod(mk(x)), mod(mk(x * 2 + 1))]
        outs.append(mod(mk(x)))
        return outs
    mod.train()
    outs += [mod(mk(x)).detach(), mod(mk(x * 2 + 1)).detach()]
    mod.eval()
    outs.append(mod(mk(x)).detach())
    return outs


def selection() -> list[Case]:
    """Sorts and selections over every kind of dim and k, and torch's keyword arguments."""
    out: list[Case] = []
    for shape, d in itertools.product([(), (0,), (3,), (2, 3)], [0, -1, 1, -3]):
        a = arr(shape)
        out.append(same(f"sort{shape}dim={d}", lambda x, d=d: x.sort(d), a))
        out.append(same(f"sort{shape}dim={d},descending", lambda x, d=d: x.sort(d, descending=True), a))
        out.append(same(f"argsort{shape}dim={d}", lambda x, d=d: x.argsort(d), a))
        out.append(same(f"diff{shape}dim={d}", lambda x, d=d: x.diff(dim=d), a))
        for k in (0, 1, 3, 4, -1):
            out.append(same(f"topk{shape}k={k},dim={d}", lambda x, k=k, d=d: x.topk(k, d), a))
            out.append(same(f"kthvalue{shape}k={k},dim={d}", lambda x, k=k, d=d: x.kthvalue(k, d), a))
    kwargs: list[tuple[str, Callable[[Any], Any]]] = [
        ("sum(keepdim=True)", lambda x: x.sum(keepdim=True)),
        ("sum(dtype=)", lambda x: x.sum(dtype=x.dtype)),
        ("std(correction=0)", lambda x: x.std(correction=0)),
        ("var(1,correction=2,keepdim=True)", lambda x: x.var(1, correction=2, keepdim=True)),
        ("flatten(start_dim=1)", lambda x: x.flatten(start_dim=1)),
        ("flatten(end_dim=0)", lambda x: x.flatten(end_dim=0)),
        ("squeeze(dim=0)", lambda x: x.squeeze(dim=0)),
        ("unsqueeze(dim=-1)", lambda x: x.unsqueeze(dim=-1)),
        ("topk(k=2,dim=1,largest=False)", lambda x: x.topk(k=2, dim=1, largest=False)),
        ("sort(dim=0,descending=True)", lambda x: x.sort(dim=0, descending=True)),
        ("roll(shifts=1,dims=1)", lambda x: x.roll(shifts=1, dims=1)),
        ("median(dim=1,keepdim=True)", lambda x: x.median(dim=1, keepdim=True)),
        ("norm(p=1,dim=1,keepdim=True)", lambda x: x.norm(p=1, dim=1, keepdim=True)),
        ("clamp(min=0)", lambda x: x.clamp(min=0)),
        ("clamp(max=0)", lambda x: x.clamp(max=0)),
        ("transpose(dim0=0,dim1=1)", lambda x: x.transpose(dim0=0, dim1=1)),
        ("split(1,dim=1)", lambda x: x.split(1, dim=1)),
        ("chunk(2,dim=1)", lambda x: x.chunk(2, dim=1)),
        ("narrow(dim=1,start=1,length=2)", lambda x: x.narrow(dim=1, start=1, length=2)),
        (
            "gather(dim=1,index=)",
            lambda x: x.gather(
                dim=1, index=(x > 0).long() if isinstance(x, torch.Tensor) else (x > 0).cast(dtypes.int32)
            ),
        ),
        ("diff(n=2,dim=1)", lambda x: x.diff(n=2, dim=1)),
        ("cumsum(1)", lambda x: x.cumsum(1)),
        ("softmax(1)", lambda x: x.softmax(1)),
    ]
    for name, fn in kwargs:
        out.append(same(name, fn, arr((2, 3))))
    return out


def all_cases() -> list[Case]:
    return (
        reductions()
        + movement()
        + elementwise()
        + indexing()
        + setitem()
        + creation()
        + functional()
        + modules()
        + selection()
    )


# *** comparison ***


def flatten_result(r: Any) -> list[Any]:
    if isinstance(r, (tuple, list)):
        return [y for x in r for y in flatten_result(x)]
    if hasattr(r, "values") and hasattr(r, "indices") and not isinstance(r, (Tensor, torch.Tensor)):
        return [r.values, r.indices]
    return [r]


def compare(case: Case) -> str | None:
    """None when lazygrad agrees with torch, else what differs, starting with the kind: silent / crash / class /
    missing."""
    try:
        theirs = case.theirs()
        t_err = None
    except Exception as e:  # noqa: BLE001 - any class torch raises is the reference
        theirs, t_err = None, e
    try:
        ours = case.ours()
        ours_list = flatten_result(ours)
        ours_np = [o.numpy() if isinstance(o, Tensor) else o for o in ours_list]
        o_err = None
    except Exception as e:  # noqa: BLE001
        o_err = e
    if o_err is not None:
        internal = isinstance(o_err, INTERNAL) or "UOp(" in str(o_err) or type(o_err).__name__ in INTERNAL_NAMES
        what = f"{type(o_err).__name__}: {str(o_err)[:200]}"
        if t_err is not None and isinstance(o_err, type(t_err)) and "UOp(" not in str(o_err):
            return None
        if internal:
            return f"crash: {what} (torch: {type(t_err).__name__ if t_err else 'ok'})"
        if t_err is None:
            return f"missing: {what}"
        return f"class: {what}; torch raises {type(t_err).__name__}: {str(t_err)[:120]}"
    if t_err is not None:
        return f"silent: returned where torch raises {type(t_err).__name__}: {str(t_err)[:160]}"
    theirs_list = flatten_result(theirs)
    if len(ours_list) != len(theirs_list):
        if len(theirs_list) == 2 and len(ours_list) == 1 and hasattr(theirs, "values"):
            theirs_list = theirs_list[:1]  # max(dim) returns the values only (tinygrad)
        else:
            return f"silent: {len(ours_list)} results, torch {len(theirs_list)}"
    for i, (o, on, t) in enumerate(zip(ours_list, ours_np, theirs_list)):
        if not isinstance(t, torch.Tensor):
            if isinstance(o, Tensor) or o != t:
                return f"silent: result {i} {o!r}, torch {t!r}"
            continue
        if not isinstance(o, Tensor):
            return f"silent: result {i} is {type(o).__name__}, torch a tensor"
        td = str(t.dtype).removeprefix("torch.")
        if o.shape != tuple(t.shape):
            return f"silent: result {i} shape {o.shape}, torch {tuple(t.shape)}"
        if o.dtype.name != td and (td, o.dtype.name) != DEFAULT_INT:
            return f"silent: result {i} dtype {o.dtype.name}, torch {td}"
        tn = t.detach().float().numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()
        tol = max(case.tol, 1e-2) if td in ("float16", "bfloat16") else case.tol
        if on.dtype.kind == "f" or tn.dtype.kind == "f":
            ok = np.allclose(on.astype(np.float64), tn.astype(np.float64), rtol=tol, atol=tol, equal_nan=True)
        else:
            ok = np.array_equal(on.astype(np.int64), tn.astype(np.int64))
        if not ok:
            return f"silent: result {i} values differ:\n{on}\ntorch:\n{tn}"
    return None


# *** what lazygrad does on purpose (README, tinygrad's semantics): (regex over "name: difference", why) ***

DELIBERATE: list[tuple[str, str]] = [
    (
        r"returned where torch raises TypeError",
        "lenient arguments: tuple dims for prod/max/min, scalars for "
        "maximum/atan2/logical_*, no size for zeros(), no dim for logsumexp",
    ),
    (
        r"dim=\(\)",
        "a positional () is tinygrad's axis=() and reduces nothing (torch's dim=() keyword reduces every dim, as here)",
    ),
    (r"^(mean|std|var|nanmean)\[(bool|int32)\]", "mean / std / var of ints give float"),
    (r"^(median|std|var)\(\)dim=", "0-d median indices / correction of a 0-d tensor: torch's special cases"),
    (r"^where int cond|^masked_fill (float|int) mask", "where / masked_fill take a non-bool condition"),
    (r"^masked_fill\[(bool|int32)\]", "masked_fill promotes to the value's dtype (tinygrad's where)"),
    (r"^arange\((-2,|5, 1|0, 5, -1)\)", "arange with no steps in the range is empty (numpy)"),
    (r"^(gather|index_select|take) index\[int32\]|^take\[int32\]", "int32 indices are taken (the default int)"),
    (r"torch raises RuntimeError: ZeroDivisionError", "a tensor divisor's values are not read (an int / 0 gives 0)"),
    (r"^lerp_half\[float(16|32),float(16|32)\]|^rpow\[bool\]", "mixed float lerp and bool ** promote"),
    (r"^one_hot\((0|1)\)", "index values are not read unless CHECK_INDEX=1"),
    (
        r"^(relu|gelu|silu|elu|selu|softplus|mish|hardswish|hardsigmoid|relu6|logsigmoid|softsign|leaky_relu|celu|"
        r"hardtanh)\[(int32|bool)\]",
        "activations of ints and bools compute in float (tinygrad)",
    ),
    (r"^matmul\[", "matmul promotes mixed dtypes (tinygrad)"),
    (
        r"^(abs|relu|floor|ceil|round|trunc|square|frac|sgn|sign)\[(bool|int32)\]|^pow\[bool\]",
        "elementwise ops of bools / ints that torch refuses",
    ),
    (
        r"^(sub|rsub|lerp_half|hypot|ldexp|fmod|remainder|floor_divide|pow|bitwise_(left|right)_shift|rfloordiv|rmod|"
        r"clamp)\[.*(bool|int32)",
        "bool arithmetic and mixed-dtype lerp / hypot promote as tinygrad does",
    ),
    (r"^(argmax|argmin)\[bool\]", "argmax of bools"),
    (r"^(max_pool2d|avg_pool2d) x\(1, 1, 1, 4, 4\)", "pools take any number of leading dims"),
    (r"^avg_pool2d x\(4, 4\)", "a 2-d input to a pool raises ArgumentError"),
    (r"^conv2d\{'padding':-1\}|^Conv2d\(.*'padding':-1", "negative conv padding crops (tinygrad)"),
    (r"^expand\((-1, 3|2, -1|4, -1, 3)\)\(\)", "-1 for a new dim of expand is 1 (tinygrad)"),
    (r"^pad\(", "pad modes take every dim and any length of padding; circular takes no negative padding"),
    (r"^conv2d x\(2, 5, 5\)", "conv2d needs a batch dim"),
    (r"^cross_entropy\(label_smoothing=-0.1\)", "label_smoothing is checked to lie in [0, 1]"),
    (r"^sdpa (causal )?q\(1, 2, 4, 8\) k\(1, 2, 5, 8\) v\(1, 2, 4, 8\)", "k and v need one sequence length"),
    (r"^getitem(True|False|\(Ellipsis,Ellipsis\))", "a Python bool index raises NotImplementedError; one ellipsis"),
    (r"^norm\(2,3\)p=nuc", "no nuclear norm"),
    (r"^cum(max|min)\(0,\)dim=", "dims are checked on empty tensors too"),
    (r"^(amax|amin)\(0,\)dim=\(0,0\)", "a repeated dim is refused first"),
    (r"^(prod|max|min)\(.*dim=(\((0,1|0,0|1,-1)\)|\[0\])", "tuple dims for prod / max / min"),
    (r"^BatchNorm\(0\) x\(2, 0\)|^GroupNorm\(0,4\)", "zero channels / groups: torch's own error is internal"),
    (r"^Tensor\(\['a'\]\)", "a string in the data raises TypeError"),
]


def deliberate(msg: str) -> bool:
    return any(re.search(p, msg) for p, _ in DELIBERATE)


def run(cases: list[Case], verbose: bool = False) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for c in cases:
        with np.errstate(all="ignore"):
            msg = compare(c)
        if msg is not None and deliberate(f"{c.name}: {msg}"):
            found.setdefault("deliberate", []).append(f"{c.name}: {msg}")
        elif msg is not None:
            found.setdefault(msg.split(":")[0], []).append(f"{c.name}: {msg}")
            if verbose:
                print(f"{c.name}: {msg}", flush=True)
    return found


# found by the probe: these raised an internal error (tuple index out of range, ZeroDivisionError, max over an empty
# dim) where torch returns; (name, lazygrad, torch)
CRASHED: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("transpose_0d", lambda: Tensor(2.0).transpose(0, -1), lambda: torch.tensor(2.0).transpose(0, -1)),
    ("swapaxes_0d", lambda: Tensor(2.0).swapaxes(0, 0), lambda: torch.tensor(2.0).swapaxes(0, 0)),
    ("argmax_0d_dim", lambda: Tensor(2.0).argmax(0), lambda: torch.tensor(2.0).argmax(0)),
    ("argmin_0d_dim_keepdim", lambda: Tensor(2.0).argmin(-1, True), lambda: torch.tensor(2.0).argmin(-1, True)),
    (
        "scatter_empty_index",
        lambda: Tensor([[1.0, 2.0], [3.0, 4.0]]).scatter(0, Tensor(np.zeros((0, 2), np.int64)), 9.0),
        lambda: torch.tensor([[1.0, 2.0], [3.0, 4.0]]).scatter(0, torch.zeros((0, 2), dtype=torch.long), 9.0),
    ),
    (
        "index_select_0d_index",
        lambda: Tensor([[1.0, 2.0], [3.0, 4.0]]).index_select(1, Tensor(1)),
        lambda: torch.tensor([[1.0, 2.0], [3.0, 4.0]]).index_select(1, torch.tensor(1)),
    ),
    ("linear_no_inputs", lambda: _zero_init(nn.Linear(0, 3))(Tensor.ones(2, 0)), lambda: torch.zeros(2, 3)),
]


def _zero_init(layer: Any) -> Any:
    layer.bias = Tensor.zeros(*layer.bias.shape)  # torch's bias bound is 0 without inputs: zeros in any case
    return layer


@pytest.mark.parametrize("name", [c[0] for c in CRASHED])
def test_edge_inputs_that_crashed_compute_what_torch_does(name: str) -> None:
    _, ours, theirs = next(c for c in CRASHED if c[0] == name)
    assert compare(Case(name, ours, theirs)) is None


def test_linear_without_inputs_draws_a_zero_bias() -> None:
    np.testing.assert_equal(nn.Linear(0, 3).bias.numpy(), np.zeros(3, np.float32))


SAMPLE = 300


@pytest.mark.parametrize("chunk", range(4))
def test_probe_sample_agrees_with_torch(chunk: int) -> None:
    cases = all_cases()
    sample = random.Random(0).sample(cases, min(SAMPLE, len(cases)))
    found = run(sample[chunk::4])
    found.pop("deliberate", None)
    assert not found, "\n".join(m for msgs in found.values() for m in msgs)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--grep", default="")
    ap.add_argument("--sample", type=int, default=0, help="a random sample of this many cases (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    cases = [c for c in all_cases() if args.grep in c.name]
    if args.sample:
        cases = random.Random(args.seed).sample(cases, min(args.sample, len(cases)))
    found = run(cases, args.v)
    kept = found.pop("deliberate", [])
    for kind, msgs in found.items():
        print(f"### {kind}: {len(msgs)}")
        for m in msgs:
            print("  " + m.replace("\n", "\n    "))
    print(f"### deliberate (DELIBERATE, by reason): {len(kept)}")
    for pattern, why in DELIBERATE:
        n = sum(1 for m in kept if re.search(pattern, m))
        if n:
            print(f"  {n:4d}  {why}")
    print(f"{len(cases)} cases, {sum(map(len, found.values()))} differ, {len(kept)} on purpose")
    sys.exit(1 if found else 0)
