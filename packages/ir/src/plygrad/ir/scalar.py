"""Exact scalar arithmetic per dtype: what constant folding computes, and what an interpreter of the IR computes.

Integers wrap around in two's complement at their width (the index type is an unbounded mathematical integer);
IDIV truncates toward zero and MOD takes the sign of the dividend, as C does. Floats are computed in float64 and
rounded to nearest-even at the result dtype, which gives the correctly rounded result for + - * / sqrt at
float32, float16 and bfloat16 (float64 holds more than twice their precision). Transcendentals (EXP2, LOG2, SIN,
POW) are rounded from float64's result, which may differ from a device's by an ulp.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Final

from plygrad.ir.dtype import ConstType, DType, DTypeKind, dtypes
from plygrad.ir.dtype_fp8 import FP8_FORMATS, Fp8Format, decode_fp8, encode_fp8, round_fp8
from plygrad.ir.ops import Ops

_MASK32: Final = 0xFFFFFFFF


# ---- representing values ---------------------------------------------------------------------------------------
# NaNs: a float64 holds every narrower NaN as the same sign and the payload shifted to the top of its mantissa
# (what hardware conversion does). Doing that by hand rather than through struct keeps payloads and signaling NaNs
# bit-exact, so BITCAST of any bit pattern to a float dtype and back gives the same bits (as NumPy's .view does).
_F64_MANTISSA: Final = 52
_NARROW_FORMATS: Final[dict[str, tuple[int, int]]] = {"float32": (8, 23), "float16": (5, 10), "bfloat16": (8, 7)}


def _f64_bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def _narrow_nan(x: float, mantissa_bits: int) -> float:
    """The float64 standing for the NaN `x` rounded to a format with `mantissa_bits`: the low payload bits go."""
    bits = _f64_bits(x)
    shift = _F64_MANTISSA - mantissa_bits
    payload = (bits & ((1 << _F64_MANTISSA) - 1)) >> shift
    if payload == 0:  # only low payload bits were set: converting hardware keeps a quiet NaN
        payload = 1 << (mantissa_bits - 1)
    return float(struct.unpack("<d", struct.pack("<Q", (bits & ~((1 << _F64_MANTISSA) - 1)) | payload << shift))[0])


def _narrow_bits(x: float, name: str) -> int:
    """The bit pattern of the already-rounded value `x` in the narrow float format `name`."""
    exp_bits, mantissa_bits = _NARROW_FORMATS[name]
    sign = _f64_bits(x) >> 63
    if math.isnan(x):
        payload = (_f64_bits(x) & ((1 << _F64_MANTISSA) - 1)) >> (_F64_MANTISSA - mantissa_bits)
        return (sign << (exp_bits + mantissa_bits)) | (((1 << exp_bits) - 1) << mantissa_bits) | payload
    if name == "float16":
        return int(struct.unpack("<H", struct.pack("<e", x))[0])
    f32 = int(struct.unpack("<I", struct.pack("<f", x))[0])
    return f32 if name == "float32" else f32 >> 16


def _narrow_from_bits(bits: int, name: str) -> float:
    """Inverse of `_narrow_bits`."""
    exp_bits, mantissa_bits = _NARROW_FORMATS[name]
    exp_all_ones = ((1 << exp_bits) - 1) << mantissa_bits
    payload = bits & ((1 << mantissa_bits) - 1)
    if bits & exp_all_ones == exp_all_ones and payload:
        sign = bits >> (exp_bits + mantissa_bits)
        f64 = (sign << 63) | (0x7FF << _F64_MANTISSA) | (payload << (_F64_MANTISSA - mantissa_bits))
        return float(struct.unpack("<d", struct.pack("<Q", f64))[0])
    if name == "float16":
        return float(struct.unpack("<e", struct.pack("<H", bits))[0])
    return float(struct.unpack("<f", struct.pack("<I", bits if name == "float32" else bits << 16))[0])


def _round_float32(x: float) -> float:
    if math.isnan(x):
        return _narrow_nan(x, 23)
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:  # struct raises only when the rounded value is infinite
        return math.copysign(math.inf, x)


def _round_float16(x: float) -> float:
    if math.isnan(x):
        return _narrow_nan(x, 10)
    try:
        return float(struct.unpack("<e", struct.pack("<e", x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def _round_bfloat16(x: float) -> float:
    # float64 -> float32 -> bfloat16, as PyTorch's c10::BFloat16 does (round to nearest even at each step)
    f32 = _round_float32(x)
    if math.isnan(f32):
        return _narrow_nan(f32, 7)
    bits = struct.unpack("<I", struct.pack("<f", f32))[0]
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return float(struct.unpack("<f", struct.pack("<I", bits & _MASK32))[0])


def _round_fp8(fmt: Fp8Format, x: float) -> float:
    return round_fp8(x, fmt)


def _int_to_float(x: int) -> float:
    """`x` as a float64 from which rounding to any narrower float gives the correctly rounded value of `x`.

    float(x) alone rounds twice on the way to float32 (int64 -> float64 -> float32), which is wrong for
    x = 2**62 + 2**38 + 1. Rounding to odd at float64 (keep 53 bits, OR the dropped bits into the last one)
    makes the second rounding exact, as C's (float)x is. Integers beyond float64's range become infinities.
    """
    magnitude = abs(x)
    extra = magnitude.bit_length() - (_F64_MANTISSA + 1)
    if extra > 0:
        kept = magnitude >> extra
        if magnitude & ((1 << extra) - 1):
            kept |= 1
        magnitude = kept << extra
    try:
        return float(magnitude) if x >= 0 else -float(magnitude)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


_FLOAT_ROUNDERS: Final[dict[DType, Callable[[float], float]]] = {
    dtypes.float64: float, dtypes.float32: _round_float32, dtypes.float16: _round_float16,
    dtypes.bfloat16: _round_bfloat16,
    # fp8: rounded once from float64, as ml_dtypes converts (dtype_fp8.py)
    **{dtypes.from_name(name): partial(_round_fp8, fmt) for name, fmt in FP8_FORMATS.items()},
}
_FP8_OF: Final[dict[DType, Fp8Format]] = {dtypes.from_name(name): fmt for name, fmt in FP8_FORMATS.items()}


def _wrap_int(dt: DType, x: int) -> int:
    if dt.kind is DTypeKind.INDEX:
        return x
    bits = dt.bitsize
    x &= (1 << bits) - 1
    if dt.kind is DTypeKind.SIGNED and x >> (bits - 1):
        x -= 1 << bits
    return x


def truncate(dt: DType, value: ConstType) -> ConstType:
    """`value` as the dtype stores it: ints wrapped to width, floats rounded, anything nonzero True for bool."""
    scalar = dt.scalar()
    if scalar.kind is DTypeKind.BOOL:
        return bool(value)
    if scalar.kind is DTypeKind.FLOAT:
        if isinstance(value, int) and not isinstance(value, bool):
            if scalar is dtypes.float64:  # Python's int -> float is correctly rounded
                try:
                    return float(value)
                except OverflowError:  # an index value past float64's range
                    return math.inf if value > 0 else -math.inf
            return _FLOAT_ROUNDERS[scalar](_int_to_float(value))
        return _FLOAT_ROUNDERS[scalar](float(value))
    if scalar.is_int:
        if isinstance(value, float):
            return _wrap_int(scalar, _float_to_int(value))
        return _wrap_int(scalar, int(value))
    raise TypeError(f"{dt!r} holds no values")


def _float_to_int(x: float) -> int:
    # C leaves out-of-range and NaN conversions undefined; we define NaN -> 0 and +-inf -> 0 so folding is total
    if math.isnan(x) or math.isinf(x):
        return 0
    return math.trunc(x)


def cast_value(value: ConstType, to: DType) -> ConstType:
    """CAST of a scalar: float->int truncates toward zero (then wraps), int->float rounds, x->bool is x != 0."""
    return truncate(to, value)


_STRUCT_FORMATS: Final[dict[DType, str]] = {
    dtypes.bool: "?", dtypes.int8: "b", dtypes.uint8: "B", dtypes.int16: "h", dtypes.uint16: "H",
    dtypes.int32: "i", dtypes.uint32: "I", dtypes.int64: "q", dtypes.uint64: "Q", dtypes.float16: "e",
    dtypes.float32: "f", dtypes.float64: "d",
}


def to_bytes(value: ConstType, dt: DType) -> bytes:
    """The little-endian memory bytes of one scalar of dtype `dt`."""
    value = truncate(dt, value)
    fp8 = _FP8_OF.get(dt)
    if fp8 is not None:
        return bytes([encode_fp8(float(value), fp8)])
    if dt.name in _NARROW_FORMATS:
        return _narrow_bits(float(value), dt.name).to_bytes(dt.itemsize, "little")
    return struct.pack("<" + _STRUCT_FORMATS[dt], value)


def from_bytes(data: bytes, dt: DType) -> ConstType:
    """Inverse of `to_bytes` (NaN payloads included)."""
    fp8 = _FP8_OF.get(dt)
    if fp8 is not None:
        if len(data) != 1:
            raise ValueError(f"{dt!r} takes 1 byte, got {len(data)}")
        return decode_fp8(data[0], fp8)
    if dt.name in _NARROW_FORMATS:
        if len(data) != dt.itemsize:
            raise ValueError(f"{dt!r} takes {dt.itemsize} bytes, got {len(data)}")
        return _narrow_from_bits(int.from_bytes(data, "little"), dt.name)
    result: ConstType = struct.unpack("<" + _STRUCT_FORMATS[dt], data)[0]
    return result


def bitcast_value(value: ConstType, src: DType, to: DType) -> ConstType:
    """BITCAST of a scalar: the same bytes read as another dtype of the same size."""
    if src.itemsize != to.itemsize:
        raise ValueError(f"bitcast from {src!r} to {to!r}: itemsizes {src.itemsize} and {to.itemsize} differ")
    return from_bytes(to_bytes(value, src), to)


# ---- float helpers that never raise ----------------------------------------------------------------------------
def _fused_multiply_add(dt: DType, x: float, y: float, z: float) -> float:
    """x*y + z rounded once at `dt` (MULACC, a fused multiply-add: docs/ir.md §5). The exact value is a fraction;
    float() of it is the correctly rounded float64. For a narrower dtype that float64 is first made round-to-odd
    (an inexact result with an even last bit steps to its neighbour towards the exact value), which float64's 29
    extra bits make exact for the second rounding: float32's fmaf, not a product and a sum rounded in turn."""
    if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
        return x * y + z  # inf and NaN follow IEEE's rules, which one rounding does not change
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:  # the sign of zero: an exact -0.0 * y + -0.0 keeps its sign, a cancellation gives +0.0
        product = x * y
        return product + z if product == 0 else 0.0
    try:
        nearest = float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    if dt.scalar() is dtypes.bfloat16:
        return _odd_float32(exact, nearest)
    if dt.scalar() is not dtypes.float64 and Fraction(nearest) != exact \
            and struct.unpack("<Q", struct.pack("<d", nearest))[0] & 1 == 0:
        nearest = math.nextafter(nearest, math.inf if exact > nearest else -math.inf)
    return nearest


def _odd_float32(exact: Fraction, nearest: float) -> float:
    """`exact` rounded to odd at float32 (toward zero, then an inexact result gets its last bit set), as a float.
    bfloat16 rounds through float32 (`_round_bfloat16`), so a float64 rounded to odd would be rounded twice on the
    way; one rounded to odd at float32, whose 16 extra bits hold the sticky bit, rounds to bfloat16 correctly."""
    f32 = _round_float32(nearest)
    if math.isinf(f32):  # beyond float32: its largest finite value, odd, still rounds to the right infinity
        f32 = math.copysign(struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0], nearest)
    bits = struct.unpack("<I", struct.pack("<f", f32))[0]
    if abs(Fraction(f32)) > abs(exact):  # rounded away from zero: one step back toward it (the sign bit stays)
        bits -= 1
    if Fraction(struct.unpack("<f", struct.pack("<I", bits))[0]) != exact:
        bits |= 1
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def _fdiv(x: float, y: float) -> float:
    if y == 0.0:
        if x == 0.0 or math.isnan(x):
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def _exp2(x: float) -> float:
    try:
        return math.pow(2.0, x)
    except OverflowError:
        return math.inf


def _log2(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    return math.log2(x)


def _sqrt(x: float) -> float:
    return math.nan if x < 0 else math.sqrt(x)


def _sin(x: float) -> float:
    return math.nan if math.isinf(x) else math.sin(x)


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:
        return math.inf if x > 0 or (float(y).is_integer() and int(y) % 2 == 0) else -math.inf
    except (ValueError, ZeroDivisionError):
        if x == 0.0:  # 0 ** negative
            odd = float(y).is_integer() and int(y) % 2 == 1
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan  # negative ** fractional


def _fmax(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return math.nan  # PyTorch's maximum propagates NaN
    if x == y == 0.0:
        return x if math.copysign(1.0, x) > 0 else y
    return max(x, y)


def _trunc(x: float) -> float:
    # copysign: C's trunc keeps the sign of zero (trunc(-0.5) is -0.0), math.trunc returns an int that cannot
    return x if math.isinf(x) or math.isnan(x) else math.copysign(float(math.trunc(x)), x)


def _idiv(x: int, y: int) -> int:
    # C traps (SIGFPE) or gives garbage here; the IR defines x / 0 = 0, as NumPy does (docs/ir.md §5)
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _mod(x: int, y: int) -> int:
    # x % 0 = 0 (NumPy's answer), so x == y * (x / y) + x % y holds only where y != 0
    return 0 if y == 0 else x - y * _idiv(x, y)


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def threefry2x32(counter: int, key: int) -> int:
    """Threefry-2x32 with 20 rounds (Random123, as JAX uses it) on a 64-bit counter and key.

    The low 32 bits of each are word 0, the high 32 bits word 1; the result packs (word1 << 32) | word0.
    """
    ks = (key & _MASK32, (key >> 32) & _MASK32, 0)
    ks = (ks[0], ks[1], ks[0] ^ ks[1] ^ 0x1BD11BDA)
    x0 = (counter & _MASK32) + ks[0] & _MASK32
    x1 = ((counter >> 32) & _MASK32) + ks[1] & _MASK32
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    for group in range(5):
        for r in rotations[group % 2]:
            x0 = (x0 + x1) & _MASK32
            x1 = _rotl32(x1, r) ^ x0
        x0 = (x0 + ks[(group + 1) % 3]) & _MASK32
        x1 = (x1 + ks[(group + 2) % 3] + group + 1) & _MASK32
    return (x1 << 32) | x0


def _shl(dt: DType, x: int, y: int) -> int:
    # C leaves shifts by a negative amount or by >= the width undefined; the IR shifts every bit out (NumPy)
    if not 0 <= y < dt.bitsize:
        return 0
    return x << y


def _shr(dt: DType, x: int, y: int) -> int:
    # out-of-range amounts shift every bit out: 0, or -1 for a negative signed value (the sign fills, NumPy)
    if not 0 <= y < dt.bitsize:
        return -1 if x < 0 else 0
    return x >> y


# ---- the ALU table ---------------------------------------------------------------------------------------------
# Each entry computes the exact result from Python values; exec_alu then rounds or wraps it at the dtype.
_FLOAT_ALU: Final[dict[Ops, Callable[..., ConstType]]] = {
    Ops.NEG: lambda x: -x, Ops.RECIPROCAL: lambda x: _fdiv(1.0, x), Ops.SQRT: _sqrt, Ops.EXP2: _exp2,
    Ops.LOG2: _log2, Ops.SIN: _sin, Ops.TRUNC: _trunc,
    Ops.ADD: lambda x, y: x + y, Ops.SUB: lambda x, y: x - y, Ops.MUL: lambda x, y: x * y, Ops.FDIV: _fdiv,
    Ops.MAX: _fmax, Ops.POW: _pow,  # MULACC: exec_alu's _fused_multiply_add (it needs the dtype)
}
_INT_ALU: Final[dict[Ops, Callable[..., ConstType]]] = {
    Ops.NEG: lambda x: -x, Ops.TRUNC: lambda x: x,
    Ops.ADD: lambda x, y: x + y, Ops.SUB: lambda x, y: x - y, Ops.MUL: lambda x, y: x * y, Ops.IDIV: _idiv,
    Ops.MOD: _mod, Ops.MAX: max, Ops.AND: lambda x, y: x & y, Ops.OR: lambda x, y: x | y,
    Ops.XOR: lambda x, y: x ^ y, Ops.MULACC: lambda x, y, z: x * y + z, Ops.THREEFRY: threefry2x32,
}
_BOOL_ALU: Final[dict[Ops, Callable[..., ConstType]]] = {
    Ops.AND: lambda x, y: x and y, Ops.OR: lambda x, y: x or y, Ops.XOR: lambda x, y: x != y,
    Ops.MAX: lambda x, y: x or y, Ops.MUL: lambda x, y: x and y, Ops.ADD: lambda x, y: x or y,
}
_COMPARE: Final[dict[Ops, Callable[[ConstType, ConstType], bool]]] = {
    Ops.CMPLT: lambda x, y: x < y, Ops.CMPNE: lambda x, y: x != y, Ops.CMPEQ: lambda x, y: x == y,
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[ConstType, ...]) -> ConstType:
    """The exact value of ALU `op` whose result dtype is `dtype` (for comparisons: the operands' dtype is what
    matters, the result is bool). Total: where C leaves a result undefined the IR defines one (x / 0 = x % 0 = 0,
    MIN / -1 = MIN, out-of-range shifts shift every bit out, float -> int of NaN/inf is 0; docs/ir.md §5).
    """
    if op in _COMPARE:
        return _COMPARE[op](operands[0], operands[1])
    if op is Ops.WHERE:
        return truncate(dtype, operands[1] if operands[0] else operands[2])
    scalar = dtype.scalar()
    if scalar.kind is DTypeKind.FLOAT:
        if op is Ops.MULACC:
            return truncate(scalar, _fused_multiply_add(scalar, *(float(x) for x in operands)))
        fn = _FLOAT_ALU.get(op)
        args: tuple[ConstType, ...] = tuple(float(x) for x in operands)
    elif scalar.kind is DTypeKind.BOOL:
        fn = _BOOL_ALU.get(op)
        args = tuple(bool(x) for x in operands)
    elif scalar.is_int:
        if op is Ops.SHL:
            return truncate(scalar, _shl(scalar, int(operands[0]), int(operands[1])))
        if op is Ops.SHR:
            return truncate(scalar, _shr(scalar, int(operands[0]), int(operands[1])))
        fn = _INT_ALU.get(op)
        args = tuple(int(x) for x in operands)
    else:
        raise TypeError(f"{op!r} has no values of dtype {dtype!r}")
    if fn is None:
        raise TypeError(f"{op!r} is not defined on {dtype!r}")
    return truncate(scalar, fn(*args))
