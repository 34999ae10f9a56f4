"""Compiling CUDA C to a cubin (SASS for one `sm_XX`): NVRTC from the PyPI wheel, else `nvcc` on PATH.

Why a cubin and not PTX: a driver JIT-compiles PTX only up to its own PTX version, so PTX from an NVRTC newer than
the driver (13.5 beside a CUDA 13.0 driver) does not load, while SASS does; and compiling to SASS runs ptxas, which
rejects what PTX text alone accepts (a misspelt `mma` shape, an instruction the arch lacks). Neither compiler
needs a GPU or a driver, so `NVCompiler(arch="sm_90")` works anywhere one of them is installed, which is how CI
proves that kernels compile.

Flags keep the IR's semantics (docs/ir.md §5): `--fmad=false` because the IR rounds after every operation (no
a*b+c contraction), and explicit IEEE division, square root and denormals so no default can change them.

NVRTC (`nvidia-cuda-nvrtc`, `pip install plygrad-nv[nvrtc]`) is found in the `nvidia` namespace package's
`cu13/lib` (or `cu12/lib`), loaded with ctypes; its builtins library is loaded first with RTLD_GLOBAL because
NVRTC 13.0.88 cannot find it otherwise. `cuda_fp16.h`/`cuda_bf16.h` are not built into NVRTC: the include folder
comes from `nvidia-cuda-runtime`'s wheel, else the CUDA toolkit's (`CUDA_HOME`, `CUDA_PATH`, beside `nvcc`,
/usr/local/cuda).
"""

from __future__ import annotations

import ctypes
import importlib.util
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

SEMANTIC_FLAGS: Final = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")
NVRTC_SUCCESS: Final = 0
NVRTC_ERROR_COMPILATION: Final = 6
BUILD_PREFIX: Final = "plygrad-nvcc-"
_TIMEOUT_S: Final = 300
_ARCH: Final = re.compile(r"^sm_\d+[a-z]?$")
# NVRTC and nvcc both report `<file>(<line>): error: ...` (a `catastrophic error` for a missing header)
_ERROR_LINE: Final = re.compile(r"\((\d+)\): (?:catastrophic )?error", re.MULTILINE)
SOURCE_NAME: Final = "program.cu"


class Toolchain(Protocol):
    """A CUDA C compiler: `describe` names it and its version (for the cache key); `compile` gives a cubin."""

    def describe(self) -> str: ...

    def compile(self, source: str, options: list[str]) -> bytes: ...


def compile_error(source: str, log: str, compiler: str) -> CompileError:
    """A CompileError quoting the first source line the compiler blamed, plus its first diagnostics."""
    match = _ERROR_LINE.search(log)
    line = int(match.group(1)) if match else 0
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    where = f" at line {line}: `{text}`" if text else ""
    diagnostics = "\n".join(log.strip().splitlines()[:12])
    return CompileError(f"{compiler} rejected the program{where}\n{diagnostics}", line=line, source_line=text)


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


class NVRTC:
    """NVRTC through ctypes. Programs are created and destroyed per compile, so concurrent compiles are safe.

    NVRTC has no default include path, so the folder holding cuda_fp16.h is added to every compile; nvcc knows
    its own toolkit's headers and gets no such flag (another release's headers could disagree with it)."""

    def __init__(self, library: Path) -> None:
        # 13.0.88 looks for its builtins by soname without its own folder on the search path: preload them
        for builtins in sorted(library.parent.glob("libnvrtc-builtins.so*")):
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        self.lib: Any = ctypes.CDLL(str(library))
        self.library = library
        self.include = find_include_dir()
        p, size = ctypes.c_void_p, ctypes.c_size_t
        char_pp = ctypes.POINTER(ctypes.c_char_p)
        for name, argtypes in (("nvrtcVersion", [ctypes.POINTER(ctypes.c_int)] * 2),
                               ("nvrtcCreateProgram", [ctypes.POINTER(p), ctypes.c_char_p, ctypes.c_char_p,
                                                       ctypes.c_int, char_pp, char_pp]),
                               ("nvrtcCompileProgram", [p, ctypes.c_int, char_pp]),
                               ("nvrtcGetProgramLogSize", [p, ctypes.POINTER(size)]),
                               ("nvrtcGetProgramLog", [p, ctypes.c_char_p]),
                               ("nvrtcGetCUBINSize", [p, ctypes.POINTER(size)]),
                               ("nvrtcGetCUBIN", [p, ctypes.c_char_p]),
                               ("nvrtcDestroyProgram", [ctypes.POINTER(p)])):
            function = getattr(self.lib, name)
            function.restype, function.argtypes = ctypes.c_int, argtypes
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check("nvrtcVersion", self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        self.version = (major.value, minor.value)

    def _check(self, call: str, status: int) -> None:
        if status != NVRTC_SUCCESS:
            name = self.lib.nvrtcGetErrorString(status) or b"unknown NVRTC error"
            raise BackendError(f"{call}: {name.decode(errors='replace')} (status {status}; {self.library})")

    def describe(self) -> str:
        return f"nvrtc {self.version[0]}.{self.version[1]}"

    def compile(self, source: str, options: list[str]) -> bytes:
        if self.include is not None:
            options = [*options, f"-I{self.include}"]
        program = ctypes.c_void_p()
        self._check("nvrtcCreateProgram", self.lib.nvrtcCreateProgram(
            ctypes.byref(program), source.encode(), SOURCE_NAME.encode(), 0, None, None))
        try:
            encoded = [o.encode() for o in options]
            status = self.lib.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
            if status == NVRTC_ERROR_COMPILATION:
                raise compile_error(source, self._log(program), self.describe())
            self._check("nvrtcCompileProgram", status)
            size = ctypes.c_size_t()
            self._check("nvrtcGetCUBINSize", self.lib.nvrtcGetCUBINSize(program, ctypes.byref(size)))
            cubin = ctypes.create_string_buffer(size.value)
            self._check("nvrtcGetCUBIN", self.lib.nvrtcGetCUBIN(program, cubin))
            return cubin.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(program))

    def _log(self, program: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        self._check("nvrtcGetProgramLogSize", self.lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        self._check("nvrtcGetProgramLog", self.lib.nvrtcGetProgramLog(program, log))
        return log.value.decode(errors="replace")


# ---- nvcc --------------------------------------------------------------------------------------------------------
def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # the command is the nvcc found on PATH with fixed flags; no shell is involved
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S,  # noqa: S603
                          check=False)


class NVCC:
    """The CUDA toolkit's `nvcc -cubin`, one process per compile."""

    def __init__(self, nvcc: str) -> None:
        self.nvcc = nvcc
        try:
            lines = _run([nvcc, "--version"], Path.cwd()).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"{nvcc} --version does not run: {exc}") from exc
        # "Cuda compilation tools, release 13.0, V13.0.88": the last line is the build, the one before the release
        self.version = " ".join(lines[-2:]) if lines else "unknown version"

    def describe(self) -> str:
        return f"nvcc {self.nvcc} {self.version}"

    def compile(self, source: str, options: list[str]) -> bytes:
        with tempfiles.temp_dir(BUILD_PREFIX) as tmp:
            folder = Path(tmp)
            (folder / SOURCE_NAME).write_text(source)
            command = [self.nvcc, "-cubin", *options, "-o", "program.cubin", SOURCE_NAME]
            try:
                done = _run(command, folder)
            except subprocess.TimeoutExpired as exc:
                raise CompileError(f"nvcc took longer than {_TIMEOUT_S} s on the program") from exc
            if done.returncode != 0:
                raise compile_error(source, done.stderr + done.stdout, "nvcc")
            return (folder / "program.cubin").read_bytes()


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


_TOOLCHAINS: dict[str, Toolchain] = {}
_TOOLCHAIN_LOCK = threading.Lock()


def find_toolchain(kind: str | None = None) -> Toolchain:
    """NVRTC from the wheel when installed, else `nvcc` on PATH (`kind` "nvrtc" or "nvcc" asks for one); found once
    per process. Raises BackendError saying what to install when there is none."""
    if kind not in (None, "nvrtc", "nvcc"):
        raise BackendError(f"unknown CUDA compiler {kind!r}: use 'nvrtc' or 'nvcc'")
    with _TOOLCHAIN_LOCK:
        for candidate in ("nvrtc", "nvcc") if kind is None else (kind,):
            if candidate not in _TOOLCHAINS:
                found = _open_toolchain(candidate)
                if found is None:
                    continue
                _TOOLCHAINS[candidate] = found
            return _TOOLCHAINS[candidate]
    wanted = {"nvrtc": "NVRTC (pip install plygrad-nv[nvrtc], i.e. nvidia-cuda-nvrtc)",
              "nvcc": "nvcc on PATH (the CUDA toolkit)"}
    raise BackendError("no CUDA compiler: the NV backend needs " +
                       (wanted[kind] if kind else f"{wanted['nvrtc']} or {wanted['nvcc']}"))


def _open_toolchain(kind: str) -> Toolchain | None:
    if kind == "nvrtc":
        library = find_nvrtc_library()
        return NVRTC(library) if library else None
    nvcc = shutil.which("nvcc")
    return NVCC(nvcc) if nvcc else None


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
