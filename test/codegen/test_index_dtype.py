"""Address math is int32 where every extent, buffer size and address fits, int64 where one does not (2**31 elements
and more): an int loop counter over such a tensor wrapped negative, so the loop never ran and later reads crashed."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lazygrad import Device, Tensor, dtypes
from lazygrad.codegen import get_program
from test.helpers import device_available

HUGE = 2**31 + 5
RENDERERS = [d for d in ("CPU", "CL", "PYTHON") if device_available(d)]


def _source(t: Tensor, device: str) -> str:
    sched = t.schedule()
    assert len(sched) == 1
    return get_program(sched[0].ast, Device[device].renderer).src


def _available_gb() -> float:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) / 2**20


@pytest.mark.parametrize("device", RENDERERS)
def test_huge_kernel_uses_64_bit_indices(device: str) -> None:
    src = _source(Tensor.empty(HUGE, dtype=dtypes.uint8, device=device) + 1, device)
    index_int = {"CPU": "long long", "CL": "long", "PYTHON": "int64"}[device]
    if device == "PYTHON":
        assert re.search(r"= (RANGE|SPECIAL) int64", src), src
        assert not re.search(r"= (RANGE|SPECIAL) int32", src), src
    else:
        # a loop, a thread id, or an outlined THREAD loop's index parameter or chunk loop (ClangRenderer.render)
        assert re.search(rf"(for \({index_int} \w+ = (0|lg_lo)|{index_int} gidx0 =|{index_int} gidx0\))", src), src
        assert not re.search(r"for \(int |\bint (gidx|lidx)", src), src
    assert str(HUGE) in src


@pytest.mark.parametrize("device", RENDERERS)
def test_small_kernel_keeps_32_bit_indices(device: str) -> None:
    src = _source(Tensor.empty(4096, dtype=dtypes.uint8, device=device) + 1, device)
    if device == "PYTHON":
        assert "int64" not in src, src
    else:
        assert "long" not in src.split("void ", 1)[1], src


def test_offset_past_int32_uses_64_bit_indices() -> None:
    """A small kernel reading the end of a huge buffer: few iterations, but its addresses pass 2**31."""
    src = _source(Tensor.empty(HUGE, dtype=dtypes.uint8, device="CPU")[-16:] + 1, "CPU")
    assert "2147483637LL" in src or "long long" in src.split("void ", 1)[1], src


@pytest.mark.skipif(not device_available("CPU"), reason="needs the CPU device")
def test_huge_kernel_runs() -> None:
    if _available_gb() < 6:
        pytest.skip(f"needs 6 GB of free memory for a 2 GB tensor and its copies, {_available_gb():.1f} GB free")
    n = 2**31 + 16
    out = (Tensor.arange(n, dtype=dtypes.int64, device="CPU").cast(dtypes.uint8) + 1).realize()
    tail = out[-20:].numpy()  # the last elements, past 2**31
    np.testing.assert_array_equal(tail, (np.arange(n - 20, n, dtype=np.int64) + 1).astype(np.uint8))
