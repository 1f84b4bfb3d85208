"""CPU device: C compiled by the system compiler into a shared object, loaded and called with ctypes."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

from lazygrad.device import Allocator, Compiled, CompileError, Compiler, DeviceUnavailable
from lazygrad.helpers import (
    check_host_allocation,
    cpu_cores,
    diskcache_get,
    diskcache_put,
    diskcache_put_many,
    getenv,
    library_lock,
    run_process,
    spawn,
)
from lazygrad.renderer.cstyle import DP4A_MADD, GOMP_DECL, ClangRenderer
from lazygrad.runtime.threads_cpu import load_openmp, load_team, openmp_spin_capped

_libc = ctypes.CDLL(None)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_memview_from_memory = ctypes.pythonapi.PyMemoryView_FromMemory
_memview_from_memory.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_memview_from_memory.restype = ctypes.py_object
_PyBUF_WRITE = 0x200


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer: the address of any contiguous buffer, read-only ones too (ctypes' from_buffer takes
    writable ones only, and a copy into `bytes` cost a second pass over every read-only array a tensor was made of)."""

    _fields_ = [
        ("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p),
    ]  # fmt: skip


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


@contextlib.contextmanager
def _address(mem: memoryview) -> Iterator[int]:
    """The address of a C-contiguous memoryview's bytes, valid inside the `with` (the view stays exported)."""
    view = _PyBuffer()
    _get_buffer(mem, ctypes.byref(view), 0)  # (PyBUF_SIMPLE: contiguous bytes, else BufferError)
    try:
        yield view.buf
    finally:
        _release_buffer(ctypes.byref(view))


ALIGNMENT = 64  # one cache line; also the widest (AVX-512) vector
# buffers of HUGE_MIN bytes or more start on a 2 MB boundary and ask Linux for transparent huge pages (numpy does the
# same for its arrays of 4 MB or more): a 2048^2 matmul streams its 16 MB operands once per column block, and with 4 KB
# pages each row's stream crosses a page (a TLB miss, the prefetcher starting over) every 1024 floats (same kernels in
# one process, CPU time of two cores: 2048^2 390-405 -> 418-443 GFLOPS, 1024^2 +1-2%, the conv bench +0-2%)
HUGE_MIN, HUGE_PAGE, MADV_HUGEPAGE = 4 << 20, 2 << 20, 14
_HUGE = sys.platform == "linux"


# a copy of this many bytes or more into or out of a buffer runs on the thread team (threads_cpu.lg_copy): a 4 MB
# tensor from a numpy array took 82 us on one core, torch.tensor 45 us on two; below, the team's start costs more
COPY_TEAM_MIN = 1 << 20


class CPUAllocator(Allocator):
    team_copy: Any = None  # (lg_copy(dst, src, nbytes, threads), the thread count) where a thread team runs

    def _copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes >= COPY_TEAM_MIN and self.team_copy is not None:
            self.team_copy[0](dst, src, nbytes, self.team_copy[1])
        else:
            ctypes.memmove(dst, src, nbytes)

    def _alloc(self, nbytes: int) -> int:
        check_host_allocation(nbytes)
        ptr = ctypes.c_void_p()
        huge = _HUGE and nbytes >= HUGE_MIN
        if (err := _libc.posix_memalign(ctypes.byref(ptr), HUGE_PAGE if huge else ALIGNMENT, max(nbytes, 1))) != 0:
            raise MemoryError(f"posix_memalign: {os.strerror(err)}")
        if huge:
            _libc.madvise(ptr.value, nbytes, MADV_HUGEPAGE)  # advice only: a refusal changes nothing
        return ptr.value  # type: ignore[return-value]

    def _free(self, ptr: int, nbytes: int) -> None:
        _libc.free(ptr)

    def copyin(self, dst: int, src: memoryview) -> None:
        if not src.nbytes:
            return
        if src.readonly:
            with _address(src) as ptr:
                self._copy(dst, ptr, src.nbytes)
        else:  # (a writable view's address without the context manager: .item() and .tolist() copy out every time)
            view = (ctypes.c_char * src.nbytes).from_buffer(src)
            self._copy(dst, ctypes.addressof(view), src.nbytes)

    def copyout(self, dst: memoryview, src: int) -> None:
        if dst.nbytes:
            view = (ctypes.c_char * dst.nbytes).from_buffer(dst)
            self._copy(ctypes.addressof(view), src, dst.nbytes)

    def offset(self, ptr: int, offset: int, nbytes: int) -> int:
        # any element boundary: vector loads and stores of kernels take element-aligned addresses (the _u types)
        return ptr + offset

    def host_view(self, ptr: int, nbytes: int) -> memoryview:
        # a plain "B" memoryview over the memory itself (a ctypes array's view has format "<c", which cast() refuses)
        return _memview_from_memory(ptr, nbytes, _PyBUF_WRITE)


def find_c_compiler() -> str:
    if cc := os.getenv("CC"):
        if shutil.which(cc) is None:
            raise DeviceUnavailable(f"CPU: the compiler named by CC={cc!r} was not found on PATH")
        return cc
    for cc in ("gcc", "clang", "cc"):  # gcc first: it ships libgomp (THREAD axes), clang often comes without libomp
        if shutil.which(cc):
            return cc
    raise DeviceUnavailable("CPU: no C compiler found; install gcc or clang, or name one with CC=...")


def _dot_probe_want() -> list[int]:
    u8, s8 = range(256), range(-128, 128)
    return [sum(((u8[r * 32 + i] & 15) - 8) * s8[i] for i in range(32)) for r in range(8)]


def _scan_probe() -> str:
    """The kernel the CPU renderer wrote for the block prefix sums of a 100-element int64 cumsum (2 x 64 outputs)."""
    offsets = [63, 55, 62, 54, 61, 53, 60, 52, 59, 51, 58, 50, 57, 49, 56, 48]
    loads = "".join(
        f"    long long v{i} = (({c - 1}<b)&(a<{100 + c}))?in[a+(-{c})]:0LL;\n" for i, c in enumerate(offsets)
    )
    total = "v0"
    for i in range(1, len(offsets)):
        total = f"((long long)(((unsigned long long){total})+((unsigned long long)v{i})))"
    return (
        "void lg_probe(long long* restrict out, const long long* restrict in) {\n"
        "  for (int g0 = 0; g0 < 2; g0++) for (int g1 = 0; g1 < 64; g1++) {\n    long long acc = 0LL;\n"
        "    for (int r = 0; r < 4; r++) {\n    int a = g0*64+g1+r*16, b = g1+r*16;\n"
        + loads
        + f"    acc = ((long long)(((unsigned long long)acc)+((unsigned long long){total})));\n    }}\n"
        "    out[g0*64+g1] = acc;\n  }\n}\n"
    )


# (C source of `lg_probe(out, inputs...)`, the output's C type, each input's C type and values, the right output, flag
# sets to try, fewest first): code gcc 12.2 was seen to vectorize wrongly on AVX-512 CPUs, each found through a wrong
# tensor result
VECTORIZER_PROBES: list[tuple[str, Any, list[tuple[Any, Any]], list[int], list[list[str]]]] = [
    # a masked int16 select read 128 bytes off with AVX-512BW (a setitem on an int16 tensor wrote wrong rows)
    (
        "void lg_probe(short* restrict out, const short* restrict in) {\n"
        "  for (int i = 0; i < 231; i++) {\n"
        "    _Bool m = (32 < i) & (i < 55); short v = m ? (short)5 : (short)0;\n"
        "    out[2*i] = m ? v : in[2*i]; out[2*i+1] = m ? v : in[2*i+1];\n  }\n}\n",
        ctypes.c_short,
        [(ctypes.c_short, range(462))],
        [5 if 66 <= i < 110 else i for i in range(462)],
        [["-mno-avx512bw"]],
    ),
    # a sum of ((int)(u8 & 15) - 8) * (int)s8: the narrowed signed nibble went into vpdpbusd as if it were unsigned
    # (an int8 dot product of offset nibbles summed wrongly); only taking VNNI away fixes it
    (
        "void lg_probe(int* restrict out, const unsigned char* restrict q, const signed char* restrict x) {\n"
        "  for (int r = 0; r < 8; r++) {\n    int acc = 0;\n"
        "    for (int i = 0; i < 32; i++) acc = acc + (((int)(q[r*32+i] & (unsigned char)15)) - 8) * (int)x[i];\n"
        "    out[r] = acc;\n  }\n}\n",
        ctypes.c_int,
        [(ctypes.c_ubyte, range(256)), (ctypes.c_byte, range(-128, 128))],
        _dot_probe_want(),
        [["-mno-avx512vnni", "-mno-avxvnni"]],
    ),
    # a blocked int64 cumsum's first level (16 masked loads per step summed with wrapping adds): if-converted and
    # vectorized (AVX2 or AVX-512) it stored zeros and stack addresses (Tensor.cumsum of 100 int64 values, fuzz seed
    # 53111); clang and gcc without the loop's if-conversion are right
    (
        _scan_probe(),
        ctypes.c_longlong,
        [(ctypes.c_longlong, range(1, 101))],
        [sum(range(64 * (i // 64) + 1, min(i + 1, 100) + 1)) for i in range(128)],
        [["-fno-tree-loop-if-convert"]],
    ),
]

# lanes selected one by one ({y0==0?0:y0, ...}) feeding a vector picked whole under a scalar condition: gcc 12.2 with
# AVX-512VL got only lane 0 right (a gather (x / (a.abs() + 1))[idx] read zeros past its first column). Taking VL
# away from every kernel cost softmax 50%, so only kernels with such lanes get it taken away, by a target attribute
# (the renderer's lane_select_target)
LANE_SELECT_PROBE = (
    "typedef float f8 __attribute__((vector_size(32)));\n"
    "typedef float f8u __attribute__((vector_size(32), aligned(4)));\n"
    "ATTR void lg_probe(float* restrict out, const float* restrict a, const float* restrict b,"
    " const float* restrict c) {\n"
    "  f8 acc = {0,0,0,0,0,0,0,0}; int v = (int)c[0];\n"
    "  for (int r = 0; r < 4; r++) {\n"
    "    _Bool m = v == r; f8 x = *(f8u*)&a[r*8]; f8 y = *(f8u*)&b[r*8];\n"
    "    f8 s = (f8){y[0]==0.0f?0.0f:y[0], y[1]==0.0f?0.0f:y[1], y[2]==0.0f?0.0f:y[2], y[3]==0.0f?0.0f:y[3],"
    " y[4]==0.0f?0.0f:y[4], y[5]==0.0f?0.0f:y[5], y[6]==0.0f?0.0f:y[6], y[7]==0.0f?0.0f:y[7]};\n"
    "    f8 q = x / (s + (f8){1,1,1,1,1,1,1,1});\n"
    "    acc = acc + (m ? (f8){q[0],q[1],q[2],q[3],q[4],q[5],q[6],q[7]} : (f8){0,0,0,0,0,0,0,0});\n"
    "  }\n  *(f8u*)&out[0] = acc;\n}\n",
    ctypes.c_float,
    [(ctypes.c_float, range(0, 64, 2)), (ctypes.c_float, [1] * 32), (ctypes.c_float, [2])],
    list(range(16, 24)),
)


# a vectorized float16 relu: gcc 13 with -march=native on an AVX512-FP16 CPU (Sapphire Rapids) emitted masked vmovsh,
# which the system's older assembler refused ("unsupported masking for `vmovsh'"), so a float16 kernel did not build
HALF_VECTOR_PROBE = (
    "void lg_probe(_Float16* restrict out, const _Float16* restrict in) {\n"
    "  for (int i = 0; i < 7; i++) { _Float16 v = in[i]; out[i] = ((v < (_Float16)0.0f) | (v == (_Float16)0.0f))"
    " ? (_Float16)0.0f : v; }\n}\n",
    ctypes.c_ushort,
    [(ctypes.c_ushort, [0xC000, 0x0000, 0x3C00, 0x4200, 0xB800, 0x4100, 0xBC00])],  # float16 bits: -2 0 1 3 -.5 2.5 -1
    [0, 0, 0x3C00, 0x4200, 0, 0x4100, 0],
)


# a register tile's inner loop as the lowerer writes it (4 rows x 2 vectors, one step of the reduce): each vector of b
# meets four broadcast values of a. Built to assembly: a compiler that folds a vector's load into every multiply-add
# using it (gcc tuned for Zen: vfmadd231ps 32(%rdx), ...) loads it once per use (ClangRenderer.register_pin)
FOLDED_LOAD_PROBE = (
    "typedef float v8 __attribute__((vector_size(32)));\n"
    "void lg_probe(v8* restrict c, const v8* restrict b, const float* restrict a, int n) {\n"
    "  v8 c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3], c4 = c[4], c5 = c[5], c6 = c[6], c7 = c[7];\n"
    "  for (int k = 0; k < n; k++) {\n"
    "    v8 b0 = b[2 * k], b1 = b[2 * k + 1];\n"
    "    c0 += a[k] * b0; c1 += a[k] * b1; c2 += a[n + k] * b0; c3 += a[n + k] * b1;\n"
    "    c4 += a[2 * n + k] * b0; c5 += a[2 * n + k] * b1; c6 += a[3 * n + k] * b0; c7 += a[3 * n + k] * b1;\n"
    "  }\n"
    "  c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3; c[4] = c4; c[5] = c5; c[6] = c6; c[7] = c7;\n}\n"
)


class ClangCompiler(Compiler):
    """Compiles C to a shared object. No -ffast-math: NaN and inf must behave as IEEE says."""

    def __init__(self, cc: str):
        self.cc = cc
        self._started: list[_Build] = []  # compiler processes waiting for their source (prestart)
        self._started_lock = library_lock()
        self.compiled = False  # whether a kernel missed the disk cache and was compiled (prestart starts none before)
        self._last_batch: tuple[str, bytes] | None = None  # (key, binary) of the batch cached_kernel read last
        # -fvect-cost-model=dynamic: loops the heuristic could not upcast (a size no vector width divides) are still
        # vectorized by the compiler, with a scalar tail; -O2 alone only vectorizes loops that need no tail
        version = run_process([cc, "--version"]).stdout.splitlines()[:1]
        self.flags = ["-shared", "-fPIC", "-O2", "-march=native", "-fno-math-errno", "-ffp-contract=fast"]
        self.flags += [] if "clang" in "".join(version) else ["-fvect-cost-model=dynamic"]  # a gcc flag only
        # gcc bounds each loop's trip count from the undefined behaviour its statements could meet (signed overflow
        # of every index product), which our loops never need: their counts are constants or a THREAD chunk's bounds.
        # That walk was 15% of cc1's instructions on the CNN's conv weight-gradient kernel (490M -> 423M); 59 of the
        # 73 kernels of the cold CNN step and SmolLM2 prompt assemble byte-identical, the rest differ in the register
        # use of their outer loops
        self.flags += [] if "clang" in "".join(version) else ["-fno-aggressive-loop-optimizations"]
        # the linearizer already emits each value in the outermost loop it can, and keeps a reduce's epilogue values
        # after its loop (codegen/linearize.py): gcc's tree loop-invariant motion moved a conv's 8 bias vectors back
        # above it, beside 16 AVX-512 accumulators, and spilled in the inner loop (conv + bias + relu 64 -> 64 3x3 on
        # 32^2, one core: 13.5 -> 9.8 ms, as the plain conv); 36 of 50 bench and CNN kernels assemble the same
        self.flags += [] if "clang" in "".join(version) else ["-fno-tree-loop-im"]
        # gcc's vectorizer makes powf(x, 0.5f) a vector sqrt, NaN at -inf and -0.0 at -0.0 (C's pow: +inf, +0.0): x to a
        # tensor power of 0.5 changed with the length (the pow backward of x ** 1.5 at -inf: inf alone, NaN in 64)
        self.flags += [] if "clang" in "".join(version) else ["-fno-builtin-pow", "-fno-builtin-powf"]
        self.flags += ["-std=gnu11"]
        self.link: list[str] = []  # the linker and the libraries it gives a kernel; [] links through the driver
        self.direct: tuple[list[str], list[str]] | None = None  # (compiler proper, assembler) run without the driver
        probe_key = repr((version, cc, "openmp"))
        self.openmp = diskcache_get("cpu_openmp_v1", probe_key)
        if self.openmp is None:
            self.openmp = diskcache_put("cpu_openmp_v1", probe_key, self._links_openmp())
        if self.openmp:
            self.flags.append("-fopenmp")
        # a compiler whose auto-vectorizer miscompiles a probe kernel for this CPU (VECTORIZER_PROBES) gets the
        # instructions it misuses taken away
        cpu = _cpu_flags()
        probe_key = repr((version, cc, cpu, self.flags, "vectorizer_v4"))
        extra = diskcache_get("cpu_vectorizer_v4", probe_key)
        if extra is None:
            extra = diskcache_put("cpu_vectorizer_v4", probe_key, self._vectorizer_workaround())
        self.flags += extra
        # where VNNI had to go, kernels whose integer products are all of plain bytes get it back through a target
        # attribute (the renderer's byte_dot_target): the probe's bug needs a signed nibble made from unsigned bytes
        vnni = [t for f, t in (("avx_vnni", "avxvnni"), ("avx512_vnni", "avx512vnni")) if f in cpu.split()]
        self.byte_dot_target = ",".join(vnni) if "-mno-avxvnni" in extra else ""
        probe_key = repr((version, cc, cpu, self.flags, "lane_select_v2"))
        lanes = diskcache_get("cpu_lane_select_v2", probe_key)
        if lanes is None:
            lanes = diskcache_put("cpu_lane_select_v2", probe_key, self._lane_select_workaround())
        self.lane_select_target, more_flags = lanes
        self.flags += more_flags
        probe_key = repr((version, cc, cpu, self.flags, "half_vector_v1"))
        half = diskcache_get("cpu_half_vector_v1", probe_key)
        self.flags += (
            diskcache_put("cpu_half_vector_v1", probe_key, self._half_vector_workaround()) if half is None else half
        )
        # Ops.DP4A on int32 vectors as one vpdpbusd (VNNI): the compiler's builtin per lane count
        widths = (4, 8, 16) if "avx512vnni" in vnni else (4, 8) if vnni else ()
        clang = "clang" in "".join(version)
        self.dp4a_builtins = {
            n: f"__builtin_ia32_vpdpbusd{32 * n}" if clang else f"__builtin_ia32_vpdpbusd_v{n}si" for n in widths
        }
        if not widths and "avx2" in cpu.split():
            # no VNNI: vpmaddubsw and vpmaddwd (the renderer's DP4A_MADD), and with it gguf's DP4A layouts. Decode
            # matvec 16384 x 4096 on 2 shared cores (load ~8), lane by lane -> DP4A_MADD: Q4_1 14.9 -> 2.9 ms, Q8_0 21.4
            # -> 4.4, Q6_K 19.3 -> 5.3
            self.dp4a_builtins = {8: DP4A_MADD}
        # __builtin_shufflevector: clang's, and gcc's since 12
        major = run_process([cc, "-dumpversion"]).stdout.strip().split(".")[0]
        self.lane_shuffle = clang or (major.isdigit() and int(major) >= 12)
        # gcc's per-function attribute for code that runs too rarely to be worth optimizing (ClangRenderer.launch_attr;
        # clang has no optimize attribute)
        self.launch_attr = "" if clang else '__attribute__((optimize("O0"))) '
        # the compiler driver's link (collect2, the LTO plugin, start files, libgcc_s) took ~10 ms of each call; the
        # linker itself given the few libraries kernels use takes ~4
        probe_key = repr((version, cc, self.flags, "direct_link_v1"))
        link = diskcache_get("cpu_link_v1", probe_key)
        self.link = diskcache_put("cpu_link_v1", probe_key, self._direct_link()) if link is None else link
        probe_key = repr((version, cc, cpu, self.flags, "folded_load_v1"))
        pin = diskcache_get("cpu_folded_load_v1", probe_key)
        self.register_pin = diskcache_put("cpu_folded_load_v1", probe_key, self._folded_load()) if pin is None else pin
        # THREAD loops outlined by hand (ClangRenderer.outline_threads) where this libgomp runs one right
        probe_key = repr((version, cc, self.flags, self.link, "gomp_loop_v1"))
        gomp = diskcache_get("cpu_gomp_loop_v1", probe_key)
        self.gomp_loop = diskcache_put("cpu_gomp_loop_v1", probe_key, self._gomp_loop()) if gomp is None else gomp
        probe_key = repr((version, cc, self.flags, self.link, "direct_compile_v1"))
        direct = diskcache_get("cpu_direct_compile_v1", probe_key)
        if direct is None:
            direct = diskcache_put("cpu_direct_compile_v1", probe_key, self._direct_compile() or ())
        self.direct = direct or None
        key = hashlib.sha256(repr((version, self.flags)).encode()).hexdigest()[:16]
        super().__init__(f"compile_cpu_{key}")

    def _run(self, src: str, flags: list[str]) -> bytes:
        return self._build(src, flags, self.link)

    def _build(self, src: str, flags: list[str], link: list[str]) -> bytes:
        job = self._take_started(flags, link) or _Build(self.cc, flags, link, self._direct_for(flags, link))
        return job.finish(src)

    def _direct_for(self, flags: list[str], link: list[str]) -> tuple[list[str], list[str]] | None:
        return self.direct if flags is self.flags and link is self.link else None

    def prestart(self, n: int) -> None:
        """Compiler processes started ahead of their sources, up to `n` waiting (see _Build): a process's start (~12 ms
        of the ~20 a call costs at least) then overlaps the generation of the kernels it will build. Only after a
        build this process compiled for real: where every binary comes from the disk cache none is started."""
        with self._started_lock:
            if not self.compiled:
                return
            # (a forked child's list holds its parent's processes, which it never takes: they do not count)
            self._started = [job for job in self._started if job.owner == os.getpid()]
            while len(self._started) < n:
                self._started.append(_Build(self.cc, self.flags, self.link, self.direct))

    def _take_started(self, flags: list[str], link: list[str]) -> _Build | None:
        with self._started_lock:
            if flags is not self.flags or link is not self.link:
                return None
            while self._started:
                if (job := self._started.pop(0)).usable():
                    return job
                job.cancel()
        return None

    def _direct_link(self) -> list[str]:
        """`ld -shared` with the libraries the compiler driver would give a kernel (libm, libgcc's helpers, libgomp
        for THREAD axes), or [] where one is not found or a probe kernel linked so gives a wrong answer."""

        def ask(flag: str) -> str:
            return run_process([self.cc, flag]).stdout.strip()

        ld = shutil.which(ask("-print-prog-name=ld") or "ld")
        libs = [ask("-print-file-name=libm.so"), ask("-print-libgcc-file-name")]
        libs += [ask("-print-file-name=libgomp.so")] if self.openmp else []
        if ld is None or not all(os.path.isabs(lib) and os.path.exists(lib) for lib in libs):
            return []
        # libm and libgomp called from a kernel, on every core where OpenMP is there
        src = (
            "float exp2f(float);\nvoid lg_probe(int* restrict out) {\n"
            + ("  #pragma omp parallel for\n" if self.openmp else "")
            + "  for (int i = 0; i < 64; i++) out[i] = (int)exp2f((float)(i % 8));\n}\n"
        )
        link = [ld, *libs]
        return link if self._probe_right(src, ctypes.c_int, [], [2 ** (i % 8) for i in range(64)], [], link) else []

    def _direct_compile(self) -> tuple[list[str], list[str]] | None:
        """The compiler proper and the assembler as the driver runs them for a kernel (`gcc -###`), to be started
        without it, the assembler reading the compiler's output through a pipe: the driver's own start (its specs,
        -march=native's CPU detection) was ~2.7 ms of each call's ~18 ms of CPU. None where the driver runs anything
        else than those two (clang: one process), a kernel is linked through the driver, or the pair's shared object
        differs from the driver's byte for byte."""
        if not self.link:
            return None
        compile_only = [f for f in self.flags if f != "-shared"]
        cmd = [self.cc, *compile_only, "-c", "-x", "c", "-", "-o", "lg_probe.o", "-###"]
        listing = run_process(cmd, env={**os.environ, "LC_ALL": "C"}).stderr
        try:
            commands = [shlex.split(line) for line in listing.splitlines() if line.startswith(" ")]
        except ValueError:
            return None
        if len(commands) != 2 or os.path.basename(commands[0][0]) != "cc1":
            return None
        cc1, asm = commands
        asm_file = asm[-1]
        if "-o" not in cc1 or cc1[cc1.index("-o") + 1] != asm_file or asm[-3:-1] != ["-o", "lg_probe.o"]:
            return None
        at = cc1.index("-o")
        direct = ([*cc1[:at], "-o", "-", *cc1[at + 2 :]], asm[:-3])
        src = "float exp2f(float);\nvoid lg_probe(float* restrict out) {\n"
        src += "  for (int i = 0; i < 64; i++) out[i] = exp2f((float)(i % 8)) * 0.5f + 1.0f;\n}\n"
        try:
            by_driver = _Build(self.cc, self.flags, self.link).finish(src)
            return direct if _Build(self.cc, self.flags, self.link, direct).finish(src) == by_driver else None
        except (CompileError, OSError):
            return None

    def _folded_load(self) -> str:
        """The asm constraint "v" (an x86 vector register) where this compiler builds FOLDED_LOAD_PROBE with a
        multiply-add reading memory, else ""."""
        compile_only = [f for f in self.flags if f not in ("-shared", "-fopenmp")]
        cmd = [self.cc, *compile_only, "-S", "-x", "c", "-", "-o", "-"]
        try:
            out = run_process(cmd, input=FOLDED_LOAD_PROBE, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        code = [line.split("#")[0].split(None, 1) for line in out.stdout.splitlines()]  # (mnemonic, operands)
        folded = any(len(c) == 2 and "fmadd" in c[0] and "(" in c[1] for c in code)
        return "v" if out.returncode == 0 and folded else ""

    def _gomp_loop(self) -> bool:
        """Whether a parallel loop that calls libgomp's guided-schedule entry points itself (as an outlined THREAD
        loop does) builds, links and computes every index."""
        if not self.openmp:
            return False
        src = (
            f"{GOMP_DECL}static void lg_probe_par(void *p) {{\n  int *out = p;\n  long lo, hi;\n"
            "  while (GOMP_loop_nonmonotonic_guided_next(&lo, &hi))\n"
            "    for (long i = lo; i < hi; i++) out[i] = 3 * i;\n"
            "  GOMP_loop_end_nowait();\n}\n"
            "void lg_probe(int* restrict out) {\n"
            "  GOMP_parallel_loop_nonmonotonic_guided(lg_probe_par, out, 2, 0, 100, 1, 1, 0);\n}\n"
        )
        return self._probe_right(src, ctypes.c_int, [], [3 * i for i in range(100)], [])

    def _vectorizer_workaround(self) -> list[str]:
        """The flags (none, fewest first) under which every vectorizer probe kernel (VECTORIZER_PROBES: code gcc 12.2
        has been seen to compile wrongly for this kind of CPU) gives the right answer."""
        extra: list[str] = []
        for src, out_type, inputs, want, candidates in VECTORIZER_PROBES:
            for flags in ([], *candidates):
                if self._probe_right(src, out_type, inputs, want, [*extra, *flags]):
                    extra += flags
                    break
            else:
                return ["-fno-tree-vectorize"]
        return extra

    def _lane_select_workaround(self) -> tuple[str, list[str]]:
        """The target attribute under which LANE_SELECT_PROBE's kernel is right ("" if it is right as it is), and
        the flags every kernel then needs: none, or no vectorizer at all where no attribute helps."""
        src, out_type, inputs, want = LANE_SELECT_PROBE
        for target in ("", "no-avx512vl"):
            attr = f'__attribute__((target("{target}")))' if target else ""
            if self._probe_right(src.replace("ATTR", attr), out_type, inputs, want, []):
                return target, []
        return "", ["-fno-tree-vectorize"]

    def _half_vector_workaround(self) -> list[str]:
        """-mno-avx512fp16 where HALF_VECTOR_PROBE's kernel does not build or is wrong with AVX512-FP16 and is right
        without it; otherwise nothing (a compiler with no _Float16 at all fails both ways, and is not helped)."""
        src, out_type, inputs, want = HALF_VECTOR_PROBE
        if "avx512_fp16" not in _cpu_flags().split() or self._probe_right(src, out_type, inputs, want, []):
            return []
        return ["-mno-avx512fp16"] if self._probe_right(src, out_type, inputs, want, ["-mno-avx512fp16"]) else []

    def _probe_right(
        self,
        src: str,
        out_type: Any,
        inputs: list[tuple[Any, Any]],
        want: list[int],
        extra: list[str],
        link: list[str] | None = None,
    ) -> bool:
        """Whether the probe kernel `lg_probe`, built with `extra` (and linked by `link`), computes `want` from
        `inputs`."""
        try:
            lib = self._build(src, [*self.flags, *extra], self.link if link is None else link)
            prg = CPUProgram("lg_probe", lib, 1 + len(inputs), 0)
        except (CompileError, OSError):
            return False  # a flag this compiler or CPU does not know
        out = (out_type * len(want))()
        ins = [(ctype * len(values))(*values) for ctype, values in inputs]
        prg(ctypes.addressof(out), *(ctypes.addressof(x) for x in ins))
        return list(out) == want

    def _links_openmp(self) -> bool:
        """THREAD axes need OpenMP; clang often ships without libomp, and then kernels stay on one core."""
        try:
            src = "#include <omp.h>\nint lg_probe(void) { return omp_get_max_threads(); }\n"
            CPUProgram("lg_probe", self._run(src, [*self.flags, "-fopenmp"]))
            return True
        except (CompileError, OSError):
            return False

    def compile(self, src: str) -> bytes:
        self.compiled = True
        return self._run(src, self.flags)

    def compile_many(self, srcs: list[str]) -> bytes:
        """Kernels with distinct function names into ONE shared object: one compiler start (~50 ms) instead of one
        per kernel. Cached on disk keyed by all the sources, and each kernel's source names that binary (cached_kernel):
        which kernels share a call depends on timing (engine/realize.py's waves), so a later process batches them
        otherwise, and a cache of whole batches alone missed (the digits CNN step run again: 3 of 4 calls compiled)."""
        joined = "\n".join(srcs)
        key = hashlib.sha256(joined.encode()).hexdigest()
        if (lib := diskcache_get(f"{self.cachekey}_batch", key)) is None:
            lib = diskcache_put(f"{self.cachekey}_batch", key, self.compile(joined))
        diskcache_put_many(f"{self.cachekey}_kernel", [(src, key) for src in srcs])
        return lib

    def cached_kernel(self, src: str) -> bytes | None:
        """The binary of a batch on disk that holds the kernel of `src` (compile_many), or None. The kernels of a batch
        asked one after another get one bytes object, so they share one loaded copy (_load_kernels)."""
        if (key := diskcache_get(f"{self.cachekey}_kernel", src)) is None:
            return None
        if (last := self._last_batch) is not None and last[0] == key:
            return last[1]
        if (lib := diskcache_get(f"{self.cachekey}_batch", key)) is None:
            return None
        self._last_batch = (key, lib)
        return lib


class _Build:
    """One compiler call building a shared object in a directory of its own (in /dev/shm, with the compiler driver's
    own temporary files: in /tmp, on disk here, creating and removing them cost ~4 ms of each call's ~25): the
    compiler starts at once, reading the source from its stdin, which finish() writes. With `direct` (see
    ClangCompiler._direct_compile) the compiler proper and the assembler start without the driver, piped."""

    def __init__(self, cc: str, flags: list[str], link: list[str], direct: tuple[list[str], list[str]] | None = None):
        self.link, self.owner = link, os.getpid()
        self.tmp = tempfile.mkdtemp(prefix="lazygrad_", dir=_so_dirs[0])
        self.env = {**os.environ, "TMPDIR": self.tmp}
        self.out, self.obj = os.path.join(self.tmp, "kernel.so"), os.path.join(self.tmp, "kernel.o")
        if direct and link:
            cmds = [direct[0], [*direct[1], "-o", self.obj]]
        elif link:
            compile_only = [f for f in flags if f != "-shared"]
            cmds = [[cc, *compile_only, "-c", "-x", "c", "-", "-o", self.obj]]
        else:
            cmds = [[cc, *flags, "-x", "c", "-", "-o", self.out, "-lm"]]
        self.err = open(os.path.join(self.tmp, "messages"), "w+b")  # a file: no pipe the compiler could fill
        self.procs: list[subprocess.Popen] = []
        try:
            out = subprocess.PIPE if len(cmds) > 1 else self.err
            self.procs.append(spawn(cmds[0], stdin=subprocess.PIPE, stdout=out, stderr=self.err, env=self.env))
            if len(cmds) > 1:  # the assembler reads what the compiler writes
                first = self.procs[0]
                self.procs.append(spawn(cmds[1], stdin=first.stdout, stdout=self.err, stderr=self.err))
                first.stdout.close()  # type: ignore[union-attr]
        except BaseException:
            for proc in self.procs:
                proc.kill()
                proc.wait()
            self._remove()
            raise
        self.proc = self.procs[0]
        _builds.add(self)

    def usable(self) -> bool:
        """Started by this process (not a fork's parent) and still waiting for its source."""
        return self.owner == os.getpid() and all(proc.poll() is None for proc in self.procs)

    def finish(self, src: str) -> bytes:
        try:
            try:
                self.proc.stdin.write(src.encode())  # type: ignore[union-attr]
            except BrokenPipeError:
                pass  # the compiler died: its status and messages say why
            finally:
                with contextlib.suppress(BrokenPipeError):
                    self.proc.stdin.close()  # type: ignore[union-attr]
            for proc in self.procs:  # the compiler's error first: the assembler then read nothing
                self._check(proc.wait(), os.path.basename(proc.args[0]), "compile", src)  # type: ignore[index]
            if self.link:
                with open(self.obj, "rb") as f:
                    libs = _libraries_needed(f.read(), self.link[1:])
                cmd = [self.link[0], "-shared", "--as-needed", "-o", self.out, self.obj, *libs]
                self._check(spawn(cmd, stdout=self.err, stderr=self.err, env=self.env).wait(), cmd[0], "link", src)
            with open(self.out, "rb") as f:
                return f.read()
        finally:
            self._remove()

    def _check(self, returncode: int, tool: str, step: str, src: str) -> None:
        if returncode != 0:
            self.err.seek(0)
            msg = self.err.read().decode(errors="replace")
            raise CompileError(f"{tool} failed to {step} a kernel:\n{msg}\n--- source ---\n{src}")

    def cancel(self) -> None:
        if self.owner == os.getpid():
            for proc in self.procs:
                proc.kill()
                proc.wait()
            self._remove()

    def _remove(self) -> None:
        _builds.discard(self)
        self.err.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# compiler processes started and not finished: those still waiting for a source are ended at exit, with their
# directories (a fork's copies are left to the process that started them)
_builds: set[_Build] = set()


@atexit.register
def _cancel_started_builds() -> None:
    for job in list(_builds):
        job.cancel()


def _undefined_symbols(obj: bytes) -> set[str] | None:
    """The names an ELF64 little-endian relocatable object uses but does not define (None: not such an object)."""
    if obj[:6] != b"\x7fELF\x02\x01":
        return None
    shoff, (shentsize, shnum) = int.from_bytes(obj[0x28:0x30], "little"), struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    out: set[str] = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2 or not entsize:  # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for pos in range(offset, offset + size, entsize):
            name, info, _, shndx = struct.unpack_from("<IBBH", obj, pos)
            if name and shndx == 0 and info >> 4 in (1, 2):  # undefined, global or weak
                out.add(obj[strtab + name : obj.index(b"\0", strtab + name)].decode())
    return out


def _libraries_needed(obj: bytes, libs: list[str]) -> list[str]:
    """The libraries of `libs` (libm, libgcc, libgomp) a kernel object calls into: the linker reading libm and libgomp
    was half of each link's ~4.5 ms. A kernel without libm calls or THREAD axes needs none, one with THREAD axes
    only libgomp; anything else (a libm function, a libgcc helper) gets them all."""
    try:
        undefined = _undefined_symbols(obj)
    except (struct.error, IndexError, ValueError):  # an object this reader misreads: every library, as always
        undefined = None
    if undefined is None:
        return libs
    undefined.discard("_GLOBAL_OFFSET_TABLE_")  # made by the linker itself
    undefined.discard("lg_team")  # the thread team library (runtime/threads_cpu.py), loaded by the process
    if not undefined:
        return []
    if all(name.startswith(("GOMP_", "omp_")) for name in undefined):
        return [lib for lib in libs if "libgomp" in os.path.basename(lib)]
    return libs


# where shared objects are written to be loaded: memory (/dev/shm) where it is writable and allows code, as creating a
# file in the temporary directory took 1 ms a kernel here (0.06 ms in /dev/shm)
_so_dirs = [d for d in ("/dev/shm",) if os.access(d, os.W_OK)] + [None]


def _load_copy(lib: bytes, mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """A private copy of a shared object (every file is its own copy): a library may hold mutable globals (a CPU
    graph's tables)."""
    while True:
        where = _so_dirs[0]
        with tempfile.NamedTemporaryFile(prefix="lazygrad_", suffix=".so", delete=False, dir=where) as f:
            f.write(lib)
            path = f.name
        try:
            return ctypes.CDLL(path, mode)
        except OSError:
            if where is None:
                raise
            # mounted noexec: code cannot be mapped from there. Dropped by name: two threads failing there at once
            # would each have popped the first entry, the second one the fallback
            with contextlib.suppress(ValueError):
                _so_dirs.remove(where)
        finally:
            os.unlink(path)  # the loaded mapping stays valid after unlink


# the bytes object and the loaded copy of the last shared object loaded for kernels (see CPUProgram)
_last_loaded: tuple[bytes, ctypes.CDLL] | None = None


def _load_kernels(lib: bytes) -> ctypes.CDLL:
    """One loaded copy for the programs made one after another from the same bytes object: the kernels of one compiler
    call (engine/realize.py's batches). A copy per kernel was 15-40 ms of the cold CNN step (51 kernels in 5 objects).
    The bytes are held with their copy, so their identity is not reused while compared."""
    global _last_loaded
    if (last := _last_loaded) is not None and last[0] is lib:
        return last[1]
    loaded = _load_copy(lib)
    _last_loaded = (lib, loaded)
    return loaded


class CPUProgram:
    """One function of a compiled shared object, called with buffer pointers then variable values. Kernels hold no
    mutable globals, so the functions of one object share a loaded copy; `private`: a copy of its own, for a library
    with tables of its own (a CPU graph's driver)."""

    def __init__(self, name: str, lib: bytes, n_bufs: int = -1, n_vars: int = 0, private: bool = False):
        self.lib = _load_copy(lib) if private else _load_kernels(lib)
        self.name = name
        self.fxn = getattr(self.lib, name)
        self.fxn.restype = None
        self.bare = self.fxn  # what a launch that is not timed calls (engine/realize.py calls it straight)
        if n_bufs >= 0:
            self.fxn.argtypes = [ctypes.c_void_p] * n_bufs + [ctypes.c_int] * n_vars

    def __call__(self, *args: int, wait: bool = False) -> float | None:
        if wait:
            st = time.perf_counter()
            self.fxn(*args)
            return time.perf_counter() - st
        self.fxn(*args)
        return None


def _cpu_flags() -> str:
    """The instruction sets -march=native builds for (a probe's result holds for this CPU only)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return ""


def simd_registers() -> tuple[int, int]:
    """(bytes per vector register, number of them) of this CPU, for -march=native code."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return 16, 16
    if "avx512f" in flags:
        return 64, 32
    return (32, 16) if "avx2" in flags or "avx" in flags else (16, 16)


def masked_load_lanes() -> tuple[int, ...]:
    """float32 lanes of the vectors -march=native code may load under a mask of lanes (ClangRenderer.masked_load):
    8 lanes with AVX-512VL, or as the low half of a 16-lane load (ClangRenderer.masked_load_16); without AVX-512,
    AVX's vmaskmovps of 8 or 4 lanes (ClangRenderer.masked_load_lane_mask)."""
    flags = _cpu_flags().split()
    return (16, 8) if "avx512f" in flags else (8, 4) if "avx" in flags else ()


class CPUDevice(Compiled):
    def __init__(self, name: str):
        # every CPU device (CPU, CPU:1, ...) gets all THREADS, even where a schedule runs several of them at once
        # (engine/streams.py): the count is compiled into the kernels, which the devices share (one compiler call
        # builds them all, see compile_schedule), and not every item of a sharded schedule has a twin running beside
        # it. On 2 busy shared cores, 2 devices at once with THREADS=2 vs THREADS=1 each (bench/distributed.py, two
        # runs): MLP 9908, 9928 vs 17862, 9151 samples/s; CNN 1900, 3541 vs 1306, 4012. No split won everywhere, so
        # THREADS=cores/devices is the user's call (README)
        self.threads = getenv("THREADS", cpu_cores())
        with openmp_spin_capped():  # the compiler's probes may load libgomp
            compiler = ClangCompiler(find_c_compiler())
            renderer = ClangRenderer(self.threads, *simd_registers())
            renderer.has_threads = compiler.openmp and self.threads > 1
            if renderer.has_threads:
                load_openmp()
                team = load_team(lambda src: _load_copy(compiler.compile_cached(src), ctypes.RTLD_GLOBAL))
        renderer.byte_dot_target = compiler.byte_dot_target
        renderer.lane_select_target = compiler.lane_select_target
        renderer.dp4a_builtins = compiler.dp4a_builtins
        renderer.lane_shuffle = compiler.lane_shuffle
        renderer.outline_threads = renderer.has_threads and compiler.gomp_loop
        renderer.launch_attr = compiler.launch_attr
        renderer.register_pin = compiler.register_pin
        # an 8-lane masked load needs AVX-512VL, which kernels with lanes built from selects may have taken away: there
        # (and without VL) it is the low half of a 16-lane one, where the compiler has __builtin_shufflevector
        lanes, flags = masked_load_lanes(), _cpu_flags().split()
        renderer.masked_load_lane_mask = "avx512f" not in flags and bool(lanes)
        renderer.masked_load_16 = "avx512f" in flags and (bool(compiler.lane_select_target) or "avx512vl" not in flags)
        renderer.masked_load_lanes = (16,) if renderer.masked_load_16 and not compiler.lane_shuffle else lanes
        renderer.half_vector_cast = "f16c" in flags
        allocator = CPUAllocator()
        if renderer.has_threads:
            allocator.team_copy = (team.lg_copy, self.threads)
        super().__init__(name, allocator, renderer, compiler, CPUProgram)

    @property
    def graph(self) -> Any:
        from lazygrad.runtime.graph_cpu import CPUGraph  # imports this module's device: only when a JIT asks

        return CPUGraph

    def describe(self) -> str:
        return f"C via {self.compiler.cc}, {self.threads} cores"  # type: ignore[attr-defined]
