"""print(tensor): its values as torch prints them (`tensor([1.0000, 2.5000], requires_grad=True)`).

One format for every element (torch's rules): integral floats as `1.`, else four decimals, or scientific notation
where the values span more than 1000x, exceed 1e8 or fall under 1e-4; right-aligned to one width, a float's taken from
its nonzero finite values only (`tensor([1., -inf])`, `tensor([-0., 0.])`); rows wrapped at 80 characters; above 1000
elements, the first and last three along each dim with `...` between. An empty tensor shows its size unless (0,); the
suffixes (device, size, dtype, requires_grad) go on a line of their own where they would pass 80 characters.
"""

from __future__ import annotations

import math
from typing import Any

LINE_WIDTH, SUMMARIZE_OVER, EDGE_ITEMS = 80, 1000, 3


def _element_format(values: list[Any], is_float: bool) -> tuple[Any, int]:
    """The format of each element and the width all are padded to."""
    if not is_float:
        return str, max([1, *map(len, map(str, values))])
    finite = [abs(v) for v in values if math.isfinite(v)]
    nonzero = [v for v in finite if v != 0]
    spread = bool(nonzero) and (max(nonzero) / min(nonzero) > 1000 or max(nonzero) > 1e8)
    if finite and all(v == int(v) for v in finite):
        form = "{:.4e}" if spread else "{:.0f}."
    else:
        form = "{:.4e}" if spread or (nonzero and min(nonzero) < 1e-4) else "{:.4f}"
    width = max([1, *(len(form.format(v)) for v in values if math.isfinite(v) and v != 0)])
    return (lambda v: form.format(v) if math.isfinite(v) else str(v)), width


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


def format_values(nested: Any, ndim: int, is_float: bool, numel: int) -> str:
    """The body of `tensor(...)` for `nested` (tolist() of a tensor of `ndim` dims)."""
    if numel == 0:
        return "[]"
    if numel > SUMMARIZE_OVER:
        nested = _summarized(nested, ndim)
    fmt, width = _element_format([v for v in _flat(nested, ndim) if v is not None], is_float)

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

    return render(nested, ndim, len(_PREFIX))


_PREFIX = "tensor("


def tensor_str(body: str, suffixes: list[str]) -> str:
    """`tensor(body, suffix, ...)`, a suffix that would pass the line width on a line of its own (torch's)."""
    out = _PREFIX + body
    line = len(out) - out.rfind("\n") + 1  # (torch's count: 2 over the last line's length)
    for suffix in suffixes:
        if line + len(suffix) + 2 > LINE_WIDTH:
            out += ",\n" + " " * len(_PREFIX) + suffix
            line = len(_PREFIX) + len(suffix)
        else:
            out += ", " + suffix
            line += len(suffix) + 2
    return out + ")"
