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


# Taylor degree m per precision, for α(b) ≤ 1 (below): the remainder Σ_{k>m} α^k / k! is under the
# unit roundoff (float64: ≈ 1/19! ≈ 8e-18; float32: ≈ 1/11! ≈ 2.5e-8).
_TAYLOR_DEGREE = {torch.float64: 18, torch.float32: 10}


def expm(a: torch.Tensor) -> torch.Tensor:
    """Matrix exponential of ``a: [..., n, n]`` by scaling and squaring a Taylor polynomial.

    Scaling: the whole batch is divided by one 2^s, then the degree-m Taylor polynomial of
    b = a 2^-s is evaluated by Paterson–Stockmeyer (about 2√m products) and squared s times.
    s is the smallest with α(b) ≤ 1, where α(b) = max(‖b^p‖₁^{1/p}, ‖b^{p+1}‖₁^{1/(p+1)}) for
    p = q − 1 (q = ⌈√m⌉, so both powers are ones Paterson–Stockmeyer forms anyway): by Al-Mohy &
    Higham (SIAM J. Matrix Anal. Appl. 31, 2009, Thm 4.2) the remainder is then at most
    Σ_{k>m} α^k / k!, since p(p − 1) ≤ m + 1. α is often well below ‖b‖₁ (random skew matrices,
    n = 8 to 32: 0.4–0.6 ‖b‖₁), which saves a squaring. A matrix of the batch far smaller than
    the largest is squared more often than it needs; each squaring adds about one rounding error,
    so its absolute error stays near s·eps.

    The backward pass is written out (``_TaylorExp``): the exact reverse-mode derivative of these
    products, two products per forward product, reusing the stored powers and squares. That is
    the adjoint Fréchet derivative L(aᴴ, g) to the same truncation order as the forward value,
    at about a quarter of the cost of ``torch.linalg.matrix_exp``'s backward (an exponential of the
    2n × 2n block matrix [[aᴴ, g], [0, aᴴ]]). Second derivatives raise.

    Why not ``torch.linalg.matrix_exp``: besides speed, in torch 2.13, float64, a batch of shape
    () or (1,) of norm ≈ 0.04 loses five digits (errors ≈ 1e-11 instead of 1e-16, while batches
    of two and more are exact); the group contract tests batch shapes () and (1,).
    """
    return _TaylorExp.apply(a)


def _log2_ceil(x: float) -> int:
    """⌈log₂ x⌉ for finite x > 1, else 0 (non-finite entries propagate to the result unscaled)."""
    return math.ceil(math.log2(x)) if math.isfinite(x) and x > 1.0 else 0


class _TaylorExp(torch.autograd.Function):
    """Scaling and squaring of a Paterson–Stockmeyer Taylor polynomial, on ``[N, n, n]`` batches.

    First ``a`` is divided by 2^s₁ with ‖a 2^-s₁‖₁ ≤ 1, so its powers cannot overflow; then the
    powers are multiplied back by 2^{d k} (d ≤ s₁) where α allows, and s = s₁ − d squarings follow.
    """

    @staticmethod
    def forward(ctx, a):
        shape = a.shape
        a = a.reshape(-1, shape[-2], shape[-1])
        real = a.real.dtype if a.is_complex() else a.dtype
        layout = _TaylorLayout.of(_TAYLOR_DEGREE[real], a)
        norm = float(a.abs().sum(dim=-2).amax()) if a.numel() else 0.0  # max ‖a‖₁ over the batch
        first = _log2_ceil(norm)
        ctx.first_scale = 2.0 ** -first
        powers = layout.powers(a * ctx.first_scale if first else a)  # [q, N, n, n]
        lift = 0
        if first and a.numel():
            top = powers[-2:].abs().sum(dim=-2).amax(dim=(1, 2))  # ‖b^p‖₁, ‖b^{p+1}‖₁
            alpha = max(float(top[0]) ** (1 / (layout.q - 1)), float(top[1]) ** (1 / layout.q))
            lift = min(first, math.floor(-math.log2(alpha))) if 0.0 < alpha <= 0.5 else 0
        ctx.lift = lift
        scaled = powers * layout.lift_factors(lift, a) if lift else powers
        horner = layout.evaluate(scaled)
        squares = [horner[-1]]  # X_0 = T(b), X_{j+1} = X_j²
        for _ in range(first - lift):
            squares.append(torch.bmm(squares[-1], squares[-1]))
        ctx.layout = layout
        ctx.save_for_backward(powers, scaled, *horner[:-1], *squares[:-1])
        return squares[-1].reshape(shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        shape = grad.shape
        grad = grad.reshape(-1, shape[-2], shape[-1])
        powers, scaled, *rest = ctx.saved_tensors
        layout = ctx.layout
        blocks = len(layout.constants)
        horner, squares = rest[:blocks - 1], rest[blocks - 1:]
        for x in reversed(squares):  # Y = X X:  ḡ_X = ḡ_Y Xᴴ + Xᴴ ḡ_Y
            xh = dagger(x)
            grad = torch.baddbmm(torch.bmm(grad, xh), xh, grad)
        grad_powers = layout.evaluate_backward(scaled, horner, grad)
        if ctx.lift:
            grad_powers = grad_powers * layout.lift_factors(ctx.lift, grad)
        grad = layout.powers_backward(powers, grad_powers)
        return (grad * ctx.first_scale if ctx.first_scale != 1.0 else grad).reshape(shape)


class _TaylorLayout:
    """Paterson–Stockmeyer evaluation of p(b) = Σ_{k ≤ m} b^k / k! on ``b: [N, n, n]``, and its reverse mode.

    With q = ⌈√m⌉ and the powers b, .., b^q, the coefficients fall into blocks B_j = Σ_i c_{j,i} b^i
    (b^0 = I, highest block first) and p(b) = R_last by Horner in b^q: R_0 = B_0,
    R_j = B_j + R_{j-1} b^q. About 2√m products instead of m.
    """

    _cache = {}

    def __init__(self, degree, dtype, device):
        self.q = q = math.ceil(math.sqrt(degree))
        rows = [[1.0 / math.factorial(k) if k <= degree else 0.0 for k in range(start, start + q)]
                for start in reversed(range(0, degree + 1, q))]
        self.constants = torch.tensor([row[0] for row in rows], dtype=dtype, device=device)[:, None, None]
        self.coefficients = torch.tensor([row[1:] for row in rows], dtype=dtype, device=device)  # [J, q-1]
        self.exponents = torch.arange(1, q + 1, device=device).to(dtype)[:, None, None, None]

    @classmethod
    def of(cls, degree, like):
        key = (degree, like.dtype, like.device)
        if key not in cls._cache:
            cls._cache[key] = cls(degree, like.dtype, like.device)
        return cls._cache[key]

    def lift_factors(self, lift, like):
        """2^{lift·k} for the powers k = 1..q, shaped ``[q, 1, 1, 1]``."""
        return torch.exp2(lift * self.exponents.real).to(like.dtype)

    def powers(self, b):
        """``[q, N, n, n]``: b, b², .., b^q."""
        powers = [b]
        for _ in range(self.q - 1):
            powers.append(torch.bmm(powers[-1], b))
        return torch.stack(powers)

    def powers_backward(self, powers, grad_powers):
        """ḡ_b from ḡ of each power: b^{k+1} = b^k b gives ḡ_{b^k} += ḡ_{b^{k+1}} bᴴ, ḡ_b += (b^k)ᴴ ḡ_{b^{k+1}}."""
        grad_powers = list(grad_powers.unbind())
        b_h = dagger(powers[0])
        for k in reversed(range(1, self.q)):
            grad_powers[k - 1] = torch.baddbmm(grad_powers[k - 1], grad_powers[k], b_h)
            grad_powers[0] = torch.baddbmm(grad_powers[0], dagger(powers[k - 1]), grad_powers[k])
        return grad_powers[0]

    def evaluate(self, powers):
        """The Horner iterates R_0 .. R_last from the stacked powers; the last is p(b)."""
        blocks = torch.tensordot(self.coefficients, powers[:-1], dims=1)  # [J, N, n, n]
        blocks.diagonal(dim1=-2, dim2=-1).add_(self.constants)
        horner = [blocks[0]]
        for block in blocks[1:]:
            horner.append(torch.baddbmm(block, horner[-1], powers[-1]))
        return horner

    def evaluate_backward(self, powers, horner, grad):
        """ḡ of each power ``[q, N, n, n]`` from ḡ of p(b), given the Horner iterates but the last."""
        top = dagger(powers[-1])
        grad_top = torch.zeros_like(grad)
        grad_blocks = [grad]
        for previous in reversed(horner):  # R_j = B_j + R_{j-1} b^q: ḡ_{b^q} += R_{j-1}ᴴ ḡ, ḡ_{R_{j-1}} = ḡ (b^q)ᴴ
            grad_top = torch.baddbmm(grad_top, dagger(previous), grad)
            grad = torch.bmm(grad, top)
            grad_blocks.append(grad)
        grad_blocks = torch.stack(grad_blocks[::-1])  # [J, N, n, n], highest block first
        return torch.cat([torch.tensordot(self.coefficients.T, grad_blocks, dims=1), grad_top[None]])


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
