"""Interval analysis of UOps: `UOp.vmin/vmax`, bounds that hold for every value a node can take.

Each node's bounds come from its sources' (filled bottom-up and cached on the node by uop.py): constants and
variables are exact, integer ALU ops follow the interval rules below (covering the IR's defined results where C has
none: x / 0 = x % 0 = 0, out-of-range shifts), bools are decided where the sources decide them, and anything else
takes its dtype's whole range. On fixed-width integers a result that may wrap around gets the dtype's range; the
`index` dtype never wraps, so its interval arithmetic is exact.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from plygrad.ir.dtype import ConstType, DType, DTypeKind, dtypes
from plygrad.ir.ops import GroupOp, Ops
from plygrad.ir.scalar import _idiv

if TYPE_CHECKING:
    from plygrad.ir.uop import UOp

_DTYPE_BOUNDS: dict[DType, tuple[ConstType, ConstType]] = {}


def _dtype_bounds(dt: DType) -> tuple[ConstType, ConstType]:
    found = _DTYPE_BOUNDS.get(dt)
    if found is None:
        try:
            found = (dt.min, dt.max)
        except ValueError:  # void, pointers: no values to bound
            found = (-math.inf, math.inf)
        _DTYPE_BOUNDS[dt] = found
    return found


# Integer interval rules: op -> function of (node, *source bounds) giving the node's bounds before wraparound, or
# None where the op gives no useful bound. Each rule covers every value the op takes, including the defined results
# of what C leaves undefined (x / 0 = x % 0 = 0, out-of-range shifts give 0 or -1: scalar.exec_alu).
_IntBounds = tuple[int, int]


def _corners(fn: Callable[[int, int], int], x: _IntBounds, y: _IntBounds) -> _IntBounds:
    """Bounds of fn over a box where fn is monotone in each argument: its extremes are at the corners."""
    values = [fn(a, b) for a in x for b in y]
    return (min(values), max(values))


def _idiv_bounds(node: UOp, x: _IntBounds, y: _IntBounds) -> _IntBounds | None:
    if y[0] > 0 or y[1] < 0:  # trunc(x/y) is monotone in each argument when y keeps its sign
        return _corners(_idiv, x, y)
    if y[0] == y[1] == 0:  # x / 0 = 0
        return (0, 0)
    return (min(x[0], -x[1], 0), max(x[1], -x[0], 0))  # |x / y| <= |x| for y != 0, and x / 0 = 0


def _mod_bounds(node: UOp, x: _IntBounds, y: _IntBounds) -> _IntBounds | None:
    if y[0] == y[1] == 0:  # x % 0 = 0
        return (0, 0)
    m = max(abs(y[0]), abs(y[1])) - 1  # |x % y| < |y| and |x % y| <= |x| with x's sign for y != 0; x % 0 = 0
    return (0 if x[0] >= 0 else max(x[0], -m), 0 if x[1] <= 0 else min(x[1], m))


def _shift_bounds(node: UOp, x: _IntBounds, s: _IntBounds) -> _IntBounds | None:
    bits = node.dtype.scalar().bitsize
    lo, hi = max(s[0], 0), min(s[1], bits - 1)
    # an amount outside [0, bits) shifts every bit out: 0, or -1 for SHR of a negative value
    out: list[int] = []
    if s[0] < 0 or s[1] >= bits:
        out = [0, -1] if node.op is Ops.SHR and x[0] < 0 else [0]
    if lo > hi:
        return (min(out), max(out))
    # x << s and x >> s are monotone in x and in s (the direction in s follows x's sign)
    inner = _corners(operator.lshift if node.op is Ops.SHL else operator.rshift, x, (lo, hi))
    return (min(inner[0], *out), max(inner[1], *out)) if out else inner


def _bitwise_bounds(node: UOp, x: _IntBounds, y: _IntBounds) -> _IntBounds:
    """Bounds of x AND/OR/XOR y on two's-complement integers of any width."""
    op = node.op
    if x[0] >= 0 and y[0] >= 0:
        if op is Ops.AND:
            return (0, min(x[1], y[1]))
        top = (1 << max(x[1], y[1]).bit_length()) - 1
        return (0 if op is Ops.XOR else max(x[0], y[0]), top)
    if op is Ops.AND and (x[0] >= 0 or y[0] >= 0):  # masking with a non-negative value keeps it in [0, mask]
        return (0, x[1] if x[0] >= 0 else y[1])
    # both operands lie in [-2**k, 2**k - 1], and every bitwise op of two such values does too
    k = max((v if v >= 0 else ~v).bit_length() for v in (*x, *y))
    return (-(1 << k), (1 << k) - 1)


def _mulacc_bounds(node: UOp, x: _IntBounds, y: _IntBounds, z: _IntBounds) -> _IntBounds:
    product = _corners(operator.mul, x, y)
    return (product[0] + z[0], product[1] + z[1])


def _where_bounds(node: UOp, cond: _IntBounds, a: _IntBounds, b: _IntBounds) -> _IntBounds:
    if cond[0] == cond[1]:
        return a if cond[0] else b
    return (min(a[0], b[0]), max(a[1], b[1]))


_INT_RULES: Final[dict[Ops, Callable[..., _IntBounds | None]]] = {
    Ops.ADD: lambda node, x, y: (x[0] + y[0], x[1] + y[1]),
    Ops.SUB: lambda node, x, y: (x[0] - y[1], x[1] - y[0]),
    Ops.NEG: lambda node, x: (-x[1], -x[0]),
    Ops.MUL: lambda node, x, y: _corners(operator.mul, x, y),
    Ops.MULACC: _mulacc_bounds,
    Ops.MAX: lambda node, x, y: (max(x[0], y[0]), max(x[1], y[1])),
    Ops.IDIV: _idiv_bounds,
    Ops.MOD: _mod_bounds,
    Ops.WHERE: _where_bounds,
    Ops.AND: _bitwise_bounds, Ops.OR: _bitwise_bounds, Ops.XOR: _bitwise_bounds,
    Ops.SHL: _shift_bounds, Ops.SHR: _shift_bounds,
    Ops.CAST: lambda node, x: (int(x[0]), int(x[1])),  # wraparound into the new dtype is checked by _bounds
    Ops.BIND: lambda node, var, value: var,
    Ops.RANGE: lambda node, end: (0, max(0, end[1] - 1)),
    Ops.SPECIAL: lambda node, end: (0, max(0, end[1] - 1)),
}


def _int_bounds(node: UOp) -> _IntBounds | None:
    """Bounds of an integer-valued node from its sources' bounds, or None where nothing useful is known."""
    op = node.op
    if op is Ops.CONST:
        return (int(node.arg), int(node.arg))
    if op is Ops.DEFINE_VAR:
        return (int(node.arg[1]), int(node.arg[2]))
    rule = _INT_RULES.get(op)
    if rule is None:
        return None
    bounds = [s.__dict__["_bounds"] for s in node.src]  # sources are always done first (_fill_bottom_up)
    for lo, hi in bounds:
        if type(lo) is float or type(hi) is float:  # a float source (a CAST from float, or a malformed graph)
            return None
    return rule(node, *bounds)


def _bool_bounds(node: UOp) -> tuple[bool, bool] | None:
    op, src = node.op, node.src
    if op is Ops.CONST:
        return (bool(node.arg), bool(node.arg))
    bounds = [s.__dict__["_bounds"] for s in src]
    if op in GroupOp.Comparison:
        (alo, ahi), (blo, bhi) = bounds[0], bounds[1]
        if op is Ops.CMPLT:
            if ahi < blo:
                return (True, True)
            if alo >= bhi:
                return (False, False)
            return None
        disjoint = ahi < blo or bhi < alo
        same = alo == ahi == blo == bhi
        if op is Ops.CMPNE:
            return (True, True) if disjoint else (False, False) if same else None
        return (False, False) if disjoint else (True, True) if same else None
    if op in (Ops.AND, Ops.OR, Ops.XOR) and all(s.dtype.scalar() is dtypes.bool for s in src):
        a, b = (bool(bounds[0][0]), bool(bounds[0][1])), (bool(bounds[1][0]), bool(bounds[1][1]))
        if a[0] == a[1] and b[0] == b[1]:
            value = {Ops.AND: a[0] and b[0], Ops.OR: a[0] or b[0], Ops.XOR: a[0] != b[0]}[op]
            return (value, value)
        if op is Ops.AND and (not a[1] or not b[1]):
            return (False, False)
        if op is Ops.OR and (a[0] or b[0]):
            return (True, True)
        return None
    if op is Ops.WHERE:
        if bounds[0][0] == bounds[0][1]:
            chosen = bounds[1] if bounds[0][0] else bounds[2]
            return (bool(chosen[0]), bool(chosen[1]))
        return (bool(min(bounds[1][0], bounds[2][0])), bool(max(bounds[1][1], bounds[2][1])))
    return None


_INT_KINDS: Final = frozenset({DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX})


def node_bounds(node: UOp) -> tuple[ConstType, ConstType]:
    dt = node.dtype.scalar()
    kind = dt.kind
    if kind is DTypeKind.BOOL:
        found_bool = _bool_bounds(node)
        return found_bool if found_bool is not None else (False, True)
    if kind in _INT_KINDS:
        found = _int_bounds(node)
        if found is None:
            return _dtype_bounds(dt)
        if kind is DTypeKind.INDEX:  # the index type never wraps: interval arithmetic on it is exact
            return found
        lo, hi = _dtype_bounds(dt)
        if found[0] < lo or found[1] > hi:  # the value may wrap around: nothing is known
            return (lo, hi)
        return found
    if dt.kind is DTypeKind.FLOAT and node.op is Ops.CONST:
        return (node.arg, node.arg)
    return _dtype_bounds(dt)
