"""Grid and block of a GPU launch from a PROGRAM's sizes, checked against what the device allows.

`ProgramInfo.global_size` counts workgroups (CUDA blocks) per dimension and `local_size` threads per workgroup
(None: one thread), so the grid is the global size and the block the local size. `launch_dims` refuses sizes the
device cannot run with a message naming them, rather than leaving the driver to answer a bare "invalid value".
Shared by the CUDA and HIP backends (docs/backends.md, "The shared plumbing").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from plygrad.runtime.errors import BackendError

Dims = tuple[int, int, int]
MAX_32_BIT_WORK_ITEMS: Final = 2**32 - 1


@dataclass(frozen=True)
class LaunchLimits:
    """What one launch may ask of the device (the defaults are CUDA's)."""

    max_threads_per_block: int = 1024
    max_block: Dims = (1024, 1024, 64)
    max_grid: Dims = (2**31 - 1, 65535, 65535)


def launch_dims(global_size: Sequence[int], local_size: Sequence[int] | None, limits: LaunchLimits, *,
                program: str, threads: str = "threads per block", work_items_in_32_bits: bool = False
                ) -> tuple[Dims, Dims]:
    """(grid, block) for `program` ("CUDA program 'r_8'"), checked against `limits`; `threads` names what the block
    counts in the message; `work_items_in_32_bits` (an AMD GPU counts work-items per dimension in 32 bits) refuses
    a grid x block that reaches 2^32 in a dimension."""
    block = (1, 1, 1) if local_size is None else (int(local_size[0]), int(local_size[1]), int(local_size[2]))
    grid = (int(global_size[0]), int(global_size[1]), int(global_size[2]))
    count = block[0] * block[1] * block[2]
    problems = []
    if count > limits.max_threads_per_block:
        problems.append(f"{count} {threads} (at most {limits.max_threads_per_block})")
    if any(not 0 < b <= m for b, m in zip(block, limits.max_block, strict=True)):
        problems.append(f"block {block} (each dimension in 1..{limits.max_block})")
    if any(not 0 < g <= m for g, m in zip(grid, limits.max_grid, strict=True)):
        problems.append(f"grid {grid} (each dimension in 1..{limits.max_grid})")
    elif work_items_in_32_bits and any(g * b > MAX_32_BIT_WORK_ITEMS for g, b in zip(grid, block, strict=True)):
        problems.append(f"grid x block {tuple(g * b for g, b in zip(grid, block, strict=True))} work-items (at "
                        f"most 2^32 - 1 per dimension)")
    if problems:
        raise BackendError(f"{program} cannot launch with global size {tuple(global_size)} and local "
                           f"size {None if local_size is None else tuple(local_size)}: {'; '.join(problems)}; "
                           "codegen must keep within the Target's global_max, local_max and max_threads_per_group")
    return grid, block
