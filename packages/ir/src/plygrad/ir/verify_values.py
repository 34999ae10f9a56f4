"""Checks of argument values, independent of any op: records, constants, and the helpers messages use.

Everything here takes plain values typed `object`, because values come from untrusted bytes: a record's fields
are type-checked before they are read as what the dataclass declares. A check returns None when the value is
valid, or the reason it is not.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from functools import partial
from math import isnan
from typing import Final

from plygrad.ir.dtype import DType, DTypeKind, dtype_text, dtypes
from plygrad.ir.ops import OptOps
from plygrad.ir.records import BufferRef, Opt, ParamInfo, ProgramInfo
from plygrad.ir.scalar import truncate
from plygrad.ir.target import TensorCore
from plygrad.ir.uop import arg_key


# ---- small predicates ------------------------------------------------------------------------------------------
def is_int(x: object) -> bool:
    """A Python int that is not a bool (True is an int to Python, never to the IR)."""
    return type(x) is int


def is_int_tuple(x: object) -> bool:
    return type(x) is tuple and _JUST_INT.issuperset(map(type, x))  # C-level: twice as fast as all(...)


_JUST_INT: Final = frozenset({int})


def is_int_pairs(x: object) -> bool:
    return type(x) is tuple and all(type(p) is tuple and len(p) == 2 and is_int_tuple(p) for p in x)


def is_value_dtype(dt: DType) -> bool:
    """A dtype that holds values: not void, not a pointer (vectors and the index type are values)."""
    return dt.kind is not DTypeKind.VOID and type(dt) is DType


def is_memory_dtype(dt: DType) -> bool:
    """A scalar dtype a buffer can hold: the value dtypes of `dtypes.all()` (not index, void or vectors)."""
    return dt in _MEMORY_DTYPES


_MEMORY_DTYPES: Final = frozenset(dtypes.all())
_BOOL: Final = dtypes.bool
_C_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def show(x: object, limit: int = 80) -> str:
    """`repr` cut to `limit` characters: arguments from untrusted input may be huge (a long string or tuple is cut
    before its repr is built)."""
    if isinstance(x, str | tuple) and len(x) > limit:
        x = x[:limit]
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dtype_word(dt: DType) -> str:
    """The text-form spelling (float32, float32x4, ptr(float32,global,16)): short, and what to_text prints."""
    return dtype_text(dt)


def field_of(record: object, name: str) -> object:
    """A record field typed as what it really is before checking: anything (records come from untrusted bytes)."""
    found: object = getattr(record, name)
    return found


# ---- record checks (None: valid) ---------------------------------------------------------------------------------
def opt_problem(opt: object) -> str | None:
    if type(opt) is not Opt:
        return f"{show(opt)} is not an Opt"
    if not isinstance(opt.op, OptOps) or not is_int(opt.axis) or not is_int(opt.amount):
        return f"{show(opt)} needs an OptOps op and int axis and amount"
    return None


def opts_problem(opts: object) -> str | None:
    if type(opts) is not tuple:
        return f"opts must be a tuple of Opt, got {show(opts)}"
    for opt in opts:
        problem = opt_problem(opt)
        if problem is not None:
            return problem
    return None


def buffer_ref_problem(ref: object) -> str | None:
    if type(ref) is not BufferRef:
        return f"needs a BufferRef argument, got {show(ref)}"
    if not is_int(ref.id):
        return f"needs an int buffer id, got {show(ref.id)}"
    if not isinstance(ref.device, str) or not ref.device:
        return f"needs a non-empty device name, got {show(ref.device)}"
    if not is_int(ref.size) or ref.size < 0:
        return f"needs a size >= 0 (in elements), got {show(ref.size)}"
    return None


def _positive_triple(x: object) -> bool:
    return type(x) is tuple and len(x) == 3 and all(type(v) is int and v > 0 for v in x)


def program_info_problem(info: object) -> str | None:
    if type(info) is not ProgramInfo:
        return f"needs a ProgramInfo argument, got {show(info)}"
    if not isinstance(info.name, str) or _C_IDENTIFIER.match(info.name) is None:
        return f"needs a C identifier as the program name, got {show(info.name)}"
    if not _positive_triple(info.global_size):
        return f"needs global_size of three positive ints, got {show(info.global_size)}"
    if info.local_size is not None and not _positive_triple(info.local_size):
        return f"needs local_size None or three positive ints, got {show(info.local_size)}"
    if type(info.params) is not tuple:
        return f"needs params as a tuple of ParamInfo, got {show(info.params)}"
    for i, param in enumerate(info.params):
        if type(param) is not ParamInfo:
            return f"param {i} is not a ParamInfo: {show(param)}"
        if param.index != i or not is_int(param.index):
            return f"param {i} has index {show(param.index)}: params are listed with indices 0..n-1 in order"
        if not isinstance(param.dtype, DType) or not is_memory_dtype(param.dtype):
            return f"param {i} needs a buffer dtype (one of dtypes.all()), got {show(param.dtype)}"
        if not is_int(param.size) or param.size < 0:
            return f"param {i} needs a size >= 0, got {show(param.size)}"
        writable = field_of(param, "writable")
        if type(writable) is not bool:
            return f"param {i} needs a bool `writable`, got {show(writable)}"
    for name in ("ops", "mem"):
        value = getattr(info, name)
        if not is_int(value) or value < 0:
            return f"needs {name} >= 0 (an int estimate), got {show(value)}"
    return opts_problem(info.opts)


def tensor_core_problem(tc: object) -> str | None:
    if type(tc) is not TensorCore:
        return f"needs a TensorCore argument, got {show(tc)}"
    if not _positive_triple(tc.dims) or not is_int(tc.threads) or tc.threads <= 0:
        return f"needs TensorCore dims of three positive ints and threads > 0, got {show(tc)}"
    if not isinstance(field_of(tc, "dtype_in"), DType) or not isinstance(field_of(tc, "dtype_out"), DType):
        return f"needs TensorCore dtypes, got {show(tc)}"
    return None


# ---- constants -------------------------------------------------------------------------------------------------
def _float_fits(fmt: struct.Struct, dt: DType) -> Callable[[float], bool]:
    """Whether a float is exactly a value of the narrower float format. NaNs (rare) take scalar.truncate's path,
    which defines how a NaN payload narrows; every other float round-trips through `struct` at C speed."""

    def fits(x: float) -> bool:
        if isnan(x):
            return _truncates_to_itself(dt, x)
        try:
            back: float = fmt.unpack(fmt.pack(x))[0]
        except OverflowError:  # rounds to infinity: not a value of the format
            return False
        return back == x  # struct keeps the sign of zero, so == is exact here

    return fits


def _truncates_to_itself(dt: DType, x: float) -> bool:
    return bool(arg_key(truncate(dt, x)) == arg_key(x))


_FLOAT_FITS: Final[dict[DType, Callable[[float], bool]]] = {
    dtypes.float64: lambda x: True, dtypes.float32: _float_fits(struct.Struct("<f"), dtypes.float32),
    dtypes.float16: _float_fits(struct.Struct("<e"), dtypes.float16),
    dtypes.bfloat16: lambda x: _truncates_to_itself(dtypes.bfloat16, x),
    **{fp8: partial(_truncates_to_itself, fp8) for fp8 in dtypes.fp8s},
}
_INT_RANGE: Final[dict[DType, tuple[int, int]]] = {
    dt: (int(dt.min), int(dt.max)) for dt in dtypes.all() if dt.is_int
}


def const_value_problem(dtype: DType, value: object) -> str | None:
    """Why `value` cannot be a CONST of `dtype` (None: it can). The value's Python type must match the dtype's
    kind and the value must be one the dtype holds (already wrapped or rounded), so a constant means the same
    thing to every reader. The per-dtype tables keep this off scalar.truncate's slow generic path: a graph is
    mostly constants."""
    dt = dtype if dtype.count == 1 else dtype.scalar()
    if not is_value_dtype(dt):
        return f"must have a value dtype, got {dtype_word(dtype)}"
    fits = _FLOAT_FITS.get(dt)
    if fits is not None:
        if type(value) is not float:
            return f"of dtype {dtype_word(dt)} needs a float value, got {show(value)}"
        if fits(value):
            return None
    elif dt is _BOOL:
        return None if type(value) is bool else f"of dtype bool needs a bool value, got {show(value)}"
    else:
        if type(value) is not int:
            return f"of dtype {dtype_word(dt)} needs an int value, got {show(value)}"
        bounds = _INT_RANGE.get(dt)
        if bounds is None or bounds[0] <= value <= bounds[1]:
            return None  # the index type is unbounded
    return (f"value {show(value)} is not a {dtype_word(dt)} value (it stores as {show(truncate(dt, value))}): "
            "build constants with UOp.const, which wraps or rounds the value")
