"""VIZ=1: a record of what the compiler did, for the web page of viz/server.py.

What is recorded while VIZ is on (VIZ=1, VIZ=-1 or `Context(VIZ=1)`):
- every kernel codegen builds: its AST, the opts applied, the lowered graph, the linear UOps and the source
  (`codegen` scope; the disk cache of programs is bypassed so that every kernel is built and seen);
- every `graph_rewrite` pass that changed something: its name, the graph before and after, and each rewrite in
  order with the rule that fired (file:line and its source line), attributed to the kernel being built if any;
  likewise a kernel's lowering (`lower`: each AST node, the LOWER_OP rule that lowered it, what it became) and
  the scheduler's building of each kernel AST (`build kernel`: each tensor-graph node and its KERNEL_OP rule);
- the PROFILE timeline (profile.py records while VIZ is on), whose kernel spans carry the index of their kernel.

Graphs are stored once in a node table shared by the whole run (`[op, dtype, arg, [source ids]]`, a node's id is
its position), so a step that rewrites one index expression costs a few rows, not a copy of the kernel.
With VIZ off, the hooks cost one flag test per graph_rewrite call and per kernel build, nothing per node.

Imports only helpers (duck-typed on UOp), so every layer, uop/ included, may call into it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import linecache
import os
import sys
import threading
import weakref
from typing import Any, Callable, Iterator

from lazygrad.helpers import VIZ, getenv, library_lock

MAX_PASSES = 20_000  # passes kept per run: a long training script must not fill memory with index simplifications
MAX_STEPS = 500  # rewrites kept per pass
ARG_CHARS = 300  # an arg's repr is cut there (a ShapeTracker of many views reads fine in 300 characters)

_lock = library_lock(reentrant=True)
_nodes: list[list[Any]] = []
_node_ids: dict[tuple, int] = {}  # structural key -> id: equal graphs of different runs' objects share rows
_uop_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # fast path for nodes seen before
_kernels: list[dict[str, Any]] = []
_passes: list[dict[str, Any]] = []
_kernel_by_src: dict[str, int] = {}  # source without the kernel's name -> kernel index, for the timeline
_dropped = [0]  # passes not kept past MAX_PASSES
_local = threading.local()  # per thread: the kernel being built, whether this build is hidden, rewrite depth


def enabled() -> bool:
    return VIZ.value != 0


# *** the node table ***


def node_id(root: Any) -> int:
    """The id of `root` in the node table, adding it and the nodes below it as needed."""
    with _lock:
        if (nid := _uop_ids.get(root)) is not None:
            return nid
        for u in root.toposort:
            if u in _uop_ids:
                continue
            arg = "" if u.arg is None else repr(u.arg)
            row = [u.op.name, repr(u.dtype).removeprefix("dtypes."), arg[:ARG_CHARS], [_uop_ids[s] for s in u.src]]
            key = (row[0], row[1], row[2], tuple(row[3]))
            if (nid := _node_ids.get(key)) is None:
                nid = _node_ids[key] = len(_nodes)
                _nodes.append(row)
            _uop_ids[u] = nid
        return _uop_ids[root]


# *** rewrite passes ***


@functools.cache
def _rule_source(fn: Callable) -> tuple[str, str]:
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn), ""
    where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    return where, linecache.getline(code.co_filename, code.co_firstlineno).strip()


def pattern_text(pat: Any) -> str:
    """A UPat as a short expression: `WHERE(CMPNE(c, CONST True), a, b)`; `[...]` sources match in any order, `*`
    after a source means every source matches it, `x:` names what the rule receives."""
    if pat.op is None:
        head = "_"
    elif len(pat.op) <= 3:
        head = "|".join(sorted(o.name for o in pat.op))
    else:
        head = f"<{len(pat.op)} ops>"
    if pat.arg is not None:
        head += f" {pat.arg!r}"
    if pat.name is not None:
        head = pat.name if pat.op is None and pat.arg is None else f"{pat.name}:{head}"
    if pat.src is None:
        return head
    if not isinstance(pat.src, (tuple, list)):
        return f"{head}({pattern_text(pat.src)}*)"
    inner = ", ".join(pattern_text(s) for s in pat.src)
    return f"{head}([{inner}])" if isinstance(pat.src, list) else f"{head}({inner})"


class _Fired(threading.local):
    rule: tuple[Any, Callable] | None = None


_fired = _Fired()


def _logged(pat: Any, fn: Callable) -> Callable:
    """fn, noting its rule as the one that fired whenever it returns a replacement."""

    @functools.wraps(fn)  # keeps the signature, so PatternMatcher still sees how to call fn
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ret = fn(*args, **kwargs)
        if ret is not None:
            _fired.rule = (pat, fn)
        return ret

    return wrapper


_logged_matchers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _logged_matcher(pm: Any) -> Any:
    if (logged := _logged_matchers.get(pm)) is None:
        logged = _logged_matchers[pm] = type(pm)([(pat, _logged(pat, fn)) for pat, fn in pm.rules])
    return logged


class RewriteTracker:
    """Stands in for a PatternMatcher inside graph_rewrite: the same rewrites, each logged with the rule that fired."""

    def __init__(self, pm: Any, name: str):
        self.pm, self.name, self.steps = _logged_matcher(pm), name, []

    def rewrite(self, u: Any, ctx: Any = None) -> Any:
        _fired.rule = None
        ret = self.pm.rewrite(u, ctx)
        if ret is not None and len(self.steps) < MAX_STEPS:
            self.steps.append((_fired.rule, u, ret))
        return ret


def track_rewrite(rewrite: Callable[..., Any], root: Any, pm: Any, name: str, ctx: Any) -> Any:
    """`rewrite(root, pm, ctx)` (graph_rewrite, unrecorded) with the pass recorded. The caller's memo is left out, so
    a pass shows every rewrite it makes, not only those no earlier call made. A rewrite that a rule runs inside
    another pass, or that a BEAM candidate's build runs, is not recorded: a probe, not a pass."""
    depth = getattr(_local, "rewrite_depth", 0)
    if depth > 0 or getattr(_local, "hidden", False):
        return rewrite(root, pm, ctx, name=None)
    tracker = RewriteTracker(pm, name)
    _local.rewrite_depth = depth + 1
    try:
        out = rewrite(root, tracker, ctx, name=None)
    finally:
        _local.rewrite_depth = depth
    if tracker.steps:
        _add_pass(name, root, out, tracker.steps)
    return out


class TranslateTracker:
    """Stands in for a rule list a pass applies node by node (PatternMatcher.translate, e.g. the lowerer's LOWER_OP):
    the same results, each logged in `steps` with the rule that gave it. Trackers of one pass may share `steps`."""

    def __init__(self, pm: Any, steps: list[tuple[Any, Any, Any]]):
        self.pm, self.steps = _logged_matcher(pm), steps

    def translate(self, u: Any, ctx: Any = None) -> Any:
        _fired.rule = None
        ret = self.pm.translate(u, ctx)
        if ret is not None and len(self.steps) < MAX_STEPS:
            self.steps.append((_fired.rule, u, ret))
        return ret


def translated(pm: Any, steps: list[tuple[Any, Any, Any]], in_codegen: bool = True) -> Any:
    """`pm`, or with VIZ on, a TranslateTracker of it logging into `steps`; `in_codegen`: only inside a recorded
    kernel build (not a BEAM candidate's)."""
    if not enabled() or getattr(_local, "hidden", False) or in_codegen and getattr(_local, "kernel", None) is None:
        return pm
    return TranslateTracker(pm, steps)


def translate_pass(name: str, root: Any, out: Any, steps: list[tuple[Any, Any, Any]]) -> None:
    """Record a pass made of rule lists applied node by node (see `translated`): `root` in, `out` out."""
    if steps:
        _add_pass(name, root, out, steps)


def _add_pass(name: str, root: Any, out: Any, steps: list[tuple[Any, Any, Any]]) -> None:
    with _lock:
        if len(_passes) >= MAX_PASSES:
            _dropped[0] += 1
            return
        kernel = getattr(_local, "kernel", None)
        rec: dict[str, Any] = {"name": name, "kernel": kernel, "input": node_id(root), "output": node_id(out)}
        rec["steps"] = [
            {"rule": _rule_source(rule[1])[0], "code": _rule_source(rule[1])[1], "pattern": pattern_text(rule[0])}
            | {"before": node_id(before), "after": node_id(after)}
            for rule, before, after in steps
            if rule is not None
        ]
        if kernel is not None:
            _kernels[kernel]["passes"].append(len(_passes))
        _passes.append(rec)


# *** kernels ***


def _source_key(name: str, src: str) -> str:
    # kernels compiled into one binary are renamed (E_4_4 -> E_4_4n1): the key leaves the name out of the source
    from lazygrad.renderer import rename_kernel  # the renderer imports the IR, which imports this module

    return rename_kernel(src, name, "")


@contextlib.contextmanager
def codegen(ast: Any, candidate: bool = False) -> Iterator[Callable[[Any], None]]:
    """The scope of one kernel's build: passes run inside belong to it. Yields `finish(spec)`, which records what
    the build produced. A build with explicit opts (`candidate`: BEAM's timing candidates, built on worker threads)
    or nested in another build is not recorded, nor are its passes."""
    if not enabled():
        yield _not_recorded
        return
    outer, outer_hidden = getattr(_local, "kernel", None), getattr(_local, "hidden", False)
    try:
        if candidate or outer is not None or outer_hidden:
            _local.hidden = True
            yield _not_recorded
            return
        with _lock:
            index = len(_kernels)
            _kernels.append({"ast": node_id(ast), "passes": [], "stages": {}})
        _local.kernel = index
        yield functools.partial(_finish_kernel, index)
    finally:
        _local.kernel, _local.hidden = outer, outer_hidden


def _not_recorded(spec: Any) -> None:
    pass


def _finish_kernel(index: int, spec: Any) -> None:
    with _lock:
        rec = _kernels[index]
        rec.update(
            name=spec.name,
            display_name=spec.display_name,
            opts=[str(o) for o in spec.applied_opts],
            src=spec.src,
            ops=spec.ops,
            mem=spec.mem,
            global_size=spec.global_size,
            local_size=spec.local_size,
        )
        key = _source_key(spec.name, spec.src)
        if (first := _kernel_by_src.get(key)) is not None and _kernels[first]["ast"] == rec["ast"]:
            rec["duplicate_of"] = first  # the same kernel built again (another cache missed): listed once
        else:
            _kernel_by_src[key] = index


def stage(name: str, graph: Any) -> None:
    """A codegen stage's output for the kernel being built: a UOp graph, or a list of linear UOps."""
    if not enabled() or (index := getattr(_local, "kernel", None)) is None or getattr(_local, "hidden", False):
        return
    if isinstance(graph, list):
        uops = {u: i for i, u in enumerate(graph)}
        text = [
            f"{i:4d} {u.op.name:14s} {repr(u.dtype).removeprefix('dtypes.'):18s} "
            f"{[uops.get(s, -1) for s in u.src]!s:18s} {'' if u.arg is None else repr(u.arg)[:ARG_CHARS]}"
            for i, u in enumerate(graph)
        ]
        with _lock:
            _kernels[index]["stages"][name] = {"text": "\n".join(text)}
    else:
        with _lock:
            _kernels[index]["stages"][name] = {"graph": node_id(graph)}


def kernel_index(name: str, src: str) -> int | None:
    """The recorded kernel whose launch this is (for the timeline), None if it was built before VIZ was on."""
    return _kernel_by_src.get(_source_key(name, src))


# *** the whole record ***


def dump() -> dict[str, Any]:
    """Everything recorded so far plus the profile timeline, as one JSON-able dict (what the page shows)."""
    from lazygrad.viz import profile

    with _lock:
        return {
            "lazygrad_viz": 1,
            "nodes": [list(n) for n in _nodes],
            "kernels": [dict(k) for k in _kernels],
            "passes": list(_passes),
            "dropped_passes": _dropped[0],
            "trace": {"traceEvents": profile.events(), "displayTimeUnit": "ms"},
        }


def clear() -> None:
    with _lock:
        _nodes.clear()
        _node_ids.clear()
        _uop_ids.clear()
        _kernels.clear()
        _passes.clear()
        _kernel_by_src.clear()
        _dropped[0] = 0


def write(path: str | None = None) -> str:
    path = path or getenv("VIZ_PATH", "") or "lazygrad_viz.json"
    with open(path, "w") as f:
        json.dump(dump(), f)
    return path


@atexit.register
def _write_and_serve_at_exit() -> None:
    if not enabled() or not (_kernels or _passes):
        return
    path = write()
    print(f"VIZ: wrote {len(_kernels)} kernels and {len(_passes)} rewrite passes to {path}", file=sys.stderr)
    if VIZ.value > 0:
        from lazygrad.viz.server import serve_until_interrupted

        serve_until_interrupted(load(path))


def load(path: str) -> dict[str, Any]:
    """A saved VIZ record, or a PROFILE trace (shown as a timeline with no kernels)."""
    with open(path) as f:
        data = json.load(f)
    if "lazygrad_viz" in data:
        return data
    if "traceEvents" not in data:
        raise ValueError(f"{path} is neither a VIZ record (lazygrad_viz.json) nor a PROFILE trace")
    return {"lazygrad_viz": 1, "nodes": [], "kernels": [], "passes": [], "dropped_passes": 0, "trace": data}
