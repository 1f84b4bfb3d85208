"""CPU device: C compiled by the system compiler into a shared object, loaded and called with ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import time

from lazygrad.device import Allocator, Compiled, CompileError, Compiler, DeviceUnavailable
from lazygrad.helpers import getenv
from lazygrad.renderer.cstyle import ClangRenderer

_libc = ctypes.CDLL(None)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

ALIGNMENT = 64  # one cache line; also the widest (AVX-512) vector


class CPUAllocator(Allocator):
    def _alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        if _libc.posix_memalign(ctypes.byref(ptr), ALIGNMENT, max(nbytes, 1)) != 0:
            raise MemoryError(f"CPU: cannot allocate {nbytes} bytes")
        return ptr.value  # type: ignore[return-value]

    def _free(self, ptr: int, nbytes: int) -> None:
        _libc.free(ptr)

    def copyin(self, dst: int, src: memoryview) -> None:
        if src.nbytes:
            ctypes.memmove(dst, (ctypes.c_char * src.nbytes).from_buffer(src) if not src.readonly else bytes(src), src.nbytes)

    def copyout(self, dst: memoryview, src: int) -> None:
        if dst.nbytes:
            ctypes.memmove((ctypes.c_char * dst.nbytes).from_buffer(dst), src, dst.nbytes)


def find_c_compiler() -> str:
    if cc := os.getenv("CC"):
        if shutil.which(cc) is None:
            raise DeviceUnavailable(f"CPU: the compiler named by CC={cc!r} was not found on PATH")
        return cc
    for cc in ("clang", "gcc", "cc"):
        if shutil.which(cc):
            return cc
    raise DeviceUnavailable("CPU: no C compiler found; install gcc or clang, or name one with CC=...")


class ClangCompiler(Compiler):
    """Compiles C to a shared object. No -ffast-math: NaN and inf must behave as IEEE says."""

    def __init__(self, cc: str):
        self.cc = cc
        self.flags = ["-shared", "-fPIC", "-O2", "-march=native", "-fno-math-errno", "-ffp-contract=fast", "-std=gnu11"]
        version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
        key = hashlib.sha256(repr((version, self.flags)).encode()).hexdigest()[:16]
        super().__init__(f"compile_cpu_{key}")

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="lazygrad_") as tmp:
            out = os.path.join(tmp, "kernel.so")
            proc = subprocess.run([self.cc, *self.flags, "-x", "c", "-", "-o", out, "-lm"], input=src, capture_output=True, text=True)
            if proc.returncode != 0:
                raise CompileError(f"{self.cc} failed to compile a kernel:\n{proc.stderr}\n--- source ---\n{src}")
            with open(out, "rb") as f:
                return f.read()


class CPUProgram:
    """One function of a compiled shared object, called with buffer pointers then variable values."""

    def __init__(self, name: str, lib: bytes, n_bufs: int = -1, n_vars: int = 0):
        with tempfile.NamedTemporaryFile(prefix="lazygrad_", suffix=".so", delete=False) as f:
            f.write(lib)
            path = f.name
        try:
            self.lib = ctypes.CDLL(path)
        finally:
            os.unlink(path)  # the loaded mapping stays valid after unlink
        self.name = name
        self.fxn = getattr(self.lib, name)
        self.fxn.restype = None
        if n_bufs >= 0:
            self.fxn.argtypes = [ctypes.c_void_p] * n_bufs + [ctypes.c_int] * n_vars

    def __call__(self, *args: int, wait: bool = False) -> float | None:
        if wait:
            st = time.perf_counter()
            self.fxn(*args)
            return time.perf_counter() - st
        self.fxn(*args)
        return None


class CPUDevice(Compiled):
    def __init__(self, name: str):
        super().__init__(name, CPUAllocator(), ClangRenderer(), ClangCompiler(find_c_compiler()), CPUProgram)
        self.threads = getenv("THREADS", os.cpu_count() or 1)

    def describe(self) -> str:
        return f"C via {self.compiler.cc}, {self.threads} cores"  # type: ignore[attr-defined]
