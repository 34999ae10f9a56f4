"""plygrad.runtime: the execution engine (docs/design.md §1, §4).

The backend registry (`Device`), runtime memory (`Buffer`), `run_linear` (a SCHEDULE-stage LINEAR in, its output
buffers out), execution plans cached per schedule (`load_plan`, `ExecPlan`), recorded launches to replay over other
buffers (`Capture`, what a jit builds on), the program cache, `GlobalCounters`, and the backend plugin API
(`BackendDescriptor`, `Allocator`, `Compiler`, `Program`, `Backend`), the settings it reads (`config`: each a
documented `IntSetting`/`StrSetting`/... of plygrad.ir.settings), and what a frontend needs to run schedules and
move data (`read_schedule`, `copy_buffer`, `BytesLike`). Codegen and backends are found through
entry points, never imported by name.
"""

from plygrad.runtime import config
from plygrad.runtime.buffer import Buffer, BytesLike, lookup_buffer
from plygrad.runtime.cache import PROGRAMS, CacheStats, ProgramCache
from plygrad.runtime.capture import Capture
from plygrad.runtime.counters import GlobalCounters
from plygrad.runtime.device import BackendRecord, BackendStatus, Device, DeviceRegistry, canonical_device
from plygrad.runtime.engine import run_linear
from plygrad.runtime.errors import (
    BackendError,
    CodegenError,
    CompileError,
    IndexBoundsError,
    InvalidBufferError,
    RuntimeLayerError,
    ScheduleError,
)
from plygrad.runtime.lowering import LoadedProgram, prepare_kernel
from plygrad.runtime.plan import ExecPlan, clear_plans, copy_buffer, load_plan, plans_generation, read_schedule
from plygrad.runtime.plugin import Allocator, Backend, BackendDescriptor, BatchEntry, BatchLaunch, Compiler, Program

__all__ = [
    "PROGRAMS",
    "Allocator",
    "Backend",
    "BackendDescriptor",
    "BackendError",
    "BackendRecord",
    "BackendStatus",
    "BatchEntry",
    "BatchLaunch",
    "Buffer",
    "BytesLike",
    "CacheStats",
    "Capture",
    "CodegenError",
    "CompileError",
    "Compiler",
    "Device",
    "DeviceRegistry",
    "ExecPlan",
    "GlobalCounters",
    "IndexBoundsError",
    "InvalidBufferError",
    "LoadedProgram",
    "Program",
    "ProgramCache",
    "RuntimeLayerError",
    "ScheduleError",
    "canonical_device",
    "clear_plans",
    "config",
    "copy_buffer",
    "load_plan",
    "lookup_buffer",
    "plans_generation",
    "prepare_kernel",
    "read_schedule",
    "run_linear",
]
