"""The default choice of optimizations (a search such as BEAM can replace it by calling `apply_opts` itself).

Rules of thumb, cheapest first, each justified by what the C compiler does with the result:
- UNROLL the innermost reduce axis: a small one (<= 8) completely, otherwise by 4 when 4 divides it; the
  accumulator update becomes straight-line code the compiler can schedule.
- Vector width: UPCAST the innermost output axis by the largest of `target.vector_widths_for(dtype)` that divides
  it, when every store writes that axis contiguously in a dtype with vectors (vectorize.py turns the UPCAST into
  vector lanes: one load, op and store per k elements). There is no separate VECTORIZE action (OptOps has none):
  the width is this UPCAST's amount, so a search expresses it the same way.
- Register blocking, for matmul-shaped kernels (a reduction, two output axes, the inner one vectorized): UPCAST
  the next output axis by 4 too, so a 4 x width tile of vector accumulators reuses every vector load 4 times and
  every broadcast scalar `width` times, with 4 independent accumulation chains.
- Otherwise UPCAST the innermost output axis by 4 when 4 divides it and it has at least 8 iterations: four stores
  per iteration, and in a reduction four accumulators that reuse each loaded value.
- Neither UPCAST when the kernel body is large and mostly scalar: an UPCAST copies each op without a vector form
  (comparisons, selects, casts, integer math) once per lane, so past SCALAR_COPIES_MAX copies the source, and the
  C compiler's time on it, grow by the amount for a loop overhead such a body no longer notices.
- THREAD the outermost output axis when the target has several threads and the kernel does enough work for
  OpenMP's start-up to pay off.
- LOCAL (targets with workgroups only) the outermost output axis by the largest of 16/8/4/2 that divides it.
"""

from __future__ import annotations

from typing import Final

from plygrad.codegen.opts import kernel_ranges
from plygrad.codegen.vectorize import VECTOR_DTYPES, VECTOR_OPS, lane_stride
from plygrad.ir import AxisType, GroupOp, Ops, Opt, OptOps, PtrDType, Target, UOp, dtypes

FULL_UNROLL_MAX: Final = 8
UPCAST_AMOUNT: Final = 4
BLOCK_ROWS: Final = 4  # rows of a register tile: 4 vector accumulators fit the 16 registers of AVX2 or NEON
THREAD_MIN_WORK: Final = 1 << 15  # loop iterations below which starting an OpenMP team costs more than it saves
SCALAR_COPIES_MAX: Final = 256  # scalar op copies an UPCAST may make (a 500-op relu chain took 3 s to compile)


def scalar_ops(kernel: UOp) -> int:
    """The value ops of `kernel` that an UPCAST would copy per lane (no vector form); index math is not counted."""
    return sum(1 for n in kernel.toposort
               if n.op in GroupOp.ALU and n.dtype is not dtypes.index
               and not all(s.dtype is dtypes.index for s in n.src)
               and not (n.op in VECTOR_OPS and n.dtype in VECTOR_DTYPES))


def choose_opts(kernel: UOp, target: Target) -> list[Opt]:
    """Optimizations for `kernel` on `target`, in the order `apply_opts` applies them."""
    ranges = kernel_ranges(kernel)
    sized = {axis: int(r.src[0].arg) for axis, r in ranges.items() if r.src[0].op is Ops.CONST}
    outputs = sorted(a for a, r in ranges.items() if r.arg[1] in (AxisType.LOOP, AxisType.GLOBAL) and a in sized)
    reduces = sorted(a for a, r in ranges.items() if r.arg[1] is AxisType.REDUCE and a in sized)
    work = 1  # loop iterations of the whole kernel, before any split
    for size in sized.values():
        work *= max(size, 1)
    opts: list[Opt] = []
    if reduces:
        axis = reduces[-1]
        if 2 <= sized[axis] <= FULL_UNROLL_MAX:
            opts.append(Opt(OptOps.UNROLL, axis, sized[axis]))
        elif sized[axis] % UPCAST_AMOUNT == 0 and sized[axis] > 0:
            opts.append(Opt(OptOps.UNROLL, axis, UPCAST_AMOUNT))
    width = vector_width(kernel, ranges[outputs[-1]], target) if outputs else 0
    scalar = scalar_ops(kernel)
    if width * scalar > SCALAR_COPIES_MAX:
        width = 0
    if width:
        opts.append(Opt(OptOps.UPCAST, outputs[-1], width))
        sized[outputs[-1]] //= width  # the outer part keeps the axis id
        if reduces and len(outputs) >= 2 and sized[outputs[-2]] % BLOCK_ROWS == 0 and sized[outputs[-2]] > 0:
            opts.append(Opt(OptOps.UPCAST, outputs[-2], BLOCK_ROWS))
            sized[outputs[-2]] //= BLOCK_ROWS
    elif (outputs and UPCAST_AMOUNT * scalar <= SCALAR_COPIES_MAX and sized[outputs[-1]] % UPCAST_AMOUNT == 0
          and sized[outputs[-1]] >= 2 * UPCAST_AMOUNT):
        opts.append(Opt(OptOps.UPCAST, outputs[-1], UPCAST_AMOUNT))
        sized[outputs[-1]] //= UPCAST_AMOUNT
    if outputs and target.threads > 1 and sized[outputs[0]] >= 2 and work >= THREAD_MIN_WORK:
        opts.append(Opt(OptOps.THREAD, outputs[0], target.threads))
    elif outputs and target.has_local:
        for amount in (16, 8, 4, 2):
            if sized[outputs[0]] % amount == 0 and amount <= target.local_max[0] and sized[outputs[0]] > amount:
                opts.append(Opt(OptOps.LOCAL, outputs[0], amount))
                break
    return opts


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
