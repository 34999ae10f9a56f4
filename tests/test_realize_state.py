"""realize_state.STATE with a backend: assigns that ran are not run again, staged host data is copied in once (the
backend-free cases are in packages/frontend/tests/test_realize_state.py)."""

from __future__ import annotations

import numpy as np

from plygrad.frontend import Tensor
from plygrad.frontend.realize_state import STATE, RealizeState
from plygrad.ir import dtypes
from plygrad.runtime import Buffer


def test_an_assign_that_ran_is_replaced_by_its_target_in_graphs_built_before() -> None:
    x = Tensor([1.0, 2.0, 3.0]).realize()
    v = x[0:1]
    v.assign(v + 10)
    z = v * 2  # built while the write is pending: its graph holds the ASSIGN
    v.realize()
    assert STATE.done_assigns_in(z.uop)
    np.testing.assert_array_equal(z.numpy(), [22.0])  # the written value, and the write is not done again
    np.testing.assert_array_equal(x.numpy(), [11.0, 2.0, 3.0])


def test_staged_host_data_is_copied_in_once_at_flush() -> None:
    state = RealizeState()
    buf = Buffer("CPU", 2, dtypes.float32)
    state.stage(buf, np.array([1.5, 2.5], np.float32).tobytes())
    state.flush([buf])
    assert np.frombuffer(buf.copyout(), np.float32).tolist() == [1.5, 2.5]
    buf.copyin(np.zeros(2, np.float32).tobytes())
    state.flush([buf])  # nothing staged any more: the buffer keeps what it has
    assert np.frombuffer(buf.copyout(), np.float32).tolist() == [0.0, 0.0]
