"""Which tensors become kernels: the fusion rules (docs/scheduler.md explains them with examples).

A *root* is a tensor node that gets its own buffer and a kernel computing it; everything between roots is fused
into the kernel of the root that consumes it, as index math (movement ops) and inline expressions (ALU, CAST,
inline REDUCEs). The rules of the fusing scheduler:

1. The tensors of the SINK are roots (with RESHAPEs on top stripped: a reshaped row-major buffer is the same
   memory), unless one is already a contiguous buffer (a BUFFER, possibly RESHAPEd, or an ASSIGN into one): then
   the SINK just names that buffer.
2. CONTIGUOUS, ASSIGN and COPY are roots (a COPY's source too, unless it already is a contiguous buffer or is
   computed from constants alone: such a COPY only names the device to compute it on, and its kernel computes it).
3. Elementwise nodes are never roots on their own account: a node used by several consumers is recomputed in each
   (cheap, and it saves a round trip through memory).
4. A REDUCE is fused into the kernel of its consumer when the path up from it to that kernel's root is a chain of
   single-use elementwise ops (e.g. `x.sum(1, keepdim) * 2`): the consumer then loops over exactly the reduce's
   output shape, so the reduce runs once per output element. Otherwise (several users, a movement op above it such
   as the EXPAND of softmax's max, or another REDUCE above it) the REDUCE is a root. Producers of a REDUCE are
   always fused into it.

(Rule 5, several outputs in one kernel, is schedule.py's.)
6. A wide concatenation (concat.py: at least CONCAT_MIN_PIECES zero-PADded pieces added up) is a root, written
   piece by piece into its slices rather than as one expression with a branch per piece.
7. No kernel inlines more than KERNEL_NODE_BUDGET tensor nodes (budget.py): where a region would, the largest
   values it fuses become roots, so a long elementwise chain is cut into kernels of bounded size.

The `unfused` scheduler makes every node that computes something (not a BUFFER, CONST, variable or movement op)
a root: one kernel per op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from plygrad.ir import GroupOp, Ops, UOp
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET, split_oversized
from plygrad.scheduler.concat import Concat, find_concat

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


def named_devices(order: Sequence[UOp]) -> dict[UOp, str | None]:
    """Each node's device as the graph names it: a BUFFER's own, a COPY's target, else the device of its first
    source that has one; None for a node computed from constants alone (docs/ir.md §4.4)."""
    own: dict[UOp, str | None] = {}
    for node in order:
        if node.op is Ops.BUFFER:
            own[node] = node.arg.device
        elif node.op is Ops.COPY:
            own[node] = node.arg
        else:
            own[node] = next((d for d in (own[s] for s in node.src) if d is not None), None)
    return own


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


@dataclass
class FusionPlan:
    """What fusion decided: the roots in topological order, the wide concatenations among them, and the size of
    each node's fused region (budget.py; empty for the unfused scheduler)."""

    roots: list[UOp]
    concats: dict[UOp, Concat] = field(default_factory=dict)
    sizes: dict[UOp, int] = field(default_factory=dict)


def _find_concats(order: Sequence[UOp], users: dict[UOp, list[UOp]], roots: set[UOp]) -> dict[UOp, Concat]:
    """Rule 6, top-down so a cat is found at its top ADD; the ADDs below one are not tried again (which also keeps
    a long sum of non-pieces linear: its tree is walked once)."""
    concats: dict[UOp, Concat] = {}
    tried: set[UOp] = set()
    for node in reversed(order):
        if node.op not in (Ops.ADD, Ops.OR) or node in tried:
            continue
        concat, walked = find_concat(node, users, roots)
        tried |= walked
        if concat is not None:
            concats[node] = concat
            roots.add(node)
    return concats


def plan_fusion(sink: UOp, fuse: bool, budget: int = KERNEL_NODE_BUDGET) -> FusionPlan:
    """The nodes that get a kernel (rules 1-4, 6 and 7 above; one per computing op when not `fuse`)."""
    order = sink.toposort
    named = named_devices(order)
    roots: set[UOp] = set()
    for out in sink.src:
        if contiguous_buffer(out) is None:
            roots.add(strip_reshapes(out))  # a RESHAPE of a row-major buffer is the same memory
    for node in order:
        if node.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY):
            roots.add(node)
        if node.op is Ops.COPY and contiguous_buffer(node.src[0]) is None and named[node.src[0]] is not None:
            roots.add(strip_reshapes(node.src[0]))  # a constant-only source is computed by the COPY's own kernel
        if not fuse and node.op not in _LEAVES and node.op not in GroupOp.Movement and node.op is not Ops.SINK:
            roots.add(node)
    if not fuse:
        return FusionPlan([n for n in order if n in roots])
    users = users_of(order)
    concats = _find_concats(order, users, roots)
    # top-down, so a REDUCE's decision sees whether the REDUCEs above it became roots
    for node in reversed(order):
        if node.op is Ops.REDUCE and node not in roots and not _reduce_fuses_up(node, users, roots):
            roots.add(node)
    joins = frozenset().union(*(c.joins for c in concats.values()))
    sizes = split_oversized(order, roots, users, joins, budget)
    return FusionPlan([n for n in order if n in roots], concats, sizes)


def find_roots(sink: UOp, fuse: bool) -> list[UOp]:
    """The nodes that get a kernel, in topological order (sources first)."""
    return plan_fusion(sink, fuse).roots
