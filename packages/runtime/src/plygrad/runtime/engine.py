"""The execution engine: `run_linear` runs a SCHEDULE-stage LINEAR on runtime buffers.

For every CALL, in order:
- a COPY body copies its source buffer into its destination through host memory (works between any two devices);
- a kernel SINK is serialized (KERNEL stage) and handed, with the buffers' device `Target`, to the lowering engine
  found through the `plygrad.codegen` entry point named by PLYGRAD_CODEGEN (lowering.py); the PROGRAM it returns is
  compiled by the backend's compiler through the program cache, loaded once, and launched with the CALL's buffers
  and the values its BINDs give the PROGRAM's variables (in the PROGRAM's DEFINE_VAR order).
Buffers with negative ids are the schedule's own (intermediates, outputs): a fresh `Buffer` per id per run.

All of that but the launches is done once per distinct schedule: `run_linear` runs the cached `ExecPlan` (plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from plygrad.ir.uop import UOp
from plygrad.runtime.buffer import Buffer
from plygrad.runtime.lowering import LoadedProgram, codegen, prepare_kernel
from plygrad.runtime.plan import ExecPlan, load_plan

__all__ = ["ExecPlan", "LoadedProgram", "codegen", "load_plan", "prepare_kernel", "run_linear"]


def run_linear(schedule: bytes | UOp, buffers: Mapping[int, Buffer] | None = None) -> dict[int, Buffer]:
    """Run a schedule; return the buffer realizing each id of `LINEAR.arg`, keyed by that id.

    `buffers` maps the schedule's non-negative ids to Buffers; ids it does not name are looked up among live
    Buffers by their own id. A UOp schedule is verified (or, with PLYGRAD_FORCE_BYTES, round-tripped through bytes).
    """
    return load_plan(schedule).run(buffers)
