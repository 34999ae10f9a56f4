"""Which tensors become kernels: the fusion rules (docs/scheduler.md explains them with examples).

A *root* is a tensor node that gets its own buffer and a kernel computing it; everything between roots is fused
into the kernel of the root that consumes it, as index math (movement ops) and inline expressions (ALU, CAST,
inline REDUCEs). The rules of the fusing scheduler:

1. The tensors of the SINK are roots (with RESHAPEs on top stripped: a reshaped row-major buffer is the same
   memory), unless one is already a contiguous buffer (a BUFFER, possibly RESHAPEd, or an ASSIGN into one): then
   the SINK just names that buffer.
2. CONTIGUOUS, ASSIGN and COPY are roots (a COPY's source too, unless it already is a contiguous buffer).
3. Elementwise nodes are never roots on their own account: a node used by several consumers is recomputed in each
   (cheap, and it saves a round trip through memory).
4. A REDUCE is fused into the kernel of its consumer when the path up from it to that kernel's root is a chain of
   single-use elementwise ops (e.g. `x.sum(1, keepdim) * 2`): the consumer then loops over exactly the reduce's
   output shape, so the reduce runs once per output element. Otherwise (several users, a movement op above it such
   as the EXPAND of softmax's max, or another REDUCE above it) the REDUCE is a root. Producers of a REDUCE are
   always fused into it.

The `unfused` scheduler makes every node that computes something (not a BUFFER, CONST, variable or movement op)
a root: one kernel per op.
"""

from __future__ import annotations

from collections.abc import Sequence

from plygrad.ir import GroupOp, Ops, UOp

_LEAVES = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})


def strip_reshapes(node: UOp) -> UOp:
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    return node


def contiguous_buffer(node: UOp) -> UOp | None:
    """The BUFFER holding `node` in row-major order with nothing to compute, if there is one."""
    base = strip_reshapes(node)
    if base.op is Ops.BUFFER:
        return base
    if base.op is Ops.ASSIGN:
        target = strip_reshapes(base.src[0])
        if target.op is Ops.BUFFER:
            return target
    return None


def users_of(order: Sequence[UOp]) -> dict[UOp, list[UOp]]:
    """Each node's distinct consumers (the SINK not counted)."""
    users: dict[UOp, list[UOp]] = {n: [] for n in order}
    for node in order:
        if node.op is Ops.SINK:
            continue
        for s in dict.fromkeys(node.src):
            users[s].append(node)
    return users


def _reduce_fuses_up(reduce: UOp, users: dict[UOp, list[UOp]], roots: set[UOp]) -> bool:
    """Rule 4: does a chain of single-use elementwise ops lead from `reduce` to a kernel root?"""
    cur = reduce
    while True:
        if cur is not reduce and cur in roots:
            return True
        above = users[cur]
        if len(above) != 1:
            return False
        user = above[0]
        if user.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            return user.op is Ops.CONTIGUOUS or user.src[1] is cur
        if user.op not in GroupOp.Elementwise:
            return False
        cur = user


def find_roots(sink: UOp, fuse: bool) -> list[UOp]:
    """The nodes that get a kernel, in topological order (sources first)."""
    order = sink.toposort
    roots: set[UOp] = set()
    for out in sink.src:
        if contiguous_buffer(out) is None:
            roots.add(strip_reshapes(out))  # a RESHAPE of a row-major buffer is the same memory
    for node in order:
        if node.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY):
            roots.add(node)
        if node.op is Ops.COPY and contiguous_buffer(node.src[0]) is None:
            roots.add(strip_reshapes(node.src[0]))
        if not fuse and node.op not in _LEAVES and node.op not in GroupOp.Movement and node.op is not Ops.SINK:
            roots.add(node)
    if fuse:
        users = users_of(order)
        # top-down, so a REDUCE's decision sees whether the REDUCEs above it became roots
        for node in reversed(order):
            if node.op is Ops.REDUCE and node not in roots and not _reduce_fuses_up(node, users, roots):
                roots.add(node)
    return [n for n in order if n in roots]
