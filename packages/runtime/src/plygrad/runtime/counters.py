"""Process-wide counters of the work run_linear launched, and the DEBUG lines that report it.

`GlobalCounters` is what a benchmark or a test reads to know how many kernels ran and how much work they did
(`ops` and `mem` are codegen's per-launch estimates from ProgramInfo; time is only measured when something waits
for it: DEBUG >= 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from plygrad.ir.records import Opt, ProgramInfo


class GlobalCounters:
    """Totals since the last `reset()`."""

    kernel_count: ClassVar[int] = 0
    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0

    @classmethod
    def reset(cls) -> None:
        cls.kernel_count, cls.global_ops, cls.global_mem, cls.time_sum_s = 0, 0, 0, 0.0

    @classmethod
    def record(cls, info: ProgramInfo, seconds: float | None) -> None:
        cls.kernel_count += 1
        cls.global_ops += info.ops
        cls.global_mem += info.mem
        if seconds is not None:
            cls.time_sum_s += seconds

    @classmethod
    def record_many(cls, count: int, ops: int, mem: int) -> None:
        """`count` launches whose ops and mem add up to `ops` and `mem`, none of them timed (a batch)."""
        cls.kernel_count += count
        cls.global_ops += ops
        cls.global_mem += mem


def kernel_line(device: str, info: ProgramInfo, seconds: float | None) -> str:
    """The DEBUG>=2 line of one launch: device, kernel number, name, time, GFLOP/s and GB/s."""
    if seconds is None:
        timing = "time not measured"
    else:
        safe = max(seconds, 1e-9)
        timing = (f"tm {seconds * 1e6:10.2f}us  {info.ops / safe * 1e-9:9.2f} GFLOP/s  "
                  f"{info.mem / safe * 1e-9:9.2f} GB/s")
    return f"*** {device:<8} {GlobalCounters.kernel_count:5d} {info.name:<24} {timing}"


def opts_line(info: ProgramInfo) -> str:
    """The DEBUG>=2 line under each launch: the optimizations codegen applied to this kernel (BEAM's or the
    heuristic's)."""
    return f"    {info.name} opts: {opts_text(info.opts)}"


def opts_text(opts: Sequence[Opt]) -> str:
    """An optimization list as the DEBUG=2 lines and BEAM's progress line spell it, so the two can be compared."""
    return ", ".join(f"{o.op.name}(axis={o.axis}, amount={o.amount})" for o in opts) or "none"
