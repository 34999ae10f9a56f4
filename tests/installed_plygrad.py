"""pytest plugin used by the nox sessions: prove the tests ran against the *installed* plygrad packages.

A per-package session exists to show that `pip install packages/<name>` alone gives a working package. That proof is
void if a test quietly imported `plygrad.*` from the source tree instead (a stray `sys.path` entry, a rootdir
insertion, an editable install leaking in). Loaded with `-p installed_plygrad`, this plugin lists where every
imported `plygrad` module came from and fails the run if any came from outside the interpreter's site-packages.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest


def _site_dirs() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    return tuple({Path(paths["purelib"]).resolve(), Path(paths["platlib"]).resolve()})


def _plygrad_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if (name == "plygrad" or name.startswith("plygrad.")) and file:  # namespace portions have no __file__
            found[name] = Path(file).resolve()
    return found


def pytest_report_header() -> str:
    return "plygrad modules must come from: " + ", ".join(str(d) for d in _site_dirs())


def pytest_sessionfinish(session: pytest.Session) -> None:
    modules = _plygrad_modules()
    sites = _site_dirs()
    strays = {name: path for name, path in modules.items() if not any(path.is_relative_to(d) for d in sites)}
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    # The packages a distribution provides: regular packages whose parent is a namespace portion (no __file__).
    tops = sorted(name for name, path in modules.items()
                  if path.name == "__init__.py" and name.rpartition(".")[0] not in modules)
    if reporter is not None:
        reporter.ensure_newline()
        for name in tops:
            reporter.write_line(f"{name} imported from {modules[name].parent}")
        if strays:
            name, path = min(strays.items())
            reporter.write_line(f"ERROR: {len(strays)} plygrad modules were imported from outside site-packages "
                                f"(e.g. {name} from {path}): the tests did not run against the installed package",
                                red=True)
    if strays:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
