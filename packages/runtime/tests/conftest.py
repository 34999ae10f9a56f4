"""Shared fixtures of plygrad-runtime's tests: a fake backend and fake codegen plugged in through discovery.

The helpers live in `rt_fakes.py` (this folder is put on sys.path: tests run with --import-mode=importlib).
Every test gets a fresh cache folder and clean counters, so no test sees another's programs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from plygrad.runtime import testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the `fakes` fixture only installs plugins, which is the same for every example
settings.register_profile("rt", deadline=None, max_examples=25,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
PROFILE = "rt"
settings.load_profile(PROFILE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """This folder's hypothesis profile, loaded again before its test modules are imported: `@given` keeps the
    profile loaded when it decorates, and one pytest process may collect every package's tests (`nox -s
    one-process`), each conftest loading its own."""
    settings.load_profile(PROFILE)


from rt_fakes import fake_plugins  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_runtime(tmp_path: Path) -> Iterator[None]:
    with testing.isolated_runtime(tmp_path / "cache"):
        yield


@pytest.fixture
def fakes() -> Iterator[None]:
    """The fake PY backend (and PY:n devices) plus the fake codegen as `default`."""
    with fake_plugins():
        yield
