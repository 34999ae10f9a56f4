"""Reverse-mode autograd on the tensor graph: gradients are built as more TENSOR-stage UOps (docs/autograd.md).

Each op's local derivative is one small function in `GRADIENT_RULES`, taking the upstream gradient and the forward
node and returning one gradient per source (None where the source gets none). `compute_gradient` walks the graph
from the root in reverse topological order, applying the rules and summing what reaches each node. Nothing is
computed: the result is a graph like any other, so the scheduler fuses a gradient with its neighbours (the gradient of
`(x * y).sum()` with respect to x is the one elementwise kernel `1 * y`).
"""

from __future__ import annotations

import atexit
import math
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Final, TypeAlias

from plygrad.frontend import blocked, view_write
from plygrad.frontend.gradient_marks import custom_gradient, substitute_keeping_marks, wants_contiguous_gradient
from plygrad.frontend.lazy import LazyTensor, const_uop, default_device, is_gradient_stop, movement, shape_of
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.weaklist import WeakList
from plygrad.ir import DType, Ops, UOp, dtypes
from plygrad.ir.shape import dim_add, dim_max, dim_sub, resolved_arg
from plygrad.runtime import Buffer

Grads: TypeAlias = "tuple[UOp | None, ...]"
Rule: TypeAlias = Callable[[UOp, UOp], Grads]

LN_2: Final = math.log(2.0)

# Leaves: tensors whose requires_grad was set by the user (not derived from an op). backward() fills their .grad.
# Keyed by id so that looking one up never calls Tensor.__eq__ (which builds a comparison).
LEAVES: Final[weakref.WeakValueDictionary[int, LazyTensor]] = weakref.WeakValueDictionary()


def is_leaf(t: LazyTensor) -> bool:
    return LEAVES.get(id(t)) is t


# Undecided leaves: realized floating-point tensors whose requires_grad is None (tinygrad's default: data loaded into
# a Tensor, a realized result of such tensors). backward() of a loss whose own requires_grad is None (nothing on
# its path asked for gradients, and not everything opted out) fills their .grad, as tinygrad's does; each is checked
# again when it is used (its requires_grad or graph may have changed since). Weak; a WeakList (every realized float
# result is added), so a tensor realized twice is listed twice and backward() keeps one of each.
UNDECIDED: Final[WeakList[LazyTensor]] = WeakList()


def record_undecided(t: LazyTensor) -> None:
    if t._requires_grad is None and t.dtype.is_float:
        UNDECIDED.add(t)


# Realized tensors that require grad: their buffer view -> the graph (and the Buffers it reads) they had before.
# Graphs built after a realize read the buffer, yet gradients must still flow through what computed it, so
# gradients are taken through `unrealized(root)`. Kept while the view node lives (some tensor or graph holds it).
REALIZED: Final[weakref.WeakKeyDictionary[UOp, tuple[UOp, frozenset[Buffer]]]] = weakref.WeakKeyDictionary()


# A write of a whole tensor autograd recorded: its ASSIGN -> the version node whose REALIZED graph blends the value
# into the old contents. Read through that graph, the old contents stay on the path (with gradient zero where
# written), so their leaves get zeros as in PyTorch (`y = x.clone(); y.copy_(v)`: x.grad is zeros, not None).
WHOLE_WRITES: Final[weakref.WeakKeyDictionary[UOp, UOp]] = weakref.WeakKeyDictionary()

# Buffers held here must go before interpreter shutdown tears down the backends that free them.
atexit.register(REALIZED.clear)


def record_realized(view: UOp, graph: UOp, inputs: frozenset[Buffer]) -> None:
    REALIZED[view] = (graph, inputs)


def unrealized(root: UOp) -> tuple[UOp, frozenset[Buffer]]:
    """`root` with every realized view that requires grad replaced by the graph that computed it (repeatedly, as
    those graphs may read other such views), every ASSIGN by the value it writes (the values a read of it sees;
    the write itself is no part of a gradient), and the Buffers those graphs read."""
    inputs: frozenset[Buffer] = frozenset()
    while True:
        root = _without_writes(root)
        found = {n: REALIZED[n] for n in root.sparents() if n.op is Ops.RESHAPE and n in REALIZED} if REALIZED else {}
        if not found:
            break
        inputs = inputs.union(*(i for _, i in found.values()))
        # detach() and contiguous_backward() marks above a swapped view must survive the rebuild
        root = substitute_keeping_marks(root, {n: g for n, (g, _) in found.items()})
    return root, inputs


def _without_writes(root: UOp) -> UOp:
    """`root` with each ASSIGN replaced by its value (again while values hold ASSIGNs: they are not walked), or by
    its version node where autograd recorded the write (WHOLE_WRITES), but for a pending write into a leaf, which is
    that leaf's node (gradients are asked for it)."""
    leaves: set[UOp] | None = None
    while True:
        writes = {n: WHOLE_WRITES.get(n, n.src[1]) for n in root.sparents() if n.op is Ops.ASSIGN}
        if writes:
            if leaves is None:
                leaves = {t.uop for t in LEAVES.values()}
            writes = {n: v for n, v in writes.items() if n not in leaves}
        if not writes:
            return root
        root = substitute_keeping_marks(root, writes)


def record_write(chain: view_write.ViewChain, value: UOp, inputs: frozenset[Buffer], wants: bool,
                 into_grad_view: bool) -> tuple[UOp, UOp] | None:
    """A write of `value` through the view `chain` is being made: when the value requires grad (`wants`) or the
    buffer's base view has a graph here, the tensor after the write gets a node of its own (view_write.new_version)
    whose graph is the old one (or the buffer's own contents) with `value` blended in where it is written. Returns
    (the base view, its new version), or None when nothing is recorded. A view of a leaf that requires grad cannot
    be written when the view requires grad too (`into_grad_view`; RuntimeError, as in PyTorch: the leaf would no
    longer be what gradients are taken for); a view of its `detach()` can."""
    found = view_write.base_view(chain, lambda n: n in REALIZED or STATE.is_version(n))
    if found is None:
        return None
    above, base = found
    if above and into_grad_view and any(t.uop is base and t._requires_grad for t in LEAVES.values()):
        raise RuntimeError(f"assign: a view of a leaf tensor that requires grad (shape {shape_of(base)}) cannot be "
                           "written in place while gradients are recorded; do it under `with no_grad():`, or on a "
                           "clone()")
    prior = REALIZED.get(base)
    if prior is None and not wants:
        return None
    old, old_inputs = prior if prior is not None else (base, frozenset())
    if prior is not None:  # a value computed from the tensor read it before this write: that graph
        value = substitute_keeping_marks(value, {base: old})
    version = view_write.new_version(base)
    REALIZED[version] = (view_write.blend(value, above, old), old_inputs | inputs)
    return base, version


# ---- building blocks --------------------------------------------------------------------------------------------
def _const(like: UOp, value: float) -> UOp:
    return const_uop(like.dtype, value, shape_of(like))


def _alu(op: Ops, *srcs: UOp) -> UOp:
    return srcs[0].alu(op, *srcs[1:])


def _where(cond: UOp, a: UOp, b: UOp) -> UOp:
    return UOp(Ops.WHERE, a.dtype, (cond, a, b))


def _to_float(mask: UOp, like: UOp) -> UOp:
    return UOp(Ops.CAST, like.dtype, (mask,))


def _reduce(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE, x.dtype, (x,), (op, axes))


# a gradient summed over a long broadcast is blocked (`_float_sum`) while its first level's partial sums, all outputs
# together, stay within this many elements (4 MiB of float32): a bias or a scalar's gradient, not a matmul weight's
PARTIALS_BUDGET: Final = 1 << 20


def _sum(x: UOp, axes: tuple[int, ...]) -> UOp:
    """A sum keeping the reduced axes (size 1); half-precision sums accumulate in float32, as PyTorch's do."""
    if not axes:
        return x
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        return UOp(Ops.CAST, x.dtype, (_float_sum(UOp(Ops.CAST, dtypes.float32, (x,)), axes),))
    return _float_sum(x, axes) if x.dtype.is_float else _reduce(x, Ops.ADD, axes)


def _float_sum(x: UOp, axes: tuple[int, ...]) -> UOp:
    """A float gradient summed back over a broadcast, blocked as `Tensor.sum` is (blocked.py) where it is long: one
    serial float32 accumulator over 2^24 terms stops growing, and over 2^20 drifts (the gradient of a scalar
    broadcast against 1024 x 16384 values was 0.76 off, the forward sum 0.006).

    Not where the partial sums would outgrow PARTIALS_BUDGET: a matmul's weight gradient sums a product that is
    never in memory (x broadcast against g) over the batch, and its partials would be 128 or more times the
    weight; that sum stays one REDUCE that codegen tiles, accumulating serially like a GEMM's (PyTorch's too)."""
    shape = shape_of(x)
    if any(type(shape[a]) is not int for a in axes):
        return _reduce(x, Ops.ADD, axes)
    n = math.prod(shape[a] for a in axes)
    outputs = math.prod(d if type(d) is int else dim_max(d) for i, d in enumerate(shape) if i not in axes)
    if n <= blocked.SPLIT_ABOVE or outputs * blocked.partials(n) > PARTIALS_BUDGET:
        return _reduce(x, Ops.ADD, axes)
    return blocked.blocked_sum(x, axes)


def _expand(x: UOp, shape: tuple[int, ...]) -> UOp:
    return x if shape_of(x) == shape else movement(x, Ops.EXPAND, shape)


def _reshape(x: UOp, shape: tuple[int, ...]) -> UOp:
    return x if shape_of(x) == shape else movement(x, Ops.RESHAPE, shape)


def _device_of(node: UOp) -> str | None:
    """The device a tensor node lives on: its nearest COPY's or ALLREDUCE's target or BUFFER's device (None for
    constants)."""
    for n in reversed(list(node.sparents())):
        if n.op is Ops.COPY:
            return str(n.arg)
        if n.op is Ops.ALLREDUCE:
            return str(n.arg[1])
        if n.op is Ops.BUFFER:
            return str(n.arg.device)
    return None


# ---- the rules: (upstream gradient, forward node) -> a gradient per source ----------------------------------------
def _fdiv(g: UOp, n: UOp) -> Grads:
    y = n.src[1]
    return _alu(Ops.FDIV, g, y), _alu(Ops.NEG, _alu(Ops.FDIV, _alu(Ops.MUL, g, n), y))  # d(x/y)/dy = -(x/y)/y


def _pow(g: UOp, n: UOp) -> Grads:
    """PyTorch's pow_backward: no gradient to x where the exponent is 0, none to y where x is 0 and y >= 0."""
    x, y = n.src
    zero = _const(n, 0.0)
    dx = _alu(Ops.MUL, g, _alu(Ops.MUL, y, _alu(Ops.POW, x, _alu(Ops.SUB, y, _const(n, 1.0)))))
    dx = _where(_alu(Ops.CMPEQ, y, zero), zero, dx)
    log_x = _alu(Ops.MUL, _alu(Ops.LOG2, x), _const(n, LN_2))
    dy = _alu(Ops.MUL, g, _alu(Ops.MUL, n, log_x))
    dy = _where(_alu(Ops.CMPEQ, x, zero), _where(_alu(Ops.CMPLT, y, zero), dy, zero), dy)
    return dx, dy


def _max(g: UOp, n: UOp) -> Grads:
    """torch.maximum: ties split the gradient in halves; the smaller source gets none."""
    x, y = n.src
    zero = _const(n, 0.0)
    shared = _where(_alu(Ops.CMPEQ, x, y), _alu(Ops.MUL, g, _const(n, 0.5)), g)
    return _where(_alu(Ops.CMPLT, x, y), zero, shared), _where(_alu(Ops.CMPLT, y, x), zero, shared)


def _cast(g: UOp, n: UOp) -> Grads:
    src = n.src[0]
    return (UOp(Ops.CAST, src.dtype, (g,)) if src.dtype.is_float else None,)


def _reduce_rule(g: UOp, n: UOp) -> Grads:
    op, axes = n.arg
    x = n.src[0]
    shape = shape_of(x)
    if op is Ops.ADD:
        return (_expand(g, shape),)
    if op is Ops.MAX:  # like torch.amax: the gradient is split equally among the elements equal to the max
        hit = _to_float(_alu(Ops.CMPEQ, x, _expand(n, shape)), x)
        share = _alu(Ops.FDIV, g, _sum(hit, axes))
        return (_alu(Ops.MUL, hit, _expand(share, shape)),)
    if op is Ops.MUL:
        return (_prod_grad(g, n, x, axes),)
    raise NotImplementedError(f"autograd: no gradient rule for REDUCE {op.name}")


def _prod_grad(g: UOp, n: UOp, x: UOp, axes: tuple[int, ...]) -> UOp:
    """d prod / d x_i is the product of the other elements, computed without dividing by zero: with no zero in the
    group it is prod / x_i; with exactly one zero only that element gets the product of the others; with more, none."""
    shape = shape_of(x)
    zero, one = _const(x, 0.0), _const(x, 1.0)
    is_zero = _alu(Ops.CMPEQ, x, zero)
    nonzero_prod = _expand(_reduce(_where(is_zero, one, x), Ops.MUL, axes), shape)
    zeros = _expand(_sum(_to_float(is_zero, x), axes), shape)
    at_zero = _where(_alu(Ops.CMPEQ, zeros, one), nonzero_prod, zero)
    elsewhere = _where(_alu(Ops.CMPEQ, zeros, zero), _alu(Ops.FDIV, nonzero_prod, x), zero)
    return _alu(Ops.MUL, _expand(g, shape), _where(is_zero, at_zero, elsewhere))


def _reshape_rule(g: UOp, n: UOp) -> Grads:
    if is_gradient_stop(n):
        return (None,)
    if wants_contiguous_gradient(n):  # Tensor.contiguous_backward() (gradient_marks.py)
        g = UOp(Ops.CONTIGUOUS, g.dtype, (g,))
    return (_reshape(g, shape_of(n.src[0])),)


def _permute(g: UOp, n: UOp) -> Grads:
    inverse = tuple(sorted(range(len(n.arg)), key=lambda i: n.arg[i]))
    return (movement(g, Ops.PERMUTE, inverse),)


def _expand_rule(g: UOp, n: UOp) -> Grads:
    shape = shape_of(n.src[0])
    axes = tuple(i for i, (a, b) in enumerate(zip(shape, shape_of(n), strict=True)) if a != b)
    return (_sum(g, axes),)


def _pad(g: UOp, n: UOp) -> Grads:
    shape = shape_of(n.src[0])
    arg = resolved_arg(n)  # symbolic amounts in place of their None entries
    return (movement(g, Ops.SHRINK, tuple((b, dim_add(b, s)) for (b, _), s in zip(arg, shape, strict=True))),)


def _shrink(g: UOp, n: UOp) -> Grads:
    shape = shape_of(n.src[0])
    arg = resolved_arg(n)
    return (movement(g, Ops.PAD, tuple((b, dim_sub(s, e)) for (b, e), s in zip(arg, shape, strict=True))),)


def _copy(g: UOp, n: UOp) -> Grads:
    device = _device_of(n.src[0])
    return (UOp(Ops.COPY, g.dtype, (g,), device if device is not None else default_device()),)


def _allreduce(g: UOp, n: UOp) -> Grads:
    """Each source gets the result's gradient on its own device: of a sum as it is, of a max only where the source
    holds the maximum (a value tied on several devices gives each the whole gradient), of a product times the
    product of the others (result / source, so a zero source gets NaN). Every device's copy of the result is its own
    ALLREDUCE node, so the gradients of all of them add up at each source, as the sum rule wants."""
    op, target = n.arg

    def on(x: UOp, device: str | None) -> UOp:
        return x if device is None or device == target else UOp(Ops.COPY, x.dtype, (x,), device)

    grads: list[UOp | None] = []
    for src in n.src:
        device = _device_of(src)
        if op is Ops.MAX:
            grads.append(_where(_alu(Ops.CMPEQ, src, on(n, device)), on(g, device), _const(src, 0.0)))
        elif op is Ops.MUL:
            grads.append(_alu(Ops.FDIV, on(_alu(Ops.MUL, g, n), device), src))
        else:
            grads.append(on(g, device))
    return tuple(grads)


def _none(count: int) -> Rule:
    return lambda g, n: (None,) * count


GRADIENT_RULES: Final[dict[Ops, Rule]] = {
    Ops.ADD: lambda g, n: (g, g),
    Ops.SUB: lambda g, n: (g, _alu(Ops.NEG, g)),
    Ops.MUL: lambda g, n: (_alu(Ops.MUL, g, n.src[1]), _alu(Ops.MUL, g, n.src[0])),
    Ops.MULACC: lambda g, n: (_alu(Ops.MUL, g, n.src[1]), _alu(Ops.MUL, g, n.src[0]), g),
    Ops.FDIV: _fdiv,
    Ops.NEG: lambda g, n: (_alu(Ops.NEG, g),),
    Ops.EXP2: lambda g, n: (_alu(Ops.MUL, g, _alu(Ops.MUL, n, _const(n, LN_2))),),
    Ops.LOG2: lambda g, n: (_alu(Ops.FDIV, g, _alu(Ops.MUL, n.src[0], _const(n, LN_2))),),
    Ops.SQRT: lambda g, n: (_alu(Ops.FDIV, g, _alu(Ops.MUL, n, _const(n, 2.0))),),
    Ops.RECIPROCAL: lambda g, n: (_alu(Ops.NEG, _alu(Ops.MUL, _alu(Ops.MUL, g, n), n)),),
    Ops.SIN: lambda g, n: (_alu(Ops.MUL, g, _alu(Ops.SIN, _alu(Ops.SUB, _const(n, math.pi / 2), n.src[0]))),),
    Ops.POW: _pow,
    Ops.MAX: _max,
    Ops.WHERE: lambda g, n: (None, _where(n.src[0], g, _const(n, 0.0)), _where(n.src[0], _const(n, 0.0), g)),
    Ops.CAST: _cast,
    Ops.TRUNC: _none(1),  # piecewise constant: zero gradient, like torch.trunc/floor/ceil/round
    Ops.BITCAST: _none(1),
    Ops.REDUCE: _reduce_rule,
    Ops.RESHAPE: _reshape_rule,
    Ops.PERMUTE: _permute,
    Ops.EXPAND: _expand_rule,
    Ops.PAD: _pad,
    Ops.SHRINK: _shrink,
    Ops.FLIP: lambda g, n: (movement(g, Ops.FLIP, n.arg),),
    Ops.CONTIGUOUS: lambda g, n: (g,),
    Ops.COPY: _copy,
    Ops.ALLREDUCE: _allreduce,
    Ops.ASSIGN: lambda g, n: (None, g),  # the old contents are overwritten: the gradient goes to the value
    **{op: _none(2) for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.IDIV, Ops.MOD,
                               Ops.SHL, Ops.SHR, Ops.THREEFRY)},
}
"""The local gradient of every TENSOR-stage op that computes something (leaves have no sources to pass to)."""


# ---- the walk -------------------------------------------------------------------------------------------------
def compute_gradient(root: UOp, root_grad: UOp, targets: Collection[UOp]) -> dict[UOp, UOp]:
    """The gradient of `root` (seeded with `root_grad`, of root's shape and dtype) with respect to each target
    node it reaches through differentiable ops.

    Iterative (graphs can be tens of thousands of nodes deep) and pruned: only floating-point nodes on a path to a
    target get a gradient, and nothing passes through a gradient stop (`detach()`, no_grad results).
    """
    wanted = set(targets)
    order = list(root.sparents())
    reaches: set[UOp] = set()
    for node in order:
        if node in wanted or (node.dtype.is_float and not is_gradient_stop(node)
                              and any(s in reaches for s in node.src)):
            reaches.add(node)
    grads: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(order):
        g = grads.get(node)
        if g is None or not node.src or not any(s in reaches for s in node.src):
            continue
        custom = custom_gradient(node)
        if custom is not None:  # gradient_marks.custom_gradient_mark: straight to the operands, not through the graph
            srcs, src_grads = custom[0], custom[1](g, custom[0])
        else:
            rule = GRADIENT_RULES.get(node.op)
            if rule is None:
                raise NotImplementedError(f"autograd: no gradient rule for {node.op.name} ({node.dtype.name}); "
                                          "detach() the input of this op if it needs no gradient")
            srcs, src_grads = node.src, rule(g, node)
        if len(src_grads) < len(srcs):  # a view's symbolic sizes (extra sources) get no gradient
            src_grads = (*src_grads, *(None,) * (len(srcs) - len(src_grads)))
        for src, src_grad in zip(srcs, src_grads, strict=True):
            if src_grad is None or src not in reaches:
                continue
            found = grads.get(src)
            grads[src] = src_grad if found is None else _alu(Ops.ADD, found, src_grad)
    return {t: grads[t] for t in wanted if t in grads}


def seed_gradient(dtype: DType, shape: Sequence[int]) -> UOp:
    """The gradient of a scalar loss with respect to itself: ones."""
    return const_uop(dtype, 1.0, tuple(shape))
