"""Matrix helpers for the torch groups and models. Mirror of ``reference/linalg.py``.

Shapes as in the reference: ``x: [..., n, n]`` with leading batch axes.
"""

from __future__ import annotations

import math

import torch


def dagger(x: torch.Tensor) -> torch.Tensor:
    """``x^H`` of the last two axes."""
    return x.transpose(-1, -2).conj()


def skew(m: torch.Tensor) -> torch.Tensor:
    """``(m - m^H) / 2``."""
    return 0.5 * (m - dagger(m))


def diagonal(a: torch.Tensor) -> torch.Tensor:
    """Diagonal entries ``[..., n, n] -> [..., n]``."""
    return torch.diagonal(a, dim1=-2, dim2=-1)


def frobenius_inner(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``Re tr(a^H b)`` over the last two axes."""
    return (a.conj() * b).real.sum(dim=(-2, -1))


def realvec(x: torch.Tensor) -> torch.Tensor:
    """Entries row-major, then (complex x) their imaginary parts: ``[..., n²]`` or ``[..., 2n²]``."""
    flat = x.flatten(-2)
    if x.is_complex():
        return torch.cat([flat.real, flat.imag], dim=-1)
    return flat


# Taylor degree per precision with ‖a / 2^s‖₁ ≤ 1: the remainder is below 1/(m+1)!, under the
# unit roundoff (float64: 1/19! ≈ 8e-18; float32: 1/11! ≈ 2.5e-8).
_TAYLOR_DEGREE = {torch.float64: 18, torch.float32: 10}


def expm(a: torch.Tensor) -> torch.Tensor:
    """Matrix exponential of ``a: [..., n, n]`` by scaling and squaring a Taylor polynomial.

    Each matrix is scaled by its own 2^-s so that ‖a 2^-s‖₁ ≤ 1, the degree-m Taylor polynomial
    is evaluated by Paterson–Stockmeyer (about 2√m products), then squared s times.
    Differentiable by autograd through the products.

    Why not ``torch.linalg.matrix_exp``: in torch 2.13, float64, a batch of shape () or (1,) of
    norm ≈ 0.04 loses five digits (errors ≈ 1e-11 instead of 1e-16, while batches of two and
    more are exact); the group contract tests batch shapes () and (1,) against a Taylor oracle.
    """
    real = a.real.dtype if a.is_complex() else a.dtype
    degree = _TAYLOR_DEGREE[real]
    norm = a.abs().sum(dim=-2).amax(dim=-1)  # ‖a‖₁ per matrix, [...]
    squarings = torch.ceil(torch.log2(norm.clamp(min=1.0))).to(torch.int64)  # [...]
    scaled = a * torch.pow(2.0, -squarings.to(real))[..., None, None]
    result = _taylor(scaled, degree)
    for j in range(int(squarings.max()) if squarings.numel() else 0):
        result = torch.where((j < squarings)[..., None, None], result @ result, result)
    return result


def _taylor(a: torch.Tensor, degree: int) -> torch.Tensor:
    """Σ_{k ≤ degree} a^k / k! by Paterson–Stockmeyer with blocks of q = ⌈√degree⌉ powers."""
    q = math.ceil(math.sqrt(degree))
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(a)
    powers = [eye, a]  # a^0 .. a^q
    for _ in range(2, q + 1):
        powers.append(powers[-1] @ a)
    coefficients = [1.0 / math.factorial(k) for k in range(degree + 1)]
    result = None
    for start in reversed(range(0, degree + 1, q)):  # Horner in a^q over blocks of q coefficients
        block = sum(coefficients[start + i] * powers[i] for i in range(min(q, degree + 1 - start)))
        result = block if result is None else block + result @ powers[q]
    return result


def polar(m: torch.Tensor) -> torch.Tensor:
    """Unitary polar factor ``u v^H`` of ``m = u s v^H``."""
    u, _, vh = torch.linalg.svd(m)
    return u @ vh


def special_polar(m: torch.Tensor) -> torch.Tensor:
    """Closest special orthogonal matrix ``u diag(1, .., 1, det(u v^T)) v^T`` of a real ``m``."""
    u, _, vh = torch.linalg.svd(m)
    sign = torch.sign(torch.linalg.det(u @ vh))
    u = torch.cat([u[..., :, :-1], u[..., :, -1:] * sign[..., None, None]], dim=-1)
    return u @ vh


def phase_fixed_qr(g: torch.Tensor) -> torch.Tensor:
    """Haar factor q·diag(phase(diag r)) of the QR decomposition of a Gaussian ``g``."""
    q, r = torch.linalg.qr(g)
    d = torch.diagonal(r, dim1=-2, dim2=-1)
    return q * (d / d.abs()).unsqueeze(-2)


def sum_zero_basis(n: int, dtype=None, device=None) -> torch.Tensor:
    """Helmert basis of {d : Σ d = 0} as columns of ``[n, n-1]`` (see the reference)."""
    k = torch.arange(1, n, dtype=dtype, device=device)  # [n-1]
    rows = torch.arange(n, dtype=dtype, device=device)[:, None]  # [n, 1]
    basis = (rows < k).to(dtype) - k * (rows == k).to(dtype)
    return basis / torch.sqrt(k * (k + 1))


def to_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """``[..., k·b, k·b] -> [..., k, b, b]`` diagonal blocks."""
    k = x.shape[-1] // block
    split = x.reshape(*x.shape[:-2], k, block, k, block)
    return torch.diagonal(split, dim1=-4, dim2=-2).permute(*range(x.dim() - 2), -1, -3, -2).contiguous()


def from_blocks(blocks: torch.Tensor) -> torch.Tensor:
    """``[..., k, b, b] -> [..., k·b, k·b]`` block-diagonal matrix."""
    *batch, k, b, _ = blocks.shape
    eye = torch.eye(k, dtype=blocks.dtype, device=blocks.device)
    out = blocks.unsqueeze(-2) * eye[:, None, :, None]  # [..., k, b, k, b]
    return out.reshape(*batch, k * b, k * b)


def default_atol(dtype: torch.dtype, n: int) -> float:
    """``100 · n · eps(dtype)``."""
    return 100.0 * n * torch.finfo(dtype).eps
