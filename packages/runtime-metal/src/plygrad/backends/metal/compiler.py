"""Compiling Metal Shading Language: the Metal framework at load time, or `xcrun metal` to a metallib.

A Metal library is made either from source by the framework in process (`newLibraryWithSource:options:error:`),
or from a metallib file that Xcode's offline compiler wrote (`xcrun -sdk macosx metal` then `metallib`). So
`MetalCompiler.compile` returns one of two kinds of bytes, told apart by `MetalBackend.load`:

- **source** (always available, and the only kind on a Mac without Xcode's Metal toolchain): the MSL text itself,
  UTF-8. Where the compiler has a device (`validate`), it compiles the source right away, so a bad program raises
  `CompileError` from `compile` as the plugin API asks, and keeps the library for `load` (no second compile). The
  program cache then holds source, and every new process compiles again: fine for kernels, which compile fast.
- **metallib** (`xcrun` finds `metal`): starts with the magic `MTLB`; the cache keeps real binaries.

Either way the arithmetic follows docs/ir.md: the source asks for `#pragma METAL fp math_mode(safe)` and
`contract(off)` and calls `metal::precise::` functions; the framework compiles with `mathMode` safe (fast math
off before macOS 15), `xcrun metal` with `-fno-fast-math`. The cache key names the kind, the toolchain's version
and the flags.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Final

from plygrad.runtime import tempfiles
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.plugin import Compiler

METALLIB_MAGIC: Final = b"MTLB"
XCRUN_FLAGS: Final = ("-fno-fast-math",)
SOURCE_NAME: Final = "program.metal"
BUILD_PREFIX: Final = "plygrad-metal-"
# compiled libraries `validate` made, waiting for `load` (a program compiled but never loaded is dropped at 64)
KEPT_LIBRARIES: Final = 64
_TIMEOUT_S: Final = 300
_ERROR_LINE: Final = re.compile(r":(\d+):\d+: (?:fatal )?error")


def xcrun_compile_error(source: str, log: str) -> CompileError:
    """A CompileError quoting the first source line `xcrun metal` blamed, plus its first diagnostics."""
    match = _ERROR_LINE.search(log)
    line = int(match.group(1)) if match else 0
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    where = f" at line {line}: `{text}`" if text else ""
    diagnostics = "\n".join(log.strip().splitlines()[:12])
    return CompileError(f"xcrun metal rejected the program{where}\n{diagnostics}", line=line, source_line=text)


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # xcrun found on PATH with fixed arguments; no shell is involved
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_S,  # noqa: S603
                          check=False)


class Xcrun:
    """Xcode's offline Metal compiler (`xcrun -sdk macosx metal`, then `metallib`)."""

    def __init__(self, xcrun: str) -> None:
        self.xcrun = xcrun
        try:
            done = _run([xcrun, "-sdk", "macosx", "metal", "--version"])
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"{xcrun} -sdk macosx metal --version does not run: {exc}") from exc
        if done.returncode != 0:
            raise BackendError(f"xcrun has no Metal compiler: {done.stderr.strip()}")
        self.version = done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown version"

    def describe(self) -> str:
        return f"xcrun metal {self.version}"

    def compile(self, source: str) -> bytes:
        with tempfiles.temp_dir(BUILD_PREFIX) as tmp:
            folder = Path(tmp)
            (folder / SOURCE_NAME).write_text(source, encoding="utf-8")
            steps = ([self.xcrun, "-sdk", "macosx", "metal", *XCRUN_FLAGS, "-c", SOURCE_NAME, "-o", "program.air"],
                     [self.xcrun, "-sdk", "macosx", "metallib", "program.air", "-o", "program.metallib"])
            for command in steps:
                try:
                    done = _run(command, folder)
                except subprocess.TimeoutExpired as exc:
                    raise CompileError(f"{' '.join(command[:4])} took longer than {_TIMEOUT_S} s") from exc
                if done.returncode != 0:
                    raise xcrun_compile_error(source, done.stderr + done.stdout)
            return (folder / "program.metallib").read_bytes()


def find_xcrun() -> Xcrun | None:
    """Xcode's Metal compiler where `xcrun` has one, else None (the Command Line Tools alone have no `metal`)."""
    xcrun = shutil.which("xcrun")
    if xcrun is None:
        return None
    try:
        return Xcrun(xcrun)
    except BackendError:
        return None


class MetalCompiler(Compiler):
    """MSL -> the bytes `MetalBackend.load` takes: a metallib when `xcrun` is given, else the source (module
    docstring). `validate(source) -> library` compiles source with the device, so errors surface here."""

    def __init__(self, xcrun: Xcrun | None = None, validate: Callable[[str], int] | None = None,
                 release: Callable[[int], None] | None = None) -> None:
        self.xcrun = xcrun
        self.validate = validate
        self.release = release
        self._kept: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def cache_key(self) -> str:
        if self.xcrun is not None:
            return f"metal-metallib {self.xcrun.describe()} | {' '.join(XCRUN_FLAGS)}"
        return "metal-source msl | newLibraryWithSource, mathMode safe + precise functions (fastMathEnabled off)"

    def compile(self, source: str) -> bytes:
        if self.xcrun is not None:
            return self.xcrun.compile(source)
        binary = source.encode("utf-8")
        if self.validate is not None:
            library = self.validate(source)  # CompileError for a bad program
            with self._lock:
                self._kept[binary] = library
                while len(self._kept) > KEPT_LIBRARIES:
                    _, dropped = self._kept.popitem(last=False)
                    if self.release is not None:
                        self.release(dropped)
        return binary

    def take_library(self, binary: bytes) -> int | None:
        """The library `compile` already made from these source bytes, if it kept one (the caller owns it now)."""
        with self._lock:
            return self._kept.pop(binary, None)

    def close(self) -> None:
        """Release the libraries compiled and never loaded."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), OrderedDict()
        if self.release is not None:
            for library in kept:
                self.release(library)


def is_metallib(binary: bytes) -> bool:
    return binary.startswith(METALLIB_MAGIC)
