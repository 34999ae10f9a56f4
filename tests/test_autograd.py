"""Autograd: every gradient rule against torch.autograd, and the machinery around it (backward, gradient, no_grad,
detach, accumulation, leaves, in-place assign)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from frontend_cases import array, broadcastable, shapes
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import DTypeError, ShapeError, Tensor, dtypes, enable_grad, no_grad

Fn = Callable[..., Any]
RNG = np.random.default_rng(0)


def rand(*shape: int, low: float = -2.0, high: float = 2.0, dtype: str = "float32") -> np.ndarray[Any, Any]:
    return array(RNG, shape, dtype, low, high)


# ---- the rules, op by op -----------------------------------------------------------------------------------------
BINARY: dict[str, tuple[Fn, Fn, float]] = {  # name: (plygrad, torch, lowest input value)
    "add": (lambda x, y: x + y, lambda x, y: x + y, -2.0),
    "sub": (lambda x, y: x - y, lambda x, y: x - y, -2.0),
    "mul": (lambda x, y: x * y, lambda x, y: x * y, -2.0),
    "div": (lambda x, y: x / y, lambda x, y: x / y, 0.5),
    "pow": (lambda x, y: x ** y, lambda x, y: x ** y, 0.5),
    "maximum": (lambda x, y: x.maximum(y), torch.maximum, -2.0),
    "minimum": (lambda x, y: x.minimum(y), torch.minimum, -2.0),
}


@pytest.mark.parametrize("name", BINARY)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_binary_rules_broadcasting(name: str, data: st.DataObject) -> None:
    pg, pt, low = BINARY[name]
    shape = data.draw(shapes(1, 3))  # torch_compare makes 0-d inputs 1-d (np.ascontiguousarray)
    other = broadcastable(shape, data) or (1,)
    a, b = rand(*shape, low=low), rand(*other, low=low)
    if data.draw(st.booleans()):
        a, b = b, a
    compare(pg, pt, a, b)


UNARY: dict[str, tuple[Fn, Fn, float]] = {
    "neg": (lambda x: -x, lambda x: -x, -2.0),
    "exp": (lambda x: x.exp(), torch.exp, -2.0),
    "exp2": (lambda x: x.exp2(), torch.exp2, -2.0),
    "log": (lambda x: x.log(), torch.log, 0.1),
    "log2": (lambda x: x.log2(), torch.log2, 0.1),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt, 0.1),
    "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt, 0.1),
    "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal, 0.5),
    "sin": (lambda x: x.sin(), torch.sin, -2.0),
    "cos": (lambda x: x.cos(), torch.cos, -2.0),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid, -2.0),
    "tanh": (lambda x: x.tanh(), torch.tanh, -2.0),
    "square": (lambda x: x.square(), torch.square, -2.0),
    "abs": (lambda x: x.abs(), torch.abs, -2.0),
    "floor": (lambda x: x.floor(), torch.floor, -2.0),
    "trunc": (lambda x: x.trunc(), torch.trunc, -2.0),
    "pow_const": (lambda x: x ** 3, lambda x: x ** 3, -2.0),
    "rpow": (lambda x: 2.0 ** x, lambda x: 2.0 ** x, -2.0),
}


@pytest.mark.parametrize("name", UNARY)
def test_unary_rules(name: str) -> None:
    pg, pt, low = UNARY[name]
    compare(pg, pt, rand(2, 3, low=low))


def test_maximum_ties_split_the_gradient_like_torch() -> None:
    a = np.array([1.0, 2.0, 3.0, -1.0], np.float32)
    b = np.array([1.0, 5.0, 3.0, -2.0], np.float32)
    compare(lambda x, y: x.maximum(y), torch.maximum, a, b)


def test_pow_at_zero_follows_torch() -> None:
    base = np.array([0.0, 0.0, 2.0, 0.0, 1.5], np.float32)
    exponent = np.array([0.0, 2.0, 0.0, 1.0, -1.0], np.float32)
    compare(lambda x, y: x ** y, lambda x, y: x ** y, base, exponent)


def test_where_sends_the_gradient_to_the_chosen_side() -> None:
    cond = rand(3, 4) > 0
    compare(lambda c, x, y: c.where(x, y), torch.where, cond, rand(3, 4), rand(1, 4),
            differentiable=[False, True, True])


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_cast_sends_the_gradient_back_in_the_source_dtype(dtype: str) -> None:
    compare(lambda x: (x.cast(dtypes.from_numpy_name(dtype)) * 3).cast(dtypes.float32),
            lambda x: (x.to(getattr(torch, dtype)) * 3).float(), rand(5), atol=1e-2)


def test_cast_to_an_integer_carries_no_gradient() -> None:
    x = Tensor(rand(4), requires_grad=True)
    y = x.cast(dtypes.int32)
    assert y.requires_grad is False
    loss = (y.cast(dtypes.float32) + x).sum()
    loss.backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(4, np.float32))


def test_a_target_reached_only_through_zero_gradients_gets_zeros() -> None:
    x = Tensor(rand(3), requires_grad=True)
    (x.floor() * 2).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3, np.float32))


@settings(max_examples=6, deadline=None)
@given(shape=shapes(1, 3, nonempty=True), data=st.data())
def test_sum_and_mean_over_any_axes(shape: tuple[int, ...], data: st.DataObject) -> None:
    axis = data.draw(st.sampled_from([None, 0, -1, tuple(range(len(shape)))]))
    keepdim = data.draw(st.booleans())
    compare(lambda x: x.sum(axis, keepdim), lambda x: x.sum(axis if axis is not None else (), keepdim), rand(*shape))
    compare(lambda x: x.mean(axis, keepdim),
            lambda x: x.mean(axis if axis is not None else tuple(range(x.ndim)), keepdim), rand(*shape))


def test_max_splits_ties_like_amax() -> None:
    a = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, -1.0, 5.0]], np.float32)
    compare(lambda x: x.max(1), lambda x: x.amax(1), a)
    compare(lambda x: x.max(), lambda x: x.amax(), a)
    compare(lambda x: x.min(0), lambda x: x.amin(0), a)


@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_prod_with_zeros(zeros: int) -> None:
    a = rand(3, 4, low=0.5)
    a[:zeros, 1] = 0.0
    a[0, :zeros] = 0.0
    compare(lambda x: x.prod(0), lambda x: x.prod(0), a)
    compare(lambda x: x.prod(), lambda x: x.prod(), a)


MOVEMENT: dict[str, tuple[Fn, Fn]] = {
    "reshape": (lambda x: x.reshape(4, 3), lambda x: x.reshape(4, 3)),
    "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    "expand": (lambda x: x.reshape(2, 1, 3, 2).expand(2, 4, 3, 2), lambda x: x.reshape(2, 1, 3, 2).expand(2, 4, 3, 2)),
    "pad": (lambda x: x.pad(((1, 0), (0, 2), (1, 1))),
            lambda x: torch.nn.functional.pad(x, (1, 1, 0, 2, 1, 0))),
    "shrink": (lambda x: x.shrink(((0, 1), (1, 3), (0, 1))), lambda x: x[0:1, 1:3, 0:1]),
    "flip": (lambda x: x.flip(1), lambda x: x.flip(1)),
    "index": (lambda x: x[1, ::2, -1], lambda x: x[1, ::2, -1]),
    "transpose": (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
}


@pytest.mark.parametrize("name", MOVEMENT)
def test_movement_rules(name: str) -> None:
    pg, pt = MOVEMENT[name]
    compare(pg, pt, rand(2, 3, 2))


def test_matmul_softmax_and_log_softmax() -> None:
    compare(lambda x, w: (x @ w).softmax(-1), lambda x, w: (x @ w).softmax(-1), rand(3, 4), rand(4, 5))
    compare(lambda x: x.log_softmax(0), lambda x: x.log_softmax(0), rand(3, 4))
    compare(lambda x: x.contiguous() * 2, lambda x: x.contiguous() * 2, rand(3))


def test_float16_gradients() -> None:
    compare(lambda x, y: (x * y).sum(0), lambda x, y: (x * y).sum(0), rand(4, 3, dtype="float16"),
            rand(1, 3, dtype="float16"), atol=1e-2, rtol=1e-2)


def test_gradient_through_a_copy_to_another_device() -> None:
    x = Tensor(rand(3), requires_grad=True)
    y = x.to("CPU:1")
    (y * y).sum().backward()
    assert x.grad is not None and x.grad.device == x.device
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)


# ---- backward, gradient, leaves ----------------------------------------------------------------------------------
def test_tiny_mlp_matches_torch() -> None:
    x, w1, b1, w2, b2 = rand(8, 4), rand(4, 16), rand(16), rand(16, 3), rand(3)
    labels = RNG.integers(0, 3, 8)
    onehot = np.eye(3, dtype=np.float32)[labels]

    def pg(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        h = (x @ w1 + b1).maximum(0.0)
        return -((h @ w2 + b2).log_softmax(-1) * Tensor(onehot)).sum(-1).mean()

    def pt(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x @ w1 + b1)
        return torch.nn.functional.cross_entropy(h @ w2 + b2, torch.from_numpy(labels))

    compare(pg, pt, x, w1, b1, w2, b2, differentiable=[False, True, True, True, True])


def test_backward_fills_grad_of_every_leaf_and_accumulates() -> None:
    a, b = rand(3), rand(3)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    c = Tensor(rand(3))  # no requires_grad: no .grad
    (x * y + c).sum().backward()
    assert x.grad is not None and y.grad is not None and c.grad is None
    np.testing.assert_allclose(x.grad.numpy(), b)
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), b + 2)
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0))


def test_grad_graphs_fuse_into_few_kernels() -> None:
    x, y = Tensor(rand(16), requires_grad=True), Tensor(rand(16), requires_grad=True)
    (x * y).sum().backward()
    assert x.grad is not None and y.grad is not None
    assert len(x.grad.schedule().src) == 1
    assert len(x.grad.schedule(y.grad).src) <= 2


def test_identical_leaves_are_separate_targets() -> None:
    """Two Tensor.zeros(3) are one hash-consed graph node, and a constant 0 of that shape appears inside relu."""
    a = Tensor.zeros(3).requires_grad_()
    b = Tensor.zeros(3).requires_grad_()
    x = Tensor(rand(3))
    (a * 2 + b * 3 + x.maximum(0.0)).sum().backward()
    assert a.grad is not None and b.grad is not None
    np.testing.assert_array_equal(a.grad.numpy(), np.full(3, 2.0, np.float32))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(3, 3.0, np.float32))


def test_backward_after_reading_the_loss() -> None:
    x = Tensor(rand(3), requires_grad=True)
    loss = (x * x).sum()
    assert loss.item() == pytest.approx(float((x.numpy() ** 2).sum()), rel=1e-5)
    loss.backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)


def test_deep_chain_has_no_recursion_limit() -> None:
    x = Tensor(np.array([1.0], np.float32), requires_grad=True)
    h = x
    for _ in range(10_000):
        h = h * 1.0001
    h.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 10_000], rtol=1e-3)


def test_gradient_of_several_targets_and_a_given_upstream_gradient() -> None:
    a, b, up = rand(2, 3), rand(3), rand(2, 3)
    x, y = Tensor(a), Tensor(b)  # gradient() needs no requires_grad, like tinygrad's
    out = x * y + x.exp()
    gx, gy, unused = out.gradient(x, y, Tensor(rand(4)), gradient=Tensor(up))
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    want_x, want_y = torch.autograd.grad(tx * ty + tx.exp(), (tx, ty), torch.tensor(up))
    np.testing.assert_allclose(gx.numpy(), want_x.numpy(), rtol=1e-5)
    np.testing.assert_allclose(gy.numpy(), want_y.numpy(), rtol=1e-5)
    np.testing.assert_array_equal(unused.numpy(), np.zeros(4, np.float32))


def test_intermediate_targets_and_second_order_gradients() -> None:
    x = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    h = x * x
    (gh,) = (h * 3).sum().gradient(h)
    np.testing.assert_array_equal(gh.numpy(), [3.0, 3.0])
    (gx,) = (x ** 3).sum().gradient(x)
    assert gx.requires_grad
    (ggx,) = gx.sum().gradient(x)
    np.testing.assert_allclose(ggx.numpy(), 6 * np.array([1.0, 2.0]), rtol=1e-5)


def test_requires_grad_propagates_like_torch() -> None:
    x = Tensor(rand(3), requires_grad=True)
    assert Tensor(rand(3)).requires_grad is None
    assert (x * 2).requires_grad is True
    assert (x > 0).requires_grad is False
    assert x.is_leaf and not (x * 2).is_leaf
    x.requires_grad = False
    assert (x * 2).requires_grad is False


def test_errors() -> None:
    with pytest.raises(DTypeError, match="floating-point"):
        Tensor([1, 2, 3], requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor(rand(3), requires_grad=False).sum().backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor.ones(3).sum().backward()  # a constant: nothing on its path can get a gradient
    x = Tensor(rand(3), requires_grad=True)
    with pytest.raises(ShapeError, match="one element"):
        (x * 2).backward()
    with pytest.raises(ShapeError, match="gradient of shape"):
        (x * 2).backward(Tensor(rand(4)))
    with pytest.raises(DTypeError, match="int32"):
        x.sum().gradient(Tensor([1, 2]))
    with pytest.raises(RuntimeError, match="detach"):
        (x * 2).requires_grad_(False)


# ---- no_grad, detach, training mode ------------------------------------------------------------------------------
def test_no_grad_results_record_nothing_and_stop_gradients() -> None:
    x = Tensor(rand(3), requires_grad=True)
    with no_grad():
        z = x * 3
        assert Tensor.no_grad
        with enable_grad():
            assert (x * 2).requires_grad
    assert not Tensor.no_grad and z.requires_grad is False
    (z * x).sum().backward()  # z is a constant here: d/dx (3x_0 * x) = 3x_0
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 3 * x.numpy(), rtol=1e-6)


def test_no_grad_as_a_decorator_and_flag() -> None:
    x = Tensor(rand(3), requires_grad=True)

    @no_grad()
    def double(t: Tensor) -> Tensor:
        return t * 2

    assert double(x).requires_grad is False
    Tensor.no_grad = True
    try:
        assert (x * 2).requires_grad is False
    finally:
        Tensor.no_grad = False
    with Tensor.test():
        assert (x * 2).requires_grad is False


def test_detach_cuts_the_graph_but_keeps_the_values() -> None:
    x = Tensor(rand(4), requires_grad=True)
    d = x.detach()
    assert d.requires_grad is False
    np.testing.assert_array_equal(d.numpy(), x.numpy())
    (x * d + (x - x.detach()) * 5).sum().backward()  # straight-through style: x - x.detach() is 0 with gradient 1
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), x.numpy() + 5, rtol=1e-6)


def test_train_mode_is_a_context_manager_and_decorator() -> None:
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training
        with Tensor.train(False):
            assert not Tensor.training
        assert Tensor.training

    @Tensor.train()
    def step() -> bool:
        return Tensor.training

    assert step() and not Tensor.training


# ---- assign and in-place operators -------------------------------------------------------------------------------
def test_assign_writes_into_the_buffer_every_view_reads() -> None:
    x = Tensor(np.arange(4, dtype=np.float32))
    view = x.reshape(2, 2)
    x.assign(x + 1)
    np.testing.assert_array_equal(view.numpy(), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(x.numpy(), [1, 2, 3, 4])
    x.assign(5.0)  # a scalar broadcasts
    np.testing.assert_array_equal(x.numpy(), [5, 5, 5, 5])


def test_assign_into_part_of_a_buffer() -> None:
    x = Tensor(np.arange(4, dtype=np.float32))
    part = x.shrink(((1, 3),))
    part.assign(Tensor(np.array([9.0, 8.0], np.float32)))
    np.testing.assert_array_equal(x.numpy(), [0, 9, 8, 3])
    part.assign(part * 2)
    np.testing.assert_array_equal(x.numpy(), [0, 18, 16, 3])
    np.testing.assert_array_equal(part.numpy(), [18, 16])


def test_a_write_read_by_another_graph_runs_once() -> None:
    x = Tensor(np.array([1.0, 2.0], np.float32))
    x.assign(x + 1)
    y = x * 2
    np.testing.assert_array_equal(y.numpy(), [4, 6])
    np.testing.assert_array_equal(x.numpy(), [2, 3])
    np.testing.assert_array_equal(y.numpy(), [4, 6])


def test_assign_into_a_lazy_tensor_takes_the_value() -> None:
    z = Tensor.zeros(3)
    z.assign(Tensor(np.array([1.0, 2.0, 3.0], np.float32)))
    np.testing.assert_array_equal(z.numpy(), [1, 2, 3])


def test_assign_errors() -> None:
    x = Tensor(rand(3))
    with pytest.raises(ShapeError, match=r"shape \(4,\)"):
        x.assign(Tensor(rand(4)))
    with pytest.raises(DTypeError, match="float64"):
        x.assign(Tensor(rand(3, dtype="float64")))
    with pytest.raises(ValueError, match="CPU:1"):
        x.assign(Tensor(rand(3), device="CPU:1"))


def test_inplace_operators_update_the_object() -> None:
    x = Tensor(np.array([1.0, 2.0], np.float32))
    alias = x
    x += 1
    x *= 3
    x -= Tensor(np.array([1.0, 1.0], np.float32))
    x /= 2
    assert x is alias
    np.testing.assert_array_equal(x.numpy(), [2.5, 4.0])
    i = Tensor([1, 2, 3])
    i += 2
    i //= 2
    np.testing.assert_array_equal(i.numpy(), [1, 2, 2])
    with pytest.raises(DTypeError, match="float32"):
        i += 1.5
    with pytest.raises(ShapeError, match="does not fit"):
        x += Tensor(rand(3, 2))


def test_inplace_on_a_leaf_that_requires_grad() -> None:
    w = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w += 1
    with no_grad():
        w -= 0.5
    assert w.requires_grad and w.is_leaf
    (w * w).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 3.0])


def test_an_sgd_step_loop_matches_torch() -> None:
    a, t = rand(5, 3), rand(5)
    w0 = rand(3)
    w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    x, tx = Tensor(a), torch.tensor(a)
    for _ in range(3):
        loss = ((x @ w - Tensor(t)) ** 2).mean()
        loss.backward()
        with no_grad():
            assert w.grad is not None
            w.assign(w - w.grad * 0.1)
            w.grad = None
        w.realize()
        tloss = ((tx @ tw - torch.tensor(t)) ** 2).mean()
        tloss.backward()
        with torch.no_grad():
            assert tw.grad is not None
            tw -= tw.grad * 0.1
            tw.grad = None
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_identical_graphs_realized_together_get_separate_memory() -> None:
    """Hash-consing makes the two graphs one node; an assign into one tensor must still leave the other alone."""
    a, b = Tensor.zeros(3).contiguous(), Tensor.zeros(3).contiguous()
    a.realize(b)
    a.assign(Tensor.ones(3)).realize()
    np.testing.assert_array_equal(a.numpy(), [1, 1, 1])
    np.testing.assert_array_equal(b.numpy(), [0, 0, 0])
