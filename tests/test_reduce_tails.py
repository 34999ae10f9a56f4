"""Reductions whose length is no multiple of a block or a vector: sum, mean, var and max over every axis of
contiguous, transposed and broadcast inputs, float32 and float16, against float64 NumPy.

A float sum over more than SPLIT_ABOVE elements is blocked (plygrad.frontend.blocked): the reduced axes are
flattened and padded with zeros to whole blocks, and the scheduler gates the loads of the padding. Issues #32 and
#38 were such sums refused by the runtime's bounds check (`IndexBoundsError`) though they read nothing outside
their input: the gate bounded the flat address while the load's address split it into axes, and the interval
proof could not connect the two (scheduler/indexing.py now restates the gate on the split's outer axis). The
shapes that were refused are in FAILED_BEFORE; every one of them runs in the fast set, and the schedule of every
shape of the grids is checked for bounds without compiling anything (`refused_kernels`).

The data are nonzero multiples of 1/8 below 1/2: every partial sum is exact in float32 whatever the order, so
sums and maxima must equal NumPy's (rounded once to the dtype), and a load that read the wrong element or missed
one would change them. Also here: a blocked matmul gradient against a broadcast operand (block.py), and gradients
of broadcasts summed over 2^20 to 2^25 elements (autograd.py blocks them like Tensor.sum).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, dtypes
from plygrad.frontend.scheduling import schedule_uop
from plygrad.ir import DType, Ops
from plygrad.runtime.bounds import find_violations

OPS = ("sum", "mean", "var", "max")
LAYOUTS = ("contiguous", "transposed", "broadcast_rows", "broadcast_columns")
DTYPES: dict[str, tuple[DType, type[np.floating]]] = {"float32": (dtypes.float32, np.float32),
                                                      "float16": (dtypes.float16, np.float16)}

# refused by the bounds check before the fix (all of them full reductions, axis=None), found by a sweep of
# SLOW_SIZES x SLOW_SIZES: the transposed, broadcast-column and contiguous float16 ones (contiguous float32 var too)
FAILED_BEFORE = [(17, 1024), (63, 1024), (65, 1024), (127, 1024), (129, 1024), (255, 1024), (257, 1024),
                 (511, 1024), (513, 1024), (1023, 1024), (35000, 2), (511, 64)]
FAILED_LAYOUTS = ("transposed", "broadcast_columns")

# sizes at block and vector boundaries (LANES = 16, BLOCK = 4096, SPLIT_ABOVE = 16384) and odd and prime ones
SLOW_SIZES = (1, 3, 15, 17, 63, 65, 127, 129, 255, 257, 511, 513, 1023, 1024)
FAST_SHAPES = [(1, 1), (3, 17), (15, 513), (257, 127)]
LONG_SHAPES = [(70001,), (3, 70001), (70001, 3)]


def data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Nonzero multiples of 1/8 in [-3/8, 3/8] (exact in float16; every partial sum exact in float32)."""
    values = np.random.default_rng(seed).integers(1, 4, shape) * np.random.default_rng(seed + 1).choice([-1, 1], shape)
    return (values / 8).astype(np.float64)


def view(values: np.ndarray, layout: str, dtype: DType) -> tuple[Tensor, np.ndarray]:
    """A tensor of `values`' shape in `layout`, and the float64 array it holds."""
    npdt = dtype.numpy_name
    if layout == "contiguous":
        return Tensor(values.astype(npdt)), values
    if layout == "transposed" and values.ndim == 1:  # a 1-D buffer read backwards
        return Tensor(values[::-1].astype(npdt)).flip(0), values
    if layout == "transposed":  # a permuted view of a buffer laid out the other way
        axes = tuple(reversed(range(values.ndim)))
        return Tensor(np.ascontiguousarray(values.transpose(axes)).astype(npdt)).permute(*axes), values
    if values.ndim != 2:
        raise ValueError(f"layout {layout!r} is for 2-D shapes")
    rows, columns = values.shape
    if layout == "broadcast_rows":  # one row read by every row
        return Tensor(values[:1].astype(npdt)).expand(rows, columns), np.broadcast_to(values[:1], values.shape)
    assert layout == "broadcast_columns"  # one column read by every column
    return Tensor(values[:, :1].astype(npdt)).expand(rows, columns), np.broadcast_to(values[:, :1], values.shape)


def reference(op: str, values: np.ndarray, axis: int | None) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # var of one element: NaN, as ours and PyTorch's
        if op == "var":
            return np.asarray(np.var(values, axis=axis, ddof=1))
        return np.asarray(getattr(np, op)(values, axis=axis))


def check(op: str, t: Tensor, values: np.ndarray, axis: int | None, npdt: type[np.floating]) -> None:
    got = getattr(t, op)(axis).numpy().astype(np.float64)
    want = reference(op, values, axis)
    assert got.shape == want.shape
    where = f"{op} over axis {axis} of {values.shape} {np.dtype(npdt).name}"
    if op in ("sum", "max"):  # exact partial sums: NumPy's value, rounded once to the dtype
        np.testing.assert_array_equal(got, want.astype(npdt).astype(np.float64), err_msg=where)
        return
    # mean: the exact sum, divided and rounded once; var: float32 sums of rounded squares (blocked, so the error
    # stays near 1e-5 of the result at a million terms), rounded once to the dtype
    rtol = 2.0**-9 if npdt is np.float16 else (1e-4 if op == "var" else 2.0**-19)
    scale = float(np.max(values**2)) if op == "var" else float(np.max(np.abs(values)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=where)


def refused_kernels(t: Tensor) -> list[str]:
    """The kernels of `t`'s schedule whose loads or stores the runtime's bounds check cannot prove inside their
    buffers: what `realize` would refuse with IndexBoundsError, found without compiling or running anything."""
    refused = []
    for call in schedule_uop([t.uop]).src:
        body = call.src[0]
        if body.op is Ops.SINK and find_violations(body, [b.arg.size for b in call.src[1:]]):
            refused.append(str(body.arg.name))
    return refused


def cycled(cases: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Each case with an op and a dtype, taken in turn, so a short list still runs every op and dtype."""
    picks = list(itertools.product(OPS, DTYPES))
    return [(*case, *picks[i % len(picks)]) for i, case in enumerate(cases)]


# ---- the two reports ----------------------------------------------------------------------------------------------
def test_issue_32_half_var_of_a_broadcast_made_contiguous() -> None:
    got = Tensor([[0.0, 1.0]], dtype=dtypes.half).expand(35000, 2).contiguous().var().numpy()
    want = torch.tensor([[0.0, 1.0]], dtype=torch.half).expand(35000, 2).contiguous().var().numpy()
    assert got.dtype == np.float16 and got == want


def test_issue_38_sum_of_a_transposed_64_x_511() -> None:
    a = np.random.default_rng(0).random((64, 511)).astype(np.float32)
    got = Tensor(a).T.sum().numpy()
    np.testing.assert_allclose(got, a.astype(np.float64).sum(), rtol=1e-6)


# ---- what was refused, and a fast grid ------------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "layout", "op", "dtype"),
                         cycled([(s, layout) for s in FAILED_BEFORE for layout in FAILED_LAYOUTS]))
def test_full_reductions_that_were_refused(shape: tuple[int, int], layout: str, op: str, dtype: str) -> None:
    dt, npdt = DTYPES[dtype]
    t, values = view(data(shape), layout, dt)
    check(op, t, values, None, npdt)


@pytest.mark.parametrize(("shape", "layout", "axis", "op", "dtype"),
                         cycled([(s, layout, axis) for s in FAST_SHAPES for layout in LAYOUTS
                                 for axis in (None, 0, 1)]))
def test_reductions_over_each_axis(shape: tuple[int, int], layout: str, axis: int | None, op: str,
                                   dtype: str) -> None:
    dt, npdt = DTYPES[dtype]
    t, values = view(data(shape), layout, dt)
    check(op, t, values, axis, npdt)


@pytest.mark.parametrize(("shape", "layout", "axis", "op", "dtype"),
                         cycled([(s, layout, axis) for s in LONG_SHAPES for layout in ("contiguous", "transposed")
                                 for axis in (None, *range(len(s)))]))
def test_long_reductions_over_each_axis(shape: tuple[int, ...], layout: str, axis: int | None, op: str,
                                        dtype: str) -> None:
    dt, npdt = DTYPES[dtype]
    t, values = view(data(shape), layout, dt)
    check(op, t, values, axis, npdt)


def _grid_refusals(shapes: list[tuple[int, ...]], every_axis: bool = True) -> list[str]:
    refusals = []
    for shape in shapes:
        for layout in LAYOUTS if len(shape) == 2 else ("contiguous", "transposed"):
            for dtype, (dt, _) in DTYPES.items():
                t, _ = view(np.zeros(shape), layout, dt)
                for op, axis in itertools.product(OPS, (None, *range(len(shape))) if every_axis else (None,)):
                    refused = refused_kernels(getattr(t, op)(axis))
                    if refused:
                        refusals.append(f"{op}(axis={axis}) of {layout} {shape} {dtype}: {refused}")
    return refusals


def test_the_schedules_of_what_was_refused_stay_in_bounds() -> None:
    """Every op, layout and dtype of the shapes that were refused, scheduled and checked without running."""
    refusals = _grid_refusals(FAILED_BEFORE, every_axis=False)
    assert not refusals, "\n".join(refusals)


# ---- the larger sweep -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_schedules_of_every_pair_of_sizes_stay_in_bounds() -> None:
    refusals = _grid_refusals([*itertools.product(SLOW_SIZES, SLOW_SIZES), *LONG_SHAPES, (35000,), (35000, 2)])
    assert not refusals, "\n".join(refusals)


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(itertools.product(SLOW_SIZES, SLOW_SIZES)), ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_reduction_of_every_pair_of_sizes(shape: tuple[int, int], layout: str) -> None:
    for dt, npdt in DTYPES.values():
        t, values = view(data(shape), layout, dt)
        for op, axis in itertools.product(OPS, (None, 0, 1)):
            check(op, t, values, axis, npdt)


# ---- matmul gradients (a blocked reduction stored by several unrolled copies) --------------------------------------
@pytest.mark.parametrize("nkm", [(256, 256, 256), (256, 64, 256), (512, 512, 512), (32, 768, 3072), (176, 384, 1536)],
                         ids=str)
def test_matmul_sum_backward_matches_torch(nkm: tuple[int, int, int]) -> None:
    """`(x @ y).sum()`'s gradients are `ones @ y.T` and `x.T @ ones`: a reduction that reads no row of the ones, so
    the codegen's row UPCAST copies all store one blocked REDUCE (512^3 raised 'a blocked reduction ... is stored
    by 4 stores that do not hold its lanes one each')."""
    n, k, m = nkm
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((k, m)).astype(np.float32)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (x @ y).sum().backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (tx @ ty).sum().backward()
    assert x.grad is not None and y.grad is not None and tx.grad is not None and ty.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5 * m)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-4, atol=1e-5 * n)


# ---- gradients of long broadcasts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2**20, 2**24, 2**25], ids=lambda n: f"2^{n.bit_length() - 1}")
def test_gradient_of_a_scalar_broadcast_counts_exactly(n: int) -> None:
    """One float32 accumulator stops at 2^24 (16777216 + 1 rounds back down): the gradient must be blocked."""
    x = Tensor.ones(1, requires_grad=True)
    x.expand(n).sum().backward()
    assert x.grad is not None and x.grad.numpy().tolist() == [float(n)]


def _broadcast_gradient(make: Callable[[Tensor], Tensor], w: np.ndarray) -> float:
    x = Tensor.ones(1, requires_grad=True)
    (make(x) * Tensor(w)).sum().backward()
    assert x.grad is not None
    return float(x.grad.numpy()[0])


def test_gradient_of_a_broadcast_against_2_to_the_24_values_is_as_accurate_as_the_sum() -> None:
    """d/dx sum(x * w) = sum(w): as close to float64 as the blocked forward sum (it was 0.76 off, 1e2 x worse)."""
    w = np.random.default_rng(1).standard_normal((1024, 16384)).astype(np.float32)
    exact = w.astype(np.float64).sum()
    forward = Tensor(w).sum().item()
    budget = max(4 * abs(forward - exact), 1e-9 * np.abs(w).astype(np.float64).sum())
    assert abs(_broadcast_gradient(lambda x: x.expand(1024, 16384), w) - exact) <= budget
    assert abs(_broadcast_gradient(lambda x: x.reshape(1, 1).expand(1024, 16384), w) - exact) <= budget
