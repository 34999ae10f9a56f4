"""`TinyJit` (tinygrad's name): run a function's kernels again without building, scheduling or lowering anything.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

The first call runs the function as written (kernels get compiled). The second runs it again while recording every
schedule run (`scheduling.capturing`: each plan with the Buffers it ran on). Every later call only replays the
recorded kernels (`plygrad.runtime.Capture.replay`) with the new Tensor arguments' Buffers in place of the recorded
ones: no graph is built, nothing is scheduled, nothing is lowered, no Buffer is allocated.

What that means for the function:
- Tensor arguments (positional or keyword, also inside lists, tuples and dicts) are realized first; on a replay they
  must have the recorded shapes, dtypes and devices (ShapeError / DTypeError / ValueError naming the argument).
- Returned Tensors are realized at the end of the recording call. A replay returns Tensors over the *recorded*
  output Buffers: the next call overwrites them (as in tinygrad). Copy out (`.numpy()`) what must be kept.
- Everything else is frozen at the recording call: non-Tensor arguments, Python side effects and control flow,
  Tensors the function makes from Python data, `Tensor.training` / `no_grad`. Call `reset()` to record again.
- State that must change across calls (parameters, optimizer moments, step counters) must be updated in place
  with `assign` (and realized inside the function, e.g. by the optimizer's `step`): a Tensor *rebound* to a new
  value inside the function is not seen by the replay, which keeps reading the Buffer it recorded.
- Random numbers: plygrad's counter-based generator bakes each draw's counter offset into the graph, so a replay
  would draw the recorded numbers again. A function that draws random numbers (`rand`, `randn`, `dropout`, ...)
  while being recorded raises JitError, unless `TinyJit(fn, frozen_random=True)` says repeating them is intended.

Threads (docs/threads.md): separate TinyJit objects may run in separate threads at once, beside eager work; each
records only its own thread's kernels. One TinyJit object is one set of recorded Buffers, so it runs one call at a
time: a call that arrives while another thread (or this thread, recursively) is inside the same object raises
JitError rather than waiting, because waiting would still let the second call overwrite the output Buffers the
first caller is about to read. Calls from different threads one after another are fine.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from plygrad.frontend import random, scheduling
from plygrad.frontend.lazy import buffer_view
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DTypeError, ShapeError
from plygrad.runtime import Buffer, Capture
from plygrad.runtime.plan import copy_buffer

R = TypeVar("R")


class JitError(RuntimeError):
    """A function cannot be recorded or replayed faithfully by TinyJit (the message says why and what to do)."""


def _walk(value: Any, path: str) -> Iterator[tuple[str, Tensor]]:
    """Every Tensor inside `value` (lists, tuples and dicts are searched), with a path naming it for errors."""
    if isinstance(value, Tensor):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}[{key!r}]")


def _tensor_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Tensor]]:
    found = [item for i, a in enumerate(args) for item in _walk(a, f"argument {i}")]
    found += [item for k, a in kwargs.items() for item in _walk(a, f"argument {k!r}")]
    return found


def _rebuild(value: Any, outputs: Iterator[Tensor]) -> Any:
    """`value` with each Tensor replaced by the next of `outputs` (lists, tuples and dicts are rebuilt)."""
    if isinstance(value, Tensor):
        return next(outputs)
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
    """What the recording call left: the launches, the recorded inputs, and the return value's template."""

    capture: Capture
    inputs: list[_Input]
    outputs: list[_Output]
    template: Any

    def check(self, found: list[tuple[str, Tensor]]) -> None:
        """The arguments of a replay must look like the recorded ones."""
        if [p for p, _ in found] != [i.path for i in self.inputs]:
            raise ValueError(f"TinyJit: the Tensor arguments changed: recorded {[i.path for i in self.inputs]}, "
                             f"got {[p for p, _ in found]}; pass Tensors in the same places (or call reset())")
        for rec, (path, t) in zip(self.inputs, found, strict=True):
            if t.shape != rec.shape:
                raise ShapeError(f"TinyJit: {path} has shape {t.shape}, but shape {rec.shape} was recorded; a "
                                 "jitted function replays fixed shapes (call reset() to record new ones)")
            if t.dtype is not rec.dtype:
                raise DTypeError(f"TinyJit: {path} has dtype {t.dtype}, but dtype {rec.dtype} was recorded "
                                 f"(shape {rec.shape}); cast it, or call reset() to record again")
            if t.device != rec.device:
                raise ValueError(f"TinyJit: {path} is on {t.device}, but {rec.device} was recorded (shape "
                                 f"{rec.shape}); move it with .to(), or call reset() to record again")

    def replay(self, found: list[tuple[str, Tensor]]) -> Any:
        swap: dict[Buffer, Buffer] = {}
        for rec, (_, t) in zip(self.inputs, found, strict=True):
            buf = _realized_buffer(t)
            if buf is not rec.buffer and buf in self.capture:
                # a Buffer the replay itself writes (e.g. the last call's output passed back in): read a copy, so no
                # kernel reads and writes the same memory in a way the recording never did
                fresh = Buffer(buf.device, buf.size, buf.dtype)
                copy_buffer(fresh, buf)
                buf = fresh
            swap[rec.buffer] = buf
        self.capture.replay(swap)
        outs = (Tensor._make(buffer_view(swap.get(o.buffer, o.buffer), o.shape), o.device,
                             (swap.get(o.buffer, o.buffer),)) for o in self.outputs)
        return _rebuild(self.template, outs)


class TinyJit(Generic[R]):
    """Record a function's kernels on its second call and replay them on every later one (module docstring)."""

    def __init__(self, fxn: Callable[..., R], frozen_random: bool = False) -> None:
        self.fxn = fxn
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

    def _refusal(self) -> str:
        name = getattr(self.fxn, "__qualname__", repr(self.fxn))
        caller, here = self._caller, threading.current_thread()
        if caller is here:
            return (f"TinyJit {name}: called again from inside its own call (thread {here.name!r}); a jitted "
                    "function cannot call itself")
        inside = f"another thread ({caller.name!r})" if caller is not None else "another thread"
        return (f"TinyJit {name}: called from thread {here.name!r} while {inside} is inside it; one TinyJit object "
                "replays into one set of Buffers, so it runs one call at a time. Give each thread its own TinyJit "
                "(e.g. TinyJit(fn) per thread), or call it from one thread at a time")

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        found = _tensor_args(args, kwargs)
        if found:
            Tensor.realize(*(t for _, t in found))
        if self.captured is not None:
            self.captured.check(found)
            self.cnt += 1
            result: R = self.captured.replay(found)
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
        drawn_before = random.drawn_here()  # this thread's draws only: another thread may draw meanwhile
        with scheduling.capturing() as capture:
            result = self._run(args, kwargs)
        if random.drawn_here() != drawn_before and not self.frozen_random:
            raise JitError("TinyJit: the function drew random numbers (rand, randn, dropout, ...) while it was "
                           "recorded; a replay would draw the same numbers every call. Draw them outside and pass "
                           "them in as a Tensor argument, or use TinyJit(fn, frozen_random=True) if repeating them "
                           "is intended")
        inputs = [_Input(p, t.shape, t.dtype, t.device, _realized_buffer(t)) for p, t in found]
        outputs = [_Output(t.shape, t.device, _realized_buffer(t)) for _, t in _walk(result, "output")]
        self.captured = CapturedJit(capture, inputs, outputs, result)
        self.cnt = 2
        return result
