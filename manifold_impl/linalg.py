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

    The batch is scaled by one 2^-s so that every ‖a 2^-s‖₁ ≤ 1, the degree-m Taylor polynomial
    is evaluated by Paterson–Stockmeyer (about 2√m products), then squared s times. A matrix of
    the batch far smaller than the largest is squared more often than it needs; each squaring adds
    about one rounding error, so its absolute error stays near s·eps.

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


class _TaylorExp(torch.autograd.Function):
    """Scaling and squaring of a Paterson–Stockmeyer Taylor polynomial, on ``[N, n, n]`` batches."""

    @staticmethod
    def forward(ctx, a):
        shape = a.shape
        a = a.reshape(-1, shape[-2], shape[-1])
        real = a.real.dtype if a.is_complex() else a.dtype
        norm = float(a.abs().sum(dim=-2).amax()) if a.numel() else 0.0  # max ‖a‖₁ over the batch
        # non-finite entries: no squaring, the NaN/inf propagates to the result
        squarings = math.ceil(math.log2(norm)) if math.isfinite(norm) and norm > 1.0 else 0
        ctx.scale, ctx.layout = 2.0 ** -squarings, _TaylorLayout.of(_TAYLOR_DEGREE[real], a)
        powers, horner = ctx.layout.evaluate(a * ctx.scale if squarings else a)
        squares = [horner[-1]]  # X_0 = T(a 2^-s), X_{j+1} = X_j²
        for _ in range(squarings):
            squares.append(torch.bmm(squares[-1], squares[-1]))
        ctx.save_for_backward(powers, *horner[:-1], *squares[:-1])
        return squares[-1].reshape(shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        shape = grad.shape
        grad = grad.reshape(-1, shape[-2], shape[-1])
        powers, *rest = ctx.saved_tensors
        blocks = len(ctx.layout.coefficients)
        horner, squares = rest[:blocks - 1], rest[blocks - 1:]
        for x in reversed(squares):  # Y = X X:  ḡ_X = ḡ_Y Xᴴ + Xᴴ ḡ_Y
            xh = dagger(x)
            grad = torch.baddbmm(torch.bmm(grad, xh), xh, grad)
        grad = ctx.layout.backward(powers, horner, grad)
        return (grad * ctx.scale if ctx.scale != 1.0 else grad).reshape(shape)


class _TaylorLayout:
    """Paterson–Stockmeyer evaluation of p(b) = Σ_{k ≤ m} b^k / k! on ``b: [N, n, n]``, and its reverse mode.

    With q = ⌈√m⌉ and the powers b, .., b^q, the coefficients fall into blocks B_j = Σ_i c_{j,i} b^i
    (b^0 = I, highest block first) and p(b) = R_last by Horner in b^q: R_0 = B_0,
    R_j = B_j + R_{j-1} b^q. About 2√m products instead of m.
    """

    def __init__(self, degree, dtype, device):
        self.q = q = math.ceil(math.sqrt(degree))
        rows = []
        for start in reversed(range(0, degree + 1, q)):
            row = [1.0 / math.factorial(k) if k <= degree else 0.0 for k in range(start, start + q)]
            rows.append(row)
        self.constants = [row[0] for row in rows]  # c_{j,0}: multiples of I
        self.coefficients = torch.tensor([row[1:] for row in rows], dtype=dtype, device=device)  # [J, q-1]

    _cache = {}

    @classmethod
    def of(cls, degree, like):
        real = like.real.dtype if like.is_complex() else like.dtype
        key = (degree, real, like.device)
        if key not in cls._cache:
            cls._cache[key] = cls(degree, real, like.device)
        return cls._cache[key]

    def evaluate(self, b):
        """Returns the stacked powers ``[q, N, n, n]`` (b .. b^q) and the Horner iterates R_0 .. R_last."""
        powers = [b]
        for _ in range(self.q - 1):
            powers.append(torch.bmm(powers[-1], b))
        powers = torch.stack(powers)
        blocks = torch.tensordot(self.coefficients.to(b.dtype), powers[:-1], dims=1)  # [J, N, n, n]
        blocks.diagonal(dim1=-2, dim2=-1).add_(torch.tensor(self.constants, dtype=b.dtype,
                                                            device=b.device)[:, None, None])
        horner = [blocks[0]]
        for block in blocks[1:]:
            horner.append(torch.baddbmm(block, horner[-1], powers[-1]))
        return powers, horner

    def backward(self, powers, horner, grad):
        """ḡ_b from ḡ of p(b), given ``evaluate``'s powers and the Horner iterates but the last."""
        top = dagger(powers[-1])
        grad_top = torch.zeros_like(grad)
        grad_blocks = [grad]
        for previous in reversed(horner):  # R_j = B_j + R_{j-1} b^q: ḡ_{b^q} += R_{j-1}ᴴ ḡ, ḡ_{R_{j-1}} = ḡ (b^q)ᴴ
            grad_top = torch.baddbmm(grad_top, dagger(previous), grad)
            grad = torch.bmm(grad, top)
            grad_blocks.append(grad)
        grad_blocks = torch.stack(grad_blocks[::-1])  # [J, N, n, n], highest block first
        grad_powers = list(torch.tensordot(self.coefficients.to(grad.dtype).T, grad_blocks, dims=1).unbind())
        grad_powers.append(grad_top)
        b_h = dagger(powers[0])
        for k in reversed(range(1, self.q)):  # b^{k+1} = b^k b: ḡ_{b^k} += ḡ_{b^{k+1}} bᴴ, ḡ_b += (b^k)ᴴ ḡ_{b^{k+1}}
            grad_powers[k - 1] = torch.baddbmm(grad_powers[k - 1], grad_powers[k], b_h)
            grad_powers[0] = torch.baddbmm(grad_powers[0], dagger(powers[k - 1]), grad_powers[k])
        return grad_powers[0]


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
