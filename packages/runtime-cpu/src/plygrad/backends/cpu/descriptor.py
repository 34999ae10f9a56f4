"""The CPU backend's entry point: a cheap descriptor; the compiler probe and cffi wait for `open_cpu`."""

from __future__ import annotations

from typing import Final

from plygrad.runtime.plugin import BackendDescriptor

# priority 10: the CPU is always there, so any accelerator backend (which should use a higher priority) wins
DESCRIPTOR: Final = BackendDescriptor(name="CPU", priority=10, ir_major=1, ir_minor=0,
                                      factory="plygrad.backends.cpu.backend:open_cpu")
