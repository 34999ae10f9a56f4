"""Contraction (docs/ir.md §5): on a target with `has_fma`, a float32/float64 sum of products accumulates with
MULACC, one rounding per step, exactly a loop of `fma(a, b, acc)`; elsewhere, and for every other reduction, a
product and a sum are rounded in turn. Whatever the optimizations (tiles, UNROLL, BLOCK, threads), the contracted
kernel gives the bits of the plain contracted loop, as the uncontracted ones do of theirs."""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction

import numpy as np
import pytest
from cg_kernels import batched, conv1d, load, loop, matmul, param, red, sink, store
from cg_run import native_flags, run_program

from plygrad.codegen import choose_opts, lower_uop
from plygrad.ir import DType, Ops, Opt, OptOps, Target, UOp, dtypes

F32 = dtypes.float32
WIDE = ((F32, (2, 4, 8, 16)), (dtypes.float64, (2, 4, 8)))
XEON = Target("CPU", "c", threads=2, vector_widths=WIDE, cache_sizes=(48 << 10, 2 << 20, 260 << 20))
XEON_FMA = dataclasses.replace(XEON, has_fma=True)
FUSED = re.compile(r"\bfmaf?\(|plygrad_fma_")  # a C fused multiply-add: scalar fma/fmaf or the vector helper
NP = {dtypes.float32: np.float32, dtypes.float64: np.float64}


def round_at(dtype: DType, exact: Fraction) -> float:
    """`exact` rounded once to the nearest `dtype` value (ties to even), by search among the float64 neighbours."""
    if dtype is dtypes.float64:
        return float(exact)
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    return float(min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.uint32)) & 1)))


def loop_reference(a: np.ndarray, b: np.ndarray, fused: bool) -> np.ndarray:
    """The plain loop's result, exactly: acc = fma(a, b, acc) when `fused`, else acc = round(acc + round(a * b))."""
    dtype = dtypes.float32 if a.dtype == np.float32 else dtypes.float64
    out = np.zeros((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = 0.0
            for r in range(a.shape[1]):
                product = Fraction(float(a[i, r])) * Fraction(float(b[r, j]))
                if not fused:
                    product = Fraction(round_at(dtype, product))
                acc = round_at(dtype, Fraction(acc) + product)
            out[i, j] = acc
    return out


def run(kernel: UOp, target: Target, opts: list[Opt] | None, inputs: list[np.ndarray]) -> tuple[np.ndarray, str]:
    program = lower_uop(kernel, target, opts)
    out = np.full(program.arg.params[0].size, np.nan, inputs[0].dtype)
    run_program(program, [out, *inputs], openmp=True, flags=native_flags())
    return out, str(program.src[0].arg)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_a_contracted_sum_of_products_is_a_loop_of_fused_multiply_adds(dtype: DType) -> None:
    m, k, n = 4, 24, 8
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)).astype(NP[dtype]), rng.standard_normal((k, n)).astype(NP[dtype])
    fused, fused_src = run(matmul(m, k, n, dtype), XEON_FMA, [], [a.ravel(), b.ravel()])
    plain, plain_src = run(matmul(m, k, n, dtype), XEON, [], [a.ravel(), b.ravel()])
    np.testing.assert_array_equal(fused.reshape(m, n), loop_reference(a, b, fused=True))
    np.testing.assert_array_equal(plain.reshape(m, n), loop_reference(a, b, fused=False))
    assert (fused != plain).any(), "one rounding instead of two changes some of 32 sums of 24 random products"
    assert FUSED.search(fused_src) and not FUSED.search(plain_src)


@pytest.mark.parametrize("kernel", [matmul(64, 256, 128), matmul(12, 96, 48), matmul(64, 2048, 64),
                                    batched(3, 32, 24, 64, False), batched(2, 16, 64, 48, True),
                                    conv1d(16, 8, 56), conv1d(12, 3, 24)],
                         ids=["square", "odd", "blocked", "batched", "transposed", "conv", "conv-odd"])
def test_the_heuristic_keeps_the_plain_contracted_loops_bits(kernel: UOp) -> None:
    rng = np.random.default_rng(0)
    program = lower_uop(kernel, XEON_FMA, [])
    inputs = [rng.standard_normal(p.size).astype(np.float32) for p in program.arg.params if not p.writable]
    opts = choose_opts(kernel, XEON_FMA)
    tiled, source = run(kernel, XEON_FMA, None, inputs)
    plain, _ = run(kernel, XEON_FMA, [], inputs)
    np.testing.assert_array_equal(tiled, plain, err_msg=f"opts={opts}")
    assert "plygrad_fma_float" in source  # the register tile's vector accumulators are fused too


@pytest.mark.parametrize("opts", [[Opt(OptOps.UNROLL, 2, 4)], [Opt(OptOps.UNROLL, 2, 8), Opt(OptOps.UPCAST, 1, 16)],
                                  [Opt(OptOps.BLOCK, 2, 32), Opt(OptOps.UPCAST, 0, 4)],
                                  [Opt(OptOps.UNROLL, 2, 96)]], ids=["unroll", "unroll+vector", "block", "full"])
def test_unrolled_blocked_and_fully_unrolled_sums_keep_the_bits(opts: list[Opt]) -> None:
    kernel = matmul(8, 96, 32)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(8 * 96).astype(np.float32), rng.standard_normal(96 * 32).astype(np.float32)]
    optimized, _ = run(kernel, XEON_FMA, opts, inputs)
    plain, _ = run(kernel, XEON_FMA, [], inputs)
    np.testing.assert_array_equal(optimized, plain)


def _reduction(op: Ops, dtype: DType, product: bool) -> UOp:
    """out[i] = op over r of (a[i, r] * b[r]) or of a[i, r] alone."""
    out, a, b = param(0, dtype, 8), param(1, dtype, 8 * 16), param(2, dtype, 16)
    i, r = loop(8, 0), red(16, 1)
    value = load(a, i * 16 + r) * load(b, r) if product else load(a, i * 16 + r)
    total = UOp(Ops.REDUCE, dtype, (value, r), op)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i, total), i)), name="reduction")


@pytest.mark.parametrize(("op", "dtype", "product"), [
    (Ops.MAX, dtypes.float32, True),  # the largest product: nothing to fuse
    (Ops.ADD, dtypes.float32, False),  # a plain sum
    (Ops.ADD, dtypes.int32, True),  # integers round nothing
    (Ops.ADD, dtypes.float16, True),  # half products are float32 values rounded to half: no fused half op here
])
def test_only_float32_and_float64_sums_of_products_contract(op: Ops, dtype: DType, product: bool) -> None:
    source = str(lower_uop(_reduction(op, dtype, product), XEON_FMA, []).src[0].arg)
    assert not FUSED.search(source)


def test_gpu_targets_fuse_with_their_own_intrinsics() -> None:
    kernel = matmul(16, 32, 16)
    assert "__fmaf_rn(" in str(lower_uop(kernel, Target.cuda("sm_90")).src[0].arg)
    assert "__builtin_fmaf(" in str(lower_uop(kernel, Target.hip("gfx1100")).src[0].arg)
    assert re.search(r"\bfma\(", str(lower_uop(kernel, Target.metal()).src[0].arg))
