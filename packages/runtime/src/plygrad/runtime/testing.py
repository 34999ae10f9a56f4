"""The backend conformance suite, which any backend runs against itself, and the helpers of backends' tests.

A backend's test says `class TestFooConformance(BackendConformance): device = "FOO"` (docs/backends.md §5). The
kernels are small KERNEL-stage ASTs lowered through the installed `plygrad.codegen` (skipped, saying so, without
one), run with `run_linear` and checked against plain-Python references; memory round trips, compile errors and
synchronize need no codegen. Skips are `unittest.SkipTest`: no pytest import. Also here: `isolated_runtime` and
its autouse fixture `isolated_runtime_fixture`; stand-in GPU drivers and the checks over them are `testing_gpu`.
"""

from __future__ import annotations

import importlib
import os
import sys
import unittest
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from plygrad.ir.dtype import DType, PtrDType, dtypes
from plygrad.ir.ops import AxisType, Ops
from plygrad.ir.records import KernelInfo
from plygrad.ir.uop import UOp
from plygrad.runtime import config, discovery
from plygrad.runtime.buffer import Buffer
from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.counters import GlobalCounters
from plygrad.runtime.device import Device
from plygrad.runtime.engine import run_linear
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.plan import clear_plans
from plygrad.runtime.plugin import Backend
from plygrad.runtime.testing_semantics import IRSemanticsChecks

ROUND_TRIP_SIZES = (0, 1, 3, 8, 255, 4096, 65537)
F32, I32 = dtypes.float32, dtypes.int32



# settings a test must not inherit from the shell that runs it; PLYGRAD_FORCE_BYTES is not among them on purpose:
# the whole suite must pass with it on (docs/design.md §2)
_UNSET_IN_TESTS = ("DEBUG", "PLYGRAD_DEVICE", "PLYGRAD_CODEGEN", "PLYGRAD_DISABLE_CACHE")


@contextmanager
def isolated_runtime(cache_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Run a block with the runtime as a fresh process has it, for test suites of the runtime and of backends:
    the settings above unset, the disk cache in `cache_dir`, empty in-memory caches, zeroed counters and a fresh
    device registry; the environment is restored afterwards."""
    saved = {name: os.environ.get(name) for name in (*_UNSET_IN_TESTS, "PLYGRAD_CACHE_DIR")}
    for name in _UNSET_IN_TESTS:
        os.environ.pop(name, None)
    os.environ["PLYGRAD_CACHE_DIR"] = os.fspath(cache_dir)
    PROGRAMS.clear_memory()
    clear_plans()
    GlobalCounters.reset()
    Device.reset()
    try:
        yield
    finally:
        Device.reset()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def isolated_runtime_fixture() -> Any:
    """An autouse pytest fixture running each test in `isolated_runtime` with its own cache folder: a backend's
    conftest.py says `isolated_runtime = testing.isolated_runtime_fixture()` (pytest is imported only here)."""
    # imported here, not at the top: the conformance suite needs no pytest, and the runtime does not depend on it
    pytest = importlib.import_module("pytest")

    def isolated_runtime_per_test(tmp_path: Path) -> Iterator[None]:
        with isolated_runtime(tmp_path / "cache"):
            yield

    return pytest.fixture(autouse=True)(isolated_runtime_per_test)


@contextmanager
def fine_thread_switching(interval: float = 1e-5) -> Iterator[None]:
    """Let Python switch threads every `interval` seconds instead of every 5 ms inside the block, so concurrent
    steps interleave finely and a thread-safety test sees the races it is about (docs/threads.md)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _param(index: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.PARAM, dtype.ptr(size), (), index)


def _load(buf: UOp, idx: UOp, gate: UOp | None = None) -> UOp:
    pointer = buf.dtype
    assert isinstance(pointer, PtrDType), f"LOAD needs a PARAM pointer, got {pointer}"
    src = (buf, idx) if gate is None else (buf, idx, gate)
    return UOp(Ops.LOAD, pointer.base, (UOp(Ops.INDEX, pointer, src),))


def _store_sink(out: UOp, idx: UOp, value: UOp, loops: Sequence[UOp], name: str) -> UOp:
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, idx)), value))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, *loops)),), KernelInfo(name))


def add_kernel(n: int) -> UOp:
    """out[i] = a[i] + b[i] (float32), params (out, a, b)."""
    out, a, b = _param(0, F32, n), _param(1, F32, n), _param(2, F32, n)
    i = UOp.range(n, 0, AxisType.LOOP)
    return _store_sink(out, i, _load(a, i) + _load(b, i), [i], "conformance_add")


def row_sum_kernel(rows: int, cols: int) -> UOp:
    """out[r] = sum_c a[r*cols + c] (float32), params (out, a)."""
    out, a = _param(0, F32, rows), _param(1, F32, rows * cols)
    r, c = UOp.range(rows, 0, AxisType.LOOP), UOp.range(cols, 1, AxisType.REDUCE)
    acc = UOp(Ops.REDUCE, F32, (_load(a, r * cols + c), c), Ops.ADD)
    return _store_sink(out, r, acc, [r], "conformance_row_sum")


def scale_kernel(n: int) -> tuple[UOp, UOp]:
    """out[i] = a[i] * k for a variable k in [1, 100] (float32); returns the kernel and k's DEFINE_VAR."""
    out, a = _param(0, F32, n), _param(1, F32, n)
    k = UOp.variable("k", 1, 100)
    i = UOp.range(n, 0, AxisType.LOOP)
    return _store_sink(out, i, _load(a, i) * k.cast(F32), [i], "conformance_scale"), k


def padded_kernel(n: int, valid: int) -> UOp:
    """out[i] = a[i] if i < valid else 0 (int32) through a gated load; params (out, a[valid])."""
    out, a = _param(0, I32, n), _param(1, I32, valid)
    i = UOp.range(n, 0, AxisType.LOOP)
    return _store_sink(out, i, _load(a, i, i < valid), [i], "conformance_padded")


def run_kernel(device: str, body: UOp, out: Buffer, inputs: Sequence[Buffer], binds: Sequence[UOp] = ()) -> bytes:
    """Run one kernel as a one-CALL schedule on existing buffers and return the output's bytes."""
    bufs = [out, *inputs]
    nodes = [UOp(Ops.BUFFER, b.dtype, (), b.ref()) for b in bufs]
    call = UOp(Ops.CALL, dtypes.void, (body, *nodes, *binds), None)
    linear = UOp(Ops.LINEAR, dtypes.void, (call,), (out.id,))
    result = run_linear(linear, {b.id: b for b in bufs})
    Device[device].synchronize()
    return result[out.id].copyout()


def _floats(device: str, values: Sequence[float]) -> Buffer:
    return Buffer(device, len(values), F32).copyin(array("f", values))


def _close(got: Sequence[float], want: Sequence[float], what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if abs(g - w) > 1e-5 * max(1.0, abs(w)):
            raise AssertionError(f"{what}: element {i} is {g}, expected {w}")


class BackendConformance(IRSemanticsChecks):
    """What every backend must do; subclass it with `device = "NAME"` in a test module. The IR-semantics checks
    (NaN/inf, no FMA contraction, half precision, integer division and overflow, shifts, casts, odd and zero
    sizes) come from testing_semantics.IRSemanticsChecks."""

    device: str = ""

    def backend(self) -> Backend:
        if not self.device:
            raise AssertionError("set `device` on the BackendConformance subclass, e.g. device = 'CPU'")
        try:
            return Device[self.device]
        except BackendError as exc:
            raise unittest.SkipTest(f"backend {self.device} does not open here: {exc}") from exc

    def require_codegen(self) -> None:
        name = config.PLYGRAD_CODEGEN.get()
        if name not in discovery.plugins(discovery.CODEGEN):
            raise unittest.SkipTest(f"no plygrad.codegen entry point named {name!r} is installed (pip install "
                                    "plygrad-codegen): the kernel checks need a lowering engine")

    # ---- without codegen --------------------------------------------------------------------------------------
    def test_target_names_the_backend(self) -> None:
        backend = self.backend()
        assert backend.target.device == self.device.split(":")[0].upper(), backend.target

    def test_allocator_round_trip(self) -> None:
        allocator = self.backend().allocator
        for size in ROUND_TRIP_SIZES:
            data = bytes((i * 7 + size) % 256 for i in range(size))
            handle = allocator.alloc(size)
            allocator.copyin(handle, memoryview(data))
            out = bytearray(size)
            allocator.copyout(memoryview(out), handle)
            allocator.free(handle)
            assert bytes(out) == data, f"allocator round trip of {size} bytes changed the data"

    def test_buffer_round_trip(self) -> None:
        self.backend()
        for size in ROUND_TRIP_SIZES:
            values = array("i", (i - size // 2 for i in range(size)))
            buf = Buffer(self.device, size, I32).copyin(values)
            assert buf.copyout() == values.tobytes(), f"Buffer round trip of {size} int32 changed the data"

    def test_compile_error_raises_compile_error(self) -> None:
        compiler = self.backend().compiler
        try:
            compiler.compile("this is not a program in any language {{{\n")
        except CompileError:
            return
        raise AssertionError(f"{self.device}'s compiler accepted garbage instead of raising CompileError")

    def test_cache_key_is_set(self) -> None:
        key = self.backend().compiler.cache_key
        assert isinstance(key, str) and key, "Compiler.cache_key must name the compiler, its version and flags"

    def test_synchronize(self) -> None:
        backend = self.backend()
        backend.synchronize()
        backend.synchronize()

    # ---- through codegen --------------------------------------------------------------------------------------
    def _check(self, make: Callable[[], tuple[bytes, list[float]]], fmt: str, what: str) -> None:
        self.backend()
        self.require_codegen()
        got_bytes, want = make()
        got = list(array(fmt, got_bytes))
        _close(got, want, f"{self.device} {what}")

    def test_kernel_add(self) -> None:
        n = 37
        a, b = [i * 0.5 - 3.0 for i in range(n)], [float(i * i % 11) for i in range(n)]

        def make() -> tuple[bytes, list[float]]:
            out = Buffer(self.device, n, F32)
            got = run_kernel(self.device, add_kernel(n), out, [_floats(self.device, a), _floats(self.device, b)])
            return got, [x + y for x, y in zip(a, b, strict=True)]

        self._check(make, "f", "add kernel")

    def test_kernel_row_sum(self) -> None:
        rows, cols = 5, 17
        a = [((i * 13) % 29) * 0.25 for i in range(rows * cols)]

        def make() -> tuple[bytes, list[float]]:
            out = Buffer(self.device, rows, F32)
            got = run_kernel(self.device, row_sum_kernel(rows, cols), out, [_floats(self.device, a)])
            return got, [sum(a[r * cols:(r + 1) * cols]) for r in range(rows)]

        self._check(make, "f", "row-sum kernel")

    def test_kernel_variable(self) -> None:
        n = 9
        a = [float(i) - 4.0 for i in range(n)]

        def make() -> tuple[bytes, list[float]]:
            body, k = scale_kernel(n)
            out = Buffer(self.device, n, F32)
            got = run_kernel(self.device, body, out, [_floats(self.device, a)], [k.bind(7)])
            return got, [x * 7 for x in a]

        self._check(make, "f", "variable kernel")

    def test_kernel_gated_load(self) -> None:
        n, valid = 12, 5
        a = [10 * i - 17 for i in range(valid)]

        def make() -> tuple[bytes, list[float]]:
            out = Buffer(self.device, n, I32)
            src = Buffer(self.device, valid, I32).copyin(array("i", a))
            got = run_kernel(self.device, padded_kernel(n, valid), out, [src])
            return got, [float(x) for x in a] + [0.0] * (n - valid)

        self._check(make, "i", "gated-load kernel")

