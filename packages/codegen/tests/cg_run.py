"""Compile a rendered C PROGRAM with the system C compiler and run it on NumPy arrays (ctypes).

If `cc` is missing the tests fail with a message saying so: the compile checks must never skip (CI has gcc).
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from plygrad.ir import Ops, ProgramInfo, Stage, UOp, verify

_BUILD = Path(tempfile.mkdtemp(prefix="plygrad-codegen-tests-"))
_LIBS: dict[str, ctypes.CDLL] = {}


def compile_c(source: str, openmp: bool = False) -> ctypes.CDLL:
    """Compile `source` into a shared library (cached by content) and load it."""
    key = hashlib.sha256(source.encode() + bytes([openmp])).hexdigest()[:24]
    if key in _LIBS:
        return _LIBS[key]
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no C compiler found (cc/gcc/clang): the codegen tests compile the rendered C; install gcc")
    src, lib = _BUILD / f"{key}.c", _BUILD / f"{key}.so"
    src.write_text(source)
    cmd = [cc, "-O2", "-std=c11", "-shared", "-fPIC", *(["-fopenmp"] if openmp else []), "-o", str(lib), str(src),
           "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"C compile failed ({' '.join(cmd)}):\n{done.stderr}\n--- source ---\n{source}")
    _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


def run_program(program: UOp, buffers: list[np.ndarray], variables: dict[str, int] | None = None,
                openmp: bool = False) -> None:
    """Verify the PROGRAM, compile it and call it on `buffers` (in parameter order; outputs are written)."""
    verify(program, Stage.PROGRAM)
    info: ProgramInfo = program.arg
    assert len(buffers) == len(info.params), f"{info.name} takes {len(info.params)} buffers"
    for p, b in zip(info.params, buffers, strict=True):
        assert b.flags.c_contiguous and b.size >= p.size, (p, b.shape)
    lib = compile_c(program.src[0].arg, openmp)
    fn = getattr(lib, info.name)
    var_nodes = [v for v in program.src[1:] if v.op is Ops.DEFINE_VAR]
    fn.argtypes = [ctypes.c_void_p] * len(buffers) + [ctypes.c_longlong] * len(var_nodes)
    fn.restype = None
    values = [(variables or {})[str(v.arg[0])] for v in var_nodes]
    fn(*[b.ctypes.data for b in buffers], *values)
