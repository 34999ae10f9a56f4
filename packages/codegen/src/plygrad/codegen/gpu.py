"""GPU-shaped lowering for targets with workgroups (`Target.has_local`): launch dimensions and workgroup reductions.

Two passes of lower.py, both no-ops on a target without workgroups. `gpu_dims` (after `optimize`) makes every
output LOOP of constant, non-zero size that all stores share a GLOBAL (launch) range, and a GLOBAL of symbolic size
(or one store's own) a LOOP run serially in each thread. `group_reduce` (before `lower_reduce`) turns a REDUCE over
a GROUP_REDUCE range into per-thread partials in a DEFINE_LOCAL, a BARRIER, and a serial finish every thread of the
group computes in the same order, so all hold the same bits and group index 0 stores them. docs/codegen.md §1 and
§5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.scope import loop_scopes
from plygrad.ir import AddrSpace, AxisType, Ops, PatternMatcher, Target, UOp, UPat, dtypes, graph_rewrite


def shared_output_ranges(kernel: UOp) -> set[UOp]:
    """The output loops (LOOP/GLOBAL ranges) that every STORE of `kernel` and every REDUCE depends on. Only those
    can be launch dimensions:
    - a kernel writing several slices in their own loop nests (a wide cat, scheduler/concat.py) would otherwise
      launch the product of every nest's sizes, each thread redoing all of them; their own loops run serially
      inside each thread instead;
    - a REDUCE that does not depend on an output loop (softmax's row sum, read by every element of its row: the
      scheduler fuses it there, docs/scheduler.md rule 4) is computed once per iteration of the loops it does
      depend on only while the others stay loops inside the thread; as launch dimensions every thread would
      recompute it."""
    outputs = (AxisType.LOOP, AxisType.GLOBAL)
    common: set[UOp] | None = None
    for node in kernel.toposort:
        if node.op is Ops.STORE or node.op is Ops.REDUCE:
            ranges = {n for n in node.toposort if n.op is Ops.RANGE and n.arg[1] in outputs}
            common = ranges if common is None else common & ranges
    return common or set()


@dataclass(frozen=True)
class LaunchContext:
    """What `gpu_dims` needs: the target, and the ranges every store shares (`shared_output_ranges`)."""

    target: Target
    shared: frozenset[int]  # axis ids: a rewritten RANGE is a new node, its axis id stays


def _to_launch_range(ctx: LaunchContext, r: UOp) -> UOp | None:
    if not ctx.target.has_local:
        return None
    axis, axis_type = r.arg
    constant = r.src[0].op is Ops.CONST and int(r.src[0].arg) > 0
    if axis_type is AxisType.LOOP and constant and axis in ctx.shared:
        return r.replace(arg=(axis, AxisType.GLOBAL))
    if axis_type is AxisType.GLOBAL and (not constant or axis not in ctx.shared):
        return r.replace(arg=(axis, AxisType.LOOP))
    return None


gpu_dims: Final = PatternMatcher([(UPat(Ops.RANGE, name="r"), _to_launch_range)], name="gpu_dims")


@dataclass
class SharedSlots:
    """Hands out DEFINE_LOCAL slots and fresh axis ids for the finish loops, one of each per GROUP reduction."""

    next_axis: int
    next_slot: int = 0


def group_one_reduce(ctx: SharedSlots, red: UOp) -> UOp | None:
    groups = [r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
    if not groups:
        return None
    axes = [int(g.arg[0]) for g in groups]
    if len(groups) > 1:
        raise CodegenError(f"a REDUCE over GROUP_REDUCE axes {axes}: one reduction can be split across the workgroup "
                           "once; apply GROUP to one of its axes only")
    # a workgroup reduction computed inside this one's loops (its barrier depends on one of this REDUCE's ranges)
    # would need the threads of both at once: sum_i max_j x[i, j] with i and j both grouped. One computed before
    # (softmax: the max feeds the sum) is fine.
    scopes = loop_scopes(red.src[0])
    nested = [n for n in red.src[0].toposort if n.op is Ops.BARRIER and scopes[n] & set(red.src[1:])]
    if nested:
        raise CodegenError(f"GROUP on axis {axes[0]} splits a reduction whose value holds another GROUP reduction "
                           "inside its loops: both would use the same threads; GROUP only one of two nested "
                           "reductions")
    if red.dtype.count > 1:
        raise CodegenError(f"GROUP on axis {axes[0]}: a vector reduction ({red.dtype!r}) cannot be grouped; "
                           "don't combine GROUP with a vector-width UPCAST")
    g = groups[0]
    size = int(g.src[0].arg)
    rest = tuple(r for r in red.src[1:] if r is not g)
    partial = UOp(Ops.REDUCE, red.dtype, (red.src[0], *rest), red.arg) if rest else red.src[0]
    # the other threads of the workgroup (LOCAL ranges open around the reduction) reduce their own outputs at the
    # same time: each needs its own row of `size` slots
    row, rows = UOp.const(dtypes.index, 0), 1
    for r in sorted((r for r in loop_scopes(red)[red] if r.arg[1] is AxisType.LOCAL), key=lambda r: int(r.arg[0])):
        row, rows = row * int(r.src[0].arg) + r, rows * int(r.src[0].arg)
    shared = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(rows * size, AddrSpace.LOCAL), (), ctx.next_slot)
    ctx.next_slot += 1
    write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, shared.dtype, (shared, row * size + g)), partial))
    barrier = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.END, dtypes.void, (write, g)),))
    finish = UOp.range(size, ctx.next_axis, AxisType.REDUCE)
    ctx.next_axis += 1
    read = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, shared.dtype, (shared, row * size + finish)), barrier))
    return UOp(Ops.REDUCE, red.dtype, (read, finish), red.arg)


group_reduce_rules: Final = PatternMatcher([(UPat(Ops.REDUCE, name="red"), group_one_reduce)], name="group_reduce")


def group_reduce(kernel: UOp) -> UOp:
    """`kernel` with every REDUCE over a GROUP_REDUCE range turned into shared-memory partials (module docstring)."""
    axes = [int(n.arg[0]) for n in kernel.toposort if n.op is Ops.RANGE]
    return graph_rewrite(kernel, group_reduce_rules, ctx=SharedSlots(max(axes, default=-1) + 1))
