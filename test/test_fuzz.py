"""Random op chains against torch: fused (lazy) vs realized after every step vs torch, on CPU and CL.

Each case is a chain of elementwise, reduce, movement, cast, setitem and indexing ops over one dtype-changing value,
with 0-, 1- and prime-sized dimensions. The same chain runs three ways: built lazily and realized once (everything
the scheduler can fuse is fused), realized after every step (one kernel per op), and in torch. All three must agree:
exactly for integers and bools, to the dtype's precision for floats.

CI runs a fixed seed and a bounded number of cases; a longer hunt is a script:

    python test/test_fuzz.py --cases 5000 --seed 7 [--device CL] [--big]    # DEV=CL ... does the same
    python test/test_fuzz.py --cases 300 --seed 7 --compile-only CUDA       # no GPU: build the kernels with NVRTC
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor, dtypes
from test.helpers import compiles_for, device_available, fuzz_failures

INTS = [np.int8, np.uint8, np.int16, np.int32, np.int64]
FLOATS = [np.float32, np.float16]
DTYPES = [np.bool_, *INTS, *FLOATS]
SIZES = [0, 1, 1, 2, 3, 5, 7, 8, 13]
# --big: sizes past vector widths, register tiles and thread splits (chains of up to 400k elements)
BIG_SIZES = [0, 1, 3, 16, 17, 33, 64, 127, 257, 1031]
TOL = {np.float32: (1e-4, 1e-4), np.float16: (2e-2, 2e-2)}


def kind(dt: Any) -> str:
    return "bool" if dt == np.bool_ else "int" if dt in INTS else "float"


@dataclass
class Step:
    """One op of a chain: `fn(x, lib)` works on a lazygrad or a torch tensor (`lib` makes constants and arrays)."""

    name: str
    fn: Callable[[Any, Lib], Any]


class Lib:
    """What an op needs from its framework beyond Tensor methods: arrays from numpy, and a realize hook."""

    def __init__(self, torch_side: bool, device: str = "CPU"):
        self.torch_side, self.device = torch_side, device

    def array(self, a: np.ndarray) -> Any:
        return torch.from_numpy(a.copy()) if self.torch_side else Tensor(a, device=self.device)

    def fresh(self, x: Any) -> Any:
        """A copy that setitem may write into (torch views may alias; a lazy lazygrad tensor is its own buffer)."""
        return x.clone() if self.torch_side else x.contiguous()


def np_dtype(x: Any) -> Any:
    name = str(x.dtype).replace("torch.", "") if isinstance(x, torch.Tensor) else x.dtype.name
    return np.bool_ if name == "bool" else getattr(np, name)


def random_array(rng: random.Random, shape: tuple[int, ...], dt: Any) -> np.ndarray:
    nrng = np.random.default_rng(rng.randrange(2**32))
    if dt == np.bool_:
        return np.asarray(nrng.random(shape) < 0.5)
    if dt in FLOATS:
        return np.asarray(nrng.random(shape) * 4 - 2).astype(dt)
    info = np.iinfo(dt)
    # mostly small values, some at the edges of the range, where wrapping shows
    vals = nrng.integers(-20 if info.min < 0 else 0, 20, size=shape)
    edge = nrng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.int64)
    return np.asarray(np.where(nrng.random(shape) < 0.2, edge, vals)).astype(dt)


def broadcastable(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if rng.random() < 0.3 else s for s in shape)


def gen_step(rng: random.Random, shape: tuple[int, ...], dt: Any) -> Step | None:
    """A random op applicable to a value of this shape and dtype (None: try another)."""
    k, nd = kind(dt), len(shape)
    choice = rng.choice(
        ["binary", "binary", "scalar", "unary", "unary", "reduce", "movement", "movement", "cast", "setitem", "index"]
        + ["compare", "where"]
    )
    if choice == "binary":
        other_dt = dt if rng.random() < 0.7 else rng.choice(DTYPES)
        other = random_array(rng, broadcastable(rng, shape), other_dt)
        k2 = kind(other_dt)
        if k == k2:
            op = rng.choice(BINARY[k])
        else:
            op = rng.choice(["+", "*"] if "bool" in (k, k2) else ["+", "*", "max", "min"])

        def fb(x: Any, lib: Lib, op: str = op, other: np.ndarray = other) -> Any:
            y = lib.array(other)
            if op == "/":
                return x / (y.abs() + 1)
            return BINARY_FNS[op](x, y)

        return Step(f"x {op} array{other.shape}:{other.dtype}", fb)
    if choice == "scalar":
        op = rng.choice([o for o in BINARY[k] if o not in ("max", "min")])
        c: Any = {"bool": True, "int": rng.choice([-7, -1, 0, 1, 3, 127, 200]), "float": rng.choice([-2.5, 0.5, 3.0])}[
            k
        ]
        if op == "/" and k == "float":
            c = 3.0
        if k == "int" and op in "&|^" and c < 0:
            c = 3
        if k == "int" and not np.iinfo(dt).min <= c <= np.iinfo(dt).max:
            c = 3  # torch refuses a Python int its dtype cannot hold in these ops
        return Step(f"x {op} {c!r}", lambda x, lib, op=op, c=c: BINARY_FNS[op](x, c))
    if choice == "unary":
        op = rng.choice(UNARY_BY_KIND[k])
        if op in ("neg", "abs") and dt == np.uint8:
            op = "invert"
        return Step(op, lambda x, lib, f=UNARY[op]: f(x))
    if choice == "reduce":
        if nd == 0:
            return None
        axis = rng.randrange(nd)
        op = rng.choice(["sum", "max", "min"] + (["mean"] if k == "float" else []))
        if op in ("max", "min") and shape[axis] == 0:
            op = "sum"
        keep = rng.random() < 0.5

        def fr(x: Any, lib: Lib, op: str = op, axis: int = axis, keep: bool = keep) -> Any:
            r = getattr(x, op)(axis, keepdim=keep)
            return r.values if lib.torch_side and op in ("max", "min") else r

        return Step(f"{op}(axis={axis}, keepdim={keep})", fr)
    if choice == "movement":
        return gen_movement(rng, shape)
    if choice == "cast":
        to = rng.choice(DTYPES)

        def fc(x: Any, lib: Lib, to: Any = to) -> Any:
            if kind(np_dtype(x)) == "float" and kind(to) == "int":
                x = x.clip(0, 100)  # out-of-range float -> int casts are undefined in C and differ in torch
            return x.to(torch_dtype_of(to)) if lib.torch_side else x.cast(lg_dtype_of(to))

        return Step(f"cast({np.dtype(to).name})", fc)
    if choice == "setitem":
        if nd == 0 or shape[0] == 0:
            return None
        lo = rng.randrange(shape[0])
        hi = rng.randint(lo, shape[0])
        v: Any = {"bool": True, "int": 5, "float": -1.5}[k]

        def fs(x: Any, lib: Lib, lo: int = lo, hi: int = hi, v: Any = v) -> Any:
            x = lib.fresh(x)
            x[lo:hi] = v
            return x

        return Step(f"x[{lo}:{hi}] = {v!r}", fs)
    if choice == "index":
        if nd == 0 or shape[0] == 0:
            return None
        idx = np.array([rng.randrange(shape[0]) for _ in range(rng.choice([1, 2, 5]))], dtype=np.int64)
        return Step(f"x[{idx.tolist()}]", lambda x, lib, idx=idx: x[lib.array(idx)])
    if choice == "compare":
        other = random_array(rng, broadcastable(rng, shape), dt)
        op = rng.choice(["<", "==", "!="])
        return Step(f"x {op} array{other.shape}", lambda x, lib, op=op, o=other: BINARY_FNS[op](x, lib.array(o)))
    if nd == 0:
        return None
    mask = random_array(rng, broadcastable(rng, shape), np.bool_)

    def fw(x: Any, lib: Lib, mask: np.ndarray = mask) -> Any:
        m = lib.array(mask)
        return torch.where(m, x, x.flip(0)) if lib.torch_side else m.where(x, x.flip(0))

    return Step("where(mask, x, x.flip(0))", fw)


def gen_movement(rng: random.Random, shape: tuple[int, ...]) -> Step:
    nd = len(shape)
    op = rng.choice(["permute", "flip", "reshape", "slice", "pad", "expand", "transpose"])
    if nd == 0 and op not in ("reshape", "expand"):
        op = "reshape"
    if op == "permute":
        perm = list(range(nd))
        rng.shuffle(perm)
        return Step(f"permute{perm}", lambda x, lib, p=tuple(perm): x.permute(*p))
    if op == "transpose":
        a, b = rng.randrange(nd), rng.randrange(nd)
        return Step(f"transpose({a},{b})", lambda x, lib, a=a, b=b: x.transpose(a, b))
    if op == "flip":
        axis = rng.randrange(nd)
        return Step(f"flip({axis})", lambda x, lib, a=axis: x.flip(a))
    if op == "reshape":
        n = int(np.prod(shape))
        cands = [(n,), (1, n), (n, 1)]
        if nd >= 2:
            cands.append((*shape[:-2], shape[-2] * shape[-1]))
            if shape[0] > 0:
                cands.append((shape[0], -1))
        new = rng.choice(cands)
        return Step(f"reshape{new}", lambda x, lib, s=new: x.reshape(*s))
    if op == "slice":
        axis = rng.randrange(nd)
        lo, hi = sorted((rng.randint(0, shape[axis]), rng.randint(0, shape[axis])))
        idx = (slice(None),) * axis + (slice(lo, hi, rng.choice([1, 1, 2])),)
        return Step(f"[{idx}]", lambda x, lib, i=idx: x[i])
    if op == "pad":
        axis = rng.randrange(nd)
        flat = [0, 0] * (nd - 1 - axis) + [rng.randint(0, 2), rng.randint(0, 2)]

        def fp(x: Any, lib: Lib, flat: list[int] = flat) -> Any:
            return torch.nn.functional.pad(x, flat) if lib.torch_side else x.pad(flat)

        return Step(f"pad{flat}", fp)
    return Step("unsqueeze(0).expand(3)", lambda x, lib: x.unsqueeze(0).expand(3, *x.shape))


BINARY = {
    "bool": ["+", "*", "&", "|", "^"],
    "int": ["+", "-", "*", "max", "min", "&", "|", "^"],
    "float": ["+", "-", "*", "/", "max", "min"],
}
BINARY_FNS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: x / y,
    "&": lambda x, y: x & y,
    "|": lambda x, y: x | y,
    "^": lambda x, y: x ^ y,
    "max": lambda x, y: x.maximum(y),
    "min": lambda x, y: x.minimum(y),
    "<": lambda x, y: x < y,
    "==": lambda x, y: x == y,
    "!=": lambda x, y: x != y,
}
UNARY_BY_KIND = {
    "bool": ["not"],
    "int": ["neg", "abs", "invert", "shl", "shr", "floordiv", "mod"],
    "float": ["neg", "abs", "exp", "log", "sqrt", "sin", "tanh", "sigmoid", "relu", "recip", "floor", "square"],
}
UNARY: dict[str, Callable[[Any], Any]] = {
    "not": lambda x: x.logical_not(),
    "neg": lambda x: -x,
    "abs": lambda x: x.abs(),
    "invert": lambda x: ~x,
    "shl": lambda x: x << 2,
    "shr": lambda x: x >> 1,
    "floordiv": lambda x: x // 3,
    "mod": lambda x: x % 5,
    "exp": lambda x: x.clip(-5, 5).exp(),
    "log": lambda x: (x.abs() + 1).log(),
    "sqrt": lambda x: x.abs().sqrt(),
    "sin": lambda x: x.sin(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: x.relu(),
    "recip": lambda x: 1 / (x.abs() + 1),
    "floor": lambda x: x.floor(),
    "square": lambda x: x * x,
}


def torch_dtype_of(dt: Any) -> torch.dtype:
    return torch.bool if dt == np.bool_ else getattr(torch, np.dtype(dt).name)


def lg_dtype_of(dt: Any) -> Any:
    return dtypes.bool if dt == np.bool_ else getattr(dtypes, np.dtype(dt).name)


def gen_case(seed: int, n_steps: int = 6, big: bool = False) -> tuple[np.ndarray, list[Step]]:
    rng = random.Random(seed)
    limit = 400_000 if big else 4096
    while True:
        shape = tuple(rng.choice(BIG_SIZES if big else SIZES) for _ in range(rng.randint(1, 3)))
        if not big or int(np.prod(shape)) <= limit // 2:
            break
    x0 = random_array(rng, shape, rng.choice(DTYPES))
    probe = torch.from_numpy(x0.copy())  # each step's result shape and dtype, as torch gives them
    steps: list[Step] = []
    while len(steps) < n_steps:
        step = gen_step(rng, tuple(probe.shape), np_dtype(probe))
        if step is None:
            continue
        try:
            out = step.fn(probe, Lib(True))
        except (RuntimeError, TypeError):  # an op torch refuses for this dtype (e.g. max of bool): pick another
            continue
        if out.numel() > limit or out.ndim > 4:
            continue
        steps.append(step)
        probe = out
    return x0, steps


def run_case(x0: np.ndarray, steps: list[Step], device: str) -> str | None:
    """None when fused, realized-per-step and torch agree; else a report of the first disagreement."""
    t = torch.from_numpy(x0.copy())
    lt = Lib(True)
    for s in steps:
        t = s.fn(t, lt)
    ref = t.numpy()
    lib = Lib(False, device)
    lazy, eager = Tensor(x0, device=device), Tensor(x0, device=device)
    for s in steps:
        lazy = s.fn(lazy, lib)
        eager = s.fn(eager, lib).realize()
    for name, got_t in (("fused", lazy), ("per-step", eager)):
        got = got_t.numpy()
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return f"{name}: {got.shape} {got.dtype} vs torch {ref.shape} {ref.dtype}"
        if ref.dtype in (np.float32, np.float16):
            rtol, atol = TOL[ref.dtype.type]
            ok = np.allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = np.array_equal(got, ref)
        if not ok:
            bad = (
                np.argwhere(~np.isclose(got, ref, equal_nan=True)) if ref.dtype.kind == "f" else np.argwhere(got != ref)
            )
            at = tuple(bad[0]) if len(bad) else ()
            return f"{name}: at {at} got {got[at]!r}, torch {ref[at]!r}"
    return None


def describe(seed: int, x0: np.ndarray, steps: list[Step]) -> str:
    return f"seed {seed}: x0 {x0.shape} {x0.dtype} -> " + " -> ".join(s.name for s in steps)


def check(seed: int, device: str, big: bool = False) -> tuple[str, str | None]:
    x0, steps = gen_case(seed, big=big)
    return describe(seed, x0, steps), run_case(x0, steps, device)


def compile_check(seed: int, target: str, big: bool = False) -> tuple[str, str | None]:
    """The chain built lazily here, its kernels built for `target` (see helpers.compiles_for)."""
    x0, steps = gen_case(seed, big=big)
    t, lib = Tensor(x0), Lib(False)
    for s in steps:
        t = s.fn(t, lib)
    return describe(seed, x0, steps), compiles_for(target, t)


CI_CASES = 300


@pytest.mark.parametrize("device", ["CPU", "CL"])
@pytest.mark.parametrize("chunk", range(6))
def test_fuzz_op_chains(device: str, chunk: int) -> None:
    if not device_available(device):
        pytest.skip(f"{device} is not available here")
    per = CI_CASES // 6
    failures = fuzz_failures(range(chunk * per, (chunk + 1) * per), lambda seed: check(seed, device))
    assert not failures, f"{len(failures)} of {per} chains disagree with torch:\n" + "\n".join(failures[:10])


# seeds that once failed in a hunt, run in CI as they are: what broke, and where
FOUND_IN_HUNTS = {
    60134: "a select of uint8 vectors under one bool: its lane mask's vector type was never declared (C compile error)",
}


@pytest.mark.parametrize("seed", list(FOUND_IN_HUNTS))
def test_fuzz_cases_found_in_hunts(seed: int) -> None:
    what, failure = check(seed, "CPU")
    assert failure is None, f"{what}: {failure} ({FOUND_IN_HUNTS[seed]})"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=10_000)
    ap.add_argument("--device", default=Device.DEFAULT, help="the device under test (default: DEV's, else CPU)")
    ap.add_argument("--big", action="store_true", help="sizes up to 1031 a dimension (BIG_SIZES)")
    ap.add_argument("--compile-only", metavar="CUDA", help="only build each chain's kernels for a device absent here")
    args = ap.parse_args()
    seeds = range(args.seed, args.seed + args.cases)
    if args.compile_only:
        fuzz_failures(seeds, lambda seed: compile_check(seed, args.compile_only, args.big), hunt=True)
    else:
        fuzz_failures(seeds, lambda seed: check(seed, args.device, args.big), hunt=True)
