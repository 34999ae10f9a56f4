"""Tensor-graph clean-up before fusion, as a rule table: views that do nothing disappear, chains fold.

Fewer movement ops mean shorter index expressions and fewer places where fusion has to look through a view. Every
rule keeps the graph's meaning and shapes exactly.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.ir import Ops, PatternMatcher, UOp, UPat
from plygrad.ir.shape import is_symbolic
from plygrad.scheduler.allreduce import lower_collectives

_ANY = UPat.var("x")


def _identity_view(v: UOp, x: UOp) -> UOp | None:
    """RESHAPE/EXPAND to the same shape, PERMUTE in order, zero PAD, full SHRINK, FLIP of nothing: x itself."""
    shape = x.shape
    if shape is None:
        return None
    op, arg = v.op, v.arg
    same = ((op in (Ops.RESHAPE, Ops.EXPAND) and tuple(arg) == shape)
            or (op is Ops.PERMUTE and tuple(arg) == tuple(range(len(shape))))
            or (op is Ops.PAD and all(b == 0 and a == 0 for b, a in arg))
            or (op is Ops.SHRINK and all(s == 0 and e == n for (s, e), n in zip(arg, shape, strict=True)))
            or (op is Ops.FLIP and not any(arg)))
    return x if same else None


def _reshape_reshape(outer: UOp) -> UOp | None:
    """A RESHAPE of a RESHAPE reads the same row-major elements as one RESHAPE (the outer one's sizes, symbolic
    ones included: shape.py's prefix rule makes the chain and the single view read the same prefix)."""
    inner = outer.src[0]
    if inner.op is not Ops.RESHAPE:
        return None
    before, after = inner.src[0].shape, outer.shape
    if before is None or after is None or (not is_symbolic(after) and (is_symbolic(before)
                                                                       or math.prod(after) != math.prod(before))):
        return None  # a concrete view of a symbolic prefix: the inner view's sizes say which elements it reads
    return UOp(Ops.RESHAPE, outer.dtype, (inner.src[0], *outer.src[1:]), outer.arg)


def _contiguous_of_contiguous(outer: UOp, inner: UOp) -> UOp:
    return inner


cleanup: Final = PatternMatcher([
    (UPat((Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP), src=(_ANY,), name="v"),
     _identity_view),
    (UPat(Ops.RESHAPE, name="outer"), _reshape_reshape),
    (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.CONTIGUOUS, name="inner"),), name="outer"), _contiguous_of_contiguous),
], name="tensor_cleanup")

# the passes run on a tensor SINK before fusion, in this order: collectives become copies and ALU ops first
TENSOR_PASSES: Final[list[PatternMatcher]] = [lower_collectives, cleanup]
