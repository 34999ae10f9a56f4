"""Neural-network ops on tensors: linear, einsum, convolutions, pooling, interpolation, normalization,
attention, dropout and losses.

Everything here is a composition of the layers below, so autograd, fusion and every backend come for free.
Convolution and pooling read the input through the sliding-window view `_pool` (movement ops only, no im2col
copy): a convolution is that view times the weight, summed over (cin, *kernel), which the scheduler fuses into one
reduce kernel with the reduce loops innermost. Interpolation is a product with a small resampling matrix per axis,
and the class-index losses pick the target's log-probability with a one-hot comparison against a counter, so
nothing needs a gather.

Shapes, defaults and argument names follow tinygrad 0.14's `Tensor`; the numbers follow PyTorch
(`torch.nn.functional`), including PyTorch's ceil-mode pooling windows, label smoothing and ignore_index.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Literal, Self, TypeAlias, TypeVar, overload

from plygrad.frontend import random
from plygrad.frontend.activations import ActivationOps
from plygrad.ir import DType, DTypeError, DTypeLike, ShapeError, broadcast_shapes, dtypes, result_dtype, to_dtype

Reduction: TypeAlias = Literal["mean", "sum", "none"]
REDUCTIONS: tuple[Reduction, ...] = ("mean", "sum", "none")
Padding: TypeAlias = int | Sequence[int] | str
InterpolateMode: TypeAlias = Literal["linear", "bilinear", "trilinear", "nearest", "nearest-exact"]
T = TypeVar("T", bound="NNOps")

# distinct placeholder labels for the axes an einsum `...` stands for (never an ASCII letter, so never clash)
_ELLIPSIS_LABELS = "".join(chr(0x3B1 + i) for i in range(24))


def _per_axis(value: int | Sequence[int], n: int, name: str, op: str) -> tuple[int, ...]:
    """An int for every spatial axis, or exactly one int per axis."""
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(type(v) is not int for v in values):
        raise ValueError(f"{op}: {name} {value!r} needs an int or {n} ints (one per spatial axis)")
    return values


def _explicit_padding(padding: int | Sequence[int], n: int, op: str) -> tuple[tuple[int, int], ...]:
    """`(before, after)` per spatial axis from an int, one int per axis (both sides), or 2n ints in PyTorch's
    `F.pad` order `(left, right, top, bottom, ...)`, which starts from the last axis (tinygrad's convention)."""
    if isinstance(padding, int):
        return ((padding, padding),) * n
    flat = tuple(padding)
    if any(type(p) is not int for p in flat):
        raise ValueError(f"{op}: padding {padding!r} must be ints")
    if len(flat) == n:
        return tuple((p, p) for p in flat)
    if len(flat) == 2 * n:
        return tuple((flat[2 * i], flat[2 * i + 1]) for i in range(n))[::-1]
    raise ValueError(f"{op}: padding {padding!r} needs an int, {n} ints (one per spatial axis) or {2 * n} ints "
                     "(left, right, top, bottom, ... starting from the last axis)")


def _conv_padding(padding: Padding, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                  op: str) -> tuple[tuple[int, int], ...]:
    """Explicit padding, or PyTorch's 'valid' (none) and 'same' (output size = input size; an odd total puts the
    extra element after, as PyTorch does)."""
    if not isinstance(padding, str):
        return _explicit_padding(padding, len(kernel), op)
    if padding == "valid":
        return ((0, 0),) * len(kernel)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' needs stride 1, got stride {stride} (as in PyTorch)")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return tuple((t // 2, t - t // 2) for t in totals)
    raise ValueError(f"{op}: padding {padding!r} is not 'same' or 'valid' (or an int or a tuple of ints)")


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction {reduction!r} is not one of 'mean', 'sum', 'none'")


def _accumulate_dtype(dtype: DType) -> DType:
    """Half-precision products are summed in float32 (as PyTorch's CPU kernels do) and rounded once at the end."""
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


class NNOps(ActivationOps):
    """Neural-network ops on tensors."""

    __slots__ = ()

    # ---- small building blocks ----------------------------------------------------------------------------------
    def _counter(self, n: int) -> Self:
        """0..n-1 as int32, made in the graph (no memory)."""
        return self._make(random.counter(n, dtypes.int32, self.device), self.device)

    def _reduced(self, reduction: Reduction) -> Self:
        if reduction == "mean":
            return self.mean()
        return self.sum() if reduction == "sum" else self

    # ---- linear algebra -----------------------------------------------------------------------------------------
    def linear(self, weight: Self, bias: Self | None = None, dtype: DTypeLike | None = None) -> Self:
        """`self @ weight + bias` with weight of shape (in, out) as in tinygrad (torch.nn.Linear stores (out, in)
        and computes `x @ weight.T`); a 1-D weight scales elementwise."""
        x, w = (self, weight) if dtype is None else (self.cast(dtype), weight.cast(dtype))
        if w.ndim == 1:
            out = x.mul(w)
        else:
            if x.ndim == 0 or x.shape[-1] != w.shape[0]:
                raise ShapeError(f"linear: input of shape {self.shape} does not match weight of shape {weight.shape} "
                                 "(tinygrad layout: weight is (in_features, out_features))")
            out = x.matmul(w)
        return out if bias is None else out.add(bias)

    @staticmethod
    def einsum(formula: str, *operands: T | Sequence[T], dtype: DTypeLike | None = None) -> T:
        """Einstein summation like `torch.einsum`: explicit (`ij,jk->ik`) or implicit output (the labels seen once,
        in alphabetical order), repeated labels in one operand (diagonals, `ii->i`), `...` for broadcast axes, and
        size-1 axes broadcasting against the same label elsewhere.

        Each operand is brought to one common axis order (output labels first, then the summed ones) and the
        product of all of them is summed over the trailing axes: one fused reduce."""
        ops: list[T] = [*operands[0]] if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
            else list(operands)  # type: ignore[arg-type]
        if not ops:
            raise ValueError(f"einsum {formula!r}: needs at least one operand")
        spec = formula.replace(" ", "")
        lhs, arrow, rhs = spec.partition("->")
        terms = lhs.split(",")
        if len(terms) != len(ops):
            raise ValueError(f"einsum {formula!r}: the formula names {len(terms)} operands but {len(ops)} were given")
        for term in (*terms, rhs):
            letters = term.replace("...", "")
            if term.count("...") > 1 or not all(c.isascii() and c.isalpha() for c in letters):
                raise ValueError(f"einsum {formula!r}: a term may use only letters and one '...'; got {term!r}")
        ellipsis_dims = max((x.ndim - len(t.replace("...", "")) for x, t in zip(ops, terms, strict=True)
                             if "..." in t), default=0)
        if ellipsis_dims > len(_ELLIPSIS_LABELS):
            raise ValueError(f"einsum {formula!r}: '...' covers {ellipsis_dims} axes, at most "
                             f"{len(_ELLIPSIS_LABELS)} are supported")
        ellipsis = _ELLIPSIS_LABELS[:max(ellipsis_dims, 0)]
        labelled: list[tuple[T, str]] = []
        for i, (x, term) in enumerate(zip(ops, terms, strict=True)):
            named = len(term.replace("...", ""))
            if "..." in term:
                own = x.ndim - named
                if own < 0:
                    raise ShapeError(f"einsum {formula!r}: operand {i} of shape {x.shape} has fewer axes than the "
                                     f"{named} letters of {term!r}")
                head, tail = term.split("...")
                labels = head + ellipsis[len(ellipsis) - own:] + tail  # '...' axes align from the right
            else:
                labels = term
                if named != x.ndim:
                    raise ShapeError(f"einsum {formula!r}: operand {i} of shape {x.shape} has {x.ndim} axes but "
                                     f"{term!r} names {named}")
            labelled.append(NNOps._einsum_diagonals(x, labels, formula))
        if arrow:
            out = rhs.replace("...", ellipsis)
            seen = "".join(labels for _, labels in labelled)
            for c in out:
                if out.count(c) > 1 or c not in seen:
                    raise ValueError(f"einsum {formula!r}: output label {c!r} repeats or is not in any input")
        else:
            counts = "".join(t.replace("...", "") for t in terms)
            out = ellipsis + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
        sizes: dict[str, int] = {}
        for i, (x, labels) in enumerate(labelled):
            for c, n in zip(labels, x.shape, strict=True):
                if sizes.get(c, 1) not in (1, n) and n != 1:
                    raise ShapeError(f"einsum {formula!r}: label {c!r} has size {sizes[c]} in one operand and {n} "
                                     f"in operand {i} (shape {x.shape})")
                sizes[c] = max(sizes.get(c, 1), n)
        summed = "".join(dict.fromkeys(c for _, labels in labelled for c in labels if c not in out))
        order = out + summed
        dt = to_dtype(dtype) if dtype is not None else functools.reduce(result_dtype, (x.dtype for x, _ in labelled))
        acc = _accumulate_dtype(dt)
        aligned = [x._cast_to(acc).permute(sorted(range(x.ndim), key=lambda a: order.index(labels[a])))
                   .reshape(tuple(sizes[c] if c in labels and x.shape[labels.index(c)] != 1 else 1 for c in order))
                   for x, labels in labelled]
        product = functools.reduce(lambda a, b: a.mul(b), aligned)
        product = product.expand(tuple(sizes[c] for c in order))
        if summed:
            product = product.sum(tuple(range(len(out), len(order))))
        return product._cast_to(dt)

    @staticmethod
    def _einsum_diagonals(x: T, labels: str, formula: str) -> tuple[T, str]:
        """Repeated labels within one operand read its diagonal (`ii` of a matrix is its diagonal, labelled i)."""
        while len(set(labels)) != len(labels):
            c = next(c for c in labels if labels.count(c) > 1)
            a = labels.index(c)
            b = labels.index(c, a + 1)
            if x.shape[a] != x.shape[b]:
                raise ShapeError(f"einsum {formula!r}: repeated label {c!r} spans axes of sizes {x.shape[a]} and "
                                 f"{x.shape[b]} (operand shape {x.shape}); a diagonal needs equal sizes")
            x = x.diagonal(0, a, b)
            labels = labels[:a] + labels[a + 1:b] + labels[b + 1:] + c
        return x, labels

    # ---- convolution --------------------------------------------------------------------------------------------
    def conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
               dilation: int | Sequence[int] = 1, padding: Padding = 0, dtype: DTypeLike | None = None) -> Self:
        """A convolution over any number of spatial axes (1, 2, 3, ... from the weight's rank), like
        `F.conv2d`: input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel), bias (Cout,).

        `padding`: an int, one int per spatial axis, 2 per axis in F.pad order (left, right, top, bottom, ...),
        or 'same' / 'valid'. The windows view (N, Cin, *out, *kernel) is laid out as (N, groups, Cout/groups,
        *out, Cin/groups, *kernel) against the weight so the sum over the last axes is one reduce kernel."""
        op = f"conv{max(weight.ndim - 2, 1)}d"
        x, w = (self, weight) if dtype is None else (self.cast(dtype), weight.cast(dtype))
        spatial = weight.ndim - 2
        if spatial < 1 or self.ndim != weight.ndim:
            raise ShapeError(f"{op}: input of shape {self.shape} and weight of shape {weight.shape}: need input "
                             "(N, Cin, *spatial) and weight (Cout, Cin/groups, *kernel) of the same rank >= 3")
        batch, cin = self.shape[:2]
        cout, cin_group = weight.shape[:2]
        kernel = weight.shape[2:]
        if type(groups) is not int or groups < 1 or cin != groups * cin_group or cout % groups:
            raise ShapeError(f"{op}: input of shape {self.shape} has {cin} channels, but weight of shape "
                             f"{weight.shape} with groups={groups} expects {groups * cin_group} (and Cout {cout} "
                             "divisible by groups)")
        if bias is not None and bias.shape != (cout,):
            raise ShapeError(f"{op}: bias of shape {bias.shape} should be ({cout},), one per output channel")
        strides = _per_axis(stride, spatial, "stride", op)
        dilations = _per_axis(dilation, spatial, "dilation", op)
        pads = _conv_padding(padding, kernel, strides, dilations, op)
        padded = x.pad(((0, 0), (0, 0), *pads)) if any(b or a for b, a in pads) else x
        for axis, (n, k, d) in enumerate(zip(padded.shape[2:], kernel, dilations, strict=True)):
            if n < d * (k - 1) + 1:
                raise ShapeError(f"{op}: spatial axis {axis} of the padded input (input shape {self.shape}, padding "
                                 f"{pads}) has size {n}, smaller than the kernel's reach {d * (k - 1) + 1} "
                                 f"(weight shape {weight.shape}, dilation {dilations})")
        dt = x.dtype if x.dtype is w.dtype else result_dtype(x.dtype, w.dtype)
        acc = _accumulate_dtype(dt)
        windows = padded._cast_to(acc)._pool(kernel, strides, dilations)  # (N, Cin, *out, *kernel)
        out = windows.shape[2:2 + spatial]
        per_group = cout // groups
        windows = windows.reshape(batch, groups, 1, cin_group, *out, *kernel)
        windows = windows.expand(batch, groups, per_group, cin_group, *out, *kernel)
        windows = windows.permute(0, 1, 2, *range(4, 4 + spatial), 3, *range(4 + spatial, 4 + 2 * spatial))
        w = w._cast_to(acc).reshape(1, groups, per_group, *(1,) * spatial, cin_group, *kernel)
        summed = windows.mul(w).sum(tuple(range(3 + spatial, 4 + 2 * spatial)))
        result = summed._cast_to(dt).reshape(batch, cout, *out)
        return result if bias is None else result.add(bias.reshape(1, cout, *(1,) * spatial))

    def conv1d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
               dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Self:
        """`F.conv1d`: conv2d with one spatial axis (the weight's rank decides)."""
        return self.conv2d(weight, bias, groups, stride, dilation, padding)

    def conv3d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
               dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Self:
        """`F.conv3d`: conv2d with three spatial axes."""
        return self.conv2d(weight, bias, groups, stride, dilation, padding)

    def conv_transpose2d(self, weight: Self, bias: Self | None = None, groups: int = 1,
                         stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Self:
        """The transposed convolution (the gradient of conv2d with respect to its input), like
        `F.conv_transpose2d`: weight (Cin, Cout/groups, *kernel), any number of spatial axes.

        Built as a plain convolution: the input with `stride - 1` zeros between elements, padded by
        `dilation*(kernel-1) - padding` (plus `output_padding` after), convolved with the flipped kernel whose
        in/out channel axes are swapped within each group."""
        spatial = weight.ndim - 2
        op = f"conv_transpose{max(spatial, 1)}d"
        if spatial < 1 or self.ndim != weight.ndim:
            raise ShapeError(f"{op}: input of shape {self.shape} and weight of shape {weight.shape}: need input "
                             "(N, Cin, *spatial) and weight (Cin, Cout/groups, *kernel) of the same rank >= 3")
        cin, out_group = weight.shape[:2]
        kernel = weight.shape[2:]
        if type(groups) is not int or groups < 1 or self.shape[1] != cin or cin % groups:
            raise ShapeError(f"{op}: input of shape {self.shape} has {self.shape[1]} channels, but weight of shape "
                             f"{weight.shape} expects {cin} (divisible by groups={groups})")
        strides = _per_axis(stride, spatial, "stride", op)
        dilations = _per_axis(dilation, spatial, "dilation", op)
        extra = _per_axis(output_padding, spatial, "output_padding", op)
        pads = _explicit_padding(padding, spatial, op)
        for s, d, e in zip(strides, dilations, extra, strict=True):
            if not 0 <= e < max(s, d):
                raise ValueError(f"{op}: output_padding {output_padding!r} must be smaller than stride {stride!r} or "
                                 f"dilation {dilation!r}")
        inner = self.shape[2:]
        out = tuple((n - 1) * s - b - a + d * (k - 1) + e + 1
                    for n, s, (b, a), d, k, e in zip(inner, strides, pads, dilations, kernel, extra, strict=True))
        if any(n < 0 for n in out) or (0 in inner and any(out)):
            raise ShapeError(f"{op}: input of shape {self.shape}, weight of shape {weight.shape}, padding {pads} give "
                             f"the output size {out}; use less padding")
        if 0 in out or 0 in inner:  # nothing to compute (PyTorch returns the empty result too); still a result
            shape = (self.shape[0], out_group * groups, *out)  # of self and weight, so autograd sees both
            nothing = self.sum().mul(weight.sum()).mul(0.0)
            return nothing.reshape((1,) * len(shape)).expand(shape)
        x = self
        if any(s > 1 for s in strides):
            spaced = [v for n in inner for v in (n, 1)]
            x = x.reshape(*self.shape[:2], *spaced)
            x = x.pad(((0, 0), (0, 0), *(p for s in strides for p in ((0, 0), (0, s - 1)))))
            x = x.reshape(*self.shape[:2], *(n * s for n, s in zip(inner, strides, strict=True)))
            x = x.shrink(((0, x.shape[0]), (0, x.shape[1]),
                          *((0, max((n - 1) * s + 1, 0)) for n, s in zip(inner, strides, strict=True))))
        reach = [d * (k - 1) for k, d in zip(kernel, dilations, strict=True)]
        x = x.pad(((0, 0), (0, 0), *((r - b, r - a + e) for r, (b, a), e in zip(reach, pads, extra, strict=True))))
        w = weight.reshape(groups, cin // groups, out_group, *kernel)
        w = w.permute(0, 2, 1, *range(3, 3 + spatial)).reshape(groups * out_group, cin // groups, *kernel)
        w = w.flip(tuple(range(2, 2 + spatial)))
        return x.conv2d(w, bias, groups, 1, dilations, 0)

    def conv_transpose1d(self, weight: Self, bias: Self | None = None, groups: int = 1,
                         stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                         padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Self:
        """`F.conv_transpose1d`: conv_transpose2d with one spatial axis."""
        return self.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)

    # ---- pooling ------------------------------------------------------------------------------------------------
    def _pool_windows(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None, *,
                      dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool, op: str,
                      default_rank: int = 2) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...],
                                                      tuple[int, ...], tuple[int, ...]]:
        """(kernel, padding, stride, dilation) of a pooling op; the padding includes what ceil_mode adds after.

        PyTorch's ceil mode: out = ceil((n + pads - reach) / stride) + 1, less one when the last window would
        start past the input (in the right padding); the windows that run over the end read padding."""
        kernel = _per_axis(kernel_size, default_rank, "kernel_size", op) if isinstance(kernel_size, int) \
            else tuple(kernel_size)
        spatial = len(kernel)
        if spatial == 0 or spatial > self.ndim or any(type(k) is not int or k < 1 for k in kernel):
            raise ShapeError(f"{op}: kernel_size {kernel_size!r} must be ints >= 1, at most one per axis of the input "
                             f"of shape {self.shape}")
        strides = kernel if stride is None else _per_axis(stride, spatial, "stride", op)
        dilations = _per_axis(dilation, spatial, "dilation", op)
        pads = _explicit_padding(padding, spatial, op)
        full = []
        for axis, (n, k, s, d, (before, after)) in enumerate(
                zip(self.shape[-spatial:], kernel, strides, dilations, pads, strict=True)):
            reach = d * (k - 1) + 1
            room = n + before + after - reach
            if room < 0 or s < 1:
                raise ShapeError(f"{op}: window {k} (dilation {d}) does not fit spatial axis {axis} of size {n} with "
                                 f"padding {(before, after)} (input shape {self.shape}); pad more or use a smaller "
                                 "window")
            out = (-(-room // s) if ceil_mode else room // s) + 1
            if ceil_mode and (out - 1) * s >= n + before:
                out -= 1
            full.append((before, max(after, (out - 1) * s + reach - n - before)))
        return kernel, tuple(full), strides, dilations

    @overload
    def max_pool2d(self, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
                   dilation: int | Sequence[int] = ..., padding: int | Sequence[int] = ..., ceil_mode: bool = ...,
                   return_indices: Literal[False] = ...) -> Self: ...
    @overload
    def max_pool2d(self, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
                   dilation: int | Sequence[int] = ..., padding: int | Sequence[int] = ..., ceil_mode: bool = ...,
                   *, return_indices: Literal[True]) -> tuple[Self, Self]: ...
    def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   return_indices: bool = False) -> Self | tuple[Self, Self]:
        """The maximum of each window over the last len(kernel_size) axes (`F.max_pool2d`; any number of axes).

        Padding reads as the dtype's lowest value so it never wins. `return_indices` also gives each maximum's
        position in the flattened spatial input (int64, the first one on ties), as PyTorch does."""
        kernel, pads, strides, dilations = self._pool_windows(kernel_size, stride, dilation=dilation, padding=padding,
                                                              ceil_mode=ceil_mode, op="max_pool2d")
        spatial = len(kernel)
        lowest = self.dtype.min
        grow = ((0, 0),) * (self.ndim - spatial) + pads
        padded = self.pad(grow, value=lowest) if any(b or a for b, a in pads) else self
        window_axes = tuple(range(-spatial, 0))
        windows = padded._pool(kernel, strides, dilations)
        best = windows.max(window_axes)
        if not return_indices:
            return best
        dims = self.shape[-spatial:]
        where = self._counter(math.prod(dims)).reshape(dims)
        where = where.pad(pads, value=math.prod(dims)) if any(b or a for b, a in pads) else where
        positions = where._pool(kernel, strides, dilations)
        hit = windows.eq(best.reshape(*best.shape, *(1,) * spatial))
        first = hit.where(positions, math.prod(dims)).min(window_axes)
        return best, first._cast_to(dtypes.int64)

    @overload
    def max_pool1d(self, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
                   padding: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., ceil_mode: bool = ...,
                   return_indices: Literal[False] = ...) -> Self: ...
    @overload
    def max_pool1d(self, kernel_size: int | Sequence[int] = ..., stride: int | Sequence[int] | None = ...,
                   padding: int | Sequence[int] = ..., dilation: int | Sequence[int] = ..., ceil_mode: bool = ...,
                   *, return_indices: Literal[True]) -> tuple[Self, Self]: ...
    def max_pool1d(self, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Self | tuple[Self, Self]:
        """`F.max_pool1d` (PyTorch's argument order, as tinygrad has no 1-D pools): max_pool2d over the last axis."""
        kernel = (kernel_size,) if isinstance(kernel_size, int) else kernel_size
        if return_indices:
            return self.max_pool2d(kernel, stride, dilation, padding, ceil_mode, return_indices=True)
        return self.max_pool2d(kernel, stride, dilation, padding, ceil_mode)

    def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                   count_include_pad: bool = True) -> Self:
        """The mean of each window over the last len(kernel_size) axes (`F.avg_pool2d`; any number of axes).

        As in PyTorch the divisor counts the explicit padding when `count_include_pad` (but never the part of a
        ceil-mode window past it), and only input elements otherwise."""
        kernel, pads, strides, dilations = self._pool_windows(kernel_size, stride, dilation=dilation, padding=padding,
                                                              ceil_mode=ceil_mode, op="avg_pool2d")
        spatial = len(kernel)
        x = self._float_input()
        grow = ((0, 0),) * (self.ndim - spatial) + pads
        padded = x.pad(grow) if any(b or a for b, a in pads) else x
        window_axes = tuple(range(-spatial, 0))
        total = padded._pool(kernel, strides, dilations).sum(window_axes)._cast_to(x.dtype)
        explicit = _explicit_padding(padding, spatial, "avg_pool2d")
        if count_include_pad and pads == explicit:
            return total.div(float(math.prod(kernel)))
        dims = self.shape[-spatial:]
        if count_include_pad:  # ones over input and explicit padding, zeros over what ceil mode adds
            counted = x._const(1.0, dtypes.float32, tuple(n + b + a for n, (b, a) in zip(dims, explicit, strict=True)))
            counted = counted.pad(tuple((0, a - e) for (_, a), (_, e) in zip(pads, explicit, strict=True)))
        else:
            counted = x._const(1.0, dtypes.float32, dims).pad(pads)
        divisor = counted._pool(kernel, strides, dilations).sum(window_axes)._cast_to(x.dtype)
        return total.div(divisor)

    def avg_pool1d(self, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Self:
        """`F.avg_pool1d` (same argument order as PyTorch's): avg_pool2d over the last axis."""
        kernel = (kernel_size,) if isinstance(kernel_size, int) else kernel_size
        return self.avg_pool2d(kernel, stride, 1, padding, ceil_mode, count_include_pad)

    # ---- resampling ---------------------------------------------------------------------------------------------
    def interpolate(self, size: int | Sequence[int], mode: InterpolateMode = "linear",
                    align_corners: bool = False) -> Self:
        """The last len(size) axes resized to `size`, like `F.interpolate(x, size=...)` (any leading axes).

        'linear' is linear, bilinear or trilinear by len(size) ('bilinear'/'trilinear' name the same); 'nearest' is
        PyTorch's (floor of dst * in/out), 'nearest-exact' rounds pixel centres. Each axis is a product with an
        (in, out) resampling matrix computed in the graph with PyTorch's float32 index arithmetic."""
        sizes = (size,) if isinstance(size, int) else tuple(size)
        if mode not in ("linear", "bilinear", "trilinear", "nearest", "nearest-exact"):
            raise ValueError(f"interpolate: mode {mode!r} is not 'linear', 'bilinear', 'trilinear', 'nearest' or "
                             "'nearest-exact'")
        if not sizes or len(sizes) > self.ndim or any(type(n) is not int or n < 0 for n in sizes):
            raise ShapeError(f"interpolate: size {size!r} must be 1..{self.ndim} ints >= 0 for a tensor of shape "
                             f"{self.shape}")
        if align_corners and mode.startswith("nearest"):
            raise ValueError("interpolate: align_corners only applies to the linear modes (as in PyTorch)")
        linear = not mode.startswith("nearest")
        x = self._float_input() if linear else self
        for i, n_out in enumerate(sizes):
            axis = self.ndim - len(sizes) + i
            n_in = x.shape[axis]
            if n_out == n_in:
                continue
            if n_in == 0:
                raise ShapeError(f"interpolate: cannot resize an empty axis {axis} of shape {self.shape} to {n_out}")
            matrix = x._resample_matrix(n_in, n_out, mode, align_corners)._cast_to(x.dtype)
            moved = x.transpose(axis, -1)
            x = moved.matmul(matrix).transpose(axis, -1)
        return x

    def _resample_matrix(self, n_in: int, n_out: int, mode: str, align_corners: bool) -> Self:
        """(n_in, n_out) float32 weights: column o mixes the input positions output o reads."""
        dst = self._counter(n_out)._cast_to(dtypes.float32)
        cols = self._counter(n_in).reshape(n_in, 1)
        if mode.startswith("nearest"):
            scale = n_in / n_out
            src = dst.add(0.5).mul(scale) if mode == "nearest-exact" else dst.mul(scale)
            index = src.floor()._cast_to(dtypes.int32).minimum(n_in - 1)
            return cols.eq(index.reshape(1, n_out))._cast_to(dtypes.float32)
        if align_corners:
            src = dst.mul((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        else:
            src = dst.add(0.5).mul(n_in / n_out).sub(0.5).maximum(0.0)
        low = src._cast_to(dtypes.int32)  # src >= 0, so truncation is floor
        high = low.add(1).minimum(n_in - 1)
        frac = src.sub(low._cast_to(dtypes.float32))
        near = cols.eq(low.reshape(1, n_out)).where(frac.sub(1.0, reverse=True).reshape(1, n_out), 0.0)
        return near.add(cols.eq(high.reshape(1, n_out)).where(frac.reshape(1, n_out), 0.0))

    # ---- normalization, attention, dropout ----------------------------------------------------------------------
    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Self:
        """(x - mean) / sqrt(var + eps) over `axis`, with the biased variance (as F.layer_norm), no affine."""
        x = self._float_input()
        wide = x._cast_to(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x  # as PyTorch
        centred = wide.sub(wide.mean(axis, keepdim=True))
        return centred.mul(centred.square().mean(axis, keepdim=True).add(eps).rsqrt())._cast_to(x.dtype)

    def batchnorm(self, weight: Self | None, bias: Self | None, mean: Self, invstd: Self,
                  axis: int | Sequence[int] = 1) -> Self:
        """(x - mean) * invstd * weight + bias, the statistics given per index of `axis` (the channel axis)."""
        axes = self._axes(axis, "batchnorm")
        shape = tuple(n if i in axes else 1 for i, n in enumerate(self.shape))
        kept = tuple(self.shape[a] for a in axes)

        def per_channel(t: Self, name: str) -> Self:
            """Statistics of the channel shape line up with `axis`; anything else must already broadcast."""
            if t.shape == kept:
                return t.reshape(shape)
            try:
                broadcast_shapes(t.shape, self.shape)
            except ShapeError:
                raise ShapeError(f"batchnorm: {name} of shape {t.shape} does not match the channel shape {kept} of "
                                 f"axis {axis} of the input of shape {self.shape}") from None
            return t

        x = self.sub(per_channel(mean, "mean"))
        if weight is not None:
            x = x.mul(per_channel(weight, "weight"))
        x = x.mul(per_channel(invstd, "invstd"))
        return x if bias is None else x.add(per_channel(bias, "bias"))

    def scaled_dot_product_attention(self, key: Self, value: Self, attn_mask: Self | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                     scale: float | None = None) -> Self:
        """softmax(q @ k^T * scale + mask) @ v, like `F.scaled_dot_product_attention` (self is the query).

        A bool mask keeps True positions, a float mask is added; `is_causal` keeps the lower triangle (top-left
        aligned); `enable_gqa` repeats key/value heads to match the query's. Dropout of the weights follows
        `dropout` (active only while training)."""
        q = self
        if q.ndim < 2 or key.ndim < 2 or value.ndim < 2 or q.shape[-1] != key.shape[-1] \
                or key.shape[-2] != value.shape[-2]:
            raise ShapeError(f"scaled_dot_product_attention: query {q.shape}, key {key.shape} and value "
                             f"{value.shape} need (..., L, E), (..., S, E) and (..., S, Ev)")
        if enable_gqa and q.ndim >= 3 and key.shape[-3] != q.shape[-3]:
            heads, kv_heads = q.shape[-3], key.shape[-3]
            if heads % kv_heads:
                raise ShapeError(f"scaled_dot_product_attention: {heads} query heads are not a multiple of "
                                 f"{kv_heads} key/value heads")
            key = key.repeat_interleave(heads // kv_heads, -3)
            value = value.repeat_interleave(heads // kv_heads, -3)
        factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = q.matmul(key.transpose(-1, -2)).mul(factor)
        if is_causal:
            if attn_mask is not None:
                raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both (as PyTorch)")
            rows, cols = q.shape[-2], key.shape[-2]
            attn_mask = self._counter(cols).reshape(1, cols).le(self._counter(rows).reshape(rows, 1))
        if attn_mask is not None:
            scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype.is_bool else scores.add(attn_mask)
        # softmax(scores) @ v with the division by the row sums after the product, (e @ v) / sum(e): the max, the
        # sum and the product then fuse into one kernel (the row statistics reach it through trailing broadcasts,
        # docs/scheduler.md rule 4), where softmax's division would need the sums broadcast across the product's
        # middle axis. Half floats compute in float32 and round once, as softmax does.
        wide = scores._cast_to(dtypes.float32) if scores.dtype in (dtypes.float16, dtypes.bfloat16) else scores
        e = wide.sub(wide.max(-1, keepdim=True)).exp()
        total = e.sum(-1, keepdim=True)
        if dropout_p:
            e = e.dropout(dropout_p)
        out = e.matmul(value._cast_to(wide.dtype) if value.dtype.is_float else value).div(total)
        return out._cast_to(result_dtype(scores.dtype, value.dtype))

    def dropout(self, p: float = 0.5) -> Self:
        """Zero each element with probability p and scale the rest by 1/(1-p), only while `Tensor.training`
        (otherwise the identity), like `F.dropout(x, p, training)`. Random bits come from the seeded counter."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout: probability p={p} must be between 0 and 1")
        if not getattr(type(self), "training", False) or p == 0.0:
            return self
        if p == 1.0:
            return self.mul(0)
        draws = self._make(random.uniform(self.numel(), dtypes.float32, self.device), self.device)
        keep = draws.reshape(self.shape).ge(p)
        return keep.where(self.mul(1.0 / (1.0 - p)), 0)

    # ---- losses -------------------------------------------------------------------------------------------------
    def _class_loss(self, target: Self, *, axis: int, weight: Self | None, ignore_index: int | None,
                    smoothing: float, reduction: Reduction, op: str) -> Self:
        """The negative log-likelihood of log-probabilities `self` with classes along `axis`, PyTorch's way.

        Class-index targets (integers, the input's shape without `axis`): -w[y] * logp[y], blended with the
        smoothing term -sum_c w[c] logp[c] / C; ignored targets give 0, and 'mean' divides by the total weight of
        the targets kept. Probability targets (floats, the input's shape): -sum_c w[c] y[c] logp[c] with y
        smoothed toward uniform; 'mean' averages over the samples."""
        _check_reduction(reduction, op)
        if not 0.0 <= smoothing <= 1.0:
            raise ValueError(f"{op}: label_smoothing {smoothing} must be between 0 and 1")
        classes = self.shape[axis] if self.ndim else 0
        class_shape = tuple(classes if i == axis else 1 for i in range(self.ndim))
        if weight is not None and weight.shape != (classes,):
            raise ShapeError(f"{op}: weight of shape {weight.shape} should be ({classes},), one per class of the "
                             f"input of shape {self.shape}")
        per_class = None if weight is None else weight._cast_to(self.dtype).reshape(class_shape)
        if target.dtype.is_float:
            if target.shape != self.shape:
                raise ShapeError(f"{op}: probability target of shape {target.shape} should have the input's shape "
                                 f"{self.shape} (class-index targets must be an integer dtype)")
            probs = target._cast_to(self.dtype)
            if smoothing:
                probs = probs.mul(1.0 - smoothing).add(smoothing / classes)
            terms = self.mul(probs) if per_class is None else self.mul(probs).mul(per_class)
            return terms.sum(axis).neg()._reduced(reduction)
        labels_shape = self.shape[:axis] + self.shape[axis + 1:]
        if target.dtype.is_bool or target.shape != labels_shape:
            raise ShapeError(f"{op}: class-index target of shape {target.shape} and dtype {target.dtype} should be "
                             f"integers of shape {labels_shape} (the input's {self.shape} without the class axis "
                             f"{axis})")
        hot = self._counter(classes).reshape(class_shape).eq(target.unsqueeze(axis))
        weighted = self if per_class is None else self.mul(per_class)
        loss = hot.where(weighted, 0.0).sum(axis).neg()
        if smoothing:
            loss = loss.mul(1.0 - smoothing).add(weighted.sum(axis).neg().mul(smoothing / classes))
        kept = None if ignore_index is None else target.ne(ignore_index)
        if kept is not None:
            loss = kept.where(loss, 0.0)
        if reduction != "mean" or (per_class is None and kept is None):
            return loss._reduced(reduction)
        if per_class is None:
            assert kept is not None
            count = kept.sum()._cast_to(self.dtype)
        else:
            target_weight = hot.where(per_class, 0.0).sum(axis)
            count = (target_weight if kept is None else kept.where(target_weight, 0.0)).sum()
        return loss.sum().div(count)

    def cross_entropy(self, Y: Self, reduction: Reduction = "mean", label_smoothing: float = 0.0,  # noqa: N803
                      ignore_index: int = -100, weight: Self | None = None) -> Self:
        """`F.cross_entropy` of logits `self` (N, C, *d) or (C,) and class indices or class probabilities `Y`.

        `ignore_index` and `weight` are PyTorch's (tinygrad has neither); label smoothing as PyTorch."""
        axis = 1 if self.ndim >= 2 else 0
        if self.ndim == 0:
            raise ShapeError(f"cross_entropy: logits of shape {self.shape} need a class axis")
        return self.log_softmax(axis)._class_loss(Y, axis=axis, weight=weight, ignore_index=ignore_index,
                                                  smoothing=label_smoothing, reduction=reduction, op="cross_entropy")

    def nll_loss(self, Y: Self, weight: Self | None = None, ignore_index: int | None = None,  # noqa: N803
                 reduction: Reduction = "mean") -> Self:
        """`F.nll_loss` of log-probabilities `self` (N, C, *d) or (C,) and class indices `Y`."""
        if self.ndim == 0:
            raise ShapeError(f"nll_loss: log-probabilities of shape {self.shape} need a class axis")
        if Y.dtype.is_float:
            raise DTypeError(f"nll_loss: targets must be class indices of an integer dtype, not {Y.dtype}")
        axis = 1 if self.ndim >= 2 else 0
        return self._class_loss(Y, axis=axis, weight=weight, ignore_index=ignore_index, smoothing=0.0,
                                reduction=reduction, op="nll_loss")

    def sparse_categorical_crossentropy(self, Y: Self, ignore_index: int = -1,  # noqa: N803
                                        label_smoothing: float = 0.0, reduction: Reduction = "mean") -> Self:
        """Cross entropy of logits with the classes on the LAST axis and integer targets (tinygrad's loss; the
        same numbers as F.cross_entropy with the class axis moved to 1)."""
        if self.ndim == 0:
            raise ShapeError(f"sparse_categorical_crossentropy: logits of shape {self.shape} need a class axis")
        if Y.dtype.is_float:
            raise DTypeError(f"sparse_categorical_crossentropy: targets must be class indices of an integer dtype, "
                             f"not {Y.dtype}")
        axis = self.ndim - 1
        return self.log_softmax(axis)._class_loss(Y, axis=axis, weight=None, ignore_index=ignore_index,
                                                  smoothing=label_smoothing, reduction=reduction,
                                                  op="sparse_categorical_crossentropy")

    def binary_crossentropy(self, Y: Self, reduction: Reduction = "mean") -> Self:  # noqa: N803
        """`F.binary_cross_entropy` of probabilities `self`: each log is clamped at -100 as PyTorch does, so a
        probability of exactly 0 or 1 gives a finite loss."""
        _check_reduction(reduction, "binary_crossentropy")
        if Y.shape != self.shape:
            raise ShapeError(f"binary_crossentropy: target of shape {Y.shape} should match the input's {self.shape}")
        x = self._float_input()
        y = Y._cast_to(x.dtype)
        log_p = x.log().maximum(-100.0)
        log_q = x.sub(1.0, reverse=True).log().maximum(-100.0)
        return y.mul(log_p).add(y.sub(1.0, reverse=True).mul(log_q)).neg()._reduced(reduction)

    def binary_crossentropy_logits(self, Y: Self, reduction: Reduction = "mean",  # noqa: N803
                                   pos_weight: Self | None = None) -> Self:
        """`F.binary_cross_entropy_with_logits`: (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x)), with the
        softplus written as log(1 + exp(-|x|)) + max(-x, 0) so large logits do not overflow."""
        _check_reduction(reduction, "binary_crossentropy_logits")
        if Y.shape != self.shape:
            raise ShapeError(f"binary_crossentropy_logits: target of shape {Y.shape} should match the input's "
                             f"{self.shape}")
        x = self._float_input()
        y = Y._cast_to(x.dtype)
        softplus_neg = x.abs().neg().exp().add(1.0).log().add(x.neg().relu())
        if pos_weight is not None:
            softplus_neg = softplus_neg.mul(pos_weight._cast_to(x.dtype).sub(1.0).mul(y).add(1.0))
        return y.sub(1.0, reverse=True).mul(x).add(softplus_neg)._reduced(reduction)
