"""The C renderer's register transpose (renderer/c_transpose.py) and the FMA helpers (renderer/c_math.py), compiled
and run for every vector type the C renderer has, at the baseline ISA and with the host's (-march=native: GCC's
x86 builtins where the host has FMA/AVX-512): a W x W block comes back transposed, and every lane of a fused
multiply-add is C's fmaf/fma of its lanes."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cg_run import compile_c, native_flags

from plygrad.codegen.renderer.c_math import vector_fma
from plygrad.codegen.renderer.c_transpose import SHUFFLE_MACRO, transpose_helper
from plygrad.codegen.renderer.c_types import vector_type, vector_typedefs
from plygrad.ir import DType, dtypes

TYPES = [(dtypes.float32, w) for w in (2, 4, 8, 16)] + [(dtypes.float64, w) for w in (2, 4, 8)]
NP = {dtypes.float32: np.float32, dtypes.float64: np.float64}
FLAGS = ("baseline", "native")


def _flags(kind: str) -> tuple[str, ...]:
    return native_flags() if kind == "native" else ()


def _vector(dtype: DType, width: int) -> tuple[DType, str, str]:
    """The vector dtype, its C type name and its element's C type."""
    vec = dtype.vec(width)
    return vec, vector_type(vec), "float" if dtype is dtypes.float32 else "double"


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize(("dtype", "width"), TYPES, ids=lambda x: str(x) if isinstance(x, int) else x.name)
def test_the_register_transpose_transposes(dtype: DType, width: int, flags: str) -> None:
    vec, name, scalar = _vector(dtype, width)
    source = ("#include <math.h>\n#include <stdint.h>\n" + vector_typedefs(vec) + SHUFFLE_MACRO
              + transpose_helper(name, width)
              + f"void run({scalar}* out, const {scalar}* in) {{\n  {name} m[{width}];\n"
              + f"  __builtin_memcpy(m, in, sizeof(m));\n  plygrad_transpose_{name[8:]}(m);\n"
              + "  __builtin_memcpy(out, m, sizeof(m));\n}\n")
    lib = compile_c(source, flags=_flags(flags))
    block = np.random.default_rng(width).standard_normal((width, width)).astype(NP[dtype])
    out = np.zeros_like(block)
    lib.run(ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(block.ctypes.data))
    np.testing.assert_array_equal(out, block.T)


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize(("dtype", "width"), TYPES, ids=lambda x: str(x) if isinstance(x, int) else x.name)
def test_the_vector_fma_is_the_scalar_fma_of_each_lane(dtype: DType, width: int, flags: str) -> None:
    vec, name, scalar = _vector(dtype, width)
    call = "fmaf" if dtype is dtypes.float32 else "fma"
    source = ("#include <math.h>\n#include <stdint.h>\n" + vector_typedefs(vec) + vector_fma(name, width, scalar)
              + f"void run({scalar}* out, const {scalar}* a, const {scalar}* b, const {scalar}* c, long n) {{\n"
              + f"  for (long i = 0; i + {width} <= n; i += {width}) {{\n    {name} x, y, z, r;\n"
              + "    __builtin_memcpy(&x, a + i, sizeof(x)); __builtin_memcpy(&y, b + i, sizeof(y));\n"
              + f"    __builtin_memcpy(&z, c + i, sizeof(z)); r = plygrad_fma_{name[8:]}(x, y, z);\n"
              + "    __builtin_memcpy(out + i, &r, sizeof(r));\n  }\n}\n"
              + f"void scalar(double* out, const {scalar}* a, const {scalar}* b, const {scalar}* c, long n) {{\n"
              + f"  for (long i = 0; i < n; i++) out[i] = {call}(a[i], b[i], c[i]);\n}}\n")
    lib = compile_c(source, flags=_flags(flags))
    n = 64 * width
    rng = np.random.default_rng(7)
    # operands chosen so a product and a sum rounded in turn often differ from one rounding
    a, b = (rng.standard_normal(n).astype(NP[dtype]) for _ in range(2))
    c = (-(a.astype(np.float64) * b) * (1 + rng.standard_normal(n) * 1e-3)).astype(NP[dtype])
    out, want = np.zeros(n, NP[dtype]), np.zeros(n, np.float64)
    args = [ctypes.c_void_p(x.ctypes.data) for x in (a, b, c)]
    lib.run(ctypes.c_void_p(out.ctypes.data), *args, ctypes.c_long(n))
    lib.scalar(ctypes.c_void_p(want.ctypes.data), *args, ctypes.c_long(n))
    np.testing.assert_array_equal(out, want.astype(NP[dtype]))
    assert (out != (a * b + c)).any(), "the inputs should tell one rounding from two"
