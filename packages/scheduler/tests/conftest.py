"""Test settings for plygrad-scheduler: a small hypothesis profile by default (the machine is shared; set
HYPOTHESIS_PROFILE=thorough to hunt bugs) and the helper module (`sched_helpers.py`) importable by name under
--import-mode=importlib."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

sys.path.insert(0, str(Path(__file__).resolve().parent))
