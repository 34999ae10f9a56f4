"""Tensor graphs keyed by structure: what a schedule cache looks a graph up by.

`structural_key` replaces each BUFFER's id by its rank of first reach and binds each BIND to its variable's
minimum, since kernels depend on ops, shapes, dtypes and devices, not on which buffer is read or which value is
bound. `StructuralKey.back` maps the key's BUFFERs and BINDs back to the graph's own, so a schedule made for the
key gets the real ones substituted into its CALLs. docs/ir.md §12.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from plygrad.ir.ops import Ops
from plygrad.ir.records import BufferRef
from plygrad.ir.uop import UOp


@dataclass(frozen=True)
class StructuralKey:
    """A graph's structural key, and what maps the key back to the graph (see the module docstring)."""

    key: UOp
    back: dict[UOp, UOp]
    buffer_ids: tuple[int, ...]

    def bound_values(self) -> dict[str, int]:
        """The graph's value of each variable of the key, by the key's variable name."""
        return {k.src[0].arg[0]: int(v.src[1].arg) for k, v in self.back.items() if k.op is Ops.BIND}

    def variable_names(self) -> dict[str, str]:
        """The graph's name of each variable of the key (they differ only where `rename` renamed one)."""
        return {k.src[0].arg[0]: str(v.src[0].arg[0]) for k, v in self.back.items() if k.op is Ops.BIND}


def structural_key(sink: UOp, rename: Callable[[UOp], UOp] | None = None) -> StructuralKey:
    """The structural key of `sink`: BUFFER ids by rank of first reach, BINDs at their variable's minimum, each
    bound DEFINE_VAR passed through `rename` (called once per BIND, in toposort order) when given. A variable bound
    to two values in one graph becomes two variables of the key (`_apart`), so each use keeps its own value."""
    to_key: dict[UOp, UOp] = {}
    ids: list[int] = []
    bound: dict[str, int] = {}  # the value each of the key's variables is bound to
    for node in sink.toposort:
        if node.op is Ops.BUFFER:
            ref: BufferRef = node.arg
            to_key[node] = UOp(Ops.BUFFER, node.dtype, (), BufferRef(len(ids), ref.device, ref.size))
            ids.append(ref.id)
        elif node.op is Ops.BIND:
            var = node.src[0] if rename is None else rename(node.src[0])
            value = int(node.src[1].arg)
            if bound.setdefault(var.arg[0], value) != value:
                var = _apart(var, sink, bound)
                bound[var.arg[0]] = value
            to_key[node] = var.bind(var.arg[1])
    key = sink.substitute(to_key) if to_key else sink
    return StructuralKey(key, {k: v for v, k in to_key.items()}, tuple(ids))


def _apart(var: UOp, sink: UOp, bound: dict[str, int]) -> UOp:
    """A variable like `var` under a name no variable of `sink` or of the key has: for a second BIND of one variable
    at another value in one graph (two writes into a KV cache at two positions), which as one key variable would
    get one of the two values for both."""
    name, vmin, vmax = var.arg
    taken = set(bound) | {n.arg[0] for n in sink.toposort if n.op is Ops.DEFINE_VAR}
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return UOp.variable(f"{name}_{k}", vmin, vmax, var.dtype)
