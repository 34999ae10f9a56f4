"""Settings read from the environment, for every plygrad package: `IntSetting`, `FloatSetting`, `StrSetting` and
`FlagSetting`, each a name, a default, and the meaning an error message repeats.

A setting is read from `os.environ` each time it is asked for (not once at import), so a test or a user can change
one with `monkeypatch.setenv` or `os.environ[...] = ...` and the next read sees it. Realizing a small op reads
several settings, so the read goes straight to the mapping `os.environ` keeps its encoded names and values in
(`environ_value`): a dict lookup instead of `os.environ.get`'s Python-level encode, lookup and decode (~1.7 us).
A value that does not parse raises ValueError naming the variable and its meaning, never silently falls back to the
default. Each package declares its own settings with these in one module (plygrad.runtime.config,
plygrad.frontend.config) and lists them in its docs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

# os._Environ keeps the environment in `_data`, names and values encoded (bytes on POSIX), and every change made
# through os.environ (setenv, monkeypatch, patch.dict, del) goes through it; a platform or an `os.environ` replaced
# by another mapping without these is read through the public mapping instead
_ENVIRON: Final = os.environ
_DATA: Final[dict[Any, Any] | None] = getattr(os.environ, "_data", None)
_ENCODE_KEY: Final[Callable[[str], Any] | None] = getattr(os.environ, "encodekey", None)
_DECODE_VALUE: Final[Callable[[Any], str] | None] = getattr(os.environ, "decodevalue", None)
_ENCODED_NAMES: dict[str, Any] = {}  # setting name -> its encoded key; as many entries as settings are declared


def environ_value(name: str) -> str:
    """`os.environ.get(name, "")`, read live, without its per-call encoding work."""
    if _DATA is None or _ENCODE_KEY is None or _DECODE_VALUE is None or os.environ is not _ENVIRON:
        return os.environ.get(name, "")
    key = _ENCODED_NAMES.get(name)
    if key is None:
        key = _ENCODED_NAMES[name] = _ENCODE_KEY(name)
    raw = _DATA.get(key)
    return "" if raw is None else _DECODE_VALUE(raw)


@dataclass(frozen=True)
class IntSetting:
    """An integer setting; an unparsable value raises ValueError naming the variable rather than being ignored."""

    name: str
    default: int
    meaning: str
    low: int = -(2**63)
    high: int = 2**63 - 1

    def get(self) -> int:
        raw = environ_value(self.name).strip()
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
        raw = environ_value(self.name).strip()
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
        return environ_value(self.name).strip() or self.default


@dataclass(frozen=True)
class FlagSetting:
    """A boolean setting: set and not one of 0/false/no/off means on."""

    name: str
    meaning: str

    def get(self) -> bool:
        return environ_value(self.name).strip().lower() not in ("", "0", "false", "no", "off")
