"""Golden files (docs/design.md §3): blobs and text written by format 1.0 must be read by every later reader.

Each file under golden/format-1.0/ was written once by make_golden.py from the builders below; this test only
reads them (it never regenerates them) and checks that the decoded graph is the very node the builder makes now,
that the binary and the text decode to the same node, and that today's writer still produces the same bytes
while the format version is still 1.0. A reader that changes meaning fails here, not in a user's saved graphs.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from plygrad.ir.dtype import AddrSpace, dtypes
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.serialize import deserialize, deserialize_target, serialize, serialize_target
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.text import from_text, to_text
from plygrad.ir.uop import UOp
from plygrad.ir.version import FORMAT_VERSION, OPSET_VERSION

_E = TypeVar("_E", bound=enum.Enum)
GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "format-1.0"
F32, IDX, VOID = dtypes.float32, dtypes.index, dtypes.void


def _bits(b: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", b))[0])


def _const(dt: object, value: object) -> UOp:
    return UOp(Ops.CONST, dt, (), value)  # type: ignore[arg-type]


# ---- the graphs, built with constructors only (independent of any decoder) ------------------------------------
def tensor_graph() -> UOp:
    """(a.reshape(2,3).permute(1,0) * 2 + b).sum(axis=1), plus an in-place update of c and a copy to NV."""
    a = UOp(Ops.BUFFER, F32, (), BufferRef(0, "CPU", 6))
    b = UOp(Ops.BUFFER, F32, (), BufferRef(1, "CPU", 6))
    c = UOp(Ops.BUFFER, dtypes.int32, (), BufferRef(2, "CPU", 4))
    at = UOp(Ops.PERMUTE, F32, (UOp(Ops.RESHAPE, F32, (a,), (2, 3)),), (1, 0))
    two = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (_const(F32, 2.0),), (1, 1)),), (3, 2))
    bt = UOp(Ops.RESHAPE, F32, (b,), (3, 2))
    y = UOp(Ops.ADD, F32, (UOp(Ops.MUL, F32, (at, two)), bt))
    total = UOp(Ops.REDUCE, F32, (y,), (Ops.ADD, (1,)))
    padded = UOp(Ops.PAD, F32, (total,), ((1, 0), (0, 2)))
    cut = UOp(Ops.SHRINK, F32, (UOp(Ops.FLIP, F32, (padded,), (True, False)),), ((0, 3), (1, 2)))
    halves = UOp(Ops.CAST, dtypes.float16, (UOp(Ops.CONTIGUOUS, F32, (cut,)),))
    as_bits = UOp(Ops.BITCAST, dtypes.int16, (halves,))
    ones = UOp(Ops.EXPAND, dtypes.int32, (UOp(Ops.RESHAPE, dtypes.int32, (_const(dtypes.int32, 1),), (1,)),), (4,))
    update = UOp(Ops.ASSIGN, dtypes.int32, (c, UOp(Ops.ADD, dtypes.int32, (c, ones))))
    moved = UOp(Ops.COPY, F32, (total,), "NV:0")
    return UOp(Ops.SINK, VOID, (total, as_bits, update, moved))


def kernel_graph() -> UOp:
    """out[i] = max over j < 8 of (x[i*8+j] where i < n else 0) * 0.5, with a variable n and applied opts."""
    out = UOp(Ops.PARAM, F32.ptr(16), (), 0)
    x = UOp(Ops.PARAM, F32.ptr(128), (), 1)
    n = UOp(Ops.DEFINE_VAR, IDX, (), ("n", 1, 16))
    i = UOp(Ops.RANGE, IDX, (_const(IDX, 16),), (0, AxisType.GLOBAL))
    j = UOp(Ops.RANGE, IDX, (_const(IDX, 8),), (1, AxisType.REDUCE))
    idx = UOp(Ops.ADD, IDX, (UOp(Ops.MUL, IDX, (i, _const(IDX, 8))), j))
    gate = UOp(Ops.CMPLT, dtypes.bool, (i, n))
    loaded = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, x.dtype, (x, idx, gate)),))
    scaled = UOp(Ops.MUL, F32, (loaded, _const(F32, 0.5)))
    best = UOp(Ops.REDUCE, F32, (scaled, j), Ops.MAX)
    store = UOp(Ops.STORE, VOID, (UOp(Ops.INDEX, out.dtype, (out, i)), best))
    info = KernelInfo("r_16_8", (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 1, 2)))
    return UOp(Ops.SINK, VOID, (UOp(Ops.END, VOID, (store, i)),), info)


def schedule_graph() -> UOp:
    """Run the kernel above on a held buffer into a declared one (binding n), then copy the result to NV."""
    kernel = kernel_graph()
    x = UOp(Ops.BUFFER, F32, (), BufferRef(3, "CPU", 128))
    out = UOp(Ops.BUFFER, F32, (), BufferRef(-1, "CPU", 16))
    n = next(u for u in kernel.toposort if u.op is Ops.DEFINE_VAR)
    bind = UOp(Ops.BIND, IDX, (n, _const(IDX, 12)))
    run = UOp(Ops.CALL, VOID, (kernel, out, x, bind), "r_16_8")
    on_nv = UOp(Ops.BUFFER, F32, (), BufferRef(-2, "NV:0", 16))
    copy = UOp(Ops.CALL, VOID, (UOp(Ops.COPY, VOID, (), None), on_nv, out))
    return UOp(Ops.LINEAR, VOID, (run, copy), (-1, -2))


def program_graph() -> UOp:
    source = ('// r_16_8: "max" über 8 — ünïcode in a comment\n'
              "void r_16_8(float* restrict out, const float* restrict x, int n) {\n"
              "  for (int i = 0; i < 16; i++) { out[i] = x[i]; }\n}\n")
    n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, 16))
    info = ProgramInfo("r_16_8", (16, 1, 1), (1, 1, 1), (ParamInfo(0, F32, 16, True), ParamInfo(1, F32, 128, False)),
                       ops=256, mem=576, opts=(Opt(OptOps.LOCAL, 0, 16),))
    return UOp(Ops.PROGRAM, VOID, (UOp(Ops.SOURCE, VOID, (), source), n), info)


# enum members added after opset 1.0: the 1.0 files hold every member but these
ADDED_AFTER_1_0: frozenset[enum.Enum] = frozenset({AxisType.BLOCK, OptOps.BLOCK, OptOps.TILE})


def members_1_0(cls: type[_E]) -> list[_E]:
    """The members `cls` had in opset 1.0, in declaration order."""
    return [m for m in cls if m not in ADDED_AFTER_1_0]


def awkward_graph() -> UOp:
    """Values that break naive encoders: NaN payloads, -0.0, infinities, subnormals, huge ints, unicode, nested
    tuples, every enum member, every record type that a node can carry, vector and pointer dtypes."""
    floats = [_const(dtypes.float64, v) for v in (_bits(0x7FF8000000000001), _bits(0xFFF8000000000000),
                                                   _bits(0x7FF4000000000000), -0.0, 0.0, float("inf"),
                                                   float("-inf"), 5e-324, 1.7976931348623157e308, 0.1)]
    floats += [_const(dtypes.float32, -0.0), _const(dtypes.float32, float("nan")), _const(dtypes.float16, 65504.0),
               _const(dtypes.bfloat16, -3.3895313892515355e38)]  # bfloat16's lowest finite value
    ints = [_const(IDX, (1 << 4000) + 12345), _const(IDX, -(1 << 4000)), _const(dtypes.int64, -(1 << 63)),
            _const(dtypes.uint64, (1 << 64) - 1), _const(dtypes.int8, -128), _const(dtypes.bool, True)]
    names = [UOp(Ops.DEFINE_VAR, IDX, (), ("λ_ñ_🙂", -(1 << 100), 1 << 100)),
             UOp(Ops.BUFFER, dtypes.uint8, (), BufferRef(7, "DEVICÉ:\"0\"\\n", 3)),
             UOp(Ops.SOURCE, VOID, (), "line1\nline2\t\x00\u2028\ud83d\ude00 \U0001f600 \ud800")]
    ranges = [UOp(Ops.RANGE, IDX, (_const(IDX, 4),), (axis, t)) for axis, t in enumerate(members_1_0(AxisType))]
    reduces = [UOp(Ops.REDUCE, F32, (_const(F32, 1.0), ranges[3]), op) for op in (Ops.ADD, Ops.MUL, Ops.MAX)]
    pointers = [UOp(Ops.PARAM, dtypes.bfloat16.ptr(-1), (), 0), UOp(Ops.DEFINE_LOCAL, F32.ptr(256, AddrSpace.LOCAL),
                                                                    (), 1),
                UOp(Ops.DEFINE_REG, dtypes.int64.ptr(4, AddrSpace.REG), (), 2)]
    vec = UOp(Ops.VECTORIZE, F32.vec(4), (_const(F32, 1.0),) * 4)
    lanes = UOp(Ops.GEP, F32.vec(2), (vec,), (3, 0))
    nested = UOp(Ops.UNROLL, F32, (_const(F32, 1.0),), ((0, 1 << 70), (-5, 4)))
    wmma = UOp(Ops.WMMA, F32, (_const(F32, 1.0),) * 3, TensorCore((16, 8, 16), dtypes.float16, F32, 32))
    program = program_graph()
    info = KernelInfo("ünï", tuple(Opt(op, i, i * 2) for i, op in enumerate(members_1_0(OptOps))))
    return UOp(Ops.SINK, VOID, (*floats, *ints, *names, *ranges, *reduces, *pointers, lanes, nested, wmma, program),
               info)


def golden_target() -> Target:
    return Target("NV", "cuda", "sm_90", has_local=True, has_shared=True, global_max=(2**31 - 1, 65535, 65535),
                  local_max=(1024, 1024, 64), max_threads_per_group=1024, shared_max=49152,
                  vector_widths=((dtypes.float16, (2, 4, 8)), (F32, (2, 4))),
                  supported_dtypes=(dtypes.bool, dtypes.int32, F32, dtypes.float16, dtypes.bfloat16),
                  tensor_cores=(TensorCore((16, 8, 16), dtypes.float16, F32, 32),
                                TensorCore((16, 8, 8), dtypes.bfloat16, F32, 32)), threads=1)


GRAPHS: dict[str, tuple[Callable[[], UOp], Stage]] = {
    "tensor": (tensor_graph, Stage.TENSOR), "schedule": (schedule_graph, Stage.SCHEDULE),
    "kernel": (kernel_graph, Stage.KERNEL), "program": (program_graph, Stage.PROGRAM),
    "graph": (awkward_graph, Stage.GRAPH),
}
WRITER_IS_1_0 = FORMAT_VERSION == (1, 0) and OPSET_VERSION == (1, 0)


# ---- the checks ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_golden_binary_decodes_to_the_graph(name: str) -> None:
    build, stage = GRAPHS[name]
    expected = build()
    data = (GOLDEN_DIR / f"{name}.plyir").read_bytes()
    assert deserialize(data, stage) is expected
    if WRITER_IS_1_0:
        assert serialize(expected, stage) == data, "the 1.0 writer's bytes changed: a format change needs a version"


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_golden_text_decodes_to_the_same_node(name: str) -> None:
    build, stage = GRAPHS[name]
    expected = build()
    text = (GOLDEN_DIR / f"{name}.txt").read_text(encoding="utf-8")
    assert from_text(text, stage) is expected
    assert from_text(text, stage) is deserialize((GOLDEN_DIR / f"{name}.plyir").read_bytes(), stage)
    if WRITER_IS_1_0:
        assert to_text(expected, stage) == text


def test_golden_awkward_values_keep_their_bits() -> None:
    root = deserialize((GOLDEN_DIR / "graph.plyir").read_bytes(), Stage.GRAPH)
    doubles = [struct.unpack("<Q", struct.pack("<d", u.arg))[0] for u in root.src if u.dtype is dtypes.float64]
    assert doubles[:4] == [0x7FF8000000000001, 0xFFF8000000000000, 0x7FF4000000000000, 0x8000000000000000]


def test_golden_target() -> None:
    data = (GOLDEN_DIR / "target.plyir").read_bytes()
    assert deserialize_target(data) == golden_target()
    if WRITER_IS_1_0:
        assert serialize_target(golden_target()) == data


def test_every_golden_file_is_checked() -> None:
    names = {p.name for p in GOLDEN_DIR.iterdir()}
    assert names == {f"{n}.{ext}" for n in GRAPHS for ext in ("plyir", "txt")} | {"target.plyir"}
