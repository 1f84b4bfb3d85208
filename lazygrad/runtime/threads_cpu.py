"""CPU thread team: how many threads a kernel's parallel loop gets, decided at each launch.

A THREAD axis renders as an OpenMP loop whose team size comes from `lg_team(threads, ops, bytes)`, a C function of a
small library loaded once per process (RTLD_GLOBAL, so every kernel finds it); ops and bytes are the kernel's estimates
(renderer.estimate_ops / estimate_mem, at the largest size of a symbolic loop). OpenMP ends each parallel loop with a
barrier: when other processes hold the cores, a worker thread waits its turn at the scheduler and the kernel waits
with it. On 2 shared cores beside two busy processes (bench/dispatch.py loaded, best / median ms), the JIT MLP step
took 7.1 / 10.5 with 2 threads, 0.49 / 0.71 with 1, 0.44 / 0.50 with the team chosen here.

The sign of that is the launching thread's own wait for a core: the run delay (second field of
/proc/thread-self/schedstat) grows while it is runnable and not running. Per window of wall time, the load mode:
  - threads, little delay: keep them;
  - threads, delay over BUSY_PERMILLE of the window: busy for a hold (20 ms, doubling on each failed try, at most
    1 s), since with one neighbour the wait vanishes once our own worker thread is gone;
  - busy after the hold: try threads again for one window, unless the lone thread itself kept waiting (two or more
    neighbours), then hold again.
While busy, a kernel gets its threads only if its estimated time on one core, stretched to the share of a core the
launching thread gets (first field: time on a core, over the window), is WAITS_PER_KERNEL times the window's mean
wait for a core (run delay over the times it got one, third field): a worker that starts that late costs a small
kernel more than it saves, while a big one still nearly halves. Beside two busy processes (and 6 more of other
users), a 1024^2 matmul (16 ms on one core) waited ~8 ms a time at a quarter of a core: 2 threads 23-36 ms, 1 thread
30-50. The check costs a clock read per launch and a file read per window. Without /proc the team is always
`threads`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Callable, Iterator

# libgomp's workers spin this many pause instructions for the next parallel loop before they sleep. Its default,
# 300000, is 12 ms here (a pause takes 40 ns on this AMD EPYC under KVM, as on Intel since Skylake): each threaded
# kernel left a worker burning a core for 12 ms, which on a shared machine its own launching thread and the
# neighbours had to wait for. A 1M add end to end (two 4 MB copies in, the kernel, 2 threads) used 2.8-6.3 ms of CPU
# per 0.3-1 ms call, median 1-16 ms under load, 0.5 with 1 thread. 5000 spins (0.2 ms) still carry a worker from
# one kernel of a JIT step to the next (idle, best ms: MLP step 0.043, CNN step 0.80, as with the default); no spin at
# all made each parallel loop wake a sleeping worker (MLP step 0.20-0.27 ms)
GOMP_SPINCOUNT = 5000


@contextlib.contextmanager
def openmp_spin_capped() -> Iterator[None]:
    """GOMP_SPINCOUNT capped while the CPU device starts, unless the user set it or OMP_WAIT_POLICY: libgomp reads it
    once, when it loads (a compiler probe, or load_openmp), and afterwards the environment is as it was, so a child
    process or another library's OpenMP (torch ships its own libgomp) keeps its default."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        yield
        return
    os.environ["GOMP_SPINCOUNT"] = str(GOMP_SPINCOUNT)
    try:
        yield
    finally:
        del os.environ["GOMP_SPINCOUNT"]


def load_openmp() -> None:
    """Load gcc's OpenMP runtime now (kernels with THREAD axes link it by this name and share the loaded copy);
    a runtime by another name (clang's libomp) loads with the first kernel, on its own settings."""
    try:
        ctypes.CDLL("libgomp.so.1", ctypes.RTLD_GLOBAL)
    except OSError:
        pass


TEAM_SRC = r"""
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define WINDOW_NS 10000000LL
#define HOLD_MIN_NS 20000000LL
#define HOLD_MAX_NS 1000000000LL
#define BUSY_PERMILLE 50
/* ops + bytes one core gets through per ns: a 1M add (12 MB) took 0.11 ms, a 1024^2 matmul (2.1 G ops) 16 ms */
#define WORK_PER_NS 128
#define WAITS_PER_KERNEL 4
typedef struct { long long wall, ran, delay, slices, next, hold, wait; int team; } lg_team_state;
/* per launching thread: run delays of different threads do not subtract */
static __thread lg_team_state lg_state;
int lg_team_fixed = 0;          /* > 0: every parallel loop gets this many threads (no adaptation) */
long long lg_team_launches[2];  /* launches on one thread, on several (racy counts, for tests and benches) */

/* the load, given the time and the launching thread's totals: time on a core, wait for one (< 0: unknown), times it
   got one */
void lg_team_step(lg_team_state *s, long long now, long long ran, long long delay, long long slices, int threads) {
  if (s->wall == 0 || delay < 0 || s->delay < 0) {
    s->team = threads, s->wait = 0;
  } else {
    long long window = now - s->wall, waited = delay - s->delay, got = slices - s->slices, run = ran - s->ran;
    int busy = waited * 1000 > window * BUSY_PERMILLE;
    if (s->team > 1 && busy) {
      s->hold = s->hold ? (s->hold * 2 < HOLD_MAX_NS ? s->hold * 2 : HOLD_MAX_NS) : HOLD_MIN_NS;
      s->team = 1;
    } else if (s->team > 1) {
      s->hold = 0;
    } else {
      s->team = busy ? 1 : threads;
    }
    /* the mean wait for a core, times the share of one this thread gets: a kernel of T ns on one core takes T / share
       of wall time, which is what a late worker's wait is weighed against */
    double share = window > 0 && run < window ? (double)run / window : 1.0;
    s->wait = busy ? (long long)((double)waited / (got > 0 ? got : 1) * share) : 0;
  }
  s->wall = now, s->ran = ran, s->delay = delay, s->slices = slices;
  s->next = now + (s->team > 1 ? WINDOW_NS : s->hold);
}

/* the team of one kernel of `ops` operations over `bytes` of memory: every thread on a calm machine; under load
   one, unless the kernel takes WAITS_PER_KERNEL waits for a core on one (WORK_PER_NS: ops + bytes a core gets
   through per ns) */
int lg_team_pick(const lg_team_state *s, int threads, long long ops, long long bytes) {
  if (s->team > 1) return threads;
  return (ops + bytes) / WORK_PER_NS >= WAITS_PER_KERNEL * s->wait ? threads : 1;
}

/* the calling thread's total time on a core and wait for one (ns), and the times it got one; -1 where unknown */
int lg_team_sched(long long *ran, long long *delay, long long *slices) {
  char buf[96];
  int fd = open("/proc/thread-self/schedstat", O_RDONLY);
  if (fd < 0) return -1;
  long n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  long long v[3] = {0, 0, 0};
  char *p = buf;
  for (int i = 0; i < 3; i++) {
    while (*p == ' ') p++;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) v[i] = v[i] * 10 + (*p - '0');
  }
  *ran = v[0], *delay = v[1], *slices = v[2];
  return 0;
}

static int lg_team_size(int threads, long long ops, long long bytes) {
  int team = threads;
  if (lg_team_fixed > 0) {
    team = lg_team_fixed;
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (now >= lg_state.next) {
      long long ran = 0, delay = -1, slices = 0;
      lg_team_sched(&ran, &delay, &slices);
      lg_team_step(&lg_state, now, ran, delay, slices, threads);
    }
    team = lg_team_pick(&lg_state, threads, ops, bytes);
  }
  return team;
}
int lg_team(int threads, long long ops, long long bytes) {
  int team = lg_team_size(threads, ops, bytes);
  lg_team_launches[team > 1]++;
  return team;
}
/* n bytes from src to dst on the team (a tensor's data into or out of host memory): one core's memcpy streams
   ~50 GB/s here, the machine's cores together about twice that. Chunks of whole cache lines; not a counted launch */
#define COPY_CHUNK (256LL << 10)
void lg_copy(char *dst, const char *src, long long n, int threads) {
  long long chunks = (n + COPY_CHUNK - 1) / COPY_CHUNK;
  int team = chunks > 1 ? lg_team_size(threads, 0, 2 * n) : 1;
  if (team <= 1) {
    memcpy(dst, src, n);
    return;
  }
#pragma omp parallel for num_threads(team) schedule(static)
  for (long long c = 0; c < chunks; c++) {
    long long at = c * COPY_CHUNK;
    memcpy(dst + at, src + at, n - at < COPY_CHUNK ? n - at : COPY_CHUNK);
  }
}
"""


class TeamState(ctypes.Structure):
    """lg_team_state, for tests of the policy (lg_team_step) on made-up clocks."""

    _fields_ = [(name, ctypes.c_longlong) for name in ("wall", "ran", "delay", "slices", "next", "hold", "wait")]
    _fields_ += [("team", ctypes.c_int)]


_team: ctypes.CDLL | None = None


def load_team(load: Callable[[str], ctypes.CDLL]) -> ctypes.CDLL:
    """The team library, loaded once per process by `load` (compile TEAM_SRC, load it into the global symbol scope):
    kernels declare `lg_team` weak, so one loaded before it exists runs with all threads, as before."""
    global _team
    if _team is None:
        lib = load(TEAM_SRC)
        i64, state = ctypes.c_longlong, ctypes.POINTER(TeamState)
        lib.lg_team.argtypes, lib.lg_team.restype = [ctypes.c_int, i64, i64], ctypes.c_int
        lib.lg_team_step.argtypes, lib.lg_team_step.restype = [state, i64, i64, i64, i64, ctypes.c_int], None
        lib.lg_team_pick.argtypes, lib.lg_team_pick.restype = [state, ctypes.c_int, i64, i64], ctypes.c_int
        lib.lg_team_sched.argtypes = [ctypes.POINTER(i64)] * 3
        lib.lg_team_sched.restype = ctypes.c_int
        lib.lg_copy.argtypes, lib.lg_copy.restype = [ctypes.c_void_p, ctypes.c_void_p, i64, ctypes.c_int], None
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


def _one_thread_in_forked_child() -> None:
    """A process forked after a kernel ran on several threads runs its own kernels on one. The child inherits
    libgomp's thread pool without its threads, and its first parallel loop on several threads waited for them
    forever: a multiprocessing worker (or a DataLoader's) forked after a matmul hung at its first threaded kernel.
    torch's DataLoader workers run on one thread as well. A parent that never ran a loop on several threads left no
    pool: its children keep their threads."""
    if _team is not None and team_launches()[1] > 0:
        set_fixed_team(1)


os.register_at_fork(after_in_child=_one_thread_in_forked_child)
