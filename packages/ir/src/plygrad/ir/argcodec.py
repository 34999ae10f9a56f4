"""Binary encoding of UOp argument values and of the tables they refer to (docs/design.md §3).

Graphs and `Target`s share this value encoding: one tag byte, then the payload. Things that repeat across a blob
and are identified by name (ops, dtypes, enum members, record types) are stored once in tables at the front of the
blob and referred to by index, so a node costs a few bytes and a reader resolves every name once, not per node.

Every reader here treats its input as hostile: counts are checked against hard limits *and* against the bytes
left (each item takes at least one byte), so memory use is bounded by the input size; nesting is bounded by
`MAX_DEPTH`; a failure raises IRDecodeError with the offset where decoding stopped.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Final

import plygrad.ir.target  # noqa: F401 - registers the Target and TensorCore records this codec looks up
from plygrad.ir.dtype import MAX_VECTOR_WIDTH, AddrSpace, DType, PtrDType, dtypes
from plygrad.ir.errors import IRDecodeError
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import RECORD_TYPES, record_fields

# ---- limits on untrusted input (also enforced when writing, so everything written can be read back) -----------
MAX_NODES: Final = 1 << 24  # nodes in one graph
MAX_SOURCES: Final = 1 << 20  # sources of one node
MAX_TABLE: Final = 1 << 16  # entries of the op / dtype / enum / record tables
MAX_STRING: Final = 1 << 26  # bytes of one string (rendered program sources can be large)
MAX_TUPLE: Final = 1 << 20  # items of one tuple
MAX_DEPTH: Final = 64  # nesting of tuples and records inside one argument
MAX_INT_BITS: Final = 4096  # magnitude of an integer (the index dtype is unbounded, but not infinite)
MAX_RECORD_FIELDS: Final = 64
_MAX_INT_VARINT: Final = (MAX_INT_BITS + 1 + 6) // 7  # bytes of the zigzag varint of the largest int
_MAX_COUNT_VARINT: Final = 10  # bytes of a varint holding a count or an index (< 2**70)

# ---- value tags ----------------------------------------------------------------------------------------------
TAG_NONE: Final = 0
TAG_FALSE: Final = 1
TAG_TRUE: Final = 2
TAG_INT: Final = 3  # zigzag varint
TAG_FLOAT: Final = 4  # 8 bytes, IEEE 754 binary64 little-endian: every bit (NaN payloads, -0.0) survives
TAG_STR: Final = 5  # varint length + UTF-8 (surrogatepass, so every Python str round-trips)
TAG_TUPLE: Final = 6  # varint length + items
TAG_DTYPE: Final = 7  # varint index into the dtype table
TAG_ENUM: Final = 8  # varint index into the enum table
TAG_RECORD: Final = 9  # varint index into the record table, varint field count, fields in record_fields order

# dtype table entry kinds
_DT_SCALAR: Final = 0  # name
_DT_VECTOR: Final = 1  # name, lane count
_DT_POINTER: Final = 2  # base (a scalar or vector entry inline), zigzag size, address space name

# The enum classes an argument may hold, by the class name stored in the blob.
ENUM_TYPES: Final[dict[str, type[enum.Enum]]] = {"Ops": Ops, "AxisType": AxisType, "OptOps": OptOps}
_ENUM_CLASSES: Final = frozenset(ENUM_TYPES.values())
SCALAR_DTYPES: Final[dict[str, DType]] = {dt.name: dt for dt in (*dtypes.all(), dtypes.void, dtypes.index)}
_FLOAT: Final = struct.Struct("<d")
_FIELDS_CACHE: dict[type[Any], tuple[str, ...]] = {}


def fields_of(cls: type[Any]) -> tuple[str, ...]:
    """`record_fields(cls)`, cached: records are encoded once per node and the dataclass walk is not free."""
    found = _FIELDS_CACHE.get(cls)
    if found is None:
        found = _FIELDS_CACHE[cls] = record_fields(cls)
    return found


def record_name_of(value: Any) -> str | None:
    """The registered record name of `value`'s type, or None when it is not a registered record."""
    name = getattr(type(value), "record_name", None)
    if isinstance(name, str) and RECORD_TYPES.get(name) is type(value):
        return name
    return None


# ---- writing -------------------------------------------------------------------------------------------------
def write_uvarint(out: bytearray, n: int) -> None:
    """Append `n >= 0` as a LEB128 varint (7 bits a byte, low first, high bit = more bytes follow)."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_zigzag(out: bytearray, n: int) -> None:
    """Append a signed int: zigzag maps 0, -1, 1, -2, ... to 0, 1, 2, 3, ... so small magnitudes stay short."""
    write_uvarint(out, 2 * n if n >= 0 else -2 * n - 1)


def write_str(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_STRING:
        raise ValueError(f"string of {len(raw)} bytes is longer than MAX_STRING={MAX_STRING}: {text[:40]!r}...")
    write_uvarint(out, len(raw))
    out += raw


def _write_dtype_entry(out: bytearray, dt: DType) -> None:
    if isinstance(dt, PtrDType):
        out.append(_DT_POINTER)
        _write_dtype_entry(out, dt.base)
        write_zigzag(out, dt.size)
        write_str(out, dt.addrspace.value)
    elif dt.count > 1:
        out.append(_DT_VECTOR)
        write_str(out, dt.name)
        write_uvarint(out, dt.count)
    else:
        out.append(_DT_SCALAR)
        write_str(out, dt.name)


class TableWriter:
    """Encodes argument values and collects the tables they refer to; the tables are written in front of the data
    once everything is encoded (`write_tables`)."""

    def __init__(self) -> None:
        self.ops: dict[Ops, int] = {}
        self.dtypes: dict[DType, int] = {}
        self.enums: dict[enum.Enum, int] = {}
        self.records: dict[str, int] = {}

    def op_index(self, op: Ops) -> int:
        found = self.ops.get(op)
        if found is None:
            found = self.ops[op] = len(self.ops)
        return found

    def dtype_index(self, dt: DType) -> int:
        found = self.dtypes.get(dt)
        if found is None:
            if isinstance(dt, PtrDType) and isinstance(dt.size, int) and dt.size.bit_length() > 64:
                raise ValueError(f"pointer dtype {dt!r}: size does not fit in 64 bits")
            found = self.dtypes[dt] = len(self.dtypes)
        return found

    def write(self, out: bytearray, value: Any, depth: int = 0) -> None:
        """Append one argument value. Raises TypeError/ValueError naming a value this format cannot hold."""
        kind = type(value)
        if value is None:
            out.append(TAG_NONE)
        elif kind is bool:
            out.append(TAG_TRUE if value else TAG_FALSE)
        elif kind is int:
            if value.bit_length() > MAX_INT_BITS:
                raise ValueError(f"integer argument of {value.bit_length()} bits is larger than "
                                 f"MAX_INT_BITS={MAX_INT_BITS}")
            out.append(TAG_INT)
            write_zigzag(out, value)
        elif kind is float:
            out.append(TAG_FLOAT)
            out += _FLOAT.pack(value)
        elif kind is str:
            out.append(TAG_STR)
            write_str(out, value)
        elif kind is tuple:
            if depth >= MAX_DEPTH:
                raise ValueError(f"argument nested deeper than MAX_DEPTH={MAX_DEPTH}")
            if len(value) > MAX_TUPLE:
                raise ValueError(f"tuple argument of {len(value)} items is longer than MAX_TUPLE={MAX_TUPLE}")
            out.append(TAG_TUPLE)
            write_uvarint(out, len(value))
            for item in value:
                self.write(out, item, depth + 1)
        elif isinstance(value, DType):
            out.append(TAG_DTYPE)
            write_uvarint(out, self.dtype_index(value))
        elif kind in _ENUM_CLASSES:
            found = self.enums.get(value)
            if found is None:
                found = self.enums[value] = len(self.enums)
            out.append(TAG_ENUM)
            write_uvarint(out, found)
        else:
            name = record_name_of(value)
            if name is None:
                raise TypeError(f"cannot serialize an argument of type {kind.__name__} ({value!r}): arguments are "
                                "None, bool, int, float, str, tuples of these, DType, an Ops/AxisType/OptOps member "
                                "or a registered record (plygrad.ir.records.RECORD_TYPES)")
            if depth >= MAX_DEPTH:
                raise ValueError(f"argument nested deeper than MAX_DEPTH={MAX_DEPTH}")
            found = self.records.get(name)
            if found is None:
                found = self.records[name] = len(self.records)
            names = fields_of(kind)
            out.append(TAG_RECORD)
            write_uvarint(out, found)
            write_uvarint(out, len(names))
            for field_name in names:
                self.write(out, getattr(value, field_name), depth + 1)

    def write_tables(self, out: bytearray) -> None:
        """Append the op, dtype, enum and record tables (each: count, then entries in index order)."""
        for table in (self.ops, self.dtypes, self.enums, self.records):
            if len(table) > MAX_TABLE:
                raise ValueError(f"{len(table)} distinct table entries exceed MAX_TABLE={MAX_TABLE}")
        write_uvarint(out, len(self.ops))
        for op in self.ops:
            write_str(out, op.name)
        write_uvarint(out, len(self.dtypes))
        for dt in self.dtypes:
            _write_dtype_entry(out, dt)
        write_uvarint(out, len(self.enums))
        for member in self.enums:
            write_str(out, type(member).__name__)
            write_str(out, member.name)
        write_uvarint(out, len(self.records))
        for name in self.records:
            write_str(out, name)


# ---- reading -------------------------------------------------------------------------------------------------
def read_uvarint(data: bytes, pos: int, max_bytes: int = _MAX_COUNT_VARINT) -> tuple[int, int]:
    """Read a varint at `pos`; returns (value, position after it). Rejects over-long and non-minimal encodings."""
    if pos >= len(data):
        raise IRDecodeError("unexpected end of data: a varint was expected", pos)
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    start = pos
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= len(data):
            raise IRDecodeError("unexpected end of data inside a varint", pos)
        if pos - start >= max_bytes:
            raise IRDecodeError(f"varint longer than {max_bytes} bytes", start)
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    if b == 0:
        raise IRDecodeError("non-minimal varint (a trailing zero byte)", start)
    return result, pos


def read_count(data: bytes, pos: int, what: str, limit: int, item_bytes: int = 1) -> tuple[int, int]:
    """Read a count of items that each take at least `item_bytes` bytes: it must be <= `limit` and must fit in
    the bytes left, so whatever the count claims, allocating that many items is bounded by the input size."""
    start = pos
    n, pos = read_uvarint(data, pos)
    if n > limit:
        raise IRDecodeError(f"{what} count {n} exceeds the limit {limit}", start)
    if n * item_bytes > len(data) - pos:
        raise IRDecodeError(f"{what} count {n} is more than the {len(data) - pos} bytes left can hold", start)
    return n, pos


def read_str(data: bytes, pos: int, what: str) -> tuple[str, int]:
    n, pos = read_count(data, pos, f"{what} length", MAX_STRING)
    try:
        return data[pos:pos + n].decode("utf-8", "surrogatepass"), pos + n
    except UnicodeDecodeError as e:
        raise IRDecodeError(f"{what} is not valid UTF-8 ({e.reason})", pos + e.start) from None


def _read_dtype_entry(data: bytes, pos: int, allow_pointer: bool) -> tuple[DType, int]:
    start = pos
    if pos >= len(data):
        raise IRDecodeError("unexpected end of data: a dtype entry was expected", pos)
    kind = data[pos]
    pos += 1
    if kind == _DT_POINTER and allow_pointer:
        base, pos = _read_dtype_entry(data, pos, allow_pointer=False)
        zz, pos = read_uvarint(data, pos)
        size = zz >> 1 if not zz & 1 else -(zz >> 1) - 1
        space_name, pos = read_str(data, pos, "address space")
        try:
            space = AddrSpace(space_name)
        except ValueError:
            raise IRDecodeError(f"unknown address space {space_name!r}; known: "
                                f"{[a.value for a in AddrSpace]}", start) from None
        try:
            return base.ptr(size, space), pos
        except ValueError as e:
            raise IRDecodeError(f"bad pointer dtype: {e}", start) from None
    if kind not in (_DT_SCALAR, _DT_VECTOR):
        raise IRDecodeError(f"unknown dtype entry kind {kind}", start)
    name, pos = read_str(data, pos, "dtype name")
    scalar = SCALAR_DTYPES.get(name)
    if scalar is None:
        raise IRDecodeError(f"unknown dtype name {name!r}; known: {sorted(SCALAR_DTYPES)}", start)
    if kind == _DT_SCALAR:
        return scalar, pos
    count, pos = read_uvarint(data, pos)
    if not 1 < count <= MAX_VECTOR_WIDTH:
        raise IRDecodeError(f"vector dtype {name}x{count}: lane count must be 2..{MAX_VECTOR_WIDTH}", start)
    try:
        return scalar.vec(count), pos
    except ValueError as e:
        raise IRDecodeError(f"bad vector dtype: {e}", start) from None


class Tables:
    """The tables of one blob, resolved to Python objects; `read_value` decodes values that refer into them."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        n, pos = read_count(data, pos, "op table", MAX_TABLE)
        self.ops: list[Ops] = []
        for _ in range(n):
            at = pos
            name, pos = read_str(data, pos, "op name")
            op = Ops.__members__.get(name)
            if op is None:
                raise IRDecodeError(f"unknown op name {name!r}: written by a newer opset, or corrupt", at)
            self.ops.append(op)
        n, pos = read_count(data, pos, "dtype table", MAX_TABLE)
        self.dtypes: list[DType] = []
        for _ in range(n):
            dt, pos = _read_dtype_entry(data, pos, allow_pointer=True)
            self.dtypes.append(dt)
        n, pos = read_count(data, pos, "enum table", MAX_TABLE)
        self.enums: list[enum.Enum] = []
        for _ in range(n):
            at = pos
            cls_name, pos = read_str(data, pos, "enum class name")
            member_name, pos = read_str(data, pos, "enum member name")
            cls = ENUM_TYPES.get(cls_name)
            member = cls.__members__.get(member_name) if cls is not None else None
            if member is None:
                raise IRDecodeError(f"unknown enum member {cls_name}.{member_name}; enum classes: "
                                    f"{sorted(ENUM_TYPES)}", at)
            self.enums.append(member)
        n, pos = read_count(data, pos, "record table", MAX_TABLE)
        self.records: list[type[Any]] = []
        for _ in range(n):
            at = pos
            name, pos = read_str(data, pos, "record name")
            cls = RECORD_TYPES.get(name)
            if cls is None:
                raise IRDecodeError(f"unknown record type {name!r}; known: {sorted(RECORD_TYPES)}", at)
            self.records.append(cls)
        self.end = pos

    def read_value(self, pos: int, depth: int = 0) -> tuple[Any, int]:
        """Decode the value at `pos`; returns (value, position after it)."""
        data = self.data
        if pos >= len(data):
            raise IRDecodeError("unexpected end of data: an argument value was expected", pos)
        tag = data[pos]
        start = pos
        pos += 1
        if tag == TAG_NONE:
            return None, pos
        if tag == TAG_FALSE:
            return False, pos
        if tag == TAG_TRUE:
            return True, pos
        if tag == TAG_INT:
            zz, pos = read_uvarint(data, pos, _MAX_INT_VARINT)
            value = zz >> 1 if not zz & 1 else -(zz >> 1) - 1
            if value.bit_length() > MAX_INT_BITS:
                raise IRDecodeError(f"integer of {value.bit_length()} bits exceeds MAX_INT_BITS={MAX_INT_BITS}",
                                    start)
            return value, pos
        if tag == TAG_FLOAT:
            if pos + 8 > len(data):
                raise IRDecodeError("unexpected end of data inside a float", pos)
            return _FLOAT.unpack_from(data, pos)[0], pos + 8
        if tag == TAG_STR:
            return read_str(data, pos, "string")
        if tag == TAG_TUPLE:
            if depth >= MAX_DEPTH:
                raise IRDecodeError(f"argument nested deeper than MAX_DEPTH={MAX_DEPTH}", start)
            n, pos = read_count(data, pos, "tuple", MAX_TUPLE)
            items = []
            for _ in range(n):
                item, pos = self.read_value(pos, depth + 1)
                items.append(item)
            return tuple(items), pos
        if tag == TAG_DTYPE:
            i, pos = read_uvarint(data, pos)
            if i >= len(self.dtypes):
                raise IRDecodeError(f"dtype index {i} is outside the dtype table of {len(self.dtypes)}", start)
            return self.dtypes[i], pos
        if tag == TAG_ENUM:
            i, pos = read_uvarint(data, pos)
            if i >= len(self.enums):
                raise IRDecodeError(f"enum index {i} is outside the enum table of {len(self.enums)}", start)
            return self.enums[i], pos
        if tag == TAG_RECORD:
            return self._read_record(pos, start, depth)
        raise IRDecodeError(f"unknown argument tag {tag}", start)

    def _read_record(self, pos: int, start: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise IRDecodeError(f"argument nested deeper than MAX_DEPTH={MAX_DEPTH}", start)
        i, pos = read_uvarint(self.data, pos)
        if i >= len(self.records):
            raise IRDecodeError(f"record index {i} is outside the record table of {len(self.records)}", start)
        cls = self.records[i]
        names = fields_of(cls)
        n, pos = read_count(self.data, pos, f"{cls.__name__} field", MAX_RECORD_FIELDS)
        if n > len(names):
            # a newer minor version may add fields at the end; this reader cannot know what they mean
            raise IRDecodeError(f"{cls.__name__} record has {n} fields; this reader knows {len(names)}: "
                                f"{names}", start)
        values = []
        for _ in range(n):
            value, pos = self.read_value(pos, depth + 1)
            values.append(value)
        try:
            # fields missing at the end (written by an older minor version) take their defaults
            return cls(*values), pos
        except Exception as e:  # a record's own validation (e.g. Target.__post_init__) rejected the fields
            raise IRDecodeError(f"invalid {cls.__name__} record: {type(e).__name__}: {e}", start) from None
