"""Linearization: a lowered kernel graph becomes the ordered list of UOps a renderer prints top to bottom.

A topological order in which every node comes as early as its sources allow, and loops open as late as possible:
RANGEs have the lowest priority (output loops before reduce loops), so whatever does not depend on a loop is
emitted before it opens, which hoists loop-invariant work. ENDRANGE depends on everything inside its loop, so
a loop closes only after its body; nodes that read an accumulator after the loop hang off that ENDRANGE.
"""

from __future__ import annotations

import heapq

from lazygrad.uop.ops import Ops, UOp

# loop kinds from outermost to innermost: CPU-thread loops over outputs, output loops, a reduce split across
# CPU threads, then reduce loops. A blocked reduce's loops ("rb": the outer part of a loop cut in two) rank with the
# reduce loops by axis, the outer part before the inner part of the same axis: that is their nesting (the reduce
# loops of lower axes are block loops outside the cut one). Ranked "rb" before every "r", a lower axis's block loop
# opened inside the cut loop's outer part, and each closed in the other's place (the IR check refused the kernel)
RANGE_ORDER = {"t": 0, "g": 1, "tr": 2, "rb": 3, "r": 3}


def linearize(sink: UOp) -> list[UOp]:
    nodes = list(sink.toposort)
    position = {n: i for i, n in enumerate(nodes)}
    consumers: dict[UOp, list[UOp]] = {n: [] for n in nodes}
    waiting: dict[UOp, int] = {}
    for n in nodes:
        srcs = set(n.src)
        waiting[n] = len(srcs)
        for s in srcs:
            consumers[s].append(n)

    def priority(n: UOp) -> tuple[int, ...]:
        if n.op is Ops.RANGE:
            axis, kind = n.arg
            return (1, RANGE_ORDER.get(kind, len(RANGE_ORDER)), axis, kind != "rb", position[n])
        return (0, position[n])

    ready = [(priority(n), position[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    out: list[UOp] = []
    while ready:
        _, _, n = heapq.heappop(ready)
        out.append(n)
        for c in consumers[n]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (priority(c), position[c], c))
    assert len(out) == len(nodes), "kernel graph has a cycle"
    return out
