"""Merged output axes: two output loops that every address reads as one become one loop (CPU targets).

`(8, 21, 384) @ W.T` reaches codegen as axes (b, i, j, k) that `x` and the output address as `(b*21 + i)*384`:
two short row axes where tiles and packs want one of 168. Before `simplify`, on targets without workgroups, a pair
of constant-size LOOP ranges a, b (b the next output axis after a) becomes one range of size na*nb when the kernel
is a reduction with an operand that depends on neither, every use of a or b is index math ending in an INDEX
address (or END's range list), and every such address is a polynomial with `ca*a + cb*b`, `ca == nb*cb`. Pairs
merge until none is left. Loads and stores stay the same, in the same order, so no result changes.
docs/codegen.md §1 (`merge_axes`).
"""

from __future__ import annotations

import itertools

from plygrad.codegen.scope import substitute_ranges
from plygrad.codegen.transpose import Poly, polynomial
from plygrad.ir import AxisType, GroupOp, Ops, Target, UOp, dtypes


def _users(kernel: UOp) -> dict[UOp, list[tuple[UOp, int]]]:
    users: dict[UOp, list[tuple[UOp, int]]] = {}
    for node in kernel.toposort:
        for position, s in enumerate(node.src):
            users.setdefault(s, []).append((node, position))
    return users


def _linear_pair(poly: Poly, a: int, b: int, inner: int) -> bool:
    """Whether a and b appear in `poly` only as ca*a + cb*b with ca == inner*cb."""
    if any((a in key or b in key) and key not in ((a,), (b,)) for key in poly):
        return False
    return poly.get((a,), 0) == inner * poly.get((b,), 0)


def _mergeable(kernel: UOp, users: dict[UOp, list[tuple[UOp, int]]], a: UOp, b: UOp) -> bool:
    loads = [n for n in kernel.toposort if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX]
    if not any(a not in n.src[0].toposort and b not in n.src[0].toposort for n in loads):
        return False
    ids: dict[UOp, int] = {a: 0, b: 1}
    memo: dict[UOp, Poly | None] = {}
    inner = int(b.src[0].arg)
    stack, seen = [a, b], {a, b}
    while stack:
        node = stack.pop()
        for user, position in users.get(node, ()):
            if user.op is Ops.END and position >= 1 and node in (a, b):
                continue
            if user.op is Ops.INDEX and position == 1:
                poly = polynomial(user.src[1], ids, memo)
                if poly is None or not _linear_pair(poly, 0, 1, inner):
                    return False
                continue
            if user.dtype is not dtypes.index or user.op not in GroupOp.ALU:
                return False  # a gate, a value computed from the index (arange), a REDUCE over it...
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return True


def _merge(kernel: UOp, a: UOp, b: UOp) -> UOp:
    m = UOp.range(int(a.src[0].arg) * int(b.src[0].arg), int(a.arg[0]), AxisType.LOOP)
    # every address is rest + cb*(size(b)*a + b): a reads as 0 and b as m, and m closes where both did
    return substitute_ranges(kernel, {a: UOp.const(dtypes.index, 0), b: m}, {a: (), b: (m,)})


def merge_axes(kernel: UOp, target: Target) -> UOp:
    """`kernel` with every mergeable pair of output loops merged into one (module docstring)."""
    if target.has_local or not any(n.op is Ops.REDUCE for n in kernel.toposort):
        return kernel
    while True:
        loops = sorted((n for n in kernel.toposort if n.op is Ops.RANGE and n.arg[1] is AxisType.LOOP),
                       key=lambda r: int(r.arg[0]))
        users = _users(kernel)
        pair = next(((a, b) for a, b in itertools.pairwise(loops)
                     if a.src[0].op is Ops.CONST and b.src[0].op is Ops.CONST and _mergeable(kernel, users, a, b)),
                    None)
        if pair is None:
            return kernel
        kernel = _merge(kernel, *pair)
