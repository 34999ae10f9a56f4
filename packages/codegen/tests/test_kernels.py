"""Hand-built kernels lowered to C, compiled, run, and compared with NumPy computing the same thing.

Every kernel also runs with no optimizations, with the heuristic's, and with explicit actions: those results must
be identical to the bit (UNROLL keeps the accumulation order, UPCAST only reorders independent outputs).
"""

from __future__ import annotations

import numpy as np
import pytest
from cg_kernels import (
    broadcast_strided,
    count,
    elementwise_add,
    full_sum,
    gated_store,
    matmul,
    multi_output,
    no_loops,
    padded,
    padded_where,
    reduce_rows,
    scaled_by_var,
    softmax_like,
    sum_of_maxes,
    variance_shared_range,
)
from cg_run import run_program

from plygrad.codegen import lower_uop
from plygrad.ir import DType, Ops, Opt, OptOps, Target, UOp, dtypes

CPU = Target("CPU", "c", arch="x86-64", threads=1)
RNG = np.random.default_rng(0)


def run(kernel: UOp, inputs: list[np.ndarray], outputs: list[tuple[int, np.dtype]], opts: list[Opt] | None,
        variables: dict[str, int] | None = None, target: Target = CPU, fill: float = 0) -> list[np.ndarray]:
    program = lower_uop(kernel, target, opts)
    outs = [np.full(size, fill, dtype=dt) for size, dt in outputs]
    run_program(program, [*outs, *inputs], variables, openmp=target.threads > 1)
    return outs


def all_variants(kernel: UOp, inputs: list[np.ndarray], outputs: list[tuple[int, np.dtype]],
                 opt_lists: list[list[Opt]], **kw: object) -> list[np.ndarray]:
    """Run with no opts, the heuristic's, and each given list; assert all identical; return the plain result."""
    plain = run(kernel, inputs, outputs, [], **kw)  # type: ignore[arg-type]
    for opts in [None, *opt_lists]:
        got = run(kernel, inputs, outputs, opts, **kw)  # type: ignore[arg-type]
        for p, g in zip(plain, got, strict=True):
            np.testing.assert_array_equal(g, p, err_msg=f"opts={opts}")
    return plain


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.float16, dtypes.uint8])
def test_elementwise_add(dtype: DType) -> None:
    npdt = np.dtype(dtype.name)
    a = (RNG.standard_normal(32) * 50).astype(npdt)
    b = (RNG.standard_normal(32) * 50).astype(npdt)
    (out,) = all_variants(elementwise_add(dtype, 32), [a, b], [(32, npdt)], [[Opt(OptOps.UPCAST, 0, 4)],
                                                                              [Opt(OptOps.UPCAST, 0, 32)]])
    np.testing.assert_array_equal(out, a + b)


def test_broadcast_strided() -> None:
    m, n = 6, 8
    a = RNG.standard_normal((n, m)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    (out,) = all_variants(broadcast_strided(m, n), [a.ravel(), b], [(m * n, np.dtype(np.float32))],
                          [[Opt(OptOps.UPCAST, 1, 4)], [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2)]])
    np.testing.assert_array_equal(out.reshape(m, n), a.T * b[:, None] + np.float32(1))


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL], ids=lambda o: o.name)
def test_reduce_rows(op: Ops) -> None:
    m, n = 16, 12
    a = RNG.uniform(0.5, 1.5, (m, n)).astype(np.float32)
    if op is Ops.ADD:  # values of mixed magnitude and sign make the summation order visible in the result
        a = (RNG.standard_normal((m, n)) * 10.0 ** RNG.integers(-3, 4, (m, n))).astype(np.float32)
    (out,) = all_variants(reduce_rows(op, dtypes.float32, m, n), [a.ravel()], [(m, np.dtype(np.float32))],
                          [[Opt(OptOps.UNROLL, 1, 4)], [Opt(OptOps.UNROLL, 1, 12)], [Opt(OptOps.UNROLL, 1, 2),
                                                                                      Opt(OptOps.UNROLL, 1, 3)]])
    expected = {Ops.ADD: a.sum(1), Ops.MAX: a.max(1), Ops.MUL: a.prod(1)}[op]
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_max_reduce_propagates_nan_and_handles_negative_values() -> None:
    a = -RNG.uniform(1, 2, (3, 8)).astype(np.float32)
    a[1, 5] = np.nan
    (out,) = all_variants(reduce_rows(Ops.MAX, dtypes.float32, 3, 8), [a.ravel()], [(3, np.dtype(np.float32))],
                          [[Opt(OptOps.UNROLL, 1, 8)]])
    np.testing.assert_array_equal(out, np.max(a, 1))


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.bool])
def test_integer_and_bool_reduce(dtype: DType) -> None:
    npdt = np.dtype(dtype.name)
    a = RNG.integers(-100, 100, (4, 8)).astype(npdt)
    expected = {Ops.ADD: a.sum(1, dtype=npdt) if npdt != np.bool_ else a.any(1), Ops.MAX: a.max(1)}
    for op, ref in expected.items():
        (out,) = all_variants(reduce_rows(op, dtype, 4, 8), [a.ravel()], [(4, npdt)], [[Opt(OptOps.UNROLL, 1, 4)]])
        np.testing.assert_array_equal(out, ref)


def test_matmul() -> None:
    m, k, n = 8, 16, 12
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    (out,) = all_variants(matmul(m, k, n), [a.ravel(), b.ravel()], [(m * n, np.dtype(np.float32))],
                          [[Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4)],
                           [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UNROLL, 2, 16)]])
    np.testing.assert_allclose(out.reshape(m, n), a @ b, rtol=1e-5, atol=1e-5)


def test_padded_load_reads_zero() -> None:
    a = RNG.standard_normal(10).astype(np.float32)
    (out,) = all_variants(padded(10, 3, 3), [a], [(16, np.dtype(np.float32))], [[Opt(OptOps.UPCAST, 0, 4)]])
    np.testing.assert_array_equal(out, np.pad(a, (3, 3)) * np.float32(2))


def test_padding_through_where() -> None:
    a = RNG.standard_normal(6).astype(np.float32)
    (out,) = all_variants(padded_where(6, 2), [a], [(8, np.dtype(np.float32))], [[Opt(OptOps.UPCAST, 0, 8)]])
    np.testing.assert_array_equal(out, np.concatenate([np.full(2, -1, np.float32), a]))


def test_gated_store_leaves_the_rest() -> None:
    a = RNG.standard_normal(8).astype(np.float32)
    (out,) = all_variants(gated_store(8, 5), [a], [(8, np.dtype(np.float32))], [[Opt(OptOps.UPCAST, 0, 4)]],
                          fill=7.0)
    np.testing.assert_array_equal(out, np.where(np.arange(8) < 5, a + np.float32(1), np.float32(7)))


def test_multi_output() -> None:
    a, b = RNG.standard_normal(16).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    f32 = np.dtype(np.float32)
    out0, out1 = all_variants(multi_output(16), [a, b], [(16, f32), (16, f32)], [[Opt(OptOps.UPCAST, 0, 4)]])
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a * b)


def test_two_reduces_one_feeding_the_other() -> None:
    m, n = 4, 10
    a = RNG.standard_normal((m, n)).astype(np.float32)
    (out,) = all_variants(softmax_like(m, n), [a.ravel()], [(m * n, np.dtype(np.float32))],
                          [[Opt(OptOps.UNROLL, 1, 5), Opt(OptOps.UNROLL, 2, 2)]])
    e = np.exp2(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out.reshape(m, n), e / e.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 5, 16])
def test_symbolic_bound_from_a_variable(n: int) -> None:
    a = RNG.standard_normal(16).astype(np.float32)
    (out,) = all_variants(scaled_by_var(16), [a], [(16, np.dtype(np.float32))], [], variables={"n": n})
    np.testing.assert_array_equal(out[:n], a[:n] * np.float32(n))
    np.testing.assert_array_equal(out[n:], 0)


def test_openmp_threads() -> None:
    target = Target("CPU", "c", arch="x86-64", threads=2)
    m, k, n = 16, 8, 8
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    opts = [Opt(OptOps.THREAD, 0, 2), Opt(OptOps.UPCAST, 1, 4)]
    program = lower_uop(matmul(m, k, n), target, opts)
    assert "#pragma omp parallel for" in program.src[0].arg
    threaded = run(matmul(m, k, n), [a.ravel(), b.ravel()], [(m * n, np.dtype(np.float32))], opts, target=target)
    plain = run(matmul(m, k, n), [a.ravel(), b.ravel()], [(m * n, np.dtype(np.float32))], [])
    np.testing.assert_array_equal(threaded[0], plain[0])
    np.testing.assert_allclose(threaded[0].reshape(m, n), a @ b, rtol=1e-5, atol=1e-5)


def test_two_reduces_sharing_one_range() -> None:
    m, n = 3, 8
    a = RNG.standard_normal((m, n)).astype(np.float32)
    (out,) = all_variants(variance_shared_range(m, n), [a.ravel()], [(m, np.dtype(np.float32))],
                          [[Opt(OptOps.UNROLL, 1, 4)], [Opt(OptOps.UNROLL, 2, 8)]])
    mean = a.sum(1, keepdims=True) * np.float32(1 / n)
    np.testing.assert_allclose(out, ((a - mean) ** 2).sum(1), rtol=1e-5)


def test_gates_decided_by_upcast_fold_away() -> None:
    a = RNG.standard_normal(10).astype(np.float32)
    program = lower_uop(padded(10, 3, 3), CPU, [Opt(OptOps.UPCAST, 0, 16)])
    assert " ? " not in program.src[0].arg  # every copy knows whether it is padding
    (out,) = run(padded(10, 3, 3), [a], [(16, np.dtype(np.float32))], [Opt(OptOps.UPCAST, 0, 16)])
    np.testing.assert_array_equal(out, np.pad(a, (3, 3)) * np.float32(2))


@pytest.mark.parametrize("kind", ["elementwise", "reduce"])
def test_heuristic_on_a_threaded_target(kind: str) -> None:
    target = Target("CPU", "c", arch="x86-64", threads=4)
    f32 = np.dtype(np.float32)
    if kind == "elementwise":
        n = 1 << 15
        a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
        kernel, inputs, outputs, expected = elementwise_add(dtypes.float32, n), [a, b], [(n, f32)], a + b
    else:
        a = RNG.standard_normal((256, 128)).astype(np.float32)
        kernel, inputs, outputs, expected = reduce_rows(Ops.ADD, dtypes.float32, 256, 128), [a.ravel()], \
            [(256, f32)], a.sum(1)
    program = lower_uop(kernel, target)
    assert any(o.op is OptOps.THREAD for o in program.arg.opts)
    assert "#pragma omp parallel for" in program.src[0].arg
    (threaded,) = run(kernel, inputs, outputs, None, target=target)
    (plain,) = run(kernel, inputs, outputs, [])
    np.testing.assert_array_equal(threaded, plain)
    np.testing.assert_allclose(threaded, expected, rtol=1e-5, atol=1e-5)


def test_reduction_to_a_single_element() -> None:
    a = RNG.uniform(0, 1, 40).astype(np.float32)
    (out,) = all_variants(full_sum(40), [a], [(1, np.dtype(np.float32))], [[Opt(OptOps.UNROLL, 0, 8)]])
    np.testing.assert_allclose(out, [a.sum()], rtol=1e-5)


def test_kernel_without_loops() -> None:
    a = np.array([5, -7], dtype=np.int32)
    (out,) = all_variants(no_loops(), [a], [(1, np.dtype(np.int32))], [])
    np.testing.assert_array_equal(out, [-21])


def test_nested_reductions() -> None:
    m, n, k = 3, 4, 5
    a = RNG.standard_normal((m, n, k)).astype(np.float32)
    (out,) = all_variants(sum_of_maxes(m, n, k), [a.ravel()], [(m, np.dtype(np.float32))],
                          [[Opt(OptOps.UNROLL, 2, 5)], [Opt(OptOps.UNROLL, 1, 2), Opt(OptOps.UPCAST, 0, 3)]])
    np.testing.assert_allclose(out, a.max(2).sum(1), rtol=1e-5)


def test_reduced_value_independent_of_the_range() -> None:
    (out,) = all_variants(count(9), [], [(4, np.dtype(np.int32))], [[Opt(OptOps.UNROLL, 1, 3)]])
    np.testing.assert_array_equal(out, [9, 9, 9, 9])
