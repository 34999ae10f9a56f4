"""`plygrad.frontend.nn`: layers as plain classes holding Tensors, tinygrad style.

    from plygrad.frontend import Tensor, nn
    layer = nn.Linear(3, 4)
    y = layer(Tensor.randn(2, 3))

A layer is an object with Tensor attributes (`weight`, `bias`, `running_mean`, ...) and a `__call__`; there is no
Module base class: the state-dict code walks attributes, so the attribute names are the state-dict keys, and they
match tinygrad's and PyTorch's so weights load across the three. Parameters start the way PyTorch starts them
(kaiming_uniform(a=sqrt(5)) weights, uniform(+-1/sqrt(fan_in)) biases, ...), so a model ported from PyTorch trains
the same way from the same seed distribution. The math lives on Tensor (`linear`, `conv2d`, `batchnorm`,
`layernorm`, ...); a layer only owns the parameters and the running statistics.
"""

# The public signatures are tinygrad's and PyTorch's, positional arguments included, so ports keep working.
# ruff: noqa: PLR0917

from __future__ import annotations

import math
from collections.abc import Sequence

from plygrad.frontend import gather
from plygrad.frontend.reduce import shifted_mean
from plygrad.frontend.tensor import Tensor
from plygrad.ir import DTypeError, ShapeError, dtypes

from . import optim, state, utils

__all__ = [
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "RMSNorm",
    "optim",
    "state",
    "utils",
]


def _param(t: Tensor) -> Tensor:
    """A trainable tensor. It stays lazy (its init graph costs nothing if a state dict replaces it); the optimizer
    realizes its parameters before it first writes into them."""
    return t.requires_grad_(True)


def _buffer(t: Tensor) -> Tensor:
    """A state tensor that is not trained (running statistics): realized now, since it is updated in place with
    `assign`, which needs a buffer to write into, and never tracked by autograd."""
    return t.realize().requires_grad_(False)


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    """Samples of U(-bound, bound), PyTorch's init for every weight and bias below."""
    return _param(Tensor.rand(*shape).mul(2 * bound).sub(bound))


def _fan_in_bound(fan_in: int) -> float:
    """PyTorch's bound for kaiming_uniform(a=sqrt(5)) weights and for biases: gain*sqrt(3/fan_in) = 1/sqrt(fan_in)."""
    return 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def _tuple(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,) * n
    if len(x) != n:
        raise ValueError(f"{what}: expected an int or {n} ints, got {tuple(x)}")
    return tuple(x)


def _channel_view(t: Tensor, ndim: int) -> Tensor:
    """A per-channel vector shaped (1, C, 1, ...) to broadcast over an (N, C, *spatial) input of rank `ndim`."""
    return t.reshape(1, -1, *[1] * (ndim - 2))


class Linear:
    """y = x @ weight.T + bias, with weight (out_features, in_features) like torch.nn.Linear."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        bound = _fan_in_bound(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), bound)
        self.bias: Tensor | None = _uniform((out_features,), bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if not x.shape or x.shape[-1] != self.in_features:
            raise ShapeError(f"Linear({self.in_features}, {self.out_features}): input of shape {x.shape} needs "
                             f"{self.in_features} features in its last axis")
        return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
    """An N-d convolution (2-d by default; `Conv1d` is this with a 1-tuple kernel), weight (out, in/groups, *k).

    `padding` is an int, one int per spatial axis, tinygrad's flat (left, right, ...) sequence, or 'same'/'valid'.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
                 padding: int | tuple[int, ...] | str = 0, dilation: int = 1, groups: int = 1,
                 bias: bool = True) -> None:
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
                             f"divisible by groups ({groups})")
        # an int is a square 2-d kernel; a tuple's length sets the number of spatial axes (Conv1d passes (k,))
        self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.stride, self.dilation, self.groups = stride, dilation, groups
        self.padding = self._padding(padding, name)
        self.in_channels, self.out_channels = in_channels, out_channels
        bound = _fan_in_bound(self._fan_in())
        self.weight = _uniform(self._weight_shape(), bound)
        self.bias: Tensor | None = _uniform((out_channels,), bound) if bias else None

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels // self.groups, *self.kernel_size)

    def _fan_in(self) -> int:
        """PyTorch's fan_in: weight.shape[1] times the kernel's size."""
        return self._weight_shape()[1] * math.prod(self.kernel_size)

    def _padding(self, padding: int | tuple[int, ...] | str, name: str) -> int | tuple[int, ...]:
        if not isinstance(padding, str):
            return padding
        if padding.lower() == "valid":
            return 0
        if padding.lower() != "same":
            raise ValueError(f"{name}: padding {padding!r} is not 'same' or 'valid'")
        if self.stride != 1 and any(s != 1 for s in _tuple(self.stride, len(self.kernel_size), name)):
            raise ValueError(f"{name}: padding='same' needs stride 1, got stride {self.stride}")
        dilation = _tuple(self.dilation, len(self.kernel_size), f"{name} dilation")
        flat: list[int] = []
        for d, k in zip(reversed(dilation), reversed(self.kernel_size), strict=True):  # last axis first, like F.pad
            total = d * (k - 1)
            flat += [total // 2, total - total // 2]  # an odd total puts the extra element after, like PyTorch
        return tuple(flat)

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,  # noqa: N802 - PyTorch's name
           padding: int | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
    """A 1-d convolution over (N, C, L): a Conv2d with a one-axis kernel."""
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
    """The transpose (gradient) of a convolution, weight (in, out/groups, *k) like torch.nn.ConvTranspose2d."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
                 padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int = 1,
                 groups: int = 1, bias: bool = True) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        self.output_padding = output_padding

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.in_channels, self.out_channels // self.groups, *self.kernel_size)

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                                  self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,  # noqa: N802
                    padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
                    bias: bool = True) -> ConvTranspose2d:
    """A 1-d transposed convolution over (N, C, L)."""
    return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation,
                           groups, bias)


class BatchNorm:
    """Batch normalization over axis 1 of (N, C, *spatial), for any number of spatial axes.

    In training mode (`Tensor.training`) it normalizes with the batch's statistics and, if tracking, moves the
    running statistics towards them in place (`assign`; they are realized with the next optimizer step, which takes
    them as buffers); in eval mode it normalizes with the running statistics. Like PyTorch, the running variance is
    the unbiased batch variance and the normalization uses the biased one.
    """

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
                 momentum: float = 0.1) -> None:
        self.num_features, self.eps, self.momentum = sz, eps, momentum
        self.track_running_stats = track_running_stats
        self.weight: Tensor | None = _param(Tensor.ones(sz)) if affine else None
        self.bias: Tensor | None = _param(Tensor.zeros(sz)) if affine else None
        if track_running_stats:  # PyTorch's state-dict order: running_mean, running_var, num_batches_tracked
            self.running_mean, self.running_var = _buffer(Tensor.zeros(sz)), _buffer(Tensor.ones(sz))
        self.num_batches_tracked = _buffer(Tensor.zeros((), dtype=dtypes.int64))

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The (mean, biased variance) per channel that normalize `x`: the batch's, or the running ones in eval."""
        if self.track_running_stats and not Tensor.training:
            return self.running_mean, self.running_var
        axes = tuple(a for a in range(x.ndim) if a != 1)
        # the mean of x minus a detached element of each channel, added back: as accurate for data far from 0 as
        # PyTorch's (reduce.shifted_mean)
        kept = shifted_mean(x, axes)
        # the variance's own gradient through the mean is zero (d var / d mean = 0), so the mean is detached here
        centered = x - kept.detach()
        return kept.reshape(x.shape[1]), (centered * centered).mean(axis=axes)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm({self.num_features}): input of shape {x.shape} needs (N, "
                             f"{self.num_features}, ...)")
        mean, var = self.calc_stats(x)
        if self.track_running_stats and Tensor.training:
            n = x.numel() // x.shape[1]
            if n < 2:
                raise ValueError(f"BatchNorm: expected more than 1 value per channel when training, got input of "
                                 f"shape {x.shape}")
            m = self.momentum
            stats_dtype = self.running_mean.dtype
            self.running_mean.assign((self.running_mean * (1 - m) + mean.detach() * m).cast(stats_dtype))
            self.running_var.assign((self.running_var * (1 - m) + var.detach() * (m * n / (n - 1))).cast(stats_dtype))
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        return x.batchnorm(self.weight, self.bias, mean, var.add(self.eps).rsqrt())


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalizes over the last len(normalized_shape) axes, then scales by `weight` and shifts by `bias`."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True) -> None:
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
        self.weight: Tensor | None = _param(Tensor.ones(*self.normalized_shape)) if elementwise_affine else None
        self.bias: Tensor | None = _param(Tensor.zeros(*self.normalized_shape)) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.shape[len(x.shape) - n:] != self.normalized_shape:
            raise ShapeError(f"LayerNorm{self.normalized_shape}: the last axes of input shape {x.shape} must be "
                             f"{self.normalized_shape}")
        x = x.layernorm(axis=self.axis, eps=self.eps)
        if self.weight is None or self.bias is None:
            return x
        return x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of each pixel of an (N, C, H, W) input (ConvNeXt's channels-first LayerNorm):
    `LayerNorm2d(C)` normalizes axis 1, with a weight and bias per channel (tinygrad's `nn.LayerNorm2d`)."""

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ShapeError(f"LayerNorm2d{self.normalized_shape}: input of shape {x.shape} needs (N, C, H, W)")
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class GroupNorm:
    """Normalizes each group of num_channels/num_groups channels (with their spatial axes) of (N, C, *spatial)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_groups <= 0 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Tensor | None = _param(Tensor.ones(num_channels)) if affine else None
        self.bias: Tensor | None = _param(Tensor.zeros(num_channels)) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm({self.num_groups}, {self.num_channels}): input of shape {x.shape} needs "
                             f"(N, {self.num_channels}, ...)")
        x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return x
        return x * _channel_view(self.weight, x.ndim) + _channel_view(self.bias, x.ndim)


class InstanceNorm:
    """Normalizes each channel of each sample over its spatial axes (tinygrad's default: affine=True)."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        self.num_features, self.eps = num_features, eps
        self.weight: Tensor | None = _param(Tensor.ones(num_features)) if affine else None
        self.bias: Tensor | None = _param(Tensor.zeros(num_features)) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 3 or x.shape[1] != self.num_features:
            raise ShapeError(f"InstanceNorm({self.num_features}): input of shape {x.shape} needs "
                             f"(N, {self.num_features}, *spatial)")
        x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return x
        return x * _channel_view(self.weight, x.ndim) + _channel_view(self.bias, x.ndim)


class RMSNorm:
    """x / sqrt(mean(x^2 over the last axis) + eps) * weight, computed in float32 and cast back."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        self.dim, self.eps = dim, eps
        self.weight: Tensor | None = _param(Tensor.ones(dim)) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if not x.shape or x.shape[-1] != self.dim:
            raise ShapeError(f"RMSNorm({self.dim}): input of shape {x.shape} needs {self.dim} in its last axis")
        wide = x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
        normed = (wide * (wide.square().mean(-1, keepdim=True) + self.eps).rsqrt()).cast(x.dtype)
        return normed if self.weight is None else normed * self.weight


class Embedding:
    """A lookup table: row `idx` of `weight` (vocab_size, embed_size), initialized N(0, 1) like PyTorch."""

    def __init__(self, vocab_size: int, embed_size: int) -> None:
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = _param(Tensor.randn(vocab_size, embed_size))

    def __call__(self, idx: Tensor) -> Tensor:
        if not idx.dtype.is_int:
            raise DTypeError(f"Embedding: indices must be integers, got {idx.dtype}; "
                             "cast them with .cast(dtypes.int32)")
        # a one-hot selection of the row; an index outside 0..vocab-1 gives zeros (gather.embedding_rows)
        return gather.embedding_rows(self.weight, idx, self.vocab_size)


class LSTMCell:
    """One step of an LSTM: (h, c) = cell(x, (h, c)); gates i, f, g, o stacked in weight_ih/weight_hh like PyTorch."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        self.input_size, self.hidden_size = input_size, hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((hidden_size * 4, input_size), bound)
        self.weight_hh = _uniform((hidden_size * 4, hidden_size), bound)
        self.bias_ih: Tensor | None = _uniform((hidden_size * 4,), bound) if bias else None
        self.bias_hh: Tensor | None = _uniform((hidden_size * 4,), bound) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ShapeError(f"LSTMCell({self.input_size}, {self.hidden_size}): input of shape {x.shape} needs "
                             f"(batch, {self.input_size})")
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x.linear(self.weight_ih.transpose(), self.bias_ih) + h.linear(self.weight_hh.transpose(), self.bias_hh)
        size = self.hidden_size
        i, f, g, o = (gates[:, k * size:(k + 1) * size] for k in range(4))
        new_c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * new_c.tanh(), new_c
