"""`Tensor.rearrange`: einops' `rearrange` pattern language as three views — reshape, permute, reshape.

    x.rearrange("b c h w -> b (c h w)")            # flatten
    x.rearrange("b (h p) w -> b h p w", p=2)       # split an axis; one size per group may be inferred
    x.rearrange("b ... c -> b c ...")              # an ellipsis stands for the axes not named

A side is a list of names, parenthesized groups, at most one `...` (left side, never in a group) and `1` / `()`
for unit axes; every name appears once on each side; keyword sizes check or fix split axes. The input is reshaped
into elementary axes, permuted into the right side's order and reshaped into its groups: no data moves.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from plygrad.ir import ShapeError

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

ELLIPSIS = "..."
_TOKEN = re.compile(r"\.\.\.|…|\(|\)|[^\s()]+")

# a side is a list of groups; a group is a list of elementary axis names ([] is a unit axis). A bare `...` is the
# group [ELLIPSIS]; inside parentheses it is the name GROUPED_ELLIPSIS, so `(...)` (merge them) stays distinct.
Side = list[list[str]]
GROUPED_ELLIPSIS = "(...)"


class RearrangeError(ShapeError):
    """A rearrange pattern that cannot be parsed or does not fit the tensor's shape."""


def _parse_side(text: str, pattern: str) -> Side:
    groups: Side = []
    current: list[str] | None = None
    for raw in _TOKEN.findall(text):
        part = ELLIPSIS if raw == "…" else raw
        if part == "(":
            if current is not None:
                raise RearrangeError(f"rearrange {pattern!r}: nested parentheses are not allowed")
            current = []
        elif part == ")":
            if current is None:
                raise RearrangeError(f"rearrange {pattern!r}: ')' without a matching '('")
            groups.append(current)
            current = None
        elif part == "1":
            if current is None:
                groups.append([])
        elif part == ELLIPSIS or (part.isidentifier() and not part.startswith("_") and not part.endswith("_")):
            if current is None:
                groups.append([part])
            else:
                current.append(GROUPED_ELLIPSIS if part == ELLIPSIS else part)
        else:
            raise RearrangeError(f"rearrange {pattern!r}: {part!r} is not an axis name (names are identifiers "
                                 "that do not start or end with '_'; '...', '1' and '()' are the other axes)")
    if current is not None:
        raise RearrangeError(f"rearrange {pattern!r}: '(' without a matching ')'")
    return groups


def _names(side: Side) -> list[str]:
    return [ELLIPSIS if name == GROUPED_ELLIPSIS else name for group in side for name in group]


def parse(pattern: str) -> tuple[Side, Side]:
    """The left and right sides of `pattern`, checked to name the same axes once each."""
    if pattern.count("->") != 1:
        raise RearrangeError(f"rearrange {pattern!r}: a pattern needs exactly one '->' between input and output axes")
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(left_text, pattern), _parse_side(right_text, pattern)
    for side, name in ((left, "input"), (right, "output")):
        names = _names(side)
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise RearrangeError(f"rearrange {pattern!r}: axis {', '.join(repeated)} appears more than once in the "
                                 f"{name}")
    if any(GROUPED_ELLIPSIS in group for group in left):
        raise RearrangeError(f"rearrange {pattern!r}: '...' cannot be inside parentheses on the input side")
    only_left = set(_names(left)) - set(_names(right))
    only_right = set(_names(right)) - set(_names(left))
    if only_left or only_right:
        missing = ", ".join(sorted(only_left | only_right))
        raise RearrangeError(f"rearrange {pattern!r}: axis {missing} must appear on both sides (rearrange neither "
                             "adds nor removes named axes; use reduce or repeat for that)")
    return left, right


def _expand_ellipsis(side: Side, count: int) -> Side:
    """`...` replaced by `count` numbered axes (in place inside a right-side group)."""
    axes = [f"{ELLIPSIS}{i}" for i in range(count)]
    out: Side = []
    for group in side:
        if group == [ELLIPSIS]:
            out.extend([a] for a in axes)
        elif GROUPED_ELLIPSIS in group:
            i = group.index(GROUPED_ELLIPSIS)
            out.append(group[:i] + axes + group[i + 1:])
        else:
            out.append(group)
    return out


def _axis_sizes(left: Side, shape: tuple[int, ...], sizes: dict[str, int], pattern: str) -> dict[str, int]:
    """The size of every elementary axis, from the input shape and the given sizes (one unknown per group)."""
    known = dict(sizes)
    for dim, (group, n) in enumerate(zip(left, shape, strict=True)):
        if not group:
            if n != 1:
                raise RearrangeError(f"rearrange {pattern!r}: input axis {dim} is a unit axis in the pattern but has "
                                     f"size {n} (shape {shape})")
            continue
        unknown = [name for name in group if name not in known]
        if len(unknown) > 1:
            raise RearrangeError(f"rearrange {pattern!r}: cannot infer the sizes of {', '.join(unknown)} in input "
                                 f"axis {dim} (size {n}); pass all but one of them as keyword arguments")
        product = math.prod(known[name] for name in group if name in known)
        if unknown:
            if product == 0 or n % product:
                raise RearrangeError(f"rearrange {pattern!r}: input axis {dim} of size {n} does not split into "
                                     f"the given sizes {', '.join(f'{k}={known[k]}' for k in group if k in known)}")
            known[unknown[0]] = n // product
        elif product != n:
            raise RearrangeError(f"rearrange {pattern!r}: input axis {dim} has size {n}, but the pattern's sizes "
                                 f"{', '.join(f'{k}={known[k]}' for k in group)} multiply to {product}")
    return known


def rearrange(x: Tensor, pattern: str, **sizes: int) -> Tensor:
    """`x` rearranged by the einops `pattern` (see the module docstring)."""
    left, right = parse(pattern)
    unused = sorted(set(sizes) - set(_names(left)))
    if unused:
        raise RearrangeError(f"rearrange {pattern!r}: size given for axis {', '.join(unused)}, which the pattern "
                             "does not name")
    if ELLIPSIS in _names(left):
        rest = x.ndim - (len(left) - 1)
        if rest < 0:
            raise RearrangeError(f"rearrange {pattern!r}: the input side names {len(left) - 1} axes besides '...', "
                                 f"more than the {x.ndim} of shape {x.shape}")
        left, right = _expand_ellipsis(left, rest), _expand_ellipsis(right, rest)
    if len(left) != x.ndim:
        raise RearrangeError(f"rearrange {pattern!r}: the input side has {len(left)} axes but the tensor has "
                             f"{x.ndim} (shape {x.shape})")
    known = _axis_sizes(left, x.shape, sizes, pattern)
    in_names, out_names = _names(left), _names(right)
    split = x.reshape(tuple(known[name] for name in in_names))
    moved = split.permute(tuple(in_names.index(name) for name in out_names))
    return moved.reshape(tuple(math.prod(known[name] for name in group) for group in right))
