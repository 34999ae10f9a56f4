"""Movement ops against PyTorch (forward and gradient) and NumPy: `sliding_windows`, cat/stack/split, repeat, roll,
pad modes, diagonal, unfold, meshgrid, and the errors bad arguments raise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes, pool
from plygrad.ir import ShapeError

Array = np.ndarray[Any, Any]


def _windows(x: Array, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Array:
    """NumPy's reference for `pool.sliding_windows`: sliding windows of the last len(k) axes, strided and dilated."""
    dims = len(k)
    axes = tuple(range(x.ndim - dims, x.ndim))
    spans = tuple(d * (n - 1) + 1 for n, d in zip(k, dilation, strict=True))
    view = sliding_window_view(x, spans, axis=axes)
    batch = (slice(None),) * (x.ndim - dims)
    return view[(*batch, *(slice(None, None, s) for s in stride), *(slice(None, None, d) for d in dilation))]


# ---- sliding_windows -----------------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_pool_matches_numpy_sliding_windows(data: st.DataObject) -> None:
    dims = data.draw(st.integers(1, 3))
    batch = data.draw(st.lists(st.integers(1, 2), max_size=2))
    k = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(dims))
    spatial = tuple(d * (n - 1) + 1 + data.draw(st.integers(0, 4)) for n, d in zip(k, dilation, strict=True))
    x = np.arange(int(np.prod((*batch, *spatial))), dtype=np.int32).reshape(*batch, *spatial)
    got = pool.sliding_windows(Tensor(x), k, stride, dilation)
    want = _windows(x, k, stride, dilation)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_pool_int_stride_and_dilation_apply_to_every_axis() -> None:
    x = np.arange(2 * 9 * 8, dtype=np.float32).reshape(2, 9, 8)
    got = pool.sliding_windows(Tensor(x), (3, 2), stride=2, dilation=2).numpy()
    np.testing.assert_array_equal(got, _windows(x, (3, 2), (2, 2), (2, 2)))


def test_pool_is_a_view_fused_into_one_kernel() -> None:
    x = Tensor(np.arange(30, dtype=np.float32).reshape(5, 6))
    windows = pool.sliding_windows(x, (2, 3), stride=(1, 2)).add(1.0)
    assert len(windows.schedule().src) == 1


@pytest.mark.parametrize(("k", "stride", "dilation"), [((7,), 1, 1), ((3,), 0, 1), ((0,), 1, 1), ((2, 2, 2), 1, 1),
                                                        ((4,), 1, 2), ((2,), (1, 1), 1)])
def test_pool_rejects_windows_that_do_not_fit(k: tuple[int, ...], stride: Any, dilation: Any) -> None:
    with pytest.raises(ShapeError, match="sliding_windows"):
        pool.sliding_windows(Tensor(np.zeros((2, 6), np.float32)), k, stride, dilation)


# ---- the other movement ops against PyTorch --------------------------------------------------------------------------
def _data(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> Array:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-9, 10, size=shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.standard_normal(shape).astype(dtype)


def _compare(pg_fn: Any, torch_fn: Any, *inputs: Array, **kwargs: Any) -> None:
    compare(pg_fn, torch_fn, *inputs, **kwargs)


SHAPES_3D = st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 4))


@settings(max_examples=10, deadline=None)
@given(shape=SHAPES_3D, data=st.data())
def test_cat_matches_torch(shape: tuple[int, ...], data: st.DataObject) -> None:
    dim = data.draw(st.integers(-3, 2))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    pieces = [_data(tuple(s if i == dim % 3 else n for i, n in enumerate(shape)), seed=j) for j, s in enumerate(sizes)]
    _compare(lambda *ts: Tensor.cat(*ts, dim=dim), lambda *ts: torch.cat(ts, dim=dim), *pieces)


def test_cat_promotes_dtypes_and_joins_bool() -> None:
    a, b = _data((2, 3), "int32"), _data((1, 3), "float32")
    _compare(lambda x, y: x.cat(y), lambda x, y: torch.cat([x, y]), a, b, grad=False)
    m, n = _data((2, 2), "bool"), _data((2, 1), "bool", seed=1)
    _compare(lambda x, y: x.cat(y, dim=1), lambda x, y: torch.cat([x, y], 1), m, n)


def test_cat_is_one_fused_kernel() -> None:
    a, b, c = (Tensor(_data((2, n), seed=n)) for n in (1, 2, 3))
    assert len(a.cat(b, c, dim=1).schedule().src) == 1


@settings(max_examples=6, deadline=None)
@given(shape=SHAPES_3D, data=st.data())
def test_stack_matches_torch(shape: tuple[int, ...], data: st.DataObject) -> None:
    dim = data.draw(st.integers(-4, 3))
    a, b, c = (_data(shape, seed=i) for i in range(3))
    _compare(lambda x, y, z: x.stack(y, z, dim=dim), lambda x, y, z: torch.stack([x, y, z], dim=dim), a, b, c)


@pytest.mark.parametrize(("sizes", "dim"), [(1, 0), (2, 1), (3, -1), ([1, 0, 3], 1), ([4], -1), (10, 2)])
def test_split_matches_torch(sizes: Any, dim: int) -> None:
    x = _data((2, 4, 4))
    _compare(lambda t: t.split(sizes, dim), lambda t: t.split(sizes, dim), x)


@pytest.mark.parametrize(("chunks", "n"), [(1, 4), (3, 5), (4, 6), (3, 2), (2, 0)])
def test_chunk_matches_torch(chunks: int, n: int) -> None:
    x = _data((2, n))
    _compare(lambda t: tuple(t.chunk(chunks, 1)), lambda t: t.chunk(chunks, 1), x)


@settings(max_examples=10, deadline=None)
@given(shape=st.tuples(st.integers(0, 3), st.integers(1, 3)), data=st.data())
def test_repeat_matches_torch(shape: tuple[int, ...], data: st.DataObject) -> None:
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=2, max_size=4)))
    _compare(lambda t: t.repeat(*reps), lambda t: t.repeat(*reps), _data(shape))


@pytest.mark.parametrize(("repeats", "dim"), [(2, None), (3, 0), (2, -1), (0, 1), (1, 1)])
def test_repeat_interleave_matches_torch(repeats: int, dim: int | None) -> None:
    _compare(lambda t: t.repeat_interleave(repeats, dim), lambda t: t.repeat_interleave(repeats, dim),
             _data((2, 3)))


@pytest.mark.parametrize(("shifts", "dims"), [(1, None), (-7, None), (2, 0), ((1, -2), (0, 2)), ((5, 5), (1, 1)),
                                              (0, 1)])
def test_roll_matches_torch(shifts: Any, dims: Any) -> None:
    _compare(lambda t: t.roll(shifts, dims), lambda t: t.roll(shifts, dims), _data((2, 3, 4)))


def test_roll_is_a_view_in_one_kernel() -> None:
    assert len(Tensor(_data((3, 4))).roll(1, 1).add(1.0).schedule().src) == 1


@pytest.mark.parametrize(("dim", "sizes"), [(0, (2, 1)), (1, (2, -1)), (-1, (1, 3, 1)), (1, (4,))])
def test_unflatten_matches_torch(dim: int, sizes: tuple[int, ...]) -> None:
    _compare(lambda t: t.unflatten(dim, sizes), lambda t: t.unflatten(dim, sizes), _data((2, 4, 3)))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("sizes", [(3,), (2, 3), (2, 1, 4), (0, 2)])
def test_meshgrid_matches_torch(indexing: str, sizes: tuple[int, ...]) -> None:
    arrays = [_data((n,), seed=i) for i, n in enumerate(sizes)]
    _compare(lambda *ts: ts[0].meshgrid(*ts[1:], indexing=indexing),
             lambda *ts: torch.meshgrid(*ts, indexing=indexing), *arrays)


@pytest.mark.parametrize("n", [0, 1, 4])
def test_diag_matches_torch(n: int) -> None:
    _compare(lambda t: t.diag(), torch.diag, _data((n,)))
    _compare(lambda t: t.diag(), torch.diag, _data((n, n + 1)))


@pytest.mark.parametrize(("offset", "dim1", "dim2"), [(0, 0, 1), (1, 0, 1), (-1, 1, 2), (2, 2, 0), (-5, 0, 2),
                                                      (9, -1, -2)])
def test_diagonal_matches_torch(offset: int, dim1: int, dim2: int) -> None:
    _compare(lambda t: t.diagonal(offset, dim1, dim2), lambda t: t.diagonal(offset, dim1, dim2), _data((3, 4, 5)))


@pytest.mark.parametrize(("dim", "size", "step"), [(0, 2, 1), (1, 3, 2), (-1, 1, 3), (2, 5, 1), (1, 0, 1)])
def test_unfold_matches_torch(dim: int, size: int, step: int) -> None:
    _compare(lambda t: t.unfold(dim, size, step), lambda t: t.unfold(dim, size, step), _data((3, 4, 5)))


def _torch_pad(t: torch.Tensor, padding: tuple[int, ...], mode: str, value: float = 0.0) -> torch.Tensor:
    """F.pad, with a batch axis added around it where PyTorch's non-constant modes insist on one."""
    if mode == "constant":
        return F.pad(t, padding, value=value)
    if len(padding) // 2 < t.ndim:
        return F.pad(t, padding, mode=mode)
    return F.pad(t[None], padding, mode=mode)[0]


PADDINGS = [(1, 2), (0, 1, 2, 0), (2, 1, -1, 1), (-1, 2, 1, 1, 1, 0), (3, 0, 0, 2)]


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes_match_torch(padding: tuple[int, ...], mode: str) -> None:
    if mode == "circular" and any(p < 0 for p in padding):
        pytest.skip("PyTorch's circular pad with negative amounts is only defined for some shapes")
    x = _data((2, 3, 4))
    _compare(lambda t: t.pad(padding, mode=mode), lambda t: _torch_pad(t, padding, mode), x)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_constant_pad_with_a_value_keeps_the_dtype(dtype: str) -> None:
    value = True if dtype == "bool" else 2.5
    _compare(lambda t: t.pad((1, 1, 0, 2), value=value), lambda t: F.pad(t, (1, 1, 0, 2), value=value),
             _data((2, 3), dtype))


def test_pad_accepts_per_axis_pairs() -> None:
    x = _data((2, 3))
    _compare(lambda t: t.pad(((1, 0), None), value=-1.0), lambda t: F.pad(t, (0, 0, 1, 0), value=-1.0), x)
    _compare(lambda t: t.pad(((0, 1), (2, 2)), mode="reflect"), lambda t: _torch_pad(t, (2, 2, 0, 1), "reflect"), x)


BASIC: list[tuple[str, Any, Any]] = [
    ("expand -1", lambda t: t.expand(2, -1, 4, -1), lambda t: t.expand(2, -1, 4, -1)),
    ("squeeze axes", lambda t: t.squeeze((0, -1)), lambda t: t.squeeze((0, -1))),
    ("squeeze all", lambda t: t.squeeze(), lambda t: t.squeeze()),
    ("unsqueeze", lambda t: t.unsqueeze(-2), lambda t: t.unsqueeze(-2)),
    ("flatten", lambda t: t.flatten(1), lambda t: t.flatten(1)),
    ("permute", lambda t: t.permute(3, 1, 2, 0), lambda t: t.permute(3, 1, 2, 0)),
    ("view", lambda t: t.view(3, -1), lambda t: t.view(3, -1)),
    ("transpose", lambda t: t.transpose(0, -2), lambda t: t.transpose(0, -2)),
    ("flip", lambda t: t.flip((0, 1)), lambda t: t.flip((0, 1))),
]


@pytest.mark.parametrize(("pg_fn", "torch_fn"), [b[1:] for b in BASIC], ids=[b[0] for b in BASIC])
def test_basic_views_match_torch_with_gradients(pg_fn: Any, torch_fn: Any) -> None:
    _compare(pg_fn, torch_fn, _data((1, 3, 4, 1)))


# ---- dtypes: views move any dtype's values unchanged --------------------------------------------------------------
VIEWS: list[tuple[str, Any, Any]] = [
    ("cat", lambda t: t.cat(t[:1], dim=0), lambda t: torch.cat([t, t[:1]])),
    ("stack", lambda t: t.stack(t, dim=1), lambda t: torch.stack([t, t], 1)),
    ("roll", lambda t: t.roll(1, 1), lambda t: t.roll(1, 1)),
    ("repeat", lambda t: t.repeat(2, 1), lambda t: t.repeat(2, 1)),
    ("diagonal", lambda t: t.diagonal(1), lambda t: t.diagonal(1)),
    ("unfold", lambda t: t.unfold(1, 2, 1), lambda t: t.unfold(1, 2, 1)),
    ("reflect", lambda t: t.pad((1, 2), mode="reflect"), lambda t: F.pad(t, (1, 2), mode="reflect")),
    ("circular", lambda t: t.pad((2, 1), mode="circular"), lambda t: F.pad(t[None], (2, 1), mode="circular")[0]),
]


@pytest.mark.parametrize("dtype", ["float16", "int8", "bool"])
@pytest.mark.parametrize(("pg_fn", "torch_fn"), [v[1:] for v in VIEWS], ids=[v[0] for v in VIEWS])
def test_views_keep_every_dtype(pg_fn: Any, torch_fn: Any, dtype: str) -> None:
    if dtype == "bool" and torch_fn in (VIEWS[-2][2], VIEWS[-1][2]):
        pytest.skip("PyTorch has no reflect/circular pad for bool")
    compare(pg_fn, torch_fn, _data((3, 4), dtype), grad=False)


def test_views_of_bfloat16() -> None:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).cast(dtypes.bfloat16)
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = x.cat(x.roll(1, 0), dim=1).pad((1, 1), mode="replicate")
    assert got.dtype is dtypes.bfloat16
    np.testing.assert_array_equal(got.numpy(), np.pad(np.concatenate([want, np.roll(want, 1, 0)], 1), ((0, 0), (1, 1)),
                                                      mode="edge"))


# ---- errors --------------------------------------------------------------------------------------------------------
X = Tensor(_data((2, 3)))
BAD_CALLS: list[tuple[str, Any, type[Exception], str]] = [
    ("cat sizes", lambda: X.cat(Tensor(_data((2, 4)))), ShapeError, "cat"),
    ("cat ranks", lambda: X.cat(Tensor(_data((2,)))), ShapeError, "cat"),
    ("cat dim", lambda: X.cat(X, dim=2), ShapeError, "cat"),
    ("stack shapes", lambda: X.stack(Tensor(_data((3, 2)))), ShapeError, "stack"),
    ("split sum", lambda: X.split([1, 2]), ShapeError, "split"),
    ("split zero", lambda: X.split(0, 1), ShapeError, "split"),
    ("chunk zero", lambda: X.chunk(0), ShapeError, "chunk"),
    ("repeat rank", lambda: X.repeat(2), ShapeError, "repeat"),
    ("repeat_interleave negative", lambda: X.repeat_interleave(-1), ShapeError, "repeat_interleave"),
    ("roll lengths", lambda: X.roll((1, 2), 0), ShapeError, "roll"),
    ("unflatten sizes", lambda: X.unflatten(1, (2, 2)), ShapeError, "unflatten"),
    ("meshgrid 2-D", lambda: X.meshgrid(X), ShapeError, "meshgrid"),
    ("meshgrid indexing", lambda: X.meshgrid(indexing="yx"), ValueError, "meshgrid"),
    ("diagonal same axis", lambda: X.diagonal(0, 1, -1), ShapeError, "diagonal"),
    ("diag 3-D", lambda: X.reshape(1, 1, 6).diag(), ShapeError, "diag"),
    ("unfold too big", lambda: X.unfold(1, 4, 1), ShapeError, "unfold"),
    ("unfold step", lambda: X.unfold(1, 2, 0), ShapeError, "unfold"),
    ("pad odd flat", lambda: X.pad((1, 2, 3)), ShapeError, "pad"),
    ("pad long flat", lambda: X.pad((1, 1, 1, 1, 1, 1)), ShapeError, "pad"),
    ("pad pairs", lambda: X.pad(((1, 1),)), ShapeError, "pad"),
    ("pad cut", lambda: X.pad((-4, 0)), ShapeError, "pad"),
    ("pad mode", lambda: X.pad((1, 1), mode="wrap"), ValueError, "pad"),
    ("reflect size", lambda: X.pad((3, 0), mode="reflect"), ValueError, "reflect"),
    ("circular size", lambda: X.pad((0, 4), mode="circular"), ValueError, "circular"),
    ("replicate empty", lambda: X[:, :0].pad((1, 1), mode="replicate"), ValueError, "replicate"),
]


@pytest.mark.parametrize(("build", "error", "name"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_raise_errors_naming_the_op(build: Any, error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        build()
