"""Packed panels: on a CPU, a vector operand that inner loops reread is copied once into a contiguous local buffer.

A matmul's register tile rereads a panel of `b` once per tile of rows (tiles.py); rows a power of two apart share
a few L1 sets, so the panel never stays in the L1. This pass (before `transpose_gathers`, on targets without
workgroups) puts a pack loop just outside the loop that rereads the operand, copying what it reads into a
DEFINE_LOCAL buffer (contiguous, 64-byte aligned, private to each OpenMP thread where the pack runs inside the
thread loop), and reads it from there. Gathered operands are packed W steps at a time for transpose.py, or lane by
lane. Which operands qualify (PACK_BYTES per kernel) is in docs/codegen.md §2.2, step 7. The pack loop copies
exactly the elements the load would have read, so no result changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from plygrad.codegen.linearize import LoopNest
from plygrad.codegen.transpose import gather_blocks
from plygrad.codegen.vectorize import lane_stride
from plygrad.ir import AddrSpace, AxisType, DType, Ops, Target, UOp, dtypes

PACK_BYTES: Final = 64 * 1024  # per kernel and thread, on the stack: a panel of 256 reduce steps of 4 vectors of 64 B
DEFAULT_L1: Final = 32 * 1024  # where Target.cache_sizes is unknown


def packed_panel_bytes(target: Target) -> int:
    """How large a packed panel should be: two thirds of the L1 (the rest holds the other operand's rows and the
    outputs), at most PACK_BYTES. Matmul 1024 on a 48 KiB L1, one core: reduce blocks of 128 steps (32 KiB panels)
    137 GFLOP/s packed, 120 unpacked; blocks of 256 (64 KiB) 115 either way."""
    l1 = target.cache_sizes[0] if target.cache_sizes else DEFAULT_L1
    return min(PACK_BYTES, l1 * 2 // 3)


def _range_ids(node: UOp) -> set[UOp]:
    return {n for n in node.toposort if n.op is Ops.RANGE}


def _input_load(load: UOp, written: set[UOp]) -> bool:
    """An ungated LOAD of a kernel input that the kernel does not write."""
    if load.op is not Ops.LOAD or len(load.src) != 1:
        return False
    index = load.src[0]
    return (index.op is Ops.INDEX and len(index.src) == 2 and index.src[0].op is Ops.PARAM
            and index.src[0] not in written)


def _candidate(node: UOp, written: set[UOp]) -> bool:
    """A vector LOAD of an input, or a vector gathered lane by lane (VECTORIZE of distinct loads) from one input."""
    if node.dtype.count < 2:
        return False
    if node.op is Ops.LOAD:
        return _input_load(node, written)
    # not a broadcast (one load in every lane): the other operand's element, already one load per step
    return (node.op is Ops.VECTORIZE and all(_input_load(s, written) for s in node.src)
            and len({s.src[0].src[0] for s in node.src}) == 1 and len(set(node.src)) == len(node.src))


def _indices(node: UOp) -> list[UOp]:
    """The address expressions `node` reads: its own, or each lane's."""
    return [node.src[0].src[1]] if node.op is Ops.LOAD else [s.src[0].src[1] for s in node.src]


def _at(node: UOp, values: dict[UOp, UOp]) -> UOp:
    """`node` (a candidate) reading where its ranges take `values`."""
    def moved(load: UOp) -> UOp:
        index = load.src[0]
        return load.replace(src=(index.replace(src=(index.src[0], index.src[1].substitute(values))),))
    return moved(node) if node.op is Ops.LOAD else node.replace(src=tuple(moved(s) for s in node.src))


@dataclass
class _Packer:
    next_axis: int
    next_slot: int
    budget: int
    loops: dict[tuple[UOp, ...], list[UOp]] = field(default_factory=dict)

    def local(self, scalar: DType, elements: int) -> UOp:
        self.next_slot += 1
        return UOp(Ops.DEFINE_LOCAL, scalar.ptr(elements, AddrSpace.LOCAL), (), self.next_slot - 1)

    def copies(self, inner: list[UOp], step: int) -> list[UOp]:
        """Fresh ranges over `inner`'s sizes (the innermost one in steps of `step`), one set per inner loop nest:
        the V vectors of one panel share one pack loop."""
        key = (*inner, UOp.const(dtypes.index, step))
        if key not in self.loops:
            sizes = [int(r.src[0].arg) for r in inner]
            sizes[-1] //= step
            self.loops[key] = [UOp.range(n, self.next_axis + i, AxisType.LOOP) for i, n in enumerate(sizes)]
            self.next_axis += len(inner)
        return self.loops[key]

    def pack(self, node: UOp, inner: list[UOp], *, gathered: bool = False) -> UOp | None:
        """The read of `node` from a packed buffer over `inner`, or None where it does not fit the budget.
        `gathered`: a gathered vector that no register transpose takes may be packed lane by lane."""
        lanes = node.dtype.count
        elements = lanes
        for r in inner:
            elements *= int(r.src[0].arg)
        size = elements * node.dtype.scalar().itemsize
        if size > self.budget:
            return None
        last = inner[-1]
        # a gathered vector is packed only where its lanes each run contiguously along the innermost range: the pack
        # loop then takes `lanes` steps of it at a time, a lanes x lanes block with contiguous rows that transpose.py
        # loads as row vectors. Gathered lane by lane, a pack would cost what it saves (and the W unrolled copies of
        # a register transpose, tiles.py, are better left to transpose.py)
        step = lanes if node.op is Ops.VECTORIZE else 1
        if step > 1 and (int(last.src[0].arg) % step or any(lane_stride(i, last) != 1 for i in _indices(node))):
            if not gathered:
                return None
            step = 1
        self.budget -= size
        local = self.local(node.dtype.scalar(), elements)
        copies = self.copies(inner, step)
        ends = []
        for kk in range(step):
            position = [*copies[:-1], copies[-1] * step + kk] if step > 1 else copies
            write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, (local, _flat(position, inner, lanes))),
                                                 _at(node, dict(zip(inner, position, strict=True)))))
            ends.append(UOp(Ops.END, dtypes.void, (write, *copies)))
        return UOp(Ops.LOAD, node.dtype, (UOp(Ops.INDEX, local.dtype, (local, _flat(inner, inner, lanes))), *ends))


def pack_panels(sink: UOp, target: Target) -> UOp:
    """`sink` with every reread vector panel of an input read from a packed local buffer (module docstring)."""
    if target.has_local:
        return sink
    nodes = sink.toposort
    written = {n.src[0].src[0] for n in nodes if n.op is Ops.STORE and n.src[0].op is Ops.INDEX}
    candidates = [n for n in nodes if _candidate(n, written)]
    if not candidates:
        return sink
    nest = LoopNest(sink)
    threads = {n for n in nodes if n.op is Ops.RANGE and n.arg[1] is AxisType.THREAD}
    packer = _Packer(next_axis=1 + max((int(n.arg[0]) for n in nodes if n.op is Ops.RANGE), default=-1),
                     next_slot=1 + max((int(n.arg) for n in nodes if n.op is Ops.DEFINE_LOCAL), default=-1),
                     budget=PACK_BYTES)
    # the gathers a register transpose takes (transpose.py) are left to it, or packed W steps at a time
    transposed = {v for block in gather_blocks([n for n in candidates if n.op is Ops.VECTORIZE]) for v in block}
    mapping: dict[UOp, UOp] = {}
    for node in candidates:
        path = nest.path(node)
        needs = set().union(*(_range_ids(i) for i in _indices(node)))
        free = [i for i, r in enumerate(path) if r not in needs]
        if not free:
            continue
        reuse = free[-1]
        inner = [r for r in path[reuse + 1:] if r in needs]
        # the pack sits inside the loops its address needs; the loops between it and `inner` reread it
        packed_at = max((i for i in range(reuse) if path[i] in needs), default=-1)
        rereads = math.prod(int(path[i].src[0].arg) if path[i].src[0].op is Ops.CONST else 1
                            for i in free if i > packed_at)
        if (not inner or rereads < 2 or not any(r.arg[1] is AxisType.REDUCE for r in inner)
                or any(r.src[0].op is not Ops.CONST for r in inner)
                or not threads <= set(path[:reuse])):
            continue
        # a gather packed lane by lane costs a scalar load per lane once: it pays where it is reread once per lane
        lane_by_lane = node.op is Ops.VECTORIZE and node not in transposed and rereads >= node.dtype.count
        if (read := packer.pack(node, inner, gathered=lane_by_lane)) is not None:
            mapping[node] = read
    return sink.substitute(mapping) if mapping else sink


def _flat(values: list[UOp], ranges: list[UOp], lanes: int) -> UOp:
    """The row-major offset of `values` in a buffer with an axis per range of `ranges` (its size), times `lanes`."""
    offset = UOp.const(dtypes.index, 0)
    for value, r in zip(values, ranges, strict=True):
        offset = offset * int(r.src[0].arg) + value
    return offset * lanes
