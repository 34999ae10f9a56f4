"""Counter-based random numbers: Threefry-2x32 (the IR's THREEFRY op) of a counter and a key made from the seed.

Nothing is stateful on the device: the n samples of one `rand` call are THREEFRY(offset + i, key) for i < n, where
`offset` advances by n per call. So a seed fixes the whole sequence of tensors (`manual_seed`), any scheduler or
backend gives the same bits, and the samples are computed inside the consumer's kernel.

The counter `0..n-1` is built in the graph without memory or a reduce: for n <= 2**k it is the sum of k tensors of
shape (2,)*k, tensor j holding 0 or 2**(k-1-j) along axis j (a PAD of a one-element constant); reshaped to (2**k,)
and cut to n. That is one fused elementwise kernel whatever reads it.

Threads share one generator, as in PyTorch (`manual_seed` sets it for the process): each draw takes its counter
range under a lock, so two threads drawing at once never get the same numbers. How many values the calling thread
has drawn is kept per thread (`drawn_here`), so TinyJit can tell whether the function it records drew any.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from plygrad.frontend.lazy import const_uop, movement
from plygrad.ir import DType, Ops, UOp, dtypes

MANTISSA_BITS: Final = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}
DEFAULT_SEED: Final = 0


@dataclass
class _State:
    seed: int = DEFAULT_SEED
    offset: int = 0  # counter values used so far since the seed was set


_STATE: Final = _State()
_TAKING: Final = threading.Lock()  # guards _STATE: a counter range is read and advanced as one step
_DRAWN_HERE: Final[ContextVar[int]] = ContextVar("plygrad_random_drawn", default=0)


def manual_seed(seed: int) -> None:
    """Restart the random sequence from `seed` (any int; it is reduced to 64 bits)."""
    with _TAKING:
        _STATE.seed, _STATE.offset = seed % 2**64, 0


def drawn_here() -> int:
    """How many random values the calling thread has drawn so far (any seed)."""
    return _DRAWN_HERE.get()


def counter(n: int, dtype: DType, device: str) -> UOp:
    """The values 0..n-1 of `dtype` as a shape (n,) graph (see the module docstring); `device` is unused by the
    graph (constants have none) but kept so callers state where the result lives."""
    del device
    if n <= 1:
        return const_uop(dtype, 0, (n,))
    k = (n - 1).bit_length()
    total: UOp | None = None
    for axis in range(k):
        bit = movement(UOp.const(dtype, 2 ** (k - 1 - axis)), Ops.RESHAPE, (1,))
        bit = movement(bit, Ops.PAD, ((1, 0),))  # (0, 2**(k-1-axis))
        shape = tuple(2 if i == axis else 1 for i in range(k))
        bit = movement(movement(bit, Ops.RESHAPE, shape), Ops.EXPAND, (2,) * k)
        total = bit if total is None else total.alu(Ops.ADD, bit)
    assert total is not None
    flat = movement(total, Ops.RESHAPE, (2**k,))
    return flat if n == 2**k else movement(flat, Ops.SHRINK, ((0, n),))


def random_bits(n: int, device: str) -> UOp:
    """n uint64 words of Threefry output for the next n counter values of the current seed."""
    with _TAKING:
        seed, offset = _STATE.seed, _STATE.offset
        _STATE.offset += n
    _DRAWN_HERE.set(_DRAWN_HERE.get() + n)
    ctr = counter(n, dtypes.uint64, device)
    if offset:
        ctr = ctr.alu(Ops.ADD, const_uop(dtypes.uint64, offset, (n,)))
    return ctr.alu(Ops.THREEFRY, const_uop(dtypes.uint64, seed, (n,)))


def uniform(n: int, dtype: DType, device: str) -> UOp:
    """n floats of `dtype` uniform in [0, 1): the top `mantissa` bits of each word times 2**-mantissa, which is
    exact in `dtype`, so 1.0 can never come out of rounding."""
    bits = MANTISSA_BITS[dtype]
    compute = dtypes.float64 if bits > 24 else dtypes.float32
    top = random_bits(n, device).alu(Ops.SHR, const_uop(dtypes.uint64, 64 - bits, (n,)))
    value = top.cast(compute).alu(Ops.MUL, const_uop(compute, 2.0**-bits, (n,)))
    return value.cast(dtype)
