"""What C leaves undefined has one defined answer (docs/ir.md §5), end to end through the CPU backend: integer
`//` and `%` by zero give 0 (NumPy's answer; C traps with SIGFPE, which used to kill the process), MIN // -1 wraps,
and float -> integer casts of NaN, inf and out-of-range values give the IR's reference value instead of whatever
the hardware's conversion instruction returns."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from plygrad.frontend import Tensor, dtypes
from plygrad.ir import cast_value

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def with_awkward_divisors(dtype: str) -> st.SearchStrategy[np.ndarray]:
    """Divisors where a third are 0, plus -1 and MIN beside random values."""
    info = np.iinfo(dtype)
    awkward = [0, 0, 1, info.max, info.min] + ([-1] if info.min < 0 else [])
    element = st.one_of(st.sampled_from(awkward), st.integers(int(info.min), int(info.max)))
    return hnp.arrays(np.dtype(dtype), st.integers(1, 24), elements=element)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_floor_division_and_modulo_by_zero_match_numpy(dtype: str, data: st.DataObject) -> None:
    y = data.draw(with_awkward_divisors(dtype))
    info = np.iinfo(dtype)
    x = data.draw(hnp.arrays(np.dtype(dtype), y.shape, elements=st.integers(int(info.min), int(info.max))))
    with np.errstate(divide="ignore", over="ignore"):
        want_q, want_r = np.floor_divide(x, y), np.remainder(x, y)
    np.testing.assert_array_equal((Tensor(x) // Tensor(y)).numpy(), want_q)
    np.testing.assert_array_equal((Tensor(x) % Tensor(y)).numpy(), want_r)


def test_the_issue_example_gives_zero_instead_of_killing_the_process() -> None:
    a, b = Tensor([7, -7], dtype=dtypes.int32), Tensor([2, 0], dtype=dtypes.int32)
    assert (a // b).tolist() == [3, 0]
    assert (a % b).tolist() == [1, 0]
    assert (a // 0).tolist() == [0, 0]  # a constant zero divisor too
    assert (a % 0).tolist() == [0, 0]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_min_divided_by_minus_one_wraps(dtype: str) -> None:
    lo = int(np.iinfo(dtype).min)
    x = Tensor([lo, lo, 9], dtype=getattr(dtypes, dtype))
    assert (x // -1).tolist() == [lo, lo, -9]
    assert (x % -1).tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_float_to_int_casts_of_nan_inf_and_out_of_range_values(dtype: str) -> None:
    values = [math.nan, math.inf, -math.inf, 3e9, -3e9, 1e19, -1e19, 2.0**63, 1e30, -1e30, 300.7, -129.5, 2.5]
    target = getattr(dtypes, dtype)
    got = Tensor(values, dtype=dtypes.float64).cast(target).numpy()
    np.testing.assert_array_equal(got, np.array([cast_value(v, target) for v in values], dtype=dtype))
    got32 = Tensor(values, dtype=dtypes.float32).cast(target).numpy()  # float32 sources take the same path
    want32 = [cast_value(cast_value(v, dtypes.float32), target) for v in values]
    np.testing.assert_array_equal(got32, np.array(want32, dtype=dtype))
