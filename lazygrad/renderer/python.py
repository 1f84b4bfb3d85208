"""The PYTHON device's renderer: linear UOps as text, one UOp a line, which the device parses back and interprets.

It declares a GPU's capabilities (workgroups, shared memory, CUDA's tensor cores) so that codegen takes the GPU path,
and that path can then be checked on any machine against a reference with no driver and no compiler. It declares no
vector widths: every value is a scalar per thread except the fragments of a tensor-core instruction.

A line reads `%12 = ADD float32 (%10, %11)`: the UOp's position, op, dtype, sources by position and, when it has
one, its arg as a Python literal. Dtypes are spelled `float32`, `float32x4` (a vector), `float32*[256]` (a global
buffer of 256 elements), `float32*local[64]` (shared memory). The format is written and read here only.
"""

from __future__ import annotations

import ast
import re

from lazygrad.dtype import DTYPES_BY_NAME, DType, PtrDType, dtypes
from lazygrad.renderer import Renderer
from lazygrad.renderer.tensor_cores import CUDA_TENSOR_CORES
from lazygrad.uop.ops import GroupOp, Ops, UOp

# every op the PYTHON device runs (what the lowerer emits for a GPU-style target); the renderer refuses the rest
SUPPORTED_OPS = GroupOp.Elementwise | {
    Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.DEFINE_ACC, Ops.CONST, Ops.SPECIAL, Ops.RANGE,
    Ops.ENDRANGE, Ops.ASSIGN, Ops.AFTER, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.BARRIER, Ops.VECTORIZE, Ops.GEP,
    Ops.WMMA, Ops.SINK,
}  # fmt: skip

_LINE = re.compile(r"%(\d+) = (\w+) (\S+) \(([^)]*)\)(?: (.*))?")
_DTYPE = re.compile(r"(\w+?)(?:x(\d+))?(?:\*(local)?\[(-?\d+)\])?")


def render_dtype(dt: DType) -> str:
    if isinstance(dt, PtrDType):
        return f"{render_dtype(dt.base)}*{'local' if dt.local else ''}[{dt.size}]"
    return dt.scalar.name + (f"x{dt.count}" if dt.count > 1 else "")


def parse_dtype(text: str) -> DType:
    m = _DTYPE.fullmatch(text)
    if m is None or (m[1] not in DTYPES_BY_NAME and m[1] != "void"):
        raise ValueError(f"not a dtype: {text!r}")
    dt = dtypes.void if m[1] == "void" else DTYPES_BY_NAME[m[1]]
    dt = dt.vec(int(m[2])) if m[2] else dt
    return dt.ptr(int(m[4]), local=m[3] is not None) if m[4] is not None else dt


def _parse_const(text: str, dt: DType) -> object:
    """A constant's value: floats may be inf or nan, which are no Python literals."""
    if text.startswith("("):
        return tuple(_parse_const(x.strip(), dt) for x in text[1:-1].split(",") if x.strip())
    if dtypes.is_float(dt):
        return float(text)
    if dtypes.is_bool(dt):
        return text == "True"
    return int(text)


def parse_program(src: str) -> list[UOp]:
    """The UOps a `PythonRenderer.render` text lists, rebuilt (hash-consing makes them the very UOps rendered)."""
    uops: list[UOp] = []
    for line in src.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line)
        if m is None or int(m[1]) != len(uops):
            raise ValueError(f"malformed line {len(uops)} of a PYTHON program: {line!r}")
        op, dt = Ops[m[2]], parse_dtype(m[3])
        srcs = tuple(uops[int(s.strip().lstrip("%"))] for s in m[4].split(",") if s.strip())
        arg = None if m[5] is None else _parse_const(m[5], dt) if op is Ops.CONST else ast.literal_eval(m[5])
        uops.append(UOp(op, dt, srcs, arg))
    return uops


class PythonRenderer(Renderer):
    device = "PYTHON"
    has_local = True
    has_shared = True
    global_max: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    local_max: tuple[int, ...] = (1024, 1024, 64)
    max_workgroup = 1024
    shared_max = 48 * 1024
    tensor_cores = CUDA_TENSOR_CORES
    wide_load_bytes = 16  # as CUDA's, so tiles staged in shared memory are copied as they are there
    max_buffers = 4096 // 8 - 16  # the CUDA limit it models: the scheduler's splitting runs on every machine

    def render(self, name: str, uops: list[UOp]) -> str:
        position = {u: i for i, u in enumerate(uops)}
        lines = [f"# {name}"]
        for i, u in enumerate(uops):
            if u.op not in SUPPORTED_OPS:
                raise NotImplementedError(f"{type(self).__name__} cannot render {u.op}")
            srcs = ", ".join(f"%{position[s]}" for s in u.src)
            arg = "" if u.arg is None else f" {u.arg!r}"
            lines.append(f"%{i} = {u.op.name} {render_dtype(u.dtype)} ({srcs}){arg}")
        return "\n".join(lines) + "\n"
