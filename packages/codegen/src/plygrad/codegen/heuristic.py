"""The default choice of optimizations (a search such as BEAM can replace it by calling `apply_opts` itself).

Rules of thumb, cheapest first, each justified by what the C compiler does with the result:
- UNROLL the innermost reduce axis: a small one (<= 8) completely, otherwise by 4 when 4 divides it; the
  accumulator update becomes straight-line code the compiler can schedule.
- UPCAST the innermost output axis by 4 when 4 divides it and it has at least 8 iterations: four stores per
  iteration, and in a reduction four accumulators that reuse each loaded value.
- THREAD the outermost output axis when the target has several threads and the kernel does enough work for
  OpenMP's start-up to pay off.
- LOCAL (targets with workgroups only) the outermost output axis by the largest of 16/8/4/2 that divides it.
"""

from __future__ import annotations

from typing import Final

from plygrad.codegen.opts import kernel_ranges
from plygrad.ir import AxisType, Ops, Opt, OptOps, Target, UOp

FULL_UNROLL_MAX: Final = 8
UPCAST_AMOUNT: Final = 4
THREAD_MIN_WORK: Final = 1 << 15  # loop iterations below which starting an OpenMP team costs more than it saves


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
    if outputs and sized[outputs[-1]] % UPCAST_AMOUNT == 0 and sized[outputs[-1]] >= 2 * UPCAST_AMOUNT:
        opts.append(Opt(OptOps.UPCAST, outputs[-1], UPCAST_AMOUNT))
        sized[outputs[-1]] //= UPCAST_AMOUNT  # the outer part keeps the axis id
    if outputs and target.threads > 1 and sized[outputs[0]] >= 2 and work >= THREAD_MIN_WORK:
        opts.append(Opt(OptOps.THREAD, outputs[0], target.threads))
    elif outputs and target.has_local:
        for amount in (16, 8, 4, 2):
            if sized[outputs[0]] % amount == 0 and amount <= target.local_max[0] and sized[outputs[0]] > amount:
                opts.append(Opt(OptOps.LOCAL, outputs[0], amount))
                break
    return opts
