"""The backend registry: `Device["CPU"]`, `Device["CPU:1"]`, `Device.DEFAULT`.

Backends are found through the `plygrad.backends` entry-point group (discovery.py). Finding one only imports its
cheap descriptor; opening it (calling the descriptor's factory) happens the first time a device of that backend is
asked for. Anything that goes wrong on the way (the descriptor does not import, it was built against another IR
major or a newer IR minor, the factory raises) is recorded with its cause and the backend is skipped: a broken
plugin never breaks `import plygrad.runtime`, and asking for it by name raises `BackendError` with the cause.

Threads (docs/threads.md): the registry is shared by the process. Scanning the entry points and opening a backend
happen under one lock, and the table of records is published only once every entry is in it, so eight threads
whose first action is to ask for the default device all see every backend and open each one once.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import functools
import threading
import traceback
import warnings
from dataclasses import dataclass

from plygrad.ir.version import OPSET_VERSION
from plygrad.runtime import config, discovery
from plygrad.runtime.errors import BackendError
from plygrad.runtime.plugin import Backend, BackendDescriptor


class BackendStatus(enum.Enum):
    """Where a discovered backend stands; only FOUND and OK backends can be used."""

    FOUND = "found (not opened yet)"
    OK = "ok"
    IMPORT_FAILED = "descriptor failed to import"
    INVALID = "invalid descriptor"
    VERSION_MISMATCH = "IR version mismatch"
    OPEN_FAILED = "failed to open"


@dataclass
class BackendRecord:
    """One entry point of the `plygrad.backends` group and what became of it."""

    name: str
    entry_point: str
    descriptor: BackendDescriptor | None
    status: BackendStatus
    cause: str = ""

    @property
    def usable(self) -> bool:
        return self.status in (BackendStatus.FOUND, BackendStatus.OK)


def _describe(exc: BaseException) -> str:
    """One line for a failure: the exception and the innermost frame that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def split_device(device: str) -> tuple[str, int]:
    """"cpu:1" -> ("CPU", 1); "CPU" -> ("CPU", 0). Raises BackendError on a malformed name."""
    base, sep, index = device.partition(":")
    if not base or (sep and not index.isdigit()):
        raise BackendError(f"device name {device!r} must look like 'CPU' or 'CPU:1' (or 'DISK:/path/to/file')")
    return base.upper(), int(index) if sep else 0


def _is_path(suffix: str) -> bool:
    """A device argument that names a file ("/tmp/w.bin", "w.bin", "./w"), not a malformed index ("x")."""
    return bool(suffix) and not suffix.isdigit() and any(c in suffix for c in "/\\.")


def device_base(device: str) -> str:
    """The backend a device name belongs to: "cpu:1" -> "CPU", "disk:/tmp/w.bin" -> "DISK"."""
    base = device.partition(":")[0]
    if not base:
        raise BackendError(f"device name {device!r} must look like 'CPU', 'CPU:1' or 'DISK:/path/to/file'")
    return base.upper()


@functools.lru_cache(maxsize=256)
def canonical_device(device: str) -> str:
    """The one spelling of a device name: upper-case backend, no ':0' ("cpu:0" -> "CPU"). A suffix that is not an
    index is the device's argument, kept as written for its backend to read ("disk:/tmp/w.bin" -> "DISK:/tmp/w.bin",
    a file for the DISK backend; it must look like a path, with a '/' or a '.'). Cached: every Buffer and tensor op
    asks, with a handful of names."""
    _, sep, suffix = device.partition(":")
    if sep and _is_path(suffix):
        return f"{device_base(device)}:{suffix}"
    base, index = split_device(device)
    return base if index == 0 else f"{base}:{index}"


class DeviceRegistry:
    """Every backend found, opened on demand. Use the module-level `Device` instance."""

    def __init__(self) -> None:
        self._records: dict[str, BackendRecord] | None = None
        self._opened: dict[str, Backend] = {}
        # re-entrant: opening a backend reads the records, and `open_all` / `DEFAULT` open backends
        self._lock = threading.RLock()
        discovery.on_change(self.reset)

    def reset(self) -> None:
        """Forget what was discovered and opened (entry points are scanned again on next use), closing every opened
        backend (`Backend.close`); one whose close raises is reported as a warning, not raised, so the others still
        close and a reset never fails half done."""
        with self._lock:
            opened = self._opened
            self._records = None
            self._opened = {}
        for name, backend in opened.items():
            try:
                backend.close()
            except Exception as exc:
                warnings.warn(f"backend {name}: close() raised {_describe(exc)}", RuntimeWarning, stacklevel=2)

    def records(self) -> dict[str, BackendRecord]:
        """Every backend entry point found, by backend name, with its status."""
        records = self._records
        if records is not None:
            return records
        with self._lock:
            if self._records is None:
                found: dict[str, BackendRecord] = {}
                for name, plugin in sorted(discovery.plugins(discovery.BACKENDS).items()):
                    found[name.upper()] = self._inspect(name, plugin)
                self._records = found  # published whole: no thread ever sees a table still being filled
            return self._records

    @staticmethod
    def _inspect(name: str, plugin: discovery.Plugin) -> BackendRecord:
        try:
            descriptor = plugin.load()
        except Exception as exc:
            return BackendRecord(name, plugin.value, None, BackendStatus.IMPORT_FAILED, _describe(exc))
        if not isinstance(descriptor, BackendDescriptor):
            return BackendRecord(name, plugin.value, None, BackendStatus.INVALID,
                                 f"entry point {plugin.value} gives {type(descriptor).__name__}, not a "
                                 "plygrad.runtime.BackendDescriptor")
        if descriptor.name != name.upper():
            return BackendRecord(name, plugin.value, descriptor, BackendStatus.INVALID,
                                 f"entry point is named {name!r} but its descriptor says {descriptor.name!r}")
        built = (descriptor.ir_major, descriptor.ir_minor)
        if built[0] != OPSET_VERSION[0] or built[1] > OPSET_VERSION[1]:
            return BackendRecord(name, plugin.value, descriptor, BackendStatus.VERSION_MISMATCH,
                                 f"built against IR opset {built[0]}.{built[1]}, but the installed plygrad-ir is "
                                 f"opset {OPSET_VERSION[0]}.{OPSET_VERSION[1]}: install matching versions of "
                                 "plygrad-ir and the backend")
        return BackendRecord(name, plugin.value, descriptor, BackendStatus.FOUND)

    def _record(self, base: str) -> BackendRecord:
        records = self.records()
        if base not in records:
            known = ", ".join(records) or "none (pip install plygrad-cpu, or another plygrad backend)"
            raise BackendError(f"unknown device {base!r}; backends found: {known}")
        return records[base]

    def __getitem__(self, device: str) -> Backend:
        """The opened backend for `device` ("CPU", "cpu:0", "CPU:1"); opened on first use."""
        name = canonical_device(device)
        opened = self._opened.get(name)
        if opened is not None:
            return opened
        with self._lock:
            opened = self._opened.get(name)
            return opened if opened is not None else self._open(name)

    def _open(self, name: str) -> Backend:
        """Open device `name` (the caller holds the lock, so each device is opened once)."""
        base = device_base(name)
        record = self._record(base)
        if not record.usable or record.descriptor is None:
            raise BackendError(f"backend {base} is unavailable: {record.status.value}: {record.cause}")
        try:
            backend = record.descriptor.load_factory()(name)
            if not isinstance(backend, Backend):
                raise BackendError(f"factory {record.descriptor.factory} returned {type(backend).__name__}, "
                                   "not a plygrad.runtime.Backend")
        except Exception as exc:
            if name == base:  # the backend itself cannot open; a bad index of a working backend is not recorded
                record.status, record.cause = BackendStatus.OPEN_FAILED, _describe(exc)
            raise BackendError(f"backend {base} failed to open device {name}: {_describe(exc)}") from exc
        record.status = BackendStatus.OK
        self._opened[name] = backend
        return backend

    def open_all(self) -> list[BackendRecord]:
        """Try to open every usable backend (so each status is final) and return the records by priority."""
        for base, record in self.records().items():
            if record.usable:
                with contextlib.suppress(BackendError):  # the failure is recorded on the record
                    self[base]
        return self._by_priority()

    def _by_priority(self) -> list[BackendRecord]:
        def key(record: BackendRecord) -> tuple[int, str]:
            return (-(record.descriptor.priority if record.descriptor else -(2**31)), record.name)

        return sorted(self.records().values(), key=key)

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - tinygrad's and PyTorch users' spelling
        """PLYGRAD_DEVICE when set, else the highest-priority backend that opens."""
        chosen = config.PLYGRAD_DEVICE.get()
        if chosen:
            return canonical_device(chosen)
        for record in self._by_priority():
            if record.usable:
                try:
                    return self[record.name].name
                except BackendError:
                    continue
        problems = "; ".join(f"{r.name}: {r.status.value}: {r.cause}" for r in self.records().values())
        raise BackendError("no backend opens" + (f" ({problems})" if problems else
                                                 ": none is installed; pip install plygrad-cpu"))


Device = DeviceRegistry()
atexit.register(Device.reset)  # backends release their temp folders and handles when the interpreter exits
