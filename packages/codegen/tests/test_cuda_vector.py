"""CUDA vector loads and stores: a contiguous UPCAST axis becomes `plygrad_float4`-style accesses where alignment is
proven (alignment.py), aligned pieces or scalar lanes where it is not, and the GPU heuristic picks the width.

What is checked, without a GPU: which accesses the rendered source makes (vector where the index is provably a
multiple of the width, not after an odd offset, a shrink by one or an odd row length); that those kernels run in the
emulation (cuda_emu.h, which fails a launch on a misaligned vector access) bit for bit like the C backend; that they
compile to cubins for sm_80 and sm_90; that the emulation's alignment check itself catches a misaligned access; and
the heuristic's choices (16 bytes per thread, a workgroup per contiguous row of a long reduction).
"""

from __future__ import annotations

import math
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from cg_kernels import elementwise_add, load, loop, matmul, param, red, reduce_rows, sink, store
from cg_run import run_program
from cuda_emu import CudaKernel, EmulationError, EmuLibrary, compile_cubins, cubin_symbols
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.codegen import choose_opts, lower_uop
from plygrad.codegen.alignment import known_multiple
from plygrad.codegen.renderer.cuda_types import vector_type
from plygrad.ir import DType, DTypeKind, Ops, Opt, OptOps, Target, UOp, dtypes, exec_alu

# the reference C program contracts sums of products as the GPU targets do (has_fma: docs/ir.md §5), so the two
# agree bit for bit wherever they add in the same order
CPU = Target("CPU", "c", threads=1, has_fma=True)
SM90, SM80 = Target.cuda("sm_90"), Target.cuda("sm_80")
G, L, U = OptOps.GROUP, OptOps.LOCAL, OptOps.UPCAST
IDX = dtypes.index
_VECTOR_LOAD = re.compile(r"plygrad_load_\w+\(&")


def _end(value: UOp, *ranges: UOp) -> UOp:
    return UOp(Ops.END, dtypes.void, (value, *ranges))


def strided_copy(dtype: DType, m: int, n: int, stride: int, offset: int) -> UOp:
    """out[i, j] = a[i * stride + offset + j] * 3 for an (m, n) output: a view of `a` with its own row length and
    start (a shrink, a slice of a wider tensor)."""
    out, a = param(0, dtype, m * n), param(1, dtype, m * stride + offset + n)
    i, j = loop(m, 0), loop(n, 1)
    value = load(a, i * stride + offset + j) * UOp.const(dtype, 3)
    return sink(_end(store(out, i * n + j, value), i, j))


def row_padded(m: int, n: int) -> UOp:
    """out = pad(a, rows (1, 1)) + 1: the gate depends on the row only, so it is shared by a vector's lanes."""
    out, a = param(0, dtypes.float32, (m + 2) * n), param(1, dtypes.float32, m * n)
    i, j = loop(m + 2, 0), loop(n, 1)
    inside = (UOp.const(IDX, 0) < i).alu(Ops.AND, i < m + 1)
    return sink(_end(store(out, i * n + j, load(a, (i - 1) * n + j, inside) + 1.0), i, j))


def column_sum(m: int, n: int) -> UOp:
    """out[j] = sum_i a[i, j]: the output axis is the contiguous one."""
    out, a = param(0, dtypes.float32, n), param(1, dtypes.float32, m * n)
    j, i = loop(n, 0), red(m, 1)
    return sink(store(out, j, UOp(Ops.REDUCE, dtypes.float32, (load(a, i * n + j), i), Ops.ADD)))


def _source(kernel: UOp, opts: list[Opt] | None, target: Target = SM90) -> str:
    return str(lower_uop(kernel, target, opts).src[0].arg)


def _calls(source: str, kind: str, dtype: DType, width: int) -> int:
    """How often `source` calls the vector load or store helper of `width` lanes of `dtype`."""
    return source.count(f"plygrad_{kind}_{vector_type(dtype.vec(width))[8:]}(&")


# ---- the alignment proof ---------------------------------------------------------------------------------------------
def test_known_multiple_of_affine_indices() -> None:
    r, s, v = UOp.range(8, 0), UOp.range(5, 1), UOp.variable("n", 1, 64)
    assert known_multiple(r * 8 + s * 4) == 4
    assert known_multiple((r * 64 + s) * 4 + 12) == 4
    assert known_multiple(r * 6 + 3) == 3
    assert known_multiple(r * 8 - 1) == 1
    assert known_multiple(UOp.const(IDX, 0)) == 0  # always zero: a multiple of everything
    assert known_multiple(r.alu(Ops.SHL, UOp.const(IDX, 3))) == 8
    assert known_multiple((r * 12) % 8) == 4
    assert known_multiple((r < 4).where(r * 4, s * 8)) == 4
    assert known_multiple(v * 16) == 16 and known_multiple(v + 16) == 1
    assert known_multiple((r * 16) // 4) == 1  # a division is not looked through: not proven


_LEAF = st.one_of(st.integers(-24, 24).map(lambda c: UOp.const(IDX, c)),
                  st.sampled_from([0, 1]).map(lambda a: UOp.range(4 + a, a)))


def _extend(children: st.SearchStrategy[UOp]) -> st.SearchStrategy[UOp]:
    const = st.integers(1, 12).map(lambda c: UOp.const(IDX, c))
    return st.one_of(
        st.tuples(children, children).map(lambda t: t[0] + t[1]),
        st.tuples(children, children).map(lambda t: t[0] - t[1]),
        st.tuples(children, children).map(lambda t: t[0] * t[1]),
        st.tuples(children, st.integers(0, 4)).map(lambda t: t[0].alu(Ops.SHL, UOp.const(IDX, t[1]))),
        st.tuples(children, const).map(lambda t: t[0] % t[1]),
        st.tuples(children, children, children).map(lambda t: (t[0] < 2).where(t[1], t[2])),
    )


def _evaluate(node: UOp, values: dict[UOp, int]) -> int:
    if node.op is Ops.CONST:
        return int(node.arg)
    if node.op is Ops.RANGE:
        return values[node]
    if node.op is Ops.WHERE:
        chosen = node.src[1] if _evaluate(node.src[0], values) else node.src[2]
        return _evaluate(chosen, values)
    return int(exec_alu(node.op, node.src[0].dtype if node.op is Ops.CMPLT else node.dtype,
                        tuple(_evaluate(s, values) for s in node.src)))


@given(st.recursive(_LEAF, _extend, max_leaves=8))
def test_known_multiple_is_a_proof(index: UOp) -> None:
    """Whatever the expression, every value it takes is a multiple of what the analysis claims."""
    multiple = known_multiple(index)
    ranges = sorted({n for n in index.toposort if n.op is Ops.RANGE}, key=lambda r: int(r.arg[0]))
    sizes = [range(int(r.src[0].arg)) for r in ranges]
    for values in np.ndindex(*[len(s) for s in sizes]) if ranges else [()]:
        value = _evaluate(index, dict(zip(ranges, (int(v) for v in values), strict=True)))
        assert value == 0 if multiple == 0 else value % multiple == 0, (multiple, value)


# ---- which accesses the source makes ---------------------------------------------------------------------------------
def test_aligned_contiguous_axis_is_one_float4_per_operand() -> None:
    source = _source(elementwise_add(dtypes.float32, 1024), [Opt(U, 0, 4), Opt(L, 0, 64)])
    assert "struct alignas(16) plygrad_float4 { float v[4]; };" in source
    assert "__builtin_assume_aligned(p, 16)" in source and "#include" not in source
    assert _calls(source, "load", dtypes.float32, 4) == 2 and _calls(source, "store", dtypes.float32, 4) == 1
    assert "__fadd_rn(" in source  # the arithmetic stays scalar: no vector ALU on a GPU


def test_a_shrink_by_one_loads_scalars_and_still_stores_vectors() -> None:
    source = _source(strided_copy(dtypes.float32, 4, 16, 17, 1), [Opt(U, 1, 4)])
    assert _calls(source, "load", dtypes.float32, 4) == 0 and _calls(source, "load", dtypes.float32, 2) == 0
    assert _calls(source, "store", dtypes.float32, 4) == 1


def test_an_odd_row_length_loads_scalars() -> None:
    source = _source(strided_copy(dtypes.float32, 4, 8, 9, 0), [Opt(U, 1, 4)])
    assert not _VECTOR_LOAD.search(source) and _calls(source, "store", dtypes.float32, 4) == 1


def test_a_row_length_of_two_modulo_four_moves_float2_pieces() -> None:
    source = _source(strided_copy(dtypes.float32, 4, 8, 6, 0), [Opt(U, 1, 4)])
    assert _calls(source, "load", dtypes.float32, 2) == 2 and _calls(source, "load", dtypes.float32, 4) == 0
    assert _calls(source, "store", dtypes.float32, 4) == 1


def test_eight_float32_lanes_are_two_float4_accesses() -> None:
    source = _source(elementwise_add(dtypes.float32, 64), [Opt(U, 0, 8)])
    assert _calls(source, "load", dtypes.float32, 4) == 4 and _calls(source, "store", dtypes.float32, 4) == 2


@pytest.mark.parametrize(("dtype", "width"), [(dtypes.float16, 8), (dtypes.bfloat16, 8), (dtypes.float64, 2),
                                              (dtypes.uint8, 16), (dtypes.int16, 4), (dtypes.int64, 2)])
def test_every_dtype_moves_16_bytes_at_most_per_access(dtype: DType, width: int) -> None:
    source = _source(elementwise_add(dtype, 256), [Opt(U, 0, width)])
    assert _calls(source, "load", dtype, width) == 2 and _calls(source, "store", dtype, width) == 1
    assert f"struct alignas({dtype.itemsize * width}) {vector_type(dtype.vec(width))}" in source


def test_a_gate_shared_by_the_lanes_keeps_the_vector_load() -> None:
    source = _source(row_padded(6, 16), [Opt(U, 1, 4)])
    assert re.search(r"\? plygrad_load_float4\(&data1\[[^]]+\]\) : plygrad_float4\{\}\)", source), source


def test_a_column_sum_loads_vectors_into_scalar_accumulators() -> None:
    source = _source(column_sum(32, 64), [Opt(U, 0, 4), Opt(L, 0, 16)])
    assert _calls(source, "load", dtypes.float32, 4) == 1 and _calls(source, "store", dtypes.float32, 4) == 1
    assert "plygrad_float4 acc" not in source and source.count("float acc") == 4


def test_grouped_reductions_store_their_lanes_as_one_vector() -> None:
    """GROUP and a vector UPCAST combine (the accumulators stay scalar): the group's first thread stores 4 rows'
    results with one float4."""
    kernel = reduce_rows(Ops.ADD, dtypes.float32, 16, 256)
    program = lower_uop(kernel, SM90, [Opt(U, 0, 4), Opt(G, 1, 64)])
    assert re.search(r"if \(\(long long\)threadIdx\.x == 0\) plygrad_store_float4\(&data0\[", program.src[0].arg)
    x = np.random.default_rng(5).uniform(-1, 1, 16 * 256).astype(np.float32)
    emulated = CudaKernel.from_program(program)
    for reverse in (False, True):
        (got,) = EmuLibrary([emulated]).run(emulated, [np.zeros(16, np.float32), x], reverse=reverse)
        np.testing.assert_allclose(got, x.reshape(16, 256).sum(1, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_the_c_renderer_is_unchanged_by_memory_only_vectors() -> None:
    """The C target keeps its vector arithmetic, unaligned memcpy accesses, and scalar float16."""
    c_source = _source(strided_copy(dtypes.float32, 4, 8, 9, 1), [Opt(U, 1, 8)], CPU)
    assert c_source.count("__builtin_memcpy") == 2 and "plygrad_float8" in c_source
    half = _source(elementwise_add(dtypes.float16, 64), [Opt(U, 0, 8)], CPU)
    assert "__builtin_memcpy" not in half


# ---- emulated against the C backend, and compiled to cubins ----------------------------------------------------------
VECTOR_CASES: list[tuple[str, UOp, list[Opt] | None]] = [
    ("add_f32", elementwise_add(dtypes.float32, 1024), [Opt(U, 0, 4), Opt(L, 0, 64)]),
    ("add_f32_x8", elementwise_add(dtypes.float32, 512), [Opt(U, 0, 8), Opt(L, 0, 16)]),
    ("add_f16", elementwise_add(dtypes.float16, 512), [Opt(U, 0, 8), Opt(L, 0, 16)]),
    ("add_bf16", elementwise_add(dtypes.bfloat16, 512), None),
    ("add_u8", elementwise_add(dtypes.uint8, 512), None),
    ("add_f64", elementwise_add(dtypes.float64, 512), None),
    ("shrink_by_one", strided_copy(dtypes.float32, 8, 16, 17, 1), [Opt(U, 1, 4)]),
    ("odd_rows", strided_copy(dtypes.float16, 8, 16, 9, 0), [Opt(U, 1, 8)]),
    ("float2_pieces", strided_copy(dtypes.float32, 8, 8, 6, 2), [Opt(U, 1, 4), Opt(L, 0, 8)]),
    ("row_padded", row_padded(6, 16), [Opt(U, 1, 4)]),
    ("column_sum", column_sum(32, 64), None),
    ("matmul", matmul(32, 16, 64), None),
]


def _np_dtype(dtype: DType) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if dtype is dtypes.bfloat16 else np.dtype(dtype.name)


def _random(dtype: DType, size: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    if dtype.kind is DTypeKind.FLOAT:
        return rng.uniform(-4, 4, size).astype(_np_dtype(dtype))
    return rng.integers(0, 50, size).astype(_np_dtype(dtype))


def _emulated_and_c(cases: list[tuple[str, UOp, list[Opt] | None]], seed: int = 0) -> None:
    """Every case lowered for sm_90 and run in the emulation (both thread orders) gives the C backend's bits."""
    programs = [lower_uop(kernel, SM90, opts) for _, kernel, opts in cases]
    library = EmuLibrary([CudaKernel.from_program(p) for p in programs])
    rng = np.random.default_rng(seed)
    for (name, kernel, _), program in zip(cases, programs, strict=True):
        params = program.arg.params
        buffers = [np.zeros(p.size, _np_dtype(p.dtype)) if p.writable else _random(p.dtype, p.size, rng)
                   for p in params]
        want = [b.copy() for b in buffers]
        run_program(lower_uop(kernel, CPU, []), want)
        for reverse in (False, True):
            got = [b.copy() for b in buffers]
            library.run(CudaKernel.from_program(program), got, reverse=reverse)
            for p in params:
                if p.writable:
                    np.testing.assert_array_equal(got[p.index].view(np.uint8), want[p.index].view(np.uint8),
                                                  err_msg=f"{name} {program.arg.opts} data{p.index}")


def test_vector_kernels_emulated_match_the_c_backend_bit_for_bit() -> None:
    sources = [_source(kernel, opts) for _, kernel, opts in VECTOR_CASES]
    assert sum(bool(_VECTOR_LOAD.search(s)) for s in sources) >= 10  # the cases do exercise vector accesses
    _emulated_and_c(VECTOR_CASES)


def test_vector_kernels_compile_to_sass_for_sm80_and_sm90() -> None:
    kernels = {CudaKernel.from_program(lower_uop(kernel, target, opts))
               for _, kernel, opts in VECTOR_CASES for target in (SM80, SM90)}
    cubins = compile_cubins(sorted(kernels, key=lambda k: k.source), ("sm_80", "sm_90"))
    for arch, cubin in cubins.items():
        symbols = cubin_symbols(cubin)
        missing = {k.info.name for k in kernels if not any(s == k.info.name or s.startswith(f"{k.info.name}_")
                                                          for s in symbols)}
        assert missing == set(), arch


_VIEW = st.tuples(
    st.sampled_from([dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int32, dtypes.uint8]),
    st.integers(2, 5),  # rows
    st.sampled_from([1, 2, 4, 8, 16]),  # lanes (UPCAST amount)
    st.integers(1, 3),  # row length in lanes
    st.integers(0, 9),  # extra elements per source row
    st.integers(0, 9),  # offset of the view
)


def _expected_width(dtype: DType, lanes: int, stride: int, offset: int) -> int:
    """The access width the rendering must use: the widest of the target's dividing the lanes and the first lane's
    index (i * stride + offset + a multiple of the lanes), else 1."""
    multiple = math.gcd(stride, offset, lanes)
    return max((w for w in SM90.vector_widths_for(dtype) if lanes % w == 0 and multiple % w == 0), default=1)


@settings(max_examples=6)
@given(st.lists(_VIEW, min_size=3, max_size=6))
def test_views_of_any_shape_vectorize_exactly_where_aligned(views: list[tuple[DType, int, int, int, int, int]]) -> None:
    """Random views (dtype, rows, lanes, row length, source row stride, offset): the loads use the widest width the
    alignment allows, and the emulation (which fails any misaligned access) gives the C backend's bits."""
    cases: list[tuple[str, UOp, list[Opt] | None]] = []
    for dtype, m, lanes, length, extra, offset in views:
        n = lanes * length
        kernel = strided_copy(dtype, m, n, n + extra, offset)
        opts = [Opt(U, 1, lanes)] if lanes > 1 else []
        source = _source(kernel, opts)
        width = _expected_width(dtype, lanes, n + extra, offset)
        if width > 1:
            assert _calls(source, "load", dtype, width) == lanes // width, (dtype, lanes, n + extra, offset, source)
        else:
            assert not _VECTOR_LOAD.search(source)
        cases.append((f"{dtype.name} {m}x{n} stride {n + extra} offset {offset}", kernel, opts))
    _emulated_and_c(cases, seed=len(views))


# ---- the emulation checks alignment ----------------------------------------------------------------------------------
def _misaligned(cooperative: bool) -> tuple[CudaKernel, str]:
    program = lower_uop(elementwise_add(dtypes.float32, 256), SM90, [Opt(U, 0, 4), Opt(L, 0, 16)])
    kernel = CudaKernel.from_program(program)
    first = re.search(r"plygrad_load_float4\(&data1\[(v\d+)\]\)", kernel.source)
    assert first is not None
    source = kernel.source.replace(first.group(0), f"plygrad_load_float4(&data1[{first.group(1)} + 1])")
    if cooperative:  # a barrier at the kernel's start makes the emulation run the block's threads as fibers
        body = source.index("{\n", source.index('extern "C"'))
        source = f"{source[:body]}{{\n  __syncthreads();\n{source[body + 2:]}"
    return CudaKernel(source, program.arg), first.group(1)


@pytest.mark.parametrize("cooperative", [False, True])
def test_a_misaligned_vector_access_fails_the_launch(cooperative: bool) -> None:
    """A float4 load one element past an aligned address works on x86 and faults on a GPU: the emulation must
    report it, with the address, the buffer and element, and the thread."""
    bad, _ = _misaligned(cooperative)
    good = CudaKernel.from_program(lower_uop(elementwise_add(dtypes.float32, 256), SM90, [Opt(U, 0, 4), Opt(L, 0, 16)]))
    assert bad.cooperative is cooperative
    library = EmuLibrary([good, bad])
    x, y = np.arange(256, dtype=np.float32), np.ones(256, np.float32)
    (out,) = library.run(good, [np.zeros(256, np.float32), x, y])
    np.testing.assert_array_equal(out, x + 1)  # the same accesses from the aligned start pass
    with pytest.raises(EmulationError, match=r"misaligned vector access: 16 bytes at address 0x[0-9a-f]+ \(4 bytes "
                                             r"past a 16-byte boundary\) in block \(0, 0, 0\) thread \(0, 0, 0\).*"
                                             r"\[data1 \+ 1 elements\]"):
        library.run(bad, [np.zeros(256, np.float32), x, y])
    (again,) = library.run(good, [np.zeros(256, np.float32), x, y])  # the check starts over with each launch
    np.testing.assert_array_equal(again, x + 1)


def test_a_misaligned_vector_store_fails_too() -> None:
    program = lower_uop(elementwise_add(dtypes.float16, 64), SM90, [Opt(U, 0, 8)])
    source = re.sub(r"plygrad_store_half8\(&data0\[(v\d+)\]", r"plygrad_store_half8(&data0[\1 + 4]", program.src[0].arg)
    bad = CudaKernel(source, program.arg)
    buffers = [np.zeros(64 + 8, np.float16), np.ones(64, np.float16), np.ones(64, np.float16)]
    with pytest.raises(EmulationError, match=r"16 bytes at .* \(8 bytes past a 16-byte boundary\).*\[data0 \+ 4 "):
        EmuLibrary([bad]).run(bad, buffers)


# ---- the heuristic ---------------------------------------------------------------------------------------------------
def test_elementwise_kernels_move_16_bytes_per_thread() -> None:
    assert choose_opts(elementwise_add(dtypes.float32, 1 << 16), SM90) == [Opt(U, 0, 4), Opt(L, 0, 256)]
    assert choose_opts(elementwise_add(dtypes.float16, 1 << 16), SM90)[0] == Opt(U, 0, 8)
    assert choose_opts(elementwise_add(dtypes.uint8, 1 << 16), SM90)[0] == Opt(U, 0, 16)
    assert choose_opts(elementwise_add(dtypes.float64, 1 << 16), SM90)[0] == Opt(U, 0, 2)
    assert choose_opts(elementwise_add(dtypes.float32, 6 * 1024), SM90)[0] == Opt(U, 0, 4)
    assert choose_opts(elementwise_add(dtypes.float32, 6 * 1023), SM90)[0] == Opt(U, 0, 2)  # the widest dividing
    assert all(o.op is not U for o in choose_opts(elementwise_add(dtypes.float32, 1023), SM90))


def test_no_vector_width_where_the_stores_cannot_be_aligned() -> None:
    out, a, i = param(0, dtypes.float32, 1025), param(1, dtypes.float32, 1024), loop(1024, 0)
    opts = choose_opts(sink(_end(store(out, i + 1, load(a, i) * 2.0), i)), SM90)
    assert all(o.op is not U for o in opts)  # out[i + 1]: every vector store would be misaligned


def test_long_reductions_over_the_contiguous_axis_get_a_workgroup_per_row() -> None:
    """A sum (or max) over the last axis of 4096 x 4096: one thread per row would put neighbouring threads 16 KiB
    apart; a block per row reads neighbouring elements. However many rows there are."""
    for op in (Ops.ADD, Ops.MAX):
        assert choose_opts(reduce_rows(op, dtypes.float32, 4096, 4096), SM90) == [Opt(G, 1, 256)]
    assert choose_opts(reduce_rows(Ops.ADD, dtypes.float32, 4096, 64), SM90) == [Opt(L, 0, 256)]  # short rows


def test_reductions_over_the_first_axis_stay_serial_and_vectorize() -> None:
    """sum over axis 0: neighbouring threads, neighbouring columns: already coalesced, and each thread's loads
    along its 4 columns are one float4."""
    assert choose_opts(column_sum(4096, 4096), SM90) == [Opt(U, 0, 4), Opt(L, 0, 256)]
    assert choose_opts(matmul(64, 64, 64), SM90) == [Opt(U, 1, 4), Opt(U, 0, 4), Opt(L, 1, 16), Opt(L, 0, 16)]


def test_many_row_reductions_grouped_by_the_heuristic_match_the_c_backend() -> None:
    kernel = reduce_rows(Ops.ADD, dtypes.float32, 1100, 256)
    program = lower_uop(kernel, SM90)
    assert Opt(G, 1, 256) in program.arg.opts and program.arg.global_size == (1100, 1, 1)
    x = np.random.default_rng(3).uniform(-1, 1, 1100 * 256).astype(np.float32)
    emulated = CudaKernel.from_program(program)
    (got,) = EmuLibrary([emulated]).run(emulated, [np.zeros(1100, np.float32), x])
    want = np.zeros(1100, np.float32)
    run_program(lower_uop(kernel, CPU, []), [want, x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # the group sums in another order


def test_whatever_the_heuristic_picks_lowers_within_the_limits() -> None:
    for _, kernel, _ in VECTOR_CASES:
        info = lower_uop(kernel, SM90).arg
        assert math.prod(info.local_size or (1, 1, 1)) <= SM90.max_threads_per_group
