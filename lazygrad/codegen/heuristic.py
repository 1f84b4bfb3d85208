"""Hand-written default optimizations: cheap rules that are right for most kernels (BEAM searches the rest).

The rules, in order: on a CPU, a register tile's rows that are no whole vectors are merged with the axis outside
them (a small image's pixel rows become vectors across rows); a kernel whose reduce input is reused along an output
axis (matmul, conv) gets a register tile (upcast two output axes, vector lanes and rows, on a CPU a third for a second
vector per row; unroll the reduce, on a CPU a small tile's padded window whole); a reduce over a unit-stride axis is
unrolled by the vector width (vector accumulators); otherwise the unit-stride output axis is upcast by the vector width
(and, for a copy into another layout that would read part of a cache line per iteration, along the axis that continues
the line). Kernels with enough work are then shared out among the CPU cores along their outermost output axis; a
register tile whose rows are many runs them in chunks outermost (BLOCK on one core, the chunks shared out on several).

A size that is a Variable (a symbolic axis) stays a plain loop: every opt here splits a constant axis only (a split
of a Variable size by a constant would need a remainder loop); the constant axes beside it get their opts as usual.
"""

from __future__ import annotations

import functools

from lazygrad.codegen.kernel import AxisType, Kernel, Opt, OptOps
from lazygrad.dtype import dtypes
from lazygrad.helpers import getenv, prod
from lazygrad.uop.ops import GroupOp, Ops, UOp, c_idiv
from lazygrad.uop.symbolic import simplify
from lazygrad.uop.view import ShapeTracker

# below this many loop iterations a kernel runs in a few microseconds: nothing to gain, only code to grow
TINY = 64
# on a CPU a plain reduce (no register tile) below this many iterations runs in well under a microsecond either
# way: upcast rows or an unroll only grow the C the compiler works through (the digits CNN step's softmax and loss
# kernels over 64 x 10: 0.2-0.5 us each as plain loops or upcast by 16 rows; its 8 such kernels 246 -> 178 ms of gcc
# CPU). Only a reduce of at least LONG_REDUCE vectors' worth keeps its vector accumulators: a decode step's RMSNorm
# over 576 as a loop is a chain of 576 dependent adds
TINY_CPU = 1024
LONG_REDUCE = 16
# a parallel region costs ~1-6 us to start (measured with libgomp's default spin-then-sleep wait on 2 cores);
# kernels under this many iterations finish in about that time on one core
THREAD_MIN_WORK = getenv("THREAD_MIN_WORK", 1 << 17)
# expanded values of a register tile with its unrolled reduce, lanes of a vector counted each (512: 32 AVX-512
# vectors); the taps of a padded window get twice, unrolled they share their loads
TILE_EXPANDED = 512
# expanded values times the loads inside the reduce: past this an unrolled register tile's body only grows
BODY_LOADS = 2048
# vector multiply-adds of an unrolled window's loop body below which its rows are unrolled too (an AVX-512 tile of
# 8 x 2 vectors has 48 in a row of 3 taps)
WINDOW_FMAS = 48
CACHE_LINE = 64  # bytes
VECTOR_BYTES = getenv("VECTOR_BYTES", 0)  # 0: one of the machine's vector registers (the renderer knows)
# a register tile whose column blocks run outermost reads the whole broadcast side (a matmul's rows) once per block of
# columns: where those rows are more than this many bytes they come from memory, not L3, each time. The rows are then
# cut into chunks of at most this much, the chunk outermost, so that every column block reuses a chunk from L3 (2048^2
# on one core, CPU time: 86-87 GFLOPS over all rows, 96-97 over chunks of 256 rows, 2 MB; 128 rows 95. Cachegrind
# with an 8 MB last level, 256 of its columns: 4.2 M last-level read misses over all rows, 0.3 M in chunks)
ROW_CHUNK_BYTES = getenv("ROW_CHUNK_BYTES", 2 << 20)
# a register tile whose column side (a conv's packed weights) spans at most this many bytes keeps it all in a core's
# L2 (512 KB here): its rows side, where larger, then runs outermost and is read once, not once per column block.
# Blocked conv 64 -> 64 3x3 on 32^2, batch 32 (weights 147 KB, images 9.5 MB), one core, CPU time: output channel
# blocks outermost 27.6 ms, images outermost 25.6
COLUMNS_L2_BYTES = 256 << 10


def _size(s: int | UOp) -> int:
    """A size to weigh work by: a Variable one at its largest."""
    return s if isinstance(s, int) else s.vmax


def hand_coded_optimizations(k: Kernel) -> Kernel:
    work = prod(_size(s) for s in k.full_shape)
    if work < TINY:
        return k
    tiny = not k.renderer.has_local and work < TINY_CPU  # see TINY_CPU: for a plain reduce
    loads, stores = _accesses(k)
    if not k.renderer.has_local and _byte_dot(k):
        # a plain loop: gcc's vectorizer turns `acc += (int)u8 * (int)s8` into vpdpbusd / vpmaddubsw, which
        # explicit vector types (widened lane by lane, multiplied in int32) never become: Q8_0 matvec of 49152 x 576
        # 850 us as a loop, 2.2 ms upcast
        _thread(k, len(loads))
        return k
    dp4a_lanes = [u.arg or 4 for u in k.ast.toposort if u.op is Ops.DP4A]
    if k.axes_of(AxisType.REDUCE) and dp4a_lanes:
        # int8 dot products as vpdpbusd: the reduce's innermost axis (a block's words) becomes the lanes of one
        # instruction, the loop over blocks keeps float vector accumulators (one horizontal sum per output, not per
        # block); each lane is four byte products, so a quarter of the usual iterations is worth a thread. As many
        # lanes as the op's arg asks where it does: the words of a block of 32 contiguous (gguf's word_terms, 8: Q4_K
        # 16384 x 4096 on 2 cores 2.4 -> 1.9 ms against 4), else 4. Where the words of as many rows lie contiguous
        # (gguf's rows in groups of 8) the lanes are those rows instead: one vector of outputs, no horizontal sums
        lanes = max(dp4a_lanes)
        rows = _unit_output_axis(k, [i for i, inside in loads if inside], lanes)
        if rows is None or not k.try_opt(Opt(OptOps.UPCAST, k.axes_of(AxisType.GLOBAL).index(rows), lanes)):
            _unroll(k, (lanes, 4))
        _thread(k, 4 * len(loads))
        return k
    vec = _vector_width(k, stores)
    in_reduce = [i for i, inside in loads if inside]
    # address steps of each view along each axis, read before any opt renumbers the axes
    step = {v: [_step(k, v, a) for a in range(len(k.full_shape))] for v in {*in_reduce, *stores}}
    # a CPU's vectors (a GPU has no lanes to fill): an output's short rows, else a reduce's
    merged = None
    if not k.renderer.has_local and in_reduce:
        merged = _merge_short_rows(k, AxisType.GLOBAL, in_reduce + stores, vec, step)
        reduce_merged = None if merged is not None else _merge_short_rows(k, AxisType.REDUCE, in_reduce, vec, step)
        m = merged if merged is not None else reduce_merged
        if m is not None:
            # the merged axis steps as its inner part did (_merge_short_rows): read off, not indexed through the view
            # on top (a conv's input gradient: 9 views, each step a to_index and simplify, 60% of its codegen)
            step = {v: s[:m] + s[m + 1 :] for v, s in step.items()}
    reduce_axes = k.axes_of(AxisType.REDUCE)
    glob = k.axes_of(AxisType.GLOBAL)
    reuse = [a for a in glob if any(step[i][a] == 0 for i in in_reduce)] if reduce_axes else []
    # on a CPU a tile pays where an input the reduce loop reads anew in each iteration is shared by outputs; one it
    # does not move through (a bias added before a max-pool) is loaded once per output anyway (the CNN's max-pools
    # of relu(conv + bias), forward and backward: 8 x 2 tiles 35 and 42 us, 85 ms of gcc each; plain 28 and 14 us)
    moving = [i for i in in_reduce if any(step[i][r] != 0 for r in reduce_axes)]
    if not k.renderer.has_local and not any(step[i][a] == 0 for i in moving for a in reuse):
        reuse = []
    out_unit = [a for a in glob if stores and all(step[i][a] == 1 for i in stores)]
    spread = None  # the output axis the cores share out, where the register tile prefers one
    if reuse:
        # register tile: the unit-stride output axis as vectors, a second reused axis as rows of the tile
        first = _vector_axis(k, reuse, out_unit, [step[i] for i in in_reduce], vec, merged)
        # no output axis for vector lanes (a conv's weight gradient): the reduce may run unit-stride through every
        # input instead (the output pixels), then it gets vector accumulators
        last_steps = [step[i][reduce_axes[-1]] for i in in_reduce]
        reduce_lanes = first is None and vec > 1 and 1 in last_steps and all(s in (0, 1) for s in last_steps)
        others = [a for a in reuse if a != first]
        # the second axis should reuse what the first does not: in a conv, the output width reuses each weight and
        # the output channels reuse each input pixel (the batch would only reuse the weight again)
        shared = {i for i in in_reduce if first is not None and step[i][first] == 0}
        gain = {a: sum(1 for i in in_reduce if i not in shared and step[i][a] == 0) for a in others}
        # among equals, an axis along which the shared input slides as along an inner reduce axis (a conv's output
        # pixels over its window's taps with the output channels as lanes): neighbouring rows share their loads
        slide = {a: _slide_rank(step, sorted(shared), a, reduce_axes) for a in others}
        ranked = sorted(others, key=lambda a: (gain[a], slide[a], _size(k.full_shape[a])), reverse=True)
        second = ranked[0] if ranked else None
        slides = second is not None and slide[second] > 0
        # with the lanes along the reduce, a third axis makes the tile two-dimensional: each loaded vector of one
        # input meets several of the other (2 x 8 of x @ w.T: 114 GFLOPS here, 1 x 8: 65)
        third = ranked[1] if reduce_lanes and len(ranked) > 1 else None
        # a conv's weight gradient: its window's row taps, whole, slide along the input's rows (a reduce axis); with
        # those rows unrolled whole too (below) each (row, tap) pair's padding is known where the kernel is built
        # (rows that read only padding are no loads, the others no row check), and neighbouring rows share loads
        taps = [a for a in ranked[1:] if _tap_rows(k, step, in_reduce, a, reduce_axes) is not None]
        tap_rows = _tap_rows(k, step, in_reduce, taps[0], reduce_axes) if reduce_lanes and taps else None
        if tap_rows is not None:
            third = taps[0]
        # a window's few taps that slide along the reduce's lanes (a conv's weight gradient, its lanes along the
        # input rows or, merged, several rows: _merge_short_rows) are the third axis, whole: their shifted loads
        # share lines. AVX-512 (32 registers), one core, 8 output channels x 3 taps of 16 lanes against x 2 input
        # channels: 16 -> 32 on 8^2, batch 64, 225 us against 360 (unmerged 290); 64 -> 64 on 16^2, batch 8, 1417
        # -> 868 us (torch 716); on 32^2, batch 32, 32.2 -> 17.8 ms (torch 12.6). With AVX2's 16 registers the 4 x 3
        # tile spills: 64 -> 64 on 16^2, 1.6 -> 3.9 ms
        whole_taps = tap_rows is not None
        if reduce_lanes and not whole_taps and k.renderer.vector_registers >= 32:
            lanes = len(reduce_axes)  # the rank of the innermost reduce axis (_slide_rank)
            slid = [
                a
                for a in ranked[1:]
                if _size(k.full_shape[a]) <= 4 and _slide_rank(step, in_reduce, a, reduce_axes) == lanes
            ]
            if slid:
                third, whole_taps = slid[0], True
        # a quarter of the vector registers hold accumulators as rows of the tile: more rows spill, and rows of a
        # matrix whose stride is a multiple of 4 KB land in one L1 set (16 rows of a 1024-wide matmul ran at 85
        # GFLOPS here, 8 rows at 193). Another quarter holds a second vector per row where an axis reuses each
        # broadcast value: the fewest loads per multiply-add (2048^2 matmul on one core: 8 rows x 2 vectors 240
        # GFLOPS, 8 x 1 105-150). Lanes that are gathered one by one (a padded conv's shifted window, without masked
        # loads) cost a load each instead: then one gathered vector serves twice the rows (conv 64->64 3x3 on one
        # core: 16 x 1 192 GFLOPS, 8 x 2 173, 8 x 1 150; with masked loads 8 x 2 images 216, 16 x 1 175)
        rows = max(2, k.renderer.vector_registers // 4) if vec > 1 else 4
        cols_axis, own, sliding = None, [i for i in in_reduce if i not in shared], False
        # the taps of a padded window, unrolled, share most of their loads: worth a bigger loop body
        window = bool(reduce_axes) and _gathered(k, own, reduce_axes[-1], 1)
        body = 2 * TILE_EXPANDED if window else TILE_EXPANDED
        # (measured on a CPU only: a GPU thread's tile stays as it was)
        cpu_tile = first is not None and not k.renderer.has_local
        gathered = cpu_tile and vec > 1 and _gathered(k, own, first, vec)
        if gathered:
            rows = rows * 2
        elif cpu_tile:
            cols = [a for a in ranked[1:] if all(step[i][a] == 0 for i in shared)]
            if k.renderer.masked_load_lane_mask and reduce_axes:
                # with dear masked loads (AVX's) a padded conv's second vector is the next output row rather than
                # another image: the two rows' windows share rows of the input, and their masked loads (4 x 2 tile:
                # 8 a tile, not 12). One core, 64 -> 64 channels 3x3: 32^2 images 63-66 GFLOPS, rows 72-74; 16^2
                # 75 and 83. The rows stay inside the images' loop (shared out among the cores, outermost, they
                # were 56-65 on 16^2: each core then streams every image for its rows)
                # So is the next row of a window's taps summed one by one (a conv's input gradient: 16 -> 32 on 8^2,
                # batch 64, one core, 8 x 4 x 2 rows 607-620 us, 2 images 738-946)
                cols.sort(key=lambda a: not (_slides(step, own, a, reduce_axes) or _taps_along(k, own, a)))
                sliding = bool(cols) and (_slides(step, own, cols[0], reduce_axes) or _taps_along(k, own, cols[0]))
            cols_axis = next(iter(cols), None)
        if first is not None:
            n_axes = len(k.full_shape)
            size = k.full_shape[first]
            if first == merged and isinstance(size, int) and size % vec:
                # merged rows that are no whole vectors (7^2 pixels): overlapping vectors, the last one ending at the
                # image's end (OVERLAP)
                k.try_opt(Opt(OptOps.OVERLAP, k.axes_of(AxisType.GLOBAL).index(first), vec))
            else:
                _upcast(k, first, (vec, 8, 4, 2))
            second = _renumbered(k, second, first, n_axes)
            if cols_axis is not None:
                third = _renumbered(k, cols_axis, first, n_axes)
            elif cpu_tile and not gathered and len(k.full_shape) > n_axes:
                third = first  # what is left of the vector axis: the next vector along it
        if second is not None:
            n_axes = len(k.full_shape)
            amounts = tuple(r for r in (rows, rows // 2, 4, 2) if r >= 2)
            size = k.full_shape[second]
            odd = [d for d in range(rows, 2, -1) if isinstance(size, int) and size % 2 and size % d == 0]
            if cpu_tile and not gathered and odd:
                # an odd row count (a prompt's tokens) still gets rows in its tile, as many as divide it: a tile of one
                # row loads two vectors of the panel per two multiply-adds, from L2 (SmolLM2's 35-token prompt, 35 x
                # 576 @ 576 x 1536 on 2 cores: 1 x 2 vectors 66-130 GFLOPS, 7 x 2 124-270). Its reduce stays rolled:
                # unrolled by 2 the 7 x 2 tiles of that prompt's four products ran no faster (~250 GFLOPS alone) and
                # were 33 KB of C, 124 ms of gcc, instead of 26 KB, 85 ms (one row unrolled by 4: 20 KB, 80 ms)
                amounts = tuple(odd)
                body = min(body, TILE_EXPANDED // 2)
            if not (cpu_tile and not gathered and slides and _tile_rows(k, second, rows)):
                _upcast(k, second, amounts)
            if third is not None:
                third = _renumbered(k, third, second, n_axes)
                n_axes = len(k.full_shape)
                _upcast(k, third, (k.full_shape[third],) if whole_taps else (2,))
                # the cores share out the columns of the vector side (a matmul's B panels), not the rows of the
                # broadcast side: each core's inner loop then runs over rows, reusing its column block (k x 2
                # vectors) from its own L2 while the rows stream from L3, instead of every core streaming all of B
                # once per block of rows (two cores, panel copy included: 1024^2 430 -> 480 GFLOPS, 2048^2 457 ->
                # 472, x @ w.T 458 -> 479)
                # Not where all the column side fits in a core's L2 and the rows side does not (a blocked conv's
                # weights beside its images): the rows outermost then read each image once, the columns from L2
                if cols_axis is not None and not sliding and len(k.full_shape) > n_axes:  # not upcast whole
                    spread = None if _columns_fit(k, own, sorted(shared)) else third
        # 3: a conv's window row; its three shifted input vectors share most of their loads. A body that loads many
        # inputs already is long enough (a conv's input gradient with its 9 taps inside the channel sum: 8 x 2
        # vectors of 8 alone 347 us, unrolled by 4 632 us)
        if reduce_lanes and _unroll(k, (vec, 8, 4)):
            # the rows the taps slide along, unrolled whole where the lanes took their axis whole (they are then the
            # innermost reduce axis). Digits CNN's 16 -> 32 on 8^2, batch 64, one core, best of A/B rounds in one
            # process: 4 output channels x 2 input channels 790-1390 us (6 loads a row of 8 multiply-adds, two of them
            # masked under a mask built in the loop), 4 x 3 taps with the 8 rows unrolled 489-579 us (4 x 3 taps alone
            # 896-1077, 8 rows of 4 x 2 alone 764, 3 taps along the row with 8 rows 493-628); its 1 -> 16 35 -> 16 us.
            # gcc takes ~60 ms more for the bigger body
            if tap_rows is not None and len(k.axes_of(AxisType.REDUCE)) == len(reduce_axes) - 1:
                _unroll(k, (tap_rows,), body)
        else:
            limit = min(body, BODY_LOADS // max(1, len(in_reduce)))
            n_reduce = len(k.axes_of(AxisType.REDUCE))
            _unroll(k, (4, 3, 2), limit)
            # a padded window's row of taps unrolled whole is a short body where the tile has few vectors: the
            # window's next axis (its rows) too, or the row's bounds checks, lane masks and loop cost as much as its
            # multiply-adds (conv 64->64 3x3 on 32^2, one core, 4 x 2 tile: 3 taps 55 GFLOPS, 9 taps 63-77)
            rest = k.axes_of(AxisType.REDUCE)
            if cpu_tile and window and rest and len(rest) < n_reduce and k.upcast_size // max(1, vec) < WINDOW_FMAS:
                size = k.full_shape[rest[-1]]
                if isinstance(size, int) and size <= 4 and _gathered(k, own, rest[-1], 1):
                    _unroll(k, (size,), limit)
    elif reduce_axes:
        last = reduce_axes[-1]
        lanes = vec > 1 and any(step[i][last] == 1 for i in in_reduce)
        if lanes and (not tiny or _size(k.full_shape[last]) >= LONG_REDUCE * vec) and _unroll(k, (vec,)):
            _unroll(k, (2,))  # two vector loads in flight per iteration
        elif out_unit and not tiny:
            _upcast(k, out_unit[-1], (vec, 4, 2))
            _unroll(k, (4, 2))
        elif not tiny:
            _unroll(k, (4, 2))
    elif out_unit and _per_lane_ops(k, vec) * vec <= TILE_EXPANDED:
        _upcast(k, out_unit[-1], (vec, 4, 2))
        if not k.renderer.has_local and not _transpose_tile(k, [i for i, _ in loads], stores):
            _whole_lines(k, [i for i, _ in loads], stores)
    _thread(k, len(loads), spread, in_reduce)
    return k


# *** what the kernel looks like ***


def _byte_dot(k: Kernel) -> bool:
    """Whether the kernel's reduces are integer sums of products of values in 8 bits (int8 dot products)."""
    reduces = [x for x in k.ast.toposort if x.op is Ops.REDUCE_AXIS]
    return bool(reduces) and all(
        dtypes.is_int(r.dtype)
        and r.src[0].op is Ops.MUL
        and all(-128 <= s.vmin and s.vmax <= 255 for s in r.src[0].src)
        for r in reduces
    )


def _accesses(k: Kernel) -> tuple[list[tuple[int, bool]], list[int]]:
    """(view number, inside a reduce) of every global load, and the view numbers of the stores."""
    pos = {v: i for i, v in enumerate(k.views)}
    in_reduce = {x for r in k.ast.toposort if r.op is Ops.REDUCE_AXIS for x in r.src[0].toposort}
    global_loads = [x for x in k.ast.toposort if x.op is Ops.LOAD and x.src[0].op is Ops.DEFINE_GLOBAL]
    loads = [(pos[x.src[1]], x in in_reduce) for x in global_loads]
    stores = [pos[x.src[1]] for x in k.ast.src if x.op is Ops.STORE]
    return loads, stores


def _per_lane_ops(k: Kernel, vec: int) -> int:
    """The ALU ops of the kernel that the renderer cannot do on vectors of `vec` lanes: an upcast repeats each once per
    lane. Past a few the plain loop is better left to the C compiler's vectorizer: the threefry of Tensor.rand (76
    uint32 ops an element, shifts among them) of 512 x 1024 upcast by 16 was 100 KB of C, 187 ms of gcc CPU and
    2.6 ms on one core; plain, 9 KB, 56 ms and 0.6 ms."""
    if vec <= 1:
        return 0
    ok = k.renderer.vector_op_ok  # type: ignore[attr-defined]
    # asked once per distinct (op, dtypes): a kernel's ALU ops repeat a few kinds many times
    answers: dict[tuple, bool] = {}
    count = 0
    for u in k.ast.toposort:
        if u.op in GroupOp.ALU:
            key = (u.op, u.dtype, *[s.dtype for s in u.src])
            if (answer := answers.get(key)) is None:
                answer = answers[key] = ok(u.op, u.dtype.vec(vec), [s.dtype for s in u.src])
            count += not answer
    return count


def _step(k: Kernel, view: int, axis: int) -> int | None:
    """How far the address of view number `view` moves when `axis` moves by one (None: not a constant)."""
    return _steps(k.sts[view])[axis]


@functools.lru_cache(maxsize=4096)
def _steps(st: ShapeTracker) -> tuple[int | None, ...]:
    """_step along every axis of a view, once per view: the heuristic asks each view's steps again after every opt it
    tries, and kernels of one schedule share views (cold CNN step: 938 asks, 10% of code generation's CPU)."""
    single = st.views[0].strides if len(st.views) == 1 else None
    numeric = all(_all_ints(v.shape, v.strides, (v.offset,)) for v in st.views)
    idx0: UOp | None = None
    out: list[int | None] = []
    for axis, n in enumerate(st.shape):
        if n == 1:
            out.append(0)
        elif single is not None and type(single[axis]) is int:
            out.append(single[axis])  # one view's address is linear in each index (its mask gates, not moves it)
        elif numeric:
            at = [0] * len(st.shape)
            at[axis] = 1
            out.append(_address(st, at) - _address(st, [0] * len(st.shape)))
        else:
            at = [UOp.const(dtypes.int32, 0)] * len(st.shape)
            if idx0 is None:
                idx0 = st.to_index(list(at))[0]
            at[axis] = UOp.const(dtypes.int32, 1)
            step = simplify(st.to_index(at)[0] - idx0)
            out.append(step.arg if step.op is Ops.CONST else None)
    return tuple(out)


def _all_ints(*seqs: tuple) -> bool:
    return all(type(x) is int for seq in seqs for x in seq)


def _address(st: ShapeTracker, idxs: list[int]) -> int:
    """The address ShapeTracker.to_index gives at constant `idxs`, on Python ints (every size, stride and offset an
    int), division and modulo truncating as the IR's: what simplifying that index folds to, without building it (a
    view of a view's step along an axis was a simplify of two addresses' difference, with their divisions and
    modulos: 96 views of the cold CNN step, 7% of its code generation)."""
    last = st.views[-1]
    addr = last.offset + sum(i * s for i, s in zip(idxs, last.strides))
    for v in reversed(st.views[:-1]):
        inner, acc = [], 1
        for k, s in reversed(list(enumerate(v.shape))):
            part = c_idiv(addr, acc)
            inner.append(part - c_idiv(part, s) * s if k != 0 else part)
            acc *= s
        addr = v.offset + sum(i * s for i, s in zip(reversed(inner), v.strides))
    return addr


def _gathered(k: Kernel, views: list[int], axis: int, lanes: int) -> bool:
    """Whether some of `views` has a mask that changes along `axis`, so that a vector of `lanes` along it is loaded
    lane by lane: where the renderer has no masked load for it (with lanes=1: whether the mask changes at all)."""
    dtype_of = {x.src[1]: x.dtype for x in k.ast.toposort if x.op is Ops.LOAD}
    for v in views:
        st = k.sts[v]
        if st.shape[axis] == 1 or not any(view.mask is not None for view in st.views):
            continue
        if lanes > 1 and k.renderer.masked_load(dtype_of[k.views[v]].vec(lanes)):
            continue
        # every axis anywhere in its range: at one fixed point the window may lie in the padding altogether
        at = [UOp.variable(f"probe_{a}", 0, s - 1) for a, s in enumerate(st.shape)]
        if at[axis] in simplify(st.to_index(at)[1]).toposort:
            return True
    return False


def _slides(step: dict[int, list], views: list[int], axis: int, reduce_axes: list[int]) -> bool:
    """Whether some of `views` moves along output `axis` as it does along one of `reduce_axes`: a window that slides
    (a conv's output rows read the input rows its window rows do), so neighbours along `axis` share loads."""
    return any(step[i][axis] not in (0, None) and step[i][axis] in (step[i][r] for r in reduce_axes) for i in views)


def _taps_along(k: Kernel, views: list[int], axis: int) -> bool:
    """Whether two of `views` read one buffer with the same strides, one shifted from the other by whole steps along
    output `axis`: the taps of a window summed in one expression (a conv's input gradient), which neighbours along
    the axis share."""
    buffer_of = {x.src[1]: x.src[0] for x in k.ast.toposort if x.op is Ops.LOAD}
    offsets: dict[tuple, list[int]] = {}
    for v in views:
        st = k.sts[v]
        if len(st.views) != 1 or not isinstance(st.views[0].offset, int):
            continue
        view = st.views[0]
        offsets.setdefault((buffer_of[k.views[v]], view.strides), []).append(view.offset)
    for (_, strides), offs in offsets.items():
        stride, size = strides[axis], k.full_shape[axis]
        if type(stride) is not int or stride == 0 or not isinstance(size, int):
            continue
        if any(a != b and (a - b) % stride == 0 and abs(a - b) // abs(stride) < size for a in offs for b in offs):
            return True
    return False


def _tap_rows(k: Kernel, step: dict[int, list], views: list[int], axis: int, reduce_axes: list[int]) -> int | None:
    """The size of the reduce axis, the next one out from the innermost, along which some of `views` moves as along
    output `axis`, where `axis` is a window's few taps (at most 4) and that reduce axis is at most 8: a conv's weight
    gradient's row taps over the rows of its input; None elsewhere."""
    if len(reduce_axes) < 2 or not isinstance(taps := k.full_shape[axis], int) or taps > 4:
        return None
    rows = k.full_shape[reduce_axes[-2]]
    if not isinstance(rows, int) or rows > 8 or _slide_rank(step, views, axis, reduce_axes) != len(reduce_axes) - 1:
        return None
    return rows


def _slide_rank(step: dict[int, list], views: list[int], axis: int, reduce_axes: list[int]) -> int:
    """1 + the position in `reduce_axes` of the innermost one along which some of `views` moves as along output
    `axis` (0: none): a window that slides, innermost first since the inner window axes get unrolled."""
    ranks = [
        j + 1
        for j, r in enumerate(reduce_axes)
        for i in views
        if step[i][axis] not in (0, None) and step[i][axis] == step[i][r]
    ]
    return max(ranks, default=0)


def _merge_short_rows(k: Kernel, kind: AxisType, views: list[int], vec: int, step: dict[int, list]) -> int | None:
    """Merge the innermost axis of `kind` with the one outside it (Opt MERGE) where it is no whole vectors and every
    view reads along the two as along one axis (a step of 1 along the inner and of its size along the outer, or none
    along either): a padded conv on images whose rows are no whole vectors then gets vectors across rows, the lanes
    in the padding masked off, instead of a shorter vector per row (or none: rows of 7). Output rows merge where
    together they are at least a vector (overlapping vectors where they are no multiple of one, OVERLAP); a reduce's
    only into whole vectors. Returns the merged axis, or None.
    AVX-512, one core, 3x3 pad 1, best-of CPU time (unmerged -> merged, torch same run), the digits CNN's 16 -> 32
    on 8^2, batch 64: forward 324 -> 145 us (torch 205), input gradient 310 -> 176 (210), weight gradient 290 -> 225
    (220); 32 -> 64 on 4^2, batch 64: 563 -> 144, 640 -> 167, 568 -> 253 us (196, 185, 227); 32 -> 64 on 7^2, batch
    8: forward 796 -> 158 us (96), input gradient 1195 -> 88 (105); 16 -> 32 on 28^2, batch 8: 852 -> 220 (280),
    960 -> 251 (285)."""
    axes = k.axes_of(kind)
    if (
        len(axes) < 2
        or axes[-2] != axes[-1] - 1
        or not any(step[v][a] == 0 for v in views for a in k.axes_of(AxisType.GLOBAL))
    ):
        return None  # (no input read again along an output axis: no register tile)
    inner, outer = axes[-1], axes[-2]
    size, rows = k.full_shape[inner], k.full_shape[outer]
    if not isinstance(size, int) or not isinstance(rows, int) or size % vec == 0 or size * rows < vec:
        return None
    if kind is AxisType.REDUCE and size * rows % vec:
        return None  # a reduce's lanes cannot overlap (they would sum twice)
    steps = [(step[v][inner], step[v][outer]) for v in views]
    if any(s not in ((0, 0), (1, size)) for s in steps) or (1, size) not in steps:
        return None
    # a padded window's lanes are loaded under a mask (without masked loads they would be gathered one by one)
    dtype_of = {x.src[1]: x.dtype for x in k.ast.toposort if x.op is Ops.LOAD}
    masked = [v for v in views if k.views[v] in dtype_of and any(x.mask is not None for x in k.sts[v].views)]
    if any(not k.renderer.masked_load(dtype_of[k.views[v]].vec(vec)) for v in masked):
        return None
    at = (k.axes_of(AxisType.GLOBAL) + k.axes_of(AxisType.REDUCE)).index(outer)
    return outer if k.try_opt(Opt(OptOps.MERGE, at, 0)) else None


def _vector_axis(
    k: Kernel, reuse: list[int], out_unit: list[int], reduce_steps: list[list], vec: int, merged: int | None = None
) -> int | None:
    """The output axis of a register tile that becomes vector lanes: one along which every reduce input is
    contiguous or broadcast, the store's unit-stride axis if it is one (a conv's input gradient stores along its
    3x3 window, but its inputs run along the output pixels)."""

    def splits(a: int) -> bool:
        size = k.full_shape[a]
        return a == merged or isinstance(size, int) and any(size % w == 0 for w in (vec, 8, 4, 2) if w > 1)

    lanes = [
        a
        for a in reuse
        if splits(a) and any(s[a] == 1 for s in reduce_steps) and all(s[a] in (0, 1) for s in reduce_steps)
    ]
    if out_unit and out_unit[-1] in lanes:
        return out_unit[-1]
    # lanes along an axis where an input is strided would be gathers, one scalar load each (x @ w.T with w stored
    # (out, in) strides w along the output): better none, and vector accumulators along the reduce
    return max(lanes, key=lambda a: k.full_shape[a]) if lanes else None


def _renumbered(k: Kernel, axis: int | None, upcast: int, n_axes: int) -> int | None:
    """`axis` after an upcast of axis `upcast` in a kernel that had `n_axes` axes: an upcast by the whole size
    removes that axis, and the axes after it move down one."""
    return axis - 1 if axis is not None and len(k.full_shape) == n_axes and upcast < axis else axis


def _vector_width(k: Kernel, stores: list[int]) -> int:
    widths = k.renderer.vector_widths
    if not widths or not stores:
        return 1
    itemsize = k.ast.src[0].src[0].dtype.base.itemsize
    fits = [w for w in widths if w * itemsize <= (VECTOR_BYTES or k.renderer.vector_bytes)]
    return max(fits) if fits else 1


# *** applying opts where they fit ***


def _upcast(k: Kernel, axis: int, amounts: tuple[int, ...]) -> bool:
    if k.axis_types[axis] is not AxisType.GLOBAL:
        return False
    index = k.axes_of(AxisType.GLOBAL).index(axis)
    size = k.full_shape[axis]
    if not isinstance(size, int):
        return False
    fits = [a for a in amounts if a > 1 and size % a == 0 and size >= a and k.upcast_size * a <= TILE_EXPANDED]
    return any(k.try_opt(Opt(OptOps.UPCAST, index, a)) for a in fits)


def _tile_rows(k: Kernel, axis: int, rows: int) -> bool:
    """`rows` rows of a register tile along output `axis` whatever its size: a conv's output pixels, along which its
    broadcast input slides. A size `rows` does not divide gets overlapping tiles (OVERLAP: the last one ends at the
    axis's end, its outputs computed twice), a smaller one is upcast whole. One core, 64 -> 64 channels 3x3 on 31^2,
    batch 32: 1 x 2 vectors (31 has no divisor) 43 GFLOPS, 8 overlapping tiles of 4 x 2 87, of 5 x 2 83 (torch 83)."""
    size = k.full_shape[axis]
    if k.axis_types[axis] is not AxisType.GLOBAL or not isinstance(size, int) or size % rows == 0 or size == 1:
        return False
    index = k.axes_of(AxisType.GLOBAL).index(axis)
    if size < rows:
        return k.try_opt(Opt(OptOps.UPCAST, index, size))
    return k.try_opt(Opt(OptOps.OVERLAP, index, rows))


def _whole_lines(k: Kernel, loaded: list[int], stores: list[int]) -> None:
    """A copy into another layout whose vector of outputs reads part of a cache line of an input, the rest of the line
    being the next vector of another output axis (B copied into panels of 8 columns: 32 bytes of a 64-byte row), is
    upcast along that axis too: each iteration reads whole lines. Read half a line at a time down the columns, the
    other half is gone from cache when the next panel comes (2048^2 on one core: 3.2 ms, 1.5 ms whole)."""
    upcast = k.axes_of(AxisType.UPCAST)
    if len(upcast) != 1 or not isinstance(run := k.full_shape[upcast[0]], int):
        return
    itemsize_of = _load_itemsizes(k)
    for v in loaded:
        itemsize = itemsize_of[k.views[v]]
        if _step(k, v, upcast[0]) != 1 or run * itemsize >= CACHE_LINE:
            continue
        along = [
            a
            for a in k.axes_of(AxisType.GLOBAL)
            if _step(k, v, a) == run and all(_step(k, s, a) != run for s in stores)
        ]
        if along:
            _upcast(k, along[-1], (CACHE_LINE // (run * itemsize),))
            return


def _transpose_tile(k: Kernel, loaded: list[int], stores: list[int]) -> bool:
    """A copy out of channel blocks, whose vector of outputs gathers its lanes from an input laid out in blocks of
    as many elements (a blocked conv's output (n, c/8, h, w, 8) copied back to NCHW), is upcast along the block's
    axis too: each iteration reads one contiguous square tile of lanes x lanes, instead of one lane of each of
    lanes blocks (the rest of each line read again by the next pass of the block's axis, from further out in cache).
    Two cores, the blocked 32 x 64 x 32^2 back to NCHW with a relu: 1.23 -> 0.45-0.69 ms. Only there: a transpose
    of rows further apart (a weight into a matmul's panels) keeps the kernel it was tuned with."""
    upcast = k.axes_of(AxisType.UPCAST)
    if len(upcast) != 1 or not isinstance(lanes := k.full_shape[upcast[0]], int):
        return False
    for v in loaded:
        if _step(k, v, upcast[0]) != lanes:
            continue
        along = [
            a for a in k.axes_of(AxisType.GLOBAL) if _step(k, v, a) == 1 and all(_step(k, s, a) != 1 for s in stores)
        ]
        if along and _upcast(k, along[-1], (lanes,)):
            return True
    return False


def _load_itemsizes(k: Kernel) -> dict[UOp, int]:
    """Each loaded view's element size in bytes (keyed as k.views holds them)."""
    return {x.src[1]: x.dtype.itemsize for x in k.ast.toposort if x.op is Ops.LOAD}


def _unit_output_axis(k: Kernel, in_reduce: list[int], lanes: int) -> int | None:
    """An output axis of `lanes` along which every load of the reduce is contiguous or the same, at least one
    contiguous."""
    for a in k.axes_of(AxisType.GLOBAL):
        steps = [_step(k, v, a) for v in in_reduce]
        if k.full_shape[a] == lanes and all(s in (0, 1) for s in steps) and 1 in steps:
            return a
    return None


def _unroll(k: Kernel, amounts: tuple[int, ...], body: int = TILE_EXPANDED) -> bool:
    """Unroll the innermost reduce axis by the first of `amounts` that divides it and keeps at most `body` expanded
    values."""
    reduce_axes = k.axes_of(AxisType.REDUCE)
    if not reduce_axes:
        return False
    size = k.full_shape[reduce_axes[-1]]
    if not isinstance(size, int):
        return False
    last = len(reduce_axes) - 1
    fits = [a for a in amounts if a > 1 and size % a == 0 and size >= a and k.upcast_size * a <= body]
    return any(k.try_opt(Opt(OptOps.UNROLL, last, a)) for a in fits)


def _row_chunks(k: Kernel, cols: int | None, in_reduce: list[int], least: int = 2) -> tuple[int, int] | None:
    """(output axis, number of chunks) that cuts the rows of a register tile's broadcast side into at least `least`
    chunks of at most ROW_CHUNK_BYTES (see there), where the column axis `cols` runs outermost and the rows are larger
    than that."""
    if cols is None:
        return None
    itemsize_of = _load_itemsizes(k)
    for a in k.axes_of(AxisType.GLOBAL):
        size = k.full_shape[a]
        if a == cols or not isinstance(size, int):
            continue
        for v in in_reduce:
            steps = [_step(k, v, x) for x in range(len(k.full_shape))]
            if steps[a] in (0, None) or steps[cols] != 0 or None in steps:
                continue
            # the elements the rows span: every axis they move along (none of them overlap in a matmul's rows)
            span = prod(s for s, st in zip(k.full_shape, steps) if st != 0)
            if not isinstance(span, int) or span * itemsize_of[k.views[v]] <= ROW_CHUNK_BYTES:
                continue
            per_row = span * itemsize_of[k.views[v]] // size
            fits = [d for d in range(2, size + 1) if size % d == 0 and per_row * (size // d) <= ROW_CHUNK_BYTES]
            return (a, next((d for d in fits if d >= least), fits[-1])) if fits else None
    return None


def _span_bytes(k: Kernel, view: int) -> int | None:
    """The bytes a view's loads span: every axis it moves along (an axis of unknown step counted whole)."""
    steps = [_step(k, view, a) for a in range(len(k.full_shape))]
    span = prod(s for s, st in zip(k.full_shape, steps) if st != 0)
    return span * _load_itemsizes(k)[k.views[view]] if isinstance(span, int) else None


def _columns_fit(k: Kernel, columns: list[int], rows: list[int]) -> bool:
    """Whether the column side of a register tile (`columns`: the views that move along its column blocks) fits in
    COLUMNS_L2_BYTES whole while the rows side (`rows`) does not: then a core keeps all the columns in its L2, and the
    rows are best read once, outermost, instead of once per column block (see COLUMNS_L2_BYTES)."""
    col_bytes = [_span_bytes(k, v) for v in columns]
    row_bytes = [_span_bytes(k, v) for v in rows]
    if not col_bytes or not row_bytes or None in col_bytes or None in row_bytes:
        return False
    return sum(col_bytes) <= COLUMNS_L2_BYTES < sum(row_bytes)  # type: ignore[arg-type]


def _thread(k: Kernel, n_loads: int, prefer: int | None = None, row_views: list[int] | None = None) -> bool:
    """Share the kernel out among the cores; `prefer`: the column axis of a register tile, whose rows are read by
    `row_views` (see _row_chunks)."""
    threads = k.renderer.threads
    # an iteration that gathers many inputs (a col2im sums 9 window gradients) is worth several plain ones
    work = prod(_size(s) for s in k.full_shape) * max(1, n_loads // 2)
    if work < THREAD_MIN_WORK:
        return False
    glob = k.axes_of(AxisType.GLOBAL)
    if threads < 2 or not k.renderer.has_threads:
        # one core (THREADS=1 is a renderer without threads) still runs the preferred axis outermost (a matmul's
        # column panels): the panel block is then reused from L2 while the rows stream, not all of B streamed from
        # L3 once per block of rows (2048^2 on one core, CPU time: 189-199 -> 203-212 GFLOPS); outside it a chunk
        # of the rows where they are many (ROW_CHUNK_BYTES)
        if prefer is not None and (at := glob.index(prefer)) > 0 and k.try_opt(Opt(OptOps.SWAP, 0, at)):
            prefer = k.axes_of(AxisType.GLOBAL)[0]
        if (chunks := _row_chunks(k, prefer, row_views or [])) is not None:
            k.try_opt(Opt(OptOps.BLOCK, k.axes_of(AxisType.GLOBAL).index(chunks[0]), chunks[1]))
        return False
    # a few chunks a core: the guided schedule then evens out a core that another process holds up (2048^2: 8 chunks
    # of 2 MB; 1024^2 would be 2, one a core)
    chunks = _row_chunks(k, prefer, row_views or [], 4 * threads)
    if prefer is not None and chunks is not None and chunks[1] % threads == 0 and chunks[1] < k.full_shape[chunks[0]]:
        # the cores share out the chunks of rows, each running its chunk's column blocks as on one core: the rows
        # of a chunk come from memory once for all columns, where the columns shared out read them all per block
        row, n_chunks = chunks
        if not k.try_opt(Opt(OptOps.THREAD, glob.index(row), n_chunks)):
            return False
        glob = k.axes_of(AxisType.GLOBAL)
        at_row, at_col = glob.index(row), glob.index(prefer)
        if at_row < at_col:
            k.try_opt(Opt(OptOps.SWAP, at_row, at_col))
        return True
    # the preferred axis only where it shares out evenly (3 panels on 2 cores would leave one idle a third of the time)
    if prefer is not None and not (isinstance(k.full_shape[prefer], int) and k.full_shape[prefer] % threads == 0):
        prefer = None
    for i, a in sorted(enumerate(glob), key=lambda ia: ia[1] != prefer):
        # (not over overlapping tiles: two cores would store the outputs the tiles share)
        if isinstance(k.full_shape[a], int) and k.full_shape[a] >= threads and k.tile_steps[a] is None:
            return k.try_opt(Opt(OptOps.THREAD, i, 0))
    # too few outputs to go round: each core reduces a slice into a partial result (sum of a whole tensor)
    for i, a in enumerate(k.axes_of(AxisType.REDUCE)):
        if isinstance(k.full_shape[a], int) and k.full_shape[a] % threads == 0:
            return k.try_opt(Opt(OptOps.THREAD, len(glob) + i, threads))
    return False
