"""torch.amp: `autocast` (products and convolutions in a lower precision dtype, softmax, norms and cross entropy in
float32, for the tensors of one kind of device) and `GradScaler` (the loss scaled up, the gradients unscaled before
the step, a step with a non-finite gradient skipped and the scale backed off). torch.autocast is amp.autocast,
torch.cuda.amp's the same with device "cuda"."""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

from lazygrad.device import Device
from lazygrad.dtype import DType, dtypes, to_dtype
from lazygrad.tensor import Tensor, _modes

_DEFAULT_DTYPES = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16}


def _kind(device_type: str) -> str:
    """torch's device type ("cuda", "cpu", "cuda:0") as lazygrad's device kind ("CUDA", "CPU")."""
    return device_type.split(":")[0].upper()


class autocast:  # noqa: N801 (torch's name)
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): a context manager and decorator.
    Inside, matmul / linear / conv of float tensors on that kind of device run in `dtype` (float16 for "cuda",
    bfloat16 for "cpu", as torch's defaults) and give it; softmax, log_softmax, layer norm and cross entropy of such
    lower precision tensors run in float32. Per thread, as torch's."""

    def __init__(
        self,
        device_type: str,
        dtype: DType | str | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ):
        kind = device_type.split(":")[0]
        if kind not in _DEFAULT_DTYPES and dtype is None:
            raise RuntimeError(f"autocast: no default dtype for device type {device_type!r}; pass dtype")
        low = to_dtype(dtype) if dtype is not None else _DEFAULT_DTYPES[kind]
        if low not in (dtypes.float16, dtypes.bfloat16):
            raise RuntimeError(f"autocast: dtype must be float16 or bfloat16, got {low}")
        self.mode = (_kind(device_type), low) if enabled else None
        self._saved: list[Any] = []

    def __enter__(self) -> autocast:
        self._saved.append(_modes.autocast)
        _modes.autocast = self.mode
        return self

    def __exit__(self, *exc: Any) -> None:
        _modes.autocast = self._saved.pop()

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapped


def is_autocast_available(device_type: str) -> bool:
    return device_type.split(":")[0] in _DEFAULT_DTYPES


class GradScaler:
    """torch.amp.GradScaler(device="cuda", init_scale=2**16, growth_factor=2, backoff_factor=0.5,
    growth_interval=2000, enabled=True). As torch's: disabled, with a warning, where the device is not there (a
    "cuda" scaler on a machine without CUDA); disabled, scale() returns its input and step() steps. The check for
    non-finite gradients reads one number from the device per step (torch's step reads it too)."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        if enabled and not _available(_kind(device)):
            warnings.warn(f"GradScaler is enabled, but device {device!r} is not available. Disabling.", stacklevel=2)
            enabled = False
        if growth_factor <= 1.0 or not 0.0 < backoff_factor < 1.0:
            raise ValueError("GradScaler needs growth_factor > 1 and 0 < backoff_factor < 1")
        self._enabled, self._scale = enabled, float(init_scale)
        self._growth_factor, self._backoff_factor = growth_factor, backoff_factor
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_inf: dict[int, bool] = {}  # id(optimizer) -> whether its gradients held inf/nan, this iteration
        self._stepped: set[int] = set()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def scale(self, outputs: Any) -> Any:
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TypeError(f"GradScaler.scale: expected a Tensor or a sequence of them, got {type(outputs).__name__}")

    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimizer's gradients by the scale (once per update) and note whether any is inf or nan."""
        if not self._enabled:
            return
        if id(optimizer) in self._found_inf:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        grads = [p for p in optimizer.params if p.grad is not None]
        inv = 1.0 / self._scale
        for p in grads:
            p.grad = p.grad * inv
        if grads:
            bad = Tensor.stack(*[(~p.grad.isfinite()).any() for p in grads]).any()
            self._found_inf[id(optimizer)] = bool(bad.item())
        else:
            self._found_inf[id(optimizer)] = False

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) in self._stepped:
            raise RuntimeError("step() has already been called since the last update().")
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        self._stepped.add(id(optimizer))
        if self._found_inf[id(optimizer)]:
            return None  # as torch: a step whose gradients overflowed is skipped
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | Tensor | None = None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        elif any(self._found_inf.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        elif self._found_inf:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._found_inf.clear()
        self._stepped.clear()

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled scaler.")
        scale = state_dict["scale"]
        self._scale = float(scale.item() if hasattr(scale, "item") else scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        tracker = state_dict["_growth_tracker"]
        self._growth_tracker = int(tracker.item() if hasattr(tracker, "item") else tracker)


def _available(kind: str) -> bool:
    try:
        Device[kind]
    except Exception:
        return False
    return True
