"""Proving, before a launch, that every memory access of a kernel stays inside the buffer it is given.

Verification checks a schedule's structure, not its arithmetic, so `ExecPlan.build` asks this module once per plan
to prove every LOAD and STORE index in `[0, size)` of its buffer, and refuses the schedule with an
`IndexBoundsError` naming the kernel, the buffer and the producer when it cannot. The proof is interval arithmetic
(`UOp.vmin/vmax`), narrowed by a gated access's linear constraints; what cannot be proved is refused, never
trusted. docs/architecture.md, "Inside the runtime".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd
from typing import Final, Protocol

from plygrad.ir.dtype import DType, dtype_text, dtypes
from plygrad.ir.ops import Ops
from plygrad.ir.uop import UOp
from plygrad.runtime.errors import IndexBoundsError

Interval = tuple[int, int]
# an integer expression as sum(coefficient * term) + constant; a term is anything but ADD/SUB/NEG/MUL-by-constant
Linear = tuple[dict[UOp, int], int]

_INDEX_MIN: Final = int(dtypes.index.min)
_INDEX_MAX: Final = int(dtypes.index.max)
_UNBOUNDED: Final = (_INDEX_MIN, _INDEX_MAX)
_EMPTY: Final = (1, 0)  # the interval of a value never computed (an empty loop, a gate never true)


class BufferLike(Protocol):
    """What the check needs of the buffer behind a PARAM (plan.BufferSlot and Buffer both fit)."""

    @property
    def id(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def dtype(self) -> DType: ...


@dataclass(frozen=True)
class Access:
    """One LOAD or STORE of a kernel: the PARAM it goes through, its index and its gate (None: ungated)."""

    kind: str  # "load" or "store"
    param: int
    index: UOp
    gate: UOp | None


@dataclass(frozen=True)
class Violation:
    """An access whose index could not be proved inside `[0, size)`: `bounds` is the range that was proved."""

    access: Access
    size: int
    bounds: Interval


class _UnreachableError(Exception):
    """The constraints leave no value for some term: the access never runs (an empty loop, a gate never true)."""


def _runs(sink: UOp) -> set[UOp]:
    """The nodes of `sink` that run at all: not only under an END or REDUCE over a range of constant size 0 (an
    empty tensor's loop nest, where the index of a store may still name elements the empty buffer lacks)."""
    seen: set[UOp] = set()
    todo = [sink]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op in (Ops.END, Ops.REDUCE) and any(
                r.op is Ops.RANGE and r.src[0].op is Ops.CONST and r.src[0].arg == 0 for r in node.src[1:]):
            continue
        todo.extend(node.src)
    return seen


def kernel_accesses(sink: UOp) -> list[Access]:
    """Every LOAD and STORE of a KERNEL-stage SINK that goes through a PARAM and runs (`_runs`), in topological
    order."""
    found: list[Access] = []
    runs = _runs(sink)
    for node in sink.toposort:
        if node.op not in (Ops.LOAD, Ops.STORE) or not node.src or node.src[0].op is not Ops.INDEX:
            continue
        if node not in runs:
            continue
        index = node.src[0]
        if index.src[0].op is not Ops.PARAM:
            continue
        gate = index.src[2] if len(index.src) == 3 else None
        found.append(Access("load" if node.op is Ops.LOAD else "store", int(index.src[0].arg), index.src[1], gate))
    return found


def index_bounds(index: UOp, gate: UOp | None = None) -> Interval | None:
    """An interval holding every value `index` takes where `gate` holds, or None when the access never runs."""
    return _Provers().bounds(index, gate)


class _Provers:
    """One prover per gate, shared by the accesses of a kernel that have that gate."""

    def __init__(self) -> None:
        self.by_gate: dict[UOp | None, _Prover | None] = {}  # None: too deep to analyse, only the plain interval
        self.never: set[UOp | None] = set()  # gates that are never true

    def bounds(self, index: UOp, gate: UOp | None) -> Interval | None:
        plain = _node_bounds(index)
        if gate in self.never:
            return None
        if gate not in self.by_gate:
            try:
                self.by_gate[gate] = _Prover(gate).check_satisfiable()
            except _UnreachableError:
                self.never.add(gate)
                return None
            except RecursionError:  # an absurdly deep gate: it is not used, which only weakens it
                self.by_gate[gate] = None
        found = self.by_gate[gate]
        if found is None:
            return plain
        try:
            proved = found.bound(index)
        except _UnreachableError:
            return None
        except RecursionError:  # an absurdly deep index expression: the plain interval is all that is known
            return plain
        return (max(plain[0], proved[0]), min(plain[1], proved[1]))


def find_violations(sink: UOp, sizes: Sequence[int]) -> list[Violation]:
    """The accesses of kernel `sink` that cannot be proved inside their buffer (PARAM i has `sizes[i]` elements)."""
    violations: list[Violation] = []
    provers = _Provers()
    for access in kernel_accesses(sink):
        size = sizes[access.param]
        lo, hi = _node_bounds(access.index)
        if lo >= 0 and hi < size:  # the common case: no gate needed, nothing to build
            continue
        bounds = provers.bounds(access.index, access.gate)
        if bounds is not None and not (bounds[0] >= 0 and bounds[1] < size):
            violations.append(Violation(access, size, bounds))
    return violations


def size_variables(sink: UOp) -> tuple[str, ...]:
    """The names of the variables an address, gate or loop bound of `sink` depends on (symbolic sizes), sorted.
    A kernel with some is checked at each distinct set of their values (`DeferredBounds`): proved over the
    variables' whole ranges, a symbolic view of an input sized for one value would be refused."""
    names: set[str] = set()
    for node in sink.toposort:
        if node.op is Ops.INDEX:
            for src in node.src[1:]:
                names.update(str(n.arg[0]) for n in src.toposort if n.op is Ops.DEFINE_VAR)
    return tuple(sorted(names))


@dataclass
class DeferredBounds:
    """`check_kernel_bounds` of a kernel whose accesses depend on variables, at the values it launches with: each
    distinct tuple of values is proved once, before its first launch."""

    sink: UOp
    buffers: Sequence[BufferLike]
    names: tuple[str, ...]  # size_variables(sink)
    var_names: tuple[str, ...]  # the program's variables, in launch order
    kernel: str
    position: int
    producer: str | None
    proved: set[tuple[int, ...]]

    def check(self, vals: Sequence[int]) -> None:
        by_name = dict(zip(self.var_names, vals, strict=True))
        key = tuple(by_name[n] for n in self.names)
        if key in self.proved:
            return
        variables = {n: n for n in self.sink.toposort if n.op is Ops.DEFINE_VAR and str(n.arg[0]) in self.names}
        fixed = self.sink.substitute({v: UOp.const(v.dtype, by_name[str(v.arg[0])]) for v in variables})
        check_kernel_bounds(fixed, self.buffers, kernel=self.kernel, position=self.position, producer=self.producer)
        self.proved.add(key)


def check_kernel_bounds(sink: UOp, buffers: Sequence[BufferLike], *, kernel: str, position: int,
                        producer: str | None) -> None:
    """Raise IndexBoundsError for the first access of `sink` not proved inside its buffer (PARAM i is buffers[i])."""
    violations = find_violations(sink, [b.size for b in buffers])
    if not violations:
        return
    first = violations[0]
    access, buf = first.access, buffers[first.access.param]
    lo, hi = first.bounds
    unbounded = lo <= _INDEX_MIN or hi >= _INDEX_MAX
    where = "at indices that cannot be bounded" if unbounded else f"at indices [{lo}, {hi}]"
    if any(n.op is Ops.LOAD for n in access.index.toposort):
        where += " (the index is computed from a value loaded from memory, which no check can bound)"
    gated = " where its gate holds" if access.gate is not None else ""
    others = len(violations) - 1
    more = f" (and {others} more access{'es' if others > 1 else ''} of this kernel)" if others else ""
    origin = producer if producer else "an unnamed producer (pass producer= to load_plan to name it)"
    allowed = f"outside [0, {buf.size - 1}]" if buf.size else "but the buffer is empty"
    raise IndexBoundsError(
        f"kernel {kernel!r} (CALL {position} of the LINEAR, from {origin}) would {access.kind} PARAM {access.param} "
        f"= buffer {buf.id} ({buf.size} x {dtype_text(buf.dtype)}) {where}{gated}, {allowed}{more}. "
        "The schedule is wrong and launching it could crash the process, so it was refused before lowering: report "
        "it to the authors of the plugin that produced it",
        kernel=kernel, position=position, param=access.param, buffer_id=buf.id, size=buf.size, dtype=buf.dtype,
        bounds=first.bounds, producer=producer)


def _node_bounds(node: UOp) -> Interval:
    """`node`'s interval from plygrad.ir's analysis (cached on the node), the whole `index` range if not integer."""
    lo, hi = node.vmin, node.vmax
    if isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool):
        return (lo, hi)
    return _UNBOUNDED


# ---- the gated prover ---------------------------------------------------------------------------------------------
def _linear(node: UOp, memo: dict[UOp, Linear]) -> Linear:
    """`node` as coefficients of its terms plus a constant (exact: `index` arithmetic never wraps)."""
    found = memo.get(node)
    if found is not None:
        return found
    op, src = node.op, node.src
    result: Linear
    if op is Ops.CONST and isinstance(node.arg, int) and not isinstance(node.arg, bool):
        result = ({}, node.arg)
    elif node.dtype is not dtypes.index:
        result = ({node: 1}, 0)
    elif op in (Ops.ADD, Ops.SUB):
        (a, ka), (b, kb) = _linear(src[0], memo), _linear(src[1], memo)
        sign = 1 if op is Ops.ADD else -1
        coefs = dict(a)
        for term, c in b.items():
            coefs[term] = coefs.get(term, 0) + sign * c
        result = ({t: c for t, c in coefs.items() if c}, ka + sign * kb)
    elif op is Ops.NEG:
        a, ka = _linear(src[0], memo)
        result = ({t: -c for t, c in a.items()}, -ka)
    elif op is Ops.MUL and (src[0].op is Ops.CONST or src[1].op is Ops.CONST):
        const, other = (src[0], src[1]) if src[0].op is Ops.CONST else (src[1], src[0])
        scale = int(const.arg)
        a, ka = _linear(other, memo)
        result = ({t: c * scale for t, c in a.items() if c * scale}, ka * scale)
    else:
        result = ({node: 1}, 0)
    memo[node] = result
    return result


def _conjuncts(gate: UOp) -> list[UOp]:
    """The operands of a tree of boolean ANDs (anything else is one conjunct)."""
    out: list[UOp] = []
    stack = [gate]
    while stack:
        node = stack.pop()
        if node.op is Ops.AND and node.dtype is dtypes.bool:
            stack.extend(node.src)
        else:
            out.append(node)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _scaled(c: int, b: Interval) -> Interval:
    return (c * b[0], c * b[1]) if c >= 0 else (c * b[1], c * b[0])


def _mod_bounds(x: Interval, divisor: int) -> Interval:
    """Bounds of C's `x % divisor` (the sign of the dividend) for x in the interval."""
    m = abs(divisor)
    lo, hi = x
    if lo >= 0:
        return (lo % m, hi % m) if lo // m == hi // m else (0, min(hi, m - 1))
    if hi <= 0:
        neg = _mod_bounds((-hi, -lo), divisor)
        return (-neg[1], -neg[0])
    return (max(lo, -(m - 1)), min(hi, m - 1))


@dataclass
class _Form:
    """A gated sum of terms, `lo <= sum(coefs[t] * t) <= hi` (None: that side is unconstrained)."""

    coefs: dict[UOp, int]
    lo: int | None = None
    hi: int | None = None


class _Prover:
    """Bounds of index expressions over the points where one gate holds (see the module docstring)."""

    def __init__(self, gate: UOp | None) -> None:
        self.linear_memo: dict[UOp, Linear] = {}
        self.memo: dict[UOp, Interval] = {}
        self.term_limits: dict[UOp, list[int | None]] = {}  # [lo, hi] the gate gives one term
        self.forms: dict[frozenset[tuple[UOp, int]], _Form] = {}
        for cond in _conjuncts(gate) if gate is not None else []:
            self._constrain(cond)
        # the longest sums first: they take the most terms out of an index at once
        self.ordered = sorted(self.forms.values(), key=lambda f: -len(f.coefs))

    def _constrain(self, cond: UOp) -> None:
        if cond.op is Ops.CONST:
            if cond.arg is False:
                raise _UnreachableError
            return
        # only comparisons of `index` values are linear facts; others (int32 may wrap, CMPNE, OR) are dropped,
        # which only weakens the gate
        if cond.op is not Ops.CMPLT or cond.src[0].dtype is not dtypes.index:
            return
        (a, ka), (b, kb) = _linear(cond.src[0], self.linear_memo), _linear(cond.src[1], self.linear_memo)
        coefs = dict(b)
        for term, c in a.items():
            coefs[term] = coefs.get(term, 0) - c
        coefs = {t: c for t, c in coefs.items() if c}
        k = kb - ka  # a < b  <=>  sum(coefs * terms) + k >= 1
        if not coefs:
            if k < 1:
                raise _UnreachableError
            return
        g = 0
        for c in coefs.values():
            g = gcd(g, c)
        unit = {t: c // g for t, c in coefs.items()}  # g * unit + k >= 1
        flipped = frozenset((t, -c) for t, c in unit.items())
        if flipped in self.forms:  # store a sum and its negation as one form: unit = -form
            self._limit(self.forms[flipped], None, (k - 1) // g)
        else:
            self._limit(self.forms.setdefault(frozenset(unit.items()), _Form(unit)), _ceil_div(1 - k, g), None)
        if len(unit) == 1:
            ((term, c),) = unit.items()
            limits = self.term_limits.setdefault(term, [None, None])
            bound = _ceil_div(1 - k, g) if c > 0 else (k - 1) // g  # c is +1 or -1 after dividing by g
            if c > 0:
                limits[0] = bound if limits[0] is None else max(limits[0], bound)
            else:
                limits[1] = bound if limits[1] is None else min(limits[1], bound)

    def check_satisfiable(self) -> _Prover:
        """This prover, or _UnreachableError when one of the gate's constraints holds nowhere (on its own), even
        one on a loop variable the index does not use: the gate is then never true and the access never runs."""
        for form in self.ordered:
            box = self._box(form.coefs)  # bounding a constrained term narrows it, raising when it is emptied
            if (form.lo is not None and form.lo > box[1]) or (form.hi is not None and form.hi < box[0]):
                raise _UnreachableError
        return self

    @staticmethod
    def _limit(form: _Form, lo: int | None, hi: int | None) -> None:
        if lo is not None:
            form.lo = lo if form.lo is None else max(form.lo, lo)
        if hi is not None:
            form.hi = hi if form.hi is None else min(form.hi, hi)

    # ---- bounds --------------------------------------------------------------------------------------------
    def bound(self, node: UOp) -> Interval:
        """An interval holding every value of `node` where the gate holds; _UnreachableError when there is none."""
        found = self.memo.get(node)
        if found is not None:
            if found[0] > found[1]:
                raise _UnreachableError
            return found
        self.memo[node] = _node_bounds(node)  # a placeholder, in case a malformed graph leads back here
        try:
            coefs, k = _linear(node, self.linear_memo)
            if len(coefs) == 1 and k == 0 and coefs.get(node) == 1:
                result = self._term_bound(node)
            else:
                result = self._sum_bound(dict(coefs), k)
                plain = _node_bounds(node)
                result = (max(result[0], plain[0]), min(result[1], plain[1]))
        except _UnreachableError:
            result = _EMPTY
        self.memo[node] = result  # an empty interval too: the next access asking gets the same answer
        if result[0] > result[1]:
            raise _UnreachableError
        return result

    def _sum_bound(self, rest: dict[UOp, int], k: int) -> Interval:
        lo = hi = k
        for form in self.ordered:
            ratio = self._ratio(rest, form.coefs)
            if ratio is None:
                continue
            box = self._box(form.coefs)
            form_lo = box[0] if form.lo is None else max(box[0], form.lo)
            form_hi = box[1] if form.hi is None else min(box[1], form.hi)
            if form_lo > form_hi:
                raise _UnreachableError
            part = _scaled(ratio, (form_lo, form_hi))
            lo, hi = lo + part[0], hi + part[1]
            for term in form.coefs:
                del rest[term]
        box = self._box(rest)
        return (lo + box[0], hi + box[1])

    @staticmethod
    def _ratio(rest: dict[UOp, int], form: dict[UOp, int]) -> int | None:
        """r where `rest` holds r * form exactly on the form's terms (so those terms are replaced by the form)."""
        first, c0 = next(iter(form.items()))
        have = rest.get(first)
        if have is None or have % c0:
            return None
        ratio = have // c0
        return ratio if all(rest.get(t) == ratio * c for t, c in form.items()) else None

    def _box(self, coefs: dict[UOp, int]) -> Interval:
        lo = hi = 0
        for term, c in coefs.items():
            part = _scaled(c, self.bound(term))
            lo, hi = lo + part[0], hi + part[1]
        return (lo, hi)

    def _term_bound(self, node: UOp) -> Interval:
        lo, hi = self._natural(node)
        plain = _node_bounds(node)
        lo, hi = max(lo, plain[0]), min(hi, plain[1])
        limits = self.term_limits.get(node)
        if limits is not None:
            lo = lo if limits[0] is None else max(lo, limits[0])
            hi = hi if limits[1] is None else min(hi, limits[1])
        return (lo, hi)

    def _natural(self, node: UOp) -> Interval:
        """A term's interval from its sources' gated intervals (where the gate narrows them, this one narrows)."""
        op, src = node.op, node.src
        if op is Ops.RANGE and src[0].dtype is dtypes.index:
            return (0, self.bound(src[0])[1] - 1)  # empty when the loop runs zero times
        if node.dtype is not dtypes.index:
            return _node_bounds(node)
        if op in (Ops.IDIV, Ops.MOD) and src[1].op is Ops.CONST and isinstance(src[1].arg, int) and src[1].arg:
            x, divisor = self.bound(src[0]), int(src[1].arg)
            if op is Ops.MOD:
                return _mod_bounds(x, divisor)
            ends = (_trunc_div(x[0], divisor), _trunc_div(x[1], divisor))
            return (min(ends), max(ends))
        if op is Ops.MUL:
            a, b = self.bound(src[0]), self.bound(src[1])
            corners = [p * q for p in a for q in b]
            return (min(corners), max(corners))
        if op is Ops.MAX:
            a, b = self.bound(src[0]), self.bound(src[1])
            return (max(a[0], b[0]), max(a[1], b[1]))
        return _node_bounds(node)
