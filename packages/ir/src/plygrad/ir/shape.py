"""Shape inference for tensor-stage ops.

The IR never broadcasts implicitly: elementwise ops need sources of one shape, and the frontend inserts the
RESHAPE/EXPAND that `broadcast_shapes` computes. That keeps every kernel's index math explicit in the graph.

Symbolic sizes (docs/ir.md §4.3): a size of RESHAPE/EXPAND, or an amount of PAD/SHRINK, may be an index-dtype
scalar expression over variables (DEFINE_VAR, or a BIND of one). Such an entry is `None` in the argument and its
expression is the node's next extra source, in order: `RESHAPE(x, n)` with arg `(3, None)` has shape `(3, n)`. A
shape then holds that expression (a UOp) where it would hold an int; sizes are kept simplified, so two equal sizes
are the same node. Checks on symbolic sizes reject only what is wrong for every value of the variables, and a
RESHAPE to a symbolic shape reads the row-major prefix of its source (the frontend checks sizes at bound values).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from plygrad.ir.dtype import dtypes
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
    return isinstance(arg, tuple) and all(n >= 0 if type(n) is int else is_size_expr(n) for n in arg)


def is_size_expr(x: Any) -> bool:
    """Whether `x` is a symbolic size: a UOp of the index dtype (shape.py cannot import UOp: uop.py imports it)."""
    return hasattr(x, "op") and getattr(x.dtype, "name", None) == "index"


SIZE_LEAVES: Final = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})


def size_expr_problem(size: Any) -> Any | None:
    """The first node of the expression `size` that a symbolic size may not hold, or None when it is a size: every
    node is of the index dtype and a CONST, DEFINE_VAR, BIND or ALU op. The one rule for the IR's checks
    (verify_graph) and the frontend's (an error before the graph is built)."""
    for n in size.toposort:
        if n.dtype is not dtypes.index or not (n.op in SIZE_LEAVES or n.op in GroupOp.ALU):
            return n
    return None


def is_symbolic(shape: Shape) -> bool:
    """Whether some size of `shape` is a symbolic expression rather than an int."""
    return not _JUST_INT.issuperset(map(type, shape))  # C-level: lowering asks this for every view


_JUST_INT: Final = frozenset({int})


def _sized(value: Any) -> Any:
    """A size expression simplified, or its int where it simplifies to a constant."""
    from plygrad.ir.symbolic import simplify
    found = simplify(value)
    return int(found.arg) if found.op is Ops.CONST else found


def dim_add(a: Any, b: Any) -> Any:
    """a + b for sizes (ints or index expressions)."""
    if type(a) is int and type(b) is int:
        return a + b
    if type(b) is int and b == 0:
        return a
    return b if type(a) is int and a == 0 else _sized(a + b if type(a) is not int else b + a)


def dim_sub(a: Any, b: Any) -> Any:
    """a - b for sizes."""
    if type(a) is int and type(b) is int:
        return a - b
    return a if type(b) is int and b == 0 else _sized(a + b * -1 if type(a) is not int else b * -1 + a)


def dim_prod(dims: Any) -> Any:
    """The product of sizes: an int when every size is one."""
    total: Any = 1
    symbolic: Any = None
    for d in dims:
        if type(d) is int:
            total *= d
        else:
            symbolic = d if symbolic is None else symbolic * d
    if symbolic is None or total == 0:
        return total
    return symbolic if total == 1 else _sized(symbolic * total)


def dim_max(d: Any) -> int:
    """The largest value a size can take (itself for an int)."""
    return d if type(d) is int else int(d.vmax)


def max_shape(shape: Shape) -> tuple[int, ...]:
    """`shape` with each symbolic size at its largest value: what memory for it must hold."""
    return tuple(dim_max(d) for d in shape)


def _always_negative(d: Any) -> bool:
    """Whether size expression `d` is negative for every value of its variables (an int: whether it is < 0)."""
    return d < 0 if type(d) is int else d.vmax < 0


_DIM_SYMBOLS: Final = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.MAX: " max "}


def dim_text(d: Any) -> str:
    """A size as text: an int, or its expression with variables by name (`n`, `(n*3+2)`)."""
    if type(d) is int or not is_size_expr(d):
        return repr(d)
    if d.op is Ops.CONST:
        return str(d.arg)
    if d.op in (Ops.DEFINE_VAR, Ops.BIND):
        return str((d if d.op is Ops.DEFINE_VAR else d.src[0]).arg[0])
    symbol = _DIM_SYMBOLS.get(d.op)
    if symbol is None or len(d.src) != 2:
        return f"{d.op.name}({', '.join(dim_text(s) for s in d.src)})"
    return f"({dim_text(d.src[0])}{symbol}{dim_text(d.src[1])})"


def shape_text(shape: Any) -> str:
    """A shape (or argument) as text, symbolic sizes by `dim_text`."""
    if isinstance(shape, tuple):
        inner = ", ".join(shape_text(v) for v in shape)
        return f"({inner},)" if len(shape) == 1 else f"({inner})"
    return dim_text(shape)


def resolved_arg(node: UOp) -> Any:
    """A movement node's argument with each None entry replaced by the next of its extra sources, in order."""
    extra = node.src[1:]
    arg = node.arg
    if not extra:
        return arg
    wanted = sum(p.count(None) for p in arg if type(p) is tuple) if node.op in (Ops.PAD, Ops.SHRINK) else \
        (arg.count(None) if type(arg) is tuple else 0)
    if wanted != len(extra):
        raise ShapeError(f"{node.op.name} has {len(extra)} symbolic size sources but its argument {arg!r} has "
                         f"{wanted} None entries")
    it = iter(extra)
    if node.op in (Ops.PAD, Ops.SHRINK):
        out: Any = tuple(tuple(next(it) if v is None else v for v in p) if type(p) is tuple else p for p in arg)
    else:
        out = tuple(next(it) if v is None else v for v in arg)
    return out


def _check_pairs(op: Ops, arg: Any, shape: Shape) -> tuple[tuple[int, int], ...]:
    if not (isinstance(arg, tuple) and len(arg) == len(shape)
            and all(isinstance(p, tuple) and len(p) == 2 and all(type(n) is int or is_size_expr(n) for n in p)
                    for p in arg)):
        raise ShapeError(f"{op.name} of shape {shape} needs one (int, int) pair per axis, got {arg!r}")
    return arg


def _reshape(arg: Any, shape: Shape) -> Shape:
    if not _is_dims(arg):
        raise ShapeError(f"RESHAPE needs a tuple of non-negative ints, got {arg!r}")
    if is_symbolic(arg) or is_symbolic(shape):
        return tuple(arg)  # a prefix read: the frontend checks the sizes at the variables' bound values
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
            raise ShapeError(f"EXPAND from {shape_text(shape)} to {shape_text(arg)}: axis {axis} has size "
                             f"{dim_text(old)}, only size 1 can expand")
    return tuple(arg)


def _pad(arg: Any, shape: Shape) -> Shape:
    pairs = _check_pairs(Ops.PAD, arg, shape)
    if any(_always_negative(b) or _always_negative(a) for b, a in pairs):
        raise ShapeError(f"PAD of shape {shape_text(shape)}: padding must be non-negative, got {shape_text(arg)} "
                         "(use SHRINK to cut)")
    return tuple(dim_add(dim_add(n, b), a) for n, (b, a) in zip(shape, pairs, strict=True))


def _shrink(arg: Any, shape: Shape) -> Shape:
    pairs = _check_pairs(Ops.SHRINK, arg, shape)
    for axis, (n, (start, end)) in enumerate(zip(shape, pairs, strict=True)):
        if _always_negative(start) or _always_negative(dim_sub(end, start)) or _always_negative(dim_sub(n, end)):
            raise ShapeError(f"SHRINK of shape {shape_text(shape)}: axis {axis} range ({dim_text(start)}, "
                             f"{dim_text(end)}) is outside 0..{dim_text(n)}")
    return tuple(dim_sub(end, start) for start, end in pairs)


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
# the movement ops that take symbolic sizes as extra sources
SYMBOLIC_MOVEMENT: Final = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK})
# ops whose shape is their (single or all-equal) sources' shape
SAME_SHAPE_OPS: Final = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN, Ops.ALLREDUCE}


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
        shape = src_shapes[0] if src_shapes else None
        if len(src_shapes) == 1 and shape is not None:
            return MOVEMENT_SHAPES[op](node.arg, shape)
        if op not in SYMBOLIC_MOVEMENT or shape is None or any(s != () for s in src_shapes[1:]):
            raise ShapeError(f"{op.name} takes one source (and, for a symbolic size, its scalar expressions), got "
                             f"{len(src_shapes)}")
        return MOVEMENT_SHAPES[op](resolved_arg(node), shape)
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
