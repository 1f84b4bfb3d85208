"""GPU dialects rendered without a device: the structure of the source for OpenCL, CUDA and Metal (Metal has no
runtime here, so these checks are all it gets)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lazygrad import Tensor, Variable, dtypes
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import Opt, OptOps
from lazygrad.renderer.gpu import CUDARenderer, MetalRenderer, OpenCLRenderer
from lazygrad.uop.ops import UOp


def kernel(t: Tensor) -> UOp:
    (si,) = t.schedule()
    return si.ast


def rand(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)).realize()


GROUPED = [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 16)]


# *** Metal ***


def test_metal_elementwise_signature_and_thread_ids():
    spec = get_program(kernel(rand(8, 16) + rand(8, 16)), MetalRenderer(), [Opt(OptOps.LOCAL, 0, 16)])
    src = spec.src
    assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert f"kernel void {spec.name}(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]]" in src
    assert "uint3 gid [[threadgroup_position_in_grid]]" in src and "uint3 lid [[thread_position_in_threadgroup]]" in src
    assert "int lidx0 = lid.x;" in src and "int gidx0 = gid.x;" in src


def test_metal_group_reduce_uses_threadgroup_memory_and_barrier():
    src = get_program(kernel(rand(8, 256).sum(1)), MetalRenderer(), GROUPED).src
    assert re.search(r"threadgroup float temp0\[64\];", src)
    barrier = src.index("threadgroup_barrier(mem_flags::mem_threadgroup);")
    assert src.index("temp0[", src.index("temp0[") + 1) < barrier < src.rindex("temp0[")  # store, barrier, load
    assert "if (" in src  # only the group's first thread stores


def test_metal_variables_follow_buffers_and_types():
    scale = Tensor(Variable("n", 1, 10).bind(3)).cast(dtypes.float32)
    src = get_program(kernel(rand(10) * scale), MetalRenderer(), []).src
    assert "constant int& n [[buffer(2)]]" in src
    src = get_program(kernel(rand(4).cast(dtypes.float16) * 2), MetalRenderer(), []).src
    assert "device half* data0" in src


# *** OpenCL and CUDA spelling ***


def test_opencl_structure():
    r = OpenCLRenderer()
    src = get_program(kernel(rand(8, 256).sum(1)), r, GROUPED).src
    assert "__kernel void" in src and "__global float* restrict data0" in src
    assert "const __global float* restrict data1" in src
    assert "__attribute__((reqd_work_group_size(16, 4, 1)))" in src
    assert "__local float temp0[64];" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src
    assert "get_group_id(0)" in src and "get_local_id(1)" in src


def test_opencl_half_without_fp16_is_stored_as_bits():
    ast = kernel((rand(16).cast(dtypes.float16) * 2).exp())
    assert "cl_khr_fp16" in get_program(ast, OpenCLRenderer(), []).src
    src = get_program(ast, OpenCLRenderer(has_half=False), []).src
    assert "cl_khr_fp16" not in src and "vstore_half_rte" in src and "__global ushort* restrict data0" in src


def test_cuda_structure():
    src = get_program(kernel(rand(8, 256).sum(1)), CUDARenderer(), GROUPED).src
    assert 'extern "C" __global__ void __launch_bounds__(64)' in src
    assert "__shared__ float temp0[64] __attribute__((aligned(16)));" in src and "__syncthreads();" in src
    assert "blockIdx.x" in src and "threadIdx.y" in src and "__restrict__" in src


@pytest.mark.parametrize("renderer", [OpenCLRenderer(), CUDARenderer(), MetalRenderer()], ids=lambda r: r.device)
def test_bounds_checks_only_where_the_launch_does_not_divide(renderer):
    src = get_program(kernel(rand(16, 64) * 2), renderer).src
    assert "if (" not in src.split(" E_")[1]  # after the preludes: every thread has an element
    # 221 elements: workgroups of 128 threads, the last one half out of range
    spec = get_program(kernel(rand(13, 17) * 2), renderer)
    assert spec.global_size == (2, 1, 1) and spec.local_size == (128, 1, 1)
    assert "<221" in spec.src and "if (" in spec.src.split(" E_")[1]


@pytest.mark.parametrize("renderer", [OpenCLRenderer(), CUDARenderer(), MetalRenderer()], ids=lambda r: r.device)
def test_counted_flops_are_the_whole_launch_not_one_thread(renderer):
    """GlobalCounters.global_ops and DEBUG's GFLOPS read spec.ops. A GPU kernel's body runs once per thread: it
    counted one thread's work (a digits training step on CUDA read 0.1 MFLOP instead of 125). A grouped reduce's
    merge, which every thread of the group runs alike, counts once per workgroup."""
    a, b = rand(8, 256), rand(8, 256)
    for opts in (None, GROUPED):
        spec = get_program(kernel((a * b).sum(1)), renderer, opts)
        assert 2 * 8 * 256 <= spec.ops <= 2 * 8 * 256 * 1.1, (opts, spec.ops)  # a multiply and an add per element
        assert spec.mem == (2 * 8 * 256 + 8) * 4
    # 256 threads launched for 221 elements: the 35 past the end count too (an estimate)
    assert get_program(kernel(rand(13, 17) * 2), renderer).ops == 2 * 128
    x, w = rand(128, 96), rand(64, 96)
    spec = get_program(kernel(x @ w.T), renderer)  # a staged, tiled matmul
    assert 2 * 128 * 64 * 96 <= spec.ops <= 2 * 128 * 64 * 96 * 1.1, (spec.applied_opts, spec.ops)


def test_counted_flops_of_a_tensor_core_matmul():
    """One mma.m16n8k16 is 2 * 16 * 8 * 16 FLOPs for its warp of 32 lanes."""
    x, w = rand(128, 96).half().realize(), rand(64, 96).half().realize()
    spec = get_program(kernel(x @ w.T), CUDARenderer())
    assert "mma" in spec.src and 2 * 128 * 64 * 96 <= spec.ops <= 2 * 128 * 64 * 96 * 1.1, spec.ops


def test_unknown_capability_is_refused():
    with pytest.raises(TypeError, match="no capability"):
        OpenCLRenderer(warp_size=32)


def test_metal_has_no_double():
    from lazygrad.dtype import dtypes
    from lazygrad.renderer.gpu import MetalRenderer

    assert MetalRenderer().dtype_unsupported(dtypes.float64) is not None
    assert MetalRenderer().dtype_unsupported(dtypes.float32) is None


# *** half computed in float (CUDA through NVRTC, OpenCL without cl_khr_fp16) ***


@pytest.mark.parametrize("renderer", [CUDARenderer(), OpenCLRenderer(has_half=False)], ids=["cuda", "cl"])
def test_half_in_float_rounds_each_op(renderer):
    """torch rounds every half op's result: two inexact ops fused into one kernel are each rounded through 16 bits.
    On an H100 (a * b + a).float() was off torch's in 25 of 37 values when only the store rounded."""
    h = Tensor(np.arange(8, dtype=np.float16)).realize()
    src = get_program(kernel((h * h + h).float()), renderer, []).src
    body = src[src.index("void ") :]
    assert body.count("lg_f_to_half(") == 2, body


@pytest.mark.parametrize("dst", ["uint8", "float64", "int16"])
def test_half_in_float_bit_casts_keep_the_bits(dst):
    """A bit cast of half values read from memory moves their 16 bits: the round trip through float quieted a NaN's
    payload (0xff26 came back 0x7fff on an H100)."""
    t = Tensor(np.arange(64, dtype=np.uint8)).realize().bitcast("float32").bitcast("float16").bitcast(dst)
    for si in t.schedule():
        src = get_program(si.ast, CUDARenderer(), []).src
        assert "lg_f_to_half" not in src[src.index("void ") :], src
