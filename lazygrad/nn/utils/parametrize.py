"""torch.nn.utils.parametrize: a module's tensor computed from other tensors by a chain of modules on every read.

register_parametrization(m, "weight", P()) moves m.weight to m.parametrizations.weight.original (or original0,
original1, ... where P.right_inverse returns several tensors) and makes `weight` a property of m that applies the
chain; assigning m.weight = x stores right_inverse(x). As torch's, m's class becomes a subclass made for m alone
("ParametrizedLinear"), and the state dict names are torch's (parametrizations.weight.original). `cached()` is
accepted and caches nothing: every read builds the chain's graph again, and the lazy graph computes it once per
realize whatever the reads.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from lazygrad.nn.module import Module, ModuleDict, ModuleList, Parameter, is_parameter
from lazygrad.tensor import Tensor


class ParametrizationList(ModuleList):
    """The chain for one tensor, holding its original(s)."""

    def __init__(self, modules: list[Module], original: Tensor, unsafe: bool = False):
        super().__init__(modules)
        self.unsafe = unsafe
        first = modules[0]
        with Tensor.no_grad():
            new = first.right_inverse(original) if hasattr(first, "right_inverse") else original
        self.is_tensor = isinstance(new, Tensor)
        as_parameter = is_parameter(original)
        news = (new,) if self.is_tensor else tuple(new)
        self.ntensors = len(news)
        for i, t in enumerate(news):
            t = t.detach().contiguous().realize()
            name = "original" if self.is_tensor else f"original{i}"
            object.__setattr__(self, name, Parameter(t) if as_parameter else t)

    def originals(self) -> list[Tensor]:
        return [self.original] if self.is_tensor else [getattr(self, f"original{i}") for i in range(self.ntensors)]

    def _tensors(self, prefix: str = "") -> dict[str, Tensor]:
        out = {("original" if self.is_tensor else f"original{i}"): t for i, t in enumerate(self.originals())}
        out = {f"{prefix}{k}": t for k, t in out.items()}
        out.update(super()._tensors(prefix))
        return out

    def right_inverse(self, value: Tensor) -> None:
        """Store `value` as the chain's input that gives it (each module's right_inverse, last first)."""
        with Tensor.no_grad():
            for module in reversed(list(self)[1:]):
                value = module.right_inverse(value) if hasattr(module, "right_inverse") else value
            first = list(self)[0]
            new = first.right_inverse(value) if hasattr(first, "right_inverse") else value
            for t, n in zip(self.originals(), (new,) if self.is_tensor else tuple(new)):
                t.assign(n.cast(t.dtype)).realize()

    def forward(self) -> Tensor:
        modules = list(self)
        x = modules[0](*self.originals())
        for module in modules[1:]:
            x = module(x)
        return x


def _parametrized_class(module: Module) -> None:
    """Give `module` a class of its own (torch's), where the properties of its parametrized tensors live."""
    if not is_parametrized(module):
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {"_original_class": cls})
        object.__setattr__(module, "parametrizations", ModuleDict())


def register_parametrization(
    module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False
) -> Module:
    """torch's register_parametrization: `tensor_name` read through `parametrization` from now on (appended to the
    chain where the tensor already has one)."""
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    original = getattr(module, tensor_name, None)
    if not isinstance(original, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{tensor_name}'")
    chain = ParametrizationList([parametrization], original, unsafe)
    if not unsafe:
        with Tensor.no_grad():
            out = chain()
        if out.shape != original.shape or out.dtype != original.dtype:
            raise ValueError(
                f"Registering a parametrization may not change the shape or dtype of the tensor: {tensor_name} was "
                f"{original.shape} {original.dtype}, the parametrization gives {out.shape} {out.dtype} (unsafe=True "
                "allows it)"
            )
    _parametrized_class(module)
    if tensor_name in module.__dict__:
        object.__delattr__(module, tensor_name)
    module.parametrizations[tensor_name] = chain
    setattr(
        type(module),
        tensor_name,
        property(
            lambda self: self.parametrizations[tensor_name](),
            lambda self, value: self.parametrizations[tensor_name].right_inverse(value),
        ),
    )
    return module


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    chains = module.__dict__.get("parametrizations")
    if not isinstance(chains, ModuleDict):
        return False
    return bool(chains._dict) if tensor_name is None else tensor_name in chains._dict


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """The tensor a plain parameter (or buffer) again: its current value, or with leave_parametrized=False its
    original (which must be a single tensor)."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    chain = module.parametrizations[tensor_name]
    if leave_parametrized:
        with Tensor.no_grad():
            value = chain()
    elif chain.is_tensor:
        value = chain.original
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is parametrized in "
                         "terms of a sequence of tensors.")  # fmt: skip
    as_parameter = is_parameter(chain.originals()[0])
    delattr(type(module), tensor_name)
    del module.parametrizations._dict[tensor_name]
    if not module.parametrizations._dict:
        object.__delattr__(module, "parametrizations")
        module.__class__ = type(module)._original_class
    value = value.detach().contiguous().realize()
    object.__setattr__(module, tensor_name, Parameter(value) if as_parameter else value)
    return module


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Accepted (see the module's docstring): nothing is cached."""
    yield


def type_before_parametrizations(module: Module) -> Any:
    return type(module)._original_class if is_parametrized(module) else type(module)
