"""Devices: a registry by name, and the pieces every device is made of (allocator, compiler, program)."""

from __future__ import annotations

import functools
import importlib
import itertools
import os
from typing import Any, Callable

from lazygrad.dtype import DType
from lazygrad.helpers import (
    DEBUG,
    DICT_ON_FIRST_USE_RACES,
    GlobalCounters,
    check_host_allocation,
    diskcache_get,
    diskcache_put,
    format_bytes,
    getenv,
    library_lock,
)

# the order devices are tried in when none is named
DEVICE_PREFERENCE = ("CPU",)
KNOWN_DEVICES = ("CPU", "CL", "CUDA", "METAL", "PYTHON", "DISK")


class DeviceUnavailable(RuntimeError):
    """Raised when a named device cannot be opened (no driver, no library, no hardware)."""


class UnknownDevice(ValueError, RuntimeError):
    """A device name no runtime knows: a ValueError, and the RuntimeError torch raises for it."""


class DeviceName(str):
    """A device's name ("CPU", "CUDA:1") with torch.device's `type` ("cpu", "cuda") and `index` (None, 1): what
    `Tensor.device` gives, so torch code's `x.device.type == "cuda"` runs. It is the string in every other use."""

    __slots__ = ()

    def __new__(cls, type: str, index: int | None = None) -> DeviceName:
        """torch.device's forms: DeviceName("cuda"), ("cuda:1"), ("cuda", 1); the name lazygrad gives that device."""
        return device_name(Device.canonicalize(type if index is None else f"{type}:{index}"))

    @property
    def type(self) -> str:
        return self.partition(":")[0].lower()

    @property
    def index(self) -> int | None:
        idx = self.partition(":")[2]
        return int(idx) if idx.isdigit() else None


_device_names: dict[str, DeviceName] = {}


def device_name(name: Any) -> Any:
    """`name` as a DeviceName (one object per name); a sharded tensor's tuple of devices as it is."""
    if type(name) is not str:
        return name
    if (out := _device_names.get(name)) is None:
        out = _device_names[name] = str.__new__(DeviceName, name)
    return out


class _Device:
    """`Device["CPU"]` opens (once) and returns the device; `Device.DEFAULT` is the one tensors go to."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._lock = library_lock(reentrant=True)  # two threads asking for a new device must not open it twice
        self.multi_seen = False  # whether a tuple of devices (a sharded tensor) was ever named in this process

    def __getitem__(self, name: str) -> Compiled:
        if (dev := self._opened.get(name)) is None:
            with self._lock:
                canonical = self.canonicalize(name)  # "cpu" and "CPU" are one device
                if (dev := self._opened.get(canonical)) is None:
                    dev = self._open(canonical)
                self._opened[name] = self._opened[canonical] = dev
        return dev

    def _open(self, name: str) -> Compiled:
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
    def canonicalize(name: str | tuple[str, ...] | None) -> Any:
        if name is None:
            return Device.DEFAULT
        if isinstance(name, tuple):  # the devices of a sharded tensor (lazygrad/schedule/multi.py)
            Device.multi_seen = True  # from now on schedules look for sharded nodes
            return tuple(Device.canonicalize(d) for d in name)
        base, _, idx = name.partition(":")
        base = base.upper()
        if base == "DISK" and idx:  # a file path: its case matters
            return f"DISK:{idx}"
        idx = idx.upper()
        if base not in KNOWN_DEVICES:
            raise UnknownDevice(f"unknown device {name!r}; known devices: {', '.join(KNOWN_DEVICES)}")
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


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
    """Whether tensors of `dtype` can be computed on `device` (the default device if None)."""
    try:
        return Device[Device.canonicalize(device)].renderer.dtype_unsupported(dtype) is None
    except DeviceUnavailable:
        return False


# *** buffers ***

# a Buffer's `serial` orders buffers (a trace tells the buffers it made from those it found). A module-level counter,
# not a class attribute: assigning to a class attribute invalidates the type's attribute caches, and every attribute
# read of every Buffer then missed the interpreter's specialisation (next() is also atomic across threads)
_buffer_serials = itertools.count()


# a serial number above every Buffer made so far (and below those made from now on): a C call, asked on every lone
# realize whose template recycles its last value's buffer (kernelize._Template.output gives it a new serial)
buffers_made = _buffer_serials.__next__


def _rebuilt_buffer(device: str, size: int, dtype: DType, shape: tuple[int, ...], data: bytes | None) -> Buffer:
    out = Buffer(device, size, dtype, shape=shape)
    return out if data is None else out.copyin(memoryview(data))


class Buffer:
    """`size` elements of `dtype` on `device`. Memory is allocated on first use and freed with the object.
    `shape`, the shape of the tensor it was made for, only serves error messages.

    A buffer may show memory another Buffer owns (`alias`, `view`): `memory` is that owner and `offset` the byte at
    which this one starts in it, as torch's storage offset. Kernels take such a buffer as any other (its own start
    address), so a slice of a realized tensor at any offset runs the same compiled programs."""

    def __init__(
        self,
        device: str,
        size: int,
        dtype: DType,
        external: Any = None,
        external_ptr: int | None = None,
        shape: tuple[int, ...] | None = None,
    ):
        self.device, self.size, self.dtype = device, size, dtype
        self.shape = shape if shape is not None else (size,)
        self.serial = next(_buffer_serials)
        self._ptr: int | None = None
        self._external = external  # keeps a borrowed host array (numpy) alive while we point into it
        # set by Tensor.schedule for the buffers its kernels write, cleared by run_schedule once they ran: reading a
        # buffer whose kernels never ran is an error, not uninitialised memory
        self.pending_write = False
        self.offset = 0  # bytes into `memory` where this buffer starts (set by `view`)
        self.part = False  # whether it shows only part of `memory` (a view at an offset, or shorter)
        if external_ptr is not None:
            self._ptr = external_ptr
        if DICT_ON_FIRST_USE_RACES:  # the frontend files tensors in a memory's __dict__, from any thread
            self.__dict__

    def __repr__(self) -> str:
        return f"<buf {self.device} {self.dtype} size={self.size}{'' if self.is_allocated else ' unallocated'}>"

    def __reduce__(self) -> tuple:
        # pickle and copy.deepcopy: a buffer of its own holding a copy of the bytes. The default copied the address:
        # two Buffers of one memory, each freeing it (the allocator's cache then handed the block to two new buffers)
        data = bytes(self.as_bytes()) if self.is_allocated and not self.pending_write else None
        return _rebuilt_buffer, (self.device, self.size, self.dtype, self.shape, data)

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
            nbytes = self.size * self.dtype.itemsize
            # (the opened device looked up inline: Device[...] is a Python call, on every new buffer of every realize)
            allocator = (Device._opened.get(self.device) or Device[self.device]).allocator
            # under the allocator's lock: two threads allocating one buffer each took a block (one leaked, and what
            # one thread copied into its block was lost), and the counters' updates from threads were lost. The lock
            # taken once (_take, not alloc): each `with` of an RLock parses its arguments, ~0.3 us, on every new buffer
            with allocator.lock:
                if self._ptr is not None:
                    return self
                try:
                    self._ptr = allocator._take(nbytes)
                except MemoryError as e:
                    raise self._out_of_memory(f"on {self.device}", e) from e
                GlobalCounters.mem_used += nbytes
                if GlobalCounters.mem_used > GlobalCounters.mem_peak:
                    GlobalCounters.mem_peak = GlobalCounters.mem_used
        return self

    @property
    def ptr(self) -> int:
        # read for every argument of every launch: an allocated buffer answers without a call
        ptr = self._ptr
        return ptr if ptr is not None else self.ensure_allocated()._ptr  # type: ignore[return-value]

    @property
    def memory(self) -> Buffer:
        """The Buffer that owns this one's memory: itself, or for an alias the buffer it aliases. Two buffers with
        the same `memory` are the same bytes: a write through one changes what the other reads."""
        return self._external if isinstance(self._external, Buffer) else self

    def alias(self) -> Buffer:
        """Another Buffer object for the same memory (a new identity for the graph, no copy). It keeps the owner of
        the memory alive, not self: every assign().realize() aliases the last alias, and a chain of them would keep
        one Buffer per step alive."""
        if self.offset:
            out = self.memory.view(self.offset // self.dtype.itemsize, self.size, self.shape)
            assert out is not None, "a view's device addressed its offset once: it does again"
            return out
        # (memory and ptr inline: an optimizer step aliases every parameter and state it writes)
        memory = self._external if isinstance(self._external, Buffer) else self
        ptr = self._ptr if self._ptr is not None else self.ensure_allocated()._ptr
        out = Buffer(self.device, self.size, self.dtype, memory, ptr, self.shape)
        out.part = self.part
        return out

    def view(self, start: int, size: int, shape: tuple[int, ...] | None = None) -> Buffer | None:
        """`size` elements from element `start` of this buffer on, as a Buffer of its own over the same memory (no
        copy: a write through either shows in both), or None where the device cannot address memory at that offset
        (an OpenCL sub-buffer needs the device's base address alignment; DISK and PYTHON take no offsets)."""
        mem = self.memory
        offset = self.offset + start * self.dtype.itemsize
        ptr = mem.allocator.offset(mem.ptr, offset, size * self.dtype.itemsize) if offset else mem.ptr
        if ptr is None:
            return None
        out = Buffer(self.device, size, self.dtype, external=mem, external_ptr=ptr, shape=shape)
        out.offset, out.part = offset, offset != 0 or out.nbytes != mem.nbytes
        return out

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
        try:
            check_host_allocation(self.nbytes)
            out = memoryview(bytearray(self.nbytes))
        except MemoryError as e:
            raise self._out_of_memory(f"in host memory to read it from {self.device}", e) from e
        return self.copyout(out) if self.nbytes else out

    def _out_of_memory(self, where: str, e: MemoryError) -> MemoryError:
        why = f": {e}" if str(e) else ""
        return MemoryError(
            f"cannot allocate {format_bytes(self.nbytes)} for a {self.dtype.name} tensor of shape {self.shape} "
            f"{where}{why}"
        )

    def __del__(self) -> None:
        if self._ptr is not None and self._external is None:
            try:
                nbytes = self.size * self.dtype.itemsize
                allocator = (Device._opened.get(self.device) or Device[self.device]).allocator
                with allocator.lock:  # (the counter as in ensure_allocated; _give: the lock taken once)
                    allocator._give(self._ptr, nbytes)
                    GlobalCounters.mem_used -= nbytes
            except Exception:
                pass  # interpreter shutdown
        elif self.offset:
            try:
                Device[self.device].allocator.free_offset(self._ptr)  # type: ignore[arg-type]
            except Exception:
                pass


class Allocator:
    """Device memory. Freed blocks are kept per size and handed out again: fresh memory costs page faults
    (CPU) or driver calls (GPU) on every allocation, and the same sizes come back step after step."""

    def __init__(self, cache_limit: int = getenv("ALLOC_CACHE_MB", 1024) << 20):
        self.cache: dict[int, list[int]] = {}
        self.cached_bytes, self.cache_limit = 0, cache_limit
        # buffers are freed by the garbage collector in whichever thread drops the last reference
        self.lock = library_lock(reentrant=True)

    def alloc(self, nbytes: int) -> int:
        with self.lock:
            return self._take(nbytes)

    def _take(self, nbytes: int) -> int:
        """alloc, with the lock held by the caller."""
        if blocks := self.cache.get(nbytes):
            self.cached_bytes -= nbytes
            return blocks.pop()
        try:
            return self._alloc(nbytes)
        except MemoryError:
            self.free_cache()
            return self._alloc(nbytes)

    # The lock is reentrant, and taken again by the same thread: the collector may run at any allocation of a Python
    # object (a list here, a ctypes call's argument tuple) and free a Buffer caught in a reference cycle, whose
    # __del__ calls free() in the middle of these methods.
    def free(self, ptr: int, nbytes: int) -> None:
        with self.lock:
            self._give(ptr, nbytes)

    def _give(self, ptr: int, nbytes: int) -> None:
        """free, with the lock held by the caller."""
        if self.cached_bytes + nbytes <= self.cache_limit:
            if (blocks := self.cache.get(nbytes)) is None:  # (not setdefault alone: a new list on every free)
                # setdefault: a free run by the collector while the list was made may have put one there
                blocks = self.cache.setdefault(nbytes, [])
            blocks.append(ptr)
            self.cached_bytes += nbytes
        else:
            self._free(ptr, nbytes)

    def free_cache(self) -> None:
        # the cache taken away before its blocks go: a free run by the collector during the loop (each _free is a
        # ctypes call) added a size to the dict being walked, the walk stopped with "dictionary changed size", and the
        # blocks already returned to the system stayed in the cache, handed out again by alloc (a use after free)
        with self.lock:
            cache, self.cache, self.cached_bytes = self.cache, {}, 0
            for nbytes, blocks in cache.items():
                for ptr in blocks:
                    self._free(ptr, nbytes)

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

    def offset(self, ptr: int, offset: int, nbytes: int) -> int | None:
        """What kernels and copies take as the address of the `nbytes` at byte `offset` (> 0) of the memory at `ptr`;
        None where this device has no such address (the caller then reads the memory at an offset in its kernels).
        A device that makes an object for it releases it in free_offset."""
        return None

    def free_offset(self, ptr: int) -> None:
        pass


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

    # whether its kernels and copies may be launched from any thread (a schedule spanning several devices runs one
    # thread per device, see engine/streams.py)
    any_thread = True

    def __init__(self, name: str, allocator: Allocator, renderer: Any, compiler: Compiler, runtime: Callable[..., Any]):
        self.name, self.allocator, self.renderer, self.compiler, self.runtime = (
            name,
            allocator,
            renderer,
            compiler,
            runtime,
        )

    @property
    def graph(self) -> Any:
        """How a TinyJit replays this device's kernels as one call: a class built as `graph(programs, calls, n_bufs,
        n_vars)` with `bufs`, `vars` and `call()`, and `accepts(programs)`; None: kernel by kernel."""
        return None

    def describe(self) -> str:
        return f"{type(self.renderer).__name__}, compiler {self.compiler.cachekey}"

    def synchronize(self) -> None:
        pass
