"""The render rules of each C dialect (renderer/cstyle.py C_RENDER and each dialect's rules in front of it)."""

from __future__ import annotations

import pytest

from lazygrad import dtypes
from lazygrad.device import Device
from lazygrad.renderer.cstyle import RenderCtx
from lazygrad.renderer.gpu import CUDARenderer, MetalRenderer, OpenCLRenderer
from lazygrad.uop.ops import Ops, UOp

F32, I32 = dtypes.float32, dtypes.int32


def c(v, dt=I32) -> UOp:
    return UOp(Ops.CONST, dt, arg=v)


def printed(renderer, uops: list[UOp]) -> tuple[RenderCtx, list[str]]:
    """Each uop through the renderer's rules, in order: the context after, and what each one is called."""
    ctx = RenderCtx(renderer, uops)
    names = []
    for u in uops:
        text = renderer.render_rules.translate(u, ctx)
        assert text is not None, f"no rule for {u.op}"
        if text:
            ctx.names[u] = text
        names.append(text)
    return ctx, names


def test_a_loop_opens_and_closes_one_level() -> None:
    rng = UOp(Ops.RANGE, I32, (c(8),), (0, "r"))
    end = UOp(Ops.ENDRANGE, dtypes.void, (rng,))
    ctx, names = printed(Device["CPU"].renderer, [c(8), rng, end])
    assert names == ["8", "ridx0", ""]
    assert ctx.lines == ["  for (int ridx0 = 0; ridx0 < 8; ridx0++) {", "  }"] and ctx.depth == 1


def test_loads_and_stores_through_index() -> None:
    buf, out = UOp(Ops.DEFINE_GLOBAL, F32.ptr(4), arg=1), UOp(Ops.DEFINE_GLOBAL, F32.ptr(4), arg=0)
    gate = UOp(Ops.CMPLT, dtypes.bool, (c(1), c(2)))
    load = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, buf.dtype, (buf, c(3))), gate))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, c(0))), load))
    uops = [out, buf, c(0), c(1), c(2), c(3), gate, load.src[0], load, store.src[0], store]
    ctx, names = printed(Device["CPU"].renderer, uops)
    assert names[:2] == ["data0", "data1"] and names[7] == "data1[3]"
    assert ctx.lines == ["  float val0 = ((1<2)?data1[3]:0.0f);", "  data0[0] = val0;"]
    assert ctx.param_list() == ["float* restrict data0", "const float* restrict data1"]


def test_a_value_used_twice_gets_a_variable() -> None:
    x = UOp(Ops.DEFINE_VAR, I32, arg=("n", 0, 9))
    once = UOp(Ops.ADD, I32, (x, c(1)))
    twice = UOp(Ops.MUL, I32, (once, once))
    ctx, names = printed(Device["CPU"].renderer, [x, c(1), once, twice])
    assert names[2] == "alu0" and ctx.lines == ["  int alu0 = (n+1);"] and names[3] == "(alu0*alu0)"


@pytest.mark.parametrize(
    "renderer, thread, local, barrier, lane",
    [
        (OpenCLRenderer(), "get_group_id(0)", "__local float temp0[16];", "barrier(CLK_LOCAL_MEM_FENCE);", "v.s1"),
        (
            CUDARenderer(),
            "blockIdx.x",
            "__shared__ float temp0[16] __attribute__((aligned(16)));",  # a staged tile is read 16 bytes at a time
            "__syncthreads();",
            "v.y",
        ),
        (
            MetalRenderer(),
            "gid.x",
            "threadgroup float temp0[16];",
            "threadgroup_barrier(mem_flags::mem_threadgroup);",
            "v[1]",
        ),
    ],
)
def test_dialect_rules(renderer, thread: str, local: str, barrier: str, lane: str) -> None:
    sid = UOp(Ops.SPECIAL, I32, (), ("gidx0", 32, "g", 0))
    shared = UOp(Ops.DEFINE_LOCAL, F32.ptr(16, local=True), (), "temp0")
    bar = UOp(Ops.BARRIER, dtypes.void, ())
    vec = UOp(Ops.DEFINE_VAR, F32.vec(2), arg=("v", 0, 1))
    g = UOp(Ops.GEP, F32, (vec,), 1)
    ctx, names = printed(renderer, [sid, shared, bar])
    assert names == ["gidx0", "temp0", ""]
    assert ctx.lines == [f"  int gidx0 = {thread}; /* 32 */", f"  {local}", f"  {barrier}"]
    ctx = RenderCtx(renderer, [vec, g])
    ctx.names[vec] = "v"
    assert renderer.render_rules.translate(g, ctx) == lane


def test_c_has_no_thread_ids_barriers_or_tensor_cores() -> None:
    renderer = Device["CPU"].renderer
    for u in (UOp(Ops.SPECIAL, I32, (), ("gidx0", 32, "g", 0)), UOp(Ops.BARRIER, dtypes.void, ())):
        assert renderer.render_rules.translate(u, RenderCtx(renderer, [u])) is None
        with pytest.raises(NotImplementedError, match=f"cannot render {u.op}"):
            renderer.render("k", [u])


def test_cuda_packed_halves_travel_as_their_bits() -> None:
    """CUDA's rules for 2-wide half vectors (STAGE tiles, tensor-core pairs): a wide store stores the register as it
    is, a pair of scalar loads is joined by shifts, a lane of a 2-wide load is converted from its half of the word."""
    r, H = CUDARenderer(), dtypes.float16
    buf, out = UOp(Ops.DEFINE_GLOBAL, H.ptr(8), arg=1), UOp(Ops.DEFINE_LOCAL, H.ptr(8, local=True), arg="stage0")
    i0, i1 = UOp(Ops.INDEX, buf.dtype, (buf, c(0))), UOp(Ops.INDEX, buf.dtype, (buf, c(1)))
    l0, l1 = UOp(Ops.LOAD, H, (i0,)), UOp(Ops.LOAD, H, (i1,))
    joined = UOp(Ops.VECTORIZE, H.vec(2), (l0, l1))
    wide = UOp(Ops.LOAD, H.vec(2), (i0,))
    lane = UOp(Ops.GEP, H, (wide,), 1)
    dst = UOp(Ops.INDEX, out.dtype, (out, c(0)))
    store = UOp(Ops.STORE, dtypes.void, (dst, wide))
    uops = [buf, out, c(0), c(1), i0, i1, l0, l1, joined, wide, lane, dst, store]
    ctx, names = printed(r, uops)
    assert names[8] == "((unsigned int)data1[0]|((unsigned int)data1[1]<<16))"
    assert names[10] == "lg_half_to_f((unsigned short)(val2>>16))"
    assert ctx.lines[-1] == "  *((unsigned int*)&stage0[0]) = val2;"
    # float vectors keep the C rules
    f = UOp(Ops.VECTORIZE, F32.vec(2), (c(1.0, F32), c(2.0, F32)))
    assert printed(r, [f.src[0], f.src[1], f])[1][2] == "make_float2(1.0f,2.0f)"


def test_a_loop_beside_a_thread_id_of_its_name_is_renamed() -> None:
    """A symbolic axis whose largest size is 1 stays a loop beside the thread ids: it must not take gidx0's name."""
    sid = UOp(Ops.SPECIAL, I32, (), ("gidx0", 32, "g", 0))
    n = UOp(Ops.DEFINE_VAR, I32, arg=("n", 0, 1))
    rng = UOp(Ops.RANGE, I32, (n,), (0, "g"))
    ctx, names = printed(CUDARenderer(), [sid, n, rng])
    assert names == ["gidx0", "n", "loop0"] and ctx.lines[-1] == "  for (int loop0 = 0; loop0 < n; loop0++) {"
