"""DTypes (`plygrad.ir.dtype`): sizes and ranges against NumPy, interning, text round trips, and promotion against
PyTorch (`torch.promote_types`, `torch.result_type`) with NumPy deciding the pairs PyTorch refuses."""

from __future__ import annotations

import copy
import itertools
import pickle
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from plygrad.ir.dtype import (
    MAX_VECTOR_WIDTH,
    AddrSpace,
    DType,
    PtrDType,
    dtype_text,
    dtypes,
    least_upper_dtype,
    parse_dtype,
    result_dtype,
    sum_acc_dtype,
)

# the dtypes NumPy and PyTorch both have and promote; the fp8s (which PyTorch refuses to promote and NumPy has only
# through ml_dtypes) are checked against ml_dtypes and tinygrad's lattice in test_dtype_fp8.py
VALUE_DTYPES = tuple(dt for dt in dtypes.all() if dt not in dtypes.fp8s)
SCALARS = (*VALUE_DTYPES, dtypes.void, dtypes.index)
INTS = tuple(dt for dt in VALUE_DTYPES if dt.is_int)


def np_dtype(dt: DType) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if dt is dtypes.bfloat16 else np.dtype(dt.numpy_name)


def torch_dtype(dt: DType) -> torch.dtype:
    found = getattr(torch, dt.name)
    assert isinstance(found, torch.dtype)
    return found


def from_torch(tdt: torch.dtype) -> DType:
    return dtypes.from_name(str(tdt).removeprefix("torch."))


# ---- sizes, ranges, names -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", VALUE_DTYPES, ids=str)
def test_itemsize_and_bitsize_match_numpy(dt: DType) -> None:
    assert dt.itemsize == np_dtype(dt).itemsize
    assert dt.bitsize == 8 * np_dtype(dt).itemsize


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_range_matches_iinfo(dt: DType) -> None:
    info = np.iinfo(np_dtype(dt))
    assert (dt.min, dt.max) == (int(info.min), int(info.max))
    assert type(dt.min) is int and type(dt.max) is int


@pytest.mark.parametrize("dt", [dt for dt in VALUE_DTYPES if dt.is_float], ids=str)
def test_float_range_is_the_infinities(dt: DType) -> None:
    assert (dt.min, dt.max) == (-np.inf, np.inf)


def test_bool_and_index_ranges() -> None:
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
    info = np.iinfo(np.int64)  # the index type is lowered to at most int64
    assert (dtypes.index.min, dtypes.index.max) == (int(info.min), int(info.max))


def test_void_has_no_range() -> None:
    with pytest.raises(ValueError, match="void"):
        _ = dtypes.void.min


@pytest.mark.parametrize("dt", VALUE_DTYPES, ids=str)
def test_numpy_name_round_trips_through_numpy(dt: DType) -> None:
    assert dtypes.from_numpy_name(str(np_dtype(dt))) is dt


@pytest.mark.parametrize("dt", [dtypes.void, dtypes.index, dtypes.float32.ptr(4)], ids=str)
def test_no_numpy_name_for_void_index_and_pointers(dt: DType) -> None:
    assert dt.numpy_name is None


@pytest.mark.parametrize("dt", VALUE_DTYPES, ids=str)
def test_from_name_knows_every_dtype(dt: DType) -> None:
    assert dtypes.from_name(dt.name) is dt


@pytest.mark.parametrize("alias", ["half", "float", "double", "char", "uchar", "short", "int", "long"])
def test_from_name_knows_torch_aliases(alias: str) -> None:
    expected = {"char": torch.int8, "uchar": torch.uint8}.get(alias) or getattr(torch, alias)
    assert dtypes.from_name(alias) is from_torch(expected)


def test_unknown_names_raise_with_the_choices() -> None:
    with pytest.raises(KeyError, match=r"float33.*float32"):
        dtypes.from_name("float33")
    with pytest.raises(KeyError, match="complex64"):
        dtypes.from_numpy_name("complex64")


@pytest.mark.parametrize(("value", "expected"), [(True, dtypes.bool), (3, dtypes.int32), (3.0, dtypes.float32)])
def test_from_py_gives_the_defaults(value: bool | int | float, expected: DType) -> None:
    assert dtypes.from_py(value) is expected


def test_from_py_rejects_non_scalars() -> None:
    with pytest.raises(TypeError, match="str"):
        dtypes.from_py("3")  # type: ignore[arg-type]


@pytest.mark.parametrize("dt", VALUE_DTYPES, ids=str)
def test_classification_matches_numpy_kind(dt: DType) -> None:
    kind = np_dtype(dt).kind if dt is not dtypes.bfloat16 else "f"
    assert (dt.is_float, dt.is_int, dt.is_unsigned, dt.is_bool) == (kind == "f", kind in "iu", kind == "u", kind == "b")


# ---- interning ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", SCALARS[:-2], ids=str)
@given(width=st.integers(2, MAX_VECTOR_WIDTH))
def test_vec_is_interned(dt: DType, width: int) -> None:
    v = dt.vec(width)
    assert v is dt.vec(width)
    assert (v.count, v.itemsize, v.scalar()) == (width, dt.itemsize * width, dt)
    assert dt.vec(1) is dt


@given(size=st.integers(-1, 2**40), space=st.sampled_from(AddrSpace), dt=st.sampled_from(SCALARS))
def test_ptr_is_interned(size: int, space: AddrSpace, dt: DType) -> None:
    p = dt.ptr(size, space)
    assert p is dt.ptr(size, space)
    assert isinstance(p, PtrDType) and (p.base, p.size, p.addrspace) == (dt, size, space)
    assert p is not dt.ptr(size + 1, space)


def test_distinct_dtypes_are_distinct_objects() -> None:
    everything = [*SCALARS, dtypes.float32.vec(4), dtypes.float32.ptr(4), dtypes.float32.ptr(4, AddrSpace.LOCAL),
                  dtypes.float32.vec(4).ptr(4)]
    assert len({id(d) for d in everything}) == len(everything)
    assert len(set(everything)) == len(everything)


@pytest.mark.parametrize("make", [
    lambda: dtypes.float32.vec(0), lambda: dtypes.float32.vec(MAX_VECTOR_WIDTH + 1),
    lambda: dtypes.float32.vec(2).vec(2), lambda: dtypes.void.vec(2), lambda: dtypes.float32.ptr().ptr(),
    lambda: dtypes.float32.ptr().vec(2),
], ids=["zero_lanes", "too_wide", "vec_of_vec", "void_vec", "ptr_to_ptr", "vec_of_ptr"])
def test_bad_vectors_and_pointers_raise(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


# ---- text and pickling --------------------------------------------------------------------------------------------
def all_dtypes() -> st.SearchStrategy[DType]:
    scalar = st.sampled_from(SCALARS)
    vector = st.builds(lambda d, n: d.vec(n), st.sampled_from((*SCALARS[:-2], dtypes.index)),
                       st.integers(2, MAX_VECTOR_WIDTH))
    pointer = st.builds(lambda d, n, s: d.ptr(n, s), st.one_of(scalar, vector), st.integers(-1, 2**40),
                        st.sampled_from(AddrSpace))
    return st.one_of(scalar, vector, pointer)


@given(dt=all_dtypes())
def test_text_round_trips(dt: DType) -> None:
    assert parse_dtype(dtype_text(dt)) is dt


@given(dt=all_dtypes())
def test_pickle_and_copy_give_the_interned_object(dt: DType) -> None:
    assert pickle.loads(pickle.dumps(dt)) is dt
    assert copy.deepcopy(dt) is dt


@pytest.mark.parametrize("text", ["float33", "float32x1", f"float32x{MAX_VECTOR_WIDTH + 1}", "float32x", "x4",
                                  "ptr(float32,nowhere,4)", "ptr(float32,global,four)", "ptr(float32)", ""])
def test_bad_text_raises_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="dtype"):
        parse_dtype(text)


# ---- promotion ----------------------------------------------------------------------------------------------------
PAIRS = list(itertools.product(VALUE_DTYPES, repeat=2))


def torch_promotes(a: DType, b: DType) -> bool:
    try:
        torch.promote_types(torch_dtype(a), torch_dtype(b))
    except RuntimeError:
        return False
    return True


TORCH_PAIRS = [p for p in PAIRS if torch_promotes(*p)]
REFUSED_PAIRS = [p for p in PAIRS if not torch_promotes(*p)]


@pytest.mark.parametrize(("a", "b"), TORCH_PAIRS, ids=str)
def test_least_upper_dtype_matches_torch(a: DType, b: DType) -> None:
    assert least_upper_dtype(a, b) is from_torch(torch.promote_types(torch_dtype(a), torch_dtype(b)))


@pytest.mark.parametrize(("a", "b"), REFUSED_PAIRS, ids=str)
def test_pairs_torch_refuses_follow_numpy(a: DType, b: DType) -> None:
    # torch 2.13 refuses uint16/32/64 with other integer dtypes; NumPy's integer promotion is the same lattice,
    # and uint64 with a signed int gives float64 (the documented choice)
    assert not (a.is_float or b.is_float)
    assert least_upper_dtype(a, b) is dtypes.from_numpy_name(str(np.promote_types(np_dtype(a), np_dtype(b))))


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=str)
def test_least_upper_dtype_is_a_commutative_upper_bound(a: DType, b: DType) -> None:
    lub = least_upper_dtype(a, b)
    assert lub is least_upper_dtype(b, a)
    assert least_upper_dtype(a, lub) is lub and least_upper_dtype(b, lub) is lub
    assert least_upper_dtype(a, a) is a


def uses_the_numpy_fallback(*dts: DType) -> bool:
    return dtypes.uint64 in dts and any(d.kind.value == "signed" for d in dts)


def test_least_upper_dtype_is_associative_outside_the_numpy_fallback() -> None:
    # uint64 with a signed int has no least bound; NumPy's float64 there cannot be associative with the lattice
    # (int8 with float16 is float16, but (uint64, int8) then float16 is float64), so those triples are left out
    for a, b, c in itertools.product(VALUE_DTYPES, repeat=3):
        if uses_the_numpy_fallback(a, b, c):
            continue
        nested = least_upper_dtype(least_upper_dtype(a, b), c)
        assert nested is least_upper_dtype(a, least_upper_dtype(b, c)) is least_upper_dtype(a, b, c), (a, b, c)


@pytest.mark.parametrize("dt", [dtypes.void, dtypes.index, dtypes.float32.vec(2), dtypes.float32.ptr()], ids=str)
def test_non_value_dtypes_do_not_promote(dt: DType) -> None:
    with pytest.raises(TypeError, match="promotion"):
        least_upper_dtype(dtypes.float32, dt)


def test_least_upper_dtype_needs_an_argument() -> None:
    with pytest.raises(ValueError, match="at least one"):
        least_upper_dtype()


@pytest.mark.parametrize("scalar", [True, 2, 2.5], ids=["bool", "int", "float"])
@pytest.mark.parametrize("dt", VALUE_DTYPES, ids=str)
def test_result_dtype_of_tensor_and_python_scalar_matches_torch(dt: DType, scalar: bool | int | float) -> None:
    expected = from_torch(torch.result_type(torch.tensor([1], dtype=torch_dtype(dt)), scalar))
    if expected is dtypes.int64 and dt is dtypes.bool:
        expected = dtypes.default_int  # documented difference: plygrad's default int is int32, torch's int64
    assert result_dtype(dt, scalar) is expected
    assert result_dtype(scalar, dt) is expected


@pytest.mark.parametrize(("a", "b"), list(itertools.product([True, 2, 2.5], repeat=2)), ids=str)
def test_result_dtype_of_python_scalars_matches_torch(a: bool | int | float, b: bool | int | float) -> None:
    expected = from_torch(torch.result_type(a, b))
    assert result_dtype(a, b) is (dtypes.default_int if expected is dtypes.int64 else expected)


@pytest.mark.parametrize(("a", "b"), TORCH_PAIRS, ids=str)
def test_result_dtype_of_tensors_matches_torch(a: DType, b: DType) -> None:
    ta, tb = torch.tensor([1], dtype=torch_dtype(a)), torch.tensor([1], dtype=torch_dtype(b))
    assert result_dtype(a, b) is from_torch(torch.result_type(ta, tb))


@pytest.mark.parametrize("dt", VALUE_DTYPES, ids=str)
def test_sum_accumulator_holds_every_value(dt: DType) -> None:
    acc = sum_acc_dtype(dt)
    assert least_upper_dtype(dt, acc) is acc
    assert acc.is_float == dt.is_float
    if dt.is_int or dt.is_bool:
        assert acc.itemsize >= 4  # sums of small ints overflow their dtype immediately
