"""The CUDA emulation harness itself (cuda_emu.h + cuda_emu.py), on hand-written kernels in the renderer's style.

The harness must be able to fail: a reduction with a missing barrier gives a wrong result every time, and a kernel
with a syntax error fails the nvcc check with the kernel's name and line.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cuda_emu import CudaKernel, EmulationError, EmuLibrary, compile_cubins, cubin_symbols

from plygrad.ir import ParamInfo, ProgramInfo, dtypes

ELEMENTWISE = """
#include <cuda_fp16.h>
extern "C" __global__ void __launch_bounds__(64) E_n(float* data0, const float* data1, const float* data2,
                                                      long long var0) {
  int gidx = blockIdx.x * 64 + threadIdx.x;
  if (gidx < var0) {
    float a = data1[gidx];
    data0[gidx] = __fadd_rn(__fmul_rn(a, data2[gidx]), exp2f(a)) + fmaxf(a, 0.0f) + (float)max(gidx, 3);
  }
}
"""


def _reduce_source(name: str, barrier: str) -> str:
    """A block tree reduction of 256 partial sums in shared memory; `barrier` goes after each level's writes."""
    return f"""
extern "C" __global__ void __launch_bounds__(256) {name}(float* data0, const float* data1) {{
  __shared__ __align__(16) float temp[256];
  int lidx = threadIdx.x;
  float acc = 0.0f;
  for (int i = 0; i < 4; i++) acc += data1[blockIdx.x * 1024 + i * 256 + lidx];
  temp[lidx] = acc;
  {barrier}
  for (int s = 128; s > 0; s >>= 1) {{
    if (lidx < s) temp[lidx] = temp[lidx] + temp[lidx + s];
    {barrier}
  }}
  if (lidx == 0) data0[blockIdx.x] = temp[0];
}}
"""


CASTS = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(128) casts(__half* data0, __nv_bfloat16* data1, float* data2,
                                                       const float* data3, const double* data4) {
  int i = blockIdx.x * 128 + threadIdx.x;
  data0[i] = __float2half(data3[i]);
  data1[i] = __float2bfloat16_rn(data3[i]);
  data2[i] = __half2float(__double2half(data4[i])) + __bfloat162float(__double2bfloat16(data4[i]));
}
"""


def _f32(index: int, size: int, writable: bool = False) -> ParamInfo:
    return ParamInfo(index, dtypes.float32, size, writable)


def _kernel(source: str, name: str, params: tuple[ParamInfo, ...], grid: int, block: int,
            var_names: tuple[str, ...] = ()) -> CudaKernel:
    return CudaKernel(source, ProgramInfo(name, (grid, 1, 1), (block, 1, 1), params), var_names)


def test_elementwise_matches_numpy() -> None:
    n = 200  # not a multiple of the block: the guard matters
    kernel = _kernel(ELEMENTWISE, "E_n", (_f32(0, n, True), _f32(1, n), _f32(2, n)), 4, 64, ("n",))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    (got,) = EmuLibrary([kernel]).run(kernel, [out, a, b], {"n": n})
    want = (a * b + np.exp2(a)) + np.maximum(a, 0) + np.maximum(np.arange(n), 3).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("reverse", [False, True])
def test_shared_memory_tree_reduction(reverse: bool) -> None:
    kernel = _kernel(_reduce_source("r_4_1024", "__syncthreads();"), "r_4_1024", (_f32(0, 4, True), _f32(1, 4096)),
                     4, 256)
    x = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    (got,) = EmuLibrary([kernel]).run(kernel, [np.zeros(4, np.float32), x], reverse=reverse)
    np.testing.assert_allclose(got, x.reshape(4, 1024).sum(1, dtype=np.float64), rtol=1e-5)


@pytest.mark.parametrize("missing", ["all", "first"])
def test_missing_barrier_gives_a_wrong_result(missing: str) -> None:
    """Without a barrier after the writes, thread 0 (which runs first, up to its next barrier) adds slots the other
    threads have not written yet: the emulator shows it on every run. "all": no barrier at all (the kernel runs
    without threads), "first": only the one after the partial sums is missing (the kernel runs cooperatively)."""
    source = _reduce_source("r_racy", "__syncthreads();")
    source = source.replace("__syncthreads();", "", 1) if missing == "first" else source.replace("__syncthreads();", "")
    kernel = _kernel(source, "r_racy", (_f32(0, 4, True), _f32(1, 4096)), 4, 256)
    x = np.repeat(np.arange(1, 5, dtype=np.float32), 1024)  # each block's values differ from the block before
    (got,) = EmuLibrary([kernel]).run(kernel, [np.zeros(4, np.float32), x])
    assert not np.any(got == x.reshape(4, 1024).sum(1)), got


def _bfloat16_of_double(d: np.ndarray) -> np.ndarray:
    """double -> bfloat16 rounded once, as `__double2bfloat16`. ml_dtypes goes through float32 and so rounds twice
    (1 + 2**-8 + tiny becomes 1.0, not 1 + 2**-7); rounding to float32 by "round to odd" first makes the second,
    nearest-even step exact."""
    with np.errstate(over="ignore"):
        f = d.astype(np.float32)
    inexact = (f.astype(np.float64) != d) & np.isfinite(f) & ((f.view(np.uint32) & 1) == 0)
    f[inexact] = np.nextafter(f[inexact], np.where(d[inexact] > f[inexact], np.inf, -np.inf).astype(np.float32))
    return f.astype(ml_dtypes.bfloat16)


def test_half_and_bfloat16_round_like_the_device() -> None:
    """Round to nearest even, subnormals, overflow to inf, NaN: compared bit for bit with ml_dtypes."""
    rng = np.random.default_rng(2)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 65519.99, 6e-8, 2.9e-8, 3.0e-8,
                        1.0 + 2**-11, 1.0 + 3 * 2**-11, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.4e38, 1e-40], np.float32)
    wide = rng.standard_normal(512 - special.size).astype(np.float32) * np.float32(10.0) ** rng.integers(-9, 9, 512 -
                                                                                                         special.size)
    x = np.concatenate([special, wide.astype(np.float32)])
    d = x.astype(np.float64) * (1 + 2**-30)  # doubles that a float step would double-round
    n = x.size
    assert _bfloat16_of_double(d)[13] != d[13].astype(np.float32).astype(ml_dtypes.bfloat16)  # one such case
    params = (ParamInfo(0, dtypes.float16, n, True), ParamInfo(1, dtypes.bfloat16, n, True), _f32(2, n, True),
              _f32(3, n), ParamInfo(4, dtypes.float64, n, False))
    kernel = _kernel(CASTS, "casts", params, n // 128, 128)
    h, b, f = np.zeros(n, np.float16), np.zeros(n, ml_dtypes.bfloat16), np.zeros(n, np.float32)
    EmuLibrary([kernel]).run(kernel, [h, b, f, x, d])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h.view(np.uint16), x.astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(b.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
        want = d.astype(np.float16).astype(np.float32) + _bfloat16_of_double(d).astype(np.float32)
        np.testing.assert_array_equal(f, want)


def test_many_kernels_one_library_with_colliding_names() -> None:
    """Two different kernels named alike get distinct entries; a duplicate source is built once."""
    add = _kernel('extern "C" __global__ void k(float* data0) { data0[threadIdx.x] += 1.0f; }', "k",
                  (_f32(0, 8, True),), 1, 8)
    mul = _kernel('extern "C" __global__ void k(float* data0) { data0[threadIdx.x] *= 3.0f; }', "k",
                  (_f32(0, 8, True),), 1, 8)
    lib = EmuLibrary([add, mul, add])
    x = np.ones(8, np.float32)
    lib.run(add, [x])
    lib.run(mul, [x])
    np.testing.assert_array_equal(x, np.full(8, 6.0, np.float32))


def test_block_too_large_is_an_error() -> None:
    kernel = _kernel('extern "C" __global__ void k(float* data0) { data0[0] = 1.0f; }', "k", (_f32(0, 1, True),),
                     1, 2048)
    with pytest.raises(EmulationError, match="1 to 1024 threads per block"):
        EmuLibrary([kernel]).run(kernel, [np.zeros(1, np.float32)])


def test_cubins_for_sm80_and_sm90_in_one_call_each() -> None:
    reduce = _kernel(_reduce_source("r_4_1024", "__syncthreads();"), "r_4_1024", (_f32(0, 4, True), _f32(1, 4096)),
                     4, 256)
    elementwise = _kernel(ELEMENTWISE, "E_n", (_f32(0, 1, True), _f32(1, 1), _f32(2, 1)), 1, 64, ("n",))
    casts = _kernel(CASTS, "casts", (), 1, 128)
    cubins = compile_cubins([reduce, elementwise, casts], ("sm_80", "sm_90"))
    assert set(cubins) == {"sm_80", "sm_90"}
    for cubin in cubins.values():
        assert cubin[:4] == b"\x7fELF"
        assert {"r_4_1024", "E_n", "casts"} <= cubin_symbols(cubin)


def test_a_compile_error_names_the_kernel_and_its_line() -> None:
    good = _kernel(ELEMENTWISE, "E_n", (), 1, 64)
    bad = _kernel('extern "C" __global__ void bad(float* data0) {\n  data0[0] = undefined_name;\n}', "bad", (), 1, 1)
    with pytest.raises(EmulationError, match=r"kernel 'bad' line 2: .*undefined_name"):
        compile_cubins([good, bad], ("sm_90",))


GUARDED = """#ifndef PLYGRAD_HELPER
#define PLYGRAD_HELPER
__device__ inline float helper(float x) {{ return x * {factor}; }}
#endif
extern "C" __global__ void {name}(float* data0) {{ data0[threadIdx.x] = helper(data0[threadIdx.x]); }}
"""


def test_guarded_preludes_are_seen_by_every_kernel() -> None:
    """Renderers guard their helper functions with #ifndef so that kernels can share a translation unit; each
    kernel still gets its own copy in its own namespace (as each compiles alone at run time)."""
    double = _kernel(GUARDED.format(factor="2.0f", name="k2"), "k2", (_f32(0, 4, True),), 1, 4)
    triple = _kernel(GUARDED.format(factor="3.0f", name="k3"), "k3", (_f32(0, 4, True),), 1, 4)
    lib = EmuLibrary([double, triple])
    x = np.ones(4, np.float32)
    lib.run(double, [x])
    lib.run(triple, [x])
    np.testing.assert_array_equal(x, np.full(4, 6.0, np.float32))
    assert set(compile_cubins([double, triple], ("sm_90",))) == {"sm_90"}


def test_a_write_out_of_bounds_is_an_error() -> None:
    """An index one element too far is caught even where the host memory beyond the buffer is writable."""
    source = 'extern "C" __global__ void k(float* data0) { data0[threadIdx.x + 1] = 1.0f; }'
    kernel = _kernel(source, "k", (_f32(0, 8, True),), 1, 8)
    with pytest.raises(EmulationError, match="wrote out of bounds after data0"):
        EmuLibrary([kernel]).run(kernel, [np.zeros(8, np.float32)])
