"""Cast shortcuts, as PyTorch and tinygrad spell them: `x.float()`, `x.half()`, `x.long()`, ...

Their names are the builtins `float`, `int` and `bool`, so inside this module the builtins are spelled
`builtins.int` and so on; Tensor binds them last in its class body for the same reason.
"""


from __future__ import annotations

from typing import TYPE_CHECKING

from plygrad.ir import dtypes

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor



def float(x: Tensor) -> Tensor:
    """This tensor as float32."""
    return x.cast(dtypes.float32)


def half(x: Tensor) -> Tensor:
    """This tensor as float16."""
    return x.cast(dtypes.float16)


def double(x: Tensor) -> Tensor:
    """This tensor as float64."""
    return x.cast(dtypes.float64)


def bfloat16(x: Tensor) -> Tensor:
    """This tensor as bfloat16."""
    return x.cast(dtypes.bfloat16)


def int(x: Tensor) -> Tensor:
    """This tensor as int32 (floats truncate toward zero)."""
    return x.cast(dtypes.int32)


def long(x: Tensor) -> Tensor:
    """This tensor as int64 (floats truncate toward zero)."""
    return x.cast(dtypes.int64)


def short(x: Tensor) -> Tensor:
    """This tensor as int16 (floats truncate toward zero)."""
    return x.cast(dtypes.int16)


def bool(x: Tensor) -> Tensor:
    """This tensor as bool (non-zero is True)."""
    return x.cast(dtypes.bool)
