"""Patterns over UOps: `UPat`, and the reference interpreter that matches one against a node.

A pattern constrains a node's op, dtype, arg and sources, and binds names to the nodes it matches; rules in a
`PatternMatcher` (rewrite.py) receive those names as keyword arguments. `upat_compile.py` turns each rule's pattern
into straight-line Python for speed; `UPat.match` here is the reference that compiled code must agree with.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any, Final

from plygrad.ir.dtype import ConstType, DType
from plygrad.ir.errors import RewriteError
from plygrad.ir.ops import GroupOp, Ops
from plygrad.ir.uop import UOp, arg_key

Store = dict[str, UOp]
RuleFn = Callable[..., UOp | None]

_ANY: Final = object()  # "arg not constrained" (None is a real argument value)
_NO_MATCH: Final[list[Store]] = []  # shared, never mutated: returned by every failed match
_ALL_OPS: Final = tuple(Ops)

# how a pattern matches its sources
_SRC_ANY, _SRC_ORDERED, _SRC_PERMUTED, _SRC_EACH = 0, 1, 2, 3


def _as_tuple(x: Any, kind: type) -> tuple[Any, ...] | None:
    if x is None:
        return None
    if isinstance(x, kind):
        return (x,)
    return tuple(x)


class UPat:
    """A pattern over UOps.

    `op`: an Ops, a tuple/set of Ops, or None (any op). `dtype`: a DType, a tuple/set of them, or None.
    `src`: None matches any sources; a tuple matches the sources in order; a *list* matches them in any order (for
    commutative ops); a single UPat must match every source. `arg`: None matches any argument, anything else must
    equal the node's argument as `arg_key` sees it (so 1, 1.0 and True differ). `name` binds the matched node;
    a name used twice in one pattern must bind the same node. `allow_any_len` lets a tuple/list match a prefix.
    """

    __slots__ = ("alternatives", "arg", "arg_key", "dtypes", "name", "ops", "src", "src_kind", "src_len",
                 "strict_len")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, *,
                 name: str | None = None, allow_any_len: bool = False) -> None:
        if name == "ctx":
            raise RewriteError("a UPat cannot be named 'ctx': that keyword passes the rewrite context to rules")
        ops = _as_tuple(op, Ops)
        self.ops: frozenset[Ops] | None = None if ops is None else frozenset(ops)
        dts = _as_tuple(dtype, DType)
        self.dtypes: frozenset[DType] | None = None if dts is None else frozenset(dts)
        self.arg = arg
        self.arg_key: Any = _ANY if arg is None else arg_key(arg)
        self.name = name
        self.alternatives: tuple[UPat, ...] | None = None
        self.strict_len = not allow_any_len
        self.src: tuple[tuple[UPat, ...], ...] | UPat | None
        if src is None:
            self.src_kind, self.src, self.src_len = _SRC_ANY, None, 0
        elif isinstance(src, UPat):
            self.src_kind, self.src, self.src_len = _SRC_EACH, src, 0
        elif isinstance(src, list):
            perms = {tuple(map(id, p)): p for p in itertools.permutations(src)}  # equal patterns: try once
            self.src_kind, self.src, self.src_len = _SRC_PERMUTED, tuple(perms.values()), len(src)
            if len(self.src) == 1:
                self.src_kind = _SRC_ORDERED
        elif isinstance(src, tuple):
            self.src_kind, self.src, self.src_len = _SRC_ORDERED, (src,), len(src)
        else:
            raise RewriteError(f"UPat src must be None, a tuple, a list or a UPat, not {type(src).__name__}")

    # ---- constructors ------------------------------------------------------------------------------------------
    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any node (of `dtype`, if given), bound as `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any CONST (of `dtype`, if given), bound as `name`."""
        return UPat(Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: ConstType) -> UPat:
        """The CONST holding exactly `value` (1, 1.0 and True are different constants)."""
        return UPat(Ops.CONST, dtype, arg=value)

    @staticmethod
    def any(*pats: UPat, name: str | None = None) -> UPat:
        """Matches what any of `pats` matches (all matches are tried in order)."""
        if not pats:
            raise RewriteError("UPat.any() needs at least one alternative")
        pat = UPat(name=name)
        pat.alternatives = pats
        op_sets = [p.ops for p in pats]
        pat.ops = None if any(s is None for s in op_sets) else frozenset().union(*op_sets)  # type: ignore[arg-type]
        return pat

    def named(self, name: str) -> UPat:
        """This pattern, binding its match as `name`."""
        if self.alternatives is not None:
            return UPat.any(*self.alternatives, name=name)
        pat = UPat(self.ops, self.dtypes, None, self.arg, name=name, allow_any_len=not self.strict_len)
        pat.src_kind, pat.src, pat.src_len = self.src_kind, self.src, self.src_len
        return pat

    # ---- operator overloads build patterns ---------------------------------------------------------------------
    def alu(self, op: Ops, *others: UPat | ConstType) -> UPat:
        """The pattern `op(self, *others)`; sources of a commutative op match in any order."""
        srcs = (self, *(o if isinstance(o, UPat) else UPat(Ops.CONST, arg=o) for o in others))
        return UPat(op, src=list(srcs) if op in GroupOp.Commutative else srcs)

    def _ralu(self, op: Ops, other: ConstType) -> UPat:
        return UPat(Ops.CONST, arg=other).alu(op, self)

    def __add__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.ADD, x)
    def __radd__(self, x: ConstType) -> UPat: return self._ralu(Ops.ADD, x)
    def __sub__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.SUB, x)
    def __rsub__(self, x: ConstType) -> UPat: return self._ralu(Ops.SUB, x)
    def __mul__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.MUL, x)
    def __rmul__(self, x: ConstType) -> UPat: return self._ralu(Ops.MUL, x)
    def __floordiv__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.IDIV, x)
    def __truediv__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.FDIV, x)
    def __mod__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.MOD, x)
    def __and__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.AND, x)
    def __or__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.OR, x)
    def __xor__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.XOR, x)
    def __lshift__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.SHL, x)
    def __rshift__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.SHR, x)
    def __neg__(self) -> UPat: return self.alu(Ops.NEG)
    def __lt__(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.CMPLT, x)
    def ne(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.CMPNE, x)
    def eq(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.CMPEQ, x)
    def maximum(self, x: UPat | ConstType) -> UPat: return self.alu(Ops.MAX, x)
    def where(self, x: UPat | ConstType, y: UPat | ConstType) -> UPat: return self.alu(Ops.WHERE, x, y)
    def cast(self, dtype: DType | None = None) -> UPat: return UPat(Ops.CAST, dtype, (self,))
    def bitcast(self, dtype: DType | None = None) -> UPat: return UPat(Ops.BITCAST, dtype, (self,))

    __hash__ = object.__hash__  # patterns are compared by identity (== is not overloaded)

    def __repr__(self) -> str:
        if self.alternatives is not None:
            return f"UPat.any({', '.join(map(repr, self.alternatives))})"
        ops = None if self.ops is None else sorted(o.name for o in self.ops)
        parts = [f"op={ops}"] if ops is not None else []
        if self.dtypes is not None:
            parts.append(f"dtype={sorted(self.dtypes, key=repr)}")
        if self.arg_key is not _ANY:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.src_kind != _SRC_ANY:
            parts.append(f"src={self.src!r}")
        return f"UPat({', '.join(parts)})"

    # ---- matching ----------------------------------------------------------------------------------------------
    def names(self) -> set[str]:
        """Every name this pattern binds (walked iteratively: patterns can be built by loops)."""
        found: set[str] = set()
        todo: list[UPat] = [self]
        while todo:
            pat = todo.pop()
            if pat.name is not None:
                found.add(pat.name)
            if pat.alternatives is not None:
                todo.extend(pat.alternatives)
            elif pat.src_kind == _SRC_EACH:
                todo.append(pat.src)  # type: ignore[arg-type]
            elif pat.src_kind != _SRC_ANY:
                todo.extend(pat.src[0])  # type: ignore[index]
        return found

    def match(self, uop: UOp, store: Store) -> list[Store]:
        """Every way this pattern matches `uop`, each as the bindings it makes (extending `store`).

        `store` may be extended in place: callers pass a copy wherever they will try another alternative.
        """
        if self.alternatives is not None:
            found: list[Store] = []
            for alt in self.alternatives:
                found.extend(alt.match(uop, dict(store)))
            if self.name is not None:
                found = [s for s in found if _bind(s, self.name, uop)]
            return found
        if (self.ops is not None and uop.op not in self.ops) or (self.dtypes is not None and uop.dtype not in
                                                                   self.dtypes):
            return _NO_MATCH
        if self.arg_key is not _ANY and uop._key[3] != self.arg_key:
            return _NO_MATCH
        name = self.name
        if name is not None:
            bound = store.get(name)
            if bound is None:
                store[name] = uop
            elif bound is not uop:
                return _NO_MATCH
        kind = self.src_kind
        if kind == _SRC_ANY:
            return [store]
        src = uop.src
        if kind == _SRC_EACH:
            stores = [store]
            each: UPat = self.src  # type: ignore[assignment]
            for s in src:
                stores = _match_all(each, s, stores)
                if not stores:
                    return _NO_MATCH
            return stores
        if len(src) != self.src_len if self.strict_len else len(src) < self.src_len:
            return _NO_MATCH
        options: tuple[tuple[UPat, ...], ...] = self.src  # type: ignore[assignment]
        if kind == _SRC_ORDERED:
            return _match_sources(options[0], src, store)
        found = []
        for option in options:
            found.extend(_match_sources(option, src, dict(store)))
        return found


def _bind(store: Store, name: str, uop: UOp) -> bool:
    bound = store.setdefault(name, uop)
    return bound is uop


def _match_all(pat: UPat, uop: UOp, stores: list[Store]) -> list[Store]:
    if len(stores) == 1:
        return pat.match(uop, stores[0])
    found: list[Store] = []
    for s in stores:
        found.extend(pat.match(uop, dict(s)))
    return found


def _match_sources(pats: tuple[UPat, ...], src: tuple[UOp, ...], store: Store) -> list[Store]:
    stores = [store]
    for pat, s in zip(pats, src, strict=False):
        stores = _match_all(pat, s, stores)
        if not stores:
            return _NO_MATCH
    return stores

