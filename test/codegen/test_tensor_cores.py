"""Tensor cores (the TC opt and its WMMA lowering), run on the PYTHON device, which executes each warp's WMMA with
the same fragment layout the CUDA renderer hands to `mma.sync` (`renderer/tensor_cores.py`). CUDA compile checks of
the same kernels are in test/runtime/test_ops_cuda.py."""

from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Context, Device, Tensor, dtypes
from lazygrad.codegen import get_program
from lazygrad.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from lazygrad.device import Buffer
from lazygrad.engine.realize import CompiledRunner, ExecItem
from lazygrad.renderer import ProgramSpec
from lazygrad.renderer.gpu import CUDARenderer
from lazygrad.renderer.tensor_cores import MMA_F16


def inputs(*shapes: tuple[int, ...], dtype=dtypes.half, seed: int = 0) -> list[tuple[np.ndarray, Tensor]]:  # noqa: ANN001
    """Random matrices as (float32 values exactly representable in `dtype`, the PYTHON tensor holding them)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        t = Tensor(rng.standard_normal(shape).astype(np.float32), device="PYTHON").cast(dtype).realize()
        out.append((t.float().numpy(), t))
    return out


def run(t: Tensor, opts: list[Opt] | None) -> np.ndarray:
    """Compute `t` (one kernel) on PYTHON with `opts` (None: the default opts) into a fresh buffer."""
    return run_spec(t, opts)[0]


def run_spec(t: Tensor, opts: list[Opt] | None) -> tuple[np.ndarray, ProgramSpec]:
    (si,) = t.schedule()
    spec = get_program(si.ast, Device["PYTHON"].renderer, opts)
    out = Buffer("PYTHON", si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(CompiledRunner("PYTHON", spec), [out, *si.bufs[1:]]).run()
    assert ("WMMA" in spec.src) == (opts is None or any(o.op is OptOps.TC for o in opts)), spec.applied_opts
    return _read(out, t), spec


def _read(buf: Buffer, t: Tensor) -> np.ndarray:
    """A half or bfloat16 buffer's values as float32."""
    raw = np.frombuffer(bytes(buf.as_bytes()), dtype=np.uint16 if t.dtype == dtypes.bfloat16 else np.float16)
    if t.dtype == dtypes.bfloat16:
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32).reshape(t.shape)


MATMULS = {
    # name: (shapes, function of tensors, same function of numpy arrays)
    "square": ([(32, 32), (32, 16)], lambda a, b: a @ b, lambda a, b: a @ b),
    "batched": ([(2, 16, 32), (32, 8)], lambda a, b: a @ b, lambda a, b: a @ b),
    "x_wT": ([(16, 48), (24, 48)], lambda a, b: a @ b.T, lambda a, b: a @ b.T),
    # 8 rows: only the swapped assignment fits (B's columns play M, A's rows play N)
    "swapped": ([(8, 32), (32, 16)], lambda a, b: a @ b, lambda a, b: a @ b),
    "epilogue": (
        [(16, 32), (32, 16), (16,)],
        lambda a, b, c: (a @ b + c).relu(),
        lambda a, b, c: np.maximum(a @ b + c, 0),
    ),
}


@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16], ids=str)
@pytest.mark.parametrize("name", MATMULS)
def test_default_opts_use_tensor_cores_and_match_numpy(name, dtype):
    shapes, fn, ref = MATMULS[name]
    pairs = inputs(*shapes, dtype=dtype)
    out = run(fn(*(t for _, t in pairs)), None)
    expected = ref(*(x for x, _ in pairs))
    np.testing.assert_allclose(out, expected, atol=0.05, rtol=1e-2 if dtype == dtypes.half else 2e-2)


@pytest.mark.parametrize(
    "opts",
    [
        [Opt(OptOps.TC, 0, 0)],
        [Opt(OptOps.TC, 1, 0)],  # the other assignment of the factors to A and B
        [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 2)],  # two WMMAs chained per loop iteration
        [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 0)],  # the whole reduce unrolled: no loop, no accumulator
        [Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2)],
        [Opt(OptOps.TC, 0, 0), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2)],  # 4 warps per workgroup
        [Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2)],
        # both inputs staged in shared memory: fragments read from there (A's in 2-wide loads)
        [
            Opt(OptOps.TC, 0, 0),
            Opt(OptOps.LOCAL, 0, 2),
            Opt(OptOps.LOCAL, 1, 2),
            Opt(OptOps.STAGE, 0, 0),
            Opt(OptOps.STAGE, 1, 0),
        ],
        [Opt(OptOps.TC, 1, 0), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.STAGE, 1, 0)],
    ],
    ids=lambda opts: "+".join(f"{o.op.name}{o.axis}_{o.amount}" for o in opts),
)
def test_opts_around_a_tensor_core(opts):
    (a, ta), (b, tb) = inputs((64, 64), (64, 32), seed=1)
    np.testing.assert_allclose(run(ta @ tb, opts), a @ b, atol=0.05, rtol=1e-2)


@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16], ids=str)
def test_default_opts_stage_both_inputs(dtype):
    """A matmul with a reduce loop left after the default opts stages both inputs; x @ w.T too (B's rows are then
    contiguous along K, the other way round from a @ b)."""
    (a, ta), (b, tb), (w, tw) = inputs((64, 128), (128, 64), (32, 128), dtype=dtype, seed=6)
    for t, expected in ((ta @ tb, a @ b), (ta @ tw.T, a @ w.T)):
        out, spec = run_spec(t, None)
        assert [o.op for o in spec.applied_opts].count(OptOps.STAGE) == 2, spec.applied_opts
        np.testing.assert_allclose(out, expected, atol=0.05, rtol=1e-2 if dtype == dtypes.half else 2e-2)


def test_kernel_choices_and_refusals():
    renderer = CUDARenderer()
    (a, ta), (b, tb) = inputs((32, 32), (32, 16))

    def kernel(t: Tensor) -> Kernel:
        (si,) = t.schedule()
        k = Kernel(si.ast, renderer)
        k.merge_axes()
        return k

    k = kernel(ta @ tb)
    assert [(a_first, k.full_shape[m], k.full_shape[n]) for _, a_first, m, n, _ in k.tc_choices()] == [
        (True, 32, 16),
        (False, 16, 32),
    ]
    k.apply_opt(Opt(OptOps.TC, 0, 0))
    assert k.full_shape[-3:] == (16, 8, 16) and k.workgroup_threads == 32
    with pytest.raises(KernelOptError, match="not split"):
        k.apply_opt(Opt(OptOps.GROUP, 0, 2))
    k = kernel(ta @ tb)
    k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
    with pytest.raises(KernelOptError, match="no tensor core"):  # TC is the first opt or none
        k.apply_opt(Opt(OptOps.TC, 0, 0))
    fa, fb = Tensor.empty(32, 32, device="PYTHON"), Tensor.empty(32, 16, device="PYTHON")
    assert kernel(fa @ fb).tc_choices() == [], "float32 has no tensor core here"
    # half values cast to float multiply exactly in float32: the tensor core computes the same
    assert len(kernel(ta.float() @ tb.float()).tc_choices()) == 2
    assert Kernel((ta @ tb).schedule()[0].ast, Device["CPU"].renderer).tc_choices() == []


def test_tensor_core_through_the_tensor_api():
    """The default path (schedule, default opts, run) on PYTHON gives the matmul, in float32 accumulation."""
    (a, ta), (b, tb) = inputs((16, 64), (64, 8), seed=3)
    np.testing.assert_allclose((ta @ tb).float().numpy(), a @ b, atol=0.05, rtol=1e-2)


def test_fragment_layout_is_the_ptx_one():
    """Entries of the m16n8k16 layout as the PTX ISA draws them (lane = 4 * groupID + threadID_in_group), so a
    table that agrees with itself (lowerer and emulator read the same one) is also the one the hardware uses."""
    tc = MMA_F16
    # A: a0,a1 at (g, 2t..2t+1); a2,a3 eight rows down; a4..a7 eight columns right
    assert [tc.coords("a", 5, i) for i in range(8)] == [
        (1, 2),
        (1, 3),
        (9, 2),
        (9, 3),
        (1, 10),
        (1, 11),
        (9, 10),
        (9, 11),
    ]
    # B: b0,b1 at rows (k) 2t..2t+1 of column (n) g; b2,b3 eight rows down
    assert [tc.coords("b", 30, i) for i in range(4)] == [(4, 7), (5, 7), (12, 7), (13, 7)]
    # C/D: c0,c1 at (g, 2t..2t+1); c2,c3 eight rows down
    assert [tc.coords("c", 0, i) for i in range(4)] == [(0, 0), (0, 1), (8, 0), (8, 1)]
    # every lane and entry covers each tile element exactly once
    for name, (rows, cols), n in (("a", (16, 16), 8), ("b", (16, 8), 4), ("c", (16, 8), 4)):
        seen = sorted(tc.coords(name, lane, i) for lane in range(32) for i in range(n))
        assert seen == [(r, c) for r in range(rows) for c in range(cols)], name


def test_conv2d_on_tensor_cores():
    """A convolution is a sum of products too: pixels are M, output channels N, input channels K; the padded border
    makes some fragment entries masked loads."""
    import torch

    (x, tx), (w, tw) = inputs((1, 16, 8, 16), (8, 16, 3, 3), seed=4)
    out = run(tx.conv2d(tw, padding=1), None)
    expected = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    np.testing.assert_allclose(out, expected, atol=0.05, rtol=1e-2)


def test_beam_search_checks_and_keeps_tensor_core_candidates():
    """BEAM compares each candidate with the unoptimized kernel; a tensor core's exact products differ from the
    plain kernel's rounded ones within 16-bit tolerance, so TC candidates pass that check (and win on PYTHON)."""
    from lazygrad.codegen.search import beam_search

    (_, ta), (_, tb) = inputs((32, 32), (32, 16), seed=5)
    (si,) = (ta @ tb).schedule()
    with Context(CACHELEVEL=0):  # search, do not read a winner cached by an earlier run
        opts = beam_search(si.ast, Device["PYTHON"].renderer, 1)
    assert opts and opts[0].op is OptOps.TC
