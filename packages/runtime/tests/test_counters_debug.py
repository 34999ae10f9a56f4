"""GlobalCounters and the DEBUG levels' output, and `python -m plygrad.runtime`."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from rt_schedules import add_then_sum

from plygrad.ir import dtypes
from plygrad.runtime import Buffer, GlobalCounters, run_linear
from plygrad.runtime.__main__ import main


def _run() -> None:
    a = Buffer("PY", 6, dtypes.float32).copyin(np.ones(6, np.float32).tobytes())
    run_linear(add_then_sum(a, a, 2, 3))


def test_counters_sum_program_estimates(fakes: None) -> None:
    _run()
    assert GlobalCounters.kernel_count == 2
    assert GlobalCounters.global_mem == (6 * 3 + (2 + 6)) * 4, "ProgramInfo.mem of both kernels"
    assert GlobalCounters.global_ops > 0
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem,
            GlobalCounters.time_sum_s) == (0, 0, 0, 0.0)


@pytest.mark.parametrize("level", [0, 1, 2, 3, 4])
def test_debug_levels(fakes: None, level: int, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEBUG", str(level))
    _run()
    out = capsys.readouterr().out
    assert ("run_linear: 2 kernels, 0 copies" in out) == (level >= 1)
    assert ("conformance_add" in out and "GFLOP/s" in out and "GB/s" in out) == (level >= 2)
    assert ("opts: none" in out) == (level >= 2), "DEBUG=2 shows the opts each kernel ran with"
    assert ("RANGE" in out) == (level >= 4), "DEBUG=4 prints the source (IR text for the fake backend)"
    assert (GlobalCounters.time_sum_s > 0) == (level >= 2), "time is measured when DEBUG>=2 waits for it"


def test_debug_must_be_an_integer(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "lots")
    with pytest.raises(ValueError, match="DEBUG='lots' is not an integer"):
        _run()


def test_main_lists_backends_and_causes(fakes: None, capsys: pytest.CaptureFixture[str]) -> None:
    from rt_fakes import fake_plugins

    from plygrad.runtime import BackendDescriptor

    with fake_plugins(BROKEN=BackendDescriptor("BROKEN", 1, 1, 0, "rt_fakes:open_broken"),
                      OLD=BackendDescriptor("OLD", 1, 0, 3, "rt_fakes:open_py")):
        assert main() == 0
    out = capsys.readouterr().out
    assert "PY" in out and " ok" in out
    assert "BROKEN" in out and "failed to open: OSError: libfake.so" in out
    assert "OLD" in out and "IR version mismatch: built against IR opset 0.3" in out
    assert "default device: PY" in out
    assert "codegen: 'default' selected; found: default" in out


def test_python_dash_m_runs() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PLYGRAD_DEVICE"}
    proc = subprocess.run([sys.executable, "-m", "plygrad.runtime"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("plygrad.runtime: IR opset") and "default device:" in proc.stdout

