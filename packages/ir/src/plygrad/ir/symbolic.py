"""Symbolic simplification of scalar expressions, written as rule tables on the rewrite engine.

Three tables, composed once at the bottom of this file: `constant_folding` (all-constant ALU ops become the
constant `exec_alu` computes), `algebraic` (identities exact for the dtype; floats are never reassociated) and
`index_math` (range-aware rules on `UOp.vmin/vmax`). Which identities hold for floats, for wrapping fixed-width
integers and only for the unbounded `index` dtype: docs/ir.md §11.1.
"""

from __future__ import annotations

from typing import Final

from plygrad.ir.dtype import ConstType, DType, DTypeKind, PtrDType, dtypes
from plygrad.ir.ops import GroupOp, Ops
from plygrad.ir.rewrite import Order, PatternMatcher, UPat, graph_rewrite
from plygrad.ir.scalar import bitcast_value, cast_value, exec_alu, truncate
from plygrad.ir.uop import UOp

INTS: Final[tuple[DType, ...]] = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                  dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.index)
FLOATS: Final[tuple[DType, ...]] = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
INTS_AND_BOOL: Final[tuple[DType, ...]] = (*INTS, dtypes.bool)
_FOLD_ERRORS: Final = (ZeroDivisionError, ValueError, TypeError, OverflowError)


def _const(dtype: DType, value: ConstType) -> UOp:
    return UOp(Ops.CONST, dtype, (), truncate(dtype, value))


# ---- constant folding ---------------------------------------------------------------------------------------------
def fold_alu(x: UOp) -> UOp | None:
    """An ALU op of constants is the constant it computes (left alone where exec_alu has no value for it)."""
    if x.dtype.count != 1:
        return None
    dtype = x.src[0].dtype if x.op in GroupOp.Comparison else x.dtype
    try:
        value = exec_alu(x.op, dtype, tuple(s.arg for s in x.src))
    except _FOLD_ERRORS:
        return None
    return _const(x.dtype, value)


def _is_value_scalar(dtype: DType) -> bool:
    return dtype.count == 1 and not isinstance(dtype, PtrDType) and dtype.kind is not DTypeKind.VOID


def fold_cast(x: UOp, c: UOp) -> UOp | None:
    return _const(x.dtype, cast_value(c.arg, x.dtype)) if _is_value_scalar(x.dtype) else None


def fold_bitcast(x: UOp, c: UOp) -> UOp | None:
    if not _is_value_scalar(x.dtype):
        return None
    try:
        return _const(x.dtype, bitcast_value(c.arg, c.dtype, x.dtype))
    except (ValueError, KeyError):
        return None


constant_folding = PatternMatcher([
    (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), fold_alu),
    (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="x"), fold_cast),
    (UPat(Ops.BITCAST, src=(UPat.cvar("c"),), name="x"), fold_bitcast),
], name="constant_folding")


# ---- algebraic identities ------------------------------------------------------------------------------------------
def keep(x: UOp) -> UOp:
    return x


def zero_like(x: UOp) -> UOp:
    return _const(x.dtype, 0)


def false_(x: UOp) -> UOp:
    return _const(dtypes.bool, False)


def true_(x: UOp) -> UOp:
    return _const(dtypes.bool, True)


def where_const(c: UOp, a: UOp, b: UOp) -> UOp:
    return a if c.arg else b


def where_same(c: UOp, x: UOp) -> UOp:
    return x


def cast_noop(x: UOp, y: UOp) -> UOp | None:
    return y if x.dtype is y.dtype else None


def sub_const(x: UOp, c: UOp) -> UOp:
    """x - c -> x + (-c): exact under wraparound, and puts the constant where constant combining finds it."""
    return UOp(Ops.ADD, x.dtype, (x, _const(x.dtype, -c.arg)))


def combine_consts(outer: UOp, inner: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x op c1) op c2 -> x op (c1 op c2) for an associative, commutative op on integers or bools."""
    if outer.op is not inner.op or outer.op not in GroupOp.Associative or outer.op not in GroupOp.Commutative:
        return None
    try:
        value = exec_alu(outer.op, outer.dtype, (c1.arg, c2.arg))
    except _FOLD_ERRORS:
        return None
    return UOp(outer.op, outer.dtype, (x, _const(outer.dtype, value)))


def consts_outward(outer: UOp, inner: UOp, x: UOp, c: UOp, y: UOp) -> UOp | None:
    """(x op c) op y -> (x op y) op c: constants bubble to the top of an int chain, where they combine."""
    if outer.op is not inner.op or y.op is Ops.CONST or x.op is Ops.CONST:
        return None
    return UOp(outer.op, outer.dtype, (UOp(outer.op, outer.dtype, (x, y)), c))


def consts_last(x: UOp, c: UOp, y: UOp) -> UOp | None:
    """Canonical order of a commutative op: the constant is the last source."""
    if y.op is Ops.CONST or x.src[0] is not c:
        return None
    return UOp(x.op, x.dtype, (y, c))


_any_assoc = UPat((Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX), INTS_AND_BOOL, name="inner",
                  src=[UPat.var("x"), UPat.cvar("c1")])
_any_assoc_outer = UPat((Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX), INTS_AND_BOOL, name="outer",
                        src=[_any_assoc, UPat.cvar("c2")])
_chain_inner = UPat((Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX), INTS_AND_BOOL, name="inner",
                    src=[UPat.var("x"), UPat.cvar("c")])
_chain_outer = UPat((Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX), INTS_AND_BOOL, name="outer",
                    src=[_chain_inner, UPat.var("y")])

_x_int = UPat.var("x", INTS)
_x_float = UPat.var("x", FLOATS)
_x_bool = UPat.var("x", dtypes.bool)
_x_int_or_bool = UPat.var("x", INTS_AND_BOOL)

algebraic = PatternMatcher([
    # neutral and absorbing elements
    (_x_int + 0, keep),
    (_x_int - 0, keep),
    (_x_float - 0.0, keep),  # x - (+0.0) is x for every float, -0.0 and NaN included
    (_x_float + (-0.0), keep),
    (_x_int * 1, keep),
    (_x_float * 1.0, keep),
    (_x_int * 0, zero_like),
    (_x_int // 1, keep),
    (_x_int % 1, zero_like),
    (UPat.var("x") - UPat.var("x"), lambda x: zero_like(x) if x.dtype in INTS else None, "x_minus_x"),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), keep),
    (UPat.var("x").maximum(UPat.var("x")), keep),
    (_x_int_or_bool & UPat.var("x"), keep),
    (_x_int_or_bool | UPat.var("x"), keep),
    (UPat.var("c", dtypes.bool).where(UPat.var("x"), UPat.var("x")), where_same),
    (UPat.cvar("c", dtypes.bool).where(UPat.var("a"), UPat.var("b")), where_const),
    # comparing a value with itself (floats: NaN compares unequal to itself)
    (_x_int_or_bool < UPat.var("x"), false_),
    (_x_int_or_bool.ne(UPat.var("x")), false_),
    (_x_int_or_bool.eq(UPat.var("x")), true_),
    # bool logic with constants
    (_x_bool & True, keep),
    (_x_bool & False, false_),
    (_x_bool | True, true_),
    (_x_bool | False, keep),
    (_x_bool ^ False, keep),
    # casts
    (UPat(Ops.CAST, src=(UPat.var("y"),), name="x"), cast_noop),
    # integer chains: x - c -> x + (-c), then constants combine at the top of the chain
    (UPat(Ops.SUB, INTS, src=(UPat.var("x"), UPat.cvar("c"))), sub_const),
    (_any_assoc_outer, combine_consts),
    (_chain_outer, consts_outward),
    (UPat(GroupOp.Commutative, src=[UPat.cvar("c"), UPat.var("y")], name="x"), consts_last),
], name="algebraic")


# ---- index math (range-aware) ----------------------------------------------------------------------------------
def collapse(x: UOp) -> UOp | None:
    """An integer or bool ALU node whose bounds pin a single value is that value (bounds are sound, wrap-aware)."""
    if x.dtype.count != 1:
        return None
    lo, hi = x.vmin, x.vmax
    return _const(x.dtype, lo) if lo == hi else None


def mod_in_range(x: UOp, c: UOp) -> UOp | None:
    """x % c -> x when 0 <= x < c (or -c < x <= 0: C's remainder keeps the dividend's sign)."""
    if c.arg <= 0:
        return None
    lo, hi = x.vmin, x.vmax
    return x if (lo >= 0 and hi < c.arg) or (lo > -c.arg and hi <= 0) else None


def max_by_bounds(m: UOp, x: UOp, y: UOp) -> UOp | None:
    """max(x, y) -> x when every x is at least every y."""
    return x if x.vmin >= y.vmax else None


def _terms(e: UOp) -> list[UOp]:
    """The summands of a chain of ADDs (walked iteratively)."""
    found: list[UOp] = []
    todo = [e]
    while todo:
        node = todo.pop()
        if node.op is Ops.ADD:
            todo.extend(reversed(node.src))
        else:
            found.append(node)
    return found


def _divided(term: UOp, c: int) -> UOp | None:
    """term / c as a node when term is a constant or const-multiple that c divides exactly, else None."""
    if term.op is Ops.CONST:
        return _const(term.dtype, term.arg // c) if term.arg % c == 0 else None
    if term.op is Ops.MUL:
        for i in (1, 0):
            k = term.src[i]
            if k.op is Ops.CONST and k.arg % c == 0:
                other = term.src[1 - i]
                return other if k.arg == c else UOp(Ops.MUL, term.dtype, (other, _const(term.dtype, k.arg // c)))
    return None


def _sum(dtype: DType, terms: list[UOp]) -> UOp:
    total = terms[0]
    for t in terms[1:]:
        total = UOp(Ops.ADD, dtype, (total, t))
    return total


def _split_by_divisor(e: UOp, c: int) -> tuple[list[UOp], list[UOp], bool] | None:
    """Split the summands of `e` into those c divides (already divided) and the rest; None when none divides.
    The bool says whether the split respects C's truncating division: both parts have one sign."""
    quotients: list[UOp] = []
    rest: list[UOp] = []
    q_lo = q_hi = r_lo = r_hi = 0
    for t in _terms(e):
        q = _divided(t, c)
        lo, hi = int(t.vmin), int(t.vmax)
        if q is None:
            rest.append(t)
            r_lo, r_hi = r_lo + lo, r_hi + hi
        else:
            quotients.append(q)
            q_lo, q_hi = q_lo + lo, q_hi + hi
    if not quotients:
        return None
    same_sign = (q_lo >= 0 and r_lo >= 0) or (q_hi <= 0 and r_hi <= 0)
    return quotients, rest, same_sign


def div_split(x: UOp, e: UOp, c: UOp) -> UOp | None:
    """(a*c + b) // c -> a + b // c where both parts have one sign (C truncation makes it exact then)."""
    if c.arg <= 0:
        return None
    split = _split_by_divisor(e, c.arg)
    if split is None:
        return None
    quotients, rest, same_sign = split
    if not rest:
        return _sum(x.dtype, quotients)
    if not same_sign:
        return None
    return UOp(Ops.ADD, x.dtype, (_sum(x.dtype, quotients), UOp(Ops.IDIV, x.dtype, (_sum(x.dtype, rest), c))))


def mod_split(x: UOp, e: UOp, c: UOp) -> UOp | None:
    """(a*c + b) % c -> b % c where both parts have one sign; a*c % c -> 0."""
    if c.arg <= 0:
        return None
    split = _split_by_divisor(e, c.arg)
    if split is None:
        return None
    _, rest, same_sign = split
    if not rest:
        return _const(x.dtype, 0)
    if not same_sign:
        return None
    return UOp(Ops.MOD, x.dtype, (_sum(x.dtype, rest), c))


def div_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """(x // a) // b -> x // (a*b) for a, b > 0 (truncating division composes), if a*b fits the dtype."""
    if a.arg <= 0 or b.arg <= 0 or truncate(x.dtype, a.arg * b.arg) != a.arg * b.arg:
        return None
    return UOp(Ops.IDIV, x.dtype, (x, _const(x.dtype, a.arg * b.arg)))


def mul_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """(x*a) // b -> x // (b/a) when a divides b (x*a/b and x/(b/a) are the same rational: same truncation)."""
    if a.arg <= 0 or b.arg <= 0 or b.arg % a.arg != 0:
        return None
    return UOp(Ops.IDIV, x.dtype, (x, _const(x.dtype, b.arg // a.arg)))


def mod_mod(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """(x % a) % b -> x % b when b divides a: both are congruent to x mod b with x's sign and |.| < b."""
    if a.arg <= 0 or b.arg <= 0 or a.arg % b.arg != 0:
        return None
    return UOp(Ops.MOD, x.dtype, (x, b))


def collect_terms(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """x*a + x*b -> x*(a+b): distributivity holds under wraparound too."""
    return UOp(Ops.MUL, x.dtype, (x, _const(x.dtype, a.arg + b.arg)))


def collect_one(x: UOp, a: UOp) -> UOp:
    """x*a + x -> x*(a+1)."""
    return UOp(Ops.MUL, x.dtype, (x, _const(x.dtype, a.arg + 1)))


def double(x: UOp) -> UOp:
    """x + x -> x*2."""
    return UOp(Ops.MUL, x.dtype, (x, _const(x.dtype, 2)))


_MAX_SUM_TERMS: Final = 64  # longer sums are left as they are: flattening one costs its length at every ADD


def _linear_terms(e: UOp) -> tuple[list[tuple[UOp, int]], list[int]] | None:
    """The sum `e` as (base, coefficient) terms and constant terms, or None for sums too long to normalize."""
    terms: list[tuple[UOp, int]] = []
    consts: list[int] = []
    todo = [e]
    while todo:
        node = todo.pop()
        if node.op is Ops.ADD:
            todo.extend(reversed(node.src))
            if len(todo) + len(terms) > _MAX_SUM_TERMS:
                return None
        elif node.op is Ops.CONST:
            consts.append(node.arg)
        elif node.op is Ops.MUL and node.src[1].op is Ops.CONST:
            terms.append((node.src[0], node.src[1].arg))
        elif node.op is Ops.MUL and node.src[0].op is Ops.CONST:
            terms.append((node.src[1], node.src[0].arg))
        else:
            terms.append((node, 1))
    return terms, consts


def _build_sum(dtype: DType, terms: dict[UOp, int], const: int) -> UOp:
    parts = [base if k == 1 else UOp(Ops.MUL, dtype, (base, _const(dtype, k))) for base, k in terms.items() if k != 0]
    if const != 0 or not parts:
        parts.append(_const(dtype, const))
    return _sum(dtype, parts)


def _merged_terms(e: UOp) -> tuple[dict[UOp, int], list[tuple[UOp, int]], list[int]] | None:
    """`_linear_terms` of `e` plus each base once with its summed coefficient."""
    found = _linear_terms(e)
    if found is None:
        return None
    terms, consts = found
    merged: dict[UOp, int] = {}
    for base, k in terms:
        merged[base] = merged.get(base, 0) + k
    return merged, terms, consts


def normalize_sum(x: UOp) -> UOp | None:
    """A sum with repeated terms or several constants -> each base once with its summed coefficient, the constant
    last: a*x + y + b*x + 3 + 4 -> (a+b)*x + y + 7. Distributivity holds under wraparound, so for every int."""
    found = _merged_terms(x)
    if found is None:
        return None
    merged, terms, consts = found
    if len(merged) == len(terms) and len(consts) <= 1:
        return None
    return _build_sum(x.dtype, merged, sum(consts))


def mod_coefficients(x: UOp, e: UOp, c: UOp) -> UOp | None:
    """(k*a + j*b + m) % c -> ((k%c)*a + (j%c)*b + m%c) % c when every part is non-negative: both sums are
    non-negative and congruent mod c, so C's remainder of both is the same. Index only (no wraparound)."""
    if c.arg <= 0 or e.vmin < 0:
        return None
    found = _linear_terms(e)
    if found is None:
        return None
    terms, consts = found
    reduced: dict[UOp, int] = {}
    for base, k in terms:
        if base.vmin < 0:
            return None
        reduced[base] = (reduced.get(base, 0) + k) % c.arg
    const = sum(consts) % c.arg
    if all(k == reduced[base] for base, k in terms) and len(terms) == len(reduced) and consts in ([], [const]):
        return None
    return UOp(Ops.MOD, x.dtype, (_build_sum(x.dtype, reduced, const), c))


# ---- a counter's bits back to its index ---------------------------------------------------------------------------
# (the `counter_bits` table at the bottom of this file, kept out of `symbolic`: see there)
# `Tensor.arange(n)` (the frontend's counter) is a sum of padded constants, one per bit: in a kernel it arrives as
#   sum_k WHERE(0 < (r // 2^k) % 2, 2^k, 0)      in the counter's dtype (int32)
# which is just r. These rules take it back there, so `idx == arange(n)` compares with the loop variable and a
# one-hot gather can become a load (codegen/gather.py): a bit select becomes a product with the bit, integer
# products and sums of casts from `index` move into `index` where the bounds show nothing wraps, and in `index`
# the bit terms merge: x % d + ((x // d) % 2) * d = x % (2d), and x % d + (x // d) * d = x (truncating division
# makes both hold for every x).
def bit_select(w: UOp, x: UOp, c: UOp) -> UOp | None:
    """WHERE(0 < x, c, 0) -> CAST(x) * c for an integer x that is 0 or 1."""
    if x.dtype not in INTS or x.vmin < 0 or x.vmax > 1:
        return None
    return UOp(Ops.MUL, w.dtype, (x.cast(w.dtype), c))


def _fits(dtype: DType, lo: ConstType, hi: ConstType) -> bool:
    return dtype.min <= lo and hi <= dtype.max


def lift_cast_mul(x: UOp, y: UOp, c: UOp) -> UOp | None:
    """CAST(y: index) * c -> CAST(y * c) when no product leaves the dtype (so the wrapping op never wraps)."""
    if y.dtype is not dtypes.index or x.dtype is dtypes.index:
        return None
    product = UOp(Ops.MUL, dtypes.index, (y, _const(dtypes.index, c.arg)))
    return product.cast(x.dtype) if _fits(x.dtype, product.vmin, product.vmax) else None


def lift_cast_add(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """CAST(a: index) + CAST(b: index) -> CAST(a + b) when no sum leaves the dtype."""
    if a.dtype is not dtypes.index or b.dtype is not dtypes.index or x.dtype is dtypes.index:
        return None
    total = UOp(Ops.ADD, dtypes.index, (a, b))
    return total.cast(x.dtype) if _fits(x.dtype, total.vmin, total.vmax) else None


def _bit_of(base: UOp) -> tuple[UOp, int, bool] | None:
    """(x, d, top) when base is (x // d) % 2 (top False) or x // d (top True), with d > 0 a constant."""
    top = base.op is Ops.IDIV
    inner = base if top else base.src[0] if base.op is Ops.MOD and base.src[1].arg == 2 else None
    if inner is None or inner.op is not Ops.IDIV or inner.src[1].op is not Ops.CONST or inner.src[1].arg <= 0:
        return None
    return inner.src[0], int(inner.src[1].arg), top


def merge_bits(x: UOp) -> UOp | None:
    """In an index sum, k*(x % d) + k*d*((x // d) % 2) -> k*(x % (2d)) and k*(x % d) + k*d*(x // d) -> k*x, as
    often as they apply: the lowest bit x % 2 grows to x % 4, x % 8, ... and the top bit's x // d closes it to x."""
    found = _merged_terms(x)
    if found is None:
        return None
    merged, _, consts = found
    changed = False
    progress = True
    while progress:
        progress = False
        for base, k in list(merged.items()):
            bit = _bit_of(base)
            if bit is None or k == 0:
                continue
            value, d, top = bit
            rest = UOp(Ops.MOD, dtypes.index, (value, _const(dtypes.index, d)))
            if d == 1 or k % d or merged.get(rest) != k // d:
                continue
            del merged[base]
            del merged[rest]
            joined = value if top else UOp(Ops.MOD, dtypes.index, (value, _const(dtypes.index, 2 * d)))
            merged[joined] = merged.get(joined, 0) + k // d
            changed = progress = True
            break
    return _build_sum(x.dtype, merged, sum(consts)) if changed else None


_ALU_OPS: Final = tuple(GroupOp.ALU)
_x_idx = UPat.var("x", dtypes.index)

index_math = PatternMatcher([
    (UPat(_ALU_OPS, INTS_AND_BOOL, name="x"), collapse),
    (UPat.var("x", INTS) % UPat.cvar("c"), mod_in_range),
    (UPat(Ops.MAX, INTS, src=[UPat.var("x"), UPat.var("y")], name="m"), max_by_bounds),
    # sums: collect equal terms
    (UPat(Ops.ADD, INTS, name="x"), normalize_sum),
    (_x_int * UPat.cvar("a") + UPat.var("x") * UPat.cvar("b"), collect_terms),
    (_x_int * UPat.cvar("a") + UPat.var("x"), collect_one),
    (_x_int + UPat.var("x"), double),
    # unbounded-integer identities: index dtype only (see the module docstring)
    (UPat(Ops.IDIV, dtypes.index, src=(UPat.var("e"), UPat.cvar("c")), name="x"), div_split),
    (UPat(Ops.MOD, dtypes.index, src=(UPat.var("e"), UPat.cvar("c")), name="x"), mod_split),
    (UPat(Ops.MOD, dtypes.index, src=(UPat.var("e"), UPat.cvar("c")), name="x"), mod_coefficients),
    ((_x_idx * UPat.cvar("a")) // UPat.cvar("b"), mul_div),
    ((UPat.var("x", INTS) // UPat.cvar("a")) // UPat.cvar("b"), div_div),
    ((UPat.var("x", INTS) % UPat.cvar("a")) % UPat.cvar("b"), mod_mod),
], name="index_math")

symbolic: Final = constant_folding + algebraic + index_math

# Not part of `symbolic`: merging a sum of bit terms into one `x % 2^k` is exact but hides the terms from a prover
# that reasons term by term (the runtime's bounds check: a gate constrains `(x // 2) % 2`, the merged index has
# only `x % 8`). Codegen applies it after that check (codegen/gather.py needs `arange` as the loop variable).
counter_bits: Final = PatternMatcher([
    (UPat(Ops.WHERE, INTS, src=(UPat(Ops.CMPLT, src=(UPat(Ops.CONST, arg=0), UPat.var("x"))), UPat.cvar("c"),
                                UPat(Ops.CONST, arg=0)), name="w"), bit_select),
    (UPat(Ops.MUL, INTS, src=[UPat(Ops.CAST, src=(UPat.var("y"),)), UPat.cvar("c")], name="x"), lift_cast_mul),
    (UPat(Ops.ADD, INTS, src=(UPat(Ops.CAST, src=(UPat.var("a"),)), UPat(Ops.CAST, src=(UPat.var("b"),))),
          name="x"), lift_cast_add),
    (UPat(Ops.ADD, dtypes.index, name="x"), merge_bits),
], name="counter_bits")


def simplify(uop: UOp) -> UOp:
    """`uop` simplified by every `symbolic` rule to a fixed point."""
    return graph_rewrite(uop, symbolic, order=Order.BOTTOM_UP)
