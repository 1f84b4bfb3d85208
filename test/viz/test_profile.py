"""PROFILE=1 writes a Chrome trace-event file with the run's schedule, codegen, compile, kernel and JIT spans."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from lazygrad import Tensor, TinyJit
from lazygrad.helpers import Context, GlobalCounters
from lazygrad.viz import profile


def _spans(cat: str) -> list[dict]:
    return [e for e in profile.events() if e.get("ph") == "X" and e["cat"] == cat]


def test_profile_records_every_stage() -> None:
    profile.clear()
    with Context(PROFILE=1, CACHELEVEL=0):
        a, b = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)), Tensor.ones(4, 5)
        kernels_before = GlobalCounters.kernel_count
        out = ((a @ b).relu() + 0.123456).sum(0).numpy()  # a constant no earlier test compiled
        ran = GlobalCounters.kernel_count - kernels_before
    np.testing.assert_allclose(
        out, (np.arange(12, dtype=np.float32).reshape(3, 4) @ np.ones((4, 5))).sum(0) + 0.370368, rtol=1e-5
    )
    assert _spans("schedule") and all("kernels" in e["args"] for e in _spans("schedule"))
    codegen = [e for e in _spans("codegen") if e["name"] == "codegen"]
    assert codegen and all(e["args"]["kernel"] for e in codegen)
    assert {"optimize", "lower", "linearize", "render"} <= {e["name"] for e in _spans("codegen")}
    assert _spans("compile")
    kernels = _spans("kernel")
    assert len(kernels) == ran > 0  # one span per kernel launch, each with its device time and counters
    for e in kernels:
        assert e["dur"] >= 0 and e["args"]["ops"] >= 0 and e["args"]["bytes"] > 0 and e["args"]["device"]
    tracks = {e["tid"] for e in kernels}
    names = {e["tid"]: e["args"]["name"] for e in profile.events() if e.get("ph") == "M"}
    assert all(names[t].endswith("kernels") for t in tracks)
    assert any(e.get("ph") == "C" and e["name"] == "memory" for e in profile.events())
    profile.clear()


def test_profile_off_records_nothing() -> None:
    profile.clear()
    (Tensor.ones(7) * 3.5).sum().numpy()
    assert profile.events() == [] or all(e.get("ph") == "M" for e in profile.events())


def test_profile_jit_capture_and_replay() -> None:
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x * 2 + 1).sum()

    profile.clear()
    with Context(PROFILE=1):
        for i in range(4):
            assert step(Tensor.full((5,), float(i))).item() == 5 * (2 * i + 1)
    jit = {e["name"]: 0 for e in _spans("jit")}
    for e in _spans("jit"):
        jit[e["name"]] += 1
    assert jit == {"jit capture": 1, "jit replay": 2}
    assert any(e["args"]["jit"] for e in _spans("kernel"))  # replayed kernels are timed one by one
    profile.clear()


def test_profile_env_writes_trace_at_exit(tmp_path) -> None:
    path = tmp_path / "trace.json"
    code = "from lazygrad import Tensor; print((Tensor.arange(10) * 2).sum().item())"
    env = {**os.environ, "PROFILE": "1", "PROFILE_PATH": str(path)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "90" and "PROFILE: wrote" in res.stderr
    trace = json.loads(path.read_text())
    cats = {e.get("cat") for e in trace["traceEvents"]}
    assert {"schedule", "kernel"} <= cats
    assert "kernel" in profile.summary(trace)
