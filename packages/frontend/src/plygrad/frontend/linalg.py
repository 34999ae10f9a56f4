"""Matrix decompositions built from tensor ops: Householder QR, one-sided Jacobi SVD, Newton-Schulz iteration.

Everything here is an ordinary lazy graph of matmuls, reductions and elementwise ops: it runs on every backend,
batches over leading axes (`(..., m, n)`), fuses like any other graph and is differentiable by autograd. The work
is fixed by the shape alone (no convergence test reads values back), as in tinygrad. How each decomposition is
built: docs/frontend.md, "How the decompositions work".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from plygrad.frontend import core
from plygrad.ir import ShapeError

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

# Sweeps of one-sided Jacobi: convergence is quadratic once the columns are nearly orthogonal, and this many sweeps
# take float32 matrices of the sizes a frontend decomposes (up to a few hundred columns) to rounding level.
JACOBI_SWEEPS = 8


def _matrix_shape(x: Tensor, op: str) -> tuple[tuple[int, ...], int, int]:
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected a matrix or a batch of matrices (at least 2 axes), got shape {x.shape}")
    return x.shape[:-2], x.shape[-2], x.shape[-1]


def _float_input(x: Tensor) -> Tensor:
    return core.float_input(x)


def _eye(x: Tensor, n: int, batch: tuple[int, ...]) -> Tensor:
    """The n x n identity in x's dtype and device, broadcast over `batch`."""
    return x.eye(n, dtype=x.dtype, device=x.device)._broadcast_to((*batch, n, n))


def qr(x: Tensor) -> tuple[Tensor, Tensor]:
    """The complete QR factorization of the last two axes: Q (..., m, m) orthogonal, R (..., m, n) upper
    triangular, with Q @ R == x (see the module docstring)."""
    a = _float_input(x)
    batch, m, n = _matrix_shape(a, "qr")
    r, q = a, _eye(a, m, batch)
    rows = core.int_range(a, m)
    for k in range(min(m - 1, n)):
        below = rows.ge(k)
        column = below.where(r[..., k], 0.0)  # (..., m): column k from the diagonal down
        norm = column.square().sum(-1, keepdim=True).sqrt()
        pivot = column[..., k:k + 1]
        sign = pivot.lt(0.0).where(-1.0, 1.0)
        v = rows.eq(k).where(column.add(sign.mul(norm)), column)  # the Householder vector, zero above row k
        length2 = v.square().sum(-1, keepdim=True)
        # beta = 2 / |v|^2, and no reflection at all when the column is already zero (|v| = 0)
        beta = length2.ne(0.0).where(length2.add(length2.eq(0.0)).reciprocal().mul(2.0), 0.0)
        v_col = v.unsqueeze(-1)  # (..., m, 1)
        r = r.sub(v_col.mul(beta.unsqueeze(-1)).matmul(v_col.transpose(-1, -2).matmul(r)))
        q = q.sub(q.matmul(v_col).matmul(v_col.mul(beta.unsqueeze(-1)).transpose(-1, -2)))
    return q, r.triu()  # below the diagonal only rounding is left: exact zeros, as LAPACK's R


def _round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint column pairs that together pair every two columns once (the circle method; an odd n
    gets a dummy player, and its partner sits the round out)."""
    players = list(range(n + n % 2))
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([(min(p), max(p)) for p in pairs if max(p) < n])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def _selectors(x: Tensor, n: int, pairs: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor, Tensor]:
    """Constant 0/1 matrices picking a round's first columns (n, h), second columns (n, h), and keeping the
    unpaired columns (n, n)."""
    first = np.zeros((n, len(pairs)), np.float64)
    second = np.zeros((n, len(pairs)), np.float64)
    keep = np.eye(n)
    for i, (a, b) in enumerate(pairs):
        first[a, i], second[b, i] = 1.0, 1.0
        keep[a, a] = keep[b, b] = 0.0
    as_tensor = (core.from_host(x, m, x.dtype) for m in (first, second, keep))
    sel_a, sel_b, kept = as_tensor
    return sel_a, sel_b, kept


def _jacobi_round(uv: Tensor, n: int, sel_a: Tensor, sel_b: Tensor, kept: Tensor) -> Tensor:
    """One round of disjoint Jacobi rotations on `uv`, U (first n rows) stacked on V (last n rows): each pair (a, b)
    of U's columns is made orthogonal, and the same rotation turns V's columns (one update for both)."""
    pa, pb = uv.matmul(sel_a), uv.matmul(sel_b)  # (..., 2n, h): the paired columns
    ua, ub = pa[..., :n, :], pb[..., :n, :]
    alpha, beta = ua.square().sum(-2, keepdim=True), ub.square().sum(-2, keepdim=True)
    gamma = ua.mul(ub).sum(-2, keepdim=True)
    rotate = gamma.ne(0.0)
    zeta = beta.sub(alpha).div(rotate.where(gamma, 1.0).mul(2.0))
    sign = zeta.lt(0.0).where(-1.0, 1.0)
    t = rotate.where(sign.div(zeta.abs().add(zeta.square().add(1.0).sqrt())), 0.0)
    c = t.square().add(1.0).rsqrt()
    s = c.mul(t)
    new_a, new_b = c.mul(pa).sub(s.mul(pb)), s.mul(pa).add(c.mul(pb))
    return uv.matmul(kept).add(new_a.matmul(sel_a.T)).add(new_b.matmul(sel_b.T))


def _svd_tall(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """SVD of (..., m, n) with m >= n: QR, then one-sided Jacobi on the n x n triangle."""
    batch, m, n = _matrix_shape(a, "svd")
    q, r = qr(a)
    uv = r[..., :n, :].cat(_eye(a, n, batch), dim=-2)
    rounds = [_selectors(a, n, pairs) for pairs in _round_robin(n) if pairs]
    for _ in range(JACOBI_SWEEPS if n > 1 else 0):
        for sel_a, sel_b, kept in rounds:
            uv = _jacobi_round(uv, n, sel_a, sel_b, kept)
    u, v = uv[..., :n, :], uv[..., n:, :]
    norms = u.square().sum(-2).sqrt()  # (..., n)
    s, order = norms.sort(-1, descending=True)
    columns = order.unsqueeze(-2)._broadcast_to((*batch, n, n))
    u = u.gather(-1, columns).div(s.ne(0.0).where(s, 1.0).unsqueeze(-2))
    v = v.gather(-1, columns)
    left = q[..., :, :n].matmul(u)
    if full_matrices and m > n:
        left = left.cat(q[..., :, n:], dim=-1)
    return left, s, v.transpose(-1, -2)


def svd(x: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """`(U, S, Vh)` with x == U @ diag(S) @ Vh and S descending (see the module docstring). With
    `full_matrices` U is (..., m, m) and Vh (..., n, n); without, (..., m, k) and (..., k, n), k = min(m, n)."""
    a = _float_input(x)
    _, m, n = _matrix_shape(a, "svd")
    if m >= n:
        return _svd_tall(a, full_matrices)
    u, s, vh = _svd_tall(a.transpose(-1, -2), full_matrices)
    return vh.transpose(-1, -2), s, u.transpose(-1, -2)


def newton_schulz(x: Tensor, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Tensor:
    """`steps` iterations of G <- sum_i params[i] * (G @ G^Tensor)^i @ G, from G = x / (|x|_F + eps) (tinygrad's
    `newton_schulz`). A tall input is iterated transposed, so G @ G^Tensor is the smaller Gram matrix."""
    _matrix_shape(x, "newton_schulz")
    if steps < 0 or not params:
        raise ValueError(f"newton_schulz: need steps >= 0 and at least one coefficient, got steps={steps}, "
                         f"params={tuple(params)}")
    if x.shape[-2] > x.shape[-1]:
        return newton_schulz(x.transpose(-1, -2), steps, params, eps).transpose(-1, -2)
    g = x.div(x.square().sum((-2, -1), keepdim=True).sqrt().add(eps))
    for _ in range(steps):
        gram = g.matmul(g.transpose(-1, -2))
        term, total = g, g.mul(params[0])
        for p in params[1:]:
            term = gram.matmul(term)
            total = total.add(term.mul(p))
        g = total
    return g
