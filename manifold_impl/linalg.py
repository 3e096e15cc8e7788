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


# Paterson–Stockmeyer layouts (q, J), cheapest first: blocks of q coefficients, J blocks, degree
# m = qJ − 1 (the largest a layout evaluates at its cost), (q − 1) + (J − 1) products.
_LAYOUTS = {torch.float32: ((3, 2), (3, 3), (4, 3), (4, 4)),
            torch.float64: ((3, 3), (4, 3), (4, 4), (5, 4), (5, 5))}
_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53}
_THETA = {dtype: [_truncation_theta(q * blocks - 1, _ROUNDOFF[dtype]) for q, blocks in layouts]
          for dtype, layouts in _LAYOUTS.items()}  # float32: 0.19, 0.65, 1.31, 2.38 (m = 5, 8, 11, 15)
_POWER_SAFE = 2.0 ** 60  # ‖a²‖₁, ‖a³‖₁ above this: scale a down first, so that powers cannot overflow


def expm(a: torch.Tensor) -> torch.Tensor:
    """Matrix exponential of ``a: [..., n, n]`` by scaling and squaring a Taylor polynomial.

    b = a 2^-s, the Taylor polynomial of degree m of b is evaluated by Paterson–Stockmeyer, and
    squared s times. One (m, s) serves the whole batch, chosen from
    α = max(‖a²‖₁^{1/2}, ‖a³‖₁^{1/3}) (batch maximum): by Al-Mohy & Higham (SIAM J. Matrix Anal.
    Appl. 31, 2009, Thm 4.2, p = 2) the truncation error is at most Σ_{k>m} (α 2^-s)^k / k!, which
    is below the unit roundoff when α 2^-s ≤ θ_m (``_THETA``). Among the layouts, the one with the
    fewest products (Paterson–Stockmeyer's plus the s squarings) wins: small arguments get a
    degree-5 polynomial and three products in float32; α is also often well below ‖a‖₁ (random
    skew matrices, n = 8 to 32: about half), which saves squarings. A matrix of the batch far
    smaller than the largest is squared more often than it needs; each squaring adds about one
    rounding error, so its absolute error stays near s·eps.

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


def _log2_ceil(x: float) -> int:
    """⌈log₂ x⌉ for finite x > 1, else 0."""
    return math.ceil(math.log2(x)) if math.isfinite(x) and x > 1.0 else 0


def _max_norms(*matrices):
    """Batch maxima of the 1-norms of each ``[N, n, n]`` argument, as Python floats (one sync)."""
    if not matrices[0].numel():
        return [0.0] * len(matrices)
    return torch.stack([m.abs().sum(dim=-2).amax() for m in matrices]).tolist()


def _choose_layout(real, alpha):
    """(q, J, s) with α 2^-s ≤ θ of the layout and the fewest products; non-finite α: the largest, s = 0."""
    layouts = _LAYOUTS[real]
    if not math.isfinite(alpha):
        return (*layouts[-1], 0)
    best = None
    for (q, blocks), theta in zip(layouts, _THETA[real]):
        s = _log2_ceil(alpha / theta)
        cost = (q - 1 + blocks - 1 + s, s)
        if best is None or cost < best[0]:
            best = (cost, (q, blocks, s))
    return best[1]


class _TaylorExp(torch.autograd.Function):
    """Scaling and squaring of a Paterson–Stockmeyer Taylor polynomial, on ``[N, n, n]`` batches.

    Names: a' = a 2^-pre (pre = 0 unless a's powers could overflow), P₂ = a'², P₃ = a'³;
    b_k = (a' 2^-s)^k, so b₁, b₂, b₃ are P₁, P₂, P₃ times 2^{-sk} and higher powers are products.
    """

    @staticmethod
    def forward(ctx, a):
        shape = a.shape
        a = a.reshape(-1, shape[-2], shape[-1])
        real = a.real.dtype if a.is_complex() else a.dtype
        pre = 0
        square = torch.bmm(a, a)
        cube = torch.bmm(square, a)
        norms = _max_norms(square, cube)
        if not all(math.isfinite(x) and x <= _POWER_SAFE for x in norms):
            pre = max(0, _log2_ceil(_max_norms(a)[0]) - 4)  # ‖a'‖₁ ≤ 16
            if pre:
                a = a * 2.0 ** -pre
                square = torch.bmm(a, a)
                cube = torch.bmm(square, a)
                norms = _max_norms(square, cube)
        alpha = max(norms[0] ** 0.5, norms[1] ** (1 / 3)) if all(math.isfinite(x) for x in norms) else math.inf
        q, blocks, s = _choose_layout(real, alpha)
        powers = [a, square, cube] if not s else [x * 2.0 ** (-s * k) for k, x in enumerate((a, square, cube), 1)]
        while len(powers) < q:
            powers.append(torch.bmm(powers[-1], powers[0]))
        coefficients = _block_coefficients(q, blocks)
        horner = [_block(coefficients[0], powers)]
        for row in coefficients[1:]:
            horner.append(torch.baddbmm(_block(row, powers), horner[-1], powers[q - 1]))
        squares = [horner[-1]]  # X_0 = T(b), X_{j+1} = X_j²
        for _ in range(s + pre):
            squares.append(torch.bmm(squares[-1], squares[-1]))
        ctx.layout, ctx.scales = (q, blocks, s), (pre, s)
        ctx.save_for_backward(a, square, *powers, *horner[:-1], *squares[:-1])
        return squares[-1].reshape(shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        shape = grad.shape
        grad = grad.reshape(-1, shape[-2], shape[-1])
        (q, blocks, s), (pre, _) = ctx.layout, ctx.scales
        a, square, *rest = ctx.saved_tensors
        powers, horner, squares = rest[:q], rest[q:q + blocks - 1], rest[q + blocks - 1:]
        for x in reversed(squares):  # Y = X X:  ḡ_X = ḡ_Y Xᴴ + Xᴴ ḡ_Y
            xh = dagger(x)
            grad = torch.baddbmm(torch.bmm(grad, xh), xh, grad)
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
        grad_a, grad_square, grad_cube = (g * 2.0 ** (-s * k) if s else g for k, g in enumerate(grad_powers[:3], 1))
        a_h = dagger(a)
        grad_square = torch.baddbmm(grad_square, grad_cube, a_h)  # P₃ = P₂ a'
        grad_a = torch.baddbmm(grad_a, dagger(square), grad_cube)
        grad_a = torch.baddbmm(torch.baddbmm(grad_a, grad_square, a_h), a_h, grad_square)  # P₂ = a' a'
        return (grad_a * 2.0 ** -pre if pre else grad_a).reshape(shape)


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
