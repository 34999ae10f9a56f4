"""Writes through views (`t[index].assign(v)`, `t[index] = v`) against PyTorch doing the same in-place ops on a clone:
every write lands (strided, negative steps, symbolic offsets, broadcast values), in program order, and autograd sees
it (PyTorch's CopySlices: the written part's gradient goes to the value, the rest to the old contents)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from plygrad.frontend import Tensor, Variable, no_grad


def _torch_index(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """A basic index (ints, slices with any step) as torch index tensors selecting the same elements in the same
    layout: torch's basic indexing has no negative steps."""
    kept = [i for i, item in enumerate(index) if not isinstance(item, int)]
    out: list[torch.Tensor] = []
    for axis, (item, n) in enumerate(zip(index, shape, strict=True)):
        if isinstance(item, int):
            out.append(torch.tensor(item % n))
            continue
        positions = torch.tensor(list(range(*item.indices(n))), dtype=torch.long)
        out.append(positions.reshape([-1 if k == axis else 1 for k in kept]))
    return tuple(out)


def _pair(a: np.ndarray[Any, Any], requires_grad: bool = False) -> tuple[Tensor, torch.Tensor]:
    return Tensor(a.copy(), requires_grad=requires_grad), torch.tensor(a.copy(), requires_grad=requires_grad)


@pytest.mark.parametrize("index", [(slice(0, 9, 4),), (slice(None, None, -4),), (slice(2, None, 7),)])
def test_strided_assign_into_a_realized_tensor_writes_every_element(index: tuple[slice, ...]) -> None:
    base = np.arange(10, dtype=np.float32)
    t, tt = Tensor(base.copy()).realize(), torch.tensor(base.copy())
    n = len(range(*index[0].indices(10)))
    value = np.arange(100, 100 + n, dtype=np.float32)
    t[index].assign(Tensor(value))
    tt[_torch_index(index, (10,))] = torch.tensor(value)
    np.testing.assert_array_equal(t.numpy(), tt.numpy())


def test_strided_writes_into_a_kernel_result_in_2d_follow_one_another() -> None:
    base = np.arange(35, dtype=np.float32).reshape(5, 7)
    t, tt = (Tensor(base) * 2).realize(), torch.tensor(base) * 2
    t[::2, 1::3].assign(Tensor(-np.ones((3, 2), np.float32)))
    tt[::2, 1::3] = -1
    t[4:0:-3, ::-4].assign(Tensor(np.full((2, 2), 9.0, np.float32)))
    tt[_torch_index((slice(4, 0, -3), slice(None, None, -4)), (5, 7))] = 9
    np.testing.assert_array_equal(t.numpy(), tt.numpy())


def test_a_value_broadcasts_into_the_view_it_is_assigned_to() -> None:
    t = Tensor.zeros(2, 3).contiguous().realize()
    t[:, 1:2].assign(Tensor(10.0))
    t[1].assign(Tensor([1.0, 2.0, 3.0]).reshape(1, 3)[0])
    np.testing.assert_array_equal(t.numpy(), [[0, 10, 0], [1, 2, 3]])


def test_an_assign_into_a_view_of_an_unrealized_tensor_raises_instead_of_being_lost() -> None:
    t = Tensor([1.0, 2.0, 3.0]) + 1  # lazy: no memory to write into
    with pytest.raises(RuntimeError, match="not realized"):
        t[0:2].assign(Tensor([5.0, 5.0]))
    t[0:2] = Tensor([5.0, 5.0])  # setitem builds the new whole tensor instead
    np.testing.assert_array_equal(t.numpy(), [5, 5, 4])


def test_a_view_write_after_a_pending_whole_write_runs_after_it() -> None:
    t = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    t.assign(Tensor([5.0, 5.0, 5.0, 5.0]))
    t[0:2].assign(Tensor([1.0, 1.0]))
    np.testing.assert_array_equal(t.numpy(), [1, 1, 5, 5])


def test_a_read_built_before_a_view_write_keeps_the_old_values_in_the_same_realize() -> None:
    t = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    before = t * 2
    t[1:3].assign(Tensor([10.0, 20.0]))
    after = t * 3
    Tensor.realize(before, after)  # the write runs first (after reads it); before was built from the old values
    np.testing.assert_array_equal(before.numpy(), [2, 4, 6, 8])
    np.testing.assert_array_equal(after.numpy(), [3, 30, 60, 12])


def test_writes_at_a_symbolic_offset_fill_a_kv_cache() -> None:
    cache = Tensor.zeros(1, 2, 6, 3).contiguous().realize()
    expected = np.zeros((1, 2, 6, 3), np.float32)
    pos = Variable("start_pos", 0, 5)
    for i in range(4):
        k = np.full((1, 2, 1, 3), i + 1.0, np.float32)
        p = pos.bind(i)
        if i % 2:
            cache[:, :, p:p + 1].assign(Tensor(k))
        else:
            cache[:, :, p:p + 1] = Tensor(k)
        expected[:, :, i:i + 1] = k
        np.testing.assert_array_equal(cache[:, :, :p + 1].sum(2).numpy(), expected[:, :, :i + 1].sum(2))
    np.testing.assert_array_equal(cache.numpy(), expected)


# ---- autograd --------------------------------------------------------------------------------------------------
X = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], np.float32)


def _check_grads(pairs: list[tuple[Tensor, torch.Tensor]]) -> None:
    for p, t in pairs:
        assert t.grad is not None and p.grad is not None
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_autograd_sees_an_assign_through_a_view_of_a_realized_clone() -> None:
    x, tx = _pair(X, True)
    val, tval = _pair(np.array(10.0, np.float32), True)
    o, to = x.clone().realize(), tx.clone()
    o[:, 1:2].assign(val)  # () broadcast into (2, 1), like torch's o[:, 1:2] = val
    to[:, 1:2] = tval
    (o * o).sum().backward()
    (to * to).sum().backward()
    _check_grads([(x, tx), (val, tval)])


def test_a_view_overwritten_with_a_constant_gets_no_gradient_and_the_rest_does() -> None:
    x, tx = _pair(X, True)
    y, ty = (x * 1).realize(), tx * 1
    y[:, 1:2].assign(0.0)
    ty[:, 1:2] = 0.0
    loss, tloss = (y * y).sum(), (ty * ty).sum()
    loss.backward()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item())
    _check_grads([(x, tx)])


@pytest.mark.parametrize("how", ["setitem", "assign"])
def test_a_tensor_overwritten_whole_gives_its_source_zero_gradients_like_torch(how: str) -> None:
    x, tx = _pair(X, True)
    y, ty = x.clone(), tx.clone()
    if how == "setitem":
        y[:] = Tensor(np.zeros(X.shape, np.float32))
    else:
        y.realize()[:].assign(Tensor(np.zeros(X.shape, np.float32)))
    ty[:] = 0.0
    (y * 3).sum().backward()
    (ty * 3).sum().backward()
    assert x.grad is not None and tx.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_assign_and_setitem_mixed_differentiate_like_torch() -> None:
    x, tx = _pair(X, True)
    y, ty = (x * 1).realize(), tx * 1
    y[:, 1:2].assign(0.0)
    y[0] = 7.0
    ty[:, 1:2] = 0.0
    ty[0] = 7.0
    (y * y * x).sum().backward()
    (ty * ty * tx).sum().backward()
    _check_grads([(x, tx)])


def test_setitem_on_a_realized_clone_differentiates_like_torch() -> None:
    x, tx = _pair(np.arange(5, dtype=np.float32) + 1, True)
    v, tv = _pair(np.array([7.0, 8.0], np.float32), True)
    y, ty = x.clone().realize(), tx.clone()
    y[1:3] = v * 2
    ty[1:3] = tv * 2
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    _check_grads([(x, tx), (v, tv)])


def test_a_value_that_requires_grad_written_into_a_plain_tensor_makes_it_require_grad() -> None:
    v, tv = _pair(np.array([2.0, 3.0], np.float32), True)
    o, to = Tensor.zeros(4).contiguous().realize(), torch.zeros(4)
    o[::2].assign(v)
    to[::2] = tv
    assert o.requires_grad and to.requires_grad
    (o * o).sum().backward()
    (to * to).sum().backward()
    _check_grads([(v, tv)])


def test_a_view_of_a_leaf_that_requires_grad_cannot_be_written_while_recording() -> None:
    x = Tensor(X.copy(), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        x[0].assign(Tensor([1.0, 1.0, 1.0]))
    with no_grad():
        x[0].assign(Tensor([1.0, 1.0, 1.0]))
    x.detach()[1, ::2].assign(Tensor([7.0, 7.0]))  # its detach() is no view autograd records (PyTorch's too)
    np.testing.assert_array_equal(x.numpy(), [[1, 1, 1], [7, 4, 7]])


def test_a_write_under_no_grad_leaves_the_gradient_graph_as_it_was() -> None:
    x, tx = _pair(X, True)
    h, th = (x * 2).realize(), tx * 2
    with no_grad():
        h[0, 0:2].assign(Tensor([0.0, 5.0]))
    with torch.no_grad():
        th[0, 0:2] = torch.tensor([0.0, 5.0])
    (h * 3).sum().backward()
    (th * 3).sum().backward()
    np.testing.assert_array_equal(h.numpy(), th.detach().numpy())
    _check_grads([(x, tx)])


# ---- random sequences of view writes, against torch --------------------------------------------------------------
def _random_index(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[Any, ...]:
    index: list[Any] = []
    for n in shape:
        kind = rng.integers(4)
        if kind == 0:
            index.append(int(rng.integers(-n, n)))
        elif kind == 1:
            index.append(slice(None))
        else:
            step = int(rng.integers(1, 4)) * (1 if kind == 2 else -1)
            a, b = sorted(int(v) for v in rng.integers(0, n + 1, 2))
            index.append(slice(a, b, step) if step > 0 else slice(b, a, step) if b > a else slice(None, None, step))
    return tuple(index)


def _random_value(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray[Any, Any] | float:
    if rng.integers(4) == 0:
        return float(rng.integers(-5, 5))
    cut = int(rng.integers(0, len(shape) + 1))  # drop leading axes, make some size 1: a broadcast value
    kept = tuple(1 if rng.integers(3) == 0 else n for n in shape[cut:])
    return rng.standard_normal(kept).astype(np.float32)


def _run_random_writes(seed: int, max_size: int, steps: int) -> None:
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, max_size + 1, int(rng.integers(1, 3))))
    x, tx = _pair(rng.standard_normal(shape).astype(np.float32), True)
    o, to = (x * 1).realize(), tx * 1
    pairs: list[tuple[Tensor, torch.Tensor]] = [(x, tx)]
    reads: list[tuple[Tensor, torch.Tensor]] = []
    for _ in range(steps):
        index = _random_index(rng, shape)
        tindex = _torch_index(index, shape)
        view_shape = tuple(to[tindex].shape)
        if 0 in view_shape:
            continue
        value = _random_value(rng, view_shape)
        if isinstance(value, float):
            v: Tensor | float = value
            tv: torch.Tensor | float = value
        else:
            v, tv = _pair(value, True)
            pairs.append((v, tv))  # type: ignore[arg-type]
        if rng.integers(2):
            o[index].assign(v if isinstance(v, Tensor) else Tensor(v))
        else:
            o[index] = v
        to[tindex] = tv
        if rng.integers(2):  # a read in program order, differentiated with the rest
            weight = rng.standard_normal(shape).astype(np.float32)
            reads.append(((o * Tensor(weight)).sum(), (to * torch.tensor(weight)).sum()))
        np.testing.assert_allclose(o.numpy(), to.detach().numpy(), rtol=1e-6, err_msg=f"seed {seed}, {index}")
    loss, tloss = (o * o).sum(), (to * to).sum()
    for r, tr in reads:
        np.testing.assert_allclose(r.numpy(), tr.detach().numpy(), rtol=1e-4, atol=1e-4)
        loss, tloss = loss + r, tloss + tr
    loss.backward()
    tloss.backward()
    for p, t in pairs:
        assert t.grad is not None and p.grad is not None, f"seed {seed}"
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}")


@pytest.mark.parametrize("seed", range(3))
def test_random_view_writes_match_torch(seed: int) -> None:
    _run_random_writes(seed, max_size=9, steps=4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 23))
def test_random_view_writes_match_torch_long(seed: int) -> None:
    _run_random_writes(seed, max_size=300 if seed % 4 == 0 else 12, steps=8)


@pytest.mark.parametrize("layers", [2, 3])
def test_chained_cache_writes_run_in_the_order_made(layers: int) -> None:
    """A KV cache per layer, the keys' buffers allocated before the values': layer i's writes read what layer i-1
    wrote, all pending at once, and the result reads every cache. The writes must run in the order they were made,
    not in buffer order (which once computed layer 1's keys before layer 0's values were written)."""
    rng = np.random.default_rng(layers)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    ws = [rng.standard_normal((8, 24)).astype(np.float32) * 0.5 for _ in range(layers)]
    keys = [Tensor.zeros(10, 8).contiguous().realize() for _ in range(layers)]
    values = [Tensor.zeros(10, 8).contiguous().realize() for _ in range(layers)]
    h, want = Tensor(x), x
    for i, w in enumerate(ws):
        y, yn = h @ Tensor(w), want @ w
        keys[i][0:3].assign(y[:, 8:16])
        values[i][0:3].assign(y[:, 16:])
        h = y[:, :8] + keys[i][:3] * values[i][:3]
        want = yn[:, :8] + yn[:, 8:16] * yn[:, 16:]
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(values[-1].numpy()[:3], yn[:, 16:], rtol=1e-4, atol=1e-4)
