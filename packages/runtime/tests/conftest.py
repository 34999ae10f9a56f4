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

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the `fakes` fixture only installs plugins, which is the same for every example
settings.register_profile("rt", deadline=None, max_examples=25,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("rt")

from rt_fakes import fake_plugins  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from plygrad.runtime import PROGRAMS, Device, GlobalCounters

    # PLYGRAD_FORCE_BYTES is left as the caller set it: the whole suite must pass with it on (DESIGN.md §2)
    for name in ("DEBUG", "PLYGRAD_DEVICE", "PLYGRAD_CODEGEN", "PLYGRAD_DISABLE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PLYGRAD_CACHE_DIR", str(tmp_path / "cache"))
    PROGRAMS.clear_memory()
    GlobalCounters.reset()
    Device.reset()
    yield
    Device.reset()


@pytest.fixture
def fakes() -> Iterator[None]:
    """The fake PY backend (and PY:n devices) plus the fake codegen as `default`."""
    with fake_plugins():
        yield
