"""`Tensor.random_bits(key, counter, num)`: tinygrad's stateless random stream, driven by explicit key and counter
tensors instead of the global seed (randomness/stream.py holds the seeded, stateful stream behind `rand`).

The stream is Threefry-2x32 (the IR's THREEFRY op) used twice. `key` and `counter` each hold two uint32 words,
(low, high). First the counter, offset by the chunk's start, is hashed under `key` into a fresh 64-bit key for the
chunk; then the chunk's `n` words are the low and high halves of Threefry(c) under that key for the counters
c = i | (i + ceil(n / 2)) << 32, i < ceil(n / 2): all the low halves first, then the high halves, cut to `n`. Chunks
hold at most 2**32 - 1 words, as in tinygrad, so the same (key, counter, num) gives tinygrad's bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plygrad.frontend import core
from plygrad.ir import DTypeError, Ops, ShapeError, dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

CHUNK = 2**32 - 1


def _threefry_words(key: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """Threefry of the 64-bit counters high:low under key[1]:key[0], as the uint32 words low halves ++ high halves."""
    wide = dtypes.uint64
    counters = high.cast(wide).lshift(32).bitwise_or(low.cast(wide))
    key64 = key[1:2].cast(wide).lshift(32).bitwise_or(key[0:1].cast(wide))._broadcast_to(counters.shape)
    hashed = core.alu(counters, Ops.THREEFRY, key64)
    return hashed.cast(dtypes.uint32).cat(hashed.rshift(32).cast(dtypes.uint32))


def _checked(t: Tensor, what: str) -> Tensor:
    if t.shape != (2,):
        raise ShapeError(f"random_bits: {what} must have shape (2,) (low and high uint32 words), got {t.shape}")
    if t.dtype.is_float or t.dtype.is_bool:
        raise DTypeError(f"random_bits: {what} must hold integers (uint32 words), got {t.dtype.name}")
    return t.cast(dtypes.uint32)


def random_bits(cls: type[Tensor], key: Tensor, counter: Tensor, num: int) -> Tensor:
    """`Tensor.random_bits`: `num` uint32 random words of tinygrad's keyed Threefry stream for `key` and `counter`
    (two uint32 words each; see the module docstring)."""
    if type(num) is not int or num < 0:
        raise ValueError(f"random_bits: num must be an int >= 0, got {num!r}")
    key, counter = _checked(key, "key"), _checked(counter, "counter")
    low, high = counter[0:1], counter[1:2]
    chunks: list[Tensor] = []
    for start in range(0, num, CHUNK):
        n = min(num - start, CHUNK)
        chunk_low = low.add(start & 0xFFFFFFFF)
        carry = chunk_low.lt(low).cast(dtypes.uint32)
        chunk_high = high.add(start >> 32).add(carry)
        chunk_key = _threefry_words(key, chunk_low, chunk_high)
        half = -(-n // 2)
        first = key.arange(half, dtype=dtypes.uint32, device=key.device)
        chunks.append(_threefry_words(chunk_key, first, first.add(half))[:n])
    if not chunks:
        return counter[0:0]
    return chunks[0].cat(*chunks[1:]) if len(chunks) > 1 else chunks[0]
