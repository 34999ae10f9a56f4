"""CUDA spellings for plygrad dtypes and constants, and the device helper functions a CUDA program may need.

A CUDA program includes no header (docs/codegen.md §5): types are the built-in C++ ones, float16 and bfloat16 are
`unsigned short` bits converted by integer helpers (the C renderer's algorithms, so both backends give the same
bits), NaN and infinity are bit patterns, and helpers are plain `__device__ inline` functions. Vectors live only in
memory: `plygrad_float4` and its kin are our own aligned structs, read and written whole through
`plygrad_load_<T>`/`plygrad_store_<T>` with `__builtin_assume_aligned` (which tests/cuda_emu.h makes a check).
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.cuda_mma import MMA_HELPERS
from plygrad.codegen.renderer.fp8 import CUDA_SPELLING, fp8_helpers
from plygrad.ir import DType, DTypeKind, dtypes

_LOCAL: Final[dict[DType, str]] = {
    dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.int16: "short", dtypes.int32: "int",
    dtypes.int64: "long long", dtypes.uint8: "unsigned char", dtypes.uint16: "unsigned short",
    dtypes.uint32: "unsigned int", dtypes.uint64: "unsigned long long", dtypes.float16: "float",
    dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double", dtypes.index: "long long",
    **{dt: "float" for dt in dtypes.fp8s},
}
_STORAGE: Final[dict[DType, str]] = {**_LOCAL, dtypes.float16: "unsigned short", dtypes.bfloat16: "unsigned short",
                                     **{dt: "unsigned char" for dt in dtypes.fp8s}}  # fp8: its byte (fp8.py)


# vector structs are named by their lanes' short name and count: plygrad_float4, plygrad_half8, plygrad_uchar16
_VECTOR_NAMES: Final[dict[DType, str]] = {
    dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "longlong",
    dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulonglong",
    dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float", dtypes.float64: "double",
}
# a single vector access moves at most 16 bytes (ld.global.v4.b32 / v2.b64)
VECTOR_BYTES_MAX: Final = 16
# the dtypes a cuda program may load and store as vectors (bool has no vector struct: its lanes stay scalar)
VECTOR_DTYPES: Final = frozenset(_VECTOR_NAMES)


def cuda_local(dtype: DType) -> str:
    """The CUDA type of a local value of scalar `dtype`."""
    found = _LOCAL.get(dtype)
    if found is None:
        raise CodegenError(f"the cuda renderer has no scalar type for {dtype!r}: vectors are memory-only (a "
                           "vector_type struct), and their lanes are scalar locals")
    return found


def vector_type(dtype: DType) -> str:
    """The struct of a vector dtype (`plygrad_float4` for float32 x 4), declared by `vector_source`."""
    element = _VECTOR_NAMES.get(dtype.scalar())
    if element is None or dtype.count < 2 or dtype.itemsize > VECTOR_BYTES_MAX or dtype.itemsize & (
            dtype.itemsize - 1):
        raise CodegenError(f"the cuda renderer has vector accesses of {sorted(d.name for d in _VECTOR_NAMES)} of "
                           f"a power-of-two size up to {VECTOR_BYTES_MAX} bytes, got {dtype!r}; keep other widths "
                           "out of Target.vector_widths for a cuda target")
    return f"plygrad_{element}{dtype.count}"


def vector_source(dtype: DType) -> str:
    """The struct of a vector dtype (its lanes in storage form, aligned to its size) and its load/store helpers,
    which tell the compiler the address is aligned to the size (the emulation checks it)."""
    name, size, lane = vector_type(dtype), dtype.itemsize, cuda_storage(dtype.scalar())
    return f"""struct alignas({size}) {name} {{ {lane} v[{dtype.count}]; }};
__device__ inline {name} plygrad_load_{name[8:]}(const {lane}* p) {{
  return *static_cast<const {name}*>(__builtin_assume_aligned(p, {size}));
}}
__device__ inline void plygrad_store_{name[8:]}({lane}* p, {name} x) {{
  *static_cast<{name}*>(__builtin_assume_aligned(p, {size})) = x;
}}
"""


def cuda_storage(dtype: DType) -> str:
    """The CUDA type of `dtype` in memory (buffers)."""
    found = _STORAGE.get(dtype)
    if found is None:
        raise CodegenError(f"the cuda renderer cannot hold {dtype!r} in a buffer")
    return found


def cuda_literal(dtype: DType, value: object) -> str:
    """A CUDA C++ expression for a constant of `dtype`, exact to the bit (hex floats, C++17)."""
    if dtype is dtypes.bool:
        return "1" if value else "0"
    if dtype.kind is DTypeKind.FLOAT:
        assert isinstance(value, float)
        if dtype is dtypes.float64:
            if math.isnan(value):
                return "__longlong_as_double(0x7ff8000000000000LL)"
            if math.isinf(value):
                return "__longlong_as_double(0x7ff0000000000000LL)" if value > 0 \
                    else "__longlong_as_double(-4503599627370496LL)"  # 0xfff0000000000000
            return value.hex()
        if math.isnan(value):
            return "__uint_as_float(0x7fc00000u)"
        if math.isinf(value):
            return "__uint_as_float(0x7f800000u)" if value > 0 else "__uint_as_float(0xff800000u)"
        return f"{value.hex()}f"
    assert isinstance(value, int)
    if dtype.kind is DTypeKind.UNSIGNED:
        return f"(({cuda_local(dtype)}){value}ULL)"
    if value == -(2**63):
        return "(-9223372036854775807LL - 1)"
    text = f"{value}LL" if value >= 0 else f"({value}LL)"
    return text if dtype is dtypes.index else f"(({cuda_local(dtype)}){text})"


HELPERS: Final[dict[str, str]] = {
    "bf16": """__device__ inline float plygrad_bf16_to_float(unsigned short b) {
  return __uint_as_float((unsigned int)b << 16);
}
__device__ inline unsigned short plygrad_float_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}
__device__ inline float plygrad_round_bf16(float f) { return plygrad_bf16_to_float(plygrad_float_to_bf16(f)); }
""",
    # the C renderer's integer float16 conversion (renderer/c_types.py), with CUDA's bit casts: a double in (every
    # float and every integer up to 2^53 exactly, so a float64 or int64 source rounds once), nearest even out
    "f16": """__device__ inline unsigned short plygrad_to_half(double x) {
  unsigned long long bits = (unsigned long long)__double_as_longlong(x);
  unsigned short sign = (unsigned short)((bits >> 48) & 0x8000u);
  unsigned long long magnitude = bits & 0x7fffffffffffffffull;
  int exponent = (int)(magnitude >> 52) - 1023; /* |x| = 1.fraction * 2^exponent */
  if (magnitude > 0x7ff0000000000000ull) return (unsigned short)(sign | 0x7e00u | ((magnitude >> 42) & 0x3ffu));
  if (exponent > 15) return (unsigned short)(sign | 0x7c00u); /* inf, or too large for any half */
  if (exponent < -25) return sign; /* below half the smallest subnormal (2^-24): rounds to zero */
  unsigned long long mantissa = (magnitude & 0xfffffffffffffull) | (1ull << 52);
  int shift = exponent < -14 ? 28 - exponent : 42; /* a subnormal half keeps fewer bits */
  unsigned long long kept = mantissa >> shift, rest = mantissa & ((1ull << shift) - 1), tie = 1ull << (shift - 1);
  if (rest > tie || (rest == tie && (kept & 1u))) kept++; /* round to nearest, ties to even */
  unsigned long long exponent_field = exponent < -14 ? 0 : (unsigned long long)(exponent + 14) << 10;
  return (unsigned short)(sign | (exponent_field + kept));
}
__device__ inline float plygrad_half_to_float(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  if (exponent == 0x1f) /* inf, or NaN made quiet */
    return __uint_as_float(sign | 0x7f800000u | (fraction << 13) | (fraction != 0 ? 0x400000u : 0u));
  if (exponent != 0) return __uint_as_float(sign | ((exponent + 112) << 23) | (fraction << 13));
  return __uint_as_float(__float_as_uint((float)fraction * 0x1p-24f) | sign); /* zero or subnormal: exact */
}
__device__ inline float plygrad_round_half(double x) { return plygrad_half_to_float(plygrad_to_half(x)); }
""",
    **fp8_helpers(CUDA_SPELLING),  # software fp8 conversions (fp8.py): no cuda_fp8.h
    # float -> integer as docs/ir.md §5 defines it: truncate, wrap modulo 2^64, NaN and inf give 0
    "f2i": """__device__ inline unsigned long long plygrad_f2i(double x) {
  if (x > -9223372036854775808.0 && x < 9223372036854775808.0) return (unsigned long long)(long long)x;
  if (!(x == x) || x > 1.7976931348623157e308 || x < -1.7976931348623157e308) return 0;
  double m = fmod(trunc(x), 18446744073709551616.0);
  return m >= 0 ? (unsigned long long)m : 0ull - (unsigned long long)(-m);
}
""",
    "fmax": """__device__ inline float plygrad_fmaxf(float a, float b) {
  if (a != a || b != b) return __fadd_rn(a, b); /* NaN propagates */
  if (a == b) return __float_as_int(a) < 0 ? b : a; /* max(-0.0, 0.0) is 0.0 */
  return a > b ? a : b;
}
__device__ inline double plygrad_fmax(double a, double b) {
  if (a != a || b != b) return __dadd_rn(a, b);
  if (a == b) return __double_as_longlong(a) < 0 ? b : a;
  return a > b ? a : b;
}
""",
    "threefry": """__device__ inline unsigned int plygrad_rotl32(unsigned int x, int r) {
  return (x << r) | (x >> (32 - r));
}
__device__ inline unsigned long long plygrad_threefry2x32(unsigned long long counter, unsigned long long key) {
  unsigned int ks0 = (unsigned int)key, ks1 = (unsigned int)(key >> 32), ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;
  unsigned int ks[3] = {ks0, ks1, ks2};
  unsigned int x0 = (unsigned int)counter + ks0, x1 = (unsigned int)(counter >> 32) + ks1;
  const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  for (int g = 0; g < 5; g++) {
    for (int i = 0; i < 4; i++) { x0 += x1; x1 = plygrad_rotl32(x1, rot[(g % 2) * 4 + i]) ^ x0; }
    x0 += ks[(g + 1) % 3]; x1 += ks[(g + 2) % 3] + (unsigned int)(g + 1);
  }
  return ((unsigned long long)x1 << 32) | x0;
}
""",
    **MMA_HELPERS,  # tensor-core tiles through inline PTX mma.sync (cuda_mma.py)
}
