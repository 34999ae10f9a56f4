"""Gradient marks: `Tensor.contiguous_backward()` (a forward no-op whose gradient is made contiguous, tinygrad's
CONTIGUOUS_BACKWARD) and custom gradients (a forward no-op whose gradient a rule gives to chosen nodes below it).

A mark is two identity RESHAPEs remembered weakly; `substitute_keeping_marks` carries marks and gradient stops over
when a graph is rebuilt. docs/frontend-internals.md, "Gradient marks", says why two RESHAPEs and not one.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Final, TypeAlias

from plygrad.frontend.lazy import is_gradient_stop, movement, shape_of, stop_gradient
from plygrad.ir import Ops, UOp

# Marked nodes: kept weakly, so a mark lives exactly as long as some graph holds its node
_CONTIGUOUS_GRADIENT: Final[weakref.WeakSet[UOp]] = weakref.WeakSet()

CustomRule: TypeAlias = Callable[[UOp, tuple[UOp, ...]], tuple[UOp | None, ...]]
"""`rule(g, operands)`: the gradient of each operand, given the gradient `g` arriving at the mark."""

# Custom-gradient marks -> (the operands, nodes of the marked graph, and the rule giving their gradients)
_CUSTOM_GRADIENT: Final[weakref.WeakKeyDictionary[UOp, tuple[tuple[UOp, ...], CustomRule]]] = (
    weakref.WeakKeyDictionary())


def contiguous_gradient_mark(x: UOp) -> UOp:
    """`x` unchanged in value, as a node whose gradient autograd makes contiguous (see the module docstring)."""
    shape = shape_of(x)
    node = movement(movement(x, Ops.RESHAPE, (*shape, 1)), Ops.RESHAPE, shape)
    _CONTIGUOUS_GRADIENT.add(node)
    return node


def wants_contiguous_gradient(node: UOp) -> bool:
    """Was `node` made by `contiguous_gradient_mark`?"""
    return node.op is Ops.RESHAPE and node in _CONTIGUOUS_GRADIENT


def custom_gradient_mark(x: UOp, operands: tuple[UOp, ...], rule: CustomRule) -> UOp:
    """`x` unchanged in value, as a node whose gradient autograd does not take through x's graph: `rule(g,
    operands)` gives the gradient of each of `operands` (nodes of x's graph) directly, e.g. a scatter-add where
    the graph is a one-hot selection. The first RESHAPE adds a leading axis, so the node differs from a
    contiguous-gradient mark of the same `x`."""
    shape = shape_of(x)
    node = movement(movement(x, Ops.RESHAPE, (1, *shape)), Ops.RESHAPE, shape)
    _CUSTOM_GRADIENT[node] = (operands, rule)
    return node


def custom_gradient(node: UOp) -> tuple[tuple[UOp, ...], CustomRule] | None:
    """The operands and rule of a node `custom_gradient_mark` made, None for any other node."""
    return _CUSTOM_GRADIENT.get(node) if node.op is Ops.RESHAPE else None


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
            custom = custom_gradient(node)
            if custom is not None:  # its operands are below it, so already rebuilt
                _CUSTOM_GRADIENT[rebuilt] = (tuple(new[o] for o in custom[0]), custom[1])
            new[node] = rebuilt
    return new[root]
