"""Every report of a trace file, and the terminal table of its top kernels.

`write_reports` is the `plygrad.reporters` entry point the runtime's recorder calls at the end of a recording.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from plygrad.viz.chrome import write_chrome_trace
from plygrad.viz.html import write_html
from plygrad.viz.model import Trace, kernel_stats, load, summary

HTML_FILE: Final = "report.html"
CHROME_FILE: Final = "chrome_trace.json"


def write_reports(trace_path: str | os.PathLike[str], folder: str | os.PathLike[str] | None = None,
                  html: bool = True, chrome: bool = True) -> list[Path]:
    """Write report.html and chrome_trace.json of the trace at `trace_path` into `folder` (default: beside it)."""
    trace = load(trace_path)
    out = Path(trace_path).parent if folder is None else Path(folder)
    written = []
    if html:
        written.append(write_html(trace, out / HTML_FILE))
    if chrome:
        written.append(write_chrome_trace(trace, out / CHROME_FILE))
    return written


def _time(ns: int) -> str:
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.2f} us"


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.2f} {unit}"


def top_table(trace: Trace, top: int = 10) -> str:
    """The `top` kernels by time as a text table: name, launches, total time, share, GFLOP/s, GB/s."""
    stats = kernel_stats(trace)
    figures = summary(trace)
    rows = [(s.name, str(s.launches), _time(s.total_ns), f"{100 * s.share:.1f}%", f"{s.gflops:.2f}",
             f"{s.gbs:.2f}") for s in stats[:top]]
    head = ("kernel", "launches", "total time", "share", "GFLOP/s", "GB/s")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    timed = "device" if figures["device_timed"] else "host"
    peak = ", ".join(f"{d} {_bytes(b)}" for d, b in figures["peak_bytes"].items()) or "none recorded"
    lines.append(f"{figures['launches']} launches of {figures['kernels']} kernels, {_time(figures['kernel_ns'])} "
                 f"kernel time ({timed}-timed) in {_time(figures['wall_ns'])} wall; peak memory: {peak}")
    if len(stats) > top:
        lines.append(f"(top {top} of {len(stats)} kernels)")
    return "\n".join(lines)
