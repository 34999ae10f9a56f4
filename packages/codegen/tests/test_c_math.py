"""float32 EXP2 of the C renderer (renderer/c_math.py): within an ulp of float64's result rounded once, special
values exact, and the vector form bit for bit the scalar one (what vectorize.py promises), at -O2 and at the CPU
backend's `-O3 -march=native`, with the system C compiler (cg_run.compile_c). Vector SQRT: the correctly rounded
root of each lane, as the scalar kernel and NumPy give it. A matmul tile's reused vector load is kept in a register
(`plygrad_keep_*`): same bits, and under GCC on x86-64 no FMA reads it from memory again."""

from __future__ import annotations

import ctypes
import platform
import re
import subprocess
from pathlib import Path
from typing import Final

import numpy as np
import pytest
from cg_kernels import matmul, reduce_rows, softmax_like, unary
from cg_run import compile_c, compiler, compiler_version, native_flags, run_program

from plygrad.codegen import lower_uop
from plygrad.codegen.renderer.c_math import EXP2F, vector_exp2
from plygrad.ir import DType, Ops, Opt, OptOps, Target, dtypes

_SOURCE = f"""#include <stdint.h>
#include <string.h>
typedef float plygrad_float16 __attribute__((vector_size(64)));
typedef int32_t plygrad_float16_mask __attribute__((vector_size(64)));
{EXP2F}{vector_exp2("plygrad_float16", 16)}
void scalar(const float* x, float* y, long n) {{ for (long i = 0; i < n; i++) y[i] = plygrad_exp2f(x[i]); }}
void vector(const float* x, float* y, long n) {{
  for (long i = 0; i + 16 <= n; i += 16) {{
    plygrad_float16 v; memcpy(&v, x + i, sizeof v); v = plygrad_exp2_float16(v); memcpy(y + i, &v, sizeof v);
  }}
}}
"""
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 127.0, 127.99, 128.0, 200.0, -126.0, -127.5, -149.0, -149.5, -150.0, -150.01,
           -151.0, -1000.0, 1e-30, -1e-30, np.inf, -np.inf, np.nan]


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = [rng.uniform(-160, 130, 1_000_000), rng.uniform(-1, 1, 200_000), rng.standard_normal(100_000) * 1e-6,
             np.array(SPECIAL)]
    x = np.concatenate(parts).astype(np.float32)
    return np.concatenate([x, np.zeros(-len(x) % 16, np.float32)])


@pytest.mark.parametrize("flags", [(), ("-O3", "-march=native")], ids=["O2", "native"])
def test_exp2f_is_within_an_ulp_and_vector_lanes_match_scalar(flags: tuple[str, ...]) -> None:
    lib = compile_c(_SOURCE, flags=flags)
    x = _inputs()
    got, lanes = np.empty_like(x), np.empty_like(x)
    ptr = ctypes.POINTER(ctypes.c_float)
    lib.scalar(x.ctypes.data_as(ptr), got.ctypes.data_as(ptr), ctypes.c_long(len(x)))
    lib.vector(x.ctypes.data_as(ptr), lanes.ctypes.data_as(ptr), ctypes.c_long(len(x)))
    assert np.array_equal(got.view(np.uint32), lanes.view(np.uint32)), "vector lanes differ from the scalar form"
    with np.errstate(over="ignore"):
        want = np.exp2(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want)
    ulps = np.abs(got[finite].view(np.int32).astype(np.int64) - want[finite].view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, x[finite][ulps.argmax()]
    assert np.array_equal(got[~finite], want[~finite], equal_nan=True)  # inf, 0 and NaN exactly
    assert np.array_equal(got[-len(SPECIAL) - 10:-10][:-3], want[-len(SPECIAL) - 10:-10][:-3])  # exact cases


def test_softmax_sum_of_exponentials_is_vector_exp2_with_the_plain_loops_bits() -> None:
    """The unrolled sum of exponentials computes its exp2 as one vector call per copy and adds the lanes in the
    plain loop's order: the result equals the unoptimized kernel's bit for bit."""
    m, n = 4, 64
    kernel, cpu = softmax_like(m, n), Target("CPU", "c")
    fast = lower_uop(kernel, cpu, [Opt(OptOps.UNROLL, 2, 4)])
    assert "plygrad_exp2_float4(" in fast.src[0].arg
    x = (np.random.default_rng(1).standard_normal(m * n) * 10).astype(np.float32)
    outs = []
    for program in (fast, lower_uop(kernel, cpu, [])):
        out = np.zeros(m * n, np.float32)
        run_program(program, [out, x])
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


@pytest.mark.parametrize("special", [None, np.nan, -np.inf, -0.0], ids=["plain", "nan", "-inf", "-0"])
def test_max_over_unrolled_lanes_is_a_vector_accumulator_with_the_plain_result(special: float | None) -> None:
    """A MAX unrolled by a vector width keeps one vector accumulator (its lanes combined after the loop): exact in
    any order, so equal to the plain loop's result bit for bit, NaN and signed zeros included."""
    m, n = 4, 64
    kernel, cpu = reduce_rows(Ops.MAX, dtypes.float32, m, n), Target("CPU", "c")
    fast = lower_uop(kernel, cpu, [Opt(OptOps.UNROLL, 1, 8)])
    assert "plygrad_max_float8(" in fast.src[0].arg
    x = np.random.default_rng(2).standard_normal(m * n).astype(np.float32)
    if special is not None:
        x[5] = x[70] = x[200] = special
        if special == 0.0:
            x[64:128] = np.where(np.arange(64) % 2, 0.0, -0.0)
    outs = []
    for program in (fast, lower_uop(kernel, cpu, [])):
        out = np.zeros(m, np.float32)
        run_program(program, [out, x])
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)), outs


@pytest.mark.parametrize("flags", [(), ("-march=native",)], ids=["O2", "native"])
@pytest.mark.parametrize(("dtype", "lanes"), [(dtypes.float32, 16), (dtypes.float32, 8), (dtypes.float32, 4),
                                              (dtypes.float64, 8), (dtypes.float64, 4), (dtypes.float64, 2)])
def test_vector_sqrt_lanes_are_the_correctly_rounded_roots(dtype: DType, lanes: int, flags: tuple[str, ...]) -> None:
    """An upcast SQRT is one call of the lane-wise helper per vector (not one libm call per lane), and gives the
    scalar kernel's bits and NumPy's: exact roots, -0, +inf, and NaN for negative inputs and NaN."""
    n, np_dtype = 4096, np.float32 if dtype is dtypes.float32 else np.float64
    widths = ((dtypes.float32, (4, 8, 16)), (dtypes.float64, (2, 4, 8)))
    kernel, cpu = unary(Ops.SQRT, dtype, n), Target("CPU", "c", vector_widths=widths)
    fast = lower_uop(kernel, cpu, [Opt(OptOps.UPCAST, 0, lanes)])
    assert f"plygrad_sqrt_{'float' if dtype is dtypes.float32 else 'double'}{lanes}(" in fast.src[0].arg
    rng = np.random.default_rng(lanes)
    x = np.exp(rng.uniform(-80, 80, n)).astype(np_dtype)  # subnormal to huge (float32: 0 and inf at the ends)
    x[: n // 8] = rng.standard_normal(n // 8)
    special = [0.0, -0.0, 1.0, 4.0, 2.0, -1.0, -np.inf, np.inf, np.nan, np.finfo(np_dtype).tiny / 4,
               np.finfo(np_dtype).max]
    x[100:100 + len(special)] = special
    outs = []
    for program in (fast, lower_uop(kernel, cpu, [])):
        out = np.zeros(n, np_dtype)
        run_program(program, [out, x], flags=flags)
        outs.append(out)
    bits = np.uint32 if dtype is dtypes.float32 else np.uint64
    assert np.array_equal(outs[0].view(bits), outs[1].view(bits))
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    assert np.array_equal(outs[0].view(bits), want.view(bits)), x[outs[0].view(bits) != want.view(bits)][:5]


_WIDTHS: Final = ((dtypes.float32, (4, 8, 16)), (dtypes.float64, (2, 4, 8)))


@pytest.mark.parametrize("flags", [(), ("-march=native",)], ids=["O2", "native"])
@pytest.mark.parametrize(("dtype", "lanes"), [(dtypes.float32, 16), (dtypes.float32, 8), (dtypes.float32, 4),
                                              (dtypes.float64, 8), (dtypes.float64, 4), (dtypes.float64, 2)])
def test_a_tiles_reused_row_is_kept_in_a_register_with_the_plain_kernels_bits(dtype: DType, lanes: int,
                                                                               flags: tuple[str, ...]) -> None:
    """A register tile of 4 rows x `lanes` columns loads each B vector once for four FMAs and keeps it
    (`plygrad_keep_*`, which must compile for every vector size, with and without the host's registers): the result
    equals the untiled kernel's bit for bit (the same fused multiply-adds in the same order) and NumPy's closely."""
    m, k, n = 8, 24, 2 * lanes
    np_dtype = np.float32 if dtype is dtypes.float32 else np.float64
    cpu = Target("CPU", "c", vector_widths=_WIDTHS, has_fma=True)
    tiled = lower_uop(matmul(m, k, n, dtype), cpu, [Opt(OptOps.UPCAST, 1, lanes), Opt(OptOps.UPCAST, 0, 4)])
    source = tiled.src[0].arg
    name = f"{'float' if dtype is dtypes.float32 else 'double'}{lanes}"
    assert len(re.findall(rf"= plygrad_keep_{name}\(", source)) == 1, source  # one B vector per k step
    rng = np.random.default_rng(lanes)
    a, b = rng.standard_normal(m * k).astype(np_dtype), rng.standard_normal(k * n).astype(np_dtype)
    outs = []
    for program in (tiled, lower_uop(matmul(m, k, n, dtype), cpu, [])):
        out = np.zeros(m * n, np_dtype)
        run_program(program, [out, a, b], flags=flags)
        outs.append(out)
    bits = np.uint32 if dtype is dtypes.float32 else np.uint64
    assert np.array_equal(outs[0].view(bits), outs[1].view(bits))
    np.testing.assert_allclose(outs[0], (a.reshape(m, k) @ b.reshape(k, n)).ravel(), rtol=1e-5, atol=1e-5)


def test_gcc_reads_a_kept_row_from_l1_once_not_once_per_fma(tmp_path: Path) -> None:
    """What the keep is for: GCC on x86-64 folds a vector load into every FMA that reads it (a memory operand per
    FMA, so 20 loads per 16 FMAs of a 4 x 64 tile, and the loads became the limit). With the keep, no FMA of the
    tile has a memory operand but a broadcast scalar (`{1toN}`, A's element)."""
    macros = subprocess.run([*compiler(), "-dM", "-E", "-x", "c", "-"], input="", capture_output=True, text=True,
                            check=True).stdout
    if platform.machine() not in ("x86_64", "AMD64") or "__clang__" in macros or "__GNUC__" not in macros:
        pytest.skip(f"GCC on x86-64 only (compiler: {compiler_version()}, machine: {platform.machine()})")
    if "-march=native" not in native_flags() or "avx512f" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("needs a host with AVX-512F (-march=native): the tile's rows are 16 float32 lanes")
    cpu = Target("CPU", "c", vector_widths=_WIDTHS, has_fma=True)
    tiled = lower_uop(matmul(8, 64, 64), cpu, [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 4),
                                               Opt(OptOps.UPCAST, 0, 4)])
    src = tmp_path / "tile.c"
    src.write_text(tiled.src[0].arg)
    cmd = [*compiler(), "-O2", "-fPIC", "-ffp-contract=off", *native_flags(), "-S", "-o", "-", str(src)]
    asm = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    fmas = [line for line in asm.splitlines() if re.match(r"\s*vfmadd\w+\s", line)]
    assert len(fmas) >= 16, asm  # the 4 x 4 tile of 16-lane accumulators
    from_memory = [line for line in fmas if "(" in line and "{1to" not in line]
    assert not from_memory, from_memory
