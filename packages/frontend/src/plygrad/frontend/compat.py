"""The rest of tinygrad 0.14's and PyTorch's Tensor API: properties, rounding division, matrix decompositions,
einops rearrange, unpooling, storage helpers, keyed random bits, and tinygrad's small helpers (`const ufix usum uprod
threefry contiguous_backward max_shape max_numel schedule_linear from_url`).

`CompatOps` is the layer of the Tensor tower that binds these as methods. Each method is a thin, typed wrapper with
the public signature and docstring; the work lives in the module of its idea (plygrad.frontend.linalg, .rearrange,
.storage, .keyed_random, .casts), so a reader finds QR in `linalg.py`, not in a 2000-line class. The few methods
that are a line or two of composition are written here directly.

Signatures and results follow tinygrad 0.14, which follows PyTorch where both have a method; where they differ the
docstring says which one is followed.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Self

from plygrad.frontend import fetch, gradient_marks, keyed_random, linalg, storage
from plygrad.frontend import rearrange as rearrange_module
from plygrad.frontend.casts import CastShortcuts
from plygrad.frontend.lazy import LazyTensor, Scalar, stop_gradient
from plygrad.frontend.nn_ops import _explicit_padding, _per_axis
from plygrad.ir import DTypeError, DTypeLike, Ops, ShapeError, UOp, dtypes, result_dtype, to_dtype

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

RoundingMode = Literal["trunc", "floor"]
UINT64_END = 2**64


def _scalar(value: object, op: str) -> None:
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"{op}: expected a Tensor or a Python bool/int/float, got {type(value).__name__}")


class CompatOps(CastShortcuts):
    """tinygrad/PyTorch methods bound onto the Tensor (see the module docstring)."""

    __slots__ = ()

    def _as_tensor(self) -> Tensor:
        """This object as the Tensor it is (every object of the tower is one), for the storage helpers."""
        from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

        assert isinstance(self, Tensor), f"expected a Tensor, got {type(self).__name__}"
        return self

    # ---- properties -------------------------------------------------------------------------------------------
    def size(self, dim: int | None = None) -> int | tuple[int, ...]:
        """The shape, or the length of axis `dim` (negative counts from the end)."""
        if dim is None:
            return self.shape
        if self.ndim == 0:
            raise ShapeError(f"size: dim {dim} was given but a 0-d tensor has no axes; call size() for its shape ()")
        return self.shape[self._axis(dim, "size")]

    def element_size(self) -> int:
        """Bytes per element of the dtype."""
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """Bytes of all elements: numel() * element_size()."""
        return self.numel() * self.element_size()

    def is_floating_point(self) -> bool:
        """True for float16, bfloat16, float32 and float64 tensors."""
        return self.dtype.is_float

    # ---- arithmetic -------------------------------------------------------------------------------------------
    def div(self, other: Self | Scalar, reverse: bool = False, rounding_mode: RoundingMode | None = None) -> Self:
        """Division (`x / y`). `rounding_mode=None` is true division (integers divide as the default float);
        "trunc" rounds the quotient toward zero and "floor" down, and then integer operands keep their integer
        dtype (PyTorch's and tinygrad's `div`)."""
        if rounding_mode is None:
            return super().div(other, reverse)
        if rounding_mode == "floor":
            return self.floordiv(other, reverse)
        if rounding_mode != "trunc":
            raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        x, y = self._operands(other, reverse=reverse, op="div")
        if x.dtype.is_float:
            return x.div(y).trunc()
        x._no_bool("division with rounding_mode='trunc'")
        return x._alu(Ops.IDIV, y)

    def fmod(self, other: Self | Scalar) -> Self:
        """C's remainder (torch.fmod): `x - trunc(x / y) * y`, taking the sign of the dividend (unlike `%`, which
        takes the divisor's)."""
        x, y = self._operands(other, op="fmod")
        if x.dtype.is_float:
            return x.sub(x.div(y, rounding_mode="trunc").mul(y))
        x._no_bool("fmod")
        return x._alu(Ops.MOD, y)

    def logcumsumexp(self, axis: int = 0) -> Self:
        """log(cumsum(exp(x))) along `axis`, without overflow or underflow: out[i] is the logsumexp of x[..i],
        computed over a triangular mask (n x n work per row), so a small early value next to a large later one
        stays exact."""
        x = self._float_input()
        if x.ndim == 0:
            return x
        ax = x._axis(axis, "logcumsumexp")
        last = x.transpose(ax, -1) if ax != x.ndim - 1 else x
        n = last.shape[-1]
        index = x._counter(n)
        upto = index.unsqueeze(-1).ge(index)  # (n, n): row i keeps columns j <= i
        rows = upto.where(last.unsqueeze(-2), -math.inf)
        out = rows.logsumexp(-1)
        return out.transpose(ax, -1) if ax != x.ndim - 1 else out

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Self:
        """`F.normalize`: x / max(|x|_p, eps) along `dim` (p = inf is the largest magnitude)."""
        x = self._float_input()
        magnitude = x.abs()
        if p == math.inf:
            norm = magnitude.max(dim, keepdim=True)
        elif p == 1:
            norm = magnitude.sum(dim, keepdim=True)
        else:
            # a zero row has norm 0 with gradient 0 (PyTorch's subgradient), not the NaN of sqrt's slope at 0
            total = magnitude.square().sum(dim, keepdim=True) if p == 2 else magnitude.pow(p).sum(dim, keepdim=True)
            zero = total.eq(0.0)
            safe = zero.where(1.0, total)
            norm = zero.where(0.0, safe.sqrt() if p == 2 else safe.pow(1.0 / p))
        return x.div(norm.clamp(min_=eps))

    # ---- movement -----------------------------------------------------------------------------------------------
    def _target_shape(self, shape: int | Sequence[int | None] | None, rest: tuple[int | None, ...],
                      op: str) -> tuple[int, ...]:
        dims = (shape, *rest) if isinstance(shape, int) or shape is None else (*shape, *rest)
        if len(dims) != self.ndim:
            raise ShapeError(f"{op}: shape {dims} needs one size (or None to keep) per axis of shape {self.shape}")
        return tuple(n if d is None else d for d, n in zip(dims, self.shape, strict=True))

    def pad_to(self, shape: int | Sequence[int | None] | None, *args: int | None, value: Scalar = 0) -> Self:
        """Pad at the end of each axis up to `shape` (None keeps an axis), filling with `value` (tinygrad)."""
        target = self._target_shape(shape, args, "pad_to")
        if any(t < n for t, n in zip(target, self.shape, strict=True)):
            raise ShapeError(f"pad_to: shape {target} is smaller than the tensor's {self.shape} on some axis; use "
                             "shrink_to to cut")
        if target == self.shape:
            return self
        return self.pad(tuple((0, t - n) for t, n in zip(target, self.shape, strict=True)), value=value)

    def shrink_to(self, shape: int | Sequence[int | None] | None, *args: int | None) -> Self:
        """The leading `shape[i]` elements of each axis (None keeps an axis) (tinygrad)."""
        target = self._target_shape(shape, args, "shrink_to")
        return self.shrink(tuple((0, t) for t in target))

    def rearrange(self, formula: str, **sizes: int) -> Self:
        """einops' rearrange: `x.rearrange("b c h w -> b (c h w)")`, `x.rearrange("b (h p) -> b h p", p=2)`,
        ellipsis included (plygrad.frontend.rearrange)."""
        return rearrange_module.rearrange(self, formula, **sizes)

    # ---- selection ----------------------------------------------------------------------------------------------
    def masked_select(self, mask: LazyTensor, size: int | None = None, fill_value: Scalar = 0) -> Self:
        """The elements where `mask` is true, flattened. With `size=None` the length is the number of true values
        (read back from the device first); with `size=N` it is N, cut or padded with `fill_value`, and nothing is
        read back, so the op can run inside a jitted function (tinygrad)."""
        if size is None:
            return super().masked_select(mask)
        if not isinstance(mask, CompatOps) or not mask.dtype.is_bool:
            what = mask.dtype if isinstance(mask, LazyTensor) else type(mask).__name__
            raise DTypeError(f"masked_select: the mask must be a bool tensor, got {what}")
        if type(size) is not int or size < 0:
            raise ValueError(f"masked_select: size must be an int >= 0 or None, got {size!r}")
        flat = self.flatten()
        keep = self._mine(mask)._broadcast_to(self.shape).flatten()
        rank = keep.cast(dtypes.int32).cumsum(0)  # 1-based slot of each kept element
        slots = self._counter(size)
        hit = keep.logical_and(rank.unsqueeze(0).eq(slots.add(1).unsqueeze(1)))  # (size, numel)
        picked = hit.where(flat.unsqueeze(0), 0).sum(1)._cast_to(self.dtype)
        return slots.lt(keep.cast(dtypes.int32).sum()).where(picked, fill_value)._cast_to(self.dtype)

    # ---- pooling ------------------------------------------------------------------------------------------------
    def max_unpool2d(self, indices: Self, kernel_size: int | Sequence[int] = (2, 2),
                     stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Self:
        """The partial inverse of `max_pool2d(..., return_indices=True)`: each value written at its index in the
        flattened spatial output, zeros elsewhere (`F.max_unpool2d`; any number of spatial axes). Without
        `output_size` the spatial size is (in - 1) * stride - pads + dilation * (kernel - 1) + 1 per axis."""
        if indices.shape != self.shape:
            raise ShapeError(f"max_unpool2d: indices of shape {indices.shape} for values of shape {self.shape}; "
                             "pass the indices max_pool2d returned with these values")
        kernel = tuple(kernel_size) if not isinstance(kernel_size, int) else _per_axis(kernel_size, 2, "kernel_size",
                                                                                       "max_unpool2d")
        spatial = len(kernel)
        if self.ndim < spatial + 1:
            raise ShapeError(f"max_unpool2d: values of shape {self.shape} have fewer than {spatial} spatial axes")
        dims = self.shape[-spatial:]
        if output_size is None:
            strides = kernel if stride is None else _per_axis(stride, spatial, "stride", "max_unpool2d")
            dilations = _per_axis(dilation, spatial, "dilation", "max_unpool2d")
            pads = _explicit_padding(padding, spatial, "max_unpool2d")
            out = tuple((n - 1) * s - (b + a) + d * (k - 1) + 1
                        for n, k, s, d, (b, a) in zip(dims, kernel, strides, dilations, pads, strict=True))
        else:
            out = tuple(output_size)[-spatial:]
        lead = self.shape[:-spatial]
        flat_values = self.reshape(*lead, -1)
        flat_indices = indices.reshape(*lead, -1)
        size = math.prod(out)
        # overlapping windows can pick one element twice. PyTorch writes it once (a scatter) but gives each pick the
        # whole output gradient (a gather). The one-hot sum has exactly that gradient; the detached difference to
        # the scatter then corrects its forward values where a position was picked more than once.
        hit = self._mine(flat_indices).unsqueeze(-1).eq(self._counter(size))  # (..., L, size)
        summed = hit.where(flat_values.unsqueeze(-1), 0).sum(-2)._cast_to(self.dtype)
        written = self.zeros(*lead, size, dtype=self.dtype, device=self.device).scatter(-1, flat_indices, flat_values)
        correction = written.sub(summed)
        fixed = summed.add(self._make(stop_gradient(correction.uop), correction.device, correction.inputs))
        return fixed.reshape(*lead, *out)

    # ---- linear algebra -----------------------------------------------------------------------------------------
    def qr(self) -> tuple[Self, Self]:
        """Householder QR of the last two axes: `(Q, R)` with Q (..., m, m) orthogonal and R (..., m, n) upper
        triangular (the complete factorization, as tinygrad) (plygrad.frontend.linalg)."""
        return linalg.qr(self)

    def svd(self, full_matrices: bool = True) -> tuple[Self, Self, Self]:
        """`(U, S, Vh)` with self = U @ diag(S) @ Vh, S descending, by QR and one-sided Jacobi
        (plygrad.frontend.linalg)."""
        return linalg.svd(self, full_matrices)

    def newton_schulz(self, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Self:
        """Newton-Schulz iteration of the odd polynomial with coefficients `params` (plygrad.frontend.linalg)."""
        return linalg.newton_schulz(self, steps, params, eps)

    # ---- functional helpers -------------------------------------------------------------------------------------
    def sequential(self, ll: Sequence[Callable[[Self], Self]]) -> Self:
        """`ll[-1](...ll[1](ll[0](self)))`: the functions applied in order."""
        return functools.reduce(lambda x, f: f(x), ll, self)

    def const_like(self, b: Scalar, dtype: DTypeLike | None = None) -> Self:
        """A constant `b` with this tensor's shape and device (and dtype, unless given); it costs no memory."""
        return self._const(b, None if dtype is None else to_dtype(dtype))

    @classmethod
    def random_bits(cls, key: Self, counter: Self, num: int) -> Self:
        """`num` uint32 words of tinygrad's keyed Threefry stream for `key` and `counter` (two uint32 words each)
        (plygrad.frontend.keyed_random)."""
        return keyed_random.random_bits(key, counter, num)

    # ---- storage ------------------------------------------------------------------------------------------------
    def data(self) -> memoryview:
        """The realized values as a memoryview shaped like the tensor (plygrad.frontend.storage)."""
        return storage.data(self._as_tensor())

    def clone(self, device: str | None = None) -> Tensor:
        """A copy in its own memory (on `device` if given); `.grad` is cloned too (plygrad.frontend.storage)."""
        return storage.clone(self._as_tensor(), device)

    def replace(self, x: Tensor) -> Tensor:
        """Make this tensor `x` (same shape; dtype and device may differ); returns self."""
        return storage.replace(self._as_tensor(), x)

    def to_(self, device: str) -> Tensor:
        """Move this tensor and its `.grad` to `device` in place; returns self."""
        return storage.to_(self._as_tensor(), device)

    @classmethod
    def from_blob(cls, ptr: int | ctypes.c_void_p, shape: Sequence[int], dtype: DTypeLike | None = None,
                  device: str | None = None) -> Tensor:
        """A tensor holding a copy of `prod(shape)` elements of `dtype` (default float32) at address `ptr`: the
        memory may be freed afterwards (tinygrad aliases it instead; see plygrad.frontend.storage)."""
        from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

        return storage.from_blob(Tensor, ptr, shape, None if dtype is None else to_dtype(dtype), device)

    @staticmethod
    def from_url(url: str, gunzip: bool = False, *, dtype: DTypeLike | None = None, device: str | None = None,
                 requires_grad: bool | None = None) -> Tensor:
        """The bytes at `url` (`http(s)://` or `file://`; gzip-decompressed when `gunzip`) as a 1-d uint8 tensor, or
        reinterpreted as `dtype` (plygrad.frontend.fetch). tinygrad passes the keywords on to `Tensor(...)` too."""
        from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

        return Tensor(fetch.fetch_bytes(url, gunzip), dtype=dtype, device=device, requires_grad=requires_grad)

    # ---- tinygrad's small helpers -------------------------------------------------------------------------------
    @staticmethod
    def const(b: Scalar, dtype: DTypeLike | None = None) -> Tensor:
        """A 0-d constant `b` on the default device, costing no memory; its dtype is `dtype`, else the Python
        type's default (bool, int32, float32). tinygrad's is a weak constant that takes the other operand's dtype
        in arithmetic; plygrad's dtype is fixed, so for that behaviour pass the Python scalar itself, which is weak
        here (`x * 2.0` keeps a float16 x float16)."""
        from plygrad.frontend.tensor import Tensor  # tensor.py builds on this module

        _scalar(b, "const")
        return Tensor(b, dtype=dtype)

    def ufix(self, x: Self | Scalar) -> Self:
        """`x` as an operand of this tensor: a Tensor as it is; a Python scalar as a 0-d constant on this tensor's
        device with the dtype it takes beside this tensor in arithmetic (a float16 tensor's 2 is float16, an int32
        tensor's 2.5 the default float), which is what tinygrad's weak constant resolves to."""
        if isinstance(x, CompatOps):
            return x
        _scalar(x, "ufix")
        return self._const(x, result_dtype(self.dtype, x), shape=())

    def _fold(self, others: tuple[Self | Scalar | Sequence[Self | Scalar], ...], op: str) -> Self:
        """`self` combined with each of `others` in order: add/mul, or logical or/and for a bool tensor."""
        unpacked = others[0] if len(others) == 1 and isinstance(others[0], (list, tuple)) else others
        result = self
        for item in unpacked:
            if not isinstance(item, (CompatOps, bool, int, float)):
                raise TypeError(f"{op}: expected Tensors or Python bool/int/float (or one list of them), got "
                                f"{type(item).__name__}")
            term = self._mine(item) if isinstance(item, CompatOps) else item
            if self.dtype.is_bool:
                result = result.bitwise_or(term) if op == "usum" else result.bitwise_and(term)
            else:
                result = result.add(term) if op == "usum" else result.mul(term)
        return result

    def usum(self, *others: Self | Scalar | Sequence[Self | Scalar]) -> Self:
        """`self + others[0] + others[1] + ...` (elementwise, broadcasting, promoting); for a bool tensor a logical
        or. One list or tuple argument is unpacked (tinygrad's `usum`)."""
        return self._fold(others, "usum")

    def uprod(self, *others: Self | Scalar | Sequence[Self | Scalar]) -> Self:
        """`self * others[0] * others[1] * ...`; for a bool tensor a logical and (tinygrad's `uprod`)."""
        return self._fold(others, "uprod")

    def threefry(self, seed: Self | int) -> Self:
        """Threefry-2x32 with 20 rounds (Random123's, as JAX and tinygrad use it) of each uint64 element, a counter,
        under the uint64 key `seed` (a tensor broadcast against this one, or an int): word 0 of counter, key and
        result is the low 32 bits. The IR's THREEFRY op; `rand` and `random_bits` are built on it."""
        if self.dtype is not dtypes.uint64:
            raise DTypeError(f"threefry: the counters must be uint64, got {self.dtype.name}; cast them with "
                             ".cast(dtypes.uint64) (or .bitcast for signed 64-bit words)")
        if isinstance(seed, CompatOps):
            if seed.dtype is not dtypes.uint64:
                raise DTypeError(f"threefry: the key must be uint64, got {seed.dtype.name}; cast it first")
        elif type(seed) is not int or not 0 <= seed < UINT64_END:
            raise ValueError(f"threefry: an int key must be in [0, 2**64), got {seed!r}")
        x, key = self._operands(seed, dtype=dtypes.uint64, op="threefry")
        return x._alu(Ops.THREEFRY, key)

    def contiguous_backward(self) -> Self:
        """The same tensor forward; in the backward pass the gradient arriving here is made contiguous (computed
        once into its own buffer rather than fused into each consumer) (plygrad.frontend.gradient_marks)."""
        return self._new(gradient_marks.contiguous_gradient_mark(self.uop))

    @property
    def max_shape(self) -> tuple[int, ...]:
        """tinygrad's shape with each symbolic size at its maximum. plygrad's tensor shapes are always ints (a
        TinyJit varies sizes by capturing again), so this is `shape`."""
        return self.shape

    def max_numel(self) -> int:
        """The number of elements of `max_shape`: `numel()` (see max_shape)."""
        return math.prod(self.max_shape)

    def schedule_linear(self, *lst: Tensor) -> UOp:
        """The SCHEDULE-stage LINEAR of kernel CALLs that would realize this tensor and `lst`, without running it:
        tinygrad 0.14's name for plygrad's `schedule()` (`len(t.schedule_linear().src)` counts the calls)."""
        return self._as_tensor().schedule(*lst)
