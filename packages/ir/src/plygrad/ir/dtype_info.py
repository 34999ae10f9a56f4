"""Float formats: `dtypes.finfo(dt)`, the exponent and mantissa widths of each float dtype, with PyTorch's
`torch.finfo` fields (eps, max, tiny, ...) computed from them.

tinygrad's `dtypes.finfo` returns the pair `(exponent, mantissa)`; PyTorch's and NumPy's return an object with
`eps`, `max`, `min`, `tiny`... `FInfo` is both: a named pair that unpacks as tinygrad's does, with the other fields
as properties. The formats' biases and largest values come from IEEE 754 for float16/bfloat16/float32/float64 and
from dtype_fp8.py for the fp8s, whose largest values are not the IEEE formula's (no infinities, or no NaN codes).
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.dtype_fp8 import FP8_FORMATS
from plygrad.ir.errors import DTypeNameError


class FInfo(tuple[int, int]):
    """A float format: the pair `(exponent, mantissa)` of bit widths, as tinygrad's `dtypes.finfo` gives it (it
    unpacks: `e, m = dtypes.finfo(dt)`), with the fields of PyTorch's `torch.finfo` as properties; `dtype`, `bias`
    and `max` (the largest finite value) say what the bits mean."""

    dtype: DType
    bias: int
    max: float

    def __new__(cls, exponent: int, mantissa: int, dtype: DType, bias: int, largest: float) -> FInfo:
        info = super().__new__(cls, (exponent, mantissa))
        info.dtype, info.bias, info.max = dtype, bias, largest
        return info

    def __repr__(self) -> str:
        return (f"FInfo(dtype={self.dtype!r}, exponent={self.exponent}, mantissa={self.mantissa}, eps={self.eps}, "
                f"max={self.max}, tiny={self.tiny})")

    @property
    def exponent(self) -> int:
        return self[0]

    @property
    def mantissa(self) -> int:
        return self[1]

    @property
    def bits(self) -> int:
        return self.dtype.bitsize

    @property
    def eps(self) -> float:
        """The gap between 1.0 and the next value."""
        return math.ldexp(1.0, -self.mantissa)

    @property
    def min(self) -> float:
        """The most negative finite value."""
        return -self.max

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias)

    @property
    def tiny(self) -> float:
        """`smallest_normal`, by its PyTorch and NumPy name."""
        return self.smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias - self.mantissa)

    @property
    def resolution(self) -> float:
        """10 ** -(decimal digits the format holds), as torch.finfo and numpy.finfo define it."""
        return float(10 ** -math.floor((self.mantissa) * math.log10(2)))


def _ieee_info(dt: DType, exponent: int, mantissa: int) -> FInfo:
    bias = (1 << (exponent - 1)) - 1
    return FInfo(exponent, mantissa, dt, bias, math.ldexp(2.0 - math.ldexp(1.0, -mantissa), bias))


_FLOAT_INFO: Final[dict[DType, FInfo]] = {
    dtypes.float16: _ieee_info(dtypes.float16, 5, 10), dtypes.bfloat16: _ieee_info(dtypes.bfloat16, 8, 7),
    dtypes.float32: _ieee_info(dtypes.float32, 8, 23), dtypes.float64: _ieee_info(dtypes.float64, 11, 52),
    **{dtypes.from_name(f.name): FInfo(f.exponent_bits, f.mantissa_bits, dtypes.from_name(f.name), f.bias, f.max)
       for f in FP8_FORMATS.values()},
}


def float_info(dt: DType) -> FInfo:
    """`dtypes.finfo`: the format of a scalar float dtype; DTypeError for any other."""
    found = _FLOAT_INFO.get(dt)
    if found is None:
        raise DTypeNameError(f"finfo: {dt!r} is not a floating point dtype (the floats: "
                             f"{', '.join(d.name for d in dtypes.floats)}); use dt.min/dt.max for integer ranges")
    return found
