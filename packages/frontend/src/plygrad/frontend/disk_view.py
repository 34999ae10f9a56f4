"""How a tensor graph over a disk buffer reads the file: as strides over its bytes where it can (`Strided`), else as
the byte range each disk buffer is read at (`Spans`). disk.py decides from this what to copy and where to write.

Movement ops compose into strides (shrink, permute, flip, expand, and the reshapes NumPy does without a copy). A
strided slice `t[:, ::3]` is built by the frontend as pad -> reshape -> shrink (the pad rounds the axis up to a
multiple of the step, and the shrink then drops the padded elements again), so padding is followed rather than
given up on: the view is extended over the padded positions as if the file went on there, and each pad leaves a
`Bound` saying which indices are real. Every later op rewrites the bounds in terms of its own indices; a bound that
holds over the whole shape is dropped, and a view left with a bound really reads padding.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TypeAlias

from plygrad.ir import Ops, UOp

Span: TypeAlias = tuple[int, int]  # bytes [begin, end) of a disk buffer


def is_disk(device: str) -> bool:
    """Whether a canonical device name is a DISK device ("DISK:/tmp/w.bin", or the bare "DISK")."""
    return device.startswith("DISK") and (len(device) == 4 or device[4] == ":")


@dataclass(frozen=True)
class Bound:
    """`low <= constant + sum(coefs[a] * index[a]) < high`: which elements of a view are not padding."""

    coefs: tuple[int, ...]
    constant: int
    low: int
    high: int

    def always(self, shape: tuple[int, ...]) -> bool:
        """Whether every index of `shape` satisfies it."""
        least = self.constant + sum(min(0, c * (n - 1)) for c, n in zip(self.coefs, shape, strict=True))
        most = self.constant + sum(max(0, c * (n - 1)) for c, n in zip(self.coefs, shape, strict=True))
        return self.low <= least and most < self.high


@dataclass(frozen=True)
class Strided:
    """Elements of `shape` of `itemsize` bytes at `offset + sum(index * strides)` bytes of the disk BUFFER `buffer`;
    those outside a bound in `bounds` are padding (zeros that are not in the file)."""

    buffer: UOp
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    itemsize: int
    bounds: tuple[Bound, ...] = ()

    def span(self) -> Span | None:
        """The bytes it reads (None when it has no elements)."""
        if 0 in self.shape:
            return None
        low = self.offset + sum(min(0, (n - 1) * s) for n, s in zip(self.shape, self.strides, strict=True))
        high = self.offset + sum(max(0, (n - 1) * s) for n, s in zip(self.shape, self.strides, strict=True))
        return low, high + self.itemsize

    def contiguous(self) -> bool:
        """Row-major, dense and without padding: exactly the bytes of one range, in order."""
        if self.bounds:
            return False
        expected = self.itemsize
        for n, s in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    def with_bounds(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                    bounds: list[Bound]) -> Strided:
        kept = tuple(b for b in bounds if not b.always(shape)) if 0 not in shape else ()
        return Strided(self.buffer, shape, strides, offset, self.itemsize, kept)


Spans: TypeAlias = dict[UOp, Span]  # the bytes each disk BUFFER node is read at, where the view is no Strided
View: TypeAlias = Strided | Spans


def row_major(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def reshaped(view: Strided, shape: tuple[int, ...]) -> Strided | None:
    """`view` reshaped without moving bytes (NumPy's no-copy reshape), or None where the strides cannot say it (or a
    bound would have to be said of a merged axis)."""
    if 0 in shape or 0 in view.shape:
        return Strided(view.buffer, shape, row_major(shape, view.itemsize), view.offset, view.itemsize)
    old = [a for a, n in enumerate(view.shape) if n != 1]
    strides = [view.itemsize] * len(shape)
    # each old axis's index as coefficients over the new axes (None: a merged axis, not linear in them)
    index_of: dict[int, tuple[int, ...] | None] = {a: (0,) * len(shape) for a, n in enumerate(view.shape) if n == 1}
    oi = ni = 0
    while ni < len(shape) and oi < len(old):
        nj, oj = ni + 1, oi + 1
        new_size, old_size = shape[ni], view.shape[old[oi]]
        while new_size != old_size:  # grow the smaller side until a group of new axes matches a group of old ones
            if new_size < old_size:
                new_size *= shape[nj]
                nj += 1
            else:
                old_size *= view.shape[old[oj]]
                oj += 1
        group = old[oi:oj]
        if any(view.strides[a] != view.shape[b] * view.strides[b] for a, b in itertools.pairwise(group)):
            return None  # the old axes of this group are not one stride apart: no strides say the merge
        strides[nj - 1] = view.strides[group[-1]]
        for k in range(nj - 1, ni, -1):
            strides[k - 1] = strides[k] * shape[k]
        if len(group) == 1:  # split (or kept): the old index is the new ones' row-major position in the group
            coefs, step = [0] * len(shape), 1
            for k in range(nj - 1, ni - 1, -1):
                coefs[k], step = step, step * shape[k]
            index_of[group[0]] = tuple(coefs)
        else:
            index_of.update(dict.fromkeys(group))
        ni, oi = nj, oj
    bounds: list[Bound] = []
    for bound in view.bounds:
        coefs = [0] * len(shape)
        for a, c in enumerate(bound.coefs):
            if c == 0:
                continue
            index = index_of[a]
            if index is None:
                return None
            coefs = [x + c * i for x, i in zip(coefs, index, strict=True)]
        bounds.append(Bound(tuple(coefs), bound.constant, bound.low, bound.high))
    return view.with_bounds(shape, tuple(strides), view.offset, bounds)


def _shifted(bounds: tuple[Bound, ...], starts: list[int]) -> list[Bound]:
    """The bounds once index[a] becomes index[a] + starts[a]."""
    return [Bound(b.coefs, b.constant + sum(c * s for c, s in zip(b.coefs, starts, strict=True)), b.low, b.high)
            for b in bounds]


def moved(view: Strided, node: UOp) -> Strided | None:
    """`view` after the movement op `node`, or None where no strides express it."""
    op, arg, shape, strides = node.op, node.arg, view.shape, view.strides
    if op is Ops.RESHAPE:
        return reshaped(view, tuple(arg))
    if op is Ops.SHRINK:
        starts = [b for b, _ in arg]
        offset = view.offset + sum(b * s for b, s in zip(starts, strides, strict=True))
        return view.with_bounds(tuple(e - b for b, e in arg), strides, offset, _shifted(view.bounds, starts))
    if op is Ops.PAD:  # over the padded positions as if the file went on, with a bound for each padded axis
        starts = [-before for before, _ in arg]
        offset = view.offset + sum(b * s for b, s in zip(starts, strides, strict=True))
        bounds = _shifted(view.bounds, starts)
        for a, ((before, after), n) in enumerate(zip(arg, shape, strict=True)):
            if before or after:
                bounds.append(Bound(tuple(int(k == a) for k in range(len(shape))), 0, before, before + n))
        new_shape = tuple(n + b + e for n, (b, e) in zip(shape, arg, strict=True))
        return view.with_bounds(new_shape, strides, offset, bounds)
    if op is Ops.PERMUTE:
        bounds = [Bound(tuple(b.coefs[a] for a in arg), b.constant, b.low, b.high) for b in view.bounds]
        return view.with_bounds(tuple(shape[a] for a in arg), tuple(strides[a] for a in arg), view.offset, bounds)
    if op is Ops.FLIP:
        offset = view.offset + sum((n - 1) * s for n, s, f in zip(shape, strides, arg, strict=True) if f)
        starts = [n - 1 if f else 0 for n, f in zip(shape, arg, strict=True)]
        bounds = [Bound(tuple(-c if f else c for c, f in zip(b.coefs, arg, strict=True)), b.constant, b.low, b.high)
                  for b in _shifted(view.bounds, starts)]
        return view.with_bounds(shape, tuple(-s if f else s for s, f in zip(strides, arg, strict=True)), offset, bounds)
    if op is Ops.EXPAND:  # an expanded axis had size 1: its index was 0, whatever the new one is
        flat = [n != m for n, m in zip(shape, arg, strict=True)]
        bounds = [Bound(tuple(0 if f else c for c, f in zip(b.coefs, flat, strict=True)), b.constant, b.low, b.high)
                  for b in view.bounds]
        return view.with_bounds(tuple(arg), tuple(0 if f else s for s, f in zip(strides, flat, strict=True)),
                                view.offset, bounds)
    return None


def spans(view: View) -> Spans:
    """The bytes each disk buffer is read at (a view with padding is clamped to its buffer)."""
    if isinstance(view, dict):
        return view
    span = view.span()
    if span is None:
        return {}
    nbytes = view.buffer.arg.size * view.buffer.dtype.itemsize
    low, high = max(span[0], 0), min(span[1], nbytes)
    return {view.buffer: (low, high)} if low < high else {}


def _union(views: list[View]) -> Spans:
    out: Spans = {}
    for view in views:
        for node, (low, high) in spans(view).items():
            old = out.get(node)
            out[node] = (low, high) if old is None else (min(old[0], low), max(old[1], high))
    return out


_MOVEMENT = frozenset({Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP, Ops.EXPAND, Ops.PAD})


def file_view(uop: UOp) -> View:
    """How the graph `uop` reads the disk buffers under it: a `Strided` view of one, or the byte spans it reads."""
    views: dict[UOp, View] = {}
    for node in uop.toposort:
        if node.op is Ops.BUFFER:
            if is_disk(node.arg.device):
                size, itemsize = node.arg.size, node.dtype.itemsize
                views[node] = Strided(node, (size,), (itemsize,), 0, itemsize)
            else:
                views[node] = {}
            continue
        src = views.get(node.src[0]) if node.src else None
        if isinstance(src, Strided) and len(node.src) == 1:
            if node.op in _MOVEMENT:
                after = moved(src, node)
                if after is not None:
                    views[node] = after
                    continue
            elif node.op is Ops.BITCAST and node.dtype.itemsize == src.itemsize:
                views[node] = src
                continue
        views[node] = _union([views[s] for s in node.src if s in views])
    return views[uop]
