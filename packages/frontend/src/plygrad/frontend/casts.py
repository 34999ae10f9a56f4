"""Cast shortcuts, as PyTorch and tinygrad spell them: `x.float()`, `x.half()`, `x.long()`, ...

They live in a class of their own because their names are the builtins `float`, `int` and `bool`: a class body that
defines them would shadow those names for every annotation that follows in the same body.
"""

from __future__ import annotations

from typing import Self

from plygrad.frontend.creation import CreationOps
from plygrad.ir import dtypes


class CastShortcuts(CreationOps):
    """`float half double bfloat16 int long short bool`: `cast` to float32, float16, float64, bfloat16, int32, int64,
    int16 and bool."""

    __slots__ = ()

    def float(self) -> Self:
        """This tensor as float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Self:
        """This tensor as float16."""
        return self.cast(dtypes.float16)

    def double(self) -> Self:
        """This tensor as float64."""
        return self.cast(dtypes.float64)

    def bfloat16(self) -> Self:
        """This tensor as bfloat16."""
        return self.cast(dtypes.bfloat16)

    def int(self) -> Self:
        """This tensor as int32 (floats truncate toward zero)."""
        return self.cast(dtypes.int32)

    def long(self) -> Self:
        """This tensor as int64 (floats truncate toward zero)."""
        return self.cast(dtypes.int64)

    def short(self) -> Self:
        """This tensor as int16 (floats truncate toward zero)."""
        return self.cast(dtypes.int16)

    def bool(self) -> Self:
        """This tensor as bool (non-zero is True)."""
        return self.cast(dtypes.bool)
