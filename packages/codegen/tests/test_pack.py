"""Packed panels (pack.py): a vector operand that an inner loop rereads is copied into a contiguous local buffer
first. The copy changes no value: packed kernels give the unoptimized kernel's bits, on one thread and on several
(each OpenMP thread packs into its own buffer)."""

from __future__ import annotations

import dataclasses
import importlib
import re

import numpy as np
import pytest
from cg_kernels import batched, conv1d, conv2d, heads_projection, matmul
from cg_run import native_flags, run_program

from plygrad.codegen import choose_opts, lower_uop
from plygrad.codegen.pack import PACK_BYTES, pack_panels, packed_panel_bytes
from plygrad.ir import Ops, Opt, OptOps, Target, UOp, dtypes

F32 = dtypes.float32
WIDE = ((F32, (2, 4, 8, 16)), (dtypes.float64, (2, 4, 8)))
XEON = Target("CPU", "c", threads=2, vector_widths=WIDE, cache_sizes=(48 << 10, 2 << 20, 260 << 20), has_fma=True)
ONE_CORE = dataclasses.replace(XEON, threads=1)
LOCALS = re.compile(r"\blocal[0-9]+\[")


def run(kernel: UOp, target: Target, opts: list[Opt] | None, inputs: list[np.ndarray]) -> tuple[np.ndarray, str]:
    program = lower_uop(kernel, target, opts)
    out = np.full(program.arg.params[0].size, np.nan, np.float32)
    run_program(program, [out, *inputs], openmp=True, flags=native_flags())
    return out, str(program.src[0].arg)


def inputs_for(kernel: UOp, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = lower_uop(kernel, XEON, []).arg.params
    return [rng.standard_normal(p.size).astype(np.float32) for p in params if not p.writable]


@pytest.mark.parametrize("target", [XEON, ONE_CORE], ids=["two-threads", "one-thread"])
@pytest.mark.parametrize("kernel", [matmul(256, 512, 256), matmul(128, 96, 192), batched(2, 256, 160, 128, False),
                                    batched(2, 128, 256, 128, True), batched(2, 96, 48, 80, True)],
                         ids=["blocked", "unblocked", "batched", "transposed", "transposed-odd"])
def test_a_packed_matmul_gives_the_plain_loops_bits(kernel: UOp, target: Target) -> None:
    inputs = inputs_for(kernel, 0)
    packed, source = run(kernel, target, None, inputs)
    plain, plain_source = run(kernel, target, [], inputs)
    assert LOCALS.search(source), "the heuristic's register tile rereads the panel once per row tile: it is packed"
    assert not LOCALS.search(plain_source), "one loop nest without tiles has nothing to reuse"
    if target.threads > 1:
        assert re.search(r"#pragma omp parallel for private\(local0", source)
    np.testing.assert_array_equal(packed, plain, err_msg=f"opts={choose_opts(kernel, target)}")


def test_the_reduce_block_of_a_packed_panel_fits_the_l1() -> None:
    opts = choose_opts(matmul(1024, 1024, 1024), XEON)
    block = next(o for o in opts if o.op is OptOps.BLOCK)
    columns = 16 * 4  # the 4x4 tile of 16-float vectors
    assert block.amount * columns * 4 <= packed_panel_bytes(XEON) < 2 * block.amount * columns * 4


def test_a_panel_over_the_budget_is_not_packed() -> None:
    # no reduce block: the panel of 4096 steps of four 64-byte vectors is 1 MiB, over PACK_BYTES
    opts = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)]
    kernel = matmul(32, 4096, 64)
    assert PACK_BYTES < 4096 * 64 * 4
    inputs = inputs_for(kernel, 1)
    out, source = run(kernel, ONE_CORE, opts, inputs)
    assert not LOCALS.search(source)
    np.testing.assert_array_equal(out, run(kernel, ONE_CORE, [], inputs)[0])


def test_workgroup_targets_are_left_alone() -> None:
    gpu = Target.cuda("sm_80")
    kernel = lower_uop(matmul(64, 64, 64), gpu)
    assert "local" not in str(kernel.src[0].arg)


def test_a_buffer_the_kernel_writes_is_not_packed() -> None:
    # out[i, j] = sum_r a[i, r] * out[r, j] would read what the kernel writes: packing it could read stale values
    kernel = matmul(64, 64, 64)
    b = next(n for n in kernel.toposort if n.op is Ops.PARAM and n.arg == 2)
    out = next(n for n in kernel.toposort if n.op is Ops.PARAM and n.arg == 0)
    lower_module = importlib.import_module("plygrad.codegen.lower")  # the module: the package exports `lower`
    state = lower_module.Lowering(kernel.substitute({b: out}), ONE_CORE, None)
    for name, step in lower_module.PASSES:
        if name == "pack_panels":
            break
        state = step(state)
    assert pack_panels(state.kernel, ONE_CORE) is state.kernel


def test_a_panel_reused_only_across_threads_is_not_packed() -> None:
    # one panel of 64 columns, the rows threaded: each thread's row tiles meet each (batch, block) panel once, and
    # a pack outside the threads' loop would fill a buffer no thread reads (each has its own)
    kernel = batched(3, 64, 160, 64, False)
    assert any(o.op is OptOps.THREAD and o.axis == 1 for o in choose_opts(kernel, XEON))
    inputs = inputs_for(kernel, 2)
    out, source = run(kernel, XEON, None, inputs)
    assert not LOCALS.search(source)
    np.testing.assert_array_equal(out, run(kernel, XEON, [], inputs)[0])


def test_a_gathered_operand_is_transposed_in_the_pack_loop() -> None:
    # q @ k^T: k is read across its rows along the output's vector axis; the pack loop reads 16 x 16 blocks as rows
    # and transposes them (transpose.py), the row tiles then read contiguous vectors
    source = lower_uop(batched(2, 128, 256, 128, True), XEON).src[0].arg
    loops = source.split("for (")
    pack = next(i for i, body in enumerate(loops) if "local0[" in body and "data2[" in body)
    assert "plygrad_transpose_float16" in loops[pack]
    assert not any("data2[" in body for body in loops[pack + 1:]), "only the pack loop reads the gathered operand"


def test_a_gathered_operand_whose_rows_are_threaded_keeps_the_register_transpose() -> None:
    # 3 heads do not split over 2 threads, so the threads would take the row tiles: nothing inside a thread would
    # reuse a pack, and the tiles stay the transposed ones (8 rows, the reduce loop unrolled by 16)
    kernel = batched(3, 64, 48, 80, True)
    opts = choose_opts(kernel, XEON)
    assert Opt(OptOps.UNROLL, 3, 16) in opts and Opt(OptOps.THREAD, 1, 2) in opts
    inputs = inputs_for(kernel, 3)
    out, source = run(kernel, XEON, None, inputs)
    assert "plygrad_transpose_float16" in source and not LOCALS.search(source)
    np.testing.assert_array_equal(out, run(kernel, XEON, [], inputs)[0])


def test_a_pack_that_no_thread_loop_encloses_is_shared_by_the_threads() -> None:
    # a (K, N) weight of attention's output projection with one panel: the threads split the batch, which the weight
    # does not depend on, so its pack runs once, before the parallel loop, into one buffer every thread reads (a
    # private copy would be uninitialized)
    kernel = heads_projection(2, 9, 4, 16, 64, w_out_in=False)
    inputs = inputs_for(kernel, 4)
    out, source = run(kernel, XEON, None, inputs)
    before, parallel = source.split("#pragma omp parallel for", 1)
    assert "memcpy(&local0[" in before and "private" not in parallel.splitlines()[0]
    np.testing.assert_array_equal(out, run(kernel, XEON, [], inputs)[0])


def test_the_unrolled_copies_of_a_register_transpose_are_not_packed() -> None:
    # 21 rows (< 32) share the gathered weight: the reduce loop is unrolled by 16 and transpose.py reads 16 x 16
    # blocks as rows; packing each copy lane by lane would undo that
    kernel = heads_projection(1, 21, 12, 32, 64)
    inputs = inputs_for(kernel, 5)
    out, source = run(kernel, XEON, None, inputs)
    assert "plygrad_transpose_float16" in source and not LOCALS.search(source)
    np.testing.assert_array_equal(out, run(kernel, XEON, [], inputs)[0])


@pytest.mark.parametrize("target", [XEON, ONE_CORE], ids=["two-threads", "one-thread"])
def test_a_convolution_weight_gathered_along_output_channels_is_packed_lane_by_lane(target: Target) -> None:
    # rows of 28 pixels take the lanes along the output channels (tiles.py): the weight is gathered (its channels
    # 72 floats apart, its 3 x 3 window too short to transpose) and reread by every row tile of every image, so it is
    # packed lane by lane, once per output-channel panel, in each thread's own buffer
    kernel = conv2d(2, 32, 8, 28)
    assert choose_opts(kernel, target)[0] == Opt(OptOps.UPCAST, 1, 16)
    inputs = inputs_for(kernel, 6)
    out, source = run(kernel, target, None, inputs)
    assert LOCALS.search(source)
    pack = next(body for body in source.split("for (") if "local0[" in body and "data2[" in body)
    assert "plygrad_transpose" not in pack
    np.testing.assert_array_equal(out, run(kernel, target, [], inputs)[0])


def test_a_gather_reread_fewer_times_than_its_lanes_is_not_packed() -> None:
    # one row of 56 pixels is 4 row tiles of 14: 4 rereads of a 16-lane gather do not pay for packing it
    kernel = conv1d(16, 8, 56)
    inputs = inputs_for(kernel, 7)
    out, source = run(kernel, XEON, None, inputs)
    assert not LOCALS.search(source)
    np.testing.assert_array_equal(out, run(kernel, XEON, [], inputs)[0])
