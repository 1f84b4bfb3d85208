"""A manual hunt for the rare segfault of test_threads.py's random draws (not collected by pytest: its name is no
test_*.py). Threads each build and realize many random tensors, then drop them all at once, so that big graphs are torn
down in several threads together: the hash-cons cache's weakref callbacks and Buffer finalizers run in every thread,
switching every microsecond. A crash prints the faulting thread's native stack (native_stack.py) and faulthandler's
Python stacks; a run that ends checks the hash-cons cache (no entry of a dead node left, none keyed apart from its
node) and prints "ok ..." (exit status 3: the cache check failed).

    PYTHONPATH=. python3 test/stress_teardown.py [rounds=20] [threads=4] [tensors=150] [mode=plain]

mode: plain (a barrier before the drop) | test (no barrier: as the test's draw, a thread tears down while others still
draw and read) | gc (another thread calling gc.collect in a loop; slow) | lazy (a third of the tensors realized).
Environment: GC_THRESHOLD=a,b,c (gc.set_threshold: collections inside the teardown chains), BALLAST=n (n * 100 live
objects: a big heap, as in a test worker), ALLOC_CACHE_MB=0 (no allocator cache: every free reaches libc). For more
sensitivity: PYTHONMALLOC=debug, and glibc's checks (LD_PRELOAD=libc_malloc_debug.so.0
GLIBC_TUNABLES=glibc.malloc.check=3:glibc.malloc.perturb=165)."""

import gc
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import native_stack  # noqa: E402

native_stack.install()
import faulthandler  # noqa: E402

faulthandler.enable()

from lazygrad import Tensor  # noqa: E402


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 150
    mode = sys.argv[4] if len(sys.argv) > 4 else "plain"
    stop = threading.Event()
    if os.environ.get("GC_THRESHOLD"):  # a collection every few allocations: collections inside teardown chains
        gc.set_threshold(*map(int, os.environ["GC_THRESHOLD"].split(",")))
    ballast = [[object() for _ in range(100)] for _ in range(int(os.environ.get("BALLAST", "0")))]  # a big heap
    if mode == "gc":

        def collect() -> None:
            while not stop.is_set():
                gc.collect()
                time.sleep(0.001)

        threading.Thread(target=collect, daemon=True).start()
    sys.setswitchinterval(1e-6)
    start = time.time()
    for r in range(rounds):
        barrier = threading.Barrier(n)

        def work(tid: int) -> None:
            tensors = [Tensor.rand(8) for _ in range(count)]
            for i, t in enumerate(tensors):
                if i % 3 == 0 or mode != "lazy":
                    t.tolist()
            if mode != "test":  # "test": as test_threads.py's draw, where a thread may tear down while others draw
                barrier.wait()
            del tensors  # every thread tears its graphs down at once

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stop.set()
    del ballast
    gc.collect()
    # the hash-cons cache after it all: no entry of a dead node left behind, none keyed apart from its node
    from lazygrad.uop.ops import UOpMetaClass

    dead = wrong = 0
    for key, ref in list(UOpMetaClass.ucache.items()):
        node = ref()
        if node is None:
            dead += 1
        elif key[0] is not node.op or key[1] != node.dtype.key or key[2] is not node.src or key[3] is not node.arg:
            wrong += 1
    if dead or wrong:
        print(f"CACHE {dead} dead entries, {wrong} entries keyed apart from their node", flush=True)
        sys.exit(3)
    print(f"ok {rounds} rounds x {n} threads x {count} tensors in {time.time() - start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
