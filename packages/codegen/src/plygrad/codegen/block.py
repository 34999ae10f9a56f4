"""Cache blocking of a reduction: `Opt(BLOCK, axis, amount)` and the lowering it needs.

BLOCK splits the reduce axis `r` into `r_block*KC + r_inner`: `r_block` is a BLOCK loop around the kernel's output
loops (a new axis id), `r_inner` keeps the id and the REDUCE type, so every tile of rows reduces over K-block 0,
then K-block 1, ..., reusing each block's panel from the cache. Between blocks the running value lives in the
output: two gated stores (the partial, and the kernel's value in the last block), the epilogue moved inside the
second's IF by the linearizer. Each output sees the plain loop's updates in the plain order, so BLOCK never
changes a result. `lower_blocked` runs with the reduce lowering (reduce.py); `check_block` raises OptError where
the output cannot hold the partial value. docs/codegen.md §2.2, "BLOCK, exactly".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from plygrad.codegen.errors import CodegenError, OptError
from plygrad.codegen.scope import loop_scopes
from plygrad.ir import AddrSpace, AxisType, DType, Ops, Opt, PtrDType, Target, UOp, dtypes

BLOCKABLE: Final = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
_OUTSIDE_REDUCTIONS: Final = frozenset({AxisType.LOOP, AxisType.GLOBAL, AxisType.THREAD, AxisType.UPCAST,
                                        AxisType.BLOCK})


def _is_global_store(node: UOp) -> bool:
    ptr = node.src[0].dtype if node.op is Ops.STORE else None
    return isinstance(ptr, PtrDType) and ptr.addrspace is AddrSpace.GLOBAL


def check_block(kernel: UOp, r: UOp, opt: Opt, target: Target | None, name: str) -> None:
    """Raise OptError unless BLOCK on the REDUCE range `r` keeps every result (module docstring)."""
    where = f"kernel {name!r}: {opt}"
    if target is not None and target.has_local:
        raise OptError(f"{where}: BLOCK is cache blocking for CPU targets; on a target with workgroups use GROUP "
                       "or LOCAL")
    if opt.amount >= int(r.src[0].arg):
        raise OptError(f"{where}: a block of the whole axis (size {r.src[0].arg}) changes nothing; give a block "
                       "size that divides the axis and is smaller")
    reductions = [n for n in kernel.toposort if n.op is Ops.REDUCE and r in n.src[1:]]
    if len(reductions) != 1:
        raise OptError(f"{where}: axis {opt.axis} is the range of {len(reductions)} reductions; BLOCK needs "
                       "exactly one")
    red = reductions[0]
    if red.arg not in BLOCKABLE:
        raise OptError(f"{where}: the reduction is {red.arg}, BLOCK handles {sorted(o.name for o in BLOCKABLE)}")
    if any(s.arg[1] is AxisType.BLOCK for s in red.src[1:]):
        raise OptError(f"{where}: the reduction over axis {opt.axis} is already blocked; one BLOCK per reduction")
    loops = [s for s in red.src[1:] if s.arg[1] is AxisType.REDUCE]
    if min(loops, key=lambda s: int(s.arg[0])) is not r:
        raise OptError(f"{where}: axis {opt.axis} is not the reduction's outermost loop (axes "
                       f"{sorted(int(s.arg[0]) for s in loops)}): blocking it would reorder the accumulation; "
                       "block the outermost one")
    if any(s.arg[1] not in _OUTSIDE_REDUCTIONS for s in loop_scopes(kernel)[red]):
        raise OptError(f"{where}: the reduction runs inside another reduction's loop; only a reduction the "
                       "kernel stores can keep its partial value in the output")
    if any(n is not red and n.op is Ops.REDUCE and red in n.src[0].toposort for n in kernel.toposort):
        raise OptError(f"{where}: the reduction feeds another reduction, which would see partial values")
    stores = [n for n in kernel.toposort if _is_global_store(n) and red in n.src[1].toposort]
    if len(stores) != 1:
        raise OptError(f"{where}: {len(stores)} stores use the reduction; BLOCK keeps the partial value in the "
                       "one output it is stored to")
    index = stores[0].src[0]
    ptr = index.dtype
    assert isinstance(ptr, PtrDType)
    if ptr.base is not red.dtype:
        raise OptError(f"{where}: the output holds {ptr.base!r} but the reduction accumulates {red.dtype!r}; "
                       "a partial value must be stored exactly")
    buffer = index.src[0]
    if any((n.op is Ops.LOAD and n.src[0].op is Ops.INDEX and n.src[0].src[0] is buffer)
           or (n.op is Ops.STORE and n is not stores[0] and n.src[0].src[0] is buffer) for n in kernel.toposort):
        raise OptError(f"{where}: the kernel also reads or writes its output buffer elsewhere, where partial "
                       "values would be seen")


# ---- lowering -------------------------------------------------------------------------------------------------
# lowers one REDUCE (its BLOCK range removed) whose accumulator starts from start(identity) instead of the identity
LowerOne = Callable[[UOp, Callable[[UOp], UOp]], UOp]


def block_range(red: UOp) -> UOp | None:
    """The BLOCK range a REDUCE lists, if it is blocked."""
    found = [s for s in red.src[1:] if s.op is Ops.RANGE and s.arg[1] is AxisType.BLOCK]
    return found[0] if found else None


def _lane_of(value: UOp, red: UOp) -> int | None:
    """Which lane of the vector reduction `red` a store of `value` holds: None for all of it (a store of red's
    dtype), else the one lane its scalar value takes (GEP) of red or of vector ops on it (`red + bias`)."""
    if value.dtype == red.dtype:
        return None
    lanes = {int(n.arg[0]) for n in value.toposort
             if n.op is Ops.GEP and len(n.arg) == 1 and red in n.src[0].toposort}
    if len(lanes) != 1:
        raise CodegenError(f"a store of {value.dtype!r} reads {len(lanes)} lanes of a blocked {red.dtype!r} "
                           "reduction; BLOCK needs each store to hold all of it or one lane")
    return lanes.pop()


def _seed(index: UOp, dtype: DType, not_first: UOp) -> UOp:
    """The partial value the previous block stored at `index`: a load gated off in the first block (0 there)."""
    gate = not_first if len(index.src) == 2 else UOp(Ops.AND, dtypes.bool, (index.src[2], not_first))
    return UOp(Ops.LOAD, dtype, (index.replace(src=(index.src[0], index.src[1], gate)),))


def _partial_seed(red: UOp, stores: dict[int, UOp], lanes: dict[int, int | None], not_first: UOp) -> UOp:
    """The partial value of blocked reduction `red` that the previous block left in the output, read back from
    the stores that hold it (`lanes[i]`: the lane store i holds, None for all of it).

    Several stores can hold the same value: a reduction that does not depend on an UPCAST axis (a matmul's
    gradient against a broadcast, `ones @ w.T`, reads no row of its left operand) is one REDUCE node that every
    unrolled copy of that axis stores, all of it or the same lanes. Every such store writes the same partial in
    each block, so any one of them seeds the next block; the first is read."""
    whole = [i for i, lane in lanes.items() if lane is None]
    if whole:
        return _seed(stores[whole[0]].src[0], red.dtype, not_first)
    by_lane: dict[int, UOp] = {}
    for i, lane in lanes.items():
        assert lane is not None
        by_lane.setdefault(lane, stores[i])
    if sorted(by_lane) != list(range(red.dtype.count)):
        raise CodegenError(f"a blocked reduction of {red.dtype!r} is stored by {len(stores)} stores that hold "
                           f"lanes {sorted(by_lane)}, not every lane; BLOCK cannot keep its partial value")
    return UOp(Ops.VECTORIZE, red.dtype, tuple(_seed(by_lane[j].src[0], red.dtype.scalar(), not_first)
                                               for j in range(red.dtype.count)))


def lower_blocked(sink: UOp, lower_one: LowerOne) -> UOp | None:
    """`sink` with every blocked reduction lowered (module docstring), or None if it has none.

    Each store holding a blocked reduction `red` (or one lane of it) gets the BLOCK range as its outermost loop
    (its END lists it) and stores `value` in the last block and `partial` in the others (two gated stores; one
    store of `last ? value : partial` where the store holds more than one blocked reduction), where the
    accumulator of `red` starts from the seed: the partial value(s) at the store's own index(es), loaded where the
    block is not the first."""
    items = [(out, out.src[0] if out.op is Ops.END else out) for out in sink.src]
    users: dict[UOp, list[int]] = {}
    for i, (_, store) in enumerate(items):
        if store.op is Ops.STORE:
            for node in store.src[1].toposort:
                if node.op is Ops.REDUCE and block_range(node) is not None:
                    users.setdefault(node, []).append(i)
    if not users:
        return None
    new_items = list(sink.src)
    extra: list[UOp] = []
    uses = [i for where in users.values() for i in where]
    for red, where in users.items():
        kb = block_range(red)
        assert kb is not None
        not_first = UOp(Ops.CMPNE, dtypes.bool, (kb, UOp.const(dtypes.index, 0)))
        last = UOp(Ops.CMPEQ, dtypes.bool, (kb, UOp.const(dtypes.index, int(kb.src[0].arg) - 1)))
        lanes = {i: _lane_of(items[i][1].src[1], red) for i in where}
        seed = _partial_seed(red, {i: items[i][1] for i in where}, lanes, not_first)

        def start(identity: UOp, seed: UOp = seed, not_first: UOp = not_first, op: Ops = red.arg) -> UOp:
            # a gated load reads 0 in the first block: ADD's identity already (a scalar condition picks whole
            # vectors in C, `c ? a : b`, so MUL and MAX select between the seed and the identity)
            return seed if op is Ops.ADD else UOp(Ops.WHERE, seed.dtype, (not_first, seed, identity))

        lowered = lower_one(UOp(Ops.REDUCE, red.dtype, (red.src[0], *(s for s in red.src[1:] if s is not kb)),
                                red.arg), start)
        for i in where:
            out, store = items[i]
            lane = lanes[i]
            partial = lowered if lane is None else UOp(Ops.GEP, red.dtype.scalar(), (lowered,), (lane,))
            final = store.src[1].substitute({red: lowered})
            ranges = out.src[1:] if out.op is Ops.END else ()
            if final is not partial and uses.count(i) == 1:
                # the last block stores the value, the others the partial value: two gated stores, so that what
                # the value computes from the reduction (a bias, a GELU) runs in the last block only (the
                # linearizer moves what only a gated store uses into its IF), not in every block
                not_last = UOp(Ops.CMPNE, dtypes.bool, (kb, last.src[1]))
                extra.append(UOp(Ops.END, dtypes.void, (_gated_store(store, partial, not_last), kb, *ranges)))
                new_store = _gated_store(store, final, last)
            else:
                value = partial if final is partial else UOp(Ops.WHERE, final.dtype, (last, final, partial))
                new_store = store.replace(src=(store.src[0], value, *store.src[2:]))
            new_items[i] = UOp(Ops.END, dtypes.void, (new_store, kb, *ranges))
            items[i] = (new_items[i], new_store)
    return sink.replace(src=(*new_items, *extra))


def _gated_store(store: UOp, value: UOp, gate: UOp) -> UOp:
    """`store` of `value`, done only where `gate` (and the store's own gate, if it has one) holds."""
    index = store.src[0]
    if len(index.src) == 3:
        gate = UOp(Ops.AND, dtypes.bool, (index.src[2], gate))
    return store.replace(src=(index.replace(src=(index.src[0], index.src[1], gate)), value, *store.src[2:]))
