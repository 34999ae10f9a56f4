"""The exceptions codegen raises: every message names the op, the kernel and what to do about it."""

from __future__ import annotations


class CodegenError(Exception):
    """A kernel codegen cannot lower or render (an unsupported op or dtype, an unknown renderer, bad input)."""


class OptError(CodegenError):
    """An optimization action that does not apply to the kernel (unknown axis, wrong axis kind, bad amount)."""
