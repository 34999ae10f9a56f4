"""From a tensor SINK to a schedule: roots in a safe order, one CALL per kernel or copy, buffers declared.

The steps, in order: the clean-up passes (passes.TENSOR_PASSES), choosing the roots (fusion.py), ordering them
(sources first, and every raw read of a buffer before an ASSIGN that overwrites it), lowering each root's fused
region into a kernel (lowering.py), grouping independent same-shaped elementwise outputs into one kernel with
several STOREs, and in-place updates of one shape into one loop nest (assign_groups.py), writing wide
concatenations piece by piece (concat.py), and sharing intermediate buffers (planning.py). No kernel packs more
than the node budget (budget.py) of fused regions.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

from plygrad.ir import BufferRef, Ops, Stage, UOp, dtypes, graph_rewrite, strip_reshapes, verify, written_buffer
from plygrad.ir.shape import max_shape
from plygrad.scheduler.assign_groups import group_key, plan_units, safe_in_place
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET
from plygrad.scheduler.concat import Concat
from plygrad.scheduler.errors import ScheduleError
from plygrad.scheduler.fusion import contiguous_buffer, named_devices, plan_fusion, users_of
from plygrad.scheduler.lowering import KernelBuilder, kernel_name
from plygrad.scheduler.passes import TENSOR_PASSES
from plygrad.scheduler.planning import share_buffers

DEFAULT_DEVICE = "CPU"  # the device of a tensor computed only from constants (no BUFFER to take it from)
# a piece of a concatenation this large (elements) gets a kernel of its own: the heuristic then parallelizes and
# vectorizes its loop, which it does for only one loop nest of a kernel
OWN_KERNEL_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class _Slice:
    """A piece of a concatenation to store (None: a gap of zeros) and the size of its fused region."""

    value: UOp | None
    start: int
    length: int
    size: int


def _pack_by_size(roots: list[UOp], sizes: dict[UOp, int]) -> list[list[UOp]]:
    """`roots` in order, cut into consecutive groups whose fused regions add up to at most the node budget."""
    groups: list[list[UOp]] = []
    total = KERNEL_NODE_BUDGET + 1
    for root in roots:
        size = sizes.get(root, 1)
        if total + size <= KERNEL_NODE_BUDGET:
            groups[-1].append(root)
            total += size
        else:
            groups.append([root])
            total = size
    return groups


def _pack(slices: list[_Slice], alone: Callable[[_Slice], bool]) -> list[list[_Slice]]:
    """`slices` in order, cut into consecutive kernels whose region sizes add up to at most the node budget; a
    slice for which `alone` holds gets a kernel of its own."""
    groups: list[list[_Slice]] = []
    total = KERNEL_NODE_BUDGET + 1  # nothing open yet
    for piece in slices:
        if alone(piece):
            groups.append([piece])
            total = KERNEL_NODE_BUDGET + 1
        elif total + piece.size <= KERNEL_NODE_BUDGET:
            groups[-1].append(piece)
            total += piece.size
        else:
            groups.append([piece])
            total = piece.size
    return groups


def _devices(order: tuple[UOp, ...], named: dict[UOp, str | None]) -> tuple[dict[UOp, str], set[UOp]]:
    """Each node's device, and the constant-only nodes read on more than one device.

    A node computed from constants alone names no device (fusion.named_devices gives None): it is computed on the
    device of its first consumer that has one, so a constant-only tensor the frontend marks with a COPY to its
    device is computed there (emit_copy copies nothing). A SINK source with no device at all (a producer that did
    not mark it) takes the graph's first BUFFER's device, else DEFAULT_DEVICE. A constant-only node that becomes a
    root and is read on several devices (`arange(4, device=A)` and `arange(4, device=B)` are one hash-consed node)
    is copied to each other device that reads it (_Scheduler.kernel).
    """
    users = users_of(order)
    placed: dict[UOp, str | None] = {}
    mixed: set[UOp] = set()
    for node in reversed(order):  # consumers before their sources
        device = named[node]
        if device is None:
            wanted = [d for d in dict.fromkeys(placed[u] for u in users[node]) if d is not None]
            device = wanted[0] if wanted else None
            if len(wanted) > 1 or any(u in mixed for u in users[node]):  # read, maybe through views, on several
                mixed.add(node)
        placed[node] = device
    fallback = next((n.arg.device for n in order if n.op is Ops.BUFFER), DEFAULT_DEVICE)
    return {node: fallback if d is None else d for node, d in placed.items()}, mixed


def _region(root: UOp, roots: set[UOp]) -> tuple[set[UOp], set[UOp], bool]:
    """The roots `root` reads, the raw BUFFERs it reads, and whether a REDUCE is fused into it."""
    deps: set[UOp] = set()
    raw: set[UOp] = set()
    has_reduce = root.op is Ops.REDUCE
    stack = list(root.src)
    seen: set[UOp] = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node in roots:
            deps.add(node)
        elif node.op is Ops.BUFFER:
            raw.add(node)
        else:
            has_reduce = has_reduce or node.op is Ops.REDUCE
            stack.extend(node.src)
    return deps, raw, has_reduce


def _order_roots(roots: list[UOp], regions: dict[UOp, tuple[set[UOp], set[UOp], bool]]) -> list[UOp]:
    """Sources first; a root reading a buffer raw runs before an ASSIGN into that buffer it does not depend on."""
    position = {r: i for i, r in enumerate(roots)}
    after: dict[UOp, set[UOp]] = {r: set(regions[r][0]) for r in roots}  # root -> roots that must run first
    assigns = [a for a in roots if a.op is Ops.ASSIGN]
    if not assigns:
        return roots  # already in topological order
    closure: dict[UOp, set[UOp]] = {}
    for r in roots:  # transitive dependencies, in topological order
        closure[r] = set().union(*(closure[d] | {d} for d in after[r])) if after[r] else set()
    for a in assigns:
        target = written_buffer(a)
        for r in roots:
            if r is not a and target in regions[r][1] and a not in closure[r]:
                after[a].add(r)
    indegree = {r: len(after[r]) for r in roots}
    users: dict[UOp, list[UOp]] = {r: [] for r in roots}
    for r in roots:
        for d in after[r]:
            users[d].append(r)
    ready = [(position[r], r.op, r) for r in roots if indegree[r] == 0]
    heapq.heapify(ready)
    ordered: list[UOp] = []
    while ready:
        _, _, r = heapq.heappop(ready)
        ordered.append(r)
        for u in users[r]:
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, (position[u], u.op, u))
    if len(ordered) != len(roots):
        raise ScheduleError("the tensor graph reads a buffer both before and after an ASSIGN into it in one "
                            "expression: realize (CONTIGUOUS) the old value before assigning")
    return ordered


class _Scheduler:
    def __init__(self, sink: UOp, fuse: bool) -> None:
        self.sink = sink
        self.fuse = fuse
        order = sink.toposort
        self.named = named_devices(order)
        self.devices, self.mixed = _devices(order, self.named)
        self.copies: dict[tuple[UOp, str], UOp] = {}  # (mixed node, device) -> its copy there
        self.binds = {b.src[0]: b for b in order if b.op is Ops.BIND}
        self.realized: dict[UOp, UOp] = {}
        self.calls: list[UOp] = []
        self.next_id = -1

    def new_buffer(self, node: UOp) -> UOp:
        shape = node.shape
        assert shape is not None
        buf = UOp(Ops.BUFFER, node.dtype, (), BufferRef(self.next_id, self.devices[node], math.prod(max_shape(shape))))
        self.next_id -= 1
        return buf

    def realized_on(self, device: str) -> dict[UOp, UOp]:
        """What a kernel on `device` loads each realized node from (copies of mixed nodes, see copied_to)."""
        if not self.mixed:
            return self.realized
        return {**self.realized, **self.copied_to(device)}

    def kernel(self, roots: list[UOp], outs: list[UOp]) -> KernelBuilder:
        builder = KernelBuilder(self.realized_on(self.devices[roots[0]]), outs, self.binds)
        for root, out in zip(roots, outs, strict=True):
            builder.add_root(root, out)
        return builder

    def copied_to(self, device: str) -> dict[UOp, UOp]:
        """The realized constant-only nodes read on several devices (see _devices), each as a buffer on `device`:
        a COPY CALL is emitted the first time a kernel on `device` may read one that lives elsewhere."""
        found: dict[UOp, UOp] = {}
        for node in self.mixed:
            buf = self.realized.get(node)
            if buf is None or buf.arg.device == device:
                continue
            if (node, device) not in self.copies:
                shape = node.shape
                assert shape is not None
                dst = UOp(Ops.BUFFER, node.dtype, (), BufferRef(self.next_id, device, math.prod(max_shape(shape))))
                self.next_id -= 1
                self.calls.append(UOp(Ops.CALL, dtypes.void, (UOp(Ops.COPY, dtypes.void), dst, buf), "copy"))
                self.copies[(node, device)] = dst
            found[node] = self.copies[(node, device)]
        return found

    def emit_assign(self, assign: UOp) -> None:
        target = written_buffer(assign)
        builder = self.kernel([assign], [target])
        if not _reads_in_place(builder.kernel(""), target_param=0) and assign.src[1] not in self.realized:
            # the value reads the target at other addresses than it writes: compute it into a temporary first
            self.emit([assign.src[1]])
            builder = self.kernel([assign], [target])
        self.calls.append(builder.call(kernel_name([assign], builder.has_reduce)))

    def emit_assign_group(self, assigns: list[UOp]) -> None:
        """ASSIGNs of one shape in one kernel (assign_groups.py, rule 9), or one kernel each where that is not
        safe."""
        targets = [written_buffer(a) for a in assigns]
        builder = KernelBuilder(self.realized_on(self.devices[assigns[0]]), targets, self.binds)
        builder.add_assigns_in_one_loop(assigns, targets)
        if not safe_in_place(builder.kernel(""), len(assigns)):
            for assign in assigns:
                self.emit_assign(assign)
            return
        self.calls.append(builder.call(kernel_name(assigns, builder.has_reduce)))

    def emit(self, roots: list[UOp]) -> None:
        outs = [self.new_buffer(r) for r in roots]
        builder = self.kernel(roots, outs)
        self.calls.append(builder.call(kernel_name(roots, builder.has_reduce)))
        self.realized.update(zip(roots, outs, strict=True))

    def emit_concat(self, concat: Concat, sizes: dict[UOp, int]) -> None:
        """One output buffer; its pieces (and zero gaps) written into their slices by as few kernels as the node
        budget allows, a large piece by a kernel of its own."""
        root = concat.node
        shape = root.shape
        assert shape is not None
        out = self.new_buffer(root)
        row = math.prod(shape) // max(shape[concat.axis], 1)
        slices = [_Slice(p.value, p.start, p.length, sizes.get(p.pad, 1)) for p in concat.pieces]
        slices += [_Slice(None, start, length, 1) for start, length in concat.gaps]
        for group in _pack(slices, lambda s: s.length * row >= OWN_KERNEL_ELEMENTS):
            builder = KernelBuilder(self.realized_on(self.devices[root]), [out], self.binds)
            for piece in group:
                builder.add_slice(piece.value, out, shape, axis=concat.axis, start=piece.start, length=piece.length)
            self.calls.append(builder.call(kernel_name([root], builder.has_reduce)))
        self.realized[root] = out

    def emit_copy(self, copy: UOp) -> None:
        if self.named[copy.src[0]] is None:
            # a constant-only source: the COPY names where to compute it. A source that is a root of its own (a
            # CONTIGUOUS) computed there already is the result; otherwise the COPY's kernel computes it
            done = self.realized.get(strip_reshapes(copy.src[0]))
            if done is not None and done.arg.device == copy.arg:
                self.realized[copy] = done
            else:
                self.emit([copy])
            return
        src = contiguous_buffer(copy.src[0]) or self.realized[strip_reshapes(copy.src[0])]
        dst = self.new_buffer(copy)
        self.calls.append(UOp(Ops.CALL, dtypes.void, (UOp(Ops.COPY, dtypes.void), dst, src), "copy"))
        self.realized[copy] = dst

    def run(self) -> UOp:
        plan = plan_fusion(self.sink, self.fuse)
        roots = plan.roots
        root_set = set(roots)
        regions = {r: _region(r, root_set) for r in roots}
        ordered = _order_roots(roots, regions)
        groups = self.group_outputs(ordered, regions, plan.concats.keys(), plan.sizes) if self.fuse else {}
        if self.fuse:
            units = plan_units(ordered, regions, lambda r: group_key(r, regions, self.devices[r]), plan.sizes)
        else:
            units = [[root] for root in ordered]
        pending: dict[int, list[UOp]] = {}
        for unit in units:
            if len(unit) > 1:
                self.emit_assign_group(unit)
                continue
            root = unit[0]
            if root in plan.concats:
                self.emit_concat(plan.concats[root], plan.sizes)
            elif root.op is Ops.COPY:
                self.emit_copy(root)
            elif root.op is Ops.ASSIGN:
                self.emit_assign(root)
            elif root in groups:
                members = pending.setdefault(id(groups[root]), [])
                members.append(root)
                if len(members) == len(groups[root]):
                    self.emit(members)
            else:
                self.emit([root])
        outputs = tuple(self.output_id(s) for s in self.sink.src)
        mapping = share_buffers(self.calls, set(outputs))
        calls = [c.substitute(mapping) for c in self.calls] if mapping else self.calls
        return UOp(Ops.LINEAR, dtypes.void, tuple(calls), outputs)

    def group_outputs(self, ordered: list[UOp], regions: dict[UOp, tuple[set[UOp], set[UOp], bool]],
                      concats: Collection[UOp], sizes: dict[UOp, int]) -> dict[UOp, list[UOp]]:
        """Outputs of the SINK that nothing else reads, computed elementwise over one shape on one device, share a
        kernel (one loop nest, several STOREs): inputs they have in common are read in the same loop. Only in
        graphs without ASSIGN, so that moving a root later never moves it past a write it must precede; a group
        holds no more fused nodes than the budget allows."""
        if any(r.op is Ops.ASSIGN for r in ordered):
            return {}
        read_by_roots = set().union(*(regions[r][0] for r in ordered))
        outputs = {strip_reshapes(s) for s in self.sink.src}
        by_kind: dict[tuple[tuple[int, ...] | None, str], list[UOp]] = {}
        for r in ordered:
            if (r in outputs and r not in read_by_roots and r.op is not Ops.COPY and r not in concats
                    and not regions[r][2]):
                by_kind.setdefault((r.shape, self.devices[r]), []).append(r)
        groups: dict[UOp, list[UOp]] = {}
        for members in by_kind.values():
            for group in _pack_by_size(members, sizes):
                if len(group) > 1:
                    groups.update((r, group) for r in group)
        return groups

    def output_id(self, out: UOp) -> int:
        base = strip_reshapes(out)
        if base.op is Ops.ASSIGN:
            return int(written_buffer(base).arg.id)
        buf = contiguous_buffer(out)
        return int((buf if buf is not None else self.realized[base]).arg.id)


def _reads_in_place(kernel: UOp, target_param: int) -> bool:
    """Does every load of PARAM `target_param` read exactly the address the kernel stores to (or none)?"""
    stores = {n.src[0] for n in kernel.toposort if n.op is Ops.STORE and n.src[0].src[0].arg == target_param}
    loads = {n.src[0] for n in kernel.toposort if n.op is Ops.LOAD and n.src[0].src[0].arg == target_param}
    return not loads or loads <= stores


def schedule_uop(sink: UOp, fuse: bool = True) -> UOp:
    """Schedule a tensor SINK into a LINEAR of CALLs (fuse=False: one kernel per op, the `unfused` scheduler)."""
    if sink.op is not Ops.SINK:
        raise ScheduleError(f"a scheduler takes a tensor SINK, got a {sink.op.name}: wrap the tensors in a SINK")
    for tensor_pass in TENSOR_PASSES:
        sink = graph_rewrite(sink, tensor_pass)
    linear = _Scheduler(sink, fuse).run()
    verify(linear, Stage.SCHEDULE)
    return linear
