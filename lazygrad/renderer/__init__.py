"""Renderers turn linear UOps into source code. Each declares what its target can do; codegen obeys it."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import prod
from lazygrad.uop.ops import GroupOp, Ops, UOp


def estimate_ops(uops: list[UOp]) -> int:
    """FLOPs of one run: ALU ops outside address math (a tensor-core instruction's multiply-adds), times the trip
    count of the loops around them and, on a GPU, the threads that compute different values: a value no thread id
    reaches (a grouped reduce's merge, which every thread of the group runs alike) counts once per workgroup or
    launch. Threads past the end of a launch that does not divide count too: it is an estimate."""
    address: set[UOp] = set()
    for u in uops:
        if u.op is Ops.INDEX:
            address.update(u.src[1].toposort)
        elif u.op is Ops.LOAD and len(u.src) > 1:
            address.update(u.src[1].toposort)
    # on a GPU: the thread ids each value depends on. What is read back from shared memory after a barrier differs
    # per workgroup only, unless read at a place that depends on more; an accumulator names the threads that hold
    # one, not what it adds up
    ids: dict[UOp, frozenset[UOp]] = {}
    if specials := [u for u in uops if u.op is Ops.SPECIAL]:
        workgroup = frozenset(u for u in specials if u.arg[2] == "g")
        for u in uops:
            if u.op is Ops.SPECIAL:
                ids[u] = frozenset((u,))
            elif u.op is Ops.BARRIER:
                ids[u] = workgroup
            else:
                srcs = u.src[:1] if u.op is Ops.DEFINE_ACC else u.src
                ids[u] = frozenset().union(*(ids.get(s, frozenset()) for s in srcs))
    ops, trips = 0, [1]
    for u in uops:
        if u.op is Ops.RANGE:
            trips.append(trips[-1] * u.src[0].vmax)  # a symbolic loop counts at its largest
        elif u.op is Ops.ENDRANGE:
            trips.pop()
        elif (u.op in GroupOp.ALU and u not in address) or u.op is Ops.WMMA:
            threads = prod(x.arg[1] for x in ids.get(u, ()))
            if u.op is Ops.WMMA:  # mma_m16n8k16_...: 2*M*N*K over the warp's 32 lanes
                m, n, k = (int(x) for x in re.match(r"mma_m(\d+)n(\d+)k(\d+)", u.arg).groups())  # type: ignore[union-attr]
                ops += trips[-1] * threads * 2 * m * n * k // 32
            else:
                ops += trips[-1] * threads * (2 if u.op is Ops.MULACC else 1) * u.dtype.count  # vector ops count lanes
    return ops


def estimate_mem(uops: list[UOp]) -> int:
    """Bytes of the buffers one run reads and writes."""
    return sum(u.dtype.size * u.dtype.base.itemsize for u in uops if u.op is Ops.DEFINE_GLOBAL)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ProgramSpec:
    """A rendered kernel: what the runtime needs to compile and launch it, and what DEBUG prints about it."""

    name: str  # C identifier
    display_name: str  # coloured, for DEBUG lines
    src: str
    n_bufs: int
    outs: tuple[int, ...]
    vars: tuple[UOp, ...] = ()
    global_size: tuple[int, ...] | None = None
    local_size: tuple[int, ...] | None = None
    ops: int = 0  # estimated FLOPs of one run
    mem: int = 0  # estimated bytes moved by one run
    applied_opts: tuple = field(default_factory=tuple)

    def renamed(self, name: str) -> ProgramSpec:
        """The same kernel under another name (kernels built into one binary need distinct ones)."""
        return dataclasses.replace(self, name=name, src=rename_kernel(self.src, self.name, name))


def rename_kernel(src: str, old: str, new: str) -> str:
    """`src` with kernel `old` called `new`: its function and the helpers named after it (`{old}_lg_...`, an outlined
    THREAD loop's functions on the CPU)."""
    return re.sub(rf"\b{re.escape(old)}(?=\(|_lg_)", new, src)


class Renderer:
    device: str = ""
    has_local: bool = False  # workgroup (local) axes
    has_shared: bool = False  # shared memory for GROUP reductions
    has_threads: bool = False  # CPU cores
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
    shared_max: int = 0
    max_workgroup: int | None = None  # threads in one workgroup, over all its dimensions (None: no workgroups)
    threads: int = 1  # CPU cores a THREAD axis is shared out among
    vector_widths: tuple[int, ...] = ()  # lanes of the vector types loads, stores and ALU ops may use (): none
    vector_bytes: int = 16  # bytes in one vector register
    vector_registers: int = 16  # vector registers (a register tile is sized to fit)
    max_buffers: int | None = None  # buffer arguments one kernel may take (None: no limit worth splitting for)
    tensor_cores: tuple = ()
    wide_load_bytes: int = 0  # bytes one thread moves in one load when a workgroup copies a tile (STAGE); 0: an element
    computes: bool = True  # False: a storage-only device (DISK), whose tensors are copied, never computed on
    # Ops.DP4A on int32 vectors of these lane counts is one instruction (lane count -> how the renderer spells it);
    # elsewhere it is computed lane by lane, four scalar products each
    dp4a_builtins: dict[int, str] = {}
    # a GEP whose arg is a tuple of lanes (a vector of those lanes of its source) renders as one shuffle, and so does
    # a VECTORIZE of lanes of two vectors of its type
    lane_shuffle: bool = False
    # a masked load's mask is a vector of lanes built for it (AVX's vmaskmovps), not a mask register (AVX-512): a
    # masked load costs several plain ones, so a register tile reads fewer of them where it can (codegen/heuristic.py)
    masked_load_lane_mask: bool = False

    def dtype_unsupported(self, dtype: DType) -> str | None:
        """Why this target cannot compute with `dtype`, or None when it can."""
        return None

    def wide_load(self, dtype: DType) -> int:
        """Elements of `dtype` one load may move when a tile is copied to shared memory (STAGE): 1, or a power of
        two whose vector of `dtype` the target can load, store and hold without computing on it."""
        if self.wide_load_bytes and dtype in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
            return self.wide_load_bytes // dtype.itemsize
        return 1

    def supported_dtypes(self) -> list[DType]:
        """The dtypes this target computes with (tinygrad's name for the question `dtype_unsupported` answers)."""
        return [dt for dt in dtypes.all if self.dtype_unsupported(dt) is None]

    def masked_load(self, dtype: DType) -> bool:
        """Whether a vector of `dtype` loads under a mask of lanes (an unsigned int, a bit per lane, lane 0 lowest):
        LOAD(INDEX, mask). A lane whose bit is clear reads 0 and touches no memory."""
        return False

    def matmul_panel(self, m: int, n: int, k: int, itemsize: int, transposed: bool = False) -> int:
        """Columns per panel when the right-hand side (k, n) of an (m, k) @ (k, n) product, stored row-major (or
        `transposed`: as (n, k), a linear layer's weight), is worth copying into panels (n/panel, k, panel) first,
        so the kernel reads it contiguously; 0: read it as it is."""
        return 0

    def conv_blocks(
        self, batch: int, spatial: tuple[int, ...], out: tuple[int, ...], cin: int, cout: int, itemsize: int
    ) -> int:
        """Channels per block when a convolution of `batch` images of `spatial` pixels (padded) into `out` pixels, from
        `cin` to `cout` channels, is worth computing over copies in channel blocks: the input as (n, cin/b, *spatial,
        b), the weight as (cout/b, cin/b, *kernel, b, b), so the kernel's output channels are vector lanes; 0: as it
        is."""
        return 0

    def render(self, name: str, uops: list[UOp]) -> str:
        raise NotImplementedError
