"""One Variable bound to two values in one realized graph: each use keeps its own value (a KV cache written at two
positions before it is read, two slices at two offsets). The structural key makes the second binding a variable of
its own (plygrad.ir.structure), where one key variable would give both uses one of the two values."""

from __future__ import annotations

import numpy as np

from plygrad.frontend import Tensor, Variable, dtypes
from plygrad.frontend.jit import TinyJit


def test_two_slices_at_two_values_of_one_variable() -> None:
    pos = Variable("pos", 0, 10)
    x = Tensor(np.arange(12, dtype=np.float32)).realize()
    one, three = pos.bind(1), pos.bind(3)
    got = (x[one:one + 1] + x[three:three + 1] * 10).numpy()
    np.testing.assert_array_equal(got, [31.0])


def test_pending_writes_at_two_positions_of_one_variable() -> None:
    pos = Variable("pos", 0, 10)
    cache = Tensor.zeros(2, 6, dtype=dtypes.int32).contiguous().realize()
    for p, value in ((1, 7), (3, 9), (4, 5)):
        at = pos.bind(p)
        cache[:, at:at + 1].assign(Tensor([[value], [value + 1]], dtype=dtypes.int32))  # left pending
    expected = np.zeros((2, 6), dtype=np.int32)
    expected[:, [1, 3, 4]] = [[7, 9, 5], [8, 10, 6]]
    np.testing.assert_array_equal(cache.numpy(), expected)


def test_a_jitted_write_per_position_then_one_read() -> None:
    pos = Variable("pos", 0, 10)
    out = Tensor.zeros(1, 12, dtype=dtypes.int32).contiguous().realize()

    @TinyJit
    def step(x: Tensor, at: object) -> Tensor:
        y = x + 1
        y.realize(out[:, at:at + 1].assign(y))  # type: ignore[misc]
        return y

    x = Tensor(np.zeros((1, 1), dtype=np.int32))
    for p in range(8):
        x = step(x, pos.bind(p))
    np.testing.assert_array_equal(out.numpy()[0], [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0])
