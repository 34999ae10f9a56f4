"""What realizing remembers between calls, owned by one object: `STATE`, a `RealizeState`.

Nothing else in the frontend keeps realize or assign bookkeeping; every other module asks `STATE` through its
methods, and `realize()` in realization.py is the algorithm that uses it. The tables (pending and done assigns,
versions, holders, readers, host data, schedules, graphs seen, the capture), what each holds and how strongly, and
their locking: docs/frontend-internals.md, "Realize state".
"""

from __future__ import annotations

import atexit
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

from plygrad.frontend.weaklist import WeakList
from plygrad.ir import Stage, UOp, serialize
from plygrad.runtime import Buffer, BytesLike, Capture

if TYPE_CHECKING:
    from plygrad.frontend.lazy import LazyTensor
    from plygrad.frontend.scheduling import Normalized

MAX_SCHEDULES: Final = 2048  # schedules kept, least recently stored dropped first
# graphs seen kept, least recently used dropped first, and at most this many nodes in all: a kept graph holds its
# nodes alive (a 6-layer encoder forward is ~2k nodes)
MAX_GRAPHS: Final = 64
MAX_GRAPH_NODES: Final = 100_000
MIN_READERS_SWEEP: Final = 1024  # reader references kept before dead ones are first swept out


class RealizeState:
    """The tables of the module docstring, each behind a small method; one instance, `STATE`."""

    def __init__(self) -> None:
        # buffer id -> (when it was made, the tensor holding the ASSIGN): realize runs them in the order made
        self._pending_assigns: dict[int, list[tuple[int, LazyTensor]]] = {}
        self._assign_order = itertools.count()
        self._done_assigns: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
        # whether `_done_assigns` may hold an entry: realize asks on every call, and a weak dictionary's len() is
        # Python code. Set after an insert; cleared before the table is found empty, so a racing insert always
        # leaves it set
        self._maybe_done_assigns = False
        # buffer id -> (the tensor holding a pending write through a view, the node its tensors read after it):
        # a graph holding that node was built after the write and reads the written values
        self._versions: dict[int, list[tuple[LazyTensor, UOp]]] = {}
        # version node of a write made without autograd -> the node it was made over: once its write ran, the next
        # write's version is made over that node again, so versions do not pile up (a KV cache written every step)
        self._plain_versions: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
        # Buffer -> the tensors made to read it whole (realized into it, or made from data), weakly: the tensors a
        # write through a view of it gives the version node (asked once per such write, not once per tensor)
        self._holders: weakref.WeakKeyDictionary[Buffer, WeakList[LazyTensor]] = weakref.WeakKeyDictionary()
        # every tensor that reads a Buffer is added (thousands per model forward): a WeakList, not a WeakSet
        self._readers: WeakList[LazyTensor] = WeakList(MIN_READERS_SWEEP)
        # buffer id -> (the Buffer, weakly; its data): a plain dict, so that a realize asks it at C speed whether
        # one of its buffers has data waiting (a WeakKeyDictionary's lookups are Python code); the entry goes when
        # the Buffer dies, by its weak reference's callback
        self._host_data: dict[int, tuple[weakref.ref[Buffer], BytesLike]] = {}
        # held from taking a Buffer's staged data until it is copied in: a thread realizing another graph over the
        # same Buffer must not launch on it in between (it would read memory the copy has not filled yet)
        self._flushing = threading.Lock()
        self._schedules: OrderedDict[tuple[object, UOp], bytes] = OrderedDict()
        self._schedules_lock = threading.Lock()
        self._graphs: OrderedDict[UOp, tuple[Normalized, int]] = OrderedDict()  # sink -> (normalization, nodes)
        self._graph_nodes = 0
        self._graphs_lock = threading.Lock()
        self._capture: ContextVar[Capture | None] = ContextVar("plygrad_capture", default=None)

    # ---- assigns ------------------------------------------------------------------------------------------------
    def record_assign(self, buffer_id: int, tensor: LazyTensor) -> None:
        """`tensor` now holds an ASSIGN into buffer `buffer_id` that has not run."""
        waiting = self._pending_assigns.setdefault(buffer_id, [])
        if not any(t is tensor for _, t in waiting):
            waiting.append((next(self._assign_order), tensor))

    def take_pending_assigns(self, buffer_ids: set[int]) -> list[LazyTensor]:
        """The tensors holding pending assigns into these buffers, in the order they were made (program order: an
        assign's value may read what an earlier one wrote into another of these buffers); they are no longer pending
        (the caller runs them)."""
        found: list[tuple[int, LazyTensor]] = []
        if not self._pending_assigns:
            return []
        for buffer_id in buffer_ids & self._pending_assigns.keys():
            found.extend(self._pending_assigns.pop(buffer_id))
        return [t for _, t in sorted(found, key=lambda entry: entry[0])]

    def finish_assign(self, node: UOp, target: UOp, buffer_id: int, tensor: LazyTensor) -> None:
        """The ASSIGN `node` (held by `tensor`) ran: later graphs read `target` instead, and it is not pending."""
        self._done_assigns[node] = target
        self._maybe_done_assigns = True
        versions = [entry for entry in self._versions.get(buffer_id, []) if entry[0] is not tensor]
        if versions:
            self._versions[buffer_id] = versions
        else:
            self._versions.pop(buffer_id, None)
        waiting = [entry for entry in self._pending_assigns.get(buffer_id, []) if entry[1] is not tensor]
        if waiting:
            self._pending_assigns[buffer_id] = waiting
        else:
            self._pending_assigns.pop(buffer_id, None)

    def record_version(self, buffer_id: int, writer: LazyTensor, node: UOp, over: UOp | None) -> None:
        """The pending write held by `writer` into buffer `buffer_id` is read after it through `node` (made over
        `over` when autograd keeps no graph for it)."""
        self._versions.setdefault(buffer_id, []).append((writer, node))
        if over is not None:
            self._plain_versions[node] = over

    def pending_versions(self, buffer_ids: set[int]) -> set[UOp]:
        """The nodes that read these buffers after a write into them that has not finished."""
        return {node for b in buffer_ids & self._versions.keys() for _, node in self._versions[b]}

    def is_version(self, node: UOp) -> bool:
        """Whether `node` was made as the version of a tensor after a write without autograd."""
        return node in self._plain_versions

    def settled_base(self, node: UOp) -> UOp:
        """`node`, or, while it is a plain version whose write has run, the node it was made over (see
        `_plain_versions`)."""
        pending = {n for entries in self._versions.values() for _, n in entries}
        while True:
            over = self._plain_versions.get(node)
            if over is None or node in pending:
                return node
            node = over

    def any_pending_assigns(self) -> bool:
        """Whether some tensor holds an assign that has not run."""
        return bool(self._pending_assigns)

    def any_done_assigns(self) -> bool:
        """Whether some ASSIGN ran that a live graph may still hold."""
        if not self._maybe_done_assigns:
            return False
        self._maybe_done_assigns = False
        if self._done_assigns:
            self._maybe_done_assigns = True
        return self._maybe_done_assigns

    def done_assigns_in(self, graph: UOp) -> dict[UOp, UOp]:
        """The ASSIGN nodes of `graph` that already ran, each mapped to its target view."""
        return {node: self._done_assigns[node] for node in graph.sparents() if node in self._done_assigns}

    # ---- readers ------------------------------------------------------------------------------------------------
    def add_reader(self, tensor: LazyTensor) -> None:
        """`tensor`'s graph reads a Buffer (kept weakly: a reader that is gone needs no old values). Each tensor is
        added once, when it is made."""
        self._readers.add(tensor)

    def add_holder(self, buf: Buffer, tensor: LazyTensor) -> None:
        """`tensor` now reads all of `buf` (a realized tensor, or one made from data)."""
        found = self._holders.get(buf)
        if found is None:
            found = self._holders[buf] = WeakList(16)
        found.add(tensor)

    def holders(self, buf: Buffer) -> list[LazyTensor]:
        """The live tensors `add_holder` named for `buf` (some may read another node by now)."""
        found = self._holders.get(buf)
        return [] if found is None else found.live()

    def readers(self) -> list[LazyTensor]:
        """The live tensors whose graphs read a Buffer."""
        return self._readers.live()

    # ---- host data ----------------------------------------------------------------------------------------------
    def stage(self, buf: Buffer, data: BytesLike) -> None:
        """Remember `data` as `buf`'s contents; it is copied in the first time a realize needs the buffer."""
        staged = self._host_data
        buffer_id = buf.id

        def forget(ref: weakref.ref[Buffer]) -> None:
            entry = staged.get(buffer_id)
            if entry is not None and entry[0] is ref:
                staged.pop(buffer_id, None)

        staged[buffer_id] = (weakref.ref(buf, forget), data)

    def any_host_data(self) -> bool:
        """Whether some Buffer still has host data waiting to be copied in."""
        return bool(self._host_data)

    def flush(self, buffers: Iterable[Buffer]) -> None:
        """Copy staged host data into those of `buffers` that still have some (in buffer-id order)."""
        staged = self._host_data
        if not staged:  # the common case once a program's inputs are in: nothing to look up
            return
        # an entry leaves the table only once its data is in (under the lock): a thread that finds none for its
        # buffers never launches on memory another thread is still filling
        with self._flushing:
            for buf in sorted((b for b in buffers if b.id in staged), key=lambda b: b.id):
                entry = staged.get(buf.id)
                if entry is not None:
                    buf.copyin(entry[1])
                    if staged.get(buf.id) is entry:
                        del staged[buf.id]

    # ---- schedules ----------------------------------------------------------------------------------------------
    def schedule(self, scheduler: Callable[[bytes], bytes], key: UOp) -> bytes:
        """The schedule bytes `scheduler` makes of the normalized graph `key`, asked once per (scheduler, key) and
        kept (made outside the lock: two threads missing one key both make the same bytes rather than one waiting)."""
        cache_key = (scheduler, key)
        with self._schedules_lock:
            data = self._schedules.get(cache_key)
        if data is None:
            data = scheduler(serialize(key, Stage.TENSOR))
            with self._schedules_lock:
                self._schedules[cache_key] = data
                if len(self._schedules) > MAX_SCHEDULES:
                    self._schedules.popitem(last=False)
        return data

    def forget_schedules(self) -> None:
        """Drop every cached schedule (a scheduler plugin was installed or removed), and every graph seen."""
        with self._schedules_lock:
            self._schedules.clear()
        with self._graphs_lock:
            self._graphs.clear()
            self._graph_nodes = 0

    # ---- graphs seen --------------------------------------------------------------------------------------------
    def seen_graph(self, sink: UOp) -> Normalized | None:
        """The normalization of `sink` if it was realized recently (it is then the most recently used)."""
        with self._graphs_lock:
            found = self._graphs.get(sink)
            if found is None:
                return None
            self._graphs.move_to_end(sink)
            return found[0]

    def remember_graph(self, sink: UOp, normalized: Normalized, nodes: int) -> None:
        """Keep `sink` (of `nodes` nodes) and its normalization, dropping the least recently used graphs beyond
        MAX_GRAPHS or MAX_GRAPH_NODES."""
        if nodes > MAX_GRAPH_NODES:
            return
        with self._graphs_lock:
            if sink in self._graphs:
                return
            self._graphs[sink] = (normalized, nodes)
            self._graph_nodes += nodes
            while len(self._graphs) > MAX_GRAPHS or self._graph_nodes > MAX_GRAPH_NODES:
                _, (_, dropped) = self._graphs.popitem(last=False)
                self._graph_nodes -= dropped

    # ---- JIT capture --------------------------------------------------------------------------------------------
    @contextmanager
    def capturing(self) -> Iterator[Capture]:
        """Record every schedule run of this thread inside the block (its plan and Buffers) into the Capture this
        yields; runs of other threads are not recorded."""
        capture = Capture()
        token = self._capture.set(capture)
        try:
            yield capture
        finally:
            self._capture.reset(token)

    def capture(self) -> Capture | None:
        """The Capture this thread is recording into, if any."""
        return self._capture.get()

    def shutdown(self) -> None:
        """Let go of pending assigns: their tensors' Buffers must go before shutdown tears down the backends."""
        self._pending_assigns.clear()
        self._versions.clear()


STATE: Final = RealizeState()
atexit.register(STATE.shutdown)
