"""The rest of tinygrad 0.14's and PyTorch's Tensor API: properties, rounding division, matrix decompositions,
einops rearrange, unpooling, storage helpers, and tinygrad's small helpers (`const ufix usum uprod
threefry contiguous_backward max_shape max_numel schedule_linear from_url`).

Each function here is a thin, typed wrapper with the public signature and docstring, bound as a Tensor method like
every op module's; the work lives in the module of its idea (plygrad.frontend.linalg, .rearrange, .storage,
.fetch, .gradient_marks), so a reader finds QR in `linalg.py`. The few that are a line or two of
composition are written here directly.

Signatures and results follow tinygrad 0.14, which follows PyTorch where both have a method; where they differ the
docstring says which one is followed.
"""


from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from plygrad.frontend import core, elementwise, fetch, gradient_marks, linalg, storage
from plygrad.frontend import rearrange as rearrange_module
from plygrad.frontend.lazy import Scalar, is_tensor
from plygrad.ir import DTypeError, DTypeLike, Ops, ShapeError, UOp, dtypes, result_dtype, to_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

UINT64_END = 2**64


def _scalar(value: object, op: str) -> None:
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"{op}: expected a Tensor or a Python bool/int/float, got {type(value).__name__}")


def _as_tensor(x: Tensor) -> Tensor:
    """This object as the Tensor it is (every object of the tower is one), for the storage helpers."""
    from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

    assert isinstance(x, Tensor), f"expected a Tensor, got {type(x).__name__}"
    return x


# ---- properties -------------------------------------------------------------------------------------------
def size(x: Tensor, dim: int | None = None) -> int | tuple[int, ...]:
    """The shape, or the length of axis `dim` (negative counts from the end)."""
    if dim is None:
        return x.shape
    if x.ndim == 0:
        raise ShapeError(f"size: dim {dim} was given but a 0-d tensor has no axes; call size() for its shape ()")
    return x.shape[x._axis(dim, "size")]


def element_size(x: Tensor) -> int:
    """Bytes per element of the dtype."""
    return x.dtype.itemsize


def nbytes(x: Tensor) -> int:
    """Bytes of all elements: numel() * element_size()."""
    return x.numel() * x.element_size()


def is_floating_point(x: Tensor) -> bool:
    """True for float16, bfloat16, float32 and float64 tensors."""
    return x.dtype.is_float


def rearrange(x: Tensor, formula: str, **sizes: int) -> Tensor:
    """einops' rearrange: `x.rearrange("b c h w -> b (c h w)")`, `x.rearrange("b (h p) -> b h p", p=2)`,
    ellipsis included (plygrad.frontend.rearrange)."""
    return rearrange_module.rearrange(x, formula, **sizes)


# ---- linear algebra -----------------------------------------------------------------------------------------
def qr(x: Tensor) -> tuple[Tensor, Tensor]:
    """Householder QR of the last two axes: `(Q, R)` with Q (..., m, m) orthogonal and R (..., m, n) upper
    triangular (the complete factorization, as tinygrad) (plygrad.frontend.linalg)."""
    return linalg.qr(x)


def svd(x: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """`(U, S, Vh)` with self = U @ diag(S) @ Vh, S descending, by QR and one-sided Jacobi
    (plygrad.frontend.linalg)."""
    return linalg.svd(x, full_matrices)


def newton_schulz(x: Tensor, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Tensor:
    """Newton-Schulz iteration of the odd polynomial with coefficients `params` (plygrad.frontend.linalg)."""
    return linalg.newton_schulz(x, steps, params, eps)


# ---- functional helpers -------------------------------------------------------------------------------------
def sequential(t: Tensor, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    """`ll[-1](...ll[1](ll[0](self)))`: the functions applied in order."""
    return functools.reduce(lambda x, f: f(x), ll, t)


def const_like(x: Tensor, b: Scalar, dtype: DTypeLike | None = None) -> Tensor:
    """A constant `b` with this tensor's shape and device (and dtype, unless given); it costs no memory."""
    return x._const(b, None if dtype is None else to_dtype(dtype))


# ---- storage ------------------------------------------------------------------------------------------------
def data(x: Tensor) -> memoryview:
    """The realized values as a memoryview shaped like the tensor (plygrad.frontend.storage)."""
    return storage.data(_as_tensor(x))


def clone(x: Tensor, device: str | None = None) -> Tensor:
    """A copy in its own memory (on `device` if given); `.grad` is cloned too (plygrad.frontend.storage)."""
    return storage.clone(_as_tensor(x), device)


def replace(t: Tensor, x: Tensor) -> Tensor:
    """Make this tensor `x` (same shape; dtype and device may differ); returns self."""
    return storage.replace(_as_tensor(t), x)


def to_(x: Tensor, device: str) -> Tensor:
    """Move this tensor and its `.grad` to `device` in place; returns self."""
    return storage.to_(_as_tensor(x), device)


def from_blob(cls: type[Tensor], ptr: int | ctypes.c_void_p, shape: Sequence[int], dtype: DTypeLike | None = None,
              device: str | None = None) -> Tensor:
    """A tensor holding a copy of `prod(shape)` elements of `dtype` (default float32) at address `ptr`: the
    memory may be freed afterwards (tinygrad aliases it instead; see plygrad.frontend.storage)."""
    from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

    return storage.from_blob(Tensor, ptr, shape, None if dtype is None else to_dtype(dtype), device)


def from_url(url: str, gunzip: bool = False, *, dtype: DTypeLike | None = None, device: str | None = None,
             requires_grad: bool | None = None) -> Tensor:
    """The bytes at `url` (`http(s)://` or `file://`; gzip-decompressed when `gunzip`) as a 1-d uint8 tensor, or
    reinterpreted as `dtype` (plygrad.frontend.fetch). tinygrad passes the keywords on to `Tensor(...)` too."""
    from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

    return Tensor(fetch.fetch_bytes(url, gunzip), dtype=dtype, device=device, requires_grad=requires_grad)


# ---- tinygrad's small helpers -------------------------------------------------------------------------------
def const(b: Scalar, dtype: DTypeLike | None = None) -> Tensor:
    """A 0-d constant `b` on the default device, costing no memory; its dtype is `dtype`, else the Python
    type's default (bool, int32, float32). tinygrad's is a weak constant that takes the other operand's dtype
    in arithmetic; plygrad's dtype is fixed, so for that behaviour pass the Python scalar itself, which is weak
    here (`x * 2.0` keeps a float16 x float16)."""
    from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

    _scalar(b, "const")
    return Tensor(b, dtype=dtype)


def ufix(t: Tensor, x: Tensor | Scalar) -> Tensor:
    """`x` as an operand of this tensor: a Tensor as it is; a Python scalar as a 0-d constant on this tensor's
    device with the dtype it takes beside this tensor in arithmetic (a float16 tensor's 2 is float16, an int32
    tensor's 2.5 the default float), which is what tinygrad's weak constant resolves to."""
    if is_tensor(x):
        return x
    _scalar(x, "ufix")
    scalar = cast(Scalar, x)
    return t._const(scalar, result_dtype(t.dtype, scalar), shape=())


def _fold(x: Tensor, others: tuple[Tensor | Scalar | Sequence[Tensor | Scalar], ...], op: str) -> Tensor:
    """`self` combined with each of `others` in order: add/mul, or logical or/and for a bool tensor."""
    unpacked = others[0] if len(others) == 1 and isinstance(others[0], (list, tuple)) else others
    result = x
    for item in unpacked:
        if not (is_tensor(item) or isinstance(item, (bool, int, float))):
            raise TypeError(f"{op}: expected Tensors or Python bool/int/float (or one list of them), got "
                            f"{type(item).__name__}")
        term = core.typed_like(x, item) if is_tensor(item) else item
        if x.dtype.is_bool:
            result = result.bitwise_or(term) if op == "usum" else result.bitwise_and(term)
        else:
            result = result.add(term) if op == "usum" else result.mul(term)
    return result


def usum(x: Tensor, *others: Tensor | Scalar | Sequence[Tensor | Scalar]) -> Tensor:
    """`self + others[0] + others[1] + ...` (elementwise, broadcasting, promoting); for a bool tensor a logical
    or. One list or tuple argument is unpacked (tinygrad's `usum`)."""
    return _fold(x, others, "usum")


def uprod(x: Tensor, *others: Tensor | Scalar | Sequence[Tensor | Scalar]) -> Tensor:
    """`self * others[0] * others[1] * ...`; for a bool tensor a logical and (tinygrad's `uprod`)."""
    return _fold(x, others, "uprod")


def threefry(t: Tensor, seed: Tensor | int) -> Tensor:
    """Threefry-2x32 with 20 rounds (Random123's, as JAX and tinygrad use it) of each uint64 element, a counter,
    under the uint64 key `seed` (a tensor broadcast against this one, or an int): word 0 of counter, key and
    result is the low 32 bits. The IR's THREEFRY op; `rand` and `random_bits` are built on it."""
    if t.dtype is not dtypes.uint64:
        raise DTypeError(f"threefry: the counters must be uint64, got {t.dtype.name}; cast them with "
                         ".cast(dtypes.uint64) (or .bitcast for signed 64-bit words)")
    if is_tensor(seed):
        if seed.dtype is not dtypes.uint64:
            raise DTypeError(f"threefry: the key must be uint64, got {seed.dtype.name}; cast it first")
    elif type(seed) is not int or not 0 <= seed < UINT64_END:
        raise ValueError(f"threefry: an int key must be in [0, 2**64), got {seed!r}")
    x, key = elementwise.operands(t, seed, dtype=dtypes.uint64, op="threefry")
    return core.alu(x, Ops.THREEFRY, key)


def contiguous_backward(x: Tensor) -> Tensor:
    """The same tensor forward; in the backward pass the gradient arriving here is made contiguous (computed
    once into its own buffer rather than fused into each consumer) (plygrad.frontend.gradient_marks)."""
    return x._new(gradient_marks.contiguous_gradient_mark(x.uop))


def max_numel(x: Tensor) -> int:
    """The number of elements of `max_shape`: `numel()` (see max_shape)."""
    return math.prod(x.max_shape)


def schedule_linear(x: Tensor, *lst: Tensor) -> UOp:
    """The SCHEDULE-stage LINEAR of kernel CALLs that would realize this tensor and `lst`, without running it:
    tinygrad 0.14's name for plygrad's `schedule()` (`len(t.schedule_linear().src)` counts the calls)."""
    return _as_tensor(x).schedule(*lst)
