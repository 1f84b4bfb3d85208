"""DISK device: a file, memory-mapped, as a tensor's storage (`Tensor.empty(n, device="disk:/path")`,
`Tensor(pathlib.Path(...))`, `t.to("disk:/path")`). It stores and copies; it does not compute: a kernel asked of it
is an error that says to copy the tensor to a compute device first (`.to("CPU")`).

A buffer maps the first `nbytes` of the file (growing the file if it is shorter), shared with the file, so a write into
the buffer is a write into the file and several buffers of one file see each other's writes."""

from __future__ import annotations

import ctypes
import mmap
import os

from lazygrad.device import Allocator, Compiled, Compiler
from lazygrad.renderer import Renderer


class DiskRenderer(Renderer):
    device = "DISK"
    computes = False


class DiskAllocator(Allocator):
    def __init__(self, path: str):
        super().__init__(cache_limit=0)  # a freed mapping is unmapped: the next buffer may want another size
        self.path = path
        self.maps: dict[int, mmap.mmap] = {}  # address -> the mapping that owns it

    def _alloc(self, nbytes: int) -> int:
        if nbytes == 0:  # an empty tensor: an address that is never read or written
            mm = mmap.mmap(-1, 1)
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < nbytes:
                    os.ftruncate(fd, nbytes)
                mm = mmap.mmap(fd, nbytes)
            finally:
                os.close(fd)
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        self.maps[ptr] = mm
        return ptr

    def _free(self, ptr: int, nbytes: int) -> None:
        self.maps.pop(ptr, None)  # the mmap is closed when the last view of it goes (a closed map with views raises)

    def copyin(self, dst: int, src: memoryview) -> None:
        if src.nbytes:
            ctypes.memmove(
                dst, bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes
            )

    def copyout(self, dst: memoryview, src: int) -> None:
        if dst.nbytes:
            ctypes.memmove((ctypes.c_char * dst.nbytes).from_buffer(dst), src, dst.nbytes)


class DISKDevice(Compiled):
    def __init__(self, name: str):
        _, _, path = name.partition(":")
        if not path:
            raise ValueError(f"the disk device needs a file: 'disk:/path/to/file', not {name!r}")
        super().__init__(name, DiskAllocator(path), DiskRenderer(), Compiler(None), lambda *args: None)

    def describe(self) -> str:
        return f"memory-mapped file {self.allocator.path}"  # type: ignore[attr-defined]
