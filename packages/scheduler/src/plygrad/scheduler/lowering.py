"""Lowering: the fused region under a kernel root becomes a kernel AST (STOREs of index expressions over RANGEs).

A tensor node is lowered *at* index expressions (one per axis) under a validity gate: loads of realized tensors
become `LOAD(INDEX(PARAM, address[, gate]))`, movement ops rewrite the indices (indexing.py), ALU ops and CASTs are
rebuilt on their lowered sources, a fused REDUCE opens fresh `AxisType.REDUCE` ranges for its reduced axes, and a
`BIND` becomes its `DEFINE_VAR` (the CALL carries the BIND). Lowering is memoized on (node, indices, gate) and walks
with an explicit stack, so a node read twice at the same place is built once and deep graphs need no recursion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from plygrad.ir import AxisType, GroupOp, KernelInfo, Ops, UOp, dtypes, reduce_identity
from plygrad.ir.shape import dim_text, is_symbolic
from plygrad.scheduler.errors import ScheduleError
from plygrad.scheduler.indexing import (
    Gate,
    Indices,
    flat_index,
    index_const,
    is_empty,
    kernel_dim,
    kernel_shape,
    move_index,
    simplify,
    view_address,
)

_Key = tuple[UOp, Indices, Gate]

class KernelBuilder:
    """Builds one kernel: its PARAMs (outputs first), its ranges (distinct axis ids) and its STOREs.

    `realized` maps every tensor node that already has a buffer to that BUFFER (a contiguous row-major copy of the
    node), so lowering stops there and loads.
    """

    def __init__(self, realized: dict[UOp, UOp], outputs: Sequence[UOp], binds: dict[UOp, UOp]) -> None:
        self.realized = realized
        self.binds = binds  # DEFINE_VAR -> the BIND giving it a value, for the whole tensor graph
        self.buffers: list[UOp] = list(outputs)
        self.params: dict[UOp, UOp] = {}
        for buf in outputs:
            self._param(buf)
        self.next_axis = 0
        self.memo: dict[_Key, UOp] = {}
        self.deps: dict[_Key, list[_Key]] = {}
        self.current_root: UOp | None = None
        self.inline_assigns: frozenset[UOp] = frozenset()  # ASSIGNs of this kernel read as their values
        self.stores: list[UOp] = []
        self.loops: list[tuple[UOp, ...]] = []  # the output loops of each STORE
        self.has_reduce = False

    # ---- building blocks --------------------------------------------------------------------------------------
    def _param(self, buf: UOp) -> UOp:
        param = self.params.get(buf)
        if param is None:
            if buf not in self.buffers:
                self.buffers.append(buf)
            param = UOp(Ops.PARAM, buf.dtype.ptr(buf.arg.size), (), self.buffers.index(buf))
            self.params[buf] = param
        return param

    def _range(self, size: int, axis_type: AxisType) -> UOp:
        if type(size) is int and size == 1:
            return index_const(0)
        rng = UOp.range(kernel_dim(size), self.next_axis, axis_type)
        self.next_axis += 1
        return rng

    def _load(self, buf: UOp, address: UOp, gate: Gate) -> UOp:
        if gate is not None and gate.op is Ops.CONST:  # a gate known false: the padded region reads 0
            return UOp.const(buf.dtype, 0)
        param = self._param(buf)
        src = (param, simplify(address)) if gate is None else (param, simplify(address), gate)
        return UOp(Ops.LOAD, buf.dtype, (UOp(Ops.INDEX, param.dtype, src),))

    def _is_load(self, node: UOp) -> bool:
        return node in self.realized and node is not self.current_root

    # ---- lowering a tensor node at indices ---------------------------------------------------------------------
    def _children(self, key: _Key) -> list[_Key]:
        node, idxs, gate = key
        if self._is_load(node) or node.op in (Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
            return []
        if node.op in GroupOp.Movement:
            return [(node.src[0], *move_index(node, idxs, gate))]
        if node.op in GroupOp.Elementwise:
            return [(s, idxs, gate) for s in node.src]
        if node.op is Ops.REDUCE:
            self.has_reduce = True
            shape = node.src[0].shape
            assert shape is not None
            _, axes = node.arg
            if any(type(shape[i]) is int and shape[i] == 0 for i in axes):
                return []  # a reduce over nothing is its identity (built in _build)
            inner = tuple(self._range(shape[i], AxisType.REDUCE) if i in axes else idx for i, idx in enumerate(idxs))
            return [(node.src[0], inner, gate)]
        if node.op is Ops.CONTIGUOUS or (node.op in (Ops.ASSIGN, Ops.COPY) and node is self.current_root) \
                or node in self.inline_assigns:
            return [(node.src[-1], idxs, gate)]
        if node.op is Ops.ASSIGN:  # reading an ASSIGN reads its target buffer (scheduled after the write)
            return [(node.src[0], idxs, gate)]
        raise ScheduleError(f"cannot fuse a {node.op.name} of shape {node.shape} into a kernel: it must be realized "
                            "first (this is a scheduler bug: fusion.find_roots should have made it a root)")

    def _build(self, key: _Key, children: list[UOp]) -> UOp:
        node, idxs, gate = key
        if self._is_load(node):
            buf = self.realized[node]
            shape = node.shape
            assert shape is not None
            return self._load(buf, flat_index(idxs, kernel_shape(shape)), gate)
        op = node.op
        if op is Ops.BUFFER:
            return self._load(node, idxs[0], gate)
        if op in (Ops.CONST, Ops.DEFINE_VAR):
            if op is Ops.DEFINE_VAR and node not in self.binds:
                raise ScheduleError(f"variable {node.arg[0]!r} is used without a BIND giving it a value: bind it "
                                    "(UOp.bind) before scheduling")
            return node
        if op is Ops.BIND:
            return node.src[0]
        if op is Ops.PAD:
            inner = children[0]
            if inner.op is Ops.LOAD or (inner.op is Ops.CONST and inner.arg == 0):
                return inner  # gated loads already read 0 outside the source
            _, pad_gate = move_index(node, idxs, None)
            return inner if pad_gate is None else pad_gate.where(inner, UOp.const(inner.dtype, 0))
        if op in GroupOp.Movement or op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY):
            return children[0]
        if op is Ops.REDUCE:
            if not children:
                return UOp.const(node.dtype, reduce_identity(node.arg[0], node.dtype))  # a reduce over nothing
            value = children[0]
            ranges = tuple(dict.fromkeys(r for r in self.deps[key][0][1] if r.op is Ops.RANGE and
                                         r.arg[1] is AxisType.REDUCE and r not in idxs))
            return UOp(Ops.REDUCE, node.dtype, (value, *ranges), node.arg[0]) if ranges else value
        return UOp(op, node.dtype, tuple(children), node.arg)

    def lower(self, node: UOp, idxs: Indices, gate: Gate = None) -> UOp:
        """The kernel expression computing tensor `node` at `idxs` (iterative, memoized)."""
        stack: list[_Key] = [(node, idxs, gate)]
        while stack:
            key = stack[-1]
            if key in self.memo:
                stack.pop()
                continue
            deps = self.deps.get(key)
            if deps is None:
                deps = self.deps[key] = self._children(key)
            missing = [d for d in deps if d not in self.memo]
            if missing:
                stack.extend(reversed(missing))  # first source first: inputs get PARAMs in source order
                continue
            stack.pop()
            self.memo[key] = self._build(key, [self.memo[d] for d in deps])
        return self.memo[(node, idxs, gate)]

    # ---- roots ----------------------------------------------------------------------------------------------------
    def add_root(self, root: UOp, out: UOp, ranges: Indices | None = None) -> None:
        """STORE tensor `root`, computed in full, into BUFFER `out` (or through the target view of an ASSIGN), over
        fresh output loops or the given `ranges` (loops another store of this kernel runs over too)."""
        shape = root.shape
        assert shape is not None
        if ranges is None:
            ranges = tuple(self._range(s, AxisType.LOOP) for s in shape)
        self.current_root = root
        # an empty tensor has nothing to compute: store a constant so no load sits outside the (empty) loops
        value = self.lower(root, ranges) if not is_empty(shape) else UOp.const(root.dtype, 0)
        self.current_root = None
        if root.op is Ops.ASSIGN:
            buf, address, gate = view_address(root.src[0], ranges)
            if gate is not None:
                raise ScheduleError(f"ASSIGN into a PADded view of buffer {buf.arg.id}: a padded target has no memory "
                                    "for its padding; assign into a SHRINK of the buffer instead")
        else:
            buf, address = out, flat_index(ranges, kernel_shape(shape))
        param = self._param(buf)
        store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, param.dtype, (param, simplify(address))), value))
        self.loops.append(tuple(r for r in ranges if r.op is Ops.RANGE))
        self.stores.append(store)

    def add_assigns_in_one_loop(self, assigns: Sequence[UOp], targets: Sequence[UOp]) -> None:
        """STORE each of `assigns` (ASSIGNs of one shape into whole buffers) through one shared loop nest, in order:
        an ASSIGN of the group that another one reads is read as its value, computed once per element, not loaded
        back from its target (the target's LOAD at the same index is the old value, shared by every reader)."""
        shape = assigns[0].shape
        assert shape is not None
        ranges = tuple(self._range(s, AxisType.LOOP) for s in shape)
        self.inline_assigns = frozenset(assigns)
        for assign, target in zip(assigns, targets, strict=True):
            self.add_root(assign, target, ranges)
        self.inline_assigns = frozenset()

    def add_slice(self, value: UOp | None, out: UOp, shape: tuple[int, ...], *, axis: int, start: int,
                  length: int) -> None:
        """STORE tensor `value` (None: zeros) into positions start..start+length along `axis` of BUFFER `out`, a
        row-major tensor of `shape`: one piece of a concatenation, over loops of its own (closed by an END here, so
        the pieces of one kernel run one after the other)."""
        piece_shape = tuple(length if i == axis else n for i, n in enumerate(shape))
        ranges = tuple(self._range(s, AxisType.LOOP) for s in piece_shape)
        zeros = UOp.const(out.dtype, 0)
        computed = zeros if value is None or not math.prod(piece_shape) else self.lower(value, ranges)
        placed = tuple(r + start if i == axis and start else r for i, r in enumerate(ranges))
        param = self._param(out)
        store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, param.dtype, (param, flat_index(placed, shape))),
                                             computed))
        loops = tuple(r for r in ranges if r.op is Ops.RANGE)
        self.stores.append(UOp(Ops.END, dtypes.void, (store, *loops)) if loops else store)
        self.loops.append(())

    def kernel(self, name: str) -> UOp:
        """The kernel SINK. A single STORE is closed by an END of its loops; the STOREs of a multi-output kernel
        share one loop nest, so they are left bare (ENDs are optional) rather than closing the same loops twice."""
        if len(self.stores) == 1 and self.loops[0]:
            return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (self.stores[0], *self.loops[0])),),
                       KernelInfo(name))
        return UOp(Ops.SINK, dtypes.void, tuple(self.stores), KernelInfo(name))

    def call(self, name: str) -> UOp:
        """The CALL of this kernel on its buffers, with the BINDs of the variables it uses."""
        body = self.kernel(name)
        used = [n for n in body.toposort if n.op is Ops.DEFINE_VAR]
        binds = tuple(self.binds[v] for v in used)
        return UOp(Ops.CALL, dtypes.void, (body, *self.buffers, *binds), name)


def kernel_name(roots: Sequence[UOp], has_reduce: bool) -> str:
    """tinygrad-style names: `r_` for kernels with a reduce, `E_` for elementwise ones, then the output shape."""
    shape = roots[0].shape or ()
    if is_symbolic(shape):
        # a symbolic size by its variables' names: kernel names become C identifiers
        dims = "_".join("".join(ch for ch in dim_text(s) if ch.isalnum() or ch == "_") for s in shape)
        return f"{'r' if has_reduce else 'E'}_{dims}" + (f"_n{len(roots)}" if len(roots) > 1 else "")
    dims = "_".join(str(s) for s in shape) if shape and math.prod(shape) != 1 else "1"
    return f"{'r' if has_reduce else 'E'}_{dims}" + (f"_n{len(roots)}" if len(roots) > 1 else "")
