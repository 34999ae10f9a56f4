"""C spellings for plygrad dtypes and constants, and the helper functions a C program may need.

Values of float16 and bfloat16 live in `float` locals and are rounded back to their dtype after every operation
(`round_to`), so each op is correctly rounded as docs/ir.md asks; memory holds them as `plygrad_half` (float16, see
the "f16" helper) and `uint16_t` (bfloat16 bits), converted on load and store. The fp8 dtypes work the same way,
as `uint8_t` bytes in memory, with the software conversions of fp8.py.
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.fp8 import C_SPELLING, FP8_DTYPES, fp8_helpers, round_fn
from plygrad.ir import DType, DTypeKind, dtypes

_LOCAL: Final[dict[DType, str]] = {
    dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.int16: "int16_t", dtypes.int32: "int32_t",
    dtypes.int64: "int64_t", dtypes.uint8: "uint8_t", dtypes.uint16: "uint16_t", dtypes.uint32: "uint32_t",
    dtypes.uint64: "uint64_t", dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.index: "long long", **{dt: "float" for dt in dtypes.fp8s},
}
_STORAGE: Final[dict[DType, str]] = {**_LOCAL, dtypes.float16: "plygrad_half", dtypes.bfloat16: "uint16_t",
                                     **{dt: "uint8_t" for dt in dtypes.fp8s}}
# the helper (a key of HELPERS) a program needs as soon as it touches a value of the dtype in any way
HELPER_OF: Final[dict[DType, str]] = {dtypes.float16: "f16", dtypes.bfloat16: "bf16",
                                      **{dt: dt.name for dt in dtypes.fp8s}}
# the narrow floats rounded once from any source type, not via float: float16, whose conversion takes a double
# (bfloat16 and the fp8s go through float32, as PyTorch and ml_dtypes convert them)
ROUNDS_FROM_DOUBLE: Final = frozenset({dtypes.float16})

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
    # float16 in memory. `_Float16` is gcc's and clang's IEEE half, but not every compiler has it on every target
    # (clang 14 on x86-64 rejects it); both define __FLT16_MANT_DIG__ exactly when they do. Without it the half is
    # kept as its bits in a uint16_t and converted in C, rounding as the compiler's own conversion does: once, to
    # nearest even (subnormals, overflow to inf), NaN quieted with the payload's top bits kept. So both branches
    # give the same bits. plygrad_to_half takes any real value, so a float64 or int64 source is rounded once, never
    # via float (a double holds every float exactly, and every integer up to 2^53: larger ones overflow a half).
    "f16": """#ifdef __FLT16_MANT_DIG__
typedef _Float16 plygrad_half;
#define plygrad_to_half(x) ((_Float16)(x))
#define plygrad_half_to_float(h) ((float)(h))
#else
typedef uint16_t plygrad_half;
static inline uint16_t plygrad_to_half(double x) {
  union { double d; uint64_t u; } v = { .d = x };
  uint16_t sign = (uint16_t)((v.u >> 48) & 0x8000u);
  uint64_t magnitude = v.u & 0x7fffffffffffffffu;
  int exponent = (int)(magnitude >> 52) - 1023; /* |x| = 1.fraction * 2^exponent */
  if (magnitude > 0x7ff0000000000000u) return (uint16_t)(sign | 0x7e00u | ((magnitude >> 42) & 0x3ffu)); /* NaN */
  if (exponent > 15) return (uint16_t)(sign | 0x7c00u); /* inf, or too large for any half */
  if (exponent < -25) return sign; /* below half the smallest subnormal (2^-24): rounds to zero */
  uint64_t mantissa = (magnitude & 0xfffffffffffffu) | (1ull << 52); /* with the implicit leading 1 */
  int shift = exponent < -14 ? 28 - exponent : 42; /* a subnormal half keeps fewer bits */
  uint64_t kept = mantissa >> shift, rest = mantissa & ((1ull << shift) - 1), tie = 1ull << (shift - 1);
  if (rest > tie || (rest == tie && (kept & 1u))) kept++; /* round to nearest, ties to even */
  /* a normal's kept bits include the leading 1 (0x400), which adds one to the exponent field, hence + 14; a carry
     out of the fraction moves to the next exponent, and past the largest half to inf */
  uint64_t exponent_field = exponent < -14 ? 0 : (uint64_t)(exponent + 14) << 10;
  return (uint16_t)(sign | (exponent_field + kept));
}
static inline float plygrad_half_to_float(uint16_t h) {
  union { uint32_t u; float f; } v;
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  if (exponent == 0x1f) { /* inf, or NaN made quiet as the hardware does */
    v.u = sign | 0x7f800000u | (fraction << 13) | (fraction != 0 ? 0x400000u : 0u);
  } else if (exponent != 0) {
    v.u = sign | ((exponent + 112) << 23) | (fraction << 13); /* rebias: 127 - 15 */
  } else {
    v.f = (float)fraction * 0x1p-24f; /* zero or subnormal: exact, and a normal float */
    v.u |= sign;
  }
  return v.f;
}
#endif
#define plygrad_round_half(x) plygrad_half_to_float(plygrad_to_half(x))
""",
    **fp8_helpers(C_SPELLING),
    # float -> integer as docs/ir.md §5 defines it (C leaves NaN, inf and out-of-range values undefined): truncate
    # toward zero and wrap modulo 2^64 (fmod is exact), NaN and inf give 0; the caller narrows the bits to its width.
    # In-range values take the first, branch-predictable test.
    "f2i": """static inline uint64_t plygrad_f2i(double x) {
  if (x > -9223372036854775808.0 && x < 9223372036854775808.0) return (uint64_t)(int64_t)x;
  if (x != x || x == INFINITY || x == -INFINITY) return 0;
  double m = fmod(trunc(x), 18446744073709551616.0);
  return m >= 0 ? (uint64_t)m : (uint64_t)0 - (uint64_t)(-m);
}
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
    """`expr` (a float computation) rounded to `dtype` when that dtype is narrower than its float local.

    float16 rounds `expr` itself, whatever its type (a double or int64 is rounded once); bfloat16 rounds a float.
    """
    if dtype is dtypes.float16:
        return f"plygrad_round_half({expr})"
    if dtype is dtypes.bfloat16:
        return f"plygrad_round_bf16({expr})"
    if dtype in FP8_DTYPES:
        return f"{round_fn(dtype)}({expr})"
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


# ---- vectors (GCC/Clang vector extensions) -----------------------------------------------------------------------
# element C type -> (vector name stem, the signed integer of the same width: what comparisons of it give)
_VECTOR_ELEMENTS: Final[dict[DType, tuple[str, str]]] = {
    dtypes.float32: ("float", "int32_t"), dtypes.float64: ("double", "int64_t"),
}


def vector_type(dtype: DType) -> str:
    """The C name of a vector dtype (`plygrad_float8` for float32x8), declared by `vector_typedefs`."""
    element = _VECTOR_ELEMENTS.get(dtype.scalar())
    if element is None or dtype.count < 2:
        raise CodegenError(f"the C renderer has vectors of {sorted(d.name for d in _VECTOR_ELEMENTS)} only, got "
                           f"{dtype!r}; keep other dtypes out of Target.vector_widths or scalar")
    return f"plygrad_{element[0]}{dtype.count}"


def vector_typedefs(dtype: DType) -> str:
    """The vector type and its lane mask type (what comparisons give), and the NaN-propagating max of docs/ir.md
    (`plygrad_fmaxf` lane by lane, without branches: NaN gives a + b, equal lanes the AND of their bits, which
    is +0.0 for max(-0.0, 0.0))."""
    name = vector_type(dtype)
    element, mask_element = _VECTOR_ELEMENTS[dtype.scalar()]
    size = dtype.itemsize
    mask = f"{name}_mask"
    return f"""typedef {element} {name} __attribute__((vector_size({size})));
typedef {mask_element} {mask} __attribute__((vector_size({size})));
static inline {name} plygrad_max_{name[8:]}({name} a, {name} b) {{
  {mask} gt = a > b, lt = a < b, nan = (a != a) | (b != b);
  {mask} ai = ({mask})a, bi = ({mask})b, sum = ({mask})(a + b);
  {mask} r = (gt & ai) | (lt & bi) | (~(gt | lt) & ai & bi);
  return ({name})((nan & sum) | (~nan & r));
}}
"""


# the GCC builtin storing a float vector of this many bytes around the caches, and the ISA it needs
_GCC_STREAM: Final[dict[int, tuple[str, str]]] = {
    16: ("__builtin_ia32_movntps", "__SSE__"), 32: ("__builtin_ia32_movntps256", "__AVX__"),
    64: ("__builtin_ia32_movntps512", "__AVX512F__"),
}
STREAMED_BYTES: Final = frozenset(_GCC_STREAM)


def stream_helper(name: str, size: int) -> str:
    """`plygrad_stream_<name less its plygrad_>(p, v)`: store the vector `v` (of `size` bytes) at `p` with a
    non-temporal store when `p` is `size`-aligned and the compiler can (clang's generic builtin, or GCC's x86 one
    on a host with the instruction), else as the renderer's other vector stores (`memcpy`, any alignment); and
    `plygrad_sfence()`, after which the calling thread's streamed stores are visible to others. Only x86 streams."""
    builtin, isa = _GCC_STREAM[size]
    short = name.removeprefix("plygrad_")
    return f"""#ifndef PLYGRAD_SFENCE
#define PLYGRAD_SFENCE
static inline void plygrad_sfence(void) {{
#if defined(__x86_64__)
  __builtin_ia32_sfence();
#endif
}}
#endif
typedef float plygrad_nt_{short} __attribute__((vector_size({size})));
static inline void plygrad_stream_{short}(void* p, {name} v) {{
#if defined(__x86_64__) && defined(__clang__)
  if (((uintptr_t)p & {size - 1}) == 0) {{ __builtin_nontemporal_store(v, ({name}*)p); return; }}
#elif defined(__x86_64__) && defined({isa})
  if (((uintptr_t)p & {size - 1}) == 0) {{ {builtin}((float*)p, (plygrad_nt_{short})v); return; }}
#endif
  __builtin_memcpy(p, &v, sizeof(v));
}}
"""
