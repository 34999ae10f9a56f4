"""Small facts about graphs that several layers need, written once here instead of once per package.

The frontend, the scheduler, codegen and the runtime each used to carry their own copy of these, and copies drift:
the frontend's reduce padding and codegen's accumulator start are the same number, and if they ever disagreed a
fused and an unfused reduction would give different results. Each function is the one definition of its fact:

- `reduce_identity(op, dtype)`: the value a REDUCE starts from (what a reduce over no elements gives);
- `strip_reshapes(node)`: a tensor without the RESHAPEs on top (the same memory, read row-major);
- `written_buffer(node)`: the BUFFER an ASSIGN writes, through its target's views;
- `kernel_name(kernel, default)`: the name a kernel SINK carries in its `KernelInfo`;
- `structural_key(sink)`: a tensor graph keyed by structure (structure.py), beside these in `plygrad.ir`.
"""

from __future__ import annotations

import math

from plygrad.ir.dtype import ConstType, DType, DTypeKind
from plygrad.ir.ops import GroupOp, Ops
from plygrad.ir.records import KernelInfo
from plygrad.ir.uop import UOp


def reduce_identity(op: Ops, dtype: DType) -> ConstType:
    """`x op identity == x` for every `x` of `dtype`: 0 for ADD, 1 for MUL, the smallest value for MAX (-inf for
    floats), as a Python value of the dtype's kind (bools for bool, floats for floats). It is the start of a
    reduction's accumulator, the padding of a staged or windowed reduction, and the value of a reduce over nothing.
    ValueError for any other op: a REDUCE is ADD, MUL or MAX."""
    kind = dtype.scalar().kind
    if op is Ops.ADD:
        return False if kind is DTypeKind.BOOL else 0.0 if kind is DTypeKind.FLOAT else 0
    if op is Ops.MUL:
        return True if kind is DTypeKind.BOOL else 1.0 if kind is DTypeKind.FLOAT else 1
    if op is Ops.MAX:
        return -math.inf if kind is DTypeKind.FLOAT else dtype.scalar().min
    raise ValueError(f"a REDUCE with op {op.name} has no identity element: a REDUCE is ADD, MUL or MAX")


def strip_reshapes(node: UOp) -> UOp:
    """`node` without the RESHAPEs on top: a RESHAPE of a row-major tensor is the same memory, so a realized
    tensor reads its buffer, and a pending ASSIGN its result, through them."""
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    return node


def written_buffer(node: UOp) -> UOp:
    """The BUFFER an ASSIGN writes: `node` is the ASSIGN or its target, a view of the buffer through movement ops
    (or through an earlier ASSIGN into it). ValueError when no BUFFER is under those views, which the TENSOR
    stage's verifier refuses for an ASSIGN."""
    start = node
    while node.op is not Ops.BUFFER:
        if node.op is not Ops.ASSIGN and node.op not in GroupOp.Movement:
            raise ValueError(f"an ASSIGN writes into a BUFFER viewed through movement ops, but under {start.op.name} "
                             f"there is a {node.op.name}")
        node = node.src[0]
    return node


def kernel_name(kernel: UOp, default: str = "<unnamed>") -> str:
    """The name in a kernel SINK's `KernelInfo`, or `default` when it has none (errors name kernels by it)."""
    info = kernel.arg
    return info.name if isinstance(info, KernelInfo) and info.name else default
