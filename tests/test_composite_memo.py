"""The frontend's composite memo (plygrad.frontend.composite): a sum, mean, GELU, layer norm, softmax, linear layer or
attention built again over the same input nodes is one lookup, and gives what building it op by op gives: the same
node, the same values, the same requires_grad and gradients, whatever grad mode, training mode or autograd state it
meets."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, core, no_grad, reduce
from plygrad.frontend.composite import memo_size

Op = Callable[[Tensor, Tensor, Tensor], Tensor]
OPS: dict[str, Op] = {
    "gelu": lambda x, w, b: x.gelu(approximate="none"),
    "gelu_tanh": lambda x, w, b: x.gelu(),
    "erf": lambda x, w, b: x.erf(),
    "layernorm": lambda x, w, b: x.layernorm(eps=1e-6),
    "softmax": lambda x, w, b: x.softmax(-1),
    "log_softmax": lambda x, w, b: x.log_softmax(0),
    "linear": lambda x, w, b: x.linear(w, b),
    "linear_nobias": lambda x, w, b: x.linear(w),
    "attention": lambda x, w, b: x.scaled_dot_product_attention(x, x),
    "sum": lambda x, w, b: x.sum(),
    "sum_axis": lambda x, w, b: x.sum(1, keepdim=True),
    "mean": lambda x, w, b: x.mean(0),
}


def _inputs(seed: int, rows: int = 3, cols: int = 5) -> tuple[Tensor, Tensor, Tensor]:
    rng = np.random.default_rng(seed)
    return (Tensor(rng.standard_normal((rows, cols)).astype(np.float32)).realize(),
            Tensor(rng.standard_normal((cols, 4)).astype(np.float32)).realize(),
            Tensor(rng.standard_normal(4).astype(np.float32)).realize())


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the elementwise ops and the reductions built from here on."""
    calls = [0]
    for module, name in ((core, "alu"), (reduce, "reduce_along")):
        real = getattr(module, name)

        def counting(*args: Any, real: Any = real) -> Any:
            calls[0] += 1
            return real(*args)
        monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_second_build_over_the_same_nodes_is_one_lookup(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w, b = _inputs(0)
    first = OPS[name](x, w, b)
    assert memo_size(x.uop) >= 1
    calls = _count_builds(monkeypatch)
    again = OPS[name](x, w, b)
    assert calls[0] == 0, f"{name} was built op by op again"
    assert again.uop is first.uop and again is not first
    assert again.inputs == first.inputs and again.requires_grad == first.requires_grad
    np.testing.assert_array_equal(again.numpy(), first.numpy())


def test_other_inputs_are_part_of_the_key() -> None:
    x, w, b = _inputs(1)
    _, w2, b2 = _inputs(2)
    got = [x.linear(w, b).numpy(), x.linear(w2, b).numpy(), x.linear(w, b2).numpy(), x.linear(w2).numpy()]
    expected = [x.numpy() @ w.numpy() + b.numpy(), x.numpy() @ w2.numpy() + b.numpy(),
                x.numpy() @ w.numpy() + b2.numpy(), x.numpy() @ w2.numpy()]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    assert not np.allclose(x.layernorm(eps=1e-5).numpy(), x.layernorm(eps=10.0).numpy())


def test_gradients_after_a_build_without_grad() -> None:
    """A GELU first built under no_grad (a stop in its graph) and then with gradients on: the second is built anew
    and differentiates (PyTorch's gradient)."""
    data = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    x = Tensor(data).realize()
    with no_grad():
        stopped = x.gelu(approximate="none")
    assert stopped.requires_grad is False
    x.requires_grad_(True)
    y = x.gelu(approximate="none")
    assert y.requires_grad is True
    y.sum().backward()
    tx = torch.tensor(data, requires_grad=True)
    torch.nn.functional.gelu(tx).sum().backward()
    assert x.grad is not None and tx.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_requires_grad_set_later_is_seen() -> None:
    """The same node, once not requiring grad and then requiring it: the memo must not answer the first build's
    requires_grad (False) for the second."""
    x, w, b = _inputs(3)
    for t in (x, w, b):
        t.requires_grad = False
    assert x.linear(w, b).requires_grad is False
    w.requires_grad_(True)
    out = x.linear(w, b)
    assert out.requires_grad is True
    out.sum().backward()
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(x.numpy().sum(0)[:, None], (5, 4)), rtol=1e-5)


def test_dropout_while_training_is_drawn_every_call() -> None:
    x = Tensor(np.ones((2, 6, 8), np.float32)).realize()
    with Tensor.train():
        first = x.scaled_dot_product_attention(x, x, dropout_p=0.5)
        second = x.scaled_dot_product_attention(x, x, dropout_p=0.5)
    assert first.uop is not second.uop
    evaluated = [x.scaled_dot_product_attention(x, x, dropout_p=0.5) for _ in range(2)]
    assert evaluated[0].uop is evaluated[1].uop  # not training: no dropout, one graph


def test_the_memo_keeps_no_node_alive() -> None:
    x, w, b = _inputs(4)
    y = x.linear(w, b).gelu(approximate="none")
    dead = weakref.ref(y.uop)
    del y
    gc.collect()
    assert dead() is None  # the entries in x's node hold their results weakly
    fresh = x.linear(w, b).gelu(approximate="none")  # a dead entry is built anew
    np.testing.assert_allclose(fresh.numpy(), torch.nn.functional.gelu(
        torch.tensor(x.numpy() @ w.numpy() + b.numpy())).numpy(), rtol=1e-5, atol=1e-6)


def _fresh(t: Tensor) -> Tensor:
    """A tensor of the same values and autograd flag over a node of its own: nothing memoized reads it."""
    copy = Tensor(t.numpy()).realize()
    copy.requires_grad = t.requires_grad
    return copy


@settings(max_examples=30, deadline=None)
@given(names=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6), seed=st.integers(0, 2**16),
       grad=st.lists(st.sampled_from([None, False, True]), min_size=3, max_size=3), no_grad=st.booleans())
def test_memoized_builds_equal_fresh_builds(names: list[str], seed: int, grad: list[bool | None],
                                            no_grad: bool) -> None:
    """Random sequences of composites, each built twice over the same nodes (the second from the memo) and once
    over fresh nodes of the same values: equal values and requires_grad, in either grad mode and any mix of
    inputs requiring grad (or undecided)."""
    x, w, b = _inputs(seed)
    for t, flag in zip((x, w, b), grad, strict=True):
        t.requires_grad = flag
    with Tensor.test(no_grad):
        for name in names:
            memo, again = OPS[name](x, w, b), OPS[name](x, w, b)
            fresh = OPS[name](_fresh(x), _fresh(w), _fresh(b))
            assert again.uop is memo.uop
            assert again.requires_grad == memo.requires_grad == fresh.requires_grad
            np.testing.assert_array_equal(again.numpy(), memo.numpy())
            np.testing.assert_allclose(memo.numpy(), fresh.numpy(), rtol=1e-6, atol=1e-6)
            if memo.shape == x.shape:  # the next op reads this one's result (a graph, not a buffer)
                x = memo
