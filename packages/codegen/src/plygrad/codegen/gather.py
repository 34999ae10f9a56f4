"""Gathers become loads: a reduction that only picks the element whose position equals an index.

The frontend spells `x[idx]`, `gather`, `take_along_dim` and `Embedding` as one-hot selections,
`REDUCE(ADD, WHERE(idx == CAST(r), x(r), 0), r)`: correct for every index, but n loads per output. At most one term
is not zero, so this pass rewrites it exactly to `WHERE(valid, x(i), 0)` with `i = CAST(idx, index)` and every load
of `x` gated by `valid = (-1 < i) & (i < n)` (an out-of-range index reads nothing and gives 0; a picked -0.0 stays
-0.0). Conjunctions (`x[i, j]`) are handled one equality at a time. Only an integer index free of `r` compared
with `r` or an exact integer cast of it qualifies (a float comparison or a wrapping cast stays a reduction); it
runs after `simplify`, which folds `arange` back to CAST(r). docs/codegen.md §1.
"""

from __future__ import annotations

from typing import Final

from plygrad.ir import AxisType, DType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

_PICKING: Final = (Ops.ADD, Ops.MAX)  # sum of one term and zeros; max of one value and False (bool selections)


def _is_zero(x: UOp) -> bool:
    return x.op is Ops.CONST and x.arg == 0 and not (isinstance(x.arg, float) and str(x.arg) == "-0.0")


def _conjuncts(cond: UOp) -> list[UOp]:
    found, todo = [], [cond]
    while todo:
        node = todo.pop()
        if node.op is Ops.AND and node.dtype is dtypes.bool:
            todo.extend(node.src)
        else:
            found.append(node)
    return found


def _selection(value: UOp) -> tuple[list[UOp], UOp, UOp, DType | None] | None:
    """(conjuncts, picked value, zero, cast dtype) of `CAST?(WHERE(c1, WHERE(c2, x, 0), 0))`-shaped values."""
    cast = None
    if value.op is Ops.CAST:
        cast, value = value.dtype, value.src[0]
    conds: list[UOp] = []
    zero = None
    while value.op is Ops.WHERE and _is_zero(value.src[2]):
        conds.extend(_conjuncts(value.src[0]))
        zero = value.src[2]
        value = value.src[1]
    if zero is None:
        return None
    return conds, value, zero, cast


def _range_of(e: UOp, ranges: set[UOp]) -> UOp | None:
    """The REDUCE range `e` is, exactly: the range itself or an integer cast of it that holds all of its values."""
    if e in ranges:
        return e
    if e.op is Ops.CAST and e.src[0] in ranges and e.dtype.is_int:
        r = e.src[0]
        return r if r.src[0].op is Ops.CONST and int(r.src[0].arg) - 1 <= int(e.dtype.max) else None
    return None


def _index_equality(cond: UOp, ranges: set[UOp]) -> tuple[UOp, UOp] | None:
    """(range, index) when `cond` is `index == range` (either order) with an integer index free of that range."""
    if cond.op is not Ops.CMPEQ:
        return None
    for a, b in (cond.src, cond.src[::-1]):
        r = _range_of(b, ranges)
        if r is not None and (a.dtype.is_int or a.dtype is dtypes.index) and r not in a.toposort:
            return r, a
    return None


def _gate_loads(x: UOp, r: UOp, valid: UOp) -> UOp:
    """`x` with every LOAD whose address depends on `r` gated by `valid` too."""
    mapping: dict[UOp, UOp] = {}
    for node in x.toposort:
        if node.op is Ops.INDEX and r in node.src[1].toposort:
            gate = valid if len(node.src) == 2 else UOp(Ops.AND, dtypes.bool, (node.src[2], valid))
            mapping[node] = UOp(Ops.INDEX, node.dtype, (node.src[0], node.src[1], gate))
    return x.substitute(mapping) if mapping else x


def pick_to_load(red: UOp) -> UOp | None:
    if red.arg not in _PICKING:
        return None
    found = _selection(red.src[0])
    if found is None:
        return None
    conds, x, zero, cast = found
    if red.arg is Ops.MAX and (x.dtype is not dtypes.bool or cast is not None):
        return None  # max picks only for bool (False is the identity there)
    ranges = {r for r in red.src[1:] if r.arg[1] is AxisType.REDUCE and r.src[0].op is Ops.CONST}
    for i, cond in enumerate(conds):
        match = _index_equality(cond, ranges)
        if match is None:
            continue
        r, index = match
        size = int(r.src[0].arg)
        at = index if index.dtype is dtypes.index else index.cast(dtypes.index)
        valid = UOp(Ops.AND, dtypes.bool, (UOp.const(dtypes.index, -1) < at, at < UOp.const(dtypes.index, size)))
        rest = [c for j, c in enumerate(conds) if j != i]
        picked = _gate_loads(x, r, valid).substitute({r: at})
        rest = [c.substitute({r: at}) for c in rest]
        cond_all = valid
        for c in rest:
            cond_all = UOp(Ops.AND, dtypes.bool, (cond_all, c))
        # a picked value that is just the (now gated) load is already 0 where the index is out of range
        plain = not rest and picked.op is Ops.LOAD and len(picked.src[0].src) == 3 and picked.src[0].src[2] is valid
        value = picked if plain else UOp(Ops.WHERE, x.dtype, (cond_all, picked, zero))
        if cast is not None:
            value = value.cast(cast)
        others = tuple(s for s in red.src[1:] if s is not r)
        return UOp(Ops.REDUCE, red.dtype, (value, *others), red.arg) if others else value
    return None


gather_rules: Final = PatternMatcher([(UPat(Ops.REDUCE, name="red"), pick_to_load)], name="gather")


def gathers_to_loads(kernel: UOp) -> UOp:
    """`kernel` with every one-hot selection REDUCE rewritten as gated loads (module docstring)."""
    return graph_rewrite(kernel, gather_rules)
