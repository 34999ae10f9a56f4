"""The binary form (docs/design.md §3): identity round trips, exact floats, sharing, header, version rules, errors."""

from __future__ import annotations

import math
import pickle
import struct
import time

import pytest

from plygrad.ir.argcodec import TableWriter, write_str, write_uvarint
from plygrad.ir.dtype import AddrSpace, dtypes
from plygrad.ir.errors import IRDecodeError, IRVerifyError, IRVersionError
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.serialize import HEADER_SIZE, MAGIC, deserialize, deserialize_target, serialize, serialize_target
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.uop import UOp
from plygrad.ir.version import FORMAT_VERSION, OPSET_VERSION


def bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def from_bits(b: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", b))[0])


def tensor_sink() -> UOp:
    a = UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(0, "CPU", 6))
    b = UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(1, "CPU", 6))
    x = UOp(Ops.RESHAPE, dtypes.float32, (a,), (2, 3))
    y = UOp(Ops.RESHAPE, dtypes.float32, (b,), (2, 3))
    s = UOp(Ops.ADD, dtypes.float32, (x, y))
    r = UOp(Ops.REDUCE, dtypes.float32, (s,), (Ops.ADD, (1,)))
    return UOp(Ops.SINK, dtypes.void, (r, s))


def kernel_sink() -> UOp:
    out = UOp(Ops.PARAM, dtypes.float32.ptr(16), (), 0)
    inp = UOp(Ops.PARAM, dtypes.float32.ptr(16), (), 1)
    i = UOp.range(16, 0, AxisType.LOOP)
    loaded = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, inp.dtype, (inp, i)),))
    value = loaded * loaded + UOp.const(dtypes.float32, 1.5)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)), value))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, i)),), KernelInfo("square", (Opt(
        OptOps.UPCAST, 0, 4),)))


def program() -> UOp:
    info = ProgramInfo("square", (16, 1, 1), None, (ParamInfo(0, dtypes.float32, 16, True),
                                                   ParamInfo(1, dtypes.float32, 16, False)), ops=32, mem=128)
    return UOp(Ops.PROGRAM, dtypes.void, (UOp(Ops.SOURCE, dtypes.void, (), "void square() {}"),), info)


# ---- round trips -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("build", "stage"), [(tensor_sink, Stage.TENSOR), (kernel_sink, Stage.KERNEL),
                                              (program, Stage.PROGRAM)])
def test_round_trip_gives_the_identical_node(build: object, stage: Stage) -> None:
    root = build()  # type: ignore[operator]
    assert deserialize(serialize(root, stage), stage) is root


def test_round_trip_rebuilds_a_graph_that_no_longer_exists() -> None:
    data = serialize(tensor_sink(), Stage.TENSOR)  # the graph is garbage once serialize returns
    root = deserialize(data, verify=False)
    assert root.op is Ops.SINK and root.src[0].arg == (Ops.ADD, (1,)) and root.src[0].src[0] is root.src[1]
    assert serialize(root, Stage.TENSOR) == data  # encoding is deterministic


@pytest.mark.parametrize("value", [0.0, -0.0, math.inf, -math.inf, math.nan, from_bits(0x7FF8000000000001),
                                   from_bits(0xFFF8000000000000), from_bits(0x7FF0000000000001), 5e-324, 1e308])
def test_floats_round_trip_bit_exactly(value: float) -> None:
    node = UOp(Ops.CONST, dtypes.float64, (), value)
    back = deserialize(serialize(node), verify=False)
    assert back is node and bits(back.arg) == bits(value)


def test_distinct_nan_payloads_stay_distinct_nodes() -> None:
    a, b = (UOp(Ops.CONST, dtypes.float64, (), from_bits(p)) for p in (0x7FF8000000000001, 0x7FF8000000000002))
    sink = UOp(Ops.SINK, dtypes.void, (a, b))
    back = deserialize(serialize(sink), verify=False)
    assert [bits(s.arg) for s in back.src] == [0x7FF8000000000001, 0x7FF8000000000002]


def test_int_bool_and_float_constants_stay_apart() -> None:
    nodes = (UOp(Ops.NOOP, dtypes.void, (), 1), UOp(Ops.NOOP, dtypes.void, (), True),
             UOp(Ops.NOOP, dtypes.void, (), 1.0), UOp(Ops.NOOP, dtypes.void, (), "1"))
    back = deserialize(serialize(UOp(Ops.SINK, dtypes.void, nodes)), verify=False)
    assert [type(s.arg) for s in back.src] == [int, bool, float, str]


def test_shared_subgraphs_are_written_once() -> None:
    # a chain of diamonds has 2**60 paths from root to leaf; written as a tree it could never finish
    x = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("x", 0, 10))
    for _ in range(60):
        x = UOp(Ops.ADD, dtypes.index, (x, x))
    data = serialize(x)
    assert len(data) < 61 * 8 + 100  # 61 nodes of a few bytes each, plus header and tables
    back = deserialize(data, verify=False)
    assert back is x and back.src[0] is back.src[1]


def test_every_argument_kind_round_trips() -> None:
    values = [None, True, False, 0, -1, 1 << 4000, -(1 << 4000), "héllo 🙂 \ud800", "", (), ((1, (2, ())), "x"),
              dtypes.float32, dtypes.float32.vec(4), dtypes.int8.ptr(10, AddrSpace.LOCAL), dtypes.index.ptr(),
              Ops.ADD, AxisType.REDUCE, OptOps.TC, BufferRef(-3, "NV:1", 9),
              KernelInfo("k", (Opt(OptOps.LOCAL, 1, 2),)),
              TensorCore((8, 8, 16), dtypes.float16, dtypes.float32, 32), Target("CPU", "c", threads=8)]
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.NOOP, dtypes.void, (), v) for v in values))
    assert deserialize(serialize(sink), verify=False) is sink


# ---- header and versions -----------------------------------------------------------------------------------------
def with_header(data: bytes, fmt: tuple[int, int] = FORMAT_VERSION, opset: tuple[int, int] = OPSET_VERSION) -> bytes:
    return data[:8] + struct.pack("<HHHH", *fmt, *opset) + data[16:]


def test_header_records_magic_versions_and_stage() -> None:
    data = serialize(kernel_sink(), Stage.KERNEL)
    assert data.startswith(MAGIC)
    assert struct.unpack_from("<HHHHBB", data, 8) == (*FORMAT_VERSION, *OPSET_VERSION, 0, Stage.KERNEL)


@pytest.mark.parametrize(("fmt", "opset", "what"), [
    ((FORMAT_VERSION[0], FORMAT_VERSION[1] + 1), OPSET_VERSION, "format"),
    ((FORMAT_VERSION[0] + 1, 0), OPSET_VERSION, "format"),
    ((FORMAT_VERSION[0] - 1, 7), OPSET_VERSION, "format"),
    (FORMAT_VERSION, (OPSET_VERSION[0], OPSET_VERSION[1] + 1), "opset"),
    (FORMAT_VERSION, (OPSET_VERSION[0] + 1, 0), "opset"),
])
def test_unreadable_versions_raise_naming_both(fmt: tuple[int, int], opset: tuple[int, int], what: str) -> None:
    data = with_header(serialize(kernel_sink(), Stage.KERNEL), fmt, opset)
    found = fmt if what == "format" else opset
    supported = FORMAT_VERSION if what == "format" else OPSET_VERSION
    with pytest.raises(IRVersionError) as info:
        deserialize(data)
    message = str(info.value)
    assert f"{what} version {found[0]}.{found[1]}" in message
    assert f"{supported[0]}.{supported[1]}" in message


@pytest.mark.parametrize("data", [b"", b"\x89PLY", b"PLYIR\x00\x00\x00" + bytes(20), b"GIF89a" + bytes(30)])
def test_bad_magic_or_short_data_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(IRDecodeError) as info:
        deserialize(data)
    assert info.value.offset == 0 or "truncated" in str(info.value)


def test_truncated_header_is_a_decode_error() -> None:
    with pytest.raises(IRDecodeError, match="truncated header"):
        deserialize(serialize(kernel_sink())[:HEADER_SIZE - 1])


def test_stage_mismatch_names_both_stages() -> None:
    data = serialize(tensor_sink(), Stage.TENSOR)
    with pytest.raises(IRDecodeError, match=r"KERNEL.*TENSOR"):
        deserialize(data, Stage.KERNEL)


@pytest.mark.parametrize(("offset", "value", "message"), [(16, 7, "payload kind 7"), (17, 9, "unknown stage 9")])
def test_unknown_kind_or_stage_is_a_decode_error(offset: int, value: int, message: str) -> None:
    data = bytearray(serialize(kernel_sink()))
    data[offset] = value
    with pytest.raises(IRDecodeError, match=message):
        deserialize(bytes(data))


def test_trailing_garbage_is_a_decode_error() -> None:
    data = serialize(kernel_sink())
    with pytest.raises(IRDecodeError, match="trailing garbage") as info:
        deserialize(data + b"\x00", verify=False)
    assert info.value.offset == len(data)


# ---- names the reader does not know ------------------------------------------------------------------------------
def replace_once(data: bytes, old: bytes, new: bytes) -> bytes:
    assert old in data and len(old) == len(new)
    return data.replace(old, new, 1)


@pytest.mark.parametrize(("old", "new", "message"), [
    (b"\x05STORE", b"\x05STOPE", "unknown op name 'STOPE'"),
    (b"\x07float32", b"\x07float33", "unknown dtype name 'float33'"),
    (b"\x06UPCAST", b"\x06UPDATE", "unknown enum member OptOps.UPDATE"),
    (b"\x0aKernelInfo", b"\x0aKernelData", "unknown record type 'KernelData'"),
])
def test_unknown_names_raise_naming_them(old: bytes, new: bytes, message: str) -> None:
    data = replace_once(serialize(kernel_sink()), old, new)
    with pytest.raises(IRDecodeError, match=message) as info:
        deserialize(data)
    assert HEADER_SIZE <= info.value.offset <= data.index(new)  # the table entry naming it


def test_record_whose_constructor_rejects_the_fields_is_a_decode_error() -> None:
    bad = Target("CPU", "c")
    object.__setattr__(bad, "threads", 0)  # bypass Target's validation to write what a corrupt blob would hold
    with pytest.raises(IRDecodeError, match=r"invalid Target record.*threads"):
        deserialize_target(serialize_target(bad))


def test_forward_source_reference_is_a_decode_error() -> None:
    tables = TableWriter()
    tables.op_index(Ops.SINK)
    tables.dtype_index(dtypes.void)
    out = bytearray(serialize(UOp(Ops.SINK))[:HEADER_SIZE])
    tables.write_tables(out)
    write_uvarint(out, 1)
    out += b"\x01\x00" + b"\x01\x00" + b"\x01\x01" + b"\x01\x00" + b"\x00"  # node 0 lists node 0 as its source
    with pytest.raises(IRDecodeError, match="not defined before it"):
        deserialize(bytes(out), verify=False)


def test_failed_verification_is_reported_as_a_decode_error() -> None:
    data = serialize(kernel_sink(), Stage.TENSOR)  # a kernel SINK claiming to be a tensor graph
    data_kernel = serialize(kernel_sink(), Stage.KERNEL)
    assert deserialize(data_kernel) is kernel_sink()
    data = serialize(program(), Stage.KERNEL)  # a PROGRAM root is not a kernel
    with pytest.raises(IRDecodeError, match="KERNEL verification") as info:
        deserialize(data)
    assert HEADER_SIZE < info.value.offset < len(data)


def bad_graphs() -> list[tuple[UOp, Stage]]:
    x, n = UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.int32, 1)
    mixed = UOp(Ops.SINK, dtypes.void, (UOp(Ops.ADD, dtypes.float32, (x, n)), x))
    wide = UOp(Ops.RESHAPE, dtypes.float32, (UOp(Ops.BUFFER, dtypes.float32, (), BufferRef(0, "CPU", 6)),), (7,))
    return [(mixed, Stage.GRAPH), (mixed, Stage.TENSOR), (UOp(Ops.SINK, dtypes.void, (wide,)), Stage.TENSOR),
            (program(), Stage.KERNEL), (tensor_sink(), Stage.SCHEDULE)]


@pytest.mark.parametrize(("graph", "stage"), bad_graphs())
def test_decoding_reports_the_error_verify_gives(graph: UOp, stage: Stage) -> None:
    # the decoder verifies in its own record order, and must still report verify's first error and position
    from plygrad.ir.verify import verify

    with pytest.raises(IRVerifyError) as expected:
        verify(graph, stage)
    with pytest.raises(IRDecodeError) as info:
        deserialize(serialize(graph, stage))
    assert str(expected.value) in str(info.value)


def test_a_record_the_root_does_not_reach_is_not_verified() -> None:
    tables = TableWriter()
    for op in (Ops.CONST, Ops.SINK):
        tables.op_index(op)
    for dt in (dtypes.float32, dtypes.void):
        tables.dtype_index(dt)
    out = bytearray(serialize(UOp(Ops.SINK))[:HEADER_SIZE])
    tables.write_tables(out)
    write_uvarint(out, 2)
    out += b"\x01\x00\x01" + b"\x01\x00\x01" + b"\x01\x00\x00" + b"\x01"  # CONST float32, SINK void; no sources
    out += b"\x03\x02" + b"\x00"  # the CONST holds the int 1, which no float32 CONST may: only the SINK is the graph
    assert deserialize(bytes(out)) is UOp(Ops.SINK)


# ---- writing errors ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("arg", "error", "message"), [
    (1j, TypeError, "type complex"),
    (object(), TypeError, "type object"),
    (1 << 5000, ValueError, "MAX_INT_BITS"),
    (Stage.KERNEL, TypeError, "type Stage"),
])
def test_unencodable_arguments_raise_naming_the_op(arg: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"COPY node.*{message}"):
        serialize(UOp(Ops.SINK, dtypes.void, (UOp(Ops.COPY, dtypes.void, (), arg),)))


def test_serialize_rejects_non_uops() -> None:
    with pytest.raises(TypeError, match="takes a UOp"):
        serialize("SINK")  # type: ignore[arg-type]


# ---- targets -----------------------------------------------------------------------------------------------------
def test_target_round_trips() -> None:
    target = Target("NV", "cuda", "sm_90", has_local=True, has_shared=True, shared_max=49152,
                    vector_widths=((dtypes.float16, (2, 4, 8)), (dtypes.float32, (2, 4))),
                    tensor_cores=(TensorCore((16, 8, 16), dtypes.float16, dtypes.float32, 32),))
    assert deserialize_target(serialize_target(target)) == target
    assert Target.from_bytes(target.to_bytes()) == target


def test_target_and_graph_blobs_are_not_confused() -> None:
    with pytest.raises(IRDecodeError, match="holds a target"):
        deserialize(serialize_target(Target("CPU", "c")))
    with pytest.raises(IRDecodeError, match="holds a graph"):
        deserialize_target(serialize(kernel_sink()))


def test_target_blob_holding_another_record_is_a_decode_error() -> None:
    tables = TableWriter()
    body = bytearray()
    tables.write(body, BufferRef(0, "CPU", 1))
    out = bytearray(serialize_target(Target("CPU", "c"))[:HEADER_SIZE])
    tables.write_tables(out)
    with pytest.raises(IRDecodeError, match="must hold a Target record"):
        deserialize_target(bytes(out + body))


def test_write_str_is_utf8_with_surrogates() -> None:
    out = bytearray()
    write_str(out, "a\ud800")
    assert bytes(out) == b"\x04a\xed\xa0\x80"


# ---- integration with the rest of the package --------------------------------------------------------------------
def test_pickle_goes_through_the_serializer() -> None:
    root = kernel_sink()
    assert pickle.loads(pickle.dumps(root)) is root


def ten_thousand_node_graph() -> UOp:
    x = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 0, 1 << 20))
    for i in range(5000):
        x = UOp(Ops.ADD, dtypes.index, (x, UOp(Ops.CONST, dtypes.index, (), i)))
    return x


def test_a_10k_node_graph_round_trips_in_milliseconds() -> None:
    root = ten_thousand_node_graph()
    assert len(root.toposort) == 10001
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        assert deserialize(serialize(root), verify=False) is root
        best = min(best, time.perf_counter() - start)
    assert best < 0.1, f"10k-node round trip took {best * 1e3:.1f} ms"


def test_any_bytes_like_input_is_read() -> None:
    data = serialize(kernel_sink(), Stage.KERNEL)
    assert deserialize(bytearray(data)) is deserialize(memoryview(data)) is kernel_sink()  # type: ignore[arg-type]


def test_ints_at_every_varint_length_boundary_round_trip() -> None:
    edges = [v for k in (6, 7, 13, 14, 20, 63, 64, 4095) for v in (1 << k, (1 << k) - 1, -(1 << k), -(1 << k) - 1)]
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.CONST, dtypes.index, (), v) for v in [0, -1, *edges]))
    back = deserialize(serialize(sink), verify=False)
    assert back is sink and [u.arg for u in back.src] == [0, -1, *edges]
