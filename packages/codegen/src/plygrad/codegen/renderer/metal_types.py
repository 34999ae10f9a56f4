"""Metal Shading Language spellings for plygrad dtypes and constants, and the helper functions a Metal program may need.

MSL is C++14 without `double` and `long long`, so every spelling the C and CUDA renderers share through `CFunction`
comes from here: Metal's types (the IR's `index` a `long`; float64 raises CodegenError), float16 as `half` computed
in `float`, bfloat16 as `ushort` bits with the C renderer's integer conversions, exact constants (shortest decimals,
NaN and inf through `as_type<float>`), and float-only helpers such as `plygrad_f2i`. docs/codegen.md §5.2.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.ir import DType, DTypeKind, cast_value, dtypes

_LOCAL: Final[dict[DType, str]] = {
    dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
    dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
    dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.index: "long",
}
_STORAGE: Final[dict[DType, str]] = {**_LOCAL, dtypes.float16: "half", dtypes.bfloat16: "ushort"}

PREAMBLE: Final = """#include <metal_stdlib>
using namespace metal;
/* docs/ir.md rounds after every operation: no fast math, no contraction of a*b+c (each op is its own statement, and
   the runtime compiles with MTLMathModeSafe / fastMathEnabled = NO as well) */
#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)
"""


def metal_local(dtype: DType) -> str:
    """The Metal type of a local value of scalar `dtype`."""
    found = _LOCAL.get(dtype)
    if found is None:
        what = "Metal has no float64 (Target.metal does not list it)" if dtype is dtypes.float64 else \
            "it renders scalar value dtypes only"
        raise CodegenError(f"the metal renderer has no type for {dtype!r}: {what}")
    return found


def metal_storage(dtype: DType) -> str:
    """The Metal type of `dtype` in memory (buffers)."""
    found = _STORAGE.get(dtype)
    if found is None:
        raise CodegenError(f"the metal renderer cannot hold {dtype!r} in a buffer (Metal has no float64)")
    return found


def _float_bits(bits: int) -> str:
    return f"as_type<float>({bits:#010x}u)"


def metal_literal(dtype: DType, value: object) -> str:
    """An MSL expression for a constant of `dtype`, exact to the bit."""
    if dtype is dtypes.bool:
        return "true" if value else "false"
    if dtype.kind is DTypeKind.FLOAT:
        assert isinstance(value, float)
        metal_local(dtype)  # float64 raises
        if math.isnan(value):
            return _float_bits(0x7FC00000)
        single = float(cast_value(value, dtypes.float32))  # a float16/bfloat16 value is a float32 one too
        if math.isinf(single):
            return _float_bits(0x7F800000 if single > 0 else 0xFF800000)
        text = f"{single!r}f"  # the shortest decimal that reads back as this double, hence as this float
        return f"({text})" if text.startswith("-") else text
    assert isinstance(value, int)
    if dtype.kind is DTypeKind.UNSIGNED:
        return f"(({metal_local(dtype)}){value}UL)"
    if value == -(2**63):
        return "(-9223372036854775807L - 1)"
    text = f"{value}L" if value >= 0 else f"({value}L)"
    return text if dtype is dtypes.index else f"(({metal_local(dtype)}){text})"


HELPERS: Final[dict[str, str]] = {
    # float16: Metal's half, computed in float; conversions are Metal's (round to nearest even)
    "f16": """inline float plygrad_half_to_float(half h) { return float(h); }
inline half plygrad_to_half(float x) { return half(x); }
inline float plygrad_round_half(float x) { return float(half(x)); }
""",
    # bfloat16 as its bits: the C renderer's conversions (renderer/c_types.py), with Metal's bit casts
    "bf16": """inline float plygrad_bf16_to_float(ushort b) { return as_type<float>(uint(b) << 16); }
inline ushort plygrad_float_to_bf16(float f) {
  uint u = as_type<uint>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ushort((u >> 16) | 0x40u); /* quiet NaN */
  return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}
inline float plygrad_round_bf16(float f) { return plygrad_bf16_to_float(plygrad_float_to_bf16(f)); }
""",
    # float -> integer as docs/ir.md §5 defines it, without a double: in range, the conversion truncates; at or
    # beyond 2^63 a float is mantissa * 2^shift (shift >= 40), whose low 64 bits wrap; NaN and inf give 0
    "f2i": """inline ulong plygrad_f2i(float x) {
  if (x > -9223372036854775808.0f && x < 9223372036854775808.0f) return ulong(long(x));
  uint bits = as_type<uint>(x), exponent = (bits >> 23) & 0xffu;
  if (exponent == 0xffu) return 0UL; /* NaN, inf */
  ulong mantissa = ulong((bits & 0x7fffffu) | 0x800000u);
  uint shift = exponent - 150u; /* |x| = mantissa * 2^(exponent - 127 - 23) */
  ulong wrapped = shift < 64u ? mantissa << shift : 0UL;
  return (bits >> 31) != 0u ? 0UL - wrapped : wrapped;
}
""",
    "fmax": """inline float plygrad_fmaxf(float a, float b) {
  if (a != a || b != b) return a + b; /* NaN propagates */
  if (a == b) return as_type<int>(a) < 0 ? b : a; /* max(-0.0, 0.0) is 0.0 */
  return a > b ? a : b;
}
""",
    "threefry": """inline uint plygrad_rotl32(uint x, int r) { return (x << r) | (x >> (32 - r)); }
inline ulong plygrad_threefry2x32(ulong counter, ulong key) {
  uint ks0 = uint(key), ks1 = uint(key >> 32), ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;
  uint ks[3] = {ks0, ks1, ks2};
  uint x0 = uint(counter) + ks0, x1 = uint(counter >> 32) + ks1;
  const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  for (int g = 0; g < 5; g++) {
    for (int i = 0; i < 4; i++) { x0 += x1; x1 = plygrad_rotl32(x1, rot[(g % 2) * 4 + i]) ^ x0; }
    x0 += ks[(g + 1) % 3]; x1 += ks[(g + 2) % 3] + uint(g + 1);
  }
  return (ulong(x1) << 32) | x0;
}
""",
}
