"""Dispatch overhead: what a TinyJit replay costs on top of its kernels, against torch eager, numpy and tinygrad.

    python bench/dispatch.py [small_add twenty_kernels big_add train_step cnn_step resnet_step loaded]

Seven measurements, one table each (the first two):
  1. a 16-element add (the kernel is nothing: this is the per-call cost of the framework), through the JIT and eager
     (`(a + b).realize()`: building, scheduling and running a graph seen before); then eager realizes of other graphs
     seen before (a chain of 3 ops, a sum, a 64x64 matmul) beside their kernels alone;
  2. a function of 20 small kernels against one kernel's call (the CPU graph makes a replay one ctypes call);
  3. a 1M-element add through the JIT and eager against the same compiled C kernel called directly from ctypes and
     torch, every peer on one thread, then every peer on the machine's threads;
  4. an MLP training step (forward, backward, Adam) with and without the JIT;
  5. the digits CNN's training step without the JIT, against torch eager, and the bytes its kernels move per step
     beside tinygrad's for the same model (issue goal 5);
  6. a CIFAR ResNet's training step (stride-2 stages), one model source built from torch and from lazygrad.torch;
  7. JIT steps (MLP, digits CNN) and a 1024^2 matmul with the machine idle and beside two busy processes (started
     here), the thread team adapting to the load against always all threads (as before) and always one.
tinygrad's TinyJit is measured when tinygrad is installed (`pip install tinygrad`, DEV=CPU, needs clang).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from lazygrad import Tensor, TinyJit
from lazygrad.engine.realize import lower_schedule_item
from lazygrad.helpers import GlobalCounters


class Seconds(float):
    """Wall-clock seconds per call, with the process's CPU seconds per call beside them (`cpu`): on a shared machine
    the wall clock also counts the time the neighbours held the cores."""

    cpu: float

    @staticmethod
    def of(wall: float, cpu: float) -> Seconds:
        out = Seconds(wall)
        out.cpu = cpu
        return out


def bench(fn: Callable[[], object], reps: int = 2000, warmup: int = 50, rounds: int = 5) -> Seconds:
    """Seconds per call: the best over rounds of the mean of `reps` back-to-back calls (on a shared machine the
    other rounds measure the neighbours), wall and CPU each."""
    for _ in range(warmup):
        fn()
    walls, cpus = [], []
    for _ in range(rounds):
        st, ct = time.perf_counter(), time.process_time()
        for _ in range(reps):
            fn()
        walls.append((time.perf_counter() - st) / reps)
        cpus.append((time.process_time() - ct) / reps)
    return Seconds.of(min(walls), min(cpus))


def bench_pair(fns: dict[str, Callable[[], object]], reps: int, rounds: int = 7) -> dict[str, Seconds]:
    """bench() of several functions with their rounds interleaved, so drift in the machine's speed hits all alike."""
    best = {name: Seconds.of(float("inf"), float("inf")) for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = bench(fn, reps=reps, warmup=2, rounds=1)
            best[name] = Seconds.of(min(best[name], t), min(best[name].cpu, t.cpu))
    return best


def table(title: str, results: dict[str, Seconds], base: str, nbytes: int = 0) -> None:
    """One table: time per call (wall and CPU), the ratio to `base` (of each), and GB/s when the bytes a call moves
    are given."""
    print(
        f"\n{title}\n{'':44s} {'us/call':>11s} {'cpu us/call':>11s} {'vs ' + base:>28s} {'(cpu)':>7s}"
        + (f" {'GB/s':>7s}" if nbytes else "")
    )
    for name, t in results.items():
        gbs = f" {nbytes / t / 1e9:7.2f}" if nbytes else ""
        ratio, cpu_ratio = t / results[base], t.cpu / results[base].cpu if results[base].cpu else float("nan")
        print(f"{name:44s} {t * 1e6:11.2f} {t.cpu * 1e6:11.2f} {ratio:27.2f}x {cpu_ratio:6.2f}x{gbs}")


def bare_kernel(a: Tensor, b: Tensor) -> Callable[[], object]:
    """The compiled C kernel of a + b, called straight through ctypes on preallocated buffers."""
    return bare_kernels(a + b)


def bare_kernels(t: Tensor) -> Callable[[], object]:
    """The compiled C kernels of lazy tensor t's schedule, called straight through ctypes one after another on
    preallocated buffers (the kernels' own time, no framework)."""
    eis = [ei for item in t.schedule() if (ei := lower_schedule_item(item)) is not None]
    calls = [(ei.runner.prg.fxn, [buf.ptr for buf in ei.bufs]) for ei in eis]

    def run() -> None:
        for fxn, ptrs in calls:
            fxn(*ptrs)

    return run


def tinygrad_add(n: int) -> Callable[[], object] | None:
    try:
        os.environ.setdefault("DEV", "CPU")
        import tinygrad
    except ImportError:
        return None
    try:  # its CPU device compiles with clang: without it the peer is left out, not the bench
        ta, tb = tinygrad.Tensor.rand(n).realize(), tinygrad.Tensor.rand(n).realize()
    except Exception as e:  # noqa: BLE001
        print(f"tinygrad: cannot run here ({type(e).__name__}: {str(e)[:80]}), no peer row")
        return None
    step = tinygrad.TinyJit(lambda x, y: (x + y).realize())
    return lambda: step(ta, tb)


def small_add() -> None:
    n = 16
    an, bn = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    add = TinyJit(lambda x, y: (x + y).realize())
    for _ in range(3):
        np.testing.assert_allclose(add(a, b).numpy(), an + bn)
    # the same inputs every call skip the argument checks (their buffers are already in place); other tensors don't
    pairs = itertools.cycle([(a, b), (Tensor(an.copy()).realize(), Tensor(bn.copy()).realize())])
    results = {
        "lazygrad TinyJit, same inputs": bench(lambda: add(a, b)),
        "lazygrad TinyJit, alternating inputs": bench(lambda: add(*next(pairs))),
        "lazygrad kernel via ctypes (no framework)": bench(bare_kernel(a, b)),
        "lazygrad eager (a + b).realize()": bench(lambda: (a + b).realize()),
    }
    results["numpy a + b"] = bench(lambda: an + bn)
    try:
        import torch

        at, bt = torch.from_numpy(an), torch.from_numpy(bn)
        results["torch eager a + b"] = bench(lambda: at + bt)
    except ImportError:
        print("torch not installed: skipping")
    if (tg := tinygrad_add(n)) is not None:
        results["tinygrad TinyJit"] = bench(tg, reps=200)
    table("16-element add (target: TinyJit <= 5 us)", results, "numpy a + b")
    eager_shapes(a, b)


def eager_shapes(a: Tensor, b: Tensor) -> None:
    """A repeated eager realize of graphs seen before, each beside its kernels alone: what is left over is the
    framework's Python (target: <= 10 us plus the kernels)."""
    rng = np.random.default_rng(0)
    x, w = (Tensor(rng.standard_normal((64, 64)).astype(np.float32)).realize() for _ in range(2))
    graphs: dict[str, Callable[[], Tensor]] = {
        "(a + b)": lambda: a + b,
        "((a + b) * a - b)": lambda: (a + b) * a - b,
        "a.sum()": lambda: a.sum(),
        "(x @ w), 64x64": lambda: x @ w,
    }
    print("\nEager realize of a graph seen before, a and b of 16 floats (target: <= 10 us of Python plus the kernels)")
    print(f"{'':24s} {'realize us':>11s} {'cpu us':>8s} {'kernels us':>11s} {'Python us (cpu)':>16s}")
    for name, make in graphs.items():
        t = bench_pair({"realize": lambda: make().realize(), "kernels": bare_kernels(make())}, reps=2000, rounds=5)
        real, kern = t["realize"], t["kernels"]
        python = (real.cpu - kern.cpu) * 1e6
        print(f"{name:24s} {real * 1e6:11.2f} {real.cpu * 1e6:8.2f} {kern * 1e6:11.2f} {python:16.2f}")


def twenty_kernels() -> None:
    x = Tensor(np.random.rand(16).astype(np.float32)).realize()

    @TinyJit
    def one(x: Tensor) -> Tensor:
        return (x * 1.5 + 1).realize()

    @TinyJit
    def twenty(x: Tensor) -> Tensor:
        for i in range(20):
            x = (x * 1.5 + i).realize()
        return x

    for _ in range(3):
        one(x), twenty(x)
    assert twenty.captured is not None and twenty.captured.kernel_count == 20
    results = bench_pair({"TinyJit, 1 kernel": lambda: one(x), "TinyJit, 20 kernels": lambda: twenty(x)}, reps=2000)
    table("20 small kernels in one JIT (target: <= 2x of 1 kernel)", results, "TinyJit, 1 kernel")


def big_add() -> None:
    """A 1M-element add beside its bare kernel, torch's allocating `a + b` and its `add(out=)`; one table with every
    peer on one thread, and one with every peer on the machine's threads (lazygrad's thread team and torch's
    intra-op threads set alike: THREADS=1 runs show the first alone)."""
    from lazygrad.device import Device
    from lazygrad.runtime.threads_cpu import set_fixed_team

    n = 1_000_000
    a = Tensor(np.random.rand(n).astype(np.float32)).realize()
    b = Tensor(np.random.rand(n).astype(np.float32)).realize()
    add = TinyJit(lambda x, y: (x + y).realize())
    for _ in range(3):
        add(a, b)
    fns = {
        "bare C kernel via ctypes": bare_kernel(a, b),
        "lazygrad TinyJit": lambda: add(a, b),
        "lazygrad eager (a + b).realize()": lambda: (a + b).realize(),
    }
    torch: Any = None
    try:
        import torch

        at, bt, ct = torch.from_numpy(a.numpy()), torch.from_numpy(b.numpy()), torch.empty(n)
        fns["torch eager a + b (new memory each call)"] = lambda: at + bt
        fns["torch.add(a, b, out=c)"] = lambda: torch.add(at, bt, out=ct)
    except ImportError:
        pass
    machine = Device["CPU"].threads
    torch_threads = torch.get_num_threads() if torch is not None else 0
    try:
        for threads in sorted({1, machine}):
            set_fixed_team(threads)
            if torch is not None:
                torch.set_num_threads(threads)
            results = bench_pair(fns, reps=50)
            title = f"1M-element add, every peer on {threads} thread{'s' if threads > 1 else ''}"
            table(f"{title} (target: JIT within 10% of the bare kernel)", results, "bare C kernel via ctypes", 12 * n)
    finally:
        set_fixed_team(0)
        if torch is not None:
            torch.set_num_threads(torch_threads)


def train_step() -> None:
    from lazygrad.nn import Linear
    from lazygrad.nn.optim import Adam
    from lazygrad.nn.state import get_parameters

    def make() -> Callable[[Tensor, Tensor], Tensor]:
        l1, l2 = Linear(64, 128), Linear(128, 10)
        opt = Adam(get_parameters([l1, l2]), lr=1e-3)

        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return loss

        return step

    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((128, 64)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 128).astype(np.int32)).realize()
    plain, jitted, sliced = make(), TinyJit(make()), make()
    # a tutorial's loop: minibatches sliced from a realized dataset, a new offset every step (128 offsets)
    data_x = Tensor(rng.standard_normal((16384, 64)).astype(np.float32)).realize()
    data_y = Tensor(rng.integers(0, 10, 16384).astype(np.int32)).realize()
    offsets = itertools.cycle(range(0, 16384, 128))

    def sliced_step() -> Tensor:
        j = next(offsets)
        return sliced(data_x[j : j + 128], data_y[j : j + 128])

    fns: dict[str, Callable[[], object]] = {
        "lazygrad, no JIT": lambda: plain(x, y),
        "lazygrad, no JIT, X[j:j+128]": sliced_step,
    }
    try:
        import torch

        torch.set_num_threads(1)  # as THREADS=1 does for lazygrad: the step's CPU time is one core's
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        tx, ty = torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy()).long()
        fns["torch eager"] = torch_adam_step(model, 1e-3, tx, ty)
    except ImportError:
        pass
    with Tensor.train():
        # eager steps interleaved with torch's, round by round (the load on a shared machine changes by the second)
        results = bench_pair(fns, reps=20, rounds=5)
        results["lazygrad TinyJit"] = bench(lambda: jitted(x, y), reps=100, warmup=3, rounds=3)
    kernels = jitted.captured.kernel_count if jitted.captured is not None else 0
    table(f"MLP 64-128-10 Adam step, batch 128 ({kernels} kernels; target: JIT >= 2x)", results, "lazygrad, no JIT")


def torch_adam_step(model: Any, lr: float, tx: Any, ty: Any) -> Callable[[], None]:
    """One torch eager training step of `model` (cross entropy, Adam) on (tx, ty), the peer of lazygrad's."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(tx), ty).backward()
        opt.step()

    return step


def cnn_step() -> None:
    """The digits CNN (lazygrad/examples/digits.py) training step without the JIT, against the same model in torch."""
    from lazygrad import nn
    from lazygrad.examples.digits import DigitsCNN, make_step
    from lazygrad.nn.state import get_parameters

    rng = np.random.default_rng(0)
    xn, yn = rng.standard_normal((64, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 64).astype(np.int32)
    x, y = Tensor(xn).realize(), Tensor(yn).realize()
    model = DigitsCNN()
    step = make_step(model, nn.optim.Adam(get_parameters(model), lr=3e-3), jit=False)
    fns: dict[str, Callable[[], object]] = {"lazygrad, no JIT": lambda: step(x, y)}
    try:
        import torch

        torch.set_num_threads(1)
        tnn = torch.nn
        tmodel = tnn.Sequential(
            tnn.Conv2d(1, 16, 3, padding=1), tnn.BatchNorm2d(16), tnn.ReLU(), tnn.Conv2d(16, 32, 3, padding=1),
            tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(32 * 4 * 4, 10),
        )  # fmt: skip
        fns["torch eager"] = torch_adam_step(tmodel, 3e-3, torch.from_numpy(xn), torch.from_numpy(yn).long())
    except ImportError:
        pass
    results = bench_pair(fns, reps=5, rounds=5)
    table("digits CNN Adam step, batch 64, without JIT (target: within 1.5x of torch eager)", results, "torch eager")
    GlobalCounters.reset()
    step(x, y)
    moved = [("lazygrad", GlobalCounters.global_mem, GlobalCounters.kernel_count)]
    if (peer := tinygrad_cnn_step_bytes(xn, yn)) is not None:
        moved.append(("tinygrad", *peer))
    print(
        "bytes moved per step (read + written by its kernels, a step after the first): "
        + "; ".join(f"{name} {nbytes / 1e6:.2f} MB in {kernels} kernels" for name, nbytes, kernels in moved)
    )


def cifar_resnet(torch: Any) -> Any:
    """A small CIFAR ResNet (3 stages of 16/32/64 channels, stride-2 3x3 convs and 1x1 shortcuts, BatchNorm), written
    once against torch's namespace: built from torch, or from lazygrad.torch."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            same = stride == 1 and cin == cout
            self.sc = nn.Sequential() if same else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                                  nn.BatchNorm2d(cout))  # fmt: skip

        def forward(self, x: Any) -> Any:
            return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.sc(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            self.stages = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
            self.fc = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            return self.fc(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1).flatten(1))

    return Net()


def resnet_step() -> None:
    """A CIFAR ResNet's SGD training step (batch 32, 32^2 images): the same model source built from torch and from
    lazygrad.torch, eager and under TinyJit."""
    import lazygrad.torch as lt

    rng = np.random.default_rng(0)
    xn, yn = rng.standard_normal((32, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 32)

    def make(torch: Any) -> Callable[[Any, Any], Any]:
        model = cifar_resnet(torch)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return step

    x, y = lt.tensor(xn).realize(), lt.tensor(yn).realize()
    plain, jitted = make(lt), TinyJit(make(lt))
    fns: dict[str, Callable[[], object]] = {
        "lazygrad, no JIT": lambda: plain(x, y).item(),
        "lazygrad TinyJit": lambda: jitted(x, y).item(),
    }
    try:
        import torch

        torch.set_num_threads(1)
        tstep, tx, ty = make(torch), torch.from_numpy(xn), torch.from_numpy(yn)
        fns["torch eager"] = lambda: tstep(tx, ty).item()
    except ImportError:
        pass
    with Tensor.train():
        results = bench_pair(fns, reps=3, rounds=5)
    table("CIFAR ResNet SGD step, batch 32, 32^2 (stride-2 stages)", results, "torch eager")


def per_sample_grads() -> None:
    """Per-sample gradients of an MLP (64-128-10, batch 64) by torch.func's recipe, vmap(grad(loss)) over
    functional_call with the parameters as a dict: lazygrad.func against torch.func, the same program."""
    import lazygrad.torch as lt

    rng = np.random.default_rng(0)
    xn, yn = rng.standard_normal((64, 64)).astype(np.float32), rng.integers(0, 10, 64)

    def make(torch: Any) -> Callable[[Any, Any], Any]:
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p: Any, x: Any, y: Any) -> Any:
            out = torch.func.functional_call(model, p, (x.unsqueeze(0),))
            return torch.nn.functional.cross_entropy(out, y.unsqueeze(0))

        grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))
        return lambda x, y: grads(params, x, y)

    x, y = lt.tensor(xn).realize(), lt.tensor(yn).realize()
    ours = make(lt)
    fns: dict[str, Callable[[], object]] = {"lazygrad.func": lambda: Tensor.realize(*ours(x, y).values())}
    try:
        import torch

        torch.set_num_threads(1)
        theirs, tx, ty = make(torch), torch.from_numpy(xn), torch.from_numpy(yn)
        fns["torch.func"] = lambda: theirs(tx, ty)
    except ImportError:
        pass
    table("per-sample gradients, vmap(grad(loss)), MLP 64-128-10, batch 64", bench_pair(fns, reps=5), "torch.func")


def tinygrad_cnn_step_bytes(xn: np.ndarray, yn: np.ndarray) -> tuple[int, int] | None:
    """(bytes, kernels) of tinygrad's second training step of the same digits CNN, by its own GlobalCounters."""
    try:
        os.environ.setdefault("DEV", "CPU")
        import tinygrad
        from tinygrad.helpers import Context
        from tinygrad.helpers import GlobalCounters as TinyCounters
    except ImportError:
        return None
    tnn, T = tinygrad.nn, tinygrad.Tensor
    conv1, bn1, conv2, fc = (
        tnn.Conv2d(1, 16, 3, padding=1),
        tnn.BatchNorm(16),
        tnn.Conv2d(16, 32, 3, padding=1),
        tnn.Linear(512, 10),
    )
    opt = tnn.optim.Adam(tnn.state.get_parameters([conv1, bn1, conv2, fc]), lr=3e-3)
    x, y = T(xn).realize(), T(yn).realize()
    try:
        with Context(TRAINING=1):
            T.training = True
            for _ in range(2):  # the second step: the first also moves the optimizer's state into place
                TinyCounters.reset()
                opt.zero_grad()
                logits = fc(conv2(bn1(conv1(x)).relu()).relu().max_pool2d(2).flatten(1))
                loss = logits.sparse_categorical_crossentropy(y).backward()
                T.realize(*opt.schedule_step(), loss, (logits.argmax(-1) == y).sum())
    except Exception as e:  # noqa: BLE001 -- a peer that cannot run here leaves its column out, not the bench
        print(f"tinygrad: cannot run the CNN step here ({type(e).__name__}: {str(e)[:80]})")
        return None
    return TinyCounters.global_mem, TinyCounters.kernel_count


def loaded() -> None:
    """Threaded kernels on a busy machine: every workload under each team policy, interleaved round by round, idle
    and then beside two processes that spin on the cores (ms per call: the best round and the median round)."""
    import subprocess

    from lazygrad import nn
    from lazygrad.device import Device
    from lazygrad.examples.digits import DigitsCNN, make_step
    from lazygrad.nn import Linear
    from lazygrad.nn.optim import Adam
    from lazygrad.nn.state import get_parameters
    from lazygrad.runtime.threads_cpu import set_fixed_team, team_launches

    rng = np.random.default_rng(0)
    l1, l2 = Linear(64, 128), Linear(128, 10)
    opt = Adam(get_parameters([l1, l2]), lr=1e-3)

    @TinyJit
    def mlp(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
        opt.step()
        return loss

    x = Tensor(rng.standard_normal((128, 64)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 128).astype(np.int32)).realize()
    model = DigitsCNN()
    cnn = make_step(model, nn.optim.Adam(get_parameters(model), lr=3e-3), jit=True)
    cx = Tensor(rng.standard_normal((64, 1, 8, 8)).astype(np.float32)).realize()
    cy = Tensor(rng.integers(0, 10, 64).astype(np.int32)).realize()
    a, b = Tensor.rand(1024, 1024).realize(), Tensor.rand(1024, 1024).realize()
    matmul = TinyJit(lambda p, q: (p @ q).realize())
    work: dict[str, tuple[Callable[[], object], int]] = {
        "JIT MLP step": (lambda: Tensor.train()(mlp)(x, y), 200),
        "JIT digits CNN step": (lambda: cnn(cx, cy), 20),
        "JIT matmul 1024^2": (lambda: matmul(a, b), 3),
    }
    threads = Device["CPU"].threads
    teams = {"adaptive": 0, f"always {threads}": threads, "always 1": 1}
    for fn, _ in work.values():
        for _ in range(3):
            fn()

    def measure(rounds: int) -> dict[tuple[str, str], list[float]]:
        times: dict[tuple[str, str], list[float]] = {(w, t): [] for w in work for t in teams}
        for _ in range(rounds):
            for w, (fn, reps) in work.items():
                for t, team in teams.items():
                    set_fixed_team(team)
                    st = time.perf_counter()
                    for _ in range(reps):
                        fn()
                    times[w, t].append((time.perf_counter() - st) / reps)
        set_fixed_team(0)
        return times

    before = team_launches()
    results = {"idle": measure(5)}
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
    try:
        time.sleep(0.5)  # the shells running before the first round
        results["2 busy neighbours"] = measure(5)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    single, several = (n - m for n, m in zip(team_launches(), before))
    print(f"\nThreaded kernels on {threads} cores, idle and loaded (ms per call, best / median of 5 rounds;")
    print(f"parallel loops launched: {single} on one thread, {several} on {threads})")
    print(f"{'':22s} {'':20s}" + "".join(f" {t:>17s}" for t in teams))
    for cond, times in results.items():
        for w in work:
            row = "".join(f" {min(times[w, t]) * 1e3:8.3f}/{sorted(times[w, t])[2] * 1e3:8.3f}" for t in teams)
            print(f"{cond:22s} {w:20s}{row}")


if __name__ == "__main__":
    # sections by name (`python bench/dispatch.py train_step`), all by default
    sections = {
        f.__name__: f
        for f in (small_add, twenty_kernels, big_add, train_step, cnn_step, resnet_step, per_sample_grads, loaded)
    }
    for name in sys.argv[1:] or sections:
        sections[name]()
