"""Proving that an index is a multiple of a vector width, for renderers whose vector accesses must be aligned.

A CUDA `float4` access must start on a multiple of 16 bytes (misaligned, it faults on the GPU). Buffers start
aligned (the program contract, docs/codegen.md §5), so an access of k elements at index `i` is aligned when `i` is
a multiple of k for every value of the kernel's ranges and variables. `known_multiple` proves that bottom up: a
constant is its own multiple, ranges and variables 1, ADD/SUB/WHERE the gcd of their operands', MUL the product,
SHL by c times 2**c, MOD by c the gcd with c; anything else 1. It is a proof, not a guess: where it cannot tell it
says 1 and the caller falls back to narrower accesses (docs/codegen.md §2.1).
"""

from __future__ import annotations

import math

from plygrad.ir import Ops, UOp

# 0 stands for "always zero": the multiple of every number, and the identity of gcd
ALWAYS_ZERO = 0


def known_multiple(index: UOp) -> int:
    """The largest m this analysis proves divides `index` for every value of its ranges and variables (0: the
    index is always 0, so every m does)."""
    found: dict[UOp, int] = {}
    for node in index.toposort:
        found[node] = _multiple(node, [found[s] for s in node.src])
    return found[index]


def _multiple(node: UOp, src: list[int]) -> int:
    op = node.op
    if op is Ops.CONST:
        return abs(int(node.arg)) if isinstance(node.arg, int) and not isinstance(node.arg, bool) else 1
    if op in (Ops.ADD, Ops.SUB):
        return math.gcd(src[0], src[1])
    if op is Ops.MUL:
        return src[0] * src[1]
    if op is Ops.SHL and node.src[1].op is Ops.CONST and 0 <= int(node.src[1].arg) < 64:
        return src[0] << int(node.src[1].arg)
    if op is Ops.MOD and node.src[1].op is Ops.CONST and int(node.src[1].arg) != 0:
        return math.gcd(src[0], abs(int(node.src[1].arg)))
    if op is Ops.WHERE:
        return math.gcd(src[1], src[2])
    return 1


def divides(width: int, index: UOp) -> bool:
    """Whether `index` is provably a multiple of `width` (an access of `width` elements there is aligned)."""
    multiple = known_multiple(index)
    return multiple == ALWAYS_ZERO or multiple % width == 0
