"""TinyJit beyond plain replay: fresh random numbers on every replay, `prune=True`, and the JitErrors for the
footguns tinygrad checks (duplicate inputs, non-Tensor results, nothing to replay, nested jits, changed arguments).

Random results are compared bit for bit with the same function run without the jit from the same seed: a replay
must draw exactly the numbers the eager function draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from plygrad.frontend import DTypeError, ShapeError, Tensor, scheduling
from plygrad.frontend.jit import JitError, TinyJit
from plygrad.runtime import discovery

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(1)


def _f32(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype(np.float32)


def _outputs(fn: Callable[[Tensor], Tensor], inputs: list[Array], seed: int) -> list[Array]:
    Tensor.manual_seed(seed)
    return [fn(Tensor(x)).numpy() for x in inputs]


# ---- random numbers ---------------------------------------------------------------------------------------------
def _noisy(x: Tensor) -> Tensor:
    return x * Tensor.rand(*x.shape) + Tensor.randn(x.shape[0], 1)


def _dropout_mlp() -> Callable[[Tensor], Tensor]:
    w = Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)).realize()

    def forward(x: Tensor) -> Tensor:
        with Tensor.train():
            h = (x @ w).relu().dropout(0.5)
            return h.sum(1).dropout(0.25)

    return forward


@pytest.mark.parametrize("make", [lambda: _noisy, _dropout_mlp], ids=["rand_randn", "dropout"])
def test_replays_draw_the_numbers_the_plain_function_draws(make: Callable[[], Callable[[Tensor], Tensor]]) -> None:
    fn = make()
    inputs = [_f32(5, 4) for _ in range(5)]
    want = _outputs(fn, inputs, seed=11)
    got = _outputs(TinyJit(fn), inputs, seed=11)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)
    assert not np.array_equal(got[3], got[4]) or not np.array_equal(inputs[3], inputs[4])


def test_replays_are_fresh_for_the_same_input() -> None:
    jitted = TinyJit(lambda x: x + Tensor.rand(64))
    zeros = Tensor(np.zeros(64, np.float32))
    draws = [jitted(zeros).numpy() for _ in range(5)]
    assert jitted.captured is not None and jitted.captured.draws, "the recording logged its draw"
    for i in range(5):
        for j in range(i):
            assert not np.array_equal(draws[i], draws[j]), f"calls {j} and {i} drew the same numbers"


def test_manual_seed_between_replays_reseeds_them() -> None:
    fn = _noisy
    x = _f32(3, 2)
    jitted = TinyJit(fn)
    for seed in (1, 2, 3, 2):  # the last two are replays
        Tensor.manual_seed(seed)
        got = [jitted(Tensor(x)).numpy() for _ in range(2)]
        Tensor.manual_seed(seed)
        want = [fn(Tensor(x)).numpy() for _ in range(2)]
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)


def test_manual_seed_inside_the_function_is_refused() -> None:
    def reseeding(x: Tensor) -> Tensor:
        Tensor.manual_seed(0)
        return x + Tensor.rand(*x.shape)

    jitted = TinyJit(reseeding)
    jitted(Tensor(_f32(2)))
    with pytest.raises(JitError, match="manual_seed was called while the function was recorded"):
        jitted(Tensor(_f32(2)))


def test_draws_at_any_offset_and_seed_are_scheduled_once() -> None:
    """The offset and seed are kernel variables: a new draw is the same structure, so nothing is scheduled (or
    compiled) again."""
    calls: list[bytes] = []
    default = scheduling.find_scheduler("default")

    def counting(data: bytes) -> bytes:
        calls.append(data)
        return default(data)

    with discovery.installed(scheduling.SCHEDULERS, "counting", counting), Tensor.scheduler("counting"):
        for seed in (4, 5):
            Tensor.manual_seed(seed)
            for _ in range(3):
                Tensor.rand(37).realize()
    assert len(calls) == 1


def test_cached_draws_equal_the_byte_path(monkeypatch: pytest.MonkeyPatch) -> None:
    Tensor.manual_seed(9)
    cached = [Tensor.rand(6, 5).numpy(), (Tensor.rand(4) + Tensor.randn(4)).numpy()]
    monkeypatch.setenv("PLYGRAD_FORCE_BYTES", "1")
    Tensor.manual_seed(9)
    forced = [Tensor.rand(6, 5).numpy(), (Tensor.rand(4) + Tensor.randn(4)).numpy()]
    for c, f in zip(cached, forced, strict=True):
        np.testing.assert_array_equal(c, f)


def test_replays_are_fresh_under_force_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_FORCE_BYTES", "1")
    inputs = [_f32(3, 2) for _ in range(4)]
    want = _outputs(_noisy, inputs, seed=21)
    got = _outputs(TinyJit(_noisy), inputs, seed=21)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)


# ---- prune=True ---------------------------------------------------------------------------------------------------
def test_prune_drops_kernels_that_do_not_read_the_inputs() -> None:
    w = Tensor(_f32(8, 8)).realize()

    def f(x: Tensor) -> Tensor:
        table = (w.exp() * 2).contiguous().realize()  # the same every call
        return x @ table

    plain, pruned = TinyJit(f), TinyJit(f, prune=True)
    for _ in range(4):
        x = _f32(3, 8)
        want = x @ (np.exp(w.numpy()) * 2)
        np.testing.assert_allclose(plain(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(pruned(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert plain.captured is not None and pruned.captured is not None
    assert pruned.captured.pruned == 1
    assert pruned.captured.capture.kernel_count == plain.captured.capture.kernel_count - 1


def test_prune_keeps_kernels_that_draw_random_numbers() -> None:
    def f(x: Tensor) -> Tensor:
        noise = Tensor.rand(*x.shape).contiguous().realize()  # reads no input, but differs every call
        return x + noise

    inputs = [_f32(4) for _ in range(4)]
    want = _outputs(f, inputs, seed=3)
    jitted = TinyJit(f, prune=True)
    got = _outputs(jitted, inputs, seed=3)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)
    assert jitted.captured is not None and jitted.captured.pruned == 0


def test_prune_drops_an_update_that_reads_no_input() -> None:
    """tinygrad's meaning, documented: a step counter bumped in place without reading an argument is dropped."""
    def run(prune: bool) -> float:
        counter = Tensor(np.zeros(1, np.float32)).realize()

        def f(x: Tensor) -> Tensor:
            counter.assign(counter + 1).realize()
            return x * 2

        jitted = TinyJit(f, prune=prune)
        for _ in range(4):
            jitted(Tensor(_f32(2)))
        return float(counter.numpy()[0])

    assert run(prune=False) == 4.0
    assert run(prune=True) == 2.0, "the two replays skipped the counter's kernel"


# ---- JitErrors ----------------------------------------------------------------------------------------------------
def test_one_buffer_passed_twice_is_refused() -> None:
    jitted = TinyJit(lambda a, b: a + b)
    x = Tensor(_f32(3)).realize()
    with pytest.raises(JitError, match=r"argument 0 and argument 1 are the same Buffer"):
        jitted(x, x)
    with pytest.raises(JitError, match=r"argument 0 and argument 1\[0\] are the same Buffer"):
        jitted(x, [x.reshape(3, 1)])


def test_non_tensor_results_are_refused_at_the_recording() -> None:
    jitted = TinyJit(lambda x: ((x * 2).sum(), 3.5))
    jitted(Tensor(_f32(3)))
    with pytest.raises(JitError, match=r"the return value\[1\] is a float \(3.5\)"):
        jitted(Tensor(_f32(3)))


def test_a_function_that_runs_nothing_is_refused() -> None:
    jitted = TinyJit(lambda x: x)
    x = Tensor(_f32(3)).realize()
    jitted(x)
    with pytest.raises(JitError, match="ran no kernel while it was recorded"):
        jitted(x)


def test_a_jit_called_while_another_records_is_refused() -> None:
    inner = TinyJit(lambda x: x + 1)
    outer = TinyJit(lambda x: inner(x) * 2)
    outer(Tensor(_f32(2)))
    with pytest.raises(JitError, match="called while another TinyJit records"):
        outer(Tensor(_f32(2)))


def test_changed_arguments_are_jit_errors_of_the_usual_kinds() -> None:
    jitted = TinyJit(lambda x: x * 2)
    for _ in range(2):
        jitted(Tensor(_f32(2, 3)))
    with pytest.raises(JitError) as shape:
        jitted(Tensor(_f32(3, 2)))
    assert isinstance(shape.value, ShapeError)
    with pytest.raises(JitError) as dtype:
        jitted(Tensor(np.ones((2, 3), np.int32)))
    assert isinstance(dtype.value, DTypeError)
    with pytest.raises(JitError, match="the Tensor arguments changed") as moved:
        jitted(x=Tensor(_f32(2, 3)))
    assert isinstance(moved.value, ValueError)
