"""Shared test settings for plygrad-codegen: one small hypothesis profile (the machine is shared), and this folder
on sys.path so tests can import the `cg_*` helper modules under --import-mode=importlib."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("codegen-ci", deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("codegen-thorough", deadline=None, max_examples=300,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = "codegen-" + os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """This folder's hypothesis profile, loaded again before its test modules are imported: `@given` keeps the
    profile loaded when it decorates, and one pytest process may collect every package's tests (`nox -s
    one-process`), each conftest loading its own."""
    settings.load_profile(PROFILE)


sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_report_header() -> str:
    from cg_run import compiler, compiler_version, openmp_flags

    openmp = "with OpenMP" if openmp_flags() else "without OpenMP (-fopenmp does not link: pragmas are ignored)"
    return f"C compiler: {' '.join(compiler())} ({compiler_version()}), {openmp}"
