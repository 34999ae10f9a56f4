"""Shape inference for tensor-stage ops.

The IR never broadcasts implicitly: elementwise ops need sources of one shape, and the frontend inserts the
RESHAPE/EXPAND that `broadcast_shapes` computes. That keeps every kernel's index math explicit in the graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from plygrad.ir.errors import ShapeError
from plygrad.ir.ops import GroupOp, Ops
from plygrad.ir.records import BufferRef

if TYPE_CHECKING:
    from plygrad.ir.uop import UOp

Shape = tuple[int, ...]


def broadcast_shapes(*shapes: Shape) -> Shape:
    """The NumPy/PyTorch broadcast of `shapes`: align on the right, sizes must match or be 1. Answers are kept
    (up to MAX_BROADCASTS): a model broadcasts the same few shape pairs in every layer."""
    try:
        found = _BROADCASTS.get(shapes)
    except TypeError:  # a list among the shapes: not a key
        return _broadcast(shapes)
    if found is None:
        if len(_BROADCASTS) >= MAX_BROADCASTS:
            _BROADCASTS.clear()
        found = _BROADCASTS[shapes] = _broadcast(shapes)
    return found


MAX_BROADCASTS: Final = 4096
_BROADCASTS: Final[dict[tuple[Shape, ...], Shape]] = {}


def _broadcast(shapes: tuple[Shape, ...]) -> Shape:
    ndim = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    result = []
    for axis, sizes in enumerate(zip(*padded, strict=True)):
        wanted = {n for n in sizes if n != 1}
        if len(wanted) > 1:
            raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast: "
                             f"axis {axis - ndim} has sizes {sorted(wanted)}")
        result.append(wanted.pop() if wanted else 1)
    return tuple(result)


def _is_dims(arg: Any) -> bool:
    return isinstance(arg, tuple) and all(type(n) is int and n >= 0 for n in arg)


def _check_pairs(op: Ops, arg: Any, shape: Shape) -> tuple[tuple[int, int], ...]:
    if not (isinstance(arg, tuple) and len(arg) == len(shape)
            and all(isinstance(p, tuple) and len(p) == 2 and all(type(n) is int for n in p) for p in arg)):
        raise ShapeError(f"{op.name} of shape {shape} needs one (int, int) pair per axis, got {arg!r}")
    return arg


def _reshape(arg: Any, shape: Shape) -> Shape:
    if not _is_dims(arg):
        raise ShapeError(f"RESHAPE needs a tuple of non-negative ints, got {arg!r}")
    if math.prod(arg) != math.prod(shape):
        raise ShapeError(f"RESHAPE from {shape} to {arg}: sizes {math.prod(shape)} and {math.prod(arg)} differ")
    return tuple(arg)


def _permute(arg: Any, shape: Shape) -> Shape:
    if not (isinstance(arg, tuple) and all(type(a) is int for a in arg)  # ints first: sorted() of mixed types raises
            and sorted(arg) == list(range(len(shape)))):
        raise ShapeError(f"PERMUTE of shape {shape} needs a permutation of {tuple(range(len(shape)))}, got {arg!r}")
    return tuple(shape[a] for a in arg)


def _expand(arg: Any, shape: Shape) -> Shape:
    if not _is_dims(arg) or len(arg) != len(shape):
        raise ShapeError(f"EXPAND of shape {shape} needs {len(shape)} non-negative sizes, got {arg!r} "
                         "(RESHAPE first to add axes)")
    for axis, (old, new) in enumerate(zip(shape, arg, strict=True)):
        if old not in (new, 1):
            raise ShapeError(f"EXPAND from {shape} to {arg}: axis {axis} has size {old}, only size 1 can expand")
    return tuple(arg)


def _pad(arg: Any, shape: Shape) -> Shape:
    pairs = _check_pairs(Ops.PAD, arg, shape)
    if any(b < 0 or a < 0 for b, a in pairs):
        raise ShapeError(f"PAD of shape {shape}: padding must be non-negative, got {arg!r} (use SHRINK to cut)")
    return tuple(n + b + a for n, (b, a) in zip(shape, pairs, strict=True))


def _shrink(arg: Any, shape: Shape) -> Shape:
    pairs = _check_pairs(Ops.SHRINK, arg, shape)
    for axis, (n, (start, end)) in enumerate(zip(shape, pairs, strict=True)):
        if not 0 <= start <= end <= n:
            raise ShapeError(f"SHRINK of shape {shape}: axis {axis} range ({start}, {end}) is outside 0..{n}")
    return tuple(end - start for start, end in pairs)


def _flip(arg: Any, shape: Shape) -> Shape:
    if not (isinstance(arg, tuple) and len(arg) == len(shape) and all(type(f) is bool for f in arg)):
        raise ShapeError(f"FLIP of shape {shape} needs one bool per axis, got {arg!r}")
    return shape


def _reduce(arg: Any, shape: Shape) -> Shape:
    if not (isinstance(arg, tuple) and len(arg) == 2 and type(arg[0]) is Ops and arg[0] in GroupOp.ReduceOps
            and isinstance(arg[1], tuple)):
        raise ShapeError(f"REDUCE needs the argument (reduce op, axes), got {arg!r}")
    axes = arg[1]
    if not all(type(a) is int and 0 <= a < len(shape) for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"REDUCE of shape {shape}: axes {axes!r} must be distinct axes 0..{len(shape) - 1}")
    return tuple(1 if axis in axes else n for axis, n in enumerate(shape))


MOVEMENT_SHAPES: Final[dict[Ops, Callable[[Any, Shape], Shape]]] = {
    Ops.RESHAPE: _reshape, Ops.PERMUTE: _permute, Ops.EXPAND: _expand, Ops.PAD: _pad, Ops.SHRINK: _shrink,
    Ops.FLIP: _flip, Ops.REDUCE: _reduce,
}
# ops whose shape is their (single or all-equal) sources' shape
SAME_SHAPE_OPS: Final = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN}


def infer_shape(node: UOp) -> Shape | None:
    """The shape of `node` given its sources' (already inferred) shapes; None where the op has no tensor shape."""
    op = node.op
    if op is Ops.BUFFER:
        ref = node.arg
        if not isinstance(ref, BufferRef):
            raise ShapeError(f"BUFFER needs a BufferRef argument, got {ref!r}")
        return (ref.size,)
    if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
        return ()
    src_shapes = [s.shape for s in node.src]
    if any(s is None for s in src_shapes):
        return None
    if op in MOVEMENT_SHAPES:
        if len(src_shapes) != 1:
            raise ShapeError(f"{op.name} takes one source, got {len(src_shapes)}")
        shape = src_shapes[0]
        assert shape is not None
        return MOVEMENT_SHAPES[op](node.arg, shape)
    if op in SAME_SHAPE_OPS:
        if not src_shapes:
            raise ShapeError(f"{op.name} needs sources")
        first = src_shapes[0]
        if any(s != first for s in src_shapes[1:]):
            shown = " and ".join(str(s) for s in src_shapes)
            raise ShapeError(f"{op.name} got sources of shapes {shown}: elementwise ops need equal shapes; "
                             "EXPAND them to broadcast_shapes(...) first")
        return first
    return None
