"""Fuzzing the readers (docs/design.md §3, "untrusted bytes"): valid graphs round-trip to the identical node, and any
other input, random or a mutated valid encoding, raises IRDecodeError or IRVersionError and nothing else. Plus
a direct test of every hard limit, and graphs deeper than the recursion limit."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import ir_strategies as strategies  # conftest.py puts this folder on sys.path
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plygrad.ir import argcodec
from plygrad.ir.argcodec import TableWriter, write_uvarint, write_zigzag
from plygrad.ir.dtype import dtypes
from plygrad.ir.errors import IRDecodeError, IRVersionError
from plygrad.ir.ops import Ops
from plygrad.ir.records import BufferRef, KernelInfo
from plygrad.ir.serialize import HEADER_SIZE, MAGIC, deserialize, deserialize_target, serialize, serialize_target
from plygrad.ir.stage import Stage
from plygrad.ir.text import from_text, to_text
from plygrad.ir.uop import UOp, arg_key

# example counts come from the hypothesis profile (conftest.py); only the health checks are relaxed here, since
# building whole graphs per example is slow by hypothesis' standards but not a problem
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def decodes_or_rejects(decode: Callable[[Any], Any], data: Any) -> Any:
    """Run a reader on hostile input: only IRDecodeError/IRVersionError may escape, and never the decoder's
    safety net (an "internal" error means some check is missing)."""
    try:
        return decode(data)
    except IRVersionError:
        return None
    except IRDecodeError as e:
        assert "internal" not in str(e), str(e)
        assert 0 <= e.offset <= len(data), f"offset {e.offset} outside the input of {len(data)}"
        return None


# ---- valid graphs round-trip -------------------------------------------------------------------------------------
@FUZZ
@given(strategies.graphs())
def test_valid_graphs_round_trip_binary_and_text(graph_and_stage: tuple[UOp, Stage]) -> None:
    graph, stage = graph_and_stage
    data = serialize(graph, stage)
    assert deserialize(data, stage) is graph
    assert from_text(to_text(graph, stage), stage) is graph


@FUZZ
@given(strategies.arg_values())
def test_any_argument_value_round_trips(value: Any) -> None:
    node = UOp(Ops.NOOP, dtypes.void, (), value)  # NOOP takes no argument: these skip verification
    back = deserialize(serialize(node), verify=False)
    assert back is node and arg_key(back.arg) == arg_key(value)
    assert from_text(to_text(node), verify=False) is node


@FUZZ
@given(strategies.targets())
def test_targets_round_trip(target: Any) -> None:
    assert deserialize_target(serialize_target(target)) == target


# ---- hostile bytes -----------------------------------------------------------------------------------------------
@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_are_rejected_cleanly(data: bytes) -> None:
    decodes_or_rejects(deserialize, data)
    decodes_or_rejects(deserialize_target, data)


@FUZZ
@given(st.binary(max_size=300))
def test_random_payloads_behind_a_valid_header_are_rejected_cleanly(payload: bytes) -> None:
    header = serialize(UOp(Ops.NOOP))[:HEADER_SIZE]
    decodes_or_rejects(deserialize, header + payload)
    decodes_or_rejects(lambda d: deserialize(d, verify=False), header + payload)


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with a few bytes flipped, set, inserted or deleted, or cut short."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif kind == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and buf:
            del buf[at:at + draw(st.integers(1, 4))]
        else:
            del buf[at:]
    return bytes(buf)


@FUZZ
@given(strategies.graphs(), st.data())
def test_mutated_encodings_decode_to_valid_graphs_or_are_rejected(graph_and_stage: tuple[UOp, Stage],
                                                                  data: st.DataObject) -> None:
    graph, stage = graph_and_stage
    mutated = data.draw(mutations(serialize(graph, stage)))
    result = decodes_or_rejects(deserialize, mutated)
    if result is not None:  # it decoded: then it passed verification, and it round-trips
        assert deserialize(serialize(result, stage)) is result


@FUZZ
@given(strategies.targets(), st.data())
def test_mutated_targets_are_rejected_cleanly(target: Any, data: st.DataObject) -> None:
    decodes_or_rejects(deserialize_target, data.draw(mutations(serialize_target(target))))


# ---- hostile text ------------------------------------------------------------------------------------------------
@FUZZ
@given(st.text(max_size=200))
def test_random_text_is_rejected_cleanly(text: str) -> None:
    decodes_or_rejects(from_text, "plygrad-ir format 1.0 opset 1.0 stage GRAPH\n" + text)
    decodes_or_rejects(from_text, text)


@st.composite
def text_mutations(draw: st.DrawFn, text: str) -> str:
    chars = list(text)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(chars) - 1, 0)))
        kind = draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        if kind == "set" and chars:
            chars[at] = draw(st.sampled_from([*'()%,="\\#.-x0159ep \n', draw(st.characters())]))
        elif kind == "insert":
            chars[at:at] = list(draw(st.text(min_size=1, max_size=4)))
        elif kind == "delete" and chars:
            del chars[at:at + draw(st.integers(1, 6))]
        else:
            del chars[at:]
    return "".join(chars)


@FUZZ
@given(strategies.graphs(), st.data())
def test_mutated_text_decodes_to_valid_graphs_or_is_rejected(graph_and_stage: tuple[UOp, Stage],
                                                            data: st.DataObject) -> None:
    graph, stage = graph_and_stage
    result = decodes_or_rejects(from_text, data.draw(text_mutations(to_text(graph, stage))))
    if result is not None:
        assert from_text(to_text(result, stage)) is result


# ---- every limit, directly ---------------------------------------------------------------------------------------
def noop_blob(arg_bytes: bytes, tables: TableWriter | None = None) -> bytes:
    """A one-node graph (a NOOP) whose argument is `arg_bytes`, encoded by hand."""
    tables = tables or TableWriter()
    tables.op_index(Ops.NOOP)
    tables.dtype_index(dtypes.void)
    out = bytearray(serialize(UOp(Ops.NOOP))[:HEADER_SIZE])
    tables.write_tables(out)
    write_uvarint(out, 1)
    out += b"\x01\x00" * 3 + b"\x01"  # op, dtype and count columns (one entry each); an empty source column
    return bytes(out) + arg_bytes


def rejects(data: bytes, message: str) -> None:
    with pytest.raises(IRDecodeError, match=message) as info:
        deserialize(data, verify=False)
    assert "internal" not in str(info.value)


def uvarint(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def test_hand_encoded_blob_helper_is_right() -> None:
    assert deserialize(noop_blob(b"\x00"), verify=False) is UOp(Ops.NOOP)
    assert deserialize(noop_blob(b"\x06\x01\x03\x02"), verify=False) is UOp(Ops.NOOP, arg=(1,))


def test_nesting_limit() -> None:
    at_limit = b"\x06\x01" * argcodec.MAX_DEPTH + b"\x00"
    assert deserialize(noop_blob(at_limit), verify=False).arg is not None
    rejects(noop_blob(b"\x06\x01" * (argcodec.MAX_DEPTH + 1) + b"\x00"), "deeper than MAX_DEPTH")
    rejects(noop_blob(b"\x06\x01" * 200_000 + b"\x00"), "deeper than MAX_DEPTH")  # no RecursionError
    deep: Any = None
    for _ in range(argcodec.MAX_DEPTH + 1):
        deep = (deep,)
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        serialize(UOp(Ops.NOOP, dtypes.void, (), deep))


def test_counts_are_bounded_by_limits_and_by_the_bytes_left() -> None:
    rejects(noop_blob(b"\x06" + uvarint(1 << 60)), "exceeds the limit")
    rejects(noop_blob(b"\x06" + uvarint(argcodec.MAX_TUPLE)), "more than the .* bytes left")
    rejects(noop_blob(b"\x05" + uvarint(1 << 40)), "exceeds the limit")
    rejects(noop_blob(b"\x05" + uvarint(1000) + b"abc"), "more than the 3 bytes left")
    header = serialize(UOp(Ops.NOOP))[:HEADER_SIZE]
    rejects(header + uvarint(argcodec.MAX_TABLE + 1), "op table count .* exceeds the limit")
    rejects(header + b"\x00\x00\x00\x00" + uvarint(argcodec.MAX_NODES + 1), "node count .* exceeds the limit")
    rejects(header + b"\x00\x00\x00\x00" + uvarint(1000) + bytes(100), "node count 1000 is more than")


def test_integer_and_varint_limits() -> None:
    rejects(noop_blob(b"\x03" + b"\xff" * 2000 + b"\x01"), "varint longer than")
    too_big = bytearray(b"\x03")
    write_zigzag(too_big, 1 << argcodec.MAX_INT_BITS)
    rejects(noop_blob(bytes(too_big)), "exceeds MAX_INT_BITS")
    rejects(noop_blob(b"\x03\x80\x00"), "non-minimal varint")
    rejects(noop_blob(b"\x02" + uvarint(0)), "trailing garbage")


def test_sources_limit() -> None:
    tables = TableWriter()
    tables.op_index(Ops.NOOP)
    tables.dtype_index(dtypes.void)
    out = bytearray(serialize(UOp(Ops.NOOP))[:HEADER_SIZE])
    tables.write_tables(out)
    write_uvarint(out, 1)
    out += b"\x01\x00\x01\x00\x04" + struct.pack("<I", argcodec.MAX_SOURCES + 1)
    rejects(bytes(out), "more than MAX_SOURCES")


@pytest.mark.parametrize(("arg_bytes", "message"), [
    (b"\x07\x05", "dtype index 5 is outside the dtype table"),
    (b"\x08\x00", "enum index 0 is outside the enum table"),
    (b"\x09\x00", "record index 0 is outside the record table"),
    (b"\x0a", "unknown argument tag 10"),
    (b"\x04\x00\x00", "inside a float"),
    (b"\x05\x02\xff\xfe", "not valid UTF-8"),
    (b"", "argument values need at least 1 bytes"),
    (b"\x06\x02\x06\x00", "end of data"),
])
def test_bad_references_and_tags(arg_bytes: bytes, message: str) -> None:
    rejects(noop_blob(arg_bytes), message)


def test_record_field_count_limit() -> None:
    tables = TableWriter()
    tables.write(bytearray(), BufferRef(0, "CPU", 1))  # puts BufferRef in the record table
    rejects(noop_blob(b"\x09\x00" + uvarint(4) + b"\x00" * 4, tables), "BufferRef record has 4 fields")
    rejects(noop_blob(b"\x09\x00" + uvarint(1) + b"\x03\x00", tables), "invalid BufferRef record")


def test_records_written_by_an_older_minor_take_defaults_for_missing_fields() -> None:
    tables = TableWriter()
    tables.write(bytearray(), KernelInfo())
    one_field = b"\x09\x00\x01" + b"\x05\x01k"  # record 0 with 1 field: the str "k"
    node = deserialize(noop_blob(one_field, tables), verify=False)
    assert node.arg == KernelInfo("k", ())


def test_bad_column_width() -> None:
    blob = bytearray(noop_blob(b"\x00"))
    blob[-8] = 3  # the op column's width byte
    rejects(bytes(blob), "widths are 1, 2 or 4")


def test_hundred_thousand_deep_chain_round_trips() -> None:
    x = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("x", 0, 10))
    one = UOp(Ops.CONST, dtypes.index, (), 1)
    for _ in range(100_000):
        x = UOp(Ops.ADD, dtypes.index, (x, one))
    data = serialize(x)
    assert deserialize(data, verify=False) is x
    assert deserialize(data) is x  # verification walks it too, without recursion


def test_magic_constant() -> None:
    assert MAGIC == b"\x89PLYIR\r\n"
