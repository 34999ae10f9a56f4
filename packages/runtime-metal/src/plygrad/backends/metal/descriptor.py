"""The METAL backend's entry point: a cheap descriptor; the Objective-C runtime and Metal wait for `open_metal`."""

from __future__ import annotations

from typing import Final

from plygrad.runtime.plugin import BackendDescriptor

# priority 50, above the CPU's 10: on a Mac with a Metal GPU it is the default device; elsewhere the factory raises
# "unavailable: Metal needs macOS", the registry records it, and the default falls through to the CPU
DESCRIPTOR: Final = BackendDescriptor(name="METAL", priority=50, ir_major=1, ir_minor=0,
                                      factory="plygrad.backends.metal.backend:open_metal")
