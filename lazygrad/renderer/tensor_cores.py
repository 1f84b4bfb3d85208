"""Tensor cores: warp-wide matrix multiply-accumulate instructions, described as data.

One `TensorCore` is one instruction shape: D = A @ B + C over an M x N x K tile, executed by `threads` lanes
together. Each lane holds some elements of each operand (its fragment); `coords` says which element of the tile
fragment entry `i` of lane `lane` is. The lowerer uses the same function to compute what each lane loads and stores,
and the PYTHON device to emulate the instruction, so the layout is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lazygrad.dtype import DType, dtypes


@dataclass(frozen=True)
class TensorCore:
    name: str
    dims: tuple[int, int, int]  # M, N, K of one instruction
    threads: int  # lanes that execute it together (a warp)
    dtype_in: DType  # A and B
    dtype_out: DType  # C and D
    elements: tuple[int, int, int]  # per lane: A, B, C fragment lengths

    def coords(self, operand: str, lane: Any, i: int) -> tuple[Any, Any]:
        """(row, col) in the tile of fragment entry `i` of `lane`: A is M x K, B is K x N, C and D are M x N.
        `lane` may be an int or an int UOp (the lowerer's thread id); `i` is always an int."""
        # PTX ISA, mma.m16n8k16 with .f16/.bf16 inputs: a lane is (group g, thread-in-group t) = (lane/4, lane%4)
        g, t = lane // 4, lane % 4
        if operand == "a":
            return g + 8 * ((i >> 1) & 1), t * 2 + (i & 1) + 8 * (i >> 2)
        if operand == "b":
            return t * 2 + (i & 1) + 8 * (i >> 1), g
        assert operand == "c", f"unknown tensor-core operand {operand!r}"
        return g + 8 * (i >> 1), t * 2 + (i & 1)


# NVIDIA sm_80 and later: mma.sync.aligned.m16n8k16.row.col with float accumulators
MMA_F16 = TensorCore("mma_m16n8k16_f16_f32", (16, 8, 16), 32, dtypes.float16, dtypes.float32, (8, 4, 4))
MMA_BF16 = TensorCore("mma_m16n8k16_bf16_f32", (16, 8, 16), 32, dtypes.bfloat16, dtypes.float32, (8, 4, 4))
CUDA_TENSOR_CORES = (MMA_F16, MMA_BF16)
