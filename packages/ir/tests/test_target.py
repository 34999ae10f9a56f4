"""`Target` and `TensorCore` (`plygrad.ir.target`): validation at construction, immutability, value semantics.

A Target crosses the runtime -> codegen boundary, so a bad one must fail where it is built, with the field named,
rather than deep inside a renderer.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

import pytest

from plygrad.ir.dtype import dtypes
from plygrad.ir.ops import Ops
from plygrad.ir.records import RECORD_TYPES
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.uop import UOp

F32, F16 = dtypes.float32, dtypes.float16
TC = TensorCore((16, 8, 16), F16, F32, 32)


def gpu(**changes: Any) -> Target:
    fields: dict[str, Any] = {
        "device": "CUDA", "renderer": "cuda", "arch": "sm_90", "has_local": True, "has_shared": True,
        "shared_max": 49152, "vector_widths": ((F32, (2, 4)), (F16, (2, 4, 8))), "tensor_cores": (TC,),
    }
    return Target(**(fields | changes))


def test_defaults_describe_a_plain_cpu() -> None:
    t = Target("CPU", "c")
    assert (t.has_local, t.has_shared, t.shared_max, t.threads, t.tensor_cores) == (False, False, 0, 1, ())
    assert t.supported_dtypes == dtypes.all()


BAD_FIELDS = [
    ("device", ""), ("device", 3), ("renderer", ""), ("renderer", None), ("arch", 90),
    ("has_local", "yes"), ("has_local", 1), ("has_shared", None),
    ("global_max", (1, 2)), ("global_max", (0, 1, 1)), ("global_max", (1.0, 1, 1)), ("global_max", (True, 1, 1)),
    ("global_max", [1, 1, 1]), ("local_max", (1, -1, 1)),
    ("max_threads_per_group", 0), ("max_threads_per_group", 1.5), ("max_threads_per_group", True),
    ("shared_max", -1), ("shared_max", 1.0), ("threads", 0), ("threads", -4),
    ("vector_widths", ((F32, (1,)),)), ("vector_widths", ((F32, [2, 4]),)), ("vector_widths", (("float32", (2,)),)),
    ("vector_widths", [(F32, (2,))]), ("vector_widths", ((F32,),)),
    ("supported_dtypes", [F32]), ("supported_dtypes", ("float32",)),
    ("tensor_cores", ((16, 8, 16),)), ("tensor_cores", [TC]),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=[f"{f}={v!r}" for f, v in BAD_FIELDS])
def test_a_bad_field_raises_value_error_naming_it(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"Target.{field} "):
        gpu(**{field: value})


BAD_TENSOR_CORES = [
    ({"dims": (16, 8)}, "dims"), ({"dims": (16, 0, 8)}, "dims"), ({"dims": (16, 8, 8.0)}, "dims"),
    ({"threads": 0}, "threads"), ({"threads": True}, "threads"), ({"dtype_in": "float16"}, "dtype_in"),
    ({"dtype_out": None}, "dtype_out"),
]


@pytest.mark.parametrize(("changes", "field"), BAD_TENSOR_CORES, ids=[str(c) for c, _ in BAD_TENSOR_CORES])
def test_a_bad_tensor_core_raises_value_error_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"TensorCore.{field} "):
        dataclasses.replace(TC, **changes)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Target)])
def test_targets_are_frozen(field: str) -> None:
    t = gpu()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(t, field, getattr(t, field))


def test_vector_widths_for() -> None:
    t = gpu()
    assert t.vector_widths_for(F32) == (2, 4) and t.vector_widths_for(F16) == (2, 4, 8)
    assert t.vector_widths_for(dtypes.int32) == ()  # not listed: scalar only
    assert t.vector_widths_for(dtypes.from_name("float")) == (2, 4)  # interned: the alias is the same dtype


def test_equal_fields_make_equal_targets_with_equal_hashes() -> None:
    a, b = gpu(), gpu()
    assert a is not b and a == b and hash(a) == hash(b)
    assert len({a, b}) == 1


@pytest.mark.parametrize(("field", "value"), [
    ("device", "CUDA:1"), ("arch", "sm_80"), ("has_shared", False), ("vector_widths", ((F32, (2,)),)),
    ("supported_dtypes", (F32,)), ("tensor_cores", ()), ("threads", 8), ("global_max", (1, 1, 1)),
])
def test_any_different_field_makes_a_different_target(field: str, value: Any) -> None:
    assert gpu(**{field: value}) != gpu()


def test_targets_as_uop_args_hash_cons() -> None:
    assert UOp(Ops.NOOP, dtypes.void, (), gpu()) is UOp(Ops.NOOP, dtypes.void, (), gpu())
    assert UOp(Ops.NOOP, dtypes.void, (), gpu()) is not UOp(Ops.NOOP, dtypes.void, (), gpu(threads=2))


def test_target_and_tensor_core_are_registered_records() -> None:
    assert RECORD_TYPES["Target"] is Target and RECORD_TYPES["TensorCore"] is TensorCore


@pytest.mark.skipif(importlib.util.find_spec("plygrad.ir.serialize") is None, reason="plygrad.ir.serialize not built")
@pytest.mark.parametrize("target", [Target("CPU", "c"), gpu(), gpu(supported_dtypes=(F32, F16), threads=16)],
                         ids=["cpu", "gpu", "gpu-narrow"])
def test_bytes_round_trip(target: Target) -> None:
    data = target.to_bytes()
    assert isinstance(data, bytes) and Target.from_bytes(data) == target
