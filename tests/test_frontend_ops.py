"""Every frontend op against NumPy, under both schedulers, with every layer installed (issue #3's frontend core).

Shapes are random and small (hypothesis; 0- and 1-sized axes included): each new shape compiles C once, and the
program cache makes repeats cheap. The `scheduler` fixture realizes under "default" and "unfused" in turn; the
differential test checks the two agree, and the kernel-count tests check the fusion that is the point of `default`.
"""

from __future__ import annotations

import gc
import itertools
import math
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from frontend_cases import SCHEDULERS, array, broadcastable, check, shapes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, dtypes
from plygrad.ir import Ops

# the scheduler fixture only enters a context manager, which is the same for every example
FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=SCHEDULERS)
def scheduler(request: pytest.FixtureRequest) -> Iterator[str]:
    with Tensor.scheduler(request.param):
        yield request.param


def rng_for(*parts: object) -> np.random.Generator:
    return np.random.default_rng(abs(hash(parts)) % 2**32)


# ---- elementwise --------------------------------------------------------------------------------------------------
UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Any], Any], tuple[float, float]]] = {
    "neg": (lambda t: -t, np.negative, (-3, 3)),
    "exp": (Tensor.exp, np.exp, (-3, 3)),
    "exp2": (Tensor.exp2, np.exp2, (-3, 3)),
    "log": (Tensor.log, np.log, (0.1, 5)),
    "log2": (Tensor.log2, np.log2, (0.1, 5)),
    "sqrt": (Tensor.sqrt, np.sqrt, (0, 5)),
    "rsqrt": (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 5)),
    "sin": (Tensor.sin, np.sin, (-6, 6)),
    "cos": (Tensor.cos, np.cos, (-6, 6)),
    "abs": (Tensor.abs, np.abs, (-3, 3)),
    "sign": (Tensor.sign, np.sign, (-3, 3)),
    "relu": (Tensor.relu, lambda x: np.maximum(x, 0), (-3, 3)),
    "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-5, 5)),
    "tanh": (Tensor.tanh, np.tanh, (-4, 4)),
    "floor": (Tensor.floor, np.floor, (-4, 4)),
    "ceil": (Tensor.ceil, np.ceil, (-4, 4)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@FEW
@given(shape=shapes())
def test_unary_float_ops_match_numpy(scheduler: str, name: str, shape: tuple[int, ...]) -> None:
    ours, theirs, (low, high) = UNARY[name]
    x = array(rng_for(name, shape), shape, low=low, high=high)
    check(ours(Tensor(x)), theirs(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int32", "int8", "float64", "float16"])
def test_unary_ops_on_other_dtypes(scheduler: str, dtype: str) -> None:
    x = array(np.random.default_rng(0), (3, 4), dtype, low=-5, high=5)
    tol = 1e-2 if dtype == "float16" else 1e-6
    check(abs(Tensor(x)), np.abs(x), rtol=tol)
    check(Tensor(x).relu(), np.maximum(x, 0).astype(x.dtype), rtol=tol)
    check(Tensor(x).sign(), np.sign(x), rtol=tol)
    check(Tensor(x).exp(), np.exp(x.astype(np.float32 if x.dtype.kind == "i" else x.dtype)), rtol=tol)


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "max": lambda a, b: a.maximum(b) if isinstance(a, Tensor) else np.maximum(a, b),
    "min": lambda a, b: a.minimum(b) if isinstance(a, Tensor) else np.minimum(a, b),
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@FEW
@given(shape=shapes(), data=st.data())
def test_binary_ops_broadcast_like_numpy(scheduler: str, name: str, dtype: str, shape: tuple[int, ...],
                                         data: st.DataObject) -> None:
    other = broadcastable(shape, data)
    if data.draw(st.booleans()):
        shape, other = other, shape
    rng = rng_for(name, dtype, shape, other)
    a, b = array(rng, shape, dtype), array(rng, other, dtype)
    if name == "div":
        b = np.where(b == 0, 1, b).astype(dtype)
    expected = BINARY[name](a, b)
    if name == "div" and dtype == "int32":
        expected = expected.astype(np.float32)
    check(BINARY[name](Tensor(a), Tensor(b)), expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int8", "int64", "float32"])
def test_floor_division_and_modulo_follow_python(scheduler: str, dtype: str) -> None:
    rng = np.random.default_rng(1)
    a = array(rng, (4, 6), dtype, low=-20, high=20)
    b = array(rng, (6,), dtype, low=-5, high=5)
    b = np.where(b == 0, 3, b).astype(dtype)
    check(Tensor(a) // Tensor(b), np.floor_divide(a, b), rtol=1e-6)
    check(Tensor(a) % Tensor(b), np.mod(a, b), rtol=1e-5, atol=1e-5)
    check(Tensor(a) // 3, np.floor_divide(a, np.array(3, dtype)), rtol=1e-6)
    check(7 % Tensor(b), np.mod(np.array(7, dtype), b), rtol=1e-5, atol=1e-5)


def test_scalars_reflected_ops_and_weak_promotion(scheduler: str) -> None:
    x = np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int32)
    t = Tensor(x)
    check(t + 1.5, x + np.float32(1.5))
    check(2 - t, 2 - x)
    check(3 * t, 3 * x)
    check(1 / Tensor(x.astype(np.float32)), 1 / x.astype(np.float32))
    check(t / 2, (x / 2).astype(np.float32))
    check(Tensor([1.0, 2.0, 3.0]) ** 2, np.array([1.0, 4.0, 9.0]))
    check(2 ** Tensor([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 8.0]))
    check(t ** 2, x**2)
    check(Tensor(x.astype(np.float16)) * 1.5, x.astype(np.float16) * np.float16(1.5), rtol=1e-3)
    assert (Tensor(x.astype(np.float16)) * 1.5).dtype is dtypes.float16
    check(Tensor([True, False]) + 2, np.array([3, 2], dtype=np.int32))
    check(t & 6, x & 6)
    check(~t, ~x)


@pytest.mark.parametrize(("left", "right", "result"), [
    ("int8", "uint8", "int16"), ("int32", "float16", "float16"), ("bool", "bool", "bool"), ("uint8", "bool", "uint8"),
    ("float16", "float32", "float32"), ("int64", "int32", "int64"), ("uint32", "int32", "int64"),
])
def test_mixed_dtypes_promote_like_pytorch(scheduler: str, left: str, right: str, result: str) -> None:
    rng = np.random.default_rng(6)
    a, b = array(rng, (3, 4), left, low=0, high=9), array(rng, (4,), right, low=0, high=9)
    for name in ("add", "mul", "max", "lt"):
        got = BINARY[name](Tensor(a), Tensor(b))
        want = BINARY[name](a.astype(result), b.astype(result))
        assert got.dtype is (dtypes.bool if name == "lt" else dtypes.from_name(result))
        check(got, want, rtol=1e-3)


@FEW
@given(shape=shapes(nonempty=True), data=st.data())
def test_where_and_cast(scheduler: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    rng = rng_for("where", shape)
    c, a = array(rng, shape, "bool"), array(rng, shape)
    b = array(rng, broadcastable(shape, data))
    check(Tensor(c).where(Tensor(a), Tensor(b)), np.where(c, a, b))
    check(Tensor(c).where(Tensor(a), 0.5), np.where(c, a, np.float32(0.5)))
    check(Tensor(a).cast(dtypes.int32), a.astype(np.int32))
    check(Tensor(a).cast(dtypes.float16), a.astype(np.float16), rtol=1e-3)
    check(Tensor(a).cast(dtypes.bool), a.astype(bool))


# ---- movement -----------------------------------------------------------------------------------------------------
@FEW
@given(shape=shapes(1, 3), data=st.data())
def test_movement_ops_match_numpy(scheduler: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    x = array(rng_for("move", shape), shape)
    t = Tensor(x)
    order = tuple(data.draw(st.permutations(range(len(shape)))))
    check(t.permute(order), x.transpose(order))
    check(t.reshape(-1), x.reshape(-1))
    check(t.flip(0), np.flip(x, 0))
    check(t.T, x.T)
    pads = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
    check(t.pad(pads), np.pad(x, pads))
    bounds = tuple(sorted((data.draw(st.integers(0, n)), data.draw(st.integers(0, n)))) for n in shape)
    check(t.shrink(bounds), x[tuple(slice(a, b) for a, b in bounds)])
    check(t.unsqueeze(-1).expand(*shape, 3), np.broadcast_to(x[..., None], (*shape, 3)))
    check(t.flatten(), x.flatten())
    check(t.transpose(0, -1), np.swapaxes(x, 0, -1))
    check(t.reshape(1, *shape).squeeze(0), x)


@FEW
@given(shape=shapes(1, 3), data=st.data())
def test_slicing_matches_numpy(scheduler: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    x = array(rng_for("slice", shape), shape)
    index: list[Any] = []
    for n in shape:
        kind = data.draw(st.sampled_from(["int", "slice", "none"]) if n else st.just("slice"))
        if kind == "int":
            index.append(data.draw(st.integers(-n, n - 1)))
        else:
            bound = st.none() | st.integers(-n - 1, n + 1)
            step = data.draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))
            index.append(slice(data.draw(bound), data.draw(bound), step))
            if kind == "none":
                index.append(None)
    check(Tensor(x)[tuple(index)], x[tuple(index)])
    check(Tensor(x)[..., :1], x[..., :1])


# ---- reductions ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
@FEW
@given(shape=shapes(), data=st.data())
def test_reductions_match_numpy(scheduler: str, name: str, shape: tuple[int, ...], data: st.DataObject) -> None:
    if name in ("max", "min"):
        shape = tuple(max(n, 1) for n in shape)  # max/min over zero elements has no value
    axes = data.draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape),
                                          min_size=1, max_size=len(shape)) if shape else st.none())
    keep = data.draw(st.booleans())
    x = array(rng_for(name, shape), shape, low=0.5 if name == "prod" else -3, high=1.5 if name == "prod" else 3)
    axis = None if axes is None else tuple(axes)
    with np.errstate(all="ignore"), warnings.catch_warnings():  # NumPy warns about means of zero elements (NaN)
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = getattr(np, name)(x, axis=axis, keepdims=keep)
    check(getattr(Tensor(x), name)(axis, keepdim=keep), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32"])
def test_integer_and_bool_sums_accumulate_wide(scheduler: str, dtype: str) -> None:
    x = array(np.random.default_rng(2), (5, 40), dtype, low=-128 if dtype == "int8" else 0, high=127)
    got = Tensor(x).sum(1)
    assert got.dtype is {"bool": dtypes.int32, "int8": dtypes.int32, "uint8": dtypes.uint32,
                         "int32": dtypes.int32}[dtype]
    check(got, x.sum(1, dtype=np.int64).astype(got.numpy().dtype))
    check(Tensor(x).max(1), x.max(1))
    check(Tensor(x).min(0), x.min(0))


@FEW
@given(shape=shapes(1, 3, nonempty=True))
def test_softmax_and_log_softmax(scheduler: str, shape: tuple[int, ...]) -> None:
    x = array(rng_for("softmax", shape), shape, low=-10, high=10)
    e = np.exp(x - x.max(-1, keepdims=True))
    check(Tensor(x).softmax(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    check(Tensor(x).log_softmax(0), x - x.max(0) - np.log(np.exp(x - x.max(0)).sum(0)), rtol=1e-5, atol=1e-5)


@FEW
@given(data=st.data())
def test_matmul_matches_numpy(scheduler: str, data: st.DataObject) -> None:
    n, k, m = (data.draw(st.sampled_from([1, 2, 3, 5])) for _ in range(3))
    batch_a = data.draw(st.sampled_from([(), (2,), (1,), (2, 1)]))
    batch_b = data.draw(st.sampled_from([(), (2,), (1,)]))
    left = (*batch_a, n, k) if data.draw(st.booleans()) or batch_a else (k,)
    right = (*batch_b, k, m) if data.draw(st.booleans()) or batch_b else (k,)
    rng = rng_for("matmul", left, right)
    a, b = array(rng, left), array(rng, right)
    check(Tensor(a) @ Tensor(b), a @ b, rtol=1e-5, atol=1e-5)
    check(Tensor(a).dot(Tensor(b)), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_integer_matmul(scheduler: str) -> None:
    a = array(np.random.default_rng(3), (3, 4), "int32", low=-5, high=5)
    check(Tensor(a) @ Tensor(a.T), a @ a.T)


# ---- creation and reading back ------------------------------------------------------------------------------------
def test_creation_matches_numpy(scheduler: str) -> None:
    check(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32))
    check(Tensor.ones((4,), dtype=dtypes.int8), np.ones(4, np.int8))
    check(Tensor.full((2, 2), 7), np.full((2, 2), 7, np.int32))
    check(Tensor.arange(10), np.arange(10, dtype=np.int32))
    check(Tensor.arange(3, 20, 4), np.arange(3, 20, 4, dtype=np.int32))
    check(Tensor.arange(1.0, 0.0, -0.25), np.arange(1.0, 0.0, -0.25, dtype=np.float32))
    check(Tensor.arange(1000), np.arange(1000, dtype=np.int32))
    check(Tensor.eye(4), np.eye(4, dtype=np.float32))
    check(Tensor.eye(2, 5), np.eye(2, 5, dtype=np.float32))
    check(Tensor([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]], np.int32))
    check(Tensor(np.arange(6, dtype=np.uint16).reshape(2, 3)).T, np.arange(6, dtype=np.uint16).reshape(2, 3).T)
    check(Tensor(3.5) * 2, np.float32(7.0))
    x = Tensor(np.ones((3, 2), np.float64))
    check(x.zeros_like(), np.zeros((3, 2)))
    check(x.full_like(2.5), np.full((3, 2), 2.5))
    assert Tensor.empty(3, 4).numpy().shape == (3, 4)
    check(Tensor.zeros(0, 3) + 1, np.zeros((0, 3), np.float32))


def test_reading_back(scheduler: str) -> None:
    x = Tensor([[1.5, 2.0], [3.0, 4.0]])
    assert (x * 2).tolist() == [[3.0, 4.0], [6.0, 8.0]]
    assert x.sum().item() == 10.5
    assert x[1, 0].item() == 3.0
    assert [row.tolist() for row in x] == [[1.5, 2.0], [3.0, 4.0]]
    assert Tensor(np.array([1.0, 2.0], dtype=np.float32)).to("CPU").contiguous().tolist() == [1.0, 2.0]


def test_realize_several_tensors_in_one_schedule(scheduler: str) -> None:
    a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b, c = a + 1, (a * 2).sum(1)
    assert repr(b).endswith("lazy ADD>")
    b.realize(c)
    assert repr(b).endswith("realized>") and repr(c).endswith("realized>")
    check(b, np.arange(6).reshape(2, 3) + 1)
    check(c, (np.arange(6).reshape(2, 3) * 2).sum(1))
    check(b * c.reshape(2, 1), (np.arange(6).reshape(2, 3) + 1) * (np.arange(6).reshape(2, 3) * 2).sum(1)[:, None])
    d = a.exp()
    e, f = d.reshape(3, 2), d.sum(0)
    d.realize(e, d, f)  # repeated tensors, and views of one value, which the scheduler may store once
    check(e, np.exp(np.arange(6, dtype=np.float32)).reshape(3, 2))
    check(f, np.exp(np.arange(6, dtype=np.float32)).reshape(2, 3).sum(0))
    check(d, np.exp(np.arange(6, dtype=np.float32)).reshape(2, 3))


def test_bfloat16_round_trip(scheduler: str) -> None:
    x = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    check(Tensor(x, dtype=dtypes.bfloat16) * 2, x * 2, rtol=1e-2)


# ---- buffers stay alive exactly as long as needed -----------------------------------------------------------------
def test_inputs_outlive_their_tensors_while_a_graph_reads_them(scheduler: str) -> None:
    # 1.2 MB: a plan keeps a smaller output Buffer for its next run (tests/test_realize_fast_path.py)
    x = Tensor(np.arange(300_000, dtype=np.float32) / 65536)
    (buf,) = x.inputs
    ref = weakref.ref(buf)
    y = x.exp() + 1
    del x, buf
    gc.collect()
    check(y, np.exp(np.arange(300_000, dtype=np.float32) / 65536) + 1, rtol=1e-6)
    assert ref() is None, "after realizing, y reads only its own output: the input buffer must be freed"
    (out,) = y.inputs
    out_ref = weakref.ref(out)
    del y, out
    gc.collect()
    assert out_ref() is None, "a dropped realized tensor frees its buffer"


# ---- schedulers -----------------------------------------------------------------------------------------------------
def composite(x: Tensor, w: Tensor) -> Tensor:
    h = (x @ w).relu() + x[:, :1] * 0.5
    return (h.softmax() * h.sigmoid()).sum(0) - h.max(1).mean()


def test_default_and_unfused_schedulers_agree() -> None:
    rng = np.random.default_rng(4)
    x, w = array(rng, (6, 5)), array(rng, (5, 7))
    results = {}
    for name in SCHEDULERS:
        with Tensor.scheduler(name):
            results[name] = composite(Tensor(x), Tensor(w)).numpy()
            assert len(composite(Tensor(x), Tensor(w)).schedule().src) >= 1
    np.testing.assert_allclose(results["default"], results["unfused"], rtol=1e-5, atol=1e-6)
    h = np.maximum(x @ w, 0) + x[:, :1] * 0.5
    e = np.exp(h - h.max(1, keepdims=True))
    expected = (e / e.sum(1, keepdims=True) / (1 + np.exp(-h))).sum(0) - h.max(1).mean()
    np.testing.assert_allclose(results["default"], expected, rtol=1e-4, atol=1e-5)


def test_plygrad_scheduler_environment_variable_switches_schedulers(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = (Tensor(array(np.random.default_rng(i), (8, 8))) for i in range(3))
    monkeypatch.setenv("PLYGRAD_SCHEDULER", "unfused")
    unfused = ((a + b) * c).exp2()  # three ALU ops: three kernels unfused, one fused
    assert len(unfused.schedule().src) == 3
    monkeypatch.setenv("PLYGRAD_SCHEDULER", "default")
    assert len(unfused.schedule().src) == 1
    with Tensor.scheduler("unfused"):
        assert len(unfused.schedule().src) == 3
    check(unfused, np.exp2((a.numpy() + b.numpy()) * c.numpy()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "build", "most"), [
    ("relu_chain", lambda a, b, c: ((a + b) * c).relu(), 1),
    ("sum_rows", lambda a, b, c: (a * b).sum(axis=1), 1),
    ("softmax", lambda a, b, c: a.softmax(), 2),
    ("log_softmax", lambda a, b, c: a.log_softmax(), 2),
    ("layernorm", lambda a, b, c: a.layernorm(), 2),
    ("sum_plus_vector", lambda a, b, c: a.sum(1) + b[0], 1),
    ("conv_bias", lambda a, b, c: a.reshape(2, 2, 8, 8).conv2d(b, c[0, :4]), 1),
    ("attention", lambda a, b, c: a.reshape(2, 8, 16).scaled_dot_product_attention(b.reshape(2, 8, 16),
                                                                                  c.reshape(2, 8, 16)), 3),
    ("rand", lambda a, b, c: Tensor.rand(16, 16) * a, 1),
])
def test_fusion_kernel_counts(name: str, build: Callable[..., Tensor], most: int) -> None:
    """At most `most` kernels under the default scheduler (inputs realized first), the same values as `unfused`."""
    rng = np.random.default_rng(5)
    a, b, c = (Tensor(array(rng, (16, 16))).realize() for _ in range(3))
    if name == "conv_bias":  # a (4, 2, 3, 3) weight, realized as a parameter is
        b = Tensor(array(rng, (4, 2, 3, 3))).realize()
    Tensor.manual_seed(0)
    with Tensor.scheduler("default"):
        fused = build(a, b, c)
        calls = fused.schedule().src
        values = fused.numpy()
    assert 1 <= len(calls) <= most, f"{name}: {len(calls)} kernels"
    Tensor.manual_seed(0)
    with Tensor.scheduler("unfused"):
        reference = build(a, b, c)
        assert len(reference.schedule().src) >= len(calls)
        np.testing.assert_allclose(values, reference.numpy(), rtol=1e-5, atol=1e-6)


# ---- random -------------------------------------------------------------------------------------------------------
def test_rand_is_reproducible_with_manual_seed(scheduler: str) -> None:
    Tensor.manual_seed(42)
    first, second = Tensor.rand(100).numpy(), Tensor.rand(3, 5).numpy()
    Tensor.manual_seed(42)
    np.testing.assert_array_equal(Tensor.rand(100).numpy(), first)
    np.testing.assert_array_equal(Tensor.rand(3, 5).numpy(), second)
    assert not np.array_equal(first[:15], second.reshape(-1)), "consecutive calls draw new numbers"
    Tensor.manual_seed(43)
    assert not np.array_equal(Tensor.rand(100).numpy(), first)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.float64])
def test_rand_is_roughly_uniform_and_randn_roughly_normal(scheduler: str, dtype: Any) -> None:
    Tensor.manual_seed(7)
    u = Tensor.rand(100, 100, dtype=dtype).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(np.histogram(u, bins=10, range=(0, 1))[0] - 1000).max() < 150
    z = Tensor.randn(10000, dtype=dtype).numpy().astype(np.float64)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert abs((np.abs(z) < 1).mean() - math.erf(1 / math.sqrt(2))) < 0.02


def test_a_buffer_whose_reads_simplify_away_is_still_a_parameter(scheduler: str) -> None:
    """The WHERE folds to its constant branch in codegen, so the kernel never loads x; the launch still passes x's
    buffer, and the program must still take it (its signature is the kernel's PARAMs as they arrived)."""
    x = Tensor([[1.0]])
    np.testing.assert_array_equal(Tensor.arange(1).reshape(1, 1).gt(5).where(x, 0.0).numpy(), [[0.0]])


def test_an_encoder_layer_forward_is_at_most_fourteen_kernels() -> None:
    """A BERT-style encoder layer (attention with a padding mask, two residual layernorms, a GELU feed-forward):
    issue 10's budget was 12 kernels, plus one per layernorm for its shift now; values agree with the
    unfused scheduler."""
    from plygrad.frontend import nn
    from plygrad.frontend.nn.state import get_parameters

    batch, length, hidden, heads = 2, 5, 16, 4
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((batch, length, hidden)).astype(np.float32)).realize()
    mask = Tensor(rng.random((batch, 1, 1, length)) > 0.2).realize()
    q, k, v, o = (nn.Linear(hidden, hidden) for _ in range(4))
    up, down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
    norm1, norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
    for layer in (q, k, v, o, up, down, norm1, norm2):
        for p in get_parameters(layer):
            p.realize()

    def forward() -> Tensor:
        def split(t: Tensor) -> Tensor:
            return t.reshape(batch, length, heads, hidden // heads).transpose(1, 2)
        att = split(q(x)).scaled_dot_product_attention(split(k(x)), split(v(x)), attn_mask=mask)
        h = norm1(x + o(att.transpose(1, 2).reshape(batch, length, hidden)))
        return norm2(h + down(up(h).gelu()))

    with Tensor.scheduler("default"):
        fused = forward()
        kernels = len([c for c in fused.schedule().src if c.src[0].op is Ops.SINK])
        values = fused.numpy()
    # 12, and one small kernel per layernorm for its shift (reduce.shifted_mean: the accuracy of far-from-0 inputs)
    assert kernels <= 14, f"{kernels} kernels"
    with Tensor.scheduler("unfused"):
        np.testing.assert_allclose(values, forward().numpy(), rtol=1e-5, atol=1e-5)


def test_an_mlp_adam_step_is_at_most_twenty_five_kernels() -> None:
    """Issue 10's budget for the MLP training step of bench/train_bench.py (forward, cross-entropy, backward, Adam
    on six parameters; tinygrad 0.14 needs 42): Adam's three updates of a parameter are one kernel (scheduler rule
    9). The losses and parameters after two steps equal the unfused scheduler's."""
    from plygrad.frontend.jit import TinyJit
    from plygrad.frontend.nn.optim import Adam
    from plygrad.runtime import GlobalCounters

    rng = np.random.default_rng(11)
    sizes = (24, 16, 16, 10)
    init = [rng.uniform(-0.3, 0.3, shape).astype(np.float32)
            for fan_in, fan_out in itertools.pairwise(sizes) for shape in ((fan_out, fan_in), (fan_out,))]
    x = Tensor(rng.standard_normal((8, sizes[0])).astype(np.float32)).realize()
    onehot = Tensor(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]).realize()

    def train(scheduler: str) -> tuple[list[float], list[np.ndarray], int]:
        with Tensor.scheduler(scheduler):
            params = [Tensor(w, requires_grad=True).realize() for w in init]
            opt = Adam(params, lr=1e-2)

            @TinyJit
            def step(x: Tensor, onehot: Tensor) -> Tensor:
                opt.zero_grad()
                h = x
                for i in range(0, len(params), 2):
                    h = h.linear(params[i].T, params[i + 1])
                    h = h.relu() if i < len(params) - 2 else h
                loss = -(h.log_softmax(1) * onehot).sum(1).mean()
                loss.backward()
                opt.step()
                return loss.realize()

            losses = []
            for _ in range(3):  # the third call replays the captured kernels
                before = GlobalCounters.kernel_count
                losses.append(step(x, onehot).item())
                launched = GlobalCounters.kernel_count - before
            return losses, [p.numpy() for p in params], launched

    losses, params, kernels = train("default")
    assert kernels <= 25, f"{kernels} kernels per step"
    unfused_losses, unfused_params, _ = train("unfused")
    np.testing.assert_allclose(losses, unfused_losses, rtol=1e-5)
    for got, want in zip(params, unfused_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
