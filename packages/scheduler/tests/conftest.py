"""Test settings for plygrad-scheduler: a small hypothesis profile by default (the machine is shared; set
HYPOTHESIS_PROFILE=thorough to hunt bugs) and the helper module (`sched_helpers.py`) importable by name under
--import-mode=importlib."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("scheduler-ci", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("scheduler-thorough", deadline=None, max_examples=1000,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = "scheduler-" + os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """This folder's hypothesis profile, loaded again before its test modules are imported: `@given` keeps the
    profile loaded when it decorates, and one pytest process may collect every package's tests (`nox -s
    one-process`), each conftest loading its own."""
    settings.load_profile(PROFILE)


sys.path.insert(0, str(Path(__file__).resolve().parent))
