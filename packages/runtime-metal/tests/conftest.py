"""plygrad-metal's tests: the stand-in Objective-C runtime in `fake_objc.py` (this folder goes on sys.path), a fresh
program cache folder and a fresh device registry per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from plygrad.runtime import testing

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def isolated_runtime(tmp_path: Path) -> Iterator[None]:
    with testing.isolated_runtime(tmp_path / "cache"):
        yield
