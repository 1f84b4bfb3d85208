"""A training step's realize laid out by its gradient and update programs' runs (schedule/kernelize.py, _layout)
schedules exactly what the schedule cache's walk schedules: every scenario runs twice, with STEP_LAYOUTS on and off,
and must run the same kernels over the same buffer pattern and give the same bits, step for step."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import lazygrad.tensor as tensor_module
from lazygrad import Tensor, dtypes
from lazygrad.helpers import Context
from lazygrad.nn import Linear
from lazygrad.nn.optim import LAMB, SGD, Adam, AdamW
from lazygrad.nn.state import get_parameters
from lazygrad.schedule import kernelize


class _Model:
    """An MLP of fixed initial weights (numpy-seeded: both runs start alike) with its optimizer."""

    def __init__(self, seed: int, opt: Callable[..., Any] = Adam, width: int = 16, **kw: Any):
        rng = np.random.default_rng(seed)
        self.l1, self.l2 = Linear(8, width), Linear(width, 4)
        for layer in (self.l1, self.l2):
            layer.weight.assign(Tensor(rng.standard_normal(layer.weight.shape).astype(np.float32) * 0.3))
            layer.bias.assign(Tensor(rng.standard_normal(layer.bias.shape).astype(np.float32) * 0.1))
        self.opt = opt(get_parameters([self.l1, self.l2]), lr=1e-2, **kw)

    def hidden(self, x: Tensor) -> Tensor:
        return self.l1(x).relu()

    def loss(self, x: Tensor, y: Tensor) -> Tensor:
        return self.l2(self.hidden(x)).sparse_categorical_crossentropy(y)

    def step(self, x: Tensor, y: Tensor) -> Tensor:
        self.opt.zero_grad()
        loss = self.loss(x, y).backward()
        self.opt.step()
        return loss

    def weights(self) -> list[bytes]:
        return [p.numpy().tobytes() for p in (self.l1.weight, self.l1.bias, self.l2.weight, self.l2.bias)]


def _data(n: int = 64) -> tuple[Tensor, Tensor]:
    rng = np.random.default_rng(7)
    x = Tensor(rng.standard_normal((n, 8)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 4, n).astype(np.int32)).realize()
    return x, y


def _plain(out: list) -> None:
    m, (x, y) = _Model(1), _data()
    for _ in range(5):
        out.append(m.step(x, y).numpy().tobytes())
    out += m.weights()


def _read_mid_step(out: list) -> None:
    """Reads between the forward and backward, between backward and the step, and of a gradient after it."""
    m, (x, y) = _Model(2), _data()
    for i in range(9):
        m.opt.zero_grad()
        h = m.hidden(x)
        if i in (2, 5):
            out.append(h.numpy().tobytes())  # a forward node realized inside the graph backward walks
        loss = m.l2(h).sparse_categorical_crossentropy(y).backward()
        if i in (3, 6):
            out.append(loss.numpy().tobytes())  # the loss realized before the step
        m.opt.step()
        out.append(loss.numpy().tobytes())
        out.append(m.l1.weight.grad.numpy().tobytes())
    out += m.weights()


def _lr_changed(out: list) -> None:
    m, (x, y) = _Model(3), _data()
    for i in range(6):
        if i == 2:
            m.opt.lr.assign(Tensor.full((), 3e-3, dtype=dtypes.float64))
        if i == 4:
            m.opt.lr.assign(m.opt.lr * 2).realize()
        out.append(m.step(x, y).numpy().tobytes())
    out += m.weights()


def _requires_grad_toggled(out: list) -> None:
    m, (x, y) = _Model(4), _data()
    for i in range(6):
        m.l1.weight.requires_grad = i not in (2, 3)
        out.append(m.step(x, y).numpy().tobytes())
    out += m.weights()


def _interleaved(out: list) -> None:
    """Two models of one structure (one gradient and one update program) and a wider third, step by step."""
    a, b, c, (x, y) = _Model(5), _Model(6), _Model(7, width=32), _data()
    for _ in range(4):
        for m in (a, b, c, b):
            out.append(m.step(x, y).numpy().tobytes())
    out += a.weights() + b.weights() + c.weights()


def _minibatches(out: list) -> None:
    """Rows sliced from a realized dataset, a new offset every step; a last batch of other size."""
    m = _Model(8)
    x, y = _data(256)
    for j in (0, 64, 128, 192, 0, 200):
        out.append(m.step(x[j : j + 64], y[j : j + 64]).numpy().tobytes())
    out += m.weights()


def _lazy_readers_and_accumulation(out: list) -> None:
    """A lazy tensor over a weight kept across the step (it joins the step's schedule), and gradients summed over two
    backward passes (no zero_grad between)."""
    m, (x, y) = _Model(9), _data()
    for i in range(5):
        kept = m.l1.weight * 2 if i % 2 else None
        m.opt.zero_grad()
        m.loss(x, y).backward()
        if i >= 3:
            m.loss(x[:32], y[:32]).backward()
        m.opt.step()
        if kept is not None:
            out.append(kept.numpy().tobytes())
    out += m.weights()


def _other_optimizers(out: list) -> None:
    x, y = _data()
    for m in (_Model(10, SGD, momentum=0.9), _Model(11, AdamW), _Model(12, SGD), _Model(14, LAMB, weight_decay=0.01)):
        for _ in range(4):
            out.append(m.step(x, y).numpy().tobytes())
        out += m.weights()


def _digits_cnn(out: list) -> None:
    """The digits demo's step: convolutions, a batch norm whose running statistics the step writes, and an accuracy
    count realized with it (outputs no program built: walked beside the runs' layout)."""
    from lazygrad.examples.digits import DigitsCNN, make_step
    from lazygrad.nn.state import get_state_dict

    Tensor.manual_seed(0)
    model = DigitsCNN()
    opt = Adam(get_parameters(model), lr=3e-3)
    step = make_step(model, opt, jit=False)
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((16, 1, 8, 8)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 16).astype(np.int32)).realize()
    for _ in range(3):
        loss, correct = step(x, y)
        out += [loss.numpy().tobytes(), correct.numpy().tobytes()]
    for _ in range(3):
        # the hits realized first: the count's graph (walked beside the layout) meets a realized node
        opt.zero_grad()
        logits = model(x)
        loss = logits.sparse_categorical_crossentropy(y).backward()
        out.append((logits.argmax(-1) == y).numpy().tobytes())
        correct = (logits.argmax(-1) == y).sum()
        Tensor.realize(loss, correct, *opt.schedule_step())
        out += [loss.numpy().tobytes(), correct.numpy().tobytes()]
    out += [t.numpy().tobytes() for t in get_state_dict(model).values()]


SCENARIOS = {
    f.__name__.strip("_"): f
    for f in (
        _plain,
        _read_mid_step,
        _lr_changed,
        _requires_grad_toggled,
        _interleaved,
        _minibatches,
        _lazy_readers_and_accumulation,
        _other_optimizers,
        _digits_cnn,
    )
}


def _run(scenario: Callable[[list], None], layouts: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list, int]:
    """The scenario's results, each schedule's kernels with the pattern of buffers they use (sizes, dtypes, which
    are one), and how many schedules were laid out by runs. (Run once before it is compared: the first run of a
    scenario also fills the process's caches, and a lone realize found there runs without a schedule.)"""
    kernels: list[tuple] = []
    run = tensor_module.run_schedule

    def logged(schedule: list, *args: Any, **kwargs: Any) -> Any:
        ids: dict[int, int] = {}
        items = []
        for si in schedule:
            bufs = tuple((ids.setdefault(id(b.memory), len(ids)), b.size, b.dtype) for b in si.bufs)
            items.append((si.ast, bufs))
        kernels.append(tuple(items))
        return run(schedule, *args, **kwargs)

    laid = [0]
    walk = kernelize._Laid.walk

    def counted(self: kernelize._Laid, nodes: list) -> Any:
        laid[0] += 1
        return walk(self, nodes)

    with monkeypatch.context() as mp:
        mp.setattr(tensor_module, "run_schedule", logged)
        mp.setattr(kernelize._Laid, "walk", counted)
        out: list = []
        with Context(STEP_LAYOUTS=layouts), Tensor.train():
            scenario(out)
    return out, kernels, laid[0]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_laid_out_steps_match_walked_ones(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(SCENARIOS[name], 1, monkeypatch)
    walked, walked_kernels, none = _run(SCENARIOS[name], 0, monkeypatch)
    laid, laid_kernels, used = _run(SCENARIOS[name], 1, monkeypatch)
    assert none == 0
    assert len(laid_kernels) == len(walked_kernels)
    for i, (a, b) in enumerate(zip(laid_kernels, walked_kernels)):
        assert a == b, f"schedule {i} differs"
    assert laid == walked  # bit for bit
    # every scenario has steps of plain form, after the first of their structure: those are laid out
    assert used > 0


def test_layout_falls_back_where_the_runs_do_not_give_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor op between the backward and the step (a gradient changed by hand), a gradient summed over two passes
    and a forward node read mid-step make no layout: the walk schedules those steps."""
    m, (x, y) = _Model(13), _data()
    _, _, used = _run(lambda out: [m.step(x, y) for _ in range(3)], 1, monkeypatch)
    assert used == 2  # (the first step records the layout)

    def clipped(out: list) -> None:
        m.opt.zero_grad()
        m.loss(x, y).backward()
        m.l1.weight.grad = m.l1.weight.grad.clip(-0.1, 0.1)
        m.opt.step()

    def accumulated(out: list) -> None:
        m.opt.zero_grad()
        m.loss(x, y).backward()
        m.loss(x, y).backward()
        m.opt.step()

    def read(out: list) -> None:
        m.opt.zero_grad()
        h = m.hidden(x)
        h.realize()
        m.l2(h).sparse_categorical_crossentropy(y).backward()
        m.opt.step()

    for scenario in (clipped, accumulated, read):
        _, _, used = _run(scenario, 1, monkeypatch)
        assert used == 0, scenario.__name__


def test_layout_keys_how_the_runs_relate() -> None:
    """Runs of the same programs key alike over other buffers, and apart where an input of a later run is a node of an
    earlier run rather than a buffer of its own (the walk numbers one buffer, not two), or a reshape over one."""
    from lazygrad.uop.ops import Ops, UOp
    from lazygrad.uop.program import Replay

    def buffers(n: int) -> list:
        return [Tensor.empty(4).realize().uop.base for _ in range(n)]

    def key(first, second, reshaped: bool = False) -> tuple:
        plus = UOp(Ops.ADD, first.dtype, (first, first))
        later = UOp(Ops.RESHAPE, second.dtype, (second,), (2, 2)) if reshaped else second
        times = UOp(Ops.MUL, later.dtype, (later, later))
        runs = [Replay("forward", [first, plus], 1, True), Replay("update", [later, times], 1, False)]
        laid = kernelize._layout([plus, times], runs, tensor_module._realized)
        assert laid is not None
        return laid[0]

    a, b, c, d = buffers(4)
    assert a.op is Ops.BUFFER
    assert key(a, b) == key(c, d)
    assert key(a, b) != key(a, a)
    assert key(a, b, reshaped=True) == key(c, d, reshaped=True) != key(a, a, reshaped=True)
    assert key(a, b) != key(a, b, reshaped=True)


@pytest.mark.parametrize("layouts", [0, 1])
def test_digits_step_walks_only_what_no_program_built(monkeypatch: pytest.MonkeyPatch, layouts: int) -> None:
    """The digits demo's step (batch norm, accuracy count): laid out by its runs, the walk numbers only the nodes of
    the running statistics' updates and the count (about 50 of about 330)."""
    from lazygrad.examples.digits import DigitsCNN, make_step

    model = DigitsCNN()
    step = make_step(model, Adam(get_parameters(model), lr=3e-3), jit=False)
    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((16, 1, 8, 8)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 16).astype(np.int32)).realize()
    walked: list[int] = []
    walk_init = kernelize._Walk.__init__

    def counted(self: kernelize._Walk, outs: list, realized: Any, known: Any = None, at: Any = None) -> None:
        walk_init(self, outs, realized, known, at)
        walked.append(len(self.nodes) - len(known or ()))

    with Context(STEP_LAYOUTS=layouts):
        for _ in range(3):
            step(x, y)
        monkeypatch.setattr(kernelize._Walk, "__init__", counted)
        step(x, y)
    assert len(walked) == 1
    assert walked[0] <= 60 if layouts else walked[0] >= 200
