"""Lowering a kernel for a device: its SINK, serialized, goes with the device's `Target` to the lowering engine.

The engine is the `plygrad.codegen` entry point named by PLYGRAD_CODEGEN: KERNEL-stage bytes and a serialized
`Target` in, PROGRAM-stage bytes out (docs/design.md §2); the backend compiles the PROGRAM through the program cache.
`prepare_kernels` hands each new kernel to a compiler as soon as it is lowered, PLYGRAD_COMPILE_JOBS at once, so
compiles overlap each other and the next lowering. With BEAM=n the engine gets a third argument, the chosen
optimizations (`beam.chosen_opts`). Threads: docs/threads.md.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Final

from plygrad.ir.errors import IRError
from plygrad.ir.records import ProgramInfo
from plygrad.ir.serialize import deserialize, serialize
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.runtime import beam, config, discovery
from plygrad.runtime.beam import Lowering
from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.errors import CodegenError, RuntimeLayerError
from plygrad.runtime.plugin import Backend, Program


@dataclass(frozen=True)
class LoadedProgram:
    """A kernel ready to launch on one device: launch info, variable order, source (for DEBUG) and the program."""

    info: ProgramInfo
    var_names: tuple[str, ...]
    source: str
    program: Program


_LOWERINGS: dict[str, Lowering] = {}
_IMPORTING: Final = threading.Lock()  # one thread imports a lowering engine; the others wait and use it
# every program loaded, by (device, PROGRAM bytes): loaded once per process (the CPU backend never unloads a
# library, so loading one again would only take more memory mappings)
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
    lower = _LOWERINGS.get(name)
    if lower is None:
        with _IMPORTING:
            lower = _LOWERINGS.get(name)
            if lower is None:
                hint = "pip install plygrad-codegen, or set PLYGRAD_CODEGEN to one of those found"
                lower = _LOWERINGS[name] = discovery.load_callable(discovery.CODEGEN, name, "codegen", hint,
                                                                   CodegenError)
    return name, lower


def prepare_kernels(kernels: Sequence[tuple[Backend, UOp, str]]) -> list[LoadedProgram]:
    """`prepare_kernel` of each (backend, kernel SINK, name), with the compiles of programs not loaded yet run side
    by side (see the module docstring). Errors are those `prepare_kernel` raises, for the first kernel that fails."""
    jobs = config.PLYGRAD_COMPILE_JOBS.get() or os.cpu_count() or 1
    if jobs > 1 and len(kernels) > 1:
        submitted: set[tuple[str, str]] = set()
        with ThreadPoolExecutor(min(jobs, len(kernels)), thread_name_prefix="plygrad-compile") as pool:
            futures = []
            for backend, body, name in kernels:
                # lowered here while the compiles submitted before run: a compiler is another process
                found = _lowered_source(backend, body, name)
                if found is not None and (backend.name, found[1]) not in submitted:
                    submitted.add((backend.name, found[1]))
                    futures.append(pool.submit(_compile_quietly, backend, found[0], found[1]))
            # a failed compile is not reported here: prepare_kernel below compiles it again and raises with the
            # kernel's name, in schedule order
            for future in futures:
                future.result()
    return [prepare_kernel(backend, body, name) for backend, body, name in kernels]


def _lowered_source(backend: Backend, body: UOp, name: str) -> tuple[bytes, str] | None:
    """(target bytes, source) of a kernel whose program is not loaded yet; None if it is, or if lowering fails
    (prepare_kernel raises that error with its context)."""
    target = backend.target.to_bytes()
    kernel = serialize(body, Stage.KERNEL)
    codegen_name, lower = codegen()
    try:
        opts = beam.chosen_opts(beam.Job(backend, body, kernel, target, codegen_name, lower, name))
        program_bytes = PROGRAMS.lower(codegen_name, lower, kernel, target, opts)
        if (backend.name, program_bytes) in _LOADED:
            return None
        source: str = deserialize(program_bytes, Stage.PROGRAM).src[0].arg
    except Exception:  # reported by prepare_kernel, which lowers again and wraps it with context
        return None
    return target, source


def _compile_quietly(backend: Backend, target: bytes, source: str) -> None:
    # a failure is not lost: prepare_kernel compiles the program again and raises with the kernel's name
    with contextlib.suppress(Exception):
        PROGRAMS.compile(backend.compiler, target, source)


def prepare_kernel(backend: Backend, body: UOp, name: str = "kernel") -> LoadedProgram:
    """Lower, compile and load a kernel SINK for `backend` (each step cached)."""
    kernel = serialize(body, Stage.KERNEL)
    target = backend.target.to_bytes()
    codegen_name, lower = codegen()
    # BEAM's list (beam.py) when it is on, else None: the engine chooses. A search never raises for a kernel it
    # cannot lower (the lowering below reports that); only a bad setting (BEAM=wide) does, as a ValueError
    opts = beam.chosen_opts(beam.Job(backend, body, kernel, target, codegen_name, lower, name))
    try:
        program_bytes = PROGRAMS.lower(codegen_name, lower, kernel, target, opts)
    except RuntimeLayerError:
        raise
    except Exception as exc:
        raise CodegenError(f"codegen {codegen_name!r} failed to lower kernel {name!r} for {backend.name}: "
                           f"{type(exc).__name__}: {exc}") from exc
    key = (backend.name, program_bytes)
    found = _LOADED.get(key)
    if found is None:
        try:
            program = deserialize(program_bytes, Stage.PROGRAM)
        except IRError as exc:
            raise CodegenError(f"codegen {codegen_name!r} returned an invalid PROGRAM for kernel {name!r}: "
                               f"{exc}") from exc
        info: ProgramInfo = program.arg
        source: str = program.src[0].arg
        # through the cache, so a disk entry the backend cannot load is discarded and compiled again
        loaded = PROGRAMS.load(backend.compiler, target, source, info.name, partial(backend.load, info.name))
        var_names = tuple(str(v.arg[0]) for v in program.src[1:])
        # one step under the GIL: a thread that stored the same program meanwhile wins, and both use its copy
        found = _LOADED.setdefault(key, LoadedProgram(info, var_names, source, loaded))
    return found
