"""A size budget per kernel: where a fused region would grow past it, a tensor inside it becomes a root.

Fusion inlines every elementwise op between two roots, so a chain of n elementwise ops is one kernel whose source
grows with n, and the time a C compiler needs for one function grows faster than its length (a 2000-op chain took
half a minute to compile as one kernel). Capping the number of tensor nodes per kernel keeps every compile small
and the total cost linear in the graph, at the price of one intermediate buffer per cut.

The size of a region is the number of distinct tensor nodes (ALU, CAST, REDUCE, movement ops and the buffers it
loads; constants and variables are free) that its kernel inlines: a node shared by two paths is counted once, as
the kernel computes it once. Regions are built in topological order, each as its own node plus the regions of its
fused sources; a root contributes only itself (a load). Where a region passes the budget, its largest fused
sources become roots (under their movement ops, so a view is never materialized in place of the value it views)
until it fits. Each region is bounded by the budget, so the pass costs O(nodes x budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from plygrad.ir import GroupOp, Ops, UOp

# Tensor nodes per kernel. A kernel this size compiles in a few tenths of a second; beyond a few thousand nodes the
# C compiler's time per node climbs steeply. Normal models never come near it: their reductions, contiguous() calls
# and outputs cut regions long before.
KERNEL_NODE_BUDGET: Final = 400

_FREE: Final = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.SINK})
_LEAVES: Final = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})


def _cut_point(src: UOp, roots: set[UOp]) -> UOp | None:
    """The node to realize so that `src` is read from memory: the value under its movement ops, unless that is a
    leaf or a root already."""
    node = src
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return None if node.op in _LEAVES or node in roots else node


class _Regions:
    """The fused region of every node processed so far (freed once all its users are done), and its size."""

    def __init__(self, order: Sequence[UOp], users: dict[UOp, list[UOp]], roots: set[UOp]) -> None:
        self.roots = roots
        self.full: dict[UOp, frozenset[UOp]] = {}
        self.sizes: dict[UOp, int] = {}
        self.pending_users = {n: len(users[n]) for n in order}

    def exposed(self, node: UOp) -> frozenset[UOp]:
        """What `node` adds to the region of a consumer: itself when it is a root (a load), else its region."""
        if node.op in _FREE:
            return frozenset()
        if node in self.roots or node.op is Ops.BUFFER:
            return frozenset((node,))
        return self.full[node]

    def union(self, node: UOp) -> frozenset[UOp]:
        region = {node}
        for s in dict.fromkeys(node.src):
            region.update(self.exposed(s))
        return frozenset(region)

    def record(self, node: UOp, region: frozenset[UOp]) -> None:
        self.full[node], self.sizes[node] = region, len(region)

    def done_with_sources(self, node: UOp) -> None:
        for s in dict.fromkeys(node.src):
            if s in self.pending_users:
                self.pending_users[s] -= 1
                if self.pending_users[s] == 0:
                    self.full.pop(s, None)

    def cut(self, src: UOp) -> bool:
        """Make the value under `src` a root and shrink the regions of the movement ops between them."""
        point = _cut_point(src, self.roots)
        if point is None:
            return False
        self.roots.add(point)
        chain: list[UOp] = []
        node = src
        while node is not point:
            chain.append(node)
            node = node.src[0]
        for view in reversed(chain):
            self.record(view, self.union(view))
        return True


def split_oversized(order: Sequence[UOp], roots: set[UOp], users: dict[UOp, list[UOp]],
                    skip: frozenset[UOp] = frozenset(), budget: int = KERNEL_NODE_BUDGET) -> dict[UOp, int]:
    """Add roots (to `roots`, in place) until no kernel's fused region has more than `budget` nodes.

    `skip` are nodes that no kernel inlines as an expression (the ADDs joining a concatenation's pieces, its top
    included: the pieces are written slice by slice instead, and packed into kernels by their own sizes). Returns
    the size of each node's own region, for callers that pack several regions into one kernel (the pieces of a
    concatenation, grouped outputs).
    """
    regions = _Regions(order, users, roots)
    for node in order:
        if node.op in _FREE or node.op is Ops.BUFFER:
            continue
        if node in skip:
            regions.done_with_sources(node)
            continue
        region = regions.union(node)
        if len(region) > budget:
            fused = [s for s in dict.fromkeys(node.src) if len(regions.exposed(s)) > 1]
            for src in sorted(fused, key=lambda s: -len(regions.exposed(s))):
                if regions.cut(src):
                    region = regions.union(node)
                    if len(region) <= budget:
                        break
        regions.record(node, region)
        regions.done_with_sources(node)
    return regions.sizes

