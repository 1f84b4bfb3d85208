"""Process replay: the source of every kernel of a fixed set of workloads, for every renderer, so a refactor of the
compiler can show it changes no generated kernel.

    python bench/process_replay.py save before.json      # on the old code
    python bench/process_replay.py compare before.json   # on the new code: lists the kernels whose source changed

The workloads are scheduled on the CPU (no kernel runs) and each kernel AST is rendered by the CPU (C), OpenCL,
CUDA, Metal and PYTHON renderers with the default opts. Exit status 1 when a kernel changed or went missing.
"""

from __future__ import annotations

import difflib
import json
import sys
from typing import Callable

import numpy as np

from lazygrad import Device, Tensor, dtypes, nn
from lazygrad.codegen import get_program
from lazygrad.renderer.gpu import CUDARenderer, MetalRenderer, OpenCLRenderer
from lazygrad.renderer.python import PythonRenderer
from lazygrad.uop.ops import Ops


def _r(*shape: int, dtype=dtypes.float32, seed: int = 0) -> Tensor:  # noqa: ANN001
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).cast(dtype).realize()


def _digits_step() -> list[Tensor]:
    from lazygrad.examples.digits import DigitsCNN

    model = DigitsCNN()
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)
    x, y = _r(16, 1, 8, 8), Tensor(np.arange(16) % 10)
    with Tensor.train():
        opt.zero_grad()
        model(x).sparse_categorical_crossentropy(y).backward()
        return opt.schedule_step()  # the updated weights and optimizer state, not yet realized


def _linear_step() -> list[Tensor]:
    """A linear layer with enough rows that its weight is read from panels on the CPU, trained one SGD step."""
    layer = nn.Linear(96, 64)
    opt = nn.optim.SGD(nn.state.get_parameters(layer), lr=1e-2)
    with Tensor.train():
        opt.zero_grad()
        layer(_r(256, 96)).relu().sum().backward()
        return opt.schedule_step()


WORKLOADS: dict[str, Callable[[], list[Tensor]]] = {
    "elementwise": lambda: [(_r(13, 17) * 2 + _r(17)).exp2().sqrt().maximum(0.5), _r(1000).sin() / _r(1000).log2()],
    "ints": lambda: [
        (_r(8, 8).cast(dtypes.int32) // 3) % 5 ^ 7,
        _r(33).cast(dtypes.uint8) - 7,
        _r(9).cast("int64") << 2,
    ],
    "casts": lambda: [
        _r(64, dtype=dtypes.half).exp() + 1,
        _r(64, dtype=dtypes.bfloat16) * 3,
        _r(7).bitcast(dtypes.int32),
    ],
    "reduce": lambda: [
        _r(64, 300).sum(1),
        _r(4096).max(),
        _r(32, 32).argmax(1),
        _r(40, 50).softmax(1),
        _r(8, 64).std(1),
    ],
    "layernorm": lambda: [_r(16, 384).layernorm() * _r(384) + _r(384)],
    "matmul": lambda: [_r(64, 96) @ _r(96, 48), _r(3, 17, 31) @ _r(31, 5), _r(128, 256) @ _r(64, 256).T],
    "matmul_half": lambda: [_r(64, 128, dtype=dtypes.half) @ _r(128, 32, dtype=dtypes.half)],
    # big enough that the CPU reads the right-hand side from panels: a 4 KB row stride, a linear layer's weight
    "matmul_panels": lambda: [
        _r(256, 512) @ _r(512, 1024),
        (_r(2, 160, 96) @ _r(48, 96).T).relu(),
        _r(256, 64, dtype=dtypes.half) @ _r(32, 64, dtype=dtypes.half).T,
    ],
    "linear_step": _linear_step,
    "conv": lambda: [_r(2, 3, 16, 16).conv2d(_r(8, 3, 3, 3), padding=1).relu().max_pool2d()],
    "indexing": lambda: [_r(10, 4)[Tensor([1, 3, 3, 0])], _r(5, 6).gather(1, Tensor(np.zeros((5, 2), np.int32)))],
    "cumsum": lambda: [_r(100).cumsum(0), _r(7, 9).cumsum(1)],
    "alu": lambda: [
        _r(9).cast(dtypes.int32) // (_r(9, seed=1).cast(dtypes.int32) + 2),
        _r(9).cast(dtypes.uint8) % (_r(9, seed=1).cast(dtypes.uint8) + 1),
        _r(9) % 0.7,
        _r(9).abs() ** _r(9, seed=1),
        _r(9).cast(dtypes.int32) ** 3,
        -_r(9).cast(dtypes.int8),
        ~(_r(9) > 0),
        (_r(9) > 0).where(_r(9).reciprocal(), _r(9).sqrt().trunc()),
        _r(9, dtype=dtypes.half).cast(dtypes.bool).cast(dtypes.half) * 2,
        _r(9).cast(dtypes.int64).maximum(_r(9, seed=1).cast(dtypes.int64)),
        _r(9).cast(dtypes.int32) << _r(9, seed=1).cast(dtypes.int32),
        _r(9).cast(dtypes.uint16) >> 3,
        _r(9, dtype=dtypes.half).bitcast(dtypes.int16),
        _r(9, dtype=dtypes.float64).exp() - _r(9, dtype=dtypes.bfloat16).log(),
    ],
    "digits_step": _digits_step,
    "attention": lambda: [
        _r(1, 2, 16, 8).scaled_dot_product_attention(_r(1, 2, 16, 8), _r(1, 2, 16, 8), is_causal=True)
    ],
    "long_reduce": lambda: [_r(1024, 1024).sum(), _r(4, 65536).mean(1), _r(20000, 3).sum(0)],
    "transcendental": lambda: [_r(100).tanh(), _r(100).erf(), _r(100).cos(), _r(50).gelu(), _r(30).expm1()],
}

RENDERERS = {
    "CPU": lambda: Device["CPU"].renderer,
    "CL": OpenCLRenderer,
    "CUDA": CUDARenderer,
    "METAL": MetalRenderer,
    "PYTHON": PythonRenderer,
}


def kernel_sources() -> dict[str, str]:
    out: dict[str, str] = {}
    renderers = {name: make() for name, make in RENDERERS.items()}
    for wname, build in WORKLOADS.items():
        tensors = build()
        asts = [si.ast for si in Tensor.schedule(*tensors) if si.ast.op is Ops.SINK]
        for i, ast in enumerate(asts):
            for rname, renderer in renderers.items():
                try:
                    src = get_program(ast, renderer).src
                except Exception as e:  # noqa: BLE001 -- a kernel a renderer refuses is recorded as such
                    src = f"<{type(e).__name__}: {e}>"
                out[f"{wname}/{i}/{rname}"] = src
    return out


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "compare"):
        print(__doc__)
        return 2
    now = kernel_sources()
    if sys.argv[1] == "save":
        with open(sys.argv[2], "w") as f:
            json.dump(now, f, indent=0, sort_keys=True)
        print(f"saved {len(now)} kernel sources to {sys.argv[2]}")
        return 0
    with open(sys.argv[2]) as f:
        before = json.load(f)
    changed = [k for k in before if k in now and now[k] != before[k]]
    missing, new = sorted(set(before) - set(now)), sorted(set(now) - set(before))
    for k in changed[:5]:
        print(f"--- {k}")
        print("".join(difflib.unified_diff(before[k].splitlines(True), now[k].splitlines(True), n=1)))
    print(
        f"{len(before)} kernel sources before, {len(now)} now: {len(changed)} changed, {len(missing)} missing, "
        f"{len(new)} new"
    )
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
