"""Gathered operands as register transposes: W vector loads and a W x W transpose instead of W*W scalar loads.

`a @ b.T` (nn.Linear's weight, attention's keys) reads `b` across its rows along the vector axis: each vector of a
register tile holds W elements a row apart, packed lane by lane (vectorize.py: a VECTORIZE of W scalar LOADs). With
the reduce axis UNROLLed by W (tiles.py), the W copies of one reduce step read a W x W block of `b` whose rows are
contiguous. This pass (after `lower_reduce`, which makes the copies) loads each row of the block as one vector and
gives copy kk the lanes `GEP(row_l, kk)` of the rows l: the block transposed. The C renderer turns such a set of
VECTORIZEs into a shuffle network (renderer/c_transpose.py); any other renderer reads them as lanes. Every value
is the one the scalar loads gave, from the same elements, so no result changes.

Addresses are compared exactly: an index expression built from ADD, MUL, constants and variables (RANGE,
DEFINE_VAR) is expanded into a polynomial (`polynomial`), and lane l of a copy must lie l*S past lane 0, copy kk kk
past copy 0, with everything else equal. Anything else (a gate, a division, a non-constant difference) is left as
it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from plygrad.codegen.vectorize import alu_vectors
from plygrad.ir import DType, Ops, Target, UOp, dtypes

Poly = dict[tuple[int, ...], int]  # sorted ids of the variables of a monomial -> its coefficient
_ATOMS: Final = frozenset({Ops.RANGE, Ops.DEFINE_VAR, Ops.SPECIAL})


def polynomial(expr: UOp, ids: dict[UOp, int], memo: dict[UOp, Poly | None]) -> Poly | None:
    """`expr` as a polynomial in its variables, or None if it is not one (division, a select, a load...)."""
    if expr in memo:
        return memo[expr]
    result: Poly | None = None
    if expr.op is Ops.CONST and type(expr.arg) is int:
        result = {(): int(expr.arg)} if expr.arg else {}
    elif expr.op in _ATOMS:
        result = {(ids.setdefault(expr, len(ids)),): 1}
    elif expr.op in (Ops.ADD, Ops.MUL) and expr.dtype is dtypes.index and len(expr.src) == 2:
        left, right = (polynomial(s, ids, memo) for s in expr.src)
        if left is not None and right is not None:
            result = _add(left, right) if expr.op is Ops.ADD else _mul(left, right)
    memo[expr] = result
    return result


def _add(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v}


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ka, va in a.items():
        for kb, vb in b.items():
            k = tuple(sorted(ka + kb))
            out[k] = out.get(k, 0) + va * vb
    return {k: v for k, v in out.items() if v}


def _constant_difference(a: Poly, b: Poly) -> int | None:
    """a - b when it is a constant, else None."""
    diff = _add(a, {k: -v for k, v in b.items()})
    if any(k for k in diff):
        return None
    return diff.get((), 0)


def _lane_loads(v: UOp) -> list[UOp] | None:
    """The scalar LOADs a VECTORIZE packs, if every lane is an ungated load of one buffer."""
    loads = list(v.src)
    if not all(s.op is Ops.LOAD and len(s.src) == 1 and s.src[0].op is Ops.INDEX and len(s.src[0].src) == 2
               for s in loads):
        return None
    params = {s.src[0].src[0] for s in loads}
    if len(params) != 1 or next(iter(params)).op is not Ops.PARAM:
        return None
    return loads


def gather_blocks(candidates: Sequence[UOp]) -> list[list[UOp]]:
    """Sets of W VECTORIZEs (in copy order kk = 0..W-1) that read one W x W block with contiguous rows."""
    ids: dict[UOp, int] = {}
    memo: dict[UOp, Poly | None] = {}
    groups: dict[tuple[UOp, DType, int, tuple[tuple[tuple[int, ...], int], ...]], dict[int, UOp]] = {}
    for v in candidates:
        loads = _lane_loads(v)
        if loads is None:
            continue
        polys = [polynomial(s.src[0].src[1], ids, memo) for s in loads]
        first = polys[0]
        if first is None or any(p is None for p in polys):
            continue
        steps = [_constant_difference(p, first) for p in polys if p is not None]
        stride = steps[1] if len(steps) > 1 else None
        if not stride or any(s != lane * stride for lane, s in enumerate(steps)):
            continue
        offset = first.get((), 0)
        shape = tuple(sorted((k, c) for k, c in first.items() if k))
        groups.setdefault((loads[0].src[0].src[0], v.dtype, stride, shape), {})[offset] = v
    found: list[list[UOp]] = []
    for (_, dtype, row_stride, _), by_offset in groups.items():
        width = dtype.count
        if abs(row_stride) < width:
            continue  # rows that overlap: the same element in two lanes of a block (left as gathers)
        taken: set[int] = set()
        for start in sorted(by_offset):
            block = [start + kk for kk in range(width)]
            if start not in taken and all(o in by_offset and o not in taken for o in block):
                found.append([by_offset[o] for o in block])
                taken.update(block)
    return found


def transpose_gathers(sink: UOp, target: Target) -> UOp:
    """`sink` with every W x W block of gathered lanes read as W row vectors and their transpose (module docstring)."""
    candidates = [n for n in sink.toposort if n.op is Ops.VECTORIZE and n.dtype.count >= 2
                  and alu_vectors(n.dtype.scalar(), n.dtype.count, target)]
    mapping: dict[UOp, UOp] = {}
    for block in gather_blocks(candidates):
        width = len(block)
        scalar = block[0].dtype.scalar()
        rows = []
        for lane in range(width):
            index = block[0].src[lane].src[0]  # lane l of copy 0: the first element of row l
            rows.append(UOp(Ops.LOAD, scalar.vec(width), (index,)))
        for kk, v in enumerate(block):
            mapping[v] = UOp(Ops.VECTORIZE, v.dtype, tuple(UOp(Ops.GEP, scalar, (row,), (kk,)) for row in rows))
    return sink.substitute(mapping) if mapping else sink
