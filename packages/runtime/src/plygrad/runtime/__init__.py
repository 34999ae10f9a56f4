"""plygrad.runtime: the execution engine (DESIGN.md §1, §4).

The backend registry (`Device`), runtime memory (`Buffer`), `run_linear` (a SCHEDULE-stage LINEAR in, its output
buffers out), the program cache, `GlobalCounters`, and the backend plugin API (`BackendDescriptor`, `Allocator`,
`Compiler`, `Program`, `Backend`). Codegen and backends are found through entry points, never imported by name.
"""

from plygrad.runtime.buffer import Buffer, lookup_buffer
from plygrad.runtime.cache import PROGRAMS, CacheStats, ProgramCache
from plygrad.runtime.counters import GlobalCounters
from plygrad.runtime.device import BackendRecord, BackendStatus, Device, DeviceRegistry, canonical_device
from plygrad.runtime.engine import prepare_kernel, run_linear
from plygrad.runtime.errors import (
    BackendError,
    CodegenError,
    CompileError,
    InvalidBufferError,
    RuntimeLayerError,
    ScheduleError,
)
from plygrad.runtime.plugin import Allocator, Backend, BackendDescriptor, Compiler, Program

__all__ = [
    "PROGRAMS",
    "Allocator",
    "Backend",
    "BackendDescriptor",
    "BackendError",
    "BackendRecord",
    "BackendStatus",
    "Buffer",
    "CacheStats",
    "CodegenError",
    "CompileError",
    "Compiler",
    "Device",
    "DeviceRegistry",
    "GlobalCounters",
    "InvalidBufferError",
    "Program",
    "ProgramCache",
    "RuntimeLayerError",
    "ScheduleError",
    "canonical_device",
    "lookup_buffer",
    "prepare_kernel",
    "run_linear",
]
