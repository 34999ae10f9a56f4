"""Exact scalar arithmetic (`plygrad.ir.scalar`) against NumPy, ml_dtypes and PyTorch computing in each dtype.

Constant folding and the reference interpreter both use `exec_alu`, so every value it gets wrong becomes a wrong
kernel result that no backend test can explain. Floats are compared by bit pattern (a NaN matches any NaN); the
transcendentals within one unit in the last place.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.ops import Ops
from plygrad.ir.scalar import bitcast_value, cast_value, exec_alu, from_bytes, threefry2x32, to_bytes, truncate

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
SIGNED = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
INTS = SIGNED + UNSIGNED
GRID = settings(max_examples=100)  # for tests parametrized over many (op, dtype) pairs


def np_dtype(dt: DType) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if dt is dtypes.bfloat16 else np.dtype(dt.numpy_name)


def np_uint(dt: DType) -> np.dtype[Any]:
    return np.dtype(f"uint{dt.bitsize}")


def from_bits(bits: int, dt: DType) -> float:
    """The float of dtype `dt` with this bit pattern, read by NumPy (independent of plygrad)."""
    return float(np.array([bits], dtype=np_uint(dt)).view(np_dtype(dt))[0])


def bits_of(value: float, dt: DType) -> int:
    return int(np.array([value], dtype=np_dtype(dt)).view(np_uint(dt))[0])


def float_values(dt: DType) -> st.SearchStrategy[float]:
    """Every bit pattern of the dtype (so all exponents, subnormals, infinities and NaNs), plus hypothesis' floats."""
    patterns = st.integers(0, (1 << dt.bitsize) - 1).map(lambda b: from_bits(b, dt))
    if dt is dtypes.bfloat16:
        return patterns
    return st.one_of(patterns, {16: st.floats(width=16), 32: st.floats(width=32), 64: st.floats()}[dt.bitsize])


def int_values(dt: DType) -> st.SearchStrategy[int]:
    return st.integers(int(dt.min), int(dt.max))


def assert_same_float(ours: Any, ref: Any, dt: DType) -> None:
    """Bit-exact equality at dtype `dt`; any NaN matches any NaN."""
    assert type(ours) is float, f"exec_alu returned {type(ours).__name__}, not float"
    if math.isnan(float(ref)):
        assert math.isnan(ours), f"expected NaN, got {ours!r}"
        return
    assert struct.pack("<d", truncate(dt, ours)) == struct.pack("<d", ours), f"{ours!r} is not a {dt!r} value"
    assert bits_of(ours, dt) == bits_of(float(ref), dt), f"got {ours!r}, NumPy says {float(ref)!r}"


def ordered(bits: int, nbits: int) -> int:
    """Sign-magnitude bits mapped to integers whose difference counts ulps."""
    magnitude = bits & ((1 << (nbits - 1)) - 1)
    return -magnitude if bits >> (nbits - 1) else magnitude


def assert_within_ulp(ours: float, ref: float, dt: DType, ulps: int = 1) -> None:
    if math.isnan(ref):
        assert math.isnan(ours), f"expected NaN, got {ours!r}"
        return
    assert not math.isnan(ours), f"got NaN, expected {ref!r}"
    distance = abs(ordered(bits_of(ours, dt), dt.bitsize) - ordered(bits_of(ref, dt), dt.bitsize))
    assert distance <= ulps, f"got {ours!r}, expected {ref!r}: {distance} ulps apart"


def np_compute(fn: Callable[..., Any], dt: DType, *values: Any) -> Any:
    """`fn` applied by NumPy to one-element arrays of dtype `dt` (NumPy computes in that dtype)."""
    arrays = [np.array([v], dtype=np_dtype(dt)) for v in values]
    with np.errstate(all="ignore"):
        return fn(*arrays)[0]


# ---- floats: + - * / sqrt and friends, bit-exact ------------------------------------------------------------------
FLOAT_BINARY: dict[Ops, Callable[..., Any]] = {
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide,
}
FLOAT_UNARY: dict[Ops, Callable[..., Any]] = {
    Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.RECIPROCAL: np.reciprocal, Ops.TRUNC: np.trunc,
}


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@given(data=st.data())
def test_float_binary_is_correctly_rounded(dt: DType, data: st.DataObject) -> None:
    x, y = data.draw(float_values(dt)), data.draw(float_values(dt))
    for op, fn in FLOAT_BINARY.items():
        assert_same_float(exec_alu(op, dt, (x, y)), np_compute(fn, dt, x, y), dt)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@given(data=st.data())
def test_float_unary_is_correctly_rounded(dt: DType, data: st.DataObject) -> None:
    x = data.draw(float_values(dt))
    for op, fn in FLOAT_UNARY.items():
        assert_same_float(exec_alu(op, dt, (x,)), np_compute(fn, dt, x), dt)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@GRID
@given(data=st.data())
def test_float_max_propagates_nan_like_torch(dt: DType, data: st.DataObject) -> None:
    x, y = data.draw(float_values(dt)), data.draw(float_values(dt))
    torch_dt = getattr(torch, dt.name)
    ref = torch.maximum(torch.tensor([x], dtype=torch_dt), torch.tensor([y], dtype=torch_dt)).item()
    ours = exec_alu(Ops.MAX, dt, (x, y))
    # torch leaves which zero max(-0.0, 0.0) returns to its kernels; the value is what matters
    assert (math.isnan(ours) and math.isnan(ref)) or ours == ref


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_float_max_of_zeros_is_positive_zero(dt: DType) -> None:
    assert math.copysign(1.0, float(exec_alu(Ops.MAX, dt, (-0.0, 0.0)))) == 1.0
    assert math.copysign(1.0, float(exec_alu(Ops.MAX, dt, (0.0, -0.0)))) == 1.0


def correctly_rounded(dt: DType, exact: Fraction) -> float:
    """`exact` rounded once to `dt` (nearest, ties to the even bit pattern), found among the neighbours of NumPy's
    cast of the nearest float64: a reference that shares no code with exec_alu's round-to-odd."""
    try:
        nearest = float(exact)
    except OverflowError:
        nearest = math.inf if exact > 0 else -math.inf
    with np.errstate(over="ignore"):
        guess = np.array([nearest]).astype(np_dtype(dt))
    pattern = int(guess.view(np_uint(dt))[0])
    candidates = []
    for step in (-1, 0, 1):
        value = from_bits((pattern + step) % (1 << dt.bitsize), dt)
        if math.isnan(value):
            continue
        # infinity stands where the next power of two past the largest finite value would (IEEE's overflow rule)
        infinity = int(np.array([np.inf]).astype(np_dtype(dt)).view(np_uint(dt))[0])
        largest = from_bits(infinity - 1, dt)
        ulp = largest - from_bits(infinity - 2, dt)
        at = Fraction(math.copysign(largest, value)) + Fraction(math.copysign(ulp, value)) if math.isinf(value) \
            else Fraction(value)
        candidates.append((abs(at - exact), (pattern + step) & 1, value))
    return min(candidates)[2]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@GRID
@given(data=st.data())
def test_float_mulacc_is_a_fused_multiply_add_rounded_once(dt: DType, data: st.DataObject) -> None:
    x, y, z = (data.draw(float_values(dt)) for _ in range(3))
    got = exec_alu(Ops.MULACC, dt, (x, y, z))
    if not all(math.isfinite(v) for v in (x, y, z)):  # infinities and NaN: IEEE's rules, as float64 follows them
        with np.errstate(all="ignore"):
            plain = np.float64(x) * np.float64(y) + np.float64(z)
        assert_same_float(got, np.array([plain]).astype(np_dtype(dt))[0], dt)
        return
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:  # IEEE's signed zeros: a zero product keeps the sign rule of +, a cancellation gives +0.0
        expected = (0.0 * math.copysign(1.0, x) * math.copysign(1.0, y) + z) if x == 0 or y == 0 else 0.0
        assert_same_float(got, expected, dt)
        return
    assert_same_float(got, correctly_rounded(dt, exact), dt)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
@settings(max_examples=300)
@given(data=st.data())
def test_float_mulacc_matches_the_c_librarys_fma(dt: DType, data: st.DataObject) -> None:
    """glibc's fmaf/fma are correctly rounded (the hardware instruction where there is one)."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    fma = libm.fma if dt is dtypes.float64 else libm.fmaf
    ctype = ctypes.c_double if dt is dtypes.float64 else ctypes.c_float
    fma.restype, fma.argtypes = ctype, [ctype] * 3
    x, y, z = (data.draw(float_values(dt)) for _ in range(3))
    assert_same_float(exec_alu(Ops.MULACC, dt, (x, y, z)), fma(x, y, z), dt)


def test_mulacc_cases_where_rounding_twice_differs() -> None:
    """One rounding of the exact value, where rounding the product (or a float64 sum) first gives another answer."""
    e = 2.0**-23
    assert exec_alu(Ops.MULACC, dtypes.float32, (1 + e, 1 + e, -(1 + 2 * e))) == 2.0**-46  # a*b+c gives 0
    assert exec_alu(Ops.MULACC, dtypes.float64, (0.1, 10.0, -1.0)) == 2.0**-54  # 0.1*10 rounds to 1.0 first
    # exact 1 + 2^-23 + 2^-24 - 2^-60 lies just under a float32 tie; in float64 it rounds onto the tie, which
    # then goes to the even neighbour 1 + 2^-22: rounding once gives 1 + 2^-23
    x, y, z = 1 - 2.0**-18, 2.0**-24 * (1 + 2.0**-18), 1 + e
    assert truncate(dtypes.float32, x * y + z) == 1 + 2 * e
    assert exec_alu(Ops.MULACC, dtypes.float32, (x, y, z)) == 1 + e


# ---- floats: transcendentals, within one ulp ---------------------------------------------------------------------
TRANSCENDENTAL: dict[Ops, Callable[..., Any]] = {
    Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.POW: np.power,
}


def transcendental_reference(op: Ops, dt: DType, *values: float) -> float:
    """NumPy's result in the dtype; for bfloat16 (no NumPy kernels) float32's rounded to bfloat16, as torch does."""
    compute_dt = dtypes.float32 if dt is dtypes.bfloat16 else dt
    ref = np_compute(TRANSCENDENTAL[op], compute_dt, *values)
    return float(np.array([ref]).astype(np_dtype(dt))[0])


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2], ids=lambda op: op.name)
@GRID
@given(data=st.data())
def test_exp2_log2_within_one_ulp(op: Ops, dt: DType, data: st.DataObject) -> None:
    x = data.draw(float_values(dt))
    assert_within_ulp(float(exec_alu(op, dt, (x,))), transcendental_reference(op, dt, x), dt)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@GRID
@given(data=st.data())
def test_sin_within_one_ulp(dt: DType, data: st.DataObject) -> None:
    # large arguments need exact range reduction; NumPy's vectorized float32 sin is accurate to ~1 ulp below 2**16
    x = data.draw(float_values(dt).filter(lambda v: math.isnan(v) or math.isinf(v) or abs(v) < 2**16))
    assert_within_ulp(float(exec_alu(Ops.SIN, dt, (x,))), transcendental_reference(Ops.SIN, dt, x), dt)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@GRID
@given(data=st.data())
def test_pow_within_one_ulp(dt: DType, data: st.DataObject) -> None:
    x, y = data.draw(float_values(dt)), data.draw(float_values(dt))
    assert_within_ulp(float(exec_alu(Ops.POW, dt, (x, y))), transcendental_reference(Ops.POW, dt, x, y), dt)


@pytest.mark.parametrize(("x", "y", "expected"), [
    (0.0, -1.0, math.inf), (-0.0, -1.0, -math.inf), (-0.0, -2.0, math.inf), (-2.0, 3.0, -8.0), (-2.0, 0.5, math.nan),
    (2.0, 2000.0, math.inf), (-2.0, 2001.0, -math.inf), (-2.0, 2000.0, math.inf), (math.nan, 0.0, 1.0),
    (1.0, math.nan, 1.0),
])
def test_pow_special_cases_follow_c(x: float, y: float, expected: float) -> None:
    ours = exec_alu(Ops.POW, dtypes.float64, (x, y))
    assert (math.isnan(ours) and math.isnan(expected)) or (ours == expected and math.copysign(1, ours) ==
                                                            math.copysign(1, expected))


# ---- floats: comparisons and WHERE --------------------------------------------------------------------------------
COMPARISONS: dict[Ops, Callable[..., Any]] = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}


@pytest.mark.parametrize("dt", (*FLOATS, *INTS, dtypes.bool), ids=str)
@GRID
@given(data=st.data())
def test_comparisons_match_numpy(dt: DType, data: st.DataObject) -> None:
    values = float_values(dt) if dt.is_float else st.booleans() if dt.is_bool else int_values(dt)
    x, y = data.draw(values), data.draw(values)
    for op, fn in COMPARISONS.items():
        ours = exec_alu(op, dtypes.bool, (x, y))
        assert type(ours) is bool
        assert ours == bool(np_compute(fn, dt, x, y)), op


@pytest.mark.parametrize("dt", (*FLOATS, *INTS, dtypes.bool), ids=str)
@settings(max_examples=50)
@given(data=st.data())
def test_where_matches_numpy(dt: DType, data: st.DataObject) -> None:
    values = float_values(dt) if dt.is_float else st.booleans() if dt.is_bool else int_values(dt)
    cond, x, y = data.draw(st.booleans()), data.draw(values), data.draw(values)
    ref = np.where(np.array([cond]), np.array([x], dtype=np_dtype(dt)), np.array([y], dtype=np_dtype(dt)))[0]
    ours = exec_alu(Ops.WHERE, dt, (cond, x, y))
    if dt.is_float:
        assert_same_float(ours, ref, dt)
    else:
        assert ours == ref and type(ours) is type(x)


# ---- integers: wraparound at the width, C division ----------------------------------------------------------------
INT_BINARY: dict[Ops, Callable[..., Any]] = {
    Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
    Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
}


@pytest.mark.parametrize("dt", INTS, ids=str)
@GRID
@given(data=st.data())
def test_int_binary_wraps_like_numpy(dt: DType, data: st.DataObject) -> None:
    x, y = data.draw(int_values(dt)), data.draw(int_values(dt))
    for op, fn in INT_BINARY.items():
        ours = exec_alu(op, dt, (x, y))
        assert type(ours) is int and ours == int(np_compute(fn, dt, x, y)), op


@pytest.mark.parametrize("dt", INTS, ids=str)
@GRID
@given(data=st.data())
def test_int_neg_and_mulacc_wrap_like_numpy(dt: DType, data: st.DataObject) -> None:
    x, y, z = (data.draw(int_values(dt)) for _ in range(3))
    assert exec_alu(Ops.NEG, dt, (x,)) == int(np_compute(np.negative, dt, x))
    assert exec_alu(Ops.MULACC, dt, (x, y, z)) == int(np_compute(lambda a, b, c: a * b + c, dt, x, y, z))


def c_division(x: int, y: int, dt: DType) -> tuple[int, int]:
    """C's quotient and remainder: NumPy's fmod gives the remainder, and then x - r is an exact multiple of y."""
    r = int(np_compute(np.fmod, dt, x, y))
    q = (x - r) // y
    return int(np.array([q % (1 << dt.bitsize)], dtype=np_uint(dt)).view(np_dtype(dt))[0]), r


@pytest.mark.parametrize("dt", INTS, ids=str)
@GRID
@given(data=st.data())
def test_idiv_truncates_and_mod_takes_the_dividend_sign(dt: DType, data: st.DataObject) -> None:
    x = data.draw(int_values(dt))
    y = data.draw(int_values(dt).filter(lambda v: v != 0 and not (v == -1 and x == dt.min)))
    q, r = c_division(x, y, dt)
    assert exec_alu(Ops.IDIV, dt, (x, y)) == q
    assert exec_alu(Ops.MOD, dt, (x, y)) == r


@pytest.mark.parametrize("dt", SIGNED, ids=str)
def test_idiv_of_min_by_minus_one_wraps(dt: DType) -> None:
    # C leaves INT_MIN / -1 undefined (it traps on x86); the IR defines it as the wrapped quotient
    assert exec_alu(Ops.IDIV, dt, (dt.min, -1)) == dt.min
    assert exec_alu(Ops.MOD, dt, (dt.min, -1)) == 0


@pytest.mark.parametrize(("x", "y", "q", "r"), [(7, 2, 3, 1), (-7, 2, -3, -1), (7, -2, -3, 1), (-7, -2, 3, -1)])
@pytest.mark.parametrize("dt", (dtypes.int8, dtypes.int32, dtypes.index), ids=str)
def test_idiv_mod_signs(dt: DType, x: int, y: int, q: int, r: int) -> None:
    assert (exec_alu(Ops.IDIV, dt, (x, y)), exec_alu(Ops.MOD, dt, (x, y))) == (q, r)


@pytest.mark.parametrize("dt", (*INTS, dtypes.index), ids=str)
@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD], ids=lambda op: op.name)
def test_integer_division_by_zero_is_zero(op: Ops, dt: DType) -> None:
    # C traps (SIGFPE on x86) and a GPU gives garbage; the IR defines x / 0 = x % 0 = 0 (NumPy's answer)
    for x in (5, 0, dt.max) if dt is dtypes.index else (5, 0, dt.min, dt.max):
        assert exec_alu(op, dt, (x, 0)) == 0


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD], ids=lambda op: op.name)
@GRID
@given(data=st.data())
def test_division_by_zero_matches_numpy(op: Ops, dt: DType, data: st.DataObject) -> None:
    x = data.draw(int_values(dt))
    ref = np_compute(np.floor_divide if op is Ops.IDIV else np.remainder, dt, x, 0)  # NumPy gives 0 for both
    assert exec_alu(op, dt, (x, 0)) == int(ref) == 0


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR], ids=lambda op: op.name)
@GRID
@given(data=st.data())
def test_shifts_match_numpy(op: Ops, dt: DType, data: st.DataObject) -> None:
    x, y = data.draw(int_values(dt)), data.draw(st.integers(0, dt.bitsize - 1))
    ref = np_compute(np.left_shift if op is Ops.SHL else np.right_shift, dt, x, y)
    assert exec_alu(op, dt, (x, y)) == int(ref)


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("op", [Ops.SHL, Ops.SHR], ids=lambda op: op.name)
@GRID
@given(data=st.data())
def test_out_of_range_shifts_match_numpy(op: Ops, dt: DType, data: st.DataObject) -> None:
    # C leaves a negative amount or one >= the width undefined; the IR (like NumPy) shifts every bit out
    x = data.draw(int_values(dt))
    y = data.draw(st.one_of(st.integers(dt.bitsize, dt.max), st.integers(dt.min, -1)) if dt in SIGNED
                  else st.integers(dt.bitsize, dt.max))
    ref = np_compute(np.left_shift if op is Ops.SHL else np.right_shift, dt, x, y)
    assert exec_alu(op, dt, (x, y)) == int(ref)


@given(x=st.integers(-(2**200), 2**200), y=st.integers(-(2**200), 2**200))
def test_index_arithmetic_is_unbounded(x: int, y: int) -> None:
    assert exec_alu(Ops.ADD, dtypes.index, (x, y)) == x + y
    assert exec_alu(Ops.MUL, dtypes.index, (x, y)) == x * y
    if y != 0:
        assert exec_alu(Ops.IDIV, dtypes.index, (x, y)) == int(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)


# ---- bool ---------------------------------------------------------------------------------------------------------
BOOL_OPS: dict[Ops, Callable[..., Any]] = {
    Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.MAX: np.maximum, Ops.ADD: np.add,
    Ops.MUL: np.multiply,
}


@pytest.mark.parametrize("op", list(BOOL_OPS), ids=lambda op: op.name)
@pytest.mark.parametrize(("x", "y"), [(False, False), (False, True), (True, False), (True, True)])
def test_bool_ops_match_numpy(op: Ops, x: bool, y: bool) -> None:
    ours = exec_alu(op, dtypes.bool, (x, y))
    assert type(ours) is bool and ours == bool(np_compute(BOOL_OPS[op], dtypes.bool, x, y))


# ---- ops on dtypes that do not have them -------------------------------------------------------------------------
@pytest.mark.parametrize(("op", "dt", "operands"), [
    (Ops.IDIV, dtypes.float32, (1.0, 2.0)), (Ops.MOD, dtypes.float64, (1.0, 2.0)),
    (Ops.AND, dtypes.float32, (1.0, 1.0)), (Ops.SQRT, dtypes.int32, (4,)), (Ops.FDIV, dtypes.int32, (4, 2)),
    (Ops.EXP2, dtypes.uint8, (1,)),
    (Ops.NEG, dtypes.bool, (True,)), (Ops.ADD, dtypes.void, (1, 2)), (Ops.SHL, dtypes.float32, (1.0, 1.0)),
])
def test_op_on_unsupported_dtype_raises_type_error(op: Ops, dt: DType, operands: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match=op.name):
        exec_alu(op, dt, operands)


# ---- threefry -----------------------------------------------------------------------------------------------------
# Random123's known-answer vectors for threefry2x32 with 20 rounds: (ctr0, ctr1, key0, key1) -> (out0, out1)
THREEFRY_KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize(("inputs", "outputs"), THREEFRY_KAT)
def test_threefry_matches_random123_vectors(inputs: tuple[int, ...], outputs: tuple[int, int]) -> None:
    ctr0, ctr1, key0, key1 = inputs
    counter, key = (ctr1 << 32) | ctr0, (key1 << 32) | key0  # word 0 is the low 32 bits
    expected = (outputs[1] << 32) | outputs[0]
    assert threefry2x32(counter, key) == expected
    assert exec_alu(Ops.THREEFRY, dtypes.uint64, (counter, key)) == expected


# ---- truncate and casts -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", INTS, ids=str)
@GRID
@given(value=st.integers(-(2**70), 2**70))
def test_truncate_wraps_ints_like_a_c_cast(dt: DType, value: int) -> None:
    ref = np.array([value % (1 << dt.bitsize)], dtype=np_uint(dt)).view(np_dtype(dt))[0]
    ours = truncate(dt, value)
    assert type(ours) is int and ours == int(ref)


@pytest.mark.parametrize("dt", (*FLOATS, *INTS, dtypes.bool, dtypes.index), ids=str)
@GRID
@given(value=st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.booleans()))
def test_truncate_is_idempotent_bit_for_bit(dt: DType, value: bool | int | float) -> None:
    once = truncate(dt, value)
    assert struct.pack("<d", float(once)) == struct.pack("<d", float(truncate(dt, once)))
    assert type(once) is (float if dt.is_float else bool if dt.is_bool else int)


def cast_reference(value: Any, src: DType, to: DType) -> Any:
    """NumPy's astype; conversions to bfloat16 through PyTorch, whose rounding (via float32) the IR follows."""
    if to is dtypes.bfloat16:
        src_torch = torch.float64 if src.is_float else torch.int64 if src.is_int and src is not dtypes.uint64 else None
        if src_torch is None:  # uint64 and bool: NumPy to float32 first is exactly torch's path
            return float(np.array([value], dtype=np_dtype(src)).astype(np.float32).astype(ml_dtypes.bfloat16)[0])
        return torch.tensor([value], dtype=src_torch).to(torch.bfloat16).item()
    with np.errstate(all="ignore"):
        return np.array([value], dtype=np_dtype(src)).astype(np_dtype(to))[0]


def cast_sources(src: DType, to: DType) -> st.SearchStrategy[Any]:
    if src.is_bool:
        return st.booleans()
    if src.is_int:
        return int_values(src)
    if to.is_int:  # only in-range float -> int conversions are defined (C), and NaN/inf are not
        lo, hi = int(to.min) - 1, int(to.max) + 1
        return float_values(src).filter(lambda v: not math.isnan(v) and lo < v < hi)
    return float_values(src)


ALL_VALUE_DTYPES = (dtypes.bool, *INTS, *FLOATS)


@pytest.mark.parametrize("src", ALL_VALUE_DTYPES, ids=str)
@settings(max_examples=150)
@given(data=st.data())
def test_cast_matches_numpy(src: DType, data: st.DataObject) -> None:
    to = data.draw(st.sampled_from(ALL_VALUE_DTYPES))
    value = data.draw(cast_sources(src, to))
    ours = cast_value(value, to)
    ref = cast_reference(value, src, to)
    if to.is_float:
        assert_same_float(ours, ref, to)
    else:
        assert type(ours) is (bool if to.is_bool else int) and ours == ref


@pytest.mark.parametrize("value", [2**62 + 2**38 + 1, -(2**62 + 2**38 + 1), 2**63 - 1, 2**53 + 1, 2**24 + 1])
def test_int64_to_float32_rounds_once(value: int) -> None:
    # int64 -> float64 -> float32 would round twice and get 2**62 + 2**38 + 1 wrong
    ref = float(np.array([value], dtype=np.int64).astype(np.float32)[0])
    assert cast_value(value, dtypes.float32) == ref


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_huge_index_values_cast_to_infinity(dt: DType) -> None:
    assert cast_value(2**1100, dt) == math.inf and cast_value(-(2**1100), dt) == -math.inf


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_cast_to_int_zero(dt: DType, value: float) -> None:
    assert cast_value(value, dt) == 0  # C leaves these undefined; the IR picks 0 so folding is total


# ---- bitcast ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", (*INTS, *FLOATS), ids=str)
@settings(max_examples=150)
@given(data=st.data())
def test_bitcast_matches_numpy_view(src: DType, data: st.DataObject) -> None:
    to = data.draw(st.sampled_from([dt for dt in (*INTS, *FLOATS) if dt.itemsize == src.itemsize]))
    bits = data.draw(st.integers(0, (1 << src.bitsize) - 1))
    raw = np.array([bits], dtype=np_uint(src))
    value = from_bytes(raw.tobytes(), src)
    assert to_bytes(value, src) == raw.tobytes()  # every pattern, NaN payloads included, survives as a value
    ours = bitcast_value(value, src, to)
    assert to_bytes(ours, to) == raw.view(np_dtype(to)).tobytes()
    if not to.is_float:
        assert ours == raw.view(np_dtype(to))[0]


@pytest.mark.parametrize(("src", "to"), [(dtypes.int32, dtypes.int16), (dtypes.float32, dtypes.float64)], ids=str)
def test_bitcast_between_sizes_raises(src: DType, to: DType) -> None:
    with pytest.raises(ValueError, match="itemsizes"):
        bitcast_value(0, src, to)


@pytest.mark.parametrize("dt", (*FLOATS, *INTS, dtypes.bool), ids=str)
@GRID
@given(data=st.data())
def test_to_bytes_matches_numpy_memory(dt: DType, data: st.DataObject) -> None:
    value = data.draw(float_values(dt) if dt.is_float else st.booleans() if dt.is_bool else int_values(dt))
    expected = np.array([value], dtype=np_dtype(dt)).tobytes()
    if dt.is_float and math.isnan(value):
        assert math.isnan(float(from_bytes(to_bytes(value, dt), dt)))
        return
    assert to_bytes(value, dt) == expected
    assert from_bytes(expected, dt) == value

