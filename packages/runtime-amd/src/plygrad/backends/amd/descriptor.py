"""The AMD backend's entry point: a cheap descriptor; the HIP runtime and the compiler wait for `open_amd`."""

from __future__ import annotations

from typing import Final

from plygrad.runtime.plugin import BackendDescriptor

# priority 50, as NV's: where an AMD GPU opens it is the default device; where none does (no HIP runtime, no GPU)
# the factory raises, the registry records why, and the default falls through to the next backend
DESCRIPTOR: Final = BackendDescriptor(name="AMD", priority=50, ir_major=1, ir_minor=0,
                                      factory="plygrad.backends.amd.backend:open_amd")
