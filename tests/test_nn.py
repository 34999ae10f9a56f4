"""plygrad.frontend.nn layers against torch.nn: forward values and the gradients of the input and of every
parameter (PyTorch's weights copied in), PyTorch's initialization, state-dict names, running statistics."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import DTypeError, ShapeError, Tensor, dtypes, nn

Array = np.ndarray[Any, Any]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _x(*shape: int, seed: int = 0) -> Array:
    return _rng(seed).standard_normal(shape).astype(np.float32)


def module_compare(pg_mod: Any, torch_mod: torch.nn.Module, names: Sequence[str], *inputs: Array,
                   call: Callable[..., Any] | None = None, **kw: Any) -> None:
    """Check `pg_mod(*inputs)` against `torch_mod(*inputs)` with torch's parameters `names` copied into pg_mod:
    forward values, and the gradients of the inputs and of each of those parameters."""
    params = [getattr(torch_mod, n).detach().numpy().copy() for n in names]
    k = len(inputs)
    run = call or (lambda mod, *xs: mod(*xs))

    def pg_fn(*ts: Tensor) -> Any:
        for n, t in zip(names, ts[k:], strict=True):
            setattr(pg_mod, n, t)
        return run(pg_mod, *ts[:k])

    def torch_fn(*ts: torch.Tensor) -> Any:
        swapped = dict(zip(names, ts[k:], strict=True))
        return torch.func.functional_call(torch_mod, swapped, ts[:k]) if call is None else \
            run(lambda *xs: torch.func.functional_call(torch_mod, swapped, xs), *ts[:k])

    compare(pg_fn, torch_fn, *inputs, *params, **kw)


def _tensor_attrs(mod: Any) -> dict[str, tuple[int, ...]]:
    return {k: v.shape for k, v in vars(mod).items() if isinstance(v, Tensor)}


# ---- Linear -------------------------------------------------------------------------------------------------------

@settings(max_examples=4, deadline=None)
@given(batch=st.lists(st.sampled_from([1, 2, 3]), max_size=2).map(tuple), fin=st.sampled_from([1, 3, 4]),
       fout=st.sampled_from([1, 2, 5]), bias=st.booleans())
def test_linear_matches_torch(batch: tuple[int, ...], fin: int, fout: int, bias: bool) -> None:
    names = ["weight", "bias"] if bias else ["weight"]
    module_compare(nn.Linear(fin, fout, bias=bias), torch.nn.Linear(fin, fout, bias=bias), names, _x(*batch, fin))


def test_linear_rejects_wrong_feature_count() -> None:
    with pytest.raises(ShapeError, match=r"Linear\(3, 2\).*\(4, 5\)"):
        nn.Linear(3, 2)(Tensor.zeros(4, 5))


# ---- convolutions -------------------------------------------------------------------------------------------------

CONV2D_CASES = [  # (in, out, kernel, stride, padding, dilation, groups, bias)
    (2, 3, 3, 1, 0, 1, 1, True),
    (2, 4, (2, 3), 2, 1, 1, 2, True),
    (3, 3, 3, 1, 2, 2, 3, False),
    (2, 2, 3, 1, "same", 1, 1, True),
]


@pytest.mark.parametrize("case", CONV2D_CASES)
def test_conv2d_matches_torch(case: tuple[Any, ...]) -> None:
    cin, cout, k, stride, padding, dilation, groups, bias = case
    args = (cin, cout, k, stride, padding, dilation, groups, bias)
    names = ["weight", "bias"] if bias else ["weight"]
    module_compare(nn.Conv2d(*args), torch.nn.Conv2d(*args), names, _x(2, cin, 6, 5), atol=1e-4)


def test_conv1d_matches_torch() -> None:
    module_compare(nn.Conv1d(2, 3, 3, stride=2, padding=1), torch.nn.Conv1d(2, 3, 3, stride=2, padding=1),
                   ["weight", "bias"], _x(2, 2, 7), atol=1e-4)


@pytest.mark.parametrize("case", [  # (in, out, kernel, stride, padding, output_padding, dilation, groups)
    (2, 3, 3, 1, 0, 0, 1, 1),
    (2, 4, 3, 2, 1, 1, 1, 2),
    (3, 2, (2, 3), 2, 0, 0, 2, 1),
])
def test_conv_transpose2d_matches_torch(case: tuple[Any, ...]) -> None:
    cin, cout, k, stride, padding, output_padding, dilation, groups = case
    pg = nn.ConvTranspose2d(cin, cout, k, stride, padding, output_padding, dilation, groups)
    ref = torch.nn.ConvTranspose2d(cin, cout, k, stride, padding, output_padding, groups, True, dilation)
    module_compare(pg, ref, ["weight", "bias"], _x(2, cin, 4, 3), atol=1e-4)


def test_conv_rejects_channels_not_divisible_by_groups() -> None:
    with pytest.raises(ValueError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)


# ---- normalization ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 3), (3, 3, 5), (2, 3, 4, 3)])
def test_batchnorm_training_matches_torch(shape: tuple[int, ...]) -> None:
    ref = torch.nn.BatchNorm1d(3) if len(shape) < 4 else torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    with Tensor.train():
        module_compare(nn.BatchNorm(3), ref.train(), ["weight", "bias"], _x(*shape), atol=1e-4)


def test_batchnorm_running_statistics_and_eval_match_torch() -> None:
    pg, ref = nn.BatchNorm2d(3, momentum=0.2), torch.nn.BatchNorm2d(3, momentum=0.2)
    with Tensor.train():
        for seed in range(3):
            x = _x(4, 3, 2, 2, seed=seed) * 2 + 1
            pg(Tensor(x)).realize()
            ref(torch.from_numpy(x))
    pg.running_mean.realize(pg.running_var, pg.num_batches_tracked)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(pg, name).numpy(), getattr(ref, name).numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    ref.eval()
    with Tensor.train(False):
        x = _x(2, 3, 2, 2, seed=9)
        np.testing.assert_allclose(pg(Tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_batchnorm_without_affine_or_running_stats() -> None:
    pg = nn.BatchNorm(3, affine=False, track_running_stats=False)
    assert pg.weight is None and pg.bias is None
    ref = torch.nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    with Tensor.train(False):  # no running statistics: the batch's are used even in eval mode
        module_compare(pg, ref.eval(), [], _x(5, 3), atol=1e-4)


def test_batchnorm_aliases() -> None:
    assert nn.BatchNorm1d is nn.BatchNorm2d is nn.BatchNorm3d is nn.BatchNorm


@settings(max_examples=3, deadline=None)
@given(shape=st.sampled_from([(2, 4), (3, 2, 5), (2, 2, 3, 4)]), axes=st.sampled_from([1, 2]), affine=st.booleans())
def test_layernorm_matches_torch(shape: tuple[int, ...], axes: int, affine: bool) -> None:
    normalized = shape[len(shape) - axes:] if axes <= len(shape) - 1 else shape[-1:]
    names = ["weight", "bias"] if affine else []
    ref = torch.nn.LayerNorm(normalized, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
    module_compare(nn.LayerNorm(normalized, elementwise_affine=affine), ref, names, _x(*shape), atol=1e-4)


def test_layernorm_rejects_wrong_trailing_shape() -> None:
    with pytest.raises(ShapeError, match="LayerNorm"):
        nn.LayerNorm(4)(Tensor.zeros(2, 3))


@pytest.mark.parametrize("shape", [(2, 6, 3), (2, 6, 2, 2)])
def test_groupnorm_matches_torch(shape: tuple[int, ...]) -> None:
    ref = torch.nn.GroupNorm(3, 6)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    module_compare(nn.GroupNorm(3, 6), ref, ["weight", "bias"], _x(*shape), atol=1e-4)


def test_groupnorm_rejects_indivisible_groups() -> None:
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)


def test_instancenorm_matches_torch() -> None:
    ref = torch.nn.InstanceNorm2d(3, affine=True)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    module_compare(nn.InstanceNorm(3), ref, ["weight", "bias"], _x(2, 3, 3, 4), atol=1e-4)


def test_rmsnorm_matches_torch() -> None:
    ref = torch.nn.RMSNorm(5, eps=1e-6)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    module_compare(nn.RMSNorm(5), ref, ["weight"], _x(3, 2, 5), atol=1e-5)


# ---- Embedding, LSTMCell ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("idx_shape", [(5,), (2, 3)])
def test_embedding_matches_torch(idx_shape: tuple[int, ...]) -> None:
    idx = _rng(1).integers(0, 6, size=idx_shape).astype(np.int32)
    idx.flat[0] = idx.flat[-1]  # a repeated index: its weight gradient is the sum of both
    module_compare(nn.Embedding(6, 4), torch.nn.Embedding(6, 4), ["weight"], idx,
                   call=lambda mod, i: mod(i.long()) if isinstance(i, torch.Tensor) else mod(i))


def test_embedding_rejects_float_indices() -> None:
    with pytest.raises(DTypeError, match="Embedding"):
        nn.Embedding(4, 2)(Tensor([1.0, 2.0]))


LSTM_NAMES = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]


def test_lstmcell_forward_matches_torch() -> None:
    pg, ref = nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4)
    module_compare(pg, ref, LSTM_NAMES, _x(2, 3), atol=1e-5, grad=False)  # the zero initial state
    module_compare(pg, ref, LSTM_NAMES, _x(2, 3), _x(2, 4, seed=1), _x(2, 4, seed=2),
                   call=lambda mod, x, h, c: mod(x, (h, c)), atol=1e-5, grad=False)


@pytest.mark.slow  # ~30 s with a cold program cache: the backward kernels are large C for the compiler
def test_lstmcell_gradients_match_torch() -> None:
    module_compare(nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4), LSTM_NAMES, _x(2, 3), _x(2, 4, seed=1),
                   _x(2, 4, seed=2), call=lambda mod, x, h, c: mod(x, (h, c)), atol=1e-5)


# ---- initialization and state names -------------------------------------------------------------------------------

def _check_uniform(t: Tensor, bound: float, what: str) -> None:
    v = t.numpy()
    assert np.all(np.abs(v) <= bound), f"{what}: values outside +-{bound}"
    assert np.abs(v).max() > 0.8 * bound, f"{what}: values do not reach near the bound {bound}"
    if v.size >= 200:
        assert abs(v.std() - bound / math.sqrt(3)) < 0.15 * bound / math.sqrt(3), f"{what}: std {v.std()}"


def test_initialization_like_pytorch() -> None:
    Tensor.manual_seed(0)
    lin = nn.Linear(30, 20)
    _check_uniform(lin.weight, 1 / math.sqrt(30), "Linear.weight")
    _check_uniform(lin.bias, 1 / math.sqrt(30), "Linear.bias")  # type: ignore[arg-type]
    conv = nn.Conv2d(6, 8, 3, groups=2)  # PyTorch's fan_in counts one group's input channels: 3 * 3 * 3
    _check_uniform(conv.weight, 1 / math.sqrt(27), "Conv2d.weight")
    tconv = nn.ConvTranspose2d(4, 6, 3, groups=2)  # fan_in of a transposed conv: weight.shape[1] * k * k = 3 * 9
    assert tconv.weight.shape == (4, 3, 3, 3)
    _check_uniform(tconv.weight, 1 / math.sqrt(27), "ConvTranspose2d.weight")
    lstm = nn.LSTMCell(5, 16)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        _check_uniform(getattr(lstm, name), 0.25, f"LSTMCell.{name}")
    emb = nn.Embedding(50, 20).weight.numpy()
    assert abs(emb.mean()) < 0.1 and abs(emb.std() - 1) < 0.1, "Embedding.weight is not N(0, 1)"
    bn = nn.BatchNorm(3)
    for name, value in (("weight", 1), ("bias", 0), ("running_mean", 0), ("running_var", 1)):
        np.testing.assert_array_equal(getattr(bn, name).numpy(), np.full(3, value, np.float32), err_msg=name)


@pytest.mark.parametrize(("make", "make_torch"), [
    (lambda: nn.Linear(3, 2), lambda: torch.nn.Linear(3, 2)),
    (lambda: nn.Conv2d(2, 4, 3), lambda: torch.nn.Conv2d(2, 4, 3)),
    (lambda: nn.ConvTranspose2d(2, 4, 3), lambda: torch.nn.ConvTranspose2d(2, 4, 3)),
    (lambda: nn.BatchNorm2d(3), lambda: torch.nn.BatchNorm2d(3)),
    (lambda: nn.LayerNorm((2, 3)), lambda: torch.nn.LayerNorm((2, 3))),
    (lambda: nn.GroupNorm(2, 4), lambda: torch.nn.GroupNorm(2, 4)),
    (lambda: nn.InstanceNorm(3), lambda: torch.nn.InstanceNorm2d(3, affine=True)),
    (lambda: nn.RMSNorm(4), lambda: torch.nn.RMSNorm(4)),
    (lambda: nn.Embedding(5, 3), lambda: torch.nn.Embedding(5, 3)),
    (lambda: nn.LSTMCell(3, 2), lambda: torch.nn.LSTMCell(3, 2)),
])
def test_state_names_and_shapes_match_torch(make: Callable[[], Any], make_torch: Callable[[], Any]) -> None:
    want = {k: tuple(v.shape) for k, v in make_torch().state_dict().items()}
    assert _tensor_attrs(make()) == want


def test_parameters_require_grad_and_buffers_do_not() -> None:
    bn = nn.BatchNorm(2)
    assert bn.weight is not None and bn.weight.requires_grad
    assert bn.running_mean.requires_grad is False and bn.num_batches_tracked.dtype is dtypes.int64
