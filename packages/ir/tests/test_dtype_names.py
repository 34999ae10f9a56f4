"""dtype names, aliases, groups, predicates and `finfo` (issue #13), against PyTorch, NumPy and ml_dtypes.

`to_dtype` / `dtypes.resolve` is the one resolver every API taking a dtype goes through: names and aliases in any
case, an unknown name rejected at once with the list of names. The aliases and groups are tinygrad 0.14's
(which follow PyTorch where both have the name); `finfo` unpacks as tinygrad's `(exponent, mantissa)` and has
PyTorch's `torch.finfo` fields.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from plygrad.ir import DTypeError, DTypeNameError, dtypes, to_dtype
from plygrad.ir.dtype import DType

TORCH_FP8: dict[DType, torch.dtype] = {
    dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2,
    dtypes.fp8e4m3fnuz: torch.float8_e4m3fnuz, dtypes.fp8e5m2fnuz: torch.float8_e5m2fnuz,
}
TORCH_FLOATS: dict[DType, torch.dtype] = {
    dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32,
    dtypes.float64: torch.float64, **TORCH_FP8,
}


def torch_of(dt: DType) -> torch.dtype:
    found = TORCH_FLOATS.get(dt) or getattr(torch, dt.name)
    assert isinstance(found, torch.dtype)
    return found


# ---- the resolver ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", dtypes.all(), ids=str)
def test_every_value_dtype_resolves_by_its_name_in_any_case(dt: DType) -> None:
    assert to_dtype(dt.name) is dt
    assert to_dtype(dt.name.upper()) is dt
    assert dtypes.resolve(dt.name) is dt
    assert to_dtype(dt) is dt


@pytest.mark.parametrize("alias", ["half", "float", "double", "char", "short", "int", "long", "bool", "uint8",
                                   "uint16", "uint32", "uint64", "bfloat16"])
def test_torch_spellings_resolve_to_the_torch_dtype(alias: str) -> None:
    expected = {"char": torch.int8}.get(alias) or getattr(torch, alias)
    resolved = to_dtype(alias)
    assert torch.empty(0, dtype=expected).element_size() == resolved.itemsize
    assert resolved.is_float == expected.is_floating_point
    assert resolved.is_unsigned == (not expected.is_signed and expected is not torch.bool)


@pytest.mark.parametrize(("alias", "dt"), [("uchar", dtypes.uint8), ("ushort", dtypes.uint16), ("uint", dtypes.uint32),
                                           ("ulong", dtypes.uint64)])
def test_unsigned_aliases_are_attributes_and_names(alias: str, dt: DType) -> None:
    assert getattr(dtypes, alias) is dt
    assert to_dtype(alias) is dt
    assert dtypes.from_name(alias) is dt


@pytest.mark.parametrize("dt", list(TORCH_FP8), ids=str)
def test_fp8_resolve_by_their_torch_and_ml_dtypes_names(dt: DType) -> None:
    torch_name = str(TORCH_FP8[dt]).removeprefix("torch.")
    assert to_dtype(torch_name) is dt
    assert dt.numpy_name == torch_name
    assert np.dtype(getattr(ml_dtypes, torch_name)).itemsize == dt.itemsize == 1


@pytest.mark.parametrize("name", ["float33", "complex64", "torch.float32", "", "void", "index", "float8_e4m3"])
def test_an_unknown_name_is_rejected_listing_the_names(name: str) -> None:
    with pytest.raises(DTypeNameError, match=r"unknown dtype name .*float32.*uint") as info:
        to_dtype(name)
    assert isinstance(info.value, ValueError) and isinstance(info.value, DTypeError)


@pytest.mark.parametrize("value", [3, 1.5, None, np.float32, torch.float32])
def test_a_non_dtype_is_rejected_naming_its_type(value: object) -> None:
    with pytest.raises(DTypeNameError, match=type(value).__name__):
        to_dtype(value)  # type: ignore[arg-type]


# ---- groups and predicates -------------------------------------------------------------------------------------------
def test_groups_partition_the_value_dtypes() -> None:
    assert set(dtypes.floats) | set(dtypes.ints) | {dtypes.bool} == set(dtypes.all())
    assert set(dtypes.ints) == set(dtypes.uints) | set(dtypes.sints)
    assert not set(dtypes.uints) & set(dtypes.sints)
    assert dtypes.fp8s == (*dtypes.fp8_ocp, *dtypes.fp8_fnuz)
    assert set(dtypes.fp8s) < set(dtypes.floats)
    for group in (dtypes.int8s, dtypes.int16s, dtypes.int32s, dtypes.int64s):
        assert len({dt.itemsize for dt in group}) == 1 and set(group) <= set(dtypes.ints)


@pytest.mark.parametrize("dt", dtypes.all(), ids=str)
def test_predicates_match_torch_and_the_groups(dt: DType) -> None:
    t = torch_of(dt)
    assert dtypes.is_float(dt) == t.is_floating_point == (dt in dtypes.floats) == dt.is_float
    assert dtypes.is_int(dt) == (dt in dtypes.ints) == (not t.is_floating_point and t is not torch.bool)
    assert dtypes.is_unsigned(dt) == (dt in dtypes.uints)
    assert dtypes.is_bool(dt) == (t is torch.bool)


# ---- finfo -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", dtypes.floats, ids=str)
def test_finfo_matches_torch(dt: DType) -> None:
    info, ref = dtypes.finfo(dt), torch.finfo(torch_of(dt))
    assert info.bits == ref.bits
    assert (info.max, info.min, info.tiny, info.smallest_normal) == (ref.max, ref.min, ref.tiny, ref.smallest_normal)
    assert info.resolution == ref.resolution
    if dt is not dtypes.fp8e5m2fnuz:  # torch 2.x reports 0.125 for e5m2fnuz, whose 2 mantissa bits give 0.25
        assert info.eps == ref.eps


@pytest.mark.parametrize("dt", dtypes.floats, ids=str)
def test_finfo_matches_ml_dtypes_and_numpy(dt: DType) -> None:
    np_type = getattr(ml_dtypes, dt.numpy_name) if dt.numpy_name and hasattr(ml_dtypes, dt.numpy_name) \
        else np.dtype(dt.numpy_name)
    info, ref = dtypes.finfo(dt), ml_dtypes.finfo(np_type)
    assert (info.exponent, info.mantissa) == (ref.nexp, ref.nmant)
    assert (info.eps, info.max, info.tiny) == (float(ref.eps), float(ref.max), float(ref.tiny))
    assert info.smallest_subnormal == float(ref.smallest_subnormal)


def test_finfo_unpacks_as_exponent_and_mantissa_bits() -> None:
    exponent, mantissa = dtypes.finfo(dtypes.float16)
    assert (exponent, mantissa) == (5, 10)
    assert tuple(dtypes.finfo("fp8e4m3")) == (4, 3)
    assert dtypes.finfo(dtypes.bfloat16) == (8, 7)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.bool, dtypes.uint8], ids=str)
def test_finfo_of_a_non_float_raises(dt: DType) -> None:
    with pytest.raises(DTypeError, match="not a floating point"):
        dtypes.finfo(dt)
