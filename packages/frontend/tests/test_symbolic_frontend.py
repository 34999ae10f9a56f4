"""Symbolic shapes in the frontend alone (nothing realized): Variable, shapes holding a bound variable, and the
errors of sizes that do not fit (frontend/symbolic.py)."""

from __future__ import annotations

import pytest

from plygrad.frontend import ShapeError, Tensor, Variable
from plygrad.ir import Ops, UOp, dtypes
from plygrad.ir.shape import size_expr_problem


def test_variable_is_an_index_variable_and_bind_gives_it_a_value() -> None:
    n = Variable("n", 1, 128)
    assert n.op is Ops.DEFINE_VAR and n.arg == ("n", 1, 128)
    bound = n.bind(10)
    assert bound.op is Ops.BIND and bound.src[1].arg == 10


@pytest.mark.parametrize(("args", "match"), [(("n", 5, 2), "min_val"), (("n", -1, 2), "min_val"),
                                             (("1n", 1, 2), "identifier")])
def test_bad_variables_are_refused(args: tuple[str, int, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Variable(*args)


def test_views_keep_symbolic_sizes_in_the_shape() -> None:
    n = Variable("n", 1, 16).bind(4)
    t = Tensor.ones(3, 4).reshape(3, n)
    assert t.shape == (3, n)
    assert t.uop.arg == (3, None) and t.uop.src[1] is n  # the size is an extra source of the RESHAPE
    assert t.shrink(((0, 2), (0, n))).shape == (2, n)
    assert t.pad(((0, 0), (1, 0))).shape[1] is not n
    assert (t + 1).sum(0).shape == (n,)
    assert t.reshape(-1).shape[0].op is Ops.MUL  # 3*n
    assert t.T.shape == (n, 3)


def test_sizes_are_checked_at_the_bound_values() -> None:
    n = Variable("n", 1, 16).bind(4)
    with pytest.raises(ShapeError, match="element counts must match"):
        Tensor.ones(3, 5).reshape(3, n)
    with pytest.raises(ShapeError, match="outside"):
        Tensor.ones(3, 2).shrink(((0, 3), (0, n)))
    with pytest.raises(ShapeError, match="draw at the variables' maximum"):
        Tensor.rand(3, n)
    with pytest.raises(IndexError, match="symbolic size n"):
        _ = Tensor.ones(3, 4).reshape(3, n)[:, 1]
    with pytest.raises(ValueError, match="mode 'constant'"):
        Tensor.ones(3, 4).reshape(3, n).pad(((0, 0), (n, 0)), mode="reflect")


def test_repr_names_the_variables_and_their_values() -> None:
    n = Variable("n", 1, 16).bind(4)
    assert repr(Tensor.ones(3, 4).reshape(3, n)).startswith("<Tensor shape=(3, n) with n=4 dtype=float32")


def test_a_size_that_is_not_an_index_expression_is_refused_by_the_irs_rule() -> None:
    n = Variable("n", 1, 16).bind(4)
    as_float = UOp(Ops.CAST, dtypes.index, (UOp(Ops.CAST, dtypes.float32, (n,)),))  # index on the outside only
    assert size_expr_problem(n * 2 + 1) is None
    assert size_expr_problem(as_float) is not None
    with pytest.raises(ShapeError, match=r"symbolic size must be a Variable.*CAST of dtype float"):
        Tensor.ones(3, 4).reshape(3, as_float)
    with pytest.raises(ShapeError, match=r"symbolic size must be a Variable.*CAST"):
        Tensor.ones(3, 4).shrink(((0, 2), (0, as_float)))
