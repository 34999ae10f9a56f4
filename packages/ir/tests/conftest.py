"""Shared test settings for plygrad-ir.

One hypothesis profile for every test file, so a run's cost is set in one place: "ci" (the default) is what CI and
a developer run; "thorough" is for hunting bugs locally (`HYPOTHESIS_PROFILE=thorough pytest packages/ir/tests`).
Deadlines are off because the machine is shared and timing noise is not a bug.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ir-ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ir-thorough", deadline=None, max_examples=5000,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = "ir-" + os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """This folder's hypothesis profile, loaded again before its test modules are imported: `@given` keeps the
    profile loaded when it decorates, and one pytest process may collect every package's tests (`nox -s
    one-process`), each conftest loading its own."""
    settings.load_profile(PROFILE)


# the test helpers (ir_strategies.py, ir_examples.py) are imported as top-level modules; --import-mode=importlib
# does not put a test folder on sys.path by itself
sys.path.insert(0, str(Path(__file__).resolve().parent))
