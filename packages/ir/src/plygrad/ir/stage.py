"""The four IR stages of docs/design.md §2, plus GRAPH for "any well-formed graph"."""

from __future__ import annotations

import enum


class Stage(enum.IntEnum):
    """Which boundary a graph crosses; `verify(uop, stage)` checks that stage's rules. Values are stored in the
    serialized header, so they never change."""

    GRAPH = 0  # no stage: only the structural rules every node obeys
    TENSOR = 1  # frontend -> scheduler: SINK of tensor UOps
    SCHEDULE = 2  # scheduler -> runtime: LINEAR of CALLs
    KERNEL = 3  # runtime -> codegen: SINK of STOREs over PARAMs
    PROGRAM = 4  # codegen -> runtime: PROGRAM with source and launch info
