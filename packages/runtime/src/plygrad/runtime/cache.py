"""The program cache: compiled binaries in memory and on disk, lowered programs in memory, and small records.

A binary is kept under a key hashing its source, the serialized target and the compiler's `cache_key`. Disk
entries are written atomically and carry a digest; a corrupt, oversized, non-regular or unloadable entry is
discarded and the program compiled again, and an unwritable folder only costs a compile (a cache is an
optimization, not a source of truth). *Records* are small costly-to-find results under their own folder (BEAM's
choices, the CPU toolchain probe). A per-key lock makes threads wanting one program wait for one compile.
docs/architecture.md, "Inside the runtime".
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from plygrad.runtime import config, tempfiles
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Compiler

_MAGIC: Final = b"PLYBIN1\n"
_DIGEST_SIZE: Final = 32
_LENGTH: Final = struct.Struct("<Q")
_HEADER_SIZE: Final = len(_MAGIC) + _DIGEST_SIZE + _LENGTH.size
# far above any compiled kernel (a few hundred KiB); bounds what one entry can make this process allocate
MAX_ENTRY_BYTES: Final = 256 << 20
_TEMP_PREFIX: Final = ".tmp-"
# O_NOFOLLOW: a symlink (to /dev/zero, to another user's file) is refused by open itself; O_NONBLOCK: opening a
# FIFO returns at once instead of waiting for a writer. Both are missing on Windows, which has neither hazard.
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(
    os, "O_BINARY", 0)

Loaded = TypeVar("Loaded")


@dataclass
class CacheStats:
    """Counts since the cache was created or `reset_stats`: where each requested binary came from."""

    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    discarded: int = 0  # disk entries thrown away: corrupt, unreadable, not a regular file, too large, not loadable
    lowerings: int = 0
    lowering_hits: int = 0
    record_disk_hits: int = 0  # records (BEAM's choices) read from disk


@dataclass(frozen=True)
class _Binary:
    """A binary in memory, whether it came from the disk (only those are suspect when they fail to load), and
    whether the disk has it (a `persist=False` compile does not write it)."""

    data: bytes
    from_disk: bool
    on_disk: bool = True


def program_key(source: str, target: bytes, compiler_key: str) -> str:
    """The cache key of a binary: a hash of everything that decides what the compiler produces."""
    h = hashlib.sha256()
    for part in (source.encode(), target, compiler_key.encode()):
        h.update(_LENGTH.pack(len(part)))
        h.update(part)
    return h.hexdigest()


def pack_entry(payload: bytes) -> bytes:
    """The bytes of a disk entry holding `payload` (magic, digest, length, payload)."""
    return _MAGIC + hashlib.sha256(payload).digest() + _LENGTH.pack(len(payload)) + payload


def _unpack(data: bytes) -> bytes | None:
    """The payload of a disk entry, or None if the entry is not intact."""
    if len(data) < _HEADER_SIZE or not data.startswith(_MAGIC):
        return None
    digest = data[len(_MAGIC):len(_MAGIC) + _DIGEST_SIZE]
    (length,) = _LENGTH.unpack_from(data, len(_MAGIC) + _DIGEST_SIZE)
    payload = data[_HEADER_SIZE:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def _read_regular_file(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` if it is a regular file of at most `limit` bytes, else None; raises OSError when it
    cannot be opened (FileNotFoundError when there is nothing there)."""
    fd = os.open(path, _OPEN_FLAGS)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = f.read(limit + 1)  # the file may have grown since fstat
    return data if len(data) <= limit else None


class ProgramCache:
    """In-memory and on-disk binaries (see the module docstring); one per process in `PROGRAMS`."""

    def __init__(self) -> None:
        self._binaries: dict[str, _Binary] = {}
        self._lowered: dict[tuple[str, bytes, bytes, bytes | None], bytes] = {}
        self._records: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()
        self._key_locks: dict[object, threading.Lock] = {}
        self._swept: set[Path] = set()
        self.stats = CacheStats()

    def clear_memory(self) -> None:
        """Drop the in-memory entries (the disk cache stays), e.g. to test that the disk cache is hit."""
        with self._lock:
            self._binaries.clear()
            self._lowered.clear()
            self._records.clear()

    def forget_lowerings(self) -> None:
        """Drop lowered programs (the lowering engine behind a name changed, e.g. a plugin was swapped in)."""
        with self._lock:
            self._lowered.clear()

    @staticmethod
    def entry_path(key: str, folder: str = "programs") -> Path:
        """Where the disk entry of `key` lives: binaries under "programs", records under their own folder."""
        return config.cache_dir() / folder / key[:2] / f"{key}.bin"

    @contextmanager
    def exclusive(self, key: object) -> Iterator[None]:
        """Held by the one thread that compiles (or lowers) `key`, so others wait for its result instead of
        compiling too; whoever gets it next must look in memory first. Dropped when free, so the dictionary does
        not keep every key ever compiled."""
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            try:
                yield
            finally:
                with self._lock:
                    if self._key_locks.get(key) is lock:
                        del self._key_locks[key]

    def _sweep_once(self, folder: str) -> None:
        """Remove temp files killed writers left in this cache folder, the first time this process uses it."""
        top = config.cache_dir() / folder
        with self._lock:
            if top in self._swept:
                return
            self._swept.add(top)
        try:
            subfolders = [entry.path for entry in os.scandir(top) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for subfolder in subfolders:
            tempfiles.sweep_stale(subfolder, _TEMP_PREFIX)

    def _discard(self, path: Path) -> None:
        """Count a bad disk entry and remove it if possible (a read-only folder keeps it; it is refused again)."""
        with self._lock:
            self.stats.discarded += 1
        with suppress(OSError):
            path.unlink()

    def _read_disk(self, key: str, folder: str = "programs") -> bytes | None:
        self._sweep_once(folder)
        path = self.entry_path(key, folder)
        try:
            data = _read_regular_file(path, _HEADER_SIZE + MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except OSError:  # a symlink (O_NOFOLLOW), no permission, a parent that is not a folder, ...
            data = None
        payload = _unpack(data) if data is not None else None
        if payload is None:
            self._discard(path)
        return payload

    def _write_disk(self, key: str, binary: bytes, folder: str = "programs") -> None:
        if len(binary) > MAX_ENTRY_BYTES:
            return  # it would be refused when read back
        path = self.entry_path(key, folder)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfiles.temp_file(_TEMP_PREFIX, folder=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(pack_entry(binary))
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            pass  # a read-only or full cache folder only costs a recompile next time

    def _evict(self, key: str) -> None:
        """Forget a binary in memory and on disk (it did not load)."""
        with self._lock:
            self._binaries.pop(key, None)
        with suppress(OSError):  # a read-only folder: the entry is read again next process, and healed again
            self.entry_path(key).unlink()

    def _lookup(self, compiler: Compiler, key: str, source: str, persist: bool = True) -> _Binary:
        with self.exclusive(key):
            use_disk = not config.PLYGRAD_DISABLE_CACHE.get()
            with self._lock:
                found = self._binaries.get(key)
                if found is not None:
                    self.stats.memory_hits += 1
            if found is not None:
                if persist and use_disk and not found.on_disk:  # a BEAM candidate turned out to be the winner
                    self._write_disk(key, found.data)
                    found = _Binary(found.data, found.from_disk)
                    with self._lock:
                        self._binaries[key] = found
                return found
            data = self._read_disk(key) if use_disk else None
            if data is not None:
                with self._lock:
                    self.stats.disk_hits += 1
                entry = _Binary(data, from_disk=True)
            else:
                entry = _Binary(compiler.compile(source), from_disk=False, on_disk=persist)
                with self._lock:
                    self.stats.compiles += 1
                if use_disk and persist:
                    self._write_disk(key, entry.data)
            with self._lock:
                self._binaries[key] = entry
            return entry

    def compile(self, compiler: Compiler, target: bytes, source: str, persist: bool = True) -> bytes:
        """The binary of `source` for `target`: from memory, else from disk, else compiled (and stored; with
        `persist=False` in memory only, for a binary that will probably not be wanted by another process)."""
        return self._lookup(compiler, program_key(source, target, compiler.cache_key), source, persist).data

    def load(self, compiler: Compiler, target: bytes, source: str, name: str,
             load: Callable[[bytes], Loaded]) -> Loaded:
        """`load(binary)` of the binary of `source` for `target`, healing a disk entry that does not load.

        A disk entry can be intact (its digest matches) and still not be a program this backend loads: written by
        another tool or toolchain under a colliding folder, or copied from another machine. Such an entry is
        discarded and the program compiled again, bypassing the disk; if that fresh binary does not load either,
        the backend itself is at fault and a BackendError names the program and both causes.
        """
        key = program_key(source, target, compiler.cache_key)
        entry = self._lookup(compiler, key, source)
        try:
            return load(entry.data)
        except Exception as first:
            if not entry.from_disk:
                raise
            cause = f"{type(first).__name__}: {first}"
        fresh = self._recompile(compiler, key, source, entry)
        try:
            loaded = load(fresh.data)
        except Exception as exc:
            raise BackendError(f"cannot load program {name!r}: its cached binary did not load ({cause}), was "
                               f"discarded and compiled again, and the fresh binary did not load either "
                               f"({type(exc).__name__}: {exc}); the backend's compiler and loader disagree") from exc
        if not config.PLYGRAD_DISABLE_CACHE.get():
            self._write_disk(key, fresh.data)
        return loaded

    def _recompile(self, compiler: Compiler, key: str, source: str, bad: _Binary) -> _Binary:
        """A freshly compiled binary for `key` in place of `bad` (unless another thread already replaced it)."""
        with self.exclusive(key):
            with self._lock:
                current = self._binaries.get(key)
            if current is not None and current is not bad and not current.from_disk:
                return current
            self._evict(key)
            fresh = _Binary(compiler.compile(source), from_disk=False)
            with self._lock:
                self.stats.discarded += 1
                self.stats.compiles += 1
                self._binaries[key] = fresh
            return fresh

    def lower(self, codegen: str, lower: Callable[..., bytes], kernel: bytes, target: bytes,
              opts: bytes | None = None) -> bytes:
        """PROGRAM bytes for a kernel on a target, lowered once per (codegen name, kernel, target, opts) per process.

        `opts` (serialized optimizations, docs/codegen.md) is passed as `lower`'s third argument when given; without
        it the engine is called with two, as every engine accepts.
        """
        key = (codegen, kernel, target, opts)
        with self.exclusive(key):
            with self._lock:
                found = self._lowered.get(key)
                if found is not None:
                    self.stats.lowering_hits += 1
                    return found
            program = lower(kernel, target) if opts is None else lower(kernel, target, opts)
            with self._lock:
                self.stats.lowerings += 1
                self._lowered[key] = program
            return program

    # ---- records ------------------------------------------------------------------------------------------------
    def read_record(self, folder: str, key: str) -> bytes | None:
        """The record stored under `key` in `folder`: from memory, else from disk (unless PLYGRAD_DISABLE_CACHE);
        None when there is none, or the disk entry was damaged (it is discarded)."""
        with self._lock:
            found = self._records.get((folder, key))
        if found is not None or config.PLYGRAD_DISABLE_CACHE.get():
            return found
        data = self._read_disk(key, folder)
        if data is not None:
            with self._lock:
                self.stats.record_disk_hits += 1
                self._records[(folder, key)] = data
        return data

    def write_record(self, folder: str, key: str, payload: bytes) -> None:
        """Keep `payload` under `key` in `folder`, in memory and (unless PLYGRAD_DISABLE_CACHE) on disk."""
        with self._lock:
            self._records[(folder, key)] = payload
        if not config.PLYGRAD_DISABLE_CACHE.get():
            self._write_disk(key, payload, folder)

    def discard_record(self, folder: str, key: str) -> None:
        """Forget a record that turned out to be unusable, in memory and on disk."""
        with self._lock:
            self._records.pop((folder, key), None)
        path = self.entry_path(key, folder)
        if os.path.lexists(path):
            self._discard(path)


PROGRAMS: Final = ProgramCache()
