"""The layers joined only by bytes: tensor graph -> scheduler -> runtime -> codegen -> CPU backend, against NumPy.

There is no frontend yet (issue #3 builds it next), so the tensor graphs are built with plygrad.ir directly, the way
the frontend will build them. Every layer is found through its entry point, never imported by name, and the
subprocess tests run the scheduler and codegen in child processes that see only bytes on stdin/stdout.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any

import numpy as np
import pytest

from plygrad.ir import BufferRef, Ops, Stage, Target, UOp, deserialize, dtypes, serialize
from plygrad.runtime import Buffer, run_linear
from plygrad.runtime.discovery import installed

SCHEDULERS = ("default", "unfused")
LOG2_E = math.log2(math.e)


def entry_point(group: str, name: str) -> Any:
    found = entry_points(group=group)
    assert name in found.names, f"no {group} entry point {name!r}; installed: {sorted(found.names)}"
    return found[name].load()


# ---- building tensor graphs the way the frontend will --------------------------------------------------------
def mov(x: UOp, op: Ops, arg: Any) -> UOp:
    return UOp(op, x.dtype, (x,), arg)


def tensor(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    return mov(UOp(Ops.BUFFER, buf.dtype, (), BufferRef(buf.id, buf.device, buf.size)), Ops.RESHAPE, shape)


def const(value: float, shape: tuple[int, ...]) -> UOp:
    scalar = UOp.const(dtypes.float32, value)
    return mov(mov(scalar, Ops.RESHAPE, (1,) * len(shape)), Ops.EXPAND, shape)


def expand(x: UOp, shape: tuple[int, ...]) -> UOp:
    return mov(x, Ops.EXPAND, shape)


def reduce(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE, x.dtype, (x,), (op, axes))


# The runtime tracks Buffers weakly (a graph holds only BufferRefs), so the test keeps its inputs alive here.
LIVE_BUFFERS: list[Buffer] = []


@pytest.fixture(autouse=True)
def _free_buffers_after_each_test() -> Iterator[None]:
    yield
    LIVE_BUFFERS.clear()


def device_buffer(array: np.ndarray) -> Buffer:
    buf = Buffer("CPU", array.size, dtypes.float32)
    buf.copyin(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    LIVE_BUFFERS.append(buf)
    return buf


def relu_chain(a: UOp, b: UOp, c: UOp, shape: tuple[int, ...]) -> UOp:
    return ((a + b) * c).alu(Ops.MAX, const(0.0, shape))


def softmax(x: UOp, shape: tuple[int, int]) -> UOp:
    peak = expand(reduce(x, Ops.MAX, (1,)), shape)
    e = ((x - peak) * const(LOG2_E, shape)).alu(Ops.EXP2)
    return e * expand(reduce(e, Ops.ADD, (1,)), shape).alu(Ops.RECIPROCAL)


def matmul(a: UOp, b: UOp, m: int, k: int, n: int) -> UOp:
    left = expand(mov(a, Ops.RESHAPE, (m, 1, k)), (m, n, k))
    right = expand(mov(mov(b, Ops.PERMUTE, (1, 0)), Ops.RESHAPE, (1, n, k)), (m, n, k))
    return mov(reduce(left * right, Ops.ADD, (2,)), Ops.RESHAPE, (m, n))


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


Case = Callable[[np.random.Generator], tuple[UOp, np.ndarray]]


def case_relu_chain(rng: np.random.Generator) -> tuple[UOp, np.ndarray]:
    shape = (7, 9)
    a, b, c = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    graph = relu_chain(*(tensor(device_buffer(x), shape) for x in (a, b, c)), shape)
    return graph, np.maximum((a + b) * c, 0)


def case_sum_rows(rng: np.random.Generator) -> tuple[UOp, np.ndarray]:
    a, b = rng.standard_normal((2, 5, 11)).astype(np.float32)
    graph = reduce(tensor(device_buffer(a), (5, 11)) * tensor(device_buffer(b), (5, 11)), Ops.ADD, (1,))
    return mov(graph, Ops.RESHAPE, (5,)), (a * b).sum(axis=1)


def case_softmax(rng: np.random.Generator) -> tuple[UOp, np.ndarray]:
    x = rng.standard_normal((6, 10)).astype(np.float32) * 3
    return softmax(tensor(device_buffer(x), (6, 10)), (6, 10)), np_softmax(x)


def case_matmul(rng: np.random.Generator) -> tuple[UOp, np.ndarray]:
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    return matmul(tensor(device_buffer(a), (16, 8)), tensor(device_buffer(b), (8, 4)), 16, 8, 4), a @ b


def case_pad_permute(rng: np.random.Generator) -> tuple[UOp, np.ndarray]:
    x = rng.standard_normal((4, 6)).astype(np.float32)
    graph = mov(mov(tensor(device_buffer(x), (4, 6)).alu(Ops.EXP2), Ops.PAD, ((1, 0), (0, 2))), Ops.PERMUTE, (1, 0))
    return graph, np.pad(np.exp2(x), ((1, 0), (0, 2))).T


CASES: dict[str, Case] = {
    "relu_chain": case_relu_chain, "sum_rows": case_sum_rows, "softmax": case_softmax, "matmul": case_matmul,
    "pad_permute": case_pad_permute,
}


def realize(graph: UOp, schedule_fn: Callable[[bytes], bytes]) -> tuple[np.ndarray, bytes]:
    """Schedule the graph through bytes, run it, and return the result with the schedule bytes."""
    schedule = schedule_fn(serialize(UOp(Ops.SINK, dtypes.void, (graph,)), Stage.TENSOR))
    linear = deserialize(schedule, Stage.SCHEDULE)
    outputs = run_linear(schedule)
    result = np.frombuffer(outputs[linear.arg[0]].copyout(), dtype=np.float32)
    shape = graph.shape
    assert shape is not None
    return result.reshape(shape), schedule


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_layers_joined_by_bytes_match_numpy(name: str, scheduler: str) -> None:
    graph, expected = CASES[name](np.random.default_rng(0))
    got, _ = realize(graph, entry_point("plygrad.schedulers", scheduler))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_and_unfused_schedulers_agree(name: str) -> None:
    graph, _ = CASES[name](np.random.default_rng(1))
    fused, fused_schedule = realize(graph, entry_point("plygrad.schedulers", "default"))
    unfused, unfused_schedule = realize(graph, entry_point("plygrad.schedulers", "unfused"))
    np.testing.assert_allclose(fused, unfused, rtol=1e-6, atol=1e-7)
    calls = len(deserialize(fused_schedule).src), len(deserialize(unfused_schedule).src)
    assert calls[0] <= calls[1], f"fusion made more kernels than one per op: {calls}"


@pytest.mark.parametrize(("name", "most_kernels"), [("relu_chain", 1), ("sum_rows", 1), ("softmax", 3)])
def test_fusion_kernel_counts(name: str, most_kernels: int) -> None:
    graph, _ = CASES[name](np.random.default_rng(2))
    _, schedule = realize(graph, entry_point("plygrad.schedulers", "default"))
    assert len(deserialize(schedule).src) <= most_kernels


# ---- the seams in other processes -------------------------------------------------------------------------------
SCHEDULER_CHILD = """
import sys
from importlib.metadata import entry_points
schedule = entry_points(group="plygrad.schedulers")[sys.argv[1]].load()
sys.stdout.buffer.write(schedule(sys.stdin.buffer.read()))
"""

CODEGEN_CHILD = """
import struct, sys
from importlib.metadata import entry_points
lower = entry_points(group="plygrad.codegen")["default"].load()
data = sys.stdin.buffer.read()
(kernel_size,) = struct.unpack_from("<Q", data)
kernel, target = data[8:8 + kernel_size], data[8 + kernel_size:]
sys.stdout.buffer.write(lower(kernel, target))
"""


def run_child(script: str, data: bytes, *args: str) -> bytes:
    done = subprocess.run([sys.executable, "-c", script, *args], input=data, capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


class SubprocessCodegen:
    """A codegen plugin that lowers each kernel in a child process, which sees only the two byte strings."""

    def __init__(self) -> None:
        self.calls = 0
        self.in_process = entry_point("plygrad.codegen", "default")

    def __call__(self, kernel: bytes, target: bytes) -> bytes:
        self.calls += 1
        program = run_child(CODEGEN_CHILD, struct.pack("<Q", len(kernel)) + kernel + target)
        assert program == self.in_process(kernel, target), "codegen in a subprocess gave other bytes"
        return program


@pytest.mark.parametrize("name", ["softmax", "matmul"])
def test_scheduler_and_codegen_in_subprocesses_give_identical_results(name: str) -> None:
    graph, expected = CASES[name](np.random.default_rng(3))
    in_process, schedule = realize(graph, entry_point("plygrad.schedulers", "default"))

    child_schedule = run_child(SCHEDULER_CHILD, serialize(UOp(Ops.SINK, dtypes.void, (graph,)), Stage.TENSOR),
                               "default")
    assert child_schedule == schedule, "the scheduler in a subprocess gave other bytes"

    codegen = SubprocessCodegen()
    with installed("plygrad.codegen", "default", codegen):
        outputs = run_linear(child_schedule)
    assert codegen.calls == len(deserialize(child_schedule).src), "every kernel went through the child codegen"
    linear = deserialize(child_schedule)
    got = np.frombuffer(outputs[linear.arg[0]].copyout(), dtype=np.float32).reshape(expected.shape)
    np.testing.assert_array_equal(got, in_process)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_cpu_target_travels_as_bytes() -> None:
    target = Target("CPU", "c", threads=2)
    assert Target.from_bytes(target.to_bytes()) == target
