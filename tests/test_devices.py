"""Device names: every spelling of an installed backend works, and an unknown one fails where the tensor is made
(not silently computing on the CPU), with an error naming the device and the backends found."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from plygrad.frontend import Tensor
from plygrad.runtime import BackendError, Device

MAKERS: list[tuple[str, Callable[[str], Tensor]]] = [
    ("from a list", lambda d: Tensor([1, 2], device=d)),
    ("from an array", lambda d: Tensor(np.ones(3, np.float32), device=d)),
    ("from a scalar", lambda d: Tensor(2.0, device=d)),
    ("ones", lambda d: Tensor.ones(2, device=d)),
    ("zeros", lambda d: Tensor.zeros(2, 2, device=d)),
    ("full", lambda d: Tensor.full((2,), 3.0, device=d)),
    ("arange", lambda d: Tensor.arange(4, device=d)),
    ("rand", lambda d: Tensor.rand(3, device=d)),
    ("empty", lambda d: Tensor.empty(3, device=d)),
    ("to", lambda d: Tensor([1.0]).to(d)),
    ("from a tensor", lambda d: Tensor(Tensor([1.0]), device=d)),
]


@pytest.mark.parametrize(("what", "make"), MAKERS, ids=[m[0] for m in MAKERS])
def test_an_unknown_device_raises_where_the_tensor_is_made(what: str, make: Callable[[str], Tensor]) -> None:
    with pytest.raises(BackendError, match=r"'FOO'.*backends found: .*CPU"):
        make("FOO")


@pytest.mark.parametrize("name", ["foo:1", "Bogus"])
def test_the_error_names_the_device_as_written(name: str) -> None:
    base = name.partition(":")[0].upper()
    with pytest.raises(BackendError, match=re.escape(f"device {name!r}: no backend named {base!r}")):
        Tensor([1.0], device=name)


def test_a_malformed_device_name_raises() -> None:
    with pytest.raises(BackendError, match="must look like"):
        Tensor([1.0], device="CPU:x")


@pytest.mark.parametrize("name", ["CPU", "cpu", "CPU:0", "cpu:0"])
def test_every_spelling_of_the_cpu_is_the_cpu(name: str) -> None:
    t = Tensor([1.0, 2.0], device=name) + 1
    assert t.device == "CPU"
    np.testing.assert_array_equal(t.numpy(), [2.0, 3.0])
    assert Tensor([1.0]).to(name).device == "CPU"


def test_a_second_cpu_device_still_works() -> None:
    t = Tensor([1.0, 2.0], device="cpu:1")
    assert t.device == "CPU:1"
    np.testing.assert_array_equal(t.to("CPU").numpy(), [1.0, 2.0])


def test_copies_between_cpu_devices_use_the_allocators_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    """COPY asks the destination allocator for a direct transfer first (NV: device to device or peer); the CPU
    backend does one memmove between CPU and CPU:1, no staging through a host bytearray."""
    from plygrad.backends.cpu.allocator import CFFIAllocator

    calls = []
    transfer = CFFIAllocator.transfer

    def counted(self: CFFIAllocator, *args: object) -> bool:
        result = transfer(self, *args)  # type: ignore[arg-type]
        calls.append(result)
        return result

    monkeypatch.setattr(CFFIAllocator, "transfer", counted)
    x = np.random.default_rng(0).standard_normal((3, 70)).astype(np.float32)
    moved = (Tensor(x, device="CPU:1") * 2).to("CPU") + 1
    np.testing.assert_array_equal(moved.numpy(), x * 2 + 1)
    assert calls and all(calls)


def test_an_unknown_default_device_fails_when_realized(monkeypatch: pytest.MonkeyPatch) -> None:
    # naming the default opens nothing (graphs can be built with no backend installed); running on it raises
    monkeypatch.setenv("PLYGRAD_DEVICE", "FOO")
    with pytest.raises(BackendError, match=r"'FOO'.*backends found: .*CPU"):
        (Tensor([1.0, 2.0]) + 1).numpy()
    monkeypatch.setenv("PLYGRAD_DEVICE", "cpu")
    assert Tensor([1.0]).device == "CPU"


def test_the_registry_lists_what_the_error_lists() -> None:
    with pytest.raises(BackendError) as info:
        Tensor.ones(1, device="FOO")
    for name in Device.records():
        assert name in str(info.value)
