"""Shared pieces of the end-to-end tests: dtype mapping, random inputs, and one comparison against torch / numpy."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import torch

from lazygrad import Device, Tensor, dtypes
from lazygrad.device import DeviceUnavailable
from lazygrad.dtype import DType
from lazygrad.helpers import SPEC, Context

# every lazygrad dtype that numpy and torch both have, by name (bfloat16 has no numpy twin)
NP_DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
]

# (atol, rtol) for ops exact up to one rounding, and for transcendental ops
EXACT_TOL = {"float16": (1e-3, 1e-3), "float32": (1e-6, 1e-5), "float64": (1e-12, 1e-12)}
TRANS_TOL = {"float16": (2e-3, 2e-3), "float32": (1e-5, 1e-4), "float64": (1e-7, 1e-7)}


def device_available(name: str) -> bool:
    try:
        Device[name]
        return True
    except DeviceUnavailable:
        return False


def lg_dtype(name: str) -> DType:
    return getattr(dtypes, name)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def rand_np(shape: tuple[int, ...], dtype: str, seed: int = 0, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Deterministic random input; ints cover [low, high] and bools are a fair coin."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(int(low), info.min), min(int(high), info.max) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def to_numpy(ref: Any) -> np.ndarray:
    if isinstance(ref, torch.Tensor):
        return ref.numpy() if ref.dtype != torch.bfloat16 else ref.float().numpy()
    return np.asarray(ref)


def assert_close(
    out: Tensor, ref: Any, atol: float | None = None, rtol: float | None = None, check_dtype: bool = True
) -> None:
    """`out` has the shape, dtype (by name) and values of `ref` (a torch tensor or numpy array). NaNs must match
    NaNs."""
    expected = to_numpy(ref)
    assert isinstance(out, Tensor), f"expected a Tensor, got {type(out).__name__}"
    assert out.shape == expected.shape, f"shape {out.shape} != expected {expected.shape}"
    ref_name = str(ref.dtype).removeprefix("torch.") if isinstance(ref, torch.Tensor) else expected.dtype.name
    if check_dtype:
        assert out.dtype.name == ref_name, f"dtype {out.dtype.name} != expected {ref_name}"
    got = out.numpy()
    if expected.dtype.kind == "f" or got.dtype.kind == "f":
        default_atol, default_rtol = EXACT_TOL.get(expected.dtype.name, EXACT_TOL["float32"])
        np.testing.assert_allclose(
            got.astype(np.float64),
            expected.astype(np.float64),
            atol=default_atol if atol is None else atol,
            rtol=default_rtol if rtol is None else rtol,
            equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(got, expected)


def compare(
    lg_fn: Callable[..., Tensor],
    torch_fn: Callable[..., torch.Tensor],
    inputs: list[np.ndarray],
    atol: float | None = None,
    rtol: float | None = None,
) -> None:
    """Run the same function on lazygrad and torch tensors made from the same numpy inputs and compare."""
    out = lg_fn(*[Tensor(x) for x in inputs])
    ref = torch_fn(*[torch.from_numpy(np.array(x)) for x in inputs])
    assert_close(out, ref, atol, rtol)


def fuzz_failures(seeds: range, check: Callable[[int], tuple[str, str | None]], hunt: bool = False) -> list[str]:
    """check(seed) -> (what the case is, what differs or None) over `seeds`; the failures, each as that description and
    error. A fuzzer's test asserts there are none. As a script (hunt=True) an exception is a finding too (a crash),
    each failure is printed as it is found, with a progress line every 50 cases and a total at the end. A hunt checks
    every kernel against the IR rules (SPEC=1, as the test suite does) unless SPEC is set: a hunt without them passed
    kernels whose loops nested against the rules, which then failed in CI."""
    failures = []
    for i, seed in enumerate(seeds, 1):
        try:
            with Context(SPEC=int(os.environ.get("SPEC", "1")) if hunt else SPEC.value):
                what, err = check(seed)
        except Exception as e:
            if not hunt:
                raise
            what, err = f"seed {seed}", f"raised {type(e).__name__}: {e}"
        if err is not None:
            failures.append(f"{what}\n    {err}")
            if hunt:
                print(failures[-1], flush=True)
        if hunt and i % 50 == 0:
            print(f"{i} cases, {len(failures)} failed", flush=True)
    if hunt:
        print(f"{len(seeds) - len(failures)} passed, {len(failures)} failed")
    return failures


def avx2_renderer(threads: int = 2) -> Any:
    """The CPU device's renderer as it is on `threads` AVX2 cores without AVX-512 (32-byte vectors, 16 registers, AVX's
    masked loads), whatever this CPU has: for tests whose counts or sources are those of the tiles chosen there. Its
    code still compiles and runs here (an AVX-512 CPU runs AVX2 code)."""
    import copy

    renderer = copy.copy(Device["CPU"].renderer)
    renderer.threads, renderer.vector_bytes, renderer.vector_registers = threads, 32, 16
    renderer.masked_load_lanes, renderer.masked_load_16, renderer.masked_load_lane_mask = (8, 4), False, True
    return renderer


def compiles_for(target: str, *tensors: Any) -> str | None:
    """Schedule `tensors` here (never run) and build every kernel with `target`'s renderer and compiler (CUDA through
    NVRTC needs no GPU): None when all build, else the first failure. What a fuzzer's `--compile-only CUDA` checks on
    a machine without the device."""
    from lazygrad.codegen import get_program
    from lazygrad.uop.ops import Ops

    if target != "CUDA":
        raise ValueError(f"--compile-only knows CUDA, not {target}")
    from lazygrad.renderer.gpu import CUDARenderer
    from lazygrad.runtime.ops_cuda import CUDACompiler

    renderer, compiler = CUDARenderer(), CUDACompiler("sm_90")
    for si in Tensor.schedule(*tensors):
        if si.ast.op is Ops.SINK and si.outputs[0].size > 0:  # (empty outputs launch nothing)
            try:
                compiler.compile(get_program(si.ast, renderer).src)
            except Exception as e:  # noqa: BLE001 -- the finding
                return f"{type(e).__name__}: {str(e)[:2000]}"
    return None


def run_in_threads(work: Callable[[int], None], n: int, switch_interval: float = 1e-6) -> None:
    """work(0) .. work(n - 1) in n threads at once, switching between them every `switch_interval` seconds (as often
    as possible by default: where races show); the first exception a thread raised is raised here."""
    import sys
    import threading

    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 -- raised by the calling thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]


def counting_calls(monkeypatch: Any, owner: Any, name: str) -> list[int]:
    """Replace owner.name (a module's function or a class's method) for the test by one that counts its calls: the
    list's one number is the count so far."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def mlp_adam_step(seed: int = 0) -> Callable[[], Tensor]:
    """An eager training step of the bench's MLP (64-128-10, Adam, batch 128 of fixed data): each call runs forward,
    backward and the update and returns the loss. Several tests count what a repeated step does."""
    from lazygrad.nn import Linear
    from lazygrad.nn.optim import Adam
    from lazygrad.nn.state import get_parameters

    rng = np.random.default_rng(seed)
    l1, l2 = Linear(64, 128), Linear(128, 10)
    opt = Adam(get_parameters([l1, l2]), lr=1e-3)
    x = Tensor(rng.standard_normal((128, 64)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 10, 128).astype(np.int32)).realize()

    def step() -> Tensor:
        opt.zero_grad()
        loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
        opt.step()
        return loss

    return step
