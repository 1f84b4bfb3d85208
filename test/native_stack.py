"""A crash diagnostic for the test processes: on SIGSEGV / SIGBUS / SIGILL / SIGFPE, the faulting thread's native stack
(shared object + offset per frame) is written to stderr beside faulthandler's Python stacks.

A rare segfault of a test worker (test_threads.py's random draws in 4 threads) has shown only Python stacks:
faulthandler names the Python line, never the C function that faulted, and no core file is written where `ulimit -c`
is 0. The handler is C (a small library built once per machine with the system compiler), chained: it prints, puts
back the handler that was there before (faulthandler's, or the default), and returns, so the faulting instruction runs
again and that handler takes it (the Python stacks, then the process ends as before). Resolve a frame with
`addr2line -f -e LIBRARY OFFSET` (or `gdb LIBRARY -batch -ex 'info symbol OFFSET'`). NATIVE_STACK=0 leaves it out."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

HANDLER_SRC = r"""
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static struct sigaction previous[65];
static int out_fd = 2;

static void on_fault(int sig, siginfo_t *info, void *ctx) {
  static const char head[] = "\nNative stack of the faulting thread (most recent call first):\n";
  void *frames[128];
  int n = backtrace(frames, 128);
  (void)info, (void)ctx;
  if (write(out_fd, head, sizeof(head) - 1) >= 0) backtrace_symbols_fd(frames, n, out_fd);
  /* the handler before this one takes the fault when the instruction runs again */
  sigaction(sig, &previous[sig], NULL);
}

int lg_native_stack_install(int fd) {
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
  void *warm[2];
  struct sigaction sa;
  /* the unwinder is loaded now, not first inside a handler running over a heap that may be corrupt */
  backtrace(warm, 2);
  out_fd = fd;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (unsigned i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    if (sigaction(sigs[i], &sa, &previous[sigs[i]]) != 0) return -1;
  return 0;
}
"""


def _library() -> str | None:
    """The handler's shared object, built on first use (None without a C compiler or where it does not build)."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")
    if cc is None:
        return None
    key = hashlib.sha256(f"{cc}\n{HANDLER_SRC}".encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"lazygrad_native_stack_{os.getuid()}_{key}.so")
    if os.path.exists(path):
        return path
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        cmd = [cc, "-shared", "-fPIC", "-O1", "-x", "c", "-", "-o", tmp]
        if subprocess.run(cmd, input=HANDLER_SRC.encode(), capture_output=True, timeout=120).returncode != 0:
            return None
        os.replace(tmp, path)  # (atomic: test workers building it at once each install a whole file)
        return path
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def install(fd: int = 2) -> bool:
    """Install the handler in this process, writing to file descriptor `fd` (pytest captures fd 2 during a test: its
    own faulthandler writes to a copy of the real one); False where it could not be built or installed."""
    path = _library()
    if path is None:
        return False
    try:
        return ctypes.CDLL(path).lg_native_stack_install(fd) == 0
    except OSError:
        return False
