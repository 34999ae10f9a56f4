"""Every environment setting plygrad.runtime reads, declared once with its meaning, default and type.

Settings are read from `os.environ` each time they are asked for (not once at import), so a test or a user can
change one with `monkeypatch.setenv` or `os.environ[...] = ...` and the next run sees it. docs/backends.md lists them.
The setting classes are plygrad.ir's (plygrad.ir.settings), shared by every package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from plygrad.ir.settings import FlagSetting, FloatSetting, IntSetting, StrSetting


def default_cache_dir() -> Path:
    """The per-user cache folder the platform expects (XDG on Linux, Library/Caches on macOS, LOCALAPPDATA)."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "plygrad"


DEBUG: Final = IntSetting("DEBUG", 0, "verbosity 0-4: 1 kernel count per run, 2 one line per kernel with time, "
                          "GFLOP/s and GB/s and the optimizations it ran with, 3 also every candidate BEAM times, "
                          "4 the rendered source", 0, 4)
PLYGRAD_DEVICE: Final = StrSetting("PLYGRAD_DEVICE", "", "the default device (e.g. CPU, CPU:1); unset: the "
                                   "highest-priority backend that opens")
PLYGRAD_CODEGEN: Final = StrSetting("PLYGRAD_CODEGEN", "default", "name of the plygrad.codegen entry point that "
                                    "lowers kernels")
PLYGRAD_CACHE_DIR: Final = StrSetting("PLYGRAD_CACHE_DIR", "", "folder of the on-disk program cache; unset: "
                                      "'plygrad' under the user cache folder")
PLYGRAD_DISABLE_CACHE: Final = FlagSetting("PLYGRAD_DISABLE_CACHE", "when on, compiled programs are neither read "
                                           "from nor written to the disk cache (the in-memory cache still works)")
PLYGRAD_FORCE_BYTES: Final = FlagSetting("PLYGRAD_FORCE_BYTES", "when on, a schedule handed to run_linear as a UOp "
                                         "is serialized and read back first, as if it had crossed a process boundary")
PLYGRAD_COMPILE_JOBS: Final = IntSetting("PLYGRAD_COMPILE_JOBS", 0, "how many programs of one schedule may compile "
                                        "at once; 0: one per CPU core, 1: one after another", 0, 256)

BEAM: Final = IntSetting("BEAM", 0, "beam width of the search that times candidate optimizations of each kernel on "
                         "the device and keeps the fastest (beam.py); 0: codegen's heuristic chooses", 0, 64)
BEAM_TIMEOUT: Final = FloatSetting("BEAM_TIMEOUT", 60.0, "seconds one kernel's BEAM search may take; the fastest "
                                   "candidate found by then is kept", 0.0)
BEAM_MAX_CANDIDATES: Final = IntSetting("BEAM_MAX_CANDIDATES", 200, "how many distinct programs one kernel's BEAM "
                                        "search may compile and time at most", 1, 1 << 20)
VIZ: Final = IntSetting("VIZ", 0, "record the run for plygrad-viz (trace.py), read once when the runtime is imported: "
                        "1 schedules, kernels, launches, memory and markers, written at exit; 2 also each launch's "
                        "buffer contents (size-capped), for `python -m plygrad.viz --check`", 0, 2)
VIZ_DIR: Final = StrSetting("VIZ_DIR", "plygrad-viz", "folder VIZ=1 writes trace.json.gz and the reports into")

__all__ = ["BEAM", "BEAM_MAX_CANDIDATES", "BEAM_TIMEOUT", "DEBUG", "PLYGRAD_CACHE_DIR", "PLYGRAD_CODEGEN",
           "PLYGRAD_COMPILE_JOBS", "PLYGRAD_DEVICE", "PLYGRAD_DISABLE_CACHE", "PLYGRAD_FORCE_BYTES", "SETTINGS",
           "VIZ", "VIZ_DIR", "FlagSetting", "FloatSetting", "IntSetting", "StrSetting", "cache_dir",
           "default_cache_dir"]

SETTINGS: Final = (DEBUG, PLYGRAD_DEVICE, PLYGRAD_CODEGEN, PLYGRAD_CACHE_DIR, PLYGRAD_DISABLE_CACHE,
                   PLYGRAD_FORCE_BYTES, PLYGRAD_COMPILE_JOBS, BEAM, BEAM_TIMEOUT, BEAM_MAX_CANDIDATES, VIZ, VIZ_DIR)


def cache_dir() -> Path:
    """Where the disk program cache lives now (PLYGRAD_CACHE_DIR or the platform default)."""
    chosen = PLYGRAD_CACHE_DIR.get()
    return Path(chosen).expanduser() if chosen else default_cache_dir()
