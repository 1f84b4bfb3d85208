"""CPU graph: a captured list of kernels compiled into one C function, so a JIT replay is one ctypes call.

The driver function reads everything from three arrays that live in its own shared object: the kernels' function
pointers, the buffer pointers and the variable values. Python writes the slots that change (input buffers,
variables) and calls the driver with no arguments. The source depends only on the shape of the kernel list, so
the compiled driver is cached on disk like any kernel.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from lazygrad.device import Device

Call = tuple[Sequence[int], Sequence[int]]  # one kernel's buffer-table slots and variable-table slots


def graph_source(calls: Sequence[Call], n_bufs: int, n_vars: int) -> str:
    """calls: (buffer-table slots, variable-table slots) per kernel, in run order; kernel i is lg_fns[i]."""
    lines = [
        f"void *lg_bufs[{max(n_bufs, 1)}];",
        f"int lg_vars[{max(n_vars, 1)}];",
        f"void *lg_fns[{max(len(calls), 1)}];",
        "void lg_graph(void) {",
    ]
    for i, (bufs, vars_) in enumerate(calls):
        proto = ", ".join(["void*"] * len(bufs) + ["int"] * len(vars_)) or "void"
        args = ", ".join([f"lg_bufs[{b}]" for b in bufs] + [f"lg_vars[{v}]" for v in vars_])
        lines.append(f"  ((void (*)({proto}))lg_fns[{i}])({args});")
    lines.append("}")
    return "\n".join(lines) + "\n"


def kernel_address(prg: Any) -> int | None:
    """The C entry point of a loaded CPU kernel, or None when the program is not a plain C function."""
    fxn = getattr(prg, "fxn", None)
    try:
        return ctypes.cast(fxn, ctypes.c_void_p).value if fxn is not None else None
    except ctypes.ArgumentError:
        return None


class CPUGraph:
    """`bufs[slot] = ptr`, `vars[slot] = value`, then `call()` runs every kernel in order."""

    @staticmethod
    def accepts(programs: Sequence[Any]) -> bool:
        """Every program is a plain C function (a copy between devices is not)."""
        return all(kernel_address(p) is not None for p in programs)

    def __init__(self, programs: Sequence[Any], calls: Sequence[Call], n_bufs: int, n_vars: int):
        dev = Device["CPU"]
        self.programs = list(programs)  # the kernels' shared objects must stay loaded while the driver points into them
        lib = dev.compiler.compile_cached(graph_source(calls, n_bufs, n_vars))
        # a copy of its own: the tables are this graph's, whoever else was given the same bytes
        self.driver = dev.runtime("lg_graph", lib, 0, 0, private=True)
        self.bufs = (ctypes.c_void_p * max(n_bufs, 1)).in_dll(self.driver.lib, "lg_bufs")
        self.vars = (ctypes.c_int * max(n_vars, 1)).in_dll(self.driver.lib, "lg_vars")
        fns = (ctypes.c_void_p * max(len(calls), 1)).in_dll(self.driver.lib, "lg_fns")
        for i, prg in enumerate(self.programs):
            addr = kernel_address(prg)
            if addr is None:
                raise ValueError(f"kernel {i} ({type(prg).__name__}) has no C entry point for a CPU graph")
            fns[i] = addr
        self.call = self.driver.fxn
