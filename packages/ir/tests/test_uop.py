"""`UOp` (`plygrad.ir.uop`): hash-consing, immutability, the weak node cache, graph walks on random and very deep
graphs, the Python operator overloads, and the soundness of interval analysis (vmin/vmax) against exact evaluation.
"""

from __future__ import annotations

import gc
import math
import struct
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.ir.dtype import ConstType, DType, dtypes
from plygrad.ir.errors import DTypeError
from plygrad.ir.ops import AxisType, Ops
from plygrad.ir.records import BufferRef
from plygrad.ir.scalar import exec_alu, truncate
from plygrad.ir.uop import UOp

DEEP = 200_000  # far past Python's recursion limit: every walk must be iterative


def nan_with_payload(payload: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0])


# ---- hash-consing ------------------------------------------------------------------------------------------------
def test_same_arguments_give_the_same_object() -> None:
    x = UOp.variable("x", 0, 10)
    assert UOp(Ops.ADD, dtypes.index, (x, x)) is UOp(Ops.ADD, dtypes.index, (x, x))
    assert UOp.const(dtypes.float32, 1.5) is UOp.const(dtypes.float32, 1.5)
    assert (x + 1) * 2 is (x + 1) * 2


@pytest.mark.parametrize(("a", "b"), [
    (0.0, -0.0), (1, 1.0), (1, True), (1.0, True), (0, False), (Ops.ADD, int(Ops.ADD)), ((1, 2), (1, 2.0)),
    ((Ops.ADD, (0,)), (int(Ops.ADD), (0,))), ((0.0,), (-0.0,)), ((True,), (1,)), (nan_with_payload(1), math.nan),
], ids=repr)
def test_args_python_calls_equal_are_different_nodes(a: Any, b: Any) -> None:
    first, second = UOp(Ops.NOOP, dtypes.void, (), a), UOp(Ops.NOOP, dtypes.void, (), b)
    assert first is not second
    assert type(first.arg) is type(a) and type(second.arg) is type(b)


@pytest.mark.parametrize("payload", [0, 1, 0xDEAD])
def test_nan_constants_with_the_same_bits_are_shared(payload: int) -> None:
    a, b = nan_with_payload(payload), nan_with_payload(payload)
    assert a is not b and a != a  # two distinct NaN objects that Python does not consider equal
    assert UOp(Ops.CONST, dtypes.float64, (), a) is UOp(Ops.CONST, dtypes.float64, (), b)


def test_records_and_dtypes_as_args_hash_cons_by_value() -> None:
    def make() -> UOp:
        return UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(3, "CPU", 16))

    assert make() is make()
    assert make() is not UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(3, "CPU", 17))
    pointer = dtypes.float32.ptr(4)
    assert UOp(Ops.NOOP, dtypes.void, (), pointer) is UOp(Ops.NOOP, dtypes.void, (), dtypes.float32.ptr(4))


def test_dtype_and_sources_are_part_of_identity() -> None:
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    assert UOp(Ops.ADD, dtypes.index, (x, y)) is not UOp(Ops.ADD, dtypes.index, (y, x))
    assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.int64, 1)


# ---- immutability ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["op", "dtype", "src", "arg", "anything"])
def test_uops_are_immutable(field: str) -> None:
    node = UOp.const(dtypes.int32, 3)
    with pytest.raises(AttributeError, match="immutable"):
        setattr(node, field, None)
    with pytest.raises(AttributeError, match="immutable"):
        delattr(node, field)
    assert node.arg == 3


def test_copy_gives_the_same_object() -> None:
    import copy

    node = UOp.variable("x", 0, 4) + 1
    assert copy.copy(node) is node and copy.deepcopy(node) is node


# ---- the weak cache -----------------------------------------------------------------------------------------------
def test_unreferenced_nodes_leave_the_cache() -> None:
    base = UOp.variable("weak_cache_test", 0, 1000)
    gc.collect()
    cached_before = len(UOp._cache)
    nodes = [base + i for i in range(2000)]
    assert len(UOp._cache) >= cached_before + 2000
    alive = [weakref.ref(n) for n in nodes]
    del nodes
    gc.collect()
    assert all(ref() is None for ref in alive), "dropped nodes are still alive: the cache keeps them"
    assert len(UOp._cache) <= cached_before, "dead nodes left entries in the cache"
    assert UOp.variable("weak_cache_test", 0, 1000) is base


def test_a_node_lives_while_a_consumer_holds_it() -> None:
    leaf = UOp.variable("kept_by_consumer", 0, 9)
    consumer = leaf * 3
    leaf_key = leaf._key
    del leaf
    gc.collect()
    assert leaf_key in UOp._cache
    assert UOp.variable("kept_by_consumer", 0, 9) is consumer.src[0]


def test_a_rebuilt_node_after_collection_is_a_new_working_node() -> None:
    key = UOp.variable("rebuilt", 0, 3)._key
    gc.collect()
    assert key not in UOp._cache
    again = UOp.variable("rebuilt", 0, 3)
    assert UOp._cache[key]() is again and again.vmax == 3


# ---- graph walks --------------------------------------------------------------------------------------------------
@st.composite
def random_dags(draw: st.DrawFn) -> list[UOp]:
    """Nodes in creation order; each takes 0-3 earlier nodes as sources (repeats allowed), so the graph shares."""
    tag = draw(st.integers(0, 2**32))
    nodes: list[UOp] = []
    for i in range(draw(st.integers(1, 40))):
        srcs = tuple(draw(st.lists(st.sampled_from(nodes), max_size=3))) if nodes else ()
        nodes.append(UOp(Ops.NOOP, dtypes.void, srcs, (tag, i)))
    return nodes


def reachable(root: UOp) -> set[UOp]:
    found, todo = {root}, [root]
    while todo:
        for s in todo.pop().src:
            if s not in found:
                found.add(s)
                todo.append(s)
    return found


@settings(max_examples=100)
@given(nodes=random_dags())
def test_toposort_lists_each_reachable_node_once_after_its_sources(nodes: list[UOp]) -> None:
    root = UOp(Ops.SINK, dtypes.void, tuple(nodes))
    order = root.toposort
    assert len(order) == len(set(order)) and set(order) == reachable(root)
    position = {n: i for i, n in enumerate(order)}
    assert all(position[s] < position[n] for n in order for s in n.src)
    assert order[-1] is root
    assert tuple(root.sparents()) == order and root.toposort == order


@settings(max_examples=100)
@given(nodes=random_dags(), data=st.data())
def test_substitute_matches_a_rebuild(nodes: list[UOp], data: st.DataObject) -> None:
    root = UOp(Ops.SINK, dtypes.void, tuple(nodes))
    old = data.draw(st.sampled_from(nodes))
    new = UOp(Ops.NOOP, dtypes.void, (), "replacement")
    # independent rebuild, in creation order (which is topological)
    rebuilt: dict[UOp, UOp] = {}
    for n in nodes:
        rebuilt[n] = new if n is old else UOp(n.op, n.dtype, tuple(rebuilt[s] for s in n.src), n.arg)
    assert root.substitute({old: new}) is UOp(Ops.SINK, dtypes.void, tuple(rebuilt[n] for n in nodes))
    assert old not in reachable(root.substitute({old: new}))


def test_substitute_does_not_walk_the_replacements() -> None:
    x, y = UOp.variable("x", 0, 5), UOp.variable("y", 0, 5)
    assert (x + y).substitute({x: y, y: x}) is y + x
    assert (x * 2).substitute({x: x + 1}) is (x + 1) * 2


def test_replace_changes_only_what_is_given() -> None:
    x = UOp.variable("x", 0, 5)
    node = x + 1
    assert node.replace() is node
    assert node.replace(op=Ops.MUL) is x * 1
    assert node.replace(src=(x, x)) is x + x
    assert node.replace(dtype=dtypes.int32) is UOp(Ops.ADD, dtypes.int32, node.src)
    c = UOp.const(dtypes.float32, 1.0)
    assert c.replace(arg=-0.0) is not c and c.replace(arg=1.0) is c


def test_replace_rejects_unknown_fields() -> None:
    with pytest.raises(TypeError, match="shape"):
        UOp.const(dtypes.int32, 1).replace(shape=(2,))


@pytest.fixture(scope="module")
def deep_chain() -> tuple[UOp, UOp]:
    x = UOp.variable("deep_x", -3, 10)
    one = x.const_like(1)
    node = x
    for _ in range(DEEP):
        node = UOp(Ops.ADD, dtypes.index, (node, one))
    return x, node


def test_deep_chain_toposort(deep_chain: tuple[UOp, UOp]) -> None:
    x, root = deep_chain
    order = root.toposort
    assert len(order) == DEEP + 2 and order[0] is x and order[-1] is root
    assert sys.getrecursionlimit() < DEEP


def test_deep_chain_bounds_and_shape(deep_chain: tuple[UOp, UOp]) -> None:
    _, root = deep_chain
    assert (root.vmin, root.vmax) == (DEEP - 3, DEEP + 10)
    assert root.shape == ()


def test_deep_chain_substitute_and_free(deep_chain: tuple[UOp, UOp]) -> None:
    x, root = deep_chain
    cached_before = len(UOp._cache)
    rebuilt = root.substitute({x: UOp.variable("deep_y", 0, 0)})
    assert rebuilt.vmax == DEEP and len(rebuilt.toposort) == DEEP + 2
    assert len(UOp._cache) >= cached_before + DEEP
    alive = [weakref.ref(rebuilt), weakref.ref(rebuilt.src[0].src[0])]
    del rebuilt  # freeing 200k nodes that hold each other must not recurse either
    gc.collect()
    assert all(ref() is None for ref in alive)
    assert len(UOp._cache) <= cached_before


def test_repr_of_a_deep_graph_is_short(deep_chain: tuple[UOp, UOp]) -> None:
    assert len(repr(deep_chain[1])) < 1000


# ---- building with operators --------------------------------------------------------------------------------------
X = UOp.variable("ops_x", 0, 10, dtypes.int32)
F = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("ops_f", 0, 1))
C2 = UOp.const(dtypes.int32, 2)

OPERATORS: list[tuple[str, Callable[[], UOp], Ops, DType, tuple[UOp, ...]]] = [
    ("x+2", lambda: X + 2, Ops.ADD, dtypes.int32, (X, C2)),
    ("2+x", lambda: 2 + X, Ops.ADD, dtypes.int32, (C2, X)),
    ("x-2", lambda: X - 2, Ops.SUB, dtypes.int32, (X, C2)),
    ("2-x", lambda: 2 - X, Ops.SUB, dtypes.int32, (C2, X)),
    ("x*2", lambda: X * 2, Ops.MUL, dtypes.int32, (X, C2)),
    ("2*x", lambda: 2 * X, Ops.MUL, dtypes.int32, (C2, X)),
    ("x//2", lambda: X // 2, Ops.IDIV, dtypes.int32, (X, C2)),
    ("2//x", lambda: 2 // X, Ops.IDIV, dtypes.int32, (C2, X)),
    ("x%2", lambda: X % 2, Ops.MOD, dtypes.int32, (X, C2)),
    ("2%x", lambda: 2 % X, Ops.MOD, dtypes.int32, (C2, X)),
    ("x&2", lambda: X & 2, Ops.AND, dtypes.int32, (X, C2)),
    ("x|2", lambda: X | 2, Ops.OR, dtypes.int32, (X, C2)),
    ("x^2", lambda: X ^ 2, Ops.XOR, dtypes.int32, (X, C2)),
    ("x<<2", lambda: X << 2, Ops.SHL, dtypes.int32, (X, C2)),
    ("x>>2", lambda: X >> 2, Ops.SHR, dtypes.int32, (X, C2)),
    ("-x", lambda: -X, Ops.NEG, dtypes.int32, (X,)),
    ("x<2", lambda: X < 2, Ops.CMPLT, dtypes.bool, (X, C2)),
    ("x>2", lambda: X > 2, Ops.CMPLT, dtypes.bool, (C2, X)),
    ("x.ne(2)", lambda: X.ne(2), Ops.CMPNE, dtypes.bool, (X, C2)),
    ("x.eq(2)", lambda: X.eq(2), Ops.CMPEQ, dtypes.bool, (X, C2)),
    ("x.maximum(2)", lambda: X.maximum(2), Ops.MAX, dtypes.int32, (X, C2)),
    ("f/2", lambda: F / 2, Ops.FDIV, dtypes.float32, (F, UOp.const(dtypes.float32, 2.0))),
    ("2/f", lambda: 2 / F, Ops.FDIV, dtypes.float32, (UOp.const(dtypes.float32, 2.0), F)),
    ("f.cast(int32)", lambda: F.cast(dtypes.int32), Ops.CAST, dtypes.int32, (F,)),
    ("f.bitcast(int32)", lambda: F.bitcast(dtypes.int32), Ops.BITCAST, dtypes.int32, (F,)),
    ("(x<2).where(x,2)", lambda: (X < 2).where(X, 2), Ops.WHERE, dtypes.int32, (X < 2, X, C2)),
    ("(x<2).where(2,x)", lambda: (X < 2).where(2, X), Ops.WHERE, dtypes.int32, (X < 2, C2, X)),
]


@pytest.mark.parametrize(("name", "build", "op", "dtype", "src"), OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators_build_the_right_node(name: str, build: Callable[[], UOp], op: Ops, dtype: DType,
                                        src: tuple[UOp, ...]) -> None:
    node = build()
    assert (node.op, node.dtype, node.src, node.arg) == (op, dtype, src, None)


def test_python_scalars_take_the_uop_dtype() -> None:
    assert (F + 1).src[1] is UOp.const(dtypes.float32, 1.0)
    assert type((F + 1).src[1].arg) is float
    assert (X + True).src[1].arg == 1 and type((X + True).src[1].arg) is int


@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint64, dtypes.index,
                                dtypes.float16, dtypes.float32], ids=str)
@settings(max_examples=100)
@given(data=st.data())
def test_minimum_matches_numpy(dt: DType, data: st.DataObject) -> None:
    # the extremes matter: -x overflows at INT_MIN and reverses no order on unsigned ints
    if dt.is_float:
        values: st.SearchStrategy[Any] = st.floats(width=16 if dt is dtypes.float16 else 32, allow_nan=False)
    elif dt.is_bool:
        values = st.booleans()
    else:
        values = st.integers(int(dt.min), int(dt.max)) | st.sampled_from([int(dt.min), int(dt.max), 0])
    x, y = data.draw(values), data.draw(values)
    va, vb = UOp(Ops.DEFINE_VAR, dt, (), ("min_a", 0, 0)), UOp(Ops.DEFINE_VAR, dt, (), ("min_b", 0, 0))
    node = va.minimum(vb)
    assert node.dtype is dt
    value = evaluate([node], {va: x, vb: y})[node]
    expected = min(x, y) if dt is dtypes.index else np.minimum(np.array([x], dtype=dt.numpy_name),
                                                                np.array([y], dtype=dt.numpy_name))[0]
    assert value == expected and type(value) is type(x)


def test_cast_to_the_same_dtype_is_the_node_itself() -> None:
    assert X.cast(dtypes.int32) is X


def test_vector_comparisons_give_bool_vectors() -> None:
    v = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (F, F, F, F))
    assert (v < v).dtype is dtypes.bool.vec(4)


def test_where_of_two_python_scalars_uses_their_dtype() -> None:
    assert (X < 2).where(1.5, 0.0).dtype is dtypes.float32


# ---- constants, variables, binding --------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "value", "stored"), [
    (dtypes.int8, 300, 44), (dtypes.uint8, -1, 255), (dtypes.bool, 2, True), (dtypes.int32, 2.9, 2),
    (dtypes.float16, 65520.0, math.inf), (dtypes.float32, 1, 1.0),
])
def test_const_stores_the_value_as_the_dtype_does(dtype: DType, value: ConstType, stored: ConstType) -> None:
    node = UOp.const(dtype, value)
    assert node.arg == stored and type(node.arg) is type(stored)
    assert node.const_value() == stored and (node.vmin, node.vmax) == (stored, stored)


def test_const_of_void_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="void"):
        UOp.const(dtypes.void, 0)


def test_variable_rejects_an_empty_range() -> None:
    with pytest.raises(ValueError, match=r"'n'.*\[5, 4\]"):
        UOp.variable("n", 5, 4)


@pytest.mark.parametrize("value", [-1, 11, 1000])
def test_bind_outside_the_range_raises_naming_the_variable(value: int) -> None:
    n = UOp.variable("n", 0, 10)
    with pytest.raises(ValueError, match=rf"'n': value {value} is outside \[0, 10\]"):
        n.bind(value)


@pytest.mark.parametrize("value", [0, 5, 10])
def test_bind_inside_the_range(value: int) -> None:
    n = UOp.variable("n", 0, 10)
    bound = n.bind(value)
    assert bound.op is Ops.BIND and bound.src == (n, UOp.const(dtypes.index, value))
    assert (bound.vmin, bound.vmax) == (0, 10)  # a BIND stands for the variable, whatever it is bound to


def test_bind_of_a_non_variable_raises() -> None:
    with pytest.raises(TypeError, match="DEFINE_VAR"):
        UOp.const(dtypes.index, 3).bind(3)


@given(end=st.integers(1, 2**40))
def test_range_bounds_are_exact(end: int) -> None:
    r = UOp.range(end, 0, AxisType.LOOP)
    assert (r.vmin, r.vmax) == (0, end - 1) and r.src[0] is UOp.const(dtypes.index, end)


@given(lo=st.integers(-(2**70), 2**70), width=st.integers(0, 2**70))
def test_index_variable_bounds_are_exact(lo: int, width: int) -> None:
    v = UOp.variable("exact", lo, lo + width)
    assert (v.vmin, v.vmax) == (lo, lo + width)


def test_float_bounds() -> None:
    assert (UOp.const(dtypes.float32, 2.5).vmin, UOp.const(dtypes.float32, 2.5).vmax) == (2.5, 2.5)
    assert (F.vmin, F.vmax) == (-math.inf, math.inf)  # float variables are not tracked


# ---- interval analysis: sound on random integer expressions -------------------------------------------------------
INT_DTYPES = (dtypes.int32, dtypes.int64, dtypes.index)
BINARY = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)


@st.composite
def int_ranges(draw: st.DrawFn, dt: DType) -> tuple[int, int]:
    """A variable range: mostly small, sometimes near the dtype's ends (where wraparound lives)."""
    lo_limit, hi_limit = (-(2**40), 2**40) if dt is dtypes.index else (int(dt.min), int(dt.max))
    magnitude = draw(st.sampled_from([8, 1000, 2**20, hi_limit]))
    a = draw(st.integers(max(lo_limit, -magnitude), min(hi_limit, magnitude)))
    b = draw(st.integers(max(lo_limit, -magnitude), min(hi_limit, magnitude)))
    return (min(a, b), max(a, b))


@st.composite
def expressions(draw: st.DrawFn) -> tuple[list[UOp], dict[UOp, int]]:
    """A random DAG of integer ops over variables, ranges and constants, plus a value in range for each leaf."""
    tag = draw(st.integers(0, 2**32))
    pools: dict[DType, list[UOp]] = {dt: [] for dt in INT_DTYPES}
    bools: list[UOp] = []
    values: dict[UOp, int] = {}
    for i, dt in enumerate(INT_DTYPES):
        for j in range(2):
            lo, hi = draw(int_ranges(dt))
            var = UOp.variable(f"v{tag}_{i}_{j}", lo, hi, dt)
            pools[dt].append(var)
            values[var] = draw(st.integers(lo, hi))
        pools[dt].append(UOp.const(dt, draw(st.sampled_from([0, 1, 2, 3, 7, -1, -8, 31, 2**31 - 1]))))
    end = draw(st.integers(1, 100))
    rng = UOp.range(end, tag, AxisType.LOOP)
    pools[dtypes.index].append(rng)
    values[rng] = draw(st.integers(0, end - 1))
    nodes: list[UOp] = []
    for _ in range(draw(st.integers(1, 12))):
        dt = draw(st.sampled_from(INT_DTYPES))

        def pick(d: DType = dt) -> UOp:
            return draw(st.sampled_from(pools[d]))

        kind = draw(st.sampled_from(["binary", "binary", "binary", "neg", "where", "cmplt", "cast"]))
        if kind == "binary":
            node = pick().alu(draw(st.sampled_from(BINARY)), pick())
        elif kind == "neg":
            node = -pick()
        elif kind == "where" and bools:
            node = draw(st.sampled_from(bools)).where(pick(), pick())
        elif kind == "cmplt":
            node = pick() < pick()
            bools.append(node)
        else:
            node = pick().cast(draw(st.sampled_from(INT_DTYPES)))
        if node.dtype is not dtypes.bool:
            pools[node.dtype].append(node)
        nodes.append(node)
    return nodes, values


def evaluate(nodes: list[UOp], leaves: dict[UOp, int]) -> dict[UOp, ConstType]:
    """Exact values of every node whose value is defined (not under a division by zero or a bad shift)."""
    order = UOp(Ops.SINK, dtypes.void, tuple(nodes)).toposort[:-1]
    values: dict[UOp, ConstType] = {}
    for node in order:
        if node in leaves:
            values[node] = leaves[node]
        elif node.op is Ops.CONST:
            values[node] = node.arg
        elif any(s not in values for s in node.src):
            continue  # depends on an undefined value
        elif node.op is Ops.CAST:
            values[node] = truncate(node.dtype, values[node.src[0]])
        else:
            try:
                values[node] = exec_alu(node.op, node.dtype, tuple(values[s] for s in node.src))
            except (ZeroDivisionError, ValueError):
                continue
    return values


@settings(max_examples=300)
@given(expr=expressions())
def test_bounds_contain_every_value(expr: tuple[list[UOp], dict[UOp, int]]) -> None:
    nodes, leaves = expr
    for node, value in evaluate(nodes, leaves).items():
        assert node.vmin <= value <= node.vmax, f"{node.op!r} {node.dtype!r}: {value} not in [{node.vmin}, {node.vmax}]"
        if node.dtype is not dtypes.index and node.dtype is not dtypes.bool:
            assert node.dtype.min <= node.vmin and node.vmax <= node.dtype.max
    for leaf in leaves:  # exact where claimed: variables and ranges
        expected = (0, leaf.src[0].arg - 1) if leaf.op is Ops.RANGE else (leaf.arg[1], leaf.arg[2])
        assert (leaf.vmin, leaf.vmax) == expected


@pytest.mark.parametrize(("build", "bounds"), [
    (lambda x: x + 5, (5, 15)), (lambda x: x * -2, (-20, 0)), (lambda x: x // 3, (0, 3)), (lambda x: x % 4, (0, 3)),
    (lambda x: (x - 5) % 4, (-3, 3)), (lambda x: x.maximum(4), (4, 10)), (lambda x: x & 6, (0, 6)),
    (lambda x: x << 2, (0, 40)), (lambda x: x >> 1, (0, 5)), (lambda x: -x, (-10, 0)),
], ids=["add", "mul-neg", "idiv", "mod", "mod-neg", "max", "and", "shl", "shr", "neg"])
def test_bounds_are_tight_on_simple_expressions(build: Callable[[UOp], UOp], bounds: tuple[int, int]) -> None:
    # exact extremes, checked by evaluating every value of x in [0, 10]
    x = UOp.variable("tight", 0, 10)
    node = build(x)
    reached = [evaluate([node], {x: v})[node] for v in range(11)]
    assert (min(reached), max(reached)) == bounds == (node.vmin, node.vmax)


@pytest.mark.parametrize(("lo", "hi"), [(2**30, 2**31 - 1), (-(2**31), -1)])
def test_bounds_give_up_on_wraparound(lo: int, hi: int) -> None:
    x = UOp.variable("wrap", lo, hi, dtypes.int32)
    assert ((x * 2).vmin, (x * 2).vmax) == (dtypes.int32.min, dtypes.int32.max)


def test_index_bounds_never_wrap() -> None:
    x = UOp.variable("big", 0, 2**62)
    assert ((x * 4).vmin, (x * 4).vmax) == (0, 2**64)


@pytest.mark.parametrize(("build", "value"), [
    (lambda x: x < 20, True), (lambda x: x < 0, False), (lambda x: x.ne(-1), True), (lambda x: x.eq(11), False),
    (lambda x: (x < 20) & (x < 0), False), (lambda x: (x < 20) | (x < 5), True),
])
def test_comparisons_decided_by_bounds(build: Callable[[UOp], UOp], value: bool) -> None:
    node = build(UOp.variable("cmp", 0, 10))
    assert (node.vmin, node.vmax) == (value, value)


def _build_after(barrier: threading.Barrier, name: str, roots: list[UOp]) -> None:
    barrier.wait()
    x = UOp.variable(name, 0, 100)
    for i in range(3000):
        x = (x * (i % 7 + 2) + i) // 3
    roots.append(x)


def test_threads_building_the_same_graph_get_the_same_nodes() -> None:
    """Hash-consing holds under threads: a miss looks up and inserts in one step, so two threads that build the
    same node at the same moment end up with one object, and every later `is` comparison still works."""
    count = 8
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, inside the miss path too
    try:
        for r in range(3):
            barrier, roots = threading.Barrier(count), list[UOp]()
            threads = [threading.Thread(target=_build_after, args=(barrier, f"t{r}", roots)) for _ in range(count)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(roots) == count
            assert all(root is roots[0] for root in roots)
            nodes = [set(map(id, root.toposort)) for root in roots]
            assert all(n == nodes[0] for n in nodes)
    finally:
        sys.setswitchinterval(old)
