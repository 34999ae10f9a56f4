"""One process, many devices: MultiTensor (Tensor.shard, Tensor.to(tuple)) against the same ops on one device.

The CPU backend opens CPU:1, CPU:2, ... as devices of their own, so the shards really are on separate devices and
every collective is COPYs between them (docs/distributed.md, "One process, many devices").
"""

from __future__ import annotations

import numpy as np
import pytest

from plygrad.frontend import Tensor, nn
from plygrad.frontend.jit import TinyJit
from plygrad.frontend.multi import MultiTensor, allreduce, split_bounds
from plygrad.frontend.nn import optim
from plygrad.frontend.nn.optim import OptimizerGroup
from plygrad.frontend.nn.state import get_parameters
from plygrad.frontend.replicas import per_device, replicate
from plygrad.ir import Ops, ShapeError

D2 = ("CPU:0", "CPU:1")
D4 = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
CANONICAL2 = ("CPU", "CPU:1")  # CPU:0 is spelt CPU
RNG = np.random.default_rng(34)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_shard_round_trip(axis: int | None) -> None:
    a = data(5, 6)
    m = Tensor(a).shard(D2, axis)
    assert isinstance(m, MultiTensor) and m.device == CANONICAL2 and m.shape == (5, 6) and m.axis == axis
    np.testing.assert_array_equal(m.numpy(), a)
    back = m.to("CPU")
    assert isinstance(back, Tensor) and back.device == "CPU"
    np.testing.assert_array_equal(back.numpy(), a)


def test_to_a_tuple_replicates_and_shard_like_follows() -> None:
    a = data(4, 3)
    m = Tensor(a).to(D2)
    assert m.axis is None and [s.shape for s in m.shards] == [(4, 3), (4, 3)]
    assert [s.device for s in m.shards] == list(CANONICAL2)
    like = Tensor(data(4, 3)).shard(D2, 0)
    placed = Tensor(a).shard_like(like)
    assert placed.axis == 0 and placed.device == CANONICAL2
    np.testing.assert_array_equal(placed.numpy(), a)
    m.shard_(D2, 1)
    assert m.axis == 1 and [s.shape for s in m.shards] == [(4, 2), (4, 1)]


def test_uneven_shards_split_like_tinygrad() -> None:
    a = data(7, 2)
    m = Tensor(a).shard(D4, 0)
    assert [s.shape[0] for s in m.shards] == [2, 2, 2, 1]
    np.testing.assert_allclose(m.sum(0).numpy(), a.sum(0), rtol=1e-6)
    with pytest.raises(ShapeError, match="empty shard"):
        split_bounds(5, 4)
    with pytest.raises(ShapeError, match="empty shard"):
        Tensor(data(3, 2)).shard(D4, 0)


def test_cross_shard_reshape_raises_naming_the_shapes() -> None:
    m = Tensor(data(4, 6)).shard(D2, 1)
    with pytest.raises(ShapeError, match=r"\(4, 6\).*axis 1.*\(24,\)"):
        m.reshape(24)
    ok = Tensor(data(4, 6)).shard(D2, 0)
    np.testing.assert_array_equal(ok.reshape(2, 2, 6).numpy(), ok.numpy().reshape(2, 2, 6))
    assert ok.reshape(2, 2, 6).axis == 0 and ok.reshape(24).axis == 0
    with pytest.raises(ShapeError, match="split axis"):
        ok.flip(0)
    sliced = ok.shrink(((1, 3), None))  # a range across both shards: gathered, on every device
    assert sliced.axis is None
    np.testing.assert_array_equal(sliced.numpy(), ok.numpy()[1:3])


@pytest.mark.parametrize("axis", [0, 1])
def test_indexing_and_cat_match_numpy(axis: int) -> None:
    a = data(4, 6)
    m = Tensor(a).shard(D2, axis)
    for index in [(slice(None), 2), (1,), (slice(1, 3),), (None, ..., slice(0, 4, 2)), (2, slice(1, 5))]:
        np.testing.assert_array_equal(m[index].numpy(), a[index])
    assert m[:, 2].axis == (0 if axis == 0 else None)  # the split axis left whole stays split
    np.testing.assert_array_equal(m.cat(Tensor(a).to(D2), dim=1 - axis).numpy(), np.concatenate([a, a], 1 - axis))
    np.testing.assert_array_equal(m.cat(Tensor(a).shard(D2, axis), dim=axis).numpy(), np.concatenate([a, a], axis))
    with pytest.raises(TypeError, match="ints, slices"):
        m[Tensor([0, 1])]


@pytest.mark.parametrize("axis", [0, 1])
def test_setitem_writes_each_devices_part(axis: int) -> None:
    a = data(4, 6)
    m = Tensor(a.copy()).shard(D2, axis).realize()
    expected = a.copy()
    for index, value in (((slice(None), 2), 7.0), ((1,), 3.0), ((2, slice(1, 5)), -1.0)):
        m[index] = value
        expected[index] = value
    rows = data(2, 6)
    m[1:3] = Tensor(rows).to(D2)
    expected[1:3] = rows
    np.testing.assert_array_equal(m.numpy(), expected)


def test_random_tensors_shard_like_the_whole_draw() -> None:
    Tensor.manual_seed(5)
    whole = Tensor.rand(8, 3).numpy()
    Tensor.manual_seed(5)
    np.testing.assert_array_equal(Tensor.rand(8, 3).shard(D4, 0).numpy(), whole)


def test_mixing_a_single_device_tensor_raises() -> None:
    with pytest.raises(ValueError, match=r"\.to\("):
        Tensor(data(4, 2)).shard(D2, 0) + Tensor(data(4, 2))


def test_elementwise_broadcast_and_reduce_match_one_device() -> None:
    a, b = data(6, 4), data(4)
    x, w = Tensor(a).shard(D2, 0), Tensor(b).to(D2)
    y = (x * w + 1.0).relu() - x.exp() / 2
    expected = np.maximum(a * b + 1.0, 0) - np.exp(a) / 2
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert y.axis == 0
    np.testing.assert_allclose(y.sum(1).numpy(), expected.sum(1), rtol=1e-5, atol=1e-6)
    assert y.sum(1).axis == 0
    total = y.sum()
    assert total.axis is None
    np.testing.assert_allclose(total.numpy(), expected.sum(), rtol=1e-5)
    np.testing.assert_allclose(y.max(0).numpy(), expected.max(0), rtol=1e-6)
    np.testing.assert_allclose(y.min(0).numpy(), expected.min(0), rtol=1e-6)
    np.testing.assert_allclose(y.mean(0).numpy(), expected.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.log_softmax(0).numpy(), a - np.log(np.exp(a).sum(0)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("ax", "aw"), [(None, None), (0, None), (1, None), (None, 0), (None, 1), (1, 0), (0, 1),
                                        (1, 1), (0, 0)])
def test_matmul_for_every_shard_axis_pair(ax: int | None, aw: int | None) -> None:
    a, b = data(4, 6), data(6, 2)
    out = Tensor(a).shard(D2, ax) @ Tensor(b).shard(D2, aw)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("ax", "aw"), [(0, None), (None, 0), (1, 1)])
def test_conv2d_for_shard_axis_pairs(ax: int | None, aw: int | None) -> None:
    x, w, b = data(2, 4, 5, 5), data(6, 4, 3, 3), data(6)
    out = Tensor(x).shard(D2, ax).conv2d(Tensor(w).shard(D2, aw), Tensor(b).to(D2), padding=1)
    expected = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_loss_pooling_and_argmax_match_one_device() -> None:
    logits, labels, images = data(7, 4), np.array([0, 1, 3, 2, -1, 1, 0], dtype=np.int32), data(4, 2, 4, 4)
    for kw in ({}, {"label_smoothing": 0.1}):
        split = Tensor(logits).shard(D4, 0).sparse_categorical_crossentropy(Tensor(labels).shard(D4, 0), **kw)
        whole = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels), **kw)
        np.testing.assert_allclose(split.numpy(), whole.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(Tensor(logits).shard(D2, 0).argmax(axis=1).numpy(), logits.argmax(1))
    np.testing.assert_array_equal(Tensor(logits).shard(D2, 1).argmax(axis=1).numpy(), logits.argmax(1))
    pooled = Tensor(images).shard(D2, 0).max_pool2d(2)
    np.testing.assert_array_equal(pooled.numpy(), Tensor(images).max_pool2d(2).numpy())


def test_allreduce_is_bitwise_equal_on_every_device() -> None:
    parts = [Tensor(data(5), device=d) for d in D4]
    out = allreduce(parts)
    assert all(t.uop.op is Ops.ALLREDUCE and t.uop.arg == (Ops.ADD, t.device) for t in out)
    values = [t.numpy() for t in out]
    expected = sum(p.numpy().astype(np.float64) for p in parts)
    np.testing.assert_allclose(values[0], expected, rtol=1e-6)
    assert all(np.array_equal(v, values[0]) for v in values)


def _mlp_loss(x: MultiTensor | Tensor, y: MultiTensor | Tensor, w1: MultiTensor | Tensor,
              w2: MultiTensor | Tensor) -> MultiTensor | Tensor:
    h = (x @ w1).relu()
    return ((h @ w2 - y) ** 2).mean()


@pytest.mark.parametrize("devices", [D2, D4], ids=["2dev", "4dev"])
def test_data_parallel_step_matches_one_device(devices: tuple[str, ...]) -> None:
    xa, ya, w1a, w2a = data(8, 5), data(8, 3), data(5, 7), data(7, 3)
    w1, w2 = Tensor(w1a, requires_grad=True), Tensor(w2a, requires_grad=True)
    _mlp_loss(Tensor(xa), Tensor(ya), w1, w2).backward()
    assert w1.grad is not None and w2.grad is not None
    m1, m2 = Tensor(w1a).to(devices).requires_grad_(), Tensor(w2a).to(devices).requires_grad_()
    loss = _mlp_loss(Tensor(xa).shard(devices, 0), Tensor(ya).shard(devices, 0), m1, m2)
    loss.backward()
    for m, t in ((m1, w1), (m2, w2)):
        assert m.grad is not None and t.grad is not None
        grads = [s.numpy() for s in m.grad.shards]
        np.testing.assert_allclose(grads[0], t.grad.numpy(), rtol=1e-6, atol=1e-6)
        assert all(np.array_equal(g, grads[0]) for g in grads), "replicas got different gradients"
    opt = OptimizerGroup(*(optim.Adam(group, lr=0.01) for group in per_device([m1, m2])))
    opt.step()
    ref = optim.Adam([w1, w2], lr=0.01)
    ref.step()
    shards = [s.numpy() for s in m1.shards]
    np.testing.assert_allclose(shards[0], w1.numpy(), rtol=1e-6, atol=1e-6)
    assert all(np.array_equal(s, shards[0]) for s in shards)


class _Net:
    def __init__(self) -> None:
        self.l1, self.bn, self.l2 = nn.Linear(5, 6), nn.BatchNorm(6), nn.Linear(6, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.bn(self.l1(x)).relu())


def test_nn_layers_on_a_replicated_model_with_synced_batchnorm() -> None:
    """replicate() swaps a model's tensors for replicas; nn.Linear and nn.BatchNorm run unchanged on a batch split
    over 4 devices, and BatchNorm's statistics are the whole batch's (synced), as on one device."""
    xa = data(8, 5)
    Tensor.manual_seed(3)
    one = _Net()
    Tensor.manual_seed(3)
    multi = _Net()
    params = replicate(multi, D4)
    assert isinstance(multi.l1.weight, MultiTensor) and len(params) == len(get_parameters(one))
    with Tensor.train():
        ((one(Tensor(xa)) - 1.0) ** 2).mean().backward()
        ((multi(Tensor(xa).shard(D4, 0)) - 1.0) ** 2).mean().backward()  # type: ignore[arg-type]
    for t, m in zip(get_parameters(one), params, strict=True):
        if t.grad is None:  # the running statistics, updated in place from the whole batch
            assert m.grad is None
            np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)
        else:
            assert m.grad is not None
            np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_tiny_jit_replays_a_sharded_step_without_capturing_again() -> None:
    w0 = data(5, 3)
    m = Tensor(w0).to(D2).requires_grad_()
    opt = OptimizerGroup(*(optim.SGD(group, lr=0.1) for group in per_device([m])))
    w = Tensor(w0, requires_grad=True)
    ref = optim.SGD([w], lr=0.1)
    records = 0

    @TinyJit
    def step(x: MultiTensor, y: MultiTensor) -> MultiTensor:
        opt.zero_grad()
        loss = ((x @ m - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.realize()

    record = step._record

    def counting(*args: object) -> object:
        nonlocal records
        records += 1
        return record(*args)  # type: ignore[arg-type]

    step._record = counting  # type: ignore[method-assign]
    captured = None
    for i in range(7):
        xa, ya = data(4, 5), data(4, 3)
        loss = step(Tensor(xa).shard(D2, 0).realize(), Tensor(ya).shard(D2, 0).realize())
        ref.zero_grad()
        expected = ((Tensor(xa) @ w - Tensor(ya)) ** 2).mean()
        expected.backward()
        ref.step()
        np.testing.assert_allclose(loss.numpy(), expected.numpy(), rtol=1e-6)
        np.testing.assert_allclose(m.numpy(), w.numpy(), rtol=1e-6, atol=1e-7)
        if i == 1:
            captured = step.captured
        if i >= 2:
            assert step.captured is captured
    assert records == 1 and step.cnt == 7
    copies = [s.numpy() for s in m.shards]
    assert all(np.array_equal(c, copies[0]) for c in copies), "the parameter copies drifted apart"
