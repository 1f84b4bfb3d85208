"""Forward and backward comparison of a lazygrad function with the same torch function (test_indexing, test_api_ops)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from lazygrad import Tensor
from test.helpers import assert_close


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def check(
    lg_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    inputs: list[np.ndarray],
    grad: bool = True,
    atol: float = 1e-6,
    rtol: float = 1e-3,
    grad_atol: float = 1e-4,
    check_dtype: bool = True,
) -> None:
    """Same function on lazygrad and torch tensors made from the same numpy inputs: outputs equal (a tuple output is
    compared element by element), and with grad=True the gradients of sum(out * w) for every float input."""
    lg_in = [Tensor(x, requires_grad=grad and x.dtype.kind == "f" or None) for x in inputs]
    th_in = [torch.tensor(x, requires_grad=grad and x.dtype.kind == "f") for x in inputs]
    lg_out, th_out = _as_tuple(lg_fn(*lg_in)), _as_tuple(torch_fn(*th_in))
    assert len(lg_out) == len(th_out), f"{len(lg_out)} outputs, torch has {len(th_out)}"
    for a, b in zip(lg_out, th_out):
        assert_close(a, b.detach(), atol, rtol, check_dtype=check_dtype)
    if not grad or not any(x.dtype.kind == "f" for x in inputs):
        return
    rng = np.random.default_rng(1)
    lg_loss, th_loss = None, None
    for a, b in zip(lg_out, th_out):
        if not b.dtype.is_floating_point or b.numel() == 0:
            continue
        w = rng.uniform(-1, 1, size=tuple(b.shape)).astype(np.float32)
        la, lb = (a * Tensor(w)).sum(), (b * torch.from_numpy(w)).sum()
        lg_loss, th_loss = (la, lb) if lg_loss is None else (lg_loss + la, th_loss + lb)
    if lg_loss is None:
        return
    th_loss.backward()
    grads = lg_loss.gradient(*[t for t, x in zip(lg_in, inputs) if x.dtype.kind == "f"])
    for g, t in zip(grads, [t for t, x in zip(th_in, inputs) if x.dtype.kind == "f"]):
        ref = t.grad if t.grad is not None else torch.zeros_like(t)
        assert_close(g, ref, grad_atol, rtol, check_dtype=False)


def randn(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
