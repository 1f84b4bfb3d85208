"""Optimizers with torch's update formulas. A step is lazy `assign`s of every parameter and every piece of optimizer
state, realized in one schedule, so the scheduler fuses the whole update into a few kernels.

Step-dependent scalars (learning rate, Adam's bias corrections) are 0-d tensors on the device, not Python numbers:
a number would be baked into the kernel source and every step would compile new kernels. They are float64 so that
1 - beta2**t keeps its digits (in float32 it loses about half of them for beta2 = 0.999), as torch's Python floats do.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from typing import Any, Callable, Sequence

from lazygrad.device import Device
from lazygrad.dtype import DType, dtypes
from lazygrad.engine.realize import CAPTURES_OPEN
from lazygrad.gradient import take_backward_roots
from lazygrad.helpers import STEP_LAYOUTS, alone_with_library_threads, library_lock
from lazygrad.nn import _own_buffer, take_pending_counts
from lazygrad.schedule.multi import whole_buffer
from lazygrad.tensor import (
    Tensor,
    _note_lazy,
    _reads_shifted,
    _realize_lock,
    _under_reshapes,
    adopt_pending,
    node_of,
)
from lazygrad.uop.ops import GroupOp, Ops, UOp
from lazygrad.uop.program import GraphProgram, Unbuilt, note_replay


def _torch_betas(name: str, b1: float, b2: float, options: dict[str, Any]) -> tuple[float, float]:
    """torch's spelling of an Adam-like optimizer's options: betas=(b1, b2); foreach, capturable and differentiable
    (accepted: every update is one fused schedule here)."""
    betas = options.pop("betas", None)
    for key in ("foreach", "capturable", "differentiable"):
        options.pop(key, None)
    if options:
        raise TypeError(f"{name}() got unexpected keyword arguments {sorted(options)}")
    if betas is not None:
        b1, b2 = betas
    _check_betas(name, b1, b2)
    return b1, b2


def _check_betas(name: str, *betas: float) -> None:
    for beta in betas:
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: invalid beta parameter {beta} (each must be in [0, 1))")


class Optimizer:
    """tinygrad's `device=` and `fused=` are taken: the state lives beside each parameter (a device other than the
    parameters' is refused), and every step's update is fused by the scheduler whatever `fused` says (tinygrad's
    fused update packs the parameters into one buffer for the same end)."""

    def __init__(self, params: Sequence[Tensor], lr: float, device: str | None = None, fused: bool | None = None):
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
        if device is not None and Device.canonicalize(device) != self.device:
            raise ValueError(
                f"the optimizer keeps its state on the parameters' device {self.device}, not on {device} "
                "(move the parameters there instead)"
            )
        self.lr = self._scalar(lr)

    def __new__(cls, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        # torch's parameter groups, [{"params": [...], "lr": ...}, ...]: one optimizer of this class per group (the
        # group's options over the call's), stepped together as an OptimizerGroup
        if cls is not OptimizerGroup and isinstance(params, (list, tuple)) and params and isinstance(params[0], dict):
            return _from_param_groups(cls, params, args, kwargs)
        return super().__new__(cls)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """torch's view of the optimizer's options: one group (an OptimizerGroup has one per part). Setting a group's
        "lr" writes the learning rate into its device scalar at once (no new kernels: an LR scheduler's step costs a
        one-value copy). SGD's "momentum" and an Adam-like optimizer's "betas" become device scalars when first
        changed (a scheduler cycling them, as OneCycleLR does, compiles nothing either; torch's bias correction with
        the current betas); other "momentum" and "weight_decay" changes take effect at the next step (new kernels:
        they are constants in the update's code)."""
        if "_groups" not in self.__dict__:
            self._groups = [_ParamGroup(self)]
        return self._groups

    # per-parameter state lists by torch's names for them (state_dict)
    _STATE_NAMES: tuple[tuple[str, str], ...] = (("b", "momentum_buffer"),)

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: {"state": {index: {name: tensor}}, "param_groups": [{options, "params": [indices]}]}, the
        tensors being the optimizer's own (as torch's). Adam-like optimizers give torch's "step" per parameter."""
        return self._state_dict(0)

    def _state_dict(self, first: int) -> dict[str, Any]:
        state: dict[int, dict[str, Any]] = {first + i: {} for i in range(len(self.params))}
        for attr, name in self._STATE_NAMES:
            for i, t in enumerate(getattr(self, attr, [])):
                state[first + i][name] = t
        if hasattr(self, "b1_t") or getattr(self, "steps", None) is not None:
            # (a step count that the update reads: Adagrad's lr_decay, Adamax's, NAdam's and RAdam's bias corrections;
            # a resumed run restarted it at 0)
            step = _steps_taken(self) if hasattr(self, "b1_t") else int(self.steps.item())
            for entry in state.values():
                entry["step"] = Tensor(float(step))
                if (mu := getattr(self, "mu_product", None)) is not None:
                    entry["mu_product"] = Tensor(float(mu.item()))
        groups = [{k: v for k, v in self.param_groups[0].items() if k != "params"}]
        groups[0]["params"] = list(range(first, first + len(self.params)))
        return {"state": {i: e for i, e in state.items() if e}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._load_state_dict(state_dict, 0)

    def _load_state_dict(self, state_dict: dict[str, Any], first: int) -> None:
        groups = state_dict.get("param_groups", [])
        group = next((g for g in groups if first in g.get("params", ())), None)
        if group is None or len(group["params"]) != len(self.params):
            raise ValueError("loaded state dict has a different number of parameters in its group than the optimizer")
        state = state_dict.get("state", {})
        for attr, name in self._STATE_NAMES:
            for i, t in enumerate(getattr(self, attr, [])):
                if (value := state.get(first + i, {}).get(name)) is not None:
                    t.assign(
                        value
                        if isinstance(value, Tensor)
                        else Tensor(value.numpy() if hasattr(value, "numpy") else value)
                    )
        steps = [
            float(e["step"].item() if hasattr(e["step"], "item") else e["step"]) for e in state.values() if "step" in e
        ]
        if hasattr(self, "b1_t") and steps:
            if self.t_dev is not None:
                b1, b2 = float(self.b1_dev.item()), float(self.b2_dev.item())
                self.t_dev.assign(float(steps[0]))
            else:
                b1, b2 = self.b1, self.b2
            self.b1_t.assign(b1 ** steps[0]), self.b2_t.assign(b2 ** steps[0])
        if getattr(self, "steps", None) is not None and steps:
            self.steps.assign(float(steps[0]))  # (Adagrad's step count for its lr_decay, Adamax's, NAdam's, RAdam's)
        products = [e["mu_product"] for e in state.values() if "mu_product" in e]
        if getattr(self, "mu_product", None) is not None and products:
            self.mu_product.assign(float(products[0].item() if hasattr(products[0], "item") else products[0]))
        if getattr(self, "damp_t", None) is not None and any("momentum_buffer" in e for e in state.values()):
            self.damp_t.assign(0.0)  # a run resumed after its first step: the next step's gradients are damped
        if "lr" in group:
            self.param_groups[0]["lr"] = group["lr"]
        for key in ("initial_lr", "max_lr", "min_lr"):
            if key in group:
                self.param_groups[0][key] = group[key]
        if written := [t for attr, _ in self._STATE_NAMES for t in getattr(self, attr, [])] + self._scalars():
            Tensor.realize(*written)  # (plain SGD has no state: realize() of nothing raised)

    def _scalars(self) -> list[Tensor]:
        names = ("b1_t", "b2_t", "damp_t", "t_dev", "b1_dev", "b2_dev", "momentum_dev", "steps", "mu_product")
        return [t for name in names if (t := getattr(self, name, None)) is not None]

    def _write_scalar(self, name: str, value: float) -> Tensor:
        """Device scalar `name` set to value from host memory: a constant would be part of the copy kernel's source,
        one new kernel a value. Made where the optimizer has none yet (a setting a scheduler changes every step,
        which as a constant of the update's kernels would compile new ones each step)."""
        scalar = getattr(self, name, None)
        if scalar is None:
            scalar = self._scalar(float(value))
            setattr(self, name, scalar)
            return scalar.realize()
        new = Tensor([float(value)], dtype=scalar.dtype, device=scalar.device).reshape(())
        return scalar.assign(new).realize()

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: v for k, v in self.param_groups[0].items() if k != "params"}

    def _scalar(self, value: float) -> Tensor:
        return _own_buffer(Tensor.full((), value, dtype=dtypes.float64, device=self.device))

    def _state(self) -> list[Tensor]:
        """Zeros shaped like each parameter, each in its own buffer."""
        return [_own_buffer(p.zeros_like()) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's: gradients dropped (None), or with set_to_none=False made zeros where there is one."""
        for p in self.params:
            p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

    def step(self, also: Sequence[Tensor] | Callable[[], Any] = ()) -> Any:
        """Update the parameters. The tensors in `also` (e.g. an accuracy count) are realized in the same schedule as
        the update, the loss backward() ran on and the gradients (as DistributedOptimizer.step's). torch's
        `step(closure)`: the closure (which zeroes the gradients, computes the loss and runs backward) is called
        first, and its loss is realized with the update and returned."""
        if callable(also):
            with Tensor.enable_grad():
                loss = also()
            self.step(() if loss is None else (loss,))
            return loss
        # the update's nodes are left unbuilt where the realize reads only their places (see _StepProgram.replay):
        # under the realize lock from the replay on, so that no other thread meets a tensor holding an unbuilt node
        with _realize_lock:
            if todo := [*also, *self._schedule_step(unbuilt=True)]:  # (none: no parameter has a gradient yet)
                Tensor.realize(*todo)
        return None

    def schedule_step(self) -> list[Tensor]:
        """The assigned tensors of one step, unrealized: pass them to one `Tensor.realize` with the loss and
        anything else the step computes, so that it all shares one schedule."""
        return self._schedule_step(unbuilt=False)

    def _schedule_step(self, unbuilt: bool) -> list[Tensor]:
        # the loss that backward() ran on and the gradients are stored by the same schedule, before the parameters
        # they read change: read after the step, they hold the values they had (as in torch), at no extra kernels
        grads = [p.grad for p in self.params if p.grad is not None]
        return take_backward_roots() + grads + self._updates(unbuilt) + self.buffers + take_pending_counts()

    def _updates(self, unbuilt: bool = False) -> list[Tensor]:
        """The state and parameter updates of one step, assigned. A step over inputs shaped as an earlier step's
        replays that one's update graph (a GraphProgram) instead of running the update code's tensor ops again;
        `unbuilt`: its nodes may be left unbuilt (the caller realizes the tensors at once, holding the realize lock)."""
        tensors = self._step_tensors()
        key = self._step_key(tensors)
        if key is not None and (program := _step_programs.get(key)) is not None:
            done = program.replay(tensors, unbuilt)
            if done is not None:
                return done
        before = [t.uop for t in tensors]
        updated = self._begin_step()
        for i, p in enumerate(self.params):
            if p.grad is not None:  # as torch: a parameter without a gradient is left alone
                updated += self._update(i, p, p.grad.detach())
        if key is not None and (program := _StepProgram.record(tensors, before, updated, key[2])) is not None:
            with _step_programs_lock:
                if len(_step_programs) >= STEP_PROGRAMS:
                    del _step_programs[next(iter(_step_programs))]
                _step_programs[key] = program
        return updated

    def _step_tensors(self) -> list[Tensor]:
        """Every tensor an update reads or assigns: the optimizer's state, then each parameter with a gradient and
        its gradient."""
        state: list[Tensor] = []
        for v in vars(self).values():
            if isinstance(v, Tensor):
                state.append(v)
            elif isinstance(v, list) and v is not self.params and v is not self.buffers:
                state += [t for t in v if isinstance(t, Tensor)]
        return state + [t for p in self.params if p.grad is not None for t in (p, p.grad)]

    def _step_key(self, tensors: list[Tensor]) -> tuple | None:
        """What an update's graph depends on besides the nodes it reads: the optimizer's settings, and each tensor's
        kind of node, dtype, shape and device, and whether assign writes it in place. None for an optimizer class
        defined elsewhere (its update code may keep Python state of its own)."""
        if type(self).__module__ != __name__:
            return None
        settings = tuple([(k, v) for k, v in vars(self).items() if type(v) in (int, float, bool, str, tuple)])
        # dtypes by their numbers (a DType hashes and compares in Python: two calls per tensor on every lookup), and
        # Tensor._is_stored's test inline (three calls per tensor): this runs on every step
        # (a stored tensor's buffer keyed with whether it shows part of its memory: a replay's race check skips the
        # reads of whole buffers, see _StepProgram.record; shape and device read off the node's cache where it holds
        # them, as a buffer view does: two property calls per tensor, every step)
        parts = []
        # each tensor's first position holding its very node: two BatchNorm biases summed into one output have one
        # gradient node, which a program names once (a pending gradient's Unbuilt is one object per node of its run)
        firsts: dict[Any, int] = {}
        multi, buffer, const, reshape = Ops.MULTI, Ops.BUFFER, Ops.CONST, Ops.RESHAPE
        for t in tensors:
            u = node_of(t)  # (a pending gradient's unbuilt node: its op, dtype and noted shape and device are known)
            first = firsts.setdefault(u, len(parts))
            op = u.op
            if op is multi:
                stored: bool | str = all(whole_buffer(p) for p in u.src)
            else:
                b = u
                while b.op is reshape:  # (_under_reshapes inline: a call per tensor)
                    b = b.src[0]
                stored = b.op is buffer and ("part" if b.arg.part else True)
            memo = u.__dict__
            shape = memo["shape"] if "shape" in memo else u.shape
            device = memo["device"] if "device" in memo else u.device
            parts.append(
                (op, u.dtype.key, shape, device, u.arg if op is const else None, t._view_of is None, stored, first)
            )
        return (type(self), settings, tuple(parts), not Tensor.is_grad_enabled(), dtypes.default_float.key)

    def _begin_step(self) -> list[Tensor]:
        """Updates of state shared by all parameters."""
        return []

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        """Assign the new value of parameter i (and its state); return the assigned tensors."""
        raise NotImplementedError

    def _ascent_and_decay(self, p: Tensor, g: Tensor) -> Tensor:
        """torch's first two lines of most updates: the gradient negated with maximize, then weight decay added to it
        (the classic, coupled kind)."""
        if getattr(self, "maximize", False):
            g = -g
        return g + p.detach() * self.weight_decay if self.weight_decay else g


class SGD(Optimizer):
    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        classic: bool = False,
        device: str | None = None,
        fused: bool | None = None,
        **torch_options: Any,
    ):
        """torch's SGD; `classic` (tinygrad's): the momentum buffer accumulates lr * gradient (the parameter moves by
        the buffer), where torch's accumulates the gradient (the parameter moves by lr * buffer). The two agree
        while the learning rate stays the same."""
        super().__init__(params, lr, device, fused)
        dampening = torch_options.pop("dampening", 0.0)
        self.maximize = bool(torch_options.pop("maximize", False))
        for key in ("foreach", "differentiable"):
            torch_options.pop(key, None)
        if torch_options:
            raise TypeError(f"SGD() got unexpected keyword arguments {sorted(torch_options)}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.weight_decay, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
        self.dampening = float(dampening)
        # a zero buffer gives torch's first step (buf = grad) exactly: momentum * 0 + grad == grad. With dampening
        # torch's later steps add (1 - dampening) * grad: the gradient's weight is 1 + dampening * t, where t is a
        # device scalar that is 0 in the first step and -1 from the second on (a Python number would be a constant
        # of the kernels, and the first step's would differ from every other's)
        self.b = self._state() if momentum else []
        self.damp_t = self._scalar(1.0) if momentum and self.dampening else None
        self.momentum_dev: Tensor | None = None  # the momentum, once a scheduler changes it (param_groups)
        Tensor.realize(*self.params, *self.b, *self._scalars(), self.lr)

    def _begin_step(self) -> list[Tensor]:
        return [] if self.damp_t is None else [self.damp_t.assign((self.damp_t - 1).maximum(-1))]

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        g = self._ascent_and_decay(p, g)
        if self.classic:
            g = g * self.lr.cast(p.dtype)
        out = []
        if self.momentum:
            momentum = self.momentum if self.momentum_dev is None else self.momentum_dev.cast(p.dtype)
            step_g = g if self.damp_t is None else g * (1 + self.dampening * self.damp_t).cast(p.dtype)
            b = self.b[i].assign(self.b[i] * momentum + step_g)
            g = g + b * momentum if self.nesterov else b
            out.append(b)
        return out + [p.assign(p.detach() - (g if self.classic else g * self.lr.cast(p.dtype)))]


class _Moments(Optimizer):
    """The state Adam and LAMB share: first and second moments per parameter and beta1^t, beta2^t."""

    _STATE_NAMES = (("m", "exp_avg"), ("v", "exp_avg_sq"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float,
        b1: float,
        b2: float,
        eps: float,
        weight_decay: float,
        device: str | None = None,
        fused: bool | None = None,
    ):
        super().__init__(params, lr, device, fused)
        self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
        self.m, self.v = self._state(), self._state()
        self.b1_t, self.b2_t = self._scalar(1.0), self._scalar(1.0)  # beta ** step
        # once a scheduler changes the betas (param_groups): the betas and the step count as device scalars, and
        # beta ** step is torch's, the current beta to the power of the step
        self.b1_dev: Tensor | None = None
        self.b2_dev: Tensor | None = None
        self.t_dev: Tensor | None = None
        Tensor.realize(*self.params, *self.m, *self.v, self.lr, self.b1_t, self.b2_t)

    def _set_betas(self, b1: float, b2: float) -> None:
        _check_betas(type(self).__name__, b1, b2)
        if self.t_dev is None:
            if (b1, b2) == (self.b1, self.b2):
                return
            self.t_dev = self._scalar(float(_steps_taken(self))).realize()
        self._write_scalar("b1_dev", b1), self._write_scalar("b2_dev", b2)

    def _begin_step(self) -> list[Tensor]:
        if self.t_dev is None:
            return [self.b1_t.assign(self.b1_t * self.b1), self.b2_t.assign(self.b2_t * self.b2)]
        t = self.t_dev.assign(self.t_dev + 1)
        return [t, self.b1_t.assign(self.b1_dev**t), self.b2_t.assign(self.b2_dev**t)]

    def _moments(self, i: int, g: Tensor) -> tuple[Tensor, Tensor]:
        """Parameter i's moments updated with gradient g (assigned, not yet realized)."""
        m, v = self.m[i], self.v[i]
        if self.b1_dev is None:
            b1, b2 = self.b1, self.b2
        else:
            b1, b2 = self.b1_dev.cast(g.dtype), self.b2_dev.cast(g.dtype)  # type: ignore[union-attr]
        m.assign(_lerp(m, g, 1 - b1))
        v.assign(v * b2 + g * (1 - b2) * g)
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
        device: str | None = None,
        fused: bool | None = None,
        **torch_options: Any,
    ):
        amsgrad, maximize = torch_options.pop("amsgrad", False), torch_options.pop("maximize", False)
        b1, b2 = _torch_betas(type(self).__name__, b1, b2, torch_options)
        super().__init__(params, lr, b1, b2, eps, weight_decay, device, fused)
        self.decoupled, self.maximize = decoupled, bool(maximize)
        # amsgrad: the largest second moment seen so far is the denominator's (torch's max_exp_avg_sq)
        self.vmax = self._state() if amsgrad else []
        if amsgrad:
            self._STATE_NAMES = (*self._STATE_NAMES, ("vmax", "max_exp_avg_sq"))
            Tensor.realize(*self.vmax)
        self._bias: dict[DType, tuple[Tensor, Tensor]] = {}  # this step's bias corrections, see _bias_terms

    def _updates(self, unbuilt: bool = False) -> list[Tensor]:
        try:
            return super()._updates(unbuilt)
        finally:
            # the bias terms are lazy tensors over b1_t and b2_t: kept, the next step (which overwrites those) computed
            # them first as live readers of its writes, and only after a step that ran the update code (a replayed
            # one builds none): that step's kernels differed from every other's
            self._bias = {}

    def _bias_terms(self, dtype: DType) -> tuple[Tensor, Tensor]:
        """This step's lr / (1 - b1^t) and sqrt(1 - b2^t) in `dtype`: built once per step and dtype, not once per
        parameter (the same nodes either way; the tensor ops building them are what costs)."""
        if dtype not in self._bias:
            step_size = (self.lr / (1 - self.b1_t)).cast(dtype)
            self._bias[dtype] = (step_size, (1 - self.b2_t).sqrt().cast(dtype))
        return self._bias[dtype]

    @property
    def amsgrad(self) -> bool:
        return bool(self.vmax)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w = p.detach()
        if self.maximize:
            g = -g
        if self.weight_decay and self.decoupled:
            w = w * (1 - self.lr * self.weight_decay).cast(p.dtype)
        elif self.weight_decay:
            g = g + w * self.weight_decay
        m, v = self._moments(i, g)
        state = [m, v]
        if self.vmax:
            v = self.vmax[i].assign(self.vmax[i].maximum(v))
            state.append(v)
        step_size, bias2 = self._bias_terms(p.dtype)
        denom = v.sqrt() / bias2 + self.eps
        return [*state, p.assign(w - step_size * m / denom)]


class AdamW(Adam):
    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        device: str | None = None,
        fused: bool | None = None,
        **torch_options: Any,
    ):
        super().__init__(params, lr, b1, b2, eps, weight_decay, True, device, fused, **torch_options)


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
        device: str | None = None,
        fused: bool | None = None,
        **torch_options: Any,
    ):
        b1, b2 = _torch_betas(type(self).__name__, b1, b2, torch_options)
        super().__init__(params, lr, b1, b2, eps, weight_decay, device, fused)
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
        device: str | None = None,
        fused: bool | None = None,
    ):
        super().__init__(params, lr, device, fused)
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


class LARS(Optimizer):
    """LARS (You et al. 2017, tinygrad's LARS): SGD whose step for each parameter is scaled by the trust ratio
    tcoef * ||w|| / (||g|| + weight_decay * ||w||) (1 where a norm is 0; tcoef=0: no scaling). pre_wd adds the weight
    decay to the gradient first, else it is added to the update after the momentum, scaled by lr (Muon's way).
    `classic`: the momentum buffer accumulates the lr-scaled step (as SGD(classic=True)), else the step is scaled by lr
    after the momentum. With ns_coefficients, the step is orthogonalized by ns_steps Newton-Schulz steps after the
    momentum (the parameter is seen as a matrix of its first dim by the rest)."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        ns_steps: int = 0,
        ns_coefficients: Sequence[float] | None = None,
        nesterov: bool = False,
        classic: bool = True,
        pre_wd: bool = True,
        tcoef: float = 0.001,
        device: str | None = None,
        fused: bool | None = None,
    ):
        if momentum < 0:
            raise ValueError(f"LARS needs momentum >= 0, got {momentum}")
        super().__init__(params, lr, device, fused)
        self.momentum, self.weight_decay, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
        self.ns_steps, self.ns_coefficients = ns_steps, tuple(ns_coefficients) if ns_coefficients else ()
        self.pre_wd, self.tcoef = pre_wd, tcoef
        self.b = self._state() if momentum else []
        Tensor.realize(*self.params, *self.b, self.lr)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w = p.detach()
        lr = self.lr.cast(p.dtype)
        if self.tcoef:
            r1, r2 = w.square().sum().sqrt(), g.square().sum().sqrt()
            trust = ((r1 > 0) & (r2 > 0)).where(self.tcoef * r1 / (r2 + self.weight_decay * r1), 1.0)
            step_lr = lr * trust
        else:
            step_lr = lr
        if self.pre_wd and self.weight_decay:
            g = g + w * self.weight_decay
        if self.classic:
            g = g * step_lr
        out = []
        if self.momentum:
            b = self.b[i].assign(self.b[i] * self.momentum + g)
            g = g + b * self.momentum if self.nesterov else b
            out.append(b)
        if self.ns_coefficients:
            g = g.reshape(g.shape[0], -1).newton_schulz(self.ns_steps, self.ns_coefficients).reshape(g.shape)
        if not self.classic:
            g = g * step_lr
        if not self.pre_wd and self.weight_decay:
            g = g + w * (lr * self.weight_decay)
        return out + [p.assign(w - g.cast(p.dtype))]


class RMSprop(Optimizer):
    """torch's RMSprop: the step divides by the root of a running average of squared gradients (centered: minus the
    square of the running average gradient), with optional momentum."""

    _STATE_NAMES = (("v", "square_avg"), ("b", "momentum_buffer"), ("gavg", "grad_avg"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        device: str | None = None,
        fused: bool | None = None,
    ):
        if not 0.0 <= alpha or not 0.0 <= eps or not 0.0 <= momentum or not 0.0 <= weight_decay:
            raise ValueError(f"RMSprop: invalid alpha {alpha}, eps {eps}, momentum {momentum} or weight_decay")
        super().__init__(params, lr, device, fused)
        self.alpha, self.eps, self.weight_decay, self.momentum = alpha, eps, weight_decay, momentum
        self.centered, self.maximize = centered, maximize
        self.v = self._state()
        self.b = self._state() if momentum else []
        self.gavg = self._state() if centered else []
        Tensor.realize(*self.params, *self.v, *self.b, *self.gavg, self.lr)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g = p.detach(), self._ascent_and_decay(p, g)
        v = self.v[i].assign(self.v[i] * self.alpha + g * g * (1 - self.alpha))
        out = [v]
        if self.centered:
            gavg = self.gavg[i].assign(_lerp(self.gavg[i], g, 1 - self.alpha))
            avg = (v - gavg * gavg).sqrt() + self.eps
            out.append(gavg)
        else:
            avg = v.sqrt() + self.eps
        lr = self.lr.cast(p.dtype)
        if self.momentum:
            b = self.b[i].assign(self.b[i] * self.momentum + g / avg)
            return [*out, b, p.assign(w - b * lr)]
        return [*out, p.assign(w - g / avg * lr)]


class Adagrad(Optimizer):
    """torch's Adagrad: the step divides by the root of the sum of squared gradients; lr_decay shrinks the rate as
    lr / (1 + (step - 1) * lr_decay), the step count a device scalar (a Python number would be a constant of the
    kernels)."""

    _STATE_NAMES = (("sum", "sum"),)

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        device: str | None = None,
    ):
        if not 0.0 <= lr_decay or not 0.0 <= weight_decay or not 0.0 <= initial_accumulator_value or not 0.0 <= eps:
            raise ValueError("Adagrad: lr_decay, weight_decay, initial_accumulator_value and eps must be >= 0")
        super().__init__(params, lr, device, fused)
        self.lr_decay, self.weight_decay, self.eps, self.maximize = lr_decay, weight_decay, eps, maximize
        self.sum = [_own_buffer(p.full_like(initial_accumulator_value)) for p in self.params]
        self.steps = self._scalar(0.0) if lr_decay else None
        Tensor.realize(*self.params, *self.sum, self.lr, *([self.steps] if lr_decay else []))

    def _begin_step(self) -> list[Tensor]:
        return [] if self.steps is None else [self.steps.assign(self.steps + 1)]

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g = p.detach(), self._ascent_and_decay(p, g)
        lr = self.lr if self.steps is None else self.lr / (1 + (self.steps - 1) * self.lr_decay)
        total = self.sum[i].assign(self.sum[i] + g * g)
        return [total, p.assign(w - g / (total.sqrt() + self.eps) * lr.cast(p.dtype))]


class _Counted(Optimizer):
    """An optimizer whose update reads the step number: a device scalar counted up by each step (as a Python number it
    would be a constant of the kernels, new ones every step), torch's "step" in the state dict."""

    def _begin_step(self) -> list[Tensor]:
        return [self.steps.assign(self.steps + 1)]

    def _beta_power(self, beta: float) -> Tensor:
        return Tensor.full((), beta, dtype=dtypes.float64, device=self.device).pow(self.steps)

    def _moments_init(
        self, name: str, betas: tuple[float, float], eps: float, weight_decay: float, maximize: bool, decoupled: bool
    ) -> None:
        """NAdam's and RAdam's options and state: the betas (checked), the two moments and the step count."""
        _check_betas(name, *betas)
        (self.b1, self.b2), self.eps, self.weight_decay = betas, eps, weight_decay
        self.maximize, self.decoupled = maximize, decoupled
        self.m, self.v, self.steps = self._state(), self._state(), self._scalar(0.0)

    def _moments_decayed(self, i: int, p: Tensor, g: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """NAdam's and RAdam's first lines: the weight and gradient after maximize and weight decay (coupled, or
        decoupled as AdamW's), then the two moments, assigned."""
        w, g = p.detach(), -g if self.maximize else g
        if self.weight_decay:
            if self.decoupled:
                w = w * (1 - self.lr * self.weight_decay).cast(p.dtype)
            else:
                g = g + w * self.weight_decay
        m = self.m[i].assign(_lerp(self.m[i], g, 1 - self.b1))
        v = self.v[i].assign(self.v[i] * self.b2 + g * g * (1 - self.b2))
        return w, g, m, v


class Adamax(_Counted):
    """torch's Adamax: Adam with the infinity norm, u = max(beta2 * u, |g| + eps), step lr / (1 - beta1^t) * m / u."""

    _STATE_NAMES = (("m", "exp_avg"), ("u", "exp_inf"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
        device: str | None = None,
    ):
        _check_betas("Adamax", *betas)
        super().__init__(params, lr, device)
        (self.b1, self.b2), self.eps, self.weight_decay, self.maximize = betas, eps, weight_decay, maximize
        self.m, self.u, self.steps = self._state(), self._state(), self._scalar(0.0)
        Tensor.realize(*self.params, *self.m, *self.u, self.lr, self.steps)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g = p.detach(), self._ascent_and_decay(p, g)
        m = self.m[i].assign(_lerp(self.m[i], g, 1 - self.b1))
        u = self.u[i].assign((self.u[i] * self.b2).maximum(g.abs() + self.eps))
        step = (self.lr / (1 - self._beta_power(self.b1))).cast(p.dtype)
        return [m, u, p.assign(w - m / u * step)]


class NAdam(_Counted):
    """torch's NAdam: Adam with Nesterov momentum whose factor mu_t = beta1 * (1 - 0.5 * 0.96^(t * momentum_decay))
    warms up over the steps; decoupled_weight_decay as AdamW's."""

    _STATE_NAMES = (("m", "exp_avg"), ("v", "exp_avg_sq"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        device: str | None = None,
    ):
        super().__init__(params, lr, device)
        self._moments_init("NAdam", betas, eps, weight_decay, maximize, decoupled_weight_decay)
        self.momentum_decay = momentum_decay
        self.mu_product = self._scalar(1.0)  # (one for all parameters: torch keeps a copy per parameter, all equal)
        Tensor.realize(*self.params, *self.m, *self.v, self.lr, self.steps, self.mu_product)

    def _mu(self, t: Tensor) -> Tensor:
        return self.b1 * (
            1 - 0.5 * Tensor.full((), 0.96, dtype=dtypes.float64, device=self.device).pow(t * self.momentum_decay)
        )

    def _begin_step(self) -> list[Tensor]:
        steps = self.steps.assign(self.steps + 1)
        return [steps, self.mu_product.assign(self.mu_product * self._mu(steps))]

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g, m, v = self._moments_decayed(i, p, g)
        denom = (v / (1 - self._beta_power(self.b2)).cast(p.dtype)).sqrt() + self.eps
        mu, mu_next, product = self._mu(self.steps), self._mu(self.steps + 1), self.mu_product
        now = (self.lr * (1 - mu) / (1 - product)).cast(p.dtype)
        ahead = (self.lr * mu_next / (1 - product * mu_next)).cast(p.dtype)
        return [m, v, p.assign(w - g / denom * now - m / denom * ahead)]


class RAdam(_Counted):
    """torch's RAdam: Adam whose adaptive step is rectified by the variance of its running average, plain momentum
    SGD while that variance is not yet tractable (rho_t <= 5: a select on the device, no Python branch)."""

    _STATE_NAMES = (("m", "exp_avg"), ("v", "exp_avg_sq"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        device: str | None = None,
    ):
        super().__init__(params, lr, device)
        self._moments_init("RAdam", betas, eps, weight_decay, maximize, decoupled_weight_decay)
        Tensor.realize(*self.params, *self.m, *self.v, self.lr, self.steps)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g, m, v = self._moments_decayed(i, p, g)
        b1t, b2t, t = self._beta_power(self.b1), self._beta_power(self.b2), self.steps
        rho_inf = 2 / (1 - self.b2) - 1
        rho = rho_inf - 2 * t * b2t / (1 - b2t)
        rect = ((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)).maximum(0).sqrt()
        adaptive = (1 - b2t).sqrt().cast(p.dtype) / (v.sqrt() + self.eps)
        lr = (self.lr / (1 - b1t)).cast(p.dtype)
        step = (rho > 5).where(m * lr * rect.cast(p.dtype) * adaptive, m * lr)
        return [m, v, p.assign(w - step)]


class Adadelta(Optimizer):
    """torch's Adadelta: the step is the gradient scaled by the root of a running average of squared steps over the
    root of a running average of squared gradients, times lr (1.0)."""

    _STATE_NAMES = (("sq", "square_avg"), ("acc", "acc_delta"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
        device: str | None = None,
    ):
        if not 0.0 <= rho <= 1.0 or not 0.0 <= eps or not 0.0 <= weight_decay:
            raise ValueError(f"Adadelta: invalid rho {rho}, eps {eps} or weight_decay {weight_decay}")
        super().__init__(params, lr, device)
        self.rho, self.eps, self.weight_decay, self.maximize = rho, eps, weight_decay, maximize
        self.sq, self.acc = self._state(), self._state()
        Tensor.realize(*self.params, *self.sq, *self.acc, self.lr)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g = p.detach(), self._ascent_and_decay(p, g)
        sq = self.sq[i].assign(self.sq[i] * self.rho + g * g * (1 - self.rho))
        delta = (self.acc[i] + self.eps).sqrt() / (sq + self.eps).sqrt() * g
        acc = self.acc[i].assign(self.acc[i] * self.rho + delta * delta * (1 - self.rho))
        return [sq, acc, p.assign(w - delta * self.lr.cast(p.dtype))]


class Rprop(Optimizer):
    """torch's Rprop: each weight's step size grows by etas[1] while its gradient keeps its sign and shrinks by
    etas[0] when it flips (that step then moves nothing), within step_sizes; the step is the gradient's sign."""

    _STATE_NAMES = (("prev", "prev"), ("size", "step_size"))

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50.0),
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        device: str | None = None,
    ):
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, lr, device)
        self.etas, self.step_sizes, self.maximize = tuple(etas), tuple(step_sizes), maximize
        self.prev = self._state()
        self.size = [_own_buffer(p.full_like(lr)) for p in self.params]
        Tensor.realize(*self.params, *self.prev, *self.size, self.lr)

    def _update(self, i: int, p: Tensor, g: Tensor) -> list[Tensor]:
        w, g = p.detach(), -g if self.maximize else g
        turn = (g * self.prev[i]).sign()
        factor = (turn > 0).where(self.etas[1], (turn < 0).where(self.etas[0], 1.0)).cast(p.dtype)
        size = self.size[i].assign((self.size[i] * factor).clip(*self.step_sizes))
        g = (turn < 0).where(0.0, g)
        prev = self.prev[i].assign(g)
        return [size, prev, p.assign(w - g.sign() * size)]


class LBFGS(Optimizer):
    """torch's L-BFGS: each step(closure) runs up to max_iter iterations along a direction built from the last
    history_size (step, gradient change) pairs, with a fixed step size lr (the first iteration's scaled down by the
    gradient's L1 norm), or the step that line_search_fn="strong_wolfe" finds. Host-driven as torch's: every
    iteration reads a few scalars (the loss, gradient checks), so its vectors are realized per iteration."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
        device: str | None = None,
    ):
        if line_search_fn not in (None, "strong_wolfe"):
            raise RuntimeError("only 'strong_wolfe' is supported")
        self.line_search_fn = line_search_fn
        if isinstance(params, (list, tuple)) and params and isinstance(params[0], dict):
            (group,) = params  # (one group: __new__ refused more)
            if other := sorted(set(group) - {"params", "lr"}):
                raise ValueError(f"LBFGS takes {other} as arguments, not in a parameter group")
            lr = group.get("lr", lr)
            params = [group["params"]] if isinstance(group["params"], Tensor) else list(group["params"])
        super().__init__(params, lr, device)
        self.max_iter, self.max_eval = max_iter, max_eval if max_eval is not None else max_iter * 5 // 4
        self.tolerance_grad, self.tolerance_change, self.history_size = tolerance_grad, tolerance_change, history_size
        self.n_iter = self.func_evals = 0
        self.d: Tensor | None = None
        self.t: float | Tensor = lr
        self.old_dirs: list[Tensor] = []
        self.old_stps: list[Tensor] = []
        self.ro: list[Tensor] = []
        self.h_diag: float | Tensor = 1.0
        self.prev_flat_grad: Tensor | None = None
        Tensor.realize(*self.params, self.lr)

    def __new__(cls, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(params, (list, tuple)) and len(params) > 1 and isinstance(params[0], dict):
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        return object.__new__(cls)

    def _flat_grad(self) -> Tensor:
        grads = [p.grad.detach().flatten() if p.grad is not None else p.zeros_like().flatten() for p in self.params]
        return Tensor.cat(grads).realize()

    def _move(self, t: float | Tensor, d: Tensor) -> None:
        offset = 0
        for p in self.params:
            p.assign(p.detach() + d[offset : offset + p.numel()].reshape(p.shape) * t)
            offset += p.numel()
        Tensor.realize(*self.params)

    def _direction(self, flat_grad: Tensor) -> Tensor:
        """The two-loop recursion: the inverse Hessian estimate from the history times the negative gradient."""
        assert self.d is not None and self.prev_flat_grad is not None
        y, s = flat_grad - self.prev_flat_grad, self.d * self.t
        ys = y.dot(s).realize()
        if ys.item() > 1e-10:
            if len(self.old_dirs) == self.history_size:
                self.old_dirs.pop(0), self.old_stps.pop(0), self.ro.pop(0)
            self.old_dirs.append(y.realize()), self.old_stps.append(s.realize()), self.ro.append((1.0 / ys).realize())
            self.h_diag = (ys / y.dot(y)).realize()
        al: list[Tensor] = []
        q = -flat_grad
        for stp, dr, ro in zip(reversed(self.old_stps), reversed(self.old_dirs), reversed(self.ro)):
            al.insert(0, (stp.dot(q) * ro).realize())
            q = (q - dr * al[0]).realize()
        r = (q * self.h_diag).realize()
        for stp, dr, ro, a in zip(self.old_stps, self.old_dirs, self.ro, al):
            r = (r + stp * (a - dr.dot(r) * ro)).realize()
        return r

    def _evaluate(self, closure: Callable[[], Tensor]) -> tuple[float, Tensor]:
        with Tensor.enable_grad():
            loss = float(closure().item())
        return loss, self._flat_grad()

    def _probe(self, closure: Callable[[], Tensor]) -> Callable[[float], tuple[float, Tensor]]:
        """The loss and gradient a step of t along d would give, the parameters put back after."""
        start = [p.detach().clone().realize() for p in self.params]

        def at(t: float, d: Tensor) -> tuple[float, Tensor]:
            self._move(t, d)
            out = self._evaluate(closure)
            for p, p0 in zip(self.params, start):
                p.assign(p0)
            Tensor.realize(*self.params)
            return out

        return at

    def step(self, closure: Callable[[], Tensor]) -> Any:  # type: ignore[override]
        lr = _read_lr(self)
        with Tensor.enable_grad():
            orig_loss = closure()
        loss, evals = float(orig_loss.item()), 1
        self.func_evals += 1
        flat_grad = self._flat_grad()
        if flat_grad.abs().max().item() <= self.tolerance_grad:
            return orig_loss
        n_iter = 0
        while n_iter < self.max_iter:
            n_iter += 1
            self.n_iter += 1
            if self.n_iter == 1:
                self.d, self.old_dirs, self.old_stps, self.ro, self.h_diag = (-flat_grad).realize(), [], [], [], 1.0
            else:
                self.d = self._direction(flat_grad)
            self.prev_flat_grad, prev_loss = flat_grad, loss
            self.t = lr
            if self.n_iter == 1:  # torch's min(1, 1 / |g|_1) * lr, in the gradient's dtype
                inv = (1.0 / flat_grad.abs().sum()).realize()
                self.t = (inv * lr).realize() if inv.item() < 1.0 else lr
            gtd = flat_grad.dot(self.d).item()
            if gtd > -self.tolerance_change:
                break
            done = False
            if self.line_search_fn is not None:
                t = float(self.t.item()) if isinstance(self.t, Tensor) else self.t
                loss, flat_grad, self.t, ls_evals = _strong_wolfe(
                    self._probe(closure), t, self.d, loss, flat_grad, gtd, self.tolerance_change
                )
                self._move(self.t, self.d)
                done = flat_grad.abs().max().item() <= self.tolerance_grad
                evals += ls_evals
                self.func_evals += ls_evals
            else:
                self._move(self.t, self.d)
                if n_iter != self.max_iter:
                    loss, flat_grad = self._evaluate(closure)
                    done = flat_grad.abs().max().item() <= self.tolerance_grad
                    evals += 1
                    self.func_evals += 1
            if n_iter == self.max_iter or evals >= self.max_eval or done:
                break
            moved = (self.d * self.t).abs().max().item()
            if moved <= self.tolerance_change or abs(loss - prev_loss) < self.tolerance_change:
                break
        return orig_loss


def _cubic_min(
    x1: float, f1: float, g1: float, x2: float, f2: float, g2: float, bounds: tuple[float, float] | None = None
) -> float:
    """The minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clamped to bounds (default: the
    two points); their midpoint where the cubic has no minimum."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)


def _strong_wolfe(
    probe: Callable[[float, Tensor], tuple[float, Tensor]],
    t: float,
    d: Tensor,
    f: float,
    g: Tensor,
    gtd: float,
    tolerance_change: float,
    c1: float = 1e-4,
    c2: float = 0.9,
    max_ls: int = 25,
) -> tuple[float, Tensor, float, int]:
    """torch's line search for a step t along d meeting the strong Wolfe conditions (sufficient decrease c1, curvature
    c2): steps grow until a bracket holds a minimum, which is then zoomed by cubic interpolation.
    Returns (loss, gradient, t, evaluations)."""
    d_norm = d.abs().max().item()
    f_new, g_new = probe(t, d)
    evals, gtd_new = 1, g_new.dot(d).item()
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done, ls_iter = False, 0
    while ls_iter < max_ls:
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            break
        if abs(gtd_new) <= -c2 * gtd:
            done = True
            break
        if gtd_new >= 0:
            break
        bounds = (t + 0.01 * (t - t_prev), t * 10)
        t_prev, t = t, _cubic_min(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds)
        f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
        f_new, g_new = probe(t, d)
        evals, gtd_new, ls_iter = evals + 1, g_new.dot(d).item(), ls_iter + 1
    if done:
        bracket, bracket_f, bracket_g, bracket_gtd = [t], [f_new], [g_new], [gtd_new]
    elif ls_iter == max_ls:
        bracket, bracket_f, bracket_g, bracket_gtd = [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new]
    else:
        bracket, bracket_f, bracket_g, bracket_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
    # zoom: shrink the bracket around a point meeting both conditions
    insufficient = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_min(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        # a point too near an end makes little progress: moved inside, by a tenth of the bracket
        top, bottom = max(bracket), min(bracket)
        eps = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < eps:
            if insufficient or t >= top or t <= bottom:
                t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new = probe(t, d)
        evals, gtd_new, ls_iter = evals + 1, g_new.dot(d).item(), ls_iter + 1
        if f_new > f + c1 * t * gtd or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high], bracket_g[high], bracket_gtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low], bracket_g[low], bracket_gtd[low] = t, f_new, g_new, gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evals


def _steps_taken(opt: Any) -> int:
    """Steps an Adam-like optimizer has taken: its step count where it keeps one, else t from its running beta1**t
    (beta2**t where beta1 is 0)."""
    if getattr(opt, "t_dev", None) is not None:
        return int(opt.t_dev.item())
    for beta, power in ((opt.b1, opt.b1_t), (opt.b2, opt.b2_t)):
        if 0.0 < beta < 1.0:
            return round(math.log(max(float(power.item()), 1e-300)) / math.log(beta))
    return 0


def _from_param_groups(cls: type, groups: Sequence[dict[str, Any]], args: tuple, kwargs: dict[str, Any]) -> Any:
    sig = inspect.signature(cls.__init__)
    bound = sig.bind_partial(None, None, *args, **kwargs).arguments
    varkw = next((p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    base = {k: v for k, v in bound.items() if k not in ("self", "params", varkw)}
    base.update(bound.get(varkw, {}) if varkw else {})
    parts = []
    for group in groups:
        options = dict(group)
        if "params" not in options:
            raise ValueError("a parameter group needs 'params'")
        params = options.pop("params")
        parts.append(cls([params] if isinstance(params, Tensor) else list(params), **{**base, **options}))
    return OptimizerGroup(*parts)


class _ParamGroup(dict):
    """One entry of Optimizer.param_groups: a dict of the optimizer's options whose writes reach the optimizer."""

    def __init__(self, opt: Optimizer):
        super().__init__(params=opt.params, lr=_read_lr(opt))
        for key in ("momentum", "dampening", "weight_decay", "eps", "nesterov", "amsgrad", "maximize"):
            if hasattr(opt, key):
                super().__setitem__(key, getattr(opt, key))
        if hasattr(opt, "b1"):
            super().__setitem__("betas", (opt.b1, opt.b2))
        self.opt = opt

    def __getitem__(self, key: str) -> Any:
        if key == "lr":
            return _read_lr(self.opt)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __setitem__(self, key: str, value: Any) -> None:
        opt = self.opt
        if key == "lr":
            # the value from host memory: a constant would be part of the copy kernel's source, one new kernel a value
            new = Tensor([float(value)], dtype=opt.lr.dtype, device=opt.lr.device).reshape(())
            opt.lr.assign(new).realize()
            opt.__dict__["_lr_written"] = (opt.lr.uop, float(value))
        elif key == "betas" and isinstance(opt, _Moments):
            opt._set_betas(float(value[0]), float(value[1]))
        elif key == "momentum" and isinstance(opt, SGD):
            if value != self.get("momentum") or opt.momentum_dev is not None:
                if value and not opt.momentum:  # torch's buffers start at the first step with momentum: zeros here
                    opt.b, opt.momentum = opt._state(), float(value)
                    if opt.dampening:
                        opt.damp_t = opt._scalar(1.0)
                    Tensor.realize(*opt.b, *opt._scalars())
                opt._write_scalar("momentum_dev", value)
        elif key in ("momentum", "weight_decay") and hasattr(opt, key):
            if key == "momentum" and value and not getattr(opt, "momentum", 0):
                raise NotImplementedError("momentum can be changed only on an optimizer made with momentum")
            setattr(opt, key, value)
        super().__setitem__(key, float(value) if key == "lr" else value)


def _read_lr(opt: Optimizer) -> float:
    """The learning rate as a number: the last one written through param_groups, else read from the device (where
    tinygrad-style code assigned opt.lr itself)."""
    written = opt.__dict__.get("_lr_written")
    if written is not None and written[0] is opt.lr.uop:
        return written[1]
    value = float(opt.lr.item())
    opt.__dict__["_lr_written"] = (opt.lr.uop, value)
    return value


class OptimizerGroup(Optimizer):
    """Several optimizers stepped as one (tinygrad's OptimizerGroup): e.g. Muon for the matrices and AdamW for the
    rest. One step realizes every optimizer's update in one schedule."""

    def __init__(self, *optimizers: Optimizer):  # (no Optimizer.__init__: the parts hold the parameters and state)
        if not optimizers:
            raise ValueError("OptimizerGroup needs at least one optimizer")
        self.optimizers = optimizers
        self.params = [p for o in optimizers for p in o.params]
        self.buffers = [b for o in optimizers for b in o.buffers]
        self.device = optimizers[0].device

    def __getitem__(self, i: int) -> Optimizer:
        return self.optimizers[i]

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for o in self.optimizers for g in o.param_groups]

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": {}, "param_groups": []}
        first = 0
        for o in self.optimizers:
            part = o._state_dict(first)
            out["state"].update(part["state"])
            out["param_groups"] += part["param_groups"]
            first += len(o.params)
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        first = 0
        for o in self.optimizers:
            o._load_state_dict(state_dict, first)
            first += len(o.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none)

    def _schedule_step(self, unbuilt: bool) -> list[Tensor]:
        grads = [p.grad for p in self.params if p.grad is not None]
        updates = [t for o in self.optimizers for t in o._updates(unbuilt)]
        return take_backward_roots() + grads + updates + self.buffers + take_pending_counts()


class _StepProgram:
    """One step's updates as a GraphProgram over the nodes of the optimizer's tensors: which tensors were assigned
    (their new nodes are the program's outputs) and which the step returned. For assign's race check on a replay,
    each assigned value's inputs: those whose own shifted reads it inherits (other than whole buffers, which read
    nothing shifted), and those a movement op of the program itself views (see replay)."""

    def __init__(self, program: GraphProgram, assigned: list[int], returned: list[int], reads: list[tuple]):
        self.program, self.assigned, self.returned, self.reads = program, assigned, returned, reads

    @staticmethod
    def record(tensors: list[Tensor], before: list[UOp], updated: list[Tensor], parts: tuple) -> _StepProgram | None:
        """None unless every update was a plain in-place write (an ASSIGN over the tensor's own buffer, with no copy
        of the value first). A node held by several tensors is the program's input at its first position, as the
        step's key (`parts`) says; None where the built nodes repeat otherwise (unbuilt gradients of two runs built
        into one node): a replay keyed so would read another position's node."""
        at = {id(t): j for j, t in enumerate(tensors)}
        if any(id(t) not in at for t in updated):
            return None
        firsts: dict[UOp, int] = {}
        if any(firsts.setdefault(u, j) != part[-1] for j, (u, part) in enumerate(zip(before, parts))):
            return None
        assigned = [j for j, t in enumerate(tensors) if t.uop is not before[j]]
        for j in assigned:
            u = tensors[j].uop
            if u.op is not Ops.ASSIGN or u.src[0] is not before[j] or u.src[1].op is Ops.CONTIGUOUS:
                return None
        recorded = GraphProgram.record(before, [tensors[j].uop for j in assigned], repeats=True)
        if recorded is None:
            return None
        program, pos = recorded
        reads = _program_reads(program, len(before))
        values = [pos[tensors[j].uop.src[1]] for j in assigned]
        # an input over a whole buffer (a parameter, a piece of state: what the step's key calls stored and not part)
        # reads nothing shifted: the replay's check asks only the others (a digits CNN step: 50 -> 16 looks)
        whole = [_whole_buffer(u) for u in before]
        checks = [
            (tuple(k for k in inherited if not whole[k]), viewed)
            for inherited, viewed in map(reads.__getitem__, values)
        ]
        return _StepProgram(program, assigned, [at[id(t)] for t in updated], checks)

    def replay(self, tensors: list[Tensor], unbuilt: bool = False) -> list[Tensor] | None:
        """The step's writes over the tensors' current nodes; None (nothing changed) where assign might write one
        differently now (its value may read the target's memory shifted: a copy first), so the update code runs.
        The rest of what assign checks (shapes, dtypes, devices, a buffer to write into) is the program's key.
        The check is assign's, over-approximated without walking the program's nodes: a value reads its target
        shifted only through an input that does (its own shifted reads), or through a movement op of the program
        over an input (then the target would be that input's base). Both read inputs alone.

        `unbuilt`: the program's nodes are left unbuilt (uop/program.py Unbuilt) where the caller realizes the
        tensors at once and nothing but that realize can meet them (no TinyJit capture recording the step's
        tensors, no sharded tensors, step layouts on, no other thread of the user's alive): the realize builds them if
        its layout is not known. Another thread reads a tensor's node without the realize lock (`w.shape`, `x @ w`
        while this one steps): it met an unbuilt node and raised, or built a graph over it."""
        inputs = list(map(node_of, tensors))  # (pending gradients unbuilt, see tensor.py _PendingGrad)
        # (a pending gradient's noted shifted reads leave out the nodes its program builds, none of them a buffer: it
        # answers for a buffer target only, see gradient.py _GradProgram)
        pending = Unbuilt in map(type, inputs)
        run = None
        if (
            unbuilt
            and STEP_LAYOUTS.value
            and not CAPTURES_OPEN[0]
            and not Device.multi_seen
            and alone_with_library_threads()
        ):
            vals, run = self.program.unbuilt(inputs, functools.partial(_rebuilt, tensors, self.assigned, self.program))
        else:
            inputs = [u.built() if type(u) is Unbuilt else u for u in inputs]
            vals = self.program.run(inputs)
        movement = GroupOp.Movement
        for j, (inherited, viewed) in zip(self.assigned, self.reads):
            target = vals[j]
            while target.op in movement:  # (UOp.base inline: a call per parameter and state tensor)
                target = target.src[0]
            if pending and target.op is not Ops.BUFFER:
                return None  # (the update code runs: it builds the gradients)
            # (loops, not generators: two calls less per parameter and state tensor, on every step)
            for k in viewed:
                base = vals[k]
                while base.op in movement:  # (UOp.base inline)
                    base = base.src[0]
                if base is target:
                    return None
            for k in inherited:
                if _reads_shifted(vals[k], target):
                    return None
        if run is not None and pending:
            adopt_pending(tensors)
        for j, out in zip(self.assigned, self.program.outs):
            tensors[j].uop = vals[out]
        _note_lazy(*map(tensors.__getitem__, self.assigned))
        note_replay(self, vals, len(tensors), False, run)
        return [tensors[j] for j in self.returned]


def _rebuilt(tensors: list[Tensor], assigned: list[int], program: GraphProgram, vals: list[UOp]) -> None:
    """An unbuilt update was built (UnbuiltRun.build): the tensors still holding its unbuilt writes hold the nodes."""
    for j, out in zip(assigned, program.outs):
        if type(tensors[j].uop) is Unbuilt:
            tensors[j].uop = vals[out]


def _whole_buffer(u: UOp) -> bool:
    """Whether u is a whole buffer seen through reshapes: it reads no memory shifted (the step's key holds this)."""
    b = _under_reshapes(u)
    return b.op is Ops.BUFFER and not b.arg.part


def _program_reads(program: GraphProgram, n_in: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """For each position of the program: the inputs it reaches (without passing an ASSIGN or CONTIGUOUS, where
    assign's check stops), and the inputs a movement op on the way views directly (through movement ops only)."""
    reads: list[tuple[frozenset[int], frozenset[int]]] = [(frozenset({k}), frozenset()) for k in range(n_in)]
    for q, (op, _, src, _) in enumerate(program.steps):
        reached: set[int] = set()
        viewed: set[int] = set()
        for s in src:
            if s >= n_in and program.steps[s - n_in][0] in (Ops.ASSIGN, Ops.CONTIGUOUS):
                continue
            reached |= reads[s][0]
            viewed |= reads[s][1]
        if op in GroupOp.Movement:
            x = n_in + q
            while x >= n_in and program.steps[x - n_in][0] in GroupOp.Movement:
                x = program.steps[x - n_in][2][0]
            if x < n_in:
                viewed.add(x)
        reads.append((frozenset(reached), frozenset(viewed)))
    return [(tuple(sorted(r)), tuple(sorted(v))) for r, v in reads]


_step_programs: dict[tuple, _StepProgram] = {}
STEP_PROGRAMS = 16  # programs kept (an optimizer whose parameters change shape every step would otherwise grow it)
# two threads recording at once: both evicted the same first entry (KeyError), or one's insert met the other's
# iteration for the first key (a dictionary changed size during iteration)
_step_programs_lock = library_lock()


def _lerp(start: Tensor, end: Tensor, weight: float | Tensor) -> Tensor:
    # torch's lerp, which takes the form that is exact at its nearer end
    diff = end - start
    if isinstance(weight, Tensor):
        return (weight < 0.5).where(start + diff * weight, end - diff * (1 - weight))
    return start + diff * weight if weight < 0.5 else end - diff * (1 - weight)


# torch's place for them: nn.optim.lr_scheduler.StepLR(...), and `from lazygrad.nn.optim.lr_scheduler import StepLR`
# (torch.optim.lr_scheduler is a module of its own: the import statement looks it up by that name)
from lazygrad.nn import lr_scheduler  # noqa: E402

sys.modules[f"{__name__}.lr_scheduler"] = lr_scheduler
