"""Reductions, statistics, arg-reductions, scans and sorting against PyTorch: values, dtypes, NaN and ties, and
gradients through autograd.

Shapes are small and drawn by hypothesis (0- and 1-sized axes included); ties come from small integer values stored
as floats. Index outputs are int32 here (tinygrad's choice) and int64 in PyTorch: values are compared, not dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from frontend_cases import array, shapes
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare, to_torch

from plygrad.frontend import Tensor, dtypes, sort
from plygrad.ir import ShapeError

FEW = settings(max_examples=5, deadline=None)
# torch_compare.to_torch turns 0-d arrays into shape (1,) (np.ascontiguousarray), so 0-d cases are checked apart
SHAPES = shapes(1, 3)
NONEMPTY = shapes(1, 3, nonempty=True)
Array = np.ndarray[Any, Any]


def rng_for(*key: object) -> np.random.Generator:
    return np.random.default_rng(abs(hash(repr(key))) % 2**32)


def ties(shape: tuple[int, ...], seed: object = 0, nan: bool = False) -> Array:
    """float32 small integers (many equal values), with a few NaNs when asked."""
    x = rng_for("ties", shape, seed).integers(-2, 3, size=shape).astype(np.float32)
    if nan and x.size:
        x.reshape(-1)[:: max(x.size // 3, 1)] = np.nan
    return x


def axis_of(shape: tuple[int, ...], data: st.DataObject) -> int:
    return data.draw(st.integers(-len(shape), len(shape) - 1)) if shape else 0


def axes_of(shape: tuple[int, ...], data: st.DataObject) -> tuple[int, ...] | None:
    if not shape:
        return None
    return data.draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                                          max_size=len(shape), unique_by=lambda a: a % len(shape)).map(tuple))


def torch_dims(axes: tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axes is None else axes


# ---- sum / prod / mean / max / min --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "prod", "mean", "max", "min"])
@FEW
@given(shape=SHAPES, data=st.data())
def test_basic_reductions_match_torch(name: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    if name in ("max", "min"):
        shape = tuple(max(n, 1) for n in shape)
    axes, keep = axes_of(shape, data), data.draw(st.booleans())
    x = array(rng_for(name, shape), shape, low=0.5 if name == "prod" else -3, high=1.5 if name == "prod" else 3)
    torch_fn = {"sum": torch.sum, "prod": None, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[name]

    def want(t: torch.Tensor) -> torch.Tensor:
        dims = torch_dims(axes, t.ndim)
        if name == "prod":
            for d in sorted((d % t.ndim for d in dims), reverse=True) if t.ndim else ():
                t = t.prod(d, keepdim=True)
            return t if keep or not t.ndim else t.reshape([n for i, n in enumerate(t.shape)
                                                           if i not in {d % t.ndim for d in dims}])
        assert torch_fn is not None
        return torch_fn(t, dim=dims, keepdim=keep) if t.ndim else t

    compare(lambda t: getattr(t, name)(axes, keepdim=keep), want, x, atol=1e-5)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_gradient_is_shared_among_ties_like_amax(name: str) -> None:
    x = ties((4, 6))
    torch_fn = torch.amax if name == "max" else torch.amin
    compare(lambda t: getattr(t, name)(1), lambda t: torch_fn(t, 1), x)
    compare(lambda t: getattr(t, name)(), torch_fn, x)


@pytest.mark.parametrize(("dtype", "acc"), [("bool", dtypes.int32), ("int8", dtypes.int32),
                                            ("uint8", dtypes.uint32), ("int64", dtypes.int64),
                                            ("float16", dtypes.float16)])
def test_sum_and_prod_dtypes(dtype: str, acc: Any) -> None:
    x = array(rng_for(dtype), (3, 5), dtype, low=0 if dtype.startswith("u") else -3, high=3)
    assert Tensor(x).sum(1).dtype is acc
    assert Tensor(x).prod(0).dtype is acc
    compare(lambda t: t.sum(1), lambda t: t.sum(1), x, grad=False, atol=1e-2)
    compare(lambda t: t.prod(0), lambda t: t.prod(0), x, grad=False, atol=1e-2)
    assert Tensor(x).sum(dtype=dtypes.float64).dtype is dtypes.float64
    compare(lambda t: t.sum(0, dtype=dtypes.float64), lambda t: t.sum(0, dtype=torch.float64), x, grad=False)


def test_half_sums_accumulate_in_float32() -> None:
    x = np.full(4096, 0.1, np.float16)
    got = Tensor(x).sum()
    assert got.dtype is dtypes.float16
    compare(lambda t: t.sum(), lambda t: t.sum(), x, grad=False, rtol=1e-3)  # a float16 running sum stalls at 256


def test_max_min_of_bool_and_empty_reductions() -> None:
    x = np.array([[True, False], [False, False]])
    compare(lambda t: t.max(1), lambda t: t.amax(1), x, grad=False)
    compare(lambda t: t.min(0), lambda t: t.amin(0), x, grad=False)
    assert Tensor(x).max().dtype is dtypes.bool
    empty = np.zeros((0, 3), np.float32)
    compare(lambda t: t.sum(0), lambda t: t.sum(0), empty, grad=False)
    compare(lambda t: t.prod(0), lambda t: t.prod(0), empty, grad=False)
    compare(lambda t: t.max(1), lambda t: t.amax(1), empty, grad=False)  # reducing a non-empty axis is fine
    assert np.isnan(Tensor(empty).mean().item())
    with pytest.raises(ShapeError, match=r"max over axes \(0,\) of shape \(0, 3\)"):
        Tensor(empty).max(0)


def test_zero_dim_tensors() -> None:
    """A 0-d tensor reduces over axis None, 0 or -1 to itself (PyTorch); arg-reductions give 0."""
    x = Tensor(np.array(2.5, np.float32))
    for name in ("sum", "prod", "mean", "max", "min", "logsumexp"):
        assert getattr(x, name)().numpy().shape == ()
        assert getattr(x, name)(0).item() == pytest.approx(2.5), name
    assert x.argmax().item() == 0 and x.argmin(0).item() == 0
    assert np.isnan(x.var().item()) and x.var(correction=0).item() == 0.0
    assert x.cumsum(0).item() == 2.5 and x.cummax(0)[1].item() == 0 and x.sort()[0].item() == 2.5
    assert bool(x.any().item()) and bool(x.all(0).item())


# ---- var / std ----------------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:var\\(\\)::UserWarning")  # torch warns when N <= correction
@pytest.mark.parametrize("name", ["var", "std"])
@FEW
@given(shape=NONEMPTY, data=st.data())
def test_var_std_match_torch(name: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    axes, keep, correction = axes_of(shape, data), data.draw(st.booleans()), data.draw(st.sampled_from([0, 1, 2]))
    x = array(rng_for(name, shape), shape)
    torch_fn = getattr(torch, name)
    count = int(np.prod([shape[a] for a in torch_dims(axes, len(shape))]))
    # where N <= correction (inf/NaN) or the spread is 0 (std's sqrt at 0) the gradient is NaN here, finite in torch
    compare(lambda t: getattr(t, name)(axes, keepdim=keep, correction=correction),
            lambda t: torch_fn(t, dim=axes, keepdim=keep, correction=correction), x,
            grad=count > max(correction, 1), atol=1e-5)


@pytest.mark.filterwarnings("ignore:var\\(\\)::UserWarning")
def test_var_mean_std_mean_and_dtypes() -> None:
    x = array(rng_for("var_mean"), (3, 4))
    compare(lambda t: t.var_mean(1), lambda t: torch.var_mean(t, 1), x)
    compare(lambda t: t.std_mean(0, keepdim=True, correction=0),
            lambda t: torch.std_mean(t, 0, keepdim=True, correction=0), x)
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert Tensor(ints).var().dtype is dtypes.float32
    np.testing.assert_allclose(Tensor(ints).var(1).numpy(), torch.from_numpy(ints).float().var(1).numpy())
    half = x.astype(np.float16)
    assert Tensor(half).std().dtype is dtypes.float16
    compare(lambda t: t.std(1), lambda t: t.std(1), half, grad=False, atol=1e-2, rtol=1e-2)
    compare(lambda t: t.var(1), lambda t: t.var(1), x[:, :1], grad=False)  # one element: 0/0 is NaN


# ---- logsumexp ----------------------------------------------------------------------------------------------------
@FEW
@given(shape=NONEMPTY, data=st.data())
def test_logsumexp_matches_torch(shape: tuple[int, ...], data: st.DataObject) -> None:
    axes, keep = axes_of(shape, data), data.draw(st.booleans())
    x = array(rng_for("lse", shape), shape, low=-50, high=50)
    compare(lambda t: t.logsumexp(axes, keepdim=keep),
            lambda t: torch.logsumexp(t, dim=torch_dims(axes, t.ndim), keepdim=keep), x, atol=1e-5)


def test_logsumexp_is_stable_and_handles_infinities() -> None:
    x = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [-np.inf, -np.inf], [np.inf, 1.0]], np.float32)
    compare(lambda t: t.logsumexp(1), lambda t: torch.logsumexp(t, 1), x, grad=False)
    compare(lambda t: t.logsumexp(1), lambda t: torch.logsumexp(t, 1), x[:2])
    empty = np.zeros((2, 0), np.float32)
    compare(lambda t: t.logsumexp(1), lambda t: torch.logsumexp(t, 1), empty, grad=False)


# ---- any / all ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
@FEW
@given(shape=SHAPES, data=st.data())
def test_any_all_match_torch(dtype: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    axes, keep = axes_of(shape, data), data.draw(st.booleans())
    x = (array(rng_for("any", shape), shape, "int32", low=0, high=2) * (data.draw(st.booleans()))).astype(dtype)
    for name in ("any", "all"):
        got = getattr(Tensor(x), name)(axes, keepdim=keep)
        assert got.dtype is dtypes.bool
        want = getattr(torch.from_numpy(x).bool(), name)
        expected = want(dim=torch_dims(axes, x.ndim), keepdim=keep) if x.ndim else want()
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


# ---- argmax / argmin ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@FEW
@given(shape=NONEMPTY, data=st.data())
def test_argmax_argmin_pick_the_first_of_ties(name: str, dtype: str, shape: tuple[int, ...],
                                              data: st.DataObject) -> None:
    axis = data.draw(st.none() | st.just(axis_of(shape, data)))
    keep = data.draw(st.booleans())
    x = ties(shape, dtype, nan=dtype == "float32" and data.draw(st.booleans()))
    x = x if dtype == "float32" else (x + 2).astype(dtype)
    got = getattr(Tensor(x), name)(axis, keepdim=keep)
    assert got.dtype is dtypes.int32
    want = getattr(torch.from_numpy(x), name)(axis, keepdim=keep)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_argmax_errors_bool_and_int32() -> None:
    np.testing.assert_array_equal(Tensor([[False, True, True]]).argmax(1).numpy(), [1])
    x = np.array([[3, -7, 3, -7], [2**31 - 1, -(2**31), 2**31 - 1, 0]], np.int32)
    np.testing.assert_array_equal(Tensor(x).argmax(1).numpy(), [0, 0])
    np.testing.assert_array_equal(Tensor(x).argmin(1, keepdim=True).numpy(), [[1], [1]])
    with pytest.raises(ShapeError, match="argmax"):
        Tensor(np.zeros((2, 0), np.float32)).argmax(1)
    with pytest.raises(ShapeError, match="argmin: axis 2 is out of range"):
        Tensor(np.zeros((2, 3), np.float32)).argmin(2)


# ---- cumsum / cumprod ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@FEW
@given(shape=SHAPES, data=st.data())
def test_cumsum_cumprod_match_torch(name: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    axis = axis_of(shape, data)
    x = array(rng_for(name, shape), shape, low=-2, high=2)
    compare(lambda t: getattr(t, name)(axis), lambda t: getattr(t, name)(axis), x, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "float16"])
def test_cumsum_cumprod_dtypes(dtype: str) -> None:
    x = array(rng_for("cum dtypes", dtype), (3, 9), dtype, low=-2, high=2)
    acc = {"bool": dtypes.int32, "int8": dtypes.int32, "int32": dtypes.int32, "float16": dtypes.float16}[dtype]
    assert Tensor(x).cumsum(1).dtype is acc
    compare(lambda t: t.cumsum(1), lambda t: t.cumsum(1), x, grad=False, atol=1e-2)
    compare(lambda t: t.cumprod(0), lambda t: t.cumprod(0), x, grad=False, atol=1e-2)


def test_cumprod_gradient_with_zeros() -> None:
    x = np.array([[2.0, 0.0, 3.0, 0.5], [0.0, 0.0, 1.5, 2.0], [1.0, -2.0, 0.5, 0.0]], np.float32)
    compare(lambda t: t.cumprod(1), lambda t: t.cumprod(1), x)


def test_long_scans_are_blocked_and_exact() -> None:
    """Axes longer than 2 * SCAN_BLOCK take the blocked path (blocks, then a scan of the block totals)."""
    x = array(rng_for("long"), (2, 700), low=-1, high=1)
    compare(lambda t: t.cumsum(1), lambda t: t.cumsum(1), x, atol=1e-4)
    ints = array(rng_for("long int"), (700,), "int32", low=-9, high=9)
    compare(lambda t: t.cumsum(0), lambda t: t.cumsum(0), ints, grad=False)
    compare(lambda t: t.cummax(0), lambda t: torch.cummax(t, 0), ties((700,), "long"))


def test_scans_of_zero_dim_and_empty_tensors() -> None:
    compare(lambda t: t.cumsum(1), lambda t: t.cumsum(1), np.zeros((2, 0), np.float32), grad=False)
    compare(lambda t: t.cummax(1), lambda t: torch.cummax(t, 1), np.zeros((2, 0), np.float32), grad=False)
    with pytest.raises(ShapeError, match="cumsum: axis 3 is out of range"):
        Tensor(np.zeros((2, 3), np.float32)).cumsum(3)


# ---- cummax / cummin ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cummax", "cummin"])
@FEW
@given(shape=SHAPES, data=st.data())
def test_cummax_cummin_match_torch(name: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    """Ties take the latest index and NaN wins once seen, like torch; the gradient goes to that index."""
    axis = axis_of(shape, data)
    x = ties(shape, name, nan=data.draw(st.booleans()))
    compare(lambda t: getattr(t, name)(axis), lambda t: getattr(torch, name)(t, axis), x)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_cummax_cummin_integers(dtype: str) -> None:
    x = (ties((3, 8), dtype) + 2).astype(dtype)
    compare(lambda t: t.cummax(1), lambda t: torch.cummax(t, 1), x, grad=False)
    compare(lambda t: t.cummin(0), lambda t: torch.cummin(t, 0), x, grad=False)


# ---- sort / argsort / topk ----------------------------------------------------------------------------------------
def torch_sort(dim: int, descending: bool) -> Any:
    return lambda t: torch.sort(t, dim=dim, descending=descending, stable=True)


@FEW
@given(shape=SHAPES, data=st.data())
def test_sort_matches_stable_torch_sort(shape: tuple[int, ...], data: st.DataObject) -> None:
    dim, descending = axis_of(shape, data), data.draw(st.booleans())
    x = ties(shape, "sort", nan=data.draw(st.booleans()))
    compare(lambda t: t.sort(dim, descending), torch_sort(dim, descending), x)
    np.testing.assert_array_equal(Tensor(x).argsort(dim, descending).numpy(),
                                  torch.argsort(to_torch(x), dim=dim, descending=descending, stable=True).numpy())


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool", "float16"])
def test_sort_other_dtypes(dtype: str) -> None:
    x = (ties((3, 6), dtype) + 2).astype(dtype)
    x[0, 0] = 0
    compare(lambda t: t.sort(1), torch_sort(1, False), x, grad=False)
    compare(lambda t: t.sort(0, descending=True), torch_sort(0, True), x, grad=False)


def test_sort_handles_infinities_and_extreme_integers() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.0, np.inf, np.nan, -np.inf], np.float32)
    compare(lambda t: t.sort(), torch_sort(-1, False), x, grad=False)
    compare(lambda t: t.sort(descending=True), torch_sort(-1, True), x, grad=False)
    big = np.array([2**31 - 1, -(2**31), 0, -(2**31), 2**31 - 1], np.int32)
    compare(lambda t: t.sort(), torch_sort(-1, False), big, grad=False)


def test_bitonic_sort_for_long_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long axes sort with a bitonic network (padded to a power of two); forced here on small shapes."""
    monkeypatch.setattr(sort, "PAIRWISE_SORT_LIMIT", 0)
    compare(lambda t: t.sort(1), torch_sort(1, False), ties((3, 7), "bitonic", nan=True))
    ints = (ties((3, 7), "bitonic ints") * 1000).astype(np.int32)
    compare(lambda t: t.topk(2, 0), lambda t: tuple(r[:2] for r in torch_sort(0, True)(t)), ints)  # stable ties


@FEW
@given(shape=NONEMPTY, data=st.data())
def test_topk_matches_torch(shape: tuple[int, ...], data: st.DataObject) -> None:
    """Values and gradients match torch; on ties torch's index order is unspecified, so indices are checked by
    reading the values back through them (ours keep the lower index first)."""
    dim, largest = axis_of(shape, data), data.draw(st.booleans())
    k = data.draw(st.integers(0, shape[dim]))
    x = array(rng_for("topk", shape), shape)  # distinct values: the gradient is well defined
    compare(lambda t: t.topk(k, dim, largest)[0], lambda t: torch.topk(t, k, dim, largest)[0], x)
    tied = ties(shape, "topk")
    values, indices = Tensor(tied).topk(k, dim, largest)
    want = torch.topk(torch.from_numpy(tied), k, dim, largest)[0]
    np.testing.assert_array_equal(values.numpy(), want.numpy())
    np.testing.assert_array_equal(np.take_along_axis(tied, indices.numpy().astype(np.int64), dim), want.numpy())


def test_topk_errors() -> None:
    with pytest.raises(ValueError, match=r"topk: k=4 is out of range for dim -1 of size 3"):
        Tensor(np.zeros((2, 3), np.float32)).topk(4)
    with pytest.raises(ShapeError, match="sort: axis 2 is out of range"):
        Tensor(np.zeros((2, 3), np.float32)).sort(2)
