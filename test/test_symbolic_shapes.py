"""Symbolic shapes: sizes that are bound Variables (tinygrad's `Variable("pos", 1, 128).bind(n)`), through the whole
pipeline. One compiled kernel serves every bound value (the variable is a kernel argument and a loop bound), a
TinyJit capture replays at other values, and results are checked against numpy at the edges of each range."""

import numpy as np
import pytest

from lazygrad import Tensor, TinyJit, Variable
from lazygrad.engine.realize import JitError
from lazygrad.uop.ops import UOp

MAXLEN = 16
VALUES = (1, 2, 7, MAXLEN)  # min, a small one, an odd one, max


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _var(val: int, name: str = "n", lo: int = 1, hi: int = MAXLEN) -> UOp:
    return Variable(name, lo, hi).bind(val)


class _Compiles:
    """Counts the programs codegen builds (a cached program is not rebuilt)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        import lazygrad.codegen as codegen

        self.n, real = 0, codegen._build_program

        def counted(*a, **k):  # noqa: ANN002, ANN003, ANN202
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(codegen, "_build_program", counted)
        monkeypatch.setenv("CACHELEVEL", "0")


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> _Compiles:
    from lazygrad.helpers import Context

    c = _Compiles(monkeypatch)
    with Context(CACHELEVEL=0):
        yield c


# *** shapes ***


def test_shape_is_symbolic():
    v = _var(5)
    x = Tensor(_rand(MAXLEN, 4))
    assert x.shrink(((0, v), None)).shape == (v, 4)
    assert x[0:v].shape[0] is v
    assert x[:, None][0:v].shape == (v, 1, 4)
    assert Tensor.zeros(v, 4).shape == (v, 4)
    y = x[:v]
    assert y.reshape(v, -1).shape == (v, 4) and y.reshape(-1, 4).shape == (v, 4)
    assert y.reshape(-1).shape[0].render() == "(n*4)"
    assert x.pad(((0, v), None)).shape[0].render() == "(n+16)"


def test_bind_out_of_range():
    with pytest.raises(ValueError, match="outside its range"):
        Variable("n", 1, 10).bind(11)
    with pytest.raises(ValueError, match="outside its range"):
        Variable("n", 1, 10).bind(0)
    Variable("n", 1, 10).bind(1), Variable("n", 1, 10).bind(10)  # the edges are inside


def test_unbound_variable_needs_value():
    x = Tensor(_rand(MAXLEN, 4))
    y = x.shrink(((0, Variable("u", 1, 10)), None))
    with pytest.raises(ValueError, match="variable u has no value"):
        y.numpy()


def test_slice_past_end_raises():
    x = Tensor(_rand(8, 4))
    with pytest.raises(IndexError, match="out of bounds"):
        x[0 : _var(9, hi=20)]
    with pytest.raises(ValueError, match="out of bounds"):
        x.shrink(((0, _var(9, hi=20)), None))


# *** values, at several bound values (min, max, 1) ***


@pytest.mark.parametrize("n", VALUES)
def test_shrink_slice_reshape(n: int):
    xn = _rand(MAXLEN, 4)
    x, v = Tensor(xn), _var(n)
    np.testing.assert_equal(x.shrink(((0, v), None)).numpy(), xn[:n])
    np.testing.assert_equal(x[0:v].numpy(), xn[:n])
    np.testing.assert_equal(x[MAXLEN - v :].numpy(), xn[MAXLEN - n :])
    np.testing.assert_equal(x[v - 1].numpy(), xn[n - 1])
    np.testing.assert_equal(x[:v].reshape(-1).numpy(), xn[:n].reshape(-1))
    np.testing.assert_equal(x[:v].reshape(v, 2, 2).numpy(), xn[:n].reshape(n, 2, 2))
    np.testing.assert_equal(x[:v].T.numpy(), xn[:n].T)
    np.testing.assert_equal(x[:v].flip(0).numpy(), xn[:n][::-1])
    np.testing.assert_equal(x[:v].tolist(), xn[:n].tolist())
    np.testing.assert_equal(x[:v].cat(x, dim=0).numpy(), np.concatenate([xn[:n], xn]))


@pytest.mark.parametrize("n", VALUES)
def test_creation(n: int):
    v = _var(n)
    np.testing.assert_equal(Tensor.zeros(v, 4).numpy(), np.zeros((n, 4)))
    np.testing.assert_equal(Tensor.ones(v).numpy(), np.ones(n))
    np.testing.assert_equal(Tensor.full((2, v), 3.0).numpy(), np.full((2, n), 3.0))
    np.testing.assert_equal(Tensor.arange(v).numpy(), np.arange(n))
    np.testing.assert_equal(Tensor.arange(2, v + 2).numpy(), np.arange(2, n + 2))
    np.testing.assert_equal(Tensor.ones(1, 3).expand(v, 3).numpy(), np.ones((n, 3)))
    assert Tensor.ones(v, 4).sum().item() == 4 * n


@pytest.mark.parametrize("n", VALUES)
def test_pad(n: int):
    xn = _rand(3, 4)
    v = _var(n)
    np.testing.assert_equal(Tensor(xn).pad(((0, v), None)).numpy(), np.pad(xn, ((0, n), (0, 0))))
    np.testing.assert_equal(Tensor(xn).pad((None, (v, 1))).numpy(), np.pad(xn, ((0, 0), (n, 1))))
    np.testing.assert_equal(
        Tensor(xn).pad(((v, 0), None), value=2.0).numpy(), np.pad(xn, ((n, 0), (0, 0)), constant_values=2.0)
    )


@pytest.mark.parametrize("n", VALUES)
def test_reductions(n: int):
    xn = _rand(MAXLEN, 5)
    x = Tensor(xn)[: _var(n)]
    np.testing.assert_allclose(x.sum(0).numpy(), xn[:n].sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.sum(1).numpy(), xn[:n].sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.sum().numpy(), xn[:n].sum(), rtol=1e-5, atol=1e-5)
    np.testing.assert_equal(x.max(0).numpy(), xn[:n].max(0))
    np.testing.assert_allclose(x.mean(0).numpy(), xn[:n].mean(0), rtol=1e-5, atol=1e-6)
    e = np.exp(xn[:n] - xn[:n].max(0))
    np.testing.assert_allclose(x.softmax(0).numpy(), e / e.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((x * _var(n)).numpy(), xn[:n] * n, rtol=1e-6)


@pytest.mark.parametrize("n", VALUES)
def test_matmul(n: int):
    an, bn = _rand(MAXLEN, 6), _rand(6, MAXLEN, seed=1)
    v = _var(n)
    a, b = Tensor(an)[:v], Tensor(bn)[:, :v]
    np.testing.assert_allclose((a.T @ a).numpy(), an[:n].T @ an[:n], rtol=1e-4, atol=1e-4)  # reduce over n
    np.testing.assert_allclose((a @ b).numpy(), an[:n] @ bn[:, :n], rtol=1e-4, atol=1e-4)  # n x n output
    np.testing.assert_allclose((b @ a).numpy(), bn[:, :n] @ an[:n], rtol=1e-4, atol=1e-4)


def _attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def _attend(q: Tensor, kc: Tensor, vc: Tensor, end: UOp) -> Tensor:
    k, v = kc[:, :, 0:end], vc[:, :, 0:end]
    return (q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])).softmax(-1) @ v


def test_kv_cache_attention_one_kernel_set(compiles: _Compiles):
    """One decode step of attention over a KV cache sliced to a symbolic end: every position reuses the same kernels."""
    B, H, D = 1, 2, 8
    kn, vn = _rand(B, H, MAXLEN, D, seed=1), _rand(B, H, MAXLEN, D, seed=2)
    kc, vc = Tensor(kn).realize(), Tensor(vn).realize()
    first = None
    for pos in (1, 2, 5, MAXLEN - 1, MAXLEN):
        qn = _rand(B, H, 1, D, seed=pos)
        out = _attend(Tensor(qn), kc, vc, _var(pos, "start_pos")).numpy()
        np.testing.assert_allclose(out, _attention_ref(qn, kn[:, :, :pos], vn[:, :, :pos]), rtol=1e-4, atol=1e-5)
        if first is None:
            first = compiles.n
    assert first > 0 and compiles.n == first  # no kernel compiled for a new position


def test_symbolic_kernels_get_opts_on_their_constant_axes():
    """On the CPU a kernel with a Variable size is optimized along its constant axes (the heads and head dim of a
    decode step's attention, vector lanes and threads), the Variable axis stays a plain loop: right at every value."""
    from lazygrad.codegen import get_program
    from lazygrad.device import Device
    from lazygrad.engine.realize import run_schedule

    if Device.DEFAULT != "CPU":
        pytest.skip("the CPU's rule (GPU targets keep symbolic kernels plain)")
    B, H, D, n_max = 1, 8, 64, 200  # 8 x 200 positions: more than a tiny kernel (heuristic.TINY_CPU)
    kn, vn = _rand(B, H, n_max, D, seed=1), _rand(B, H, n_max, D, seed=2)
    kc, vc = Tensor(kn).realize(), Tensor(vn).realize()
    for pos in (1, 3, 37, n_max):
        qn = _rand(B, H, 1, D, seed=pos)
        out = _attend(Tensor(qn), kc, vc, _var(pos, "start_pos", hi=n_max))
        if pos == 1:
            sched, var_vals = out.schedule_with_vars()
            opts = [get_program(si.ast, Device["CPU"].renderer).applied_opts for si in sched]
            assert sum(1 for o in opts if o) > len(sched) // 2, opts  # all were plain loops before
            run_schedule(sched, var_vals)
        ref = _attention_ref(qn, kn[:, :, :pos], vn[:, :, :pos])
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_symbolic_loop_bound_in_source():
    from lazygrad.codegen import get_program
    from lazygrad.device import Device

    x = Tensor(_rand(MAXLEN, 4)).realize()
    (si,) = x[: _var(3, "start_pos")].sum(0).schedule()
    spec = get_program(si.ast, Device[Device.DEFAULT].renderer)
    assert "start_pos" in spec.src and [v.arg[0] for v in spec.vars] == ["start_pos"]
    assert "start_pos" in spec.name


def test_kv_cache_decode_under_jit():
    """A KV-cache decode step under TinyJit: the cache is written at start_pos and read up to start_pos+1; the capture
    replays at every later position with the right results."""
    B, H, D = 1, 2, 8
    kc, vc = Tensor.zeros(B, H, MAXLEN, D).contiguous().realize(), Tensor.zeros(B, H, MAXLEN, D).contiguous().realize()
    kn, vn = np.zeros((B, H, MAXLEN, D), np.float32), np.zeros((B, H, MAXLEN, D), np.float32)

    @TinyJit
    def step(q: Tensor, k: Tensor, v: Tensor, start_pos: UOp) -> Tensor:
        kc[:, :, start_pos : start_pos + 1] = k
        vc[:, :, start_pos : start_pos + 1] = v
        return _attend(q, kc, vc, start_pos + 1).realize()

    for pos in range(MAXLEN):
        qn, k1, v1 = _rand(B, H, 1, D, seed=pos), _rand(B, H, 1, D, seed=100 + pos), _rand(B, H, 1, D, seed=200 + pos)
        out = step(Tensor(qn), Tensor(k1), Tensor(v1), Variable("start_pos", 0, MAXLEN - 1).bind(pos)).numpy()
        kn[:, :, pos : pos + 1], vn[:, :, pos : pos + 1] = k1, v1
        ref = _attention_ref(qn, kn[:, :, : pos + 1], vn[:, :, : pos + 1])
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert step.captured is not None and step.captured.kernel_count >= 3


def test_jit_symbolic_output_rebinds():
    """A JIT output whose shape is symbolic has the shape of each call's bound value."""
    xn = _rand(MAXLEN, 3)
    x = Tensor(xn).realize()

    @TinyJit
    def f(n: UOp) -> Tensor:
        return (x[:n] * 2).realize()

    for n in (3, 4, 1, MAXLEN, 9):
        out = f(_var(n))
        assert out.shape[0].src[1].arg == n
        np.testing.assert_equal(out.numpy(), xn[:n] * 2)


def test_jit_concrete_shape_change_still_raises():
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a + 1).realize()

    for _ in range(3):
        f(Tensor(_rand(4, 3)))
    with pytest.raises(JitError, match="shape"):
        f(Tensor(_rand(5, 3)))


def test_unbound_variable_in_a_reduce():
    x = Tensor(_rand(MAXLEN, 4))
    with pytest.raises(ValueError, match="variable u has no value"):
        x.shrink(((0, Variable("u", 1, 10)), None)).sum().numpy()


def test_jit_capture_at_a_value_seen_before():
    """The capture runs at the value of the first call: values computed then must not stand in for the kernels."""
    xn = _rand(MAXLEN, 3)
    x = Tensor(xn).realize()

    @TinyJit
    def f(n: UOp) -> Tensor:
        return x[:n].sum(0).realize()

    for n in (3, 3, 5, 1, MAXLEN):
        np.testing.assert_allclose(f(_var(n)).numpy(), xn[:n].sum(0), rtol=1e-5, atol=1e-5)


def test_jit_symbolic_tensor_inputs():
    """tinygrad's pattern: Tensors sliced to a bound Variable are JIT inputs; the variable comes with their shape."""
    an, bn = _rand(3, MAXLEN), _rand(3, MAXLEN, seed=1)
    a, b = Tensor(an).realize(), Tensor(bn).realize()

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return (x * y + 1).sum(1).realize()

    @TinyJit
    def g(x: Tensor) -> Tensor:
        return (x + 1).realize()

    for n in (2, 2, 3, 1, MAXLEN, 5):
        v = _var(n, "i")
        np.testing.assert_allclose(f(a[:, :v], b[:, :v]).numpy(), (an[:, :n] * bn[:, :n] + 1).sum(1), rtol=1e-5)
        out = g(a[:, :v])
        assert out.shape[1].src[1].arg == n
        np.testing.assert_allclose(out.numpy(), an[:, :n] + 1, rtol=1e-6)
    assert f.captured is not None and g.captured is not None
    with pytest.raises(JitError, match="shape"):
        f(a[:2, : _var(3, "i")], b[:2, : _var(3, "i")])


def test_view_reshape_keeps_one_view():
    """Reshapes that keep a symbolic dim whole stay one view (no // and % by a symbolic size in the index math)."""
    from lazygrad.uop.view import ShapeTracker

    n = Variable("n", 1, MAXLEN)
    st = ShapeTracker.from_shape((3, MAXLEN, 4)).shrink(((0, 3), (0, n), (0, 4)))
    assert len(st.reshape((3, n, 2, 2)).views) == 1
    assert len(st.reshape((1, 3, 1, n, 4)).views) == 1
    assert len(st.permute((1, 0, 2)).reshape((n, 3, 2, 2)).views) == 1
    assert len(st.reshape((3, n * 4)).views) == 2  # merging into the symbolic dim needs a second view


@pytest.mark.parametrize("n", VALUES)
def test_repeat_kv_attention(n: int):
    """tinygrad's llama attention: a cache sliced to start_pos+1, heads repeated by expand+reshape, sdpa."""
    B, KV, REP, D = 1, 2, 2, 4
    cn, qn = _rand(B, MAXLEN, KV, D), _rand(B, 1, KV * REP, D, seed=1)
    v = _var(n, "start_pos")
    keys = Tensor(cn)[:, 0:v]
    keys = keys[:, :, :, None, :].expand(B, v, KV, REP, D).reshape(B, v, KV * REP, D)
    out = Tensor(qn).transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), keys.transpose(1, 2))
    kr = np.repeat(cn[:, :n], REP, axis=2).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out.numpy(), _attention_ref(qn.transpose(0, 2, 1, 3), kr, kr), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", VALUES)
def test_more_ops(n: int):
    xn = _rand(MAXLEN, 3)
    x, v = Tensor(xn), _var(n)
    np.testing.assert_equal(x[:v].argmax(0).numpy(), xn[:n].argmax(0))
    np.testing.assert_allclose(x[:v].exp().log().numpy(), xn[:n], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        x[:v].layernorm(-1).numpy(),
        (xn[:n] - xn[:n].mean(-1, keepdims=True)) / np.sqrt(xn[:n].var(-1, keepdims=True) + 1e-5),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("n", (*VALUES, 70))
def test_scans_over_a_symbolic_axis(n: int):
    """cumsum / cumprod / cummax / logcumsumexp along a Variable length (up to 100: past one block of 64) against
    torch, the gradient of cumsum too."""
    import torch

    xn = (np.abs(_rand(2, 100)) + 0.5) / 2
    x, v = Tensor(xn, requires_grad=True), _var(n, hi=100)
    t, r = x[:, :v], torch.tensor(xn[:, :n])
    np.testing.assert_allclose(t.cumsum(1).numpy(), r.cumsum(1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(t.cumprod(1).numpy(), r.cumprod(1).numpy(), rtol=1e-4)
    values, idx = t.cummax(1)
    np.testing.assert_equal(values.numpy(), r.cummax(1).values.numpy())
    np.testing.assert_equal(idx.numpy(), r.cummax(1).indices.numpy())
    np.testing.assert_allclose(t.logcumsumexp(1).numpy(), r.logcumsumexp(1).numpy(), rtol=1e-5)
    (t.cumsum(1) * t).sum().backward()
    rg = torch.tensor(xn, requires_grad=True)
    (rg[:, :n].cumsum(1) * rg[:, :n]).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), rg.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("n", VALUES)
def test_slices_with_steps(n: int):
    """Steps other than 1 beside a Variable bound or a Variable size: reads, a write and the gradient, against numpy."""
    xn = _rand(MAXLEN, 3)
    x, v = Tensor(xn, requires_grad=True), _var(n)
    np.testing.assert_equal(x[:v:2].numpy(), xn[:n:2])
    np.testing.assert_equal(x[:v][1::3].numpy(), xn[:n][1::3])
    np.testing.assert_equal(x[v - 1 :: 4].numpy(), xn[n - 1 :: 4])
    (x[:v:3] * 2).sum().backward()
    want = np.zeros_like(xn)
    want[:n:3] = 2
    np.testing.assert_equal(x.grad.numpy(), want)
    t, ref = Tensor.zeros(MAXLEN, 3).contiguous(), np.zeros((MAXLEN, 3), np.float32)
    t[:v:2] = 1.0
    ref[:n:2] = 1.0
    np.testing.assert_equal(t.numpy(), ref)
    with pytest.raises(NotImplementedError, match="positive int step"):
        x[v::-1]


@pytest.mark.parametrize("n", (3, 7, MAXLEN))
def test_pad_modes_along_a_symbolic_size(n: int):
    import torch

    xn = _rand(1, 3, MAXLEN)
    x, v = Tensor(xn), _var(n, lo=3)
    for mode in ("reflect", "replicate", "circular"):
        ref = torch.nn.functional.pad(torch.tensor(xn[:, :, :n]), (2, 1), mode=mode)
        np.testing.assert_equal(x[:, :, :v].pad((2, 1), mode=mode).numpy(), ref.numpy())
    with pytest.raises(RuntimeError, match="as small as 1"):  # reflect needs every value of the size past 2
        x[:, :, : _var(n)].pad((2, 1), mode="reflect")


@pytest.mark.parametrize("n", (1, 7))
def test_gradient_through_symbolic_slice(n: int):
    xn = _rand(MAXLEN, 4)
    x = Tensor(xn, requires_grad=True)
    (x[: _var(n)] * 3).sum().backward()
    want = np.zeros_like(xn)
    want[:n] = 3
    np.testing.assert_equal(x.grad.numpy(), want)


@pytest.mark.parametrize("n", VALUES)
def test_arange_steps(n: int):
    v = _var(n)
    np.testing.assert_equal(Tensor.arange(v, 0, -1).numpy(), np.arange(n, 0, -1))
    np.testing.assert_equal(Tensor.arange(0, v, 3).numpy(), np.arange(0, n, 3))
    np.testing.assert_equal(Tensor.arange(v + 1, 1, -2).numpy(), np.arange(n + 1, 1, -2))


def test_symbolic_int_on_the_left():
    xn = _rand(MAXLEN, 2)
    x, v = Tensor(xn), _var(4)
    np.testing.assert_allclose((v - x[:v]).numpy(), 4 - xn[:4], rtol=1e-6)
    np.testing.assert_allclose((v * x[:v] + v).numpy(), 4 * xn[:4] + 4, rtol=1e-6)
    np.testing.assert_allclose((x[:v] / v).numpy(), xn[:4] / 4, rtol=1e-6)


@pytest.mark.parametrize("n", (2, 7, MAXLEN))
def test_var_std_two_variables_and_writes(n: int):
    xn = _rand(MAXLEN, 8)
    x, v, w = Tensor(xn), _var(n), _var(3, "m", hi=8)
    np.testing.assert_allclose(x[:v].var(0).numpy(), xn[:n].var(0, ddof=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x[:v].std(1).numpy(), xn[:n].std(1, ddof=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_equal(x[:v, :w].numpy(), xn[:n, :3])
    y = Tensor(xn).contiguous().realize()
    y[:v] = 7.0
    y[v:] = y[v:] * 2
    want = xn.copy()
    want[:n], want[n:] = 7.0, xn[n:] * 2
    np.testing.assert_equal(y.numpy(), want)
    assert Tensor.rand(v, 2).numpy().shape == (n, 2)


def test_one_variable_two_values_in_one_schedule():
    x = Tensor(_rand(MAXLEN, 2))
    with pytest.raises(ValueError, match="bound to both 2 and 3"):
        (x[: _var(2)].sum() + x[: _var(3)].sum()).numpy()


def test_repr_shows_expression_and_value():
    assert "shape=((n+1)=6, 2)" in repr(Tensor(_rand(MAXLEN, 2))[: _var(5) + 1])


def test_bind_takes_ints():
    with pytest.raises(TypeError, match="takes an int"):
        Variable("n", 1, 10).bind(2.5)
    with pytest.raises(TypeError, match="takes an int"):
        Variable("n", 1, 10).bind(True)
    assert Variable("n", 1, 10).bind(np.int64(4)).src[1].arg == 4


def _kernels(t: Tensor) -> int:
    return len(t.schedule())


@pytest.mark.parametrize(
    "build",
    [
        lambda x, e: (x[:e] * 2).softmax(0),
        lambda x, e: (x[:e] * 2).softmax(1),
        lambda x, e: x[:e].var(0),
        lambda x, e: x[:e].T @ x[:e],
        lambda x, e: (x[:e] @ x[:e].T).softmax(-1) @ x[:e],
    ],
)
def test_fuses_like_a_concrete_shape(build):  # noqa: ANN001
    """The scheduler makes the same kernels for a symbolic size as for a concrete one (its cost model reads a symbolic
    size at its largest, and compares symbolic sizes as canonical nodes)."""
    x = Tensor(_rand(MAXLEN, 4)).realize()
    assert _kernels(build(x, _var(5))) == _kernels(build(x, 5))


@pytest.mark.parametrize("jit", [False, True])
def test_reshape_concrete_to_variable(jit: bool):
    """tinygrad's symbolic-ops pattern: a concrete (3, i) tensor reshaped to (3, Variable bound to i), computed on (also
    under TinyJit, one capture for every i), and reshaped back to (3, i)."""

    def wrap(f):  # noqa: ANN001, ANN202
        return TinyJit(f) if jit else f

    plus1 = wrap(lambda a: (a + 1).realize())
    matmul = wrap(lambda a, b: (a @ b + 1).realize())
    cat0 = wrap(lambda a, b: a.cat(b, dim=0).realize())
    cat1 = wrap(lambda a, b: a.cat(b, dim=1).realize())
    attn = wrap(lambda q, k, v: q.scaled_dot_product_attention(k, v).realize())
    for i in (1, 2, 4, 3, 10):
        vi = _var(i, "i", hi=10)
        an, bn, cn = _rand(3, i), _rand(i, 5, seed=1), _rand(2, 3, seed=2)
        np.testing.assert_allclose(plus1(Tensor(an).reshape(3, vi)).reshape(3, i).numpy(), an + 1, rtol=1e-6)
        got = matmul(Tensor(an).reshape(3, vi), Tensor(bn).reshape(vi, 5)).numpy()
        np.testing.assert_allclose(got, an @ bn + 1, rtol=1e-5, atol=1e-5)
        got = cat0(Tensor(an.T.copy()).reshape(vi, 3), Tensor(cn)).reshape(i + 2, 3).numpy()
        np.testing.assert_equal(got, np.concatenate([an.T, cn]))
        got = cat1(Tensor(an).reshape(3, vi), Tensor(cn.T.copy())).reshape(3, i + 2).numpy()
        np.testing.assert_equal(got, np.concatenate([an, cn.T], 1))
        qn, kn, vn = _rand(2, 4, 1, 8, seed=3), _rand(2, 4, i, 8, seed=4), _rand(2, 4, i, 8, seed=5)
        got = attn(Tensor(qn), Tensor(kn).reshape(2, 4, vi, 8), Tensor(vn).reshape(2, 4, vi, 8)).numpy()
        np.testing.assert_allclose(got, _attention_ref(qn, kn, vn), rtol=1e-4, atol=1e-5)
    if jit:
        assert plus1.captured is not None and attn.captured is not None


def test_training_steps_at_changing_values():
    """Steps of the same code at changing bound values (graphs replayed by the eager path's programs and schedule
    cache): each gradient is the one of its own value."""
    from lazygrad import nn

    xn = _rand(MAXLEN, 4)
    x = Tensor(xn, requires_grad=True)
    opt = nn.optim.SGD([x], lr=0.0)
    for n in (3, 3, 3, 5, 5, 2, MAXLEN, 1, 1, 4):
        v = _var(n)
        opt.zero_grad()
        ((x[:v] * x[:v]).sum() + x[v - 1].sum()).backward()
        want = np.zeros_like(xn)
        want[:n] = 2 * xn[:n]
        want[n - 1] += 1
        np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-6)
        opt.step()
