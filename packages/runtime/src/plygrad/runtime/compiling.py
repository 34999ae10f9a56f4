"""What a backend's `Compiler` needs around its toolchain: the shared plumbing of plygrad's compilers.

`compile_error` turns a compiler's log into a `CompileError` quoting the blamed source line; `run_tool` runs a
toolchain command (no shell, a timeout); `compile_in_folder` writes the source to a temp folder, runs the commands
and reads the output file; `RuntimeCompilerLibrary` wraps an NVRTC-style runtime compiler (NVRTC, hiprtc) through
ctypes; `ToolchainCache` finds each kind of toolchain once per process. docs/backends.md ("The shared plumbing")
says which backend uses what.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from plygrad.runtime import tempfiles
from plygrad.runtime.errors import BackendError, CompileError

TIMEOUT_S: Final = 300
# how many lines of a compiler's log a CompileError quotes
DIAGNOSTIC_LINES: Final = 12
# clang, gcc, hiprtc and Metal report `<file>:<line>:<column>: error: ...` (`fatal error` for a missing header)
CLANG_ERROR_LINE: Final = re.compile(r":(\d+):\d+: (?:fatal )?error", re.MULTILINE)

T = TypeVar("T")


def compile_error(source: str, log: str, compiler: str, error_line: re.Pattern[str] = CLANG_ERROR_LINE
                  ) -> CompileError:
    """A CompileError quoting the first source line the compiler blamed (`error_line`'s first group is the line
    number), plus the first diagnostics of `log`; `compiler` names who rejected the program."""
    match = error_line.search(log)
    line = int(match.group(1)) if match else 0
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    where = f" at line {line}: `{text}`" if text else ""
    diagnostics = "\n".join(log.strip().splitlines()[:DIAGNOSTIC_LINES])
    return CompileError(f"{compiler} rejected the program{where}\n{diagnostics}", line=line, source_line=text)


def run_tool(command: Sequence[str], cwd: Path | None = None, stdin: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    """Run a toolchain command and capture its text output (never raises for a nonzero exit; raises
    subprocess.TimeoutExpired after TIMEOUT_S, OSError when it cannot start)."""
    # the command is a compiler the backend found (on PATH, or named by the user) with fixed flags; no shell
    return subprocess.run(list(command), cwd=cwd, input=stdin, capture_output=True, text=True,  # noqa: S603
                          timeout=TIMEOUT_S, check=False)


def tool_version(command: Sequence[str]) -> list[str]:
    """The lines `command` (e.g. `[clang, "--version"]`) prints; BackendError when it does not run."""
    try:
        return run_tool(command, Path.cwd()).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendError(f"{' '.join(command)} does not run: {exc}") from exc


def compile_in_folder(source: str, *, steps: Sequence[Sequence[str]], source_name: str, output_name: str,
                      build_prefix: str, compiler: str, error_line: re.Pattern[str] = CLANG_ERROR_LINE,
                      stdout_too: bool = True) -> bytes:
    """Write `source` as `source_name` into a fresh temp folder (named `build_prefix`..., see tempfiles), run each
    command of `steps` there and return the bytes of `output_name`. A step that fails raises `compile_error`
    (its stderr, then its stdout unless `stdout_too` is False); one that runs past TIMEOUT_S a CompileError."""
    with tempfiles.temp_dir(build_prefix) as tmp:
        folder = Path(tmp)
        (folder / source_name).write_text(source, encoding="utf-8")
        for command in steps:
            try:
                done = run_tool(command, folder)
            except subprocess.TimeoutExpired as exc:
                raise CompileError(f"{compiler} took longer than {TIMEOUT_S} s on the program") from exc
            if done.returncode != 0:
                log = done.stderr + done.stdout if stdout_too else done.stderr
                raise compile_error(source, log, compiler, error_line)
        return (folder / output_name).read_bytes()


class RuntimeCompilerLibrary:
    """An NVRTC-style runtime compiler library through ctypes: NVRTC (`prefix` "nvrtc", `code` "CUBIN") and hiprtc
    ("hiprtc", "Code") have the same calls under their own prefix. Programs are created and destroyed per compile,
    so concurrent compiles are safe. `compile_error_status` is the status of a program that does not compile;
    `error_line` finds the line its log blames."""

    def __init__(self, lib: Any, library: str, *, prefix: str, code: str, compile_error_status: int,
                 source_name: str, error_line: re.Pattern[str] = CLANG_ERROR_LINE) -> None:
        self.lib, self.library, self.prefix, self.code = lib, library, prefix, code
        self.compile_error_status, self.source_name, self.error_line = compile_error_status, source_name, error_line
        p, size = ctypes.c_void_p, ctypes.c_size_t
        char_pp = ctypes.POINTER(ctypes.c_char_p)
        for name, argtypes in (("Version", [ctypes.POINTER(ctypes.c_int)] * 2),
                               ("CreateProgram", [ctypes.POINTER(p), ctypes.c_char_p, ctypes.c_char_p,
                                                  ctypes.c_int, char_pp, char_pp]),
                               ("CompileProgram", [p, ctypes.c_int, char_pp]),
                               ("GetProgramLogSize", [p, ctypes.POINTER(size)]),
                               ("GetProgramLog", [p, ctypes.c_char_p]),
                               (f"Get{code}Size", [p, ctypes.POINTER(size)]),
                               (f"Get{code}", [p, ctypes.c_char_p]),
                               ("DestroyProgram", [ctypes.POINTER(p)])):
            function = self._function(name)
            function.restype, function.argtypes = ctypes.c_int, argtypes
        error_string = self._function("GetErrorString")
        error_string.restype, error_string.argtypes = ctypes.c_char_p, [ctypes.c_int]
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check("Version", self._function("Version")(ctypes.byref(major), ctypes.byref(minor)))
        self.version = (major.value, minor.value)

    def _function(self, name: str) -> Any:
        return getattr(self.lib, self.prefix + name)

    def _check(self, call: str, status: int) -> None:
        if status != 0:
            name = self._function("GetErrorString")(status) or f"unknown {self.prefix} error".encode()
            raise BackendError(f"{self.prefix}{call}: {name.decode(errors='replace')} (status {status}; "
                               f"{self.library})")

    def describe(self) -> str:
        return f"{self.prefix} {self.version[0]}.{self.version[1]}"

    def compile_program(self, source: str, options: Sequence[str]) -> bytes:
        """The code the library makes of `source` with `options`; `compile_error` when it rejects the program."""
        program = ctypes.c_void_p()
        self._check("CreateProgram", self._function("CreateProgram")(
            ctypes.byref(program), source.encode(), self.source_name.encode(), 0, None, None))
        try:
            encoded = [o.encode() for o in options]
            status = self._function("CompileProgram")(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
            if status == self.compile_error_status:
                raise compile_error(source, self._log(program), self.describe(), self.error_line)
            self._check("CompileProgram", status)
            size = ctypes.c_size_t()
            self._check(f"Get{self.code}Size", self._function(f"Get{self.code}Size")(program, ctypes.byref(size)))
            code = ctypes.create_string_buffer(size.value)
            self._check(f"Get{self.code}", self._function(f"Get{self.code}")(program, code))
            return code.raw
        finally:
            self._function("DestroyProgram")(ctypes.byref(program))

    def _log(self, program: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        self._check("GetProgramLogSize", self._function("GetProgramLogSize")(program, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        self._check("GetProgramLog", self._function("GetProgramLog")(program, log))
        return log.value.decode(errors="replace")


class ToolchainCache(Generic[T]):
    """The toolchains of one backend, each kind found once per process. `wanted` maps each kind, in the order they
    are tried, to what to install for it; `open_kind(kind)` opens one (None: not installed). `what` and `backend`
    name them in errors ("CUDA compiler", "NV")."""

    def __init__(self, wanted: Mapping[str, str], open_kind: Callable[[str], T | None], *, what: str,
                 backend: str) -> None:
        self.wanted, self.what, self.backend = dict(wanted), what, backend
        self._open = open_kind
        self._found: dict[str, T] = {}
        self._lock = threading.Lock()

    def find(self, kind: str | None = None) -> T:
        """`kind`'s toolchain, or for None the first kind installed; BackendError saying what to install when there
        is none."""
        if kind is not None and kind not in self.wanted:
            raise BackendError(f"unknown {self.what} {kind!r}: use " + " or ".join(map(repr, self.wanted)))
        with self._lock:
            for candidate in self.wanted if kind is None else (kind,):
                if candidate not in self._found:
                    found = self._open(candidate)
                    if found is None:
                        continue
                    self._found[candidate] = found
                return self._found[candidate]
        needs = self.wanted[kind] if kind is not None else " or ".join(self.wanted.values())
        raise BackendError(f"no {self.what}: the {self.backend} backend needs {needs}")

    def installed(self) -> list[str]:
        """The kinds that `find` finds here, in the order they are tried."""
        found = []
        for kind in self.wanted:
            try:
                self.find(kind)
            except BackendError:
                continue
            found.append(kind)
        return found
