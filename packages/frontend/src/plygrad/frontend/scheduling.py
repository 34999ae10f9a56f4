"""Finding the scheduler plugin and running what it schedules (DESIGN.md §2, §4).

The frontend never imports a scheduler: it asks the `plygrad.schedulers` entry-point group (through
`plygrad.runtime.discovery`, so `discovery.installed(...)` can plug one in for a test) for the callable named by
`with use_scheduler(name):`, else PLYGRAD_SCHEDULER, else "default". Everything crossing to it is bytes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from plygrad.frontend import config
from plygrad.frontend.errors import SchedulerNotFoundError
from plygrad.ir import Ops, Stage, UOp, deserialize, dtypes, serialize
from plygrad.runtime import Buffer, discovery, run_linear

SCHEDULERS: Final = "plygrad.schedulers"
ScheduleFn = Callable[[bytes], bytes]

_CHOSEN: list[str] = []  # the stack of `use_scheduler` blocks; the innermost wins
_LOADED: dict[str, ScheduleFn] = {}
# host bytes waiting to be copied into a Buffer: a Tensor made from data allocates nothing until it is realized,
# so graphs can be built (and tested) without any backend installed
_PENDING: Final[weakref.WeakKeyDictionary[Buffer, bytes]] = weakref.WeakKeyDictionary()

discovery.on_change(_LOADED.clear)


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


def stage_host_data(buf: Buffer, data: bytes) -> None:
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


def run(roots: Sequence[UOp], inputs: Sequence[Buffer]) -> list[Buffer]:
    """Schedule and run `roots`; return the Buffer holding each root. `inputs` are the Buffers the graph reads."""
    unique = list(dict.fromkeys(roots))  # hash-consed: equal graphs are one node, realized once
    data = schedule_bytes(unique)
    linear = deserialize(data, Stage.SCHEDULE)
    flush_host_data(inputs)
    outputs = run_linear(data, {buf.id: buf for buf in inputs})
    by_root = {root: outputs[i] for root, i in zip(unique, linear.arg, strict=True)}
    return [by_root[root] for root in roots]
