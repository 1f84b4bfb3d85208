"""CUDA device: kernels compiled by NVRTC, run through the driver API (libcuda), both through ctypes.

NVRTC needs no GPU, so CUDA source can be compiled on any machine (`CUDACompiler`): CI compiles every kernel of a
representative set this way, so broken CUDA code fails there even though nothing runs. NVRTC is found in the pip
package `nvidia-cuda-nvrtc` (its `nvidia/cu*/lib` folder) or on the library path."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import hashlib
import os
import threading
import weakref
from typing import Any

from lazygrad.device import Allocator, Compiled, CompileError, Compiler, DeviceUnavailable
from lazygrad.renderer.gpu import CUDARenderer

DEFAULT_ARCH = "sm_90"  # H100; CUDA_ARCH overrides it, a present GPU decides it

_vp, _sz, _int, _uint = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
_P = ctypes.POINTER
Dims = tuple[int, ...]  # a launch's size in each of up to 3 dimensions


# *** NVRTC ***


def _nvrtc_candidates() -> list[str]:
    paths: list[str] = []
    try:
        import nvidia  # the namespace package of NVIDIA's pip wheels

        for root in nvidia.__path__:
            # nvidia/cu13/lib (CUDA 13 wheels), nvidia/cuda_nvrtc/lib (CUDA 12 wheels)
            paths += sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so*")), reverse=True)
    except ImportError:
        pass
    if found := ctypes.util.find_library("nvrtc"):
        paths.append(found)
    return [p for p in paths if "builtins" not in os.path.basename(p) and ".alt." not in os.path.basename(p)]


@functools.cache
def load_nvrtc() -> ctypes.CDLL:
    """libnvrtc, with its builtins library loaded first from the same folder (NVRTC opens it by name, and a pip
    wheel's folder is not on the loader's search path)."""
    for path in _nvrtc_candidates():
        folder = os.path.dirname(path)
        for builtins in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so*"))):
            if ".alt." not in builtins:
                try:
                    ctypes.CDLL(builtins)
                except OSError:
                    pass
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcCreateProgram.argtypes = [_P(_vp), ctypes.c_char_p, ctypes.c_char_p, _int, _vp, _vp]
        lib.nvrtcCompileProgram.argtypes = [_vp, _int, _P(ctypes.c_char_p)]
        for fn in ("nvrtcGetProgramLogSize", "nvrtcGetCUBINSize", "nvrtcGetPTXSize"):
            getattr(lib, fn).argtypes = [_vp, _P(_sz)]
        for fn in ("nvrtcGetProgramLog", "nvrtcGetCUBIN", "nvrtcGetPTX"):
            getattr(lib, fn).argtypes = [_vp, ctypes.c_char_p]
        lib.nvrtcDestroyProgram.argtypes = [_P(_vp)]
        return lib
    raise DeviceUnavailable("CUDA: NVRTC (libnvrtc.so) not found; install it with `pip install nvidia-cuda-nvrtc`")


def nvrtc_version() -> tuple[int, int]:
    major, minor = _int(), _int()
    load_nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


class CUDACompiler(Compiler):
    """CUDA C++ -> a cubin for `arch` (sm_XX), or PTX for a virtual arch (compute_XX). Works without a GPU."""

    def __init__(self, arch: str | None = None):
        self.arch = arch or os.getenv("CUDA_ARCH") or DEFAULT_ARCH
        self.options = [f"--gpu-architecture={self.arch}", "--std=c++14"]
        self.nvrtc = load_nvrtc()
        key = hashlib.sha256(repr((nvrtc_version(), self.options)).encode()).hexdigest()[:16]
        super().__init__(f"compile_cuda_{key}")

    def _check(self, status: int, doing: str, log: str = "", src: str = "") -> None:
        if status != 0:
            name = self.nvrtc.nvrtcGetErrorString(status).decode()
            source = f"\n--- source ---\n{src}" if src else ""
            raise CompileError(f"NVRTC ({self.arch}) failed {doing}: {name}\n{log}{source}")

    def compile(self, src: str) -> bytes:
        nvrtc = self.nvrtc
        prog = _vp()
        status = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None)
        self._check(status, "creating a program")
        try:
            opts = (ctypes.c_char_p * len(self.options))(*[o.encode() for o in self.options])
            status = nvrtc.nvrtcCompileProgram(prog, len(self.options), opts)
            if status != 0:
                size = _sz()
                nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value)
                nvrtc.nvrtcGetProgramLog(prog, log)
                self._check(status, "to compile a kernel", log.value.decode(errors="replace"), src)
            kind = "CUBIN" if self.arch.startswith("sm_") else "PTX"
            size = _sz()
            self._check(getattr(nvrtc, f"nvrtcGet{kind}Size")(prog, ctypes.byref(size)), f"reading the {kind}")
            out = ctypes.create_string_buffer(size.value)
            self._check(getattr(nvrtc, f"nvrtcGet{kind}")(prog, out), f"reading the {kind}")
            return out.raw
        finally:
            nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))

    def compile_many(self, srcs: list[str]) -> bytes:
        """Several kernels (distinct names) as one program: one driver compile instead of one per kernel."""
        return self.compile_cached("\n".join(srcs))


# *** driver API ***

CU_DEVICE_ATTRIBUTE = {
    "max_threads_per_block": 1, "max_block_x": 2, "max_block_y": 3, "max_block_z": 4,
    "max_grid_x": 5, "max_grid_y": 6, "max_grid_z": 7, "max_shared_per_block": 8, "cc_major": 75, "cc_minor": 76,
}  # fmt: skip


class CUDAError(RuntimeError):
    """A driver call failed; the message names the error (CUDA_ERROR_OUT_OF_MEMORY, ...) and the kernel."""


@functools.cache
def load_cuda() -> ctypes.CDLL:
    path = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise DeviceUnavailable(
            "CUDA: no NVIDIA driver (libcuda.so not found), so no GPU to run on; CUDA kernels can still be compiled "
            "with lazygrad.runtime.ops_cuda.CUDACompiler"
        ) from e
    lib.cuGetErrorName.argtypes = [_int, _P(ctypes.c_char_p)]
    lib.cuDeviceGetName.argtypes = [ctypes.c_char_p, _int, _int]
    lib.cuDevicePrimaryCtxRetain.argtypes = [_P(_vp), _int]
    lib.cuCtxSetCurrent.argtypes = [_vp]
    lib.cuMemAlloc_v2.argtypes = [_P(ctypes.c_uint64), _sz]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, _vp, _sz]
    lib.cuMemcpyDtoH_v2.argtypes = [_vp, ctypes.c_uint64, _sz]
    lib.cuModuleLoadData.argtypes = [_P(_vp), _vp]
    lib.cuModuleGetFunction.argtypes = [_P(_vp), _vp, ctypes.c_char_p]
    lib.cuModuleUnload.argtypes = [_vp]
    lib.cuLaunchKernel.argtypes = [_vp, _uint, _uint, _uint, _uint, _uint, _uint, _uint, _vp, _P(_vp), _P(_vp)]
    lib.cuEventCreate.argtypes = [_P(_vp), _uint]
    lib.cuEventRecord.argtypes = [_vp, _vp]
    lib.cuEventSynchronize.argtypes = [_vp]
    lib.cuEventElapsedTime.argtypes = [_P(ctypes.c_float), _vp, _vp]
    lib.cuEventDestroy_v2.argtypes = [_vp]
    return lib


def cu_check(status: int, doing: str) -> None:
    if status != 0:
        name = ctypes.c_char_p()
        load_cuda().cuGetErrorName(status, ctypes.byref(name))
        raise CUDAError(f"{(name.value or b'CUDA error').decode()} ({status}) {doing}")


class _ForkedDriver:
    """Stands in for the driver library in a process forked from one that opened a CUDA device: the driver's state
    (contexts, memory, modules) belongs to the parent, and a call from the child fails or hangs in the driver. Every
    call raises a clear error instead, except the frees and unloads the child's collector runs on objects it inherited
    (the parent still owns what they point to)."""

    _release = frozenset({"cuMemFree_v2", "cuModuleUnload", "cuEventDestroy_v2", "cuCtxSetCurrent"})

    def __getattr__(self, name: str) -> Any:
        if name in self._release:
            return lambda *args: 0

        def refuse(*args: Any) -> int:
            raise CUDAError(
                f"CUDA ({name}): this process was forked from one that had opened a CUDA device, and the driver "
                "cannot be used after fork; start worker processes with multiprocessing's 'spawn' (or 'forkserver') "
                "start method"
            )

        return refuse


_current = threading.local()  # .context: the context made current on this thread by CUDADevice.driver
_opened_devices: weakref.WeakSet[CUDADevice] = weakref.WeakSet()


def _refuse_driver_in_forked_child() -> None:
    for dev in list(_opened_devices):
        dev.cu = _ForkedDriver()


os.register_at_fork(after_in_child=_refuse_driver_in_forked_child)


class CUDAAllocator(Allocator):
    def __init__(self, dev: CUDADevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        status = self.dev.driver().cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1))
        if status == 2:  # CUDA_ERROR_OUT_OF_MEMORY: the cache of freed blocks is dropped and the allocation retried
            raise MemoryError(f"CUDA_ERROR_OUT_OF_MEMORY on {self.dev.device_name}")
        cu_check(status, f"allocating {nbytes} bytes")
        return ptr.value

    def _free(self, ptr: int, nbytes: int) -> None:
        self.dev.driver().cuMemFree_v2(ptr)

    def offset(self, ptr: int, offset: int, nbytes: int) -> int | None:
        # kernels load a staged tile 16 bytes at a time (uint4) where the element index allows, trusting the buffer's
        # start to be 16-byte aligned as cuMemAlloc's are
        return ptr + offset if offset % 16 == 0 else None

    def copyin(self, dst: int, src: memoryview) -> None:
        if src.nbytes:
            host = bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src)
            cu_check(self.dev.driver().cuMemcpyHtoD_v2(dst, host, src.nbytes), "copying to the GPU")

    def copyout(self, dst: memoryview, src: int) -> None:
        if dst.nbytes:
            host = (ctypes.c_char * dst.nbytes).from_buffer(dst)
            cu_check(self.dev.driver().cuMemcpyDtoH_v2(host, src, dst.nbytes), "copying from the GPU")


class CUDAProgram:
    bare = None  # a launch takes a grid: no function to call with the pointers alone

    def __init__(self, dev: CUDADevice, name: str, lib: bytes, n_bufs: int = -1, n_vars: int = 0):
        self.dev, self.name, self.n_bufs = dev, name, n_bufs
        self.module, self.fxn = _vp(), _vp()
        self._image = ctypes.create_string_buffer(lib, len(lib))
        cu = dev.driver()
        cu_check(cu.cuModuleLoadData(ctypes.byref(self.module), self._image), f"loading kernel {name}")
        status = cu.cuModuleGetFunction(ctypes.byref(self.fxn), self.module, name.encode())
        cu_check(status, f"finding kernel {name}")
        # the launch parameters of the arguments met (a JIT replay launches with the same ones every step): making
        # the ctypes values took as long as the launch itself
        self._params: dict[tuple[int, ...], Any] = {}

    def _pack(self, args: tuple[int, ...]) -> Any:
        """cuLaunchKernel's kernelParams: an array of pointers to each argument's value (held by the array)."""
        if len(self._params) >= 256:
            self._params.clear()
        # buffers are device pointers, variables 32-bit ints (the kernel's `const int` parameters)
        n_bufs = len(args) if self.n_bufs < 0 else self.n_bufs
        values = [ctypes.c_uint64(a) if i < n_bufs else ctypes.c_int32(a) for i, a in enumerate(args)]
        params = (_vp * len(values))(*[ctypes.addressof(v) for v in values])
        params._values = values  # the values live as long as the array that points to them
        return params

    def __call__(
        self, *args: int, global_size: Dims = (1, 1, 1), local_size: Dims | None = (1, 1, 1), wait: bool = False
    ) -> float | None:
        cu = self.dev.driver()
        if (params := self._params.get(args)) is None:
            params = self._params[args] = self._pack(args)
        local = local_size or (1, 1, 1)
        events = (_vp(), _vp())
        if wait:
            for e in events:
                cu_check(cu.cuEventCreate(ctypes.byref(e), 0), "creating a timing event")
            cu_check(cu.cuEventRecord(events[0], None), "recording a timing event")
        status = cu.cuLaunchKernel(self.fxn, *global_size, *local, 0, None, params, None)
        cu_check(status, f"launching kernel {self.name} (grid {global_size}, block {local})")
        if not wait:
            return None
        cu_check(cu.cuEventRecord(events[1], None), "recording a timing event")
        cu_check(cu.cuEventSynchronize(events[1]), f"running kernel {self.name}")
        ms = ctypes.c_float()
        cu_check(cu.cuEventElapsedTime(ctypes.byref(ms), *events), "reading a timing event")
        for e in events:
            cu.cuEventDestroy_v2(e)
        return ms.value * 1e-3

    def __del__(self) -> None:
        try:
            self.dev.driver().cuModuleUnload(self.module)
        except Exception:
            pass  # interpreter shutdown


class CUDADevice(Compiled):
    """`CUDA` is GPU 0, `CUDA:n` GPU n. The renderer gets the GPU's limits; the compiler targets its architecture."""

    # any thread may call it (each makes the context current before its first driver call: `driver`), but the engine
    # keeps its schedule items on the caller's thread: CUDA on the device threads of engine/streams.py has not run on
    # a GPU yet
    any_thread = False

    def __init__(self, name: str):
        self.cu = load_cuda()
        status = self.cu.cuInit(0)
        if status == 100:  # CUDA_ERROR_NO_DEVICE
            raise DeviceUnavailable("CUDA: the NVIDIA driver is installed but reports no GPU")
        cu_check(status, "initializing the driver")
        count = _int()
        cu_check(self.cu.cuDeviceGetCount(ctypes.byref(count)), "counting GPUs")
        idx = int(name.partition(":")[2] or 0)
        if idx >= count.value:
            raise DeviceUnavailable(f"CUDA: asked for GPU {idx}, but the driver reports {count.value}")
        self.cu_device = _int()
        cu_check(self.cu.cuDeviceGet(ctypes.byref(self.cu_device), idx), f"opening GPU {idx}")
        self.context = _vp()
        cu_check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.cu_device), "creating a context")
        cu_check(self.cu.cuCtxSetCurrent(self.context), "making the context current")
        _current.context = self.context
        raw = ctypes.create_string_buffer(256)
        cu_check(self.cu.cuDeviceGetName(raw, 256, self.cu_device), "reading the GPU's name")
        self.device_name = raw.value.decode()
        attr = {k: self._attribute(v) for k, v in CU_DEVICE_ATTRIBUTE.items()}
        arch = os.getenv("CUDA_ARCH") or f"sm_{attr['cc_major']}{attr['cc_minor']}"
        renderer = CUDARenderer(
            global_max=(attr["max_grid_x"], attr["max_grid_y"], attr["max_grid_z"]),
            local_max=(attr["max_block_x"], attr["max_block_y"], attr["max_block_z"]),
            max_workgroup=attr["max_threads_per_block"],
            shared_max=attr["max_shared_per_block"],
            tensor_cores=CUDARenderer.tensor_cores if attr["cc_major"] >= 8 else (),  # mma.m16n8k16: sm_80 on
        )
        super().__init__(name, CUDAAllocator(self), renderer, CUDACompiler(arch), functools.partial(CUDAProgram, self))
        _opened_devices.add(self)

    def driver(self) -> Any:
        """libcuda, with this device's context current on the calling thread. A thread starts with no current
        context: a launch, allocation or copy from any thread but the one that opened the device failed with
        CUDA_ERROR_INVALID_CONTEXT (a user's worker thread, the collector freeing a buffer there, the engine's
        device threads)."""
        if getattr(_current, "context", None) is not self.context:
            cu_check(self.cu.cuCtxSetCurrent(self.context), "making the context current")
            _current.context = self.context
        return self.cu

    def _attribute(self, attr: int) -> int:
        out = _int()
        status = self.cu.cuDeviceGetAttribute(ctypes.byref(out), attr, self.cu_device)
        cu_check(status, f"reading device attribute {attr}")
        return out.value

    def describe(self) -> str:
        major, minor = nvrtc_version()
        arch = self.compiler.arch  # type: ignore[attr-defined]
        return f"CUDA {self.device_name}, compiler NVRTC {major}.{minor} for {arch}"

    def synchronize(self) -> None:
        cu_check(self.driver().cuCtxSynchronize(), "waiting for the GPU")
