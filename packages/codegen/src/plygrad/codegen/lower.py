"""Lowering a kernel AST to a PROGRAM: the passes, in the one order they run.

`PASSES` below is the whole pipeline: `(name, function)` entries over one `Lowering` state, each function the pass
itself or, for a pass that only rewrites the kernel, `Rewrite(pass)` (the one adapter). In order: verify the input;
CPU axis merges and splits; simplify; gathers become loads; the optimization stage (opts.py, heuristic.py); launch
ranges; unrolling and vector lanes; GROUP reductions; accumulators; tensor-core fusion; CPU panel packing and
register transposes; simplify again; linearize; render. docs/codegen.md §1 says what each pass does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.expand import expand_upcast
from plygrad.codegen.gates import simplify_rules
from plygrad.codegen.gather import gathers_to_loads
from plygrad.codegen.gpu import LaunchContext, gpu_dims, group_reduce, shared_output_ranges
from plygrad.codegen.heuristic import choose_opts
from plygrad.codegen.linearize import linearize
from plygrad.codegen.merge import merge_axes
from plygrad.codegen.opts import apply_opts
from plygrad.codegen.pack import pack_panels
from plygrad.codegen.reduce import RegSlots, lower_reduce, unshare_reduce_ranges
from plygrad.codegen.renderer import KernelSource, get_renderer
from plygrad.codegen.scope import range_size
from plygrad.codegen.split import split_ranges
from plygrad.codegen.tensor_core import fuse_wmma
from plygrad.codegen.transpose import transpose_gathers
from plygrad.ir import (
    AxisType,
    IRError,
    KernelInfo,
    Ops,
    Opt,
    ParamInfo,
    PatternMatcher,
    ProgramInfo,
    PtrDType,
    Stage,
    Target,
    UOp,
    deserialize,
    dtypes,
    graph_rewrite,
    kernel_name,
    serialize,
    verify,
)


@dataclass
class Lowering:
    """What the passes share: the kernel as it is rewritten, the target, and what each pass produces."""

    kernel: UOp
    target: Target
    opts: tuple[Opt, ...] | None
    applied: tuple[Opt, ...] = ()
    name: str = ""
    linear: list[UOp] = field(default_factory=list)
    program: UOp | None = None
    # the kernel's buffers as it arrived: the launch passes every one of them, even a buffer whose reads the
    # simplification removed (a WHERE folded to a constant), so the program's signature keeps them all
    params: tuple[ParamInfo, ...] = ()


def verify_kernel(state: Lowering) -> Lowering:
    """The input is a KERNEL-stage graph of dtypes the target supports; names the program and notes its buffers."""
    try:
        verify(state.kernel, Stage.KERNEL)
    except IRError as e:
        raise CodegenError(f"codegen needs a KERNEL-stage SINK: {e}") from e
    supported = set(state.target.supported_dtypes) | {dtypes.index, dtypes.void}
    for node in state.kernel.toposort:
        base = node.dtype.base if isinstance(node.dtype, PtrDType) else node.dtype
        if base not in supported:
            raise CodegenError(f"kernel {kernel_name(state.kernel)!r}: {node.op.name} has dtype {base!r}, which "
                               f"target {state.target.device}/{state.target.renderer} does not support "
                               "(Target.supported_dtypes); cast it in the frontend or pick another device")
    # named by the kernel's shape before optimization
    return replace(state, name=program_name(state.kernel), params=_params(state.kernel))


def optimize(state: Lowering) -> Lowering:
    """The given opts, or the heuristic's, applied; `applied` lists every opt the kernel has had."""
    already = state.kernel.arg.opts if isinstance(state.kernel.arg, KernelInfo) else ()
    opts = tuple(state.opts) if state.opts is not None else tuple(choose_opts(state.kernel, state.target))
    kernel = apply_opts(state.kernel, opts, state.target)
    return replace(state, kernel=kernel, applied=(*already, *opts))


def linearize_kernel(state: Lowering) -> Lowering:
    return replace(state, linear=linearize(state.kernel))


def render(state: Lowering) -> Lowering:
    """The target's renderer's source, in a PROGRAM with its launch sizes and op and memory estimates."""
    kernel = state.kernel
    params = state.params
    variables = tuple(sorted({n for n in kernel.toposort if n.op is Ops.DEFINE_VAR}, key=lambda v: str(v.arg[0])))
    source = KernelSource(state.name, tuple(state.linear), params, variables)
    renderer = get_renderer(state.target.renderer)(state.target)
    text = renderer.render(source)
    global_size, local_size = renderer.launch_dims(source)
    ops, mem = estimate(state.linear)
    info = ProgramInfo(source.name, global_size, local_size, params, ops=ops, mem=mem, opts=state.applied)
    program = UOp(Ops.PROGRAM, dtypes.void, (UOp(Ops.SOURCE, dtypes.void, (), text), *variables), info)
    return replace(state, program=program)


@dataclass(frozen=True)
class Rewrite:
    """The one adapter of `PASSES`: a pass that only rewrites the kernel, as `fn(kernel)` or, `with_target`,
    `fn(kernel, target)`; or a PatternMatcher applied by graph_rewrite with `ctx(kernel, target)` as its context."""

    fn: PatternMatcher | Callable[..., UOp]
    with_target: bool = False
    ctx: Callable[[UOp, Target], object] | None = None

    def __call__(self, state: Lowering) -> Lowering:
        if isinstance(self.fn, PatternMatcher):
            ctx = None if self.ctx is None else self.ctx(state.kernel, state.target)
            return replace(state, kernel=graph_rewrite(state.kernel, self.fn, ctx=ctx))
        args = (state.kernel, state.target) if self.with_target else (state.kernel,)
        return replace(state, kernel=self.fn(*args))


def _launch_context(kernel: UOp, target: Target) -> LaunchContext:
    """gpu_dims' context: the target, and the output ranges every store shares (those stay loops)."""
    return LaunchContext(target, frozenset(int(r.arg[0]) for r in shared_output_ranges(kernel)))


PASSES: Final[list[tuple[str, Callable[[Lowering], Lowering]]]] = [
    ("verify", verify_kernel),
    ("merge_axes", Rewrite(merge_axes, with_target=True)),
    ("split_ranges", Rewrite(split_ranges, with_target=True)),
    ("simplify", Rewrite(simplify_rules)),
    ("unshare_ranges", Rewrite(unshare_reduce_ranges)),
    ("gather", Rewrite(gathers_to_loads)),
    ("optimize", optimize),
    ("gpu_dims", Rewrite(gpu_dims, ctx=_launch_context)),
    ("expand_upcast", Rewrite(expand_upcast, ctx=lambda kernel, target: target)),
    ("group_reduce", Rewrite(group_reduce)),
    ("lower_reduce", Rewrite(lower_reduce, ctx=lambda kernel, target: RegSlots(target=target))),
    ("fuse_wmma", Rewrite(fuse_wmma)),
    ("pack_panels", Rewrite(pack_panels, with_target=True)),
    ("transpose_gathers", Rewrite(transpose_gathers, with_target=True)),
    ("simplify_lowered", Rewrite(simplify_rules)),
    ("linearize", linearize_kernel),
    ("render", render),
]


def optimizable(kernel: UOp, target: Target) -> UOp:
    """The kernel as the `optimize` pass sees it on `target`: after `merge_axes`, `split_ranges` and the
    simplifications before it. The axis ids of an `Opt` name this kernel's ranges, not those of the kernel given
    (the two differ where rows were merged or a reduction split)."""
    state = Lowering(kernel, target, ())
    for name, run in PASSES:
        if name == "optimize":
            return state.kernel
        state = run(state)
    raise AssertionError("PASSES has an optimize pass")


def lower_uop(kernel: UOp, target: Target, opts: Sequence[Opt] | None = None) -> UOp:
    """The PROGRAM for a KERNEL-stage SINK on `target`; `opts` replaces the heuristic's choice when given."""
    state = Lowering(kernel, target, None if opts is None else tuple(opts))
    for _, run in PASSES:
        state = run(state)
    assert state.program is not None
    return state.program


def lower(kernel: bytes, target: bytes, opts: bytes | None = None) -> bytes:
    """The `plygrad.codegen` entry point: KERNEL-stage bytes and `Target.to_bytes()` in, PROGRAM bytes out.

    `opts`, when given, is an optimization list written by `opts_to_bytes` (a search such as the runtime's BEAM
    chose it): it replaces the heuristic's choice, and an action that does not apply raises OptError. An empty list
    means no optimization at all; None, the heuristic."""
    try:
        graph = deserialize(kernel, Stage.KERNEL)
        tgt = Target.from_bytes(target)
    except IRError as e:
        raise CodegenError(f"codegen.lower needs KERNEL-stage graph bytes and Target bytes: {e}") from e
    chosen = None if opts is None else opts_from_bytes(opts)
    return serialize(lower_uop(graph, tgt, chosen), Stage.PROGRAM)


def opts_to_bytes(opts: Sequence[Opt]) -> bytes:
    """An optimization list as `lower`'s third argument: a KERNEL-stage SINK with no stores whose KernelInfo lists
    the actions (the IR's own versioned encoding of `Opt` records; docs/codegen.md, "The entry point")."""
    return serialize(UOp(Ops.SINK, dtypes.void, (), KernelInfo("", tuple(opts))), Stage.KERNEL)


def opts_from_bytes(data: bytes) -> tuple[Opt, ...]:
    """The list `opts_to_bytes` wrote; CodegenError for anything else (the bytes may come from another process)."""
    try:
        sink = deserialize(data, Stage.KERNEL)
    except IRError as e:
        raise CodegenError(f"codegen.lower's opts argument is not a serialized optimization list: {e}") from e
    if sink.op is not Ops.SINK or sink.src or not isinstance(sink.arg, KernelInfo):
        raise CodegenError(f"codegen.lower's opts argument must be a SINK without sources whose KernelInfo lists the "
                           f"Opts (see opts_to_bytes), got {sink.op.name} with {len(sink.src)} sources and arg "
                           f"{sink.arg!r}")
    return sink.arg.opts


# ---- ProgramInfo -------------------------------------------------------------------------------------------------
def _params(kernel: UOp) -> tuple[ParamInfo, ...]:
    found = {int(n.arg): n for n in kernel.toposort if n.op is Ops.PARAM}
    stored = {int(n.src[0].src[0].arg) for n in kernel.toposort
              if n.op is Ops.STORE and n.src[0].src[0].op is Ops.PARAM}
    if sorted(found) != list(range(len(found))):
        raise CodegenError(f"kernel {kernel_name(kernel)!r}: PARAM indices {sorted(found)} must be 0..n-1 "
                           "(outputs first, then inputs)")
    params = []
    for index in range(len(found)):
        ptr = found[index].dtype
        assert isinstance(ptr, PtrDType)
        params.append(ParamInfo(index, ptr.base, max(ptr.size, 0), index in stored))
    return tuple(params)


def program_name(kernel: UOp) -> str:
    """KernelInfo.name when it is a C identifier, else tinygrad-style `E_4_8` / `r_4_8_16` from the loop sizes."""
    if isinstance(kernel.arg, KernelInfo) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", kernel.arg.name):
        return kernel.arg.name
    ranges = sorted({n for n in kernel.toposort if n.op is Ops.RANGE}, key=lambda r: int(r.arg[0]))
    reduce = any(r.arg[1] in (AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP_REDUCE) for r in ranges)
    sizes = [str(r.src[0].arg) if r.src[0].op is Ops.CONST else "n" for r in ranges]
    return "_".join(["r" if reduce else "E", *sizes]) if sizes else "E"


def estimate(linear: list[UOp]) -> tuple[int, int]:
    """(ALU operations, bytes of global memory moved) by one launch: each statement times its loops' trips
    (MULACC counts 2, like the MUL and ADD it fuses, so a matmul's estimate does not depend on Target.has_fma).

    Address arithmetic (index dtype) is not counted: it is the loop's bookkeeping, not the kernel's work."""
    ops = mem = 0
    trips = [1]
    for node in linear:
        if node.op is Ops.RANGE:
            trips.append(trips[-1] * range_size(node))
        elif node.op is Ops.END:
            trips.pop()
        elif node.op in (Ops.LOAD, Ops.STORE):
            ptr = node.src[0].dtype
            if isinstance(ptr, PtrDType) and node.src[0].src[0].op is Ops.PARAM:
                value = node if node.op is Ops.LOAD else node.src[1]  # a vector moves all of its lanes
                mem += ptr.base.itemsize * value.dtype.count * trips[-1]
        elif node.op is Ops.WMMA:  # a tile's multiply-adds, shared by the lanes that compute it together
            m, n, k = node.arg.dims
            ops += trips[-1] * 2 * m * n * k // node.arg.threads
        elif node.op not in (Ops.IF, Ops.ENDIF, Ops.CAST, Ops.BITCAST, Ops.VECTORIZE, Ops.GEP, Ops.BARRIER,
                             Ops.DEFINE_LOCAL) \
                and not _index_math(node):
            # a vector op is one operation per lane; a fused multiply-add is the product and the sum it replaces
            ops += trips[-1] * node.dtype.count * (2 if node.op is Ops.MULACC else 1)
    return ops, mem


def _index_math(node: UOp) -> bool:
    return node.dtype is dtypes.index or any(s.dtype is dtypes.index for s in node.src)
