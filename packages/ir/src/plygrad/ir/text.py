"""The text form of the IR: one line per node, for debugging, test fixtures and golden files.

    plygrad-ir format 1.0 opset 1.4 stage KERNEL
    %0 = PARAM ptr(float32,global,16) () 0
    %1 = CONST index () 16
    root %1

A node line is `%name = OP DTYPE (SOURCES) ARG`; sources name earlier nodes, so a shared subgraph is written once.
Values are exact: hex floats, JSON-escaped strings, dtypes, enum members and records by name; `#` starts a comment.
The reader is a hand-written tokenizer plus recursive descent bounded by MAX_DEPTH (never `eval`); errors raise
IRDecodeError naming the line and column. docs/ir.md §8.
"""

from __future__ import annotations

import enum
import math
import re
import struct
from typing import Any, Final, NamedTuple, NoReturn

from plygrad.ir.argcodec import (
    ENUM_TYPES,
    MAX_DEPTH,
    MAX_INT_BITS,
    MAX_RECORD_FIELDS,
    SCALAR_DTYPES,
    fields_of,
    record_name_of,
)
from plygrad.ir.dtype import MAX_VECTOR_WIDTH, AddrSpace, DType, dtype_text
from plygrad.ir.errors import IRDecodeError, IRVerifyError
from plygrad.ir.ops import Ops
from plygrad.ir.records import RECORD_TYPES
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.ir.version import FORMAT_VERSION, OPSET_VERSION

_CANONICAL_NAN_BITS: Final = 0x7FF8000000000000
_BITS: Final = struct.Struct("<Q")
_FLOAT: Final = struct.Struct("<d")
_MAX_INT_DIGITS: Final = len(str(1 << MAX_INT_BITS))  # longest decimal int token worth parsing
_MAX_NUMBER_TOKEN: Final = 2048


# ---- writing -------------------------------------------------------------------------------------------------
def float_text(x: float) -> str:
    """An exact spelling of a float64: hex for finite values, names for inf and NaN (bits when not canonical)."""
    if math.isnan(x):
        bits = _BITS.unpack(_FLOAT.pack(x))[0]
        return "nan" if bits == _CANONICAL_NAN_BITS else f"nan(0x{bits:016x})"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x.hex()


_WRITE_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_READ_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE: Final = re.compile(r'\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(["\\/bfnrt]))|\\|[\x00-\x1f]')


def string_text(s: str) -> str:
    """A double-quoted literal with JSON's escapes, where printable characters stay as they are and everything
    else is escaped, so a line never holds a newline, a control character, or a lone surrogate UTF-8 cannot store.

    One departure from JSON keeps every Python str exact: `\\uXXXX` is always exactly one code point (two escaped
    surrogates stay two characters, never merge into one), and `\\UXXXXXXXX` spells a character beyond the BMP.
    """
    out = ['"']
    for ch in s:
        escaped = _WRITE_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(ch)
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def parse_string(literal: str) -> str:
    """Inverse of `string_text` (the literal with its quotes); raises ValueError on a bad escape or a raw
    control character."""

    def unescape(match: re.Match[str]) -> str:
        short, long, simple = match.groups()
        if short is not None:
            return chr(int(short, 16))
        if long is not None:
            code = int(long, 16)
            if code > 0x10FFFF:
                raise ValueError(f"\\U{long} is beyond the last code point U+10FFFF")
            return chr(code)
        if simple is not None:
            return _READ_ESCAPES[simple]
        raise ValueError(f"bad escape or raw control character {match.group()!r} at {match.start() + 1}")

    return _ESCAPE.sub(unescape, literal[1:-1])


def value_text(value: Any, depth: int = 0) -> str:
    """The text spelling of one argument value (the inverse of the parser below)."""
    kind = type(value)
    if value is None or kind is bool:
        return str(value)
    if kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise ValueError(f"integer of {value.bit_length()} bits is larger than MAX_INT_BITS={MAX_INT_BITS}")
        return str(value)
    if kind is float:
        return float_text(value)
    if kind is str:
        return string_text(value)
    if depth >= MAX_DEPTH:
        raise ValueError(f"argument nested deeper than MAX_DEPTH={MAX_DEPTH}")
    if kind is tuple:
        items = [value_text(v, depth + 1) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, DType):
        return dtype_text(value)
    if isinstance(value, enum.Enum) and ENUM_TYPES.get(kind.__name__) is kind:
        return f"{kind.__name__}.{value.name}"
    name = record_name_of(value)
    if name is None:
        raise TypeError(f"cannot write an argument of type {kind.__name__} ({value!r}) as text")
    fields = ", ".join(f"{f}={value_text(getattr(value, f), depth + 1)}" for f in fields_of(kind))
    return f"{name}({fields})"


def header_text(stage: Stage) -> str:
    return (f"plygrad-ir format {FORMAT_VERSION[0]}.{FORMAT_VERSION[1]} opset {OPSET_VERSION[0]}.{OPSET_VERSION[1]} "
            f"stage {Stage(stage).name}")


def to_text(uop: UOp, stage: Stage = Stage.GRAPH) -> str:
    """The graph reachable from `uop` as text: a header line, one line per node (topological order), the root."""
    if not isinstance(uop, UOp):
        raise TypeError(f"to_text() takes a UOp, got {type(uop).__name__}")
    nodes = uop.toposort
    names = {node: f"%{i}" for i, node in enumerate(nodes)}
    lines = [header_text(stage)]
    for node in nodes:
        srcs = ", ".join([names[s] for s in node.src])
        try:
            arg = value_text(node.arg)
        except (TypeError, ValueError) as e:
            raise type(e)(f"cannot write the argument of a {node.op.name} node: {e}") from None
        lines.append(f"{names[node]} = {node.op.name} {dtype_text(node.dtype)} ({srcs}) {arg}")
    lines.append(f"root {names[uop]}")
    return "\n".join(lines) + "\n"


# ---- reading -------------------------------------------------------------------------------------------------
_TOKEN: Final = re.compile(r"""
    (?P<space>[ \t\r]+)
  | (?P<comment>\#.*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>[+-]?(?:
        nan\(0x[0-9a-fA-F]{1,16}\)
      | (?:inf|nan)(?![A-Za-z0-9_])
      | 0[xX][0-9a-fA-F]*(?:\.[0-9a-fA-F]*)?[pP][+-]?[0-9]+
      | [0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?
      | [0-9]+[eE][+-]?[0-9]+
      | [0-9]+))
  | (?P<node>%[A-Za-z0-9_]+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)
  | (?P<punct>[(),=])
""", re.VERBOSE)
_HEADER: Final = re.compile(r"plygrad-ir format ([0-9]{1,5})\.([0-9]{1,5}) opset ([0-9]{1,5})\.([0-9]{1,5}) "
                            r"stage ([A-Z]{1,20})")


class _Token(NamedTuple):
    kind: str  # "string", "number", "node", "name", "punct" or "end"
    text: str
    offset: int  # character offset in the whole text


class _Line:
    """The tokens of one line and a cursor over them; errors name the line and column."""

    def __init__(self, text: str, line_no: int, line_start: int) -> None:
        self.line_no, self.line_start = line_no, line_start
        self.tokens: list[_Token] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                self.fail(f"unexpected character {text[pos]!r}", line_start + pos)
            kind = match.lastgroup
            assert kind is not None
            if kind not in ("space", "comment"):
                self.tokens.append(_Token(kind, match.group(), line_start + pos))
            pos = match.end()
        self.end = _Token("end", "end of line", line_start + len(text))
        self.i = 0

    def fail(self, message: str, offset: int | None = None) -> NoReturn:
        offset = self.peek().offset if offset is None else offset
        column = offset - self.line_start + 1
        raise IRDecodeError(f"line {self.line_no}, column {column}: {message}", offset, unit="character")

    def peek(self) -> _Token:
        return self.tokens[self.i] if self.i < len(self.tokens) else self.end

    def next(self) -> _Token:
        token = self.peek()
        self.i += 1
        return token

    def expect(self, text: str) -> _Token:
        token = self.next()
        if token.text != text or token.kind not in ("punct", "name"):
            self.fail(f"expected {text!r}, got {token.text!r}", token.offset)
        return token

    def expect_kind(self, kind: str, what: str) -> _Token:
        token = self.next()
        if token.kind != kind:
            self.fail(f"expected {what}, got {token.text!r}", token.offset)
        return token

    def done(self) -> None:
        token = self.peek()
        if token.kind != "end":
            self.fail(f"unexpected {token.text!r} after the end of the line's content", token.offset)

    # ---- values --------------------------------------------------------------------------------------------
    def dtype(self) -> DType:
        token = self.expect_kind("name", "a dtype")
        if token.text == "ptr" and self.peek().text == "(":
            self.next()
            base_token = self.expect_kind("name", "the pointer's element dtype")
            if base_token.text == "ptr":  # checked here, not by recursing, so nesting cannot exhaust the stack
                self.fail("a pointer to a pointer is not an IR dtype", base_token.offset)
            base = self._named_dtype(base_token)
            self.expect(",")
            space_token = self.expect_kind("name", "an address space")
            self.expect(",")
            size = self._int(self.expect_kind("number", "a pointer size"))
            self.expect(")")
            try:
                return base.ptr(size, AddrSpace(space_token.text))
            except ValueError as e:
                self.fail(f"bad pointer dtype: {e}", token.offset)
        return self._named_dtype(token)

    def _named_dtype(self, token: _Token) -> DType:
        found = SCALAR_DTYPES.get(token.text)
        if found is not None:
            return found
        name, _, count = token.text.rpartition("x")
        scalar = SCALAR_DTYPES.get(name)
        if scalar is not None and count.isdigit() and len(count) <= 3 and 1 < int(count) <= MAX_VECTOR_WIDTH:
            try:
                return scalar.vec(int(count))
            except ValueError as e:
                self.fail(f"bad vector dtype: {e}", token.offset)
        self.fail(f"unknown dtype {token.text!r}", token.offset)

    def _int(self, token: _Token) -> int:
        text = token.text
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            self.fail(f"expected an integer, got {text!r}", token.offset)
        if len(text) > _MAX_INT_DIGITS + 1:
            self.fail(f"integer of {len(text)} digits is larger than MAX_INT_BITS={MAX_INT_BITS}", token.offset)
        value = int(text)
        if value.bit_length() > MAX_INT_BITS:
            self.fail(f"integer of {value.bit_length()} bits is larger than MAX_INT_BITS={MAX_INT_BITS}",
                      token.offset)
        return value

    def _number(self, token: _Token) -> int | float:
        text = token.text
        if len(text) > _MAX_NUMBER_TOKEN:
            self.fail(f"number of {len(text)} characters is too long", token.offset)
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        if body.startswith("nan("):
            bits = int(body[4:-1], 16)
            value = _FLOAT.unpack(_BITS.pack(bits))[0]
            if not math.isnan(value):
                self.fail(f"{text} does not hold the bits of a NaN", token.offset)
            if sign < 0:  # the sign bit is part of the bits given
                self.fail("write the sign of a NaN inside its bits: nan(0xfff8...)", token.offset)
            return float(value)
        if body == "nan":
            if sign < 0:
                self.fail("write the sign of a NaN inside its bits: nan(0xfff8000000000000)", token.offset)
            return float(_FLOAT.unpack(_BITS.pack(_CANONICAL_NAN_BITS))[0])
        if body == "inf":
            return sign * math.inf
        if body[:2] in ("0x", "0X"):
            try:
                return float.fromhex(text)
            except (ValueError, OverflowError) as e:
                self.fail(f"bad hex float {text!r}: {e}", token.offset)
        if "." in body or "e" in body or "E" in body:
            return float(text)
        return self._int(token)

    def value(self, depth: int = 0) -> Any:
        token = self.next()
        kind, text = token.kind, token.text
        if kind == "number":
            return self._number(token)
        if kind == "string":
            try:
                return parse_string(text)
            except ValueError as e:
                self.fail(f"bad string literal: {e}", token.offset)
        if depth >= MAX_DEPTH:
            self.fail(f"argument nested deeper than MAX_DEPTH={MAX_DEPTH}", token.offset)
        if text == "(" and kind == "punct":
            return self._tuple(depth)
        if kind != "name":
            self.fail(f"expected an argument value, got {text!r}", token.offset)
        if text in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[text]
        if "." in text:
            cls_name, _, member_name = text.partition(".")
            cls = ENUM_TYPES.get(cls_name)
            member = cls.__members__.get(member_name) if cls is not None else None
            if member is None:
                self.fail(f"unknown enum member {text}; enum classes: {sorted(ENUM_TYPES)}", token.offset)
            return member
        if self.peek().text == "(" and text != "ptr":
            return self._record(token, depth)
        self.i -= 1
        return self.dtype()

    def _tuple(self, depth: int) -> tuple[Any, ...]:
        items: list[Any] = []
        trailing_comma = False
        while self.peek().text != ")" or self.peek().kind != "punct":
            items.append(self.value(depth + 1))
            trailing_comma = False
            if self.peek().text == "," and self.peek().kind == "punct":
                self.next()
                trailing_comma = True
            elif self.peek().text != ")":
                self.fail(f"expected ',' or ')' in a tuple, got {self.peek().text!r}")
        close = self.next()
        if len(items) == 1 and not trailing_comma:
            self.fail("a one-item tuple needs a trailing comma: (x,)", close.offset)
        return tuple(items)

    def _record(self, name_token: _Token, depth: int) -> Any:
        cls = RECORD_TYPES.get(name_token.text)
        if cls is None:
            self.fail(f"unknown record type {name_token.text!r}; known: {sorted(RECORD_TYPES)}", name_token.offset)
        self.expect("(")
        names = fields_of(cls)
        values: dict[str, Any] = {}
        while self.peek().text != ")" or self.peek().kind != "punct":
            field = self.expect_kind("name", f"a field name of {name_token.text}")
            if field.text not in names:
                self.fail(f"{name_token.text} has no field {field.text!r}; fields: {names}", field.offset)
            if field.text in values:
                self.fail(f"field {field.text!r} given twice", field.offset)
            self.expect("=")
            values[field.text] = self.value(depth + 1)
            if len(values) > MAX_RECORD_FIELDS:
                self.fail("too many record fields", field.offset)
            if self.peek().text == ",":
                self.next()
            elif self.peek().text != ")":
                self.fail(f"expected ',' or ')' in a record, got {self.peek().text!r}")
        self.next()
        try:
            return cls(**values)
        except Exception as e:  # missing fields, or the record's own validation (Target.__post_init__)
            self.fail(f"invalid {name_token.text} record: {type(e).__name__}: {e}", name_token.offset)


def _split_lines(text: str) -> list[tuple[int, int, str]]:
    """(line number, character offset, content) of each line; only "\\n" ends a line (not the other characters
    `str.splitlines` splits on), and "\\r\\n" is accepted."""
    lines = []
    start = 0
    for line_no, content in enumerate(text.split("\n"), 1):
        lines.append((line_no, start, content))
        start += len(content) + 1
    return lines


def _parse_header(line_no: int, start: int, content: str) -> Stage:
    from plygrad.ir.serialize import check_versions  # imported here: serialize is the heavier module

    match = _HEADER.fullmatch(content.split("#", 1)[0].strip())
    if match is None:
        raise IRDecodeError(f"line {line_no}: expected the header '{header_text(Stage.GRAPH)}' (any stage), got "
                            f"{content[:80]!r}", start, unit="character")
    fmt_major, fmt_minor, ops_major, ops_minor = (int(g) for g in match.groups()[:4])
    check_versions((fmt_major, fmt_minor), (ops_major, ops_minor))
    stage = Stage.__members__.get(match.group(5))
    if stage is None:
        raise IRDecodeError(f"line {line_no}: unknown stage {match.group(5)}; known: {[s.name for s in Stage]}",
                            start, unit="character")
    return stage


def from_text(text: str, stage: Stage | None = None, *, verify: bool = True) -> UOp:
    """Parse the text form. Anything that is not a valid graph raises IRDecodeError (line, column, and the
    character offset in `.offset`) or IRVersionError. `stage` and `verify` work as in `deserialize`."""
    if not isinstance(text, str):
        raise TypeError(f"from_text() takes a str, got {type(text).__name__}")
    lines = [line for line in _split_lines(text) if line[2].split("#", 1)[0].strip()]
    if not lines:
        raise IRDecodeError("empty text: expected a header line, nodes and a root line", 0, unit="character")
    found_stage = _parse_header(*lines[0])
    if stage is not None and Stage(stage) is not found_stage:
        raise IRDecodeError(f"expected a graph of stage {Stage(stage).name}, but the text holds stage "
                            f"{found_stage.name}", lines[0][1], unit="character")
    nodes: dict[str, UOp] = {}
    lines_of: dict[UOp, tuple[int, int]] = {}  # node -> (line number, character offset of the line)
    root: UOp | None = None
    for line_no, start, content in lines[1:]:
        line = _Line(content, line_no, start)
        if root is not None:
            line.fail("nothing may follow the root line")
        first = line.next()
        if first.kind == "name" and first.text == "root":
            root = nodes.get(line.expect_kind("node", "the root node name").text)
            if root is None:
                line.fail("the root names a node that is not defined", first.offset)
            line.done()
            continue
        if first.kind != "node":
            line.fail(f"expected a node line '%name = OP dtype (sources) arg' or 'root %name', got {first.text!r}",
                      first.offset)
        if first.text in nodes:
            line.fail(f"node {first.text} is defined twice", first.offset)
        node = _parse_node(line, nodes)
        nodes[first.text] = node
        lines_of.setdefault(node, (line_no, start))
    if root is None:
        raise IRDecodeError("missing the final 'root %name' line", len(text), unit="character")
    if verify:
        from plygrad.ir.serialize import offending_node
        from plygrad.ir.verify import verify as verify_graph

        try:
            verify_graph(root, found_stage)
        except IRVerifyError as e:
            bad = offending_node(e, root)
            found = lines_of.get(bad) if bad is not None else None
            where = f"line {found[0]}: " if found is not None else ""
            offset = found[1] if found is not None else lines[0][1]
            raise IRDecodeError(f"{where}graph fails {found_stage.name} verification: {e}", offset,
                                unit="character") from e
        except Exception as e:  # a verifier crash on hostile input is still only a decode error to the caller
            raise IRDecodeError(f"internal verifier error on the parsed graph: {type(e).__name__}: {e}",
                                lines[0][1], unit="character") from e
    return root


def _parse_node(line: _Line, nodes: dict[str, UOp]) -> UOp:
    line.expect("=")
    op_token = line.expect_kind("name", "an op name")
    op = Ops.__members__.get(op_token.text)
    if op is None:
        line.fail(f"unknown op name {op_token.text!r}", op_token.offset)
    dtype = line.dtype()
    line.expect("(")
    srcs: list[UOp] = []
    while line.peek().text != ")":
        ref = line.expect_kind("node", "a source node name")
        found = nodes.get(ref.text)
        if found is None:
            line.fail(f"source {ref.text} is not defined before this line (nodes come in topological order)",
                      ref.offset)
        srcs.append(found)
        if line.peek().text == ",":
            line.next()
        elif line.peek().text != ")":
            line.fail(f"expected ',' or ')' in the source list, got {line.peek().text!r}")
    line.next()
    arg_at = line.peek().offset
    arg = line.value()
    line.done()
    try:
        return UOp(op, dtype, tuple(srcs), arg)
    except Exception as e:  # never let an odd argument escape as anything but a decode error
        line.fail(f"{op.name} node cannot be built: {type(e).__name__}: {e}", arg_at)
