"""Test settings for plygrad-frontend: no scheduler or backend is installed in this package's own session, so
every test builds graphs only; PLYGRAD_DEVICE=CPU names a device without opening a backend. A small hypothesis
profile (the machine is shared)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("frontend", deadline=None, max_examples=25)
settings.load_profile("frontend")


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PLYGRAD_DEVICE", "CPU")
    monkeypatch.delenv("PLYGRAD_SCHEDULER", raising=False)
    yield
