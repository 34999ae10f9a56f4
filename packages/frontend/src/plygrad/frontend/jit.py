"""`TinyJit` (tinygrad's name): run a function's kernels again without building, scheduling or lowering anything.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

Call 1 runs the function, call 2 records every plan it runs (`realize_state.STATE.capturing()`), later calls replay
the recording (`plygrad.runtime.Capture.replay`) on the new arguments' Buffers. What a replay freezes, what it reads
again (bound Variables, random offsets), `prune`, `frozen_random`, the errors and the threading rules: docs/jit.md.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from plygrad.frontend.lazy import buffer_view
from plygrad.frontend.multi import MultiTensor
from plygrad.frontend.randomness import stream
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.symbolic import bound_shape
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DTypeError, Ops, ShapeError, UOp
from plygrad.ir.shape import is_symbolic, max_shape
from plygrad.runtime import Buffer, Capture, copy_buffer

R = TypeVar("R")


class JitError(RuntimeError):
    """A function cannot be recorded or replayed faithfully by TinyJit (the message says why and what to do)."""


class JitShapeError(JitError, ShapeError):
    """A replay's Tensor argument has another shape than the recorded one."""


class JitDTypeError(JitError, DTypeError):
    """A replay's Tensor argument has another dtype than the recorded one."""


class JitArgumentError(JitError, ValueError):
    """A replay's Tensor arguments are not where (or on the device) they were recorded."""


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Everything inside `value` but lists, tuples and dicts (which are searched), with a path naming it; a
    MultiTensor is its shards."""
    if isinstance(value, MultiTensor):
        for i, shard in enumerate(value.shards):
            yield f"{path}.shards[{i}]", shard
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key!r}]")
    else:
        yield path, value


def _walk(value: Any, path: str) -> Iterator[tuple[str, Tensor]]:
    """Every Tensor inside `value`, with a path naming it for errors."""
    return ((p, v) for p, v in _leaves(value, path) if isinstance(v, Tensor))


def _walk_variables(value: Any, path: str) -> Iterator[tuple[str, UOp]]:
    """Every bound Variable (a BIND UOp) inside `value`."""
    for p, v in _leaves(value, path):
        if isinstance(v, UOp):
            if v.op is not Ops.BIND:
                raise JitError(f"TinyJit: {p} is an unbound {v.op.name}; pass a Variable bound to its value "
                               "(Variable(...).bind(v)), which a replay reads again")
            yield p, v


def _variable_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, UOp]]:
    """The bound Variables among the arguments: a replay launches the recorded kernels with their new values."""
    found = [item for i, a in enumerate(args) for item in _walk_variables(a, f"argument {i}")]
    found += [item for k, a in kwargs.items() for item in _walk_variables(a, f"argument {k!r}")]
    return found


def _tensor_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Tensor]]:
    found = [item for i, a in enumerate(args) for item in _walk(a, f"argument {i}")]
    found += [item for k, a in kwargs.items() for item in _walk(a, f"argument {k!r}")]
    return found


def _frozen_values(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every returned value that is neither a Tensor, None, nor a list/tuple/dict of those (it would be frozen)."""
    if value is None or isinstance(value, (Tensor, MultiTensor)):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _frozen_values(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _frozen_values(item, f"{path}[{key!r}]")
    else:
        yield path, value


def _check_distinct(found: list[tuple[str, Tensor]]) -> None:
    """Two arguments over one Buffer cannot be told apart by the recording (a replay would swap only one)."""
    seen: dict[int, str] = {}
    for path, t in found:
        (buf,) = t.inputs
        first = seen.setdefault(id(buf), path)
        if first != path:
            raise JitError(f"TinyJit: {first} and {path} are the same Buffer (the same Tensor, or views of one "
                           "Tensor); a replay swaps each recorded input separately, so pass distinct Tensors "
                           "(e.g. x and x.contiguous()), or pass it once")


def _rebuild(value: Any, outputs: Iterator[Tensor]) -> Any:
    """`value` with each Tensor replaced by the next of `outputs` (lists, tuples and dicts are rebuilt)."""
    if isinstance(value, Tensor):
        return next(outputs)
    if isinstance(value, MultiTensor):
        return MultiTensor([next(outputs) for _ in value.shards], value.axis)
    if isinstance(value, list):
        return [_rebuild(v, outputs) for v in value]
    if isinstance(value, tuple):
        items = [_rebuild(v, outputs) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: _rebuild(v, outputs) for k, v in value.items()}
    return value


def _realized_buffer(t: Tensor) -> Buffer:
    """The one Buffer a realized Tensor reads."""
    (buf,) = t.inputs
    return buf


def _map_sizes(shape: tuple[int, ...], fn: Callable[[UOp], UOp]) -> tuple[int, ...]:
    """`shape` with `fn` applied to each symbolic size (a UOp where the static type says int)."""
    dims: tuple[Any, ...] = shape
    mapped: tuple[Any, ...] = tuple(d if type(d) is int else fn(d) for d in dims)
    return mapped


def _unbound(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with each symbolic size's BINDs replaced by their variables: what a replay must match."""
    return _map_sizes(shape, lambda d: d.substitute({n: n.src[0] for n in d.toposort if n.op is Ops.BIND}))


def _size_values(shape: tuple[int, ...]) -> dict[str, int]:
    """The bound value of each variable in `shape`'s symbolic sizes, by name."""
    dims: tuple[Any, ...] = shape
    return {str(n.src[0].arg[0]): int(n.src[1].arg) for d in dims if type(d) is not int
            for n in d.toposort if n.op is Ops.BIND}


def _rebound(shape: tuple[int, ...], vals: dict[str, int]) -> tuple[int, ...]:
    """`shape` with its variables bound to `vals`."""
    def rebind(d: UOp) -> UOp:
        binds = [n for n in d.toposort if n.op is Ops.BIND and str(n.src[0].arg[0]) in vals]
        return d.substitute({n: n.src[0].bind(vals[str(n.src[0].arg[0])]) for n in binds})
    return _map_sizes(shape, rebind)


def _stage(t: Tensor, staging: Buffer | None) -> Buffer:
    """A symbolic-shaped argument's values, copied row-major into `staging` (made here, sized for the variables'
    maxima, when None): the recording and every replay read the argument from that one Buffer, so one recording
    serves every bound size. `t` is re-pointed at it."""
    src = _realized_buffer(t)
    if staging is None:
        staging = Buffer(src.device, math.prod(max_shape(t.shape)), src.dtype)
    n = math.prod(bound_shape(t.shape)) * src.dtype.itemsize
    data = bytearray(staging.nbytes)
    data[:n] = src.copyout()[:n]
    staging.copyin(data)
    t.uop, t.inputs = buffer_view(staging, t.shape), frozenset((staging,))
    return staging


@dataclass(frozen=True)
class _Input:
    path: str
    shape: tuple[int, ...]
    dtype: Any
    device: str
    buffer: Buffer


@dataclass(frozen=True)
class _Output:
    shape: tuple[int, ...]
    device: str
    buffer: Buffer


@dataclass
class CapturedJit:
    """What the recording call left: the launches, the recorded inputs, the return value's template, and the
    random draws the recording made (each replay draws them again at a fresh counter range)."""

    capture: Capture
    inputs: list[_Input]
    outputs: list[_Output]
    template: Any
    draws: list[stream.Draw]
    pruned: int = 0  # steps dropped by prune=True
    variables: tuple[tuple[str, UOp], ...] = ()  # (path, DEFINE_VAR) of each bound Variable argument

    def variable_values(self, found: list[tuple[str, UOp]]) -> dict[str, int]:
        """The values of a replay's Variable arguments, by name; they must be the recorded variables."""
        if [(p, b.src[0]) for p, b in found] != list(self.variables):
            recorded = ", ".join(f"{p}: {v.arg[0]}" for p, v in self.variables) or "none"
            got = ", ".join(f"{p}: {b.src[0].arg[0]}" for p, b in found) or "none"
            raise JitArgumentError(f"TinyJit: the Variable arguments changed: recorded {recorded}, got {got}; pass "
                                   "the same Variables (with any bound values) in the same places, or call reset()")
        return {str(b.src[0].arg[0]): int(b.src[1].arg) for _, b in found}

    def redraw(self) -> dict[str, int]:
        """The variable values that make this replay's draws fresh: a new counter range of the recorded span
        (offsets keep their distances) and the current seed."""
        if not self.draws:
            return {}
        first = min(d.offset for d in self.draws)
        span = max(d.offset + d.n for d in self.draws) - first
        base, seed = stream.take(span)
        key = stream.signed_key(seed)
        vals = {d.offset_var: d.offset - first + base for d in self.draws}
        vals.update({d.key_var: key for d in self.draws})
        return vals

    def check(self, found: list[tuple[str, Tensor]]) -> None:
        """The arguments of a replay must look like the recorded ones."""
        if [p for p, _ in found] != [i.path for i in self.inputs]:
            raise JitArgumentError(f"TinyJit: the Tensor arguments changed: recorded {[i.path for i in self.inputs]}, "
                             f"got {[p for p, _ in found]}; pass Tensors in the same places (or call reset())")
        for rec, (path, t) in zip(self.inputs, found, strict=True):
            if _unbound(t.shape) != _unbound(rec.shape):
                raise JitShapeError(f"TinyJit: {path} has shape {t.shape}, but shape {rec.shape} was recorded; a "
                                 "jitted function replays fixed shapes (call reset() to record new ones)")
            if t.dtype is not rec.dtype:
                raise JitDTypeError(f"TinyJit: {path} has dtype {t.dtype}, but dtype {rec.dtype} was recorded "
                                 f"(shape {rec.shape}); cast it, or call reset() to record again")
            if t.device != rec.device:
                raise JitArgumentError(f"TinyJit: {path} is on {t.device}, but {rec.device} was recorded (shape "
                                 f"{rec.shape}); move it with .to(), or call reset() to record again")

    def replay(self, found: list[tuple[str, Tensor]], vals: dict[str, int]) -> Any:
        swap: dict[Buffer, Buffer] = {}
        sizes: dict[str, int] = {}
        for rec, (_, t) in zip(self.inputs, found, strict=True):
            if is_symbolic(rec.shape):  # copied into the recorded staging Buffer; its variables take new values
                sizes.update(_size_values(t.shape))
                _stage(t, rec.buffer)
                continue
            buf = _realized_buffer(t)
            if buf is not rec.buffer and buf in self.capture:
                # a Buffer the replay itself writes (e.g. the last call's output passed back in): read a copy, so no
                # kernel reads and writes the same memory in a way the recording never did
                fresh = Buffer(buf.device, buf.size, buf.dtype)
                copy_buffer(fresh, buf)
                buf = fresh
            swap[rec.buffer] = buf
        self.capture.replay(swap, {**vals, **sizes})
        outs = (Tensor._make(buffer_view(swap.get(o.buffer, o.buffer), _rebound(o.shape, sizes)), o.device,
                             (swap.get(o.buffer, o.buffer),)) for o in self.outputs)
        return _rebuild(self.template, outs)


class TinyJit(Generic[R]):
    """Record a function's kernels on its second call and replay them on every later one (module docstring).

    `prune=True` drops from the replays the kernels that cannot depend on the Tensor arguments; `frozen_random=True`
    replays the random numbers drawn at the recording instead of drawing fresh ones."""

    def __init__(self, fxn: Callable[..., R], *, prune: bool = False, frozen_random: bool = False) -> None:
        self.fxn = fxn
        self.prune = prune
        self.frozen_random = frozen_random
        self.cnt = 0  # calls so far: 0 runs plainly, 1 records, 2+ replay
        self.captured: CapturedJit | None = None
        self._busy = threading.Lock()  # held for a whole call: one call at a time (module docstring, "Threads")
        self._caller: threading.Thread | None = None  # the thread inside, for the refusal's message
        functools.update_wrapper(self, fxn)

    def reset(self) -> None:
        """Forget the recording: the next call runs plainly, the one after records again."""
        self.cnt, self.captured = 0, None

    def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., R]:
        """Decorating a method: the instance becomes the first argument (one recording per TinyJit object)."""
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not self._busy.acquire(blocking=False):
            raise JitError(self._refusal())
        try:
            self._caller = threading.current_thread()
            return self._call(args, kwargs)
        finally:
            self._caller = None
            self._busy.release()

    @property
    def _name(self) -> str:
        return str(getattr(self.fxn, "__qualname__", repr(self.fxn)))

    def _refusal(self) -> str:
        caller, here = self._caller, threading.current_thread()
        if caller is here:
            return (f"TinyJit {self._name}: called again from inside its own call (thread {here.name!r}); a jitted "
                    "function cannot call itself")
        inside = f"another thread ({caller.name!r})" if caller is not None else "another thread"
        return (f"TinyJit {self._name}: called from thread {here.name!r} while {inside} is inside it; one TinyJit "
                "object replays into one set of Buffers, so it runs one call at a time. Give each thread its own "
                "TinyJit (e.g. TinyJit(fn) per thread), or call it from one thread at a time")

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        if STATE.capture() is not None:
            raise JitError(f"TinyJit {self._name}: called while another TinyJit records in this thread; the inner "
                           "one's kernels would not be part of the outer recording. Call the inner function "
                           "without TinyJit, or jit only the outer one")
        found = _tensor_args(args, kwargs)
        if found:
            Tensor.realize(*(t for _, t in found))
        _check_distinct(found)
        if self.captured is None and self.cnt == 1:  # recording: symbolic arguments move to staging Buffers
            for _, t in found:
                if is_symbolic(t.shape):
                    _stage(t, None)
        variables = _variable_args(args, kwargs)
        if self.captured is not None:
            self.captured.check(found)
            self.cnt += 1
            vals = {} if self.frozen_random else self.captured.redraw()
            vals.update(self.captured.variable_values(variables))
            result: R = self.captured.replay(found, vals)
            return result
        if self.cnt == 0:
            self.cnt = 1
            return self._run(args, kwargs)
        return self._record(found, args, kwargs)

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        result = self.fxn(*args, **kwargs)
        outs = [t for _, t in _walk(result, "output")]
        if outs:
            Tensor.realize(*outs)
        return result

    def _record(self, found: list[tuple[str, Tensor]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        epoch = stream.seed_epoch()
        with stream.logging_draws() as draws, STATE.capturing() as capture:
            result = self._run(args, kwargs)
        if stream.seed_epoch() != epoch:
            raise JitError(f"TinyJit {self._name}: manual_seed was called while the function was recorded; a replay "
                           "runs no Python code, so it would not reseed. Call manual_seed outside the jitted "
                           "function (replays draw from the current seed)")
        frozen = list(_frozen_values(result, "the return value"))
        if frozen:
            path, value = frozen[0]
            raise JitError(f"TinyJit {self._name}: {path} is a {type(value).__name__} ({value!r:.40}), which a "
                           "replay would return unchanged from the recording; return Tensors (or None) only, e.g. "
                           "Tensor(value) or a Tensor the caller reads with .item()")
        if len(capture) == 0:
            raise JitError(f"TinyJit {self._name}: the function ran no kernel while it was recorded, so there is "
                           "nothing to replay; jit a function that computes something (its Tensor arguments and "
                           "results are realized for it)")
        inputs = [_Input(p, t.shape, t.dtype, t.device, _realized_buffer(t)) for p, t in found]
        outputs = [_Output(t.shape, t.device, _realized_buffer(t)) for _, t in _walk(result, "output")]
        varying = {n for d in draws for n in (d.offset_var, d.key_var)} if not self.frozen_random else set()
        varying |= {str(b.src[0].arg[0]) for _, b in _variable_args(args, kwargs)}  # Variable arguments
        varying |= {name for _, t in found for name in _size_values(t.shape)}  # symbolic argument sizes
        pruned = capture.prune([i.buffer for i in inputs], varying.__contains__) if self.prune else 0
        self.captured = CapturedJit(capture, inputs, outputs, result, [] if self.frozen_random else list(draws),
                                    pruned, tuple((p, b.src[0]) for p, b in _variable_args(args, kwargs)))
        self.cnt = 2
        return result
