"""The seeded random stream behind `rand`: Threefry-2x32 (the IR's THREEFRY op) of a counter under a key made from
the seed, and the in-graph counter `0..n-1` (`counter`, which `arange` uses too).

A draw of n values is THREEFRY(offset + i, key); offset and seed are bound kernel variables, so one kernel serves
every draw of a size and a TinyJit replay draws fresh numbers. docs/frontend.md, "Randomness"; tinygrad's keyed
stream (`Tensor.random_bits`) is randomness/keyed.py.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from plygrad.frontend.lazy import const_uop, movement
from plygrad.ir import DType, Ops, ShapeError, UOp, dtypes

MANTISSA_BITS: Final = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}
DEFAULT_SEED: Final = 0
# the variables a draw reads: "rng_ofs<k>" (its first counter value) and "rng_key<k>" (the seed as a signed int64)
VAR_PREFIX: Final = "rng_"
OFFSET_PREFIX: Final = "rng_ofs"
KEY_PREFIX: Final = "rng_key"
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


@dataclass
class _State:
    seed: int = DEFAULT_SEED
    offset: int = 0  # counter values used so far since the seed was set
    epoch: int = 0  # how many times manual_seed was called


@dataclass(frozen=True)
class Draw:
    """One draw of n counter values: the names of the variables its graph reads and the values they were bound to."""

    offset_var: str
    key_var: str
    offset: int
    n: int
    seed: int


_STATE: Final = _State()
_TAKING: Final = threading.Lock()  # guards _STATE: a counter range is read and advanced as one step
_DRAWN_HERE: Final[ContextVar[int]] = ContextVar("plygrad_random_drawn", default=0)
_LOG: Final[ContextVar[list[Draw] | None]] = ContextVar("plygrad_random_log", default=None)
_DRAW_IDS: Final = itertools.count()  # next() is atomic under the GIL: every draw gets its own variable names


def set_seed(seed: int) -> None:
    """Restart the random sequence from `seed` (any int; it is reduced to 64 bits)."""
    with _TAKING:
        _STATE.seed, _STATE.offset = seed % 2**64, 0
        _STATE.epoch += 1


def seed_epoch() -> int:
    """How many times `manual_seed` has been called (TinyJit refuses a recording that calls it)."""
    return _STATE.epoch


def take(n: int) -> tuple[int, int]:
    """Reserve the next n counter values as one step: (first offset, seed). A TinyJit replay takes its draws' range
    this way, so it gets the numbers the function run eagerly would have drawn (in one thread)."""
    with _TAKING:
        seed, offset = _STATE.seed, _STATE.offset
        _STATE.offset += n
    _DRAWN_HERE.set(_DRAWN_HERE.get() + n)
    return offset, seed


def signed_key(seed: int) -> int:
    """The 64-bit seed as the int64 value its kernel variable holds (the kernel casts it back to uint64)."""
    return seed - 2**64 if seed > _INT64_MAX else seed


@contextmanager
def logging_draws() -> Iterator[list[Draw]]:
    """List every draw this thread makes inside the block (TinyJit records them to redraw on each replay)."""
    log: list[Draw] = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def drawn_here() -> int:
    """How many random values the calling thread has drawn so far (any seed)."""
    return _DRAWN_HERE.get()


def counter(n: int, dtype: DType, device: str) -> UOp:
    """The values 0..n-1 of `dtype` as a shape (n,) graph (see the module docstring); `device` is unused by the
    graph (constants have none) but kept so callers state where the result lives."""
    del device
    return _counter(n, dtype)


@functools.lru_cache(maxsize=256)
def _counter(n: int, dtype: DType) -> UOp:
    """counter's graph, built once per size and dtype (an `arange` per Embedding call rebuilt ~4 nodes per bit)."""
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


def _bound(name: str, vmin: int, value: int, n: int) -> UOp:
    """A bound int64 variable read as n uint64 values (the same bits: two's complement)."""
    var = UOp.variable(name, vmin, _INT64_MAX, dtypes.int64).bind(value)
    return movement(movement(var.cast(dtypes.uint64), Ops.RESHAPE, (1,)), Ops.EXPAND, (n,))


def bits_uop(n: int, device: str) -> UOp:
    """n uint64 words of Threefry output for the next n counter values of the current seed."""
    if type(n) is not int:
        raise ShapeError("random numbers need a shape of ints, got a symbolic size: each value draws its own counter "
                         "range; draw at the variables' maximum and shrink to the symbolic size")
    offset, seed = take(n)
    draw_id = next(_DRAW_IDS)
    draw = Draw(f"{OFFSET_PREFIX}{draw_id}", f"{KEY_PREFIX}{draw_id}", offset, n, seed)
    log = _LOG.get()
    if log is not None:
        log.append(draw)
    ctr = counter(n, dtypes.uint64, device).alu(Ops.ADD, _bound(draw.offset_var, 0, offset, n))
    return ctr.alu(Ops.THREEFRY, _bound(draw.key_var, _INT64_MIN, signed_key(seed), n))


def uniform_uop(n: int, dtype: DType, device: str) -> UOp:
    """n floats of `dtype` uniform in [0, 1): the top `mantissa` bits of each word times 2**-mantissa, which is
    exact in `dtype`, so 1.0 can never come out of rounding."""
    bits = MANTISSA_BITS[dtype]
    compute = dtypes.float64 if bits > 24 else dtypes.float32
    top = bits_uop(n, device).alu(Ops.SHR, const_uop(dtypes.uint64, 64 - bits, (n,)))
    value = top.cast(compute).alu(Ops.MUL, const_uop(compute, 2.0**-bits, (n,)))
    return value.cast(dtype)
