"""GPU dialects of the C-style renderer: OpenCL, CUDA and Metal.

They differ from C in the kernel signature, how a thread finds its ids (workgroup and local ids: SPECIAL), shared
memory (DEFINE_LOCAL) and barriers, type names, math function spelling and bit casts. None of them has GNU statement
expressions, so max and guarded division repeat their operands (which therefore get variables of their own, see
`dup_operand_ops`). A device's limits (workgroup sizes, shared memory, half arithmetic) are constructor arguments:
codegen reads them from the renderer. Without half arithmetic (PoCL; CUDA through NVRTC alone, which has no
cuda_fp16.h) half is a storage type only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lazygrad.dtype import DType, dtypes
from lazygrad.renderer.cstyle import (
    C_PLAIN_ALU,
    C_RENDER,
    IPOW_HELPER,
    AluCtx,
    CStyleLanguage,
    RenderCtx,
    _safe_divisor,
    gep,
    local_buffer,
    store_statement,
    thread_id,
)
from lazygrad.renderer.tensor_cores import CUDA_TENSOR_CORES, TensorCore
from lazygrad.uop.ops import Ops, PatternMatcher, UOp, UPat


def _balanced(expr: str) -> bool:
    """True when every parenthesis of `expr` closes within it (so `f(expr)` is one call around all of it)."""
    depth = 0
    for ch in expr:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _stored_bits(val: str, kind: str) -> str | None:
    """The 16 bits a half (kind "half") or bfloat16 ("bf16") computed in float was read from, when `val` is that read
    itself: storing or bit casting those bits as they are keeps a NaN's payload, which the round trip through float
    would quiet."""
    head = f"lg_{kind}_to_f("
    inner = val[len(head) : -1]
    return inner if val.startswith(head) and _balanced(inner) else None


def _gpu_pow(ctx: AluCtx, x: UOp) -> str | None:
    if not dtypes.is_float(x.dtype):
        return None  # integers: C's lg_ipow
    a, dt = ctx.a, x.dtype
    if dt in (dtypes.float32, dtypes.float64):
        return f"pow({a[0]},{a[1]})"
    return f"(({ctx.r.render_dtype(dt)})pow((float){a[0]},(float){a[1]}))"


def _gpu_max(ctx: AluCtx, x: UOp) -> str:
    a, b = ctx.a
    return f"(({a}!={a}||{a}>{b})?{a}:{b})" if dtypes.is_float(x.dtype) else f"(({a}>{b})?{a}:{b})"


def _gpu_guarded_div(ctx: AluCtx, x: UOp) -> str | None:
    """As C_PRELUDE's LG_IDIV / LG_MOD, without GNU statement expressions: by 0 gives 0, and a signed division by -1
    wraps (INT_MIN / -1 traps on x86)."""
    if _safe_divisor(x):
        return None
    (a, b), dt = ctx.a, x.dtype
    t, u64 = ctx.r.render_dtype(dt), ctx.r.render_dtype(dtypes.uint64)
    if dtypes.is_float(dt) and x.op is Ops.MOD:
        return None  # fmod
    if dtypes.is_unsigned(dt):
        return f"(({b})==0?({t})0:({t})({a}{'/' if x.op is Ops.IDIV else '%'}{b}))"
    if x.op is Ops.MOD:
        return f"((({b})==0||({b})==-1)?({t})0:({t})({a}%{b}))"
    neg = f"({t})(({u64})0-({u64})({a}))"
    return f"(({b})==0?({t})0:({b})==-1?{neg}:({t})({a}/{b}))"


def _gpu_cast(ctx: AluCtx, x: UOp) -> str | None:
    if not ctx.r.half_in_float(x.dtype):  # type: ignore[attr-defined]
        return None
    return f"lg_half_to_f(lg_f_to_half((float){ctx.a[0]}))"  # half computed in float: rounded through 16 bits


# what the GPU dialects spell differently from C: no GNU statement expressions, overloaded pow, half in float
GPU_PLAIN_ALU = PatternMatcher(
    [
        (UPat(Ops.POW, name="x"), _gpu_pow),
        (UPat(Ops.MAX, name="x"), _gpu_max),
        (UPat((Ops.IDIV, Ops.MOD), name="x"), _gpu_guarded_div),
        (UPat(Ops.CAST, name="x"), _gpu_cast),
    ]
)


class GPUDialect(CStyleLanguage):
    has_local = True
    has_shared = True
    global_max: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    local_max: tuple[int, ...] = (1024, 1024, 64)
    shared_max = 48 * 1024
    max_workgroup = 1024  # threads in one workgroup, over all its dimensions
    has_half = True  # half arithmetic (not only storage)
    has_double = True
    dup_operand_ops = frozenset({Ops.MAX, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.POW})
    ipow_qualifier = "inline "  # of the integer power helper (IPOW_HELPER)

    half_bits = "unsigned short"  # the 16-bit storage of a half computed in float (see half_prelude)
    half_prelude = ""  # defines lg_half_to_f / lg_f_to_half: half bits <-> float, rounding to nearest even
    bf16_prelude = ""  # defines lg_bf16_to_f / lg_f_to_bf16 / lg_round_bf16 where the dialect's prelude does not

    plain_alu_rules = GPU_PLAIN_ALU + C_PLAIN_ALU

    def __init__(self, **limits: object):
        """Limits a device reports (local_max, max_workgroup, shared_max, has_half, ...) override the defaults."""
        for k, v in limits.items():
            if not hasattr(self, k):
                raise TypeError(f"{type(self).__name__} has no capability {k!r}")
            setattr(self, k, v)
        if not self.has_half:
            # half exists only in memory: computed in float, stored as its 16 bits, and rounded to half precision
            # where a value is cast to half (one rounding per cast or store instead of one per op)
            self.type_map = {**self.type_map, dtypes.float16: "float"}
            self.storage_map = {**self.storage_map, dtypes.float16: self.half_bits}

    def dtype_unsupported(self, dtype: DType) -> str | None:
        if dtype == dtypes.float64 and not self.has_double:
            return "the device has no double-precision arithmetic"
        return None

    def half_in_float(self, dt: DType) -> bool:
        return dt == dtypes.float16 and not self.has_half

    def float_rounding(self, dt: DType) -> str | None:
        # half computed in float is rounded through its 16 bits after every op, as bfloat16 is: a kernel of several
        # half ops otherwise kept float precision between them ((a * b + a).float() was not torch's)
        return "lg_half_to_f(lg_f_to_half({}))" if self.half_in_float(dt) else super().float_rounding(dt)

    def in_float(self, dt: DType) -> bool:
        """A 16-bit float this dialect computes in float (and keeps as 16 bits in memory)."""
        return dt in (dtypes.float16, dtypes.bfloat16) and self.type_map[dt] == "float"

    def render_const(self, x: object, dt: DType) -> str:
        if self.half_in_float(dt):
            return super().render_const(x, dtypes.float32)
        return super().render_const(x, dt)

    def render_load(self, u: UOp, addr: str) -> str:
        stored = u.src[0].dtype.base  # type: ignore[attr-defined]
        return f"lg_half_to_f({addr})" if self.half_in_float(stored) else super().render_load(u, addr)

    def raw_load_bits(self, u: UOp, addr: str) -> str | None:
        return addr if u.dtype.count == 1 and self.half_in_float(u.src[0].dtype.base) else None  # type: ignore[attr-defined]

    def render_store_value(self, dt: DType, val: str) -> str:
        if not self.half_in_float(dt):
            return super().render_store_value(dt, val)
        return _stored_bits(val, "half") or f"lg_f_to_half({val})"  # a copy stores the bits it read

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        # 16-bit floats computed in float are bit cast through their 16-bit storage
        if self.in_float(src):
            kind = "bf16" if src == dtypes.bfloat16 else "half"
            x, src = _stored_bits(x, kind) or f"lg_f_to_{kind}({x})", dtypes.uint16
        if self.in_float(dst):
            bits = self.render_bitcast(x, src, dtypes.uint16)
            return f"lg_{'bf16' if dst == dtypes.bfloat16 else 'half'}_to_f({bits})"
        return self.render_plain_bitcast(x, src, dst)

    def render_plain_bitcast(self, x: str, src: DType, dst: DType) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no bit cast")

    @staticmethod
    def kernel_dtypes(uops: list[UOp]) -> set[DType]:
        """Every scalar dtype a kernel computes with or keeps in memory."""
        memory = [u.dtype.base for u in uops if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL)]  # type: ignore[attr-defined]
        return {u.dtype.scalar for u in uops} | {dt.scalar for dt in memory}

    def render_prelude(self, uops: list[UOp]) -> str:
        """The helpers this kernel's dtypes need."""
        dts = self.kernel_dtypes(uops)
        half = self.half_prelude if dtypes.float16 in dts and not self.has_half else ""
        ipow = any(u.op is Ops.POW and not dtypes.is_float(u.dtype) for u in uops)
        helpers = IPOW_HELPER.format(qual=self.ipow_qualifier, u64=self.render_dtype(dtypes.uint64)) if ipow else ""
        return half + (self.bf16_prelude if dtypes.bfloat16 in dts else "") + helpers

    def math_fn(self, name: str, x: str, dt: DType) -> str:
        if dt in (dtypes.float32, dtypes.float64):
            return f"{name}({x})"
        return f"(({self.render_dtype(dt)}){name}((float){x}))"


def _dialect_rules(thread: Callable[[str, int], str], local: Callable, barrier: str, *more: tuple) -> PatternMatcher:
    """A GPU dialect's render rules: its spelling of thread ids (kind "g"/"l", dim), its shared-memory declaration and
    barrier statement, then its own further rules, in front of the C rules."""
    return (
        PatternMatcher(
            [
                (UPat(Ops.SPECIAL, name="u"), thread_id(thread)),
                (UPat(Ops.DEFINE_LOCAL, name="u"), local),
                (UPat(Ops.BARRIER), lambda ctx: ctx.line(barrier) or ""),
                *more,
            ]
        )
        + C_RENDER
    )


class OpenCLRenderer(GPUDialect):
    render_rules = _dialect_rules(
        lambda kind, dim: f"get_{'group' if kind == 'g' else 'local'}_id({dim})",
        local_buffer("__local "),
        "barrier(CLK_LOCAL_MEM_FENCE);",
        (UPat(Ops.GEP, name="u"), gep(lambda v, i: f"{v}.s{i:x}")),
    )
    device = "CL"
    kernel_prefix = "__kernel void "
    buffer_prefix = "__global "
    arg_int_prefix = "const int"
    type_map = {
        **CStyleLanguage.type_map,
        dtypes.bool: "bool",
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.uint16: "ushort",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
        dtypes.float16: "half",
    }
    storage_map = {dtypes.bool: "uchar", dtypes.bfloat16: "ushort"}  # bool is not a valid buffer element type
    half_bits = "ushort"
    # a NaN keeps its sign and payload bits (vstore_half may not), so bit casts round-trip
    half_prelude = (
        "#ifndef LG_HALF_HELPERS\n#define LG_HALF_HELPERS\n"
        "inline float lg_half_to_f(ushort b) { return vload_half(0, (const __private half*)&b); }\n"
        "inline ushort lg_f_to_half(float f) {\n"
        "  uint u = as_uint(f); if (f != f) return (ushort)(((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff));\n"
        "  ushort b; vstore_half_rte(f, 0, (__private half*)&b); return b; }\n"
        "#endif\n"
    )
    bf16_prelude = (
        "#ifndef LG_BF16_HELPERS\n#define LG_BF16_HELPERS\n"
        "inline float lg_bf16_to_f(ushort b) { return as_float((uint)b << 16); }\n"
        "inline ushort lg_f_to_bf16(float f) {\n"
        "  uint u = as_uint(f); if (f != f) return 0x7fc0; return (ushort)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }\n"
        "inline float lg_round_bf16(float f) { return lg_bf16_to_f(lg_f_to_bf16(f)); }\n"
        "#endif\n"
    )

    # float4 loads and stores: vload4 / vstore4 need only element alignment, so a view's offset never rules them out
    vector_widths = (4,)

    def vector_dtype_ok(self, dt: DType) -> bool:
        return dt.scalar == dtypes.float32

    def vector_load_ok(self, dt: DType) -> bool:
        return self.vector_dtype_ok(dt)

    def vector_op_ok(self, op: Ops, dt: DType, src_dtypes: list[DType]) -> bool:
        return op in (Ops.ADD, Ops.SUB, Ops.MUL) and all(d.scalar == dtypes.float32 for d in (dt, *src_dtypes))

    def render_vectorize(self, dt: DType, items: list[str]) -> str:
        return f"(({self.render_dtype(dt)})({','.join(items)}))"

    def render_store(self, addr: str, val: str, u: UOp) -> str:
        n = u.src[1].dtype.count
        if n > 1 and not u.src[0].dtype.local:  # type: ignore[attr-defined]
            return f"vstore{n}({val}, 0, &{addr})"
        return super().render_store(addr, val, u)

    def render_buffer_param(self, u: UOp, name: str, written: bool) -> str:
        return f"{'' if written else 'const '}__global {self.render_dtype(u.dtype)} restrict {name}"

    def render_const(self, x: object, dt: DType) -> str:
        if dt == dtypes.float16 and self.has_half and isinstance(x, float) and math.isfinite(x):
            return f"((half){x!r}f)"
        return super().render_const(x, dt)

    def render_plain_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"as_{self.render_dtype(dst)}({x})"

    def render_load(self, u: UOp, addr: str) -> str:
        dt = u.src[0].dtype.base  # type: ignore[attr-defined]
        if u.dtype.count > 1 and not u.src[0].dtype.local:  # type: ignore[attr-defined]
            return f"vload{u.dtype.count}(0, &{addr})"
        return f"(bool){addr}" if dt == dtypes.bool else super().render_load(u, addr)

    def render_store_value(self, dt: DType, val: str) -> str:
        return f"(uchar){val}" if dt == dtypes.bool else super().render_store_value(dt, val)

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        needs = self.kernel_dtypes(uops)
        ext = self.render_prelude(uops)
        if dtypes.float16 in needs and self.has_half:
            ext += "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
        if dtypes.float64 in needs:
            ext += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
        local = [u for u in uops if u.op is Ops.SPECIAL and u.arg[2] == "l"]
        attr = ""
        if local:
            sizes = [1, 1, 1]
            for u in local:
                sizes[u.arg[3]] = u.arg[1]
            attr = f"__attribute__((reqd_work_group_size({sizes[0]}, {sizes[1]}, {sizes[2]}))) "
        return f"{ext}{attr}{self.kernel_prefix}{name}({', '.join(params)}) {{\n{body}\n}}\n"


_PACKED = (dtypes.float16, dtypes.bfloat16)  # CUDA holds a vector of these packed, two to a 32-bit register


def _cuda_packed_vectorize(ctx: RenderCtx, u: UOp) -> str | None:
    """Packed 16-bit floats from loads take the bits as stored: the two lanes of a 2-wide load are its register, two
    scalar loads are joined by shifts, instead of converting to float and back (None: render_vectorize packs)."""
    if u.dtype.scalar not in _PACKED:
        return None
    words = []
    for lo, hi in zip(u.src[::2], u.src[1::2]):
        pair = lo.src[0] if lo.op is Ops.GEP else None
        if pair is not None and hi.op is Ops.GEP and hi.src[0] is pair and (lo.arg, hi.arg) == (0, 1):
            words.append(ctx.names[pair])
        elif all(x.op is Ops.LOAD and len(x.src) == 1 and x.dtype.count == 1 for x in (lo, hi)):
            words.append(f"((unsigned int){ctx.names[lo.src[0]]}|((unsigned int){ctx.names[hi.src[0]]}<<16))")
        else:
            return None
    return ctx.expr(u, words[0] if len(words) == 1 else f"make_{ctx.r.render_dtype(u.dtype)}({','.join(words)})")


def _cuda_packed_gep(ctx: RenderCtx, u: UOp) -> str | None:
    """A lane of a packed register of two 16-bit floats, as a float."""
    src = u.src[0].dtype
    if src.count != 2 or src.scalar not in _PACKED:
        return None
    kind = "half" if src.scalar == dtypes.float16 else "bf16"
    return ctx.expr(u, f"lg_{kind}_to_f((unsigned short)({ctx.names[u.src[0]]}>>{16 * u.arg}))")


class CUDARenderer(GPUDialect):
    render_rules = _dialect_rules(
        lambda kind, dim: f"{'blockIdx' if kind == 'g' else 'threadIdx'}.{'xyz'[dim]}",
        # 16-byte aligned: a staged tile (STAGE) is stored and read in uint4 / float4 (a 2-byte type alone is 2)
        local_buffer("__shared__ ", suffix=" __attribute__((aligned(16)))"),
        "__syncthreads();",
        # vectors are only ever loaded and stored whole (STAGE, a tensor core's pair), as their bits
        (
            UPat(Ops.STORE, name="u"),
            lambda ctx, u: store_statement(ctx, u, ctx.names[u.src[1]]) if u.src[1].dtype.count > 1 else None,
        ),
        (UPat(Ops.VECTORIZE, name="u"), _cuda_packed_vectorize),
        (UPat(Ops.GEP, name="u"), _cuda_packed_gep),
        (UPat(Ops.GEP, name="u"), gep(lambda v, i: f"{v}.{'xyzw'[i]}")),
        (UPat(Ops.WMMA, name="u"), lambda ctx, u: ctx.expr(u, f"lg_{u.arg}({', '.join(ctx.srcs(u))})")),
    )
    device = "CUDA"
    ipow_qualifier = "__device__ __forceinline__ "
    max_buffers = 4096 // 8 - 16  # 4 KB of kernel parameters, room kept for the int arguments
    kernel_prefix = 'extern "C" __global__ void '
    arg_int_prefix = "const int"
    type_map = {
        **CStyleLanguage.type_map,
        dtypes.bool: "bool",
        dtypes.bfloat16: "float",
    }
    # NVRTC alone has no cuda_fp16.h: half is computed in float and converted with the PTX instructions that header
    # uses itself (cvt.rn rounds to nearest even, as a store to half must)
    has_half = False
    half_prelude = (
        "#ifndef LG_HALF_HELPERS\n#define LG_HALF_HELPERS\n"
        "__device__ __forceinline__ float lg_half_to_f(unsigned short h) {\n"
        '  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }\n'
        "__device__ __forceinline__ unsigned short lg_f_to_half(float f) {\n"
        '  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }\n'
        "#endif\n"
    )
    # include guards: several kernels may be compiled as one source (compile_many)
    prelude = (
        "#ifndef LG_CUDA_HELPERS\n#define LG_CUDA_HELPERS\n"
        "template <class T, class F> __device__ __forceinline__ T lg_bitcast(F x) {\n"
        "  union { F f; T t; } u; u.f = x; return u.t; }\n"
        "__device__ __forceinline__ float lg_bf16_to_f(unsigned short b) {\n"
        "  return __uint_as_float(((unsigned int)b) << 16); }\n"
        "__device__ __forceinline__ unsigned short lg_f_to_bf16(float f) {\n"
        "  unsigned int u = __float_as_uint(f); if (f != f) return 0x7fc0;\n"
        "  return (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }\n"
        "__device__ __forceinline__ float lg_round_bf16(float f) { return lg_bf16_to_f(lg_f_to_bf16(f)); }\n"
        # two floats -> one register of two 16-bit floats, the first in the low half (cvt puts its first source high)
        "__device__ __forceinline__ unsigned int lg_pack_f16x2(float lo, float hi) {\n"
        '  unsigned int r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }\n'
        "__device__ __forceinline__ unsigned int lg_pack_bf16x2(float lo, float hi) {\n"
        '  unsigned int r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }\n'
        "#endif\n"
    )

    # sm_80 and later; a device with an older GPU passes tensor_cores=()
    tensor_cores: tuple[TensorCore, ...] = CUDA_TENSOR_CORES
    wide_load_bytes = 16  # ld.global.v4 / st.shared.v4: a uint4 or float4 per thread when copying a tile

    # *** tensor cores: fragments of 16-bit floats travel packed two to a 32-bit register ***

    def render_dtype(self, dt: DType, storage: bool = False) -> str:
        if dt.count > 1 and dt.scalar in (dtypes.float16, dtypes.bfloat16):
            return "unsigned int" if dt.count == 2 else f"uint{dt.count // 2}"
        return super().render_dtype(dt, storage)

    def render_load(self, u: UOp, addr: str) -> str:
        if u.dtype.count > 1:  # a wide load (STAGE, a tensor core's pair): the bits as stored
            return f"*((const {self.render_dtype(u.dtype)}*)&{addr})"
        return super().render_load(u, addr)

    def render_store_target(self, addr: str, dt: DType) -> str:
        return f"*(({self.render_dtype(dt)}*)&{addr})" if dt.count > 1 else addr

    def render_vectorize(self, dt: DType, items: list[str]) -> str:
        if dt.scalar in (dtypes.float16, dtypes.bfloat16):  # computed in float here: converted while packing
            kind = "f16" if dt.scalar == dtypes.float16 else "bf16"
            items = [f"lg_pack_{kind}x2({items[i]},{items[i + 1]})" for i in range(0, len(items), 2)]
            if dt.count == 2:
                return items[0]
        return f"make_{self.render_dtype(dt)}({','.join(items)})"

    @staticmethod
    def wmma_helper(tc: TensorCore) -> str:
        """D = A @ B + C for one warp: `mma.sync` with each operand's fragment in registers (A 4, B 2, C 4)."""
        kind = "f16" if tc.dtype_in == dtypes.float16 else "bf16"
        return (
            f"#ifndef LG_HAVE_{tc.name}\n#define LG_HAVE_{tc.name}\n"
            f"__device__ __forceinline__ float4 lg_{tc.name}(uint4 a, uint2 b, float4 c) {{\n"
            f'  asm("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, '
            f'{{%8,%9}}, {{%0,%1,%2,%3}};"\n'
            '    : "+f"(c.x), "+f"(c.y), "+f"(c.z), "+f"(c.w)\n'
            '    : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y));\n'
            "  return c;\n}\n#endif\n"
        )

    def render_buffer_param(self, u: UOp, name: str, written: bool) -> str:
        return f"{'' if written else 'const '}{self.render_dtype(u.dtype)} __restrict__ {name}"

    def render_const(self, x: object, dt: DType) -> str:
        if isinstance(x, float) and not math.isfinite(x) and dtypes.is_float(dt):
            bits = "0x7fc00000" if math.isnan(x) else "0x7f800000" if x > 0 else "0xff800000"
            return f"(({self.render_dtype(dt)})__uint_as_float({bits}u))"
        return super().render_const(x, dt)

    def math_fn(self, name: str, x: str, dt: DType) -> str:
        if dt == dtypes.float64:
            return f"{name}({x})"
        if dt in (dtypes.float32, dtypes.bfloat16):
            return f"{name}f({x})"
        return f"(({self.render_dtype(dt)}){name}f((float){x}))"

    def render_plain_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"lg_bitcast<{self.render_dtype(dst)}, {self.render_dtype(src)}>({x})"

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        threads = 1
        for u in uops:
            if u.op is Ops.SPECIAL and u.arg[2] == "l":
                threads *= u.arg[1]
        signature = f"{self.kernel_prefix}__launch_bounds__({threads}) {name}({', '.join(params)})"
        wmma = "".join(self.wmma_helper(tc) for tc in self.tensor_cores if any(u.arg == tc.name for u in uops))
        return f"{self.prelude}{self.render_prelude(uops)}{wmma}{signature} {{\n{body}\n}}\n"


class MetalRenderer(GPUDialect):
    render_rules = _dialect_rules(
        lambda kind, dim: f"{'gid' if kind == 'g' else 'lid'}.{'xyz'[dim]}",
        local_buffer("threadgroup "),
        "threadgroup_barrier(mem_flags::mem_threadgroup);",
    )
    device = "METAL"
    has_double = False  # the Metal shading language has no double
    max_buffers = 31  # Metal's buffer argument table
    kernel_prefix = "kernel void "
    arg_int_prefix = "constant int&"
    shared_max = 32 * 1024
    type_map = {
        **CStyleLanguage.type_map,
        dtypes.bool: "bool",
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.uint16: "ushort",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
        dtypes.float16: "half",
        dtypes.bfloat16: "bfloat",
    }
    storage_map: dict[DType, str] = {}

    def render_buffer_param(self, u: UOp, name: str, written: bool) -> str:
        return f"{'device' if written else 'const device'} {self.render_dtype(u.dtype)} {name} [[buffer({u.arg})]]"

    def render_plain_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"as_type<{self.render_dtype(dst)}>({x})"

    def render_load(self, u: UOp, addr: str) -> str:
        return addr

    def render_store_value(self, dt: DType, val: str) -> str:
        return val

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        n_bufs = sum(1 for u in uops if u.op is Ops.DEFINE_GLOBAL)
        # Metal passes scalars by buffer index too: variables follow the buffers
        buffers = [p for p in params if "[[buffer(" in p]
        variables = [f"{p} [[buffer({n_bufs + i})]]" for i, p in enumerate(p for p in params if "[[buffer(" not in p)]
        ids = ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
        signature = f"{self.kernel_prefix}{name}({', '.join(buffers + variables + ids)})"
        return f"#include <metal_stdlib>\nusing namespace metal;\n{signature} {{\n{body}\n}}\n"
