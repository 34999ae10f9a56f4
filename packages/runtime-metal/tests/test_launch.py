"""The launching side of the Metal program contract: threadgroups and threads from a PROGRAM's sizes, checked
against the pipeline and the device, and each variable as the 8 bytes of a little-endian `long`."""

from __future__ import annotations

import pytest

from plygrad.backends.metal.launch import (
    MAX_BINDINGS,
    argument_struct,
    launch_dims,
    uses_argument_struct,
    variable_bytes,
)
from plygrad.runtime.errors import BackendError


def test_variables_are_eight_little_endian_bytes_each() -> None:
    assert variable_bytes([5, -1, 2**40], buffers=3) == [
        (5).to_bytes(8, "little"), b"\xff" * 8, (2**40).to_bytes(8, "little")]
    assert variable_bytes([], buffers=0) == []


def test_more_than_31_bindings_are_one_argument_struct() -> None:
    assert not uses_argument_struct(30, 1) and uses_argument_struct(30, 2) and uses_argument_struct(32, 0)
    with pytest.raises(BackendError, match=rf"30 buffers and 2 variables need 32 bindings, Metal has {MAX_BINDINGS}"):
        variable_bytes([1, 2], buffers=30, name="k")
    struct = argument_struct([0x1000, 0x2000], [-2, 7])
    assert struct == b"".join(v.to_bytes(8, "little", signed=True) for v in (0x1000, 0x2000, -2, 7))
    with pytest.raises(BackendError, match="4104-byte argument struct, setBytes passes 4096"):
        argument_struct([0x1000] * 513, [])


def test_values_beyond_a_long_are_refused() -> None:
    with pytest.raises(BackendError, match="variable 0 = 9223372036854775808 does not fit"):
        variable_bytes([2**63], buffers=1)
    with pytest.raises(BackendError, match="variable 1 = -9223372036854775809 does not fit"):
        argument_struct([0x1000] * 40, [0, -(2**63) - 1])


def test_launch_dims_are_threadgroups_and_threads() -> None:
    assert launch_dims((4, 2, 1), (16, 8, 1), 1024, (1024, 1024, 1024)) == ((4, 2, 1), (16, 8, 1))
    assert launch_dims((1, 1, 1), None, 1024, (1024, 1024, 1024)) == ((1, 1, 1), (1, 1, 1))


def test_a_launch_the_pipeline_cannot_run_names_its_sizes() -> None:
    with pytest.raises(BackendError, match=r"'heavy'.*1024 threads per threadgroup \(this pipeline allows 512\)"):
        launch_dims((1, 1, 1), (1024, 1, 1), 512, (1024, 1024, 1024), name="heavy")
    with pytest.raises(BackendError, match=r"threadgroup \(1, 1, 2048\)"):
        launch_dims((1, 1, 1), (1, 1, 2048), 4096, (1024, 1024, 1024))
    with pytest.raises(BackendError, match=r"grid \(0, 1, 1\)"):
        launch_dims((0, 1, 1), (1, 1, 1), 1024, (1024, 1024, 1024))
