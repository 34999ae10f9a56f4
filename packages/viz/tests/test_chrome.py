"""chrome_trace.json: one complete event per launch on its device's track, markers, memory counters, nesting."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from viz_synthetic import three_kernel_trace

from plygrad.viz import chrome_trace, parse, write_chrome_trace


def _nest(events: list[dict[str, Any]]) -> None:
    """Events of one (pid, tid) track are disjoint or one inside the other, never partly overlapping."""
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        open_ends: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"span {start}..{end} overlaps its parent partly"
            open_ends.append(end)


def test_events_per_launch_marker_and_memory(tmp_path: Path) -> None:
    data = three_kernel_trace()
    path = write_chrome_trace(parse(data), tmp_path / "chrome_trace.json")
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == len(data["launches"])
    assert [e["name"] for e in kernels] == ["k0", "k1", "k2", "k0"]
    assert kernels[1]["ts"] == 130.0 and kernels[1]["dur"] == 20.0, "microseconds"
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {names[e["pid"]] for e in kernels} == {"CPU"}
    assert [e["name"] for e in events if e["ph"] == "i"] == ["epoch 1"]
    counters = [e["args"]["bytes"] for e in events if e["ph"] == "C"]
    assert max(counters) == 5120
    assert [e["name"] for e in events if e.get("cat") == "copy"] == ["copy DISK -> CPU"]
    assert [(e["ts"], e["dur"]) for e in events if e.get("cat") == "build"] == [(20.0, 70.0)]
    _nest(events)


def test_nesting_check_catches_a_partial_overlap() -> None:
    data = three_kernel_trace()
    data["launches"][1][2] = 115_000  # starts inside k0's first launch, ends after it
    events = chrome_trace(parse(data))["traceEvents"]
    try:
        _nest(events)
    except AssertionError:
        return
    raise AssertionError("an overlapping launch passed the nesting check")
