"""One C-style renderer: how each linear UOp is printed is a rule list (C_RENDER, C_ALU), a dialect puts its own rules
in front. C for the CPU lives here; OpenCL, CUDA and Metal subclass it."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

from lazygrad.dtype import DType, PtrDType, dtypes
from lazygrad.renderer import Renderer, estimate_mem, estimate_ops
from lazygrad.uop.alu import exec_alu
from lazygrad.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, _exact_bounds

# GNU statement expressions: each operand evaluated once, NaN propagated by max like torch.maximum,
# integer division and remainder by zero give 0 instead of trapping the process, and so does INT_MIN % -1, while
# INT_MIN / -1 wraps to INT_MIN as in torch (x86 traps on both). __auto_type, not __typeof__(a):
# __typeof__ repeats the operand's text, so an unrolled chain of nested LG_MAX grew exponentially in the compiler.
# The libm functions kernels call are declared, not taken from <math.h>: the header cost each compiler call 5-10 ms
# of its ~25 ms start (C11 7.1.4 allows declaring a library function without its header; gcc still knows them as
# builtins, so sqrtf and truncf inline as before).
C_PRELUDE = """#ifndef LG_PRELUDE
#define LG_PRELUDE
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()
float exp2f(float); float log2f(float); float sinf(float); float cosf(float); float sqrtf(float); float truncf(float);
float powf(float, float); float fmodf(float, float);
double exp2(double); double log2(double); double sin(double); double cos(double); double sqrt(double);
double trunc(double); double pow(double, double); double fmod(double, double);
#define LG_MAX(a, b) ({ __auto_type _a = (a); __auto_type _b = (b); (_a != _a || _a > _b) ? _a : _b; })
#define LG_IDIV(a, b) ({ __auto_type _a = (a); __auto_type _b = (b); \
  _b == 0 ? (__typeof__(_a))0 : LG_SIGNED_M1(_b) ? (__typeof__(_a))(0ULL - (unsigned long long)_a) : (__typeof__(_a))(_a / _b); })
#define LG_MOD(a, b) ({ __auto_type _a = (a); __auto_type _b = (b); \
  (_b == 0 || LG_SIGNED_M1(_b)) ? (__typeof__(_a))0 : (__typeof__(_a))(_a % _b); })
#define LG_SIGNED_M1(b) ((__typeof__(b))-1 < 0 && (b) == -1)
static inline float lg_bf16_to_f(unsigned short b) { union { unsigned int u; float f; } v; v.u = (unsigned int)b << 16; return v.f; }
static inline unsigned short lg_f_to_bf16(float f) {
  union { unsigned int u; float f; } v; v.f = f;
  if (f != f) return 0x7fc0;
  return (unsigned short)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);
}
static inline float lg_round_bf16(float f) { return lg_bf16_to_f(lg_f_to_bf16(f)); }
#endif
"""  # noqa: E501 (C macros: a backslash-split line would change every kernel's source)

# integer power modulo 2**64 by repeated squaring (the caller narrows it to its dtype); a negative exponent gives 0
# except for bases 1 and -1, as torch's. C has no integer pow, and pow() through double is inexact past 2**53.
IPOW_HELPER = """#ifndef LG_IPOW
#define LG_IPOW
{qual}{u64} lg_ipow({u64} a, {u64} b, int neg) {{
  if (neg) return a == 1 ? 1 : a == ~({u64})0 ? ((b & 1) ? a : 1) : 0;
  {u64} r = 1;
  for (; b; b >>= 1) {{ if (b & 1) r *= a; a *= a; }}
  return r;
}}
#endif
"""


# integer ops whose exact result can leave the dtype's range; _exact_bounds models the first four
WRAPPING_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MULACC})
BOUNDED_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG})
# ops whose float result is always one of their operands' values (or already rounded by the cast itself)
EXACT_FLOAT_OPS = frozenset({Ops.MAX, Ops.WHERE, Ops.NEG, Ops.CAST, Ops.BITCAST, Ops.TRUNC})


def _int_fits(u: UOp) -> bool:
    """Whether C's plain arithmetic already gives `u`'s integer result modulo 2**bits (so no wrapping spelling)."""
    dt = u.dtype
    if dt in (dtypes.uint32, dtypes.uint64):
        return True  # C's unsigned int and long long arithmetic already wraps
    if u.op not in BOUNDED_OPS:
        return False
    lo, hi = _accumulation_bounds(u) or _exact_bounds(u)
    return dtypes.min(dt) <= lo and hi <= dtypes.max(dt)


def _accumulation_bounds(u: UOp) -> tuple[int, int] | None:
    """Bounds of an accumulator's update `acc + partial` inside its reduce loops: after n iterations of partials in
    [lo, hi] the sum lies in [init + n * min(lo, 0), init + n * max(hi, 0)]. Spelled plainly, an int8 dot product's
    `acc += (int)a * (int)b` is what gcc vectorizes into vpdpbusd; through unsigned int it is not recognised."""
    if u.op is not Ops.ADD or u.src[0].op is not Ops.AFTER:
        return None
    acc, ranges = u.src[0].src[0], u.src[0].src[1:]
    if acc.op is not Ops.DEFINE_ACC or acc.src[0].op is not Ops.CONST or not ranges:
        return None
    if any(r.op is not Ops.RANGE for r in ranges):
        return None
    n = math.prod(int(r.src[0].vmax) for r in ranges)
    init, partial = acc.src[0].arg, u.src[1]
    return init + n * min(partial.vmin, 0), init + n * max(partial.vmax, 0)


def _outlinable(ctx: RenderCtx, uops: list[UOp]) -> bool:
    """Whether a kernel's outermost THREAD loop can become a function of the loop index: its trip count is a number
    (a THREAD axis splits a constant one), the loop encloses every line after it, and the lines before it are values
    only (the outlined body computes them again, per index)."""
    if ctx.thread_loop is None or not ctx.thread_loop[2].isdigit() or ctx.lines[-1] != "  }":
        return False
    start = ctx.thread_loop[0]
    if not all(line.startswith("    ") for line in ctx.lines[start + 2 : -1]):
        return False
    first = next(i for i, u in enumerate(uops) if u.op is Ops.RANGE)
    effects = (Ops.STORE, Ops.DEFINE_LOCAL, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.BARRIER)
    return all(u.op not in effects for u in uops[:first])


def _paren_neg(s: str) -> str:
    # a bare negative literal after a binary minus or a negation would read as `--`
    return f"({s})" if s.startswith("-") else s


class CStyleLanguage(Renderer):
    kernel_prefix = "void "
    buffer_prefix = ""
    arg_int_prefix = "const int"
    prelude = ""
    type_map: dict[DType, str] = {
        dtypes.bool: "_Bool",
        dtypes.int8: "signed char",
        dtypes.uint8: "unsigned char",
        dtypes.int16: "short",
        dtypes.uint16: "unsigned short",
        dtypes.int32: "int",
        dtypes.uint32: "unsigned int",
        dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long",
        dtypes.float16: "_Float16",
        dtypes.bfloat16: "float",  # computed in float, stored as 16 bits (see load/store)
        dtypes.float32: "float",
        dtypes.float64: "double",
    }
    # element type in memory where it differs from the type computed with
    storage_map: dict[DType, str] = {dtypes.bfloat16: "unsigned short"}

    # *** dtype and constant spelling ***

    def render_dtype(self, dt: DType, storage: bool = False) -> str:
        if isinstance(dt, PtrDType):
            return self.render_dtype(dt.base, storage=True) + "*"
        if storage and dt in self.storage_map:
            return self.storage_map[dt]
        if dt.count > 1:
            return f"{self.type_map[dt.scalar]}{dt.count}"
        return self.type_map[dt]

    def render_const(self, x: object, dt: DType) -> str:
        if dtypes.is_float(dt):
            assert isinstance(x, float)
            if math.isnan(x):
                s = "NAN"
            elif math.isinf(x):
                s = "INFINITY" if x > 0 else "-INFINITY"
            else:
                s = repr(float(x)) + ("" if dt == dtypes.float64 else "f")
            return (
                _paren_neg(s)
                if dt in (dtypes.float32, dtypes.float64, dtypes.bfloat16)
                else f"(({self.render_dtype(dt)}){s})"
            )
        if dtypes.is_bool(dt):
            return "1" if x else "0"
        assert isinstance(x, int)
        bits = 8 * dt.itemsize
        if not dtypes.is_unsigned(dt) and x == -(2 ** (bits - 1)):
            body = f"({x + 1}{'LL' if bits == 64 else ''}-1)"
        elif dt == dtypes.int64:
            body = f"{x}LL"
        elif dt == dtypes.uint64:
            body = f"{x}ULL"
        elif dt == dtypes.uint32:
            body = f"{x}u"
        else:
            body = str(x)
        return (
            _paren_neg(body)
            if dt in (dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64)
            else f"(({self.render_dtype(dt)}){body})"
        )

    # *** ops ***

    def math_fn(self, name: str, x: str, dt: DType) -> str:
        if dt == dtypes.float64:
            return f"{name}({x})"
        if dt in (dtypes.float32, dtypes.bfloat16):
            return f"{name}f({x})"
        return f"(({self.render_dtype(dt)}){name}f((float){x}))"

    # ALU ops are spelled by rule lists (below the class): `alu_rules` carry torch's semantics (integer wrapping,
    # shifts, 16-bit float rounding) over `plain_alu_rules`, the spelling of each op in this dialect. A dialect puts its
    # own rules in front of its parent's.
    alu_rules: PatternMatcher
    plain_alu_rules: PatternMatcher

    def render_alu(self, u: UOp, a: list[str]) -> str:
        return self._rewrite(self.alu_rules, u, a)

    def render_plain_alu(self, u: UOp, a: list[str]) -> str:
        """`u` spelled with operands `a`, nothing added (the semantic rules call this with operands of their own)."""
        return self._rewrite(self.plain_alu_rules, u, a)

    def _rewrite(self, rules: PatternMatcher, u: UOp, a: list[str]) -> str:
        out = rules.rewrite(u, AluCtx(self, a))
        if out is None:
            raise NotImplementedError(f"{type(self).__name__} cannot render {u.op}")
        return out  # type: ignore[return-value]

    def float_rounding(self, dt: DType) -> str | None:
        """How an op's result of dtype `dt` is rounded to it ("{}" the result) where this dialect computes that 16-bit
        float in float: torch rounds every op's result. None where the dialect computes in the dtype itself."""
        return "lg_round_bf16({})" if dt == dtypes.bfloat16 and self.type_map[dt] == "float" else None

    def render_wrapping(self, u: UOp, a: list[str]) -> str:
        """An integer op whose exact result may not fit its dtype, computed modulo 2**bits as torch does.

        C promotes char and short to int, so `(unsigned char)3 - 7` is -4 unless narrowed again, and signed overflow
        is undefined (gcc folds `x + 1 < x` to false). So the operands go through the unsigned type of at least 32
        bits, where C wraps, and the result is converted back (modulo 2**bits, gcc's and every OpenCL compiler's
        implementation-defined choice). Bounds prove most index math can't overflow: that keeps its plain spelling.
        """
        dt = u.dtype
        if dt == dtypes.bool:
            return f"(({self.render_dtype(dt)}){self.render_plain_alu(u, a)})"
        unsigned = self.render_dtype(dtypes.uint64 if dt.itemsize == 8 else dtypes.uint32)
        ua = [f"(({unsigned}){x})" for x in a]
        if u.op is Ops.NEG:
            expr = f"(({unsigned})0-{ua[0]})"
        else:
            expr = self.render_plain_alu(u, ua)
        return f"(({self.render_dtype(dt)}){expr})"

    def render_shift(self, u: UOp, a: list[str]) -> str:
        """torch's shifts (see uop/alu.py): an amount outside [0, bits) gives 0, or -1 for SHR of a negative, where C
        leaves it undefined and x86 masks the amount. SHL goes through the unsigned type, where C wraps."""
        dt, bits = u.dtype, 8 * u.dtype.itemsize
        t = self.render_dtype(dt)
        if u.op is Ops.SHL:
            unsigned = self.render_dtype(dtypes.uint64 if dt.itemsize == 8 else dtypes.uint32)
            shifted, outside = f"(({unsigned}){a[0]}<<{a[1]})", "0"
        else:
            shifted, outside = f"({a[0]}>>{a[1]})", "0" if dtypes.is_unsigned(dt) else f"({a[0]}<0?-1:0)"
        amount = u.src[1]
        if 0 <= amount.vmin and amount.vmax < bits:
            return f"(({t}){shifted})"
        return f"(({t})(({self.render_dtype(dtypes.uint64)}){a[1]}<{bits}?{shifted}:{outside}))"

    def render_ipow(self, u: UOp, a: list[str]) -> str:
        u64 = self.render_dtype(dtypes.uint64)
        neg = "0" if dtypes.is_unsigned(u.src[1].dtype) else f"({a[1]})<0"
        return f"(({self.render_dtype(u.dtype)})lg_ipow(({u64})({a[0]}),({u64})({a[1]}),{neg}))"

    # *** dialect hooks ***

    # ops whose spelling repeats an operand: those operands get a variable of their own instead of being inlined
    dup_operand_ops: frozenset[Ops] = frozenset({Ops.SHL, Ops.SHR, Ops.POW})

    def render_buffer_param(self, u: UOp, name: str, written: bool) -> str:
        qual = "" if written else "const "
        return f"{qual}{self.buffer_prefix}{self.render_dtype(u.dtype)} restrict {name}"

    def raw_load_bits(self, u: UOp, addr: str) -> str | None:
        """For a load of a 16-bit float this dialect computes in float: its stored bits (a uint16 expression), so a
        bit cast of the loaded value keeps a NaN's payload (the round trip through float would not)."""
        return None

    def parallel_for(self, ctx: RenderCtx) -> str:
        """The line before a loop of the kernel being rendered whose iterations run on all cores (has_threads)."""
        return ""

    def render_store_target(self, addr: str, dt: DType) -> str:
        return addr

    def render_store(self, addr: str, val: str, u: UOp) -> str:
        """The statement storing `val` (already in storage form) at `addr` (an element of a buffer)."""
        return f"{self.render_store_target(addr, u.src[1].dtype)} = {val}"

    def render_vectorize(self, dt: DType, items: list[str]) -> str:
        return f"(({self.render_dtype(dt)}){{{','.join(items)}}})"

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        return f"{self.prelude}{self.kernel_prefix}{name}({', '.join(params)}) {{\n{body}\n}}\n"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        if src == dtypes.bfloat16:
            x, src = f"lg_f_to_bf16({x})", dtypes.uint16
        out = dtypes.uint16 if dst == dtypes.bfloat16 else dst
        ret = f"({{ {self.render_dtype(src)} _s = {x}; {self.render_dtype(out)} _d; "
        ret += "__builtin_memcpy(&_d, &_s, sizeof(_d)); _d; })"
        return f"lg_bf16_to_f({ret})" if dst == dtypes.bfloat16 else ret

    def render_load(self, u: UOp, addr: str) -> str:
        dt = u.src[0].dtype.base  # type: ignore[attr-defined]
        return f"lg_bf16_to_f({addr})" if dt == dtypes.bfloat16 else addr

    def render_store_value(self, dt: DType, val: str) -> str:
        return f"lg_f_to_bf16({val})" if dt == dtypes.bfloat16 else val

    # *** the kernel ***

    # how each linear UOp is printed (below the class): the base rules, with a dialect's own rules in front (thread
    # ids, shared memory, barriers, vector lanes, tensor cores)
    render_rules: PatternMatcher

    def render(self, name: str, uops: list[UOp]) -> str:
        ctx = self.render_lines(uops)
        return self.render_kernel(name, ctx.param_list(), "\n".join(ctx.lines), uops)

    def render_lines(self, uops: list[UOp]) -> RenderCtx:
        """The kernel's parameters and the lines of its body, every UOp printed in order."""
        ctx = RenderCtx(self, uops)
        for u in uops:
            if (text := self.render_rules.translate(u, ctx)) is None:
                raise NotImplementedError(f"{type(self).__name__} cannot render {u.op}")
            if text:
                ctx.names[u] = text
        return ctx


class RenderCtx:
    """One kernel being printed: the name (or inlined expression) of each UOp so far, its parameters, its lines.
    A render rule gets this and its UOp, may add lines, and returns the UOp's name ("" when it has no value)."""

    def __init__(self, r: CStyleLanguage, uops: list[UOp]):
        self.r = r
        self.uses: dict[UOp, int] = {}
        for u in uops:
            for s in u.src:
                self.uses[s] = self.uses.get(s, 0) + (2 if u.op in r.dup_operand_ops else 1)
        self.names: dict[UOp, str] = {}
        self.params: list[tuple[tuple, str, str]] = []  # (order: buffers by index, then variables), text, name
        self.written = {u.src[0].src[0] for u in uops if u.op is Ops.STORE}
        self.lines: list[str] = []
        self.depth = 1
        self.counters: dict[str, int] = {}
        self.raw_bits: dict[UOp, str] = {}  # loads of 16-bit floats computed in a wider type: their bits as stored
        # bool vectors a dialect keeps as lane masks (all bits of a lane set or clear): each one's lane width in bytes
        self.mask_bytes: dict[UOp, int] = {}
        self.special_names = {u.arg[0] for u in uops if u.op is Ops.SPECIAL}
        self.uops = uops
        # an outermost THREAD loop: (index of its pragma line, its variable's declaration, its trip count)
        self.thread_loop: tuple[int, str, str] | None = None
        self.prefetch: dict[UOp, list[tuple[UOp, UOp, list[int]]]] | None = None  # ClangRenderer's, planned once

    @functools.cached_property
    def work(self) -> tuple[int, int]:
        """(FLOPs, bytes) of one run of the kernel (estimate_ops, estimate_mem), worked out once per render."""
        return estimate_ops(self.uops), estimate_mem(self.uops)

    def param_list(self, names: bool = False) -> list[str]:
        """The parameters in order (or their names)."""
        return [name if names else text for _, text, name in sorted(self.params, key=lambda x: x[0])]

    def fresh(self, prefix: str) -> str:
        self.counters[prefix] = self.counters.get(prefix, 0) + 1
        return f"{prefix}{self.counters[prefix] - 1}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def srcs(self, u: UOp) -> list[str]:
        return [self.names[s] for s in u.src]

    def expr(self, u: UOp, text: str) -> str:
        """A value: inlined where it is used once, else computed once into a variable."""
        if self.uses.get(u, 0) <= 1:
            return text
        v = self.fresh("alu")
        self.line(f"{self.r.render_dtype(u.dtype)} {v} = {text};")
        return v

    def declare(self, u: UOp, prefix: str, value: str) -> str:
        v = self.fresh(prefix)
        self.line(f"{self.r.render_dtype(u.dtype)} {v} = {value};")
        return v


def _define_global(ctx: RenderCtx, u: UOp) -> str:
    name = f"data{u.arg}"
    ctx.params.append(((0, u.arg), ctx.r.render_buffer_param(u, name, u in ctx.written), name))
    return name


def _define_var(ctx: RenderCtx, u: UOp) -> str:
    ctx.params.append(((1, u.arg[0]), f"{ctx.r.arg_int_prefix} {u.arg[0]}", u.arg[0]))
    return u.arg[0]


THREAD_KINDS = ("t", "tr")  # loop kinds (codegen/lowerer.py RANGE_KIND) whose iterations the CPU cores share


def _range(ctx: RenderCtx, u: UOp) -> str:
    axis, kind = u.arg
    v = f"{ {'r': 'ridx', 'rb': 'rblk'}.get(kind, 'gidx') }{axis}"
    # a loop beside thread ids (a symbolic axis whose largest size is 1) must not take a thread id's name
    v = f"loop{axis}" if v in ctx.special_names else v
    decl, bound = f"{ctx.r.render_dtype(u.dtype)} {v}", ctx.names[u.src[0]]
    if kind in THREAD_KINDS:  # a THREAD axis: the loop's iterations are shared out among the CPU cores
        if kind == "t" and ctx.depth == 1:
            ctx.thread_loop = (len(ctx.lines), decl, bound)
        ctx.line(ctx.r.parallel_for(ctx))
    ctx.line(f"for ({decl} = 0; {v} < {bound}; {v}++) {{")
    ctx.depth += 1
    return v


def _endrange(ctx: RenderCtx) -> str:
    ctx.depth -= 1
    ctx.line("}")
    return ""


def _load(ctx: RenderCtx, u: UOp) -> str:
    addr = ctx.names[u.src[0]]
    if len(u.src) == 1 and (bits := ctx.r.raw_load_bits(u, addr)) is not None:
        ctx.raw_bits[u] = bits
    val = ctx.r.render_load(u, addr)
    if len(u.src) > 1:  # gated: the padding reads as 0
        zero = ctx.r.render_const(0.0 if dtypes.is_float(u.dtype) else 0, u.dtype)
        val = f"({ctx.names[u.src[1]]}?{val}:{zero})"
    return ctx.declare(u, "val", val)


def store_statement(ctx: RenderCtx, u: UOp, value: str) -> str:
    """STORE `u`'s statement, `value` already in storage form; gated where the store has a gate."""
    gate = f"if ({ctx.names[u.src[2]]}) " if len(u.src) > 2 else ""
    ctx.line(f"{gate}{ctx.r.render_store(ctx.names[u.src[0]], value, u)};")
    return ""


def _store(ctx: RenderCtx, u: UOp) -> str:
    dt = u.src[0].src[0].dtype.base  # type: ignore[attr-defined]
    return store_statement(ctx, u, ctx.r.render_store_value(dt, ctx.names[u.src[1]]))


def _statement(text: Callable[[RenderCtx, UOp], str]) -> Callable[[RenderCtx, UOp], str]:
    """A rule for a UOp with no value: its one line."""

    def rule(ctx: RenderCtx, u: UOp) -> str:
        ctx.line(text(ctx, u))
        return ""

    return rule


def thread_id(spelling: Callable[[str, int], str]) -> Callable[[RenderCtx, UOp], str]:
    """A dialect's SPECIAL rule from the spelling of a ("g" workgroup or "l" local, dimension) id."""

    def rule(ctx: RenderCtx, u: UOp) -> str:
        name, size, kind, dim = u.arg
        ctx.line(f"{ctx.r.render_dtype(u.dtype)} {name} = {spelling(kind, dim)}; /* {size} */")
        return name

    return rule


def local_buffer(qualifier: str, storage: bool = True, suffix: str = "") -> Callable[[RenderCtx, UOp], str]:
    """A dialect's DEFINE_LOCAL rule: an array in the workgroup's shared memory, declared with `qualifier` (and
    `suffix` after the array, an attribute)."""

    def rule(ctx: RenderCtx, u: UOp) -> str:
        ptr = u.dtype
        ctx.line(f"{qualifier}{ctx.r.render_dtype(ptr.base, storage=storage)} {u.arg}[{ptr.size}]{suffix};")  # type: ignore[attr-defined]
        return u.arg

    return rule


def gep(spelling: Callable[[str, int], str]) -> Callable[[RenderCtx, UOp], str]:
    """A dialect's GEP rule from the spelling of lane `i` of vector `v`."""
    return lambda ctx, u: ctx.expr(u, spelling(ctx.names[u.src[0]], u.arg))


def _c_lanes(v: str, i: int | tuple[int, ...]) -> str:
    """Lane i of vector v, or a vector of lanes i (a shuffle: Renderer.lane_shuffle)."""
    return f"__builtin_shufflevector({v},{v},{','.join(map(str, i))})" if type(i) is tuple else f"{v}[{i}]"


# how each linear UOp is printed in C: definitions become parameters and names, loops `for` blocks, loads and stores
# statements through INDEX's `buf[idx]`, values (ALU ops, vectors) expressions inlined where used once
C_RENDER = PatternMatcher(
    [
        (UPat(Ops.DEFINE_GLOBAL, name="u"), _define_global),
        (UPat(Ops.DEFINE_VAR, name="u"), _define_var),
        (UPat(Ops.CONST, name="u"), lambda ctx, u: ctx.r.render_const(u.arg, u.dtype)),
        (UPat(Ops.RANGE, name="u"), _range),
        (UPat(Ops.ENDRANGE), _endrange),
        (UPat(Ops.DEFINE_ACC, name="u"), lambda ctx, u: ctx.declare(u, "acc", ctx.names[u.src[0]])),
        (UPat(Ops.ASSIGN, name="u"), _statement(lambda ctx, u: f"{ctx.names[u.src[0]]} = {ctx.names[u.src[1]]};")),
        (UPat(Ops.AFTER, name="u"), lambda ctx, u: ctx.names[u.src[0]]),  # the accumulator, once its loop ran
        (UPat(Ops.INDEX, name="u"), lambda ctx, u: f"{ctx.names[u.src[0]]}[{ctx.names[u.src[1]]}]"),
        (UPat(Ops.LOAD, name="u"), _load),
        (UPat(Ops.STORE, name="u"), _store),
        (UPat(Ops.VECTORIZE, name="u"), lambda ctx, u: ctx.expr(u, ctx.r.render_vectorize(u.dtype, ctx.srcs(u)))),
        (UPat(Ops.GEP, name="u"), gep(_c_lanes)),
        # a bit cast of a 16-bit float computed in float: the bits as stored, not as computed with
        (
            UPat(Ops.BITCAST, name="u"),
            lambda ctx, u: (
                ctx.expr(u, ctx.r.render_bitcast(ctx.raw_bits[u.src[0]], dtypes.uint16, u.dtype))
                if u.src[0] in ctx.raw_bits
                else None
            ),
        ),
        (UPat(GroupOp.Elementwise, name="u"), lambda ctx, u: ctx.expr(u, ctx.r.render_alu(u, ctx.srcs(u)))),
        (UPat(Ops.SINK), lambda: ""),
    ]
)
CStyleLanguage.render_rules = C_RENDER


@dataclass(frozen=True)
class AluCtx:
    """What an ALU rule reads besides the op: the renderer (dtype spelling, math functions) and the operands' text."""

    r: CStyleLanguage
    a: list[str]


def _binop(sym: str) -> Callable[..., str]:
    return lambda ctx, x: f"({ctx.a[0]}{sym}{ctx.a[1]})"


BINOP_SYMBOLS = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
    Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>",
}  # fmt: skip


def _safe_divisor(x: UOp) -> bool:
    """A constant divisor other than 0 and -1: C's / and % give torch's result, no guard needed."""
    return x.src[1].op is Ops.CONST and x.src[1].arg not in (0, -1)


def _c_pow(ctx: AluCtx, x: UOp) -> str:
    a, dt = ctx.a, x.dtype
    if not dtypes.is_float(dt):
        return ctx.r.render_ipow(x, a)
    if dt == dtypes.float64:
        return ctx.r.math_fn("pow", f"{a[0]},{a[1]}", dt)
    return f"(({ctx.r.render_dtype(dt)})powf({a[0]},{a[1]}))"


def _c_cast(ctx: AluCtx, x: UOp) -> str:
    if x.dtype == dtypes.bfloat16:
        return f"lg_round_bf16((float){ctx.a[0]})"
    if x.dtype == dtypes.bool:
        return f"({ctx.a[0]}!=0)"
    return f"(({ctx.r.render_dtype(x.dtype)}){ctx.a[0]})"


def _c_dp4a(ctx: AluCtx, x: UOp) -> str:
    """Byte k of a (unsigned) times byte k of b (sign-extended by shifting it to the top), summed in unsigned
    arithmetic so that the add to c wraps as the IR says."""
    u32, i32 = ctx.r.render_dtype(dtypes.uint32), ctx.r.render_dtype(dtypes.int32)
    a, b, c = (f"(({u32}){v})" for v in ctx.a)
    terms = [f"(({i32})(({a}>>{8 * k})&255u))*((({i32})({b}<<{24 - 8 * k}))>>24)" for k in range(4)]
    return f"(({i32})({c}+({u32})({'+'.join(terms)})))"


# *** Ops.DP4A on 8 int32 lanes without VNNI (AVX2): vpmaddubsw, then vpmaddwd ***
# vpmaddubsw multiplies unsigned bytes by signed ones and adds each pair into an int16, saturating: exact where the
# unsigned bytes are below 128 (|pair| <= 2 * 127 * 128 = 32512), not for any byte (255 * -128 * 2 overflows). So a
# DP4A renders as one vpmaddubsw only where its unsigned operand is a word masked by a constant whose bytes are below
# 128 once shifted down past the mask's clear low bits (gguf's nibbles, in place or not, and its high bits; or such
# words shifted and joined by an OR, `_word_bits`: a K-quant's 5- and 6-bit codes put together); vpmaddwd
# then adds the int16 pairs into int32 and multiplies the shifted lanes back (an int16 factor per lane). Any other word
# is split into its low 7 bits and its top bit, two exact products (lg_dp4a_madd below). A chain of such DP4As adds
# its pairs as int16 first where they cannot pass 32767 (`_dp4a_chain`): one vpmaddwd and one add per chain. 1024 x
# 4096 in cache (one loaded core), Q4_K 121 -> 109 us, Q5_K 190 -> 168, Q4_1 94 -> 87.

DP4A_MADD = "lg_dp4a_madd"  # the dp4a_builtins spelling of this form (ClangCompiler sets it where AVX2 has no VNNI)

DP4A_MADD_PRELUDE = """#ifndef LG_DP4A_MADD
#define LG_DP4A_MADD
typedef char lg_dp4a_bytes __attribute__((vector_size(32)));
typedef short lg_dp4a_pairs __attribute__((vector_size(32)));
typedef unsigned int lg_dp4a_words __attribute__((vector_size(32)));
static inline lg_dp4a_pairs lg_dp4a_pairs_of(lg_int32x8 a, lg_int32x8 b) {
  return (lg_dp4a_pairs)__builtin_ia32_pmaddubsw256((lg_dp4a_bytes)a, (lg_dp4a_bytes)b);
}
static inline lg_int32x8 lg_dp4a_pairsum(lg_int32x8 c, lg_dp4a_pairs p, lg_int32x8 f) {
  return c + (lg_int32x8)__builtin_ia32_pmaddwd256(p, (lg_dp4a_pairs)f);
}
static inline lg_int32x8 lg_dp4a_small(lg_int32x8 c, lg_int32x8 a, lg_int32x8 b, lg_int32x8 f) {
  return lg_dp4a_pairsum(c, lg_dp4a_pairs_of(a, b), f);
}
static inline lg_int32x8 lg_dp4a_madd(lg_int32x8 c, lg_int32x8 a, lg_int32x8 b) {
  lg_int32x8 top = (lg_int32x8)((lg_dp4a_words)a >> 7) & 0x01010101;
  c = lg_dp4a_small(c, a & 0x7F7F7F7F, b, (lg_int32x8){} + 0x00010001);
  return lg_dp4a_small(c, top, b, (lg_int32x8){} + 0x00800080);
}
#endif
"""


def _mask_lanes(u: UOp, lanes: int, depth: int = 8) -> list | None:
    """The value of each lane of `u` where it is computed from constants alone (a vector of constants, or a select
    between two by lane index, as gguf's nibble masks), else None."""
    if u.op is Ops.CONST:
        return [u.arg] * lanes
    if depth == 0:
        return None
    if u.op is Ops.VECTORIZE:
        srcs = [_mask_lanes(s, 1, depth - 1) for s in u.src]
        return None if any(v is None for v in srcs) else [v[0] for v in srcs]  # type: ignore[index]
    if u.op in GroupOp.ALU:
        args = [_mask_lanes(s, lanes, depth - 1) for s in u.src]
        if any(v is None for v in args):
            return None
        return [exec_alu(u.op, u.dtype.scalar, [v[i] for v in args]) for i in range(lanes)]  # type: ignore[index]
    return None


_WORD = 0xFFFFFFFF


def _word_bits(u: UOp, lanes: int, depth: int = 4) -> list[int] | None:
    """Per lane, the bits an int32 word may have set (unsigned) where it is a word masked by constants, or an OR of
    such words, each maybe shifted by a constant (a multiply by a power of two, a right shift); else None. gguf's
    K-quant codes put together from their low bits and their high bits, one byte a code (Q5_K's fifth bit beside its
    nibble)."""
    if depth == 0 or u.dtype.scalar != dtypes.int32:
        return None
    if u.op is Ops.AND:
        for m in u.src:
            masks = _mask_lanes(m, lanes)
            if masks is not None:
                other = _word_bits(u.src[1] if m is u.src[0] else u.src[0], lanes, depth - 1)
                return [v & _WORD & (_WORD if o is None else o) for v, o in zip(masks, other or [None] * lanes)]
        return None
    if u.op not in (Ops.OR, Ops.MUL, Ops.SHR):
        return None
    a = _word_bits(u.src[0], lanes, depth - 1)
    if a is None:
        return None
    if u.op is Ops.OR:
        b = _word_bits(u.src[1], lanes, depth - 1)
        return None if b is None else [x | y for x, y in zip(a, b)]
    by = _mask_lanes(u.src[1], lanes)
    if by is None or any(not isinstance(v, int) or v <= 0 for v in by):
        return None
    if u.op is Ops.MUL:  # by a power of two, no bit past the sign's place: a left shift
        if any(v & (v - 1) or (x * v) >> 31 for x, v in zip(a, by)):
            return None
        return [x * v for x, v in zip(a, by)]
    if any(v >= 32 or x >> 31 for x, v in zip(a, by)):  # an arithmetic shift of a word without its sign bit
        return None
    return [x >> v for x, v in zip(a, by)]


def _byte_shifts(a: UOp) -> tuple[list[int], int] | None:
    """Where `a`'s bytes (`_word_bits`), shifted right by a lane's amount, are below 128: per lane the right shift, and
    the largest byte after it; else None. The shift is 0 where the bytes are below 16, else their trailing zero bits
    (a high nibble in place becomes the nibble, a high bit one bit): small bytes let vpmaddubsw's int16 pairs of
    several words add up before one vpmaddwd (`_dp4a_chain`)."""
    masks = _word_bits(a, a.dtype.count)
    if masks is None:
        return None
    shifts, top = [], 0
    for v in masks:
        mask_bytes = [(v >> (8 * i)) & 255 for i in range(4)]
        bits = functools.reduce(lambda x, y: x | y, mask_bytes)
        s = 0 if bits < 16 else (bits & -bits).bit_length() - 1
        if max(mask_bytes) >> s >= 128:
            return None
        shifts.append(s)
        top = max(top, max(mask_bytes) >> s)
    return shifts, top


def _dp4a_operand(a: str, shifts: list[int], vec: str) -> str:
    """The unsigned operand `a` shifted right per lane (`_byte_shifts`)."""
    if not any(shifts):
        return a
    by = str(shifts[0]) if len(set(shifts)) == 1 else f"(lg_dp4a_words){{{','.join(map(str, shifts))}}}"
    return f"(({vec})((lg_dp4a_words){a}>>{by}))"


def _dp4a_factors(shifts: list[int], vec: str) -> str:
    """vpmaddwd's int16 factors that undo the shifts: 2**s in both halves of a lane."""
    return f"({vec}){{{','.join(str((1 << s) * 0x10001) for s in shifts)}}}"


def _dp4a_vector(ctx: AluCtx, x: UOp) -> str:
    """DP4A on int32 vectors: the accumulator first, then the unsigned bytes, then the signed ones."""
    spelling = ctx.r.dp4a_builtins[x.dtype.count]
    a, b, c = ctx.a
    if spelling != DP4A_MADD:
        return f"{spelling}({c},{a},{b})"
    small = _byte_shifts(x.src[0])
    if small is None:
        return f"{DP4A_MADD}({c},{a},{b})"
    vec = ctx.r.render_dtype(x.dtype)
    return f"lg_dp4a_small({c},{_dp4a_operand(a, small[0], vec)},{b},{_dp4a_factors(small[0], vec)})"


_INT16_MAX = 32767


def _dp4a_chain(ctx: RenderCtx, u: UOp) -> str | None:
    """A chain of DP4As without VNNI, each the accumulator of the next (a block's words in gguf's matvecs), whose
    small bytes keep the sum of their vpmaddubsw pairs within an int16: those pairs added as int16 (vpaddw) and one
    vpmaddwd for the chain instead of one per word. A pair is at most 2 * 128 * the largest byte in magnitude (a
    signed byte is -128 at least), so the words' bounds add up to 32767 at most; words of one shift per lane (one set
    of factors). A chain that would pass the bound goes on from a new one; a link used elsewhere ends it."""
    if u.dtype.count == 1 or ctx.r.dp4a_builtins.get(u.dtype.count) != DP4A_MADD:
        return None
    links: list[UOp] = []
    shifts: list[int] | None = None
    total, node = 0, u
    while True:
        small = _byte_shifts(node.src[0])
        if small is None or (shifts is not None and small[0] != shifts) or total + 256 * small[1] > _INT16_MAX:
            break
        links.append(node)
        shifts, total = small[0], total + 256 * small[1]
        below = node.src[2]
        if below.op is not Ops.DP4A or ctx.uses.get(below, 0) != 1 or below.dtype != u.dtype:
            break
        node = below
    if len(links) < 2:
        return None
    assert shifts is not None
    vec = ctx.r.render_dtype(u.dtype)
    pairs = "+".join(
        f"lg_dp4a_pairs_of({_dp4a_operand(ctx.names[n.src[0]], shifts, vec)},{ctx.names[n.src[1]]})"
        for n in reversed(links)
    )
    return ctx.expr(u, f"lg_dp4a_pairsum({ctx.names[links[-1].src[2]]},{pairs},{_dp4a_factors(shifts, vec)})")


MATH_FNS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}

# the spelling of each ALU op in C, every dialect's fallback
C_PLAIN_ALU = PatternMatcher(
    [(UPat(op, name="x"), _binop(sym)) for op, sym in BINOP_SYMBOLS.items()]
    + [
        (UPat(Ops.MAX, name="x"), lambda ctx, x: f"LG_MAX({ctx.a[0]},{ctx.a[1]})"),
        (
            UPat(Ops.MOD, name="x"),
            lambda ctx, x: (
                ctx.r.math_fn("fmod", f"{ctx.a[0]},{ctx.a[1]}", x.dtype) if dtypes.is_float(x.dtype) else None
            ),
        ),
        (
            UPat((Ops.IDIV, Ops.MOD), name="x"),
            lambda ctx, x: f"({ctx.a[0]}{'/' if x.op is Ops.IDIV else '%'}{ctx.a[1]})" if _safe_divisor(x) else None,
        ),
        # C_PRELUDE's guarded macros: by 0 gives 0, a signed division by -1 wraps
        (UPat((Ops.IDIV, Ops.MOD), name="x"), lambda ctx, x: f"LG_{x.op.name}({ctx.a[0]},{ctx.a[1]})"),
        (UPat(Ops.NEG, name="x"), lambda ctx, x: f"(!{ctx.a[0]})" if x.dtype == dtypes.bool else f"(-{ctx.a[0]})"),
        (UPat(Ops.RECIP, name="x"), lambda ctx, x: f"(1/{ctx.a[0]})"),
        (UPat(Ops.WHERE, name="x"), lambda ctx, x: f"({ctx.a[0]}?{ctx.a[1]}:{ctx.a[2]})"),
        (UPat(Ops.MULACC, name="x"), lambda ctx, x: f"(({ctx.a[0]}*{ctx.a[1]})+{ctx.a[2]})"),
        (UPat(Ops.DP4A, name="x"), _c_dp4a),
        (UPat(Ops.POW, name="x"), _c_pow),
        (UPat(tuple(MATH_FNS), name="x"), lambda ctx, x: ctx.r.math_fn(MATH_FNS[x.op], ctx.a[0], x.dtype)),
        (UPat(Ops.CAST, name="x"), _c_cast),
        (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.r.render_bitcast(ctx.a[0], x.src[0].dtype, x.dtype)),
    ]
)


def _wraps(x: UOp) -> bool:
    return x.dtype.count == 1 and (dtypes.is_int(x.dtype) or dtypes.is_bool(x.dtype)) and not _int_fits(x)


# torch's semantics over the spelling, for every dialect
C_ALU = PatternMatcher(
    [
        (
            UPat((Ops.SHL, Ops.SHR), name="x"),
            lambda ctx, x: ctx.r.render_shift(x, ctx.a) if x.dtype.count == 1 and dtypes.is_int(x.dtype) else None,
        ),
        (UPat(tuple(WRAPPING_OPS), name="x"), lambda ctx, x: ctx.r.render_wrapping(x, ctx.a) if _wraps(x) else None),
        # torch rounds every 16-bit float op's result: where one is computed in float, each result is rounded back
        (
            UPat(name="x"),
            lambda ctx, x: (
                fmt.format(ctx.r.render_plain_alu(x, ctx.a))
                if x.dtype.count == 1 and x.op not in EXACT_FLOAT_OPS and (fmt := ctx.r.float_rounding(x.dtype))
                else None
            ),
        ),
        (UPat(name="x"), lambda ctx, x: ctx.r.render_plain_alu(x, ctx.a)),
    ]
)
CStyleLanguage.alu_rules, CStyleLanguage.plain_alu_rules = C_ALU, C_PLAIN_ALU


# the team a parallel loop gets at launch (runtime/threads_cpu.py); weak, so a kernel loaded where the team library
# is not runs on every thread
TEAM_DECL = """#ifndef LG_TEAM
int lg_team(int, long long, long long) __attribute__((weak));
#define LG_TEAM(n, ops, bytes) (lg_team ? lg_team(n, ops, bytes) : (n))
#endif
"""

# libgomp's entry points for `#pragma omp parallel for schedule(guided)` (what gcc 12 lowers the pragma to), called
# by an outlined THREAD loop (ClangRenderer.render)
GOMP_DECL = """#ifndef LG_GOMP
#define LG_GOMP
void GOMP_parallel_loop_nonmonotonic_guided(void (*)(void *), void *, unsigned, long, long, long, long, unsigned);
_Bool GOMP_loop_nonmonotonic_guided_next(long *, long *);
void GOMP_loop_end_nowait(void);
#endif
"""

# vector helpers: a lane-wise select through integer masks (C has no `?:` on vectors), NaN-propagating max
C_VECTOR_PRELUDE = """#ifndef LG_VSEL
#define LG_VSEL(m, a, b) ({ __typeof__(m) _m = (m); (__typeof__(a))((_m & (__typeof__(_m))(a)) | (~_m & (__typeof__(_m))(b))); })
#define LG_VMAX(a, b) ({ __auto_type _a = (a); __auto_type _b = (b); LG_VSEL((_a > _b) | (_a != _a), _a, _b); })
#endif
"""  # noqa: E501 (C macros: a backslash-split line would change every kernel's source)

# 2**f on |f| <= 0.5: Taylor coefficients, highest first, by Horner (one list for the vector and the scalar form:
# their results must agree to the bit)
_EXP2_LEADING = "1.5252733804059838e-05f"
_EXP2_HORNER = "".join(
    f"  p = p * f + {c};\n"
    for c in ("1.5403530393381606e-04f", "1.3333558146428441e-03f", "9.6181291076284772e-03f")
    + ("5.5504108664821576e-02f", "2.4022650695910071e-01f", "6.9314718055994531e-01f", "1.0f")
)

# 2**x for float vectors: x = n + f with |f| <= 0.5, 2**f by its Taylor series to degree 7 (error < 1e-8, under
# half an ulp), 2**n built in the exponent bits in two halves so results down to the denormals come out right.
# Out-of-range inputs clamp to +-160 (which still gives inf / 0); NaN passes through.
EXP2_TEMPLATE = (
    """static inline {T} lg_exp2_{T}({T} x) {{
  typedef int lg_i __attribute__((vector_size({B})));
  {T} zero = {{0}};
  {T} c = LG_VSEL(x > 160.0f, zero + 160.0f, x);
  c = LG_VSEL(c < -160.0f, zero - 160.0f, c);
  {T} r = (c + 12582912.0f) - 12582912.0f;
  {T} f = c - r;
  lg_i n = __builtin_convertvector(r, lg_i);
  {T} p = zero + """
    + _EXP2_LEADING
    + ";\n"
    + _EXP2_HORNER
    + """  lg_i h = n >> 1;
  {T} s1 = ({T})((h + 127) << 23), s2 = ({T})((n - h + 127) << 23);
  return LG_VSEL(x != x, x, p * s1 * s2);
}}
"""
)

# the same steps for one float, so that a value computes to the same bits in a vectorized kernel and in a scalar one
# (libm's exp2f differs from the polynomial in the last bit now and then: a max's gradient compares the input,
# recomputed by another kernel, with the max, and found no element equal to it: 0 / 0)
EXP2_SCALAR = (
    """static inline float lg_exp2_f32(float x) {
  float c = x > 160.0f ? 160.0f : x;
  c = c < -160.0f ? -160.0f : c;
  float r = (c + 12582912.0f) - 12582912.0f;
  float f = c - r;
  int n = (int)r;
  float p = """
    + _EXP2_LEADING
    + ";\n"
    + _EXP2_HORNER
    + """  int h = n >> 1;
  union { int i; float f; } s1 = {(h + 127) << 23}, s2 = {(n - h + 127) << 23};
  return x != x ? x : p * s1.f * s2.f;
}
"""
)

# 8-bit lanes for loads and casts: packed (quantized) weights come as int8/uint8 codes
VECTOR_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.int8, dtypes.uint8})
_WIDER_INT = {
    dtypes.int8: dtypes.int16,
    dtypes.int16: dtypes.int32,
    dtypes.uint8: dtypes.uint16,
    dtypes.uint16: dtypes.uint32,
}


def _widening_steps(src: DType, dst: DType) -> list[DType]:
    """The integer types a vector cast from a narrow int passes through, each twice as wide as the last: gcc 12
    lowers a 4x widening __builtin_convertvector (int8x16 -> float32x16) to 16 scalar loads and inserts, but each 2x
    step to one vpmovsx/vpmovzx (a 1536 x 576 Q8_0 matrix-vector product on one core: 149 us as one step, 72 us in
    steps)."""
    steps = []
    while src in _WIDER_INT and dst.itemsize > src.itemsize:
        src = _WIDER_INT[src]
        steps.append(src)
    return steps if steps and steps[-1] != dst else steps[:-1]


def _bytes_to_int32x8(src: DType, dst: DType) -> bool:
    """Whether a vector cast widens 8 bytes (a 64-bit vector) to 32-bit lanes: gcc 12 widens such a vector in halves,
    9 instructions for 8 bytes to int32, where from the low half of a 16-byte vector it is one vpmovzxbd/vpmovsxbd
    (`_vector_cast`: a K-quant matvec's sub-block scales of 8 rows, Q4_K 547 -> 394 instructions a super-block)."""
    return src.scalar in (dtypes.int8, dtypes.uint8) and src.count == 8 and dst.scalar.itemsize == 4


def _vector_cast(ctx: AluCtx, x: UOp) -> str | None:
    if x.dtype.count == 1:
        return None
    if x.src[0].dtype.scalar == dtypes.float16 and x.dtype.scalar == dtypes.float32:  # (vector_op_ok: F16C, 8 lanes)
        return f"__builtin_ia32_vcvtph2ps256(({ctx.r.render_dtype(dtypes.int16.vec(8))})({ctx.a[0]}))"
    if _bytes_to_int32x8(x.src[0].dtype, x.dtype):
        lanes, int32 = ",".join(map(str, range(8))), ctx.r.render_dtype(dtypes.int32.vec(8))
        wide = f"__auto_type _b = {ctx.a[0]}; __auto_type _w = __builtin_shufflevector(_b,_b,{lanes},{lanes});"
        out = f"({{{wide} __builtin_convertvector(__builtin_shufflevector(_w,_w,{lanes}),{int32});}})"
        return (
            out if x.dtype.scalar == dtypes.int32 else f"__builtin_convertvector({out},{ctx.r.render_dtype(x.dtype)})"
        )
    out = ctx.a[0]
    for step in _widening_steps(x.src[0].dtype.scalar, x.dtype.scalar):
        out = f"__builtin_convertvector({out},{ctx.r.render_dtype(step.vec(x.dtype.count))})"
    return f"__builtin_convertvector({out},{ctx.r.render_dtype(x.dtype)})"


VECTOR_ALU = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.MULACC, Ops.CAST})
VECTOR_FLOAT_ALU = frozenset({Ops.FDIV, Ops.RECIP})
BITWISE = frozenset({Ops.AND, Ops.OR, Ops.XOR})  # lane-wise as C spells them, on integer vectors


# *** bool vectors as lane masks ***
# A vector compare in GNU C gives a signed integer vector as wide per lane as its operands, each lane all ones or all
# zeros; gcc keeps such a mask in an AVX-512 mask register and turns LG_VSEL on it into one masked move or blend
# (where(a < b, a, b) on 16 lanes: vcmpps + vpblendmd, where lane by lane it depended on the SLP vectorizer finding
# the pattern again). A bool vector here is such a mask, as wide per lane as the compare that made it; an op joining
# masks of other widths converts them, and a mask leaves as 0/1 through a select. bool vectors are never loaded or
# stored whole: their lanes are the `_Bool` scalars of memory (GEP reads a lane as 0 or 1).
MASK_INTS = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
MASK_OPS = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.NEG, Ops.WHERE, Ops.CMPNE, Ops.CMPEQ, Ops.CAST})


def _lane_bounds(u: UOp) -> tuple[Any, Any]:
    """The bounds of every lane of a vector (of its scalars where it is built from them)."""
    if u.op is Ops.VECTORIZE:
        return min(s.vmin for s in u.src), max(s.vmax for s in u.src)
    return u.vmin, u.vmax


def _vector_shr(ctx: AluCtx, x: UOp) -> str:
    """An int32 vector's arithmetic right shift with torch's semantics (`render_shift`): an amount outside [0, 32)
    shifts by 31 (the sign in every bit). Unpacking gguf's nibbles from words of 8 rows (dequantization into panels)
    is a shift per lane by one amount: lane by lane, 3072 x 576 Q4_1 on one core took 1.6 ms."""
    a, b = ctx.a
    lo, hi = _lane_bounds(x.src[1])
    if isinstance(lo, int) and isinstance(hi, int) and 0 <= lo and hi < 32:
        return f"({a}>>{b})"
    return f"({a}>>LG_VSEL((({b})>=0)&(({b})<32),{b},({b})*0+31))"


def _is_mask(u: UOp) -> bool:
    return u.dtype.count > 1 and u.dtype.scalar == dtypes.bool and not isinstance(u.dtype, PtrDType)


def _mask_type(r: CStyleLanguage, nbytes: int, lanes: int) -> str:
    return r.render_dtype(MASK_INTS[nbytes].vec(lanes))


def _mask_as(ctx: RenderCtx, u: UOp, nbytes: int) -> str:
    """Mask `u` with lanes `nbytes` wide, converted in steps of 2x (gcc 12 turns a 4x step into one insert per lane)."""
    text, have = ctx.names[u], ctx.mask_bytes.get(u, 4)
    while have != nbytes:
        have = have * 2 if have < nbytes else have // 2
        text = f"__builtin_convertvector({text},{_mask_type(ctx.r, have, u.dtype.count)})"
    return text


def _mask_value(ctx: RenderCtx, u: UOp, text: str, nbytes: int) -> str:
    """A mask's expression, inlined where used once, else computed once into a variable of its integer type."""
    ctx.mask_bytes[u] = nbytes
    if ctx.uses.get(u, 0) <= 1:
        return text
    v = ctx.fresh("alu")
    ctx.line(f"{_mask_type(ctx.r, nbytes, u.dtype.count)} {v} = {text};")
    return v


def _select_whole(ctx: RenderCtx, dtype: DType, cond: str, a: str, b: str) -> str:
    """`cond ? a : b` of whole vectors under one scalar condition, as a lane select on the condition broadcast to a
    mask. gcc 12.2 with AVX-512 compiles the `?:` form, in a small loop whose iterations it vectorizes together, into
    a masked blend whose mask register holds the bool itself (1: lane 0 takes `a`, the other lanes `b`); seen in a
    kernel selecting a byte's low or high nibble by row parity."""
    nbytes = dtype.scalar.itemsize
    mask, lane = _mask_type(ctx.r, nbytes, dtype.count), ctx.r.render_dtype(MASK_INTS[nbytes])
    return f"LG_VSEL((({mask}){{}}-({lane})({cond})),{a},{b})"


def _scalar_condition_select(ctx: RenderCtx, u: UOp) -> str | None:
    """A WHERE of vectors under a scalar bool (see _select_whole); None for any other WHERE."""
    if u.dtype.count == 1 or u.src[0].dtype.count != 1 or _is_mask(u):
        return None
    return ctx.expr(u, _select_whole(ctx, u.dtype, ctx.names[u.src[0]], ctx.names[u.src[1]], ctx.names[u.src[2]]))


def _mask_alu(ctx: RenderCtx, u: UOp) -> str | None:
    """An elementwise op on bool vectors (or making one), spelled on lane masks; None where no mask is involved."""
    if not _is_mask(u) and not any(_is_mask(s) for s in u.src):
        return None
    r = ctx.r
    if u.op is Ops.WHERE and not _is_mask(u):
        if (c := _broadcast(u.src[0])) is not None:  # one condition for every lane: one select of whole vectors
            return ctx.expr(u, _select_whole(ctx, u.dtype, ctx.names[c], ctx.names[u.src[1]], ctx.names[u.src[2]]))
        m = _mask_as(ctx, u.src[0], u.dtype.scalar.itemsize)
        return ctx.expr(u, f"LG_VSEL({m},{ctx.names[u.src[1]]},{ctx.names[u.src[2]]})")
    if u.op is Ops.CAST and not _is_mask(u):  # a mask to 0/1 (or 0.0/1.0) of the wanted type
        one, zero = (r.render_const(v, u.dtype) for v in ((1.0, 0.0) if dtypes.is_float(u.dtype) else (1, 0)))
        return ctx.expr(u, f"LG_VSEL({_mask_as(ctx, u.src[0], u.dtype.scalar.itemsize)},{one},{zero})")
    if u.op in GroupOp.Comparison and not _is_mask(u.src[0]):  # numbers compared: a mask as wide as they are
        text, nbytes = (
            f"{ctx.names[u.src[0]]}{BINOP_SYMBOLS[u.op]}{ctx.names[u.src[1]]}",
            u.src[0].dtype.scalar.itemsize,
        )
        return _mask_value(ctx, u, _compared(ctx, text, nbytes, u), nbytes)
    if u.op is Ops.CAST and _is_mask(u.src[0]):  # bool to bool
        return _mask_value(ctx, u, ctx.names[u.src[0]], ctx.mask_bytes.get(u.src[0], 4))
    if u.op is Ops.CAST:  # numbers to bool: nonzero (NaN included) is true
        nbytes = u.src[0].dtype.scalar.itemsize
        return _mask_value(ctx, u, _compared(ctx, f"{ctx.names[u.src[0]]}!=0", nbytes, u), nbytes)
    # masks joined lane by lane, at the width of the first
    nbytes = ctx.mask_bytes.get(u.src[0], 4) if u.op is not Ops.WHERE else ctx.mask_bytes.get(u.src[1], 4)
    a = [_mask_as(ctx, s, nbytes) for s in u.src]
    if u.op is Ops.NEG:
        return _mask_value(ctx, u, f"(~{a[0]})", nbytes)
    if u.op is Ops.WHERE:
        return _mask_value(ctx, u, f"LG_VSEL({a[0]},{a[1]},{a[2]})", nbytes)
    if u.op is Ops.CMPEQ:  # equal masks: all bits of the xor clear
        return _mask_value(ctx, u, f"(~({a[0]}^{a[1]}))", nbytes)
    sym = "^" if u.op is Ops.CMPNE else BINOP_SYMBOLS[u.op]
    return _mask_value(ctx, u, f"({a[0]}{sym}{a[1]})", nbytes)


def _compared(ctx: RenderCtx, text: str, nbytes: int, u: UOp) -> str:
    """A vector compare as a mask of our mask type. With 8-byte lanes gcc types the compare's result as a vector of
    `long`, which C does not convert to our 8-byte mask type (`long long` lanes) where it meets one (a select of two
    int64 compares assigned to a mask variable failed to compile): the cast reinterprets the same bits."""
    return f"(({_mask_type(ctx.r, 8, u.dtype.count)})({text}))" if nbytes == 8 else f"({text})"


def _broadcast(u: UOp) -> UOp | None:
    """The one scalar every lane of VECTORIZE u is, else None."""
    return u.src[0] if u.op is Ops.VECTORIZE and len(set(u.src)) == 1 and u.src[0].dtype.count == 1 else None


def _mask_of_bools(ctx: RenderCtx, u: UOp, items: list[str]) -> str:
    """bool scalars (0 or 1) as a mask with 4-byte lanes: negated, 1 becomes all ones."""
    return f"(-{ctx.r.render_vectorize(MASK_INTS[4].vec(u.dtype.count), items)})"


def _mask_vectorize(ctx: RenderCtx, u: UOp) -> str | None:
    return _mask_value(ctx, u, _mask_of_bools(ctx, u, ctx.srcs(u)), 4) if _is_mask(u) else None


def _lane_condition(u: UOp) -> UOp | None:
    """The one scalar condition every lane of VECTORIZE u selects under (`{c?a0:b0, c?a1:b1, ...}`), else None."""
    if not all(s.op is Ops.WHERE for s in u.src) or len(conds := {s.src[0] for s in u.src}) != 1:
        return None
    return c if (c := conds.pop()).dtype.count == 1 else None


def _one_select_of_vectors(ctx: RenderCtx, u: UOp) -> str | None:
    """Lanes that all select under one scalar condition, as one select of two vectors (None: another form).
    gcc 12.2 with AVX-512 compiles the lane-wise form `{c?a0:b0, c?a1:b1, ...}` wrongly (only lane 0 right; pow's
    gradient, whose zero-exponent guard is such a select, gave zeros), and a `c ? {a0,..} : {b0,..}` in some loops
    too: the select is a lane select on c broadcast (_select_whole)."""
    if (c := _lane_condition(u)) is None:
        return None
    if _is_mask(u):
        picked = [_mask_of_bools(ctx, u, [ctx.names[s.src[i]] for s in u.src]) for i in (1, 2)]
        return _mask_value(ctx, u, _select_whole(ctx, dtypes.int32.vec(u.dtype.count), ctx.names[c], *picked), 4)
    picked = [ctx.r.render_vectorize(u.dtype, [ctx.names[s.src[i]] for s in u.src]) for i in (1, 2)]
    return ctx.expr(u, _select_whole(ctx, u.dtype, ctx.names[c], *picked))


def _shuffle_of_two(ctx: RenderCtx, u: UOp) -> str | None:
    """Lanes of two vectors of its own type (a round of a register transpose, lowerer._transpose) as one shuffle:
    gcc builds the lane-wise form `{a[0], b[0], ...}` from scalar extracts and inserts, a lane at a time."""
    if not ctx.r.lane_shuffle or u.dtype.scalar == dtypes.bool:
        return None
    if not all(s.op is Ops.GEP and type(s.arg) is int and s.src[0].dtype == u.dtype for s in u.src):
        return None
    vecs = list(dict.fromkeys(s.src[0] for s in u.src))
    if len(vecs) != 2:
        return None
    lanes = ",".join(str(s.arg + u.dtype.count * vecs.index(s.src[0])) for s in u.src)
    return ctx.expr(u, f"__builtin_shufflevector({ctx.names[vecs[0]]},{ctx.names[vecs[1]]},{lanes})")


def _lanes_selected(uops: list[UOp]) -> bool:
    """Whether the kernel builds a vector lane by lane from selects ({c0?a0:b0, c1?a1:b1, ...}; one scalar condition
    for every lane is rendered as one select of two vectors instead, see _one_select_of_vectors)."""
    return any(
        u.op is Ops.VECTORIZE and any(s.op is Ops.WHERE for s in u.src) and _lane_condition(u) is None for u in uops
    )


def _masked_vector_load(ctx: RenderCtx, u: UOp) -> str | None:
    """A vector load under a mask of lanes (Renderer.masked_load): its gate is an unsigned int, not a bool."""
    if len(u.src) < 2 or u.src[1].dtype == dtypes.bool:
        return None
    addr, mask = f"(const void*)&{ctx.names[u.src[0]]}", ctx.names[u.src[1]]
    if ctx.r.masked_load_lane_mask:
        # AVX's vmaskmovps: a lane loads where its int in the mask vector is negative (its bit, spread out)
        n = u.dtype.count
        ints = f"(int __attribute__((vector_size({4 * n}))))"
        lanes = f"(({ints}{{{', '.join(str(1 << i) for i in range(n))}}} & (int){mask}) != 0)"
        ptr = f"(const {ctx.r.render_dtype(u.dtype)}*){addr}"
        return ctx.declare(u, "val", f"__builtin_ia32_maskloadps{'256' if n == 8 else ''}({ptr}, {lanes})")
    if u.dtype.count < 16 and ctx.r.masked_load_16:  # type: ignore[attr-defined]
        # the low lanes of a 16-lane load, the others masked off (AVX-512F alone: no fault, no VL)
        wide, low = "(float __attribute__((vector_size(64)))){0}", ", ".join(map(str, range(u.dtype.count)))
        load = f"__builtin_ia32_loadups512_mask({addr}, {wide}, {mask})"
        return ctx.declare(u, "val", f"__builtin_shufflevector({load}, {wide}, {low})")
    zero = f"({ctx.r.render_dtype(u.dtype)}){{0}}"
    load = f"__builtin_ia32_loadups{u.dtype.itemsize * 8}_mask({addr}, {zero}, {mask})"
    return ctx.declare(u, "val", load)


def _pinned_vector_load(ctx: RenderCtx, u: UOp) -> str | None:
    """A float vector that several ops use, loaded into a register once (ClangRenderer.register_pin)."""
    r = ctx.r
    pin = r.register_pin  # type: ignore[attr-defined]
    if not pin or u.dtype.count < 2 or u.dtype.scalar not in (dtypes.float32, dtypes.float64) or ctx.uses.get(u, 0) < 2:
        return None
    if u.dtype.itemsize > r.vector_bytes:  # type: ignore[attr-defined]
        return None  # no one register holds it
    v = _load(ctx, u)
    ctx.line(f'__asm__("" : "+{pin}"({v}));')
    return v


# Streams a reduce loop reads densely at a large stride a step (8 rows' blocks, nn/gguf.py GROUP: 160 to 288 bytes a
# step for the blocks of 32, 1216 to 1696 for the K-quant super-blocks) are prefetched in software PREFETCH_BYTES
# ahead, rounded up to whole steps: the hardware prefetchers alone kept Q6_K 16384 x 4096 at 20 GB/s from memory on 2
# AVX2 cores (one core: 10.4 GB/s, 18.7 in cache). A/B under load, 2 cores: Q4_K 2.6-2.8 -> 1.8 ms, Q5_K 4.1-4.2 ->
# 2.8, Q6_K 5.2-5.5 -> 3.7 (3392 bytes ahead; 2 steps of Q6_K beat 1 and 4); Q4_0 2.5-2.7 -> 1.9-2.1 ms, Q4_1 3.0-3.3
# -> 2.3-2.7, Q8_0 5.4-6.9 -> 3.7-3.9 (best of 80, two rounds). For the blocks of 32, 1600 to 2400 bytes ahead beat
# 3392 (Q4_1 2.3-2.8 ms against 2.5-3.1); 2048 is 2 steps of every K-quant, as fast as 3 (Q4_K, Q5_K) within noise.
# Only kernels with DP4A products measured.
PREFETCH_MIN_STRIDE, PREFETCH_BYTES = 128, 2048


def _prefetch_plan(uops: list[UOp]) -> dict[UOp, list[tuple[UOp, UOp, list[int]]]]:
    """For the first load of each dense stream of a reduce loop with DP4A products that moves with the outputs too:
    (buffer, base index, element offsets from the base to prefetch), one per cache line of the lines its loads read
    PREFETCH_BYTES ahead."""
    if not any(u.op is Ops.DP4A for u in uops):
        return {}
    streams: dict[tuple[UOp, UOp], list[tuple[UOp, int, int]]] = {}  # (buffer, base) -> (load, offset, elements)
    for u in uops:
        if u.op is not Ops.LOAD or len(u.src) != 1:
            continue
        idx = u.src[0].src[0] if u.src[0].op is Ops.CAST else u.src[0]
        if idx.op is not Ops.INDEX or idx.src[0].op is not Ops.DEFINE_GLOBAL:
            continue
        off = idx.src[1]
        base, const = (off.src[0], off.src[1].arg) if off.op is Ops.ADD and off.src[1].op is Ops.CONST else (off, 0)
        streams.setdefault((idx.src[0], base), []).append((u, const, u.dtype.count))
    plan: dict[UOp, list[tuple[UOp, UOp, list[int]]]] = {}
    order = {u: i for i, u in enumerate(uops)}
    for (buf, base), loads in streams.items():
        ranges = [r for r in base.toposort if r.op is Ops.RANGE]
        loops = [r for r in ranges if r.arg[1] == "r"]
        # a stream that moves along the reduce only (x's words) is read again for every output: it stays in cache
        if not loops or len(loops) == len(ranges):
            continue
        r = max(loops, key=order.__getitem__)  # the innermost
        step = (base.substitute({r: r + 1}) - base).simplify()
        size = buf.dtype.base.itemsize  # type: ignore[attr-defined]
        if step.op is not Ops.CONST or step.arg * size < PREFETCH_MIN_STRIDE:
            continue
        if sum(n for _, _, n in loads) * 2 < step.arg:  # not dense: a column's elements, left to the hardware
            continue
        # every line of a step's window, gaps included: other views of the same bytes (the scales) read those
        ahead = -(-PREFETCH_BYTES // (step.arg * size)) * step.arg + min(c for _, c, _ in loads)
        offsets = list(range(ahead, ahead + step.arg, max(1, 64 // size)))
        plan.setdefault(loads[0][0], []).append((buf, base, offsets))
    return plan


def _prefetching_load(ctx: RenderCtx, u: UOp) -> None:
    """The prefetches planned at a stream's first load, in front of it; the load itself is left to the next rule."""
    if ctx.prefetch is None:
        ctx.prefetch = _prefetch_plan(ctx.uops)
    for buf, base, offsets in ctx.prefetch.get(u, []):
        for o in offsets:
            ctx.line(f"__builtin_prefetch(&{ctx.names[buf]}[{ctx.names[base]}+{o}]);")
    return None


def _byte_products_only(uops: list[UOp]) -> bool:
    """Whether the kernel multiplies integers read from memory, and each such product's operands are bytes loaded,
    masked or shifted and widened, nothing else (no offset: gcc 12.2 sums ((int)(u8 & 15) - 8) * (int)s8 wrongly
    through vpdpbusd, and a plain byte product rightly)."""
    if not any(u.op is Ops.LOAD and u.dtype.scalar.itemsize == 1 for u in uops):
        return False
    # one pass in the kernel's order (sources first): whether each value reads memory, and whether it is plain bytes
    # (loaded, masked or shifted, widened); a source not listed counts as the worse case for both
    reads: dict[UOp, bool] = {}
    plain: dict[UOp, bool] = {}
    for u in uops:
        reads[u] = u.op is Ops.LOAD or any(reads.get(s, True) for s in u.src)
        # bits of unsigned bytes put together (Q5_K's and Q6_K's high bits on their low ones) stay unsigned bytes
        combined = u.op in (Ops.OR, Ops.SHL) and u.dtype.scalar == dtypes.uint8
        plain[u] = (u.op is Ops.LOAD and u.dtype.scalar.itemsize == 1 or u.op is Ops.CONST) or (
            (u.op in (Ops.CAST, Ops.AND, Ops.SHR, Ops.GEP, Ops.VECTORIZE) or combined)
            and all(plain.get(s, False) for s in u.src)
        )
    products = [u for u in uops if u.op is Ops.MUL and dtypes.is_int(u.dtype) and reads[u]]
    return bool(products) and all(plain[s] for u in products for s in u.src)


class ClangRenderer(CStyleLanguage):
    device = "CPU"
    has_threads = True
    prelude = C_PRELUDE
    vector_widths = (2, 4, 8, 16)  # gcc/clang vector extensions; 16 float32 is one AVX-512 register
    # the hard limit is ctypes, which calls a kernel with at most 1024 arguments (CPython's CTYPES_MAX_ARGCOUNT);
    # well below it, gcc's time grows faster than the square of a cat's masked loads (a stack of 256 tensors: 2 s,
    # 512: 20 s, 800: 57 s), so kernels are split at 256 buffers (a stack of 1500 then runs in 9 s)
    max_buffers = 256
    # a gcc target attribute ("avxvnni,avx512vnni") for kernels whose integer products all multiply plain bytes, set
    # by the CPU device where its compiler had to build without VNNI (runtime/ops_cpu.py VECTORIZER_PROBES)
    byte_dot_target = ""
    # a gcc target attribute ("no-avx512vl") for kernels that build vectors lane by lane from selects, set where the
    # compiler gets those wrong (runtime/ops_cpu.py LANE_SELECT_PROBE)
    lane_select_target = ""
    # float32 lanes of the vectors the CPU loads under a mask of lanes (AVX-512F: 16 and 8; AVX without AVX-512: 8
    # and 4, masked_load_lane_mask), set by the CPU device from its instruction sets; masked_load_16: 8 lanes as the
    # low half of a 16-lane load, where AVX-512VL is missing or taken away from some kernels (lane_select_target)
    masked_load_lanes: tuple[int, ...] = ()
    masked_load_16 = False
    # a THREAD loop as functions of its own calling libgomp (GOMP_DECL) instead of `#pragma omp parallel for`, set by
    # the CPU device where its compiler's libgomp runs such a loop (runtime/ops_cpu.py)
    outline_threads = False
    # an attribute for the two small functions that start an outlined THREAD loop (the kernel's entry, which starts
    # the team, and the team's loop over chunks, which calls the body), set by the CPU device where its compiler is
    # gcc: optimize("O0"). They run once per launch and once per chunk, and -O2 cost gcc ~13M instructions apiece
    # (~4 ms), as much as a small kernel: gcc on the digits CNN step's 51 kernels (32 threaded) 4.11 -> 3.85 G
    # instructions (cachegrind), the same values bit for bit
    launch_attr = ""
    # an asm constraint for one vector register ("v"), set by the CPU device where its compiler (gcc tuned for Zen)
    # folds a loaded vector into each of its multiply-adds as a memory operand, a load per use: a register tile's
    # panel vectors are then loaded once per row of the tile, and the loads, not the multiply-adds, bound the loop
    # (a 4 x 2 tile of 1024^2 on one core: 50-60 GFLOPS, each vector pinned in a register by an empty asm 80-88)
    register_pin = ""
    # work (estimate_ops + estimate_mem: ~128 a ns on a core) per index of an outlined THREAD loop from which its body
    # is a function of one index rather than a loop over a chunk of them (ClangRenderer.render)
    outline_index_work = 1 << 19
    # 8 float16 lanes to float32 as F16C's vcvtph2ps (gcc 12 converts a _Float16 vector lane by lane), set by the CPU
    # device where the CPU has F16C: a quantized weight's float16 scales are then read as they are stored
    half_vector_cast = False

    def __init__(self, threads: int = 1, vector_bytes: int = 16, vector_registers: int = 16):
        self.threads = threads  # cores a THREAD axis is shared out among
        # the machine's SIMD registers: the heuristic's vector width and register tile follow them
        self.vector_bytes, self.vector_registers = vector_bytes, vector_registers

    def team_size(self, ctx: RenderCtx) -> str:
        """The threads of the rendered kernel's parallel loop, asked for at each launch given its work: one for a
        kernel shorter than the wait for a core while other processes hold them (runtime/threads_cpu.py)."""
        ops, mem = ctx.work
        return f"LG_TEAM({self.threads}, {ops}LL, {mem}LL)"

    def parallel_for(self, ctx: RenderCtx) -> str:
        return f"#pragma omp parallel for schedule(guided) num_threads({self.team_size(ctx)})"

    def masked_load(self, dtype: DType) -> bool:
        # AVX-512's masked load (vmovups zmm{k}{z}, a builtin of gcc and clang): a padded conv's shifted window at an
        # edge was a scalar load per lane and a vector built from them (3x3 conv on one core, 64 -> 64 channels,
        # batch 32: 16^2 pixels 197 -> 222 GFLOPS, 32^2 185 -> 197; 16 -> 32 channels of 8^2 114 -> 121). AVX's
        # vmaskmovps likewise on a CPU without AVX-512
        return dtype.scalar == dtypes.float32 and dtype.count in self.masked_load_lanes

    def matmul_panel(self, m: int, n: int, k: int, itemsize: int, transposed: bool = False) -> int:
        # A kernel reading the right-hand side as it is walks down its columns at the row stride: a stride with a large
        # power-of-two factor puts those rows in a few L1 cache sets (4 KB: one set; 2048^2 float32 66 GFLOPS as it
        # is, 158 from panels one register tile wide), and any stride reads a partial line per row. Panels won at every
        # stride measured on one AVX2 core pair, the copy included (GFLOPS as it is -> from panels, m x k x n):
        # 512^3 101 -> 164, 512 x 512 x 384 90 -> 167, x 520 98 -> 122, 1024 x 1024 x 1000 90 -> 125, 1024 x 256 x 1024
        # 98 -> 170, 1024 x 384 x 768 89 -> 179, 256 x 1024 x 640 89 -> 168; equal at 512 x 512 x 768 and 512 x 128 x
        # 512. The copy costs about as much as 2 * k * n multiply-adds: worth it for m >= 256.
        # A transposed right-hand side (a linear layer's weight) has no vector along n at all: the kernel sums
        # vectors along k and adds their lanes up at the end (x @ w.T on one core, the copy included: 1152 x 384 x
        # 384 145 -> 248 GFLOPS, 1152 x 384 x 1536 80 -> 232, 256 x 576 x 1536 89 -> 221; OpenBLAS 210-245)
        panel = self.vector_bytes // itemsize
        if m < 256 or panel < 2 or n % panel:
            return 0
        return panel

    def conv_blocks(
        self, batch: int, spatial: tuple[int, ...], out: tuple[int, ...], cin: int, cout: int, itemsize: int
    ) -> int:
        # Read from NCHW as it is, a register tile's window rows of every input channel lie 4 KB apart (a 32^2 image)
        # in a few L1 sets, each tile reading them from L2 again; with the lanes along the output pixels a padded
        # window's edge is a masked load. In channel blocks an input pixel's channels are one line, broadcast to a
        # vector of output channels from packed weights (oneDNN's layout). 64 -> 64 channels 3x3 on 32^2, batch 32,
        # one core, the copies included: 75 -> 79-83 GFLOPS (the conv kernel alone 86; torch/oneDNN 87). Measured with
        # AVX2's 16 registers of 32 bytes only: AVX-512's masked-load tile of NCHW (216 GFLOPS a core) stays as it is.
        # Rows of fewer than 16 pixels whose output rows are whole vectors stay NCHW: the copies cost more than they
        # save (the digits CNN's 16 -> 32 on 8^2, batch 64, one core: 404 us as it is, 445 us in blocks; 32 -> 64 on
        # 28^2 5.0-5.3 -> 2.5 ms, 64 -> 64 on 16^2 about even, 6.7-7.2 and 6.5-6.8 ms). Output rows that are not (a
        # prime width, 10 or 12 pixels) have no vector axis as NCHW; in blocks the pixels are a tile's rows whatever
        # their count (OVERLAP). One core, 3x3 pad 1, the copies included, NCHW -> blocks: 64 -> 64 on 13^2, batch 4,
        # 5.35 -> 0.86 ms (torch 0.94), 7^2 1.51 -> 0.24 (0.32), 10^2 batch 8 3.08 -> 0.77 (0.78), 12^2 1.93 -> 0.98
        # (1.19); 32 -> 32 on 6^2, batch 16, 0.54 -> 0.17 (0.21)
        block = self.vector_bytes // itemsize
        if self.has_local or self.vector_bytes != 32 or cin % block or cout % block:
            return 0
        rows = spatial[-1] >= 16 or out[-1] % block != 0
        return block if rows and batch * math.prod(spatial) >= 256 else 0

    # *** what the lowerer may turn into vector code ***

    # torch rounds every float16 op's result to float16. gcc (12) computes _Float16 arithmetic in float and keeps the
    # excess precision through a cast to float ((float)(h / 3) was not a float16 value): the cast back rounds it
    alu_rules = (
        PatternMatcher(
            [
                (
                    UPat(name="x"),
                    lambda ctx, x: (
                        f"((_Float16)({ctx.r.render_plain_alu(x, ctx.a)}))"
                        if x.dtype == dtypes.float16 and x.op not in EXACT_FLOAT_OPS
                        else None
                    ),
                )
            ]
        )
        + C_ALU
    )

    # vectors: gcc's lane-wise conversion and a NaN-propagating max of its own (C_VECTOR_PRELUDE)
    plain_alu_rules = (
        PatternMatcher(
            [
                (UPat(Ops.CAST, name="x"), _vector_cast),
                (
                    UPat(Ops.MAX, name="x"),
                    lambda ctx, x: f"LG_VMAX({ctx.a[0]},{ctx.a[1]})" if x.dtype.count > 1 else None,
                ),
                (UPat(Ops.DP4A, name="x"), lambda ctx, x: _dp4a_vector(ctx, x) if x.dtype.count > 1 else None),
                (UPat(Ops.SHR, name="x"), lambda ctx, x: _vector_shr(ctx, x) if x.dtype.count > 1 else None),
            ]
        )
        + C_PLAIN_ALU
    )

    def vector_dtype_ok(self, dt: DType) -> bool:
        return dt.scalar in VECTOR_DTYPES

    def vector_load_ok(self, dt: DType) -> bool:
        """Whether a load of the vector dtype `dt` is one vector load: also 8 float16 lanes where the CPU converts them
        to float32 in one instruction (`half_vector_cast`), the only vector op on them (a quantized weight's float16
        scales); other ops take them lane by lane."""
        return self.vector_dtype_ok(dt) or self.half_vector_cast and dt == dtypes.float16.vec(8)

    def vector_op_ok(self, op: Ops, dt: DType, src_dtypes: list[DType]) -> bool:
        if dtypes.bool in (dt.scalar, *src_dtypes):  # on lane masks (_mask_alu); a mask's signed -1 is not a bool's <
            # one register wide at most and an SSE register at least: gcc 12 compares a vector of two registers (16
            # int64) one lane at a time (a one-hot of 2048 x 1024 int64 labels 500 us lane by lane, 1155 us so), and
            # a mask of 2 float32 lanes stored as bools took a maxpool's argmax kernel from 170 to 400 us on 2 cores
            numbers = [d for d in (dt.scalar, *src_dtypes) if d != dtypes.bool] or [MASK_INTS[4]]
            if not all(self.vector_dtype_ok(d) and 16 <= d.itemsize * dt.count <= self.vector_bytes for d in numbers):
                return False
            return op in MASK_OPS or (op is Ops.CMPLT and dtypes.bool not in src_dtypes)
        if op is Ops.CAST and self.half_vector_cast and dt == dtypes.float32.vec(8) and src_dtypes == [dtypes.float16]:
            return True
        if not all(self.vector_dtype_ok(d) for d in (dt, *src_dtypes)):
            return False
        if op is Ops.EXP2:
            return dt.scalar == dtypes.float32
        if op is Ops.DP4A:
            return dt.count in self.dp4a_builtins
        if op is Ops.SHR:  # int32 only: AVX2 has no 64-bit arithmetic right shift, nor byte shifts
            return dt.scalar == dtypes.int32
        return (
            op in VECTOR_ALU
            or (op in VECTOR_FLOAT_ALU and dtypes.is_float(dt))
            or (op in BITWISE and dtypes.is_int(dt))
        )

    # *** vector spelling ***

    def render_dtype(self, dt: DType, storage: bool = False) -> str:
        if dt.count > 1 and not isinstance(dt, PtrDType):
            return f"lg_{dt.scalar.name}x{dt.count}"
        return super().render_dtype(dt, storage)

    def render_const(self, x: object, dt: DType) -> str:
        if dt.count > 1:
            return self.render_vectorize(dt, [super().render_const(x, dt.scalar)] * dt.count)
        return super().render_const(x, dt)

    def math_fn(self, name: str, x: str, dt: DType) -> str:
        if dt.count > 1:
            assert name == "exp2", f"no vector {name}"
            return f"lg_exp2_{self.render_dtype(dt)}({x})"
        if name == "exp2" and dt == dtypes.float32:
            return f"lg_exp2_f32({x})"  # the vector form's steps (EXP2_SCALAR)
        return super().math_fn(name, x, dt)

    def render_load(self, u: UOp, addr: str) -> str:
        if u.dtype.count > 1:
            return f"*({self.render_dtype(u.dtype)}_u*)&{addr}"
        return super().render_load(u, addr)

    def render_store_target(self, addr: str, dt: DType) -> str:
        return f"*({self.render_dtype(dt)}_u*)&{addr}" if dt.count > 1 else addr

    # per-thread partials of a split reduce: an array on the stack of the thread that combines them
    render_rules = (
        PatternMatcher(
            [
                (UPat(Ops.DEFINE_LOCAL, name="u"), local_buffer("", storage=False)),
                (UPat(Ops.VECTORIZE, name="u"), _shuffle_of_two),
                (UPat(Ops.VECTORIZE, name="u"), lambda ctx, u: _one_select_of_vectors(ctx, u)),
                (UPat(Ops.VECTORIZE, name="u"), _mask_vectorize),
                (UPat(Ops.WHERE, name="u"), _scalar_condition_select),
                (UPat(Ops.DP4A, name="u"), _dp4a_chain),
                (UPat(GroupOp.Elementwise, name="u"), _mask_alu),
                # a lane of a mask as the 0 or 1 of a _Bool
                (
                    UPat(Ops.GEP, name="u"),
                    lambda ctx, u: ctx.expr(u, f"({ctx.names[u.src[0]]}[{u.arg}]!=0)") if _is_mask(u.src[0]) else None,
                ),
                (UPat(Ops.LOAD, name="u"), _prefetching_load),
                (UPat(Ops.LOAD, name="u"), _masked_vector_load),
                (UPat(Ops.LOAD, name="u"), _pinned_vector_load),
            ]
        )
        + C_RENDER
    )

    def render(self, name: str, uops: list[UOp]) -> str:
        ctx = self.render_lines(uops)
        if not self.outline_threads or not _outlinable(ctx, uops):
            return self.render_kernel(name, ctx.param_list(), "\n".join(ctx.lines), uops)
        # the THREAD loop by hand, as gcc lowers its pragma: the team runs `{name}_lg_par`, which takes chunks of
        # iterations and calls the loop's body on each. gcc's own lowering (omplower, ompexp) cost ~8 ms of each
        # threaded kernel's compile, this 3-4 (gcc on the CNN step's sources: 849 -> 762 ms of CPU). Where an index
        # carries enough work the body is a function of one index: a loop over the chunk's bounds compiled 6% slower;
        # elsewhere the body loops over the chunk, as a call per index cost ~50 ns (the sum of each row of a
        # 4096 x 4096 matrix: 1.13 ms looping, 1.25 ms calling). noinline: inlined it would be the loop again
        start, decl, bound = ctx.thread_loop  # type: ignore[misc]
        params, names = ctx.param_list(), ctx.param_list(names=True)
        head, target = self.kernel_head(uops)
        pre, loop = ctx.lines[:start], ctx.lines[start + 2 : -1]  # the loop's lines without its `for` and `}`
        body, par, args = f"{name}_lg_body", f"{name}_lg_par", f"{name}_lg_args"
        team, fields = self.team_size(ctx), ", ".join(f"lg_a->{n}" for n in names)
        if sum(ctx.work) >= self.outline_index_work * int(bound):
            signature, call = decl, f"    for (long lg_i = lg_lo; lg_i < lg_hi; lg_i++) {body}({fields}, lg_i);"
        else:
            # the chunk's bounds in the loop index's own type: an int index against long bounds made gcc widen and
            # compare in both widths (cc1 on the 15 chunk-loop kernels of the cold CNN step and SmolLM2 prompt: -20M
            # instructions, only the loop's setup differs in the assembly)
            ty, v = decl.rsplit(" ", 1)
            signature, call = f"{ty} lg_lo, {ty} lg_hi", f"    {body}({fields}, lg_lo, lg_hi);"
            loop = [f"  for ({decl} = lg_lo; {v} < lg_hi; {v}++) {{", *loop, "  }"]
        lines = [
            f"static __attribute__((noinline)) {target}void {body}({', '.join([*params, signature])}) {{",
            *pre,
            *loop,
            "}",
            f"struct {args} {{ {' '.join(p + ';' for p in params)} }};",
            f"{self.launch_attr}static void {par}(void *lg_p) {{",
            f"  struct {args} *lg_a = lg_p;",
            "  long lg_lo, lg_hi;",
            "  while (GOMP_loop_nonmonotonic_guided_next(&lg_lo, &lg_hi))",
            call,
            "  GOMP_loop_end_nowait();",
            "}",
            f"{self.launch_attr}{self.kernel_prefix}{name}({', '.join(params)}) {{",
            f"  struct {args} lg_a = {{ {', '.join(names)} }};",
            f"  GOMP_parallel_loop_nonmonotonic_guided({par}, &lg_a, {team}, 0, {bound}, 1, 1, 0);",
            "}",
        ]
        return head + GOMP_DECL + "\n".join(lines) + "\n"

    def render_kernel(self, name: str, params: list[str], body: str, uops: list[UOp]) -> str:
        head, target = self.kernel_head(uops)
        return f"{head}{target}{self.kernel_prefix}{name}({', '.join(params)}) {{\n{body}\n}}\n"

    def kernel_head(self, uops: list[UOp]) -> tuple[str, str]:
        """What goes before a kernel's function (prelude, vector types and helpers, the team's declaration) and the
        target attribute its function needs."""
        decls = []
        vector_dtypes = {u.dtype for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)}
        # bool vectors are lane masks as wide as the numbers they are compared with or select (4 bytes where built
        # from bools), and every width between, passed through in 2x steps (_mask_as)
        masks = {dt for dt in vector_dtypes if dt.scalar == dtypes.bool}
        vector_dtypes -= masks
        for m in masks:
            widths = {4} | {
                d.scalar.itemsize for d in vector_dtypes if d.count == m.count and d.scalar in VECTOR_DTYPES
            }
            vector_dtypes |= {t.vec(m.count) for w, t in MASK_INTS.items() if min(widths) <= w <= max(widths)}
        vector_dtypes |= {
            step.vec(u.dtype.count)
            for u in uops
            if u.op is Ops.CAST and u.dtype.count > 1
            for step in _widening_steps(u.src[0].dtype.scalar, u.dtype.scalar)
        }
        if any(u.op is Ops.CAST and _bytes_to_int32x8(u.src[0].dtype, u.dtype) for u in uops):
            vector_dtypes.add(dtypes.int32.vec(8))
        # float16 lanes to float32 pass through 16-bit integers, the type of vcvtph2ps's builtin (_vector_cast)
        if any(u.op is Ops.CAST and u.dtype.count > 1 and u.src[0].dtype.scalar == dtypes.float16 for u in uops):
            vector_dtypes.add(dtypes.int16.vec(8))
        # a select of whole vectors under one scalar condition is a lane select on a mask as wide as its lanes
        vector_dtypes |= {
            MASK_INTS[u.dtype.scalar.itemsize].vec(u.dtype.count)
            for u in uops
            if u.dtype.count > 1
            and u.dtype.scalar != dtypes.bool
            and (u.op is Ops.WHERE or u.op is Ops.VECTORIZE and any(s.op is Ops.WHERE for s in u.src))
            and not isinstance(u.dtype, PtrDType)
        }
        for dt in sorted(vector_dtypes, key=lambda d: (d.name, d.count)):
            t, scalar, nbytes = self.render_dtype(dt), self.type_map[dt.scalar], dt.itemsize
            # the _u type may sit at any element-aligned address: views with offsets make no alignment promise
            decls.append(
                f"#ifndef LG_HAVE_{t}\n#define LG_HAVE_{t}\n"
                f"typedef {scalar} {t} __attribute__((vector_size({nbytes})));\n"
                f"typedef {scalar} {t}_u __attribute__((vector_size({nbytes}), "
                f"aligned({dt.scalar.itemsize})));\n#endif\n"
            )
            if any(u.op is Ops.EXP2 and u.dtype == dt for u in uops):
                exp2 = EXP2_TEMPLATE.format(T=t, B=dt.count * 4)
                decls.append(f"#ifndef LG_HAVE_EXP2_{t}\n#define LG_HAVE_EXP2_{t}\n{exp2}#endif\n")
        vec = (C_VECTOR_PRELUDE + "".join(decls)) if decls else ""
        if any(u.op is Ops.EXP2 and u.dtype == dtypes.float32 for u in uops):
            vec += f"#ifndef LG_HAVE_EXP2_f32\n#define LG_HAVE_EXP2_f32\n{EXP2_SCALAR}#endif\n"
        if self.dp4a_builtins.get(8) == DP4A_MADD and any(u.op is Ops.DP4A and u.dtype.count == 8 for u in uops):
            vec += DP4A_MADD_PRELUDE
        if any(u.op is Ops.POW and not dtypes.is_float(u.dtype) for u in uops):
            vec += IPOW_HELPER.format(qual="static inline ", u64="unsigned long long")
        vnni = _byte_products_only(uops) or any(u.op is Ops.DP4A and u.dtype.count > 1 for u in uops)
        targets = [self.byte_dot_target] if self.byte_dot_target and vnni else []
        targets += [self.lane_select_target] if self.lane_select_target and _lanes_selected(uops) else []
        target = f'__attribute__((target("{",".join(targets)}"))) ' if targets else ""
        team = TEAM_DECL if any(u.op is Ops.RANGE and u.arg[1] in THREAD_KINDS for u in uops) else ""
        return f"{self.prelude}{vec}{team}", target
