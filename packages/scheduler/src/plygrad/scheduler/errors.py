"""The scheduler's one exception type."""

from __future__ import annotations

from plygrad.ir import IRError


class ScheduleError(IRError, ValueError):
    """A tensor graph the scheduler cannot turn into kernels; the message names the op and what to change."""
