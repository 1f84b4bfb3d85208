"""The default opts' register tile on a CPU with 32 AVX-512-sized registers: its shape, and the kernel it makes
computing what torch does."""

import numpy as np
import pytest
import torch

from lazygrad import Device, Tensor
from lazygrad.codegen import get_program, heuristic
from lazygrad.codegen.heuristic import hand_coded_optimizations
from lazygrad.codegen.kernel import AxisType, Kernel, Opt, OptOps
from lazygrad.device import Buffer
from lazygrad.engine.realize import CompiledRunner, ExecItem, run_schedule
from lazygrad.renderer.cstyle import ClangRenderer


@pytest.fixture(autouse=True)
def _plain_convs(monkeypatch):
    """The convs here are the kernel a training step runs, over the input and weight as they are: not the copies in
    channel blocks that a conv without gradients may read on this CPU (Renderer.conv_blocks)."""
    # on the class: an attribute set on the device's renderer would stay in its vars() (its programs' cache key)
    monkeypatch.setattr(ClangRenderer, "conv_blocks", lambda self, *args: 0)


def _tile(t: Tensor, masked_load_lanes: tuple[int, ...] = (), threads: int = 1) -> tuple[Kernel, np.ndarray]:
    """The heuristic's kernel for the one kernel computing `t` on a 64-byte, 32-register CPU with `threads` cores,
    and its result when compiled with those opts and run here."""
    (si,) = t.schedule()
    renderer = ClangRenderer(threads=threads, vector_bytes=64, vector_registers=32)
    renderer.masked_load_lanes = masked_load_lanes
    k = Kernel(si.ast, renderer)
    k.merge_axes()
    hand_coded_optimizations(k)
    out = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
    spec = get_program(si.ast, Device["CPU"].renderer, list(k.applied_opts))
    ExecItem(CompiledRunner("CPU", spec), [out, *si.bufs[1:]]).run()
    return k, np.frombuffer(out.as_bytes(), dtype=np.float32).reshape(t.shape)


def _upcasts(k: Kernel) -> list[int]:
    return [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UPCAST]


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_matmul_tile_is_rows_of_two_vectors():
    """Plain vector loads: 8 rows, each meeting 2 vectors of the right-hand side (16 accumulators)."""
    a, b = _rand(64, 96), _rand(96, 64, seed=1)
    k, got = _tile(Tensor(a).realize() @ Tensor(b).realize())
    assert sorted(_upcasts(k)) == [2, 8, 16]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [128, 96])
def test_panel_matmul_shares_out_its_columns(n: int):
    """A matmul over B in panels of 16 columns: the cores share out the column pairs, each keeping its panels in its
    own cache while the rows stream, where the pairs go round evenly (4 of them); 3 pairs share out the rows."""
    rows, k_ = 64, 96
    a, b = _rand(rows, k_), _rand(k_, n, seed=1)
    panels = Tensor(b).reshape(k_, n // 16, 16).permute(1, 0, 2).contiguous().realize()
    # the rows outermost, as the scheduler builds a matmul over panels (schedule/panels.py)
    out = (Tensor(a).realize().reshape(rows, 1, k_, 1) * panels.reshape(1, n // 16, k_, 16)).sum(-2)
    k, got = _tile(out, threads=2)
    assert sorted(_upcasts(k)) == [2, 8, 16]
    threaded = [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.THREAD]
    assert threaded == ([n // 32] if n == 128 else [rows // 8])
    ref = (a @ b).reshape(rows, n // 16, 16)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_panel_matmul_on_one_core_runs_its_columns_outermost():
    """One core: the column pairs are still the outer loop (a SWAP), so each pair's panels are reused from cache
    while the rows stream."""
    rows, k_, n = 64, 96, 128
    a, b = _rand(rows, k_), _rand(k_, n, seed=1)
    panels = Tensor(b).reshape(k_, n // 16, 16).permute(1, 0, 2).contiguous().realize()
    out = (Tensor(a).realize().reshape(rows, 1, k_, 1) * panels.reshape(1, n // 16, k_, 16)).sum(-2)
    k, got = _tile(out, threads=1)
    assert any(o.op is OptOps.SWAP for o in k.applied_opts)
    assert not k.axes_of(AxisType.THREAD)
    assert k.full_shape[k.axes_of(AxisType.GLOBAL)[0]] == n // 32
    np.testing.assert_allclose(got, (a @ b).reshape(rows, n // 16, 16), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_panel_matmul_runs_many_rows_in_chunks(monkeypatch, threads: int):
    """Rows of the left-hand side over ROW_CHUNK_BYTES run in chunks, the chunk outermost: every column pair then
    reuses a chunk from cache instead of streaming all rows. One core: a BLOCK of the rows before the column pairs;
    two: the cores share out the chunks, each running the column pairs, then the chunk's rows."""
    monkeypatch.setattr(heuristic, "ROW_CHUNK_BYTES", 8192)
    rows, k_, n = 128, 96, 128  # 48 KB of rows, 3 KB a tile of 8: 8 chunks of 2 tiles
    a, b = _rand(rows, k_), _rand(k_, n, seed=1)
    panels = Tensor(b).reshape(k_, n // 16, 16).permute(1, 0, 2).contiguous().realize()
    out = (Tensor(a).realize().reshape(rows, 1, k_, 1) * panels.reshape(1, n // 16, k_, 16)).sum(-2)
    k, got = _tile(out, threads=threads)
    glob = [k.full_shape[g] for g in k.axes_of(AxisType.GLOBAL)]
    if threads == 1:
        assert any(o.op is OptOps.BLOCK for o in k.applied_opts)
        assert glob == [8, n // 32, 2]
    else:
        assert [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.THREAD] == [8]
        assert glob == [n // 32, 2]
    np.testing.assert_allclose(got, (a @ b).reshape(rows, n // 16, 16), rtol=1e-4, atol=1e-4)


def test_panel_copy_reads_whole_cache_lines():
    """B copied into panels of 8 float32 columns on a 32-byte CPU: a panel's vector is half a 64-byte row of B, the
    next panel's the other half, so each iteration copies two panels' vectors (whole lines read)."""
    k_, n = 64, 128
    b = _rand(k_, n)
    out = Tensor(b).realize().reshape(k_, n // 8, 8).permute(1, 0, 2).contiguous()
    (si,) = out.schedule()
    k = Kernel(si.ast, ClangRenderer(threads=1, vector_bytes=32, vector_registers=16))
    k.merge_axes()
    hand_coded_optimizations(k)
    assert sorted(_upcasts(k)) == [2, 8]
    got = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(
        CompiledRunner("CPU", get_program(si.ast, Device["CPU"].renderer, list(k.applied_opts))), [got, *si.bufs[1:]]
    ).run()
    ref = b.reshape(k_, n // 8, 8).transpose(1, 0, 2)
    np.testing.assert_array_equal(np.frombuffer(got.as_bytes(), dtype=np.float32).reshape(ref.shape), ref)


@pytest.mark.parametrize("rows,tile", [(35, 7), (33, 3), (37, 1)])
def test_panel_matmul_of_odd_rows_tiles_a_divisor(rows: int, tile: int):
    """An odd row count (a prompt's tokens) gets the largest divisor up to 8 as the tile's rows (a prime: one row),
    each row meeting 2 vectors of the panels."""
    k_, n = 96, 128
    a, b = _rand(rows, k_), _rand(k_, n, seed=1)
    panels = Tensor(b).reshape(k_, n // 16, 16).permute(1, 0, 2).contiguous().realize()
    # the panels outermost, as nn.PanelMatrix.linear builds a model's product
    out = (Tensor(a).realize().reshape(1, rows, k_, 1) * panels.reshape(n // 16, 1, k_, 16)).sum(-2)
    k, got = _tile(out, threads=2)
    assert sorted(_upcasts(k)) == sorted([2, 16] + ([tile] if tile > 1 else []))
    np.testing.assert_allclose(got, (a @ b).reshape(rows, n // 16, 16).transpose(1, 0, 2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [16, 32])
@pytest.mark.parametrize("masked", [False, True])
def test_padded_conv_tile(size: int, masked: bool):
    """Without masked loads the shifted window's lanes are gathered one by one at the padding: one vector of them
    serves 16 output channels. With them, 8 output channels meet the vectors of 2 images. Either way the window's
    row is unrolled (its three shifted vectors share their loads)."""
    x, w = _rand(2, 8, size, size), _rand(32, 8, 3, 3, seed=1)
    k, got = _tile(Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1), (16,) if masked else ())
    assert sorted(_upcasts(k)) == ([2, 8, 16] if masked else [16, 16])
    assert [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UNROLL] == [3]
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size,stride", [(16, 1), (17, 1), (8, 1), (16, 2)])
def test_padded_window_loads_its_edge_lanes_under_a_mask(size: int, stride: int):
    """Where the CPU loads under a mask of lanes (AVX-512's mask registers, AVX's vmaskmovps), the lanes of a shifted
    window that fall in the padding are masked off instead of gathered one by one: at the first and last element of
    the input too, where the vector's address lies outside the buffer (rows of 17, no whole vectors, are merged into
    vectors across rows: _merge_short_rows). A strided conv is a copy of the input's phases (its padding included),
    then a conv of them without padding: nothing masked. The result is torch's either way."""
    x, w = _rand(1, 2, size, size), _rand(16, 2, 3, 3, seed=1)
    out = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1, stride=stride)
    sched = out.schedule()
    assert len(sched) == (1 if stride == 1 else 2)
    si = sched[-1]
    src = get_program(si.ast, Device["CPU"].renderer).src
    run_schedule(sched)
    lanes = Device["CPU"].renderer.masked_load_lanes
    masked = "_mask((const void*)" in src or "__builtin_ia32_maskloadps" in src
    assert masked == (stride == 1 and bool(lanes))
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, stride=stride).numpy()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_max_pool_of_biased_input_gets_no_tile():
    """relu(x + bias) max-pooled: the bias is the only input shared along an output axis, and the pooling loop does
    not move through it, so a register tile would only grow the code; the plain kernel upcasts one axis at most."""
    x, bias = _rand(4, 16, 8, 8), _rand(16, 1, 1, seed=1)
    out = (Tensor(x).realize() + Tensor(bias).realize()).relu().max_pool2d(2)
    k, got = _tile(out)
    assert len(_upcasts(k)) <= 1
    ref = torch.nn.functional.max_pool2d(torch.relu(torch.from_numpy(x) + torch.from_numpy(bias)), 2).numpy()
    np.testing.assert_allclose(got, ref)


@pytest.mark.parametrize("wide", [False, True])
def test_eight_lane_masked_load_as_half_of_a_sixteen_lane_one(wide: bool, monkeypatch: pytest.MonkeyPatch):
    """An 8-lane masked load is spelled as the low half of a 16-lane one where AVX-512VL is missing or taken away
    from some kernels (masked_load_16): the window of a padded 8x8 conv at the first and last element of its input,
    where the 16 lanes' addresses run 8 past the buffer's end (masked off, so no fault), computes what torch does."""
    from lazygrad.runtime.ops_cpu import _cpu_flags

    renderer = Device["CPU"].renderer
    if 8 not in renderer.masked_load_lanes or renderer.masked_load_lane_mask:
        pytest.skip("no AVX-512 masked load on this CPU")
    if not wide and "avx512vl" not in _cpu_flags().split():
        pytest.skip("no 8-lane masked load of this spelling on this CPU")
    monkeypatch.setattr(renderer, "lane_select_target", "")  # this conv builds no lanes from selects: VL stays
    monkeypatch.setattr(renderer, "masked_load_16", wide)
    x, w = _rand(1, 2, 8, 8), _rand(16, 2, 3, 3, seed=1)
    (si,) = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1).schedule()
    # lanes along the rows of 8 (the heuristic would merge two rows into 16 lanes: _merge_short_rows)
    spec = get_program(si.ast, renderer, [Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UNROLL, 2, 3)])
    assert ("loadups512_mask" in spec.src) == wide and ("loadups256_mask" in spec.src) == (not wide)
    out = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(CompiledRunner("CPU", spec), [out, *si.bufs[1:]]).run()
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(np.frombuffer(out.as_bytes(), np.float32).reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


def test_tiny_cpu_kernel_stays_a_plain_loop():
    """A softmax row max of 64 x 10 (the digits CNN's loss): fewer iterations than an upcast could pay for, so no opts
    (upcast, it was 16 accumulators of C for a kernel of well under a microsecond)."""
    a = _rand(64, 10)
    k, got = _tile(Tensor(a).realize().max(-1))
    assert k.applied_opts == []
    np.testing.assert_array_equal(got, a.max(-1))


def test_tiny_kernel_with_a_long_reduce_keeps_vector_accumulators():
    """A decode step's RMSNorm sum of squares over 576: tiny, but a plain loop would be 576 dependent adds."""
    a = _rand(576)
    k, got = _tile((Tensor(a).realize() ** 2).sum())
    assert k.applied_opts and all(o.op is OptOps.UNROLL for o in k.applied_opts)
    np.testing.assert_allclose(got, (a.astype(np.float64) ** 2).sum(), rtol=1e-5)


def test_ops_split_per_lane_leave_the_loop_to_the_compiler():
    """An elementwise chain of uint32 shifts (as in Tensor.rand's threefry), which the C renderer spells lane by lane:
    upcast, each op would be repeated 16 times; plain, the C compiler's vectorizer takes the loop."""
    x = np.arange(4096, dtype=np.uint32) * np.uint32(2654435761)
    t, want = Tensor(x).realize(), x.copy()
    for shift in (13, 15, 26, 6, 17, 29, 16, 24) * 5:
        t = t + ((t << shift) | (t >> (32 - shift)))
        want = want + ((want << np.uint32(shift)) | (want >> np.uint32(32 - shift)))
    k, _ = _tile(t.cast("float32"))
    assert _upcasts(k) == []
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("rows", [35, 21, 9])
def test_odd_row_matmul_and_its_gradients_match_torch(rows: int):
    """A product of an odd number of rows (a tile of 7 or 3 rows), forward and backward, through the default opts."""
    a, b = _rand(rows, 96), _rand(96, 64, seed=1)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    out = x @ w
    (out * out).sum().backward()
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tout = tx @ tw
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)


def _opts_on(make, renderer: ClangRenderer) -> list[list[tuple[str, int, int]]]:
    """The heuristic's opts for each kernel of the tensor `make()` builds, on `renderer`."""
    out = []
    for si in make().schedule():
        k = Kernel(si.ast, renderer)
        k.merge_axes()
        hand_coded_optimizations(k)
        out.append([(o.op.name, o.axis, o.amount) for o in k.applied_opts])
    return out


def _conv_grad(which: str) -> Tensor:
    x, w = Tensor.empty(8, 16, 16, 16, requires_grad=True), Tensor.empty(32, 16, 3, 3, requires_grad=True)
    x.conv2d(w, padding=1).sum().backward()
    return (x.grad if which == "x" else w.grad).contiguous()  # type: ignore[union-attr]


def _conv_grad_of(which: str, size: int) -> Tensor:
    """The digits CNN's conv2 gradients, of a loss that weighs each output (the upstream gradient is a tensor)."""
    x, w = Tensor.empty(64, 16, size, size, requires_grad=True), Tensor.empty(32, 16, 3, 3, requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor.empty(64, 32, size, size)).sum().backward()
    return (x.grad if which == "x" else w.grad).contiguous()  # type: ignore[union-attr]


def _conv_grad_7() -> Tensor:
    """The input gradient of a 32 -> 64 conv on 7^2 (an MNIST CNN's after two poolings), batch 8."""
    x, w = Tensor.empty(8, 32, 7, 7, requires_grad=True), Tensor.empty(64, 32, 3, 3, requires_grad=True)
    (x.conv2d(w, padding=1) * Tensor.empty(8, 64, 7, 7)).sum().backward()
    return x.grad.contiguous()  # type: ignore[union-attr]


def _conv(n: int, cin: int, size: int, cout: int) -> Tensor:
    return Tensor.empty(n, cin, size, size).conv2d(Tensor.empty(cout, cin, 3, 3), padding=1)


# kernels whose opts an AVX-512 CPU (32 registers of 64 bytes, masked loads of 16 and 8 lanes) must keep, as tuned
# there: (name, the tensor, its opts on one core)
AVX512_CHOICES = [
    ("matmul", lambda: Tensor.empty(128, 1024) @ Tensor.empty(1024, 1024),
     [[("UPCAST", 1, 16), ("UPCAST", 0, 8), ("UPCAST", 1, 2), ("UNROLL", 0, 2)]]),
    ("x@w.T", lambda: Tensor.empty(128, 1024) @ Tensor.empty(1024, 1024).T,
     [[("UPCAST", 1, 8), ("UPCAST", 0, 2), ("UNROLL", 0, 16)]]),
    ("conv 64->64 on 32^2", lambda: _conv(32, 64, 32, 64),
     [[("UPCAST", 3, 16), ("UPCAST", 1, 8), ("UPCAST", 0, 2), ("UNROLL", 2, 3)]]),
    ("conv 16->32 on 64^2", lambda: _conv(4, 16, 64, 32),
     [[("UPCAST", 3, 16), ("UPCAST", 1, 8), ("UPCAST", 2, 2), ("UNROLL", 2, 3), ("SWAP", 0, 2)]]),
    ("digits conv2", lambda: _conv(64, 16, 8, 32),
     [[("MERGE", 2, 0), ("UPCAST", 2, 16), ("UPCAST", 1, 8), ("UPCAST", 0, 2), ("UNROLL", 2, 3)]]),
    ("digits conv2 input gradient", lambda: _conv_grad_of("x", 8),
     [[("UPCAST", 0, 16)], [("MERGE", 2, 0), ("UPCAST", 2, 16), ("UPCAST", 1, 8), ("UPCAST", 0, 2)]]),
    ("digits conv2 weight gradient", lambda: _conv_grad_of("w", 8),
     [[("UPCAST", 0, 16)], [("MERGE", 5, 0), ("UPCAST", 0, 8), ("UPCAST", 3, 3), ("UNROLL", 1, 16)]]),
    ("conv2 weight gradient on 16^2", lambda: _conv_grad_of("w", 16),
     [[("UPCAST", 0, 16)], [("UPCAST", 0, 8), ("UPCAST", 3, 3), ("UNROLL", 2, 16)]]),
    ("conv 32->64 on 7^2", lambda: _conv(8, 32, 7, 64),
     [[("MERGE", 2, 0), ("OVERLAP", 2, 16), ("UPCAST", 1, 8), ("UPCAST", 0, 2), ("UNROLL", 2, 3)]]),
    ("conv 16->32 on 28^2", lambda: _conv(8, 16, 28, 32),
     [[("MERGE", 2, 0), ("UPCAST", 2, 16), ("UPCAST", 1, 8), ("UPCAST", 0, 2), ("UNROLL", 2, 3)]]),
    ("conv 32->64 on 7^2 input gradient", lambda: _conv_grad_7(),
     [[("UPCAST", 0, 16)], [("MERGE", 2, 0), ("OVERLAP", 2, 16), ("UPCAST", 1, 8), ("UPCAST", 0, 2)]]),
    ("conv input gradient", lambda: _conv_grad("x"), [[("UPCAST", 2, 8), ("UNROLL", 0, 4)]]),
    ("conv weight gradient", lambda: _conv_grad("w"), [[("UPCAST", 0, 8), ("UNROLL", 2, 16)]]),
]  # fmt: skip


@pytest.mark.parametrize("name,make,want", AVX512_CHOICES, ids=[c[0] for c in AVX512_CHOICES])
def test_avx512_tiles_stay_as_tuned(name: str, make, want: list):
    """What is tuned for 16 registers of 32 bytes (AVX2) leaves a 32 x 64-byte renderer's choices alone: on one core
    as listed, on two the same with the cores sharing out an axis (where one core swapped it outermost)."""
    one = ClangRenderer(threads=1, vector_bytes=64, vector_registers=32)
    one.masked_load_lanes = (16, 8)
    assert _opts_on(make, one) == want
    two = ClangRenderer(threads=2, vector_bytes=64, vector_registers=32)
    two.masked_load_lanes = (16, 8)
    threaded = [[o for o in opts if o[0] != "SWAP"] for opts in want]
    assert [[o for o in opts if o[0] != "THREAD"] for opts in _opts_on(make, two)] == threaded


def _avx2(threads: int = 1) -> ClangRenderer:
    """A CPU renderer with AVX2's 16 registers of 32 bytes and AVX's masked loads (a mask vector per load)."""
    renderer = ClangRenderer(threads=threads, vector_bytes=32, vector_registers=16)
    renderer.masked_load_lanes, renderer.masked_load_lane_mask = (8, 4), True
    return renderer


def test_avx2_conv_tile_takes_two_output_rows_and_the_whole_window():
    """With AVX's masked loads a padded 3x3 conv's 4 x 2 tile is 4 output channels by 2 output rows (their windows
    share input rows and masked loads), and its loop body is the whole window (9 taps), not one row of it."""
    (si,) = _conv(2, 64, 32, 64).schedule()
    k = Kernel(si.ast, _avx2())
    k.merge_axes()
    hand_coded_optimizations(k)
    assert [(o.op, o.axis, o.amount) for o in k.applied_opts if o.op is OptOps.UPCAST] == [
        (OptOps.UPCAST, 3, 8),  # the output row's pixels as lanes
        (OptOps.UPCAST, 1, 4),  # output channels
        (OptOps.UPCAST, 2, 2),  # output rows
    ]
    assert [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UNROLL] == [3, 3]


def test_avx2_padded_conv_computes_what_torch_does():
    """The AVX tile of a padded conv (rows of the window sliding, edge lanes masked), run here where the CPU has AVX."""
    from lazygrad.runtime.ops_cpu import _cpu_flags

    if "avx" not in _cpu_flags().split():
        pytest.skip("no AVX on this CPU")
    x, w = _rand(2, 8, 16, 16), _rand(16, 8, 3, 3, seed=1)
    (si,) = Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1).schedule()
    k = Kernel(si.ast, _avx2())
    k.merge_axes()
    hand_coded_optimizations(k)
    spec = get_program(si.ast, _avx2(), list(k.applied_opts))
    assert "__builtin_ia32_maskloadps256" in spec.src
    out = Buffer("CPU", si.bufs[0].size, si.bufs[0].dtype)
    ExecItem(CompiledRunner("CPU", spec), [out, *si.bufs[1:]]).run()
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(np.frombuffer(out.as_bytes(), np.float32).reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


def test_one_core_runs_matmul_panels_outermost():
    """THREADS=1 is a renderer without threads: its matmul over B's panels still runs the panels outermost (each
    panel's block reused from L2 while the rows stream), as a renderer with threads and one core does."""
    a, b = Tensor.empty(1024, 1024), Tensor.empty(1024, 1024)
    renderer = _avx2()
    renderer.has_threads = False
    opts = _opts_on(lambda: a @ b, renderer)[-1]
    assert ("SWAP", 0, 1) in opts and not any(o[0] == "THREAD" for o in opts)


@pytest.mark.parametrize(
    "shape,kw,merged",
    [
        ((16, 8, 8, 8), {}, True),  # rows of 8: vectors of two rows
        ((4, 8, 4, 4), {}, True),  # rows of 4: the whole image a vector
        ((4, 8, 4, 8), {"dilation": 2, "padding": 2}, True),
        ((4, 8, 6, 10), {"dilation": 2}, False),  # rows of 8 outputs 10 inputs apart
        ((3, 8, 2, 8), {}, True),
        ((4, 8, 16, 16), {}, False),  # rows are whole vectors already
        ((4, 8, 5, 5), {}, True),  # 25 pixels: overlapping vectors of 16
        ((2, 8, 7, 7), {}, True),
        ((2, 4, 28, 28), {}, True),  # rows of 28: 49 vectors of 16 across them
        ((2, 4, 31, 31), {}, True),
        ((2, 8, 3, 3), {}, False),  # fewer pixels than a vector
        ((4, 8, 8, 8), {"stride": 2}, False),  # the window moves by 2 along a row: not one axis with the rows
    ],
)
def test_short_rows_merge_into_vectors_and_match_torch(shape, kw: dict, merged: bool):
    """A padded conv whose output rows are no whole vectors (AVX-512: 16 lanes) gets its rows and columns merged into
    one axis (MERGE), so a vector holds several rows, their lanes in the padding masked off (pixels that are no whole
    vectors: overlapping ones, OVERLAP); forward, input and weight gradients with bias and relu compute what torch
    does, on this CPU whatever its vector width."""
    n, cin, h, w_ = shape
    xn, wn, bn = _rand(n, cin, h, w_), _rand(16, cin, 3, 3, seed=1), _rand(16, seed=2)
    x, w, b = (Tensor(a, requires_grad=True) for a in (xn, wn, bn))
    kw = {"padding": 1, **kw}
    out = x.conv2d(w, b, **kw).relu()
    gn = _rand(*out.shape, seed=3)
    (out * Tensor(gn)).sum().backward()
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (xn, wn, bn))
    ref = torch.nn.functional.conv2d(xt, wt, bt, **kw).relu()
    (ref * torch.from_numpy(gn)).sum().backward()
    for got, want in ((out, ref), (x.grad, xt.grad), (w.grad, wt.grad), (b.grad, bt.grad)):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)
    avx512 = ClangRenderer(threads=1, vector_bytes=64, vector_registers=32)
    avx512.masked_load_lanes = (16, 8)
    fwd = lambda: Tensor.empty(*shape).conv2d(Tensor.empty(16, cin, 3, 3), **kw)  # noqa: E731
    assert any(o[0] == "MERGE" for opts in _opts_on(fwd, avx512) for o in opts) == merged


def test_weight_gradient_taps_whole_only_with_32_registers():
    """A conv's weight gradient with its lanes along the input rows takes its window's 3 column taps whole as the
    third axis of its tile where 32 vector registers hold 8 x 3 accumulators; with AVX2's 16 the 4 x 3 tile spilled
    (2.4x slower than 4 output x 2 input channels), so there the input channels stay."""
    from test.helpers import avx2_renderer

    avx512 = ClangRenderer(threads=1, vector_bytes=64, vector_registers=32)
    avx512.masked_load_lanes = (16, 8)
    assert _opts_on(lambda: _conv_grad_of("w", 32), avx512)[-1] == [
        ("UPCAST", 0, 8),
        ("UPCAST", 3, 3),
        ("UNROLL", 2, 16),
    ]
    assert _opts_on(lambda: _conv_grad_of("w", 16), avx2_renderer(1))[-1] == [
        ("UPCAST", 0, 4),
        ("UPCAST", 1, 2),
        ("UNROLL", 2, 8),
    ]


VIEWS_OF_VIEWS = {
    "padded rows regrouped": lambda: Tensor.empty(6, 6).pad(((1, 1), (1, 1))).reshape(4, 16).sum(1),
    "padded image flattened and cut": lambda: (
        Tensor.empty(8, 16, 16, 16)
        .pad(((0, 0), (0, 0), (1, 1), (1, 1)))
        .reshape(8, 16, 18 * 18)[:, :, 3:300]
        .contiguous()
    ),
    "conv input gradient": lambda: _conv_grad("x"),
}


@pytest.mark.parametrize("make", VIEWS_OF_VIEWS.values(), ids=VIEWS_OF_VIEWS.keys())
def test_view_steps_are_each_axis_index_difference_valued_once_per_view(make):
    """The heuristic's address steps of a kernel's views (views of views among them) are, along every axis, the index
    at 1 on that axis minus the index at 0; and a view's steps are valued once however often the heuristic asks (they
    were valued again for every axis and every opt it tried)."""
    from lazygrad.dtype import dtypes
    from lazygrad.uop.ops import Ops, UOp
    from lazygrad.uop.symbolic import simplify

    (si,) = make().schedule()
    k = Kernel(si.ast, ClangRenderer(threads=2, vector_bytes=64, vector_registers=32))
    k.merge_axes()
    for st in k.sts:
        zero = [UOp.const(dtypes.int32, 0)] * len(st.shape)
        for axis, got in enumerate(heuristic._steps(st)):
            at = list(zero)
            at[axis] = UOp.const(dtypes.int32, 1)
            step = simplify(st.to_index(at)[0] - st.to_index(list(zero))[0])
            want = 0 if st.shape[axis] == 1 else step.arg if step.op is Ops.CONST else None
            assert got == want, (st, axis)
    heuristic._steps.cache_clear()
    hand_coded_optimizations(k)
    info = heuristic._steps.cache_info()
    assert info.hits >= info.misses, info


def test_view_of_view_steps_are_valued_on_ints(monkeypatch):
    """The steps of views of views whose sizes are constants are valued on Python ints (ShapeTracker.to_index's
    arithmetic, division and modulo truncating as the IR's where a padded outer view's address is negative): the
    simplified index difference's constant, with no index built or simplified."""
    from lazygrad.dtype import dtypes
    from lazygrad.uop.ops import Ops, UOp
    from lazygrad.uop.symbolic import simplify
    from lazygrad.uop.view import ShapeTracker

    padded = ShapeTracker.from_shape((4, 4)).pad(((1, 1), (1, 1))).reshape((4, 9))
    sts = [
        padded,
        padded.pad(((1, 0), (0, 2))),  # the outer view padded too: its address at 0 is negative
        padded.flip((False, True)).pad(((2, 1), (3, 0))).reshape((7, 12, 1)).expand((7, 12, 3)),
        ShapeTracker.from_shape((3, 5)).pad(((2, 0), (0, 3))).reshape((40,)).shrink(((3, 38),)).reshape((5, 7)),
        ShapeTracker.from_shape((6, 4)).permute((1, 0)).reshape((2, 12)).pad(((0, 1), (5, 0))),
    ]
    wants = []
    for st in sts:
        assert len(st.views) > 1
        zero = [UOp.const(dtypes.int32, 0)] * len(st.shape)
        want = []
        for axis in range(len(st.shape)):
            at = list(zero)
            at[axis] = UOp.const(dtypes.int32, 1)
            step = simplify(st.to_index(at)[0] - st.to_index(list(zero))[0])
            assert step.op is Ops.CONST
            want.append(0 if st.shape[axis] == 1 else step.arg)
        wants.append(tuple(want))
    calls = []
    monkeypatch.setattr(heuristic, "simplify", lambda u: calls.append(u) or simplify(u))
    heuristic._steps.cache_clear()
    assert [heuristic._steps(st) for st in sts] == wants and not calls
