"""torch.func.functional_call (torch.nn.utils.stateless.functional_call): a module called with some of its parameters
and buffers replaced by the given tensors, put back afterwards (also when the call raises)."""

from __future__ import annotations

from typing import Any

from lazygrad.nn.module import Module
from lazygrad.tensor import Tensor


def _owner(module: Module, dotted: str) -> tuple[Any, str]:
    *path, name = dotted.split(".")
    owner: Any = module
    for part in path:
        owner = owner[int(part)] if part.isdigit() and not hasattr(owner, part) else getattr(owner, part)
    return owner, name


def functional_call(
    module: Module,
    parameter_and_buffer_dicts: dict[str, Tensor] | tuple[dict[str, Tensor], ...],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """module(*args, **kwargs) with the tensors named in the dict(s) (torch's dotted state dict names) in place of
    the module's own."""
    dicts = (
        parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, tuple) else (parameter_and_buffer_dicts,)
    )
    given: dict[str, Tensor] = {}
    for d in dicts:
        if clash := set(given) & set(d):
            raise ValueError(f"{sorted(clash)} appeared in multiple dictionaries")
        given.update(d)
    own = module.state_dict()
    if unknown := [k for k in given if k not in own]:
        raise RuntimeError(f"Unexpected key(s): {', '.join(map(repr, unknown))}.")
    if strict and (missing := [k for k in own if k not in given]):
        raise RuntimeError(f"Missing key(s): {', '.join(map(repr, missing))}.")
    saved = []
    try:
        for name, value in given.items():
            owner, attr = _owner(module, name)
            saved.append((owner, attr, owner.__dict__[attr]))
            object.__setattr__(owner, attr, value)
        args = () if args is None else args if isinstance(args, tuple) else (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for owner, attr, value in reversed(saved):
            object.__setattr__(owner, attr, value)
