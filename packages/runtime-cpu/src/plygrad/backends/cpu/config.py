"""Every environment setting the CPU backend reads, declared once with its meaning, default and type (docs/backends.md
lists them with the runtime's). Read from `os.environ` each time, like plygrad.runtime's settings."""

from __future__ import annotations

from typing import Final

from plygrad.ir.settings import IntSetting

PLYGRAD_CPU_BUFFER_CACHE: Final = IntSetting(
    "PLYGRAD_CPU_BUFFER_CACHE", 1 << 30,
    "bytes of freed CPU buffers kept for reuse by allocations of the same size (0: free at once)", low=0)
