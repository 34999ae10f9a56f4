"""`realize()`: the only place work happens, top to bottom (`Tensor.realize` calls `realize` here).

1. Run the pending assigns into buffers the tensors read (other than their own), one at a time in the order they
   were made, so the tensors read the written values (`realize_state.STATE` keeps them).
2. Replace ASSIGN nodes that already ran by their target views, so no write is done twice.
3. Pick what to compute: the tensors that are not a plain view of one Buffer, plus the unrealized readers of the old
   values of a buffer one of them assigns into (computed in the same schedule, before the write, they keep the
   values they were built from, as in PyTorch).
4. Hand the graphs to the scheduler plugin and run the schedule (scheduling.run: bytes in, bytes out, cached by
   structure), then point each tensor at its output Buffer (`point_at`).
5. Copy in host data still staged for the buffers the tensors read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from plygrad.frontend import autograd, scheduling
from plygrad.frontend.lazy import is_tensor, output_view, placed
from plygrad.frontend.realize_state import STATE
from plygrad.ir import Ops, strip_reshapes, written_buffer
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.lazy import LazyTensor
    from plygrad.frontend.tensor import Tensor


def realize(tensors: Sequence[Tensor]) -> None:
    """Compute `tensors` in one schedule; afterwards each reads its own output Buffer."""
    # an unrun ASSIGN is pending (STATE) until point_at finishes it: without pending assigns none is computed
    assigning = STATE.any_pending_assigns()
    if assigning:
        _run_pending_assigns(tensors)
    if STATE.any_done_assigns():
        for t in tensors:
            done = STATE.done_assigns_in(t.uop)
            # a tensor's own ASSIGN has not run (point_at replaces it once it has); an identical one that did ran
            # for another tensor, and a cache or graph still holds the one hash-consed node
            done.pop(strip_reshapes(t.uop), None)
            if done:
                t.uop = t.uop.substitute(done)
    computed: list[Tensor] = []
    for t in tensors:
        if t._is_realized():
            continue
        if t.numel() > 0:
            computed.append(t)
        else:  # nothing to compute: an empty buffer of the right dtype
            point_at(t, Buffer(t.device, 0, t.dtype))
    if computed:
        # asked whatever the pending table says: a pending assign run by `_run_pending_assigns` has left the table
        # by the time its own realize gets here, and its old values' readers must still be computed before it
        computed += _old_value_readers(computed)
        inputs = computed[0].inputs if len(computed) == 1 else frozenset().union(*(t.inputs for t in computed))
        outputs = scheduling.run([placed(t.uop, t.device, t.inputs) for t in computed], inputs)
        claimed: set[int] = set()
        for t, out in zip(computed, outputs, strict=True):
            own = out
            if out.id in claimed and strip_reshapes(t.uop).op is not Ops.ASSIGN:
                # identical graphs are one hash-consed node, computed once; separate tensors still get separate
                # memory, or an assign into one would change the other
                own = Buffer(out.device, out.size, out.dtype).copyin(out.copyout())
            claimed.add(own.id)
            point_at(t, own)
    if STATE.any_host_data():  # usually nothing is staged
        STATE.flush(buf for t in tensors for buf in t.inputs)


def point_at(t: LazyTensor, buf: Buffer) -> None:
    """`t` reads its realized values from `buf` from now on. A pending ASSIGN becomes its target view (the write is
    done, and the target may be a view of part of `buf`). A tensor that requires grad (and is not a leaf) leaves its
    graph with autograd, which differentiates through it (`loss.item(); loss.backward()`)."""
    graph, inputs = t.uop, t.inputs
    base = strip_reshapes(t.uop)
    if base.op is Ops.ASSIGN:
        STATE.finish_assign(base, base.src[0], written_buffer(base.src[0]).arg.id, t)
        t.uop = t.uop.substitute({base: base.src[0]})
    else:
        t.uop = output_view(buf, t.shape)
        if t._requires_grad and not autograd.is_leaf(t):
            autograd.record_realized(t.uop, graph, inputs)
        elif autograd.REALIZED and t.uop in autograd.REALIZED:
            # a kept view (lazy.output_view) of a buffer the plan ran again: its entry told how a dead tensor
            # was computed, not this one
            del autograd.REALIZED[t.uop]
        autograd.record_undecided(t)  # a realized undecided tensor is a leaf for tinygrad-style backward()
    if not t.inputs:  # it reads a Buffer from now on: a reader of its old values
        STATE.add_reader(t)
    if base.op is not Ops.ASSIGN:  # the tensor the buffer holds: a write through a view of it gives t its version
        STATE.add_holder(buf, t)
    t.inputs = frozenset((buf,))


def _run_pending_assigns(tensors: Sequence[Tensor]) -> None:
    """Run the pending assigns into buffers these tensors read (other than their own), so that they read the
    written values, each write once."""
    if not STATE.any_pending_assigns():
        return
    waiting = STATE.take_pending_assigns({buf.id for t in tensors for buf in t.inputs})
    todo: list[Tensor] = []
    for t in waiting:
        if is_tensor(t) and not any(t is u for u in (*tensors, *todo)):
            todo.append(t)
    for t in todo:  # one at a time: two writes into one buffer must run in the order they were made
        realize([t])


def _old_value_readers(computed: Sequence[Tensor]) -> list[Tensor]:
    """The live unrealized tensors that read, raw, a buffer one of `computed` assigns into: computed in the same
    schedule, before the write, they keep the values they were built from."""
    written = {written_buffer(base.src[0]).arg.id for base in (strip_reshapes(t.uop) for t in computed)
               if base.op is Ops.ASSIGN}
    if not written:
        return []
    after = STATE.pending_versions(written)
    found: list[Tensor] = []
    for reader in STATE.readers():
        if (not is_tensor(reader) or any(reader is t for t in computed) or reader._is_realized() or reader.numel() == 0
                or not any(buf.id in written for buf in reader.inputs)):
            continue
        # an ASSIGN that already ran is read from memory: the reader reads the buffer's values before this write
        done = STATE.done_assigns_in(reader.uop) if STATE.any_done_assigns() else {}
        # a graph that contains a pending ASSIGN into the buffer reads the written values: it runs after the write;
        # so does one built after a write through a view: it reads the version after it
        if any((node.op is Ops.ASSIGN and node not in done and written_buffer(node.src[0]).arg.id in written)
               or node in after for node in reader.uop.sparents()):
            continue
        if done:
            reader.uop = reader.uop.substitute(done)
        found.append(reader)
    return found


def run_pending_writes(t: LazyTensor) -> None:
    """Run the pending assigns into the buffers `t` reads and make `t` read their results from memory (an assign
    into a view of a tensor whose own write is pending needs that write done first)."""
    _run_pending_assigns([cast("Tensor", t)])
    done = STATE.done_assigns_in(t.uop)
    if done:
        t.uop = t.uop.substitute(done)
