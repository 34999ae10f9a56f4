"""The C family's op table: how C, CUDA, HIP and Metal write the value of each op (docs/codegen.md §4).

`RULES` maps every op a statement can compute (loads, casts, bitcasts, lanes, vectors and the ALU ops of
docs/ir.md §5) to a rule: a function of the function being rendered and the node, giving the expression. The rules
are written once, with every guard the IR defines where C leaves a result undefined (division and modulo by zero,
MIN / -1, out-of-range shifts, float -> int of NaN); what differs between the languages is data: each renderer's
`Spelling` (its types, literals, float arithmetic, multiply-adds and math functions) and a table of its own that
replaces or adds entries (`CUDA_RULES = {**RULES, Ops.GEP: ...}` in cuda.py, likewise hip.py and metal.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from plygrad.codegen.renderer.c_types import ROUNDS_FROM_DOUBLE
from plygrad.ir import DType, DTypeKind, Ops, UOp, dtypes

if TYPE_CHECKING:
    from plygrad.codegen.renderer.c import CFunction

INFIX: Final[dict[Ops, str]] = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/",
                                 Ops.MOD: "%", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<",
                                 Ops.SHR: ">>", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
WRAPPING: Final = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL})  # may overflow: computed unsigned
MATH_OPS: Final = (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC, Ops.POW)


class Call(NamedTuple):
    """A math function's text over its operands `{0}`, `{1}`, and the helpers (by name) the program then needs."""

    text: str
    helpers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spelling:
    """How one language of the C family writes what the shared rules build on. Templates are `str.format` text:
    `{a}`, `{b}`, `{c}` for the operands of arithmetic, `{0}`, `{1}` for those of a math function."""

    local: Callable[[DType], str]  # the type of a scalar local of a dtype
    storage: Callable[[DType], str]  # the type of an element of a buffer of a dtype
    literal: Callable[[DType, object], str]  # a constant of a dtype
    helper: Callable[[str], str]  # the source of a helper function, by name
    arith: Mapping[Ops, str]  # ADD SUB MUL FDIV of float locals (float32 and the narrower floats computed in float)
    arith64: Mapping[Ops, str]  # the same of float64
    mad: str  # a * b + c of doubles, never fused: MULACC of the floats that have no fused one
    fma: Mapping[DType, str]  # MULACC of a scalar float32 / float64 as one fused multiply-add, where it has one
    math: Mapping[Ops, tuple[Call, Call]]  # SQRT EXP2 LOG2 SIN TRUNC POW: (of float locals, of float64)
    math32: Mapping[Ops, Call]  # of float32 exactly, where it differs from the other float locals
    register_vectors: bool  # vector values are c_types' vector types, with vector ALU (C); else memory-only structs


Rule = Callable[["CFunction", UOp], str]


def zero(dtype: DType) -> bool | int | float:
    if dtype is dtypes.bool:
        return False
    return 0.0 if dtype.kind is DTypeKind.FLOAT else 0


def libm(names: Mapping[Ops, str]) -> dict[Ops, tuple[Call, Call]]:
    """C's math library's functions by their double names: `sqrtf({0})` of float locals, `sqrt({0})` of float64."""
    args = {op: "{0}, {1}" if op is Ops.POW else "{0}" for op in names}
    return {op: (Call(f"{name}f({args[op]})"), Call(f"{name}({args[op]})")) for op, name in names.items()}


LIBM: Final = libm({Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc",
                    Ops.POW: "pow"})


def float_arith(r: CFunction, op: Ops, dtype: DType, a: str, b: str) -> str:
    """ADD/SUB/MUL/FDIV of two float values of `dtype` (the float local's type), one IEEE operation."""
    template = r.spelling.arith64[op] if dtype is dtypes.float64 else r.spelling.arith[op]
    return template.format(a=a, b=b)


def math_call(r: CFunction, op: Ops, dtype: DType, args: list[str]) -> str:
    """The call computing `op` (SQRT EXP2 LOG2 SIN TRUNC POW) on float locals of `dtype`. A vector dtype only reaches
    here on C (VectorForms.math: float32 EXP2, float32/float64 SQRT), as a lane-wise helper (c_math.py)."""
    if dtype.count > 1 and r.spelling.register_vectors:
        if op is Ops.SQRT:
            r.vector_sqrt.add(dtype)
            return f"plygrad_sqrt_{r.local_type(dtype)[8:]}({args[0]})"
        if op is Ops.EXP2 and dtype.scalar() is dtypes.float32:
            r.vector_exp2.add(dtype)
            return f"plygrad_exp2_{r.local_type(dtype)[8:]}({args[0]})"
    call = r.spelling.math32.get(op) if dtype is dtypes.float32 else None
    if call is None:
        call = r.spelling.math[op][1 if dtype is dtypes.float64 else 0]
    r.helpers.update(call.helpers)
    return call.text.format(*args)


# ---- the rules: each renders (function, node) -> expression -------------------------------------------------------
def _load(r: CFunction, node: UOp) -> str:
    index = node.src[0]
    if index.src[0].op is Ops.DEFINE_REG:
        return r.ref(index)
    value = r.from_storage(node.dtype, r.address(index))
    if len(index.src) == 3:  # a gated load reads 0 where the gate is false (and never touches memory there)
        return f"({r.ref(index.src[2])} ? {value} : {r.literal(node.dtype, zero(node.dtype))})"
    return value


def cast(r: CFunction, node: UOp) -> str:
    x, dtype = node.src[0], node.dtype
    src = r.ref(x)
    if dtype is dtypes.bool:
        return f"({src} != 0)"
    if dtype.kind is DTypeKind.FLOAT:
        if dtype in ROUNDS_FROM_DOUBLE:  # rounded once from the source type (float64, int64), not via float
            return r.rounded(dtype, src)
        return r.rounded(dtype, f"({r.ctype(dtype)})({src})")
    if x.dtype.kind is DTypeKind.FLOAT:  # truncate toward zero, then wrap to the width; NaN/inf give 0
        r.helpers.add("f2i")
        return f"(({r.ctype(dtype)})plygrad_f2i((double)({src})))"
    return f"(({r.ctype(dtype)})({src}))"


def _bitcast(r: CFunction, node: UOp) -> str:
    """Through a union of the two storage types (C)."""
    x, dtype = node.src[0], node.dtype
    source_type, dest_type = r.storage_type(x.dtype), r.storage_type(dtype)
    stored = r.to_storage(x.dtype, r.ref(x))
    expr = f"((union {{ {source_type} a; {dest_type} b; }}){{ .a = {stored} }}).b"
    return r.from_storage(dtype, expr)


def _gep(r: CFunction, node: UOp) -> str:
    return f"{r.ref(node.src[0])}[{node.arg[0]}]"


def _vectorize(r: CFunction, node: UOp) -> str:
    """A compound literal of the lanes, or a row of a register transpose (CFunction.transposed_lane)."""
    transposed = r.transposed_lane(node)
    if transposed is not None:
        return transposed
    return f"({r.local_type(node.dtype)}){{{', '.join(r.ref(s) for s in node.src)}}}"


def _infix(r: CFunction, node: UOp) -> str:
    op, dtype, a = node.op, node.src[0].dtype, r.refs(node)
    sym = INFIX[op]
    if dtype is dtypes.bool and op in (Ops.ADD, Ops.MUL):
        sym = "|" if op is Ops.ADD else "&"
    expr = f"({a[0]} {sym} {a[1]})"
    if op in (Ops.IDIV, Ops.MOD):
        return _division(r, node, a)
    if op in (Ops.SHL, Ops.SHR) and dtype is not dtypes.index:
        return _shift(r, node, a, sym)
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) or dtype is dtypes.index or dtype.scalar() is dtypes.bool:
        return expr  # on vectors: lane masks (-1 or 0), combined bit by bit
    if dtype.kind is DTypeKind.FLOAT:
        return r.rounded(dtype, float_arith(r, op, dtype, a[0], a[1]))
    if op in WRAPPING:
        wide = r.unsigned_for(dtype)
        return f"(({r.ctype(dtype)})(({wide}){a[0]} {sym} ({wide}){a[1]}))"
    return f"(({r.ctype(dtype)}){expr})"


def _can_be(x: UOp, value: int) -> bool:
    """Whether `x` may take `value`, as far as its interval bounds tell (a node without bounds may take any)."""
    try:
        return bool(x.vmin <= value <= x.vmax)
    except (TypeError, ValueError):
        return True


def _division(r: CFunction, node: UOp, a: list[str]) -> str:
    """IDIV/MOD on integers: C's `/` and `%`, with the cases C traps on defined (x / 0 = x % 0 = 0, MIN / -1 =
    MIN and MIN % -1 = 0, both wrapped) and guarded only where the divisor's bounds allow them."""
    dtype, divisor = node.dtype, node.src[1]
    expr = f"({a[0]} {INFIX[node.op]} {a[1]})"
    if dtype is not dtypes.index:
        expr = f"(({r.ctype(dtype)}){expr})"
        # MIN / -1 overflows (x86 traps); only int32/int64 can hit it, narrower types divide as promoted ints
        if dtype.kind is DTypeKind.SIGNED and dtype.itemsize >= 4 and _can_be(divisor, -1):
            wide = r.unsigned_for(dtype)
            wrapped = f"(({r.ctype(dtype)})(0 - ({wide}){a[0]}))" if node.op is Ops.IDIV else "0"
            expr = f"({a[1]} == -1 ? {wrapped} : {expr})"
    if _can_be(divisor, 0):
        expr = f"({a[1]} == 0 ? 0 : {expr})"
    return expr


def _shift(r: CFunction, node: UOp, a: list[str], sym: str) -> str:
    """SHL/SHR at the dtype's width; an amount outside [0, width) (undefined in C) shifts every bit out: 0, or -1
    for SHR of a negative signed value. SHL goes through the unsigned type, as signed overflow is undefined."""
    dtype, amount = node.dtype, node.src[1]
    local = r.ctype(dtype)
    if node.op is Ops.SHL:
        wide = r.unsigned_for(dtype)
        shifted = f"(({local})(({wide}){a[0]} << ({wide}){a[1]}))"
    else:
        shifted = f"(({local})({a[0]} >> {a[1]}))"
    bits = dtype.bitsize
    try:
        in_range = int(amount.vmin) >= 0 and int(amount.vmax) < bits
    except (TypeError, ValueError):
        in_range = False
    if in_range:
        return shifted
    out = f"({a[0]} < 0 ? ({local})-1 : ({local})0)" if node.op is Ops.SHR and dtype.kind is DTypeKind.SIGNED \
        else f"(({local})0)"
    return f"(({r.ctype(dtypes.uint64)})({a[1]}) < {bits}u ? {shifted} : {out})"


def _neg(r: CFunction, node: UOp) -> str:
    dtype, a = node.dtype, r.refs(node)
    if dtype.kind is DTypeKind.FLOAT or dtype is dtypes.index:
        return f"(-{a[0]})"
    wide = r.unsigned_for(dtype)
    return f"(({r.ctype(dtype)})(-({wide}){a[0]}))"


def _unary_math(r: CFunction, node: UOp) -> str:
    a = r.refs(node)
    if node.op is Ops.TRUNC and node.dtype.kind is not DTypeKind.FLOAT:
        return a[0]
    return r.rounded(node.dtype, math_call(r, node.op, node.dtype, a))


def _reciprocal(r: CFunction, node: UOp) -> str:
    one = "1.0" if node.dtype.scalar() is dtypes.float64 else "1.0f"  # a vector divides lane by lane
    return r.rounded(node.dtype, float_arith(r, Ops.FDIV, node.dtype, one, r.refs(node)[0]))


def _pow(r: CFunction, node: UOp) -> str:
    return r.rounded(node.dtype, math_call(r, Ops.POW, node.dtype, r.refs(node)))


def _max(r: CFunction, node: UOp) -> str:
    dtype, a = node.dtype, r.refs(node)
    if dtype is dtypes.bool:
        return f"({a[0]} | {a[1]})"
    if dtype.count > 1:
        return f"plygrad_max_{r.local_type(dtype)[8:]}({a[0]}, {a[1]})"
    if dtype.kind is DTypeKind.FLOAT:
        r.helpers.add("fmax")
        return f"{'plygrad_fmax' if dtype is dtypes.float64 else 'plygrad_fmaxf'}({a[0]}, {a[1]})"
    return f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})"


def _where(r: CFunction, node: UOp) -> str:
    a = r.refs(node)
    if node.src[0].dtype.count > 1:  # select by lane masks, bit by bit (C has no `?:` of a vector condition)
        mask = r.local_type(node.src[0].dtype)
        return f"(({r.local_type(node.dtype)})(({a[0]} & ({mask}){a[1]}) | (~{a[0]} & ({mask}){a[2]})))"
    return f"({a[0]} ? {a[1]} : {a[2]})"


def mulacc(r: CFunction, node: UOp) -> str:
    """a * b + c: float32/float64 fused where the language has it (C vectors: c_math.vector_fma), the other floats
    exactly in double and rounded once, integers wrapped."""
    dtype, a = node.dtype, r.refs(node)
    if dtype.scalar() in (dtypes.float32, dtypes.float64):
        if dtype.count > 1 and r.spelling.register_vectors:
            r.vector_fma.add(dtype)
            return f"plygrad_fma_{r.local_type(dtype)[8:]}({a[0]}, {a[1]}, {a[2]})"
        fused = r.spelling.fma.get(dtype)
        if fused is not None:
            return fused.format(a=a[0], b=a[1], c=a[2])
    if dtype is dtypes.float64:
        return r.spelling.mad.format(a=a[0], b=a[1], c=a[2])
    # a float product is exact in double
    exact = r.spelling.mad.format(a=f"(double){a[0]}", b=f"(double){a[1]}", c=f"(double){a[2]}")
    if dtype in ROUNDS_FROM_DOUBLE:  # rounded once from double
        return r.rounded(dtype, exact)
    if dtype.kind is DTypeKind.FLOAT:
        return r.rounded(dtype, f"(float){exact}")
    if dtype is dtypes.index:
        return f"({a[0]} * {a[1]} + {a[2]})"
    wide = r.unsigned_for(dtype)
    return f"(({r.ctype(dtype)})(({wide}){a[0]} * ({wide}){a[1]} + ({wide}){a[2]}))"


def _threefry(r: CFunction, node: UOp) -> str:
    r.helpers.add("threefry")
    a = r.refs(node)
    return f"plygrad_threefry2x32({a[0]}, {a[1]})"


RULES: Final[dict[Ops, Rule]] = {
    Ops.LOAD: _load, Ops.CAST: cast, Ops.BITCAST: _bitcast, Ops.GEP: _gep, Ops.VECTORIZE: _vectorize,
    **{op: _infix for op in INFIX},
    Ops.NEG: _neg, Ops.RECIPROCAL: _reciprocal, Ops.POW: _pow, Ops.MAX: _max, Ops.WHERE: _where,
    Ops.MULACC: mulacc, Ops.THREEFRY: _threefry,
    **{op: _unary_math for op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)},
}
