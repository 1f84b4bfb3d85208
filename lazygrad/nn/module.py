"""torch.nn's Module API: `nn.Module` with `forward`, parameters, state dicts, train/eval, device moves and hooks;
the containers (`Sequential`, `ModuleList`, `ModuleDict`); and the layers torch programs build from (activations,
dropout, pools, paddings, losses, ...), each a thin module over `lazygrad.nn.functional`.

Design:
- A module's parameters, buffers and children are found through its attributes, as `nn.state.get_state_dict` finds
  them (lists, tuples and dicts included), so the layers of `lazygrad.nn` (plain classes in tinygrad's style, which
  are Modules too) and any object holding tensors work inside a Module. Names follow torch's ("0.weight" in a
  Sequential, "layers.2.bias" in a list). A parameter is a tensor whose requires_grad is True (`nn.Parameter`, the
  layers' weights); any other tensor attribute is a buffer and goes into the state dict, except those registered
  with `register_buffer(..., persistent=False)`.
- Training mode: torch's modules start in training mode; tinygrad's layers follow the global `Tensor.training`. A
  module made by a `Module` subclass's `__init__` (which calls `super().__init__()`) starts with training=True, and a
  layer assigned to a module in a mode takes that mode (torch's behaviour inside a torch-style model); a layer made
  on its own has training=None and follows `Tensor.training` (tinygrad's behaviour). `train()` / `eval()` set every
  module below, layers in lists included.
- `nn.Parameter(t)` is a tensor with requires_grad=True in a buffer of its own (see nn._own_buffer: two equal lazy
  values would otherwise share one buffer, and an optimizer would update it twice); `isinstance(p, nn.Parameter)` is
  true for any tensor that requires grad.
"""

from __future__ import annotations

import collections
import functools
import inspect
import weakref
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from lazygrad.dtype import dtypes
from lazygrad.helpers import make_tuple
from lazygrad.nn import functional as F
from lazygrad.nn.state import get_state_dict
from lazygrad.tensor import Tensor, to_arguments

# every tensor made a parameter (a layer's weight, nn.Parameter), by id: Module.parameters() lists them even while
# frozen (requires_grad False), as torch does; weak values, so a parameter its model dropped goes (and no Tensor
# __eq__, which is elementwise, is ever called by a lookup)
_PARAMETERS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


def is_parameter(t: Tensor) -> bool:
    return t.requires_grad is True or _PARAMETERS.get(id(t)) is t


class _ParameterType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and is_parameter(obj)


class Parameter(metaclass=_ParameterType):
    """torch's nn.Parameter: `data` (a tensor, or an empty one) with requires_grad set, in a buffer of its own (a
    parameter whatever its requires_grad, as torch's)."""

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Tensor:  # type: ignore[misc]
        from lazygrad.nn import _own_buffer

        if data is None:
            data = Tensor.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter needs a Tensor, got {type(data).__name__}")
        t = _own_buffer(data.detach(), requires_grad=requires_grad)
        _PARAMETERS[id(t)] = t
        return t


class _IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


def _module_items(obj: Any, prefix: str) -> Iterator[tuple[str, Module]]:
    """The modules directly below obj's attributes: in lists, tuples and dicts too (not inside other modules)."""
    if isinstance(obj, Module):
        yield prefix, obj
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from _module_items(x, f"{prefix}.{i}")
    elif isinstance(obj, dict):
        for k, x in obj.items():
            yield from _module_items(x, f"{prefix}.{k}")


def _collect(value: Any, name: str, out: dict[str, Tensor]) -> None:
    if isinstance(value, Tensor):
        # not a tensor computed from parameters (an activation or log-probability a module keeps, weight norm's
        # weight): neither a parameter nor state, as torch registers only parameters and buffers
        if value._requires_grad is not None or not value.requires_grad:
            out[name] = value
    elif isinstance(value, Module):
        out.update(value._tensors(f"{name}."))
    elif isinstance(value, (list, tuple)):
        for i, x in enumerate(value):
            _collect(x, f"{name}.{i}", out)
    elif isinstance(value, dict):
        for k, x in value.items():
            _collect(x, f"{name}.{k}", out)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        out.update(get_state_dict(value, f"{name}."))  # a plain object holding tensors, as nn.state walks it


def _take_factory_kwargs(cls: type) -> None:
    """torch's layers take device= and dtype= (where their tensors are made): a layer of lazygrad.nn whose constructor
    does not name them gets them, applied by moving and casting its tensors once it is made."""
    init = cls.__dict__.get("__init__")
    if init is None or not cls.__module__.startswith("lazygrad.nn") or getattr(init, "_factory_kwargs", False):
        return
    names = inspect.signature(init).parameters
    if "device" in names or "dtype" in names:
        return
    kinds = [p.kind for p in names.values()]
    # torch's device and dtype come after the last positional argument (nn.Linear(4, 2, True, "cpu", torch.float64))
    fixed = inspect.Parameter.VAR_POSITIONAL not in kinds
    positional = kinds.count(inspect.Parameter.POSITIONAL_OR_KEYWORD) if fixed else -1

    @functools.wraps(init)
    def __init__(self: Module, *args: Any, device: Any = None, dtype: Any = None, **kwargs: Any) -> None:
        if 0 < positional < len(args) + 1 <= positional + 2:
            args, extra = args[: positional - 1], args[positional - 1 :]
            device, dtype = (*extra, dtype) if len(extra) == 1 else extra
        init(self, *args, **kwargs)
        if device is not None or dtype is not None:  # (a subclass's wrapper may apply it again: a no-op)
            self.to(*(a for a in (device, dtype) if a is not None))

    __init__._factory_kwargs = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]


def _hook_calls(cls: type) -> None:
    """Wrap the __call__ a tinygrad-style layer class defines (itself or by inheritance) so that calls run their
    instance's hooks. Only the most derived class's wrapper runs them: a subclass's __call__ that calls
    super().__call__ runs them once."""
    call = cls.__call__
    if call is Module.__call__ or getattr(call, "_runs_hooks", False):
        return

    def __call__(self: Module, *args: Any, **kwargs: Any) -> Any:
        hooked = self.__dict__.get("_forward_hooks") or self.__dict__.get("_forward_pre_hooks")
        if not hooked or type(self).__call__ is not wrapper:
            return call(self, *args, **kwargs)
        return self._call_with_hooks(functools.partial(call, self), args, kwargs)

    wrapper = functools.wraps(call)(__call__)
    wrapper._runs_hooks = True  # type: ignore[attr-defined]
    cls.__call__ = wrapper  # type: ignore[method-assign]


class Module:
    # None: not set by train()/eval() nor by a parent: a tinygrad-style layer that follows Tensor.training
    training: bool | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"Module.__init__() takes no arguments, got {args} {kwargs}")
        object.__setattr__(self, "training", True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # a tinygrad-style layer defines __call__: that is also its forward. Hooks need a wrapper around it, which is
        # put on the class when the first hook is registered on one of its instances (_hook_calls): until then a
        # layer's call costs nothing more than it did before layers were Modules (the eager step calls them)
        super().__init_subclass__(**kwargs)
        _take_factory_kwargs(cls)
        call = cls.__dict__.get("__call__")
        if call is not None and "forward" not in cls.__dict__:
            cls.forward = call
        elif call is None and "forward" in cls.__dict__ and cls.__call__ is not Module.__call__:
            # a torch-style subclass of a tinygrad-style layer (class Layer(nn.Linear) with a forward of its own):
            # calling it runs its forward, as in torch, not the layer's __call__
            cls.__call__ = Module.__call__  # type: ignore[method-assign]

    # *** calling ***

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call_with_hooks(self.forward, args, kwargs)

    def _call_with_hooks(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        hooks = self.__dict__.get("_forward_pre_hooks")
        if hooks:
            for hook in list(hooks.values()):
                if (changed := hook(self, args)) is not None:
                    args = changed if isinstance(changed, tuple) else (changed,)
        out = fn(*args, **kwargs)
        hooks = self.__dict__.get("_forward_hooks")
        if hooks:
            for hook in list(hooks.values()):
                if (changed := hook(self, args, out)) is not None:
                    out = changed
        return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def register_forward_hook(self, hook: Callable) -> _RemovableHandle:
        """hook(module, args, output) after forward; a result other than None replaces the output."""
        _hook_calls(type(self))
        return _RemovableHandle(self.__dict__.setdefault("_forward_hooks", {}), hook)

    def register_forward_pre_hook(self, hook: Callable) -> _RemovableHandle:
        """hook(module, args) before forward; a result other than None replaces the arguments."""
        _hook_calls(type(self))
        return _RemovableHandle(self.__dict__.setdefault("_forward_pre_hooks", {}), hook)

    # *** structure ***

    def __setattr__(self, name: str, value: Any) -> None:
        mode = self.__dict__.get("training")
        if mode is not None and isinstance(value, Module) and value.training is None:
            # a tinygrad-style layer placed in a torch-style model takes the model's mode (Module's train: a subclass
            # may define train(...) of its own, as forward_forward's layers do)
            Module.train(value, mode)
        object.__setattr__(self, name, value)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, value in vars(self).items():
            if name.startswith("_"):
                continue
            for child_name, child in _module_items(value, name):
                if id(child) not in seen:
                    seen.add(id(child))
                    yield child_name, child

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True) -> Iterator:
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def add_module(self, name: str, module: Module | None) -> None:
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        setattr(self, name, module)

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        module: Any = self
        for part in target.split(".") if target else []:
            module = module[int(part)] if isinstance(module, (list, tuple)) else getattr(module, part, None)
            if not isinstance(module, (Module, list, tuple)):
                raise AttributeError(f"{type(self).__name__} has no submodule {target!r}")
        return module

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        if param is not None and not isinstance(param, Tensor):
            raise TypeError(f"cannot assign {type(param).__name__} as parameter {name!r} (Tensor or None required)")
        if param is not None:
            _PARAMETERS[id(param)] = param.requires_grad_(param.requires_grad is not False)
        setattr(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign {type(tensor).__name__} as buffer {name!r} (Tensor or None required)")
        skipped = self.__dict__.setdefault("_non_persistent", set())
        skipped.discard(name) if persistent else skipped.add(name)
        setattr(self, name, tensor)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ") for name, child in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n  " + "\n  ".join(lines) + "\n)" if lines else ")")

    # *** tensors ***

    def _tensors(self, prefix: str = "") -> dict[str, Tensor]:
        """Every tensor below, by torch's dotted name, without the non-persistent buffers: each module below names
        its own (a ModuleList its items by index)."""
        out: dict[str, Tensor] = {}
        skipped = self.__dict__.get("_non_persistent", ())
        for name, value in vars(self).items():
            if name not in skipped:
                _collect(value, f"{prefix}{name}", out)
        return out

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        out = collections.OrderedDict() if destination is None else destination
        out.update(self._tensors(prefix))
        return out

    def load_state_dict(self, state_dict: dict[str, Tensor], strict: bool = True, assign: bool = False) -> Any:
        from lazygrad.nn.state import load_state_dict

        own = self._tensors()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        try:
            load_state_dict(own, state_dict, strict=strict)
        except ValueError as e:  # torch's class for this mistake is RuntimeError
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: {e}") from e
        return _IncompatibleKeys(missing, unexpected)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Iterator:
        seen: set[int] = set()
        tensors = self._tensors(f"{prefix}." if prefix else "") if recurse else self._own_tensors(prefix)
        for name, t in tensors.items():
            if is_parameter(t) and not (remove_duplicate and id(t) in seen):
                seen.add(id(t))
                yield name, t

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        return (t for _, t in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Iterator:
        seen: set[int] = set()
        tensors = self._tensors(f"{prefix}." if prefix else "") if recurse else self._own_tensors(prefix)
        for name, t in tensors.items():
            if not is_parameter(t) and not (remove_duplicate and id(t) in seen):
                seen.add(id(t))
                yield name, t

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return (t for _, t in self.named_buffers(recurse=recurse))

    def _own_tensors(self, prefix: str) -> dict[str, Tensor]:
        below = {f"{name}." for name, _ in self.named_children()}
        return {
            (f"{prefix}.{k}" if prefix else k): t
            for k, t in self._tensors().items()
            if not any(k.startswith(b) for b in below)
        }

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = p.grad.zeros_like()

    # *** modes ***

    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def _training(self) -> bool:
        return Tensor.training if self.training is None else self.training

    # *** moves and casts: in place, every tensor keeps its identity (optimizers hold them) ***

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Tensor.to's forms; a dtype casts only the floating point tensors, as torch's."""
        device, target, _ = to_arguments(*args, **kwargs)
        for _, t in self._tensors().items():
            moved = t
            if device is not None:
                moved = moved.to(device)
            if target is not None and dtypes.is_float(t.dtype) and dtypes.is_float(target):
                moved = moved.cast(target)
            if moved is not t:
                t.replace(moved.contiguous().realize())
        return self

    def cpu(self) -> Module:
        return self.to("CPU")

    def cuda(self, device: int | None = None) -> Module:
        return self.to("CUDA" if device is None else f"CUDA:{device}")

    def float(self) -> Module:
        return self.to(dtypes.float32)

    def double(self) -> Module:
        return self.to(dtypes.float64)

    def half(self) -> Module:
        return self.to(dtypes.float16)

    def bfloat16(self) -> Module:
        return self.to(dtypes.bfloat16)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self


class _RemovableHandle:
    _next = 0

    def __init__(self, hooks: dict, hook: Callable):
        self.hooks, self.id = hooks, _RemovableHandle._next
        _RemovableHandle._next += 1
        hooks[self.id] = hook

    def remove(self) -> None:
        self.hooks.pop(self.id, None)


# *** containers ***


class Sequential(Module):
    def __init__(self, *args: Any):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], dict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def _items(self) -> list[tuple[str, Module]]:
        return [(k, v) for k, v in vars(self).items() if isinstance(v, Module)]

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[Module]:
        return (m for _, m in self._items())

    def __getitem__(self, idx: int | slice) -> Any:
        items = self._items()
        if isinstance(idx, slice):
            return Sequential(dict(items[idx]))
        if not -len(items) <= idx < len(items):
            raise IndexError(f"index {idx} is out of range for a Sequential of {len(items)}")
        return items[idx][1]

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Sequence[Module]) -> Sequential:
        for m in modules:
            self.append(m)
        return self

    def forward(self, x: Any) -> Any:
        for module in self:
            x = module(x)
        return x


class ModuleList(Module):
    def __init__(self, modules: Sequence[Module] | None = None):
        super().__init__()
        self._list: list[Module] = []
        for m in modules or []:
            self.append(m)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        return ((str(i), m) for i, m in enumerate(self._list))

    def _tensors(self, prefix: str = "") -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for i, m in enumerate(self._list):
            out.update(m._tensors(f"{prefix}{i}."))
        return out

    def append(self, module: Module) -> ModuleList:
        if self.training is not None and isinstance(module, Module) and module.training is None:
            Module.train(module, self.training)
        self._list.append(module)
        return self

    def extend(self, modules: Sequence[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        self._list.insert(index, module)

    def __len__(self) -> int:
        return len(self._list)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._list)

    def __getitem__(self, idx: int | slice) -> Any:
        return ModuleList(self._list[idx]) if isinstance(idx, slice) else self._list[idx]

    def __setitem__(self, idx: int, module: Module) -> None:
        self._list[idx] = module


class _Named:
    """Access by name to `_dict` (ModuleDict's modules, ParameterDict's parameters), as a dict's."""

    _dict: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __contains__(self, key: str) -> bool:
        return key in self._dict

    def __len__(self) -> int:
        return len(self._dict)

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def keys(self) -> Any:
        return self._dict.keys()

    def values(self) -> Any:
        return self._dict.values()

    def items(self) -> Any:
        return self._dict.items()

    def __getattr__(self, name: str) -> Any:
        # torch's attribute access by key (model.parametrizations.weight); only called where no attribute is found
        entries = self.__dict__.get("_dict")
        if entries is not None and name in entries:
            return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


class ModuleDict(_Named, Module):
    def __init__(self, modules: dict[str, Module] | None = None):
        super().__init__()
        self._dict: dict[str, Module] = {}
        for k, m in (modules or {}).items():
            self[k] = m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        return iter(list(self._dict.items()))

    def _tensors(self, prefix: str = "") -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for k, m in self._dict.items():
            out.update(m._tensors(f"{prefix}{k}."))
        return out

    def __setitem__(self, key: str, module: Module) -> None:
        if self.training is not None and isinstance(module, Module) and module.training is None:
            Module.train(module, self.training)
        self._dict[key] = module


class ParameterList(Module):
    """torch's ParameterList: parameters by index (state dict names "0", "1", ...); a tensor added becomes one."""

    def __init__(self, values: Iterable[Tensor] | None = None):
        super().__init__()
        self._list: list[Tensor] = []
        for v in values or ():
            self.append(v)

    def _tensors(self, prefix: str = "") -> dict[str, Tensor]:
        return {f"{prefix}{i}": t for i, t in enumerate(self._list)}

    def append(self, value: Tensor) -> ParameterList:
        self._list.append(_as_parameter(value))
        return self

    def extend(self, values: Iterable[Tensor]) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, i: int) -> Tensor:
        return self._list[i]

    def __setitem__(self, i: int, value: Tensor) -> None:
        self._list[i] = _as_parameter(value)

    def __len__(self) -> int:
        return len(self._list)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._list)


class ParameterDict(_Named, Module):
    """torch's ParameterDict: parameters by name, in insertion order."""

    def __init__(self, parameters: dict[str, Tensor] | Iterable[tuple[str, Tensor]] | None = None):
        super().__init__()
        self._dict: dict[str, Tensor] = {}
        self.update(parameters or {})

    def _tensors(self, prefix: str = "") -> dict[str, Tensor]:
        return {f"{prefix}{k}": t for k, t in self._dict.items()}

    def update(self, parameters: dict[str, Tensor] | Iterable[tuple[str, Tensor]]) -> None:
        for k, v in parameters.items() if isinstance(parameters, dict) else parameters:
            self[k] = v

    def __setitem__(self, key: str, value: Tensor) -> None:
        self._dict[key] = _as_parameter(value)

    def __delitem__(self, key: str) -> None:
        del self._dict[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._dict.get(key, default)

    def pop(self, key: str) -> Tensor:
        return self._dict.pop(key)


def _as_parameter(value: Tensor) -> Tensor:
    return value if is_parameter(value) else Parameter(value)


class DataParallel(Module):
    """torch's DataParallel on one process: forward is the module's (the batch is not split over devices; for data
    parallelism across processes see lazygrad.distributed). The module is `.module`, state dict names start with
    "module." as torch's."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None, dim: int = 0):
        super().__init__()
        self.module, self.device_ids, self.output_device, self.dim = module, device_ids, output_device, dim

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


DistributedDataParallel = DataParallel


# *** layers over functional: their arguments are torch's constructor's ***


def _layer(name: str, fn: Callable, params: Sequence[tuple[str, Any]] = (), doc: str = "") -> type:
    """A module whose forward is fn(x, *its constructor's arguments in order), e.g. LeakyReLU(negative_slope)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        Module.__init__(self)
        if len(args) > len(params):
            raise TypeError(f"{name}() takes at most {len(params)} arguments, got {len(args)}")
        values = dict(params)
        for (key, _), value in zip(params, args):
            values[key] = value
        for key, value in kwargs.items():
            if key not in values:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            values[key] = value
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def forward(self: Any, x: Tensor) -> Tensor:
        return fn(x, **{key: getattr(self, key) for key, _ in params if key != "inplace"})

    def extra_repr(self: Any) -> str:
        return ", ".join(f"{key}={getattr(self, key)!r}" for key, _ in params)

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc})


INPLACE = ("inplace", False)
ReLU = _layer("ReLU", F.relu, [INPLACE])
ReLU6 = _layer("ReLU6", F.relu6, [INPLACE])
LeakyReLU = _layer("LeakyReLU", F.leaky_relu, [("negative_slope", 0.01), INPLACE])
ELU = _layer("ELU", F.elu, [("alpha", 1.0), INPLACE])
CELU = _layer("CELU", F.celu, [("alpha", 1.0), INPLACE])
SELU = _layer("SELU", F.selu, [INPLACE])
GELU = _layer("GELU", F.gelu, [("approximate", "none")])
SiLU = _layer("SiLU", F.silu, [INPLACE])
Mish = _layer("Mish", F.mish, [INPLACE])
Sigmoid = _layer("Sigmoid", F.sigmoid)
Tanh = _layer("Tanh", F.tanh)
Hardtanh = _layer("Hardtanh", F.hardtanh, [("min_val", -1.0), ("max_val", 1.0), INPLACE])
Hardswish = _layer("Hardswish", F.hardswish, [INPLACE])
Hardsigmoid = _layer("Hardsigmoid", F.hardsigmoid, [INPLACE])
Hardshrink = _layer("Hardshrink", F.hardshrink, [("lambd", 0.5)])
Softshrink = _layer("Softshrink", F.softshrink, [("lambd", 0.5)])
Tanhshrink = _layer("Tanhshrink", F.tanhshrink)
Threshold = _layer("Threshold", F.threshold, [("threshold", 0.0), ("value", 0.0), INPLACE])
LogSigmoid = _layer("LogSigmoid", F.logsigmoid)
Softsign = _layer("Softsign", F.softsign)
Softplus = _layer("Softplus", F.softplus, [("beta", 1.0), ("threshold", 20.0)])
GLU = _layer("GLU", F.glu, [("dim", -1)])
Softmax = _layer("Softmax", F.softmax, [("dim", None)])
LogSoftmax = _layer("LogSoftmax", F.log_softmax, [("dim", None)])
Softmin = _layer("Softmin", F.softmin, [("dim", None)])
Flatten = _layer(
    "Flatten", lambda x, start_dim, end_dim: x.flatten(start_dim, end_dim), [("start_dim", 1), ("end_dim", -1)]
)
Unflatten = _layer(
    "Unflatten",
    lambda x, dim, unflattened_size: x.unflatten(dim, unflattened_size),
    [("dim", 0), ("unflattened_size", ())],
)
PixelShuffle = _layer("PixelShuffle", F.pixel_shuffle, [("upscale_factor", 1)])
PixelUnshuffle = _layer("PixelUnshuffle", F.pixel_unshuffle, [("downscale_factor", 1)])
LocalResponseNorm = _layer(
    "LocalResponseNorm", F.local_response_norm, [("size", 1), ("alpha", 1e-4), ("beta", 0.75), ("k", 1.0)]
)
Unfold = _layer("Unfold", F.unfold, [("kernel_size", 1), ("dilation", 1), ("padding", 0), ("stride", 1)])
Fold = _layer("Fold", F.fold, [("output_size", 1), ("kernel_size", 1), ("dilation", 1), ("padding", 0), ("stride", 1)])
AdaptiveAvgPool1d = _layer("AdaptiveAvgPool1d", F.adaptive_avg_pool1d, [("output_size", 1)])
AdaptiveAvgPool2d = _layer("AdaptiveAvgPool2d", F.adaptive_avg_pool2d, [("output_size", 1)])
AdaptiveAvgPool3d = _layer("AdaptiveAvgPool3d", F.adaptive_avg_pool3d, [("output_size", 1)])
AdaptiveMaxPool1d = _layer("AdaptiveMaxPool1d", F.adaptive_max_pool1d, [("output_size", 1), ("return_indices", False)])
AdaptiveMaxPool2d = _layer("AdaptiveMaxPool2d", F.adaptive_max_pool2d, [("output_size", 1), ("return_indices", False)])
Upsample = _layer(
    "Upsample", F.interpolate, [("size", None), ("scale_factor", None), ("mode", "nearest"), ("align_corners", None)]
)

_MAX_POOL = [
    ("kernel_size", 1),
    ("stride", None),
    ("padding", 0),
    ("dilation", 1),
    ("return_indices", False),
    ("ceil_mode", False),
]
MaxPool1d = _layer("MaxPool1d", F.max_pool1d, _MAX_POOL)
MaxPool2d = _layer("MaxPool2d", F.max_pool2d, _MAX_POOL)
MaxPool3d = _layer("MaxPool3d", F.max_pool3d, _MAX_POOL)
_AVG_POOL = [("kernel_size", 1), ("stride", None), ("padding", 0), ("ceil_mode", False), ("count_include_pad", True)]
AvgPool1d = _layer("AvgPool1d", F.avg_pool1d, _AVG_POOL)
AvgPool2d = _layer("AvgPool2d", F.avg_pool2d, [*_AVG_POOL, ("divisor_override", None)])
AvgPool3d = _layer("AvgPool3d", F.avg_pool3d, [*_AVG_POOL, ("divisor_override", None)])


Softmax2d = _layer("Softmax2d", lambda x: F.softmax(x, -3))
ChannelShuffle = _layer("ChannelShuffle", F.channel_shuffle, [("groups", 1)])
AdaptiveMaxPool3d = _layer("AdaptiveMaxPool3d", F.adaptive_max_pool3d, [("output_size", 1), ("return_indices", False)])
UpsamplingNearest2d = _layer("UpsamplingNearest2d", F.upsample_nearest, [("size", None), ("scale_factor", None)])
UpsamplingBilinear2d = _layer("UpsamplingBilinear2d", F.upsample_bilinear, [("size", None), ("scale_factor", None)])
_LP_POOL = [("norm_type", 2.0), ("kernel_size", 1), ("stride", None), ("ceil_mode", False)]
LPPool1d = _layer("LPPool1d", F.lp_pool1d, _LP_POOL)
LPPool2d = _layer("LPPool2d", F.lp_pool2d, _LP_POOL)
LPPool3d = _layer("LPPool3d", F.lp_pool3d, _LP_POOL)


class _MaxUnpool(Module):
    fn: Callable = staticmethod(F.max_unpool2d)

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor, indices: Tensor, output_size: Any = None) -> Tensor:
        return type(self).fn(x, indices, self.kernel_size, self.stride, self.padding, output_size)


MaxUnpool1d = type("MaxUnpool1d", (_MaxUnpool,), {"fn": staticmethod(F.max_unpool1d)})
MaxUnpool2d = type("MaxUnpool2d", (_MaxUnpool,), {"fn": staticmethod(F.max_unpool2d)})
MaxUnpool3d = type("MaxUnpool3d", (_MaxUnpool,), {"fn": staticmethod(F.max_unpool3d)})


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any):  # torch's takes and ignores any arguments
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class _Pad(Module):
    mode, dims = "constant", 1

    def __init__(self, padding: int | Sequence[int], value: float = 0.0):
        super().__init__()
        self.padding = tuple(make_tuple(padding, 2 * self.dims))
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        return x.pad(self.padding, self.mode, self.value)

    def extra_repr(self) -> str:
        return f"{self.padding}"


def _pad_layer(name: str, mode: str, dims: int) -> type:
    return type(name, (_Pad,), {"mode": mode, "dims": dims})


ZeroPad1d, ZeroPad2d, ZeroPad3d = (_pad_layer(f"ZeroPad{d}d", "constant", d) for d in (1, 2, 3))
ConstantPad1d, ConstantPad2d, ConstantPad3d = (_pad_layer(f"ConstantPad{d}d", "constant", d) for d in (1, 2, 3))
ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = (_pad_layer(f"ReflectionPad{d}d", "reflect", d) for d in (1, 2, 3))
ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = (
    _pad_layer(f"ReplicationPad{d}d", "replicate", d) for d in (1, 2, 3)
)
CircularPad1d, CircularPad2d, CircularPad3d = (_pad_layer(f"CircularPad{d}d", "circular", d) for d in (1, 2, 3))


class _Dropout(Module):
    fn: Callable = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return type(self).fn(x, self.p, self._training())

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


Dropout = type("Dropout", (_Dropout,), {})
Dropout1d = type("Dropout1d", (_Dropout,), {"fn": staticmethod(F.dropout1d)})
Dropout2d = type("Dropout2d", (_Dropout,), {"fn": staticmethod(F.dropout2d)})
Dropout3d = type("Dropout3d", (_Dropout,), {"fn": staticmethod(F.dropout3d)})


class AlphaDropout(_Dropout):
    fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_Dropout):
    fn = staticmethod(F.feature_alpha_dropout)


class RReLU(Module):
    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.rrelu(x, self.lower, self.upper, self._training())

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}"


class PReLU(Module):
    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(Tensor.full((num_parameters,), init))

    def forward(self, x: Tensor) -> Tensor:
        return x.prelu(self.weight)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class Bilinear(Module):
    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True):
        super().__init__()
        bound = 1 / in1_features**0.5
        self.weight = Parameter(Tensor.uniform(out_features, in1_features, in2_features, low=-bound, high=bound))
        self.bias = Parameter(Tensor.uniform(out_features, low=-bound, high=bound)) if bias else None

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.bilinear(x1, x2, self.weight, self.bias)


# *** losses: torch's constructor arguments (size_average and reduce, deprecated there, are taken and ignored) ***


class _Loss(Module):
    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise ValueError(f"{reduction} is not a valid value for reduction")
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(
        self, weight: Tensor | None = None, size_average: Any = None, reduce: Any = None, reduction: str = "mean"
    ):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(
            input, target, self.weight, None, self.ignore_index, None, self.reduction, self.label_smoothing
        )


class NLLLoss(_WeightedLoss):
    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, self.weight, None, self.ignore_index, None, self.reduction)


class BCELoss(_WeightedLoss):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight
        )


def _loss(
    name: str, fn: Callable, order: str = "size_average reduce reduction", inputs: int = 2, **defaults: Any
) -> type:
    """A loss module: `order` is its constructor's positional arguments as torch has them; forward(*inputs) is
    fn(*inputs, reduction=..., its options by name)."""
    options = list(defaults)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        names = order.split()
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} positional arguments, got {len(args)}")
        values = {"size_average": None, "reduce": None, "reduction": "mean", **defaults, **dict(zip(names, args))}
        for key, value in kwargs.items():
            if key not in values:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            values[key] = value
        _Loss.__init__(self, reduction=values["reduction"])
        for key in options:
            object.__setattr__(self, key, values[key])

    def forward(self: Any, *xs: Tensor) -> Tensor:
        if len(xs) != inputs:
            raise TypeError(f"{name}.forward takes {inputs} tensors, got {len(xs)}")
        return fn(*xs, reduction=self.reduction, **{k: getattr(self, k) for k in options})

    return type(name, (_Loss,), {"__init__": __init__, "forward": forward})


MSELoss = _loss("MSELoss", F.mse_loss)
L1Loss = _loss("L1Loss", F.l1_loss)
SmoothL1Loss = _loss("SmoothL1Loss", F.smooth_l1_loss, "size_average reduce reduction beta", beta=1.0)
HuberLoss = _loss("HuberLoss", F.huber_loss, "reduction delta", delta=1.0)
KLDivLoss = _loss("KLDivLoss", F.kl_div, "size_average reduce reduction log_target", log_target=False)
SoftMarginLoss = _loss("SoftMarginLoss", F.soft_margin_loss)
MultiLabelSoftMarginLoss = _loss(
    "MultiLabelSoftMarginLoss", F.multilabel_soft_margin_loss, "weight size_average reduce reduction", weight=None
)
MarginRankingLoss = _loss(
    "MarginRankingLoss", F.margin_ranking_loss, "margin size_average reduce reduction", 3, margin=0.0
)
MultiMarginLoss = _loss(
    "MultiMarginLoss",
    F.multi_margin_loss,
    "p margin weight size_average reduce reduction",
    p=1,
    margin=1.0,
    weight=None,
)
MultiLabelMarginLoss = _loss("MultiLabelMarginLoss", F.multilabel_margin_loss)
TripletMarginWithDistanceLoss = _loss(
    "TripletMarginWithDistanceLoss",
    F.triplet_margin_with_distance_loss,
    "distance_function margin swap reduction",
    3,
    distance_function=None,
    margin=1.0,
    swap=False,
)
CTCLoss = _loss("CTCLoss", F.ctc_loss, "blank reduction zero_infinity", 4, blank=0, zero_infinity=False)
HingeEmbeddingLoss = _loss(
    "HingeEmbeddingLoss", F.hinge_embedding_loss, "margin size_average reduce reduction", margin=1.0
)
CosineEmbeddingLoss = _loss(
    "CosineEmbeddingLoss", F.cosine_embedding_loss, "margin size_average reduce reduction", 3, margin=0.0
)
TripletMarginLoss = _loss(
    "TripletMarginLoss",
    F.triplet_margin_loss,
    "margin p eps swap size_average reduce reduction",
    3,
    margin=1.0,
    p=2.0,
    eps=1e-6,
    swap=False,
)
PoissonNLLLoss = _loss(
    "PoissonNLLLoss",
    F.poisson_nll_loss,
    "log_input full size_average eps reduce reduction",
    log_input=True,
    full=False,
    eps=1e-8,
)
GaussianNLLLoss = _loss("GaussianNLLLoss", F.gaussian_nll_loss, "", 3, full=False, eps=1e-6)


__all__ = [
    "Module",
    "Parameter",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "DataParallel",
    "DistributedDataParallel",
    "AlphaDropout",
    "FeatureAlphaDropout",
    "RReLU",
    "Softmax2d",
    "ChannelShuffle",
    "AdaptiveMaxPool3d",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "MultiMarginLoss",
    "MultiLabelMarginLoss",
    "TripletMarginWithDistanceLoss",
    "Identity",
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "ELU",
    "CELU",
    "SELU",
    "GELU",
    "SiLU",
    "Mish",
    "Sigmoid",
    "Tanh",
    "Hardtanh",
    "Hardswish",
    "Hardsigmoid",
    "Hardshrink",
    "Softshrink",
    "Tanhshrink",
    "Threshold",
    "LogSigmoid",
    "Softsign",
    "Softplus",
    "GLU",
    "Softmax",
    "LogSoftmax",
    "Softmin",
    "Flatten",
    "Unflatten",
    "PixelShuffle",
    "PixelUnshuffle",
    "LocalResponseNorm",
    "Unfold",
    "Fold",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "Upsample",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "PReLU",
    "PairwiseDistance",
    "CosineSimilarity",
    "Bilinear",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "KLDivLoss",
    "SoftMarginLoss",
    "MultiLabelSoftMarginLoss",
    "MarginRankingLoss",
    "HingeEmbeddingLoss",
    "CTCLoss",
    "CosineEmbeddingLoss",
    "TripletMarginLoss",
    "PoissonNLLLoss",
    "GaussianNLLLoss",
]
