"""Big outputs on the CPU backend: the C renderer streams their whole-vector stores past the caches
(codegen/renderer/c.py, `stream_threshold`), with the aligned non-temporal instruction where the address allows
and a plain store where it does not. Results must not change: a fresh output (aligned, streamed), a write into a
slice that starts one element into its buffer (misaligned, plain stores), and the next kernel reading the streamed
output at once."""

from __future__ import annotations

import numpy as np

from plygrad.backends.cpu.backend import cpu_target
from plygrad.codegen.renderer.c import stream_threshold
from plygrad.frontend import Tensor


def _streamed_length() -> int:
    """Float32 elements enough for an output to stream on this machine."""
    return stream_threshold(cpu_target()) // 4 + 4096


def test_a_streamed_elementwise_output_is_exact_and_read_back_at_once() -> None:
    n = _streamed_length()
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    out = ((Tensor(a) + Tensor(b)) * Tensor(c)).relu().realize()
    np.testing.assert_array_equal(out.numpy(), np.maximum((a + b) * c, np.float32(0)))
    # the next kernel reads what the last one streamed
    twice = (out * 2).realize().numpy()
    np.testing.assert_array_equal(twice, np.maximum((a + b) * c, np.float32(0)) * np.float32(2))


def test_a_write_one_element_into_a_big_buffer_is_exact() -> None:
    n = _streamed_length()
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    big = Tensor.zeros(n + 1).contiguous().realize()
    big[1:].assign(Tensor(x) * 3).realize()
    expected = np.concatenate([np.zeros(1, np.float32), x * np.float32(3)])
    np.testing.assert_array_equal(big.numpy(), expected)
