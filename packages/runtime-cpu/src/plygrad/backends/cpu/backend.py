"""The CPU backend: C programs (docs/ir.md's C program contract) compiled to shared libraries and called via cffi.

A program is `void NAME(T0* restrict data0, const T1* restrict data1, ..., long long VAR0, ...)`: one pointer per
buffer in parameter order, then one `long long` per variable. cffi's ABI mode calls it through a function pointer
whose type is built from the number of buffers and variables of the call (`void*` for every buffer: any object
pointer is passed the same way, so the element types need not be repeated here). Loops run inside the function,
in parallel where the renderer put `#pragma omp parallel for`; the call returns when the work is done, so
`synchronize` has nothing to wait for.
"""

from __future__ import annotations

import functools
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from typing import Any, Final

import cffi

from plygrad.backends.cpu.allocator import CFFIAllocator
from plygrad.backends.cpu.batch import CPUBatch, Dispatcher, batch_of
from plygrad.backends.cpu.compiler import BUILD_PREFIX, CCompiler, Toolchain, probe_toolchain
from plygrad.backends.cpu.host import host_cache_sizes, host_has_fma, host_vector_widths
from plygrad.ir.target import Target
from plygrad.runtime import tempfiles
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Backend, BatchEntry, Program

# Every loaded library stays loaded until the process exits. Closing one that started OpenMP could unload libgomp
# while its worker threads are parked in it, and the process would crash later somewhere unrelated. Programs are
# cached by the runtime, so this holds one small library per distinct program: two memory mappings each (the linker
# flags of compiler.py), of the vm.max_map_count (65530) a process may hold, so about 30000 distinct programs fit.
# (Closing dropped programs, with the OpenMP runtime pinned resident, was tried: CI's gpu-check then died once with
# a segfault in tests/test_threads.py, not reproduced since; until that is understood, nothing is closed.)
_LOADED_LIBRARIES: Final[list[Any]] = []
# where no in-memory file exists, dlopen reads a library from a temp file <LIBRARY_PREFIX><pid>-....so, deleted once
# loaded; one a killed process left behind is removed when the backend next opens
LIBRARY_PREFIX: Final = "plygrad-so-"
_ONE: Final = (1, 1, 1)  # the only global and local size a CPU program runs with


@functools.cache
def sweep_temp_files() -> int:
    """Remove the temp libraries and build folders killed processes left in the temp folder (once per process)."""
    return sum(tempfiles.sweep_stale(tempfile.gettempdir(), prefix) for prefix in (LIBRARY_PREFIX, BUILD_PREFIX))


def cpu_target(toolchain: Toolchain | None = None) -> Target:
    """What codegen needs to know about this machine (host.py): every core as a thread (one thread when `toolchain`,
    by default the probed one, has no OpenMP: its `#pragma omp` loops run on one core, so splitting work for
    threads would only cost), the vector widths of the registers it compiles for, and the data-cache sizes."""
    chain = toolchain if toolchain is not None else probe_toolchain()
    native = "-march=native" in chain.flags
    threads = (os.cpu_count() or 1) if "-fopenmp" in chain.flags else 1
    return Target(device="CPU", renderer="c", arch=platform.machine() or "unknown", has_local=False,
                  vector_widths=host_vector_widths(native), threads=threads,
                  cache_sizes=host_cache_sizes(), has_fma=host_has_fma(native))


class CPUProgram(Program):
    """One loaded shared library's entry function."""

    def __init__(self, name: str, binary: bytes) -> None:
        if not name.isidentifier():
            raise BackendError(f"program name {name!r} is not a C identifier")
        self.name = name
        self.ffi = cffi.FFI()
        self.ffi.cdef(f"void {name}(void);")
        # dlopen needs a path: the bytes the program cache holds are handed over in memory (tempfiles.loadable_file),
        # not written to disk a second time; once loaded, the mapping outlives the file
        with tempfiles.loadable_file(binary, LIBRARY_PREFIX, suffix=".so") as path:
            try:
                self.lib: Any = self.ffi.dlopen(path)
                _LOADED_LIBRARIES.append((self.ffi, self.lib))
            except OSError as exc:
                raise BackendError(f"cannot load the compiled program {name!r}: {exc}") from exc
        try:
            self.entry = getattr(self.lib, name)
        except AttributeError as exc:
            raise BackendError(f"the compiled library has no function {name!r}: the source must define "
                               f"`void {name}(...)`") from exc
        self._signatures: dict[tuple[int, int], Any] = {}

    def _function(self, n_buffers: int, n_vals: int) -> Any:
        key = (n_buffers, n_vals)
        found = self._signatures.get(key)
        if found is None:
            args = ", ".join(["void*"] * n_buffers + ["long long"] * n_vals) or "void"
            found = self._signatures[key] = self.ffi.cast(f"void(*)({args})", self.entry)
        return found

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        if global_size != _ONE or (local_size is not None and local_size != _ONE):
            raise BackendError(f"CPU program {self.name!r} launched with global size {global_size} and local size "
                               f"{local_size}: a CPU program runs all its loops itself, so codegen must give "
                               "global (1, 1, 1) and local None for a Target with has_local=False")
        function = self._function(len(buffers), len(vals))
        if not wait:  # the launch returns when the program is done: nothing else to do (no clock read)
            function(*buffers, *vals)
            return None
        start = time.perf_counter()
        function(*buffers, *vals)
        return time.perf_counter() - start


class CPUBackend(Backend):
    """`Device["CPU"]` (and "CPU:1"...: separate devices over the same host memory, handy for testing copies)."""

    def __init__(self, name: str) -> None:
        self.ffi = cffi.FFI()
        sweep_temp_files()
        toolchain = probe_toolchain()
        super().__init__(name, cpu_target(toolchain), CFFIAllocator(self.ffi), CCompiler(toolchain))
        self._dispatcher: Dispatcher | None = None

    def load(self, name: str, binary: bytes) -> Program:
        return CPUProgram(name, binary)

    def batch(self, entries: Sequence[BatchEntry]) -> CPUBatch | None:
        """One call of a small C function that calls each program in turn (batch.py); None where it cannot."""
        if self._dispatcher is None:  # compiled (or read from the program cache) at the first batch asked for
            self._dispatcher = Dispatcher(self.ffi, self.compiler, CPUProgram)
        return batch_of(self._dispatcher, entries, CPUProgram)

    def synchronize(self) -> None:
        """Programs run synchronously on the calling thread (and its OpenMP team): nothing is in flight."""


def open_cpu(device: str) -> CPUBackend:
    """The factory the descriptor names; raises BackendError when no C compiler works."""
    return CPUBackend(device)
