"""The hip renderer (docs/codegen.md §5.3): header-free HIP for Target.hip(arch). Every kernel compiles to AMDGPU code
objects for gfx90a, gfx942 and gfx1100 (clang-19, hip_emu.compile_code_objects), and runs on the CPU through
hip_emu.h (cuda_emu.h's fibers and barriers, the matrix cores emulated from AMD's lane layouts) with the C backend's
results; every ALU op, cast and bitcast against exec_alu; the transcendentals the program computes itself against
NumPy over wide ranges. Nothing here skips: a missing clang-19, ld.lld-19 or g++ fails.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np
import pytest
from cg_kernels import full_sum, load, loop, matmul, param, scaled_by_var, sink, store
from cg_run import run_program
from cuda_emu import EmulationError
from hip_emu import MACH, HipEmuLibrary, HipKernel, code_object_arch, code_object_kernels, compile_code_objects
from test_alu import INTS, assert_same, binary_ops, to_array
from test_cuda import (
    CASES,
    FLOATS,
    _alu_kernel,
    _alu_kernels,
    _cast_kernel,
    _cast_targets,
    _cast_values,
    _compare,
    _inputs,
    _np,
    _programs,
)
from test_tensor_core import _buffers, _numpy_matmul, half_matmul, linear_layer

import plygrad.codegen.renderer.cuda as cuda_renderer
import plygrad.codegen.tensor_core as tensor_core
from plygrad.codegen import lower_uop
from plygrad.codegen.renderer.cuda_types import HELPERS as CUDA_HELPERS
from plygrad.codegen.renderer.hip_types import respell
from plygrad.codegen.tensor_core import LAYOUTS, FragmentLayout
from plygrad.ir import DType, Ops, Opt, OptOps, Target, TensorCore, UOp, bitcast_value, cast_value, dtypes, exec_alu

# the reference C program contracts sums of products as the GPU targets do (has_fma: docs/ir.md §5), so the two
# agree bit for bit wherever they add in the same order
CPU = Target("CPU", "c", threads=1, has_fma=True)
ARCHS = ("gfx90a", "gfx942", "gfx1100")
GFX1100, GFX942 = Target.hip("gfx1100"), Target.hip("gfx942")
F16, BF16, F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
TC, UPCAST, LOCAL, UNROLL, GROUP = OptOps.TC, OptOps.UPCAST, OptOps.LOCAL, OptOps.UNROLL, OptOps.GROUP
# spellings a hip program must not contain: each needs a HIP header, or is CUDA's
CUDA_WORDS = re.compile(r"#include|__global__|__device__|__shared__|__syncthreads|threadIdx|blockIdx|__launch_bounds__"
                        r"|_rn\(|__[a-z]+_as_[a-z]+\(|\basm\b|\b(?:exp2f|log2f|sinf|powf|sqrtf|fmod|trunc)\(")


def _kernel(program: UOp) -> HipKernel:
    return HipKernel.from_program(program)


# ---- the target --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("arch", "lanes"), [("gfx1100", 32), ("gfx1101", 32), ("gfx90a", 64), ("gfx942", 64),
                                             ("gfx90a:sramecc+:xnack-", 64), ("gfx1030", None), ("gfx906", None)])
def test_hip_targets_list_the_matrix_cores_of_their_arch(arch: str, lanes: int | None) -> None:
    target = Target.hip(arch)
    assert (target.renderer, target.device, target.arch) == ("hip", "AMD", arch.split(":", maxsplit=1)[0])
    assert (target.shared_max, target.max_threads_per_group, target.has_local, target.has_shared) == \
        (64 * 1024, 1024, True, True)
    want = () if lanes is None else (TensorCore((16, 16, 16), F16, F32, lanes), TensorCore((16, 16, 16), BF16, F32,
                                                                                           lanes))
    assert target.tensor_cores == want
    assert Target.from_bytes(target.to_bytes()) == target


@pytest.mark.parametrize("arch", ["sm_90", "gfx", "gfxZ00", "", "900"])
def test_a_hip_arch_must_be_an_isa_name(arch: str) -> None:
    with pytest.raises(ValueError, match="AMD GPU ISA name"):
        Target.hip(arch)


# ---- the program's shape --------------------------------------------------------------------------------------------
def test_the_source_is_header_free_hip() -> None:
    program = lower_uop(full_sum(4096), GFX1100, [Opt(GROUP, 0, 256)])
    source = program.src[0].arg
    assert source.startswith("#pragma clang fp contract(off)\n")
    assert re.search(r'^extern "C" __attribute__\(\(global\)\) __attribute__\(\(amdgpu_flat_work_group_size\(1, '
                     r"256\)\)\) void r_4096\(float\* __restrict__ data0, const float\* __restrict__ data1\) \{$",
                     source, re.M)
    assert "static __attribute__((shared)) float smem0[256];" in source
    assert source.count("__builtin_amdgcn_s_barrier();") == 1 and "__builtin_amdgcn_fence(__ATOMIC_RELEASE" in source
    assert "if ((long long)__builtin_amdgcn_workitem_id_x() == 0) data0[0LL]" in source
    assert program.arg.global_size == (1, 1, 1) and program.arg.local_size == (256, 1, 1)
    for case in CASES:
        for program in _programs(case, GFX1100):
            found = CUDA_WORDS.search(program.src[0].arg)
            assert found is None, f"{case.name}: {found.group(0)!r} in a hip program"


def test_float_arithmetic_is_plain_operators_under_contract_off() -> None:
    source = lower_uop(matmul(16, 8, 16), dataclasses.replace(GFX1100, has_fma=False), []).src[0].arg
    assert "#pragma clang fp contract(off)" in source and re.search(r"\(v\d+ \* v\d+\)", source)
    fused = lower_uop(matmul(16, 8, 16), GFX1100, []).src[0].arg  # a sum of products: one explicit fma per step
    assert re.search(r"__builtin_fmaf\(v\d+, v\d+, v\d+\)", fused) and not re.search(r"\(v\d+ \* v\d+\)", fused)
    var = lower_uop(scaled_by_var(96), GFX1100)
    assert "const float* __restrict__ data1, long long n) {" in var.src[0].arg


def test_every_cuda_helper_respells_without_cuda_words() -> None:
    for name, text in CUDA_HELPERS.items():
        if not name.startswith("plygrad_mma_"):  # inline PTX: the hip renderer has its own matrix-core helpers
            assert CUDA_WORDS.search(respell(text)) is None, name
    with pytest.raises(AssertionError, match="__syncthreads"):  # a CUDA spelling the table does not know
        respell("__device__ inline void wait() { __syncthreads(); }")


# ---- compiled for gfx90a, gfx942 and gfx1100 ---------------------------------------------------------------------
def _tc_kernels() -> list[tuple[UOp, tuple[Opt, ...] | None]]:
    return [(half_matmul(32, 32, 32, F16), None), (half_matmul(32, 64, 48, BF16, "b_transposed"), None),
            (half_matmul(16, 32, 32, F16, "batched"), (Opt(TC, 3, 0),)),
            (half_matmul(64, 32, 64, F16), (Opt(TC, 3, 0), Opt(UPCAST, 1, 2), Opt(LOCAL, 2, 2), Opt(UNROLL, 3, 2))),
            (half_matmul(32, 128, 32, BF16), (Opt(TC, 3, 1), Opt(GROUP, 3, 2))),
            (linear_layer(32, 32, 48), None)]


def test_every_kernel_compiles_to_code_objects_for_three_archs() -> None:
    for arch in ARCHS:
        target = Target.hip(arch)
        kernels: dict[str, HipKernel] = {}
        for case in CASES:
            for program in _programs(case, target):
                kernels[program.src[0].arg] = _kernel(program)
        for kernel in _alu_kernels():
            program = lower_uop(kernel, target, [])
            kernels[program.src[0].arg] = _kernel(program)
        for kernel, opts in _tc_kernels():
            program = lower_uop(kernel, target, None if opts is None else list(opts))
            kernels[program.src[0].arg] = _kernel(program)
        code_object = compile_code_objects(list(kernels.values()), (arch,))[arch]
        assert code_object_arch(code_object) == MACH[arch]
        symbols = code_object_kernels(code_object)
        names = {k.info.name for k in kernels.values()}
        assert {n for n in names if not any(s == n or s.startswith(f"{n}_") for s in symbols)} == set(), arch


def test_matrix_core_kernels_use_the_arch_instruction() -> None:
    """WMMA for gfx1100 and MFMA for gfx942, and a helper a code object for the other family cannot hold."""
    for target, helper in ((GFX1100, "plygrad_wmma_f32_16x16x16_f16_w32("), (GFX942, "plygrad_mfma_f32_16x16x16_f16(")):
        program = lower_uop(half_matmul(16, 16, 16), target, [Opt(TC, 3, 0)])
        assert helper in program.src[0].arg
        assert program.arg.local_size == (target.tensor_cores[0].threads, 1, 1)
        assert program.arg.ops == 2 * 16 * 16 * 16
    wmma = lower_uop(half_matmul(16, 16, 16), GFX1100, [Opt(TC, 3, 0)])
    with pytest.raises(EmulationError, match="clang failed for gfx90a"):
        compile_code_objects([_kernel(wmma)], ("gfx90a",))


# ---- emulated on the CPU, against the C backend --------------------------------------------------------------------
@pytest.mark.parametrize("target", [GFX1100, GFX942], ids=["gfx1100", "gfx942"])
def test_kernels_emulated_match_the_c_backend(target: Target) -> None:
    runs = [(case, program) for case in CASES for program in _programs(case, target)]
    library = HipEmuLibrary([_kernel(p) for _, p in runs])
    for n, (case, program) in enumerate(runs):
        buffers, outputs = _inputs(case.kernel, n)
        want = [b.copy() for b in buffers]
        run_program(lower_uop(case.kernel, CPU, []), want, dict(case.variables))
        for reverse in (False, True):
            got = [b.copy() for b in buffers]
            library.run(_kernel(program), got, dict(case.variables), reverse=reverse)
            for index in outputs:
                _compare(got[index], want[index], case.exact, f"{case.name} {program.arg.opts} output {index}")


def test_alu_casts_and_bitcasts_emulated_match_the_reference() -> None:
    checks: list[tuple[UOp, list[np.ndarray], Callable[[list[np.ndarray]], None]]] = []
    for dt in [dtypes.bool, *INTS, *FLOATS]:
        kernel, outs, pairs = _alu_kernel(dt)
        inputs = [to_array([p[0] for p in pairs], dt), to_array([p[1] for p in pairs], dt)]  # type: ignore[misc]

        def check_alu(results: list[np.ndarray], outs: list[tuple[Ops, DType]] = outs, pairs: list = pairs,
                      dt: DType = dt) -> None:
            for got, (op, odt) in zip(results, outs, strict=True):
                operands = pairs if op in binary_ops(dt) else [(x,) for x, _ in pairs]
                expected = [exec_alu(op, odt if odt is not dtypes.bool else dt, o) for o in operands]
                assert_same(got, expected, odt, f"hip {op.name} on {dt.name}",
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
                    assert_same(got, expected, dt, f"hip {'BITCAST' if bitcast else 'CAST'} {src.name} -> {dt.name}",
                                approx=twice)
            checks.append((_cast_kernel(src, bitcast),
                           [*(np.zeros(len(values), _np(dt)) for dt in targets), to_array(values, src)],  # type: ignore[arg-type]
                           check_cast))
    programs = [lower_uop(kernel, GFX1100, []) for kernel, _, _ in checks]
    library = HipEmuLibrary([_kernel(p) for p in programs])
    for program, (_, buffers, check) in zip(programs, checks, strict=True):
        check(library.run(_kernel(program), buffers))


def _math_kernel(dt: DType, n: int) -> UOp:
    """out_k[i] = op_k(a[i]) for EXP2, LOG2, SIN, and POW(a[i], b[i])."""
    ops = (Ops.EXP2, Ops.LOG2, Ops.SIN)
    a, b = param(4, dt, n), param(5, dt, n)
    i = loop(n, 0)
    stores = [store(param(k, dt, n), i, load(a, i).alu(op)) for k, op in enumerate(ops)]
    stores.append(store(param(3, dt, n), i, load(a, i).alu(Ops.POW, load(b, i))))
    return sink(*stores)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
def test_the_programs_own_transcendentals_match_numpy(dt: DType) -> None:
    """SIN and POW everywhere and EXP2/LOG2 at float64 are the program's own helpers (hip_math.py): float32 within
    an ulp of NumPy's double result rounded, float64 within a few ulp (pow: its documented bound); sin of arguments
    up to the largest finite value (Payne-Hanek), exp2 into the denormals."""
    rng = np.random.default_rng(5)
    n = 4096
    np_dt = np.dtype(dt.name)
    big = np.finfo(np_dt).max
    a = np.concatenate([rng.uniform(-10, 10, n // 4), rng.uniform(-1e6, 1e6, n // 8), rng.uniform(-1e30, 1e30, n // 8),
                        np.array([big, -big, 0.0, -0.0, np.pi, 1e22, 5e-324 if dt is dtypes.float64 else 1e-45]),
                        rng.uniform(-150, 130, n // 4)])
    a = np.resize(a, n).astype(np_dt)
    b = np.resize(np.concatenate([rng.uniform(-4, 4, n // 2), np.round(rng.uniform(-9, 9, n // 2))]), n).astype(np_dt)
    a[::7] = np.abs(a[::7])  # pow of positive bases at every exponent, negative ones at integers and fractions
    program = lower_uop(_math_kernel(dt, n), GFX1100, [])
    buffers = [np.zeros(n, np_dt) for _ in range(4)] + [a, b]
    exp2, log2, sin, pow_ = HipEmuLibrary([_kernel(program)]).run(_kernel(program), buffers)
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        want = [np.exp2(wide_a), np.log2(wide_a), np.sin(wide_a), np.power(wide_a, wide_b)]
    for name, got, reference in zip(("exp2", "log2", "sin", "pow"), (exp2, log2, sin, pow_), want, strict=True):
        with np.errstate(over="ignore"):  # beyond float32's range: inf, as the device rounds it
            expected = reference.astype(np_dt)
        assert np.array_equal(np.isnan(got), np.isnan(expected)), f"{name}: NaN positions"
        ok = np.isfinite(expected) & (np.abs(expected) > np.finfo(np_dt).tiny)
        assert np.array_equal(got[~ok & ~np.isnan(expected)], expected[~ok & ~np.isnan(expected)]), name
        ulps = np.abs(got[ok].astype(np.float64) - expected[ok].astype(np.float64)) / np.spacing(
            np.abs(expected[ok]).astype(np_dt)).astype(np.float64)
        limit = 1 if dt is dtypes.float32 else (200 if name == "pow" else 4)
        assert ulps.max() <= limit, f"{name}: {ulps.max()} ulp at {a[ok][np.argmax(ulps)]!r}"


# ---- matrix cores, emulated with AMD's layouts --------------------------------------------------------------------
def _emulate_against(kernel: UOp, program: UOp, reference: Callable[[list[np.ndarray]], np.ndarray] | None,
                     library: HipEmuLibrary) -> None:
    buffers = _buffers(kernel, 0)
    want = [b.copy() for b in buffers]
    run_program(lower_uop(kernel, CPU, []), want)
    for reverse in (False, True):
        got = [b.copy() for b in buffers]
        library.run(_kernel(program), got, reverse=reverse)
        what = f"{program.arg.name} {program.arg.opts} reverse={reverse}"
        np.testing.assert_allclose(got[0].astype(np.float64), want[0].astype(np.float64), rtol=1e-3, atol=1e-3,
                                   err_msg=f"{what}: against the C backend")
        if reference is not None:
            np.testing.assert_allclose(got[0].astype(np.float64), reference(buffers), rtol=1e-3, atol=1e-3,
                                       err_msg=f"{what}: against NumPy")


@pytest.mark.parametrize("target", [GFX1100, GFX942], ids=["wmma-gfx1100", "mfma-gfx942"])
def test_matrix_core_kernels_emulated_match_numpy_and_the_c_backend(target: Target) -> None:
    kernels = _tc_kernels()
    programs = [lower_uop(k, target, None if opts is None else list(opts)) for k, opts in kernels]
    helper = "plygrad_wmma_" if target is GFX1100 else "plygrad_mfma_"
    assert all(helper in p.src[0].arg for p in programs)
    library = HipEmuLibrary([_kernel(p) for p in programs])
    shapes = [(32, 32, 32, "plain"), (32, 64, 48, "b_transposed"), (16, 32, 32, "batched"), (64, 32, 64, "plain"),
              (32, 128, 32, "plain"), None]
    for (kernel, _), program, shape in zip(kernels, programs, shapes, strict=True):
        reference = None if shape is None else (
            lambda buffers, s=shape: _numpy_matmul(s[0], s[1], s[2], s[3], buffers))
        _emulate_against(kernel, program, reference, library)


@pytest.mark.parametrize(("lanes", "operand"), [(32, "a"), (32, "b"), (32, "c"), (64, "a"), (64, "b"), (64, "c")])
def test_a_wrong_lane_layout_gives_wrong_results(monkeypatch: pytest.MonkeyPatch, lanes: int, operand: str) -> None:
    """codegen's layout for one operand replaced by another: the emulation's own (AMD's) then disagrees."""
    right = LAYOUTS[(16, 16, 16), lanes]

    def swapped(position: tensor_core.Position) -> tensor_core.Position:
        return lambda col, half, i: position(col, half, i ^ 1)  # type: ignore[return-value]

    layout = FragmentLayout(right.elements, swapped(right.a) if operand == "a" else right.a,
                            swapped(right.b) if operand == "b" else right.b,
                            swapped(right.c) if operand == "c" else right.c, right.split)
    monkeypatch.setitem(tensor_core.LAYOUTS, ((16, 16, 16), lanes), layout)
    kernel = half_matmul(16, 32, 16)
    program = lower_uop(kernel, GFX1100 if lanes == 32 else GFX942, [Opt(TC, 3, 0)])
    buffers = _buffers(kernel, 0)
    want = [b.copy() for b in buffers]
    run_program(lower_uop(kernel, CPU, []), want)
    got = [b.copy() for b in buffers]
    HipEmuLibrary([_kernel(program)]).run(_kernel(program), got)
    assert not np.allclose(got[0], want[0], rtol=1e-3, atol=1e-3)


def test_lanes_off_the_wavefront_give_wrong_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the renderer putting the lanes first (workitem x), another LOCAL range comes first: the kernel's lane
    is not the hardware's (nor the emulation's), and the results are wrong."""
    kernel = half_matmul(16, 16, 32)
    opts = [Opt(TC, 3, 0), Opt(LOCAL, 2, 2)]
    monkeypatch.setattr(cuda_renderer, "warp_lanes", lambda linear: set())
    program = lower_uop(kernel, GFX1100, opts)
    assert program.arg.local_size == (2, 32, 1)
    buffers = _buffers(kernel, 0)
    want = [b.copy() for b in buffers]
    run_program(lower_uop(kernel, CPU, []), want)
    got = [b.copy() for b in buffers]
    HipEmuLibrary([_kernel(program)]).run(_kernel(program), got)
    assert not np.allclose(got[0], want[0], rtol=1e-3, atol=1e-3)


def test_each_amd_layout_covers_its_tiles() -> None:
    """A and B once per half-wavefront group (WMMA: lanes 16..31 repeat 0..15), C once."""
    for lanes, copies in ((32, 2), (64, 1)):
        layout = LAYOUTS[(16, 16, 16), lanes]
        for position, count, repeat in ((layout.a, layout.elements[0], copies), (layout.b, layout.elements[1], copies),
                                        (layout.c, layout.elements[2], 1)):
            seen = [position(*layout.split(lane), i) for lane in range(lanes) for i in range(count)]
            assert sorted(seen) == sorted([(r, c) for r in range(16) for c in range(16)] * repeat)
