"""Linearization: the lowered graph as a flat, ordered list of UOps with explicit loop structure.

Each value is placed in the innermost loop it needs (its loop scope), which hoists loop-invariant code for free;
loops form a tree whose bodies are ordered topologically (ties keep the graph's order). The list uses `RANGE` and
`END(RANGE)` for loops, `IF(gate)`, the store, `ENDIF` for a gated STORE (the ALU statements only that store uses
move inside the IF: `_sink_into_ifs`), and ALU, CAST, BITCAST, LOAD, STORE statements. Constants, parameters,
variables, INDEX, RANGE, DEFINE_REG and END markers are rendered inline, not statements. The loop tree is walked
with an explicit stack. docs/codegen.md §1, "Linearization".
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.scope import loop_scopes
from plygrad.ir import AddrSpace, AxisType, GroupOp, Ops, PtrDType, UOp, dtypes

INLINE_OPS: Final = frozenset({Ops.CONST, Ops.PARAM, Ops.DEFINE_VAR, Ops.INDEX, Ops.RANGE, Ops.DEFINE_REG,
                               Ops.END, Ops.SINK})
# output loops nest in this order (then by axis id): a BLOCK loop (block.py) inside the threads, around the rest
_TYPE_RANK: Final = {AxisType.THREAD: 0, AxisType.GLOBAL: 1, AxisType.LOCAL: 2, AxisType.BLOCK: 3, AxisType.LOOP: 4}

Path = tuple[UOp, ...]


def _range_depths(root: UOp, scopes: dict[UOp, frozenset[UOp]]) -> dict[UOp, int]:
    """How deep each range nests: 0 for an output loop, 1 + the deepest loop open around the reduce it closes.

    An END closing ranges sits inside the ranges still open at it. Later ENDs enclose earlier ones, so walking
    the graph backwards sees outer loops first.
    """
    depth: dict[UOp, int] = {}
    for node in reversed(root.toposort):
        if node.op is Ops.END:
            level = 1 + max((depth.get(r, 0) for r in scopes[node]), default=-1)
            for r in node.src[1:]:
                depth[r] = max(depth.get(r, 0), level)
    return depth


def _enclosing(root: UOp, scopes: dict[UOp, frozenset[UOp]],
               key: Callable[[UOp], tuple[int, int, int]]) -> dict[UOp, set[UOp]]:
    """For each range, the ranges whose loops must be open around it.

    A loop nest is a chain: the ranges a global STORE depends on nest in key order, and the ranges an END closes
    nest in key order inside the ranges open at the END. A value that needs only an inner range must therefore be
    computed inside all of the ranges around it.
    """
    outer: dict[UOp, set[UOp]] = {}
    for node in root.toposort:
        if node.op is Ops.END:
            around, chain = set(scopes[node]), [r for r in node.src[1:] if r.op is Ops.RANGE]
        elif node.op is Ops.STORE and _is_global(node.src[0].dtype):
            around, chain = set(), list(scopes[node])
        else:
            continue
        for r in sorted(chain, key=key):
            outer.setdefault(r, set()).update(around)
            around.add(r)
    return outer


def _deps(node: UOp) -> Iterable[UOp]:
    """The statements `node` reads, looking through inline nodes."""
    stack = list(node.src)
    seen: set[UOp] = set()
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        if s.op in INLINE_OPS:
            stack.extend(s.src)
        else:
            yield s


def _order_block(path: Path, items: dict[object, list[UOp]], where: dict[UOp, Path],
                 order: dict[UOp, int]) -> list[object]:
    """Topological order of one loop body's items: its statements (keyed by the node) and child loops (keyed by
    their path). Kahn's algorithm, earliest graph position first."""
    depth = len(path)

    def item_of(n: UOp) -> object | None:
        p = where.get(n)
        if p is None or p[:depth] != path:
            return None  # an enclosing loop's statement: already emitted
        return n if len(p) == depth else p[:depth + 1]

    keys = list(items)
    deps: dict[object, set[object]] = {k: set() for k in keys}
    users: dict[object, list[object]] = {k: [] for k in keys}
    for key in keys:
        for n in items[key]:
            for d in _deps(n):
                target = item_of(d)
                if target is not None and target != key and target not in deps[key]:
                    deps[key].add(target)
                    users[target].append(key)
    priority = {k: min(order[n] for n in items[k]) for k in keys}
    ready = [(priority[k], i, k) for i, k in enumerate(keys) if not deps[k]]
    index = {k: i for i, k in enumerate(keys)}
    heapq.heapify(ready)
    result: list[object] = []
    while ready:
        _, _, key = heapq.heappop(ready)
        result.append(key)
        for user in users[key]:
            deps[user].discard(key)
            if not deps[user]:
                heapq.heappush(ready, (priority[user], index[user], user))
    if len(result) != len(keys):
        raise CodegenError("linearize: the loops of this kernel depend on each other in a cycle (a REDUCE whose "
                           "loop also computes a value it needs); give each REDUCE its own RANGE")
    return result


class LoopNest:
    """Where the statements of a lowered kernel go: `path(node)` is the chain of loops open around `node`, outermost
    first (its loop scope closed under the enclosing rules above), in the order they nest."""

    def __init__(self, sink: UOp) -> None:
        self.scopes = loop_scopes(sink)
        self.depth = _range_depths(sink, self.scopes)
        self.outer = _enclosing(sink, self.scopes, self.range_key)

    def range_key(self, r: UOp) -> tuple[int, int, int]:
        return (self.depth.get(r, 0), _TYPE_RANK.get(r.arg[1], 5), int(r.arg[0]))

    def closure(self, scope: frozenset[UOp]) -> Path:
        full = set(scope)
        stack = list(scope)
        while stack:
            for o in self.outer.get(stack.pop(), ()):
                if o not in full:
                    full.add(o)
                    stack.append(o)
        return tuple(sorted(full, key=self.range_key))

    def path(self, node: UOp) -> Path:
        return self.closure(self.scopes[node])


def linearize(sink: UOp) -> list[UOp]:
    """The statements of the lowered kernel `sink` in execution order (see the module docstring)."""
    nest = LoopNest(sink)
    scopes, range_key, closure = nest.scopes, nest.range_key, nest.closure
    order = {n: i for i, n in enumerate(sink.toposort)}
    where: dict[UOp, Path] = {}
    blocks: dict[Path, list[UOp]] = {(): []}
    children: dict[Path, set[Path]] = {(): set()}
    for node in sink.toposort:
        if node.op in INLINE_OPS:
            continue
        path = closure(scopes[node])
        where[node] = path
        blocks.setdefault(path, []).append(node)
        for i in range(len(path)):  # make every enclosing loop exist
            parent, child = path[:i], path[:i + 1]
            blocks.setdefault(child, [])
            children.setdefault(parent, set()).add(child)
            children.setdefault(child, set())

    def subtree_nodes(path: Path) -> list[UOp]:
        found: list[UOp] = []
        stack = [path]
        while stack:
            p = stack.pop()
            found.extend(blocks[p])
            stack.extend(children[p])
        return found

    out: list[UOp] = []
    # explicit stack of (path, remaining ordered items); a child loop pushes a frame, its END is emitted on pop
    stack: list[tuple[Path, list[object]]] = []

    def open_block(path: Path) -> None:
        items: dict[object, list[UOp]] = {n: [n] for n in blocks[path]}
        for child in sorted(children[path], key=lambda p: range_key(p[-1])):
            items[child] = [child[-1], *subtree_nodes(child)]
        stack.append((path, list(reversed(_order_block(path, items, where, order)))))

    open_block(())
    while stack:
        path, pending = stack[-1]
        if not pending:
            stack.pop()
            if path:
                out.append(UOp(Ops.END, dtypes.void, (path[-1],)))
            continue
        item = pending.pop()
        if isinstance(item, tuple):
            out.append(item[-1])
            open_block(item)
        else:
            assert isinstance(item, UOp)
            out.extend(_statement(item))
    return _sink_into_ifs(out)


# statements without side effects or cross-lane semantics, which may run inside an IF instead of before it
_SINKABLE: Final = GroupOp.ALU | GroupOp.Cast | {Ops.VECTORIZE, Ops.GEP}


def _sink_into_ifs(out: list[UOp]) -> list[UOp]:
    """`out` with each gated store's own statements moved inside its IF: a sinkable statement between the last
    loop boundary (RANGE or END) and the IF whose every user is the IF's store or another such statement. Their
    order is kept, so every value is still computed before it is used."""
    ifs = [p for p, n in enumerate(out) if n.op is Ops.IF]
    if not ifs:
        return out
    users: dict[UOp, set[UOp]] = {}
    for n in out:
        for d in _deps(n) if n.op is not Ops.IF else (n.src[0],):
            users.setdefault(d, set()).add(n)
    moved: dict[int, list[UOp]] = {}
    taken: set[UOp] = set()
    for p in ifs:
        body: set[UOp] = set()
        q = p + 1
        while out[q].op is not Ops.ENDIF:
            body.add(out[q])
            q += 1
        chosen: list[UOp] = []
        for k in range(p - 1, -1, -1):
            s = out[k]
            if s.op is Ops.RANGE or s.op is Ops.END:
                break
            if s.op in _SINKABLE and s not in taken and users.get(s, set()) <= body:
                chosen.append(s)
                body.add(s)
                taken.add(s)
        if chosen:
            moved[p] = chosen[::-1]
    result: list[UOp] = []
    for p, n in enumerate(out):
        if n in taken:
            continue
        result.append(n)
        result.extend(moved.get(p, ()))
    return result


def _statement(node: UOp) -> list[UOp]:
    """A gated STORE becomes IF / STORE / ENDIF; every other statement is itself."""
    if node.op is Ops.STORE and node.src[0].op is Ops.INDEX and len(node.src[0].src) == 3:
        index = node.src[0]
        cond = UOp(Ops.IF, dtypes.void, (index.src[2],))
        store = node.replace(src=(index.replace(src=index.src[:2]), *node.src[1:]))
        return [cond, store, UOp(Ops.ENDIF, dtypes.void, (cond,))]
    return [node]


def _is_global(dtype: object) -> bool:
    return isinstance(dtype, PtrDType) and dtype.addrspace is AddrSpace.GLOBAL
