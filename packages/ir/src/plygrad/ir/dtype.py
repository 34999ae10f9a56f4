"""Data types of the IR: scalars, vectors and pointers, their promotion rules, and the NumPy names they map to.

DTypes are interned: every constructor goes through one cache, so two equal dtypes are the same object and
comparing or hashing them is as cheap as comparing identities. That matters because every `UOp` key contains one.

Names follow tinygrad 0.14 (which follows PyTorch where both have a name): `dtypes.float32`, the aliases `half`,
`float`, `double`, `uint`, `long`..., the groups `dtypes.floats`, `ints`, `uints`, `sints`, `fp8s`, the predicates
`dtypes.is_float(dt)`..., `dtypes.finfo(dt)`. `to_dtype` (also `dtypes.resolve`) is the one place a dtype given
by name becomes a `DType`: every API that takes a dtype takes its name too, and an unknown name fails there, at
the call, listing the names it knows. The four 8-bit floats are `fp8e4m3 fp8e5m2 fp8e4m3fnuz fp8e5m2fnuz`
(layouts and conversion rules in dtype_fp8.py); like float16 they compute in float32 and round after each op.
"""

from __future__ import annotations

import builtins
import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final

from plygrad.ir.dtype_fp8 import FP8_FORMATS
from plygrad.ir.errors import DTypeNameError

if TYPE_CHECKING:
    from plygrad.ir.dtype_info import FInfo

ConstType = bool | int | float
MAX_VECTOR_WIDTH: Final = 256  # widest vector any target has; also a bound for untrusted input


class DTypeKind(enum.Enum):
    """What a scalar dtype is: it decides promotion, folding and rendering."""

    VOID = "void"
    BOOL = "bool"
    SIGNED = "signed"
    UNSIGNED = "unsigned"
    FLOAT = "float"
    INDEX = "index"  # the abstract integer of index math; lowered to int32/int64 by codegen


class AddrSpace(enum.Enum):
    """Where a pointer points: device memory, workgroup-shared memory, or registers."""

    GLOBAL = "global"
    LOCAL = "local"
    REG = "reg"


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar or vector dtype. Build them only through `dtypes.*`, `.vec()` and `.ptr()` (they are interned)."""

    name: str
    kind: DTypeKind
    itemsize: int  # bytes of the whole value (scalar itemsize * count)
    count: int = 1

    _interned: ClassVar[dict[tuple[object, ...], DType]] = {}

    @staticmethod
    def _make(name: str, kind: DTypeKind, itemsize: int, count: int = 1) -> DType:
        key = ("dtype", name, kind, itemsize, count)
        found = DType._interned.get(key)
        if found is None:
            found = DType._interned[key] = DType(name, kind, itemsize, count)
        return found

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_dtype_from_text, (dtype_text(self),))

    def __lt__(self, other: DType) -> bool:
        return dtype_sort_key(self) < dtype_sort_key(other)

    # ---- structure -------------------------------------------------------------------------------------------
    def scalar(self) -> DType:
        """The element dtype of a vector (itself for a scalar)."""
        if self.count == 1:
            return self
        return DType._make(self.name, self.kind, self.itemsize // self.count)

    def vec(self, count: int) -> DType:
        """The vector of `count` lanes of this scalar dtype."""
        if self.count != 1:
            raise ValueError(f"vec() of a vector dtype {self!r}: take .scalar() first")
        if count < 1:
            raise ValueError(f"vec({count}): a vector has at least one lane")
        if count == 1:
            return self
        if count > MAX_VECTOR_WIDTH:
            raise ValueError(f"vec({count}): wider than MAX_VECTOR_WIDTH={MAX_VECTOR_WIDTH}")
        if self.kind is DTypeKind.VOID:
            raise ValueError("void has no vectors")
        return DType._make(self.name, self.kind, self.itemsize * count, count)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this dtype (-1: unknown size) in `addrspace`."""
        return PtrDType._make_ptr(self, size, addrspace)

    # ---- classification --------------------------------------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.kind is DTypeKind.FLOAT

    @property
    def is_int(self) -> bool:
        """True for signed, unsigned and the index type (not bool)."""
        return self.kind in (DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX)

    @property
    def is_unsigned(self) -> bool:
        return self.kind is DTypeKind.UNSIGNED

    @property
    def is_bool(self) -> bool:
        return self.kind is DTypeKind.BOOL

    @property
    def bitsize(self) -> int:
        return self.itemsize * 8

    @property
    def numpy_name(self) -> str | None:
        """The NumPy dtype name holding the same values (bfloat16: the `ml_dtypes` name), None for void/index."""
        return _NUMPY_NAMES.get(self.scalar().name) if not isinstance(self, PtrDType) else None

    @property
    def min(self) -> ConstType:
        """Smallest value of the dtype (floats: -inf)."""
        return _limits(self.scalar())[0]

    @property
    def max(self) -> ConstType:
        """Largest value of the dtype (floats: +inf)."""
        return _limits(self.scalar())[1]


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    """A pointer: what PARAM, INDEX and DEFINE_LOCAL carry in kernel ASTs."""

    base: DType = None  # type: ignore[assignment]
    size: int = -1
    addrspace: AddrSpace = AddrSpace.GLOBAL

    @staticmethod
    def _make_ptr(base: DType, size: int, addrspace: AddrSpace) -> PtrDType:
        if isinstance(base, PtrDType):
            raise ValueError(f"pointer to a pointer ({base!r}) is not an IR dtype")
        key = ("ptr", base, size, addrspace)
        found = DType._interned.get(key)
        if found is None:
            found = DType._interned[key] = PtrDType(base.name, base.kind, 8, 1, base, size, addrspace)
        assert isinstance(found, PtrDType)
        return found

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size}, {self.addrspace})"

    def scalar(self) -> DType:
        return self

    def vec(self, count: int) -> DType:
        raise ValueError("vectors of pointers are not IR dtypes")


def _limits(dt: DType) -> tuple[ConstType, ConstType]:
    if dt.kind is DTypeKind.BOOL:
        return (False, True)
    if dt.kind is DTypeKind.SIGNED:
        return (-(1 << (dt.bitsize - 1)), (1 << (dt.bitsize - 1)) - 1)
    if dt.kind is DTypeKind.UNSIGNED:
        return (0, (1 << dt.bitsize) - 1)
    if dt.kind is DTypeKind.INDEX:
        return (-(1 << 63), (1 << 63) - 1)
    if dt.kind is DTypeKind.FLOAT:
        return (-math.inf, math.inf)
    raise ValueError(f"{dt!r} has no value range")


_NUMPY_NAMES: Final[dict[str, str]] = {
    "bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
    **{fmt.name: fmt.numpy_name for fmt in FP8_FORMATS.values()},  # ml_dtypes' names (float8_e4m3fn, ...)
}


class dtypes:  # noqa: N801 - the lower-case namespace is the tinygrad/PyTorch spelling users type
    """Every scalar dtype of the IR, its aliases and groups, plus helpers. `dtypes.float32`, `dtypes.resolve("half")`.

    The predicates are static functions here (`dtypes.is_float(dt)`, as tinygrad spells them) and properties on a
    dtype (`dt.is_float`); both answer the same. Annotations say `builtins.bool` because `bool` in this class body
    is `dtypes.bool`."""

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        """True for the floats, fp8 included (`dtypes.floats`)."""
        return dt.is_float

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        """True for the signed and unsigned integers and the index type (not bool)."""
        return dt.is_int

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        return dt.is_unsigned

    @staticmethod
    def is_bool(dt: DType) -> builtins.bool:
        return dt.is_bool

    @staticmethod
    def finfo(dt: DTypeLike) -> FInfo:
        """The float format of `dt`: `(exponent, mantissa)` bits as tinygrad returns them (`e, m = finfo(dt)`),
        with PyTorch's `torch.finfo` fields as attributes (`bits eps max min tiny smallest_normal
        smallest_subnormal resolution`). Raises DTypeError for a dtype that is not a float."""
        from plygrad.ir.dtype_info import float_info  # dtype_info builds on this module

        return float_info(to_dtype(dt))

    @staticmethod
    def resolve(dt: DTypeLike) -> DType:
        """`to_dtype`: a DType as is, a name (`"float32"`, `"half"`, `"fp8e4m3"`) as the dtype it names."""
        return to_dtype(dt)

    void: Final = DType._make("void", DTypeKind.VOID, 0)
    bool: Final = DType._make("bool", DTypeKind.BOOL, 1)
    int8: Final = DType._make("int8", DTypeKind.SIGNED, 1)
    uint8: Final = DType._make("uint8", DTypeKind.UNSIGNED, 1)
    int16: Final = DType._make("int16", DTypeKind.SIGNED, 2)
    uint16: Final = DType._make("uint16", DTypeKind.UNSIGNED, 2)
    int32: Final = DType._make("int32", DTypeKind.SIGNED, 4)
    uint32: Final = DType._make("uint32", DTypeKind.UNSIGNED, 4)
    int64: Final = DType._make("int64", DTypeKind.SIGNED, 8)
    uint64: Final = DType._make("uint64", DTypeKind.UNSIGNED, 8)
    float16: Final = DType._make("float16", DTypeKind.FLOAT, 2)
    bfloat16: Final = DType._make("bfloat16", DTypeKind.FLOAT, 2)
    float32: Final = DType._make("float32", DTypeKind.FLOAT, 4)
    float64: Final = DType._make("float64", DTypeKind.FLOAT, 8)
    index: Final = DType._make("index", DTypeKind.INDEX, 8)
    # the 8-bit floats (dtype_fp8.py): OCP E4M3FN and E5M2, and the finite, unsigned-zero fnuz variants
    fp8e4m3: Final = DType._make("fp8e4m3", DTypeKind.FLOAT, 1)
    fp8e5m2: Final = DType._make("fp8e5m2", DTypeKind.FLOAT, 1)
    fp8e4m3fnuz: Final = DType._make("fp8e4m3fnuz", DTypeKind.FLOAT, 1)
    fp8e5m2fnuz: Final = DType._make("fp8e5m2fnuz", DTypeKind.FLOAT, 1)

    # PyTorch-style aliases
    half: Final = float16
    float: Final = float32
    double: Final = float64
    char: Final = int8
    uchar: Final = uint8
    short: Final = int16
    int: Final = int32
    long: Final = int64
    ushort: Final = uint16
    uint: Final = uint32
    ulong: Final = uint64

    # groups, as tinygrad names them
    fp8_ocp: Final = (fp8e4m3, fp8e5m2)
    fp8_fnuz: Final = (fp8e4m3fnuz, fp8e5m2fnuz)
    fp8s: Final = (*fp8_ocp, *fp8_fnuz)
    floats: Final = (*fp8s, float16, bfloat16, float32, float64)
    int8s: Final = (uint8, int8)
    int16s: Final = (uint16, int16)
    int32s: Final = (uint32, int32)
    int64s: Final = (uint64, int64)
    uints: Final = (uint8, uint16, uint32, uint64)
    sints: Final = (int8, int16, int32, int64)
    ints: Final = (*uints, *sints)

    default_float: ClassVar[DType] = float32
    default_int: ClassVar[DType] = int32

    @staticmethod
    def all() -> tuple[DType, ...]:
        """Every value dtype (not void, not index): the older ones in promotion order, then the fp8s."""
        return _ALL_VALUE_DTYPES

    @staticmethod
    def from_name(name: str) -> DType:
        """The scalar dtype called `name` exactly (also the aliases, void and index); raises KeyError with the
        choices. User-facing APIs take names through `to_dtype`, which also ignores case."""
        found = _BY_NAME.get(name)
        if found is None:
            raise KeyError(f"unknown dtype name {name!r}; known: {sorted(_BY_NAME)}")
        return found

    @staticmethod
    def from_numpy_name(name: str) -> DType:
        """The dtype matching a NumPy dtype name (`str(np_array.dtype)`)."""
        for dt in _ALL_VALUE_DTYPES:
            if dt.numpy_name == name:
                return dt
        raise KeyError(f"no plygrad dtype for NumPy dtype {name!r}")

    @staticmethod
    def from_py(value: ConstType) -> DType:
        """The default dtype of a Python scalar: bool, default_int or default_float."""
        if isinstance(value, bool):
            return dtypes.bool
        if isinstance(value, int):
            return dtypes.default_int
        if isinstance(value, float):
            return dtypes.default_float
        raise TypeError(f"{type(value).__name__} is not a scalar type (bool, int or float)")


# the fp8 dtypes come last (they were added in opset 1.2), so the positions of the older dtypes do not move
_ALL_VALUE_DTYPES: Final = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                            dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16,
                            dtypes.float32, dtypes.float64, *dtypes.fp8s)
_ALIASES: Final[dict[str, DType]] = {
    "half": dtypes.float16, "float": dtypes.float32, "double": dtypes.float64, "char": dtypes.int8,
    "uchar": dtypes.uint8, "short": dtypes.int16, "int": dtypes.int32, "long": dtypes.int64,
    "ushort": dtypes.uint16, "uint": dtypes.uint32, "ulong": dtypes.uint64,
}
_BY_NAME: Final[dict[str, DType]] = {dt.name: dt for dt in (*_ALL_VALUE_DTYPES, dtypes.void, dtypes.index)} | _ALIASES
# what to_dtype accepts (lower case): value dtypes by name and alias, and the fp8s by their ml_dtypes/PyTorch names
_USER_NAMES: Final[dict[str, DType]] = {dt.name: dt for dt in _ALL_VALUE_DTYPES} | _ALIASES | {
    fmt.numpy_name: dtypes.from_name(fmt.name) for fmt in FP8_FORMATS.values()}


DTypeLike = DType | str  # what every API taking a dtype accepts: the dtype or its name


def to_dtype(dt: DTypeLike) -> DType:
    """The dtype `dt` names: a DType as is; a string by a dtype's name or alias, in any case (`"float32"`, `"half"`,
    `"Float"`, `"uint"`, `"fp8e4m3"`, `"float8_e4m3fn"`), as tinygrad's `to_dtype` reads it. An unknown name
    raises `DTypeNameError` (a DTypeError and a ValueError) listing every name it knows; void and index are IR
    dtypes, not values, and are not taken by name here."""
    if isinstance(dt, DType):
        return dt
    if isinstance(dt, str):
        found = _USER_NAMES.get(dt.lower())
        if found is None:
            raise DTypeNameError(f"unknown dtype name {dt!r}; the dtype names are {', '.join(sorted(_USER_NAMES))}")
        return found
    raise DTypeNameError(f"expected a dtype (a plygrad DType such as dtypes.float32, or its name such as "
                         f"'float32'), got {type(dt).__name__} {dt!r}")




def dtype_sort_key(dt: DType) -> tuple[int, int, str, int]:
    """A total order on dtypes, used only to make outputs deterministic."""
    base = dt.base if isinstance(dt, PtrDType) else dt.scalar()
    order = _ALL_VALUE_DTYPES.index(base) if base in _ALL_VALUE_DTYPES else len(_ALL_VALUE_DTYPES)
    return (order, int(isinstance(dt, PtrDType)), dt.name, dt.count)


# ---- promotion ---------------------------------------------------------------------------------------------------
# The promotion lattice (PyTorch's and tinygrad's): an edge a -> b means a value of a converts to b without
# leaving its category. The result of mixing dtypes is their least upper bound.
_PROMO_UP: Final[dict[DType, tuple[DType, ...]]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (*dtypes.fp8s, dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (*dtypes.fp8s, dtypes.float16, dtypes.bfloat16),
    # tinygrad's lattice: every integer reaches each fp8 (int + fp8 stays fp8, as int + half stays half), and
    # each fp8 reaches both 16-bit floats (PyTorch refuses to promote fp8 at all)
    **{fp8: (dtypes.float16, dtypes.bfloat16) for fp8 in dtypes.fp8s},
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


def _upper_bounds(dt: DType) -> frozenset[DType]:
    found = {dt}
    todo = [dt]
    while todo:
        for up in _PROMO_UP[todo.pop()]:
            if up not in found:
                found.add(up)
                todo.append(up)
    return frozenset(found)


_UPPER: Final[dict[DType, frozenset[DType]]] = {dt: _upper_bounds(dt) for dt in _PROMO_UP}


def least_upper_dtype(*dts: DType) -> DType:
    """The dtype that holds every argument without changing category (PyTorch `promote_types`).

    Where the lattice has no single least bound, the result follows NumPy: a 64-bit signed and unsigned integer
    meet in float64 (PyTorch refuses that pair), float16 and bfloat16 meet in float32. Two different fp8s meet in
    float16, as in tinygrad (both 16-bit floats bound them; tinygrad picks the lower priority).
    """
    found = _LEAST_UPPER.get(dts)
    if found is not None:
        return found
    _LEAST_UPPER[dts] = found = _least_upper(dts)
    return found


_LEAST_UPPER: Final[dict[tuple[DType, ...], DType]] = {}  # least_upper_dtype's answers (every op promotes)


def _least_upper(dts: tuple[DType, ...]) -> DType:
    if not dts:
        raise ValueError("least_upper_dtype() needs at least one dtype")
    for dt in dts:
        if dt not in _UPPER:
            raise TypeError(f"{dt!r} does not take part in promotion (only value dtypes do)")
    common = frozenset.intersection(*(_UPPER[dt] for dt in dts))
    least = [c for c in common if all(o in _UPPER[c] for o in common)]
    if len(least) == 1:
        return least[0]
    minimal = {c for c in common if not any(o is not c and c in _UPPER[o] for o in common)}
    if minimal == {dtypes.float16, dtypes.bfloat16}:  # two different fp8s
        return dtypes.float16
    # otherwise: a signed integer and uint64 (both reach every fp8 and 16-bit float)
    return dtypes.float64


def result_dtype(*operands: DType | ConstType) -> DType:
    """The dtype of an elementwise op over tensors (dtypes) and Python scalars, as PyTorch computes it.

    Python scalars are "weak": they only lift the category (bool < int < float). An int tensor plus 1.5 is
    `default_float`, a float16 tensor plus 1.5 stays float16, a bool tensor plus 2 is `default_int`.
    """
    tensor_dts = [op for op in operands if isinstance(op, DType)]
    scalars = [op for op in operands if not isinstance(op, DType)]
    if not tensor_dts:
        return least_upper_dtype(*(dtypes.from_py(s) for s in scalars))
    result = least_upper_dtype(*tensor_dts)
    for s in scalars:
        if isinstance(s, float) and not result.is_float:
            result = dtypes.default_float
        elif isinstance(s, int) and not isinstance(s, bool) and result.is_bool:
            result = dtypes.default_int
    return result


def sum_acc_dtype(dt: DType) -> DType:
    """The accumulator dtype of a sum (tinygrad's rule): bool and narrow signed ints sum in default_int, narrow
    unsigned ints in uint32, everything else in itself. PyTorch sums every integer in int64."""
    if dt.is_bool or (dt.kind is DTypeKind.SIGNED and dt.itemsize < 4):
        return dtypes.default_int
    if dt.kind is DTypeKind.UNSIGNED and dt.itemsize < 4:
        return dtypes.uint32
    return dt


# ---- text names --------------------------------------------------------------------------------------------------
def dtype_text(dt: DType) -> str:
    """The text spelling of a dtype: `float32`, `float32x4`, `ptr(float32,global,16)`."""
    if isinstance(dt, PtrDType):
        return f"ptr({dtype_text(dt.base)},{dt.addrspace.value},{dt.size})"
    return dt.name if dt.count == 1 else f"{dt.name}x{dt.count}"


def _dtype_from_text(text: str) -> DType:
    return parse_dtype(text)


def parse_dtype(text: str) -> DType:
    """Inverse of `dtype_text`; raises ValueError naming the text it could not read."""
    if text.startswith("ptr(") and text.endswith(")"):
        inner = text[4:-1]
        base_text, _, rest = inner.rpartition(",")
        base_text, _, space = base_text.rpartition(",")
        try:
            return parse_dtype(base_text).ptr(int(rest), AddrSpace(space))
        except (ValueError, KeyError) as e:
            raise ValueError(f"bad pointer dtype {text!r}: {e}") from None
    if text in _BY_NAME:
        return _BY_NAME[text]
    name, _, count = text.rpartition("x")
    if name in _BY_NAME and count.isdigit() and 1 < int(count) <= MAX_VECTOR_WIDTH:
        return _BY_NAME[name].vec(int(count))
    raise ValueError(f"unknown dtype {text!r}")
