"""The CL device (OpenCL through ctypes; PoCL in CI): runtime pieces, op tests on CL, GPU-style opts, copies."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from lazygrad import Context, Device, Tensor, dtypes
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import KernelOptError, Opt, OptOps
from lazygrad.device import Buffer, CompileError, DeviceUnavailable
from lazygrad.engine.realize import CompiledRunner
from lazygrad.runtime import ops_cl
from test import test_dtype, test_numerics_edges, test_ops
from test.helpers import run_in_threads

try:
    CL = Device["CL"]
except DeviceUnavailable as e:
    pytest.skip(f"no OpenCL device: {e}", allow_module_level=True)


@pytest.fixture
def on_cl(monkeypatch):
    """Tensors made without a device go to CL (what DEV=CL does for a whole run)."""
    monkeypatch.setattr(Device, "DEFAULT", "CL")


# *** runtime ***


def test_describe_names_device_and_compiler():
    assert "OpenCL" in CL.describe() and "compiler" in CL.describe()


def test_buffer_roundtrip_and_empty():
    data = np.arange(10, dtype=np.float32)
    buf = Buffer("CL", 10, dtypes.float32).copyin(memoryview(data.tobytes()))
    assert np.array_equal(np.frombuffer(buf.as_bytes(), dtype=np.float32), data)
    assert Buffer("CL", 0, dtypes.float32).as_bytes().nbytes == 0


def test_compile_error_shows_build_log():
    with pytest.raises(CompileError, match="failed to compile"):
        CL.compiler.compile("__kernel void broken(__global float* a) { a[0] = undefined_name; }")


def test_launch_error_names_error_and_kernel():
    src = "__attribute__((reqd_work_group_size(4, 1, 1)))\n__kernel void fixed4(__global float* a) { a[0] = 1.0f; }"
    prg = CL.runtime("fixed4", CL.compiler.compile(src), 1, 0)
    buf = Buffer("CL", 16, dtypes.float32)
    with pytest.raises(RuntimeError, match=r"CL_INVALID_WORK_GROUP_SIZE.*fixed4"):
        prg(buf.ptr, global_size=(2, 1, 1), local_size=(8, 1, 1))


def test_unknown_device_index_says_why():
    with pytest.raises(DeviceUnavailable, match="OpenCL device 99"):
        Device["CL:99"]


@pytest.mark.parametrize("env", [{"CL": "1"}, {"DEV": "cl"}])
def test_env_selects_cl_and_debug_names_it(env):
    code = "from lazygrad import Device, Tensor; print(Device.DEFAULT); (Tensor([1.0]) + 1).realize()"
    env = {**{k: v for k, v in os.environ.items() if k not in ("DEV", "DEVICE")}, **env, "DEBUG": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CL\n") and "opened device CL: OpenCL" in out.stdout and "compiler" in out.stdout


def test_debug_lines_name_device(capsys):
    a = Tensor(np.ones(8, np.float32), device="CL")
    with Context(DEBUG=2):
        (a + 1).realize()
    out = capsys.readouterr().out
    assert "CL" in out and "E_" in out


# *** op tests from test/test_ops.py, run on CL (a representative subset: each case compiles OpenCL kernels) ***

OPS_SUBSET = [
    (test_ops.test_binary, ("add", "float32", (2, 1, 4), (3, 1))),
    (test_ops.test_binary, ("div", "int32", (13, 17), (13, 17))),
    (test_ops.test_binary, ("maximum", "float32", (13, 17), ())),
    (test_ops.test_binary, ("mod", "int8", (13, 17), (13, 17))),
    (test_ops.test_binary, ("mul", "float16", (13, 17), (13, 17))),
    (test_ops.test_pow_float, ("float32",)),
    (test_ops.test_pow_int, ("int32",)),
    (test_ops.test_where, ("bool",)),
    (test_ops.test_unary_float, ("exp", "float32", (13, 17))),
    (test_ops.test_unary_float, ("gelu", "float16", (13, 17))),
    (test_ops.test_unary_float, ("sin", "float64", (13, 17))),
    (test_ops.test_unary_nan_inf, ("sqrt",)),
    (test_ops.test_bitwise, ("xor", "int64")),
    (test_ops.test_shifts, ("uint8",)),
    (test_ops.test_reduce_dtypes, ("sum", "int8")),
    (test_ops.test_reduce_dtypes, ("max", "float16")),
    (test_ops.test_reduce_non_contiguous, ("neg_step", "var", (0, 2))),
    (test_ops.test_argmax_nan, ("argmax",)),
    (test_ops.test_max_min_nan, (1,)),
    (test_ops.test_sum_large_and_multi_axis_fused, ((256, 300),)),
    (test_dtype.test_bfloat16_roundtrip, ()),
    (test_dtype.test_bitcast, ("float16", "int16")),
    (test_dtype.test_bitcast, ("float32", "int32")),
    (test_numerics_edges.test_half_reductions_round_once, ("prod", "float16")),  # x + 0.5 rounds before the prod
    (test_numerics_edges.test_half_reductions_round_once, ("mean", "bfloat16")),
]


@pytest.mark.parametrize("fn,args", OPS_SUBSET, ids=[f"{f.__name__}-{'-'.join(map(str, a))}" for f, a in OPS_SUBSET])
def test_ops_on_cl(on_cl, fn, args):
    fn(*args)


def test_matmul_default_opts(on_cl):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((67, 96), dtype=np.float32), rng.standard_normal((96, 130), dtype=np.float32)
    np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, atol=1e-4, rtol=1e-4)


def test_half_is_computed_in_float_without_fp16():
    if CL.renderer.has_half:
        pytest.skip("this OpenCL device has half arithmetic (cl_khr_fp16)")
    x = np.array([1.0, 2049.0, 65504.0, 1e-7], dtype=np.float16)
    out = (Tensor(x, device="CL") * 1.0 + 1.0).numpy()
    np.testing.assert_array_equal(out, (x.astype(np.float32) + 1.0).astype(np.float16))
    assert (Tensor(np.float32([70000.0]), device="CL").cast(dtypes.float16)).numpy()[0] == np.inf


def test_float_division_and_sqrt_are_correctly_rounded():
    """OpenCL allows float32 / to be 2.5 ulps off and sqrt 3: kernels are built correctly rounded where the device can,
    so CL's quotients and roots are torch's bit for bit."""
    fp_config = int.from_bytes(
        ops_cl._info_bytes(CL.cl.clGetDeviceInfo, CL.device, ops_cl.CL_DEVICE_SINGLE_FP_CONFIG)[:8], "little"
    )
    if not fp_config & ops_cl.CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT:
        pytest.skip("this OpenCL device cannot round float32 division and sqrt correctly")
    assert b"-cl-fp32-correctly-rounded-divide-sqrt" in CL.compiler.options
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(4099).astype(np.float32) * 100 for _ in range(2))
    ta, tb = Tensor(a, device="CL"), Tensor(b, device="CL")
    np.testing.assert_array_equal((ta / tb).numpy(), a / b)
    np.testing.assert_array_equal(ta.abs().sqrt().numpy(), np.sqrt(np.abs(a)))


def test_half_ops_round_every_result_as_torch_without_fp16(on_cl):
    """Half computed in float is rounded to half after every op, as torch rounds each op's result: a fused a * b + a
    kept float precision between the two ops (found on an H100, whose CUDA renderer computes half the same way)."""
    test_dtype.test_float16_ops_round_every_result_as_torch()


@pytest.mark.parametrize("src,dst", test_dtype.RESIZED_BITCASTS)
def test_bitcasts_keep_nan_payloads(on_cl, src, dst):
    test_dtype.test_bitcast_to_another_size(src, dst)


# *** GPU-style opts applied explicitly, checked against numpy ***


def run_with_opts(out: Tensor, opts: list[Opt]) -> tuple[np.ndarray, str]:
    """Realize `out` (one kernel; its inputs are realized already) with exactly `opts`; return values and source."""
    (si,) = out.schedule()
    spec = get_program(si.ast, CL.renderer, opts)
    CompiledRunner("CL", spec)(list(si.bufs), {})
    return np.frombuffer(si.bufs[0].as_bytes(), dtype=np.float32).reshape(out.shape), spec.src


def cl_rand(*shape: int, seed: int = 0) -> tuple[np.ndarray, Tensor]:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return x, Tensor(x, device="CL").realize()


@pytest.mark.parametrize(
    "opts",
    [
        [Opt(OptOps.LOCAL, 0, 16)],
        [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 8)],
        [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.LOCAL, 1, 4)],
    ],
)
def test_local_axes(opts):
    x, t = cl_rand(32, 64)
    got, src = run_with_opts((t.T * 2 + 1).exp2(), opts)  # transposed: two axes that cannot merge
    np.testing.assert_allclose(got, np.exp2(x.T * 2 + 1), rtol=1e-5)
    assert "get_local_id" in src and "reqd_work_group_size" in src


@pytest.mark.parametrize(
    "opts",
    [
        [Opt(OptOps.GROUP, 0, 16)],
        [Opt(OptOps.GROUPTOP, 0, 32)],
        [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 8), Opt(OptOps.UNROLL, 0, 4)],
        [Opt(OptOps.GROUP, 0, 8), Opt(OptOps.UPCAST, 0, 4)],
    ],
)
def test_group_reduce_through_shared_memory(opts):
    x, t = cl_rand(16, 128)
    got, src = run_with_opts(t.sum(axis=1), opts)
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert "__local float" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src


def test_group_max_and_matmul():
    x, t = cl_rand(8, 256)
    got, _ = run_with_opts(t.max(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)])
    np.testing.assert_array_equal(got, x.max(axis=1))
    a, ta = cl_rand(32, 64, seed=1)
    b, tb = cl_rand(64, 32, seed=2)
    opts = [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.GROUP, 0, 4)]
    opts += [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 4)]
    got, _ = run_with_opts(ta @ tb, opts)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_opts_over_device_limits_are_refused():
    _, t = cl_rand(8, 8192)
    with pytest.raises(KernelOptError):
        run_with_opts(t.sum(axis=1), [Opt(OptOps.GROUP, 0, 8192)])


def test_kernel_over_the_buffer_limit_is_split(monkeypatch):
    assert CL.renderer.max_buffers >= 8  # read from CL_DEVICE_MAX_PARAMETER_SIZE
    monkeypatch.setattr(CL.renderer, "max_buffers", 5)
    parts = [cl_rand(3, 4, seed=i)[1] for i in range(13)]
    out = Tensor.cat(*parts) * 2
    sched = out.schedule()
    assert len(sched) > 1 and all(len(si.bufs) <= 5 for si in sched)
    from lazygrad.engine.realize import run_schedule

    run_schedule(sched)
    np.testing.assert_allclose(out.numpy(), np.concatenate([p.numpy() for p in parts]) * 2)


def test_default_opts_use_workgroups():
    x, t = cl_rand(4, 4096)
    (si,) = t.sum(axis=1).schedule()
    spec = get_program(si.ast, CL.renderer)
    assert spec.local_size is not None and spec.local_size[0] > 1, spec.local_size
    assert "barrier" in spec.src  # few outputs, long reduce: split across the workgroup
    CompiledRunner("CL", spec)(list(si.bufs), {})
    np.testing.assert_allclose(np.frombuffer(si.bufs[0].as_bytes(), dtype=np.float32), x.sum(axis=1), rtol=1e-4)


# *** copies between devices ***


def test_copy_to_cl_and_back():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    on_cl = Tensor(x).to("CL")
    assert on_cl.device == "CL"
    back = (on_cl * 2).permute(2, 0, 1).to("CPU")
    assert back.device == "CPU"
    np.testing.assert_array_equal(back.numpy(), (x * 2).transpose(2, 0, 1))
    assert on_cl.to("cl") is on_cl


def test_copy_of_a_view_and_of_ints():
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    np.testing.assert_array_equal(Tensor(x).T[1:4].to("CL").numpy(), x.T[1:4])
    np.testing.assert_array_equal((Tensor(x, device="CL") + 1).to("CPU").sum(0).numpy(), (x + 1).sum(0))


def test_gradient_flows_back_across_devices():
    w = Tensor(np.ones((3, 2), np.float32)).requires_grad_()
    loss = (w.to("CL") * Tensor(np.float32([[1, 2], [3, 4], [5, 6]]), device="CL")).sum()
    loss.backward()
    assert w.grad is not None and w.grad.device == "CPU"
    np.testing.assert_array_equal(w.grad.numpy(), np.float32([[1, 2], [3, 4], [5, 6]]))


def test_bounds_checked_launch_where_sizes_do_not_divide():
    x, t = cl_rand(13, 17)
    got, src = run_with_opts(t * 2 + 1, [])
    np.testing.assert_allclose(got, x * 2 + 1, rtol=1e-6)
    assert "if (" in src
    x, t = cl_rand(300, 7, seed=3)
    got, _ = run_with_opts(t.T.max(axis=0), [])
    np.testing.assert_array_equal(got, x.max(axis=1))
    x, t = cl_rand(32, 256, seed=4)  # exactly one workgroup of 32 threads: no grid id, no check
    got, src = run_with_opts(t.sum(axis=1), [])
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-5)
    assert "if (" not in src and "get_group_id" not in src


def test_float4_loads_and_stores_at_any_offset():
    x, t = cl_rand(8, 70)
    got, src = run_with_opts(t[:, 1:65] * 2 + t[:, 3:67], [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 1, 8)])
    np.testing.assert_allclose(got, x[:, 1:65] * 2 + x[:, 3:67], rtol=1e-6)
    assert "vload4(0, &data1[" in src and "vstore4(" in src


def test_float4_accumulators_through_shared_memory():
    x, t = cl_rand(16, 128)
    got, src = run_with_opts(t.max(axis=0), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.GROUP, 0, 8)])
    np.testing.assert_array_equal(got, x.max(axis=0))
    assert "__local float4" in src


def test_jit_replays_cl_kernels_and_copies():
    from lazygrad import TinyJit

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return ((x.to("CL") * 2 + 1).sum(1)).to("CPU")

    for i in range(3):
        xn = np.random.default_rng(i).standard_normal((16, 64)).astype(np.float32)
        np.testing.assert_allclose(step(Tensor(xn)).numpy(), (xn * 2 + 1).sum(1), rtol=1e-5, atol=1e-5)


def test_jit_replays_in_threads_launch_one_kernel_with_their_own_buffers():
    """Each thread's TinyJit captures the same compiled kernel (one cl_kernel, whose arguments are set one call at a
    time before the launch): threads launching it at once took each other's buffers (4 x 100 replays: 22-43 results
    computed from another thread's input)."""
    from lazygrad import TinyJit

    wrong: list[int] = []

    def work(tid: int) -> None:
        step = TinyJit(lambda x: (x * 3 + 1).relu().realize())
        rng = np.random.default_rng(tid)
        for _ in range(100):
            a = rng.standard_normal(64).astype(np.float32)
            if not np.allclose(step(Tensor(a, device="CL")).numpy(), np.maximum(a * 3 + 1, 0), atol=1e-5):
                wrong.append(tid)

    run_in_threads(work, 4)  # threads switch between the argument calls and the launch
    assert not wrong, f"{len(wrong)} of 400 replays computed another thread's values"


def test_one_program_for_several_kernels():
    x = np.random.default_rng(5).standard_normal((16, 16)).astype(np.float32)
    t = Tensor(x, device="CL")
    a, b = (t.half() * 2).float().sum(1), t.softmax(1)  # two kernels with the half helpers, softmax's kernels
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), (x.astype(np.float16) * 2).astype(np.float32).sum(1), rtol=1e-3)
    np.testing.assert_allclose(b.numpy(), np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_dtype_the_device_cannot_compute_is_refused_at_the_api(monkeypatch):
    from lazygrad.tensor import UnsupportedOpError

    monkeypatch.setattr(CL.renderer, "has_double", False)  # an OpenCL device without cl_khr_fp64
    made = [
        lambda: Tensor(np.zeros(3, np.float64), device="CL"),
        lambda: Tensor([1.0, 2.0], device="CL").cast("float64"),
        lambda: Tensor(np.zeros(3, np.float64)).to("CL"),
        lambda: Tensor([1, 2], device="CL").bitcast("int32").cast("float64"),
    ]
    for make in made:
        with pytest.raises(NotImplementedError, match="float64 tensors on CL: the device has no double") as e:
            make()
        assert isinstance(e.value, UnsupportedOpError)
    assert Tensor([1.5], device="CL").cast("float16").dtype == dtypes.float16  # computed in float where needed


_BUILDER = """
from lazygrad import Tensor
for n in range(1, 15):
    a = Tensor.arange(n * 7, device="CL").float()
    assert ((a * 3 + 1).exp2().sum() + n).item() > 0
"""


def test_processes_building_the_same_programs_at_once(tmp_path):
    """Processes building the same kernels at the same moment into one cold PoCL cache (MPI ranks; a test run beside
    another): PoCL reads the other process's half-written cache entries unless builds take turns (ops_cl._BuildLock).
    Before it, about half of such processes aborted (an assertion in pocl_binary.c) or crashed."""
    env = dict(
        os.environ,
        POCL_CACHE_DIR=str(tmp_path / "pocl"),
        CACHELEVEL="0",
        PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    for _ in range(2):  # twice into the same cache: cold, then warm while a neighbour may still write
        procs = [
            subprocess.Popen([sys.executable, "-c", _BUILDER], env=env, stderr=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        for p in procs:
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-2000:]
