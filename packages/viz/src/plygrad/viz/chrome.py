"""A trace in the Chrome trace event format, which Perfetto and `chrome://tracing` open.

One process per device (kernels on thread 1, copies into it on thread 2) and one for the host (each schedule run
on thread 1, each plan built on thread 2): "X" complete events, "i" instant events for the user's markers, "C"
counter events for each device's live bytes. Times are microseconds since the recording started.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

from plygrad.viz.model import Trace, launch_ns, memory

HOST_PID: Final = 0
KERNEL_TID: Final = 1  # on the host: schedule runs
COPY_TID: Final = 2  # on the host: plans being built (decoded, proved, compiled)


def _us(ns: int) -> float:
    return ns / 1000.0


def events(trace: Trace) -> list[dict[str, Any]]:
    """Every event of the trace, metadata first."""
    devices: dict[str, int] = {}

    def pid(device: str) -> int:
        return devices.setdefault(device, len(devices) + 1)

    out: list[dict[str, Any]] = []
    kernels = trace.kernels
    schedules = trace.table("schedules")
    for schedule, start, end, site in trace.table("runs"):
        if end is None:
            continue
        producer = schedules[schedule].get("producer") if 0 <= schedule < len(schedules) else "replay"
        out.append({"name": f"schedule {schedule}" if schedule >= 0 else "replay", "cat": "run", "ph": "X",
                    "ts": _us(start), "dur": _us(end - start), "pid": HOST_PID, "tid": KERNEL_TID,
                    "args": {"producer": producer, "site": site}})
    for start, end, producer, count in trace.table("builds"):
        out.append({"name": "build plan", "cat": "build", "ph": "X", "ts": _us(start), "dur": _us(end - start),
                    "pid": HOST_PID, "tid": COPY_TID, "args": {"producer": producer, "kernels": count}})
    for n, launch in enumerate(trace.launches):
        kernel = kernels[launch[0]]
        seconds = max(launch_ns(launch), 1) * 1e-9
        ops, mem = int(kernel.get("ops", 0)), int(kernel.get("mem", 0))
        out.append({"name": kernel["name"], "cat": "kernel", "ph": "X", "ts": _us(launch[2]),
                    "dur": _us(launch[3] - launch[2]), "pid": pid(str(kernel.get("device", "?"))),
                    "tid": KERNEL_TID,
                    "args": {"launch": n, "kernel": launch[0], "run": launch[1], "device_ns": launch[4],
                             "ops": ops, "mem": mem, "GFLOP/s": round(ops / seconds * 1e-9, 3),
                             "GB/s": round(mem / seconds * 1e-9, 3)}})
    for run, dst, src, nbytes, start, end in trace.table("copies"):
        out.append({"name": f"copy {src} -> {dst}", "cat": "copy", "ph": "X", "ts": _us(start),
                    "dur": _us(end - start), "pid": pid(dst), "tid": COPY_TID, "args": {"bytes": nbytes, "run": run}})
    for device, used in memory(trace).items():
        for time_ns, live in used.points:
            out.append({"name": "live bytes", "cat": "memory", "ph": "C", "ts": _us(time_ns), "pid": pid(device),
                        "args": {"bytes": live}})
    for time_ns, text in trace.table("markers"):
        out.append({"name": text, "cat": "marker", "ph": "i", "s": "g", "ts": _us(time_ns), "pid": HOST_PID,
                    "tid": KERNEL_TID})
    meta: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": HOST_PID, "args": {"name": "host"}},
                                  {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": KERNEL_TID,
                                   "args": {"name": "schedule runs"}},
                                  {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": COPY_TID,
                                   "args": {"name": "plans built"}}]
    for device, number in devices.items():
        meta.append({"name": "process_name", "ph": "M", "pid": number, "args": {"name": device}})
        meta.append({"name": "thread_name", "ph": "M", "pid": number, "tid": KERNEL_TID, "args": {"name": "kernels"}})
        meta.append({"name": "thread_name", "ph": "M", "pid": number, "tid": COPY_TID, "args": {"name": "copies"}})
    return meta + out


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The whole Chrome trace document."""
    return {"traceEvents": events(trace), "displayTimeUnit": "ns",
            "otherData": {"source": "plygrad-viz", "argv": trace.data.get("argv", []),
                          "started_unix": trace.data.get("started_unix")}}


def write_chrome_trace(trace: Trace, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(chrome_trace(trace), separators=(",", ":")), encoding="utf-8")
    return out
