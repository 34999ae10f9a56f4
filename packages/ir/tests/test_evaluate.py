"""The reference interpreter: compared with NumPy's fixed-width arithmetic and Python's exact integers, never with
numbers it printed itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.evaluate import EvaluationError, env_key, evaluate
from plygrad.ir.ops import AxisType, Ops
from plygrad.ir.uop import UOp

x = UOp.variable("x", -100, 100)
y = UOp.variable("y", 1, 50)


def c_div(a: int, b: int) -> int:
    """C's truncating division, computed independently of plygrad.ir.scalar."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


@settings(deadline=None)
@given(st.integers(-100, 100), st.integers(1, 50))
def test_index_arithmetic_matches_python_integers(xv: int, yv: int) -> None:
    expr = ((x * 7 + y) // y - x % y).maximum(-x) + (x < y).where(x, y)
    quotient, remainder = c_div(xv * 7 + yv, yv), xv - yv * c_div(xv, yv)
    expected = max(quotient - remainder, -xv) + (xv if xv < yv else yv)
    assert evaluate(expr, {"x": xv, "y": yv}) == expected


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64])
@settings(max_examples=100, deadline=None)
@given(a=st.integers(-(2**70), 2**70), b=st.integers(-(2**70), 2**70))
def test_fixed_width_ints_wrap_like_numpy(dtype: DType, a: int, b: int) -> None:
    np_dtype = np.dtype(dtype.numpy_name)
    info = np.iinfo(np_dtype)
    av = UOp.variable("a", int(info.min), int(info.max), dtype)
    bv = UOp.variable("b", int(info.min), int(info.max), dtype)
    # NumPy wraps the low 64 bits into the dtype (a C cast)
    a_w = int(np.array(a & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).astype(np_dtype))
    b_w = int(np.array(b & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).astype(np_dtype))
    env = {"a": a_w, "b": b_w}
    an, bn = np.array(a_w, dtype=np_dtype), np.array(b_w, dtype=np_dtype)
    with np.errstate(over="ignore"):
        assert evaluate(av + bv, env) == int(an + bn)
        assert evaluate(av * bv, env) == int(an * bn)
        assert evaluate(av - bv, env) == int(an - bn)
        assert evaluate(av ^ bv, env) == int(an ^ bn)
    assert evaluate(av < bv, env) == bool(an < bn)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64])
@settings(max_examples=100, deadline=None)
@given(a=st.floats(allow_nan=False, width=16), b=st.floats(allow_nan=False, width=16))
def test_floats_round_at_their_dtype_like_numpy(dtype: DType, a: float, b: float) -> None:
    np_dtype = np.dtype(dtype.numpy_name)
    av, bv = UOp.const(dtype, a), UOp.const(dtype, b)
    an, bn = np.array(a, dtype=np_dtype), np.array(b, dtype=np_dtype)
    with np.errstate(all="ignore"):
        for got, want in ((evaluate(av + bv), an + bn), (evaluate(av * bv), an * bn), (evaluate(av / bv), an / bn)):
            assert (math.isnan(got) and np.isnan(want)) or got == float(want)


def test_cast_and_bitcast_match_numpy() -> None:
    v = UOp.variable("v", -(2**31), 2**31 - 1, dtypes.int32)
    assert evaluate(v.cast(dtypes.float32), {"v": 16777217}) == float(np.float32(16777217))
    assert evaluate(v.bitcast(dtypes.float32), {"v": 1065353216}) == float(np.int32(1065353216).view(np.float32))
    assert evaluate(v.cast(dtypes.uint8), {"v": -1}) == int(np.array(-1).astype(np.uint8))


def test_bind_evaluates_to_its_value() -> None:
    assert evaluate(x.bind(42) * 2) == 84


def test_range_and_special_values_come_from_env() -> None:
    r = UOp.range(8, axis=3, axis_type=AxisType.LOOP)
    special = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, 4),), "gidx0")
    assert env_key(r) == "range3"
    assert env_key(special) == "gidx0"
    assert evaluate(r * 10 + special, {"range3": 7, "gidx0": 2}) == 72


def test_missing_variable_names_the_key() -> None:
    with pytest.raises(EvaluationError, match="'x'"):
        evaluate(x + 1, {})


@pytest.mark.parametrize(("node", "env"), [
    (x, {"x": 101}),
    (UOp.range(8, axis=0), {"range0": 8}),
])
def test_value_outside_its_range_is_rejected(node: UOp, env: dict[str, int]) -> None:
    with pytest.raises(EvaluationError, match="outside"):
        evaluate(node, env)


def test_division_by_zero_is_zero() -> None:
    assert evaluate(x // (y - y), {"x": 1, "y": 1}) == 0
    assert evaluate(x % (y - y), {"x": 1, "y": 1}) == 0


def test_ops_without_a_scalar_value_are_rejected() -> None:
    param = UOp(Ops.PARAM, dtypes.float32.ptr(4), (), 0)
    with pytest.raises(EvaluationError, match="PARAM"):
        evaluate(param)


def test_deep_graph_evaluates_iteratively() -> None:
    expr = x
    for _ in range(50_000):
        expr = expr + 1
    assert evaluate(expr, {"x": 3}) == 50_003
