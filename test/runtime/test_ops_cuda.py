"""The CUDA device. Without a GPU (CI) the compile-only path still runs: the CUDA source of a representative set of
kernels is compiled by NVRTC, so CUDA code that does not compile fails here."""

from __future__ import annotations

import ctypes.util

import numpy as np
import pytest

from lazygrad import Device, Tensor, dtypes
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import Opt, OptOps
from lazygrad.device import CompileError, DeviceUnavailable
from lazygrad.renderer.gpu import CUDARenderer
from lazygrad.uop.ops import Ops, UOp

try:
    from lazygrad.runtime.ops_cuda import CUDACompiler

    COMPILER = CUDACompiler("sm_90")
except DeviceUnavailable as e:
    pytest.skip(f"NVRTC is not installed: {e}", allow_module_level=True)

RENDERER = CUDARenderer()


def kernels(*tensors: Tensor) -> list[UOp]:
    """The kernel ASTs that would compute `tensors` (scheduled, never run)."""
    return [si.ast for si in Tensor.schedule(*tensors) if si.ast.op is Ops.SINK]


def compile_all(asts: list[UOp], opts: list[Opt] | None = None) -> list[str]:
    srcs = []
    for ast in asts:
        spec = get_program(ast, RENDERER, opts)
        binary = COMPILER.compile(spec.src)
        assert binary[:4] == b"\x7fELF", f"{spec.name}: NVRTC did not return a cubin"
        srcs.append(spec.src)
    return srcs


def rand(*shape: int, dtype=dtypes.float32) -> Tensor:  # noqa: ANN001
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)).cast(dtype).realize()


CASES = {
    "elementwise": lambda: [(rand(33, 65) * 2 + 1).exp2().sqrt(), rand(16).sin() / rand(16).log2()],
    "ints": lambda: [
        (rand(8, 8).cast(dtypes.int32) // 3) % 5 ^ 7,
        rand(8).cast(dtypes.int64) << 2,
        rand(8).cast(dtypes.uint8) ** 2,
    ],
    "where_nan_inf": lambda: [(rand(9) > 0).where(rand(9), float("nan")).maximum(float("-inf")), rand(9).isinf()],
    "reduce": lambda: [rand(64, 300).sum(1), rand(4096).max(), rand(32, 32).argmax(1), rand(40, 50).softmax(1)],
    "matmul": lambda: [rand(64, 96) @ rand(96, 48)],
    "half": lambda: [
        (rand(64, 64, dtype=dtypes.half) * 3).exp().sum(1),
        rand(32, 32, dtype=dtypes.half) @ rand(32, 32, dtype=dtypes.half),
    ],
    "bfloat16_and_bitcast": lambda: [
        rand(16, dtype=dtypes.bfloat16) + 1,
        rand(16).bitcast(dtypes.int32),
        rand(16, dtype=dtypes.float16).bitcast(dtypes.int16),
        rand(16, dtype=dtypes.bfloat16).bitcast(dtypes.uint16),
    ],
    "views_and_pads": lambda: [rand(6, 7).pad(((1, 2), (0, 3))).flip(0)[1:, ::2], rand(3, 4).cat(rand(3, 4), dim=1)],
}


@pytest.mark.parametrize("name", CASES)
def test_kernels_compile(name):
    compile_all(kernels(*CASES[name]()))


@pytest.mark.parametrize(
    "opts",
    [
        [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 8)],
        [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 8), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4)],
        [Opt(OptOps.GROUPTOP, 0, 32), Opt(OptOps.UPCAST, 0, 2)],
    ],
)
def test_matmul_with_locals_and_group_compiles(opts):
    (ast,) = kernels(rand(64, 128) @ rand(128, 64))
    (src,) = compile_all([ast], opts)
    assert "threadIdx." in src and "__launch_bounds__" in src
    if any(o.op in (OptOps.GROUP, OptOps.GROUPTOP) for o in opts):
        assert "__shared__ float" in src and "__syncthreads();" in src


TC_MATMULS = {
    "square": lambda dt: rand(64, 64, dtype=dt) @ rand(64, 64, dtype=dt),
    "batched": lambda dt: rand(3, 32, 48, dtype=dt) @ rand(48, 16, dtype=dt),
    "x_wT_relu": lambda dt: (rand(48, 64, dtype=dt) @ rand(16, 64, dtype=dt).T).relu(),
}


@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16], ids=str)
@pytest.mark.parametrize("case", TC_MATMULS)
def test_tensor_core_matmul_compiles(case, dtype):
    (ast,) = kernels(TC_MATMULS[case](dtype))
    spec = get_program(ast, RENDERER)
    assert spec.applied_opts[0].op is OptOps.TC, "a 16-bit matmul of whole tiles gets tensor cores by default"
    kind = "f16" if dtype == dtypes.half else "bf16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in spec.src
    assert spec.local_size is not None and spec.local_size[0] == 32, "the warp's lanes are threadIdx.x"
    assert COMPILER.compile(spec.src)[:4] == b"\x7fELF"


def test_tensor_core_with_unroll_and_locals_compiles():
    (ast,) = kernels(rand(64, 128, dtype=dtypes.half) @ rand(128, 64, dtype=dtypes.half))
    opts = [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 4)]
    (src,) = compile_all([ast], opts)
    assert src.count("lg_mma_m16n8k16_f16_f32(") == 1 + 4 * 4, "one helper, then a WMMA per unrolled K and N tile"


@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.float32], ids=str)
def test_staged_matmul_compiles(dtype):
    """STAGE: each thread copies 16 bytes per load (uint4 of 16-bit floats, float4) to shared memory between two
    barriers; a half matmul's default opts stage both inputs and read A's fragments two halves at a time."""
    a, b = rand(128, 256, dtype=dtype), rand(256, 128, dtype=dtype)
    (ast,) = kernels(a @ b)
    opts = None
    if dtype == dtypes.float32:
        opts = [Opt(OptOps.LOCAL, 1, 32), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)]
        opts += [Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.STAGE, 0, 0), Opt(OptOps.STAGE, 1, 0)]
    (src,) = compile_all([ast], opts)
    vector = "uint4" if dtype == dtypes.half else "float4"
    assert src.count("__syncthreads();") == 2 and "__shared__" in src
    assert f"*((const {vector}*)&data" in src and f"*(({vector}*)&stage" in src
    if dtype == dtypes.half:
        assert "*((const unsigned int*)&stage" in src, "A's fragment registers are read whole"
        assert "lg_pack_f16x2" not in src.split("void ", 1)[1], "no conversion of fragments through float"


def test_big_matmul_indexes_in_32_bits():
    """4096^3 iterations, every address below 2**31: int32 address math on a GPU (64-bit integer math is two
    instructions there)."""
    a = Tensor.empty(4096, 4096, dtype=dtypes.half, device="PYTHON")
    (ast,) = kernels(a @ Tensor.empty(4096, 4096, dtype=dtypes.half, device="PYTHON"))
    src = get_program(ast, RENDERER).src
    assert "long long" not in src and "int gidx0" in src


def test_no_tensor_core_for_float32_or_partial_tiles():
    for out in (rand(64, 64) @ rand(64, 64), rand(40, 64, dtype=dtypes.half) @ rand(64, 36, dtype=dtypes.half)):
        (ast,) = kernels(out)
        assert OptOps.TC not in [o.op for o in get_program(ast, RENDERER).applied_opts]


def test_launch_dims_come_from_thread_ids():
    (ast,) = kernels(rand(64, 128) @ rand(128, 64))
    spec = get_program(ast, RENDERER, [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.GROUP, 0, 4)])
    assert spec.local_size == (4, 8, 4) and spec.global_size == (8, 16, 1)


def test_grid_over_the_y_limit_folds_into_x():
    (ast,) = kernels(rand(70000, 2).T + 1)
    spec = get_program(ast, RENDERER, [])
    assert spec.global_size is not None and all(g <= m for g, m in zip(spec.global_size, RENDERER.global_max))
    compile_all([ast], [])


def test_compile_error_names_nvrtc_and_shows_log():
    with pytest.raises(CompileError, match="NVRTC.*NVRTC_ERROR_COMPILATION"):
        COMPILER.compile('extern "C" __global__ void broken(float* a) { a[0] = undefined_name; }')


def test_arch_choice(monkeypatch):
    src = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] += 1.0f; }'
    assert b".target sm_90" in CUDACompiler("compute_90").compile(src)  # a virtual arch gives PTX
    monkeypatch.setenv("CUDA_ARCH", "sm_80")
    assert CUDACompiler().arch == "sm_80"
    assert CUDACompiler().compile(src)[:4] == b"\x7fELF"


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this machine has an NVIDIA driver")
def test_no_driver_is_a_clear_error():
    with pytest.raises(DeviceUnavailable, match="no NVIDIA driver"):
        Device["CUDA"]


@pytest.mark.skipif(ctypes.util.find_library("cuda") is None, reason="no NVIDIA driver (libcuda) on this machine")
def test_runs_on_gpu():
    try:
        Device["CUDA"]
    except DeviceUnavailable as e:
        pytest.skip(str(e))
    a = np.random.default_rng(0).standard_normal((65, 130)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((130, 33)).astype(np.float32)
    ta, tb = Tensor(a, device="CUDA"), Tensor(b, device="CUDA")
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ta.sum(1).to("CPU").numpy(), a.sum(1), atol=1e-4, rtol=1e-4)
    expected = np.exp(a.astype(np.float16)).astype(np.float32)
    np.testing.assert_allclose(ta.half().exp().float().numpy(), expected, rtol=2e-3)
    # tensor cores (sm_80 and later): half inputs, float accumulation
    h = (a[:64, :128].astype(np.float16), b[:128, :32].astype(np.float16))
    out = (Tensor(h[0], device="CUDA") @ Tensor(h[1], device="CUDA")).float().numpy()
    np.testing.assert_allclose(out, (h[0].astype(np.float32) @ h[1].astype(np.float32)), atol=0.05, rtol=1e-2)


def test_several_kernels_compile_as_one_source():
    # the preludes of each kernel are include-guarded, so sources concatenate (compile_many)
    half, bf16 = rand(16, dtype=dtypes.half), rand(16, dtype=dtypes.bfloat16)
    asts = kernels((half * 2).exp(), rand(16, 16).softmax(1), bf16 + 1)
    specs = {spec.name: spec for spec in (get_program(ast, RENDERER) for ast in asts)}  # one binary, distinct names
    assert len(specs) >= 3
    assert COMPILER.compile_many([s.src for s in specs.values()])[:4] == b"\x7fELF"


# *** on a GPU (skipped without one): tensor cores, BEAM, TinyJit and big reductions on the hardware ***


@pytest.fixture
def gpu() -> str:
    if ctypes.util.find_library("cuda") is None:
        pytest.skip("no NVIDIA driver (libcuda) on this machine")
    try:
        Device["CUDA"]
    except DeviceUnavailable as e:
        pytest.skip(str(e))
    return "CUDA"


def _on(gpu: str, *arrays: np.ndarray, dtype=dtypes.float32) -> list[Tensor]:  # noqa: ANN001
    return [Tensor(a, device=gpu).cast(dtype).realize() for a in arrays]


TC_SHAPES = [
    ((64, 128), (128, 32)),
    ((256, 256), (256, 256)),
    ((100, 70), (70, 50)),  # no dimension a multiple of the tile: no tensor core, still right
    ((3, 48, 64), (64, 40)),
    ((1, 512), (512, 1024)),
]


@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16], ids=["half", "bfloat16"])
@pytest.mark.parametrize("shapes", TC_SHAPES, ids=[f"{a}x{b}" for a, b in TC_SHAPES])
def test_tensor_core_matmul_on_gpu(gpu: str, dtype, shapes) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    a, b = _on(gpu, a_np, b_np, dtype=dtype)
    a_np, b_np = a.float().numpy(), b.float().numpy()  # the values the 16-bit tensors hold
    (si,) = [s for s in (a @ b).schedule() if s.ast.op is Ops.SINK]
    spec = get_program(si.ast, Device[gpu].renderer)
    tiles = shapes[0][-2] % 16 == 0 and shapes[1][-1] % 8 == 0 and shapes[0][-1] % 16 == 0
    if tiles:
        assert "mma.sync" in spec.src, spec.applied_opts
    got = (a @ b).float().numpy()
    np.testing.assert_allclose(got, a_np @ b_np, atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("transposed", [False, True], ids=["a_b", "x_wT"])
def test_staged_float_matmul_on_gpu(gpu: str, transposed: bool) -> None:
    """Big enough for the default staged 64 x 128 tiles (2M outputs), with a bias and relu after it."""
    rng = np.random.default_rng(2)
    a_np, b_np, c_np = (rng.standard_normal(s).astype(np.float32) for s in ((2048, 256), (1024, 256), (1024,)))
    a, b, c = _on(gpu, a_np, b_np, c_np)

    def out() -> Tensor:
        return (a @ (b.T if transposed else b.reshape(256, 1024)) + c).relu()

    (si,) = [s for s in out().schedule() if s.ast.op is Ops.SINK]
    assert "__syncthreads" in get_program(si.ast, Device[gpu].renderer).src
    expected = np.maximum(a_np @ (b_np.T if transposed else b_np.reshape(256, 1024)) + c_np, 0)
    np.testing.assert_allclose(out().numpy(), expected, rtol=1e-4, atol=1e-3)


def test_beam_search_on_gpu(gpu: str) -> None:
    from lazygrad import Context

    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((96, 80)).astype(np.float32), rng.standard_normal((80, 112)).astype(np.float32)
    a, b = _on(gpu, a_np, b_np)
    with Context(BEAM=2):
        got = (a @ b).relu().numpy()
    np.testing.assert_allclose(got, np.maximum(a_np @ b_np, 0), atol=1e-3, rtol=1e-3)


def test_jit_and_training_step_on_gpu(gpu: str) -> None:
    from lazygrad import TinyJit, nn

    rng = np.random.default_rng(2)
    w_np = rng.standard_normal((20, 10)).astype(np.float32)
    w = Tensor(w_np, device=gpu, requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.1)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (x @ w).relu().square().mean()
        loss.backward()
        opt.step()
        return loss.realize()

    w_ref = w_np.copy()
    for i in range(5):
        x_np = rng.standard_normal((8, 20)).astype(np.float32)
        loss = step(Tensor(x_np, device=gpu)).item()
        y = np.maximum(x_np @ w_ref, 0)
        grad = x_np.T @ (2 * y / y.size)
        assert abs(loss - float((y**2).mean())) < 1e-4 * max(1.0, abs(loss)), i
        w_ref -= 0.1 * grad
    np.testing.assert_allclose(w.numpy(), w_ref, atol=1e-4, rtol=1e-4)


def test_large_reductions_and_copies_on_gpu(gpu: str) -> None:
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal(3_000_017).astype(np.float32)
    (x,) = _on(gpu, x_np)
    np.testing.assert_allclose(x.sum().item(), x_np.astype(np.float64).sum(), rtol=1e-4, atol=1e-2)
    assert x.argmax().item() == int(x_np.argmax())
    m_np = rng.standard_normal((1000, 1000)).astype(np.float32)
    (m,) = _on(gpu, m_np)
    np.testing.assert_allclose(m.softmax(1).numpy(), np.exp(m_np) / np.exp(m_np).sum(1, keepdims=True), rtol=1e-4)
    np.testing.assert_allclose(m.T.contiguous().to("CPU").numpy(), m_np.T)
    np.testing.assert_array_equal((Tensor.arange(100_000, device=gpu) * 3 % 7).numpy(), np.arange(100_000) * 3 % 7)


def test_forked_child_gets_a_clear_error_not_the_parents_driver() -> None:
    """CUDA cannot be used after fork (the driver's state is the parent's; calls fail or hang in the driver): a
    device opened before the fork raises a RuntimeError naming the cause in the child, and the child's collector may
    still free what it inherited. Checked without a GPU: a device object with a stand-in driver."""
    import os

    from lazygrad.runtime import ops_cuda

    dev = object.__new__(ops_cuda.CUDADevice)
    dev.cu, dev.context = "the parent's driver", object()  # (never called: the child replaces it before any call)
    ops_cuda._opened_devices.add(dev)
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                alloc = ops_cuda.CUDAAllocator(dev)
                alloc._free(1234, 16)  # the collector freeing an inherited buffer: no error
                try:
                    alloc._alloc(16)
                except ops_cuda.CUDAError as e:
                    code = 0 if "forked" in str(e) and "spawn" in str(e) and isinstance(e, RuntimeError) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert dev.cu == "the parent's driver"  # the parent keeps its driver
    finally:
        ops_cuda._opened_devices.discard(dev)


class _RecordingDriver:
    """A stand-in libcuda: records (thread, call) and answers success; no current context on a thread is
    CUDA_ERROR_INVALID_CONTEXT (201), as the driver answers."""

    def __init__(self) -> None:
        import threading

        self.calls: list[tuple[object, str]] = []  # (the thread object: idents are reused by later threads)
        self.current = threading.local()

    def __getattr__(self, name: str):  # noqa: ANN204
        import threading

        def call(*args):  # noqa: ANN002, ANN202
            self.calls.append((threading.current_thread(), name))
            if name == "cuCtxSetCurrent":
                self.current.context = args[0]
                return 0
            return 0 if getattr(self.current, "context", None) is not None else 201

        return call


def test_every_thread_makes_the_context_current_before_its_first_call() -> None:
    """A CUDA context is current on the thread that opened the device only: an allocation, copy or launch from
    another thread (a user's thread, the engine's device threads, the collector freeing a buffer there) failed with
    CUDA_ERROR_INVALID_CONTEXT on an H200. Each thread now makes it current once, before its first call."""
    import threading

    from lazygrad.runtime import ops_cuda

    dev = object.__new__(ops_cuda.CUDADevice)
    dev.cu, dev.context = _RecordingDriver(), ctypes.c_void_p(1)
    alloc = ops_cuda.CUDAAllocator(dev)
    errors: list[BaseException] = []

    def use() -> None:
        try:
            for _ in range(3):
                alloc._free(alloc._alloc(64), 64)
            alloc.copyin(0, memoryview(bytearray(8)))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=use) for _ in range(3)]
    use()
    for th in threads:
        th.start()
        th.join()
    assert not errors
    for thread in {t for t, _ in dev.cu.calls}:
        names = [name for t, name in dev.cu.calls if t is thread]
        assert names[0] == "cuCtxSetCurrent" and names.count("cuCtxSetCurrent") == 1, names
        assert names.count("cuMemAlloc_v2") == 3
    assert len({t for t, _ in dev.cu.calls}) == 4
