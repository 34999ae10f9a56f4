"""Check rendered CUDA kernels without a GPU: run them on the CPU through `cuda_emu.h`, compile them to cubins.

Two checks, both cheap because they batch: many kernels go into one translation unit per compiler call.

- `EmuLibrary.build(kernels)` writes one C++20 translation unit (the emulation header, each distinct kernel source in
  its own namespace so the preludes of two kernels cannot collide, one generated `extern "C"` launcher per kernel),
  builds it with g++ into a shared library (cached on disk by a hash of everything that goes into it) and loads it
  with ctypes; `run` then launches a kernel on NumPy arrays, each buffer starting 256-byte aligned as a cuMemAlloc
  allocation does, so a vector access the emulation finds misaligned (cuda_emu.h checks every one and fails the
  launch, naming the buffer and element) is misaligned on the GPU too. See cuda_emu.h for how threads, blocks,
  barriers and shared memory are emulated.
- `compile_cubins(kernels, archs)` compiles the same kind of translation unit with `nvcc -cubin -arch=sm_XX`, one
  call per arch: compiling to SASS runs ptxas, which rejects what PTX text alone would accept. A compile error is
  raised with nvcc's error lines mapped back to the kernel and the line in its own source.

Neither check may skip (docs/design.md §5): a missing g++ or nvcc raises `EmulationError` saying what to install.
`CUDA_EMU_CACHE` names the cache folder (default: `plygrad-cuda-emu` in the temp folder).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

import numpy as np

from plygrad.ir import Ops, ProgramInfo, UOp

HEADER: Final = Path(__file__).resolve().parent / "cuda_emu.h"
# headers a rendered kernel may include; the emulation header defines what the kernels use from them
CUDA_HEADERS: Final = ("cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h", "cuda.h", "cuda_fp16.hpp", "cuda_bf16.hpp")
NVCC_CANDIDATES: Final = ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc")
# bytes of pattern around every buffer a kernel gets, checked after the launch (a wrong index writes into them)
GUARD_BYTES: Final = 4096
GUARD_FILL: Final = 0xA5
# where each buffer starts: what cuMemAlloc guarantees (docs/codegen.md §5 promises kernels 16 bytes), so an access
# the emulation finds misaligned is misaligned within the buffer, not by the harness's placement
BUFFER_ALIGN: Final = 256
_MISALIGNED = re.compile(r"address 0x([0-9a-f]+)")
_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"][^>\"]+[>\"]\s*$", re.MULTILINE)
# an include guard around a prelude (`#ifndef X` then `#define X`): undefined before each kernel, so every kernel's
# namespace gets its own copy of the helpers the guard protects
_GUARD = re.compile(r"^\s*#\s*ifndef\s+(\w+)\s*\n\s*#\s*define\s+\1\b", re.MULTILINE)


class EmulationError(RuntimeError):
    """A kernel could not be built, compiled or launched by the emulation harness; the message says which and why."""


@dataclass(frozen=True)
class CudaKernel:
    """One rendered CUDA program: its source, launch information and variable names (DEFINE_VAR order)."""

    source: str
    info: ProgramInfo
    var_names: tuple[str, ...] = ()

    @staticmethod
    def from_program(program: UOp) -> CudaKernel:
        """The kernel of a PROGRAM UOp (codegen's output): source `src[0]`, variables in `src[1:]`."""
        if program.op is not Ops.PROGRAM:
            raise EmulationError(f"expected a PROGRAM UOp, got {program.op.name}")
        var_names = tuple(str(v.arg[0]) for v in program.src[1:] if v.op is Ops.DEFINE_VAR)
        return CudaKernel(program.src[0].arg, program.arg, var_names)

    def launch_args(self, namespace: str) -> list[str]:
        """The arguments the generated launcher (in `emu_launch_<name>`, given `bufs` and `vars`) passes the kernel
        function: each buffer, converting to the pointer type the kernel declares, then each variable. A kernel
        whose frame differs (Metal's) overrides it; `namespace` is the one its source was put in."""
        return [f"cuda_emu::AnyPtr{{bufs[{p}]}}" for p in range(len(self.info.params))] + \
            [f"vars[{v}]" for v in range(len(self.var_names))]

    @property
    def cooperative(self) -> bool:
        """Whether its threads can talk to each other (barriers, or the warp-collective tensor-core helper, which
        cuda_emu.h emulates with barriers), so the emulator must run them as threads."""
        return "__sync" in self.source or "plygrad_mma_" in self.source


def cache_dir() -> Path:
    folder = Path(os.environ.get("CUDA_EMU_CACHE") or Path(tempfile.gettempdir()) / "plygrad-cuda-emu")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _rename(source: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, source)


@dataclass(frozen=True)
class _Unit:
    """A translation unit of several kernels: the text, each kernel's (possibly renamed) entry name, and where each
    kernel's source starts in the text (1-based line), to map a compiler's line numbers back."""

    text: str
    names: dict[CudaKernel, str]
    starts: tuple[tuple[int, str], ...]  # (first line of a kernel's source in the unit, its entry name)

    def locate(self, line: int) -> str:
        """`kernel NAME line N` for a line of the unit, or `line N of the generated unit` outside every kernel."""
        found = f"line {line} of the generated translation unit"
        for start, name in self.starts:
            if line >= start:
                found = f"kernel {name!r} line {line - start + 1}"
        return found


def _unit(kernels: Sequence[CudaKernel], prelude: str, launchers: bool) -> _Unit:
    """One translation unit for `kernels`: `#include`s hoisted to the top (each once: inside a namespace a guarded
    header would be seen by the first kernel only), each distinct source in its own namespace (with the include
    guards of its own preludes reset), entry names made unique (`name`, `name_1`, ...), and with `launchers` one
    `emu_launch_<name>` per kernel."""
    distinct = list(dict.fromkeys(kernels))
    includes: dict[str, None] = {}
    bodies: list[tuple[str, str]] = []
    names: dict[CudaKernel, str] = {}
    taken: set[str] = set()
    for kernel in distinct:
        name = kernel.info.name
        unique, i = name, 0
        while unique in taken:
            i += 1
            unique = f"{name}_{i}"
        taken.add(unique)
        names[kernel] = unique
        source = kernel.source if unique == name else _rename(kernel.source, name, unique)
        for match in _INCLUDE.finditer(source):
            includes[match.group(0).strip()] = None
        bodies.append((unique, _INCLUDE.sub("", source)))
    lines = [prelude, *includes]
    starts: list[tuple[int, str]] = []
    for i, (unique, body) in enumerate(bodies):
        lines.extend(f"#undef {guard}" for guard in dict.fromkeys(_GUARD.findall(body)))
        lines.append(f"namespace plygrad_kernel_{i} {{")
        starts.append((sum(chunk.count("\n") + 1 for chunk in lines) + 1, unique))
        lines.append(body)
        lines.append(f"}}  // namespace plygrad_kernel_{i}")
    if launchers:
        for i, kernel in enumerate(distinct):
            unique = names[kernel]
            args = kernel.launch_args(f"plygrad_kernel_{i}")
            lines.append(
                f'extern "C" int emu_launch_{unique}(void* const* bufs, const long long* vars, const unsigned* grid, '
                "const unsigned* block, int cooperative, int reverse) {\n"
                "  (void)bufs; (void)vars;\n"
                "  return cuda_emu::launch(grid, block, cooperative != 0, reverse != 0, [&] { "
                f"plygrad_kernel_{i}::{unique}({', '.join(args)}); }});\n}}")
    return _Unit("\n".join(lines) + "\n", names, tuple(starts))


def _errors(log: str, unit: _Unit, file: str) -> str:
    """The compiler's error lines, each with its kernel and line; the whole log if none parses."""
    found = []
    pattern = re.compile(rf"{re.escape(file)}[(:](\d+)[):]?[^:]*:\s*(?:fatal )?error:?\s*(.*)")
    for line in log.splitlines():
        match = pattern.search(line)
        if match:
            found.append(f"{unit.locate(int(match.group(1)))}: {match.group(2).strip()}")
    return "\n".join(found) if found else log.strip()


def gxx() -> str:
    """The C++ compiler for the emulation: `CXX`, else g++ or clang++ on PATH."""
    for name in (os.environ.get("CXX", ""), "g++", "clang++"):
        if name and (path := shutil.which(name)):
            return path
    raise EmulationError("no C++ compiler (CXX, g++, clang++) on PATH: the CUDA emulation compiles kernels as C++20; "
                         "install g++ (>= 12, for _Float16)")


class EmuLibrary:
    """Many kernels built into one shared library; `run` launches one of them on NumPy arrays."""

    # the emulation headers, written beside the unit (the last one is included first), and the headers a kernel may
    # include that become empty files (what they declare comes from the emulation headers)
    headers: ClassVar[tuple[Path, ...]] = (HEADER,)
    stub_headers: ClassVar[tuple[str, ...]] = CUDA_HEADERS

    def __init__(self, kernels: Sequence[CudaKernel]) -> None:
        if not kernels:
            raise EmulationError("EmuLibrary needs at least one kernel")
        header = "\0".join(path.read_text(encoding="utf-8") for path in self.headers)
        self._unit = _unit(kernels, f'#include "{self.headers[-1].name}"', launchers=True)
        compiler = gxx()
        # -O0: building is most of the check's time (150 kernels: 2.0 s at -O0, 4.7 s at -O1) and test kernels are
        # small; -ffp-contract=off: a*b+c stays two roundings, as on the device (the renderer asks for no FMA)
        flags = ["-std=c++20", "-O0", "-shared", "-fPIC", "-ffp-contract=off", "-w"]
        key = hashlib.sha256("\0".join([header, self._unit.text, compiler, *flags]).encode()).hexdigest()[:24]
        folder = cache_dir()
        lib = folder / f"emu-{key}.so"
        if not lib.exists():
            self._build(folder, key, header, compiler, flags, lib)
        self._lib = ctypes.CDLL(str(lib))
        self._lib.emu_last_error.restype = ctypes.c_char_p

    def _build(self, folder: Path, key: str, header: str, compiler: str, flags: list[str], lib: Path) -> None:
        work = Path(tempfile.mkdtemp(prefix=f"emu-{key}-", dir=folder))
        for path in self.headers:
            (work / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        for name in self.stub_headers:  # what they declare comes from the emulation headers
            (work / name).write_text("#pragma once\n", encoding="utf-8")
        source = work / "unit.cpp"
        error_getter = 'extern "C" const char* emu_last_error() { return cuda_emu::last_error; }\n'
        source.write_text(self._unit.text + error_getter, encoding="utf-8")
        built = work / "unit.so"
        cmd = [compiler, *flags, "-I", str(work), "-o", str(built), str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise EmulationError(f"building the CUDA emulation of {len(self._unit.names)} kernel(s) failed "
                                 f"({' '.join(cmd)}):\n{_errors(done.stderr, self._unit, str(source))}")
        os.replace(built, lib)  # atomic: a concurrent build of the same key loads either copy
        shutil.rmtree(work, ignore_errors=True)

    def run(self, kernel: CudaKernel, buffers: Sequence[np.ndarray], variables: Mapping[str, int] | None = None,
            grid: tuple[int, int, int] | None = None, block: tuple[int, int, int] | None = None,
            reverse: bool = False) -> list[np.ndarray]:
        """Launch `kernel` on `buffers` (parameter order; written in place) and return the writable ones.

        Each buffer is copied into the middle of a larger one for the launch; a write into the margins raises
        `EmulationError` ("wrote out of bounds"), and a read from them sees the pattern 0xA5 (for a float, a tiny
        negative number that shows up in the results).

        The grid (blocks) and block (threads) default to the ProgramInfo's `global_size` and `local_size`.
        `reverse` runs a block's threads in the reverse order (another interleaving, for races the forward order
        hides: e.g. a missing barrier between reading a slot and overwriting it).
        """
        info = kernel.info
        if kernel not in self._unit.names:
            raise EmulationError(f"kernel {info.name!r} is not in this library: build it with the library")
        if len(buffers) != len(info.params):
            raise EmulationError(f"kernel {info.name!r} takes {len(info.params)} buffers, got {len(buffers)}")
        for param, buf in zip(info.params, buffers, strict=True):
            if not buf.flags.c_contiguous or buf.dtype.itemsize != param.dtype.itemsize or buf.size < param.size:
                raise EmulationError(f"kernel {info.name!r} parameter {param.index}: needs a C-contiguous array of "
                                     f"{param.size} x {param.dtype}, got {buf.dtype}{buf.shape}")
        missing = [n for n in kernel.var_names if n not in (variables or {})]
        if missing:
            raise EmulationError(f"kernel {info.name!r} needs values for the variables {missing}")
        values = [int((variables or {})[n]) for n in kernel.var_names]
        grid = grid or info.global_size
        block = block or info.local_size or (1, 1, 1)
        fn = getattr(self._lib, f"emu_launch_{self._unit.names[kernel]}")
        fn.restype = ctypes.c_int
        # each buffer runs inside a larger one whose margins hold a pattern: a write out of bounds changes them
        guarded = [_aligned_room(param.size * buf.dtype.itemsize) for param, buf in zip(info.params, buffers,
                                                                                         strict=True)]
        for param, buf, room in zip(info.params, buffers, guarded, strict=True):
            room[GUARD_BYTES:GUARD_BYTES + param.size * buf.dtype.itemsize] = buf.reshape(-1).view(np.uint8)[
                :param.size * buf.dtype.itemsize]
        pointers = (ctypes.c_void_p * max(1, len(buffers)))(*[room.ctypes.data + GUARD_BYTES for room in guarded])
        vals = (ctypes.c_longlong * max(1, len(values)))(*values)
        dims = ctypes.c_uint * 3
        if fn(pointers, vals, dims(*grid), dims(*block), int(kernel.cooperative), int(reverse)) != 0:
            message = self._lib.emu_last_error().decode()
            raise EmulationError(f"kernel {info.name!r}: {_name_address(message, info, guarded)}")
        for param, buf, room in zip(info.params, buffers, guarded, strict=True):
            nbytes = param.size * buf.dtype.itemsize
            for side, margin in (("before", room[:GUARD_BYTES]), ("after", room[GUARD_BYTES + nbytes:])):
                if np.any(margin != GUARD_FILL):
                    raise EmulationError(f"kernel {info.name!r} wrote out of bounds {side} data{param.index} "
                                         f"({param.size} x {param.dtype})")
            buf.reshape(-1).view(np.uint8)[:nbytes] = room[GUARD_BYTES:GUARD_BYTES + nbytes]
        return [buf for param, buf in zip(info.params, buffers, strict=True) if param.writable]


def _aligned_room(nbytes: int) -> np.ndarray:
    """`nbytes` with GUARD_BYTES of GUARD_FILL on either side, the middle starting at a multiple of BUFFER_ALIGN."""
    raw = np.full(nbytes + 2 * GUARD_BYTES + BUFFER_ALIGN, GUARD_FILL, np.uint8)
    shift = -(raw.ctypes.data + GUARD_BYTES) % BUFFER_ALIGN
    return raw[shift:shift + nbytes + 2 * GUARD_BYTES]


def _name_address(message: str, info: ProgramInfo, guarded: Sequence[np.ndarray]) -> str:
    """`message` with the buffer and element an address in it points at (`data1 + 3 elements`), where it does."""
    match = _MISALIGNED.search(message)
    if match is None:
        return message
    address = int(match.group(1), 16)
    for param, room in zip(info.params, guarded, strict=True):
        start = room.ctypes.data + GUARD_BYTES
        if start <= address < start + max(param.size * param.dtype.itemsize, 1):
            offset = address - start
            where = f"data{param.index} + {offset // param.dtype.itemsize} elements"
            if offset % param.dtype.itemsize:
                where += f" + {offset % param.dtype.itemsize} bytes"
            return f"{message} [{where}]"
    return message


def nvcc() -> str:
    """nvcc: `NVCC`, else on PATH, else the CUDA toolkit's usual places."""
    for candidate in (os.environ.get("NVCC", ""), shutil.which("nvcc") or "", *NVCC_CANDIDATES):
        if candidate and Path(candidate).is_file():
            return candidate
    raise EmulationError("nvcc not found (NVCC, PATH, /usr/local/bin, /usr/local/cuda/bin): the cubin check needs "
                         "the CUDA toolkit (the CI machine image carries CUDA 13.0); it must not be skipped")


def compile_cubins(kernels: Sequence[CudaKernel], archs: Sequence[str] = ("sm_80", "sm_90")) -> dict[str, bytes]:
    """Compile every kernel to SASS for each arch, one nvcc call per arch (cached by content); arch -> cubin.

    Raises `EmulationError` with nvcc's error lines (kernel and line in its own source) when one fails.
    """
    if not kernels:
        return {}
    unit = _unit(kernels, "", launchers=False)
    compiler = nvcc()
    folder = cache_dir()
    out: dict[str, bytes] = {}
    for arch in archs:
        flags = ["-cubin", f"-arch={arch}", "-O3", "--fmad=false", "-w"]
        key = hashlib.sha256("\0".join([unit.text, compiler, *flags]).encode()).hexdigest()[:24]
        cubin = folder / f"{arch}-{key}.cubin"
        if not cubin.exists():
            work = Path(tempfile.mkdtemp(prefix=f"nvcc-{key}-", dir=folder))
            source = work / "unit.cu"
            source.write_text(unit.text, encoding="utf-8")
            cmd = [compiler, *flags, "-o", str(work / "unit.cubin"), str(source)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise EmulationError(f"nvcc failed for {arch} on {len(unit.names)} kernel(s) ({' '.join(cmd)}):\n"
                                     f"{_errors(done.stdout + done.stderr, unit, str(source))}")
            os.replace(work / "unit.cubin", cubin)
            shutil.rmtree(work, ignore_errors=True)
        out[arch] = cubin.read_bytes()
    return out


def cubin_symbols(cubin: bytes) -> set[str]:
    """The names in a cubin's ELF string tables that look like kernel entries (`.text.<name>` sections)."""
    return {m.decode() for m in re.findall(rb"\.text\.([A-Za-z_][A-Za-z0-9_]*)", cubin)}
