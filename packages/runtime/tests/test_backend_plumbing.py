"""The plumbing GPU and compiler backends share (plygrad.runtime.compiling, .driver, .launching), checked on its own
with small stand-ins; each backend's tests check it again through its own driver and compiler names."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

from plygrad.runtime.compiling import ToolchainCache, compile_error, compile_in_folder, run_tool
from plygrad.runtime.driver import DriverError, DriverLibrary, check_ordinal, format_bytes
from plygrad.runtime.errors import BackendError, CompileError
from plygrad.runtime.launching import LaunchLimits, launch_dims

SOURCE = "int a;\nint b = oops;\nint c;\n"


@pytest.mark.parametrize(("log", "line", "quoted"), [
    ("program.c:2:9: error: use of undeclared identifier 'oops'", 2, "int b = oops;"),
    ("program.c:9:1: error: past the end", 9, ""),
    ("something went wrong", 0, ""),
])
def test_a_compile_error_quotes_the_line_the_compiler_blamed(log: str, line: int, quoted: str) -> None:
    error = compile_error(SOURCE, log, "cc")
    assert (error.line, error.source_line) == (line, quoted)
    assert str(error).startswith("cc rejected the program" + (f" at line {line}: `{quoted}`" if quoted else ""))
    assert log in str(error), "the compiler's own diagnostics follow"


def test_a_compile_error_takes_the_compilers_own_line_format() -> None:
    error = compile_error(SOURCE, "program.cu(2): error: identifier \"oops\" is undefined", "nvrtc",
                          re.compile(r"\((\d+)\): error"))
    assert error.line == 2 and error.source_line == "int b = oops;"


def test_compile_in_folder_runs_each_step_and_reads_the_output() -> None:
    copy = [sys.executable, "-c", "import shutil; shutil.copy('in.txt', 'out.txt')"]
    assert compile_in_folder("hello", steps=[copy], source_name="in.txt", output_name="out.txt",
                             build_prefix="plygrad-test-", compiler="copy") == b"hello"
    fail = [sys.executable, "-c", "import sys; sys.exit('in.txt:1:1: error: no')"]
    with pytest.raises(CompileError, match=r"^copy rejected the program at line 1: `hello`"):
        compile_in_folder("hello", steps=[fail], source_name="in.txt", output_name="out.txt",
                          build_prefix="plygrad-test-", compiler="copy")


def test_run_tool_captures_text_and_never_raises_for_an_exit_status() -> None:
    done = run_tool([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert (done.returncode, done.stdout) == (3, "out\n")


def test_a_toolchain_cache_opens_each_kind_once_and_says_what_to_install() -> None:
    opened: list[str] = []

    def open_kind(kind: str) -> str | None:
        opened.append(kind)
        return None if kind == "first" else f"{kind} toolchain"

    cache = ToolchainCache({"first": "the first (pip install first)", "second": "the second"}, open_kind,
                           what="FOO compiler", backend="FOO")
    assert cache.find() == cache.find("second") == "second toolchain"
    assert opened == ["first", "second"], "a found kind is kept"
    assert cache.installed() == ["second"]
    assert opened == ["first", "second", "first"], "a missing kind is asked again"
    with pytest.raises(BackendError, match=r"^no FOO compiler: the FOO backend needs the first \(pip install"):
        cache.find("first")
    with pytest.raises(BackendError, match=r"^unknown FOO compiler 'third': use 'first' or 'second'$"):
        cache.find("third")


class FooError(DriverError):
    pass


class FooOutOfMemoryError(FooError, MemoryError):
    pass


class Foo(DriverLibrary):
    OUT_OF_MEMORY = 2
    error_type = FooError
    out_of_memory_type = FooOutOfMemoryError
    unnamed = "FOO error"

    def status_texts(self, status: int) -> tuple[str, str]:
        return {1: ("FOO_INVALID", ""), 2: ("FOO_OUT_OF_MEMORY", "out of memory")}.get(status, ("", ""))

    def mem_info(self) -> tuple[int, int]:
        return 1 << 30, 8 << 30


def test_a_failing_call_names_the_call_the_error_and_the_detail() -> None:
    with pytest.raises(FooError, match=r"^fooLoad: FOO_INVALID, a 7 bytes image$") as caught:
        Foo(None).check("fooLoad", 1, "a 7 bytes image")
    assert (caught.value.call, caught.value.status, caught.value.name) == ("fooLoad", 1, "FOO_INVALID")
    assert not isinstance(caught.value, MemoryError) and isinstance(caught.value, BackendError)
    assert str(Foo(None).error("fooSync", 999)) == "fooSync: FOO error 999", "an unnamed status says its number"
    Foo(None).check("fooSync", 0)


def test_an_allocation_that_runs_out_of_memory_says_what_is_free() -> None:
    error = Foo(None).allocation_error("fooAlloc", 2, 3 << 30)
    assert isinstance(error, FooOutOfMemoryError) and isinstance(error, MemoryError)
    assert str(error) == "fooAlloc: FOO_OUT_OF_MEMORY, asked 3 GiB, 1 GiB free of 8 GiB (out of memory)"


def test_out_parameters_are_read_through_a_pointer() -> None:
    class Library:
        def fooGetCount(self, out: Any, extra: int) -> int:
            out[0] = 3 + extra
            return 0

    assert Foo(Library())._int("fooGetCount", 1) == 4


def test_a_timed_launch_runs_between_two_events_and_destroys_them() -> None:
    calls: list[str] = []

    class Timed(Foo):
        def event_create(self) -> int:
            calls.append("create")
            return len(calls)

        def event_record(self, event: int) -> None:
            calls.append(f"record {event}")

        def event_seconds(self, start: int, end: int) -> float:
            return 0.25

        def event_destroy(self, event: int) -> None:
            calls.append(f"destroy {event}")

    assert Timed(None).timed(lambda: calls.append("launch")) == 0.25
    assert calls == ["create", "create", "record 1", "launch", "record 2", "destroy 1", "destroy 2"]


def test_a_device_beyond_the_gpus_names_those_there_are() -> None:
    check_ordinal("FOO:1", 1, 2, "FOO", "FOO GPU")
    with pytest.raises(BackendError, match=r"^device FOO:3: this machine has 2 FOO GPU\(s\), use FOO, FOO:1 \.\.\."):
        check_ordinal("FOO:3", 3, 2, "FOO", "FOO GPU")
    with pytest.raises(BackendError, match=r"has 1 FOO GPU\(s\), use FOO$"):
        check_ordinal("FOO:1", 1, 1, "FOO", "FOO GPU")


@pytest.mark.parametrize(("nbytes", "text"), [(0, "0 bytes"), (1023, "1023 bytes"), (1536, "1.5 KiB"),
                                              (80 << 30, "80 GiB"), (5 << 20, "5 MiB")])
def test_format_bytes(nbytes: int, text: str) -> None:
    assert format_bytes(nbytes) == text


def test_launch_dims_are_the_global_and_local_sizes_within_the_limits() -> None:
    assert launch_dims((4, 2, 1), None, LaunchLimits(), program="k") == ((4, 2, 1), (1, 1, 1))
    with pytest.raises(BackendError, match=r"^FOO program 'k' cannot launch .*2048 threads per block"):
        launch_dims((1, 1, 1), (2048, 1, 1), LaunchLimits(), program="FOO program 'k'")
    with pytest.raises(BackendError, match=r"grid x block \(8589934592, 1, 1\) work-items"):
        launch_dims((2**23, 1, 1), (1024, 1, 1), LaunchLimits(), program="k", work_items_in_32_bits=True)
    assert launch_dims((2**23, 1, 1), (1024, 1, 1), LaunchLimits(), program="k") == ((2**23, 1, 1), (1024, 1, 1))

