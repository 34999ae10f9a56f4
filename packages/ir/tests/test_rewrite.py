"""The rewrite engine: what a pattern matches, how rules are called, and what graph_rewrite guarantees (fixed point,
memoization, loop detection, any depth)."""

from __future__ import annotations

from typing import Any

import pytest

from plygrad.ir.dtype import dtypes
from plygrad.ir.errors import RewriteError, RewriteLoopError
from plygrad.ir.ops import Ops
from plygrad.ir.rewrite import Order, PatternMatcher, UPat, graph_rewrite
from plygrad.ir.uop import UOp

x = UOp.variable("x", 0, 10)
y = UOp.variable("y", 0, 10)
f = UOp.variable("i", 0, 10).cast(dtypes.float32)
ORDERS = pytest.mark.parametrize("order", [Order.BOTTOM_UP, Order.TOP_DOWN])


def idx(value: int) -> UOp:
    return UOp.const(dtypes.index, value)


def matches(pat: UPat, uop: UOp) -> list[dict[str, UOp]]:
    return pat.match(uop, {})


def nothing_fires(root: UOp, pm: PatternMatcher) -> bool:
    return all(pm.rewrite(node) is None for node in root.toposort)


# ---- matching ------------------------------------------------------------------------------------------------------
def test_tuple_src_matches_in_order() -> None:
    pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c")))
    assert matches(pat, x + 1) == [{"a": x, "c": idx(1)}]
    assert matches(pat, 1 + x) == []


def test_list_src_matches_in_any_order() -> None:
    pat = UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("c")])
    assert matches(pat, x + 1) == [{"a": x, "c": idx(1)}]
    assert matches(pat, 1 + x) == [{"a": x, "c": idx(1)}]


def test_list_src_gives_every_match() -> None:
    pat = UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")])
    assert matches(pat, x + y) == [{"a": x, "b": y}, {"a": y, "b": x}]


def test_operator_overloads_build_commutative_patterns() -> None:
    pat = UPat.var("a") + UPat.cvar("c")
    assert matches(pat, 2 + x) == [{"a": x, "c": idx(2)}]
    assert matches(UPat.var("a") - UPat.cvar("c"), 2 - x) == []  # SUB keeps its order
    assert matches(UPat.var("a") // 2, x // 2) == [{"a": x}]
    assert matches(UPat.var("a") % 2, x // 2) == []
    assert matches(UPat.var("a") < UPat.var("b"), x < y) == [{"a": x, "b": y}]


def test_repeated_name_must_bind_the_same_node() -> None:
    pat = UPat.var("a") - UPat.var("a")
    assert matches(pat, x - x) == [{"a": x}]
    assert matches(pat, x - y) == []


def test_single_upat_src_matches_every_source() -> None:
    pat = UPat(Ops.ADD, src=UPat(Ops.CONST))
    assert len(matches(pat, idx(1) + 2)) == 1
    assert matches(pat, x + 2) == []


def test_dtype_filter() -> None:
    assert matches(UPat.var("a", dtypes.float32), f) == [{"a": f}]
    assert matches(UPat.var("a", dtypes.float32), x) == []
    assert len(matches(UPat.var("a", (dtypes.int32, dtypes.index)), x)) == 1


def test_arg_filter_tells_1_from_1_0_and_true() -> None:
    one = UPat.const(None, 1)
    assert len(matches(one, idx(1))) == 1
    assert matches(one, UOp.const(dtypes.float32, 1.0)) == []
    assert matches(one, UOp.const(dtypes.bool, True)) == []
    assert len(matches(UPat.const(None, 1.0), UOp.const(dtypes.float32, 1.0))) == 1


def test_op_set_filter() -> None:
    pat = UPat({Ops.ADD, Ops.MUL}, name="a")
    assert len(matches(pat, x + y)) == 1
    assert len(matches(pat, x * y)) == 1
    assert matches(pat, x - y) == []


def test_strict_length_unless_allow_any_len() -> None:
    where = (x < y).where(x, y)
    assert matches(UPat(Ops.WHERE, src=(UPat.var("c"),)), where) == []
    assert matches(UPat(Ops.WHERE, src=(UPat.var("c"),), allow_any_len=True), where) == [{"c": x < y}]


def test_any_tries_alternatives() -> None:
    pat = UPat.any(UPat(Ops.ADD, name="a"), UPat(Ops.MUL, name="a"))
    assert matches(pat, x * y) == [{"a": x * y}]
    assert matches(pat, x - y) == []


def test_upat_cannot_be_named_ctx() -> None:
    with pytest.raises(RewriteError, match="ctx"):
        UPat.var("ctx")


# ---- PatternMatcher ----------------------------------------------------------------------------------------------
def test_rules_are_tried_in_order_first_result_wins() -> None:
    pm = PatternMatcher([(UPat.var("a") + 1, lambda a: a), (UPat.var("a") + UPat.var("b"), lambda a, b: b)])
    assert pm.rewrite(x + 1) is x
    assert pm.rewrite(x + y) is y


def test_a_rule_returning_none_lets_the_next_rule_try() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, name="n"), lambda n: None), (UPat(Ops.ADD, name="n"), lambda n: idx(7))])
    assert pm.rewrite(x + y) is idx(7)


def test_dispatch_only_tries_rules_for_the_op() -> None:
    calls: list[str] = []

    def on_mul(n: UOp) -> None:
        calls.append("mul")

    pm = PatternMatcher([(UPat(Ops.MUL, name="n"), on_mul)])
    assert pm.rewrite(x + y) is None
    assert calls == []
    assert Ops.ADD not in pm.by_op


def test_ctx_is_passed_to_rules_that_take_it() -> None:
    seen: list[Any] = []

    def with_ctx(ctx: list[Any], a: UOp) -> None:
        ctx.append(a)

    pm = PatternMatcher([(UPat.var("a", dtypes.index), with_ctx), (UPat(Ops.ADD, name="a"), lambda a: None)])
    pm.rewrite(x, ctx=seen)
    assert seen == [x]


def test_bad_return_type_names_the_rule() -> None:
    def returns_int(a: UOp) -> Any:
        return 3

    pm = PatternMatcher([(UPat(Ops.ADD, name="a"), returns_int)])
    with pytest.raises(RewriteError, match=r"returns_int.*returned int"):
        graph_rewrite(x + y, pm)


def test_explicit_rule_name_appears_in_errors() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: "oops", "my_rule")])
    with pytest.raises(RewriteError, match="my_rule"):
        pm.rewrite(x + y)


def test_rule_function_missing_a_pattern_name_is_rejected_at_construction() -> None:
    with pytest.raises(RewriteError, match=r"binds \['b'\]"):
        PatternMatcher([(UPat.var("a") + UPat.var("b"), lambda a: a)])


def test_adding_matchers_concatenates_rules() -> None:
    first = PatternMatcher([(UPat.var("a") + 0, lambda a: a)], name="first")
    second = PatternMatcher([(UPat.var("a") * 1, lambda a: a)], name="second")
    both = first + second
    assert both.rules == first.rules + second.rules
    assert both.rewrite(x * 1) is x and both.rewrite(x + 0) is x


# ---- graph_rewrite -------------------------------------------------------------------------------------------------
identities = PatternMatcher([
    (UPat.var("a") + 0, lambda a: a),
    (UPat.var("a") * 1, lambda a: a),
    (UPat.var("a") - UPat.var("a"), lambda a: a.const_like(0)),
])


@ORDERS
def test_reaches_a_fixed_point(order: Order) -> None:
    expr = ((x + 0) * 1 + (y * 1 - y * 1)) * 1
    result = graph_rewrite(expr, identities, order=order)
    assert result is x
    assert nothing_fires(result, identities)


# a replacement exposes new matches both above (parent) and below (its own new sources)
exposing = PatternMatcher([
    (UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a + b * 0 if b.op is not Ops.CONST else None),
    (UPat.var("a") * 0, lambda a: a.const_like(0)),
    (UPat.var("a") + 0, lambda a: a),
])


@ORDERS
def test_replacements_sources_and_parents_are_rewritten(order: Order) -> None:
    # x*y -> x + y*0 -> x + 0 -> x; then the rebuilt parent x*y is rewritten the same way
    expr = (x * y) * (y * x) + 0
    result = graph_rewrite(expr, exposing, order=order)
    assert result is x
    assert nothing_fires(result, exposing)


@ORDERS
def test_shared_subgraph_is_rewritten_once(order: Order) -> None:
    calls: list[UOp] = []

    def count(a: UOp) -> UOp:
        calls.append(a)
        return a

    pm = PatternMatcher([(UPat.var("a") + 0, count)])
    shared = x + 0
    expr = (shared * 2) + (shared * 3) + shared
    assert graph_rewrite(expr, pm, order=order) is (x * 2) + (x * 3) + x
    assert calls == [x]


def test_bottom_up_rewrites_sources_before_the_node() -> None:
    seen: list[Ops] = []

    def record(n: UOp) -> None:
        seen.append(n.op)

    graph_rewrite((x + y) * 2, PatternMatcher([(UPat({Ops.ADD, Ops.MUL}, name="n"), record)]), order=Order.BOTTOM_UP)
    assert seen == [Ops.ADD, Ops.MUL]


def test_top_down_rewrites_the_node_before_its_sources() -> None:
    seen: list[Ops] = []

    def record(n: UOp) -> None:
        seen.append(n.op)

    graph_rewrite((x + y) * 2, PatternMatcher([(UPat({Ops.ADD, Ops.MUL}, name="n"), record)]), order=Order.TOP_DOWN)
    assert seen == [Ops.MUL, Ops.ADD]


def test_top_down_rewrite_can_remove_a_subtree_before_it_is_visited() -> None:
    visited: list[UOp] = []

    def record(n: UOp) -> None:
        visited.append(n)

    pm = PatternMatcher([(UPat.var("a") * 0, lambda a: a.const_like(0)), (UPat(Ops.ADD, name="n"), record)])
    assert graph_rewrite((x + y) * 0, pm, order=Order.TOP_DOWN) is idx(0)
    assert visited == []


@ORDERS
def test_rule_cycle_raises_at_once_naming_the_rules(order: Order) -> None:
    def swap(a: UOp, b: UOp) -> UOp:
        return b + a

    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), swap)])
    with pytest.raises(RewriteLoopError, match="swap -> swap"):
        graph_rewrite(x + y, pm, order=order, max_steps=10**9)


@ORDERS
def test_ever_growing_rule_hits_the_step_limit(order: Order) -> None:
    def bump(a: UOp, c: UOp) -> UOp:
        return a * (c.arg + 1)

    pm = PatternMatcher([(UPat.var("a") * UPat.cvar("c"), bump)])
    with pytest.raises(RewriteLoopError, match=r"more than 1000 rule firings.*bump"):
        graph_rewrite(x * 2, pm, order=order, max_steps=1000)


def test_default_step_limit_stops_a_growing_rule() -> None:
    def bump(a: UOp, c: UOp) -> UOp:
        return a * (c.arg + 1)

    with pytest.raises(RewriteLoopError, match="more than 100000 rule firings"):
        graph_rewrite(x * 2, PatternMatcher([(UPat.var("a") * UPat.cvar("c"), bump)]))


@ORDERS
def test_rule_putting_a_node_into_its_own_replacement_raises(order: Order) -> None:
    def wrap(n: UOp) -> UOp:
        return -n

    # bottom-up: the replacement's source is the node itself, a dependency cycle found at once; top-down rewrites
    # the growing node again and again before visiting sources, so the step limit stops it
    with pytest.raises(RewriteLoopError, match="wrap"):
        graph_rewrite(-x, PatternMatcher([(UPat(Ops.NEG, name="n"), wrap)]), order=order, max_steps=1000)


@ORDERS
def test_deep_chain_does_not_recurse(order: Order) -> None:
    expr = x
    for i in range(100_000):
        expr = expr + 0 if i % 2 else expr * 1
    assert graph_rewrite(expr, identities, order=order) is x


@ORDERS
def test_deep_chain_without_matches_is_returned_unchanged(order: Order) -> None:
    expr = x
    for i in range(100_000):
        expr = expr + (i % 7 + 1)
    assert graph_rewrite(expr, identities, order=order) is expr


@ORDERS
def test_ctx_reaches_rules_during_graph_rewrite(order: Order) -> None:
    def rename(ctx: dict[UOp, UOp], v: UOp) -> UOp | None:
        return ctx.get(v)

    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), rename)])
    assert graph_rewrite(x * y + x, pm, ctx={x: y}, order=order) is y * y + y


def test_graph_rewrite_of_a_node_without_rules_is_identity() -> None:
    assert graph_rewrite(x, PatternMatcher([])) is x


# ---- compiled patterns agree with the interpreter -------------------------------------------------------------------
def test_rules_are_compiled() -> None:
    assert all(rule.compiled for rule in identities.rules)


def test_pattern_over_every_source_with_names_uses_the_interpreter() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, src=UPat.var("a")), lambda a: a)])
    assert not pm.rules[0].compiled
    assert pm.rewrite(x + x) is x
    assert pm.rewrite(x + y) is None


AGREEMENT_PATTERNS = [
    UPat.var("a") + UPat.cvar("c"),
    UPat.var("a") - UPat.var("a"),
    (UPat.var("a") * UPat.cvar("c")) + (UPat.var("a") * UPat.cvar("d")),
    UPat(Ops.ADD, src=[UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("c")], name="inner"), UPat.var("b")]),
    UPat(Ops.WHERE, src=(UPat.var("c", dtypes.bool),), allow_any_len=True, name="w"),
    UPat.any(UPat(Ops.MUL, name="a"), UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(dtypes.index, 1)))),
    UPat(Ops.ADD, src=UPat(Ops.CONST), name="a"),
    UPat.var("a", (dtypes.int32, dtypes.index)) // UPat.const(None, 2),
]
AGREEMENT_NODES = [x + 1, 1 + x, x - x, x * 3 + x * 4, x * 3 + x * 3, (x + 2) + y, y + (x + 2), idx(1) + 2,
                   (x < y).where(x, y), x * y, x + 1 + 1, x // 2, x // 3, x, idx(4)]


@pytest.mark.parametrize("pattern", AGREEMENT_PATTERNS, ids=repr)
def test_compiled_pattern_calls_the_rule_as_the_interpreter_does(pattern: UPat) -> None:
    calls: list[tuple[str, dict[str, UOp]]] = []

    def record(**found: UOp) -> None:
        calls.append(("call", found))

    rule = PatternMatcher([(pattern, record)]).rules[0]
    assert rule.compiled
    for node in AGREEMENT_NODES:
        calls.clear()
        rule.match(node, None)
        compiled_calls = list(calls)
        calls.clear()
        for store in pattern.match(node, {}):
            record(**store)
        assert compiled_calls == calls, f"{pattern!r} on {node!r}"


def test_pattern_too_deep_to_compile_still_matches() -> None:
    pat = UPat.var("a")
    node = x
    for _ in range(150):  # deeper than CPython allows nested blocks
        pat = UPat(Ops.NEG, src=(pat,))
        node = node.alu(Ops.NEG)
    pm = PatternMatcher([(UPat(Ops.NEG, src=(pat,), name="n"), lambda n, a: a)])
    assert not pm.rules[0].compiled
    assert pm.rewrite(node.alu(Ops.NEG)) is x
