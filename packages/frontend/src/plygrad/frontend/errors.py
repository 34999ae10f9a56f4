"""The frontend's own exceptions. Shape and dtype mistakes raise plygrad.ir's ShapeError / DTypeError."""

from __future__ import annotations


class SchedulerNotFoundError(LookupError):
    """No `plygrad.schedulers` entry point of the requested name is installed (or it failed to import)."""
