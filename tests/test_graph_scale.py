"""Huge graphs cost what they are: a long elementwise chain and a wide `cat` realize correctly with kernels of
bounded size (the scheduler's node budget and its slice-by-slice concatenation), checked against NumPy.

The kernel counts and sizes are what keeps compile time linear in the graph (bench/graph_bench.py measures the
time itself; no timing is asserted here). The chains repeat a short pattern of constants, so the kernels cut from
them repeat too and a cold program cache compiles only a few distinct ones: each test stays a few seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from plygrad.frontend import Tensor
from plygrad.ir import GroupOp, Ops, UOp, dtypes
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET
from plygrad.scheduler.concat import CONCAT_MIN_PIECES

F32 = np.float32
Array = np.ndarray[Any, Any]

# the chain's ops in turn, each on a Tensor and on its NumPy twin (float32 both, so the results agree closely)
STEPS: list[tuple[Callable[[Tensor], Tensor], Callable[[Array], Array]]] = [
    (lambda t: t * 1.001, lambda a: a * F32(1.001)),
    (lambda t: t + 0.25, lambda a: a + F32(0.25)),
    (lambda t: t.relu(), lambda a: np.maximum(a, F32(0))),
    (lambda t: t - 0.125, lambda a: a - F32(0.125)),
]


def chain(x: Tensor, n: int) -> Tensor:
    for i in range(n):
        x = STEPS[i % 4][0](x)
    return x


def numpy_chain(a: Array, n: int) -> list[Array]:
    """The input and the value after every step."""
    values = [a]
    for i in range(n):
        values.append(STEPS[i % 4][1](values[-1]))
    return values


def kernels(linear: UOp) -> list[UOp]:
    return [call.src[0] for call in linear.src if call.src[0].op is Ops.SINK]


def value_ops(kernel: UOp) -> int:
    """ALU ops on values (index math not counted) and loads: what the node budget bounds."""
    return sum(1 for n in kernel.toposort
               if (n.op in GroupOp.ALU and n.dtype is not dtypes.index) or n.op is Ops.LOAD)


def test_a_5000_op_elementwise_chain_matches_numpy_in_kernels_within_the_budget() -> None:
    n = 5000
    data = np.random.default_rng(0).standard_normal(256).astype(F32)
    y = chain(Tensor(data), n)
    bodies = kernels(y.schedule())
    assert len(bodies) > 1
    assert max(value_ops(k) for k in bodies) <= KERNEL_NODE_BUDGET
    # cut where the budget is reached, not far sooner: on average a kernel holds a tenth of the budget or more
    assert len(bodies) <= 10 * n // KERNEL_NODE_BUDGET
    np.testing.assert_allclose(y.numpy(), numpy_chain(data, n)[-1], rtol=1e-5, atol=1e-5)


def test_a_long_chain_differentiates_without_recursion_error() -> None:
    n = 400
    data = np.random.default_rng(1).standard_normal(32).astype(F32)
    x = Tensor(data, requires_grad=True)
    y = chain(x, n)
    y.sum().backward()
    assert x.grad is not None
    values = numpy_chain(data, n)
    grad = np.ones_like(data)  # d/dx: 1.001 per multiply, and relu passes it only where its input was positive
    for i in range(n):
        if i % 4 == 0:
            grad = grad * F32(1.001)
        elif i % 4 == 2:
            grad = np.where(values[i] > 0, grad, F32(0))
    np.testing.assert_allclose(y.numpy(), values[-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-4)


def test_cat_of_1000_small_tensors_writes_each_into_its_slice() -> None:
    pieces = [Tensor.ones(4) * i for i in range(1000)]
    cat = Tensor.cat(*pieces)
    bodies = kernels(cat.schedule())
    # one STORE per piece, packed into kernels of many pieces each: no kernel with a branch per piece
    assert sum(1 for k in bodies for n in k.toposort if n.op is Ops.STORE) == 1000
    assert 1 < len(bodies) <= 1000 // 16
    assert max(value_ops(k) for k in bodies) <= KERNEL_NODE_BUDGET
    expected = np.concatenate([np.ones(4, F32) * i for i in range(1000)])
    np.testing.assert_array_equal(cat.numpy(), expected)


@pytest.mark.parametrize("dim", [0, 1])
def test_cat_of_many_realized_tensors_of_different_sizes_matches_numpy(dim: int) -> None:
    rng = np.random.default_rng(2)
    shapes = [(1 + i % 3, 3) if dim == 0 else (3, 1 + i % 3) for i in range(300)]
    arrays = [rng.standard_normal(s).astype(F32) for s in shapes]
    arrays[5] = -np.zeros(shapes[5], F32)  # -0.0 stays -0.0, as in NumPy (adding padded pieces made it +0.0)
    cat = Tensor.cat(*(Tensor(a) for a in arrays), dim=dim)
    got, expected = cat.numpy(), np.concatenate(arrays, axis=dim)
    np.testing.assert_array_equal(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_cat_of_many_bool_and_int_tensors_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    bools = [rng.random(3) < 0.5 for _ in range(2 * CONCAT_MIN_PIECES)]
    ints = [rng.integers(-9, 9, 2).astype(np.int32) for _ in range(2 * CONCAT_MIN_PIECES)]
    np.testing.assert_array_equal(Tensor.cat(*(Tensor(b) for b in bools)).numpy(), np.concatenate(bools))
    np.testing.assert_array_equal(Tensor.cat(*(Tensor(i) for i in ints)).numpy(), np.concatenate(ints))


def test_stack_of_many_tensors_feeds_a_reduction() -> None:
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((2, 5)).astype(F32) for _ in range(64)]
    stacked = Tensor.stack(*(Tensor(a) for a in arrays), dim=1)
    np.testing.assert_allclose(stacked.sum(axis=1).numpy(), np.stack(arrays, axis=1).sum(axis=1), rtol=1e-5,
                               atol=1e-5)


def test_cat_gradients_reach_every_piece() -> None:
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(3).astype(F32) for _ in range(2 * CONCAT_MIN_PIECES)]
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    weights = rng.standard_normal(3 * len(arrays)).astype(F32)
    (Tensor.cat(*tensors) * Tensor(weights)).sum().backward()
    for i, t in enumerate(tensors):
        assert t.grad is not None
        np.testing.assert_allclose(t.grad.numpy(), weights[3 * i:3 * i + 3], rtol=1e-6)


def test_the_unfused_scheduler_agrees_on_a_wide_cat() -> None:
    arrays = [np.full(2, i, F32) for i in range(2 * CONCAT_MIN_PIECES)]
    with Tensor.scheduler("unfused"):
        unfused = (Tensor.cat(*(Tensor(a) for a in arrays)) * 2).numpy()
    fused = (Tensor.cat(*(Tensor(a) for a in arrays)) * 2).numpy()
    np.testing.assert_array_equal(fused, unfused)
    np.testing.assert_array_equal(fused, np.concatenate(arrays) * 2)
