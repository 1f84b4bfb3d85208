"""Threads realizing tensors at once: different graphs, the same graph, TinyJit, with the disk cache on and off."""

import collections
import contextlib
import gc
import os
import struct
import subprocess
import sys
import threading
import weakref
from typing import Any, Callable

import numpy as np
import pytest

from lazygrad import Context, Tensor, TinyJit
from test.helpers import run_in_threads

N_THREADS = 4


def _work(tid: int, shared: Tensor, shared_n: np.ndarray) -> None:
    rng = np.random.default_rng(tid)
    step = TinyJit(lambda x: ((x * 2 + 1).relu() @ shared).sum(1).realize())
    for i in range(6):
        # a graph of this thread's own shape (its own kernels to compile)
        a = rng.standard_normal((5 + tid, 7 + i)).astype(np.float32)
        got = (Tensor(a).exp2() * 3 - Tensor(a).max(1, keepdim=True)).sum(0).numpy()
        np.testing.assert_allclose(got, (np.exp2(a) * 3 - a.max(1, keepdims=True)).sum(0), rtol=1e-4, atol=1e-4)
        # the same graph in every thread (same UOps: the same shared tensor), realized concurrently
        same = (shared @ shared.T).relu().sum(1) + i
        np.testing.assert_allclose(same.numpy(), np.maximum(shared_n @ shared_n.T, 0).sum(1) + i, rtol=1e-4)
        # a JIT per thread: its capture must record this thread's kernels only
        x = rng.standard_normal((3, 8)).astype(np.float32)
        want = (np.maximum(x * 2 + 1, 0) @ shared_n).sum(1)
        np.testing.assert_allclose(step(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-4)


def run_threads(n: int = N_THREADS) -> None:
    shared_n = np.random.default_rng(99).standard_normal((8, 8)).astype(np.float32)
    shared = Tensor(shared_n).realize()
    errors: list[BaseException] = []

    def target(tid: int) -> None:
        try:
            _work(tid, shared, shared_n)
        except BaseException as e:  # noqa: BLE001 -- reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("cachelevel", [0, 2])
def test_threads_in_this_process(cachelevel):
    with Context(CACHELEVEL=cachelevel):
        run_threads()


@pytest.mark.parametrize("cachelevel", ["0", "2"])
def test_threads_in_a_fresh_process(tmp_path, cachelevel):
    # a new cache database: every thread opens its first connection to it and the tables are made concurrently
    env = {**os.environ, "CACHELEVEL": cachelevel, "CACHEDB": str(tmp_path / "cache.db")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    code = "from test.test_threads import run_threads; run_threads(); print('ok')"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
    assert (tmp_path / "cache.db").exists() == (cachelevel == "2")


def test_disk_cache_from_many_threads(tmp_path):
    env = {**os.environ, "CACHEDB": str(tmp_path / "cache.db")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    code = """
import threading
import weakref
from typing import Any, Callable
from lazygrad.helpers import diskcache_get, diskcache_put
def work(t):
    for i in range(50):
        diskcache_put("threads_test", (t, i), [t, i])
        assert diskcache_get("threads_test", (t, i)) == [t, i]
ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
assert all(diskcache_get("threads_test", (t, i)) == [t, i] for t in range(8) for i in range(50))
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def _in_other_thread_while(enter: Callable[[], Any], body: Callable[[], None]) -> None:
    """Run body() here while another thread sits inside the context manager enter() returns."""
    inside, done = threading.Event(), threading.Event()

    def other() -> None:
        with enter():
            inside.set()
            done.wait(30)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(30)
        body()
    finally:
        done.set()
        t.join()


def test_launch_counts_from_threads_at_once_add_up() -> None:
    """GlobalCounters count every launch once, from threads launching at once with no lock (each appends its counts;
    a read adds them in): lone realizes of a template seen before (launch_template), a TinyJit replay and the
    general path, with reads and a reset between."""
    from lazygrad.helpers import GlobalCounters

    rng = np.random.default_rng(3)
    # each thread its own inputs: threads adding the same two tensors at once may share one node (hash-consing), which
    # one realize computes for all
    ins = [rng.standard_normal((2, 16)).astype(np.float32) for _ in range(N_THREADS)]
    pairs = [(Tensor(x[0]).realize(), Tensor(x[1]).realize()) for x in ins]
    a, b = pairs[0]
    step = TinyJit(lambda x: (x * 2).realize())
    for _ in range(3):
        (a + b).realize()
        step(a)
    per_add = 16 * 4 * 3  # bytes a 16-float add moves
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.global_mem) == (0, 0)
    reps = 200

    def work(tid: int) -> None:
        for i in range(reps):
            if tid == 0 and i % 50 == 0:
                assert GlobalCounters.kernel_count >= 0  # reads in between add what was launched so far
            x, y = pairs[tid]
            np.testing.assert_allclose((x + y).realize().numpy(), ins[tid][0] + ins[tid][1], rtol=1e-6)

    run_in_threads(work, N_THREADS)
    assert GlobalCounters.kernel_count == N_THREADS * reps
    assert GlobalCounters.global_mem == N_THREADS * reps * per_add
    before = GlobalCounters.kernel_count
    step(a)
    (a * b + 1).sqrt().realize()
    assert GlobalCounters.kernel_count == before + 2
    GlobalCounters.kernel_count = 5
    (a + b).realize()
    assert GlobalCounters.kernel_count == 6


def test_no_grad_depth_counted_per_thread_back_to_zero() -> None:
    """The threads inside no_grad are counted (a tensor made while none is reads no thread-local depth): nested blocks,
    a block left by an exception and blocks in other threads leave the count at 0, and a binary op of alike tensors
    (made with no __init__) made inside one is detached while one made outside, in another thread, is not."""
    from lazygrad import tensor as tensor_module

    w = Tensor(np.ones(4, np.float32), requires_grad=True)
    x = Tensor(np.full(4, 2.0, np.float32))
    with pytest.raises(ZeroDivisionError):
        with Tensor.no_grad():
            with Tensor.no_grad():
                assert not (w * x).requires_grad
            assert not (w + x).requires_grad
            1 / 0  # noqa: B018
    assert tensor_module._NO_GRAD_THREADS[0] == 0
    assert (w * x).requires_grad

    def body() -> None:
        y = w * x
        assert y.requires_grad
        y.sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), np.full(4, 2.0, np.float32))

    _in_other_thread_while(Tensor.no_grad, body)
    assert tensor_module._NO_GRAD_THREADS[0] == 0


def test_no_grad_in_another_thread_leaves_this_ones_gradients() -> None:
    """torch's grad mode is per thread: a thread serving inference under no_grad() while another trains must not
    take the trainer's gradients away (it did for every step: no_grad was one process-wide counter)."""
    w_n = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    x_n = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)

    def body() -> None:
        assert Tensor.is_grad_enabled()
        w = Tensor(w_n, requires_grad=True)
        (Tensor(x_n) @ w).relu().sum().backward()
        assert w.grad is not None
        np.testing.assert_allclose(w.grad.numpy(), x_n.T @ ((x_n @ w_n) > 0), rtol=1e-6)

    _in_other_thread_while(Tensor.no_grad, body)
    # and the other way round: this thread's no_grad leaves a new thread's gradients on
    with Tensor.no_grad():
        errors: list[BaseException] = []

        def trainer() -> None:
            try:
                body()
            except BaseException as e:  # noqa: BLE001 -- reported by the main thread
                errors.append(e)

        t = threading.Thread(target=trainer)
        t.start()
        t.join()
        assert not Tensor.is_grad_enabled()
    assert not errors, errors


def test_train_block_is_per_thread() -> None:
    """A `with Tensor.train()` block in one thread turns on dropout there only; eval elsewhere stays exact."""
    x = Tensor.ones(1000)

    def evaluates() -> None:
        assert not Tensor.training
        assert x.dropout(0.5).tolist() == x.tolist()

    _in_other_thread_while(Tensor.train, evaluates)

    def trains() -> None:
        assert Tensor.training
        assert 0.4 < (x.dropout(0.5).numpy() != 0).mean() < 0.6

    with Tensor.train():
        _in_other_thread_while(lambda: Tensor.train(False), trains)
        # tinygrad's one switch inside a block: Context and assignment change the block's mode, and it comes back
        with Context(TRAINING=0):
            assert not Tensor.training
        assert Tensor.training
        Tensor.training = False
        assert not Tensor.training
    assert not Tensor.training
    Tensor.training = True  # outside any block: the process-wide value, seen by every thread
    try:
        seen: list[bool] = []
        t = threading.Thread(target=lambda: seen.append(Tensor.training))
        t.start()
        t.join()
        assert seen == [True]
    finally:
        Tensor.training = False


def test_one_train_decorator_in_many_threads() -> None:
    """One decorated function entered by several threads at once: each restores its own thread's mode."""
    barrier = threading.Barrier(3)

    @Tensor.train()
    def step() -> bool:
        barrier.wait(30)
        return Tensor.training

    results: list[bool] = []

    def run() -> None:
        results.append(step())
        results.append(Tensor.training)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 3 + [True] * 3


def test_random_tensors_drawn_in_threads_never_share_values() -> None:
    """Each random call takes its own counter under a lock: with the counter read twice around other work, threads
    switching in between drew the same numbers (14 of 1200 tensors were repeats)."""
    drawn: list[tuple[float, ...]] = []
    who: dict[tuple[float, ...], list[tuple[int, int]]] = collections.defaultdict(list)

    def draw(tid: int) -> None:
        tensors = [Tensor.rand(8) for _ in range(150)]
        for i, t in enumerate(tensors):
            v = tuple(t.tolist())
            drawn.append(v)
            who[v].append((tid, i))

    run_in_threads(draw, 4)
    assert len(drawn) == 600
    # a value outside [0, 1) is memory no kernel wrote (a fresh or freed block: with MALLOC_PERTURB_ set, bytes 0x5a or
    # 0xa5), not a repeated counter; the failure names the (thread, draw) pairs and the first value's bits either way
    bad = [v for v in who if not all(0.0 <= x < 1.0 for x in v)]
    repeated = [v for v, n in collections.Counter(drawn).items() if n > 1]
    show = [(who[v], v[0], struct.pack("<f", v[0]).hex()) for v in (bad or repeated)[:4]]
    assert not bad, f"random tensors hold values outside [0, 1): {show}"
    assert not repeated, f"{len(repeated)} of 600 random tensors drawn in threads share their values: {show}"


# A node's (or a buffer's) instance dict used first by one thread while the collector, run by the allocation that makes
# the dict (CPython 3.11: see helpers.DICT_ON_FIRST_USE_RACES), lets another thread use it too: the callback below
# stands in for that thread. It files a key, as the frontend's caches do, and one that is no string (as a dict
# outgrowing the shared keys: the split dict becomes a combined one and frees its values). Made twice, the object's
# dict points at the freed values: with the debug allocator, a segfault.
_DICT_MADE_ONCE = """
import gc
from lazygrad.device import Buffer
from lazygrad.dtype import dtypes
from lazygrad.uop.ops import Ops, UOp

held = []
for obj in (UOp(Ops.CONST, dtypes.int32, (), 424242), Buffer("CPU", 3, dtypes.float32)):
    def other_thread(phase, info, obj=obj):
        if phase == "start":
            d = obj.__dict__
            d["filed_by_the_other"] = True
            d[0] = 0
    gc.collect()
    gc.disable()
    gc.callbacks.append(other_thread)
    held += [dict() for _ in range(200)]  # the dict free list empty: the next dict is allocated, and may collect
    gc.set_threshold(1)
    gc.enable()
    d = obj.__dict__
    gc.collect()
    gc.callbacks.remove(other_thread)
    gc.set_threshold(700)
    obj.__dict__["mine"] = 1
    assert obj.__dict__ is d and {"filed_by_the_other", 0, "mine"} <= set(d), (type(obj).__name__, list(d))
print("ok")
"""


# The same with threads: each round, four threads use a new shared node's dict for the first time at once. The first
# one's dict allocation collects, and a weakref callback of the garbage it finds sleeps (any callback or finalizer run
# by the collector lets the other threads in). Made more than once, the node's dict lost the other threads' keys or
# the process crashed, within 10 rounds on CPython 3.11.
_DICT_MADE_ONCE_IN_THREADS = """
import gc, sys, threading, time, weakref
from lazygrad.dtype import dtypes
from lazygrad.uop.ops import Ops, UOp

class Pair:
    pass

refs, node, lost, rounds = [], [None], [], 100
barrier = threading.Barrier(4)

def garbage():
    a, b = Pair(), Pair()
    a.b, b.a = b, a
    refs.append(weakref.ref(a, lambda r: time.sleep(0.0005)))

def work(tid):
    for r in range(rounds):
        if tid == 0:
            node[0] = UOp(Ops.CONST, dtypes.int32, (), 10**7 + r)
            refs.clear()
        barrier.wait()
        n = node[0]
        gc.disable()
        held = [dict() for _ in range(100)]  # the dict free list empty: the next dict is allocated, and collects
        garbage()
        gc.enable()
        d = n.__dict__
        d[f"k{tid}"] = 1
        if tid == 1:
            d[0] = 0
        barrier.wait()
        if tid == 0 and set(n.__dict__) != {"k0", "k1", "k2", "k3", 0}:
            lost.append(r)
        barrier.wait()
        del held

gc.set_threshold(1)
sys.setswitchinterval(1e-6)
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok" if not lost else f"a node's dict lost keys in rounds {lost}")
"""


@pytest.mark.parametrize("script", [_DICT_MADE_ONCE, _DICT_MADE_ONCE_IN_THREADS], ids=["collector", "threads"])
def test_a_shared_objects_dict_is_made_once(script: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stdout[-2000:], out.stderr[-3000:])


# *** one program scheduled alike however its threads interleave ***

_XS = np.random.default_rng(7).standard_normal((24, 16)).astype(np.float32)
_YS = np.random.default_rng(8).standard_normal((24, 4)).astype(np.float32)


class _MLP:
    """A two-layer MLP trained by Adam on minibatches of a realized dataset, as each thread of a trainer would."""

    def __init__(self, seed: int):
        from lazygrad.nn.optim import Adam

        rng = np.random.default_rng(seed)
        self.w1 = Tensor(rng.standard_normal((16, 32)).astype(np.float32) * 0.3, requires_grad=True)
        self.w2 = Tensor(rng.standard_normal((32, 4)).astype(np.float32) * 0.3, requires_grad=True)
        self.x, self.y = Tensor(_XS).realize(), Tensor(_YS).realize()
        self.opt = Adam([self.w1, self.w2], lr=1e-2)

    def backward(self, j: int) -> tuple[Tensor, Tensor]:
        """The hidden layer and the loss of minibatch j, its gradients taken (the step is left to the caller, who
        keeps both past it, as code logging them would)."""
        hidden = (self.x[j : j + 8] @ self.w1).relu()
        loss = ((hidden @ self.w2 - self.y[j : j + 8]) ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        return hidden, loss

    def weights(self) -> list[bytes]:
        return [self.w1.numpy().tobytes(), self.w2.numpy().tobytes()]


class _StepLog:
    """The kernels (their ASTs) of each schedule run, per label a thread sets (its model's step)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        import lazygrad.tensor as tensor_module

        self.label = threading.local()
        self.kernels: dict[str, list[tuple]] = collections.defaultdict(list)
        run = tensor_module.run_schedule

        def logged(schedule: list, *args: Any, **kwargs: Any) -> Any:
            if (label := getattr(self.label, "name", None)) is not None:
                self.kernels[label].append(tuple(si.ast for si in schedule))
            return run(schedule, *args, **kwargs)

        monkeypatch.setattr(tensor_module, "run_schedule", logged)

    def step(self, name: str, model: _MLP, loss: Tensor) -> list[bytes]:
        """The optimizer step of `model` after loss.backward(), logged as `name`; the loss and weights after it."""
        self.label.name = name
        try:
            model.opt.step()
        finally:
            self.label.name = None
        return [loss.numpy().tobytes(), *model.weights()]


def _sequential(log: _StepLog) -> dict[str, list[bytes]]:
    """Two models' steps one after another in this thread: what the threaded runs must reproduce bit for bit. After
    a step of a third model: every step then replays the gradient and update programs that step recorded."""
    warm = _MLP(0)
    warm.backward(0)
    warm.opt.step()
    out = {}
    for name, seed in (("a", 1), ("b", 2)):
        model = _MLP(seed)
        for j in range(2):
            _, loss = model.backward(j)
            out[f"{name}{j}"] = log.step(f"seq {name}{j}", model, loss)
    return out


def _in_threads(targets: dict[str, Callable[[], None]]) -> None:
    """Run each target in a thread of that name; raise the first exception one raised."""
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 -- reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,), name=name) for name, fn in targets.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    if errors:
        raise errors[0]


def _assert_like_sequential(log: _StepLog, seq: dict[str, list[bytes]], got: dict[str, list[bytes]]) -> None:
    for step in seq:
        assert log.kernels[f"thr {step}"] == log.kernels[f"seq {step}"], f"step {step} scheduled otherwise in a thread"
        assert got[step] == seq[step], f"step {step}: the loss or weights differ from a run alone"


def test_a_step_takes_only_its_own_threads_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """An optimizer step stores the loss backward() ran on with the update. The losses waiting were one process-wide
    list: a thread stepping between another's backward() and step took the other's loss into its schedule, and both
    steps fused otherwise than alone (a 1-ulp difference in the weights now and then)."""
    log = _StepLog(monkeypatch)
    seq = _sequential(log)
    got: dict[str, list[bytes]] = {}
    a_backward, b_stepped = threading.Event(), threading.Event()
    a, b = _MLP(1), _MLP(2)

    def thread_a() -> None:
        for j in range(2):
            _, loss = a.backward(j)
            if j == 0:  # b steps between this backward and this step
                a_backward.set()
                assert b_stepped.wait(30)
            got[f"a{j}"] = log.step(f"thr a{j}", a, loss)

    def thread_b() -> None:
        assert a_backward.wait(30)
        for j in range(2):
            _, loss = b.backward(j)
            got[f"b{j}"] = log.step(f"thr b{j}", b, loss)
            b_stepped.set()

    _in_threads({"a": thread_a, "b": thread_b})
    _assert_like_sequential(log, seq, got)


def test_a_backward_in_another_thread_keeps_no_dropped_tensor_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """backward() lists every live float tensor that may get a .grad, every thread's. A step computes the live lazy
    tensors that read the weights it overwrites first (their values are those of when they were made, as in torch):
    it found one its thread had dropped, held by that list in a backward running beside it, and computed it too."""
    import lazygrad.gradient as gradient_module

    log = _StepLog(monkeypatch)
    seq = _sequential(log)
    got: dict[str, list[bytes]] = {}
    a_built, b_listed, a_stepped = threading.Event(), threading.Event(), threading.Event()
    a, b = _MLP(1), _MLP(2)
    compute_gradient = gradient_module.compute_gradient

    def paused(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "b" and not b_listed.is_set():
            b_listed.set()  # b's backward has listed the live tensors: a drops its probe and steps
            assert a_stepped.wait(30)
        return compute_gradient(*args, **kwargs)

    monkeypatch.setattr(gradient_module, "compute_gradient", paused)

    def thread_a() -> None:
        for j in range(2):
            if j == 0:
                probe = (a.w1 * a.w1).sum()  # a lazy tensor reading w1 (a statistic nobody logs), dropped below
                a_built.set()
                assert b_listed.wait(30)
                del probe
            _, loss = a.backward(j)
            got[f"a{j}"] = log.step(f"thr a{j}", a, loss)
            a_stepped.set()

    def thread_b() -> None:
        assert a_built.wait(30)
        for j in range(2):
            _, loss = b.backward(j)
            got[f"b{j}"] = log.step(f"thr b{j}", b, loss)

    _in_threads({"a": thread_a, "b": thread_b})
    _assert_like_sequential(log, seq, got)


def test_every_step_of_a_loop_schedules_the_same_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads interleave which step records the gradient and update programs and which replay them: a step must
    schedule alike either way. The first backward of a structure (by the rules) gave gradients that were views of the
    rules' temporaries, and Adam kept a step's bias terms until the next: both were live lazy tensors reading what the
    next step overwrote, computed by it as extra outputs (the first two steps of a loop each scheduled otherwise)."""
    import lazygrad.gradient as gradient_module
    import lazygrad.nn.optim as optim_module

    monkeypatch.setattr(gradient_module, "_programs", {})  # nothing recorded: the first step runs the rules
    monkeypatch.setattr(optim_module, "_step_programs", {})
    log = _StepLog(monkeypatch)
    model = _MLP(3)
    for j in range(4):
        _, loss = model.backward(j)
        log.step(f"step {j}", model, loss)
    assert log.kernels["step 0"]
    for j in range(1, 4):
        assert log.kernels[f"step {j}"] == log.kernels["step 0"], f"step {j} scheduled otherwise than step 0"


class _MeetingDict(dict):
    """A dict whose deletions wait (up to two seconds) until two threads delete at once: the moment where two threads
    each took the first key to evict, and neither has evicted it yet."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.barrier = threading.Barrier(2, timeout=2)

    def __delitem__(self, key: Any) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):  # alone (the other waits for a lock): go on
            self.barrier.wait()
        super().__delitem__(key)


def test_optimizers_recording_step_programs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads whose optimizers each record a new update program into a full cache: both evicted its first entry
    (the second `del` raised KeyError out of opt.step())."""
    import lazygrad.nn.optim as optim_module

    def model(seed: int) -> _MLP:
        m = _MLP(seed)
        m.opt.weight_decay = 0.01 * seed  # a setting of its own: a program of its own
        return m

    want = []
    for seed in (4, 5):  # alone, first (their kernels compiled)
        alone = model(seed)
        alone.backward(0)
        alone.opt.step()
        want.append(alone.weights())
    monkeypatch.setattr(optim_module, "STEP_PROGRAMS", 1)
    monkeypatch.setattr(optim_module, "_step_programs", _MeetingDict({("an old key",): None}))
    models = {"a": model(4), "b": model(5)}
    ready = threading.Barrier(2, timeout=30)

    def step(m: _MLP) -> Callable[[], None]:
        def run() -> None:
            m.backward(0)
            ready.wait()
            m.opt.step()

        return run

    _in_threads({name: step(m) for name, m in models.items()})
    assert [m.weights() for m in models.values()] == want


def test_manual_seed_in_another_thread_never_repeats_a_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A random call reads the seed, then takes its counter. A manual_seed in another thread in between paired the old
    seed with the counter it resets to: the numbers of the first call after the old seed was set, drawn again."""
    import lazygrad.tensor as tensor_module

    monkeypatch.setattr(Tensor, "_seed", Tensor._seed)  # (the process's random state is restored afterwards)
    monkeypatch.setattr(Tensor, "_rng_counter", Tensor._rng_counter)
    Tensor.manual_seed(11)
    drawn = [tuple(Tensor.rand(8).tolist()) for _ in range(3)]
    taking, reseeded = threading.Event(), threading.Event()
    take = tensor_module.take_random_counters

    def paused(n: int) -> int:
        if threading.current_thread().name == "a":
            taking.set()
            reseeded.wait(2)  # (where the seed and counter are taken under one lock, the reseed waits for this)
        return take(n)

    monkeypatch.setattr(tensor_module, "take_random_counters", paused)
    got: list[Tensor] = []

    def reseed() -> None:
        assert taking.wait(30)
        Tensor.manual_seed(12)
        reseeded.set()

    _in_threads({"a": lambda: got.append(Tensor.rand(8)), "b": reseed})
    assert tuple(got[0].tolist()) not in drawn


def test_backward_beside_a_thread_making_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """backward() lists the parameters (a process-wide weak dictionary): a thread making a parameter while another's
    backward iterated it raised 'dictionary changed size during iteration' out of that backward. The insert is forced
    into the iteration."""
    import lazygrad.tensor as tensor_module

    inside, made = threading.Event(), threading.Event()

    class PausingLeaves(weakref.WeakValueDictionary):
        def values(self) -> Any:
            for i, t in enumerate(super().values()):
                if i == 0 and threading.current_thread().name == "trainer":
                    inside.set()
                    made.wait(1)  # (where nothing iterates the dictionary itself, no thread comes here)
                yield t

    monkeypatch.setattr(tensor_module, "_grad_leaves", PausingLeaves(dict(tensor_module._grad_leaves.items())))
    w_n = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    made_here: list[Tensor] = []

    def trainer() -> None:
        w = Tensor(w_n, requires_grad=True)
        (w * w).sum().backward()
        assert w.grad is not None
        np.testing.assert_allclose(w.grad.numpy(), 2 * w_n, rtol=1e-6)

    def maker() -> None:
        inside.wait(1)
        made_here.append(Tensor(np.ones((2, 2), np.float32), requires_grad=True))
        made.set()

    _in_threads({"trainer": trainer, "maker": maker})
    assert made_here[0].requires_grad


def test_a_tensor_made_by_another_thread_during_a_capture_is_not_recorded() -> None:
    """Thread A captures a TinyJit function that writes into `w`; while it does, thread B builds `seen = w * 2`, which
    reads w as it was. The write computes `seen` first, but B's tensor is not the captured function's: a replay must
    not compute it again (it would overwrite B's value with the doubled new contents of w on every call)."""
    w = Tensor(np.ones(4, np.float32)).realize()
    inside, made = threading.Event(), threading.Event()
    calls = [0]

    @TinyJit
    def step(x: Tensor) -> Tensor:
        calls[0] += 1
        if calls[0] == 2:  # the capture: B builds its tensor now
            inside.set()
            assert made.wait(10)
        w.assign(w + x).realize()
        return (w * 1).realize()

    seen: list[Tensor] = []

    def other() -> None:
        assert inside.wait(10)
        seen.append(w * 2)  # lazy, reading w's memory as it is now
        made.set()

    step(Tensor(np.ones(4, np.float32)))  # w = 2
    b = threading.Thread(target=other)
    b.start()
    step(Tensor(np.ones(4, np.float32)))  # captured: B's tensor reads w = 2 -> 4, then w = 3
    b.join()
    want = seen[0].numpy().copy()
    np.testing.assert_equal(want, np.full(4, 4, np.float32))
    for _ in range(3):
        step(Tensor(np.ones(4, np.float32)))
    np.testing.assert_equal(w.numpy(), np.full(4, 6, np.float32))
    np.testing.assert_equal(seen[0].numpy(), want)


def test_a_schedule_beside_a_realize_of_the_same_graph_gets_memory_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tensors built as `x + 1` are one hash-consed node; each gets memory of its own, as torch's would. schedule()
    looked for another holder of the node's value before taking the realize lock: a realize of the other tensor in
    between (forced here) left both on one buffer, and a write into one changed the other."""
    import lazygrad.tensor as tensor_module
    from lazygrad.engine.realize import run_schedule

    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    a, b = x + 1, x + 1
    looked, realized, ran = threading.Event(), threading.Event(), threading.Event()
    own_memory = tensor_module._own_memory

    def own_memory_then_wait(tensors, firsts):
        out = own_memory(tensors, firsts)
        if threading.current_thread().name == "a" and not looked.is_set():
            looked.set()
            realized.wait(1)
        return out

    monkeypatch.setattr(tensor_module, "_own_memory", own_memory_then_wait)

    def thread_a() -> None:
        run_schedule(*a.schedule_with_vars())
        ran.set()

    def thread_b() -> None:
        assert looked.wait(30)
        if tensor_module._realize_lock.acquire(timeout=0.5):  # a looked without the lock: realize in its window
            tensor_module._realize_lock.release()
        else:  # a looks under the lock: b's realize comes after a's schedule ran (its value is then a's to copy)
            assert ran.wait(30)
        b.realize()
        realized.set()

    _in_threads({"a": thread_a, "b": thread_b})
    a += 10
    np.testing.assert_equal(a.numpy(), np.arange(4) + 11)
    np.testing.assert_equal(b.numpy(), np.arange(4) + 1)


def test_one_tinyjit_called_from_many_threads() -> None:
    """A TinyJit shared by threads (a served model's jitted forward): each thread gets its own capture. With one
    capture, a replay's output buffers were every thread's: a thread's result was overwritten by another's call before
    it read it, and the CPU graph's table of input pointers was written by two replays at once."""
    w_n = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)
    w = Tensor(w_n).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return ((x @ w).relu() + 1).sum(1).realize()

    n = 4
    called, read = threading.Barrier(n, timeout=60), threading.Barrier(n, timeout=60)

    def run(tid: int) -> Callable[[], None]:
        def calls() -> None:
            rng = np.random.default_rng(tid)
            for _ in range(5):
                x = rng.standard_normal((8, 16)).astype(np.float32)
                out = f(Tensor(x))
                called.wait()  # every thread has called before any reads
                np.testing.assert_allclose(out.numpy(), (np.maximum(x @ w_n, 0) + 1).sum(1), rtol=1e-4, atol=1e-4)
                read.wait()
            assert f.captured is not None and f.captured.kernel_count >= 1  # (this thread's capture)

        return calls

    _in_threads({f"t{i}": run(i) for i in range(n)})
    assert f.captured is None  # this thread never called it


def test_reading_parameters_while_another_thread_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread reads a model's parameters (its shape, a graph over it, its values) while another thread's optimizer
    step is between its update and its realize. The update's nodes were left unbuilt there: the reader met an unbuilt
    node (AttributeError: no 'shape'), or built its graph over one. Forced here at that moment."""
    import lazygrad.nn.optim as optim_module

    model = _MLP(6)
    model.backward(0)
    model.opt.step()  # the update program recorded: the next steps replay it
    inside, done = threading.Event(), threading.Event()
    note_replay = optim_module.note_replay

    def paused(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "trainer" and not inside.is_set():
            inside.set()
            assert done.wait(30)
        return note_replay(*args, **kwargs)

    monkeypatch.setattr(optim_module, "note_replay", paused)
    seen: list[Tensor] = []

    def trainer() -> None:
        model.backward(1)
        model.opt.step()

    def reader() -> None:
        assert inside.wait(30)
        try:
            assert model.w1.shape == (16, 32)
            seen.append(model.x[:8] @ model.w1)
        finally:
            done.set()

    _in_threads({"trainer": trainer, "reader": reader})
    np.testing.assert_allclose(seen[0].numpy(), _XS[:8] @ model.w1.numpy(), rtol=1e-5, atol=1e-5)


def test_a_reader_beside_a_trainer() -> None:
    """Threads reading the parameters another thread trains (graphs over them, their values, realizing nodes the
    trainer's forward shares) raise nothing, and read finite values; the trainer's steps end where a run alone does.
    Seen before: an unbuilt update node met by a reader, a parameter lazy again between a read's realize and its copy
    (AssertionError), and the backward's walk of a node another thread realized between its two visits (KeyError)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        alone = _MLP(7)
        for j in range(6):
            alone.backward(j % 3 * 8)
            alone.opt.step()
        model = _MLP(7)
        stop = threading.Event()

        def trainer() -> None:
            try:
                for j in range(6):
                    model.backward(j % 3 * 8)
                    model.opt.step()
            finally:
                stop.set()

        def reader(k: int) -> Callable[[], None]:
            def reads() -> None:
                while not stop.is_set():
                    if k == 0:
                        v = (model.x @ model.w1).relu().sum().numpy()
                    elif k == 1:
                        v = model.w1.numpy()
                    else:
                        v = np.array((model.w1 * 2 + model.w2.sum()).mean().item())
                    assert np.isfinite(v).all()

            return reads

        _in_threads({"trainer": trainer, **{f"reader{k}": reader(k) for k in range(3)}})
    finally:
        sys.setswitchinterval(interval)
    for got, want in zip(model.weights(), alone.weights()):
        np.testing.assert_allclose(
            np.frombuffer(got, np.float32), np.frombuffer(want, np.float32), rtol=1e-5, atol=1e-6
        )


def test_two_threads_allocating_one_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads asking for one buffer's memory at once (a tensor both read first) get one block: each took a block
    of its own, one leaked, and GlobalCounters.mem_used counted both. Forced: the first waits inside the allocation for
    the second (up to a second; where the check is under the lock, the second waits for the first instead)."""
    from lazygrad.device import Buffer, Device
    from lazygrad.dtype import dtypes
    from lazygrad.helpers import GlobalCounters, cycles_held_off

    allocator = Device["CPU"].allocator
    alloc = allocator._take  # (what a buffer's allocation calls, under the allocator's lock)
    meet = threading.Barrier(2, timeout=1)
    calls: list[int] = []

    def meeting_alloc(nbytes: int) -> int:
        calls.append(nbytes)
        with contextlib.suppress(threading.BrokenBarrierError):
            meet.wait()
        return alloc(nbytes)

    monkeypatch.setattr(allocator, "_take", meeting_alloc)
    buf = Buffer("CPU", 1000, dtypes.float32)
    gc.collect()  # (no earlier test's garbage freed meanwhile: the counter changes by this buffer alone)
    with cycles_held_off():
        before = GlobalCounters.mem_used
        ptrs: list[int] = []
        _in_threads({f"t{i}": lambda: ptrs.append(buf.ensure_allocated()._ptr) for i in range(2)})
        assert len(calls) == 1 and ptrs[0] == ptrs[1] == buf._ptr
        assert GlobalCounters.mem_used - before == 4000


def test_schedules_of_one_template_run_from_two_threads_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Schedules made first and run with run_schedule outside the realize lock (as tinygrad code does), one template's,
    in two threads: both missed their set of internal buffers in the plan's cache of memory plans and evicted its first
    entry at once (the second `del` raised KeyError out of run_schedule)."""
    from lazygrad.engine import realize as realize_module

    def graph(x: Tensor) -> Tensor:
        a = ((x + 1).contiguous() * 2).contiguous()
        return (a.exp2() + a).sum()

    xs = [Tensor(np.arange(64, dtype=np.float32) / 64 + i).realize() for i in range(4)]
    graph(xs[0]).realize(), graph(xs[1]).realize()  # the template, then its launch plan
    outs = [graph(x) for x in xs[2:]]
    scheduled = [t.schedule_with_vars() for t in outs]
    plan = realize_module._launch_plan(scheduled[0][0])
    assert plan is not None and plan is realize_module._launch_plan(scheduled[1][0])
    monkeypatch.setattr(plan, "MEMORY_PLANS", 1)
    monkeypatch.setattr(plan, "memory", _MeetingDict({("an old key",): []}))
    _in_threads({f"t{i}": lambda s=s: realize_module.run_schedule(*s) for i, s in enumerate(scheduled)})
    for x, out in zip(xs[2:], outs):
        a = (x.numpy() + 1) * 2
        np.testing.assert_allclose(out.item(), (np.exp2(a) + a).sum(), rtol=1e-5)
