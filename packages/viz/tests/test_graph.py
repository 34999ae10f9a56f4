"""The schedule graph's layout: dataflow edges, depths as layers, collapsing above the cap."""

from __future__ import annotations

import base64
import time
from typing import Any

from viz_synthetic import chain_linear, kernel_record

from plygrad.ir import Stage, serialize
from plygrad.viz.graph import X_STEP, layout


def _schedule(calls: int, fan: int = 1) -> dict[str, Any]:
    linear = chain_linear(calls, fan=fan)
    return {"linear": base64.b64encode(serialize(linear, Stage.SCHEDULE)).decode(), "calls": [0] * calls,
            "producer": None}


def test_a_chain_is_one_node_per_layer() -> None:
    graph = layout(_schedule(3), [kernel_record("add")])
    assert [(n["x"], n["y"], n["label"]) for n in graph["nodes"]] == [(0, 0, "add"), (X_STEP, 0, "add"),
                                                                      (2 * X_STEP, 0, "add")]
    assert graph["edges"] == [(0, 1), (1, 2)] and graph["layers"] == 3 and not graph["collapsed"]


def test_independent_calls_share_a_layer() -> None:
    graph = layout(_schedule(6, fan=3), [kernel_record("add")])
    assert graph["layers"] == 2
    assert sorted((n["x"], n["y"]) for n in graph["nodes"])[:3] == [(0, 0), (0, 30), (0, 60)]
    assert graph["edges"] == [(0, 3), (1, 4), (2, 5)]


def test_ten_thousand_calls_collapse_under_the_cap_quickly() -> None:
    schedule = _schedule(10_000, fan=50)  # 200 layers of 50
    start = time.perf_counter()
    graph = layout(schedule, [kernel_record("add")], cap=500)
    assert time.perf_counter() - start < 5.0
    assert graph["collapsed"] and graph["calls"] == 10_000
    assert len(graph["nodes"]) <= 500 + 200 and len(graph["edges"]) <= 2000
    assert sum(n["count"] for n in graph["nodes"]) == 10_000, "every CALL is some node"
