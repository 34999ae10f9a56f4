"""ALLREDUCE (opset 1.4): the tensor-stage collective over one tensor per device (docs/ir.md §4.4).

The golden pair under golden/opset-1.4/ was written once from `allreduce_graph` below by the opset 1.4 writer
(`serialize` and `to_text` of it, verified as Stage.TENSOR); every later reader of format 1 must read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plygrad.ir import IRVerifyError, Ops, Stage, UOp, deserialize, dtypes, serialize, verify
from plygrad.ir.records import BufferRef
from plygrad.ir.text import from_text, to_text
from plygrad.ir.version import OPSET_VERSION

GOLDEN = Path(__file__).resolve().parent / "golden" / "opset-1.4"
F32, VOID = dtypes.float32, dtypes.void


def _shard(i: int, device: str, dt: object = F32) -> UOp:
    return UOp(Ops.RESHAPE, dt, (UOp(Ops.BUFFER, dt, (), BufferRef(i, device, 6)),), (2, 3))  # type: ignore[arg-type]


def allreduce_graph() -> UOp:
    """The sum of a (2, 3) tensor over two devices wanted on both, and a max over three wanted on NV:0."""
    parts = (_shard(0, "CPU"), _shard(1, "CPU:1"))
    on_each = [UOp(Ops.ALLREDUCE, F32, parts, (Ops.ADD, d)) for d in ("CPU", "CPU:1")]
    three = (*parts, _shard(2, "NV:0"))
    best = UOp(Ops.ALLREDUCE, F32, three, (Ops.MAX, "NV:0"))
    return UOp(Ops.SINK, VOID, (*on_each, best))


def test_allreduce_verifies_and_round_trips() -> None:
    graph = allreduce_graph()
    verify(graph, Stage.TENSOR)
    assert deserialize(serialize(graph, Stage.TENSOR), Stage.TENSOR) is graph
    assert from_text(to_text(graph, Stage.TENSOR), Stage.TENSOR) is graph
    assert graph.src[0].shape == (2, 3)
    assert OPSET_VERSION >= (1, 4)


def test_golden_allreduce_files_decode_to_the_graph() -> None:
    graph = allreduce_graph()
    assert deserialize((GOLDEN / "allreduce.plyir").read_bytes(), Stage.TENSOR) is graph
    assert from_text((GOLDEN / "allreduce.txt").read_text(encoding="utf-8"), Stage.TENSOR) is graph


def _sink(node: UOp) -> UOp:
    return UOp(Ops.SINK, VOID, (node,))


@pytest.mark.parametrize(("arg", "message"), [
    (Ops.ADD, "needs the argument"), ((Ops.SUB, "CPU"), "Ops.ADD, Ops.MUL or Ops.MAX"), ((Ops.ADD, ""), "device"),
    ((Ops.ADD, "CPU", 1), "needs the argument"),
])
def test_allreduce_argument_is_checked(arg: object, message: str) -> None:
    node = UOp(Ops.ALLREDUCE, F32, (_shard(0, "CPU"), _shard(1, "CPU:1")), arg)
    with pytest.raises(IRVerifyError, match=rf"ALLREDUCE.*{message}"):
        verify(_sink(node), Stage.TENSOR)


def test_allreduce_sources_need_one_dtype_and_shape() -> None:
    mixed = UOp(Ops.ALLREDUCE, F32, (_shard(0, "CPU"), _shard(1, "CPU:1", dtypes.int32)), (Ops.ADD, "CPU"))
    with pytest.raises(IRVerifyError, match="ALLREDUCE"):
        verify(_sink(mixed), Stage.TENSOR)
    flat = UOp(Ops.BUFFER, F32, (), BufferRef(1, "CPU:1", 6))
    with pytest.raises(IRVerifyError, match=r"ALLREDUCE.*shape"):
        verify(_sink(UOp(Ops.ALLREDUCE, F32, (_shard(0, "CPU"), flat), (Ops.ADD, "CPU"))), Stage.TENSOR)
    with pytest.raises(IRVerifyError, match="ALLREDUCE"):
        verify(_sink(UOp(Ops.ALLREDUCE, F32, (), (Ops.ADD, "CPU"))), Stage.TENSOR)


def test_allreduce_is_a_tensor_stage_op_only() -> None:
    node = UOp(Ops.ALLREDUCE, F32, (_shard(0, "CPU"), _shard(1, "CPU:1")), (Ops.ADD, "CPU"))
    kernel_like = UOp(Ops.SINK, VOID, (node,))
    for stage in (Stage.KERNEL, Stage.SCHEDULE):
        with pytest.raises(IRVerifyError):
            verify(kernel_like if stage is Stage.KERNEL else UOp(Ops.LINEAR, VOID, (node,)), stage)
