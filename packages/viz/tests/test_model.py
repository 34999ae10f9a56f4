"""Reading a trace and the figures the reports share: kernel times, shares and rates; memory and its peak."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from viz_synthetic import three_kernel_trace

from plygrad.viz import TraceError, kernel_stats, load, memory, parse, summary


def test_kernel_stats_add_launches_and_rank_by_time() -> None:
    stats = kernel_stats(parse(three_kernel_trace()))
    assert [(s.name, s.launches, s.total_ns) for s in stats] == [("k0", 2, 40_000), ("k1", 1, 20_000),
                                                                 ("k2", 1, 5_000)], "k2's device time counts"
    assert sum(s.share for s in stats) == pytest.approx(1.0)
    assert stats[0].share == pytest.approx(40 / 65)
    assert stats[0].gflops == pytest.approx(2 * 1000 / 40e-6 * 1e-9)
    assert stats[2].gbs == pytest.approx(4000 / 5e-6 * 1e-9)


def test_memory_peak_and_what_was_live_then() -> None:
    cpu = memory(parse(three_kernel_trace()))["CPU"]
    # 4096 -> 5120 (peak) -> 1024 -> 3072 -> 3584 -> 2560; the free of a buffer never seen allocated is ignored
    assert [live for _, live in cpu.points] == [4096, 5120, 1024, 3072, 3584, 2560, 2560]
    assert (cpu.peak, cpu.peak_ns) == (5120, 110_000)
    assert [(a.buffer_id, a.nbytes, a.site) for a in cpu.at_peak] == [(1, 4096, "script.py:3"),
                                                                      (2, 1024, "script.py:3")]


def test_summary() -> None:
    figures = summary(parse(three_kernel_trace()))
    assert figures["launches"] == 4 and figures["kernels"] == 3 and figures["kernel_ns"] == 65_000
    assert figures["device_timed"] is False, "only one launch has a device time"
    assert figures["peak_bytes"] == {"CPU": 5120}
    assert figures["build_ns"] == 70_000


def test_load_reads_gzipped_and_plain_json(tmp_path: Path) -> None:
    data = three_kernel_trace()
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    (tmp_path / "t.json").write_text(json.dumps(data))
    assert load(tmp_path / "t.json.gz").data == load(tmp_path / "t.json").data == data


def test_tables_a_trace_may_lack_read_as_empty() -> None:
    data = three_kernel_trace()
    del data["builds"], data["contents"]
    trace = parse(data)
    assert trace.table("builds") == [] and trace.table("contents") == []
    assert summary(trace)["build_ns"] == 0


def _broken(**change: Any) -> dict[str, Any]:
    data = three_kernel_trace()
    data.update(change)
    return data


@pytest.mark.parametrize(("data", "message"), [
    ({"format": "other"}, "not a plygrad trace"),
    (_broken(version=[2, 0]), "trace version 2.0 needs a reader of major 2"),
    (_broken(version="1.0"), "is not \\[major, minor\\]"),
    (_broken(launches=[[7, 0, 1, 2, None]]), "launches\\[0\\] names kernel 7, but the trace has 3"),
    (_broken(launches=[[0, 0, 5, 2, None]]), "start <= end"),
    (_broken(markers=[[1]]), "markers\\[0\\] must be a list of 2 fields"),
    (_broken(kernels="none"), "\"kernels\" must be a list"),
])
def test_bad_traces_are_refused_with_the_reason(data: dict[str, Any], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse(data, "bad.json")


def test_a_file_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "x.gz").write_bytes(b"\x1f\x8bnot really")
    with pytest.raises(TraceError, match="not readable as gzipped or plain JSON"):
        load(tmp_path / "x.gz")
