"""Graph building without a scheduler: shapes, dtypes and promotion, the IR the frontend emits, errors, repr."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plygrad.frontend import DTypeError, ShapeError, Tensor, dtypes
from plygrad.frontend.reduce import BLOCK, SPLIT_ABOVE
from plygrad.ir import DType, Ops, Stage, UOp, broadcast_shapes, deserialize, serialize, verify

DIMS = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def tensor_stage_ok(t: Tensor) -> None:
    """The graph passes the TENSOR verifier and survives the byte round trip the scheduler sees."""
    sink = UOp(Ops.SINK, dtypes.void, (t.uop,))
    verify(sink, Stage.TENSOR)
    assert deserialize(serialize(sink, Stage.TENSOR), Stage.TENSOR) is sink


@given(DIMS, DIMS)
def test_broadcasting_binary_ops_have_numpy_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    x, y = Tensor.ones(a), Tensor.zeros(b)
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ShapeError):
            x + y
        return
    assert broadcast_shapes(a, b) == expected
    out = x * y + 1
    assert out.shape == expected
    tensor_stage_ok(out)


@pytest.mark.parametrize(("left", "right", "expected"), [
    (dtypes.int32, 1.5, dtypes.float32), (dtypes.float16, 1.5, dtypes.float16), (dtypes.bool, 2, dtypes.int32),
    (dtypes.int8, dtypes.uint8, dtypes.int16), (dtypes.float16, dtypes.bfloat16, dtypes.float32),
    (dtypes.int32, dtypes.float16, dtypes.float16), (dtypes.uint8, 300, dtypes.uint8),
])
def test_promotion_follows_pytorch(left: object, right: object, expected: object) -> None:
    x = Tensor.ones(3, dtype=left)  # type: ignore[arg-type]
    y = Tensor.ones(3, dtype=right) if not isinstance(right, (int, float)) else right  # type: ignore[arg-type]
    assert (x + y).dtype is expected
    assert (y + x).dtype is expected


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.bool])
def test_true_division_of_integers_gives_the_default_float(dtype: object) -> None:
    x = Tensor.ones(2, dtype=dtype)  # type: ignore[arg-type]
    assert (x / x).dtype is dtypes.float32
    assert x.exp().dtype is dtypes.float32


def test_comparisons_give_bool_and_eq_builds_a_graph() -> None:
    x = Tensor.ones(2, 3)
    for cmp in (x < 1, x <= 1, x > 1, x >= 1, x == 1, x != 1):
        assert isinstance(cmp, Tensor) and cmp.dtype is dtypes.bool and cmp.shape == (2, 3)
        tensor_stage_ok(cmp)
    assert len({x, Tensor.ones(2, 3)}) == 2  # still hashable by identity


@pytest.mark.parametrize(("dtype", "acc"), [(dtypes.bool, dtypes.int32), (dtypes.int8, dtypes.int32),
                                            (dtypes.uint16, dtypes.uint32), (dtypes.float16, dtypes.float16)])
def test_sum_accumulates_per_sum_acc_dtype(dtype: object, acc: object) -> None:
    assert Tensor.ones(4, 5, dtype=dtype).sum(1).dtype is acc  # type: ignore[arg-type]


@given(DIMS, st.data())
def test_reduce_shapes_match_numpy(shape: tuple[int, ...], data: st.DataObject) -> None:
    x = Tensor.ones(shape)
    ref = np.ones(shape)
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape),
                              max_size=len(shape)) if shape else st.just([]))
    keep = data.draw(st.booleans())
    assert x.sum(tuple(axes), keepdim=keep).shape == ref.sum(tuple(axes), keepdims=keep).shape
    assert x.mean(None).shape == ()
    tensor_stage_ok(x.sum(tuple(axes), keepdim=keep))


@given(DIMS)
def test_movement_shapes_match_numpy(shape: tuple[int, ...]) -> None:
    x, ref = Tensor.ones(shape), np.ones(shape)
    assert x.reshape(-1).shape == ref.reshape(-1).shape
    assert x.T.shape == ref.T.shape
    assert x.flatten().shape == ref.flatten().shape
    assert x.unsqueeze(0).shape == np.expand_dims(ref, 0).shape
    assert x.squeeze().shape == ref.squeeze().shape
    if shape:
        assert x.flip(0).shape == shape
        assert x.pad(((1, 2),) + ((0, 0),) * (len(shape) - 1)).shape == (shape[0] + 3, *shape[1:])
        tensor_stage_ok(x.flip(0).pad(((1, 2),) + ((0, 0),) * (len(shape) - 1)))


@pytest.mark.parametrize("index", [
    (1,), (slice(1, 3), slice(None, None, 2)), (-1,), (None, Ellipsis, 0), (Ellipsis, slice(None, None, -2)),
    (slice(None, None, -1), None, slice(1, None, 3)), (slice(5, 1, -2),), (0, 1, 2),
])
def test_basic_indexing_shapes_match_numpy(index: tuple[object, ...]) -> None:
    x, ref = Tensor.ones(4, 5, 6), np.ones((4, 5, 6))
    got = x[index]  # type: ignore[index]
    assert got.shape == ref[index].shape
    tensor_stage_ok(got)


@pytest.mark.parametrize(("a", "b"), [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                                      ((5, 2, 3), (3, 4)), ((1, 2, 3), (6, 3, 2))])
def test_matmul_shapes_match_numpy(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    got = Tensor.ones(a) @ Tensor.ones(b)
    assert got.shape == (np.ones(a) @ np.ones(b)).shape
    tensor_stage_ok(got)


def test_errors_name_the_op_and_shapes() -> None:
    x = Tensor.ones(2, 3)
    with pytest.raises(ShapeError, match=r"reshape of shape \(2, 3\).*\(4, 2\)"):
        x.reshape(4, 2)
    with pytest.raises(ShapeError, match=r"matmul of shapes \(2, 3\) and \(2, 3\)"):
        x @ x
    with pytest.raises(ShapeError, match=r"sum: axis 2 is out of range.*\(2, 3\)"):
        x.sum(2)
    with pytest.raises(ShapeError, match=r"do not broadcast"):
        x + Tensor.ones(4)
    with pytest.raises(ShapeError, match="expand"):
        x.expand(4, 3)
    with pytest.raises(ShapeError, match="permutation"):
        x.permute(0, 0)
    with pytest.raises(IndexError, match="out of bounds"):
        x[2]
    with pytest.raises(DTypeError, match="bool"):
        -Tensor.ones(2, dtype=dtypes.bool)
    with pytest.raises(DTypeError, match="rand"):
        Tensor.rand(2, dtype=dtypes.int32)


def test_repr_says_shape_dtype_device_and_laziness() -> None:
    x = Tensor(np.zeros((2, 2), dtype=np.float32))
    assert repr(x) == "<Tensor shape=(2, 2) dtype=float32 device=CPU realized>"
    assert repr(x + 1) == "<Tensor shape=(2, 2) dtype=float32 device=CPU lazy ADD>"


def test_creation_dtypes_follow_pytorch() -> None:
    assert Tensor([1, 2]).dtype is dtypes.int32
    assert Tensor([1.0, 2]).dtype is dtypes.float32
    assert Tensor([True]).dtype is dtypes.bool
    assert Tensor(np.zeros(3, dtype=np.float64)).dtype is dtypes.float64
    assert Tensor(2.5).shape == () and Tensor(2.5).dtype is dtypes.float32
    assert Tensor.arange(5).dtype is dtypes.int32 and Tensor.arange(0, 1, 0.25).shape == (4,)
    assert Tensor.eye(3, 4).shape == (3, 4)
    assert Tensor.zeros(2, 3).numel() == 6 and len(Tensor.zeros(2, 3)) == 2 and Tensor.zeros(2, 3).ndim == 2
    assert Tensor.ones(2).zeros_like().shape == (2,)
    assert Tensor.ones(2, dtype=dtypes.int8).ones_like().dtype is dtypes.int8


def _rand_binds(t: Tensor) -> list[int]:
    """The values bound to a draw's variables: its counter offset, then its seed (randomness/stream.py)."""
    binds = sorted((n for n in t.uop.toposort if n.op is Ops.BIND), key=lambda b: str(b.src[0].arg[0]))
    return [int(b.src[1].arg) for b in binds][::-1]  # rng_ofs<k> sorts after rng_key<k>


def test_rand_graphs_are_fixed_by_the_seed_and_advance_per_call() -> None:
    Tensor.manual_seed(3)
    first, second = Tensor.rand(5), Tensor.rand(5)
    assert _rand_binds(first) == [0, 3] and _rand_binds(second) == [5, 3], "each call draws the next counter values"
    Tensor.manual_seed(3)
    assert _rand_binds(Tensor.rand(5)) == [0, 3], "the same seed binds the same values"
    assert any(node.op is Ops.THREEFRY for node in first.uop.toposort)
    tensor_stage_ok(Tensor.randn(2, 3))


@given(st.integers(1, 3), st.integers(2**14 - 3, 2**22), st.sampled_from([dtypes.float32, dtypes.float16]))
def test_long_float_sums_are_blocked_so_no_accumulator_adds_more_than_a_block(rows: int, n: int, dt: DType) -> None:
    x = Tensor.empty(rows, n, dtype=dt)
    out = x.sum(1)
    assert out.shape == (rows,) and out.dtype is dt
    reduces = [u for u in UOp(Ops.SINK, dtypes.void, (out.uop,)).toposort if u.op is Ops.REDUCE]
    for r in reduces:
        src_shape = r.src[0].shape
        assert src_shape is not None
        terms = 1
        for a in r.arg[1]:
            terms *= src_shape[a]
        assert terms <= max(BLOCK, SPLIT_ABOVE)
        assert r.dtype is dtypes.float32  # halves accumulate in float32
    assert len(reduces) == (1 if n <= SPLIT_ABOVE else 2 if -(-n // BLOCK) <= SPLIT_ABOVE else 3)
    tensor_stage_ok(out)


@given(st.integers(SPLIT_ABOVE + 1, BLOCK * BLOCK))
def test_a_blocked_sums_finishing_chain_adds_at_most_a_block(n: int) -> None:
    """Up to BLOCK * BLOCK terms, a float sum's blocks are made long enough (up to BLOCK rows of LANES) that the
    last reduction, one serial chain, adds at most BLOCK partials: a 4096 x 4096 sum's finishing kernel adds 4096,
    not 16384."""
    reduces = [u for u in UOp(Ops.SINK, dtypes.void, (Tensor.empty(n).sum().uop,)).toposort if u.op is Ops.REDUCE]
    assert len(reduces) == 2  # toposort: the blocks' sums, then the finishing one
    for r in reduces:
        src_shape = r.src[0].shape
        assert src_shape is not None
        assert math.prod(src_shape[a] for a in r.arg[1]) <= BLOCK
