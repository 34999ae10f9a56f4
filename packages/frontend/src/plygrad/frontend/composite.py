"""Composite ops built once per input graph: `composite` memoizes a pure function of tensors (gelu, layernorm,
softmax, linear, attention, ...) on its input nodes, so a forward pass built again over the same nodes is one lookup
per composite instead of tens of tensor ops. The memo lives in the first input's node and holds the result weakly;
docs/frontend-internals.md, "The composite memo", gives the key and the lifetime rules.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

from plygrad.frontend.lazy import LazyTensor
from plygrad.ir import UOp, dtypes

F = TypeVar("F", bound=Callable[..., Any])

_MEMO_ATTR: Final = "_composites"  # the node's __dict__ entry: key -> (result, requires_grad, other inputs' nodes)
_PLAIN: Final = (int, str, bool, type(None))


def _value_key(value: object) -> object:
    """A hashable stand-in for a non-tensor argument, or `_UNKEYED` when the memo must not be used. Floats keep
    their sign (-0.0 and 0.0 compare equal)."""
    kind = type(value)
    if kind in _PLAIN:
        return (kind, value)
    if kind is float:
        return (float, value, math.copysign(1.0, cast(float, value)))
    if kind is tuple or kind is list:
        parts = tuple(_value_key(v) for v in cast("tuple[object, ...]", value))
        return _UNKEYED if any(p is _UNKEYED for p in parts) else (kind, parts)
    return _UNKEYED


_UNKEYED: Final = object()


def _tensor_key(t: LazyTensor) -> tuple[object, ...]:
    return (id(t.uop), t.device, t._requires_grad, bool(t.inputs), type(t))


def composite(skip: Callable[..., bool] | None = None) -> Callable[[F], F]:
    """Memoize the pure composite op it decorates (module docstring); `skip(*args, **kwargs)` True builds anew
    without the memo (an op that draws random numbers in this call: attention's dropout while training)."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def memoized(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else None
            if not isinstance(first, LazyTensor) or (skip is not None and skip(*args, **kwargs)):
                return fn(*args, **kwargs)
            parts: list[object] = [fn, type(first).no_grad, type(first).training, dtypes.default_float]
            others: list[LazyTensor] = []
            named = [(None, a) for a in args[1:]] + sorted(kwargs.items()) if kwargs else [(None, a) for a in args[1:]]
            for name, arg in named:
                if isinstance(arg, LazyTensor):
                    others.append(arg)
                    parts.append((name, _tensor_key(arg)))
                    continue
                found = _value_key(arg)
                if found is _UNKEYED:
                    return fn(*args, **kwargs)
                parts.append((name, found))
            key = (*parts, _tensor_key(first))
            memo: dict[tuple[object, ...], Any] | None = first.uop.__dict__.get(_MEMO_ATTR)
            hit = memo.get(key) if memo is not None else None
            if hit is not None:
                result_ref, requires_grad, other_refs = hit
                result = result_ref()
                if result is not None and all(r() is o.uop for r, o in zip(other_refs, others, strict=True)):
                    inputs = first.inputs.union(*(o.inputs for o in others)) if others else first.inputs
                    return first._make(result, first.device, inputs, requires_grad)
            out = fn(*args, **kwargs)
            if isinstance(out, LazyTensor) and out.device == first.device and type(out) is type(first):
                inputs = first.inputs.union(*(o.inputs for o in others)) if others else first.inputs
                if out.inputs == inputs:  # the graph read no Buffer of its own making: the hit can rebuild `inputs`
                    entry = (weakref.ref(out.uop), out._requires_grad, tuple(weakref.ref(o.uop) for o in others))
                    first.uop.__dict__.setdefault(_MEMO_ATTR, {})[key] = entry
            return out
        return cast(F, memoized)
    return decorate


def memo_size(node: UOp) -> int:
    """How many composites `node` remembers (for tests)."""
    return len(node.__dict__.get(_MEMO_ATTR, {}))


__all__ = ["composite", "memo_size"]
