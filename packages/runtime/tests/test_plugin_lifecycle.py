"""What the plugin API gives every backend without its author writing it: a teardown hook the registry calls
(`Backend.close`), and a `CompileError` whose text shows the offending source line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rt_fakes import PyBackend, fake_plugins

from plygrad.ir import dtypes
from plygrad.runtime import BackendDescriptor, Buffer, CompileError, Device
from plygrad.runtime.discovery import BACKENDS, installed

CLOSED: list[str] = []


class ClosingBackend(PyBackend):
    """A PY backend that records its teardown (and, named BAD..., fails it)."""

    def close(self) -> None:
        CLOSED.append(self.name)
        if self.name.startswith("BAD"):
            raise OSError("cannot remove /tmp/plygrad-bad: busy")


def open_closing(device: str) -> ClosingBackend:
    return ClosingBackend(device)


CLOSING = BackendDescriptor("CLOSING", priority=1, ir_major=1, ir_minor=0, factory=f"{__name__}:open_closing")
BAD = BackendDescriptor("BAD", priority=1, ir_major=1, ir_minor=0, factory=f"{__name__}:open_closing")


def test_reset_closes_every_opened_backend_once() -> None:
    CLOSED.clear()
    with fake_plugins(CLOSING=CLOSING):
        Device["CLOSING"], Device["CLOSING:1"]
        Device.reset()
        assert sorted(CLOSED) == ["CLOSING", "CLOSING:1"]
        Device.reset()
        assert len(CLOSED) == 2, "a backend is closed once, when the registry forgets it"


def test_a_buffer_outlives_its_closed_backend() -> None:
    with fake_plugins(CLOSING=CLOSING):
        buf = Buffer("CLOSING", 4, dtypes.int32)
        buf.copyin(bytes(range(16)))
        Device.reset()
        assert buf.copyout() == bytes(range(16))
        del buf  # freed through the closed backend's allocator, which keeps working


def test_a_close_that_raises_warns_and_the_others_still_close() -> None:
    CLOSED.clear()
    with fake_plugins(CLOSING=CLOSING), installed(BACKENDS, "BAD", BAD):
        Device["BAD"], Device["CLOSING"]
        with pytest.warns(RuntimeWarning, match=r"backend BAD: close\(\) raised OSError: cannot remove"):
            Device.reset()
        assert sorted(CLOSED) == ["BAD", "CLOSING"]


def test_the_default_close_does_nothing() -> None:
    with fake_plugins():
        Device["PY"].close()


def test_backends_are_closed_at_interpreter_exit(tmp_path: Path) -> None:
    marker = tmp_path / "closed"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from rt_fakes import PyBackend, fake_plugins
        from plygrad.runtime import BackendDescriptor, Device
        from plygrad.runtime.discovery import BACKENDS, installed

        class Marking(PyBackend):
            def close(self):
                open({str(marker)!r}, "a").write(self.name + "\\n")

        sys.modules["marking"] = sys.modules[__name__]
        open_marking = Marking
        stack = installed(BACKENDS, "MARK", BackendDescriptor("MARK", 1, 1, 0, "marking:open_marking"))
        stack.__enter__()
        Device["MARK"]
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert marker.read_text() == "MARK\n"


def test_compile_error_text_shows_the_offending_line() -> None:
    error = CompileError("FOO compiler rejected the program", line=3, source_line="  float x = y +;  ")
    assert str(error) == "FOO compiler rejected the program\n  at source line 3: float x = y +;"
    assert (error.line, error.source_line) == (3, "  float x = y +;  ")


def test_compile_error_text_does_not_repeat_a_line_the_backend_quoted() -> None:
    message = "cc rejected the program at line 3: `float x = y +;`"
    assert str(CompileError(message, line=3, source_line="float x = y +;")) == message


@pytest.mark.parametrize(("line", "source_line", "suffix"),
                         [(0, "", ""), (0, "ignored", ""), (7, "", "\n  at source line 7")])
def test_compile_error_without_a_source_line(line: int, source_line: str, suffix: str) -> None:
    assert str(CompileError("rejected", line=line, source_line=source_line)) == "rejected" + suffix
