"""Optimizers with torch's update formulas. A step is lazy `assign`s of every parameter and every piece of optimizer
state, realized in one schedule, so the scheduler fuses the whole update into a few kernels.

Step-dependent scalars (learning rate, Adam's bias corrections) are 0-d tensors on the device, not Python numbers:
a number would be baked into the kernel source and every step would compile new kernels. They are float64 so that
1 - beta2**t keeps its digits (in float32 it loses about half of them for beta2 = 0.999), as torch's Python floats do.
"""

from __future__ import annotations

import math
from typing import Sequence

from lazygrad.dtype import DType, dtypes
from lazygrad.gradient import take_backward_roots
from lazygrad.nn import _own_buffer
from lazygrad.tensor import Tensor


class Optimizer:
    def __init__(self, params: Sequence[Tensor], lr: float):
        params = list({id(t): t for t in params}.values())
        # as in tinygrad, a float tensor whose requires_grad was never set is a parameter; anything else (running
        # statistics, counters) is a buffer, realized with each step so that its pending in-place updates land
        for t in params:
            if t._requires_grad is None and dtypes.is_float(t.dtype):
                t.requires_grad = True
        self.params = [t for t in params if t.requires_grad]
        self.buffers = [t for t in params if not t.requires_grad]
        if not self.params:
            raise ValueError("the optimizer got no parameters (tensors with requires_grad=True)")
        self.device = self.params[0].device
        self.lr = self._scalar(lr)

    def _scalar(self, value: float) -> Tensor:
        return _own_buffer(Tensor.full((), value, dtype=dtypes.float64, device=self.device))

    def _state(self) -> list[Tensor]:
        """Zeros shaped like each parameter, each in its own buffer."""
        return [_own_buffer(p.zeros_like()) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """The assigned tensors of one step, unrealized: pass them to one `Tensor.realize` with the loss and
        anything else the step computes, so that it all shares one schedule."""
        # the loss that backward() ran on and the gradients are stored by the same schedule, before the parameters
        # they read change: read after the step, they hold the values they had (as in torch), at no extra kernels
        grads = [p.grad for p in self.params if p.grad is not None]
        out = take_backward_roots() + grads + self._begin_step()
        for i, p in enumerate(self.params):
            if p.grad is not None:  # as torch: a parameter without a gradient is left alone
                out += self._update(i, p, p.grad.detach())
        return out + self.buffers

    def _begin_step(self) -> list[Tensor]:
        """Updates of state shared by all parameters."""
        return []

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        """Assign the new value of parameter i (and its state); return the assigned tensors."""
        raise NotImplementedError


class SGD(Optimizer):
    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        # a zero buffer gives torch's first step (buf = grad) exactly: momentum * 0 + grad == grad
        self.b = self._state() if momentum else []
        Tensor.realize(*self.params, *self.b, self.lr)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        if self.weight_decay:
            g = g + p.detach() * self.weight_decay
        out = []
        if self.momentum:
            b = self.b[i].assign(self.b[i] * self.momentum + g)
            g = g + b * self.momentum if self.nesterov else b
            out.append(b)
        return out + [p.assign(p.detach() - g * self.lr.cast(p.dtype))]


class _Moments(Optimizer):
    """The state Adam and LAMB share: first and second moments per parameter and beta1^t, beta2^t."""

    def __init__(self, params: Sequence[Tensor], lr: float, b1: float, b2: float, eps: float, weight_decay: float):
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
        self.m, self.v = self._state(), self._state()
        self.b1_t, self.b2_t = self._scalar(1.0), self._scalar(1.0)  # beta ** step
        Tensor.realize(*self.params, *self.m, *self.v, self.lr, self.b1_t, self.b2_t)

    def _begin_step(self) -> list[Tensor]:
        return [self.b1_t.assign(self.b1_t * self.b1), self.b2_t.assign(self.b2_t * self.b2)]

    def _moments(self, i: int, g: Tensor) -> tuple[Tensor, Tensor]:
        """Parameter i's moments updated with gradient g (assigned, not yet realized)."""
        m, v = self.m[i], self.v[i]
        m.assign(_lerp(m, g, 1 - self.b1))
        v.assign(v * self.b2 + g * (1 - self.b2) * g)
        return m, v


class Adam(_Moments):
    """Adam (torch.optim.Adam); with decoupled=True, AdamW's weight decay (the parameter shrinks before the update)."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
    ):
        super().__init__(params, lr, b1, b2, eps, weight_decay)
        self.decoupled = decoupled
        self._bias: dict[DType, tuple[Tensor, Tensor]] = {}  # this step's bias corrections, see _bias_terms

    def _begin_step(self) -> list[Tensor]:
        self._bias = {}
        return super()._begin_step()

    def _bias_terms(self, dtype: DType) -> tuple[Tensor, Tensor]:
        """This step's lr / (1 - b1^t) and sqrt(1 - b2^t) in `dtype`: built once per step and dtype, not once per
        parameter (the same nodes either way; the tensor ops building them are what costs)."""
        if dtype not in self._bias:
            step_size = (self.lr / (1 - self.b1_t)).cast(dtype)
            self._bias[dtype] = (step_size, (1 - self.b2_t).sqrt().cast(dtype))
        return self._bias[dtype]

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w = p.detach()
        if self.weight_decay and self.decoupled:
            w = w * (1 - self.lr * self.weight_decay).cast(p.dtype)
        elif self.weight_decay:
            g = g + w * self.weight_decay
        m, v = self._moments(i, g)
        step_size, bias2 = self._bias_terms(p.dtype)
        denom = v.sqrt() / bias2 + self.eps
        return [m, v, p.assign(w - step_size * m / denom)]


class AdamW(Adam):
    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        super().__init__(params, lr, b1, b2, eps, weight_decay, decoupled=True)


class LAMB(_Moments):
    """LAMB (You et al. 2019): Adam's bias-corrected update plus decoupled weight decay, scaled per parameter by the
    trust ratio ||w|| / ||update|| (1 where either norm is 0). With adam=True the ratio is 1: Adam with decoupled
    weight decay added to the update."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
    ):
        super().__init__(params, lr, b1, b2, eps, weight_decay)
        self.adam = adam

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        # the state may live on another device than the parameter (offloaded): compute there, bring the update back
        w = p.detach()
        m, v = self._moments(i, g.to(self.m[i].device))
        m_hat = m / (1 - self.b1_t.to(m.device)).cast(p.dtype)
        v_hat = v / (1 - self.b2_t.to(m.device)).cast(p.dtype)
        up = (m_hat / (v_hat.sqrt() + self.eps)).to(p.device) + w * self.weight_decay
        if self.adam:
            return [m, v, p.assign(w - up * self.lr.cast(p.dtype))]
        r1, r2 = (w * w).sum().sqrt(), (up * up).sum().sqrt()
        trust = ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
        return [m, v, p.assign(w - up * (self.lr.cast(p.dtype) * trust))]


class Muon(Optimizer):
    """Muon (torch.optim.Muon) for 2-D parameters: SGD momentum (nesterov by default) whose update is orthogonalized
    by `ns_steps` Newton-Schulz steps (Tensor.newton_schulz with `ns_coefficients`), with decoupled weight decay and
    the learning rate scaled by sqrt(max(1, rows / cols))."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315),
        eps: float = 1e-7,
        ns_steps: int = 5,
    ):
        super().__init__(params, lr)
        for p in self.params:
            if p.ndim != 2:
                raise ValueError(f"Muon updates 2-D parameters only, got one of shape {p.shape}")
        self.weight_decay, self.momentum, self.nesterov = weight_decay, momentum, nesterov
        self.ns_coefficients, self.eps, self.ns_steps = tuple(ns_coefficients), eps, ns_steps
        self.b = self._state()
        Tensor.realize(*self.params, *self.b, self.lr)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        b = self.b[i].assign(_lerp(self.b[i], g, 1 - self.momentum))
        update = _lerp(g, b, self.momentum) if self.nesterov else b
        update = update.newton_schulz(self.ns_steps, self.ns_coefficients, self.eps).cast(p.dtype)
        w = p.detach() * (1 - self.lr * self.weight_decay).cast(p.dtype)
        lr = (self.lr * math.sqrt(max(1.0, p.shape[0] / p.shape[1]))).cast(p.dtype)
        return [b, p.assign(w - update * lr)]


def _lerp(start: Tensor, end: Tensor, weight: float) -> Tensor:
    # torch's lerp, which takes the form that is exact at its nearer end
    diff = end - start
    return start + diff * weight if weight < 0.5 else end - diff * (1 - weight)
