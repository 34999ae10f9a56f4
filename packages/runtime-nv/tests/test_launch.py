"""The launch side of the CUDA program contract: the kernelParams array and the grid/block checks."""

from __future__ import annotations

import ctypes

import pytest

from plygrad.backends.nv.launch import LaunchLimits, launch_dims, pack_arguments
from plygrad.runtime.errors import BackendError


def _read(address: int | None, size: int) -> int:
    assert address, "a null entry in kernelParams"
    return {4: ctypes.c_int32, 8: ctypes.c_int64}[size].from_address(address).value


def test_params_point_at_each_buffer_then_each_variable() -> None:
    buffers, vals = [0x7F0000001000, 0x7F0000002000, 0], [7, -3]
    packed = pack_arguments(buffers, vals)
    assert len(packed.params) == 5
    assert [type(v) for v in packed.values] == [ctypes.c_uint64] * 3 + [ctypes.c_int64] * 2
    for slot, value in zip(packed.params, packed.values, strict=True):
        assert slot == ctypes.addressof(value), "params[i] must be the address of argument i"
    assert [packed.values[i].value for i in range(5)] == [*buffers, *vals]
    assert [ctypes.c_uint64.from_address(packed.params[i] or 0).value for i in range(3)] == buffers
    assert [_read(packed.params[i], 8) for i in (3, 4)] == vals


def test_variables_take_the_width_the_kernel_declares() -> None:
    packed = pack_arguments([0x1000], [5, 2**40], param_sizes=(8, 4, 8))
    assert [type(v) for v in packed.values] == [ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64]
    assert _read(packed.params[1], 4) == 5 and _read(packed.params[2], 8) == 2**40


def test_no_arguments_is_an_empty_array() -> None:
    packed = pack_arguments([], [])
    assert len(packed.params) == 0 and packed.values == ()


def test_a_count_mismatch_names_the_program_and_both_counts() -> None:
    with pytest.raises(BackendError, match=r"'E_4' takes 3 parameters, but the launch gives 2 buffers and 0 var"):
        pack_arguments([1, 2], [], param_sizes=(8, 8, 8), name="E_4")


@pytest.mark.parametrize(("sizes", "vals", "message"), [
    ((4, 8), [1], r"parameter 0 \(a buffer\) is 4 bytes wide.*as 8 bytes"),
    ((8, 2), [1], r"parameter 1 \(a variable\) is 2 bytes wide.*as 4 or 8 bytes"),
    ((8, 4), [2**31], r"variable 0 = 2147483648 does not fit its 32-bit parameter"),
])
def test_parameters_outside_the_contract_are_refused(sizes: tuple[int, ...], vals: list[int], message: str) -> None:
    with pytest.raises(BackendError, match=message):
        pack_arguments([0x1000], vals, param_sizes=sizes, name="k")


def test_a_misaligned_buffer_pointer_is_refused() -> None:
    """Kernels make 16-byte vector accesses where an index is a multiple of the width: only an aligned start keeps
    them aligned (the program contract, docs/codegen.md §5)."""
    pack_arguments([0x1000, 0x7F0000000010, 0], [])
    with pytest.raises(BackendError, match=r"'E_4': buffer 1 is at 0x1008, not a multiple of 16 bytes"):
        pack_arguments([0x1000, 0x1008], [], name="E_4")


def test_grid_is_the_global_size_and_block_the_local_size() -> None:
    assert launch_dims((4, 2, 1), (256, 1, 1), LaunchLimits()) == ((4, 2, 1), (256, 1, 1))
    assert launch_dims((1, 1, 1), None, LaunchLimits()) == ((1, 1, 1), (1, 1, 1))


@pytest.mark.parametrize(("global_size", "local_size", "message"), [
    ((1, 1, 1), (64, 32, 1), r"2048 threads per block \(at most 1024\)"),
    ((1, 1, 1), (1, 1, 128), r"block \(1, 1, 128\)"),
    ((1, 70000, 1), (1, 1, 1), r"grid \(1, 70000, 1\)"),
    ((0, 1, 1), (1, 1, 1), r"grid \(0, 1, 1\)"),
])
def test_sizes_beyond_the_device_limits_are_refused(global_size: tuple[int, int, int],
                                                    local_size: tuple[int, int, int], message: str) -> None:
    with pytest.raises(BackendError, match=rf"CUDA program 'r_8' cannot launch.*{message}"):
        launch_dims(global_size, local_size, LaunchLimits(), name="r_8")
