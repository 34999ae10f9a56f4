"""A tiny honest backend and lowering engine, so the runtime is tested without C, GPUs or plygrad-codegen.

- `lower_to_text` (the fake codegen): a PROGRAM whose source is the kernel's IR text form, with ParamInfo computed
  from the PARAMs and the variables sorted by name.
- backend "PY": memory is `bytearray`s; "compiling" parses the text (a parse error becomes CompileError naming the
  line) and the binary is the text's bytes; a program interprets the kernel with plygrad.ir's exact scalar
  arithmetic, looping over every output RANGE and, for a REDUCE, over its ranges.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from plygrad.ir import (
    AxisType,
    IRError,
    KernelInfo,
    Ops,
    ParamInfo,
    ProgramInfo,
    Stage,
    Target,
    UOp,
    deserialize,
    dtypes,
    exec_alu,
    from_text,
    serialize,
    to_text,
    truncate,
)
from plygrad.ir.scalar import bitcast_value, from_bytes, to_bytes
from plygrad.runtime import Allocator, Backend, BackendDescriptor, CompileError, Compiler, Program
from plygrad.runtime.discovery import BACKENDS, CODEGEN, installed
from plygrad.runtime.plugin import BatchEntry, BatchLaunch

LOWER_CALLS: list[bytes] = []


def lower_to_text(kernel: bytes, target: bytes) -> bytes:
    """The fake `plygrad.codegen` entry point: KERNEL bytes + Target bytes -> PROGRAM bytes."""
    LOWER_CALLS.append(kernel)
    sink = deserialize(kernel, Stage.KERNEL)
    Target.from_bytes(target)
    nodes = sink.toposort
    written = {n.src[0].src[0].arg for n in nodes if n.op is Ops.STORE}
    params = tuple(sorted((ParamInfo(n.arg, n.dtype.base, n.dtype.size, n.arg in written)  # type: ignore[attr-defined]
                           for n in nodes if n.op is Ops.PARAM), key=lambda p: p.index))
    variables = sorted((n for n in nodes if n.op is Ops.DEFINE_VAR), key=lambda v: str(v.arg[0]))
    name = sink.arg.name if isinstance(sink.arg, KernelInfo) and sink.arg.name else "kernel"
    mem = sum(p.size * p.dtype.itemsize for p in params)
    ops = sum(1 for n in nodes if n.op in (Ops.ADD, Ops.MUL, Ops.SUB, Ops.FDIV))
    info = ProgramInfo(name, (1, 1, 1), None, params, ops=ops, mem=mem)
    source = UOp(Ops.SOURCE, dtypes.void, (), to_text(sink, Stage.KERNEL))
    return serialize(UOp(Ops.PROGRAM, dtypes.void, (source, *variables), info), Stage.PROGRAM)


class ByteArrayAllocator(Allocator[bytearray]):
    def __init__(self) -> None:
        self.live = 0

    def alloc(self, nbytes: int) -> bytearray:
        self.live += 1
        return bytearray(nbytes)

    def free(self, handle: bytearray) -> None:
        self.live -= 1

    def copyin(self, handle: bytearray, src: memoryview) -> None:
        handle[:len(src)] = src

    def copyout(self, dst: memoryview, handle: bytearray) -> None:
        dst[:] = handle[:len(dst)]


class TextCompiler(Compiler):
    def __init__(self) -> None:
        self.compiled = 0

    @property
    def cache_key(self) -> str:
        return "py-interpreter 1"

    def compile(self, source: str) -> bytes:
        try:
            from_text(source, Stage.KERNEL)
        except IRError as exc:
            offset = int(getattr(exc, "offset", 0))
            line = source.count("\n", 0, offset) + 1
            lines = source.splitlines()
            text = lines[line - 1] if 0 < line <= len(lines) else ""
            raise CompileError(f"PY compiler: {exc}", line=line, source_line=text) from exc
        self.compiled += 1
        return source.encode()


def _evaluate(root: UOp, env: dict[str, int], buffers: Sequence[bytearray]) -> Any:
    """Value of `root` with ranges/variables from env; a REDUCE loops over its own ranges (recursing per REDUCE)."""
    values: dict[UOp, Any] = {}
    for node in root.toposort:
        op = node.op
        if op in (Ops.RANGE, Ops.DEFINE_VAR):
            key = f"range{node.arg[0]}" if op is Ops.RANGE else str(node.arg[0])
            values[node] = env.get(key)
        elif any(values.get(s, 0) is None for s in node.src) and op is not Ops.REDUCE:
            values[node] = None  # depends on a reduce range not bound yet: the enclosing REDUCE evaluates it
        elif op is Ops.CONST or op is Ops.PARAM:
            values[node] = node.arg
        elif op is Ops.INDEX:
            gate = values[node.src[2]] if len(node.src) == 3 else True
            values[node] = (values[node.src[0]], values[node.src[1]], gate)
        elif op is Ops.LOAD:
            param, idx, gate = values[node.src[0]]
            size = node.dtype.itemsize
            values[node] = from_bytes(bytes(buffers[param][idx * size:(idx + 1) * size]), node.dtype) if gate \
                else truncate(node.dtype, 0)
        elif op is Ops.REDUCE:
            ranges = node.src[1:]
            acc = None
            for point in itertools.product(*(range(int(values[r.src[0]])) for r in ranges)):
                inner = {**env, **{f"range{r.arg[0]}": v for r, v in zip(ranges, point, strict=True)}}
                value = _evaluate(node.src[0], inner, buffers)
                acc = value if acc is None else exec_alu(node.arg, node.dtype, (acc, value))
            values[node] = truncate(node.dtype, 0) if acc is None else acc
        elif op is Ops.CAST:
            values[node] = truncate(node.dtype, values[node.src[0]])
        elif op is Ops.BITCAST:
            values[node] = bitcast_value(values[node.src[0]], node.src[0].dtype, node.dtype)
        else:
            values[node] = exec_alu(op, node.src[-1].dtype if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else node.dtype,
                                    tuple(values[s] for s in node.src))
    return values[root]


class InterpretedProgram(Program):
    def __init__(self, name: str, kernel: UOp) -> None:
        self.name = name
        self.kernel = kernel
        nodes = kernel.toposort
        self.var_names = sorted(str(n.arg[0]) for n in nodes if n.op is Ops.DEFINE_VAR)
        self.stores = [n for n in nodes if n.op is Ops.STORE]
        self.launches = 0

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        start = time.perf_counter()
        self.launches += 1
        env = dict(zip(self.var_names, vals, strict=True))
        for store in self.stores:
            loops = sorted({n for n in store.toposort if n.op is Ops.RANGE and n.arg[1] is not AxisType.REDUCE},
                           key=lambda r: r.arg[0])
            ends = [int(_evaluate(r.src[0], env, buffers)) for r in loops]
            for point in itertools.product(*(range(e) for e in ends)):
                inner = {**env, **{f"range{r.arg[0]}": v for r, v in zip(loops, point, strict=True)}}
                param, idx, gate = _evaluate(store.src[0], inner, buffers)
                if gate:
                    dt = store.src[1].dtype
                    buffers[param][idx * dt.itemsize:(idx + 1) * dt.itemsize] = \
                        to_bytes(_evaluate(store.src[1], inner, buffers), dt)
        return time.perf_counter() - start if wait else None


class PyBatch(BatchLaunch):
    """Runs its programs in order, handing each its share of the handles and values (what a backend's one call
    does natively), and records the call in its backend's `batch_calls`."""

    def __init__(self, backend: PyBackend, entries: Sequence[BatchEntry]) -> None:
        self.backend = backend
        self.entries = tuple(entries)

    def __call__(self, handles: Sequence[Any], vals: Sequence[int]) -> None:
        self.backend.batch_calls.append(len(self.entries))
        h, v = 0, 0
        for e in self.entries:
            e.program(handles[h:h + e.buffers], e.global_size, e.local_size, vals[v:v + e.vals])
            h, v = h + e.buffers, v + e.vals
        assert (h, v) == (len(handles), len(vals)), "every handle and value belongs to a program"


class PyBackend(Backend):
    def __init__(self, name: str) -> None:
        super().__init__(name, Target(device="PY", renderer="ir-text"), ByteArrayAllocator(), TextCompiler())
        self.synchronized = 0
        self.loaded: list[InterpretedProgram] = []
        self.batches = False  # whether `batch` gives launchers (most tests launch one program at a time)
        self.batch_calls: list[int] = []  # the kernel count of every batched launch
        self.batches_asked: list[int] = []  # the kernel count of every `batch` request

    def batch(self, entries: Sequence[BatchEntry]) -> BatchLaunch | None:
        self.batches_asked.append(len(entries))
        return PyBatch(self, entries) if self.batches else None

    def load(self, name: str, binary: bytes) -> Program:
        program = InterpretedProgram(name, from_text(binary.decode(), Stage.KERNEL))
        self.loaded.append(program)
        return program

    def synchronize(self) -> None:
        self.synchronized += 1


def open_py(device: str) -> PyBackend:
    return PyBackend(device)


SLOW_OPENS: list[str] = []  # every device open_slow_py was asked to open, in order


def open_slow_py(device: str) -> PyBackend:
    """A PY backend that takes a while to open (a driver probe), so threads asking at once overlap in it."""
    SLOW_OPENS.append(device)
    time.sleep(0.05)
    return PyBackend(device)


def open_broken(device: str) -> Backend:
    raise OSError("libfake.so: cannot open shared object file")


PY = BackendDescriptor("PY", priority=100, ir_major=1, ir_minor=0, factory="rt_fakes:open_py")


@contextmanager
def fake_plugins(**extra_backends: object) -> Iterator[None]:
    """Install PY and the fake codegen (plus `extra_backends`, name -> descriptor) for the block."""
    with ExitStack() as stack:
        stack.enter_context(installed(BACKENDS, "PY", PY))
        stack.enter_context(installed(CODEGEN, "default", lower_to_text))
        for name, descriptor in extra_backends.items():
            stack.enter_context(installed(BACKENDS, name, descriptor))
        yield
