"""The builtin exception classes plygrad's errors subclass, against PyTorch's for the same mistake.

A shape mismatch (matmul, cat, conv, einsum, gather, broadcasting, reshape) is a `ShapeError`, which is a
RuntimeError as PyTorch raises and a ValueError as NumPy raises; an axis out of range is an `AxisError`, also an
IndexError (PyTorch's "Dimension out of range"); a size or axis that is not an int a `SizeTypeError`, also a
TypeError; an index out of range an IndexError; a dtype an op refuses a
`DTypeError`, a TypeError and a RuntimeError (PyTorch's "not implemented for 'Float'"); a bad argument value an
`ArgumentValueError`, a ValueError and a RuntimeError. Each case checks that torch raises the builtin class too, so
the table cannot drift from PyTorch. Nothing here realizes a tensor: every error is raised while the graph is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as tf

from plygrad.frontend import ArgumentValueError, AxisError, DTypeError, ShapeError, Tensor
from plygrad.ir import SizeTypeError


def arr(*shape: int, dtype: str = "float32") -> np.ndarray[Any, Any]:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def pg(*shape: int, dtype: str = "float32") -> Tensor:
    return Tensor(arr(*shape, dtype=dtype))


def pt(*shape: int, dtype: str = "float32") -> torch.Tensor:
    return torch.from_numpy(arr(*shape, dtype=dtype))


Case = tuple[str, type[BaseException], type[Exception], Callable[[], Any], Callable[[], Any]]
# (what, the builtin both must raise, plygrad's own class, plygrad's call, torch's call)
CASES: list[Case] = [
    ("matmul inner sizes", RuntimeError, ShapeError, lambda: pg(2, 3) @ pg(4, 5), lambda: pt(2, 3) @ pt(4, 5)),
    ("matmul of a 0-d", RuntimeError, ShapeError, lambda: pg(1).reshape(()) @ pg(3),
     lambda: pt(1).reshape(()) @ pt(3)),
    ("dot sizes", RuntimeError, ShapeError, lambda: pg(3).dot(pg(4)), lambda: pt(3).dot(pt(4))),
    ("broadcast", RuntimeError, ShapeError, lambda: pg(2, 3) + pg(4, 3), lambda: pt(2, 3) + pt(4, 3)),
    ("where broadcast", RuntimeError, ShapeError, lambda: (pg(2, 3) > 1).where(pg(4, 3), pg(2, 3)),
     lambda: torch.where(pt(2, 3) > 1, pt(4, 3), pt(2, 3))),
    ("reshape count", RuntimeError, ShapeError, lambda: pg(2, 3).reshape(7), lambda: pt(2, 3).reshape(7)),
    ("reshape two -1", RuntimeError, ShapeError, lambda: pg(2, 3).reshape(-1, -1), lambda: pt(2, 3).reshape(-1, -1)),
    ("expand a size-2 axis", RuntimeError, ShapeError, lambda: pg(2, 3).expand(4, 3), lambda: pt(2, 3).expand(4, 3)),
    ("permute repeats", RuntimeError, ShapeError, lambda: pg(2, 3).permute(0, 0), lambda: pt(2, 3).permute(0, 0)),
    ("flip repeats", RuntimeError, ShapeError, lambda: pg(2, 3).flip((0, 0)), lambda: pt(2, 3).flip((0, 0))),
    ("cat sizes", RuntimeError, ShapeError, lambda: Tensor.cat(pg(2, 3), pg(2, 4)),
     lambda: torch.cat([pt(2, 3), pt(2, 4)])),
    ("stack shapes", RuntimeError, ShapeError, lambda: Tensor.stack(pg(2, 3), pg(2, 4)),
     lambda: torch.stack([pt(2, 3), pt(2, 4)])),
    ("gather ranks", RuntimeError, ShapeError, lambda: pg(2, 3).gather(0, pg(2, dtype="int64")),
     lambda: pt(2, 3).gather(0, pt(2, dtype="int64"))),
    ("gather index too large", RuntimeError, ShapeError, lambda: pg(2, 3).gather(1, pg(3, 3, dtype="int64")),
     lambda: pt(2, 3).gather(1, pt(3, 3, dtype="int64"))),
    ("diagonal of one axis twice", RuntimeError, ShapeError, lambda: pg(2, 3).diagonal(0, 0, 0),
     lambda: pt(2, 3).diagonal(0, 0, 0)),
    ("einsum label sizes", RuntimeError, ShapeError, lambda: Tensor.einsum("ij,jk->ik", pg(2, 3), pg(4, 5)),
     lambda: torch.einsum("ij,jk->ik", pt(2, 3), pt(4, 5))),
    ("conv2d channels", RuntimeError, ShapeError, lambda: pg(1, 3, 5, 5).conv2d(pg(4, 2, 3, 3)),
     lambda: tf.conv2d(pt(1, 3, 5, 5), pt(4, 2, 3, 3))),
    ("conv2d kernel past the input", RuntimeError, ShapeError, lambda: pg(1, 3, 2, 2).conv2d(pg(4, 3, 3, 3)),
     lambda: tf.conv2d(pt(1, 3, 2, 2), pt(4, 3, 3, 3))),
    ("max_pool2d window past the input", RuntimeError, ShapeError, lambda: pg(1, 1, 2, 2).max_pool2d(3),
     lambda: tf.max_pool2d(pt(1, 1, 2, 2), 3)),
    ("a negative size", RuntimeError, ShapeError, lambda: Tensor.zeros(-2), lambda: torch.zeros(-2)),
    ("item of 3 elements", RuntimeError, ShapeError, lambda: pg(3).item(), lambda: pt(3).item()),
    ("tril of a vector", RuntimeError, ShapeError, lambda: pg(3).tril(), lambda: pt(3).tril()),
    ("unflatten sizes", RuntimeError, ShapeError, lambda: pg(6).unflatten(0, (4, 2)),
     lambda: pt(6).unflatten(0, (4, 2))),
    ("split size 0", RuntimeError, ShapeError, lambda: pg(4).split(0), lambda: pt(4).split(0)),
    ("chunk 0", RuntimeError, ShapeError, lambda: pg(4).chunk(0), lambda: pt(4).chunk(0)),
    *[(f"{op} axis out of range", IndexError, AxisError, pg_fn, torch_fn) for op, pg_fn, torch_fn in [
        ("sum", lambda: pg(2, 3).sum(5), lambda: pt(2, 3).sum(5)),
        ("flip", lambda: pg(2, 3).flip(3), lambda: pt(2, 3).flip(3)),
        ("permute", lambda: pg(2, 3).permute(0, 2), lambda: pt(2, 3).permute(0, 2)),
        ("transpose", lambda: pg(2, 3).transpose(0, 4), lambda: pt(2, 3).transpose(0, 4)),
        ("squeeze", lambda: pg(2, 3).squeeze(4), lambda: pt(2, 3).squeeze(4)),
        ("unsqueeze", lambda: pg(2, 3).unsqueeze(5), lambda: pt(2, 3).unsqueeze(5)),
        ("softmax", lambda: pg(2, 3).softmax(3), lambda: pt(2, 3).softmax(3)),
        ("cat", lambda: Tensor.cat(pg(2, 3), pg(2, 3), dim=4), lambda: torch.cat([pt(2, 3), pt(2, 3)], dim=4)),
        ("gather", lambda: pg(2, 3).gather(5, pg(2, 3, dtype="int64")),
         lambda: pt(2, 3).gather(5, pt(2, 3, dtype="int64"))),
        ("diagonal", lambda: pg(2, 3).diagonal(0, 0, 3), lambda: pt(2, 3).diagonal(0, 0, 3)),
        ("sort", lambda: pg(3).sort(2), lambda: pt(3).sort(2)),
        ("cumsum", lambda: pg(3).cumsum(2), lambda: pt(3).cumsum(2)),
        ("argmax", lambda: pg(3).argmax(2), lambda: pt(3).argmax(2)),
        ("roll", lambda: pg(2, 3).roll(1, 5), lambda: pt(2, 3).roll(1, 5)),
        ("flatten", lambda: pg(2, 3).flatten(0, 5), lambda: pt(2, 3).flatten(0, 5)),
        ("index_select", lambda: pg(2, 3).index_select(3, pg(2, dtype="int64")),
         lambda: pt(2, 3).index_select(3, pt(2, dtype="int64"))),
    ]],
    ("index out of bounds", IndexError, IndexError, lambda: pg(2, 3)[5], lambda: pt(2, 3)[5]),
    ("too many indices", IndexError, IndexError, lambda: pg(2, 3)[0, 0, 0], lambda: pt(2, 3)[0, 0, 0]),
    ("bitwise and of floats", RuntimeError, DTypeError, lambda: pg(3) & pg(3), lambda: pt(3) & pt(3)),
    ("a size that is a float", TypeError, SizeTypeError, lambda: Tensor.zeros(2.5), lambda: torch.zeros(2.5)),
    ("sizes that are floats", TypeError, SizeTypeError, lambda: Tensor.ones((2.0, 3)), lambda: torch.ones((2.0, 3))),
    ("an axis that is a float", TypeError, SizeTypeError, lambda: pg(2, 3).transpose(0.0, 1),
     lambda: pt(2, 3).transpose(0.0, 1)),
    ("topk k that is a float", TypeError, TypeError, lambda: pg(3).topk(1.5), lambda: pt(3).topk(1.5)),
    ("an index tensor of floats", RuntimeError, DTypeError, lambda: pg(3).gather(0, pg(3)),
     lambda: pt(3).gather(0, pt(3))),
    ("one_hot of floats", RuntimeError, DTypeError, lambda: pg(3).one_hot(3), lambda: tf.one_hot(pt(3), 3)),
    ("arange step 0", RuntimeError, ArgumentValueError, lambda: Tensor.arange(0, 5, 0), lambda: torch.arange(0, 5, 0)),
    ("linspace steps < 0", RuntimeError, ArgumentValueError, lambda: Tensor.linspace(0, 1, -1),
     lambda: torch.linspace(0, 1, -1)),
    ("topk k past the axis", RuntimeError, ArgumentValueError, lambda: pg(3).topk(5), lambda: pt(3).topk(5)),
    ("one_hot num_classes -2", RuntimeError, ArgumentValueError, lambda: pg(3, dtype="int64").one_hot(-2),
     lambda: tf.one_hot(pt(3, dtype="int64"), -2)),
    ("multinomial 0 samples", RuntimeError, ArgumentValueError, lambda: pg(3).multinomial(0),
     lambda: pt(3).multinomial(0)),
    ("multinomial past the categories", RuntimeError, ArgumentValueError,
     lambda: pg(3).multinomial(4, replacement=False), lambda: pt(3).multinomial(4, replacement=False)),
    ("randint low >= high", RuntimeError, ArgumentValueError, lambda: Tensor.randint(3, low=5, high=5),
     lambda: torch.randint(5, 5, (3,))),
    ("einsum operand count", RuntimeError, ArgumentValueError, lambda: Tensor.einsum("ij,jk->ik", pg(2, 3)),
     lambda: torch.einsum("ij,jk->ik", pt(2, 3))),
    ("clamp without bounds", RuntimeError, ArgumentValueError, lambda: pg(3).clamp(), lambda: pt(3).clamp()),
    ("div rounding_mode", RuntimeError, ArgumentValueError, lambda: pg(3).div(pg(3), rounding_mode="up"),
     lambda: pt(3).div(pt(3), rounding_mode="up")),
    ("gelu approximate", RuntimeError, ArgumentValueError, lambda: pg(3).gelu(approximate="fast"),
     lambda: tf.gelu(pt(3), approximate="fast")),
    ("max_pool2d padding of 3 ints", RuntimeError, ArgumentValueError,
     lambda: pg(1, 1, 4, 4).max_pool2d(2, padding=(1, 1, 1)),
     lambda: tf.max_pool2d(pt(1, 1, 4, 4), 2, padding=(1, 1, 1))),
    ("pad mode", RuntimeError, ArgumentValueError, lambda: pg(3, 3).pad((1, 1), mode="mirror"),
     lambda: tf.pad(pt(3, 3), (1, 1), mode="mirror")),
    ("reflect pad past the axis", RuntimeError, ArgumentValueError, lambda: pg(1, 3).pad((3, 3), mode="reflect"),
     lambda: tf.pad(pt(1, 3), (3, 3), mode="reflect")),
    ("interpolate mode", RuntimeError, ArgumentValueError, lambda: pg(1, 1, 2, 2).interpolate((3, 3), mode="cubic"),
     lambda: tf.interpolate(pt(1, 1, 2, 2), (3, 3), mode="cubic")),
    ("scatter reduce", RuntimeError, ArgumentValueError,
     lambda: pg(3).scatter(0, pg(1, dtype="int64"), pg(1), reduce="max"),
     lambda: pt(3).scatter(0, pt(1, dtype="int64"), pt(1), reduce="max")),
    ("meshgrid indexing", RuntimeError, ArgumentValueError, lambda: pg(3).meshgrid(pg(2), indexing="yx"),
     lambda: torch.meshgrid(pt(3), pt(2), indexing="yx")),
    ("randperm of -1", RuntimeError, ArgumentValueError, lambda: Tensor.randperm(-1), lambda: torch.randperm(-1)),
    ("cross_entropy batch sizes", ValueError, ShapeError, lambda: pg(2, 3).cross_entropy(pg(4, dtype="int64")),
     lambda: tf.cross_entropy(pt(2, 3), pt(4, dtype="int64"))),
    ("len of a 0-d", TypeError, TypeError, lambda: len(pg(1).reshape(())), lambda: len(pt(1).reshape(()))),
]


@pytest.mark.parametrize(("builtin", "own", "pg_call", "torch_call"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_builtin_pytorch_raises_catches_plygrad_s_error(builtin: type[BaseException], own: type[Exception],
                                                            pg_call: Callable[[], Any],
                                                            torch_call: Callable[[], Any]) -> None:
    with pytest.raises(builtin):
        torch_call()
    with pytest.raises(own) as caught:
        pg_call()
    assert isinstance(caught.value, builtin), f"{type(caught.value).__mro__} is not a {builtin.__name__}"


def test_shape_and_axis_errors_stay_value_errors() -> None:
    """Code written against NumPy (and plygrad before) catches ValueError; NumPy's AxisError is one too."""
    assert issubclass(ShapeError, ValueError) and issubclass(AxisError, ValueError)
    assert issubclass(AxisError, ShapeError) and issubclass(np.exceptions.AxisError, IndexError)
    with pytest.raises(np.exceptions.AxisError):
        np.zeros((2, 3)).sum(5)
    with pytest.raises(ValueError, match="axis 5 is out of range"):
        pg(2, 3).sum(5)
