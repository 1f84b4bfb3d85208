"""The test processes' crash diagnostic (test/native_stack.py): a fault prints its native and Python stacks."""

import os
import signal
import subprocess
import sys

import pytest

from test import native_stack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fault_in_a_thread(faulthandler_first: bool, cwd: str) -> subprocess.CompletedProcess:
    # (no core file, wherever `ulimit -c` allows one: the fault is the point)
    code = f"""
import ctypes, faulthandler, resource, threading
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
from test import native_stack
if {faulthandler_first}:
    faulthandler.enable()
assert native_stack.install()
if not {faulthandler_first}:
    faulthandler.enable()
t = threading.Thread(target=lambda: ctypes.string_at(0))
t.start()
t.join()
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(native_stack._library() is None, reason="no C compiler to build the handler")
@pytest.mark.parametrize("faulthandler_first", [True, False])
def test_a_fault_prints_the_native_stack_and_the_python_stacks(faulthandler_first: bool, tmp_path) -> None:
    out = _fault_in_a_thread(faulthandler_first, str(tmp_path))
    assert out.returncode == -signal.SIGSEGV, out.stderr[-3000:]
    assert "Native stack of the faulting thread" in out.stderr
    assert "_ctypes" in out.stderr.split("Native stack of the faulting thread")[1]  # the C frames of the faulting call
    assert "Fatal Python error: Segmentation fault" in out.stderr and "in <lambda>" in out.stderr
