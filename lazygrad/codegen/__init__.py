"""Codegen: kernel AST -> optimized iteration space -> lowered graph -> linear UOps -> source (via a renderer)."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from lazygrad.codegen import heuristic, workgroups
from lazygrad.codegen.heuristic import hand_coded_optimizations
from lazygrad.codegen.kernel import Kernel, Opt
from lazygrad.codegen.linearize import linearize
from lazygrad.codegen.lowerer import lower
from lazygrad.codegen.workgroups import default_optimizations
from lazygrad.helpers import BEAM, DEBUG, NOOPT, SPEC, VIZ, diskcache_get, diskcache_put
from lazygrad.renderer import ProgramSpec, Renderer, estimate_mem, estimate_ops
from lazygrad.uop.ops import Ops, UOp, serialize
from lazygrad.uop.passes import PassRun, step
from lazygrad.uop.spec import verify_kernel, verify_program
from lazygrad.viz import profile, record


def launch_dims(uops: list[UOp]) -> tuple[tuple[int, ...], tuple[int, ...]] | tuple[None, None]:
    """(workgroups per dimension, threads per workgroup) from the thread ids; (None, None) for loop-only kernels."""
    specials = [u for u in uops if u.op is Ops.SPECIAL]
    if not specials:
        return None, None
    dims = {"g": [1, 1, 1], "l": [1, 1, 1]}
    for u in specials:
        _, size, kind, dim = u.arg
        dims[kind][dim] = size
    return tuple(dims["g"]), tuple(dims["l"])


@functools.cache
def _codegen_version() -> str:
    """A hash of the code that turns an AST into source: a cached program is reused only by the code that wrote it."""
    root = Path(__file__).resolve().parent.parent
    files = sorted(p for d in ("codegen", "renderer", "uop") for p in (root / d).glob("*.py"))
    h = hashlib.sha256()
    for p in [*files, root / "dtype.py"]:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _program_key(ast: UOp, renderer: Renderer) -> str:
    # the renderer's attributes are its capabilities (cores, vector widths, workgroup limits): all change the code;
    # so do the knobs of the default opts (read when the module is imported: a process that set one was served the
    # kernels another process built without it)
    caps = sorted((k, repr(v)) for k, v in vars(renderer).items())
    knobs = (
        heuristic.THREAD_MIN_WORK,
        heuristic.VECTOR_BYTES,
        heuristic.ROW_CHUNK_BYTES,
        workgroups.TC,
        workgroups.TC_STAGE,
    )
    return repr((_codegen_version(), type(renderer).__name__, caps, NOOPT.value, BEAM.value, knobs, serialize(ast)))


def get_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """The kernel's source and launch facts. Without explicit opts the result is cached on disk, so a second process
    lowers nothing (lowering a kernel with big register tiles takes tens of milliseconds); DEBUG>=3 bypasses the
    cache to print the AST, the opts and the source, and VIZ to record every pass of every kernel."""
    if not renderer.computes:
        raise RuntimeError(
            f"{renderer.device} only stores tensors and cannot compute; copy the tensor to a compute device first, "
            f"e.g. t.to('CPU')"
        )
    if opts is not None or DEBUG >= 3 or VIZ:
        return _build_program(ast, renderer, opts)
    key = _program_key(ast, renderer)
    if (spec := diskcache_get("program", key)) is None:
        spec = diskcache_put("program", key, _build_program(ast, renderer, None))
    return spec


def _build_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None) -> ProgramSpec:
    with profile.span("codegen", "codegen") as args, record.codegen(ast, opts is not None) as viz_finish:  # VIZ
        spec = _build_program_steps(ast, renderer, opts)
        args["kernel"], args["opts"] = spec.name, [str(o) for o in spec.applied_opts]
        viz_finish(spec)
    return spec


# *** the passes from a kernel AST to source, in order (uop/passes.py checks the order and runs the verifier) ***


@dataclass(frozen=True)
class Build:
    """What every codegen pass of one kernel reads: its AST, the target, and explicit opts (None: heuristic/BEAM)."""

    ast: UOp
    renderer: Renderer
    opts: list[Opt] | None = None


def _optimize(k: Kernel, ctx: Build) -> Kernel:
    k.merge_axes()
    if ctx.opts is not None:
        k.apply_opts(ctx.opts)
    elif any(isinstance(s, UOp) for s in k.full_shape):
        # a symbolic axis (a size that is a Variable) is a plain loop: an opt on it (a split by a constant) would need
        # a remainder loop, and BEAM times one value only. On the CPU the heuristic splits the constant axes beside
        # it and threads one of them (one core: attention of 16 heads over 1500 cached positions 1.35 -> 0.23 ms,
        # softmax of (1500, 1024) 3.8 -> 0.6 ms); GPU targets' workgroup rules assume constant sizes throughout, so
        # there it stays plain
        if not NOOPT and not ctx.renderer.has_local:
            hand_coded_optimizations(k)
    elif BEAM >= 1:
        from lazygrad.codegen.search import beam_search  # imports the device layer: only when searching

        k.apply_opts(beam_search(ctx.ast, ctx.renderer, BEAM.value))
    elif not NOOPT:
        default_optimizations(k)
    if DEBUG >= 3:
        print(ctx.ast)
        print(f"{k.name}: applied {k.applied_opts}")
    return k


OPTIMIZE = step("optimize", category="codegen")(_optimize)
LOWER = step("lower", after=("optimize",), category="codegen")(lambda k, ctx: lower(k))
LINEARIZE = step("linearize", after=("lower",), verify=verify_program, category="codegen")(
    lambda sink, ctx: linearize(sink)
)


def _render(uops: list[UOp], ctx: tuple[Renderer, str]) -> str:
    renderer, name = ctx
    return renderer.render(name, uops)


RENDER = step("render", after=("linearize",), category="codegen")(_render)


def _build_program_steps(ast: UOp, renderer: Renderer, opts: list[Opt] | None) -> ProgramSpec:
    if SPEC:
        verify_kernel(ast, "schedule")
    build, run = Build(ast, renderer, opts), PassRun()
    k = run(OPTIMIZE, Kernel(ast, renderer), build)
    lowered = run(LOWER, k, build)
    record.stage("lowered", lowered)  # VIZ
    uops = run(LINEARIZE, lowered, build)
    record.stage("linearized", uops)  # VIZ
    src = run(RENDER, uops, (renderer, k.function_name))
    if DEBUG >= 4:
        print(src)
    return _program_spec(k, ast, uops, src)


def _program_spec(k: Kernel, ast: UOp, uops: list[UOp], src: str) -> ProgramSpec:
    globals_ = [u for u in uops if u.op is Ops.DEFINE_GLOBAL]
    variables = tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0]))
    global_size, local_size = launch_dims(uops)
    return ProgramSpec(
        name=k.function_name,
        display_name=k.name,
        src=src,
        n_bufs=len(globals_),
        outs=tuple(st.src[0].arg for st in ast.src),
        vars=variables,
        global_size=global_size,
        local_size=local_size,
        ops=estimate_ops(uops),
        mem=estimate_mem(uops),
        applied_opts=tuple(k.applied_opts),
    )
