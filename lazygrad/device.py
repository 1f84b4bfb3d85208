"""Devices: a registry by name, and the pieces every device is made of (allocator, compiler, program)."""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Callable

from lazygrad.dtype import DType
from lazygrad.helpers import DEBUG, GlobalCounters, diskcache_get, diskcache_put, getenv

# the order devices are tried in when none is named
DEVICE_PREFERENCE = ("CPU",)
KNOWN_DEVICES = ("CPU", "CL", "CUDA", "METAL", "PYTHON")


class DeviceUnavailable(RuntimeError):
    """Raised when a named device cannot be opened (no driver, no library, no hardware)."""


class _Device:
    """`Device["CPU"]` opens (once) and returns the device; `Device.DEFAULT` is the one tensors go to."""

    @functools.cache
    def __getitem__(self, name: str) -> Compiled:
        name = self.canonicalize(name)
        module_name = f"lazygrad.runtime.ops_{name.split(':')[0].lower()}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise DeviceUnavailable(f"device {name!r} has no runtime ({module_name} not found)") from e
        dev = getattr(module, f"{name.split(':')[0]}Device")(name)
        if DEBUG >= 1:
            print(f"opened device {name}: {dev.describe()}")
        return dev

    @staticmethod
    def canonicalize(name: str | None) -> str:
        if name is None:
            return Device.DEFAULT
        base, _, idx = name.upper().partition(":")
        if base not in KNOWN_DEVICES:
            raise ValueError(f"unknown device {name!r}; known devices: {', '.join(KNOWN_DEVICES)}")
        return base if idx in ("", "0") else f"{base}:{idx}"

    @functools.cached_property
    def DEFAULT(self) -> str:
        if (dev := os.getenv("DEV")) or (dev := os.getenv("DEVICE")):
            return self.canonicalize(dev)
        for d in KNOWN_DEVICES:
            if getenv(d) == 1:
                return d
        return DEVICE_PREFERENCE[0]


Device = _Device()


# *** buffers ***


class Buffer:
    """`size` elements of `dtype` on `device`. Memory is allocated on first use and freed with the object."""

    def __init__(self, device: str, size: int, dtype: DType, external: Any = None, external_ptr: int | None = None):
        self.device, self.size, self.dtype = device, size, dtype
        self._ptr: int | None = None
        self._external = external  # keeps a borrowed host array (numpy) alive while we point into it
        # set by Tensor.schedule for the buffers its kernels write, cleared by run_schedule once they ran: reading a
        # buffer whose kernels never ran is an error, not uninitialised memory
        self.pending_write = False
        if external_ptr is not None:
            self._ptr = external_ptr

    def __repr__(self) -> str:
        return f"<buf {self.device} {self.dtype} size={self.size}{'' if self.is_allocated else ' unallocated'}>"

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_allocated(self) -> bool:
        return self._ptr is not None

    @property
    def allocator(self) -> Allocator:
        return Device[self.device].allocator

    def ensure_allocated(self) -> Buffer:
        if self._ptr is None:
            self._ptr = self.allocator.alloc(self.nbytes)
            GlobalCounters.mem_used += self.nbytes
            GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)
        return self

    @property
    def ptr(self) -> int:
        return self.ensure_allocated()._ptr  # type: ignore[return-value]

    def alias(self) -> Buffer:
        """Another Buffer object for the same memory (a new identity for the graph, no copy)."""
        return Buffer(self.device, self.size, self.dtype, external=self, external_ptr=self.ptr)

    def copyin(self, src: memoryview) -> Buffer:
        if src.nbytes != self.nbytes:
            raise ValueError(f"copyin of {src.nbytes} bytes into a buffer of {self.nbytes} bytes")
        self.allocator.copyin(self.ptr, src)
        return self

    def copyout(self, dst: memoryview) -> memoryview:
        if dst.nbytes != self.nbytes:
            raise ValueError(f"copyout of a buffer of {self.nbytes} bytes into {dst.nbytes} bytes")
        self.allocator.copyout(dst, self.ptr)
        return dst

    def host_view(self) -> memoryview | None:
        """The buffer's own memory as a writable byte memoryview where the device keeps it in host memory (CPU,
        PYTHON), None where it does not (copy with `as_bytes`/`copyin` then). Keep the Buffer alive while using it."""
        return self.allocator.host_view(self.ptr, self.nbytes)

    def as_bytes(self) -> memoryview:
        out = memoryview(bytearray(self.nbytes))
        return self.copyout(out) if self.nbytes else out

    def __del__(self) -> None:
        if self._ptr is not None and self._external is None:
            try:
                self.allocator.free(self._ptr, self.nbytes)
                GlobalCounters.mem_used -= self.nbytes
            except Exception:
                pass  # interpreter shutdown


class Allocator:
    """Device memory. Freed blocks are kept per size and handed out again: fresh memory costs page faults
    (CPU) or driver calls (GPU) on every allocation, and the same sizes come back step after step."""

    def __init__(self, cache_limit: int = getenv("ALLOC_CACHE_MB", 1024) << 20):
        self.cache: dict[int, list[int]] = {}
        self.cached_bytes, self.cache_limit = 0, cache_limit

    def alloc(self, nbytes: int) -> int:
        if blocks := self.cache.get(nbytes):
            self.cached_bytes -= nbytes
            return blocks.pop()
        try:
            return self._alloc(nbytes)
        except MemoryError:
            self.free_cache()
            return self._alloc(nbytes)

    def free(self, ptr: int, nbytes: int) -> None:
        if self.cached_bytes + nbytes <= self.cache_limit:
            self.cache.setdefault(nbytes, []).append(ptr)
            self.cached_bytes += nbytes
        else:
            self._free(ptr, nbytes)

    def free_cache(self) -> None:
        for nbytes, blocks in self.cache.items():
            for ptr in blocks:
                self._free(ptr, nbytes)
        self.cache.clear()
        self.cached_bytes = 0

    def _alloc(self, nbytes: int) -> int:
        raise NotImplementedError

    def _free(self, ptr: int, nbytes: int) -> None:
        raise NotImplementedError

    def copyin(self, dst: int, src: memoryview) -> None:
        raise NotImplementedError

    def copyout(self, dst: memoryview, src: int) -> None:
        raise NotImplementedError

    def host_view(self, ptr: int, nbytes: int) -> memoryview | None:
        """`nbytes` at `ptr` as a writable memoryview, for devices whose memory the host addresses directly."""
        return None


# *** compilers: source -> binary, cached on disk by (compiler key, source) ***


class CompileError(RuntimeError):
    pass


class Compiler:
    def __init__(self, cachekey: str | None):
        self.cachekey = cachekey

    def compile(self, src: str) -> bytes:
        raise NotImplementedError

    def compile_cached(self, src: str) -> bytes:
        if self.cachekey is not None and (lib := diskcache_get(self.cachekey, src)) is not None:
            return lib
        lib = self.compile(src)
        if self.cachekey is not None:
            diskcache_put(self.cachekey, src, lib)
        return lib


class Compiled:
    """A device: its allocator, compiler, program loader and renderer (which codegen asks for capabilities)."""

    def __init__(self, name: str, allocator: Allocator, renderer: Any, compiler: Compiler, runtime: Callable[..., Any]):
        self.name, self.allocator, self.renderer, self.compiler, self.runtime = (
            name,
            allocator,
            renderer,
            compiler,
            runtime,
        )

    def describe(self) -> str:
        return f"{type(self.renderer).__name__}, compiler {self.compiler.cachekey}"

    def synchronize(self) -> None:
        pass
