"""HIP spellings: the prelude of every `hip` program, its helpers, and constants, all without a header.

A `hip` program compiles with clang's HIP mode alone (`-nogpulib -nogpuinc`) and with hiprtc, which pre-includes the
HIP headers, so it defines no name those headers define and spells everything with clang builtins and attributes.
The helpers are the CUDA renderer's text (cuda_types.HELPERS) respelled by `respell` (the `BITS` functions stand
for CUDA's intrinsics), so the algorithms are written once. The prelude turns FMA contraction off
(`#pragma clang fp contract(off)`). docs/codegen.md §5.3.
"""

from __future__ import annotations

import math
import re
from typing import Final

from plygrad.codegen.renderer.cuda_types import HELPERS as CUDA_HELPERS
from plygrad.codegen.renderer.cuda_types import cuda_literal, vector_source
from plygrad.ir import DType, DTypeKind, dtypes

DEVICE: Final = "static inline __attribute__((device))"

PRELUDE: Final = """#pragma clang fp contract(off)
"""

# the bit casts and float operations the respelled helpers call, by the CUDA intrinsic they stand for
BITS: Final = f"""{DEVICE} float plygrad_uint_as_float(unsigned int x) {{ return __builtin_bit_cast(float, x); }}
{DEVICE} unsigned int plygrad_float_as_uint(float x) {{ return __builtin_bit_cast(unsigned int, x); }}
{DEVICE} int plygrad_float_as_int(float x) {{ return __builtin_bit_cast(int, x); }}
{DEVICE} long long plygrad_double_as_longlong(double x) {{ return __builtin_bit_cast(long long, x); }}
{DEVICE} double plygrad_longlong_as_double(long long x) {{ return __builtin_bit_cast(double, x); }}
{DEVICE} float plygrad_fadd(float a, float b) {{ return a + b; }}
{DEVICE} double plygrad_dadd(double a, double b) {{ return a + b; }}
"""

_RESPELLINGS: Final = (
    (re.compile(r"__device__ inline\b"), DEVICE),
    (re.compile(r"\b__uint_as_float\("), "plygrad_uint_as_float("),
    (re.compile(r"\b__float_as_uint\("), "plygrad_float_as_uint("),
    (re.compile(r"\b__float_as_int\("), "plygrad_float_as_int("),
    (re.compile(r"\b__double_as_longlong\("), "plygrad_double_as_longlong("),
    (re.compile(r"\b__longlong_as_double\("), "plygrad_longlong_as_double("),
    (re.compile(r"\b__fadd_rn\("), "plygrad_fadd("),
    (re.compile(r"\b__dadd_rn\("), "plygrad_dadd("),
    (re.compile(r"(?<![\w.])fmod\("), "__builtin_fmod("),
    (re.compile(r"(?<![\w.])trunc\("), "__builtin_trunc("),
)
# CUDA spellings that must not survive respelling (each would need a HIP header)
_CUDA_ONLY: Final = re.compile(r"__device__|__global__|__shared__|__syncthreads|\b__[a-z]+_as_[a-z]+\(|_rn\(|asm\b")


def respell(cuda_text: str) -> str:
    """A CUDA helper's text in the hip program's spelling (module docstring). Raises AssertionError if a CUDA-only
    name is left, which means a CUDA helper grew a spelling this table does not know."""
    text = cuda_text
    for pattern, replacement in _RESPELLINGS:
        text = pattern.sub(replacement, text)
    leftover = _CUDA_ONLY.search(text)
    assert leftover is None, f"hip_types.respell does not know the CUDA spelling {leftover.group(0)!r}"
    return text


def helper_source(name: str) -> str:
    """The text of the CUDA helper `name` (cuda_types.HELPERS) for a hip program."""
    return respell(CUDA_HELPERS[name])


def hip_vector_source(dtype: DType) -> str:
    """The struct of a memory-only vector dtype and its aligned load/store helpers (the CUDA renderer's, respelled:
    `__builtin_assume_aligned` is clang's as well, and the emulation's alignment check)."""
    return respell(vector_source(dtype))


def hip_literal(dtype: DType, value: object) -> str:
    """A C++ expression for a constant of `dtype`, exact to the bit: NaN and infinities through clang's builtins
    (a quiet NaN 0x7fc00000 / 0x7ff8000000000000), everything else as the CUDA renderer writes it (hex floats,
    integer casts), which needs no intrinsic."""
    if dtype.kind is DTypeKind.FLOAT and isinstance(value, float) and not math.isfinite(value):
        suffix = "" if dtype is dtypes.float64 else "f"
        if math.isnan(value):
            return f"__builtin_nan{suffix}(\"\")"
        return f"__builtin_inf{suffix}()" if value > 0 else f"(-__builtin_inf{suffix}())"
    return cuda_literal(dtype, value)
