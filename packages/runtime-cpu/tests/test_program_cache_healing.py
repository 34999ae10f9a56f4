"""The program cache with real shared libraries: an intact entry that is not a loadable library is recompiled, odd
files in the cache folder never block a run, and what a killed process left in the temp folder is removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from cpu_programs import hand_lowering

from plygrad.backends.cpu.backend import LIBRARY_PREFIX, sweep_temp_files
from plygrad.backends.cpu.compiler import BUILD_PREFIX
from plygrad.ir import BufferRef, Ops, Stage, UOp, dtypes, serialize
from plygrad.runtime import PROGRAMS, Buffer, config, run_linear
from plygrad.runtime.cache import pack_entry
from plygrad.runtime.discovery import CODEGEN, installed
from plygrad.runtime.tempfiles import DEAD_GRACE_S
from plygrad.runtime.testing import add_kernel

N = 6


@pytest.fixture(autouse=True)
def _lowering() -> Iterator[None]:
    with installed(CODEGEN, "default", hand_lowering):
        yield


def _add() -> list[float]:
    """a + a on the CPU through run_linear (lowered, compiled through the program cache, loaded)."""
    a = Buffer("CPU", N, dtypes.float32).copyin(np.arange(N, dtype=np.float32).tobytes())
    ref = UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(a.id, "CPU", N))
    out = UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(-1, "CPU", N))
    call = UOp(Ops.CALL, dtypes.void, (add_kernel(N), out, ref, ref))
    result = run_linear(serialize(UOp(Ops.LINEAR, dtypes.void, (call,), (-1,)), Stage.SCHEDULE))
    return [float(v) for v in np.frombuffer(result[-1].copyout(), np.float32)]


def _as_a_new_process(action: Callable[[], list[float]]) -> list[float]:
    """Run `action` with nothing compiled or loaded in memory, as a later process would (the disk cache stays)."""
    PROGRAMS.clear_memory()
    with installed(CODEGEN, "default", hand_lowering):  # a plugin change forgets loaded programs and plans
        return action()


def _within(seconds: float, action: Callable[[], list[float]]) -> list[float]:
    result: list[list[float]] = []
    worker = threading.Thread(target=lambda: result.append(action()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the run was still blocked after {seconds} s"
    assert result, "the run raised (see the thread's traceback above)"
    return result[0]


EXPECTED = [2.0 * i for i in range(N)]


def _counts(since: tuple[int, int, int] = (0, 0, 0)) -> tuple[int, int, int]:
    """(disk hits, discarded entries, compiles) of the process-wide cache, minus `since`."""
    s = PROGRAMS.stats
    now = (s.disk_hits, s.discarded, s.compiles)
    return (now[0] - since[0], now[1] - since[1], now[2] - since[2])


def test_entry_that_is_not_a_library_is_recompiled() -> None:
    assert _add() == EXPECTED
    (entry,) = (config.cache_dir() / "programs").rglob("*.bin")
    entry.write_bytes(pack_entry(b"\x7fELF but not really a shared library"))  # intact, digest and all
    before = _counts()
    assert _as_a_new_process(_add) == EXPECTED
    assert _counts(before) == (1, 1, 1)
    before = _counts()
    assert _as_a_new_process(_add) == EXPECTED
    assert _counts(before) == (1, 0, 0), "the healed library was written back"


@pytest.mark.parametrize("hazard", ["fifo", "/dev/zero", "/dev/urandom"])
def test_fifo_or_device_link_in_place_of_an_entry_does_not_block(hazard: str) -> None:
    if hazard.startswith("/dev/") and not Path(hazard).exists():
        pytest.skip(f"{hazard} does not exist here")
    if hazard == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    assert _add() == EXPECTED
    (entry,) = (config.cache_dir() / "programs").rglob("*.bin")
    entry.unlink()
    if hazard == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to(hazard)
    assert _within(120, lambda: _as_a_new_process(_add)) == EXPECTED
    assert entry.is_file() and not entry.is_symlink(), "replaced by a real entry"


def test_cache_folder_that_cannot_be_created_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("PLYGRAD_CACHE_DIR", str(blocker / "cache"))
    assert _add() == EXPECTED
    assert _as_a_new_process(_add) == EXPECTED


LEAVE_TEMP_FILES = textwrap.dedent("""
    import sys, time
    from plygrad.runtime import tempfiles
    build = tempfiles.temp_dir(sys.argv[1])
    fd, library = tempfiles.temp_file(sys.argv[2], suffix=".so")
    print(build.name, library, flush=True)
    time.sleep(600)
""")


def test_temp_files_of_a_killed_process_are_removed_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    with subprocess.Popen([sys.executable, "-c", LEAVE_TEMP_FILES, BUILD_PREFIX, LIBRARY_PREFIX], env=env,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        build, library = child.stdout.readline().split()
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    left = [Path(build), Path(library)]
    assert all(p.exists() for p in left), "a killed process cannot clean up"
    mine = temp / f"{BUILD_PREFIX}{os.getpid()}-inuse"
    mine.mkdir()  # this process's own build folder, as old: in use, kept
    young = temp / f"{LIBRARY_PREFIX}{child.pid}-young.so"
    young.write_bytes(b"")  # the dead process's, but too recent to tell from another machine's
    old = time.time() - DEAD_GRACE_S - 60
    for path in (*left, mine):
        os.utime(path, (old, old))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert sweep_temp_files.__wrapped__() == 2
    assert not any(p.exists() for p in left)
    assert mine.exists() and young.exists()
