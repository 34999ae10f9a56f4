"""Compiling Metal Shading Language: the Metal framework at load time, or `xcrun metal` to a metallib.

`MetalCompiler.compile` returns one of two kinds of bytes, told apart by `MetalBackend.load`: the MSL **source**
(UTF-8; where the compiler has a device, `validate` compiles it right away so a bad program raises `CompileError`
here, and the library is kept for `load`), or a **metallib** from `xcrun` (magic `MTLB`). Either way the arithmetic
follows docs/ir.md; the cache key names the kind, the toolchain's version and the flags. More in docs/backends.md,
"Metal: the Apple backend"; the subprocess compile and compile errors are plygrad.runtime.compiling's.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from plygrad.runtime.compiling import compile_in_folder, run_tool
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Compiler

METALLIB_MAGIC: Final = b"MTLB"
XCRUN_FLAGS: Final = ("-fno-fast-math",)
SOURCE_NAME: Final = "program.metal"
BUILD_PREFIX: Final = "plygrad-metal-"
# compiled libraries `validate` made, waiting for `load` (a program compiled but never loaded is dropped at 64)
KEPT_LIBRARIES: Final = 64


class Xcrun:
    """Xcode's offline Metal compiler (`xcrun -sdk macosx metal`, then `metallib`)."""

    def __init__(self, xcrun: str) -> None:
        self.xcrun = xcrun
        try:
            done = run_tool([xcrun, "-sdk", "macosx", "metal", "--version"])
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"{xcrun} -sdk macosx metal --version does not run: {exc}") from exc
        if done.returncode != 0:
            raise BackendError(f"xcrun has no Metal compiler: {done.stderr.strip()}")
        self.version = done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown version"

    def describe(self) -> str:
        return f"xcrun metal {self.version}"

    def compile(self, source: str) -> bytes:
        steps = ([self.xcrun, "-sdk", "macosx", "metal", *XCRUN_FLAGS, "-c", SOURCE_NAME, "-o", "program.air"],
                 [self.xcrun, "-sdk", "macosx", "metallib", "program.air", "-o", "program.metallib"])
        return compile_in_folder(source, steps=steps, source_name=SOURCE_NAME, output_name="program.metallib",
                                 build_prefix=BUILD_PREFIX, compiler="xcrun metal")


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
