"""Long float sums in stages, as graph nodes: the one builder that `Tensor.sum` and the gradients of broadcasts use.

A sum over more than SPLIT_ABOVE elements becomes sums of blocks of at most BLOCK terms, then a sum of the partials
(`rows_per_block` picks the block's shape so the next level is the last where it can), which keeps float32 error
small and gives the first kernel independent partials. docs/frontend-internals.md, "Blocked sums", says why.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.frontend import lazy
from plygrad.ir import Ops, UOp

SPLIT_ABOVE: Final = 1 << 14  # float sums over more elements than this are blocked


BLOCK: Final = 1 << 12  # terms one accumulator adds at most in a blocked sum


LANES: Final = 16  # a block of a float sum gives this many partials, each the sum of every LANES-th term


def rows_per_block(n: int) -> int:
    """Rows of LANES elements per block at a level of a blocked float sum over `n` elements: BLOCK/LANES, doubled
    (at most to BLOCK, so no partial adds more than BLOCK terms) while there would be more than BLOCK partials.
    The next level, often the last, is then one serial chain of at most BLOCK adds where it can be (a sum of 4096 x
    4096 floats: 4096 partials of 4096 terms, not 16384 of 1024; its finishing kernel took 17-19 us of a 1.5 ms
    call on the 2-core dev VM, a dependent add every 4 cycles) and at most SPLIT_ABOVE past that."""
    rows = BLOCK // LANES
    while rows < BLOCK and -(-n // (rows * LANES)) * LANES > BLOCK:
        rows *= 2
    return rows


def partials(n: int) -> int:
    """How many partial sums the first level of a blocked sum over `n` elements leaves, per output."""
    return -(-n // (rows_per_block(n) * LANES)) * LANES


def reshaped(node: UOp, shape: tuple[int, ...]) -> UOp:
    """`node` viewed as `shape` (itself when it has that shape already, as `reshape` returns a tensor)."""
    return node if node.shape == shape else lazy.movement(node, Ops.RESHAPE, shape)


def blocked_sum(node: UOp, axes: tuple[int, ...]) -> UOp:
    """The sum of `node` (a float tensor node whose reduced sizes are concrete) over `axes`, kept as size 1, in
    stages (module docstring): the reduced axes are moved last and flattened, padded with zeros to whole blocks,
    and summed block by block, level after level."""
    shape = node.shape
    assert shape is not None, "blocked_sum takes a tensor node"
    kept_axes = tuple(i for i in range(len(shape)) if i not in axes)
    kept_shape = tuple(shape[i] for i in kept_axes)
    n = math.prod(shape[a] for a in axes)
    order = (*kept_axes, *axes)
    if order != tuple(range(len(shape))):
        node = lazy.movement(node, Ops.PERMUTE, order)
    node = reshaped(node, (*kept_shape, n))
    while n > SPLIT_ABOVE:
        rows = rows_per_block(n)
        blocks = -(-n // (rows * LANES))
        padding = blocks * rows * LANES - n
        if padding:
            node = lazy.movement(node, Ops.PAD, ((0, 0),) * len(kept_shape) + ((0, padding),))
        node = reshaped(node, (*kept_shape, blocks, rows, LANES))
        node = UOp(Ops.REDUCE, node.dtype, (node,), (Ops.ADD, (len(kept_shape) + 1,)))
        n = blocks * LANES
        node = reshaped(node, (*kept_shape, n))
    node = UOp(Ops.REDUCE, node.dtype, (node,), (Ops.ADD, (len(kept_shape),)))
    return reshaped(node, tuple(1 if i in axes else d for i, d in enumerate(shape)))
