"""The scheduler as named passes (schedule/kernelize.py): each is a PROFILE span, the verifier names the pass."""

from __future__ import annotations

import numpy as np
import pytest

from lazygrad import Tensor, dtypes
from lazygrad.helpers import Context
from lazygrad.schedule import kernelize
from lazygrad.uop.ops import Ops, UOp
from lazygrad.uop.spec import SpecError
from lazygrad.viz import profile


def _fresh_graph() -> Tensor:
    # a shape no other test schedules, so the schedule cache does not answer
    a = Tensor(np.arange(7 * 13, dtype=np.float32).reshape(7, 13)).realize()
    return (a * 3).sum(1) + a.max(1)


def test_each_schedule_pass_is_a_profile_span() -> None:
    kernelize._templates.clear()
    with Context(PROFILE=1):
        profile.clear()
        _fresh_graph().schedule()
        names = [e["name"] for e in profile.events() if e.get("cat") == "schedule pass"]
    passes = [p.name for p in kernelize.SCHEDULE_PASSES]
    assert names and names == passes * (len(names) // len(passes)), names  # each schedule runs them all, in order


def test_verifier_names_the_pass_that_built_a_bad_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    kernelize._templates.clear()

    def wrong_dtype(self: kernelize._KernelBuilder) -> UOp:  # stores an int value into a float buffer
        ast = real(self)
        st = ast.src[0]
        bad = UOp(Ops.STORE, st.dtype, (*st.src[:2], st.src[2].cast(dtypes.int32)))
        return UOp(Ops.SINK, ast.dtype, (bad, *ast.src[1:]))

    real = kernelize._KernelBuilder.kernel
    monkeypatch.setattr(kernelize._KernelBuilder, "kernel", wrong_dtype)
    with Context(SPEC=1), pytest.raises(SpecError, match="after build kernels: STORE .*stores dtypes.int32 into"):
        _fresh_graph().schedule()
