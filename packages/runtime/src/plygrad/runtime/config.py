"""Every environment setting plygrad.runtime reads, declared once with its meaning, default and type.

Settings are read from `os.environ` each time they are asked for (not once at import), so a test or a user can
change one with `monkeypatch.setenv` or `os.environ[...] = ...` and the next run sees it. docs/backends.md lists them.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True)
class IntSetting:
    """An integer setting; an unparsable value raises ValueError naming the variable rather than being ignored."""

    name: str
    default: int
    meaning: str
    low: int = -(2**63)
    high: int = 2**63 - 1

    def get(self) -> int:
        raw = os.environ.get(self.name, "").strip()
        if not raw:
            return self.default
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{self.name}={raw!r} is not an integer; {self.meaning}") from None
        return min(max(value, self.low), self.high)


@dataclass(frozen=True)
class FloatSetting:
    """A number setting (e.g. seconds); an unparsable value or NaN raises ValueError naming the variable."""

    name: str
    default: float
    meaning: str
    low: float = 0.0
    high: float = float("inf")

    def get(self) -> float:
        raw = os.environ.get(self.name, "").strip()
        if not raw:
            return self.default
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{self.name}={raw!r} is not a number; {self.meaning}") from None
        if math.isnan(value):  # NaN compares false with every bound and would disable the limit silently
            raise ValueError(f"{self.name}={raw!r} is not a number; {self.meaning}")
        return min(max(value, self.low), self.high)


@dataclass(frozen=True)
class StrSetting:
    """A text setting; empty counts as unset."""

    name: str
    default: str
    meaning: str

    def get(self) -> str:
        return os.environ.get(self.name, "").strip() or self.default


@dataclass(frozen=True)
class FlagSetting:
    """A boolean setting: set and not one of 0/false/no/off means on."""

    name: str
    meaning: str

    def get(self) -> bool:
        return os.environ.get(self.name, "").strip().lower() not in ("", "0", "false", "no", "off")


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

SETTINGS: Final = (DEBUG, PLYGRAD_DEVICE, PLYGRAD_CODEGEN, PLYGRAD_CACHE_DIR, PLYGRAD_DISABLE_CACHE,
                   PLYGRAD_FORCE_BYTES, PLYGRAD_COMPILE_JOBS, BEAM, BEAM_TIMEOUT, BEAM_MAX_CANDIDATES)


def cache_dir() -> Path:
    """Where the disk program cache lives now (PLYGRAD_CACHE_DIR or the platform default)."""
    chosen = PLYGRAD_CACHE_DIR.get()
    return Path(chosen).expanduser() if chosen else default_cache_dir()
