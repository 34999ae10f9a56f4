"""Software fp8 for the C-family renderers: conversions between the four 8-bit float formats and float/double.

No hardware fp8 is assumed: an fp8 value lives in memory as its byte and in a `float` local, rounded back to its
format after every operation. Per format `N`: `plygrad_to_N(double)` (via float32, then to nearest even),
`plygrad_N_to_float` (exact) and `plygrad_round_N`, implementing plygrad.ir.dtype_fp8's rules with integer
operations on the double's bits. The text is written once and spelled per dialect (`C_SPELLING`, `CUDA_SPELLING`;
HIP respells the CUDA text); Metal, which has no double, does not list the fp8 dtypes. docs/codegen.md §3 and §5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from plygrad.ir import DType, dtypes
from plygrad.ir.dtype_fp8 import FP8_FORMATS, Fp8Format

FP8_DTYPES: Final = frozenset(dtypes.fp8s)


@dataclass(frozen=True)
class Spelling:
    """How a dialect spells the pieces the helpers use; `double_bits` and `float_of_bits` are templates."""

    prefix: str  # before each function: `static inline`, `__device__ inline`
    u8: str
    u32: str
    u64: str
    double_bits: str  # {x}: a double -> its bits as u64
    float_of_bits: str  # {u}: u32 bits -> a float


C_SPELLING: Final = Spelling("static inline", "uint8_t", "uint32_t", "uint64_t",
                             "((union {{ double d; uint64_t u; }}){{ .d = {x} }}).u",
                             "((union {{ uint32_t u; float f; }}){{ .u = {u} }}).f")
CUDA_SPELLING: Final = Spelling("__device__ inline", "unsigned char", "unsigned int", "unsigned long long",
                                "((unsigned long long)__double_as_longlong({x}))", "__uint_as_float({u})")


def _format(dtype: DType) -> Fp8Format:
    return FP8_FORMATS[dtype.name]


def to_storage_fn(dtype: DType) -> str:
    return f"plygrad_to_{dtype.name}"


def from_storage_fn(dtype: DType) -> str:
    return f"plygrad_{dtype.name}_to_float"


def round_fn(dtype: DType) -> str:
    return f"plygrad_round_{dtype.name}"


def fp8_helper(dtype: DType, sp: Spelling) -> str:
    """The three conversion functions of `dtype` (module docstring) in the dialect `sp`."""
    f = _format(dtype)
    m, bias = f.mantissa_bits, f.bias
    min_exponent = 1 - bias
    exponent_ones = ((1 << f.exponent_bits) - 1) << m
    if f.fnuz:
        nan = overflow = "0x80u"
        zero = "0u"
    elif f.has_inf:  # a NaN keeps its payload's top bits, made quiet if they are all zero (as dtype_fp8 does)
        payload = f"((magnitude >> {52 - m}) & {(1 << m) - 1}u)"
        nan = f"(sign | {exponent_ones:#x}u | ({payload} != 0 ? {payload} : {1 << (m - 1)}u))"
        overflow = f"(sign | {exponent_ones:#x}u)"
        zero = "sign"
    else:  # e4m3fn: S.1111.111 is the NaN and what overflows
        nan = overflow = "(sign | 0x7fu)"
        zero = "sign"
    u8, u32, u64 = sp.u8, sp.u32, sp.u64
    if f.fnuz:
        special = f"if (b == 0x80u) return {sp.float_of_bits.format(u='0xffc00000u')}; /* the one NaN */"
    elif f.has_inf:
        special = (f"if (field == {(1 << f.exponent_bits) - 1}u) /* inf, or NaN with its payload */\n"
                   f"    return {sp.float_of_bits.format(u=f'sign | 0x7f800000u | (mantissa << {23 - m})')};")
    else:
        special = f"if ((b & 0x7fu) == 0x7fu) return {sp.float_of_bits.format(u='sign | 0x7fc00000u')}; /* NaN */"
    subnormal_scale = f"0x1p{min_exponent - m}f"
    n = dtype.name
    return f"""{sp.prefix} {u8} {to_storage_fn(dtype)}(double x) {{
  x = (double)(float)x; /* a double goes through float32 first, as ml_dtypes and PyTorch convert it */
  {u64} bits = {sp.double_bits.format(x='x')};
  {u64} sign = (bits >> 56) & 0x80u;
  {u64} magnitude = bits & 0x7fffffffffffffffull;
  int exponent = (int)(magnitude >> 52) - 1023; /* |x| = 1.fraction * 2^exponent */
  if (magnitude > 0x7ff0000000000000ull) return ({u8}){nan};
  if (exponent > 16) return ({u8}){overflow}; /* inf, or past every fp8 */
  if (exponent < {min_exponent - m - 1}) return ({u8}){zero}; /* below half the smallest subnormal */
  {u64} mantissa = (magnitude & 0xfffffffffffffull) | (1ull << 52); /* with the implicit leading 1 */
  int shift = exponent < {min_exponent} ? {52 - m + min_exponent} - exponent : {52 - m};
  {u64} kept = mantissa >> shift, rest = mantissa & ((1ull << shift) - 1), tie = 1ull << (shift - 1);
  if (rest > tie || (rest == tie && (kept & 1u))) kept++; /* round to nearest, ties to even */
  /* a normal's kept bits include the leading 1, which adds one to the exponent field; a carry moves up */
  {u64} value = (exponent < {min_exponent} ? 0u : ({u64})(exponent + {bias - 1}) << {m}) + kept;
  if (value > {f.max_bits:#x}u) return ({u8}){overflow};
  return value == 0u ? ({u8}){zero} : ({u8})(sign | value);
}}
{sp.prefix} float {from_storage_fn(dtype)}({u8} b) {{
  {u32} sign = ({u32})(b & 0x80u) << 24, field = ({u32})(b >> {m}) & {(1 << f.exponent_bits) - 1}u;
  {u32} mantissa = ({u32})b & {(1 << m) - 1}u;
  {special}
  if (field == 0u) {{ float v = (float)mantissa * {subnormal_scale}; return sign ? -v : v; }} /* exact */
  return {sp.float_of_bits.format(u=f'sign | ((field + {127 - bias}u) << 23) | (mantissa << {23 - m})')};
}}
{sp.prefix} float {round_fn(dtype)}(double x) {{ return plygrad_{n}_to_float(plygrad_to_{n}(x)); }}
"""


def fp8_helpers(sp: Spelling) -> dict[str, str]:
    """Each fp8 dtype's helper text by the helper name (its dtype name) the renderers' HELPER_OF uses."""
    return {dt.name: fp8_helper(dt, sp) for dt in dtypes.fp8s}
