"""Symbolic simplification: every rewrite must keep the value (checked against the reference interpreter on random
expressions and variable values), and the simplifier must actually simplify the index math codegen produces."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.evaluate import evaluate
from plygrad.ir.ops import Ops
from plygrad.ir.rewrite import Order, PatternMatcher, graph_rewrite
from plygrad.ir.symbolic import algebraic, constant_folding, index_math, simplify, symbolic
from plygrad.ir.symbolic import counter_bits as counter_bit_rules
from plygrad.ir.uop import UOp

PROPERTY = settings(deadline=None)  # max_examples comes from the hypothesis profile (conftest.py)


def idx(value: int) -> UOp:
    return UOp.const(dtypes.index, value)


def no_rule_fires(root: UOp, pm: PatternMatcher) -> bool:
    return all(pm.rewrite(node) is None for node in root.toposort)


# ---- random expressions ---------------------------------------------------------------------------------------------
class ExprBuilder:
    """Builds a random integer expression over a few variables with random ranges, from one seed."""

    def __init__(self, seed: int, dtype: DType = dtypes.index, nvars: int = 3, span: int = 20) -> None:
        self.rng = random.Random(seed)
        self.dtype = dtype
        self.vars: list[UOp] = []
        lo_min, hi_max = (-span, span) if dtype is dtypes.index else (int(dtype.min), int(dtype.max))
        for i in range(nvars):
            if dtype is dtypes.index:
                lo = self.rng.randint(0, 10) if self.rng.random() < 0.7 else self.rng.randint(lo_min, 0)
                hi = lo + self.rng.randint(0, span)
            else:  # fixed width: ranges anywhere, including next to the wraparound points
                a, b = self.rng.randint(lo_min, hi_max), self.rng.choice([self.rng.randint(lo_min, hi_max), lo_min,
                                                                          hi_max])
                lo, hi = min(a, b), max(a, b)
            self.vars.append(UOp.variable(f"v{i}", lo, hi, dtype))

    def const(self) -> UOp:
        if self.dtype is dtypes.index or self.rng.random() < 0.5:
            return UOp.const(self.dtype, self.rng.randint(-10, 20))
        return UOp.const(self.dtype, self.rng.choice([int(self.dtype.min), int(self.dtype.max), 1 << 20, -(1 << 20)]))

    def nonzero(self, depth: int) -> UOp:
        """An expression whose range excludes 0 (so dividing by it is defined)."""
        e = self.build(depth)
        if e.vmin > 0 or e.vmax < 0:
            return e
        return e.maximum(UOp.const(self.dtype, self.rng.randint(1, 5)))

    def build(self, depth: int) -> UOp:
        rng = self.rng
        if depth == 0 or rng.random() < 0.2:
            return rng.choice(self.vars) if rng.random() < 0.7 else self.const()
        a = self.build(depth - 1)
        choice = rng.randrange(12)
        if choice == 0:
            return a + self.build(depth - 1)
        if choice == 1:
            return a - self.build(depth - 1)
        if choice == 2:
            return a * self.build(depth - 1)
        if choice == 3:
            return a * UOp.const(self.dtype, rng.randint(1, 8))
        if choice == 4:
            return a // UOp.const(self.dtype, rng.randint(1, 8))
        if choice == 5:
            return a % UOp.const(self.dtype, rng.randint(1, 8))
        if choice == 6:
            return a // self.nonzero(depth - 1)
        if choice == 7:
            return a % self.nonzero(depth - 1)
        if choice == 8:
            return a.maximum(self.build(depth - 1))
        if choice == 9:
            return -a
        if choice == 10:
            return (a < self.build(depth - 1)).where(self.build(depth - 1), self.build(depth - 1))
        # the shape codegen produces: (x*stride + y) // c % d
        stride = rng.randint(1, 6)
        return ((a * UOp.const(self.dtype, stride) + self.build(depth - 1)) // UOp.const(self.dtype, stride)) % \
            UOp.const(self.dtype, rng.randint(1, 6))

    def env(self) -> dict[str, int]:
        values = {}
        for v in self.vars:
            name, lo, hi = v.arg
            values[name] = self.rng.choice([lo, hi, self.rng.randint(lo, hi)])
        return values


def check_same_values(seed: int, dtype: DType, nvars: int, depth: int) -> None:
    builder = ExprBuilder(seed, dtype, nvars)
    expr = builder.build(depth)
    simple = simplify(expr)
    for _ in range(5):
        env = builder.env()
        assert evaluate(simple, env) == evaluate(expr, env), f"seed {seed}: {expr} -> {simple} at {env}"


@PROPERTY
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(1, 5))
def test_simplify_keeps_index_values(seed: int, nvars: int, depth: int) -> None:
    check_same_values(seed, dtypes.index, nvars, depth)


@PROPERTY
@given(st.integers(0, 2**32), st.sampled_from([dtypes.int32, dtypes.uint32, dtypes.int8]), st.integers(1, 4))
def test_simplify_keeps_values_under_wraparound(seed: int, dtype: DType, depth: int) -> None:
    check_same_values(seed, dtype, 2, depth)


@PROPERTY
@given(st.integers(0, 2**32), st.sampled_from([dtypes.index, dtypes.int32, dtypes.uint8]), st.integers(1, 5))
def test_bounds_contain_every_value(seed: int, dtype: DType, depth: int) -> None:
    builder = ExprBuilder(seed, dtype, 3)
    expr = builder.build(depth)
    for node in (expr, simplify(expr)):
        for _ in range(5):
            value = evaluate(node, builder.env())
            assert node.vmin <= value <= node.vmax, f"seed {seed}: {node} = {value} outside [{node.vmin}, {node.vmax}]"


@PROPERTY
@given(st.integers(0, 2**32), st.integers(1, 5))
def test_simplify_reaches_a_fixed_point(seed: int, depth: int) -> None:
    simple = simplify(ExprBuilder(seed).build(depth))
    assert no_rule_fires(simple, symbolic)
    assert simplify(simple) is simple


@PROPERTY
@given(st.integers(0, 2**32), st.integers(1, 5))
def test_top_down_order_also_keeps_values_and_reaches_a_fixed_point(seed: int, depth: int) -> None:
    builder = ExprBuilder(seed)
    expr = builder.build(depth)
    simple = graph_rewrite(expr, symbolic, order=Order.TOP_DOWN)
    assert no_rule_fires(simple, symbolic)
    for _ in range(3):
        env = builder.env()
        assert evaluate(simple, env) == evaluate(expr, env)


@PROPERTY
@given(st.integers(0, 2**32), st.integers(1, 5))
def test_constant_expressions_fold_to_one_const(seed: int, depth: int) -> None:
    builder = ExprBuilder(seed, nvars=1)
    builder.vars = [UOp.const(dtypes.index, 7)]  # every leaf is a constant
    expr = builder.build(depth)
    simple = simplify(expr)
    assert simple.op is Ops.CONST
    assert simple.arg == evaluate(expr, {})


# ---- what simplification achieves ----------------------------------------------------------------------------------
x = UOp.variable("x", 0, 10)
y = UOp.variable("y", 0, 3)
z = UOp.variable("z", 0, 1000)
n = UOp.variable("n", -5, 5)


@pytest.mark.parametrize(("expr", "expected"), [
    pytest.param((x * 4 + y) // 4, x, id="(x*4+y)//4"),
    pytest.param((x * 4 + y) % 4, y, id="(x*4+y)%4"),
    pytest.param((y + x * 4) // 4, x, id="(y+x*4)//4"),
    pytest.param((x * 4 + y + 8) // 4, x + 2, id="(x*4+y+8)//4"),
    pytest.param((x * 12) // 4, x * 3, id="x*12//4"),
    pytest.param((x * 12) % 4, idx(0), id="x*12%4"),
    pytest.param((x * 4) // 8, x // 2, id="x*4//8"),
    pytest.param((z // 4) // 8, z // 32, id="x//a//b"),
    pytest.param((z % 12) % 4, z % 4, id="x%a%b"),
    pytest.param(y // 4, idx(0), id="y//4 bounded"),
    pytest.param(y % 4, y, id="y%4 bounded"),
    pytest.param(x * 3 + x * 5, x * 8, id="sum collection"),
    pytest.param(x + x, x * 2, id="x+x"),
    pytest.param(x * 3 + y + x * 5 + 2 + 4, x * 8 + y + 6, id="sum normalized"),
    pytest.param((x * 2048 + y * 128 + 12) % 9, (x * 5 + y * 2 + 3) % 9, id="mod reduces coefficients"),
    pytest.param((x * 18 + y * 9 + 27) % 9, idx(0), id="mod of multiples"),
    pytest.param(x + 1 + 2 + y + 3, x + y + 6, id="constants combine"),
    pytest.param(x - 3 + 5, x + 2, id="sub const"),
    pytest.param(1 + x, x + 1, id="constants last"),
    pytest.param(x < 11, UOp.const(dtypes.bool, True), id="cmp by bounds true"),
    pytest.param(x < 0, UOp.const(dtypes.bool, False), id="cmp by bounds false"),
    pytest.param(x.maximum(y - 5), x, id="max by bounds"),
    pytest.param((x < 20).where(x, y), x, id="where decided by bounds"),
    pytest.param(x - x, idx(0), id="x-x"),
    pytest.param(x.alu(Ops.NEG).alu(Ops.NEG), x, id="neg neg x"),
    pytest.param(x * 1 + 0, x, id="x*1+0"),
    pytest.param(x * 0, idx(0), id="x*0"),
    pytest.param(x // 1, x, id="x//1"),
    pytest.param(x % 1, idx(0), id="x%1"),
    pytest.param(n.maximum(n), n, id="max(x,x)"),
    pytest.param(n < n, UOp.const(dtypes.bool, False), id="x<x"),
    pytest.param((n < 0).where(n, n), n, id="where(c,x,x)"),
    pytest.param((idx(3) + 4) * 2 // 3, idx(4), id="const fold"),
    pytest.param(idx(3).cast(dtypes.float32), UOp.const(dtypes.float32, 3.0), id="cast of const"),
])
def test_simplifies_to(expr: UOp, expected: UOp) -> None:
    assert simplify(expr) is expected


def test_mod_does_not_reduce_coefficients_of_terms_that_may_be_negative() -> None:
    # (n*10 + 50) % 7 at n = -4 is 10 % 7 = 3; with coefficients reduced, (n*3 + 1) % 7 = -11 % 7 = -4 in C
    expr = (n * 10 + 50) % 7
    assert evaluate(simplify(expr), {"n": -4}) == 3


def test_division_of_a_negative_sum_is_not_split() -> None:
    # C truncation: (n*4 + y)//4 != n + y//4 when n*4 < 0 <= y (e.g. n=-1, y=3: -1//4 = 0, not -1)
    expr = (n * 4 + y) // 4
    assert simplify(expr).op is Ops.IDIV
    assert evaluate(simplify(expr), {"n": -1, "y": 3}) == 0


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_float_identities_that_nan_breaks_are_not_applied(dtype: DType) -> None:
    f = UOp.variable("i", 0, 10).cast(dtype)
    for expr in (f + 0.0, f * 0.0, f - f, f < f):
        assert simplify(expr) is expr
    assert simplify(f * 1.0) is f
    assert simplify(f - 0.0) is f


def test_floats_are_not_reassociated() -> None:
    f = UOp.variable("i", 0, 10).cast(dtypes.float32)
    expr = (f + 1.0) + 2.0
    assert simplify(expr) is expr


def test_float_constants_fold_at_their_dtype() -> None:
    third = UOp.const(dtypes.float32, 1.0) / UOp.const(dtypes.float32, 3.0)
    assert simplify(third).arg == float(np.float32(1.0) / np.float32(3.0))
    nan = UOp.const(dtypes.float32, 0.0) / UOp.const(dtypes.float32, 0.0)
    assert math.isnan(simplify(nan).arg)


def test_division_by_zero_folds_to_its_defined_value() -> None:
    assert simplify(idx(1) // idx(0)) is idx(0)
    assert simplify(idx(-7) % idx(0)) is idx(0)


class TestFixedWidthPolicy:
    """Identities that need unbounded integers apply to `index` only; wraparound-exact ones apply to all ints."""

    i32 = UOp.variable("a", 0, 2**31 - 1, dtypes.int32)
    small32 = UOp.variable("b", 0, 3, dtypes.int32)

    def test_div_split_is_index_only(self) -> None:
        expr = (self.i32 * 4 + self.small32) // 4  # a*4 wraps for large a: a + b//4 would be wrong
        assert simplify(expr).op is Ops.IDIV
        env = {"a": 2**30, "b": 3}
        assert evaluate(simplify(expr), env) == evaluate(expr, env) == 0

    def test_constant_combining_wraps(self) -> None:
        expr = (self.i32 + (2**31 - 1)) + 1
        assert simplify(expr) is self.i32 + UOp.const(dtypes.int32, -(2**31))
        assert evaluate(simplify(expr), {"a": 5}) == evaluate(expr, {"a": 5}) == -(2**31) + 5

    def test_bounds_do_not_decide_comparisons_that_may_wrap(self) -> None:
        expr = (self.i32 + 1) < 0  # wraps to INT_MIN for a = INT_MAX
        assert simplify(expr) is expr
        assert evaluate(expr, {"a": 2**31 - 1}) is True

    def test_bounded_mod_applies_to_fixed_width(self) -> None:
        assert simplify(self.small32 % 4) is self.small32


def test_tables_are_named_and_composed() -> None:
    assert symbolic.rules == constant_folding.rules + algebraic.rules + index_math.rules
    assert {constant_folding.name, algebraic.name, index_math.name} == {"constant_folding", "algebraic", "index_math"}


def test_deep_expression_simplifies_without_recursion() -> None:
    expr = x
    for _ in range(20_000):
        expr = (expr + 1) * 1
    assert simplify(expr) is x + 20_000


def test_graph_rewrite_with_only_folding_leaves_variables() -> None:
    expr = x + (idx(2) * 3)
    assert graph_rewrite(expr, constant_folding) is x + 6


@pytest.mark.parametrize(("src", "dtype", "op"), [
    (UOp.const(dtypes.int32, 1065353216), dtypes.float32, Ops.BITCAST),
    (UOp.const(dtypes.float32, -2.5), dtypes.int8, Ops.CAST),
    (UOp.const(dtypes.int32, 300), dtypes.uint8, Ops.CAST),
    (UOp.const(dtypes.int32, 0), dtypes.bool, Ops.CAST),
])
def test_casts_of_constants_fold_like_numpy(src: UOp, dtype: DType, op: Ops) -> None:
    value = np.array(src.arg, dtype=src.dtype.numpy_name)
    want = value.view(dtype.numpy_name) if op is Ops.BITCAST else value.astype(dtype.numpy_name)
    folded = simplify(UOp(op, dtype, (src,)))
    assert folded.op is Ops.CONST
    assert folded.arg == want.item()


# ---- a counter's bits back to its index (merge_bits and the cast lifting around it) --------------------------------
def counter_bits(x: UOp, n: int, dtype: DType) -> UOp:
    """What the frontend's `arange(n)` becomes in a kernel at position x: one padded constant per bit, summed in
    `dtype` (the top bit's `% 2` is gone when x // 2^(k-1) is already 0 or 1, as the symbolic rules leave it)."""
    k = max((n - 1).bit_length(), 1)
    total: UOp | None = None
    for j in range(k):
        bit = (x // idx(2**j)) % idx(2) if j else x % idx(2)
        term = (idx(0) < bit).where(UOp.const(dtype, 2**j), UOp.const(dtype, 0))
        total = term if total is None else total + term
    assert total is not None
    return total


@PROPERTY
@given(n=st.integers(2, 70000), dtype=st.sampled_from([dtypes.int32, dtypes.int64, dtypes.uint32]))
def test_a_counters_bits_fold_back_to_the_index(n: int, dtype: DType) -> None:
    x = UOp.variable("x", 0, n - 1)
    assert graph_rewrite(counter_bits(x, n, dtype), symbolic + counter_bit_rules, order=Order.BOTTOM_UP) \
        is x.cast(dtype)


@PROPERTY
@given(n=st.integers(2, 300), lo=st.integers(-300, 0), seed=st.integers(0, 2**16))
def test_bit_rules_keep_values_where_they_do_not_fold(n: int, lo: int, seed: int) -> None:
    """x may be negative, the dtype narrow (int8 wraps): whatever folds or not, every value stays the same."""
    x = UOp.variable("x", lo, lo + n)
    for dtype in (dtypes.int8, dtypes.int16, dtypes.int32):
        expr = counter_bits(x, n + 1, dtype)
        simple = graph_rewrite(expr, symbolic + counter_bit_rules, order=Order.BOTTOM_UP)
        rng = random.Random(seed)
        for value in {lo, lo + n, *(rng.randint(lo, lo + n) for _ in range(8))}:
            assert evaluate(simple, {"x": value}) == evaluate(expr, {"x": value}), (dtype, value)


def test_lifting_a_cast_stops_where_the_narrow_dtype_would_wrap() -> None:
    x = UOp.variable("x", 0, 200)
    rules = symbolic + counter_bit_rules
    wraps = x.cast(dtypes.int8) * UOp.const(dtypes.int8, 2)  # 200 * 2 leaves int8: the wrapping MUL must stay
    assert graph_rewrite(wraps, rules).op is Ops.MUL and graph_rewrite(wraps, rules).dtype is dtypes.int8
    fits = x.cast(dtypes.int16) * UOp.const(dtypes.int16, 2)
    assert graph_rewrite(fits, rules) is (x * idx(2)).cast(dtypes.int16)
    assert simplify(counter_bits(x, 201, dtypes.int32)) is not x.cast(dtypes.int32), "not in `symbolic` itself"
