"""Losses against torch.nn.functional (forward and gradient): cross entropy with class indices and probabilities
(label smoothing, ignore_index, class weights, every reduction), nll_loss, binary cross entropy on probabilities and
on logits (pos_weight, extreme logits), tinygrad's sparse_categorical_crossentropy, mse as plain ops, and errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import Tensor
from plygrad.ir import DTypeError, ShapeError

Array = np.ndarray[Any, Any]
REDUCTIONS = ("mean", "sum", "none")


def _targets(rng: np.random.Generator, shape: tuple[int, ...], classes: int, ignore: int | None) -> Array:
    """Class indices, about a quarter of them `ignore` when given (at least one kept, so 'mean' is finite)."""
    y = rng.integers(0, classes, size=shape).astype(np.int64)
    if ignore is not None and y.size:
        drop = rng.uniform(size=shape) < 0.25
        drop.flat[0] = False
        y[drop] = ignore
    return y


# ---- cross entropy --------------------------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_cross_entropy_with_class_indices_matches_torch(data: st.DataObject) -> None:
    batch = data.draw(st.integers(1, 3), label="batch")
    classes = data.draw(st.integers(2, 5), label="classes")
    extra = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2), label="extra axes"))
    reduction = data.draw(st.sampled_from(REDUCTIONS), label="reduction")
    smoothing = data.draw(st.sampled_from([0.0, 0.1, 0.5]), label="label_smoothing")
    ignore = data.draw(st.sampled_from([None, -100, 1]), label="ignore_index")
    weighted = data.draw(st.booleans(), label="weight")
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    x = rng.standard_normal((batch, classes, *extra)).astype(np.float32) * 2
    y = _targets(rng, (batch, *extra), classes, ignore)
    w = rng.uniform(0.5, 2.0, classes).astype(np.float32)
    kw: dict[str, Any] = {"reduction": reduction, "label_smoothing": smoothing}
    if ignore is not None:
        kw["ignore_index"] = ignore

    def ours(x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        return x.cross_entropy(y, weight=w if weighted else None, **kw)

    def theirs(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, y, weight=w if weighted else None, **kw)

    compare(ours, theirs, x, y, w, differentiable=[True, False, False], atol=1e-5)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_with_class_probabilities_matches_torch(reduction: str, smoothing: float) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    y = rng.uniform(size=(3, 4, 2)).astype(np.float32)
    y /= y.sum(1, keepdims=True)
    w = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    compare(lambda x, y: x.cross_entropy(y, reduction, smoothing),
            lambda x, y: F.cross_entropy(x, y, reduction=reduction, label_smoothing=smoothing), x, y)
    compare(lambda x, y, w: x.cross_entropy(y, reduction, smoothing, weight=w),
            lambda x, y, w: F.cross_entropy(x, y, w, reduction=reduction, label_smoothing=smoothing), x, y, w,
            differentiable=[True, False, False])


def test_cross_entropy_of_one_unbatched_sample() -> None:
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    compare(lambda x, y: x.cross_entropy(y), F.cross_entropy, x, np.array(2, dtype=np.int64))
    # torch 2.x fails on a 0-d target with label smoothing; the unbatched sample equals a batch of one
    single = Tensor(x).cross_entropy(Tensor(np.array(2, dtype=np.int64)), label_smoothing=0.1).numpy()
    want = F.cross_entropy(torch.from_numpy(x)[None], torch.tensor([2]), label_smoothing=0.1).numpy()
    np.testing.assert_allclose(single, want, rtol=1e-6)


def test_cross_entropy_is_stable_for_large_logits() -> None:
    x = np.array([[1000.0, -1000.0, 0.0], [-500.0, 500.0, 499.0]], dtype=np.float32)
    y = np.array([1, 2], dtype=np.int64)
    compare(lambda x, y: x.cross_entropy(y), F.cross_entropy, x, y)


# ---- nll ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignore", [None, 0])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_matches_torch(reduction: str, ignore: int | None, weighted: bool) -> None:
    rng = np.random.default_rng(2)
    logp = np.log(rng.dirichlet(np.ones(4), size=(5, 3)).transpose(0, 2, 1)).astype(np.float32)  # (5, 4, 3)
    y = _targets(rng, (5, 3), 4, None)
    y[0, 0] = 1
    w = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    kw: dict[str, Any] = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    compare(lambda x, y, w: x.nll_loss(y, w if weighted else None, **kw),
            lambda x, y, w: F.nll_loss(x, y, w if weighted else None, **kw), logp, y, w,
            differentiable=[True, False, False])


def test_nll_loss_after_log_softmax_is_cross_entropy() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = rng.integers(0, 5, 6).astype(np.int32)
    a = Tensor(x).log_softmax().nll_loss(Tensor(y)).numpy()
    b = Tensor(x).cross_entropy(Tensor(y)).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-6)


# ---- sparse categorical cross entropy (tinygrad: classes last) ------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(("ignore", "smoothing"), [(-1, 0.0), (-1, 0.3), (2, 0.1)])
def test_sparse_categorical_crossentropy_is_cross_entropy_with_classes_last(reduction: str, ignore: int,
                                                                             smoothing: float) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    y = _targets(rng, (2, 3), 5, ignore)
    compare(lambda x, y: x.sparse_categorical_crossentropy(y, ignore, smoothing, reduction),
            lambda x, y: F.cross_entropy(x.movedim(-1, 1), y, ignore_index=ignore, label_smoothing=smoothing,
                                         reduction=reduction), x, y)


# ---- binary cross entropy -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy_matches_torch(reduction: str) -> None:
    rng = np.random.default_rng(5)
    p = rng.uniform(0.02, 0.98, (3, 4)).astype(np.float32)
    y = rng.uniform(size=(3, 4)).astype(np.float32)  # soft targets are allowed too
    compare(lambda p, y: p.binary_crossentropy(y, reduction),
            lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction), p, y, differentiable=[True, False])


def test_binary_crossentropy_clamps_the_log_at_minus_100() -> None:
    p = np.array([0.0, 1.0, 0.0, 1.0], dtype=np.float32)
    y = np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32)
    compare(lambda p, y: p.binary_crossentropy(y, "none"), lambda p, y: F.binary_cross_entropy(p, y, reduction="none"),
            p, y, grad=False)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [False, True])
def test_binary_crossentropy_logits_matches_torch(reduction: str, pos_weight: bool) -> None:
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 4)) * 4).astype(np.float32)
    y = (rng.uniform(size=(3, 4)) < 0.5).astype(np.float32)
    pw = rng.uniform(0.5, 3.0, 4).astype(np.float32)
    compare(lambda x, y, w: x.binary_crossentropy_logits(y, reduction, w if pos_weight else None),
            lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, reduction=reduction,
                                                               pos_weight=w if pos_weight else None),
            x, y, pw, differentiable=[True, False, False])


def test_binary_crossentropy_logits_is_finite_for_huge_logits() -> None:
    x = np.array([-200.0, 200.0, -200.0, 200.0], dtype=np.float32)
    y = np.array([0.0, 1.0, 1.0, 0.0], dtype=np.float32)
    compare(lambda x, y: x.binary_crossentropy_logits(y, "none"),
            lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"), x, y, differentiable=[True, False])


def test_binary_crossentropy_takes_integer_targets() -> None:
    p = Tensor([0.1, 0.9, 0.2])
    want = F.binary_cross_entropy(torch.tensor([0.1, 0.9, 0.2]), torch.tensor([0.0, 1.0, 0.0])).item()
    assert Tensor.item(p.binary_crossentropy(Tensor([0, 1, 0]))) == pytest.approx(want, rel=1e-6)


# ---- mse (plain ops) ------------------------------------------------------------------------------------------------
def test_mse_is_plain_ops() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    compare(lambda a, b: (a - b).square().mean(), F.mse_loss, a, b)


# ---- errors ---------------------------------------------------------------------------------------------------------
def test_loss_errors() -> None:
    x = Tensor.ones(4, 3)
    with pytest.raises(ValueError, match="cross_entropy: reduction 'avg' is not one of"):
        x.cross_entropy(Tensor([0, 1, 2, 0]), reduction="avg")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match=r"cross_entropy: class-index target of shape \(3,\)"):
        x.cross_entropy(Tensor([0, 1, 2]))
    with pytest.raises(ShapeError, match=r"cross_entropy: probability target of shape \(4, 2\)"):
        x.cross_entropy(Tensor.ones(4, 2))
    with pytest.raises(ValueError, match=r"label_smoothing 1\.5"):
        x.cross_entropy(Tensor([0, 1, 2, 0]), label_smoothing=1.5)
    with pytest.raises(ShapeError, match=r"weight of shape \(2,\) should be \(3,\)"):
        x.cross_entropy(Tensor([0, 1, 2, 0]), weight=Tensor.ones(2))
    with pytest.raises(DTypeError, match="nll_loss: targets must be class indices"):
        x.nll_loss(Tensor.ones(4))
    with pytest.raises(ShapeError, match="binary_crossentropy: target of shape"):
        x.binary_crossentropy(Tensor.ones(3))
    with pytest.raises(ValueError, match="binary_crossentropy_logits: reduction"):
        x.binary_crossentropy_logits(x, reduction="max")  # type: ignore[arg-type]
