"""VIZ=1: what the recorder keeps (kernels, named rewrite passes with the rule that fired, the timeline), that it keeps
nothing when off, the graph layout, the server and saving / reopening a run."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import pytest

from lazygrad import Device, Tensor
from lazygrad.codegen import get_program
from lazygrad.helpers import Context
from lazygrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from lazygrad.uop.symbolic import simplify, symbolic
from lazygrad.viz import profile, record
from lazygrad.viz.layout import layout
from lazygrad.viz.server import serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def empty_record():
    """Each test starts from an empty record and leaves one: a record left at exit would be served (and block)."""
    record.clear()
    profile.clear()
    yield
    record.clear()
    profile.clear()


def fresh_constant() -> float:
    # a constant no other test compiled: the kernel is built here, not found in the process's cache of runners
    return round(random.SystemRandom().uniform(1, 2), 9)  # not the module generator: a test may have seeded it


def test_viz_off_records_nothing() -> None:
    c = fresh_constant()
    with Context(VIZ=0):
        np.testing.assert_allclose((Tensor.ones(3, 5) * c).sum(1).numpy(), [5 * c] * 3, rtol=1e-6)
        simplify(UOp.variable("i", 0, 9) + 0)
    d = record.dump()
    assert d["kernels"] == [] and d["passes"] == [] and d["nodes"] == []
    assert all(e.get("ph") == "M" for e in d["trace"]["traceEvents"])


def test_viz_records_kernels_with_ast_opts_source_and_launches() -> None:
    c = fresh_constant()
    a = np.arange(88, dtype=np.float32).reshape(8, 11)
    with Context(VIZ=1):  # every kernel reads the fresh constant: none can come from another test's cache
        x = Tensor(a) * c
        out = ((x @ x.T) + c).sum(1).numpy()
    np.testing.assert_allclose(out, ((a * c) @ (a * c).T + c).sum(1), rtol=1e-5)
    d = record.dump()
    kernels = [k for k in d["kernels"] if "duplicate_of" not in k]
    assert kernels, "no kernel recorded"
    for k in kernels:
        assert d["nodes"][k["ast"]][0] == "SINK" and d["nodes"][k["ast"]][3], "the AST is the kernel's SINK"
        assert f" {k['name']}(" in k["src"] and isinstance(k["opts"], list)
        assert d["nodes"][k["stages"]["lowered"]["graph"]][0] == "SINK"
        assert "DEFINE_GLOBAL" in k["stages"]["linearized"]["text"]
    assert any(k["opts"] for k in kernels), "the sum over the fresh constant is unrolled by default"
    # every launch of a kernel built here links to it, and every kernel built here ran (a launch of a kernel built
    # before VIZ was on, found in the process's cache of runners, has no record to link to: the .numpy() copy of
    # 8 floats may come from another test in the same process)
    launches = [e for e in d["trace"]["traceEvents"] if e.get("cat") == "kernel" and "viz_kernel" in e["args"]]
    assert launches and all(d["kernels"][e["args"]["viz_kernel"]]["name"] == e["name"] for e in launches)
    assert {e["args"]["viz_kernel"] for e in launches} == {d["kernels"].index(k) for k in kernels}
    # index simplification ran inside codegen: those passes belong to their kernel, and say which rule fired
    owned = [p for k in kernels for p in k["passes"]]
    assert owned and all(d["passes"][p]["kernel"] is not None for p in owned)
    assert all(s["rule"].startswith(("symbolic.py:", "lowerer.py:")) for p in owned for s in d["passes"][p]["steps"])
    lowering = [d["passes"][p] for p in owned if d["passes"][p]["name"] == "lower"]
    assert len(lowering) == len(kernels) and all(
        s["rule"].startswith("lowerer.py:") for p in lowering for s in p["steps"]
    )
    assert {d["nodes"][s["before"]][0] for p in lowering for s in p["steps"]} >= {"LOAD", "REDUCE_AXIS"}


def test_beam_candidates_and_explicit_opts_are_not_recorded() -> None:
    si = (Tensor.ones(8, 8).contiguous() * fresh_constant()).schedule()[-1]
    renderer = Device[si.outputs[0].device].renderer
    with Context(VIZ=1):
        with ThreadPoolExecutor(2) as pool:  # BEAM builds its candidates on worker threads, with explicit opts
            specs = list(pool.map(lambda opts: get_program(si.ast, renderer, opts), [[], []]))
        assert specs[0].src == specs[1].src
        assert record.dump()["kernels"] == [] and record.dump()["passes"] == []
        spec = get_program(si.ast, renderer)
    (k,) = record.dump()["kernels"]
    assert k["src"] == spec.src and k["passes"]


def test_rewrite_pass_recorded_step_by_step() -> None:
    i = UOp.variable("i", 0, 9)
    with Context(VIZ=1):
        out = graph_rewrite((i + 0) * 1, symbolic, name="fold identities")
    assert out is i
    (p,) = record.dump()["passes"]
    nodes = record.dump()["nodes"]
    assert p["name"] == "fold identities" and p["kernel"] is None
    assert nodes[p["input"]][0] == "MUL" and nodes[p["output"]][0] == "DEFINE_VAR"
    assert [nodes[s["before"]][0] for s in p["steps"]] == ["ADD", "MUL"]  # bottom-up: x+0 first, then x*1
    assert all(nodes[s["after"]][0] == "DEFINE_VAR" for s in p["steps"])
    assert all(s["rule"].startswith("symbolic.py:") and "UPat" in s["code"] for s in p["steps"])
    assert [s["pattern"] for s in p["steps"]] == ["ADD(x, CONST 0)", "MUL(x, CONST 1)"]


def test_rule_with_ctx_still_gets_it_and_unchanged_or_unnamed_passes_are_not_recorded() -> None:
    seen = []

    def double(ctx, x):
        seen.append(ctx)
        return None if x.arg % 2 == 0 else x.const_like(x.arg * 2)

    pm = PatternMatcher([(UPat(Ops.CONST, name="x"), double)])
    three = UOp.const(UOp.variable("i", 0, 9).dtype, 3)
    with Context(VIZ=1):
        assert graph_rewrite(three, pm, ctx="the ctx", name="double odd").arg == 6
        assert graph_rewrite(three.const_like(8), pm, ctx="the ctx", name="no change").arg == 8
        assert graph_rewrite(three.const_like(5), pm, name=None).arg == 10
    assert seen and all(c in ("the ctx", None) for c in seen) and "the ctx" in seen
    passes = record.dump()["passes"]
    assert [p["name"] for p in passes] == ["double odd"]
    assert passes[0]["steps"][0]["code"].startswith("def double(ctx, x)")


def test_layout_rows_and_edges() -> None:
    i, j = UOp.variable("i", 0, 9), UOp.variable("j", 0, 9)
    with Context(VIZ=1):
        root = record.node_id(((i * 4 + j) // 2 + (i * 4 + j) % 2).maximum(i))
    nodes = record.dump()["nodes"]
    g = layout(nodes, root)
    by_id = {n["id"]: n for n in g["nodes"]}
    assert len(by_id) == len(g["nodes"]) == 10 and not g["truncated"]  # each shared node drawn once
    for e in g["edges"]:  # sources above their users
        assert by_id[e["from"]]["y"] + by_id[e["from"]]["h"] <= by_id[e["to"]]["y"]
    assert len(g["edges"]) == sum(len(nodes[n["id"]][3]) for n in g["nodes"])
    rows: dict[int, list] = {}
    for n in g["nodes"]:
        rows.setdefault(n["y"], []).append(n)
    for row in rows.values():  # no two boxes of a row overlap
        row.sort(key=lambda n: n["x"])
        assert all(a["x"] + a["w"] <= b["x"] for a, b in zip(row, row[1:]))
    assert all(0 <= n["x"] and n["x"] + n["w"] <= g["width"] + 0.1 for n in g["nodes"])
    assert by_id[root]["y"] == max(n["y"] for n in g["nodes"])  # the root is the bottom row
    cut = layout(nodes, root, limit=4)
    assert cut["truncated"] and len(cut["nodes"]) == 4


def test_server_serves_page_data_and_graphs_then_stops() -> None:
    with Context(VIZ=1):
        (Tensor.arange(6) * fresh_constant()).sum().item()
    data = record.dump()
    server = serve(data)
    try:
        page = urllib.request.urlopen(server.url, timeout=60).read().decode()
        assert 'id="kernel-list"' in page and "<script src" not in page and "<link" not in page
        # nothing is fetched from the network: the one address in the page is SVG's namespace name
        assert set(re.findall(r"https?://[^\"' )]+", page)) == {"http://www.w3.org/2000/svg"}
        got = json.loads(urllib.request.urlopen(server.url + "data.json", timeout=60).read())
        assert got["kernels"] == json.loads(json.dumps(data["kernels"])) and "nodes" not in got
        g = json.loads(urllib.request.urlopen(f"{server.url}graph/{data['kernels'][0]['ast']}", timeout=60).read())
        assert g["nodes"] and g["nodes"][-1]["op"] == "SINK"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{server.url}graph/{len(data['nodes'])}", timeout=10)
    finally:
        server.stop()
    assert not server.thread.is_alive()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=2)


def test_save_and_load(tmp_path) -> None:
    with Context(VIZ=1):
        (Tensor.ones(4) * fresh_constant()).numpy()
    path = record.write(str(tmp_path / "run.json"))
    assert record.load(path) == json.loads(json.dumps(record.dump()))
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"name": "k", "cat": "kernel", "ph": "X", "ts": 0, "dur": 5}]}))
    assert record.load(str(trace))["kernels"] == [] and record.load(str(trace))["trace"]["traceEvents"]
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="neither a VIZ record"):
        record.load(str(tmp_path / "other.json"))


def _lines(proc: subprocess.Popen) -> Callable[[], str]:
    """A reader of the child's output lines that fails the test, instead of hanging it, when the child goes silent
    (a thread reads the pipe: select() on it would miss lines already buffered by an earlier readline)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def next_line(timeout: float = 120) -> str:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            proc.kill()
            pytest.fail(f"no output from the child in {timeout} s")

    return next_line


def _env(**kw: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT, "CACHELEVEL": "0", **kw}


def _serving(args: list[str], env: dict[str, str], err_path) -> tuple[subprocess.Popen, Callable[[], str]]:
    with open(err_path, "w") as err:  # a file, not a pipe: a chatty child cannot block on a full pipe
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    return proc, _lines(proc)


def _interrupt(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)  # Ctrl-C: the server stops and the process exits cleanly
    return proc.wait(timeout=30)


def test_viz_env_writes_the_run_and_serves_it_at_exit(tmp_path) -> None:
    path, err = tmp_path / "run.json", tmp_path / "err.txt"
    code = "from lazygrad import Tensor; print((Tensor.arange(10) * 3).sum().item(), flush=True)"
    proc, next_line = _serving(["-c", code], _env(VIZ="1", VIZ_PATH=str(path), VIZ_PORT="0"), err)
    try:
        assert next_line().strip() == "135"
        line = next_line()
        assert line.startswith("VIZ: serving http://127.0.0.1:"), line + err.read_text()
        assert json.loads(urllib.request.urlopen(line.split()[2] + "data.json", timeout=60).read())["kernels"]
    finally:
        rc = _interrupt(proc)
    assert rc == 0, err.read_text()
    assert "VIZ: wrote" in err.read_text() and record.load(str(path))["kernels"]


def test_cli_opens_a_saved_trace_in_the_page(tmp_path) -> None:
    trace, err = tmp_path / "trace.json", tmp_path / "err.txt"
    trace.write_text(json.dumps({"traceEvents": [{"name": "E_4", "cat": "kernel", "ph": "X", "ts": 0, "dur": 5}]}))
    cmd = ["-m", "lazygrad.viz", str(trace)]
    proc, next_line = _serving(cmd, _env(VIZ_PORT="0"), err)
    try:
        line = next_line()
        assert line.startswith("VIZ: serving http://127.0.0.1:"), line + err.read_text()
        got = json.loads(urllib.request.urlopen(line.split()[2] + "data.json", timeout=60).read())
        assert got["kernels"] == [] and got["trace"]["traceEvents"][0]["name"] == "E_4"
    finally:
        rc = _interrupt(proc)
    assert rc == 0, err.read_text()
    missing = [sys.executable, *cmd[:2], str(tmp_path / "missing.json")]
    res = subprocess.run(missing, env=_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "missing.json" in res.stderr and "Traceback" not in res.stderr


def test_viz_minus_one_only_writes_and_cli_summary(tmp_path) -> None:
    path = tmp_path / "run.json"
    code = "from lazygrad import Tensor; print((Tensor.arange(10) * 2).sum().item())"
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(VIZ="-1", VIZ_PATH=str(path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and res.stdout.strip() == "90" and "serving" not in res.stdout, res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "lazygrad.viz", "--summary", str(path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "kernel" in res.stdout and str(path) in res.stdout, res.stderr


def test_scheduler_kernel_builds_recorded_rule_by_rule() -> None:
    a = Tensor(np.arange(6, dtype=np.float32)).realize()
    with Context(VIZ=1):
        (a.exp2().pad((1, 1)) * fresh_constant()).schedule()
    d = record.dump()
    (p,) = [p for p in d["passes"] if p["name"] == "build kernel"]
    assert p["kernel"] is None and d["nodes"][p["output"]][0] == "SINK"
    rules = {d["nodes"][s["before"]][0]: s["rule"] for s in p["steps"]}
    assert {"BUFFER", "PAD", "EXP2", "MUL"} <= set(rules) and all(r.startswith("kernelize.py:") for r in rules.values())
    exp2 = next(s for s in p["steps"] if d["nodes"][s["before"]][0] == "EXP2")
    assert d["nodes"][exp2["after"]][0] == "WHERE"  # exp2(0) != 0: the padded value is masked as a whole
