"""The IR: hash-consed immutable UOps, the Ops enum, patterns and the rewrite engine."""

from __future__ import annotations

import functools
import inspect
import itertools
import weakref
from _weakref import _remove_dead_weakref
from enum import Enum, auto
from typing import Any, Callable, Sequence

from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import DICT_ON_FIRST_USE_RACES, VIZ, prod
from lazygrad.viz.record import track_rewrite


class Ops(Enum):
    # tensor graph: where data comes from
    DEVICE = auto()
    BUFFER = auto()
    CONST = auto()
    IOTA = auto()  # a vector whose value at i is i: arange and RNG counters without any memory read
    COPY = auto()
    CONTIGUOUS = auto()
    DETACH = auto()
    ASSIGN = auto()
    BIND = auto()
    MULTI = auto()  # one tensor over several devices: src = a part per device, arg = the split axis (None: replicas)
    # movement: views of their source, never copies
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()
    # reduction over axes (tensor graph and kernel AST)
    REDUCE_AXIS = auto()
    # unary ALU
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    COS = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    TRUNC = auto()
    CAST = auto()
    BITCAST = auto()
    # binary ALU
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()  # truncating integer division (C semantics)
    MOD = auto()  # remainder with the sign of the dividend (C %, and fmod on floats)
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()
    POW = auto()
    # ternary ALU
    WHERE = auto()
    MULACC = auto()
    # c + the dot product of a's four bytes (unsigned) with b's (signed), all int32: x86's vpdpbusd lane, an int8
    # matmul's step (four products per lane, exact in int32)
    DP4A = auto()
    # kernel AST
    SINK = auto()
    VIEW = auto()
    VALID = auto()
    LOAD = auto()
    STORE = auto()
    DEFINE_GLOBAL = auto()
    DEFINE_VAR = auto()
    # lowered kernels
    DEFINE_LOCAL = auto()
    DEFINE_ACC = auto()
    RANGE = auto()
    ENDRANGE = auto()
    SPECIAL = auto()
    INDEX = auto()
    AFTER = auto()  # the value of src[0] once src[1:] have run (an accumulator read after its loop)
    IF = auto()
    ENDIF = auto()
    BARRIER = auto()
    VECTORIZE = auto()
    GEP = auto()
    WMMA = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"


# members are singletons: identity hashing is C-level, where Enum's own __hash__ is a Python call (hashing the name),
# and every `op in GroupOp...` test and every hash-cons key hashes an Ops
Ops.__hash__ = object.__hash__  # type: ignore[method-assign]


class GroupOp:
    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC})
    Binary = frozenset(
        {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
        | {Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW}
    )
    Ternary = frozenset({Ops.WHERE, Ops.MULACC, Ops.DP4A})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    # f(0, ..., 0) is not +0: a padded (masked) view of these must mask their result, not only their loads (cos(0) is
    # 1, a float fmod(0, 0) NaN, and -0 is another value than the pad's +0: 1/x, signbit, copysign tell them apart)
    UnsafePad = frozenset(
        {Ops.EXP2, Ops.LOG2, Ops.COS, Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.NEG, Ops.POW, Ops.CMPEQ, Ops.WHERE}
    )


# *** the UOp ***


def hash_consed(cls: type, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    """UOp(op, dtype, src, arg): the metaclass's __call__ itself, which the hottest callers (a binary op of tensors)
    call as `hash_consed(UOp, ...)`: a plain function call, where `UOp(...)` goes through the metaclass's call slot
    and a frame of its own (about 1000 instructions a node)."""
    # -0.0 == 0.0 and both hash alike, but a constant -0.0 is another value (1/x, signbit): keyed apart. The
    # dtype by its number (DType.key): the key then hashes at C speed
    dt = dtype.key
    key = (op, dt, src, arg) if type(arg) is not float or arg != 0.0 else (op, dt, src, arg, repr(arg))
    # (the cache and object.__new__ as module globals, not looked up on the classes: a node built 420 -> 393 ns)
    cache = _ucache
    if (ref := cache.get(key)) is not None and (ret := ref()) is not None:
        return ret
    # UOp.__init__'s work inline: a Python frame less on every node a graph builds
    ret = _object_new(cls)
    ret.op, ret.dtype, ret.src, ret.arg = op, dtype, src, arg
    if DICT_ON_FIRST_USE_RACES:  # its caches' dict made before any other thread can reach the node
        ret.__dict__
    new = _Entry(ret, _drop_dead)
    new.key = key
    # two threads building the same node must get one object, or equality by identity breaks: an entry goes in
    # only by setdefault (one atomic C call, never over another's), and a dead node's entry, whose callback has not
    # run yet, is dropped only while dead. No lock: a miss is the common case (every node of a step's new graph)
    while (entry := cache.setdefault(key, new)) is not new:
        if (other := entry()) is not None:
            return other  # another thread's node (ours dies unseen; the entry is not ours to drop)
        _remove_dead_weakref(cache, key)
    return ret


class UOpMetaClass(type):
    """Hash-consing: UOp(op, dtype, src, arg) built twice returns the same object."""

    # key -> weak reference to the node; a plain dict of weakrefs, not a WeakValueDictionary, whose get and set are
    # Python calls on the hottest path of graph building (every op of every step builds its nodes here)
    ucache: dict[tuple, _Entry] = {}

    __call__ = hash_consed


class _Entry(weakref.ref):
    """A hash-cons cache entry: the weak reference to a node, carrying its key for the callback that drops it. One
    object per node, where a plain reference with a partial of the key as callback was three (reference, partial, its
    argument tuple), all tracked by the garbage collector: a training step builds hundreds of nodes, and each
    generation-0 collection they trigger scans every young object."""

    __slots__ = ("key",)


def _drop_dead(ref: _Entry, remove: Any = _remove_dead_weakref, cache: dict = UOpMetaClass.ucache) -> None:
    """A node died: its cache entry goes, unless a new node of the same key has already taken the entry's place (one
    atomic C call, as WeakValueDictionary's own removal: a check then a del could drop another thread's new entry).
    The function and the cache are bound as defaults: a node dying at interpreter exit after this module's globals
    were cleared would otherwise print an ignored AttributeError per node."""
    remove(cache, ref.key)


_ucache = UOpMetaClass.ucache  # the one hash-cons cache (never replaced: tests and tools read it on the class)
_object_new = object.__new__


sint = int  # a size that may be symbolic: int or int-typed UOp (typing alias kept simple on purpose)


def _foreign(x: Any) -> bool:
    """An operand a UOp leaves to the other side's operator: a Tensor (`n - t` with a symbolic size n is t's rsub)."""
    return not isinstance(x, (int, float)) and hasattr(x, "uop")


class UOp(metaclass=UOpMetaClass):
    __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")
    # set by UOpMetaClass.__call__, the one constructor
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any

    def __reduce__(self) -> tuple:
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def replace(self, **kwargs: Any) -> UOp:
        new = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg, **kwargs}
        return UOp(new["op"], new["dtype"], tuple(new["src"]), new["arg"])

    # *** graph walks ***

    @property
    def toposort(self) -> dict[UOp, None]:
        """Every node reachable from self, children before parents (iterative: graphs can be deep)."""
        return {**self._descendants, self: None}

    @property
    def _descendants(self) -> dict[UOp, None]:
        # cached in the node's __dict__ by hand: functools.cached_property takes a lock on every first access (Python
        # 3.11), and a step's backward asks this of every node it builds
        try:
            return self.__dict__["_descendants"]
        except KeyError:
            out = self.__dict__["_descendants"] = self._walk_descendants()
            return out

    def _walk_descendants(self) -> dict[UOp, None]:
        # the cache leaves self out: a node holding itself is a reference cycle, which would keep dead graphs
        # (and the buffers they reach) alive until the cyclic GC runs, hiding dead buffers from the memory planner
        out: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(s, False) for s in reversed(self.src)]
        while stack:
            node, expanded = stack.pop()
            if node in out:
                continue
            if expanded:
                out[node] = None
            else:
                stack.append((node, True))
                for s in reversed(node.src):  # (a loop, not a generator: a call less per node)
                    if s not in out:
                        stack.append((s, False))
        return out

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        return substitute(self, mapping)

    # *** constructors ***

    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        if isinstance(value, UOp):
            return value
        if type(value) is int and (dtype is dtypes.int32 or dtype is dtypes.int64) and -(1 << 31) <= value < 1 << 31:
            return UOp(Ops.CONST, dtype, arg=value)  # index math's constants: already what as_const returns
        return UOp(Ops.CONST, dtype, arg=dtypes.as_const(value, dtype))

    def const_like(self, value: Any) -> UOp:
        return UOp.const(self.dtype, value)

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.int32) -> UOp:
        if not min_val <= max_val:
            raise ValueError(f"variable {name!r}: empty range [{min_val}, {max_val}]")
        return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))

    def bind(self, value: int) -> UOp:
        assert self.op is Ops.DEFINE_VAR, f"only a variable can be bound, not {self.op}"
        name, lo, hi = self.arg
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"cannot bind {name} to {value!r}: a variable takes an int")
        value = value.__index__()  # numpy integers too
        if not lo <= value <= hi:
            raise ValueError(f"cannot bind {name}={value}: outside its range [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def unbind(self) -> tuple[UOp, int]:
        assert self.op is Ops.BIND
        return self.src[0], self.src[1].arg

    @staticmethod
    def buffer_view(buf: Any, shape: tuple[int, ...]) -> UOp:
        """The tensor-graph node for a whole buffer seen with `shape` (a Buffer is the BUFFER node's arg)."""
        b = UOp(_BUFFER_OP, buf.dtype, (), buf)
        if type(shape) is not tuple:
            shape = tuple(shape)
        # their shape and device noted as made (_shape's and _device's answers): every stored node of every realize
        # gets these nodes, and the next step's tensor ops and optimizer key ask both of each
        known = b.__dict__
        if "device" not in known:
            known["shape"], known["device"] = (buf.size,), buf.device
        if shape == (buf.size,):
            return b
        view = UOp(_RESHAPE_OP, buf.dtype, (b,), shape)
        known = view.__dict__
        if "device" not in known:
            known["shape"], known["device"] = shape, buf.device
        return view

    def ufix(self, x: Any) -> UOp:
        return x if isinstance(x, UOp) else self.const_like(x)

    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        operands = (self, *srcs)
        out_dtype = dtypes.bool if op in GroupOp.Comparison else operands[-1].dtype
        if self.op is Ops.CONST and all(s.op is Ops.CONST for s in srcs) and not isinstance(self.arg, tuple):
            from lazygrad.uop.alu import exec_alu  # alu.py is keyed by Ops: imported where first needed

            # fold constants as they are built: keeps index expressions small from the start
            return UOp.const(out_dtype, exec_alu(op, out_dtype, [s.arg for s in operands]))
        return UOp(op, out_dtype, operands)

    def cast(self, dtype: DType) -> UOp:
        if self.dtype == dtype:
            return self
        if self.op is Ops.CONST:
            return UOp.const(dtype, self.arg)
        return UOp(Ops.CAST, dtype, (self,))

    def where(self, a: Any, b: Any) -> UOp:
        a = a if isinstance(a, UOp) else (b.const_like(a) if isinstance(b, UOp) else UOp.const(dtypes.int32, a))
        return self.alu(Ops.WHERE, a, a.ufix(b))

    # *** Python operators build ALU nodes (used by index math and the symbolic simplifier) ***

    def __add__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.alu(Ops.ADD, self.ufix(x))

    def __radd__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.ufix(x).alu(Ops.ADD, self)

    def __sub__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.alu(Ops.SUB, self.ufix(x))

    def __rsub__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.ufix(x).alu(Ops.SUB, self)

    def __mul__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.alu(Ops.MUL, self.ufix(x))

    def __rmul__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.ufix(x).alu(Ops.MUL, self)

    def __floordiv__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.alu(Ops.IDIV, self.ufix(x))

    def __mod__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.alu(Ops.MOD, self.ufix(x))

    def __truediv__(self, x: Any) -> UOp:
        if x.__class__ is not UOp and _foreign(x):
            return NotImplemented
        return self.alu(Ops.FDIV, self.ufix(x))

    def __neg__(self) -> UOp:
        return self.alu(Ops.NEG)

    def __lt__(self, x: Any) -> UOp:
        return self.alu(Ops.CMPLT, self.ufix(x))

    def __gt__(self, x: Any) -> UOp:
        return self.ufix(x).alu(Ops.CMPLT, self)

    def __ge__(self, x: Any) -> UOp:
        return (self < x).logical_not()

    def __le__(self, x: Any) -> UOp:
        return (self > x).logical_not()

    def __and__(self, x: Any) -> UOp:
        return self.alu(Ops.AND, self.ufix(x))

    def __or__(self, x: Any) -> UOp:
        return self.alu(Ops.OR, self.ufix(x))

    def __xor__(self, x: Any) -> UOp:
        return self.alu(Ops.XOR, self.ufix(x))

    def ne(self, x: Any) -> UOp:
        return self.alu(Ops.CMPNE, self.ufix(x))

    def eq(self, x: Any) -> UOp:
        return self.alu(Ops.CMPEQ, self.ufix(x))

    def maximum(self, x: Any) -> UOp:
        return self.alu(Ops.MAX, self.ufix(x))

    def minimum(self, x: Any) -> UOp:
        return -((-self).maximum(-self.ufix(x)))

    def logical_not(self) -> UOp:
        return self.ne(True)

    # *** bounds, used by the simplifier to prove facts about index math ***

    @property
    def _min_max(self) -> tuple[Any, Any]:
        return _from_sources(self, "_min_max", _bounds)

    @property
    def vmin(self) -> Any:
        return self._min_max[0]

    @property
    def vmax(self) -> Any:
        return self._min_max[1]

    def simplify(self) -> UOp:
        from lazygrad.uop.symbolic import simplify

        return simplify(self)

    def render(self, simplify: bool = True) -> str:
        """Index math as a readable expression, e.g. `((gidx0*4)+ridx1)`."""
        from lazygrad.uop.symbolic import render_expr

        return render_expr(self.simplify() if simplify else self)

    @property
    def expr(self) -> str:
        assert self.op is Ops.DEFINE_VAR
        return self.arg[0]

    def vars(self) -> set[UOp]:
        """The bound or unbound variables an expression mentions."""
        out = set()
        for x in self.toposort:
            if x.op is Ops.BIND:
                out.add(x)
            elif x.op is Ops.DEFINE_VAR:
                out.add(x)
        bound = {x.src[0] for x in out if x.op is Ops.BIND}
        return {x for x in out if x not in bound}

    # *** tensor-graph properties ***

    # read on every op a tensor builds: a cached value costs two dict lookups, no call (a try/except KeyError costs one
    # lookup less when cached, but raising the error for a node built by the op before, the common case in a chain
    # of ops, was ~100 ns more)
    @property
    def shape(self) -> tuple[sint, ...]:
        cache = self.__dict__
        return cache["shape"] if "shape" in cache else _from_sources(self, "shape", _shape)

    @property
    def size(self) -> int:
        n = prod(self.shape)
        return n if type(n) is int else ssimplify(n)  # symbolic: one canonical node, compared by identity

    @property
    def device(self) -> str:
        cache = self.__dict__
        return cache["device"] if "device" in cache else _from_sources(self, "device", _device)

    @property
    def base(self) -> UOp:
        """The node under a chain of movement ops: what actually holds or computes the data."""
        x = self
        while x.op in GroupOp.Movement:
            x = x.src[0]
        return x

    def rebase(self, base: UOp) -> UOp:
        """This node's chain of movement ops applied to `base` instead of its own base (no walk of the graph below)."""
        chain = []
        x = self
        while x.op in GroupOp.Movement:
            chain.append(x)
            x = x.src[0]
        for m in reversed(chain):
            base = UOp(m.op, m.dtype, (base, *m.src[1:]), m.arg)
        return base

    @property
    def is_realized(self) -> bool:
        return self.base.op is Ops.BUFFER

    @property
    def realized(self) -> Any:
        """The Buffer holding this node's data (seen through movement ops), None if it is not in memory."""
        return self.base.arg if self.base.op is Ops.BUFFER else None

    @property
    def buffer(self) -> Any:
        """The Buffer holding this node's data; an error if it is not in memory yet."""
        if (buf := self.realized) is None:
            raise RuntimeError(f"this {self.base.op} node is not in memory yet: realize the tensor that holds it first")
        return buf

    # *** printing: every shared node appears once, later uses refer to it by name ***

    def __repr__(self) -> str:
        return pretty_print(self)


def serialize(root: UOp) -> str:
    """The whole graph as text, one node a line in topological order, sources by line number: equal texts are equal
    graphs, in any process (the key of on-disk caches; pretty_print abridges big graphs)."""
    index: dict[UOp, int] = {}
    lines = []
    for i, n in enumerate(root.toposort):
        index[n] = i
        lines.append(f"{n.op.name} {n.dtype!r} {n.arg!r} {[index[s] for s in n.src]}")
    return "\n".join(lines)


def pretty_print(root: UOp, max_lines: int = 400) -> str:
    uses: dict[UOp, int] = {}
    for node in root.toposort:
        for s in node.src:
            uses[s] = uses.get(s, 0) + 1
    names: dict[UOp, str] = {}
    lines: list[str] = []
    # work items: a node to print (with the text that follows it), or a finished line of text
    stack: list[tuple[UOp | None, int, str]] = [(root, 0, "")]
    while stack:
        node, depth, text = stack.pop()
        pad = "  " * depth
        if len(lines) >= max_lines:
            lines.append(pad + "...")
            break
        if node is None:
            lines.append(pad + text)
            continue
        if node in names:
            lines.append(f"{pad}{names[node]}{text}")
            continue
        label = ""
        if uses.get(node, 0) > 1:
            names[node] = f"x{len(names)}"
            label = f"{names[node]}:="
        arg = "" if node.arg is None else f", arg={node.arg!r}"
        head = f"{pad}{label}UOp({node.op!r}, {node.dtype!r}{arg}"
        if not node.src:
            lines.append(head + ")" + text)
            continue
        lines.append(head + ", src=(")
        stack.append((None, depth, "))" + text))
        stack.extend((s, depth + 1, ",") for s in reversed(node.src))
    return "\n".join(lines)


def _from_sources(u: UOp, name: str, fn: Callable[[UOp], Any]) -> Any:
    """u's cached `name` = fn(u), where fn reads the same property of u's sources. The uncached nodes below u are
    computed first, deepest first: a property asked of a node 100,000 ops deep costs no recursion."""
    cache = u.__dict__
    if name in cache:
        return cache[name]
    for s in u.src:
        if name not in s.__dict__:
            break
    else:  # the common case while building a graph: the sources are known, u is computed without a walk
        cache[name] = value = fn(u)
        return value
    order: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(u, False)]
    while stack:
        node, expanded = stack.pop()
        if node in order:
            continue
        if expanded:
            order[node] = None
        else:
            stack.append((node, True))
            stack.extend((s, False) for s in node.src if name not in s.__dict__ and s not in order)
    for node in order:
        node.__dict__[name] = fn(node)
    return cache[name]


# _device and _shape run once per node, after every source has its own value cached (see _from_sources): they read
# the sources' caches directly


def _device(u: UOp) -> str | None:
    if u.op is _BUFFER_OP:  # (every buffer a realize stores: without a rule's call)
        return u.arg.device
    if (rule := _DEVICE_RULES.get(u.op)) is not None:
        return rule(u)
    for s in u.src:
        if (d := s.__dict__["device"]) is not None:
            return d
    return None


def _shape(u: UOp) -> tuple[sint, ...]:
    op = u.op
    # (buffers, the most common movement ops and the scalars, without a rule's call)
    if op is _BUFFER_OP:
        return (u.arg.size,)
    if op in _SHAPE_IS_ARG:
        return u.arg
    if op in _SHAPE_SCALAR:
        return ()
    if (rule := _SHAPE_RULES.get(op)) is not None:
        return rule(u)
    return u.src[0].__dict__["shape"]  # elementwise ops, casts, copies, ...: their first source's


def _multi_shape(u: UOp) -> tuple[sint, ...]:
    shape = list(u.src[0].shape)
    if u.arg is not None:
        shape[u.arg] = sum(s.shape[u.arg] for s in u.src)
    return tuple(shape)


# the ops whose device or shape is not their sources', as data: one dictionary lookup per node built, where a chain of
# `op is Ops.X` tests read an Enum member each (~50 ns apiece on Python 3.11, whose EnumType has a __getattr__ hook)
_DEVICE_RULES: dict[Ops, Callable[[UOp], Any]] = {
    Ops.DEVICE: lambda u: u.arg,
    Ops.COPY: lambda u: u.arg,
    Ops.MULTI: lambda u: tuple(s.__dict__["device"] for s in u.src),
}
_BUFFER_OP, _RESHAPE_OP = Ops.BUFFER, Ops.RESHAPE
_SHAPE_IS_ARG = frozenset({Ops.RESHAPE, Ops.EXPAND})
_SHAPE_SCALAR = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE})
_SHAPE_RULES: dict[Ops, Callable[[UOp], tuple[sint, ...]]] = {
    Ops.IOTA: lambda u: (u.arg,),
    Ops.MULTI: _multi_shape,
    Ops.PERMUTE: lambda u: tuple(u.src[0].__dict__["shape"][i] for i in u.arg),
    Ops.PAD: lambda u: tuple(sadd(sadd(s, lo), hi) for s, (lo, hi) in zip(u.src[0].__dict__["shape"], u.arg)),
    Ops.SHRINK: lambda u: tuple(ssub(hi, lo) for lo, hi in u.arg),
    Ops.REDUCE_AXIS: lambda u: tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].__dict__["shape"])),
    Ops.WHERE: lambda u: u.src[1].__dict__["shape"],
}


# *** bounds ***


def _bounds(u: UOp) -> tuple[Any, Any]:
    lo, hi = _exact_bounds(u)
    # the interval is of the exact integer result: one outside the dtype wraps, so then only the dtype's range is sure
    # (the first test is a fast path: 0 <= lo <= hi < 2**(bits-1) fits every integer dtype of that size)
    if isinstance(lo, int) and isinstance(hi, int) and not (lo >= 0 and hi.bit_length() < 8 * u.dtype.itemsize):
        if dtypes.is_int(u.dtype) and (lo < dtypes.min(u.dtype) or hi > dtypes.max(u.dtype)):
            return (dtypes.min(u.dtype), dtypes.max(u.dtype))
    return (lo, hi)


def c_idiv(a: int, b: int) -> int:
    """C's truncating integer division (the IR's IDIV, see alu.py); 0 for a zero divisor."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _exact_bounds(u: UOp) -> tuple[Any, Any]:
    op, s = u.op, u.src
    if op is Ops.CONST:
        return (u.arg, u.arg)
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op is Ops.BIND:
        return s[0]._min_max
    if op is Ops.RANGE:
        return (0, s[0].vmax - 1)
    if op is Ops.SPECIAL:
        return (0, u.arg[1] - 1)
    if op is Ops.IOTA and isinstance(u.arg, int):  # 0..n-1, or 0 where a view pads it
        return (0, max(u.arg - 1, 0))
    if not (dtypes.is_int(u.dtype) or dtypes.is_bool(u.dtype)):
        return (dtypes.min(u.dtype), dtypes.max(u.dtype))
    if op is Ops.ADD:
        return (s[0].vmin + s[1].vmin, s[0].vmax + s[1].vmax)
    if op is Ops.SUB:
        return (s[0].vmin - s[1].vmax, s[0].vmax - s[1].vmin)
    if op is Ops.NEG and dtypes.is_int(u.dtype):
        return (-s[0].vmax, -s[0].vmin)
    if op is Ops.MUL:
        corners = [a * b for a in (s[0].vmin, s[0].vmax) for b in (s[1].vmin, s[1].vmax)]
        return (min(corners), max(corners))
    if op is Ops.IDIV and s[1].vmin > 0:
        corners = [c_idiv(a, b) for a in (s[0].vmin, s[0].vmax) for b in (s[1].vmin, s[1].vmax)]
        return (min(corners), max(corners))
    if op is Ops.MOD and s[1].vmin > 0 and dtypes.is_int(u.dtype):
        if s[0].vmin >= 0:
            if s[0].vmax < s[1].vmin:
                return (s[0].vmin, s[0].vmax)
            return (0, min(s[0].vmax, s[1].vmax - 1))
        return (max(-(s[1].vmax - 1), s[0].vmin), min(s[1].vmax - 1, max(s[0].vmax, 0)))
    if op is Ops.MAX:
        return (max(s[0].vmin, s[1].vmin), max(s[0].vmax, s[1].vmax))
    if op is Ops.CMPLT:
        return (s[0].vmax < s[1].vmin, s[0].vmin < s[1].vmax)
    if op in (Ops.CMPNE, Ops.CMPEQ):
        known_equal = s[0].vmin == s[0].vmax == s[1].vmin == s[1].vmax
        disjoint = s[0].vmax < s[1].vmin or s[1].vmax < s[0].vmin
        ne_lo, ne_hi = disjoint, not known_equal
        return (ne_lo, ne_hi) if op is Ops.CMPNE else (not ne_hi, not ne_lo)
    if op is Ops.WHERE:
        if s[0].vmin == s[0].vmax:
            return s[1]._min_max if s[0].vmin else s[2]._min_max
        return (min(s[1].vmin, s[2].vmin), max(s[1].vmax, s[2].vmax))
    if dtypes.is_bool(u.dtype) and op is Ops.AND:
        return (s[0].vmin and s[1].vmin, s[0].vmax and s[1].vmax)
    if dtypes.is_bool(u.dtype) and op is Ops.OR:
        return (s[0].vmin or s[1].vmin, s[0].vmax or s[1].vmax)
    if op is Ops.SHR and s[0].vmin >= 0 and s[1].vmin >= 0:
        return (s[0].vmin >> s[1].vmax, s[0].vmax >> s[1].vmin)
    if op is Ops.AND and s[1].vmin >= 0 and s[1].vmin == s[1].vmax and s[0].vmin >= 0:
        return (0, min(s[0].vmax, s[1].vmax))
    if op is Ops.CAST and (dtypes.is_int(s[0].dtype) or dtypes.is_bool(s[0].dtype)):
        lo, hi = int(s[0].vmin), int(s[0].vmax)
        if dtypes.min(u.dtype) <= lo and hi <= dtypes.max(u.dtype):
            return (lo, hi) if not dtypes.is_bool(u.dtype) else (bool(lo), bool(hi))
    return (dtypes.min(u.dtype), dtypes.max(u.dtype))


# *** patterns ***


class UPat:
    """A pattern over UOps. `src` as a tuple matches in order, as a list in any order, as one UPat every source."""

    __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "_src_kind")

    def __init__(
        self,
        op: Ops | tuple[Ops, ...] | frozenset[Ops] | None = None,
        dtype: DType | tuple[DType, ...] | None = None,
        src: UPat | tuple[UPat, ...] | list[UPat] | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
    ):
        self.op: frozenset[Ops] | None = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
        self.dtype: frozenset[DType] | None = (
            None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        )
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
        self.src: Any = src
        self._src_kind = (
            "none" if src is None else "each" if isinstance(src, UPat) else "perm" if isinstance(src, list) else "seq"
        )

    @staticmethod
    def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: DType | tuple[DType, ...] | None, value: Any) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    def named(self, name: str) -> UPat:
        return UPat(
            tuple(self.op) if self.op else None,
            tuple(self.dtype) if self.dtype else None,
            self.src,
            self.arg,
            name,
            self.allow_any_len,
        )

    # pattern builders mirror the UOp operators: `UPat.var("x") + 0`
    def _bin(self, op: Ops, x: Any, commutative: bool) -> UPat:
        other = x if isinstance(x, UPat) else UPat.const(None, x)
        return UPat(op, src=[self, other] if commutative else (self, other))

    def __add__(self, x: Any) -> UPat:
        return self._bin(Ops.ADD, x, True)

    def __mul__(self, x: Any) -> UPat:
        return self._bin(Ops.MUL, x, True)

    def __sub__(self, x: Any) -> UPat:
        return self._bin(Ops.SUB, x, False)

    def __floordiv__(self, x: Any) -> UPat:
        return self._bin(Ops.IDIV, x, False)

    def __mod__(self, x: Any) -> UPat:
        return self._bin(Ops.MOD, x, False)

    def __lt__(self, x: Any) -> UPat:
        return self._bin(Ops.CMPLT, x, False)

    def __and__(self, x: Any) -> UPat:
        return self._bin(Ops.AND, x, True)

    def __or__(self, x: Any) -> UPat:
        return self._bin(Ops.OR, x, True)

    def maximum(self, x: Any) -> UPat:
        return self._bin(Ops.MAX, x, True)

    def ne(self, x: Any) -> UPat:
        return self._bin(Ops.CMPNE, x, True)

    def eq(self, x: Any) -> UPat:
        return self._bin(Ops.CMPEQ, x, True)

    def where(self, a: Any, b: Any) -> UPat:
        a = a if isinstance(a, UPat) else UPat.const(None, a)
        b = b if isinstance(b, UPat) else UPat.const(None, b)
        return UPat(Ops.WHERE, src=(self, a, b))

    def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        if self.op is not None and u.op not in self.op:
            return []
        if self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar not in self.dtype:
            return []
        if self.arg is not None and (
            u.arg != self.arg or type(u.arg) is not type(self.arg) and not isinstance(u.arg, (int, float))
        ):
            return []
        if self.name is not None:
            if (prev := store.get(self.name)) is not None:
                return [store] if prev is u else []
            store = {**store, self.name: u}
        kind = self._src_kind
        if kind == "none":
            return [store]
        if kind == "each":
            stores = [store]
            for s in u.src:
                stores = [m for st in stores for m in self.src.match(s, st)]
                if not stores:
                    return []
            return stores
        pats = self.src
        if len(u.src) != len(pats) and not (self.allow_any_len and len(u.src) >= len(pats)):
            return []
        orders = itertools.permutations(pats) if kind == "perm" else (pats,)
        out: list[dict[str, UOp]] = []
        for order in orders:
            stores = [store]
            for p, s in zip(order, u.src):
                stores = [m for st in stores for m in p.match(s, st)]
                if not stores:
                    break
            out.extend(stores)
        return out

    def __repr__(self) -> str:
        ops = None if self.op is None else sorted(o.name for o in self.op)
        return f"UPat(op={ops}, arg={self.arg!r}, name={self.name!r}, src={self.src!r})"


def _direct_call(pat: UPat, params: Any) -> int | None:
    """How to call a rule whose pattern tests the op alone (which the index by op has done, so nothing is left to
    match) without building its keyword arguments: 0 fn(), 1 fn(node), 2 fn(ctx), 3 fn(ctx, node); None: match and
    pass keywords. Half the calls of the lowering and the renderer's ALU rules, each a node of every kernel."""
    if pat.dtype is not None or pat.arg is not None or pat.src is not None:
        return None
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params.values()):
        return None
    names = list(params)
    candidates = {(): 0, ("ctx",): 2} if pat.name is None else {(pat.name,): 1, ("ctx", pat.name): 3}
    return candidates.get(tuple(names))


class PatternMatcher:
    """A named list of (pattern, rewrite) rules, indexed by op so a node only tries rules that can match it."""

    def __init__(self, rules: Sequence[tuple[UPat, Callable[..., UOp | None]]]):
        self.rules = list(rules)
        # per rule: the pattern, the function, whether it takes ctx, and its direct call (see _direct_call) or None
        self.by_op: dict[Ops, list[tuple[UPat, Callable[..., Any], bool, int | None]]] = {}
        self.any_op: list[tuple[UPat, Callable[..., Any], bool, int | None]] = []
        for pat, fn in self.rules:
            params = inspect.signature(fn).parameters
            entry = (pat, fn, "ctx" in params, _direct_call(pat, params))
            if pat.op is None:
                self.any_op.append(entry)
            else:
                for op in pat.op:
                    self.by_op.setdefault(op, []).append(entry)
        # keep the written order between op-specific and wildcard rules
        order = {id(fn): i for i, (_, fn) in enumerate(self.rules)}
        for op in Ops:
            merged = self.by_op.get(op, []) + self.any_op
            self.by_op[op] = sorted(merged, key=lambda e: order[id(e[1])])

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        for pat, fn, wants_ctx, direct in self.by_op[u.op]:
            if direct is not None:
                ret = fn() if direct == 0 else fn(u) if direct == 1 else fn(ctx) if direct == 2 else fn(ctx, u)
                if ret is not None and ret is not u:
                    return ret
                continue
            for store in pat.match(u, {}):
                ret = fn(ctx=ctx, **store) if wants_ctx else fn(**store)
                if ret is not None and ret is not u:
                    return ret
        return None

    def translate(self, u: UOp, ctx: Any = None) -> Any:
        """The first rule's result that is not None, `u` itself included; None when no rule applies. For rule lists
        that map each node once into another form (lowering an AST node, spelling a linear UOp in C) rather than
        rewrite it to a fixed point."""
        for pat, fn, wants_ctx, direct in self.by_op[u.op]:
            if direct is not None:
                ret = fn() if direct == 0 else fn(u) if direct == 1 else fn(ctx) if direct == 2 else fn(ctx, u)
                if ret is not None:
                    return ret
                continue
            for store in pat.match(u, {}):
                ret = fn(ctx=ctx, **store) if wants_ctx else fn(**store)
                if ret is not None:
                    return ret
        return None


def graph_rewrite(
    root: UOp, pm: PatternMatcher, ctx: Any = None, memo: dict[UOp, UOp] | None = None, name: str | None = "rewrite"
) -> UOp:
    """Rewrite bottom-up to a fixed point: sources first, then the node until no rule applies.

    Memoized per call, or across calls in `memo` (sound when the rules and ctx are the same for every call),
    iterative (no recursion limit on deep graphs). `name` is the pass's name in VIZ (None: never recorded)."""
    if VIZ.value and name is not None:  # VIZ: record the pass and each rule that fires (lazygrad/viz/record.py)
        return track_rewrite(graph_rewrite, root, pm, name, ctx)
    done: dict[UOp, UOp] = {} if memo is None else memo
    if root in done:  # a shared memo often holds the whole expression already (the lanes of an upcast kernel)
        return done[root]
    stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
    while stack:
        node, stage, result = stack.pop()
        if node in done:
            continue
        if stage == 0:
            stack.append((node, 1, None))
            stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
        elif stage == 1:
            new_src = tuple(done[s] for s in node.src)
            x = node if new_src == node.src else UOp(node.op, node.dtype, new_src, node.arg)
            if x is not node and x in done:
                done[node] = done[x]
                continue
            y = pm.rewrite(x, ctx)
            if y is None:
                done[node] = x
                if x is not node:
                    done[x] = x
            else:
                # the replacement may contain new nodes: rewrite it fully, then map node to it
                stack.append((node, 2, y))
                stack.append((y, 0, None))
        else:
            assert result is not None
            done[node] = done[result]
    return done[root]


def substitute(root: UOp, mapping: dict[UOp, UOp], renamed: dict[UOp, UOp] | None = None) -> UOp:
    """Replace nodes by identity, once (a replacement is not itself looked up again, so swaps are safe). `renamed`,
    if given, receives each node of the result that differs from the node of root it stands for -> that node."""
    new: dict[UOp, UOp] = {}
    for node in root.toposort:
        if node in mapping:
            new[node] = mapping[node]
        else:
            src = tuple(new[s] for s in node.src)
            new[node] = node if src == node.src else UOp(node.op, node.dtype, src, node.arg)
    if renamed is not None:
        renamed.update((v, k) for k, v in new.items() if v is not k)
    return new[root]


def smax(*xs: Any) -> Any:
    return functools.reduce(
        lambda a, b: a.maximum(b) if isinstance(a, UOp) else b.maximum(a) if isinstance(b, UOp) else max(a, b), xs
    )


def resolve(x: Any, default: bool = True) -> bool:
    """A Python bool from a maybe-symbolic comparison; `default` where bounds cannot decide."""
    if not isinstance(x, UOp):
        return bool(x)
    if x.vmin == x.vmax:
        return bool(x.vmin)
    return default


def ssimplify(x: Any) -> Any:
    """A maybe-symbolic int simplified: a UOp that folds to a constant becomes a Python int."""
    if not isinstance(x, UOp):
        return x
    x = x.simplify()
    return x.arg if x.op is Ops.CONST else x


# *** symbolic sizes: a shape entry is an int or an int UOp over bound variables (BIND) ***


# plain ints stay on the int path (no kernel of a non-symbolic program changes); anything symbolic is simplified,
# so equal symbolic sizes are one node and compare equal by identity


def sadd(a: Any, b: Any) -> Any:
    return a + b if type(a) is int and type(b) is int else ssimplify(a + b)


def ssub(a: Any, b: Any) -> Any:
    return a - b if type(a) is int and type(b) is int else ssimplify(a - b)


def smul(a: Any, b: Any) -> Any:
    return a * b if type(a) is int and type(b) is int else ssimplify(a * b)


def sym_value(x: Any) -> int:
    """A maybe-symbolic int at the values its variables are bound to; ValueError when one is not bound."""
    if not isinstance(x, UOp):
        return x
    unbound = sorted(v.arg[0] for v in x.vars() if v.op is Ops.DEFINE_VAR)
    if unbound:
        raise ValueError(f"variable {', '.join(unbound)} has no value: bind it first, e.g. Variable(...).bind(n)")
    return int(exec_tree(x, {b.src[0]: b.src[1].arg for b in x.toposort if b.op is Ops.BIND}))


def sym_known(x: Any) -> int | None:
    """sym_value(x), or None when a variable in x is not bound (then only its bounds are known)."""
    try:
        return sym_value(x)
    except ValueError:
        return None


def smin(a: Any, b: Any) -> Any:
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        return min(a, b)
    a, b = (x if isinstance(x, UOp) else UOp.const(dtypes.int32, x) for x in (a, b))
    return ssimplify(a.minimum(b))


def ssmax(a: Any, b: Any) -> Any:
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        return max(a, b)
    a, b = (x if isinstance(x, UOp) else UOp.const(dtypes.int32, x) for x in (a, b))
    return ssimplify(a.maximum(b))


def arg_uops(arg: Any) -> list[UOp]:
    """The UOps inside an arg (a movement op's sizes, which may be symbolic)."""
    if isinstance(arg, tuple):
        return [u for a in arg for u in arg_uops(a)]
    return [arg] if isinstance(arg, UOp) else []


def bound_in(root: UOp) -> set[UOp]:
    """The BIND nodes of a graph, also those inside the sizes of its movement ops."""
    out = set()
    for x in root.toposort:
        if x.op is Ops.BIND:
            out.add(x)
        for a in arg_uops(x.arg) if type(x.arg) is tuple or isinstance(x.arg, UOp) else ():
            out.update(b for b in a.toposort if b.op is Ops.BIND)
    return out


def rebind(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """root with BIND nodes replaced per `mapping`, in sources and inside sizes (symbolic shapes)."""

    def arg_of(a: Any) -> Any:
        if isinstance(a, tuple):
            return tuple(arg_of(y) for y in a)
        return substitute(a, mapping) if isinstance(a, UOp) else a

    new: dict[UOp, UOp] = {}
    for node in root.toposort:
        if node in mapping:
            new[node] = mapping[node]
            continue
        src = tuple(new[s] for s in node.src)
        arg = arg_of(node.arg) if arg_uops(node.arg) else node.arg
        new[node] = node if src == node.src and arg is node.arg else UOp(node.op, node.dtype, src, arg)
    return new[root]


def sym_unbind(x: Any) -> tuple[Any, dict[UOp, int]]:
    """x (an int, a UOp, or nested tuples of them) with every BIND replaced by its variable, and the bound values."""
    vals: dict[UOp, int] = {}

    def go(y: Any) -> Any:
        if isinstance(y, tuple):
            return tuple(go(z) for z in y)
        if not isinstance(y, UOp):
            return y
        binds = {b: b.src[0] for b in y.toposort if b.op is Ops.BIND}
        for b, v in binds.items():
            vals[v] = b.src[1].arg
        return substitute(y, binds) if binds else y

    return go(x), vals


def sym_infer(x: Any, var_vals: dict[UOp, int]) -> int:
    """Evaluate a maybe-symbolic int with variables bound."""
    if isinstance(x, int):
        return x
    return int(exec_tree(x, var_vals))


def exec_tree(u: UOp, var_vals: dict[UOp, int]) -> Any:
    from lazygrad.uop.alu import exec_alu

    vals: dict[UOp, Any] = {}
    for node in u.toposort:
        if node.op is Ops.CONST:
            vals[node] = node.arg
        elif node.op is Ops.DEFINE_VAR:
            vals[node] = var_vals[node]
        elif node.op is Ops.BIND:
            vals[node] = node.src[1].arg
        elif node.op in GroupOp.ALU:
            vals[node] = exec_alu(node.op, node.dtype, [vals[s] for s in node.src])
        elif node.op is Ops.CAST:
            vals[node] = dtypes.as_const(vals[node.src[0]], node.dtype)
        else:
            raise ValueError(f"cannot evaluate {node.op} in Python")
    return vals[u]
