"""REDUCEs lowered to accumulators, and reduce loops made each reduction's own. Two rule tables, run by lower.py:

- `unshare_ranges` (before the optimization stage): each reduce loop belongs to one reduction.
- `lower_reduce`: a REDUCE becomes a DEFINE_REG accumulator, initialised to the identity, updated in its loops, read
  after; UNROLL copies update it in the plain loop's order; a BLOCK split is lowered with its store (block.py); with
  `Target.has_fma` a float sum of products updates with MULACC (docs/ir.md §5). The linearizer's ordering is carried
  by extra sources (the init STORE lists the ranges open around the reduce, the in-loop LOAD the init STORE and the
  reduce loops, the final LOAD reads through an END). docs/codegen.md §1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from plygrad.codegen.block import block_range, lower_blocked
from plygrad.codegen.errors import CodegenError
from plygrad.codegen.expand import range_values
from plygrad.codegen.scope import loop_scopes
from plygrad.codegen.vectorize import Lanes, Vectorizer, alu_vectors, vector_forms
from plygrad.ir import (
    AddrSpace,
    AxisType,
    DType,
    Ops,
    PatternMatcher,
    Target,
    UOp,
    UPat,
    dtypes,
    graph_rewrite,
    reduce_identity,
)


def reduce_start(op: Ops, dtype: DType) -> UOp:
    """The value a reduction's accumulator starts from (plygrad.ir.reduce_identity), as a CONST."""
    try:
        return UOp.const(dtype, reduce_identity(op, dtype))
    except ValueError as exc:
        raise CodegenError(f"kernel REDUCE: {exc}") from exc


@dataclass
class RegSlots:
    """Hands out accumulator slots, one per lowered REDUCE; `target` (when known) lets an unrolled update compute
    its values as vector lanes (`_vector_lanes`)."""

    used: int = 0
    target: Target | None = None

    def take(self) -> int:
        self.used += 1
        return self.used - 1


def lower_one_reduce(ctx: RegSlots, red: UOp) -> UOp | None:
    """A REDUCE as an accumulator (module docstring); a blocked one waits for its store (`lower_blocked`)."""
    return None if block_range(red) is not None else accumulate(ctx, red)


def accumulate(ctx: RegSlots, red: UOp, start: Callable[[UOp], UOp] | None = None) -> UOp:
    """`red` lowered to an accumulator that starts from `start(identity)` (by default the identity itself)."""
    op: Ops = red.arg
    value, ranges = red.src[0], red.src[1:]
    # splitting an axis again makes the new inner part the more significant one (r = (o*k2 + u2)*k1 + u1), so
    # the highest axis id varies slowest: the updates then run in the plain loop's order
    unrolled = sorted((r for r in ranges if r.arg[1] is AxisType.UNROLL), key=lambda r: -int(r.arg[0]))
    loops = tuple(r for r in ranges if r.arg[1] is not AxisType.UNROLL)
    if op is Ops.MAX and unrolled and loops and start is None:
        in_lanes = _max_in_lanes(ctx, red, unrolled, loops)
        if in_lanes is not None:
            return in_lanes
    values = [value]
    if unrolled:
        # reductions nested in `value` are already accumulators: each unrolled copy of one that depends on the
        # unrolled ranges needs its own registers; one that does not (softmax's max under the unrolled sum of
        # exps) is the same computation in every copy and stays one accumulator, computed once
        regs = _regs_depending_on(value, set(unrolled))
        inner = unrolled[-1]  # the fastest-varying unrolled range
        lanes = None if regs or ctx.target is None else _vector_lanes(ctx.target, value, inner)
        values = []
        if lanes is not None:  # the other unrolled ranges as copies, the innermost as the lanes of each copy
            for mapping in range_values(unrolled[:-1]):
                values.extend(lanes(value.substitute(mapping)))
        else:
            for k, mapping in enumerate(range_values(unrolled)):
                if k > 0:
                    mapping.update({reg: UOp(Ops.DEFINE_REG, reg.dtype, (), ctx.take()) for reg in regs})
                values.append(value.substitute(mapping))
    identity = reduce_start(op, red.dtype.scalar())
    if red.dtype.count > 1:  # a vector accumulator (vectorize.py): every lane starts from the identity
        identity = UOp(Ops.VECTORIZE, red.dtype, (identity,) * red.dtype.count)
    if start is not None:
        identity = start(identity)
    if not loops:  # fully unrolled: a chain from the identity, exactly what the loop would compute
        result = identity
        for v in values:
            result = update(ctx.target, op, result, v)
        return result
    return _accumulate_values(ctx, red, identity, values, loops)


CONTRACTED: Final = frozenset({dtypes.float32, dtypes.float64})  # float dtypes whose MULACC is a hardware FMA


def update(target: Target | None, op: Ops, acc: UOp, value: UOp) -> UOp:
    """One step of a reduction: `acc op value`, or `MULACC(a, b, acc)` for a float32/float64 sum of products
    `a * b` on a target with a fused multiply-add (docs/ir.md §5, "Contraction"): one rounding instead of two,
    and one instruction where the product and the sum took two, which is what a matmul's inner loop is made of."""
    if (op is Ops.ADD and target is not None and target.has_fma and value.op is Ops.MUL
            and value.dtype.scalar() in CONTRACTED and value.dtype == acc.dtype):
        return UOp(Ops.MULACC, acc.dtype, (value.src[0], value.src[1], acc))
    return acc.alu(op, value)


def _max_in_lanes(ctx: RegSlots, red: UOp, unrolled: list[UOp], loops: tuple[UOp, ...]) -> UOp | None:
    """A MAX whose unrolled values are one vector computation over the innermost unrolled range: a vector
    accumulator of those lanes, updated once per copy of the other unrolled ranges, its lanes combined after the
    loops. MAX gives the same value in any order (docs/ir.md §5: NaN propagates, max(-0.0, 0.0) is 0.0 either
    way), so unlike a sum this changes no result. None where it does not apply (no target, nested accumulators
    depending on the unrolled ranges, a value whose lanes are not one vector)."""
    target, value, inner = ctx.target, red.src[0], unrolled[-1]
    width = int(inner.src[0].arg)
    if target is None or red.dtype.count != 1 or not alu_vectors(red.dtype, width, target) \
            or _regs_depending_on(value, set(unrolled)):
        return None
    vectors = []
    for mapping in range_values(unrolled[:-1]):
        vector = Vectorizer(inner, target).visit(value.substitute(mapping))
        if isinstance(vector, Lanes) or vector.dtype.count != width:
            return None
        vectors.append(vector)
    lanes = UOp(Ops.REDUCE, red.dtype.vec(width), (vectors[0], *loops), Ops.MAX)
    start = UOp(Ops.VECTORIZE, lanes.dtype, (reduce_start(Ops.MAX, red.dtype),) * width)
    total = _accumulate_values(ctx, lanes, start, vectors, loops)
    result = UOp(Ops.GEP, red.dtype, (total,), (0,))
    for j in range(1, width):
        result = result.alu(Ops.MAX, UOp(Ops.GEP, red.dtype, (total,), (j,)))
    return result


def _accumulate_values(ctx: RegSlots, red: UOp, identity: UOp, values: list[UOp], loops: tuple[UOp, ...]) -> UOp:
    """`red`'s accumulator: `identity` where the reduce lives, then updated with each of `values` in turn inside
    `loops`, read after them."""
    outer = loop_scopes(red)[red]
    reg = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, AddrSpace.REG), (), ctx.take())
    slot = UOp(Ops.INDEX, reg.dtype, (reg, UOp.const(dtypes.index, 0)))
    init = UOp(Ops.STORE, dtypes.void, (slot, identity, *sorted(outer, key=lambda r: int(r.arg[0]))))
    acc = UOp(Ops.LOAD, red.dtype, (slot, init, *loops))
    for v in values:
        acc = update(ctx.target, red.arg, acc, v)
    write = UOp(Ops.STORE, dtypes.void, (slot, acc))
    return UOp(Ops.LOAD, red.dtype, (slot, UOp(Ops.END, dtypes.void, (write, *loops))))


def _vector_lanes(target: Target, value: UOp, u: UOp) -> Callable[[UOp], list[UOp]] | None:
    """For an unrolled scalar update whose value calls a vector math op of the target's (`VectorForms.math`: C's
    float32 EXP2, the bulk of a softmax's sum of exponentials): a function giving a copy's k values as the lanes
    of one vector computation over `u`, taken out in lane order (GEP) for the scalar accumulator. Lane j computes
    exactly scalar copy j's operations (vectorize.py) and the updates keep their order, so the bits are those of
    the plain loop. None when the value has no such op or is not a scalar of a vector dtype of that width."""
    forms = vector_forms(target)
    width = int(u.src[0].arg)
    if value.dtype.count != 1 or not alu_vectors(value.dtype, width, target) \
            or not any((n.op, n.dtype) in forms.math for n in value.toposort):
        return None

    def lanes(copy: UOp) -> list[UOp]:
        vector = Vectorizer(u, target).visit(copy)
        if isinstance(vector, Lanes) or vector.dtype.count != width:
            return list(vector.values) if isinstance(vector, Lanes) else [vector] * width
        return [UOp(Ops.GEP, copy.dtype, (vector,), (j,)) for j in range(width)]

    return lanes


def _regs_depending_on(value: UOp, ranges: set[UOp]) -> list[UOp]:
    """The accumulator registers in `value` whose stores read any of `ranges` (sorted by slot)."""
    stores: dict[UOp, list[UOp]] = {}
    for node in value.toposort:
        if node.op is Ops.STORE and node.src[0].op is Ops.INDEX and node.src[0].src[0].op is Ops.DEFINE_REG:
            stores.setdefault(node.src[0].src[0], []).append(node)
    return sorted((reg for reg, sts in stores.items()
                   if any(not ranges.isdisjoint(st.toposort) for st in sts)), key=lambda n: int(n.arg))


def lower_blocked_sink(ctx: RegSlots, sink: UOp) -> UOp | None:
    """The reductions BLOCK split, lowered with their stores (block.py)."""
    return lower_blocked(sink, lambda red, start: accumulate(ctx, red, start))


lower_reduce: Final = PatternMatcher([(UPat(Ops.REDUCE, name="red"), lower_one_reduce),
                                      (UPat(Ops.SINK, name="sink"), lower_blocked_sink)], name="lower_reduce")


@dataclass
class RangeOwners:
    """Which REDUCE first claimed each reduce RANGE, and the next free axis id for fresh copies."""

    next_axis: int
    owner: dict[UOp, UOp]


def unshare_one_reduce(ctx: RangeOwners, red: UOp) -> UOp | None:
    """A REDUCE over a RANGE another REDUCE already loops over gets a fresh copy of that range: one loop cannot
    both finish a reduction and compute what a second reduction over it needs (mean, then variance)."""
    taken = [r for r in red.src[1:] if ctx.owner.get(r, red) is not red]
    if not taken:
        for r in red.src[1:]:
            ctx.owner.setdefault(r, red)
        return None
    fresh: dict[UOp, UOp] = {}
    for r in taken:
        fresh[r] = UOp.range(r.src[0], ctx.next_axis, r.arg[1])
        ctx.next_axis += 1
    value = _substitute_outside_reduces(red.src[0], fresh)
    new = UOp(Ops.REDUCE, red.dtype, (value, *(fresh.get(r, r) for r in red.src[1:])), red.arg)
    for r in new.src[1:]:
        ctx.owner[r] = new
    return new


unshare_ranges: Final = PatternMatcher([(UPat(Ops.REDUCE, name="red"), unshare_one_reduce)], name="unshare_ranges")


def unshare_reduce_ranges(kernel: UOp) -> UOp:
    """`kernel` with every reduce RANGE owned by one REDUCE (a no-op on kernels that already are)."""
    axes = [int(n.arg[0]) for n in kernel.toposort if n.op is Ops.RANGE]
    return graph_rewrite(kernel, unshare_ranges, ctx=RangeOwners(max(axes, default=-1) + 1, {}))


def _substitute_outside_reduces(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """`root` with the ranges of `mapping` replaced, except inside REDUCEs that loop over them (those ranges are
    the inner reduction's own, whatever they are called)."""
    new: dict[UOp, UOp] = {}
    for node in root.toposort:
        if node in mapping:
            new[node] = mapping[node]
        elif node.op is Ops.REDUCE and any(r in mapping for r in node.src[1:]):
            new[node] = node
        else:
            srcs = tuple(new.get(s, s) for s in node.src)
            new[node] = node if srcs == node.src else node.replace(src=srcs)
    return new[root]
