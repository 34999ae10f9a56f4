"""Recorded launches, replayed over other buffers: the primitive a jit (`plygrad.frontend.jit.TinyJit`) builds on.

A `Capture` records plan runs as they happen (`record(plan, bufs)`: the `ExecPlan` and the Buffer bound to each of
its slots). `replay(swap)` runs every recorded kernel and copy again, in order, over the same Buffers except those
`swap` replaces (a jit's new inputs), without scheduling, lowering or even resolving slots again: the recording is
flattened into one table of distinct Buffers and a list of launches over table positions.

Buffers the recorded runs allocated for themselves (a schedule's negative ids) are kept and reused by every replay,
so a replay allocates nothing and its outputs land in the same Buffers each time. Variable values are the recorded
ones unless `replay(vals=...)` gives a new value for a variable name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from plygrad.runtime import config
from plygrad.runtime.buffer import Buffer
from plygrad.runtime.errors import ScheduleError
from plygrad.runtime.lowering import LoadedProgram
from plygrad.runtime.plan import CopyStep, ExecPlan, copy_buffer, launch


@dataclass(frozen=True)
class _Launch:
    device: str
    loaded: LoadedProgram
    positions: tuple[int, ...]  # into the capture's Buffer table, parameter order
    vals: tuple[int, ...]


@dataclass(frozen=True)
class _Copy:
    dst: int
    src: int


class Capture:
    """Plan runs recorded over fixed Buffers (see the module docstring)."""

    def __init__(self) -> None:
        self.buffers: list[Buffer] = []  # every distinct Buffer the recorded runs used, in first-use order
        self._position: dict[int, int] = {}  # id(Buffer) -> index in `buffers` (Buffers are kept alive there)
        self._steps: list[_Launch | _Copy] = []

    def _at(self, buf: Buffer) -> int:
        pos = self._position.get(id(buf))
        if pos is None:
            pos = self._position[id(buf)] = len(self.buffers)
            self.buffers.append(buf)
        return pos

    def record(self, plan: ExecPlan, bufs: Sequence[Buffer]) -> None:
        """Append the steps of one run of `plan` over `bufs` (one Buffer per slot, as `plan.bind` gave them)."""
        positions = [self._at(b) for b in bufs]
        for step in plan.steps:
            if isinstance(step, CopyStep):
                self._steps.append(_Copy(positions[step.dst], positions[step.src]))
            else:
                self._steps.append(_Launch(step.device, step.loaded, tuple(positions[i] for i in step.slots),
                                           step.vals))

    def __contains__(self, buf: Buffer) -> bool:
        return id(buf) in self._position

    @property
    def kernel_count(self) -> int:
        return sum(1 for s in self._steps if isinstance(s, _Launch))

    def __len__(self) -> int:
        return len(self._steps)

    def replay(self, swap: Mapping[Buffer, Buffer] | None = None, vals: Mapping[str, int] | None = None) -> None:
        """Run the recorded steps again, reading and writing `swap[b]` wherever the recording used `b`.

        A replacement must hold what the original holds (device, size, dtype): ScheduleError otherwise; a key the
        recording never used is ignored (it has nothing to replace). `vals` overrides variable values by name.
        """
        table = list(self.buffers)
        for old, new in (swap or {}).items():
            pos = self._position.get(id(old))
            if pos is None or new is old:
                continue
            if (new.device, new.size, new.dtype) != (old.device, old.size, old.dtype):
                raise ScheduleError(f"replay: buffer {old.id} ({old.size} x {old.dtype} on {old.device}) cannot be "
                                    f"replaced by buffer {new.id} ({new.size} x {new.dtype} on {new.device})")
            table[pos] = new
        debug = config.DEBUG.get()
        handles = [b.handle for b in table]
        for step in self._steps:
            if isinstance(step, _Copy):
                copy_buffer(table[step.dst], table[step.src])
                continue
            step_vals: Sequence[int] = step.vals
            if vals and step.loaded.var_names:
                step_vals = [vals.get(n, v) for n, v in zip(step.loaded.var_names, step.vals, strict=True)]
            launch(step.device, step.loaded, [handles[i] for i in step.positions], step_vals, debug)
