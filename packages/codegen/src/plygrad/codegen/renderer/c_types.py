"""C spellings for plygrad dtypes and constants, and the helper functions a C program may need.

Values of float16 and bfloat16 live in `float` locals and are rounded back to their dtype after every operation
(`round_to`), so each op is correctly rounded as docs/ir.md asks; memory holds them as `_Float16` (gcc/clang's
IEEE half) and `uint16_t` (bfloat16 bits), converted on load and store.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.ir import DType, DTypeKind, dtypes

_LOCAL: Final[dict[DType, str]] = {
    dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.int16: "int16_t", dtypes.int32: "int32_t",
    dtypes.int64: "int64_t", dtypes.uint8: "uint8_t", dtypes.uint16: "uint16_t", dtypes.uint32: "uint32_t",
    dtypes.uint64: "uint64_t", dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.index: "long long",
}
_STORAGE: Final[dict[DType, str]] = {**_LOCAL, dtypes.float16: "_Float16", dtypes.bfloat16: "uint16_t"}

PREAMBLE: Final = "#include <math.h>\n#include <stdint.h>\n"

HELPERS: Final[dict[str, str]] = {
    "bf16": """static inline float plygrad_bf16_to_float(uint16_t b) {
  union { uint32_t u; float f; } v = { .u = (uint32_t)b << 16 }; return v.f;
}
static inline uint16_t plygrad_float_to_bf16(float f) {
  union { float f; uint32_t u; } v = { .f = f };
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16); /* round to nearest even */
}
static inline float plygrad_round_bf16(float f) { return plygrad_bf16_to_float(plygrad_float_to_bf16(f)); }
""",
    "fmax": """static inline float plygrad_fmaxf(float a, float b) {
  if (a != a || b != b) return a + b; /* NaN propagates */
  if (a == b) return signbit(a) ? b : a; /* max(-0.0, 0.0) is 0.0 */
  return a > b ? a : b;
}
static inline double plygrad_fmax(double a, double b) {
  if (a != a || b != b) return a + b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
""",
    "threefry": """static inline uint32_t plygrad_rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
static inline uint64_t plygrad_threefry2x32(uint64_t counter, uint64_t key) {
  uint32_t ks0 = (uint32_t)key, ks1 = (uint32_t)(key >> 32), ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;
  uint32_t ks[3] = {ks0, ks1, ks2};
  uint32_t x0 = (uint32_t)counter + ks0, x1 = (uint32_t)(counter >> 32) + ks1;
  static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  for (int g = 0; g < 5; g++) {
    for (int i = 0; i < 4; i++) { x0 += x1; x1 = plygrad_rotl32(x1, rot[g % 2][i]) ^ x0; }
    x0 += ks[(g + 1) % 3]; x1 += ks[(g + 2) % 3] + (uint32_t)(g + 1);
  }
  return ((uint64_t)x1 << 32) | x0;
}
""",
}


def c_local(dtype: DType) -> str:
    """The C type of a local value of `dtype`."""
    found = _LOCAL.get(dtype)
    if found is None:
        raise CodegenError(f"the C renderer has no type for {dtype!r}: it renders scalar value dtypes only")
    return found


def c_storage(dtype: DType) -> str:
    """The C type of `dtype` in memory (buffers)."""
    found = _STORAGE.get(dtype)
    if found is None:
        raise CodegenError(f"the C renderer cannot hold {dtype!r} in a buffer")
    return found


def round_to(dtype: DType, expr: str) -> str:
    """`expr` (a float computation) rounded to `dtype` when that dtype is narrower than its float local."""
    if dtype is dtypes.float16:
        return f"((float)(_Float16)({expr}))"
    if dtype is dtypes.bfloat16:
        return f"plygrad_round_bf16({expr})"
    return expr


def literal(dtype: DType, value: object) -> str:
    """A C expression for a constant of `dtype`, exact to the bit (hex floats)."""
    if dtype is dtypes.bool:
        return "1" if value else "0"
    if dtype.kind is DTypeKind.FLOAT:
        assert isinstance(value, float)
        suffix = "" if dtype is dtypes.float64 else "f"
        cast = "(double)" if dtype is dtypes.float64 else "(float)"
        if math.isnan(value):
            return f"({cast}NAN)"
        if math.isinf(value):
            return f"({cast}INFINITY)" if value > 0 else f"(-{cast}INFINITY)"
        return f"{value.hex()}{suffix}"
    assert isinstance(value, int)
    if dtype.kind is DTypeKind.UNSIGNED:
        return f"(({c_local(dtype)}){value}ULL)"
    if value == -(2**63):
        return "(-9223372036854775807LL - 1)"
    text = f"{value}LL" if value >= 0 else f"({value}LL)"
    return text if dtype is dtypes.index else f"(({c_local(dtype)}){text})"
