"""The cuda renderer and GPU lowering: every kernel compiles to SASS for sm_80 and sm_90 (nvcc -cubin), and runs on
the CPU through the emulation header (cuda_emu.h: one fiber per GPU thread, real barriers and shared memory)
with the C backend's results: bit for bit where the accumulation order is the C loop's, within reassociation
tolerance where GROUP splits a reduction across threads. Neither check skips: a missing nvcc or g++ fails.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from cg_kernels import (
    broadcast_strided,
    count,
    elementwise_add,
    full_sum,
    gated_store,
    load,
    loop,
    matmul,
    multi_output,
    no_loops,
    padded,
    padded_where,
    param,
    reduce_rows,
    scaled_by_var,
    sink,
    softmax_like,
    store,
    sum_of_maxes,
    variance_shared_range,
)
from cg_run import run_program
from cuda_emu import CudaKernel, EmuLibrary, compile_cubins, cubin_symbols
from test_alu import INTS, assert_same, binary_ops, sample, to_array, unary_ops

from plygrad.codegen import CodegenError, OptError, choose_opts, lower_uop
from plygrad.ir import DType, DTypeKind, Ops, Opt, OptOps, Target, UOp, bitcast_value, cast_value, dtypes, exec_alu

# the reference C program contracts sums of products as the GPU targets do (has_fma: docs/ir.md §5), so the two
# agree bit for bit wherever they add in the same order
CPU = Target("CPU", "c", threads=1, has_fma=True)
SM90, SM80 = Target.cuda("sm_90"), Target.cuda("sm_80")
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
G, L, U = OptOps.GROUP, OptOps.LOCAL, OptOps.UPCAST


@dataclass(frozen=True)
class Case:
    """A kernel, its optimization variants for the GPU (None: the GPU heuristic), and values for its variables."""

    name: str
    kernel: UOp
    variants: tuple[tuple[Opt, ...] | None, ...] = (None, ())
    variables: tuple[tuple[str, int], ...] = ()
    exact: bool = True  # same accumulation order as the C loop (no GROUP): bit-identical results


CASES: list[Case] = [
    Case("add_f32", elementwise_add(dtypes.float32, 1000)),
    Case("add_f16", elementwise_add(dtypes.float16, 512)),
    Case("add_bf16", elementwise_add(dtypes.bfloat16, 512)),
    Case("add_i64", elementwise_add(dtypes.int64, 300)),
    Case("broadcast", broadcast_strided(24, 40), (None, (), (Opt(L, 1, 8), Opt(L, 0, 4)))),
    Case("padded", padded(50, 3, 11)),
    Case("padded_where", padded_where(40, 8)),
    Case("gated_store", gated_store(64, 37)),
    Case("multi_output", multi_output(128)),
    Case("no_loops", no_loops()),
    Case("count", count(600)),
    Case("scaled_by_var", scaled_by_var(96), variables=(("n", 77),)),
    Case("matmul", matmul(32, 24, 16), (None, (), (Opt(U, 0, 4), Opt(L, 1, 16), Opt(L, 0, 2)))),
    Case("matmul_f16", matmul(16, 8, 16, dtypes.float16)),
    Case("rows_sum", reduce_rows(Ops.ADD, dtypes.float32, 8, 512), ((Opt(G, 1, 64),), (Opt(G, 1, 128), Opt(L, 0, 4)),
                                                                    None), exact=False),
    Case("rows_max", reduce_rows(Ops.MAX, dtypes.float32, 6, 300), (None, (), (Opt(G, 1, 4), Opt(L, 0, 2)))),
    Case("rows_sum_int", reduce_rows(Ops.ADD, dtypes.int32, 4, 256), (None, (Opt(G, 1, 32),))),
    Case("rows_sum_f16", reduce_rows(Ops.ADD, dtypes.float16, 4, 256), ((), (Opt(G, 1, 16),)), exact=False),
    Case("full_sum", full_sum(4096), (None, (), (Opt(G, 0, 1024),), (Opt(G, 0, 128), Opt(OptOps.UNROLL, 0, 4))),
         exact=False),
    Case("softmax", softmax_like(4, 256), (None, (), (Opt(G, 1, 16), Opt(G, 2, 32), Opt(L, 3, 8))), exact=False),
    Case("variance", variance_shared_range(4, 512), (None, (Opt(G, 1, 64), Opt(G, 2, 64))), exact=False),
    Case("sum_of_maxes", sum_of_maxes(4, 8, 64), (None, (Opt(G, 2, 16),), (Opt(G, 1, 8),))),
]


def _inputs(kernel: UOp, seed: int) -> tuple[list[np.ndarray], list[int]]:
    """Random inputs and zeroed outputs for every PARAM (index order), and the indices of the outputs."""
    program = lower_uop(kernel, CPU, [])
    rng = np.random.default_rng(seed)
    buffers, outputs = [], []
    for p in program.arg.params:
        dtype = np.dtype(ml_dtypes.bfloat16) if p.dtype is dtypes.bfloat16 else np.dtype(p.dtype.name)
        if p.writable:
            buffers.append(np.zeros(p.size, dtype))
            outputs.append(p.index)
        elif p.dtype.kind is DTypeKind.FLOAT:
            buffers.append(rng.uniform(-2, 2, p.size).astype(dtype))
        else:
            buffers.append(rng.integers(-50, 50, p.size).astype(dtype))
    return buffers, outputs


def _programs(case: Case, target: Target) -> list[UOp]:
    return [lower_uop(case.kernel, target, None if opts is None else list(opts)) for opts in case.variants]


# ---- every kernel compiles for sm_80 and sm_90 -----------------------------------------------------------------------
def _alu_kernels() -> list[UOp]:
    """One kernel per dtype with every op of test_alu, every cast and bitcast, WHERE/MULACC, THREEFRY."""
    kernels = [_alu_kernel(dt)[0] for dt in [dtypes.bool, *INTS, *FLOATS]]
    kernels += [_cast_kernel(dt, bitcast=False) for dt in [dtypes.bool, *INTS, *FLOATS]]
    kernels += [_cast_kernel(dt, bitcast=True) for dt in [*INTS, *FLOATS]]
    kernels += [_where_mulacc_kernel(dt) for dt in [dtypes.int32, dtypes.uint8, *FLOATS]]
    out, c, k = param(0, dtypes.uint64, 16), param(1, dtypes.uint64, 16), param(2, dtypes.uint64, 16)
    i = loop(16, 0)
    kernels.append(sink(store(out, i, load(c, i).alu(Ops.THREEFRY, load(k, i)))))
    return kernels


def test_every_kernel_compiles_to_sass_for_sm80_and_sm90() -> None:
    kernels: dict[str, CudaKernel] = {}
    for case in CASES:
        for target in (SM80, SM90):
            for program in _programs(case, target):
                kernels[program.src[0].arg] = CudaKernel.from_program(program)
    for kernel in _alu_kernels():
        program = lower_uop(kernel, SM90, [])
        kernels[program.src[0].arg] = CudaKernel.from_program(program)
    cubins = compile_cubins(list(kernels.values()), ("sm_80", "sm_90"))
    names = {k.info.name for k in kernels.values()}
    for arch, cubin in cubins.items():
        symbols = cubin_symbols(cubin)
        assert {n for n in names if not any(s == n or s.startswith(f"{n}_") for s in symbols)} == set(), arch


# ---- emulated on the CPU, against the C backend ----------------------------------------------------------------------
def _compare(got: np.ndarray, want: np.ndarray, exact: bool, what: str) -> None:
    if exact or (got.dtype.kind not in "fV" and got.dtype != np.dtype(ml_dtypes.bfloat16)):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    rtol = 2e-2 if got.itemsize == 2 else 1e-5
    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=what)


def test_kernels_emulated_match_the_c_backend() -> None:
    runs: list[tuple[Case, UOp]] = [(case, program) for case in CASES for program in _programs(case, SM90)]
    library = EmuLibrary([CudaKernel.from_program(p) for _, p in runs])
    for n, (case, program) in enumerate(runs):
        buffers, outputs = _inputs(case.kernel, n)
        want = [b.copy() for b in buffers]
        run_program(lower_uop(case.kernel, CPU, []), want, dict(case.variables))
        for reverse in (False, True):  # two interleavings of each block's threads: a missing barrier shows in one
            got = [b.copy() for b in buffers]
            library.run(CudaKernel.from_program(program), got, dict(case.variables), reverse=reverse)
            for index in outputs:
                _compare(got[index], want[index], case.exact, f"{case.name} {program.arg.opts} output {index}")


# ---- every ALU op, cast and bitcast, emulated, against exec_alu (docs/ir.md §5) -------------------------------------
def _alu_kernel(dt: DType) -> tuple[UOp, list[tuple[Ops, DType]], list[tuple[object, object]]]:
    pairs = list(itertools.product(sample(dt), repeat=2))
    n = len(pairs)
    bin_ops, un_ops = binary_ops(dt), unary_ops(dt)
    outs = [(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt) for op in [*bin_ops, *un_ops]]
    a, b = param(len(outs), dt, n), param(len(outs) + 1, dt, n)
    i = loop(n, 0)
    stores = [store(param(k, odt, n), i, load(a, i).alu(op, load(b, i)) if op in bin_ops else load(a, i).alu(op))
              for k, (op, odt) in enumerate(outs)]
    return sink(*stores), outs, pairs  # type: ignore[return-value]


def _cast_kernel(src: DType, bitcast: bool) -> UOp:
    values = _cast_values(src, bitcast)
    targets = _cast_targets(src, bitcast)
    a = param(len(targets), src, len(values))
    i = loop(len(values), 0)
    return sink(*[store(param(k, dt, len(values)), i, load(a, i).bitcast(dt) if bitcast else load(a, i).cast(dt))
                  for k, dt in enumerate(targets)])


def _cast_values(src: DType, bitcast: bool) -> list[object]:
    if bitcast:
        return [v for v in sample(src) if not (isinstance(v, float) and math.isnan(v))]
    if src.kind is DTypeKind.FLOAT:
        raw = (0.0, -0.0, 1.5, -1.9, 2.7, 100.3, -100.5, 300.7, -40000.5, 3e9, -3e9, 1e19, -1e19, 2.0**63, 2.0**64,
               1e30, -1e30, 65504.0, math.inf, -math.inf, math.nan)
        return [cast_value(v, src) for v in raw]
    return list(sample(src))


def _cast_targets(src: DType, bitcast: bool) -> list[DType]:
    if bitcast:
        return [dt for dt in [*INTS, *FLOATS] if dt.itemsize == src.itemsize and dt is not src]
    return [dtypes.bool, *INTS, *FLOATS]


def _where_mulacc_kernel(dt: DType) -> UOp:
    n = 7**3
    out_w, out_m = param(0, dt, n), param(1, dt, n)
    a, b, c = param(2, dt, n), param(3, dt, n), param(4, dt, n)
    i = loop(n, 0)
    x, y, z = load(a, i), load(b, i), load(c, i)
    return sink(store(out_w, i, (x < y).where(y, z)), store(out_m, i, x.alu(Ops.MULACC, y, z)))


def _np(dt: DType) -> np.dtype:  # type: ignore[type-arg]
    return np.dtype(ml_dtypes.bfloat16) if dt is dtypes.bfloat16 else np.dtype(dt.name)


def test_alu_casts_and_bitcasts_emulated_match_the_reference() -> None:
    checks: list[tuple[UOp, list[np.ndarray], Callable[[list[np.ndarray]], None]]] = []
    for dt in [dtypes.bool, *INTS, *FLOATS]:
        kernel, outs, pairs = _alu_kernel(dt)
        inputs = [to_array([p[0] for p in pairs], dt), to_array([p[1] for p in pairs], dt)]  # type: ignore[misc]
        bin_ops = binary_ops(dt)

        def check_alu(results: list[np.ndarray], outs: list[tuple[Ops, DType]] = outs, pairs: list = pairs,
                      dt: DType = dt, bin_ops: list[Ops] = bin_ops) -> None:
            for got, (op, odt) in zip(results, outs, strict=True):
                operands = pairs if op in bin_ops else [(x,) for x, _ in pairs]
                expected = [exec_alu(op, odt if odt is not dtypes.bool else dt, o) for o in operands]
                assert_same(got, expected, odt, f"cuda {op.name} on {dt.name}",
                            approx=op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW))
        checks.append((kernel, [*(np.zeros(len(pairs), _np(odt)) for _, odt in outs), *inputs], check_alu))
    for src in [dtypes.bool, *INTS, *FLOATS]:
        for bitcast in (False, True) if src is not dtypes.bool else (False,):
            values, targets = _cast_values(src, bitcast), _cast_targets(src, bitcast)

            def check_cast(results: list[np.ndarray], src: DType = src, bitcast: bool = bitcast,
                           values: list[object] = values, targets: list[DType] = targets) -> None:
                for got, dt in zip(results, targets, strict=True):
                    expected = [bitcast_value(v, src, dt) if bitcast else cast_value(v, dt) for v in values]
                    twice = dt is dtypes.bfloat16 and src.itemsize > 4 and not bitcast  # via float, as the C backend
                    assert_same(got, expected, dt, f"cuda {'BITCAST' if bitcast else 'CAST'} {src.name} -> {dt.name}",
                                approx=twice)
            checks.append((_cast_kernel(src, bitcast),
                           [*(np.zeros(len(values), _np(dt)) for dt in targets), to_array(values, src)],  # type: ignore[arg-type]
                           check_cast))
    programs = [lower_uop(kernel, SM90, []) for kernel, _, _ in checks]
    library = EmuLibrary([CudaKernel.from_program(p) for p in programs])
    for program, (_, buffers, check) in zip(programs, checks, strict=True):
        outputs = library.run(CudaKernel.from_program(program), buffers)
        check(outputs)


# ---- the program contract --------------------------------------------------------------------------------------------
def test_signature_launch_sizes_and_no_headers() -> None:
    program = lower_uop(matmul(32, 24, 16), SM90, [Opt(U, 0, 4), Opt(L, 1, 16), Opt(L, 0, 2)])
    source, info = program.src[0].arg, program.arg
    assert re.search(r'^extern "C" __global__ void __launch_bounds__\(32\) matmul\(float\* __restrict__ data0, '
                     r"const float\* __restrict__ data1, const float\* __restrict__ data2\) \{$", source, re.M)
    # blocks, threads: axis 1 (16) is all LOCAL (x); axis 0 (32) is 4 blocks x 2 threads (y) x 4 upcast rows
    assert info.global_size == (4, 1, 1) and info.local_size == (16, 2, 1)
    assert "#include" not in source
    half = lower_uop(elementwise_add(dtypes.float16, 64), SM90, []).src[0].arg
    assert "#include" not in half and "unsigned short* __restrict__ data0" in half
    var = lower_uop(scaled_by_var(96), SM90)
    assert "const float* __restrict__ data1, long long n) {" in var.src[0].arg  # variables after the buffers
    assert var.arg.global_size == (1, 1, 1)  # a symbolic axis stays a loop in the thread


def test_float_arithmetic_is_never_contracted() -> None:
    source = lower_uop(broadcast_strided(8, 8), SM90, []).src[0].arg
    assert "__fmul_rn(" in source and "__fadd_rn(" in source
    assert not re.search(r"[^_]\b[a-z0-9]+ \* v", source)  # no bare float product a compiler could fuse


def test_group_reduce_uses_shared_memory_and_barriers() -> None:
    program = lower_uop(full_sum(4096), SM90, [Opt(G, 0, 256)])
    source = program.src[0].arg
    assert "__shared__ float smem0[256];" in source and source.count("__syncthreads();") == 1
    assert "if ((long long)threadIdx.x == 0) data0[0LL]" in source  # one thread stores the group's result
    assert program.arg.global_size == (1, 1, 1) and program.arg.local_size == (256, 1, 1)


def test_many_output_axes_share_the_three_grid_dimensions() -> None:
    out, a = param(0, dtypes.float32, 2 * 3 * 4 * 5), param(1, dtypes.float32, 2 * 3 * 4 * 5)
    rs = [loop(s, k) for k, s in enumerate((2, 3, 4, 5))]
    idx = ((rs[0] * 3 + rs[1]) * 4 + rs[2]) * 5 + rs[3]
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, idx, load(a, idx) + 1.0), *rs)))
    program = lower_uop(kernel, SM90, [])
    assert math.prod(program.arg.global_size) == 120
    x = np.arange(120, dtype=np.float32)
    got = np.zeros(120, np.float32)
    EmuLibrary([CudaKernel.from_program(program)]).run(CudaKernel.from_program(program), [got, x])
    np.testing.assert_array_equal(got, x + 1)


def test_stores_in_their_own_loops_are_not_multiplied_into_the_grid() -> None:
    """A kernel writing slices in separate loop nests (a wide cat) launches what the stores share, not the product of
    every nest: 40 slices of 3 elements used to ask for a grid of 3**40 blocks."""
    n, pieces = 3, 40
    out = param(0, dtypes.float32, n * pieces)
    stores = []
    for k in range(pieces):
        r = loop(n, k)
        stores.append(UOp(Ops.END, dtypes.void, (store(out, r + k * n, UOp.const(dtypes.float32, float(k))), r)))
    program = lower_uop(sink(*stores), SM90)
    assert math.prod(program.arg.global_size) * math.prod(program.arg.local_size or (1, 1, 1)) <= n * pieces
    got = np.zeros(n * pieces, np.float32)
    EmuLibrary([CudaKernel.from_program(program)]).run(CudaKernel.from_program(program), [got])
    np.testing.assert_array_equal(got, np.repeat(np.arange(pieces, dtype=np.float32), n))


def test_gpu_heuristic() -> None:
    def opts(kernel: UOp) -> list[Opt]:
        return choose_opts(kernel, SM90)
    assert opts(elementwise_add(dtypes.float32, 1 << 16)) == [Opt(U, 0, 4), Opt(L, 0, 256)]  # float4 per thread
    assert opts(full_sum(1 << 16)) == [Opt(G, 0, 256)]  # one output: the block shares the reduction
    assert opts(reduce_rows(Ops.ADD, dtypes.float32, 4096, 64)) == [Opt(L, 0, 256)]  # short rows: one thread each
    assert Opt(U, 0, 4) in opts(matmul(64, 64, 64))  # 4 rows per thread reuse each column load
    for case in CASES:  # whatever it picks stays within the target's limits
        info = lower_uop(case.kernel, SM90).arg
        assert math.prod(info.local_size) <= SM90.max_threads_per_group


def test_errors_name_the_problem() -> None:
    with pytest.raises(CodegenError, match="nested reductions"):
        lower_uop(sum_of_maxes(4, 8, 64), SM90, [Opt(G, 1, 4), Opt(G, 2, 16)])
    with pytest.raises(CodegenError, match="max_threads_per_group"):
        lower_uop(matmul(64, 8, 64), SM90, [Opt(L, 0, 64), Opt(L, 1, 64)])
    with pytest.raises(CodegenError, match="shared memory"):
        lower_uop(full_sum(1024), Target("NV", "cuda", has_local=True, has_shared=True, shared_max=64),
                  [Opt(G, 0, 256)])
    with pytest.raises(OptError, match="has_local=False"):
        lower_uop(full_sum(1024), CPU, [Opt(G, 0, 256)])
    with pytest.raises(ValueError, match="sm_80"):
        Target.cuda("gfx90a")


def test_cuda_target_factory() -> None:
    t = Target.cuda("sm_80")
    assert (t.renderer, t.arch, t.device, t.has_local, t.has_shared) == ("cuda", "sm_80", "NV", True, True)
    assert t.shared_max == 48 * 1024 and t.max_threads_per_group == 1024
    assert t.vector_widths_for(dtypes.float32) == (2, 4) and t.vector_widths_for(dtypes.float16) == (2, 4, 8)
    assert t.vector_widths_for(dtypes.bool) == ()  # 16 bytes at most per access, no bool vectors
    assert Target.from_bytes(t.to_bytes()) == t
