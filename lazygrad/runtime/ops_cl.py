"""CL device: OpenCL through ctypes (no pyopencl). In CI it runs on PoCL, which executes real OpenCL kernels on
the CPU, so the GPU-style path (workgroups, local memory, barriers, vector types) is tested without a GPU."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import functools
import hashlib
import os
import weakref
from typing import Any

from lazygrad.device import Allocator, Compiled, CompileError, Compiler, DeviceUnavailable
from lazygrad.helpers import CACHEDB, library_lock
from lazygrad.renderer.gpu import OpenCLRenderer

try:
    import fcntl as _fcntl
except ImportError:  # Windows: only the threads of a process take turns in _BuildLock
    _fcntl = None  # type: ignore[assignment]

# error codes by name, so a failure reads `CL_OUT_OF_RESOURCES` rather than -5
CL_ERRORS = {
    -1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
    -7: "CL_PROFILING_INFO_NOT_AVAILABLE", -8: "CL_MEM_COPY_OVERLAP", -11: "CL_BUILD_PROGRAM_FAILURE",
    -12: "CL_MAP_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET",
    -14: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", -30: "CL_INVALID_VALUE",
    -31: "CL_INVALID_DEVICE_TYPE", -32: "CL_INVALID_PLATFORM", -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT",
    -35: "CL_INVALID_QUEUE_PROPERTIES", -36: "CL_INVALID_COMMAND_QUEUE", -37: "CL_INVALID_HOST_PTR",
    -38: "CL_INVALID_MEM_OBJECT", -42: "CL_INVALID_BINARY", -43: "CL_INVALID_BUILD_OPTIONS",
    -44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME",
    -47: "CL_INVALID_KERNEL_DEFINITION", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX",
    -50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS",
    -53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE",
    -56: "CL_INVALID_GLOBAL_OFFSET", -57: "CL_INVALID_EVENT_WAIT_LIST", -58: "CL_INVALID_EVENT",
    -59: "CL_INVALID_OPERATION", -61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}  # fmt: skip

CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002
CL_DEVICE_SINGLE_FP_CONFIG = 0x101B
CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT = 1 << 7
CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004
CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1005
CL_DEVICE_MAX_PARAMETER_SIZE = 0x1017
CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1019
CL_DEVICE_LOCAL_MEM_SIZE = 0x1023
CL_DEVICE_NAME = 0x102B
CL_DRIVER_VERSION = 0x102D
CL_DEVICE_VERSION = 0x102F
CL_DEVICE_EXTENSIONS = 0x1030
CL_PLATFORM_NAME = 0x0902
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE = 1
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
CL_PROGRAM_BINARY_SIZES = 0x1165
CL_PROGRAM_BINARIES = 0x1166
CL_PROGRAM_BUILD_LOG = 0x1183
CL_PROFILING_COMMAND_START = 0x1282
CL_PROFILING_COMMAND_END = 0x1283

_vp, _u32, _sz, _i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_int32
_P = ctypes.POINTER
Dims = tuple[int, ...]  # a launch's size in each of up to 3 dimensions
# name -> (return type, argument types); every call goes through these declarations
_SIGNATURES = {
    "clGetPlatformIDs": (_i32, [_u32, _P(_vp), _P(_u32)]),
    "clGetPlatformInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clGetDeviceIDs": (_i32, [_vp, ctypes.c_uint64, _u32, _P(_vp), _P(_u32)]),
    "clGetDeviceInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clCreateContext": (_vp, [_vp, _u32, _P(_vp), _vp, _vp, _P(_i32)]),
    "clCreateCommandQueue": (_vp, [_vp, _vp, ctypes.c_uint64, _P(_i32)]),
    "clCreateBuffer": (_vp, [_vp, ctypes.c_uint64, _sz, _vp, _P(_i32)]),
    "clCreateSubBuffer": (_vp, [_vp, ctypes.c_uint64, _u32, _vp, _P(_i32)]),
    "clReleaseMemObject": (_i32, [_vp]),
    "clEnqueueWriteBuffer": (_i32, [_vp, _vp, _u32, _sz, _sz, _vp, _u32, _vp, _vp]),
    "clEnqueueReadBuffer": (_i32, [_vp, _vp, _u32, _sz, _sz, _vp, _u32, _vp, _vp]),
    "clCreateProgramWithSource": (_vp, [_vp, _u32, _P(ctypes.c_char_p), _P(_sz), _P(_i32)]),
    "clCreateProgramWithBinary": (_vp, [_vp, _u32, _P(_vp), _P(_sz), _P(_vp), _P(_i32), _P(_i32)]),
    "clBuildProgram": (_i32, [_vp, _u32, _P(_vp), ctypes.c_char_p, _vp, _vp]),
    "clGetProgramBuildInfo": (_i32, [_vp, _vp, _u32, _sz, _vp, _P(_sz)]),
    "clGetProgramInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clReleaseProgram": (_i32, [_vp]),
    "clCreateKernel": (_vp, [_vp, ctypes.c_char_p, _P(_i32)]),
    "clReleaseKernel": (_i32, [_vp]),
    "clSetKernelArg": (_i32, [_vp, _u32, _sz, _vp]),
    "clEnqueueNDRangeKernel": (_i32, [_vp, _vp, _u32, _P(_sz), _P(_sz), _P(_sz), _u32, _vp, _P(_vp)]),
    "clWaitForEvents": (_i32, [_u32, _P(_vp)]),
    "clGetEventProfilingInfo": (_i32, [_vp, _u32, _sz, _vp, _P(_sz)]),
    "clReleaseEvent": (_i32, [_vp]),
    "clFinish": (_i32, [_vp]),
}


# Set at exit, after every open queue is drained: from then on OpenCL objects are left to the OS. Releasing them
# while the interpreter tears modules down raced PoCL's worker threads (a rare segfault at exit).
_exiting = False


class CLError(RuntimeError):
    """An OpenCL call failed; the message names the error code and what was being done (kernel name included)."""


def check(status: int, doing: str) -> None:
    if status != 0:
        raise CLError(f"{CL_ERRORS.get(status, f'OpenCL error {status}')} ({status}) {doing}")


class _ForkedOpenCL:
    """Stands in for the OpenCL library in a process forked from one that opened a CL device: the driver's worker
    threads (PoCL's) are the parent's, and the child's first kernel or copy waited for them forever. Every call
    raises a clear error instead, except the releases the child's collector runs on objects it inherited (the parent
    still owns them) and the drain at exit."""

    _release = frozenset({"clReleaseMemObject", "clReleaseProgram", "clReleaseKernel", "clReleaseEvent", "clFinish"})

    def __getattr__(self, name: str) -> Any:
        if name in self._release:
            return lambda *args: 0

        def refuse(*args: Any) -> int:
            raise CLError(
                f"CL ({name}): this process was forked from one that had opened an OpenCL device, and the driver "
                "cannot be used after fork; start worker processes with multiprocessing's 'spawn' (or 'forkserver') "
                "start method"
            )

        return refuse


_opened_devices: weakref.WeakSet[CLDevice] = weakref.WeakSet()


def _refuse_driver_in_forked_child() -> None:
    for dev in list(_opened_devices):
        dev.cl = _ForkedOpenCL()  # type: ignore[assignment]


os.register_at_fork(after_in_child=_refuse_driver_in_forked_child)


@functools.cache
def load_opencl() -> ctypes.CDLL:
    path = ctypes.util.find_library("OpenCL") or "libOpenCL.so.1"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise DeviceUnavailable(
            "CL: no OpenCL library (libOpenCL.so) found; install an OpenCL driver and ICD loader "
            "(e.g. Debian packages pocl-opencl-icd ocl-icd-libopencl1)"
        ) from e
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _info_bytes(getter, handle: int, param: int, extra: tuple = ()) -> bytes:  # noqa: ANN001
    size = _sz()
    check(getter(handle, *extra, param, 0, None, ctypes.byref(size)), f"querying info {param:#x}")
    buf = ctypes.create_string_buffer(size.value)
    check(getter(handle, *extra, param, size.value, buf, None), f"querying info {param:#x}")
    return buf.raw


def _info_str(getter, handle: int, param: int) -> str:  # noqa: ANN001
    return _info_bytes(getter, handle, param).rstrip(b"\0").decode(errors="replace").strip()


def list_devices(cl: ctypes.CDLL) -> list[tuple[int, int]]:
    """Every (platform, device) pair on this machine, platforms in ICD order."""
    n = _u32()
    status = cl.clGetPlatformIDs(0, None, ctypes.byref(n))
    if status == -1001 or n.value == 0:
        raise DeviceUnavailable("CL: the OpenCL loader found no platform; no OpenCL driver (ICD) is installed")
    check(status, "listing OpenCL platforms")
    platforms = (_vp * n.value)()
    check(cl.clGetPlatformIDs(n.value, platforms, None), "listing OpenCL platforms")
    out = []
    for p in platforms:
        nd = _u32()
        if cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(nd)) != 0 or nd.value == 0:
            continue
        devs = (_vp * nd.value)()
        check(cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd.value, devs, None), "listing OpenCL devices")
        out.extend((p, d) for d in devs)
    return out


class CLAllocator(Allocator):
    def __init__(self, dev: CLDevice):
        super().__init__()
        self.dev = dev
        # a sub-buffer must start at a multiple of this many bytes (the device reports bits)
        raw = _info_bytes(dev.cl.clGetDeviceInfo, dev.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN)
        self.sub_align = max(int.from_bytes(raw[:4], "little") // 8, 1)

    def _alloc(self, nbytes: int) -> int:
        err = _i32()
        # a zero-size cl_mem is invalid; empty tensors still get a distinct handle
        mem = self.dev.cl.clCreateBuffer(self.dev.context, CL_MEM_READ_WRITE, max(nbytes, 1), None, ctypes.byref(err))
        if err.value in (-4, -6, -61):
            raise MemoryError(f"clCreateBuffer: {CL_ERRORS[err.value]}")
        check(err.value, f"allocating {nbytes} bytes")
        return mem

    def _free(self, ptr: int, nbytes: int) -> None:
        if not _exiting:
            self.dev.cl.clReleaseMemObject(ptr)

    def offset(self, ptr: int, offset: int, nbytes: int) -> int | None:
        """A sub-buffer (kernels take a cl_mem, not an address): only at the device's base address alignment."""
        if offset % self.sub_align or nbytes == 0:
            return None
        region, err = (_sz * 2)(offset, nbytes), _i32()
        mem = self.dev.cl.clCreateSubBuffer(
            ptr, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, ctypes.byref(region), ctypes.byref(err)
        )
        if err.value in (-13, -30):  # CL_MISALIGNED_SUB_BUFFER_OFFSET, CL_INVALID_VALUE: read at an offset instead
            return None
        check(err.value, f"making a sub-buffer of {nbytes} bytes at byte {offset}")
        return mem

    def free_offset(self, ptr: int) -> None:
        self._free(ptr, 0)

    def copyin(self, dst: int, src: memoryview) -> None:
        if src.nbytes:
            host = bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src)
            status = self.dev.cl.clEnqueueWriteBuffer(self.dev.queue, dst, 1, 0, src.nbytes, host, 0, None, None)
            check(status, "copying to the device")

    def copyout(self, dst: memoryview, src: int) -> None:
        if dst.nbytes:
            host = (ctypes.c_char * dst.nbytes).from_buffer(dst)
            status = self.dev.cl.clEnqueueReadBuffer(self.dev.queue, src, 1, 0, dst.nbytes, host, 0, None, None)
            check(status, "copying from the device")


class _BuildLock:
    """Held around every program build. PoCL keeps the programs it builds in a cache directory that every process
    shares (~/.cache/pocl, POCL_CACHE_DIR); two processes building the same program at once read each other's
    half-written entries and abort (an assertion in pocl_binary.c) or crash reading the binary: seen with two MPI ranks
    and a third process compiling the same kernels on a cold cache. So builds take turns: the threads of this process
    on a lock, the processes on an flock of a file beside lazygrad's own cache (without a writable cache directory,
    or without fcntl, only the threads take turns)."""

    def __init__(self, path: str):
        self.path, self.threads, self.fd = path, library_lock(), None

    def __enter__(self) -> None:
        self.threads.acquire()
        try:
            if self.fd is None:
                with contextlib.suppress(OSError):
                    os.makedirs(os.path.dirname(self.path), exist_ok=True)
                    self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if self.fd is not None and _fcntl is not None:
                _fcntl.flock(self.fd, _fcntl.LOCK_EX)
        except BaseException:
            self.threads.release()
            raise

    def __exit__(self, *exc) -> None:
        try:
            if self.fd is not None and _fcntl is not None:
                _fcntl.flock(self.fd, _fcntl.LOCK_UN)
        finally:
            self.threads.release()


_build_lock = _BuildLock(os.path.join(os.path.dirname(os.path.abspath(CACHEDB)), "cl_build.lock"))


class CLCompiler(Compiler):
    """OpenCL C -> the driver's program binary (cached on disk like every compiler's output)."""

    def __init__(self, dev: CLDevice):
        self.dev = dev
        self.options = b"-cl-std=CL1.2 -w"  # -w: warnings about generated code are noise to a user (PoCL prints them)
        # float32 / and sqrt correctly rounded, as torch's (OpenCL otherwise allows 2.5 and 3 ulps), where the device
        # can (the option is only defined where it says so)
        fp_config = _info_bytes(dev.cl.clGetDeviceInfo, dev.device, CL_DEVICE_SINGLE_FP_CONFIG)
        if int.from_bytes(fp_config[:8], "little") & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT:
            self.options += b" -cl-fp32-correctly-rounded-divide-sqrt"
        key = hashlib.sha256(repr((dev.device_name, dev.driver_version, self.options)).encode()).hexdigest()[:16]
        super().__init__(f"compile_cl_{key}")

    def compile(self, src: str) -> bytes:
        cl, dev = self.dev.cl, self.dev
        err = _i32()
        source = ctypes.c_char_p(src.encode())
        prog = cl.clCreateProgramWithSource(dev.context, 1, ctypes.byref(source), None, ctypes.byref(err))
        check(err.value, "creating a program")
        try:
            with _build_lock:
                return self._build(prog, src)
        finally:
            cl.clReleaseProgram(prog)

    def _build(self, prog: int, src: str) -> bytes:
        """Builds `prog` and reads its binary (under _build_lock)."""
        cl, dev = self.dev.cl, self.dev
        status = cl.clBuildProgram(prog, 1, ctypes.byref(_vp(dev.device)), self.options, None, None)
        if status != 0:
            raw_log = _info_bytes(cl.clGetProgramBuildInfo, prog, CL_PROGRAM_BUILD_LOG, (dev.device,))
            log = raw_log.rstrip(b"\0").decode(errors="replace")
            what = f"OpenCL ({dev.device_name}) failed to compile a kernel: {CL_ERRORS.get(status, status)}"
            raise CompileError(f"{what}\n{log}\n--- source ---\n{src}")
        size = _sz()
        status = cl.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size), None)
        check(status, "reading the program binary")
        binary = ctypes.create_string_buffer(size.value)
        ptrs = (_vp * 1)(ctypes.cast(binary, _vp))
        status = cl.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None)
        check(status, "reading the program binary")
        return binary.raw

    def compile_many(self, srcs: list[str]) -> bytes:
        """Several kernels (distinct names) as one program: one driver compile instead of one per kernel."""
        return self.compile_cached("\n".join(srcs))


class CLProgram:
    """One kernel of a program binary, launched as a grid of `global_size` workgroups of `local_size` threads."""

    bare = None  # a launch takes a grid: no function to call with the pointers alone

    def __init__(self, dev: CLDevice, name: str, lib: bytes, n_bufs: int = -1, n_vars: int = 0):
        self.dev, self.name, self.n_bufs = dev, name, n_bufs
        cl = dev.cl
        err, binary_status = _i32(), _i32()
        binary = ctypes.create_string_buffer(lib, len(lib))
        with _build_lock:  # loading a binary builds it too: PoCL reads and writes its cache
            self.program = cl.clCreateProgramWithBinary(
                dev.context, 1, ctypes.byref(_vp(dev.device)), ctypes.byref(_sz(len(lib))),
                ctypes.byref(_vp(ctypes.addressof(binary))), ctypes.byref(binary_status), ctypes.byref(err),
            )  # fmt: skip
            check(err.value or binary_status.value, f"loading the binary of kernel {name}")
            device = ctypes.byref(_vp(dev.device))
            check(cl.clBuildProgram(self.program, 1, device, None, None, None), f"linking kernel {name}")
        self.kernel = cl.clCreateKernel(self.program, name.encode(), ctypes.byref(err))
        check(err.value, f"creating kernel {name}")
        # a kernel's arguments are state of the cl_kernel object until the launch copies them: two threads launching
        # one program (TinyJit replays in threads share the compiled kernels) set each other's arguments between the
        # sets and the enqueue (4 threads x 100 replays: 22-43 results computed from another thread's buffers), and
        # clSetKernelArg itself is the one OpenCL call the standard does not make thread-safe
        self.launch_lock = library_lock()

    def __call__(
        self, *args: int, global_size: Dims = (1, 1, 1), local_size: Dims | None = (1, 1, 1), wait: bool = False
    ) -> float | None:
        cl = self.dev.cl
        local = local_size or (1,) * len(global_size)
        gws = (_sz * len(global_size))(*[g * lo for g, lo in zip(global_size, local)])
        lws = (_sz * len(local))(*local) if local_size is not None else None
        event = _vp() if wait else None
        out_event = ctypes.byref(event) if wait else None
        with self.launch_lock:
            for i, a in enumerate(args):
                arg = _vp(a) if self.n_bufs < 0 or i < self.n_bufs else _i32(a)
                status = cl.clSetKernelArg(self.kernel, i, ctypes.sizeof(arg), ctypes.byref(arg))
                check(status, f"setting argument {i} of kernel {self.name}")
            status = cl.clEnqueueNDRangeKernel(
                self.dev.queue, self.kernel, len(gws), None, gws, lws, 0, None, out_event
            )
        check(status, f"launching kernel {self.name} (global {tuple(gws)}, local {local_size})")
        if not wait:
            return None
        assert event is not None
        check(cl.clWaitForEvents(1, ctypes.byref(event)), f"waiting for kernel {self.name}")
        times = []
        for param in (CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END):
            t = ctypes.c_uint64()
            check(cl.clGetEventProfilingInfo(event, param, 8, ctypes.byref(t), None), f"timing kernel {self.name}")
            times.append(t.value)
        cl.clReleaseEvent(event)
        return (times[1] - times[0]) * 1e-9

    def __del__(self) -> None:
        if not _exiting:
            self.dev.cl.clReleaseKernel(self.kernel)
            self.dev.cl.clReleaseProgram(self.program)


class CLDevice(Compiled):
    """`CL` is the first OpenCL device of the first platform that has one; `CL:n` the n-th over all platforms."""

    def __init__(self, name: str):
        self.cl = load_opencl()
        devices = list_devices(self.cl)
        idx = int(name.partition(":")[2] or 0)
        if idx >= len(devices):
            raise DeviceUnavailable(f"CL: asked for OpenCL device {idx}, but this machine has {len(devices)}")
        self.platform, self.device = devices[idx]
        self.device_name = _info_str(self.cl.clGetDeviceInfo, self.device, CL_DEVICE_NAME)
        self.driver_version = _info_str(self.cl.clGetDeviceInfo, self.device, CL_DRIVER_VERSION)
        self.platform_name = _info_str(self.cl.clGetPlatformInfo, self.platform, CL_PLATFORM_NAME)
        self.extensions = set(_info_str(self.cl.clGetDeviceInfo, self.device, CL_DEVICE_EXTENSIONS).split())
        err = _i32()
        self.context = self.cl.clCreateContext(None, 1, ctypes.byref(_vp(self.device)), None, None, ctypes.byref(err))
        check(err.value, f"creating a context on {self.device_name}")
        # profiling on: DEBUG=2 reads each kernel's time from its event
        queue_props = CL_QUEUE_PROFILING_ENABLE
        self.queue = self.cl.clCreateCommandQueue(self.context, self.device, queue_props, ctypes.byref(err))
        check(err.value, f"creating a command queue on {self.device_name}")
        atexit.register(self._drain_at_exit)
        _opened_devices.add(self)
        renderer = OpenCLRenderer(**self._limits())
        super().__init__(name, CLAllocator(self), renderer, CLCompiler(self), functools.partial(CLProgram, self))

    def _limits(self) -> dict:
        """What codegen must respect on this device: workgroup sizes, local memory, half arithmetic."""
        get = self.cl.clGetDeviceInfo
        n = ctypes.sizeof(_sz)
        max_wg = int.from_bytes(_info_bytes(get, self.device, CL_DEVICE_MAX_WORK_GROUP_SIZE)[:n], "little")
        raw = _info_bytes(get, self.device, CL_DEVICE_MAX_WORK_ITEM_SIZES)
        item_sizes = [int.from_bytes(raw[i : i + n], "little") for i in range(0, len(raw), n)][:3]
        local_mem = int.from_bytes(_info_bytes(get, self.device, CL_DEVICE_LOCAL_MEM_SIZE)[:8], "little")
        param_bytes = int.from_bytes(_info_bytes(get, self.device, CL_DEVICE_MAX_PARAMETER_SIZE)[:n], "little")
        return {
            "max_buffers": param_bytes // 8 - 16,  # pointers, with room kept for the int arguments
            "local_max": tuple(min(s, max_wg) for s in item_sizes),
            "max_workgroup": max_wg,
            "shared_max": local_mem,
            "has_half": "cl_khr_fp16" in self.extensions,
            "has_double": "cl_khr_fp64" in self.extensions,
        }

    def describe(self) -> str:
        where = f"{self.platform_name}, driver {self.driver_version}"
        return f"OpenCL {self.device_name} ({where}), compiler: the driver's OpenCL C"

    def synchronize(self) -> None:
        check(self.cl.clFinish(self.queue), "waiting for the command queue")

    def _drain_at_exit(self) -> None:
        global _exiting
        self.cl.clFinish(self.queue)
        _exiting = True
