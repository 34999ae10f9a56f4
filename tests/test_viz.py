"""plygrad-viz end to end on the CPU backend: VIZ=1 on a real script, record() in process, the memory peak of a
known allocation sequence, jit replays, and no recorder when VIZ is off (docs/viz.md)."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import plygrad.viz
from plygrad.frontend import Tensor
from plygrad.frontend.jit import TinyJit
from plygrad.ir import dtypes
from plygrad.runtime import Buffer, GlobalCounters, trace
from plygrad.viz.testing import dump_dom, find_chromium, page_state, png_variance, screenshot

HERE = Path(__file__).resolve().parent
RESOURCE = re.compile(r"<(script|link|img|iframe|object|embed)[^>]+(src|href|data)\s*=", re.I)
DATA = re.compile(r'<script type="application/json" id="trace-data">.*?</script>', re.S)


def run_script(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """tests/viz_script.py under VIZ=1 in `tmp_path`; returns the process and what the script reported."""
    clean = {k: v for k, v in os.environ.items() if k not in ("VIZ", "VIZ_DIR")}
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, str(HERE / "viz_script.py"), str(report)], cwd=tmp_path, text=True,
                            capture_output=True, timeout=300, env={**clean, "VIZ": "1", **env}, check=False)
    assert result.returncode == 0, result.stderr
    return result, json.loads(report.read_text())


def nesting_problems(events: list[dict[str, Any]]) -> list[str]:
    """Complete events of one (pid, tid) track that overlap without one containing the other."""
    tracks: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    problems = []
    for track, spans in tracks.items():
        open_spans: list[tuple[float, float, str]] = []
        for span in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_spans and open_spans[-1][1] <= span[0]:
                open_spans.pop()
            if open_spans and span[1] > open_spans[-1][1]:
                problems.append(f"{track}: {span} overlaps {open_spans[-1]}")
            open_spans.append(span)
    return problems


@pytest.fixture(scope="module")
def script_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str],
                                                                   dict[str, Any]]:
    folder = tmp_path_factory.mktemp("viz")
    result, report = run_script(folder)
    return folder / "plygrad-viz", result, report


def test_viz_1_writes_three_files_and_opens_no_socket(script_run: tuple[Path, Any, dict[str, Any]]) -> None:
    out, result, report = script_run
    for name in ("trace.json.gz", "report.html", "chrome_trace.json"):
        assert (out / name).is_file() and f"wrote {Path('plygrad-viz') / name}" in result.stderr
    assert report["sockets"] == [], "the recorder and the reports open no socket"
    launches = report["kernel_count"]
    assert launches == 3
    events = json.loads((out / "chrome_trace.json").read_text())["traceEvents"]
    assert len([e for e in events if e.get("cat") == "kernel"]) == launches
    assert [e["name"] for e in events if e["ph"] == "i"] == ["after the first kernel"]
    assert nesting_problems(events) == []
    page = (out / "report.html").read_text()
    outside = DATA.sub("", page)
    assert not RESOURCE.search(outside) and "http://" not in outside and "https://" not in outside
    loaded = plygrad.viz.load(out / "trace.json.gz")
    assert len(loaded.launches) == launches and len(loaded.table("schedules")) == 3
    assert all(k["ast"] and k["source"] for k in loaded.kernels), "every kernel has its AST and source"
    script = HERE / "viz_script.py"
    realizes = [n for n, line in enumerate(script.read_text().splitlines(), 1) if ".realize()" in line]
    assert [run[3] for run in loaded.table("runs")] == [f"{script}:{n}" for n in realizes], "each run's user line"


def test_record_in_process_matches_the_counters(tmp_path: Path) -> None:
    x = Tensor(np.ones((4, 4), np.float32))
    (x + 1).realize()  # compiled before the recording: a recording times launches, not compiles
    GlobalCounters.reset()
    with plygrad.viz.record(tmp_path, quiet=True):
        y = (x + 1).realize()
        plygrad.viz.mark("between")
        z = (y * y).sum().realize()
    np.testing.assert_allclose(z.numpy(), 64.0)
    loaded = plygrad.viz.load(tmp_path / "trace.json.gz")
    assert len(loaded.launches) == GlobalCounters.kernel_count == 2
    assert [m[1] for m in loaded.table("markers")] == ["between"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chrome_trace.json", "report.html", "trace.json.gz"]


def test_a_known_allocation_sequence_gives_its_peak(tmp_path: Path) -> None:
    with plygrad.viz.record(tmp_path, quiet=True):
        a = Buffer("CPU", 1000, dtypes.float32).copyin(bytes(4000))
        b = Buffer("CPU", 2000, dtypes.float32).copyin(bytes(8000))
        a_id, b_id = a.id, b.id
        del a
        gc.collect()
        c = Buffer("CPU", 500, dtypes.float32).copyin(bytes(2000))
        del b, c
        gc.collect()
    cpu = plygrad.viz.memory(plygrad.viz.load(tmp_path / "trace.json.gz"))["CPU"]
    assert [live for _, live in cpu.points] == [4000, 12000, 8000, 10000, 2000, 0]
    assert cpu.peak == 12000
    assert [(x.buffer_id, x.nbytes) for x in cpu.at_peak] == [(b_id, 8000), (a_id, 4000)]
    b_line = test_a_known_allocation_sequence_gives_its_peak.__code__.co_firstlineno + 3
    assert cpu.at_peak[0].site == f"{__file__}:{b_line}", "the user's line that allocated it"


def test_jit_replays_are_recorded(tmp_path: Path) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a * 2).sum(0)

    for _ in range(3):  # record on the second call
        f(Tensor(np.ones((3, 3), np.float32)))
    GlobalCounters.reset()
    with plygrad.viz.record(tmp_path, quiet=True):
        out = f(Tensor(np.ones((3, 3), np.float32)))
    np.testing.assert_allclose(out.numpy(), [6.0, 6.0, 6.0])
    loaded = plygrad.viz.load(tmp_path / "trace.json.gz")
    assert len(loaded.launches) == GlobalCounters.kernel_count > 0
    assert any(run[0] == -1 for run in loaded.table("runs")), "a replay is a run without a schedule"


def test_with_viz_unset_no_recorder_exists() -> None:
    assert "VIZ" not in os.environ or os.environ["VIZ"] in ("", "0")
    (Tensor(np.ones(3, np.float32)) + 1).realize()
    assert trace.RECORDER is None
    assert not [o for o in gc.get_objects() if isinstance(o, trace.Recorder)]


BROWSER = find_chromium()


@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium found (chromium-headless-shell or chromium on "
                    "PATH, or PLYGRAD_CHROMIUM): scripts/setup-system.sh installs chromium-headless-shell")
def test_the_report_renders_in_headless_chromium(script_run: tuple[Path, Any, dict[str, Any]]) -> None:
    assert BROWSER is not None
    out, _, report = script_run
    page = out / "report.html"
    state = page_state(dump_dom(BROWSER, page))
    assert state.errors == "" and state.ready, state.errors
    kernels = len(plygrad.viz.load(out / "trace.json.gz").kernels)
    assert state.rows == {"kernel-table": kernels, "launch-table": report["kernel_count"]}
    assert kernels == report["kernel_count"] == 3, "each of the three kernels launched once"
    assert state.graph_nodes > 0 and state.resources == []
    png = screenshot(BROWSER, page, out / "shot.png", (640, 400))
    assert png_variance(png.read_bytes()) > 100, "the screenshot is not blank"


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium found: scripts/setup-system.sh installs it")
def test_a_minilm_forward_report_opens_within_5_seconds(tmp_path: Path) -> None:
    import time

    sys.path.insert(0, str(HERE.parent / "examples"))
    import minilm

    assert BROWSER is not None
    encoder = minilm.load_packaged()
    with plygrad.viz.record(tmp_path, quiet=True):
        encoder.embed(["A man is eating food.", "The quick brown fox jumps over the lazy dog."])
    start = time.perf_counter()
    state = page_state(dump_dom(BROWSER, tmp_path / "report.html"))
    seconds = time.perf_counter() - start
    assert state.ready and state.errors == ""
    assert state.rows["launch-table"] == len(plygrad.viz.load(tmp_path / "trace.json.gz").launches) > 50
    assert seconds <= 5.0, f"the MiniLM report took {seconds:.1f} s to load and render"


def _three_kernels(device: str) -> list[Tensor]:
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    b = (a * 0.5 + 1).realize()
    c = b.exp().sum(axis=1).realize()
    d = (a @ a.T).realize()
    return [b, c, d]


def test_check_finds_the_kernel_a_backend_made_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from viz_corrupt_backend import BADCPU, CORRUPT_PREFIX

    from plygrad.runtime.discovery import BACKENDS, installed
    from plygrad.viz.__main__ import main
    from plygrad.viz.check import check

    with installed(BACKENDS, "BADCPU", BADCPU):
        with plygrad.viz.record(tmp_path / "bad", check=True, quiet=True):
            _, c, _ = _three_kernels("BADCPU")
        got = c.numpy()
    expected = np.exp(np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5 + 1).sum(axis=1)
    assert got[0] == pytest.approx(expected[0] + 1, rel=1e-5), "the backend did corrupt the output"
    loaded = plygrad.viz.load(tmp_path / "bad" / "trace.json.gz")
    result = check(loaded)
    assert result.mismatch is not None and result.skipped == []
    bad = result.mismatch
    assert loaded.kernels[loaded.launches[bad.launch][0]]["name"].startswith(CORRUPT_PREFIX)
    assert bad.launch == 1 and result.checked == 2, "the first kernel agrees; the second is named"
    assert (bad.param, bad.index, bad.differing) == (0, 0, 1)
    assert bad.got == pytest.approx(bad.expected + 1, rel=1e-5)
    line = _three_kernels.__code__.co_firstlineno + 3
    assert bad.site == f"{__file__}:{line}", "the user's line that ran it"
    assert main([str(tmp_path / "bad" / "trace.json.gz"), "--check"]) == 1
    assert f"MISMATCH: launch 1 of kernel {bad.kernel!r}" in capsys.readouterr().out


def test_check_passes_a_correct_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from plygrad.viz.__main__ import main

    with plygrad.viz.record(tmp_path, check=True, quiet=True):
        _three_kernels("CPU")
    assert main([str(tmp_path / "trace.json.gz"), "--check"]) == 0
    assert "all 3 checked launches agree" in capsys.readouterr().out


def test_passes_replayed_offline_end_in_the_recorded_source(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from plygrad.viz.__main__ import main
    from plygrad.viz.passes import kernel_passes

    with plygrad.viz.record(tmp_path, quiet=True):
        _three_kernels("CPU")
    loaded = plygrad.viz.load(tmp_path / "trace.json.gz")
    for index, kernel in enumerate(loaded.kernels):
        passes = kernel_passes(loaded, index)
        assert passes[0][0] == "input" and passes[-1] == ("render", kernel["source"]), kernel["name"]
    name = loaded.kernels[1]["name"]
    assert main([str(tmp_path / "trace.json.gz"), "--passes", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith("=== input\n") and "=== optimize" in out and "+++ after render" in out
    assert main([str(tmp_path / "trace.json.gz"), "--passes", "no_such_kernel"]) == 2
    assert "no kernel 'no_such_kernel' in the trace" in capsys.readouterr().err
