"""The shared graph facts (helpers.py, structure.py): the reduce identity against NumPy's empty reductions, views
down to their buffer, kernel names, and structural keys (buffers by rank, binds at their minimum, renamed
variables, and the map back)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from plygrad.ir import (
    BufferRef,
    DType,
    KernelInfo,
    Ops,
    UOp,
    dtypes,
    kernel_name,
    reduce_identity,
    strip_reshapes,
    structural_key,
    written_buffer,
)

VALUE_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.float16,
                dtypes.float32, dtypes.float64]


def _buffer(buffer_id: int, size: int = 6, dtype: DType = dtypes.float32) -> UOp:
    return UOp(Ops.BUFFER, dtype, (), BufferRef(buffer_id, "CPU", size))


def _view(x: UOp, op: Ops, arg: Any) -> UOp:
    return UOp(op, x.dtype, (x,), arg)


@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=str)
@pytest.mark.parametrize(("op", "numpy_reduce"), [(Ops.ADD, np.add), (Ops.MUL, np.multiply), (Ops.MAX, np.maximum)])
def test_reduce_identity_leaves_every_value_unchanged(dtype: DType, op: Ops, numpy_reduce: Any) -> None:
    np_dtype = np.dtype(dtype.name)
    identity = reduce_identity(op, dtype)
    if np_dtype.kind == "f":
        values = np.array([-math.inf, -3.5, -0.0, 0.0, 2.25, math.inf], np_dtype)
    elif np_dtype.kind == "b":
        values = np.array([False, True])
    else:
        info = np.iinfo(np_dtype)
        values = np.array([info.min, -1 if info.min < 0 else 0, 0, 1, info.max], np_dtype)
    combined = numpy_reduce(values, np.array(identity).astype(np_dtype))
    np.testing.assert_array_equal(combined, values)
    assert type(identity) is {"b": bool, "f": float}.get(np_dtype.kind, int)


def test_reduce_identity_of_max_is_the_smallest_value() -> None:
    assert reduce_identity(Ops.MAX, dtypes.float32) == -math.inf
    assert reduce_identity(Ops.MAX, dtypes.int8) == -128
    assert reduce_identity(Ops.MAX, dtypes.uint8) == 0
    assert reduce_identity(Ops.MAX, dtypes.bool) is False


def test_an_op_without_an_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="a REDUCE with op SUB has no identity element"):
        reduce_identity(Ops.SUB, dtypes.float32)


def test_strip_reshapes_stops_at_the_first_other_op() -> None:
    base = _buffer(0)
    flipped = _view(_view(base, Ops.RESHAPE, (2, 3)), Ops.FLIP, (True, False))
    assert strip_reshapes(_view(_view(base, Ops.RESHAPE, (2, 3)), Ops.RESHAPE, (6,))) is base
    assert strip_reshapes(_view(flipped, Ops.RESHAPE, (6,))) is flipped
    assert strip_reshapes(base) is base


def test_written_buffer_walks_views_and_earlier_assigns() -> None:
    buf = _buffer(3)
    region = _view(_view(buf, Ops.RESHAPE, (2, 3)), Ops.SHRINK, ((0, 1), (0, 3)))
    value = _view(_view(UOp.const(dtypes.float32, 1.0), Ops.RESHAPE, (1, 1)), Ops.EXPAND, (1, 3))
    first = UOp(Ops.ASSIGN, dtypes.float32, (region, value))
    assert written_buffer(first) is buf and written_buffer(region) is buf
    second = UOp(Ops.ASSIGN, dtypes.float32, (first, value))
    assert written_buffer(second) is buf


def test_written_buffer_refuses_a_target_that_is_not_a_view() -> None:
    computed = _buffer(0) + _buffer(1)
    with pytest.raises(ValueError, match="under ADD there is a ADD"):
        written_buffer(computed)


def test_kernel_name_reads_the_kernel_info_or_gives_the_default() -> None:
    named = UOp(Ops.SINK, dtypes.void, (), KernelInfo("E_4"))
    assert kernel_name(named) == "E_4"
    assert kernel_name(UOp(Ops.SINK, dtypes.void, (), KernelInfo(""))) == "<unnamed>"
    assert kernel_name(UOp(Ops.SINK, dtypes.void, ()), "kernel") == "kernel"


def _graph(a: int, b: int, n: int) -> UOp:
    var = UOp.variable("n", 1, 10)
    scaled = _buffer(a) * _view(_view(var.bind(n).cast(dtypes.float32), Ops.RESHAPE, (1,)), Ops.EXPAND, (6,))
    return UOp(Ops.SINK, dtypes.void, (scaled + _buffer(b),))


def test_structural_keys_ignore_buffer_ids_and_bound_values() -> None:
    first, second = structural_key(_graph(7, 9, 3)), structural_key(_graph(40, 2, 8))
    assert first.key is second.key
    assert first.buffer_ids == (7, 9) and second.buffer_ids == (40, 2)
    assert first.bound_values() == {"n": 3} and second.bound_values() == {"n": 8}
    assert {n.arg.id for n in first.key.toposort if n.op is Ops.BUFFER} == {0, 1}


def test_structural_keys_keep_sizes_and_dtypes() -> None:
    small = UOp(Ops.SINK, dtypes.void, (_buffer(0, 6) + _buffer(1, 6),))
    big = UOp(Ops.SINK, dtypes.void, (_buffer(0, 8) + _buffer(1, 8),))
    assert structural_key(small).key is not structural_key(big).key


def test_the_key_maps_back_to_the_graph() -> None:
    graph = _graph(7, 9, 3)
    found = structural_key(graph)
    assert found.key.substitute(found.back) is graph


def test_renamed_variables_are_named_back() -> None:
    def rename(var: UOp) -> UOp:
        return UOp.variable("k0", var.arg[1], var.arg[2], var.dtype)

    found = structural_key(_graph(0, 1, 5), rename)
    assert found.bound_values() == {"k0": 5} and found.variable_names() == {"k0": "n"}
