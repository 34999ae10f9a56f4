"""Compiling HIP to an AMDGPU code object for one `gfx` arch: hiprtc where ROCm is installed, else clang offline.

The hip renderer's programs include no header and call no device library (docs/codegen.md §5.3), so both take them
as they are: hiprtc (`libhiprtc.so`, ROCm 6 or newer; ROCm 5's crashes the process for gfx94x and gfx11) and clang
offline (`clang-19 -x hip --cuda-device-only ...` linked by `ld.lld`: no GPU, no ROCm, which is how CI proves every
kernel compiles). The flags keep the IR's semantics (docs/ir.md §5); the cache key names the compiler, its version,
the arch and the flags. More in docs/backends.md, "AMD: HIP on AMD GPUs"; the plumbing shared with the other
compilers is plygrad.runtime.compiling.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from pathlib import Path
from typing import Any, Final, Protocol

from plygrad.runtime.compiling import (
    CLANG_ERROR_LINE,
    RuntimeCompilerLibrary,
    ToolchainCache,
    compile_in_folder,
    tool_version,
)
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
_ARCH: Final = re.compile(r"^gfx[0-9a-f]+$")
CODE_OBJECT_MAGIC: Final = (b"\x7fELF", b"__CLANG_OFFLOAD_BUNDLE__")


class Toolchain(Protocol):
    """A HIP compiler: `describe` names it and its version (for the cache key); `compile` gives a code object."""

    def describe(self) -> str: ...

    def compile(self, source: str, arch: str, options: list[str]) -> bytes: ...


# ---- hiprtc ------------------------------------------------------------------------------------------------------
class HIPRTC(RuntimeCompilerLibrary):
    """hiprtc through ctypes (the calls are plygrad.runtime.compiling's `RuntimeCompilerLibrary`); it reports
    `<file>:<line>:<column>: error: ...` as clang does."""

    def __init__(self, lib: Any, library: str) -> None:
        super().__init__(lib, library, prefix="hiprtc", code="Code", compile_error_status=HIPRTC_ERROR_COMPILATION,
                         source_name=SOURCE_NAME, error_line=CLANG_ERROR_LINE)

    def compile(self, source: str, arch: str, options: list[str]) -> bytes:
        return self.compile_program(source, [f"--offload-arch={arch}", *options])


# ---- clang offline -----------------------------------------------------------------------------------------------
class ClangOffline:
    """`clang -x hip --cuda-device-only ...` linked by `ld.lld`, one process per compile."""

    def __init__(self, clang: str, lld: str) -> None:
        self.clang, self.lld = clang, lld
        version, linker = tool_version([clang, "--version"]), tool_version([lld, "--version"])
        self.version = version[0] if version else "unknown version"
        self.linker_version = linker[0] if linker else "unknown version"

    def describe(self) -> str:
        return f"{self.clang} {self.version}; {self.linker_version}"

    def compile(self, source: str, arch: str, options: list[str]) -> bytes:
        command = [self.clang, *OFFLINE_FLAGS, f"--offload-arch={arch}", f"--ld-path={self.lld}", *options,
                   "-o", "program.co", SOURCE_NAME]
        return compile_in_folder(source, steps=[command], source_name=SOURCE_NAME, output_name="program.co",
                                 build_prefix=BUILD_PREFIX, compiler=Path(self.clang).name)


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
def find_toolchain(kind: str | None = None) -> Toolchain:
    """hiprtc (ROCm 6+) when installed, else clang offline (`kind` "hiprtc" or "clang" asks for one); found once
    per process. Raises BackendError saying what to install when there is none."""
    return _TOOLCHAINS.find(kind)


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


_TOOLCHAINS: ToolchainCache[Toolchain] = ToolchainCache(
    {"hiprtc": f"hiprtc from ROCm {HIPRTC_MIN_MAJOR} or newer (libhiprtc.so)",
     "clang": "clang-19 and lld-19 (apt-get install clang-19 lld-19) or ROCm's clang"},
    _open_toolchain, what="HIP compiler", backend="AMD")


def installed_toolchains() -> list[str]:
    """The kinds of toolchain installed here, in the order `find_toolchain` tries them."""
    return _TOOLCHAINS.installed()


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
