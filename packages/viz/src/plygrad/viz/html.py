"""The self-contained report page: our own CSS and JS (page.css, page.js) inline, the trace's figures embedded as
JSON in a `<script type="application/json">`, nothing fetched, nothing served. Laid out here (graph.py), drawn there.
"""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from dataclasses import asdict
from importlib.resources import files
from pathlib import Path
from typing import Any, Final

from plygrad.ir.errors import IRError
from plygrad.ir.serialize import deserialize
from plygrad.ir.stage import Stage
from plygrad.viz.graph import CAP, layout
from plygrad.viz.model import Trace, kernel_stats, memory, summary

MAX_GRAPHS: Final = 200  # schedules laid out (the first ones); the page says how many there were
MAX_TABLE_ROWS: Final = 1000  # rows a table draws at once, of its sorted order (layout of more takes seconds)
MAX_SOURCE: Final = 200_000  # characters of one kernel's source kept in the page
MAX_POINTS: Final = 20_000  # memory points per device drawn (evenly thinned past it, the peak kept)
MAX_AT_PEAK: Final = 50  # allocations listed at a device's peak
MAX_BEAM_ROWS: Final = 20  # BEAM candidates listed per kernel, fastest first
MAX_LAUNCHES: Final = 200_000  # launches in the page (timeline, launch table); the figures count all of them
# structure every kernel has: left out of the list of the ops a kernel computes
STRUCTURE: Final = frozenset({"SINK", "PARAM", "INDEX", "RANGE", "END", "CONST", "DEFINE_VAR", "BIND"})


def _thin(points: list[tuple[int, int]], peak_ns: int) -> list[tuple[int, int]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    kept = [points[int(i * step)] for i in range(MAX_POINTS)]
    kept.extend(p for p in points if p[0] == peak_ns)
    return sorted(set(kept))


def page_data(trace: Trace, cap: int = CAP) -> dict[str, Any]:
    """Everything the page draws, JSON-ready."""
    sites: dict[int, Counter[str]] = {}
    runs = trace.table("runs")
    for launch in trace.launches:
        site = runs[launch[1]][3] if 0 <= launch[1] < len(runs) else None
        sites.setdefault(launch[0], Counter())[site or "?"] += 1
    beams = {b.get("ast_sha"): b for b in trace.table("beams") if isinstance(b, dict)}
    kernels = []
    for i, kernel in enumerate(trace.kernels):
        source = str(kernel.get("source", ""))
        ops = _ops_of(kernel.get("ast"))
        kernels.append({
            "name": kernel["name"], "device": str(kernel.get("device", "?")), "source": source[:MAX_SOURCE],
            "source_cut": len(source) > MAX_SOURCE, "opts": kernel.get("opts", []),
            "global_size": kernel.get("global_size"), "local_size": kernel.get("local_size"),
            "ops": kernel.get("ops", 0), "mem": kernel.get("mem", 0), "params": kernel.get("params", []),
            "renderer": kernel.get("renderer", ""), "arch": kernel.get("arch", ""),
            "sites": [site for site, _ in sites.get(i, Counter()).most_common(5)], "ast_ops": ops,
            "beam": _beam_of(beams.get(kernel.get("ast_sha")) if kernel.get("ast_sha") else None),
        })
    schedules = trace.table("schedules")
    graphs = []
    for n, schedule in enumerate(schedules[:MAX_GRAPHS]):
        graph = layout(schedule, trace.kernels, cap)
        graph["schedule"], graph["producer"] = n, schedule.get("producer")
        graphs.append(graph)
    mem = {}
    for device, found in memory(trace).items():
        mem[device] = {"points": _thin(found.points, found.peak_ns), "peak": found.peak, "peak_ns": found.peak_ns,
                       "at_peak": [[a.buffer_id, a.nbytes, a.site] for a in found.at_peak[:MAX_AT_PEAK]],
                       "at_peak_more": max(0, len(found.at_peak) - MAX_AT_PEAK)}
    devices = sorted({k["device"] for k in kernels})
    return {"summary": summary(trace), "stats": [asdict(s) for s in kernel_stats(trace)], "kernels": kernels,
            "launches": trace.launches[:MAX_LAUNCHES], "launches_total": len(trace.launches),
            "table_rows": MAX_TABLE_ROWS, "builds": trace.table("builds"), "runs": runs, "devices": devices,
            "markers": trace.table("markers"), "graphs": graphs, "schedules": len(schedules), "memory": mem,
            "argv": trace.data.get("argv", [])}


def _beam_of(search: dict[str, Any] | None) -> dict[str, Any] | None:
    """A kernel's BEAM search for the page: its width, the list chosen, the fastest candidates timed."""
    if search is None:
        return None
    timed = sorted((t for t in search.get("tried", []) if isinstance(t[1], (int, float))), key=lambda t: t[1])
    return {"width": search.get("width"), "chosen": search.get("chosen", []), "tried": len(search.get("tried", [])),
            "fastest": timed[:MAX_BEAM_ROWS]}


def _ops_of(ast: object) -> list[list[Any]]:
    """[op name, count] of what a kernel AST computes (ALU, LOAD, STORE, REDUCE, CAST...), most frequent first;
    empty when its AST was not recorded or does not decode."""
    if not isinstance(ast, str):
        return []
    try:
        body = deserialize(base64.b64decode(ast), Stage.KERNEL)
    except (IRError, ValueError):
        return []
    found = Counter(node.op.name for node in body.toposort if node.op.name not in STRUCTURE)
    return [[name, count] for name, count in found.most_common()]


def _embed(data: dict[str, Any]) -> str:
    # "<" never appears raw, so no string in the data can end the script element or open a comment
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def _asset(name: str) -> str:
    return files("plygrad.viz").joinpath(name).read_text(encoding="utf-8")


def render_html(trace: Trace, cap: int = CAP) -> str:
    """The whole page as one string."""
    data = page_data(trace, cap)
    argv = " ".join(str(a) for a in data["argv"]) or trace.path
    title = f"plygrad trace: {argv}"
    escaped = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escaped}</title>
<style>
{_asset("page.css")}
</style>
</head>
<body>
<header>
<h1>plygrad trace</h1>
<div class="sub">{escaped}</div>
<nav><a href="#summary">summary</a><a href="#kernels">kernels</a><a href="#kernel">kernel</a>
<a href="#schedule">schedule</a><a href="#timeline-sec">timeline</a><a href="#memory-sec">memory</a>
<a href="#launches">launches</a></nav>
</header>
<main>
<div id="errors" role="alert"></div>
<section id="summary"><h2>Summary</h2><div class="cards" id="cards"></div>
<h3>Top kernels by time</h3><div id="top"></div></section>
<section id="kernels"><h2>Kernels</h2>
<p class="hint">click a header (or focus it and press Enter) to sort; click a row or press Enter on it to open it</p>
<p class="hint" id="kernel-note"></p>
<div class="scroll"><table id="kernel-table"><thead><tr></tr></thead><tbody></tbody></table></div></section>
<section id="kernel"><h2>Kernel</h2><div id="kernel-view"><p class="hint">pick a kernel</p></div></section>
<section id="schedule"><h2>Schedule graph</h2>
<label>schedule <select id="graph-pick"></select></label> <span class="hint" id="graphs-note"></span>
<p class="hint" id="graph-note"></p><div class="graph" id="graph"></div></section>
<section id="timeline-sec"><h2>Timeline</h2>
<p class="hint">wheel or +/- zooms, drag or arrow keys pan, double-click or 0 resets; markers in magenta</p>
<canvas id="timeline"></canvas></section>
<section id="memory-sec"><h2>Memory</h2><p class="hint" id="memory-note"></p><canvas id="memory"></canvas>
<div id="peak-list"></div></section>
<section id="launches"><h2>Launches</h2><p class="hint" id="launches-cut"></p><p class="hint" id="launch-note"></p>
<div class="scroll"><table id="launch-table"><thead><tr></tr></thead><tbody></tbody></table></div></section>
</main>
<div id="tip"></div>
<script type="application/json" id="trace-data">{_embed(data)}</script>
<script>
{_asset("page.js")}
</script>
</body>
</html>
"""


def write_html(trace: Trace, path: str | os.PathLike[str], cap: int = CAP) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(trace, cap), encoding="utf-8")
    return out
