"""ALLREDUCE end to end: the scheduler's naive and ring lowerings run by the runtime on CPU:0..3 against the closed
form, and the rule that chooses between them (docs/ir.md §4.4, scheduler/allreduce.py).

The two lowerings are built from the same ALLREDUCE node and realized as tensor graphs of their own (COPYs and ALU
ops), so each is scheduled and run for real whatever the rule would pick.
"""

from __future__ import annotations

import numpy as np
import pytest

from plygrad.frontend import Tensor
from plygrad.frontend.multi import allreduce
from plygrad.ir import DType, Ops, UOp, dtypes
from plygrad.scheduler import allreduce as lowering

DEVICES = ("CPU", "CPU:1", "CPU:2", "CPU:3")
NP = {dtypes.float32: np.float32, dtypes.float16: np.float16, dtypes.int32: np.int32}


def _parts(n: int, size: int, dt: DType, seed: int) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    if dt.is_float:
        values = [rng.random(size).astype(NP[dt]) + 0.5 for _ in range(n)]  # positive: no cancellation
    else:
        values = [rng.integers(-1000, 1000, size).astype(NP[dt]) for _ in range(n)]
    return [Tensor(v, device=d).realize() for v, d in zip(values, DEVICES[:n], strict=True)]


def _run(graph: UOp, device: str, parts: list[Tensor]) -> np.ndarray:
    inputs = frozenset().union(*(p.inputs for p in parts))
    return Tensor._make(graph, device, inputs).numpy()


def _closed_form(parts: list[Tensor], op: Ops) -> np.ndarray:
    values = np.stack([p.numpy().astype(np.float64) for p in parts])
    return values.sum(0) if op is Ops.ADD else values.max(0)


def _check(parts: list[Tensor], op: Ops, dt: DType, devices: tuple[str, ...]) -> None:
    """Both lowerings for the result on each of `devices` equal the closed form and each other."""
    srcs = tuple(p.uop for p in parts)
    rtol = 1e-6 if dt is dtypes.float32 else 2e-3  # float16 rounds each partial to 11 bits
    expected = _closed_form(parts, op)
    for device in devices:
        node = UOp(Ops.ALLREDUCE, dt, srcs, (op, device))
        naive, ring = _run(lowering.naive(node), device, parts), _run(lowering.ring(node), device, parts)
        if dt.is_float:
            np.testing.assert_allclose(naive, expected, rtol=rtol)
            np.testing.assert_allclose(ring, expected, rtol=rtol)
            np.testing.assert_allclose(ring, naive, rtol=rtol)
        else:
            np.testing.assert_array_equal(naive, expected.astype(NP[dt]))
            np.testing.assert_array_equal(ring, naive)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("size", [1, 257])
def test_ring_matches_naive_and_the_closed_form(n: int, dt: DType, size: int) -> None:
    # one result device (the last: the ring's chunks reach it last) keeps the kernels few
    _check(_parts(n, size, dt, seed=n * 1000 + size), Ops.ADD if size == 257 or n != 3 else Ops.MAX, dt,
           (DEVICES[n - 1],))


def test_an_empty_allreduce_is_empty_on_every_device() -> None:
    out = allreduce(_parts(3, 0, dtypes.float32, seed=0))
    assert all(t.numpy().shape == (0,) for t in out)
    node = UOp(Ops.ALLREDUCE, dtypes.float32, tuple(p.uop for p in _parts(3, 0, dtypes.float32, 1)),
               (Ops.ADD, "CPU"))
    assert lowering.ring(node) is lowering.naive(node)


def test_the_rule_chooses_ring_for_many_devices_and_large_tensors() -> None:
    assert lowering.choose(2, 10**7, False) is lowering.Algorithm.NAIVE
    assert lowering.choose(3, lowering.RING_MIN_ELEMENTS - 1, False) is lowering.Algorithm.NAIVE
    assert lowering.choose(3, lowering.RING_MIN_ELEMENTS, False) is lowering.Algorithm.RING
    assert lowering.choose(4, 10**7, True) is lowering.Algorithm.NAIVE  # bool: no ADD to join the chunks
    assert lowering.choose(4, None, False) is lowering.Algorithm.NAIVE  # symbolic size


def test_a_schedule_of_an_allreduce_is_copies_and_kernels() -> None:
    parts = _parts(2, 5, dtypes.float32, seed=7)
    (out, _) = allreduce(parts)
    linear = out.schedule()
    bodies = {call.src[0].op for call in linear.src}
    assert bodies <= {Ops.SINK, Ops.COPY} and Ops.COPY in bodies
    assert not any(n.op is Ops.ALLREDUCE for n in linear.toposort)


@pytest.mark.slow
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32], ids=lambda d: d.name)
def test_ring_matches_naive_on_a_million_and_three(dt: DType) -> None:
    parts = _parts(4, 1_000_003, dt, seed=3)
    _check(parts, Ops.ADD, dt, DEVICES)
    chosen = allreduce(parts)  # the rule picks the ring here
    assert lowering.choose(4, 1_000_003, False) is lowering.Algorithm.RING
    np.testing.assert_allclose(chosen[2].numpy(), _closed_form(parts, Ops.ADD), rtol=1e-6)
