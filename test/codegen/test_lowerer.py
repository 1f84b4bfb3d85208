"""Each rule of the lowering (codegen/lowerer.py: LOWER_OP, LOWER_VEC_OP) on hand-built kernel ASTs."""

from __future__ import annotations

import itertools
from math import prod

import pytest

from lazygrad import dtypes
from lazygrad.codegen.kernel import Kernel, Opt, OptOps
from lazygrad.codegen.lowerer import LOWER_OP, LOWER_VEC_OP, At, Lowerer
from lazygrad.device import Device
from lazygrad.uop.ops import Ops, UOp
from lazygrad.uop.symbolic import simplify
from lazygrad.uop.view import ShapeTracker
from test.helpers import avx2_renderer

F32, I32 = dtypes.float32, dtypes.int32


def glob(i: int, dt=F32, n: int = 16) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), arg=i)


def view(st: ShapeTracker) -> UOp:
    return UOp(Ops.VIEW, arg=st)


def lowerer(value: UOp, shape: tuple[int, ...] = (16,), opts: tuple[Opt, ...] = ()) -> Lowerer:
    """The Lowerer of a kernel storing `value` into a buffer of `shape` (with opts, its views are reshaped: the
    nodes to lower are then those of `lw.ast`)."""
    out = UOp(Ops.STORE, dtypes.void, (glob(0, value.dtype.scalar), view(ShapeTracker.from_shape(shape)), value))
    k = Kernel(UOp(Ops.SINK, dtypes.void, (out,)), Device["CPU"].renderer)
    k.apply_opts(list(opts))
    return Lowerer(k)


def load(st: ShapeTracker, i: int = 1) -> UOp:
    return UOp(Ops.LOAD, F32, (glob(i), view(st)))


def test_load_becomes_index_and_load() -> None:
    x = load(ShapeTracker.from_shape((16,)))
    lw = lowerer(x)
    (rng,) = lw.global_ranges
    assert LOWER_OP.translate(x, At(lw, ())) is UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, glob(1).dtype, (glob(1), rng)),))


def test_padded_load_is_gated_by_its_validity() -> None:
    x = load(ShapeTracker.from_shape((12,)).pad(((2, 2),)))
    got = LOWER_OP.translate(x, At(lowerer(x), ()))
    assert got.op is Ops.LOAD and len(got.src) == 2 and got.src[1].dtype == dtypes.bool
    assert got.src[0].src[1].render() == "(ridx0-2)"  # the index shifted by the pad


def test_load_of_padding_only_is_a_zero() -> None:
    st = ShapeTracker.from_shape((4,)).pad(((0, 16),)).shrink(((8, 16),))
    x = load(st)
    assert LOWER_OP.translate(x, At(lowerer(x, (8,)), ())) is UOp.const(F32, 0.0)


def test_const_is_masked_only_where_its_view_is_padded() -> None:
    plain = UOp(Ops.CONST, F32, (view(ShapeTracker.from_shape((16,))),), 2.0)
    assert LOWER_OP.translate(plain, At(lowerer(plain), ())) is UOp.const(F32, 2.0)
    padded = UOp(Ops.CONST, F32, (view(ShapeTracker.from_shape((12,)).pad(((2, 2),))),), 2.0)
    got = LOWER_OP.translate(padded, At(lowerer(padded), ()))
    assert got.op is Ops.WHERE and got.src[1:] == (UOp.const(F32, 2.0), UOp.const(F32, 0.0))


def test_iota_valid_and_variables() -> None:
    iota = UOp(Ops.IOTA, F32, (view(ShapeTracker.from_shape((16,))),), 16)
    lw = lowerer(iota)
    (rng,) = lw.global_ranges
    assert LOWER_OP.translate(iota, At(lw, ())) is rng.cast(F32)
    valid = UOp(Ops.VALID, dtypes.bool, (view(ShapeTracker.from_shape((12,)).pad(((2, 2),))),))
    assert LOWER_OP.translate(valid, At(lw, ())).dtype == dtypes.bool
    n = UOp.variable("n", 1, 10)
    assert LOWER_OP.translate(n, At(lw, ())) is n


def test_elementwise_ops_take_their_lowered_sources() -> None:
    a, b = load(ShapeTracker.from_shape((16,))), load(ShapeTracker.from_shape((16,)), 2)
    x = UOp(Ops.MUL, F32, (a, b))
    lw = lowerer(x)
    srcs = (lw.ev(a, ()), lw.ev(b, ()))  # the rules run after the sources are lowered (Lowerer._lowered)
    got = LOWER_OP.translate(x, At(lw, ()))
    assert got.op is Ops.MUL and got.src == srcs


def test_an_op_with_no_rule_is_refused() -> None:
    lw = lowerer(load(ShapeTracker.from_shape((16,))))
    odd = UOp(Ops.COPY, F32, (), "CPU")
    assert LOWER_OP.translate(odd, At(lw, ())) is None
    with pytest.raises(NotImplementedError, match="cannot lower Ops.COPY"):
        lw.ev(odd, ())


def test_reduce_reads_its_accumulator_after_the_loop() -> None:
    src = load(ShapeTracker.from_shape((4, 16)))
    r = UOp(Ops.REDUCE_AXIS, F32, (src,), (Ops.ADD, (1,)))
    lw = lowerer(r, (4, 1))
    lw.lower_reduces()
    got = LOWER_OP.translate(r, At(lw, ()))
    assert got.op is Ops.AFTER and got.src[0].op is Ops.DEFINE_ACC and got.src[1].op is Ops.ENDRANGE


def test_vector_rules() -> None:
    renderer = Device["CPU"].renderer
    if 4 not in renderer.vector_widths:
        pytest.skip("the CPU renderer has no 4-wide vectors")
    lw = lowerer(load(ShapeTracker.from_shape((16,))), opts=(Opt(OptOps.UPCAST, 0, 4),))
    assert lw.width == 4
    a = lw.ast.src[0].src[2]
    vec_load = LOWER_VEC_OP.translate(a, At(lw, ()))
    assert vec_load.op is Ops.LOAD and vec_load.dtype == F32.vec(4)  # contiguous lanes: one vector load
    # a broadcast value (stride 0 along the lanes) is its lanes' one scalar, gathered
    lw = lowerer(load(ShapeTracker.from_shape((4, 1)).expand((4, 4))), (4, 4), opts=(Opt(OptOps.UPCAST, 1, 4),))
    bcast = lw.ast.src[0].src[2]
    got = LOWER_VEC_OP.translate(bcast, At(lw, ()))
    assert got.op is Ops.VECTORIZE and len(set(got.src)) == 1


def test_a_staged_load_reads_its_tile_in_shared_memory() -> None:
    """STAGE: once lower_reduces has set up the tiles, a staged load reads shared memory, and its lanes stay scalar
    reads (a tile's rows are padded: a vector read may not be aligned) where the global load was one vector load."""
    from lazygrad import Tensor
    from lazygrad.renderer.gpu import OpenCLRenderer

    (si,) = [s for s in (Tensor.empty(32, 64) @ Tensor.empty(64, 32)).schedule() if s.ast.op is Ops.SINK]
    opts = [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4)]
    got = {}
    for staged in (False, True):
        k = Kernel(si.ast, OpenCLRenderer())
        k.apply_opts(opts + ([Opt(OptOps.STAGE, 0, 0), Opt(OptOps.STAGE, 1, 0)] if staged else []))
        lw = Lowerer(k)
        lw.lower_reduces()
        combo = (0,) * (len(lw.expanded_axes) - 1)
        # the input read along the vector axis (the unrolled reduce axis, last) contiguously
        b = next(u for u in lw.ast.toposort if u.op is Ops.LOAD and u.src[1].arg.views[-1].strides[-1] == 1)
        got[staged] = LOWER_OP.translate(b, At(lw, combo + (0,))), LOWER_VEC_OP.translate(b, At(lw, combo, True))
    assert got[False][0].src[0].src[0].op is Ops.DEFINE_GLOBAL and got[False][1].op is Ops.LOAD
    scalar, vec = got[True]
    assert scalar.op is Ops.LOAD and scalar.src[0].src[0].op is Ops.AFTER
    assert scalar.src[0].src[0].src[0].op is Ops.DEFINE_LOCAL
    assert vec.op is Ops.VECTORIZE and vec.dtype == F32.vec(4)


def test_view_of_a_view_at_constant_lanes_is_its_direct_simplification() -> None:
    # a padded 4x4 image flattened and re-split 4 x 9: the padding's mask cannot follow the reshape, so the kernel
    # reads a view of a view; each upcast combo's index comes from one simplified form with placeholder lanes
    st = ShapeTracker.from_shape((4, 4)).pad(((1, 1), (1, 1))).reshape((36,)).reshape((4, 9))
    assert len(st.views) == 2
    x = load(st)
    lw = lowerer(x, (4, 9), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 0, 3)))
    (v,) = [u for u in lw.ast.toposort if u.op is Ops.VIEW and len(u.arg.views) == 2]
    sizes = [lw.k.full_shape[a] for a in lw.expanded_axes]
    for combo in itertools.product(*[range(n) for n in sizes]):
        idx, valid = v.arg.to_index(lw.idxs(combo))
        got = lw.index(v, combo)
        assert got == (simplify(idx), simplify(valid))
        assert not any(u.op is Ops.RANGE and u.arg[1] == "lane" for g in got for u in g.toposort)
    assert v in lw.lane_forms  # the placeholder form was built and used


def test_padded_conv_lanes_simplify_once_per_value_of_the_sums_they_read() -> None:
    """A padded conv's address is linear in its expanded axes and its window bounds compare two sums of two of them:
    each combo's (index, validity) is still the direct simplification, but the address is never rebuilt from its
    placeholder form, and the validity is simplified once per value of the two sums (40), not once per combo (576)."""
    from lazygrad import Tensor
    from lazygrad.codegen.workgroups import default_optimizations

    x, w = Tensor.empty(8, 16, 8, 8), Tensor.empty(32, 16, 3, 3)
    (si,) = [s for s in x.conv2d(w, padding=1).schedule() if s.ast.op is Ops.SINK]
    # the tile chosen for 2 AVX2 cores, whatever this CPU is (the counts below are that tile's)
    k = Kernel(si.ast, avx2_renderer(threads=2))
    default_optimizations(k)
    lw = Lowerer(k)
    lw.lower()
    (v,) = [u for u in lw.ast.toposort if u.op is Ops.VIEW and u in lw.lane_forms and u.arg.views[0].mask]
    idx_form, valid_form = lw.lane_forms[v]
    assert idx_form.moving == [] and idx_form.root in idx_form.linear and valid_form.lanes == []
    sizes = [lw.k.full_shape[a] for a in lw.expanded_axes]
    combos = list(itertools.product(*[range(n) for n in sizes]))
    for combo in combos:
        idx, valid = v.arg.to_index(lw.idxs(combo))
        assert lw.index(v, combo) == (simplify(idx), simplify(valid))
    # each linear sum's possible offsets: the validity's values are their combinations
    n_offsets = [
        len(
            {
                sum(c * m for c, (_, m) in zip(cs, terms))
                for cs in itertools.product(*[range(sizes[lw.expanded_axes.index(a)]) for a, _ in terms])
            }
        )
        for _, terms in valid_form.linear.values()
    ]
    assert len(valid_form.values) == prod(n_offsets) == 40 and len(combos) == 576


def test_unit_stride_of_placeholder_forms_reads_linear_coefficients(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a masked or multi-view view's address steps by one along an expanded axis (the vector axis's choice):
    the direct simplification's answer for every view and axis, and where the address is a linear sum whose
    coefficient for the axis is not 1, known with no simplify at all (each was a simplify of two addresses'
    difference, with their divisions and modulos)."""
    from lazygrad import Tensor
    from lazygrad.codegen import lowerer as lowerer_module
    from lazygrad.codegen.workgroups import default_optimizations

    x, w = Tensor.empty(8, 16, 8, 8), Tensor.empty(32, 16, 3, 3)
    (conv,) = [s for s in x.conv2d(w, padding=1).schedule() if s.ast.op is Ops.SINK]
    k = Kernel(conv.ast, Device["CPU"].renderer)
    default_optimizations(k)
    st = ShapeTracker.from_shape((4, 4)).pad(((1, 1), (1, 1))).reshape((36,)).reshape((4, 9))
    kernels = [Lowerer(k), lowerer(load(st), (4, 9), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 0, 3)))]
    calls = [0]
    real = lowerer_module.simplify
    monkeypatch.setattr(lowerer_module, "simplify", lambda u: calls.__setitem__(0, calls[0] + 1) or real(u))
    skipped = 0
    for lw in kernels:
        views = [u for u in lw.ast.toposort if u.op is Ops.VIEW and (len(u.arg.views) > 1 or u.arg.views[0].mask)]
        assert views
        for v in views:
            lw._at_lanes(v, {})  # the form built: what is counted below is each axis's answer
            for axis in lw.k.axes_of(*[t for t in lw.k.axis_types if t.expanded]):
                at0, at1 = lw.idxs((0,) * len(lw.expanded_axes)), lw.idxs((0,) * len(lw.expanded_axes))
                at1[axis] = UOp.const(I32, 1)
                (idx0, valid0), (idx1, valid1) = v.arg.to_index(at0), v.arg.to_index(at1)
                step = real(idx1 - idx0)
                want = step.op is Ops.CONST and step.arg == 1 and real(valid0) is real(valid1)
                calls[0] = 0
                assert lw._unit_stride(v, axis) == want
                if lw.lane_forms[v][0].coefficient(axis) not in (None, 1):
                    skipped += 1
                    assert calls[0] == 0
    assert skipped > 0


@pytest.mark.parametrize("op", ["sum", "max"])
def test_lane_fold_by_shuffles_is_the_scalar_tree_bit_for_bit(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reduce whose vector lanes run along the reduce axis folds them after the loop: with lane shuffles the
    pairwise tree is built of whole-vector ops, which must round exactly as the tree of scalar lanes does."""
    import numpy as np

    from lazygrad import Tensor
    from lazygrad.codegen import get_program
    from lazygrad.device import Buffer
    from lazygrad.engine.realize import CompiledRunner, ExecItem

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 256)) * 10.0 ** rng.integers(-6, 7, (64, 256))).astype(np.float32)
    x[3, 17], x[5, :] = np.nan, np.inf
    t = Tensor(x).realize()
    (si,) = (t.sum(-1) if op == "sum" else t.max(-1)).schedule()
    renderer = Device["CPU"].renderer
    outs = []
    for shuffle in (False, True):
        monkeypatch.setattr(renderer, "lane_shuffle", shuffle)
        spec = get_program(si.ast, renderer)
        assert ("__builtin_shufflevector" in spec.src) == shuffle
        out = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
        ExecItem(CompiledRunner("CPU", spec), [out, *si.bufs[1:]]).run()
        outs.append(np.frombuffer(out.as_bytes(), dtype=np.float32))
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    ref = x.astype(np.float64).sum(-1) if op == "sum" else x.max(-1)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-5, atol=1e-3)


def _tile_loop(opts: list[Opt]) -> list[UOp]:
    """The linear UOps inside the reduce loop of a 64 x 256 @ 256 x 64 matmul under `opts`, for AVX2's registers."""
    from lazygrad import Tensor
    from lazygrad.codegen.linearize import linearize
    from lazygrad.codegen.lowerer import lower
    from lazygrad.renderer.cstyle import ClangRenderer

    (si,) = (Tensor.empty(64, 256) @ Tensor.empty(256, 64)).schedule()
    k = Kernel(si.ast, ClangRenderer(1, 32, 16))
    k.merge_axes()
    k.apply_opts(opts)
    uops = linearize(lower(k))
    start = next(i for i, u in enumerate(uops) if u.op is Ops.RANGE and u.arg[1] == "r")
    end = next(i for i, u in enumerate(uops) if u.op is Ops.ENDRANGE and u.src[0] is uops[start])
    return uops[start + 1 : end]


# 4 rows x 2 vectors of 8, the reduce unrolled by 4: the register tile of a matmul on AVX2
TILE_4X2 = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 4)]


def test_tile_products_fold_into_their_accumulators_one_at_a_time() -> None:
    """Each unrolled product is added to its accumulator by itself: every add in the loop has one product operand
    (one multiply-add each), none adds two products (a multiply, then a multiply-add, then an add)."""
    body = _tile_loop(TILE_4X2)
    adds = [u for u in body if u.op is Ops.ADD and u.dtype.count == 8]
    assert len(adds) == 8 * 4
    assert all(sum(s.op is Ops.MUL for s in u.src) == 1 for u in adds)


def test_tile_steps_are_emitted_one_at_a_time() -> None:
    """The unrolled steps of a register tile come out step by step across all 8 accumulators: at any point in the loop
    at most the 2 vectors of one step are live, not all 4 steps' 8 (which do not fit AVX2's 16 registers beside the
    8 accumulators)."""
    body = _tile_loop(TILE_4X2)
    last_use = {s: i for i, u in enumerate(body) for s in u.src}
    vectors = [(i, last_use[u]) for i, u in enumerate(body) if u.op is Ops.LOAD and u.dtype.count == 8]
    assert len(vectors) == 2 * 4
    assert max(sum(a <= i <= b for a, b in vectors) for i in range(len(body))) <= 2


@pytest.mark.parametrize("n,dt", [(2, dtypes.float64), (2, F32), (4, F32), (8, F32), (16, F32), (4, dtypes.float64)])
def test_transpose_gives_the_columns_of_a_square_tile(n: int, dt) -> None:
    """_transpose of n rows: vector c holds lane c of every row, built of n * log2(n) shuffles of two vectors each."""
    from lazygrad.codegen.lowerer import _transpose

    def value(u: UOp):
        if u.op is Ops.CONST:
            return u.arg
        if u.op is Ops.GEP:
            return value(u.src[0])[u.arg]
        assert u.op is Ops.VECTORIZE
        return [value(s) for s in u.src]

    rows = [UOp(Ops.VECTORIZE, dt.vec(n), tuple(UOp.const(dt, i * n + c) for c in range(n))) for i in range(n)]
    cols = _transpose(rows)
    assert [value(c) for c in cols] == [[i * n + c for i in range(n)] for c in range(n)]
    shuffles = {u for c in cols for u in c.toposort if u.op is Ops.VECTORIZE and u not in rows}
    assert len(shuffles) == n * (n.bit_length() - 1)
    assert all(len({s.src[0] for s in u.src}) == 2 for u in shuffles)


@pytest.mark.parametrize("pad", [(0, 0), (1, 7), (3, 5)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_square_tile_of_a_transposing_copy_loads_rows(pad: tuple[int, int], shuffle: bool, monkeypatch) -> None:
    """A copy whose vector lanes lie a row apart, in a tile whose other upcast axis runs along the rows: with lane
    shuffles it loads one vector per row (masked where it reads padding) and transposes them in registers, no scalar
    load; without, a scalar load per lane. Values against numpy either way."""
    import re

    import numpy as np

    from lazygrad import Tensor
    from lazygrad.codegen import get_program
    from lazygrad.device import Buffer
    from lazygrad.engine.realize import CompiledRunner, ExecItem

    xn = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    (si,) = Tensor(xn).realize().pad(((0, 0), pad)).T.contiguous().schedule()
    renderer = Device["CPU"].renderer
    if shuffle and not renderer.masked_load(F32.vec(8)) and pad != (0, 0):
        pytest.skip("no masked vector loads on this CPU")
    monkeypatch.setattr(renderer, "lane_shuffle", shuffle)
    spec = get_program(si.ast, renderer, [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 8)])
    scalar_loads = re.findall(r"float val\d+ = ", spec.src)
    assert (len(scalar_loads), "__builtin_shufflevector" in spec.src) == ((0, True) if shuffle else (64, False))
    out = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(CompiledRunner("CPU", spec), [out, *si.bufs[1:]]).run()
    got = np.frombuffer(out.as_bytes(), dtype=np.float32).reshape(16 + sum(pad), 16)
    np.testing.assert_array_equal(got, np.pad(xn, ((0, 0), pad)).T)


@pytest.mark.parametrize("relu", [False, True])
def test_epilogue_values_wait_for_the_reduce_loop(relu: bool) -> None:
    """A conv's bias, added after the reduce, is loaded after the reduce loop closes (in the output loops' body),
    not above the output loops it does not depend on, where its vectors stayed live through the reduce beside the
    accumulators of the register tile (spills in the inner loop). Whatever the reduce reads stays hoisted."""
    from lazygrad import Tensor
    from lazygrad.codegen.heuristic import hand_coded_optimizations
    from lazygrad.codegen.linearize import linearize
    from lazygrad.codegen.lowerer import lower

    x, w, b = Tensor.empty(8, 16, 16, 16), Tensor.empty(16, 16, 3, 3), Tensor.empty(16)
    out = x.conv2d(w, b, padding=1)
    (si,) = (out.relu() if relu else out).schedule()
    for renderer in (avx2_renderer(1), Device["CPU"].renderer):
        k = Kernel(si.ast, renderer)
        k.merge_axes()
        hand_coded_optimizations(k)
        uops = linearize(lower(k))
        bias = next(u for u in uops if u.op is Ops.DEFINE_GLOBAL and u.dtype.size == 16)
        bias_loads = [i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].src[0] is bias]
        reduce_ends = [i for i, u in enumerate(uops) if u.op is Ops.ENDRANGE and u.src[0].arg[1] == "r"]
        output_ranges = [i for i, u in enumerate(uops) if u.op is Ops.RANGE and u.arg[1] in ("g", "t")]
        assert bias_loads and reduce_ends and output_ranges
        assert min(bias_loads) > max(reduce_ends), k.applied_opts
        # the weights' and the input's loads are inside the reduce, before its end
        assert sum(u.op is Ops.LOAD for u in uops[: min(reduce_ends)]) > 0


def _lowered_with_lane_loads(k_make, monkeypatch: pytest.MonkeyPatch, by_form: bool) -> tuple[UOp, int]:
    """A kernel's lowered sink, and how many vector loads were built from their lanes' scalar loads."""
    from lazygrad.codegen import lowerer as lowerer_module

    if not by_form:
        monkeypatch.setattr(lowerer_module, "_load_by_form", lambda ctx, x: None)
    real, lane_loads = lowerer_module._lane_values, [0]

    def counted(ctx: At, x: UOp) -> list[UOp]:
        lane_loads[0] += x.op is Ops.LOAD
        return real(ctx, x)

    monkeypatch.setattr(lowerer_module, "_lane_values", counted)
    sink = Lowerer(k_make()).lower()
    monkeypatch.undo()
    return sink, lane_loads[0]


def test_loads_along_the_lanes_are_built_from_their_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load whose address steps by one along the lanes (a padded conv's rows merged into 16-lane vectors, masked at
    the image's edges), or not at all (a view of a view broadcast along them), is built from its view's placeholder
    form with only each lane's validity valued: the same lowered kernel as from every lane's scalar load, none of
    which is built (each lane's address was simplified anew: a third of the cold CNN step's lowering)."""
    from lazygrad import Tensor
    from lazygrad.codegen.heuristic import hand_coded_optimizations
    from lazygrad.renderer.cstyle import ClangRenderer

    avx512 = ClangRenderer(threads=1, vector_bytes=64, vector_registers=32)
    avx512.masked_load_lanes = (16, 8)
    x, w = Tensor.empty(4, 8, 8, 8, requires_grad=True), Tensor.empty(16, 8, 3, 3, requires_grad=True)
    out = x.conv2d(w, padding=1)
    out.sum().backward()
    makes = []
    for si in Tensor.schedule(out, x.grad, w.grad):
        if si.ast.op is Ops.SINK:

            def conv(ast: UOp = si.ast) -> Kernel:
                k = Kernel(ast, avx512)
                k.merge_axes()
                hand_coded_optimizations(k)
                return k

            makes.append(conv)
    st = ShapeTracker.from_shape((4, 4)).pad(((1, 1), (1, 1))).reshape((36,)).reshape((4, 9, 1)).expand((4, 9, 16))
    assert len(st.views) == 2
    makes.append(lambda: lowerer(load(st), (4, 9, 16), (Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.UPCAST, 1, 3))).k)
    masked, lane_loads = 0, []
    for make in makes:
        fast, fast_lanes = _lowered_with_lane_loads(make, monkeypatch, True)
        slow, slow_lanes = _lowered_with_lane_loads(make, monkeypatch, False)
        assert fast is slow and fast_lanes == 0
        masked += sum(u.op is Ops.LOAD and len(u.src) > 1 and u.src[1].dtype == dtypes.uint32 for u in fast.toposort)
        lane_loads.append(slow_lanes)
    assert masked > 0 and lane_loads[-1] > 0 and sum(lane_loads) > lane_loads[-1]
