"""Shared test settings for plygrad-ir.

One hypothesis profile for every test file, so a run's cost is set in one place: "ci" (the default) is what CI and
a developer run; "thorough" is for hunting bugs locally (`HYPOTHESIS_PROFILE=thorough pytest packages/ir/tests`).
Deadlines are off because the machine is shared and timing noise is not a bug.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=5000, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# the test helpers (ir_strategies.py, ir_examples.py) are imported as top-level modules; --import-mode=importlib
# does not put a test folder on sys.path by itself
sys.path.insert(0, str(Path(__file__).resolve().parent))
