"""torch.nn.utils.parametrizations: weight_norm and spectral_norm as parametrizations (parametrize.py), torch's
current forms: state dict names parametrizations.weight.original0 / original1 (weight norm's g and v),
parametrizations.weight.original and parametrizations.weight.0._u / _v (spectral norm's power iteration)."""

from __future__ import annotations

from lazygrad.nn.module import Module
from lazygrad.nn.utils.parametrize import register_parametrization
from lazygrad.nn.utils.reparametrize import _norm_except, _normalize
from lazygrad.tensor import Tensor


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_v * (weight_g / _norm_except(weight_v, None if self.dim == -1 else self.dim))

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return _norm_except(weight, None if self.dim == -1 else self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """`name` as original0 * original1 / ||original1|| (the norm over every dim but `dim`)."""
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12):
        super().__init__()
        if n_power_iterations <= 0:
            raise ValueError(
                f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + weight.ndim
        self.eps, self.iterations = eps, n_power_iterations
        if weight.ndim > 1:
            h, w = self._matrix(weight).shape
            self.register_buffer("_u", _normalize(Tensor.randn(h, dtype=weight.dtype), eps).contiguous().realize())
            self.register_buffer("_v", _normalize(Tensor.randn(w, dtype=weight.dtype), eps).contiguous().realize())
            self._power(self._matrix(weight.detach()), 15)  # (torch's start: 15 steps from random vectors)

    def _matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute(self.dim, *[d for d in range(weight.ndim) if d != self.dim])
        return weight.flatten(1)

    def _power(self, mat: Tensor, steps: int) -> None:
        with Tensor.no_grad():
            u, v = self._u, self._v
            for _ in range(steps):
                u = _normalize(mat @ v, self.eps)
                v = _normalize(mat.T @ u, self.eps)
            Tensor.realize(self._u.assign(u.detach()), self._v.assign(v.detach()))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return weight / weight.square().sum().sqrt().maximum(self.eps)
        mat = self._matrix(weight)
        if self.training is not False:  # (a layer whose mode was never set trains, as a new torch module)
            self._power(mat.detach(), self.iterations)
        u, v = self._u.clone().detach(), self._v.clone().detach()
        return weight / u.dot(mat @ v)

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> Module:
    """`name` over its largest singular value, estimated by power iteration (dim 1 for transposed convs)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    return register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
