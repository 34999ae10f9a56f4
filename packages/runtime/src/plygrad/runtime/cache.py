"""The program cache: compiled binaries in memory and on disk, lowered programs in memory.

Compiling C or CUDA takes tens to hundreds of milliseconds, far longer than running a small kernel, so a binary is
kept under a key that hashes everything that decides it: the source, the serialized target and the compiler's
`cache_key` (compiler, version, flags). On disk each entry is one file written atomically (temp file + rename), so
concurrent processes never see half an entry. Every entry carries a digest of its payload: a corrupt or truncated
file is discarded and the program recompiled, never an error (a cache is an optimization, not a source of truth).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from plygrad.runtime import config
from plygrad.runtime.plugin import Compiler

_MAGIC: Final = b"PLYBIN1\n"
_DIGEST_SIZE: Final = 32
_LENGTH: Final = struct.Struct("<Q")
_HEADER_SIZE: Final = len(_MAGIC) + _DIGEST_SIZE + _LENGTH.size


@dataclass
class CacheStats:
    """Counts since the cache was created or `reset_stats`: where each requested binary came from."""

    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    discarded: int = 0  # corrupt or unreadable disk entries thrown away
    lowerings: int = 0
    lowering_hits: int = 0


def program_key(source: str, target: bytes, compiler_key: str) -> str:
    """The cache key of a binary: a hash of everything that decides what the compiler produces."""
    h = hashlib.sha256()
    for part in (source.encode(), target, compiler_key.encode()):
        h.update(_LENGTH.pack(len(part)))
        h.update(part)
    return h.hexdigest()


def _pack(payload: bytes) -> bytes:
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


class ProgramCache:
    """In-memory and on-disk binaries (see the module docstring); one per process in `PROGRAMS`."""

    def __init__(self) -> None:
        self._binaries: dict[str, bytes] = {}
        self._lowered: dict[tuple[str, bytes, bytes], bytes] = {}
        self.stats = CacheStats()

    def clear_memory(self) -> None:
        """Drop the in-memory entries (the disk cache stays), e.g. to test that the disk cache is hit."""
        self._binaries.clear()
        self._lowered.clear()

    def forget_lowerings(self) -> None:
        """Drop lowered programs (the lowering engine behind a name changed, e.g. a plugin was swapped in)."""
        self._lowered.clear()

    @staticmethod
    def entry_path(key: str) -> Path:
        return config.cache_dir() / "programs" / key[:2] / f"{key}.bin"

    def _read_disk(self, key: str) -> bytes | None:
        path = self.entry_path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            self.stats.discarded += 1
            return None
        payload = _unpack(data)
        if payload is None:
            self.stats.discarded += 1
            path.unlink(missing_ok=True)
        return payload

    def _write_disk(self, key: str, binary: bytes) -> None:
        path = self.entry_path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_pack(binary))
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            pass  # a read-only or full cache folder only costs a recompile next time

    def compile(self, compiler: Compiler, target: bytes, source: str) -> bytes:
        """The binary of `source` for `target`: from memory, else from disk, else compiled (and stored)."""
        key = program_key(source, target, compiler.cache_key)
        if key in self._binaries:
            self.stats.memory_hits += 1
            return self._binaries[key]
        use_disk = not config.PLYGRAD_DISABLE_CACHE.get()
        binary = self._read_disk(key) if use_disk else None
        if binary is not None:
            self.stats.disk_hits += 1
        else:
            binary = compiler.compile(source)
            self.stats.compiles += 1
            if use_disk:
                self._write_disk(key, binary)
        self._binaries[key] = binary
        return binary

    def lower(self, codegen: str, lower: Callable[[bytes, bytes], bytes], kernel: bytes, target: bytes) -> bytes:
        """PROGRAM bytes for a kernel on a target, lowered once per (codegen name, kernel, target) per process."""
        key = (codegen, kernel, target)
        if key in self._lowered:
            self.stats.lowering_hits += 1
            return self._lowered[key]
        program = lower(kernel, target)
        self.stats.lowerings += 1
        self._lowered[key] = program
        return program


PROGRAMS: Final = ProgramCache()
