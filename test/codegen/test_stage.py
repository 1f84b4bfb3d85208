"""STAGE: each step of a reduce loop, the workgroup copies the tile of an input it is about to read into shared
memory together, then every thread reads its values from there. Run on PYTHON (CUDA's wide loads and tensor
cores, threads in lockstep) and on CL (PoCL: work-items meet at real barriers); CUDA compile checks of staged
kernels are in test/runtime/test_ops_cuda.py, tensor-core cases in test/codegen/test_tensor_cores.py."""

from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Device, Tensor, dtypes
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import AxisType, Kernel, KernelOptError, Opt, OptOps, mul_operands
from lazygrad.codegen.workgroups import default_optimizations
from lazygrad.device import Buffer
from lazygrad.engine.realize import CompiledRunner, ExecItem
from lazygrad.renderer.tensor_cores import MMA_F16
from test.helpers import device_available

DEVICES = [d for d in ("PYTHON", "CL") if device_available(d)]
L, U, R, S = OptOps.LOCAL, OptOps.UPCAST, OptOps.UNROLL, OptOps.STAGE


def rand(device: str, *shape: int, seed: int = 0) -> tuple[np.ndarray, Tensor]:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return x, Tensor(x, device=device).realize()


def run(t: Tensor, opts: list[Opt]) -> tuple[np.ndarray, str]:
    """`t` (one kernel) computed with `opts` into a fresh buffer, and the kernel's source."""
    (si,) = t.schedule()
    device = si.bufs[0].device
    spec = get_program(si.ast, Device[device].renderer, opts)
    out = Buffer(device, si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(CompiledRunner(device, spec), [out, *si.bufs[1:]]).run()
    return np.frombuffer(bytes(out.as_bytes()), dtype=np.float32).reshape(t.shape), spec.src


CASES = {
    # name: (shapes of a and b, whether b is used transposed, opts)
    "both": (
        [(32, 64), (64, 32)],
        False,
        [Opt(L, 0, 4), Opt(L, 1, 4), Opt(U, 0, 2), Opt(R, 0, 4), Opt(S, 0, 0), Opt(S, 1, 0)],
    ),
    "one_input": ([(32, 64), (64, 32)], False, [Opt(L, 1, 8), Opt(U, 1, 4), Opt(R, 0, 2), Opt(S, 1, 0)]),
    # opts after STAGE change the tiles it copies
    "stage_then_upcast": (
        [(32, 64), (64, 32)],
        False,
        [Opt(L, 0, 4), Opt(S, 0, 0), Opt(S, 1, 0), Opt(U, 1, 4), Opt(R, 0, 2)],
    ),
    # 12 threads, tiles of 3 and 4 wide loads: the last round of the copy has threads with nothing to copy
    "uneven_copy": (
        [(24, 32), (32, 16)],
        False,
        [Opt(L, 0, 3), Opt(L, 1, 4), Opt(R, 0, 4), Opt(S, 0, 0), Opt(S, 1, 0)],
    ),
    # rows 98 floats apart: copied 2 floats per load (8-byte aligned), not 4
    "odd_rows": ([(16, 98), (98, 32)], False, [Opt(L, 0, 4), Opt(L, 1, 4), Opt(R, 0, 2), Opt(S, 0, 0), Opt(S, 1, 0)]),
    "x_wT": ([(16, 48), (32, 48)], True, [Opt(L, 0, 4), Opt(L, 1, 8), Opt(R, 0, 4), Opt(S, 0, 0), Opt(S, 1, 0)]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", CASES)
def test_staged_matmul_matches_numpy(name, device):
    (sa, sb), transposed, opts = CASES[name]
    (a, ta), (b, tb) = rand(device, *sa, seed=1), rand(device, *sb, seed=2)
    got, src = run(ta @ (tb.T if transposed else tb), opts)
    np.testing.assert_allclose(got, a @ (b.T if transposed else b), rtol=1e-4, atol=1e-4)
    assert "stage0" in src


@pytest.mark.parametrize("device", DEVICES)
def test_staged_padded_input_reads_zeros(device):
    """A padded input has a masked view: its tile is copied an element at a time, zeros where the mask is off."""
    (a, ta), (b, tb) = rand(device, 30, 60, seed=3), rand(device, 64, 32, seed=4)
    opts = [Opt(L, 0, 4), Opt(L, 1, 4), Opt(R, 0, 4), Opt(S, 0, 0), Opt(S, 1, 0)]
    got, _ = run(ta.pad(((1, 1), (2, 2))) @ tb, opts)
    np.testing.assert_allclose(got, np.pad(a, ((1, 1), (2, 2))) @ b, rtol=1e-4, atol=1e-4)


def _kernel(t: Tensor) -> Kernel:
    (si,) = t.schedule()
    k = Kernel(si.ast, Device["PYTHON"].renderer)
    k.merge_axes()
    return k


def test_refusals_leave_the_kernel_as_it_was():
    _, ta = rand("PYTHON", 32, 32)
    _, tb = rand("PYTHON", 32, 32)
    k = _kernel(ta @ tb)
    with pytest.raises(KernelOptError, match="workgroup"):  # no LOCAL axis: nobody to copy with
        k.apply_opt(Opt(S, 0, 0))
    assert k.staged == [] and k.applied_opts == []
    k.apply_opts([Opt(L, 0, 4), Opt(S, 0, 0)])
    with pytest.raises(KernelOptError, match="already staged"):
        k.apply_opt(Opt(S, 0, 0))
    with pytest.raises(KernelOptError, match="no such input"):
        k.apply_opt(Opt(S, 2, 0))
    with pytest.raises(KernelOptError, match="not split"):
        k.apply_opt(Opt(OptOps.GROUP, 0, 4))
    shape = k.full_shape
    with pytest.raises(KernelOptError, match="reduce loop"):  # the whole reduce unrolled: no step to stage for
        k.apply_opt(Opt(R, 0, 0))
    assert k.full_shape == shape and k.applied_opts == [Opt(L, 0, 4), Opt(S, 0, 0)]
    _, tbig = rand("PYTHON", 32, 4096)
    k = _kernel(ta @ tbig)
    k.apply_opts([Opt(L, 1, 32), Opt(U, 1, 16), Opt(R, 0, 16), Opt(S, 1, 0)])  # 16 x 512 floats: 32 KB
    with pytest.raises(KernelOptError, match="shared memory"):
        k.apply_opt(Opt(U, 1, 2))


def test_cpu_has_no_stage():
    (si,) = (Tensor.empty(32, 64, device="CPU") @ Tensor.empty(64, 32, device="CPU")).schedule()
    k = Kernel(si.ast, Device["CPU"].renderer)
    with pytest.raises(KernelOptError, match="no shared memory"):
        k.apply_opt(Opt(S, 0, 0))


@pytest.mark.parametrize("pitch, width", [(100, 4), (102, 2), (101, 1)])
def test_wide_loads_only_where_every_load_is_aligned(pitch, width):
    """A's rows (100 floats of a wider array) lie `pitch` floats apart: a 16-byte load (4 floats) is aligned in
    every row only where 4 divides the pitch, an 8-byte one where 2 does."""
    (a, ta), (b, tb) = rand("PYTHON", 32, pitch, seed=7), rand("PYTHON", 100, 32, seed=8)
    opts = [Opt(L, 0, 4), Opt(L, 1, 4), Opt(R, 0, 4), Opt(S, 0, 0), Opt(S, 1, 0)]
    kern = _kernel(ta[:, :100] @ tb)
    kern.apply_opts(opts)
    assert min(kern.stage_layout(i).width for i in kern.staged) == width
    got, _ = run(ta[:, :100] @ tb, opts)
    np.testing.assert_allclose(got, a[:, :100] @ b, rtol=1e-4, atol=1e-4)


def _words(k: Kernel, i: int, operand: str, entry: int) -> list[int]:
    """The 4-byte word of shared memory each lane of a warp reads for fragment `entry` of tensor-core `operand`
    ("a" or "b") from staged input `i`, with every other axis of the tile at 0."""
    lay = k.stage_layout(i)
    m, n, kk = k.axes_of(AxisType.TC)
    words = []
    for lane in range(32):
        row, col = MMA_F16.coords(operand, lane, entry)
        coords = {m: row, kk: col} if operand == "a" else {kk: row, n: col}
        words.append(sum(coords.get(a, 0) * p for a, p in zip(lay.axes, lay.pitch)) * 2 // 4)
    return words


def test_tensor_core_fragments_read_without_bank_conflicts():
    """The padding after each contiguous run puts the rows a warp reads for one fragment register in different
    banks (32 banks of 4-byte words; lanes reading the same word share one read): the default half matmul."""
    a = Tensor.empty(256, 256, dtype=dtypes.half, device="PYTHON")
    b = Tensor.empty(256, 256, dtype=dtypes.half, device="PYTHON")
    k = _kernel(a @ b)
    default_optimizations(k)
    assert sorted(k.staged) == [0, 1] and k.tensor_core is MMA_F16
    x, y = (k.stage_candidates.index(f) for f in mul_operands(k.reduceops[0], dtypes.half))
    a_input, b_input = (x, y) if k.tc_a_first else (y, x)
    for operand, i, entries in (("a", a_input, 8), ("b", b_input, 4)):
        for entry in range(entries):
            words_in_bank: dict[int, set[int]] = {}
            for w in _words(k, i, operand, entry):
                words_in_bank.setdefault(w % 32, set()).add(w)
            assert all(len(ws) == 1 for ws in words_in_bank.values()), (operand, entry, words_in_bank)


def _default_opts(t: Tensor, renderer: object) -> list[Opt]:
    si = t.schedule()[-1]  # the matmul (on the CPU, after the copy of B into panels)
    k = Kernel(si.ast, renderer)  # type: ignore[arg-type]
    k.merge_axes()
    return default_optimizations(k).applied_opts


def test_big_float_matmul_defaults_to_a_staged_tile():
    """On a GPU with 16-byte loads (CUDA; PYTHON models it) a float matmul with enough 64 x 128 tiles to fill the
    GPU gets them, both inputs staged; the threads take the output's innermost axis whichever factor moves it."""
    python = Device["PYTHON"].renderer
    big = {n: Tensor.empty(*n, device="PYTHON") for n in ((2048, 1024), (1024, 2048), (2048, 2048))}
    tile = [Opt(L, 1, 16), Opt(L, 0, 8), Opt(U, 1, 8), Opt(U, 0, 8), Opt(R, 0, 8), Opt(S, 0, 0), Opt(S, 1, 0)]
    assert _default_opts(big[(2048, 1024)] @ big[(1024, 2048)], python) == tile
    assert _default_opts(big[(2048, 2048)] @ big[(1024, 2048)].T, python) == tile  # x @ w.T: w's rows are N
    small = Tensor.empty(256, 256, device="PYTHON")
    assert S not in [o.op for o in _default_opts(small @ small, python)], "too few tiles to fill a GPU"
    cpu = Tensor.empty(2048, 1024, device="CPU") @ Tensor.empty(1024, 2048, device="CPU")
    assert S not in [o.op for o in _default_opts(cpu, Device["CPU"].renderer)]


@pytest.mark.parametrize("device", DEVICES)
def test_staged_tile_matches_numpy(device):
    """The default tile of a big float matmul (one workgroup of it here) computes the product."""
    (a, ta), (b, tb) = rand(device, 64, 32, seed=5), rand(device, 32, 128, seed=6)
    tile = [Opt(L, 1, 16), Opt(L, 0, 8), Opt(U, 1, 8), Opt(U, 0, 8), Opt(R, 0, 8), Opt(S, 0, 0), Opt(S, 1, 0)]
    got, _ = run(ta @ tb, tile)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
