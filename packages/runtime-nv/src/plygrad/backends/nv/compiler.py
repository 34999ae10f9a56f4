"""Compiling CUDA C to a cubin (SASS for one `sm_XX`): NVRTC from the PyPI wheel, else `nvcc` on PATH.

Neither needs a GPU or a driver, so `NVCompiler(arch="sm_90")` works anywhere one of them is installed (how CI
proves that kernels compile). The flags keep the IR's semantics (docs/ir.md §5). Why a cubin and not PTX, and where
NVRTC and the CUDA headers are found: docs/backends.md, "NV: the second reference backend". The plumbing shared
with the other compilers (compile errors, the NVRTC-style wrapper, subprocess compiles) is plygrad.runtime.compiling.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Final, Protocol

from plygrad.runtime.compiling import RuntimeCompilerLibrary, ToolchainCache, compile_in_folder, tool_version
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Compiler

SEMANTIC_FLAGS: Final = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")
NVRTC_SUCCESS: Final = 0
NVRTC_ERROR_COMPILATION: Final = 6
BUILD_PREFIX: Final = "plygrad-nvcc-"
_ARCH: Final = re.compile(r"^sm_\d+[a-z]?$")
# NVRTC and nvcc both report `<file>(<line>): error: ...` (a `catastrophic error` for a missing header)
_ERROR_LINE: Final = re.compile(r"\((\d+)\): (?:catastrophic )?error", re.MULTILINE)
SOURCE_NAME: Final = "program.cu"


class Toolchain(Protocol):
    """A CUDA C compiler: `describe` names it and its version (for the cache key); `compile` gives a cubin."""

    def describe(self) -> str: ...

    def compile(self, source: str, options: list[str]) -> bytes: ...


# ---- NVRTC -------------------------------------------------------------------------------------------------------
def _nvidia_dirs() -> list[Path]:
    """The folders of the `nvidia` namespace package the NVIDIA wheels install into (none: no wheel)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def find_nvrtc_library() -> Path | None:
    """libnvrtc from the `nvidia-cuda-nvrtc` wheel (CUDA 13 layout first, then 12's), or None."""
    for base in _nvidia_dirs():
        for relative in ("cu13/lib/libnvrtc.so.13", "cu12/lib/libnvrtc.so.12", "cuda_nvrtc/lib/libnvrtc.so.12"):
            if (base / relative).is_file():
                return base / relative
    return None


class NVRTC(RuntimeCompilerLibrary):
    """NVRTC through ctypes (the calls are plygrad.runtime.compiling's `RuntimeCompilerLibrary`).

    NVRTC has no default include path, so the folder holding cuda_fp16.h is added to every compile; nvcc knows
    its own toolkit's headers and gets no such flag (another release's headers could disagree with it)."""

    def __init__(self, library: Path) -> None:
        # 13.0.88 looks for its builtins by soname without its own folder on the search path: preload them
        for builtins in sorted(library.parent.glob("libnvrtc-builtins.so*")):
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        super().__init__(ctypes.CDLL(str(library)), str(library), prefix="nvrtc", code="CUBIN",
                         compile_error_status=NVRTC_ERROR_COMPILATION, source_name=SOURCE_NAME,
                         error_line=_ERROR_LINE)
        self.include = find_include_dir()

    def compile(self, source: str, options: list[str]) -> bytes:
        if self.include is not None:
            options = [*options, f"-I{self.include}"]
        return self.compile_program(source, options)


# ---- nvcc --------------------------------------------------------------------------------------------------------
class NVCC:
    """The CUDA toolkit's `nvcc -cubin`, one process per compile."""

    def __init__(self, nvcc: str) -> None:
        self.nvcc = nvcc
        lines = tool_version([nvcc, "--version"])
        # "Cuda compilation tools, release 13.0, V13.0.88": the last line is the build, the one before the release
        self.version = " ".join(lines[-2:]) if lines else "unknown version"

    def describe(self) -> str:
        return f"nvcc {self.nvcc} {self.version}"

    def compile(self, source: str, options: list[str]) -> bytes:
        command = [self.nvcc, "-cubin", *options, "-o", "program.cubin", SOURCE_NAME]
        return compile_in_folder(source, steps=[command], source_name=SOURCE_NAME, output_name="program.cubin",
                                 build_prefix=BUILD_PREFIX, compiler="nvcc", error_line=_ERROR_LINE)


# ---- choosing --------------------------------------------------------------------------------------------------
def find_include_dir() -> Path | None:
    """A folder holding cuda_fp16.h: the `nvidia-cuda-runtime` wheel's, else the CUDA toolkit's."""
    candidates = [base / sub / "include" for base in _nvidia_dirs() for sub in ("cu13", "cu12", "cuda_runtime")]
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(variable):
            candidates.append(Path(os.environ[variable]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    return next((c for c in candidates if (c / "cuda_fp16.h").is_file()), None)


def find_toolchain(kind: str | None = None) -> Toolchain:
    """NVRTC from the wheel when installed, else `nvcc` on PATH (`kind` "nvrtc" or "nvcc" asks for one); found once
    per process. Raises BackendError saying what to install when there is none."""
    return _TOOLCHAINS.find(kind)


def _open_toolchain(kind: str) -> Toolchain | None:
    if kind == "nvrtc":
        library = find_nvrtc_library()
        return NVRTC(library) if library else None
    nvcc = shutil.which("nvcc")
    return NVCC(nvcc) if nvcc else None


_TOOLCHAINS: ToolchainCache[Toolchain] = ToolchainCache(
    {"nvrtc": "NVRTC (pip install plygrad-nv[nvrtc], i.e. nvidia-cuda-nvrtc)",
     "nvcc": "nvcc on PATH (the CUDA toolkit)"},
    _open_toolchain, what="CUDA compiler", backend="NV")


def installed_toolchains() -> list[str]:
    """The kinds of toolchain installed here, in the order `find_toolchain` tries them."""
    return _TOOLCHAINS.installed()


class NVCompiler(Compiler):
    """CUDA C -> a cubin for `arch` ("sm_90"). Needs no GPU: only a toolchain (`find_toolchain`)."""

    def __init__(self, arch: str = "sm_90", toolchain: Toolchain | None = None) -> None:
        if not _ARCH.match(arch):
            raise BackendError(f"CUDA arch {arch!r} must look like 'sm_90' (SASS for one GPU generation)")
        self.arch = arch
        self.toolchain = toolchain if toolchain is not None else find_toolchain()
        self.options = [f"--gpu-architecture={arch}", *SEMANTIC_FLAGS]

    @property
    def cache_key(self) -> str:
        return f"nv-cubin {self.toolchain.describe()} | {' '.join(self.options)}"

    def compile(self, source: str) -> bytes:
        return self.toolchain.compile(source, self.options)
