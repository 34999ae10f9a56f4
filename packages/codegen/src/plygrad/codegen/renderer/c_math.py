"""The C renderer's math helpers: float32 `EXP2` as straight-line IEEE arithmetic, and vector FMA, SQRT and keep.

`plygrad_exp2f` and its vector form `plygrad_exp2_float<k>` run the same operations, so a vector lane gives exactly
the scalar function's bits, within 1 ulp of float64 `exp2` rounded to float32 (docs/ir.md §5); libm's `exp2f` is a
call GCC cannot vectorize. The algorithm (clamp, round to an integer n, a degree-6 polynomial, 2^n in two normal
factors) is in docs/codegen.md §3.2; `plygrad_fma_<type>`, `plygrad_sqrt_<type>` and `plygrad_keep_<type>` are the
vector helpers of §3. packages/codegen/tests/test_c_math.py checks the bits on every run.
"""

from __future__ import annotations

from typing import Final

# q(f) = C0 + C1 f + ... + C6 f^6, a weighted least-squares fit of (2^f - 1) / f on [-1/2, 1/2] (relative error of
# 1 + f q(f) under 2^-26), rounded to float32
_Q: Final = ("0x1.62e43p-1f", "0x1.ebfbep-3f", "0x1.c6b08ap-5f", "0x1.3b29f2p-7f", "0x1.5d8b74p-10f",
             "0x1.445d5ep-13f", "0x1.fcedaap-17f")
_HORNER: Final = "".join(f"  q = q * f + {c};\n" for c in reversed(_Q[:-1]))

EXP2F: Final = f"""static inline float plygrad_exp2f(float x) {{
  float c = x < -151.0f ? -151.0f : x;
  c = c > 129.0f ? 129.0f : c;
  float t = c + 0x1.8p23f, n = t - 0x1.8p23f, f = c - n, q = {_Q[-1]};
{_HORNER}  float p = 1.0f + f * q;
  union {{ float f; uint32_t u; }} tb = {{ .f = t }}, s1, s2;
  uint32_t m = tb.u - 0x4b400000u + 151u; /* n + 151, in [0, 280] */
  s1.u = ((m >> 1) + 52u) << 23;
  s2.u = (m - (m >> 1) + 51u) << 23;
  return p * s1.f * s2.f;
}}
"""


def vector_exp2(name: str, lanes: int) -> str:
    """`plygrad_exp2_<float k>` for the float32 vector type `name` of `lanes` lanes (its `_mask` type declared with
    it by c_types.vector_typedefs): `plygrad_exp2f`'s operations lane by lane, selections as bit masks."""
    mask = f"{name}_mask"
    return f"""static inline {name} plygrad_exp2_{name[8:]}({name} x) {{
  typedef uint32_t bits __attribute__((vector_size({4 * lanes})));
  const {name} zero = {{0}};
  {mask} lo = x < -151.0f, hi = x > 129.0f;
  {name} c = ({name})((lo & ({mask})(zero - 151.0f)) | (~lo & ({mask})x));
  c = ({name})((hi & ({mask})(zero + 129.0f)) | (~hi & ({mask})c));
  {name} t = c + 0x1.8p23f, n = t - 0x1.8p23f, f = c - n, q = zero + {_Q[-1]};
{_HORNER}  {name} p = 1.0f + f * q;
  bits m = (bits)t - 0x4b400000u + 151u;
  return p * ({name})(((m >> 1) + 52u) << 23) * ({name})((m - (m >> 1) + 51u) << 23);
}}
"""


# GCC's own builtins behind the x86 intrinsics _mm512_fmadd_ps and friends (no header to parse), by (scalar type,
# lanes): the feature macro that enables each and the call. With them a register tile's 112 fused multiply-adds compile
# in 0.3 s; as lane loops GCC vectorizes one by one, 1.3 s (measured on one nn.Linear kernel).
_GCC_X86_FMA: Final = {
    ("float", 16): ("__AVX512F__", "__builtin_ia32_vfmaddps512_mask(a, b, c, (short)-1, 4)"),
    ("float", 8): ("__FMA__", "__builtin_ia32_vfmaddps256(a, b, c)"),
    ("float", 4): ("__FMA__", "__builtin_ia32_vfmaddps(a, b, c)"),
    ("double", 8): ("__AVX512F__", "__builtin_ia32_vfmaddpd512_mask(a, b, c, (unsigned char)-1, 4)"),
    ("double", 4): ("__FMA__", "__builtin_ia32_vfmaddpd256(a, b, c)"),
    ("double", 2): ("__FMA__", "__builtin_ia32_vfmaddpd(a, b, c)"),
}


def _lane_wise(op: str, name: str, lanes: int, scalar: str, *, operands: str, gcc: tuple[str, str] | None) -> str:
    """`plygrad_<op>_<type>(operands)` of the vector type `name`: Clang's `__builtin_elementwise_<op>` where it has
    it, GCC's x86 builtin `gcc` (feature macro, call) where that feature is on, else a lane loop of libm's `<op>f`
    (float) or `<op>` (double)."""
    args = operands.split(", ")
    call = f"{op}f" if scalar == "float" else op
    loop = f"""  {name} r;
  for (int i = 0; i < {lanes}; i++) r[i] = {call}({", ".join(f"{a}[i]" for a in args)});
  return r;
"""
    if gcc is not None:
        feature, builtin = gcc
        loop = f"""#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined({feature})
  return {builtin};
#else
{loop}#endif
"""
    params = ", ".join(f"{name} {a}" for a in args)
    return f"""static inline {name} plygrad_{op}_{name[8:]}({params}) {{
#if defined(__clang__) && defined(__has_builtin)
#if __has_builtin(__builtin_elementwise_{op})
  return __builtin_elementwise_{op}({operands});
#endif
#endif
{loop}}}
"""


def vector_fma(name: str, lanes: int, scalar: str) -> str:
    """`plygrad_fma_<type>(a, b, c)`: a fused multiply-add of each lane (`fmaf`/`fma` of `scalar`, one rounding;
    MULACC of docs/ir.md §5). Clang has an element-wise builtin for it; GCC on x86 with FMA its intrinsics'
    builtins (`_GCC_X86_FMA`); anywhere else a lane loop, which GCC turns into one vector FMA at -O2 where the
    target has one, and which calls libm's correctly rounded `fmaf` per lane where it has none (slow, same bits)."""
    return _lane_wise("fma", name, lanes, scalar, operands="a, b, c", gcc=_GCC_X86_FMA.get((scalar, lanes)))


# the x86 feature macro under which GCC holds a vector of this many bytes in one register
_X86_REGISTER_FEATURE: Final = {16: "__SSE2__", 32: "__AVX__", 64: "__AVX512F__"}


def vector_keep(name: str, nbytes: int) -> str:
    """`plygrad_keep_<type>(x)`: `x`, held in a vector register from here on. GCC folds a vector load into every
    x86 FMA that reads it, as a memory operand, so a B row that a matmul tile loads once and multiplies into four
    rows was read from L1 four times: 20 loads per 16 FMAs, and the loads, not the FMAs, were the limit (matmul
    2048 in a C harness on the Zen 4 dev VM: 150 GFLOP/s, 175 with the value kept). An empty `asm` that takes the
    value in a register (`+v`) and may change it leaves GCC nothing to fold; it emits no instruction. Only under
    GCC on x86-64 with registers of this size; elsewhere (Clang does not fold this way, Arm has no load-operand FMA)
    the identity."""
    feature = _X86_REGISTER_FEATURE.get(nbytes)
    gcc_x86 = "defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)"
    keep = "" if feature is None else f"""#if {gcc_x86} && defined({feature})
  __asm__("" : "+v"(x));
#endif
"""
    return f"""static inline {name} plygrad_keep_{name[8:]}({name} x) {{
{keep}  return x;
}}
"""


# GCC's builtins behind _mm512_sqrt_ps and friends, by (scalar type, lanes): the feature macro and the call. IEEE
# square roots are correctly rounded, so a lane gives libm's `sqrtf`/`sqrt` bits; libm's call is what GCC emits for
# a scalar `sqrtf` (errno on a negative input), which it does not vectorize: an Adam step's 16 lanes took 16 calls.
_GCC_X86_SQRT: Final = {
    ("float", 16): ("__AVX512F__", "__builtin_ia32_sqrtps512_mask(a, a, (short)-1, 4)"),
    ("float", 8): ("__AVX__", "__builtin_ia32_sqrtps256(a)"),
    ("float", 4): ("__SSE__", "__builtin_ia32_sqrtps(a)"),
    ("double", 8): ("__AVX512F__", "__builtin_ia32_sqrtpd512_mask(a, a, (unsigned char)-1, 4)"),
    ("double", 4): ("__AVX__", "__builtin_ia32_sqrtpd256(a)"),
    ("double", 2): ("__SSE2__", "__builtin_ia32_sqrtpd(a)"),
}


def vector_sqrt(name: str, lanes: int, scalar: str) -> str:
    """`plygrad_sqrt_<type>(a)`: the correctly rounded square root of each lane (SQRT of docs/ir.md §5). Clang
    has an element-wise builtin for it; GCC on x86 its intrinsics' builtins (`_GCC_X86_SQRT`); anywhere else a lane
    loop of libm's `sqrtf`/`sqrt` (the same bits, one call per lane)."""
    return _lane_wise("sqrt", name, lanes, scalar, operands="a", gcc=_GCC_X86_SQRT.get((scalar, lanes)))
