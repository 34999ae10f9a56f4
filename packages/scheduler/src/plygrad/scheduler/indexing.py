"""Movement ops as index math: a view never copies, it changes how a kernel computes the address it reads.

Each function maps the index expressions of a movement op's *output* (one `index` UOp per output axis) and the
validity gate collected so far to the index expressions of its *source* and the new gate. Lowering walks a tensor
graph from a kernel's output toward its buffers, so indices flow from consumer to producer, and by the time a
BUFFER is reached the expressions are the flat address to load. PAD is the only op that makes some outputs
invalid; its bounds become the gate of every load below it (a gated INDEX loads 0), and the value is masked again
at the PAD (see lowering.py) because a padded region of a computed value must read 0 too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

from plygrad.ir import Ops, Order, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, symbolic
from plygrad.ir.shape import dim_prod, is_symbolic, resolved_arg

Indices = tuple[UOp, ...]
Gate = UOp | None


def _distribute(x: UOp, c1: UOp, c2: UOp) -> UOp:
    scale: int = c2.arg
    return x * scale + int(c1.arg) * scale


def _fold_scale(x: UOp, c1: UOp, c2: UOp) -> UOp:
    scale: int = c1.arg * c2.arg
    return x * scale


_IDX = dtypes.index
# views stacked on views (FLIP of FLIP, SHRINK of PAD) give `c - (c - i)`-like chains; distributing constant factors
# over sums lets symbolic's sum normalization cancel them, so index expressions stay short however deep the graph
distribute: Final = PatternMatcher([
    (UPat(Ops.MUL, _IDX, src=[UPat(Ops.ADD, _IDX, src=[UPat.var("x", _IDX), UPat.cvar("c1", _IDX)]),
                              UPat.cvar("c2", _IDX)]), _distribute),
    (UPat(Ops.MUL, _IDX, src=[UPat(Ops.MUL, _IDX, src=[UPat.var("x", _IDX), UPat.cvar("c1", _IDX)]),
                              UPat.cvar("c2", _IDX)]), _fold_scale),
], name="distribute")
index_rules: Final = symbolic + distribute


def simplify(expr: UOp) -> UOp:
    """An index expression or gate simplified: plygrad.ir's symbolic rules plus `distribute`."""
    return graph_rewrite(expr, index_rules, order=Order.BOTTOM_UP)


def index_const(value: int) -> UOp:
    return UOp.const(dtypes.index, value)


def and_gate(gate: Gate, cond: UOp) -> Gate:
    """`gate AND cond`, simplified; None stands for "always valid"."""
    combined = simplify(cond if gate is None else gate & cond)
    if combined.op is Ops.CONST and combined.arg is True:
        return None
    return combined


def kernel_dim(size: Any) -> Any:
    """A size as kernels see it: an int, or its expression with each BIND replaced by its DEFINE_VAR (the value
    reaches the kernel through the CALL's BINDs, so one program serves every bound value)."""
    if type(size) is int:
        return size
    binds = {n: n.src[0] for n in size.toposort if n.op is Ops.BIND}
    return simplify(size.substitute(binds) if binds else size)


def kernel_shape(shape: Sequence[Any]) -> tuple[Any, ...]:
    """`shape` with each symbolic size in kernel form (`kernel_dim`)."""
    return tuple(shape) if not is_symbolic(tuple(shape)) else tuple(kernel_dim(d) for d in shape)


def _kernel_arg(arg: Any) -> Any:
    return tuple(_kernel_arg(v) for v in arg) if type(arg) is tuple else kernel_dim(arg)


def is_empty(shape: Sequence[Any]) -> bool:
    """Whether a tensor of `shape` has no elements (a symbolic size is at least 1)."""
    return any(type(d) is int and d == 0 for d in shape)


def _may_be_positive(size: Any) -> bool:
    return size > 0 if type(size) is int else size.vmax > 0


def flat_index(idxs: Sequence[UOp], shape: Sequence[int]) -> UOp:
    """The row-major (contiguous) address of `idxs` in a tensor of `shape`."""
    total, stride = index_const(0), 1
    for idx, size in reversed(list(zip(idxs, shape, strict=True))):
        if size != 1:
            total = total + idx * stride
        stride *= size
    return simplify(total)


def unflatten(flat: UOp, shape: Sequence[int]) -> Indices:
    """The per-axis indices of the row-major address `flat` in `shape` (idiv/mod, simplified)."""
    if is_symbolic(tuple(shape)):
        return _unflatten_symbolic(flat, shape)
    out: list[UOp] = []
    stride = math.prod(shape)
    for axis, size in enumerate(shape):
        stride = stride // size if size else 0
        if size == 1:
            out.append(index_const(0))
        elif stride == 0:
            out.append(flat)
        elif axis == 0 or all(s == 1 for s in shape[:axis]):
            # the outermost axis needs no wrap: a valid flat address is below prod(shape) (invalid ones are gated)
            out.append(simplify(flat // stride))
        else:
            out.append(simplify((flat // stride) % size))
    return tuple(out)


def _unflatten_symbolic(flat: UOp, shape: Sequence[Any]) -> Indices:
    """`unflatten` where some sizes are expressions (each at least 1): strides are products of the sizes after."""
    out: list[UOp] = []
    for axis, size in enumerate(shape):
        stride = dim_prod(shape[axis + 1:])
        if type(size) is int and size == 1:
            out.append(index_const(0))
            continue
        idx = flat if type(stride) is int and stride == 1 else flat // stride
        out.append(simplify(idx if all(type(s) is int and s == 1 for s in shape[:axis]) else idx % size))
    return tuple(out)


def conjuncts(gate: UOp) -> list[UOp]:
    """The operands of a tree of boolean ANDs, left to right (anything else is one conjunct)."""
    out: list[UOp] = []
    stack = [gate]
    while stack:
        node = stack.pop()
        if node.op is Ops.AND and node.dtype is dtypes.bool:
            stack.extend(reversed(node.src))
        else:
            out.append(node)
    return out


def _offset_from(expr: UOp, flat: UOp) -> int | None:
    """d where `expr` is `flat + d` (a PAD's bounds are on its output index, the source's plus `before`)."""
    if expr is flat:
        return 0
    diff = simplify(expr - flat)
    return int(diff.arg) if diff.op is Ops.CONST else None


def _outer_bound(cond: UOp, flat: UOp, outer: UOp, stride: int) -> UOp:
    """`cond`, a bound on the address `flat` that a reshape splits, said of the outermost index `outer` =
    `flat // stride` where it means the same: `flat < k*stride` is `outer < k` and `k*stride - 1 < flat` is
    `k - 1 < outer` (k >= 1; IDIV truncates, which agrees with floor on every value the other side admits).

    Why: the split address is a sum of the outer index times its stride and the inner ones' (`f // 64 + 511 *
    (f % 64)` for a transposed 64 x 511 input), and `flat // stride` simplified is a sum of distributed terms
    (`64*r0 + (r1 + 16*r2) // 64`). A gate kept on `flat` bounds a different sum than the address holds, and the
    runtime's interval proof (runtime/bounds.py), which matches the gate's sums against the address's, cannot see
    that the address stays inside the buffer: it refused in-bounds blocked sums (issues #32, #38). Said of `outer`,
    the gate bounds exactly the sum the address is built from."""
    if cond.op is not Ops.CMPLT or cond.src[0].dtype is not dtypes.index:
        return cond
    lhs, rhs = cond.src
    if rhs.op is Ops.CONST and lhs.op is not Ops.CONST:
        offset = _offset_from(lhs, flat)
        end = None if offset is None else int(rhs.arg) - offset  # flat < end
        if end is not None and end >= stride and end % stride == 0:
            return outer < index_const(end // stride)
    if lhs.op is Ops.CONST and rhs.op is not Ops.CONST:
        offset = _offset_from(rhs, flat)
        first = None if offset is None else int(lhs.arg) - offset + 1  # first <= flat
        if first is not None and first >= stride and first % stride == 0:
            return index_const(first // stride - 1) < outer
    return cond


def _reshape(arg: Any, src_shape: Sequence[int], idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    out_shape: tuple[int, ...] = tuple(arg)
    flat = flat_index(idxs, out_shape)
    src_idxs = unflatten(flat, src_shape)
    if gate is None or is_symbolic(tuple(src_shape)):
        return src_idxs, gate
    outer_axis = next((axis for axis, size in enumerate(src_shape) if size != 1), None)
    stride = math.prod(src_shape[outer_axis + 1:]) if outer_axis is not None else 0
    if outer_axis is None or stride <= 1:
        return src_idxs, gate  # nothing split (or an empty shape): the address is `flat` itself
    parts = conjuncts(gate)
    moved = [_outer_bound(cond, flat, src_idxs[outer_axis], stride) for cond in parts]
    if all(m is c for m, c in zip(moved, parts, strict=True)):
        return src_idxs, gate
    restated: Gate = None
    for cond in moved:
        restated = and_gate(restated, cond)
    return src_idxs, restated


def _permute(arg: Any, src_shape: Sequence[int], idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    src: list[UOp] = [index_const(0)] * len(src_shape)
    for out_axis, src_axis in enumerate(arg):
        src[src_axis] = idxs[out_axis]
    return tuple(src), gate


def _expand(arg: Any, src_shape: Sequence[int], idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    # a broadcast axis has stride 0: every output position reads element 0 of the size-1 source axis
    return tuple(index_const(0) if s == 1 else i for i, s in zip(idxs, src_shape, strict=True)), gate


def _pad(arg: Any, src_shape: Sequence[int], idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    src: list[UOp] = []
    for idx, (before, after), size in zip(idxs, arg, src_shape, strict=True):
        if _may_be_positive(before):
            gate = and_gate(gate, (index_const(before - 1) if type(before) is int else before + -1) < idx)
        if _may_be_positive(after):
            gate = and_gate(gate, idx < before + size)
        src.append(simplify(idx - before) if type(before) is not int or before else idx)
    return tuple(src), gate


def _shrink(arg: Any, src_shape: Sequence[int], idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    return tuple(simplify(i + start) if start else i for i, (start, _) in zip(idxs, arg, strict=True)), gate


def _flip(arg: Any, src_shape: Sequence[int], idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    return tuple(simplify(i * -1 + (s - 1)) if f else i
                 for i, f, s in zip(idxs, arg, src_shape, strict=True)), gate


MoveIndex = Callable[[Any, Sequence[int], Indices, Gate], tuple[Indices, Gate]]

# movement op -> how its output indices become its source's indices (the whole of "views" in this scheduler)
MOVE_INDEX: Final[dict[Ops, MoveIndex]] = {
    Ops.RESHAPE: _reshape,
    Ops.PERMUTE: _permute,
    Ops.EXPAND: _expand,
    Ops.PAD: _pad,
    Ops.SHRINK: _shrink,
    Ops.FLIP: _flip,
}


def move_index(node: UOp, idxs: Indices, gate: Gate) -> tuple[Indices, Gate]:
    """The source indices and gate of movement op `node` read at output indices `idxs` under `gate`."""
    src_shape = node.src[0].shape
    assert src_shape is not None, f"{node.op!r} source has no shape"
    if len(node.src) == 1 and not is_symbolic(src_shape):
        return MOVE_INDEX[node.op](node.arg, src_shape, idxs, gate)
    arg = _kernel_arg(resolved_arg(node)) if len(node.src) > 1 else node.arg
    return MOVE_INDEX[node.op](arg, kernel_shape(src_shape), idxs, gate)


def view_address(node: UOp, idxs: Indices) -> tuple[UOp, UOp, Gate]:
    """Walk a chain of movement ops down to its BUFFER: (buffer, flat address, gate) of `node` at `idxs`.

    Used for the target of an ASSIGN, which is written through its view rather than read.
    """
    gate: Gate = None
    while node.op is not Ops.BUFFER:
        idxs, gate = move_index(node, idxs, gate)
        node = node.src[0]
    return node, idxs[0], gate
