"""A third-party-like backend for tests: `MYCPU`, the CPU backend's classes under another device name.

It is what a plugin author gets by following docs/backends.md: a descriptor naming a factory, and a Backend whose
`Target.device` is its own name. Its memory is host memory like the CPU's, so values can be compared exactly, yet
the runtime treats it as a different device: a tensor that says MYCPU but was computed into a CPU buffer shows up
as a kernel mixing devices (ScheduleError) or as a buffer whose `device` is wrong.

`installed_mycpu()` registers it for a block the way an installed distribution's entry point would, without
building one, together with FASTCPU and FMACPU: the same backend compiling with `-ffast-math`, or with
`-ffp-contract=fast` (the conformance suite must reject both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Final

from plygrad.backends.cpu.backend import CPUBackend
from plygrad.backends.cpu.compiler import CCompiler, Toolchain, probe_toolchain
from plygrad.runtime import BackendDescriptor
from plygrad.runtime.discovery import BACKENDS, installed


class MyCPUBackend(CPUBackend):
    """The CPU backend under the device name MYCPU (and MYCPU:1, ...)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.target = dataclasses.replace(self.target, device="MYCPU")


class ExtraFlagsCompiler(CCompiler):
    """The CPU backend's compiler with `extra` flags after its own: what a backend author may reach for to go
    faster. `-ffast-math` lets the C compiler assume no NaN or inf; `-ffp-contract=fast` lets it fuse a*b+c into
    one rounding. Both change IR semantics, and the conformance suite must say so."""

    def __init__(self, toolchain: Toolchain, extra: tuple[str, ...]) -> None:
        super().__init__(dataclasses.replace(toolchain, flags=(*toolchain.flags, *extra)))


class ExtraFlagsCPUBackend(CPUBackend):
    """The CPU backend under the device name `kind`, compiling with `extra` flags."""

    def __init__(self, name: str, kind: str, extra: tuple[str, ...]) -> None:
        super().__init__(name)
        self.target = dataclasses.replace(self.target, device=kind)
        self.compiler = ExtraFlagsCompiler(probe_toolchain(), extra)


def open_mycpu(device: str) -> MyCPUBackend:
    return MyCPUBackend(device)


def open_fastcpu(device: str) -> ExtraFlagsCPUBackend:
    return ExtraFlagsCPUBackend(device, "FASTCPU", ("-ffast-math",))


def open_fmacpu(device: str) -> ExtraFlagsCPUBackend:
    return ExtraFlagsCPUBackend(device, "FMACPU", ("-ffp-contract=fast",))


MYCPU: Final = BackendDescriptor(name="MYCPU", priority=5, ir_major=1, ir_minor=0,
                                 factory="mycpu_backend:open_mycpu")
FASTCPU: Final = BackendDescriptor(name="FASTCPU", priority=4, ir_major=1, ir_minor=0,
                                   factory="mycpu_backend:open_fastcpu")
FMACPU: Final = BackendDescriptor(name="FMACPU", priority=3, ir_major=1, ir_minor=0,
                                  factory="mycpu_backend:open_fmacpu")


@contextmanager
def installed_mycpu() -> Iterator[None]:
    """MYCPU, FASTCPU and FMACPU registered as `plygrad.backends` entry points for the block (priorities below
    the CPU's, so the default device does not change)."""
    with ExitStack() as stack:
        stack.enter_context(installed(BACKENDS, "MYCPU", MYCPU))
        stack.enter_context(installed(BACKENDS, "FASTCPU", FASTCPU))
        stack.enter_context(installed(BACKENDS, "FMACPU", FMACPU))
        yield
