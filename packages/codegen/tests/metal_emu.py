"""Check rendered Metal kernels on Linux, where nothing compiles or runs Metal Shading Language: three checks, each
batched (many kernels per compiler call, as cuda_emu.py does for CUDA).

- `lint(kernel)`: what a C++ compiler would accept but Metal does not have, or what clang ignores: `double`,
  `long long` and `LL` literals, CUDA's `__` names, the kernel frame (one `kernel void`, `[[buffer(k)]]` bindings
  0, 1, 2... in parameter order up to 31, beyond that one argument struct at binding 0 with a field for each,
  only the position attributes the launcher knows).
- `check_syntax(kernels)`: every kernel compiled by clang++ `-std=c++17 -fsyntax-only` after `metal_syntax.h`, which
  declares only the Metal built-ins the renderer uses, with the address spaces as clang address spaces (a `device`
  pointer passed as another, a write through `const device`, fail). An error names the kernel and its line.
- `MetalEmuLibrary(kernels)`: the kernels built against `metal_emu.h` (Metal's words on top of cuda_emu.h: GPU
  threads as fibers, threadgroups in turn, the barrier a switch) into one shared library; `run` launches one on
  NumPy arrays exactly as cuda_emu.EmuLibrary does (guarded, aligned buffers), passing `gid` and `lid`.

What this does not prove: that Apple's Metal compiler accepts the source (its own rules and limits), and how an
Apple GPU computes (its math library, denormals, half conversions). Those need a Mac. Neither check skips: no
clang++ (or g++ where there is no clang) is an `EmulationError`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from cuda_emu import HEADER, CudaKernel, EmulationError, EmuLibrary, _Unit, _unit, cache_dir

from plygrad.ir import Ops, UOp

METAL_HEADER: Final = Path(__file__).resolve().parent / "metal_emu.h"
SYNTAX_HEADER: Final = Path(__file__).resolve().parent / "metal_syntax.h"
METAL_STDLIB: Final = "metal_stdlib"  # what a kernel includes; an empty file here
# Metal's buffer argument table: indices 0..30 for buffers and setBytes values together
MAX_BINDINGS: Final = 31
ARGUMENT_STRUCT: Final = "constant plygrad_args& args [[buffer(0)]]"
POSITION_ATTRIBUTES: Final = frozenset({"threadgroup_position_in_grid", "thread_position_in_threadgroup"})
CLANG_CANDIDATES: Final = ("clang++-19", "clang++", "clang++-18", "clang++-17", "clang++-16", "clang++-15")
# tokens valid C++ that MSL lacks (or CUDA words that would mean the wrong renderer ran)
_FORBIDDEN: Final = ((re.compile(r"\bdouble\b"), "`double` (Metal has no float64)"),
                     (re.compile(r"\blong\s+long\b"), "`long long` (Metal's 64-bit integer is `long`)"),
                     (re.compile(r"\b\d+[uU]?(?:LL|ll)\b"), "a `LL` literal (Metal's 64-bit suffix is `L`)"),
                     (re.compile(r"(?<![\w.])__\w+"), "a `__` name (CUDA's, or reserved)"),
                     (re.compile(r"\b(?:blockIdx|threadIdx|__syncthreads)\b"), "a CUDA launch word"))
_ATTRIBUTE: Final = re.compile(r"\[\[\s*([^\]]*?)\s*\]\]")
_SIGNATURE: Final = re.compile(r"^kernel void (\w+)\((.*)\) \{$", re.MULTILINE)
_DIAGNOSTIC: Final = re.compile(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?(?P<kind>error|note): "
                                r"(?P<message>.*)$")


class MetalKernel(CudaKernel):
    """One rendered Metal program. The generated launcher passes cuda_emu's block and thread index as `gid` and
    `lid`, and builds the argument struct of a kernel with more than 31 bindings."""

    @property
    def argument_struct(self) -> bool:
        """Whether it takes its buffers and variables as one struct (more than Metal's 31 bindings)."""
        return ARGUMENT_STRUCT in self.source

    def launch_args(self, namespace: str) -> list[str]:
        """Buffers and variables (in one `plygrad_args` where the kernel takes the struct), then gid and lid."""
        direct = super().launch_args(namespace)
        if self.argument_struct:
            direct = [f"{namespace}::plygrad_args{{{', '.join(direct)}}}"]
        return [*direct, "blockIdx", "threadIdx"]

    @staticmethod
    def from_program(program: UOp) -> MetalKernel:
        """The kernel of a PROGRAM UOp lowered for a metal Target."""
        if program.op is not Ops.PROGRAM:
            raise EmulationError(f"expected a PROGRAM UOp, got {program.op.name}")
        var_names = tuple(str(v.arg[0]) for v in program.src[1:] if v.op is Ops.DEFINE_VAR)
        return MetalKernel(program.src[0].arg, program.arg, var_names)

    @property
    def cooperative(self) -> bool:
        """Whether its threads talk to each other (a threadgroup barrier), so they must run as fibers."""
        return "threadgroup_barrier" in self.source


class MetalEmuLibrary(EmuLibrary):
    """Many Metal kernels built into one shared library through metal_emu.h; `run` as cuda_emu.EmuLibrary's."""

    headers = (HEADER, METAL_HEADER)
    stub_headers = (METAL_STDLIB,)


def lint(kernel: CudaKernel) -> list[str]:
    """What is wrong with the kernel as Metal that a C++ compiler would not say: one line per problem, naming the
    kernel and the line of its source."""
    name, source = kernel.info.name, kernel.source
    problems = []
    for number, line in enumerate(source.splitlines(), 1):
        code = line.split("/*")[0]  # comments may say anything
        for pattern, what in _FORBIDDEN:
            if pattern.search(code):
                problems.append(f"kernel {name!r} line {number}: {what}: `{line.strip()}`")
    signatures = _SIGNATURE.findall(source)
    if len(signatures) != 1:
        return [*problems, f"kernel {name!r}: expected one `kernel void NAME(...) {{` line, found {len(signatures)}"]
    entry, params = signatures[0]
    if entry != name:
        problems.append(f"kernel {name!r}: the kernel function is named {entry!r}")
    attributes = _ATTRIBUTE.findall(params)
    bindings = [a for a in attributes if a.startswith("buffer(")]
    count = len(kernel.info.params) + len(kernel.var_names)
    struct = ARGUMENT_STRUCT in params
    expected = ["buffer(0)"] if struct else [f"buffer({k})" for k in range(count)]
    if bindings != expected:
        problems.append(f"kernel {name!r}: buffer bindings {bindings}, the launcher binds {expected} (buffers in "
                        "parameter order, then one per variable; one argument struct beyond 31)")
    if struct != (count > MAX_BINDINGS):
        problems.append(f"kernel {name!r}: {count} buffers and variables {'in' if struct else 'without'} an argument "
                        f"struct; the launcher uses one exactly when there are more than {MAX_BINDINGS}")
    if struct:
        fields = re.search(r"struct plygrad_args \{\n((?:  [^\n]*;\n)*)\};", source)
        found = len(fields.group(1).splitlines()) if fields else 0
        if found != count:
            problems.append(f"kernel {name!r}: plygrad_args has {found} fields, the launcher packs {count}")
    unknown = sorted(set(attributes) - set(bindings) - POSITION_ATTRIBUTES)
    if unknown:
        problems.append(f"kernel {name!r}: attributes {unknown} the launcher does not provide")
    return problems


def syntax_compiler() -> str:
    """clang++ for the syntax check (`METAL_CHECK_CXX`, else clang++-19, clang++ ...): its address spaces make the
    check stronger. g++ (>= 12) where no clang is installed: everything but the address-space rules is checked."""
    for name in (os.environ.get("METAL_CHECK_CXX", ""), *CLANG_CANDIDATES, "g++"):
        if name and (path := shutil.which(name)):
            return path
    raise EmulationError("no clang++ (or g++) on PATH: the Metal syntax check compiles every kernel as C++17; install "
                         "clang-19 (scripts/setup-system.sh)")


def _clang_errors(log: str, unit: _Unit, file: str) -> str:
    """Each error of a compiler log, at its kernel and line: an error inside metal_syntax.h (a static_assert in
    `as_type`) is placed where the unit's next note says it was instantiated. The whole log if nothing parses."""
    found: list[str] = []
    pending: str | None = None  # an error in a header, waiting for its place in a kernel
    for line in log.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match is None:
            continue
        in_unit = match["file"] == file
        if match["kind"] == "error":
            if pending is not None:
                found.append(pending)
            message = match["message"].strip()
            pending = None if in_unit else f"{message} ({Path(match['file']).name}:{match['line']})"
            if in_unit:
                found.append(f"{unit.locate(int(match['line']))}: {message}")
        elif in_unit and pending is not None:
            found.append(f"{unit.locate(int(match['line']))}: {pending}")
            pending = None
    if pending is not None:
        found.append(pending)
    return "\n".join(found) if found else log.strip()


def check_syntax(kernels: Sequence[CudaKernel]) -> str:
    """Compile every kernel's MSL with `syntax_compiler() -std=c++17 -fsyntax-only` after metal_syntax.h, one call for
    all of them (cached by content). Returns the compiler used; raises EmulationError naming each kernel and line the
    compiler rejected."""
    compiler = syntax_compiler()
    if not kernels:
        return compiler
    unit = _unit(kernels, f'#include "{SYNTAX_HEADER.name}"', launchers=False)
    header = SYNTAX_HEADER.read_text(encoding="utf-8")
    flags = ["-std=c++17", "-fsyntax-only", "-Wno-unknown-attributes", "-Wno-unknown-pragmas", "-Wno-attributes"]
    if "clang" not in Path(compiler).name:
        flags = [f for f in flags if f != "-Wno-unknown-attributes"]
    key = hashlib.sha256("\0".join([header, unit.text, compiler, *flags]).encode()).hexdigest()[:24]
    folder = cache_dir()
    passed = folder / f"msl-syntax-{key}.ok"
    if passed.exists():
        return compiler
    work = Path(tempfile.mkdtemp(prefix=f"msl-{key}-", dir=folder))
    try:
        (work / SYNTAX_HEADER.name).write_text(header, encoding="utf-8")
        (work / METAL_STDLIB).write_text("#pragma once\n", encoding="utf-8")
        source = work / "unit.cpp"
        source.write_text(unit.text, encoding="utf-8")
        cmd = [compiler, *flags, "-I", str(work), str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise EmulationError(f"the Metal syntax check of {len(unit.names)} kernel(s) failed ({' '.join(cmd)}):\n"
                                 f"{_clang_errors(done.stderr, unit, str(source))}")
        passed.touch()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return compiler

