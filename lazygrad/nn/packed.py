"""Weights stored in panels: a matrix that every step of a model multiplies is copied once into the layout the device's
matmul reads fastest, instead of (for a product of few rows) read as it is or (of many rows) copied at each product."""

from __future__ import annotations

from lazygrad.device import Device
from lazygrad.dtype import dtypes
from lazygrad.helpers import prod
from lazygrad.tensor import Tensor


def panel_width(weight: Tensor) -> int:
    """Columns per panel for a float32 weight (n, k) of `x @ weight.T`, or 0 where the device reads it as it is. Asked
    as for a product of many rows: the copy is paid once, not by the rows of one product."""
    if weight.ndim != 2 or weight.dtype != dtypes.float32:
        return 0
    return float32_panel_width(weight.shape, weight.device)


def float32_panel_width(shape: tuple[int, int], device: str) -> int:
    """`panel_width` of a float32 weight of this shape on this device, before there is one (a quantized matrix's)."""
    n, k = shape
    return Device[device].renderer.matmul_panel(1 << 20, n, k, dtypes.float32.itemsize, transposed=True)


class PanelMatrix:
    """A float weight (n, k) of `x @ weight.T` stored as (n / panel, k, panel): a product's loop over k reads the
    panel's columns as one vector, for any number of rows of x (panel 0: stored as it is, in a buffer of its own). On
    one core (SmolLM2's MLP up projection, 3072 x 576, x of 128 rows): 2.6 ms with the weight as it is (under 256 rows
    a product does not copy it into panels itself), 0.92 ms from panels packed in advance."""

    def __init__(self, weight: Tensor, panel: int):
        n, k = weight.shape
        self.shape, self.panel = (n, k), panel
        self.packed = (
            weight.reshape(n // panel, panel, k).permute(0, 2, 1).contiguous() if panel else weight.contiguous()
        )

    @staticmethod
    def from_panels(panels: Tensor, shape: tuple[int, int]) -> PanelMatrix:
        """A weight of `shape` (n, k) given in panels already (n / panel, k, panel)."""
        pm = PanelMatrix.__new__(PanelMatrix)
        pm.shape, pm.panel, pm.packed = shape, panels.shape[-1], panels
        return pm

    @staticmethod
    def pack(weight: Tensor) -> PanelMatrix:
        """The weight in panels where the device multiplies those faster, else as it is."""
        return PanelMatrix(weight, panel_width(weight))

    def linear(self, x: Tensor) -> Tensor:
        """x (..., k) @ weight.T -> (..., n)."""
        n, k = self.shape
        if x.shape[-1] != k:
            raise ValueError(f"linear: input shape {x.shape} does not match weight shape {self.shape}")
        if not self.panel:
            return x.linear(self.packed)
        # the product schedule/panels.py builds for a matmul the scheduler puts in panels: the rows of x outermost in
        # the graph, the output row-major, so that a bias or activation after it is the matmul kernel's epilogue (with
        # the panels outermost and the output permuted back, that was a kernel of its own); the heuristic runs the
        # panels outermost in the loops (a panel's columns reused from L2 while the rows stream)
        rows = prod(x.shape[:-1])
        out = (x.reshape(rows, 1, k, 1) * self.packed.reshape(1, n // self.panel, k, self.panel)).sum(-2)
        return out.reshape(*x.shape[:-1], n)
