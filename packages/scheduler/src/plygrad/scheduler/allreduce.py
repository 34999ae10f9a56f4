"""ALLREDUCE lowered to what the runtime already runs: COPYs between devices and elementwise kernels.

`ALLREDUCE(x_0, ..., x_{n-1})` with argument `(op, device)` is the element-wise `op` over one tensor per device,
wanted on `device` (docs/ir.md §4.4). The frontend makes one per result device over the same sources; the lowerings
are written per result device from hash-consed nodes, so partial sums the results share are computed once.
Two algorithms, chosen by `choose` as tinygrad does: **naive** (every device copies every other's tensor: fine for
2 devices or small tensors) and **ring** (reduce-scatter of n chunks around the ring, then all-gather: 2(n-1)
copies of 1/n of the tensor per device). Every result device reduces in one order, so the results are bitwise
equal on every device and replicated parameters updated with them stay replicas.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from plygrad.ir import Ops, PatternMatcher, UOp, UPat, dtypes
from plygrad.ir.shape import is_symbolic
from plygrad.scheduler.fusion import named_devices

# the ring pays off from this many devices and elements on (tinygrad's thresholds)
RING_MIN_DEVICES: Final = 3
RING_MIN_ELEMENTS: Final = 256_000


class Algorithm(Enum):
    NAIVE = "naive"
    RING = "ring"


def choose(devices: int, elements: int | None, dtype_is_bool: bool) -> Algorithm:
    """The ring for at least RING_MIN_DEVICES devices and RING_MIN_ELEMENTS elements, else naive. A symbolic
    size (None) or bool elements (no ADD to join chunks with) stay naive."""
    if elements is None or dtype_is_bool:
        return Algorithm.NAIVE
    if devices >= RING_MIN_DEVICES and elements >= RING_MIN_ELEMENTS:
        return Algorithm.RING
    return Algorithm.NAIVE


def source_devices(node: UOp) -> list[str | None]:
    """The device each source of an ALLREDUCE lives on (None: computed from constants, so anywhere)."""
    named = named_devices(UOp(Ops.SINK, dtypes.void, node.src).toposort)
    return [named[s] for s in node.src]


def _on(x: UOp, have: str | None, want: str) -> UOp:
    return x if have is None or have == want else UOp(Ops.COPY, x.dtype, (x,), want)


def naive(node: UOp) -> UOp:
    """`op` over every source copied to the result device, folded in source order."""
    op, device = node.arg
    devices = source_devices(node)
    acc = _on(node.src[0], devices[0], device)
    for src, have in zip(node.src[1:], devices[1:], strict=True):
        acc = UOp(op, node.dtype, (acc, _on(src, have, device)))
    return acc


def chunks(elements: int, n: int) -> list[tuple[int, int]]:
    """`elements` cut into n ranges (start, end) of ceil(elements / n), the last ones smaller or empty."""
    size = -(-elements // n)
    return [(min(c * size, elements), min((c + 1) * size, elements)) for c in range(n)]


def ring(node: UOp) -> UOp:
    """Reduce-scatter then all-gather around the ring of source devices, for the result on the node's device."""
    op, device = node.arg
    shape = node.shape
    assert shape is not None and not is_symbolic(shape)
    devices = source_devices(node)
    n = len(node.src)
    ring_devices = [d if d is not None else device for d in devices]
    elements = 1
    for dim in shape:
        elements *= int(dim)
    flat = [UOp(Ops.RESHAPE, node.dtype, (s,), (elements,)) for s in node.src]
    pieces: list[UOp] = []
    for c, (start, end) in enumerate(chunks(elements, n)):
        if start == end:
            continue
        part = [UOp(Ops.SHRINK, node.dtype, (f,), ((start, end),)) for f in flat]
        here = c
        acc = part[here]
        for _ in range(n - 1):  # reduce-scatter: the partial result moves one device on and adds its piece
            here = (here + 1) % n
            acc = UOp(op, node.dtype, (_on(acc, ring_devices[here - 1 if here else n - 1], ring_devices[here]),
                                       part[here]))
        # all-gather: the reduced chunk moves on around the ring until it reaches the result device
        while ring_devices[here] != device and device in ring_devices:
            nxt = (here + 1) % n
            acc = _on(acc, ring_devices[here], ring_devices[nxt])
            here = nxt
        acc = _on(acc, ring_devices[here], device)
        pieces.append(UOp(Ops.PAD, node.dtype, (acc,), ((start, elements - end),)))
    if not pieces:  # nothing to reduce: an empty tensor needs no ring
        return naive(node)
    out = pieces[0]
    for piece in pieces[1:]:
        out = UOp(Ops.ADD, node.dtype, (out, piece))
    return UOp(Ops.RESHAPE, node.dtype, (out,), shape)


def _elements(node: UOp) -> int | None:
    shape = node.shape
    if shape is None or is_symbolic(shape):
        return None
    total = 1
    for dim in shape:
        total *= int(dim)
    return total


def lower(node: UOp) -> UOp:
    """The ALLREDUCE as copies and ALU ops, by the algorithm `choose` picks (one source: the source itself)."""
    if len(node.src) == 1:
        return _on(node.src[0], source_devices(node)[0], node.arg[1])
    algorithm = choose(len(node.src), _elements(node), node.dtype.is_bool)
    return ring(node) if algorithm is Algorithm.RING else naive(node)


lower_collectives: Final = PatternMatcher([
    (UPat(Ops.ALLREDUCE, name="node"), lower),
], name="lower_collectives")
