"""Format and opset versions of serialized IR (docs/ir.md, "Versioning").

A reader accepts bytes of the same major version and an older or equal minor version, for each of the two.
The format version covers the byte layout; the opset version covers which ops exist and their rules.
"""

from __future__ import annotations

from typing import Final

FORMAT_VERSION: Final[tuple[int, int]] = (1, 0)
# 1.1: AxisType.BLOCK, OptOps.BLOCK and Target.cache_sizes (docs/ir.md §6)
# 1.2: the fp8 dtypes fp8e4m3, fp8e5m2, fp8e4m3fnuz, fp8e5m2fnuz (docs/ir.md, dtypes)
# 1.3: Target.has_fma, and REDUCE ADD of float products accumulated by MULACC where it is set (docs/ir.md §5);
#      OptOps.TILE (loop tiling of an output axis, docs/codegen.md §2.2)
# 1.4: ALLREDUCE, a tensor-stage collective over one tensor per device (docs/ir.md, tensor-stage ops)
OPSET_VERSION: Final[tuple[int, int]] = (1, 4)


def readable(found: tuple[int, int], reader: tuple[int, int]) -> bool:
    """True when a reader at version `reader` can read data written at version `found`."""
    return found[0] == reader[0] and found[1] <= reader[1]
