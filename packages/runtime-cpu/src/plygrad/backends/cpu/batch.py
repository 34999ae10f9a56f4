"""Several CPU programs launched by one call (`CPUBackend.batch`, the runtime's batch.py).

One small C function, `plygrad_run_kernels`, compiled once per machine through the program cache, walks a list of
program entry points and calls each with its arguments: the buffers' addresses, then the variables' values. Every
parameter of a CPU program is a pointer or a `long long` (the C program contract), and on the 64-bit ABIs this
batches for (x86-64, AArch64) both travel in the same integer registers and 8-byte stack slots, so a call through
`void (*)(uint64_t, ...)` with the right number of arguments passes exactly what the program's own prototype
would. Programs with more than MAX_ARGS parameters, other architectures and 32-bit pointers get no batch (the
runtime then launches each program itself).
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import BatchEntry, BatchLaunch

if TYPE_CHECKING:
    import cffi

    from plygrad.backends.cpu.backend import CPUProgram
    from plygrad.runtime.plugin import Compiler

MAX_ARGS: Final = 24  # buffers + variables of one program; a MiniLM kernel takes at most ~10
ENTRY: Final = "plygrad_run_kernels"
SIGNATURE: Final = "void(*)(long long, void* const*, const int*, const int*, void* const*, const long long*)"
ARCHES: Final = frozenset({"x86_64", "AMD64", "aarch64", "arm64"})
# the cache's target key of the dispatcher (it depends on no kernel's Target; the key hashes the source as well)
CACHE_TARGET: Final = b"plygrad-cpu-batch-1"


def dispatcher_source(max_args: int = MAX_ARGS) -> str:
    """`plygrad_run_kernels(n, fns, nbufs, nvals, bufs, vals)`: call `fns[i]` with its `nbufs[i]` next buffers, then
    its `nvals[i]` next values, for i < n."""
    cases = []
    for count in range(max_args + 1):
        params = ", ".join(["plygrad_word"] * count) or "void"
        args = ", ".join(f"a[{j}]" for j in range(count))
        cases.append(f"      case {count}: ((void (*)({params}))fns[i])({args}); break;")
    return (
        "#include <stdint.h>\n"
        "typedef uint64_t plygrad_word;\n"
        f"void {ENTRY}(long long n, void* const* fns, const int* nbufs, const int* nvals, void* const* bufs,\n"
        "                         const long long* vals) {\n"
        f"  plygrad_word a[{max_args} + 1];\n"
        "  for (long long i = 0; i < n; i++) {\n"
        "    int count = 0;\n"
        "    for (int j = 0; j < nbufs[i]; j++) a[count++] = (plygrad_word)(uintptr_t)*bufs++;\n"
        "    for (int j = 0; j < nvals[i]; j++) a[count++] = (plygrad_word)*vals++;\n"
        "    switch (count) {\n" + "\n".join(cases) + "\n"
        "      default: return;  /* unreachable: batch_of refuses programs of more parameters */\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


class Dispatcher:
    """The compiled `plygrad_run_kernels` of one backend, or why there is none (`error`)."""

    def __init__(self, ffi: cffi.FFI, compiler: Compiler, load: Callable[[str, bytes], CPUProgram]) -> None:
        self.ffi = ffi
        self.run: Any = None
        self.error = ""
        if platform.machine() not in ARCHES or ffi.sizeof("void*") != 8:
            self.error = f"no batches on {platform.machine()} with {ffi.sizeof('void*') * 8}-bit pointers"
            return
        try:
            program: CPUProgram = PROGRAMS.load(compiler, CACHE_TARGET, dispatcher_source(), ENTRY,
                                                lambda binary: load(ENTRY, binary))
        except Exception as exc:  # a toolchain that builds kernels but not this: every launch stays single
            self.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return
        self.keep = program  # the library stays loaded as long as the function is used
        self.run = ffi.cast(SIGNATURE, program.entry)


class CPUBatch(BatchLaunch):
    """CPU programs launched in order by one call of the dispatcher."""

    def __init__(self, dispatcher: Dispatcher, programs: Sequence[CPUProgram], entries: Sequence[BatchEntry]) -> None:
        ffi = dispatcher.ffi
        self.ffi = ffi
        self.run = dispatcher.run
        self.programs = tuple(programs)  # keeps the entry points' libraries referenced
        self.count = len(entries)
        self.fns = ffi.new("void*[]", [ffi.cast("void*", p.entry) for p in programs])
        self.nbufs = ffi.new("int[]", [e.buffers for e in entries])
        self.nvals = ffi.new("int[]", [e.vals for e in entries])
        self.handles = sum(e.buffers for e in entries)
        self.values = sum(e.vals for e in entries)
        self._pointers = ffi.typeof("void*[]")
        self._longs = ffi.typeof("long long[]")

    def __call__(self, handles: Sequence[Any], vals: Sequence[int]) -> None:
        if len(handles) != self.handles or len(vals) != self.values:
            names = ", ".join(p.name for p in self.programs)
            raise BackendError(f"CPU batch of {names} takes {self.handles} buffers and {self.values} values, got "
                               f"{len(handles)} and {len(vals)}")
        ffi = self.ffi
        self.run(self.count, self.fns, self.nbufs, self.nvals, ffi.new(self._pointers, list(handles)),
                 ffi.new(self._longs, list(vals)) if vals else ffi.NULL)


def batch_of(dispatcher: Dispatcher, entries: Sequence[BatchEntry],
             program_type: type[CPUProgram]) -> CPUBatch | None:
    """A CPUBatch of `entries`, or None where one cannot run them (module docstring)."""
    if dispatcher.run is None:
        return None
    one = (1, 1, 1)
    programs: list[CPUProgram] = []
    for entry in entries:
        if (not isinstance(entry.program, program_type) or entry.global_size != one
                or entry.local_size not in (None, one) or entry.buffers + entry.vals > MAX_ARGS):
            return None
        programs.append(entry.program)
    return CPUBatch(dispatcher, programs, entries)
