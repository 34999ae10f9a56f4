"""BADCPU, for `python -m plygrad.viz --check`'s test: the CPU backend, except that every program whose name
starts with `CORRUPT_PREFIX` adds 1 to the first element of its first output after each launch. A kernel made
wrong on purpose, which the check must find and name."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Any, Final

from plygrad.backends.cpu.allocator import CFFIAllocator
from plygrad.backends.cpu.backend import CPUBackend
from plygrad.runtime import BackendDescriptor, BatchEntry, Program

CORRUPT_PREFIX: Final = "r_"  # the reductions: the second and third kernel of tests/test_viz.py's check test


class CorruptingProgram(Program):
    def __init__(self, inner: Program, allocator: CFFIAllocator) -> None:
        self.inner, self.allocator = inner, allocator

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        seconds = self.inner(buffers, global_size, local_size, vals, wait)
        first = bytearray(4)
        self.allocator.copyout(memoryview(first), buffers[0])
        self.allocator.copyin(buffers[0], memoryview(struct.pack("<f", struct.unpack("<f", first)[0] + 1.0)))
        return seconds


class BadCPUBackend(CPUBackend):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.target = dataclasses.replace(self.target, device="BADCPU")

    def load(self, name: str, binary: bytes) -> Program:
        program = super().load(name, binary)
        return CorruptingProgram(program, self.allocator) if name.startswith(CORRUPT_PREFIX) else program

    def batch(self, entries: Sequence[BatchEntry]) -> None:
        return None  # every launch goes through CorruptingProgram


def open_badcpu(device: str) -> BadCPUBackend:
    return BadCPUBackend(device)


BADCPU: Final = BackendDescriptor(name="BADCPU", priority=1, ir_major=1, ir_minor=0,
                                  factory="viz_corrupt_backend:open_badcpu")
