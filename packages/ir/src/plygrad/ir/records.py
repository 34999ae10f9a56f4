"""Frozen argument records: the structured `arg`s UOps carry across boundaries.

Every record type is registered by a stable name, so serialization can store it by name and field order. Adding
a field (with a default, at the end) is a minor format change; renaming or removing one is a major change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final, TypeVar

from plygrad.ir.dtype import DType
from plygrad.ir.ops import OptOps

RECORD_TYPES: Final[dict[str, type[Any]]] = {}
_T = TypeVar("_T")


def record(name: str) -> Callable[[type[_T]], type[_T]]:
    """Register a frozen dataclass as an argument record serialized under `name`."""

    def register(cls: type[_T]) -> type[_T]:
        if name in RECORD_TYPES:
            raise ValueError(f"record name {name!r} is already registered to {RECORD_TYPES[name].__name__}")
        RECORD_TYPES[name] = cls
        cls.record_name = name  # type: ignore[attr-defined]
        return cls

    return register


def record_fields(cls: type[Any]) -> tuple[str, ...]:
    """Field names of a record, in serialization order."""
    return tuple(f.name for f in fields(cls))


@record("BufferRef")
@dataclass(frozen=True)
class BufferRef:
    """A reference to runtime memory: the BUFFER op's argument (its element dtype is the UOp's dtype).

    `id >= 0` names a buffer the runtime already holds. In a schedule, `id < 0` declares a buffer the schedule
    itself needs (an intermediate or an output); the runtime allocates one per distinct negative id per run.
    """

    id: int
    device: str
    size: int  # in elements


@record("Opt")
@dataclass(frozen=True)
class Opt:
    """One optimization action applied to a kernel: `op` on `axis` by `amount`."""

    op: OptOps
    axis: int
    amount: int


@record("KernelInfo")
@dataclass(frozen=True)
class KernelInfo:
    """The kernel AST SINK's optional argument: a readable name and the optimizations already applied."""

    name: str = ""
    opts: tuple[Opt, ...] = ()


@record("ParamInfo")
@dataclass(frozen=True)
class ParamInfo:
    """One buffer parameter of a program: its position, element dtype, size in elements, and whether written."""

    index: int
    dtype: DType
    size: int
    writable: bool


@record("ProgramInfo")
@dataclass(frozen=True)
class ProgramInfo:
    """Launch information of a rendered program: the PROGRAM op's argument.

    `global_size`/`local_size` are three dimensions each (`local_size` None: the target has no workgroups).
    `ops` and `mem` estimate the arithmetic operations and bytes moved by one launch (for GFLOP/s and GB/s).
    """

    name: str
    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int] | None
    params: tuple[ParamInfo, ...]
    ops: int = 0
    mem: int = 0
    opts: tuple[Opt, ...] = ()
