"""The metal renderer, checked on Linux: the source has the Metal program contract's shape, every kernel passes the
MSL lint and clang's syntax and type check against metal_syntax.h (which must also fail on broken kernels), and
every kernel runs through the emulation (metal_emu.h) with the C backend's results: bit for bit where the
accumulation order is the C loop's, within reassociation tolerance where GROUP splits a reduction across threads,
and against exec_alu for every op, cast and bitcast of every dtype Metal has. Nothing here skips.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from cg_kernels import elementwise_add, full_sum, load, loop, matmul, param, reduce_rows, scaled_by_var, sink, store
from cg_run import run_program
from cuda_emu import EmulationError
from metal_emu import MetalEmuLibrary, MetalKernel, check_syntax, lint
from test_alu import INTS, assert_same, binary_ops, np_dtype, sample, to_array, unary_ops
from test_cuda import CASES, Case, _compare, _inputs

from plygrad.codegen import CodegenError, lower_uop
from plygrad.ir import DType, DTypeKind, Ops, Opt, OptOps, Target, UOp, bitcast_value, cast_value, dtypes, exec_alu

# the reference C program contracts sums of products as the GPU targets do (has_fma: docs/ir.md §5), so the two
# agree bit for bit wherever they add in the same order
CPU = Target("CPU", "c", threads=1, has_fma=True)
METAL = Target.metal("apple7")
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32]  # Metal has no float64
G, L = OptOps.GROUP, OptOps.LOCAL
METAL_CASES = [c for c in CASES if c.name != "add_i64"] + [
    Case("add_i64", elementwise_add(dtypes.int64, 300)),
    Case("rows_sum_bf16", reduce_rows(Ops.ADD, dtypes.bfloat16, 4, 256), ((),)),  # the C loop's order: exact
    Case("rows_max_bf16", reduce_rows(Ops.MAX, dtypes.bfloat16, 4, 256), ((), (Opt(G, 1, 16),))),  # any order
]


def _kernel(program: UOp) -> MetalKernel:
    return MetalKernel.from_program(program)


def _programs(case: Case) -> list[UOp]:
    return [lower_uop(case.kernel, METAL, None if opts is None else list(opts)) for opts in case.variants]


# ---- the program contract ------------------------------------------------------------------------------------------
def test_signature_bindings_and_launch_sizes() -> None:
    program = lower_uop(matmul(32, 24, 16), METAL, [Opt(OptOps.UPCAST, 0, 4), Opt(L, 1, 16), Opt(L, 0, 2)])
    source, info = program.src[0].arg, program.arg
    assert source.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert re.search(r"^kernel void matmul\(device float\* data0 \[\[buffer\(0\)\]\], const device float\* data1 "
                     r"\[\[buffer\(1\)\]\], const device float\* data2 \[\[buffer\(2\)\]\], uint3 gid "
                     r"\[\[threadgroup_position_in_grid\]\], uint3 lid \[\[thread_position_in_threadgroup\]\]\) \{$",
                     source, re.M)
    assert info.global_size == (4, 1, 1) and info.local_size == (16, 2, 1)  # as the CUDA launch: groups, threads
    assert "(long)lid.x" in source and "(long)lid.y" in source and "(long)gid.x" in source
    var = lower_uop(scaled_by_var(96), METAL).src[0].arg
    assert "const device float* data1 [[buffer(1)]], constant long& n [[buffer(2)]], uint3 gid" in var


def test_types_are_metal_types() -> None:
    half = lower_uop(elementwise_add(dtypes.float16, 64), METAL, []).src[0].arg
    assert "device half* data0" in half and "plygrad_round_half(" in half
    bf16 = lower_uop(elementwise_add(dtypes.bfloat16, 64), METAL, []).src[0].arg
    assert "device ushort* data0" in bf16 and "plygrad_round_bf16(" in bf16
    wide = lower_uop(elementwise_add(dtypes.int64, 64), METAL, []).src[0].arg
    assert "device long* data0" in wide and "long long" not in wide and "LL" not in wide
    unsigned = lower_uop(elementwise_add(dtypes.uint64, 64), METAL, []).src[0].arg
    assert "device ulong* data0" in unsigned


def test_group_reduce_uses_threadgroup_memory_and_barriers() -> None:
    program = lower_uop(full_sum(4096), METAL, [Opt(G, 0, 256)])
    source = program.src[0].arg
    body = source.split(") {\n", 1)[1]
    assert body.startswith("  threadgroup float smem0[256];\n")  # declared at the top of the kernel
    assert source.count("threadgroup_barrier(mem_flags::mem_threadgroup);") == 1
    assert "if ((long)lid.x == 0) data0[0L] = " in source  # one thread stores the group's result
    assert program.arg.global_size == (1, 1, 1) and program.arg.local_size == (256, 1, 1)


def test_float_arithmetic_is_one_op_per_statement_and_precise() -> None:
    x = param(1, dtypes.float32, 8)
    i = loop(8, 0)
    a = load(x, i)
    value = (a * a + a) / (a + 1.0)
    source = lower_uop(sink(store(param(0, dtypes.float32, 8), i, value.alu(Ops.SQRT))), METAL, []).src[0].arg
    assert "#pragma METAL fp contract(off)" in source and "#pragma METAL fp math_mode(safe)" in source
    assert "metal::precise::divide(" in source and "metal::precise::sqrt(" in source
    for line in source.splitlines():  # every float statement holds one operator: nothing a compiler could fuse
        if line.strip().startswith("float v"):
            assert len(re.findall(r" [-+*] ", line)) <= 1, line


def test_float64_is_refused_naming_the_target() -> None:
    with pytest.raises(CodegenError, match=r"float64.*METAL/metal does not support"):
        lower_uop(elementwise_add(dtypes.float64, 16), METAL)


def _sum_of_inputs(count: int, n: int = 16) -> UOp:
    """out[i] = in_1[i] + ... + in_count[i] * v: `count` buffers and a variable."""
    i = loop(n, 0)
    inputs = [param(k + 1, dtypes.float32, n) for k in range(count)]
    total = load(inputs[0], i)
    for buf in inputs[1:]:
        total = total + load(buf, i)
    scale = UOp.variable("v", 1, 9).cast(dtypes.float32)
    return sink(store(param(0, dtypes.float32, n), i, total * scale))


def test_more_than_31_bindings_take_one_argument_struct() -> None:
    program = lower_uop(_sum_of_inputs(31), METAL, [])  # 32 buffers and a variable
    source = program.src[0].arg
    assert "struct plygrad_args {\n  device float* data0;\n  const device float* data1;\n" in source
    assert "  long v;\n};" in source and "(constant plygrad_args& args [[buffer(0)]], uint3 gid" in source
    assert "  device float* data0 = args.data0;\n" in source and "  long v = args.v;\n" in source
    kernel = _kernel(program)
    assert lint(kernel) == [] and "clang" in check_syntax([kernel])
    rng = np.random.default_rng(3)
    inputs = [rng.uniform(-1, 1, 16).astype(np.float32) for _ in range(31)]
    out = np.zeros(16, np.float32)
    MetalEmuLibrary([kernel]).run(kernel, [out, *inputs], {"v": 3})
    want = np.zeros(16, np.float32)
    for x in inputs:
        want = want + x
    np.testing.assert_array_equal(out, want * np.float32(3))
    direct = lower_uop(_sum_of_inputs(29), METAL, []).src[0].arg  # 30 buffers and a variable: 31 bindings
    assert "plygrad_args" not in direct and "constant long& v [[buffer(30)]]" in direct


def test_renderer_limits_raise_codegen_errors() -> None:
    with pytest.raises(CodegenError, match="need 513 fields of 8 bytes"):
        lower_uop(_sum_of_inputs(511), METAL, [])
    reserved = UOp.variable("gid", 1, 8)
    out, x = param(0, dtypes.float32, 8), param(1, dtypes.float32, 8)
    r = loop(reserved, 0)
    with pytest.raises(CodegenError, match="'gid'"):
        lower_uop(sink(store(out, r, load(x, r))), METAL)
    with pytest.raises(CodegenError, match="threadgroup memory"):
        lower_uop(full_sum(1024), Target("METAL", "metal", has_local=True, has_shared=True, shared_max=64,
                                         supported_dtypes=METAL.supported_dtypes), [Opt(G, 0, 256)])


def test_metal_target_factory() -> None:
    t = Target.metal("apple9")
    assert (t.renderer, t.arch, t.device, t.has_local, t.has_shared) == ("metal", "apple9", "METAL", True, True)
    assert t.shared_max == 32 * 1024 and t.max_threads_per_group == 1024 and t.vector_widths == ()
    assert dtypes.float64 not in t.supported_dtypes and dtypes.bfloat16 in t.supported_dtypes
    assert Target.from_bytes(t.to_bytes()) == t
    with pytest.raises(ValueError, match="apple7"):
        Target.metal("sm_90")


# ---- lint and syntax check: pass on every kernel, fail on broken ones ---------------------------------------------
def _alu_kernel(dt: DType) -> tuple[UOp, list[tuple[Ops, DType]], list[tuple[object, object]]]:
    """Every op of test_alu on `dt`, one output each, over every pair of sample values."""
    pairs = list(itertools.product(sample(dt), repeat=2))
    n = len(pairs)
    bin_ops, un_ops = binary_ops(dt), unary_ops(dt)
    outs = [(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt) for op in [*bin_ops, *un_ops]]
    a, b = param(len(outs), dt, n), param(len(outs) + 1, dt, n)
    i = loop(n, 0)
    stores = [store(param(k, odt, n), i, load(a, i).alu(op, load(b, i)) if op in bin_ops else load(a, i).alu(op))
              for k, (op, odt) in enumerate(outs)]
    return sink(*stores), outs, pairs  # type: ignore[return-value]


def _cast_values(src: DType, bitcast: bool) -> list[object]:
    if bitcast:
        return [v for v in sample(src) if not (isinstance(v, float) and math.isnan(v))]
    if src.kind is DTypeKind.FLOAT:  # in range, beyond every integer's range (wraps), NaN and inf (give 0)
        raw = (0.0, -0.0, 1.5, -1.9, 2.7, 100.3, -100.5, 127.9, 300.7, -40000.5, 3e9, -3e9, 1e19, -1e19, 2.0**63,
               -(2.0**63), 2.0**64, 2.0**70, -(2.0**90), 1e30, -1e30, 65504.0, math.inf, -math.inf, math.nan)
        return [cast_value(v, src) for v in raw]
    return list(sample(src))


def _cast_targets(src: DType, bitcast: bool) -> list[DType]:
    if bitcast:
        return [dt for dt in [*INTS, *FLOATS] if dt.itemsize == src.itemsize and dt is not src]
    return [dtypes.bool, *INTS, *FLOATS]


def _cast_kernel(src: DType, bitcast: bool) -> UOp:
    values, targets = _cast_values(src, bitcast), _cast_targets(src, bitcast)
    a = param(len(targets), src, len(values))
    i = loop(len(values), 0)
    return sink(*[store(param(k, dt, len(values)), i, load(a, i).bitcast(dt) if bitcast else load(a, i).cast(dt))
                  for k, dt in enumerate(targets)])


def _where_mulacc_kernel(dt: DType) -> UOp:
    n = 7**3
    out_w, out_m = param(0, dt, n), param(1, dt, n)
    a, b, c = param(2, dt, n), param(3, dt, n), param(4, dt, n)
    i = loop(n, 0)
    x, y, z = load(a, i), load(b, i), load(c, i)
    return sink(store(out_w, i, (x < y).where(y, z)), store(out_m, i, x.alu(Ops.MULACC, y, z)))


def _threefry_kernel() -> UOp:
    out, c, k = param(0, dtypes.uint64, 16), param(1, dtypes.uint64, 16), param(2, dtypes.uint64, 16)
    i = loop(16, 0)
    return sink(store(out, i, load(c, i).alu(Ops.THREEFRY, load(k, i))))


def _every_kernel() -> list[MetalKernel]:
    kernels = [_kernel(p) for case in METAL_CASES for p in _programs(case)]
    alu = [_alu_kernel(dt)[0] for dt in [dtypes.bool, *INTS, *FLOATS]]
    alu += [_cast_kernel(dt, bitcast=False) for dt in [dtypes.bool, *INTS, *FLOATS]]
    alu += [_cast_kernel(dt, bitcast=True) for dt in [*INTS, *FLOATS]]
    alu += [_where_mulacc_kernel(dt) for dt in [dtypes.int32, dtypes.uint8, *FLOATS]]
    alu.append(_threefry_kernel())
    return kernels + [_kernel(lower_uop(k, METAL, [])) for k in alu]


def test_every_kernel_passes_the_lint_and_the_syntax_check() -> None:
    kernels = _every_kernel()
    assert [p for k in kernels for p in lint(k)] == []
    compiler = check_syntax(kernels)
    assert "clang" in compiler, f"the syntax check should run clang (address spaces), found {compiler}"


_BROKEN = {  # (what is changed in a GROUP reduction's source, what the checker must name)
    "a CUDA barrier": (("threadgroup_barrier(mem_flags::mem_threadgroup);", "__syncthreads();"), "__syncthreads"),
    "a write through const device": (("data0[0L] = ", "data1[0L] = "), "read-only"),
    "a device pointer as a plain one": (("kernel void", "inline float first(const float* p) { return p[0]; }\n"
                                                        "kernel void"), None),
    "an as_type changing the size": (("float v", "float v_ = as_type<float>(1L);\n  float v"), "as_type"),
    "an undeclared math function": (("float v", "float v_ = metal::fast::exp(1.0f);\n  float v"), "fast"),
}


@pytest.mark.parametrize("broken", sorted(_BROKEN))
def test_the_syntax_check_fails_on_a_broken_kernel(broken: str) -> None:
    (old, new), named = _BROKEN[broken]
    program = lower_uop(full_sum(4096), METAL, [Opt(G, 0, 256)])
    source = program.src[0].arg.replace(old, new, 1)
    if broken == "a device pointer as a plain one":  # a call passing a device pointer to the helper
        source = source.replace("float v5 = acc0;", "float v5 = first(data1);", 1)
    assert source != program.src[0].arg
    kernel = MetalKernel(source, program.arg)
    with pytest.raises(EmulationError, match=r"kernel 'r_4096' line \d+") as failure:
        check_syntax([kernel])
    if named is not None:
        assert named in str(failure.value)


def test_the_lint_names_what_metal_lacks() -> None:
    program = lower_uop(scaled_by_var(96), METAL)
    good = program.src[0].arg
    for old, new, named in (("long ridx0", "long long ridx0", "long long"), ("(float)(n)", "(float)(double)(n)",
                                                                              "double"),
                            ("[[buffer(2)]]", "[[buffer(3)]]", "buffer bindings"),
                            ("ridx0 < n", "ridx0 < 5LL", "LL"),
                            ("[[thread_position_in_threadgroup]]", "[[thread_index_in_simdgroup]]", "attributes")):
        problems = lint(MetalKernel(good.replace(old, new, 1), program.arg, ("n",)))
        assert any(named in p for p in problems), (named, problems)
    assert lint(MetalKernel(good, program.arg, ("n",))) == []


# ---- emulated on the CPU, against the C backend ----------------------------------------------------------------------
def test_kernels_emulated_match_the_c_backend() -> None:
    runs = [(case, program) for case in METAL_CASES for program in _programs(case)]
    library = MetalEmuLibrary([_kernel(p) for _, p in runs])
    for n, (case, program) in enumerate(runs):
        buffers, outputs = _inputs(case.kernel, n)
        want = [b.copy() for b in buffers]
        run_program(lower_uop(case.kernel, CPU, []), want, dict(case.variables))
        for reverse in (False, True):  # two interleavings of each threadgroup: a missing barrier shows in one
            got = [b.copy() for b in buffers]
            library.run(_kernel(program), got, dict(case.variables), reverse=reverse)
            for index in outputs:
                _compare(got[index], want[index], case.exact, f"{case.name} {program.arg.opts} output {index}")


def test_a_missing_barrier_gives_a_wrong_result() -> None:
    """The emulation's threadgroup_barrier is a real one: without it, thread 0 (running first) sums the group's
    partial sums before the other threads wrote theirs."""
    program = lower_uop(full_sum(4096), METAL, [Opt(G, 0, 256)])
    good = _kernel(program)
    broken = MetalKernel(good.source.replace("threadgroup_barrier(mem_flags::mem_threadgroup);", "", 1), program.arg)
    assert good.cooperative and not broken.cooperative
    library = MetalEmuLibrary([good, broken])
    x = np.random.default_rng(0).uniform(1.0, 2.0, 4096).astype(np.float32)
    got_good, got_broken = np.zeros(1, np.float32), np.zeros(1, np.float32)
    library.run(good, [got_good, x])
    library.run(broken, [got_broken, x])
    np.testing.assert_allclose(got_good, [x.astype(np.float64).sum()], rtol=1e-5)
    assert not np.isclose(got_broken[0], x.sum(), rtol=1e-3)


# ---- every ALU op, cast and bitcast, emulated, against exec_alu (docs/ir.md §5) -------------------------------------
def test_alu_casts_and_bitcasts_emulated_match_the_reference() -> None:
    checks: list[tuple[UOp, list[np.ndarray], object]] = []
    for dt in [dtypes.bool, *INTS, *FLOATS]:
        kernel, outs, pairs = _alu_kernel(dt)
        bin_ops = binary_ops(dt)

        def check_alu(results: list[np.ndarray], outs: list[tuple[Ops, DType]] = outs, pairs: list = pairs,
                      dt: DType = dt, bin_ops: list[Ops] = bin_ops) -> None:
            for got, (op, odt) in zip(results, outs, strict=True):
                operands = pairs if op in bin_ops else [(x,) for x, _ in pairs]
                expected = [exec_alu(op, odt if odt is not dtypes.bool else dt, o) for o in operands]
                assert_same(got, expected, odt, f"metal {op.name} on {dt.name}",
                            approx=op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW))
        inputs = [to_array([p[0] for p in pairs], dt), to_array([p[1] for p in pairs], dt)]  # type: ignore[misc]
        checks.append((kernel, [*(np.zeros(len(pairs), np_dtype(odt)) for _, odt in outs), *inputs], check_alu))
    for src in [dtypes.bool, *INTS, *FLOATS]:
        for bitcast in (False, True) if src is not dtypes.bool else (False,):
            values, targets = _cast_values(src, bitcast), _cast_targets(src, bitcast)

            def check_cast(results: list[np.ndarray], src: DType = src, bitcast: bool = bitcast,
                           values: list[object] = values, targets: list[DType] = targets) -> None:
                for got, dt in zip(results, targets, strict=True):
                    expected = [bitcast_value(v, src, dt) if bitcast else cast_value(v, dt) for v in values]
                    twice = dt is dtypes.bfloat16 and src.itemsize > 4 and not bitcast  # via float, as the C backend
                    assert_same(got, expected, dt, f"metal {'BITCAST' if bitcast else 'CAST'} {src.name} -> "
                                f"{dt.name}", approx=twice)
            buffers = [*(np.zeros(len(values), np_dtype(dt)) for dt in targets), to_array(values, src)]  # type: ignore[arg-type]
            checks.append((_cast_kernel(src, bitcast), buffers, check_cast))
    for dt in [dtypes.int32, dtypes.uint8, *FLOATS]:
        triples = list(itertools.product(sample(dt)[:7], repeat=3))

        def check_where_mulacc(results: list[np.ndarray], dt: DType = dt, triples: list = triples) -> None:
            got_w, got_m = results
            assert_same(got_w, [t[1] if t[0] < t[1] else t[2] for t in triples], dt, "metal WHERE", approx=False)
            # a fused multiply-add may differ from the IR's double-then-round by an ulp (docs/ir.md §5)
            assert_same(got_m, [exec_alu(Ops.MULACC, dt, t) for t in triples], dt, "metal MULACC",
                        approx=dt.kind is DTypeKind.FLOAT)
        inputs = [to_array([t[k] for t in triples], dt) for k in range(3)]
        checks.append((_where_mulacc_kernel(dt), [np.zeros(len(triples), np_dtype(dt)) for _ in range(2)] + inputs,
                       check_where_mulacc))
    programs = [lower_uop(kernel, METAL, []) for kernel, _, _ in checks]
    library = MetalEmuLibrary([_kernel(p) for p in programs])
    for program, (_, buffers, check) in zip(programs, checks, strict=True):
        check(library.run(_kernel(program), buffers))  # type: ignore[operator]


def test_threefry_emulated_matches_the_reference() -> None:
    rng = np.random.default_rng(1)
    counters = rng.integers(0, 2**63, 16, dtype=np.uint64) * np.uint64(2)
    keys = rng.integers(0, 2**63, 16, dtype=np.uint64)
    program = lower_uop(_threefry_kernel(), METAL, [])
    got = np.zeros(16, np.uint64)
    MetalEmuLibrary([_kernel(program)]).run(_kernel(program), [got, counters, keys])
    expected = [exec_alu(Ops.THREEFRY, dtypes.uint64, (int(x), int(y))) for x, y in zip(counters, keys, strict=True)]
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.uint64))
