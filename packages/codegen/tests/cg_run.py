"""Compile a rendered C PROGRAM with the system C compiler and run it on NumPy arrays (ctypes).

The compiler is `CC` (split like a shell would, as the CPU backend does), else cc, gcc or clang on PATH, so
`CC=clang pytest` and `CC=gcc pytest` test the source with each. If none is found the tests fail with a message
saying so: the compile checks must never skip (CI has gcc).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from plygrad.ir import Ops, ProgramInfo, Stage, UOp, verify

_BUILD = Path(tempfile.mkdtemp(prefix="plygrad-codegen-tests-"))
_LIBS: dict[str, ctypes.CDLL] = {}


@functools.cache
def compiler() -> tuple[str, ...]:
    """The C compiler command: `CC`, else the first of cc, gcc, clang on PATH."""
    chosen = os.environ.get("CC", "").strip()
    if chosen:
        command = tuple(shlex.split(chosen))
        if shutil.which(command[0]) is None:
            pytest.fail(f"CC={chosen!r}, but {command[0]!r} is not an executable on PATH: fix CC or unset it")
        return command
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path is not None:
            return (path,)
    pytest.fail("no C compiler found (CC, cc, gcc, clang): the codegen tests compile the rendered C; install gcc")


def compiler_version() -> str:
    """The compiler's first `--version` line, for the test report header."""
    done = subprocess.run([*compiler(), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.stdout else "unknown version"


@functools.cache
def openmp_flags() -> tuple[str, ...]:
    """("-fopenmp",) if the compiler can build and link with it, else (): as the CPU backend, a program then runs
    its `#pragma omp` loops on one core, with the same result (clang without libomp installed, e.g.)."""
    src, lib = _BUILD / "openmp-probe.c", _BUILD / "openmp-probe.so"
    src.write_text("void probe(float* out) {\n#pragma omp parallel for\n  for (int i = 0; i < 8; i++) out[i] = i;\n}\n")
    cmd = [*compiler(), "-shared", "-fPIC", "-fopenmp", "-o", str(lib), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return ("-fopenmp",) if done.returncode == 0 else ()


def compile_c(source: str, openmp: bool = False, flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Compile `source` (with extra `flags`) into a shared library, cached by content, and load it."""
    key = hashlib.sha256("\0".join([source, str(openmp), *compiler(), *flags]).encode()).hexdigest()[:24]
    if key in _LIBS:
        return _LIBS[key]
    src, lib = _BUILD / f"{key}.c", _BUILD / f"{key}.so"
    src.write_text(source)
    # -ffp-contract=off as the CPU backend: the IR rounds after every op, so a*b+c must not become one fma
    cmd = [*compiler(), "-O2", "-std=c11", "-shared", "-fPIC", "-ffp-contract=off", *flags,
           *(openmp_flags() if openmp else ()), "-o", str(lib), str(src), "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"C compile failed ({' '.join(cmd)}):\n{done.stderr}\n--- source ---\n{source}")
    _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


def run_program(program: UOp, buffers: list[np.ndarray], variables: dict[str, int] | None = None,
                openmp: bool = False, flags: tuple[str, ...] = ()) -> None:
    """Verify the PROGRAM, compile it (with extra compiler `flags`) and call it on `buffers` (in parameter order;
    outputs are written)."""
    verify(program, Stage.PROGRAM)
    info: ProgramInfo = program.arg
    assert len(buffers) == len(info.params), f"{info.name} takes {len(info.params)} buffers"
    for p, b in zip(info.params, buffers, strict=True):
        assert b.flags.c_contiguous and b.size >= p.size, (p, b.shape)
    lib = compile_c(program.src[0].arg, openmp, flags)
    fn = getattr(lib, info.name)
    var_nodes = [v for v in program.src[1:] if v.op is Ops.DEFINE_VAR]
    fn.argtypes = [ctypes.c_void_p] * len(buffers) + [ctypes.c_longlong] * len(var_nodes)
    fn.restype = None
    values = [(variables or {})[str(v.arg[0])] for v in var_nodes]
    fn(*[b.ctypes.data for b in buffers], *values)


@functools.cache
def native_flags() -> tuple[str, ...]:
    """The CPU backend's code-generation flags where the compiler takes them: the AVX-512 code paths are where GCC
    miscompiled before (packages/runtime-cpu compiler.py), so the kernels here are compiled the same way."""
    src = _BUILD / "native-probe.c"
    src.write_text("void probe(float* out) { out[0] = 1.0f; }\n")
    flags = ("-march=native", "-fno-tree-loop-if-convert")
    done = subprocess.run([*compiler(), "-shared", "-fPIC", *flags, "-o", str(_BUILD / "native-probe.so"), str(src)],
                          capture_output=True, check=False)
    return flags if done.returncode == 0 else ()
