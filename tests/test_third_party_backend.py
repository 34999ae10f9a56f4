"""A backend that is not the CPU, used as a third party would (tests/mycpu_backend.py): a tensor is computed on
the device it says, also when it is made from constants alone (`rand`, `arange`, `ones(...).contiguous()`), so
the next op on that device works and a whole training step runs there."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from mycpu_backend import installed_mycpu

from plygrad.frontend import Tensor, nn
from plygrad.frontend.nn import optim
from plygrad.ir import Ops
from plygrad.runtime import BackendError, Buffer


@pytest.fixture(autouse=True)
def _mycpu() -> Iterator[None]:
    with installed_mycpu():
        yield


def _buffer(t: Tensor) -> Buffer:
    (buf,) = t.realize().inputs
    return buf


CONSTANT_ONLY: list[tuple[str, Callable[[str], Tensor]]] = [
    ("rand", lambda d: Tensor.rand(4, device=d)),
    ("randn", lambda d: Tensor.randn(2, 3, device=d)),
    ("arange", lambda d: Tensor.arange(5, device=d)),
    ("ones contiguous", lambda d: Tensor.ones(3, device=d).contiguous()),
    ("full plus one", lambda d: Tensor.full((2, 2), 3.0, device=d) + 1),
    ("scalar", lambda d: Tensor(2.5, device=d) * 2),
    ("eye", lambda d: Tensor.eye(3, device=d)),
]


@pytest.mark.parametrize(("what", "make"), CONSTANT_ONLY, ids=[c[0] for c in CONSTANT_ONLY])
@pytest.mark.parametrize("scheduler", ["default", "unfused"])
def test_a_tensor_made_from_constants_is_computed_on_its_device(what: str, make: Callable[[str], Tensor],
                                                                scheduler: str) -> None:
    with Tensor.scheduler(scheduler):
        Tensor.manual_seed(3)
        mine = make("MYCPU")
        Tensor.manual_seed(3)
        cpu = make("CPU")
        assert mine.device == "MYCPU"
        assert _buffer(mine).device == "MYCPU"
        np.testing.assert_array_equal(mine.numpy(), cpu.numpy())


@pytest.mark.parametrize(("what", "make"), CONSTANT_ONLY, ids=[c[0] for c in CONSTANT_ONLY])
def test_the_next_op_runs_beside_another_tensor_of_the_device(what: str, make: Callable[[str], Tensor]) -> None:
    Tensor.manual_seed(5)
    mine = make("MYCPU").realize()
    shape = mine.shape
    other = Tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape), device="MYCPU")
    Tensor.manual_seed(5)
    want = make("CPU").numpy() + other.numpy()
    got = mine + other
    assert _buffer(got).device == "MYCPU"
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("scheduler", ["default", "unfused"])
def test_constant_only_tensors_of_two_devices_in_one_realize(scheduler: str) -> None:
    # `arange(4)` is one hash-consed graph node whatever device the tensor says: computed once per device
    with Tensor.scheduler(scheduler):
        a, b = Tensor.arange(4, device="MYCPU"), (Tensor.arange(4, device="CPU") * 2).contiguous()
        c, d = Tensor.arange(4, device="MYCPU").contiguous(), Tensor.arange(4, device="CPU").contiguous()
        a.realize(b, c, d)
    assert [_buffer(t).device for t in (a, b, c, d)] == ["MYCPU", "CPU", "MYCPU", "CPU"]
    for t, want in ((a, [0, 1, 2, 3]), (b, [0, 2, 4, 6]), (c, [0, 1, 2, 3]), (d, [0, 1, 2, 3])):
        np.testing.assert_array_equal(t.numpy(), want)


def test_a_constant_copied_to_another_device_lands_there() -> None:
    moved = Tensor.ones(3, device="MYCPU").contiguous().to("CPU")
    assert _buffer(moved).device == "CPU"
    np.testing.assert_array_equal(moved.numpy(), [1.0, 1.0, 1.0])


def test_the_schedule_of_a_constant_tensor_names_its_device_and_copies_nothing() -> None:
    linear = Tensor.arange(6, device="MYCPU").schedule()
    calls = linear.src
    assert [c.src[0].op for c in calls] == [Ops.SINK], "one kernel, no COPY"
    assert {b.arg.device for c in calls for b in c.src[1:] if b.op is Ops.BUFFER} == {"MYCPU"}


def test_a_constant_tensor_on_a_missing_default_device_raises_when_realized(monkeypatch: pytest.MonkeyPatch) -> None:
    # it used to run on the CPU silently
    monkeypatch.setenv("PLYGRAD_DEVICE", "FOO")
    with pytest.raises(BackendError, match=r"unknown device 'FOO'"):
        Tensor.rand(3).numpy()


def _train(device: str | None, steps: int = 3) -> tuple[list[float], list[np.ndarray]]:
    Tensor.manual_seed(11)
    model = nn.Linear(4, 3)
    opt = optim.Adam([model.weight, model.bias] if model.bias is not None else [model.weight], lr=0.05)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 4)).astype(np.float32), device=device)
    y = Tensor(rng.standard_normal((8, 3)).astype(np.float32), device=device)
    losses = []
    with Tensor.train():
        for _ in range(steps):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
    params = [model.weight, *([model.bias] if model.bias is not None else [])]
    for p in params:
        assert p.device == (device or "MYCPU") and _buffer(p).device == p.device
    return losses, [p.numpy() for p in params]


def test_linear_and_adam_train_on_the_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_DEVICE", "MYCPU")
    losses, params = _train(None)
    monkeypatch.delenv("PLYGRAD_DEVICE")
    want_losses, want_params = _train("CPU")
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    for got, want in zip(params, want_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
