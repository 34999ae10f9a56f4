"""Consecutive kernel launches on one device run by one call of the backend (`Backend.batch`).

`group` splits a step list into runs of at least MIN_RUN consecutive kernels on one device and asks the backend
for a launcher of each run once; `launch_run` starts a whole run with one call, saving the Python between launches.
Without a backend launcher the steps stay single launches. A plan groups at its second run (most schedules run
once, and the CPU launcher is compiled once per machine), a capture at its first replay. Results do not change;
DEBUG >= 2 uses single launches to time each. docs/architecture.md, "Inside the runtime".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from plygrad.runtime.bounds import DeferredBounds
from plygrad.runtime.counters import GlobalCounters
from plygrad.runtime.device import Device
from plygrad.runtime.lowering import LoadedProgram
from plygrad.runtime.plugin import BatchEntry, BatchLaunch

MIN_RUN: Final = 2  # a single kernel gains nothing from a batch


class KernelLaunch(Protocol):
    """What a plan's or a capture's kernel step has."""

    @property
    def device(self) -> str: ...

    @property
    def loaded(self) -> LoadedProgram: ...

    @property
    def bounds(self) -> DeferredBounds | None: ...


@dataclass(frozen=True)
class KernelRun:
    """Consecutive kernel steps launched by one call of `launcher`."""

    launcher: BatchLaunch
    steps: tuple[Any, ...]
    slots: tuple[int, ...]  # the buffer positions of every step, in launch order
    variable: bool  # some step takes variable values (or has bounds that depend on them)
    ops: int
    mem: int


def group(steps: Sequence[Any], slots_of: Callable[[Any], tuple[int, ...]],
          is_kernel: Callable[[Any], bool]) -> tuple[Any, ...]:
    """`steps` with each run of MIN_RUN or more consecutive kernels on one device whose backend batches them
    replaced by a KernelRun; the other steps as they are."""
    grouped: list[Any] = []
    pending: list[Any] = []

    def flush() -> None:
        run = _run_of(pending, slots_of) if len(pending) >= MIN_RUN else None
        grouped.extend(pending if run is None else (run,))
        pending.clear()

    for step in steps:
        if not is_kernel(step):
            flush()
            grouped.append(step)
            continue
        if pending and pending[0].device != step.device:
            flush()
        pending.append(step)
    flush()
    return tuple(grouped)


def _run_of(steps: Sequence[KernelLaunch], slots_of: Callable[[Any], tuple[int, ...]]) -> KernelRun | None:
    entries = [BatchEntry(s.loaded.program, s.loaded.info.global_size, s.loaded.info.local_size, len(slots_of(s)),
                          len(s.loaded.var_names)) for s in steps]
    launcher = Device[steps[0].device].batch(entries)
    if launcher is None:
        return None
    return KernelRun(launcher, tuple(steps), tuple(i for s in steps for i in slots_of(s)),
                     any(s.loaded.var_names or s.bounds is not None for s in steps),
                     sum(s.loaded.info.ops for s in steps), sum(s.loaded.info.mem for s in steps))


def launch_run(run: KernelRun, handles: list[object], values_of: Callable[[Any], Sequence[int]]) -> None:
    """Start every kernel of `run` with one call: `handles` are its steps' buffer handles in order, `values_of(step)`
    a step's variable values (asked only when some step has variables). Bounds are proved first, for every step."""
    vals: list[int] = []
    if run.variable:
        for step in run.steps:
            values = values_of(step)
            if step.bounds is not None:
                step.bounds.check(values)
            vals.extend(values)
    run.launcher(handles, vals)
    GlobalCounters.record_many(len(run.steps), run.ops, run.mem)
