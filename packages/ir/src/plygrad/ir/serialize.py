"""The binary form of the IR: what crosses every layer boundary (docs/design.md §2-§3).

A header (magic, format and opset versions, payload kind, stage), tables of the names the graph uses, then the
graph as columns of fixed-width entries (op, dtype, source count; sources; arguments) in topological order, so a
shared subgraph stays shared and a reader decodes a whole column with one C-level call. The byte layout and the
contract for untrusted input are in docs/ir.md §8; argument values are encoded by argcodec.py.
"""

from __future__ import annotations

import enum
import re
import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import chain, compress, count, repeat
from operator import attrgetter, is_not
from typing import Any, Final

from plygrad.ir.argcodec import (
    MAX_NODES,
    MAX_SOURCES,
    TAG_FLOAT,
    TAG_INT,
    TAG_NONE,
    Tables,
    TableWriter,
    read_count,
    write_uvarint,
)
from plygrad.ir.errors import IRDecodeError, IRVerifyError, IRVersionError
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target
from plygrad.ir.uop import UOp
from plygrad.ir.version import FORMAT_VERSION, OPSET_VERSION, readable

MAGIC: Final = b"\x89PLYIR\r\n"
_HEADER: Final = struct.Struct("<8sHHHHBB")
_FLOAT: Final = struct.Struct("<d")
_OP, _DTYPE, _SRC, _ARG = attrgetter("op"), attrgetter("dtype"), attrgetter("src"), attrgetter("arg")
HEADER_SIZE: Final = _HEADER.size
_BIG_ENDIAN: Final = sys.byteorder == "big"
_ARRAY_CODES: Final = {2: "H", 4: "I"}
assert array("H").itemsize == 2 and array("I").itemsize == 4
assert TAG_NONE == 0  # serialize writes runs of None arguments as zero bytes


class PayloadKind(enum.IntEnum):
    """What a blob holds; stored in the header so a reader can refuse the wrong kind with a clear message."""

    GRAPH = 0
    TARGET = 1


# ---- writing -------------------------------------------------------------------------------------------------
def _header(kind: PayloadKind, stage: Stage) -> bytes:
    return _HEADER.pack(MAGIC, *FORMAT_VERSION, *OPSET_VERSION, kind, stage)


def _column(values: list[int]) -> bytes:
    """One width byte, then `values` as fixed-width little-endian unsigned ints of the narrowest width that fits."""
    top = max(values, default=0)
    if top < 0x100:
        return b"\x01" + bytes(values)
    width = 2 if top < 0x10000 else 4
    packed = array(_ARRAY_CODES[width], values)
    if _BIG_ENDIAN:
        packed.byteswap()
    return bytes((width,)) + packed.tobytes()


def serialize(uop: UOp, stage: Stage = Stage.GRAPH) -> bytes:
    """The graph reachable from `uop`, as bytes. `stage` is recorded in the header (not checked here: writing
    is meant to be cheap; the reader verifies). Raises TypeError/ValueError for an argument it cannot encode."""
    if not isinstance(uop, UOp):
        raise TypeError(f"serialize() takes a UOp, got {type(uop).__name__}")
    stage = Stage(stage)
    nodes = uop.toposort
    if len(nodes) > MAX_NODES:
        raise ValueError(f"graph of {len(nodes)} nodes exceeds MAX_NODES={MAX_NODES}")
    # Whole columns at once through C-level map/dict calls: a Python loop per node and field would dominate.
    index = dict(zip(nodes, range(len(nodes)), strict=True))
    tables = TableWriter()
    node_ops = list(map(_OP, nodes))
    for op in dict.fromkeys(node_ops):  # distinct ops, in first-use order
        tables.op_index(op)
    node_dtypes = list(map(_DTYPE, nodes))
    for dt in dict.fromkeys(node_dtypes):
        tables.dtype_index(dt)
    op_col = list(map(tables.ops.__getitem__, node_ops))
    dtype_col = list(map(tables.dtypes.__getitem__, node_dtypes))
    node_srcs = list(map(_SRC, nodes))
    count_col = list(map(len, node_srcs))
    if max(count_col) > MAX_SOURCES:
        raise ValueError(f"a node has {max(count_col)} sources, more than MAX_SOURCES={MAX_SOURCES}")
    src_col = list(map(index.__getitem__, chain.from_iterable(node_srcs)))
    args = bytearray()
    write_value = tables.write
    pack_float = _FLOAT.pack
    node_args = list(map(_ARG, nodes))
    done = 0  # arguments written so far
    # Most nodes (ALU ops) take None, whose encoding is the single byte TAG_NONE == 0: the loop visits only the
    # others (found at C level) and writes each run of Nones before one as that many zero bytes.
    for i in compress(count(), map(is_not, node_args, repeat(None))):
        args += bytes(i - done)
        done = i + 1
        arg = node_args[i]
        # inline the commonest arguments (small ints, floats); TableWriter.write encodes them the same way
        kind = type(arg)
        if kind is int and -64 <= arg < 64:
            args.append(TAG_INT)
            args.append(2 * arg if arg >= 0 else -2 * arg - 1)
            continue
        if kind is float:
            args.append(TAG_FLOAT)
            args += pack_float(arg)
            continue
        try:
            write_value(args, arg)
        except (TypeError, ValueError) as e:
            raise type(e)(f"cannot serialize the argument of a {nodes[i].op.name} node: {e}") from None
    args += bytes(len(nodes) - done)
    out = bytearray(_header(PayloadKind.GRAPH, stage))
    tables.write_tables(out)
    write_uvarint(out, len(nodes))
    for column in (op_col, dtype_col, count_col, src_col):
        out += _column(column)
    out += args
    return bytes(out)


def serialize_target(target: Target) -> bytes:
    """A `Target` as bytes, with the same header and value encoding as graphs (payload kind TARGET)."""
    if not isinstance(target, Target):
        raise TypeError(f"serialize_target() takes a Target, got {type(target).__name__}")
    tables = TableWriter()
    body = bytearray()
    tables.write(body, target)
    out = bytearray(_header(PayloadKind.TARGET, Stage.GRAPH))
    tables.write_tables(out)
    return bytes(out + body)


# ---- reading -------------------------------------------------------------------------------------------------
def read_header(data: bytes) -> tuple[PayloadKind, Stage]:
    """Check magic and versions; returns the payload kind and stage. Shared with the text form's version rule."""
    if len(data) < len(MAGIC) or data[:len(MAGIC)] != MAGIC:
        raise IRDecodeError(f"not serialized plygrad IR: the data does not start with the magic {MAGIC!r} "
                            f"(it starts with {bytes(data[:len(MAGIC)])!r})", 0)
    if len(data) < HEADER_SIZE:
        raise IRDecodeError(f"truncated header: {len(data)} bytes, a header has {HEADER_SIZE}", len(data))
    _, fmt_major, fmt_minor, ops_major, ops_minor, kind, stage = _HEADER.unpack_from(data, 0)
    check_versions((fmt_major, fmt_minor), (ops_major, ops_minor))
    if kind not in PayloadKind._value2member_map_:
        raise IRDecodeError(f"unknown payload kind {kind}; known: {[k.name for k in PayloadKind]}", 16)
    if stage not in Stage._value2member_map_:
        raise IRDecodeError(f"unknown stage {stage}; known: {[s.name for s in Stage]}", 17)
    return PayloadKind(kind), Stage(stage)


def check_versions(found_format: tuple[int, int], found_opset: tuple[int, int]) -> None:
    """Raise IRVersionError unless this reader can read data of these format and opset versions."""
    for what, found, supported in (("format", found_format, FORMAT_VERSION), ("opset", found_opset, OPSET_VERSION)):
        if not readable(found, supported):
            raise IRVersionError(f"serialized IR has {what} version {found[0]}.{found[1]}; this reader supports "
                                 f"{what} {supported[0]}.0 to {supported[0]}.{supported[1]} (same major, older or "
                                 f"equal minor): upgrade plygrad-ir, or re-serialize with a matching version")


def _read_column(data: bytes, pos: int, count: int, what: str) -> tuple[Sequence[int], int, int]:
    """Read a column of `count` entries; returns (entries, entry width, position after it)."""
    if pos >= len(data):
        raise IRDecodeError(f"unexpected end of data: the {what} column was expected", pos)
    width = data[pos]
    if width not in (1, 2, 4):
        raise IRDecodeError(f"{what} column has width {width}; widths are 1, 2 or 4", pos)
    pos += 1
    size = count * width
    if size > len(data) - pos:
        raise IRDecodeError(f"{what} column of {count} entries needs {size} bytes, only {len(data) - pos} are left",
                            pos)
    raw = data[pos:pos + size]
    if width == 1:
        return raw, width, pos + size
    values = array(_ARRAY_CODES[width])
    values.frombytes(raw)
    if _BIG_ENDIAN:
        values.byteswap()
    return values, width, pos + size


def deserialize(data: bytes, stage: Stage | None = None, *, verify: bool = True) -> UOp:
    """Decode bytes written by `serialize`. The input may be hostile: anything that is not a valid graph raises
    IRDecodeError (with the byte offset) or IRVersionError, and nothing else.

    `stage`: the stage the caller expects (IRDecodeError if the header says another). `verify`: run the stage's
    verifier on the result (IRVerifyError is reported as IRDecodeError); turn it off only for trusted bytes.
    """
    data = bytes(data) if not isinstance(data, bytes) else data
    kind, found_stage = read_header(data)
    if kind is not PayloadKind.GRAPH:
        raise IRDecodeError(f"this blob holds a {kind.name.lower()}, not a graph; use deserialize_{kind.name.lower()}",
                            16)
    if stage is not None and Stage(stage) is not found_stage:
        raise IRDecodeError(f"expected a graph of stage {Stage(stage).name}, but the data holds stage "
                            f"{found_stage.name}", 17)
    try:
        root, nodes, node_offset, walk_order = _decode_graph(data, check_walk_order=verify)
    except (IRDecodeError, IRVersionError):
        raise
    except Exception as e:  # a safety net: the checks above should leave nothing here; tests look for "internal"
        raise IRDecodeError(f"internal decoder error on malformed data: {type(e).__name__}: {e}", len(data)) from e
    if verify:
        from plygrad.ir.verify import verify as verify_graph
        from plygrad.ir.verify import verify_ordered

        try:
            if walk_order:
                verify_ordered(nodes, found_stage)
            else:
                verify_graph(root, found_stage)
        except IRVerifyError as e:
            bad = offending_node(e, root)
            offset = node_offset(_index_of(nodes, bad)) if bad is not None else node_offset(0)
            raise IRDecodeError(f"decoded graph fails {found_stage.name} verification: {e}", offset) from e
        except Exception as e:  # a verifier crash on hostile input is still only a decode error to the caller
            raise IRDecodeError(f"internal verifier error on the decoded graph: {type(e).__name__}: {e}",
                                node_offset(0)) from e
    return root


def deserialize_trusted(data: bytes) -> UOp:
    """`deserialize` without verification, for bytes this process wrote itself (pickling a UOp uses it, so any
    node that can be built can be pickled)."""
    return deserialize(data, verify=False)


_VERIFY_POSITION: Final = re.compile(r"[A-Z]+: ([A-Z_0-9]+) #([0-9]{1,9}) ")


def offending_node(error: IRVerifyError, root: UOp) -> UOp | None:
    """The node a verification error is about, to point the decode error at its record: the error's `node`
    attribute if it has one, else the "OP #i" position its message gives in the root's topological order (used
    only when the op at that position matches, since a schedule's walk orders nodes differently)."""
    node = getattr(error, "node", None)
    if isinstance(node, UOp):
        return node
    match = _VERIFY_POSITION.match(str(error))
    if match is not None:
        order = root.toposort
        i = int(match.group(2))
        if i < len(order) and order[i].op.name == match.group(1):
            return order[i]
    return None


def _index_of(nodes: list[UOp], node: UOp) -> int:
    for i, candidate in enumerate(nodes):
        if candidate is node:
            return i
    return 0


def _decode_graph(data: bytes, check_walk_order: bool) -> tuple[UOp, list[UOp], Any, bool]:
    """(root, the node of every record, node_offset(i) -> the byte offset of record i, whether the records are a
    walk order: each node once, each reachable from the root, so `verify_ordered` may take them as they are; only
    found out when `check_walk_order`, else False)."""
    tables = Tables(data, HEADER_SIZE)
    table_ops, table_dtypes = tables.ops, tables.dtypes
    pos = tables.end
    count_at = pos
    n, pos = read_count(data, pos, "node", MAX_NODES, item_bytes=4)  # op, dtype, count and argument bytes
    if n == 0:
        raise IRDecodeError("a graph has at least one node (the root)", count_at)
    op_at = pos
    ops, op_width, pos = _read_column(data, pos, n, "op")
    dtype_at = pos
    dts, _, pos = _read_column(data, pos, n, "dtype")
    counts_at = pos
    counts, _, pos = _read_column(data, pos, n, "source count")

    def node_offset(i: int) -> int:
        return op_at + 1 + i * op_width

    if max(ops) >= len(table_ops):
        raise IRDecodeError(f"op index {max(ops)} is outside the op table of {len(table_ops)}", op_at)
    if max(dts) >= len(table_dtypes):
        raise IRDecodeError(f"dtype index {max(dts)} is outside the dtype table of {len(table_dtypes)}", dtype_at)
    if max(counts) > MAX_SOURCES:
        raise IRDecodeError(f"a node has {max(counts)} sources, more than MAX_SOURCES={MAX_SOURCES}", counts_at)
    srcs_at = pos
    srcs, _, pos = _read_column(data, pos, sum(counts), "source")
    if n > len(data) - pos:
        raise IRDecodeError(f"{n} argument values need at least {n} bytes, only {len(data) - pos} are left", pos)

    nodes: list[UOp] = []
    append = nodes.append
    # UOp has no __init__, so calling __new__ is UOp(...) without type.__call__'s overhead (a tenth of the loop)
    new_uop = UOp.__new__
    read_value, unpack_float = tables.read_value, _FLOAT.unpack_from
    sp = 0  # position in the source column
    try:
        # one pass over the three columns; sources index `nodes`, which holds exactly the nodes before this one,
        # so a forward reference raises IndexError (entries are unsigned: no negative indices)
        for op, dtype, k in zip(map(table_ops.__getitem__, ops), map(table_dtypes.__getitem__, dts), counts,
                                strict=True):
            if k == 0:
                src: tuple[UOp, ...] = ()
            elif k == 1:
                src = (nodes[srcs[sp]],)
            elif k == 2:
                src = (nodes[srcs[sp]], nodes[srcs[sp + 1]])
            else:
                src = tuple([nodes[j] for j in srcs[sp:sp + k]])
            sp += k
            tag = data[pos]
            if tag == TAG_NONE:
                arg = None
                pos += 1
            elif tag == TAG_INT and pos + 1 < len(data) and data[pos + 1] < 0x80:  # a one-byte zigzag varint
                zz = data[pos + 1]
                arg = zz >> 1 if not zz & 1 else -(zz >> 1) - 1
                pos += 2
            elif tag == TAG_INT and pos + 2 < len(data) and 0 < data[pos + 2] < 0x80:  # two bytes (the first >= 0x80)
                zz = (data[pos + 1] & 0x7F) | data[pos + 2] << 7
                arg = zz >> 1 if not zz & 1 else -(zz >> 1) - 1
                pos += 3
            elif tag == TAG_FLOAT and pos + 9 <= len(data):
                arg = unpack_float(data, pos + 1)[0]
                pos += 9
            else:
                arg, pos = read_value(pos)
            append(new_uop(UOp, op, dtype, src, arg))
    except IRDecodeError:
        raise
    except IndexError:
        i = len(nodes)
        if any(j >= i for j in srcs[sp:sp + counts[i]]):
            raise IRDecodeError(f"node {i} refers to a source that is not defined before it (sources are "
                                "written in topological order)", srcs_at) from None
        raise IRDecodeError(f"unexpected end of data in the argument of node {i}", pos) from None
    except Exception as e:  # UOp construction on an odd argument: never let it escape as anything but this
        i = len(nodes)
        raise IRDecodeError(f"node {i} cannot be built: {type(e).__name__}: {e}", node_offset(i)) from None
    if pos != len(data):
        raise IRDecodeError(f"{len(data) - pos} bytes of trailing garbage after the graph", pos)
    # Sources always come before their users here. Records are nodes one to one unless hash-consing merged two
    # records; then, if every record but the last is a source of a later one, every node is reachable from the
    # root (the last unreachable one would be a source of a later, reachable, node). What `serialize` writes passes.
    walk_order = check_walk_order and len(set(srcs)) == n - 1 and len(set(nodes)) == n
    return nodes[-1], nodes, node_offset, walk_order


def deserialize_target(data: bytes) -> Target:
    """Decode bytes written by `serialize_target`; IRDecodeError/IRVersionError on anything else."""
    data = bytes(data) if not isinstance(data, bytes) else data
    kind, _ = read_header(data)
    if kind is not PayloadKind.TARGET:
        raise IRDecodeError(f"this blob holds a {kind.name.lower()}, not a target; use deserialize", 16)
    try:
        tables = Tables(data, HEADER_SIZE)
        value, pos = tables.read_value(tables.end)
    except (IRDecodeError, IRVersionError):
        raise
    except Exception as e:  # a safety net, as in deserialize
        raise IRDecodeError(f"internal decoder error on malformed data: {type(e).__name__}: {e}", len(data)) from e
    if not isinstance(value, Target):
        raise IRDecodeError(f"a target blob must hold a Target record, found {type(value).__name__}", tables.end)
    if pos != len(data):
        raise IRDecodeError(f"{len(data) - pos} bytes of trailing garbage after the target", pos)
    return value
