"""The optimization stage: `Opt` actions applied to a kernel's ranges.

An action names a RANGE by its axis id (`RANGE.arg[0]`, unique within a kernel) and splits or marks it: UPCAST,
UNROLL, LOCAL, GROUP, THREAD, TC, BLOCK and TILE (the table of docs/codegen.md §2). The outer part of a split keeps
the axis id, the inner part gets the next free id, so later actions can address either; BLOCK is the exception (its
inner part keeps the id). `apply_opts` is the public entry a search (BEAM) drives; anything that does not apply
raises `OptError` naming the action, the axis and what would be valid. The split itself is a rule table on the
rewrite engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.codegen.block import check_block
from plygrad.codegen.errors import OptError
from plygrad.codegen.reduce import unshare_reduce_ranges
from plygrad.codegen.tensor_core import apply_tensor_core
from plygrad.ir import (
    AxisType,
    KernelInfo,
    Ops,
    Opt,
    OptOps,
    PatternMatcher,
    Target,
    UOp,
    UPat,
    graph_rewrite,
    kernel_name,
)

_OUTPUT_AXES: Final = frozenset({AxisType.LOOP, AxisType.GLOBAL, AxisType.THREAD})


@dataclass(frozen=True)
class _Action:
    """What one OptOps does: which axis types it accepts, the type of the inner range, whether it needs locals."""

    accepts: frozenset[AxisType]
    inner: AxisType
    needs_local: bool


ACTIONS: Final[dict[OptOps, _Action]] = {
    OptOps.UPCAST: _Action(_OUTPUT_AXES, AxisType.UPCAST, False),
    OptOps.UNROLL: _Action(frozenset({AxisType.REDUCE}), AxisType.UNROLL, False),
    OptOps.LOCAL: _Action(frozenset({AxisType.LOOP, AxisType.GLOBAL}), AxisType.LOCAL, True),
    OptOps.GROUP: _Action(frozenset({AxisType.REDUCE}), AxisType.GROUP_REDUCE, True),
    OptOps.THREAD: _Action(frozenset({AxisType.LOOP, AxisType.GLOBAL}), AxisType.THREAD, False),
    OptOps.BLOCK: _Action(frozenset({AxisType.REDUCE}), AxisType.BLOCK, False),  # the *outer* part's type
    # the inner part is a plain output loop with the next free axis id, so it nests inside the loops after r
    OptOps.TILE: _Action(frozenset({AxisType.LOOP}), AxisType.LOOP, False),
}


def kernel_ranges(kernel: UOp) -> dict[int, UOp]:
    """The kernel's RANGE nodes by axis id; two different ranges sharing an id is an error."""
    found: dict[int, UOp] = {}
    for node in kernel.toposort:
        if node.op is Ops.RANGE:
            axis = node.arg[0]
            if axis in found and found[axis] is not node:
                raise OptError(f"kernel {kernel_name(kernel)!r}: two RANGEs share axis id {axis}; "
                               "every RANGE of a kernel needs its own axis id")
            found[axis] = node
    return found


@dataclass
class _Split:
    """Rewrite context of one split: the old range, the index expression replacing it, and the new ranges."""

    old: UOp
    expr: UOp
    parts: tuple[UOp, ...]


def _replace_range(ctx: _Split, r: UOp) -> UOp | None:
    return ctx.expr if r is ctx.old else None


def _resource_closers(ctx: _Split, x: UOp) -> UOp | None:
    """A REDUCE or END listing the split range must list both of its parts instead."""
    if ctx.expr not in x.src[1:]:
        return None
    new_src = [x.src[0]]
    for s in x.src[1:]:
        new_src.extend(ctx.parts if s is ctx.expr else (s,))
    return None if tuple(new_src) == x.src else x.replace(src=tuple(new_src))


split_range: Final = PatternMatcher([
    (UPat(Ops.RANGE, name="r"), _replace_range),
    (UPat((Ops.REDUCE, Ops.END), name="x"), _resource_closers),
], name="split_range")


def _check(kernel: UOp, opt: Opt, target: Target | None) -> tuple[UOp, _Action]:
    name = kernel_name(kernel)
    if not isinstance(opt, Opt):
        raise OptError(f"kernel {name!r}: an optimization must be an Opt record, got {opt!r}")
    action = ACTIONS.get(opt.op)
    if action is None:
        raise OptError(f"kernel {name!r}: {opt} uses {opt.op.name}, which this codegen does not implement; "
                       f"use one of {sorted([*(o.name for o in ACTIONS), OptOps.TC.name])}")
    ranges = kernel_ranges(kernel)
    r = ranges.get(opt.axis)
    if r is None:
        raise OptError(f"kernel {name!r}: {opt} names axis {opt.axis}, but the kernel's axes are {sorted(ranges)}")
    axis_type: AxisType = r.arg[1]
    if axis_type not in action.accepts:
        raise OptError(f"kernel {name!r}: {opt.op.name} applies to {sorted(a.name for a in action.accepts)} axes, "
                       f"axis {opt.axis} is {axis_type.name}")
    if action.needs_local and (target is None or not target.has_local):
        raise OptError(f"kernel {name!r}: {opt} needs workgroups, but the target has has_local=False; "
                       "use UPCAST/UNROLL/THREAD on a CPU target")
    if opt.op is OptOps.THREAD:
        if target is not None and target.threads < 2:
            raise OptError(f"kernel {name!r}: {opt} needs a target with threads > 1, got threads={target.threads}")
        if opt.amount < 2:
            raise OptError(f"kernel {name!r}: {opt} amount is the thread count, it must be >= 2")
        return r, action
    end = r.src[0]
    if end.op is not Ops.CONST:
        raise OptError(f"kernel {name!r}: {opt} splits axis {opt.axis}, whose size is symbolic; "
                       "only axes of constant size can be split")
    if type(opt.amount) is not int or opt.amount < 2 or end.arg % opt.amount != 0:
        raise OptError(f"kernel {name!r}: {opt} needs an amount >= 2 that divides axis {opt.axis}'s size "
                       f"{end.arg}")
    return r, action


def apply_opt(kernel: UOp, opt: Opt, target: Target | None = None) -> UOp:
    """`kernel` with one optimization applied (recorded in its KernelInfo.opts). Raises OptError."""
    if isinstance(opt, Opt) and opt.op is OptOps.TC:
        kernel_ranges(kernel)  # one RANGE per axis id
        info = kernel.arg if isinstance(kernel.arg, KernelInfo) else KernelInfo()
        return apply_tensor_core(kernel, opt, target, kernel_name(kernel)).replace(
            arg=KernelInfo(info.name, (*info.opts, opt)))
    r, action = _check(kernel, opt, target)
    if opt.op is OptOps.THREAD:
        marked = r.replace(arg=(r.arg[0], AxisType.THREAD))
        ctx = _Split(r, marked, (marked,))
    elif opt.op is OptOps.BLOCK:
        check_block(kernel, r, opt, target, kernel_name(kernel))
        block = UOp.range(r.src[0].arg // opt.amount, max(kernel_ranges(kernel)) + 1, AxisType.BLOCK)
        inner = UOp.range(opt.amount, r.arg[0], r.arg[1])
        ctx = _Split(r, block * opt.amount + inner, (block, inner))
    else:
        new_axis = max(kernel_ranges(kernel)) + 1
        inner = UOp.range(opt.amount, new_axis, action.inner)
        if r.src[0].arg == opt.amount:  # the whole axis: no loop of one trip is left behind
            ctx = _Split(r, inner, (inner,))
        else:
            outer = UOp.range(r.src[0].arg // opt.amount, r.arg[0], r.arg[1])
            ctx = _Split(r, outer * opt.amount + inner, (outer, inner))
    rewritten = graph_rewrite(kernel, split_range, ctx=ctx)
    info = kernel.arg if isinstance(kernel.arg, KernelInfo) else KernelInfo()
    return rewritten.replace(arg=KernelInfo(info.name, (*info.opts, opt)))


def apply_opts(kernel: UOp, opts: Sequence[Opt], target: Target | None = None) -> UOp:
    """`kernel` with each optimization applied in order (see the module docstring). Raises OptError.

    `target` enables the checks that depend on it (LOCAL/GROUP need `has_local`, THREAD needs `threads > 1`).
    Axis ids are those of the kernel after `unshare_reduce_ranges`, applied first here. On a CPU, lowering merges
    row axes and splits divided reductions before (merge.py, split.py): `optimizable` in lower.py gives the kernel
    whose axes the `Opt`s of `lower_uop` name.
    """
    if kernel.op is not Ops.SINK:
        raise OptError(f"apply_opts needs a kernel SINK, got {kernel.op.name}")
    kernel = unshare_reduce_ranges(kernel)
    for opt in opts:
        kernel = apply_opt(kernel, opt, target)
    return kernel
