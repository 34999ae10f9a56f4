"""Custom-gradient marks (gradient_marks.custom_gradient_mark): an embedding lookup carries one, and a graph rebuilt
by substitute_keeping_marks keeps it with its operands substituted. Graphs only: this package's session runs no
kernels (tests/test_train_pieces.py checks the gradient's numbers)."""

from __future__ import annotations

import numpy as np

from plygrad.frontend import Tensor, gradient_marks, nn


def _layer(vocab: int, dim: int) -> nn.Embedding:
    layer = nn.Embedding.__new__(nn.Embedding)  # no __init__: its random weight would need a scheduler
    layer.vocab_size, layer.embed_size = vocab, dim
    layer.weight = Tensor(np.zeros((vocab, dim), np.float32), requires_grad=True)
    return layer


def test_a_rebuilt_graph_keeps_its_custom_gradient_mark() -> None:
    layer = _layer(6, 2)
    ids = Tensor(np.array([1, 1, 4], dtype=np.int32))
    rows = layer(ids)
    marked = [n for n in rows.uop.toposort if gradient_marks.custom_gradient(n) is not None]
    assert len(marked) == 1
    other = Tensor(np.zeros((6, 2), np.float32), requires_grad=True)
    rebuilt = gradient_marks.substitute_keeping_marks(rows.uop, {layer.weight.uop: other.uop})
    custom = gradient_marks.custom_gradient(rebuilt)
    assert custom is not None and custom[0][0] is other.uop, "the operands follow the substitution"
