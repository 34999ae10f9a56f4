"""Which loops a value lives in: the RANGEs it depends on that are still open where it is computed.

A value depends on every RANGE reachable through its sources, except the ones a REDUCE (kernel form) or an END
(lowered form) has already closed. The linearizer places each value in the innermost loop it needs, which is what
hoists loop-invariant code; the reduce lowering uses the same rule to find where an accumulator is initialised.
"""

from __future__ import annotations

from plygrad.ir import Ops, UOp

_CLOSERS = (Ops.REDUCE, Ops.END)


def loop_scopes(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """Every node under `root` mapped to the set of RANGE nodes open around it (computed sources first)."""
    scopes: dict[UOp, frozenset[UOp]] = {}
    for node in root.toposort:
        if not node.src:
            scopes[node] = frozenset((node,)) if node.op is Ops.RANGE else frozenset()
            continue
        merged: frozenset[UOp] = frozenset().union(*(scopes[s] for s in node.src))
        if node.op is Ops.RANGE:
            merged = merged | {node}
        elif node.op in _CLOSERS:
            merged = merged - set(node.src[1:])
        scopes[node] = merged
    return scopes


def range_size(r: UOp) -> int:
    """The trip count of a RANGE for estimates: its constant end, or the largest value a symbolic end takes."""
    end = r.src[0]
    if end.op is Ops.CONST:
        return int(end.arg)
    return max(0, int(end.vmax))


def substitute_ranges(kernel: UOp, values: dict[UOp, UOp], lists: dict[UOp, tuple[UOp, ...]]) -> UOp:
    """`kernel` with each RANGE key of `values` replaced by its value where it is used as a value, and by the ranges
    of `lists` where a REDUCE or an END lists it (each range once per list): how merge.py and split.py change the
    loops of a kernel."""
    new: dict[UOp, UOp] = dict(values)
    for node in kernel.toposort:
        if node in new:
            continue
        if node.op in _CLOSERS and any(s in lists for s in node.src[1:]):
            ranges: list[UOp] = []
            for s in node.src[1:]:
                for r in lists.get(s, (new.get(s, s),)):
                    if r not in ranges:
                        ranges.append(r)
            src = (new.get(node.src[0], node.src[0]), *ranges)
        else:
            src = tuple(new.get(s, s) for s in node.src)
        if src != node.src:
            new[node] = node.replace(src=src)
    return new.get(kernel, kernel)
