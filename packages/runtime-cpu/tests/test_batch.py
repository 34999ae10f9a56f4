"""Several CPU programs launched by one call (`CPUBackend.batch`): every argument reaches its parameter.

Each program here writes what it received: its variables' values into its first buffer, and a mark of its own into
every buffer, so an argument given to the wrong parameter, a value passed as a pointer or a program left out shows
in the outputs. The programs are real C compiled by the backend's compiler, as the runtime's plans launch them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.backends.cpu import batch as batch_module
from plygrad.backends.cpu.backend import CPUBackend, CPUProgram
from plygrad.runtime import BackendError, Device
from plygrad.runtime.cache import PROGRAMS
from plygrad.runtime.plugin import BatchEntry, BatchLaunch, Program

ONE = (1, 1, 1)


@pytest.fixture(scope="module")
def cpu() -> CPUBackend:
    backend = Device["CPU"]
    assert isinstance(backend, CPUBackend)
    return backend


def _echo_source(name: str, buffers: int, values: int) -> str:
    """`name(data0..., v0...)`: data0[j] = v_j for every value, then data_i[63] = 1000 * (i + 1) + values."""
    params = [f"long long* restrict data{i}" for i in range(buffers)] + [f"long long v{j}" for j in range(values)]
    body = [f"  data0[{j}] = v{j};" for j in range(values)]
    body += [f"  data{i}[63] = {1000 * (i + 1) + values}LL;" for i in range(buffers)]
    return f"void {name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"


def _echo(cpu: CPUBackend, buffers: int, values: int) -> Program:
    name = f"echo_{buffers}_{values}"
    source = _echo_source(name, buffers, values)
    return PROGRAMS.load(cpu.compiler, b"test-batch", source, name, lambda binary: cpu.load(name, binary))


def _buffers(cpu: CPUBackend, count: int) -> list[tuple[object, np.ndarray]]:
    """`count` zeroed 64-element int64 buffers: (handle, a NumPy view of its memory)."""
    found = []
    for _ in range(count):
        handle = cpu.allocator.alloc(64 * 8)
        view = np.frombuffer(cpu.allocator.ffi.buffer(handle), dtype=np.int64)
        view[:] = 0
        found.append((handle, view))
    return found


@settings(max_examples=20, deadline=None)
@given(shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 8)), min_size=2, max_size=6),
       values=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=48, max_size=48))
def test_every_program_of_a_batch_gets_its_own_buffers_and_values(cpu: CPUBackend, shapes: list[tuple[int, int]],
                                                                  values: list[int]) -> None:
    programs = [_echo(cpu, b, v) for b, v in shapes]
    entries = [BatchEntry(p, ONE, None, b, v) for p, (b, v) in zip(programs, shapes, strict=True)]
    launcher = cpu.batch(entries)
    assert isinstance(launcher, BatchLaunch)
    buffers = [_buffers(cpu, b) for b, _ in shapes]
    given_values = [values[8 * k:8 * k + v] for k, (_, v) in enumerate(shapes)]
    launcher([h for bufs in buffers for h, _ in bufs], [x for vals in given_values for x in vals])
    for (b, v), bufs, vals in zip(shapes, buffers, given_values, strict=True):
        assert bufs[0][1][:v].tolist() == vals
        assert [view[63] for _, view in bufs] == [1000 * (i + 1) + v for i in range(b)]


def test_the_largest_program_a_batch_takes_and_one_past_it(cpu: CPUBackend) -> None:
    widest = batch_module.MAX_ARGS
    fits = _echo(cpu, 4, widest - 4)
    launcher = cpu.batch([BatchEntry(fits, ONE, None, 4, widest - 4)] * 2)
    assert launcher is not None
    bufs = _buffers(cpu, 4)
    launcher([h for h, _ in bufs] * 2, list(range(-10, widest - 14)) * 2)
    assert bufs[0][1][:widest - 4].tolist() == list(range(-10, widest - 14))
    wider = _echo(cpu, 4, widest - 3)
    assert cpu.batch([BatchEntry(fits, ONE, None, 4, widest - 4), BatchEntry(wider, ONE, None, 4, widest - 3)]) \
        is None, "a program with more parameters than the dispatcher calls is launched on its own"


def test_a_batch_refuses_what_it_cannot_launch(cpu: CPUBackend) -> None:
    program = _echo(cpu, 1, 1)
    assert isinstance(program, CPUProgram)
    assert cpu.batch([BatchEntry(program, (2, 1, 1), None, 1, 1)] * 2) is None, "a CPU program runs (1, 1, 1) only"

    class Foreign(Program):
        def __call__(self, buffers: object, global_size: object, local_size: object, vals: object,
                     wait: bool = False) -> float | None:
            return None

    assert cpu.batch([BatchEntry(program, ONE, None, 1, 1), BatchEntry(Foreign(), ONE, None, 1, 1)]) is None
    launcher = cpu.batch([BatchEntry(program, ONE, None, 1, 1)] * 2)
    assert launcher is not None
    with pytest.raises(BackendError, match=r"takes 2 buffers and 2 values, got 1 and 2"):
        launcher([_buffers(cpu, 1)[0][0]], [1, 2])


def test_the_dispatcher_covers_every_argument_count() -> None:
    source = batch_module.dispatcher_source(3)
    for count, call in ((0, "fns[i])()"), (1, "fns[i])(a[0])"), (3, "fns[i])(a[0], a[1], a[2])")):
        assert f"case {count}:" in source and call in source
    assert "case 4:" not in source
