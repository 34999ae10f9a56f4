"""The frontend's own exceptions. Shape and dtype mistakes raise plygrad.ir's ShapeError / DTypeError (axes out of
range AxisError); each subclasses the builtins a PyTorch, tinygrad or NumPy user catches (docs/frontend.md,
"Errors")."""

from __future__ import annotations


class SchedulerNotFoundError(LookupError):
    """No `plygrad.schedulers` entry point of the requested name is installed (or it failed to import)."""


class ArgumentValueError(ValueError, RuntimeError):
    """An argument has a value the op does not accept (a zero step, k past the axis, a negative class count). A
    ValueError, Python's class for it, and a RuntimeError, the class PyTorch raises for these mistakes."""


class StateDictError(RuntimeError, ValueError):
    """`load_state_dict` was given a state dict that does not fit the model: the message lists the missing and
    unexpected keys and every shape mismatch. A RuntimeError, as PyTorch's; a ValueError, as plygrad's shape
    mismatch was before."""
