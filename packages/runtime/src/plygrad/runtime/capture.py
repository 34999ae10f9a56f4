"""Recorded launches, replayed over other buffers: the primitive a jit (`plygrad.frontend.jit.TinyJit`) builds on.

A `Capture` records plan runs (`record(plan, bufs)`); `replay(swap)` runs every recorded kernel and copy again, in
order, over the same Buffers except those `swap` replaces, from one flat table of Buffers and launches. Buffers
the runs allocated are kept and reused, variables take the recorded values unless `replay(vals=...)` gives new
ones (keyed by the recorder's names, `record(..., names=)`), and `prune(inputs)` drops steps that cannot depend on
a replay's inputs. docs/jit.md, "TinyJit".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from plygrad.runtime import config, trace
from plygrad.runtime.batch import KernelRun, group, launch_run
from plygrad.runtime.bounds import DeferredBounds
from plygrad.runtime.buffer import Buffer
from plygrad.runtime.errors import ScheduleError
from plygrad.runtime.lowering import LoadedProgram
from plygrad.runtime.plan import CopyStep, ExecPlan, copy_buffer, launch, step_values


@dataclass(frozen=True)
class _Launch:
    device: str
    loaded: LoadedProgram
    positions: tuple[int, ...]  # into the capture's Buffer table, parameter order
    vals: tuple[int, ...]  # the recorded values, in the program's variable order
    names: tuple[str, ...]  # the recorder's names of those variables (what `replay(vals=)` is keyed by)
    bounds: DeferredBounds | None = None  # accesses depending on variables: proved at each new set of values


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
        self._grouped: tuple[_Launch | _Copy | KernelRun, ...] | None = None  # `_steps` batched (batch.py)

    def _at(self, buf: Buffer) -> int:
        pos = self._position.get(id(buf))
        if pos is None:
            pos = self._position[id(buf)] = len(self.buffers)
            self.buffers.append(buf)
        return pos

    def record(self, plan: ExecPlan, bufs: Sequence[Buffer], vals: Mapping[str, int] | None = None,
               names: Mapping[str, str] | None = None) -> None:
        """Append the steps of one run of `plan` over `bufs` (one Buffer per slot, as `plan.bind` gave them).
        `vals` are the variable values the run was executed with (`plan.execute(bufs, vals)`); `names` renames
        the plan's variables to the recorder's own names (default: the plan's)."""
        positions = [self._at(b) for b in bufs]
        rename = names or {}
        self._grouped = None
        for step in plan.steps:
            if isinstance(step, CopyStep):
                self._steps.append(_Copy(positions[step.dst], positions[step.src]))
            else:
                self._steps.append(_Launch(step.device, step.loaded, tuple(positions[i] for i in step.slots),
                                           tuple(step_values(step, vals)),
                                           tuple(rename.get(n, n) for n in step.loaded.var_names), step.bounds))

    def __contains__(self, buf: Buffer) -> bool:
        return id(buf) in self._position

    def prune(self, inputs: Iterable[Buffer], varying: Callable[[str], bool] = lambda name: False) -> int:
        """Drop the steps a replay need not run again (module docstring); returns how many were dropped.

        `inputs` are the Buffers a replay swaps; `varying(name)` says whether a variable gets new values per
        replay (a launch taking one is kept: its results change even when its Buffers do not)."""
        needed = {self._position[id(b)] for b in inputs if id(b) in self._position}
        kept: list[_Launch | _Copy] = []
        for step in self._steps:
            touched = {step.dst, step.src} if isinstance(step, _Copy) else set(step.positions)
            if touched & needed or (isinstance(step, _Launch) and any(varying(n) for n in step.names)):
                kept.append(step)
                needed |= touched
        dropped = len(self._steps) - len(kept)
        self._steps = kept
        self._grouped = None
        return dropped

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
        # runs of consecutive kernels go to the backend in one call (batch.py), except where DEBUG times each one
        rec = trace.RECORDER
        steps = self._steps if debug >= 2 or rec is not None else self._grouped or self._group()
        run = -1 if rec is None else rec.begin_run(None, (), "replay")
        for step in steps:
            if isinstance(step, KernelRun):
                launch_run(step, [handles[i] for i in step.slots], lambda s: _values(s, vals))
                continue
            if isinstance(step, _Copy):
                if rec is None:
                    copy_buffer(table[step.dst], table[step.src])
                else:
                    rec.copy(table[step.dst], table[step.src], copy_buffer)
                continue
            step_vals = _values(step, vals)
            if step.bounds is not None:
                step.bounds.check(step_vals)
            launch(step.device, step.loaded, [handles[i] for i in step.positions], step_vals, debug)
        if rec is not None:
            rec.end_run(run)

    def _group(self) -> tuple[_Launch | _Copy | KernelRun, ...]:
        """The steps with every run of consecutive kernels the backend batches as one KernelRun, found once per
        recording (record and prune start again)."""
        grouped = group(self._steps, lambda s: s.positions, lambda s: isinstance(s, _Launch))
        self._grouped = grouped
        return grouped


def _values(step: _Launch, vals: Mapping[str, int] | None) -> Sequence[int]:
    """The variable values `step` launches with: `vals[name]` where given, else the recorded value."""
    if vals and step.names:
        return [vals.get(n, v) for n, v in zip(step.names, step.vals, strict=True)]
    return step.vals
