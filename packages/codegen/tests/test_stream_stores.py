"""Non-temporal (streamed) stores in the C renderer: whole vectors stored into a big output bypass the caches.

Which stores stream is decided at render time (the output's size against `stream_threshold(target)`); whether
the streamed instruction runs is decided per store when the program runs (the address must be aligned to the
vector's size, else the store is the usual `memcpy`). Both paths must give the bits the plain store gives, on any
alignment, and the programs are compiled with the CPU backend's flags (`-march=native`), where GCC's AVX-512
builtin is what runs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from cg_kernels import binary, load, loop, matmul, param, sink, store
from cg_run import native_flags, run_program
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.codegen import lower_uop
from plygrad.codegen.renderer.c import stream_threshold
from plygrad.ir import Ops, Opt, OptOps, Target, UOp, dtypes

WIDTHS = ((dtypes.float32, (4, 8, 16)), (dtypes.float64, (2, 4, 8)), (dtypes.int32, (4, 8, 16)))
# streams from 4 * 1 thread * 1 KiB = 4 KiB of output
SMALL_CACHES = Target("CPU", "c", threads=1, vector_widths=WIDTHS, cache_sizes=(1024, 1024))
NO_STREAM = Target("CPU", "c", threads=1, vector_widths=WIDTHS, cache_sizes=(1 << 30, 1 << 30))


def _run_at(kernel: UOp, target: Target, opts: list[Opt], offset: int, seed: int) -> tuple[list[Any], str]:
    """The kernel's outputs (raw bits), every buffer starting `offset` elements into a larger allocation (so a
    streamed store meets that misalignment), and its source."""
    program = lower_uop(kernel, target, opts)
    rng = np.random.default_rng(seed)
    buffers, outputs = [], []
    for p in program.arg.params:
        dtype = np.dtype(p.dtype.name)
        base = np.zeros(p.size + offset, dtype)[offset:]
        if p.writable:
            outputs.append(base)
        else:
            base[:] = (rng.standard_normal(p.size) * 100).astype(dtype)
        buffers.append(base)
    run_program(program, buffers, openmp=True, flags=native_flags())
    return [o.view(f"u{o.itemsize}").copy() for o in outputs], program.src[0].arg


def test_threshold_is_four_l2_caches_per_thread() -> None:
    assert stream_threshold(SMALL_CACHES) == 4096
    assert stream_threshold(Target("CPU", "c", threads=2, cache_sizes=(48 << 10, 2 << 20, 300 << 20))) == 16 << 20
    assert stream_threshold(Target("CPU", "c", threads=3)) == 12 << 20  # unknown caches: 1 MiB of L2 each


def test_a_big_output_streams_whole_vectors_and_fences_once() -> None:
    _, source = _run_at(binary(Ops.ADD, dtypes.float32, 4096), SMALL_CACHES, [Opt(OptOps.UPCAST, 0, 16)], 0, 0)
    assert source.count("plygrad_stream_float16(&data0[") == 1
    assert source.count("plygrad_sfence();") == 1 and source.rstrip().endswith("plygrad_sfence();\n}")
    assert "__builtin_ia32_movntps512" in source and "__builtin_nontemporal_store" in source


def test_small_outputs_scalar_and_local_stores_do_not_stream() -> None:
    _, small = _run_at(binary(Ops.ADD, dtypes.float32, 512), SMALL_CACHES, [Opt(OptOps.UPCAST, 0, 16)], 0, 0)
    _, scalar = _run_at(binary(Ops.ADD, dtypes.float32, 4096), SMALL_CACHES, [], 0, 0)
    _, default = _run_at(binary(Ops.ADD, dtypes.float32, 4096), NO_STREAM, [Opt(OptOps.UPCAST, 0, 16)], 0, 0)
    for source in (small, scalar, default):
        assert "plygrad_stream" not in source and "sfence" not in source


def test_an_output_the_kernel_reads_back_does_not_stream() -> None:
    """A blocked reduction stores partial sums into its output and loads them in the next block: streamed, each
    block would send the whole output to memory and read it back (matmul 2048: 135 -> 197 GFLOP/s without)."""
    kernel = matmul(32, 64, 64)
    opts = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.BLOCK, 2, 16)]
    got, source = _run_at(kernel, SMALL_CACHES, opts, 0, 1)
    expected, _ = _run_at(kernel, NO_STREAM, [], 0, 1)
    assert re.search(r"__builtin_memcpy\(&v\d+, &data0\[", source)  # the partial sums are loaded back
    assert "plygrad_stream" not in source and "sfence" not in source
    _, unblocked = _run_at(kernel, SMALL_CACHES, opts[:1], 0, 1)  # the same output, stored once: streamed
    assert "plygrad_stream_float16(&data0[" in unblocked
    np.testing.assert_allclose(got[0].view(np.float32), expected[0].view(np.float32), rtol=1e-5, atol=1e-4)


def _scaled_copy(n: int, dtype: Any) -> UOp:
    out, a = param(0, dtype, n), param(1, dtype, n)
    i = loop(n, 0)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i, load(a, i) * UOp.const(dtype, 3)), i)))


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from([dtypes.float32, dtypes.float64, dtypes.int32]), lanes=st.sampled_from([2, 4, 8, 16]),
       blocks=st.integers(1, 300), offset=st.integers(0, 17), seed=st.integers(0, 2**16))
def test_streamed_stores_give_the_plain_stores_bits_at_any_alignment(dtype: Any, lanes: int, blocks: int,
                                                                      offset: int, seed: int) -> None:
    widths = dict(WIDTHS)[dtype]
    if lanes not in widths:
        lanes = widths[-1]
    n = lanes * blocks
    kernel = _scaled_copy(n, dtype)
    opts = [Opt(OptOps.UPCAST, 0, lanes)]
    got, source = _run_at(kernel, SMALL_CACHES, opts, offset, seed)
    expected, plain = _run_at(kernel, NO_STREAM, opts, 0, seed)
    # a whole vector is stored where the plain program stores one (int32 products stay scalar: they wrap)
    streams = (n * dtype.itemsize >= 4096 and lanes * dtype.itemsize in (16, 32, 64)
               and "__builtin_memcpy(&data0[" in plain)
    assert ("plygrad_stream_" in source) == streams and "plygrad_stream_" not in plain
    np.testing.assert_array_equal(got[0], expected[0])
