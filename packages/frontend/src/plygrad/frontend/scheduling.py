"""Finding the scheduler plugin and running what it schedules (DESIGN.md §2, §4).

The frontend never imports a scheduler: it asks the `plygrad.schedulers` entry-point group (through
`plygrad.runtime.discovery`, so `discovery.installed(...)` can plug one in for a test) for the callable named by
`with use_scheduler(name):`, else PLYGRAD_SCHEDULER, else "default". Everything crossing to it is bytes.

Realizing pays Python per call, so `run` does the byte work once per graph *structure*: the graph's BUFFERs are
renumbered 0, 1, ... in the order the graph reaches them (device, dtype and size stay), that normalized graph is
serialized and scheduled once, and the schedule's `ExecPlan` (plygrad.runtime: decoded, verified, lowered once) runs
over the real Buffers by rank. So `x + 1` realized again over another `x` of the same shape costs a walk of the
graph and the launches. With PLYGRAD_FORCE_BYTES on, every realize serializes the real graph, schedules it and
decodes the schedule, as if each layer ran in another process: the reference the cached path is tested against.

`capturing()` records every plan run inside the block into a `plygrad.runtime.Capture` (what `TinyJit` replays).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from plygrad.frontend import config
from plygrad.frontend.errors import SchedulerNotFoundError
from plygrad.ir import BufferRef, Ops, Stage, UOp, deserialize, dtypes, serialize
from plygrad.runtime import Buffer, Capture, ExecPlan, discovery, load_plan, lookup_buffer
from plygrad.runtime.buffer import BytesLike
from plygrad.runtime.config import PLYGRAD_FORCE_BYTES

SCHEDULERS: Final = "plygrad.schedulers"
ScheduleFn = Callable[[bytes], bytes]

_CHOSEN: list[str] = []  # the stack of `use_scheduler` blocks; the innermost wins
_LOADED: dict[str, ScheduleFn] = {}
# host bytes waiting to be copied into a Buffer: a Tensor made from data allocates nothing until it is realized,
# so graphs can be built (and tested) without any backend installed
_PENDING: Final[weakref.WeakKeyDictionary[Buffer, BytesLike]] = weakref.WeakKeyDictionary()

# (scheduler callable, normalized SINK) -> the schedule's bytes; the runtime caches the plan of those bytes
_SCHEDULES: Final[OrderedDict[tuple[ScheduleFn, UOp], bytes]] = OrderedDict()
MAX_SCHEDULES: Final = 2048
_CAPTURES: list[Capture] = []  # the stack of `capturing` blocks; every run is recorded into the innermost


def _forget_plugins() -> None:
    _LOADED.clear()
    _SCHEDULES.clear()


discovery.on_change(_forget_plugins)


def scheduler_name() -> str:
    """The scheduler a realize uses now: the innermost `use_scheduler` block, else PLYGRAD_SCHEDULER."""
    return _CHOSEN[-1] if _CHOSEN else config.PLYGRAD_SCHEDULER.get()


@contextmanager
def use_scheduler(name: str) -> Iterator[None]:
    """Realize with the `plygrad.schedulers` entry point `name` inside the block (`Tensor.scheduler(name)`)."""
    _CHOSEN.append(name)
    try:
        yield
    finally:
        _CHOSEN.pop()


def find_scheduler(name: str | None = None) -> ScheduleFn:
    """The schedule callable registered as `name` (default: `scheduler_name()`), loaded once."""
    name = scheduler_name() if name is None else name
    if name not in _LOADED:
        hint = "pip install plygrad-scheduler, or set PLYGRAD_SCHEDULER / use Tensor.scheduler(name) with one found"
        _LOADED[name] = discovery.load_callable(SCHEDULERS, name, "scheduler", hint, SchedulerNotFoundError)
    return _LOADED[name]


def stage_host_data(buf: Buffer, data: BytesLike) -> None:
    """Remember `data` as `buf`'s contents; it is copied in the first time a realize needs the buffer."""
    _PENDING[buf] = data


def flush_host_data(buffers: Sequence[Buffer]) -> None:
    """Copy staged host data into those of `buffers` that still have some."""
    for buf in buffers:
        data = _PENDING.pop(buf, None)
        if data is not None:
            buf.copyin(data)


def schedule_bytes(roots: Sequence[UOp]) -> bytes:
    """Serialize SINK(roots) at the TENSOR stage and hand it to the current scheduler; SCHEDULE-stage bytes back."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
    return find_scheduler()(serialize(sink, Stage.TENSOR))


def schedule_uop(roots: Sequence[UOp]) -> UOp:
    """The LINEAR the current scheduler makes of `roots` (verified as it is read back)."""
    return deserialize(schedule_bytes(roots), Stage.SCHEDULE)


def normalize(sink: UOp) -> tuple[UOp, list[int]]:
    """`sink` with its BUFFERs renumbered 0, 1, ... in toposort order, and the real buffer id of each number."""
    renumber: dict[UOp, UOp] = {}
    ids: list[int] = []
    for node in sink.toposort:
        if node.op is Ops.BUFFER:
            ref: BufferRef = node.arg
            renumber[node] = UOp(Ops.BUFFER, node.dtype, (), BufferRef(len(ids), ref.device, ref.size))
            ids.append(ref.id)
    return (sink.substitute(renumber) if renumber else sink), ids


def _cached_schedule(key: UOp) -> bytes:
    """The schedule bytes of a normalized SINK, asked of the scheduler once per (scheduler, structure).

    Keyed by the loaded scheduler callable, not its name: finding it is a dict lookup, and a scheduler that is
    swapped or uninstalled (discovery clears `_LOADED`) is never answered for by another one's cached schedules."""
    schedule = find_scheduler()
    cache_key = (schedule, key)
    data = _SCHEDULES.get(cache_key)
    if data is None:
        data = _SCHEDULES[cache_key] = schedule(serialize(key, Stage.TENSOR))
        if len(_SCHEDULES) > MAX_SCHEDULES:
            _SCHEDULES.popitem(last=False)
    return data


@contextmanager
def capturing() -> Iterator[Capture]:
    """Record every schedule run inside the block (its plan and Buffers) into the Capture this yields."""
    capture = Capture()
    _CAPTURES.append(capture)
    try:
        yield capture
    finally:
        _CAPTURES.pop()


def run(roots: Sequence[UOp], inputs: Sequence[Buffer]) -> list[Buffer]:
    """Schedule and run `roots`; return the Buffer holding each root. `inputs` are the Buffers the graph reads."""
    unique = list(dict.fromkeys(roots))  # hash-consed: equal graphs are one node, realized once
    sink = UOp(Ops.SINK, dtypes.void, tuple(unique))
    by_id = {buf.id: buf for buf in inputs}
    plan: ExecPlan
    if PLYGRAD_FORCE_BYTES.get():
        plan, given = load_plan(find_scheduler()(serialize(sink, Stage.TENSOR))), by_id
    else:
        key, ids = normalize(sink)
        plan = load_plan(_cached_schedule(key))
        given = {rank: by_id[i] if i in by_id else lookup_buffer(i) for rank, i in enumerate(ids)}
    flush_host_data(inputs)
    bufs = plan.bind(given)
    plan.execute(bufs)
    if _CAPTURES:
        _CAPTURES[-1].record(plan, bufs)
    by_root = {root: plan.output_buffer(bufs, n, given) for n, root in enumerate(unique)}
    return [by_root[root] for root in roots]
