"""Gates the symbolic rules decided: an INDEX gate known true is dropped, a LOAD through a gate known false is 0,
and a store closed by a loop that runs zero times is dropped.

Padding shows up in kernels as gated INDEXes; after simplification (and after UPCAST substitutes constants) many
gates fold to a constant, and the renderer should not test a constant condition for every element.
"""

from __future__ import annotations

from typing import Final

from plygrad.codegen.selects import select_to_max
from plygrad.ir import DTypeKind, Ops, PatternMatcher, UOp, UPat, counter_bits, dtypes, symbolic


def drop_true_gate(idx: UOp) -> UOp | None:
    return idx.replace(src=idx.src[:2]) if idx.src[2].arg is True else None


def load_false_gate(ld: UOp, idx: UOp) -> UOp | None:
    if idx.src[2].arg is not False or len(ld.src) != 1:
        return None
    dtype = ld.dtype
    zero: bool | int | float = False if dtype is dtypes.bool else 0.0 if dtype.kind is DTypeKind.FLOAT else 0
    if dtype.count > 1:  # a vector load (vectorize.py): every lane is 0
        return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar(), zero),) * dtype.count)
    return UOp.const(dtype, zero)


def drop_empty_loops(sink: UOp) -> UOp | None:
    """A SINK without the stores whose END closes a loop of constant size 0: they never run. The symbolic rules
    give a RANGE of end 0 the bounds [0, 0] (uop.py), so its loop variable folds to 0 in the store's address; left in
    place, a store that no longer depends on the empty loop would be hoisted out of it (a GPU launch dimension)."""
    kept = tuple(s for s in sink.src if not (s.op is Ops.END and any(
        r.op is Ops.RANGE and r.src[0].op is Ops.CONST and r.src[0].arg <= 0 for r in s.src[1:])))
    return sink.replace(src=kept) if len(kept) != len(sink.src) else None


_gated = UPat(Ops.INDEX, src=(UPat(), UPat(), UPat(Ops.CONST)), name="idx")

gate_folding: Final = PatternMatcher([
    (_gated, drop_true_gate),
    (UPat(Ops.LOAD, src=(_gated,), name="ld", allow_any_len=True), load_false_gate),
    (UPat(Ops.SINK, name="sink"), drop_empty_loops),
], name="gate_folding")

# counter_bits: `arange` back to the loop variable, for gather.py (plygrad.ir.symbolic says why it is separate);
# select_to_max: relu's select as a MAX, which has a vector form (selects.py)
simplify_rules: Final = symbolic + counter_bits + gate_folding + select_to_max
