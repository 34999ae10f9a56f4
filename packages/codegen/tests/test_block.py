"""BLOCK (cache blocking of a reduction, block.py): what it applies to, where its loop goes, and that it never
changes a result: every blocked program is compared bit for bit with the unoptimized one (and with NumPy)."""

from __future__ import annotations

import numpy as np
import pytest
from cg_kernels import load, loop, matmul, param, red, reduce_rows, sink, store
from cg_run import run_program
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.codegen import OptError, apply_opts, lower_uop
from plygrad.codegen.linearize import linearize
from plygrad.codegen.lower import PASSES, Lowering
from plygrad.ir import AxisType, DType, Ops, Opt, OptOps, Target, UOp, dtypes

WIDE = ((dtypes.float32, (2, 4, 8, 16)), (dtypes.float64, (2, 4, 8)))
CPU = Target("CPU", "c", threads=1, vector_widths=WIDE)
CPU2 = Target("CPU", "c", threads=2, vector_widths=WIDE)
GPU = Target("GPU", "c", has_local=True)
F32 = dtypes.float32


def linear_relu(m: int, k: int, n: int) -> UOp:
    """out[i, j] = max(sum_r a[i, r] * w[r, j] + bias[j], 0): the reduction under an epilogue (WHERE makes lanes)."""
    out, a, w, bias = param(0, F32, m * n), param(1, F32, m * k), param(2, F32, k * n), param(3, F32, n)
    i, j, r = loop(m, 0), loop(n, 1), red(k, 2)
    total = UOp(Ops.REDUCE, F32, (load(a, i * k + r) * load(w, r * n + j), r), Ops.ADD) + load(bias, j)
    relu = UOp(Ops.WHERE, F32, (UOp(Ops.CMPLT, dtypes.bool, (UOp.const(F32, 0.0), total)), total,
                                UOp.const(F32, 0.0)))
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, relu), i, j)), name="linear_relu")


def window_max(m: int, k: int, n: int) -> UOp:
    """out[i, j] = max over r, s of a[i + r, j + s] (a 2-D max window over an (m+k-1, n+2) input): two reduce axes."""
    width = n + 2
    out, a = param(0, F32, m * n), param(1, F32, (m + k - 1) * width)
    i, j, r, s = loop(m, 0), loop(n, 1), red(k, 2), red(3, 3)
    total = UOp(Ops.REDUCE, F32, (load(a, (i + r) * width + j + s), r, s), Ops.MAX)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, total), i, j)), name="window_max")


def inputs(program: UOp, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.size).astype(np.float32) for p in program.arg.params if not p.writable]


def run(kernel: UOp, target: Target, opts: list[Opt] | None, ins: list[np.ndarray]) -> np.ndarray:
    program = lower_uop(kernel, target, opts)
    out = np.full(program.arg.params[0].size, np.nan, np.float32)  # garbage where nothing is written
    run_program(program, [out, *ins], openmp=target.threads > 1)
    return out


def assert_blocked_matches_plain(kernel: UOp, opts: list[Opt], target: Target = CPU) -> np.ndarray:
    ins = inputs(lower_uop(kernel, target, []))
    plain = run(kernel, target, [], ins)
    blocked = run(kernel, target, opts, ins)
    np.testing.assert_array_equal(blocked, plain, err_msg=f"opts={opts}")
    return blocked


@settings(max_examples=25, deadline=None)
@given(m=st.sampled_from([1, 3, 4, 8]), n=st.sampled_from([1, 5, 16, 32, 48]), blocks=st.integers(2, 5),
       block=st.sampled_from([2, 3, 4, 8]), tile=st.booleans(), threads=st.booleans())
def test_blocked_matmul_is_bit_identical(m: int, n: int, blocks: int, block: int, tile: bool, threads: bool) -> None:
    k = blocks * block
    kernel = matmul(m, k, n)
    opts = [Opt(OptOps.BLOCK, 2, block)]
    columns = n
    if tile and n % 16 == 0:
        opts += [Opt(OptOps.UPCAST, 1, 16)]
        columns //= 16
        if m % 4 == 0:
            opts += [Opt(OptOps.UPCAST, 0, 4)]
    if threads and columns >= 2:
        opts += [Opt(OptOps.THREAD, 1, 2)]
    got = assert_blocked_matches_plain(kernel, opts, CPU2 if threads else CPU)
    a, b = inputs(lower_uop(kernel, CPU, []))
    np.testing.assert_allclose(got, (a.reshape(m, k) @ b.reshape(k, n)).ravel(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opts", [
    [Opt(OptOps.BLOCK, 2, 4)],
    [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 2)],  # lanes: the relu's WHERE
    [Opt(OptOps.BLOCK, 2, 6), Opt(OptOps.UNROLL, 2, 3), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.THREAD, 1, 2)],
])
def test_epilogue_runs_once_on_the_whole_sum(opts: list[Opt]) -> None:
    """Partial sums are stored raw; only the last block applies the bias and the relu."""
    kernel = linear_relu(4, 12, 32)
    got = assert_blocked_matches_plain(kernel, opts, CPU2)
    a, w, bias = inputs(lower_uop(kernel, CPU, []))
    expected = np.maximum(a.reshape(4, 12) @ w.reshape(12, 32) + bias, 0)
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-5, atol=1e-5)


def test_blocked_max_over_two_axes_keeps_nan_and_order() -> None:
    kernel = window_max(6, 8, 16)
    ins = inputs(lower_uop(kernel, CPU, []))
    ins[0][5] = np.nan
    ins[0][40] = -0.0
    plain = run(kernel, CPU, [], ins)
    for opts in ([Opt(OptOps.BLOCK, 2, 2)], [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.UPCAST, 1, 16),
                                            Opt(OptOps.UNROLL, 3, 3)]):
        np.testing.assert_array_equal(run(kernel, CPU, opts, ins), plain, err_msg=f"opts={opts}")
    assert np.isnan(plain).any()


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL])
def test_blocked_row_reduction(op: Ops) -> None:
    kernel = reduce_rows(op, F32, 8, 24)
    assert_blocked_matches_plain(kernel, [Opt(OptOps.BLOCK, 1, 6), Opt(OptOps.UPCAST, 0, 8)])


def broadcast_row_sums(m: int, k: int, n: int) -> UOp:
    """out[i, j] = sum_r w[j, r] for every row i: a matmul's gradient against ones (`ones @ w.T`), which reads
    no row of its left operand, so the unrolled copies of an UPCAST of i are one REDUCE node."""
    out, w = param(0, F32, m * n), param(1, F32, n * k)
    i, j, r = loop(m, 0), loop(n, 1), red(k, 2)
    total = UOp(Ops.REDUCE, F32, (load(w, j * k + r), r), Ops.ADD)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, total), i, j)), name="broadcast_row_sums")


@pytest.mark.parametrize("opts", [
    [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.BLOCK, 2, 4)],  # 4 stores of one scalar reduction
    [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.BLOCK, 2, 4)],  # 4 stores of one vec(8)
    [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.BLOCK, 2, 4)],
], ids=["scalar", "vector", "vector_tiles"])
def test_a_blocked_reduction_several_stores_hold_whole(opts: list[Opt]) -> None:
    """Each copy stores the same partial in every block, so any one of them seeds the next block (the heuristic's
    choice for the 512^3 matmul's gradient raised 'stored by 4 stores that do not hold its lanes one each')."""
    kernel = broadcast_row_sums(8, 16, 32)
    got = assert_blocked_matches_plain(kernel, opts)
    (w,) = inputs(lower_uop(kernel, CPU, []))
    np.testing.assert_allclose(got, np.tile(w.reshape(32, 16).sum(1), 8), rtol=1e-5, atol=1e-5)


def test_full_reduction_to_one_element() -> None:
    out, a = param(0, F32, 1), param(1, F32, 64)
    r = red(64, 0)
    kernel = sink(store(out, UOp.const(dtypes.index, 0), UOp(Ops.REDUCE, F32, (load(a, r), r), Ops.ADD)))
    assert_blocked_matches_plain(kernel, [Opt(OptOps.BLOCK, 0, 16), Opt(OptOps.UNROLL, 0, 4)])


def test_the_inner_part_keeps_the_axis_and_the_block_loop_nests_inside_threads() -> None:
    kernel = apply_opts(matmul(8, 16, 32), [Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.THREAD, 1, 2)], CPU2)
    types = {int(n.arg[0]): (n.arg[1], int(n.src[0].arg)) for n in kernel.toposort if n.op is Ops.RANGE}
    assert types == {0: (AxisType.LOOP, 8), 1: (AxisType.THREAD, 32), 2: (AxisType.REDUCE, 4), 3: (AxisType.BLOCK, 4)}
    state = Lowering(matmul(8, 16, 32), CPU2, (Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.THREAD, 1, 2)))
    for name, step in PASSES:
        if name == "linearize":
            break
        state = step(state)
    nest = [int(n.arg[0]) for n in linearize(state.kernel) if n.op is Ops.RANGE]
    assert nest == [1, 3, 0, 2]  # THREAD j, BLOCK k, i, then k inside each block


def kernel_with(value: UOp, extra: list[UOp] | None = None, out_dtype: DType = F32) -> UOp:
    out = param(0, out_dtype, 4)
    i = loop(4, 0)
    stores = [store(out, i, value), *(extra or [])]
    return sink(UOp(Ops.END, dtypes.void, (*stores[:1], i)), *stores[1:])


def _sum(a: UOp, i: UOp, r: UOp) -> UOp:
    return UOp(Ops.REDUCE, F32, (load(a, i * 8 + r), r), Ops.ADD)


def invalid_cases() -> list[tuple[str, UOp, Opt, Target, str]]:
    a = param(1, F32, 32)
    i, r, s = loop(4, 0), red(8, 1), red(4, 2)
    out = param(0, F32, 4)
    plain = sink(UOp(Ops.END, dtypes.void, (store(out, i, _sum(a, i, r)), i)))
    two_axes = UOp(Ops.REDUCE, F32, (load(a, i * 8 + r) + load(a, s), r, s), Ops.ADD)
    half_out = param(0, dtypes.float16, 4)
    as_half = sink(UOp(Ops.END, dtypes.void, (store(half_out, i, UOp(Ops.CAST, dtypes.float16, (_sum(a, i, r),))),
                                              i)))
    reads_out = sink(UOp(Ops.END, dtypes.void, (store(out, i, _sum(a, i, r) + load(out, i)), i)))
    second = param(2, F32, 4)
    two_stores = sink(UOp(Ops.END, dtypes.void, (store(out, i, _sum(a, i, r)), i)),
                      UOp(Ops.END, dtypes.void, (store(second, i, _sum(a, i, r) * 2.0), i)))
    inner_sum = _sum(a, i, r)
    nested = sink(UOp(Ops.END, dtypes.void, (store(out, i, UOp(Ops.REDUCE, F32, (inner_sum * load(a, s), s),
                                                                Ops.ADD)), i)))
    return [
        ("workgroups", plain, Opt(OptOps.BLOCK, 1, 2), GPU, "CPU targets"),
        ("whole axis", plain, Opt(OptOps.BLOCK, 1, 8), CPU, "whole axis"),
        ("not dividing", plain, Opt(OptOps.BLOCK, 1, 3), CPU, "divides"),
        ("output axis", plain, Opt(OptOps.BLOCK, 0, 2), CPU, "REDUCE"),
        ("inner loop", sink(UOp(Ops.END, dtypes.void, (store(out, i, two_axes), i))), Opt(OptOps.BLOCK, 2, 2),
         CPU, "outermost"),
        ("narrower output", as_half, Opt(OptOps.BLOCK, 1, 2), CPU, "holds dtypes.float16"),
        ("output read", reads_out, Opt(OptOps.BLOCK, 1, 2), CPU, "reads or writes its output"),
        ("two stores", two_stores, Opt(OptOps.BLOCK, 1, 2), CPU, "2 stores"),
        ("feeds a reduction", nested, Opt(OptOps.BLOCK, 1, 2), CPU, "feeds another reduction"),
    ]


@pytest.mark.parametrize(("kernel", "opt", "target", "message"), [c[1:] for c in invalid_cases()],
                         ids=[c[0] for c in invalid_cases()])
def test_block_refuses_what_it_cannot_keep_exact(kernel: UOp, opt: Opt, target: Target, message: str) -> None:
    with pytest.raises(OptError, match=message):
        apply_opts(kernel, [opt], target)


def test_one_block_per_reduction() -> None:
    with pytest.raises(OptError, match="already blocked"):
        apply_opts(matmul(4, 16, 4), [Opt(OptOps.BLOCK, 2, 8), Opt(OptOps.BLOCK, 2, 4)], CPU)


def _linear(kernel: UOp, target: Target, opts: tuple[Opt, ...]) -> list[UOp]:
    state = Lowering(kernel, target, opts)
    for name, step in PASSES:
        if name == "linearize":
            break
        state = step(state)
    return linearize(state.kernel)


def _inside_ifs(linear: list[UOp]) -> set[UOp]:
    inside, depth = set(), 0
    for node in linear:
        depth += node.op is Ops.IF
        depth -= node.op is Ops.ENDIF
        if depth and node.op not in (Ops.IF, Ops.ENDIF):
            inside.add(node)
    return inside


@pytest.mark.parametrize("opts", [(Opt(OptOps.BLOCK, 2, 4),),
                                  (Opt(OptOps.BLOCK, 2, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 2))])
def test_the_epilogue_is_computed_in_the_last_block_only(opts: tuple[Opt, ...]) -> None:
    """The last block stores the bias + relu, the others the raw partial sum: two gated stores, and what only the
    last block's store uses (the bias ADD, the relu's compare and select) sits inside its IF, so the blocks before
    it do not compute an epilogue they would throw away."""
    linear = _linear(linear_relu(4, 12, 32), CPU, opts)
    stores = [n for n in linear if n.op is Ops.STORE and n.src[0].src[0].op is Ops.PARAM]
    inside = _inside_ifs(linear)
    assert stores and all(s in inside for s in stores), "every output store is gated: last block or not"
    epilogue = [n for n in linear if n.op in (Ops.WHERE, Ops.CMPLT) and n.dtype.scalar() is not dtypes.index]
    assert epilogue and all(n in inside for n in epilogue)


def test_a_value_another_store_uses_stays_before_the_if() -> None:
    """Only what the gated store alone uses moves into its IF; a value an ungated store also reads is computed
    before, once."""
    out0, out1, a = param(0, F32, 16), param(1, F32, 16), param(2, F32, 16)
    i = loop(16, 0)
    twice = load(a, i) * UOp.const(F32, 2.0)
    gate = UOp(Ops.CMPLT, dtypes.bool, (i, UOp.const(dtypes.index, 5)))
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out0, i, twice + UOp.const(F32, 1.0), gate), i)),
                  UOp(Ops.END, dtypes.void, (store(out1, i, twice), i)), name="gated_pair")
    linear = _linear(kernel, CPU, ())
    inside = _inside_ifs(linear)
    adds = [n for n in linear if n.op is Ops.ADD and n.dtype is F32]
    muls = [n for n in linear if n.op is Ops.MUL and n.dtype is F32]
    assert adds and all(n in inside for n in adds)
    assert muls and not any(n in inside for n in muls)
    program = lower_uop(kernel, CPU, [])
    x = np.arange(16, dtype=np.float32)
    got0, got1 = np.full(16, -7, np.float32), np.zeros(16, np.float32)
    run_program(program, [got0, got1, x])
    np.testing.assert_array_equal(got0, np.where(np.arange(16) < 5, x * 2 + 1, -7))
    np.testing.assert_array_equal(got1, x * 2)
