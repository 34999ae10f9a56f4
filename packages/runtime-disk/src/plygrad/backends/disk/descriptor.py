"""The DISK backend's entry point: a cheap descriptor; nothing is opened or mapped until a buffer is used."""

from __future__ import annotations

from typing import Final

from plygrad.runtime.plugin import BackendDescriptor

# priority 0, below every compute backend: DISK runs no kernels, so it must never be the default device
DESCRIPTOR: Final = BackendDescriptor(name="DISK", priority=0, ir_major=1, ir_minor=0,
                                      factory="plygrad.backends.disk.backend:open_disk")
