"""The fp8 dtypes in the C renderer (renderer/fp8.py): rendered kernels convert exactly as ml_dtypes does.

A float64 converts through float32 (docs/ir.md, plygrad.ir.dtype_fp8, PyTorch's rule too), so its reference is
ml_dtypes' float32 -> fp8 of the float32-rounded value: ml_dtypes 0.7.0 rounds a double once, which is not the rule.

Every test goes through the renderer and the system C compiler: a kernel loads, CASTs (or adds) and stores. fp8 ->
float32 is checked for all 256 patterns of each format; float32 and float64 -> fp8 for every fp8 value, every
midpoint between neighbours (the ties) and the floats just beside them, the overflow and underflow edges, and
random values over the whole range, bit for bit. NaN inputs must give a NaN of the same sign (ml_dtypes gives the
canonical NaN; plygrad keeps the top payload bits of an fp8e5m2 NaN, see plygrad.ir.dtype_fp8). The CUDA and HIP
spellings of the same helpers are compiled by the CUDA/HIP checks (test_cuda.py, test_hip.py) with every kernel.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from cg_kernels import load, loop, param, sink, store
from cg_run import run_program

from plygrad.codegen import lower_uop
from plygrad.ir import DType, Ops, Target, UOp, dtypes

CPU = Target("CPU", "c", threads=1)
FP8S = dtypes.fp8s
ALL_BYTES = np.arange(256, dtype=np.uint8)


def ml_type(dt: DType) -> Any:
    assert dt.numpy_name is not None
    return getattr(ml_dtypes, dt.numpy_name)


def kernel_cast(values: np.ndarray[Any, Any], src: DType, dst: DType, out_np: Any) -> np.ndarray[Any, Any]:
    """`values` (of dtype `src`, in its storage form) loaded, CAST to `dst` and stored by a rendered C kernel."""
    n = values.size
    out, a = param(0, dst, n), param(1, src, n)
    i = loop(n, 0)
    program = lower_uop(sink(store(out, i, load(a, i).cast(dst))), CPU, [])
    got = np.zeros(n, out_np)
    run_program(program, [got, np.ascontiguousarray(values)])
    return got


def fp8_cases(dt: DType, wide: Any) -> np.ndarray[Any, Any]:
    """Every value of `dt`, the midpoints between neighbours and their neighbours in `wide`, edges, random values."""
    with np.errstate(invalid="ignore"):
        values = ALL_BYTES.view(ml_type(dt)).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    mid = (finite[:-1] + finite[1:]) / 2
    top = float(ml_dtypes.finfo(ml_type(dt)).max)
    tiny = float(ml_dtypes.finfo(ml_type(dt)).smallest_subnormal)
    edges = np.array([top, top * 1.0625, top * 1.125, top * 1.25, top * 2, 1e30, tiny / 2, tiny / 4, tiny * 0.75,
                      0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-300, 5e-324])
    rng = np.random.default_rng(8)
    random = rng.standard_normal(1 << 14) * 2.0 ** rng.integers(-20, 20, 1 << 14)
    parts = [values, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), edges, -edges, random]
    with np.errstate(over="ignore"):
        return np.concatenate(parts).astype(wide)


def assert_same_fp8(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any], dt: DType,
                    inputs: np.ndarray[Any, Any], nan_sign: bool = True) -> None:
    """Same bytes, except that a NaN only needs to be a NaN of the same sign (of any sign where `nan_sign` is
    False: the sign of NaN + NaN is the hardware's choice of operand)."""
    with np.errstate(invalid="ignore"):
        got_f, want_f = got.view(ml_type(dt)).astype(np.float32), want.view(ml_type(dt)).astype(np.float32)
    both_nan = np.isnan(got_f) & np.isnan(want_f) & ((np.signbit(got_f) == np.signbit(want_f)) | (not nan_sign))
    wrong = np.flatnonzero((got != want) & ~both_nan)
    shown = [f"{inputs[k]!r} -> {got[k]:#x}, ml_dtypes {want[k]:#x}" for k in wrong[:8]]
    assert wrong.size == 0, f"{dt!r}: {wrong.size} of {got.size} differ, e.g. " + "; ".join(shown)


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_fp8_to_float32_is_exact_for_every_pattern(dt: DType) -> None:
    got = kernel_cast(ALL_BYTES, dt, dtypes.float32, np.float32)
    with np.errstate(invalid="ignore"):
        want = ALL_BYTES.view(ml_type(dt)).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan])), "a NaN's sign changed"
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("wide", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_float_to_fp8_rounds_through_float32_to_nearest_even(dt: DType, wide: Any) -> None:
    values = fp8_cases(dt, wide)
    src = dtypes.float32 if wide is np.float32 else dtypes.float64
    got = kernel_cast(values, src, dt, np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float32).astype(ml_type(dt)).view(np.uint8)
    assert_same_fp8(got, want, dt, values)


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_int_to_fp8_rounds_once(dt: DType) -> None:
    values = np.concatenate([np.arange(-600, 600), [2**20, -(2**40), 2**62 + 1]]).astype(np.int64)
    got = kernel_cast(values, dtypes.int64, dt, np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float64).astype(np.float32).astype(ml_type(dt)).view(np.uint8)
    assert_same_fp8(got, want, dt, values)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.FDIV], ids=lambda o: o.name)
@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_fp8_arithmetic_computes_in_float_and_rounds_back(dt: DType, op: Ops) -> None:
    """Every pair of fp8 values: the op in float32 (exact for + and *, correctly rounded for /), rounded once."""
    a_bits, b_bits = (x.ravel() for x in np.meshgrid(ALL_BYTES, ALL_BYTES))
    n = a_bits.size
    out, a, b = param(0, dt, n), param(1, dt, n), param(2, dt, n)
    i = loop(n, 0)
    value = UOp(op, dt, (load(a, i), load(b, i)))
    program = lower_uop(sink(store(out, i, value)), CPU, [])
    got = np.zeros(n, np.uint8)
    run_program(program, [got, np.ascontiguousarray(a_bits), np.ascontiguousarray(b_bits)])
    with np.errstate(all="ignore"):
        x, y = a_bits.view(ml_type(dt)).astype(np.float64), b_bits.view(ml_type(dt)).astype(np.float64)
        exact = {Ops.ADD: x + y, Ops.MUL: x * y, Ops.FDIV: (x.astype(np.float32) / y.astype(np.float32))}[op]
        want = exact.astype(np.float32).astype(ml_type(dt)).view(np.uint8)  # from float32, as the kernel
    assert_same_fp8(got, want, dt, np.stack([a_bits, b_bits], 1), nan_sign=False)


@pytest.mark.parametrize("dt", FP8S, ids=str)
def test_fp8_bitcast_to_uint8_keeps_the_byte(dt: DType) -> None:
    """A non-NaN pattern survives BITCAST uint8 -> fp8 -> uint8 through a float local."""
    with np.errstate(invalid="ignore"):
        keep = ~np.isnan(ALL_BYTES.view(ml_type(dt)).astype(np.float32))
    values = ALL_BYTES[keep]
    n = values.size
    out, a = param(0, dtypes.uint8, n), param(1, dtypes.uint8, n)
    i = loop(n, 0)
    through = load(a, i).bitcast(dt).bitcast(dtypes.uint8)
    program = lower_uop(sink(store(out, i, through)), CPU, [])
    got = np.zeros(n, np.uint8)
    run_program(program, [got, values])
    assert np.array_equal(got, values)


# ---- the CUDA and HIP spellings: compiled for the GPU, and emulated on the CPU against the C backend ---------------
def fp8_kernel(dt: DType, n: int) -> UOp:
    """Every conversion and an op: fp8 -> float32, float32 -> fp8, fp8 * fp8 + fp8 (MULACC), fp8 -> float64."""
    out_f32, out_fp8, out_mad, out_f64 = (param(0, dtypes.float32, n), param(1, dt, n), param(2, dt, n),
                                          param(3, dtypes.float64, n))
    x, wide = param(4, dt, n), param(5, dtypes.float32, n)
    i = loop(n, 0)
    v = load(x, i)
    return sink(store(out_f32, i, v.cast(dtypes.float32)), store(out_fp8, i, load(wide, i).cast(dt)),
                store(out_mad, i, v.alu(Ops.MULACC, v, v)), store(out_f64, i, v.cast(dtypes.float64)),
                name=f"fp8_{dt.name}")


def fp8_buffers(dt: DType) -> list[np.ndarray[Any, Any]]:
    n = 256
    wide = fp8_cases(dt, np.float32)[:: max(1, fp8_cases(dt, np.float32).size // n)][:n]
    return [np.zeros(n, np.float32), np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(n, np.float64),
            ALL_BYTES.copy(), np.ascontiguousarray(wide)]


def same_with_nans(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any], dt: DType, what: str) -> None:
    if got.dtype == np.uint8:
        assert_same_fp8(got, want, dt, np.arange(got.size), nan_sign=False)
        return
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), what
    assert np.array_equal(got[~nan], want[~nan]), what


def test_fp8_kernels_compile_for_cuda_and_hip() -> None:
    from cuda_emu import CudaKernel, compile_cubins, cubin_symbols
    from hip_emu import HipKernel, code_object_kernels, compile_code_objects

    cuda = [CudaKernel.from_program(lower_uop(fp8_kernel(dt, 256), Target.cuda("sm_90"), [])) for dt in FP8S]
    for arch, cubin in compile_cubins(cuda, ("sm_80", "sm_90")).items():  # nvcc to SASS: ptxas accepts them
        assert all(any(s == k.info.name or s.startswith(f"{k.info.name}_") for s in cubin_symbols(cubin))
                   for k in cuda), arch
    hip = [HipKernel.from_program(lower_uop(fp8_kernel(dt, 256), Target.hip("gfx942"), [])) for dt in FP8S]
    code_object = compile_code_objects(hip, ("gfx942",))["gfx942"]
    symbols = code_object_kernels(code_object)
    assert all(any(s == k.info.name or s.startswith(f"{k.info.name}_") for s in symbols) for k in hip)


@pytest.mark.parametrize("dialect", ["cuda", "hip"])
def test_fp8_kernels_emulated_match_the_c_backend(dialect: str) -> None:
    from cuda_emu import CudaKernel, EmuLibrary
    from hip_emu import HipEmuLibrary, HipKernel

    target = Target.cuda("sm_90") if dialect == "cuda" else Target.hip("gfx1100")
    kernel_type = CudaKernel if dialect == "cuda" else HipKernel
    programs = {dt: lower_uop(fp8_kernel(dt, 256), target, []) for dt in FP8S}
    library = (EmuLibrary if dialect == "cuda" else HipEmuLibrary)([kernel_type.from_program(p)
                                                                     for p in programs.values()])
    for dt, program in programs.items():
        want = fp8_buffers(dt)
        run_program(lower_uop(fp8_kernel(dt, 256), CPU, []), want)
        got = fp8_buffers(dt)
        library.run(kernel_type.from_program(program), got)
        for k in range(4):
            same_with_nans(got[k], want[k], dt, f"{dialect} {dt!r} output {k}")
