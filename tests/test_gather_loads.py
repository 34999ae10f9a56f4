"""Gathers run as loads (codegen/gather.py): indexing with int tensors, `gather`, `take_along_dim`, `Embedding`
give NumPy's/PyTorch's values while the kernel does work in proportion to the result, not to result x axis size
(the one-hot selection the frontend builds was a reduction over the whole indexed axis)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.runtime import GlobalCounters

Array = np.ndarray[Any, Any]


def _ops_of(t: Tensor) -> tuple[Array, int]:
    """t's values and the ALU operations codegen estimated for computing it (inputs realized first)."""
    GlobalCounters.reset()
    values = t.numpy()
    return values, GlobalCounters.global_ops


@settings(max_examples=20, deadline=None)
@given(vocab=st.integers(1, 40000), dim=st.integers(1, 24), batch=st.lists(st.integers(1, 6), min_size=1, max_size=2),
       dtype=st.sampled_from(["float32", "float16", "int32", "bool"]), seed=st.integers(0, 2**16))
def test_indexing_rows_matches_numpy_in_work_of_the_result(vocab: int, dim: int, batch: list[int], dtype: str,
                                                          seed: int) -> None:
    rng = np.random.default_rng(seed)
    table = (rng.standard_normal((vocab, dim)) * 50).astype(dtype)
    ids = rng.integers(-vocab, vocab, size=batch).astype(np.int32)
    weight = Tensor(table).realize()
    index = Tensor(ids).realize()
    got, ops = _ops_of(weight[index])
    np.testing.assert_array_equal(got, table[ids])
    outputs = int(np.prod(batch)) * dim
    assert ops <= 12 * outputs + 64, f"{ops} ops for {outputs} outputs from a {vocab}-row table: not a load"


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 7), cols=st.integers(1, 3000), k=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_gather_and_take_along_dim_match_torch(rows: int, cols: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    index = rng.integers(0, cols, size=(rows, k)).astype(np.int64)
    expected = torch.gather(torch.from_numpy(x), 1, torch.from_numpy(index)).numpy()
    xt, it = Tensor(x).realize(), Tensor(index.astype(np.int32)).realize()
    got, ops = _ops_of(xt.gather(1, it))
    np.testing.assert_array_equal(got, expected)
    assert ops <= 12 * rows * k + 64
    np.testing.assert_array_equal(xt.take_along_dim(it, 1).numpy(), expected)


def test_two_indexed_axes_and_negative_zero() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12.0
    x[1, 2, 3] = -0.0
    i, j = np.array([1, 0, -1]), np.array([2, 1, 3])
    got, ops = _ops_of(Tensor(x).realize()[Tensor(i.astype(np.int32)), :, Tensor(j.astype(np.int32))])
    np.testing.assert_array_equal(got, x[i, :, j])
    assert np.signbit(got[2, 2]), "the picked -0.0 stays -0.0 (a sum of zeros would give +0.0)"
    assert ops <= 12 * got.size + 64


def test_embedding_is_a_load_and_its_gradient_reaches_the_looked_up_rows() -> None:
    vocab, dim = 30522, 32
    emb = nn.Embedding(vocab, dim)
    ids = np.random.default_rng(1).integers(0, vocab, size=(4, 20)).astype(np.int32)
    table = emb.weight.numpy()
    got, ops = _ops_of(emb(Tensor(ids)))
    np.testing.assert_array_equal(got, table[ids])
    assert ops <= 12 * got.size + 64, f"{ops} ops: the lookup still reduces over the vocabulary"
    out_of_range = emb(Tensor(np.array([[vocab, -1]], dtype=np.int32))).numpy()
    np.testing.assert_array_equal(out_of_range, np.zeros((1, 2, dim), np.float32))
    emb.weight.requires_grad = True
    emb(Tensor(ids)).sum().backward()
    assert emb.weight.grad is not None
    expected = np.zeros((vocab, dim), np.float32)
    np.add.at(expected, ids, 1.0)
    np.testing.assert_array_equal(emb.weight.grad.numpy(), expected)


def test_half_embedding_matches_torch() -> None:
    table = np.random.default_rng(2).standard_normal((1000, 8)).astype(np.float16)
    ids = np.array([[0, 999, 17]], dtype=np.int32)
    emb = nn.Embedding(1000, 8)
    emb.weight = Tensor(table)
    assert emb(Tensor(ids)).dtype == dtypes.float16
    expected = torch.nn.functional.embedding(torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(table))
    np.testing.assert_array_equal(emb(Tensor(ids)).numpy(), expected.numpy())
