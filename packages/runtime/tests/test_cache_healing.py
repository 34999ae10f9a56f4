"""The program cache heals itself: entries that do not load are recompiled, and whatever else sits in the cache
folder (FIFOs, links to devices, huge files, temp files of killed writers, folders it cannot write) never hangs,
never costs memory and never stops the run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
from rt_fakes import InterpretedProgram, PyBackend, TextCompiler, fake_plugins

from plygrad.ir import Stage, Target, to_text
from plygrad.runtime import PROGRAMS, BackendError, Compiler, Program, ProgramCache, config, prepare_kernel
from plygrad.runtime.cache import MAX_ENTRY_BYTES, pack_entry, program_key
from plygrad.runtime.device import Device
from plygrad.runtime.tempfiles import DEAD_GRACE_S
from plygrad.runtime.testing import add_kernel, scale_kernel

SOURCE = to_text(add_kernel(4), Stage.KERNEL)
TARGET = Target(device="PY", renderer="ir-text").to_bytes()
T = TypeVar("T")


def _entry(source: str = SOURCE) -> Path:
    return ProgramCache.entry_path(program_key(source, TARGET, TextCompiler().cache_key))


def _py_load() -> Callable[[bytes], Program]:
    """The fake backend's loader: it parses the binary, so bytes that are not a kernel's text fail to load."""
    return partial(PyBackend("PY").load, "add")


def _within(seconds: float, action: Callable[[], T]) -> T:
    """`action()` on a daemon thread, failing the test (instead of hanging the suite) if it blocks."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(action())
        except BaseException as e:  # handed back to the test thread
            errors.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds} s"
    if errors:
        raise errors[0]
    return result[0]


def _dead_pid() -> int:
    """The id of a process that has exited (and was reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=60)
    return int(done.stdout)


# ---- entries that are intact but do not load ------------------------------------------------------------------------
def test_entry_that_does_not_load_is_discarded_and_recompiled() -> None:
    compiler = TextCompiler()
    ProgramCache().compile(compiler, TARGET, SOURCE)
    _entry().write_bytes(pack_entry(b"\xff\xfe not the text form of a kernel"))  # the digest is right
    cache = ProgramCache()
    program = cache.load(compiler, TARGET, SOURCE, "add", _py_load())
    assert isinstance(program, InterpretedProgram)
    s = cache.stats
    assert (s.disk_hits, s.discarded, s.compiles, compiler.compiled) == (1, 1, 1, 2)
    later = ProgramCache()  # the healed entry was written back
    later.load(compiler, TARGET, SOURCE, "add", _py_load())
    assert (later.stats.disk_hits, later.stats.compiles, later.stats.discarded) == (1, 0, 0)


def test_a_memory_hit_of_a_disk_binary_is_healed_too() -> None:
    compiler = TextCompiler()
    ProgramCache().compile(compiler, TARGET, SOURCE)
    _entry().write_bytes(pack_entry(b"garbage"))
    cache = ProgramCache()
    cache.compile(compiler, TARGET, SOURCE)  # the bad binary is now in memory as well
    cache.load(compiler, TARGET, SOURCE, "add", _py_load())
    assert (cache.stats.memory_hits, cache.stats.discarded, cache.stats.compiles) == (1, 1, 1)


def test_fresh_binary_that_does_not_load_is_a_clear_error() -> None:
    compiler = TextCompiler()
    ProgramCache().compile(compiler, TARGET, SOURCE)

    def refuse(binary: bytes) -> object:
        raise OSError("wrong ELF class")

    with pytest.raises(BackendError, match=r"cannot load program 'add'.*wrong ELF class.*fresh binary did not load"):
        ProgramCache().load(compiler, TARGET, SOURCE, "add", refuse)
    assert compiler.compiled == 2, "recompiled exactly once"


def test_binary_compiled_in_this_process_is_not_recompiled_when_it_fails_to_load() -> None:
    compiler, cache = TextCompiler(), ProgramCache()

    def refuse(binary: bytes) -> object:
        raise OSError("wrong ELF class")

    with pytest.raises(OSError, match="wrong ELF class"):
        cache.load(compiler, TARGET, SOURCE, "add", refuse)
    assert (compiler.compiled, cache.stats.discarded) == (1, 0)


def test_prepare_kernel_heals_a_bad_entry(fakes: None) -> None:
    """The whole path: lowering, the cache and the backend's loader (as a later process meets the entry)."""
    backend = Device["PY"]
    prepare_kernel(backend, add_kernel(4), "add")
    (entry,) = (config.cache_dir() / "programs").rglob("*.bin")
    entry.write_bytes(pack_entry(b"not a kernel"))
    PROGRAMS.clear_memory()
    discarded = PROGRAMS.stats.discarded  # the process-wide count: earlier tests may have discarded entries too
    with fake_plugins():  # swapping plugins forgets loaded programs, as a new process would not have them
        loaded = prepare_kernel(Device["PY"], add_kernel(4), "add")
    assert isinstance(loaded.program, InterpretedProgram)
    assert PROGRAMS.stats.discarded - discarded == 1


# ---- things in the cache folder that are not entries ----------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_in_place_of_an_entry_neither_hangs_nor_fails() -> None:
    _entry().parent.mkdir(parents=True)
    os.mkfifo(_entry())
    cache, compiler = ProgramCache(), TextCompiler()
    assert _within(60, lambda: cache.compile(compiler, TARGET, SOURCE)) == SOURCE.encode()
    assert (cache.stats.discarded, compiler.compiled) == (1, 1)
    assert _entry().is_file(), "the FIFO was replaced by a real entry"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_symlink_to_a_device_neither_hangs_nor_costs_memory(device: str) -> None:
    if not Path(device).exists():
        pytest.skip(f"{device} does not exist here")
    _entry().parent.mkdir(parents=True)
    _entry().symlink_to(device)
    cache, compiler = ProgramCache(), TextCompiler()
    tracemalloc.start()
    try:
        assert _within(60, lambda: cache.compile(compiler, TARGET, SOURCE)) == SOURCE.encode()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    assert cache.stats.discarded == 1
    assert not _entry().is_symlink() and _entry().is_file()


def test_entry_larger_than_the_limit_is_refused_unread() -> None:
    _entry().parent.mkdir(parents=True)
    with open(_entry(), "wb") as f:
        f.truncate(MAX_ENTRY_BYTES + 4096)  # sparse: costs no disk
    cache, compiler = ProgramCache(), TextCompiler()
    tracemalloc.start()
    try:
        assert cache.compile(compiler, TARGET, SOURCE) == SOURCE.encode()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    assert (cache.stats.discarded, compiler.compiled) == (1, 1)


def test_entry_path_under_a_fifo_is_not_fatal() -> None:
    programs = _entry().parent.parent
    programs.mkdir(parents=True)
    os.mkfifo(_entry().parent)  # the two-letter folder is a FIFO
    assert _within(60, lambda: ProgramCache().compile(TextCompiler(), TARGET, SOURCE)) == SOURCE.encode()


# ---- folders the cache cannot write ---------------------------------------------------------------------------------
@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders anyway")
def test_read_only_cache_folder_still_runs() -> None:
    ProgramCache().compile(TextCompiler(), TARGET, SOURCE)
    other = to_text(scale_kernel(4)[0], Stage.KERNEL)
    _entry().write_bytes(pack_entry(b"garbage"))
    folders = [config.cache_dir(), *config.cache_dir().rglob("*")]
    for path in folders:
        path.chmod(0o555)
    try:
        cache, compiler = ProgramCache(), TextCompiler()
        assert cache.load(compiler, TARGET, SOURCE, "add", _py_load()) is not None  # cannot remove the bad entry
        assert cache.compile(compiler, TARGET, other) == other.encode()  # cannot write a new one
        assert not _entry(other).exists()
    finally:
        for path in folders:
            path.chmod(0o755)


def test_unremovable_entries_and_unwritable_folder_are_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a read-only folder does to the cache, forced even when running as root (who may write anywhere)."""
    ProgramCache().compile(TextCompiler(), TARGET, SOURCE)
    _entry().write_bytes(pack_entry(b"garbage"))

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "unlink", denied)
    monkeypatch.setattr(Path, "mkdir", denied)
    monkeypatch.setattr(os, "replace", denied)
    cache, compiler = ProgramCache(), TextCompiler()
    assert isinstance(cache.load(compiler, TARGET, SOURCE, "add", _py_load()), InterpretedProgram)
    assert cache.stats.discarded == 1
    assert cache.load(compiler, TARGET, SOURCE, "add", _py_load()) is not None
    assert compiler.compiled == 1, "the healed binary is kept in memory"
    other = to_text(scale_kernel(4)[0], Stage.KERNEL)
    assert cache.compile(compiler, TARGET, other) == other.encode()
    monkeypatch.undo()
    assert not _entry(other).exists()
    assert not [p for p in config.cache_dir().rglob("*") if p.name.startswith(".tmp-")], "no temp file left"


# ---- temp files of killed writers -----------------------------------------------------------------------------------
def test_stale_temp_files_are_removed_when_a_process_first_uses_the_folder() -> None:
    folder = _entry().parent
    folder.mkdir(parents=True)
    old = time.time() - DEAD_GRACE_S - 60
    dead, alive = _dead_pid(), os.getpid()
    stale = folder / f".tmp-{dead}-abc123"
    kept = {"recent": folder / f".tmp-{dead}-recent", "live writer": folder / f".tmp-{alive}-live"}
    for path in (stale, *kept.values()):
        path.write_bytes(b"half an entry")
    os.utime(stale, (old, old))
    os.utime(kept["live writer"], (old, old))
    ProgramCache().compile(TextCompiler(), TARGET, SOURCE)
    assert not stale.exists()
    assert all(path.exists() for path in kept.values())


# ---- threads --------------------------------------------------------------------------------------------------------
class SlowCompiler(TextCompiler):
    """Holds the compile long enough that every thread asks before the first one is done."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def compile(self, source: str) -> bytes:
        time.sleep(0.05)
        with self.lock:
            return super().compile(source)


@pytest.mark.parametrize("distinct", [1, 4])
def test_threads_compile_each_program_once(distinct: int) -> None:
    compiler: Compiler = SlowCompiler()
    cache = ProgramCache()
    sources = [to_text(add_kernel(n + 1), Stage.KERNEL) for n in range(distinct)]
    start = threading.Barrier(16)
    results: dict[int, bytes] = {}

    def work(i: int) -> None:
        start.wait()
        results[i] = cache.compile(compiler, TARGET, sources[i % distinct])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(results[i] == sources[i % distinct].encode() for i in range(16))
    assert isinstance(compiler, SlowCompiler) and compiler.compiled == distinct
    assert (cache.stats.compiles, cache.stats.memory_hits) == (distinct, 16 - distinct)


# ---- tempfiles.loadable_file: a path for loaders that take paths, without a second disk write --------------------
def test_loadable_file_gives_the_bytes_and_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    import tempfile

    from plygrad.runtime import tempfiles

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    payload = os.urandom(300_000)  # larger than one pipe/page write
    with tempfiles.loadable_file(payload, "plygrad-test-", ".so") as path:
        assert Path(path).read_bytes() == payload
        if sys.platform.startswith("linux") and hasattr(os, "memfd_create"):
            assert path.startswith("/proc/self/")  # in memory: nothing was written to the temp folder
            assert not list(tmp_path.iterdir())
    assert not list(tmp_path.iterdir())


def test_loadable_file_paths_are_never_the_same_string() -> None:
    """dlopen returns the library it loaded before under the same name, and fd numbers are reused after close."""
    from plygrad.runtime import tempfiles

    paths = []
    for i in range(40):
        with tempfiles.loadable_file(bytes([i]), "plygrad-test-") as path:
            assert Path(path).read_bytes() == bytes([i])
            paths.append(path)
    assert len(set(paths)) == len(paths)


def test_loadable_file_falls_back_to_a_swept_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from plygrad.runtime import tempfiles

    def refuse(*args: object) -> int:
        raise OSError("memfd_create refused by a sandbox")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(os, "memfd_create", refuse, raising=False)
    with tempfiles.loadable_file(b"abc", "plygrad-test-", ".so") as path:
        assert Path(path).parent == tmp_path and Path(path).name.startswith(tempfiles.tagged("plygrad-test-"))
        assert Path(path).read_bytes() == b"abc"
    assert not list(tmp_path.iterdir())
