"""Writes through views: where `t.assign(v)` writes when `t` is a view of a Buffer, and what the write means.

`t` is a chain of movement ops over a BUFFER (possibly over a pending ASSIGN into it: a later write into part of a
tensor whose whole write has not run). Two things are read off that chain:

- **the target.** A chain of RESHAPE, PERMUTE, SHRINK and FLIP is memory the ASSIGN can store through directly (one
  element written per element of `v`). A PAD in the chain (a strided slice `t[::3]` is a SHRINK of a PAD of a
  RESHAPE) is not: its padding is no memory. Then the write is done below the lowest such op, on a view that is
  writable, as the blend `where(covered, v', old)`, `v'` being `v` put back through the ops above (each undone:
  SHRINK by a PAD, PAD by a SHRINK, PERMUTE by its inverse, FLIP by itself) and `covered` a True mask put back the
  same way. An EXPAND in the chain makes several elements of `t` one memory location: refused, as PyTorch does.
- **the whole tensor after the write**, for autograd: the same blend on the buffer's base view (the RESHAPE right
  above the BUFFER, the node a realized tensor is), so gradients of anything read from the buffer afterwards reach
  `v` where it was written and the old contents elsewhere (PyTorch's CopySlices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.frontend.lazy import const_uop, movement, shape_of
from plygrad.ir import GroupOp, Ops, UOp, dtypes
from plygrad.ir.shape import dim_add, dim_sub, resolved_arg

_WRITABLE: Final = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP})


@dataclass(frozen=True)
class ViewChain:
    """`top` = `ops[0](ops[1](... ops[-1](base)))`: the movement ops from the viewed tensor down to `base`, a BUFFER
    or a pending ASSIGN into one."""

    top: UOp
    ops: tuple[UOp, ...]
    base: UOp


def view_chain(uop: UOp) -> ViewChain | None:
    """The chain of movement ops under `uop` down to a BUFFER or an ASSIGN, or None when there is none (a lazy
    graph: no memory to write). A top-level ASSIGN (a pending write into the same view) is looked through."""
    if uop.op is Ops.ASSIGN:
        uop = uop.src[0]
    ops: list[UOp] = []
    node = uop
    while node.op in GroupOp.Movement:
        ops.append(node)
        node = node.src[0]
    if node.op not in (Ops.BUFFER, Ops.ASSIGN):
        return None
    return ViewChain(uop, tuple(ops), node)


def is_movement_of_constant(uop: UOp) -> bool:
    """A constant broadcast (`Tensor.zeros(3)`): a tensor with nothing that another tensor could alias."""
    node = uop
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op is Ops.CONST


def unview(value: UOp, ops: Sequence[UOp]) -> tuple[UOp, UOp]:
    """`value` (of `ops[0]`'s shape) put back through `ops` (top to bottom) into the shape under the last one, and
    the bool mask of the elements it covers there."""
    covered = const_uop(dtypes.bool, True, shape_of(value))
    for node in ops:
        value, covered = _undo(node, value), _undo(node, covered)
    return value, covered


def _undo(node: UOp, x: UOp) -> UOp:
    """`x`, of `node`'s shape, put back into the shape of node's source: the inverse of one movement op, with zeros
    (False) where the op had selected nothing."""
    shape = shape_of(node.src[0])
    if node.op is Ops.RESHAPE:
        return movement(x, Ops.RESHAPE, shape) if shape_of(x) != shape else x
    if node.op is Ops.PERMUTE:
        return movement(x, Ops.PERMUTE, tuple(sorted(range(len(node.arg)), key=lambda i: node.arg[i])))
    if node.op is Ops.FLIP:
        return movement(x, Ops.FLIP, node.arg)
    arg = resolved_arg(node)  # symbolic bounds in place of their None entries
    if node.op is Ops.SHRINK:
        return movement(x, Ops.PAD, tuple((b, dim_sub(s, e)) for (b, e), s in zip(arg, shape, strict=True)))
    if node.op is Ops.PAD:  # what was written into the padding has no memory to go to
        return movement(x, Ops.SHRINK, tuple((b, dim_add(b, s)) for (b, _), s in zip(arg, shape, strict=True)))
    raise RuntimeError(f"assign: the tensor is an expanded view ({node.op.name}), in which several elements are one "
                       "memory location; write into the tensor it was expanded from, or clone() it first")


def split_writable(chain: ViewChain) -> tuple[tuple[UOp, ...], UOp]:
    """The ops above the lowest op that cannot be stored through (none when all can) and the writable view under
    them: the write goes to that view, as a blend when some ops are above it."""
    lowest = max((i for i, n in enumerate(chain.ops) if n.op not in _WRITABLE), default=-1)
    if lowest < 0:
        return (), chain.top
    below = chain.ops[lowest].src[0]
    return chain.ops[:lowest + 1], below


def base_view(chain: ViewChain, known: Callable[[UOp], bool]) -> tuple[tuple[UOp, ...], UOp] | None:
    """The ops above the buffer's base view and that view, through pending ASSIGNs into the buffer, or None when
    the chain has no RESHAPE (a bare BUFFER node). The base view is among the RESHAPEs right above the BUFFER (and
    the SHRINK of a buffer sized for symbolic maxima): the highest of them that is `known` (a version made by an
    earlier write, or a view autograd has a graph for), else the lowest (the view a realized tensor is)."""
    ops = list(chain.ops)
    node = chain.base
    while node.op is Ops.ASSIGN:  # a later write into part of a tensor whose own write is pending
        node = node.src[0]
        while node.op in GroupOp.Movement:
            ops.append(node)
            node = node.src[0]
    low = len(ops) - 1
    if low >= 0 and ops[low].op is Ops.SHRINK and ops[low].src[0].op is Ops.BUFFER:
        low -= 1
    high = low
    while high >= 0 and ops[high].op is Ops.RESHAPE:
        high -= 1
    run = range(high + 1, low + 1)
    if not run:
        return None
    found = next((i for i in run if known(ops[i])), run[-1])
    return tuple(ops[:found]), ops[found]


def new_version(base: UOp, avoid: UOp | None = None) -> UOp:
    """A node reading what `base` reads, but not `base`: the tensor after a write. Graphs built before the write keep
    `base` (and its gradient history), those built after read this node. Two RESHAPEs, (1, *shape) and back, as no
    other mark uses (gradient_marks.py): the scheduler folds them. Nodes are hash-consed, so the version made again
    over one base is the same node: `avoid` (the previous version over it) gets the (1, 1, *shape) form instead."""
    shape = shape_of(base)
    node = movement(movement(base, Ops.RESHAPE, (1, *shape)), Ops.RESHAPE, shape)
    if node is avoid:
        node = movement(movement(base, Ops.RESHAPE, (1, 1, *shape)), Ops.RESHAPE, shape)
    return node


def blend(value: UOp, ops: Sequence[UOp], old: UOp) -> UOp:
    """`old` with `value` written through `ops` (top to bottom, ending on old's shape): `where(covered, v', old)`."""
    values, covered = unview(value, ops)
    if shape_of(values) != shape_of(old):  # a view that only reshapes
        values = movement(values, Ops.RESHAPE, shape_of(old))
        covered = movement(covered, Ops.RESHAPE, shape_of(old))
    return UOp(Ops.WHERE, old.dtype, (covered, values, old))
