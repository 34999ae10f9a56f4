"""Split reductions: a reduce range read as `r // c` and `r % c` becomes two ranges, so its addresses are linear.

Attention's output projection reads its input with the heads transposed back, `x[b, r // 32, i, r % 32]`: every
reduce step divides. This pass (before `simplify`, on targets without workgroups) replaces a REDUCE range r of
constant size N that some IDIV or MOD divides by a constant c (one c for all of them, c dividing N), and that is
otherwise only used in addresses (a one-hot selection compares r: that one stays for gather.py), by r_hi
(N // c steps, r's axis id) and r_lo (c steps, a new id), r = r_hi*c + r_lo, r_lo innermost. `simplify` then folds
`(r_hi*c + r_lo) // c` to r_hi and the remainder to r_lo. The reduction visits the same terms in the same order,
so no result changes; the matmul tiles (tiles.py) then see a product over (r_hi, r_lo) with plain strides.
"""

from __future__ import annotations

from plygrad.codegen.scope import substitute_ranges
from plygrad.ir import AxisType, Ops, Target, UOp, dtypes


def _divisors(kernel: UOp, r: UOp) -> set[int] | None:
    """The constants c that an IDIV or MOD of r itself divides by; None when r, or index math computed from it, is
    used otherwise than in an address (a one-hot selection compares `r // c` with an index: gather.py must still see
    that comparison over one range)."""
    users: dict[UOp, list[tuple[UOp, int]]] = {}
    for node in kernel.toposort:
        for position, s in enumerate(node.src):
            users.setdefault(s, []).append((node, position))
    found: set[int] = set()
    stack, seen = [r], {r}
    while stack:
        node = stack.pop()
        for user, position in users.get(node, ()):
            if user.op in (Ops.REDUCE, Ops.END) and position >= 1 and node is r:
                continue
            if user.op is Ops.INDEX and position == 1:
                continue
            if user.dtype is not dtypes.index or user.op not in (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD):
                return None
            if user.op in (Ops.IDIV, Ops.MOD) and user.src[0] is r and user.src[1].op is Ops.CONST:
                found.add(int(user.src[1].arg))
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return found


def _split(kernel: UOp, r: UOp, c: int, axis: int) -> UOp:
    hi = UOp.range(int(r.src[0].arg) // c, int(r.arg[0]), AxisType.REDUCE)
    lo = UOp.range(c, axis, AxisType.REDUCE)
    return substitute_ranges(kernel, {r: hi * c + lo}, {r: (hi, lo)})


def split_ranges(kernel: UOp, target: Target) -> UOp:
    """`kernel` with every reduce range that is divided by one constant split in two (module docstring)."""
    if target.has_local:
        return kernel
    while True:
        ranges = [n for n in kernel.toposort if n.op is Ops.RANGE]
        found = None
        for r in ranges:
            if r.arg[1] is not AxisType.REDUCE or r.src[0].op is not Ops.CONST or r.dtype is not dtypes.index:
                continue
            size, divisors = int(r.src[0].arg), _divisors(kernel, r)
            if divisors is not None and len(divisors) == 1 and 1 < (c := divisors.pop()) < size and size % c == 0:
                found = (r, c)
                break
        if found is None:
            return kernel
        kernel = _split(kernel, *found, 1 + max(int(n.arg[0]) for n in ranges))
