"""Long float sums in stages, as graph nodes: the one builder that `Tensor.sum` and the gradients of broadcasts use.

A sum over more than SPLIT_ABOVE elements becomes sums of blocks, then a sum of those partial sums (again blocked
if there are many), so no accumulator ever adds more than BLOCK terms. A single running float32 sum stops growing
at 2^24 (adding 1.0 to 16777216.0 gives 16777216.0) and its rounding error grows with n; blocked, the error grows
like BLOCK * log_BLOCK(n) and 2^25 ones sum exactly. It also gives the first kernel independent partials per
block, which the CPU backend spreads over its cores and a GPU over its workgroups. A block is read as `rows` rows
of LANES consecutive elements and gives LANES partials, one per column (each adding `rows` terms): the first
kernel then loads whole rows as vectors into LANES vector-lane accumulators, walking memory in order, where one
partial per block would have made its vector lanes of 16 blocks each a row apart (a gather per vector). The
partials of all blocks go to the next level. `rows` is BLOCK/LANES, or more (up to BLOCK) where that keeps the
partials to BLOCK, or else to SPLIT_ABOVE, so the next level is the last (`rows_per_block`): a sum of 4096 x 4096
floats is then two kernels, not three (each a launch and a pass the call pays for), and the second a short one.
Every reduction kernel a scheduler or code generator makes from this graph keeps the property: it is in the graph.

The last block is padded with zeros (a PAD of the flattened reduced axes); the scheduler gates the loads of the
padding, so a length that is no multiple of a block (70000, a prime) reads nothing past its input.
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
