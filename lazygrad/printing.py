"""print(tensor): its values as torch prints them (`tensor([1.0000, 2.5000], requires_grad=True)`).

One format for every element (torch's rules): integral floats as `1.`, else four decimals, or scientific notation
where the values span more than 1000x, exceed 1e8 or fall under 1e-4; right-aligned to one width; rows wrapped at 80
characters; above 1000 elements, the first and last three along each dim with `...` between.
"""

from __future__ import annotations

import math
from typing import Any

LINE_WIDTH, SUMMARIZE_OVER, EDGE_ITEMS = 80, 1000, 3


def _element_format(values: list[Any], is_float: bool) -> Any:
    if not is_float:
        return str
    finite = [abs(v) for v in values if math.isfinite(v)]
    nonzero = [v for v in finite if v != 0]
    spread = bool(nonzero) and (max(nonzero) / min(nonzero) > 1000 or max(nonzero) > 1e8)
    if finite and all(v == int(v) for v in finite):
        form = "{:.4e}" if spread else "{:.0f}."
    else:
        form = "{:.4e}" if spread or (nonzero and min(nonzero) < 1e-4) else "{:.4f}"
    return lambda v: form.format(v) if math.isfinite(v) else str(v)


def _flat(nested: Any, depth: int) -> list[Any]:
    if depth == 0 or nested is None:
        return [nested]
    return [x for sub in nested for x in _flat(sub, depth - 1)]


def _summarized(nested: Any, depth: int) -> Any:
    """Each dim cut to its first and last EDGE_ITEMS entries (None stands for the `...` between)."""
    if depth == 0:
        return nested
    items = [_summarized(x, depth - 1) for x in nested]
    return items if len(items) <= 2 * EDGE_ITEMS else [*items[:EDGE_ITEMS], None, *items[-EDGE_ITEMS:]]


def format_values(nested: Any, ndim: int, is_float: bool, is_bool: bool, numel: int) -> str:
    """The body of `tensor(...)` for `nested` (tolist() of a tensor of `ndim` dims)."""
    if numel == 0:
        return "[]"
    if numel > SUMMARIZE_OVER:
        nested = _summarized(nested, ndim)
    fmt = _element_format([v for v in _flat(nested, ndim) if v is not None], is_float)
    shown = [fmt(v) for v in _flat(nested, ndim) if v is not None]
    width = max(map(len, shown))

    def render(x: Any, depth: int, indent: int) -> str:
        if depth == 0:
            return fmt(x).rjust(width)
        if depth == 1:
            cells = [" ..." if v is None else render(v, 0, 0) for v in x]
            per_line = max(1, (LINE_WIDTH - indent) // (width + 2))
            lines = [", ".join(cells[i : i + per_line]) for i in range(0, len(cells), per_line)]
            return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
        gap = ",\n" + "\n" * (depth - 2) + " " * (indent + 1)
        return "[" + gap.join("..." if v is None else render(v, depth - 1, indent + 1) for v in x) + "]"

    if is_bool:
        width = max(width, 5)  # (torch's " True" beside "False")
    return render(nested, ndim, len("tensor("))
