"""TinyJit (record on the second call, replay after) and the realize path's per-structure schedule/plan cache.

Every replayed result is checked against the same function run without the jit (or against NumPy), and the
cached realize path against PLYGRAD_FORCE_BYTES, which serializes and schedules every realize (docs/design.md §2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, dtypes, scheduling
from plygrad.frontend.jit import TinyJit
from plygrad.ir import DTypeError, ShapeError
from plygrad.runtime import GlobalCounters, discovery

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(0)


def _f32(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype(np.float32)


def _no_more_scheduling(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, any realize that schedules fails the test: a replay must not schedule."""
    def refuse(*args: Any) -> Any:
        raise AssertionError("a replay scheduled a graph")
    monkeypatch.setattr(scheduling, "run", refuse)


# ---- TinyJit ----------------------------------------------------------------------------------------------------
def test_replay_matches_the_function_on_new_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return (a * b + 1).sum(0), (a - b).relu()

    for i in range(5):
        a, b = _f32(3, 4), _f32(3, 4)
        if i == 2:
            _no_more_scheduling(monkeypatch)
            GlobalCounters.reset()
        s, d = f(Tensor(a), Tensor(b))
        np.testing.assert_allclose(s.numpy(), (a * b + 1).sum(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d.numpy(), np.maximum(a - b, 0), rtol=1e-6)
    assert f.cnt == 5 and f.captured is not None
    assert GlobalCounters.kernel_count == 3 * f.captured.capture.kernel_count, "replays launch only recorded kernels"


def test_keyword_list_and_dict_arguments_are_inputs() -> None:
    @TinyJit
    def f(xs: list[Tensor], *, scale: dict[str, Tensor], k: float = 2.0) -> dict[str, Any]:
        return {"out": (xs[0] + xs[1]) * scale["s"] * k, "none": None}

    for _ in range(4):
        a, b, s = _f32(5), _f32(5), _f32(5)
        out = f([Tensor(a), Tensor(b)], scale={"s": Tensor(s)}, k=2.0)
        assert out["none"] is None
        np.testing.assert_allclose(out["out"].numpy(), (a + b) * s * 2.0, rtol=1e-6)


def test_non_tensor_arguments_are_frozen_at_the_recording() -> None:
    @TinyJit
    def f(a: Tensor, k: float) -> Tensor:
        return a * k

    a = _f32(4)
    f(Tensor(a), 2.0)
    f(Tensor(a), 2.0)
    np.testing.assert_allclose(f(Tensor(a), 3.0).numpy(), a * 2.0, rtol=1e-6)


def test_outputs_are_overwritten_by_the_next_call() -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a + 1

    for _ in range(2):
        f(Tensor(_f32(3)))
    first = f(Tensor(np.zeros(3, np.float32)))
    f(Tensor(np.ones(3, np.float32)))
    np.testing.assert_array_equal(first.numpy(), np.full(3, 2.0, np.float32))


def test_an_output_passed_back_in_is_read_before_it_is_overwritten() -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a.flip(0) + a.sum()

    x = np.arange(4, dtype=np.float32)
    want, got = x, Tensor(x)
    for _ in range(5):
        want = want[::-1] + want.sum()
        got = f(got)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_returned_input_is_the_new_input() -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return a, a * b

    for _ in range(4):
        a, b = _f32(2, 2), _f32(2, 2)
        same, prod = f(Tensor(a), Tensor(b))
        np.testing.assert_array_equal(same.numpy(), a)
        np.testing.assert_allclose(prod.numpy(), a * b, rtol=1e-6)


def test_wrong_shape_dtype_or_arguments_are_clear_errors() -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 2

    for _ in range(2):
        f(Tensor(_f32(2, 3)))
    with pytest.raises(ShapeError, match=r"argument 0 has shape \(3, 2\), but shape \(2, 3\) was recorded"):
        f(Tensor(_f32(3, 2)))
    with pytest.raises(DTypeError, match=r"argument 0 has dtype .*int32.*float32 was recorded"):
        f(Tensor(np.ones((2, 3), np.int32)))
    with pytest.raises(ValueError, match="the Tensor arguments changed"):
        f(a=Tensor(_f32(2, 3)))
    f.reset()
    for _ in range(3):
        np.testing.assert_array_equal(f(Tensor(np.ones(4, np.int32))).numpy(), np.full(4, 2, np.int32))


def test_decorated_method_binds_the_instance() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = Tensor(_f32(3, 2)).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return x @ self.w

    model = Model()
    for _ in range(4):
        x = _f32(4, 3)
        np.testing.assert_allclose(model(Tensor(x)).numpy(), x @ model.w.numpy(), rtol=1e-5, atol=1e-6)


def _regression_step(w0: Array) -> tuple[Tensor, Callable[[Tensor, Tensor], Tensor]]:
    """One SGD step of a linear regression in plain Tensor ops (parameters updated in place with assign)."""
    w = Tensor(w0.copy(), requires_grad=True).realize()

    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        assert w.grad is not None
        w.assign(w.detach() - 0.1 * w.grad)
        w.grad = None
        w.realize()
        return loss

    return w, step


def test_a_jitted_training_step_trains_like_the_plain_one() -> None:
    w0 = _f32(4, 3)
    w_plain, plain = _regression_step(w0)
    w_jit, step = _regression_step(w0)
    jitted = TinyJit(step)
    for _ in range(5):
        x, y = _f32(8, 4), _f32(8, 3)
        np.testing.assert_allclose(jitted(Tensor(x), Tensor(y)).numpy(), plain(Tensor(x), Tensor(y)).numpy(),
                                   rtol=1e-5)
    np.testing.assert_allclose(w_jit.numpy(), w_plain.numpy(), rtol=1e-5, atol=1e-6)


def test_nn_linear_and_sgd_train_the_same_under_the_jit() -> None:
    nn = pytest.importorskip("plygrad.frontend.nn")
    optim = pytest.importorskip("plygrad.frontend.nn.optim")

    def make() -> tuple[list[Tensor], Callable[[Tensor, Tensor], Tensor]]:
        layer = nn.Linear(4, 2)
        layer.weight.assign(Tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))).realize()
        params = [layer.weight, layer.bias]
        opt = optim.SGD(params, lr=0.05, momentum=0.9)

        def step(x: Tensor, y: Tensor) -> Tensor:
            with Tensor.train():
                opt.zero_grad()
                loss = ((layer(x) - y) ** 2).mean()
                loss.backward()
                opt.step()
                return loss

        return params, step

    (p_plain, plain), (p_jit, step) = make(), make()
    p_jit[1].assign(p_plain[1]).realize()
    jitted = TinyJit(step)
    for _ in range(4):
        x, y = _f32(6, 4), _f32(6, 2)
        np.testing.assert_allclose(jitted(Tensor(x), Tensor(y)).numpy(), plain(Tensor(x), Tensor(y)).numpy(),
                                   rtol=1e-5)
    for a, b in zip(p_jit, p_plain, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_frozen_random_replays_the_recorded_numbers() -> None:
    """(Fresh numbers on every replay, the default, are tested in test_jit_extras.py.)"""
    def noisy(a: Tensor) -> Tensor:
        return a + Tensor.rand(*a.shape)

    frozen = TinyJit(noisy, frozen_random=True)
    zeros = Tensor(np.zeros(3, np.float32))
    frozen(zeros)
    recorded = frozen(zeros).numpy()
    np.testing.assert_array_equal(frozen(zeros).numpy(), recorded)


# ---- the realize path: one schedule and plan per graph structure --------------------------------------------------
def _counting_scheduler(calls: list[bytes]) -> Callable[[bytes], bytes]:
    default = scheduling.find_scheduler("default")

    def schedule(data: bytes) -> bytes:
        calls.append(data)
        return default(data)

    return schedule


def test_a_structure_is_scheduled_once_whatever_its_buffers() -> None:
    calls: list[bytes] = []
    with discovery.installed(scheduling.SCHEDULERS, "counting", _counting_scheduler(calls)), \
            Tensor.scheduler("counting"):
        for _ in range(3):
            a = _f32(7)
            np.testing.assert_allclose((Tensor(a) * 3 - 1).numpy(), a * 3 - 1, rtol=1e-6)
        assert len(calls) == 1
        (Tensor(_f32(8)) * 3 - 1).realize()
        (Tensor(np.ones(7, np.int32)) * 3 - 1).realize()
        assert len(calls) == 3, "another size or dtype is another structure"


def test_force_bytes_schedules_every_realize(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_FORCE_BYTES", "1")
    calls: list[bytes] = []
    with discovery.installed(scheduling.SCHEDULERS, "counting", _counting_scheduler(calls)), \
            Tensor.scheduler("counting"):
        for _ in range(2):
            (Tensor(_f32(7)) + 1).realize()
    assert len(calls) == 2


def _program(a: Tensor, b: Tensor) -> list[Tensor]:
    s = (a * b).sum(1, keepdim=True)
    return [s, (a - s).exp(), a.max(0), (a @ b.T).relu(), a.reshape(-1)[1:5].cast(dtypes.int32)]


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_cached_realize_equals_the_byte_path(rows: int, cols: int, seed: int) -> None:
    """The in-process fast path (no bytes on a cache hit) gives bit-identical results to PLYGRAD_FORCE_BYTES."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((rows, cols), dtype=np.float32), rng.standard_normal((rows, cols), dtype=np.float32)
    cols_ok = rows * cols >= 5
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLYGRAD_FORCE_BYTES", "1")
        forced = [t.numpy() for t in _program(Tensor(a), Tensor(b))[: 5 if cols_ok else 4]]
    for _ in range(2):  # the second time every structure is a cache hit
        cached = [t.numpy() for t in _program(Tensor(a), Tensor(b))[: 5 if cols_ok else 4]]
        for got, want in zip(cached, forced, strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_buffer_read_twice_in_one_graph_keeps_its_rank() -> None:
    a = Tensor(_f32(3)).realize()
    b = Tensor(_f32(3)).realize()
    for x, y in ((a, b), (b, a), (a, a)):
        np.testing.assert_allclose((x - y * 2).numpy(), x.numpy() - y.numpy() * 2, rtol=1e-6)
