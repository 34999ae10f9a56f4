"""Neural-network ops against torch.nn.functional (forward and gradient): linear, einsum, convolutions (1-3 spatial
axes, groups, stride, dilation, padding forms), transposed convolutions, max/avg pooling (ceil mode, padding,
indices), interpolate, layernorm, batchnorm, attention and dropout; plus the errors bad arguments raise and the
one-kernel promise of a convolution."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import Tensor
from plygrad.ir import ShapeError

Array = np.ndarray[Any, Any]


def _randn(rng: np.random.Generator, *shape: int, dtype: str = "float32") -> Array:
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture
def training() -> Iterator[None]:
    """Tensor.training switched on for one test (dropout is the identity otherwise)."""
    before = getattr(Tensor, "training", False)
    Tensor.training = True
    try:
        yield
    finally:
        Tensor.training = before


# ---- linear ---------------------------------------------------------------------------------------------------------
def test_linear_takes_weight_as_in_by_out_like_tinygrad() -> None:
    rng = np.random.default_rng(0)
    x, w, b = _randn(rng, 2, 3, 4), _randn(rng, 4, 5), _randn(rng, 5)
    compare(lambda x, w, b: x.linear(w, b), lambda x, w, b: F.linear(x, w.T, b), x, w, b)


def test_linear_without_bias_and_with_a_vector_weight() -> None:
    rng = np.random.default_rng(1)
    x, w = _randn(rng, 3, 4), _randn(rng, 4)
    compare(lambda x, w: x.linear(w), lambda x, w: x * w, x, w)
    compare(lambda x, w: x.linear(w.reshape(4, 1)), lambda x, w: x @ w.reshape(4, 1), x, w)


def test_linear_rejects_mismatched_features() -> None:
    with pytest.raises(ShapeError, match=r"linear: input of shape \(3, 4\).*\(5, 2\)"):
        Tensor.ones(3, 4).linear(Tensor.ones(5, 2))


# ---- einsum ---------------------------------------------------------------------------------------------------------
EINSUM_CASES: list[tuple[str, tuple[tuple[int, ...], ...]]] = [
    ("ij,jk->ik", ((2, 3), (3, 4))),
    ("ij,jk", ((2, 3), (3, 4))),  # implicit output
    ("i,i->", ((3,), (3,))),
    ("i,j->ij", ((2,), (3,))),
    ("ij->ji", ((2, 3),)),
    ("ij->", ((2, 3),)),
    ("ii->i", ((3, 3),)),  # diagonal
    ("ii", ((3, 3),)),  # trace (implicit, i appears twice)
    ("bii->bi", ((2, 3, 3),)),
    ("iij->j", ((2, 2, 3),)),
    ("bij,bjk->bik", ((2, 2, 3), (2, 3, 4))),
    ("ijk,jil->kl", ((2, 3, 4), (3, 2, 5))),
    ("abc,cd,de->abe", ((2, 2, 3), (3, 2), (2, 3))),  # three operands
    ("Ba,ab", ((3, 2), (2, 4))),  # upper case sorts first in the implicit output
    ("...ij,...jk->...ik", ((2, 1, 2, 3), (3, 3, 4))),  # ellipsis broadcasting
    ("...ij,...jk", ((2, 2, 3), (3, 4))),
    ("b...,b...->...", ((2, 3, 4), (2, 4))),
    ("i...->i", ((2, 3),)),
    ("...", ((2, 3),)),
    ("i,i->", ((1,), (3,))),  # a size-1 axis broadcasts against the same label
    (" ij , jk -> ik ", ((2, 3), (3, 4))),  # spaces are ignored
]


@pytest.mark.parametrize(("formula", "shapes"), EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_torch(formula: str, shapes: tuple[tuple[int, ...], ...]) -> None:
    rng = np.random.default_rng(len(formula))
    arrays = [_randn(rng, *s) for s in shapes]
    compare(lambda *ts: Tensor.einsum(formula, *ts), lambda *ts: torch.einsum(formula, *ts), *arrays)


def test_einsum_takes_a_list_of_operands_and_integer_tensors() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(b)])
    assert got.dtype == Tensor(a).dtype
    np.testing.assert_array_equal(got.numpy(), a @ b)


def test_einsum_half_precision_sums_in_float32() -> None:
    rng = np.random.default_rng(2)
    a, b = _randn(rng, 4, 64, dtype="float16"), _randn(rng, 64, 3, dtype="float16")
    got = Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(b))
    assert got.dtype == Tensor(a).dtype
    np.testing.assert_allclose(got.numpy(), (a.astype(np.float32) @ b.astype(np.float32)), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize(("formula", "shapes", "error", "message"), [
    ("ij,jk->ik", ((2, 3),), ValueError, "names 2 operands but 1"),
    ("ij,jk->ik", ((2, 3), (4, 5)), ShapeError, "label 'j' has size 3"),
    ("ijk->i", ((2, 3),), ShapeError, "has 2 axes but 'ijk' names 3"),
    ("ij->k", ((2, 3),), ValueError, "output label 'k'"),
    ("ij->ii", ((2, 3),), ValueError, "output label 'i' repeats"),
    ("i1->i", ((2, 3),), ValueError, "only letters"),
    ("ii->i", ((2, 3),), ShapeError, "repeated label 'i'"),
])
def test_einsum_errors(formula: str, shapes: tuple[tuple[int, ...], ...], error: type[Exception],
                       message: str) -> None:
    with pytest.raises(error, match=message):
        Tensor.einsum(formula, *(Tensor.ones(*s) for s in shapes))


# ---- convolution ----------------------------------------------------------------------------------------------------
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TORCH_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_conv_matches_torch(data: st.DataObject) -> None:
    spatial = data.draw(st.sampled_from([1, 2, 2, 3]), label="spatial axes")
    groups = data.draw(st.integers(1, 2), label="groups")
    cin, cout = groups * data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))
    kernel = tuple(data.draw(st.integers(1, 3)) for _ in range(spatial))
    stride = tuple(data.draw(st.integers(1, 2)) for _ in range(spatial))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(spatial))
    padding: Any = data.draw(st.one_of(st.integers(0, 2), st.just("valid"),
                                       st.just("same") if stride == (1,) * spatial else st.just(1)))
    size = tuple(d * (k - 1) + 1 + data.draw(st.integers(0, 3)) for k, d in zip(kernel, dilation, strict=True))
    bias = data.draw(st.booleans(), label="bias")
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    x = _randn(rng, data.draw(st.integers(1, 2)), cin, *size)
    w = _randn(rng, cout, cin // groups, *kernel)
    b = _randn(rng, cout)
    conv = TORCH_CONV[spatial]
    note(f"x {x.shape} w {w.shape} groups={groups} stride={stride} dilation={dilation} padding={padding!r} bias={bias}")

    def ours(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return x.conv2d(w, b if bias else None, groups, stride, dilation, padding)

    def theirs(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return conv(x, w, b if bias else None, stride, padding, dilation, groups)

    compare(ours, theirs, x, w, b, atol=1e-4)


def test_conv3d_padded_and_dilated_matches_torch() -> None:
    """Once wrong through a GCC 12 miscompile of guarded loads (the CPU backend now passes
    -fno-tree-loop-if-convert; packages/runtime-cpu/tests has the kernel itself)."""
    rng = np.random.default_rng(0)
    x, w = _randn(rng, 2, 1, 4, 4, 3), _randn(rng, 1, 1, 2, 2, 2)
    compare(lambda x, w: x.conv2d(w, dilation=(2, 1, 2), padding=1),
            lambda x, w: F.conv3d(x, w, dilation=(2, 1, 2), padding=1), x, w, grad=False)


def test_conv1d_and_conv3d_are_conv2d_by_the_weight_rank() -> None:
    rng = np.random.default_rng(3)
    x1, w1 = _randn(rng, 2, 3, 7), _randn(rng, 4, 3, 3)
    compare(lambda x, w: x.conv1d(w, padding=1, stride=2), lambda x, w: F.conv1d(x, w, padding=1, stride=2), x1, w1)
    x3, w3 = _randn(rng, 1, 2, 3, 4, 3), _randn(rng, 2, 2, 2, 2, 2)
    compare(lambda x, w: x.conv3d(w, padding="same"), lambda x, w: F.conv3d(x, w, padding="same"), x3, w3)


def test_conv_asymmetric_padding_is_f_pad_order() -> None:
    rng = np.random.default_rng(4)
    x, w = _randn(rng, 1, 2, 5, 6), _randn(rng, 3, 2, 2, 3)
    pads = (1, 2, 0, 1)  # left, right (last axis), top, bottom
    compare(lambda x, w: x.conv2d(w, padding=pads), lambda x, w: F.conv2d(F.pad(x, pads), w), x, w)


def test_conv_half_precision() -> None:
    rng = np.random.default_rng(5)
    x, w = _randn(rng, 1, 8, 6, 6, dtype="float16"), _randn(rng, 4, 8, 3, 3, dtype="float16")
    got = Tensor(x).conv2d(Tensor(w), padding=1)
    assert got.dtype == Tensor(x).dtype
    want = F.conv2d(torch.from_numpy(x).float(), torch.from_numpy(w).float(), padding=1).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-2, atol=2e-2)


def test_conv_is_one_reduce_kernel_without_im2col() -> None:
    """Padding, the window view, the product and the sum land in a single kernel (no im2col buffer)."""
    x, w, b = Tensor.rand(2, 4, 8, 8).realize(), Tensor.rand(6, 4, 3, 3).realize(), Tensor.rand(6).realize()
    assert len(x.conv2d(w, padding=1).schedule().src) == 1
    assert len(x.conv2d(w, stride=2, dilation=2).schedule().src) == 1
    # the bias is added after the reduce; today's scheduler runs that add as a second elementwise kernel
    assert len(x.conv2d(w, b, padding=1).schedule().src) <= 2


@pytest.mark.parametrize(("x_shape", "w_shape", "kwargs", "error", "message"), [
    ((1, 3, 5, 5), (4, 2, 3, 3), {}, ShapeError, r"conv2d: input of shape \(1, 3, 5, 5\) has 3 channels"),
    ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}, ShapeError, "divisible by groups"),
    ((1, 3, 5), (4, 3, 3, 3), {}, ShapeError, "same rank"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"padding": "full"}, ValueError, "padding 'full' is not 'same' or 'valid'"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"padding": "same", "stride": 2}, ValueError, "padding='same' needs stride 1"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"padding": (1, 2, 3)}, ValueError, "needs an int, 2 ints"),
    ((1, 3, 2, 2), (4, 3, 3, 3), {}, ShapeError, "smaller than the kernel's reach 3"),
    ((1, 3, 5, 5), (4, 3, 3, 3), {"bias": Tensor.ones(3)}, ShapeError, r"bias of shape \(3,\) should be \(4,\)"),
])
def test_conv_errors(x_shape: tuple[int, ...], w_shape: tuple[int, ...], kwargs: dict[str, Any],
                     error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Tensor.ones(*x_shape).conv2d(Tensor.ones(*w_shape), **kwargs)


@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_conv_transpose_matches_torch(data: st.DataObject) -> None:
    spatial = data.draw(st.sampled_from([1, 2]), label="spatial axes")
    groups = data.draw(st.integers(1, 2), label="groups")
    cin, cout = groups * data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))
    kernel = tuple(data.draw(st.integers(1, 3)) for _ in range(spatial))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in range(spatial))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(spatial))
    padding = tuple(data.draw(st.integers(0, d * (k - 1))) for k, d in zip(kernel, dilation, strict=True))
    output_padding = tuple(data.draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation, strict=True))
    size = tuple(data.draw(st.integers(1, 4)) for _ in range(spatial))
    out = [(n - 1) * s - 2 * p + d * (k - 1) + e + 1
           for n, s, p, d, k, e in zip(size, stride, padding, dilation, kernel, output_padding, strict=True)]
    # PyTorch raises for a negative output size, and for an empty one with two spatial axes (one axis: the test below)
    assume(min(out) >= (0 if spatial == 1 else 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    x, w, b = _randn(rng, 2, cin, *size), _randn(rng, cin, cout // groups, *kernel), _randn(rng, cout)
    conv_t = TORCH_CONV_T[spatial]
    compare(lambda x, w, b: x.conv_transpose2d(w, b, groups, stride, dilation, padding, output_padding),
            lambda x, w, b: conv_t(x, w, b, stride, padding, output_padding, groups, dilation), x, w, b, atol=1e-4)


def test_conv_transpose_with_an_empty_output_is_empty_like_torch() -> None:
    got = Tensor.ones(2, 1, 1).conv_transpose1d(Tensor.ones(1, 3, 2), padding=1)
    assert got.shape == (2, 3, 0)


def test_conv_transpose_errors() -> None:
    with pytest.raises(ShapeError, match=r"conv_transpose2d: input of shape \(1, 3, 4, 4\) has 3 channels"):
        Tensor.ones(1, 3, 4, 4).conv_transpose2d(Tensor.ones(2, 2, 3, 3))
    with pytest.raises(ValueError, match="output_padding 2 must be smaller than stride 2"):
        Tensor.ones(1, 2, 4, 4).conv_transpose2d(Tensor.ones(2, 2, 3, 3), stride=2, output_padding=2)


# ---- pooling --------------------------------------------------------------------------------------------------------
def _pool_case(data: st.DataObject, dilate: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                                             tuple[int, ...], bool, Array]:
    spatial = data.draw(st.sampled_from([1, 2, 2]), label="spatial axes")
    kernel = tuple(data.draw(st.integers(1, 3)) for _ in range(spatial))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in range(spatial))
    dilation = tuple(data.draw(st.integers(1, 2)) if dilate else 1 for _ in range(spatial))
    padding = tuple(data.draw(st.integers(0, k // 2)) for k in kernel)  # PyTorch allows at most half the kernel
    size = tuple(d * (k - 1) + 1 + data.draw(st.integers(0, 4)) for k, d in zip(kernel, dilation, strict=True))
    ceil_mode = data.draw(st.booleans(), label="ceil_mode")
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    return kernel, stride, dilation, padding, ceil_mode, _randn(rng, 2, 2, *size)


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_max_pool_matches_torch(data: st.DataObject) -> None:
    kernel, stride, dilation, padding, ceil_mode, x = _pool_case(data, dilate=True)
    pool = F.max_pool1d if len(kernel) == 1 else F.max_pool2d
    compare(lambda x: x.max_pool2d(kernel, stride, dilation, padding, ceil_mode),
            lambda x: pool(x, kernel, stride, padding, dilation, ceil_mode), x)


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_avg_pool_matches_torch(data: st.DataObject) -> None:
    kernel, stride, _, padding, ceil_mode, x = _pool_case(data, dilate=False)
    include = data.draw(st.booleans(), label="count_include_pad")
    pool = F.avg_pool1d if len(kernel) == 1 else F.avg_pool2d
    compare(lambda x: x.avg_pool2d(kernel, stride, 1, padding, ceil_mode, include),
            lambda x: pool(x, kernel, stride, padding, ceil_mode, include), x)


def test_pool_defaults_are_2x2_with_stride_equal_to_the_kernel() -> None:
    x = np.arange(2 * 5 * 6, dtype=np.float32).reshape(1, 2, 5, 6)
    compare(lambda x: x.max_pool2d(), lambda x: F.max_pool2d(x, 2), x)
    compare(lambda x: x.avg_pool2d(), lambda x: F.avg_pool2d(x, 2), x)
    compare(lambda x: x.max_pool2d(3), lambda x: F.max_pool2d(x, 3), x)


def test_max_pool_indices_match_torch() -> None:
    rng = np.random.default_rng(6)
    x = _randn(rng, 2, 3, 7, 6)
    got_v, got_i = Tensor(x).max_pool2d((3, 2), stride=2, padding=1, ceil_mode=True, return_indices=True)
    want_v, want_i = F.max_pool2d(torch.from_numpy(x), (3, 2), 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(got_v.numpy(), want_v.numpy())
    assert got_i.numpy().dtype == np.int64
    np.testing.assert_array_equal(got_i.numpy(), want_i.numpy())


def test_max_pool_of_integers_pads_with_the_lowest_value() -> None:
    x = -np.arange(1, 17, dtype=np.int32).reshape(1, 1, 4, 4)
    got = Tensor(x).max_pool2d(3, stride=2, padding=1)
    np.testing.assert_array_equal(got.numpy(), F.max_pool2d(torch.from_numpy(x).double(), 3, 2, 1).int().numpy())


def test_one_dimensional_pools_use_pytorch_argument_order() -> None:
    rng = np.random.default_rng(7)
    x = _randn(rng, 2, 3, 9)
    compare(lambda x: x.max_pool1d(3, 2, 1), lambda x: F.max_pool1d(x, 3, 2, 1), x)
    compare(lambda x: x.avg_pool1d(3, 2, 1, True, False), lambda x: F.avg_pool1d(x, 3, 2, 1, True, False), x)


def test_pool_errors() -> None:
    with pytest.raises(ShapeError, match=r"max_pool2d: window 3 \(dilation 1\) does not fit spatial axis 1 of size 2"):
        Tensor.ones(1, 1, 4, 2).max_pool2d(3)
    with pytest.raises(ValueError, match="avg_pool2d: stride"):
        Tensor.ones(1, 1, 4, 4).avg_pool2d(2, stride=(1, 2, 3))


# ---- interpolate ----------------------------------------------------------------------------------------------------
INTERPOLATE_CASES = [
    ((2, 3, 5), (8,), "linear", False), ((2, 3, 5), (3,), "linear", True), ((1, 2, 4, 5), (7, 3), "bilinear", False),
    ((1, 2, 4, 5), (7, 3), "bilinear", True), ((1, 2, 4, 5), (1, 9), "bilinear", True),
    ((1, 2, 4, 5), (9, 2), "nearest", None), ((1, 2, 6, 5), (4, 11), "nearest-exact", None),
    ((1, 1, 3, 2, 4), (5, 3, 2), "trilinear", False), ((1, 1, 3, 2, 4), (2, 4, 6), "nearest", None),
]


@pytest.mark.parametrize(("shape", "size", "mode", "align"), INTERPOLATE_CASES)
def test_interpolate_matches_torch(shape: tuple[int, ...], size: tuple[int, ...], mode: Any,
                                   align: bool | None) -> None:
    rng = np.random.default_rng(8)
    x = _randn(rng, *shape)
    ours = {} if align is None else {"align_corners": align}
    compare(lambda x: x.interpolate(size, mode=mode, **ours), lambda x: F.interpolate(x, size=size, mode=mode, **ours),
            x)


def test_interpolate_linear_resizes_the_last_axes_of_any_tensor() -> None:
    """tinygrad's convention: size covers the last len(size) axes, whatever comes before (here none)."""
    x = np.array([[1.0, 2.0, 3.0, 4.0], [21.0, 22.0, 23.0, 24.0]], dtype=np.float32)
    want = F.interpolate(torch.from_numpy(x)[None, None], size=(3, 3), mode="bilinear")[0, 0].numpy()
    np.testing.assert_allclose(Tensor(x).interpolate((3, 3)).numpy(), want, rtol=1e-6)


def test_interpolate_errors() -> None:
    with pytest.raises(ValueError, match="mode 'cubic'"):
        Tensor.ones(1, 1, 4).interpolate((2,), mode="cubic")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="size"):
        Tensor.ones(4).interpolate((2, 2))


# ---- normalization --------------------------------------------------------------------------------------------------
def test_layernorm_matches_torch() -> None:
    rng = np.random.default_rng(9)
    x = _randn(rng, 2, 3, 5) * 3 + 1
    compare(lambda x: x.layernorm(), lambda x: F.layer_norm(x, (5,)), x, atol=1e-4)
    compare(lambda x: x.layernorm((-2, -1), eps=1e-3), lambda x: F.layer_norm(x, (3, 5), eps=1e-3), x, atol=1e-4)


def test_batchnorm_matches_torch_inference() -> None:
    rng = np.random.default_rng(10)
    x, w, b, mean = _randn(rng, 2, 3, 4, 4), _randn(rng, 3), _randn(rng, 3), _randn(rng, 3)
    var = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    invstd = (1 / np.sqrt(var + 1e-5)).astype(np.float32)
    compare(lambda x, w, b, m, s: x.batchnorm(w, b, m, s),
            lambda x, w, b, m, s: F.batch_norm(x, m, s.pow(-2) - 1e-5, w, b, training=False, eps=1e-5),
            x, w, b, mean, invstd, atol=1e-4, grad=False)

    def by_formula(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return (x - m[:, None, None]) * w[:, None, None] * s[:, None, None] + b[:, None, None]

    compare(lambda x, w, b, m, s: x.batchnorm(w, b, m, s), by_formula, x, w, b, mean, invstd, atol=1e-4)
    compare(lambda x, m, s: x.batchnorm(None, None, m, s), lambda x, m, s: (x - m[:, None, None]) * s[:, None, None],
            x, mean, invstd)


def test_batchnorm_rejects_statistics_of_the_wrong_size() -> None:
    with pytest.raises(ShapeError, match=r"batchnorm: mean of shape \(4,\) does not match the channel shape \(3,\)"):
        Tensor.ones(2, 3, 5).batchnorm(None, None, Tensor.ones(4), Tensor.ones(3))


# ---- attention ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "scale", "gqa"])
def test_scaled_dot_product_attention_matches_torch(case: str) -> None:
    rng = np.random.default_rng(11)
    heads_kv = 1 if case == "gqa" else 2
    q, k, v = _randn(rng, 2, 2, 3, 4), _randn(rng, 2, heads_kv, 5, 4), _randn(rng, 2, heads_kv, 5, 6)
    mask = rng.uniform(size=(3, 5)) < 0.7
    mask[:, 0] = True  # every row keeps one position (an all-masked row is NaN in both)
    kwargs: dict[str, Any] = {  # type: ignore[assignment]
        "plain": {}, "causal": {"is_causal": True}, "scale": {"scale": 0.3}, "gqa": {"enable_gqa": True},
        "bool_mask": {"attn_mask": mask}, "float_mask": {"attn_mask": np.where(mask, 0.5, -2.0).astype(np.float32)},
    }[case]

    def ours(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        extra = {**kwargs, "attn_mask": Tensor(kwargs["attn_mask"])} if "attn_mask" in kwargs else kwargs
        return q.scaled_dot_product_attention(k, v, **extra)

    def theirs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        extra = {**kwargs, "attn_mask": torch.from_numpy(kwargs["attn_mask"])} if "attn_mask" in kwargs else kwargs
        return F.scaled_dot_product_attention(q, k, v, **extra)

    compare(ours, theirs, q, k, v, atol=1e-5)


def test_attention_errors() -> None:
    q = Tensor.ones(1, 3, 4)
    with pytest.raises(ValueError, match="attn_mask or is_causal, not both"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(3, 3), is_causal=True)
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        q.scaled_dot_product_attention(Tensor.ones(1, 3, 5), q)


# ---- dropout --------------------------------------------------------------------------------------------------------
def test_dropout_is_the_identity_outside_training() -> None:
    x = Tensor.ones(4, 4)
    assert x.dropout(0.5) is x


def test_dropout_zeros_about_p_and_scales_the_rest(training: None) -> None:
    Tensor.manual_seed(1)
    p, n = 0.3, 20_000
    out = Tensor.ones(n).mul(2.0).dropout(p).numpy()
    kept = out != 0
    assert abs(1 - kept.mean() - p) < 0.02
    np.testing.assert_allclose(out[kept], 2.0 / (1 - p), rtol=1e-6)
    assert abs(out.mean() - 2.0) < 0.05  # the expectation is unchanged


def test_dropout_masks_differ_between_calls_and_repeat_with_the_seed(training: None) -> None:
    Tensor.manual_seed(3)
    first, second = Tensor.ones(64).dropout().numpy(), Tensor.ones(64).dropout().numpy()
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(Tensor.ones(64).dropout().numpy(), first)
    assert not np.array_equal(first, second)


def test_dropout_edge_probabilities(training: None) -> None:
    x = Tensor(np.arange(6, dtype=np.float32))
    assert x.dropout(0.0) is x
    np.testing.assert_array_equal(x.dropout(1.0).numpy(), np.zeros(6, np.float32))
    with pytest.raises(ValueError, match=r"dropout: probability p=1\.5"):
        x.dropout(1.5)
