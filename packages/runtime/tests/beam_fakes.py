"""Fakes for the BEAM tests: a lowering engine that takes opts, and a PY backend whose launches take a known time.

The fake engine (`lower_with_opts`) accepts UPCAST by 2 or 4 on each axis at most once and rejects anything else,
as codegen rejects an Opt that does not apply; its own choice (opts None) is UPCAST(0, 2). It writes the program's
cost into the source (`# cost <seconds>`: `COST.base` divided by the product of the amounts) after the actions it
applied (in axis order, so two orders of one set are one program), and the costed PY backend sleeps that long in
every launch, so which list is fastest is known and the search must find it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rt_fakes import PyBackend, lower_to_text

from plygrad.ir import Ops, Opt, OptOps, Stage, UOp, deserialize, dtypes, serialize
from plygrad.runtime import Backend, BackendDescriptor, Program, beam


@dataclass
class Cost:
    base: float = 0.008  # seconds per launch of the unoptimized program


COST = Cost()
ENGINE_CALLS: list[tuple[Opt, ...] | None] = []  # the list each lowering was given (None: no opts argument)
COSTED_PY = BackendDescriptor("PY", 100, 1, 0, "beam_fakes:open_costed")


def lower_with_opts(kernel: bytes, target: bytes, opts: bytes | None = None) -> bytes:
    """A lowering engine BEAM can drive (see the module docstring)."""
    sink = deserialize(kernel, Stage.KERNEL)
    chosen = (Opt(OptOps.UPCAST, 0, 2),) if opts is None else beam.opts_from_bytes(opts)
    ENGINE_CALLS.append(None if opts is None else chosen)
    if chosen is None:
        raise ValueError("fake codegen: the opts bytes are not an optimization list")
    sizes = {int(n.arg[0]): int(n.src[0].arg) for n in sink.toposort if n.op is Ops.RANGE}
    used: set[int] = set()
    for opt in chosen:
        if opt.op is not OptOps.UPCAST or opt.amount not in (2, 4) or opt.axis in used \
                or sizes.get(opt.axis, 1) % opt.amount:
            raise ValueError(f"fake codegen: {opt} does not apply")
        used.add(opt.axis)
    program = deserialize(lower_to_text(kernel, target), Stage.PROGRAM)
    cost = COST.base / math.prod(o.amount for o in chosen)
    applied = sorted((o.axis, o.amount) for o in chosen)
    source = UOp(Ops.SOURCE, dtypes.void, (), f"{program.src[0].arg}\n# upcasts {applied}\n# cost {cost!r}\n")
    info = replace(program.arg, opts=chosen)
    return serialize(UOp(Ops.PROGRAM, dtypes.void, (source, *program.src[1:]), info), Stage.PROGRAM)


class CostedProgram(Program):
    def __init__(self, inner: Program, cost: float, backend: CostedBackend) -> None:
        self.inner, self.cost, self.backend = inner, cost, backend

    def __call__(self, buffers: Sequence[Any], global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int] | None, vals: Sequence[int], wait: bool = False) -> float | None:
        start = time.perf_counter()
        spell = self.backend.fast_spells.get(self.cost, 0)
        if spell:  # a fast spell of the machine that happens to meet this program's launches
            self.backend.fast_spells[self.cost] = spell - 1
        time.sleep(self.cost / 50 if spell else self.cost)
        self.inner(buffers, global_size, local_size, vals)
        return time.perf_counter() - start if wait else None


class CostedBackend(PyBackend):
    """PY, whose launches take the time the source says; counts its allocations and frees."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.allocations = self.frees = 0
        # cost -> how many more launches of the programs of that cost run 50x faster (a machine's fast spell)
        self.fast_spells: dict[float, int] = {}
        alloc, free = self.allocator.alloc, self.allocator.free

        def counting_alloc(nbytes: int) -> Any:
            self.allocations += 1
            return alloc(nbytes)

        def counting_free(handle: Any) -> None:
            self.frees += 1
            free(handle)

        self.allocator.alloc = counting_alloc  # type: ignore[method-assign]
        self.allocator.free = counting_free  # type: ignore[method-assign]

    def load(self, name: str, binary: bytes) -> Program:
        found = re.search(r"# cost (\S+)", binary.decode())
        return CostedProgram(super().load(name, binary), float(found.group(1)) if found else 0.0, self)


def open_costed(device: str) -> Backend:
    return CostedBackend(device)
