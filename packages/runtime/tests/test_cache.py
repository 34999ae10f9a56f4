"""The program cache: memory and disk hits, keys, corrupt entries discarded and recompiled, the disable switch."""

from __future__ import annotations

from pathlib import Path

import pytest
from rt_fakes import TextCompiler

from plygrad.ir import Stage, Target, to_text
from plygrad.runtime import ProgramCache
from plygrad.runtime.cache import program_key
from plygrad.runtime.testing import add_kernel

SOURCE = to_text(add_kernel(4), Stage.KERNEL)
TARGET = Target(device="PY", renderer="ir-text").to_bytes()


def _entry(cache: ProgramCache) -> Path:
    return cache.entry_path(program_key(SOURCE, TARGET, TextCompiler().cache_key))


def test_memory_then_disk_hits() -> None:
    compiler, cache = TextCompiler(), ProgramCache()
    first = cache.compile(compiler, TARGET, SOURCE)
    assert cache.compile(compiler, TARGET, SOURCE) == first
    assert (cache.stats.compiles, cache.stats.memory_hits) == (1, 1)
    fresh = ProgramCache()  # a new process: nothing in memory
    assert fresh.compile(compiler, TARGET, SOURCE) == first
    assert (fresh.stats.disk_hits, compiler.compiled) == (1, 1)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage", "directory"])
def test_corrupt_entry_is_discarded_and_recompiled(damage: str) -> None:
    compiler, cache = TextCompiler(), ProgramCache()
    good = cache.compile(compiler, TARGET, SOURCE)
    path = _entry(cache)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-3])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"\x00" * 100)
    else:
        path.unlink()
        path.mkdir()
    fresh = ProgramCache()
    assert fresh.compile(compiler, TARGET, SOURCE) == good
    assert (fresh.stats.discarded, fresh.stats.compiles, compiler.compiled) == (1, 1, 2)
    if damage != "directory":
        assert ProgramCache().compile(compiler, TARGET, SOURCE) == good
        assert compiler.compiled == 2, "the recompiled entry was written back"


def test_key_covers_source_target_and_compiler() -> None:
    base = program_key(SOURCE, TARGET, "cc 1")
    assert base != program_key(SOURCE + " ", TARGET, "cc 1")
    assert base != program_key(SOURCE, Target(device="PY", renderer="ir-text", threads=2).to_bytes(), "cc 1")
    assert base != program_key(SOURCE, TARGET, "cc 2")
    assert program_key("ab", b"c", "") != program_key("a", b"bc", ""), "parts are length-prefixed"


def test_disable_cache_skips_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_DISABLE_CACHE", "1")
    compiler, cache = TextCompiler(), ProgramCache()
    cache.compile(compiler, TARGET, SOURCE)
    assert not _entry(cache).exists()
    ProgramCache().compile(compiler, TARGET, SOURCE)
    assert compiler.compiled == 2


def test_unwritable_cache_folder_is_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PLYGRAD_CACHE_DIR", str(blocker))
    compiler = TextCompiler()
    assert ProgramCache().compile(compiler, TARGET, SOURCE) == SOURCE.encode()


def test_lowering_is_cached_per_codegen_kernel_and_target() -> None:
    calls: list[bytes] = []

    def lower(kernel: bytes, target: bytes) -> bytes:
        calls.append(kernel)
        return kernel[::-1]

    cache = ProgramCache()
    assert cache.lower("default", lower, b"k1", b"t") == b"1k"
    assert cache.lower("default", lower, b"k1", b"t") == b"1k"
    cache.lower("default", lower, b"k1", b"t2")
    cache.lower("other", lower, b"k1", b"t")
    assert len(calls) == 3 and cache.stats.lowering_hits == 1
