"""plygrad-cpu's tests: helpers in `cpu_programs.py` (this folder goes on sys.path), a fresh program cache folder
and clean counters per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

settings.register_profile("cpu", deadline=None, max_examples=10,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("cpu")


@pytest.fixture(autouse=True)
def isolated_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from plygrad.runtime import PROGRAMS, GlobalCounters

    # PLYGRAD_FORCE_BYTES is left as the caller set it: the whole suite must pass with it on (DESIGN.md §2)
    for name in ("DEBUG", "PLYGRAD_DEVICE", "PLYGRAD_CODEGEN", "PLYGRAD_DISABLE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PLYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    PROGRAMS.clear_memory()
    GlobalCounters.reset()
    yield
