"""The scheduler conformance suite: any scheduler plugin, run against `unfused` on random graphs, without a runtime.

Each random tensor graph (`random_graphs.py`) is scheduled by the plugin and by `unfused` (one kernel per op, the
oracle), both schedules run on the NumPy executor (`numpy_exec.py`) over the same inputs, and every output and
input buffer is compared; `unfused` is itself checked against `numpy_exec.reference`.

    from plygrad.scheduler.conformance import check_scheduler
    check_scheduler("mine", graphs=50, seed=0)       # or: python -m plygrad.scheduler.conformance mine

What fails a graph, what is skipped, how to reproduce one graph by its seed, and the `conformance` extra (NumPy,
imported on first use): docs/scheduler.md, "The conformance suite".
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Final

from plygrad.ir import (
    IRDecodeError,
    IRVerifyError,
    IRVersionError,
    Ops,
    Stage,
    UOp,
    deserialize,
    serialize,
    strip_reshapes,
)
from plygrad.scheduler.api import schedule_unfused
from plygrad.scheduler.random_graphs import RandomGraph, random_graph

if TYPE_CHECKING:
    from plygrad.scheduler.numpy_exec import Array

ScheduleFn = Callable[[bytes], bytes]
SCHEDULERS: Final = "plygrad.schedulers"
RTOL: Final = 1e-4
ATOL: Final = 1e-5


class ConformanceError(AssertionError):
    """A scheduler gave a wrong or refused schedule on at least one graph; `report` holds every failure."""

    def __init__(self, report: ConformanceReport) -> None:
        super().__init__(report.summary())
        self.report = report


@dataclass(frozen=True)
class Failure:
    """What went wrong on the graph of `seed`."""

    seed: int
    problem: str

    def __str__(self) -> str:
        return f"graph seed {self.seed}: {self.problem}"


@dataclass
class ConformanceReport:
    """The outcome of one run: how many graphs ran, were skipped, failed, and the kernels each scheduler made."""

    scheduler: str
    seed: int
    graphs: int
    failures: list[Failure] = field(default_factory=list)
    skips: list[Failure] = field(default_factory=list)  # graphs the oracle had no answer for, and why
    kernels: int = 0  # in the plugin's schedules, over the graphs that ran
    unfused_kernels: int = 0

    @property
    def skipped(self) -> int:
        return len(self.skips)

    @property
    def ok(self) -> bool:
        """No graph failed, and at least one was checked (if the oracle had no answer for any, something else is
        wrong, and the suite says so instead of passing)."""
        return not self.failures and (self.graphs == 0 or self.skipped < self.graphs)

    def summary(self) -> str:
        head = (f"scheduler {self.scheduler}: {self.graphs - len(self.failures) - self.skipped} of {self.graphs} "
                f"random graphs (seeds {self.seed}..{self.seed + self.graphs - 1}) equal to unfused, "
                f"{len(self.failures)} failed, {self.skipped} skipped (unfused had no answer); "
                f"{self.kernels} kernels against unfused's {self.unfused_kernels}")
        if self.ok:
            return head
        if not self.failures:
            return f"{head}\n  nothing was checked: unfused had no answer for any graph, e.g. {self.skips[0]}"
        lines = [head, *(f"  {f}" for f in self.failures[:20])]
        if len(self.failures) > 20:
            lines.append(f"  ... and {len(self.failures) - 20} more")
        lines.append(f"  reproduce one: python -m plygrad.scheduler.conformance <name> --graphs 1 --seed "
                     f"{self.failures[0].seed}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Outcome:
    """The values a schedule computed: each output of the SINK (flat), every buffer of the graph after the run."""

    outputs: list[Array]
    buffers: dict[int, Array]
    kernels: int


class RefusedScheduleError(Exception):
    """A plugin's schedule that cannot be run: it does not decode, fails verification, has buffers that do not
    fit the graph, or makes the NumPy executor touch memory outside a buffer. The message names the plugin."""


# ---- finding schedulers -----------------------------------------------------------------------------------------
def _plugins() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=SCHEDULERS)}


def resolve(scheduler: str | ScheduleFn) -> tuple[str, str, ScheduleFn]:
    """A scheduler by `plygrad.schedulers` entry-point name, or a schedule callable: how reports name it, how
    errors about its schedules name it (entry point and distribution, or module and qualified name), and the
    callable. A missing or broken entry point raises LookupError saying what is installed."""
    if not isinstance(scheduler, str):
        name = getattr(scheduler, "__name__", type(scheduler).__name__)
        where = f"{getattr(scheduler, '__module__', '?')}.{getattr(scheduler, '__qualname__', name)}"
        return repr(name), f"scheduler {name!r} (in-process {where})", scheduler
    found = _plugins()
    entry = found.get(scheduler)
    if entry is None:
        known = ", ".join(sorted(found)) or "none"
        raise LookupError(f"no {SCHEDULERS} entry point named {scheduler!r} (found: {known}); install the "
                          "distribution that provides it")
    try:
        fn = entry.load()
    except Exception as exc:
        raise LookupError(f"scheduler {scheduler!r} ({entry.value}) failed to import: {exc}") from exc
    if not callable(fn):
        raise LookupError(f"scheduler entry point {scheduler!r} ({entry.value}) is not callable")
    dist = f" from distribution {entry.dist.name} {entry.dist.version}" if entry.dist is not None else ""
    return repr(scheduler), f"scheduler {scheduler!r} ({entry.value}{dist})", fn


# ---- running schedules on NumPy -----------------------------------------------------------------------------------
def _numpy_exec() -> ModuleType:
    """plygrad.scheduler.numpy_exec, imported on first use: it needs NumPy (the `conformance` extra)."""
    try:
        from plygrad.scheduler import numpy_exec
    except ImportError as exc:
        raise ImportError("the scheduler conformance suite runs schedules with NumPy, which is not installed: "
                          "pip install plygrad-scheduler[conformance]") from exc
    return numpy_exec


def _input_arrays(graph: RandomGraph) -> dict[int, Array]:
    ex = _numpy_exec()
    return {i: ex.np.array(values, ex.np_dtype(dtype)) for i, (dtype, values) in graph.inputs.items()}


def _read(data: bytes, graph: RandomGraph, producer: str) -> UOp:
    """The LINEAR in a plugin's bytes, refused unless it decodes, verifies and names buffers that fit the graph."""
    def refuse(check: str, detail: str) -> RefusedScheduleError:
        return RefusedScheduleError(f"the schedule from {producer} {check}: {detail}")

    if not isinstance(data, bytes | bytearray):
        raise refuse("returned something that is not bytes", f"got a {type(data).__name__}")
    try:
        linear = deserialize(bytes(data), Stage.SCHEDULE)
    except (IRDecodeError, IRVersionError) as exc:
        check = "fails IR verification" if isinstance(exc.__cause__, IRVerifyError) else \
            "does not decode as serialized plygrad IR"
        raise refuse(check, str(exc)) from exc
    sources = graph.sink.src
    if len(linear.arg) != len(sources):
        raise refuse("has buffers that do not fit", f"LINEAR.arg names {len(linear.arg)} outputs, the SINK has "
                     f"{len(sources)}")
    declared = {b.arg.id: b for call in linear.src for b in call.src[1:] if b.op is Ops.BUFFER}
    for buf_id, node in graph.buffers.items():
        mine = declared.get(buf_id)
        if mine is not None and (mine.dtype, mine.arg.size, mine.arg.device) != \
                (node.dtype, node.arg.size, node.arg.device):
            raise refuse("has buffers that do not fit", f"graph buffer {buf_id} is {node.dtype.name}"
                         f"[{node.arg.size}] on {node.arg.device}, the schedule declares {mine.dtype.name}"
                         f"[{mine.arg.size}] on {mine.arg.device}")
    for i, (buf_id, tensor) in enumerate(zip(linear.arg, sources, strict=True)):
        out = declared.get(buf_id, graph.buffers.get(buf_id))
        size = math.prod(tensor.shape or ())
        if out is None or out.dtype is not tensor.dtype or out.arg.size != size:
            raise refuse("has buffers that do not fit", f"output {i} is {tensor.dtype.name}[{size}], LINEAR.arg "
                         f"names buffer {buf_id}, " + ("which no CALL uses" if out is None else
                                                       f"a {out.dtype.name}[{out.arg.size}]"))
    return linear


def execute(data: bytes, graph: RandomGraph, producer: str) -> _Outcome:
    """Run the schedule `data` of `graph` on the NumPy executor over fresh copies of the graph's input data."""
    ex = _numpy_exec()
    linear = _read(data, graph, producer)
    try:
        outputs, after = ex.run_schedule(linear, _input_arrays(graph))
    except ex.ExecutionError as exc:
        raise RefusedScheduleError(f"the schedule from {producer} cannot run: {exc}") from exc
    return _Outcome(outputs, {i: after[i] for i in graph.inputs}, ex.kernel_count(linear))


def evaluate_reference(graph: RandomGraph) -> _Outcome:
    """What the tensor graph says, evaluated by NumPy without any schedule (`numpy_exec.reference`)."""
    ex = _numpy_exec()
    values, after = ex.reference(graph.sink, _input_arrays(graph))
    return _Outcome([ex.np.ascontiguousarray(v).reshape(-1) for v in values], after, 0)


# ---- comparing ----------------------------------------------------------------------------------------------------
def _first_difference(got: Array, want: Array, oracle: str) -> str | None:
    np = _numpy_exec().np
    if got.shape != want.shape:
        return f"has {got.size} elements, {oracle}'s has {want.size}"
    if want.dtype.kind == "f" or got.dtype.kind == "f":
        same = np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        same = got == want
    if bool(np.all(same)):
        return None
    j = int(np.argmin(same))
    return f"differs at element {j}: {got[j].item()!r}, {oracle} gives {want[j].item()!r}"


def compare(mine: _Outcome, oracle: _Outcome, graph: RandomGraph, name: str = "unfused") -> str | None:
    """The first difference between two runs of one graph, in words (None: they agree). An ASSIGN's output is
    its target buffer, compared as a buffer, not as an output (the reference gives the assigned value)."""
    for i, (got, want) in enumerate(zip(mine.outputs, oracle.outputs, strict=True)):
        if strip_reshapes(graph.sink.src[i]).op is Ops.ASSIGN:
            continue
        problem = _first_difference(got, want, name)
        if problem:
            return f"output {i} {problem}"
    for buffer_id, want in oracle.buffers.items():
        problem = _first_difference(mine.buffers[buffer_id], want, name)
        if problem:
            return f"input buffer {buffer_id} after the run (an ASSIGN writes it) {problem}"
    return None


def _check_graph(producer: str, fn: ScheduleFn, graph: RandomGraph, report: ConformanceReport) -> None:
    data = serialize(graph.sink, Stage.TENSOR)
    try:
        oracle = execute(schedule_unfused(data), graph, "scheduler 'unfused'")
    except Exception as exc:
        report.skips.append(Failure(graph.seed, f"unfused: {type(exc).__name__}: {exc}"))
        return
    wrong = compare(oracle, evaluate_reference(graph), graph, "the NumPy reference")
    if wrong is not None:  # the oracle itself is wrong here: no answer to hold the plugin to
        report.skips.append(Failure(graph.seed, f"unfused disagrees with the NumPy reference: {wrong}"))
        return
    try:
        produced = fn(data)
    except Exception as exc:
        report.failures.append(Failure(graph.seed, f"the scheduler raised {type(exc).__name__}: {exc}"))
        return
    try:
        mine = execute(produced, graph, producer)
    except RefusedScheduleError as exc:
        report.failures.append(Failure(graph.seed, f"its schedule was refused: {exc}"))
        return
    report.kernels += mine.kernels
    report.unfused_kernels += oracle.kernels
    problem = compare(mine, oracle, graph)
    if problem is not None:
        report.failures.append(Failure(graph.seed, problem))


# ---- the entry points -----------------------------------------------------------------------------------------
def run_conformance(scheduler: str | ScheduleFn, graphs: int = 25, seed: int = 0) -> ConformanceReport:
    """Run `graphs` random graphs (seeds `seed`, `seed + 1`, ...) through `scheduler` and `unfused` on the NumPy
    executor and report every graph whose results differ; raises nothing for a wrong schedule (see the report)."""
    _numpy_exec()  # up front: without NumPy every graph would fail to run, and the ImportError says what to install
    name, producer, fn = resolve(scheduler)
    report = ConformanceReport(name, seed, graphs)
    for graph_seed in range(seed, seed + graphs):
        _check_graph(producer, fn, random_graph(graph_seed), report)
    return report


def check_scheduler(scheduler: str | ScheduleFn, graphs: int = 25, seed: int = 0) -> ConformanceReport:
    """`run_conformance`, raising ConformanceError (an AssertionError, so pytest shows it as a failed check) when
    any graph failed; the pytest form for a plugin's own test suite."""
    report = run_conformance(scheduler, graphs, seed)
    if not report.ok:
        raise ConformanceError(report)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plygrad.scheduler.conformance",
                                     description="Check a scheduler plugin against 'unfused' on random tensor "
                                                 "graphs, run on a NumPy executor of schedules.")
    parser.add_argument("scheduler", help="the plygrad.schedulers entry-point name of the scheduler to check")
    parser.add_argument("--graphs", type=int, default=25, help="how many random graphs (default 25)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the first graph (default 0)")
    args = parser.parse_args(argv)
    try:
        report = run_conformance(args.scheduler, args.graphs, args.seed)
    except (LookupError, ImportError) as exc:  # no such scheduler, or NumPy missing: say so, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
