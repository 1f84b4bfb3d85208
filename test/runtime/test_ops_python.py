"""The PYTHON device: tensor ops against numpy (the GPU code path: workgroups, shared memory, padded launches, tensor
cores), C semantics of its ALU ops, the tensor-core emulation on its own, and the text format of its programs."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from lazygrad import Tensor, Variable, dtypes
from lazygrad.codegen import get_program
from lazygrad.device import Buffer, Device
from lazygrad.renderer.python import parse_program
from lazygrad.renderer.tensor_cores import CUDA_TENSOR_CORES
from lazygrad.runtime.ops_python import PythonProgram, elementwise_fns, emulate_wmma
from lazygrad.uop.ops import Ops

RNG = np.random.default_rng(0)


def py(x, dtype=None) -> Tensor:  # noqa: ANN001
    return Tensor(x, device="PYTHON", dtype=dtype)


def randf(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def program_src(t: Tensor) -> str:
    """The PYTHON program of a one-kernel tensor (scheduled, not run: use a tensor of its own)."""
    (si,) = t.schedule()
    return get_program(si.ast, Device["PYTHON"].renderer).src


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 -> float32, rounding to nearest even."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return bits.view(np.float32)


# *** elementwise ***


def test_elementwise_float():
    a, b = randf(5, 7), randf(5, 7)
    ta, tb = py(a), py(b)
    np.testing.assert_allclose((ta + tb * 2 - ta / tb).numpy(), a + b * 2 - a / b, rtol=1e-5)
    np.testing.assert_allclose(ta.exp().numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(ta.abs().log().numpy(), np.log(np.abs(a)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ta.abs().sqrt().numpy(), np.sqrt(np.abs(a)), rtol=1e-6)
    np.testing.assert_allclose(ta.sin().numpy(), np.sin(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ta.maximum(tb).numpy(), np.maximum(a, b))
    np.testing.assert_allclose((ta.abs() + 0.5).reciprocal().numpy(), 1 / (np.abs(a) + 0.5), rtol=1e-6)
    np.testing.assert_allclose((ta**2).numpy(), a**2, rtol=1e-6)


def test_ieee_edge_cases_do_not_raise():
    x = py([0.0, -1.0, math.inf, math.nan, 1e30, -0.0])
    with np.errstate(all="ignore"):
        ref = np.array([0.0, -1.0, np.inf, np.nan, 1e30, -0.0], np.float32)
        np.testing.assert_array_equal(x.log2().numpy(), np.log2(ref))
        np.testing.assert_array_equal(x.sqrt().numpy(), np.sqrt(ref))
        np.testing.assert_array_equal((x * 100).exp2().numpy(), np.exp2(ref * 100))
        np.testing.assert_array_equal((1 / x).numpy(), 1 / ref)
        np.testing.assert_array_equal((x / 0).numpy(), ref / np.float32(0))
        np.testing.assert_array_equal(x.sin().isnan().numpy(), np.isnan(np.sin(ref)))


def test_int_wraparound():
    u = np.array([0xFFFFFFFF, 0x80000000, 123456789, 7], np.uint32)
    np.testing.assert_array_equal((py(u) * 2654435761).numpy(), u * np.uint32(2654435761))
    np.testing.assert_array_equal((py(u) + 1).numpy(), u + np.uint32(1))
    np.testing.assert_array_equal((py(u) << 7).numpy(), u << np.uint32(7))
    np.testing.assert_array_equal((py(u) >> 5).numpy(), u >> np.uint32(5))
    i = np.array([2**31 - 1, -(2**31), -5], np.int32)
    np.testing.assert_array_equal((py(i) + 1).numpy(), i + np.int32(1))
    np.testing.assert_array_equal((-py(i)).numpy(), -i)
    np.testing.assert_array_equal((py(np.array([100, -100], np.int8)) * 3).numpy(), np.array([44, -44], np.int8))


def test_division_and_remainder_with_negatives():
    a = np.array([-7, 7, -7, 7, 0, 6], np.int32)
    b = np.array([2, -2, -2, 2, 3, 3], np.int32)
    np.testing.assert_array_equal((py(a) // py(b)).numpy(), a // b)
    np.testing.assert_array_equal((py(a) % py(b)).numpy(), a % b)
    fa, fb = a.astype(np.float32) + 0.5, b.astype(np.float32)
    np.testing.assert_allclose(py(fa).fmod(py(fb)).numpy(), np.fmod(fa, fb))
    np.testing.assert_allclose((py(fa) % py(fb)).numpy(), np.mod(fa, fb))


def test_c_semantics_of_alu_ops():
    idiv, _ = elementwise_fns(Ops.IDIV, dtypes.int32, dtypes.int32, 2)
    mod, _ = elementwise_fns(Ops.MOD, dtypes.int32, dtypes.int32, 2)
    assert idiv([-7, 7, -7, 1, -(2**31)], [2, -2, -2, 0, -1]) == [-3, -3, 3, 0, -(2**31)]  # truncation, 0, wrap
    assert mod([-7, 7, -7, 5], [2, -2, -2, 0]) == [-1, 1, -1, 0]
    fmod, _ = elementwise_fns(Ops.MOD, dtypes.float32, dtypes.float32, 2)
    assert fmod([-7.5, 7.5, 1.0], [2.0, -2.0, 0.0])[:2] == [-1.5, 1.5] and math.isnan(fmod([1.0], [0.0])[0])
    pow_, _ = elementwise_fns(Ops.POW, dtypes.float32, dtypes.float32, 2)
    assert pow_([0.0, 2.0, -8.0, -2.0], [-1.0, 1000.0, 1 / 3, math.nan])[:2] == [math.inf, math.inf]
    to_int, _ = elementwise_fns(Ops.CAST, dtypes.int32, dtypes.float32, 1)
    assert to_int([-2.7, 2.7, math.nan, math.inf, 3e9]) == [-2, 2, 0, 0, 3000000000 - 2**32]
    to_u8, _ = elementwise_fns(Ops.CAST, dtypes.uint8, dtypes.int32, 1)
    assert to_u8([-1, 256, 300]) == [255, 0, 44]
    fmax, _ = elementwise_fns(Ops.MAX, dtypes.float32, dtypes.float32, 2)
    assert [math.isnan(x) for x in fmax([math.nan, 1.0], [1.0, math.nan])] == [True, True]


# *** casts ***


def test_casts():
    x = np.array([-2.7, -0.5, 0.0, 1.5, 2.5, 65519.0, 70000.0, 1e-8, 3.14159265], np.float32)
    np.testing.assert_array_equal(py(x).cast(dtypes.int32).numpy(), x.astype(np.int32))
    with np.errstate(over="ignore"):  # 70000 is inf in half
        np.testing.assert_array_equal(py(x).cast(dtypes.float16).numpy(), x.astype(np.float16))
    np.testing.assert_array_equal(py(x).cast(dtypes.bfloat16).cast(dtypes.float32).numpy(), bf16_round(x))
    np.testing.assert_array_equal(py(x).cast(dtypes.bool).numpy(), x.astype(bool))
    np.testing.assert_array_equal(py(x).cast(dtypes.float64).numpy(), x.astype(np.float64))
    i = np.array([-3, 0, 16777217, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(py(i).cast(dtypes.float32).numpy(), i.astype(np.float32))
    np.testing.assert_array_equal(py(i).cast(dtypes.uint8).numpy(), i.astype(np.uint8))
    h = np.array([1.0, 0.1, 30000.0, -2.5], np.float16)  # half in, computed in float, rounded by the store
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((py(h) * 3).numpy(), (h.astype(np.float32) * 3).astype(np.float16))
    py([math.nan, math.inf, -1e20]).cast(dtypes.int32).numpy()  # undefined in C: no crash


def test_bitcast():
    x = np.array([1.0, -2.5, 0.0, np.inf], np.float32)
    np.testing.assert_array_equal(py(x).bitcast(dtypes.int32).numpy(), x.view(np.int32))
    np.testing.assert_array_equal(py(x).bitcast(dtypes.uint32).numpy(), x.view(np.uint32))
    u = np.array([0x3C00, 0xC100, 0x7C00], np.uint16)
    np.testing.assert_array_equal(py(u).bitcast(dtypes.float16).numpy(), u.view(np.float16))
    # NaNs keep their payload through a load, a bit cast and a store, signaling or not (Python's own conversions
    # drop a half's payload and quiet a signaling float32); the flip makes it a kernel
    half_nans = np.array([0x7C01, 0xFE55, 0x7E00], np.uint16)
    assert py(half_nans).flip(0).bitcast(dtypes.float16).numpy().tobytes() == half_nans[::-1].tobytes()
    f32_nans = np.array([0x7F800001, 0xFFC12345, 0x7FC00000], np.uint32)
    as_f32 = py(f32_nans).flip(0).bitcast(dtypes.float32).realize()
    assert as_f32.numpy().tobytes() == f32_nans[::-1].tobytes()
    assert as_f32.flip(0).bitcast(dtypes.uint32).numpy().tobytes() == f32_nans.tobytes()


def test_where_and_comparisons():
    a, b = randf(9), randf(9)
    np.testing.assert_array_equal((py(a) < py(b)).where(py(a), py(b)).numpy(), np.where(a < b, a, b))
    np.testing.assert_array_equal((py(a) == py(a)).numpy(), np.ones(9, bool))


# *** reductions, matmul, softmax ***


def test_reductions():
    x = randf(6, 50)
    np.testing.assert_allclose(py(x).sum(1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(py(x).sum(0).numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(py(x).max(1).numpy(), x.max(1))
    np.testing.assert_array_equal(py(x).argmax(1).numpy(), x.argmax(1))
    np.testing.assert_array_equal(py(x.astype(np.int32)).sum().numpy(), x.astype(np.int32).sum())


def test_group_reduce_through_shared_memory():
    src = program_src(py(randf(4096)).sum())
    assert "DEFINE_LOCAL" in src and "BARRIER" in src  # the reduce is split across a workgroup
    x = Tensor.rand(4096, device="PYTHON")
    np.testing.assert_allclose(x.sum().numpy(), x.numpy().astype(np.float64).sum(), rtol=1e-5)
    y = Tensor.rand(8, 2048, device="PYTHON")
    np.testing.assert_array_equal(y.max(1).numpy(), y.numpy().max(1))


def test_matmul_and_softmax():
    a, b = randf(16, 24), randf(24, 8)
    np.testing.assert_allclose((py(a) @ py(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    x = randf(4, 33)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(py(x).softmax().numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_loop_invariant_accumulator_update():
    # the added value (x+x+x+x) does not depend on the reduce loop: the update still runs in every iteration
    x = randf(4)
    np.testing.assert_allclose(py(x).reshape(1, 4).expand(1000, 4).sum(0).numpy(), x * 1000, rtol=1e-5)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_matmul_on_tensor_cores(dtype):
    a, b = randf(32, 32), randf(32, 32)
    ta, tb = py(a).cast(dtype).realize(), py(b).cast(dtype).realize()
    assert "WMMA" in program_src(py(a).cast(dtype).realize() @ py(b).cast(dtype).realize())
    out = (ta @ tb).cast(dtypes.float32).numpy()
    ra, rb = (ta.cast(dtypes.float32).numpy(), tb.cast(dtypes.float32).numpy())
    ref = (ra @ rb).astype(np.float16).astype(np.float32) if dtype == dtypes.float16 else bf16_round(ra @ rb)
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2)


# *** launches, shapes, variables, randomness, copies ***


def test_padded_launch_is_bounds_checked():
    x = randf(997)  # a prime: no workgroup size divides it
    assert "CMPLT" in program_src(py(x) + 1)  # 1024 threads in workgroups of 128: the last 27 are gated off
    np.testing.assert_allclose((py(x) * 2 + 1).numpy(), x * 2 + 1)


def test_empty_and_single_element():
    assert (py(np.zeros(0, np.float32)) + 1).numpy().shape == (0,)
    assert py(np.zeros((0, 3), np.float32)).sum(0).tolist() == [0.0, 0.0, 0.0]
    assert py([3.0]).sum().item() == 3.0
    assert (py(2.5) * 2).item() == 5.0


def test_bound_variable():
    scale = Tensor(Variable("n", 1, 10).bind(3), device="PYTHON").cast(dtypes.float32)
    x = randf(10)
    np.testing.assert_allclose((py(x) * scale).numpy(), x * 3)


def test_rand_matches_cpu():
    Tensor.manual_seed(42)
    on_python = Tensor.rand(300, device="PYTHON").numpy()
    Tensor.manual_seed(42)
    np.testing.assert_array_equal(on_python, Tensor.rand(300, device="CPU").numpy())


@pytest.mark.parametrize("np_dtype", [np.int8, np.uint16, np.int64, np.float16, np.float64, np.bool_])
def test_copies_between_devices(np_dtype):
    x = (RNG.standard_normal(37) * 50).astype(np_dtype)
    assert py(x).to("CPU").numpy().tobytes() == x.tobytes()
    assert Tensor(x, device="CPU").to("PYTHON").numpy().tobytes() == x.tobytes()


def test_default_device_from_env():
    code = "from lazygrad import Tensor; t = Tensor([1., 2., 3.]) * 2; print(t.device, t.tolist())"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "DEV": "PYTHON"}, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["PYTHON", "[2.0,", "4.0,", "6.0]"]


# *** the tensor-core emulation ***


@pytest.mark.parametrize("tc", CUDA_TENSOR_CORES, ids=lambda tc: tc.name)
def test_wmma_emulation(tc):
    m, n, k = tc.dims
    a = RNG.integers(-8, 8, (m, k)) / 4  # exact in half and bfloat16
    b = RNG.integers(-8, 8, (k, n)) / 4
    c = RNG.standard_normal((m, n)).astype(np.float32)

    def fragments(tile: np.ndarray, operand: str, count: int) -> list[tuple]:
        return [tuple(float(tile[tc.coords(operand, lane, i)]) for i in range(count)) for lane in range(tc.threads)]

    ea, eb, ec = tc.elements
    d_frags = emulate_wmma(tc, fragments(a, "a", ea), fragments(b, "b", eb), fragments(c, "c", ec))
    d = np.zeros((m, n), np.float32)
    for lane, frag in enumerate(d_frags):
        for i, x in enumerate(frag):
            d[tc.coords("c", lane, i)] = x
    np.testing.assert_allclose(d, a @ b + c, rtol=1e-6, atol=1e-6)


# *** the program text ***


def test_program_text_round_trips():
    r = Device["PYTHON"].renderer
    src = program_src(py(randf(4, 8)).max(1))  # a -inf constant: the identity of max
    uops = parse_program(src)
    assert r.render(src.splitlines()[0][2:], uops) == src
    assert any(u.op is Ops.CONST and u.arg == -math.inf for u in uops)


def run_program(src: str, *bufs: Buffer, **launch) -> None:  # noqa: ANN003
    dev = Device["PYTHON"]
    PythonProgram(dev.allocator, "test", dev.compiler.compile(src), len(bufs), 0)(*[b.ptr for b in bufs], **launch)


def test_vector_values_lane_by_lane():
    src = """# vec
%0 = DEFINE_GLOBAL float32*[8] () 0
%1 = DEFINE_GLOBAL float32*[4] () 1
%2 = SPECIAL int32 () ('lidx0', 2, 'l', 0)
%3 = CONST int32 () 4
%4 = MUL int32 (%2, %3)
%5 = CONST int32 () 0
%6 = INDEX float32*[4] (%1, %5)
%7 = LOAD float32x4 (%6)
%8 = CONST float32 () 2.0
%9 = VECTORIZE float32x4 (%8, %8, %8, %8)
%10 = MUL float32x4 (%7, %9)
%11 = GEP float32 (%10) 3
%12 = CAST float32 (%2)
%13 = ADD float32 (%11, %12)
%14 = ADD float32x4 (%10, %13)
%15 = INDEX float32*[8] (%0, %4)
%16 = STORE void (%15, %14)
%17 = SINK void (%0, %1, %16)
"""
    out, inp = Buffer("PYTHON", 8, dtypes.float32), Buffer("PYTHON", 4, dtypes.float32)
    inp.copyin(memoryview(np.array([1, 2, 3, 4], np.float32).tobytes()))
    run_program(src, out, inp, global_size=(1, 1, 1), local_size=(2, 1, 1))
    assert list(out.as_bytes().cast("f")) == [10.0, 12.0, 14.0, 16.0, 11.0, 13.0, 15.0, 17.0]


def test_out_of_bounds_access_is_an_error():
    src = (
        "# oob\n%0 = DEFINE_GLOBAL float32*[4] () 0\n%1 = CONST int32 () 4\n%2 = INDEX float32*[4] (%0, %1)\n"
        "%3 = CONST float32 () 1.0\n%4 = STORE void (%2, %3)\n%5 = SINK void (%0, %4)\n"
    )
    with pytest.raises(IndexError, match="element 4 of buffer data0, which has 4 elements"):
        run_program(src, Buffer("PYTHON", 4, dtypes.float32))
