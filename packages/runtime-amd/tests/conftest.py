"""plygrad-amd's tests: helpers in `amd_fakes.py` (this folder goes on sys.path), a fresh program cache folder and a
fresh device registry per test."""

from __future__ import annotations

import sys
from pathlib import Path

from plygrad.runtime import testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

isolated_runtime = testing.isolated_runtime_fixture()
