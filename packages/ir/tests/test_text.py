"""The text form: readable, exact (hex floats, NaN bits), round-trips to the identical node, and reports errors
with line, column and character offset."""

from __future__ import annotations

import math
import re
import struct

import pytest

from plygrad.ir.argcodec import MAX_DEPTH
from plygrad.ir.dtype import AddrSpace, dtypes
from plygrad.ir.errors import IRDecodeError, IRVersionError
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt
from plygrad.ir.serialize import deserialize, serialize
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.text import float_text, from_text, to_text
from plygrad.ir.uop import UOp

HEADER = "plygrad-ir format 1.0 opset 1.0 stage GRAPH"


def from_bits(b: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", b))[0])


def bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


def kernel() -> UOp:
    out = UOp(Ops.PARAM, dtypes.float32.ptr(16), (), 0)
    i = UOp.range(16, 0, AxisType.LOOP)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)), UOp.const(dtypes.float32, -0.0)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, i)),), KernelInfo("zero", ()))


def test_kernel_text_reads_line_per_node() -> None:
    assert to_text(kernel(), Stage.KERNEL) == "\n".join([
        "plygrad-ir format 1.0 opset 1.4 stage KERNEL",
        "%0 = PARAM ptr(float32,global,16) () 0",
        "%1 = CONST index () 16",
        "%2 = RANGE index (%1) (0, AxisType.LOOP)",
        "%3 = INDEX ptr(float32,global,16) (%0, %2) None",
        "%4 = CONST float32 () -0x0.0p+0",
        "%5 = STORE void (%3, %4) None",
        "%6 = END void (%5, %2) None",
        '%7 = SINK void (%6) KernelInfo(name="zero", opts=())',
        "root %7",
    ]) + "\n"


def test_hand_written_text_with_comments_and_any_names_parses() -> None:
    text = """
        # a kernel written by hand
        plygrad-ir format 1.0 opset 1.0 stage KERNEL
        %out = PARAM ptr(float32, global, 16) () 0   # the output buffer
        %n   = CONST index () 16
        %i   = RANGE index (%n) (0, AxisType.LOOP)
        %idx = INDEX ptr(float32,global,16) (%out, %i) None
        %z   = CONST float32 () -0x0p+0
        %st  = STORE void (%idx, %z) None
        %end = END void (%st, %i) None
        %k   = SINK void (%end) KernelInfo(opts=(), name="zero")

        root %k
    """
    assert from_text(text.replace("\n", "\r\n"), Stage.KERNEL) is kernel()


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0x0.0p+0"), (-0.0, "-0x0.0p+0"), (1.5, "0x1.8000000000000p+0"), (math.inf, "inf"), (-math.inf, "-inf"),
    (math.nan, "nan"), (from_bits(0x7FF8000000000001), "nan(0x7ff8000000000001)"),
    (from_bits(0xFFF8000000000000), "nan(0xfff8000000000000)"), (5e-324, "0x0.0000000000001p-1022"),
])
def test_floats_are_written_exactly(value: float, text: str) -> None:
    assert float_text(value) == text
    node = UOp(Ops.CONST, dtypes.float64, (), value)
    back = from_text(to_text(node))
    assert back is node and bits(back.arg) == bits(value)


@pytest.mark.parametrize(("text", "value"), [("1.5", 1.5), ("-2e3", -2000.0), ("0x1p-2", 0.25), ("+inf", math.inf)])
def test_decimal_and_hex_float_spellings_are_accepted(text: str, value: float) -> None:
    node = from_text(f"{HEADER}\n%0 = CONST float64 () {text}\nroot %0\n")
    assert bits(node.arg) == bits(value)


@pytest.mark.parametrize("s", ["plain", "quote \" and \\ backslash", "new\nline\ttab", "héllo 🙂", "\u2028\x85\x00",
                               "lone \ud800 surrogate", "#not a comment", "", "two \ud83d\ude00 surrogates",
                               "astral \U000e0001 tag", "\x7f\u200b"])
def test_strings_round_trip_on_one_line(s: str) -> None:
    node = UOp(Ops.NOOP, dtypes.void, (), s)
    text = to_text(node)
    assert text.count("\n") == 3 and "\u2028" not in text
    text.encode("utf-8")  # storable as a UTF-8 file: no lone surrogate left unescaped
    assert from_text(text, verify=False) is node


@pytest.mark.parametrize(("literal", "value"), [('"\\u00e9\\/"', "é/"), ('"\\U0001F600"', "\U0001f600"),
                                               ('"\\ud83d\\ude00"', "\ud83d\ude00")])
def test_string_escapes_are_read(literal: str, value: str) -> None:
    assert from_text(f"{HEADER}\n%0 = NOOP void () {literal}\nroot %0\n", verify=False).arg == value


def test_every_argument_kind_round_trips() -> None:
    values = [None, True, False, 0, -7, 1 << 4000, (), (1,), ((1, 2), (3, (4,))), dtypes.float32.vec(4),
              dtypes.int8.ptr(10, AddrSpace.LOCAL), dtypes.index, Ops.MAX, AxisType.UPCAST, OptOps.GROUPTOP,
              BufferRef(-1, "NV:1", 8), KernelInfo("k", (Opt(OptOps.UNROLL, 0, 4),)),
              TensorCore((8, 8, 16), dtypes.float16, dtypes.float32, 32), Target("CPU", "c", threads=4)]
    sink = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.NOOP, dtypes.void, (), v) for v in values))
    assert from_text(to_text(sink), verify=False) is sink


def test_text_and_binary_agree() -> None:
    data, text = serialize(kernel(), Stage.KERNEL), to_text(kernel(), Stage.KERNEL)
    assert from_text(text) is deserialize(data)


def test_stage_is_checked() -> None:
    text = to_text(kernel(), Stage.KERNEL)
    assert from_text(text, Stage.KERNEL) is kernel()
    with pytest.raises(IRDecodeError, match=r"stage TENSOR.*stage KERNEL"):
        from_text(text, Stage.TENSOR)


@pytest.mark.parametrize("header", ["plygrad-ir format 1.1 opset 1.0 stage GRAPH",
                                    "plygrad-ir format 2.0 opset 1.0 stage GRAPH",
                                    "plygrad-ir format 1.0 opset 1.9 stage GRAPH"])
def test_newer_versions_raise_version_error(header: str) -> None:
    with pytest.raises(IRVersionError, match=r"version (1\.1|2\.0|1\.9).*supports"):
        from_text(f"{header}\n%0 = NOOP void () None\nroot %0\n")


def error_at(text: str) -> IRDecodeError:
    with pytest.raises(IRDecodeError) as info:
        from_text(text, verify=False)
    return info.value


@pytest.mark.parametrize(("body", "message", "column"), [
    ("%0 = NOOOP void () None", "unknown op name 'NOOOP'", 6),
    ("%0 = NOOP voids () None", "unknown dtype 'voids'", 11),
    ("%0 = NOOP void (%9) None", "source %9 is not defined", 17),
    ("%0 = NOOP void () (1)", "one-item tuple needs a trailing comma", 21),
    ("%0 = NOOP void () (1 2)", r"expected ',' or '\)' in a tuple", 22),
    ("%0 = NOOP void () Ops.NOPE", "unknown enum member Ops.NOPE", 19),
    ("%0 = NOOP void () BufferRef(id=1, colour=2)", "BufferRef has no field 'colour'", 35),
    ("%0 = NOOP void () BufferRef(id=1)", "invalid BufferRef record", 19),
    ('%0 = NOOP void () Target(device="CPU", renderer="c", threads=0)', "invalid Target record.*threads", 19),
    ("%0 = NOOP void () __import__", "unknown dtype '__import__'", 19),
    ("%0 = NOOP void () None None", "unexpected 'None'", 24),
    ("%0 = NOOP void () nan(0x0000000000000001)", "does not hold the bits of a NaN", 19),
    ('%0 = NOOP void () "bad \\x escape"', "bad string literal", 19),
    ("%0 = NOOP void () 1" + "0" * 2000, "larger than MAX_INT_BITS", 19),
    ("%0 = NOOP void () " + "(" * (MAX_DEPTH + 1) + ")" * (MAX_DEPTH + 1), "deeper than MAX_DEPTH", 19 + MAX_DEPTH),
    ("%0 = NOOP void () ptr(ptr(float32,global,1),global,1)", "pointer to a pointer", 23),
    ("%0 = NOOP void () " + "ptr(" * 5000, "pointer to a pointer", 23),
    ("%0 = NOOP void () None ~", "unexpected character '~'", 24),
])
def test_errors_name_line_and_column(body: str, message: str, column: int) -> None:
    text = f"{HEADER}\n{body}\nroot %0\n"
    error = error_at(text)
    assert f"line 2, column {column}:" in str(error)
    assert error.offset == len(HEADER) + 1 + column - 1
    assert re.search(message, str(error))


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty text"),
    ("hello\n", "expected the header"),
    (f"{HEADER}\n%0 = NOOP void () None\n", "missing the final 'root"),
    (f"{HEADER}\n%0 = NOOP void () None\nroot %1\n", "root names a node that is not defined"),
    (f"{HEADER}\n%0 = NOOP void () None\nroot %0\n%1 = NOOP void () None\n", "nothing may follow the root"),
    (f"{HEADER}\n%0 = NOOP void () None\n%0 = NOOP void () 1\nroot %0\n", "node %0 is defined twice"),
    ("plygrad-ir format 1.0 opset 1.0 stage SOMETHING\n", "unknown stage SOMETHING"),
])
def test_structural_errors(text: str, message: str) -> None:
    assert re.search(message, str(error_at(text)))


def test_failed_verification_names_the_line() -> None:
    text = to_text(kernel(), Stage.TENSOR)  # a kernel SINK is not a tensor graph
    with pytest.raises(IRDecodeError, match="TENSOR verification"):
        from_text(text)


def test_unwritable_arguments_raise_naming_the_op() -> None:
    with pytest.raises(TypeError, match=r"COPY node.*complex"):
        to_text(UOp(Ops.COPY, dtypes.void, (), 1j))
    with pytest.raises(ValueError, match=r"COPY node.*MAX_INT_BITS"):
        to_text(UOp(Ops.COPY, dtypes.void, (), 1 << 5000))


def test_deep_chains_round_trip_without_recursion() -> None:
    x = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("x", 0, 10))
    for i in range(20_000):
        x = UOp(Ops.ADD, dtypes.index, (x, UOp(Ops.CONST, dtypes.index, (), i % 7)))
    assert from_text(to_text(x), verify=False) is x
