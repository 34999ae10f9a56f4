"""Make this folder's helper modules (`import_rule`) importable by the tests beside them; PLYGRAD_GPU_CHECK=1 adds
the CUDA check of every kernel the tests run (gpu_check.py).

pytest runs with `--import-mode=importlib`, which does not put test folders on `sys.path`; these helpers are plain
modules, not a package, so the folder is added here once instead of in every test file.
"""

import sys
from pathlib import Path

import pytest
from hypothesis import settings

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """hypothesis' default profile for these tests, loaded before each of their modules is imported (`@given`
    keeps the profile loaded when it decorates): in one pytest process with the packages' tests (`nox -s
    one-process`) their conftests load profiles of their own first."""
    settings.load_profile("default")


def pytest_configure(config: pytest.Config) -> None:
    """PLYGRAD_GPU_CHECK=1 (the `gpu-check` nox session): also check every kernel the tests run as CUDA
    (tests/gpu_check.py)."""
    import gpu_check

    if gpu_check.enabled():
        config.pluginmanager.register(gpu_check.GpuCheck(), "gpu_check")
