"""TinyJit: capture on the 2nd call, replay after; validation of replays; the pitfalls; the CPU graph."""

import warnings

import numpy as np
import pytest
import torch

from lazygrad import Context, GlobalCounters, JitError, Tensor, TinyJit, Variable
from lazygrad.engine import realize
from lazygrad.helpers import ansistrip

rng = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_first_runs_second_captures_then_replays():
    wn = rand(8, 4)
    w = Tensor(wn).realize()
    runs = []

    @TinyJit
    def f(x: Tensor) -> Tensor:
        runs.append(1)
        return ((x @ w).relu() * 2).sum(1)

    for i in range(6):
        xn = rand(3, 8)
        out = f(Tensor(xn))
        np.testing.assert_allclose(out.numpy(), (np.maximum(xn @ wn, 0) * 2).sum(1), rtol=1e-5, atol=1e-6)
        assert (f.captured is None) == (i == 0)
    assert len(runs) == 2  # the Python body runs on the 1st and 2nd call only
    assert f.captured.kernel_count >= 1


@pytest.mark.usefixtures("default_device_cpu")  # (the CPU graph's table)
def test_replay_holds_the_copies_of_its_view_inputs_until_the_kernels_ran(monkeypatch):
    """A slice argument reaches the kernels as a copy made for the call, whose address goes into the CPU graph's
    table. The replay held only the last one: an earlier slice's copy was freed as the loop went on to the next
    argument, and the kernels read memory the allocator had taken back (garbage here, where a freed block goes back
    to the system at once; another buffer's values where the allocator's cache handed the block on)."""
    from lazygrad import Device

    monkeypatch.setattr(Device["CPU"].allocator, "cache_limit", 0)  # (free() then overwrites a block's first bytes)
    an, bn = rand(3, 40), rand(3, 40)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    f = TinyJit(lambda x, y: (x * y + 1).sum(1).realize())
    for n in (30, 30, 30, 30):
        got = f(a[:, :n], b[:, :n]).numpy()
        np.testing.assert_allclose(got, (an[:, :n] * bn[:, :n] + 1).sum(1), rtol=1e-5, atol=1e-5)
    assert f.captured is not None and f.captured.graph is not None  # the replays went through the CPU graph


def test_replay_runs_only_the_captured_kernels():
    a, b = Tensor(rand(16)).realize(), Tensor(rand(16)).realize()
    add = TinyJit(lambda x, y: (x + y).realize())
    add(a, b)
    add(a, b)
    GlobalCounters.reset()
    add(a, b)
    assert GlobalCounters.kernel_count == 1


def test_lazy_and_view_inputs():
    xn = rand(5, 7)
    f = TinyJit(lambda x: x * 2 + 1)
    for _ in range(4):
        xn = rand(7, 5)
        lazy = Tensor(xn) + 0  # not yet realized: realized before the JIT reads it
        np.testing.assert_allclose(f(lazy.T).numpy(), xn.T * 2 + 1, rtol=1e-6)  # a transposed view: copied


def test_output_buffers_are_reused_across_replays():
    """Documented: a replay writes into the same output buffers, so the previous replay's result changes."""
    f = TinyJit(lambda x: (x * 3).realize())
    inputs = [rand(8) for _ in range(5)]
    first = f(Tensor(inputs[0]))
    outs = [f(Tensor(x)) for x in inputs[1:]]
    np.testing.assert_allclose(first.numpy(), inputs[0] * 3)  # the 1st call ran normally: its output is its own
    for o in outs:  # the capture (2nd call) and every replay share the JIT's output buffer: all show the latest
        np.testing.assert_allclose(o.numpy(), inputs[-1] * 3)
    kept = f(Tensor(inputs[1])).numpy()  # a copy survives the next call
    f(Tensor(inputs[2]))
    np.testing.assert_allclose(kept, inputs[1] * 3)


def test_output_fed_back_as_input():
    """h = step(h): the input is the JIT's own output buffer, which a matmul must not overwrite while reading."""
    wn = rand(6, 6) * 0.3
    w = Tensor(wn).realize()
    step = TinyJit(lambda h: (h @ w).tanh())
    hn = rand(1, 6)
    h = Tensor(hn)
    for _ in range(6):
        h = step(h)
        hn = np.tanh(hn @ wn)
    np.testing.assert_allclose(h.numpy(), hn, rtol=1e-4, atol=1e-5)


def test_several_outputs_and_returned_input():
    @TinyJit
    def f(x: Tensor, y: Tensor) -> dict:
        return {"sum": x + y, "pair": (x * y, y), "n": 7}

    for _ in range(4):
        xn, yn = rand(4, 3), rand(4, 3)
        out = f(Tensor(xn), Tensor(yn))
        np.testing.assert_allclose(out["sum"].numpy(), xn + yn, rtol=1e-6)
        np.testing.assert_allclose(out["pair"][0].numpy(), xn * yn, rtol=1e-6)
        np.testing.assert_array_equal(out["pair"][1].numpy(), yn)  # an input returned as is: this call's input
        assert out["n"] == 7


def test_python_branch_is_frozen_at_capture():
    mode = {"double": False}

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return x * 2 if mode["double"] else x + 1

    xn = rand(4)
    f(Tensor(xn))
    f(Tensor(xn))  # captured with the "+ 1" branch
    mode["double"] = True
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn + 1)  # still the captured branch
    f.reset()
    f(Tensor(xn))
    f(Tensor(xn))
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn * 2)


def test_python_constant_is_frozen_at_capture():
    scale = [2.0]
    f = TinyJit(lambda x: x * scale[0])
    xn = rand(4)
    f(Tensor(xn))
    f(Tensor(xn))
    scale[0] = 5.0
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn * 2.0)


def test_replay_validation_errors():
    f = TinyJit(lambda x, k=1: x * k)
    for _ in range(3):
        f(Tensor(rand(4, 4)), k=2)
    with pytest.raises(JitError, match="shape"):
        f(Tensor(rand(4, 5)), k=2)
    with pytest.raises(JitError, match="float64"):
        f(Tensor(rand(4, 4).astype(np.float64)), k=2)
    with pytest.raises(JitError, match="'k' was 2 at capture, now 3"):
        f(Tensor(rand(4, 4)), k=3)
    with pytest.raises(JitError, match="keyword"):
        f(Tensor(rand(4, 4)))
    with pytest.raises(JitError, match="was a Tensor"):
        f(np.zeros((4, 4), np.float32), k=2)
    with pytest.raises(JitError, match="arguments"):
        f(Tensor(rand(4, 4)), Tensor(rand(4, 4)), k=2)
    np.testing.assert_allclose(f(Tensor(np.ones((4, 4), np.float32)), k=2).numpy(), 2)  # still usable


def test_changed_device_raises():
    f = TinyJit(lambda x: x + 1)
    for _ in range(3):
        f(Tensor(rand(4)))
    with pytest.raises(JitError, match="CPU:1"):
        f(Tensor(rand(4), device="CPU:1"))


def test_changed_model_object_raises():
    class Model:
        def __init__(self) -> None:
            self.w = Tensor(rand(3)).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x * self.w

    m = Model()
    for _ in range(3):
        xn = rand(3)
        np.testing.assert_allclose(m(Tensor(xn)).numpy(), xn * m.w.numpy(), rtol=1e-6)
    with pytest.raises(JitError, match="at capture"):
        Model()(Tensor(rand(3)))  # another instance: its weights are not the captured ones


READS = [lambda t: t.numpy(), lambda t: t.sum().item(), lambda t: t.tolist(), lambda t: bool(t.sum() > 0)]


@pytest.mark.parametrize("read", READS)
def test_reading_data_during_capture_raises(read):
    @TinyJit
    def f(x: Tensor) -> Tensor:
        y = x + 1
        read(y)
        return y

    f(Tensor(rand(4)))  # the 1st call runs normally
    with pytest.raises(JitError, match="frozen"):
        f(Tensor(rand(4)))


def test_tensors_nested_in_arguments_raise():
    f = TinyJit(lambda xs: xs[0] + xs[1])
    f([Tensor(rand(2)), Tensor(rand(2))])
    with pytest.raises(JitError, match="own argument"):
        f([Tensor(rand(2)), Tensor(rand(2))])


def test_jit_off_runs_the_function_every_time():
    runs = []

    def body(x: Tensor) -> Tensor:
        runs.append(1)
        return x + 1

    f = TinyJit(body)
    with Context(JIT=0):
        for _ in range(4):
            xn = rand(3)
            np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn + 1)
    assert len(runs) == 4 and f.captured is None


def test_variable_replays_without_recapture():
    """A KV-cache-style step: the position is a bound Variable, a kernel argument; one capture serves them all."""
    maxlen, d = 8, 4
    pos_var = Variable("pos", 0, maxlen - 1)
    cache = Tensor.zeros(maxlen, d).contiguous().realize()
    runs = []

    @TinyJit
    def step(x: Tensor, pos) -> Tensor:
        runs.append(1)
        p = Tensor(pos)
        rows = Tensor.arange(maxlen).reshape(maxlen, 1)
        cache.assign((rows == p).where(x.reshape(1, d).expand(maxlen, d), cache)).realize()
        return ((rows <= p).where(cache, 0.0)).sum(0)  # sum of the rows written so far

    cn = np.zeros((maxlen, d), np.float32)
    for i in range(maxlen):
        xn = rand(d)
        out = step(Tensor(xn), pos_var.bind(i))
        cn[i] = xn
        np.testing.assert_allclose(out.numpy(), cn[: i + 1].sum(0), rtol=1e-5, atol=1e-6)
    assert len(runs) == 2
    np.testing.assert_allclose(cache.numpy(), cn)
    with pytest.raises(JitError, match="bound variable"):
        step(Tensor(rand(d)), 3)


def test_state_update_with_assign():
    acc = Tensor.zeros(5).contiguous().realize()

    @TinyJit
    def add_to(x: Tensor) -> Tensor:
        acc.assign(acc + x).realize()
        return (acc * 2).realize()

    total = np.zeros(5, np.float32)
    for _ in range(5):
        xn = rand(5)
        total += xn
        np.testing.assert_allclose(add_to(Tensor(xn)).numpy(), total * 2, rtol=1e-5)
    np.testing.assert_allclose(acc.numpy(), total, rtol=1e-5)


def test_cpu_graph_replay_is_one_ctypes_call(monkeypatch):
    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for i in range(20):
            x = (x * 1.5 + i).realize()  # 20 kernels
        return x

    xn = rand(16)
    chain(Tensor(xn, device="CPU"))
    chain(Tensor(xn, device="CPU"))
    cj = chain.captured
    assert cj.kernel_count == 20 and cj.graph is not None
    calls = {"graph": 0, "kernel": 0}
    real_call = cj.graph.call

    def count_graph() -> None:
        calls["graph"] += 1
        real_call()

    def count_kernel(self, *args, **kwargs):
        calls["kernel"] += 1

    monkeypatch.setattr(cj.graph, "call", count_graph)
    monkeypatch.setattr(realize.CompiledRunner, "__call__", count_kernel)
    GlobalCounters.reset()
    for _ in range(3):
        xn = rand(16)
        out = chain(Tensor(xn, device="CPU"))
        expect = xn.copy()
        for i in range(20):
            expect = expect * 1.5 + i
        np.testing.assert_allclose(out.numpy(), expect, rtol=1e-4)
    assert calls == {"graph": 3, "kernel": 0}
    assert GlobalCounters.kernel_count == 60  # replayed kernels still count


def test_debug2_marks_replayed_kernels(capsys):
    f = TinyJit(lambda x: (x + 1).realize())
    f(Tensor(rand(4)))
    f(Tensor(rand(4)))
    capsys.readouterr()
    with Context(DEBUG=2):
        xn = rand(4)
        np.testing.assert_allclose(f(Tensor(xn)).numpy(), xn + 1)
    lines = [ansistrip(x) for x in capsys.readouterr().out.splitlines() if "***" in x]
    assert len(lines) == 1 and lines[0].endswith("jit replay")


@pytest.mark.parametrize("inner_captured_first", [False, True])
def test_jit_inside_a_capture_is_captured_too(inner_captured_first):
    inner = TinyJit(lambda x: (x * 2).realize())
    outer = TinyJit(lambda x: inner(x) + 1)
    if inner_captured_first:  # then the outer capture records the inner replay's kernels
        for _ in range(3):
            inner(Tensor(rand(6)))
    for _ in range(5):
        xn = rand(6)
        np.testing.assert_allclose(outer(Tensor(xn)).numpy(), xn * 2 + 1, rtol=1e-6)


def test_jit_plans_intermediate_memory(capsys):
    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for i in range(6):
            x = (x + i).realize()  # each step's input dies once the next step ran
        return x * 1

    n = 1024
    with Context(DEBUG=1):
        for _ in range(2):
            chain(Tensor(rand(n)))
    assert "JIT memory planner" in capsys.readouterr().out
    cj = chain.captured
    owned = sum(b.nbytes for b in cj.buffers)
    assert owned <= 3 * n * 4  # 6 intermediates and the output fit in ping-pong blocks plus the output
    for _ in range(3):
        xn = rand(n)
        np.testing.assert_allclose(chain(Tensor(xn)).numpy(), xn + 15, rtol=1e-5)


def test_training_step_matches_the_unjitted_one():
    from lazygrad.nn import Linear
    from lazygrad.nn.optim import Adam
    from lazygrad.nn.state import get_parameters

    def make_step():
        Tensor.manual_seed(0)
        l1, l2 = Linear(8, 16), Linear(16, 3)
        opt = Adam(get_parameters([l1, l2]), lr=1e-2)

        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return loss

        return step, l2

    (plain, plain_l2), (jitted, jit_l2) = make_step(), make_step()
    jitted = TinyJit(jitted)
    xs, ys = rand(6, 4, 8), np.random.default_rng(1).integers(0, 3, (6, 4)).astype(np.int32)
    with Tensor.train():
        for x, y in zip(xs, ys):
            expect = plain(Tensor(x), Tensor(y)).item()
            np.testing.assert_allclose(jitted(Tensor(x), Tensor(y)).item(), expect, rtol=1e-5)
    np.testing.assert_allclose(jit_l2.weight.numpy(), plain_l2.weight.numpy(), rtol=1e-5, atol=1e-6)


def test_same_input_on_first_calls_is_not_reused_stale():
    """Calls 1 and 2 build the same graph on the same input, and a lazy tensor keeps that graph's node alive, so
    the node realized by call 1 is still known at the capture; the capture must record its kernel all the same."""
    x = Tensor(rand(5)).realize()
    f = TinyJit(lambda t: t * 2 + 1)
    held = x * 2 + 1  # noqa: F841 -- the same node as the function builds
    f(x).realize()
    f(x)
    yn = rand(5)
    np.testing.assert_allclose(f(Tensor(yn)).numpy(), yn * 2 + 1, rtol=1e-6)


def test_same_variable_value_on_first_calls_is_not_reused_stale():
    """A stored value made from a weight and a bound variable (no input in it): realized by call 1 with the value
    the capture binds too, and kept alive by a lazy tensor. The capture must recompute it, not read call 1's."""
    v = Variable("k", 0, 10)
    wn = rand(5)
    w = Tensor(wn).realize()
    scaled = lambda k: (w * Tensor(k).cast(w.dtype)).contiguous()  # noqa: E731
    f = TinyJit(lambda t, k: scaled(k) + t)
    held = scaled(v.bind(3))  # noqa: F841
    x = Tensor(rand(5)).realize()
    f(x, v.bind(3)).realize()
    f(x, v.bind(3))
    np.testing.assert_allclose(f(x, v.bind(7)).numpy(), wn * 7 + x.numpy(), rtol=1e-6)


def test_side_effect_only_function_and_keyword_variable():
    v = Variable("n", 0, 100)
    acc = Tensor.zeros(3, device="CPU").contiguous().realize()  # CPU: the graph checked below is CPU's

    @TinyJit
    def bump(*, by) -> None:
        acc.assign(acc + Tensor(by, device="CPU").cast(acc.dtype)).realize()

    for i in range(6):
        assert bump(by=v.bind(i)) is None
    np.testing.assert_allclose(acc.numpy(), np.full(3, sum(range(6)), np.float32))
    assert bump.captured.graph is not None


def test_replay_kernel_by_kernel_on_a_device_without_graph():
    from lazygrad import Device
    from lazygrad.device import DeviceUnavailable

    try:
        Device["CL"]
    except DeviceUnavailable:
        pytest.skip("no OpenCL device")
    f = TinyJit(lambda x, y: ((x * 2) @ y).realize())
    for _ in range(4):
        xn, yn = rand(4, 6), rand(6, 3)
        out = f(Tensor(xn, device="CL"), Tensor(yn, device="CL"))
        # atol: a dot product that cancels to ~1e-4 differs in its last bits with the device's fma contraction
        np.testing.assert_allclose(out.numpy(), (xn * 2) @ yn, rtol=1e-5, atol=1e-5)
    assert f.captured.graph is None and f.captured.kernel_count >= 1
    to_cpu = TinyJit(lambda x: (x.to("CPU") * 2).realize())  # a copy between devices replays like a kernel
    for _ in range(4):
        xn = rand(5)
        np.testing.assert_allclose(to_cpu(Tensor(xn, device="CL")).numpy(), xn * 2, rtol=1e-6)
    assert to_cpu.captured.kernel_count == 2


def test_a_capture_that_reseeds_warns():
    def reseeded(x: Tensor) -> Tensor:
        Tensor.manual_seed(3)
        return x + Tensor.rand(4)

    f = TinyJit(reseeded)
    f(Tensor(rand(4)))
    Tensor.manual_seed(0)
    with pytest.warns(UserWarning, match="manual_seed"):
        f(Tensor(rand(4)))


def test_changed_training_or_no_grad_mode_raises():
    f = TinyJit(lambda x: x * 2)
    for _ in range(3):
        f(Tensor(rand(3)))
    with Tensor.train(), pytest.raises(JitError, match="training=True"):
        f(Tensor(rand(3)))
    with Tensor.no_grad(), pytest.raises(JitError, match="no_grad=True"):
        f(Tensor(rand(3)))


def test_replay_output_fresh_when_a_weight_requires_grad():
    # the output's .numpy() went through a copy whose cached result outlived the call: from the third call on, every
    # replay returned the second call's values
    w_np = np.random.default_rng(0).standard_normal((28, 20)).astype(np.float32)
    w = Tensor(w_np, requires_grad=True).realize()

    @TinyJit
    def embed(x: Tensor) -> Tensor:
        return ((x.unsqueeze(-1) == Tensor.arange(28)).cast(w.dtype) @ w).realize()

    for i in range(5):
        idx = np.array([i, (i * 7) % 28, 3])
        np.testing.assert_allclose(embed(Tensor(idx)).numpy(), w_np[idx], rtol=1e-6)


def test_replay_invalidates_values_computed_from_its_outputs():
    w = Tensor(np.ones((4, 4), np.float32)).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x @ w).realize()

    held = []
    for i in range(5):
        out = f(Tensor(np.full((2, 4), i, np.float32)))
        s = out.sum()
        held.append(out.sum())  # a lazy twin of s's graph keeps the cached result of s reachable
        assert s.item() == 32 * i


def test_random_numbers_are_new_on_every_replay() -> None:
    """As tinygrad's: rand, randint and dropout inside a TinyJit draw new numbers on each replay, the very numbers the
    same calls draw without the JIT (the replay writes the stream's next counters where the kernels read theirs)."""

    def step(x: Tensor) -> Tensor:
        noise = Tensor.rand(3, 5) + Tensor.randint(3, 5, high=100)
        with Tensor.train():
            kept = x.dropout(0.5)
        return (noise + kept).realize()

    jitted = TinyJit(step)
    xn = np.ones((3, 5), np.float32)
    Tensor.manual_seed(7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning about frozen numbers
        got = [jitted(Tensor(xn)).numpy().copy() for _ in range(5)]
    Tensor.manual_seed(7)
    want = [step(Tensor(xn)).numpy() for _ in range(5)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert len({g.tobytes() for g in got}) == 5  # five different draws
    assert jitted.captured is not None and jitted.captured.n_draws == 3


def test_a_random_tensor_drawn_before_the_capture_stays_a_constant() -> None:
    noise = Tensor.rand(4)  # drawn (lazily) outside: the function reads one fixed tensor, as without the JIT

    @TinyJit
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        return (x + noise).realize(), Tensor.rand(4).realize()

    outs = [[t.numpy().copy() for t in f(Tensor.zeros(4).contiguous())] for _ in range(4)]
    for a, _ in outs:
        np.testing.assert_array_equal(a, noise.numpy())
    assert len({b.tobytes() for _, b in outs}) == 4


def test_random_numbers_on_several_devices_are_new_on_every_replay() -> None:
    devices = ("CPU", "CPU:1")

    @TinyJit
    def f() -> Tensor:
        return (Tensor.rand(4, device=devices) * 1).realize()

    Tensor.manual_seed(0)
    got = [f().numpy().copy() for _ in range(4)]
    Tensor.manual_seed(0)
    want = [(Tensor.rand(4, device=devices) * 1).numpy() for _ in range(4)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert len({g.tobytes() for g in got}) == 4


def test_in_place_write_into_a_view_argument_lands_in_its_tensor() -> None:
    """A view argument (a column block, a transpose) reaches the kernels as a copy: the capture and every replay
    write the copy's new contents back, so the write lands in the viewed tensor as in torch (it did on the first,
    uncaptured call only, then silently stopped)."""

    @TinyJit
    def bump(b: Tensor) -> Tensor:
        b += 10
        return b.sum().realize()

    for k in range(5):
        an = np.arange(18, dtype=np.float32).reshape(6, 3) + k
        a = Tensor(an).realize()
        assert bump(a[:, 0:2]).item() == (an[:, 0:2] + 10).sum()
        an[:, 0:2] += 10
        np.testing.assert_array_equal(a.numpy(), an)

    @TinyJit
    def scale(b: Tensor) -> Tensor:
        b *= 2
        return (b + 1).realize()

    for k in range(4):
        an = np.arange(6, dtype=np.float32).reshape(2, 3) + k
        a = Tensor(an).realize()
        out = scale(a.T)
        an *= 2
        np.testing.assert_array_equal(out.numpy(), an.T + 1)
        np.testing.assert_array_equal(a.numpy(), an)


def test_in_place_write_into_an_output_fed_back() -> None:
    """The previous call's output fed back is copied (a kernel may overwrite it while another reads it), and its
    in-place write is not written back: that memory is the JIT's output, which this replay rewrites (a write landing
    after it would corrupt the new output)."""

    @TinyJit
    def step(x: Tensor) -> Tensor:
        x += 1
        return (x * 2).realize()

    x, xn = Tensor.zeros(3).contiguous().realize(), np.zeros(3, np.float32)
    for _ in range(5):
        x = step(x)
        xn = (xn + 1) * 2
        np.testing.assert_array_equal(x.numpy(), xn)


def _grads_after_steps(pattern: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(our p.grad, torch's) after each of 6 steps of a tiny model; pattern: 'mixed' (TinyJit and eager steps of the
    same parameters alternate), 'backward_only' (the jitted function only runs backward; the update is outside),
    'zero_outside' (zero_grad(set_to_none) outside the jitted step), 'accumulate' (the jitted function only runs
    backward: its gradients add up over calls, as torch's, with zero_grad(set_to_none) outside every third step)."""
    from lazygrad.nn.optim import SGD

    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(6)]
    w = Tensor(w0.copy(), requires_grad=True)
    tw = torch.tensor(w0.copy(), requires_grad=True)
    opt, topt = SGD([w], lr=0.1), torch.optim.SGD([tw], lr=0.1)

    def step(x: Tensor) -> Tensor:
        if pattern not in ("zero_outside", "accumulate"):
            opt.zero_grad()
        loss = (x @ w).tanh().sum()
        loss.backward()
        if pattern not in ("backward_only", "accumulate"):
            opt.step()
        return loss.realize()

    jitted, out = TinyJit(step), []
    with Tensor.train():
        for i, x in enumerate(xs):
            if pattern == "zero_outside" or pattern == "accumulate" and i % 3 == 0:
                opt.zero_grad()
            (step if pattern == "mixed" and i % 2 == 0 else jitted)(Tensor(x))
            if pattern != "accumulate" or i % 3 == 0:
                topt.zero_grad()
            (torch.tensor(x) @ tw).tanh().sum().backward()
            out.append((w.grad.numpy(), tw.grad.numpy().copy()))
            if pattern == "backward_only":
                with Tensor.no_grad():
                    w -= 0.1 * w.grad
                w.realize()
            if pattern != "accumulate":
                topt.step()
    return out


@pytest.mark.parametrize("pattern", ["mixed", "backward_only", "zero_outside", "accumulate"])
def test_a_parameters_grad_after_a_replay_is_that_steps(pattern):
    # a replay runs no Python: .grad kept what the last call that ran the function left there (an eager step's
    # gradient, or None after a zero_grad outside), or a lazy gradient built on the capture's inputs; a backward
    # accumulating into .grad added each replay's gradient to the capture's .grad (read as a constant buffer), not to
    # the .grad of that call (nor to nothing after a zero_grad outside)
    for i, (ours, theirs) in enumerate(_grads_after_steps(pattern)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=f"step {i}")


@pytest.mark.parametrize("zero_grad", [True, False])
def test_parameters_passed_as_arguments_get_their_gradients(zero_grad):
    """A parameter passed to the jitted function (not reached through a closure): a backward inside reaches it (the
    capture's stand-in for the argument raised "depends on no tensor that requires grad"), each call leaves the
    gradient on the argument passed, and the weights follow the eager run's, with gradients zeroed or accumulated."""

    def step(w, b, x):
        if zero_grad:
            w.grad = b.grad = None
        loss = ((x @ w + b).tanh() ** 2).sum()
        loss.backward()
        w.assign(w.detach() - w.grad * 0.05)
        b.assign(b.detach() - b.grad * 0.05)
        return loss.realize()

    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    params = [Tensor(w0, requires_grad=True), Tensor(b0, requires_grad=True)]
    eager = [Tensor(w0, requires_grad=True), Tensor(b0, requires_grad=True)]
    jit = TinyJit(step)
    for i in range(5):
        x = Tensor(rng.standard_normal((2, 4)).astype(np.float32))
        np.testing.assert_allclose(jit(*params, x).numpy(), step(*eager, x).numpy(), rtol=1e-5)
        for p, e in zip(params, eager):
            np.testing.assert_allclose(p.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(p.grad.numpy(), e.grad.numpy(), rtol=1e-5, atol=1e-6)
