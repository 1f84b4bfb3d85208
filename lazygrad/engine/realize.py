"""The engine: schedule items become compiled programs, which run on their buffers and report what they did."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Iterator

from lazygrad.codegen import get_program
from lazygrad.device import Buffer, Device
from lazygrad.engine.memory import memory_planner
from lazygrad.helpers import BEAM, DEBUG, NOOPT, GlobalCounters, ansilen, colored
from lazygrad.renderer import ProgramSpec
from lazygrad.schedule.kernelize import ScheduleItem
from lazygrad.uop.ops import UOp


class CompiledRunner:
    """A compiled kernel, ready to launch: compile once per (device, kernel AST), then call many times."""

    def __init__(self, device: str, spec: ProgramSpec):
        self.device, self.spec = device, spec
        dev = Device[device]
        st = time.perf_counter()
        lib = dev.compiler.compile_cached(spec.src)
        self.compile_time = time.perf_counter() - st
        self.prg = dev.runtime(spec.name, lib, spec.n_bufs, len(spec.vars))

    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        args = [b.ptr for b in bufs] + [var_vals[v] for v in self.spec.vars]
        return self.prg(*args, wait=wait)


_runners: dict[tuple, CompiledRunner] = {}


def get_runner(device: str, ast: UOp) -> CompiledRunner:
    key = (device, ast, NOOPT.value, BEAM.value)  # the knobs that change which kernel is built
    if (runner := _runners.get(key)) is None:
        runner = _runners[key] = CompiledRunner(device, get_program(ast, Device[device].renderer))
    return runner


@dataclass
class ExecItem:
    runner: CompiledRunner
    bufs: list[Buffer]

    def run(self, var_vals: dict[UOp, int] | None = None, jit: bool = False) -> float | None:
        var_vals = var_vals or {}
        if _captures:
            _captures[-1].append((self, {v: var_vals[v] for v in self.runner.spec.vars}))
        for b in self.bufs:
            b.ensure_allocated()
        timing = DEBUG >= 2
        et = self.runner(self.bufs, var_vals, wait=timing)
        spec = self.runner.spec
        GlobalCounters.kernel_count += 1
        GlobalCounters.global_ops += spec.ops
        GlobalCounters.global_mem += spec.mem
        if et is not None:
            GlobalCounters.time_sum_s += et
        if timing:
            _print_kernel_line(self.runner.device, spec, et or 0.0, len(self.bufs), jit)
        return et


# the innermost active capture (TinyJit's second call) records every item that runs, with its variable values
_captures: list[list[tuple[ExecItem, dict[UOp, int]]]] = []


@contextlib.contextmanager
def capture() -> Iterator[list[tuple[ExecItem, dict[UOp, int]]]]:
    """Record every ExecItem run inside the block (nested captures record into the innermost only)."""
    items: list[tuple[ExecItem, dict[UOp, int]]] = []
    _captures.append(items)
    try:
        yield items
    finally:
        _captures.pop()


def is_capturing() -> bool:
    return bool(_captures)


def _print_kernel_line(device: str, spec: ProgramSpec, et: float, n_bufs: int, jit: bool) -> None:
    name = spec.display_name + " " * max(0, 24 - ansilen(spec.display_name))
    tag = colored("*** ", "magenta" if jit else "green")
    gflops = spec.ops / et / 1e9 if et > 0 else 0.0
    gbs = spec.mem / et / 1e9 if et > 0 else 0.0
    print(
        f"{tag}{device:7s} {GlobalCounters.kernel_count:4d} {name} arg {n_bufs:2d} mem {GlobalCounters.mem_used / 1e9:6.2f} GB "
        f"tm {et * 1e6:9.2f}us/{GlobalCounters.time_sum_s * 1e3:9.2f}ms ({gflops:8.2f} GFLOPS {gbs:7.2f} GB/s)"
    )


def lower_schedule_item(si: ScheduleItem) -> ExecItem | None:
    """None for kernels with nothing to compute (an empty output)."""
    if si.outputs[0].size == 0:
        return None
    return ExecItem(get_runner(si.outputs[0].device, si.ast), list(si.bufs))


def run_schedule(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
    for si in memory_planner(schedule):
        if (ei := lower_schedule_item(si)) is not None:
            ei.run(var_vals)
