"""Execution plans: a schedule decoded, verified and lowered once, then run many times over any buffers.

An `ExecPlan` keeps the schedule's buffers as numbered slots and each step as a loaded program over slot numbers
(or a copy between two slots); a run only resolves slots to Buffers and launches. `load_plan(schedule)` caches
plans by the schedule bytes or UOp; with PLYGRAD_FORCE_BYTES no plan is cached, which is the reference the cache is
tested against (docs/design.md §2). From its second run a plan launches consecutive kernels of one device in one
backend call (batch.py). A plan is immutable once built and may run in several threads (docs/threads.md).
docs/jit.md and docs/architecture.md, "Inside the runtime".
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from sys import getrefcount
from typing import Final

from plygrad.ir.dtype import DType
from plygrad.ir.errors import IRError
from plygrad.ir.helpers import kernel_name
from plygrad.ir.ops import Ops
from plygrad.ir.records import BufferRef
from plygrad.ir.serialize import deserialize, serialize
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.ir.verify import verify
from plygrad.runtime import config, discovery, plugin_output, trace
from plygrad.runtime.batch import KernelRun, group, launch_run
from plygrad.runtime.bounds import DeferredBounds, check_kernel_bounds, size_variables
from plygrad.runtime.buffer import Buffer, lookup_buffer
from plygrad.runtime.counters import GlobalCounters, kernel_line, opts_line
from plygrad.runtime.device import Device, canonical_device
from plygrad.runtime.errors import IndexBoundsError, ScheduleError
from plygrad.runtime.lowering import LoadedProgram, prepare_kernels

MAX_PLANS: Final = 2048


# the largest fresh Buffer a plan keeps for its next run (`ExecPlan._fresh`). Those of at most SPARE_SMALL_BYTES are
# always kept; larger ones while all plans together keep at most SPARE_BUDGET_BYTES (a MiniLM forward's plan alone
# would keep ~40 MB of intermediates)
SPARE_MAX_BYTES: Final = 1 << 20
SPARE_SMALL_BYTES: Final = 16 << 10
SPARE_BUDGET_BYTES: Final = 64 << 20


@dataclass(frozen=True)
class BufferSlot:
    """One buffer of a schedule: its id there (negative: the schedule's own, fresh per run) and what it holds."""

    id: int
    device: str
    size: int
    dtype: DType


@dataclass(frozen=True)
class KernelStep:
    """Launch `loaded` on `device` with the buffers of `slots` (parameter order) and variable values `vals`."""

    device: str
    loaded: LoadedProgram
    slots: tuple[int, ...]
    vals: tuple[int, ...]
    bounds: DeferredBounds | None = None  # accesses that depend on variables: proved per set of values


@dataclass(frozen=True)
class CopyStep:
    """Copy slot `src` into slot `dst` through host memory (works between any two devices)."""

    dst: int
    src: int


Step = KernelStep | CopyStep


def _kernel_name(body: UOp, call_name: object) -> str:
    """The kernel's own name (plygrad.ir.kernel_name), else its CALL's, else "kernel"."""
    return kernel_name(body, call_name if isinstance(call_name, str) and call_name else "kernel")


class ExecPlan:
    """A verified schedule with its programs loaded (see the module docstring). Build with `ExecPlan.build`."""

    def __init__(self, slots: tuple[BufferSlot, ...], steps: tuple[Step, ...], outputs: tuple[int, ...],
                 producer: str | None = None, linear: UOp | None = None) -> None:
        self.slots = slots
        self.linear = linear  # the schedule, for a recording (trace.py) to show
        self.producer = producer  # who made the schedule, named by the errors its buffers raise
        self.steps = steps
        self.outputs = outputs  # LINEAR.arg: the buffer id realizing each source of the tensor SINK
        self.slot_of = {slot.id: i for i, slot in enumerate(slots)}
        self.output_slots = tuple(self.slot_of.get(i, -1) for i in outputs)
        self._checked: set[tuple[tuple[object, tuple[int, ...] | None], ...]] = set()  # check_outputs' passed roots
        # slot -> the small fresh Buffer the last run got for it, taken again once nothing else holds it (`bind`)
        self._spare: dict[int, Buffer] = {}
        self._grouped: tuple[Step | KernelRun, ...] | None = None  # the steps with batched runs (`execute`)
        self._ran = False  # whether a run without batches happened (the first one)

    @staticmethod
    def build(linear: UOp, producer: str | None = None) -> ExecPlan:
        """Lower and load every kernel of a verified SCHEDULE-stage LINEAR, after proving that each one's accesses
        stay inside its buffers (bounds.py: IndexBoundsError names `producer`, who made the schedule)."""
        slot_of: dict[int, int] = {}
        slots: list[BufferSlot] = []

        def slot(node: UOp) -> int:
            ref: BufferRef = node.arg
            if ref.id not in slot_of:
                slot_of[ref.id] = len(slots)
                slots.append(BufferSlot(ref.id, canonical_device(ref.device), ref.size, node.dtype))
            return slot_of[ref.id]

        steps: list[Step | None] = []
        deferred: dict[int, DeferredBounds | None] = {}
        kernels: list[tuple[int, UOp, list[BufferSlot], tuple[int, ...], str]] = []
        for position, call in enumerate(linear.src):
            body = call.src[0]
            used = tuple(slot(s) for s in call.src[1:] if s.op is Ops.BUFFER)
            if body.op is Ops.COPY:
                steps.append(CopyStep(used[0], used[1]))
            else:
                bufs = [slots[i] for i in used]
                sizes = size_variables(body)
                if not sizes:
                    check_kernel_bounds(body, bufs, kernel=_kernel_name(body, call.arg), position=position,
                                        producer=producer)
                deferred[len(steps)] = DeferredBounds(body, bufs, sizes, (), _kernel_name(body, call.arg), position,
                                                      producer, set()) if sizes else None
                kernels.append((len(steps), call, bufs, used, _kernel_device(call, bufs)))
                steps.append(None)
        # every kernel is checked before any is compiled, and the new programs compile side by side
        loaded = prepare_kernels([(Device[dev], call.src[0], _kernel_name(call.src[0], call.arg))
                                  for _, call, _, _, dev in kernels])
        for (index, call, bufs, used, dev), program in zip(kernels, loaded, strict=True):
            step = _kernel_step(call, bufs, used, dev, program)
            later = deferred.get(index)
            if later is not None:  # proved before the first launch (execute), at the values it launches with
                later.var_names = program.var_names
                step = dataclasses.replace(step, bounds=later)
            steps[index] = step
        return ExecPlan(tuple(slots), tuple(s for s in steps if s is not None), tuple(linear.arg), producer, linear)

    # ---- running ----------------------------------------------------------------------------------------------
    def bind(self, buffers: Mapping[int, Buffer] | None = None) -> list[Buffer]:
        """The Buffer of every slot: given by id in `buffers`, else a fresh one for a negative id, else the live
        Buffer of that id. ScheduleError when a Buffer does not match what the schedule says it holds."""
        given = buffers or {}
        bound: list[Buffer] = []
        for index, slot in enumerate(self.slots):
            buf = given.get(slot.id)
            if buf is None:
                buf = self._fresh(index, slot) if slot.id < 0 else lookup_buffer(slot.id)
            elif buf.device != slot.device or buf.size != slot.size or buf.dtype is not slot.dtype:
                detail = (f"schedule buffer {slot.id} is {slot.size} x {slot.dtype} on {slot.device}, but the Buffer "
                          f"given for it is {buf.size} x {buf.dtype} on {buf.device}")
                if self.producer is not None:
                    raise plugin_output.malformed(self.producer, plugin_output.CHECK_BUFFERS, detail)
                raise ScheduleError(detail)
            bound.append(buf)
        return bound

    def _fresh(self, index: int, slot: BufferSlot) -> Buffer:
        """A Buffer for the schedule's own slot `index`: the one the last run got, when nothing else holds it any
        more (the tensor it realized died: only this plan refers to it), else a new one. Only small buffers are
        kept (`SPARE_MAX_BYTES`, and past SPARE_SMALL_BYTES within SPARE_BUDGET_BYTES for all plans): for them
        allocating, freeing and the tensor's new view nodes are most of a realize's cost (MiniLM's token lookup, a
        258 KB output: 48-85 -> 29-44 us a call, alternating processes), while large ones go back to the
        allocator's own cache."""
        buf = self._spare.pop(index, None)  # atomic: of two threads running this plan, one takes it
        if buf is None or getrefcount(buf) != 2:  # 2: here and getrefcount's argument, nothing else
            buf = Buffer(slot.device, slot.size, slot.dtype)
            nbytes = buf.nbytes
            if nbytes > SPARE_MAX_BYTES or (nbytes > SPARE_SMALL_BYTES
                                            and kept_spare_bytes() + nbytes > SPARE_BUDGET_BYTES):
                return buf
            if not self._spare:
                with _KEEPING_LOCK:
                    _KEEPING.add(self)
        self._spare[index] = buf
        return buf

    def spare_bytes(self) -> int:
        """Bytes of the Buffers this plan keeps for its next run."""
        return sum(buf.nbytes for buf in list(self._spare.values()))

    def release_spares(self) -> None:
        """Let go of the Buffers kept for the next run (they are freed once nothing else holds them)."""
        self._spare.clear()

    def execute(self, bufs: Sequence[Buffer], vals: Mapping[str, int] | None = None) -> None:
        """Run every step over `bufs` (one Buffer per slot, as `bind` returns them). `vals` gives variables other
        values than the schedule's BINDs, by name (a caller that scheduled a graph once for many values)."""
        debug = config.DEBUG.get()
        start = time.perf_counter() if debug >= 1 else 0.0
        rec = trace.RECORDER
        # runs of consecutive kernels go to the backend in one call (batch.py), except where DEBUG or a recording
        # times each one
        if debug >= 2 or not self._ran or rec is not None:  # the first run launches one by one too (batch.py)
            self._ran = True
            steps: Sequence[Step | KernelRun] = self.steps
        else:
            steps = self._grouped or self._group()
        run = -1 if rec is None else rec.begin_run(self.linear, self.steps, self.producer)
        for step in steps:
            if isinstance(step, KernelRun):
                launch_run(step, [bufs[i].handle for i in step.slots], lambda s: step_values(s, vals))
            elif isinstance(step, CopyStep):
                if rec is None:
                    copy_buffer(bufs[step.dst], bufs[step.src])
                else:
                    rec.copy(bufs[step.dst], bufs[step.src], copy_buffer)
            else:
                values = step_values(step, vals)
                if step.bounds is not None:
                    step.bounds.check(values)
                launch(step.device, step.loaded, [bufs[i].handle for i in step.slots], values, debug)
        if rec is not None:
            rec.end_run(run)
        if debug >= 1:
            print(f"run_linear: {self.kernel_count} kernels, {len(self.steps) - self.kernel_count} copies in "
                  f"{(time.perf_counter() - start) * 1e3:.2f} ms")

    def _group(self) -> tuple[Step | KernelRun, ...]:
        """The steps with every run of consecutive kernels the backend batches as one KernelRun, found once."""
        grouped = group(self.steps, lambda s: s.slots, lambda s: isinstance(s, KernelStep))
        self._grouped = grouped  # one assignment: a thread that grouped at the same time stored equal runs
        return grouped

    def run(self, buffers: Mapping[int, Buffer] | None = None) -> dict[int, Buffer]:
        """Bind, execute, and return the Buffer realizing each id of `outputs`, keyed by that id."""
        bufs = self.bind(buffers)
        self.execute(bufs)
        return {i: self.output_buffer(bufs, n, buffers) for n, i in enumerate(self.outputs)}

    def output_buffer(self, bufs: Sequence[Buffer], n: int, given: Mapping[int, Buffer] | None = None) -> Buffer:
        """The Buffer realizing output `n` after a run over `bufs` (an output no CALL uses is looked up by id)."""
        index = self.output_slots[n]
        if index >= 0:
            return bufs[index]
        buffer_id = self.outputs[n]
        return given[buffer_id] if given and buffer_id in given else lookup_buffer(buffer_id)

    def check_outputs(self, roots: Sequence[UOp]) -> None:
        """With a known producer: the schedule names one buffer per tensor of the SINK `roots`, of its dtype and
        size (MalformedScheduleError naming the producer otherwise)."""
        if self.producer is None:
            return
        seen = tuple((root.dtype, root.shape) for root in roots)  # all the check reads of the roots
        if seen in self._checked:  # a cached plan run again for tensors of the same dtypes and shapes
            return
        outputs = [None if i < 0 else (self.slots[i].dtype, self.slots[i].size) for i in self.output_slots]
        plugin_output.check_outputs(outputs, roots, self.producer)
        self._checked.add(seen)

    @property
    def kernel_count(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, KernelStep))

    def __repr__(self) -> str:
        return f"<ExecPlan {len(self.slots)} buffers, {self.kernel_count} kernels, {len(self.steps)} steps>"


def _kernel_device(call: UOp, bufs: list[BufferSlot]) -> str:
    """The one device a kernel's buffers live on."""
    devices = sorted({b.device for b in bufs})
    if len(devices) != 1:
        raise ScheduleError(f"kernel {_kernel_name(call.src[0], call.arg)!r} uses buffers on {', '.join(devices)}: "
                            "a kernel runs on one device, so the schedule must COPY its inputs there first")
    return devices[0]


def _kernel_step(call: UOp, bufs: list[BufferSlot], used: tuple[int, ...], device: str,
                 loaded: LoadedProgram) -> KernelStep:
    """The launch of `loaded` over the CALL's buffers, once its parameters and variables match them."""
    info = loaded.info
    if len(info.params) != len(bufs):
        raise ScheduleError(f"program {info.name!r} takes {len(info.params)} buffers, the CALL gives {len(bufs)}")
    for param, buf in zip(info.params, bufs, strict=True):
        if param.dtype is not buf.dtype or param.size > buf.size:
            raise ScheduleError(f"program {info.name!r} parameter {param.index} is {param.size} x {param.dtype}, "
                                f"but buffer {buf.id} is {buf.size} x {buf.dtype}")
    binds = {str(b.src[0].arg[0]): int(b.src[1].arg) for b in call.src[1:] if b.op is Ops.BIND}
    missing = [v for v in loaded.var_names if v not in binds]
    if missing:
        raise ScheduleError(f"program {info.name!r} needs variables {missing} that the CALL does not bind")
    return KernelStep(device, loaded, used, tuple(binds[v] for v in loaded.var_names))


def step_values(step: KernelStep, vals: Mapping[str, int] | None) -> Sequence[int]:
    """The variable values `step` launches with: `vals[name]` where given, else the schedule's BIND."""
    if not vals or not step.loaded.var_names:
        return step.vals
    return tuple(vals.get(n, v) for n, v in zip(step.loaded.var_names, step.vals, strict=True))


def launch(device: str, loaded: LoadedProgram, handles: list[object], vals: Sequence[int], debug: int) -> None:
    """One kernel launch, counted in GlobalCounters and reported at DEBUG >= 2 (with the opts it ran with)."""
    info = loaded.info
    if debug >= 4:
        print(loaded.source)
    rec = trace.RECORDER
    if rec is None:
        seconds = loaded.program(handles, info.global_size, info.local_size, vals, wait=debug >= 2)
    else:  # timed and recorded (trace.py)
        seconds = rec.launch(device, loaded, handles, vals)
    GlobalCounters.record(info, seconds)
    if debug >= 2:
        print(kernel_line(device, info, seconds))
        print(opts_line(info))


def copy_buffer(dst: Buffer, src: Buffer) -> None:
    """COPY: by the destination allocator's `transfer` where it can (one GPU, two peer GPUs, host memory), else
    through host memory, which is correct between any two devices."""
    if src.nbytes and dst.backend.allocator.transfer(dst.handle, src.backend.allocator, src.handle, src.nbytes):
        return
    staging = bytearray(src.nbytes)
    src.copyout_into(staging)
    dst.copyin(staging)


# plans holding spare Buffers: those go before interpreter shutdown tears down the backends that free them
_KEEPING: Final[weakref.WeakSet[ExecPlan]] = weakref.WeakSet()
_KEEPING_LOCK: Final = threading.Lock()


def kept_spare_bytes() -> int:
    """Bytes of the Buffers all plans keep for their next runs (asked only before keeping a new one past
    SPARE_SMALL_BYTES, so a warm run never walks the plans)."""
    with _KEEPING_LOCK:  # a WeakSet that another thread adds to while this one copies it raises
        plans = list(_KEEPING)
    return sum(plan.spare_bytes() for plan in plans)


@atexit.register
def _release_all_spares() -> None:
    with _KEEPING_LOCK:
        plans = list(_KEEPING)
    for plan in plans:
        plan.release_spares()


# ---- the plan cache -------------------------------------------------------------------------------------------
_PLANS: Final[OrderedDict[tuple[str, bytes | UOp], ExecPlan]] = OrderedDict()
_PLANS_LOCK: Final = threading.Lock()


_GENERATION: list[int] = [0]  # bumped by clear_plans


def clear_plans() -> None:
    """Forget every cached plan (a plugin was swapped, or a test wants a fresh runtime)."""
    with _PLANS_LOCK:
        _PLANS.clear()
        _GENERATION[0] += 1
    with _KEEPING_LOCK:
        plans = list(_KEEPING)
    for plan in plans:  # a plan a caller still holds runs its next call on new Buffers
        plan.release_spares()


def plans_generation() -> int:
    """How many times the plans were cleared: a caller keeping plans of its own (the frontend keeps one per graph
    it realized) uses one only while this is what it was when the plan was loaded."""
    return _GENERATION[0]


discovery.on_change(clear_plans)


def read_schedule(schedule: bytes | UOp, producer: str | None = None) -> UOp:
    """The verified LINEAR of `schedule` (a UOp is round-tripped through bytes when PLYGRAD_FORCE_BYTES is on).
    With `producer`, bytes that do not decode or verify raise MalformedScheduleError naming it (plugin_output.py)."""
    if producer is not None:
        plugin_output.check_bytes(schedule, producer)
    try:
        if isinstance(schedule, UOp):
            if config.PLYGRAD_FORCE_BYTES.get():
                return deserialize(serialize(schedule, Stage.SCHEDULE), Stage.SCHEDULE)
            verify(schedule, Stage.SCHEDULE)
            return schedule
        return deserialize(schedule, Stage.SCHEDULE)
    except IRError as exc:
        check = plugin_output.check_of(exc)
        if producer is None or check is None:
            raise
        raise plugin_output.malformed(producer, check, str(exc)) from exc


def _build(schedule: bytes | UOp, producer: str | None) -> ExecPlan:
    """`_build_plan`, timed for a recording (trace.py): reading and compiling a schedule is often most of a run."""
    rec = trace.RECORDER
    if rec is None:
        return _build_plan(schedule, producer)
    start = rec.now()
    plan = _build_plan(schedule, producer)
    rec.build(start, producer, plan.kernel_count)
    return plan


def _build_plan(schedule: bytes | UOp, producer: str | None) -> ExecPlan:
    """Read, verify, bounds-check and lower `schedule`; its buffer mismatches name `producer` when it is known."""
    linear = read_schedule(schedule, producer)
    try:
        return ExecPlan.build(linear, producer)
    except IndexBoundsError:
        raise
    except ScheduleError as exc:
        if producer is None:
            raise
        raise plugin_output.malformed(producer, plugin_output.CHECK_BUFFERS, str(exc)) from exc


def load_plan(schedule: bytes | UOp, producer: str | None = None) -> ExecPlan:
    """The plan of a schedule (bytes or LINEAR UOp), built once per distinct schedule and lowering engine.
    `producer` says who made the schedule (e.g. "scheduler 'default'"), for the error a bad one raises."""
    if config.PLYGRAD_FORCE_BYTES.get():
        return _build(schedule, producer)
    key = (config.PLYGRAD_CODEGEN.get(), schedule)
    with _PLANS_LOCK:
        plan = _PLANS.get(key)
    if plan is None:
        built = _build(schedule, producer)  # unlocked: lowering may compile for seconds
        with _PLANS_LOCK:
            plan = _PLANS.setdefault(key, built)
            while len(_PLANS) > MAX_PLANS:
                _PLANS.popitem(last=False)
    return plan
