"""The `Target` codegen lowers for on a Mac's GPU, buildable without one (for the checks on Linux).

`Target.metal(arch)` (plygrad-ir) holds what every Apple GPU allows; an opened device narrows the limits to its own
(`maxThreadsPerThreadgroup`, `maxThreadgroupMemoryLength`), so codegen never plans a launch the device refuses.
"""

from __future__ import annotations

import dataclasses

from plygrad.ir.target import Target


def metal_target(arch: str = "apple7", local_max: tuple[int, int, int] | None = None,
                 shared_max: int | None = None) -> Target:
    """The target of device "METAL" of GPU family `arch` ("apple7", "apple9", "mac2"), with the device's threadgroup
    limits and threadgroup memory where known (else Target.metal's)."""
    target = Target.metal(arch, device="METAL")
    if local_max is not None:
        target = dataclasses.replace(target, local_max=local_max,
                                     max_threads_per_group=min(target.max_threads_per_group, max(local_max)))
    if shared_max is not None:
        target = dataclasses.replace(target, shared_max=min(target.shared_max, shared_max))
    return target
