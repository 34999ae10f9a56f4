"""Settings read from the environment, for every plygrad package: `IntSetting`, `FloatSetting`, `StrSetting` and
`FlagSetting`, each a name, a default, and the meaning an error message repeats.

A setting is read from `os.environ` each time it is asked for (not once at import), so a test or a user can change
one with `monkeypatch.setenv` or `os.environ[...] = ...` and the next read sees it. A value that does not parse
raises ValueError naming the variable and its meaning, never silently falls back to the default. Each package
declares its own settings with these in one module (plygrad.runtime.config, plygrad.frontend.config) and lists
them in its docs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


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
