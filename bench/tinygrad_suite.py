"""Run tinygrad's own frontend test files against lazygrad, through an import shim, and print a pass table.

Usage:
    python3 bench/tinygrad_suite.py DIR [FILE ...] [-k EXPR] [--timeout S] [-v]

DIR is a directory laid out like a tinygrad checkout's `test/` parent (it holds `test/__init__.py`, `test/helpers.py`,
`test/backend/test_ops.py`, `test/unit/test_indexing.py`, ...). FILE names a test file relative to DIR (default: the
frontend set in FRONTEND below). Every file runs in its own pytest process, slow-marked tests included (RUN_SLOW=1
unless set); the table gives per file: passed, failed (errors included), skipped by the file itself, skipped by this
shim (with a stated reason, counted apart), and pass rates (pass/run leaves the shim's skips out, pass/all counts them
as not passed). -v lists every failing test; --json writes every outcome.

Getting the test files (they are tinygrad's code: keep them outside this repository, never commit them):
    git clone https://github.com/tinygrad/tinygrad /tmp/tinygrad && git -C /tmp/tinygrad checkout v0.14.0
    mkdir -p ~/tinygrad_tests && cp -r /tmp/tinygrad/test ~/tinygrad_tests/
    python3 bench/tinygrad_suite.py ~/tinygrad_tests
(Any tree whose test files import `tinygrad` works; files a tree lacks are listed as missing.)

How the shim works: a meta-path finder placed first on `sys.meta_path` answers every `tinygrad` / `tinygrad.*`
import with a proxy module over the lazygrad module of the same path (`tinygrad.nn.state` -> `lazygrad.nn.state`,
table MODULES for the paths that differ). A name the lazygrad module lacks falls back to SHIM_NAMES (test-harness
constants such as `CPU_LLVM` that describe tinygrad's build, not an API), and otherwise to a placeholder class whose
use raises NotImplementedError naming the missing `tinygrad.X.name` -- so a file whose header imports one internal
name still collects, and only the tests that use it fail. The real tinygrad package (if installed) is never
imported: the runner checks `tinygrad.__file__` is the shim's after the run.

Tests of tinygrad internals (kernel counts, UOp graphs, schedule introspection, device-specific behaviour) are
skipped by SKIPS, each with its reason; they are reported in the "shim-skip" column, not as passes.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FRONTEND = [
    "test/backend/test_ops.py",
    "test/backend/test_tensor.py",
    "test/backend/test_nn.py",
    "test/backend/test_optim.py",
    "test/backend/test_setitem.py",
    "test/backend/test_randomness.py",
    "test/backend/test_assign.py",
    "test/backend/test_linalg.py",
    "test/unit/test_indexing.py",
]

# tinygrad module path -> lazygrad module path, where the two differ
MODULES = {
    "tinygrad": "lazygrad",
    "tinygrad.engine.schedule": "lazygrad.schedule",
    "tinygrad.schedule.rangeify": "lazygrad.schedule.kernelize",
    "tinygrad.codegen.opt": "lazygrad.codegen.kernel",
    "tinygrad.renderer.cstyle": "lazygrad.renderer.cstyle",
    "tinygrad.runtime.ops_cpu": "lazygrad.runtime.ops_cpu",
    "tinygrad.mixin": "lazygrad.tensor",
}

# names tinygrad's tests read from tinygrad that describe tinygrad's own build or CI, with the value they have on a
# plain CPU run; none of them is an API a program computes with
SHIM_NAMES: dict[str, dict[str, Any]] = {
    "tinygrad.helpers": {
        "CPU_LLVM": 0,
        "AMD_LLVM": 0,
        "EMULATE": "",
        "DEVECTORIZE": 1,
        "CPU_LVP": 0,
        "MOCKGPU": 0,
        "OSX": False,
        "WIN": False,
        "THREEFRY": 0,
        "TRANSCENDENTAL": 1,
        "IMAGE": 0,
        "NOOPT": 0,
        "DEBUG": 0,
        "CI": True,
        "Target": None,
        # tinygrad's device/renderer selection (DEV=CPU:LLVM style); the tests only read its parts' names
        "DEV": types.SimpleNamespace(value="", interface="", renderer="", device=""),
    },
}

# (file, "Class::test" or "Class::" for the whole class) -> reason. Only failing tests of how tinygrad is built inside
# are here; a test of what a program computes is never skipped.
_KERNELS = "tinygrad internals: kernel counts, schedules and their programs"
_UOPS = "tinygrad internals: UOp graphs built or inspected by hand (after/store/buf_uop, Ops names, deviceless consts)"
_BUFFERS = "tinygrad internals: which Buffer object a realized tensor sits in"
_RNG = "tinygrad internals: its RNG's per-device counter tensors"
_A, _T = "test/backend/test_assign.py", "test/backend/test_tensor.py"
_N, _R = "test/backend/test_nn.py", "test/backend/test_randomness.py"
SKIPS: dict[tuple[str, str], str] = {
    **{
        (_A, f"TestAssign::{t}"): _KERNELS
        for t in (
            "test_assign_copy",
            "test_assign_slice",
            "test_assign_temporary_copy_reshape",
            "test_chained_assign_kernel_count",
            "test_double_assign_from_const",
            "test_nested_after_contiguous_store",
            "test_nested_after_contiguous_store_no_init",
            "test_permuted_assignment_masked_view_possible",
            "test_shared_computation_assign_kernel_count",
        )
    },
    **{
        (_A, f"TestAssign::{t}"): _UOPS
        for t in (
            "test_assign_after",
            "test_assign_after_partial",
            "test_assign_changes_buffer_alt",
            "test_assign_deviceless_const",
        )
    },
    (_A, "TestAfterCachePatterns::"): _UOPS,
    **{
        (_A, f"TestAssignToUnrealizedView::{t}"): _UOPS
        for t in (
            "test_clone",
            "test_contiguous_backward",
            "test_detach_copy",
            "test_detach_contiguous",
            "test_detach_clone",
            "test_reduce",
        )
    },
    **{
        (_A, f"TestAssign::{t}"): _BUFFERS
        for t in ("test_simple_assignment", "test_permuted_assignment", "test_assign_add", "test_assign_slice_add")
    },
    **{
        (_T, t): _UOPS
        for t in (
            "TestTinygrad::test_deviceless_const_construct_device_repr",
            "TestZeroShapeTensor::test_clone_deviceless_const",
            "TestZeroShapeTensor::test_clone_deviceless_const_to_cpu",
            "TestZeroShapeTensor::test_numpy_deviceless_const",
        )
    },
    (_T, "TestZeroShapeTensor::test_clone_with_shrink"): _BUFFERS,
    **{(_N, f"TestNN::test_embedding_one_kernel{t}"): _KERNELS for t in ("", "_fused", "_fused_noopt")},
    **{
        (_N, f"TestNN::{t}"): "tinygrad internals: a sharded tensor's UOp axis"
        for t in ("test_load_state_dict_sharded_model", "test_load_state_dict_sharded_model_dict_same_axis")
    },
    **{(_R, f"TestRandomness::{t}"): _RNG for t in ("test_rand_is_lazy", "test_threefry_tensors_cnt")},
    (_R, "TestRandomness::test_threefry_doesnt_use_long"): _KERNELS,
}


def _placeholder(qualname: str) -> type:
    """A stand-in for a tinygrad name lazygrad does not have: a class, so isinstance() against it is False; any use
    that needs the real thing raises with the missing name."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"lazygrad has no {qualname} (filled in by the tinygrad test shim)")

    meta = type("Missing", (type,), {"__getattr__": lambda cls, name: fail(), "__call__": fail})
    return meta(qualname.rsplit(".", 1)[-1], (), {})


class _ProxyModule(types.ModuleType):
    """`tinygrad.X`: attribute reads go to the lazygrad module (if any), then SHIM_NAMES, then a placeholder."""

    def __init__(self, name: str, target: types.ModuleType | None):
        super().__init__(name)
        self.__dict__["_target"] = target
        self.__dict__["__path__"] = []  # a package, so `tinygrad.X.Y` imports go through the finder
        self.__dict__["__file__"] = __file__
        self.__dict__["__shim__"] = True

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        target = self.__dict__["_target"]
        if target is not None and hasattr(target, attr):
            return getattr(target, attr)
        submodule = f"{self.__name__}.{attr}"
        if submodule in sys.modules:
            return sys.modules[submodule]
        extra = SHIM_NAMES.get(self.__name__, {})
        if attr in extra:
            return extra[attr]
        FILLED.add(f"{self.__name__}.{attr}")
        value = _placeholder(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value

    def __setattr__(self, attr: str, value: Any) -> None:
        # tests that monkeypatch a tinygrad module (e.g. helpers.DEBUG) patch the lazygrad module behind it
        target = self.__dict__["_target"]
        if target is not None and hasattr(target, attr):
            setattr(target, attr, value)
        else:
            self.__dict__[attr] = value


FILLED: set[str] = set()


class _ShimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "tinygrad" and not fullname.startswith("tinygrad."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        name = spec.name
        lazy = MODULES.get(name, "lazygrad" + name[len("tinygrad") :])
        try:
            target = importlib.import_module(lazy)
        except ImportError:
            target = None
        return _ProxyModule(name, target)

    def exec_module(self, module: types.ModuleType) -> None:
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            sys.modules[parent].__dict__[child] = module


def install() -> None:
    """Make `import tinygrad...` resolve to lazygrad. Call before anything imports tinygrad."""
    for name in [m for m in sys.modules if m == "tinygrad" or m.startswith("tinygrad.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _ShimFinder())


class _Plugin:
    """pytest plugin run inside each file's process: applies SKIPS and records one outcome per test."""

    def __init__(self, rel: str, out: str):
        self.rel, self.out, self.results = rel, out, {}

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        import pytest

        for item in items:
            test = item.nodeid.split("::", 1)[-1]
            for (file, prefix), reason in SKIPS.items():
                if file == self.rel and (test == prefix or (prefix.endswith("::") and test.startswith(prefix))):
                    item.add_marker(pytest.mark.skip(reason=f"shim: {reason}"))

    def pytest_runtest_logreport(self, report: Any) -> None:
        test = report.nodeid.split("::", 1)[-1]
        if report.when == "call" or report.outcome != "passed":
            if report.skipped:
                reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
                outcome = "shim-skip" if "shim: " in reason else "skip"
            else:
                outcome = "pass" if report.passed else "fail"
            if self.results.get(test) in (None, "pass"):
                self.results[test] = outcome

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.results[f"<collect {report.nodeid}>"] = "fail"

    def pytest_sessionfinish(self) -> None:
        mod = sys.modules.get("tinygrad")
        real = mod is not None and not getattr(mod, "__shim__", False)
        with open(self.out, "w") as f:
            json.dump({"results": self.results, "filled": sorted(FILLED), "real_tinygrad": real}, f)


def _run_one(root: str, rel: str, out: str, extra: list[str]) -> None:
    """Child process: shim, then pytest on one file with `root` first on sys.path (its `test` package wins)."""
    import pytest

    sys.path[:0] = [root, REPO]
    for name in [m for m in sys.modules if m == "test" or m.startswith("test.")]:
        del sys.modules[name]
    install()
    os.chdir(root)
    args = [rel, "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", root, "-W", "ignore", *extra]
    pytest.main(args, plugins=[_Plugin(rel, out)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("files", nargs="*")
    ap.add_argument("-k", default=None)
    ap.add_argument("-v", action="store_true", help="list every failing test")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per file")
    ap.add_argument("--json", default=None, help="write all outcomes to this file")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.child:
        _run_one(args.root, args.child[0], args.child[1], (["-k", args.k] if args.k else []) + rest)
        return
    root = os.path.abspath(args.root)
    # tinygrad marks whole classes (TestNN, TestOptim, TestAdvancedIndexing) slow; they are what is measured here
    os.environ.setdefault("RUN_SLOW", "1")
    rows, everything = [], {}
    for rel in args.files or FRONTEND:
        if not os.path.exists(os.path.join(root, rel)):
            rows.append((rel, None, 0.0))
            continue
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = tmp.name
        cmd = [sys.executable, os.path.abspath(__file__), root, "--child", rel, out]
        cmd += ["-k", args.k] if args.k else []
        start = time.perf_counter()
        try:
            subprocess.run(cmd + rest, timeout=args.timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out) as f:
                data = json.load(f)
        except (subprocess.TimeoutExpired, FileNotFoundError, json.JSONDecodeError) as e:
            data = {"results": {f"<run: {type(e).__name__}>": "fail"}, "filled": [], "real_tinygrad": False}
        finally:
            if os.path.exists(out):
                os.unlink(out)
        if data["real_tinygrad"]:
            raise SystemExit(f"{rel}: the real tinygrad was imported; the shim did not take")
        rows.append((rel, data, time.perf_counter() - start))
        everything[rel] = data
    _print_table(rows, args.v)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1)


def _print_table(rows: list[tuple[str, dict | None, float]], verbose: bool) -> None:
    cols = ("pass", 5), ("fail", 5), ("skip", 5), ("shim-skip", 9), ("pass/run", 9), ("pass/all", 9), ("s", 6)
    head = f"{'file':40s} " + " ".join(f"{c:>{w}s}" for c, w in cols)
    print(head)
    print("-" * len(head))
    for rel, data, secs in rows:
        if data is None:
            print(f"{rel:40s} (missing)")
            continue
        outcomes = list(data["results"].values())
        n = {k: outcomes.count(k) for k in ("pass", "fail", "skip", "shim-skip")}
        run = n["pass"] + n["fail"]
        allc = run + n["shim-skip"]
        pr = f"{100 * n['pass'] / run:.1f}%" if run else "-"
        pa = f"{100 * n['pass'] / allc:.1f}%" if allc else "-"
        counts = f"{n['pass']:5d} {n['fail']:5d} {n['skip']:5d} {n['shim-skip']:9d}"
        print(f"{rel:40s} {counts} {pr:>9s} {pa:>9s} {secs:6.0f}")
    for rel, data, _ in rows:
        if data is None:
            continue
        if data["filled"]:
            print(f"{rel}: names filled in by the shim: {', '.join(data['filled'])}")
        if verbose:
            for test, outcome in sorted(data["results"].items()):
                if outcome == "fail":
                    print(f"  FAIL {rel}::{test}")


if __name__ == "__main__":
    main()
