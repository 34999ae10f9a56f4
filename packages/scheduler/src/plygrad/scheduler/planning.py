"""Buffer planning: schedule-declared intermediates whose lifetimes do not overlap share one buffer id.

The runtime allocates one buffer per distinct negative id, so reusing an id saves memory. An intermediate lives
from the CALL that first names it to the CALL that last names it. A buffer whose last use is CALL k is free for a
new intermediate first written by a CALL *after* k (never by CALL k itself, which may still be reading it), and
only when device, dtype and size all match. Buffers that the schedule returns (LINEAR.arg) are never shared.
"""

from __future__ import annotations

from collections.abc import Sequence

from plygrad.ir import BufferRef, DType, Ops, UOp


def _buffers(call: UOp) -> list[UOp]:
    return [s for s in call.src[1:] if s.op is Ops.BUFFER]


def share_buffers(calls: Sequence[UOp], outputs: set[int]) -> dict[UOp, UOp]:
    """A BUFFER -> BUFFER substitution that renames intermediates onto freed ids of the same kind."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    nodes: dict[int, UOp] = {}
    for i, call in enumerate(calls):
        for buf in _buffers(call):
            if buf.arg.id < 0 and buf.arg.id not in outputs:
                first.setdefault(buf.arg.id, i)
                last[buf.arg.id] = i
                nodes[buf.arg.id] = buf
    free: dict[tuple[str, DType, int], list[tuple[int, int]]] = {}  # kind -> [(free after call, id)]
    mapping: dict[UOp, UOp] = {}
    renamed: dict[int, int] = {}
    for buf_id in sorted(first, key=lambda b: (first[b], -b)):
        node = nodes[buf_id]
        kind = (node.arg.device, node.dtype, node.arg.size)
        pool = free.setdefault(kind, [])
        reuse = next((entry for entry in pool if entry[0] < first[buf_id]), None)
        target = buf_id
        if reuse is not None:
            pool.remove(reuse)
            target = reuse[1]
            mapping[node] = UOp(Ops.BUFFER, node.dtype, (), BufferRef(target, node.arg.device, node.arg.size))
        renamed[buf_id] = target
        pool.append((last[buf_id], target))
    return mapping
