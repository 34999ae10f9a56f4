"""Compiling C with the system compiler into a shared library, as the CPU backend's `Compiler`.

The compiler is found once per process (`CC`, else the first of clang, gcc, cc that builds OpenMP programs, else the
first that builds at all) and its optional flags probed once: `-march=native` (not every compiler or arch has it;
with it, the host's widest vector unit, AVX-512 included), `-fno-tree-loop-if-convert`, `-fno-tree-loop-vectorize`
and `-mno-avx512fp16` (GCC miscompiles, see OPTIONAL_FLAGS) and `-fopenmp` (Apple's clang, or a gcc without libgomp,
lacks it; programs then run their `#pragma omp` loops on one core, which is still correct). OpenMP decides the pick
because it is every core: Debian's clang without libomp builds programs that run on one core, and a matmul 1024 ran
at half speed on 2 cores with `clang` on PATH. The `cache_key` names the compiler path, its version line and the
flags, so a binary cached on disk is reused only by the same toolchain.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from plygrad.runtime import tempfiles
from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.compiling import compile_in_folder, run_tool
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Compiler

# -ffp-contract=off: the IR rounds after every op, so the compiler must not fuse a*b+c into one rounding
BASE_FLAGS: Final = ("-O2", "-fPIC", "-shared", "-ffp-contract=off")
# GCC 12 at -O2 with AVX2/AVX-512 miscompiles loops that its loop vectorizer takes after if-conversion (selects
# `c ? a : b` and guarded loads `gate ? data[i] : 0`, how codegen renders WHERE and PAD, turned into masked
# vector code): a prefix sum built from compares and selects gave [1, 0, 6, 10] (on AVX-512VL masks) and a padded,
# dilated 3-D window sum read wrong elements (on AVX2 too). Both are right with -fno-tree-loop-vectorize, or with
# -fno-tree-loop-if-convert alone, which keeps every other vectorization; -mno-avx512f (used before) fixed only the
# first and cost the 512-bit units, so it is gone (this package's tests/test_backend.py runs both kernels).
# -fno-tree-loop-vectorize: a third GCC 12 loop-vectorizer miscompile, with no if-conversion in it: a float sum of
# a reversed vector that codegen unrolls by 4 (`x.flip(0).sum()`: loads at n-1-4r, n-2-4r, ... in one in-order
# reduction) read the reversed group in the wrong order, 1024 values summing to 89.7 instead of 57.7, with -O2
# alone and with -march=native (found by tests/user_programs.py; runtime-cpu's tests/test_backend.py runs it). The
# loop vectorizer is off: codegen writes the vector code it wants itself (UPCAST gives vector types and vector
# loads), and the straight-line (SLP) vectorizer stays on.
# -mno-avx512fp16: on hosts with AVX512-FP16 (Sapphire Rapids), GCC 12 at -O2 -march=native dropped the rounding
# to float16 that a float16 layernorm's elementwise kernel does after every op (11998 of 12000 outputs wrong, seen
# by the CUDA check comparing with this backend); half math here is float math rounded per op, which F16C
# conversions do, so the FP16 arithmetic unit is not needed.
# -Wl,-z,noseparate-code -Wl,-z,norelro: a loaded library then takes two memory mappings (code, data) instead of
# five (separate read-only, code, read-only, relro and data segments); a process may hold only vm.max_map_count
# (65530) mappings, and a long session keeps thousands of programs loaded (backend.py's _KEPT_FOREVER). Both only
# harden against overwriting a library's own tables, and these libraries are code this process just wrote.
# Compilers or arches without a flag skip it (the probe compiles with each flag alone).
OPTIONAL_FLAGS: Final = ("-march=native", "-fno-tree-loop-if-convert", "-fno-tree-loop-vectorize", "-mno-avx512fp16",
                          "-fopenmp", "-Wl,-z,noseparate-code", "-Wl,-z,norelro")
_PROBE_SOURCE: Final = """
#include <math.h>
void probe(float* restrict out, long long n) {
  #pragma omp parallel for
  for (long long i = 0; i < n; i++) out[i] = sqrtf((float)i);
}
"""
# the program cache's folder of probed toolchains (probe_toolchain), and the version of what a record holds
TOOLCHAIN_FOLDER: Final = "toolchains"
_TOOLCHAIN_RECORD_VERSION: Final = 1
# every compile builds in a temp folder named <BUILD_PREFIX><pid>-...; a killed process leaves its folder behind,
# and the backend removes it when it next opens (backend.sweep_temp_files)
BUILD_PREFIX: Final = "plygrad-cc-"
_ERROR_LINE: Final = re.compile(r"^[^\s:]*\.c:(\d+):(?:\d+:)?\s*(?:fatal )?error:", re.MULTILINE)


@dataclass(frozen=True)
class Toolchain:
    """A C compiler command, its version line and the flags it accepts."""

    command: tuple[str, ...]
    version: str
    flags: tuple[str, ...]


def find_compiler_command() -> tuple[str, ...]:
    """`CC` (split like a shell would: "ccache gcc" works), else the first of clang, gcc, cc on PATH."""
    return compiler_candidates()[0]


def compiler_candidates() -> list[tuple[str, ...]]:
    """The compilers to try, in order: `CC` alone when it is set, else each of clang, gcc, cc on PATH (a name that
    is a link to one found before is skipped)."""
    chosen = os.environ.get("CC", "").strip()
    if chosen:
        command = tuple(shlex.split(chosen))
        if shutil.which(command[0]) is None:
            raise BackendError(f"CC={chosen!r}, but {command[0]!r} is not an executable on PATH: fix CC or unset it")
        return [command]
    found: dict[str, tuple[str, ...]] = {}
    for name in ("clang", "gcc", "cc"):
        path = shutil.which(name)
        if path is not None:
            found.setdefault(os.path.realpath(path), (path,))
    if not found:
        raise BackendError("the CPU backend needs a C compiler and none was found (looked for CC, clang, gcc, cc): "
                           "install gcc or clang (e.g. `apt-get install gcc`), or set CC")
    return list(found.values())


def _compiles(command: tuple[str, ...], flags: tuple[str, ...]) -> bool:
    with tempfiles.temp_dir(BUILD_PREFIX) as tmp:
        folder = Path(tmp)
        (folder / "probe.c").write_text(_PROBE_SOURCE)
        try:
            done = run_tool([*command, *flags, "-o", "probe.so", "probe.c", "-lm"], folder)
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0


@functools.cache
def probe_toolchain() -> Toolchain:
    """Find the compiler and the optional flags it supports (once per process; raises BackendError). The answer
    is kept as a record of the program cache (folder `TOOLCHAIN_FOLDER`), keyed by the candidates' paths, sizes and
    modification times: probing runs the compilers about five times each (~0.5 s), which every new process paid
    before its first kernel, warm program cache or not."""
    candidates = compiler_candidates()
    key = toolchain_key(candidates)
    found = _stored_toolchain(key, candidates)
    if found is not None:
        return found
    chain = pick_toolchain(candidates)
    record = {"command": list(chain.command), "version": chain.version, "flags": list(chain.flags)}
    PROGRAMS.write_record(TOOLCHAIN_FOLDER, key, json.dumps(record).encode())
    return chain


def toolchain_key(candidates: list[tuple[str, ...]]) -> str:
    """What decides the probe's answer: each candidate command and the file it runs (path, size, modification time:
    an upgraded compiler is probed again), the flags tried and the probe program."""
    files = []
    for command in candidates:
        path = shutil.which(command[0])
        real = os.path.realpath(path) if path else command[0]
        try:
            info = os.stat(real)
            files.append([list(command), real, info.st_size, info.st_mtime_ns])
        except OSError:
            files.append([list(command), real, -1, -1])
    what = [_TOOLCHAIN_RECORD_VERSION, files, BASE_FLAGS, OPTIONAL_FLAGS, _PROBE_SOURCE, platform.machine()]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()


def _stored_toolchain(key: str, candidates: list[tuple[str, ...]]) -> Toolchain | None:
    """The toolchain a record under `key` names, if it is well formed and one of `candidates` (else it is
    discarded)."""
    data = PROGRAMS.read_record(TOOLCHAIN_FOLDER, key)
    if data is None:
        return None
    try:
        record = json.loads(data)
        command, version, flags = tuple(record["command"]), record["version"], tuple(record["flags"])
        if (command in candidates and isinstance(version, str) and flags[:len(BASE_FLAGS)] == BASE_FLAGS
                and set(flags[len(BASE_FLAGS):]) <= set(OPTIONAL_FLAGS)):
            return Toolchain(command, version, flags)
    except (ValueError, KeyError, TypeError):
        pass
    PROGRAMS.discard_record(TOOLCHAIN_FOLDER, key)
    return None


def pick_toolchain(candidates: list[tuple[str, ...]]) -> Toolchain:
    """The first of `candidates` that builds OpenMP programs (`-fopenmp` among its flags), else the first that
    builds shared libraries at all; raises BackendError naming the first when none does."""
    usable: list[Toolchain] = []
    failure: BackendError | None = None
    for command in candidates:
        try:
            chain = _probe(command)
        except BackendError as exc:
            failure = failure or exc
            continue
        if "-fopenmp" in chain.flags:
            return chain
        usable.append(chain)
    if usable:
        return usable[0]
    assert failure is not None  # candidates is never empty
    raise failure


def _probe(command: tuple[str, ...]) -> Toolchain:
    try:
        version = run_tool([*command, "--version"], Path.cwd()).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendError(f"C compiler {' '.join(command)!r} does not run: {exc}; install gcc or clang") from exc
    if not _compiles(command, BASE_FLAGS):
        raise BackendError(f"C compiler {' '.join(command)!r} cannot build a shared library with "
                           f"{' '.join(BASE_FLAGS)}: install gcc or clang")
    flags = BASE_FLAGS + tuple(f for f in OPTIONAL_FLAGS if _compiles(command, (*BASE_FLAGS, f)))
    return Toolchain(command, version[0].strip() if version else "unknown version", flags)


def host_cpu() -> str:
    """Names this machine's CPU model and features: binaries built with -march=native only run on such a CPU, so
    a cache folder shared between machines (a network home) must not hand one machine's binary to another."""
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part", "isa")
    first = {line.split(":", 1)[0].strip(): line for line in reversed(info) if line.startswith(wanted)}
    text = "\n".join(sorted(first.values())) or platform.machine()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class CCompiler(Compiler):
    """Source -> the bytes of a shared library."""

    def __init__(self, toolchain: Toolchain) -> None:
        self.toolchain = toolchain

    @property
    def cache_key(self) -> str:
        chain = self.toolchain
        host = f" | host {host_cpu()}" if "-march=native" in chain.flags else ""
        return f"cpu-c {' '.join(chain.command)} | {chain.version} | {' '.join(chain.flags)}{host}"

    def compile(self, source: str) -> bytes:
        command = [*self.toolchain.command, *self.toolchain.flags, "-o", "program.so", "program.c", "-lm"]
        return compile_in_folder(source, steps=[command], source_name="program.c", output_name="program.so",
                                 build_prefix=BUILD_PREFIX, compiler=" ".join(self.toolchain.command),
                                 error_line=_ERROR_LINE, stdout_too=False)
