"""float16 in the C renderer: both ways of holding it in memory convert exactly as NumPy does.

The "f16" helper uses the compiler's `_Float16` where it has one (`__FLT16_MANT_DIG__` is defined) and otherwise
keeps the bits in a uint16_t with conversions written in C (clang 14 on x86-64 has no `_Float16`). Compiling with
`-U__FLT16_MANT_DIG__` forces that fallback on any compiler, so these tests check it even where gcc would take the
native branch, and check that both branches give the same bits. Kernels go through the renderer: load, CAST, store.

NaN: values pass through float locals, which quiet signaling NaNs (docs/codegen.md, known deviations); NumPy keeps
them signaling, so the expected result of a NaN is NumPy's for the quieted NaN.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
from cg_kernels import load, loop, param, sink, store
from cg_run import compile_c, run_program

from plygrad.codegen import lower_uop
from plygrad.codegen.renderer.c_types import HELPERS, PREAMBLE
from plygrad.ir import DType, Target, dtypes

CPU = Target("CPU", "c", threads=1)
FALLBACK = ("-U__FLT16_MANT_DIG__",)
F32_QUIET, F64_QUIET = np.uint32(1 << 22), np.uint64(1 << 51)
ALL_HALVES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def native_branch(flags: tuple[str, ...]) -> bool:
    """Whether the f16 helper, compiled with `flags`, takes the `_Float16` branch."""
    probe = "int native(void) {\n#ifdef plygrad_to_half\n  return 1;\n#else\n  return 0;\n#endif\n}\n"
    lib = compile_c(PREAMBLE + HELPERS["f16"] + probe, flags=flags)
    lib.native.restype = ctypes.c_int
    return bool(lib.native())


@pytest.fixture(params=["fallback", "native"])
def flags(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """Compiler flags selecting one branch of the f16 helper."""
    if request.param == "fallback":
        assert not native_branch(FALLBACK), "-U__FLT16_MANT_DIG__ should select the uint16_t fallback"
        return FALLBACK
    if not native_branch(()):
        pytest.skip("this compiler has no _Float16 (__FLT16_MANT_DIG__ undefined): only the fallback applies")
    return ()


def convert(values: np.ndarray[Any, Any], dst: DType, flags: tuple[str, ...]) -> np.ndarray[Any, Any]:
    """`values` loaded, CAST to `dst` and stored by a rendered kernel compiled with `flags`."""
    src = dtypes.float16 if values.dtype == np.float16 else dtypes.float32 if values.dtype == np.float32 \
        else dtypes.float64
    n = values.size
    out, a = param(0, dst, n), param(1, src, n)
    i = loop(n, 0)
    program = lower_uop(sink(store(out, i, load(a, i).cast(dst))), CPU, [])
    got = np.zeros(n, np.dtype(dst.name))
    run_program(program, [got, np.ascontiguousarray(values)], flags=flags)
    return got


def half_neighbours() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Every finite half and the next one away from zero (the largest's next is 65536, where inf begins)."""
    bits = ALL_HALVES[(ALL_HALVES & 0x7C00) != 0x7C00]
    low = bits.view(np.float16).astype(np.float64)
    high = (bits + 1).view(np.float16).astype(np.float64)
    high[(bits & 0x7FFF) == 0x7BFF] = np.copysign(65536.0, low[(bits & 0x7FFF) == 0x7BFF])
    return low, high


def float32_cases() -> np.ndarray[Any, Any]:
    """Every half; every midpoint between neighbours (the ties) and the floats next to it on both sides; the
    overflow edge, the subnormal edge, float32 subnormals and extremes; a million random bit patterns (NaNs too)."""
    low, high = half_neighbours()
    mid = ((low + high) / 2).astype(np.float32)  # 12 significant bits: exact in float32
    edges = np.array([65504, 65519, 65519.996, 65520, 65535, 65536, 1e5, 3.4028235e38, np.inf, 2.0**-14, 2.0**-24,
                      2.0**-25, 2.0**-26, 1.5 * 2.0**-25, 1e-45, 1.1754942e-38, 1.17549435e-38, 0.0, np.nan],
                     dtype=np.float32)
    random = np.random.default_rng(16).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    parts = [ALL_HALVES.view(np.float16).astype(np.float32), mid, np.nextafter(mid, np.float32(np.inf)),
             np.nextafter(mid, np.float32(-np.inf)), edges, -edges, random.view(np.float32)]
    return np.concatenate(parts)


def float64_cases() -> np.ndarray[Any, Any]:
    """The ties and the doubles just beside them, which a conversion via float32 would round to the tie (twice
    rounded), plus random doubles in and around the half range and random bit patterns."""
    low, high = half_neighbours()
    mid = (low + high) / 2
    rng = np.random.default_rng(64)
    in_range = rng.uniform(-7e4, 7e4, 1 << 18) * 2.0 ** rng.integers(-30, 1, 1 << 18)
    random = rng.integers(0, 1 << 63, 1 << 18, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    parts = [mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), mid * (1 + 2.0**-40), in_range,
             random.view(np.float64), np.array([65520.0, 65519.99999999999, 2.0**-25 * (1 + 2.0**-50), 1e300])]
    return np.concatenate(parts)


def quieted(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`values` with every NaN made quiet (its payload's top bit set), as passing through a float local does."""
    if values.dtype == np.float32:
        return np.where(np.isnan(values), (values.view(np.uint32) | F32_QUIET).view(np.float32), values)
    return np.where(np.isnan(values), (values.view(np.uint64) | F64_QUIET).view(np.float64), values)


def assert_same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any], inputs: np.ndarray[Any, Any]) -> None:
    bits = np.uint32 if got.itemsize == 4 else np.uint16
    wrong = np.flatnonzero(got.view(bits) != want.view(bits))
    shown = [f"{inputs[k]!r} -> {got.view(bits)[k]:#x}, NumPy {want.view(bits)[k]:#x}" for k in wrong[:8]]
    assert wrong.size == 0, f"{wrong.size} of {got.size} differ, e.g. " + "; ".join(shown)


def test_half_to_float_is_exact_for_every_half(flags: tuple[str, ...]) -> None:
    halves = ALL_HALVES.view(np.float16)
    got = convert(halves, dtypes.float32, flags)
    with np.errstate(invalid="ignore"):
        want = quieted(halves.astype(np.float32))
    assert_same_bits(got, want, ALL_HALVES)


def test_float_to_half_rounds_to_nearest_even(flags: tuple[str, ...]) -> None:
    values = float32_cases()
    got = convert(values, dtypes.float16, flags)
    with np.errstate(over="ignore", invalid="ignore"):
        want = quieted(values).astype(np.float16)
    assert_same_bits(got, want, values)


def test_double_to_half_rounds_once(flags: tuple[str, ...]) -> None:
    values = float64_cases()
    got = convert(values, dtypes.float16, flags)
    with np.errstate(over="ignore", invalid="ignore"):
        want = quieted(values).astype(np.float16)
    assert_same_bits(got, want, values)


def test_both_branches_give_the_same_bits() -> None:
    if not native_branch(()):
        pytest.skip("this compiler has no _Float16 (__FLT16_MANT_DIG__ undefined): only the fallback applies")
    cases: list[tuple[np.ndarray[Any, Any], DType]] = [
        (ALL_HALVES.view(np.float16), dtypes.float32), (float32_cases(), dtypes.float16),
        (float64_cases(), dtypes.float16)]
    for values, dst in cases:
        assert_same_bits(convert(values, dst, FALLBACK), convert(values, dst, ()), values)
