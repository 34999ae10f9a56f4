"""Which tensors become kernels: the fusion rules (docs/scheduler.md, "Fusion rules", explains each with examples).

A *root* is a tensor node that gets its own buffer and a kernel computing it; everything between roots is fused
into the kernel of the root that consumes it, as index math (movement ops) and inline expressions. This module
holds rules 1-4 (outputs, CONTIGUOUS/ASSIGN/COPY, elementwise never on its own account, when a REDUCE fuses) and
the pass list; rule 5 is schedule.py's, 6 concat.py's, 7 budget.py's, 8 recompute.py's, 9 assign_groups.py's.
The `unfused` scheduler makes every node that computes something a root: one kernel per op.

`FUSION_PASSES` lists the passes once, in the order they run over a shared `Fusion` context. The node-local
decisions are rule tables (`REALIZE`, `FUSE_REDUCES`) whose rules record a decision in the context and rewrite
nothing; the graph-wide analyses (the path walk of rule 4, cat detection, the budget's cuts) are the functions
they call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from plygrad.ir import GroupOp, Ops, PatternMatcher, UOp, UPat, strip_reshapes
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET, split_oversized
from plygrad.scheduler.concat import Concat, find_concat
from plygrad.scheduler.recompute import realize_repeated

_LEAVES = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})


def contiguous_buffer(node: UOp) -> UOp | None:
    """The BUFFER holding `node` in row-major order with nothing to compute, if there is one."""
    base = strip_reshapes(node)
    if base.op is Ops.BUFFER:
        return base
    if base.op is Ops.ASSIGN:
        target = strip_reshapes(base.src[0])
        if target.op is Ops.BUFFER:
            return target
    return None


def named_devices(order: Sequence[UOp]) -> dict[UOp, str | None]:
    """Each node's device as the graph names it: a BUFFER's own, a COPY's target, else the device of its first
    source that has one; None for a node computed from constants alone (docs/ir.md §4.4)."""
    own: dict[UOp, str | None] = {}
    for node in order:
        if node.op is Ops.BUFFER:
            own[node] = node.arg.device
        elif node.op is Ops.COPY:
            own[node] = node.arg
        else:
            own[node] = next((d for d in (own[s] for s in node.src) if d is not None), None)
    return own


def users_of(order: Sequence[UOp]) -> dict[UOp, list[UOp]]:
    """Each node's distinct consumers (the SINK not counted)."""
    users: dict[UOp, list[UOp]] = {n: [] for n in order}
    for node in order:
        if node.op is Ops.SINK:
            continue
        for s in dict.fromkeys(node.src):
            users[s].append(node)
    return users


def _loops(shape: tuple[int, ...]) -> list[int]:
    """The axes of `shape` that are loops in a kernel over it (size-1 axes have none), outermost first."""
    return [k for k, n in enumerate(shape) if n != 1]


def _is_prefix(deps: frozenset[int], shape: tuple[int, ...]) -> bool:
    """Whether the axes a value depends on are the outermost loops: codegen (linearize.py) computes a value in the
    innermost loop it depends on, so it then runs once per index of those loops, not once per element."""
    return set(_loops(shape)[:len(deps)]) == deps


def _carry(user: UOp, src: UOp, deps: frozenset[int]) -> frozenset[int] | None:
    """The axes of `user` that a value depending on axes `deps` of its source `src` depends on, if it is still
    computed once per index of its outermost loops there; None where it would be recomputed (or cannot say)."""
    before, after = src.shape, user.shape
    if before is None or after is None:
        return None
    full = deps == frozenset(_loops(before))
    if user.op in GroupOp.Elementwise:
        new = deps
    elif user.op in (Ops.RESHAPE, Ops.FLIP) and full:
        new = frozenset(_loops(after))  # elements map one to one: still once per element
    elif user.op is Ops.PERMUTE:
        new = frozenset(user.arg.index(k) for k in deps)
    elif user.op is Ops.EXPAND:
        new = deps  # repeated axes were of size 1: not among the loops the value depends on
    elif user.op is Ops.REDUCE:
        new = deps - frozenset(user.arg[1])  # its loops over the reduced axes run inside, where the value is read
    else:
        return None
    return new if _is_prefix(new, after) else None


def _reduce_fuses_up(reduce: UOp, users: dict[UOp, list[UOp]], roots: set[UOp]) -> bool:
    """Rule 4: do all paths up from `reduce` lead to one kernel root, through nodes that are not roots, where it
    stays computed once per index of the loops it depends on (`_carry`), and, when reducing it costs at least
    RECOMPUTED_REDUCE_MIN steps, in one loop nest only?

    A path through another REDUCE that reduces an axis the value depends on computes it inside that REDUCE's loop;
    a path that reaches the kernel otherwise computes it again in the kernel's own loops. Attention's scores
    `q @ k^T` read by softmax's row max and by `exp(s - max)` were two dot products per score, scalar (the key
    axis of 21 tokens has no vector width): 0.66 ms of MiniLM's 1.1 ms per layer. Realized, they are a batched
    matmul of their own and the softmax reads them."""
    shape = reduce.shape
    if shape is None:
        return False
    target: UOp | None = None
    # (node, the axes of it the value depends on, the REDUCE whose loop computes the value on this path, if any)
    todo: list[tuple[UOp, frozenset[int], UOp | None]] = [(reduce, frozenset(_loops(shape)), None)]
    seen: set[tuple[UOp, frozenset[int], UOp | None]] = set()
    nests: set[UOp | None] = set()
    while todo:
        cur, deps, nest = todo.pop()
        if (cur, deps, nest) in seen:
            continue
        seen.add((cur, deps, nest))
        if cur is not reduce and cur in roots:
            if target is not None and target is not cur:
                return False
            target = cur
            nests.add(nest)
            continue
        above = users[cur]
        if not above:
            return False
        for user in above:
            if user.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
                if (user.op is Ops.ASSIGN and user.src[1] is not cur) or (target is not None and target is not user):
                    return False
                target = user
                continue
            if user.op is Ops.REDUCE and (user in roots or user is reduce):
                return False
            carried = _carry(user, cur, deps)
            if carried is None:
                return False
            inside = nest if nest is not None or user.op is not Ops.REDUCE or carried == deps else user
            todo.append((user, carried, inside))
    if len(nests) > 1 and _reduce_steps(reduce) >= RECOMPUTED_REDUCE_MIN:
        return False
    return target is not None


# the reduction length from which a REDUCE computed in two loop nests of one kernel is realized instead
RECOMPUTED_REDUCE_MIN: Final = 16


def _reduce_steps(reduce: UOp) -> int:
    """How many values one output of `reduce` reduces (the product of its reduced axes)."""
    src = reduce.src[0].shape
    if src is None:
        return 0
    steps = 1
    for axis in reduce.arg[1]:
        size = src[axis]
        steps *= size if isinstance(size, int) else RECOMPUTED_REDUCE_MIN  # a symbolic length: assume long
    return steps


@dataclass
class FusionPlan:
    """What fusion decided: the roots in topological order, the wide concatenations among them, and the size of
    each node's fused region (budget.py; empty for the unfused scheduler)."""

    roots: list[UOp]
    concats: dict[UOp, Concat] = field(default_factory=dict)
    sizes: dict[UOp, int] = field(default_factory=dict)


def _find_concats(order: Sequence[UOp], users: dict[UOp, list[UOp]], roots: set[UOp]) -> dict[UOp, Concat]:
    """Rule 6, top-down so a cat is found at its top ADD; the ADDs below one are not tried again (which also keeps
    a long sum of non-pieces linear: its tree is walked once)."""
    concats: dict[UOp, Concat] = {}
    tried: set[UOp] = set()
    for node in reversed(order):
        if node.op not in (Ops.ADD, Ops.OR) or node in tried:
            continue
        concat, walked = find_concat(node, users, roots)
        tried |= walked
        if concat is not None:
            concats[node] = concat
            roots.add(node)
    return concats


# ---- the passes: decision tables over the graph's nodes, in one order ---------------------------------------------
@dataclass
class Fusion:
    """What the fusion passes share: the graph, the scheduler's mode, and the decisions made so far."""

    sink: UOp
    fuse: bool
    budget: int
    order: list[UOp]
    named: dict[UOp, str | None]
    users: dict[UOp, list[UOp]]
    roots: set[UOp] = field(default_factory=set)
    concats: dict[UOp, Concat] = field(default_factory=dict)
    sizes: dict[UOp, int] = field(default_factory=dict)


def _realize(node: UOp, ctx: Fusion) -> None:
    ctx.roots.add(node)


def _realize_copy(node: UOp, ctx: Fusion) -> None:
    """A COPY is a root, and so is its source unless it already is a contiguous buffer or is computed from
    constants alone (then it only names the device, and the COPY's own kernel computes it)."""
    ctx.roots.add(node)
    src = node.src[0]
    if contiguous_buffer(src) is None and ctx.named[src] is not None:
        ctx.roots.add(strip_reshapes(src))


def _realize_when_unfused(node: UOp, ctx: Fusion) -> None:
    if not ctx.fuse:
        ctx.roots.add(node)


def _reduce_decision(node: UOp, ctx: Fusion) -> None:
    if node not in ctx.roots and not _reduce_fuses_up(node, ctx.users, ctx.roots):
        ctx.roots.add(node)


_COMPUTING: Final = tuple(op for op in Ops if op not in _LEAVES and op not in GroupOp.Movement and op is not Ops.SINK)

# Decision tables: each rule records a decision in the Fusion context and rewrites nothing (returns None), so every
# rule whose pattern matches a node has its say (a COPY is realized by rule 2 and, unfused, by its op too).
REALIZE: Final = PatternMatcher([
    (UPat((Ops.CONTIGUOUS, Ops.ASSIGN), name="node"), _realize, "rule 2: CONTIGUOUS and ASSIGN are realized"),
    (UPat(Ops.COPY, name="node"), _realize_copy, "rule 2: a COPY and its computed source are realized"),
    (UPat(_COMPUTING, name="node"), _realize_when_unfused, "unfused: one kernel per op that computes"),
], name="realize")
FUSE_REDUCES: Final = PatternMatcher([
    (UPat(Ops.REDUCE, name="node"), _reduce_decision, "rule 4: a REDUCE fuses into its one consumer kernel"),
], name="fuse_reduces")


def _decide(table: PatternMatcher, nodes: Iterable[UOp], ctx: Fusion) -> None:
    for node in nodes:
        table.rewrite(node, ctx)


def _outputs(ctx: Fusion) -> None:
    """Rule 1: the SINK's tensors are realized, under their RESHAPEs, unless already a contiguous buffer."""
    for out in ctx.sink.src:
        if contiguous_buffer(out) is None:
            ctx.roots.add(strip_reshapes(out))  # a RESHAPE of a row-major buffer is the same memory


def _realize_pass(ctx: Fusion) -> None:
    _decide(REALIZE, ctx.order, ctx)


def _concat_pass(ctx: Fusion) -> None:
    if ctx.fuse:
        ctx.concats = _find_concats(ctx.order, ctx.users, ctx.roots)


def _reduce_pass(ctx: Fusion) -> None:
    if ctx.fuse:  # top-down, so a REDUCE's decision sees whether the REDUCEs above it became roots
        _decide(FUSE_REDUCES, reversed(ctx.order), ctx)


def _recompute_pass(ctx: Fusion) -> None:
    if ctx.fuse:
        ctx.roots |= realize_repeated(ctx.order, ctx.roots)


def _budget_pass(ctx: Fusion) -> None:
    if ctx.fuse:
        joins = frozenset().union(*(c.joins for c in ctx.concats.values()))
        ctx.sizes = split_oversized(ctx.order, ctx.roots, ctx.users, joins, ctx.budget)


# the fusion passes, in the one order they run (the unfused scheduler stops after `realize`)
FUSION_PASSES: Final[list[tuple[str, Callable[[Fusion], None]]]] = [
    ("outputs", _outputs),        # rule 1
    ("realize", _realize_pass),   # rule 2, and the unfused scheduler's one kernel per op
    ("concats", _concat_pass),    # rule 6
    ("recompute", _recompute_pass),  # rule 8, before rule 4: a REDUCE then fuses into the value realized over it
    ("reduces", _reduce_pass),    # rule 4
    ("budget", _budget_pass),     # rule 7
]


def plan_fusion(sink: UOp, fuse: bool, budget: int = KERNEL_NODE_BUDGET) -> FusionPlan:
    """The nodes that get a kernel (rules 1-4, 6 and 7 above; one per computing op when not `fuse`)."""
    order = list(sink.toposort)
    ctx = Fusion(sink, fuse, budget, order, named_devices(order), users_of(order) if fuse else {})
    for _, run in FUSION_PASSES:
        run(ctx)
    return FusionPlan([n for n in order if n in ctx.roots], ctx.concats, ctx.sizes)


def find_roots(sink: UOp, fuse: bool) -> list[UOp]:
    """The nodes that get a kernel, in topological order (sources first)."""
    return plan_fusion(sink, fuse).roots
