"""The four 8-bit float formats: their bit layouts, and exact conversion between their bits and Python floats.

`fp8e4m3`, `fp8e5m2`, `fp8e4m3fnuz` and `fp8e5m2fnuz` differ in bias and in what the all-ones exponent means.
Conversion rounds through float32, then to nearest even with no saturation, keeping NaN payloads as float16 does;
the table of layouts and the rounding rules (and where they differ from ml_dtypes and PyTorch) are in docs/ir.md §3,
"fp8". The renderers' C conversions (codegen `renderer/fp8.py`) implement the same algorithm.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Final

_F64_MANTISSA: Final = 52


@dataclass(frozen=True)
class Fp8Format:
    """The layout of one 8-bit float format (the module docstring's table)."""

    name: str  # the plygrad dtype name
    numpy_name: str  # the ml_dtypes / PyTorch name
    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool  # IEEE-style: the all-ones exponent holds inf (mantissa 0) and NaNs
    fnuz: bool  # finite, no negative zero: 0x80 is the one NaN

    @property
    def max_bits(self) -> int:
        """The bit pattern of the largest finite value."""
        if self.has_inf:  # exponent all ones minus one, mantissa all ones
            return ((1 << self.exponent_bits) - 2) << self.mantissa_bits | ((1 << self.mantissa_bits) - 1)
        if self.fnuz:
            return 0x7F
        return 0x7E  # e4m3fn: S.1111.111 is NaN, S.1111.110 the largest

    @property
    def max(self) -> float:
        return decode_fp8(self.max_bits, self)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias - self.mantissa_bits)

    def nan_bits(self, negative: bool) -> int:
        """The canonical NaN: 0x80 for fnuz, else the sign and S.1..1 (e4m3fn) or a quiet S.11111.10 (e5m2)."""
        if self.fnuz:
            return 0x80
        sign = 0x80 if negative else 0
        if self.has_inf:
            return sign | ((1 << self.exponent_bits) - 1) << self.mantissa_bits | 1 << (self.mantissa_bits - 1)
        return sign | 0x7F

    def overflow_bits(self, negative: bool) -> int:
        """What a value past the largest finite one becomes: inf where the format has it, else NaN."""
        if self.has_inf:
            return (0x80 if negative else 0) | ((1 << self.exponent_bits) - 1) << self.mantissa_bits
        return self.nan_bits(negative)


FP8_FORMATS: Final[dict[str, Fp8Format]] = {
    "fp8e4m3": Fp8Format("fp8e4m3", "float8_e4m3fn", 4, 3, 7, has_inf=False, fnuz=False),
    "fp8e5m2": Fp8Format("fp8e5m2", "float8_e5m2", 5, 2, 15, has_inf=True, fnuz=False),
    "fp8e4m3fnuz": Fp8Format("fp8e4m3fnuz", "float8_e4m3fnuz", 4, 3, 8, has_inf=False, fnuz=True),
    "fp8e5m2fnuz": Fp8Format("fp8e5m2fnuz", "float8_e5m2fnuz", 5, 2, 16, has_inf=False, fnuz=True),
}


def _f64_bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def _to_float32(x: float) -> float:
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:  # rounds to infinity
        return math.copysign(math.inf, x)


def encode_fp8(x: float, fmt: Fp8Format) -> int:
    """The bits of `x` rounded to `fmt` (module docstring: via float32, nearest even, overflow to inf or NaN)."""
    negative = math.copysign(1.0, x) < 0
    sign = 0x80 if negative else 0
    if not math.isnan(x):
        x = _to_float32(x)
    if math.isnan(x):
        if not fmt.has_inf:
            return fmt.nan_bits(negative)
        payload = (_f64_bits(x) >> (_F64_MANTISSA - fmt.mantissa_bits)) & ((1 << fmt.mantissa_bits) - 1)
        if payload == 0:  # only low payload bits were set: keep a quiet NaN
            return fmt.nan_bits(negative)
        return sign | ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits | payload
    magnitude = abs(x)
    if magnitude > 2 * fmt.max:  # inf, or far past the range (and past what the division below keeps exact)
        return fmt.overflow_bits(negative)
    min_exponent = 1 - fmt.bias
    exponent = max(math.frexp(magnitude)[1] - 1, min_exponent) if magnitude else min_exponent
    quantum = math.ldexp(1.0, exponent - fmt.mantissa_bits)  # the spacing of fp8 values around x
    steps = round(magnitude / quantum)  # exact division by a power of two; round() ties to even
    value = steps * quantum
    if value > fmt.max:
        return fmt.overflow_bits(negative)
    if value == 0:
        return 0 if fmt.fnuz else sign
    value_exponent = math.frexp(value)[1] - 1
    if value_exponent < min_exponent:  # subnormal: the exponent field is 0
        return sign | int(value / fmt.min_subnormal)
    field = value_exponent + fmt.bias
    mantissa = int(math.ldexp(value, fmt.mantissa_bits - value_exponent)) - (1 << fmt.mantissa_bits)
    return sign | field << fmt.mantissa_bits | mantissa


def decode_fp8(bits: int, fmt: Fp8Format) -> float:
    """The float value of the fp8 pattern `bits` (exact: every fp8 value is a float32 value)."""
    if not 0 <= bits <= 0xFF:
        raise ValueError(f"{fmt.name}: {bits} is not an 8-bit pattern")
    negative = bool(bits & 0x80)
    field = (bits >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = bits & ((1 << fmt.mantissa_bits) - 1)
    all_ones = (1 << fmt.exponent_bits) - 1
    if fmt.fnuz and bits == 0x80:
        return -math.nan  # the NaN's pattern is the sign bit alone: a negative NaN, as ml_dtypes reads it
    if fmt.has_inf and field == all_ones:
        if mantissa == 0:
            return -math.inf if negative else math.inf
        f64 = (int(negative) << 63) | (0x7FF << _F64_MANTISSA) | mantissa << (_F64_MANTISSA - fmt.mantissa_bits)
        return float(struct.unpack("<d", struct.pack("<Q", f64))[0])
    if not fmt.has_inf and not fmt.fnuz and bits & 0x7F == 0x7F:
        return -math.nan if negative else math.nan
    if field == 0:
        value = mantissa * fmt.min_subnormal
    else:
        value = math.ldexp((1 << fmt.mantissa_bits) | mantissa, field - fmt.bias - fmt.mantissa_bits)
    return -value if negative else value


def round_fp8(x: float, fmt: Fp8Format) -> float:
    """`x` rounded to `fmt`, as a Python float (what a CONST of the dtype holds)."""
    return decode_fp8(encode_fp8(x, fmt), fmt)
