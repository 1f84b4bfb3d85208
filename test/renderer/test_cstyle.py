"""The C dialect: an int8 dot product is spelled so gcc vectorizes it and still wraps like torch where its sum could
leave int32; vector selects are spelled the way gcc 12.2 compiles right (checked against torch)."""

from __future__ import annotations

import copy
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor, dtypes
from lazygrad.codegen import get_program
from lazygrad.codegen.heuristic import hand_coded_optimizations
from lazygrad.codegen.kernel import Kernel, OptOps
from lazygrad.device import Buffer
from lazygrad.engine.realize import CompiledRunner, ExecItem, run_schedule
from lazygrad.renderer.cstyle import ClangRenderer
from lazygrad.runtime.ops_cpu import CPUProgram
from lazygrad.runtime.threads_cpu import team_launches
from test.helpers import avx2_renderer


def byte_dot(a: np.ndarray, b: np.ndarray) -> Tensor:
    """(rows, k) uint8 times (k,) int8 summed in int32."""
    return (Tensor(a).cast(dtypes.int32) * Tensor(b).cast(dtypes.int32)).sum(-1, dtype=dtypes.int32)


def program(t: Tensor):
    (si,) = t.schedule()
    return get_program(si.ast, Device["CPU"].renderer)


def accumulate_lines(src: str) -> list[str]:
    return [line for line in src.splitlines() if line.strip().startswith("acc0 = ")]


def test_byte_dot_accumulates_in_plain_int_and_stays_a_loop():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (33, 96), dtype=np.uint8), rng.integers(-128, 128, 96, dtype=np.int8)
    a[0], b[:] = 255, -128  # the extremes: 96 * 255 * -128 fits int32
    prg = program(byte_dot(a, b))
    # the sum of 96 products of bytes cannot overflow: `acc += (int)a * (int)b` plainly, which gcc turns into
    # vpdpbusd; spelled through unsigned int (for C's undefined signed overflow) it stays scalar multiplies
    (line,) = accumulate_lines(prg.src)
    assert "unsigned" not in line, prg.src
    # a loop the compiler vectorizes, not explicit vector types widened lane by lane
    assert all(o.op is OptOps.THREAD for o in prg.applied_opts), prg.applied_opts
    np.testing.assert_array_equal(byte_dot(a, b).numpy(), a.astype(np.int64) @ b.astype(np.int64))


def test_int_sum_that_could_overflow_still_wraps():
    # 70000 products of 255 * 127 pass 2**31: the bound of the accumulator says so, and the sum wraps as torch's
    n = 70000
    a, b = np.full((1, n), 255, np.uint8), np.full(n, 127, np.int8)
    (line,) = accumulate_lines(program(byte_dot(a, b)).src)
    assert "unsigned" in line
    want = (a.astype(np.int64) @ b.astype(np.int64) + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(byte_dot(a, b).numpy(), want.astype(np.int32))


def test_int32_sum_of_unbounded_values_wraps():
    x = np.array([2**31 - 1, 1, 5], dtype=np.int32)
    out = Tensor(x).sum(dtype=dtypes.int32)
    assert out.item() == -(2**31) + 5


def _cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and flag in line.split() for line in f)
    except OSError:
        return False


@pytest.mark.skipif(not shutil.which("objdump"), reason="objdump disassembles the compiled kernel")
@pytest.mark.skipif(not (_cpu_has("avx512_vnni") or _cpu_has("avx_vnni")), reason="the CPU has no VNNI dot products")
def test_byte_dot_compiles_to_vnni_dot_products(tmp_path):
    if "gcc" not in os.path.basename(Device["CPU"].compiler.cc):
        pytest.skip("the vectorizer checked is gcc's")
    if "-mno-avxvnni" in Device["CPU"].compiler.flags:
        pytest.skip("this gcc sums offset nibbles wrongly with VNNI (runtime/ops_cpu.py VECTORIZER_PROBES): it is off")
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (64, 128), dtype=np.uint8), rng.integers(-128, 128, 128, dtype=np.int8)
    lib = tmp_path / "k.so"
    lib.write_bytes(Device["CPU"].compiler.compile(program(byte_dot(a, b)).src))
    asm = subprocess.run(["objdump", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "vpdpbusd" in asm


@pytest.mark.parametrize("shape", [(1, 8, 16, 16), (1, 32, 8, 8), (1, 4, 32, 32), (5, 13, 24, 16, 2)])
def test_select_under_a_broadcast_condition(shape: tuple[int, ...]) -> None:
    """Lanes selecting under one per-row condition (pow's gradient guards a zero exponent so): gcc 12.2 with AVX-512
    compiled the lane-wise spelling of that vector wrongly (every lane but the first came out 0)."""
    rng = np.random.default_rng(0)
    small = (*shape[:-2], 1, 1)
    a = rng.uniform(0.5, 3, shape).astype(np.float32)
    b = rng.uniform(0, 3, small).astype(np.float32)
    b.flat[0] = 0.0  # one row takes the other branch
    x, y = Tensor(a), Tensor(b)
    gx, gy = (x**y).sum().gradient(x, y)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (tx**ty).sum().backward()
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gy.numpy(), ty.grad.numpy(), rtol=1e-3, atol=1e-3)
    sel = (y == 0).where(0.0, x * y)
    np.testing.assert_allclose(sel.numpy(), np.where(b == 0, 0.0, a * b), rtol=1e-6)


def test_byte_dot_target_only_on_kernels_of_plain_byte_products():
    """Where the CPU device had to build without VNNI (gcc 12.2 sums offset nibbles wrongly with it), kernels whose
    integer products multiply plain bytes get it back through a target attribute; an offset nibble's kernel does not."""
    from lazygrad.renderer.cstyle import ClangRenderer

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (16, 64), dtype=np.uint8), rng.integers(-128, 128, 64, dtype=np.int8)
    ta, tb = Tensor(a), Tensor(b)
    renderer = ClangRenderer()
    renderer.byte_dot_target = "avxvnni"

    asts: dict[int, object] = {}

    def src(t: Tensor, r: ClangRenderer = renderer) -> str:
        if id(t) not in asts:  # (a tensor is scheduled once)
            (si,) = t.schedule()
            asts[id(t)] = si.ast
        return get_program(asts[id(t)], r).src

    plain = ((ta >> 4).cast(dtypes.int32) * tb.cast(dtypes.int32)).sum(-1, dtype=dtypes.int32)
    offset = (((ta & 15).cast(dtypes.int32) - 8) * tb.cast(dtypes.int32)).sum(-1, dtype=dtypes.int32)
    floats = (Tensor(a.astype(np.float32)) * 2).sum(-1)
    assert "__attribute__((target" not in src(plain, ClangRenderer())  # (VNNI left on: no attribute needed)
    assert '__attribute__((target("avxvnni")))' in src(plain)
    assert "__attribute__((target" not in src(offset)
    assert "__attribute__((target" not in src(floats)


# dtype pairs (compared, selected): masks of one width and masks converted between widths (int8 lanes compared and
# float32 selected, int32 compared and int8 or int64 selected); unsigned lanes compared
MASK_CASES = [
    (np.float32, np.float32),
    (np.float64, np.float64),
    (np.int32, np.int32),
    (np.int64, np.int64),
    (np.int8, np.float32),
    (np.uint8, np.uint8),
    (np.int32, np.int64),
    (np.int32, np.int8),
    (np.float32, np.uint8),
]


def _values(dt: type, rng: np.random.Generator, n: int) -> np.ndarray:
    if np.issubdtype(dt, np.floating):
        v = rng.standard_normal(n).astype(dt)
        v[::7] = np.nan  # NaN compares false, except !=
        v[3::11] = 0.0
        return v
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -100), min(info.max, 100), n, endpoint=True).astype(dt)


@pytest.mark.parametrize("cmp_dt, sel_dt", MASK_CASES)
def test_vector_compares_and_selects_are_lane_masks(cmp_dt: type, sel_dt: type) -> None:
    """Compares, their logic and selects on vectors are spelled as vector ops on lane masks (no select per lane), with
    torch's results: NaN, unsigned lanes, bools cast to numbers and numbers to bools, masks of different widths."""
    rng = np.random.default_rng(0)
    n = 64
    a, b = _values(cmp_dt, rng, n), _values(cmp_dt, rng, n)
    x, y = (rng.integers(-50, 50, n).astype(sel_dt) for _ in range(2))
    ta, tb, tx, ty = (Tensor(v) for v in (a, b, x, y))
    pa, pb, px, py = (torch.from_numpy(v) for v in (a, b, x, y))
    cases = [
        ((ta < tb).where(tx, ty), torch.where(pa < pb, px, py)),
        (((ta != tb) & (ta < 1)).where(tx, ty), torch.where((pa != pb) & (pa < 1), px, py)),
        (((ta == tb) | ~(tb < ta)).where(tx, 3), torch.where((pa == pb) | ~(pb < pa), px, 3).to(px.dtype)),
        ((ta < tb).cast(tx.dtype) + tx, (pa < pb).to(px.dtype) + px),
        (ta.cast(dtypes.bool).where(tx, ty), torch.where(pa.to(torch.bool), px, py)),
        (((ta < tb) ^ (tb < 0)).where(tx, ty), torch.where((pa < pb) ^ (pb < 0), px, py)),
        (((ta < tb) == (tb < 1)).where(tx, ty), torch.where((pa < pb) == (pb < 1), px, py)),
        ((tx < ty).where(ta < tb, tb < ta).where(tx, ty), torch.where(torch.where(px < py, pa < pb, pb < pa), px, py)),
    ]
    # the spelling is checked at AVX-512's width (64-byte vectors: 16 lanes, so every case's narrowest mask fills an
    # SSE register); with AVX2's 32 bytes a mask of 8 bytes is spelled lane by lane on purpose (vector_op_ok). The
    # values are this machine's, from its own renderer
    wide = ClangRenderer(1, 64, 32)
    for i, (got, want) in enumerate(cases):
        (si,) = sched = got.schedule()
        # the kernel, after the prelude's and the vector types' definitions: no select lane by lane
        kernel = get_program(si.ast, wide).src.rsplit("#endif", 1)[1]
        assert "LG_VSEL" in kernel and "?" not in kernel, (i, kernel)
        run_schedule(sched)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"case {i}")


def test_bool_results_of_vector_compares_store_as_zero_and_one() -> None:
    a = np.array([np.nan, 1, -1, 0, 2, 5, -3, 0.5] * 8, np.float32)
    t = Tensor(a)
    np.testing.assert_array_equal((t < 1).numpy(), a < 1)
    np.testing.assert_array_equal(
        ((t < 1) & (t != 0)).cast(dtypes.int32).numpy(), ((a < 1) & (a != 0)).astype(np.int32)
    )
    np.testing.assert_array_equal((~(t < 1)).cast(dtypes.float32).numpy(), (~(a < 1)).astype(np.float32))


def test_vector_selects_of_bools() -> None:
    """bool lanes selected under a compare, then compared and cast: masks as values of a select."""
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    ta, tb, pa, pb = Tensor(a), Tensor(b), torch.from_numpy(a), torch.from_numpy(b)
    got = ((ta < tb).where(ta < 0, tb > 0.5) != (ta > 1)).cast(dtypes.float32) * ta
    want = (torch.where(pa < pb, pa < 0, pb > 0.5) != (pa > 1)).float() * pa
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _run_kernel(t: Tensor, renderer, dtype: type = np.float32) -> tuple[str, np.ndarray]:
    """`t`'s one kernel rendered by `renderer`, compiled and run on its buffers: its source and its output."""
    (si,) = t.schedule()
    spec = get_program(si.ast, renderer)
    prg = CPUProgram(spec.name, Device["CPU"].compiler.compile(spec.src), spec.n_bufs, len(spec.vars))
    bufs = [b.ensure_allocated() for b in si.bufs]
    prg(*[b.ptr for b in bufs])
    out = np.frombuffer(bytes(bufs[0].as_bytes()), dtype=dtype).copy()
    return spec.src, out


def _pragma_renderer():
    renderer = copy.copy(Device["CPU"].renderer)
    renderer.outline_threads = False
    return renderer


needs_outlining = pytest.mark.skipif(
    not Device["CPU"].renderer.outline_threads, reason="THREAD loops are outlined with more than one thread and libgomp"
)


@needs_outlining
@pytest.mark.parametrize("per_index", [True, False])
@pytest.mark.parametrize("shape", [(96, 2048), (7, 50000), (333, 1025)])
def test_outlined_thread_loop_computes_what_the_pragma_does(shape: tuple[int, int], per_index: bool) -> None:
    """A THREAD loop as its own functions calling libgomp (no `#pragma omp`), its body a function of one index or
    of a chunk of them: the same threads (one team launch a run) and the same results, bit for bit, as the OpenMP
    loop gcc lowers itself, and as torch within rounding."""
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)

    def graph() -> Tensor:
        x = Tensor(a).realize()
        return ((x * 1.5 + 0.25).relu() * x).sum(axis=1)

    renderer = copy.copy(Device["CPU"].renderer)
    renderer.outline_index_work = 0 if per_index else 1 << 62
    before = team_launches()
    src, got = _run_kernel(graph(), renderer)
    assert "#pragma omp" not in src and "_lg_par(void *lg_p)" in src, src
    # a chunk's bounds come in the loop index's own type (int here: the shapes are small)
    assert ("int lg_lo, int lg_hi) {" in src) != per_index, src
    assert sum(team_launches()) == sum(before) + 1
    pragma_src, want = _run_kernel(graph(), _pragma_renderer())
    assert "#pragma omp parallel for" in pragma_src
    np.testing.assert_array_equal(got, want)
    x = torch.from_numpy(a)
    np.testing.assert_allclose(got, ((x * 1.5 + 0.25).relu() * x).sum(1).numpy(), rtol=1e-5, atol=1e-4)


@needs_outlining
def test_outlined_thread_loop_launch_functions_are_not_optimized() -> None:
    """Under gcc the outlined loop's entry (which starts the team) and the team's loop over chunks are built at -O0
    (ClangRenderer.launch_attr: optimizing them was ~7% of gcc's CPU on the CNN step's sources), its body with the
    kernel's flags; the results equal the pragma loop's bit for bit."""
    if not Device["CPU"].renderer.launch_attr:
        pytest.skip("the compiler has no optimize attribute")
    a = np.random.default_rng(5).standard_normal((333, 1025)).astype(np.float32)

    def graph() -> Tensor:
        x = Tensor(a).realize()
        return ((x * 1.5 + 0.25).relu() * x).sum(axis=1)

    src, got = _run_kernel(graph(), Device["CPU"].renderer)
    marked = [line for line in src.splitlines() if 'optimize("O0")' in line]
    assert len(marked) == 2, src
    assert sum("_lg_par(void *lg_p)" in line for line in marked) == 1 and not any("_lg_body" in m for m in marked)
    _, want = _run_kernel(graph(), _pragma_renderer())
    np.testing.assert_array_equal(got, want)


@needs_outlining
def test_thread_split_reduce_keeps_the_pragma() -> None:
    """A reduce split among the cores (THREAD_REDUCE) runs inside the serial code that combines the partial sums: that
    loop stays an OpenMP one."""
    a = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32)
    t = Tensor(a).realize().sum()
    (si,) = sched = t.schedule()
    spec = get_program(si.ast, Device["CPU"].renderer)
    if not any(o.op is OptOps.THREAD for o in spec.applied_opts):
        pytest.skip(f"the heuristic did not thread this reduce: {spec.applied_opts}")
    assert "#pragma omp parallel for" in spec.src and "_lg_par" not in spec.src
    run_schedule(sched)
    np.testing.assert_allclose(t.numpy(), a.astype(np.float64).sum(), rtol=1e-4)


@needs_outlining
def test_renamed_outlined_kernels_build_into_one_binary() -> None:
    """Kernels of one name built together are renamed (E_4 -> E_4n1): the outlined loop's functions with them."""
    a = np.random.default_rng(4).standard_normal((64, 4096)).astype(np.float32)
    x = Tensor(a).realize()
    specs = []
    for t in ((x * 2).sum(axis=1), (x + 3).sum(axis=1)):
        (si,) = t.schedule()
        specs.append(get_program(si.ast, Device["CPU"].renderer))
    assert specs[0].name == specs[1].name and "_lg_par" in specs[0].src
    second = specs[1].renamed(specs[1].name + "n1")
    assert f"{specs[1].name}_lg_" not in second.src and f"{second.name}_lg_par" in second.src
    lib = Device["CPU"].compiler.compile_many([specs[0].src, second.src])
    for spec in (specs[0], second):
        CPUProgram(spec.name, lib, spec.n_bufs, 0)


# *** Ops.DP4A without VNNI: vpmaddubsw (saturating int16 pairs) where that is exact, two products where not ***

_S32 = lambda v: v - (1 << 32) if v >= 1 << 31 else v  # noqa: E731
# per lane mask of the unsigned bytes (lanes 0..3, 4..7; None: not masked) -> the form it may render as
DP4A_MASKS = [
    ((0x0F0F0F0F, 0x0F0F0F0F), "small"),  # nibbles: bytes below 128
    ((0x0F0F0F0F, 0xF0F0F0F0), "small"),  # low nibbles and high ones in place (gguf's Q4 lanes): halved first
    ((0x7F7F7F7F, 0x80808080), "small"),  # the largest bytes below 128; a top bit, halved
    ((0xFEFEFEFE, 0xFEFEFEFE), "small"),  # 254 halved: 127
    ((0xFFFFFFFF, 0xFFFFFFFF), "madd"),  # any byte: 255 * -128 twice overflows an int16
    ((0x81818181, 0x0F0F0F0F), "madd"),  # odd and above 127 in lanes 0..3
    (None, "madd"),
]


def _dp4a_case(masks: tuple[int, int] | None) -> tuple[Tensor, np.ndarray]:
    """DP4A over 8 lanes of extreme words (0xFFFFFFFF and 0x80FF7F01 times 0x80808080, 0x7F7F7F7F, mixed), masked
    per lane, with its value by the Python reference of Ops.DP4A (uop/alu.py) for each element."""
    from lazygrad.nn.gguf import dp4a
    from lazygrad.uop.alu import exec_alu
    from lazygrad.uop.ops import Ops

    words = [0xFFFFFFFF, 0x80FF7F01, 0x80808080, 0x7F7F7F7F, 0x7F80FF00, 0, 0x01010101, 0xFEFEFEFE]
    rng = np.random.default_rng(len(words))
    a = np.array([_S32(v) for v in rng.permutation(words * 8)], np.int32).reshape(8, 8)
    b = np.array([_S32(v) for v in ([0x80808080] * 24 + [0x7F7F7F7F] * 24 + words * 2)], np.int32).reshape(8, 8)
    c = rng.integers(-(2**31), 2**31, (8, 8)).astype(np.int32)
    c[0, 0] = 2**31 - 1  # the sum wraps
    ta = Tensor(a)
    if masks is not None:
        ta = ta & (Tensor.arange(8) >= 4).where(_S32(masks[1]), _S32(masks[0]))
    lane_masks = np.array([0xFFFFFFFF] * 8 if masks is None else [masks[0]] * 4 + [masks[1]] * 4, np.int64)
    am = (a.astype(np.int64) & lane_masks).astype(np.uint32).view(np.int32)
    want = np.array(
        [exec_alu(Ops.DP4A, dtypes.int32, [int(x), int(y), int(z)]) for x, y, z in zip(am.flat, b.flat, c.flat)]
    ).reshape(8, 8)
    return dp4a(ta, Tensor(b), Tensor(c), 8), want.astype(np.int32)


def _madd_renderer():
    from lazygrad.renderer.cstyle import DP4A_MADD

    # as on an AVX2 CPU without VNNI, whatever this CPU has (on an AVX-512 CPU the device's 64-byte vectors left
    # 16-lane products, which DP4A_MADD has no form for, lane by lane)
    renderer = avx2_renderer(Device["CPU"].renderer.threads)
    renderer.dp4a_builtins = {8: DP4A_MADD}
    return renderer


@pytest.mark.parametrize("masks, form", DP4A_MASKS)
def test_dp4a_renders_saturating_byte_pairs_only_where_exact(masks, form) -> None:
    """Rendered for AVX2 without VNNI (DP4A_MADD), compiled and run where the CPU has AVX2: the values of the Python
    reference over extreme bytes (255 and 254 times -128, 127 times -128 twice in a pair); and on this device."""
    from lazygrad.renderer.cstyle import DP4A_MADD_PRELUDE

    t, want = _dp4a_case(masks)
    (si,) = t.schedule()
    src = get_program(si.ast, _madd_renderer()).src
    body = src[src.index(DP4A_MADD_PRELUDE) + len(DP4A_MADD_PRELUDE) :]
    other = "madd" if form == "small" else "small"
    assert f"lg_dp4a_{form}(" in body and f"lg_dp4a_{other}(" not in body, src
    if _cpu_has("avx2"):
        _, got = _run_kernel(_dp4a_case(masks)[0], _madd_renderer(), np.int32)
        np.testing.assert_array_equal(got.reshape(8, 8), want)
    np.testing.assert_array_equal(_dp4a_case(masks)[0].numpy(), want)


# a chain of DP4As (each the next one's accumulator) over n words of masks -> the chains of int16 pairs it renders as
DP4A_CHAINS = [
    (0x0F0F0F0F, 8, [8]),  # nibbles: 8 * 2 * 15 * 128 = 30720 fits an int16
    (0x0F0F0F0F, 9, [8]),  # the ninth word would pass it: eight words, and one alone (lg_dp4a_small)
    (0xF0F0F0F0, 8, [8]),  # high nibbles in place, shifted down to nibbles first
    (0x03030303, 8, [8]),
    (0x7F7F7F7F, 4, []),  # 2 * 127 * 128 = 32512: a word alone fills the int16
    (0x3F3F3F3F, 8, [2, 2, 2, 2]),  # 6-bit codes: two words a chain
]


@pytest.mark.parametrize("mask, n, chains", DP4A_CHAINS)
def test_dp4a_chain_adds_int16_pairs_within_their_bound(mask, n, chains) -> None:
    """A chain of DP4As rendered for AVX2 without VNNI adds its words' vpmaddubsw pairs as int16 and calls vpmaddwd
    once a chain, as many words as the int16 bound allows: the values of the Python reference of Ops.DP4A over the
    extreme bytes (all mask bits set times -128, where a pair is largest in magnitude, and random words)."""
    from lazygrad.nn.gguf import dp4a
    from lazygrad.uop.alu import exec_alu
    from lazygrad.uop.ops import Ops

    rng = np.random.default_rng(n)
    a = rng.integers(-(2**31), 2**31, (n, 8, 8)).astype(np.int32)
    a[:, :4] = -1  # every bit of the mask set
    b = np.full((n, 8, 8), _S32(0x80808080), np.int32)
    b[:, 6:] = rng.integers(-(2**31), 2**31, (n, 2, 8))
    want = np.zeros((8, 8), np.int64)
    am = (a.astype(np.int64) & mask).astype(np.uint32).view(np.int32)
    for i in range(n):
        terms = zip(am[i].flat, b[i].flat, want.flat)
        want = np.array([exec_alu(Ops.DP4A, dtypes.int32, [int(x), int(y), int(z)]) for x, y, z in terms])

    def chain() -> Tensor:
        ta, tb = Tensor(a), Tensor(b)
        t = Tensor.zeros(8, 8, dtype=dtypes.int32)
        for i in range(n):
            t = dp4a(ta[i] & _S32(mask), tb[i], t, 8)
        return t

    (si,) = chain().schedule()
    src = get_program(si.ast, _madd_renderer()).src
    body = src[src.index("#endif", src.index("LG_DP4A_MADD")) :]
    calls = [body.count(f"lg_dp4a_{f}(") for f in ("pairsum", "pairs_of", "small", "madd")]
    assert calls == [len(chains), sum(chains), n - sum(chains), 0], src
    want = want.reshape(8, 8).astype(np.int32)
    if _cpu_has("avx2"):
        _, got = _run_kernel(chain(), _madd_renderer(), np.int32)
        np.testing.assert_array_equal(got.reshape(8, 8), want)
    np.testing.assert_array_equal(chain().numpy(), want)


def test_vector_used_by_several_ops_is_pinned_in_a_register():
    """Where the compiler would fold a loaded vector into each multiply-add as a memory operand (register_pin set), a
    matmul tile's panel vectors are loaded into a register once (an empty asm after the load); the scalar loads and
    a renderer without the pin are left alone. The pinned kernel computes the product."""
    a, b = np.random.default_rng(0).standard_normal((2, 64, 64), dtype=np.float32)
    (si,) = (Tensor(a).realize() @ Tensor(b).realize()).schedule()
    plain, pinned = ClangRenderer(1, 32, 16), ClangRenderer(1, 32, 16)
    pinned.register_pin = "v"
    k = Kernel(si.ast, plain)
    k.merge_axes()
    hand_coded_optimizations(k)
    opts = list(k.applied_opts)
    src = get_program(si.ast, pinned, opts).src
    vectors = src.count("= *(lg_float32x8_u*)&data")  # the tile's vector loads (the stores assign to them)
    assert vectors > 0 and src.count('__asm__("" : "+v"(val') == vectors
    assert "__asm__" not in get_program(si.ast, plain, opts).src
    if platform.machine() not in ("x86_64", "AMD64"):
        return  # "v" is an x86 register class
    out = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(CompiledRunner("CPU", get_program(si.ast, pinned, opts)), [out, *si.bufs[1:]]).run()
    np.testing.assert_allclose(np.frombuffer(out.as_bytes(), np.float32).reshape(64, 64), a @ b, rtol=1e-4, atol=1e-4)


def test_folded_load_probe_asks_for_the_pin_only_where_loads_are_folded():
    """gcc tuned for Zen folds a loaded vector into each multiply-add using it: the probe asks for the pin there; gcc
    tuned for Haswell keeps it in a register and is left alone."""
    compiler = Device["CPU"].compiler
    if platform.machine() not in ("x86_64", "AMD64") or "clang" in compiler.cc:  # type: ignore[attr-defined]
        pytest.skip("the probe's assembly is x86's, and the tunes gcc's")
    flags = compiler.flags  # type: ignore[attr-defined]
    try:
        compiler.flags = [*flags, "-mtune=znver3"]  # type: ignore[attr-defined]
        assert compiler._folded_load() == "v"  # type: ignore[attr-defined]
        compiler.flags = [*flags, "-mtune=haswell"]  # type: ignore[attr-defined]
        assert compiler._folded_load() == ""  # type: ignore[attr-defined]
    finally:
        compiler.flags = flags  # type: ignore[attr-defined]


@pytest.mark.skipif(Device.DEFAULT != "CPU", reason="the C renderer's vectors")
@pytest.mark.parametrize("amounts", ["in range", "any"])
def test_int32_vector_right_shift_is_torch_shift(amounts):
    # int32 vectors shift right lane-wise (amounts proven in [0, 32): one instruction; any other amount, as torch,
    # gives the sign in every bit), not lane by lane
    rng = np.random.default_rng(0)
    x = rng.integers(-(2**31), 2**31, (64, 32), dtype=np.int64).astype(np.int32)
    if amounts == "in range":  # an amount per lane, from an arange: its bounds are known
        s = np.arange(32, dtype=np.int32)[None].repeat(64, 0)
        shifted = lambda: Tensor(x) >> Tensor.arange(32, dtype=dtypes.int32).reshape(1, 32).expand(64, 32)  # noqa: E731
    else:
        s = rng.integers(-40, 80, (64, 1), dtype=np.int32).repeat(32, 1)
        shifted = lambda: Tensor(x) >> Tensor(s)  # noqa: E731
    body = program(shifted()).src.split("\nvoid ")[-1]
    assert body.count(">>") == 1 and (">>LG_VSEL" in body) == (amounts == "any")  # one shift of a vector
    inside = (s >= 0) & (s < 32)
    ref = np.where(inside, x >> np.where(inside, s, 0), np.where(x < 0, -1, 0)).astype(np.int32)
    np.testing.assert_array_equal(shifted().numpy(), ref)
    assert torch.equal(torch.tensor(x[:, :1]) >> 40, torch.tensor(np.where(x[:, :1] < 0, -1, 0), dtype=torch.int32))


@pytest.mark.skipif(Device.DEFAULT != "CPU", reason="the C renderer's vectors")
@pytest.mark.parametrize("src", [np.uint8, np.int8])
@pytest.mark.parametrize("dst", [dtypes.int32, dtypes.float32])
def test_eight_bytes_widen_to_32_bit_lanes_in_one_step(src, dst):
    # 8 bytes (a 64-bit vector) cast to 8 lanes of 32 bits: one conversion from the low half of a 16-byte vector (one
    # vpmovzxbd / vpmovsxbd), not 2x steps through 16-bit lanes, which gcc 12 splits into halves (9 instructions)
    a = np.arange(-512, 512).astype(src).reshape(128, 8)
    widened = lambda: Tensor(a).cast(dst) * 3  # noqa: E731
    # rendered as for AVX2 (an AVX-512 CPU's 64-byte vectors take 16 bytes at once, through 16-bit lanes: one step too)
    (si,) = widened().schedule()
    body = get_program(si.ast, avx2_renderer(Device["CPU"].renderer.threads)).src.split("void E_")[-1]
    assert "__builtin_shufflevector" in body and "x8 val0 = *(" in body and "int16x8" not in body, body
    np.testing.assert_array_equal(widened().numpy(), a.astype(np.int32) * 3)


# codes put together from two words, one byte a code (gguf's Q5_K and Q6_K: low bits and high bits) -> whether they
# render as vpmaddubsw pairs (bytes proven below 128 from the masks and shifts) or, not proven, as lg_dp4a_madd
DP4A_JOINED = [
    (lambda a, h: (a & 0x0F0F0F0F) | ((h & 0x03030303) * 16), True),  # Q6_K, quarter 0
    (lambda a, h: ((a >> 4) & 0x0F0F0F0F) | ((h >> 2) & 0x30303030), True),  # Q6_K, quarter 3
    (lambda a, h: ((a >> 4) & 0x0F0F0F0F) | ((h >> 3) & 0x10101010), True),  # Q5_K, sub-block 7
    (lambda a, h: (a & 0x0F0F0F0F) | ((h & _S32(0x80808080)) >> 3), False),  # the sign bit shifted in: unproven
]


@pytest.mark.parametrize("join, small", DP4A_JOINED)
def test_dp4a_of_codes_joined_from_two_words(join, small) -> None:
    from lazygrad.nn.gguf import dp4a
    from lazygrad.uop.alu import exec_alu
    from lazygrad.uop.ops import Ops

    rng = np.random.default_rng(7)
    a, h = (rng.integers(-(2**31), 2**31, (2, 8, 8)).astype(np.int32) for _ in range(2))
    a[:, :2], h[:, :2] = -1, -1  # every bit set
    b = np.full((2, 8, 8), _S32(0x80808080), np.int32)
    b[:, 4:] = rng.integers(-(2**31), 2**31, (2, 4, 8))
    codes = join(a.astype(np.int64), h.astype(np.int64)).astype(np.int64) & 0xFFFFFFFF
    want = np.zeros(64, np.int64)
    for i in range(2):
        want = np.array(
            [
                exec_alu(Ops.DP4A, dtypes.int32, [_S32(int(x)), int(y), int(z)])
                for x, y, z in zip(codes[i].flat, b[i].flat, want)
            ]
        )

    def chain() -> Tensor:
        t = Tensor.zeros(8, 8, dtype=dtypes.int32)
        for i in range(2):
            t = dp4a(join(Tensor(a[i]), Tensor(h[i])), Tensor(b[i]), t, 8)
        return t

    (si,) = chain().schedule()
    src = get_program(si.ast, _madd_renderer()).src
    body = src[src.index("#endif", src.index("LG_DP4A_MADD")) :]
    assert (body.count("lg_dp4a_madd(") == 0) == small and (body.count("lg_dp4a_pairs_of(") > 0) == small, src
    want = want.reshape(8, 8).astype(np.int32)
    if _cpu_has("avx2"):
        _, got = _run_kernel(chain(), _madd_renderer(), np.int32)
        np.testing.assert_array_equal(got.reshape(8, 8), want)
    np.testing.assert_array_equal(chain().numpy(), want)
