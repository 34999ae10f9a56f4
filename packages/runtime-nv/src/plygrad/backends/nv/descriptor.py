"""The NV backend's entry point: a cheap descriptor; the driver and NVRTC wait for `open_nv`."""

from __future__ import annotations

from typing import Final

from plygrad.runtime.plugin import BackendDescriptor

# priority 50, above the CPU's 10: where a GPU opens it is the default device; where none does (no driver, no
# GPU) the factory raises, the registry records why, and the default falls through to the CPU
DESCRIPTOR: Final = BackendDescriptor(name="NV", priority=50, ir_major=1, ir_minor=0,
                                      factory="plygrad.backends.nv.backend:open_nv")
