"""`WeakList`: weak references to objects in the order they were added, for registries that are appended to on hot
paths and read rarely (the readers of Buffers, the undecided leaves of autograd).

Adding is a C-level `weakref.ref` and an append. A `WeakSet` or `WeakValueDictionary` costs a Python-level call per
add and a Python-level callback per death, about two microseconds per object, and a small realized op adds one.
Dead references are dropped when the list has doubled since the last sweep, so it stays within twice the live
objects (and `min_sweep`)."""

from __future__ import annotations

import threading
import weakref
from typing import Generic, TypeVar

_T = TypeVar("_T")


class WeakList(Generic[_T]):
    """Weak references in the order added; an object added twice is listed twice. Thread-safe."""

    def __init__(self, min_sweep: int = 1024) -> None:
        self._refs: list[weakref.ref[_T]] = []
        self._min_sweep = min_sweep
        self._sweep_at = min_sweep
        self._lock = threading.Lock()  # a sweep must not drop what another thread appends

    def add(self, obj: _T) -> None:
        ref = weakref.ref(obj)
        with self._lock:
            self._refs.append(ref)
            if len(self._refs) >= self._sweep_at:
                self._refs = [r for r in self._refs if r() is not None]
                self._sweep_at = max(self._min_sweep, 2 * len(self._refs))

    def live(self) -> list[_T]:
        """The objects still alive, in the order added."""
        with self._lock:
            refs = list(self._refs)
        return [obj for obj in (r() for r in refs) if obj is not None]

    def __len__(self) -> int:
        """References held, dead ones not yet swept included."""
        return len(self._refs)
