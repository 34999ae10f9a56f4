"""Vector lanes: one UPCAST axis of a store becomes the lanes of vector values instead of k scalar copies.

The "vector width" of a kernel is the amount of the UPCAST whose axis a store indexes contiguously (stride 1) when
that amount is one of `Target.vector_widths_for(dtype)`. `expand_upcast` (expand.py) unrolls every other UPCAST
axis into scalar copies as before and hands each copy to `vectorize_store`, which rewrites the store's value graph
over that axis `u` of k lanes. Every node gets one of three forms:

- the node itself, when it does not depend on `u` (shared by all lanes: a load of `a[i, r]` in a matmul);
- a vector node of dtype `dtype.vec(k)`: a contiguous LOAD (one unaligned vector load from the lane-0 address),
  an ALU op the renderer has as a vector op, a REDUCE over a vector value (a vector accumulator);
- `Lanes`: k scalar nodes, exactly the copies scalar unrolling would make (`u` replaced by 0..k-1). Anything
  without a vector form stays this way (strided or gated-by-lane loads, casts, comparisons, integers, float16).

An op becomes a vector op only when one of its operands already is a vector; its other operands are packed
(VECTORIZE of the lanes, or a broadcast of a shared scalar). A scalar use of a vector takes its lane with GEP. A
contiguous store of a vector value is one vector STORE, anything else k scalar stores. Lane j computes the same
operations on the same values as scalar copy j, in the same order, so results are bit-identical to unrolling.

In the lowered graph a vector LOAD/STORE is a LOAD whose dtype (or a STORE whose value's dtype) is a vector while
its INDEX is the scalar pointer at lane 0: k consecutive elements from there. Renderers must not assume alignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from plygrad.ir import DType, Ops, PtrDType, Target, UOp, dtypes

# the dtypes whose values are IEEE ops in their own type in every renderer (float16/bfloat16 compute in float and
# round after each op; integer vector arithmetic in C has no wrapping guarantee): others stay scalar lanes
VECTOR_DTYPES: Final = frozenset({dtypes.float32, dtypes.float64})
# ops with a vector form, each lane computing exactly the scalar op
VECTOR_OPS: Final = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX})


@dataclass(frozen=True)
class Lanes:
    """k scalar nodes, lane j being what scalar unrolling computes for u = j."""

    values: tuple[UOp, ...]


Value = UOp | Lanes


def lane_stride(index: UOp, u: UOp) -> int | None:
    """c when `index` is `c*u + (terms without u)`, else None (u under a division, modulo, product of ranges...).

    Only sums, differences and products by a constant are looked through: enough for the affine index math
    of views, and anything else just stays scalar lanes."""
    coefficient: dict[UOp, int | None] = {}
    for node in index.toposort:
        if node is u:
            coefficient[node] = 1
        elif not any(coefficient.get(s) != 0 for s in node.src):
            coefficient[node] = 0
        elif node.op in (Ops.ADD, Ops.SUB) and None not in (coefficient[node.src[0]], coefficient[node.src[1]]):
            a, b = coefficient[node.src[0]], coefficient[node.src[1]]
            assert a is not None and b is not None
            coefficient[node] = a + b if node.op is Ops.ADD else a - b
        elif node.op is Ops.MUL:
            coefficient[node] = _scaled(coefficient, node.src[0], node.src[1])
        else:
            coefficient[node] = None
    return coefficient[index]


def _scaled(coefficient: dict[UOp, int | None], a: UOp, b: UOp) -> int | None:
    for x, c in ((a, b), (b, a)):
        cx = coefficient[x]
        if coefficient[c] == 0 and c.op is Ops.CONST and cx is not None:
            return cx * int(c.arg)
    return None


def vectorizable(dtype: DType, width: int, target: Target) -> bool:
    return dtype in VECTOR_DTYPES and width in target.vector_widths_for(dtype)


def contiguous_store(store: UOp, u: UOp, target: Target) -> bool:
    """A STORE through `INDEX(buf, idx[, gate])` that can take a vector over `u`: stride 1, a gate shared by
    every lane, a vectorizable dtype and width."""
    index = store.src[0]
    ptr = index.dtype
    if store.op is not Ops.STORE or index.op is not Ops.INDEX or not isinstance(ptr, PtrDType):
        return False
    if len(index.src) == 3 and u in index.src[2].toposort:
        return False
    return vectorizable(ptr.base, int(u.src[0].arg), target) and lane_stride(index.src[1], u) == 1


def vector_axis(store: UOp, upcast: list[UOp], target: Target) -> UOp | None:
    """The UPCAST range `store` is vectorized over: the innermost one it stores contiguously, if any."""
    candidates = [u for u in upcast if contiguous_store(store, u, target)]
    return max(candidates, key=lambda u: int(u.arg[0])) if candidates else None


class Vectorizer:
    """Rewrites one store's graph over the lanes of `u` (see the module docstring)."""

    def __init__(self, u: UOp, target: Target) -> None:
        self.u = u
        self.width = int(u.src[0].arg)
        self.target = target
        self.done: dict[UOp, Value] = {}

    # ---- the three forms ---------------------------------------------------------------------------------------
    def lane(self, value: Value, j: int) -> UOp:
        if isinstance(value, Lanes):
            return value.values[j]
        if value.dtype.count == 1:
            return value
        if value.op is Ops.VECTORIZE:
            return value.src[j]
        return UOp(Ops.GEP, value.dtype.scalar(), (value,), (j,))

    def vector(self, value: Value) -> UOp:
        if isinstance(value, Lanes):
            scalar = value.values[0].dtype
            return UOp(Ops.VECTORIZE, scalar.vec(self.width), value.values)
        if value.dtype.count > 1:
            return value
        return UOp(Ops.VECTORIZE, value.dtype.vec(self.width), (value,) * self.width)

    def lanes(self, node: UOp) -> Lanes:
        """`node` computed per lane from its sources' lanes (what scalar unrolling gives)."""
        return Lanes(tuple(node.replace(src=tuple(self.lane(self.done[s], j) for s in node.src))
                           for j in range(self.width)))

    # ---- the rules ---------------------------------------------------------------------------------------------
    def visit(self, root: UOp) -> Value:
        for node in root.toposort:
            if node in self.done:
                continue
            if node is self.u:
                self.done[node] = Lanes(tuple(UOp.const(dtypes.index, j) for j in range(self.width)))
            elif not any(self.depends(s) for s in node.src):
                self.done[node] = node
            elif node.op is Ops.LOAD:
                self.done[node] = self.load(node)
            elif node.op is Ops.REDUCE:
                self.done[node] = self.reduce(node)
            elif node.op in VECTOR_OPS:
                self.done[node] = self.alu(node)
            else:
                self.done[node] = self.lanes(node)
        return self.done[root]

    def depends(self, node: UOp) -> bool:
        found = self.done[node]
        return isinstance(found, Lanes) or found is not node

    def load(self, node: UOp) -> Value:
        index = node.src[0]
        if (len(node.src) == 1 and index.op is Ops.INDEX and vectorizable(node.dtype, self.width, self.target)
                and lane_stride(index.src[1], self.u) == 1
                and (len(index.src) == 2 or not self.depends(index.src[2]))):
            first = index.replace(src=(index.src[0], self._lane0(index.src[1]), *index.src[2:]))
            return UOp(Ops.LOAD, node.dtype.vec(self.width), (first,))
        return self.lanes(node)

    def alu(self, node: UOp) -> Value:
        values = [self.done[s] for s in node.src]
        has_vector = any(not isinstance(v, Lanes) and v.dtype.count > 1 for v in values)
        if not has_vector or not vectorizable(node.dtype, self.width, self.target) \
                or any(s.dtype is not node.dtype for s in node.src):
            return self.lanes(node)
        return UOp(node.op, node.dtype.vec(self.width), tuple(self.vector(v) for v in values))

    def reduce(self, node: UOp) -> Value:
        value = self.done[node.src[0]]
        if isinstance(value, Lanes) or value.dtype.count == 1 or node.arg not in VECTOR_OPS:
            return self.lanes(node)
        return UOp(Ops.REDUCE, node.dtype.vec(self.width), (value, *node.src[1:]), node.arg)

    def _lane0(self, index: UOp) -> UOp:
        return index.substitute({self.u: UOp.const(dtypes.index, 0)})

    def store(self, store: UOp) -> list[UOp]:
        """`store` as one vector STORE or k scalar STOREs."""
        index, value = store.src[0], self.visit(store.src[1])
        if not isinstance(value, Lanes) and value.dtype.count > 1 and contiguous_store(store, self.u, self.target):
            first = index.replace(src=(index.src[0], self._lane0(index.src[1]), *index.src[2:]))
            return [store.replace(src=(first, value, *store.src[2:]))]
        self.visit(index)
        return [store.replace(src=(self.lane(self.done[index], j), self.lane(value, j), *store.src[2:]))
                for j in range(self.width)]


def vectorize_store(store: UOp, u: UOp, target: Target) -> list[UOp]:
    """The stores replacing `store` once its UPCAST range `u` is vector lanes (one vector store, or k scalar)."""
    return Vectorizer(u, target).store(store)
