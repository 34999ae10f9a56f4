"""plygrad-viz's tests: this folder on sys.path for the synthetic traces (tests run with --import-mode=importlib)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
