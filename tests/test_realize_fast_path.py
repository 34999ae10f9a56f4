"""The realize path's per-call shortcuts (docs/jit.md, "What a realize costs"): a graph realized recently is found by
identity instead of walked again. Every result is checked against NumPy and, bit for bit, against
PLYGRAD_FORCE_BYTES, which serializes and schedules every realize (DESIGN.md §2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

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
