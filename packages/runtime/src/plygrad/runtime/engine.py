"""The execution engine: `run_linear` runs a SCHEDULE-stage LINEAR on runtime buffers.

For every CALL, in order:
- a COPY body copies its source buffer into its destination through host memory (works between any two devices);
- a kernel SINK is serialized (KERNEL stage) and handed, with the buffers' device `Target`, to the lowering engine
  found through the `plygrad.codegen` entry point named by PLYGRAD_CODEGEN; the PROGRAM it returns is compiled by
  the backend's compiler through the program cache, loaded once, and launched with the CALL's buffers and the values
  its BINDs give the PROGRAM's variables (in the PROGRAM's DEFINE_VAR order).
Buffers with negative ids are the schedule's own (intermediates, outputs): a fresh `Buffer` per id per run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from plygrad.ir.errors import IRError
from plygrad.ir.ops import Ops
from plygrad.ir.records import BufferRef, KernelInfo, ProgramInfo
from plygrad.ir.serialize import deserialize, serialize
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.ir.verify import verify
from plygrad.runtime import config, discovery
from plygrad.runtime.buffer import Buffer, lookup_buffer
from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.counters import GlobalCounters, kernel_line, opts_line
from plygrad.runtime.device import Device, canonical_device
from plygrad.runtime.errors import CodegenError, RuntimeLayerError, ScheduleError
from plygrad.runtime.plugin import Backend, Program

Lowering = Callable[[bytes, bytes], bytes]


@dataclass(frozen=True)
class LoadedProgram:
    """A kernel ready to launch on one device: launch info, variable order, source (for DEBUG) and the program."""

    info: ProgramInfo
    var_names: tuple[str, ...]
    source: str
    program: Program


_LOWERINGS: dict[str, Lowering] = {}
_LOADED: Final[dict[tuple[str, bytes], LoadedProgram]] = {}


def _forget_plugins() -> None:
    """A plugin was swapped in or out: lowering results of the old one must not be served for the new one."""
    _LOWERINGS.clear()
    _LOADED.clear()
    PROGRAMS.forget_lowerings()


discovery.on_change(_forget_plugins)


def codegen() -> tuple[str, Lowering]:
    """The lowering callable of the `plygrad.codegen` entry point named by PLYGRAD_CODEGEN."""
    name = config.PLYGRAD_CODEGEN.get()
    if name not in _LOWERINGS:
        hint = "pip install plygrad-codegen, or set PLYGRAD_CODEGEN to one of those found"
        _LOWERINGS[name] = discovery.load_callable(discovery.CODEGEN, name, "codegen", hint, CodegenError)
    return name, _LOWERINGS[name]


def _kernel_name(body: UOp, call_name: object) -> str:
    if isinstance(body.arg, KernelInfo) and body.arg.name:
        return body.arg.name
    return call_name if isinstance(call_name, str) and call_name else "kernel"


def prepare_kernel(backend: Backend, body: UOp, name: str = "kernel") -> LoadedProgram:
    """Lower, compile and load a kernel SINK for `backend` (each step cached)."""
    kernel = serialize(body, Stage.KERNEL)
    target = backend.target.to_bytes()
    codegen_name, lower = codegen()
    try:
        program_bytes = PROGRAMS.lower(codegen_name, lower, kernel, target)
    except RuntimeLayerError:
        raise
    except Exception as exc:
        raise CodegenError(f"codegen {codegen_name!r} failed to lower kernel {name!r} for {backend.name}: "
                           f"{type(exc).__name__}: {exc}") from exc
    key = (backend.name, program_bytes)
    if key not in _LOADED:
        try:
            program = deserialize(program_bytes, Stage.PROGRAM)
        except IRError as exc:
            raise CodegenError(f"codegen {codegen_name!r} returned an invalid PROGRAM for kernel {name!r}: "
                               f"{exc}") from exc
        info: ProgramInfo = program.arg
        source: str = program.src[0].arg
        binary = PROGRAMS.compile(backend.compiler, target, source)
        var_names = tuple(str(v.arg[0]) for v in program.src[1:])
        _LOADED[key] = LoadedProgram(info, var_names, source, backend.load(info.name, binary))
    return _LOADED[key]


def _read_schedule(schedule: bytes | UOp) -> UOp:
    if isinstance(schedule, UOp):
        if config.PLYGRAD_FORCE_BYTES.get():
            return deserialize(serialize(schedule, Stage.SCHEDULE), Stage.SCHEDULE)
        verify(schedule, Stage.SCHEDULE)
        return schedule
    return deserialize(schedule, Stage.SCHEDULE)


class _BufferResolver:
    """Schedule buffer ids -> Buffers: given ones, live ones from the id table, fresh ones for negative ids."""

    def __init__(self, given: Mapping[int, Buffer]) -> None:
        self.given = given
        self.resolved: dict[int, Buffer] = {}

    def by_id(self, buffer_id: int) -> Buffer:
        if buffer_id not in self.resolved:
            self.resolved[buffer_id] = self.given[buffer_id] if buffer_id in self.given else lookup_buffer(buffer_id)
        return self.resolved[buffer_id]

    def __call__(self, node: UOp) -> Buffer:
        ref: BufferRef = node.arg
        if ref.id < 0 and ref.id not in self.resolved:
            self.resolved[ref.id] = Buffer(ref.device, ref.size, node.dtype)
        buf = self.by_id(ref.id)
        if (buf.device, buf.size, buf.dtype) != (canonical_device(ref.device), ref.size, node.dtype):
            raise ScheduleError(f"schedule buffer {ref.id} is {ref.size} x {node.dtype} on {ref.device}, but the "
                                f"Buffer given for it is {buf.size} x {buf.dtype} on {buf.device}")
        return buf


def _launch(call: UOp, bufs: list[Buffer]) -> None:
    body = call.src[0]
    name = _kernel_name(body, call.arg)
    devices = sorted({b.device for b in bufs})
    if len(devices) != 1:
        raise ScheduleError(f"kernel {name!r} uses buffers on {', '.join(devices)}: a kernel runs on one device, "
                            "so the schedule must COPY its inputs there first")
    backend = Device[devices[0]]
    loaded = prepare_kernel(backend, body, name)
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
    vals = [binds[v] for v in loaded.var_names]
    debug = config.DEBUG.get()
    if debug >= 4:
        print(loaded.source)
    seconds = loaded.program([b.handle for b in bufs], info.global_size, info.local_size, vals, wait=debug >= 2)
    GlobalCounters.record(info, seconds)
    if debug >= 2:
        print(kernel_line(backend.name, info, seconds))
    if debug >= 3:
        print(opts_line(info))


def _copy(dst: Buffer, src: Buffer) -> None:
    """COPY through host memory: correct between any two devices (a backend-to-backend path can come later)."""
    staging = bytearray(src.nbytes)
    src.copyout_into(staging)
    dst.copyin(staging)


def run_linear(schedule: bytes | UOp, buffers: Mapping[int, Buffer] | None = None) -> dict[int, Buffer]:
    """Run a schedule; return the buffer realizing each id of `LINEAR.arg`, keyed by that id.

    `buffers` maps the schedule's non-negative ids to Buffers; ids it does not name are looked up among live
    Buffers by their own id. A UOp schedule is verified (or, with PLYGRAD_FORCE_BYTES, round-tripped through bytes).
    """
    linear = _read_schedule(schedule)
    resolve = _BufferResolver(buffers or {})
    start = time.perf_counter()
    kernels = copies = 0
    for call in linear.src:
        bufs = [resolve(s) for s in call.src[1:] if s.op is Ops.BUFFER]
        if call.src[0].op is Ops.COPY:
            _copy(bufs[0], bufs[1])
            copies += 1
        else:
            _launch(call, bufs)
            kernels += 1
    if config.DEBUG.get() >= 1:
        print(f"run_linear: {kernels} kernels, {copies} copies in {(time.perf_counter() - start) * 1e3:.2f} ms")
    return {i: resolve.by_id(i) for i in linear.arg}
