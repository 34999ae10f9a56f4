"""Vector lanes (vectorize.py): an UPCAST axis of a vector width that a store indexes contiguously becomes vector
loads, ops, accumulators and stores in the C source, computing bit for bit what the scalar program computes.

Every program here is compared with the same kernel lowered without optimizations (and with the same UPCASTs on a
target without vector widths, which unrolls scalars): the bits must match, NaNs and signed zeros included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cg_kernels import (
    binary,
    broadcast_strided,
    load,
    loop,
    matmul,
    padded,
    param,
    red,
    reduce_rows,
    sink,
    softmax_like,
    store,
)
from cg_run import run_program
from hypothesis import given
from hypothesis import strategies as st

from plygrad.codegen import choose_opts, lower_uop
from plygrad.codegen.vectorize import lane_stride
from plygrad.ir import AxisType, DType, Ops, Opt, OptOps, Target, UOp, dtypes

CPU = Target("CPU", "c", threads=1)  # float32 vectors of 2, 4 and 8 (Target's default)
SCALAR = Target("CPU", "c", threads=1, vector_widths=())
WIDE = Target("CPU", "c", threads=1, vector_widths=((dtypes.float32, (4, 8, 16)), (dtypes.float64, (2, 4)),
                                                    (dtypes.float16, (4, 8)), (dtypes.int32, (4, 8))))
VECTOR_TYPE = "__attribute__((vector_size("


def random_array(rng: np.random.Generator, dtype: DType, size: int) -> np.ndarray[Any, Any]:
    if dtype.kind.name == "FLOAT":
        values = rng.standard_normal(size) * 4
        values[rng.random(size) < 0.1] = 0.0
        return values.astype(np.dtype(dtype.name))
    return rng.integers(-1000, 1000, size).astype(np.dtype(dtype.name))


def run(kernel: UOp, target: Target, opts: list[Opt] | None, dtype: DType = dtypes.float32,
        seed: int = 0) -> tuple[list[np.ndarray[Any, Any]], str]:
    """The kernel's outputs (as raw bits) on fixed random inputs, and its C source."""
    program = lower_uop(kernel, target, opts)
    rng = np.random.default_rng(seed)
    params = program.arg.params
    inputs = [random_array(rng, p.dtype, p.size) for p in params if not p.writable]
    outputs = [np.zeros(p.size, np.dtype(p.dtype.name)) for p in params if p.writable]
    run_program(program, [*outputs, *inputs])
    return [o.view(f"u{o.itemsize}") for o in outputs], program.src[0].arg


def assert_same_bits(got: list[np.ndarray[Any, Any]], expected: list[np.ndarray[Any, Any]], note: str) -> None:
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e, err_msg=note)


def column_sum(op: Ops, m: int, n: int, dtype: DType = dtypes.float32) -> UOp:
    """out[j] = reduce_op over i of a[i, j]: the output axis is the contiguous one (vector accumulators)."""
    out, a = param(0, dtype, n), param(1, dtype, m * n)
    j, i = loop(n, 0), red(m, 1)
    return sink(store(out, j, UOp(Ops.REDUCE, dtype, (load(a, i * n + j), i), op)))


def transposed_copy(m: int, n: int) -> UOp:
    """out[j, i] = a[i, j] * 2: contiguous loads, a strided store."""
    out, a = param(0, dtypes.float32, m * n), param(1, dtypes.float32, m * n)
    i, j = loop(m, 0), loop(n, 1)
    return sink(UOp(Ops.END, dtypes.void, (store(out, j * m + i, load(a, i * n + j) * 2.0), i, j)))


# ---- which code comes out --------------------------------------------------------------------------------------
def test_contiguous_elementwise_is_one_vector_load_op_and_store() -> None:
    _, source = run(binary(Ops.ADD, dtypes.float32, 64), CPU, [Opt(OptOps.UPCAST, 0, 8)])
    assert "typedef float plygrad_float8 __attribute__((vector_size(32)));" in source
    assert source.count("__builtin_memcpy") == 3  # two loads, one store
    assert "plygrad_float8 v" in source and "data0[" in source


def test_target_without_vector_widths_gets_scalar_code() -> None:
    got, source = run(binary(Ops.ADD, dtypes.float32, 64), SCALAR, [Opt(OptOps.UPCAST, 0, 8)])
    assert VECTOR_TYPE not in source and "__builtin_memcpy" not in source
    expected, _ = run(binary(Ops.ADD, dtypes.float32, 64), CPU, [Opt(OptOps.UPCAST, 0, 8)])
    assert_same_bits(got, expected, "scalar vs vector")


@pytest.mark.parametrize("amount", [3, 6])
def test_a_width_the_target_lacks_stays_scalar(amount: int) -> None:
    _, source = run(binary(Ops.MUL, dtypes.float32, 36), CPU, [Opt(OptOps.UPCAST, 0, amount)])
    assert VECTOR_TYPE not in source


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.int32, dtypes.bfloat16])
def test_dtypes_without_exact_vector_ops_stay_scalar_even_if_listed(dtype: DType) -> None:
    source = lower_uop(binary(Ops.ADD, dtype, 32), WIDE, [Opt(OptOps.UPCAST, 0, 8)]).src[0].arg
    assert VECTOR_TYPE not in source


def test_float64_vectors() -> None:
    got, source = run(binary(Ops.FDIV, dtypes.float64, 32), WIDE, [Opt(OptOps.UPCAST, 0, 4)], dtypes.float64)
    assert "typedef double plygrad_double4" in source
    expected, _ = run(binary(Ops.FDIV, dtypes.float64, 32), WIDE, [], dtypes.float64)
    assert_same_bits(got, expected, "float64 x 4")


def test_strided_store_stays_scalar() -> None:
    got, source = run(transposed_copy(8, 16), CPU, [Opt(OptOps.UPCAST, 1, 8)])
    assert VECTOR_TYPE not in source
    assert_same_bits(got, run(transposed_copy(8, 16), CPU, [])[0], "transposed copy")


def test_without_a_vector_operand_lanes_stay_scalar() -> None:
    # out[i, j] = a[j, i] * b[i] + 1: a strided read and a shared one; packing them into vectors would gain nothing
    got, source = run(broadcast_strided(4, 8), CPU, [Opt(OptOps.UPCAST, 1, 8)])
    assert VECTOR_TYPE not in source
    assert_same_bits(got, run(broadcast_strided(4, 8), CPU, [])[0], "strided")


def test_strided_loads_are_gathered_and_shared_loads_broadcast() -> None:
    # out[i, j] = a[j, i] + c[i, j] * b[i]: a gathered (stride m) into a vector, b[i] broadcast, c one vector load
    m, n = 4, 8
    out, a, b, c = (param(0, dtypes.float32, m * n), param(1, dtypes.float32, m * n), param(2, dtypes.float32, m),
                    param(3, dtypes.float32, m * n))
    i, j = loop(m, 0), loop(n, 1)
    value = load(a, j * m + i) + load(c, i * n + j) * load(b, i)
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, value), i, j)))
    got, source = run(kernel, CPU, [Opt(OptOps.UPCAST, 1, 8)])
    assert source.count("__builtin_memcpy") == 2  # c and the store
    assert source.count("(plygrad_float8){") == 2  # VECTORIZE: the gather and the broadcast
    assert_same_bits(got, run(kernel, CPU, [])[0], "gather/broadcast")


def test_matmul_gets_a_register_tile_of_vector_accumulators() -> None:
    opts = choose_opts(matmul(16, 16, 32), CPU)
    assert opts[:3] == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 0, 4)]  # 4 x 2 vectors
    got, source = run(matmul(16, 16, 32), CPU, None)
    assert source.count("plygrad_float8 acc") == 8
    assert_same_bits(got, run(matmul(16, 16, 32), CPU, [])[0], "matmul tile")


def test_column_reduce_uses_vector_accumulators() -> None:
    _, source = run(column_sum(Ops.ADD, 8, 16), CPU, [Opt(OptOps.UPCAST, 0, 8)])
    assert "plygrad_float8 acc" in source


def test_heuristic_vector_width_only_on_contiguous_vectorizable_axes() -> None:
    assert Opt(OptOps.UPCAST, 0, 8) in choose_opts(binary(Ops.ADD, dtypes.float32, 64), CPU)
    assert Opt(OptOps.UPCAST, 0, 16) in choose_opts(binary(Ops.ADD, dtypes.float32, 64), WIDE)
    assert Opt(OptOps.UPCAST, 0, 4) in choose_opts(binary(Ops.ADD, dtypes.int32, 64), CPU)  # scalar unroll
    assert Opt(OptOps.UPCAST, 1, 4) in choose_opts(transposed_copy(8, 16), CPU)  # strided store: scalar unroll


def test_lane_stride() -> None:
    u, o, r = UOp.range(8, 3, AxisType.UPCAST), UOp.range(4, 0), UOp.range(5, 1)
    assert lane_stride(o * 8 + u, u) == 1
    assert lane_stride((o * 8 + u) * 5 + r, u) == 5
    assert lane_stride(r * 40 + (u + o * 8) - 3, u) == 1
    assert lane_stride(o * 8, u) == 0
    assert lane_stride((o * 8 + u) % 6, u) is None
    assert lane_stride(u * r, u) is None


# ---- the same results as scalar code ---------------------------------------------------------------------------
@given(n=st.sampled_from([8, 16, 24, 40, 64]), width=st.sampled_from([4, 8]),
       op=st.sampled_from([Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT]),
       dtype=st.sampled_from([dtypes.float32, dtypes.float64, dtypes.float16, dtypes.int32]))
def test_elementwise_matches_scalar(n: int, width: int, op: Ops, dtype: DType) -> None:
    if op is Ops.FDIV and dtype is dtypes.int32:
        op = Ops.IDIV
    kernel = binary(op, dtype, n)
    expected, _ = run(kernel, WIDE, [], dtype, seed=n)
    for target in (WIDE, CPU, SCALAR):
        got, _ = run(kernel, target, [Opt(OptOps.UPCAST, 0, width)], dtype, seed=n)
        assert_same_bits(got, expected, f"{target.vector_widths}")


def test_vector_max_propagates_nan_and_orders_signed_zeros() -> None:
    n = 16
    out, a, b = param(0, dtypes.float32, n), param(1, dtypes.float32, n), param(2, dtypes.float32, n)
    i = loop(n, 0)
    kernel = sink(store(out, i, load(a, i).alu(Ops.MAX, load(b, i))))
    x = np.array([0.0, -0.0, 0.0, -0.0, np.nan, 1.0, np.nan, -np.inf, 3, -3, 2, 2, np.inf, 5, -1, 0], np.float32)
    y = np.array([-0.0, 0.0, 0.0, -0.0, 1.0, np.nan, np.nan, -np.inf, 2, -2, 2, 3, 1, np.inf, -0.0, -1], np.float32)
    results = []
    for opts in ([], [Opt(OptOps.UPCAST, 0, 8)]):
        got = np.zeros(n, np.float32)
        run_program(lower_uop(kernel, CPU, opts), [got, x, y])
        results.append(got.view(np.uint32))
    np.testing.assert_array_equal(results[1], results[0])
    assert not np.signbit(results[1][:3].view(np.float32)).any() and np.signbit(results[1][3:4].view(np.float32))


@given(m=st.sampled_from([1, 3, 4, 8]), k=st.sampled_from([1, 4, 5, 12]), n=st.sampled_from([8, 16, 32]),
       unroll=st.sampled_from([1, 2, 4]), dtype=st.sampled_from([dtypes.float32, dtypes.float64]))
def test_matmul_tiles_match_scalar(m: int, k: int, n: int, unroll: int, dtype: DType) -> None:
    kernel = matmul(m, k, n, dtype)
    expected, _ = run(kernel, WIDE, [], dtype)
    width = 8 if dtype is dtypes.float32 else 4
    opts = [Opt(OptOps.UPCAST, 1, width)]
    if m % 4 == 0:
        opts.append(Opt(OptOps.UPCAST, 0, 4))
    if unroll > 1 and k % unroll == 0:
        opts.append(Opt(OptOps.UNROLL, 2, unroll))
    got, source = run(kernel, WIDE, opts, dtype)
    assert VECTOR_TYPE in source
    assert_same_bits(got, expected, f"opts={opts}")


@given(m=st.sampled_from([1, 2, 5]), n=st.sampled_from([8, 16]), op=st.sampled_from([Ops.ADD, Ops.MAX, Ops.MUL]))
def test_vector_accumulators_match_scalar(m: int, n: int, op: Ops) -> None:
    kernel = column_sum(op, m, n)
    expected, _ = run(kernel, CPU, [])
    for opts in ([Opt(OptOps.UPCAST, 0, 8)], [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 1, m)] if m > 1 else []):
        got, _ = run(kernel, CPU, opts)
        assert_same_bits(got, expected, f"opts={opts}")


@pytest.mark.parametrize(("name", "kernel", "opts"), [
    ("padded", padded(12, 2, 2), [Opt(OptOps.UPCAST, 0, 8)]),  # gates depend on the lane: scalar gated loads
    ("softmax", softmax_like(4, 16), [Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.UNROLL, 2, 4)]),
    ("rows", reduce_rows(Ops.ADD, dtypes.float32, 16, 8), [Opt(OptOps.UPCAST, 0, 8)]),  # strided: gathered
])
def test_mixed_kernels_match_scalar(name: str, kernel: UOp, opts: list[Opt]) -> None:
    expected, _ = run(kernel, CPU, [])
    got, _ = run(kernel, CPU, opts)
    assert_same_bits(got, expected, name)
    scalar_info = lower_uop(kernel, SCALAR, opts).arg
    vector_info = lower_uop(kernel, CPU, opts).arg
    assert (vector_info.ops, vector_info.mem) == (scalar_info.ops, scalar_info.mem)  # estimates count lanes


def piecewise(n: int) -> UOp:
    """out[i] = (a[i] < b[i]) | (a[i] == 0) ? a[i] * 2 : -b[i], then (out < 1) ^ (b[i] != b[i]) ? out : 1: float32
    comparisons, their AND/OR/XOR and selects, which C renders as vectors of lane masks."""
    out, a, b = param(0, dtypes.float32, n), param(1, dtypes.float32, n), param(2, dtypes.float32, n)
    i = loop(n, 0)
    x, y = load(a, i), load(b, i)
    zero, one, two = (UOp.const(dtypes.float32, v) for v in (0.0, 1.0, 2.0))
    first = (x.alu(Ops.CMPLT, y).alu(Ops.OR, x.alu(Ops.CMPEQ, zero))).alu(Ops.WHERE, x * two, y.alu(Ops.NEG))
    cond = first.alu(Ops.CMPLT, one).alu(Ops.XOR, y.alu(Ops.CMPNE, y)).alu(Ops.AND, first.alu(Ops.CMPNE, zero))
    return sink(UOp(Ops.END, dtypes.void, (store(out, i, cond.alu(Ops.WHERE, first, one)), i)))


@pytest.mark.parametrize("width", [4, 8, 16])
def test_comparisons_and_selects_are_lane_masks_with_the_scalar_bits(width: int) -> None:
    kernel = piecewise(64)
    expected, _ = run(kernel, SCALAR, [Opt(OptOps.UPCAST, 0, width)])
    got, source = run(kernel, WIDE, [Opt(OptOps.UPCAST, 0, width)])
    assert f"plygrad_float{width}_mask v" in source and " ? " not in source.split("{", 1)[1], source
    assert_same_bits(got, expected, f"width {width}")


def test_a_lane_of_a_comparison_mask_cast_to_float_is_one_not_minus_one() -> None:
    """ceil(x) = trunc(x) + float(trunc(x) < x): the comparison is a vector of lane masks (-1 or 0); a lane taken
    from it and cast to float must be 1.0 (the scalar lane's _Bool), whatever the stores around it do."""
    n = 8
    out, a = param(0, dtypes.float32, n), param(1, dtypes.float32, n)
    i = loop(n, 0)
    x = load(a, i)
    t = x.alu(Ops.TRUNC)
    value = t + t.alu(Ops.CMPLT, x).cast(dtypes.float32)
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, i, value), i)))
    values = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-7, 2.0, -2.0, 0.5], np.float32)
    for opts in ([], [Opt(OptOps.UPCAST, 0, 8)]):
        program = lower_uop(kernel, CPU, opts)
        got = np.zeros(n, np.float32)
        run_program(program, [got, values])
        np.testing.assert_array_equal(got, np.ceil(values), err_msg=f"opts={opts}")
