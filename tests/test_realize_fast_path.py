"""The realize path's per-call shortcuts (docs/jit.md, "What a realize costs"): a graph realized recently is found by
identity instead of walked again. Every result is checked against NumPy and, bit for bit, against
PLYGRAD_FORCE_BYTES, which serializes and schedules every realize (docs/design.md §2)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, nn, scheduling
from plygrad.frontend.realize_state import STATE
from plygrad.ir import Ops, StructuralKey, UOp, dtypes, structural_key
from plygrad.runtime import clear_plans

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(1)


def _f32(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype(np.float32)


def _counting_walks(monkeypatch: pytest.MonkeyPatch) -> list[UOp]:
    """Record every graph the realize path walks to normalize it."""
    walked: list[UOp] = []
    real: Callable[..., StructuralKey] = structural_key

    def counting(sink: UOp, *args: Any) -> StructuralKey:
        walked.append(sink)
        return real(sink, *args)

    monkeypatch.setattr(scheduling, "structural_key", counting)
    return walked


def _graph(x: Tensor, w: Tensor) -> Tensor:
    return ((x @ w).relu() * 2 - x.sum(1, keepdim=True)).exp2()


def test_a_graph_built_again_is_not_walked_again_and_equals_the_byte_path(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _f32(3, 4), _f32(4, 4)
    x, w = Tensor(a).realize(), Tensor(b).realize()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLYGRAD_FORCE_BYTES", "1")
        forced = _graph(x, w).numpy()
    walked = _counting_walks(monkeypatch)
    for _ in range(3):
        np.testing.assert_array_equal(_graph(x, w).numpy(), forced)
    assert len(walked) == 1, "the same graph (same nodes, same buffers) is normalized once"
    np.testing.assert_allclose(forced, np.exp2(np.maximum(a @ b, 0) * 2 - a.sum(1, keepdims=True)), rtol=1e-5)


def test_a_remembered_graph_never_answers_for_other_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    a, c = _f32(5), _f32(5)
    x, z = Tensor(a).realize(), Tensor(c).realize()
    walked = _counting_walks(monkeypatch)
    for _ in range(2):
        np.testing.assert_allclose((x * 3 + 1).numpy(), a * 3 + 1, rtol=1e-6)
        np.testing.assert_allclose((z * 3 + 1).numpy(), c * 3 + 1, rtol=1e-6)
        np.testing.assert_allclose((x * 3 + z).numpy(), a * 3 + c, rtol=1e-6)
        np.testing.assert_allclose((z * 3 + x).numpy(), c * 3 + a, rtol=1e-6)
    assert len(walked) == 4, "each graph is walked once, the second round finds all four"


def test_an_assign_built_again_after_it_ran_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same write built again after one ran is the same hash-consed ASSIGN node while anything still holds the
    first (here a variable; a schedule cache key equal to the graph did it before), and it must run again. Graphs
    with an ASSIGN are not remembered."""
    x = Tensor(np.zeros(3, np.float32)).realize()
    walked = _counting_walks(monkeypatch)
    held: list[UOp] = []
    for step in range(1, 4):
        pending = x.assign(x + 1)
        held.append(pending.uop)
        pending.realize()
        np.testing.assert_array_equal(x.numpy(), np.full(3, step, np.float32))
    assert held[0] is held[1] is held[2], "one node: x reads the same buffer each time"
    assert len(walked) == 3


def test_random_draws_are_fresh_and_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    walked = _counting_walks(monkeypatch)
    draws = [Tensor.rand(64).numpy() for _ in range(3)]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])
    assert len(walked) == 3


def test_a_graph_keeps_one_plan_per_scheduler_and_each_runs_its_own() -> None:
    a = _f32(4, 5)
    x = Tensor(a).realize()
    expected = np.exp2(a * 2 - a.sum(1, keepdims=True))
    for name in ("default", "unfused", "default", "unfused"):
        with Tensor.scheduler(name):
            np.testing.assert_allclose((x * 2 - x.sum(1, keepdim=True)).exp2().numpy(), expected, rtol=1e-5)
    graph = (x * 2 - x.sum(1, keepdim=True)).exp2().uop
    sink = UOp(Ops.SINK, dtypes.void, (graph,))
    norm = STATE.seen_graph(sink)
    assert norm is not None and len(norm.plans) == 2, "one plan per scheduler, both kept"
    plans = [plan for _, plan in norm.plans.values()]
    assert plans[0] is not plans[1] and plans[0].kernel_count < plans[1].kernel_count, "unfused runs more kernels"
    clear_plans()  # a fresh runtime: the graph's own plans are not used again
    np.testing.assert_allclose((x * 2 - x.sum(1, keepdim=True)).exp2().numpy(), expected, rtol=1e-5)
    assert all(plan is not plans[0] for _, plan in norm.plans.values()), "loaded again after clear_plans"


def test_an_embedding_lookup_reads_the_table_as_it_is_after_an_update() -> None:
    table = _f32(9, 4)
    layer = nn.Embedding(9, 4)
    layer.weight.assign(Tensor(table)).realize()
    ids = Tensor(np.array([[3, 0], [8, 3]], dtype=np.int32))
    np.testing.assert_array_equal(layer(ids).numpy(), table[[[3, 0], [8, 3]]])
    layer.weight.assign(layer.weight * 2).realize()  # the same Buffer, new values
    np.testing.assert_array_equal(layer(ids).numpy(), 2 * table[[[3, 0], [8, 3]]])
    layer.weight = Tensor(table + 1)  # another table
    np.testing.assert_array_equal(layer(ids).numpy(), table[[[3, 0], [8, 3]]] + 1)


def test_a_tensor_realized_twice_gets_its_undecided_gradient_once() -> None:
    x = Tensor(np.array([1.0, -2.0, 3.0], np.float32)).realize()
    t = (x * 2).realize()
    t.replace(x * 3).realize()  # realized again: recorded as an undecided leaf a second time
    (t * t).sum().backward()
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), 2 * 3 * np.array([1.0, -2.0, 3.0]), rtol=1e-6)


# ---- a plan runs again on its small output Buffer once the tensor holding it died (ExecPlan.bind) ------------------
def _buffer_of(t: Tensor) -> Any:
    (buf,) = t.inputs
    return buf


@pytest.mark.parametrize("n", [16, 65536])  # 64 B (always kept) and 256 KiB (kept within the plans' budget)
def test_an_output_buffer_and_its_view_serve_the_next_call_once_their_tensor_died(n: int) -> None:
    clear_plans()  # the budget is shared with every plan earlier tests kept
    data = _f32(n)
    x = Tensor(data).realize()
    y = (x + 1).realize()
    first, view = _buffer_of(y).id, y.uop
    del y
    again = (x + 1).realize()
    assert _buffer_of(again).id == first and again.uop is view
    np.testing.assert_array_equal(again.numpy(), data + 1)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 64), rounds=st.integers(2, 6), seed=st.integers(0, 2**16))
def test_a_live_output_is_never_run_over(n: int, rounds: int, seed: int) -> None:
    """Outputs of one plan held at once each keep their own values, while dropped ones are taken again."""
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(rounds)]
    kept: list[tuple[Tensor, Array]] = []
    for i, data in enumerate(inputs):
        out = (Tensor(data) * 3 - 1).realize()
        if i % 2 == 0:  # every other output stays alive
            kept.append((out, data * np.float32(3) - np.float32(1)))
        del out
    ids = [_buffer_of(t).id for t, _ in kept]
    assert len(set(ids)) == len(ids)
    for t, expected in kept:
        np.testing.assert_array_equal(t.numpy(), expected)


def test_a_big_output_is_not_kept_after_its_tensor_died() -> None:
    x = Tensor(_f32(300_000)).realize()  # 1.2 MB: above what a plan keeps (SPARE_MAX_BYTES)
    y = (x + 1).realize()
    ref = weakref.ref(_buffer_of(y))
    del y
    gc.collect()
    assert ref() is None


def test_clear_plans_lets_go_of_kept_buffers() -> None:
    x = Tensor(_f32(16)).realize()
    y = (x + 2).realize()
    ref = weakref.ref(_buffer_of(y))
    del y
    gc.collect()
    assert ref() is not None  # kept by the plan for its next run
    clear_plans()
    gc.collect()
    assert ref() is None


def test_a_kept_view_does_not_carry_an_old_tensors_gradient_graph() -> None:
    """A view autograd differentiated through (the realized `w * 2` of a tensor that requires grad) serves a later
    `w * 2` computed under no_grad: that one is a constant to autograd, whose gradient must not flow through it."""
    w = Tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    y1 = (w * 2).realize()
    view = y1.uop
    del y1
    with Tensor.test():
        y2 = (w * 2).realize()
    assert y2.uop is view and not y2.requires_grad
    (y2 * w).sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.array([1.0, -2.0, 3.0]), rtol=1e-6)
