"""Optimizations change how a kernel runs, never what it computes: each opt list is checked against NOOPT."""

import itertools
import pathlib
import re

import numpy as np
import pytest

from lazygrad import Context, Device, Tensor
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps
from lazygrad.device import Buffer
from lazygrad.engine.realize import CompiledRunner, ExecItem


def _ast_and_bufs(t: Tensor):
    sched = t.schedule()
    assert len(sched) == 1
    return sched[0].ast, list(sched[0].bufs)


def run_with_opts(ast, bufs, opts: list[Opt]) -> np.ndarray:
    """Run the kernel with `opts` into a fresh output buffer."""
    out = Buffer("CPU", bufs[0].size, bufs[0].dtype)
    spec = get_program(ast, Device["CPU"].renderer, opts)
    ExecItem(CompiledRunner("CPU", spec), [out, *bufs[1:]]).run()
    return np.array(out.as_bytes().cast("f").tolist(), dtype=np.float32)


def realized(*shape: int, seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).realize()


def elementwise(shape):
    a, b = realized(*shape), realized(*shape, seed=1)
    return lambda: (a * b + a.T.T).exp2()


def reduce_last(shape):
    a = realized(*shape)
    return lambda: (a * 2).sum(-1)


def reduce_first(shape):
    a = realized(*shape)
    return lambda: a.max(0)


def matmul(n, k, m):
    a, b = realized(n, k), realized(k, m, seed=2)
    return lambda: (a.reshape(n, 1, k) * b.T.reshape(1, m, k)).sum(2)


CASES = {
    "ew_12x8": (elementwise((12, 8)), [OptOps.UPCAST]),
    "ew_7x5": (elementwise((7, 5)), [OptOps.UPCAST]),
    "red_6x16": (reduce_last((6, 16)), [OptOps.UPCAST, OptOps.UNROLL]),
    "red_first_8x6": (reduce_first((8, 6)), [OptOps.UPCAST, OptOps.UNROLL]),
    "mm_8x12x4": (matmul(8, 12, 4), [OptOps.UPCAST, OptOps.UNROLL]),
}


def candidate_opts(k: Kernel, kinds: list[OptOps]) -> list[Opt]:
    out = []
    for op in kinds:
        axes = k.axes_of(AxisType.GLOBAL) if op is OptOps.UPCAST else k.axes_of(AxisType.REDUCE)
        for i, ax in enumerate(axes):
            for amt in (0, 2, 3, 4, 5, 7):
                if amt == 0 or k.full_shape[ax] % amt == 0:
                    out.append(Opt(op, i, amt))
    return out


@pytest.mark.parametrize("name", CASES)
def test_opts_match_noopt(name):
    make, kinds = CASES[name]
    ast, bufs = _ast_and_bufs(make())
    ref = run_with_opts(ast, bufs, [])
    k = Kernel(ast, Device["CPU"].renderer)
    k.merge_axes()
    singles = candidate_opts(k, kinds)
    tried = 0
    for combo in itertools.chain(((o,) for o in singles), itertools.combinations(singles, 2)):
        try:
            out = run_with_opts(ast, bufs, list(combo))
        except KernelOptError:
            continue
        tried += 1
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=f"opts {combo}")
    assert tried >= 3


def test_invalid_opts_raise():
    ast, _ = _ast_and_bufs(elementwise((7, 5))())
    with pytest.raises(KernelOptError):
        get_program(ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 0, 3)])  # 5 is not divisible by 3 after merge
    with pytest.raises(KernelOptError):
        get_program(ast, Device["CPU"].renderer, [Opt(OptOps.UNROLL, 0, 2)])  # no reduce axis
    with pytest.raises(KernelOptError):
        get_program(ast, Device["CPU"].renderer, [Opt(OptOps.LOCAL, 0, 5)])  # the C renderer has no workgroups


def test_contiguous_axes_merge_into_one_loop():
    a = realized(64, 64, 64)
    ast, _ = _ast_and_bufs(a + 1)
    with Context(NOOPT=1):
        spec = get_program(ast, Device["CPU"].renderer)
    assert spec.name == "E_262144"
    assert spec.src.count("for (") == 1


def test_noopt_name_and_default_upcast():
    a = realized(256)
    ast, _ = _ast_and_bufs(a * 2)
    with Context(NOOPT=1):
        plain = get_program(ast, Device["CPU"].renderer)
    opt = get_program(ast, Device["CPU"].renderer)
    assert plain.name == "E_256" and plain.applied_opts == ()
    assert opt.name != plain.name and opt.applied_opts


def test_kernel_name_kinds():
    ast, _ = _ast_and_bufs(reduce_last((16, 4))())
    with Context(NOOPT=1):
        spec = get_program(ast, Device["CPU"].renderer)
    assert spec.name == "r_16_4"


def _default_opts_knobs() -> list[tuple[str, str]]:
    """Every module-level setting the default opts read from the environment (`NAME = getenv(...)` in heuristic.py
    and workgroups.py), found in the source so that a knob added later without a place in the key fails here."""
    import lazygrad.codegen as codegen

    found = []
    for module in ("heuristic", "workgroups"):
        text = pathlib.Path(getattr(codegen, module).__file__).read_text()
        found += [(module, name) for name in re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=\s*getenv\(", text, re.M)]
    return found


def test_the_knob_scan_finds_the_knobs():
    assert {("heuristic", "ROW_CHUNK_BYTES"), ("workgroups", "TC_STAGE")} <= set(_default_opts_knobs())


@pytest.mark.parametrize("module, knob", _default_opts_knobs())
def test_the_default_opts_knobs_key_the_disk_cache(monkeypatch, module, knob):
    """A knob of the default opts (set in the environment, read at import) changes the program's disk-cache key: a
    process that set VECTOR_BYTES=16 was served the kernel another process had built with the default width."""
    import lazygrad.codegen as codegen

    (si,) = (Tensor(np.ones((64, 64), np.float32)).realize() * 2).schedule()
    renderer = Device["CPU"].renderer
    before = codegen._program_key(si.ast, renderer)
    monkeypatch.setattr(getattr(codegen, module), knob, getattr(getattr(codegen, module), knob) + 1)
    assert codegen._program_key(si.ast, renderer) != before


def _padded_conv(size: tuple[int, int], stride: int = 1, dilation: int = 1):
    """A padded 3x3 conv's one kernel, built through its windows (Tensor._pool) as conv2d builds an unstrided one: a
    strided conv2d computes over the input's phases instead, with no padded window."""
    x, w = realized(2, 3, *size), realized(4, 3, 3, 3, seed=1)
    win = x._pool((3, 3), stride, dilation, [(1, 1), (1, 1)])  # (2, 3, *out, 3, 3)
    out = win.shape[2:4]
    win = win.reshape(2, 1, 3, *out, 3, 3).expand(2, 4, 3, *out, 3, 3).permute(0, 1, 3, 4, 2, 5, 6)
    return _ast_and_bufs((win * w.reshape(1, 4, 1, 1, 3, 3, 3)).sum((4, 5, 6)))


@pytest.mark.parametrize("size,stride,dilation", [((8, 8), 1, 1), ((4, 6), 1, 1), ((5, 6), 1, 2), ((7, 6), 2, 1)])
def test_merge_of_padded_pixel_axes_computes_as_noopt(size, stride, dilation):
    """MERGE makes one axis of a padded conv's output rows and columns (its input view gets a view on top that splits
    the merged index again), which the other opts then split as they like: vectors across rows, rows of a tile."""
    ast, bufs = _padded_conv(size, stride, dilation)
    ref = run_with_opts(ast, bufs, [])
    k = Kernel(ast, Device["CPU"].renderer)
    k.merge_axes()
    assert k.full_shape[:2] == (2, 4) and k.axis_types[3] is AxisType.GLOBAL  # (batch, out channels, rows, columns)
    pixels = k.full_shape[2] * k.full_shape[3]
    merge = Opt(OptOps.MERGE, 2, 0)
    k.apply_opt(merge)
    assert k.full_shape[2] == pixels and len(k.full_shape) == 6
    lanes = max(d for d in range(2, 17) if pixels % d == 0)
    for opts in ([], [Opt(OptOps.UPCAST, 2, lanes)], [Opt(OptOps.UPCAST, 2, lanes), Opt(OptOps.UPCAST, 1, 4)]):
        out = run_with_opts(ast, bufs, [merge, *opts, Opt(OptOps.UNROLL, 2, 3)])
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=f"opts {opts}")
    # the window's axes merge too (3 x 3 taps as one reduce axis of 9)
    np.testing.assert_allclose(run_with_opts(ast, bufs, [Opt(OptOps.MERGE, 4, 0)]), ref, rtol=1e-5, atol=1e-5)


def test_merge_refuses_axes_of_two_kinds_and_the_last_axis():
    ast, _ = _padded_conv((8, 8))  # (batch, out channels, rows, columns), then (in channels, window rows, columns)
    with pytest.raises(KernelOptError):
        get_program(ast, Device["CPU"].renderer, [Opt(OptOps.MERGE, 3, 0)])  # columns with in channels
    with pytest.raises(KernelOptError):
        get_program(ast, Device["CPU"].renderer, [Opt(OptOps.MERGE, 6, 0)])  # the window's columns


@pytest.mark.parametrize("amount", [3, 5, 16])
def test_overlapping_tiles_over_a_masked_axis_compute_as_noopt(amount: int):
    """OVERLAP along an axis a view masks (a padded input read by its own view, as the taps of a conv's input
    gradient): the mask cannot be cut into (tile start, lane), so a view on top indexes the view at start + lane."""
    a = realized(6, 17)
    ast, bufs = _ast_and_bufs((a.pad(((0, 0), (2, 3))) * 2 + 1).contiguous())
    k = Kernel(ast, Device["CPU"].renderer)
    k.merge_axes()
    assert k.full_shape == (6, 22)
    k.apply_opt(Opt(OptOps.OVERLAP, 1, amount))
    assert any(len(st.views) > 1 for st in k.sts)  # the masked input's view on top
    ref = run_with_opts(ast, bufs, [])
    np.testing.assert_allclose(run_with_opts(ast, bufs, [Opt(OptOps.OVERLAP, 1, amount)]), ref)
