"""PYTHON device: an interpreter of linear UOps. Slow and dependency-free: the reference that the compiled devices are
checked against, and a way to run the GPU code path (workgroups, shared memory, barriers, tensor cores) anywhere.

Execution model: the threads of a launch run in lockstep, a batch of whole workgroups at a time, and each UOp's value
is a list with one entry per thread of the batch, so the Python cost of a UOp is paid once per batch rather than once
per thread. Loop bounds are the same for every thread, so a loop is a Python loop around its body; a barrier needs
nothing, since every thread has finished the previous UOp before any starts the next. Shared memory is one list per
workgroup of the batch.

Values follow uop/alu.py, the table of ALU semantics constant folding uses too: integers wrap to their dtype after
every op, float results are rounded to their dtype after every op, integer division truncates (and by zero gives 0),
shifts past the width give 0 (or -1), and math functions give IEEE's inf and NaN where Python would raise.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import struct
import time
from collections import deque
from typing import Any, Callable, Sequence

from lazygrad.device import Allocator, Compiled, CompileError, Compiler
from lazygrad.dtype import DType, PtrDType, bf16_to_float, dtypes, float_to_bf16
from lazygrad.helpers import check_host_allocation, prod
from lazygrad.renderer.python import PythonRenderer, parse_program
from lazygrad.renderer.tensor_cores import TensorCore
from lazygrad.uop.alu import NAMESPACE, alu_expr, result_rounding, round_to, wrap_expr
from lazygrad.uop.ops import GroupOp, Ops, UOp

BATCH_THREADS = 4096  # threads interpreted together: enough to amortize the per-UOp Python cost, little memory

Values = list  # one entry per thread of a batch (a tuple per thread for vector dtypes)
Step = Callable[[list, "_Batch"], None]


# *** the bits of floats Python holds as doubles: NaN payloads survive a load, a store and a bit cast, as in C ***


def _nan_from_bits(bits: int, width: int, mantissa: int) -> float:
    """A NaN of a `width`-bit float as the double with the same sign and payload (Python's own conversions drop
    a half's payload and quiet a signaling NaN)."""
    sign, payload = bits >> (width - 1), bits & ((1 << mantissa) - 1)
    return struct.unpack("<d", struct.pack("<Q", sign << 63 | 0x7FF << 52 | payload << (52 - mantissa)))[0]


def _nan_to_bits(x: float, width: int, mantissa: int) -> int:
    d = struct.unpack("<Q", struct.pack("<d", x))[0]
    payload = (d >> (52 - mantissa)) & ((1 << mantissa) - 1) or 1 << (mantissa - 1)  # nothing left: a quiet NaN
    return (d >> 63) << (width - 1) | ((1 << (width - 1)) - (1 << mantissa)) | payload


def _float_bits(x: float, fmt: str, bits_fmt: str, width: int, mantissa: int) -> int:
    """The bits of `x` as a `width`-bit float (struct format `fmt`): NaN payloads kept, overflow to +-inf."""
    if x != x:
        return _nan_to_bits(x, width, mantissa)
    try:
        return struct.unpack(f"<{bits_fmt}", struct.pack(f"<{fmt}", x))[0]
    except OverflowError:  # struct refuses what a C cast makes inf
        inf = (1 << (width - 1)) - (1 << mantissa)
        return inf | 1 << (width - 1) if x < 0 else inf


_f32_bits = functools.partial(_float_bits, fmt="f", bits_fmt="I", width=32, mantissa=23)
_half_bits = functools.partial(_float_bits, fmt="e", bits_fmt="H", width=16, mantissa=10)


def _f32_from_bits(b: int) -> float:
    return _nan_from_bits(b, 32, 23) if b & 0x7FFFFFFF > 0x7F800000 else struct.unpack("<f", struct.pack("<I", b))[0]


@functools.cache
def _half_table() -> tuple[float, ...]:
    values = struct.unpack("<65536e", struct.pack("<65536H", *range(65536)))
    return tuple(_nan_from_bits(b, 16, 10) if b & 0x7FFF > 0x7C00 else x for b, x in enumerate(values))


@functools.cache
def _bf16_table() -> tuple[float, ...]:
    return tuple(bf16_to_float(b) for b in range(65536))


# float dtype -> (struct format of its bits, value -> bits, bits -> value), for the floats memoryview cannot move
# bit-exactly (bfloat16 NaNs become 0x7fc0, as the C renderers' lg_f_to_bf16 makes them)
FLOAT_BITS: dict[DType, tuple[str, Callable[[float], int], Callable[[int], float]]] = {
    dtypes.float32: ("I", _f32_bits, _f32_from_bits),
    dtypes.float16: ("H", _half_bits, lambda b: _half_table()[b]),
    dtypes.bfloat16: ("H", float_to_bf16, lambda b: _bf16_table()[b]),
}


# *** elementwise ops: the expressions of uop/alu.py over a batch's lists ***


def _float_to_int(x: float) -> int:
    """A cast of a float to an int truncates (out of the int's range it is undefined: NaN and inf give 0)."""
    return int(x) if -math.inf < x < math.inf else 0


_NAMESPACE: dict[str, Any] = {**NAMESPACE, "to_int": _float_to_int}


def _cast_expr(dt: DType, src_dt: DType) -> str:
    if dtypes.is_bool(dt):
        return "a != 0"
    if dtypes.is_float(dt):
        return "a" if dtypes.is_float(src_dt) else "float(a)"
    return wrap_expr("to_int(a)" if dtypes.is_float(src_dt) else "a", dt)


@functools.cache
def elementwise_fns(op: Ops, dt: DType, src_dt: DType, n_srcs: int) -> tuple[Callable, Callable]:
    """(function of the operands' value lists -> the result's list, function of one thread's operands -> its result),
    compiled once per (op, dtypes): an inlined expression costs a fraction of a function call per element."""
    if op is Ops.BITCAST:
        return _bitcast(dt, src_dt)
    expr = _cast_expr(dt, src_dt) if op is Ops.CAST else alu_expr(op, dt)
    names, lists = "abc"[:n_srcs], [f"x{i}" for i in range(n_srcs)]
    loop = f"for {names[0]} in x0" if n_srcs == 1 else f"for {', '.join(names)} in zip({', '.join(lists)})"
    body = f"[{expr} {loop}]"
    if op is Ops.CAST:
        rounding = round_to(dt)
    else:
        rounding = result_rounding(op, dt) if dtypes.is_float(dt) else None
    namespace = {**_NAMESPACE, "rounding": rounding}
    if rounding is not None:
        body = f"rounding({body})"
    lists_fn = eval(f"lambda {', '.join(lists)}: {body}", namespace)  # expressions from the tables above only
    scalar_fn = eval(f"lambda {', '.join(names)}: {expr}", namespace)
    if rounding is not None:
        unrounded = scalar_fn
        scalar_fn = lambda *xs: rounding([unrounded(*xs)])[0]  # noqa: E731
    return lists_fn, scalar_fn


def _bitcast(dt: DType, src_dt: DType) -> tuple[Callable, Callable]:
    src_fmt, to_bits, _ = FLOAT_BITS.get(src_dt, (src_dt.fmt, None, None))
    dst_fmt, _, from_bits = FLOAT_BITS.get(dt, (dt.fmt, None, None))

    def lists_fn(xs: list) -> list:
        raw = list(map(to_bits, xs)) if to_bits is not None else xs
        out = list(struct.unpack(f"<{len(xs)}{dst_fmt}", struct.pack(f"<{len(xs)}{src_fmt}", *raw)))
        return list(map(from_bits, out)) if from_bits is not None else out

    return lists_fn, lambda x: lists_fn([x])[0]


# *** tensor cores ***


@functools.cache
def _fragment_coords(tc: TensorCore) -> tuple[list[list[tuple[int, int]]], ...]:
    """For the A, B and C operands: each lane's list of (row, col) tile positions, one per fragment entry."""
    return tuple(
        [[tc.coords(operand, lane, i) for i in range(n)] for lane in range(tc.threads)]
        for operand, n in zip("abc", tc.elements)
    )


def emulate_wmma(tc: TensorCore, a: Sequence[Sequence], b: Sequence[Sequence], c: Sequence[Sequence]) -> list[tuple]:
    """One warp's D = A @ B + C: the fragments of each lane of the warp in, each lane's fragment of D out."""
    m, n, k = tc.dims
    tiles = [[[0.0] * cols for _ in range(rows)] for rows, cols in ((m, k), (k, n), (m, n))]
    for tile, frags, coords in zip(tiles, (a, b, c), _fragment_coords(tc)):
        for frag, lane_coords in zip(frags, coords):
            for x, (row, col) in zip(frag, lane_coords):
                tile[row][col] = x
    ta, tb, tc_ = tiles
    d = [[sum(ta[i][j] * tb[j][col] for j in range(k)) + tc_[i][col] for col in range(n)] for i in range(m)]
    rounding = round_to(tc.dtype_out) or (lambda xs: xs)
    return [tuple(rounding([d[row][col] for row, col in lane_coords])) for lane_coords in _fragment_coords(tc)[2]]


# *** memory: a reader (memory, element numbers) -> values and a writer (memory, element numbers, values) per dtype ***

Reader = Callable[[Any, list[int]], list]
Writer = Callable[[Any, list[int], Any], None]


def _read(mem: Any, addrs: list[int]) -> list:
    return list(map(mem.__getitem__, addrs))


def _write(mem: Any, addrs: list[int], vals: Any) -> None:
    deque(map(mem.__setitem__, addrs, vals), maxlen=0)  # every store at C speed


def _read_f32(mem: memoryview, addrs: list[int]) -> list[float]:
    vals = _read(mem, addrs)
    if (total := sum(vals)) != total:  # a NaN among them (or inf - inf): NaNs again from their bits, payload kept
        bits = mem.cast("B").cast("I")
        vals = [x if x == x else _f32_from_bits(bits[j]) for x, j in zip(vals, addrs)]
    return vals


def _write_f32(mem: memoryview, addrs: list[int], vals: list[float]) -> None:
    if (total := sum(vals)) == total:
        _write(mem, addrs, vals)
        return
    bits = mem.cast("B").cast("I")  # a NaN among them: written as bits, payload kept
    for j, x in zip(addrs, vals):
        if x == x:
            mem[j] = x
        else:
            bits[j] = _f32_bits(x)


def _view_format(dt: DType) -> str:
    """The memoryview format of a global buffer's elements (16-bit floats as their bits: memoryview has no half)."""
    return "H" if dtypes.is_float(dt) and dt.itemsize == 2 else dt.fmt  # type: ignore[return-value]


def _accessors(dt: DType, local: bool) -> tuple[Reader, Writer]:
    """Shared memory is a list of Python values, rounded to the dtype by the store (one list op); global memory is
    a typed memoryview."""
    if local:
        rounding = round_to(dt)
        return _read, _write if rounding is None else lambda mem, addrs, vals: _write(mem, addrs, rounding(vals))
    if dt == dtypes.float32:
        return _read_f32, _write_f32
    if dt in (dtypes.float16, dtypes.bfloat16):
        from_bits = (_half_table() if dt == dtypes.float16 else _bf16_table()).__getitem__
        to_bits = FLOAT_BITS[dt][1]

        def read(mem: memoryview, addrs: list[int]) -> list[float]:
            return list(map(from_bits, _read(mem, addrs)))

        def write(mem: memoryview, addrs: list[int], vals: list[float]) -> None:
            _write(mem, addrs, map(to_bits, vals))

        return read, write
    return _read, _write


# *** the interpreter ***


class _Batch:
    """What the threads of one batch (whole workgroups) share: their ids, the kernel's buffers, shared memory."""

    __slots__ = ("n", "groups", "threads", "gid", "lid", "bufs", "local", "var_vals", "_offsets")

    def __init__(self, groups: int, threads: int, gid: list[Values], lid: list[Values], bufs: dict, var_vals: dict):
        self.n, self.groups, self.threads, self.gid, self.lid = groups * threads, groups, threads, gid, lid
        self.bufs, self.var_vals = bufs, var_vals
        self.local: dict[int, list] = {}
        self._offsets: dict[int, list[int]] = {}

    def offsets(self, size: int) -> list[int]:
        """Each thread's start of its workgroup's part of a shared-memory list of `size` elements per workgroup."""
        if (out := self._offsets.get(size)) is None:
            out = self._offsets[size] = [g * size for g in range(self.groups) for _ in range(self.threads)]
        return out


def _memory(u: UOp) -> UOp:
    """The DEFINE_GLOBAL or DEFINE_LOCAL under an INDEX's buffer (an AFTER orders an access, it is no other memory)."""
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u


def _zero(dt: DType) -> Any:
    z = 0.0 if dtypes.is_float(dt) else False if dtypes.is_bool(dt) else 0
    return (z,) * dt.count if dt.count > 1 else z


def _check_bounds(idx: list[int], size: int, kernel: str, what: str) -> None:
    if idx and (min(idx) < 0 or max(idx) >= size):
        bad = next(j for j in idx if not 0 <= j < size)
        raise IndexError(f"kernel {kernel}: a thread accesses element {bad} of {what}, which has {size} elements")


class Interpreter:
    """A linear UOp list decoded once into nested steps (a loop's body is a list of steps); `run` launches it."""

    def __init__(self, name: str, uops: list[UOp]):
        self.name, self.uops = name, uops
        self.pos = {u: i for i, u in enumerate(uops)}
        self.globals = sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
        self.vars = sorted(u.arg[0] for u in uops if u.op is Ops.DEFINE_VAR)
        self.tensor_cores = {tc.name: tc for tc in PythonRenderer.tensor_cores}
        self.body = self._build()

    # *** decoding ***

    def _build(self) -> list[Step]:
        blocks: list[list[Step]] = [[]]
        open_loops: list[UOp] = []
        for u in self.uops:
            if u.op is Ops.RANGE:
                open_loops.append(u)
                blocks.append([])
            elif u.op is Ops.ENDRANGE:
                if not open_loops or u.src[0] is not open_loops[-1]:
                    raise CompileError(f"{self.name}: ENDRANGE %{self.pos[u]} does not close the innermost loop")
                body = blocks.pop()
                blocks[-1].append(self._loop(open_loops.pop(), body))
            else:
                if (step := self._step(u)) is not None:
                    blocks[-1].append(step)
        if open_loops:
            raise CompileError(f"{self.name}: RANGE %{self.pos[open_loops[-1]]} is never closed")
        return blocks[0]

    def _loop(self, rng: UOp, body: list[Step]) -> Step:
        i, end = self.pos[rng], self.pos[rng.src[0]]

        def loop(v: list, b: _Batch) -> None:
            for r in range(v[end][0]):  # loop bounds are the same for every thread
                v[i] = [r] * b.n
                for step in body:
                    step(v, b)

        return loop

    def _step(self, u: UOp) -> Step | None:
        """What one UOp does to the value lists `v` of a batch `b` (None: nothing at run time)."""
        op, i = u.op, self.pos[u]
        srcs = [self.pos[s] for s in u.src]
        if op is Ops.DEFINE_LOCAL:  # one list per workgroup of the batch, end to end
            size, zero = u.dtype.size, _zero(u.dtype.base)  # type: ignore[attr-defined]
            return lambda v, b: b.local.__setitem__(i, [zero] * (size * b.groups))
        if op in (Ops.DEFINE_GLOBAL, Ops.INDEX, Ops.BARRIER, Ops.SINK) or isinstance(u.dtype, PtrDType):
            return None  # loads and stores resolve their addresses; lockstep threads need no barrier
        if op is Ops.CONST:
            count = u.dtype.count
            value = u.arg if count == 1 else tuple(u.arg) if isinstance(u.arg, tuple) else (u.arg,) * count
            return lambda v, b: v.__setitem__(i, [value] * b.n)
        if op is Ops.DEFINE_VAR:
            name = u.arg[0]
            return lambda v, b: v.__setitem__(i, [b.var_vals[name]] * b.n)
        if op is Ops.SPECIAL:
            _, _, kind, dim = u.arg
            ids = "gid" if kind == "g" else "lid"
            return lambda v, b: v.__setitem__(i, getattr(b, ids)[dim])
        if op in (Ops.DEFINE_ACC, Ops.AFTER):  # value lists are never changed in place: sharing one is a copy
            return lambda v, b: v.__setitem__(i, v[srcs[0]])
        if op is Ops.ASSIGN:
            return lambda v, b: v.__setitem__(srcs[0], v[srcs[1]])
        if op is Ops.LOAD:
            return self._load(u)
        if op is Ops.STORE:
            return self._store(u)
        if op is Ops.VECTORIZE:
            return lambda v, b: v.__setitem__(i, list(zip(*[v[s] for s in srcs])))
        if op is Ops.GEP:
            lanes = operator.itemgetter(*(u.arg if isinstance(u.arg, tuple) else (u.arg,)))
            return lambda v, b: v.__setitem__(i, list(map(lanes, v[srcs[0]])))
        if op is Ops.WMMA:
            return self._wmma(u)
        if op in GroupOp.Elementwise:
            return self._elementwise(u)
        raise NotImplementedError(f"the PYTHON device cannot run {op}")

    def _elementwise(self, u: UOp) -> Step:
        i, srcs = self.pos[u], [self.pos[s] for s in u.src]
        src_dt = u.src[-1].dtype if u.op is Ops.WHERE else u.src[0].dtype
        lists_fn, scalar_fn = elementwise_fns(u.op, u.dtype.scalar, src_dt.scalar, len(srcs))
        if u.dtype.count == 1 and all(s.dtype.count == 1 for s in u.src):
            return lambda v, b: v.__setitem__(i, lists_fn(*[v[s] for s in srcs]))
        # vectors lane by lane; a scalar operand of a vector op is the same in every lane
        count = max(s.dtype.count for s in (u, *u.src))
        scalar = [s.dtype.count == 1 for s in u.src]

        def vector_step(v: list, b: _Batch) -> None:
            args = [[(x,) * count for x in v[s]] if sc else v[s] for s, sc in zip(srcs, scalar)]
            v[i] = [tuple(map(scalar_fn, *lanes)) for lanes in zip(*args)]

        return vector_step

    # *** memory ***

    def _access(self, index: UOp) -> tuple[int, bool, Reader, Writer]:
        """(buffer key, is shared memory, reader, writer) of the buffer an INDEX points into."""
        mem = _memory(index.src[0])
        local = mem.op is Ops.DEFINE_LOCAL
        return (self.pos[mem] if local else mem.arg), local, *_accessors(mem.dtype.base, local)  # type: ignore[attr-defined]

    def _addresses(self, b: _Batch, key: int, local: bool, idx: Values, on: Values | None, count: int) -> tuple:
        """(element numbers, one per lane of each thread whose gate is on, and the memory they are in). A thread whose
        gate is off accesses nothing: its index may be out of range."""
        mem = b.local[key] if local else b.bufs[key]
        size = len(mem) // b.groups if local else len(mem)
        offsets = b.offsets(size) if local and b.groups > 1 else None  # where each thread's workgroup's memory starts
        if on is not None:
            idx = list(itertools.compress(idx, on))
            offsets = list(itertools.compress(offsets, on)) if offsets is not None else None
        _check_bounds(idx, size - count + 1, self.name, f"shared memory %{key}" if local else f"buffer data{key}")
        if count > 1:
            idx = [j + lane for j in idx for lane in range(count)]
            offsets = [o for o in offsets for _ in range(count)] if offsets is not None else None
        return (idx if offsets is None else list(map(operator.add, offsets, idx))), mem

    def _load(self, u: UOp) -> Step:
        i, key_idx = self.pos[u], self.pos[u.src[0].src[1]]
        key, local, read, _ = self._access(u.src[0])
        gate = self.pos[u.src[1]] if len(u.src) > 1 else None
        count, zero = u.dtype.count, _zero(u.dtype)

        def load(v: list, b: _Batch) -> None:
            on = v[gate] if gate is not None else None
            addrs, mem = self._addresses(b, key, local, v[key_idx], on, count)
            vals = read(mem, addrs)
            if count > 1:
                vals = list(zip(*[iter(vals)] * count))
            if on is not None:  # a gated-off thread reads 0
                got = iter(vals)
                vals = [next(got) if g else zero for g in on]
            v[i] = vals

        return load

    def _store(self, u: UOp) -> Step:
        key_idx, value = self.pos[u.src[0].src[1]], self.pos[u.src[1]]
        key, local, _, write = self._access(u.src[0])
        gate = self.pos[u.src[2]] if len(u.src) > 2 else None
        count = u.src[1].dtype.count

        def store(v: list, b: _Batch) -> None:
            on = v[gate] if gate is not None else None
            vals = v[value] if on is None else list(itertools.compress(v[value], on))
            if count > 1:
                vals = [x for lanes in vals for x in lanes]
            addrs, mem = self._addresses(b, key, local, v[key_idx], on, count)
            write(mem, addrs, vals)

        return store

    def _wmma(self, u: UOp) -> Step:
        i, (a, bb, c) = self.pos[u], [self.pos[s] for s in u.src]
        if u.arg not in self.tensor_cores:
            raise CompileError(f"{self.name}: unknown tensor core {u.arg!r}")
        tc = self.tensor_cores[u.arg]
        w = tc.threads  # a workgroup of a tensor-core kernel is whole warps, and so is a batch

        def wmma(v: list, b: _Batch) -> None:
            xa, xb, xc = v[a], v[bb], v[c]
            v[i] = [d for s in range(0, b.n, w) for d in emulate_wmma(tc, xa[s : s + w], xb[s : s + w], xc[s : s + w])]

        return wmma

    # *** launch ***

    def run(
        self, bufs: dict[int, Any], var_vals: dict[str, int], global_size: Sequence[int], local_size: Sequence[int]
    ) -> None:
        gs, ls = (list(global_size) + [1, 1])[:3], (list(local_size) + [1, 1])[:3]
        threads, groups = prod(ls), prod(gs)
        # local ids with dimension 0 fastest: 32 neighbouring threads are a warp
        lid = [[t % ls[0] for t in range(threads)], [t // ls[0] % ls[1] for t in range(threads)]]
        lid.append([t // (ls[0] * ls[1]) for t in range(threads)])
        per_batch = max(1, BATCH_THREADS // threads)
        for start in range(0, groups, per_batch):
            ws = range(start, min(groups, start + per_batch))
            gid = [
                [x for w in ws for x in [w % gs[0]] * threads],
                [x for w in ws for x in [w // gs[0] % gs[1]] * threads],
                [x for w in ws for x in [w // (gs[0] * gs[1])] * threads],
            ]
            batch = _Batch(len(ws), threads, gid, [ids * len(ws) for ids in lid], bufs, var_vals)
            values: list = [None] * len(self.uops)
            for step in self.body:
                step(values, batch)


# *** the device ***


class PythonAllocator(Allocator):
    """Buffers are bytearrays, addressed by an integer handle (what `Buffer.ptr` holds)."""

    def __init__(self) -> None:
        super().__init__()
        self.mem: dict[int, bytearray] = {}
        self._handles = itertools.count(1)

    def _alloc(self, nbytes: int) -> int:
        check_host_allocation(nbytes)
        handle = next(self._handles)
        self.mem[handle] = bytearray(nbytes)
        return handle

    def _free(self, ptr: int, nbytes: int) -> None:
        del self.mem[ptr]

    def copyin(self, dst: int, src: memoryview) -> None:
        memoryview(self.mem[dst])[: src.nbytes] = src.cast("B")

    def copyout(self, dst: memoryview, src: int) -> None:
        dst.cast("B")[:] = memoryview(self.mem[src])[: dst.nbytes]

    def host_view(self, ptr: int, nbytes: int) -> memoryview:
        return memoryview(self.mem[ptr])[:nbytes]


class PythonCompiler(Compiler):
    """Compiling is parsing the text back into UOps: a malformed program fails here, as a compile error."""

    def __init__(self) -> None:
        super().__init__(None)  # parsing is cheaper than a disk-cache lookup

    def compile(self, src: str) -> bytes:
        try:
            parse_program(src)
        except (ValueError, KeyError, SyntaxError) as e:
            raise CompileError(f"PYTHON: cannot parse the program: {e}\n--- source ---\n{src}") from e
        return src.encode()


class PythonProgram:
    """A parsed and decoded kernel, launched as a grid of `global_size` workgroups of `local_size` threads."""

    bare = None  # a launch takes a grid: no function to call with the pointers alone

    def __init__(self, allocator: PythonAllocator, name: str, lib: bytes, n_bufs: int = -1, n_vars: int = 0):
        self.allocator, self.name = allocator, name
        self.interpreter = Interpreter(name, parse_program(lib.decode()))
        self.n_bufs = n_bufs if n_bufs >= 0 else len(self.interpreter.globals)

    def __call__(
        self,
        *args: int,
        global_size: Sequence[int] = (1, 1, 1),
        local_size: Sequence[int] | None = (1, 1, 1),
        wait: bool = False,
    ) -> float | None:
        st = time.perf_counter()
        bufs = {}
        for g in self.interpreter.globals:
            dt = g.dtype.base  # type: ignore[attr-defined]
            bufs[g.arg] = memoryview(self.allocator.mem[args[g.arg]]).cast(_view_format(dt))
        var_vals = dict(zip(self.interpreter.vars, args[self.n_bufs :]))
        self.interpreter.run(bufs, var_vals, global_size, local_size or (1, 1, 1))
        return time.perf_counter() - st if wait else None


class PYTHONDevice(Compiled):
    def __init__(self, name: str):
        allocator = PythonAllocator()
        runtime = functools.partial(PythonProgram, allocator)
        super().__init__(name, allocator, PythonRenderer(), PythonCompiler(), runtime)

    def describe(self) -> str:
        return "Python interpreter of linear UOps (the reference: GPU-style workgroups, shared memory, tensor cores)"
