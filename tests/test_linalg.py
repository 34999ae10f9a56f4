"""`Tensor.qr`, `Tensor.svd` and `Tensor.newton_schulz` against numpy.linalg (up to the sign conventions of each
column), plus reconstruction, orthogonality and gradients against PyTorch where the factor is unique."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_compare import compare

from plygrad.frontend import Tensor
from plygrad.ir import ShapeError

FEW = settings(max_examples=6, deadline=None)
Array = np.ndarray[Any, Any]
MATRIX_SHAPES = [(3, 3), (5, 3), (3, 5), (4, 1), (1, 4), (2, 4, 3), (6, 6)]


def _random(shape: tuple[int, ...], seed: int = 0) -> Array:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _column_signs(a: Array, b: Array) -> Array:
    """+1/-1 per column of the last axis making a's columns point like b's (the sign freedom of QR and SVD)."""
    dots = np.einsum("...ij,...ij->...j", a, b)
    return np.where(dots < 0, -1.0, 1.0)[..., None, :]


def _assert_orthonormal_columns(q: Array, atol: float = 1e-4) -> None:
    eye = np.broadcast_to(np.eye(q.shape[-1]), (*q.shape[:-2], q.shape[-1], q.shape[-1]))
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, eye, atol=atol)


@pytest.mark.parametrize("shape", MATRIX_SHAPES)
def test_qr_matches_numpy_complete_up_to_signs(shape: tuple[int, ...]) -> None:
    a = _random(shape)
    q, r = Tensor(a).qr()
    qn, rn = np.linalg.qr(a.astype(np.float64), mode="complete")
    assert q.shape == qn.shape and r.shape == rn.shape
    got_q, got_r = q.numpy(), r.numpy()
    signs = _column_signs(got_q, qn)
    np.testing.assert_allclose(got_q * signs, qn, atol=1e-4)
    np.testing.assert_allclose(got_r * np.swapaxes(signs, -1, -2), rn, atol=1e-4)
    np.testing.assert_allclose(got_q @ got_r, a, atol=1e-4)
    _assert_orthonormal_columns(got_q)
    assert np.all(np.tril(got_r, -1) == 0), "R must be exactly upper triangular"


@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**16))
@FEW
def test_qr_reconstructs_any_shape(m: int, n: int, seed: int) -> None:
    a = _random((m, n), seed)
    q, r = (t.numpy() for t in Tensor(a).qr())
    np.testing.assert_allclose(q @ r, a, atol=1e-4)
    _assert_orthonormal_columns(q)


def test_qr_of_rank_deficient_and_zero_matrices() -> None:
    for a in (np.zeros((3, 3), np.float32), np.array([[1, 2], [2, 4], [3, 6]], np.float32)):
        q, r = (t.numpy() for t in Tensor(a).qr())
        assert np.all(np.isfinite(q)) and np.all(np.isfinite(r))
        np.testing.assert_allclose(q @ r, a, atol=1e-5)
        _assert_orthonormal_columns(q)


def test_qr_gradient_matches_torch() -> None:
    # square full-rank input: torch's reduced QR is the complete one; align signs on R's diagonal on both sides
    a = _random((4, 4), 3) + 4 * np.eye(4, dtype=np.float32)

    def positive(qr: tuple[Any, Any], sign_of: Any) -> tuple[Any, Any]:
        q, r = qr
        d = sign_of(r)
        return q * d.unsqueeze(-2), r * d.unsqueeze(-1)

    compare(lambda x: positive(x.qr(), lambda r: r.diagonal().sign()),
            lambda x: positive(torch.linalg.qr(x), lambda r: torch.diagonal(r).sign()), a, atol=1e-4, grad_atol=1e-3)


@pytest.mark.parametrize("shape", MATRIX_SHAPES)
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_matches_numpy(shape: tuple[int, ...], full_matrices: bool) -> None:
    a = _random(shape, 1)
    u, s, vh = (t.numpy() for t in Tensor(a).svd(full_matrices))
    un, sn, vhn = np.linalg.svd(a.astype(np.float64), full_matrices=full_matrices)
    assert (u.shape, s.shape, vh.shape) == (un.shape, sn.shape, vhn.shape)
    np.testing.assert_allclose(s, sn, rtol=1e-4, atol=1e-5)
    k = s.shape[-1]
    signs = _column_signs(u[..., :k], un[..., :k])  # singular values are distinct here: vectors unique up to sign
    np.testing.assert_allclose(u[..., :k] * signs, un[..., :k], atol=1e-3)
    np.testing.assert_allclose(vh[..., :k, :] * np.swapaxes(signs, -1, -2), vhn[..., :k, :], atol=1e-3)
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-4)
    _assert_orthonormal_columns(u)
    _assert_orthonormal_columns(np.swapaxes(vh, -1, -2))


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**16))
@FEW
def test_svd_singular_values_and_reconstruction(m: int, n: int, seed: int) -> None:
    a = _random((m, n), seed)
    u, s, vh = (t.numpy() for t in Tensor(a).svd(full_matrices=False))
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose((u * s[None, :]) @ vh, a, atol=1e-4)


def test_svd_of_a_rank_deficient_matrix_reconstructs() -> None:
    a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 0.5]).astype(np.float32)
    u, s, vh = (t.numpy() for t in Tensor(a).svd())
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-5)
    np.testing.assert_allclose((u[:, :3] * s) @ vh, a, atol=1e-5)


def test_svd_singular_value_gradient_matches_torch() -> None:
    a = _random((4, 3), 5)
    compare(lambda x: x.svd(full_matrices=False)[1], torch.linalg.svdvals, a, atol=1e-4,
            grad_atol=1e-3)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2), (2, 3, 3)])
def test_newton_schulz_matches_the_numpy_iteration(shape: tuple[int, ...]) -> None:
    a = _random(shape, 2)
    params = (3.4445, -4.7750, 2.0315)  # Muon's quintic
    transpose = shape[-2] > shape[-1]
    g = np.swapaxes(a, -1, -2).astype(np.float64) if transpose else a.astype(np.float64)
    g = g / (np.sqrt((g**2).sum(axis=(-2, -1), keepdims=True)) + 1e-7)
    for _ in range(5):
        gram = g @ np.swapaxes(g, -1, -2)
        g = params[0] * g + params[1] * gram @ g + params[2] * gram @ gram @ g
    want = np.swapaxes(g, -1, -2) if transpose else g
    np.testing.assert_allclose(Tensor(a).newton_schulz(5, params).numpy(), want, rtol=1e-4, atol=1e-4)


def test_newton_schulz_gradient_matches_torch() -> None:
    a = _random((3, 4), 4)

    def torch_ns(x: torch.Tensor) -> torch.Tensor:
        g = x / (x.square().sum().sqrt() + 1e-7)
        for _ in range(2):
            g = 2 * g - 1.5 * (g @ g.T) @ g + 0.5 * (g @ g.T) @ (g @ g.T) @ g
        return g

    compare(lambda x: x.newton_schulz(2, (2, -1.5, 0.5)), torch_ns, a, atol=1e-4, grad_atol=1e-3)


@pytest.mark.parametrize("op", ["qr", "svd"])
def test_decompositions_need_a_matrix(op: str) -> None:
    with pytest.raises(ShapeError, match=f"{op}: expected a matrix"):
        getattr(Tensor([1.0, 2.0]), op)()
