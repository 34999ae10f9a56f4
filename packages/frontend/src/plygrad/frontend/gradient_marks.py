"""`Tensor.contiguous_backward()`: a forward no-op whose gradient is made contiguous (tinygrad's CONTIGUOUS_BACKWARD).

The gradient flowing back into a tensor is a lazy graph like any other, which a scheduler is free to fuse into
whatever reads it, recomputing it in each reader if it chooses. `contiguous_backward()` asks autograd to wrap the
gradient arriving at that point in a CONTIGUOUS, a fusion boundary, so it is computed once into its own buffer
(tinygrad puts one on a transformer block's output), while the forward values are untouched and still fuse freely.

The IR has no op for this, and needs none: the mark is a node of the forward graph that costs nothing, two RESHAPEs
(x to shape + (1,) and back), remembered in a weak set as `stop_gradient`'s identity RESHAPEs are (lazy.py).
Autograd's RESHAPE rule asks `wants_contiguous_gradient` and adds the CONTIGUOUS (autograd.py). Two RESHAPEs rather
than one, because the single identity RESHAPE of x is `stop_gradient(x)`'s node (nodes are hash-consed): marking it
would make `x.detach()` and `x.contiguous_backward()` one node. The scheduler folds RESHAPE chains, so the forward
kernel is the same as without the mark.

Marks are node identities, so a graph rebuilt from new sources must carry them over: `substitute_keeping_marks` is
`UOp.substitute` that does, for these marks and for gradient stops. Autograd needs it where it swaps realized views
back for the graphs that computed them (autograd.unrealized); a plain substitute there would turn a `detach()` above
a realized tensor into a node gradients flow through.
"""

from __future__ import annotations

import weakref
from typing import Final

from plygrad.frontend.lazy import is_gradient_stop, movement, shape_of, stop_gradient
from plygrad.ir import Ops, UOp

# Marked nodes: kept weakly, so a mark lives exactly as long as some graph holds its node
_CONTIGUOUS_GRADIENT: Final[weakref.WeakSet[UOp]] = weakref.WeakSet()


def contiguous_gradient_mark(x: UOp) -> UOp:
    """`x` unchanged in value, as a node whose gradient autograd makes contiguous (see the module docstring)."""
    shape = shape_of(x)
    node = movement(movement(x, Ops.RESHAPE, (*shape, 1)), Ops.RESHAPE, shape)
    _CONTIGUOUS_GRADIENT.add(node)
    return node


def wants_contiguous_gradient(node: UOp) -> bool:
    """Was `node` made by `contiguous_gradient_mark`?"""
    return node.op is Ops.RESHAPE and node in _CONTIGUOUS_GRADIENT


def substitute_keeping_marks(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """`root.substitute(mapping)`, where a rebuilt gradient stop or contiguous-gradient mark stays one."""
    new: dict[UOp, UOp] = {}
    for node in root.sparents():
        if node in mapping:
            new[node] = mapping[node]
            continue
        srcs = tuple(new[s] for s in node.src)
        if srcs == node.src:
            new[node] = node
        elif is_gradient_stop(node):
            new[node] = stop_gradient(srcs[0])  # the identity RESHAPE of the new source, marked
        else:
            rebuilt = UOp(node.op, node.dtype, srcs, node.arg)
            if wants_contiguous_gradient(node):
                _CONTIGUOUS_GRADIENT.add(rebuilt)
            new[node] = rebuilt
    return new[root]
