"""Recording from plygrad-viz: `record`, `mark` and `start`/`stop` are the runtime recorder's (plygrad.runtime.trace),
reached through its `plygrad.recorders` entry point because plygrad-viz depends on plygrad-ir only."""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any


def recorder() -> ModuleType:
    """The runtime's recorder module; ImportError saying what to install when no runtime registered one."""
    found = [ep for ep in entry_points(group="plygrad.recorders") if ep.name == "runtime"]
    if not found:
        raise ImportError("recording needs plygrad-runtime (it registers the `plygrad.recorders` entry point "
                          "`runtime`): pip install plygrad-runtime; plygrad-viz alone only reads traces")
    module: ModuleType = found[0].load()
    return module


def record(folder: str | os.PathLike[str], check: bool = False, quiet: bool = False) -> Any:
    """`with record("out/"):` records what runs in the block and writes trace.json.gz, report.html and
    chrome_trace.json into the folder at its end. `check=True` also keeps launches' buffer contents (for --check)."""
    return recorder().record(folder, check=check, quiet=quiet)


def mark(text: str) -> None:
    """Put a marker on the timeline of the running recording (nothing when none runs)."""
    recorder().mark(text)
