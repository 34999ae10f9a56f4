"""`Tensor.contiguous_backward()`: a forward no-op whose gradient is made contiguous (tinygrad's CONTIGUOUS_BACKWARD).

The mark is two identity RESHAPEs remembered in a weak set; autograd's RESHAPE rule asks `wants_contiguous_gradient`
and wraps the arriving gradient in a CONTIGUOUS. `substitute_keeping_marks` carries marks and gradient stops over
when a graph is rebuilt. docs/frontend-internals.md, "Gradient marks", says why two RESHAPEs and not one.
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
