"""The `Target` codegen lowers for on an NVIDIA GPU, buildable without one (for compile checks in CI).

`Target.cuda(arch)` (plygrad-ir) holds what every GPU since sm_30 allows; an opened device narrows or widens the
limits to its own cuDeviceGetAttribute values, so codegen never plans a launch the device refuses.
"""

from __future__ import annotations

import dataclasses

from plygrad.ir.target import Target
from plygrad.runtime.launching import LaunchLimits


def cuda_target(arch: str = "sm_90", limits: LaunchLimits | None = None, shared_max: int | None = None) -> Target:
    """The target of device "NV" with compute capability `arch` ("sm_80", "sm_90"), with the device's launch
    limits and bytes of static shared memory per block where known (else Target.cuda's defaults)."""
    target = Target.cuda(arch, device="NV")
    if limits is not None:
        target = dataclasses.replace(target, local_max=limits.max_block, global_max=limits.max_grid,
                                     max_threads_per_group=limits.max_threads_per_block)
    if shared_max is not None:
        target = dataclasses.replace(target, shared_max=shared_max)
    return target
