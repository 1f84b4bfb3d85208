import os

import pytest

from test import native_stack

# every kernel the tests build is checked against the IR rules (lazygrad/uop/spec.py) between codegen passes
os.environ.setdefault("SPEC", "1")

# PoCL (the CL tests' driver) keeps built kernels in an on-disk cache that it does not guard against two processes
# building the same kernel at once: the loser reads a half-written entry and the driver aborts the process (an
# assertion in pocl_binary.c, or "Final linking of kernel ... failed"). The suite's workers build the same small
# kernels at the same moment, so each worker gets its own cache directory (kept between runs: warm on the next one).
if (worker := os.environ.get("PYTEST_XDIST_WORKER")) and "POCL_CACHE_DIR" not in os.environ:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ["POCL_CACHE_DIR"] = os.path.join(cache, "pocl", f"kcache-{worker}")


def pytest_configure(config: pytest.Config) -> None:
    # a test process that faults prints the faulting thread's native stack beside faulthandler's Python stacks (a rare
    # worker segfault has so far shown only Python lines); NATIVE_STACK=0 leaves the handler out. Here, where fd 2 is
    # the real stderr (pytest captures it while conftest files load and while tests run), as pytest's faulthandler
    if os.environ.get("NATIVE_STACK", "1") != "0":
        native_stack.install(os.dup(2))


@pytest.fixture
def default_device_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors made without a device go to CPU whatever DEV says: for tests of the CPU device's own machinery
    (its compiler, graph driver, panels, file mappings), which test/run_on_gpu.sh also runs with DEV=CUDA."""
    from lazygrad import Device

    monkeypatch.setattr(Device, "DEFAULT", "CPU")
