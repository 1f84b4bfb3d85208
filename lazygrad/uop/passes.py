"""Named compiler passes: what each one needs to have run before it, and the verifier between them.

A pass turns one IR value into the next (a tensor graph into kernel ASTs, an AST into a lowered graph, that into
linear UOps, those into source). How a pass treats each op is a rule list where the op decides (KERNEL_OP in the
scheduler, LOWER_OP in the lowerer, C_RENDER and C_ALU in the renderer, the symbolic simplifier's graph_rewrite);
the pass itself has a name, the passes that must have run before it on the same value (`after`), and optionally the
verifier of its output (`verify(out, pass_name)`, uop/spec.py), run when SPEC is on.

Passes are registered once, at import, predecessors first: an `after` naming a pass not registered yet is an error
then, so the declared order has no cycles and no typos. A `PassRun` runs passes on one value and refuses a pass
whose predecessors have not run on it (PassOrderError); with PROFILE or VIZ on, each pass is a span of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from lazygrad.helpers import SPEC
from lazygrad.viz import profile


class PassOrderError(RuntimeError):
    """A pass ran before a pass it needs: a bug in the pipeline that calls them, not in the user's program."""


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Any, Any], Any]  # (value, ctx) -> the next value
    after: tuple[str, ...] = ()
    verify: Callable[[Any, str], None] | None = None
    category: str = "pass"  # the PROFILE span's category ("schedule pass", "codegen")


PASSES: dict[str, Pass] = {}


def register(p: Pass) -> Pass:
    if p.name in PASSES:
        raise ValueError(f"pass {p.name!r} is registered twice")
    if unknown := [a for a in p.after if a not in PASSES]:
        raise ValueError(f"pass {p.name!r} runs after {unknown}, which are not registered (before it)")
    PASSES[p.name] = p
    return p


def step(name: str, after: tuple[str, ...] = (), verify: Callable | None = None, category: str = "pass") -> Callable:
    """Decorator: register `fn(value, ctx)` as a pass named `name`."""

    def deco(fn: Callable[[Any, Any], Any]) -> Pass:
        return register(Pass(name, fn, after, verify, category))

    return deco


class PassRun:
    """The passes run so far on one value, in order."""

    def __init__(self, done: tuple[str, ...] = ()):
        self.done: list[str] = list(done)

    def __call__(self, p: Pass, x: Any, ctx: Any = None) -> Any:
        if missing := [a for a in p.after if a not in self.done]:
            ran = ", ".join(self.done) or "nothing"
            raise PassOrderError(f"pass {p.name!r} needs {', '.join(missing)} to run first (ran: {ran})")
        if profile.enabled():
            with profile.span(p.name, p.category):
                out = p.run(x, ctx)
        else:
            out = p.run(x, ctx)
        if SPEC and p.verify is not None:
            p.verify(out, p.name)
        self.done.append(p.name)
        return out
