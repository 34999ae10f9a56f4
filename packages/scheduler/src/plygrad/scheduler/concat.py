"""Wide concatenations, recognized so each piece is written into its slice of one buffer.

A tensor graph has no concatenation op: the frontend (as tinygrad) spells `cat` as zero-PADding every piece to the
full length along one axis and adding the padded pieces (OR for bool). Fused as an ordinary expression, every
output element of a cat of n pieces evaluates n gated loads, and the kernel's source holds n branches: a cat of
1000 small tensors became one kernel that took the C compiler over a minute. Recognized here, the scheduler lowers
it as one STORE per piece over that piece's own loops, into its slice of the output (lowering.add_slice): each
element is computed once, no gates, and the pieces can be spread over several small kernels (schedule.py).

Only cats of at least CONCAT_MIN_PIECES pieces are treated this way: a narrow cat fused into its consumer as
gated loads saves a buffer and a kernel, which is worth more than the few extra branches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from plygrad.ir import Ops, UOp
from plygrad.ir.shape import is_symbolic

CONCAT_MIN_PIECES: Final = 16


@dataclass(frozen=True)
class Piece:
    """One piece of a concatenation: the tensor `value`, written at `start` (for `length` positions) along the
    concatenation axis, and the PAD node `pad` that places it there in the tensor graph."""

    start: int
    length: int
    value: UOp
    pad: UOp


@dataclass(frozen=True)
class Concat:
    """`node` is the concatenation of `pieces` (sorted by start, disjoint) along `axis`; positions no piece covers
    (`gaps`, as (start, length)) are zero. `joins` are the ADD/OR nodes that only serve to add the pieces up."""

    node: UOp
    axis: int
    pieces: tuple[Piece, ...]
    gaps: tuple[tuple[int, int], ...]
    joins: frozenset[UOp]


def _pad_axis(pad: UOp) -> int | None:
    """The one axis a PAD pads, or None when it pads none or several."""
    axes = [i for i, (before, after) in enumerate(pad.arg) if before or after]
    return axes[0] if len(axes) == 1 else None


def _length(value: UOp, axis: int) -> int:
    shape = value.shape
    assert shape is not None
    return shape[axis]


def find_concat(node: UOp, users: dict[UOp, list[UOp]], roots: set[UOp]) -> tuple[Concat | None, set[UOp]]:
    """`node` as a wide concatenation (or None), and the ADD/OR nodes walked to decide it.

    The ADD (or OR) tree above the pieces is followed through nodes of the same op and dtype that nothing else
    reads (a partial sum used elsewhere must be computed anyway, so the tree stops being a pure cat there); its
    leaves must all be PADs along one common axis whose padded-in intervals do not overlap.
    """
    if node.op not in (Ops.ADD, Ops.OR) or node.shape is None or is_symbolic(node.shape):
        return None, set()
    joins: set[UOp] = set()
    leaves: list[UOp] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        joinable = cur is node or (len(users[cur]) == 1 and cur not in roots)
        if cur.op is node.op and cur.dtype == node.dtype and joinable and cur not in joins:
            joins.add(cur)
            stack.extend(cur.src)
        else:
            leaves.append(cur)
    if len(leaves) < CONCAT_MIN_PIECES or any(leaf.op is not Ops.PAD for leaf in leaves):
        return None, joins
    axes = {_pad_axis(leaf) for leaf in leaves}
    if len(axes) != 1 or None in axes:
        return None, joins
    axis = axes.pop()
    assert axis is not None
    pieces = sorted((Piece(leaf.arg[axis][0], _length(leaf.src[0], axis), leaf.src[0], leaf) for leaf in leaves),
                    key=lambda p: p.start)
    gaps: list[tuple[int, int]] = []
    end = 0
    for piece in pieces:
        if piece.start < end:
            return None, joins  # overlapping pieces are a sum, not a concatenation
        if piece.start > end:
            gaps.append((end, piece.start - end))
        end = piece.start + piece.length
    if end < node.shape[axis]:
        gaps.append((end, node.shape[axis] - end))
    return Concat(node, axis, tuple(pieces), tuple(gaps), frozenset(joins)), joins
