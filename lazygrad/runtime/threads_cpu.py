"""CPU thread team: how many threads a kernel's parallel loop gets, decided at each launch.

A THREAD axis renders as an OpenMP loop whose team size comes from `lg_team(threads)`, a C function of a small library
loaded once per process (RTLD_GLOBAL, so every kernel finds it). OpenMP ends each parallel loop with a barrier: when
other processes hold the cores, a worker thread waits its turn at the scheduler (milliseconds) and the kernel waits
with it. On 2 shared cores beside two busy processes (bench/dispatch.py loaded, best / median ms), the JIT MLP step
took 7.1 / 10.5 with 2 threads, 0.49 / 0.71 with 1, 0.44 / 0.50 with the team chosen here.

The sign of that is the launching thread's own wait for a core: the kernel's run delay (second field of
/proc/thread-self/schedstat) grows while it is runnable and not running. Per window of wall time:
  - threads, little delay: keep them;
  - threads, delay over BUSY_PERMILLE of the window: one thread for a hold (20 ms, doubling on each failed try, at
    most 1 s), since with one neighbour the wait vanishes once our own worker thread is gone;
  - one thread after the hold: try threads again for one window, unless the lone thread itself kept waiting (two or
    more neighbours), then hold again.
The check costs a clock read per launch and a file read per window. Without /proc the team is always `threads`.
"""

from __future__ import annotations

import ctypes
from typing import Callable

TEAM_SRC = r"""
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#define WINDOW_NS 10000000LL
#define HOLD_MIN_NS 20000000LL
#define HOLD_MAX_NS 1000000000LL
#define BUSY_PERMILLE 50
typedef struct { long long wall, delay, next, hold; int team; } lg_team_state;
/* per launching thread: run delays of different threads do not subtract */
static __thread lg_team_state lg_state;
int lg_team_fixed = 0;          /* > 0: every parallel loop gets this many threads (no adaptation) */
long long lg_team_launches[2];  /* launches on one thread, on several (racy counts, for tests and benches) */

/* the policy, given the time and the launching thread's total run delay (< 0: unknown) */
int lg_team_step(lg_team_state *s, long long now, long long delay, int threads) {
  if (s->wall == 0 || delay < 0 || s->delay < 0) {
    s->team = threads;
  } else {
    long long window = now - s->wall, waited = delay - s->delay;
    int busy = waited * 1000 > window * BUSY_PERMILLE;
    if (s->team > 1 && busy) {
      s->hold = s->hold ? (s->hold * 2 < HOLD_MAX_NS ? s->hold * 2 : HOLD_MAX_NS) : HOLD_MIN_NS;
      s->team = 1;
    } else if (s->team > 1) {
      s->hold = 0;
    } else {
      s->team = busy ? 1 : threads;
    }
  }
  s->wall = now, s->delay = delay;
  s->next = now + (s->team > 1 ? WINDOW_NS : s->hold);
  return s->team;
}

/* the calling thread's total wait for a core, ns (< 0: unknown) */
long long lg_team_run_delay(void) {
  char buf[96];
  int fd = open("/proc/thread-self/schedstat", O_RDONLY);
  if (fd < 0) return -1;
  long n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = buf;
  while (*p && *p != ' ') p++;
  long long v = 0;
  for (p++; *p >= '0' && *p <= '9'; p++) v = v * 10 + (*p - '0');
  return v;
}

int lg_team(int threads) {
  int team = threads;
  if (lg_team_fixed > 0) {
    team = lg_team_fixed;
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    team = now >= lg_state.next ? lg_team_step(&lg_state, now, lg_team_run_delay(), threads) : lg_state.team;
  }
  lg_team_launches[team > 1]++;
  return team;
}
"""


class TeamState(ctypes.Structure):
    """lg_team_state, for tests of the policy (lg_team_step) on made-up clocks."""

    _fields_ = [(name, ctypes.c_longlong) for name in ("wall", "delay", "next", "hold")] + [("team", ctypes.c_int)]


_team: ctypes.CDLL | None = None


def load_team(load: Callable[[str], ctypes.CDLL]) -> ctypes.CDLL:
    """The team library, loaded once per process by `load` (compile TEAM_SRC, load it into the global symbol scope):
    kernels declare `lg_team` weak, so one loaded before it exists runs with all threads, as before."""
    global _team
    if _team is None:
        lib = load(TEAM_SRC)
        lib.lg_team.argtypes, lib.lg_team.restype = [ctypes.c_int], ctypes.c_int
        step = lib.lg_team_step
        step.argtypes = [ctypes.POINTER(TeamState), ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int]
        step.restype = ctypes.c_int
        lib.lg_team_run_delay.restype = ctypes.c_longlong
        _team = lib
    return _team


def team_launches() -> tuple[int, int]:
    """Parallel loops launched so far in this process: (on one thread, on several)."""
    if _team is None:
        return 0, 0
    counts = (ctypes.c_longlong * 2).in_dll(_team, "lg_team_launches")
    return counts[0], counts[1]


def set_fixed_team(threads: int) -> None:
    """Every parallel loop gets `threads` threads (0: adapt to the machine's load again)."""
    if _team is not None:
        ctypes.c_int.in_dll(_team, "lg_team_fixed").value = threads
