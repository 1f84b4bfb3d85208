"""kernelize._Template.output: a lone realize recycles the buffer and node of its template's last output once nothing
holds them any more, and never one that something can still read or write through."""

import threading

import numpy as np
import pytest
import torch

from lazygrad import Tensor, TinyJit
from lazygrad.helpers import FRAME_REFS_CHECKED
from lazygrad.schedule import kernelize

pytestmark = pytest.mark.skipif(
    not FRAME_REFS_CHECKED, reason="recycling is taken only where reference counts were checked"
)

N = 16


def _inputs(k: int) -> np.ndarray:
    return np.arange(N, dtype=np.float32) * (k + 1) + 0.25 * k


def _made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the Buffers the template makes (kernelize's own Buffer)."""
    made: list[int] = []
    real = kernelize.Buffer

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernelize, "Buffer", counting)
    return made


def test_a_dropped_result_is_recycled(monkeypatch):
    a, b = Tensor(_inputs(1)).realize(), Tensor(_inputs(2)).realize()
    for _ in range(3):
        (a + b).realize()
    made = _made(monkeypatch)
    for _ in range(5):
        (a + b).realize()
    assert made == []
    # and the recycled memory holds each new value
    for k in range(4):
        x = Tensor(_inputs(k)).realize()
        np.testing.assert_array_equal((x + b).realize().numpy(), _inputs(k) + _inputs(2))
    np.testing.assert_array_equal(a.sum().realize().numpy(), _inputs(1).sum())


def _keep(how: str, t: Tensor):
    """What a program keeps of a realized result t, and how it reads the values back later."""
    if how == "tensor":
        return t, lambda kept: kept.numpy()
    if how == "uop":
        return t.uop, lambda kept: Tensor(kept).numpy()
    if how == "view":
        return t.reshape(4, 4), lambda kept: kept.numpy().reshape(-1)
    if how == "slice":
        return t[3:9], lambda kept: kept.numpy()
    if how == "lazy reader":  # a graph reading it, realized only after the loop wrote the next results
        return t * 2, lambda kept: kept.numpy() / 2
    if how == "buffer":
        buf = t.uop.base.arg
        return buf, lambda kept: np.frombuffer(kept.as_bytes(), np.float32)
    if how == "schedule":  # a reader scheduled now, run after the loop (its items hold the buffer)
        r = t + 0.5
        return (r, r.schedule_with_vars()), lambda kept: _run_then_read(*kept) - 0.5
    raise AssertionError(how)


def _run_then_read(r: Tensor, scheduled) -> np.ndarray:
    from lazygrad.engine.realize import run_schedule

    run_schedule(*scheduled)
    return r.numpy()


@pytest.mark.parametrize("how", ["tensor", "uop", "view", "slice", "lazy reader", "buffer", "schedule"])
def test_a_kept_result_is_never_recycled(how):
    b = Tensor(_inputs(100)).realize()
    kept = []
    for k in range(6):
        x = Tensor(_inputs(k)).realize()
        for _ in range(2):
            (x + b).realize()  # dropped: recycled, the kept ones must not be
        kept.append(_keep(how, (x + b).realize()))
        (x + b).realize()
    for k, (held, read) in enumerate(kept):
        want = (_inputs(k) + _inputs(100))[slice(3, 9) if how == "slice" else slice(None)]
        np.testing.assert_allclose(read(held), want, err_msg=f"result {k} kept as {how}")


def test_a_result_written_in_place_later_keeps_its_writes():
    b = Tensor(_inputs(7)).realize()
    c = (b + b).realize()
    c += 1  # an in-place write into the result's memory, its node read by the write
    for _ in range(4):
        (b + b).realize()
    np.testing.assert_array_equal(c.numpy(), 2 * _inputs(7) + 1)
    d = (b + b).realize()
    d.assign(d * 3).realize()
    for _ in range(4):
        (b + b).realize()
    np.testing.assert_array_equal(d.numpy(), 6 * _inputs(7))


def test_a_result_with_a_gradient_path_keeps_its_value_and_gradient():
    w = Tensor(_inputs(3), requires_grad=True)
    tw = torch.tensor(_inputs(3), requires_grad=True)
    b = Tensor(_inputs(4)).realize()
    h = (w * b).realize()
    for _ in range(4):
        (w * b).realize()
        (b * b).realize()
    h.sum().backward()
    (tw * torch.tensor(_inputs(4))).sum().backward()
    np.testing.assert_allclose(h.numpy(), _inputs(3) * _inputs(4))
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())


def test_results_of_other_dtypes_and_shapes_are_their_own():
    a = Tensor(np.arange(N, dtype=np.int32)).realize()
    m = Tensor(np.arange(N, dtype=np.float32).reshape(4, 4)).realize()
    outs = []
    for k in range(3):
        (a + k).realize()
        outs.append(((a + k).realize(), (m * (k + 1)).realize(), m.sum(1).realize(), (a.float() + k).realize()))
        (m * (k + 1)).realize()
    for k, (i, f, s, c) in enumerate(outs):
        np.testing.assert_array_equal(i.numpy(), np.arange(N) + k)
        assert i.dtype == a.dtype
        np.testing.assert_array_equal(f.numpy(), np.arange(N).reshape(4, 4) * (k + 1))
        np.testing.assert_array_equal(s.numpy(), np.arange(N).reshape(4, 4).sum(1))
        np.testing.assert_array_equal(c.numpy(), np.arange(N) + k)


def test_a_jit_beside_an_eager_loop_of_the_same_graph():
    b = Tensor(_inputs(9)).realize()
    add = TinyJit(lambda x: (x + b).realize())
    got = []
    for k in range(6):
        x = Tensor(_inputs(k)).realize()
        (x + b).realize()
        got.append((k, add(x)))
        (x + b).realize()
    # (a replay writes the JIT's own output buffer: its last result, and the first, made before any capture, are read)
    np.testing.assert_array_equal(got[-1][1].numpy(), _inputs(5) + _inputs(9))
    np.testing.assert_array_equal(got[0][1].numpy(), _inputs(0) + _inputs(9))


def test_threads_each_keeping_their_results():
    b = Tensor(_inputs(50)).realize()
    errors: list[str] = []

    def loop(base: int) -> None:
        kept = []
        for k in range(40):
            x = Tensor(_inputs(base + k)).realize()
            (x + b).realize()
            kept.append((base + k, (x + b).realize()))
        for j, t in kept:
            if not np.array_equal(t.numpy(), _inputs(j) + _inputs(50)):
                errors.append(f"result {j}")

    threads = [threading.Thread(target=loop, args=(100 * i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors


def test_inputs_over_external_memory_are_never_written():
    src = _inputs(11).copy()
    x = Tensor.from_blob(src.ctypes.data, (N,))
    b = Tensor(_inputs(12)).realize()
    outs = []
    for _ in range(3):
        (x + b).realize()
        outs.append((x + b).realize())
        (x + b).realize()
    np.testing.assert_array_equal(src, _inputs(11))
    for out in outs:
        np.testing.assert_array_equal(out.numpy(), _inputs(11) + _inputs(12))


def test_a_loop_holding_its_last_result_recycles_the_one_before(monkeypatch):
    b = Tensor(_inputs(5)).realize()
    x = Tensor(_inputs(6)).realize()
    want = _inputs(6)
    for _ in range(4):
        x = (x * 0.5 + b).realize()  # reads the last result: it is held while the next is computed
        want = want * 0.5 + _inputs(5)
    made = _made(monkeypatch)
    for _ in range(5):
        x = (x * 0.5 + b).realize()
        want = want * 0.5 + _inputs(5)
    assert made == []
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
