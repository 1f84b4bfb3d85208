"""torch.nn.utils.weight_norm and spectral_norm (the hook forms): a module's weight recomputed before every forward
from parameters of another shape.

weight_norm(m) replaces the parameter `weight` by `weight_g` (its norm over every dim but `dim`) and `weight_v` (its
direction), state dict names as torch's; spectral_norm(m) by `weight_orig` over its largest singular value, estimated
by power iteration on the buffers `weight_u` and `weight_v` (one step per training forward, none in eval). The
recomputed weight is an attribute of the module left out of its state dict and parameters, as torch's.
"""

from __future__ import annotations

from typing import Any

from lazygrad.nn.module import Module, Parameter
from lazygrad.tensor import Tensor


def _norm_except(v: Tensor, dim: int | None) -> Tensor:
    """The 2-norm of v over every dim but `dim` (all of them for None), keeping the dims."""
    if dim is None:
        return v.square().sum().sqrt()
    dim = dim % v.ndim
    return v.square().sum(tuple(d for d in range(v.ndim) if d != dim), keepdim=True).sqrt()


class _WeightNorm:
    def __init__(self, name: str, dim: int | None):
        self.name, self.dim = name, dim

    def compute(self, module: Module) -> Tensor:
        g, v = getattr(module, f"{self.name}_g"), getattr(module, f"{self.name}_v")
        return v * (g / _norm_except(v, self.dim))

    def __call__(self, module: Module, args: Any) -> None:
        _set_computed(module, self.name, self.compute(module))


def _set_computed(module: Module, name: str, value: Tensor) -> None:
    """`name` set to a computed tensor that is neither a parameter nor in the state dict."""
    module.__dict__.setdefault("_non_persistent", set()).add(name)
    object.__setattr__(module, name, value)


def _take_parameter(module: Module, name: str) -> Tensor:
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise AttributeError(f"{type(module).__name__} has no parameter or buffer with name '{name}'")
    for hook in module.__dict__.get("_forward_pre_hooks", {}).values():
        if isinstance(hook, (_WeightNorm, _SpectralNorm)) and hook.name == name:
            raise RuntimeError(f"Cannot register two {type(hook).__name__[1:]} hooks on the same parameter {name}")
    delattr(module, name)
    return weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """torch.nn.utils.weight_norm: `name` becomes name_g * name_v / ||name_v|| (the norm over every dim but `dim`;
    dim=None: over all), recomputed before each forward."""
    weight = _take_parameter(module, name)
    hook = _WeightNorm(name, dim)
    module.register_parameter(f"{name}_g", Parameter(_norm_except(weight.detach(), dim).contiguous().realize()))
    module.register_parameter(f"{name}_v", Parameter(weight.detach().contiguous().realize()))
    _set_computed(module, name, hook.compute(module))
    module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """The parameter `name` again, holding the weight weight_norm computes now."""
    return _remove(module, name, _WeightNorm, ("_g", "_v"), "weight_norm")


class _SpectralNorm:
    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float):
        self.name, self.iterations, self.dim, self.eps = name, n_power_iterations, dim, eps

    def matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute(self.dim, *[d for d in range(weight.ndim) if d != self.dim])
        return weight.reshape(weight.shape[0], -1)

    def compute(self, module: Module, power_iteration: bool) -> Tensor:
        weight = getattr(module, f"{self.name}_orig")
        u, v = getattr(module, f"{self.name}_u"), getattr(module, f"{self.name}_v")
        mat = self.matrix(weight)
        if power_iteration and self.iterations > 0:
            with Tensor.no_grad():
                un, vn = u, v
                for _ in range(self.iterations):
                    vn = _normalize(mat.T @ un, self.eps)
                    un = _normalize(mat @ vn, self.eps)
                u.assign(un.detach()), v.assign(vn.detach())
                Tensor.realize(u, v)  # (in place, as torch's: the next forward starts from them)
            u, v = u.clone(), v.clone()
        return weight / u.detach().dot(mat @ v.detach())  # (u and v: constants of the gradient, as torch's)

    def __call__(self, module: Module, args: Any) -> None:
        # (a layer whose mode was never set, outside any torch-style model, is in training as a new torch module is)
        _set_computed(module, self.name, self.compute(module, module.training is not False))


def _normalize(x: Tensor, eps: float) -> Tensor:
    return x.normalize(dim=0, eps=eps)  # (torch's F.normalize of a vector, as its spectral norm takes it)


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> Module:
    """torch.nn.utils.spectral_norm: `name` divided by its largest singular value, estimated by power iteration
    (dim: the output dim, 1 for transposed convs as torch's default)."""
    if n_power_iterations <= 0:
        raise ValueError(f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    weight = _take_parameter(module, name)
    hook = _SpectralNorm(name, n_power_iterations, dim, eps)
    h, w = hook.matrix(weight).shape
    module.register_parameter(f"{name}_orig", Parameter(weight.detach().contiguous().realize()))
    module.register_buffer(f"{name}_u", _normalize(Tensor.randn(h, dtype=weight.dtype), eps).contiguous().realize())
    module.register_buffer(f"{name}_v", _normalize(Tensor.randn(w, dtype=weight.dtype), eps).contiguous().realize())
    _set_computed(module, name, weight.detach())  # (torch's: the weight as it was, until the first forward)
    module.register_forward_pre_hook(hook)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """The parameter `name` again, holding the weight spectral_norm computes now (without a power iteration)."""
    return _remove(module, name, _SpectralNorm, ("_orig", "_u", "_v"), "spectral_norm")


def _remove(module: Module, name: str, kind: type, parts: tuple[str, ...], what: str) -> Module:
    hooks = module.__dict__.get("_forward_pre_hooks", {})
    for key, hook in list(hooks.items()):
        if isinstance(hook, kind) and hook.name == name:
            weight = hook.compute(module, False) if kind is _SpectralNorm else hook.compute(module)
            del hooks[key]
            for part in parts:
                delattr(module, f"{name}{part}")
            module.__dict__.get("_non_persistent", set()).discard(name)
            object.__delattr__(module, name)
            module.register_parameter(name, Parameter(weight.detach().contiguous().realize()))
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")
