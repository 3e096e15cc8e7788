"""Matrix helpers for the torch groups and models. Mirror of ``reference/linalg.py``.

Shapes as in the reference: ``x: [..., n, n]`` with leading batch axes.
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction

import torch


def dagger(x: torch.Tensor) -> torch.Tensor:
    """``x^H`` of the last two axes."""
    return x.transpose(-1, -2).conj()


def polar_newton_schulz(m: torch.Tensor, steps: int) -> torch.Tensor:
    """The unitary polar factor of ``m: [..., n, n]`` by ``steps`` Newton–Schulz iterations (fixed
    count, no host read); mirror of ``reference.linalg.polar_newton_schulz``."""
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
    p = m
    for _ in range(steps):
        p = p @ (1.5 * eye - 0.5 * (dagger(p) @ p))
    return p


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


# Taylor polynomials evaluated with few products (Bader, Blanes & Casas, "Computing the matrix
# exponential with an optimized Taylor polynomial approximation", Mathematics 7 (2019) 1174; the
# values of torch's matrix_exp). Both share one form: with rows L, R, D, E, F of the table, each a
# combination of the powers (I, b, b², b³[, b⁶]),
#     inner = L·R + D,   T(b) = E + (F + inner)·inner,
# which multiplies out to Σ_{k≤m} b^k/k! exactly (tested coefficient by coefficient).
# Degree 12 in 4 products (b², b³, L·R, the last): L = R, so inner = A₆ of the paper.
_T12 = (
    (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079, -0.00675951846863086359),
    (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079, -0.00675951846863086359),
    (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968, 0.00610700528898058230),
    (9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740),
    (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031, 0.01108844528519167989),
)
# Degree 18 in 5 products (b², b³, b⁶ = b³b³, L·R, the last): inner = A₉ of the paper.
_T18 = (
    (0.0, -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.0),
    (0.0, 0.0, -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05),
    (-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05),
    (0.0, 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04),
    (-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05),
)
# Per precision the cheaper one: float32 degree 12 (θ = 1.56), float64 degree 18 (θ = 1.14; degree
# 12 would need θ = 0.34, about two more squarings). θ: the largest α 2^-s whose truncation error
# stays under the unit roundoff.
_DEGREE = {torch.float32: 12, torch.float64: 18}
_TABLE = {12: _T12, 18: _T18}
_THETA = {torch.float32: _truncation_theta(12, 2.0 ** -24), torch.float64: _truncation_theta(18, 2.0 ** -53)}
_MAX_SQUARINGS = 1100  # beyond any finite float64 norm; larger s means a non-finite input
# Squarings on a device other than the CPU, where reading s back would stall the host: every call
# runs this many, each matrix masked to its own s; α up to θ·2^10 (≈ 1600 in float32, 1170 in
# float64, rotation angles no trained recurrence takes in one step) is exact, beyond it the result is NaN.
_DEVICE_SQUARINGS = 10
_FIXED_COUNT = _DEVICE_SQUARINGS  # what the fixed path runs (``_fixed_count``); torch.compile guards on it


@contextlib.contextmanager
def _fixed_count(count):
    """Within: the fixed path runs ``count`` squarings (≤ ``_DEVICE_SQUARINGS``), NaN where a matrix needs
    more. A compiled function that traced it runs the count it was traced with and is traced anew for
    another (code that reads the need back, where that costs nothing, and runs the least count)."""
    global _FIXED_COUNT
    before, _FIXED_COUNT = _FIXED_COUNT, count
    try:
        yield
    finally:
        _FIXED_COUNT = before


def expm(a: torch.Tensor, fixed_squarings: bool | None = None) -> torch.Tensor:
    """Matrix exponential of ``a: [..., n, n]`` by scaling and squaring a Taylor polynomial.

    Each matrix gets its own s: b = a 2^-s, the Taylor polynomial of b of degree m is evaluated
    with few products (Bader, Blanes & Casas 2019, the schemes of ``torch.linalg.matrix_exp``;
    float32: m = 12 in 4 products, float64: m = 18 in 5), then squared s times. s is the smallest
    with α 2^-s ≤ θ_m, where α = max(‖a²‖₁^{1/2}, ‖a³‖₁^{1/3}): by Al-Mohy & Higham (SIAM J.
    Matrix Anal. Appl. 31, 2009, Thm 4.2, p = 2) the truncation error is then at most
    Σ_{k>m} θ_m^k / k!, under the unit roundoff. α is often well below ‖a‖₁ (random skew
    matrices, n = 8 to 32: about half), which saves squarings. Every matrix's result depends on
    that matrix alone — bit for bit, whatever else is in the batch (a causal model's past outputs
    do not move when a later token changes); the batch runs the largest s, each matrix keeping its
    own squares.

    Accuracy for long products (float32). A group RNN multiplies thousands of these factors; an
    orthogonality error of one sign in each adds up linearly, random ones partly cancel. Two
    sources are removed (measured on the O(8) RNN's factors: tr(XᴴX − I) per factor had mean
    +4.9e-8 and spread 3.4e-7; now −2e-10 and 1.0e-7, against 9e-8 for the correctly rounded
    exponential; max|HᴴH − I| after 10,000 steps 7e-5 -> 1.2e-5). (1) The table rounded to float32
    evaluates a polynomial T with |T(iφ)|² − 1 ≈ 6e-8 φ² on the eigenvalues iφ of a skew b: two
    entries are tuned in their last places so that it is zero to order φ⁴ (``_coefficients``).
    (2) The polynomial and its squarings carry Y = X − I, not X (the table's identity parts
    multiplied out by hand, X² − I = 2Y + Y²), so rounding is relative to Y, and X = I + Y is
    rounded once at the end, instead of rounding sums with diagonals near 5.5 on the way. Every
    product is a plain ``bmm`` and every sum is rounded after it, so the accuracy does not depend
    on how a BLAS fuses an addend into its products (MKL's ``baddbmm`` on AMD EPYC: spread 1.87×
    the correctly rounded floor for O(8), against 1.37× with ``bmm`` then add).

    The backward pass is written out (``_TaylorExp``): the exact reverse-mode derivative of these
    products, two products per forward product, reusing the stored intermediates. That is the
    adjoint Fréchet derivative L(aᴴ, g) to the same truncation order as the forward value, at a
    fraction of the cost of ``torch.linalg.matrix_exp``'s backward (an exponential of the
    2n × 2n block matrix [[aᴴ, g], [0, aᴴ]]). Second derivatives raise.

    Squarings without a host read. On the CPU the loop runs to the largest s, read back (free
    there); elsewhere (``fixed_squarings``, default: on any device but the CPU, and wherever
    ``torch.compile`` traces the call, which cannot follow a count read back) it runs
    ``_DEVICE_SQUARINGS`` times, so a call never waits for the device, and a matrix that needs more
    gives NaN instead of an inexact result (a training loop's finiteness check sees it). Both give
    the same bits for every matrix within the bound: the extra squarings are masked per matrix.

    Why not ``torch.linalg.matrix_exp``: besides speed, in torch 2.13, float64, a batch of shape
    () or (1,) of norm ≈ 0.04 loses five digits (errors ≈ 1e-11 instead of 1e-16, while batches
    of two and more are exact); the group contract tests batch shapes () and (1,).
    """
    return _TaylorExp.apply(a, _fixed_squarings(a) if fixed_squarings is None else fixed_squarings)


def _fixed_squarings(a):
    """``expm``'s default: a fixed count on any device but the CPU and wherever torch.compile traces."""
    return a.device.type != "cpu" or torch.compiler.is_compiling()


def _expm_saving(a):
    """``(expm(a), saved)`` for ``a: [..., n, n]``, the same bits, without autograd: ``saved`` (a tuple
    of tensors) is what ``_expm_vjp`` needs (code that writes out its own backward)."""
    result, saved, _ = _taylor_exp(a.reshape(-1, a.shape[-2], a.shape[-1]), _fixed_squarings(a))
    return result.view(a.shape) if result.shape != a.shape else result, saved


def _expm_vjp(saved, grad):
    """ḡ_a of ``_expm_saving``'s exponential for ``grad = ḡ: [..., n, n]`` (``expm``'s backward)."""
    return _taylor_exp_vjp(saved, grad.reshape(-1, grad.shape[-2], grad.shape[-1])).reshape(grad.shape)


def _norms(x):
    """1-norms ``[..., 1, 1]`` of ``x: [..., n, n]``."""
    return x.abs().sum(dim=-2).amax(dim=-1)[..., None, None]


def _increment_polynomial(rows, scalars, degree):
    """The polynomial Y(x) = T(x) − 1 that ``_TaylorExp`` evaluates, as exact fractions [y_0, y_1, ..].

    Args:
        rows: L, R, D₁, E₁, F₁ (the table's rows, D, E, F without their I terms) as coefficient
            lists over the exponents (0, 1, 2, 3[, 6]).
        scalars: (c, d₀) with c = f₀ + d₀, the I coefficients of F and D.
        degree: 12 or 18.

    With N = L·R + D₁ and M = F₁ + N the scheme's T = e₀ + (c + M)(d₀ + N), and e₀ + c d₀ = 1, so
    Y = E₁ + c·N + d₀·M + M·N.
    """
    exponents = (0, 1, 2, 3, 6) if degree == 18 else (0, 1, 2, 3)
    size = 4 * exponents[-1] + 1  # M·N has degree 4 × the highest power

    def polynomial(row):
        out = [Fraction(0)] * size
        for coefficient, k in zip(row, exponents):
            out[k] += Fraction(coefficient)
        return out

    def times(p, q):
        out = [Fraction(0)] * size
        for i, x in enumerate(p):
            for j, y in enumerate(q[:size - i]):
                out[i + j] += x * y
        return out

    def plus(*terms):
        return [sum(column) for column in zip(*terms)]

    left, right, addend, outer, shift = (polynomial(row) for row in rows)
    c, d0 = (Fraction(x) for x in scalars)
    inner = plus(times(left, right), addend)
    shifted = plus(shift, inner)
    return plus(outer, [c * x for x in inner], [d0 * x for x in shifted], times(shifted, inner))


def _unit_modulus_defect(rows, scalars, degree, m):
    """q_m, the coefficient of φ^{2m} in |T(iφ)|² − 1 for the scheme's T = 1 + Y (exact fraction)."""
    y = _increment_polynomial(rows, scalars, degree)
    t = [1 + y[0]] + y[1:]
    return sum((-1) ** (i + m) * t[i] * t[2 * m - i] for i in range(2 * m + 1))


def _tuned_scheme(degree, real):
    """The scheme of ``degree`` in the real dtype ``real``: ``(rows, (c, d₀))``, the five rows
    ``[I, b, b², b³(, b⁶)]`` as Python floats and the two scalars.

    Rows L, R, D₁, E₁, F₁: the table rounded to the working precision, D, E, F without their I
    terms, which become c = f₀ + d₀ and d₀ (see ``_increment_polynomial``). Rounding moves the
    polynomial T = 1 + Y that the scheme evaluates off the Taylor coefficients (float32, degree
    12: by 1e-8 to 3e-8 relative). For skew b what matters is |T(iφ)|² = 1 + Σ_m q_m φ^{2m} on the
    eigenvalues iφ of b: the rounded table has q₁ = 6e-8, q₂ = 2e-8, an orthogonality error of one
    sign in every factor, which a product of thousands of factors adds up linearly. Two entries
    are moved by tens to a few hundred units in their last place, to the representable values
    that zero q₁ and then q₂, each computed exactly (q_m is affine in each): F₁'s b² coefficient
    (it enters q₁ through y₂ only, with weight ≈ d₀) and R's b³ coefficient (with L's, equal at
    degree 12; it enters no y_k below k = 4, so it leaves q₁ alone). Float32: q₃ = 3e-9, the
    rest smaller (tested: |T(iφ)|² − 1 ≤ 4e-9 for φ ≤ 1).
    """
    rounded = torch.tensor(_TABLE[degree], dtype=real).tolist()
    left, right, addend, outer, shift = rounded
    d0 = addend[0]
    scalars = (torch.tensor(shift[0] + d0, dtype=real).item(), d0)  # c, d₀
    rows = [left, right, [0.0] + addend[1:], [0.0] + outer[1:], [0.0] + shift[1:]]
    for order, places in ((1, [(4, 2)]), (2, [(1, 3)] + ([(0, 3)] if degree == 12 else []))):  # R = L at 12
        value = rows[places[0][0]][places[0][1]]
        before = _unit_modulus_defect(rows, scalars, degree, order)
        for row, column in places:
            rows[row][column] = value + 1.0
        step = Fraction(value + 1.0) - Fraction(value)  # 1 up to the rounding of value + 1
        slope = (_unit_modulus_defect(rows, scalars, degree, order) - before) / step
        tuned = torch.tensor(float(Fraction(value) - before / slope), dtype=real).item()
        for row, column in places:
            rows[row][column] = tuned
    return rows, scalars


_SCHEMES = {real: _tuned_scheme(degree, real) for real, degree in _DEGREE.items()}  # at import: nothing traced
_SCHEMES.update({torch.complex64: _SCHEMES[torch.float32], torch.complex128: _SCHEMES[torch.float64]})
_TABLES = {}  # (dtype, device) -> the scheme's rows as tensors there, built on first use


def _coefficients(dtype, device):
    """The scheme in ``dtype`` on ``device``: ``([5, k], [5], (c, d₀))``, the coefficients of the k
    powers and of I, and the scalars (``_tuned_scheme``); the tensors are built once per device
    (outside traced code)."""
    rows, scalars = _SCHEMES[dtype]
    if (dtype, device) in _TABLES:
        return (*_TABLES[dtype, device], scalars)
    table = torch.tensor(rows, dtype=dtype, device=device)
    tables = (table[:, 1:].contiguous(), table[:, 0].contiguous())
    if not torch.compiler.is_compiling():  # traced code cannot fill the cache: then built in the graph
        _TABLES[dtype, device] = tables
    return (*tables, scalars)


def _combine(coefficients, tensors):
    """``Σ_j coefficients[:, j] · tensors[j]``: ``[r, k]`` and k tensors ``[N, n, n]`` -> ``[r, N, n, n]``.

    Elementwise products and sums only (no matrix product across the batch), so every matrix's
    result is rounded the same whatever its batch-mates.
    """
    total = coefficients[:, 0, None, None, None] * tensors[0]
    for j in range(1, len(tensors)):
        total = total + coefficients[:, j, None, None, None] * tensors[j]
    return total


def _taylor_exp(a, fixed):
    """``(exp(a), saved, least)`` for ``a: [N, n, n]`` by the scheme of ``_TaylorExp`` (read there):
    ``saved``, a tuple of tensors, and ``least``, the squarings every matrix ran, are what
    ``_taylor_exp_vjp`` needs. ``fixed``: ``_DEVICE_SQUARINGS`` for all (``_fixed_count``), NaN where a
    matrix needs more; else the batch's largest count, read back."""
    real = a.real.dtype if a.is_complex() else a.dtype
    degree = _DEGREE[real]
    norm = _norms(a)
    pre = torch.where(torch.isfinite(norm), torch.frexp(norm)[1], 0).clamp(min=0).to(real)  # p
    a = a * torch.exp2(-pre).to(a.dtype)
    square = torch.bmm(a, a)
    cube = torch.bmm(square, a)
    alpha = torch.maximum(_norms(square).sqrt(), _norms(cube).pow(1 / 3))  # of a', ≤ 1
    squarings = (pre + torch.ceil(torch.log2(alpha / _THETA[real])))
    squarings = squarings.nan_to_num(nan=0.0, posinf=0.0).clamp(min=0.0, max=_MAX_SQUARINGS)
    factor = torch.exp2(pre - squarings)  # f, [N, 1, 1]
    if fixed:  # no read-back: _FIXED_COUNT for all, NaN where a matrix needs more
        most, least = _FIXED_COUNT, 0
    else:
        most, least = (int(x) for x in torch.stack([squarings.max(), squarings.min()]).tolist()) \
            if a.numel() else (0, 0)
    f = factor.to(a.dtype)
    b, b_square = a * f, square * f * f  # one factor at a time: f³ may overflow where b³ does not
    cube_b = cube * f * f * f
    powers = [b, b_square, cube_b] + ([torch.bmm(cube_b, cube_b)] if degree == 18 else [])
    combination, identity, (c, d0) = _coefficients(a.dtype, a.device)
    terms = _combine(combination, powers)  # L, R, D₁, E₁, F₁ without their I terms
    terms.diagonal(dim1=-2, dim2=-1).add_(identity[:, None, None])
    left, right, addend, outer, shift = terms.unbind()
    left = left.clone()  # saved alone, not as a view that keeps all five alive
    right = left if degree == 12 else right.clone()  # the degree-12 scheme squares L (R = L)
    # bmm, then add (not baddbmm, whose addend some BLAS kernels fold into the FMA chain)
    inner = torch.add(torch.bmm(left, right), addend)  # N (saved: out of place, as torch.compile needs)
    shifted = shift + inner  # M
    increments = [torch.add(torch.bmm(shifted, inner), torch.add(outer, inner, alpha=c).add_(shifted, alpha=d0))]
    # Y₀ = T(b) − I, Y_{j+1} = 2Y_j + Y_j² where j < s
    for j in range(most):
        # (baddbmm with beta ≠ 1 takes a slow path on the CPU, up to 10× at n = 24)
        product = torch.add(torch.bmm(increments[-1], increments[-1]), increments[-1], alpha=2.0)
        increments.append(product if j < least else torch.where(squarings > j, product, increments[-1]))
    result = increments[-1].clone()
    result.diagonal(dim1=-2, dim2=-1).add_(1.0)
    if fixed:
        result = torch.where(squarings > most, torch.nan, result)
    return result, (b, b_square, cube_b, squarings, left, right if degree == 18 else None, inner, shifted,
                    *increments[:-1]), least


def _taylor_exp_vjp(saved, grad, least=0):
    """ḡ_a of ``_taylor_exp``'s ``(exp(a), saved)`` for ``grad = ḡ: [N, n, n]``: the reverse of every
    product, two per forward product. ``least``: squarings every matrix ran (none masked)."""
    b, b_square, cube_b, squarings, left, right, inner, shifted, *increments = saved
    right = left if right is None else right  # degree 12: R = L, saved once
    for j in reversed(range(len(increments))):  # Y' = 2Y + Y Y where j < s: ḡ_Y = 2ḡ + ḡ Yᴴ + Yᴴ ḡ
        yh = dagger(increments[j])
        step = torch.baddbmm(torch.bmm(grad, yh).add_(grad, alpha=2.0), yh, grad)
        grad = step if j < least else torch.where(squarings > j, step, grad)
    combination, _, (c, d0) = _coefficients(grad.dtype, grad.device)
    grad_shift = torch.bmm(grad, dagger(inner)).add_(grad, alpha=d0)  # Y₀ = .. + d₀ M + M N
    grad_inner = torch.baddbmm(grad_shift, dagger(shifted), grad).add_(grad, alpha=c)  # .. + c N, M = F₁ + N
    grad_terms = [torch.bmm(grad_inner, dagger(right)), torch.bmm(dagger(left), grad_inner),
                  grad_inner, grad, grad_shift]  # N = L R + D₁
    grad_powers = list(_combine(combination.T, grad_terms).unbind())
    if len(grad_powers) == 4:  # degree 18: b⁶ = b³ b³
        cube_h = dagger(cube_b)
        grad_powers[2] = torch.baddbmm(torch.baddbmm(grad_powers[2], grad_powers[3], cube_h), cube_h,
                                       grad_powers[3])
    grad_b, grad_square, grad_cube = grad_powers[:3]  # through b³ = b² b and b² = b b, exact
    b_h = dagger(b)  # products of the scaled powers (scaling by 2^-s commutes with rounding)
    grad_square = torch.baddbmm(grad_square, grad_cube, b_h)
    grad_b = torch.baddbmm(grad_b, dagger(b_square), grad_cube)
    grad_b = torch.baddbmm(torch.baddbmm(grad_b, grad_square, b_h), b_h, grad_square)
    return grad_b * torch.exp2(-squarings).to(grad_b.dtype)  # b = a 2^-s


class _TaylorExp(torch.autograd.Function):
    """Scaling and squaring of a Taylor polynomial (``_DEGREE``, ``_TABLE``), on ``[..., n, n]``
    (``_taylor_exp`` and ``_taylor_exp_vjp`` on ``[N, n, n]``).

    Per matrix: a' = a 2^-p with p ≥ 0 the exponent of ‖a‖₁ (so ‖a'‖₁ ≤ 1 and its powers cannot
    overflow), P₂ = a'², P₃ = a'³, α = 2^p max(‖P₂‖^{1/2}, ‖P₃‖^{1/3}), s = ⌈log₂(α/θ)⌉⁺, and
    b_k = P_k f^k with f = 2^{p−s}, so b = a 2^-s (degree 18 also b⁶ = b³ b³). All scalings are
    by powers of two, hence exact. Then (``_coefficients``, ``_increment_polynomial``)
    N = L·R + D₁, M = F₁ + N, Y₀ = E₁ + c·N + d₀·M + M·N = T(b) − I, the squarings
    Y_{j+1} = 2Y_j + Y_j² = (I + Y_j)² − I, and exp(a) = I + Y_s.
    The backward pass runs through the scaled powers (b² = b b and b³ = b² b hold exactly), so
    the large factors 2^p of a' never meet a gradient.
    """

    @staticmethod
    def forward(ctx, a, fixed):
        result, saved, ctx.least = _taylor_exp(a.reshape(-1, a.shape[-2], a.shape[-1]), fixed)
        ctx.save_for_backward(*saved)
        return result.reshape(a.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        flat = grad.reshape(-1, grad.shape[-2], grad.shape[-1])
        return _taylor_exp_vjp(ctx.saved_tensors, flat, ctx.least).reshape(grad.shape), None


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


def special_unitary_polar(m: torch.Tensor) -> torch.Tensor:
    """Closest special unitary matrix W diag(e^{iθ}) V^H to a complex ``m = W diag(σ) V^H``, with
    the phases found by bisection on Θ(t) (derivation in the reference). Forward only."""
    w, s, vh = torch.linalg.svd(m)
    target = -torch.angle(torch.linalg.det(w @ vh))  # [...], in [−π, π]
    positive = s > 0
    rho = torch.where(positive, s[..., -1:] / torch.where(positive, s, torch.ones_like(s)),
                      torch.zeros_like(s))[..., :-1]  # [..., n−1]
    goal = target.abs()[..., None]

    def total_phase(t):  # Θ(t), t: [..., 1]
        return t + torch.asin(rho * torch.sin(t)).sum(-1, keepdim=True)

    low, high = torch.zeros_like(goal), torch.full_like(goal, math.pi)
    for _ in range(_bisection_steps(s.dtype)):
        middle = 0.5 * (low + high)
        below = total_phase(middle) < goal
        low, high = torch.where(below, middle, low), torch.where(below, high, middle)
    others = torch.asin(rho * torch.sin(torch.sign(target)[..., None] * 0.5 * (low + high)))  # [..., n−1]
    theta = torch.cat([others, target[..., None] - others.sum(-1, keepdim=True)], dim=-1)
    return (w * torch.polar(torch.ones_like(theta), theta)[..., None, :]) @ vh


def _bisection_steps(dtype):
    """Halvings of [0, π] down to the rounding of ``dtype``: mantissa bits + 3."""
    return math.ceil(-math.log2(torch.finfo(dtype).eps)) + 3


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
