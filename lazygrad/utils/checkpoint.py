"""torch.utils.checkpoint's functions, for programs that call them: the function runs once and its activations are
kept for backward as any other graph's (lazygrad's scheduler decides per kernel what is stored and what recomputed;
there is no separate recomputation pass to ask for)."""

from __future__ import annotations

from typing import Any, Callable, Sequence


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    for key in ("context_fn", "determinism_check", "debug", "preserve_rng_state"):
        kwargs.pop(key, None)
    return function(*args, **kwargs)


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]] | Any,
    segments: int,
    input: Any,
    use_reentrant: bool | None = None,
    **_: Any,
) -> Any:
    """The modules (or a Sequential's children) applied in order to input."""
    layers = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for layer in layers:
        input = layer(input)
    return input
