"""Rule 8: a value a reduction reads many times over is computed once, not once per read.

In `gelu(h) @ w` every `gelu(h)[i, k]` is read once per output column through an EXPAND; fused, it would be
computed once per read. Walking down from each REDUCE, the value under an EXPAND that repeats it `f` times becomes
a root when `f x cost > RECOMPUTE_BUDGET`, `cost` being one evaluation of its fused region (one per ALU op,
TRANSCENDENTAL_COST per transcendental, an inlined REDUCE its trip count times its body). Cheap repeats stay fused;
a REDUCE under the EXPAND is left to rule 4. docs/scheduler.md, "Fusion rules", rule 8.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.ir import GroupOp, Ops, UOp
from plygrad.ir.shape import max_shape

RECOMPUTE_BUDGET: Final = 4096  # operations one expanded value may cost over all its repeats before it is realized
TRANSCENDENTAL_COST: Final = 8  # a polynomial of a few terms, against one for + or *
_TRANSCENDENTAL: Final = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.POW})
_LEAVES: Final = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})


def _below_views(node: UOp) -> UOp:
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node


def _repeats(expand: UOp) -> int:
    before, after = expand.src[0].shape, expand.shape
    if before is None or after is None:
        return 1
    before, after = max_shape(before), max_shape(after)  # a symbolic size counts at its largest
    return math.prod(a // b for a, b in zip(after, before, strict=True) if b != a and b)


class _Costs:
    """The cost of one evaluation of each node's fused region (memoized; roots and leaves are a load: 0). Nodes that
    read no buffer cost nothing: they are index math (`arange`, masks from it) that codegen folds into the loops,
    and a gather's one-hot compare must stay in its kernel for codegen to turn it into a load."""

    def __init__(self, roots: set[UOp]) -> None:
        self.roots = roots
        self.known: dict[UOp, int] = {}
        self.reads: dict[UOp, bool] = {}

    def of(self, node: UOp) -> int:
        todo = [node]
        while todo:
            cur = todo[-1]
            if cur in self.known:
                todo.pop()
                continue
            if cur.op in _LEAVES or cur in self.roots:
                self.known[cur], self.reads[cur] = 0, cur.op is Ops.BUFFER or cur in self.roots
                todo.pop()
                continue
            missing = [s for s in cur.src if s not in self.known]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            inner = sum(self.known[s] for s in dict.fromkeys(cur.src))
            self.reads[cur] = any(self.reads[s] for s in cur.src)
            if not self.reads[cur]:
                self.known[cur] = 0
            elif cur.op is Ops.REDUCE:
                size = cur.src[0].shape and cur.shape and (math.prod(max_shape(cur.src[0].shape))
                                                           // max(math.prod(max_shape(cur.shape)), 1))
                self.known[cur] = (int(size or 1)) * (inner + 1)
            elif cur.op in _TRANSCENDENTAL:
                self.known[cur] = inner + TRANSCENDENTAL_COST
            elif cur.op in GroupOp.Movement:
                self.known[cur] = inner
            else:
                self.known[cur] = inner + 1
            self.known[cur] = min(self.known[cur], 1 << 40)
        return self.known[node]


def realize_repeated(order: list[UOp], roots: set[UOp]) -> set[UOp]:
    """The values to realize under rule 8 (module docstring), given the roots decided so far."""
    costs = _Costs(roots)
    found: set[UOp] = set()
    for reduce in (n for n in order if n.op is Ops.REDUCE):
        todo: list[tuple[UOp, int]] = [(reduce.src[0], 1)]
        seen: set[tuple[UOp, int]] = set()
        while todo:
            node, repeats = todo.pop()
            if (node, repeats) in seen or node.op in _LEAVES or node in roots or node in found:
                continue
            seen.add((node, repeats))
            if node.op is Ops.EXPAND:
                repeats *= _repeats(node)
                value = _below_views(node.src[0])
                if value.op is Ops.REDUCE:  # rule 4's to decide: repeated along inner loops it is computed once
                    continue
                if value.op not in _LEAVES and value not in roots and value not in found \
                        and repeats > 1 and repeats * costs.of(value) > RECOMPUTE_BUDGET:
                    found.add(value)
                    continue
            todo.extend((s, repeats) for s in node.src)
    return found
