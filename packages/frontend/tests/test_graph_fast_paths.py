"""Graphs built without a Tensor per op: ops with a Python scalar put the constant straight into the graph
(elementwise._scalar_alu, _where_scalar); polynomials (transcendental._horner), blocked sums
(reduce._blocked_sum), embedding lookups (gather.embedding_rows) and matmuls (linear._matmul_nodes) build one
chain of nodes. Each must give exactly the graph, dtype, inputs and requires_grad of the op-by-op path through
Tensors, under every grad mode."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from plygrad.frontend import Tensor, core, dtypes, elementwise, gather, linear, nn, reduce, transcendental
from plygrad.ir import DType, Ops

SCALARS = [2, -3, 1.5, -0.0, float("nan"), True, False]
ARRAYS = {
    "float32": np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3),
    "float16": np.linspace(-2, 2, 6).astype(np.float16).reshape(2, 3),
    "int32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
    "uint8": np.arange(6, dtype=np.uint8).reshape(2, 3),
    "bool": np.array([[True, False, True], [False, True, False]]),
}
BINARY = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE]


@pytest.fixture(params=["undecided", "requires_grad", "no_grad_leaf", "no_grad_mode"])
def grad_setting(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "no_grad_mode":
        Tensor.no_grad = True
        try:
            yield request.param
        finally:
            Tensor.no_grad = False
    else:
        yield request.param


def make(kind: str, setting: str) -> Tensor:
    t = Tensor(ARRAYS[kind])
    if setting in ("requires_grad", "no_grad_mode") and t.dtype.is_float:
        t.requires_grad_(True)
    elif setting == "no_grad_leaf":
        t.requires_grad_(False)
    return t


def by_tensors(t: Tensor, op: Ops, value: float | bool, reverse: bool, dtype: DType | None = None) -> Tensor:
    """The op-by-op path: the constant as a Tensor of its own (elementwise.operands), then the ALU op."""
    x, y = elementwise.operands(t, value, dtype, reverse=reverse)
    return core.alu(x, op, y)


def same(got: Tensor, want: Tensor) -> None:
    assert got.uop is want.uop  # hash-consed: the same object is the same graph
    assert (got.dtype, got.requires_grad, got.inputs, got.device) == (want.dtype, want.requires_grad, want.inputs,
                                                                     want.device)


@pytest.mark.parametrize("kind", sorted(ARRAYS))
@pytest.mark.parametrize("op", BINARY, ids=lambda op: op.name)
@pytest.mark.parametrize("value", SCALARS, ids=repr)
@pytest.mark.parametrize("reverse", [False, True])
def test_binary_op_with_a_scalar_builds_the_op_by_op_graph(kind: str, op: Ops, value: float | bool, reverse: bool,
                                                            grad_setting: str) -> None:
    t = make(kind, grad_setting)
    same(elementwise._binary(t, op, value, reverse), by_tensors(t, op, value, reverse))


@pytest.mark.parametrize("kind", sorted(ARRAYS))
@pytest.mark.parametrize("value", SCALARS, ids=repr)
@pytest.mark.parametrize("reverse", [False, True])
def test_sub_and_div_with_a_scalar_build_the_op_by_op_graph(kind: str, value: float | bool, reverse: bool,
                                                             grad_setting: str) -> None:
    t = make(kind, grad_setting)
    x, _ = elementwise.operands(t, value, reverse=reverse)
    if x.dtype.is_bool:
        with pytest.raises(Exception, match="subtraction"):
            t.sub(value, reverse)
    else:
        same(t.sub(value, reverse), by_tensors(t, Ops.SUB, value, reverse))
    if x.dtype.is_float:
        same(t.div(value, reverse), by_tensors(t, Ops.FDIV, value, reverse))
    else:  # integers divide as the default float, their operands cast after `operands`
        a, b = elementwise.operands(t, value, reverse=reverse)
        want = core.alu(a._cast_to(dtypes.default_float), Ops.FDIV, b._cast_to(dtypes.default_float))
        same(t.div(value, reverse), want)


@pytest.mark.parametrize("kind", ["float32", "float16"])
@pytest.mark.parametrize("coeffs", [(1.5,), (2.0, -1.0), transcendental.ERF_T, transcendental.ERFC_R])
def test_horner_builds_the_op_by_op_graph(kind: str, coeffs: tuple[float, ...], grad_setting: str) -> None:
    x = make(kind, grad_setting).mul(0.5)
    want = x._const(coeffs[0])
    for c in coeffs[1:]:
        want = want.mul(x).add(c)
    same(transcendental._horner(x, coeffs), want)


@pytest.mark.parametrize(("shape", "axes"), [
    ((reduce.SPLIT_ABOVE + 1,), (0,)),
    ((3, 5 * reduce.BLOCK + 7), (1,)),
    ((5 * reduce.BLOCK + 7, 3), (0,)),
    ((2, 131, 130), (1, 2)),
    ((64, 3, 128), (0, 2)),
    ((1024, 1024), (0, 1)),
])
@pytest.mark.parametrize("kind", ["float32", "int32"])
def test_blocked_sum_builds_the_op_by_op_graph(shape: tuple[int, ...], axes: tuple[int, ...], kind: str,
                                               grad_setting: str) -> None:
    t = Tensor(np.ones(shape, dtype=kind))
    if grad_setting in ("requires_grad", "no_grad_mode") and t.dtype.is_float:
        t.requires_grad_(True)
    elif grad_setting == "no_grad_leaf":
        t.requires_grad_(False)
    x = t.mul(2)  # a lazy graph, not a leaf
    same(reduce._blocked(x, Ops.ADD, axes), reduce._blocked_by_tensors(x, Ops.ADD, axes))
    same(reduce._blocked(t, Ops.ADD, axes), reduce._blocked_by_tensors(t, Ops.ADD, axes))


@pytest.mark.parametrize("batch", [(), (5,), (2, 3)])
@pytest.mark.parametrize("index_dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("weight_dtype", ["float32", "float16", "int32"])
def test_embedding_lookup_builds_the_op_by_op_graph(batch: tuple[int, ...], index_dtype: str, weight_dtype: str,
                                                    grad_setting: str) -> None:
    idx = Tensor(np.arange(np.prod(batch, dtype=int)).reshape(batch).astype(index_dtype) % 7)
    weight = Tensor(np.arange(7 * 4).reshape(7, 4).astype(weight_dtype))
    if grad_setting in ("requires_grad", "no_grad_mode") and weight.dtype.is_float:
        weight.requires_grad_(True)
    elif grad_setting == "no_grad_leaf":
        weight.requires_grad_(False)
    for table in (weight, weight.mul(2)):  # a leaf, and a lazy graph
        same(gather.embedding_rows(table, idx, 7), gather._embedding_rows_by_tensors(table, idx, 7))


def test_embedding_layer_looks_up_through_embedding_rows() -> None:
    # made without __init__, whose random weight is realized (this package's session has no scheduler to do it)
    layer = nn.Embedding.__new__(nn.Embedding)
    layer.vocab_size, layer.embed_size = 9, 3
    layer.weight = Tensor(np.arange(27, dtype=np.float32).reshape(9, 3), requires_grad=True)
    idx = Tensor(np.array([[1, 8], [0, 4]], dtype=np.int32))
    same(layer(idx), gather._embedding_rows_by_tensors(layer.weight, idx, 9))


@pytest.mark.parametrize(("left", "right"), [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((1, 4), (4, 1)),
    ((2, 3), (3,)),
    ((3,), (3, 2)),
])
@pytest.mark.parametrize("kind", ["float32", "float64", "float16", "int32"])
def test_matmul_builds_the_op_by_op_graph(left: tuple[int, ...], right: tuple[int, ...], kind: str,
                                          grad_setting: str) -> None:
    x = make_shaped(left, kind, grad_setting)
    y = make_shaped(right, kind, grad_setting)
    for a, b in ((x, y), (x.mul(2), y), (x, y.mul(2))):
        same(linear.matmul(a, b), linear._matmul_by_tensors(a, b, a.unsqueeze(0) if a.ndim == 1 else a,
                                                             b.unsqueeze(-1) if b.ndim == 1 else b))


def test_matmul_of_mixed_dtypes_and_long_sums_builds_the_op_by_op_graph() -> None:
    x, y = Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones((3, 2), np.int32))
    same(linear.matmul(x, y), linear._matmul_by_tensors(x, y, x, y))
    long = Tensor(np.ones((2, reduce.SPLIT_ABOVE + 1), np.float32))
    same(linear.matmul(long, long.transpose()), linear._matmul_by_tensors(long, long.transpose(), long,
                                                                         long.transpose()))


def make_shaped(shape: tuple[int, ...], kind: str, setting: str) -> Tensor:
    t = Tensor(np.ones(shape, dtype=kind))
    if setting in ("requires_grad", "no_grad_mode") and t.dtype.is_float:
        t.requires_grad_(True)
    elif setting == "no_grad_leaf":
        t.requires_grad_(False)
    return t


@pytest.mark.parametrize(("cond_shape", "shape"), [((2, 3), (2, 3)), ((2, 1, 3), (3,)), ((3,), (2, 3)), ((), (2, 3))])
@pytest.mark.parametrize("cond_kind", ["bool", "float32", "int32"])
@pytest.mark.parametrize("kind", ["float32", "int32", "bool", "float16"])
@pytest.mark.parametrize("value", [0.0, -1, True, float("inf")], ids=repr)
@pytest.mark.parametrize("tensor_first", [True, False])
def test_where_with_a_scalar_branch_builds_the_op_by_op_graph(cond_shape: tuple[int, ...], shape: tuple[int, ...],
                                                              cond_kind: str, kind: str, value: float | bool,
                                                              tensor_first: bool, grad_setting: str) -> None:
    cond = make_shaped(cond_shape, cond_kind, "undecided")  # a bool data tensor is undecided: it can decide
    branch = make_shaped(shape, kind, grad_setting)
    for c in (cond, cond.lt(1)):
        for v in (branch, branch.mul(2)):
            x, y = (v, value) if tensor_first else (value, v)
            same(c.where(x, y), elementwise._where_by_tensors(c._cast_to(dtypes.bool), x, y))
