"""Threads realizing tensors at once: different graphs, the same graph, TinyJit, with the disk cache on and off."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from lazygrad import Context, Tensor, TinyJit

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
