"""`UOp`: the one node type of every IR stage.

A UOp is `(op, dtype, src, arg)`, immutable and hash-consed: building the same node twice returns the same object,
so structural equality is identity, hashing is free, and a graph is a DAG that shares every common subexpression.
Everything that walks a graph here is iterative, so graphs deeper than Python's recursion limit are fine.
"""

from __future__ import annotations

import operator
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from plygrad.ir.bounds import node_bounds
from plygrad.ir.dtype import ConstType, DType, DTypeKind, dtypes, result_dtype
from plygrad.ir.errors import DTypeError
from plygrad.ir.ops import AxisType, GroupOp, Ops
from plygrad.ir.records import record_fields
from plygrad.ir.scalar import truncate
from plygrad.ir.shape import infer_shape

_T = TypeVar("_T")

# Tags that keep keys of different Python types apart (1 == 1.0 == True and 0.0 == -0.0 in Python, but they are
# different constants to the IR; NaN != NaN, but a NaN constant must still be shared).
_FLOAT_TAG: Final = object()
_BOOL_TAG: Final = object()
_TUPLE_TAG: Final = object()
_OPS_TAG: Final = object()


def arg_key(arg: Any) -> Any:
    """A hashable key for a UOp argument that tells apart values Python considers equal (1, 1.0, True; 0.0, -0.0;
    Ops.ADD and its IntEnum number) and makes equal what Python does not (NaN with the same bits)."""
    kind = type(arg)
    if kind is int or kind is str or arg is None:
        return arg
    if kind is Ops:
        return (_OPS_TAG, arg.name)
    if kind is float:
        return (_FLOAT_TAG, _PACK_DOUBLE(arg))
    if kind is bool:
        return (_BOOL_TAG, arg)
    if kind is tuple:  # mostly shapes: an int is its own key, so no call for it
        if _INTS.issuperset(map(type, arg)):  # C-level
            return (_TUPLE_TAG, *arg)
        return (_TUPLE_TAG, *[a if type(a) is int else arg_key(a) for a in arg])
    fields = _RECORD_FIELDS.get(kind)
    if fields is None and hasattr(kind, "record_name"):
        fields = _RECORD_FIELDS[kind] = _fields_getter(record_fields(kind))
    if fields is not None:  # a record's own == would merge BufferRef(True, ..) with BufferRef(1, ..)
        values = fields(arg)
        if _PLAIN_KEYS.issuperset(map(type, values)):  # C-level: a BufferRef is keyed for every realized tensor
            return (kind, *values)
        return (kind, *[v if type(v) is int or type(v) is str else arg_key(v) for v in values])
    return arg


def _fields_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving a record's field values as a tuple, in order (operator.attrgetter, at C speed)."""
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda record: (one(record),)
    if not names:
        return lambda record: ()
    return operator.attrgetter(*names)


_PACK_DOUBLE: Final = struct.Struct("<d").pack
_PLAIN_KEYS: Final = frozenset({int, str})  # field values that are their own key
_INTS: Final = frozenset({int})

_RECORD_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


class _NodeRef(weakref.ref["UOp"]):
    """A weak reference to a UOp that knows the node's cache key, for `_forget`. Made by `_node_ref`: weakref.ref's
    own constructor is C, where a Python __new__ and __init__ cost ~0.3 us for every new node."""

    __slots__ = ("key",)
    key: tuple[Any, ...]


def _node_ref(node: UOp, key: tuple[Any, ...]) -> _NodeRef:
    ref = _NodeRef(node, _forget)
    ref.key = key
    return ref


_CACHE_LOCK: Final = threading.RLock()  # reentrant: a garbage collection inside a locked region runs _forget


def _forget(ref: weakref.ReferenceType[UOp]) -> None:
    """A cached node died: drop its entry, unless the key already belongs to a node built since."""
    try:
        assert isinstance(ref, _NodeRef)
        with _CACHE_LOCK:
            cache = UOp._cache
            if cache.get(ref.key) is ref:
                del cache[ref.key]
    except Exception:  # noqa: S110 - interpreter shutdown may have torn down the cache already
        pass


class UOp:
    """One IR node. Construct with `UOp(op, dtype, src, arg)`; the same arguments always give the same object."""

    # The fields live in slots: reading one is several times faster than an instance-dict lookup (verify, rewrite
    # and serialize read them for every node), and a node takes no dict until a per-node cache (_toposort, _shape,
    # _bounds) needs one: a decoded 10k-node graph is 15% smaller and frees a third faster.
    __slots__ = ("__dict__", "__weakref__", "_key", "arg", "dtype", "op", "src")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    _key: tuple[Any, ...]

    # key -> weak reference: the cache finds a live node again but never keeps one alive. An entry goes when its
    # node dies, from the weak reference's callback (`_forget`): CPython clears a weak reference before calling it,
    # so a dying node can never be handed out again (a `__del__` could be: between the last reference going and the
    # entry being removed, another thread's lookup resurrected the node, and a third thread then built a second node
    # for the same key). Misses and removals take `_CACHE_LOCK`; hits read without it.
    _cache: dict[tuple[Any, ...], _NodeRef] = {}

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        # None and int are arg_key's own answer for most nodes (ALU ops, constants): skip the call for them
        key = (op, dtype, src, arg if arg is None or type(arg) is int else arg_key(arg))
        cache = UOp._cache
        ref = cache.get(key)
        if ref is not None:
            found = ref()
            if found is not None:
                return found
        node = object.__new__(cls)
        _SET_OP(node, op)
        _SET_DTYPE(node, dtype)
        _SET_SRC(node, src)
        _SET_ARG(node, arg)
        _SET_KEY(node, key)
        # graphs are built and lowered in several threads (docs/threads.md): setdefault inserts atomically (the
        # key hashes and compares in C), so no lock unless the entry there is a dead node's
        ref = _node_ref(node, key)
        current = cache.setdefault(key, ref)
        if current is not ref:
            found = current()
            if found is not None:
                return found  # another thread built it first
            with _CACHE_LOCK:  # a dead node whose `_forget` has not run yet
                again = cache.get(key)
                if again is not None:
                    found = again()
                    if found is not None:
                        return found
                cache[key] = ref
        return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: cannot set {name!r}; build a new node with .replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"UOp is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        from plygrad.ir.serialize import deserialize_trusted, serialize

        return (deserialize_trusted, (serialize(self),))

    def __copy__(self) -> UOp:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> UOp:
        return self

    # ---- building ----------------------------------------------------------------------------------------------
    def replace(self, **changes: Any) -> UOp:
        """This node with some of op/dtype/src/arg changed."""
        new = (changes.pop("op", self.op), changes.pop("dtype", self.dtype), changes.pop("src", self.src),
               changes.pop("arg", self.arg))
        if changes:
            raise TypeError(f"replace() got unknown fields {sorted(changes)}; a UOp has op, dtype, src, arg")
        if new[0] is self.op and new[1] is self.dtype and new[2] == self.src and arg_key(new[3]) == self._key[3]:
            return self
        return UOp(*new)

    @staticmethod
    def const(dtype: DType, value: ConstType) -> UOp:
        """A CONST of `dtype` holding `value` as the dtype stores it (wrapped or rounded)."""
        if dtype.kind is DTypeKind.VOID:
            raise DTypeError("a CONST needs a value dtype, not void")
        return UOp(Ops.CONST, dtype, (), truncate(dtype, value))

    def const_like(self, value: ConstType) -> UOp:
        """A CONST with this node's dtype."""
        return UOp.const(self.dtype, value)

    @staticmethod
    def variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer variable `name` known to lie in [vmin, vmax]."""
        if vmin > vmax:
            raise ValueError(f"variable {name!r}: empty range [{vmin}, {vmax}]")
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, vmin, vmax))

    @staticmethod
    def range(end: UOp | int, axis: int, axis_type: AxisType = AxisType.LOOP) -> UOp:
        """A loop variable running 0..end-1 (`axis` tells ranges of one kernel apart)."""
        end_node = end if isinstance(end, UOp) else UOp.const(dtypes.index, end)
        return UOp(Ops.RANGE, dtypes.index, (end_node,), (axis, axis_type))

    def bind(self, value: int) -> UOp:
        """Bind this DEFINE_VAR to a concrete value."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"bind() is for DEFINE_VAR, not {self.op!r}")
        _, lo, hi = self.arg
        if not lo <= value <= hi:
            raise ValueError(f"variable {self.arg[0]!r}: value {value} is outside [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def _operand(self, x: UOp | ConstType) -> UOp:
        return x if isinstance(x, UOp) else self.const_like(x)

    def alu(self, op: Ops, *others: UOp | ConstType) -> UOp:
        """The ALU node `op(self, *others)`; Python scalars become constants of this node's dtype."""
        srcs = (self, *(self._operand(o) for o in others))
        if op is Ops.WHERE:
            dtype = srcs[1].dtype
        elif op in GroupOp.Comparison:
            dtype = dtypes.bool.vec(self.dtype.count) if self.dtype.count > 1 else dtypes.bool
        else:
            dtype = self.dtype
        return UOp(op, dtype, srcs)

    def cast(self, dtype: DType) -> UOp:
        return self if dtype is self.dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        return UOp(Ops.BITCAST, dtype, (self,))

    def where(self, if_true: UOp | ConstType, if_false: UOp | ConstType) -> UOp:
        """`self ? if_true : if_false` (self is the bool condition)."""
        if isinstance(if_true, UOp):
            true_node = if_true
        elif isinstance(if_false, UOp):
            true_node = if_false.const_like(if_true)
        else:  # two Python scalars: the weak-scalar promotion of both (1 and 2.5 give a float)
            true_node = UOp.const(result_dtype(if_true, if_false), if_true)
        false_node = if_false if isinstance(if_false, UOp) else true_node.const_like(if_false)
        return UOp(Ops.WHERE, true_node.dtype, (self, true_node, false_node))

    def __add__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.ADD, x)
    def __radd__(self, x: ConstType) -> UOp: return self._operand(x).alu(Ops.ADD, self)
    def __sub__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.SUB, x)
    def __rsub__(self, x: ConstType) -> UOp: return self._operand(x).alu(Ops.SUB, self)
    def __mul__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.MUL, x)
    def __rmul__(self, x: ConstType) -> UOp: return self._operand(x).alu(Ops.MUL, self)
    def __floordiv__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.IDIV, x)
    def __rfloordiv__(self, x: ConstType) -> UOp: return self._operand(x).alu(Ops.IDIV, self)
    def __truediv__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.FDIV, x)
    def __rtruediv__(self, x: ConstType) -> UOp: return self._operand(x).alu(Ops.FDIV, self)
    def __mod__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.MOD, x)
    def __rmod__(self, x: ConstType) -> UOp: return self._operand(x).alu(Ops.MOD, self)
    def __and__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.AND, x)
    def __or__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.OR, x)
    def __xor__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.XOR, x)
    def __lshift__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.SHL, x)
    def __rshift__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.SHR, x)
    def __neg__(self) -> UOp: return self.alu(Ops.NEG)
    # ordering builds comparisons (as in tinygrad); == and hash stay identity, which hash-consing makes structural
    def __lt__(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.CMPLT, x)
    def __gt__(self, x: UOp | ConstType) -> UOp: return self._operand(x).alu(Ops.CMPLT, self)
    def ne(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.CMPNE, x)
    def eq(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.CMPEQ, x)
    def maximum(self, x: UOp | ConstType) -> UOp: return self.alu(Ops.MAX, x)
    def minimum(self, x: UOp | ConstType) -> UOp:
        """min as the max of order-reversed values: -v for floats, ~v (v XOR all-ones) for ints and bool, since -v
        reverses nothing on unsigned ints and overflows at INT_MIN."""
        other = self._operand(x)
        if self.dtype.scalar().is_float:
            return -((-self).alu(Ops.MAX, -other))
        ones = self.const_like(-1)
        return (self ^ ones).alu(Ops.MAX, other ^ ones) ^ ones

    __hash__ = object.__hash__

    # ---- walking -----------------------------------------------------------------------------------------------
    @property
    def toposort(self) -> tuple[UOp, ...]:
        """Every node reachable from this one, each after all of its sources (this node last)."""
        # the cache leaves this node out: a node holding itself would be a reference cycle the GC must break
        cached: tuple[UOp, ...] | None = self.__dict__.get("_toposort")
        if cached is None:
            cached = self.__dict__["_toposort"] = tuple(_toposort(self)[:-1])
        return (*cached, self)

    def sparents(self) -> Iterator[UOp]:
        """Iterate the nodes reachable from this one (in topological order) without caching the list."""
        return iter(_toposort(self))

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """This graph with every occurrence of a key of `mapping` replaced by its value (values are not walked)."""
        new: dict[UOp, UOp] = {}
        for node in _toposort(self):
            if node in mapping:
                new[node] = mapping[node]
                continue
            srcs = tuple(new[s] for s in node.src)
            new[node] = node if srcs == node.src else UOp(node.op, node.dtype, srcs, node.arg)
        return new[self]

    # ---- analysis ----------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...] | None:
        """Tensor-stage shape (None for nodes without one, like SINK or kernel ops). Raises ShapeError."""
        found = self.__dict__.get("_shape", _MISSING)  # known: the frontend asks each node's shape many times
        return _fill_bottom_up(self, "_shape", infer_shape) if found is _MISSING else found

    @property
    def ndim(self) -> int:
        shape = self.shape
        if shape is None:
            raise ValueError(f"{self.op!r} has no tensor shape")
        return len(shape)

    @property
    def vmin(self) -> ConstType:
        """A lower bound of every value this node can take (exact for constants and variables)."""
        return _fill_bottom_up(self, "_bounds", node_bounds)[0]

    @property
    def vmax(self) -> ConstType:
        """An upper bound of every value this node can take."""
        return _fill_bottom_up(self, "_bounds", node_bounds)[1]

    def const_value(self) -> ConstType | None:
        """The value of a CONST node, None otherwise."""
        return self.arg if self.op is Ops.CONST else None

    # ---- printing ----------------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return _repr(self, depth=3)

    def __str__(self) -> str:
        return _repr(self, depth=3)


# __setattr__ refuses every write (a UOp is immutable), so __new__ fills the slots through their own descriptors
_SET_OP = vars(UOp)["op"].__set__
_SET_DTYPE = vars(UOp)["dtype"].__set__
_SET_SRC = vars(UOp)["src"].__set__
_SET_ARG = vars(UOp)["arg"].__set__
_SET_KEY = vars(UOp)["_key"].__set__


def _repr(node: UOp, depth: int) -> str:
    if depth == 0:
        return f"UOp({node.op!r}, ...)"
    srcs = ", ".join(_repr(s, depth - 1) for s in node.src)
    src_text = f"({srcs},)" if len(node.src) == 1 else f"({srcs})"
    return f"UOp({node.op!r}, {node.dtype!r}, arg={node.arg!r}, src={src_text})"


def _toposort(root: UOp) -> list[UOp]:
    order: list[UOp] = []
    visited: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))
        for s in reversed(node.src):
            if s not in visited:
                stack.append((s, False))
    return order


def _fill_bottom_up(root: UOp, attr: str, compute: Callable[[UOp], _T]) -> _T:
    """Compute a per-node attribute for `root` and every source it depends on, children first, caching each in
    the node (so deep graphs never recurse and shared subgraphs are computed once)."""
    found = root.__dict__.get(attr, _MISSING)
    if found is not _MISSING:
        return found  # type: ignore[no-any-return]
    stack = [root]
    while stack:
        node = stack[-1]
        fields = node.__dict__
        if attr in fields:
            stack.pop()
            continue
        ready = True
        for s in node.src:  # a plain loop: building a list of pending sources per node cost a quarter of the time
            if attr not in s.__dict__:
                stack.append(s)
                ready = False
        if ready:
            stack.pop()
            fields[attr] = compute(node)
    return root.__dict__[attr]  # type: ignore[no-any-return]


_MISSING: Final = object()
