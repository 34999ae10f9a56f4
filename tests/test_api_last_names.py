"""The last tinygrad 0.14 Tensor names (issue 13) against NumPy/PyTorch or an independent reference: `threefry`
(Random123's known answers and a NumPy Threefry-2x32), `contiguous_backward` (values, gradients, and the CONTIGUOUS
it puts in the backward graph), `from_url` over file:// URLs (no network), `const`, `ufix`, `usum`, `uprod`,
`max_shape`, `max_numel` and `schedule_linear`."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch_compare import compare

from plygrad.frontend import Tensor, dtypes, no_grad
from plygrad.frontend.nn.state import safe_load, safe_save
from plygrad.ir import DTypeError, Ops, UOp

RNG = np.random.default_rng(7)
MASK32 = np.uint64(0xFFFFFFFF)


# ---- threefry -----------------------------------------------------------------------------------------------------
def _rotl(v: np.ndarray[Any, Any], r: int) -> np.ndarray[Any, Any]:
    return ((v << np.uint32(r)) | (v >> np.uint32(32 - r))).astype(np.uint32)


def threefry_reference(counter: np.ndarray[Any, Any], key: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Threefry-2x32, 20 rounds, from the Random123 paper: word 0 is the low half of each uint64."""
    c0, c1 = (counter & MASK32).astype(np.uint32), (counter >> np.uint64(32)).astype(np.uint32)
    k0, k1 = (key & MASK32).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
    rotations = (13, 15, 26, 6, 17, 29, 16, 24)
    with np.errstate(over="ignore"):
        x0, x1 = c0 + ks[0], c1 + ks[1]
        for block in range(5):  # 5 blocks of 4 rounds, a key injection after each
            for r in rotations[(block % 2) * 4:(block % 2) * 4 + 4]:
                x0 = x0 + x1
                x1 = _rotl(x1, r) ^ x0
            x0 = x0 + ks[(block + 1) % 3]
            x1 = x1 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return (x1.astype(np.uint64) << np.uint64(32)) | x0.astype(np.uint64)


# Random123's known answers: (ctr0, ctr1, key0, key1) -> (out0, out1)
THREEFRY_KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


def _words(low: int, high: int) -> int:
    return (high << 32) | low


def test_threefry_gives_random123_known_answers() -> None:
    counters = np.array([_words(c0, c1) for (c0, c1, _, _), _ in THREEFRY_KAT], np.uint64)
    keys = np.array([_words(k0, k1) for (_, _, k0, k1), _ in THREEFRY_KAT], np.uint64)
    want = np.array([_words(o0, o1) for _, (o0, o1) in THREEFRY_KAT], np.uint64)
    np.testing.assert_array_equal(threefry_reference(counters, keys), want)  # the reference itself
    np.testing.assert_array_equal(Tensor(counters).threefry(Tensor(keys)).numpy(), want)


@pytest.mark.parametrize("key_kind", ["tensor", "broadcast", "int"])
def test_threefry_matches_the_reference(key_kind: str) -> None:
    counters = RNG.integers(0, 2**64, (3, 5), dtype=np.uint64)
    keys = RNG.integers(0, 2**64, (3, 5), dtype=np.uint64)
    if key_kind == "tensor":
        key: Tensor | int = Tensor(keys)
    elif key_kind == "broadcast":
        keys = keys[:, :1]
        key = Tensor(keys)
    else:
        key = int(keys[0, 0])
        keys = keys[:1, :1]
    got = Tensor(counters).threefry(key)
    assert got.dtype is dtypes.uint64 and got.shape == (3, 5)
    np.testing.assert_array_equal(got.numpy(), threefry_reference(counters, np.broadcast_to(keys, counters.shape)))


def test_threefry_wants_uint64() -> None:
    with pytest.raises(DTypeError, match=r"threefry: the counters must be uint64, got int32"):
        Tensor([1, 2]).threefry(3)
    with pytest.raises(DTypeError, match=r"threefry: the key must be uint64, got int64"):
        Tensor([1], dtype=dtypes.uint64).threefry(Tensor([3], dtype=dtypes.int64))
    with pytest.raises(ValueError, match=r"threefry: an int key must be in \[0, 2\*\*64\)"):
        Tensor([1], dtype=dtypes.uint64).threefry(-1)


# ---- contiguous_backward ------------------------------------------------------------------------------------------
def _has_contiguous(u: UOp) -> bool:
    return any(n.op is Ops.CONTIGUOUS for n in u.toposort)


def test_contiguous_backward_is_the_identity_with_torch_gradients() -> None:
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4,)).astype(np.float32)
    compare(lambda x, y: (x * y).contiguous_backward().exp() * x, lambda x, y: (x * y).exp() * x, a, b)


def test_contiguous_backward_puts_a_contiguous_in_the_gradient_only() -> None:
    x = Tensor(RNG.standard_normal((4, 4)).astype(np.float32), requires_grad=True)
    marked, plain = (x * 3).contiguous_backward(), x * 3
    assert not _has_contiguous(marked.uop)
    assert len(marked.schedule().src) == len(plain.schedule().src)  # the forward kernels are the same
    (g_marked,), (g_plain,) = ((y.exp() * y).sum().gradient(x) for y in (marked, plain))
    assert _has_contiguous(g_marked.uop) and not _has_contiguous(g_plain.uop)
    np.testing.assert_allclose(g_marked.numpy(), g_plain.numpy(), rtol=1e-6)


def test_contiguous_backward_is_not_a_gradient_stop() -> None:
    """x.detach() and x.contiguous_backward() beside each other stay two nodes: one stops, one passes gradient."""
    a = RNG.standard_normal(5).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    (g,) = (x.detach() * x.contiguous_backward()).sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), a, rtol=1e-6)


def test_marks_survive_a_realize_of_what_they_read() -> None:
    """Gradients through a realized tensor are taken through the graph that computed it; the detach() and
    contiguous_backward() nodes above it are rebuilt then, and must stay a stop and a mark (against torch)."""
    a = RNG.standard_normal(5).astype(np.float32)
    x, tx = Tensor(a, requires_grad=True), torch.from_numpy(a).requires_grad_(True)
    y, ty = (x * 2).realize(), tx * 2
    (g_detach,) = (y.detach() * y).sum().gradient(x)
    (g_mark,) = (y.contiguous_backward() * y).sum().gradient(x)
    (t_detach,) = torch.autograd.grad((ty.detach() * ty).sum(), tx, retain_graph=True)
    (t_mark,) = torch.autograd.grad((ty * ty).sum(), tx)
    assert _has_contiguous(g_mark.uop)
    np.testing.assert_allclose(g_detach.numpy(), t_detach.numpy(), rtol=1e-6)
    np.testing.assert_allclose(g_mark.numpy(), t_mark.numpy(), rtol=1e-6)


def test_contiguous_backward_under_no_grad_records_nothing() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    with no_grad():
        y = x.contiguous_backward()
    assert not y.requires_grad
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])


# ---- from_url -----------------------------------------------------------------------------------------------------
def test_from_url_reads_a_file_url(tmp_path: Path) -> None:
    raw = RNG.integers(0, 256, 64, dtype=np.uint8).tobytes()
    path = tmp_path / "blob.bin"
    path.write_bytes(raw)
    t = Tensor.from_url(path.as_uri())
    assert t.dtype is dtypes.uint8 and t.shape == (64,)
    np.testing.assert_array_equal(t.numpy(), np.frombuffer(raw, np.uint8))
    as_floats = Tensor.from_url(path.as_uri(), dtype="float32")
    np.testing.assert_array_equal(as_floats.numpy(), np.frombuffer(raw, np.float32))


def test_from_url_gunzips(tmp_path: Path) -> None:
    values = np.arange(10, dtype=np.int16)
    path = tmp_path / "blob.gz"
    path.write_bytes(gzip.compress(values.tobytes()))
    np.testing.assert_array_equal(Tensor.from_url(path.as_uri(), gunzip=True, dtype=dtypes.int16).numpy(), values)
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"abcd")
    with pytest.raises(ValueError, match=r"gunzip=True but the 4 bytes at .* are not gzip data"):
        Tensor.from_url(plain.as_uri(), gunzip=True)


def test_from_url_feeds_safe_load(tmp_path: Path) -> None:
    weights = RNG.standard_normal((3, 2)).astype(np.float32)
    path = tmp_path / "model.safetensors"
    safe_save({"w": Tensor(weights)}, path)
    np.testing.assert_array_equal(safe_load(Tensor.from_url(path.as_uri()))["w"].numpy(), weights)


def test_from_url_errors_name_the_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"from_url: 'ftp://host/x' has scheme 'ftp'; use one of http://"):
        Tensor.from_url("ftp://host/x")
    with pytest.raises(ValueError, match=r"has scheme 'none'"):
        Tensor.from_url("relative/path.bin")
    missing = (tmp_path / "missing.bin").as_uri()
    with pytest.raises(OSError, match=r"from_url: could not read 'file://.*missing\.bin'"):
        Tensor.from_url(missing)


# ---- const, ufix, usum, uprod -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [True, 3, -2.5])
def test_const_is_a_0d_constant_without_memory(value: bool | float) -> None:
    t = Tensor.const(value)
    assert t.shape == () and not t.inputs
    assert t.dtype is dtypes.from_py(value)
    assert t.item() == value
    assert Tensor.const(value, "float16").dtype is dtypes.float16
    with pytest.raises(TypeError, match="const: expected a Tensor or a Python bool/int/float, got list"):
        Tensor.const([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize(("dtype", "scalar"), [("float16", 2), ("int32", 2.5), ("bool", 3), ("int8", 7),
                                               ("float32", True)])
def test_ufix_gives_the_scalar_the_dtype_arithmetic_gives_it(dtype: str, scalar: bool | float) -> None:
    t = Tensor(np.ones(3, dtype=np.dtype(dtype)))
    fixed = t.ufix(scalar)
    want = torch.ones(3, dtype=getattr(torch, dtype)) + scalar
    assert fixed.shape == () and not fixed.inputs
    assert fixed.dtype is (t + scalar).dtype
    assert fixed.dtype.is_float == want.dtype.is_floating_point
    assert fixed.item() == scalar
    assert t.ufix(t) is t


def test_usum_and_uprod_match_torch_with_gradients() -> None:
    a, b, c = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 3), (3,), (2, 1)))
    compare(lambda x, y, z: x.usum(y, z, 1.5), lambda x, y, z: x + y + z + 1.5, a, b, c)
    compare(lambda x, y, z: x.uprod([y, z, 2.0]), lambda x, y, z: x * y * z * 2.0, a, b, c)
    assert Tensor([1.0]).usum().item() == 1.0


@pytest.mark.parametrize("op", ["usum", "uprod"])
def test_usum_and_uprod_of_bool_are_or_and_and(op: str) -> None:
    p, q = RNG.integers(0, 2, (2, 4)).astype(bool)
    want = np.logical_or(p, q) if op == "usum" else np.logical_and(p, q)
    got = getattr(Tensor(p), op)(Tensor(q))
    assert got.dtype is dtypes.bool
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(getattr(Tensor(p), op)([Tensor(q), True]).numpy(),
                                  want if op == "uprod" else np.ones_like(p))


def test_usum_of_ints_promotes_like_torch() -> None:
    a = RNG.integers(-5, 5, 4).astype(np.int32)
    got = Tensor(a).usum(Tensor(a.astype(np.int64)), 0.5)
    want = torch.from_numpy(a) + torch.from_numpy(a.astype(np.int64)) + 0.5
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(TypeError, match="usum: expected Tensors or Python bool/int/float"):
        Tensor(a).usum("1")  # type: ignore[arg-type]


# ---- max_shape, max_numel, schedule_linear ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (0,), (2, 3, 4)])
def test_max_shape_and_max_numel_are_the_concrete_shape(shape: tuple[int, ...]) -> None:
    t, want = Tensor.zeros(shape), torch.zeros(shape)
    assert t.max_shape == tuple(want.shape)
    assert t.max_numel() == want.numel()


def test_schedule_linear_is_the_schedule_without_running_it() -> None:
    x = Tensor(RNG.standard_normal((4, 4)).astype(np.float32))
    y = (x @ x).relu().contiguous() + 1
    linear = y.schedule_linear()
    assert linear.op is Ops.LINEAR
    assert len(linear.src) == len(y.schedule().src) >= 2
    assert not y._is_realized()
    assert len(y.schedule_linear(x * 2).src) == len(y.schedule(x * 2).src)
