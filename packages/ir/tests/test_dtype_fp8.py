"""The fp8 dtypes in the IR: conversions against ml_dtypes (exhaustive for fp8 -> float, dense and random for
float -> fp8), constant folding and bytes, serialization, and promotion (tinygrad's lattice: PyTorch refuses fp8).

The rule for a float64 is plygrad's own, not whichever ml_dtypes is installed: round to float32 first, then once to
the fp8 (PyTorch's c10 float8 types do the same; ml_dtypes did until 0.7.0, which rounds a double once). So the
reference is ml_dtypes' float32 -> fp8 (one rounding in every version) applied to the float32-rounded input, and
float64 is also checked against torch itself.

NaN: ml_dtypes makes every fp8e5m2 NaN the canonical one where plygrad keeps the payload's top bits (dtype_fp8.py),
so NaNs are compared as NaN of the same sign.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from plygrad.ir import Ops, UOp, deserialize, dtypes, from_text, serialize, to_text
from plygrad.ir.dtype import DType, least_upper_dtype, result_dtype
from plygrad.ir.dtype_fp8 import FP8_FORMATS, decode_fp8, encode_fp8
from plygrad.ir.scalar import bitcast_value, from_bytes, to_bytes, truncate

FP8S = dtypes.fp8s
ALL_BYTES = np.arange(256, dtype=np.uint8)


def ml_type(dt: DType) -> Any:
    assert dt.numpy_name is not None
    return getattr(ml_dtypes, dt.numpy_name)


def same_float(a: float, b: float) -> bool:
    """Equal bits, or both NaN of the same sign."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b) and math.copysign(1, a) == math.copysign(1, b)
    return struct.pack("<d", a) == struct.pack("<d", b)


def sample(dt: DType) -> np.ndarray[Any, Any]:
    """Every value of `dt`, the midpoints of neighbours and the doubles just beside them, edges, random values."""
    with np.errstate(invalid="ignore"):
        values = ALL_BYTES.view(ml_type(dt)).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    mid = (finite[:-1] + finite[1:]) / 2
    top, tiny = float(ml_dtypes.finfo(ml_type(dt)).max), float(ml_dtypes.finfo(ml_type(dt)).smallest_subnormal)
    edges = np.array([top * 1.0625, top * 1.125, top * 1.2, top * 4, 1e300, tiny / 2, tiny / 3, tiny * 0.75, 5e-324,
                      0.0, np.inf, np.nan, 1e-40])
    rng = np.random.default_rng(3)
    random = rng.standard_normal(1 << 13) * 2.0 ** rng.integers(-24, 20, 1 << 13)
    parts = [values, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), mid * (1 + 2.0**-30), edges,
             -edges, random]
    return np.concatenate(parts)


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_every_pattern_decodes_as_ml_dtypes(dt: DType) -> None:
    fmt = FP8_FORMATS[dt.name]
    with np.errstate(invalid="ignore"):
        want = ALL_BYTES.view(ml_type(dt)).astype(np.float64)
    for bits, expected in zip(range(256), want, strict=True):
        assert same_float(decode_fp8(bits, fmt), float(expected)), f"{dt!r} {bits:#x}"


@pytest.mark.parametrize("wide", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_floats_encode_through_float32_then_nearest_even(dt: DType, wide: Any) -> None:
    fmt = FP8_FORMATS[dt.name]
    with np.errstate(over="ignore", invalid="ignore"):
        values = sample(dt).astype(wide)
        want = values.astype(np.float32).astype(ml_type(dt)).view(np.uint8)  # module docstring: the rule itself
    got = np.array([encode_fp8(float(v), fmt) for v in values], dtype=np.uint8)
    nan = np.isnan(values)
    assert np.array_equal(got[~nan], want[~nan]), np.flatnonzero(got[~nan] != want[~nan])[:5]
    decoded = [decode_fp8(int(b), fmt) for b in got[nan]]
    assert all(math.isnan(d) for d in decoded)


TORCH_FP8 = {"fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2", "fp8e4m3fnuz": "float8_e4m3fnuz",
             "fp8e5m2fnuz": "float8_e5m2fnuz"}


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_float64_encodes_as_torch(dt: DType) -> None:
    """PyTorch converts a double to float8 through float: the same bytes for every value in the format's range.
    Past it torch differs by design (its CPU float8_e4m3fn saturates to 448, even inf; ml_dtypes and plygrad give
    NaN), and its NaNs are canonical, so those are left to the ml_dtypes test above."""
    torch = pytest.importorskip("torch")
    fmt = FP8_FORMATS[dt.name]
    values = sample(dt)
    with np.errstate(over="ignore"):
        values = values[np.abs(values.astype(np.float32)) <= fmt.max]  # in range after the float32 step (no NaN)
    want = torch.tensor(values, dtype=torch.float64).to(getattr(torch, TORCH_FP8[dt.name])).view(torch.uint8).numpy()
    got = np.array([encode_fp8(float(v), fmt) for v in values], dtype=np.uint8)
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, [(values[k], got[k], want[k]) for k in wrong[:5]]


@pytest.mark.parametrize(("dt", "x", "bits"), [
    (dtypes.fp8e4m3, -431.99999999999994, 0xFE),  # float32 -432.0 is a tie of -416 and -448: even is -448
    (dtypes.fp8e4m3, 431.99999999999994, 0x7E),
    (dtypes.fp8e5m2fnuz, -45055.99999999999, 0xFE),  # float32 -45056.0: a tie, even is -49152
    (dtypes.fp8e4m3, 432.00000000000006, 0x7E),  # just past the tie in float64, the tie again in float32
])
def test_a_double_just_below_a_tie_rounds_twice(dt: DType, x: float, bits: int) -> None:
    """The documented double rounding: a float64 next to an fp8 tie is rounded to float32 first (landing on the
    tie), then to nearest even; rounding the double once would give the neighbour below the tie."""
    assert float(np.float32(x)) != x and float(np.float32(x)) == round(x)
    assert encode_fp8(x, FP8_FORMATS[dt.name]) == bits


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_overflow_and_zero_rules_of_each_format(dt: DType) -> None:
    fmt = FP8_FORMATS[dt.name]
    big = decode_fp8(encode_fp8(1e6, fmt), fmt)
    assert big == math.inf if dt is dtypes.fp8e5m2 else math.isnan(big)  # no saturation, as ml_dtypes
    assert decode_fp8(encode_fp8(dtypes.finfo(dt).max, fmt), fmt) == dtypes.finfo(dt).max
    negative_zero = decode_fp8(encode_fp8(-0.0, fmt), fmt)
    assert math.copysign(1, negative_zero) == (1 if dt in dtypes.fp8_fnuz else -1)  # fnuz: no -0


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_constants_fold_to_fp8_values(dt: DType) -> None:
    for x in (0.1, 3.3, -1000.0, 1e-9, 250.0):
        with np.errstate(over="ignore", invalid="ignore"):
            want = float(np.float32(x).astype(ml_type(dt)).astype(np.float64))  # through float32, as the rule
        assert same_float(float(truncate(dt, x)), want)
        assert same_float(UOp.const(dt, x).arg, want)
    assert truncate(dt, 3) == 3.0 and truncate(dt, -17) == float(np.float32(-17).astype(ml_type(dt)))
    assert same_float(float(truncate(dt, 2**62 + 1)), float(truncate(dt, float(2**62))))  # overflows alike


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_bytes_round_trip_every_pattern_through_bitcast(dt: DType) -> None:
    for bits in range(256):
        value = bitcast_value(bits, dtypes.uint8, dt)
        assert bitcast_value(value, dt, dtypes.uint8) == bits
        assert to_bytes(from_bytes(bytes([bits]), dt), dt) == bytes([bits])


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_fp8_graphs_serialize_and_print(dt: DType) -> None:
    a = UOp(Ops.PARAM, dt.ptr(16), (), 0)
    c = UOp.const(dt, 1.5)
    sink = UOp(Ops.SINK, dtypes.void, (c, UOp.const(dt, math.nan), UOp.const(dt.vec(4), 0.5), a,
                                       UOp(Ops.CAST, dtypes.float32, (c,))))
    assert deserialize(serialize(sink)) is sink
    assert from_text(to_text(sink)) is sink
    assert dt.name in to_text(sink)


# ---- promotion: tinygrad's lattice (PyTorch refuses to promote fp8) --------------------------------------------------
@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_fp8_promotes_like_tinygrad(dt: DType) -> None:
    assert least_upper_dtype(dt, dt) is dt
    for integer in (dtypes.bool, *dtypes.ints):  # int tensor + fp8 tensor stays fp8, as int + half stays half
        assert least_upper_dtype(dt, integer) is dt
    for wider in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        assert least_upper_dtype(dt, wider) is wider
    for other in FP8S:
        if other is not dt:  # two fp8 formats meet in float16
            assert least_upper_dtype(dt, other) is dtypes.float16
    assert result_dtype(dt, 2.5) is dt and result_dtype(dt, 3) is dt


def test_64_bit_signed_and_unsigned_still_meet_in_float64() -> None:
    assert least_upper_dtype(dtypes.int64, dtypes.uint64) is dtypes.float64
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) is dtypes.float32
