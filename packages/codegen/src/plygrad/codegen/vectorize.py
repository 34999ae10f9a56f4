"""Vector lanes: one UPCAST axis of a store becomes the lanes of vector values instead of k scalar copies.

`expand_upcast` (expand.py) hands each scalar copy of a store to `vectorize_store`, which rewrites its value graph
over the vector axis `u` (`vector_axis`). Every node becomes itself (it does not depend on `u`), a vector node of
`dtype.vec(k)` (a contiguous LOAD, a vector ALU op or math function, a vector REDUCE accumulator, lane masks), or
`Lanes`: the k scalar copies unrolling would make. Memory-only dtypes (a GPU's) are vectors only where memory is
touched, in pieces of the target's widths; where accesses must be aligned, only provably aligned ones are made
(alignment.py). Lane j computes what scalar copy j would, in the same order, so results are bit-identical to
unrolling. The rules, node by node: docs/codegen.md §2.1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from plygrad.codegen.alignment import divides
from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer import get_renderer
from plygrad.codegen.renderer.base import C_VECTOR_FORMS, VectorForms
from plygrad.ir import DType, Ops, PtrDType, Target, UOp, dtypes

# the dtypes whose values are IEEE ops in their own type in C (float16/bfloat16 compute in float and round after
# each op; integer vector arithmetic in C has no wrapping guarantee): others stay scalar lanes
VECTOR_DTYPES: Final = C_VECTOR_FORMS.alu
# ops with a vector form, each lane computing exactly the scalar op
VECTOR_OPS: Final = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX, Ops.RECIPROCAL})
# comparisons, their logic and selects: vectors of lane masks where the renderer has them (VectorForms.masks)
MASK_OPS: Final = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE})


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


@functools.cache
def _renderer_forms(renderer: str) -> VectorForms:
    try:
        return get_renderer(renderer).vector_forms
    except CodegenError:  # an unknown renderer: the render pass raises the error that names it and the known ones
        return C_VECTOR_FORMS


def vector_forms(target: Target) -> VectorForms:
    """What the target's renderer can do with vectors (looked up once per renderer name)."""
    return _renderer_forms(target.renderer)


def access_widths(dtype: DType, lanes: int, target: Target) -> list[int]:
    """The widths one vector access of `lanes` lanes of `dtype` may move, widest first (before alignment): `lanes`
    itself for a dtype with vector ops (a vector value is all of its lanes), any width of the target's dividing
    `lanes` for one whose vectors are memory-only; empty: scalar lanes."""
    forms = vector_forms(target)
    if dtype not in forms.memory:
        return []
    widths = target.vector_widths_for(dtype)
    if dtype in forms.alu:
        return [lanes] if lanes in widths else []
    return sorted((w for w in widths if lanes % w == 0), reverse=True)


def access_width(dtype: DType, lanes: int, first: UOp, target: Target) -> int:
    """The lanes each vector access moves, for `lanes` lanes of `dtype` from element index `first`: the widest of
    `access_widths` whose alignment is proven where the renderer needs it, else 1 (scalar lanes)."""
    aligned = vector_forms(target).aligned
    return next((w for w in access_widths(dtype, lanes, target) if not aligned or divides(w, first)), 1)


def alu_vectors(dtype: DType, width: int, target: Target) -> bool:
    """Whether an ALU op of `dtype` on `width` lanes may be one vector op."""
    return dtype in vector_forms(target).alu and width in target.vector_widths_for(dtype)


def contiguous_store(store: UOp, u: UOp, target: Target) -> bool:
    """A STORE through `INDEX(buf, idx[, gate])` that can take vectors over `u`: stride 1, a gate shared by every
    lane, a dtype with vectors of a width that fits the lanes."""
    index = store.src[0]
    ptr = index.dtype
    if store.op is not Ops.STORE or index.op is not Ops.INDEX or not isinstance(ptr, PtrDType):
        return False
    if len(index.src) == 3 and u in index.src[2].toposort:
        return False
    return bool(access_widths(ptr.base, int(u.src[0].arg), target)) and lane_stride(index.src[1], u) == 1


def vector_axis(store: UOp, upcast: list[UOp], target: Target) -> UOp | None:
    """The UPCAST range `store` is vectorized over: the innermost one it stores contiguously, if any. Else, for a
    reduction, the innermost one of a vector ALU width that its accumulated value depends on (a convolution tiled
    over output channels: tiles.py): vector accumulators, their lanes stored one by one at the end."""
    candidates = [u for u in upcast if contiguous_store(store, u, target)]
    if candidates:
        return max(candidates, key=lambda u: int(u.arg[0]))
    if store.op is not Ops.STORE or len(store.src) < 2:
        return None
    value = store.src[1]
    reduced = [n for n in value.toposort if n.op is Ops.REDUCE]
    candidates = [u for u in upcast if alu_vectors(value.dtype, int(u.src[0].arg), target)
                  and any(u in r.src[0].toposort for r in reduced)]
    return max(candidates, key=lambda u: int(u.arg[0])) if candidates else None


class Vectorizer:
    """Rewrites one store's graph over the lanes of `u` (see the module docstring)."""

    def __init__(self, u: UOp, target: Target) -> None:
        self.u = u
        self.width = int(u.src[0].arg)
        self.target = target
        self.forms = vector_forms(target)
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

    def pack(self, value: Value, first: int, width: int) -> UOp:
        """Lanes first .. first+width-1 of `value` as one vector of `width` lanes (a memory-only vector store's)."""
        if not isinstance(value, Lanes) and value.dtype.count == width and first == 0:
            return value
        lanes = tuple(self.lane(value, j) for j in range(first, first + width))
        return UOp(Ops.VECTORIZE, lanes[0].dtype.vec(width), lanes)

    def lanes(self, node: UOp) -> Lanes:
        """`node` computed per lane from its sources' lanes (what scalar unrolling gives). A source that does not
        depend on `u` is the same in every lane, also when its dtype is a vector (an accumulator vectorized over
        another axis): it is not taken apart by lane."""
        return Lanes(tuple(node.replace(src=tuple(self.lane(self.done[s], j) if self.depends(s) else s
                                                  for s in node.src))
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
            elif node.op in VECTOR_OPS or (node.op, node.dtype) in self.forms.math:
                self.done[node] = self.alu(node)
            elif node.op in MASK_OPS:
                self.done[node] = self.masked(node)
            else:
                self.done[node] = self.lanes(node)
        return self.done[root]

    def depends(self, node: UOp) -> bool:
        found = self.done[node]
        return isinstance(found, Lanes) or found is not node

    def load(self, node: UOp) -> Value:
        """One vector LOAD of every lane, or aligned pieces of them (lanes taken with GEP), or k scalar loads."""
        index = node.src[0]
        if (self.forms.lane_gates and len(node.src) == 1 and index.op is Ops.INDEX and len(index.src) == 3
                and self.depends(index.src[2]) and lane_stride(index.src[1], self.u) == 1
                and alu_vectors(node.dtype, self.width, self.target)):  # a gate per lane (VectorForms.lane_gates)
            gates = tuple(self.lane(self.done[index.src[2]], j) for j in range(self.width))
            first = index.replace(src=(index.src[0], self._at_lane(index.src[1], 0), *gates))
            return UOp(Ops.LOAD, node.dtype.vec(self.width), (first,))
        if not (len(node.src) == 1 and index.op is Ops.INDEX and lane_stride(index.src[1], self.u) == 1
                and (len(index.src) == 2 or not self.depends(index.src[2]))):
            return self.lanes(node)
        width = access_width(node.dtype, self.width, self._at_lane(index.src[1], 0), self.target)
        if width == 1:
            return self.lanes(node)
        pieces = [UOp(Ops.LOAD, node.dtype.vec(width), (self._index_at(index, first),))
                  for first in range(0, self.width, width)]
        if width == self.width:
            return pieces[0]
        return Lanes(tuple(UOp(Ops.GEP, node.dtype, (pieces[j // width],), (j % width,)) for j in range(self.width)))

    def masked(self, node: UOp) -> Value:
        """A comparison of `masks` dtype values as one vector of lane masks, AND/OR/XOR of mask vectors, and a
        WHERE selecting lanes by one (VectorForms.masks); each lane is the scalar op's result, so the bits do not
        change. Anything else (a mask from another dtype, a WHERE of a dtype without masks) stays lanes."""
        values = [self.done[s] for s in node.src]
        if not any(not isinstance(v, Lanes) and v.dtype.count > 1 for v in values):
            return self.lanes(node)
        if node.op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
            operand = node.src[0].dtype
            if operand is not node.src[1].dtype or not self._has_masks(operand):
                return self.lanes(node)
            return UOp(node.op, dtypes.bool.vec(self.width), tuple(self.vector(v) for v in values))
        if node.op is Ops.WHERE:
            if node.src[1].dtype is not node.dtype or node.src[2].dtype is not node.dtype \
                    or not self._has_masks(node.dtype) or not self._is_mask(values[0]):
                return self.lanes(node)
            return UOp(Ops.WHERE, node.dtype.vec(self.width), tuple(self.vector(v) for v in values))
        if node.dtype is dtypes.bool and all(self._is_mask(v) for v in values):  # AND OR XOR of masks
            return UOp(node.op, dtypes.bool.vec(self.width), tuple(self.vector(v) for v in values))
        return self.lanes(node)

    def _has_masks(self, dtype: DType) -> bool:
        return dtype in self.forms.masks and alu_vectors(dtype, self.width, self.target)

    def _is_mask(self, value: Value) -> bool:
        return not isinstance(value, Lanes) and value.dtype == dtypes.bool.vec(self.width)

    def alu(self, node: UOp) -> Value:
        values = [self.done[s] for s in node.src]
        has_vector = any(not isinstance(v, Lanes) and v.dtype.count > 1 for v in values)
        if not has_vector or not alu_vectors(node.dtype, self.width, self.target) \
                or any(s.dtype is not node.dtype for s in node.src):
            return self.lanes(node)
        return UOp(node.op, node.dtype.vec(self.width), tuple(self.vector(v) for v in values))

    def reduce(self, node: UOp) -> Value:
        value = self.done[node.src[0]]
        if node.arg not in VECTOR_OPS or not alu_vectors(node.dtype, self.width, self.target):
            return self.lanes(node)
        if isinstance(value, Lanes):  # gathered operands (`a @ b.T`): packed once, then vector ops and accumulator
            value = self.packed(node.src[0])
        if value.dtype.count == 1:
            return self.lanes(node)
        return UOp(Ops.REDUCE, node.dtype.vec(self.width), (value, *node.src[1:]), node.arg)

    def packed(self, node: UOp) -> UOp:
        """`node` as one vector: vector ops where it is one of VECTOR_OPS, its lanes packed (VECTORIZE) where it
        has no vector form. Lane j still computes scalar copy j's operations, so the bits do not change."""
        found = self.done[node]
        if isinstance(found, Lanes) and (node.op in VECTOR_OPS or (node.op, node.dtype) in self.forms.math) \
                and alu_vectors(node.dtype, self.width, self.target) \
                and all(s.dtype is node.dtype for s in node.src):
            return UOp(node.op, node.dtype.vec(self.width), tuple(self.packed(s) for s in node.src))
        return self.vector(found)

    def _at_lane(self, index: UOp, lane: int) -> UOp:
        return index.substitute({self.u: UOp.const(dtypes.index, lane)})

    def _index_at(self, index: UOp, lane: int) -> UOp:
        """`INDEX(buf, idx[, gate])` at lane `lane`: the first element of an access starting there."""
        return index.replace(src=(index.src[0], self._at_lane(index.src[1], lane), *index.src[2:]))

    def store(self, store: UOp) -> list[UOp]:
        """`store` as one vector STORE, as aligned pieces (memory-only vectors), or as k scalar STOREs."""
        index, value = store.src[0], self.visit(store.src[1])
        if contiguous_store(store, self.u, self.target):
            dtype = store.src[1].dtype
            width = access_width(dtype, self.width, self._at_lane(index.src[1], 0), self.target)
            if width == self.width and not isinstance(value, Lanes) and value.dtype.count > 1:
                return [store.replace(src=(self._index_at(index, 0), value, *store.src[2:]))]
            if width > 1 and dtype not in self.forms.alu:  # memory-only vectors: the scalar lanes packed
                return [store.replace(src=(self._index_at(index, first), self.pack(value, first, width),
                                           *store.src[2:]))
                        for first in range(0, self.width, width)]
        self.visit(index)
        return [store.replace(src=(self.lane(self.done[index], j), self.lane(value, j), *store.src[2:]))
                for j in range(self.width)]


def vectorize_store(store: UOp, u: UOp, target: Target) -> list[UOp]:
    """The stores replacing `store` once its UPCAST range `u` is vector lanes (one vector store, or k scalar)."""
    return Vectorizer(u, target).store(store)
