"""Merged row axes (merge.py) and split reductions (split.py). A linear layer over a batch of sequences,
`(b, t, k) @ W.T`, reads its rows as one axis of b*t; on a CPU the two loops become one, so the heuristic tiles and
packs 168 rows instead of 8 x 21. Attention's output projection reads its reduce range as `r // 32` and `r % 32`
(the heads); it becomes two ranges with plain strides. Either way every output is computed from the same terms in
the same order: the same bits as the kernel lowered without the pass."""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
from cg_kernels import F32, batched, heads_projection, load, loop, param, red, sink, store
from cg_run import native_flags, run_program

from plygrad.codegen import OptError, choose_opts, lower_uop, optimizable
from plygrad.codegen.merge import merge_axes
from plygrad.codegen.split import split_ranges
from plygrad.ir import AxisType, Ops, Opt, OptOps, Target, UOp, dtypes

WIDE = ((F32, (2, 4, 8, 16)), (dtypes.float64, (2, 4, 8)))
XEON = Target("CPU", "c", threads=2, vector_widths=WIDE, cache_sizes=(48 << 10, 2 << 20, 260 << 20), has_fma=True)


def linear(b: int, t: int, k: int, n: int, *, transposed_weight: bool = True, bias: bool = False) -> UOp:
    """out[b, i, j] = sum_r x[b, i, r] * w[j, r] (w[r, j] when not transposed_weight), plus bias[j]."""
    out, x, w = param(0, F32, b * t * n), param(1, F32, b * t * k), param(2, F32, n * k)
    bb, i, j, r = loop(b, 0), loop(t, 1), loop(n, 2), red(k, 3)
    weight = load(w, j * k + r) if transposed_weight else load(w, r * n + j)
    total = UOp(Ops.REDUCE, F32, (load(x, bb * (t * k) + i * k + r) * weight, r), Ops.ADD)
    if bias:
        total = total + load(param(3, F32, n), j)
    return sink(UOp(Ops.END, dtypes.void, (store(out, bb * (t * n) + i * n + j, total), bb, i, j)), name="linear")


def loops(kernel: UOp) -> list[int]:
    return sorted(int(n.src[0].arg) for n in kernel.toposort if n.op is Ops.RANGE and n.arg[1] is AxisType.LOOP)


def without(skipped: str, kernel: UOp, inputs: list[np.ndarray]) -> np.ndarray:
    """The kernel's result lowered by every pass but `skipped` (the heuristic's opts chosen without it)."""
    lower_module = importlib.import_module("plygrad.codegen.lower")  # the module: the package exports `lower`
    state = lower_module.Lowering(kernel, XEON, None)
    for name, step in lower_module.PASSES:
        if name != skipped:
            state = step(state)
    assert state.program is not None
    return execute(state.program, inputs)


def execute(program: UOp, inputs: list[np.ndarray]) -> np.ndarray:
    out = np.full(program.arg.params[0].size, np.nan, np.float32)
    run_program(program, [out, *inputs], openmp=True, flags=native_flags())
    return out


@pytest.mark.parametrize(("b", "t", "k", "n", "transposed", "bias"), [
    (8, 21, 384, 64, True, False), (3, 7, 48, 32, False, True), (2, 5, 16, 80, True, True)])
def test_a_linear_layers_rows_merge_and_keep_the_bits(b: int, t: int, k: int, n: int, transposed: bool,
                                                      bias: bool) -> None:
    kernel = linear(b, t, k, n, transposed_weight=transposed, bias=bias)
    merged = merge_axes(kernel, XEON)
    assert loops(merged) == sorted([b * t, n])
    rng = np.random.default_rng(b + t)
    program = lower_uop(kernel, XEON)
    inputs = [rng.standard_normal(p.size).astype(np.float32) for p in program.arg.params if not p.writable]
    got = execute(program, inputs)
    np.testing.assert_array_equal(got, without("merge_axes", kernel, inputs))
    x, w = inputs[0].reshape(b * t, k), inputs[1].reshape((n, k) if transposed else (k, n))
    want = x @ (w.T if transposed else w) + (inputs[2] if bias else 0)
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-4, atol=1e-4)


def test_the_heuristic_names_the_merged_axes() -> None:
    # 168 rows: a 4 x 4 tile on the merged axis 0, the weight packed (tiles.py: 32 rows or more)
    opts = choose_opts(merge_axes(linear(8, 21, 384, 384), XEON), XEON)
    assert Opt(OptOps.UPCAST, 0, 4) in opts and not any(o.axis == 1 for o in opts)  # axis 1 merged into 0
    assert "local0[" in lower_uop(linear(8, 21, 384, 384), XEON).src[0].arg


def test_what_does_not_read_its_rows_as_one_axis_keeps_them() -> None:
    # a weight per batch (bmm): every operand depends on the batch axis
    kernel = batched(3, 8, 16, 32, False)
    assert merge_axes(kernel, XEON) is kernel
    # attention's output projection: heads were transposed, x reads rows b*8064 + i*32, not (b*21 + i)*384
    kernel = heads_projection(8, 21, 12, 32, 64)
    assert merge_axes(kernel, XEON) is kernel
    # an elementwise kernel has no rows to tile
    out, x = param(0, F32, 6 * 8), param(1, F32, 6 * 8)
    a, c = loop(6, 0), loop(8, 1)
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, a * 8 + c, load(x, a * 8 + c) + 1.0), a, c)))
    assert merge_axes(kernel, XEON) is kernel
    # a row index used as a value (a causal mask compares it) is not an address
    out, x, w = param(0, F32, 2 * 4 * 16), param(1, F32, 2 * 4 * 8), param(2, F32, 16 * 8)
    bb, i, j, r = loop(2, 0), loop(4, 1), loop(16, 2), red(8, 3)
    masked = (i < r).where(load(x, bb * 32 + i * 8 + r), UOp.const(F32, 0.0))
    total = UOp(Ops.REDUCE, F32, (masked * load(w, j * 8 + r), r), Ops.ADD)
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, bb * 64 + i * 16 + j, total), bb, i, j)))
    assert merge_axes(kernel, XEON) is kernel
    # GPUs keep their launch dimensions
    assert loops(merge_axes(linear(8, 21, 64, 64), Target.cuda("sm_80"))) == [8, 21, 64]


@pytest.mark.parametrize(("batch", "tokens", "heads", "head_dim", "n"), [(8, 21, 12, 32, 64), (2, 5, 3, 8, 16)])
def test_a_reduction_over_heads_splits_and_keeps_the_bits(batch: int, tokens: int, heads: int, head_dim: int,
                                                          n: int) -> None:
    kernel = heads_projection(batch, tokens, heads, head_dim, n)
    program = lower_uop(kernel, XEON)
    source = str(program.src[0].arg)
    assert not re.search(rf"[/%] {head_dim}LL", source), "no division left in the addresses"
    rng = np.random.default_rng(heads)
    inputs = [rng.standard_normal(p.size).astype(np.float32) for p in program.arg.params if not p.writable]
    got = execute(program, inputs)
    np.testing.assert_array_equal(got, without("split_ranges", kernel, inputs))
    x = inputs[0].reshape(batch, heads, tokens, head_dim).transpose(0, 2, 1, 3).reshape(batch * tokens, -1)
    np.testing.assert_allclose(got, (x @ inputs[1].reshape(n, -1).T).ravel(), rtol=1e-4, atol=1e-4)


def test_a_range_divided_two_ways_is_left_alone() -> None:
    out, x = param(0, F32, 4), param(1, F32, 4 * 24)
    i, r = loop(4, 0), red(24, 1)
    index = i * 24 + r.alu(Ops.IDIV, UOp.const(dtypes.index, 4)) + r.alu(Ops.MOD, UOp.const(dtypes.index, 6))
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, i, UOp(Ops.REDUCE, F32, (load(x, index), r), Ops.ADD)), i)))
    assert split_ranges(kernel, XEON) is kernel


def test_opts_name_the_axes_of_the_optimizable_kernel() -> None:
    kernel = linear(8, 21, 64, 64)
    assert loops(optimizable(kernel, XEON)) == [64, 168]
    program = lower_uop(kernel, XEON, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 2, 16)])
    assert program.arg.opts == (Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 2, 16))
    with pytest.raises(OptError, match="names axis 1"):
        lower_uop(kernel, XEON, [Opt(OptOps.UPCAST, 1, 7)])  # the 21 tokens' axis, merged into axis 0


def test_a_range_a_selection_compares_is_left_alone() -> None:
    # a one-hot pick over two flattened axes compares r // 4 and r % 4 with indices: gather.py reads it as a load,
    # which it could not over two split ranges
    out, x, idx = param(0, F32, 2), param(1, F32, 12), UOp(Ops.PARAM, dtypes.int32.ptr(2), (), 2)
    i, r = loop(2, 0), red(12, 1)
    picked = UOp(Ops.CAST, dtypes.index, (load(idx, i),))
    four = UOp.const(dtypes.index, 4)
    hit = r.alu(Ops.IDIV, four).alu(Ops.CMPEQ, picked)
    value = hit.where(load(x, r.alu(Ops.IDIV, four) * 4 + r.alu(Ops.MOD, four)), UOp.const(F32, 0.0))
    kernel = sink(UOp(Ops.END, dtypes.void, (store(out, i, UOp(Ops.REDUCE, F32, (value, r), Ops.ADD)), i)))
    assert split_ranges(kernel, XEON) is kernel
