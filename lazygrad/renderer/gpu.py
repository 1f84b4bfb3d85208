"""GPU dialects of the C-style renderer: OpenCL, CUDA and Metal.

They differ from C in the kernel signature, how a thread finds its ids, type names, math function spelling and
bit casts. None of them has GNU statement expressions, so max and guarded division repeat their operands
(which therefore get variables of their own, see `dup_operand_ops`).
"""

from __future__ import annotations

import math

from lazygrad.dtype import DType, dtypes
from lazygrad.renderer.cstyle import CStyleLanguage
from lazygrad.uop.ops import Ops, UOp


class GPUDialect(CStyleLanguage):
    has_local = True
    has_shared = True
    global_max: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    local_max: tuple[int, ...] = (1024, 1024, 64)
    shared_max = 48 * 1024
    dup_operand_ops = frozenset({Ops.MAX, Ops.IDIV, Ops.MOD})

    def render_max(self, a: str, b: str, dt: DType) -> str:
        return f"(({a}!={a}||{a}>{b})?{a}:{b})" if dtypes.is_float(dt) else f"(({a}>{b})?{a}:{b})"

    def render_guarded_div(self, op: Ops, a: str, b: str, dt: DType) -> str:
        return f"(({b})==0?({self.render_dtype(dt)})0:({a}{'/' if op is Ops.IDIV else '%'}{b}))"

    def math_fn(self, name: str, x: str, dt: DType) -> str:
        if dt in (dtypes.float32, dtypes.float64):
            return f"{name}({x})"
        return f"(({self.render_dtype(dt)}){name}((float){x}))"


class OpenCLRenderer(GPUDialect):
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

    def render_buffer_param(self, u: UOp, name: str, written: bool) -> str:
        return f"{'' if written else 'const '}__global {self.render_dtype(u.dtype)} restrict {name}"

    def render_special(self, u: UOp) -> str:
        _, _, kind, dim = u.arg
        return f"get_{'group' if kind == 'g' else 'local'}_id({dim})"

    def render_const(self, x: object, dt: DType) -> str:
        if dt == dtypes.float16 and isinstance(x, float) and math.isfinite(x):
            return f"((half){x!r}f)"
        return super().render_const(x, dt)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"as_{self.render_dtype(dst)}({x})"

    def render_load(self, u: UOp, addr: str) -> str:
        dt = u.src[0].dtype.base  # type: ignore[attr-defined]
        if dt == dtypes.bfloat16:
            return f"as_float((uint){addr}<<16)"
        return f"(bool){addr}" if dt == dtypes.bool else addr

    def render_store_value(self, dt: DType, val: str) -> str:
        if dt == dtypes.bfloat16:
            return f"(ushort)(as_uint({val})>>16)"
        return f"(uchar){val}" if dt == dtypes.bool else val

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        needs = {u.dtype.scalar for u in uops}
        ext = ""
        if dtypes.float16 in needs:
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


class CUDARenderer(GPUDialect):
    device = "CUDA"
    kernel_prefix = 'extern "C" __global__ void '
    arg_int_prefix = "const int"
    type_map = {
        **CStyleLanguage.type_map,
        dtypes.bool: "bool",
        dtypes.float16: "half",
        dtypes.bfloat16: "float",
    }
    prelude = (
        "#include <cuda_fp16.h>\n"
        "template <class T, class F> __device__ __forceinline__ T lg_bitcast(F x) { union { F f; T t; } u; u.f = x; return u.t; }\n"
        "__device__ __forceinline__ float lg_bf16_to_f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }\n"
        "__device__ __forceinline__ unsigned short lg_f_to_bf16(float f) {\n"
        "  unsigned int u = __float_as_uint(f); if (f != f) return 0x7fc0;\n"
        "  return (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }\n"
        "__device__ __forceinline__ float lg_round_bf16(float f) { return lg_bf16_to_f(lg_f_to_bf16(f)); }\n"
    )

    def render_buffer_param(self, u: UOp, name: str, written: bool) -> str:
        return f"{'' if written else 'const '}{self.render_dtype(u.dtype)} __restrict__ {name}"

    def render_special(self, u: UOp) -> str:
        _, _, kind, dim = u.arg
        return f"{'blockIdx' if kind == 'g' else 'threadIdx'}.{'xyz'[dim]}"

    def render_const(self, x: object, dt: DType) -> str:
        if isinstance(x, float) and not math.isfinite(x) and dtypes.is_float(dt):
            bits = "0x7fc00000" if math.isnan(x) else "0x7f800000" if x > 0 else "0xff800000"
            return f"(({self.render_dtype(dt)})__uint_as_float({bits}u))"
        if dt == dtypes.float16 and isinstance(x, float):
            return f"__float2half({x!r}f)"
        return super().render_const(x, dt)

    def math_fn(self, name: str, x: str, dt: DType) -> str:
        if dt == dtypes.float64:
            return f"{name}({x})"
        if dt in (dtypes.float32, dtypes.bfloat16):
            return f"{name}f({x})"
        return f"(({self.render_dtype(dt)}){name}f((float){x}))"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"lg_bitcast<{self.render_dtype(dst)}, {self.render_dtype(src)}>({x})"

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        threads = 1
        for u in uops:
            if u.op is Ops.SPECIAL and u.arg[2] == "l":
                threads *= u.arg[1]
        return f"{self.prelude}{self.kernel_prefix}__launch_bounds__({threads}) {name}({', '.join(params)}) {{\n{body}\n}}\n"


class MetalRenderer(GPUDialect):
    device = "METAL"
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

    def render_special(self, u: UOp) -> str:
        _, _, kind, dim = u.arg
        return f"{'gid' if kind == 'g' else 'lid'}.{'xyz'[dim]}"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"as_type<{self.render_dtype(dst)}>({x})"

    def render_load(self, u: UOp, addr: str) -> str:
        return addr

    def render_store_value(self, dt: DType, val: str) -> str:
        return val

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        n_bufs = sum(1 for u in uops if u.op is Ops.DEFINE_GLOBAL)
        # Metal passes scalars by buffer index too: variables follow the buffers
        fixed = [p if "[[buffer(" in p else f"{p} [[buffer({n_bufs + i})]]" for i, p in enumerate(x for x in params if "[[buffer(" not in x)]
        args = [p for p in params if "[[buffer(" in p] + fixed
        args += ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
        return f"#include <metal_stdlib>\nusing namespace metal;\n{self.kernel_prefix}{name}({', '.join(args)}) {{\n{body}\n}}\n"
