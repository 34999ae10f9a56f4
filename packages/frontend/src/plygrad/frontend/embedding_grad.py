"""The gradient of an embedding lookup: a scatter-add of the gradient's rows into the table's, by sorting.

The IR has no scatter. Autograd through the lookup's one-hot selection would compare every looked-up row with every
table row for every column (n x vocab x embed work); this builds the same sums from a stable sort of the n ids
(an n x n count), a segmented scan of the sorted rows (log2 n steps of n x embed), and one gather per table row
(vocab x n to find where its ids end, vocab x embed to read the sum). docs/frontend-internals.md, "Embedding
gradients".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from plygrad.frontend import core, indexing
from plygrad.ir import UOp, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor


def rows_gradient(cls: type[Tensor], device: str, g: UOp, idx: UOp, vocab: int) -> UOp:
    """d loss / d weight of `weight[idx]` (`gather.embedding_rows`) given `g`, the gradient of its rows, of shape
    idx.shape + (embed,): row v of the result is the sum of the rows of `g` whose id is v (an id outside
    0..vocab-1 adds nothing), as torch's `embedding_backward` sums them. Built from Tensors of class `cls` on
    `device` (not from the table's Tensor, which a rule kept in autograd's registry would keep alive)."""
    grad = cls._make(g, device, requires_grad=False)
    ids = cls._make(idx, device, requires_grad=False)
    embed = grad.shape[-1]
    n = math.prod(ids.shape)
    wide = grad.dtype if grad.dtype.itemsize >= 4 else dtypes.float32  # half rows add up in float32
    if n == 0:
        return cls.zeros(vocab, embed, dtype=grad.dtype, device=device).uop
    ids = ids.reshape(n)._cast_to(indexing.index_dtype(ids.dtype))
    rows = grad.reshape(n, embed)._cast_to(wide)
    order = core.int_range(grad, n)
    # the stable sort's rank of id i: the ids below it, and the equal ones before it
    col, row = ids.reshape(n, 1), ids.reshape(1, n)
    earlier = order.reshape(1, n).lt(order.reshape(n, 1))
    rank = row.lt(col).logical_or(row.eq(col).logical_and(earlier)).cast(dtypes.int32).sum(1)
    # the inverse permutation: sorted position r holds the id i whose rank is r (exactly one)
    perm = indexing.one_hot_sum(rank.reshape(1, n).eq(order.reshape(n, 1)).where(order.reshape(1, n), 0), (1,))
    perm = perm.contiguous()
    sorted_ids, sums = ids[perm].contiguous(), rows[perm].contiguous()
    # segmented inclusive scan (Hillis-Steele): after the step of shift k each row holds the sum of the up to 2k
    # rows ending at it that share its id; equal ids are adjacent once sorted, so one comparison tells a segment
    shift = 1
    while shift < n:
        same = sorted_ids.pad(((shift, 0),))[:n].eq(sorted_ids)
        sums = sums.add(same.unsqueeze(1).where(sums.pad(((shift, 0), (0, 0)))[:n], 0.0)).contiguous()
        shift *= 2
    # row v's ids end at sorted position (#ids <= v) - 1; that row of the scan holds their sum
    table = core.int_range(grad, vocab)._cast_to(ids.dtype)
    last = row.le(table.reshape(vocab, 1)).cast(dtypes.int32).sum(1).sub(1)
    at = last.maximum(0).contiguous()
    found = last.ge(0).logical_and(sorted_ids[at].eq(table))
    return found.unsqueeze(1).where(sums[at], 0.0)._cast_to(grad.dtype).uop
