"""Tensor cores (codegen/tensor_core.py, renderer/cuda_mma.py): the TC action on float16/bfloat16 matmuls for
Target.cuda("sm_80") and ("sm_90"). Every TC kernel compiles to SASS (nvcc -cubin, which runs ptxas on the inline
mma.sync) and runs in the CPU emulation (cuda_emu.h emulates the mma from the PTX ISA's fragment layout, written
there independently of codegen), compared with the C backend and NumPy. Neither check skips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from cg_kernels import load, loop, matmul, param, red, reduce_rows, sink, softmax_like, store
from cg_run import run_program
from cuda_emu import CudaKernel, EmuLibrary, compile_cubins, cubin_symbols
from hypothesis import given, settings
from hypothesis import strategies as st

import plygrad.codegen.renderer.cuda as cuda_renderer
import plygrad.codegen.tensor_core as tensor_core
from plygrad.codegen import OptError, apply_opts, choose_opts, lower_uop
from plygrad.codegen.tensor_core import LAYOUTS, FragmentLayout
from plygrad.ir import AxisType, DType, Ops, Opt, OptOps, Target, TensorCore, UOp, dtypes

CPU = Target("CPU", "c", threads=1)
SM80, SM90 = Target.cuda("sm_80"), Target.cuda("sm_90")
F16, BF16, F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
TC, UPCAST, LOCAL, UNROLL, GROUP = OptOps.TC, OptOps.UPCAST, OptOps.LOCAL, OptOps.UNROLL, OptOps.GROUP
LAYOUT_NAMES = ("plain", "b_transposed", "batched")
EMULATED_EXAMPLES = max(4, settings().max_examples // 3)  # each example builds an emulation library


# ---- kernels as the frontend writes them: float32 sums of products of cast 16-bit loads ---------------------------
def half_matmul(m: int, k: int, n: int, dtype: DType = F16, layout: str = "plain", batch: int = 2) -> UOp:
    """out[(b,) i, j] = sum_r float(a[(b,) i, r]) * float(b[(b,) r, j]) (b[j, r] for "b_transposed")."""
    batches = batch if layout == "batched" else 1
    out, a, b = param(0, F32, batches * m * n), param(1, dtype, batches * m * k), param(2, dtype, batches * k * n)
    i, j, r = loop(m, 1), loop(n, 2), red(k, 3)
    z = loop(batches, 0) if layout == "batched" else UOp.const(dtypes.index, 0)
    b_index = j * k + r if layout == "b_transposed" else r * n + j
    product = load(a, z * (m * k) + i * k + r).cast(F32) * load(b, z * (k * n) + b_index).cast(F32)
    total = UOp(Ops.REDUCE, F32, (product, r), Ops.ADD)
    ranges = (z, i, j) if layout == "batched" else (i, j)
    return sink(UOp(Ops.END, dtypes.void, (store(out, z * (m * n) + i * n + j, total), *ranges)), name="hmm")


def linear_layer(m: int, k: int, n: int) -> UOp:
    """out[i, j] = half(sum_r x[i, r] * w[j, r] + bias[j]): an epilogue on the sum, stored as float16."""
    out, x, w, bias = param(0, F16, m * n), param(1, F16, m * k), param(2, F16, n * k), param(3, F16, n)
    i, j, r = loop(m, 0), loop(n, 1), red(k, 2)
    product = load(x, i * k + r).cast(F32) * load(w, j * k + r).cast(F32)
    total = UOp(Ops.REDUCE, F32, (product, r), Ops.ADD) + load(bias, j).cast(F32)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, total.cast(F16)), i, j)), name="linear")


def _np(dtype: DType) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dtype is BF16 else np.dtype(dtype.name)


def _buffers(kernel: UOp, seed: int) -> list[np.ndarray]:
    """Zeroed outputs and random inputs in [-2, 2) for every parameter (index order)."""
    rng = np.random.default_rng(seed)
    params = lower_uop(kernel, CPU, []).arg.params
    return [np.zeros(p.size, _np(p.dtype)) if p.writable else rng.uniform(-2, 2, p.size).astype(_np(p.dtype))
            for p in params]


def _numpy_matmul(m: int, k: int, n: int, layout: str, buffers: list[np.ndarray]) -> np.ndarray:
    a = buffers[1].astype(np.float32).reshape(-1, m, k)
    b = buffers[2].astype(np.float32).reshape(-1, n, k).transpose(0, 2, 1) if layout == "b_transposed" \
        else buffers[2].astype(np.float32).reshape(-1, k, n)
    return (a @ b).reshape(-1)


def _assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    # products of 16-bit floats are exact in float32 and the sums are float32 ones: only the order may differ
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-3, err_msg=what)


def _emulate(kernel: UOp, programs: list[UOp], seed: int,
             numpy_reference: Callable[[list[np.ndarray]], np.ndarray] | None = None) -> None:
    """Run each program in the emulation (both thread orders) and compare its output with the C backend's, and
    with `numpy_reference` when given."""
    library = EmuLibrary([CudaKernel.from_program(p) for p in programs])
    buffers = _buffers(kernel, seed)
    want = [b.copy() for b in buffers]
    run_program(lower_uop(kernel, CPU, []), want)
    for program in programs:
        for reverse in (False, True):
            got = [b.copy() for b in buffers]
            library.run(CudaKernel.from_program(program), got, reverse=reverse)
            what = f"{program.arg.name} opts={program.arg.opts} reverse={reverse}"
            _assert_close(got[0], want[0], f"{what}: against the C backend")
            if numpy_reference is not None:
                _assert_close(got[0], numpy_reference(buffers), f"{what}: against NumPy")


# ---- the targets and the fragment layout -----------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90", "sm_90a", "sm_100"])
def test_cuda_targets_from_sm80_list_float16_and_bfloat16_tensor_cores(arch: str) -> None:
    cores = Target.cuda(arch).tensor_cores
    assert cores == (TensorCore((16, 8, 16), F16, F32, 32), TensorCore((16, 8, 16), BF16, F32, 32))
    assert Target.from_bytes(Target.cuda(arch).to_bytes()).tensor_cores == cores


@pytest.mark.parametrize("arch", ["sm_70", "sm_75"])
def test_cuda_targets_before_sm80_have_no_tensor_cores(arch: str) -> None:
    assert Target.cuda(arch).tensor_cores == ()


def test_each_fragment_layout_covers_its_tile_once() -> None:
    layout = LAYOUTS[(16, 8, 16), 32]
    for position, count, shape in ((layout.a, 8, (16, 16)), (layout.b, 4, (16, 8)), (layout.c, 4, (16, 8))):
        seen = [position(lane >> 2, lane % 4, i) for lane in range(32) for i in range(count)]
        assert sorted(seen) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]
    # spot checks against the PTX ISA's table: lane 5 is group 1, member 1
    assert layout.a(1, 1, 2) == (9, 2) and layout.a(1, 1, 5) == (1, 11)
    assert layout.b(1, 1, 3) == (11, 1) and layout.c(1, 1, 3) == (9, 3)


# ---- compiled for sm_80 and sm_90, emulated against the C backend and NumPy ------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    kernel: UOp
    variants: tuple[tuple[Opt, ...] | None, ...]  # None: the heuristic (which picks TC)
    reference: Callable[[list[np.ndarray]], np.ndarray] | None = None


def _matmul_case(m: int, k: int, n: int, dtype: DType, layout: str, variants: tuple[tuple[Opt, ...] | None, ...]
                 ) -> Case:
    return Case(f"{dtype.name}_{layout}_{m}x{k}x{n}", half_matmul(m, k, n, dtype, layout), variants,
                lambda buffers: _numpy_matmul(m, k, n, layout, buffers))


def _cases() -> list[Case]:
    tc0, tc1 = Opt(TC, 3, 0), Opt(TC, 3, 1)
    return [
        _matmul_case(32, 48, 24, F16, "plain", (None, (tc0,), (tc0, Opt(UNROLL, 3, 3)))),
        _matmul_case(64, 64, 32, F16, "b_transposed", (None, (tc0, Opt(UPCAST, 1, 4), Opt(LOCAL, 2, 4)))),
        _matmul_case(16, 32, 16, F16, "batched", (None, (tc0, Opt(LOCAL, 0, 2)))),
        _matmul_case(32, 32, 16, BF16, "plain", (None, (tc1, Opt(UNROLL, 3, 2)))),
        _matmul_case(48, 16, 8, BF16, "b_transposed", ((tc1,),)),
        _matmul_case(32, 64, 16, BF16, "batched", (None, (tc1, Opt(GROUP, 3, 2)))),
        Case("linear", linear_layer(32, 32, 16), (None, (Opt(TC, 2, 0),))),
    ]


def test_tensor_core_kernels_compile_to_sass_and_match_when_emulated() -> None:
    cases = _cases()
    kernels: dict[str, CudaKernel] = {}
    for case in cases:
        for target in (SM80, SM90):
            for opts in case.variants:
                program = lower_uop(case.kernel, target, None if opts is None else list(opts))
                assert program.arg.opts[0].op is TC, (case.name, program.arg.opts)
                assert program.arg.local_size[0] == 32  # the lanes of a warp are threadIdx.x
                kernels[program.src[0].arg] = CudaKernel.from_program(program)
    cubins = compile_cubins(list(kernels.values()), ("sm_80", "sm_90"))
    names = {k.info.name for k in kernels.values()}
    for arch, cubin in cubins.items():
        symbols = cubin_symbols(cubin)
        assert {n for n in names if not any(s == n or s.startswith(f"{n}_") for s in symbols)} == set(), arch
    for seed, case in enumerate(cases):
        programs = [lower_uop(case.kernel, SM90, None if opts is None else list(opts)) for opts in case.variants]
        _emulate(case.kernel, programs, seed, case.reference)


_TILE_MULTIPLES = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)).map(
    lambda t: (16 * t[0], 8 * t[1], 16 * t[2]))
_ANY_SIZES = st.tuples(st.integers(1, 40), st.integers(1, 24), st.integers(1, 40))


@settings(max_examples=EMULATED_EXAMPLES)
@given(shape=st.one_of(_TILE_MULTIPLES, _ANY_SIZES), dtype=st.sampled_from([F16, BF16]),
       layout=st.sampled_from(LAYOUT_NAMES), seed=st.integers(0, 1000))
def test_16_bit_matmuls_of_any_shape_emulated_match_numpy(shape: tuple[int, int, int], dtype: DType, layout: str,
                                                          seed: int) -> None:
    """Tile multiples get tensor cores from the heuristic (and TC alone is checked too); other shapes the plain
    GPU lowering. Either way the emulated program matches the C backend and NumPy."""
    m, n, k = shape
    kernel = half_matmul(m, k, n, dtype, layout)
    chosen = choose_opts(kernel, SM90)
    variants = [chosen]
    if m % 16 == 0 and n % 8 == 0 and k % 16 == 0:
        assert chosen[0] == Opt(TC, 3, 0 if dtype is F16 else 1)
        variants.append(chosen[:1])
    else:
        assert all(o.op is not TC for o in chosen)
    programs = [lower_uop(kernel, SM90, opts) for opts in variants]
    _emulate(kernel, programs, seed, lambda buffers: _numpy_matmul(m, k, n, layout, buffers))


@given(m=st.integers(1, 70), n=st.integers(1, 40), k=st.integers(1, 70), dtype=st.sampled_from([F16, BF16]),
       layout=st.sampled_from(LAYOUT_NAMES))
def test_tc_applies_exactly_when_the_tiles_divide(m: int, n: int, k: int, dtype: DType, layout: str) -> None:
    kernel = half_matmul(m, k, n, dtype, layout)
    opt = Opt(TC, 3, 0 if dtype is F16 else 1)
    divides = m % 16 == 0 and n % 8 == 0 and k % 16 == 0
    heuristic = choose_opts(kernel, SM80)
    assert (heuristic[:1] == [opt]) == divides
    if divides:
        kernel_after = apply_opts(kernel, [opt], SM80)
        assert sum(x.op is Ops.WMMA for x in kernel_after.toposort) == 1
        lanes = [x for x in kernel_after.toposort if x.op is Ops.RANGE and x.arg[1] is AxisType.LOCAL]
        assert [int(x.src[0].arg) for x in lanes] == [32]
    else:
        with pytest.raises(OptError, match="multiples of the tensor core's tile"):
            apply_opts(kernel, [opt], SM80)


# ---- what TC refuses, and what the heuristic picks -------------------------------------------------------------------
def _half_accumulating_matmul() -> UOp:
    """A float16 matmul that sums in float16: no tensor core here accumulates float16."""
    return matmul(32, 32, 16, F16)


def _max_of_products() -> UOp:
    out, a, b = param(0, F32, 16 * 16), param(1, F16, 16 * 16), param(2, F16, 16 * 16)
    i, j, r = loop(16, 0), loop(16, 1), red(16, 2)
    value = load(a, i * 16 + r).cast(F32) * load(b, r * 16 + j).cast(F32)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * 16 + j, UOp(Ops.REDUCE, F32, (value, r), Ops.MAX)), i, j)))


def _store_ignoring_a_tile_axis() -> UOp:
    """out[i] = sum_r a[i, r] * b[r, j] for every j: the lanes of one row would race on one address."""
    out, a, b = param(0, F32, 16), param(1, F16, 16 * 16), param(2, F16, 16 * 8)
    i, j, r = loop(16, 0), loop(8, 1), red(16, 2)
    value = load(a, i * 16 + r).cast(F32) * load(b, r * 8 + j).cast(F32)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i, UOp(Ops.REDUCE, F32, (value, r), Ops.ADD)), i, j)))


@pytest.mark.parametrize(("kernel", "opt", "target", "message"), [
    (lambda: half_matmul(32, 32, 16), Opt(TC, 3, 0), Target.cuda("sm_75"), "needs a target with tensor cores"),
    (lambda: half_matmul(32, 32, 16), Opt(TC, 3, 0), CPU, "needs a target with tensor cores"),
    (lambda: half_matmul(32, 32, 16), Opt(TC, 3, 2), SM80, "amount selects one of the target's tensor cores"),
    (lambda: half_matmul(32, 32, 16), Opt(TC, 3, 1), SM80, r"two dtypes.bfloat16 values"),
    (lambda: half_matmul(32, 32, 16), Opt(TC, 1, 0), SM80, "over the REDUCE axis 1 alone"),
    (lambda: half_matmul(32, 24, 16), Opt(TC, 3, 0), SM80, r"K=24 must be multiples"),
    (lambda: half_matmul(24, 32, 16), Opt(TC, 3, 0), SM80, r"M=24 \(axis 1\)"),
    (lambda: matmul(32, 32, 16, F32), Opt(TC, 2, 0), SM80, r"two dtypes.float16 values"),
    (_half_accumulating_matmul, Opt(TC, 2, 0), SM80, "the sum is dtypes.float16"),
    (_max_of_products, Opt(TC, 2, 0), SM80, "must be an ADD"),
    (lambda: reduce_rows(Ops.ADD, F32, 16, 32), Opt(TC, 1, 0), SM80, "product of two"),
    (lambda: softmax_like(16, 32), Opt(TC, 1, 0), SM80, "exactly one REDUCE"),
    (_store_ignoring_a_tile_axis, Opt(TC, 2, 0), SM80, "every store must be indexed by both tile axes"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_tc_raises_opt_error_where_it_does_not_apply(kernel: Callable[[], UOp], opt: Opt, target: Target,
                                                     message: str) -> None:
    with pytest.raises(OptError, match=message):
        apply_opts(kernel(), [opt], target)


def test_tc_after_a_split_of_the_reduce_axis_is_refused() -> None:
    with pytest.raises(OptError, match="apply TC before other actions on the reduce axis"):
        apply_opts(half_matmul(32, 32, 16), [Opt(UNROLL, 3, 2), Opt(TC, 3, 0)], SM80)


def test_heuristic_uses_tensor_cores_for_16_bit_matmuls_only() -> None:
    assert choose_opts(half_matmul(64, 64, 64), SM90) == [
        Opt(TC, 3, 0), Opt(UPCAST, 1, 2), Opt(UPCAST, 2, 2), Opt(LOCAL, 1, 2), Opt(LOCAL, 2, 2)]
    assert choose_opts(half_matmul(64, 64, 64, BF16), SM80)[0] == Opt(TC, 3, 1)
    for kernel, target in ((matmul(64, 64, 64, F32), SM90), (half_matmul(64, 64, 64), Target.cuda("sm_75")),
                           (half_matmul(64, 64, 60), SM90), (_half_accumulating_matmul(), SM90)):
        assert all(o.op is not TC for o in choose_opts(kernel, target)), (kernel.arg, target.arch)


# ---- the rendered program --------------------------------------------------------------------------------------------
def test_rendered_source_runs_the_tile_through_inline_ptx() -> None:
    program = lower_uop(half_matmul(32, 64, 16), SM80, [Opt(TC, 3, 0)])
    source = program.src[0].arg
    assert "#include" not in source
    assert "#ifndef plygrad_mma_m16n8k16_f32_f16" in source
    assert 'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}' in source
    # the k loop accumulates in the instruction (no float adds), the fragments go in as the bits in memory
    assert source.count("plygrad_mma_m16n8k16_f32_f16(v") == 1 and "__fadd_rn" not in source
    assert "plygrad_half_to_float(" not in source.split('extern "C"')[1]  # the kernel converts nothing
    assert program.arg.global_size == (2, 2, 1) and program.arg.local_size == (32, 1, 1)
    assert program.arg.ops == 2 * 32 * 64 * 16
    bf16 = lower_uop(half_matmul(16, 16, 8, BF16), SM80, [Opt(TC, 3, 1)]).src[0].arg
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in bf16


# ---- the emulation catches what a GPU would do differently --------------------------------------------------------
def _emulated_output(program: UOp, kernel: UOp) -> tuple[np.ndarray, np.ndarray]:
    buffers = _buffers(kernel, 0)
    want = [b.copy() for b in buffers]
    run_program(lower_uop(kernel, CPU, []), want)
    got = [b.copy() for b in buffers]
    EmuLibrary([CudaKernel.from_program(program)]).run(CudaKernel.from_program(program), got)
    return got[0], want[0]


@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_a_wrong_fragment_layout_gives_wrong_results(monkeypatch: pytest.MonkeyPatch, operand: str) -> None:
    """codegen's layout swapped for another that still covers each tile once: the emulation's own layout (the PTX
    ISA's) then disagrees, and the results are wrong."""
    right = LAYOUTS[(16, 8, 16), 32]
    wrong = {"a": lambda g, t, i: right.a(g, t, i ^ 2), "b": lambda g, t, i: right.b(g, t, i ^ 1),
             "c": lambda g, t, i: right.c(g, t, i ^ 2)}[operand]
    monkeypatch.setitem(tensor_core.LAYOUTS, ((16, 8, 16), 32), FragmentLayout(
        right.elements, wrong if operand == "a" else right.a, wrong if operand == "b" else right.b,
        wrong if operand == "c" else right.c))
    kernel = half_matmul(16, 32, 16)
    got, want = _emulated_output(lower_uop(kernel, SM90, [Opt(TC, 3, 0)]), kernel)
    assert not np.allclose(got, want, rtol=1e-3, atol=1e-3)


def test_lanes_that_are_not_a_hardware_warp_give_wrong_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the renderer putting the lanes on threadIdx.x, another LOCAL range comes first: the kernel's lane is
    then not the lane the hardware (and the emulation) counts, and the results are wrong."""
    kernel = half_matmul(16, 16, 32)
    opts = [Opt(TC, 3, 0), Opt(LOCAL, 2, 4)]
    right, _ = _emulated_output(lower_uop(kernel, SM90, opts), kernel)
    monkeypatch.setattr(cuda_renderer, "warp_lanes", lambda linear: set())
    program = lower_uop(kernel, SM90, opts)
    assert program.arg.local_size == (4, 32, 1)
    got, want = _emulated_output(program, kernel)
    _assert_close(right, want, "with the lanes on threadIdx.x")
    assert not np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=False)
