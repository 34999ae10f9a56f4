"""The stage rules: which ops each boundary of docs/design.md §2 carries, and what each must look like there.

A stage is a `StageSpec`: the op its root must be, extra checks for the root, the ops allowed below the root with
their extra checks (on top of the GRAPH rules of verify_graph.py, which every node obeys in every stage), checks
run on every node, and whole-graph passes for rules no single node can check (one buffer id, one meaning).
Checks follow verify_graph's convention: None when fine, else the rest of a sentence naming what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from plygrad.ir.dtype import PtrDType, dtypes
from plygrad.ir.errors import IRVerifyError, ShapeError
from plygrad.ir.ops import AxisType, GroupOp, Ops
from plygrad.ir.shape import MOVEMENT_SHAPES, SAME_SHAPE_OPS, Shape, resolved_arg
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.ir.verify_graph import Check
from plygrad.ir.verify_values import dtype_word, show

# a whole-graph pass: (index in the walk order, message) of the first node breaking its rule, or None
GraphPass = Callable[[Sequence[UOp]], "tuple[int, str] | None"]


class OpRule(NamedTuple):
    """What a stage adds to an op's GRAPH row: checks, and optionally a tighter source count."""

    checks: tuple[Check, ...] = ()
    min_src: int | None = None
    max_src: int | None = None


class StageSpec(NamedTuple):
    """One stage's rules on top of the GRAPH rows; verify.py merges them once into per-op rows."""

    root: Ops | None  # the root's op (None: any root, GRAPH)
    root_rule: OpRule  # what the root adds to its op's GRAPH row
    ops: dict[Ops, OpRule] | None  # the ops allowed below the root (None: every op, GRAPH)
    every: tuple[Check, ...]  # checks of every node, the root included
    passes: tuple[GraphPass, ...]  # whole-graph rules, run in order after every node passed


# ---- checks shared by stages -----------------------------------------------------------------------------------
def _scalar(node: UOp) -> str | None:
    dt = node.dtype
    if dt.count != 1 or (isinstance(dt, PtrDType) and dt.base.count != 1):
        return f"must have a scalar dtype, got {dtype_word(dt)}: vectors exist only inside codegen"
    return None


def _bind_sources(node: UOp) -> str | None:
    var, val = node.src
    if var.op is not Ops.DEFINE_VAR or val.op is not Ops.CONST:
        return f"binds a DEFINE_VAR to a CONST: src must be (DEFINE_VAR, CONST), got ({var.op.name}, {val.op.name})"
    name, lo, hi = var.arg
    if not lo <= val.arg <= hi:
        return f"gives {name!r} the value {val.arg}, outside its range [{lo}, {hi}]"
    return None


def _op_names(nodes: Sequence[UOp]) -> str:
    return ", ".join(s.op.name for s in nodes[:6]) + (", ..." if len(nodes) > 6 else "")


def unique_var_names(order: Sequence[UOp]) -> tuple[int, str] | None:
    """Two DEFINE_VARs of one name but different range or dtype would be one variable with two meanings."""
    seen: dict[str, UOp] = {}
    define_var = Ops.DEFINE_VAR  # a local: enum attribute lookups cost more than the loop itself
    for i, node in enumerate(order):
        if node.op is define_var:
            first = seen.setdefault(node.arg[0], node)
            if first is not node:
                return (i, f"redefines variable {node.arg[0]!r} (first {show(first.arg)} "
                           f"{dtype_word(first.dtype)}, now {show(node.arg)}): one name, one variable")
    return None


# ---- TENSOR ----------------------------------------------------------------------------------------------------
def _tensor_sink_arg(node: UOp) -> str | None:
    return None if node.arg is None else f"of a tensor graph takes no argument, got {show(node.arg)}"


def _existing_buffer(node: UOp) -> str | None:
    if node.arg.id >= 0:
        return None
    return f"has id {node.arg.id}: a tensor graph names buffers the runtime holds (id >= 0)"


def _tensor_reduce_arg(node: UOp) -> str | None:
    if type(node.arg) is tuple:
        return None
    return f"of a tensor needs the argument (reduce op, axes), got {show(node.arg)}"


def _assign_target(node: UOp) -> str | None:
    target = node.src[0]
    while target.op in GroupOp.Movement:
        target = target.src[0]
    if target.op is Ops.BUFFER:
        return None
    return f"must write into a BUFFER (possibly viewed through movement ops), got a {target.op.name}"


_SCALAR_SHAPED: Final = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})


def tensor_shapes(order: Sequence[UOp]) -> tuple[int, str] | None:
    """Every tensor node has a shape (shape.py's rules; the IR never broadcasts implicitly).

    Computed here in one pass over a local table instead of through `UOp.shape`, which caches a shape on every
    node and costs several times more per node; the per-op shape functions are shape.py's own. Graphs repeat the
    same view on the same shape many times, so results are memoized by (op, arg, input shape): safe as a dict key
    because the GRAPH rules already made every movement argument exactly ints (or bools for FLIP).
    """
    shapes: dict[UOp, Shape] = {}
    views: dict[tuple[object, ...], Shape] = {}
    buffer, scalar_shaped, movement, same_as_sources = Ops.BUFFER, _SCALAR_SHAPED, MOVEMENT_SHAPES, SAME_SHAPE_OPS
    for i, node in enumerate(order):
        op = node.op
        try:
            if op in same_as_sources:
                src = node.src
                first = shapes[src[0]]
                for s in src[1:]:
                    if shapes[s] != first:
                        shown = " and ".join(str(shapes[s]) for s in src)
                        raise ShapeError(f"got sources of shapes {shown}: elementwise ops need equal shapes; "
                                         "EXPAND them to broadcast_shapes(...) first")
                shapes[node] = first
            elif op in movement:
                key = (op, node.arg, shapes[node.src[0]], node.src[1:])
                found = views.get(key)
                if found is None:
                    found = views[key] = movement[op](resolved_arg(node) if len(node.src) > 1 else node.arg, key[2])
                shapes[node] = found
            elif op in scalar_shaped:
                shapes[node] = ()
            elif op is buffer:
                shapes[node] = (node.arg.size,)
        except ShapeError as e:
            return (i, f"has no valid shape: {e}")
    return None


_TENSOR_OPS: Final[dict[Ops, OpRule]] = {
    Ops.BUFFER: OpRule((_existing_buffer,)),
    Ops.CONST: OpRule(),
    Ops.DEFINE_VAR: OpRule(),
    Ops.BIND: OpRule((_bind_sources,)),
    **{op: OpRule() for op in GroupOp.Movement | GroupOp.ALU | GroupOp.Cast},
    Ops.REDUCE: OpRule((_tensor_reduce_arg,), 1, 1),
    Ops.CONTIGUOUS: OpRule(),
    Ops.COPY: OpRule((), 1, 1),
    Ops.ASSIGN: OpRule((_assign_target,)),
    Ops.ALLREDUCE: OpRule(),
}


# ---- KERNEL ----------------------------------------------------------------------------------------------------
def _kernel_outputs(node: UOp) -> str | None:
    for i, s in enumerate(node.src):
        if s.op is not Ops.STORE and s.op is not Ops.END:
            return f"of a kernel has STOREs (or ENDs closing them) as sources, got a {s.op.name} as src[{i}]"
    return None


def _index_range(node: UOp) -> str | None:
    if node.dtype is dtypes.index:
        return None
    return f"must have dtype index (codegen lowers it), got {dtype_word(node.dtype)}"


def _index_of_param(node: UOp) -> str | None:
    if node.src[0].op is not Ops.PARAM:
        return f"must index a PARAM, got a {node.src[0].op.name}"
    if node.src[1].dtype is not dtypes.index:
        return f"needs an index of dtype index, got {dtype_word(node.src[1].dtype)}: compute indices in index"
    return None


def _load_from_index(node: UOp) -> str | None:
    if node.src[0].op is not Ops.INDEX:
        return f"must load from an INDEX, got a {node.src[0].op.name}: index the buffer first"
    ptr = node.src[0].dtype
    if isinstance(ptr, PtrDType) and node.dtype is not ptr.base:
        return f"must have its pointer's dtype {dtype_word(ptr.base)}, got {dtype_word(node.dtype)}"
    return None


def _store_to_index(node: UOp) -> str | None:
    if node.src[0].op is not Ops.INDEX:
        return f"must store to an INDEX, got a {node.src[0].op.name}: index the buffer first"
    ptr = node.src[0].dtype
    if isinstance(ptr, PtrDType) and node.src[1].dtype is not ptr.base:
        return f"must store a {dtype_word(ptr.base)} value, got {dtype_word(node.src[1].dtype)}: CAST it first"
    return None


def _kernel_reduce(node: UOp) -> str | None:
    if type(node.arg) is not Ops:
        return f"of a kernel takes Ops.ADD, Ops.MUL or Ops.MAX as its argument, got {show(node.arg)}"
    for i, r in enumerate(node.src[1:], 1):
        if r.op is not Ops.RANGE:
            return f"reduces over RANGEs: src[{i}] is a {r.op.name}"
        if r.arg[1] is not AxisType.REDUCE:
            return f"reduces over RANGEs of AxisType.REDUCE: src[{i}] has {r.arg[1]}"
    return None


def _end_sources(node: UOp) -> str | None:
    if node.src[0].op is not Ops.STORE:
        return f"closes ranges after a STORE: src[0] must be a STORE, got a {node.src[0].op.name}"
    for i, r in enumerate(node.src[1:], 1):
        if r.op is not Ops.RANGE:
            return f"closes RANGEs: src[{i}] is a {r.op.name}"
    return None


def unique_params(order: Sequence[UOp]) -> tuple[int, str] | None:
    """PARAM i is the kernel's i-th buffer: two different PARAM nodes with one index would be two buffers."""
    seen: dict[int, UOp] = {}
    param = Ops.PARAM
    for i, node in enumerate(order):
        if node.op is param:
            first = seen.setdefault(node.arg, node)
            if first is not node:
                return (i, f"{node.arg} appears with two dtypes, {dtype_word(first.dtype)} and "
                           f"{dtype_word(node.dtype)}: one PARAM per buffer")
    return None


_KERNEL_OPS: Final[dict[Ops, OpRule]] = {
    Ops.PARAM: OpRule(),
    Ops.DEFINE_VAR: OpRule(),
    Ops.CONST: OpRule(),
    Ops.RANGE: OpRule((_index_range,)),
    Ops.INDEX: OpRule((_index_of_param,)),
    Ops.LOAD: OpRule((_load_from_index,), 1, 1),
    Ops.STORE: OpRule((_store_to_index,), 2, 2),
    Ops.REDUCE: OpRule((_kernel_reduce,)),
    Ops.END: OpRule((_end_sources,)),
    **{op: OpRule() for op in GroupOp.ALU | GroupOp.Cast},
}


# ---- SCHEDULE --------------------------------------------------------------------------------------------------
def _linear_sources(node: UOp) -> str | None:
    if node.arg is None:
        return "of a schedule needs the output buffer ids (a tuple of ints, one per tensor of the SINK) as its arg"
    for i, s in enumerate(node.src):
        if s.op is not Ops.CALL:
            return f"of a schedule lists CALLs, got a {s.op.name} as src[{i}]"
    return None


def _kernel_body(node: UOp) -> str | None:
    from plygrad.ir.verify import verify

    try:
        verify(node, Stage.KERNEL)
    except IRVerifyError as e:
        return f"is the body of a CALL and must be a valid kernel: {e}"
    return None


def _kernel_interface(body: UOp) -> tuple[dict[int, PtrDType], list[UOp]]:
    params: dict[int, PtrDType] = {}
    variables: list[UOp] = []
    for n in body.toposort:
        if n.op is Ops.PARAM and isinstance(n.dtype, PtrDType):
            params[n.arg] = n.dtype
        elif n.op is Ops.DEFINE_VAR:
            variables.append(n)
    return params, variables


def _call_sources(node: UOp) -> str | None:
    body = node.src[0]
    buffers: list[UOp] = []
    binds: list[UOp] = []
    for i, s in enumerate(node.src[1:], 1):
        if s.op is Ops.BUFFER and not binds:
            buffers.append(s)
        elif s.op is Ops.BIND:
            binds.append(s)
        else:
            return f"takes (body, *BUFFERs, *BINDs): src[{i}] is a {s.op.name} ({_op_names(node.src[1:])})"
    if body.op is Ops.COPY and not body.src:
        return _copy_call(buffers, binds)
    if body.op is not Ops.SINK:
        return f"calls a kernel SINK or a COPY as src[0], got a {body.op.name}"
    params, variables = _kernel_interface(body)
    for index in sorted(params):
        ptr = params[index]
        if index >= len(buffers):
            return f"passes {len(buffers)} buffers, but its kernel reads PARAM {index}: pass one BUFFER per PARAM"
        if buffers[index].dtype is not ptr.base:
            return (f"passes a {dtype_word(buffers[index].dtype)} BUFFER as PARAM {index}, which holds "
                    f"{dtype_word(ptr.base)}")
    bound = [b.src[0] for b in binds]
    for var in bound:
        if var not in variables:
            return f"binds {var.arg[0]!r}, which its kernel does not use"
        if bound.count(var) > 1:
            return f"binds {var.arg[0]!r} twice"
    for var in variables:
        if var not in bound:
            return f"leaves the kernel variable {var.arg[0]!r} unbound: pass a BIND for it"
    return None


def _copy_call(buffers: list[UOp], binds: list[UOp]) -> str | None:
    if len(buffers) != 2 or binds:
        return f"of a COPY takes exactly two BUFFERs (dst, src) and no BINDs, got {len(buffers)} and {len(binds)}"
    dst, src = buffers
    if dst.dtype is not src.dtype or dst.arg.size != src.arg.size:
        return (f"copies between buffers of one dtype and size, got {dtype_word(dst.dtype)}[{dst.arg.size}] <- "
                f"{dtype_word(src.dtype)}[{src.arg.size}]")
    return None


def consistent_buffers(order: Sequence[UOp]) -> tuple[int, str] | None:
    """A buffer id names one piece of memory, so every BUFFER with that id must agree on device, size and dtype."""
    seen: dict[int, UOp] = {}
    buffer = Ops.BUFFER
    for i, node in enumerate(order):
        if node.op is buffer:
            first = seen.setdefault(node.arg.id, node)
            if first is not node:
                return (i, f"id {node.arg.id} is {show(node.arg)} {dtype_word(node.dtype)} here but "
                           f"{show(first.arg)} {dtype_word(first.dtype)} elsewhere: one id, one buffer")
    return None


def outputs_realized(order: Sequence[UOp]) -> tuple[int, str] | None:
    """Each output id is a buffer the runtime holds (>= 0) or one the schedule declares in a CALL."""
    root = order[-1]
    declared = {node.arg.id for node in order if node.op is Ops.BUFFER}
    for out in root.arg:
        if out < 0 and out not in declared:
            return (len(order) - 1, f"names output buffer {out}, which no CALL declares")
    return None


_SCHEDULE_OPS: Final[dict[Ops, OpRule]] = {
    Ops.CALL: OpRule((_call_sources,)),
    Ops.SINK: OpRule((_kernel_body,)),
    Ops.COPY: OpRule((), 0, 0),
    Ops.BUFFER: OpRule(),
    Ops.BIND: OpRule((_bind_sources,)),
    Ops.DEFINE_VAR: OpRule(),
    Ops.CONST: OpRule(),
}


# ---- PROGRAM ---------------------------------------------------------------------------------------------------
def _program_sources(node: UOp) -> str | None:
    if node.src[0].op is not Ops.SOURCE:
        return f"takes (SOURCE, *DEFINE_VARs): src[0] must be the SOURCE, got a {node.src[0].op.name}"
    for i, s in enumerate(node.src[1:], 1):
        if s.op is not Ops.DEFINE_VAR:
            return f"takes (SOURCE, *DEFINE_VARs): src[{i}] is a {s.op.name}"
    return None


_PROGRAM_OPS: Final[dict[Ops, OpRule]] = {Ops.SOURCE: OpRule(), Ops.DEFINE_VAR: OpRule()}

# ---- the stages ------------------------------------------------------------------------------------------------
STAGES: Final[dict[Stage, StageSpec]] = {
    Stage.GRAPH: StageSpec(None, OpRule(), None, (), ()),
    Stage.TENSOR: StageSpec(Ops.SINK, OpRule((_tensor_sink_arg,)), _TENSOR_OPS, (_scalar,),
                            (tensor_shapes, unique_var_names, consistent_buffers)),
    Stage.SCHEDULE: StageSpec(Ops.LINEAR, OpRule((_linear_sources,)), _SCHEDULE_OPS, (_scalar,),
                              (consistent_buffers, outputs_realized)),
    Stage.KERNEL: StageSpec(Ops.SINK, OpRule((_kernel_outputs,)), _KERNEL_OPS, (_scalar,),
                            (unique_params, unique_var_names)),
    Stage.PROGRAM: StageSpec(Ops.PROGRAM, OpRule((_program_sources,)), _PROGRAM_OPS, (), (unique_var_names,)),
}
assert set(STAGES) == set(Stage)
