"""Matrix helpers shared by the reference groups and models (NumPy + autograd).

Every function works on stacks of matrices: leading axes are batch, the last two are the
matrix, ``x: [..., n, n]``. Functions on the differentiable path use ``autograd.numpy`` so the
models can be differentiated end to end.

Mirror: ``manifold_impl/linalg.py`` holds the same names for torch tensors.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import scipy.linalg
from autograd.extend import defvjp, primitive


def dagger(x):
    """Conjugate transpose of the last two axes, ``x^H``. ``x: [..., n, m] -> [..., m, n]``."""
    return anp.conj(anp.swapaxes(x, -1, -2))


def skew(m):
    """Conjugation-aware skew part ``(m - m^H) / 2``. For real ``m`` this is ``(m - m^T) / 2``."""
    return 0.5 * (m - dagger(m))


def diagonal(a):
    """Diagonal entries ``[..., n, n] -> [..., n]``.

    Written as a masked sum because autograd 1.9.1's VJP of ``np.diagonal`` drops imaginary
    parts and supports only some axis orders.
    """
    return anp.sum(a * anp.eye(a.shape[-1]), axis=-1)


def frobenius_inner(a, b):
    """``<a, b> = Re tr(a^H b)`` over the last two axes. ``a, b: [..., n, n] -> [...]``."""
    return anp.sum(anp.real(anp.conj(a) * b), axis=(-2, -1))


def realvec(x):
    """Real coordinates of a matrix: its n² entries row-major, then (complex x) their imaginary parts.

    ``x: [..., n, n] -> [..., n²]`` (real) or ``[..., 2n²]`` (complex).
    """
    flat = anp.reshape(x, x.shape[:-2] + (-1,))
    if anp.iscomplexobj(x):
        return anp.concatenate([anp.real(flat), anp.imag(flat)], axis=-1)
    return flat


@primitive
def expm(a):
    """Matrix exponential ``exp(a) = sum_k a^k / k!`` of ``a: [..., n, n]`` (scipy.linalg.expm).

    Differentiable for autograd through the Fréchet derivative L(a, e) = d/ds exp(a + s e)|_{s=0}.
    In autograd's (non-conjugating) convention the vector-Jacobian product of a cotangent g is
    the adjoint of e ↦ L(a, e) under <x, y> = Σ x_ij y_ij, which is ``g ↦ L(a^T, g)``: a plain
    transpose, not the conjugate transpose, also for complex ``a``.
    """
    return scipy.linalg.expm(a)


def _expm_vjp(ans, a):
    def vjp(g):
        a_t = np.swapaxes(a, -1, -2)
        out = np.empty(np.broadcast_shapes(a.shape, np.shape(g)), dtype=np.result_type(a, g))
        for index in np.ndindex(out.shape[:-2]):
            out[index] = scipy.linalg.expm_frechet(a_t[index], g[index], compute_expm=False)
        return out

    return vjp


defvjp(expm, _expm_vjp)


def polar(m):
    """Unitary polar factor ``u v^H`` of ``m = u s v^H`` (closest unitary matrix in Frobenius norm)."""
    u, _, vh = np.linalg.svd(m)
    return u @ vh


def special_polar(m):
    """Closest special orthogonal matrix: ``u diag(1, .., 1, det(u v^T)) v^T`` for real ``m``."""
    u, _, vh = np.linalg.svd(m)
    sign = np.sign(np.linalg.det(u @ vh))
    u = u.copy()
    u[..., :, -1] *= sign[..., None]  # flip the direction of the smallest singular value
    return u @ vh


def phase_fixed_qr(g):
    """Haar-distributed unitary/orthogonal factor of a Gaussian matrix ``g: [..., n, n]``.

    ``g = q r``; multiplying q's columns by the phases of diag(r) makes the factorization unique,
    which is what makes ``q`` Haar distributed (Mezzadri 2007).
    """
    q, r = np.linalg.qr(g)
    d = np.diagonal(r, axis1=-2, axis2=-1)
    phase = d / np.abs(d)
    return q * phase[..., None, :]


def sum_zero_basis(n):
    """Orthonormal basis of {d ∈ ℝⁿ : Σ d = 0} as the columns of an ``[n, n-1]`` matrix.

    Column k-1 (k = 1..n-1) is (1, .., 1, -k, 0, .., 0) / sqrt(k (k + 1)) with k ones
    (the Helmert basis); used for the diagonal of su(n).
    """
    basis = np.zeros((n, n - 1))
    for k in range(1, n):
        basis[:k, k - 1] = 1.0
        basis[k, k - 1] = -k
        basis[:, k - 1] /= np.sqrt(k * (k + 1))
    return basis


def to_blocks(x, block):
    """Diagonal blocks of a block-diagonal matrix. ``x: [..., k·b, k·b] -> [..., k, b, b]``."""
    k = x.shape[-1] // block
    return np.stack([x[..., j * block:(j + 1) * block, j * block:(j + 1) * block] for j in range(k)], axis=-3)


def from_blocks(blocks):
    """Block-diagonal matrix from its blocks. ``blocks: [..., k, b, b] -> [..., k·b, k·b]``."""
    *batch, k, b, _ = blocks.shape
    out = np.zeros((*batch, k * b, k * b), dtype=blocks.dtype)
    for j in range(k):
        out[..., j * b:(j + 1) * b, j * b:(j + 1) * b] = blocks[..., j, :, :]
    return out


def default_atol(dtype, n):
    """Default tolerance for group membership: ``100 · n · eps(dtype)``."""
    return 100.0 * n * float(np.finfo(np.dtype(dtype)).eps)
