"""The transcendental functions of a HIP program, written out in the program itself (docs/codegen.md §5.3).

A `hip` program links no device library (`-nogpulib`), so its math is an LLVM intrinsic the AMDGPU backend lowers
accurately itself (sqrt, trunc, float32 exp2/log2) or one of the helpers here: `plygrad_exp2`, `plygrad_log2`,
`plygrad_sin` (Cody-Waite and Payne-Hanek argument reduction) and `plygrad_pow`, computed in double, within 1 ulp
of double, so a float32 result is the double one rounded once. docs/codegen.md §5.3 gives each algorithm; the CPU
emulation runs this same text in packages/codegen/tests/test_hip.py.
"""

from __future__ import annotations

import math
from typing import Final

_DEVICE: Final = "static inline __attribute__((device))"

# 1/n! for n = 0..14, the Taylor coefficients of e^r
_EXP_COEFFICIENTS: Final = (
    "0x1p+0", "0x1p+0", "0x1p-1", "0x1.5555555555555p-3", "0x1.5555555555555p-5", "0x1.1111111111111p-7",
    "0x1.6c16c16c16c17p-10", "0x1.a01a01a01a01ap-13", "0x1.a01a01a01a01ap-16", "0x1.71de3a556c734p-19",
    "0x1.27e4fb7789f5cp-22", "0x1.ae64567f544e4p-26", "0x1.1eed8eff8d898p-29", "0x1.6124613a86d09p-33",
    "0x1.93974a8c07c9dp-37",
)
# 1/3, 1/5, ... 1/23: atanh(s) = s + s^3 * (1/3 + s^2/5 + ...), below an ulp for |s| <= 0.172
_ATANH_TAIL: Final = tuple(repr(1 / n) for n in range(3, 25, 2))
# -1/3!, 1/5!, ... (sin(r) = r + r^3 * (-1/3! + r^2/5! - ...)) and 1/4!, -1/6!, ... (cos(r) = 1 - r^2/2 + r^4 * (...)),
# to the r^17 and r^18 terms: below an ulp for |r| <= pi/4
_SIN_COEFFICIENTS: Final = tuple(repr((-1) ** (n + 1) / math.factorial(2 * n + 3)) for n in range(8))
_COS_COEFFICIENTS: Final = tuple(repr((-1) ** n / math.factorial(2 * n + 4)) for n in range(8))
# 2/pi in 24-bit chunks, most significant first (2/pi = 0xa2f983.6e4e44... * 2^-24): enough for every double
_TWO_OVER_PI: Final = (
    "0xa2f983, 0x6e4e44, 0x1529fc, 0x2757d1, 0xf534dd, 0xc0db62, 0x95993c, 0x439041, 0xfe5163, 0xabdebb, 0xc561b7, "
    "0x246e3a, 0x424dd2, 0xe00649, 0x2eea09, 0xd1921c, 0xfe1deb, 0x1cb129, 0xa73ee8, 0x8235f5, 0x2ebb44, 0x84e99c, "
    "0x7026b4, 0x5f7e41, 0x3991d6, 0x398353, 0x39f49c, 0x845f8b, 0xbdf928, 0x3b1ff8, 0x97ffde, 0x05980f, 0xef2f11, "
    "0x8b5a0a, 0x6d1f6d, 0x367ecf, 0x27cb09, 0xb74f46, 0x3f669e, 0x5fea2d, 0x7527ba, 0xc7ebe5, 0xf17b3d, 0x0739f7, "
    "0x8a5292, 0xea6bfb, 0x5fb11f, 0x8d5d08, 0x560330, 0x46fc7b, 0x6babf0, 0xcfbc20, 0x9af436, 0x1da9e3, 0x91615e, "
    "0xe61b08"
)


def _horner(coefficients: tuple[str, ...], variable: str) -> str:
    """c0 + v * (c1 + v * (c2 + ...)) as one C expression."""
    expr = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        expr = f"{c} + {variable} * ({expr})"
    return expr


_EXP2: Final = f"""{_DEVICE} double plygrad_pow2i(int n) {{ /* 2^n for n in -1022..1023 */
  return __builtin_bit_cast(double, (unsigned long long)(n + 1023) << 52);
}}
/* 2^(k + f) for an integer k and |f| <= 1/2 (a little more is fine): 2^f = e^(f ln 2) by its Taylor polynomial,
   times 2^k in two halves so that a result near the overflow or denormal range is not lost in between */
{_DEVICE} double plygrad_exp2_parts(double k, double f) {{
  double r = f * 0x1.62e42fefa39efp-1;
  double p = {_horner(_EXP_COEFFICIENTS, "r")};
  int n = (int)k, half = n / 2;
  return p * plygrad_pow2i(half) * plygrad_pow2i(n - half);
}}
{_DEVICE} double plygrad_exp2(double x) {{
  if (x != x) return x;
  if (x >= 1024.0) return __builtin_inf();
  if (x < -1080.0) return 0.0;
  double k = __builtin_rint(x);
  return plygrad_exp2_parts(k, x - k);
}}
"""

_LOG2: Final = f"""/* log2(x) of a positive finite x as a double-double (the result, *lo the rest): x = m * 2^e with m
   in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s) = 2s + 2s^3 (1/3 + s^2/5 + ...) with s = (m-1)/(m+1) (|s| <= 0.172) a
   double-double too, then times 1/ln 2 and plus e with the rounding errors kept (fma gives a product's exactly) */
{_DEVICE} double plygrad_log2_parts(double x, double* lo) {{
  int e = 0;
  if (x < 0x1p-1022) {{ x *= 0x1p54; e = -54; }} /* a denormal: normalized first */
  unsigned long long bits = __builtin_bit_cast(unsigned long long, x);
  e += (int)(bits >> 52) - 1023;
  double m = __builtin_bit_cast(double, (bits & 0xfffffffffffffull) | 0x3ff0000000000000ull);
  if (m > 0x1.6a09e667f3bcdp+0) {{ m *= 0.5; e += 1; }}
  double num = m - 1.0, den = m + 1.0, den_lo = (1.0 - den) + m; /* num exact; den + den_lo = m + 1 */
  double s = num / den, s_lo = (__builtin_fma(-s, den, num) - s * den_lo) / den, s2 = s * s;
  double tail = 2.0 * s * s2 * ({_horner(_ATANH_TAIL, "s2")});
  double ln_hi = 2.0 * s, ln_lo = 2.0 * s_lo + tail; /* log(m) */
  double hi = ln_hi * 0x1.71547652b82fep+0; /* times 1/ln 2 = 0x1.71547652b82fep+0 + 0x1.777d0ffda0d24p-56 */
  double low = __builtin_fma(ln_hi, 0x1.71547652b82fep+0, -hi) + ln_hi * 0x1.777d0ffda0d24p-56
               + ln_lo * 0x1.71547652b82fep+0;
  double sum = (double)e + hi, bb = sum - (double)e; /* two-sum: e + hi = sum + its rounding error, kept */
  low += ((double)e - (sum - bb)) + (hi - bb);
  hi = sum + low; /* normalized: |*lo| <= half an ulp of the result (the series' tail is in `low` until here) */
  *lo = low - (hi - sum);
  return hi;
}}
{_DEVICE} double plygrad_log2(double x) {{
  if (x != x || x < 0.0) return __builtin_nan("");
  if (x == 0.0) return -__builtin_inf();
  if (x == __builtin_inf()) return x;
  double lo, hi = plygrad_log2_parts(x, &lo);
  return hi + lo;
}}
"""

_SIN: Final = f"""/* sin(x): the remainder r = x - k pi/2 as a double-double (Cody-Waite below 2^20 pi/2, Payne-Hanek
   above), then the Taylor polynomial of sin or cos at r by the quadrant k mod 4 (renderer/hip_math.py) */
static __attribute__((constant)) const unsigned int plygrad_two_over_pi[56] = {{{_TWO_OVER_PI}}};
{_DEVICE} void plygrad_two_sum(double a, double b, double* s, double* e) {{ /* s + e = a + b exactly */
  *s = a + b;
  double bb = *s - a;
  *e = (a - (*s - bb)) + (b - bb);
}}
/* |x| >= 2^20 pi/2 (finite) modulo pi/2 in units of pi/2, as *hi + *lo in [-1/2, 1/2]; returns k mod 4 */
{_DEVICE} int plygrad_reduce_large(double ax, double* hi, double* lo) {{
  unsigned long long bits = __builtin_bit_cast(unsigned long long, ax);
  int exponent = (int)(bits >> 52) - 1075; /* ax = M * 2^exponent, M a 53-bit integer */
  unsigned long long mantissa = (bits & 0xfffffffffffffull) | (1ull << 52);
  double pieces[2] = {{(double)(mantissa >> 26), (double)(mantissa & 0x3ffffffull)}}; /* 27 + 26 bits */
  int shifts[2] = {{26, 0}};
  double sum = 0.0, low = 0.0; /* ax * 2/pi modulo 4, as sum + low */
  for (int weight = 1; weight >= -200; --weight) {{
    /* the terms piece * chunk_j * 2^(exponent + shift - 24 (j + 1)) of this weight, largest first: a 27-bit piece
       times a 24-bit chunk is exact, and a term of weight >= 2 is a multiple of 4 (left out) */
    for (int p = 0; p < 2; ++p) {{
      int j24 = exponent + shifts[p] - weight; /* = 24 (j + 1) */
      if (j24 < 24 || j24 % 24 != 0 || j24 / 24 > 56) continue;
      double term = pieces[p] * (double)plygrad_two_over_pi[j24 / 24 - 1] * plygrad_pow2i(weight);
      double s, e;
      plygrad_two_sum(sum, term, &s, &e);
      low += e;
      sum = s - 4.0 * __builtin_floor(s * 0.25); /* exact: drops multiples of 4 */
    }}
  }}
  double k = __builtin_rint(sum + low);
  plygrad_two_sum(sum - k, low, hi, lo);
  return (int)k & 3;
}}
{_DEVICE} double plygrad_sin(double x) {{
  if (x != x || x == __builtin_inf() || x == -__builtin_inf()) return __builtin_nan("");
  double ax = __builtin_fabs(x);
  if (ax < 0x1p-26) return x; /* sin(x) = x - x^3/6 rounds to x */
  int quadrant;
  double r, r_lo;
  if (ax < 0x1.921fb54442d18p+20) {{
    double k = __builtin_rint(ax * 0x1.45f306dc9c883p-1), t, e1, e2;
    t = ax - k * 0x1.921fb544p+0; /* exact: k times a 33-bit piece, then a subtraction of close values */
    plygrad_two_sum(t, -(k * 0x1.0b4611a6p-34), &t, &e1);
    plygrad_two_sum(t, -(k * 0x1.3198a2ep-69), &r, &e2);
    plygrad_two_sum(r, e1 + e2 - k * 0x1.b839a252049c1p-104, &r, &r_lo);
    quadrant = (int)k & 3;
  }} else {{
    double hi, lo; /* the remainder in units of pi/2, times pi/2 as a double-double */
    quadrant = plygrad_reduce_large(ax, &hi, &lo);
    r = hi * 0x1.921fb54442d18p+0;
    r_lo = (__builtin_fma(hi, 0x1.921fb54442d18p+0, -r) + hi * 0x1.1a62633145c07p-54) + lo * 0x1.921fb54442d18p+0;
    plygrad_two_sum(r, r_lo, &r, &r_lo);
  }}
  double r2 = r * r, result;
  if (quadrant & 1) {{ /* cos(r + r_lo) = cos(r) - r_lo sin(r) */
    result = 1.0 - (0.5 * r2 - r2 * r2 * ({_horner(_COS_COEFFICIENTS, "r2")}) + r * r_lo);
  }} else {{ /* sin(r + r_lo) = sin(r) + r_lo cos(r) */
    result = r + (r * r2 * ({_horner(_SIN_COEFFICIENTS, "r2")}) + r_lo * (1.0 - 0.5 * r2));
  }}
  if (quadrant & 2) result = -result;
  return x < 0.0 ? -result : result;
}}
"""

_POW: Final = f"""/* x^y with C99's special cases, else exp2(y log2 |x|) with the sign of an odd integer power */
{_DEVICE} double plygrad_pow(double x, double y) {{
  if (y == 0.0 || x == 1.0) return 1.0;
  if (x != x || y != y) return x + y;
  double ay = __builtin_fabs(y), ax = __builtin_fabs(x);
  bool integer = __builtin_trunc(y) == y, odd = integer && ay < 0x1p53 && __builtin_fmod(ay, 2.0) == 1.0;
  if (ay == __builtin_inf()) {{
    if (ax == 1.0) return 1.0;
    return (ax < 1.0) == (y < 0.0) ? __builtin_inf() : 0.0;
  }}
  if (x == 0.0 || ax == __builtin_inf()) {{ /* 0 or inf to a finite power */
    bool large = (x == 0.0) == (y < 0.0);
    double magnitude = large ? __builtin_inf() : 0.0;
    return odd && __builtin_signbit(x) ? -magnitude : magnitude; /* (-0)^-1 is -inf */
  }}
  if (x < 0.0 && !integer) return __builtin_nan("");
  double lo, hi = plygrad_log2_parts(ax, &lo); /* y log2|x| as a double-double, then 2^ of it */
  double t = y * hi, t_lo = __builtin_fma(y, hi, -t) + y * lo, result;
  if (t >= 1024.0) result = __builtin_inf();
  else if (t < -1080.0) result = 0.0;
  else {{
    double k = __builtin_rint(t);
    result = plygrad_exp2_parts(k, (t - k) + t_lo);
  }}
  return x < 0.0 && odd ? -result : result;
}}
"""

# by helper name; each needs the ones listed in MATH_NEEDS first
MATH_HELPERS: Final[dict[str, str]] = {"exp2": _EXP2, "log2": _LOG2, "sin": _SIN, "pow": _POW}
MATH_NEEDS: Final[dict[str, tuple[str, ...]]] = {"exp2": (), "log2": (), "sin": ("exp2",), "pow": ("exp2", "log2")}
