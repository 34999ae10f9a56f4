"""Grad mode and training mode, kept per thread (docs/threads.md).

`Tensor.no_grad` and `Tensor.training` read like class flags (tinygrad's spelling: `Tensor.training = True` works),
but each thread has its own value, as PyTorch's grad mode is thread-local: a `with no_grad():` around one thread's
optimizer step must not turn gradient recording off for another thread building its forward pass, and two threads
leaving nested blocks in an interleaved order must not leave a flag stuck for everyone. The values live in
`contextvars`, so an asyncio task also gets its own copy. A new thread starts with both flags off (gradients are
recorded, evaluation mode), whatever the thread that started it had set.

`ModeFlags` is the metaclass of `LazyTensor` that turns the class attributes into the calling thread's values.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Final

_NO_GRAD: Final[ContextVar[bool]] = ContextVar("plygrad_no_grad", default=False)
_TRAINING: Final[ContextVar[bool]] = ContextVar("plygrad_training", default=False)


class ModeFlags(type):
    """Metaclass: `cls.no_grad` / `cls.training` read and set the calling thread's flags (module docstring)."""

    @property
    def no_grad(cls) -> bool:
        """While True, new results record no gradient (see `no_grad()`); optimizers update weights under it."""
        return _NO_GRAD.get()

    @no_grad.setter
    def no_grad(cls, value: bool) -> None:
        _NO_GRAD.set(bool(value))

    @property
    def training(cls) -> bool:
        """True in training mode (see `Tensor.train()`): dropout and batch norm behave as in training."""
        return _TRAINING.get()

    @training.setter
    def training(cls, value: bool) -> None:
        _TRAINING.set(bool(value))


@contextmanager
def _flag(var: ContextVar[bool], value: bool) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)  # back to what this thread had, even if it assigned the flag inside the block


def grad_mode(no_grad: bool) -> AbstractContextManager[None]:
    """Set this thread's `no_grad` flag inside the block (`no_grad()`, `enable_grad()`, `Tensor.test()`)."""
    return _flag(_NO_GRAD, no_grad)


def training_mode(training: bool) -> AbstractContextManager[None]:
    """Set this thread's `training` flag inside the block (`Tensor.train()`)."""
    return _flag(_TRAINING, training)
