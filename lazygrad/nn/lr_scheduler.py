"""torch.optim.lr_scheduler's schedulers over an optimizer's `param_groups` (reached as `nn.optim.lr_scheduler`).

Each computes the learning rate in Python as torch's does: a step() from the group's current rate (torch's chainable
forms, so that schedulers stepped together compose: ChainedScheduler), a step(epoch) in closed form. It writes the rate
through `param_groups`, i.e. into the optimizer's device scalar: a step of a
scheduler compiles nothing. As in torch, making a scheduler sets each group's "initial_lr" and steps it once (to
epoch 0), and `step()` goes after `optimizer.step()`.

OneCycleLR and CyclicLR cycle SGD's momentum or an Adam-like optimizer's beta1 as torch's (`cycle_momentum=True`, the
default): the optimizer keeps them in device scalars once changed, so the cycling compiles nothing either.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence


class LRScheduler:
    def __init__(self, optimizer: Any, last_epoch: int = -1):
        self.optimizer = optimizer
        groups = optimizer.param_groups
        for group in groups:
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])  # a scheduler made before (or OneCycleLR) set it
            elif "initial_lr" not in group:
                raise KeyError("param 'initial_lr' is not specified in param_groups when resuming an optimizer")
        self.base_lrs = [group["initial_lr"] for group in groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        closed = getattr(self, "_closed_form_lr", None)
        self._last_lr = closed() if epoch is not None and closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


def _lrs(scheduler: Any) -> list[float]:
    """Each group's current learning rate (what torch's chainable forms start from)."""
    return [group["lr"] for group in scheduler.optimizer.param_groups]


class LambdaLR(LRScheduler):
    def __init__(self, optimizer: Any, lr_lambda: Callable | Sequence[Callable], last_epoch: int = -1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"expected {n} lr_lambdas, but got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


class MultiplicativeLR(LRScheduler):
    def __init__(self, optimizer: Any, lr_lambda: Callable | Sequence[Callable], last_epoch: int = -1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch > 0:
            return [g["lr"] * fn(self.last_epoch) for g, fn in zip(groups, self.lr_lambdas)]
        return [g["lr"] for g in groups]


class StepLR(LRScheduler):
    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        change = self.last_epoch != 0 and self.last_epoch % self.step_size == 0
        return [lr * self.gamma if change else lr for lr in _lrs(self)]


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer: Any, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        passed = sum(1 for m in self.milestones if m <= self.last_epoch)
        return [base * self.gamma**passed for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        times = self.milestones.count(self.last_epoch)  # (a milestone given twice decays twice, as torch's Counter)
        return [lr * self.gamma**times if times else lr for lr in _lrs(self)]


class ConstantLR(LRScheduler):
    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 < factor <= 1:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        return [base * (self.factor if self.last_epoch < self.total_iters else 1.0) for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.factor for lr in _lrs(self)]
        return [lr * (1.0 / self.factor) if self.last_epoch == self.total_iters else lr for lr in _lrs(self)]


class LinearLR(LRScheduler):
    def __init__(
        self,
        optimizer: Any,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        t = min(self.total_iters, self.last_epoch) / self.total_iters if self.total_iters else 1.0
        factor = self.start_factor + (self.end_factor - self.start_factor) * t
        return [base * factor for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in _lrs(self)]
        if self.last_epoch > self.total_iters:
            return _lrs(self)
        span = self.end_factor - self.start_factor
        factor = 1.0 + span / (self.total_iters * self.start_factor + (self.last_epoch - 1) * span)
        return [lr * factor for lr in _lrs(self)]


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        return [lr * self.gamma if self.last_epoch else lr for lr in _lrs(self)]


class PolynomialLR(LRScheduler):
    def __init__(self, optimizer: Any, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        t = min(self.total_iters, self.last_epoch)
        return [base * (1.0 - t / self.total_iters) ** self.power for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        t, n = self.last_epoch, self.total_iters
        if t == 0 or t > n:
            return _lrs(self)
        decay = ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power
        return [lr * decay for lr in _lrs(self)]


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _closed_form_lr(self) -> list[float]:
        cos = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * cos for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        t, period, low = self.last_epoch, self.T_max, self.eta_min
        if t == 0:
            return _lrs(self)
        if self._step_count == 1:  # made with last_epoch > 0: torch's closed form
            return self._closed_form_lr()
        if (t - 1 - period) % (2 * period) == 0:
            rise = (1 - math.cos(math.pi / period)) / 2
            return [lr + (base - low) * rise for lr, base in zip(_lrs(self), self.base_lrs)]
        ratio = (1 + math.cos(math.pi * t / period)) / (1 + math.cos(math.pi * (t - 1) / period))
        return [ratio * (lr - low) + low for lr in _lrs(self)]


class CosineAnnealingWarmRestarts(LRScheduler):
    def __init__(self, optimizer: Any, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        epoch = self.last_epoch
        if self.T_mult == 1:
            t_cur, t_i = epoch % self.T_0, self.T_0
        else:
            n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult)) if epoch >= self.T_0 else 0
            t_cur = epoch - self.T_0 * (self.T_mult**n - 1) // (self.T_mult - 1)
            t_i = self.T_0 * self.T_mult**n
        cos = (1 + math.cos(math.pi * t_cur / t_i)) / 2
        return [self.eta_min + (base - self.eta_min) * cos for base in self.base_lrs]


def _per_group(value: float | Sequence[float], groups: list, name: str) -> list[float]:
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ValueError(f"expected {len(groups)} values for {name}, got {len(value)}")
        return list(value)
    return [value] * len(groups)


class OneCycleLR(LRScheduler):
    def __init__(
        self,
        optimizer: Any,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float = 0.85,
        max_momentum: float = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        groups = optimizer.param_groups
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * len(groups)
        if last_epoch == -1:
            for group, top in zip(groups, max_lrs):
                group["initial_lr"], group["max_lr"] = top / div_factor, top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if any("momentum" not in g and "betas" not in g for g in groups):
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in groups[0]
            tops = _per_group(max_momentum, groups, "max_momentum")
            bottoms = _per_group(base_momentum, groups, "base_momentum")
            if last_epoch == -1:
                for group, top, bottom in zip(groups, tops, bottoms):
                    self._set_momentum(group, top)
                    group["max_momentum"], group["base_momentum"] = top, bottom
        ends = [float(pct_start * total_steps) - 1]
        if three_phase:
            ends += [float(2 * pct_start * total_steps) - 2, total_steps - 1]
            keys = [("initial_lr", "max_lr"), ("max_lr", "initial_lr"), ("initial_lr", "min_lr")]
            momenta = [("max_momentum", "base_momentum"), ("base_momentum", "max_momentum")]
            momenta.append(("max_momentum", "max_momentum"))
        else:
            ends += [total_steps - 1]
            keys = [("initial_lr", "max_lr"), ("max_lr", "min_lr")]
            momenta = [("max_momentum", "base_momentum"), ("base_momentum", "max_momentum")]
        self._phases = list(zip(ends, keys, momenta))
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step, lr = 0.0, 0.0
            for i, (end_step, (k0, k1), (m0, m1)) in enumerate(self._phases):
                if step <= end_step or i == len(self._phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal(group[k0], group[k1], pct)
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m0], group[m1], pct))
                    break
                start_step = end_step
            lrs.append(lr)
        return lrs


class CyclicLR(LRScheduler):
    """torch's CyclicLR: the learning rate between base_lr and max_lr in triangles (triangular, triangular2,
    exp_range or a scale_fn of the cycle or of the step), the momentum (or beta1) against it when cycle_momentum."""

    def __init__(
        self,
        optimizer: Any,
        base_lr: float | Sequence[float],
        max_lr: float | Sequence[float],
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable[[float], float] | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.8,
        max_momentum: float | Sequence[float] = 0.9,
        last_epoch: int = -1,
    ):
        groups = optimizer.param_groups
        base_lrs = _per_group(base_lr, groups, "base_lr")
        if last_epoch == -1:
            for lr, group in zip(base_lrs, groups):
                group["lr"] = lr
        self.max_lrs = _per_group(max_lr, groups, "max_lr")
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        if scale_fn is not None:
            self.scale_fn, self.scale_mode = scale_fn, scale_mode
        elif mode == "triangular":
            self.scale_fn, self.scale_mode = (lambda x: 1.0), "cycle"
        elif mode == "triangular2":
            self.scale_fn, self.scale_mode = (lambda x: 1 / (2.0 ** (x - 1))), "cycle"
        else:
            self.scale_fn, self.scale_mode = (lambda x: gamma**x), "iterations"
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if any("momentum" not in g and "betas" not in g for g in groups):
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in groups[0]
            self.base_momentums = _per_group(base_momentum, groups, "base_momentum")
            self.max_momentums = _per_group(max_momentum, groups, "max_momentum")
            if last_epoch == -1:
                for top, bottom, group in zip(self.max_momentums, self.base_momentums, groups):
                    self._set_momentum(group, top)
                    group["max_momentum"], group["base_momentum"] = top, bottom
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    _set_momentum = OneCycleLR._set_momentum

    def get_lr(self) -> list[float]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (top - base) * factor * scale for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            pairs = zip(self.base_momentums, self.max_momentums, self.optimizer.param_groups)
            for bottom, top, group in pairs:
                self._set_momentum(group, top - (top - bottom) * factor * scale)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k != "scale_fn"}


class ChainedScheduler:
    """torch's ChainedScheduler: each step steps every scheduler in turn, their chainable forms composing."""

    def __init__(self, schedulers: Sequence[Any], optimizer: Any = None):
        if not schedulers:
            raise ValueError("ChainedScheduler expects at least one scheduler")
        self._schedulers = list(schedulers)
        self.optimizer = optimizer if optimizer is not None else self._schedulers[0].optimizer
        if any(s.optimizer is not self.optimizer for s in self._schedulers):
            raise ValueError("ChainedScheduler expects all schedulers to belong to the same optimizer")
        self._last_lr = _lrs(self)

    def step(self) -> None:
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self)

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {"_schedulers": [s.state_dict() for s in self._schedulers], "_last_lr": self._last_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for s, d in zip(self._schedulers, state_dict["_schedulers"]):
            s.load_state_dict(d)
        self._last_lr = list(state_dict["_last_lr"])


class SequentialLR(LRScheduler):
    def __init__(
        self, optimizer: Any, schedulers: Sequence[LRScheduler], milestones: Sequence[int], last_epoch: int = -1
    ):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"expected {len(schedulers) - 1} milestones, got {len(milestones)}")
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        # as torch: the groups start from the first scheduler's initial values, and it makes the first step
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for s in self._schedulers:
            s.last_epoch -= 1
        self._schedulers[0]._initial_step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch += 1
        idx = sum(1 for m in self._milestones if m <= self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ReduceLROnPlateau:
    """Lower the learning rate by `factor` when a metric stops improving for `patience` epochs (torch's rules:
    threshold modes rel/abs, cooldown, min_lr, eps)."""

    def __init__(
        self,
        optimizer: Any,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | Sequence[float] = 0.0,
        eps: float = 1e-8,
    ):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"mode {mode!r} / threshold_mode {threshold_mode!r} unknown")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        groups = optimizer.param_groups
        self.min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * len(groups)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0
        self._last_lr = [g["lr"] for g in groups]

    def _better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics: Any) -> None:
        current = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch += 1
        if self._better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, low in zip(self.optimizer.param_groups, self.min_lrs):
                old = group["lr"]
                new = max(old * self.factor, low)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)
