"""A realize whose kernels fail to build (a compile error, Ctrl-C during a long first compile) leaves its tensors as
they were: lazy, so that the next realize or .numpy() computes them. They stood for buffers that never got a value
before, and every later read raised "its kernels never ran"."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from lazygrad import Context, Device, Tensor
from lazygrad.device import CompileError

pytestmark = pytest.mark.usefixtures("default_device_cpu")  # (the CPU compiler is the one made to fail)

_fresh = itertools.count(1)


def fresh_constant() -> float:
    """A constant no kernel compiled so far has: the graphs below need a new kernel, never a cached one."""
    return 1.0 + next(_fresh) / 1024 + np.random.default_rng().integers(1 << 20) / (1 << 40)


@pytest.fixture
def failing_compiles(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make the next `n` compiler calls of the CPU device raise `exc`."""
    compiler_type = type(Device["CPU"].compiler)
    plan: dict[str, Any] = {"left": 0, "exc": None}

    def wrap(name: str) -> None:
        orig = getattr(compiler_type, name)

        def failing(self: Any, *args: Any) -> Any:
            if plan["left"] > 0:
                plan["left"] -= 1
                raise plan["exc"]
            return orig(self, *args)

        monkeypatch.setattr(compiler_type, name, failing)

    for name in ("compile", "compile_many"):
        if hasattr(compiler_type, name):
            wrap(name)

    def arm(exc: BaseException, n: int = 1) -> None:
        plan["left"], plan["exc"] = n, exc

    with Context(CACHELEVEL=0):
        yield arm


@pytest.mark.parametrize("exc", [CompileError("injected"), KeyboardInterrupt()], ids=["compile_error", "interrupt"])
def test_retry_after_a_failed_compile_computes(failing_compiles: Any, exc: BaseException) -> None:
    a_n = np.arange(10, dtype=np.float32)
    c = fresh_constant()
    x = (Tensor(a_n) * c + 1.3).sin()
    failing_compiles(exc)
    with pytest.raises(type(exc)):
        x.realize()
    np.testing.assert_allclose(x.numpy(), np.sin(a_n * np.float32(c) + np.float32(1.3)), rtol=1e-6, atol=1e-6)
    # a graph over it computes too
    np.testing.assert_allclose((x * 2).numpy(), 2 * np.sin(a_n * np.float32(c) + np.float32(1.3)), rtol=1e-6, atol=2e-6)


@pytest.mark.parametrize("reader", ["lazy", "realized"])
def test_failed_in_place_write_is_not_applied_twice(failing_compiles: Any, reader: str) -> None:
    """`a += c` whose kernels failed to build: memory untouched, the write still pending, applied once on retry; a
    reader of a's old value (lazy: computed by the same realize, in a schedule before the write's) keeps its value."""
    a_n = np.arange(6, dtype=np.float32)
    a = Tensor(a_n).realize()
    k = fresh_constant()
    old = a * k
    if reader == "realized":
        old.realize()
    c = fresh_constant()
    a += c
    failing_compiles(CompileError("injected"))
    with pytest.raises(CompileError):
        a.realize()
    want = a_n + np.float32(c)
    np.testing.assert_allclose(a.numpy(), want)
    np.testing.assert_allclose(a.numpy(), want)  # applied once, not once per read
    np.testing.assert_allclose(old.numpy(), a_n * np.float32(k), rtol=1e-6)


def test_failed_realize_of_a_graph_seen_before(failing_compiles: Any) -> None:
    """The schedule-cache path (a structure realized before, its kernel rebuilt because a knob changed)."""
    a_n, b_n = np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32)
    c = fresh_constant()
    (Tensor(a_n) * c + Tensor(b_n)).realize()  # the structure's template and plan
    x = Tensor(a_n) * c + Tensor(b_n)
    with Context(NOOPT=1):  # other knobs: the plan is made again, its kernel compiled anew
        failing_compiles(KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            x.realize()
        np.testing.assert_allclose(x.numpy(), a_n * np.float32(c) + 1, rtol=1e-6)
