"""The schedule cache: a graph seen before is not scheduled again, even over other buffers.

The key is the graph's *structure*: every BUFFER id is replaced by its rank in the order the graph first reaches
it (device, dtype and size stay, they change the kernels), and every BIND's value by its variable's minimum (the
kernels take the variable, only the CALL carries the value). On a hit the cached schedule of that normalized graph
gets the real ids and values substituted back, which is a cheap rewrite of CALL sources, never of kernels.
"""

from __future__ import annotations

from collections.abc import Callable

from plygrad.ir import BufferRef, Ops, UOp


def _normalize(sink: UOp) -> tuple[UOp, dict[UOp, UOp]]:
    """The structural key of `sink` and the substitution that maps the key's leaves back to `sink`'s."""
    to_key: dict[UOp, UOp] = {}
    rank = 0
    for node in sink.toposort:
        if node.op is Ops.BUFFER and node not in to_key:
            ref = node.arg
            to_key[node] = UOp(Ops.BUFFER, node.dtype, (), BufferRef(rank, ref.device, ref.size))
            rank += 1
        elif node.op is Ops.BIND:
            var = node.src[0]
            to_key[node] = var.bind(var.arg[1])
    key = sink.substitute(to_key) if to_key else sink
    back = {k: v for v, k in to_key.items()}
    return key, back


class ScheduleCache:
    """Schedules by graph structure, with hit/miss counters (see the module docstring)."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.entries: dict[UOp, UOp] = {}  # insertion-ordered: the oldest entry is evicted first
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0

    def schedule(self, sink: UOp, scheduler: Callable[[UOp], UOp]) -> UOp:
        key, back = _normalize(sink)
        linear = self.entries.get(key)
        if linear is None:
            self.misses += 1
            linear = self.entries[key] = scheduler(key)
            if len(self.entries) > self.max_entries:
                del self.entries[next(iter(self.entries))]
        else:
            self.hits += 1
        if not back:
            return linear
        calls = [c.substitute(back) for c in linear.src]
        ids = {k.arg.id: v.arg.id for k, v in back.items() if k.op is Ops.BUFFER}
        outputs = tuple(ids.get(i, i) if i >= 0 else i for i in linear.arg)
        return UOp(Ops.LINEAR, linear.dtype, tuple(calls), outputs)

    def clear(self) -> None:
        self.entries.clear()
        self.hits = self.misses = 0
