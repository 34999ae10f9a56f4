"""BEAM=n end to end: Tensors through the scheduler, the real codegen (taking opts) and the CPU backend.

A search must not change any result (compared with the same computation without BEAM, bit for bit, and with
NumPy), must record what it chose (ProgramInfo.opts, printed by DEBUG=2), must be done once per machine (a second
process reads the choice from the disk cache) and within its time limit, and must step aside, saying so, for a
lowering engine that takes no optimization list. Limits are small so the searches take seconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from plygrad.frontend import Tensor
from plygrad.ir import Opt, OptOps
from plygrad.runtime import beam, clear_plans, testing
from plygrad.runtime.discovery import CODEGEN, installed

Array = np.ndarray[Any, Any]


def _f32(rng: np.random.Generator, *shape: int) -> Array:
    return rng.standard_normal(shape).astype(np.float32)


def _matmul(rng: np.random.Generator, m: int = 16, k: int = 32, n: int = 24) -> tuple[Array, Array]:
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    return (Tensor(a) @ Tensor(b)).numpy(), a @ b


def _row_sums(rng: np.random.Generator) -> tuple[Array, Array]:
    a = _f32(rng, 12, 64)
    return Tensor(a).sum(axis=1).numpy(), a.sum(axis=1)


def _broadcast(rng: np.random.Generator) -> tuple[Array, Array]:
    x, y = _f32(rng, 16, 1), _f32(rng, 1, 24)
    return (Tensor(x) * Tensor(y) + 1).numpy(), x * y + 1


CASES: dict[str, Callable[[np.random.Generator], tuple[Array, Array]]] = {
    "matmul": _matmul, "row_sums": _row_sums, "broadcast": _broadcast}


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A runtime as a new process has it, with an empty cache folder and small search limits."""
    monkeypatch.setenv("BEAM_TIMEOUT", "20")
    monkeypatch.setenv("BEAM_MAX_CANDIDATES", "12")
    with testing.isolated_runtime(tmp_path / "cache"):
        beam.STATS.reset()
        yield


def _same_inputs(case: str) -> tuple[Array, Array]:
    """The case's result on inputs that are the same at every call, and NumPy's."""
    return CASES[case](np.random.default_rng(sum(map(ord, case))))


@pytest.mark.parametrize("case", sorted(CASES))
def test_beam_changes_no_result_and_records_its_choice(case: str, fresh: None, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    plain, _ = _same_inputs(case)
    monkeypatch.setenv("BEAM", "2")
    monkeypatch.setenv("DEBUG", "2")
    clear_plans()  # a schedule run before BEAM was set keeps its programs (docs/codegen.md, BEAM)
    searched, expected = _same_inputs(case)
    assert beam.STATS.searches >= 1
    np.testing.assert_allclose(searched, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(searched, plain, err_msg="BEAM picks among exact lowerings: the same bits")
    captured = capsys.readouterr()
    chosen = dict(re.findall(r"^BEAM 2 (\w+): .*, opts: (.*)$", captured.err, re.MULTILINE))
    ran = dict(re.findall(r"^    (\w+) opts: (.*)$", captured.out, re.MULTILINE))
    assert chosen, f"no progress line on stderr: {captured.err!r}"
    for name, opts in chosen.items():
        assert ran.get(name) == opts, f"kernel {name} ran with {ran.get(name)!r}, BEAM chose {opts!r}"


SCRIPT = """
import json, sys
import numpy as np
from plygrad.frontend import Tensor
from plygrad.runtime import beam
a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) / 100
b = np.arange(32 * 24, dtype=np.float32).reshape(32, 24) / 100
out = (Tensor(a) @ Tensor(b)).numpy()
np.testing.assert_allclose(out, a @ b, rtol=1e-5)
print(json.dumps({"searches": beam.STATS.searches, "reused": beam.STATS.reused, "bits": out.tobytes().hex()}))
"""


def _run_process(cache: Path) -> dict[str, Any]:
    env = {**os.environ, "PLYGRAD_CACHE_DIR": str(cache), "BEAM": "2", "BEAM_MAX_CANDIDATES": "8",
           "BEAM_TIMEOUT": "20"}
    env.pop("PLYGRAD_DISABLE_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


def test_a_second_process_reads_the_choice_and_does_not_search(tmp_path: Path) -> None:
    first, second = _run_process(tmp_path / "cache"), _run_process(tmp_path / "cache")
    assert first["searches"] >= 1 and "BEAM 2 " in first["stderr"]
    assert second["searches"] == 0 and second["reused"] >= 1 and "BEAM 2 " not in second["stderr"]
    assert first["bits"] == second["bits"]


def test_the_time_limit_is_honoured(fresh: None, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BEAM", "4")
    monkeypatch.setenv("BEAM_MAX_CANDIDATES", "100000")
    monkeypatch.setenv("BEAM_TIMEOUT", "0.5")
    start = time.perf_counter()
    out, expected = _matmul(np.random.default_rng(1), 64, 96, 80)
    took = time.perf_counter() - start
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert "stopped: time limit BEAM_TIMEOUT=0.5 s" in capsys.readouterr().err
    # the two starting points always compile and run, and a batch of compiles in flight finishes: seconds, not
    # the minutes an unlimited search of 100000 candidates would take
    assert took < 0.5 + 15, f"took {took:.1f} s"


def test_an_engine_without_the_opts_argument_falls_back_with_a_message(fresh: None, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    real = entry_points(group=CODEGEN)["default"].load()

    def two_argument_engine(kernel: bytes, target: bytes) -> bytes:
        result: bytes = real(kernel, target)
        return result

    monkeypatch.setenv("BEAM", "2")
    with installed(CODEGEN, "default", two_argument_engine):
        got, expected = _matmul(np.random.default_rng(2))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert "codegen 'default' takes no optimization list" in capsys.readouterr().err
    assert beam.STATS.searches == 0


def test_runtime_and_codegen_write_the_same_opts_bytes() -> None:
    from plygrad.codegen import opts_from_bytes, opts_to_bytes

    opts = (Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.THREAD, 0, 2))
    assert opts_to_bytes(opts) == beam.opts_bytes(opts)
    assert opts_from_bytes(beam.opts_bytes(opts)) == opts == beam.opts_from_bytes(opts_to_bytes(opts))


def test_a_candidate_that_recomputes_a_reduction_is_never_run(fresh: None, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # TILE of a softmax's rows nests the columns' loop outside the row tile, so the row's max and sum would be
    # recomputed for every column (codegen's estimate: hundreds of times the work): such a list is skipped, never
    # run (a launch of one on a big softmax takes minutes, and nothing can stop a launch). The search is given two
    # actions, so it is short: the harmful one and a harmless one
    monkeypatch.setattr(beam, "actions", lambda target, axes: [Opt(OptOps.TILE, 0, 8), Opt(OptOps.UPCAST, 0, 2)])
    monkeypatch.setenv("BEAM", "2")
    monkeypatch.setenv("DEBUG", "3")
    x = _f32(np.random.default_rng(2), 32, 256)
    got = Tensor(x).softmax(1).numpy()
    shifted = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, shifted / shifted.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("    BEAM ")]
    skipped = [line for line in lines if " skipped " in line]
    assert skipped and all("TILE(axis=0, amount=8)" in line for line in skipped), lines
    assert any("UPCAST(axis=0, amount=2)" in line and " skipped " not in line for line in lines), lines
