"""Test settings for plygrad-frontend: no scheduler or backend is installed in this package's own session, so
every test builds graphs only; PLYGRAD_DEVICE=CPU names a device without opening a backend. A small hypothesis
profile (the machine is shared)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("frontend", deadline=None, max_examples=25)
PROFILE = "frontend"
settings.load_profile(PROFILE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """This folder's hypothesis profile, loaded again before its test modules are imported: `@given` keeps the
    profile loaded when it decorates, and one pytest process may collect every package's tests (`nox -s
    one-process`), each conftest loading its own."""
    settings.load_profile(PROFILE)


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PLYGRAD_DEVICE", "CPU")
    monkeypatch.delenv("PLYGRAD_SCHEDULER", raising=False)
    yield
