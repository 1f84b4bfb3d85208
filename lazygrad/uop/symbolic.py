"""The symbolic simplifier: integer and boolean rules for kernel index math and validity conditions.

`graph_rewrite` works bottom-up, so every rule may assume its sources are already simplified, and in these forms:
- a sum is a left-leaning chain of ADD whose right operands are terms, with at most one constant, last: `((a+b*3)+c)+5`;
- a term is `base` or `base*c`: a constant factor is always the right operand of a MUL;
- the constant of any commutative op is its right operand; `x-y` is `x+y*-1`.

Signed integer overflow is undefined behaviour in C, so, like the C compiler, the rules that reason through division,
modulo, comparisons and MAX assume signed math does not overflow. Unsigned math wraps, so it gets only ring identities
(exact modulo 2**n) and facts read off bounds (which `_bounds` keeps sound under wrapping).
"""

from __future__ import annotations

import math
import threading

from lazygrad.dtype import INTS, SINTS, DType, dtypes
from lazygrad.helpers import ceildiv
from lazygrad.uop.alu import exec_alu
from lazygrad.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

ints = tuple(INTS)
sints = tuple(SINTS)
ints_and_bool = (*ints, dtypes.bool)

# like terms further apart than this inside one sum stay unmerged: keeps building a long sum linear in its length
SPINE_WALK = 32


# *** sums as (terms, constant) ***


def _term(u: UOp) -> tuple[UOp, int]:
    """A term as (base, coefficient)."""
    if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        return u.src[0], u.src[1].arg
    return u, 1


def _split_sum(x: UOp) -> tuple[list[tuple[UOp, int]], int]:
    """A canonical sum as ([(base, coefficient), ...] in order, constant)."""
    if x.op is Ops.CONST:
        return [], x.arg
    k = 0
    if x.op is Ops.ADD and x.src[1].op is Ops.CONST:
        x, k = x.src[0], x.src[1].arg
    terms = []
    while x.op is Ops.ADD:
        terms.append(_term(x.src[1]))
        x = x.src[0]
    terms.append(_term(x))
    terms.reverse()
    return terms, k


def _sum(terms: list[tuple[UOp, int]], k: int, like: UOp) -> UOp:
    """Rebuild a sum. Bounds are computed as it grows so a later bound query never recurses down a long chain."""
    out: UOp | None = None
    for base, coef in terms:
        if coef == 0:
            continue
        t = base if coef == 1 else base * coef
        out = t if out is None else out + t
        out._min_max
    if out is None:
        return like.const_like(k)
    return out + k if k != 0 else out


def _same_sign(x: UOp, r: UOp) -> bool:
    """x and r are both never negative or both never positive: C's truncation is then floor (or ceil) on both."""
    return (x.vmin >= 0 and r.vmin >= 0) or (x.vmax <= 0 and r.vmax <= 0)


def _fits(value: int, dtype: DType) -> bool:
    return dtypes.min(dtype) <= value <= dtypes.max(dtype)


def _is_sint(u: UOp) -> bool:
    return u.dtype.scalar in SINTS


# *** generic folding ***


def _fold_consts(x: UOp) -> UOp | None:
    if any(isinstance(s.arg, tuple) for s in x.src):
        return None  # vector constants are left to the vectorizer
    if x.op is Ops.CAST:
        return UOp.const(x.dtype, x.src[0].arg)
    try:
        return UOp.const(x.dtype, exec_alu(x.op, x.dtype, [s.arg for s in x.src]))
    except NotImplementedError:
        return None  # an op the dtype does not have (see uop/alu.py): left for the device to refuse


def _fold_by_bounds(x: UOp) -> UOp | None:
    return x.const_like(x.vmin) if x.vmin == x.vmax else None


def _consts_right(u: UOp, c: UOp, x: UOp) -> UOp | None:
    if x.op is Ops.CONST or (u.op is Ops.MAX and dtypes.is_float(u.dtype)):
        return None  # a float MAX with a NaN depends on operand order
    return u.replace(src=(x, c))


# *** sums ***


def _undo_divmod(m: UOp, mc: int, o: UOp, oc: int) -> UOp | None:
    """m*mc + o*oc where m is y%d and o*oc is (y//d)*(d*mc) or ((y//d)%e)*(d*mc): C's definition of % undoes the split.

    (y//d)*d + y%d == y holds for every y; ((y//d)%e)*d + y%d == y%(d*e) holds for y >= 0 and both sides are odd in y.
    o is compared with the simplified y//d (or (y//d)%e), the form the rules gave it.
    """
    if m.op is not Ops.MOD or m.src[1].op is not Ops.CONST or m.src[1].arg <= 0 or oc != mc * m.src[1].arg:
        return None
    y, d = m.src[0], m.src[1].arg
    if o is graph_rewrite(y // d, symbolic):
        return y * mc
    if o.op is Ops.MOD and o.src[1].op is Ops.CONST and (e := o.src[1].arg) > 0 and _fits(d * e, y.dtype):
        if o is graph_rewrite((y // d) % e, symbolic):
            return (y % (d * e)) * mc
    return None


def _combine_terms(a: UOp, b: UOp) -> UOp | None:
    """One term equal to a+b, or None."""
    if a.op is Ops.CONST or b.op is Ops.CONST:
        return None
    (ab, ac), (bb, bc) = _term(a), _term(b)
    if ab is bb:
        return ab * (ac + bc)
    return _undo_divmod(ab, ac, bb, bc) or _undo_divmod(bb, bc, ab, ac)


def _merge_into_sum(u: UOp) -> UOp | None:
    """x+y with y one term: merge y with a term of the sum x that it combines with, keeping the others in order."""
    x, y = u.src
    above: list[UOp] = []
    node = x
    while len(above) < SPINE_WALK:
        below, t = (node.src[0], node.src[1]) if node.op is Ops.ADD else (None, node)
        if (merged := _combine_terms(t, y)) is not None:
            out = merged if below is None else below + merged
            for s in reversed(above):
                out = out + s
            return out
        if below is None:
            return None
        above.append(t)
        node = below
    return None


def _order_factors(x: UOp, y: UOp) -> UOp | None:
    """Order a product of two named leaves by name, so x*y and y*x are one node."""
    kx, ky = _leaf_key(x), _leaf_key(y)
    return y * x if kx is not None and ky is not None and ky < kx else None


def _leaf_key(u: UOp) -> tuple[int, str] | None:
    if u.op is Ops.DEFINE_VAR:
        return (0, u.arg[0])
    if u.op is Ops.SPECIAL:
        return (1, str(u.arg[0]))
    if u.op is Ops.RANGE:
        return (2, str(u.arg))
    return None


# *** division and modulo by a positive constant (signed) ***


# x//d and x%d are rewritten in step: whatever form x//d takes, x%d takes the matching one, so that a later
# (x//d)*d + x%d still finds both halves and folds back to x (see _undo_divmod)


def _quotient(m: int, d: int) -> int:
    """The multiple of d taken out of a coefficient m: towards zero, so |m - q*d| < d keeps m's sign."""
    return m // d if m >= 0 else -(-m // d)


def _split_multiples(x: UOp, d: int) -> tuple[UOp, UOp] | None:
    """x = d*Q + r, when then x//d == Q + r//d and x%d == r%d.

    Q takes every whole multiple of d out of the coefficients and the constant when the rest r then has one quotient
    over its range (so r//d and r%d fold by bounds): a window index of a convolution, ox + 11*ky + 640 with d = 10,
    is 10*(ky + 64) + (ox + ky) with ox + ky < 10. Otherwise Q is only the terms whose coefficient d divides, which
    never makes the expression longer."""
    terms, k = _split_sum(x)
    if any(abs(m) >= d for _, m in terms) or abs(k) >= d:
        r = _sum([(b, m - _quotient(m, d) * d) for b, m in terms], k - _quotient(k, d) * d, x)
        q = exec_alu(Ops.IDIV, x.dtype, [r.vmin, d])
        if _same_sign(x, r) and q == exec_alu(Ops.IDIV, x.dtype, [r.vmax, d]):
            return _sum([(b, _quotient(m, d)) for b, m in terms], _quotient(k, d), x), r
    whole = [(b, m // d) for b, m in terms if m % d == 0]
    if not whole:
        return None
    r = _sum([(b, m) for b, m in terms if m % d != 0], k, x)
    # truncation is floor (or ceil) on both x and r when they have the same sign; r == 0 is exact for any sign
    if (r.op is Ops.CONST and r.arg == 0) or _same_sign(x, r):
        return _sum(whole, 0, x), r
    return None


def _common_factor(x: UOp, d: int) -> tuple[int, UOp, UOp] | None:
    """x = g*B + s with g | d, g > 1, 0 <= s < g, when then x//d == B//(d/g) and x%d == (B%(d/g))*g + s."""
    terms, k = _split_sum(x)
    # g divides every coefficient and the constant: s is 0 and the identities hold for any sign
    g = math.gcd(d, k, *(m for _, m in terms))
    if g > 1:
        return g, _sum([(b, m // g) for b, m in terms], k // g, x), x.const_like(0)
    # for x >= 0 (so B >= 0) a remainder 0 <= s < g never carries into B
    if x.vmin >= 0:
        for g in sorted({math.gcd(d, m) for _, m in terms} - {1}, reverse=True):
            s = _sum([(b, m) for b, m in terms if m % g != 0], k % g, x)
            if s.vmin >= 0 and s.vmax < g:
                return g, _sum([(b, m // g) for b, m in terms if m % g == 0], k // g, x), s
    return None


def _fold_div(x: UOp, c: UOp) -> UOp | None:
    if c.arg <= 0:
        return None
    if (split := _split_multiples(x, c.arg)) is not None:
        return split[0] + split[1] // c
    if (factored := _common_factor(x, c.arg)) is not None:
        g, b, _ = factored
        return b // (c.arg // g)
    return None


def _fold_mod(x: UOp, c: UOp) -> UOp | None:
    if c.arg <= 0:
        return None
    if (split := _split_multiples(x, c.arg)) is not None:
        return split[1] % c
    if (factored := _common_factor(x, c.arg)) is not None:
        g, b, s = factored
        return (b % (c.arg // g)) * g + s
    return None


def _div_of_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
    # trunc(trunc(x/a)/b) == trunc(x/(a*b)) for a, b > 0: true for floor on x >= 0 and both sides are odd in x
    if a.arg > 0 and b.arg > 0 and _fits(a.arg * b.arg, x.dtype):
        return x // (a.arg * b.arg)
    return None


def _div_of_mod(x: UOp, a: UOp, b: UOp) -> UOp | None:
    # (x%(e*b))//b == (x//b)%e: true for floor on x >= 0 and both sides are odd in x
    if b.arg > 0 and a.arg > 0 and a.arg % b.arg == 0:
        return (x // b) % (a.arg // b.arg)
    return None


def _mod_of_mod(x: UOp, a: UOp, b: UOp) -> UOp | None:
    # b | a: x%a keeps x's residue mod b and its sign, which is all C's %b looks at
    return x % b if a.arg > 0 and b.arg > 0 and a.arg % b.arg == 0 else None


def _mod_by_bounds(x: UOp, c: UOp) -> UOp | None:
    # the truncated quotient q is one value over x's whole range (it is monotonic): x%d is x-q*d by C's definition
    if c.arg <= 0:
        return None
    q = exec_alu(Ops.IDIV, x.dtype, [x.vmin, c.arg])
    if q != exec_alu(Ops.IDIV, x.dtype, [x.vmax, c.arg]):
        return None
    return x if q == 0 else x + (-q * c.arg)


# *** comparisons (signed) ***


def _lt_const(x: UOp, c: UOp) -> UOp | None:
    """x < d with d constant."""
    if not _is_sint(x) or x.op is Ops.CONST:
        return None
    d = c.arg
    terms, k = _split_sum(x)
    if k != 0:
        return _sum(terms, 0, x) < d - k if _fits(d - k, x.dtype) else None  # y+k < d <=> y < d-k
    g = math.gcd(*(m for _, m in terms))
    if g > 1:
        return _sum([(b, m // g) for b, m in terms], 0, x) < ceildiv(d, g)  # g*y < d <=> y < ceil(d/g)
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
        y, e = x.src[0], x.src[1].arg
        # y//e < d <=> y < d*e: floor on y >= 0; for y < 0 with d > 0 both sides are true
        if (d > 0 or y.vmin >= 0) and _fits(d * e, x.dtype):
            return y < d * e
    return None


def _gt_const(c: UOp, x: UOp) -> UOp | None:
    """d < x with d constant."""
    if not _is_sint(x) or x.op is Ops.CONST:
        return None
    d = c.arg
    terms, k = _split_sum(x)
    if k != 0:
        return (d - k) < _sum(terms, 0, x) if _fits(d - k, x.dtype) else None  # d < y+k <=> d-k < y
    g = math.gcd(*(m for _, m in terms))
    if g > 1:
        return (d // g) < _sum([(b, m // g) for b, m in terms], 0, x)  # d < g*y <=> floor(d/g) < y
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
        y, e = x.src[0], x.src[1].arg
        # d < y//e <=> (d+1)*e-1 < y: floor on y >= 0; for y < 0 with d >= 0 both sides are false
        if (d >= 0 or y.vmin >= 0) and _fits((d + 1) * e - 1, x.dtype):
            return ((d + 1) * e - 1) < y
    return None


def _not_lt(x: UOp, y: UOp) -> UOp | None:
    # !(x < y) <=> y < x+1 for integers, when x+1 cannot overflow
    return y < x + 1 if _is_sint(x) and x.vmax < dtypes.max(x.dtype) else None


def _max_by_bounds(x: UOp, y: UOp) -> UOp | None:
    if x.vmin >= y.vmax:
        return x
    return y if y.vmin >= x.vmax else None


# *** the rules ***

x_int = UPat.var("x", ints)
x_bool = UPat.var("x", dtypes.bool)
true_pat, false_pat = UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False)

symbolic = PatternMatcher(
    [
        # *** generic ***
        (UPat(GroupOp.ALU | {Ops.CAST}, src=UPat(Ops.CONST), name="x"), _fold_consts),  # evaluate like the device
        (UPat(GroupOp.ALU | {Ops.CAST}, ints_and_bool, name="x"), _fold_by_bounds),  # one possible value: that value
        (UPat(GroupOp.Commutative, src=(UPat.cvar("c"), UPat.var("x")), name="u"), _consts_right),  # canonical order
        # *** identities ***
        (UPat(Ops.ADD, src=(x_int, UPat.const(None, 0))), lambda x: x),
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x),  # exact for floats too
        (UPat(Ops.MUL, src=(x_int, UPat.const(None, 0))), lambda x: x.const_like(0)),  # not for floats: inf*0 is nan
        (x_int // 1, lambda x: x),
        (x_int % 1, lambda x: x.const_like(0)),
        (UPat(Ops.SUB, ints, (UPat.var("x"), UPat.var("y"))), lambda x, y: x + y * -1),  # one form for + and -
        (UPat(Ops.NEG, ints, (UPat.var("x"),)), lambda x: x * -1),
        (UPat(Ops.NEG, dtypes.bool, (UPat.var("x"),)), lambda x: x.ne(True)),  # NEG of a bool is logical not
        # *** sums: the ring identities hold modulo 2**n, so these are exact for every int dtype ***
        (UPat(Ops.ADD, ints, (UPat.var("x"), UPat(Ops.ADD, name="y"))), lambda x, y: (x + y.src[0]) + y.src[1]),
        (
            UPat(Ops.ADD, ints, (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))),
            lambda x, c1, c2: x + (c1.arg + c2.arg),
        ),
        (
            UPat(Ops.ADD, ints, (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), UPat.var("y"))),
            lambda x, c, y: (x + y) + c if y.op is not Ops.CONST else None,  # the constant goes last
        ),
        (UPat(Ops.ADD, ints, name="u"), _merge_into_sum),  # like terms, and (x//d)*d + x%d -> x
        # *** products ***
        (
            UPat(Ops.MUL, ints, (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))),
            lambda x, c1, c2: x * (c1.arg * c2.arg),
        ),
        (
            UPat(Ops.MUL, ints, (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), UPat.cvar("c"))),
            lambda x, y, c: x * c + y * c,  # distribute constants so sums stay flat for div/mod folding
        ),
        (
            UPat(Ops.MUL, ints, (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c"))), UPat.var("y"))),
            lambda x, c, y: (x * y) * c if y.op is not Ops.CONST else None,  # the constant factor goes last
        ),
        (
            UPat(Ops.MUL, ints, (UPat.var("x"), UPat(Ops.MUL, src=(UPat.var("y"), UPat.cvar("c"))))),
            lambda x, y, c: (x * y) * c if x.op is not Ops.CONST else None,
        ),
        (UPat(Ops.MUL, ints, (UPat.var("x"), UPat.var("y"))), _order_factors),
        # *** division and modulo by a positive constant ***
        (UPat(Ops.MOD, ints, (UPat.var("x"), UPat.cvar("c"))), _mod_by_bounds),
        (UPat(Ops.IDIV, sints, (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("a"))), UPat.cvar("b"))), _div_of_div),
        (UPat(Ops.IDIV, sints, (UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("a"))), UPat.cvar("b"))), _div_of_mod),
        (UPat(Ops.MOD, sints, (UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("a"))), UPat.cvar("b"))), _mod_of_mod),
        (UPat(Ops.IDIV, sints, (UPat.var("x"), UPat.cvar("c"))), _fold_div),
        (UPat(Ops.MOD, sints, (UPat.var("x"), UPat.cvar("c"))), _fold_mod),
        # *** comparisons ***
        (UPat(Ops.CMPLT, src=(x_int, UPat.var("x"))), lambda x: UOp.const(dtypes.bool, False)),
        (UPat(Ops.CMPNE, src=(x_int, UPat.var("x"))), lambda x: UOp.const(dtypes.bool, False)),
        (UPat(Ops.CMPEQ, src=(x_int, UPat.var("x"))), lambda x: UOp.const(dtypes.bool, True)),  # not for floats: nan
        (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.cvar("c"))), _lt_const),
        (UPat(Ops.CMPLT, src=(UPat.cvar("c"), UPat.var("x"))), _gt_const),
        (
            UPat(
                (Ops.CMPNE, Ops.CMPEQ),
                src=(UPat(Ops.ADD, ints, (UPat.var("x"), UPat.cvar("k"))), UPat.cvar("d")),
                name="u",
            ),
            lambda u, x, k, d: x.alu(u.op, x.const_like(d.arg - k.arg)),  # y+k == d <=> y == d-k, modulo 2**n too
        ),
        (UPat(Ops.CMPNE, src=(x_bool, false_pat)), lambda x: x),
        (UPat(Ops.CMPEQ, src=(x_bool, true_pat)), lambda x: x),
        (UPat(Ops.CMPEQ, src=(x_bool, false_pat)), lambda x: x.ne(True)),
        (UPat(Ops.CMPNE, src=(UPat(Ops.CMPNE, src=(x_bool, true_pat)), true_pat)), lambda x: x),  # not not x
        (UPat(Ops.CMPNE, src=(UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.var("y"))), true_pat)), _not_lt),
        # *** where, and, or, max ***
        (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("a"))), lambda c, a: a),
        (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
        (UPat(Ops.WHERE, src=(UPat.var("c", dtypes.bool), true_pat, false_pat)), lambda c: c),
        (UPat(Ops.WHERE, src=(UPat.var("c", dtypes.bool), false_pat, true_pat)), lambda c: c.ne(True)),
        (
            UPat(
                Ops.WHERE,
                src=(UPat(Ops.CMPNE, src=(UPat.var("c", dtypes.bool), true_pat)), UPat.var("a"), UPat.var("b")),
            ),
            lambda c, a, b: c.where(b, a),  # a negated condition swaps the branches
        ),
        (UPat(Ops.AND, src=(x_bool, true_pat)), lambda x: x),
        (UPat(Ops.AND, src=(x_bool, false_pat)), lambda x: x.const_like(False)),
        (UPat(Ops.OR, src=(x_bool, true_pat)), lambda x: x.const_like(True)),
        (UPat(Ops.OR, src=(x_bool, false_pat)), lambda x: x),
        (UPat((Ops.AND, Ops.OR, Ops.MAX), ints_and_bool, (UPat.var("x"), UPat.var("x"))), lambda x: x),  # idempotent
        (UPat(Ops.XOR, ints_and_bool, (UPat.var("x"), UPat.var("x"))), lambda x: x.const_like(0)),
        (UPat(Ops.MAX, ints, (UPat.var("x"), UPat.var("y"))), _max_by_bounds),  # one side is never smaller
    ]
)


# Simplified forms of every expression seen, shared by all calls of a thread: the lanes of an upcast kernel and the
# kernels of one schedule repeat most sub-expressions of their indices. Cleared when large; rules never call
# simplify, and each thread has its own memo, so a clear never happens inside a rewrite that is using it.
_memo = threading.local()
SIMPLIFY_MEMO_SIZE = 1 << 19


def simplify(x: UOp) -> UOp:
    """x with the symbolic rules applied to a fixed point."""
    memo = getattr(_memo, "simplified", None)
    if memo is None or len(memo) > SIMPLIFY_MEMO_SIZE:
        memo = _memo.simplified = {}
    return graph_rewrite(x, symbolic, memo=memo, name="symbolic")


def split_linear(x: UOp, leaves: set[UOp], depends: set[UOp]) -> tuple[UOp, list[tuple[UOp, int]]] | None:
    """A simplified sum x as `rest + sum(coefficient * leaf)`, with rest free of `leaves` (simplified) and every other
    term free of them too: (rest, [(leaf, coefficient), ...]); None when a leaf appears anywhere but as a term, or not
    at all. `depends` holds every node above a leaf, the leaves included."""
    terms, k = _split_sum(x)
    rest, linear = [], []
    for base, m in terms:
        if base in leaves:
            linear.append((base, m))
        elif base in depends:
            return None
        else:
            rest.append((base, m))
    return (simplify(_sum(rest, k, x)), linear) if linear else None


# *** printing ***

_INFIX = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.MUL: "*",
    Ops.IDIV: "//",
    Ops.MOD: "%",
    Ops.FDIV: "/",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.CMPEQ: "==",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
    Ops.SHL: "<<",
    Ops.SHR: ">>",
    Ops.POW: "**",
}


def _render_leaf(u: UOp) -> str | None:
    if u.op is Ops.CONST:
        return repr(u.arg) if isinstance(u.arg, float) else str(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return u.arg[0]
    if u.op is Ops.BIND:
        return u.src[0].arg[0]
    if u.op is Ops.RANGE:
        return f"ridx{u.arg[0] if isinstance(u.arg, tuple) else u.arg}"
    if u.op is Ops.SPECIAL:
        return str(u.arg[0])
    return None


def _render_parts(u: UOp) -> list[UOp | str]:
    """u as a list of text pieces and sources still to render."""
    op, src = u.op, u.src
    if op is Ops.ADD and dtypes.is_int(u.dtype):
        # x+y*-c reads as x-y*c, and x+-c as x-c
        base, coef = _term(src[1])
        if src[1].op is Ops.CONST and src[1].arg < 0:
            return ["(", src[0], f"-{-src[1].arg})"]
        if coef == -1:
            return ["(", src[0], "-", base, ")"]
        if src[1].op is Ops.MUL and isinstance(coef, int) and coef < 0:
            return ["(", src[0], "-(", base, f"*{-coef}))"]
    if op in _INFIX and len(src) == 2:
        return ["(", src[0], _INFIX[op], src[1], ")"]
    if op is Ops.WHERE:
        return ["(", src[0], "?", src[1], ":", src[2], ")"]
    if op is Ops.NEG:
        return ["(-", src[0], ")"]
    if op is Ops.CAST:
        return [f"({u.dtype.name})", src[0]]
    name = op.name.lower() if op is not Ops.MAX else "max"
    parts: list[UOp | str] = [name + "("]
    for i, s in enumerate(src):
        parts += [", ", s] if i else [s]
    return parts + [")"]


def render_expr(u: UOp) -> str:
    """Infix text of an expression, e.g. `((gidx0*4)+ridx1)`. Iterative: index chains can be deep."""
    out: list[str] = []
    stack: list[UOp | str] = [u]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif (leaf := _render_leaf(item)) is not None:
            out.append(leaf)
        else:
            stack.extend(reversed(_render_parts(item)))
    return "".join(out)
