"""Reading a recorded trace (plygrad.runtime.trace's versioned JSON) and the figures every report shows.

`load` checks the format and version and the shape of each table, so a report never fails halfway on a bad file;
`kernel_stats`, `memory` and `summary` are what the terminal table, the page and the Chrome trace share.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

FORMAT: Final = "plygrad-trace"
MAJOR: Final = 1  # the trace major version this reader understands (any minor: newer fields are ignored)
# table -> the length of each row (the recorder's layout, docs/viz.md)
ROWS: Final = {"runs": 4, "launches": 5, "copies": 6, "memory": 6, "markers": 2, "builds": 4}
OPTIONAL: Final = ("builds", "contents", "beams")  # tables a trace may lack (read as empty)


class TraceError(ValueError):
    """A file that is not a trace this reader understands; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Trace:
    """One recording: the JSON tables as the recorder wrote them (see docs/viz.md), checked by `load`."""

    data: dict[str, Any]
    path: str = "<memory>"

    def table(self, name: str) -> list[Any]:
        rows: list[Any] = self.data[name]
        return rows

    @property
    def kernels(self) -> list[dict[str, Any]]:
        return self.table("kernels")

    @property
    def launches(self) -> list[list[Any]]:
        return self.table("launches")

    @property
    def wall_ns(self) -> int:
        return int(self.data["wall_ns"])


def parse(data: object, path: str = "<memory>") -> Trace:
    """Check that `data` is a trace of format 1.x and return it (TraceError naming `path` otherwise)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TraceError(f"{path}: not a plygrad trace (no \"format\": \"{FORMAT}\"); record one with VIZ=1")
    version = data.get("version")
    if not (isinstance(version, list) and len(version) == 2 and all(isinstance(v, int) for v in version)):
        raise TraceError(f"{path}: trace version {version!r} is not [major, minor]")
    if version[0] != MAJOR:
        raise TraceError(f"{path}: trace version {version[0]}.{version[1]} needs a reader of major {version[0]}, "
                         f"this plygrad-viz reads {MAJOR}.x; install the plygrad-viz that matches the recorder")
    if not isinstance(data.get("wall_ns"), int):
        raise TraceError(f"{path}: \"wall_ns\" must be an integer, got {data.get('wall_ns')!r}")
    data = {**{name: [] for name in OPTIONAL if name not in data}, **data}
    for name in ("schedules", "kernels", "beams", *ROWS):
        if not isinstance(data.get(name), list):
            raise TraceError(f"{path}: \"{name}\" must be a list")
    for name, width in ROWS.items():
        for i, row in enumerate(data[name]):
            if not isinstance(row, list) or len(row) != width:
                raise TraceError(f"{path}: {name}[{i}] must be a list of {width} fields, got {row!r}")
    kernels = len(data["kernels"])
    for i, kernel in enumerate(data["kernels"]):
        if not isinstance(kernel, dict) or not isinstance(kernel.get("name"), str):
            raise TraceError(f"{path}: kernels[{i}] must be an object with a \"name\"")
    for i, launch in enumerate(data["launches"]):
        if not (isinstance(launch[0], int) and 0 <= launch[0] < kernels):
            raise TraceError(f"{path}: launches[{i}] names kernel {launch[0]!r}, but the trace has {kernels}")
        if not (isinstance(launch[2], int) and isinstance(launch[3], int) and launch[2] <= launch[3]):
            raise TraceError(f"{path}: launches[{i}] must start and end at integer times, start <= end")
    return Trace(data, path)


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a trace written by the recorder (`trace.json.gz`, or the same JSON uncompressed)."""
    raw = Path(path).read_bytes()
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, ValueError) as exc:
        raise TraceError(f"{path}: not readable as gzipped or plain JSON: {exc}") from exc
    return parse(data, str(path))


def launch_ns(launch: Sequence[Any]) -> int:
    """A launch's time: what the device measured where it did, else from start to end on the host."""
    device_ns = launch[4]
    return int(device_ns) if isinstance(device_ns, int) else int(launch[3]) - int(launch[2])


@dataclass(frozen=True)
class KernelStat:
    """One kernel's launches added up: time, its share of all kernel time, and the rates its estimates give."""

    index: int
    name: str
    device: str
    launches: int
    total_ns: int
    share: float
    gflops: float  # GFLOP/s over the kernel's total time
    gbs: float  # GB/s likewise


def kernel_stats(trace: Trace) -> list[KernelStat]:
    """Every launched kernel, the most time first."""
    count = [0] * len(trace.kernels)
    total = [0] * len(trace.kernels)
    for launch in trace.launches:
        count[launch[0]] += 1
        total[launch[0]] += launch_ns(launch)
    everything = sum(total) or 1
    stats = []
    for i, kernel in enumerate(trace.kernels):
        if not count[i]:
            continue
        seconds = max(total[i], 1) * 1e-9
        ops, mem = int(kernel.get("ops", 0)) * count[i], int(kernel.get("mem", 0)) * count[i]
        stats.append(KernelStat(i, kernel["name"], str(kernel.get("device", "?")), count[i], total[i],
                                total[i] / everything, ops / seconds * 1e-9, mem / seconds * 1e-9))
    return sorted(stats, key=lambda s: (-s.total_ns, s.index))


@dataclass(frozen=True)
class Allocation:
    """A buffer allocation: its buffer id, bytes, when, and the user's line that caused it."""

    buffer_id: int
    nbytes: int
    time_ns: int
    site: str | None


@dataclass
class DeviceMemory:
    """Live bytes on one device over time, and the peak with the allocations live then (largest first)."""

    device: str
    points: list[tuple[int, int]] = field(default_factory=list)  # (time, live bytes after the event)
    peak: int = 0
    peak_ns: int = 0
    at_peak: list[Allocation] = field(default_factory=list)


def memory(trace: Trace) -> dict[str, DeviceMemory]:
    """Replay the allocations and frees per device (a free of a buffer the recording did not see allocated, as
    the recorder never writes, is ignored)."""
    devices: dict[str, DeviceMemory] = {}
    live: dict[str, dict[int, Allocation]] = {}
    current: dict[str, int] = {}
    for time_ns, buffer_id, device, nbytes, site, _run in trace.table("memory"):
        mem = devices.setdefault(device, DeviceMemory(device))
        bufs = live.setdefault(device, {})
        if nbytes >= 0:
            bufs[buffer_id] = Allocation(buffer_id, nbytes, time_ns, site)
            current[device] = current.get(device, 0) + nbytes
        elif bufs.pop(buffer_id, None) is not None:
            current[device] -= -nbytes
        mem.points.append((time_ns, current.get(device, 0)))
        if current.get(device, 0) > mem.peak:
            mem.peak, mem.peak_ns = current[device], time_ns
            mem.at_peak = sorted(bufs.values(), key=lambda a: (-a.nbytes, a.buffer_id))
    return devices


def summary(trace: Trace) -> dict[str, Any]:
    """The headline figures: wall time, kernel time, launches, kernels, peak memory per device."""
    launches = trace.launches
    return {
        "wall_ns": trace.wall_ns,
        "kernel_ns": sum(launch_ns(launch) for launch in launches),
        "build_ns": sum(end - start for start, end, _, _ in trace.table("builds")),
        "device_timed": all(isinstance(launch[4], int) for launch in launches),
        "launches": len(launches),
        "kernels": len({launch[0] for launch in launches}),
        "schedules": len(trace.table("schedules")),
        "copies": len(trace.table("copies")),
        "markers": len(trace.table("markers")),
        "peak_bytes": {device: mem.peak for device, mem in memory(trace).items()},
    }
