"""The CPU heuristic for matmul-shaped kernels (tiles.py): which tile, block and thread axis it picks, and that
what it picks computes exactly what the unoptimized kernel does (bit for bit) and what NumPy does, for odd sizes,
transposed and batched layouts and padded windows (vector loads with a gate per lane) too."""

from __future__ import annotations

import numpy as np
import pytest
from cg_kernels import (
    batched,
    conv1d,
    conv2d_weight_grad,
    load,
    loop,
    matmul,
    max_of_dots,
    param,
    red,
    reduce_rows,
    sink,
    store,
    window_grads,
)
from cg_run import native_flags, run_program
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.codegen import choose_opts, lower_uop
from plygrad.codegen.tiles import panel_rows, tile_shape
from plygrad.ir import Ops, Opt, OptOps, Target, UOp, dtypes

F32 = dtypes.float32
WIDE = ((F32, (2, 4, 8, 16)), (dtypes.float64, (2, 4, 8)))
XEON = Target("CPU", "c", threads=2, vector_widths=WIDE, cache_sizes=(48 << 10, 2 << 20, 260 << 20))
SMALL = Target("CPU", "c", threads=4, vector_widths=((F32, (2, 4, 8)),), cache_sizes=(32 << 10, 256 << 10))
U, B, T, TILE = OptOps.UPCAST, OptOps.BLOCK, OptOps.THREAD, OptOps.TILE


def outputs(kernel: UOp, target: Target, opts: list[Opt] | None, seed: int = 0) -> tuple[np.ndarray, str]:
    program = lower_uop(kernel, target, opts)
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal(p.size).astype(np.float32) for p in program.arg.params if not p.writable]
    out = np.zeros(program.arg.params[0].size, np.float32)
    run_program(program, [out, *ins], openmp=True, flags=native_flags())
    return out, str(program.src[0].arg)


def assert_heuristic_is_exact(kernel: UOp, target: Target = XEON) -> str:
    got, source = outputs(kernel, target, None)
    plain, _ = outputs(kernel, target, [])
    np.testing.assert_array_equal(got, plain, err_msg=f"opts={choose_opts(kernel, target)}")
    return source


@pytest.mark.parametrize(("n", "block"), [(128, None), (512, 128), (1024, 128), (2048, 128)])
def test_square_matmul_tiles_on_an_avx512_xeon(n: int, block: int | None) -> None:
    expected = [Opt(U, 1, 16), Opt(U, 1, 4), Opt(U, 0, 4)]
    expected += [Opt(B, 2, block)] if block else []
    # 16-tile row blocks over every column panel, the blocks over the threads
    assert choose_opts(matmul(n, n, n), XEON) == [*expected, Opt(TILE, 0, 16), Opt(T, 0, 2)]


def test_a_packed_panel_blocks_for_the_l1_and_a_gathered_one_for_the_l2() -> None:
    opts = choose_opts(matmul(256, 512, 256), SMALL)  # 8-float vectors, 16 registers: 4 x 2 tile
    assert opts[:3] == [Opt(U, 1, 8), Opt(U, 1, 2), Opt(U, 0, 4)]
    assert Opt(B, 2, 256) in opts  # packed rows of 64 B: 256 fit in two thirds of a 32 KiB L1
    assert opts[-2:] == [Opt(TILE, 0, 16), Opt(T, 0, 4)]  # 64 row tiles: 4 blocks, one per thread
    assert Opt(B, 2, 128) in choose_opts(matmul(256, 512, 256), XEON)  # rows of 256 B in 32 of 48 KiB
    # 16 rows are too few to pack a gathered operand: its rows (64 B, contiguous along K) stay in the L2, half of it
    assert Opt(B, 3, 16384) in choose_opts(batched(1, 16, 65536, 16, True), XEON)
    assert Opt(B, 3, 4096) in choose_opts(batched(1, 16, 65536, 16, True), SMALL)


@pytest.mark.parametrize(("cache", "stride", "row", "rows"), [
    (2 << 20, 8192, 256, 256), (2 << 20, 4096, 256, 512), (2 << 20, 6144, 256, 1024), (2 << 20, 4, 64, 32768),
    (2 << 20, 1 << 17, 256, 16), (256 << 10, 4096, 128, 64),
])
def test_panel_rows_counts_rows_that_share_cache_sets(cache: int, stride: int, row: int, rows: int) -> None:
    assert panel_rows(cache, stride, row) == rows


def test_tile_shape_prefers_most_accumulators_then_fewest_loads_then_rows() -> None:
    assert tile_shape(1024, 64, 16, 1, 256) == (4, 4)
    assert tile_shape(1024, 7, 16, 1, 256) == (16, 1)  # 7 panels: one vector, the most rows
    assert tile_shape(6, 8, 16, 1, 256) == (3, 4)
    assert tile_shape(1024, 64, 8, 1, 256) == (4, 2)
    assert tile_shape(1024, 64, 16, 64, 256) == (2, 2)  # 64 scalar ops copied per accumulator: at most 4


def test_the_batch_takes_the_threads_when_columns_are_few() -> None:
    opts = choose_opts(batched(12, 64, 32, 16, False), XEON)  # one panel of 16 columns
    assert opts[-1] == Opt(T, 0, 2)
    opts = choose_opts(batched(12, 64, 32, 256, False), XEON)  # 4 panels of 64 columns
    assert opts[-1] == Opt(T, 2, 2)


def test_gathered_operand_gets_one_vector_and_many_rows() -> None:
    """Gathered along the vector axis but contiguous along K (a @ b.T), with too few rows to share a pack (< 32):
    W copies of the reduce step make W x W blocks transposed in registers, which need W registers, so 8 rows; with
    K not a multiple of W, lanes are gathered one by one and 16 rows share each gather. From 32 rows on, the operand
    is packed (pack.py) and the tile is the contiguous one."""
    opts = choose_opts(batched(4, 16, 64, 32, True), XEON)
    assert opts[:2] == [Opt(U, 2, 16), Opt(U, 1, 8)] and Opt(OptOps.UNROLL, 3, 16) in opts
    opts = choose_opts(batched(4, 32, 24, 32, True), XEON)
    assert opts[:2] == [Opt(U, 2, 16), Opt(U, 1, 16)] and not any(o.op is OptOps.UNROLL for o in opts)
    opts = choose_opts(batched(4, 32, 64, 32, True), XEON)
    assert opts[:3] == [Opt(U, 2, 16), Opt(U, 2, 2), Opt(U, 1, 8)] and not any(o.op is OptOps.UNROLL for o in opts)


@pytest.mark.parametrize(("m", "k", "n"), [(21, 384, 64), (16, 64, 48), (8, 32, 16)])
def test_a_linear_layers_weight_is_transposed_in_registers_exactly(m: int, k: int, n: int) -> None:
    """x @ W.T with W stored (out, in), as nn.Linear keeps it: W x W blocks loaded as rows and transposed
    (transpose.py, renderer/c_transpose.py), bit for bit the plain loop."""
    out, x, w = param(0, F32, m * n), param(1, F32, m * k), param(2, F32, n * k)
    i, j, r = loop(m, 0), loop(n, 1), red(k, 2)
    total = UOp(Ops.REDUCE, F32, (load(x, i * k + r) * load(w, j * k + r), r), Ops.ADD)
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, total), i, j)), name="linear")
    source = assert_heuristic_is_exact(kernel)
    assert "plygrad_transpose_float16(" in source


@pytest.mark.parametrize(("m", "n", "width"), [(64, 4096, 16), (32, 384, 16), (8, 48, 8)])
def test_a_sum_over_rows_reads_its_gathered_lanes_as_transposed_blocks(m: int, n: int, width: int) -> None:
    """A sum over the last axis (layer norm's mean) with the rows as vector lanes: the reduce is UNROLLed by the
    width, so its copies read W x W blocks as W row loads and a register transpose instead of W*W scalar loads
    (layer norm's mean of 4096 x 4096: 5.3 -> 2.0 ms); bit for bit the plain loop, and each row's sum is its
    elements added in order."""
    kernel = reduce_rows(Ops.ADD, F32, m, n)
    opts = choose_opts(kernel, XEON)
    assert Opt(OptOps.UNROLL, 1, width) in opts and Opt(U, 0, width) in opts, opts
    source = assert_heuristic_is_exact(kernel)
    assert f"plygrad_transpose_float{width}(" in source
    a = np.random.default_rng(m).standard_normal((m, n)).astype(np.float32)
    out = np.zeros(m, np.float32)
    run_program(lower_uop(kernel, XEON), [out, a], flags=native_flags())
    want = np.zeros(m, np.float32)
    for column in a.T:  # in order, one float32 rounding per add
        want += column
    np.testing.assert_array_equal(out, want)


def test_a_gathered_batched_product_threads_its_batch_not_its_panels() -> None:
    """q @ k^T (96 heads of 128x64, keys read along the reduction): no panel stays in cache, so each thread takes
    whole heads; the same shape read plainly has row blocks, and threads its batch too (each thread its own heads'
    row blocks); with too few rows for two blocks it keeps the threads on its panels."""
    assert choose_opts(batched(96, 128, 64, 128, True), XEON)[-1] == Opt(T, 0, 2)
    assert choose_opts(batched(96, 128, 64, 128, False), XEON)[-2:] == [Opt(TILE, 1, 16), Opt(T, 0, 2)]
    assert choose_opts(batched(96, 64, 64, 128, False), XEON)[-1] == Opt(T, 2, 2)
    assert_heuristic_is_exact(batched(6, 32, 16, 64, True))


@pytest.mark.parametrize("kernel", [matmul(256, 64, 128), batched(2, 128, 32, 64, False)], ids=["square", "batched"])
def test_row_blocks_run_inside_the_panel_loop_and_change_no_bit(kernel: UOp) -> None:
    opts = choose_opts(kernel, XEON)
    assert any(o.op is TILE for o in opts)
    source = assert_heuristic_is_exact(kernel)
    loops = [line.strip() for line in source.splitlines() if line.strip().startswith("for (long long ridx")]
    assert "omp parallel for" in source and len(loops) >= 3


@settings(max_examples=20, deadline=None)
@given(m=st.sampled_from([1, 3, 4, 12, 20, 64]), k=st.sampled_from([1, 5, 16, 96, 256]),
       n=st.sampled_from([1, 7, 16, 48, 80, 128]))
def test_matmul_any_shape_is_exact(m: int, k: int, n: int) -> None:
    got, _ = outputs(matmul(m, k, n), XEON, None, seed=m + n)
    plain, _ = outputs(matmul(m, k, n), XEON, [], seed=m + n)
    np.testing.assert_array_equal(got, plain)
    rng = np.random.default_rng(m + n)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in (m * k, k * n))
    np.testing.assert_allclose(got, (a.reshape(m, k) @ b.reshape(k, n)).ravel(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("batch", "m", "k", "n"), [(3, 32, 24, 64), (2, 16, 64, 48), (5, 12, 8, 16)])
def test_batched_and_transposed_layouts_are_exact(batch: int, m: int, k: int, n: int, transposed: bool) -> None:
    assert_heuristic_is_exact(batched(batch, m, k, n, transposed))


def test_big_blocked_matmul_is_exact() -> None:
    kernel = matmul(64, 2048, 256)
    assert any(o.op is B for o in choose_opts(kernel, SMALL))
    assert_heuristic_is_exact(kernel, SMALL)


@pytest.mark.parametrize(("cout", "cin", "width"), [(8, 8, 56), (8, 4, 32), (12, 3, 24)])
def test_padded_window_loads_a_vector_with_a_gate_per_lane(cout: int, cin: int, width: int) -> None:
    kernel = conv1d(cout, cin, width)
    source = assert_heuristic_is_exact(kernel)
    assert " else v" in source  # the border: lane by lane, each gated
    got, _ = outputs(kernel, XEON, None)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(cin * width).astype(np.float32), rng.standard_normal(cout * cin * 3).astype(np.float32)
    padded = np.pad(x.reshape(cin, width), ((0, 0), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, 3, axis=1)  # (cin, width, 3)
    expected = np.einsum("cps,ocs->op", windows, w.reshape(cout, cin, 3))
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("cout", "cin", "width"), [(16, 8, 56), (32, 4, 14), (64, 3, 24), (16, 5, 10)])
def test_narrow_rows_take_output_channels_as_lanes(cout: int, cin: int, width: int) -> None:
    # rows whose widest vector is narrower than the target's (56 = 7 x 8 floats) take the lanes along the output
    # channels instead: the weight is read along them (strided: gathered, packed where reread, test_pack.py), the
    # input is a broadcast per row of the tile, and each accumulator's 16 lanes are stored one by one at the end
    kernel = conv1d(cout, cin, width)
    opts = choose_opts(kernel, XEON)
    assert opts[0] == Opt(U, 0, 16), opts
    source = assert_heuristic_is_exact(kernel)
    assert "[15];" in source  # lane 15 of a vector, stored alone
    got, _ = outputs(kernel, XEON, None)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(cin * width).astype(np.float32), rng.standard_normal(cout * cin * 3).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x.reshape(cin, width), ((0, 0), (1, 1))), 3, axis=1)
    np.testing.assert_allclose(got, np.einsum("cps,ocs->op", windows, w.reshape(cout, cin, 3)).ravel(),
                               rtol=1e-4, atol=1e-4)


def test_rows_as_wide_as_a_vector_keep_their_lanes() -> None:
    assert choose_opts(conv1d(16, 8, 64), XEON)[0] == Opt(U, 1, 16)  # 64 = 4 x 16 floats: lanes along the row
    assert choose_opts(conv1d(12, 8, 56), XEON)[0] == Opt(U, 1, 8)  # 16 does not divide 12 output channels


def test_a_weight_gradient_keeps_a_chain_per_window_position() -> None:
    # no output axis takes vectors (3 x 3 window, 12 output channels): each output is one chain of dependent adds
    # over 4 x 8 x 8 terms, so the window's two axes are UPCAST whole, 9 chains interleaved (one alone waits out the
    # add latency at every step)
    kernel = conv2d_weight_grad(4, 12, 16, 8)
    opts = choose_opts(kernel, XEON)
    assert Opt(U, 3, 3) in opts and Opt(U, 2, 3) in opts, opts
    assert_heuristic_is_exact(kernel)


def test_a_weight_gradient_over_16_output_channels_takes_them_as_lanes() -> None:
    # the window's axes take no vectors at all, and only the incoming gradient is read along the output channels:
    # they take the lanes (a gather of the gradient), the window's columns the rows of the tile
    kernel = conv2d_weight_grad(4, 32, 16, 8)
    opts = choose_opts(kernel, XEON)
    assert opts[:2] == [Opt(U, 0, 16), Opt(U, 3, 3)], opts
    assert_heuristic_is_exact(kernel)


def test_an_axis_read_contiguously_may_take_the_lanes_whatever_else_the_load_depends_on() -> None:
    # the pixels of a conv's unfolded input gradient: the incoming gradient is read along them contiguously (vector
    # loads, though it depends on the image too), the weight not at all; the 9 window positions take no vector
    kernel = window_grads(4, 32, 16, 64, 9)
    opts = choose_opts(kernel, XEON)
    assert opts[0] == Opt(U, 2, 16), opts
    assert_heuristic_is_exact(kernel)


@pytest.mark.parametrize(("keys", "dim", "unroll"), [(21, 32, 7), (16, 32, 4), (6, 8, 3)])
def test_short_inner_reductions_run_as_interleaved_chains(keys: int, dim: int, unroll: int) -> None:
    # a max over keys of 32-term dot products: the keys' axis is UNROLLed, so several dot products (each its own
    # accumulator, in its own order) are in flight while the max still takes them in key order: same bits
    kernel = max_of_dots(24, keys, dim)
    assert Opt(OptOps.UNROLL, 1, unroll) in choose_opts(kernel, XEON)
    assert_heuristic_is_exact(kernel)
    long_chains = choose_opts(max_of_dots(24, 21, 96), XEON)  # 96 terms keep the adder busy on their own
    assert Opt(OptOps.UNROLL, 1, 7) not in long_chains
