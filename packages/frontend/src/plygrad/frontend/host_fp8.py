"""fp8 tensors on the host: NumPy arrays to fp8 bytes and back, without ml_dtypes.

NumPy has no fp8 dtypes (ml_dtypes adds them, but the frontend does not depend on it), so fp8 data crosses the host
boundary the way bfloat16 does: in memory as its bytes (uint8), out of `.numpy()` as float32 values (every fp8 value
is a float32 one). An input array that already has an ml_dtypes fp8 dtype (`float8_e4m3fn`, ...) gives its bytes as
they are; any other array is rounded as plygrad.ir.dtype_fp8 rounds (PyTorch's rule: via float32, nearest even,
no saturation), one Python conversion per distinct bit pattern: quick for the small or repetitive data fp8
tensors are usually built from, slow for millions of distinct values (cast a float tensor on the device instead).
Decoding is a 256-entry table lookup.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from plygrad.ir import DType
from plygrad.ir.dtype_fp8 import FP8_FORMATS, decode_fp8, encode_fp8


def is_fp8(dtype: DType) -> bool:
    return dtype.name in FP8_FORMATS


@cache
def _decode_table(name: str) -> np.ndarray[Any, Any]:
    fmt = FP8_FORMATS[name]
    return np.array([decode_fp8(bits, fmt) for bits in range(256)], dtype=np.float32)


def fp8_bytes(array: np.ndarray[Any, Any], dtype: DType) -> np.ndarray[Any, Any]:
    """`array`'s values as the uint8 patterns of the fp8 `dtype` (same shape)."""
    if str(array.dtype) == dtype.numpy_name:  # already this fp8 (an ml_dtypes array): its bytes
        return np.ascontiguousarray(array).view(np.uint8)
    fmt = FP8_FORMATS[dtype.name]
    with np.errstate(over="ignore", invalid="ignore"):
        wide = np.asarray(array, dtype=np.float64)
    out = np.empty(wide.shape, np.uint8)
    nan = np.isnan(wide)
    # distinct bit patterns, not values: -0.0 and 0.0 are equal but encode apart
    patterns, inverse = np.unique(np.ascontiguousarray(wide[~nan]).view(np.uint64), return_inverse=True)
    out[~nan] = np.array([encode_fp8(float(v), fmt) for v in patterns.view(np.float64)], dtype=np.uint8)[inverse]
    out[nan & ~np.signbit(wide)] = encode_fp8(math.nan, fmt)
    out[nan & np.signbit(wide)] = encode_fp8(-math.nan, fmt)
    return out


def fp8_values(bits: np.ndarray[Any, Any], dtype: DType) -> np.ndarray[Any, Any]:
    """The float32 values of the fp8 patterns `bits` (uint8, any shape)."""
    values: np.ndarray[Any, Any] = _decode_table(dtype.name)[bits]
    return values
