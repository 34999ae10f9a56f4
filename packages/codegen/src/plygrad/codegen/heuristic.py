"""The default choice of optimizations (a search such as BEAM can replace it by calling `apply_opts` itself).

`choose_opts` applies rules of thumb for CPU targets, cheapest first, each justified by what the C compiler does
with the result: UNROLL the innermost reduce axis (by the vector width where rows are lanes), UNROLL short nested
reductions into independent chains, UPCAST the innermost output axis by a vector width, a register tile for
matmul-shaped kernels (tiles.py), else UPCAST into several accumulator chains, no UPCAST for large scalar bodies
(SCALAR_COPIES_MAX), and THREAD when the work pays for OpenMP's start-up. Targets with workgroups take
`choose_gpu_opts`: tensor cores first, GROUP for long reductions or contiguous rows, aligned vector UPCASTs, 4 rows
per thread for matmuls, then LOCAL threads. When each rule fires: docs/codegen.md §2, the "heuristic picks it
when" column.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.codegen.alignment import divides
from plygrad.codegen.gpu import shared_output_ranges
from plygrad.codegen.opts import kernel_ranges
from plygrad.codegen.renderer.base import C_VECTOR_FORMS
from plygrad.codegen.scope import loop_scopes
from plygrad.codegen.tensor_core import choose_tensor_core_opts
from plygrad.codegen.tiles import register_tile
from plygrad.codegen.vectorize import MASK_OPS, VECTOR_DTYPES, VECTOR_OPS, lane_stride, vector_forms
from plygrad.ir import AxisType, GroupOp, Ops, Opt, OptOps, PtrDType, Target, UOp, dtypes

FULL_UNROLL_MAX: Final = 8
UPCAST_AMOUNT: Final = 4
ODD_UPCASTS: Final = (7, 5, 3)  # for a reduction's innermost output axis that 4 does not divide (_upcast_amount)
NESTED_CHAIN_MAX: Final = 64  # iterations of an inner reduction short enough to copy (_nested_chains)
ACCUMULATOR_CHAINS: Final = 16  # scalar accumulators of a reduction's UPCASTs on axes without vectors
BLOCK_ROWS: Final = 4  # rows of a register tile: 4 vector accumulators fit the 16 registers of AVX2 or NEON
THREAD_MIN_WORK: Final = 1 << 15  # loop iterations below which starting an OpenMP team costs more than it saves
GROUP_MIN_REDUCE: Final = 256  # reductions shorter than this are cheap enough serially in one thread
GROUP_MAX_OUTPUTS: Final = 1024  # fewer outputs than this leave most of a GPU idle without GROUP
GROUP_THREADS: Final = 256
LOCAL_THREADS: Final = 256
SCALAR_COPIES_MAX: Final = 256  # scalar op copies an UPCAST may make (a 500-op relu chain took 3 s to compile)
GPU_VECTOR_BYTES: Final = 16  # the widest access of a GPU thread (ld.global.v4.b32): wider UPCASTs only add registers


def scalar_ops(kernel: UOp) -> int:
    """The value ops of `kernel` that an UPCAST would copy per lane (no vector form in C: vectorize.py); index math
    is not counted."""
    return sum(1 for n in kernel.toposort
               if n.op in GroupOp.ALU and n.dtype is not dtypes.index
               and not all(s.dtype is dtypes.index for s in n.src)
               and not (n.op in VECTOR_OPS and n.dtype in VECTOR_DTYPES)
               and (n.op, n.dtype) not in C_VECTOR_FORMS.math
               and not (n.op in MASK_OPS and all(s.dtype in C_VECTOR_FORMS.masks or s.dtype is dtypes.bool
                                                  for s in n.src)))


def choose_opts(kernel: UOp, target: Target) -> list[Opt]:
    """Optimizations for `kernel` on `target`, in the order `apply_opts` applies them."""
    if target.has_local:
        return choose_gpu_opts(kernel, target)
    ranges = kernel_ranges(kernel)
    sized = {axis: int(r.src[0].arg) for axis, r in ranges.items() if r.src[0].op is Ops.CONST}
    outputs = sorted(a for a, r in ranges.items() if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL) and a in sized)
    reduces = sorted(a for a, r in ranges.items() if r.arg[1] is AxisType.REDUCE and a in sized)
    work = 1  # loop iterations of the whole kernel, before any split
    for size in sized.values():
        work *= max(size, 1)
    scalar = scalar_ops(kernel)
    width = vector_width(kernel, ranges[outputs[-1]], target) if outputs else 0
    if reduces and outputs:  # matmul-shaped: register tiles, cache blocks, threads over panels (tiles.py)
        tiled = None
        if width * scalar <= SCALAR_COPIES_MAX:  # no width: register_tile may still find a channel axis
            tiled = register_tile(kernel, target, width, scalar_ops=scalar, copies_max=SCALAR_COPIES_MAX,
                                  thread_min_work=THREAD_MIN_WORK)
        if tiled is not None:
            return tiled
    if width * scalar > SCALAR_COPIES_MAX:
        width = 0
    opts: list[Opt] = []
    lanes = {axis: w for axis in reduces if (w := reduce_lanes(kernel, ranges[axis], target))}
    opts += [Opt(OptOps.UNROLL, axis, w) for axis, w in lanes.items()]
    if reduces and reduces[-1] not in lanes:
        axis = reduces[-1]
        if 2 <= sized[axis] <= FULL_UNROLL_MAX:
            opts.append(Opt(OptOps.UNROLL, axis, sized[axis]))
        elif width and _gathered_rows(kernel, ranges[axis], ranges[outputs[-1]]) and sized[axis] % width == 0:
            opts.append(Opt(OptOps.UNROLL, axis, width))
        elif sized[axis] % UPCAST_AMOUNT == 0 and sized[axis] > 0:
            opts.append(Opt(OptOps.UNROLL, axis, UPCAST_AMOUNT))
    opts += _nested_chains(kernel, sized, {o.axis for o in opts})
    if width:
        opts.append(Opt(OptOps.UPCAST, outputs[-1], width))
        sized[outputs[-1]] //= width  # the outer part keeps the axis id
        if reduces and len(outputs) >= 2 and sized[outputs[-2]] % BLOCK_ROWS == 0 and sized[outputs[-2]] > 0 \
                and not _lane_rows_past_l1(kernel, ranges[outputs[-2]], set(reduces) <= set(lanes), target):
            opts.append(Opt(OptOps.UPCAST, outputs[-2], BLOCK_ROWS))
            sized[outputs[-2]] //= BLOCK_ROWS
    elif outputs and (amount := _upcast_amount(sized[outputs[-1]], bool(reduces))) \
            and amount * scalar <= SCALAR_COPIES_MAX:
        opts.append(Opt(OptOps.UPCAST, outputs[-1], amount))
        sized[outputs[-1]] //= amount
        # a reduction over a whole small axis (a 3x3 window of a weight's gradient): the next axis's chains too
        if reduces and sized[outputs[-1]] == 1 and len(outputs) >= 2 \
                and (more := _upcast_amount(sized[outputs[-2]], True)) \
                and amount * more <= ACCUMULATOR_CHAINS and amount * more * scalar <= SCALAR_COPIES_MAX:
            opts.append(Opt(OptOps.UPCAST, outputs[-2], more))
            sized[outputs[-2]] //= more
    if outputs and target.threads > 1 and sized[outputs[0]] >= 2 and work >= THREAD_MIN_WORK:
        opts.append(Opt(OptOps.THREAD, outputs[0], target.threads))
    return opts


def _nested_chains(kernel: UOp, sized: dict[int, int], unrolled: set[int]) -> list[Opt]:
    """UNROLL the reduce axes of a reduction whose value is itself a reduction (softmax's max over the keys of
    recomputed dot products) by `_upcast_amount`: each copy is an independent inner chain, and the outer
    accumulator still takes them in order, so no bit changes. One inner chain at a time waits out the add latency
    at every step (MiniLM's fused scores: a 32-term dot product per key)."""
    opts = []
    for red in (n for n in kernel.toposort if n.op is Ops.REDUCE):
        inner = [n for n in red.src[0].toposort if n.op is Ops.REDUCE]
        # short inner chains only: a long one (a layernorm's 384 features inside a pooling sum) already keeps the
        # adder busy, and copies of its loop body only crowd the registers
        if not inner or any(math.prod(sized.get(int(r.arg[0]), NESTED_CHAIN_MAX + 1) for r in n.src[1:])
                            > NESTED_CHAIN_MAX for n in inner):
            continue
        for r in red.src[1:]:
            axis = int(r.arg[0])
            if axis in sized and axis not in unrolled and (amount := _upcast_amount(sized[axis], True)):
                opts.append(Opt(OptOps.UNROLL, axis, amount))
                unrolled.add(axis)
    return opts


def _upcast_amount(size: int, reduction: bool) -> int:
    """UPCAST_AMOUNT where it divides an axis of at least twice as many iterations. In a reduction, whose every
    accumulator is one chain of dependent adds (in order, for the bits), another small divisor too: 21 keys of
    attention give 7 chains to interleave, where one chain waits out the add latency at every step."""
    amounts: tuple[int, ...] = (UPCAST_AMOUNT, *ODD_UPCASTS) if reduction else (UPCAST_AMOUNT,)
    for amount in amounts:
        if size % amount == 0 and size >= 2 * amount:
            return amount
    if reduction and 2 <= size <= UPCAST_AMOUNT * 2:
        return size
    return 0


def reduce_lanes(kernel: UOp, axis: UOp, target: Target) -> int:
    """The vector width to UNROLL reduce axis `axis` by so that reduce.py computes its values as vector lanes: a
    MAX (a vector accumulator, exact in any order) or a reduction whose value calls a vector math op
    (`VectorForms.math`: softmax's exponentials, added lane by lane in order), when every load it makes along
    `axis` is contiguous and ungated by it; 0 otherwise."""
    reduces = [n for n in kernel.toposort if n.op is Ops.REDUCE and axis in n.src[1:]]
    if len(reduces) != 1 or axis.src[0].op is not Ops.CONST or reduces[0].dtype not in VECTOR_DTYPES:
        return 0
    red, forms = reduces[0], vector_forms(target)
    value = red.src[0].toposort
    if red.arg is not Ops.MAX and not any((n.op, n.dtype) in forms.math for n in value):
        return 0
    for node in value:
        if node.op is Ops.LOAD and axis in node.toposort:
            index = node.src[0]
            if index.op is not Ops.INDEX or lane_stride(index.src[1], axis) != 1 \
                    or (len(index.src) == 3 and axis in index.src[2].toposort):
                return 0
    size = int(axis.src[0].arg)
    return max((w for w in target.vector_widths_for(red.dtype) if size % w == 0), default=0)


def vector_width(kernel: UOp, axis: UOp, target: Target) -> int:
    """The largest vector width of the stores' dtype that divides `axis`, if every store writes `axis` contiguously
    (stride 1, no gate depending on it) in a dtype with vectors; else 0."""
    stores = [n for n in kernel.toposort if n.op is Ops.STORE and isinstance(n.src[0].dtype, PtrDType)]
    if axis.src[0].op is not Ops.CONST or not stores:
        return 0
    size = int(axis.src[0].arg)
    dtypes_stored = set()
    for store in stores:
        index = store.src[0]
        if lane_stride(index.src[1], axis) != 1 or (len(index.src) == 3 and axis in index.src[2].toposort):
            return 0
        dtypes_stored.add(store.src[1].dtype)
    if len(dtypes_stored) != 1 or not dtypes_stored <= VECTOR_DTYPES:
        return 0
    widths = target.vector_widths_for(dtypes_stored.pop())
    # as the scalar UPCAST: an axis of fewer than 8 elements is not worth unrolling (a width 2 on 6 elements)
    return max((w for w in widths if size % w == 0 and size >= max(w, 2 * UPCAST_AMOUNT)), default=0)


def _gathered_rows(kernel: UOp, axis: UOp, out_axis: UOp) -> bool:
    """Whether UNROLLing reduce `axis` by the vector width of the innermost output axis `out_axis` lets
    transpose.py read the gathered lanes as W x W blocks: every load along `axis` reads it contiguously, and some
    load along `out_axis` is strided (its lanes lie rows apart: a sum over the last axis, layer norm's mean)."""
    return reads_contiguously(kernel, axis) and any(lane_stride(n.src[0].src[1], out_axis) != 1
                                                    for n in _global_loads(kernel, out_axis))


def _lane_rows_past_l1(kernel: UOp, row: UOp, all_lanes: bool, target: Target) -> bool:
    """Whether BLOCK_ROWS rows of a reduction whose every reduce runs as vector lanes (`all_lanes`: no scalar
    chain whose latency other rows would hide) would read more than L1 holds: every load depends on output axis
    `row`, BLOCK_ROWS times the bytes one row reads through its largest load exceed L1, and all rows together
    exceed half the last cache level (so the passes over a row cannot be served from it either). A softmax reads
    its row three times (max, exponentials' sum, the quotients); one 16 KiB row of 4096 floats is read again from
    L1, four are not: softmax of 4096 x 4096 (or 1024 x 16384, or 2048 x 4096) 7.0 -> 9.4 GB/s with one row, on
    this 2-core host (32 KiB L1, 32 MiB L3). Data within the L3 (128 x 16384, 256 x 4096) was up to 12% faster
    with four rows, so it keeps them."""
    if not all_lanes or not target.cache_sizes:
        return False
    loads = [n for n in kernel.toposort if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX
             and n.src[0].src[0].op is Ops.PARAM]
    if not loads or any(row not in n.src[0].src[1].toposort for n in loads):
        return False
    row_bytes = 0
    for load in loads:
        elements = 1
        for r in load.src[0].src[1].toposort:
            if r.op is Ops.RANGE and r is not row:
                if r.src[0].op is not Ops.CONST:
                    return False
                elements *= int(r.src[0].arg)
        row_bytes = max(row_bytes, elements * load.dtype.itemsize)
    rows = int(row.src[0].arg) if row.src[0].op is Ops.CONST else 0
    return BLOCK_ROWS * row_bytes > target.cache_sizes[0] and rows * row_bytes * 2 > target.cache_sizes[-1]


def _largest_power_of_two(size: int, limit: int) -> int:
    """The largest power of two <= limit that divides size (1 if none does)."""
    amount = 1
    while amount * 2 <= limit and size % (amount * 2) == 0:
        amount *= 2
    return amount


def _global_loads(root: UOp, r: UOp) -> list[UOp]:
    """The LOADs from kernel buffers in `root` whose index depends on range `r`."""
    return [n for n in root.toposort if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX
            and n.src[0].src[0].op is Ops.PARAM and r in n.src[0].src[1].toposort]


def reads_contiguously(root: UOp, r: UOp) -> bool:
    """Whether `root` loads along range `r`, every such load with stride 1 (neighbouring values of r, neighbouring
    elements)."""
    loads = _global_loads(root, r)
    return bool(loads) and all(lane_stride(n.src[0].src[1], r) == 1 for n in loads)


def value_ops(kernel: UOp) -> int:
    """The value ops of `kernel` (index math not counted): on a GPU every one is copied per UPCAST lane."""
    return sum(1 for n in kernel.toposort
               if n.op in GroupOp.ALU and n.dtype is not dtypes.index and not all(s.dtype is dtypes.index
                                                                                  for s in n.src))


def gpu_vector_width(kernel: UOp, axis: UOp, target: Target) -> int:
    """The widest vector width for UPCASTing output `axis` on a GPU (module docstring), or 0: every store writes
    the axis contiguously (stride 1, no gate depending on it) in dtypes the renderer has memory vectors of, at an
    index that is a multiple of the width once the axis is split by it (aligned), and in a reduction every load
    along the axis reads it contiguously too."""
    stores = [n for n in kernel.toposort if n.op is Ops.STORE and isinstance(n.src[0].dtype, PtrDType)]
    if axis.src[0].op is not Ops.CONST or not stores:
        return 0
    size = int(axis.src[0].arg)
    if any(n.op is Ops.REDUCE for n in kernel.toposort) and not reads_contiguously(kernel, axis):
        return 0
    memory = vector_forms(target).memory
    widths: set[int] | None = None
    firsts: list[UOp] = []
    for store in stores:
        index, dtype = store.src[0], store.src[1].dtype
        if lane_stride(index.src[1], axis) != 1 or (len(index.src) == 3 and axis in index.src[2].toposort) \
                or dtype not in memory:
            return 0
        own = {w for w in target.vector_widths_for(dtype) if w * dtype.itemsize <= GPU_VECTOR_BYTES}
        widths = own if widths is None else widths & own
        firsts.append(index.src[1].substitute({axis: UOp.const(dtypes.index, 0)}))
    return max((w for w in widths or () if size % w == 0 and size >= max(w, 2 * UPCAST_AMOUNT)
                and all(divides(w, first) for first in firsts)), default=0)


def choose_gpu_opts(kernel: UOp, target: Target) -> list[Opt]:
    """Optimizations for a target with workgroups (module docstring): GROUP, UPCAST, LOCAL."""
    tensor_cores = choose_tensor_core_opts(kernel, target)  # a float16/bfloat16 matmul: warp tiles (tensor_core.py)
    if tensor_cores:
        return tensor_cores
    ranges = kernel_ranges(kernel)
    sized = {axis: int(r.src[0].arg) for axis, r in ranges.items() if r.src[0].op is Ops.CONST}
    shared = shared_output_ranges(kernel)  # a range only some stores use stays a loop (gpu.py), never threads
    outputs = sorted(a for a, r in ranges.items()
                     if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL) and sized.get(a) and r in shared)
    output_elements = 1
    for axis in outputs:
        output_elements *= sized[axis]
    opts: list[Opt] = []
    group = 1
    if target.has_shared:
        scopes = loop_scopes(kernel)
        limit = min(GROUP_THREADS, target.max_threads_per_group, target.local_max[0],
                    target.shared_max // 8 if target.shared_max else 0)
        for red in (n for n in kernel.toposort if n.op is Ops.REDUCE):
            if any(r.arg[1] is not AxisType.LOOP and r.arg[1] is not AxisType.GLOBAL for r in scopes[red]):
                continue  # nested in another reduction's loop
            axis = int(red.src[-1].arg[0])
            if red.dtype.count > 1 or sized.get(axis, 0) < GROUP_MIN_REDUCE:
                continue
            if output_elements >= GROUP_MAX_OUTPUTS and not reads_contiguously(red.src[0], red.src[-1]):
                continue  # enough outputs to fill the GPU, and one thread per output reads coalesced already
            amount = _largest_power_of_two(sized[axis], limit)
            if amount >= 2 and all(o.axis != axis for o in opts):
                opts.append(Opt(OptOps.GROUP, axis, amount))
                group = max(group, amount)
    reduces = any(r.arg[1] is AxisType.REDUCE for r in ranges.values())
    copies = 1  # scalar copies of every value op the UPCASTs make
    width = gpu_vector_width(kernel, ranges[outputs[-1]], target) if outputs and group == 1 else 0
    if width and width * value_ops(kernel) <= SCALAR_COPIES_MAX:
        opts.append(Opt(OptOps.UPCAST, outputs[-1], width))
        sized[outputs[-1]] //= width
        copies = width
    if reduces and group == 1 and len(outputs) >= 2 and sized[outputs[-2]] % UPCAST_AMOUNT == 0 \
            and sized[outputs[-2]] >= 2 * UPCAST_AMOUNT \
            and copies * UPCAST_AMOUNT * value_ops(kernel) <= SCALAR_COPIES_MAX:
        opts.append(Opt(OptOps.UPCAST, outputs[-2], UPCAST_AMOUNT))
        sized[outputs[-2]] //= UPCAST_AMOUNT
    budget = min(LOCAL_THREADS, target.max_threads_per_group) // group
    used = 0  # LOCAL axes so far: threadIdx x, y, z in turn, the GROUP dimension after them
    for axis in reversed(outputs):
        if budget < 2 or used + (group > 1) == 3:
            break
        amount = _largest_power_of_two(sized[axis], min(budget, target.local_max[used]))
        if amount >= 2:
            opts.append(Opt(OptOps.LOCAL, axis, amount))
            budget //= amount
            used += 1
    return opts
