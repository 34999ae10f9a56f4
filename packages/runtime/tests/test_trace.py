"""The VIZ recorder (trace.py): what it records of schedules, kernels, launches, memory and markers, and that it
does not exist when VIZ is off."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rt_schedules import add_then_sum

from plygrad.ir import Stage, deserialize, dtypes
from plygrad.runtime import Buffer, GlobalCounters, run_linear, trace

TESTS = Path(__file__).resolve().parent


def _inputs() -> Buffer:
    return Buffer("PY", 6, dtypes.float32).copyin(np.arange(6, dtype=np.float32).tobytes())


def test_a_recording_sees_every_launch_of_every_schedule(fakes: None, tmp_path: Path) -> None:
    a = _inputs()
    schedule = add_then_sum(a, a, 2, 3)
    with trace.record(tmp_path, quiet=True) as rec:
        run_linear(schedule)
        trace.mark("second pass")
        run_linear(schedule)
    assert trace.RECORDER is None, "the block's end stops the recording"
    assert len(rec.launches) == GlobalCounters.kernel_count == 4
    assert len(rec.schedules) == 1 and len(rec.runs) == 2, "one schedule, run twice"
    assert deserialize(base64.b64decode(rec.schedules[0]["linear"]), Stage.SCHEDULE) is schedule
    assert [k["name"] for k in rec.kernels] == ["conformance_add", "conformance_row_sum"]
    assert rec.schedules[0]["calls"] == [0, 1]
    for kernel in rec.kernels:
        assert kernel["ast"] is not None and "RANGE" in kernel["source"], "the fake codegen's source is IR text"
    assert [launch[0] for launch in rec.launches] == [0, 1, 0, 1]
    for _, run, start, end, _ in rec.launches:
        assert rec.runs[run][1] <= start <= end <= rec.runs[run][2], "a launch lies inside its run"
    assert rec.markers[0][1] == "second pass" and rec.runs[0][2] <= rec.markers[0][0] <= rec.runs[1][1]
    assert rec.runs[0][3].startswith(f"{__file__}:"), "a run names the user's line that started it"
    assert [(b[2], b[3]) for b in rec.builds] == [(None, 2)], "the plan was built once, inside the first run's call"
    assert rec.builds[0][1] <= rec.runs[0][1]
    written = json.loads(gzip.decompress((tmp_path / trace.TRACE_FILE).read_bytes()))
    assert written["format"] == trace.FORMAT and written["version"] == list(trace.VERSION)
    assert written["launches"] == rec.launches


def test_allocations_and_frees_are_followed_per_buffer(fakes: None, tmp_path: Path) -> None:
    with trace.record(tmp_path, quiet=True) as rec:
        first = Buffer("PY", 10, dtypes.float32)
        first.copyin(bytes(40))
        second = Buffer("PY", 3, dtypes.int8)
        second.copyin(bytes(3))
        first_id = first.id
        del first
        third = Buffer("PY", 5, dtypes.int16)
        third.copyin(bytes(10))
    sizes = [(event[1], event[3]) for event in rec.memory]
    assert sizes == [(first_id, 40), (second.id, 3), (first_id, -40), (third.id, 10)]


def test_check_mode_keeps_inputs_before_and_outputs_after(fakes: None, tmp_path: Path) -> None:
    a = _inputs()
    with trace.record(tmp_path, check=True, quiet=True) as rec:
        run_linear(add_then_sum(a, a, 2, 3))
    first = rec.contents[0]
    params = rec.kernels[0]["params"]
    assert [p[3] for p in params] == [True, False, False], "output first, then the two inputs"
    inputs = [np.frombuffer(base64.b64decode(b), np.float32) for b in first["before"][1:]]
    output = np.frombuffer(base64.b64decode(first["after"][0]), np.float32)
    np.testing.assert_array_equal(output, inputs[0] + inputs[1])
    assert first["after"][1:] == [None, None], "inputs are not kept again after the launch"


def test_a_failing_reporter_keeps_the_trace(fakes: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from plygrad.runtime.discovery import installed

    def broken(trace_path: Path, folder: Path) -> list[Path]:
        raise OSError("disk full")

    def listing(trace_path: Path, folder: Path) -> list[Path]:
        out = folder / "listing.txt"
        out.write_text(trace_path.name)
        return [out]

    with installed(trace.REPORTERS, "html", broken), installed(trace.REPORTERS, "listing", listing), \
            trace.record(tmp_path):
        trace.mark("x")
    err = capsys.readouterr().err
    assert "reporter 'html'" in err and "OSError: disk full" in err
    assert f"wrote {tmp_path / 'listing.txt'}" in err and (tmp_path / trace.TRACE_FILE).is_file()


def test_beam_searches_are_recorded_with_every_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from beam_fakes import COSTED_PY, lower_with_opts
    from rt_fakes import fake_plugins

    from plygrad.runtime import beam
    from plygrad.runtime.discovery import BACKENDS, CODEGEN, installed

    monkeypatch.setenv("BEAM", "2")
    beam.STATS.reset()
    with fake_plugins(), installed(BACKENDS, "PY", COSTED_PY), installed(CODEGEN, "default", lower_with_opts), \
            trace.record(tmp_path, quiet=True) as rec:
        a = _inputs()
        run_linear(add_then_sum(a, a, 2, 3))
    assert len(rec.beams) == beam.STATS.searches == 2
    by_sha = {k["ast_sha"]: k for k in rec.kernels}
    for search in rec.beams:
        tried = [opts for opts, _ in search["tried"]]
        assert search["chosen"] in tried and [] in tried, "the unoptimized seed is always tried"
        assert all(seconds is None or seconds > 0 for _, seconds in search["tried"])
        assert by_sha[search["ast_sha"]]["opts"] == search["chosen"], "the kernel ran with the list chosen"


def test_one_recording_at_a_time() -> None:
    trace.start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            trace.start()
    finally:
        trace.stop()
    with pytest.raises(RuntimeError, match="no plygrad recording is running"):
        trace.stop()
    trace.mark("ignored: nothing records")  # never raises


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("VIZ", "VIZ_DIR")}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**clean, "PYTHONPATH": str(TESTS), **env}, check=False)


def test_without_viz_no_recorder_exists(tmp_path: Path) -> None:
    code = ("import gc\nfrom plygrad.runtime import trace\n"
            "assert trace.RECORDER is None\n"
            "assert not [o for o in gc.get_objects() if isinstance(o, trace.Recorder)]\nprint('none')")
    result = _python(code, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "none", result.stderr
    assert not (tmp_path / "plygrad-viz").exists()


def test_viz_1_writes_the_trace_at_exit(tmp_path: Path) -> None:
    code = ("import numpy as np\nfrom rt_fakes import fake_plugins\nfrom rt_schedules import add_then_sum\n"
            "from plygrad.ir import dtypes\nfrom plygrad.runtime import Buffer, run_linear, trace\n"
            "with fake_plugins():\n"
            "    a = Buffer('PY', 6, dtypes.float32).copyin(np.ones(6, np.float32).tobytes())\n"
            "    trace.mark('start')\n"
            "    run_linear(add_then_sum(a, a, 2, 3))\n")
    result = _python(code, tmp_path, VIZ="1", VIZ_DIR="out", PLYGRAD_CACHE_DIR=str(tmp_path / "cache"))
    assert result.returncode == 0, result.stderr
    assert f"wrote {Path('out') / trace.TRACE_FILE}" in result.stderr
    written = json.loads(gzip.decompress((tmp_path / "out" / trace.TRACE_FILE).read_bytes()))
    assert len(written["launches"]) == 2 and written["markers"][0][1] == "start"
    assert written["contents"] == [], "VIZ=1 keeps no buffer contents"
