"""BEAM search: try opt lists on the device, keep the fastest that still compute the right answer.

Each round extends every opt list of the beam by one more opt, compiles the candidates (in parallel, one
compiler process per core), checks each candidate's output against the unoptimized kernel on the same random
inputs, times the survivors, and keeps the `width` fastest. The search stops when a round gains less than
BEAM_MIN_GAIN, after BEAM_ROUNDS rounds, or when BEAM_BUDGET seconds are spent. The winner is cached on disk,
keyed by the kernel AST, the device and its compiler, so a second process replays it without searching.
"""

from __future__ import annotations

import array
import math
import random
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps
from lazygrad.codegen.workgroups import default_optimizations
from lazygrad.device import Buffer, CompileError, Device
from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import DEBUG, IGNORE_BEAM_CACHE, LIBRARY_THREAD, cpu_cores, diskcache_get, diskcache_put, getenv
from lazygrad.renderer import ProgramSpec, Renderer
from lazygrad.uop.ops import Ops, UOp, serialize

BEAM_BUDGET = getenv("BEAM_BUDGET", 60.0)  # seconds per kernel
BEAM_MIN_GAIN = getenv("BEAM_MIN_GAIN", 0.02)  # a round must speed the best kernel up by this fraction to go on
BEAM_ROUNDS = getenv("BEAM_ROUNDS", 6)


def actions(k: Kernel) -> list[Opt]:
    """Every single opt worth trying on `k` as it is now (whether it applies is found out by applying it)."""
    n_glob, n_red = len(k.axes_of(AxisType.GLOBAL)), len(k.axes_of(AxisType.REDUCE))
    # a tensor core comes first or not at all (its tile axes are laid out before any other opt)
    out: list[Opt] = [Opt(OptOps.TC, i, 0) for i in range(len(k.tc_choices()))]
    for i in range(n_glob):
        out += [Opt(OptOps.UPCAST, i, a) for a in (2, 3, 4, 8, 16)]
        out += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, n_glob)]
        if k.renderer.has_threads:
            # amount 0 shares the axis out among the cores; a count of blocks also makes them the outermost loop,
            # which keeps a block of a matmul's right-hand side in cache while the rows go by
            threads = k.renderer.threads
            out += [Opt(OptOps.THREAD, i, a) for a in (0, *(threads * m for m in (1, 2, 4, 8)))]
        if k.renderer.has_local:
            out += [Opt(OptOps.LOCAL, i, a) for a in (2, 4, 8, 16, 32)]
    for i in range(n_red):
        out += [Opt(OptOps.UNROLL, i, a) for a in (2, 4, 8, 16)]
        if k.renderer.has_shared:
            out += [Opt(op, i, a) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in (8, 16, 32, 64)]
        threads = k.renderer.threads
        if k.renderer.has_shared and k.renderer.has_local and i == 0:
            out += [Opt(OptOps.STAGE, j, 0) for j in range(len(k.stage_candidates))]
        if k.renderer.has_threads and threads > 1:
            out.append(Opt(OptOps.THREAD, n_glob + i, threads))
    return out


def _kernel(ast: UOp, renderer: Renderer, opts: list[Opt]) -> Kernel:
    k = Kernel(ast, renderer)
    k.merge_axes()
    return k.apply_opts(opts)


class _Bench:
    """The kernel's buffers on the device, filled with the same random values for every candidate."""

    def __init__(self, ast: UOp, renderer: Renderer):
        self.device = Device[renderer.device]
        globals_ = sorted((x for x in ast.toposort if x.op is Ops.DEFINE_GLOBAL), key=lambda x: x.arg)
        self.outs = {st.src[0].arg for st in ast.src if st.op is Ops.STORE}
        self.bufs = [Buffer(renderer.device, g.dtype.size, g.dtype.base) for g in globals_]  # type: ignore[attr-defined]
        rng = random.Random(0)
        self.init = [_random_bytes(b.dtype, b.size, rng) for b in self.bufs]
        self.vars = sorted((x for x in ast.toposort if x.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])

    def run(self, spec: ProgramSpec, lib: bytes, reps: int, cutoff: float = math.inf) -> tuple[list[bytes], float]:
        """Outputs of one run from the initial values, then the fastest of `reps` timed runs (none when the first
        run is already slower than `cutoff`)."""
        prg = self.device.runtime(spec.name, lib, spec.n_bufs, len(spec.vars))
        for b, data in zip(self.bufs, self.init):
            b.copyin(memoryview(data))
        args = [b.ptr for b in self.bufs] + [v.arg[2] for v in self.vars]  # variables at their largest value
        launch: dict[str, Any] = {}
        if spec.global_size is not None:
            launch = {"global_size": spec.global_size, "local_size": spec.local_size}
        first = prg(*args, **launch, wait=True) or math.inf
        outs = [bytes(self.bufs[i].as_bytes()) for i in sorted(self.outs)]
        if first > cutoff:
            return outs, first
        return outs, min([first] + [prg(*args, **launch, wait=True) or math.inf for _ in range(reps)])


def _random_bytes(dt: DType, size: int, rng: random.Random) -> bytes:
    # a short random pattern repeated: cheap to make for big buffers, and values small enough that any order of
    # summation agrees to float tolerance
    n = min(size, 4093)
    if dtypes.is_float(dt) and dt.fmt in ("e", "f", "d"):
        pattern = struct.pack(f"{n}{dt.fmt}", *[rng.uniform(-1, 1) for _ in range(n)])
    elif dtypes.is_float(dt):  # bfloat16: 1.0 with random low mantissa bits
        pattern = b"".join((0x3F80 | rng.getrandbits(6)).to_bytes(2, sys.byteorder) for _ in range(n))
    elif dt == dtypes.bool:
        pattern = bytes(rng.getrandbits(1) for _ in range(n))
    else:
        pattern = b"".join(rng.randint(0, 3).to_bytes(dt.itemsize, sys.byteorder) for _ in range(n))
    reps = -(-size * dt.itemsize // max(len(pattern), 1))
    return (pattern * reps)[: size * dt.itemsize]


def _floats(data: bytes, dt: DType) -> list[float]:
    if dt.fmt in ("f", "d"):
        return array.array(dt.fmt, data).tolist()
    if dt.fmt == "e":
        return list(struct.unpack(f"{len(data) // 2}e", data))
    # bfloat16: the top half of a float32
    return array.array("f", struct.pack(f"{len(data) // 2}I", *(h << 16 for h in array.array("H", data)))).tolist()


def _close(a: bytes, b: bytes, dt: DType) -> bool:
    """Whether a candidate's output matches the unoptimized kernel's, to the tolerance of a different summation order
    (16-bit floats: also of products kept exact by a tensor core, where the plain kernel rounds each one)."""
    if a == b:
        return True
    if not dtypes.is_float(dt):
        return False
    tol = 1e-3 if dt.itemsize >= 4 else 2e-2
    for x, y in zip(_floats(a, dt), _floats(b, dt)):
        if not (x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= tol + tol * abs(y)):
            return False
    return True


def beam_search(ast: UOp, renderer: Renderer, width: int) -> list[Opt]:
    from lazygrad.codegen import get_program  # the search renders through the same path as every kernel

    dev = Device[renderer.device]
    key = repr((renderer.device, dev.compiler.cachekey, width, serialize(ast)))
    if not IGNORE_BEAM_CACHE and (cached := diskcache_get("beam_v1", key)) is not None:
        return cached
    start = time.perf_counter()
    bench = _Bench(ast, renderer)
    out_dtypes = [bench.bufs[i].dtype for i in sorted(bench.outs)]

    def build(opts: list[Opt]) -> tuple[list[Opt], ProgramSpec, bytes] | None:
        try:
            spec = get_program(ast, renderer, opts)
            return opts, spec, dev.compiler.compile(spec.src)
        except (KernelOptError, CompileError):
            return None

    base = build([])
    assert base is not None, "the unoptimized kernel must compile"
    ref, base_time = bench.run(base[1], base[2], reps=3)
    beam: list[tuple[float, list[Opt]]] = [(base_time, [])]
    best_time, best_opts = base_time, []
    # the default opts and each prefix of them seed the beam too: the search can only improve on the default, and
    # a default that leaves no room to grow (a full register tile) is reworked from its prefixes
    default = default_optimizations(_kernel(ast, renderer, [])).applied_opts
    for seed in (build(default[:n]) for n in range(1, len(default) + 1)):
        if seed is None:
            continue
        outs, t = bench.run(seed[1], seed[2], reps=3)
        if all(_close(o, r, dt) for o, r, dt in zip(outs, ref, out_dtypes)):
            beam.append((t, seed[0]))
            if t < best_time:
                best_time, best_opts = t, seed[0]
    if DEBUG >= 1:
        print(f"BEAM: unoptimized {base_time * 1e6:.1f} us, default opts {best_time * 1e6:.1f} us", file=sys.stderr)
    # seeds far behind the best are not worth extending
    beam = sorted((b for b in beam if b[0] <= 3 * best_time), key=lambda b: b[0])[:width]
    seen: set[str] = set()
    workers = ThreadPoolExecutor(cpu_cores(), thread_name_prefix=f"{LIBRARY_THREAD} beam")
    for rnd in range(BEAM_ROUNDS):
        candidates = []
        for _, opts in beam:
            try:
                k = _kernel(ast, renderer, opts)
            except KernelOptError:
                continue
            candidates += [opts + [a] for a in actions(k)]
        timed: list[tuple[float, list[Opt]]] = []
        # compile everything first: a compiler running beside a timed kernel would steal its cores
        for built in list(workers.map(build, candidates)):
            if built is None or time.perf_counter() - start > BEAM_BUDGET:
                continue
            opts, spec, lib = built
            if spec.src in seen:  # two opt orders that give the same code
                continue
            seen.add(spec.src)
            outs, t = bench.run(spec, lib, reps=3, cutoff=3 * best_time)
            if all(_close(o, r, dt) for o, r, dt in zip(outs, ref, out_dtypes)):
                timed.append((t, opts))
            elif DEBUG >= 2:
                print(f"BEAM: rejected {opts}: output differs from the unoptimized kernel")
        if not timed:
            break
        timed.sort(key=lambda x: x[0])
        beam = timed[:width]
        gained = beam[0][0] < best_time * (1 - BEAM_MIN_GAIN)
        if beam[0][0] < best_time:
            best_time, best_opts = beam[0]
        elapsed = time.perf_counter() - start
        if DEBUG >= 1:
            best = f"best {best_time * 1e6:.1f} us {best_opts}"
            print(f"BEAM round {rnd + 1}: {len(timed)} candidates, {best} ({elapsed:.1f} s)", file=sys.stderr)
        if not gained or elapsed > BEAM_BUDGET:
            break
    workers.shutdown()
    if DEBUG >= 1:
        print(f"BEAM: {base_time * 1e6:.1f} us -> {best_time * 1e6:.1f} us with {best_opts}", file=sys.stderr)
    return diskcache_put("beam_v1", key, best_opts)
