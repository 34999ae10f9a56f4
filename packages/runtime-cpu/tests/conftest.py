"""plygrad-cpu's tests: helpers in `cpu_programs.py` (this folder goes on sys.path), a fresh program cache folder
and clean counters per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from plygrad.runtime import testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

settings.register_profile("cpu", deadline=None, max_examples=10,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
PROFILE = "cpu"
settings.load_profile(PROFILE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """This folder's hypothesis profile, loaded again before its test modules are imported: `@given` keeps the
    profile loaded when it decorates, and one pytest process may collect every package's tests (`nox -s
    one-process`), each conftest loading its own."""
    settings.load_profile(PROFILE)


@pytest.fixture(autouse=True)
def isolated_runtime(tmp_path: Path) -> Iterator[None]:
    with testing.isolated_runtime(tmp_path / "cache"):
        yield
