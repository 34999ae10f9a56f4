"""Unrolling UPCAST ranges: a store over UPCAST ranges becomes one store per value, or vector lanes on one
contiguous axis (vectorize.py). The `expand_upcast` table, run by lower.py; docs/codegen.md §1.
"""

from __future__ import annotations

import itertools
from typing import Final

from plygrad.codegen.vectorize import vector_axis, vectorize_store
from plygrad.ir import (
    AxisType,
    Ops,
    PatternMatcher,
    Target,
    UOp,
    UPat,
    dtypes,
)


def _axis_ranges(root: UOp, axis_type: AxisType) -> list[UOp]:
    found = {n for n in root.toposort if n.op is Ops.RANGE and n.arg[1] is axis_type}
    return sorted(found, key=lambda r: int(r.arg[0]))


def range_values(ranges: list[UOp]) -> list[dict[UOp, UOp]]:
    """Every assignment of constants to `ranges` (row-major: the last range varies fastest)."""
    sizes = [range(int(r.src[0].arg)) for r in ranges]
    return [{r: UOp.const(dtypes.index, v) for r, v in zip(ranges, values, strict=True)}
            for values in itertools.product(*sizes)]


def expand_sink(ctx: Target, sink: UOp) -> UOp | None:
    """Each store depending on UPCAST ranges becomes its copies: one per combination of the scalar UPCAST ranges'
    values, each a vector store over the vector axis (vectorize.py) when the store has one."""
    new_src: list[UOp] = []
    changed = False
    for out in sink.src:
        upcast = _axis_ranges(out, AxisType.UPCAST)
        if not upcast:
            new_src.append(out)
            continue
        changed = True
        body = out.src[0] if out.op is Ops.END else out
        kept = tuple(r for r in out.src[1:] if r not in upcast) if out.op is Ops.END else ()
        lanes = vector_axis(body, upcast, ctx)
        for mapping in range_values([r for r in upcast if r is not lanes]):
            copy = body.substitute(mapping)
            for store in ([copy] if lanes is None else vectorize_store(copy, lanes, ctx)):
                new_src.append(UOp(Ops.END, dtypes.void, (store, *kept)) if kept else store)
    return sink.replace(src=tuple(new_src)) if changed else None


expand_upcast: Final = PatternMatcher([(UPat(Ops.SINK, name="sink"), expand_sink)], name="expand_upcast")
