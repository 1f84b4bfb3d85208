"""A layered drawing of a UOp graph for the VIZ page: sources above the nodes that use them, the root at the bottom.

A small Sugiyama-style layout: layer = longest path from a leaf, then a few barycenter sweeps (down over sources,
up over users) order each layer to cut edge crossings, then x positions follow the barycenters without overlapping.
Works on the node table of record.py (`[op, dtype, arg, [source ids]]`), so a saved run lays out the same.
"""

from __future__ import annotations

from typing import Any

MAX_NODES = 1500  # beyond this a drawing is unreadable and slow in the browser: the nodes nearest the root are kept
NODE_H, LAYER_GAP, NODE_GAP, CHAR_W = 34, 40, 14, 7
SWEEPS = 4

# fill colour by op family, so a graph reads at a glance
_COLORS = [
    ({"SINK"}, "#e0e0e0"),
    ({"DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_ACC", "DEFINE_VAR", "BUFFER", "DEVICE"}, "#ffd6a5"),
    ({"LOAD", "STORE", "INDEX", "COPY", "ASSIGN", "AFTER"}, "#ffadad"),
    ({"CONST", "IOTA", "VCONST", "BIND"}, "#e8e8ff"),
    ({"RANGE", "ENDRANGE", "SPECIAL", "IF", "ENDIF", "BARRIER"}, "#caffbf"),
    ({"REDUCE_AXIS", "WMMA"}, "#a0c4ff"),
    ({"VIEW", "VALID", "RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP", "VECTORIZE", "GEP"}, "#fdffb6"),
]
ALU_COLOR = "#f1f1f1"


def color(op: str) -> str:
    return next((c for ops, c in _COLORS if op in ops), ALU_COLOR)


def _short_arg(arg: str) -> str:
    return arg if len(arg) <= 28 else arg[:25] + "..."


def subgraph(nodes: list[list[Any]], root: int, limit: int = MAX_NODES) -> list[int]:
    """The ids reachable from root, nearest first (breadth-first), at most `limit` of them."""
    seen, order = {root}, [root]
    for nid in order:
        if len(order) >= limit:
            break
        for s in nodes[nid][3]:
            if s not in seen:
                seen.add(s)
                order.append(s)
    return order[:limit]


def layout(nodes: list[list[Any]], root: int, limit: int = MAX_NODES) -> dict[str, Any]:
    """Positions of the nodes and edges of the graph under `root`, as the page draws it (SVG user units)."""
    ids = subgraph(nodes, root, limit)
    keep = set(ids)
    srcs = {n: [s for s in nodes[n][3] if s in keep] for n in ids}
    users: dict[int, list[int]] = {n: [] for n in ids}
    for n in ids:
        for s in srcs[n]:
            users[s].append(n)
    # longest path from a leaf, computed leaves first (reverse breadth-first order is not enough for DAGs)
    layer: dict[int, int] = {}
    for n in _sources_first(ids, srcs):
        layer[n] = 1 + max((layer[s] for s in srcs[n]), default=-1)
    for n in ids:  # a leaf sits just above its nearest user, not in one crowded top row
        if not srcs[n] and users[n]:
            layer[n] = min(layer[u] for u in users[n]) - 1
    depth = max(layer.values(), default=0) + 1
    layers: list[list[int]] = [[] for _ in range(depth)]  # leaves moved down never leave a row empty
    for n in _sources_first(ids, srcs):
        layers[layer[n]].append(n)

    labels = {n: _label(nodes[n]) for n in ids}
    width = {n: max(len(line) for line in labels[n]) * CHAR_W + 16 for n in ids}
    x: dict[int, float] = {}
    for row in layers:
        _place(row, {n: 0.0 for n in row}, width, x)
    for _ in range(SWEEPS):
        for row in layers[1:]:  # down: each node under the mean of its sources
            _place(row, _barycenters(row, srcs, x), width, x)
        for row in reversed(layers[:-1]):  # up: each node over the mean of its users
            _place(row, _barycenters(row, users, x), width, x)

    left = min((x[n] - width[n] / 2 for n in ids), default=0.0)
    out_nodes, pos = [], {}
    for li, row in enumerate(layers):
        y = li * (NODE_H + LAYER_GAP)
        for n in row:
            op, dtype, arg, _ = nodes[n]
            nx = x[n] - width[n] / 2 - left
            pos[n] = (nx, y)
            out_nodes.append(
                {"id": n, "x": round(nx, 1), "y": y, "w": width[n], "h": NODE_H, "op": op, "dtype": dtype}
                | {"arg": arg, "label": labels[n], "color": color(op), "srcs": nodes[n][3]}
            )
    edges = []
    for n in ids:
        k = len(srcs[n])
        for i, s in enumerate(srcs[n]):
            (sx, sy), (dx, dy) = pos[s], pos[n]
            x1, y1 = sx + width[s] / 2, sy + NODE_H
            x2, y2 = dx + width[n] * (i + 1) / (k + 1), dy  # one entry point per source, in source order
            bend = max(LAYER_GAP / 2, (y2 - y1) / 3)
            d = f"M{x1:.1f},{y1} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2}"
            edges.append({"from": s, "to": n, "d": d})
    total_w = max((p[0] + width[n] for n, p in pos.items()), default=0)
    return {
        "root": root,
        "nodes": out_nodes,
        "edges": edges,
        "width": round(total_w, 1),
        "height": depth * (NODE_H + LAYER_GAP) - LAYER_GAP,
        "truncated": len(subgraph(nodes, root, limit + 1)) > limit,
    }


def _label(row: list[Any]) -> list[str]:
    op, dtype, arg, _ = row
    return [op if not arg else f"{op} {_short_arg(arg)}", dtype]


def _sources_first(ids: list[int], srcs: dict[int, list[int]]) -> list[int]:
    order: dict[int, None] = {}
    for start in reversed(ids):  # leaves of the breadth-first order first keeps the layout stable
        stack = [(start, False)]
        while stack:
            n, expanded = stack.pop()
            if n in order:
                continue
            if expanded:
                order[n] = None
            else:
                stack.append((n, True))
                stack.extend((s, False) for s in srcs[n] if s not in order)
    return list(order)


def _barycenters(row: list[int], adj: dict[int, list[int]], x: dict[int, float]) -> dict[int, float]:
    return {n: sum(x[m] for m in adj[n]) / len(adj[n]) if adj[n] else x[n] for n in row}


def _place(row: list[int], want: dict[int, float], width: dict[int, int], x: dict[int, float]) -> None:
    """Order the row by wanted x, then put each node as near its wish as the one left of it allows; the row is then
    shifted so that it sits, on average, where its nodes wanted to be."""
    row.sort(key=lambda n: want[n])
    edge = float("-inf")
    for n in row:
        x[n] = max(want[n], edge + width[n] / 2)
        edge = x[n] + width[n] / 2 + NODE_GAP
    shift = sum(want[n] - x[n] for n in row) / len(row) if row else 0.0
    for n in row:
        x[n] += shift
