"""`Target.cache_sizes` and the other opset 1.1 additions (AxisType.BLOCK, OptOps.BLOCK): validated, serialized,
and absent from older bytes without breaking them (a minor version: docs/ir.md §9)."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from plygrad.ir.dtype import dtypes
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import KernelInfo, Opt
from plygrad.ir.serialize import deserialize, deserialize_target, serialize, serialize_target
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target
from plygrad.ir.text import from_text, to_text
from plygrad.ir.uop import UOp
from plygrad.ir.version import OPSET_VERSION

GOLDEN_1_0 = Path(__file__).resolve().parent / "golden" / "format-1.0" / "target.plyir"


def test_cache_sizes_default_to_unknown() -> None:
    assert Target("CPU", "c").cache_sizes == ()


@pytest.mark.parametrize("sizes", [(48 * 1024,), (48 * 1024, 2 << 20, 260 << 20)])
def test_cache_sizes_round_trip(sizes: tuple[int, ...]) -> None:
    target = Target("CPU", "c", threads=2, vector_widths=((dtypes.float32, (4, 8, 16)),), cache_sizes=sizes)
    assert deserialize_target(serialize_target(target)) == target


@pytest.mark.parametrize("bad", [[32768], (0,), (-1, 4096), (32768.0,), (True,), ("32K",)])
def test_bad_cache_sizes_raise_value_error_naming_the_field(bad: object) -> None:
    with pytest.raises(ValueError, match=r"Target\.cache_sizes "):
        Target("CPU", "c", cache_sizes=bad)  # type: ignore[arg-type]


def test_target_bytes_written_before_the_field_read_as_unknown_caches() -> None:
    """The golden 1.0 target has no cache_sizes field: a missing trailing field takes its default."""
    old = deserialize_target(GOLDEN_1_0.read_bytes())
    assert old.cache_sizes == ()
    assert dataclasses.replace(old, cache_sizes=(1 << 15,)) != old


def test_the_writer_says_opset_1_1_or_later() -> None:
    data = serialize_target(Target("CPU", "c", cache_sizes=(1 << 15,)))
    opset = struct.unpack_from("<HH", data, 12)  # after the magic and the format version (docs/ir.md §8)
    assert opset == OPSET_VERSION and opset >= (1, 1)


def test_block_axis_and_action_round_trip_in_binary_and_text() -> None:
    r = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), (3, AxisType.BLOCK))
    root = UOp(Ops.SINK, dtypes.void, (r,), KernelInfo("blocked", (Opt(OptOps.BLOCK, 2, 128),)))
    assert deserialize(serialize(root, Stage.GRAPH), Stage.GRAPH) is root
    assert from_text(to_text(root, Stage.GRAPH), Stage.GRAPH) is root


# ---- opset 1.3: Target.has_fma -----------------------------------------------------------------------------------
def test_has_fma_defaults_to_false_and_round_trips() -> None:
    assert Target("CPU", "c").has_fma is False
    target = Target("CPU", "c", threads=2, cache_sizes=(1 << 15,), has_fma=True)
    assert deserialize_target(serialize_target(target)) == target


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_a_has_fma_that_is_not_a_bool_raises_naming_the_field(bad: object) -> None:
    with pytest.raises(ValueError, match=r"Target\.has_fma "):
        Target("CPU", "c", has_fma=bad)  # type: ignore[arg-type]


def test_target_bytes_written_before_has_fma_read_as_no_fma() -> None:
    """The golden 1.0 target predates the field: it reads as False, so an older backend's kernels keep their
    separate multiply and add."""
    assert deserialize_target(GOLDEN_1_0.read_bytes()).has_fma is False
