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


def _truncation_theta(degree: int, roundoff: float) -> float:
    """The largest θ with Σ_{k>m} θ^k / k! ≤ roundoff (bisection; the tail sum to 60 terms)."""
    def tail(theta):
        return sum(theta ** k / math.factorial(k) for k in range(degree + 1, degree + 60))

    low, high = 0.0, 64.0
    for _ in range(100):
        low, high = ((low + high) / 2, high) if tail((low + high) / 2) <= roundoff else (low, (low + high) / 2)
    return low


# The Paterson–Stockmeyer layout (q, J) per precision: blocks of q coefficients, J blocks, degree
# m = qJ − 1, (q − 1) + (J − 1) products. θ_m: the largest α 2^-s that keeps the truncation error
# under the unit roundoff (float32: m = 8, θ = 0.65; float64: m = 15, θ = 0.68).
_LAYOUT = {torch.float32: (3, 3), torch.float64: (4, 4)}
_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}
_THETA = {dtype: _truncation_theta(q * blocks - 1, _ROUNDOFF[dtype]) for dtype, (q, blocks) in _LAYOUT.items()}
_MAX_SQUARINGS = 1100  # beyond any finite float64 norm; larger s means a non-finite input


def expm(a: torch.Tensor) -> torch.Tensor:
    """Matrix exponential of ``a: [..., n, n]`` by scaling and squaring a Taylor polynomial.

    Each matrix gets its own s: b = a 2^-s, the degree-m Taylor polynomial of b is evaluated by
    Paterson–Stockmeyer (m = 8 with 4 products in float32, m = 15 with 6 in float64), then squared
    s times. s is the smallest with α 2^-s ≤ θ_m, where α = max(‖a²‖₁^{1/2}, ‖a³‖₁^{1/3}): by
    Al-Mohy & Higham (SIAM J. Matrix Anal. Appl. 31, 2009, Thm 4.2, p = 2) the truncation error
    is then at most Σ_{k>m} θ_m^k / k!, under the unit roundoff. α is often well below ‖a‖₁
    (random skew matrices, n = 8 to 32: about half), which saves squarings. Every matrix's result
    depends on that matrix alone — bit for bit, whatever else is in the batch (a causal model's
    past outputs do not move when a later token changes); the batch runs the largest s, each
    matrix keeping its own squares.

    The backward pass is written out (``_TaylorExp``): the exact reverse-mode derivative of these
    products, two products per forward product, reusing the stored powers and squares. That is
    the adjoint Fréchet derivative L(aᴴ, g) to the same truncation order as the forward value,
    at a fraction of the cost of ``torch.linalg.matrix_exp``'s backward (an exponential of the
    2n × 2n block matrix [[aᴴ, g], [0, aᴴ]]). Second derivatives raise.

    Why not ``torch.linalg.matrix_exp``: besides speed, in torch 2.13, float64, a batch of shape
    () or (1,) of norm ≈ 0.04 loses five digits (errors ≈ 1e-11 instead of 1e-16, while batches
    of two and more are exact); the group contract tests batch shapes () and (1,).
    """
    return _TaylorExp.apply(a)


def _norms(x):
    """1-norms ``[N, 1, 1]`` of ``x: [N, n, n]``."""
    return x.abs().sum(dim=-2).amax(dim=-1)[:, None, None]


class _TaylorExp(torch.autograd.Function):
    """Scaling and squaring of a Paterson–Stockmeyer Taylor polynomial, on ``[N, n, n]`` batches.

    Per matrix: a' = a 2^-p with p = ⌈log₂ ‖a‖₁⌉⁺ (so ‖a'‖₁ ≤ 1 and its powers cannot overflow),
    P₂ = a'², P₃ = a'³, α = 2^p max(‖P₂‖^{1/2}, ‖P₃‖^{1/3}), s = ⌈log₂(α/θ)⌉⁺, and
    b_k = P_k f^k with f = 2^{p−s}, so b = a 2^-s; higher powers of b are products. All scalings
    are by powers of two, hence exact.
    """

    @staticmethod
    def forward(ctx, a):
        shape = a.shape
        a = a.reshape(-1, shape[-2], shape[-1])
        real = a.real.dtype if a.is_complex() else a.dtype
        (q, blocks), theta = _LAYOUT[real], _THETA[real]
        pre = torch.ceil(torch.log2(_norms(a).clamp(min=1.0)))  # p, [N, 1, 1]
        pre = torch.where(torch.isfinite(pre), pre, 0.0)  # non-finite input: unscaled, NaN/inf propagate
        a = a * torch.exp2(-pre).to(a.dtype)
        square = torch.bmm(a, a)
        cube = torch.bmm(square, a)
        alpha = torch.maximum(_norms(square).sqrt(), _norms(cube).pow(1 / 3))  # of a', ≤ 1
        squarings = (pre + torch.ceil(torch.log2(alpha / theta))).clamp(min=0.0)
        squarings = torch.where(torch.isfinite(squarings), squarings, 0.0).clamp(max=_MAX_SQUARINGS)
        factor = torch.exp2(pre - squarings)  # f, [N, 1, 1]
        most, scaled = (int(x) for x in torch.stack([squarings.max(), (factor != 1).any().to(factor.dtype)]).tolist()) \
            if a.numel() else (0, 0)
        powers = [a, square, cube]
        if scaled:
            powers = [x * (factor ** k).to(x.dtype) for k, x in enumerate(powers, 1)]
        while len(powers) < q:
            powers.append(torch.bmm(powers[-1], powers[0]))
        coefficients = _block_coefficients(q, blocks)
        horner = [_block(coefficients[0], powers)]
        for row in coefficients[1:]:
            horner.append(torch.baddbmm(_block(row, powers), horner[-1], powers[q - 1]))
        squares = [horner[-1]]  # X_0 = T(b), X_{j+1} = X_j² where j < s (this matrix's own s)
        for j in range(most):
            squares.append(torch.where(squarings > j, torch.bmm(squares[-1], squares[-1]), squares[-1]))
        ctx.save_for_backward(a, square, pre, squarings, factor, *powers, *horner[:-1], *squares[:-1])
        ctx.layout, ctx.scaled = (q, blocks), scaled
        return squares[-1].reshape(shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        shape = grad.shape
        grad = grad.reshape(-1, shape[-2], shape[-1])
        q, blocks = ctx.layout
        a, square, pre, squarings, factor, *rest = ctx.saved_tensors
        powers, horner, squares = rest[:q], rest[q:q + blocks - 1], rest[q + blocks - 1:]
        for j in reversed(range(len(squares))):  # Y = X X where j < s:  ḡ_X = ḡ_Y Xᴴ + Xᴴ ḡ_Y
            xh = dagger(squares[j])
            grad = torch.where(squarings > j, torch.baddbmm(torch.bmm(grad, xh), xh, grad), grad)
        coefficients = _block_coefficients(q, blocks)
        grad_powers = [None] * q
        top = dagger(powers[q - 1])
        for j in reversed(range(blocks)):  # R_j = B_j + R_{j-1} b_q, B_j = Σ_i c_{j,i} b_i
            for i, c in enumerate(coefficients[j][1:]):
                grad_powers[i] = c * grad if grad_powers[i] is None else torch.add(grad_powers[i], grad, alpha=c)
            if j:
                previous = dagger(horner[j - 1]) @ grad
                grad_powers[q - 1] = previous if grad_powers[q - 1] is None else grad_powers[q - 1] + previous
                grad = torch.bmm(grad, top)
        b_h = dagger(powers[0])
        for k in reversed(range(3, q)):  # b_{k+1} = b_k b₁ (0-based index k)
            grad_powers[k - 1] = torch.baddbmm(grad_powers[k - 1], grad_powers[k], b_h)
            grad_powers[0] = torch.baddbmm(grad_powers[0], dagger(powers[k - 1]), grad_powers[k])
        grad_a, grad_square, grad_cube = grad_powers[:3]
        if ctx.scaled:  # b_k = P_k f^k
            grad_a, grad_square, grad_cube = ((g * (factor ** k).to(g.dtype)) for k, g in
                                              enumerate(grad_powers[:3], 1))
        a_h = dagger(a)
        grad_square = torch.baddbmm(grad_square, grad_cube, a_h)  # P₃ = P₂ a'
        grad_a = torch.baddbmm(grad_a, dagger(square), grad_cube)
        grad_a = torch.baddbmm(torch.baddbmm(grad_a, grad_square, a_h), a_h, grad_square)  # P₂ = a' a'
        return (grad_a * torch.exp2(-pre).to(grad_a.dtype)).reshape(shape)


def _block_coefficients(q: int, blocks: int):
    """Taylor coefficients 1/k! of degree qJ − 1 in J rows of q (row j: powers 0..q−1 of block j), highest block first."""
    return [[1.0 / math.factorial(start + i) for i in range(q)] for start in reversed(range(0, q * blocks, q))]


def _block(row, powers):
    """Σ_i c_i b_i with b_0 = I: one Paterson–Stockmeyer block from ``powers = [b₁, .., b_q]``."""
    value = row[1] * powers[0]
    for c, power in zip(row[2:], powers[1:]):
        value = torch.add(value, power, alpha=c)
    value.diagonal(dim1=-2, dim2=-1).add_(row[0])
    return value


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
