"""MetalCompiler: source bytes by default (the framework compiles them at load; errors surface in `compile` where a
device validates), a metallib where `xcrun metal` exists (run here through a stand-in `xcrun` script), and a cache
key that tells the two apart."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from plygrad.backends.metal.compiler import KEPT_LIBRARIES, MetalCompiler, Xcrun, find_xcrun, is_metallib
from plygrad.runtime.errors import CompileError

SOURCE = "#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* data0 [[buffer(0)]]) {}\n"

# a stand-in for `xcrun -sdk macosx metal|metallib`: the "air" is the source, the metallib MTLB + the air; a source
# line holding `#error` fails as the Metal compiler reports errors (file:line:column: error: ...)
FAKE_XCRUN = r"""#!/bin/sh
[ "$1" = "-sdk" ] || exit 9
tool="$3"; shift 3
if [ "$tool" = metal ] && [ "$1" = --version ]; then echo "Apple metal version 32023.35 (metalfe-32023.35)"; exit 0; fi
if [ "$tool" = metal ]; then
  [ "$1" = -fno-fast-math ] || { echo "expected -fno-fast-math first" >&2; exit 8; }
  line=$(grep -n '#error' "$3" | head -n 1 | cut -d: -f1)
  if [ -n "$line" ]; then echo "$3:$line:2: error: broken on purpose" >&2; exit 1; fi
  cp "$3" "$5"; exit 0
fi
if [ "$tool" = metallib ]; then { printf 'MTLB'; cat "$1"; } > "$3"; exit 0; fi
exit 7
"""


@pytest.fixture
def xcrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Xcrun:
    script = tmp_path / "bin" / "xcrun"
    script.parent.mkdir()
    script.write_text(FAKE_XCRUN)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    found = find_xcrun()
    assert found is not None
    return found


def test_source_mode_returns_the_source_and_says_so_in_its_key() -> None:
    compiler = MetalCompiler()
    assert compiler.compile(SOURCE) == SOURCE.encode() and not is_metallib(compiler.compile(SOURCE))
    assert "source" in compiler.cache_key and "safe" in compiler.cache_key


def test_a_device_validates_in_compile_and_load_takes_its_library() -> None:
    made: list[str] = []

    def validate(source: str) -> int:
        if "#error" in source:
            raise CompileError("Metal rejected the program at line 2", line=2, source_line="#error")
        made.append(source)
        return 1000 + len(made)

    compiler = MetalCompiler(validate=validate)
    binary = compiler.compile(SOURCE)
    assert made == [SOURCE] and compiler.take_library(binary) == 1001
    assert compiler.take_library(binary) is None  # handed over once; a second load compiles again
    with pytest.raises(CompileError, match="line 2"):
        compiler.compile("kernel void k() {\n#error\n}")


def test_libraries_never_loaded_are_released() -> None:
    released: list[int] = []
    counter = iter(range(1, 10_000))
    compiler = MetalCompiler(validate=lambda source: next(counter), release=released.append)
    for i in range(KEPT_LIBRARIES + 3):
        compiler.compile(f"{SOURCE}// {i}\n")
    assert released == [1, 2, 3]  # the oldest, beyond the bound
    compiler.close()
    assert sorted(released) == list(range(1, KEPT_LIBRARIES + 4))


def test_xcrun_makes_a_metallib_with_its_own_cache_key(xcrun: Xcrun) -> None:
    compiler = MetalCompiler(xcrun)
    binary = compiler.compile(SOURCE)
    assert is_metallib(binary) and binary[4:] == SOURCE.encode()
    assert "metallib" in compiler.cache_key and "32023.35" in compiler.cache_key
    assert "-fno-fast-math" in compiler.cache_key and compiler.cache_key != MetalCompiler().cache_key


def test_xcrun_errors_quote_the_line(xcrun: Xcrun) -> None:
    broken = SOURCE.replace("using namespace metal;", "#error here")
    with pytest.raises(CompileError, match=r"line 2: `#error here`") as failure:
        MetalCompiler(xcrun).compile(broken)
    assert failure.value.line == 2


def test_no_xcrun_means_source_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert find_xcrun() is None
