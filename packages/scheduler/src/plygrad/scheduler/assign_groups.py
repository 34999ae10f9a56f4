"""Rule 9: in-place updates of one shape share a kernel (an optimizer step).

Adam updates each parameter with three ASSIGNs, `m <- b1*m + (1-b1)*g`, `v <- b2*v + (1-b2)*g^2` and
`p <- p - lr * m_hat / (sqrt(v_hat) + eps)`, where the last reads the first two. Each was a kernel of its own, so a
step of a six-parameter MLP launched 18 update kernels and read `m` and `v` back from memory right after writing
them. Here ASSIGNs that write whole buffers elementwise over one shape on one device are grouped, and a group is
one kernel: one loop nest, one STORE per ASSIGN, and an ASSIGN of the group that a later one reads is read as its
value (lowering.add_assigns_in_one_loop), so `p`'s update uses the new `m` and `v` from registers.

Grouping moves an ASSIGN later, to where its group is emitted, so `plan_units` closes (emits) an open group before
any root that must see its writes: one that reads a member (or the buffer a member writes), and an ASSIGN into a
buffer a member still has to read raw. The kernel itself is kept only if every load of a target reads the address
its STORE writes and feeds that STORE (so it reads the old value, before the write, whatever order codegen puts
the statements in); otherwise the members are emitted one by one (`safe_in_place`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from plygrad.ir import Ops, UOp, written_buffer
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET
from plygrad.scheduler.fusion import contiguous_buffer

Regions = dict[UOp, tuple[set[UOp], set[UOp], bool]]  # root -> (roots it reads, BUFFERs it reads raw, has a REDUCE)
GroupKey = tuple[tuple[int, ...], str]


def group_key(root: UOp, regions: Regions, device: str) -> GroupKey | None:
    """The (shape, device) an ASSIGN groups by, or None when it cannot join a group: not an ASSIGN, a reduction
    fused into it (its loops are not only the output's), or a target that is not a whole buffer."""
    shape = root.shape
    if root.op is not Ops.ASSIGN or regions[root][2] or shape is None or not shape:
        return None
    target = contiguous_buffer(root)
    if target is None or target.arg.size != math.prod(shape):
        return None
    return shape, device


def plan_units(ordered: Sequence[UOp], regions: Regions, key_of: Callable[[UOp], GroupKey | None],
               sizes: dict[UOp, int]) -> list[list[UOp]]:
    """`ordered` cut into emission units, in a safe order: a group of ASSIGNs (one kernel) or a single root."""
    units: list[list[UOp]] = []
    groups: dict[GroupKey, list[UOp]] = {}  # the open groups, in the order they were opened

    def close(must: Callable[[list[UOp]], bool]) -> None:
        for key in [k for k, members in groups.items() if must(members)]:
            units.append(groups.pop(key))

    for root in ordered:
        deps, raw, _ = regions[root]
        writes = written_buffer(root) if root.op is Ops.ASSIGN else None
        key = key_of(root)
        own = groups.get(key) if key is not None else None

        def conflicts(members: list[UOp], deps: set[UOp] = deps, raw: set[UOp] = raw,
                      writes: UOp | None = writes, own: list[UOp] | None = own) -> bool:
            if members is own:
                return False  # a member reading an earlier member reads its value (or fails safe_in_place)
            targets = {written_buffer(m) for m in members}
            reads_a_member = not deps.isdisjoint(members) or not raw.isdisjoint(targets)
            overwrites_a_read = writes is not None and any(writes in regions[m][1] for m in members)
            return reads_a_member or overwrites_a_read

        close(conflicts)
        if key is None:
            units.append([root])
            continue
        members = groups.get(key)
        if members is not None and sum(sizes.get(m, 1) for m in members) + sizes.get(root, 1) > KERNEL_NODE_BUDGET:
            units.append(groups.pop(key))
        groups.setdefault(key, []).append(root)
    close(lambda members: True)
    return units


def safe_in_place(kernel: UOp, targets: int) -> bool:
    """Whether every LOAD of the first `targets` PARAMs (the ASSIGN targets) reads the address its STORE writes and
    is computed on the way to that STORE's value, so it reads the old value whatever the statement order."""
    for param in range(targets):
        stores = [n for n in kernel.toposort if n.op is Ops.STORE and n.src[0].src[0].arg == param]
        if len(stores) != 1:
            return False
        store = stores[0]
        loads = [n for n in kernel.toposort if n.op is Ops.LOAD and n.src[0].src[0].arg == param]
        feeding = store.src[1].toposort
        if any(load.src[0] is not store.src[0] or load not in feeding for load in loads):
            return False
    return True
