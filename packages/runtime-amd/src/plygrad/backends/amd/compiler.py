"""Compiling HIP to an AMDGPU code object for one `gfx` arch: hiprtc where ROCm is installed, else clang offline.

The hip renderer's programs include no header and call no device library (docs/codegen.md §5.3), so two compilers
take them as they are:

- **hiprtc** (`libhiprtc.so`, ROCm 6 or newer, through ctypes): what a ROCm machine has. It pre-includes the HIP
  headers, which is why the programs define none of their names. ROCm 5's hiprtc is not used: it crashes the
  process for gfx94x and gfx11 (seen with Debian's 5.2), and a crash cannot be caught.
- **clang offline** (Debian's `clang-19` and `lld-19`, or ROCm's own clang): `-x hip --offload-arch=<gfx>
  --cuda-device-only -nogpulib -nogpuinc --no-gpu-bundle-output`, linked by `ld.lld` into the same ELF code object
  hiprtc gives. No GPU, no ROCm: this is how CI proves every kernel compiles.

Flags keep the IR's semantics (docs/ir.md §5): `-ffp-contract=off` (HIP's default fuses a*b+c; the programs say
`#pragma clang fp contract(off)` as well), correctly rounded float32 division and sqrt, denormals kept. The cache
key names the compiler and its version, the arch and the flags.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Final, Protocol

from plygrad.runtime import tempfiles
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.plugin import Compiler

SEMANTIC_FLAGS: Final = ("-O3", "-ffp-contract=off", "-fhip-fp32-correctly-rounded-divide-sqrt",
                         "-fno-gpu-flush-denormals-to-zero")
OFFLINE_FLAGS: Final = ("-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "--no-gpu-bundle-output")
HIPRTC_LIBRARIES: Final = ("libhiprtc.so", "libhiprtc.so.6")
HIPRTC_SUCCESS: Final = 0
HIPRTC_ERROR_COMPILATION: Final = 6
HIPRTC_MIN_MAJOR: Final = 6
CLANG_CANDIDATES: Final = ("clang-19",)
BUILD_PREFIX: Final = "plygrad-hip-"
SOURCE_NAME: Final = "program.hip"
_TIMEOUT_S: Final = 300
_ARCH: Final = re.compile(r"^gfx[0-9a-f]+$")
# clang and hiprtc both report `<file>:<line>:<column>: error: ...`
_ERROR_LINE: Final = re.compile(r":(\d+):\d+: (?:fatal )?error", re.MULTILINE)
CODE_OBJECT_MAGIC: Final = (b"\x7fELF", b"__CLANG_OFFLOAD_BUNDLE__")


class Toolchain(Protocol):
    """A HIP compiler: `describe` names it and its version (for the cache key); `compile` gives a code object."""

    def describe(self) -> str: ...

    def compile(self, source: str, arch: str, options: list[str]) -> bytes: ...


def compile_error(source: str, log: str, compiler: str) -> CompileError:
    """A CompileError quoting the first source line the compiler blamed, plus its first diagnostics."""
    match = _ERROR_LINE.search(log)
    line = int(match.group(1)) if match else 0
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    where = f" at line {line}: `{text}`" if text else ""
    diagnostics = "\n".join(log.strip().splitlines()[:12])
    return CompileError(f"{compiler} rejected the program{where}\n{diagnostics}", line=line, source_line=text)


# ---- hiprtc ------------------------------------------------------------------------------------------------------
class HIPRTC:
    """hiprtc through ctypes; programs are created and destroyed per compile, so concurrent compiles are safe."""

    def __init__(self, lib: Any, library: str) -> None:
        self.lib, self.library = lib, library
        p, size = ctypes.c_void_p, ctypes.c_size_t
        char_pp = ctypes.POINTER(ctypes.c_char_p)
        for name, argtypes in (("hiprtcVersion", [ctypes.POINTER(ctypes.c_int)] * 2),
                               ("hiprtcCreateProgram", [ctypes.POINTER(p), ctypes.c_char_p, ctypes.c_char_p,
                                                        ctypes.c_int, char_pp, char_pp]),
                               ("hiprtcCompileProgram", [p, ctypes.c_int, char_pp]),
                               ("hiprtcGetProgramLogSize", [p, ctypes.POINTER(size)]),
                               ("hiprtcGetProgramLog", [p, ctypes.c_char_p]),
                               ("hiprtcGetCodeSize", [p, ctypes.POINTER(size)]),
                               ("hiprtcGetCode", [p, ctypes.c_char_p]),
                               ("hiprtcDestroyProgram", [ctypes.POINTER(p)])):
            function = getattr(lib, name)
            function.restype, function.argtypes = ctypes.c_int, argtypes
        lib.hiprtcGetErrorString.restype = ctypes.c_char_p
        lib.hiprtcGetErrorString.argtypes = [ctypes.c_int]
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check("hiprtcVersion", lib.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        self.version = (major.value, minor.value)

    def _check(self, call: str, status: int) -> None:
        if status != HIPRTC_SUCCESS:
            name = self.lib.hiprtcGetErrorString(status) or b"unknown hiprtc error"
            raise BackendError(f"{call}: {name.decode(errors='replace')} (status {status}; {self.library})")

    def describe(self) -> str:
        return f"hiprtc {self.version[0]}.{self.version[1]}"

    def compile(self, source: str, arch: str, options: list[str]) -> bytes:
        program = ctypes.c_void_p()
        self._check("hiprtcCreateProgram", self.lib.hiprtcCreateProgram(
            ctypes.byref(program), source.encode(), SOURCE_NAME.encode(), 0, None, None))
        try:
            encoded = [o.encode() for o in (f"--offload-arch={arch}", *options)]
            status = self.lib.hiprtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
            if status == HIPRTC_ERROR_COMPILATION:
                raise compile_error(source, self._log(program), self.describe())
            self._check("hiprtcCompileProgram", status)
            size = ctypes.c_size_t()
            self._check("hiprtcGetCodeSize", self.lib.hiprtcGetCodeSize(program, ctypes.byref(size)))
            code = ctypes.create_string_buffer(size.value)
            self._check("hiprtcGetCode", self.lib.hiprtcGetCode(program, code))
            return code.raw
        finally:
            self.lib.hiprtcDestroyProgram(ctypes.byref(program))

    def _log(self, program: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        self._check("hiprtcGetProgramLogSize", self.lib.hiprtcGetProgramLogSize(program, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        self._check("hiprtcGetProgramLog", self.lib.hiprtcGetProgramLog(program, log))
        return log.value.decode(errors="replace")


# ---- clang offline -----------------------------------------------------------------------------------------------
def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # the command is a clang found on PATH (or ROCm's) with fixed flags; no shell is involved
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S,  # noqa: S603
                          check=False)


class ClangOffline:
    """`clang -x hip --cuda-device-only ...` linked by `ld.lld`, one process per compile."""

    def __init__(self, clang: str, lld: str) -> None:
        self.clang, self.lld = clang, lld
        try:
            version = _run([clang, "--version"], Path.cwd()).stdout.strip().splitlines()
            linker = _run([lld, "--version"], Path.cwd()).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"{clang} or {lld} --version does not run: {exc}") from exc
        self.version = version[0] if version else "unknown version"
        self.linker_version = linker[0] if linker else "unknown version"

    def describe(self) -> str:
        return f"{self.clang} {self.version}; {self.linker_version}"

    def compile(self, source: str, arch: str, options: list[str]) -> bytes:
        with tempfiles.temp_dir(BUILD_PREFIX) as tmp:
            folder = Path(tmp)
            (folder / SOURCE_NAME).write_text(source)
            command = [self.clang, *OFFLINE_FLAGS, f"--offload-arch={arch}", f"--ld-path={self.lld}", *options,
                       "-o", "program.co", SOURCE_NAME]
            try:
                done = _run(command, folder)
            except subprocess.TimeoutExpired as exc:
                raise CompileError(f"clang took longer than {_TIMEOUT_S} s on the program") from exc
            if done.returncode != 0:
                raise compile_error(source, done.stderr + done.stdout, Path(self.clang).name)
            return (folder / "program.co").read_bytes()


def _find_lld(clang: str) -> str | None:
    """ld.lld beside the clang (ROCm's, or /usr/lib/llvm-19/bin through Debian's link), else ld.lld-19 on PATH."""
    beside = Path(clang).resolve().parent / "ld.lld"
    if beside.is_file():
        return str(beside)
    return shutil.which("ld.lld-19") or shutil.which("ld.lld")


def _rocm_clang() -> str | None:
    for root in (os.environ.get("ROCM_PATH", ""), "/opt/rocm"):
        if root and (Path(root) / "llvm" / "bin" / "clang").is_file():
            return str(Path(root) / "llvm" / "bin" / "clang")
    return None


# ---- choosing --------------------------------------------------------------------------------------------------
_TOOLCHAINS: dict[str, Toolchain] = {}
_TOOLCHAIN_LOCK = threading.Lock()


def find_toolchain(kind: str | None = None) -> Toolchain:
    """hiprtc (ROCm 6+) when installed, else clang offline (`kind` "hiprtc" or "clang" asks for one); found once
    per process. Raises BackendError saying what to install when there is none."""
    if kind not in (None, "hiprtc", "clang"):
        raise BackendError(f"unknown HIP compiler {kind!r}: use 'hiprtc' or 'clang'")
    with _TOOLCHAIN_LOCK:
        for candidate in ("hiprtc", "clang") if kind is None else (kind,):
            if candidate not in _TOOLCHAINS:
                found = _open_toolchain(candidate)
                if found is None:
                    continue
                _TOOLCHAINS[candidate] = found
            return _TOOLCHAINS[candidate]
    wanted = {"hiprtc": f"hiprtc from ROCm {HIPRTC_MIN_MAJOR} or newer (libhiprtc.so)",
              "clang": "clang-19 and lld-19 (apt-get install clang-19 lld-19) or ROCm's clang"}
    raise BackendError("no HIP compiler: the AMD backend needs " +
                       (wanted[kind] if kind else f"{wanted['hiprtc']}, or {wanted['clang']}"))


def _open_toolchain(kind: str) -> Toolchain | None:
    if kind == "hiprtc":
        for name in HIPRTC_LIBRARIES:
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            hiprtc = HIPRTC(lib, name)
            return hiprtc if hiprtc.version[0] >= HIPRTC_MIN_MAJOR else None
        return None
    clang = next((found for c in CLANG_CANDIDATES if (found := shutil.which(c))), None) or _rocm_clang()
    lld = _find_lld(clang) if clang else None
    return ClangOffline(clang, lld) if clang and lld else None


class AMDCompiler(Compiler):
    """HIP -> an AMDGPU code object for `arch` ("gfx90a", "gfx942", "gfx1100"). Needs no GPU: only a toolchain."""

    def __init__(self, arch: str = "gfx1100", toolchain: Toolchain | None = None) -> None:
        if not _ARCH.match(arch):
            raise BackendError(f"AMD arch {arch!r} must look like 'gfx90a' or 'gfx1100' (a gcnArchName without its "
                               "feature suffix)")
        self.arch = arch
        self.toolchain = toolchain if toolchain is not None else find_toolchain()
        self.options = list(SEMANTIC_FLAGS)

    @property
    def cache_key(self) -> str:
        return f"amd-code-object {self.toolchain.describe()} | --offload-arch={self.arch} {' '.join(self.options)}"

    def compile(self, source: str) -> bytes:
        binary = self.toolchain.compile(source, self.arch, self.options)
        if not binary.startswith(CODE_OBJECT_MAGIC):
            raise CompileError(f"{self.toolchain.describe()} gave {len(binary)} bytes that are not a code object "
                               "(no ELF header, no offload bundle)")
        return binary
