"""The CPU graph: kernels called in order by one compiled driver, reading buffer pointers and variables from arrays."""

import numpy as np

from lazygrad import Device
from lazygrad.device import Buffer
from lazygrad.dtype import dtypes
from lazygrad.runtime.graph_cpu import CPUGraph, graph_source, kernel_address
from lazygrad.runtime.ops_cpu import CPUProgram

LOOP = "{ for (int i = 0; i < 4; i++) out[i] = "
SCALE = "void scale(float* restrict out, const float* restrict a, const int k) " + LOOP + "a[i] * k; }\n"
ADD = "void add(float* restrict out, const float* restrict a, const float* restrict b) " + LOOP + "a[i] + b[i]; }\n"


def program(name: str, src: str, n_bufs: int, n_vars: int) -> CPUProgram:
    return CPUProgram(name, Device["CPU"].compiler.compile(src), n_bufs, n_vars)


def test_graph_source_calls_kernels_in_order_through_the_arrays():
    src = graph_source([((1, 0), (0,)), ((2, 1, 0), ())], 3, 1)
    assert "((void (*)(void*, void*, int))lg_fns[0])(lg_bufs[1], lg_bufs[0], lg_vars[0]);" in src
    assert "((void (*)(void*, void*, void*))lg_fns[1])(lg_bufs[2], lg_bufs[1], lg_bufs[0]);" in src
    assert src.index("lg_fns[0]") < src.index("lg_fns[1]")


def test_graph_runs_every_kernel_with_the_current_slots():
    scale, add = program("scale", SCALE, 2, 1), program("add", ADD, 3, 0)
    # slot 0: the input x; 1: t = x * k; 2: out = t + x
    graph = CPUGraph([scale, add], [((1, 0), (0,)), ((2, 1, 0), ())], 3, 1)
    bufs = [Buffer("CPU", 4, dtypes.float32) for _ in range(3)]
    for i, b in enumerate(bufs):
        graph.bufs[i] = b.ptr
    for x, k in (([1, 2, 3, 4], 3), ([0.5, -1, 2, 8], -2)):
        xn = np.array(x, np.float32)
        bufs[0].copyin(memoryview(xn.tobytes()))
        graph.vars[0] = k
        graph.call()
        np.testing.assert_allclose(np.frombuffer(bufs[2].as_bytes(), np.float32), xn * k + xn)


def test_kernel_address_only_for_c_functions():
    assert kernel_address(program("add", ADD, 3, 0)) is not None
    assert kernel_address(object()) is None


def test_kernels_of_one_object_load_it_once_a_graph_driver_gets_its_own(monkeypatch):
    from lazygrad.runtime import ops_cpu

    loads = []
    load_copy = ops_cpu._load_copy
    monkeypatch.setattr(ops_cpu, "_load_copy", lambda *a: loads.append(a) or load_copy(*a))
    lib = Device["CPU"].compiler.compile(SCALE + ADD)  # one compiler call's kernels, as a batch of a schedule
    scale, add = CPUProgram("scale", lib, 2, 1), CPUProgram("add", lib, 3, 0)
    assert len(loads) == 1 and scale.lib is add.lib
    # two graphs given the same bytes object (a cache could): each driver's tables stay its own
    driver = Device["CPU"].compiler.compile(graph_source([((1, 0), (0,)), ((2, 1, 0), ())], 3, 1))
    monkeypatch.setattr(Device["CPU"].compiler, "compile_cached", lambda src: driver)
    one, two = (CPUGraph([scale, add], [((1, 0), (0,)), ((2, 1, 0), ())], 3, 1) for _ in range(2))
    assert len(loads) == 3
    one.vars[0], two.vars[0] = 5, 7
    assert (one.vars[0], two.vars[0]) == (5, 7)
