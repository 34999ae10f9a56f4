"""Losses with PyTorch's numbers: cross_entropy (class indices or probabilities, label smoothing, ignore_index),
nll_loss, sparse_categorical_crossentropy, binary_crossentropy and its logits form.

The class-index losses pick the target's log-probability with a one-hot comparison against a counter, so nothing
needs a gather.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

from plygrad.frontend import core
from plygrad.ir import DTypeError, ShapeError

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

Reduction: TypeAlias = Literal["mean", "sum", "none"]


REDUCTIONS: tuple[Reduction, ...] = ("mean", "sum", "none")


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction {reduction!r} is not one of 'mean', 'sum', 'none'")


def _reduced(x: Tensor, reduction: Reduction) -> Tensor:
    if reduction == "mean":
        return x.mean()
    return x.sum() if reduction == "sum" else x


def _class_loss(x: Tensor, target: Tensor, *, axis: int, weight: Tensor | None, ignore_index: int | None,
                smoothing: float, reduction: Reduction, op: str) -> Tensor:
    """The negative log-likelihood of log-probabilities `self` with classes along `axis`, PyTorch's way.

    Class-index targets (integers, the input's shape without `axis`): -w[y] * logp[y], blended with the
    smoothing term -sum_c w[c] logp[c] / C; ignored targets give 0, and 'mean' divides by the total weight of
    the targets kept. Probability targets (floats, the input's shape): -sum_c w[c] y[c] logp[c] with y
    smoothed toward uniform; 'mean' averages over the samples."""
    _check_reduction(reduction, op)
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing {smoothing} must be between 0 and 1")
    classes = x.shape[axis] if x.ndim else 0
    class_shape = tuple(classes if i == axis else 1 for i in range(x.ndim))
    if weight is not None and weight.shape != (classes,):
        raise ShapeError(f"{op}: weight of shape {weight.shape} should be ({classes},), one per class of the "
                         f"input of shape {x.shape}")
    per_class = None if weight is None else weight._cast_to(x.dtype).reshape(class_shape)
    if target.dtype.is_float:
        if target.shape != x.shape:
            raise ShapeError(f"{op}: probability target of shape {target.shape} should have the input's shape "
                             f"{x.shape} (class-index targets must be an integer dtype)")
        probs = target._cast_to(x.dtype)
        if smoothing:
            probs = probs.mul(1.0 - smoothing).add(smoothing / classes)
        terms = x.mul(probs) if per_class is None else x.mul(probs).mul(per_class)
        return _reduced(terms.sum(axis).neg(), reduction)
    labels_shape = x.shape[:axis] + x.shape[axis + 1:]
    if target.dtype.is_bool or target.shape != labels_shape:
        raise ShapeError(f"{op}: class-index target of shape {target.shape} and dtype {target.dtype} should be "
                         f"integers of shape {labels_shape} (the input's {x.shape} without the class axis "
                         f"{axis})")
    hot = core.int_range(x, classes).reshape(class_shape).eq(target.unsqueeze(axis))
    weighted = x if per_class is None else x.mul(per_class)
    loss = hot.where(weighted, 0.0).sum(axis).neg()
    if smoothing:
        loss = loss.mul(1.0 - smoothing).add(weighted.sum(axis).neg().mul(smoothing / classes))
    kept = None if ignore_index is None else target.ne(ignore_index)
    if kept is not None:
        loss = kept.where(loss, 0.0)
    if reduction != "mean" or (per_class is None and kept is None):
        return _reduced(loss, reduction)
    if per_class is None:
        assert kept is not None
        count = kept.sum()._cast_to(x.dtype)
    else:
        target_weight = hot.where(per_class, 0.0).sum(axis)
        count = (target_weight if kept is None else kept.where(target_weight, 0.0)).sum()
    return loss.sum().div(count)


def cross_entropy(x: Tensor, Y: Tensor, reduction: Reduction = "mean", label_smoothing: float = 0.0,  # noqa: N803
                  ignore_index: int = -100, weight: Tensor | None = None) -> Tensor:
    """`F.cross_entropy` of logits `self` (N, C, *d) or (C,) and class indices or class probabilities `Y`.

    `ignore_index` and `weight` are PyTorch's (tinygrad has neither); label smoothing as PyTorch."""
    axis = 1 if x.ndim >= 2 else 0
    if x.ndim == 0:
        raise ShapeError(f"cross_entropy: logits of shape {x.shape} need a class axis")
    return _class_loss(x.log_softmax(axis), Y, axis=axis, weight=weight, ignore_index=ignore_index,
                                              smoothing=label_smoothing, reduction=reduction, op="cross_entropy")


def nll_loss(x: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,  # noqa: N803
             reduction: Reduction = "mean") -> Tensor:
    """`F.nll_loss` of log-probabilities `self` (N, C, *d) or (C,) and class indices `Y`."""
    if x.ndim == 0:
        raise ShapeError(f"nll_loss: log-probabilities of shape {x.shape} need a class axis")
    if Y.dtype.is_float:
        raise DTypeError(f"nll_loss: targets must be class indices of an integer dtype, not {Y.dtype}")
    axis = 1 if x.ndim >= 2 else 0
    return _class_loss(x, Y, axis=axis, weight=weight, ignore_index=ignore_index, smoothing=0.0,
                            reduction=reduction, op="nll_loss")


def sparse_categorical_crossentropy(x: Tensor, Y: Tensor, ignore_index: int = -1,  # noqa: N803
                                    label_smoothing: float = 0.0, reduction: Reduction = "mean") -> Tensor:
    """Cross entropy of logits with the classes on the LAST axis and integer targets (tinygrad's loss; the
    same numbers as F.cross_entropy with the class axis moved to 1)."""
    if x.ndim == 0:
        raise ShapeError(f"sparse_categorical_crossentropy: logits of shape {x.shape} need a class axis")
    if Y.dtype.is_float:
        raise DTypeError(f"sparse_categorical_crossentropy: targets must be class indices of an integer dtype, "
                         f"not {Y.dtype}")
    axis = x.ndim - 1
    return _class_loss(x.log_softmax(axis), Y, axis=axis, weight=None, ignore_index=ignore_index,
                                              smoothing=label_smoothing, reduction=reduction,
                                              op="sparse_categorical_crossentropy")


def binary_crossentropy(t: Tensor, Y: Tensor, reduction: Reduction = "mean") -> Tensor:  # noqa: N803
    """`F.binary_cross_entropy` of probabilities `self`: each log is clamped at -100 as PyTorch does, so a
    probability of exactly 0 or 1 gives a finite loss."""
    _check_reduction(reduction, "binary_crossentropy")
    if Y.shape != t.shape:
        raise ShapeError(f"binary_crossentropy: target of shape {Y.shape} should match the input's {t.shape}")
    x = core.float_input(t)
    y = Y._cast_to(x.dtype)
    log_p = x.log().maximum(-100.0)
    log_q = x.sub(1.0, reverse=True).log().maximum(-100.0)
    return _reduced(y.mul(log_p).add(y.sub(1.0, reverse=True).mul(log_q)).neg(), reduction)


def binary_crossentropy_logits(t: Tensor, Y: Tensor, reduction: Reduction = "mean",  # noqa: N803
                               pos_weight: Tensor | None = None) -> Tensor:
    """`F.binary_cross_entropy_with_logits`: (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x)), with the
    softplus written as log(1 + exp(-|x|)) + max(-x, 0) so large logits do not overflow."""
    _check_reduction(reduction, "binary_crossentropy_logits")
    if Y.shape != t.shape:
        raise ShapeError(f"binary_crossentropy_logits: target of shape {Y.shape} should match the input's "
                         f"{t.shape}")
    x = core.float_input(t)
    y = Y._cast_to(x.dtype)
    softplus_neg = x.abs().neg().exp().add(1.0).log().add(x.neg().relu())
    if pos_weight is not None:
        softplus_neg = softplus_neg.mul(pos_weight._cast_to(x.dtype).sub(1.0).mul(y).add(1.0))
    return _reduced(y.sub(1.0, reverse=True).mul(x).add(softplus_neg), reduction)
