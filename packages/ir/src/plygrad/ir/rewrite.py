"""The rewrite engine: patterns over UOps (`UPat`), rule tables (`PatternMatcher`) and `graph_rewrite`.

Every scheduler and codegen pass is written as a table of `(pattern, function)` rules, so a pass reads as data and
one engine owns the hard parts: walking graphs deeper than Python's recursion limit, rewriting shared subgraphs
once, reaching a true fixed point, and failing loudly (naming the rules) when rules loop.

This is the hot path of the compiler, so the inner loop is written for CPython: rules are dispatched by op through
a dict, each rule's pattern is compiled once to straight-line Python (the interpreter `UPat.match` stays as the
reference and the fallback), no generators run per node, and a node's source tuple is only rebuilt when one of
its sources changed.
"""

from __future__ import annotations

import enum
import inspect
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

from plygrad.ir.errors import RewriteError, RewriteLoopError
from plygrad.ir.ops import Ops
from plygrad.ir.uop import UOp
from plygrad.ir.upat import _ALL_OPS, RuleFn, Store, UPat
from plygrad.ir.upat_compile import compile_rule

__all__ = ["Order", "PatternMatcher", "Rule", "RuleFn", "Store", "UPat", "graph_rewrite"]


# ---- rules and pattern matchers ---------------------------------------------------------------------------------
def _rule_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", repr(fn))
    code = getattr(fn, "__code__", None)
    if name == "<lambda>" and code is not None:
        return f"<lambda at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}>"
    return str(name)


class Rule:
    """One rule: its pattern, its function, its name, whether the function takes `ctx`, and `match(uop, ctx)`,
    the pattern compiled to Python (or the interpreter) returning the rule's replacement or None."""

    __slots__ = ("compiled", "fn", "match", "name", "pattern", "takes_ctx")

    def __init__(self, pattern: UPat, fn: RuleFn, name: str | None = None) -> None:
        if not isinstance(pattern, UPat) or not callable(fn):
            raise RewriteError(f"a rule is (UPat, function[, name]), got ({pattern!r}, {fn!r})")
        self.pattern, self.fn = pattern, fn
        self.name = name if name is not None else _rule_name(fn)
        try:
            params = dict(inspect.signature(fn).parameters)
        except (TypeError, ValueError):  # builtins without a signature: assume keyword arguments work
            params = {}
        self.takes_ctx = "ctx" in params
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        names = pattern.names()
        missing = names - set(params)
        if params and missing and not takes_any:
            raise RewriteError(f"rule {self.name!r}: its pattern binds {sorted(missing)} but the function takes "
                               f"only {sorted(params)}; add those parameters (or **kwargs)")
        compiled = compile_rule(pattern, fn, self.takes_ctx)
        self.compiled = compiled is not None
        self.match: Callable[[UOp, Any], Any] = compiled if compiled is not None else self._interpret

    def _interpret(self, uop: UOp, ctx: Any) -> Any:
        for store in self.pattern.match(uop, {}):
            result = self.fn(ctx=ctx, **store) if self.takes_ctx else self.fn(**store)
            if result is not None and result is not uop:
                return result
        return None

    def apply(self, uop: UOp, ctx: Any) -> UOp | None:
        """The replacement this rule gives for `uop`, or None. A rule returning `uop` itself means no change."""
        result = self.match(uop, ctx)
        if result is not None and type(result) is not UOp:
            raise self.bad_result(uop, result)
        return result

    def bad_result(self, uop: UOp, result: Any) -> RewriteError:
        return RewriteError(f"rule {self.name!r} returned {type(result).__name__} ({result!r:.80}) for "
                            f"{uop.op!r}: a rule must return a UOp or None")


class PatternMatcher:
    """An ordered table of rewrite rules, dispatched by op: matching a node only tries the rules whose pattern
    can match its op. Rules are `(UPat, function)` or `(UPat, function, name)`; the function gets the pattern's
    named matches as keyword arguments (and `ctx=` if it has a `ctx` parameter) and returns a UOp or None."""

    def __init__(self, rules: Sequence[tuple[UPat, RuleFn] | tuple[UPat, RuleFn, str] | Rule],
                 name: str = "PatternMatcher") -> None:
        self.name = name
        self.rules: tuple[Rule, ...] = tuple(r if isinstance(r, Rule) else Rule(*r) for r in rules)
        self.by_op: dict[Ops, tuple[Rule, ...]] = {}
        table: dict[Ops, list[Rule]] = {}
        for rule in self.rules:
            for op in rule.pattern.ops if rule.pattern.ops is not None else _ALL_OPS:
                table.setdefault(op, []).append(rule)
        for op in _ALL_OPS:  # keep the table order of rules for each op
            if op in table:
                self.by_op[op] = tuple(table[op])

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher([*self.rules, *other.rules], name=f"{self.name}+{other.name}")

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"PatternMatcher({self.name!r}, {len(self.rules)} rules)"

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The first replacement any rule gives for `uop` (trying rules in table order), or None."""
        for rule in self.by_op.get(uop.op, ()):
            result = rule.apply(uop, ctx)
            if result is not None:
                return result
        return None


# ---- graph_rewrite ------------------------------------------------------------------------------------------------
class Order(enum.Enum):
    """When a node is rewritten relative to its sources."""

    BOTTOM_UP = "bottom_up"  # sources first, then the node rebuilt on them, to a fixed point
    TOP_DOWN = "top_down"  # the node to a fixed point first, then its sources, then the rebuilt node again


_MIN_STEP_LIMIT: Final = 100_000
_STEPS_PER_NODE: Final = 100


# A frame is a node being rewritten: [original node, its current form, the chain of forms it went through with
# the rule that produced each (None until a rule fires; it detects a rule cycle at once)]. A plain list, not a
# class: one is allocated per node, and a list is the cheapest mutable record CPython builds.
_NODE, _CUR, _CHAIN = 0, 1, 2
_Frame = list[Any]


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, order: Order = Order.BOTTOM_UP,
                  max_steps: int | None = None) -> UOp:
    """Rewrite the graph under `root` with `pm` until no rule matches any node of the result.

    BOTTOM_UP: a node's sources are rewritten first, then the node rebuilt on its new sources is rewritten to a
    fixed point (a replacement's new sources are rewritten too). TOP_DOWN: a node is rewritten to a fixed point
    before its sources are visited, then its sources, then the rebuilt node again while anything changes.
    Shared subgraphs are rewritten once. A rule cycle raises RewriteLoopError at once; more than `max_steps` rule
    firings (default: max(100_000, 100 * nodes)) raise it too, naming the last rules that fired.
    """
    return _Rewriter(pm, ctx, order is Order.TOP_DOWN, max_steps).run(root)


class _Rewriter:
    def __init__(self, pm: PatternMatcher, ctx: Any, top_down: bool, max_steps: int | None) -> None:
        self.by_op = pm.by_op
        self.ctx = ctx
        self.top_down = top_down
        self.done: dict[UOp, UOp] = {}  # node -> its final rewritten form (results map to themselves)
        self.active: set[UOp] = set()  # nodes whose rewrite is in progress (on the stack)
        self.steps = 0
        self.max_steps = max_steps
        self.limit = max_steps if max_steps is not None else _MIN_STEP_LIMIT
        self.recent: deque[str] = deque(maxlen=8)
        self.root: UOp | None = None

    def _fire(self, uop: UOp) -> tuple[UOp, Rule] | None:
        """The first rule that fires on `uop`, with its replacement; counts the step."""
        rules = self.by_op.get(uop.op)
        if rules is None:
            return None
        ctx = self.ctx
        for rule in rules:
            result = rule.match(uop, ctx)
            if result is not None:
                if type(result) is not UOp:
                    raise rule.bad_result(uop, result)
                self.steps += 1
                self.recent.append(rule.name)
                if self.steps > self.limit:
                    self._over_limit()
                return result, rule
        return None

    def _over_limit(self) -> None:
        if self.max_steps is None and self.root is not None and self.limit == _MIN_STEP_LIMIT:
            nodes = sum(1 for _ in self.root.sparents())
            self.limit = max(_MIN_STEP_LIMIT, _STEPS_PER_NODE * nodes)
            if self.steps <= self.limit:
                return
        raise RewriteLoopError(f"graph_rewrite: more than {self.limit} rule firings, the rules probably never "
                               f"reach a fixed point; last rules fired: {', '.join(self.recent)}")

    def _cycle(self, chain: dict[UOp, str], again: UOp, rule: str) -> RewriteLoopError:
        forms = list(chain.items())
        start = next(i for i, (n, _) in enumerate(forms) if n is again)
        rules = [r for _, r in forms[start + 1:]] + [rule]
        return RewriteLoopError(f"graph_rewrite: rules rewrite {again.op!r} back into itself through the cycle "
                                f"{' -> '.join(rules)}; make one of them stop (e.g. require a canonical order)")

    def _advance(self, frame: _Frame, new: UOp, rule: str) -> None:
        """Record that `rule` rewrote the frame's current form into `new`; a form seen before is a rule cycle."""
        chain: dict[UOp, str] | None = frame[_CHAIN]
        if chain is None:
            chain = frame[_CHAIN] = {frame[_NODE]: ""}
            if frame[_CUR] is not frame[_NODE]:
                chain[frame[_CUR]] = "(sources rewritten)"
        if new in chain:
            raise self._cycle(chain, new, rule)
        chain[new] = rule
        frame[_CUR] = new

    def _finish(self, frame: _Frame, result: UOp) -> None:
        done = self.done
        done[frame[_NODE]] = result
        done[result] = result
        done[frame[_CUR]] = result
        if frame[_CHAIN] is not None:
            for form in frame[_CHAIN]:
                done[form] = result
        self.active.discard(frame[_NODE])

    def _to_fixed_point(self, frame: _Frame) -> bool:
        """Apply rules to the frame's current form until none fires. False when the result is already known (the
        frame is then finished)."""
        done = self.done
        while True:
            fired = self._fire(frame[_CUR])
            if fired is None:
                return True
            new, rule = fired
            known = done.get(new)
            if known is not None:
                self._finish(frame, known)
                return False
            self._advance(frame, new, rule.name)

    def _in_progress(self, node: UOp) -> RewriteLoopError:
        return RewriteLoopError(f"graph_rewrite: rewriting {node.op!r} needs the result of rewriting itself (a rule "
                                f"put a node into its own replacement); last rules fired: {', '.join(self.recent)}")

    def run(self, root: UOp) -> UOp:
        self.root = root
        done, active, top_down, by_op, ctx = self.done, self.active, self.top_down, self.by_op, self.ctx
        stack: list[Any] = [root]  # a UOp to visit, or a frame whose sources are rewritten
        pop, push = stack.pop, stack.append
        while stack:
            item = pop()
            if type(item) is UOp:
                # ---- first visit of a node: come back once its sources are rewritten ---------------------------
                if item in done:
                    continue
                if item in active:
                    raise self._in_progress(item)
                active.add(item)
                frame: _Frame = [item, item, None]
                if top_down and not self._to_fixed_point(frame):
                    continue
                push(frame)
                for s in reversed(frame[_CUR].src):
                    if s not in done:
                        push(s)
                continue
            # ---- every source of the frame's current form is rewritten: rebuild it, then rewrite it ---------------
            frame = item
            cur: UOp = frame[_CUR]
            src = cur.src
            if src:
                new_src = tuple(map(done.__getitem__, src))
                if new_src != src:
                    rebuilt = UOp(cur.op, cur.dtype, new_src, cur.arg)
                    known = done.get(rebuilt)
                    if known is not None:
                        self._finish(frame, known)
                        continue
                    if rebuilt in active:
                        raise self._in_progress(rebuilt)
                    chain = frame[_CHAIN]
                    if chain is not None:
                        if rebuilt in chain:
                            raise self._cycle(chain, rebuilt, "(sources rewritten)")
                        chain[rebuilt] = "(sources rewritten)"
                    frame[_CUR] = cur = rebuilt
                elif top_down:  # at a fixed point before its sources were visited, and they did not change
                    self._finish(frame, cur)
                    continue
            elif top_down:
                self._finish(frame, cur)
                continue
            if top_down:
                if not self._to_fixed_point(frame):
                    continue
            else:
                # the common case inline: try the rules of this op once
                rules = by_op.get(cur.op)
                new = None
                if rules is not None:
                    for rule in rules:
                        new = rule.match(cur, ctx)
                        if new is not None:
                            break
                if new is None:
                    node = frame[_NODE]
                    done[node] = done[cur] = cur
                    if frame[_CHAIN] is not None:
                        for form in frame[_CHAIN]:
                            done[form] = cur
                    active.discard(node)
                    continue
                if type(new) is not UOp:
                    raise rule.bad_result(cur, new)
                self.steps += 1
                self.recent.append(rule.name)
                if self.steps > self.limit:
                    self._over_limit()
                known = done.get(new)
                if known is not None:
                    self._finish(frame, known)
                    continue
                self._advance(frame, new, rule.name)
            push(frame)
            for s in reversed(frame[_CUR].src):
                if s not in done:
                    push(s)
        return done[root]
