"""Helpers of tests/test_frontend_ops.py: hypothesis strategies for shapes and data, and NumPy comparison."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from plygrad.frontend import Tensor

SCHEDULERS = ("default", "unfused")
SIZES = st.sampled_from([0, 1, 2, 3, 5])
NONEMPTY_SIZES = st.sampled_from([1, 2, 3, 5])


def shapes(min_dims: int = 0, max_dims: int = 3, nonempty: bool = False) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(NONEMPTY_SIZES if nonempty else SIZES, min_size=min_dims, max_size=max_dims).map(tuple)


def array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32", low: float = -3.0,
          high: float = 3.0) -> np.ndarray[Any, Any]:
    """Random values of `dtype`: uniform floats in [low, high), integers in [low, high], bools at random."""
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def broadcastable(shape: tuple[int, ...], data: st.DataObject) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: a suffix of it with some axes set to 1."""
    keep = data.draw(st.integers(0, len(shape)))
    suffix = shape[len(shape) - keep:]
    return tuple(1 if data.draw(st.booleans()) else n for n in suffix)


def check(got: Tensor, expected: np.ndarray[Any, Any] | Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same shape, same NumPy dtype kind, values close (NaN where NumPy has NaN)."""
    want = np.asarray(expected)
    out = got.numpy()
    assert out.shape == want.shape, f"shape {out.shape}, NumPy {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
