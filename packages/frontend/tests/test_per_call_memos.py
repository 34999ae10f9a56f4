"""What the frontend keeps between calls to build the same graph again for less: the constants of `const_uop`,
the embedding graphs of `gather.embedding_rows`, and the weak registries (`WeakList`) that realize and autograd
append to. Each memo must answer exactly what building afresh would (hash-consing makes that the same node), never
merge constants Python calls equal (0.0 and -0.0; 1, 1.0 and True), and stay bounded. Builds graphs only (this
package's session has no scheduler)."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plygrad.frontend import Tensor, dtypes, gather, lazy
from plygrad.frontend.weaklist import WeakList
from plygrad.ir import Ops, UOp


def _const_of(node: UOp) -> UOp:
    while node.op is not Ops.CONST:
        node = node.src[0]
    return node


@given(value=st.one_of(st.integers(-3, 3), st.booleans(), st.floats(allow_nan=True, width=32)),
       dtype=st.sampled_from(["float32", "float16", "int32", "bool"]),
       shape=st.lists(st.integers(1, 3), max_size=3).map(tuple))
def test_a_kept_constant_is_the_one_built_afresh(value: float, dtype: str, shape: tuple[int, ...]) -> None:
    dt = dtypes.from_name(dtype)
    first = lazy.const_uop(dt, value, shape)
    lazy._CONSTS.clear()
    afresh = lazy.const_uop(dt, value, shape)
    assert first is afresh and lazy.const_uop(dt, value, shape) is first
    assert first.shape == shape and first.dtype is dt


def test_signed_zeros_and_equal_python_values_stay_apart() -> None:
    plus, minus = lazy.const_uop(dtypes.float32, 0.0, (2,)), lazy.const_uop(dtypes.float32, -0.0, (2,))
    assert plus is not minus
    assert math.copysign(1.0, _const_of(minus).arg) == -1.0 and math.copysign(1.0, _const_of(plus).arg) == 1.0
    # the other order too: a kept -0.0 never answers for 0.0
    lazy._CONSTS.clear()
    assert lazy.const_uop(dtypes.float32, -0.0, (3,)) is not lazy.const_uop(dtypes.float32, 0.0, (3,))
    nan = _const_of(lazy.const_uop(dtypes.float32, math.nan, (2,))).arg
    assert math.isnan(nan)
    for value in (1, 1.0, True):  # a bool tensor's True, an int's 1 and a float's 1.0 are each their own
        assert type(_const_of(lazy.const_uop(dtypes.bool, value, (2,))).arg) is bool
        assert type(_const_of(lazy.const_uop(dtypes.int32, value, (2,))).arg) is int
    x = Tensor(np.zeros(2, np.float32))
    assert _const_of((x + -0.0).uop.src[1]).arg == 0.0 and math.copysign(1.0, _const_of((x + -0.0).uop.src[1]).arg) < 0


def test_the_constants_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lazy, "MAX_CONSTS_KEPT", 8)
    for i in range(100):
        lazy.const_uop(dtypes.float32, float(i + 1), (4,))
    assert len(lazy._CONSTS) <= 8


def test_an_embedding_graph_is_kept_per_table_and_index_node(monkeypatch: pytest.MonkeyPatch) -> None:
    weight = Tensor(np.arange(28, dtype=np.float32).reshape(7, 4), requires_grad=True)
    idx = Tensor(np.array([[1, 6], [0, 3]], dtype=np.int32))
    first = gather.embedding_rows(weight, idx, 7)
    again = gather.embedding_rows(weight, idx, 7)
    assert again.uop is first.uop and again.requires_grad and again.inputs == first.inputs
    lazy_table = weight.mul(2)  # another table node: another graph, the one the op-by-op path builds
    other = gather.embedding_rows(lazy_table, idx, 7)
    assert other.uop is not first.uop
    assert other.uop is gather._embedding_rows_by_tensors(lazy_table, idx, 7).uop
    frozen = Tensor(np.arange(28, dtype=np.float32).reshape(7, 4), requires_grad=False)
    assert not gather.embedding_rows(frozen, idx, 7).requires_grad  # autograd's part is decided per call
    monkeypatch.setattr(gather, "MAX_ROWS_KEPT", 2)
    for n in range(5):
        gather.embedding_rows(weight, Tensor(np.array([n], dtype=np.int32)), 7)
    assert len(gather._ROWS) <= 2


class _Thing:
    pass


def test_weak_list_keeps_order_and_duplicates_and_sweeps_the_dead() -> None:
    registry: WeakList[_Thing] = WeakList(min_sweep=4)
    kept = [_Thing() for _ in range(3)]
    registry.add(kept[0])
    registry.add(kept[1])
    registry.add(kept[0])
    for _ in range(20):
        registry.add(_Thing())  # dies at once
    registry.add(kept[2])
    gc.collect()
    assert registry.live() == [kept[0], kept[1], kept[0], kept[2]]
    assert len(registry) < 12, "dead references were swept as the list grew"
