"""The optimization stage: apply_opts' checks and splits, the heuristic's choices, and shapes drawn by hypothesis
(every optimized program computes exactly what the unoptimized one does, and what NumPy does)."""

from __future__ import annotations

import numpy as np
import pytest
from cg_kernels import (
    broadcast_strided,
    elementwise_add,
    matmul,
    multi_output,
    padded,
    reduce_rows,
    scaled_by_var,
    softmax_like,
    sum_of_maxes,
    variance_shared_range,
)
from cg_run import run_program
from hypothesis import given
from hypothesis import strategies as st

from plygrad.codegen import OptError, apply_opts, choose_opts, lower_uop
from plygrad.codegen.errors import CodegenError
from plygrad.ir import AxisType, KernelInfo, Ops, Opt, OptOps, Target, UOp, dtypes

CPU = Target("CPU", "c", threads=1)
CPU4 = Target("CPU", "c", threads=4)
GPU = Target("GPU", "c", has_local=True)


def axis_types(kernel: UOp) -> dict[int, AxisType]:
    return {int(n.arg[0]): n.arg[1] for n in kernel.toposort if n.op is Ops.RANGE}


def test_upcast_splits_an_output_axis_and_records_the_opt() -> None:
    k = apply_opts(elementwise_add(dtypes.float32, 16), [Opt(OptOps.UPCAST, 0, 4)])
    assert axis_types(k) == {0: AxisType.LOOP, 1: AxisType.UPCAST}
    assert isinstance(k.arg, KernelInfo) and k.arg.opts == (Opt(OptOps.UPCAST, 0, 4),)


def test_tile_keeps_the_outer_part_in_place_and_nests_the_inner_one_after_the_other_output_loops() -> None:
    k = apply_opts(matmul(8, 16, 8), [Opt(OptOps.TILE, 0, 4)], CPU)
    assert axis_types(k) == {0: AxisType.LOOP, 1: AxisType.LOOP, 2: AxisType.REDUCE, 3: AxisType.LOOP}
    source = str(lower_uop(matmul(8, 16, 8), CPU, [Opt(OptOps.TILE, 0, 4)]).src[0].arg)
    loops = [line.split("<")[1].split(";")[0].strip() for line in source.splitlines() if "for (long long" in line]
    assert loops == ["2LL", "8LL", "4LL", "16LL"]  # rows/4, columns, the 4 rows of a block, the reduction


def test_gpu_actions_make_local_and_group_ranges() -> None:
    k = apply_opts(matmul(8, 16, 8), [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 2, 4)], GPU)
    assert axis_types(k) == {0: AxisType.LOOP, 1: AxisType.LOOP, 2: AxisType.REDUCE, 3: AxisType.LOCAL,
                             4: AxisType.GROUP_REDUCE}


@pytest.mark.parametrize(("opt", "target", "message"), [
    (Opt(OptOps.UPCAST, 7, 4), CPU, "axes are"),
    (Opt(OptOps.UPCAST, 0, 3), CPU, "divides"),
    (Opt(OptOps.UPCAST, 0, 1), CPU, "divides"),
    (Opt(OptOps.UPCAST, 2, 4), CPU, "REDUCE"),
    (Opt(OptOps.UNROLL, 0, 4), CPU, "LOOP"),
    (Opt(OptOps.LOCAL, 0, 4), CPU, "has_local=False"),
    (Opt(OptOps.GROUP, 2, 4), CPU, "has_local=False"),
    (Opt(OptOps.THREAD, 0, 4), CPU, "threads > 1"),
    (Opt(OptOps.THREAD, 2, 4), CPU4, "REDUCE"),
    (Opt(OptOps.PADTO, 0, 4), CPU, "does not implement"),
    (Opt(OptOps.TILE, 2, 4), CPU, "REDUCE"),
    (Opt(OptOps.TILE, 0, 3), CPU, "divides"),
], ids=lambda x: str(x) if isinstance(x, str) else None)
def test_invalid_opts_raise_opt_error(opt: Opt, target: Target, message: str) -> None:
    with pytest.raises(OptError, match=message):
        apply_opts(matmul(8, 16, 8), [opt], target)
    with pytest.raises(OptError, match=message):
        lower_uop(matmul(8, 16, 8), target, [opt])


def test_symbolic_axis_cannot_be_split() -> None:
    with pytest.raises(OptError, match="symbolic"):
        apply_opts(scaled_by_var(16), [Opt(OptOps.UPCAST, 0, 2)])


def test_c_renderer_rejects_local_ranges() -> None:
    with pytest.raises(CodegenError, match="LOCAL"):
        lower_uop(matmul(8, 16, 8), GPU, [Opt(OptOps.LOCAL, 0, 4)])


def test_heuristic_never_picks_workgroup_actions_on_a_cpu() -> None:
    for kernel in (matmul(64, 64, 64), reduce_rows(Ops.ADD, dtypes.float32, 256, 256),
                   elementwise_add(dtypes.float32, 1 << 16)):
        for target in (CPU, CPU4):
            opts = choose_opts(kernel, target)
            assert not {o.op for o in opts} & {OptOps.LOCAL, OptOps.GROUP}, opts
            apply_opts(kernel, opts, target)  # and they apply


def test_heuristic_choices() -> None:
    opts = choose_opts(matmul(64, 64, 64), CPU4)
    # the vector width (float32 x 8) on the contiguous output axis, a register tile of 4 rows x 2 vectors (8
    # accumulators: a target without 64-byte vectors has 16 registers), threads over the 4 column panels (tiles.py)
    assert opts == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 0, 4),
                    Opt(OptOps.THREAD, 1, 4)]
    scalar = Target("CPU", "c", threads=4, vector_widths=())
    assert Opt(OptOps.UPCAST, 1, 4) in choose_opts(matmul(64, 64, 64), scalar)
    # a workgroup target gets the GPU heuristic: a 4 x 4 tile per thread (16-byte column vectors, 4 rows), 256
    # threads over the columns then the rows
    assert choose_opts(matmul(64, 64, 64), GPU) == [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4),
                                                   Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.LOCAL, 0, 16)]
    assert choose_opts(elementwise_add(dtypes.float32, 6), CPU4) == []


def test_softmax_rows_past_l1_and_half_the_l3_are_not_tiled() -> None:
    """A softmax's rows (every reduce as vector lanes, no scalar chain to hide) are not taken 4 at a time where 4
    rows overflow L1 and all rows half the last cache level: 2048 x 4096 floats on a 32 KiB L1 / 32 MiB L3 host.
    1024 x 4096 (16 MiB) and 16384 x 256 (1 KiB rows) keep 4 rows. One row or four, the values are the same."""
    host = Target("CPU", "c", threads=2, vector_widths=((dtypes.float32, (4, 8, 16)),),
                  cache_sizes=(32 << 10, 1 << 20, 32 << 20))
    big = softmax_like(2048, 4096)
    chosen = choose_opts(big, host)
    assert Opt(OptOps.UNROLL, 1, 16) in chosen and Opt(OptOps.UPCAST, 0, 4) not in chosen, chosen
    assert Opt(OptOps.UPCAST, 0, 4) in choose_opts(softmax_like(1024, 4096), host)
    assert Opt(OptOps.UPCAST, 0, 4) in choose_opts(softmax_like(16384, 256), host)
    a = np.random.default_rng(1).standard_normal(2048 * 4096).astype(np.float32)
    got, four_rows = np.zeros_like(a), np.zeros_like(a)
    run_program(lower_uop(big, host), [got, a], openmp=True)
    tiled = [*chosen[:-1], Opt(OptOps.UPCAST, 0, 4), chosen[-1]]
    run_program(lower_uop(big, host, tiled), [four_rows, a], openmp=True)
    np.testing.assert_array_equal(got, four_rows)
    rows = a.reshape(2048, 4096).astype(np.float64)
    want = np.exp2(rows - rows.max(1, keepdims=True))
    np.testing.assert_allclose(got.reshape(2048, 4096), want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-9)


@given(n=st.integers(1, 70), upcast=st.sampled_from([2, 3, 4, 8]))
def test_elementwise_any_shape(n: int, upcast: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    kernel = elementwise_add(dtypes.float32, n)
    opt_lists: list[list[Opt] | None] = [[], None]
    if n % upcast == 0:
        opt_lists.append([Opt(OptOps.UPCAST, 0, upcast)])
    for opts in opt_lists:
        out = np.zeros(n, np.float32)
        run_program(lower_uop(kernel, CPU, opts), [out, a, b])
        np.testing.assert_array_equal(out, a + b)


@given(m=st.integers(1, 9), n=st.integers(1, 33), op=st.sampled_from([Ops.ADD, Ops.MAX]),
       unroll=st.sampled_from([2, 4, 8]))
def test_reduce_any_shape(m: int, n: int, op: Ops, unroll: int) -> None:
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((m, n)).astype(np.float32)
    kernel = reduce_rows(op, dtypes.float32, m, n)
    plain = np.zeros(m, np.float32)
    run_program(lower_uop(kernel, CPU, []), [plain, a.ravel()])
    expected = a.sum(1) if op is Ops.ADD else a.max(1)
    np.testing.assert_allclose(plain, expected, rtol=1e-5, atol=1e-6)
    opt_lists: list[list[Opt] | None] = [None]
    if n % unroll == 0:
        opt_lists.append([Opt(OptOps.UNROLL, 1, unroll)])
    if m % 2 == 0:
        opt_lists.append([Opt(OptOps.UPCAST, 0, 2)])
    for opts in opt_lists:
        out = np.zeros(m, np.float32)
        run_program(lower_uop(kernel, CPU, opts), [out, a.ravel()])
        np.testing.assert_array_equal(out, plain, err_msg=f"opts={opts}")


def _random_opts(data: st.DataObject, kernel: UOp, target: Target) -> list[Opt]:
    """Up to three valid UPCAST/UNROLL/THREAD actions, each drawn against the kernel as the previous ones left it."""
    opts: list[Opt] = []
    for _ in range(data.draw(st.integers(0, 3))):
        ranges = {int(n.arg[0]): n for n in kernel.toposort if n.op is Ops.RANGE and n.src[0].op is Ops.CONST}
        choices = []
        for axis, r in ranges.items():
            size, kind = int(r.src[0].arg), r.arg[1]
            op = {AxisType.LOOP: OptOps.UPCAST, AxisType.REDUCE: OptOps.UNROLL}.get(kind)
            if op is not None:
                choices += [Opt(op, axis, k) for k in range(2, size + 1) if size % k == 0]
            if kind is AxisType.LOOP and target.threads > 1:
                choices.append(Opt(OptOps.THREAD, axis, target.threads))
        if not choices:
            break
        opt = data.draw(st.sampled_from(choices))
        kernel = apply_opts(kernel, [opt], target)
        opts.append(opt)
    return opts


KERNELS = {"matmul": lambda: matmul(4, 6, 4), "nested": lambda: sum_of_maxes(2, 4, 6),
           "variance": lambda: variance_shared_range(4, 6), "softmax": lambda: softmax_like(4, 6),
           "padded": lambda: padded(6, 2, 4), "multi": lambda: multi_output(12),
           "strided": lambda: broadcast_strided(4, 6)}


@given(data=st.data(), which=st.sampled_from(sorted(KERNELS)))
def test_random_opt_sequences_change_nothing(data: st.DataObject, which: str) -> None:
    kernel = KERNELS[which]()
    program = lower_uop(kernel, CPU, [])
    params = program.arg.params
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(p.size).astype(np.float32) for p in params if not p.writable]
    plain = [np.zeros(p.size, np.float32) for p in params if p.writable]
    run_program(program, [*plain, *inputs])
    opts = _random_opts(data, kernel, CPU4)
    got = [np.zeros(p.size, np.float32) for p in params if p.writable]
    run_program(lower_uop(kernel, CPU4, opts), [*got, *inputs], openmp=True)
    for g, p in zip(got, plain, strict=True):
        np.testing.assert_array_equal(g, p, err_msg=f"opts={opts}")
