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


def polar_newton_schulz(m, steps):
    """The unitary polar factor of ``m: [..., n, n]`` by ``steps`` Newton–Schulz iterations
    P ← P·(3I − PᴴP)/2 from P = m. Each singular value σ of m goes to σ(3 − σ²)/2 per step, so the
    iteration converges, quadratically near 1, where every σ lies in (0, √3); the caller picks
    ``steps`` (``reference.config.forget_steps``)."""
    eye = np.eye(m.shape[-1])
    p = m
    for _ in range(steps):
        p = p @ (1.5 * eye - 0.5 * (dagger(p) @ p))
    return p


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


def special_unitary_polar(m):
    """Closest special unitary matrix to a complex ``m: [..., n, n]`` in Frobenius norm (forward only).

    With m = W diag(σ) V^H (σ descending), ‖X − m‖² = ‖m‖² + n − 2 Re tr(X^H m), and over
    X ∈ SU(n) the maximum of Re tr(X^H m) is attained at X = W diag(e^{iθ}) V^H (stationarity on
    the coset {Y = W^H X V : det Y = det(W^H V)} forces diag(σ) Y = H + iλI with H² = σ² − λ²,
    diagonal), so the problem is over the phases θ ∈ ℝⁿ:

        maximize Σ_j σ_j cos θ_j   subject to   Σ_j θ_j ≡ τ (mod 2π),   τ = −arg det(W V^H).

    The Lagrange condition is σ_j sin θ_j = λ for every j. A maximum has cos θ_j ≥ 0 except
    possibly for j = n−1 (the smallest σ; two negative cosines, or one at a larger σ, fail the
    second-order test), so with t = θ_{n−1} and ρ_j = σ_{n−1}/σ_j ≤ 1 (ρ_j = 0 where σ_j = 0):

        θ_j = arcsin(ρ_j sin t)  (j < n−1),      Θ(t) = t + Σ_{j<n−1} arcsin(ρ_j sin t).

    Θ is odd, strictly increasing on [0, π/2], single-peaked on [π/2, π] with Θ(π) = π, and the
    objective along the curve falls with |Θ| (dF/dΘ = −λ); so the closest element takes τ in
    [−π, π] and the t ∈ [0, π] with sign(τ)·t solving Θ(t) = |τ| at the first crossing, where
    {t ∈ [0, π] : Θ(t) < |τ|} = [0, t*) makes bisection exact: a step per bit of the mantissa.
    θ_{n−1} is then set to τ − Σ_{j<n−1} θ_j, so det X = 1 to rounding whatever the bisection left.
    """
    w, s, vh = np.linalg.svd(m)
    target = -np.angle(np.linalg.det(w @ vh))  # [...], in [−π, π]
    rho = np.where(s > 0, s[..., -1:] / np.where(s > 0, s, 1.0), 0.0)[..., :-1]  # [..., n−1]
    goal = np.abs(target)[..., None]

    def total_phase(t):  # Θ(t), t: [..., 1]
        return t + np.sum(np.arcsin(rho * np.sin(t)), axis=-1, keepdims=True)

    low, high = np.zeros_like(goal), np.full_like(goal, np.pi)
    for _ in range(_bisection_steps(s.dtype)):
        middle = 0.5 * (low + high)
        below = total_phase(middle) < goal
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    others = np.arcsin(rho * np.sin(np.sign(target)[..., None] * 0.5 * (low + high)))  # [..., n−1]
    theta = np.concatenate([others, target[..., None] - np.sum(others, axis=-1, keepdims=True)], axis=-1)
    return (w * np.exp(1j * theta)[..., None, :]) @ vh


def _bisection_steps(dtype):
    """Halvings of [0, π] down to the rounding of ``dtype``: mantissa bits + 3."""
    return int(np.ceil(-np.log2(np.finfo(dtype).eps))) + 3


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
