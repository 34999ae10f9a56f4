"""plygrad.viz: reports of a plygrad recording (docs/viz.md).

`record(folder)` / `mark(text)` drive the runtime's recorder (`VIZ=1` does too); `load` reads a trace;
`write_reports` writes the self-contained report.html and chrome_trace.json; `python -m plygrad.viz TRACE` prints
the top kernels and re-renders.
"""

from plygrad.viz.chrome import chrome_trace, write_chrome_trace
from plygrad.viz.html import render_html, write_html
from plygrad.viz.model import KernelStat, Trace, TraceError, kernel_stats, load, memory, parse, summary
from plygrad.viz.recording import mark, record
from plygrad.viz.reports import top_table, write_reports

__all__ = ["KernelStat", "Trace", "TraceError", "chrome_trace", "kernel_stats", "load", "mark", "memory", "parse",
           "record", "render_html", "summary", "top_table", "write_chrome_trace", "write_html", "write_reports"]
