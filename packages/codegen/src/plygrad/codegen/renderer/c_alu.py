"""The C renderer's ALU ops (docs/ir.md §5 exactly): one function per op kind, each taking the function being
rendered (for its spelling hooks and helpers: the CUDA family overrides them), the node and its operands' C
expressions, and giving the C expression. Where C leaves a result undefined the IR defines one, and the guards
here compute it (division and modulo by zero, MIN / -1, out-of-range shifts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from plygrad.codegen.renderer.c_types import ROUNDS_FROM_DOUBLE
from plygrad.ir import DType, DTypeKind, Ops, UOp, dtypes

if TYPE_CHECKING:
    from plygrad.codegen.renderer.c import CFunction

INFIX: Final[dict[Ops, str]] = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/",
                                 Ops.MOD: "%", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<",
                                 Ops.SHR: ">>", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
WRAPPING: Final = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL})  # may overflow: computed unsigned


def zero(dtype: DType) -> bool | int | float:
    if dtype is dtypes.bool:
        return False
    return 0.0 if dtype.kind is DTypeKind.FLOAT else 0


# ---- ALU ops: each renders (renderer, node, operand expressions) -> C expression ---------------------------------
def _infix(r: CFunction, node: UOp, a: list[str]) -> str:
    op, dtype = node.op, node.src[0].dtype
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
        return r.rounded(dtype, r.float_arith(op, dtype, a[0], a[1]))
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


def _neg(r: CFunction, node: UOp, a: list[str]) -> str:
    dtype = node.dtype
    if dtype.kind is DTypeKind.FLOAT or dtype is dtypes.index:
        return f"(-{a[0]})"
    wide = r.unsigned_for(dtype)
    return f"(({r.ctype(dtype)})(-({wide}){a[0]}))"


def _unary_math(r: CFunction, node: UOp, a: list[str]) -> str:
    if node.op is Ops.TRUNC and node.dtype.kind is not DTypeKind.FLOAT:
        return a[0]
    return r.rounded(node.dtype, r.math_call(node.op, node.dtype, a))


def _reciprocal(r: CFunction, node: UOp, a: list[str]) -> str:
    one = "1.0" if node.dtype.scalar() is dtypes.float64 else "1.0f"  # a vector divides lane by lane
    return r.rounded(node.dtype, r.float_arith(Ops.FDIV, node.dtype, one, a[0]))


def _pow(r: CFunction, node: UOp, a: list[str]) -> str:
    return r.rounded(node.dtype, r.math_call(Ops.POW, node.dtype, a))


def _max(r: CFunction, node: UOp, a: list[str]) -> str:
    dtype = node.dtype
    if dtype is dtypes.bool:
        return f"({a[0]} | {a[1]})"
    if dtype.count > 1:
        return f"plygrad_max_{r.local_type(dtype)[8:]}({a[0]}, {a[1]})"
    if dtype.kind is DTypeKind.FLOAT:
        r.helpers.add("fmax")
        return f"{'plygrad_fmax' if dtype is dtypes.float64 else 'plygrad_fmaxf'}({a[0]}, {a[1]})"
    return f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})"


def _where(r: CFunction, node: UOp, a: list[str]) -> str:
    if node.src[0].dtype.count > 1:  # select by lane masks, bit by bit (C has no `?:` of a vector condition)
        mask = r.local_type(node.src[0].dtype)
        return f"(({r.local_type(node.dtype)})(({a[0]} & ({mask}){a[1]}) | (~{a[0]} & ({mask}){a[2]})))"
    return f"({a[0]} ? {a[1]} : {a[2]})"


def _mulacc(r: CFunction, node: UOp, a: list[str]) -> str:
    dtype = node.dtype
    if dtype.scalar() in (dtypes.float32, dtypes.float64):
        fused = r.fused_mad(dtype, a[0], a[1], a[2])
        if fused is not None:
            return fused
    if dtype is dtypes.float64:
        return r.mad(a[0], a[1], a[2])
    exact = r.mad(f"(double){a[0]}", f"(double){a[1]}", f"(double){a[2]}")  # a float product is exact in double
    if dtype in ROUNDS_FROM_DOUBLE:  # rounded once from double
        return r.rounded(dtype, exact)
    if dtype.kind is DTypeKind.FLOAT:
        return r.rounded(dtype, f"(float){exact}")
    if dtype is dtypes.index:
        return f"({a[0]} * {a[1]} + {a[2]})"
    wide = r.unsigned_for(dtype)
    return f"(({r.ctype(dtype)})(({wide}){a[0]} * ({wide}){a[1]} + ({wide}){a[2]}))"


def _threefry(r: CFunction, node: UOp, a: list[str]) -> str:
    r.helpers.add("threefry")
    return f"plygrad_threefry2x32({a[0]}, {a[1]})"


ALU: Final[dict[Ops, Callable[[CFunction, UOp, list[str]], str]]] = {
    **{op: _infix for op in INFIX},
    Ops.NEG: _neg, Ops.RECIPROCAL: _reciprocal, Ops.POW: _pow, Ops.MAX: _max, Ops.WHERE: _where,
    Ops.MULACC: _mulacc, Ops.THREEFRY: _threefry,
    **{op: _unary_math for op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC)},
}
