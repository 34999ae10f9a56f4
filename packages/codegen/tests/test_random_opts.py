"""Random valid `Opt` lists on random small kernels change nothing (what BEAM relies on: it may pick any of them).

hypothesis draws a kernel (elementwise, a reduction over any subset of its axes, or matmul-shaped; inputs that
broadcast along some axes and are laid out in any axis order; float32 or int32), then up to four actions that
apply to it (UPCAST, UNROLL and TILE by amounts that divide, THREAD), each drawn against the kernel as the previous ones
left it. The optimized program must compute what the unoptimized one does: bit for bit for integers, within
rounding for floats (the kernel itself is checked against NumPy first, so the two are not wrong together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from cg_kernels import load, param, store
from cg_run import run_program
from hypothesis import given
from hypothesis import strategies as st

from plygrad.codegen import apply_opts, lower_uop, optimizable
from plygrad.ir import AxisType, DType, KernelInfo, Ops, Opt, OptOps, Target, UOp, dtypes

CPU4 = Target("CPU", "c", threads=4)  # vector widths (2, 4, 8) for float32: an UPCAST may become vector lanes
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
ELEMENTWISE = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}
REDUCE = {Ops.ADD: np.add, Ops.MAX: np.maximum}


@dataclass(frozen=True)
class Operand:
    """One input: the axes it varies along (broadcast along the others), in its memory order, outermost first."""

    layout: tuple[int, ...]


@dataclass(frozen=True)
class Case:
    """A kernel `out = reduce(op(in0, in1, ...))` over `shape`, reducing the axes marked in `reduced`."""

    shape: tuple[int, ...]
    reduced: tuple[bool, ...]
    operands: tuple[Operand, ...]
    op: Ops
    reduce_op: Ops
    dtype: DType

    @property
    def np_dtype(self) -> type[np.generic]:
        return np.float32 if self.dtype is dtypes.float32 else np.int32

    def kernel(self) -> UOp:
        ranges = [UOp.range(size, axis, AxisType.REDUCE if red else AxisType.LOOP)
                  for axis, (size, red) in enumerate(zip(self.shape, self.reduced, strict=True))]
        value: UOp | None = None
        for position, operand in enumerate(self.operands):
            index = UOp.const(dtypes.index, 0)
            stride = 1
            for axis in reversed(operand.layout):
                index = index + ranges[axis] * stride
                stride *= self.shape[axis]
            loaded = load(param(position + 1, self.dtype, stride), index)
            value = loaded if value is None else value.alu(self.op, loaded)
        assert value is not None
        reduce_ranges = [r for r, red in zip(ranges, self.reduced, strict=True) if red]
        if reduce_ranges:
            value = UOp(Ops.REDUCE, self.dtype, (value, *reduce_ranges), self.reduce_op)
        out_ranges = [r for r, red in zip(ranges, self.reduced, strict=True) if not red]
        out_index = UOp.const(dtypes.index, 0)
        stride = 1
        for r in reversed(out_ranges):
            out_index = out_index + r * stride
            stride *= int(r.src[0].arg)
        written = store(param(0, self.dtype, stride), out_index, value)
        body = UOp(Ops.END, dtypes.void, (written, *out_ranges)) if out_ranges else written
        return UOp(Ops.SINK, dtypes.void, (body,), KernelInfo("random_kernel"))

    def inputs(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        arrays = []
        for operand in self.operands:
            size = math.prod(self.shape[a] for a in operand.layout)
            if self.dtype is dtypes.float32:
                arrays.append(rng.standard_normal(size).astype(np.float32))
            else:
                arrays.append(rng.integers(-9, 10, size).astype(np.int32))
        return arrays

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """What NumPy computes (float sums in another order: compare within rounding)."""
        full = None
        for operand, flat in zip(self.operands, inputs, strict=True):
            logical = flat.reshape([self.shape[a] for a in operand.layout])
            order = sorted(operand.layout)
            logical = logical.transpose([operand.layout.index(a) for a in order])
            expanded = logical.reshape([self.shape[a] if a in operand.layout else 1 for a in range(len(self.shape))])
            full = expanded if full is None else ELEMENTWISE[self.op](full, expanded)
        assert full is not None
        full = np.broadcast_to(full, self.shape)
        axes = tuple(a for a, red in enumerate(self.reduced) if red)
        if axes:
            full = REDUCE[self.reduce_op].reduce(full, axis=axes, dtype=full.dtype)
        return np.asarray(full, self.np_dtype).ravel()


@st.composite
def cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([dtypes.float32, dtypes.int32]))
    kind = draw(st.sampled_from(["elementwise", "reduce", "matmul"]))
    if kind == "matmul":  # out[i, j] = sum_k a[i, k] * b[k, j], with the k axis in the middle or last
        m, n, k = (draw(st.sampled_from(SIZES)) for _ in range(3))
        if draw(st.booleans()):
            return Case((m, n, k), (False, False, True), (Operand((0, 2)), Operand((2, 1))), Ops.MUL, Ops.ADD, dtype)
        return Case((m, k, n), (False, True, False), (Operand((0, 1)), Operand((1, 2))), Ops.MUL, Ops.ADD, dtype)
    shape = tuple(draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=3)))
    reduced = tuple(draw(st.booleans()) for _ in shape) if kind == "reduce" else tuple(False for _ in shape)
    operands = []
    for _ in range(draw(st.integers(1, 2))):
        varying = [a for a in range(len(shape)) if draw(st.booleans())]  # broadcast along the other axes
        operands.append(Operand(tuple(draw(st.permutations(varying)))))
    op = draw(st.sampled_from(sorted(ELEMENTWISE, key=lambda o: o.name)))
    reduce_op = draw(st.sampled_from(sorted(REDUCE, key=lambda o: o.name)))
    return Case(shape, reduced, tuple(operands), op, reduce_op, dtype)


def random_opts(data: st.DataObject, kernel: UOp, target: Target) -> list[Opt]:
    """Up to four actions that apply, each drawn against the kernel as the previous ones left it."""
    opts: list[Opt] = []
    for _ in range(data.draw(st.integers(0, 4))):
        choices = []
        for node in kernel.toposort:
            if node.op is not Ops.RANGE or node.src[0].op is not Ops.CONST:
                continue
            axis, kind, size = int(node.arg[0]), node.arg[1], int(node.src[0].arg)
            splits = [k for k in range(2, size + 1) if size % k == 0]
            if kind in (AxisType.LOOP, AxisType.THREAD):
                choices += [Opt(OptOps.UPCAST, axis, k) for k in splits]
            if kind is AxisType.REDUCE:
                choices += [Opt(OptOps.UNROLL, axis, k) for k in splits]
            if kind is AxisType.LOOP:
                choices.append(Opt(OptOps.THREAD, axis, target.threads))
                choices += [Opt(OptOps.TILE, axis, k) for k in splits]
        if not choices:
            break
        opt = data.draw(st.sampled_from(choices))
        kernel = apply_opts(kernel, [opt], target)
        opts.append(opt)
    return opts


def run(case: Case, opts: list[Opt], inputs: list[np.ndarray]) -> np.ndarray:
    program = lower_uop(case.kernel(), CPU4, opts)
    out = np.zeros(program.arg.params[0].size, case.np_dtype)
    run_program(program, [out, *inputs], openmp=True)
    assert program.arg.opts == tuple(opts), "ProgramInfo.opts records exactly the list applied"
    return out


@given(case=cases(), data=st.data())
def test_random_opts_on_random_kernels_change_nothing(case: Case, data: st.DataObject) -> None:
    inputs = case.inputs(seed=len(case.shape))
    plain = run(case, [], inputs)
    expected = case.reference(inputs)
    if case.dtype is dtypes.float32:
        np.testing.assert_allclose(plain, expected, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(plain, expected)
    opts = random_opts(data, optimizable(case.kernel(), CPU4), CPU4)
    optimized = run(case, opts, inputs)
    if case.dtype is dtypes.float32:
        # UNROLL of a reduce axis that is not the innermost one adds the terms in another order: the difference is
        # within the reordering bound, about n * 2^-24 * (sum of |terms|), with n terms of magnitude <= ~10 here
        terms = math.prod(n for n, r in zip(case.shape, case.reduced, strict=True) if r)
        np.testing.assert_allclose(optimized, plain, rtol=1e-6, atol=1e-6 * max(terms, 1),
                                   err_msg=f"opts={opts}")
    else:
        np.testing.assert_array_equal(optimized, plain, err_msg=f"opts={opts}")
