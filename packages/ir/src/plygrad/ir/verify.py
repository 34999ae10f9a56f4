"""Per-stage IR verification: `verify(uop, stage)` raises IRVerifyError naming the node and the rule it breaks.

Every boundary of docs/design.md §2 hands a graph over as bytes that may come from anywhere, so the reader verifies
what it decoded before any pass touches it. The rules are data: verify_graph.GRAPH_RULES gives every op's
structural row (source count, argument and dtype checks) and verify_stage.STAGES says, per stage, which op the
root is, which ops may appear and what each adds. This module only walks and reports, in one fixed order:

1. the root is the stage's root op;
2. each node, in topological order (sources before users): its dtype is a DType, its op is allowed in the stage,
   its source count fits, then its GRAPH checks, the stage's every-node checks and the stage's checks for the op;
3. the stage's whole-graph passes (shapes, one meaning per buffer id / PARAM index / variable name).

The walk is iterative (graphs deeper than the recursion limit are fine) and dispatches by op through one dict
lookup, so a 10k-node graph verifies in milliseconds. Nothing but IRVerifyError ever leaves `verify`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from plygrad.ir.dtype import DType
from plygrad.ir.errors import IRVerifyError
from plygrad.ir.ops import Ops
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.ir.verify_graph import GRAPH_RULES, Check, Row, describe_arity
from plygrad.ir.verify_stage import STAGES, StageSpec
from plygrad.ir.verify_values import dtype_word, show

__all__ = ["NodeVerifyError", "verify"]


class NodeVerifyError(IRVerifyError):
    """An IRVerifyError about one node, carried as `.node`, so a reader can point at it (deserialize turns it into
    the byte offset of that node's record). Catch IRVerifyError; this subclass only adds the node."""

    def __init__(self, message: str, node: UOp) -> None:
        super().__init__(message)
        self.node = node


class _Compiled(NamedTuple):
    """A stage's rules merged with the GRAPH rows once, at import, so the hot loop does one lookup per node."""

    spec: StageSpec
    rows: dict[Ops, Row]  # ops allowed below the root
    root_row: Row | None  # None: the root is checked like any node (GRAPH)


def _merge(graph: Row, every: tuple[Check, ...], min_src: int | None, max_src: int | None,
           checks: tuple[Check, ...]) -> Row:
    lo = graph.min_src if min_src is None else max(graph.min_src, min_src)
    hi = graph.max_src if max_src is None else min(graph.max_src, max_src)
    return Row(lo, hi, graph.checks + every + checks)


def _compile(spec: StageSpec) -> _Compiled:
    allowed = spec.ops if spec.ops is not None else {op: spec.root_rule for op in Ops}
    rows = {op: _merge(GRAPH_RULES[op], spec.every, rule.min_src, rule.max_src, rule.checks)
            for op, rule in allowed.items()}
    root_row = None
    if spec.root is not None:
        rule = spec.root_rule
        root_row = _merge(GRAPH_RULES[spec.root], spec.every, rule.min_src, rule.max_src, rule.checks)
    return _Compiled(spec, rows, root_row)


_COMPILED: Final[dict[Stage, _Compiled]] = {stage: _compile(spec) for stage, spec in STAGES.items()}


def verify(uop: UOp, stage: Stage) -> None:
    """Check that `uop` is a well-formed graph of `stage`; raise IRVerifyError naming the first broken rule.

    The message reads "STAGE: OP #i (dtype) <rule> [at path]", where #i is the node's position in topological
    order and the path leads from the root to it through `src` indices.
    """
    try:
        stage = Stage(stage)
    except (ValueError, TypeError):
        raise IRVerifyError(f"unknown IR stage {show(stage)}: use plygrad.ir.stage.Stage") from None
    if not isinstance(uop, UOp):
        raise IRVerifyError(f"{stage.name}: verify() checks a UOp, got {type(uop).__name__}")
    compiled = _COMPILED[stage]
    _check_root(uop, stage, compiled.spec)
    try:
        # a schedule's kernel bodies are verified as kernels on their own, by the SINK rule, so the walk stops there
        order = _walk(uop, stop_at_sink=stage is Stage.SCHEDULE)
    except IRVerifyError:
        raise
    except Exception as e:
        raise _internal_error(stage, e) from e
    _check_order(order, stage, compiled)


def verify_ordered(order: Sequence[UOp], stage: Stage) -> None:
    """`verify(order[-1], stage)` for a caller that already holds every node of the graph in a topological order:
    sources before users, each node once, every node reachable from the last (the root). The decoder holds its
    nodes so (plygrad.ir.serialize checks it), and skipping the walk saves an eighth of a fresh `deserialize`.

    Whether a graph is valid does not depend on the order, but which error comes first and its position #i do, so
    on a failure this re-runs `verify` on the root and raises exactly what it raises.
    """
    stage = Stage(stage)
    root = order[-1]
    if stage is Stage.SCHEDULE:  # its walk stops at kernel bodies: a different set of nodes than `order`
        verify(root, stage)
        return
    compiled = _COMPILED[stage]
    try:
        _check_root(root, stage, compiled.spec)
        _check_order(order, stage, compiled)
    except IRVerifyError as e:
        verify(root, stage)  # raises the error `verify` gives, with its positions
        raise IRVerifyError(f"{stage.name}: the verifier disagrees with itself on this graph (please report it); "
                            f"treat the graph as invalid: {e}") from e


def _check_root(root: UOp, stage: Stage, spec: StageSpec) -> None:
    if spec.root is not None and root.op is not spec.root:
        raise NodeVerifyError(f"{stage.name}: the root must be a {spec.root.name}, got {_op_name(root)}: pass the "
                              f"graph's {spec.root.name}, or verify it against the stage it belongs to", root)


def _check_order(order: Sequence[UOp], stage: Stage, compiled: _Compiled) -> None:
    """Steps 2 and 3 of the module docstring over the walk `order` (the root last)."""
    try:
        _check_nodes(order, stage, compiled)
        for graph_pass in compiled.spec.passes:
            found = graph_pass(order)
            if found is not None:
                raise _node_error(stage, order, found[0], found[1])
    except IRVerifyError:
        raise
    except Exception as e:
        raise _internal_error(stage, e) from e


def _internal_error(stage: Stage, e: Exception) -> IRVerifyError:
    """A verifier bug must still not crash a reader of untrusted bytes."""
    return IRVerifyError(f"{stage.name}: internal verifier error {type(e).__name__}: {e} (please report this "
                         "graph); treat the graph as invalid")


def _check_nodes(order: Sequence[UOp], stage: Stage, compiled: _Compiled) -> None:
    rows_get, root_row = compiled.rows.get, compiled.root_row
    last = len(order) - 1
    for i, node in enumerate(order):
        if not isinstance(node.dtype, DType):
            raise _node_error(stage, order, i, f"has dtype {show(node.dtype)}, which is not a DType")
        row = rows_get(node.op) if i != last or root_row is None else root_row
        if row is None:
            raise _node_error(stage, order, i, _not_allowed(stage, node, compiled.spec))
        min_src, max_src, checks = row
        n = len(node.src)
        if n < min_src or n > max_src:
            raise _node_error(stage, order, i, f"must have {describe_arity(row)}, got {n}")
        for check in checks:
            problem = check(node)
            if problem is not None:
                raise _node_error(stage, order, i, problem)


def _not_allowed(stage: Stage, node: UOp, spec: StageSpec) -> str:
    op: object = node.op
    if not isinstance(op, Ops):
        return f"has op {show(op)}, which is not an Ops member"
    if op is spec.root:
        return f"may only be the root of a {stage.name} graph"
    allowed = ", ".join(sorted(op.name for op in spec.ops or ()))
    return f"does not belong in a {stage.name} graph (allowed below the root: {allowed})"


def _walk(root: UOp, stop_at_sink: bool) -> list[UOp]:
    """The nodes under `root` in topological order, checking on the way that every source is a UOp.

    Uses the node's cached `toposort` where it can; a graph with a malformed `src` (or a schedule, whose walk stops
    at kernel bodies) takes the explicit walk below.
    """
    if not stop_at_sink:
        try:
            return list(root.toposort)
        except (AttributeError, TypeError):
            pass  # some src is not a tuple of UOps: find and name it below
    order: list[UOp] = []
    visited: set[int] = set()
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        if stop_at_sink and node.op is Ops.SINK:
            continue
        src: object = node.src
        if type(src) is not tuple or not all(isinstance(s, UOp) for s in src):
            raise NodeVerifyError(f"GRAPH: {_op_name(node)} has sources {show(src)}: src must be a tuple of UOps", node)
        for s in reversed(src):
            if id(s) not in visited:
                stack.append((s, False))
    return order


# ---- messages --------------------------------------------------------------------------------------------------
def _op_name(node: UOp) -> str:
    op: object = node.op
    return op.name if isinstance(op, Ops) else show(op)


def _node_error(stage: Stage, order: Sequence[UOp], index: int, problem: str) -> NodeVerifyError:
    """"STAGE: OP #index (dtype) problem [at path]" about `order[index]`."""
    node = order[index]
    dtype = dtype_word(node.dtype) if isinstance(node.dtype, DType) else show(node.dtype)
    return NodeVerifyError(f"{stage.name}: {_op_name(node)} #{index} ({dtype}) {problem} [at {_path(order[-1], node)}]",
                           node)


_PATH_HEAD: Final = 3
_PATH_TAIL: Final = 4


def _path(root: UOp, target: UOp) -> str:
    """The shortest chain of `src` hops from the root to `target`, e.g. "SINK.src[0] > STORE.src[1] > LOAD".

    Only computed for an error, so a breadth-first search from the root is cheap enough; long chains are cut in
    the middle.
    """
    parent: dict[int, tuple[UOp, int]] = {}
    frontier, seen = [root], {id(root)}
    while frontier and id(target) not in seen:
        nxt: list[UOp] = []
        for node in frontier:
            src: object = node.src
            for k, s in enumerate(src if type(src) is tuple else ()):
                if isinstance(s, UOp) and id(s) not in seen:
                    seen.add(id(s))
                    parent[id(s)] = (node, k)
                    nxt.append(s)
        frontier = nxt
    hops: list[str] = []
    node = target
    while node is not root and id(node) in parent:
        up, k = parent[id(node)]
        hops.append(f"{_op_name(up)}.src[{k}]")
        node = up
    hops.reverse()
    if len(hops) > _PATH_HEAD + _PATH_TAIL:
        hops = [*hops[:_PATH_HEAD], f"... {len(hops) - _PATH_HEAD - _PATH_TAIL} more", *hops[-_PATH_TAIL:]]
    return " > ".join([*hops, _op_name(target)]) if hops else f"the root {_op_name(target)}"
