"""Finding the scheduler plugin and running what it schedules (docs/design.md §2, §4).

The scheduler is the `plygrad.schedulers` entry point named by `with use_scheduler(name):`, else PLYGRAD_SCHEDULER,
else "default"; everything crossing to it is bytes. `run` schedules once per graph *structure* (BUFFERs and bound
variables renumbered, the normalized graph serialized and scheduled once) and runs the cached `ExecPlan` over the
real Buffers; PLYGRAD_FORCE_BYTES skips the cache. docs/frontend-internals.md, "The schedule cache", has the details
and the threading rules.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Final

from plygrad.frontend import autograd, config
from plygrad.frontend.errors import SchedulerNotFoundError
from plygrad.frontend.randomness import stream
from plygrad.frontend.realize_state import STATE
from plygrad.ir import Ops, Stage, UOp, dtypes, serialize, structural_key
from plygrad.runtime import Buffer, ExecPlan, discovery, load_plan, lookup_buffer, plans_generation, read_schedule
from plygrad.runtime.config import PLYGRAD_CODEGEN, PLYGRAD_FORCE_BYTES

SCHEDULERS: Final = "plygrad.schedulers"
ScheduleFn = Callable[[bytes], bytes]

# this thread's innermost `use_scheduler` block (None: none is open); each block restores the one around it
_CHOSEN: Final[ContextVar[str | None]] = ContextVar("plygrad_scheduler", default=None)
_LOADED: dict[str, ScheduleFn] = {}
_PRODUCERS: dict[str, str] = {}  # name -> how errors name the plugin (entry point, distribution), found with it
_LOADING: Final = threading.Lock()  # one thread imports a scheduler plugin; the others wait and use it


def _forget_plugins() -> None:
    _LOADED.clear()
    _PRODUCERS.clear()
    STATE.forget_schedules()


discovery.on_change(_forget_plugins)


def scheduler_name() -> str:
    """The scheduler a realize in this thread uses now: its innermost `use_scheduler` block, else PLYGRAD_SCHEDULER."""
    chosen = _CHOSEN.get()
    return config.PLYGRAD_SCHEDULER.get() if chosen is None else chosen


@contextmanager
def use_scheduler(name: str) -> Iterator[None]:
    """Realize with the `plygrad.schedulers` entry point `name` inside the block (`Tensor.scheduler(name)`); other
    threads keep their own choice."""
    token = _CHOSEN.set(name)
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def find_scheduler(name: str | None = None) -> ScheduleFn:
    """The schedule callable registered as `name` (default: `scheduler_name()`), loaded once."""
    name = scheduler_name() if name is None else name
    found = _LOADED.get(name)
    if found is None:
        with _LOADING:
            found = _LOADED.get(name)
            if found is None:
                hint = ("pip install plygrad-scheduler, or set PLYGRAD_SCHEDULER / use Tensor.scheduler(name) with "
                        "one found")
                _PRODUCERS[name] = discovery.describe(SCHEDULERS, name, "scheduler")
                found = _LOADED[name] = discovery.load_callable(SCHEDULERS, name, "scheduler", hint,
                                                                SchedulerNotFoundError)
    return found


def producer(name: str | None = None) -> str:
    """How errors caused by the output of scheduler `name` (default: the current one) name it
    (plygrad.runtime.plugin_output)."""
    name = scheduler_name() if name is None else name
    return _PRODUCERS.get(name) or f"scheduler {name!r}"


def schedule_bytes(roots: Sequence[UOp]) -> bytes:
    """Serialize SINK(roots) at the TENSOR stage and hand it to the current scheduler; SCHEDULE-stage bytes back."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
    return find_scheduler()(serialize(sink, Stage.TENSOR))


def schedule_uop(roots: Sequence[UOp]) -> UOp:
    """The LINEAR the current scheduler makes of `roots` (verified as it is read back)."""
    return read_schedule(schedule_bytes(roots), producer())


@dataclass
class Normalized:
    """A graph's structural key and what maps it back: the real buffer id of each BUFFER number, and for each
    variable of the key its value and its real name (the random generator's `rng_` variables are renumbered).
    `plans` keeps the plan each (scheduler, codegen) ran this graph with, once its outputs were checked against the
    graph's roots, with the runtime's `plans_generation()` it was loaded in: a graph realized again (found by
    identity, `STATE.seen_graph`) skips the schedule and plan caches and that check until the runtime's plans are
    cleared."""

    key: UOp
    ids: list[int]
    vals: dict[str, int]
    names: dict[str, str]
    plans: dict[tuple[ScheduleFn, str], tuple[int, ExecPlan]] = field(default_factory=dict)


def normalize(sink: UOp) -> Normalized:
    """`sink` with its BUFFERs renumbered 0, 1, ... in toposort order and every BIND bound to its variable's minimum;
    the variables a random draw made (stream.VAR_PREFIX, one pair per draw) are renamed by rank too, so draws of one
    size at any offset and seed are one structure (scheduled, lowered and compiled once).

    A graph realized recently is found by identity, without a walk (`STATE.seen_graph`): nodes are hash-consed, so
    the same object is the same graph, the same BUFFER ids and BIND values included, and the normalization is a
    function of the graph alone. Remembering a graph keeps its nodes alive, which is what makes building it again
    give the same object."""
    seen = STATE.seen_graph(sink)
    if seen is not None:
        return seen
    ranks: dict[str, int] = {}

    def by_rank(var: UOp) -> UOp:
        name, vmin, vmax = var.arg
        if not name.startswith(stream.VAR_PREFIX):
            return var
        kind = stream.OFFSET_PREFIX if name.startswith(stream.OFFSET_PREFIX) else stream.KEY_PREFIX
        rank = ranks[kind] = ranks.get(kind, -1) + 1
        return UOp.variable(f"{kind}{rank}", vmin, vmax, var.dtype)

    found = structural_key(sink, by_rank)  # plygrad.ir's, so any layer keys a graph the same way
    norm = Normalized(found.key, list(found.buffer_ids), found.bound_values(), found.variable_names())
    if not ranks and _may_recur(sink):
        STATE.remember_graph(sink, norm, len(sink.toposort))
    return norm


def _may_recur(sink: UOp) -> bool:
    """Whether remembering `sink` is worth it and harmless. Not with an ASSIGN: a remembered ASSIGN node that ran
    would stay "done" (realize_state), and the same assign built again would be skipped. Not with the view of a
    realized tensor autograd differentiates through (autograd.REALIZED): the entry, which holds the Buffers its graph
    read, lives as long as the view. A random draw (checked by the caller) never recurs: its variables are new."""
    realized = autograd.REALIZED
    for node in sink.toposort:
        if node.op is Ops.ASSIGN or (realized and node.op is Ops.RESHAPE and node in realized):
            return False
    return True


def run(roots: Sequence[UOp], inputs: Collection[Buffer]) -> list[Buffer]:
    """Schedule and run `roots`; return the Buffer holding each root. `inputs` are the Buffers the graph reads."""
    unique = list(dict.fromkeys(roots)) if len(roots) > 1 else list(roots)  # equal graphs are one node, run once
    sink = UOp(Ops.SINK, dtypes.void, tuple(unique))
    by_id = {buf.id: buf for buf in inputs}
    plan: ExecPlan
    vals: dict[str, int] | None = None
    names: dict[str, str] | None = None
    name = scheduler_name()  # read once: each read of a setting is an environment lookup
    if PLYGRAD_FORCE_BYTES.get():
        plan = load_plan(find_scheduler(name)(serialize(sink, Stage.TENSOR)), producer(name))
        plan.check_outputs(unique)
        given = by_id
    else:
        norm = normalize(sink)
        # keyed by the loaded scheduler callable, not its name, so a swapped or uninstalled scheduler (discovery
        # clears `_LOADED`) is never answered for by another one's schedules
        plan_key = (find_scheduler(name), PLYGRAD_CODEGEN.get())
        kept = norm.plans.get(plan_key)
        generation = plans_generation()
        if kept is not None and kept[0] == generation:
            plan = kept[1]
        else:
            # the schedule bytes of the normalized SINK, asked once per (scheduler, structure)
            plan = load_plan(STATE.schedule(plan_key[0], norm.key), producer(name))
            plan.check_outputs(unique)
            norm.plans[plan_key] = (generation, plan)
        given = {rank: by_id[i] if i in by_id else lookup_buffer(i) for rank, i in enumerate(norm.ids)}
        vals, names = norm.vals, norm.names
    if STATE.any_host_data():
        STATE.flush(inputs)
    bufs = plan.bind(given)
    plan.execute(bufs, vals)
    capture = STATE.capture()
    if capture is not None:
        capture.record(plan, bufs, vals, names)
    if len(unique) == 1:
        return [plan.output_buffer(bufs, 0, given)] * len(roots)
    by_root = {root: plan.output_buffer(bufs, n, given) for n, root in enumerate(unique)}
    return [by_root[root] for root in roots]
