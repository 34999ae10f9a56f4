"""Selects that are a MAX: `relu` as the frontend builds it, `(x <= 0).where(0, x)`, becomes `MAX(x, 0)`.

A comparison and a select have no vector form in C (vectorize.py keeps them as scalar lanes), while MAX does, so a
relu chain stored as vectors was taken apart lane by lane for the select alone. The rewrite gives the same value
for every x (docs/ir.md §5): x < c gives c either way, x == c gives c where MAX gives max(x, c) with equal values,
which is c unless the zeros differ in sign, NaN gives NaN (WHERE picks x, MAX propagates it), x > c gives x. The
one case that differs is c = -0.0 with x = +0.0 (the select gives -0.0, MAX +0.0), so a negative zero constant is
left alone. The gradient is not involved: autograd ran in the frontend, on the select.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.ir import DTypeKind, Ops, PatternMatcher, UOp, UPat


def _const_value(node: UOp) -> float | None:
    return float(node.arg) if node.op is Ops.CONST and node.dtype.count == 1 else None


def where_le_to_max(where: UOp) -> UOp | None:
    cond, then, other = where.src
    c = _const_value(then)
    if c is None or where.dtype.kind is not DTypeKind.FLOAT or math.isnan(c) or (c == 0 and math.copysign(1, c) < 0):
        return None
    if cond.op is not Ops.OR or {s.op for s in cond.src} != {Ops.CMPLT, Ops.CMPEQ}:
        return None
    if not all(s.src[0] is other and _const_value(s.src[1]) == c for s in cond.src):
        return None
    return other.alu(Ops.MAX, then)


select_to_max: Final = PatternMatcher([(UPat(Ops.WHERE, name="where"), where_le_to_max)], name="select_to_max")
