"""A schedule as a graph, laid out here so the page only draws it: one node per CALL, an edge from the CALL that
last wrote a buffer to each CALL that reads it, layered left to right by depth.

Above `cap` nodes, layers are merged into bands and each band shows its first few CALLs and one node standing
for the rest, so a 10k-CALL schedule is a few hundred SVG elements and opens at once.
"""

from __future__ import annotations

import base64
import math
from typing import Any, Final

from plygrad.ir.ops import Ops
from plygrad.ir.serialize import deserialize
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp

CAP: Final = 500
X_STEP: Final = 190
Y_STEP: Final = 30
NODE_W: Final = 160
NODE_H: Final = 22


def calls_of(linear: UOp, calls: list[int], kernels: list[dict[str, Any]]) -> list[tuple[str, int, list[int],
                                                                                          list[int]]]:
    """(label, kernel index or -1, buffers written, buffers read) of each CALL of `linear`."""
    out = []
    for i, call in enumerate(linear.src):
        body = call.src[0]
        bufs = [int(s.arg.id) for s in call.src[1:] if s.op is Ops.BUFFER]
        kernel = calls[i] if i < len(calls) else -1
        if body.op is Ops.COPY:
            out.append(("copy", -1, bufs[:1], bufs[1:]))
            continue
        params = kernels[kernel].get("params", []) if 0 <= kernel < len(kernels) else []
        writable = [bool(p[3]) for p in params] if len(params) == len(bufs) else [j == 0 for j in range(len(bufs))]
        label = kernels[kernel]["name"] if 0 <= kernel < len(kernels) else str(call.arg or "kernel")
        out.append((label, kernel, [b for b, w in zip(bufs, writable, strict=True) if w],
                    [b for b, w in zip(bufs, writable, strict=True) if not w]))
    return out


def depths(calls: list[tuple[str, int, list[int], list[int]]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Each CALL's depth (0: reads only what no CALL wrote) and the dataflow edges (writer, reader)."""
    writer: dict[int, int] = {}
    depth: list[int] = []
    edges: list[tuple[int, int]] = []
    for i, (_, _, writes, reads) in enumerate(calls):
        producers = sorted({writer[b] for b in reads if b in writer})
        edges.extend((p, i) for p in producers)
        depth.append(1 + max((depth[p] for p in producers), default=-1))
        for b in writes:
            writer[b] = i
    return depth, edges


def layout(schedule: dict[str, Any], kernels: list[dict[str, Any]], cap: int = CAP) -> dict[str, Any]:
    """Node positions and edges of one recorded schedule, collapsed above `cap` nodes (see the module docstring)."""
    linear = deserialize(base64.b64decode(schedule["linear"]), Stage.SCHEDULE)
    calls = calls_of(linear, list(schedule.get("calls", [])), kernels)
    depth, edges = depths(calls)
    layers = 1 + max(depth, default=-1)
    collapsed = len(calls) > cap
    band_of = 1
    per_band = len(calls) or 1
    if collapsed:
        bands = min(layers, max(1, cap // 8))
        band_of = math.ceil(layers / bands)
        per_band = max(1, cap // math.ceil(layers / band_of) - 1)
    members: dict[int, list[int]] = {}  # band -> its CALLs, in schedule order
    for i, d in enumerate(depth):
        members.setdefault(d // band_of, []).append(i)
    nodes: list[dict[str, Any]] = []
    node_of: list[int] = [0] * len(calls)
    for band in sorted(members):
        shown, rest = members[band][:per_band], members[band][per_band:]
        for row, i in enumerate(shown):
            label, kernel, _, _ = calls[i]
            node_of[i] = len(nodes)
            nodes.append({"x": band * X_STEP, "y": row * Y_STEP, "label": label, "kernel": kernel, "call": i,
                          "count": 1})
        if rest:
            for i in rest:
                node_of[i] = len(nodes)
            nodes.append({"x": band * X_STEP, "y": len(shown) * Y_STEP, "label": f"+{len(rest)} more",
                          "kernel": -1, "call": rest[0], "count": len(rest)})
    shown_edges = sorted({(node_of[a], node_of[b]) for a, b in edges if node_of[a] != node_of[b]})[:4 * cap]
    width = (max((n["x"] for n in nodes), default=0)) + NODE_W + 10
    height = (max((n["y"] for n in nodes), default=0)) + NODE_H + 10
    return {"nodes": nodes, "edges": shown_edges, "calls": len(calls), "layers": layers, "collapsed": collapsed,
            "width": width, "height": height, "node_w": NODE_W, "node_h": NODE_H}
