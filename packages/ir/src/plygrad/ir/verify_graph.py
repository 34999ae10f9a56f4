"""The GRAPH rules: what every node obeys in every stage (arity, argument types, dtype sanity).

Each op has one row: how many sources it takes and the checks that follow. A check looks at one node (its
sources are already verified, because the verifier walks in topological order) and returns None when the node
is fine, or the rest of a sentence that starts with the node's name: "must have a bool condition, got int32".
The verifier (verify.py) adds the stage, the node's position and its path from the root.

Checks never raise: arguments come from untrusted bytes, so every field is type-checked before it is used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final, NamedTuple

from plygrad.ir.dtype import MAX_VECTOR_WIDTH, AddrSpace, DType, PtrDType, dtypes
from plygrad.ir.ops import AxisType, GroupOp, Ops
from plygrad.ir.records import KernelInfo
from plygrad.ir.shape import size_expr_problem
from plygrad.ir.uop import UOp
from plygrad.ir.verify_values import (
    buffer_ref_problem,
    const_value_problem,
    dtype_word,
    field_of,
    is_int,
    is_int_pairs,
    is_int_tuple,
    is_memory_dtype,
    is_value_dtype,
    opts_problem,
    program_info_problem,
    show,
    tensor_core_problem,
)

Check = Callable[[UOp], "str | None"]
ANY: Final = sys.maxsize  # "any number of sources"
_BOOL: Final = dtypes.bool
_VAR_DTYPES: Final = (dtypes.index, dtypes.int32, dtypes.int64)


class Row(NamedTuple):
    """One op's rules: source count bounds (inclusive) and the checks run in order after the count is right."""

    min_src: int
    max_src: int
    checks: tuple[Check, ...]


# ---- argument checks -------------------------------------------------------------------------------------------
def arg_none(node: UOp) -> str | None:
    return None if node.arg is None else f"takes no argument, got {show(node.arg)}"


def _sink_arg(node: UOp) -> str | None:
    arg = node.arg
    if arg is None:
        return None
    if type(arg) is not KernelInfo:
        return f"takes None or a KernelInfo argument, got {show(arg)}"
    name = field_of(arg, "name")
    if not isinstance(name, str):
        return f"needs a str KernelInfo.name, got {show(name)}"
    return opts_problem(arg.opts)


def _buffer_arg(node: UOp) -> str | None:
    return buffer_ref_problem(node.arg)


def _const_arg(node: UOp) -> str | None:
    return const_value_problem(node.dtype, node.arg)


def _define_var_arg(node: UOp) -> str | None:
    arg = node.arg
    if not (type(arg) is tuple and len(arg) == 3 and isinstance(arg[0], str) and arg[0]
            and is_int(arg[1]) and is_int(arg[2])):
        return f"needs the argument (name: non-empty str, min: int, max: int), got {show(arg)}"
    if arg[1] > arg[2]:
        return f"{arg[0]!r} has an empty range: min {arg[1]} > max {arg[2]}"
    if node.dtype is not dtypes.index and not (node.dtype.min <= arg[1] and arg[2] <= node.dtype.max):
        return f"{arg[0]!r} range [{arg[1]}, {arg[2]}] does not fit its dtype {dtype_word(node.dtype)}"
    return None


def _dims_arg(node: UOp) -> str | None:
    arg = node.arg
    if is_int_tuple(arg) and (not arg or min(arg) >= 0):
        return None if len(node.src) == 1 else _symbolic_sizes(node, 0)
    if type(arg) is tuple and all(v is None or (type(v) is int and v >= 0) for v in arg):
        return _symbolic_sizes(node, arg.count(None))
    return f"needs a tuple of non-negative ints (None for a symbolic size), got {show(arg)}"


def _size_pairs_arg(node: UOp) -> str | None:
    arg = node.arg
    if is_int_pairs(arg):
        return None if len(node.src) == 1 else _symbolic_sizes(node, 0)
    if type(arg) is tuple and all(type(p) is tuple and len(p) == 2 and all(v is None or type(v) is int for v in p)
                                  for p in arg):
        return _symbolic_sizes(node, sum(p.count(None) for p in arg))
    return f"needs a tuple of (int, int) pairs (None for a symbolic amount), got {show(arg)}"


def _symbolic_sizes(node: UOp, wanted: int) -> str | None:
    """A movement op's extra sources are its symbolic sizes, one per None of its argument: index-dtype expressions
    of constants and variables (shape.py)."""
    extra = node.src[1:]
    if len(extra) != wanted:
        return f"has {wanted} symbolic size{'s' if wanted != 1 else ''} (None entries) but {len(extra)} size sources"
    for i, size in enumerate(extra, 1):
        n = size_expr_problem(size)
        if n is not None:
            return (f"src[{i}] must be a size: an index-dtype expression of CONST, DEFINE_VAR and BIND, but it "
                    f"holds a {n.op.name} of dtype {dtype_word(n.dtype)}")
    return None


def _permute_arg(node: UOp) -> str | None:
    return None if is_int_tuple(node.arg) else f"needs a tuple of axis ints, got {show(node.arg)}"


def _pairs_arg(node: UOp) -> str | None:
    return None if is_int_pairs(node.arg) else f"needs a tuple of (int, int) pairs, got {show(node.arg)}"


def _flip_arg(node: UOp) -> str | None:
    arg = node.arg
    if type(arg) is tuple and all(type(v) is bool for v in arg):
        return None
    return f"needs a tuple of bools (one per axis), got {show(arg)}"


def _device_arg(node: UOp) -> str | None:
    if isinstance(node.arg, str) and node.arg:
        return None
    return f"needs the target device name (a non-empty str) as its argument, got {show(node.arg)}"


def _linear_arg(node: UOp) -> str | None:
    if node.arg is None or is_int_tuple(node.arg):
        return None
    return f"takes None or a tuple of buffer ids (ints), got {show(node.arg)}"


def _call_arg(node: UOp) -> str | None:
    return None if node.arg is None or isinstance(node.arg, str) else f"takes None or a name, got {show(node.arg)}"


def _param_arg(node: UOp) -> str | None:
    arg = node.arg
    return None if is_int(arg) and arg >= 0 else f"needs its parameter index (an int >= 0), got {show(arg)}"


def _slot_arg(node: UOp) -> str | None:
    return None if is_int(node.arg) else f"needs an int slot number, got {show(node.arg)}"


def _range_arg(node: UOp) -> str | None:
    arg = node.arg
    if type(arg) is tuple and len(arg) == 2 and is_int(arg[0]) and isinstance(arg[1], AxisType):
        return None
    return f"needs the argument (axis: int, AxisType), got {show(arg)}"


def _reduce_arg(node: UOp) -> str | None:
    arg = node.arg
    if type(arg) is Ops and arg in GroupOp.ReduceOps:
        return None  # the kernel form
    if type(arg) is tuple and len(arg) == 2 and type(arg[0]) is Ops and arg[0] in GroupOp.ReduceOps \
            and is_int_tuple(arg[1]):
        return None  # the tensor form
    return f"needs Ops.ADD, Ops.MUL or Ops.MAX (kernel) or (that op, axes tuple) (tensor), got {show(arg)}"


def _name_arg(node: UOp) -> str | None:
    return None if isinstance(node.arg, str) and node.arg else f"needs a non-empty str, got {show(node.arg)}"


def _gep_arg(node: UOp) -> str | None:
    arg, count = node.arg, node.src[0].dtype.count
    if is_int_tuple(arg) and 0 < len(arg) <= MAX_VECTOR_WIDTH and all(0 <= lane < count for lane in arg):
        return None
    return f"needs a non-empty tuple of at most {MAX_VECTOR_WIDTH} lane numbers 0..{count - 1}, got {show(arg)}"


def _wmma_arg(node: UOp) -> str | None:
    return tensor_core_problem(node.arg)


def _program_arg(node: UOp) -> str | None:
    return program_info_problem(node.arg)


# ---- dtype checks ----------------------------------------------------------------------------------------------
def void(node: UOp) -> str | None:
    return None if node.dtype is dtypes.void else f"must have dtype void, got {dtype_word(node.dtype)}"


def value(node: UOp) -> str | None:
    if is_value_dtype(node.dtype):
        return None
    return f"must have a value dtype (not void, not a pointer), got {dtype_word(node.dtype)}"


def _memory_dtype(node: UOp) -> str | None:
    if is_memory_dtype(node.dtype):
        return None
    return f"must have a buffer element dtype (one of dtypes.all()), got {dtype_word(node.dtype)}"


def _var_dtype(node: UOp) -> str | None:
    if node.dtype in _VAR_DTYPES:
        return None
    return f"must have dtype index, int32 or int64, got {dtype_word(node.dtype)}"


def _value_like_src0(node: UOp) -> str | None:
    """A value op that keeps its source's dtype (movement, CONTIGUOUS, ASSIGN, REDUCE)."""
    if node.dtype is node.src[0].dtype and is_value_dtype(node.dtype):
        return None
    return value(node) or _same_as_src0(node)


def _same_as_src0(node: UOp) -> str | None:
    if node.dtype is node.src[0].dtype:
        return None
    return f"must have its source's dtype {dtype_word(node.src[0].dtype)}, got {dtype_word(node.dtype)}"


def _sources_same_dtype(node: UOp) -> str | None:
    first = node.src[0].dtype
    for i, s in enumerate(node.src[1:], 1):
        if s.dtype is not first:
            return f"needs sources of one dtype: src[0] is {dtype_word(first)}, src[{i}] is {dtype_word(s.dtype)}"
    return None


def _noop_dtype(node: UOp) -> str | None:
    return void(node) if not node.src else _same_as_src0(node)


def _copy_form(node: UOp) -> str | None:
    if node.src:  # tensor stage: COPY(x) to another device
        return _device_arg(node) or _same_as_src0(node)
    return void(node) or arg_none(node)  # schedule stage: the body of a copy CALL


def _allreduce_arg(node: UOp) -> str | None:
    arg = node.arg
    if (type(arg) is tuple and len(arg) == 2 and type(arg[0]) is Ops and arg[0] in GroupOp.ReduceOps
            and isinstance(arg[1], str) and arg[1]):
        return None
    return f"needs the argument (Ops.ADD, Ops.MUL or Ops.MAX, the result's device name), got {show(arg)}"


def _integer_loop(node: UOp) -> str | None:
    if not node.dtype.is_int or type(node.dtype) is not DType or node.dtype.count != 1:
        return f"must have an integer dtype, got {dtype_word(node.dtype)}"
    if node.src[0].dtype is not node.dtype:
        return f"needs an end of its own dtype {dtype_word(node.dtype)}, got {dtype_word(node.src[0].dtype)}"
    return None


def _pointer_in(space: AddrSpace) -> Check:
    def check(node: UOp) -> str | None:
        dt = node.dtype
        if type(dt) is PtrDType and dt.addrspace is space and is_value_dtype(dt.base):
            return None
        return f"must have a pointer dtype in {space.value} memory (e.g. dtypes.float32.ptr(n)), got {dtype_word(dt)}"

    check.__name__ = f"pointer_in_{space.value}"
    return check


def _index_dtypes(node: UOp) -> str | None:
    buf = node.src[0].dtype
    if type(buf) is not PtrDType:
        return f"must index a pointer, got src[0] of dtype {dtype_word(buf)}"
    if node.dtype is not buf:
        return f"must have its buffer's pointer dtype {dtype_word(buf)}, got {dtype_word(node.dtype)}"
    if not node.src[1].dtype.is_int or type(node.src[1].dtype) is not DType:
        return f"needs an integer index, got src[1] of dtype {dtype_word(node.src[1].dtype)}"
    if len(node.src) == 3 and node.src[2].dtype is not dtypes.bool:
        return f"needs a bool gate, got src[2] of dtype {dtype_word(node.src[2].dtype)}"
    return None


def _load_dtype(node: UOp) -> str | None:
    ptr = node.src[0].dtype
    if type(ptr) is not PtrDType:
        return f"must load through a pointer, got src[0] of dtype {dtype_word(ptr)}"
    if node.dtype.scalar() is not ptr.base.scalar():
        return f"must have its pointer's element dtype {dtype_word(ptr.base)}, got {dtype_word(node.dtype)}"
    return None


def _store_dtypes(node: UOp) -> str | None:
    ptr = node.src[0].dtype
    if type(ptr) is not PtrDType:
        return f"must store through a pointer, got src[0] of dtype {dtype_word(ptr)}"
    if node.src[1].dtype.scalar() is not ptr.base.scalar():
        return (f"must store a value of its pointer's element dtype {dtype_word(ptr.base)}, got "
                f"{dtype_word(node.src[1].dtype)}: CAST the value first")
    return None


def _bool_condition(node: UOp) -> str | None:
    if node.src[0].dtype is dtypes.bool:
        return None
    return f"needs a bool condition, got src[0] of dtype {dtype_word(node.src[0].dtype)}"


def _endif_source(node: UOp) -> str | None:
    return None if node.src[0].op is Ops.IF else f"must close an IF, got {node.src[0].op.name}"


def _vectorize_dtypes(node: UOp) -> str | None:
    first = node.src[0].dtype
    if not is_value_dtype(first) or first.count != 1:
        return f"builds vectors from scalars, got src[0] of dtype {dtype_word(first)}"
    if len(node.src) > MAX_VECTOR_WIDTH:
        return f"builds at most {MAX_VECTOR_WIDTH} lanes, got {len(node.src)}"
    problem = _sources_same_dtype(node)
    if problem is not None:
        return problem
    wanted = first.vec(len(node.src))
    return None if node.dtype is wanted else f"must have dtype {dtype_word(wanted)}, got {dtype_word(node.dtype)}"


def _gep_dtype(node: UOp) -> str | None:
    if not is_value_dtype(node.src[0].dtype):
        return f"takes lanes of a vector value, got src[0] of dtype {dtype_word(node.src[0].dtype)}"
    problem = _gep_arg(node)
    if problem is not None:
        return problem
    wanted = node.src[0].dtype.scalar().vec(len(node.arg))
    return None if node.dtype is wanted else f"must have dtype {dtype_word(wanted)}, got {dtype_word(node.dtype)}"


def _cast_dtypes(node: UOp) -> str | None:
    src = node.src[0].dtype
    if not is_value_dtype(node.dtype) or not is_value_dtype(src):
        return f"converts values, got {dtype_word(src)} -> {dtype_word(node.dtype)}"
    if src.count != node.dtype.count:
        return f"keeps the vector width: {dtype_word(src)} -> {dtype_word(node.dtype)} changes it"
    if node.op is Ops.BITCAST and src.itemsize != node.dtype.itemsize:
        return (f"needs dtypes of one itemsize, got {dtype_word(src)} ({src.itemsize} bytes) -> "
                f"{dtype_word(node.dtype)} ({node.dtype.itemsize} bytes)")
    return None


# ALU ops bool supports (as scalar.exec_alu folds them); others (NEG, SUB, IDIV, shifts...) need a CAST first
BOOL_ALU: Final = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                             Ops.WHERE})
_BITWISE: Final = frozenset({Ops.AND, Ops.OR, Ops.XOR})
_INT_DTYPES: Final = frozenset(dt for dt in (*dtypes.all(), dtypes.index) if dt.is_int)
_FLOAT_DTYPES: Final = frozenset(dt for dt in dtypes.all() if dt.is_float)


def _operand_dtypes(op: Ops) -> frozenset[DType]:
    """The scalar dtypes an ALU op computes on (GroupOp.IntegerOnly / FloatOnly, THREEFRY on uint64, bool's few)."""
    if op is Ops.THREEFRY:
        return frozenset({dtypes.uint64})
    with_bool = frozenset({dtypes.bool}) if op in BOOL_ALU else frozenset()
    if op in GroupOp.IntegerOnly:
        return _INT_DTYPES | with_bool
    if op in GroupOp.FloatOnly:
        return _FLOAT_DTYPES
    return _INT_DTYPES | _FLOAT_DTYPES | with_bool


class _AluSpec(NamedTuple):
    is_where: bool
    is_comparison: bool
    accepted: frozenset[DType]  # the scalar operand dtypes
    # operand dtype -> the dtype the result must have, filled as operand dtypes are met: a graph uses few, and the
    # dict hit replaces the scalar()/vec() work on every node
    results: dict[DType, DType]


# read once per node, so no enum lookups
_ALU_SPEC: Final[dict[Ops, _AluSpec]] = {
    op: _AluSpec(op is Ops.WHERE, op in GroupOp.Comparison, _operand_dtypes(op), {}) for op in GroupOp.ALU
}
_BOOL_NAMES: Final = ", ".join(sorted(op.name for op in BOOL_ALU))


def alu_dtypes(node: UOp) -> str | None:
    """The rules of every ALU op: no argument, one operand dtype, the result dtype, and the dtypes it accepts."""
    spec = _ALU_SPEC[node.op]
    src = node.src
    if node.arg is not None:
        return f"takes no argument, got {show(node.arg)}"
    if spec.is_where:
        cond, operands = src[0].dtype, src[1:]
        if cond.scalar() is not _BOOL or cond.count != operands[0].dtype.count or type(cond) is not DType:
            return f"needs a bool condition as src[0], got {dtype_word(cond)}"
    else:
        operands = src
    first = operands[0].dtype
    for s in operands:  # the first compares with itself: cheaper than slicing off the rest
        if s.dtype is not first:
            return (f"needs operands of one dtype, got {dtype_word(first)} and {dtype_word(s.dtype)}: "
                    "CAST one of them (dtype.least_upper_dtype gives the common one)")
    wanted = spec.results.get(first)
    if wanted is None:
        scalar = first if first.count == 1 else first.scalar()
        if scalar not in spec.accepted:
            return _rejected_operand(node.op, first)
        wanted = (_BOOL if first.count == 1 else _BOOL.vec(first.count)) if spec.is_comparison else first
        spec.results[first] = wanted
    if node.dtype is not wanted:
        return f"on {dtype_word(first)} operands must have dtype {dtype_word(wanted)}, got {dtype_word(node.dtype)}"
    return None


def _rejected_operand(op: Ops, dt: DType) -> str:
    if not is_value_dtype(dt):
        return f"computes on values, got an operand of dtype {dtype_word(dt)}"
    if op is Ops.THREEFRY:
        return f"is defined only on uint64, got {dtype_word(dt)}"
    if op in GroupOp.IntegerOnly:
        return f"is defined only on integers{' and bool' if op in _BITWISE else ''}, got {dtype_word(dt)}"
    if op in GroupOp.FloatOnly:
        return f"is defined only on floats, got {dtype_word(dt)}: CAST to a float dtype first"
    return f"is not defined on {dtype_word(dt)}: CAST to an integer dtype first (bool supports {_BOOL_NAMES})"


# ---- the table -------------------------------------------------------------------------------------------------
def _alu_row(arity: int) -> Row:
    return Row(arity, arity, (alu_dtypes,))


_MOVEMENT_ARG: Final[dict[Ops, Check]] = {
    Ops.RESHAPE: _dims_arg, Ops.EXPAND: _dims_arg, Ops.PERMUTE: _permute_arg, Ops.PAD: _size_pairs_arg,
    Ops.SHRINK: _size_pairs_arg, Ops.FLIP: _flip_arg,
}

GRAPH_RULES: Final[dict[Ops, Row]] = {
    Ops.SINK: Row(0, ANY, (void, _sink_arg)),
    Ops.NOOP: Row(0, 1, (arg_none, _noop_dtype)),
    Ops.BUFFER: Row(0, 0, (_memory_dtype, _buffer_arg)),
    Ops.CONST: Row(0, 0, (_const_arg,)),
    Ops.DEFINE_VAR: Row(0, 0, (_var_dtype, _define_var_arg)),
    Ops.BIND: Row(2, 2, (arg_none, _var_dtype, _same_as_src0, _sources_same_dtype)),
    **{op: Row(1, 1 if op in (Ops.PERMUTE, Ops.FLIP) else ANY, (check, _value_like_src0))
       for op, check in _MOVEMENT_ARG.items()},
    Ops.CONTIGUOUS: Row(1, 1, (arg_none, _value_like_src0)),
    Ops.COPY: Row(0, 1, (_copy_form,)),
    Ops.ASSIGN: Row(2, 2, (arg_none, _value_like_src0, _sources_same_dtype)),
    Ops.ALLREDUCE: Row(1, ANY, (_allreduce_arg, _value_like_src0, _sources_same_dtype)),
    Ops.LINEAR: Row(0, ANY, (void, _linear_arg)),
    Ops.CALL: Row(1, ANY, (void, _call_arg)),
    Ops.PARAM: Row(0, 0, (_pointer_in(AddrSpace.GLOBAL), _param_arg)),
    Ops.RANGE: Row(1, 1, (_integer_loop, _range_arg)),
    Ops.END: Row(1, ANY, (void, arg_none)),
    Ops.INDEX: Row(2, 3, (arg_none, _index_dtypes)),
    Ops.LOAD: Row(1, ANY, (arg_none, value, _load_dtype)),
    Ops.STORE: Row(2, ANY, (void, arg_none, _store_dtypes)),
    Ops.REDUCE: Row(1, ANY, (_reduce_arg, _value_like_src0)),
    Ops.SPECIAL: Row(1, 1, (_name_arg, _integer_loop)),
    Ops.DEFINE_LOCAL: Row(0, 0, (_pointer_in(AddrSpace.LOCAL), _slot_arg)),
    Ops.DEFINE_REG: Row(0, 0, (_pointer_in(AddrSpace.REG), _slot_arg)),
    Ops.BARRIER: Row(0, ANY, (void, arg_none)),
    Ops.IF: Row(1, 2, (void, arg_none, _bool_condition)),
    Ops.ENDIF: Row(1, 1, (void, arg_none, _endif_source)),
    Ops.VECTORIZE: Row(1, ANY, (arg_none, _vectorize_dtypes)),
    Ops.GEP: Row(1, 1, (_gep_dtype,)),
    Ops.UNROLL: Row(1, 1, (_pairs_arg, value)),
    Ops.CONTRACT: Row(1, 1, (_pairs_arg, value)),
    Ops.WMMA: Row(3, 3, (_wmma_arg, value)),
    Ops.PROGRAM: Row(1, ANY, (void, _program_arg)),
    Ops.SOURCE: Row(0, 0, (void, _name_arg)),
    Ops.CAST: Row(1, 1, (arg_none, _cast_dtypes)),
    Ops.BITCAST: Row(1, 1, (arg_none, _cast_dtypes)),
    **{op: _alu_row(1) for op in GroupOp.Unary},
    **{op: _alu_row(2) for op in GroupOp.Binary},
    **{op: _alu_row(3) for op in GroupOp.Ternary},
}
assert set(GRAPH_RULES) == set(Ops), f"ops without GRAPH rules: {set(Ops) - set(GRAPH_RULES)}"


def describe_arity(row: Row) -> str:
    if row.min_src == row.max_src:
        return f"{row.min_src} source{'s' if row.min_src != 1 else ''}"
    if row.max_src == ANY:
        return f"at least {row.min_src} source{'s' if row.min_src != 1 else ''}"
    return f"{row.min_src} to {row.max_src} sources"

