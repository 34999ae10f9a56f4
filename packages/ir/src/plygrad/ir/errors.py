"""The exceptions of the IR package. Each says what is wrong and where, so a user can act on it."""

from __future__ import annotations


class IRError(Exception):
    """Base of every error this package raises on purpose."""


class ShapeError(IRError, ValueError, RuntimeError):
    """A tensor-stage op was given shapes it cannot combine (the message names the op and the shapes).

    Also a RuntimeError, the class PyTorch raises for a shape mismatch (matmul, cat, conv, einsum, broadcasting,
    reshape), so code written for PyTorch (`except RuntimeError`) catches it, as code written for NumPy
    (`except ValueError`) does."""


class AxisError(ShapeError, IndexError):
    """An axis (dim) out of range for the tensor's number of axes. Also an IndexError, as PyTorch's "Dimension out
    of range" is and as NumPy's AxisError (a ValueError and an IndexError) is."""


class SizeTypeError(ShapeError, TypeError):
    """A size, shape or axis given as something that is not an int (a float, a string). Also a TypeError, as
    PyTorch's "must be tuple of ints" and Python's own are."""


class DTypeError(IRError, TypeError, RuntimeError):
    """An op was given dtypes it does not accept. Also a RuntimeError: PyTorch raises that for a dtype an op does
    not take (its NotImplementedError "not implemented for 'Float'" and "expected scalar type" are RuntimeErrors)."""


class DTypeNameError(DTypeError, ValueError):
    """A dtype was named by a string no dtype has (or given as something that is not a dtype); the message lists
    the names. Both a DTypeError and a ValueError, so code catching either (PyTorch raises TypeError, tinygrad
    AttributeError, NumPy TypeError) sees it."""


class IRVerifyError(IRError):
    """A graph breaks a rule of its IR stage; the message names the node and the rule."""


class RewriteError(IRError):
    """The rewrite engine was misused, or a rule misbehaved (returned a non-UOp, or looped)."""


class RewriteLoopError(RewriteError):
    """Rewrite rules kept firing past the step limit, or rewrote a node back into itself."""


class IRDecodeError(IRError):
    """Bytes or text that are not a valid serialized graph. `offset` is where decoding stopped: a byte offset for
    binary input, a character offset for text (`unit` says which)."""

    def __init__(self, message: str, offset: int, unit: str = "byte") -> None:
        super().__init__(f"{message} (at {unit} offset {offset})")
        self.offset = offset
        self.unit = unit


class IRVersionError(IRError):
    """Serialized IR from a format or opset version this reader cannot read; names both versions."""
