"""The CPU runtime: compiler discovery, the disk cache of compiled kernels, and the allocator."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from lazygrad import Context, Device, Tensor
from lazygrad.device import Buffer, CompileError, DeviceUnavailable
from lazygrad.dtype import dtypes
from lazygrad.runtime.ops_cpu import (
    COPY_TEAM_MIN,
    HALF_VECTOR_PROBE,
    HUGE_MIN,
    HUGE_PAGE,
    LANE_SELECT_PROBE,
    ClangCompiler,
    CPUProgram,
    _Build,
    _libraries_needed,
    _undefined_symbols,
    find_c_compiler,
)

SRC = "void add1(float* restrict out, const float* restrict a) { for (int i = 0; i < 4; i++) out[i] = a[i] + 1.0f; }\n"


def test_compile_and_call():
    compiler = Device["CPU"].compiler
    prg = CPUProgram("add1", compiler.compile(SRC), 2, 0)
    a = Buffer("CPU", 4, dtypes.float32).copyin(memoryview(np.arange(4, dtype=np.float32).tobytes()))
    out = Buffer("CPU", 4, dtypes.float32)
    prg(out.ptr, a.ptr)
    assert list(out.as_bytes().cast("f")) == [1.0, 2.0, 3.0, 4.0]


def test_compile_error_names_compiler_and_source():
    with pytest.raises(CompileError, match="failed to compile"):
        Device["CPU"].compiler.compile("this is not C")


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(DeviceUnavailable, match="no-such-compiler-xyz"):
        find_c_compiler()


def _two_processes(code: str, tmp_path) -> tuple[list[str], list[str]]:
    """What `code` prints, split into words, in two fresh processes one after the other sharing a cache database."""
    env = {**os.environ, "CACHEDB": str(tmp_path / "cache.db")}
    run = [sys.executable, "-c", code]
    outs = [subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout.split() for _ in range(2)]
    return outs[0], outs[1]


def test_disk_cache_hit_compiles_nothing(tmp_path):
    # a second process with the same cache database compiles nothing for kernels it has seen
    code = (
        "import lazygrad.helpers as h, lazygrad.runtime.ops_cpu as c\n"
        "calls = []\n"
        "orig = c.ClangCompiler.compile\n"
        "c.ClangCompiler.compile = lambda self, src: calls.append(1) or orig(self, src)\n"
        "from lazygrad import Tensor\n"
        "print((Tensor([1.0, 2.0, 3.0]) * 7 + 0.5).tolist(), len(calls))\n"
    )
    first, second = _two_processes(code, tmp_path)
    assert first[-1] != "0" and second[-1] == "0"
    assert first[:-1] == second[:-1]


def test_disk_cache_finds_kernels_batched_otherwise(tmp_path):
    """Which kernels of a schedule share a compiler call depends on timing (engine/realize.py's waves): a later process
    batching the same kernels otherwise still finds each on disk and compiles nothing (a cache of whole batches only
    missed: the digits CNN step run again compiled 3 of its 4 batches), and computes the same values."""
    code = (
        "import lazygrad.runtime.ops_cpu as c\n"
        "calls = []\n"
        "orig = c.ClangCompiler.compile_many\n"
        "c.ClangCompiler.compile_many = lambda self, srcs: calls.append(len(srcs)) or orig(self, srcs)\n"
        "from lazygrad import Tensor\n"
        "a = Tensor([[float(i * 7 % 11) for i in range(j, j + 12)] for j in range(12)])\n"
        "outs = [(a @ a).relu().sum(1), a.exp().max(0), (a * 3 - 1).sqrt().mean(), a.T.contiguous() + 2, a.argmax(1)]\n"
        "Tensor.realize(*outs)\n"
        "print(*[v for o in outs for v in o.flatten().tolist()], '|', *calls)\n"
    )
    env = {**os.environ, "CACHEDB": str(tmp_path / "cache.db")}
    outs = []
    for batch in ("2", "3", "1"):
        cmd = [sys.executable, "-c", code]
        run = subprocess.run(cmd, env={**env, "COMPILE_BATCH": batch}, capture_output=True, text=True, check=True)
        values, calls = run.stdout.split("|")
        outs.append((values.split(), calls.split()))
    assert outs[0][1] == ["2", "2", "2", "1"], outs[0]
    assert outs[1][1] == [] and outs[2][1] == [], outs
    assert outs[0][0] == outs[1][0] == outs[2][0]
    a = np.array([[float(i * 7 % 11) for i in range(j, j + 12)] for j in range(12)], dtype=np.float32)
    np.testing.assert_allclose(np.array(outs[0][0][:12], dtype=np.float32), np.maximum(a @ a, 0).sum(1), rtol=1e-5)


def test_cachelevel_zero_always_compiles(tmp_path, monkeypatch):
    compiler = ClangCompiler(find_c_compiler())
    calls = []
    monkeypatch.setattr(ClangCompiler, "compile", lambda self, src: calls.append(src) or b"lib")
    with Context(CACHELEVEL=0):
        compiler.compile_cached(SRC + "// unique 1\n")
        compiler.compile_cached(SRC + "// unique 1\n")
    assert len(calls) == 2


def test_allocator_reuses_freed_blocks():
    alloc = Device["CPU"].allocator
    alloc.free_cache()  # after many tests in one process the cache may be at its limit: a freed block is then freed
    b = Buffer("CPU", 1234, dtypes.float32).ensure_allocated()
    ptr = b.ptr
    del b
    c = Buffer("CPU", 1234, dtypes.float32).ensure_allocated()
    assert c.ptr == ptr
    assert alloc.cached_bytes >= 0


def test_free_cache_beside_frees_run_meanwhile_hands_out_no_freed_block():
    """Each block free_cache returns to the system is a ctypes call, at which the collector may run and free a Buffer
    caught in a reference cycle (Buffer.__del__ -> free, on the same thread: the lock is reentrant). A free of a size
    the cache had no list for stopped the walk ("dictionary changed size during iteration") with the blocks already
    freed left in the cache, for alloc to hand out again: a use after free of system memory."""
    from lazygrad.runtime.ops_cpu import CPUAllocator

    alloc = CPUAllocator(cache_limit=1 << 20)  # (whatever ALLOC_CACHE_MB says)
    returned: set[int] = set()  # addresses given back to the system and not allocated since
    fresh, give_back = alloc._alloc, alloc._free

    def allocated(nbytes: int) -> int:
        ptr = fresh(nbytes)
        returned.discard(ptr)
        return ptr

    def freed(ptr: int, nbytes: int) -> None:
        returned.add(ptr)
        give_back(ptr, nbytes)
        if len(returned) % 4 == 0:  # as the collector freeing a garbage Buffer of a new size meanwhile
            alloc.free(alloc.alloc(1000 + len(returned)), 1000 + len(returned))

    alloc._alloc, alloc._free = allocated, freed
    blocks = [(alloc.alloc(64 + i), 64 + i) for i in range(40)]
    for ptr, nbytes in blocks:
        alloc.free(ptr, nbytes)
    alloc.free_cache()
    cached = {ptr for blocks in alloc.cache.values() for ptr in blocks}
    assert not cached & returned, f"{len(cached & returned)} freed blocks are still handed out by the cache"
    assert alloc.cached_bytes == sum(nbytes for nbytes, blocks in alloc.cache.items() for _ in blocks)
    alloc.free_cache()


def test_large_buffers_start_on_a_huge_page_and_compute_right():
    """Buffers of HUGE_MIN bytes or more are 2 MB aligned (huge-page advice); smaller ones keep the 64-byte alignment.
    A matmul over such buffers (the B panel copy and the output too) matches numpy."""
    alloc = Device["CPU"].allocator
    big = alloc._alloc(HUGE_MIN)
    small = alloc._alloc(HUGE_MIN - 4)
    try:
        if sys.platform == "linux":
            assert big % HUGE_PAGE == 0
        assert big % 64 == 0 and small % 64 == 0
    finally:
        alloc._free(big, HUGE_MIN)
        alloc._free(small, HUGE_MIN - 4)
    rng = np.random.default_rng(0)
    an, bn = (rng.standard_normal((1024, 1040)).astype(np.float32) for _ in range(2))
    out = (Tensor(an) @ Tensor(bn).T).numpy()
    np.testing.assert_allclose(out, an @ bn.T, rtol=1e-4, atol=1e-3)


def _memory_of(t: Tensor) -> int:
    """The address of the memory a realized tensor's buffer lives in (its owner's, for a view)."""
    return t.uop.base.arg.memory.ptr


def _counting_allocations(monkeypatch) -> list[int]:
    """Calls to the CPU allocator's fresh allocation (the free list's misses)."""
    alloc = Device["CPU"].allocator
    calls = [0]
    fresh = alloc._alloc

    def counted(nbytes: int) -> int:
        calls[0] += 1
        return fresh(nbytes)

    monkeypatch.setattr(alloc, "_alloc", counted)
    return calls


def test_repeated_realize_reuses_freed_memory_without_fresh_allocations(monkeypatch):
    """A result dropped before the next is made gives its memory to the next (no fresh, page-faulting memory per
    call); the values are right in reused memory."""
    Device["CPU"].allocator.free_cache()
    an, bn = np.random.rand(1000).astype(np.float32), np.random.rand(1000).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    for _ in range(3):
        (a + b).realize()
    fresh = _counting_allocations(monkeypatch)
    for i in range(20):
        np.testing.assert_allclose((a + b * i).realize().numpy(), an + bn * i, rtol=1e-6)  # (a fused multiply-add)
        np.testing.assert_array_equal((a + b).realize().numpy(), an + bn)
    assert fresh[0] <= 2  # (b * i's first scalar constant buffers aside) not one per call


def test_memory_of_a_live_tensor_is_never_handed_out_again():
    """Results kept alive each hold memory of their own, and keep their values while others are made and dropped in
    the same sizes; a dropped one's memory comes back only once its last reference (a view of it) is gone."""
    an = np.arange(64, dtype=np.float32)
    a = Tensor(an).realize()
    kept = [(a + i).realize() for i in range(8)]
    assert len({_memory_of(t) for t in kept}) == len(kept)
    view = (a * 100).realize()[3:9]  # the product's tensor dies; its memory lives on in the view
    viewed = _memory_of(view)
    for i in range(8):
        tmp = (a - i).realize()
        assert _memory_of(tmp) not in {_memory_of(t) for t in kept} | {viewed}
        np.testing.assert_array_equal(tmp.numpy(), an - i)
        del tmp
    for i, t in enumerate(kept):
        np.testing.assert_array_equal(t.numpy(), an + i)
    np.testing.assert_array_equal(view.numpy(), an[3:9] * 100)
    del view
    assert viewed in {_memory_of((a + 1000 + i).realize()) for i in range(4)}  # free again, and reused


def test_tinyjit_buffers_are_never_reused_while_the_jit_lives():
    """The buffers a TinyJit replays into stay its own while eager work of the same sizes allocates and frees
    around it; its outputs and the eager results stay right."""
    from lazygrad import TinyJit

    an, bn = np.random.rand(256).astype(np.float32), np.random.rand(256).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    step = TinyJit(lambda x, y: ((x + y) * 2).realize())
    outs = [step(a, b) for _ in range(3)]
    out = outs[-1]
    jit_memory = _memory_of(out)
    for i in range(6):
        eager = ((a + Tensor(bn + i)) * 2).realize()
        assert _memory_of(eager) != jit_memory
        np.testing.assert_allclose(eager.numpy(), (an + bn + i) * 2, rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), (an + bn) * 2, rtol=1e-6)
    np.testing.assert_allclose(step(b, a).numpy(), (an + bn) * 2, rtol=1e-6)


def test_copy_size_mismatch_is_an_error():
    b = Buffer("CPU", 4, dtypes.float32)
    with pytest.raises(ValueError, match="16 bytes"):
        b.copyin(memoryview(b"\x00" * 8))


@pytest.mark.parametrize("team", [1, 2])
@pytest.mark.parametrize("nbytes", [COPY_TEAM_MIN - 4, COPY_TEAM_MIN, (3 << 20) + 1028])
def test_data_in_and_out_is_bit_exact_on_any_team(nbytes, team):
    """Copies of COPY_TEAM_MIN bytes or more run on the thread team in 256 KB chunks (lg_copy): every byte arrives,
    the last partial chunk too, NaN payloads and all, from read-only memory as from writable."""
    from lazygrad.runtime.threads_cpu import set_fixed_team

    raw = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    readonly = np.frombuffer(raw, dtype=np.uint32)  # (bit patterns of every kind: NaNs with payloads, denormals)
    assert not readonly.flags.writeable
    set_fixed_team(team)
    try:
        for arr in (readonly, readonly.copy(), readonly.view(np.float32)):
            t = Tensor(arr)
            assert t.numpy().tobytes() == raw
            assert bytes(t._raw_data()) == raw
        odd = np.frombuffer(raw[: nbytes - 3], dtype=np.uint8)  # no whole cache line at the end
        assert Tensor(odd).numpy().tobytes() == raw[: nbytes - 3]
    finally:
        set_fixed_team(0)


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device"):
        Device.canonicalize("TPU")


def test_schedule_compiles_in_one_call_and_second_process_compiles_nothing(tmp_path):
    # softmax is 3 kernels, two of them with the same name: one compiler run builds all of them into one library
    code = (
        "import lazygrad.runtime.ops_cpu as c\n"
        "calls = []\n"
        "orig = c.ClangCompiler._run\n"
        "kernel = lambda src: 'lg_probe' not in src and 'lg_team_step' not in src\n"  # not the probes, not the team
        "c.ClangCompiler._run = lambda self, src, fl: (calls.append(1) if kernel(src) else 0) or orig(self, src, fl)\n"
        "from lazygrad import Tensor\n"
        "x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 7.0]])\n"
        "print(round(x.softmax(-1).sum().item(), 5), len(calls))\n"
    )
    first, second = _two_processes(code, tmp_path)
    assert first == ["2.0", "1"] and second == ["2.0", "0"]


def test_threaded_kernel_runs_on_all_cores_and_matches():
    if not Device["CPU"].renderer.has_threads:
        pytest.skip("no OpenMP in this C compiler")
    x = np.random.default_rng(0).standard_normal((513, 1031)).astype(np.float32)
    from lazygrad import Tensor

    np.testing.assert_allclose((Tensor(x) * 2 + 1).exp2().numpy(), np.exp2(x * 2 + 1), rtol=2e-6)
    np.testing.assert_allclose(Tensor(x).sum(1).numpy(), x.sum(1), rtol=1e-4, atol=1e-4)


def test_compiler_flags_pass_the_vectorizer_probe():
    # gcc 12.2 with AVX-512BW vectorizes a masked int16 select reading 128 bytes off (a setitem on an int16 tensor
    # wrote wrong rows): the compiler's flags are those under which the probe kernel is right
    compiler = Device["CPU"].compiler
    extra = compiler._vectorizer_workaround()
    assert all(flag in compiler.flags for flag in extra)
    base = np.arange(462, dtype=np.int16).reshape(7, 33, 2)
    x = Tensor(base).permute(1, 0, 2).reshape(21, 22).contiguous()
    x[3:5] = 5
    ref = base.transpose(1, 0, 2).reshape(21, 22).copy()
    ref[3:5] = 5
    np.testing.assert_array_equal(x.numpy(), ref)


def test_int8_dot_of_offset_nibbles_is_right():
    # gcc 12.2 turned sum(((int)(u8 & 15) - 8) * (int)s8) into vpdpbusd as if the signed nibble were unsigned: the
    # compiler's flags are those under which VECTORIZER_PROBES' kernels are right, and the tensor program agrees
    rng = np.random.default_rng(0)
    for n in (32, 64, 1024):
        q, x = rng.integers(0, 256, (16, n), dtype=np.uint8), rng.integers(-128, 128, n, dtype=np.int8)
        tq, tx = Tensor(q), Tensor(x)
        for shift in (0, 4):
            nib = ((tq >> shift) & 15).cast(dtypes.int32) - 8
            got = (nib * tx.cast(dtypes.int32)).sum(1, dtype=dtypes.int32).numpy()
            ref = ((((q.astype(np.int32) >> shift) & 15) - 8) * x.astype(np.int32)).sum(1)
            np.testing.assert_array_equal(got, ref)


def test_clang_gets_no_gcc_only_flags():
    # -fvect-cost-model is gcc's: with CC=clang every kernel failed to build ("unknown argument")
    import shutil

    if not shutil.which("clang"):
        pytest.skip("no clang")
    compiler = ClangCompiler("clang")
    assert not any(f.startswith(("-fvect-cost-model", "-fno-aggressive-loop")) for f in compiler.flags)
    src = "void k(float* restrict out, const float* restrict a) { for (int i = 0; i < 37; i++) out[i] = a[i] * 2.0f; }"
    prg = CPUProgram("k", compiler.compile(src), 2, 0)
    out, a = np.zeros(37, np.float32), np.arange(37, dtype=np.float32)
    prg(out.ctypes.data, a.ctypes.data)
    np.testing.assert_array_equal(out, a * 2)


def test_gcc_skips_loop_bounds_from_undefined_behaviour():
    # gcc's walk bounding loop trip counts by the signed overflows their index products could meet was 15% of cc1 on
    # the conv weight-gradient kernel; our loops' counts are known (here a THREAD chunk's bounds, as outlined loops
    # take them), and kernels built without it compute the same
    import shutil

    version = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout if shutil.which("gcc") else ""
    if not version or "clang" in version:
        pytest.skip("no gcc")
    compiler = ClangCompiler("gcc")
    assert "-fno-aggressive-loop-optimizations" in compiler.flags
    src = (
        "void k(int* restrict out, const int* restrict a, int lo, int hi) {\n"
        "  for (int i = lo; i < hi; i++) for (int j = 0; j < 5; j++) out[(i - lo) * 5 + j] = a[j] * i + j;\n}\n"
    )
    prg = CPUProgram("k", compiler.compile(src), 2, 2)
    out, a = np.zeros(35, np.int32), np.arange(5, dtype=np.int32)
    prg(out.ctypes.data, a.ctypes.data, 3, 10)
    np.testing.assert_array_equal(out, (a[None, :] * np.arange(3, 10)[:, None] + np.arange(5)).reshape(-1))


def test_lanes_selected_one_by_one_beside_a_gather_are_right():
    # gcc 12.2 with AVX-512VL built {y0==0?0:y0, ...} lanes feeding a vector picked under a scalar condition with
    # only lane 0 right: (x / (a.abs() + 1))[idx] read zeros past its first column. Kernels with such lanes get VL
    # taken away by a target attribute where the probe fails (runtime/ops_cpu.py LANE_SELECT_PROBE)
    compiler = Device["CPU"].compiler
    src, out_type, inputs, want = LANE_SELECT_PROBE
    target = compiler.lane_select_target
    attr = f'__attribute__((target("{target}")))' if target else ""
    assert compiler._probe_right(src.replace("ATTR", attr), out_type, inputs, want, [])
    rng = np.random.default_rng(0)
    for rows, cols in ((13, 8), (5, 16), (7, 3)):
        x, a = (
            rng.standard_normal((rows, cols)).astype(np.float32),
            rng.standard_normal((rows, cols)).astype(np.float32),
        )
        a[0, 0] = a[-1, -1] = 0.0
        idx = np.array([rows - 2, 0, rows - 2])
        got = (Tensor(x) / (Tensor(a).abs() + 1))[Tensor(idx)].numpy()
        np.testing.assert_allclose(got, (x / (np.abs(a) + 1))[idx], rtol=1e-6)


LIBM_OMP_SRC = (
    "float exp2f(float); float sinf(float);\n"
    "void k(float* restrict out, const float* restrict a) {\n"
    "  #pragma omp parallel for\n"
    "  for (int i = 0; i < 1000; i++) out[i] = exp2f(a[i]) + sinf(a[i]);\n}\n"
)


def test_linked_without_the_driver_as_with_it():
    # kernels are linked by the linker itself (the compiler driver's link took ~10 ms a call): libm and libgomp are
    # found as the driver finds them, and a kernel built either way computes the same
    compiler = Device["CPU"].compiler
    if not compiler.link:
        pytest.skip("this compiler links through its driver")
    a = np.linspace(-4, 4, 1000, dtype=np.float32)
    outs = []
    for link in (compiler.link, []):
        prg = CPUProgram("k", compiler._build(LIBM_OMP_SRC, compiler.flags, link), 2, 0)
        outs.append(np.zeros(1000, np.float32))
        prg(outs[-1].ctypes.data, a.ctypes.data)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], np.exp2(a) + np.sin(a), rtol=1e-5, atol=1e-6)


OMP_SRC = (
    "void k(float* restrict out, const float* restrict a) {\n"
    "  #pragma omp parallel for\n"
    "  for (int i = 0; i < 1000; i++) out[i] = a[i] * 2.0f;\n}\n"
)
PLAIN_SRC = (
    "void k(float* restrict out, const float* restrict a) { for (int i = 0; i < 1000; i++) out[i] = a[i] + 1; }\n"
)


def test_kernel_links_only_the_libraries_it_calls(tmp_path):
    # reading libm and libgomp was half of each link: a kernel gets the ones its object calls into, and runs alike
    compiler = Device["CPU"].compiler
    if not compiler.link:
        pytest.skip("this compiler links through its driver")
    libs = compiler.link[1:]
    gomp = [lib for lib in libs if "libgomp" in os.path.basename(lib)]
    a = np.linspace(-4, 4, 1000, dtype=np.float32)
    cases = [
        (PLAIN_SRC, [], a + 1),
        (OMP_SRC, gomp if compiler.openmp else [], a * 2),
        (LIBM_OMP_SRC, libs, np.exp2(a) + np.sin(a)),
    ]
    for src, want_libs, want in cases:
        obj = tmp_path / "k.o"
        flags = [f for f in compiler.flags if f != "-shared"]
        subprocess.run([compiler.cc, *flags, "-c", "-x", "c", "-", "-o", str(obj)], input=src, text=True, check=True)
        undefined = _undefined_symbols(obj.read_bytes())  # in the message: a toolchain that adds symbols shows which
        assert _libraries_needed(obj.read_bytes(), libs) == want_libs, undefined
        out = np.zeros(1000, np.float32)
        CPUProgram("k", compiler._build(src, compiler.flags, compiler.link), 2, 0)(out.ctypes.data, a.ctypes.data)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert _libraries_needed(b"not an object", libs) == libs  # unreadable: every library, as before


def test_no_linker_links_through_the_driver(monkeypatch):
    import lazygrad.runtime.ops_cpu as ops_cpu

    compiler = Device["CPU"].compiler
    monkeypatch.setattr(ops_cpu.shutil, "which", lambda name: None)
    assert compiler._direct_link() == []


def test_float16_kernels_build_where_the_assembler_lacks_avx512fp16(monkeypatch):
    # gcc 13 on an AVX512-FP16 CPU emitted masked vmovsh for a float16 relu that the system assembler refused: the
    # compiler's flags are those under which HALF_VECTOR_PROBE's kernel builds and is right
    compiler = Device["CPU"].compiler
    src, out_type, inputs, want = HALF_VECTOR_PROBE
    assert compiler._probe_right(src, out_type, inputs, want, [])
    x = np.array([-2, 0, 1, 3, -0.5, 2.5, -1], dtype=np.float16)
    np.testing.assert_array_equal(Tensor(x).relu().numpy(), np.maximum(x, 0))
    # where the CPU has AVX512-FP16 and the probe fails as it is, the flag goes
    import lazygrad.runtime.ops_cpu as ops_cpu

    monkeypatch.setattr(ops_cpu, "_cpu_flags", lambda: "flags : avx512f avx512_fp16")  # /proc/cpuinfo spells it so
    monkeypatch.setattr(type(compiler), "_probe_right", lambda self, src, o, i, w, extra, link=None: bool(extra))
    assert compiler._half_vector_workaround() == ["-mno-avx512fp16"]
    monkeypatch.setattr(type(compiler), "_probe_right", lambda self, src, o, i, w, extra, link=None: True)
    assert compiler._half_vector_workaround() == []


# A kernel of the quantized GGUF path (16 gathered bytes, each row's low or high nibbles by the row's parity): gcc
# 12.2 with AVX-512 compiled its `even ? low : high` of whole vectors into a blend whose mask register held the bool
# (lane 0 took `low`, lanes 1.. `high`). The renderer spells such a select as a lane select on the bool broadcast.
NIBBLE_SELECT_KERNEL = """
typedef float f32x16 __attribute__((vector_size(64)));
typedef float f32x16_u __attribute__((vector_size(64), aligned(4)));
typedef unsigned char u8x16 __attribute__((vector_size(16)));
typedef unsigned short u16x16 __attribute__((vector_size(32)));
typedef unsigned int u32x16 __attribute__((vector_size(64)));
typedef int lg_int32x16 __attribute__((vector_size(64)));
void lg_probe(float* restrict out, const unsigned char* restrict b) {
  for (int g = 0; g < 4; g++) {
    int row = g + 36;
    _Bool even = (row % 2) == 0;
    int at = (row / 2) * 192 - 3004;
    u8x16 v = {b[at], b[at+1], b[at+2], b[at+3], b[at+32], b[at+33], b[at+34], b[at+35],
               b[at+64], b[at+65], b[at+66], b[at+67], b[at+96], b[at+97], b[at+98], b[at+99]};
    f32x16 x = __builtin_convertvector(__builtin_convertvector(__builtin_convertvector(v, u16x16), u32x16), f32x16);
    f32x16 high = __builtin_convertvector(__builtin_convertvector(x * 0.0625f, lg_int32x16), f32x16);
    f32x16 low = x - high * 16.0f;
    *(f32x16_u*)&out[g * 16] = SELECT;
  }
}
"""


def test_whole_vector_select_under_a_scalar_bool_is_right():
    from types import SimpleNamespace

    from lazygrad.renderer.cstyle import C_VECTOR_PRELUDE, _select_whole

    compiler = Device["CPU"].compiler
    spelled = _select_whole(SimpleNamespace(r=Device["CPU"].renderer), dtypes.float32.vec(16), "even", "low", "high")
    src = C_VECTOR_PRELUDE + NIBBLE_SELECT_KERNEL.replace("SELECT", spelled)
    data = np.random.default_rng(0).integers(0, 256, 1024, dtype=np.uint8)
    want = []
    for g in range(4):
        at = ((g + 36) // 2) * 192 - 3004
        v = data[[at + 32 * i + j for i in range(4) for j in range(4)]].astype(np.int64)
        want += list((v & 15) if (g + 36) % 2 == 0 else (v >> 4))
    assert compiler._probe_right(src, ctypes.c_float, [(ctypes.c_uint8, data.tolist())], want, [])
    # and through the renderer: a select under each row's parity over vectors of bytes
    d = np.random.default_rng(1).integers(0, 256, (40, 128), dtype=np.uint8)
    x = Tensor(d)[36:, ::8].cast(dtypes.float32)
    high = (x * 0.0625).cast(dtypes.int32).cast(dtypes.float32)
    got = ((Tensor.arange(4) % 2) == 0).reshape(4, 1).where(x - high * 16, high).numpy()
    v = d[36:, ::8].astype(np.float32)
    np.testing.assert_array_equal(got, np.where((np.arange(4) % 2 == 0)[:, None], v % 16, v // 16))


def test_prestarted_compiler_builds_the_same_and_reports_errors():
    """A compiler process started before its source (prestart) builds the kernel the source says, takes one source
    each, and reports a source it cannot compile as a call started with it does."""
    compiler = ClangCompiler(find_c_compiler())
    compiler.prestart(2)
    assert not compiler._started  # nothing compiled for real yet: nothing started ahead
    compiler.compiled = True
    compiler.prestart(2)
    started = list(compiler._started)
    assert len(started) == 2 and all(job.usable() for job in started)
    prg = CPUProgram("add1", compiler.compile(SRC), 2, 0)
    assert compiler._started == started[1:]
    a = Buffer("CPU", 4, dtypes.float32).copyin(memoryview(np.arange(4, dtype=np.float32).tobytes()))
    out = Buffer("CPU", 4, dtypes.float32)
    prg(out.ptr, a.ptr)
    assert list(out.as_bytes().cast("f")) == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(CompileError, match="failed to compile a kernel:\n.*error"):
        compiler.compile("this is not C")
    assert not compiler._started and not any(os.path.exists(job.tmp) for job in started)


def test_direct_compile_builds_what_the_driver_builds():
    """Where the compiler proper and the assembler start without the driver (gcc), a kernel's shared object is the
    driver's byte for byte, and what the assembler refuses is a CompileError naming it."""
    compiler = ClangCompiler(find_c_compiler())
    if compiler.direct is None:
        pytest.skip("this compiler's driver runs other steps (clang: one process)")
    assert compiler.compile(SRC) == _Build(compiler.cc, compiler.flags, compiler.link).finish(SRC)
    with pytest.raises(CompileError, match="(?s)as failed to compile a kernel:\n.*no such instruction"):
        compiler.compile('__asm__("no_such_instruction %eax");\n' + SRC)


def test_prestarted_compilers_end_with_the_process(tmp_path):
    """Compiler processes still waiting for a source when the program ends are ended, their directories removed."""
    code = (
        "from lazygrad.runtime.ops_cpu import ClangCompiler, find_c_compiler\n"
        "c = ClangCompiler(find_c_compiler())\n"
        "c.compiled = True\n"
        "c.prestart(2)\n"
        "print(*(job.tmp for job in c._started))\n"
    )
    env = {**os.environ, "CACHEDB": str(tmp_path / "cache.db")}
    dirs = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    dirs = dirs.split()
    assert len(dirs) == 2 and not any(os.path.exists(d) for d in dirs)
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):  # no process left writing into them
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        assert not any(d in cmdline for d in dirs)
