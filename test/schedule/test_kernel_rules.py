"""Each rule of KERNEL_OP (schedule/kernelize.py): how a tensor-graph op becomes kernel AST."""

from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from lazygrad.device import Buffer
from lazygrad.schedule.kernelize import GUARD, KERNEL_OP, _Here, _KernelBuilder
from lazygrad.uop.ops import Ops, UOp

F32 = dtypes.float32


def builder(root: UOp) -> _KernelBuilder:
    out = Buffer("CPU", root.size, root.dtype)
    return _KernelBuilder(root, {root}, {}, {root: out}, {})


def buffer_node(n: int = 6) -> UOp:
    return Tensor(np.arange(n, dtype=np.float32)).realize().uop.base


def test_movement_and_contiguous_are_their_input() -> None:
    b = buffer_node()
    kb, x = builder(b), UOp.const(F32, 1.0)
    for node in (UOp(Ops.RESHAPE, F32, (b,), (2, 3)), UOp(Ops.CONTIGUOUS, F32, (b,)), UOp(Ops.DETACH, F32, (b,))):
        assert KERNEL_OP.translate(node, _Here(kb, (), [x])) is x


def test_buffer_is_a_load_through_its_chain() -> None:
    b = buffer_node()
    kb = builder(UOp(Ops.RESHAPE, F32, (b,), (2, 3)))
    got = KERNEL_OP.translate(b, _Here(kb, ((Ops.RESHAPE, (2, 3)),), []))
    assert got.op is Ops.LOAD and got.src[0].op is Ops.DEFINE_GLOBAL and got.src[0].arg == 1
    assert got.src[1].arg.shape == (2, 3) and kb.reads == {b} and kb.bufs[1] is b.arg


def test_const_under_a_pad_is_masked_unless_a_node_above_guards_it() -> None:
    c = UOp.const(F32, 2.0)
    kb = builder(buffer_node(8))
    pad = ((Ops.EXPAND, (4,)), (Ops.PAD, ((2, 2),)))
    masked = KERNEL_OP.translate(c, _Here(kb, pad, []))
    assert masked.src[0].arg.has_mask
    guarded = KERNEL_OP.translate(c, _Here(kb, (GUARD, *pad), []))
    assert not guarded.src[0].arg.has_mask and guarded.arg == 2.0


def test_bind_is_a_kernel_argument_with_one_value_per_schedule() -> None:
    n = UOp.variable("n", 1, 10)
    kb = builder(buffer_node())
    assert KERNEL_OP.translate(n.bind(3), _Here(kb, (), [])) is n and kb.var_vals == {n: 3}
    with pytest.raises(ValueError, match="bound to both 3 and 4"):
        KERNEL_OP.translate(n.bind(4), _Here(kb, (), []))


def test_unsafe_op_under_a_pad_is_masked_as_a_whole() -> None:
    t = Tensor(np.ones(4, np.float32)).realize()
    e = t.exp2().uop  # exp2(0) is 1: padding it must give 0, not 1
    kb = builder(buffer_node(8))
    x = UOp(Ops.LOAD, F32, ())
    got = KERNEL_OP.translate(e, _Here(kb, ((Ops.PAD, ((2, 2),)),), [x]))
    assert got.op is Ops.WHERE and got.src[0].op is Ops.VALID and got.src[1] is UOp(Ops.EXP2, F32, (x,))
    safe = t.sqrt().uop  # sqrt(+0) is +0: no mask
    assert KERNEL_OP.translate(safe, _Here(kb, ((Ops.PAD, ((2, 2),)),), [x])) is UOp(Ops.SQRT, F32, (x,))
    negated = t.neg().uop  # -(+0) is -0, not the pad's +0 (1/x tells them apart): masked
    assert KERNEL_OP.translate(negated, _Here(kb, ((Ops.PAD, ((2, 2),)),), [x])).op is Ops.WHERE


def test_an_op_with_no_rule_is_refused() -> None:
    assert KERNEL_OP.translate(UOp(Ops.COPY, F32, (), "CPU"), _Here(builder(buffer_node()), (), [])) is None
